/* Unit tests for worker/kernels/attention.{h,c}: attention_head and the
 * grouped-query attention_group and the whole-row attention_row over a
 * paged KV store.
 *
 * Claims checked:
 *   - bit for bit (memcmp of the outputs): attention_group over n_q query
 *     heads equals n_q calls of attention_head, for group sizes 1..9 (so
 *     the AVX2 path's sub-groups of 4 and their remainders are crossed),
 *     F32 and F16 K/V, head_dim 8, 24, 64 and 128 (whole and half 16-float
 *     V passes) and 12 (the portable path), position ranges that start and
 *     end inside blocks (sliding windows), one position, and soft-capping;
 *   - bit for bit: attention_row (every head of a row, MHA and GQA head
 *     counts, windows, soft-capping, F32/F16) and attention_row_by_group
 *     (the same with a group's rows of scratch) equal one attention_head
 *     call per head;
 *   - bit for bit: attention_head on AVX2 equals attention_head_ref, the
 *     scalar definition of the vector arithmetic (skipped with a message
 *     without AVX2);
 *   - bit for bit: attention_tile (tiles of query rows of one sequence, each
 *     row with its own end) on every path the CPU has (AVX-512, AVX2,
 *     portable; a missing one is skipped with a message) equals one
 *     attention_head call per (row, head) and, on the vector paths,
 *     attention_head_ref: F32/F16, head_dim 8-256, groups 1-70 (more vectors
 *     than a tile holds), 1-12 rows, equal and staggered ends, a first
 *     position inside a block, soft-capping;
 *   - against an independent reference (double precision softmax attention
 *     computed here from the same K/V values): every output within
 *     2e-5 · (1 + max |v|) absolute;
 *   - the block table is honoured: K/V of positions outside [t0, t1) and of
 *     blocks the table does not name are poisoned with NaN and never read
 *     (a NaN would reach the output).
 * Which path ran (AVX2 or portable) is printed; on a CPU without AVX2 both
 * sides take the portable path and the bit-for-bit claim is trivially
 * true, which the message says.
 *
 * ATT_BENCH=1 build/tests/worker/kernels/test_attention runs a benchmark instead:
 * one thread, F16 K/V, head_dim 64, 4 kv heads, group sizes 1-8 and 64-512
 * positions, time of one row's attention over a layer through n_q calls of
 * attention_head against attention_group (best of 30 interleaved reps).
 * ATT_BENCH=rows runs the decode-step benchmark: 12 layers × 32 rows, each
 * row its own sequence of ATT_POS positions (default 96) in scattered
 * blocks, K/V F16 and cold (~113 MB for 12 × 12 heads of 64, more than the
 * caches hold); per layer the rows in an OpenMP loop (OMP_NUM_THREADS)
 * through attention_row against attention_row_by_group (per-kv-head
 * attention_group calls, the tasks before 2026-11-23), for MHA
 * (12/12 heads) and GQA (32/4); best of 5.
 * ATT_BENCH=prefill: one layer's causal attention of a prefill of ATT_POS
 * rows (default 512), 32/4 heads, F16 K/V, attention_row per row against
 * attention_tile in slots of ATT_TR rows (default 4) per kv head; best of 7.
 * ATT_CLOCK=cpu times any benchmark in process CPU time (for one thread on
 * a loaded machine).
 */
#include <omp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cpu.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/quant.h"
#include "worker/kernels/kv_store.h"

#define BS 32          /* block size */
#define N_BLOCKS 24    /* physical blocks in the test store */
#define N_LAYER 2

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static float frand(void)  /* uniform in [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / (double)(1ULL << 53) * 2.0 - 1.0);
}

/* A store of n_kv heads of hd, every element random, in type t. */
static kv_store_t store_new(kv_type_t t, int n_kv, int hd)
{
    kv_store_t s = {.n_layer = N_LAYER, .n_blocks = N_BLOCKS, .block_size = BS, .kv_dim = n_kv * hd, .type = t};
    size_t n = (size_t)N_LAYER * N_BLOCKS * BS * (size_t)s.kv_dim;
    s.k = malloc(n * kv_type_size(t));
    s.v = malloc(n * kv_type_size(t));
    assert_non_null(s.k);
    assert_non_null(s.v);
    for (size_t i = 0; i < n; i++) {
        float a = frand() * 2.0f, b = frand() * 3.0f;
        if (t == KV_TYPE_F16) {
            ((uint16_t *)s.k)[i] = quant_fp32_to_fp16(a);
            ((uint16_t *)s.v)[i] = quant_fp32_to_fp16(b);
        } else {
            ((float *)s.k)[i] = a;
            ((float *)s.v)[i] = b;
        }
    }
    return s;
}

static float elt(const kv_store_t *s, const void *base, size_t i)
{
    return s->type == KV_TYPE_F16 ? quant_fp16_to_fp32(((const uint16_t *)base)[i]) : ((const float *)base)[i];
}

static void put(const kv_store_t *s, void *base, size_t i, float x)
{
    if (s->type == KV_TYPE_F16)
        ((uint16_t *)base)[i] = quant_fp32_to_fp16(x);
    else
        ((float *)base)[i] = x;
}

/* NaN into every K/V element of layer l that [t0, t1) through bt does not
 * cover (other positions of named blocks, and unnamed blocks). */
static void poison_outside(kv_store_t *s, int l, const int32_t *bt, int n_bt, int t0, int t1)
{
    for (int b = 0; b < N_BLOCKS; b++)
        for (int slot = 0; slot < BS; slot++) {
            int named = -1;
            for (int j = 0; j < n_bt; j++)
                if (bt[j] == b)
                    named = j;
            int pos = named * BS + slot;
            if (named >= 0 && pos >= t0 && pos < t1)
                continue;
            size_t at = kv_store_index(s, l, b, slot);
            for (int i = 0; i < s->kv_dim; i++) {
                put(s, s->k, at + (size_t)i, NAN);
                put(s, s->v, at + (size_t)i, NAN);
            }
        }
}

/* Double-precision attention of one head (the independent reference). */
static void ref_head(const kv_store_t *s, int l, const int32_t *bt, int t0, int t1, int kvo, int hd,
                     const float *q, float scale, float softcap, double *out)
{
    int n = t1 - t0;
    double *sc = malloc(sizeof(double) * (size_t)n), mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) {
        int t = t0 + j;
        size_t at = kv_store_index(s, l, bt[t / BS], t % BS) + (size_t)kvo;
        double d = 0;
        for (int i = 0; i < hd; i++)
            d += (double)q[i] * elt(s, s->k, at + (size_t)i);
        d *= scale;
        if (softcap > 0)
            d = softcap * tanh(d / softcap);
        sc[j] = d;
        mx = d > mx ? d : mx;
    }
    for (int j = 0; j < n; j++)
        sum += sc[j] = exp(sc[j] - mx);
    for (int i = 0; i < hd; i++)
        out[i] = 0;
    for (int j = 0; j < n; j++) {
        int t = t0 + j;
        size_t at = kv_store_index(s, l, bt[t / BS], t % BS) + (size_t)kvo;
        for (int i = 0; i < hd; i++)
            out[i] += sc[j] / sum * elt(s, s->v, at + (size_t)i);
    }
    free(sc);
}

typedef struct {
    int hd, group, n_kv, t0, t1;
    float softcap;
} att_case_t;

/* A store for case c with layer l's positions [t0, t1) in a scrambled
 * block table (position p in block (a + m p/BS) % N) and everything else
 * poisoned. */
static kv_store_t case_store(kv_type_t type, const att_case_t *c, int l, int a, int m, int32_t bt[N_BLOCKS])
{
    kv_store_t s = store_new(type, c->n_kv, c->hd);
    const int n_bt = (c->t1 + BS - 1) / BS;
    for (int j = 0; j < n_bt; j++)
        bt[j] = (a + m * j) % N_BLOCKS;
    poison_outside(&s, l, bt, n_bt, c->t0, c->t1);
    return s;
}

static void run_case(kv_type_t type, const att_case_t *c)
{
    const int l = 1;
    int32_t bt[N_BLOCKS];
    kv_store_t s = case_store(type, c, l, 7, 5, bt);

    const int hd = c->hd, n_q = c->group, n = c->t1 - c->t0;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t ld = (size_t)n + 5;
    float *q = malloc(sizeof(float) * (size_t)n_q * hd), *o_head = malloc(sizeof(float) * (size_t)n_q * hd),
          *o_group = malloc(sizeof(float) * (size_t)n_q * hd), *sc = malloc(sizeof(float) * (size_t)n_q * ld);
    double *ref = malloc(sizeof(double) * (size_t)hd);
    for (int g = 0; g < c->n_kv; g++) {
        const int kvo = g * hd;
        for (int i = 0; i < n_q * hd; i++)
            q[i] = frand() * 2.0f;
        for (int h = 0; h < n_q; h++)
            attention_head(q + (size_t)h * hd, &s, l, bt, c->t0, c->t1, kvo, hd, scale, c->softcap, sc,
                           o_head + (size_t)h * hd);
        memset(o_group, 0xff, sizeof(float) * (size_t)n_q * hd);
        attention_group(q, n_q, &s, l, bt, c->t0, c->t1, kvo, hd, scale, c->softcap, sc, ld, o_group);
        if (memcmp(o_head, o_group, sizeof(float) * (size_t)n_q * hd) != 0) {
            for (int i = 0; i < n_q * hd; i++)
                if (memcmp(&o_head[i], &o_group[i], sizeof(float)) != 0) {
                    print_error("%s hd %d group %d [%d,%d) softcap %g: head %d elt %d: %.9g (head) vs %.9g (group)\n",
                                kv_type_name(type), hd, n_q, c->t0, c->t1, c->softcap, i / hd, i % hd, o_head[i],
                                o_group[i]);
                    break;
                }
            fail();
        }
        for (int h = 0; h < n_q; h++) {
            ref_head(&s, l, bt, c->t0, c->t1, kvo, hd, q + (size_t)h * hd, scale, c->softcap, ref);
            for (int i = 0; i < hd; i++) {
                double d = fabs((double)o_group[(size_t)h * hd + i] - ref[i]);
                if (!(d <= 2e-5 * (1.0 + 3.0))) {
                    print_error("%s hd %d group %d [%d,%d): head %d elt %d: %.9g vs reference %.9g\n",
                                kv_type_name(type), hd, n_q, c->t0, c->t1, h, i, o_group[(size_t)h * hd + i], ref[i]);
                    fail();
                }
            }
        }
    }
    (void)n;
    free(q);
    free(o_head);
    free(o_group);
    free(sc);
    free(ref);
    free(s.k);
    free(s.v);
}

static void test_group_equals_heads(void **state)
{
    (void)state;
    printf("# attention path: %s\n",
           cpu_has_avx2_fma_f16c() ? "AVX2 (head_dim % 8 == 0), portable for head_dim 12"
                                   : "portable only (no AVX2/FMA/F16C): group == heads is trivially true here");
    const att_case_t cases[] = {
        {64, 1, 2, 0, 97, 0},    {64, 2, 2, 0, 64, 0},    {64, 3, 4, 5, 200, 0},  {64, 4, 1, 0, 1, 0},
        {64, 5, 1, 31, 33, 0},   {128, 8, 1, 0, 300, 0},  {128, 9, 1, 100, 401, 0}, {24, 3, 2, 0, 77, 0},
        {8, 7, 3, 40, 41, 0},    {64, 4, 2, 0, 150, 50.0f}, {12, 3, 2, 3, 70, 0}, {48, 6, 2, 17, 250, 30.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_case(KV_TYPE_F32, &cases[i]);
        run_case(KV_TYPE_F16, &cases[i]);
    }
}

/* attention_row (every head of a row) against one attention_head call per
 * head, bit for bit, with the positions outside [t0, t1) poisoned. */
static void run_row_case(kv_type_t type, const att_case_t *c)
{
    const int l = 0;
    int32_t bt[N_BLOCKS];
    kv_store_t s = case_store(type, c, l, 3, 7, bt);
    const int hd = c->hd, n_head = c->group * c->n_kv, n = c->t1 - c->t0;
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t ld = (size_t)n + 3, nq = (size_t)n_head * (size_t)hd;
    float *q = malloc(sizeof(float) * nq), *o_head = malloc(sizeof(float) * nq), *o_row = malloc(sizeof(float) * nq),
          *sc = malloc(sizeof(float) * (size_t)n_head * ld);
    for (size_t i = 0; i < nq; i++)
        q[i] = frand() * 2.0f;
    for (int h = 0; h < n_head; h++)
        attention_head(q + (size_t)h * hd, &s, l, bt, c->t0, c->t1, (h / c->group) * hd, hd, scale, c->softcap, sc,
                       o_head + (size_t)h * hd);
    /* attention_row with n_head rows of scratch, then attention_row_by_group
     * with a group's rows (sc's first rows) */
    for (int by_group = 0; by_group < 2; by_group++) {
        memset(o_row, 0xff, sizeof(float) * nq);
        (by_group ? attention_row_by_group : attention_row)(q, n_head, c->n_kv, &s, l, bt, c->t0, c->t1, hd, scale,
                                                            c->softcap, sc, ld, o_row);
        for (size_t i = 0; i < nq; i++)
            if (memcmp(&o_head[i], &o_row[i], sizeof(float)) != 0) {
                print_error("%s hd %d heads %d/%d [%d,%d) softcap %g: head %zu elt %zu: %.9g (head) vs %.9g (%s)\n",
                            kv_type_name(type), hd, n_head, c->n_kv, c->t0, c->t1, c->softcap, i / (size_t)hd,
                            i % (size_t)hd, o_head[i], o_row[i], by_group ? "row by group" : "row");
                fail();
            }
    }
    free(q);
    free(o_head);
    free(o_row);
    free(sc);
    free(s.k);
    free(s.v);
}

static void test_row_equals_heads(void **state)
{
    (void)state;
    /* group = query heads per kv head; n_kv kv heads */
    const att_case_t cases[] = {
        {64, 1, 12, 0, 97, 0},  {64, 1, 4, 0, 1, 0},     {64, 3, 4, 5, 200, 0},  {64, 8, 2, 0, 150, 0},
        {128, 4, 2, 31, 33, 0}, {128, 9, 1, 100, 401, 0}, {24, 3, 2, 0, 77, 0},  {8, 2, 3, 40, 41, 0},
        {64, 2, 3, 0, 150, 50.0f}, {12, 3, 2, 3, 70, 0}, {48, 5, 2, 17, 250, 30.0f}, {64, 1, 5, 63, 64, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_row_case(KV_TYPE_F32, &cases[i]);
        run_row_case(KV_TYPE_F16, &cases[i]);
    }
}

/* attention_head on AVX2 against attention_head_ref (the scalar definition
 * of the vector arithmetic), bit for bit. */
static void test_head_equals_ref(void **state)
{
    (void)state;
    if (!cpu_has_avx2_fma_f16c()) {
        printf("# skipped: no AVX2/FMA/F16C, attention_head runs the portable kernel (not the reference's bits)\n");
        return;
    }
    const att_case_t cases[] = {
        {64, 1, 2, 0, 97, 0}, {64, 1, 1, 0, 1, 0}, {128, 1, 2, 100, 401, 0}, {24, 1, 2, 3, 77, 0},
        {8, 1, 3, 40, 41, 0}, {64, 1, 2, 0, 150, 50.0f}, {48, 1, 2, 17, 250, 30.0f}, {64, 1, 2, 5, 13, 2.0f},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int ty = 0; ty < 2; ty++) {
            const att_case_t *c = &cases[ci];
            const kv_type_t type = ty ? KV_TYPE_F16 : KV_TYPE_F32;
            int32_t bt[N_BLOCKS];
            kv_store_t s = case_store(type, c, 1, 5, 7, bt);
            const int hd = c->hd, n = c->t1 - c->t0;
            const float scale = 1.0f / sqrtf((float)hd);
            float q[128], o_head[128], o_ref[128], *sc = malloc(sizeof(float) * (size_t)n);
            for (int g = 0; g < c->n_kv; g++) {
                for (int i = 0; i < hd; i++)
                    q[i] = frand() * 2.0f;
                attention_head(q, &s, 1, bt, c->t0, c->t1, g * hd, hd, scale, c->softcap, sc, o_head);
                attention_head_ref(q, &s, 1, bt, c->t0, c->t1, g * hd, hd, scale, c->softcap, sc, o_ref);
                for (int i = 0; i < hd; i++)
                    if (memcmp(&o_head[i], &o_ref[i], sizeof(float)) != 0) {
                        print_error("%s hd %d [%d,%d) softcap %g: elt %d: %.9g (AVX2) vs %.9g (reference)\n",
                                    kv_type_name(type), hd, c->t0, c->t1, c->softcap, i, o_head[i], o_ref[i]);
                        fail();
                    }
            }
            free(sc);
            free(s.k);
            free(s.v);
        }
}

typedef struct {
    int hd, group, n_kv, n_rows, t0, t1, step; /* row r attends [t0, t1 + r*step) */
    float softcap;
} tile_case_t;

/* attention_tile on path p over every kv head of case c against one
 * attention_head call per (row, head), and (vector paths) against
 * attention_head_ref, bit for bit; positions outside [t0, max t1) are
 * poisoned. */
static void run_tile_case(kv_type_t type, const tile_case_t *c, att_path_t p)
{
    const int l = 1, hd = c->hd, n_q = c->group, n_head = n_q * c->n_kv;
    int t1[64], tmax = 0;
    assert_true(c->n_rows <= 64);
    for (int r = 0; r < c->n_rows; r++) {
        t1[r] = c->t1 + r * c->step;
        tmax = t1[r] > tmax ? t1[r] : tmax;
    }
    const att_case_t ac = {hd, n_q, c->n_kv, c->t0, tmax, c->softcap};
    int32_t bt[N_BLOCKS];
    kv_store_t s = case_store(type, &ac, l, 11, 5, bt);
    const float scale = 1.0f / sqrtf((float)hd);
    const size_t q_ld = (size_t)n_head * hd, nq = (size_t)c->n_rows * q_ld, ld = (size_t)(tmax - c->t0 + 7);
    float *q = malloc(sizeof(float) * nq), *o_head = malloc(sizeof(float) * nq), *o_tile = malloc(sizeof(float) * nq),
          *o_ref = malloc(sizeof(float) * nq), *sc = malloc(sizeof(float) * (size_t)(n_q > ATT_TILE_MAX_VECS ? n_q : ATT_TILE_MAX_VECS) * ld);
    for (size_t i = 0; i < nq; i++)
        q[i] = frand() * 2.0f;
    memset(o_tile, 0xff, sizeof(float) * nq);
    for (int r = 0; r < c->n_rows; r++)
        for (int h = 0; h < n_head; h++) {
            const size_t o = (size_t)r * q_ld + (size_t)h * hd;
            attention_head(q + o, &s, l, bt, c->t0, t1[r], (h / n_q) * hd, hd, scale, c->softcap, sc, o_head + o);
            if (p != ATT_PATH_PORTABLE)
                attention_head_ref(q + o, &s, l, bt, c->t0, t1[r], (h / n_q) * hd, hd, scale, c->softcap, sc,
                                   o_ref + o);
        }
    assert_int_equal(attention_tile_set_path(p), 0);
    for (int g = 0; g < c->n_kv; g++)
        attention_tile(q + (size_t)g * n_q * hd, q_ld, c->n_rows, n_q, &s, l, bt, c->t0, t1, g * hd, hd, scale,
                       c->softcap, sc, ld, o_tile + (size_t)g * n_q * hd);
    assert_int_equal(attention_tile_set_path(ATT_PATH_AUTO), 0);
    for (size_t i = 0; i < nq; i++) {
        const bool bad_head = memcmp(&o_head[i], &o_tile[i], sizeof(float)) != 0;
        const bool bad_ref = p != ATT_PATH_PORTABLE && memcmp(&o_ref[i], &o_tile[i], sizeof(float)) != 0;
        if (bad_head || bad_ref) {
            print_error("path %d %s hd %d group %d/%d rows %d [%d,%d+%d r) softcap %g: row %zu head %zu elt %zu: "
                        "%.9g (tile) vs %.9g (head) %.9g (reference)\n",
                        (int)p, kv_type_name(type), hd, n_q, c->n_kv, c->n_rows, c->t0, c->t1, c->step, c->softcap,
                        i / q_ld, i % q_ld / (size_t)hd, i % (size_t)hd, o_tile[i], o_head[i],
                        p != ATT_PATH_PORTABLE ? o_ref[i] : NAN);
            fail();
        }
    }
    free(q);
    free(o_head);
    free(o_tile);
    free(o_ref);
    free(sc);
    free(s.k);
    free(s.v);
}

static void test_tile_equals_heads(void **state)
{
    (void)state;
    const tile_case_t cases[] = {
        {64, 8, 2, 4, 0, 100, 1, 0},     {64, 8, 1, 4, 0, 1, 1, 0},       {64, 8, 1, 8, 0, 17, 1, 0},
        {64, 8, 1, 9, 0, 200, 3, 0},     {64, 1, 3, 12, 0, 33, 1, 0},     {64, 3, 2, 5, 7, 40, 0, 0},
        {128, 4, 2, 3, 31, 33, 1, 0},    {128, 9, 1, 2, 100, 401, 5, 0},  {16, 2, 2, 7, 0, 70, 1, 0},
        {48, 5, 2, 3, 17, 250, 1, 30.0f}, {64, 8, 1, 4, 0, 150, 1, 50.0f}, {24, 3, 2, 4, 0, 77, 1, 0},
        {8, 2, 3, 3, 40, 41, 1, 0},      {256, 2, 1, 3, 0, 60, 2, 0},     {64, 16, 1, 5, 3, 90, 1, 0},
        {64, 70, 1, 2, 0, 20, 1, 0},
    };
    const struct {
        att_path_t p;
        const char *name;
    } paths[] = {{ATT_PATH_PORTABLE, "portable"}, {ATT_PATH_AVX2, "AVX2"}, {ATT_PATH_AVX512, "AVX-512"}};
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++) {
        if (attention_tile_set_path(paths[pi].p) != 0) {
            printf("# attention_tile %s path skipped: this CPU lacks it\n", paths[pi].name);
            continue;
        }
        if (paths[pi].p == ATT_PATH_PORTABLE && cpu_has_avx2_fma_f16c())
            printf("# attention_tile portable path: attention_group runs its AVX2 kernels on this CPU\n");
        else
            printf("# attention_tile %s path\n", paths[pi].name);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            run_tile_case(KV_TYPE_F32, &cases[i], paths[pi].p);
            run_tile_case(KV_TYPE_F16, &cases[i], paths[pi].p);
        }
    }
    assert_int_equal(attention_tile_set_path(ATT_PATH_AUTO), 0);
}

/* Wall clock, or with ATT_CLOCK=cpu the process's CPU time (for a 1-thread
 * benchmark on a loaded machine: time-sharing does not count). */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(getenv("ATT_CLOCK") && strcmp(getenv("ATT_CLOCK"), "cpu") == 0 ? CLOCK_PROCESS_CPUTIME_ID
                                                                                 : CLOCK_MONOTONIC,
                  &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ATT_BENCH=1: prints timings, checks nothing. */
static int bench(void)
{
    enum { HD = 64, NKV = 4, ITERS = 100 };
    static float q[8 * HD], out[8 * HD], sc[8 * 512];
    kv_store_t s = store_new(KV_TYPE_F16, NKV, HD);
    int32_t bt[N_BLOCKS];
    for (int j = 0; j < N_BLOCKS; j++)
        bt[j] = (7 + 5 * j) % N_BLOCKS;
    for (int i = 0; i < 8 * HD; i++)
        q[i] = frand();
    printf("%-6s %-9s %14s %14s %8s\n", "group", "positions", "per-head us", "grouped us", "speedup");
    const int groups[] = {1, 2, 3, 4, 8}, lens[] = {64, 512};
    for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int g = groups[gi], T = lens[li];
            double best_h = 1e30, best_g = 1e30;
            for (int rep = 0; rep < 30; rep++) {
                double t0 = now_s();
                for (int it = 0; it < ITERS; it++)
                    for (int k = 0; k < NKV; k++)
                        for (int h = 0; h < g; h++)
                            attention_head(q + h * HD, &s, 0, bt, 0, T, k * HD, HD, 0.125f, 0, sc, out + h * HD);
                double t1 = now_s();
                for (int it = 0; it < ITERS; it++)
                    for (int k = 0; k < NKV; k++)
                        attention_group(q, g, &s, 0, bt, 0, T, k * HD, HD, 0.125f, 0, sc, 512, out);
                double t2 = now_s();
                best_h = t1 - t0 < best_h ? t1 - t0 : best_h;
                best_g = t2 - t1 < best_g ? t2 - t1 : best_g;
            }
            printf("%-6d %-9d %14.2f %14.2f %7.2fx\n", g, T, best_h / ITERS * 1e6, best_g / ITERS * 1e6,
                   best_h / best_g);
        }
    free(s.k);
    free(s.v);
    return 0;
}

/* ATT_BENCH=rows: attention_row against attention_group per kv head over
 * a cold store (see the header). */
static int bench_rows(void)
{
    enum { L = 12, S = 32, HD = 64, BSZ = 32 };
    const int P = getenv("ATT_POS") ? atoi(getenv("ATT_POS")) : 96;
    if (P < 1 || P > 8192)
        return 1;
    const int shapes[2][2] = {{12, 12}, {32, 4}}; /* query heads, kv heads */
    printf("%d layers x %d rows x %d positions, F16 K/V, head_dim %d, %d thread(s), ms per step, best of 5\n", L, S,
           P, HD, omp_get_max_threads());
    printf("%-7s %12s %12s %10s\n", "heads", "row", "group", "speedup");
    for (int k = 0; k < 2; k++) {
        const int NH = shapes[k][0], NKV = shapes[k][1], bps = (P + BSZ - 1) / BSZ, NB = S * bps;
        kv_store_t s = {.n_layer = L, .n_blocks = NB, .block_size = BSZ, .kv_dim = NKV * HD, .type = KV_TYPE_F16};
        const size_t n = (size_t)L * (size_t)NB * BSZ * (size_t)s.kv_dim;
        s.k = malloc(n * 2);
        s.v = malloc(n * 2);
        int32_t *bt = malloc(sizeof(int32_t) * (size_t)NB);
        float *q = malloc(sizeof(float) * S * NH * HD), *out = malloc(sizeof(float) * S * NH * HD);
        const size_t ld = ((size_t)P + 15) / 16 * 16;
        float *sc = malloc(sizeof(float) * (size_t)omp_get_max_threads() * (size_t)NH * ld);
        if (!s.k || !s.v || !bt || !q || !out || !sc)
            return 1;
        for (size_t i = 0; i < n; i++) {
            ((uint16_t *)s.k)[i] = quant_fp32_to_fp16(frand());
            ((uint16_t *)s.v)[i] = quant_fp32_to_fp16(frand());
        }
        for (int i = 0; i < NB; i++)
            bt[i] = (int32_t)(((int64_t)i * 7919) % NB); /* scattered blocks */
        for (int i = 0; i < S * NH * HD; i++)
            q[i] = frand();
        double best[2] = {1e30, 1e30};
        for (int rep = 0; rep < 5; rep++)
            for (int mode = 0; mode < 2; mode++) {
                double t0 = now_s();
                for (int l = 0; l < L; l++) {
#pragma omp parallel for schedule(dynamic, 1)
                    for (int r = 0; r < S; r++) {
                        float *scr = sc + (size_t)omp_get_thread_num() * (size_t)NH * ld;
                        float *qr = q + (size_t)r * NH * HD, *o = out + (size_t)r * NH * HD;
                        (mode == 0 ? attention_row : attention_row_by_group)(
                            qr, NH, NKV, &s, l, bt + (size_t)r * bps, 0, P, HD, 0.125f, 0, scr, ld, o);
                    }
                }
                double dt = now_s() - t0;
                best[mode] = dt < best[mode] ? dt : best[mode];
            }
        printf("%2d/%-4d %12.2f %12.2f %9.2fx\n", NH, NKV, best[0] * 1e3, best[1] * 1e3, best[1] / best[0]);
        free(s.k);
        free(s.v);
        free(bt);
        free(q);
        free(out);
        free(sc);
    }
    return 0;
}

/* ATT_BENCH=prefill: one layer's causal attention of a prefill of ATT_POS
 * (default 512) rows of one sequence, 32 query heads over 4 kv heads of 64,
 * F16 K/V: attention_row per row (the path before attention_tile) against
 * attention_tile in slots of 4 rows per kv head (forward.c's tasks), rows
 * in OpenMP loops (OMP_NUM_THREADS); ms per layer, best of 7. */
static int bench_prefill(void)
{
    enum { NH = 32, NKV = 4, HD = 64, BSZ = 32, TRMAX = 8 };
    const int TR = getenv("ATT_TR") ? atoi(getenv("ATT_TR")) : 4;
    const int P = getenv("ATT_POS") ? atoi(getenv("ATT_POS")) : 512;
    if (P < 1 || P > 16384)
        return 1;
    const int NB = (P + BSZ - 1) / BSZ, G = NH / NKV;
    kv_store_t s = {.n_layer = 1, .n_blocks = NB, .block_size = BSZ, .kv_dim = NKV * HD, .type = KV_TYPE_F16};
    const size_t n = (size_t)NB * BSZ * (size_t)s.kv_dim, ld = ((size_t)P + 15) / 16 * 16;
    s.k = malloc(n * 2);
    s.v = malloc(n * 2);
    int32_t *bt = malloc(sizeof(int32_t) * (size_t)NB);
    float *q = malloc(sizeof(float) * (size_t)P * NH * HD), *out = malloc(sizeof(float) * (size_t)P * NH * HD);
    float *sc = malloc(sizeof(float) * (size_t)omp_get_max_threads() * 2 * NH * ld);
    if (!s.k || !s.v || !bt || !q || !out || !sc)
        return 1;
    for (size_t i = 0; i < n; i++) {
        ((uint16_t *)s.k)[i] = quant_fp32_to_fp16(frand());
        ((uint16_t *)s.v)[i] = quant_fp32_to_fp16(frand());
    }
    for (int i = 0; i < NB; i++)
        bt[i] = i;
    for (size_t i = 0; i < (size_t)P * NH * HD; i++)
        q[i] = frand();
    printf("prefill of %d rows, %d/%d heads of %d, F16 K/V, %d thread(s), tile path %d, ms per layer, best of 7\n",
           P, NH, NKV, HD, omp_get_max_threads(), (int)attention_tile_path());
    double best[2] = {1e30, 1e30};
    const int n_slots = (P + TR - 1) / TR;
    for (int rep = 0; rep < 7; rep++)
        for (int mode = 0; mode < 2; mode++) {
            double t0 = now_s();
            if (mode == 0) {
#pragma omp parallel for schedule(dynamic, 1)
                for (int r = 0; r < P; r++)
                    attention_row(q + (size_t)r * NH * HD, NH, NKV, &s, 0, bt, 0, r + 1, HD, 0.125f, 0,
                                  sc + (size_t)omp_get_thread_num() * NH * ld, ld, out + (size_t)r * NH * HD);
            } else {
#pragma omp parallel for schedule(dynamic, 1)
                for (int k = 0; k < n_slots * NKV; k++) {
                    const int slot = n_slots - 1 - k / NKV, g = k % NKV, r0 = slot * TR;
                    const int nr = P - r0 < TR ? P - r0 : TR;
                    int t1[TRMAX];
                    for (int r = 0; r < nr; r++)
                        t1[r] = r0 + r + 1;
                    const size_t qo = (size_t)r0 * NH * HD + (size_t)g * G * HD;
                    attention_tile(q + qo, NH * HD, nr, G, &s, 0, bt, 0, t1, g * HD, HD, 0.125f, 0,
                                   sc + (size_t)omp_get_thread_num() * 2 * NH * ld, ld, out + qo);
                }
            }
            double dt = now_s() - t0;
            best[mode] = dt < best[mode] ? dt : best[mode];
        }
    printf("%12s %12s %10s\n", "row", "tile", "speedup");
    printf("%12.2f %12.2f %9.2fx\n", best[0] * 1e3, best[1] * 1e3, best[0] / best[1]);
    free(s.k);
    free(s.v);
    free(bt);
    free(q);
    free(out);
    free(sc);
    return 0;
}

int main(void)
{
    if (getenv("ATT_BENCH"))
        return strcmp(getenv("ATT_BENCH"), "rows") == 0      ? bench_rows()
               : strcmp(getenv("ATT_BENCH"), "prefill") == 0 ? bench_prefill()
                                                               : bench();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_equals_heads),
        cmocka_unit_test(test_row_equals_heads),
        cmocka_unit_test(test_head_equals_ref),
        cmocka_unit_test(test_tile_equals_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
