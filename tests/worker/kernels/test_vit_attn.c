/* Unit tests for worker/kernels/vit_attn.{h,c} and vit_ops.{h,c}: the
 * vision encoder's full attention and row operations.
 *
 * Claims checked:
 *   - vit_attn_isa on every path this CPU has (AVX-512: 12-query blocks
 *     on vit_gemm_block; AVX2; the portable vit_attn_ref; a path the CPU
 *     lacks is skipped with a message) against an independent
 *     double-precision softmax attention computed here from the same q, k,
 *     v: every output within 2e-5 · (1 + max |v|), for patch counts 1, 3,
 *     16, 37 and 256 (whole and partial 32-key panels, 16- and 8-key
 *     passes, partial 12- and 4-query blocks), head dims 8, 24, 64 and 72
 *     (whole and partial 32-column panels, whole and half 16-column value
 *     passes) and 12 (AVX2 steps down to the portable path), 1 to 3
 *     heads, 1 and 2 threads;
 *   - row independence, bit for bit, on every path: the queries in
 *     reverse order with another thread count give each row the same
 *     bits — a query row's result does not depend on the other query rows
 *     of its block or the thread count;
 *   - vit_layer_norm_row and vit_act (GELU tanh form, SiLU, GELU-quick)
 *     against their libm forms (vit_*_ref): within 1e-5 · (1 + |y|) for
 *     the norm and 2e-6 · (1 + |y|) for the activations, on values from
 *     -30 to 30 and lengths that are not multiples of 8.
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

#include "common/cpu.h"
#include "worker/kernels/vit_attn.h"
#include "worker/kernels/vit_ops.h"

static uint32_t g_seed = 7;
static float frand(void)
{
    g_seed = g_seed * 1664525u + 1013904223u;
    return (float)(g_seed >> 8) / (float)(1u << 24) * 2.0f - 1.0f;
}

/* out (n, ld) per head in double, from the same floats */
static void attn_double(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd,
                        double scale, double *out)
{
    double *s = malloc((size_t)n * sizeof *s);
    for (int h = 0; h < n_head; h++)
        for (int i = 0; i < n; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j < n; j++) {
                double d = 0;
                for (int c = 0; c < hd; c++)
                    d += (double)q[(size_t)i * ld + h * hd + c] * k[(size_t)j * ld + h * hd + c];
                s[j] = d * scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            for (int j = 0; j < n; j++)
                sum += (s[j] = exp(s[j] - mx));
            for (int c = 0; c < hd; c++) {
                double o = 0;
                for (int j = 0; j < n; j++)
                    o += s[j] * v[(size_t)j * ld + h * hd + c];
                out[(size_t)i * ld + h * hd + c] = o / sum;
            }
        }
    free(s);
}

static double max_err(vit_isa_t isa, const float *q, const float *k, const float *v, int n, int ld, int n_head,
                      int hd, int nt, const double *ref)
{
    float *out = malloc((size_t)n * ld * sizeof *out);
    float *scr = malloc(vit_attn_scratch(n, ld, nt) * sizeof *scr);
    float scale = 1.0f / sqrtf((float)hd);
    vit_attn_isa(isa, q, k, v, n, ld, n_head, hd, scale, out, scr, nt);
    double e = 0;
    for (size_t i = 0; i < (size_t)n * ld; i++)
        e = fmax(e, fabs(out[i] - ref[i]));
    free(out);
    free(scr);
    return e;
}

static void test_against_double(void **state)
{
    (void)state;
    static const int ns[] = {1, 3, 16, 37, 256}, hds[] = {8, 24, 64, 72, 12};
    for (int isa = VIT_ISA_SCALAR; isa <= VIT_ISA_AVX512; isa++)
        if (!vit_isa_available((vit_isa_t)isa))
            printf("# vit_attn: no %s on this CPU, its path skipped\n", vit_isa_name((vit_isa_t)isa));
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof hds / sizeof hds[0]; b++)
            for (int n_head = 1; n_head <= 3; n_head += 2) {
                const int n = ns[a], hd = hds[b], ld = n_head * hd;
                float *q = malloc((size_t)n * ld * 4), *k = malloc((size_t)n * ld * 4), *v = malloc((size_t)n * ld * 4);
                for (size_t i = 0; i < (size_t)n * ld; i++)
                    q[i] = 3 * frand(), k[i] = 3 * frand(), v[i] = frand();
                double *ref = malloc((size_t)n * ld * sizeof *ref);
                attn_double(q, k, v, n, ld, n_head, hd, 1.0 / sqrt((double)hd), ref);
                for (int nt = 1; nt <= 2; nt++)
                    for (int isa = VIT_ISA_SCALAR; isa <= VIT_ISA_AVX512; isa++) {
                        if (!vit_isa_available((vit_isa_t)isa))
                            continue;
                        double e = max_err((vit_isa_t)isa, q, k, v, n, ld, n_head, hd, nt, ref);
                        if (e > 2e-5 * 2)
                            fail_msg("%s: n %d hd %d heads %d threads %d: max err %g",
                                     vit_isa_name((vit_isa_t)isa), n, hd, n_head, nt, e);
                    }
                free(q), free(k), free(v), free(ref);
            }
}

static void test_row_independent(void **state)
{
    (void)state;
    const int n = 37, hd = 72, n_head = 2, ld = hd * n_head;
    float *q = malloc((size_t)n * ld * 4), *k = malloc((size_t)n * ld * 4), *v = malloc((size_t)n * ld * 4);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        q[i] = 3 * frand(), k[i] = 3 * frand(), v[i] = frand();
    float *o1 = malloc((size_t)n * ld * 4), *scr = malloc(vit_attn_scratch(n, ld, 2) * 4);
    float *qr = malloc((size_t)n * ld * 4), *o2 = malloc((size_t)n * ld * 4);
    for (int i = 0; i < n; i++)
        memcpy(qr + (size_t)i * ld, q + (size_t)(n - 1 - i) * ld, (size_t)ld * 4);
    for (int isa = VIT_ISA_SCALAR; isa <= VIT_ISA_AVX512; isa++) {
        if (!vit_isa_available((vit_isa_t)isa))
            continue;
        vit_attn_isa((vit_isa_t)isa, q, k, v, n, ld, n_head, hd, 0.125f, o1, scr, 1);
        /* the same queries in reverse order, 2 threads: each row's bits follow it */
        vit_attn_isa((vit_isa_t)isa, qr, k, v, n, ld, n_head, hd, 0.125f, o2, scr, 2);
        for (int i = 0; i < n; i++)
            assert_memory_equal(o1 + (size_t)i * ld, o2 + (size_t)(n - 1 - i) * ld, (size_t)ld * 4);
    }
    free(q), free(k), free(v), free(o1), free(o2), free(qr), free(scr);
}

static void test_ops(void **state)
{
    (void)state;
    enum { D = 389 };
    float x[D], w[D], b[D], y1[D], y2[D];
    for (int i = 0; i < D; i++)
        x[i] = 30 * frand() + 2, w[i] = frand(), b[i] = frand();
    vit_layer_norm_row(x, y1, w, b, D, 1e-6f);
    vit_layer_norm_row_ref(x, y2, w, b, D, 1e-6f);
    for (int i = 0; i < D; i++)
        if (fabsf(y1[i] - y2[i]) > 1e-5f * (1 + fabsf(y2[i])))
            fail_msg("layer norm [%d]: %g vs %g", i, y1[i], y2[i]);
    for (int a = VIT_ACT_GELU; a <= VIT_ACT_GELU_QUICK; a++) {
        for (int i = 0; i < D; i++)
            y1[i] = y2[i] = 30 * frand() * (i % 3 == 0 ? 0.01f : 1.0f);
        vit_act((enum vit_act)a, y1, D);
        vit_act_ref((enum vit_act)a, y2, D);
        for (int i = 0; i < D; i++)
            if (fabsf(y1[i] - y2[i]) > 2e-6f * (1 + fabsf(y2[i])))
                fail_msg("act %d [%d]: %.9g vs %.9g", a, i, y1[i], y2[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_double),
        cmocka_unit_test(test_row_independent),
        cmocka_unit_test(test_ops),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
