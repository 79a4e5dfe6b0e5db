/* Unit tests for worker/kv_disk.{h,c}: the disk tier's file format, its
 * corruption handling, the size cap, and its place under a kv_pool.
 *
 * Claims checked (real files in a temporary folder):
 *   - a stored block loads back bit for bit into another block of another
 *     store; the file has the documented layout (magic, header fields,
 *     token ids, size) and its name is the public key;
 *   - never served: every single-byte flip at 97 positions spread over the
 *     file (header, tokens, payload, checksum), truncation to 0, 1, half and
 *     size-1 bytes, an appended byte, a file of another shape renamed into
 *     place, and a request whose tokens or parent key differ — each loads as
 *     rejected (2) or missing (1), the file is gone afterwards, n_rejected
 *     counts it;
 *   - the identity folder differs for a different weights hash, KV type,
 *     q8 block, block size, layer count or kv_dim;
 *   - the size cap keeps at most cap bytes, removing the oldest (a hit
 *     refreshes a block), and reports the removed keys as dropped;
 *   - a cap smaller than one block, and a folder that is a regular file,
 *     start the tier off (stores refused, stats.enabled false);
 *   - under a pool (kv_disk_attach): blocks evicted from RAM go to disk
 *     without an eviction event, a prompt whose blocks left RAM is matched
 *     from disk (n_tier_hit_tokens, the K/V equal what was written, never
 *     the whole prompt), a fresh pool over the same folder (a restart)
 *     matches them too and kv_pool_held_keys lists them, and
 *     kv_pool_tier_flush writes the hot set;
 *   - two tiers on one folder (two replicas) see each other's files;
 *   - as a local attacker: block files are 0600 and folders 0700 under
 *     umask 0; a block with another key's MAC (a forger's valid checksum)
 *     or an edited payload is rejected (n_forged / n_rejected count it); a
 *     symlink planted at a block's name is not followed at load nor indexed
 *     at open, and a store replaces the link, leaving its target unchanged;
 *     a group/world-writable folder, or one owned by another user (as
 *     root), turns the tier off.
 * Runs in ~0.1 s.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/prefix_key.h"
#include "worker/kv_disk.h"
#include "worker/kv_pool.h"

#define BS 4
#define NL 2
#define KVD 8

static char g_dir[256];
static const file_mac_key_t g_key = {{1, 2, 3, 4, 5, 6, 7, 8}}; /* the worker's MAC key in these tests */

static int setup(void **state)
{
    (void)state;
    snprintf(g_dir, sizeof g_dir, "/tmp/pagoda-kvdisk-XXXXXX");
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static kv_disk_shape_t shape_f32(void)
{
    return (kv_disk_shape_t){.weights_hash = 0x1234, .kv_type = KV_TYPE_F32, .qblock = 0, .block_size = BS,
                             .n_layer = NL, .kv_dim = KVD};
}

/* A store of n_blocks filled with a pattern that names (block, layer, k/v, slot, i). */
static kv_store_t store_new(int n_blocks, float salt)
{
    kv_store_t s = {.n_layer = NL, .n_blocks = n_blocks, .block_size = BS, .kv_dim = KVD, .type = KV_TYPE_F32};
    size_t n = (size_t)NL * n_blocks * BS * KVD;
    s.k = malloc(n * 4);
    s.v = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        ((float *)s.k)[i] = salt + (float)i;
        ((float *)s.v)[i] = -salt - (float)i;
    }
    return s;
}

static bool block_equal(const kv_store_t *a, int ba, const kv_store_t *b, int bb)
{
    for (int l = 0; l < NL; l++)
        if (memcmp(kv_store_k_at(a, l, ba, 0), kv_store_k_at(b, l, bb, 0), BS * KVD * 4) ||
            memcmp(kv_store_v_at(a, l, ba, 0), kv_store_v_at(b, l, bb, 0), BS * KVD * 4))
            return false;
    return true;
}

static void sub_dir(char *out, size_t n, const kv_disk_shape_t *sh)
{
    snprintf(out, n, "%s/%016" PRIx64, g_dir, kv_disk_ident(sh));
}

static void file_of(char *out, size_t n, const kv_disk_shape_t *sh, uint64_t pub)
{
    char d[300];
    sub_dir(d, sizeof d, sh);
    snprintf(out, n, "%s/%016" PRIx64 ".kvb", d, pub);
}

static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

static void spit(const char *path, const unsigned char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static void test_round_trip_and_format(void **state)
{
    (void)state;
    kv_disk_shape_t sh = shape_f32();
    kv_disk_t *d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_store_t a = store_new(3, 0.5f), b = store_new(3, 100.0f);
    const int32_t tok[BS] = {5, 6, 7, 8};
    const uint64_t pub = 0xabcdef0123456789ULL, parent = PREFIX_KEY_PUBLIC_ROOT;
    assert_int_equal(kv_disk_store(d, &a, 1, pub, parent, tok), 0);
    assert_true(kv_disk_has(d, pub));
    assert_int_equal(kv_disk_store(d, &a, 1, pub, parent, tok), 0); /* already there */
    kv_disk_stats_t st;
    kv_disk_stats(d, &st);
    assert_int_equal(st.n_written, 1);
    assert_false(block_equal(&a, 1, &b, 2));
    assert_int_equal(kv_disk_load(d, &b, 2, pub, parent, tok), 0);
    assert_true(block_equal(&a, 1, &b, 2));
    /* the documented layout */
    char path[400];
    file_of(path, sizeof path, &sh, pub);
    size_t len;
    unsigned char *f = slurp(path, &len);
    assert_non_null(f);
    assert_int_equal(len, KV_DISK_HEADER_BYTES + BS * 4 + 2 * NL * BS * KVD * 4 + KV_DISK_MAC_BYTES);
    assert_memory_equal(f, "PGKVBLK2", 8);
    uint64_t v;
    memcpy(&v, f + 32, 8);
    assert_true(v == pub);
    memcpy(&v, f + 40, 8);
    assert_true(v == parent);
    memcpy(&v, f + 24, 8);
    assert_true(v == 0x1234);
    assert_memory_equal(f + KV_DISK_HEADER_BYTES, tok, sizeof tok);
    assert_memory_equal(f + KV_DISK_HEADER_BYTES + sizeof tok, kv_store_k_at(&a, 0, 1, 0), BS * KVD * 4);
    uint8_t mac[KV_DISK_MAC_BYTES];
    file_mac(&g_key, f, len - KV_DISK_MAC_BYTES, mac, sizeof mac);
    assert_memory_equal(mac, f + len - KV_DISK_MAC_BYTES, sizeof mac);
    free(f);
    /* identity: every field moves the folder */
    uint64_t id0 = kv_disk_ident(&sh);
    kv_disk_shape_t o = sh;
    o.weights_hash++;
    assert_true(kv_disk_ident(&o) != id0);
    o = sh;
    o.kv_type = KV_TYPE_F16;
    assert_true(kv_disk_ident(&o) != id0);
    o = sh;
    o.qblock = 32;
    assert_true(kv_disk_ident(&o) != id0);
    o = sh;
    o.block_size = 8;
    assert_true(kv_disk_ident(&o) != id0);
    o = sh;
    o.n_layer = 3;
    assert_true(kv_disk_ident(&o) != id0);
    o = sh;
    o.kv_dim = 16;
    assert_true(kv_disk_ident(&o) != id0);
    kv_disk_close(&d);
    assert_null(d);
    free(a.k), free(a.v), free(b.k), free(b.v);
}

/* Writes pub's file, damages it with fn, and expects it never served. */
static void expect_not_served(kv_disk_t *d, const kv_disk_shape_t *sh, kv_store_t *a, kv_store_t *b, uint64_t pub,
                              const unsigned char *good, size_t len, const unsigned char *bad, size_t bad_len,
                              const char *what)
{
    const int32_t tok[BS] = {5, 6, 7, 8};
    char path[400];
    file_of(path, sizeof path, sh, pub);
    (void)good;
    (void)len;
    spit(path, bad, bad_len);
    kv_disk_stats_t s0, s1;
    kv_disk_stats(d, &s0);
    int rc = kv_disk_load(d, b, 2, pub, PREFIX_KEY_PUBLIC_ROOT, tok);
    kv_disk_stats(d, &s1);
    if (rc != 2)
        print_error("%s: load gave %d\n", what, rc);
    assert_int_equal(rc, 2);
    assert_int_equal(s1.n_rejected, s0.n_rejected + 1);
    assert_int_equal(access(path, F_OK), -1); /* removed */
    (void)a;
}

static void test_corruption_never_served(void **state)
{
    (void)state;
    kv_disk_shape_t sh = shape_f32();
    sh.weights_hash = 77;
    kv_disk_t *d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_store_t a = store_new(3, 0.25f), b = store_new(3, 9.0f);
    const int32_t tok[BS] = {5, 6, 7, 8};
    const uint64_t pub = 0x1111222233334444ULL;
    assert_int_equal(kv_disk_store(d, &a, 0, pub, PREFIX_KEY_PUBLIC_ROOT, tok), 0);
    char path[400];
    file_of(path, sizeof path, &sh, pub);
    size_t len;
    unsigned char *good = slurp(path, &len);
    unsigned char *bad = malloc(len + 1);
    int n_cases = 0;
    /* one flipped byte anywhere */
    for (size_t i = 0; i < 97; i++) {
        size_t at = i * (len - 1) / 96;
        memcpy(bad, good, len);
        bad[at] ^= (unsigned char)(1u << (i % 8));
        expect_not_served(d, &sh, &a, &b, pub, good, len, bad, len, "flip");
        n_cases++;
    }
    /* truncations and an appended byte */
    const size_t cuts[] = {0, 1, len / 2, len - 1};
    for (size_t i = 0; i < 4; i++) {
        expect_not_served(d, &sh, &a, &b, pub, good, len, good, cuts[i], "truncated");
        n_cases++;
    }
    memcpy(bad, good, len);
    bad[len] = 0;
    expect_not_served(d, &sh, &a, &b, pub, good, len, bad, len + 1, "appended");
    /* the intact file under another key (a misnamed or colliding file) */
    const uint64_t other = 0x5555666677778888ULL;
    file_of(path, sizeof path, &sh, other);
    spit(path, good, len);
    assert_int_equal(kv_disk_load(d, &b, 2, other, PREFIX_KEY_PUBLIC_ROOT, tok), 2);
    /* the intact file, asked for with other tokens or another parent */
    file_of(path, sizeof path, &sh, pub);
    spit(path, good, len);
    const int32_t tok2[BS] = {5, 6, 7, 9};
    assert_int_equal(kv_disk_load(d, &b, 2, pub, PREFIX_KEY_PUBLIC_ROOT, tok2), 2);
    spit(path, good, len);
    assert_int_equal(kv_disk_load(d, &b, 2, pub, 42, tok), 2);
    /* and intact, as asked: served */
    spit(path, good, len);
    assert_int_equal(kv_disk_load(d, &b, 2, pub, PREFIX_KEY_PUBLIC_ROOT, tok), 0);
    assert_true(block_equal(&a, 0, &b, 2));
    /* missing */
    assert_int_equal(kv_disk_load(d, &b, 2, 0x99, PREFIX_KEY_PUBLIC_ROOT, tok), 1);
    kv_disk_stats_t st;
    kv_disk_stats(d, &st);
    print_message("  %d damaged files, %llu rejected, none served\n", n_cases + 1,
                  (unsigned long long)st.n_rejected);
    kv_disk_close(&d);
    /* at open, a file of the wrong size is removed before anything reads it */
    spit(path, good, len / 3);
    d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_disk_stats(d, &st);
    assert_int_equal(st.n_rejected, 1);
    assert_false(kv_disk_has(d, pub));
    kv_disk_close(&d);
    free(good), free(bad), free(a.k), free(a.v), free(b.k), free(b.v);
}

static void test_cap_and_off(void **state)
{
    (void)state;
    kv_disk_shape_t sh = shape_f32();
    sh.weights_hash = 99;
    const size_t fb = KV_DISK_HEADER_BYTES + BS * 4 + 2 * NL * BS * KVD * 4 + KV_DISK_MAC_BYTES;
    kv_disk_t *d = kv_disk_open(g_dir, 3 * fb + 10, &sh, &g_key);
    kv_store_t a = store_new(2, 1.0f);
    int32_t tok[BS] = {1, 2, 3, 4};
    for (uint64_t k = 1; k <= 3; k++)
        assert_int_equal(kv_disk_store(d, &a, 0, k, PREFIX_KEY_PUBLIC_ROOT, tok), 0);
    assert_int_equal(kv_disk_load(d, &a, 1, 1, PREFIX_KEY_PUBLIC_ROOT, tok), 0); /* 1 is now newest */
    assert_int_equal(kv_disk_store(d, &a, 0, 4, PREFIX_KEY_PUBLIC_ROOT, tok), 0);
    assert_true(kv_disk_has(d, 1) && !kv_disk_has(d, 2) && kv_disk_has(d, 3) && kv_disk_has(d, 4));
    uint64_t dropped[8];
    assert_int_equal(kv_disk_take_dropped(d, dropped, 8), 1);
    assert_true(dropped[0] == 2);
    kv_disk_stats_t st;
    kv_disk_stats(d, &st);
    assert_true(st.bytes_used <= 3 * fb + 10 && st.n_evicted == 1 && st.n_files == 3);
    char path[400];
    file_of(path, sizeof path, &sh, 2);
    assert_int_equal(access(path, F_OK), -1);
    kv_disk_close(&d);
    /* reopened with a smaller cap: the oldest found files go */
    d = kv_disk_open(g_dir, 2 * fb, &sh, &g_key);
    assert_int_equal(kv_disk_n_keys(d), 2);
    kv_disk_close(&d);
    /* a cap below one block: off */
    d = kv_disk_open(g_dir, fb - 1, &sh, &g_key);
    kv_disk_stats(d, &st);
    assert_false(st.enabled);
    assert_int_equal(kv_disk_store(d, &a, 0, 9, PREFIX_KEY_PUBLIC_ROOT, tok), -1);
    kv_disk_close(&d);
    /* a folder that cannot be made (a regular file in the way): off */
    char file[300];
    snprintf(file, sizeof file, "%s/plainfile", g_dir);
    spit(file, (const unsigned char *)"x", 1);
    d = kv_disk_open(file, 1u << 20, &sh, &g_key);
    kv_disk_stats(d, &st);
    assert_false(st.enabled);
    assert_int_equal(kv_disk_store(d, &a, 0, 9, PREFIX_KEY_PUBLIC_ROOT, tok), -1);
    assert_int_equal(kv_disk_load(d, &a, 0, 9, PREFIX_KEY_PUBLIC_ROOT, tok), 1);
    kv_disk_close(&d);
    free(a.k), free(a.v);
}

/* Fills seq's prompt tokens' K/V with a pattern of the token ids. */
static void write_kv(kv_pool_t *p, kv_seq_t *s, int from, int to)
{
    kv_store_t *st = kv_pool_store(p);
    const int32_t *bt = kv_seq_block_table(s), *tok = kv_seq_tokens(s);
    for (int t = from; t < to; t++)
        for (int l = 0; l < NL; l++)
            for (int i = 0; i < KVD; i++) {
                kv_store_k(st, l, bt[t / BS], t % BS)[i] = (float)(tok[t] * 1000 + l * 100 + i);
                kv_store_v(st, l, bt[t / BS], t % BS)[i] = -(float)(tok[t] * 1000 + l * 100 + i);
            }
}

static void run_prompt(kv_pool_t *p, const int32_t *tok, int n, int32_t *hit)
{
    kv_seq_t *s = kv_seq_new(p);
    *hit = kv_pool_match_prefix(p, tok, n, s);
    assert_true(*hit >= 0 && *hit < n);
    /* what a hit attached holds the K/V of exactly these tokens */
    kv_store_t *st = kv_pool_store(p);
    for (int t = 0; t < *hit; t++)
        for (int l = 0; l < NL; l++)
            assert_true(kv_store_k(st, l, kv_seq_block_table(s)[t / BS], t % BS)[3] == (float)(tok[t] * 1000 + l * 100 + 3));
    assert_int_equal(kv_seq_reserve(s, n - *hit), 0);
    assert_int_equal(kv_seq_append(s, tok + *hit, n - *hit), 0);
    write_kv(p, s, *hit, n);
    kv_pool_commit_full_blocks(p, s);
    kv_seq_free(&s);
    assert_int_equal(kv_pool_check(p), 0);
}

static void test_under_pool(void **state)
{
    (void)state;
    kv_disk_shape_t sh = shape_f32();
    sh.weights_hash = 4242;
    kv_pool_t *p = kv_pool_new(NL, KVD, 6, BS, KV_TYPE_F32);
    kv_pool_events_enable(p, 1024);
    kv_disk_t *d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_disk_attach(d, p);
    int32_t a[17], b[17], hit;
    for (int i = 0; i < 17; i++) {
        a[i] = 10 + i;
        b[i] = 100 + i;
    }
    run_prompt(p, a, 17, &hit); /* 4 full blocks of a cached */
    assert_int_equal(hit, 0);
    run_prompt(p, b, 17, &hit); /* b needs 5 blocks of 6: a's go to disk */
    kv_pool_stats_t ps;
    kv_pool_stats(p, &ps);
    assert_true(ps.n_evictions >= 3 && ps.n_tier_stored == ps.n_evictions);
    kv_pool_event_t ev[256];
    bool ovf;
    int32_t n_ev = kv_pool_events_take(p, ev, 256, &ovf);
    for (int i = 0; i < n_ev; i++)
        assert_true(ev[i].added); /* evicted to disk: still held, no eviction event */
    run_prompt(p, a, 17, &hit); /* back from disk (and RAM for what stayed) */
    assert_int_equal(hit, 16);
    kv_pool_stats(p, &ps);
    assert_true(ps.n_tier_hit_tokens >= 12);
    int32_t flushed = kv_pool_tier_flush(p);
    assert_true(flushed > 0);
    kv_pool_set_tier(p, NULL);
    kv_disk_close(&d);
    kv_pool_free(&p);

    /* a restart: a fresh pool over the same folder; a second tier on the
     * same folder is another replica */
    p = kv_pool_new(NL, KVD, 8, BS, KV_TYPE_F32);
    d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_disk_t *d2 = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_disk_attach(d, p);
    assert_true(kv_pool_n_held_keys(p) >= 8);
    uint64_t keys[64];
    int32_t nk = kv_pool_held_keys(p, keys, 64);
    assert_true(nk >= 8);
    run_prompt(p, b, 17, &hit);
    assert_int_equal(hit, 16);
    run_prompt(p, a, 17, &hit);
    assert_int_equal(hit, 16);
    kv_pool_stats(p, &ps);
    assert_int_equal(ps.n_tier_hit_tokens, 32);
    assert_int_equal(ps.n_prefix_hit_tokens, 0);
    /* the other replica's index has them too (found at open) */
    for (int i = 0; i < nk; i++)
        assert_true(kv_disk_has(d2, keys[i]));
    kv_pool_set_tier(p, NULL);
    kv_disk_close(&d);
    kv_disk_close(&d2);
    kv_pool_free(&p);
}

static void test_hash(void **state)
{
    (void)state;
    unsigned char buf[200];
    for (int i = 0; i < 200; i++)
        buf[i] = (unsigned char)i;
    uint64_t h = kv_disk_hash64(buf, 200, 1);
    assert_true(h == kv_disk_hash64(buf, 200, 1));
    assert_true(h != kv_disk_hash64(buf, 200, 2));
    assert_true(h != kv_disk_hash64(buf, 199, 1));
    for (int i = 0; i < 200; i++) { /* every byte matters, including the tail */
        buf[i] ^= 1;
        assert_true(h != kv_disk_hash64(buf, 200, 1));
        buf[i] ^= 1;
    }
    char path[300], err[256];
    snprintf(path, sizeof path, "%s/w.bin", g_dir);
    spit(path, buf, 200);
    uint64_t fh = 0;
    assert_int_equal(kv_disk_hash_file(path, &fh, err, sizeof err), 0);
    assert_true(fh == kv_disk_hash64(buf, 200, 0x70a60da5ULL));
    snprintf(path, sizeof path, "%s/absent.bin", g_dir);
    assert_int_equal(kv_disk_hash_file(path, &fh, err, sizeof err), -1);
}

/* As a local attacker would: the files are private, a forged, edited or
 * copied-in block is rejected and counted, a symlink planted at a block's
 * name is never followed, a folder others can write is refused. */
static void test_attacker_files(void **state)
{
    (void)state;
    kv_disk_shape_t sh = shape_f32();
    sh.weights_hash = 0x5151;
    mode_t old = umask(0); /* a careless umask: the modes must not depend on it */
    kv_disk_t *d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key);
    kv_store_t a = store_new(3, 0.5f), b = store_new(3, 100.0f);
    const int32_t tok[BS] = {5, 6, 7, 8};
    const uint64_t pub = 0x1111222233334444ULL, root = PREFIX_KEY_PUBLIC_ROOT;
    assert_int_equal(kv_disk_store(d, &a, 0, pub, root, tok), 0);
    umask(old);
    char path[400], sub[300];
    file_of(path, sizeof path, &sh, pub);
    sub_dir(sub, sizeof sub, &sh);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_int_equal(stat(sub, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0700);
    size_t len;
    unsigned char *good = slurp(path, &len);
    /* forged: valid header and tokens, MAC made with another key (anyone
     * can make an unkeyed checksum; nobody without the key makes this) */
    const file_mac_key_t other = {{66}};
    unsigned char *bad = malloc(len);
    memcpy(bad, good, len);
    file_mac(&other, bad, len - KV_DISK_MAC_BYTES, bad + len - KV_DISK_MAC_BYTES, KV_DISK_MAC_BYTES);
    assert_int_equal(kv_disk_check(&sh, &g_key, bad, len, pub, root, tok), -2);
    kv_disk_stats_t s0, s1;
    kv_disk_stats(d, &s0);
    spit(path, bad, len);
    assert_int_equal(kv_disk_load(d, &b, 1, pub, root, tok), 2);
    kv_disk_stats(d, &s1);
    assert_int_equal(s1.n_forged, s0.n_forged + 1);
    assert_int_equal(s1.n_rejected, s0.n_rejected + 1);
    assert_int_equal(access(path, F_OK), -1);
    /* edited payload with the old MAC kept: rejected */
    memcpy(bad, good, len);
    bad[KV_DISK_HEADER_BYTES + BS * 4 + 3] ^= 0x40;
    spit(path, bad, len);
    assert_int_equal(kv_disk_load(d, &b, 1, pub, root, tok), 2);
    /* a symlink planted at the block's name: not followed, its target unchanged */
    char victim[400];
    snprintf(victim, sizeof victim, "%s/victim.txt", g_dir);
    spit(victim, (const unsigned char *)"precious", 8);
    assert_int_equal(symlink(victim, path), 0);
    assert_int_equal(kv_disk_load(d, &b, 1, pub, root, tok), 2);
    assert_int_equal(symlink(victim, path), 0);
    kv_disk_close(&d);
    d = kv_disk_open(g_dir, 1u << 20, &sh, &g_key); /* a symlink is not indexed */
    assert_false(kv_disk_has(d, pub));
    assert_int_equal(kv_disk_store(d, &a, 0, pub, root, tok), 0); /* replaces the link itself */
    unsigned char *v = slurp(victim, &len);
    assert_int_equal(len, 8);
    assert_memory_equal(v, "precious", 8);
    free(v);
    assert_int_equal(lstat(path, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    kv_disk_close(&d);
    /* folders others can write, or owned by another user: refused */
    char open_dir[300];
    snprintf(open_dir, sizeof open_dir, "%s/world", g_dir);
    assert_int_equal(mkdir(open_dir, 0700), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    d = kv_disk_open(open_dir, 1u << 20, &sh, &g_key);
    kv_disk_stats(d, &s1);
    assert_false(s1.enabled);
    assert_int_equal(kv_disk_store(d, &a, 0, pub, root, tok), -1);
    kv_disk_close(&d);
    if (geteuid() == 0) {
        assert_int_equal(chmod(open_dir, 0700), 0);
        assert_int_equal(chown(open_dir, 65534, 65534), 0);
        d = kv_disk_open(open_dir, 1u << 20, &sh, &g_key);
        kv_disk_stats(d, &s1);
        assert_false(s1.enabled);
        kv_disk_close(&d);
    }
    free(good);
    free(bad);
    free(a.k), free(a.v), free(b.k), free(b.v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_round_trip_and_format),
        cmocka_unit_test(test_corruption_never_served),
        cmocka_unit_test(test_cap_and_off),
        cmocka_unit_test(test_under_pool),
        cmocka_unit_test(test_attacker_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
