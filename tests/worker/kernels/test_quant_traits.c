/* Unit tests for the quant-type traits table (worker/kernels/quant.h) and
 * the ggml type table (common/text/ggml_type.h), driven by the tables
 * themselves: every traits row is checked, so a new row is tested without
 * editing this file.
 *
 * Per row:
 *   - its format columns agree with ggml_type.h (name both ways, block
 *     elements and bytes, quant_row_bytes);
 *   - quantize then dequantize of Gaussian data stays within the error a
 *     format of its width allows: for block formats relative RMS error ≤
 *     2^-(bits-1) with bits = 8 · block_bytes / block_elems rounded down
 *     (a b-bit grid over ±3σ has steps of ≈ 2^-(b-2.6)σ, RMS error a step
 *     / √12); for float formats ≤ 2^-8 (bf16 keeps 8 significant bits).
 *     Loose on purpose: it catches a row wired to the wrong functions, not
 *     a quantizer that is 10 % worse (test_quant holds those);
 *   - the int8 column: qgemm_supported says the same, and qgemm on a
 *     16 × 512 matrix is within qgemm.h's documented bound of the float dot
 *     product with the dequantized weights (the independent reference):
 *       |y − Σ w·x| ≤ Σ_blocks (max|x_block| / 254) · Σ_block |w| + 1e-4 · Σ|w·x|;
 *   - the packed column: qgemm_packed_size is non-zero exactly for packed
 *     rows, and qgemm with the packing gives the bits of qgemm without it.
 * Every ggml type without a row is refused by all of them.
 * Runs in well under a second.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/splitmix.h"
#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"

static double gauss(uint64_t *s)
{
    double u1 = ((double)(splitmix64_next(s) >> 11) + 1.0) * 0x1p-53;
    double u2 = (double)(splitmix64_next(s) >> 11) * 0x1p-53;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static void test_rows_agree_with_ggml_types(void **state)
{
    (void)state;
    size_t n_rows = 0;
    for (size_t i = 0; quant_traits_at(i); i++, n_rows++) {
        const quant_traits_t *t = quant_traits_at(i);
        assert_ptr_equal(quant_traits(t->type), t);
        assert_true(ggml_type_supported(t->type));
        assert_true(quant_can_dequantize(t->type) && quant_can_quantize(t->type));
        assert_string_equal(ggml_type_name(t->type), t->name);
        uint32_t back = 9999;
        assert_int_equal(ggml_type_from_name(t->name, &back), 0);
        assert_int_equal(back, t->type);
        assert_int_equal(ggml_type_block_elems(t->type), t->block_elems);
        assert_int_equal(ggml_type_block_bytes(t->type), t->block_bytes);
        assert_int_equal(quant_row_bytes(t->type, 3 * (int64_t)t->block_elems), 3 * (size_t)t->block_bytes);
        assert_non_null(t->dequantize);
        assert_non_null(t->quantize);
    }
    assert_true(n_rows >= 1);
    /* every other type number: no row, refused everywhere */
    size_t n_supported = 0;
    for (uint32_t type = 0; type < GGML_TYPE_COUNT + 8; type++) {
        if (quant_traits(type)) {
            n_supported++;
            continue;
        }
        assert_false(ggml_type_supported(type));
        assert_false(quant_can_dequantize(type));
        assert_false(qgemm_supported(type));
        assert_int_equal(qgemm_packed_size(type, 8, 256), 0);
        float x[256] = {0}, y[256];
        uint8_t buf[1024];
        assert_int_equal(quant_quantize(type, x, buf, 256), -1);
        assert_int_equal(quant_dequantize(type, buf, y, 256), -1);
    }
    assert_int_equal(n_supported, n_rows);
}

static void test_round_trip(void **state)
{
    (void)state;
    for (size_t i = 0; quant_traits_at(i); i++) {
        const quant_traits_t *t = quant_traits_at(i);
        const int64_t n = 4 * (int64_t)(t->block_elems < 256 ? 256 : t->block_elems);
        float *x = xmalloc((size_t)n * sizeof(float)), *y = xmalloc((size_t)n * sizeof(float));
        uint8_t *q = xmalloc(quant_row_bytes(t->type, n));
        uint64_t s = 42 + t->type;
        for (int64_t k = 0; k < n; k++)
            x[k] = (float)gauss(&s);
        assert_int_equal(quant_quantize(t->type, x, q, n), 0);
        assert_int_equal(quant_dequantize(t->type, q, y, n), 0);
        double e2 = 0, x2 = 0;
        for (int64_t k = 0; k < n; k++) {
            e2 += ((double)y[k] - x[k]) * ((double)y[k] - x[k]);
            x2 += (double)x[k] * x[k];
        }
        int bits = (int)(8 * t->block_bytes / t->block_elems);
        /* floats (one element per block): at least bf16's 8 significant bits */
        double rel = sqrt(e2 / x2), bound = t->block_elems == 1 ? ldexp(1.0, -8) : ldexp(1.0, -(bits - 1));
        if (!(rel <= bound))
            fail_msg("%s: relative RMS round-trip error %.3g > %.3g", t->name, rel, bound);
        /* not a whole number of blocks: refused (types with blocks > 1) */
        if (t->block_elems > 1)
            assert_int_equal(quant_quantize(t->type, x, q, n - 1), -1);
        free(x);
        free(y);
        free(q);
    }
}

static void test_int8_and_packed_columns(void **state)
{
    (void)state;
    const int64_t n_out = 16, n_in = 512;
    const int n_rows = 5;
    qgemm_ctx_t *ctx = qgemm_ctx_new(n_rows, n_in);
    for (size_t i = 0; quant_traits_at(i); i++) {
        const quant_traits_t *t = quant_traits_at(i);
        assert_int_equal(qgemm_supported(t->type), t->int8 != QUANT_INT8_NONE);
        assert_int_equal(qgemm_packed_size(t->type, n_out, n_in) > 0, t->packed != QUANT_PACK_NONE);
        if (t->int8 == QUANT_INT8_NONE)
            continue;
        const size_t rb = quant_row_bytes(t->type, n_in);
        float *wf = xmalloc((size_t)(n_out * n_in) * sizeof(float)), *x = xmalloc((size_t)(n_rows * n_in) * sizeof(float));
        float *y = xmalloc((size_t)(n_rows * n_out) * sizeof(float)), *yp = xmalloc((size_t)(n_rows * n_out) * sizeof(float));
        uint8_t *w = xmalloc(rb * (size_t)n_out);
        uint64_t s = 7 + t->type;
        for (int64_t k = 0; k < n_out * n_in; k++)
            wf[k] = (float)gauss(&s);
        for (int64_t k = 0; k < n_rows * n_in; k++)
            x[k] = (float)gauss(&s);
        for (int64_t o = 0; o < n_out; o++)
            assert_int_equal(quant_quantize(t->type, wf + o * n_in, w + (size_t)o * rb, n_in), 0);
        for (int64_t o = 0; o < n_out; o++) /* the weights as the file holds them */
            assert_int_equal(quant_dequantize(t->type, w + (size_t)o * rb, wf + o * n_in, n_in), 0);
        assert_int_equal(qgemm(ctx, t->type, w, n_out, n_in, x, n_rows, y), 0);
        for (int r = 0; r < n_rows; r++)
            for (int64_t o = 0; o < n_out; o++) {
                double ref = 0, abs_wx = 0, bound = 0;
                for (int64_t b = 0; b < n_in / 32; b++) {
                    double amax = 0, sw = 0;
                    for (int k = 0; k < 32; k++) {
                        double xv = x[r * n_in + 32 * b + k], wv = wf[o * n_in + 32 * b + k];
                        ref += xv * wv;
                        abs_wx += fabs(xv * wv);
                        amax = fabs(xv) > amax ? fabs(xv) : amax;
                        sw += fabs(wv);
                    }
                    bound += amax / 254.0 * sw;
                }
                bound += 1e-4 * abs_wx;
                double got = y[r * n_out + o];
                if (!(fabs(got - ref) <= bound))
                    fail_msg("%s row %d col %lld: qgemm %.6g, float %.6g, bound %.3g", t->name, r, (long long)o, got,
                             ref, bound);
            }
        if (t->packed != QUANT_PACK_NONE) {
            void *pk = qgemm_pack(t->type, w, n_out, n_in, 1);
            assert_non_null(pk);
            qgemm_mat_t m = {.type = t->type, .w = w, .n_out = n_out, .y = yp, .packed = pk};
            assert_int_equal(qgemm_multi(ctx, &m, 1, n_in, x, n_rows), 0);
            assert_memory_equal(y, yp, (size_t)(n_rows * n_out) * sizeof(float));
            qgemm_pack_free(&pk);
        }
        free(wf);
        free(x);
        free(y);
        free(yp);
        free(w);
    }
    qgemm_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rows_agree_with_ggml_types),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_int8_and_packed_columns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
