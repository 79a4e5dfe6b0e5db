/* kv_disk.h — the disk tier under the prefix cache: full KV blocks kept as
 * files in a per-model directory, so a restarted worker starts warm.
 *
 * Directory. `--kv-cache-dir DIR` names a directory shared by any number of
 * workers; each writes under DIR/<ident>/ where ident (16 hex digits) is a
 * 64-bit hash of everything that decides what a block's bytes mean: a hash
 * of the whole weights file, the KV element type, the q8 block length, the
 * block size, n_layer and kv_dim. A different model or format therefore
 * never even looks in the same folder, and every file repeats those fields
 * in its header (checked on load). Replicas of one model share the folder.
 *
 * File DIR/<ident>/<pub>.kvb, pub = the block's public prefix key
 * (common/prefix_key.h: a hash chain over the token ids from the root of
 * the request's partition, equal on every replica; so a tenant's blocks
 * are only ever found by its own partition). Little-endian, host layout:
 *
 *     offset  size              field
 *     0       8                 magic "PGKVBLK2"
 *     8       4                 version (2; files of version 1 — an unkeyed
 *                               checksum — have another size and magic: removed
 *                               at open or rejected at load, never read)
 *     12      4                 header bytes (96)
 *     16      8                 ident (as the folder name)
 *     24      8                 weights hash
 *     32      8                 pub: this block's public key
 *     40      8                 parent pub (prefix_key_root(partition) for block 0)
 *     48      4 × 5             block_size, n_layer, kv_dim, kv_type, qblock
 *     68      4                 row_bytes (one K or V vector)
 *     72      8                 payload bytes = 2 · n_layer · block_size · row_bytes
 *     80      16                reserved, zero
 *     96      4 · block_size    token ids of the block
 *     …       payload           per layer: K rows of the block's slots, then V rows
 *     end-16  16                MAC: keyed BLAKE2b-128 (common/file_mac.h) of every
 *                               byte before it, under the worker's key (kept outside DIR)
 *
 * A load checks the size, every header field against this worker's shape,
 * pub, parent pub and token ids against the prompt's block, and the MAC: a
 * torn, truncated or corrupt file (or one that collides), and one forged,
 * edited or copied in from a folder with another key (its MAC fails:
 * n_forged), is never served — it is counted as rejected
 * (pagoda_kv_disk_rejected_total) and removed. A symlink at a block's name
 * is never followed (O_NOFOLLOW). Writes go to a new 0600 temporary
 * ".tmp-<16 random hex>" made with O_EXCL|O_NOFOLLOW and are renamed into
 * place, so a reader sees a whole file or none and a name planted in
 * advance is never opened; replicas sharing the folder (and the key) write
 * the same bytes. No fsync: a process crash keeps the page cache, and a
 * power loss that tears a file is caught by the MAC.
 *
 * Who may read it. DIR and every folder under it are 0700 and files 0600
 * (common/private_dir.h): the token ids are the users' prompts. A DIR owned
 * by another user, or group/world-writable, is refused (the worker does not
 * start; kv_disk_open turns the tier off). The MAC key is a 0600 file
 * outside DIR: --kv-disk-key FILE, by default DIR.key beside it, made on
 * first start (common/file_mac.h).
 *
 * Size cap: the tier keeps at most cap bytes of block files it knows of
 * (its own writes, and what it found at start-up), removing the oldest
 * (by write or last hit) first. With replicas sharing a folder each counts
 * against its own cap, so the folder may hold up to replicas × cap.
 *
 * Failure: an I/O error on write (full disk, read-only folder, quota) or a
 * cap smaller than one block turns the tier off for the life of the
 * process — one log line, `enabled` false in the stats (exported as a
 * metric) — and the worker runs as if it had none. Read errors only miss.
 *
 * Not thread-safe: the scheduler thread owns it. Ownership: kv_disk_open
 * returns a tier freed with kv_disk_close; kv_disk_attach lends it to a
 * pool, which must be freed (or detached) first.
 */
#ifndef PAGODA_WORKER_KV_DISK_H
#define PAGODA_WORKER_KV_DISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/file_mac.h"
#include "worker/kernels/kv_store.h"

typedef struct kv_pool kv_pool_t;
typedef struct kv_disk kv_disk_t;

#define KV_DISK_HEADER_BYTES 96
#define KV_DISK_MAC_BYTES 16

/* What a block's bytes mean; all fields must match for a file to load. */
typedef struct kv_disk_shape {
    uint64_t weights_hash; /* kv_disk_hash_file of the GGUF */
    int32_t kv_type;       /* kv_type_t of the store */
    int32_t qblock;        /* q8 block length, 0 for float types */
    int32_t block_size;
    int32_t n_layer;
    int32_t kv_dim;
} kv_disk_shape_t;

typedef struct kv_disk_stats {
    bool enabled;            /* false after an I/O error or at a bad folder */
    int32_t n_files;         /* block files this tier knows of */
    uint64_t bytes_used;     /* their bytes */
    uint64_t cap_bytes;
    uint64_t n_written, bytes_written; /* blocks stored (files written) */
    uint64_t n_loaded, bytes_read;     /* blocks served from disk */
    uint64_t n_missed;       /* load attempts with no file */
    uint64_t n_rejected;     /* files found but not served: torn, corrupt, other content, forged */
    uint64_t n_forged;       /* of those, files whose MAC failed (or a symlink at a block's name) */
    uint64_t n_evicted;      /* files removed by the size cap */
    uint64_t n_errors;       /* write errors (the first turns the tier off) */
} kv_disk_stats_t;

/* 64-bit hash of n bytes (four multiply-rotate lanes over 8-byte words,
 * then the tail; seed-dependent). Deterministic across runs and machines of
 * one byte order. */
uint64_t kv_disk_hash64(const void *p, size_t n, uint64_t seed);

/* kv_disk_hash64 of a whole file (read through mmap). 0 ok, -1 on error
 * (message in err). */
int kv_disk_hash_file(const char *path, uint64_t *out, char *err, size_t errlen);

/* A 64-bit value remembered for a file as it is now. The record
 * SUB/DEV-INO-SIZE-MTIME-CTIME.hash (the nanosecond times of sb, the file's
 * stat) holds it (24 bytes: magic "PVDHWSH2", value, file_mac64 of the two
 * under key: a record written by anyone without the key fails).
 * Trust rule: a file whose device, inode, size, mtime and ctime are all
 * unchanged is taken to have unchanged bytes (ctime cannot be set from user
 * space: any write, chmod or rename bumps it), so a replaced or rewritten
 * file finds no record. kv_disk_record_get: 0 and *value, 1 when there is
 * no record, -1 when it is short or fails its check (logged with `what`:
 * ignored, and the next put rewrites it). kv_disk_record_put: writes it
 * (SUB made 0700, a 0600 O_EXCL|O_NOFOLLOW temp + rename): 0, or an errno (log_debug; a directory that
 * cannot be written only costs the record). Records of replaced files stay
 * (24 bytes each) unless the caller prunes them (pack_cache does). */
int kv_disk_record_get(const char *sub, const struct stat *sb, const file_mac_key_t *key, const char *what,
                       uint64_t *value);
int kv_disk_record_put(const char *sub, const struct stat *sb, const file_mac_key_t *key, const char *what,
                       uint64_t value);
/* The file name (no folder) of sb's record, at most KV_DISK_RECORD_NAME
 * bytes with its NUL: what a caller pruning SUB compares its entries with. */
#define KV_DISK_RECORD_NAME 160
void kv_disk_record_name(const struct stat *sb, char *out, size_t n);

/* kv_disk_hash_file, remembered under DIR/weights-hash/ by the record
 * above. *cached (may be NULL) tells whether the record was used. dir NULL
 * or "": kv_disk_hash_file. 0 ok, -1 as kv_disk_hash_file. */
int kv_disk_hash_file_cached(const char *path, const char *dir, const file_mac_key_t *key, uint64_t *out,
                             bool *cached, char *err, size_t errlen);

/* mkdir -p of a private folder (private_dir_make: 0700, ours, not
 * group/world-writable): 0, or an errno (ENOTDIR when path is a file,
 * EPERM when it is refused; the reason is logged). */
int kv_disk_mkdir_p(const char *path);

/* The folder name of a shape (its 64-bit identity). */
uint64_t kv_disk_ident(const kv_disk_shape_t *shape);

/* Opens (creating DIR/<ident>/ as needed) a tier for blocks of `shape` with
 * a cap of cap_bytes, and indexes the block files already there (their
 * contents are only checked when loaded; leftover temporaries older than
 * 10 minutes are removed). Never NULL for valid arguments: when the folder
 * cannot be created or read, the tier starts off (one log line). NULL only
 * for a NULL dir/shape/key. The key is copied. */
kv_disk_t *kv_disk_open(const char *dir, uint64_t cap_bytes, const kv_disk_shape_t *shape,
                        const file_mac_key_t *key);

/* Frees the tier (files stay); NULLs *d. NULL ok. */
void kv_disk_close(kv_disk_t **d);

/* Writes block `block` of st (its block_size slots of every layer, K and V)
 * as pub's file unless the tier already has it. Returns 0 when the tier
 * holds pub afterwards, -1 when not (tier off, or this write failed and
 * turned it off). */
int kv_disk_store(kv_disk_t *d, const kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                  const int32_t *tokens);

/* Loads pub's file into block `block` of st after checking it (see above).
 * Returns 0 loaded, 1 no such file (or tier off), 2 rejected (the file is
 * removed; st's block may hold garbage: the caller must not use it). */
int kv_disk_load(kv_disk_t *d, kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                 const int32_t *tokens);

/* The checks a block file's bytes must pass before they are served: size,
 * header (every field against shape, pub, parent_pub), token ids, MAC under
 * key. 0 ok, -1 not this block (torn, corrupt, another shape or content),
 * -2 everything matches but the MAC (forged, edited, or another key's).
 * Reads only buf[0, len). */
int kv_disk_check(const kv_disk_shape_t *shape, const file_mac_key_t *key, const uint8_t *buf, size_t len,
                  uint64_t pub, uint64_t parent_pub, const int32_t *tokens);

/* Whether the tier's index has pub (a file it wrote or found). */
bool kv_disk_has(const kv_disk_t *d, uint64_t pub);

/* Up to max keys of the index into out; returns how many. */
int32_t kv_disk_keys(const kv_disk_t *d, uint64_t *out, int32_t max);
int32_t kv_disk_n_keys(const kv_disk_t *d);

/* Keys the tier dropped since the last call (cap evictions, rejected
 * files, or all of them when it turned off), up to max; returns how many. */
int32_t kv_disk_take_dropped(kv_disk_t *d, uint64_t *out, int32_t max);

void kv_disk_stats(const kv_disk_t *d, kv_disk_stats_t *out);

/* Makes d the pool's lower tier (kv_pool_set_tier): blocks evicted from RAM
 * are stored, prefix lookups continue on disk past the RAM chain, the KV
 * events and full key sets cover both tiers. */
void kv_disk_attach(kv_disk_t *d, kv_pool_t *pool);

#endif
