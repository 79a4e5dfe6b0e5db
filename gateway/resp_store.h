/* resp_store.h — stored responses of the OpenAI Responses API, in SQLite.
 *
 * POST /v1/responses with `store` (the default) keeps the response object,
 * the input items it was made from, and what continues it
 * (`previous_response_id`), so GET /v1/responses/{id}, GET …/input_items,
 * DELETE and continuation work across gateway restarts — a kill -9 included.
 *
 * One file (`<state-dir>/responses.sqlite3`, or ":memory:"), schema
 * version 2 (PRAGMA user_version; a version-1 file is migrated at open):
 *
 *   responses(id TEXT PRIMARY KEY,  "resp_…"
 *             owner TEXT,           who made it: the SHA-256 hex of the API key,
 *                                   or RESP_STORE_ANON without a keys file
 *             created_s INTEGER,    Unix seconds
 *             response TEXT,        the response object (JSON), its output included
 *             input TEXT,           its own input items (JSON array)
 *             prefix TEXT,          conversation items before its input that its
 *                                   parent does not hold (JSON array; "[]" when it
 *                                   has a parent)
 *             parent TEXT,          previous_response_id it continued, or NULL
 *             depth INTEGER,        links to its chain's root (0 = no parent)
 *             gone INTEGER,         1: deleted by its owner but kept, hidden, while
 *                                   responses continuing it need its items
 *             bytes INTEGER)        length of response + input + prefix
 *   owners(owner, bytes, n)         per owner: stored bytes and rows (triggers)
 *   totals(k = 0, bytes)            all owners' bytes (triggers)
 *
 * Chains as deltas. A response's conversation (what previous_response_id
 * continues) is its parent's conversation + prefix + input + the output of
 * its response object: each step stores only what it adds, so a chain of
 * n steps costs O(n) bytes, not O(n²). Loading one walks parent links from
 * the response to its root: at most RESP_STORE_MAX_DEPTH links (a step
 * that would go deeper, or whose parent is no longer there when it is
 * written, stores its whole conversation as its prefix and starts a new
 * chain).
 *
 * Every lookup is by (id, owner): one key never reads, continues or deletes
 * another key's responses (it gets "not found", as for an id never made).
 *
 * Writes never block the caller's thread: one writer thread per handle
 * takes puts and deletes from a bounded queue (RESP_STORE_QUEUE) and runs
 * each in a BEGIN IMMEDIATE transaction on its own connection; reads use
 * another connection (WAL: a reader never waits for a writer, ours or
 * another process's). A job waits for the write lock at most busy_timeout_ms
 * from the moment it was queued, then fails with RESP_STORE_BUSY; a full
 * queue fails at once the same way. resp_store_submit returns at once and
 * calls back; resp_store_put / _delete wait for their job (tests, tools).
 *
 * Durability and sharing: WAL mode, synchronous=NORMAL — a committed row
 * survives the process being killed (only a power loss may lose the last
 * transactions). Several gateways may share one file.
 *
 * Bounds, checked in the put's transaction (so an acknowledged put is
 * within them):
 *   - age: rows older than max_age_s are never returned, and deleted by a
 *     sweep (at most once a minute, at a put) once no younger response
 *     continues them;
 *   - per owner: at most key_max_bytes and key_max_count rows; a put over
 *     either evicts that owner's oldest leaves (responses nothing continues)
 *     down to 90 % — never another owner's rows. Without a keys file every
 *     row is RESP_STORE_ANON's and only the global cap applies;
 *   - global: max_bytes; a put over it evicts its own owner's oldest leaves,
 *     and when that is not enough it is refused (RESP_STORE_FULL): one key
 *     never evicts another's responses. Size max_bytes ≥ keys × key_max_bytes.
 *   Evicting a leaf also deletes ancestors that are hidden (gone, expired)
 *   and no longer continued.
 *
 * Return codes:
 *    0  RESP_STORE_OK         done / found
 *    1  RESP_STORE_NOT_FOUND  (get, chain, delete) / RESP_STORE_TOO_LARGE (put):
 *                             the conversation is larger than the owner's quota
 *                             or the cap, nothing stored
 *    2  RESP_STORE_FULL       disk full (SQLITE_FULL), or the global cap is full
 *                             of other owners' responses
 *    3  RESP_STORE_BUSY       the write lock was not had within busy_timeout_ms,
 *                             or the writer's queue is full
 *    4  RESP_STORE_PENDING    (resp_store_job_poll) not written yet
 *   -1  SQLite or other error (logged; err filled when given)
 */
#ifndef PAGODA_GATEWAY_RESP_STORE_H
#define PAGODA_GATEWAY_RESP_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define RESP_STORE_FILE "responses.sqlite3"     /* under --state-dir */
#define RESP_STORE_ANON "anonymous"             /* owner of every row without --keys */
#define RESP_STORE_DEFAULT_MAX_AGE_S (30 * 86400) /* --responses-max-age */
#define RESP_STORE_DEFAULT_MAX_BYTES (1LL << 30)  /* --responses-max-bytes */
#define RESP_STORE_DEFAULT_KEY_MAX_BYTES (64LL << 20) /* --responses-key-max-bytes */
#define RESP_STORE_DEFAULT_KEY_MAX_COUNT 10000        /* --responses-key-max-count */
#define RESP_STORE_DEFAULT_BUSY_MS 2000         /* --responses-store-wait-ms */
#define RESP_STORE_MAX_DEPTH 1024               /* parent links walked to load a chain */
#define RESP_STORE_QUEUE 256                    /* writes waiting for the writer thread */

enum {
    RESP_STORE_OK = 0,
    RESP_STORE_NOT_FOUND = 1,
    RESP_STORE_TOO_LARGE = 1,
    RESP_STORE_FULL = 2,
    RESP_STORE_BUSY = 3,
    RESP_STORE_PENDING = 4,
};

typedef struct resp_store_config {
    int64_t max_age_s;       /* rows older than this are deleted, 0 = default */
    int64_t max_bytes;       /* total stored bytes, 0 = default */
    int64_t key_max_bytes;   /* per owner (not RESP_STORE_ANON), 0 = default */
    int64_t key_max_count;   /* rows per owner (not RESP_STORE_ANON), 0 = default */
    int busy_timeout_ms;     /* how long a write may wait for the lock, 0 = default */
} resp_store_config_t;

/* One stored response; the strings are malloc'd (resp_store_row_free). */
typedef struct resp_store_row {
    char *response;      /* the response object, JSON */
    char *input;         /* its input items, JSON array */
    int64_t created_s;
} resp_store_row_t;

/* What a put stores. Strings are borrowed for the call (copied). */
typedef struct resp_store_put {
    const char *id;        /* "resp_…" */
    const char *owner;
    int64_t now_s;
    const char *response;  /* the response object (JSON, with its output) */
    const char *input;     /* its input items (JSON array) */
    const char *parent;    /* previous_response_id, NULL = none */
    const char *context;   /* JSON array: the conversation before input (the parent's
                              whole conversation; "[]" or NULL without a parent);
                              stored only when the parent is no longer there */
} resp_store_put_t;

typedef struct resp_store resp_store_t;
typedef struct resp_store_job resp_store_job_t;

/* Opens (creating when missing) the database at `path` — a file path, or
 * ":memory:" for a private in-memory store (one shared cache between its
 * two connections) — sets WAL mode, creates or migrates the schema, starts
 * the writer thread. Returns 0 with *out set (resp_store_close), or -1 with
 * err filled and *out NULL. */
int resp_store_open(const char *path, const resp_store_config_t *cfg, resp_store_t **out, char *err,
                    size_t errlen);

/* Stops the writer (queued jobs fail with -1 and are called back), closes
 * the database and NULLs *s. NULL-safe. No job may be submitted meanwhile. */
void resp_store_close(resp_store_t **s);

/* Queues a put; returns a job at once (never NULL) whose result
 * resp_store_job_poll reads. done(ctx) is called once, from the writer
 * thread, when the job has its result — unless the job was refused at once
 * (queue full: its result is already RESP_STORE_BUSY, done not called) or
 * released first. The caller owns one reference: resp_store_job_release. */
resp_store_job_t *resp_store_submit(resp_store_t *s, const resp_store_put_t *p, void (*done)(void *ctx),
                                    void *ctx);
/* The job's result code (RESP_STORE_PENDING until written); err filled
 * with the reason of a failure. Thread-safe. */
int resp_store_job_poll(resp_store_job_t *job, char *err, size_t errlen);
/* Detaches the callback (after this returns it is never called) and drops
 * the caller's reference; NULLs *job. NULL-safe. */
void resp_store_job_release(resp_store_job_t **job);

/* resp_store_submit and wait for the result: the codes above (never
 * PENDING). */
int resp_store_put(resp_store_t *s, const resp_store_put_t *p, char *err, size_t errlen);

/* Fetches response `id` of `owner` unless it is older than max_age at
 * now_s, or deleted. Returns 0 with *row filled, 1 when there is none, -1. */
int resp_store_get(resp_store_t *s, const char *id, const char *owner, int64_t now_s,
                   resp_store_row_t *row);

/* The conversation through response `id` (its ancestors' items, its
 * prefix, input and output) as a new JSON array in *context. 0, 1 when
 * there is no such response for owner (or it expired / was deleted), -1 on
 * an error or a broken / too deep chain (logged). */
int resp_store_context(resp_store_t *s, const char *id, const char *owner, int64_t now_s, json_t **context);

/* Deletes response `id` of `owner` (hidden, kept while others continue
 * it). Waits for the writer (bounded by busy_timeout_ms). Returns 0, 1
 * when there is none, RESP_STORE_BUSY / FULL, -1. */
int resp_store_delete(resp_store_t *s, const char *id, const char *owner);

/* Rows and bytes stored now (all owners, hidden and expired rows not yet
 * deleted included). Returns 0, -1 on error. */
int resp_store_stats(resp_store_t *s, int64_t *n_rows, int64_t *n_bytes);
/* The same for one owner. */
int resp_store_owner_stats(resp_store_t *s, const char *owner, int64_t *n_rows, int64_t *n_bytes);

/* Frees the row's strings and zeroes it. NULL-safe. */
void resp_store_row_free(resp_store_row_t *row);

#endif
