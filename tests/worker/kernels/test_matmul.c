/* Tests for worker/matmul: Y = X · Wᵀ on every weight of the zoo models.
 *
 * 1. matmul_weight_rows() (AVX2 decoders where available) must reproduce
 *    quant_dequantize() bit for bit, on every matrix of every zoo format.
 * 2. matmul_run() against a float64 product of X with the dequantized W,
 *    for row counts that take the fused decode path (1, 3, 8), the
 *    unpacked F32 kernel / tiled BLAS path (9, 40) and BLAS for every type
 *    (70), with 1 and 2 threads. Tolerance:
 *        |Y - Y_ref| <= 1e-5 * Σ_k |x_k w_k| + 1e-6   per element
 *    (float32 accumulation error is bounded by ~K·eps times that sum).
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

#include "worker/kernels/matmul.h"
#include "worker/model/model.h"
#include "worker/kernels/quant.h"
#include "tests/support/support.h"

static const char *const zoo[] = { "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K" };

/* The seven matrices of a layer plus the output head. */
static int weights_of(const model_t *m, const matmul_weight_t **out)
{
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const model_layer_t *L = &m->layers[l];
        out[n++] = &L->wq;
        out[n++] = &L->wk;
        out[n++] = &L->wv;
        out[n++] = &L->wo;
        out[n++] = &L->w_gate;
        out[n++] = &L->w_up;
        out[n++] = &L->w_down;
    }
    out[n++] = &m->output;
    out[n++] = &m->tok_embd;
    return n;
}

static model_t *load_zoo(const char *type)
{
    char rel[64], err[256];
    snprintf(rel, sizeof rel, "zoo/zoo-%s.gguf", type);
    const char *p = support_shared_model(rel);
    if (!p)
        return NULL;
    model_t *m = NULL;
    assert_int_equal(model_load(p, &m, err, sizeof err), 0);
    return m;
}

static void test_decode_bit_exact(void **state)
{
    (void)state;
    for (size_t z = 0; z < sizeof zoo / sizeof *zoo; z++) {
        model_t *m = load_zoo(zoo[z]);
        if (!m)
            skip();
        const matmul_weight_t *ws[64];
        int n = weights_of(m, ws);
        for (int i = 0; i < n; i++) {
            const matmul_weight_t *w = ws[i];
            size_t cnt = (size_t)w->rows * (size_t)w->cols;
            float *a = malloc(cnt * sizeof(float)), *b = malloc(cnt * sizeof(float));
            assert_int_equal(matmul_weight_rows(w, 0, w->rows, a), 0);
            assert_int_equal(quant_dequantize(w->type, w->data, b, (int64_t)cnt), 0);
            assert_memory_equal(a, b, cnt * sizeof(float));
            free(a);
            free(b);
        }
        assert_int_equal(matmul_weight_rows(ws[0], ws[0]->rows, 1, NULL), -1);
        print_message("  %s: %d matrices decoded bit-exactly\n", zoo[z], n);
        model_free(&m);
    }
}

static void test_matmul_vs_f64(void **state)
{
    (void)state;
    static const int rows[] = { 1, 3, 8, 9, 40, 70 };
    for (size_t z = 0; z < sizeof zoo / sizeof *zoo; z++) {
        model_t *m = load_zoo(zoo[z]);
        if (!m)
            skip();
        const matmul_weight_t *ws[64];
        int n = weights_of(m, ws);
        double worst = 0;
        matmul_t *mms[2] = { matmul_new(m->max_cols, 1), matmul_new(m->max_cols, 2) };
        for (int i = 0; i < n; i++) {
            const matmul_weight_t *w = ws[i];
            const int K = (int)w->cols, N = (int)w->rows, MMAX = 70;
            float *wf = malloc((size_t)N * K * sizeof(float));
            float *x = malloc((size_t)MMAX * K * sizeof(float));
            float *y = malloc((size_t)MMAX * N * sizeof(float));
            double *ref = malloc((size_t)MMAX * N * sizeof(double)), *mag = malloc((size_t)MMAX * N * sizeof(double));
            assert_int_equal(quant_dequantize(w->type, w->data, wf, (int64_t)N * K), 0);
            uint32_t s = 17u + (uint32_t)i;
            for (int j = 0; j < MMAX * K; j++) {
                s = s * 1664525u + 1013904223u;
                x[j] = (float)((int)(s >> 9) % 2001 - 1000) / 500.0f;
            }
            /* ref (MMAX, N) in float64; the first M rows serve every M */
            for (int r = 0; r < MMAX; r++)
                for (int c = 0; c < N; c++) {
                    double acc = 0, mg = 0;
                    for (int k = 0; k < K; k++) {
                        double p = (double)x[(size_t)r * K + k] * wf[(size_t)c * K + k];
                        acc += p;
                        mg += fabs(p);
                    }
                    ref[(size_t)r * N + c] = acc;
                    mag[(size_t)r * N + c] = mg;
                }
            for (int t = 0; t < 2; t++)
                for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                    int M = rows[ri];
                    assert_int_equal(matmul_run(mms[t], w, x, M, y), 0);
                    for (size_t e = 0; e < (size_t)M * N; e++) {
                        double d = fabs(ref[e] - y[e]);
                        if (d > 1e-5 * mag[e] + 1e-6)
                            fail_msg("%s matrix %d M=%d threads=%d: y[%zu] = %g, expected %g",
                                     zoo[z], i, M, t + 1, e, (double)y[e], ref[e]);
                        if (mag[e] > 0 && d / mag[e] > worst)
                            worst = d / mag[e];
                    }
                }
            free(wf);
            free(x);
            free(y);
            free(ref);
            free(mag);
        }
        matmul_free(&mms[0]);
        matmul_free(&mms[1]);
        assert_null(mms[0]);
        print_message("  %s: worst |diff| / sum|x w| = %.2g\n", zoo[z], worst);
        model_free(&m);
    }
}

/* matmul_run_multi and matmul_run_range (pieces from several thread slots)
 * equal matmul_run bit for bit, with exact, int8 and BF16-dot kernels, for row
 * counts on the decode path and the unpacked F32 kernel. */
static void test_multi_and_range(void **state)
{
    (void)state;
    static const int rows[] = { 1, 5, 9, 33 };
    for (size_t z = 0; z < sizeof zoo / sizeof *zoo; z++) {
        model_t *m = load_zoo(zoo[z]);
        if (!m)
            skip();
        const model_layer_t *L = &m->layers[0];
        const matmul_weight_t *ws[3] = { &L->wq, &L->wk, &L->wv };
        const int K = (int)L->wq.cols, MMAX = 33;
        float *x = malloc((size_t)MMAX * K * sizeof(float));
        uint32_t s = 5;
        for (int j = 0; j < MMAX * K; j++) {
            s = s * 1664525u + 1013904223u;
            x[j] = (float)((int)(s >> 9) % 2001 - 1000) / 500.0f;
        }
        for (int int8 = 0; int8 < 3; int8++) {
            matmul_t *mm = matmul_new(m->max_cols, 2);
            if (int8 == 1)
                assert_int_equal(matmul_use_int8(mm, MMAX), 0);
            /* 2: BF16 weights on AVX512-BF16 where present (else exact again) */
            if (int8 == 2)
                assert_true(matmul_use_bf16(mm, MMAX) >= 0);
            for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
                int M = rows[ri];
                float *ref[3], *got[3];
                for (int i = 0; i < 3; i++) {
                    size_t n = (size_t)M * (size_t)ws[i]->rows;
                    ref[i] = malloc(n * sizeof(float));
                    got[i] = calloc(n, sizeof(float));
                    assert_int_equal(matmul_run(mm, ws[i], x, M, ref[i]), 0);
                }
                assert_int_equal(matmul_run_multi(mm, ws, 3, x, M, got), 0);
                for (int i = 0; i < 3; i++) {
                    assert_memory_equal(got[i], ref[i], (size_t)M * (size_t)ws[i]->rows * sizeof(float));
                    memset(got[i], 0, (size_t)M * (size_t)ws[i]->rows * sizeof(float));
                }
                assert_int_equal(matmul_prepare(mm, x, M, K), 0);
                for (int i = 0; i < 3; i++) {
                    int64_t n0 = 0;
                    for (int piece = 0; n0 < ws[i]->rows; piece++) {
                        int64_t n1 = n0 + 16 * (1 + piece % 3);
                        if (n1 > ws[i]->rows)
                            n1 = ws[i]->rows;
                        assert_int_equal(matmul_run_range(mm, ws[i], x, M, n0, n1, got[i], piece % 2), 0);
                        n0 = n1;
                    }
                    assert_memory_equal(got[i], ref[i], (size_t)M * (size_t)ws[i]->rows * sizeof(float));
                }
                assert_int_equal(matmul_run_range(mm, ws[0], x, M, 8, 32, got[0], 0), -1);  /* unaligned */
                assert_int_equal(matmul_run_range(mm, ws[0], x, M, 0, 16, got[0], 2), -1);  /* thread */
                for (int i = 0; i < 3; i++) {
                    free(ref[i]);
                    free(got[i]);
                }
            }
            matmul_free(&mm);
        }
        free(x);
        model_free(&m);
    }
}

/* BF16 weights on AVX512-BF16 (matmul_use_bf16): every zoo BF16 matrix
 * against float64 within the documented bound |y − ref| ≤ 2^-8 · Σ|x·w|
 * (x rounded to bf16: ≤ 2^-9 relative per element, plus f32 sums); a row
 * alone gives the same bits as inside any batch; run_multi / run_range
 * equal matmul_run. Skipped, with a message, on CPUs without AVX512-BF16. */
static void test_bf16_dot(void **state)
{
    (void)state;
    model_t *m = load_zoo("BF16");
    if (!m)
        skip();
    matmul_t *mm = matmul_new(m->max_cols, 2);
    int on = matmul_use_bf16(mm, 70);
    assert_true(on == 0 || on == 1);
    if (on == 1) {
        print_message("  skip: no AVX512-BF16 on this CPU (or PAGODA_ISA below avx512vnni): exact path only\n");
        matmul_free(&mm);
        model_free(&m);
        skip();
    }
    assert_int_equal(matmul_use_bf16(mm, 0), -1);
    assert_int_equal(matmul_use_bf16(mm, 70), 0);
    static const int rows[] = { 1, 3, 8, 9, 40, 70 };
    const matmul_weight_t *ws[64];
    int n = weights_of(m, ws), n_checked = 0;
    double worst = 0, err2 = 0, ref2 = 0;
    for (int i = 0; i < n; i++) {
        const matmul_weight_t *w = ws[i];
        assert_int_equal(w->type, GGML_TYPE_BF16);
        if (w->cols % 32 != 0)
            continue;
        const int K = (int)w->cols, N = (int)w->rows, MMAX = 70;
        float *wf = malloc((size_t)N * K * sizeof(float));
        float *x = malloc((size_t)MMAX * K * sizeof(float));
        float *y = malloc((size_t)MMAX * N * sizeof(float)), *y1 = malloc((size_t)N * sizeof(float));
        assert_int_equal(quant_dequantize(w->type, w->data, wf, (int64_t)N * K), 0);
        uint32_t s = 29u + (uint32_t)i;
        for (int j = 0; j < MMAX * K; j++) {
            s = s * 1664525u + 1013904223u;
            x[j] = (float)((int)(s >> 9) % 2001 - 1000) / 500.0f;
        }
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            int M = rows[ri];
            assert_int_equal(matmul_run(mm, w, x, M, y), 0);
            for (int r = 0; r < M; r++)
                for (int c = 0; c < N; c++) {
                    double acc = 0, mg = 0;
                    for (int k = 0; k < K; k++) {
                        double p = (double)x[(size_t)r * K + k] * wf[(size_t)c * K + k];
                        acc += p;
                        mg += fabs(p);
                    }
                    double d = fabs(acc - y[(size_t)r * N + c]);
                    if (d > 0x1p-8 * mg + 1e-6)
                        fail_msg("BF16 matrix %d M=%d: y[%d][%d] = %g, expected %g (bound %g)", i, M, r, c,
                                 (double)y[(size_t)r * N + c], acc, 0x1p-8 * mg);
                    worst = mg > 0 && d / mg > worst ? d / mg : worst;
                    err2 += d * d;
                    ref2 += acc * acc;
                }
            /* batch invariance: each row alone */
            for (int r = 0; r < M; r += 7) {
                assert_int_equal(matmul_run(mm, w, x + (size_t)r * K, 1, y1), 0);
                assert_memory_equal(y1, y + (size_t)r * N, (size_t)N * sizeof(float));
            }
        }
        n_checked++;
        free(wf);
        free(x);
        free(y);
        free(y1);
    }
    print_message("  BF16 dot: %d matrices, worst |diff| / sum|x w| = %.2g, rel err %.3g%%\n", n_checked, worst,
                  100 * sqrt(err2 / ref2));
    assert_true(n_checked > 0);
    matmul_free(&mm);
    model_free(&m);
}

static void test_matmul_bad_args(void **state)
{
    (void)state;
    matmul_t *mm = matmul_new(32, 1);
    float w[64 * 2] = { 0 }, x[64] = { 0 }, y[4];
    matmul_weight_t wt = { .type = GGML_TYPE_F32, .rows = 2, .cols = 64, .row_bytes = 256,
                           .data = (const uint8_t *)w };
    assert_int_equal(matmul_run(mm, &wt, x, 1, y), -1);  /* wider than max_cols */
    wt.cols = 32;
    wt.row_bytes = 128;
    assert_int_equal(matmul_run(mm, &wt, x, -1, y), -1);
    assert_int_equal(matmul_run(mm, &wt, x, 0, y), 0);
    wt.type = GGML_TYPE_Q2_K;  /* not decodable */
    assert_int_equal(matmul_run(mm, &wt, x, 1, y), -1);
    matmul_free(&mm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_bit_exact),
        cmocka_unit_test(test_matmul_vs_f64),
        cmocka_unit_test(test_multi_and_range),
        cmocka_unit_test(test_bf16_dot),
        cmocka_unit_test(test_matmul_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
