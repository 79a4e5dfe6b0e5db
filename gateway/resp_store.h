/* resp_store.h — stored responses of the OpenAI Responses API, in SQLite.
 *
 * POST /v1/responses with `store` (the default) keeps the response object,
 * the input items it was made from, and the whole conversation up to and
 * including its output (what `previous_response_id` continues from), so
 * GET /v1/responses/{id}, GET …/input_items, DELETE and continuation work
 * across gateway restarts — a kill -9 included.
 *
 * One table in one file (`<state-dir>/responses.sqlite3`, or ":memory:"):
 *
 *   responses(id TEXT PRIMARY KEY,  "resp_…"
 *             owner TEXT,           who made it: the SHA-256 hex of the API key,
 *                                   or RESP_STORE_ANON without a keys file
 *             created_s INTEGER,    Unix seconds
 *             response TEXT,        the response object (JSON)
 *             input TEXT,           its own input items (JSON array)
 *             context TEXT,         conversation items for continuation (JSON array)
 *             bytes INTEGER)        length of the three texts
 *
 * Every lookup is by (id, owner): one key never reads, continues or deletes
 * another key's responses (it gets "not found", as for an id never made).
 *
 * Durability and sharing: the file is in WAL mode with synchronous=NORMAL —
 * a committed row survives the process being killed (only a power loss may
 * lose the last transactions). Several gateways may share one file: writes
 * run in BEGIN IMMEDIATE transactions and every connection waits up to
 * busy_timeout_ms for the lock instead of failing, so concurrent writers
 * serialize and the file never corrupts. Within one process a handle is
 * used by many HTTP threads; a mutex serializes them.
 *
 * Bounds: rows older than max_age_s are deleted at each put and never
 * returned; when the stored bytes exceed max_bytes the oldest rows are
 * deleted until they are down to 90% of it (a table `totals`, kept by
 * triggers, holds the running sum, so a put under the cap reads one row). A single response larger than max_bytes is not
 * stored (resp_store_put returns 1).
 *
 * Return codes (every call that can fail):
 *    0  done / found
 *    1  not found (get, delete), too large (put)
 *   -1  SQLite error (logged with its message; err filled when given)
 */
#ifndef PAGODA_GATEWAY_RESP_STORE_H
#define PAGODA_GATEWAY_RESP_STORE_H

#include <stddef.h>
#include <stdint.h>

#define RESP_STORE_FILE "responses.sqlite3"     /* under --state-dir */
#define RESP_STORE_ANON "anonymous"             /* owner of every row without --keys */
#define RESP_STORE_DEFAULT_MAX_AGE_S (30 * 86400) /* --responses-max-age */
#define RESP_STORE_DEFAULT_MAX_BYTES (1LL << 30)  /* --responses-max-bytes */
#define RESP_STORE_DEFAULT_BUSY_MS 5000

typedef struct resp_store_config {
    int64_t max_age_s;   /* rows older than this are deleted, 0 = default */
    int64_t max_bytes;   /* total stored bytes, oldest deleted beyond, 0 = default */
    int busy_timeout_ms; /* how long to wait for another connection's lock, 0 = default */
} resp_store_config_t;

/* One stored response; the strings are malloc'd (resp_store_row_free). */
typedef struct resp_store_row {
    char *response;      /* the response object, JSON */
    char *input;         /* its input items, JSON array */
    char *context;       /* conversation items through its output, JSON array */
    int64_t created_s;
} resp_store_row_t;

typedef struct resp_store resp_store_t;

/* Opens (creating when missing) the database at `path` — a file path, or
 * ":memory:" for a private in-memory store — sets WAL mode and the busy
 * timeout, creates the table. Returns 0 with *out set (resp_store_close), or
 * -1 with err filled and *out NULL. */
int resp_store_open(const char *path, const resp_store_config_t *cfg, resp_store_t **out, char *err,
                    size_t errlen);

/* Closes the database and NULLs *s. NULL-safe. */
void resp_store_close(resp_store_t **s);

/* Stores (or replaces) response `id` of `owner`, made at now_s. Strings are
 * copied. Deletes expired rows first and the oldest rows while over
 * max_bytes. Returns 0, 1 when the row alone exceeds max_bytes (nothing
 * stored), -1 on error. */
int resp_store_put(resp_store_t *s, const char *id, const char *owner, int64_t now_s,
                   const char *response, const char *input, const char *context, char *err,
                   size_t errlen);

/* Fetches response `id` of `owner` unless it is older than max_age at
 * now_s. Returns 0 with *row filled, 1 when there is none, -1 on error. */
int resp_store_get(resp_store_t *s, const char *id, const char *owner, int64_t now_s,
                   resp_store_row_t *row);

/* Deletes response `id` of `owner`. Returns 0, 1 when there is none, -1. */
int resp_store_delete(resp_store_t *s, const char *id, const char *owner);

/* Rows and bytes stored now (all owners, expired rows not yet deleted
 * included). Returns 0, -1 on error. */
int resp_store_stats(resp_store_t *s, int64_t *n_rows, int64_t *n_bytes);

/* Frees the row's strings and zeroes it. NULL-safe. */
void resp_store_row_free(resp_store_row_t *row);

#endif
