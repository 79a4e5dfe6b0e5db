/* kv_disk.c — the disk tier of the prefix cache: one checked file per KV
 * block under DIR/<ident>/ (see kv_disk.h for the format and the rules). */
#include "worker/kv_disk.h"

#include <dirent.h>
#include <sodium.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/file_mac.h"
#include "common/log.h"
#include "common/prefix_key.h"
#include "common/private_dir.h"
#include "common/xalloc.h"
#include "worker/kv_pool.h"

#define KVD_MAGIC "PGKVBLK2"
#define KVD_VERSION 2u
#define KVD_TMP_STALE_S 600 /* leftover temporaries older than this are removed at open */

/* ---- hashing ------------------------------------------------------------ */

#define P1 0x9E3779B185EBCA87ULL
#define P2 0xC2B2AE3D27D4EB4FULL
#define P3 0x165667B19E3779F9ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static inline uint64_t lane(uint64_t acc, uint64_t w) { return rotl64(acc + w * P2, 31) * P1; }
static inline uint64_t rd64(const unsigned char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

uint64_t kv_disk_hash64(const void *data, size_t n, uint64_t seed)
{
    const unsigned char *p = data;
    uint64_t a = seed + P1 + P2, b = seed + P2, c = seed, d = seed - P1;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = lane(a, rd64(p + i));
        b = lane(b, rd64(p + i + 8));
        c = lane(c, rd64(p + i + 16));
        d = lane(d, rd64(p + i + 24));
    }
    uint64_t h = rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18) + (uint64_t)n;
    for (; i + 8 <= n; i += 8)
        h = rotl64(h ^ lane(0, rd64(p + i)), 27) * P1 + P3;
    for (; i < n; i++)
        h = rotl64(h ^ (p[i] * P3), 11) * P1;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P3;
    h ^= h >> 32;
    return h;
}

int kv_disk_hash_file(const char *path, uint64_t *out, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || sb.st_size <= 0) {
        errbuf_set(err, errlen, "%s: cannot stat or empty", path);
        close(fd);
        return -1;
    }
    void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        errbuf_set(err, errlen, "%s: mmap: %s", path, strerror(errno));
        return -1;
    }
    madvise(m, (size_t)sb.st_size, MADV_SEQUENTIAL);
    *out = kv_disk_hash64(m, (size_t)sb.st_size, 0x70a60da5ULL);
    munmap(m, (size_t)sb.st_size);
    return 0;
}

#define KVD_REC_MAGIC 0x3248535748445650ULL /* "PVDHWSH2": the third word is a MAC */

void kv_disk_record_name(const struct stat *sb, char *out, size_t n)
{
    snprintf(out, n, "%llx-%llx-%lld-%lld%09ld-%lld%09ld.hash", (unsigned long long)sb->st_dev,
             (unsigned long long)sb->st_ino, (long long)sb->st_size, (long long)sb->st_mtim.tv_sec,
             (long)sb->st_mtim.tv_nsec, (long long)sb->st_ctim.tv_sec, (long)sb->st_ctim.tv_nsec);
}

static void record_path(const char *sub, const struct stat *sb, char *out, size_t n)
{
    char name[KV_DISK_RECORD_NAME];
    kv_disk_record_name(sb, name, sizeof name);
    snprintf(out, n, "%s/%s", sub, name);
}

int kv_disk_record_get(const char *sub, const struct stat *sb, const file_mac_key_t *key, const char *what,
                       uint64_t *value)
{
    char rec[4300];
    record_path(sub, sb, rec, sizeof rec);
    uint64_t r[3];
    int fd = open(rec, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t got = read(fd, r, sizeof r);
    close(fd);
    if (got == (ssize_t)sizeof r && r[0] == KVD_REC_MAGIC && r[2] == file_mac64(key, r, 16)) {
        *value = r[1];
        return 0;
    }
    log_warn("%s record %s is damaged: ignored", what, rec);
    return -1;
}

int kv_disk_record_put(const char *sub, const struct stat *sb, const file_mac_key_t *key, const char *what,
                       uint64_t value)
{
    char rec[4300], tmp[4400];
    record_path(sub, sb, rec, sizeof rec);
    uint64_t r[3] = {KVD_REC_MAGIC, value, 0};
    r[2] = file_mac64(key, r, 16);
    int fd = -1, e = kv_disk_mkdir_p(sub);
    if (e == 0) {
        /* a new private file under a random name: a name planted in advance is never opened */
        fd = private_dir_tmpfile(sub, ".tmp-rec-", tmp, sizeof tmp);
        e = fd < 0 ? errno : 0;
    }
    if (e == 0) {
        bool ok = write(fd, r, sizeof r) == (ssize_t)sizeof r;
        e = ok ? 0 : errno ? errno : EIO;
        if (close(fd) != 0 && !e)
            e = errno;
        if (!e && rename(tmp, rec) != 0)
            e = errno;
        if (e)
            unlink(tmp);
    }
    if (e)
        log_debug("%s record %s not written: %s", what, rec, strerror(e));
    return e;
}

int kv_disk_hash_file_cached(const char *path, const char *dir, const file_mac_key_t *key, uint64_t *out,
                             bool *cached, char *err, size_t errlen)
{
    if (cached)
        *cached = false;
    struct stat sb;
    char sub[4096];
    if (!dir || !*dir || !key || stat(path, &sb) != 0 ||
        (size_t)snprintf(sub, sizeof sub, "%s/weights-hash", dir) >= sizeof sub)
        return kv_disk_hash_file(path, out, err, errlen);
    if (kv_disk_record_get(sub, &sb, key, "weights hash", out) == 0) {
        if (cached)
            *cached = true;
        return 0;
    }
    if (kv_disk_hash_file(path, out, err, errlen) != 0)
        return -1;
    (void)kv_disk_record_put(sub, &sb, key, "weights hash", *out);
    return 0;
}

uint64_t kv_disk_ident(const kv_disk_shape_t *s)
{
    int64_t f[6] = {(int64_t)s->weights_hash, s->kv_type, s->qblock, s->block_size, s->n_layer, s->kv_dim};
    return kv_disk_hash64(f, sizeof f, 0x6b76646973ULL);
}

/* ---- the index: pub -> file size, plus an eviction queue ---------------- */

typedef struct entry {
    uint64_t pub;
    uint64_t touch; /* serial of the last write or hit; 0 = empty slot */
} entry_t;

typedef struct qitem {
    uint64_t pub, touch;
} qitem_t;

struct kv_disk {
    char *dir;                /* DIR/<ident> */
    file_mac_key_t key;       /* the MAC key (file_mac.h), kept outside DIR */
    kv_disk_shape_t shape;
    uint64_t ident;
    size_t row_bytes;         /* one K or V vector */
    size_t file_bytes;        /* every block file has this size */
    uint64_t cap_bytes;
    bool enabled;
    entry_t *map;             /* open addressing, (mask + 1) slots */
    uint64_t mask;
    int32_t n_keys;
    qitem_t *q;               /* eviction order, oldest first, lazily pruned */
    size_t q_head, q_len, q_cap;
    uint64_t serial;
    uint64_t *dropped;        /* keys dropped since kv_disk_take_dropped */
    size_t n_dropped, cap_dropped;
    unsigned char *buf;       /* (file_bytes) one file's bytes */
    kv_disk_stats_t st;
    kv_pool_t *pool;          /* kv_disk_attach */
};

static uint64_t mix(uint64_t k) { return (k ^ (k >> 31)) * P1; }

static entry_t *map_slot(const kv_disk_t *d, uint64_t pub)
{
    for (uint64_t i = mix(pub) & d->mask;; i = (i + 1) & d->mask)
        if (d->map[i].touch == 0 || d->map[i].pub == pub)
            return &d->map[i];
}

static void map_grow(kv_disk_t *d)
{
    entry_t *old = d->map;
    uint64_t n_old = old ? d->mask + 1 : 0;
    uint64_t n = n_old ? 2 * n_old : 1024;
    d->map = xcalloc((size_t)n, sizeof *d->map);
    d->mask = n - 1;
    for (uint64_t i = 0; i < n_old; i++)
        if (old[i].touch)
            *map_slot(d, old[i].pub) = old[i];
    free(old);
}

static void map_del(kv_disk_t *d, uint64_t pub)
{
    entry_t *e = map_slot(d, pub);
    if (!e->touch)
        return;
    /* backward-shift deletion keeps probe chains whole */
    uint64_t i = (uint64_t)(e - d->map);
    d->map[i].touch = 0;
    for (uint64_t j = (i + 1) & d->mask; d->map[j].touch; j = (j + 1) & d->mask) {
        uint64_t h = mix(d->map[j].pub) & d->mask;
        /* move j back to i when its home h is not in (i, j] cyclically */
        bool in = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (!in) {
            d->map[i] = d->map[j];
            d->map[j].touch = 0;
            i = j;
        }
    }
    d->n_keys--;
    d->st.n_files = d->n_keys;
    d->st.bytes_used -= d->file_bytes;
}

static void q_push(kv_disk_t *d, uint64_t pub, uint64_t touch)
{
    if (d->q_head + d->q_len == d->q_cap) {
        if (d->q_head > 0) { /* slide to the front */
            memmove(d->q, d->q + d->q_head, d->q_len * sizeof *d->q);
            d->q_head = 0;
        }
        if (d->q_len == d->q_cap) {
            d->q_cap = d->q_cap ? 2 * d->q_cap : 1024;
            d->q = xrealloc(d->q, d->q_cap * sizeof *d->q);
        }
    }
    d->q[d->q_head + d->q_len++] = (qitem_t){pub, touch};
}

/* Records pub (a file of file_bytes) as most recent. */
static void index_touch(kv_disk_t *d, uint64_t pub)
{
    if ((uint64_t)(d->n_keys + 1) * 2 > d->mask + 1)
        map_grow(d);
    entry_t *e = map_slot(d, pub);
    if (!e->touch) {
        e->pub = pub;
        d->n_keys++;
        d->st.n_files = d->n_keys;
        d->st.bytes_used += d->file_bytes;
    }
    e->touch = ++d->serial;
    q_push(d, pub, e->touch);
}

static void drop_note(kv_disk_t *d, uint64_t pub)
{
    if (d->n_dropped == d->cap_dropped) {
        d->cap_dropped = d->cap_dropped ? 2 * d->cap_dropped : 64;
        d->dropped = xrealloc(d->dropped, d->cap_dropped * sizeof *d->dropped);
    }
    d->dropped[d->n_dropped++] = pub;
}

static void path_of(const kv_disk_t *d, uint64_t pub, char *out, size_t n)
{
    snprintf(out, n, "%s/%016" PRIx64 ".kvb", d->dir, pub);
}

/* Removes the oldest file; false when the index is empty. */
static bool evict_oldest(kv_disk_t *d)
{
    while (d->q_len > 0) {
        qitem_t it = d->q[d->q_head++];
        d->q_len--;
        entry_t *e = map_slot(d, it.pub);
        if (!e->touch || e->touch != it.touch)
            continue; /* superseded by a later touch, or gone */
        char path[4096];
        path_of(d, it.pub, path, sizeof path);
        unlink(path); /* ENOENT: another replica removed it */
        map_del(d, it.pub);
        drop_note(d, it.pub);
        d->st.n_evicted++;
        return true;
    }
    return false;
}

/* Turns the tier off: one log line, every key dropped. */
static void tier_off(kv_disk_t *d, const char *what, int err)
{
    if (!d->enabled)
        return;
    d->enabled = false;
    d->st.enabled = false;
    log_warn("kv disk tier %s: %s: %s; continuing without a disk tier", d->dir, what, strerror(err));
    for (uint64_t i = 0; d->map && i <= d->mask; i++)
        if (d->map[i].touch)
            drop_note(d, d->map[i].pub);
    free(d->map);
    d->map = NULL;
    d->mask = 0;
    d->n_keys = 0;
    d->st.n_files = 0;
    d->st.bytes_used = 0;
    d->q_len = d->q_head = 0;
}

/* ---- open / close ------------------------------------------------------- */

int kv_disk_mkdir_p(const char *path)
{
    char err[512];
    errno = 0;
    if (private_dir_make(path, "kv disk folder", err, sizeof err) == 0)
        return 0;
    log_warn("%s", err);
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return ENOTDIR;
    return errno && errno != EEXIST ? errno : EPERM;
}

typedef struct found {
    uint64_t pub;
    int64_t mtime_ns;
} found_t;

static int by_mtime(const void *a, const void *b)
{
    const found_t *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns;
}

kv_disk_t *kv_disk_open(const char *dir, uint64_t cap_bytes, const kv_disk_shape_t *shape,
                        const file_mac_key_t *key)
{
    if (!dir || !shape || !key)
        return NULL;
    kv_disk_t *d = xcalloc(1, sizeof *d);
    d->shape = *shape;
    d->key = *key;
    d->ident = kv_disk_ident(shape);
    d->row_bytes = kv_type_row_bytes((kv_type_t)shape->kv_type, shape->kv_dim, shape->qblock);
    d->file_bytes = KV_DISK_HEADER_BYTES + (size_t)shape->block_size * 4 +
                    2 * (size_t)shape->n_layer * (size_t)shape->block_size * d->row_bytes + KV_DISK_MAC_BYTES;
    d->cap_bytes = cap_bytes;
    d->st.cap_bytes = cap_bytes;
    size_t n = strlen(dir) + 32;
    d->dir = xmalloc(n);
    snprintf(d->dir, n, "%s/%016" PRIx64, dir, d->ident);
    d->buf = xmalloc(d->file_bytes);
    d->enabled = d->st.enabled = true;
    map_grow(d);
    if (d->row_bytes == 0) {
        tier_off(d, "bad KV shape", EINVAL);
        return d;
    }
    if (cap_bytes < d->file_bytes) {
        log_warn("kv disk tier %s: the size cap (%" PRIu64 " bytes) is smaller than one block (%zu bytes)", d->dir,
                 cap_bytes, d->file_bytes);
        tier_off(d, "size cap", ENOSPC);
        return d;
    }
    char perr[512];
    if (private_dir_make(dir, "--kv-cache-dir", perr, sizeof perr) != 0) {
        log_error("%s", perr);
        tier_off(d, "refused the folder", EPERM);
        return d;
    }
    int e = kv_disk_mkdir_p(d->dir);
    if (e != 0) {
        tier_off(d, "cannot create the folder", e);
        return d;
    }
    DIR *dh = opendir(d->dir);
    if (!dh) {
        tier_off(d, "cannot read the folder", errno);
        return d;
    }
    found_t *f = NULL;
    size_t n_f = 0, cap_f = 0;
    struct dirent *de;
    time_t now = time(NULL);
    while ((de = readdir(dh)) != NULL) {
        const char *nm = de->d_name;
        struct stat sb;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", d->dir, nm);
        if (strncmp(nm, ".tmp-", 5) == 0) {
            if (lstat(path, &sb) == 0 && now - sb.st_mtime > KVD_TMP_STALE_S)
                unlink(path);
            continue;
        }
        char *end;
        if (strlen(nm) != 20 || strcmp(nm + 16, ".kvb") != 0)
            continue;
        uint64_t pub = strtoull(nm, &end, 16);
        if (end != nm + 16 || lstat(path, &sb) != 0 || !S_ISREG(sb.st_mode))
            continue; /* a symlink is never indexed (nor followed at load) */
        if ((size_t)sb.st_size != d->file_bytes) { /* torn or foreign: never served */
            unlink(path);
            d->st.n_rejected++;
            continue;
        }
        if (n_f == cap_f) {
            cap_f = cap_f ? 2 * cap_f : 256;
            f = xrealloc(f, cap_f * sizeof *f);
        }
        f[n_f++] = (found_t){pub, (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec};
    }
    closedir(dh);
    if (n_f)
        qsort(f, n_f, sizeof *f, by_mtime);
    for (size_t i = 0; i < n_f; i++)
        index_touch(d, f[i].pub);
    free(f);
    while (d->st.bytes_used > d->cap_bytes && evict_oldest(d)) {
    }
    d->n_dropped = 0; /* nothing was announced yet */
    log_info("kv disk tier %s: %d blocks (%.1f MiB) found, cap %.1f MiB", d->dir, d->n_keys,
             (double)d->st.bytes_used / 1048576.0, (double)cap_bytes / 1048576.0);
    return d;
}

void kv_disk_close(kv_disk_t **dp)
{
    if (!dp || !*dp)
        return;
    kv_disk_t *d = *dp;
    free(d->dir);
    free(d->map);
    free(d->q);
    free(d->dropped);
    free(d->buf);
    free(d);
    *dp = NULL;
}

/* ---- files -------------------------------------------------------------- */

/* The header of a block file of this tier. */
static void header_fill(const kv_disk_t *d, unsigned char *h, uint64_t pub, uint64_t parent_pub)
{
    memset(h, 0, KV_DISK_HEADER_BYTES);
    uint32_t ver = KVD_VERSION, hb = KV_DISK_HEADER_BYTES, rb = (uint32_t)d->row_bytes;
    uint64_t payload = 2 * (uint64_t)d->shape.n_layer * (uint64_t)d->shape.block_size * d->row_bytes;
    int32_t geo[5] = {d->shape.block_size, d->shape.n_layer, d->shape.kv_dim, d->shape.kv_type, d->shape.qblock};
    memcpy(h, KVD_MAGIC, 8);
    memcpy(h + 8, &ver, 4);
    memcpy(h + 12, &hb, 4);
    memcpy(h + 16, &d->ident, 8);
    memcpy(h + 24, &d->shape.weights_hash, 8);
    memcpy(h + 32, &pub, 8);
    memcpy(h + 40, &parent_pub, 8);
    memcpy(h + 48, geo, sizeof geo);
    memcpy(h + 68, &rb, 4);
    memcpy(h + 72, &payload, 8);
}

int kv_disk_store(kv_disk_t *d, const kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                  const int32_t *tokens)
{
    if (!d->enabled)
        return -1;
    if (st->block_size != d->shape.block_size || st->n_layer != d->shape.n_layer || st->kv_dim != d->shape.kv_dim ||
        kv_store_row_bytes(st) != d->row_bytes || block < 0 || block >= st->n_blocks)
        return -1;
    if (kv_disk_has(d, pub)) {
        index_touch(d, pub);
        return 0;
    }
    while (d->st.bytes_used + d->file_bytes > d->cap_bytes && evict_oldest(d)) {
    }
    /* the file's bytes */
    const int bs = d->shape.block_size;
    const size_t blk_bytes = (size_t)bs * d->row_bytes;
    unsigned char *b = d->buf;
    header_fill(d, b, pub, parent_pub);
    size_t off = KV_DISK_HEADER_BYTES;
    memcpy(b + off, tokens, (size_t)bs * 4);
    off += (size_t)bs * 4;
    for (int l = 0; l < d->shape.n_layer; l++) {
        memcpy(b + off, kv_store_k_at(st, l, block, 0), blk_bytes);
        off += blk_bytes;
        memcpy(b + off, kv_store_v_at(st, l, block, 0), blk_bytes);
        off += blk_bytes;
    }
    file_mac(&d->key, b, off, b + off, KV_DISK_MAC_BYTES);
    off += KV_DISK_MAC_BYTES;
    /* temp (0600, O_EXCL|O_NOFOLLOW, a random name) + rename: readers see
     * the whole file or none, and a name planted in advance is never opened */
    char tmp[4096], path[4096];
    path_of(d, pub, path, sizeof path);
    int fd = private_dir_tmpfile(d->dir, ".tmp-", tmp, sizeof tmp);
    if (fd < 0) {
        d->st.n_errors++;
        tier_off(d, "cannot create a block file", errno);
        return -1;
    }
    size_t done = 0;
    int werr = 0;
    while (done < off) {
        ssize_t w = write(fd, b + done, off - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            werr = w < 0 ? errno : ENOSPC;
            break;
        }
        done += (size_t)w;
    }
    if (close(fd) != 0 && !werr)
        werr = errno;
    if (!werr && rename(tmp, path) != 0)
        werr = errno;
    if (werr) {
        unlink(tmp);
        d->st.n_errors++;
        tier_off(d, "cannot write a block file", werr);
        return -1;
    }
    index_touch(d, pub);
    d->st.n_written++;
    d->st.bytes_written += off;
    return 0;
}

/* Removes a file that failed its checks (forged: its MAC). */
static int reject(kv_disk_t *d, const char *path, uint64_t pub, bool forged)
{
    d->st.n_rejected++;
    if (forged)
        d->st.n_forged++;
    log_warn("kv disk tier: %s failed its checks (%s): removed, not served", path,
             forged ? "its MAC: forged, copied in, or written with another key" : "torn or corrupt");
    unlink(path);
    if (map_slot(d, pub)->touch) {
        map_del(d, pub);
        drop_note(d, pub);
    }
    return 2;
}

int kv_disk_load(kv_disk_t *d, kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                 const int32_t *tokens)
{
    if (!d->enabled || st->block_size != d->shape.block_size || st->n_layer != d->shape.n_layer ||
        st->kv_dim != d->shape.kv_dim || kv_store_row_bytes(st) != d->row_bytes || block < 0 ||
        block >= st->n_blocks)
        return 1;
    char path[4096];
    path_of(d, pub, path, sizeof path);
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ELOOP) /* a symlink planted at a block's name */
        return reject(d, path, pub, true);
    if (fd < 0) {
        d->st.n_missed++;
        if (map_slot(d, pub)->touch) { /* removed by another replica */
            map_del(d, pub);
            drop_note(d, pub);
        }
        return 1;
    }
    unsigned char *b = d->buf;
    size_t got = 0;
    bool big = false;
    for (;;) {
        ssize_t r = read(fd, b + got, d->file_bytes - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == d->file_bytes) {
            unsigned char extra;
            big = read(fd, &extra, 1) > 0;
            break;
        }
    }
    close(fd);
    int chk = big ? -1 : kv_disk_check(&d->shape, &d->key, b, got, pub, parent_pub, tokens);
    if (chk != 0)
        return reject(d, path, pub, chk == -2);
    const int bs = d->shape.block_size;
    const size_t blk_bytes = (size_t)bs * d->row_bytes;
    size_t off = KV_DISK_HEADER_BYTES + (size_t)bs * 4;
    for (int l = 0; l < d->shape.n_layer; l++) {
        memcpy(kv_store_k_at(st, l, block, 0), b + off, blk_bytes);
        off += blk_bytes;
        memcpy(kv_store_v_at(st, l, block, 0), b + off, blk_bytes);
        off += blk_bytes;
    }
    index_touch(d, pub);
    d->st.n_loaded++;
    d->st.bytes_read += d->file_bytes;
    return 0;
}

int kv_disk_check(const kv_disk_shape_t *shape, const file_mac_key_t *key, const uint8_t *buf, size_t len,
                  uint64_t pub, uint64_t parent_pub, const int32_t *tokens)
{
    kv_disk_t d = {.shape = *shape, .ident = kv_disk_ident(shape)};
    d.row_bytes = kv_type_row_bytes((kv_type_t)shape->kv_type, shape->kv_dim, shape->qblock);
    if (d.row_bytes == 0 || shape->block_size < 1 || shape->n_layer < 1)
        return -1;
    const size_t want_len = KV_DISK_HEADER_BYTES + (size_t)shape->block_size * 4 +
                            2 * (size_t)shape->n_layer * (size_t)shape->block_size * d.row_bytes +
                            KV_DISK_MAC_BYTES;
    if (!buf || len != want_len)
        return -1;
    unsigned char want[KV_DISK_HEADER_BYTES];
    header_fill(&d, want, pub, parent_pub);
    if (memcmp(buf, want, KV_DISK_HEADER_BYTES) != 0 ||
        memcmp(buf + KV_DISK_HEADER_BYTES, tokens, (size_t)shape->block_size * 4) != 0)
        return -1;
    uint8_t mac[KV_DISK_MAC_BYTES];
    file_mac(key, buf, len - KV_DISK_MAC_BYTES, mac, sizeof mac);
    if (sodium_memcmp(mac, buf + len - KV_DISK_MAC_BYTES, sizeof mac) != 0)
        return -2;
    return 0;
}

bool kv_disk_has(const kv_disk_t *d, uint64_t pub)
{
    return d->enabled && d->map && map_slot(d, pub)->touch != 0;
}

int32_t kv_disk_n_keys(const kv_disk_t *d) { return d->n_keys; }

int32_t kv_disk_keys(const kv_disk_t *d, uint64_t *out, int32_t max)
{
    int32_t n = 0;
    for (uint64_t i = 0; d->map && i <= d->mask && n < max; i++)
        if (d->map[i].touch)
            out[n++] = d->map[i].pub;
    return n;
}

int32_t kv_disk_take_dropped(kv_disk_t *d, uint64_t *out, int32_t max)
{
    int32_t n = (int32_t)(d->n_dropped < (size_t)max ? d->n_dropped : (size_t)max);
    if (n <= 0)
        return 0;
    if (n > 0) /* d->dropped is NULL before the first drop */
        memcpy(out, d->dropped + (d->n_dropped - (size_t)n), (size_t)n * sizeof *out);
    d->n_dropped -= (size_t)n;
    return n;
}

void kv_disk_stats(const kv_disk_t *d, kv_disk_stats_t *out) { *out = d->st; }

/* ---- the pool's tier ---------------------------------------------------- */

static int t_store(void *ud, const kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                   const int32_t *tokens)
{
    return kv_disk_store(ud, st, block, pub, parent_pub, tokens);
}

static int t_load(void *ud, kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub, const int32_t *tokens)
{
    return kv_disk_load(ud, st, block, pub, parent_pub, tokens);
}

static bool t_has(void *ud, uint64_t pub) { return kv_disk_has(ud, pub); }
static int32_t t_n_keys(void *ud) { return kv_disk_n_keys(ud); }
static int32_t t_keys(void *ud, uint64_t *out, int32_t max) { return kv_disk_keys(ud, out, max); }
static int32_t t_dropped(void *ud, uint64_t *out, int32_t max) { return kv_disk_take_dropped(ud, out, max); }

void kv_disk_attach(kv_disk_t *d, kv_pool_t *pool)
{
    kv_pool_tier_t t = {.ud = d, .store = t_store, .load = t_load, .has = t_has, .n_keys = t_n_keys,
                        .keys = t_keys, .take_dropped = t_dropped};
    d->pool = pool;
    kv_pool_set_tier(pool, &t);
}
