/* Unit tests for worker/quant: dequantizers against an independent reference
 * (the `gguf` Python package's dequantization of llama-quantize output, in
 * ../shared/models/zoo/zoo-<TYPE>.dequant-f32.gguf), quantizers against
 * llama-quantize's bytes (Q8_0, Q4_0, F16, BF16 from zoo-F32), fp16/bf16
 * conversion against the compiler's _Float16, and round-trip error bounds.
 *
 * Tolerances:
 *   dequantize vs reference: bit-exact is expected (same float32 operation
 *     order); the test accepts |a-b| <= 2^-22 * |b| (about 2 ulp) and prints
 *     how many values were not bit-identical.
 *   quantize vs llama-quantize: byte-identical blocks (Q4_0 allows 0.1% of
 *     blocks to differ: its reference rounding x*id + 8.5 depends on whether
 *     the compiler fused the multiply-add).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "tests/support/support.h"
#include "common/text/gguf.h"
#include "worker/kernels/quant.h"

static uint64_t tensor_nel(const gguf_tensor_t *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

static gguf_t *open_zoo(const char *name)
{
    char rel[256];
    snprintf(rel, sizeof rel, "zoo/%s", name);
    const char *path = support_shared_model(rel);
    if (!path)
        return NULL;
    gguf_t *g = NULL;
    char err[256];
    int rc = gguf_open(path, &g, err, sizeof err);
    if (rc != 0)
        fail_msg("%s: %s", path, err);
    return g;
}

static float *dequant_tensor(const gguf_tensor_t *t)
{
    uint64_t n = tensor_nel(t);
    float *y = xmalloc(n * sizeof(float));
    /* Row by row, as the engine does it. */
    size_t rb = quant_row_bytes(t->type, (int64_t)t->ne[0]);
    assert_true(rb > 0);
    uint64_t rows = n / t->ne[0];
    assert_int_equal(rows * rb, t->nbytes);
    for (uint64_t r = 0; r < rows; r++)
        assert_int_equal(quant_dequantize(t->type, t->data + r * rb, y + r * t->ne[0],
                                          (int64_t)t->ne[0]), 0);
    return y;
}

/* Every tensor of zoo-<type>.gguf dequantized == the reference file.
 * F16/BF16 have no dequant file: their reference is the F32 source, and the
 * tolerance is the format's rounding (half an ulp: 2^-11 / 2^-8 relative,
 * plus 2^-25 absolute for half subnormals). */
static void check_zoo_type(const char *type)
{
    char a[64], b[64];
    bool from_f32 = strcmp(type, "F16") == 0 || strcmp(type, "BF16") == 0;
    float rel_tol = strcmp(type, "F16") == 0 ? 0x1p-11f : strcmp(type, "BF16") == 0 ? 0x1p-8f : 0x1p-22f;
    float abs_tol = strcmp(type, "F16") == 0 ? 0x1p-25f : 0;
    snprintf(a, sizeof a, "zoo-%s.gguf", type);
    if (from_f32)
        snprintf(b, sizeof b, "zoo-F32.gguf");
    else
        snprintf(b, sizeof b, "zoo-%s.dequant-f32.gguf", type);
    gguf_t *q = open_zoo(a), *ref = q ? open_zoo(b) : NULL;
    if (!q || !ref) {
        gguf_close(&q);
        skip();
    }
    assert_int_equal(q->n_tensors, ref->n_tensors);
    uint64_t total = 0, inexact = 0;
    double worst = 0;
    int types_seen[GGML_TYPE_COUNT] = {0};
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor_t *t = &q->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const gguf_tensor_t *r = gguf_find_tensor(ref, name);
        assert_non_null(r);
        assert_int_equal(r->type, GGML_TYPE_F32);
        assert_memory_equal(t->ne, r->ne, sizeof t->ne);
        assert_true(ggml_type_supported(t->type));
        types_seen[t->type]++;
        float *y = dequant_tensor(t);
        uint64_t n = tensor_nel(t);
        for (uint64_t k = 0; k < n; k++) {
            float want;
            memcpy(&want, r->data + 4 * k, 4);
            float diff = fabsf(y[k] - want);
            if (memcmp(&y[k], &want, 4) != 0)
                inexact++;
            if (diff > fabsf(want) * rel_tol + abs_tol)
                fail_msg("%s %s[%llu]: got %.9g want %.9g", a, name, (unsigned long long)k,
                         y[k], want);
            if (want != 0 && diff / fabsf(want) > worst)
                worst = diff / fabsf(want);
        }
        total += n;
        free(y);
    }
    printf("  %-8s %llu values, %llu not bit-identical, worst rel diff %.3g; types:", type,
           (unsigned long long)total, (unsigned long long)inexact, worst);
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (types_seen[t])
            printf(" %s×%d", ggml_type_name((uint32_t)t), types_seen[t]);
    printf("\n");
    gguf_close(&q);
    gguf_close(&ref);
}

static void test_zoo_f16(void **s) { (void)s; check_zoo_type("F16"); }
static void test_zoo_bf16(void **s) { (void)s; check_zoo_type("BF16"); }
static void test_zoo_q8_0(void **s) { (void)s; check_zoo_type("Q8_0"); }
static void test_zoo_q4_0(void **s) { (void)s; check_zoo_type("Q4_0"); }
static void test_zoo_q4_k_m(void **s) { (void)s; check_zoo_type("Q4_K_M"); }
static void test_zoo_q5_k_m(void **s) { (void)s; check_zoo_type("Q5_K_M"); }
static void test_zoo_q6_k(void **s) { (void)s; check_zoo_type("Q6_K"); }

/* zoo-F32 loads, every tensor is F32 and "dequantizes" to itself. */
static void test_zoo_f32_loads(void **s)
{
    (void)s;
    gguf_t *g = open_zoo("zoo-F32.gguf");
    if (!g)
        skip();
    assert_int_equal(g->n_tensors, 21);
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const gguf_tensor_t *t = &g->tensors[i];
        assert_int_equal(t->type, GGML_TYPE_F32);
        float *y = dequant_tensor(t);
        assert_memory_equal(y, t->data, t->nbytes);
        free(y);
    }
    gguf_close(&g);
}

/* Our quantizer applied to zoo-F32 must reproduce the bytes llama-quantize
 * wrote into zoo-<type>.gguf for every tensor stored in `qtype`. */
static void check_quantizer_matches(const char *file, uint32_t qtype, double max_bad_frac)
{
    gguf_t *f = open_zoo("zoo-F32.gguf"), *q = f ? open_zoo(file) : NULL;
    if (!f || !q) {
        gguf_close(&f);
        skip();
    }
    if (!support_model_is_shared(support_shared_model("zoo/zoo-F32.gguf")))
        print_message("  %s is the build's stand-in, quantized by pagoda-mkmodel with this quantizer: here this "
                      "only shows it is deterministic (llama-quantize's bytes are compared when ../shared is "
                      "there; the dequantizers are checked against the NumPy reference either way)\n", file);
    uint64_t blocks = 0, bad = 0;
    int n_tensors = 0;
    uint32_t be = ggml_type_block_elems(qtype), bb = ggml_type_block_bytes(qtype);
    for (uint64_t i = 0; i < q->n_tensors; i++) {
        const gguf_tensor_t *t = &q->tensors[i];
        if (t->type != qtype)
            continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        const gguf_tensor_t *src = gguf_find_tensor(f, name);
        assert_non_null(src);
        uint64_t n = tensor_nel(t);
        float *x = xmalloc(n * sizeof(float));
        memcpy(x, src->data, n * 4);
        uint8_t *mine = xmalloc(t->nbytes);
        assert_int_equal(quant_quantize(qtype, x, mine, (int64_t)n), 0);
        for (uint64_t b = 0; b < n / be; b++) {
            blocks++;
            if (memcmp(mine + b * bb, t->data + b * bb, bb) != 0)
                bad++;
        }
        n_tensors++;
        free(x);
        free(mine);
    }
    printf("  %s: %d tensors, %llu of %llu blocks differ from llama-quantize\n",
           ggml_type_name(qtype), n_tensors, (unsigned long long)bad, (unsigned long long)blocks);
    assert_true(n_tensors > 0);
    assert_true((double)bad <= max_bad_frac * (double)blocks);
    gguf_close(&f);
    gguf_close(&q);
}

static void test_quantize_q8_0_matches(void **s) { (void)s; check_quantizer_matches("zoo-Q8_0.gguf", GGML_TYPE_Q8_0, 0); }
static void test_quantize_q4_0_matches(void **s) { (void)s; check_quantizer_matches("zoo-Q4_0.gguf", GGML_TYPE_Q4_0, 1e-3); }
static void test_quantize_f16_matches(void **s) { (void)s; check_quantizer_matches("zoo-F16.gguf", GGML_TYPE_F16, 0); }
static void test_quantize_bf16_matches(void **s) { (void)s; check_quantizer_matches("zoo-BF16.gguf", GGML_TYPE_BF16, 0); }

/* ---- conversions --------------------------------------------------------- */

static uint32_t rng_u32(uint64_t *st)
{
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t x = *st;
    return (uint32_t)((x ^ (x >> 22)) >> (22 + (x >> 61)));
}

static float rng_normal(uint64_t *st)
{
    double u1 = ((double)rng_u32(st) + 1.0) / 4294967297.0;
    double u2 = (double)rng_u32(st) / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void test_fp16_against_compiler(void **s)
{
    (void)s;
#ifdef __FLT16_MAX__
    /* every half decodes like the compiler's _Float16 */
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 hf;
        uint16_t hb = (uint16_t)h;
        memcpy(&hf, &hb, 2);
        float want = (float)hf, got = quant_fp16_to_fp32(hb);
        if (isnan(want))
            assert_true(isnan(got));
        else
            assert_memory_equal(&got, &want, 4);
    }
    /* random float bit patterns (all exponents) encode like the compiler */
    uint64_t st = 42;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = rng_u32(&st);
        if (i & 1) /* half the time concentrate on the half range 2^-26..2^17 */
            u = (u & 0x807fffffu) | ((uint32_t)(101 + rng_u32(&st) % 43) << 23);
        float f;
        memcpy(&f, &u, 4);
        _Float16 hf = (_Float16)f;
        uint16_t want, got = quant_fp32_to_fp16(f);
        memcpy(&want, &hf, 2);
        if (isnan(f))
            assert_true((got & 0x7c00) == 0x7c00 && (got & 0x3ff) != 0);
        else if (got != want)
            fail_msg("fp32 %a (0x%08x): got 0x%04x want 0x%04x", (double)f, u, got, want);
    }
#else
    skip();
#endif
}

static void test_bf16(void **s)
{
    (void)s;
    /* decode then encode is the identity on non-NaN bf16 values */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = quant_bf16_to_fp32((uint16_t)h);
        if (!isnan(f))
            assert_int_equal(quant_fp32_to_bf16(f), h);
    }
    /* encoding picks the nearest bf16 (checked against both neighbours) */
    uint64_t st = 7;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = rng_u32(&st);
        float f;
        memcpy(&f, &u, 4);
        if (!isfinite(f) || fabsf(f) > 3e38f)
            continue;
        uint16_t b = quant_fp32_to_bf16(f);
        double d = fabs((double)quant_bf16_to_fp32(b) - f);
        double lo = fabs((double)quant_bf16_to_fp32((uint16_t)(u >> 16)) - f);
        double hi = fabs((double)quant_bf16_to_fp32((uint16_t)((u >> 16) + 1)) - f);
        assert_true(d <= lo && d <= hi);
    }
}

/* ---- round trips --------------------------------------------------------- */

/* Test data: normal values with a few large outliers and an all-zero block. */
static float *make_data(int64_t n, uint64_t seed)
{
    float *x = xmalloc((size_t)n * sizeof(float));
    uint64_t st = seed;
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal(&st) * 0.02f;
    for (int64_t i = 0; i < n; i += 997)
        x[i] *= 40.0f;
    for (int64_t i = 256; i < 512 && i < n; i++)
        x[i] = 0;
    return x;
}

/* Max |err| of each block of `be` elements must stay under bound(block). */
static void test_roundtrip_q8_0_q4_0(void **s)
{
    (void)s;
    const int64_t n = 256 * 64;
    float *x = make_data(n, 1), *y = xmalloc(n * sizeof(float));
    uint8_t *buf = xmalloc(quant_row_bytes(GGML_TYPE_F32, n));
    uint32_t types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0};
    for (int ti = 0; ti < 2; ti++) {
        uint32_t t = types[ti];
        assert_int_equal(quant_quantize(t, x, buf, n), 0);
        assert_int_equal(quant_dequantize(t, buf, y, n), 0);
        for (int64_t b = 0; b < n / 32; b++) {
            float amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(x[32 * b + i]));
            /* Q8_0: step d = amax/127, error <= d/2 plus the f16 rounding of d
             * times |q| <= 127 (127 * d * 2^-11 < 0.07 d).
             * Q4_0: step d = amax/8; the element equal to -max lands on 16,
             * clamped to 15: error <= d, plus f16 rounding of d (16 d 2^-11). */
            float bound = t == GGML_TYPE_Q8_0 ? amax / 127.0f * 0.57f : amax / 8.0f * 1.01f;
            for (int i = 0; i < 32; i++) {
                float e = fabsf(x[32 * b + i] - y[32 * b + i]);
                if (e > bound + 1e-30f)
                    fail_msg("%s block %lld elem %d: err %g > %g", ggml_type_name(t),
                             (long long)b, i, e, bound);
            }
        }
    }
    free(x);
    free(y);
    free(buf);
}

/* Relative RMS error of a whole row; the bounds are 1.3x what we measured
 * (uniform-grid theory agrees: step/sqrt(12) per element, dominated here by
 * the outlier blocks; e.g. Q8_0 ~0.010). Also checks F16 / BF16
 * per-element rounding bounds. */
static void test_roundtrip_rms(void **s)
{
    (void)s;
    const int64_t n = 256 * 64;
    float *x = make_data(n, 2), *y = xmalloc(n * sizeof(float));
    uint8_t *buf = xmalloc(quant_row_bytes(GGML_TYPE_F32, n));
    const struct { uint32_t type; double max_rel_rms; } cases[] = {
        {GGML_TYPE_F32, 0},       {GGML_TYPE_F16, 1e-3},    {GGML_TYPE_BF16, 5e-3},
        {GGML_TYPE_Q8_0, 0.013},  {GGML_TYPE_Q6_K, 0.04},   {GGML_TYPE_Q5_K, 0.065},
        {GGML_TYPE_Q4_0, 0.14},   {GGML_TYPE_Q4_K, 0.135},
    };
    /* every row of the traits table has its bound here */
    for (size_t i = 0; quant_traits_at(i); i++) {
        bool found = false;
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            found |= cases[c].type == quant_traits_at(i)->type;
        if (!found)
            fail_msg("traits row %s has no error bound in test_roundtrip_rms", quant_traits_at(i)->name);
    }
    double sx = 0;
    for (int64_t i = 0; i < n; i++)
        sx += (double)x[i] * x[i];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        uint32_t t = cases[c].type;
        assert_true(quant_can_quantize(t));
        assert_int_equal(quant_quantize(t, x, buf, n), 0);
        assert_int_equal(quant_dequantize(t, buf, y, n), 0);
        double se = 0, worst_block = 0;
        uint32_t be = ggml_type_block_elems(t) < 32 ? 32 : ggml_type_block_elems(t);
        for (int64_t b = 0; b < n / be; b++) {
            double bx = 0, bs = 0;
            for (uint32_t i = 0; i < be; i++) {
                double e = (double)x[b * be + i] - y[b * be + i];
                bs += e * e;
                bx += (double)x[b * be + i] * x[b * be + i];
            }
            se += bs;
            if (bx > 0 && sqrt(bs / bx) > worst_block)
                worst_block = sqrt(bs / bx);
            if (bx == 0)
                assert_true(bs == 0); /* zero blocks stay exactly zero */
        }
        double rel = sqrt(se / sx);
        printf("  %-5s rel rms err %.4f (bound %.3g), worst block %.4f\n", ggml_type_name(t), rel,
               cases[c].max_rel_rms, worst_block);
        assert_true(rel <= cases[c].max_rel_rms);
        if (t == GGML_TYPE_F16 || t == GGML_TYPE_BF16) {
            float ulp = t == GGML_TYPE_F16 ? 0x1p-11f : 0x1p-8f;
            for (int64_t i = 0; i < n; i++)
                assert_true(fabsf(x[i] - y[i]) <= fabsf(x[i]) * ulp + 0x1p-25f);
        }
    }
    free(x);
    free(y);
    free(buf);
}

static void test_bad_arguments(void **s)
{
    (void)s;
    float x[64] = {0}, y[64];
    uint8_t buf[512] = {0};
    assert_int_equal(quant_dequantize(GGML_TYPE_Q8_0, buf, y, 33), -1);
    assert_int_equal(quant_dequantize(GGML_TYPE_Q4_K, buf, y, 64), -1);
    assert_int_equal(quant_dequantize(GGML_TYPE_Q4_1, buf, y, 32), -1);
    assert_int_equal(quant_dequantize(99, buf, y, 32), -1);
    assert_int_equal(quant_quantize(GGML_TYPE_Q4_0, x, buf, 48), -1);
    assert_int_equal(quant_quantize(GGML_TYPE_Q2_K, x, buf, 256), -1);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q4_K, 512), 288);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q8_0, 64), 68);
    assert_int_equal(quant_row_bytes(GGML_TYPE_Q8_0, 65), 0);
    assert_int_equal(quant_row_bytes(GGML_TYPE_F16, 3), 6);
    assert_int_equal(quant_row_bytes(77, 32), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_f32_loads),
        cmocka_unit_test(test_zoo_f16),
        cmocka_unit_test(test_zoo_bf16),
        cmocka_unit_test(test_zoo_q8_0),
        cmocka_unit_test(test_zoo_q4_0),
        cmocka_unit_test(test_zoo_q4_k_m),
        cmocka_unit_test(test_zoo_q5_k_m),
        cmocka_unit_test(test_zoo_q6_k),
        cmocka_unit_test(test_quantize_q8_0_matches),
        cmocka_unit_test(test_quantize_q4_0_matches),
        cmocka_unit_test(test_quantize_f16_matches),
        cmocka_unit_test(test_quantize_bf16_matches),
        cmocka_unit_test(test_fp16_against_compiler),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_roundtrip_q8_0_q4_0),
        cmocka_unit_test(test_roundtrip_rms),
        cmocka_unit_test(test_bad_arguments),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
