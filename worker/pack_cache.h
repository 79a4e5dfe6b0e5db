/* pack_cache.h — the packed-weight cache on disk: model_pack_int8's arena
 * written once to DIR/packed/ and read back at the next start instead of
 * packing again (a worker's start-up is mostly packing: 1.1B Q4_K_M,
 * 615 MiB, ~1.4-2.8 s on 2 cores).
 *
 * File DIR/packed/<weights hash>-<layout fingerprint>.pack (16 hex digits
 * each), little-endian:
 *
 *   offset  bytes        field
 *     0     8            magic "PGDPACK2"
 *     8     4            version (2; version 1 files — unkeyed checksums —
 *                        are refused by magic and rewritten)
 *    12     4            n: matrices (1 .. PACK_CACHE_MAX_MATS)
 *    16     8            weights hash (kv_disk_hash_file of the GGUF)
 *    24     8            layout fingerprint (pack_cache_fingerprint)
 *    32     8            payload offset (a multiple of 4096, >= the header;
 *                        writers put it at the first 2 MiB boundary)
 *    40     8            payload bytes (sum of the matrices' bytes)
 *    48     8            file bytes (payload offset + payload bytes)
 *    56     40 · n       per matrix, in model_pack_plan order: ggml type u32,
 *                        zero u32, rows u64, cols u64, packed bytes u64,
 *                        file_mac64 of its packed bytes u64 (keyed BLAKE2b,
 *                        common/file_mac.h, under the worker's key)
 *    56+40n 8            file_mac64 of every header byte before it
 *    ...                 zeros up to the payload offset
 *    payload             the packings back to back, as in the arena
 *
 * The key. The weights hash names the model file's bytes; the fingerprint
 * names the packing code: a hash of the packings of a fixed synthetic
 * matrix of each packable type (every row of the quant traits table whose
 * packed column is not QUANT_PACK_NONE: today Q4_0, Q8_0, Q4_K, Q5_K, Q6_K)
 * made by this binary at start-up (~0.1 ms). A build whose packed layout differs (a new
 * layout, or one that came to depend on the ISA) therefore looks for
 * another file name and never reads an old one; qgemm.h documents one
 * ISA-independent layout today.
 *
 * Loading. The file is mapped read-only. When the kernel maps it with 2 MiB
 * pages (at least half of its first 8 MiB, mapped at once to check: its
 * page cache holds the file in 2 MiB folios, as ext4 and tmpfs do since
 * Linux 6.16 for a file written or read sequentially; the writer below
 * writes in 2 MiB-aligned pieces for that), the packings
 * are used in place: ~1-10 ms for 615 MiB instead of ~60-140 ms to copy
 * them, and replicas on one host share the pages. Otherwise they are
 * copied into an anonymous huge-page arena, as decode streams that ~10 %
 * faster than 4 KiB pages. A file in use is never written again (writers
 * rename a new file over the name); truncating it in place would kill the
 * worker with SIGBUS, and the next start would reject it.
 *
 * Trust. A file is used only when its size equals the header's file bytes,
 * the header MAC holds (the checksums are keyed with the worker's MAC key,
 * kept outside the folder: a file edited, forged or copied in from another
 * installation fails), every header field equals what this model and
 * binary expect (magic, version, weights hash, fingerprint, and per matrix
 * type, rows, cols and packed size against model_pack_plan), and every
 * matrix's bytes hash to the table's checksum (~0.1 s per GB per core; a
 * flipped bit anywhere is caught). The payload checksums are skipped when
 * DIR/packed/verified/ holds a record of this file's identity (device,
 * inode, size, mtime, ctime) with its header checksum (kv_disk_record_get,
 * the record the remembered weights hash uses): the writer writes it after
 * renaming its file into place, and a reader after checking every checksum.
 * Its trust rule: a file whose identity is unchanged has unchanged bytes,
 * as any write moves its ctime. Anything else is logged, the model is packed as without
 * a cache and the file is rewritten. The folders are 0700 and files 0600
 * (common/private_dir.h); a symlink at the file's name is not followed.
 * Writers write a new DIR/packed/NAME.tmp.<16 random hex> (O_CREAT|O_EXCL|
 * O_NOFOLLOW: a name planted in advance is never opened), fsync it and
 * rename it into place, so a reader
 * sees a whole file or none; two workers of one model writing at once each
 * rename a complete file (the last one stays). Temporaries older than 10
 * minutes (a writer killed mid-write) are removed before a write. A directory that cannot be
 * created or written, or a full disk, means no cache file: the worker packs
 * and logs one line.
 *
 * Pruning. Each file is as large as its model's packings, and a new model
 * file or a new build makes a new one, so after writing its file a worker
 * removes (logging each): the files of the same weights hash with another
 * fingerprint (this build never reads them), and any other model's file not
 * read for PAGODA_PACK_MAX_AGE_DAYS days (default 30; 0 = never), judged by
 * its access time, which the kernel's default relatime keeps within a day
 * (under noatime such a file goes 30 days after it was written and is
 * packed and written again at its model's next start). A worker that has a
 * removed file mapped keeps using it until it exits (two builds serving one
 * model from one folder, as in a rolling upgrade, remove each other's
 * file: each start of either packs again). The verified records of files
 * no longer there go too. */
#ifndef PAGODA_WORKER_PACK_CACHE_H
#define PAGODA_WORKER_PACK_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/file_mac.h"
#include "worker/model/model.h"

#define PACK_CACHE_MAGIC "PGDPACK2"
#define PACK_CACHE_VERSION 2u
#define PACK_CACHE_MAX_MATS 65536
#define PACK_CACHE_HEAD 56   /* fixed header bytes before the table */
#define PACK_CACHE_ENTRY 40  /* table bytes per matrix */
#define PACK_CACHE_MAX_AGE_DAYS 30 /* default of PAGODA_PACK_MAX_AGE_DAYS (Pruning) */

typedef struct pack_cache_entry {
    uint32_t type;
    uint64_t rows, cols, bytes, sum;
} pack_cache_entry_t;

typedef struct pack_cache_header {
    uint32_t version, n;
    uint64_t weights_hash, fingerprint;
    uint64_t payload_off, payload_bytes, file_bytes;
} pack_cache_header_t;

/* What pack_cache_pack did, for logs and tests. */
typedef enum pack_cache_outcome {
    PACK_CACHE_OFF,      /* no directory, or nothing to pack */
    PACK_CACHE_LOADED,   /* read from the file */
    PACK_CACHE_STORED,   /* packed, file written */
    PACK_CACHE_PACKED,   /* packed, file not written (directory or disk error) */
} pack_cache_outcome_t;

typedef struct pack_cache_result {
    pack_cache_outcome_t outcome;
    bool rejected;         /* a file was there but failed a check */
    bool mapped;           /* LOADED: the arena is the file's mapping (else a copy) */
    bool trusted;          /* LOADED: its verified record matched (no payload checksums) */
    int n_packed;          /* matrices packed or loaded */
    double ms;             /* wall time of pack_cache_pack */
} pack_cache_result_t;

/* Hash of this binary's packings of fixed synthetic matrices (see above),
 * one for every type whose quant traits row (worker/kernels/quant.c) has a
 * packed layout. Computed once, thread-safe. */
uint64_t pack_cache_fingerprint(void);
/* type's packing is part of the fingerprint (for the test that walks the
 * traits table). */
bool pack_cache_fingerprint_covers(uint32_t type);

/* Parses and checks the header of a pack file from its first len bytes
 * (at least PACK_CACHE_HEAD; the table needs 56 + 40 n + 8): magic, version,
 * n in range, header MAC under key (not checked when ents is NULL), payload offset aligned and past the header,
 * file bytes = offset + payload bytes, payload bytes = the sum of the
 * table's sizes (each a nonzero multiple of 64), without overflow.
 * Returns n and fills *h and ents[0..n) (ents may be NULL to only learn n:
 * then len may hold the fixed part alone and only it is checked; returns
 * the n it names), or -1 with a reason in err. Never reads past len. */
int pack_cache_parse(const uint8_t *buf, size_t len, const file_mac_key_t *key, pack_cache_header_t *h,
                     pack_cache_entry_t *ents, char *err, size_t errlen);

/* model_pack_int8 through the cache in dir/packed/ (dir NULL or "", or key
 * NULL: plain model_pack_int8, outcome OFF); key: the MAC key (copied). Returns the number of matrices packed or
 * loaded (as model_pack_int8) and fills *res (may be NULL). Logs a line per
 * step (read, not used, packed, wrote, cannot write).
 * deferred NULL: a file to write is written before returning (STORED, or
 * PACKED when the write failed). deferred non-NULL: the write is not done
 * but returned in *deferred (NULL when there is none; outcome PACKED), so
 * that a worker can register first: pack_cache_write_begin(job) writes it
 * on a thread of its own (the arena is only read; m must stay alive and
 * packed), pack_cache_write_end(&job) waits for that thread and frees the
 * job (without a begin it drops the write). */
typedef struct pack_cache_write pack_cache_write_t;
int pack_cache_pack(model_t *m, int n_threads, const char *dir, const file_mac_key_t *key, uint64_t weights_hash,
                    pack_cache_result_t *res, pack_cache_write_t **deferred);
void pack_cache_write_begin(pack_cache_write_t *job);
/* When a loaded file is used through its mapping rather than copied:
 * PACK_CACHE_MAP_HUGE (the default) when the kernel maps it with huge
 * pages; ALWAYS and NEVER let tests run both paths on any kernel. The
 * environment variable PAGODA_PACK_MAP=never|always overrides it (for an
 * operator, and for tests/bench/pack_map_ab.sh). */
typedef enum pack_cache_map_policy {
    PACK_CACHE_MAP_HUGE,
    PACK_CACHE_MAP_ALWAYS,
    PACK_CACHE_MAP_NEVER,
} pack_cache_map_policy_t;
void pack_cache_set_map_policy(pack_cache_map_policy_t policy);
void pack_cache_write_end(pack_cache_write_t **job);

#endif
