/* Unit tests for worker/kv_pool: block allocation, capacity, refcounts,
 * prefix matching, LRU eviction, hash collisions and a seeded randomized
 * stress run checked with kv_pool_check() after every operation.
 *
 * The stress test plays the forward pass: for every position it writes into
 * K/V (through the block table) a fingerprint of the token prefix ending at
 * that position, computed by the test with its own hash. A prefix hit is
 * correct iff the reused positions hold the fingerprints of the NEW prompt's
 * prefix, which the test recomputes independently. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "common/prefix_key.h"
#include "worker/kv_pool.h"

/* ---- helpers ------------------------------------------------------------ */

static kv_pool_stats_t stats(const kv_pool_t *p)
{
    kv_pool_stats_t st;
    kv_pool_stats(p, &st);
    return st;
}

/* Reserve + append + commit n tokens, as the scheduler would around a forward pass. */
static int feed(kv_pool_t *p, kv_seq_t *s, const int32_t *t, int32_t n)
{
    int rc = kv_seq_reserve(s, n);
    if (rc != KV_POOL_OK)
        return rc;
    assert_int_equal(kv_seq_append(s, t, n), KV_POOL_OK);
    assert_true(kv_pool_commit_full_blocks(p, s) >= 0);
    return KV_POOL_OK;
}

static void seq_tokens(int32_t *t, int32_t n, int32_t base)
{
    for (int32_t i = 0; i < n; i++)
        t[i] = base + i;
}

/* ---- KV events (routing by cache) ---------------------------------------- */

static bool has_event(const kv_pool_event_t *ev, int32_t n, uint64_t key, bool added)
{
    for (int32_t i = 0; i < n; i++)
        if (ev[i].key == key && ev[i].added == added)
            return true;
    return false;
}

/* Registered blocks are announced under the public key chain any other pool
 * (and the gateway, common/prefix_key.h) computes from the same tokens;
 * evicted ones are announced as removed; an overflowing log says so. */
static void test_events(void **state)
{
    kv_pool_t *p = kv_pool_new(1, 4, 4, 4, KV_TYPE_F32);
    kv_pool_t *q = kv_pool_new(1, 4, 4, 4, KV_TYPE_F32); /* another replica */
    kv_pool_events_enable(p, 64);
    kv_pool_events_enable(q, 64);
    int32_t a[9], b[17];
    seq_tokens(a, 9, 100);
    seq_tokens(b, 17, 500);
    uint64_t ka[2], kb[4];
    assert_int_equal(prefix_key_chain(0, a, 9, 4, ka, 8), 2);
    assert_int_equal(prefix_key_chain(0, b, 17, 4, kb, 8), 4);
    assert_true(ka[0] != ka[1] && ka[0] != kb[0]);

    kv_pool_event_t ev[64];
    bool ovf = true;
    kv_seq_t *s = kv_seq_new(p);
    assert_int_equal(feed(p, s, a, 9), KV_POOL_OK);
    int32_t n = kv_pool_events_take(p, ev, 64, &ovf);
    assert_false(ovf);
    assert_int_equal(n, 2);
    assert_true(ev[0].key == ka[0] && ev[0].added && ev[1].key == ka[1] && ev[1].added);
    kv_seq_free(&s);
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 0); /* release: still cached */

    /* the same tokens on another pool (other random root): same public keys */
    kv_seq_t *t = kv_seq_new(q);
    assert_int_equal(feed(q, t, a, 9), KV_POOL_OK);
    assert_int_equal(kv_pool_events_take(q, ev, 64, &ovf), 2);
    assert_true(ev[0].key == ka[0] && ev[1].key == ka[1]);
    kv_seq_free(&t);

    /* a prefix hit registers nothing new */
    s = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, a, 9, s), 8);
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 0);
    kv_seq_free(&s);

    /* 17 tokens need all 4 blocks: both cached blocks of a are evicted */
    s = kv_seq_new(p);
    assert_int_equal(feed(p, s, b, 16), KV_POOL_OK);
    n = kv_pool_events_take(p, ev, 64, &ovf);
    assert_int_equal(n, 6);
    assert_true(has_event(ev, n, ka[0], false) && has_event(ev, n, ka[1], false));
    for (int i = 0; i < 4; i++)
        assert_true(has_event(ev, n, kb[i], true));
    uint64_t all[8];
    assert_int_equal(kv_pool_cached_keys(p, all, 8), 4);
    for (int i = 0; i < 4; i++)
        assert_true(all[0] == kb[i] || all[1] == kb[i] || all[2] == kb[i] || all[3] == kb[i]);
    kv_seq_free(&s);
    assert_int_equal(kv_pool_check(p), 0);

    /* take in pieces, oldest first */
    s = kv_seq_new(p);
    assert_int_equal(feed(p, s, a, 9), KV_POOL_OK); /* 3 blocks: evicts 3 of b, adds 2 of a */
    n = kv_pool_events_take(p, ev, 1, &ovf);
    assert_int_equal(n, 1);
    assert_false(ev[0].added); /* the first block of a needed an eviction first */
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 4);
    kv_seq_free(&s);
    kv_pool_free(&p);
    kv_pool_free(&q);

    /* a log that overflows is dropped and reported once */
    p = kv_pool_new(1, 4, 8, 4, KV_TYPE_F32);
    kv_pool_events_enable(p, 3);
    s = kv_seq_new(p);
    assert_int_equal(feed(p, s, b, 17), KV_POOL_OK); /* 4 registrations > 3 */
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 0);
    assert_true(ovf);
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 0);
    assert_false(ovf);
    kv_seq_free(&s);
    kv_pool_free(&p);

    /* enabled on a pool that already caches blocks: starts with overflow */
    p = kv_pool_new(1, 4, 8, 4, KV_TYPE_F32);
    s = kv_seq_new(p);
    assert_int_equal(feed(p, s, a, 9), KV_POOL_OK);
    kv_pool_events_enable(p, 16);
    kv_pool_events_take(p, ev, 64, &ovf);
    assert_true(ovf);
    kv_seq_free(&s);
    kv_pool_free(&p);
}

/* ---- partitions (tenants) ------------------------------------------------ */

/* A tier that remembers (pub, parent pub, tokens) of what it was given and
 * loads only an exact match — the checks kv_disk makes. */
#define FAKE_TIER_MAX 32
typedef struct {
    uint64_t pub[FAKE_TIER_MAX], parent[FAKE_TIER_MAX];
    int32_t tok[FAKE_TIER_MAX][4];
    int32_t n, n_loads;
} fake_tier_t;

static int ft_store(void *ud, const kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                    const int32_t *tokens)
{
    (void)st, (void)block;
    fake_tier_t *f = ud;
    for (int32_t i = 0; i < f->n; i++)
        if (f->pub[i] == pub)
            return 0;
    if (f->n == FAKE_TIER_MAX)
        return -1;
    f->pub[f->n] = pub;
    f->parent[f->n] = parent_pub;
    memcpy(f->tok[f->n], tokens, sizeof f->tok[0]);
    f->n++;
    return 0;
}

static int ft_load(void *ud, kv_store_t *st, int32_t block, uint64_t pub, uint64_t parent_pub,
                   const int32_t *tokens)
{
    (void)st, (void)block;
    fake_tier_t *f = ud;
    for (int32_t i = 0; i < f->n; i++)
        if (f->pub[i] == pub && f->parent[i] == parent_pub && memcmp(f->tok[i], tokens, sizeof f->tok[0]) == 0) {
            f->n_loads++;
            return 0;
        }
    return -1;
}

static bool ft_has(void *ud, uint64_t pub)
{
    fake_tier_t *f = ud;
    for (int32_t i = 0; i < f->n; i++)
        if (f->pub[i] == pub)
            return true;
    return false;
}

static int32_t ft_n_keys(void *ud) { return ((fake_tier_t *)ud)->n; }

static int32_t ft_keys(void *ud, uint64_t *out, int32_t max)
{
    fake_tier_t *f = ud;
    int32_t n = f->n < max ? f->n : max;
    memcpy(out, f->pub, (size_t)n * sizeof *out);
    return n;
}

static int32_t ft_take_dropped(void *ud, uint64_t *out, int32_t max)
{
    (void)ud, (void)out, (void)max;
    return 0;
}

/* The same tokens in two partitions are two prefixes: no hit across them in
 * RAM or in the tier, hits within one; public keys are prefix_key_chain's in
 * that partition (what the gateway computes); partition 0 keeps the old
 * chain; a sequence with blocks cannot change partition. */
static void test_partitions(void **state)
{
    (void)state;
    static const uint64_t A = 0x1111222233334444ULL, B = 0x5555666677778888ULL;
    kv_pool_t *p = kv_pool_new(1, 4, 8, 4, KV_TYPE_F32);
    kv_pool_events_enable(p, 64);
    fake_tier_t ft = {0};
    kv_pool_tier_t tier = {.ud = &ft, .store = ft_store, .load = ft_load, .has = ft_has, .n_keys = ft_n_keys,
                           .keys = ft_keys, .take_dropped = ft_take_dropped};
    kv_pool_set_tier(p, &tier);
    int32_t a[9];
    seq_tokens(a, 9, 100);
    uint64_t ka[2], kb[2], k0[2];
    assert_int_equal(prefix_key_chain(A, a, 9, 4, ka, 8), 2);
    assert_int_equal(prefix_key_chain(B, a, 9, 4, kb, 8), 2);
    assert_int_equal(prefix_key_chain(0, a, 9, 4, k0, 8), 2);
    assert_true(ka[0] != kb[0] && ka[0] != k0[0] && kb[0] != k0[0]);
    assert_int_equal(prefix_key_root(0), PREFIX_KEY_PUBLIC_ROOT);
    assert_true(prefix_key_root(A) != prefix_key_root(B));

    /* A computes the prefix: events carry A's public keys */
    kv_seq_t *s = kv_seq_new(p);
    assert_int_equal(kv_seq_partition(s), 0);
    assert_int_equal(kv_seq_set_partition(s, A), KV_POOL_OK);
    assert_int_equal(kv_seq_partition(s), A);
    assert_int_equal(feed(p, s, a, 9), KV_POOL_OK);
    assert_int_equal(kv_seq_set_partition(s, B), KV_POOL_EINVAL); /* holds blocks */
    kv_pool_event_t ev[64];
    bool ovf;
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 2);
    assert_true(ev[0].key == ka[0] && ev[1].key == ka[1]);
    assert_int_equal(ft.n, 2); /* written through under A's keys */
    assert_true(ft_has(&ft, ka[0]) && ft_has(&ft, ka[1]) && !ft_has(&ft, kb[0]));
    assert_int_equal(ft.parent[0], prefix_key_root(A));
    kv_seq_free(&s);

    /* B and the public partition miss in RAM and in the tier; A hits */
    static const struct {
        uint64_t part;
        int32_t want;
    } rows[] = {{B, 0}, {0, 0}, {A, 8}, {A ^ 1, 0}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        kv_pool_stats_t st0 = stats(p);
        s = kv_seq_new(p);
        assert_int_equal(kv_seq_set_partition(s, rows[i].part), KV_POOL_OK);
        assert_int_equal(kv_pool_match_prefix(p, a, 9, s), rows[i].want);
        kv_pool_stats_t st1 = stats(p);
        assert_int_equal(st1.n_prefix_hit_tokens - st0.n_prefix_hit_tokens, (uint64_t)rows[i].want);
        assert_int_equal(st1.n_tier_hit_tokens, st0.n_tier_hit_tokens);
        kv_seq_free(&s);
    }
    assert_int_equal(ft.n_loads, 0);

    /* B computes the same tokens: its own blocks, beside A's */
    s = kv_seq_new(p);
    kv_seq_set_partition(s, B);
    assert_int_equal(feed(p, s, a, 9), KV_POOL_OK);
    assert_int_equal(stats(p).n_cached_total, 4);
    assert_int_equal(kv_pool_events_take(p, ev, 64, &ovf), 2);
    assert_true(ev[0].key == kb[0] && ev[1].key == kb[1]);
    kv_seq_release(s); /* a release keeps the partition */
    assert_int_equal(kv_seq_partition(s), B);
    assert_int_equal(kv_pool_match_prefix(p, a, 9, s), 8);
    kv_seq_free(&s);
    assert_int_equal(kv_pool_check(p), 0);
    kv_pool_set_tier(p, NULL);
    kv_pool_free(&p);

    /* a fresh pool (a restarted worker) over the same tier: A's blocks load
     * for A only */
    p = kv_pool_new(1, 4, 8, 4, KV_TYPE_F32);
    kv_pool_set_tier(p, &tier);
    s = kv_seq_new(p);
    kv_seq_set_partition(s, 0);
    assert_int_equal(kv_pool_match_prefix(p, a, 9, s), 0);
    kv_seq_free(&s);
    s = kv_seq_new(p);
    kv_seq_set_partition(s, A);
    assert_int_equal(kv_pool_match_prefix(p, a, 9, s), 8);
    assert_int_equal(stats(p).n_tier_hit_tokens, 8);
    kv_seq_free(&s);
    assert_int_equal(kv_pool_check(p), 0);
    kv_pool_set_tier(p, NULL);
    kv_pool_free(&p);
}

/* ---- basic allocation --------------------------------------------------- */

/* kv_pool_new maps nothing; kv_pool_prefault_step maps the K/V pages piece
 * by piece (k, then v), changing no byte: the store reads zero where
 * nothing was written and keeps what was; it returns false once all is
 * mapped, and stays false. */
static void test_prefault_step(void **state)
{
    (void)state;
    kv_pool_t *p = kv_pool_new(3, 64, 40, 16, KV_TYPE_F16); /* 3 x 40 x 16 x 64 x 2 B = 240 KiB each */
    kv_store_t *st = kv_pool_store(p);
    const size_t n = (size_t)3 * 40 * 16 * 64 * 2;
    uint8_t *k = st->k, *v = st->v;
    for (size_t i = 0; i < n; i += 4096 + 7) {
        assert_int_equal(k[i] | v[i], 0);
        k[i] = (uint8_t)(i * 31 + 1);
        v[i] = (uint8_t)(i * 17 + 3);
    }
    int steps = 0;
    while (kv_pool_prefault_step(p, 64 << 10))
        assert_true(++steps < 100);
    assert_int_equal(steps + 1, (int)((n + (64 << 10) - 1) / (64 << 10)) * 2);
    assert_false(kv_pool_prefault_step(p, 64 << 10));
    for (size_t i = 0; i < n; i++) {
        const bool set = i % (4096 + 7) == 0;
        assert_int_equal(k[i], set ? (uint8_t)(i * 31 + 1) : 0);
        assert_int_equal(v[i], set ? (uint8_t)(i * 17 + 3) : 0);
    }
    kv_pool_free(&p);
}

static void test_geometry_and_budget(void **state)
{
    (void)state;
    assert_null(kv_pool_new(0, 8, 4, 4, KV_TYPE_F32));
    assert_null(kv_pool_new(1, 8, -1, 4, KV_TYPE_F32));
    assert_null(kv_pool_new(1, 8, 4, 0, KV_TYPE_F32));
    assert_null(kv_pool_new(1, 8, INT32_MAX, 32, KV_TYPE_F32)); /* positions overflow int32 */

    assert_null(kv_pool_new(1, 8, 4, 4, (kv_type_t)9)); /* unknown element type */

    size_t per = kv_pool_block_bytes(2, 64, 32, KV_TYPE_F32);
    assert_true(per >= 2u * 2 * 32 * 64 * sizeof(float));
    assert_int_equal(kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F32, 10 * per), 10);
    assert_int_equal(kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F32, 10 * per - 1), 9);
    assert_int_equal(kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F32, per - 1), 0);
    assert_int_equal(kv_pool_blocks_for_budget(0, 64, 32, KV_TYPE_F32, 1u << 30), 0);
    assert_int_equal(kv_pool_block_bytes(2, 64, 32, (kv_type_t)9), 0);
    /* f16 K/V: the K/V part of a block is exactly half (2 layers, 32
     * positions, 64 dims, K and V, 2 bytes); the bookkeeping is the same */
    size_t per16 = kv_pool_block_bytes(2, 64, 32, KV_TYPE_F16);
    assert_int_equal(per - per16, 2u * 2 * 32 * 64 * 2);
    assert_int_equal(kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F16, 10 * per16), 10);
    assert_int_equal(kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F16, 10 * per16 - 1), 9);
    /* a budget buys (almost) twice the f16 blocks */
    int32_t n32 = kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F32, 1u << 26);
    int32_t n16 = kv_pool_blocks_for_budget(2, 64, 32, KV_TYPE_F16, 1u << 26);
    print_message("  64 MiB: %d f32 blocks, %d f16 blocks\n", n32, n16);
    assert_true(n16 > 19 * n32 / 10 && n16 <= 2 * n32);
    /* q8_0 at the 1.1B shape (TinyLlama: 22 layers, 4 kv heads of 64, blocks
     * of 32): 272 bytes per K vector instead of 512, so a 1 GiB budget holds
     * >= 1.85x the f16 tokens (issue #27); the worker logs the same count */
    int32_t b16 = kv_pool_blocks_for_budget_q(22, 256, 32, KV_TYPE_F16, 0, (size_t)1 << 30);
    int32_t b8 = kv_pool_blocks_for_budget_q(22, 256, 32, KV_TYPE_Q8_0, 32, (size_t)1 << 30);
    print_message("  1.1B shape, 1024 MiB: f16 %d blocks = %d tokens, q8_0 %d blocks = %d tokens (%.3fx)\n", b16,
                  b16 * 32, b8, b8 * 32, (double)b8 / b16);
    assert_true((double)b8 >= 1.85 * b16);
    assert_int_equal(kv_pool_block_bytes_q(22, 256, 32, KV_TYPE_Q8_0, 32) - kv_pool_block_bytes_q(22, 256, 32, KV_TYPE_F16, 0),
                     -(ptrdiff_t)(2u * 22 * 32 * (512 - 272)));
    assert_int_equal(kv_pool_block_bytes_q(22, 256, 32, KV_TYPE_Q8_0, 0), 0); /* no q block */
    {
        kv_pool_t *q = kv_pool_new_q(2, 64, 3, 4, KV_TYPE_Q8_0, 32);
        assert_non_null(q);
        assert_int_equal(kv_pool_store(q)->qblock, 32);
        assert_int_equal(kv_store_row_bytes(kv_pool_store(q)), 68);
        kv_pool_free(&q);
    }

    kv_pool_t *p = kv_pool_new(3, 5, 7, 4, KV_TYPE_F32);
    assert_non_null(p);
    kv_store_t *st = kv_pool_store(p);
    assert_int_equal(st->n_layer, 3);
    assert_int_equal(st->n_blocks, 7);
    assert_int_equal(st->block_size, 4);
    assert_int_equal(st->kv_dim, 5);
    /* the whole (n_layer, n_blocks, block_size, kv_dim) range is ours and zeroed */
    for (int l = 0; l < 3; l++)
        for (int b = 0; b < 7; b++)
            for (int s = 0; s < 4; s++)
                for (int d = 0; d < 5; d++) {
                    assert_true(kv_store_k(st, l, b, s)[d] == 0.0f);
                    assert_true(kv_store_v(st, l, b, s)[d] == 0.0f);
                    kv_store_k(st, l, b, s)[d] = 1.0f;
                    kv_store_v(st, l, b, s)[d] = 1.0f;
                }
    assert_int_equal(kv_pool_n_available(p), 7);
    kv_pool_free(&p);
    assert_null(p);

    /* an f16 pool: halves, zeroed, same addressing in elements */
    p = kv_pool_new(3, 5, 7, 4, KV_TYPE_F16);
    assert_non_null(p);
    st = kv_pool_store(p);
    assert_int_equal(st->type, KV_TYPE_F16);
    for (int l = 0; l < 3; l++)
        for (int b = 0; b < 7; b++)
            for (int s = 0; s < 4; s++) {
                uint16_t *k = kv_store_k_at(st, l, b, s), *v = kv_store_v_at(st, l, b, s);
                assert_ptr_equal(k, (uint16_t *)st->k + kv_store_index(st, l, b, s));
                for (int d = 0; d < 5; d++) {
                    assert_int_equal(k[d], 0);
                    assert_int_equal(v[d], 0);
                    k[d] = v[d] = 0x3c00; /* 1.0: every element is writable */
                }
            }
    kv_pool_free(&p);
}

/* Pages of [off, off + len) of m that mincore reports resident. */
static size_t resident(const uint8_t *m, size_t off, size_t len)
{
    const size_t pg = 4096;
    uintptr_t a = ((uintptr_t)m + off) / pg * pg;
    size_t n = ((uintptr_t)m + off + len - a + pg - 1) / pg, r = 0;
    unsigned char *vec = malloc(n);
    assert_non_null(vec);
    assert_int_equal(mincore((void *)a, n * pg, vec), 0);
    for (size_t i = 0; i < n; i++)
        r += vec[i] & 1;
    free(vec);
    return r;
}

/* kv_pool_prefault_head's thread maps the head, then keeps mapping ahead of
 * the ids handed out (a step must not fault and zero a huge page per layer
 * region when its streams cross into new blocks), and no further: after 600
 * blocks are taken, the next blocks of every layer's K and V become
 * resident (waited for: the thread runs at its own pace), bytes unchanged,
 * while the far end of the pool stays unmapped. */
static void test_prefault_ahead(void **state)
{
    (void)state;
    const int32_t n_layer = 2, kv_dim = 64, n_blocks = 4096, bs = 32; /* F32: 8 KiB a block a layer */
    kv_pool_t *p = kv_pool_new(n_layer, kv_dim, n_blocks, bs, KV_TYPE_F32);
    const size_t per = (size_t)bs * kv_dim * 4, region = per * n_blocks;
    kv_pool_prefault_head(p, (size_t)2 << 20); /* blocks 0..255 */
    kv_seq_t *s = kv_seq_new(p);
    assert_int_equal(kv_seq_reserve(s, 600 * bs), KV_POOL_OK);
    int32_t hi = 0;
    for (int32_t i = 0; i < kv_seq_n_blocks(s); i++)
        hi = kv_seq_block_table(s)[i] > hi ? kv_seq_block_table(s)[i] : hi;
    assert_int_equal(hi, 599); /* the free stack hands out ascending ids */
    kv_store_t *st = kv_pool_store(p);
    const uint8_t *k = st->k, *v = st->v;
    const size_t want = 64 * per / 4096; /* blocks 600..663 of each region, in pages */
    size_t got = 0;
    for (int tries = 0; tries < 600000; tries++) { /* up to ~10 minutes: a loaded machine */
        got = 0;
        for (int32_t l = 0; l < n_layer; l++)
            got += resident(k, l * region + 600 * per, 64 * per) + resident(v, l * region + 600 * per, 64 * per);
        if (got == want * 2 * (size_t)n_layer)
            break;
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    }
    assert_int_equal(got, want * 2 * (size_t)n_layer);
    for (int32_t l = 0; l < n_layer; l++) {
        for (size_t i = 600 * per; i < 664 * per; i += 4093)
            assert_int_equal(k[l * region + i] | v[l * region + i], 0);
        /* bounded: the last 4 MiB of each region (blocks 3584..4095) untouched */
        assert_int_equal(resident(k, l * region + 3584 * per, 512 * per), 0);
        assert_int_equal(resident(v, l * region + 3584 * per, 512 * per), 0);
    }
    kv_seq_release(s);
    kv_seq_free(&s);
    kv_pool_free(&p);
}

static void test_alloc_release(void **state)
{
    (void)state;
    kv_pool_t *p = kv_pool_new(1, 2, 8, 4, KV_TYPE_F32);
    kv_seq_t *s = kv_seq_new(p);
    assert_int_equal(kv_seq_reserve(s, 10), KV_POOL_OK);
    assert_int_equal(kv_seq_n_blocks(s), 3);
    assert_int_equal(kv_seq_capacity(s), 12);
    assert_int_equal(kv_seq_n_tokens(s), 0);
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_used, 3);
    assert_int_equal(st.n_free, 5);
    assert_int_equal(st.n_cached, 0);
    /* reserving what is already there allocates nothing */
    assert_int_equal(kv_seq_reserve(s, 12), KV_POOL_OK);
    assert_int_equal(kv_seq_n_blocks(s), 3);
    assert_int_equal(kv_seq_reserve(s, -1), KV_POOL_EINVAL);
    /* the block table names distinct blocks */
    const int32_t *bt = kv_seq_block_table(s);
    assert_true(bt[0] != bt[1] && bt[1] != bt[2] && bt[0] != bt[2]);

    int32_t t[13];
    seq_tokens(t, 13, 100);
    assert_int_equal(kv_seq_append(s, t, 13), KV_POOL_EINVAL); /* 13 > 12 reserved */
    assert_int_equal(kv_seq_append(s, t, 10), KV_POOL_OK);
    assert_int_equal(kv_seq_n_tokens(s), 10);
    assert_memory_equal(kv_seq_tokens(s), t, 10 * sizeof(int32_t));
    assert_int_equal(kv_pool_check(p), 0);

    /* no commit: released blocks are plain free, nothing cached */
    kv_seq_release(s);
    assert_int_equal(kv_seq_n_blocks(s), 0);
    st = stats(p);
    assert_int_equal(st.n_used, 0);
    assert_int_equal(st.n_free, 8);
    assert_int_equal(st.n_cached, 0);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&s);
    assert_null(s);
    kv_pool_free(&p);
}

static void test_exhaustion(void **state)
{
    (void)state;
    kv_pool_t *p = kv_pool_new(1, 2, 4, 4, KV_TYPE_F32);
    kv_seq_t *a = kv_seq_new(p), *b = kv_seq_new(p);
    assert_int_equal(kv_seq_reserve(a, 12), KV_POOL_OK); /* 3 blocks */
    /* 2 blocks needed, 1 available: no capacity, and nothing taken */
    assert_int_equal(kv_seq_reserve(b, 5), KV_POOL_NO_CAPACITY);
    assert_int_equal(kv_seq_n_blocks(b), 0);
    assert_int_equal(stats(p).n_used, 3);
    assert_int_equal(kv_pool_n_available(p), 1);
    assert_int_equal(kv_seq_reserve(b, 4), KV_POOL_OK);
    assert_int_equal(kv_seq_reserve(b, 5), KV_POOL_NO_CAPACITY);
    assert_int_equal(kv_pool_n_available(p), 0);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&a);
    assert_int_equal(kv_seq_reserve(b, 16), KV_POOL_OK);
    assert_int_equal(kv_seq_n_blocks(b), 4);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&b);
    assert_int_equal(stats(p).n_free, 4);
    kv_pool_free(&p);
}

/* ---- prefix cache ------------------------------------------------------- */

static void test_prefix_match(void **state)
{
    (void)state;
    const int bs = 4;
    kv_pool_t *p = kv_pool_new(1, 2, 16, bs, KV_TYPE_F32);
    int32_t t[20];
    seq_tokens(t, 20, 1000);

    /* empty cache: 0 */
    kv_seq_t *a = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, t, 20, a), 0);
    assert_int_equal(feed(p, a, t, 14), KV_POOL_OK); /* 3 full blocks + 2 tokens */
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_cached_total, 3);
    assert_int_equal(st.n_registered, 3);
    /* a non-empty sequence cannot be matched into */
    assert_int_equal(kv_pool_match_prefix(p, t, 20, a), KV_POOL_EINVAL);

    /* full chain while a is alive: 3 blocks shared, refs 2 */
    kv_seq_t *b = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, t, 20, b), 12);
    assert_int_equal(kv_seq_n_tokens(b), 12);
    assert_memory_equal(kv_seq_block_table(b), kv_seq_block_table(a), 3 * sizeof(int32_t));
    assert_memory_equal(kv_seq_tokens(b), t, 12 * sizeof(int32_t));
    assert_int_equal(kv_pool_check(p), 0);
    assert_int_equal(stats(p).n_used, 4 + 0); /* a's 4 blocks; b adds none */
    kv_seq_free(&b);

    /* never the last token: n = 12 covers 2 blocks, n = 13 covers 3 */
    for (int32_t n = 0; n <= 14; n++) {
        kv_seq_t *c = kv_seq_new(p);
        int32_t got = kv_pool_match_prefix(p, t, n, c);
        int32_t want = n > 0 ? ((n - 1) / bs) * bs : 0;
        if (want > 12)
            want = 12;
        assert_int_equal(got, want);
        assert_true(got < n || n == 0);
        kv_seq_free(&c);
    }

    /* partial: diverge inside block 1 -> only block 0 */
    int32_t u[20];
    memcpy(u, t, sizeof u);
    u[6] = 7;
    kv_seq_t *c = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, u, 20, c), 4);
    /* the divergent continuation is its own chain */
    assert_int_equal(feed(p, c, u + 4, 12), KV_POOL_OK);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_t *d = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, u, 17, d), 16);
    assert_int_equal(kv_seq_block_table(d)[0], kv_seq_block_table(a)[0]);
    assert_true(kv_seq_block_table(d)[1] != kv_seq_block_table(a)[1]);
    /* diverging in block 0 -> nothing */
    u[0] = 5;
    kv_seq_t *e = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, u, 20, e), 0);

    st = stats(p);
    assert_true(st.n_prefix_queries >= 5);
    assert_true(st.n_prefix_hit_tokens > 0 && st.n_prefix_hit_tokens <= st.n_prefix_query_tokens);
    assert_int_equal(st.n_prefix_hit_tokens, st.n_prefix_hit_blocks * (uint64_t)bs);

    kv_seq_free(&a);
    kv_seq_free(&c);
    kv_seq_free(&d);
    kv_seq_free(&e);
    assert_int_equal(kv_pool_check(p), 0);
    st = stats(p);
    assert_int_equal(st.n_used, 0);
    assert_int_equal(st.n_free + st.n_cached, st.n_blocks);
    assert_int_equal(st.n_cached, 6); /* a's 3 full blocks + c's 3 full ones */

    /* after everybody is gone the chain is still there */
    kv_seq_t *f = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, t, 13, f), 12);
    kv_seq_free(&f);
    kv_pool_free(&p);
}

static void test_refcount_shared(void **state)
{
    (void)state;
    kv_pool_t *p = kv_pool_new(1, 2, 10, 2, KV_TYPE_F32);
    int32_t t[9];
    seq_tokens(t, 9, 1);
    kv_seq_t *s[4];
    s[0] = kv_seq_new(p);
    assert_int_equal(feed(p, s[0], t, 8), KV_POOL_OK);
    for (int i = 1; i < 4; i++) {
        s[i] = kv_seq_new(p);
        assert_int_equal(kv_pool_match_prefix(p, t, 9, s[i]), 8);
        assert_int_equal(kv_pool_check(p), 0); /* refs == number of holders */
    }
    assert_int_equal(stats(p).n_used, 4);
    /* each sharer now decodes into its own block */
    for (int i = 1; i < 4; i++) {
        int32_t tok = 50 + i;
        assert_int_equal(feed(p, s[i], &tok, 1), KV_POOL_OK);
        assert_int_equal(kv_pool_check(p), 0);
    }
    assert_int_equal(stats(p).n_used, 7);
    /* shared blocks stay used while any holder is left; own blocks go at once */
    int order[4] = {2, 0, 3, 1};
    int used_after[4] = {6, 6, 5, 0};
    for (int k = 0; k < 4; k++) {
        kv_seq_free(&s[order[k]]);
        assert_int_equal(kv_pool_check(p), 0);
        assert_int_equal(stats(p).n_used, used_after[k]);
    }
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_used, 0);
    assert_int_equal(st.n_cached, 4);
    assert_int_equal(st.n_free, 6);
    kv_pool_free(&p);
}

/* LRU: released chains are evicted least recently released first, and within
 * a chain the tail first; re-using a chain makes it most recent again. */
static void test_lru_order(void **state)
{
    (void)state;
    const int bs = 2;
    kv_pool_t *p = kv_pool_new(1, 2, 6, bs, KV_TYPE_F32);
    int32_t A[5] = {1, 2, 3, 4, 0}, B[5] = {5, 6, 7, 8, 0};
    kv_seq_t *s = kv_seq_new(p);
    assert_int_equal(feed(p, s, A, 4), KV_POOL_OK);
    kv_seq_release(s);
    assert_int_equal(feed(p, s, B, 4), KV_POOL_OK);
    kv_seq_release(s);
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_cached, 4);
    assert_int_equal(st.n_free, 2);

    /* touch A: match and release -> A becomes most recent, B least */
    assert_int_equal(kv_pool_match_prefix(p, A, 5, s), 4);
    kv_seq_release(s);

    /* 2 free blocks are used before any eviction */
    kv_seq_t *x = kv_seq_new(p);
    assert_int_equal(kv_seq_reserve(x, 4), KV_POOL_OK);
    assert_int_equal(stats(p).n_evictions, 0);
    /* next allocation evicts B's tail block: B still matches 1 block */
    assert_int_equal(kv_seq_reserve(x, 6), KV_POOL_OK);
    assert_int_equal(stats(p).n_evictions, 1);
    kv_seq_t *y = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, B, 5, y), 2);
    kv_seq_release(y);
    /* that release made B's head most recent: next victim is A's tail */
    assert_int_equal(kv_seq_reserve(x, 8), KV_POOL_OK);
    assert_int_equal(stats(p).n_evictions, 2);
    assert_int_equal(kv_pool_match_prefix(p, A, 5, y), 2);
    kv_seq_release(y);
    assert_int_equal(kv_pool_match_prefix(p, B, 5, y), 2);
    kv_seq_release(y);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&x);
    kv_seq_free(&y);
    kv_seq_free(&s);
    kv_pool_free(&p);
}

/* Referenced cached blocks are never evicted: the pool says no capacity. */
static void test_evict_only_unreferenced(void **state)
{
    (void)state;
    const int bs = 2;
    kv_pool_t *p = kv_pool_new(1, 2, 4, bs, KV_TYPE_F32);
    int32_t A[5] = {1, 2, 3, 4, 9};
    kv_seq_t *a = kv_seq_new(p);
    assert_int_equal(feed(p, a, A, 4), KV_POOL_OK);
    kv_seq_release(a);
    kv_seq_t *h = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, A, 5, h), 4); /* holds both cached blocks */
    kv_seq_t *x = kv_seq_new(p);
    assert_int_equal(kv_seq_reserve(x, 4), KV_POOL_OK);     /* the 2 free blocks */
    assert_int_equal(kv_seq_reserve(x, 5), KV_POOL_NO_CAPACITY);
    assert_int_equal(stats(p).n_evictions, 0);
    assert_int_equal(kv_pool_check(p), 0);
    /* the holder still sees its chain */
    kv_seq_t *y = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, A, 5, y), 4);
    kv_seq_free(&y);
    kv_seq_free(&h);
    /* now unreferenced: evictable, tail block first */
    assert_int_equal(kv_seq_reserve(x, 6), KV_POOL_OK);
    assert_int_equal(stats(p).n_evictions, 1);
    y = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, A, 5, y), 2);
    kv_seq_free(&y);
    kv_seq_free(&x);
    kv_seq_free(&a);
    assert_int_equal(kv_pool_check(p), 0);
    kv_pool_free(&p);
}

/* Two sequences compute the same block concurrently: one registration. */
static void test_duplicate_commit(void **state)
{
    (void)state;
    kv_pool_t *p = kv_pool_new(1, 2, 8, 2, KV_TYPE_F32);
    int32_t T[7] = {1, 2, 3, 4, 5, 6, 7};
    kv_seq_t *a = kv_seq_new(p), *b = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, T, 7, a), 0);
    assert_int_equal(kv_pool_match_prefix(p, T, 7, b), 0);
    assert_int_equal(feed(p, a, T, 2), KV_POOL_OK);
    assert_int_equal(feed(p, b, T, 4), KV_POOL_OK); /* block 0 dup, block 1 new */
    assert_int_equal(feed(p, a, T + 2, 4), KV_POOL_OK); /* block 1 dup, block 2 new */
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_cached_total, 3);
    assert_int_equal(kv_pool_check(p), 0);
    /* the chain crosses both sequences' blocks and is reachable */
    kv_seq_t *c = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, T, 7, c), 6);
    assert_int_equal(kv_seq_block_table(c)[0], kv_seq_block_table(a)[0]);
    assert_int_equal(kv_seq_block_table(c)[1], kv_seq_block_table(b)[1]);
    assert_int_equal(kv_seq_block_table(c)[2], kv_seq_block_table(a)[2]);
    kv_seq_free(&c);
    kv_seq_free(&a);
    kv_seq_free(&b);
    st = stats(p);
    assert_int_equal(st.n_cached, 3);
    assert_int_equal(st.n_free, 5); /* the duplicates were freed, not cached */
    assert_int_equal(kv_pool_check(p), 0);
    kv_pool_free(&p);
}

/* ---- sliding window: releasing blocks behind the window ----------------- */

/* kv_seq_drop_before: only whole, committed blocks before the position go;
 * a cached one stays in the prefix cache (evictable) and another sequence's
 * reference keeps a shared one alive; uncached ones become free; the table
 * keeps its length with KV_SEQ_NO_BLOCK entries; release skips them. */
static void test_window_drop(void **state)
{
    (void)state;
    const int bs = 4;
    kv_pool_t *p = kv_pool_new(1, 2, 16, bs, KV_TYPE_F32);
    int32_t t[24];
    seq_tokens(t, 24, 500);
    kv_seq_t *a = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, t, 24, a), 0);
    assert_int_equal(kv_seq_drop_before(a, -5), 0);
    assert_int_equal(feed(p, a, t, 18), KV_POOL_OK); /* 4 full blocks + 2 tokens */
    int32_t phys[5];
    memcpy(phys, kv_seq_block_table(a), sizeof phys);
    /* position 11 is in logical block 2: blocks 0 and 1 lie wholly before */
    assert_int_equal(kv_seq_drop_before(a, 11), 2);
    assert_int_equal(kv_seq_n_dropped(a), 2);
    assert_int_equal(kv_seq_n_live(a), 3);
    assert_int_equal(kv_seq_n_blocks(a), 5);
    assert_int_equal(kv_seq_capacity(a), 20);
    assert_int_equal(kv_seq_block_table(a)[0], KV_SEQ_NO_BLOCK);
    assert_int_equal(kv_seq_block_table(a)[1], KV_SEQ_NO_BLOCK);
    assert_int_equal(kv_seq_block_table(a)[2], phys[2]);
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_used, 3);
    assert_int_equal(st.n_cached, 2);  /* still in the prefix cache */
    assert_int_equal(kv_pool_check(p), 0);
    /* idempotent; never past the committed blocks (block 4 is being written) */
    assert_int_equal(kv_seq_drop_before(a, 11), 0);
    assert_int_equal(kv_seq_drop_before(a, 1000), 2);
    assert_int_equal(kv_seq_n_dropped(a), 4);
    assert_int_equal(kv_seq_block_table(a)[4], phys[4]);
    assert_int_equal(kv_pool_check(p), 0);

    /* the dropped blocks still serve a new prompt with the same prefix */
    kv_seq_t *b = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, t, 24, b), 16);
    assert_memory_equal(kv_seq_block_table(b), phys, 4 * sizeof(int32_t));
    assert_int_equal(stats(p).n_cached, 0);
    /* a keeps writing after its drops */
    assert_int_equal(feed(p, a, t + 18, 6), KV_POOL_OK);
    assert_int_equal(kv_seq_n_tokens(a), 24);
    assert_int_equal(kv_pool_check(p), 0);
    /* b drops its references: the blocks go back to the LRU list */
    assert_int_equal(kv_seq_drop_before(b, 16), 4);
    st = stats(p);
    assert_int_equal(st.n_cached, 4);
    assert_int_equal(st.n_used, 2); /* a's blocks 4 and 5 */
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&b);

    /* a private duplicate (same content cached first by another sequence) is
     * freed, not cached, when dropped */
    kv_seq_t *c = kv_seq_new(p), *d = kv_seq_new(p);
    int32_t u[9];
    seq_tokens(u, 9, 900);
    assert_int_equal(kv_pool_match_prefix(p, u, 9, c), 0);
    assert_int_equal(kv_pool_match_prefix(p, u, 9, d), 0);
    assert_int_equal(feed(p, c, u, 8), KV_POOL_OK);
    assert_int_equal(feed(p, d, u, 8), KV_POOL_OK); /* d's two blocks are duplicates */
    int32_t free_before = stats(p).n_free;
    assert_int_equal(kv_seq_drop_before(d, 8), 2);
    assert_int_equal(stats(p).n_free, free_before + 2);
    assert_int_equal(kv_pool_check(p), 0);
    /* releasing a sequence with dropped blocks returns only its live ones */
    kv_seq_release(d);
    assert_int_equal(kv_seq_n_blocks(d), 0);
    assert_int_equal(kv_seq_n_dropped(d), 0);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&d);
    kv_seq_free(&c);
    kv_seq_free(&a);
    st = stats(p);
    assert_int_equal(st.n_used, 0);
    assert_int_equal(st.n_free + st.n_cached, 16);
    assert_int_equal(kv_pool_check(p), 0);
    kv_pool_free(&p);
}

/* A sequence decoding one token at a time and dropping what a window of W
 * no longer covers lives in ceil(W / bs) + 1 blocks: 200 positions in a
 * 3-block pool. Without the drops the same pool runs out at position 12. */
static void test_window_bounded(void **state)
{
    (void)state;
    const int bs = 4, W = 6;
    for (int drop = 1; drop >= 0; drop--) {
        kv_pool_t *p = kv_pool_new(1, 2, 3, bs, KV_TYPE_F32);
        kv_seq_t *s = kv_seq_new(p);
        int32_t pos = 0, max_live = 0;
        for (; pos < 200; pos++) {
            if (drop)
                kv_seq_drop_before(s, pos - W + 1); /* what the row at pos reads */
            int32_t tok = 7 + pos % 5;
            if (feed(p, s, &tok, 1) != KV_POOL_OK)
                break;
            max_live = kv_seq_n_live(s) > max_live ? kv_seq_n_live(s) : max_live;
            assert_int_equal(kv_pool_check(p), 0);
        }
        if (drop) {
            assert_int_equal(pos, 200);
            assert_true(max_live <= (W + bs - 1) / bs + 1);
            assert_int_equal(kv_seq_n_blocks(s), 50);
        } else {
            assert_int_equal(pos, 3 * bs);
        }
        kv_seq_free(&s);
        kv_pool_free(&p);
    }
}

/* ---- hash collisions ---------------------------------------------------- */

static uint64_t hash_const(uint64_t parent, const int32_t *t, int32_t n)
{
    (void)parent, (void)t, (void)n;
    return 42;
}

/* Ignores the parent: blocks with equal tokens under different prefixes collide. */
static uint64_t hash_tokens_only(uint64_t parent, const int32_t *t, int32_t n)
{
    (void)parent;
    uint64_t h = 1469598103934665603ULL;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)t[i]) * 1099511628211ULL;
    return h;
}

static void collisions_with(kv_pool_hash_fn fn)
{
    const int bs = 2;
    kv_pool_t *p = kv_pool_new(1, 2, 16, bs, KV_TYPE_F32);
    kv_pool_test_set_hash(p, fn);
    /* P and Q share block 1's tokens under different block 0 */
    int32_t P[5] = {1, 2, 7, 7, 0}, Q[5] = {3, 4, 7, 7, 0}, R[5] = {1, 2, 8, 8, 0};
    kv_seq_t *a = kv_seq_new(p);
    assert_int_equal(feed(p, a, P, 4), KV_POOL_OK);
    kv_seq_release(a);
    kv_seq_t *b = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, Q, 5, b), 0); /* Q's block 0 was never cached */
    assert_int_equal(feed(p, b, Q, 4), KV_POOL_OK);
    kv_seq_release(b);
    assert_int_equal(stats(p).n_cached_total, 4);
    assert_int_equal(kv_pool_check(p), 0);

    kv_seq_t *c = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, P, 5, c), 4);
    kv_seq_t *d = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, Q, 5, d), 4);
    /* same tokens in block 1, different parents: distinct physical blocks */
    assert_true(kv_seq_block_table(c)[1] != kv_seq_block_table(d)[1]);
    kv_seq_t *e = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, R, 5, e), 2); /* block 1 differs */
    assert_int_equal(kv_seq_block_table(e)[0], kv_seq_block_table(c)[0]);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_seq_free(&c);
    kv_seq_free(&d);
    kv_seq_free(&e);
    kv_pool_free(&p);
}

static void test_hash_collisions(void **state)
{
    (void)state;
    collisions_with(hash_const);
    collisions_with(hash_tokens_only);
    collisions_with(NULL);
}

/* A cached child outlives its parent block; the parent's physical block is
 * re-registered with other content under a colliding key. The child must not
 * be reachable through the new parent (parent identity includes a serial). */
static void test_stale_parent(void **state)
{
    (void)state;
    kv_pool_t *p = kv_pool_new(1, 2, 4, 2, KV_TYPE_F32);
    kv_pool_test_set_hash(p, hash_const);
    int32_t T[4] = {1, 2, 3, 4}, N[2] = {9, 9}, W[5] = {9, 9, 3, 4, 0};
    kv_seq_t *a = kv_seq_new(p), *x = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, T, 4, x), 0);
    assert_int_equal(feed(p, a, T, 2), KV_POOL_OK);     /* b0 = [1 2] cached */
    assert_int_equal(feed(p, x, T, 4), KV_POOL_OK);     /* x0 dup of b0, x1 = [3 4] under b0 */
    int32_t b0 = kv_seq_block_table(a)[0];
    kv_seq_free(&a);                                    /* LRU: b0 */
    kv_seq_free(&x);                                    /* LRU: b0, x1; x0 free */
    kv_seq_t *z = kv_seq_new(p), *y = kv_seq_new(p);
    assert_int_equal(kv_seq_reserve(z, 4), KV_POOL_OK); /* both free blocks */
    assert_int_equal(feed(p, y, N, 2), KV_POOL_OK);     /* evicts b0, re-registers it as [9 9] */
    assert_int_equal(kv_seq_block_table(y)[0], b0);
    assert_int_equal(stats(p).n_evictions, 1);
    kv_seq_t *w = kv_seq_new(p);
    assert_int_equal(kv_pool_match_prefix(p, W, 5, w), 2);
    assert_int_equal(kv_pool_check(p), 0);
    kv_seq_free(&w);
    kv_seq_free(&y);
    kv_seq_free(&z);
    kv_pool_free(&p);
}

/* ---- randomized stress -------------------------------------------------- */

static uint64_t rng_next(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static int32_t rng_int(uint64_t *x, int32_t n) { return (int32_t)(rng_next(x) % (uint64_t)n); }

/* Fingerprint of the prefix ending at each position, 48 bits split over two
 * floats (exact: < 2^24 each). Independent of the pool's hash. */
static void fingerprints(const int32_t *t, int32_t n, uint64_t *out)
{
    uint64_t h = 0x12345;
    for (int32_t i = 0; i < n; i++) {
        h = (h ^ (uint64_t)(uint32_t)t[i]) * 0x100000001B3ULL;
        h ^= h >> 29;
        out[i] = h & 0xFFFFFFFFFFFFULL;
    }
}

#define ST_MAXLEN 96
#define ST_MAXSEQ 6

typedef struct st_seq {
    kv_seq_t *kv;
    int32_t tok[ST_MAXLEN];
    uint64_t fp[ST_MAXLEN];
    int32_t n_total;  /* planned length */
} st_seq_t;

static void st_write(kv_store_t *kv, const kv_seq_t *s, int32_t pos, uint64_t fp)
{
    const int32_t *bt = kv_seq_block_table(s);
    int32_t b = bt[pos / kv->block_size], slot = pos % kv->block_size;
    for (int l = 0; l < kv->n_layer; l++) {
        float *k = kv_store_k(kv, l, b, slot), *v = kv_store_v(kv, l, b, slot);
        k[0] = (float)(fp & 0xFFFFFF);
        k[1] = (float)(fp >> 24);
        v[0] = (float)l;
        v[1] = (float)((fp ^ (uint64_t)l) & 0xFFFFFF);
    }
}

static void st_verify(kv_store_t *kv, const st_seq_t *q, int32_t upto)
{
    const int32_t *bt = kv_seq_block_table(q->kv);
    /* positions of dropped blocks (window runs) are never read again */
    for (int32_t pos = kv_seq_n_dropped(q->kv) * kv->block_size; pos < upto; pos++) {
        int32_t b = bt[pos / kv->block_size], slot = pos % kv->block_size;
        uint64_t fp = q->fp[pos];
        for (int l = 0; l < kv->n_layer; l++) {
            const float *k = kv_store_k(kv, l, b, slot), *v = kv_store_v(kv, l, b, slot);
            if (k[0] != (float)(fp & 0xFFFFFF) || k[1] != (float)(fp >> 24) || v[0] != (float)l ||
                v[1] != (float)((fp ^ (uint64_t)l) & 0xFFFFFF))
                fail_msg("position %d (block %d slot %d layer %d) holds the wrong prefix", pos, b, slot, l);
        }
    }
}

/* window > 0: every sequence drops the blocks a window of that many
 * positions no longer covers, as the scheduler does for windowed models. */
static void stress_run(uint64_t seed, kv_pool_hash_fn fn, int n_ops, int32_t window)
{
    /* windowed sequences hold ~3 blocks each: a smaller pool still runs out */
    const int bs = 4, n_blocks = window > 0 ? 12 : 40;
    kv_pool_t *p = kv_pool_new(2, 2, n_blocks, bs, KV_TYPE_F32);
    kv_pool_test_set_hash(p, fn);
    kv_store_t *kv = kv_pool_store(p);
    uint64_t rng = seed;
    /* prompt families share long prefixes; a 3-letter alphabet in the tails
     * makes equal blocks under different parents common */
    int32_t base[3][ST_MAXLEN];
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < ST_MAXLEN; i++)
            base[f][i] = rng_int(&rng, 3);
    st_seq_t seqs[ST_MAXSEQ];
    int n_live = 0;
    uint64_t n_hits = 0, n_nocap = 0, n_done = 0;

    for (int op = 0; op < n_ops; op++) {
        int what = rng_int(&rng, 10);
        if (n_live == 0 || (what < 3 && n_live < ST_MAXSEQ)) {
            /* admit: prompt = family prefix + random tail, then generation */
            st_seq_t *q = &seqs[n_live++];
            int f = rng_int(&rng, 3);
            int32_t n_prompt = 1 + rng_int(&rng, 48);
            int32_t keep = rng_int(&rng, n_prompt + 1);
            q->n_total = n_prompt + rng_int(&rng, 24);
            for (int32_t i = 0; i < q->n_total; i++)
                q->tok[i] = i < keep ? base[f][i] : rng_int(&rng, 3);
            fingerprints(q->tok, q->n_total, q->fp);
            q->kv = kv_seq_new(p);
            int32_t hit = kv_pool_match_prefix(p, q->tok, n_prompt, q->kv);
            assert_true(hit >= 0 && hit % bs == 0 && hit <= ((n_prompt - 1) / bs) * bs);
            assert_int_equal(kv_seq_n_tokens(q->kv), hit);
            if (window > 0)
                kv_seq_drop_before(q->kv, hit - window + 1);
            st_verify(kv, q, hit);
            n_hits += hit > 0;
        } else if (what < 8) {
            /* step: a prefill chunk or one decode token */
            st_seq_t *q = &seqs[rng_int(&rng, n_live)];
            int32_t at = kv_seq_n_tokens(q->kv);
            if (at < q->n_total) {
                int32_t n = 1 + rng_int(&rng, 9);
                if (n > q->n_total - at)
                    n = q->n_total - at;
                int32_t need = (at + n + bs - 1) / bs - kv_seq_n_blocks(q->kv);
                int32_t avail = kv_pool_n_available(p);
                int rc = kv_seq_reserve(q->kv, n);
                if (rc == KV_POOL_NO_CAPACITY) {
                    assert_true(need > avail);
                    n_nocap++;
                } else {
                    assert_int_equal(rc, KV_POOL_OK);
                    assert_true(need <= avail);
                    assert_int_equal(kv_seq_append(q->kv, q->tok + at, n), KV_POOL_OK);
                    for (int32_t i = at; i < at + n; i++)
                        st_write(kv, q->kv, i, q->fp[i]);
                    assert_true(kv_pool_commit_full_blocks(p, q->kv) >= 0);
                    if (window > 0)
                        kv_seq_drop_before(q->kv, at + n - window + 1);
                }
            }
            /* nobody else's writes ever land in this sequence's blocks */
            for (int i = 0; i < n_live; i++)
                st_verify(kv, &seqs[i], kv_seq_n_tokens(seqs[i].kv));
        } else {
            /* finish or preempt a random sequence */
            int i = rng_int(&rng, n_live);
            if (rng_int(&rng, 2) == 0) {
                kv_seq_free(&seqs[i].kv);
                seqs[i] = seqs[--n_live];
                n_done++;
            } else {
                kv_seq_release(seqs[i].kv); /* preempted: recompute later */
                int32_t hit = kv_pool_match_prefix(p, seqs[i].tok, seqs[i].n_total, seqs[i].kv);
                assert_true(hit >= 0);
                st_verify(kv, &seqs[i], hit);
            }
        }
        if (kv_pool_check(p) != 0)
            fail_msg("kv_pool_check failed after op %d (seed %llu)", op, (unsigned long long)seed);
    }
    while (n_live > 0)
        kv_seq_free(&seqs[--n_live].kv);
    assert_int_equal(kv_pool_check(p), 0);
    kv_pool_stats_t st = stats(p);
    assert_int_equal(st.n_used, 0);
    assert_int_equal(st.n_seqs, 0);
    assert_int_equal(st.n_free + st.n_cached, n_blocks);
    /* the run must have exercised the interesting paths */
    assert_true(n_hits > 10);
    assert_true(n_nocap > 0);
    assert_true(st.n_evictions > 0);
    printf("# stress seed %llu: %llu hits, %llu no-capacity, %llu finished, %llu evictions, "
           "hit tokens %llu / %llu\n",
           (unsigned long long)seed, (unsigned long long)n_hits, (unsigned long long)n_nocap,
           (unsigned long long)n_done, (unsigned long long)st.n_evictions,
           (unsigned long long)st.n_prefix_hit_tokens, (unsigned long long)st.n_prefix_query_tokens);
    kv_pool_free(&p);
}

static void test_stress(void **state)
{
    (void)state;
    stress_run(1, NULL, 4000, 0);
    stress_run(2, NULL, 4000, 0);
    stress_run(3, hash_const, 2000, 0);
    stress_run(4, hash_tokens_only, 3000, 0);
    stress_run(5, NULL, 4000, 6);
    stress_run(6, hash_tokens_only, 3000, 9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry_and_budget),
        cmocka_unit_test(test_prefault_step),
        cmocka_unit_test(test_prefault_ahead),
        cmocka_unit_test(test_alloc_release),
        cmocka_unit_test(test_exhaustion),
        cmocka_unit_test(test_prefix_match),
        cmocka_unit_test(test_refcount_shared),
        cmocka_unit_test(test_lru_order),
        cmocka_unit_test(test_evict_only_unreferenced),
        cmocka_unit_test(test_duplicate_commit),
        cmocka_unit_test(test_window_drop),
        cmocka_unit_test(test_window_bounded),
        cmocka_unit_test(test_hash_collisions),
        cmocka_unit_test(test_stale_parent),
        cmocka_unit_test(test_stress),
        cmocka_unit_test(test_events),
        cmocka_unit_test(test_partitions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
