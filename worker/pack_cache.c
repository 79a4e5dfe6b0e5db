/* pack_cache.c — the packed-weight cache on disk (format and trust rules in
 * pack_cache.h). */
#include "worker/pack_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/file_mac.h"
#include "common/log.h"
#include "common/private_dir.h"
#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"
#include "worker/kv_disk.h"

#define SEED_FP 0x7061636b66707231ULL   /* layout fingerprint */
#define PAYLOAD_ALIGN 4096u               /* what a reader accepts */
#define PAYLOAD_AT ((uint64_t)2 << 20)     /* where a writer puts it: a mapped arena starts on a 2 MiB page, as an anonymous one */
#define IO_CHUNK ((size_t)8 << 20)
#define TMP_STALE_S 600 /* leftover temporaries older than this are removed before a write */

/* ---- fingerprint -------------------------------------------------------- */

static uint64_t g_fp;
static uint32_t g_fp_types[GGML_TYPE_COUNT]; /* the types folded into g_fp */
static size_t g_n_fp_types;
static pthread_once_t g_fp_once = PTHREAD_ONCE_INIT;

/* Every row of the quant traits table with a packed layout, in table order:
 * a new packed type (or a changed packing of one) changes the fingerprint
 * without a list here to keep in step. */
static void fp_compute(void)
{
    enum { ROWS = 9, COLS = 512 }; /* two panels, the second partial; two K-quant blocks */
    float *x = xmalloc((size_t)COLS * sizeof *x);
    uint64_t h = SEED_FP, s = 0x243F6A8885A308D3ULL;
    const quant_traits_t *q;
    for (size_t i = 0; (q = quant_traits_at(i)); i++) {
        if (q->packed == QUANT_PACK_NONE)
            continue;
        size_t rb = quant_row_bytes(q->type, COLS), psz = qgemm_packed_size(q->type, ROWS, COLS);
        uint8_t *w = xmalloc(rb * ROWS);
        for (int r = 0; r < ROWS; r++) {
            for (int c = 0; c < COLS; c++) {
                s = s * 6364136223846793005ULL + 1442695040888963407ULL;
                x[c] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 21);
            }
            quant_quantize(q->type, x, w + (size_t)r * rb, COLS);
        }
        uint64_t part = (q->type * 0x100000001B3ULL ^ psz) + (uint64_t)q->packed;
        void *p = psz ? qgemm_pack(q->type, w, ROWS, COLS, 1) : NULL;
        if (p)
            part ^= kv_disk_hash64(p, psz, part);
        qgemm_pack_free(&p);
        free(w);
        h = kv_disk_hash64(&part, sizeof part, h);
        g_fp_types[g_n_fp_types++] = q->type;
    }
    free(x);
    g_fp = h;
}

bool pack_cache_fingerprint_covers(uint32_t type)
{
    pthread_once(&g_fp_once, fp_compute);
    for (size_t i = 0; i < g_n_fp_types; i++)
        if (g_fp_types[i] == type)
            return true;
    return false;
}

uint64_t pack_cache_fingerprint(void)
{
    pthread_once(&g_fp_once, fp_compute);
    return g_fp;
}

/* ---- header ------------------------------------------------------------- */

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}
static void wr32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

static size_t table_end(uint32_t n) { return PACK_CACHE_HEAD + (size_t)n * PACK_CACHE_ENTRY; }

int pack_cache_parse(const uint8_t *buf, size_t len, const file_mac_key_t *key, pack_cache_header_t *h,
                     pack_cache_entry_t *ents, char *err, size_t errlen)
{
    if (!buf || len < PACK_CACHE_HEAD) {
        errbuf_set(err, errlen, "shorter than the %d-byte header", PACK_CACHE_HEAD);
        return -1;
    }
    if (memcmp(buf, PACK_CACHE_MAGIC, 8) != 0) {
        errbuf_set(err, errlen, "not a pack file (magic)");
        return -1;
    }
    h->version = rd32(buf + 8);
    h->n = rd32(buf + 12);
    h->weights_hash = rd64(buf + 16);
    h->fingerprint = rd64(buf + 24);
    h->payload_off = rd64(buf + 32);
    h->payload_bytes = rd64(buf + 40);
    h->file_bytes = rd64(buf + 48);
    if (h->version != PACK_CACHE_VERSION) {
        errbuf_set(err, errlen, "version %u, expected %u", h->version, PACK_CACHE_VERSION);
        return -1;
    }
    if (h->n < 1 || h->n > PACK_CACHE_MAX_MATS) {
        errbuf_set(err, errlen, "%u matrices (1..%d)", h->n, PACK_CACHE_MAX_MATS);
        return -1;
    }
    size_t end = table_end(h->n) + 8;
    if (h->payload_off % PAYLOAD_ALIGN || h->payload_off < end || h->payload_off > ((uint64_t)1 << 40) ||
        h->payload_bytes > ((uint64_t)1 << 50) || h->file_bytes != h->payload_off + h->payload_bytes) {
        errbuf_set(err, errlen, "bad sizes (payload at %llu, %llu bytes, file %llu)",
                   (unsigned long long)h->payload_off, (unsigned long long)h->payload_bytes,
                   (unsigned long long)h->file_bytes);
        return -1;
    }
    if (!ents)
        return (int)h->n;
    if (len < end) {
        errbuf_set(err, errlen, "header cut short (%zu of %zu bytes)", len, end);
        return -1;
    }
    if (rd64(buf + end - 8) != file_mac64(key, buf, end - 8)) {
        errbuf_set(err, errlen, "header MAC mismatch (forged, or written with another key)");
        return -1;
    }
    uint64_t sum = 0;
    for (uint32_t i = 0; i < h->n; i++) {
        const uint8_t *e = buf + table_end(i);
        pack_cache_entry_t *x = &ents[i];
        x->type = rd32(e);
        x->rows = rd64(e + 8);
        x->cols = rd64(e + 16);
        x->bytes = rd64(e + 24);
        x->sum = rd64(e + 32);
        if (rd32(e + 4) != 0 || x->bytes == 0 || x->bytes % 64 || x->bytes > h->payload_bytes - sum) {
            errbuf_set(err, errlen, "matrix %u: bad entry", i);
            return -1;
        }
        sum += x->bytes;
    }
    if (sum != h->payload_bytes) {
        errbuf_set(err, errlen, "matrices sum to %llu bytes, header says %llu", (unsigned long long)sum,
                   (unsigned long long)h->payload_bytes);
        return -1;
    }
    return (int)h->n;
}

/* ---- the verified record ------------------------------------------------ */

/* DIR/packed/verified/: for each pack file whose every checksum held, its
 * header checksum, remembered by the file's identity (kv_disk_record_get):
 * the next start that finds the file with that identity skips the payload
 * checksums (pack_cache.h, "Trust"). */
static void vrec_dir(const char *sub, char *out, size_t n) { snprintf(out, n, "%s/verified", sub); }

static bool vrec_matches(const char *sub, const struct stat *sb, const file_mac_key_t *key, uint64_t head_sum)
{
    char vdir[4200];
    uint64_t v;
    vrec_dir(sub, vdir, sizeof vdir);
    return kv_disk_record_get(vdir, sb, key, "pack file", &v) == 0 && v == head_sum;
}

/* Records sb's file (best effort: without it the next start checks every
 * byte again). */
static void vrec_write(const char *sub, const struct stat *sb, const file_mac_key_t *key, uint64_t head_sum)
{
    char vdir[4200];
    vrec_dir(sub, vdir, sizeof vdir);
    (void)kv_disk_record_put(vdir, sb, key, "pack file", head_sum);
}

/* ---- load --------------------------------------------------------------- */

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Bytes of the mapping at addr that the kernel maps with 2 MiB entries
 * (FilePmdMapped in /proc/self/smaps), 0 when unknown. */
static uint64_t pmd_mapped_bytes(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f)
        return 0;
    char line[512];
    bool in = false;
    uint64_t kb = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            if (in)
                break;
            in = lo == (unsigned long)(uintptr_t)addr;
        } else if (in && sscanf(line, "FilePmdMapped: %" SCNu64 " kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}

static _Atomic int g_map_policy; /* pack_cache_map_policy_t */

void pack_cache_set_map_policy(pack_cache_map_policy_t policy) { atomic_store(&g_map_policy, (int)policy); }

/* What load_file found: the arena (packed_arena to be), inside map when the
 * file's mapping is used, else a heap copy (map NULL). */
typedef struct loaded {
    void *arena, *map;
    size_t map_bytes;
    bool trusted; /* the verified record matched: no payload checksums */
} loaded_t;

/* Maps path and, when every check of pack_cache.h holds, returns 0 with the
 * arena in *out; else -1 with the reason in why (why[0] == 0: no file). */
static int load_file(const char *sub, const char *path, const model_packable_t *plan, int n,
                     const file_mac_key_t *key, uint64_t weights_hash, int n_threads, loaded_t *out, char *why,
                     size_t whylen)
{
    why[0] = 0;
    *out = (loaded_t){0};
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ELOOP) {
        errbuf_set(why, whylen, "a symlink: not followed");
        return -1;
    }
    if (fd < 0) { /* no file to reject: ENOENT, or a folder that is not there (the store says why) */
        if (errno != ENOENT)
            log_debug("pack cache: cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1;
    uint8_t *map = MAP_FAILED;
    pack_cache_entry_t *ents = NULL;
    struct stat sb;
    uint8_t fixed[PACK_CACHE_HEAD];
    pack_cache_header_t h = {0};
    if (fstat(fd, &sb) != 0 || pread(fd, fixed, sizeof fixed, 0) != (ssize_t)sizeof fixed) {
        errbuf_set(why, whylen, "cannot read the header");
        goto out;
    }
    if (pack_cache_parse(fixed, sizeof fixed, key, &h, NULL, why, whylen) < 0)
        goto out;
    if ((uint64_t)sb.st_size != h.file_bytes) {
        errbuf_set(why, whylen, "%lld bytes, header says %llu (truncated?)", (long long)sb.st_size,
                   (unsigned long long)h.file_bytes);
        goto out;
    }
    if (h.weights_hash != weights_hash || h.fingerprint != pack_cache_fingerprint() || h.n != (uint32_t)n) {
        errbuf_set(why, whylen, "made for other weights or another packing layout");
        goto out;
    }
    /* one read-only mapping of the whole file: on a kernel that keeps it in
     * the page cache as 2 MiB folios (ext4 and tmpfs since Linux 6.16 for
     * a file written or read sequentially), mapping it costs ~1 ms and no
     * copy, and decode streams it through huge TLB entries as it would an
     * anonymous huge-page arena */
    map = mmap(NULL, h.file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        errbuf_set(why, whylen, "cannot map it: %s", strerror(errno));
        goto out;
    }
    size_t hb = table_end(h.n) + 8;
    ents = xmalloc((size_t)n * sizeof *ents);
    if (pack_cache_parse(map, hb, key, &h, ents, why, whylen) < 0)
        goto out;
    for (int i = 0; i < n; i++) {
        const matmul_weight_t *w = plan[i].w;
        if (ents[i].type != w->type || ents[i].rows != (uint64_t)w->rows || ents[i].cols != (uint64_t)w->cols ||
            ents[i].bytes != plan[i].bytes) {
            errbuf_set(why, whylen, "matrix %d does not match the model", i);
            goto out;
        }
    }
    const uint64_t head_sum = rd64(map + hb - 8);
    out->trusted = vrec_matches(sub, &sb, key, head_sum);
    /* the mapping is used when the kernel maps it with 2 MiB entries,
     * judged by its first 8 MiB (mapped now; the rest is mapped as decode
     * first reads it, ~300 faults of ~1 us); else (4 KiB folios: an older
     * kernel, a file system without large folios) it is copied into an
     * anonymous huge-page arena, as decode streams that ~10 % faster */
    int policy = atomic_load(&g_map_policy);
    const char *env = getenv("PAGODA_PACK_MAP"); /* pack_cache.h: an operator's override */
    if (env && strcmp(env, "never") == 0)
        policy = PACK_CACHE_MAP_NEVER;
    else if (env && strcmp(env, "always") == 0)
        policy = PACK_CACHE_MAP_ALWAYS;
    bool use_map = policy == PACK_CACHE_MAP_ALWAYS;
    if (policy == PACK_CACHE_MAP_HUGE) {
        const size_t probe = h.file_bytes < ((size_t)8 << 20) ? h.file_bytes : (size_t)8 << 20;
        (void)madvise(map, probe, MADV_POPULATE_READ); /* a hint: faults come later if refused */
        use_map = probe >= ((size_t)4 << 20) && pmd_mapped_bytes(map) >= probe / 2;
    }
    uint8_t *arena = use_map ? map + h.payload_off : xhuge_alloc(h.payload_bytes);
    uint64_t *offs = xmalloc((size_t)n * sizeof *offs);
    for (int i = 0; i < n; i++)
        offs[i] = i ? offs[i - 1] + ents[i - 1].bytes : 0;
    int bad = -1;
    const bool trusted = out->trusted;
    /* matrices in parallel: a copy is hashed while it is still in cache */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads > 0 ? n_threads : 1) reduction(max : bad)
    for (int i = 0; i < n; i++) {
        uint8_t *dst = arena + offs[i];
        if (!use_map)
            memcpy(dst, map + h.payload_off + offs[i], ents[i].bytes);
        if (!trusted && file_mac64(key, dst, ents[i].bytes) != ents[i].sum && i > bad)
            bad = i;
    }
    free(offs);
    if (bad >= 0) {
        errbuf_set(why, whylen, "matrix %d fails its checksum", bad);
        if (!use_map)
            free(arena);
        goto out;
    }
    if (!trusted)
        vrec_write(sub, &sb, key, head_sum);
    out->arena = arena;
    if (use_map) {
        out->map = map;
        out->map_bytes = h.file_bytes;
        map = MAP_FAILED; /* the model's now */
    }
    rc = 0;
out:
    if (map != MAP_FAILED)
        munmap(map, h.file_bytes);
    free(ents);
    close(fd);
    return rc;
}

/* ---- store -------------------------------------------------------------- */

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t put = write(fd, p, n < IO_CHUNK ? n : IO_CHUNK);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return put < 0 ? errno : EIO;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

/* Removes DIR/packed/\*.pack.tmp.* older than TMP_STALE_S: what a worker
 * killed while writing left (as large as the model). Younger ones may be
 * another worker's write in progress. */
static void remove_stale_tmps(const char *sub)
{
    DIR *dh = opendir(sub);
    if (!dh)
        return;
    time_t now = time(NULL);
    for (struct dirent *de; (de = readdir(dh)) != NULL;) {
        char f[4400];
        struct stat sb;
        if (!strstr(de->d_name, ".pack.tmp.") || (size_t)snprintf(f, sizeof f, "%s/%s", sub, de->d_name) >= sizeof f)
            continue;
        if (stat(f, &sb) == 0 && S_ISREG(sb.st_mode) && now - sb.st_mtime > TMP_STALE_S && unlink(f) == 0)
            log_info("pack cache: removed %s, a write that never finished", f);
    }
    closedir(dh);
}

/* Days without a read after which another model's pack file is removed
 * at a write (pack_cache.h, "Pruning"); PAGODA_PACK_MAX_AGE_DAYS, 0 =
 * never by age. */
static long max_age_days(void)
{
    const char *e = getenv("PAGODA_PACK_MAX_AGE_DAYS");
    char *end;
    long v = e && *e ? strtol(e, &end, 10) : PACK_CACHE_MAX_AGE_DAYS;
    if (e && *e && (*end != '\0' || v < 0))
        v = PACK_CACHE_MAX_AGE_DAYS;
    return v;
}

/* After keep (the file just written, a name in sub) is in place: removes
 * the pack files it supersedes (the same weights hash, another layout
 * fingerprint: never read by this build), the pack files not read for
 * max_age_days(), and the verified records of files no longer there. */
static void prune(const char *sub, const char *keep, uint64_t weights_hash)
{
    DIR *dh = opendir(sub);
    if (!dh)
        return;
    const long days = max_age_days();
    const time_t now = time(NULL);
    size_t n_live = 0, cap_live = 16;
    char (*live)[KV_DISK_RECORD_NAME] = xmalloc(cap_live * sizeof *live); /* record names of the files kept */
    for (struct dirent *de; (de = readdir(dh)) != NULL;) {
        unsigned long long h, fp;
        char tail[8], f[4400];
        const char *name = de->d_name;
        if (strlen(name) != 38 || sscanf(name, "%16llx-%16llx%7s", &h, &fp, tail) != 3 || strcmp(tail, ".pack") != 0 ||
            (size_t)snprintf(f, sizeof f, "%s/%s", sub, name) >= sizeof f)
            continue;
        struct stat sb;
        if (stat(f, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue;
        const time_t last = sb.st_atime > sb.st_mtime ? sb.st_atime : sb.st_mtime; /* relatime: within a day */
        const bool written = strcmp(name, keep) == 0; /* the file just written stays */
        const char *why = NULL;                       /* a reason to remove it */
        if (!written && h == weights_hash)
            why = "the same weights in another build's layout";
        else if (!written && days > 0 && now - last > (time_t)days * 86400)
            why = "not read for the age limit (PAGODA_PACK_MAX_AGE_DAYS)";
        if (why && unlink(f) == 0) { /* a worker that maps it keeps its pages until it exits */
            log_info("pack cache: removed %s: %s", f, why);
            continue;
        }
        if (n_live == cap_live)
            live = xrealloc(live, (cap_live *= 2) * sizeof *live);
        kv_disk_record_name(&sb, live[n_live++], sizeof live[0]);
    }
    closedir(dh);
    char vdir[4200];
    vrec_dir(sub, vdir, sizeof vdir);
    if ((dh = opendir(vdir)) != NULL) {
        for (struct dirent *de; (de = readdir(dh)) != NULL;) {
            size_t len = strlen(de->d_name);
            if (len < 6 || strcmp(de->d_name + len - 5, ".hash") != 0)
                continue;
            bool used = false;
            for (size_t i = 0; i < n_live && !used; i++)
                used = strcmp(live[i], de->d_name) == 0;
            char f[4400];
            if (!used && (size_t)snprintf(f, sizeof f, "%s/%s", vdir, de->d_name) < sizeof f)
                (void)unlink(f); /* its file is gone or was rewritten */
        }
        closedir(dh);
    }
    free(live);
}

/* Writes m's arena to path in sub (tmp + fsync + rename), then its
 * verified record. 0 or an errno. */
static int store_file(const char *sub, const char *path, const model_t *m, const model_packable_t *plan, int n,
                      const file_mac_key_t *key, uint64_t weights_hash)
{
    size_t hb = table_end((uint32_t)n) + 8;
    uint64_t off = (hb + PAYLOAD_AT - 1) / PAYLOAD_AT * PAYLOAD_AT;
    uint8_t *head = xcalloc(1, off);
    memcpy(head, PACK_CACHE_MAGIC, 8);
    wr32(head + 8, PACK_CACHE_VERSION);
    wr32(head + 12, (uint32_t)n);
    wr64(head + 16, weights_hash);
    wr64(head + 24, pack_cache_fingerprint());
    wr64(head + 32, off);
    wr64(head + 40, m->packed_bytes);
    wr64(head + 48, off + m->packed_bytes);
    for (int i = 0; i < n; i++) {
        uint8_t *e = head + table_end((uint32_t)i);
        const matmul_weight_t *w = plan[i].w;
        wr32(e, w->type);
        wr64(e + 8, (uint64_t)w->rows);
        wr64(e + 16, (uint64_t)w->cols);
        wr64(e + 24, plan[i].bytes);
        wr64(e + 32, file_mac64(key, w->packed, plan[i].bytes));
    }
    wr64(head + hb - 8, file_mac64(key, head, hb - 8));
    /* a new 0600 file under a random name (O_EXCL|O_NOFOLLOW): a name
     * planted in advance is never opened */
    char tmp[4300], prefix[300];
    const char *base = strrchr(path, '/');
    snprintf(prefix, sizeof prefix, "%s.tmp.", base ? base + 1 : path);
    int e = 0, fd = private_dir_tmpfile(sub, prefix, tmp, sizeof tmp);
    if (fd < 0)
        e = errno;
    if (!e)
        e = write_all(fd, head, off);
    /* the payload in writes that end on IO_CHUNK file offsets: the page
     * cache then holds it in 2 MiB folios that a reader's mapping maps with
     * huge pages (writes that straddle them leave a quarter in small ones) */
    const size_t first = (size_t)(IO_CHUNK - off % IO_CHUNK) < m->packed_bytes
                             ? (size_t)(IO_CHUNK - off % IO_CHUNK) : m->packed_bytes;
    if (!e)
        e = write_all(fd, m->packed_arena, first);
    if (!e)
        e = write_all(fd, (const uint8_t *)m->packed_arena + first, m->packed_bytes - first);
    if (!e && fsync(fd) != 0)
        e = errno;
    if (fd >= 0 && close(fd) != 0 && !e)
        e = errno;
    if (!e && rename(tmp, path) != 0)
        e = errno;
    if (e && fd >= 0)
        unlink(tmp);
    struct stat sb;
    if (!e && stat(path, &sb) == 0) /* its bytes are the arena's, whose checksums the table holds */
        vrec_write(sub, &sb, key, rd64(head + hb - 8));
    free(head);
    return e;
}

/* ---- entry point -------------------------------------------------------- */

struct pack_cache_write {
    const model_t *m;
    model_packable_t *plan;
    int n;
    uint64_t weights_hash;
    file_mac_key_t key;
    char sub[4096], path[4200];
    pthread_t thread;
    bool started;
};

/* mkdir, stale temporaries, the file, one log line: 0 or an errno */
static int write_run(pack_cache_write_t *job)
{
    int64_t t1 = clock_now_us();
    int e = kv_disk_mkdir_p(job->sub);
    if (!e) {
        remove_stale_tmps(job->sub);
        e = store_file(job->sub, job->path, job->m, job->plan, job->n, &job->key, job->weights_hash);
    }
    if (e) {
        log_warn("pack cache off: cannot write %s: %s (the next start packs again)", job->path, strerror(e));
        return e;
    }
    log_info("pack cache: wrote %s (%.1f MiB) in %.0f ms", job->path,
             (double)job->m->packed_bytes / (1024.0 * 1024.0), (double)(clock_now_us() - t1) / 1e3);
    const char *base = strrchr(job->path, '/');
    prune(job->sub, base ? base + 1 : job->path, job->weights_hash);
    return 0;
}

static void *write_thread(void *arg)
{
    (void)write_run(arg);
    return NULL;
}

void pack_cache_write_begin(pack_cache_write_t *job)
{
    if (!job || job->started)
        return;
    if (pthread_create(&job->thread, NULL, write_thread, job) == 0)
        job->started = true;
    else
        (void)write_run(job); /* no thread: write now */
}

void pack_cache_write_end(pack_cache_write_t **jobp)
{
    pack_cache_write_t *job = jobp ? *jobp : NULL;
    if (!job)
        return;
    if (job->started)
        pthread_join(job->thread, NULL);
    free(job->plan);
    free(job);
    *jobp = NULL;
}

int pack_cache_pack(model_t *m, int n_threads, const char *dir, const file_mac_key_t *key, uint64_t weights_hash,
                    pack_cache_result_t *res, pack_cache_write_t **deferred)
{
    pack_cache_result_t r = {.outcome = PACK_CACHE_OFF};
    int64_t t0 = clock_now_us();
    if (deferred)
        *deferred = NULL;
    model_packable_t *plan = NULL;
    int n = dir && *dir && key ? model_pack_plan(m, &plan) : 0;
    char sub[4096], path[4200], why[256];
    if (n == 0 || (size_t)snprintf(sub, sizeof sub, "%s/packed", dir) >= sizeof sub) {
        r.n_packed = model_pack_int8(m, n_threads);
        goto done;
    }
    snprintf(path, sizeof path, "%s/%016llx-%016llx.pack", sub, (unsigned long long)weights_hash,
             (unsigned long long)pack_cache_fingerprint());
    loaded_t got;
    if (load_file(sub, path, plan, n, key, weights_hash, n_threads, &got, why, sizeof why) == 0) {
        if (got.map)
            model_pack_adopt_map(m, got.map, got.map_bytes, got.arena, plan, n);
        else
            model_pack_adopt(m, got.arena, plan, n);
        r.outcome = PACK_CACHE_LOADED;
        r.mapped = got.map != NULL;
        r.trusted = got.trusted;
        r.n_packed = n;
        log_info("pack cache: %s %s (%d matrices, %.1f MiB, %s) in %.0f ms", got.map ? "mapped" : "read", path, n,
                 (double)m->packed_bytes / (1024.0 * 1024.0),
                 got.trusted ? "verified before" : "every checksum checked", (double)(clock_now_us() - t0) / 1e3);
        goto done;
    }
    if (why[0]) {
        r.rejected = true;
        log_warn("pack cache: %s not used: %s; packing again and rewriting it", path, why);
    }
    r.n_packed = model_pack_int8(m, n_threads);
    r.outcome = PACK_CACHE_PACKED;
    log_info("pack cache: packed %d matrices (%.1f MiB) in %.0f ms", r.n_packed,
             (double)m->packed_bytes / (1024.0 * 1024.0), (double)(clock_now_us() - t0) / 1e3);
    if (r.n_packed != n) {
        log_warn("pack cache: %d of %d matrices packed; not writing a cache file", r.n_packed, n);
        goto done;
    }
    pack_cache_write_t *job = xcalloc(1, sizeof *job);
    *job = (pack_cache_write_t){.m = m, .plan = plan, .n = n, .weights_hash = weights_hash, .key = *key};
    memcpy(job->sub, sub, sizeof sub);
    memcpy(job->path, path, sizeof path);
    plan = NULL; /* the job's now */
    if (deferred) {
        *deferred = job;
        goto done;
    }
    if (write_run(job) == 0)
        r.outcome = PACK_CACHE_STORED;
    pack_cache_write_end(&job);
done:
    free(plan);
    r.ms = (double)(clock_now_us() - t0) / 1e3;
    if (res)
        *res = r;
    return r.n_packed;
}
