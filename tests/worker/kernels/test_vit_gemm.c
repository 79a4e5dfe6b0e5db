/* Unit tests for worker/kernels/vit_gemm.{h,c}: the vision encoder's float
 * GEMM for F32 and F16 weights and the 12 × 32 block product it and the
 * encoder's attention run on.
 *
 * Claims checked:
 *   - vit_gemm_block: the AVX-512 kernel equals the portable one (fmaf
 *     chains) bit for bit, for 1 to 25 rows (whole and partial 12-row
 *     blocks), 1 to 32 columns (whole and masked 16-lane halves), 1 to 257
 *     inputs, starting from 0 and continuing a given C, with strides wider
 *     than the block; columns ≥ nc of C are never written. Skipped with a
 *     message on a CPU without AVX-512;
 *   - vit_gemm on every path this CPU has, F32 and F16 weights, against a
 *     double-precision X · Wᵀ computed here from the same values (F16
 *     decoded exactly): |y − ref| ≤ K · 2⁻²⁴ · Σ|x·w| (the bound of a float
 *     sum, vit_gemm.h), for shapes with partial 32-column panels, partial
 *     128-column chunks and more inputs than one 256-input block;
 *   - bit for bit across paths (AVX-512 against portable), thread counts
 *     (1 and 2) and batches: rows computed in a call of 37 rows equal the
 *     same rows computed alone or in a call of 5 — an image's rows do not
 *     depend on what else is in the batch.
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

#include "common/text/ggml_type.h"
#include "worker/kernels/quant.h"
#include "worker/kernels/vit_gemm.h"

static uint32_t g_seed = 11;
static float frand(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

static void test_block_bit_exact(void **state)
{
    (void)state;
    if (!vit_isa_available(VIT_ISA_AVX512)) {
        printf("# vit_gemm_block: no AVX-512 on this CPU, the vector kernel is not tested here\n");
        return;
    }
    static const int ms[] = {1, 5, 12, 13, 25}, ncs[] = {1, 7, 16, 17, 31, 32}, kcs[] = {1, 3, 64, 257};
    for (size_t a = 0; a < sizeof ms / sizeof ms[0]; a++)
        for (size_t b = 0; b < sizeof ncs / sizeof ncs[0]; b++)
            for (size_t c = 0; c < sizeof kcs / sizeof kcs[0]; c++)
                for (int acc = 0; acc <= 1; acc++) {
                    const int m = ms[a], nc = ncs[b], kc = kcs[c];
                    const size_t lda = (size_t)kc + 3, ldb = 35, ldc = (size_t)nc + 5;
                    float *A = malloc((size_t)m * lda * 4), *B = malloc((size_t)kc * ldb * 4);
                    float *C1 = malloc((size_t)m * ldc * 4), *C2 = malloc((size_t)m * ldc * 4);
                    for (size_t i = 0; i < (size_t)m * lda; i++)
                        A[i] = 2 * frand();
                    for (size_t i = 0; i < (size_t)kc * ldb; i++)
                        B[i] = frand();
                    for (size_t i = 0; i < (size_t)m * ldc; i++)
                        C1[i] = C2[i] = frand();
                    vit_gemm_block(VIT_ISA_AVX512, A, lda, m, B, ldb, kc, C1, ldc, nc, acc);
                    vit_gemm_block(VIT_ISA_SCALAR, A, lda, m, B, ldb, kc, C2, ldc, nc, acc);
                    if (memcmp(C1, C2, (size_t)m * ldc * 4) != 0)
                        fail_msg("m %d nc %d kc %d acc %d: AVX-512 and portable differ", m, nc, kc, acc);
                    /* the columns past nc keep the values they had */
                    float *C0 = malloc((size_t)m * ldc * 4);
                    for (size_t i = 0; i < (size_t)m * ldc; i++)
                        C0[i] = frand();
                    memcpy(C1, C0, (size_t)m * ldc * 4);
                    vit_gemm_block(VIT_ISA_AVX512, A, lda, m, B, ldb, kc, C1, ldc, nc, acc);
                    for (int i = 0; i < m; i++)
                        assert_memory_equal(C1 + (size_t)i * ldc + nc, C0 + (size_t)i * ldc + nc,
                                            (ldc - (size_t)nc) * 4);
                    free(A), free(B), free(C0), free(C1), free(C2);
                }
}

/* A random (rows, cols) weight of type F32 or F16 with its values as floats. */
typedef struct wmat {
    matmul_weight_t w;
    void *data;
    float *f;  /* (rows, cols) the values the weight holds */
} wmat_t;

static wmat_t wmat_new(uint32_t type, int rows, int cols)
{
    wmat_t m = {.f = malloc((size_t)rows * cols * 4)};
    const size_t es = type == GGML_TYPE_F16 ? 2 : 4;
    m.data = malloc((size_t)rows * cols * es);
    for (size_t i = 0; i < (size_t)rows * cols; i++) {
        float x = frand();
        if (type == GGML_TYPE_F16) {
            uint16_t h = quant_fp32_to_fp16(x);
            ((uint16_t *)m.data)[i] = h;
            x = quant_fp16_to_fp32(h);
        } else {
            ((float *)m.data)[i] = x;
        }
        m.f[i] = x;
    }
    m.w = (matmul_weight_t){.type = type, .rows = rows, .cols = cols, .row_bytes = (size_t)cols * es,
                            .data = m.data};
    return m;
}

static void wmat_free(wmat_t *m)
{
    free(m->data);
    free(m->f);
}

static float *run(vit_isa_t isa, const wmat_t *m, const float *x, int M, int nt)
{
    float *y = malloc((size_t)M * m->w.rows * 4 + 4), *scr = malloc(vit_gemm_scratch(nt) * 4);
    vit_gemm(isa, &m->w, x, M, y, scr, nt);
    free(scr);
    return y;
}

static const struct { int M, N, K; } shapes[] = {
    {1, 1, 1}, {13, 50, 300}, {37, 200, 70}, {25, 130, 513}, {12, 32, 256}, {64, 257, 96},
};

static void test_against_double(void **state)
{
    (void)state;
    for (int isa = VIT_ISA_SCALAR; isa <= VIT_ISA_AVX512; isa++)
        if (!vit_isa_available((vit_isa_t)isa))
            printf("# vit_gemm: no %s on this CPU, its path skipped\n", vit_isa_name((vit_isa_t)isa));
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 2; t++) {
            const int M = shapes[s].M, N = shapes[s].N, K = shapes[s].K;
            wmat_t m = wmat_new(t ? GGML_TYPE_F16 : GGML_TYPE_F32, N, K);
            float *x = malloc((size_t)M * K * 4);
            for (size_t i = 0; i < (size_t)M * K; i++)
                x[i] = 3 * frand();
            for (int isa = VIT_ISA_SCALAR; isa <= VIT_ISA_AVX512; isa++) {
                if (!vit_isa_available((vit_isa_t)isa))
                    continue;
                for (int nt = 1; nt <= 2; nt++) {
                    float *y = run((vit_isa_t)isa, &m, x, M, nt);
                    for (int i = 0; i < M; i++)
                        for (int j = 0; j < N; j++) {
                            double ref = 0, mag = 0;
                            for (int k = 0; k < K; k++) {
                                const double p = (double)x[(size_t)i * K + k] * m.f[(size_t)j * K + k];
                                ref += p;
                                mag += fabs(p);
                            }
                            const double y_ij = y[(size_t)i * N + j];
                            if (fabs(y_ij - ref) > K * ldexp(1.0, -24) * mag + 1e-30)
                                fail_msg("%s %s %dx%dx%d threads %d: y[%d][%d] = %.9g, ref %.9g (sum |x w| %g)",
                                         vit_isa_name((vit_isa_t)isa), t ? "F16" : "F32", M, N, K, nt, i, j, y_ij,
                                         ref, mag);
                        }
                    free(y);
                }
            }
            free(x);
            wmat_free(&m);
        }
}

static void test_bits(void **state)
{
    (void)state;
    const int M = 37, N = 150, K = 300;
    for (int t = 0; t < 2; t++) {
        wmat_t m = wmat_new(t ? GGML_TYPE_F16 : GGML_TYPE_F32, N, K);
        float *x = malloc((size_t)M * K * 4);
        for (size_t i = 0; i < (size_t)M * K; i++)
            x[i] = 3 * frand();
        const vit_isa_t best = vit_isa_available(VIT_ISA_AVX512) ? VIT_ISA_AVX512 : VIT_ISA_SCALAR;
        float *all = run(best, &m, x, M, 2);
        /* portable, one thread */
        float *ref = run(VIT_ISA_SCALAR, &m, x, M, 1);
        assert_memory_equal(all, ref, (size_t)M * N * 4);
        /* rows 30..36 alone, and rows 3..7 as a batch of 5 */
        float *tail = run(best, &m, x + (size_t)30 * K, 7, 1);
        assert_memory_equal(tail, all + (size_t)30 * N, (size_t)7 * N * 4);
        float *mid = run(best, &m, x + (size_t)3 * K, 5, 2);
        assert_memory_equal(mid, all + (size_t)3 * N, (size_t)5 * N * 4);
        free(all), free(ref), free(tail), free(mid), free(x);
        wmat_free(&m);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_block_bit_exact),
        cmocka_unit_test(test_against_double),
        cmocka_unit_test(test_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
