/* Tests for worker/kernels/lowrank: a LoRA pair's update of some batch rows.
 *
 * lowrank_add (the base's float matmul kernels, three moves) against
 * lowrank_add_ref (scalar, double accumulation) on random A, B, X, Y for
 * ranks 1, 8, 64, row counts 1, 5, 70 (70 takes sgemm) and scattered rows.
 * Tolerance (float accumulation over in + r ≤ 160 products of unit-size
 * terms, ~1e-6 relative each): max |y - y_ref| <= 2e-5 * max(1, max |y_ref|).
 * Rows not listed must be untouched (bit for bit), and a row's result must
 * not depend on which other rows are updated with it (bit for bit up to 64
 * rows: the float kernels are row-independent).
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
#include "worker/kernels/lowrank.h"

static void fill(float *x, size_t n, uint64_t seed, float sd)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(((double)(splitmix64_next(&seed) >> 11) * 0x1p-53 * 2.0 - 1.0) * sd);
}

static lowrank_t make_pair(int r, int in, int out, float **A, float **B, uint64_t seed)
{
    *A = malloc((size_t)r * in * sizeof(float));
    *B = malloc((size_t)out * r * sizeof(float));
    fill(*A, (size_t)r * in, seed, 1.0f / sqrtf((float)in));
    fill(*B, (size_t)out * r, seed ^ 77, 1.0f / sqrtf((float)r));
    return (lowrank_t){.rank = r, .factor = 1,
                       .a = {.type = GGML_TYPE_F32, .rows = r, .cols = in, .row_bytes = (size_t)in * 4,
                             .data = (const uint8_t *)*A},
                       .b = {.type = GGML_TYPE_F32, .rows = out, .cols = r, .row_bytes = (size_t)r * 4,
                             .data = (const uint8_t *)*B}};
}

static void test_against_ref(void **state)
{
    (void)state;
    const int in = 96, out = 80, R = 80;
    const int ranks[] = {1, 8, 64}, counts[] = {1, 5, 70};
    matmul_t *mm = matmul_new(in > 64 ? in : 64, 2);
    float *x = malloc((size_t)R * in * sizeof(float)), *y0 = malloc((size_t)R * out * sizeof(float));
    float *y = malloc((size_t)R * out * sizeof(float)), *yr = malloc((size_t)R * out * sizeof(float));
    lowrank_scratch_t scr = {malloc((size_t)R * in * 4), malloc((size_t)R * 64 * 4), malloc((size_t)R * out * 4)};
    fill(x, (size_t)R * in, 1, 1.0f);
    fill(y0, (size_t)R * out, 2, 1.0f);
    for (size_t ri = 0; ri < sizeof ranks / sizeof ranks[0]; ri++) {
        float *A, *B;
        lowrank_t lr = make_pair(ranks[ri], in, out, &A, &B, 10 + ri);
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
            const int n = counts[ci];
            int32_t rows[80];
            for (int j = 0; j < n; j++) /* scattered, descending for variety */
                rows[j] = (int32_t)((R - 1 - (int64_t)j * 7 % R + R) % R);
            /* distinct rows: with n = 70 and step 7 mod 80 they are (gcd 1) */
            memcpy(y, y0, (size_t)R * out * sizeof(float));
            memcpy(yr, y0, (size_t)R * out * sizeof(float));
            assert_int_equal(lowrank_add(mm, &lr, 0.75f, x, in, rows, n, y, out, &scr), 0);
            lowrank_add_ref(&lr, 0.75f, x, in, rows, n, yr, out);
            double worst = 0, scale = 1;
            for (size_t i = 0; i < (size_t)R * out; i++)
                scale = fmax(scale, fabs((double)yr[i]));
            for (size_t i = 0; i < (size_t)R * out; i++)
                worst = fmax(worst, fabs((double)y[i] - (double)yr[i]));
            if (worst > 2e-5 * scale)
                fail_msg("rank %d, %d rows: max |y - ref| = %g > %g", ranks[ri], n, worst, 2e-5 * scale);
            /* untouched rows stay bit-equal */
            for (int r = 0; r < R; r++) {
                int listed = 0;
                for (int j = 0; j < n; j++)
                    listed |= rows[j] == r;
                if (!listed)
                    assert_memory_equal(y + (size_t)r * out, y0 + (size_t)r * out, (size_t)out * sizeof(float));
            }
            /* row independence: each row alone gives the same bits (<= 64 rows) */
            if (n <= 64)
                for (int j = 0; j < n; j++) {
                    float one[80];
                    memcpy(one, y0 + (size_t)rows[j] * out, sizeof one);
                    int32_t zero = 0;
                    assert_int_equal(lowrank_add(mm, &lr, 0.75f, x + (size_t)rows[j] * in, in, &zero, 1, one, out,
                                                 &scr), 0);
                    assert_memory_equal(one, y + (size_t)rows[j] * out, sizeof one);
                }
        }
        free(A);
        free(B);
    }
    free(x);
    free(y0);
    free(y);
    free(yr);
    free(scr.xg);
    free(scr.t);
    free(scr.d);
    matmul_free(&mm);
}

static void test_bad_args(void **state)
{
    (void)state;
    float *A, *B, x[8] = {0}, y[8] = {0};
    lowrank_t lr = make_pair(2, 8, 8, &A, &B, 3);
    matmul_t *mm = matmul_new(64, 1);
    lowrank_scratch_t scr = {malloc(64 * 4), malloc(64 * 4), malloc(64 * 4)};
    int32_t row = 0;
    assert_int_equal(lowrank_add(mm, &lr, 1, x, 8, &row, -1, y, 8, &scr), -1);
    lowrank_t bad = lr;
    bad.a.type = GGML_TYPE_F16;
    assert_int_equal(lowrank_add(mm, &bad, 1, x, 8, &row, 1, y, 8, &scr), -1);
    bad = lr;
    bad.b.cols = 3; /* B's width is not A's rank */
    assert_int_equal(lowrank_add(mm, &bad, 1, x, 8, &row, 1, y, 8, &scr), -1);
    assert_int_equal(lowrank_add(mm, &lr, 1, x, 8, &row, 0, y, 8, &scr), 0);
    free(scr.xg);
    free(scr.t);
    free(scr.d);
    free(A);
    free(B);
    matmul_free(&mm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_ref),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
