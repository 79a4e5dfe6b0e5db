/* keys.h — the API keys table (`pagoda-gateway --keys FILE`).
 *
 * Keys are never stored in clear: the file holds the SHA-256 digest of each
 * secret, so a leaked keys file does not leak credentials. A request's bearer
 * token is hashed and compared against every entry in constant time.
 *
 * File format (UTF-8/ASCII text, one entry per line):
 *
 *     # comment lines and blank lines are ignored
 *     # name        tier     sha256(secret) as 64 hex digits                      flags
 *     alice         high     ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad
 *     batch-jobs    low      5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 group=team
 *     ops           normal   9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 admin
 *
 *   name   1..64 characters of [A-Za-z0-9._@-], unique in the file; shows up in
 *          logs and metrics, never the secret
 *   tier   high | normal | low   (priority in the per-model queues, prio_queue.h)
 *   hash   SHA-256 of the secret's bytes (exactly what the client sends after
 *          "Authorization: Bearer "), 64 hex digits, either case; unique
 *   flags  optional, after the hash, in any order, each at most once:
 *            admin         may call /admin/... and read /metrics
 *            metrics       may read /metrics (a scraper's key: nothing else)
 *            group=NAME    the key's prefix-cache sharing group, NAME as a
 *                          key name (1..64 of [A-Za-z0-9._@-]): keys of one
 *                          group share cached prefixes (and so can tell which
 *                          prefixes the others sent); a key without a group
 *                          shares with no other key (gateway/partition.h)
 *          (files written before flags other than `admin` existed stay valid)
 * Fields are separated by spaces or tabs; CR before LF is tolerated; a line is at
 * most 1024 bytes; a file at most 16 MiB and 100000 entries. Any bad line makes
 * the whole load fail with an error naming the line ("keys.txt:7: unknown tier
 * 'urgent'"): a half-loaded key table would silently lock users out.
 *
 * To make an entry: `pagoda-gateway --hash-key SECRET` prints the digest
 * (keys_hash_hex), or generate a fresh secret with keys_secret_new().
 *
 * Thread-safety: a keys_t is immutable once loaded; any number of threads may
 * call keys_lookup on it concurrently. Reload = keys_load a *new* table, publish
 * it (e.g. swap a pointer under the gateway lock), and keys_free the old one only
 * when no thread can still hold an entry pointer from it (lookups return
 * pointers into the table; copy the keys_entry_t out if it must outlive a swap).
 */
#ifndef PAGODA_GATEWAY_KEYS_H
#define PAGODA_GATEWAY_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "gateway/prio_queue.h" /* prio_tier_t */

#define KEYS_NAME_MAX 64
#define KEYS_LINE_MAX 1024
#define KEYS_FILE_MAX (16u << 20)
#define KEYS_MAX_ENTRIES 100000
#define KEYS_TOKEN_MAX 4096      /* longer bearer tokens never match */

typedef struct {
    char name[KEYS_NAME_MAX + 1]; /* NUL-terminated */
    prio_tier_t tier;
    int admin;                    /* 1 = may use /admin endpoints (and /metrics) */
    int metrics;                  /* 1 = may read /metrics (flag `metrics`, or admin) */
    char group[KEYS_NAME_MAX + 1]; /* sharing group, "" = none */
    uint8_t sha256[32];           /* digest of the secret */
    uint64_t partition;           /* prefix-cache partition, partition_of_key(sha256,
                                   * group) computed at load; never 0 */
} keys_entry_t;

typedef struct keys keys_t;

/* Parses a keys file held in memory. On success returns 0 and sets *out (free
 * with keys_free). On error returns -1, *out stays NULL, and err (if non-NULL)
 * receives "SOURCE:LINE: reason", SOURCE being `source` or "keys". */
int keys_parse(const uint8_t *buf, size_t len, const char *source, keys_t **out, char *err,
               size_t err_cap);
/* Reads and parses `path`. Same contract as keys_parse; errors name the path. */
int keys_load(const char *path, keys_t **out, char *err, size_t err_cap);
/* Frees the table and NULLs *keys. NULL-safe. */
void keys_free(keys_t **keys);

size_t keys_count(const keys_t *keys);
/* Entry i (0 ≤ i < count) in file order. */
const keys_entry_t *keys_entry(const keys_t *keys, size_t i);

/* Returns the entry whose digest equals SHA-256(bearer_token), or NULL (also
 * for NULL/empty tokens or tokens longer than KEYS_TOKEN_MAX). The time taken
 * depends only on the table size and token length, never on which entry (or
 * how many bytes of a digest) matched. */
const keys_entry_t *keys_lookup(const keys_t *keys, const char *bearer_token);

/* Writes SHA-256(secret) as 64 lower-case hex digits + NUL into out[65].
 * Returns 0, or -1 when libsodium cannot initialise. */
int keys_hash_hex(const char *secret, char out[65]);

/* Writes a fresh random secret "pgd-" + 48 base64url characters (288 bits)
 * + NUL into out[53]. Returns 0, or -1 when libsodium cannot initialise. */
#define KEYS_SECRET_LEN 52
int keys_secret_new(char out[KEYS_SECRET_LEN + 1]);

#endif
