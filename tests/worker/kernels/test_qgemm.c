/* Unit tests for worker/qgemm: quantized-weight matrix multiply.
 *
 * Reference: y_ref[r][c] = Σ_i w[c][i] · x[r][i] in double, with w from
 * quant_dequantize() (itself checked bit-exact against the gguf Python
 * package in test_quant.c) and x the unquantized floats.
 *
 * Tolerance, per output (derivation in qgemm.h): qgemm quantizes each
 * 32-block of x to d·q with d = amax/127, so |x - d·q| ≤ amax/254 and
 *     |y - y_ref| ≤ (1 + 1e-5) · Σ_blocks (amax_b / 254) · Σ_{i∈b} |w_i|      (E)
 *                  + (nb + 8) · 2^-23 · Σ_i |x_i| · (|w_i| + 4 · max_{j∈b(i)} |w_j|)
 * The second term covers f32 rounding: scale products, nb sequential adds,
 * and for Q4_K/Q5_K the difference of the scale and min parts, each bounded
 * by a few times the largest weight of its block.
 * Statistically, rounding x/d to an integer leaves an error uniform in
 * [-d/2, d/2], independent across elements, so the expected squared error of
 * an output is Σ_i w_i² d_b² / 12. The test requires the matrix-wide relative
 * error ‖y - y_ref‖ / ‖y_ref‖ to be at most 1.25 × this prediction (and
 * < 2 %), and prints both: ≈ 0.5 % for Gaussian activations, ≈ 1.1 % with
 * the 20σ outliers used here.
 *
 * Weights are (a) random bytes with sane f16 scales, which reach every quant
 * value (Q8_0's -128, Q6_K's -32, all 6-bit scale/min patterns), and
 * (b) quant_quantize() of Gaussian floats, like a real model; with
 * ../shared, (c) the llama-quantize tensors of the zoo models.
 *
 * Exactness claims checked bit for bit: every vector ISA this CPU runs
 * (AVX2, AVX-VNNI, AVX-512 VNNI; the others are skipped with a message)
 * == scalar, on W as in the file and, for Q8_0, packed (qgemm_pack: the
 * VNNI kernels read only packed panels); a row's outputs do not depend on
 * n_rows, on its position in the batch or on the thread count, on any ISA
 * (n_rows ≤ 8 runs the AVX2 direct path for Q8_0, ≤ 4 for Q4_0, larger
 * batches the panel path; the AVX-512 kernel tiles 8 rows × 16 columns:
 * the comparisons cross all of these).
 *
 * QGEMM_BENCH=1 build/tests/worker/kernels/test_qgemm runs a benchmark instead
 * (110M llama shapes, against dequantize + cblas_sgemm and plain sgemm on
 * f32 weights; QGEMM_BENCH_REPS=n repetitions, best kept;
 * QGEMM_BENCH_NOBLAS=1 skips OpenBLAS). On a shared machine run it with
 * GOMP_SPINCOUNT=1000 or OMP_WAIT_POLICY=passive (see qgemm.h, Threading).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/xalloc.h"
#include "tests/support/support.h"
#include "common/text/gguf.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"
#include "tests/worker/kernels/qgemm_testdata.h"

/* ---- data ------------------------------------------------------------------ */

static const uint32_t TYPES[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                 GGML_TYPE_Q6_K};

/* ---- reference ------------------------------------------------------------ */

typedef struct {
    double max_excess;  /* max over outputs of |err| / tol (≤ 1 passes) */
    double err2, ref2;  /* Σ err², Σ ref² */
    double pred2;       /* Σ predicted err²: Σ_i w_i² d_b² / 12 */
    double err_q_rel;   /* mean over outputs of E / Σ|w·x| (the bound's size) */
} check_t;

/* Checks y (n_rows × n_out) against the double reference; fails the test
 * on the first output outside the bound. */
static check_t check_against_reference(uint32_t type, const uint8_t *w, int64_t n_out, int64_t n_in,
                                       const float *x, int n_rows, const float *y)
{
    size_t rb = quant_row_bytes(type, n_in);
    int64_t nb = n_in / 32;
    float *wf = xmalloc((size_t)n_in * sizeof(float));
    check_t ck = {0, 0, 0, 0, 0};
    for (int64_t c = 0; c < n_out; c++) {
        assert_int_equal(quant_dequantize(type, w + rb * (size_t)c, wf, n_in), 0);
        for (int r = 0; r < n_rows; r++) {
            const float *xr = x + (int64_t)r * n_in;
            double ref = 0, e_q = 0, mag = 0, abs_wx = 0, pred2 = 0;
            for (int64_t b = 0; b < nb; b++) {
                double amax = 0, wsum = 0, wmax = 0;
                for (int i = 0; i < 32; i++) {
                    amax = fmax(amax, fabs(xr[32 * b + i]));
                    wsum += fabs(wf[32 * b + i]);
                    wmax = fmax(wmax, fabs(wf[32 * b + i]));
                }
                e_q += amax / 254 * wsum;
                double w2 = 0;
                for (int i = 0; i < 32; i++)
                    w2 += (double)wf[32 * b + i] * wf[32 * b + i];
                pred2 += w2 * (amax / 127) * (amax / 127) / 12;
                for (int i = 0; i < 32; i++) {
                    double wv = wf[32 * b + i], xv = xr[32 * b + i];
                    ref += wv * xv;
                    abs_wx += fabs(wv * xv);
                    mag += fabs(xv) * (fabs(wv) + 4 * wmax);
                }
            }
            double tol = (1 + 1e-5) * e_q + (double)(nb + 8) * 0x1p-23 * mag + 1e-30;
            double got = y[(int64_t)r * n_out + c], err = fabs(got - ref);
            if (!(err <= tol))
                fail_msg("%s n_in %lld: y[%d][%lld] = %.9g, reference %.9g, |err| %.3g > tol %.3g",
                         ggml_type_name(type), (long long)n_in, r, (long long)c, got, ref, err, tol);
            ck.max_excess = fmax(ck.max_excess, err / tol);
            ck.err2 += err * err;
            ck.ref2 += ref * ref;
            ck.pred2 += pred2;
            ck.err_q_rel += abs_wx > 0 ? e_q / abs_wx : 0;
        }
    }
    ck.err_q_rel /= (double)(n_out * n_rows);
    free(wf);
    return ck;
}

/* qgemm_multi with an optional packing of w (NULL: none); caller frees */
static float *run_qgemm_p(qgemm_ctx_t *ctx, uint32_t type, const uint8_t *w, const void *packed, int64_t n_out,
                          int64_t n_in, const float *x, int n_rows)
{
    float *y = xmalloc((size_t)n_rows * (size_t)n_out * sizeof(float) + 1);
    qgemm_mat_t m = {.type = type, .w = w, .n_out = n_out, .y = y, .packed = packed};
    assert_int_equal(qgemm_multi(ctx, &m, 1, n_in, x, n_rows), 0);
    return y;
}

static float *run_qgemm(qgemm_ctx_t *ctx, uint32_t type, const uint8_t *w, int64_t n_out,
                        int64_t n_in, const float *x, int n_rows)
{
    float *y = xmalloc((size_t)n_rows * (size_t)n_out * sizeof(float) + 1);
    assert_int_equal(qgemm(ctx, type, w, n_out, n_in, x, n_rows, y), 0);
    return y;
}

/* Every vector ISA the CPU has, with W as in the file and, for Q8_0,
 * packed (qgemm_pack: the VNNI kernels only run on packed W), must give
 * ys (the scalar kernel's result for x) bit for bit. Leaves ctx on AUTO. */
static void compare_isas(qgemm_ctx_t *ctx, uint32_t type, const uint8_t *w, int64_t n_out, int64_t n_in,
                         const float *x, int n_rows, const float *ys)
{
    void *packed = type == GGML_TYPE_Q8_0 ? qgemm_pack(type, w, n_out, n_in, 1) : NULL;
    for (size_t i = 0; i < N_VECTOR_ISAS; i++) {
        if (!isa_runs(VECTOR_ISAS[i]))
            continue;
        assert_int_equal(qgemm_set_isa(ctx, VECTOR_ISAS[i]), 0);
        for (int pk = 0; pk < (packed ? 2 : 1); pk++) {
            float *ya = xmalloc((size_t)n_rows * (size_t)n_out * sizeof(float) + 1);
            qgemm_mat_t m = {.type = type, .w = w, .n_out = n_out, .y = ya, .packed = pk ? packed : NULL};
            assert_int_equal(qgemm_multi(ctx, &m, 1, n_in, x, n_rows), 0);
            for (int64_t e = 0; e < n_rows * n_out; e++)
                if (memcmp(&ya[e], &ys[e], sizeof(float)) != 0)
                    fail_msg("%s n_in %lld n_rows %d %s%s: y[%lld] = %.9g != scalar %.9g", ggml_type_name(type),
                             (long long)n_in, n_rows, qgemm_isa_name(VECTOR_ISAS[i]), pk ? " packed" : "",
                             (long long)e, ya[e], ys[e]);
            free(ya);
        }
    }
    qgemm_pack_free(&packed);
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AUTO), 0);
}

/* One shape: scalar result within the bound, and every vector ISA
 * bit-identical to it (compare_isas). Returns the check of the scalar
 * result. */
static check_t check_shape(qgemm_ctx_t *ctx, uint32_t type, const uint8_t *w, int64_t n_out,
                           int64_t n_in, int n_rows, uint64_t seed)
{
    float *x = activations(n_rows, n_in, seed);
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_SCALAR), 0);
    float *ys = run_qgemm(ctx, type, w, n_out, n_in, x, n_rows);
    check_t ck = check_against_reference(type, w, n_out, n_in, x, n_rows, ys);
    compare_isas(ctx, type, w, n_out, n_in, x, n_rows, ys);
    free(x);
    free(ys);
    return ck;
}

/* ---- tests ----------------------------------------------------------------- */

/* Every type × n_in × n_rows, n_out not a multiple of the 8-column panel,
 * weights from random bytes and from quantized Gaussians. */
static void test_accuracy_all_types(void **state)
{
    (void)state;
    static const int64_t N_IN[] = {256, 768, 2048};
    static const int N_ROWS[] = {1, 3, 4, 6, 17, 32};
    static const int64_t N_OUT[] = {13, 1, 7, 21};
    qgemm_ctx_t *ctx = qgemm_ctx_new(32, 2048);
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        uint32_t type = TYPES[t];
        for (int src = 0; src < 2; src++) {
            double worst = 0, err2 = 0, ref2 = 0, pred2 = 0, eq = 0;
            int n_checks = 0;
            for (size_t i = 0; i < sizeof N_IN / sizeof N_IN[0]; i++) {
                int64_t n_in = N_IN[i], n_out = N_OUT[i % 4] + (src ? 8 : 0);
                uint64_t seed = 1000 * t + 100 * (uint64_t)src + i;
                uint8_t *w = src ? weights_quantized(type, n_out, n_in, seed)
                                 : weights_random_bytes(type, n_out, n_in, seed);
                for (size_t k = 0; k < sizeof N_ROWS / sizeof N_ROWS[0]; k++) {
                    check_t ck = check_shape(ctx, type, w, n_out, n_in, N_ROWS[k], seed * 7 + k);
                    worst = fmax(worst, ck.max_excess);
                    err2 += ck.err2;
                    ref2 += ck.ref2;
                    pred2 += ck.pred2;
                    eq += ck.err_q_rel;
                    n_checks++;
                }
                free(w);
            }
            double rel = sqrt(err2 / ref2), pred = sqrt(pred2 / ref2);
            printf("# %-5s %-13s rel err %.3f%% (predicted %.3f%%)  max |err|/tol %.3f  "
                   "mean E/Σ|wx| %.2f%%\n", ggml_type_name(type), src ? "quantized" : "random-bytes",
                   100 * rel, 100 * pred, worst, 100 * eq / n_checks);
            assert_true(rel < 1.25 * pred);
            assert_true(rel < 0.02);
        }
    }
    qgemm_ctx_free(&ctx);
    assert_null(ctx);
}

/* Q4_0 and Q8_0 also allow n_in that is a multiple of 32 but not of 256. */
static void test_small_blocks(void **state)
{
    (void)state;
    qgemm_ctx_t *ctx = qgemm_ctx_new(5, 2048);
    uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    int64_t n_ins[] = {32, 96, 288};
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 3; i++) {
            uint8_t *w = weights_random_bytes(types[t], 11, n_ins[i], 77 + (uint64_t)i);
            check_shape(ctx, types[t], w, 11, n_ins[i], 5, 5 + (uint64_t)i);
            free(w);
        }
    qgemm_ctx_free(&ctx);
}

/* Q8_0 worst case for the int16 pair sums: every weight -128 and every
 * activation ±amax, so each maddubs pair is ±2·128·127. */
static void test_q8_0_extremes(void **state)
{
    (void)state;
    int64_t n_in = 256, n_out = 9;
    int n_rows = 4;
    size_t rb = quant_row_bytes(GGML_TYPE_Q8_0, n_in);
    uint8_t *w = xmalloc(rb * (size_t)n_out);
    for (int64_t c = 0; c < n_out; c++)
        for (int64_t b = 0; b < n_in / 32; b++) {
            uint8_t *blk = w + rb * (size_t)c + 34 * (size_t)b;
            wr16(blk, quant_fp32_to_fp16(0.5f));
            for (int i = 0; i < 32; i++)
                blk[2 + i] = (c % 3 == 2) ? (uint8_t)(i & 1 ? 0x80 : 0x7f) : 0x80;
        }
    float *x = xmalloc((size_t)n_rows * (size_t)n_in * sizeof(float));
    for (int64_t i = 0; i < n_rows * n_in; i++)
        x[i] = (i / n_in) == 1 ? -3.0f : (i / n_in == 2 && i % 2) ? -1e4f : 1e4f;
    qgemm_ctx_t *ctx = qgemm_ctx_new(n_rows, n_in);
    /* scalar, then every vector ISA on W and on its packing */
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_SCALAR), 0);
    float *y = run_qgemm(ctx, GGML_TYPE_Q8_0, w, n_out, n_in, x, n_rows);
    check_against_reference(GGML_TYPE_Q8_0, w, n_out, n_in, x, n_rows, y);
    compare_isas(ctx, GGML_TYPE_Q8_0, w, n_out, n_in, x, n_rows, y);
    free(y);
    qgemm_ctx_free(&ctx);
    free(w);
    free(x);
}

/* Y[r] must not depend on the batch: 32 rows at once == each row alone ==
 * rows 5..7 as a batch of 3 == rows 3..19 as a batch of 17, bit for bit;
 * and a 1-thread context gives the same bits as the default one. */
static void test_batch_and_thread_invariance(void **state)
{
    (void)state;
    int64_t n_in = 768, n_out = 83;
    int n_rows = 32;
    qgemm_ctx_t *ctx = qgemm_ctx_new(n_rows, n_in);
    int saved_threads = omp_get_max_threads();
    omp_set_num_threads(1);
    qgemm_ctx_t *ctx1 = qgemm_ctx_new(n_rows, n_in);
    omp_set_num_threads(saved_threads);
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        uint32_t type = TYPES[t];
        uint8_t *w = weights_random_bytes(type, n_out, n_in, 4242 + t);
        float *x = activations(n_rows, n_in, 99 + t);
        /* Q8_0 also packed: the VNNI kernels (16-column tiles of up to 8 rows
         * on AVX-512) only run there */
        void *packed = type == GGML_TYPE_Q8_0 ? qgemm_pack(type, w, n_out, n_in, 1) : NULL;
        for (size_t isa = 0; isa <= N_VECTOR_ISAS; isa++)
            for (int pk = 0; pk < (packed ? 2 : 1); pk++) {
                qgemm_isa_t want = isa ? VECTOR_ISAS[isa - 1] : QGEMM_ISA_SCALAR;
                if (!isa_runs(want))
                    continue;
                assert_int_equal(qgemm_set_isa(ctx, want), 0);
                assert_int_equal(qgemm_set_isa(ctx1, want), 0);
                const void *pw = pk ? packed : NULL;
                float *all = run_qgemm_p(ctx, type, w, pw, n_out, n_in, x, n_rows);
                float *one_thread = run_qgemm_p(ctx1, type, w, pw, n_out, n_in, x, n_rows);
                assert_memory_equal(all, one_thread, (size_t)n_rows * (size_t)n_out * sizeof(float));
                for (int r = 0; r < n_rows; r++) {
                    float *y1 = run_qgemm_p(ctx, type, w, pw, n_out, n_in, x + (int64_t)r * n_in, 1);
                    assert_memory_equal(y1, all + (int64_t)r * n_out, (size_t)n_out * sizeof(float));
                    free(y1);
                }
                /* 3, 4, 7 rows take the direct path for Q8_0 (7 = two passes)
                 * and Q4_0 (3, 4); 17 the panel path (AVX-512 packed: 8 + 8 + 1) */
                int spans[][2] = {{5, 3}, {3, 17}, {28, 4}, {20, 7}};
                for (int s = 0; s < 4; s++) {
                    int r0 = spans[s][0], n = spans[s][1];
                    float *ys = run_qgemm_p(ctx, type, w, pw, n_out, n_in, x + (int64_t)r0 * n_in, n);
                    assert_memory_equal(ys, all + (int64_t)r0 * n_out, (size_t)n * (size_t)n_out * sizeof(float));
                    free(ys);
                }
                free(one_thread);
                free(all);
            }
        qgemm_pack_free(&packed);
        free(w);
        free(x);
    }
    qgemm_ctx_free(&ctx);
    qgemm_ctx_free(&ctx1);
}

/* qgemm_multi over several matrices (mixed types) and qgemm_cols over
 * column ranges, from any thread slot, give qgemm()'s bits; both refuse bad
 * arguments without writing. */
static void test_multi_and_cols(void **state)
{
    (void)state;
    int64_t n_in = 512;
    qgemm_ctx_t *ctx = qgemm_ctx_new(20, n_in);
    assert_int_equal(qgemm_set_threads(ctx, 3), 0);  /* grows the panel scratch */
    int row_counts[] = {1, 3, 6, 20};
    for (size_t ri = 0; ri < sizeof row_counts / sizeof row_counts[0]; ri++) {
        int n_rows = row_counts[ri];
        float *x = activations(n_rows, n_in, 501 + (uint32_t)ri);
        int64_t n_out[3] = {40, 17, 64};
        uint32_t types[3] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
        uint8_t *w[3];
        float *ref[3], *got[3];
        qgemm_mat_t mats[3];
        for (int i = 0; i < 3; i++) {
            w[i] = weights_random_bytes(types[i], n_out[i], n_in, 77 + (uint32_t)i);
            ref[i] = run_qgemm(ctx, types[i], w[i], n_out[i], n_in, x, n_rows);
            got[i] = xmalloc((size_t)n_rows * (size_t)n_out[i] * sizeof(float));
            mats[i] = (qgemm_mat_t){.type = types[i], .w = w[i], .n_out = n_out[i], .y = got[i]};
        }
        assert_int_equal(qgemm_multi(ctx, mats, 3, n_in, x, n_rows), 0);
        for (int i = 0; i < 3; i++) {
            assert_memory_equal(got[i], ref[i], (size_t)n_rows * (size_t)n_out[i] * sizeof(float));
            memset(got[i], 0, (size_t)n_rows * (size_t)n_out[i] * sizeof(float));
        }
        /* columns in uneven 8-aligned pieces, each from another thread slot */
        assert_int_equal(qgemm_quantize(ctx, x, n_rows, n_in), 0);
        for (int i = 0; i < 3; i++) {
            int64_t c0 = 0;
            for (int piece = 0; c0 < n_out[i]; piece++) {
                int64_t c1 = c0 + 8 * (1 + piece % 3);
                if (c1 > n_out[i])
                    c1 = n_out[i];
                assert_int_equal(qgemm_cols(ctx, types[i], w[i], n_out[i], n_in, n_rows, c0, c1, got[i], piece % 3), 0);
                c0 = c1;
            }
            assert_memory_equal(got[i], ref[i], (size_t)n_rows * (size_t)n_out[i] * sizeof(float));
        }
        /* refused: unaligned start, end inside a panel, other row count, bad thread */
        assert_int_equal(qgemm_cols(ctx, types[0], w[0], n_out[0], n_in, n_rows, 4, 16, got[0], 0), -1);
        assert_int_equal(qgemm_cols(ctx, types[0], w[0], n_out[0], n_in, n_rows, 0, 12, got[0], 0), -1);
        assert_int_equal(qgemm_cols(ctx, types[0], w[0], n_out[0], n_in, n_rows + 1, 0, 8, got[0], 0), -1);
        assert_int_equal(qgemm_cols(ctx, types[0], w[0], n_out[0], n_in, n_rows, 0, 8, got[0], 3), -1);
        mats[1].type = GGML_TYPE_F16;
        assert_int_equal(qgemm_multi(ctx, mats, 3, n_in, x, n_rows), -1);
        for (int i = 0; i < 3; i++) {
            free(w[i]);
            free(ref[i]);
            free(got[i]);
        }
        free(x);
    }
    qgemm_ctx_free(&ctx);
}

/* A non-finite activation turns its row's outputs into NaN and leaves the
 * other rows exact; an all-zero row gives zeros. */
static void test_nonfinite_and_zero_rows(void **state)
{
    (void)state;
    int64_t n_in = 512, n_out = 10;
    int n_rows = 4;
    qgemm_ctx_t *ctx = qgemm_ctx_new(n_rows, n_in);
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        uint8_t *w = weights_random_bytes(TYPES[t], n_out, n_in, 31 + t);
        float *x = activations(n_rows, n_in, 17);
        float *clean = run_qgemm(ctx, TYPES[t], w, n_out, n_in, x, n_rows);
        x[1 * n_in + 100] = NAN;
        x[2 * n_in + 300] = -INFINITY;
        memset(x + 3 * n_in, 0, (size_t)n_in * sizeof(float));
        void *packed = TYPES[t] == GGML_TYPE_Q8_0 ? qgemm_pack(TYPES[t], w, n_out, n_in, 1) : NULL;
        for (size_t isa = 0; isa <= 2 * N_VECTOR_ISAS; isa++) {
            /* scalar, then each vector ISA without and with the packing */
            qgemm_isa_t want = isa ? VECTOR_ISAS[(isa - 1) / 2] : QGEMM_ISA_SCALAR;
            const void *pw = isa && isa % 2 == 0 ? packed : NULL;
            if (!isa_runs(want) || (isa && isa % 2 == 0 && !packed))
                continue;
            assert_int_equal(qgemm_set_isa(ctx, want), 0);
            float *y = run_qgemm_p(ctx, TYPES[t], w, pw, n_out, n_in, x, n_rows);
            assert_memory_equal(y, clean, (size_t)n_out * sizeof(float));
            for (int64_t c = 0; c < n_out; c++) {
                assert_true(isnan(y[n_out + c]));
                assert_true(isnan(y[2 * n_out + c]));
                assert_true(y[3 * n_out + c] == 0.0f);
            }
            free(y);
        }
        qgemm_pack_free(&packed);
        free(w);
        free(x);
        free(clean);
    }
    qgemm_ctx_free(&ctx);
}

/* Bad shapes and types: -1 and y untouched. */
static void test_bad_arguments(void **state)
{
    (void)state;
    assert_null(qgemm_ctx_new(0, 256));
    assert_null(qgemm_ctx_new(4, 0));
    qgemm_ctx_t *ctx = qgemm_ctx_new(4, 512);
    uint8_t *w = weights_random_bytes(GGML_TYPE_Q4_K, 4, 512, 1);
    float x[4 * 1024] = {0}, y[64];
    for (int i = 0; i < 64; i++)
        y[i] = 42.0f;
    assert_false(qgemm_supported(GGML_TYPE_F16));
    assert_false(qgemm_supported(GGML_TYPE_F32));
    assert_false(qgemm_supported(GGML_TYPE_Q4_1));
    assert_false(qgemm_supported(1000));
    assert_true(qgemm_supported(GGML_TYPE_Q5_K));
    assert_int_equal(qgemm(ctx, GGML_TYPE_F16, w, 4, 256, x, 1, y), -1);
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 4, 128, x, 1, y), -1);  /* not ×256 */
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 4, 1024, x, 1, y), -1); /* > max_in */
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 4, 512, x, 5, y), -1);  /* > max_rows */
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 4, 0, x, 1, y), -1);
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, -1, 512, x, 1, y), -1);
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 4, 512, x, -1, y), -1);
    assert_int_equal(qgemm(NULL, GGML_TYPE_Q4_K, w, 4, 512, x, 1, y), -1);
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q8_0, w, 4, 48, x, 1, y), -1); /* not ×32 */
    for (int i = 0; i < 64; i++)
        assert_true(y[i] == 42.0f);
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 4, 512, x, 0, y), 0);
    assert_int_equal(qgemm(ctx, GGML_TYPE_Q4_K, w, 0, 512, x, 1, y), 0);
    for (int i = 0; i < 64; i++)
        assert_true(y[i] == 42.0f);
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_SCALAR), 0);
    assert_int_equal(qgemm_get_isa(ctx), QGEMM_ISA_SCALAR);
    assert_string_equal(qgemm_isa_name(QGEMM_ISA_SCALAR), "scalar");
    assert_int_equal(qgemm_set_isa(ctx, (qgemm_isa_t)99), -1);
    assert_int_equal(qgemm_get_isa(ctx), QGEMM_ISA_SCALAR);
    assert_int_equal(qgemm_set_isa(ctx, (qgemm_isa_t)-1), -1);
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AUTO), 0);
    assert_int_not_equal(qgemm_get_isa(ctx), QGEMM_ISA_AUTO);
    assert_int_equal(qgemm_get_isa(ctx), qgemm_isa_default());
    assert_true(qgemm_isa_available(qgemm_get_isa(ctx)));
    /* set_isa agrees with isa_available; the names PAGODA_ISA accepts */
    static const char *names[] = {"auto", "scalar", "avx2", "avxvnni", "avx512vnni", "amx"};
    for (int i = QGEMM_ISA_AUTO; i <= QGEMM_ISA_AMX; i++) {
        assert_string_equal(qgemm_isa_name((qgemm_isa_t)i), names[i]);
        assert_int_equal(qgemm_set_isa(ctx, (qgemm_isa_t)i), qgemm_isa_available((qgemm_isa_t)i) ? 0 : -1);
    }
    free(w);
    qgemm_ctx_free(&ctx);
    qgemm_ctx_free(&ctx);   /* already NULL: no-op */
    qgemm_ctx_free(NULL);
}

/* Real llama-quantize weights: every 2-D tensor of the zoo models whose type
 * qgemm supports (Q4_K_M and Q5_K_M also hold Q6_K tensors). */
static void test_zoo_tensors(void **state)
{
    (void)state;
    static const char *files[] = {"zoo-Q8_0.gguf", "zoo-Q4_0.gguf", "zoo-Q4_K_M.gguf",
                                  "zoo-Q5_K_M.gguf", "zoo-Q6_K.gguf"};
    qgemm_ctx_t *ctx = qgemm_ctx_new(3, 1024);
    int n_checked = 0;
    for (size_t f = 0; f < sizeof files / sizeof files[0]; f++) {
        char rel[64];
        snprintf(rel, sizeof rel, "zoo/%s", files[f]);
        const char *path = support_shared_model(rel);
        if (!path)
            skip();
        gguf_t *g = NULL;
        char err[256];
        if (gguf_open(path, &g, err, sizeof err) != 0)
            fail_msg("%s: %s", path, err);
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const gguf_tensor_t *t = &g->tensors[i];
            if (t->n_dims != 2 || !qgemm_supported(t->type))
                continue;
            int64_t n_in = (int64_t)t->ne[0], n_out = (int64_t)t->ne[1];
            if (n_out > 600)
                n_out = 600; /* the token embedding: a prefix of rows is enough */
            check_shape(ctx, t->type, t->data, n_out, n_in, 3, i);
            n_checked++;
        }
        gguf_close(&g);
    }
    printf("# %d zoo tensors checked\n", n_checked);
    assert_true(n_checked > 10);
    qgemm_ctx_free(&ctx);
}

/* ---- benchmark (QGEMM_BENCH=1) --------------------------------------------------- */

static double time_best_us(int reps, void (*fn)(void *), void *arg)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        uint64_t t0 = clock_now_us();
        fn(arg);
        double dt = (double)(clock_now_us() - t0);
        best = dt < best ? dt : best;
    }
    return best;
}

typedef struct {
    qgemm_ctx_t *ctx;
    uint32_t type;
    const uint8_t *w;
    float *wf;
    int64_t n_out, n_in;
    const float *x;
    int n_rows;
    float *y;
} bench_t;

static void bench_qgemm(void *p)
{
    bench_t *b = p;
    qgemm(b->ctx, b->type, b->w, b->n_out, b->n_in, b->x, b->n_rows, b->y);
}

static void bench_sgemm(void *p)
{
    bench_t *b = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, b->n_rows, (int)b->n_out, (int)b->n_in, 1.0f,
                b->x, (int)b->n_in, b->wf, (int)b->n_in, 0.0f, b->y, (int)b->n_out);
}

static void bench_dequant_sgemm(void *p)
{
    bench_t *b = p;
    size_t rb = quant_row_bytes(b->type, b->n_in);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < b->n_out; c++)
        quant_dequantize(b->type, b->w + rb * (size_t)c, b->wf + c * b->n_in, b->n_in);
    bench_sgemm(p);
}

static void run_bench(void)
{
    /* 110M llama (dim 768, ffn 2048, vocab 32000): one layer = 4 × (768×768)
     * + 2 × (2048 out × 768 in) + (768 out × 2048 in); 12 layers + classifier */
    static const struct { const char *name; int64_t n_out, n_in; int per_token; } shapes[] = {
        {"attn 768x768", 768, 768, 48},
        {"ffn-up 2048x768", 2048, 768, 24},
        {"ffn-down 768x2048", 768, 2048, 12},
        {"cls 32000x768", 32000, 768, 1},
    };
    enum { NS = 4, NR = 4, NT = 4 };
    static const int rows[NR] = {1, 4, 16, 32};
    static const uint32_t types[NT] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K};
    int reps = getenv("QGEMM_BENCH_REPS") ? atoi(getenv("QGEMM_BENCH_REPS")) : 20;
    bool blas = !getenv("QGEMM_BENCH_NOBLAS");
    static double tq[NT][NS][NR], tdq[NT][NS][NR], ts[NT][NS][NR];
    qgemm_ctx_t *ctx = qgemm_ctx_new(32, 2048);
    /* Two passes: qgemm first, then OpenBLAS, so OpenBLAS's spinning
     * pthreads do not steal the cores from the OpenMP team. */
    for (int pass = 0; pass < (blas ? 2 : 1); pass++)
        for (int t = 0; t < NT; t++)
            for (int s = 0; s < NS; s++) {
                bench_t b = {ctx, types[t], NULL, NULL, shapes[s].n_out, shapes[s].n_in, NULL, 0, NULL};
                uint8_t *w = weights_quantized(types[t], b.n_out, b.n_in, 5);
                b.w = w;
                b.wf = xmalloc((size_t)b.n_out * (size_t)b.n_in * sizeof(float));
                float *x = activations(32, b.n_in, 6);
                b.x = x;
                b.y = xmalloc((size_t)32 * (size_t)b.n_out * sizeof(float));
                for (int r = 0; r < NR; r++) {
                    b.n_rows = rows[r];
                    if (pass == 0) {
                        tq[t][s][r] = time_best_us(reps, bench_qgemm, &b);
                    } else {
                        tdq[t][s][r] = time_best_us(reps / 4 + 1, bench_dequant_sgemm, &b);
                        ts[t][s][r] = time_best_us(reps, bench_sgemm, &b);
                    }
                }
                free(w);
                free(b.wf);
                free(x);
                free(b.y);
            }
    printf("qgemm benchmark: isa %s, %d OpenMP threads, OpenBLAS %d threads, best of %d\n",
           qgemm_isa_name(qgemm_get_isa(ctx)), omp_get_max_threads(), openblas_get_num_threads(), reps);
    printf("GB/s = quantized weight bytes / time; GFLOP/s = 2·rows·n_out·n_in / time\n");
    printf("%-5s %-18s %4s | %9s %7s %7s | %9s %7s | %9s %7s\n", "type", "shape", "rows", "qgemm us",
           "GB/s", "GFLOP/s", "dq+sgemm", "GFLOP/s", "sgemm f32", "GFLOP/s");
    for (int t = 0; t < NT; t++) {
        double model_us[NR] = {0};
        for (int s = 0; s < NS; s++) {
            double wbytes = (double)quant_row_bytes(types[t], shapes[s].n_in) * (double)shapes[s].n_out;
            for (int r = 0; r < NR; r++) {
                double flop = 2.0 * rows[r] * (double)shapes[s].n_out * (double)shapes[s].n_in;
                model_us[r] += tq[t][s][r] * shapes[s].per_token;
                printf("%-5s %-18s %4d | %9.1f %7.2f %7.2f", ggml_type_name(types[t]), shapes[s].name, rows[r],
                       tq[t][s][r], wbytes / tq[t][s][r] / 1e3, flop / tq[t][s][r] / 1e3);
                if (blas)
                    printf(" | %9.1f %7.2f | %9.1f %7.2f", tdq[t][s][r], flop / tdq[t][s][r] / 1e3,
                           ts[t][s][r], flop / ts[t][s][r] / 1e3);
                printf("\n");
            }
        }
        for (int r = 0; r < NR; r++)
            printf("%-5s all matmuls of one 110M step, %2d rows: %8.1f us = %7.1f tok/s (matmuls only)\n",
                   ggml_type_name(types[t]), rows[r], model_us[r], rows[r] * 1e6 / model_us[r]);
    }
    qgemm_ctx_free(&ctx);
}

int main(void)
{
    if (getenv("QGEMM_BENCH") && strcmp(getenv("QGEMM_BENCH"), "0") != 0) {
        run_bench();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_q8_0_extremes),
        cmocka_unit_test(test_small_blocks),
        cmocka_unit_test(test_nonfinite_and_zero_rows),
        cmocka_unit_test(test_batch_and_thread_invariance),
        cmocka_unit_test(test_multi_and_cols),
        cmocka_unit_test(test_accuracy_all_types),
        cmocka_unit_test(test_zoo_tensors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
