/* Tests for worker/kernels/lowrank: LoRA pairs' updates of some batch rows.
 *
 * lowrank_apply (one region: 16-lane float dot products for X · Aᵀ, chains
 * of fused multiply-adds over Bᵀ) against lowrank_add_ref (scalar, double
 * accumulation) on random A, B, X, Y:
 * - one pair, ranks 1, 8, 64, 3 × 16 + 5 (rank blocks with a tail), row
 *   counts 1, 5, 70 and scattered rows, in = 100 (a tail after the 8-lane
 *   part), out = 83 (phase 2's 16-wide blocks and a scalar tail; the mix
 *   below has 8-wide blocks);
 * - F16 factors: bit-equal to F32 factors holding the same values;
 * - int8 pairs (lowrank_prepare(lr, 1)) the same way against the reference
 *   of their int8 values, and against the float factors within the
 *   rounding's bound (test_int8_bound);
 * - the scalar, AVX2 and AVX-512 kernels bit-equal (test_isa_bits; a path
 *   the CPU lacks is skipped with a message);
 * - a step's mix: three groups of rows (sets of one or two pairs of
 *   different ranks, scales) over two matrices with their own x and y, in
 *   one call, against the reference applied pair by pair in set order; and
 *   the same jobs through lowrank_run_t / lowrank_run_cols in a region of
 *   the test's own (each matrix's jobs apart, column blocks in reverse
 *   order over 3 threads), bit-equal to lowrank_apply.
 * Tolerance (float accumulation over in + r <= 180 products of unit-size
 * terms, ~1e-6 relative each): max |y - y_ref| <= 2e-5 * max(1, max |y_ref|).
 * Rows not listed must be untouched (bit for bit); a row's result must not
 * depend on which other rows, groups or threads run with it (bit for bit:
 * each row alone, and 1 thread against 3).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/splitmix.h"
#include "common/text/ggml_type.h"
#include "worker/kernels/lowrank.h"
#include "worker/kernels/quant.h"

static void fill(float *x, size_t n, uint64_t seed, float sd)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(((double)(splitmix64_next(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0) * sd);
}

/* A prepared pair (lowrank_prepare, int8 or not; the caller releases it). */
static lowrank_t make_pair_p(int r, int in, int out, float **A, float **B, uint64_t seed, int int8)
{
    *A = malloc((size_t)r * in * sizeof(float));
    *B = malloc((size_t)out * r * sizeof(float));
    fill(*A, (size_t)r * in, seed, 1.0f / sqrtf((float)in));
    fill(*B, (size_t)out * r, seed ^ 77, 1.0f / sqrtf((float)r));
    lowrank_t lr = {.rank = r, .factor = 1,
                    .a = {.type = GGML_TYPE_F32, .rows = r, .cols = in, .row_bytes = (size_t)in * 4,
                          .data = (const uint8_t *)*A},
                    .b = {.type = GGML_TYPE_F32, .rows = out, .cols = r, .row_bytes = (size_t)r * 4,
                          .data = (const uint8_t *)*B}};
    assert_int_equal(lowrank_prepare(&lr, int8), 0);
    return lr;
}

static lowrank_t make_pair(int r, int in, int out, float **A, float **B, uint64_t seed)
{
    return make_pair_p(r, in, out, A, B, seed, 0);
}

static void close_to_ref(const float *y, const float *yr, size_t n, const char *what)
{
    double worst = 0, scale = 1;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)yr[i]));
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)y[i] - (double)yr[i]));
    if (worst > 2e-5 * scale)
        fail_msg("%s: max |y - ref| = %g > %g", what, worst, 2e-5 * scale);
}

/* One job: rows of x (ldx) into y (ldy), the given pairs and scales. */
static int apply1(const lowrank_t *const *pairs, const float *s, int n_pairs, const float *x, int64_t ldx,
                  const int32_t *rows, int n, float *y, int64_t ldy, int n_threads)
{
    lowrank_job_t job = {.x = x, .ldx = ldx, .y = y, .ldy = ldy, .rows = rows, .n = n, .pairs = pairs, .s = s,
                         .n_pairs = n_pairs};
    float *t = malloc((lowrank_scratch_floats(&job, 1) + 1) * sizeof(float));
    int rc = lowrank_apply(&job, 1, t, n_threads);
    free(t);
    return rc;
}

static void against_ref(int int8)
{
    enum { IN = 100, OUT = 83, R = 80 }; /* OUT: 16-wide blocks of phase 2, then a scalar tail */
    const int ranks[] = {1, 8, 64, 53}, counts[] = {1, 5, 70};
    float *x = malloc((size_t)R * IN * sizeof(float)), *y0 = malloc((size_t)R * OUT * sizeof(float));
    float *y = malloc((size_t)R * OUT * sizeof(float)), *yr = malloc((size_t)R * OUT * sizeof(float));
    fill(x, (size_t)R * IN, 1, 1.0f);
    fill(y0, (size_t)R * OUT, 2, 1.0f);
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        float *A, *B;
        lowrank_t lr = make_pair_p(ranks[ri], IN, OUT, &A, &B, 10 + ri, int8);
        const lowrank_t *pp = &lr;
        const float s = 0.75f;
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            const int n = counts[ci];
            int32_t rows[R];
            for (int j = 0; j < n; j++) /* scattered, descending; distinct (step 7 mod 80, gcd 1) */
                rows[j] = (int32_t)((R - 1 - (int64_t)j * 7 % R + R) % R);
            memcpy(y, y0, (size_t)R * OUT * sizeof(float));
            memcpy(yr, y0, (size_t)R * OUT * sizeof(float));
            assert_int_equal(apply1(&pp, &s, 1, x, IN, rows, n, y, OUT, 2), 0);
            lowrank_add_ref(&lr, s, x, IN, rows, n, yr, OUT);
            char what[64];
            snprintf(what, sizeof what, "%s rank %d, %d rows", int8 ? "int8" : "float", ranks[ri], n);
            close_to_ref(y, yr, (size_t)R * OUT, what);
            for (int r = 0; r < R; r++) { /* untouched rows stay bit-equal */
                int listed = 0;
                for (int j = 0; j < n; j++)
                    listed |= rows[j] == r;
                if (!listed)
                    assert_memory_equal(y + (size_t)r * OUT, y0 + (size_t)r * OUT, (size_t)OUT * sizeof(float));
            }
            for (int j = 0; j < n; j++) { /* each row alone gives the same bits */
                float one[OUT];
                memcpy(one, y0 + (size_t)rows[j] * OUT, sizeof one);
                int32_t zero = 0;
                assert_int_equal(apply1(&pp, &s, 1, x + (size_t)rows[j] * IN, IN, &zero, 1, one, OUT, 1), 0);
                assert_memory_equal(one, y + (size_t)rows[j] * OUT, sizeof one);
            }
        }
        lowrank_release(&lr);
        free(A);
        free(B);
    }
    free(x);
    free(y0);
    free(y);
    free(yr);
}

/* float pairs (state 0), or int8 pairs (1) against the reference of their
 * own int8 values (the kernel's float arithmetic only: the same tolerance) */
static int k_float = 0, k_int8 = 1;

static void test_against_ref(void **state)
{
    against_ref(*(const int *)*state);
}

/* A step's mix: groups {0,3,6,..} set {a8 @ 0.5, a64 @ -1.25}, {1,4,..}
 * set {a3 @ 2}, {2,5,..} none; matrices P (in 40 -> out 72) and Q
 * (in 40 -> out 24) on the same x, each group's pairs of both in one call. */
static void test_mix(void **state)
{
    (void)state;
    enum { IN = 40, OP = 72, OQ = 24, R = 30 };
    float *x = malloc((size_t)R * IN * 4), *p0 = malloc((size_t)R * OP * 4), *q0 = malloc((size_t)R * OQ * 4);
    fill(x, (size_t)R * IN, 5, 1.0f);
    fill(p0, (size_t)R * OP, 6, 1.0f);
    fill(q0, (size_t)R * OQ, 7, 1.0f);
    float *mem[12];
    lowrank_t p8 = make_pair(8, IN, OP, &mem[0], &mem[1], 21), p64 = make_pair(64, IN, OP, &mem[2], &mem[3], 22);
    lowrank_t p3 = make_pair(3, IN, OP, &mem[4], &mem[5], 23);
    lowrank_t q8 = make_pair(8, IN, OQ, &mem[6], &mem[7], 24), q64 = make_pair(64, IN, OQ, &mem[8], &mem[9], 25);
    lowrank_t q3 = make_pair(3, IN, OQ, &mem[10], &mem[11], 26);
    int32_t g0[R], g1[R];
    int n0 = 0, n1 = 0;
    for (int r = 0; r < R; r++) {
        if (r % 3 == 0)
            g0[n0++] = r;
        else if (r % 3 == 1)
            g1[n1++] = r;
    }
    const lowrank_t *set0p[2] = {&p8, &p64}, *set0q[2] = {&q8, &q64}, *set1p[1] = {&p3}, *set1q[1] = {&q3};
    const float s0[2] = {0.5f, -1.25f}, s1[1] = {2.0f};
    float *py[3] = {malloc((size_t)R * OP * 4), malloc((size_t)R * OP * 4), malloc((size_t)R * OP * 4)};
    float *qy[3] = {malloc((size_t)R * OQ * 4), malloc((size_t)R * OQ * 4), malloc((size_t)R * OQ * 4)};
    for (int th = 0; th < 3; th++) {
        memcpy(py[th], p0, (size_t)R * OP * 4);
        memcpy(qy[th], q0, (size_t)R * OQ * 4);
        lowrank_job_t jobs[4] = {
            {.x = x, .ldx = IN, .y = py[th], .ldy = OP, .rows = g0, .n = n0, .pairs = set0p, .s = s0, .n_pairs = 2},
            {.x = x, .ldx = IN, .y = py[th], .ldy = OP, .rows = g1, .n = n1, .pairs = set1p, .s = s1, .n_pairs = 1},
            {.x = x, .ldx = IN, .y = qy[th], .ldy = OQ, .rows = g0, .n = n0, .pairs = set0q, .s = s0, .n_pairs = 2},
            {.x = x, .ldx = IN, .y = qy[th], .ldy = OQ, .rows = g1, .n = n1, .pairs = set1q, .s = s1, .n_pairs = 1},
        };
        float *t = malloc(lowrank_scratch_floats(jobs, 4) * sizeof(float));
        assert_int_equal(lowrank_scratch_floats(jobs, 4), (size_t)(n0 * 72 + n1 * 3) * 2);
        if (th < 2) {
            assert_int_equal(lowrank_apply(jobs, 4, t, th == 0 ? 1 : 3), 0);
        } else { /* the two phases in a region of our own: P's jobs, then Q's, blocks of 64 outputs */
            assert_int_equal(lowrank_check(jobs, 4), 0);
            lowrank_phase_t ph;
            lowrank_phase_init(&ph, jobs, 4);
            const size_t tq = lowrank_scratch_floats(jobs, 2);
#pragma omp parallel num_threads(3)
            {
                lowrank_run_t(jobs, 4, t, &ph);
                lowrank_wait_t(&ph);
#pragma omp for schedule(dynamic, 1)
                for (int blk = 2; blk >= 0; blk--) { /* P: blocks 1, 0; Q: block 0 */
                    if (blk == 2)
                        lowrank_run_cols(jobs + 2, 2, t + tq, 0, 64);
                    else
                        lowrank_run_cols(jobs, 2, t, blk * 64, blk * 64 + 64);
                }
            }
        }
        free(t);
    }
    /* 1 thread and 3, and the phases in the caller's region, give the same bits */
    assert_memory_equal(py[0], py[1], (size_t)R * OP * 4);
    assert_memory_equal(qy[0], qy[1], (size_t)R * OQ * 4);
    assert_memory_equal(py[0], py[2], (size_t)R * OP * 4);
    assert_memory_equal(qy[0], qy[2], (size_t)R * OQ * 4);
    /* against the reference, pair by pair in set order */
    lowrank_add_ref(&p8, s0[0], x, IN, g0, n0, p0, OP);
    lowrank_add_ref(&p64, s0[1], x, IN, g0, n0, p0, OP);
    lowrank_add_ref(&p3, s1[0], x, IN, g1, n1, p0, OP);
    lowrank_add_ref(&q8, s0[0], x, IN, g0, n0, q0, OQ);
    lowrank_add_ref(&q64, s0[1], x, IN, g0, n0, q0, OQ);
    lowrank_add_ref(&q3, s1[0], x, IN, g1, n1, q0, OQ);
    close_to_ref(py[0], p0, (size_t)R * OP, "mix, P");
    close_to_ref(qy[0], q0, (size_t)R * OQ, "mix, Q");
    /* rows without a set (r % 3 == 2) are untouched: p0 was only changed on g0, g1 */
    for (int r = 2; r < R; r += 3)
        assert_memory_equal(py[0] + (size_t)r * OP, p0 + (size_t)r * OP, (size_t)OP * 4);
    /* each row alone, with its set, gives the bits of the mixed call */
    float *pst = malloc((size_t)R * OP * 4);
    fill(pst, (size_t)R * OP, 6, 1.0f); /* p0 as it was before the reference changed it */
    for (int r = 0; r < R; r++) {
        if (r % 3 == 2)
            continue;
        float one[OP];
        int32_t zero = 0;
        memcpy(one, pst + (size_t)r * OP, sizeof one);
        if (r % 3 == 0)
            assert_int_equal(apply1(set0p, s0, 2, x + (size_t)r * IN, IN, &zero, 1, one, OP, 2), 0);
        else
            assert_int_equal(apply1(set1p, s1, 1, x + (size_t)r * IN, IN, &zero, 1, one, OP, 2), 0);
        assert_memory_equal(one, py[0] + (size_t)r * OP, sizeof one);
    }
    free(pst);
    lowrank_t *all[6] = {&p8, &p64, &p3, &q8, &q64, &q3};
    for (int i = 0; i < 6; i++)
        lowrank_release(all[i]);
    for (int i = 0; i < 12; i++)
        free(mem[i]);
    free(x);
    free(p0);
    free(q0);
    for (int i = 0; i < 3; i++) {
        free(py[i]);
        free(qy[i]);
    }
}

/* F16 factors (as llama.cpp's converter writes them) against the F32
 * factors holding the same values: the same bits (the widening is exact),
 * and the reference reading the halves agrees within the tolerance. */
static void test_f16(void **state)
{
    (void)state;
    enum { IN = 100, OUT = 72, R = 9 };
    const int ranks[] = {8, 64, 13};
    float *x = malloc((size_t)R * IN * 4), *y0 = malloc((size_t)R * OUT * 4);
    float *y16 = malloc((size_t)R * OUT * 4), *y32 = malloc((size_t)R * OUT * 4), *yr = malloc((size_t)R * OUT * 4);
    fill(x, (size_t)R * IN, 8, 1.0f);
    fill(y0, (size_t)R * OUT, 9, 1.0f);
    int32_t rows[R];
    for (int j = 0; j < R; j++)
        rows[j] = R - 1 - j;
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        const int r = ranks[ri];
        float *A, *B;
        lowrank_t p32 = make_pair(r, IN, OUT, &A, &B, 40 + ri);
        uint16_t *A16 = malloc((size_t)r * IN * 2), *B16 = malloc((size_t)OUT * r * 2);
        for (size_t i = 0; i < (size_t)r * IN; i++) { /* round to half, and keep the widened value */
            A16[i] = quant_fp32_to_fp16(A[i]);
            A[i] = quant_fp16_to_fp32(A16[i]);
        }
        for (size_t i = 0; i < (size_t)OUT * r; i++) {
            B16[i] = quant_fp32_to_fp16(B[i]);
            B[i] = quant_fp16_to_fp32(B16[i]);
        }
        assert_int_equal(lowrank_prepare(&p32, 0), 0); /* bt of the rounded B */
        lowrank_t p16 = p32;
        p16.a = (matmul_weight_t){.type = GGML_TYPE_F16, .rows = r, .cols = IN, .row_bytes = (size_t)IN * 2,
                                  .data = (const uint8_t *)A16};
        p16.b = (matmul_weight_t){.type = GGML_TYPE_F16, .rows = OUT, .cols = r, .row_bytes = (size_t)r * 2,
                                  .data = (const uint8_t *)B16};
        p16.bt = (matmul_weight_t){0};
        p16.own = NULL; /* p32 owns its copies */
        assert_int_equal(lowrank_prepare(&p16, 0), 0);
        const lowrank_t *pp16 = &p16, *pp32 = &p32;
        const float s = -0.6f;
        memcpy(y16, y0, (size_t)R * OUT * 4);
        memcpy(y32, y0, (size_t)R * OUT * 4);
        memcpy(yr, y0, (size_t)R * OUT * 4);
        assert_int_equal(apply1(&pp16, &s, 1, x, IN, rows, R, y16, OUT, 2), 0);
        assert_int_equal(apply1(&pp32, &s, 1, x, IN, rows, R, y32, OUT, 2), 0);
        assert_memory_equal(y16, y32, (size_t)R * OUT * 4);
        lowrank_add_ref(&p16, s, x, IN, rows, R, yr, OUT);
        close_to_ref(y16, yr, (size_t)R * OUT, "F16 factors");
        lowrank_release(&p16);
        lowrank_release(&p32);
        free(A);
        free(B);
        free(A16);
        free(B16);
    }
    free(x);
    free(y0);
    free(y16);
    free(y32);
    free(yr);
}

/* lowrank_prepare_in: copies in the caller's block (one per adapter, on
 * huge pages in lora.c) give the bits of lowrank_prepare's, float and int8,
 * with a block of exactly lowrank_copy_bytes (ASan sees an overrun), and
 * lowrank_release frees none of it (ASan sees a double free). */
static void test_prepare_in(void **state)
{
    (void)state;
    enum { IN = 100, OUT = 83, R = 5 };
    float *x = malloc((size_t)R * IN * 4), *y0 = malloc((size_t)R * OUT * 4);
    float *ya = malloc((size_t)R * OUT * 4), *yb = malloc((size_t)R * OUT * 4);
    fill(x, (size_t)R * IN, 31, 1.0f);
    fill(y0, (size_t)R * OUT, 32, 1.0f);
    int32_t rows[R] = {4, 0, 2, 1, 3};
    for (int int8 = 0; int8 < 2; int8++)
        for (int r = 1; r <= 64; r += 21) {
            float *A, *B;
            lowrank_t own = make_pair_p(r, IN, OUT, &A, &B, 50 + (uint64_t)r, int8);
            lowrank_t in = {.rank = own.rank, .factor = own.factor, .a = own.a, .b = own.b};
            const size_t nb = lowrank_copy_bytes(r, IN, OUT, GGML_TYPE_F32, int8);
            assert_true(nb > 0 && nb % 64 == 0);
            void *blk = aligned_alloc(64, nb);
            assert_int_equal(lowrank_prepare_in(&in, int8, blk), 0);
            assert_null(in.own);
            /* every copy inside the block: float Bᵀ at its start; int8 A, Bᵀ and scales after it */
            const uint8_t *b0 = blk, *b1 = b0 + nb;
            assert_ptr_equal(int8 ? in.a8.data : in.bt.data, b0);
            assert_true(in.bt.data >= b0 && in.bt.data + (size_t)r * OUT * (int8 ? 1 : 4) <= b1);
            if (int8)
                assert_true((const uint8_t *)in.a_d > in.bt.data && (const uint8_t *)(in.bt_d + OUT) <= b1);
            const lowrank_t *pa = &own, *pb = &in;
            const float s = 0.75f;
            memcpy(ya, y0, (size_t)R * OUT * 4);
            memcpy(yb, y0, (size_t)R * OUT * 4);
            assert_int_equal(apply1(&pa, &s, 1, x, IN, rows, R, ya, OUT, 2), 0);
            assert_int_equal(apply1(&pb, &s, 1, x, IN, rows, R, yb, OUT, 2), 0);
            assert_memory_equal(ya, yb, (size_t)R * OUT * 4);
            lowrank_release(&in);
            assert_null(in.bt.data);
            lowrank_release(&own);
            free(blk);
            free(A);
            free(B);
        }
    assert_int_equal(lowrank_copy_bytes(0, IN, OUT, GGML_TYPE_F32, 0), 0);
    free(x);
    free(y0);
    free(ya);
    free(yb);
}

static void test_bad_args(void **state)
{
    (void)state;
    float *A, *B, x[8] = {0}, y[8] = {0}, t[64];
    lowrank_t lr = make_pair(2, 8, 8, &A, &B, 3);
    const lowrank_t *pp = &lr;
    const float s = 1;
    int32_t row = 0;
    lowrank_job_t job = {.x = x, .ldx = 8, .y = y, .ldy = 8, .rows = &row, .n = -1, .pairs = &pp, .s = &s,
                         .n_pairs = 1};
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    job.n = 1;
    lowrank_t bad = lr;
    const lowrank_t *pb = &bad;
    job.pairs = &pb;
    bad.a.type = GGML_TYPE_BF16; /* only F32 and F16 factors */
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    bad = lr;
    bad.a.type = GGML_TYPE_F16; /* F16 with F32's row bytes */
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    bad = lr;
    bad.b.cols = 3; /* B's width is not A's rank */
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    bad = lr;
    bad.bt.data = NULL; /* not prepared */
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    bad = lr;
    bad.bt.type = GGML_TYPE_F16; /* bt not in B's type */
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    bad = lr;
    bad.a.type = GGML_TYPE_BF16;
    assert_int_equal(lowrank_prepare(&bad, 0), -1); /* refused, and bad unchanged */
    assert_ptr_equal(bad.bt.data, lr.bt.data);
    bad = lr;
    job.ldy = 4; /* y narrower than B's out */
    assert_int_equal(lowrank_apply(&job, 1, t, 1), -1);
    for (int i = 0; i < 8; i++)
        assert_true(y[i] == 0.0f); /* nothing written on a refusal */
    job.ldy = 8;
    job.n = 0;
    assert_int_equal(lowrank_apply(&job, 1, t, 1), 0);
    assert_int_equal(lowrank_apply(NULL, 0, t, 1), 0);
    lowrank_release(&lr);
    lowrank_release(NULL);
    free(A);
    free(B);
}

/* The scalar, AVX2 and AVX-512 kernels give the same bits for F32, F16 and
 * int8 pairs (ranks with rank-block and chain tails, in and out with
 * tails; out = 147: AVX-512's 64- and 16-wide blocks and a tail). A path
 * the CPU lacks is skipped with a message. */
static void test_isa_bits(void **state)
{
    (void)state;
    const qgemm_isa_t isas[] = {QGEMM_ISA_AVX2, QGEMM_ISA_AVX512VNNI};
    enum { IN = 100, OUT = 147, R = 70 };
    const int ranks[] = {8, 64, 53};
    float *x = malloc((size_t)R * IN * sizeof(float)), *y0 = malloc((size_t)R * OUT * sizeof(float));
    float *ys = malloc((size_t)R * OUT * sizeof(float)), *yv = malloc((size_t)R * OUT * sizeof(float));
    uint16_t *A16 = malloc((size_t)64 * IN * 2), *B16 = malloc((size_t)OUT * 64 * 2);
    fill(x, (size_t)R * IN, 5, 1.0f);
    fill(y0, (size_t)R * OUT, 6, 1.0f);
    int32_t rows[R];
    for (int j = 0; j < R; j++)
        rows[j] = (int32_t)((j * 3) % R); /* gcd(3, 70) = 1: a permutation */
    for (size_t ii = 0; ii < sizeof isas / sizeof isas[0]; ii++) {
        if (lowrank_set_isa(isas[ii]) != 0) {
            print_message("skipped %s: this CPU lacks it\n", qgemm_isa_name(isas[ii]));
            continue;
        }
        for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++)
            for (int kind = 0; kind < 3; kind++) { /* F32, F16, int8 */
                const int r = ranks[ri];
                float *A, *B;
                lowrank_t lr = make_pair_p(r, IN, OUT, &A, &B, 60 + ri, kind == 2);
                if (kind == 1) {
                    for (size_t i = 0; i < (size_t)r * IN; i++)
                        A16[i] = quant_fp32_to_fp16(A[i]);
                    for (size_t i = 0; i < (size_t)OUT * r; i++)
                        B16[i] = quant_fp32_to_fp16(B[i]);
                    lowrank_release(&lr);
                    lr.a = (matmul_weight_t){.type = GGML_TYPE_F16, .rows = r, .cols = IN,
                                             .row_bytes = (size_t)IN * 2, .data = (const uint8_t *)A16};
                    lr.b = (matmul_weight_t){.type = GGML_TYPE_F16, .rows = OUT, .cols = r,
                                             .row_bytes = (size_t)r * 2, .data = (const uint8_t *)B16};
                    assert_int_equal(lowrank_prepare(&lr, 0), 0);
                }
                const lowrank_t *pp = &lr;
                const float s = 1.25f;
                memcpy(ys, y0, (size_t)R * OUT * 4);
                memcpy(yv, y0, (size_t)R * OUT * 4);
                assert_int_equal(lowrank_set_isa(QGEMM_ISA_SCALAR), 0);
                assert_int_equal(apply1(&pp, &s, 1, x, IN, rows, R, ys, OUT, 2), 0);
                assert_int_equal(lowrank_set_isa(isas[ii]), 0);
                assert_int_equal(lowrank_isa(), isas[ii]);
                assert_int_equal(apply1(&pp, &s, 1, x, IN, rows, R, yv, OUT, 2), 0);
                if (memcmp(ys, yv, (size_t)R * OUT * 4) != 0)
                    fail_msg("%s, rank %d, %s: differs from the scalar kernels", qgemm_isa_name(isas[ii]), r,
                             kind == 0 ? "F32" : kind == 1 ? "F16" : "int8");
                lowrank_release(&lr);
                free(A);
                free(B);
            }
    }
    lowrank_set_isa(QGEMM_ISA_AUTO);
    free(x);
    free(y0);
    free(ys);
    free(yv);
    free(A16);
    free(B16);
}

/* An int8 pair against the float factors it was rounded from, within the
 * rounding's bound: with |A - a_d·A8| <= a_d / 2 per element of row k and
 * |B - bt_d·B8| <= bt_d[o] / 2 in row o, the update's exact error at row
 * x, output o is at most
 *     |s| · Σ_k ( e_k · |B[o][k]| + (|t_k| + e_k) · bt_d[o] / 2 ),
 *     e_k = a_d[k] / 2 · Σ_i |x_i|,   t = x · Aᵀ
 * plus the float arithmetic's 2e-5 · max(1, max |y|). Prints the largest
 * error relative to the update's largest magnitude (what int8 costs). */
static void test_int8_bound(void **state)
{
    (void)state;
    enum { IN = 768, OUT = 200, R = 5 };
    const int ranks[] = {8, 64};
    float *x = malloc((size_t)R * IN * sizeof(float)), *y0 = calloc((size_t)R * OUT, sizeof(float));
    float *yq = malloc((size_t)R * OUT * sizeof(float)), *yf = malloc((size_t)R * OUT * sizeof(float));
    fill(x, (size_t)R * IN, 7, 1.0f);
    int32_t rows[R];
    for (int j = 0; j < R; j++)
        rows[j] = j;
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        const int r = ranks[ri];
        float *A, *B, *A2, *B2;
        lowrank_t lq = make_pair_p(r, IN, OUT, &A, &B, 80 + ri, 1), lf = make_pair_p(r, IN, OUT, &A2, &B2, 80 + ri, 0);
        const lowrank_t *pp = &lq;
        const float s = 2.0f;
        memcpy(yq, y0, (size_t)R * OUT * 4);
        memcpy(yf, y0, (size_t)R * OUT * 4);
        assert_int_equal(apply1(&pp, &s, 1, x, IN, rows, R, yq, OUT, 2), 0);
        lowrank_add_ref(&lf, s, x, IN, rows, R, yf, OUT);
        double worst = 0, big = 0;
        for (int j = 0; j < R; j++) {
            const float *xr = x + (size_t)j * IN;
            double sx = 0, e[64], t[64];
            for (int i = 0; i < IN; i++)
                sx += fabs((double)xr[i]);
            for (int k = 0; k < r; k++) {
                e[k] = (double)lq.a_d[k] / 2 * sx;
                t[k] = 0;
                for (int i = 0; i < IN; i++)
                    t[k] += (double)xr[i] * (double)A[(size_t)k * IN + i];
            }
            for (int o = 0; o < OUT; o++) {
                double bound = 0;
                for (int k = 0; k < r; k++)
                    bound += e[k] * fabs((double)B[(size_t)o * r + k]) + (fabs(t[k]) + e[k]) * lq.bt_d[o] / 2;
                const double got = yq[(size_t)j * OUT + o], want = yf[(size_t)j * OUT + o];
                const double tol = fabs(s) * bound + 2e-5 * fmax(1, fabs(want));
                if (!(fabs(got - want) <= tol))
                    fail_msg("rank %d row %d out %d: |int8 - float| = %g > bound %g", r, j, o, fabs(got - want), tol);
                worst = fmax(worst, fabs(got - want));
                big = fmax(big, fabs(want));
            }
        }
        print_message("int8 rank %d: max |int8 - float| = %.3g, %.3g of the update's max |.| %.3g\n", r, worst,
                      worst / big, big);
        lowrank_release(&lq);
        lowrank_release(&lf);
        free(A);
        free(B);
        free(A2);
        free(B2);
    }
    free(x);
    free(y0);
    free(yq);
    free(yf);
}

/* LOWRANK_BENCH=1 (else skipped): one decode step's updates in the shape of
 * tests/bench/lora_bench.sh — the 110M model's 12 layers (dim 768, FFN
 * 2048), 8 F16 adapters of ranks 8 and 64 alternating on every projection,
 * 28 rows (3 or 4 per adapter), four lowrank_apply calls a layer as the
 * forward pass makes them (q/k/v, o, gate/up, down), every factor distinct
 * (~100 MB of F16: they stream from memory). Prints the best of
 * LOWRANK_BENCH_REPS (20) wall and process CPU times per step (on a loaded
 * machine the 1-thread CPU time is the steadier number), float (F16) and
 * int8 pairs, 1 and 2 threads, on the ISA lowrank_isa() picks (PAGODA_ISA
 * chooses). A number, not an assertion. */
enum { BL = 12, BD = 768, BF = 2048, BAD = 8, BROWS = 28, BP = 7 };

static double now_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_bench(void **state)
{
    (void)state;
    if (!getenv("LOWRANK_BENCH")) {
        print_message("skipped: LOWRANK_BENCH unset (a benchmark, not a test)\n");
        return;
    }
    const int reps = getenv("LOWRANK_BENCH_REPS") ? atoi(getenv("LOWRANK_BENCH_REPS")) : 20;
    /* projections q k v o gate up down: in, out */
    const int pin[BP] = {BD, BD, BD, BD, BD, BD, BF}, pout[BP] = {BD, BD, BD, BD, BF, BF, BD};
    lowrank_t *pr = calloc((size_t)BL * BAD * BP, sizeof *pr);
    uint16_t **mem = calloc((size_t)BL * BAD * BP * 2, sizeof *mem);
    uint64_t seed = 99;
    for (int i = 0; i < BL * BAD * BP; i++) {
        const int p = i % BP, r = (i / BP) % BAD % 2 ? 64 : 8, in = pin[p], out = pout[p];
        uint16_t *A = mem[2 * i] = malloc((size_t)r * in * 2), *B = mem[2 * i + 1] = malloc((size_t)out * r * 2);
        for (size_t k = 0; k < (size_t)r * in; k++)
            A[k] = quant_fp32_to_fp16((float)((double)(splitmix64_next(&seed) >> 11) * 0x1p-53 - 0.5) * 0.07f);
        for (size_t k = 0; k < (size_t)out * r; k++)
            B[k] = quant_fp32_to_fp16((float)((double)(splitmix64_next(&seed) >> 11) * 0x1p-53 - 0.5) * 0.2f);
        pr[i] = (lowrank_t){.rank = r, .factor = 1,
                            .a = {.type = GGML_TYPE_F16, .rows = r, .cols = in, .row_bytes = (size_t)in * 2,
                                  .data = (const uint8_t *)A},
                            .b = {.type = GGML_TYPE_F16, .rows = out, .cols = r, .row_bytes = (size_t)r * 2,
                                  .data = (const uint8_t *)B}};
    }
    float *x = malloc((size_t)BROWS * BF * 4), *y = calloc((size_t)BROWS * BF * BP, 4);
    fill(x, (size_t)BROWS * BF, 3, 1.0f);
    int32_t rows[BROWS];
    int start[BAD + 1] = {0};
    for (int j = 0; j < BROWS; j++)
        rows[j] = j;
    for (int a = 0; a < BAD; a++) /* 4 rows for the first four adapters, 3 for the rest */
        start[a + 1] = start[a] + (a < 4 ? 4 : 3);
    const lowrank_t *pp[BAD * BP];
    float sc[BAD] = {1, 1, 1, 1, 1, 1, 1, 1};
    float *t = malloc((size_t)BROWS * 64 * 3 * 4);
    const int calls[4][3] = {{0, 1, 2}, {3, -1, -1}, {4, 5, -1}, {6, -1, -1}};
    for (int int8 = 0; int8 < 2; int8++) {
        for (int i = 0; i < BL * BAD * BP; i++)
            assert_int_equal(lowrank_prepare(&pr[i], int8), 0);
        for (int th = 1; th <= 2; th++) {
            double best = 1e9, best_cpu = 1e9;
            for (int rep = 0; rep < reps; rep++) {
                const double t0 = now_s(CLOCK_MONOTONIC), c0 = now_s(CLOCK_PROCESS_CPUTIME_ID);
                for (int l = 0; l < BL; l++)
                    for (int c = 0; c < 4; c++) {
                        lowrank_job_t jobs[BAD * 3];
                        int nj = 0;
                        for (int m = 0; m < 3 && calls[c][m] >= 0; m++) {
                            const int p = calls[c][m];
                            for (int a = 0; a < BAD; a++) {
                                pp[a * BP + p] = &pr[((size_t)l * BAD + a) * BP + p];
                                jobs[nj++] = (lowrank_job_t){.x = x, .ldx = pin[p], .y = y + (size_t)p * BROWS * BF,
                                                             .ldy = pout[p], .rows = rows + start[a],
                                                             .n = start[a + 1] - start[a], .pairs = &pp[a * BP + p],
                                                             .s = &sc[a], .n_pairs = 1};
                            }
                        }
                        assert_true(lowrank_scratch_floats(jobs, nj) <= (size_t)BROWS * 64 * 3);
                        assert_int_equal(lowrank_apply(jobs, nj, t, th), 0);
                    }
                best = fmin(best, now_s(CLOCK_MONOTONIC) - t0);
                best_cpu = fmin(best_cpu, now_s(CLOCK_PROCESS_CPUTIME_ID) - c0);
            }
            print_message("lowrank bench (%s): %s pairs, %d thread%s: %.2f ms a step, CPU %.2f ms (best of %d)\n",
                          qgemm_isa_name(lowrank_isa()), int8 ? "int8" : "F16", th, th > 1 ? "s" : "", best * 1e3,
                          best_cpu * 1e3, reps);
        }
    }
    for (int i = 0; i < BL * BAD * BP; i++) {
        lowrank_release(&pr[i]);
        free(mem[2 * i]);
        free(mem[2 * i + 1]);
    }
    free(pr);
    free(mem);
    free(x);
    free(y);
    free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        {"test_against_ref", test_against_ref, NULL, NULL, &k_float},
        {"test_int8_against_ref", test_against_ref, NULL, NULL, &k_int8},
        cmocka_unit_test(test_isa_bits),
        cmocka_unit_test(test_int8_bound),
        cmocka_unit_test(test_bench),
        cmocka_unit_test(test_mix),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_prepare_in),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
