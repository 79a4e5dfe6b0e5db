/* Tests for the packed-weight cache (worker/pack_cache.h) and the
 * remembered weights hash (kv_disk_hash_file_cached, worker/kv_disk.h).
 *
 * Models from the real $PAGODA_BUILD/pagoda-mkmodel: Q4_K_M (Q4_K and Q6_K
 * matrices) and Q8_0, 2 layers of dim 256. For each:
 *   1. a fresh model packed without a cache: its packed arena and the
 *      logits of an 8-row prefill (the reference);
 *   2. pack_cache_pack into an empty folder: packs (STORED), writes one
 *      file; the arena is byte-identical to the reference;
 *   3. a second load through the cache: LOADED from the file, the arena
 *      byte-identical, every matrix at the same offset, and the prefill's
 *      logits bit-identical to the reference; trusted through the writer's
 *      verified record, checked in full without it or with it damaged
 *      (and the record written again);
 *   4. damaged files, each rejected (never used), repacked with the same
 *      bytes, and rewritten so that the next start loads again: a flipped
 *      payload byte, a flipped header byte, a file cut to half, and a
 *      foreign file (the right name, made for other weights). A write
 *      removes a temporary older than 10 minutes, not a young one, and
 *      prunes: the same weights' file of another layout, another model's
 *      file unread for 40 days (not with PAGODA_PACK_MAX_AGE_DAYS=0), the
 *      record of a file no longer there; a recent file stays.
 *   5. a deferred write: no file until pack_cache_write_begin, the file
 *      there after pack_cache_write_end (and loadable); ended without a
 *      begin, no file.
 * Steps 2-5 run twice: the file used through its mapping, then copied.
 * A folder that cannot be created (its parent is a regular file) gives
 * PACKED (no file) and the same arena. pack_cache_parse refuses short,
 * misaligned and inconsistent headers. The weights hash: computed once,
 * then remembered (same value); a new mtime or a damaged record computes
 * it again. ~0.3 s. Without AVX2 nothing is packed: only the parser and
 * hash tests run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"
#include "worker/kv_disk.h"
#include "worker/model/forward.h"
#include "worker/model/model.h"
#include "worker/pack_cache.h"
#include "tests/support/support.h"

static const file_mac_key_t g_key = {{9, 8, 7}}; /* the worker's MAC key in these tests */

static char g_dir[] = "/tmp/pagoda-pack-cache-test-XXXXXX";

static int sh(const char *fmt, const char *a, const char *b)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    int st = system(cmd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Creates path if missing and sets its access and modification times to
 * `days` days ago. */
static void aged_file(const char *path, int days)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    struct timespec t[2];
    clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= (time_t)days * 86400;
    t[1] = t[0];
    assert_int_equal(futimens(fd, t), 0);
    close(fd);
}

static int setup(void **s)
{
    (void)s;
    if (!mkdtemp(g_dir))
        return -1;
    const char *types[2] = {"Q4_K_M", "Q8_0"};
    for (int i = 0; i < 2; i++) {
        char name[32], args[256];
        snprintf(name, sizeof name, "%s.gguf", types[i]);
        snprintf(args, sizeof args, "--dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --type %s --seed 5",
                 types[i]);
        if (support_mkmodel(g_dir, name, args) != 0)
            return -1;
    }
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    return sh("rm -rf %s%s", g_dir, "");
}

/* logits of an 8-row prefill of one sequence (vocab floats of the last row) */
static float *prefill(const model_t *m)
{
    forward_t *f = forward_new(m, 8, 2);
    assert_non_null(f);
    kv_store_t kv = {.n_layer = m->cfg.n_layer, .n_blocks = 1, .block_size = 8, .kv_dim = m->cfg.kv_dim};
    size_t kvn = (size_t)kv.n_layer * 8 * kv.kv_dim;
    kv.k = xcalloc(kvn, sizeof(float));
    kv.v = xcalloc(kvn, sizeof(float));
    int32_t bt[1] = {0}, nbs[1] = {1}, tok[8], pos[8], seq[8] = {0};
    const int32_t *bts[1] = {bt};
    uint8_t want[8] = {0, 0, 0, 0, 0, 0, 0, 1};
    for (int i = 0; i < 8; i++) {
        tok[i] = (13 + 37 * i) % m->cfg.vocab;
        pos[i] = i;
    }
    fwd_batch_t b = {.n_rows = 8, .token = tok, .pos = pos, .seq = seq, .want_logits = want, .n_seq = 1,
                     .block_tables = bts, .n_blocks = nbs};
    float *lg = xmalloc((size_t)m->cfg.vocab * sizeof(float));
    assert_int_equal(forward_run(f, &b, &kv, lg), 0);
    free(kv.k);
    free(kv.v);
    forward_free(&f);
    return lg;
}

typedef struct ref {
    model_t *m;   /* packed without a cache */
    float *logits;
} ref_t;

static model_t *load(const char *path)
{
    model_t *m = NULL;
    char err[256];
    assert_int_equal(model_load(path, &m, err, sizeof err), 0);
    return m;
}

/* m (packed through the cache) equals the reference: same bytes, same
 * offsets, same logits */
static void same_as_ref(const ref_t *r, model_t *m)
{
    assert_int_equal(m->packed_bytes, r->m->packed_bytes);
    assert_memory_equal(m->packed_arena, r->m->packed_arena, m->packed_bytes);
    const uint8_t *a = m->packed_arena, *b = r->m->packed_arena;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        assert_int_equal((const uint8_t *)m->layers[l].wq.packed - a, (const uint8_t *)r->m->layers[l].wq.packed - b);
        assert_int_equal((const uint8_t *)m->layers[l].w_down.packed - a,
                         (const uint8_t *)r->m->layers[l].w_down.packed - b);
    }
    assert_int_equal((const uint8_t *)m->output.packed - a, (const uint8_t *)r->m->output.packed - b);
    float *lg = prefill(m);
    assert_memory_equal(lg, r->logits, (size_t)m->cfg.vocab * sizeof(float));
    free(lg);
}

/* pack path through the cache in dir with hash; checks the outcome and the
 * result, frees the model */
static bool g_map; /* the run's pack_cache_use_map */

static pack_cache_result_t through(const ref_t *r, const char *path, const char *dir, uint64_t hash,
                                   pack_cache_outcome_t want, bool rejected)
{
    model_t *m = load(path);
    pack_cache_result_t res;
    int n = pack_cache_pack(m, 2, dir, &g_key, hash, &res, NULL);
    assert_int_equal(res.outcome, want);
    assert_int_equal(res.rejected, rejected);
    assert_int_equal(n, res.n_packed);
    assert_true(n > 0);
    assert_true(res.outcome != PACK_CACHE_LOADED || res.mapped == g_map);
    assert_true(res.mapped == (m->packed_map != NULL));
    same_as_ref(r, m);
    model_free(&m);
    return res;
}

static void cache_file(const char *dir, uint64_t hash, char *out, size_t n)
{
    snprintf(out, n, "%s/packed/%016llx-%016llx.pack", dir, (unsigned long long)hash,
             (unsigned long long)pack_cache_fingerprint());
}

static void flip(const char *file, off_t at)
{
    int fd = open(file, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, at), 1);
    c ^= 0x10;
    assert_int_equal(pwrite(fd, &c, 1, at), 1);
    /* a new mtime as any later change has: on a kernel with coarse
     * timestamps this write and the verified record's could share one */
    struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_sec = time(NULL) - 3600}};
    assert_int_equal(futimens(fd, ts), 0);
    close(fd);
}

static off_t file_size(const char *file)
{
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    return sb.st_size;
}

static void check_type(const char *type)
{
    if (!qgemm_avx2_available()) {
        print_message("  no AVX2 + F16C: nothing is packed, nothing cached\n");
        skip();
    }
    char path[256], dir[256], file[512], other[512];
    snprintf(path, sizeof path, "%s/%s.gguf", g_dir, type);
    snprintf(dir, sizeof dir, "%s/cache-%s-%d", g_dir, type, (int)g_map);
    ref_t r = {.m = load(path)};
    assert_true(model_pack_int8(r.m, 2) > 0);
    r.logits = prefill(r.m);
    uint64_t hash = 0x1234abcd5678ef00ULL ^ (uint64_t)type[1];
    cache_file(dir, hash, file, sizeof file);

    through(&r, path, dir, hash, PACK_CACHE_STORED, false);        /* 2 */
    const off_t size = file_size(file);
    /* 3: the writer's verified record spares the checksums; without it
     * every byte is checked and the record written again */
    pack_cache_result_t res = through(&r, path, dir, hash, PACK_CACHE_LOADED, false);
        assert_true(res.trusted);
    char vdir[600]; /* one record there, the file's */
    snprintf(vdir, sizeof vdir, "%s/packed/verified", dir);
    assert_int_equal(sh("[ $(ls %s | wc -l) -eq 1 ] && rm %s/*.hash", vdir, vdir), 0);
    assert_false(through(&r, path, dir, hash, PACK_CACHE_LOADED, false).trusted);
    assert_true(through(&r, path, dir, hash, PACK_CACHE_LOADED, false).trusted);
    /* a damaged record (its first byte): checked again */
    assert_int_equal(sh("[ $(ls %s | wc -l) -eq 1 ] && printf x | dd of=$(ls -d %s/*.hash) bs=1 conv=notrunc "
                        "status=none", vdir, vdir), 0);
    assert_false(through(&r, path, dir, hash, PACK_CACHE_LOADED, false).trusted);

    flip(file, size - 100);                                        /* 4: payload byte */
    through(&r, path, dir, hash, PACK_CACHE_STORED, true);
    through(&r, path, dir, hash, PACK_CACHE_LOADED, false);
    flip(file, 60);                                                /* the table */
    through(&r, path, dir, hash, PACK_CACHE_STORED, true);
    assert_int_equal(truncate(file, size / 2), 0);                 /* torn */
    through(&r, path, dir, hash, PACK_CACHE_STORED, true);
    assert_int_equal(file_size(file), size);
    /* foreign: a whole file made for other weights, under this name */
    through(&r, path, dir, hash + 1, PACK_CACHE_STORED, false);
    cache_file(dir, hash + 1, other, sizeof other);
    assert_int_equal(rename(other, file), 0);
    /* a temporary a killed writer left an hour ago goes at the next write;
     * one just begun (another writer's) stays */
    char stale[600], young[600];
    snprintf(stale, sizeof stale, "%s.tmp.1", file);
    snprintf(young, sizeof young, "%s.tmp.2", file);
    assert_int_equal(sh("touch -d '1 hour ago' %s && touch %s", stale, young), 0);
    through(&r, path, dir, hash, PACK_CACHE_STORED, true);
    assert_int_equal(access(stale, F_OK), -1);
    assert_int_equal(access(young, F_OK), 0);
    assert_int_equal(unlink(young), 0);
    through(&r, path, dir, hash, PACK_CACHE_LOADED, false);

    /* pruning at a write: the same weights in another layout and another
     * model's file unread for 40 days go, with the verified record of a file
     * no longer there; a recent file of another model and the file just
     * written (with its record) stay */
    char sibling[600], aged[600], recent[600], orphan[600];
    snprintf(sibling, sizeof sibling, "%s/packed/%016llx-%016llx.pack", dir, (unsigned long long)hash,
             (unsigned long long)(pack_cache_fingerprint() ^ 1));
    cache_file(dir, hash + 7, aged, sizeof aged);
    cache_file(dir, hash + 8, recent, sizeof recent);
    snprintf(orphan, sizeof orphan, "%s/packed/verified/1-2-3-4000000000-5000000000.hash", dir);
    aged_file(sibling, 0);
    aged_file(recent, 0);
    aged_file(orphan, 0);
    aged_file(aged, 40);
    assert_int_equal(unlink(file), 0);
    through(&r, path, dir, hash, PACK_CACHE_STORED, false);
    assert_int_equal(access(sibling, F_OK), -1);
    assert_int_equal(access(aged, F_OK), -1);
    assert_int_equal(access(orphan, F_OK), -1);
    assert_int_equal(access(recent, F_OK), 0);
    assert_int_equal(access(file, F_OK), 0);
    assert_true(through(&r, path, dir, hash, PACK_CACHE_LOADED, false).trusted); /* its record stayed */
    /* PAGODA_PACK_MAX_AGE_DAYS=0: nothing goes by age */
    aged_file(aged, 40);
    setenv("PAGODA_PACK_MAX_AGE_DAYS", "0", 1);
    assert_int_equal(unlink(file), 0);
    through(&r, path, dir, hash, PACK_CACHE_STORED, false);
    unsetenv("PAGODA_PACK_MAX_AGE_DAYS");
    assert_int_equal(access(aged, F_OK), 0);
    assert_int_equal(unlink(aged), 0);
    assert_int_equal(unlink(recent), 0);
    through(&r, path, dir, hash, PACK_CACHE_LOADED, false);

    /* deferred: nothing written until begin; end waits for the thread;
     * a job ended without a begin writes nothing */
    assert_int_equal(unlink(file), 0);
    for (int begin = 0; begin < 2; begin++) {
        model_t *m = load(path);
        pack_cache_result_t res;
        pack_cache_write_t *job = NULL;
        assert_true(pack_cache_pack(m, 2, dir, &g_key, hash, &res, &job) > 0);
        assert_int_equal(res.outcome, PACK_CACHE_PACKED);
        assert_non_null(job);
        assert_int_equal(access(file, F_OK), -1);
        if (begin)
            pack_cache_write_begin(job);
        pack_cache_write_end(&job);
        assert_null(job);
        assert_int_equal(access(file, F_OK), begin ? 0 : -1);
        model_free(&m);
    }
    through(&r, path, dir, hash, PACK_CACHE_LOADED, false);

    /* a folder that cannot be made: packed, nothing written */
    char blocked[512];
    snprintf(blocked, sizeof blocked, "%s/plain-file", g_dir);
    FILE *fp = fopen(blocked, "w");
    assert_non_null(fp);
    fclose(fp);
    through(&r, path, blocked, hash, PACK_CACHE_PACKED, false);
    /* no directory: plain packing */
    through(&r, path, NULL, hash, PACK_CACHE_OFF, false);
    /* no temporaries left behind */
    char sub[300];
    snprintf(sub, sizeof sub, "%s/packed", dir);
    DIR *d = opendir(sub);
    assert_non_null(d);
    int n_files = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            size_t len = strlen(e->d_name);
            n_files += len > 5 && strcmp(e->d_name + len - 5, ".pack") == 0;
            assert_null(strstr(e->d_name, ".tmp."));
        }
    closedir(d);
    assert_int_equal(n_files, 1);
    free(r.logits);
    model_free(&r.m);
}

/* each type twice: the loaded file used through its mapping, then copied
 * (the default policy picks between them by the kernel's page size) */
static void check_type_both_paths(const char *type)
{
    for (int map = 1; map >= 0; map--) {
        pack_cache_set_map_policy((g_map = map) ? PACK_CACHE_MAP_ALWAYS : PACK_CACHE_MAP_NEVER);
        check_type(type);
    }
    pack_cache_set_map_policy(PACK_CACHE_MAP_HUGE);
}

static void test_q4_k_m(void **state)
{
    (void)state;
    check_type_both_paths("Q4_K_M");
}

static void test_q8_0(void **state)
{
    (void)state;
    check_type_both_paths("Q8_0");
}

/* The fingerprint folds in exactly the quant traits rows with a packed
 * layout, and each of them does pack: a new packed type cannot be left out
 * (stale pack files of a changed layout would be accepted). */
static void test_fingerprint_covers_every_packed_type(void **state)
{
    (void)state;
    const quant_traits_t *q;
    int n_packed = 0;
    for (size_t i = 0; (q = quant_traits_at(i)); i++) {
        bool packed = q->packed != QUANT_PACK_NONE;
        if (pack_cache_fingerprint_covers(q->type) != packed)
            fail_msg("%s: packed column %d, in the fingerprint %d", q->name, (int)q->packed,
                     (int)pack_cache_fingerprint_covers(q->type));
        if (packed)
            assert_true(qgemm_packed_size(q->type, 9, 512) > 0);
        n_packed += packed;
    }
    assert_true(n_packed > 0);
}

static void test_parse(void **state)
{
    (void)state;
    pack_cache_header_t h;
    pack_cache_entry_t e[2];
    char err[128];
    uint8_t b[4096] = {0};
    assert_int_equal(pack_cache_parse(b, 10, &g_key, &h, e, err, sizeof err), -1);
    assert_int_equal(pack_cache_parse(b, sizeof b, &g_key, &h, e, err, sizeof err), -1); /* magic */
    /* a whole 2-matrix header, then one field at a time broken */
    uint32_t ver = PACK_CACHE_VERSION, n = 2;
    uint64_t off = 4096, pay = 128 + 64, fb = off + pay;
    memcpy(b, PACK_CACHE_MAGIC, 8);
    memcpy(b + 8, &ver, 4);
    memcpy(b + 12, &n, 4);
    memcpy(b + 32, &off, 8);
    memcpy(b + 40, &pay, 8);
    memcpy(b + 48, &fb, 8);
    uint64_t sizes[2] = {128, 64};
    for (int i = 0; i < 2; i++)
        memcpy(b + PACK_CACHE_HEAD + PACK_CACHE_ENTRY * i + 24, &sizes[i], 8);
    size_t end = PACK_CACHE_HEAD + 2 * PACK_CACHE_ENTRY + 8;
    uint64_t sum = file_mac64(&g_key, b, end - 8);
    memcpy(b + end - 8, &sum, 8);
    assert_int_equal(pack_cache_parse(b, end, &g_key, &h, e, err, sizeof err), 2);
    assert_int_equal(e[0].bytes, 128);
    assert_int_equal(h.file_bytes, fb);
    assert_int_equal(pack_cache_parse(b, end - 1, &g_key, &h, e, err, sizeof err), -1); /* cut */
    assert_int_equal(pack_cache_parse(b, PACK_CACHE_HEAD, &g_key, &h, NULL, err, sizeof err), 2);
    for (size_t at = 0; at < end; at++) { /* every header byte is checked */
        b[at] ^= 1;
        assert_int_equal(pack_cache_parse(b, end, &g_key, &h, e, err, sizeof err), -1);
        b[at] ^= 1;
    }
}

static void test_weights_hash_cached(void **state)
{
    (void)state;
    char path[256], dir[256], err[256];
    snprintf(path, sizeof path, "%s/Q8_0.gguf", g_dir);
    snprintf(dir, sizeof dir, "%s/hashes", g_dir);
    uint64_t direct, h1 = 0, h2 = 0, h3 = 0, h4 = 0;
    bool cached = true;
    assert_int_equal(kv_disk_hash_file(path, &direct, err, sizeof err), 0);
    assert_int_equal(kv_disk_hash_file_cached(path, dir, &g_key, &h1, &cached, err, sizeof err), 0);
    assert_false(cached);
    assert_int_equal(kv_disk_hash_file_cached(path, dir, &g_key, &h2, &cached, err, sizeof err), 0);
    assert_true(cached);
    assert_int_equal(h1, direct);
    assert_int_equal(h2, direct);
    /* damaged record: ignored, recomputed, rewritten */
    assert_int_equal(sh("for f in %s/weights-hash/*.hash; do printf 'xxxxxxxx' | dd of=$f bs=1 seek=8 "
                        "conv=notrunc 2>/dev/null; done%s", dir, ""), 0);
    assert_int_equal(kv_disk_hash_file_cached(path, dir, &g_key, &h3, &cached, err, sizeof err), 0);
    assert_false(cached);
    assert_int_equal(h3, direct);
    /* a new mtime: another identity, hashed again */
    assert_int_equal(sh("touch -d '2001-02-03 04:05:06' %s%s", path, ""), 0);
    assert_int_equal(kv_disk_hash_file_cached(path, dir, &g_key, &h4, &cached, err, sizeof err), 0);
    assert_false(cached);
    assert_int_equal(h4, direct);
    /* a missing file is an error either way */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.gguf", g_dir);
    assert_int_equal(kv_disk_hash_file_cached(missing, dir, &g_key, &h4, &cached, err, sizeof err), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_k_m),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_fingerprint_covers_every_packed_type),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_weights_hash_cached),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
