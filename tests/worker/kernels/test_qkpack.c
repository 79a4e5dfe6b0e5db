/* Unit tests for packed Q4_0 / Q4_K / Q5_K / Q6_K weights (worker/kernels/
 * qkpack.{h,c} through qgemm_pack and qgemm).
 *
 * Claims checked:
 *   - bit for bit (memcmp of the float outputs): for every type and every
 *     kernel ISA this CPU has (AVX2, AVX-VNNI, AVX512-VNNI; each missing one
 *     is reported and skipped), qgemm with the packing equals qgemm's scalar
 *     path on the file's blocks (the reference kernel), for n_out not a
 *     multiple of 8, Q4_0 rows whose block count is not a multiple of 8,
 *     n_rows 1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 37, 70 and 512 (the tile
 *     edges of every ISA: 4-row tiles on AVX2 / AVX-VNNI, 8-row ones on
 *     AVX512-VNNI, and a prefill step's 512; AVX2 Q6_K above 32 rows reads
 *     W, restored for it),
 *     random quant bytes (every quant value, every 6-bit scale and min,
 *     Q6_K scales down to -128);
 *   - batch invariance: each X row computed alone gives the bits it has in
 *     the batch, for every ISA;
 *   - the kernels really read the packing: W's bytes are overwritten after
 *     packing and the packed results do not change;
 *   - against the float reference (double Σ dequantized w · x): every output
 *     within the int8-activation bound of qgemm.h,
 *     |y − ref| ≤ Σ_blocks (max|x_block| / 254) · Σ_block |w| + 1e-5 · Σ|w·x|;
 *   - the packing is deterministic (qgemm_pack twice, 1 and 2 threads:
 *     same bytes) and refuses a K-quant n_in that is not a multiple of 256.
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

#include "common/clock.h"
#include "common/xalloc.h"
#include "worker/kernels/qblock.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/qkpack.h"
#include "worker/kernels/quant.h"
#include "common/text/gguf.h"
#include "tests/worker/kernels/qgemm_testdata.h"

static const uint32_t TYPES[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};

static uint16_t f16_in(uint64_t *s, double lo, double hi)
{
    return quant_fp32_to_fp16((float)(lo + (hi - lo) * rng_unit(s)));
}

/* n_out rows of n_in: random bytes with every f16 scale set to a sane value
 * (random bits there would be inf/NaN weights). */
static uint8_t *w_random(uint32_t type, int64_t n_out, int64_t n_in, uint64_t seed)
{
    size_t rb = quant_row_bytes(type, n_in), n = rb * (size_t)n_out;
    uint8_t *w = xmalloc(n);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)rng_next(&s);
    size_t nblk = n / ggml_type_block_bytes(type);
    for (size_t i = 0; i < nblk; i++) {
        switch (type) {
        case GGML_TYPE_Q4_0:
            ((qblock_q4_0_t *)w)[i].d = f16_in(&s, 1e-2, 5e-2) | (uint16_t)((rng_next(&s) & 1) << 15);
            break;
        case GGML_TYPE_Q4_K:
            ((qblock_q4_k_t *)w)[i].d = f16_in(&s, 1e-4, 2e-3);
            ((qblock_q4_k_t *)w)[i].dmin = f16_in(&s, 1e-4, 2e-3);
            break;
        case GGML_TYPE_Q5_K:
            ((qblock_q5_k_t *)w)[i].d = f16_in(&s, 1e-4, 2e-3);
            ((qblock_q5_k_t *)w)[i].dmin = f16_in(&s, 1e-4, 2e-3);
            break;
        case GGML_TYPE_Q6_K: ((qblock_q6_k_t *)w)[i].d = f16_in(&s, 1e-5, 2e-4); break;
        }
    }
    return w;
}

static float *run(qgemm_ctx_t *ctx, qgemm_isa_t isa, uint32_t type, const uint8_t *w, const void *packed,
                  int64_t n_out, int64_t n_in, const float *x, int n_rows)
{
    assert_int_equal(qgemm_set_isa(ctx, isa), 0);
    float *y = xmalloc((size_t)n_rows * (size_t)n_out * sizeof(float));
    memset(y, 0xff, (size_t)n_rows * (size_t)n_out * sizeof(float));
    qgemm_mat_t m = {.type = type, .w = w, .n_out = n_out, .y = y, .packed = packed};
    assert_int_equal(qgemm_multi(ctx, &m, 1, n_in, x, n_rows), 0);
    return y;
}

/* |y - ref| within the int8-activation bound (qgemm.h, Accuracy). */
static void check_float_reference(uint32_t type, const uint8_t *w, int64_t n_out, int64_t n_in, const float *x,
                                  int n_rows, const float *y)
{
    size_t rb = quant_row_bytes(type, n_in);
    float *wf = xmalloc((size_t)n_in * sizeof(float));
    double worst = 0;
    for (int64_t c = 0; c < n_out; c++) {
        assert_int_equal(quant_dequantize(type, w + (size_t)c * rb, wf, n_in), 0);
        for (int r = 0; r < n_rows; r++) {
            const float *xr = x + (int64_t)r * n_in;
            double ref = 0, mag = 0, bound = 0;
            for (int64_t b = 0; b < n_in / 32; b++) {
                double amax = 0, wsum = 0;
                for (int i = 0; i < 32; i++) {
                    int64_t e = 32 * b + i;
                    ref += (double)wf[e] * xr[e];
                    mag += fabs((double)wf[e] * xr[e]);
                    amax = fmax(amax, fabs(xr[e]));
                    wsum += fabs(wf[e]);
                }
                bound += amax / 254 * wsum;
            }
            double tol = bound + 1e-5 * mag + 1e-30;
            double err = fabs(y[(int64_t)r * n_out + c] - ref);
            if (err > tol)
                fail_msg("type %s col %lld row %d: y %.9g ref %.9g err %.3g > tol %.3g", ggml_type_name(type),
                         (long long)c, r, y[(int64_t)r * n_out + c], ref, err, tol);
            worst = fmax(worst, err / tol);
        }
    }
    assert_true(worst <= 1.0);
    free(wf);
}

/* Packed == scalar reference for every ISA, batch invariance, W garbage. */
static void check_type_shape(qgemm_ctx_t *ctx, uint32_t type, int64_t n_out, int64_t n_in, uint64_t seed)
{
    const int rows_list[] = {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 37, 70, 512};
    const int max_rows = 512;
    uint8_t *w = w_random(type, n_out, n_in, seed);
    size_t wbytes = quant_row_bytes(type, n_in) * (size_t)n_out;
    void *packed = qgemm_pack(type, w, n_out, n_in, 2);
    assert_non_null(packed);
    float *x = activations(max_rows, n_in, seed + 1);
    float *ref = run(ctx, QGEMM_ISA_SCALAR, type, w, NULL, n_out, n_in, x, max_rows);
    check_float_reference(type, w, n_out, n_in, x, max_rows, ref);
    /* after this, only the packing holds the weights for the SIMD kernels */
    uint8_t *wsave = xmalloc(wbytes);
    memcpy(wsave, w, wbytes);
    memset(w, 0x5a, wbytes);
    for (size_t ii = 0; ii < N_VECTOR_ISAS; ii++) {
        if (!isa_runs(VECTOR_ISAS[ii]))
            continue;
        for (size_t ri = 0; ri < sizeof rows_list / sizeof rows_list[0]; ri++) {
            int n_rows = rows_list[ri];
            /* AVX2 Q6_K above 32 rows reads W, not the packing (qgemm.c) */
            bool reads_w = type == GGML_TYPE_Q6_K && VECTOR_ISAS[ii] == QGEMM_ISA_AVX2 && n_rows > 32;
            if (reads_w)
                memcpy(w, wsave, wbytes);
            float *y = run(ctx, VECTOR_ISAS[ii], type, w, packed, n_out, n_in, x, n_rows);
            if (reads_w)
                memset(w, 0x5a, wbytes);
            if (memcmp(y, ref, (size_t)n_rows * (size_t)n_out * sizeof(float)) != 0)
                fail_msg("%s %s n_out %lld n_in %lld rows %d: packed differs from the scalar reference",
                         ggml_type_name(type), qgemm_isa_name(VECTOR_ISAS[ii]), (long long)n_out, (long long)n_in,
                         n_rows);
            free(y);
        }
        /* each row alone == the same row in the batch of 512 */
        for (int r = 0; r < max_rows; r += 37) {
            float *y = run(ctx, VECTOR_ISAS[ii], type, w, packed, n_out, n_in, x + (int64_t)r * n_in, 1);
            assert_memory_equal(y, ref + (int64_t)r * n_out, (size_t)n_out * sizeof(float));
            free(y);
        }
    }
    free(ref);
    free(x);
    free(wsave);
    free(w);
    qgemm_pack_free(&packed);
}

static void test_packed_bit_exact(void **state)
{
    (void)state;
    if (!qgemm_avx2_available()) {
        print_message("  skip: no AVX2 + F16C, packed weights are never read\n");
        return;
    }
    qgemm_ctx_t *ctx = qgemm_ctx_new(512, 2048);
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        bool k = TYPES[t] != GGML_TYPE_Q4_0;
        check_type_shape(ctx, TYPES[t], 37, k ? 512 : 96, 100 + t);   /* ragged columns; Q4_0: 3 blocks */
        check_type_shape(ctx, TYPES[t], 16, k ? 2048 : 2016, 200 + t); /* Q4_0: 63 blocks */
    }
    qgemm_ctx_free(&ctx);
}

/* Quantized (not random-byte) weights of the model shapes, several threads
 * and matrices in one call: still the scalar bits. */
static void test_multi_quantized(void **state)
{
    (void)state;
    if (!qgemm_avx2_available())
        return;
    const int64_t n_in = 768;
    qgemm_ctx_t *ctx = qgemm_ctx_new(9, n_in);
    assert_int_equal(qgemm_set_threads(ctx, 2), 0);
    uint8_t *ws[4];
    void *ps[4];
    float *ys[4], *refs[4];
    qgemm_mat_t mats[4];
    const int64_t n_out = 40;
    float *x = activations(9, n_in, 7);
    for (int i = 0; i < 4; i++) {
        ws[i] = weights_quantized(TYPES[i], n_out, n_in, 50 + (uint64_t)i);
        ps[i] = qgemm_pack(TYPES[i], ws[i], n_out, n_in, 1);
        void *p2 = qgemm_pack(TYPES[i], ws[i], n_out, n_in, 2);
        assert_memory_equal(ps[i], p2, qgemm_packed_size(TYPES[i], n_out, n_in));
        qgemm_pack_free(&p2);
        refs[i] = run(ctx, QGEMM_ISA_SCALAR, TYPES[i], ws[i], NULL, n_out, n_in, x, 9);
        ys[i] = xmalloc(9 * (size_t)n_out * sizeof(float));
        mats[i] = (qgemm_mat_t){.type = TYPES[i], .w = ws[i], .n_out = n_out, .y = ys[i], .packed = ps[i]};
    }
    for (size_t ii = 0; ii < N_VECTOR_ISAS; ii++) {
        if (!isa_runs(VECTOR_ISAS[ii]))
            continue;
        assert_int_equal(qgemm_multi(ctx, mats, 4, n_in, x, 9), 0);
        for (int i = 0; i < 4; i++)
            assert_memory_equal(ys[i], refs[i], 9 * (size_t)n_out * sizeof(float));
    }
    for (int i = 0; i < 4; i++) {
        free(ws[i]);
        qgemm_pack_free(&ps[i]);
        free(ys[i]);
        free(refs[i]);
    }
    free(x);
    qgemm_ctx_free(&ctx);
}

/* The wide tiles of AVX512-VNNI (64-column units of 8 panels; taken here
 * from 16 rows, qgemm_set_wide_kblocks(…, true), where the model's batches
 * take them only past qkpack_wide_pays):
 * units whose last panel is short (n_out 61), units followed by pairs and a
 * lone panel (100, 136), tiles of 3, 2 and 1 rows, and W
 * rows run in several block ranges (kblocks 8 and 16: accumulators parked
 * in y between ranges; Q4_0 with 63 blocks, a short last range) all give
 * the scalar reference's bits. With 2 threads, units on both. Q6_K,
 * which the wide tiles do not take (qkpack_wide_supported), runs the same
 * shapes on its 16-column kernel. */
static void test_wide_tiles(void **state)
{
    (void)state;
    if (!isa_runs(QGEMM_ISA_AVX512VNNI))
        return; /* isa_runs printed the skip */
    static const int64_t N_OUT[] = {61, 100, 136};
    static const int ROWS[] = {16, 17, 18, 19, 40};
    static const int64_t KB[] = {0, 8, 16}; /* 0: the default ranges */
    const int max_rows = 40;
    qgemm_ctx_t *ctx = qgemm_ctx_new(max_rows, 2048);
    assert_int_equal(qgemm_set_threads(ctx, 2), 0);
    assert_int_equal(qgemm_set_wide_kblocks(ctx, 12, true), -1); /* not a multiple of 8 */
    assert_int_equal(qgemm_set_wide_kblocks(ctx, 1024, true), -1); /* more than the scratch holds */
    for (size_t t = 0; t < sizeof TYPES / sizeof TYPES[0]; t++) {
        const uint32_t type = TYPES[t];
        const int64_t n_in = type == GGML_TYPE_Q4_0 ? 2016 : 768;
        for (size_t o = 0; o < sizeof N_OUT / sizeof N_OUT[0]; o++) {
            const int64_t n_out = N_OUT[o];
            uint8_t *w = w_random(type, n_out, n_in, 300 + 10 * t + o);
            void *packed = qgemm_pack(type, w, n_out, n_in, 2);
            assert_non_null(packed);
            float *x = activations(max_rows, n_in, 400 + t + o);
            float *ref = run(ctx, QGEMM_ISA_SCALAR, type, w, NULL, n_out, n_in, x, max_rows);
            memset(w, 0x5a, quant_row_bytes(type, n_in) * (size_t)n_out);
            for (size_t k = 0; k < sizeof KB / sizeof KB[0]; k++) {
                assert_int_equal(qgemm_set_wide_kblocks(ctx, KB[k] ? KB[k] : 64, true), 0);
                for (size_t ri = 0; ri < sizeof ROWS / sizeof ROWS[0]; ri++) {
                    float *y = run(ctx, QGEMM_ISA_AVX512VNNI, type, w, packed, n_out, n_in, x, ROWS[ri]);
                    if (memcmp(y, ref, (size_t)ROWS[ri] * (size_t)n_out * sizeof(float)) != 0)
                        fail_msg("%s wide n_out %lld n_in %lld rows %d kblocks %lld: differs from the scalar "
                                 "reference", ggml_type_name(type), (long long)n_out, (long long)n_in, ROWS[ri],
                                 (long long)KB[k]);
                    free(y);
                }
            }
            free(ref);
            free(x);
            free(w);
            qgemm_pack_free(&packed);
        }
    }
    qgemm_ctx_free(&ctx);
}

/* The rule that sends a batch to the wide tiles (qkpack.h): Q4_0 and Q4_K
 * once X outgrows the L2 (1.1B shapes: a 512-row prefill of 2048 inputs, or
 * 192 rows of the 5632-input down projection; never a decode batch of 8-64
 * rows), Q5_K from 128 rows, Q6_K and Q8_0 never (Q8_0 has its own wide
 * kernel in qgemm.c). */
static void test_wide_rule(void **state)
{
    (void)state;
    assert_true(qkpack_wide_pays(GGML_TYPE_Q4_0, 512, 2048));
    assert_false(qkpack_wide_pays(GGML_TYPE_Q4_0, 511, 2048));
    assert_true(qkpack_wide_pays(GGML_TYPE_Q4_K, 192, 5632));
    assert_false(qkpack_wide_pays(GGML_TYPE_Q4_K, 64, 5632));
    assert_true(qkpack_wide_pays(GGML_TYPE_Q5_K, 128, 2048));
    assert_false(qkpack_wide_pays(GGML_TYPE_Q5_K, 127, 2048));
    assert_false(qkpack_wide_pays(GGML_TYPE_Q6_K, 512, 14336));
    assert_false(qkpack_wide_pays(GGML_TYPE_Q8_0, 512, 14336));
    assert_false(qkpack_wide_supported(GGML_TYPE_Q6_K));
    assert_true(qkpack_wide_supported(GGML_TYPE_Q4_K));
}

static void test_refusals(void **state)
{
    (void)state;
    assert_int_equal(qgemm_packed_size(GGML_TYPE_Q4_K, 8, 128), 0);  /* not a multiple of 256 */
    assert_int_equal(qgemm_packed_size(GGML_TYPE_Q6_K, 0, 256), 0);
    assert_int_equal(qgemm_packed_size(GGML_TYPE_Q4_0, 8, 48), 0);
    assert_int_equal(qgemm_packed_size(GGML_TYPE_Q2_K, 8, 256), 0);
    assert_true(qgemm_packed_size(GGML_TYPE_Q4_0, 8, 32) > 0);
    /* at most 6.75 bits per weight plus the 64-byte header and panel padding */
    size_t sz = qgemm_packed_size(GGML_TYPE_Q6_K, 2048, 2048);
    assert_true(sz <= 64 + (size_t)2048 * 2048 * 27 / 32);
}

/* ---- benchmark (QKPACK_BENCH=1) ------------------------------------------------ */

static double best_us(int reps, qgemm_ctx_t *ctx, const qgemm_mat_t *m, int64_t n_in, const float *x, int n_rows)
{
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        int64_t t0 = clock_now_us();
        if (qgemm_multi(ctx, m, 1, n_in, x, n_rows) != 0)
            abort();
        double dt = (double)(clock_now_us() - t0);
        best = dt < best ? dt : best;
    }
    return best;
}

/* 2048x768 (ffn-up of the 110M shape), 1 thread: unpacked (AVX2 panel
 * fill per call) against packed with each ISA, best of interleaved runs.
 * Packed Q8_0 (qgemm_pack) comes first as the yardstick per weight. */
static void run_bench(void)
{
    static const int rows_all[] = {1, 4, 8, 16, 32, 64, 128};
    /* QKPACK_BENCH_ROWS=N: that one row count instead (up to 512: a prefill step) */
    const int rows_one = getenv("QKPACK_BENCH_ROWS") ? atoi(getenv("QKPACK_BENCH_ROWS")) : 0;
    if (rows_one < 0 || rows_one > 512)
        abort();
    const int *rows = rows_one ? &rows_one : rows_all;
    const size_t n_rowsets = rows_one ? 1 : sizeof rows_all / sizeof *rows_all;
    const int max_rows = rows_one > 128 ? rows_one : 128;
    static const uint32_t BTYPES[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    int reps = getenv("QKPACK_BENCH_REPS") ? atoi(getenv("QKPACK_BENCH_REPS")) : 30;
    /* QKPACK_BENCH_OUT: another n_out (e.g. 65536: weights from DRAM) */
    /* QKPACK_BENCH_IN: another n_in (a multiple of 256); QKPACK_BENCH_THREADS */
    const int64_t n_out = getenv("QKPACK_BENCH_OUT") ? atoll(getenv("QKPACK_BENCH_OUT")) : 2048;
    const int64_t n_in = getenv("QKPACK_BENCH_IN") ? atoll(getenv("QKPACK_BENCH_IN")) : 768;
    const int n_thr = getenv("QKPACK_BENCH_THREADS") ? atoi(getenv("QKPACK_BENCH_THREADS")) : 1;
    if (n_out < 8 || n_out > 1 << 20 || n_in < 256 || n_in > 1 << 16 || n_in % 256 != 0 || n_thr < 1 || n_thr > 64)
        abort();
    qgemm_ctx_t *ctx = qgemm_ctx_new(max_rows, n_in);
    qgemm_set_threads(ctx, n_thr);
    printf("%lldx%lld, %d thread(s), best of %d interleaved (us)\n", (long long)n_out, (long long)n_in, n_thr,
           reps);
    printf("%-5s %4s %10s %10s %10s %10s\n", "type", "rows", "unpacked", "avx2", "avxvnni", "avx512vnni");
    const char *only = getenv("QKPACK_BENCH_TYPE");
    for (size_t t = 0; t < sizeof BTYPES / sizeof BTYPES[0]; t++) {
        if (only && strcmp(only, ggml_type_name(BTYPES[t])) != 0)
            continue;
        uint8_t *w = weights_quantized(BTYPES[t], n_out, n_in, 5);
        void *p = qgemm_pack(BTYPES[t], w, n_out, n_in, 1);
        float *x = activations(max_rows, n_in, 6);
        float *y = xmalloc((size_t)max_rows * (size_t)n_out * sizeof(float));
        for (size_t r = 0; r < n_rowsets; r++) {
            qgemm_mat_t mu = {.type = BTYPES[t], .w = w, .n_out = n_out, .y = y};
            qgemm_mat_t mp = mu;
            mp.packed = p;
            double tb[4] = {1e30, 1e30, 1e30, 1e30};
            for (int round = 0; round < 3; round++)
                for (int k = 0; k < 4; k++) {
                    qgemm_isa_t isa = k == 0 ? QGEMM_ISA_AVX2 : VECTOR_ISAS[k - 1];
                    if (qgemm_set_isa(ctx, isa) != 0)
                        continue;
                    double a = best_us(reps / 3 + 1, ctx, k == 0 ? &mu : &mp, n_in, x, rows[r]);
                    tb[k] = a < tb[k] ? a : tb[k];
                }
            printf("%-5s %4d %10.1f %10.1f %10.1f %10.1f\n", ggml_type_name(BTYPES[t]), rows[r], tb[0], tb[1], tb[2],
                   tb[3]);
        }
        qgemm_pack_free(&p);
        free(w);
        free(x);
        free(y);
    }
    qgemm_ctx_free(&ctx);
}

int main(void)
{
    if (getenv("QKPACK_BENCH")) {
        run_bench();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_packed_bit_exact),
        cmocka_unit_test(test_multi_quantized),
        cmocka_unit_test(test_wide_tiles),
        cmocka_unit_test(test_wide_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
