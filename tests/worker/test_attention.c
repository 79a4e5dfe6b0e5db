/* Unit tests for worker/kernels/attention.{h,c}: attention_head and the
 * grouped-query attention_group over a paged KV store.
 *
 * Claims checked:
 *   - bit for bit (memcmp of the outputs): attention_group over n_q query
 *     heads equals n_q calls of attention_head, for group sizes 1..9 (so
 *     the AVX2 path's sub-groups of 4 and their remainders are crossed),
 *     F32 and F16 K/V, head_dim 8, 24, 64 and 128 (whole and half 16-float
 *     V passes) and 12 (the portable path), position ranges that start and
 *     end inside blocks (sliding windows), one position, and soft-capping;
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
 * ATT_BENCH=1 build/tests/worker/test_attention runs a benchmark instead:
 * one thread, F16 K/V, head_dim 64, 4 kv heads, group sizes 1-8 and 64-512
 * positions, time of one row's attention over a layer through n_q calls of
 * attention_head against attention_group (best of 30 interleaved reps).
 */
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
#include "worker/model/kv_store.h"

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

static void run_case(kv_type_t type, const att_case_t *c)
{
    kv_store_t s = store_new(type, c->n_kv, c->hd);
    const int l = 1, n_bt = (c->t1 + BS - 1) / BS;
    int32_t bt[N_BLOCKS];
    /* a scrambled block table: position p lives in block (7 + 5 p/BS) % N */
    for (int j = 0; j < n_bt; j++)
        bt[j] = (7 + 5 * j) % N_BLOCKS;
    poison_outside(&s, l, bt, n_bt, c->t0, c->t1);

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

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
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

int main(void)
{
    if (getenv("ATT_BENCH"))
        return bench();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_group_equals_heads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
