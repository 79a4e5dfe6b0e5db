/* Unit tests for packed Q8_0 weights in worker/qgemm (qgemm_pack).
 *
 * Claims checked, all bit for bit (memcmp of the float outputs):
 *   - the packing holds exactly what qgemm.h documents: an independent
 *     decoder of the documented layout gets back every quant and f16 scale
 *     of W, and zeros for the padding columns; qgemm_pack_to and any thread
 *     count write the same bytes;
 *   - with a packing, qgemm_multi and qgemm_mat_cols give the same bits as
 *     without one (which test_qgemm.c checks against the scalar kernel and a
 *     double-precision reference), for n_out not a multiple of 8, n_rows
 *     1..40 (direct and panel paths), column ranges, several matrices in
 *     one call (packed mixed with unpacked, and with other types);
 *   - the AVX-512 wide tiles (prefill: 3 rows × 64 columns from 16 X
 *     rows) at their edges: rows 1..19 around the threshold and 512,
 *     n_out with a ragged last unit, 1 and 2 threads, column pieces;
 *   - all of that on every vector ISA this CPU runs (AVX2, AVX-VNNI,
 *     AVX-512 VNNI; the others are skipped with a message), against the
 *     scalar kernel on the unpacked W;
 *   - the vector kernels really read the packing: after packing, W's bytes
 *     are overwritten with garbage and the results do not change (the
 *     scalar kernels, which read W, are checked before that);
 *   - hostile shapes are refused (qgemm_packed_size 0, qgemm_pack NULL,
 *     Q4_0 / K-quant packings are tested in test_qkpack.c),
 *     qgemm_pack_to -1 with dst untouched),
 *     and a packing used with another shape or type, or a buffer that is
 *     not a packing, fails the call with -1 and writes nothing.
 *
 * QGEMM_PACK_BENCH=1 build/tests/worker/kernels/test_qgemm_pack times unpacked
 * against packed on the 110M llama shapes for 1..32 rows (1 thread);
 * QGEMM_PACK_BENCH=w1b the prefill case: packed Q8_0 at the 1.1B shapes
 * with 512 X rows (QGEMM_BENCH_ROWS), GOPS per CPU second against the
 * vpdpbusd peak of a dependency-free loop (QGEMM_BENCH_THREADS threads).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <omp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <immintrin.h>
#include <time.h>

#include "common/clock.h"
#include "common/xalloc.h"
#include "common/text/gguf.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"
#include "tests/worker/kernels/qgemm_testdata.h"


/* Q8_0 rows of random bytes (every quant value, -128 included) with sane
 * f16 scales of random sign. */
static uint8_t *q8_random(int64_t n_out, int64_t n_in, uint64_t seed)
{
    size_t rb = quant_row_bytes(GGML_TYPE_Q8_0, n_in), n = rb * (size_t)n_out;
    uint8_t *w = xmalloc(n);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)rng_next(&s);
    for (size_t off = 0; off < n; off += 34) {
        uint16_t h = quant_fp32_to_fp16((float)(1e-3 + 2e-2 * rng_unit(&s))) | (uint16_t)((rng_next(&s) & 1) << 15);
        w[off] = (uint8_t)h;
        w[off + 1] = (uint8_t)(h >> 8);
    }
    return w;
}


static bool avx2_ok(void)
{
    if (qgemm_avx2_available())
        return true;
    print_message("  (no AVX2 + F16C: packed weights are never read here; checking refusals only)\n");
    return false;
}

/* The documented layout (qgemm.h), decoded independently: header fields,
 * then for panel ip, block b, column c: q[256b + 32k + 4c + i] is quant
 * 4k+i of block b of row 8ip+c, dh[8b+c] its f16 scale. */
static void check_layout(const uint8_t *p, const uint8_t *w, int64_t n_out, int64_t n_in)
{
    uint32_t magic, type;
    int64_t h_out, h_in;
    uint64_t panel, total;
    memcpy(&magic, p, 4);
    memcpy(&type, p + 4, 4);
    memcpy(&h_out, p + 8, 8);
    memcpy(&h_in, p + 16, 8);
    memcpy(&panel, p + 24, 8);
    memcpy(&total, p + 32, 8);
    assert_memory_equal(&magic, "QGPK", 4);
    assert_int_equal(type, GGML_TYPE_Q8_0);
    assert_int_equal(h_out, n_out);
    assert_int_equal(h_in, n_in);
    const int64_t nb = n_in / 32, n_panels = (n_out + 7) / 8;
    assert_int_equal(panel, (uint64_t)((nb * 272 + 63) / 64 * 64));
    assert_int_equal(total, 64 + (uint64_t)n_panels * panel);
    assert_int_equal(total, qgemm_packed_size(GGML_TYPE_Q8_0, n_out, n_in));
    assert_int_equal((uintptr_t)p % 64, 0);
    size_t rb = quant_row_bytes(GGML_TYPE_Q8_0, n_in);
    for (int64_t ip = 0; ip < n_panels; ip++) {
        const uint8_t *q = p + 64 + (size_t)ip * panel, *dh = q + 256 * nb;
        for (int c = 0; c < 8; c++) {
            int64_t row = ip * 8 + c;
            for (int64_t b = 0; b < nb; b++) {
                const uint8_t *blk = row < n_out ? w + (size_t)row * rb + 34 * (size_t)b : NULL;
                for (int e = 0; e < 32; e++) {
                    uint8_t got = q[256 * b + 32 * (e / 4) + 4 * c + e % 4];
                    assert_int_equal(got, blk ? blk[2 + e] : 0);
                }
                for (int k = 0; k < 2; k++)
                    assert_int_equal(dh[2 * (8 * b + c) + k], blk ? blk[k] : 0);
            }
        }
        for (size_t o = 272 * (size_t)nb; o < panel; o++)
            assert_int_equal(q[o], 0);
    }
}

static void test_layout(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {{1, 32}, {7, 64}, {8, 96}, {13, 32}, {40, 768}, {3, 2048}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        int64_t n_out = shapes[i][0], n_in = shapes[i][1];
        uint8_t *w = q8_random(n_out, n_in, 100 + i);
        /* thread counts 1 and 3 build the same bytes */
        void *p1 = qgemm_pack(GGML_TYPE_Q8_0, w, n_out, n_in, 1);
        void *p3 = qgemm_pack(GGML_TYPE_Q8_0, w, n_out, n_in, 3);
        assert_non_null(p1);
        assert_non_null(p3);
        check_layout(p1, w, n_out, n_in);
        size_t sz = qgemm_packed_size(GGML_TYPE_Q8_0, n_out, n_in);
        assert_memory_equal(p1, p3, sz);
        /* qgemm_pack_to into a dirty caller buffer: the same bytes */
        uint8_t *to = xaligned_alloc(sz);
        memset(to, 0xa5, sz);
        assert_int_equal(qgemm_pack_to(GGML_TYPE_Q8_0, w, n_out, n_in, to, 2), 0);
        assert_memory_equal(to, p1, sz);
        free(to);
        qgemm_pack_free(&p1);
        qgemm_pack_free(&p3);
        assert_null(p1);
        free(w);
    }
    qgemm_pack_free(NULL);
}

/* y (n_rows, n_out) of one matrix through qgemm_multi. */
static void run1(qgemm_ctx_t *ctx, const uint8_t *w, const void *packed, int64_t n_out, int64_t n_in,
                 const float *x, int n_rows, float *y)
{
    qgemm_mat_t m = {.type = GGML_TYPE_Q8_0, .w = w, .n_out = n_out, .y = y, .packed = packed};
    assert_int_equal(qgemm_multi(ctx, &m, 1, n_in, x, n_rows), 0);
}

/* Packed == unpacked == scalar, for all n_rows up to 40, through qgemm_multi
 * and in column pieces through qgemm_mat_cols; then W is scrambled and the
 * packed results must not move. */
static void test_packed_equals_unpacked(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {{13, 96}, {40, 64}, {100, 768}, {21, 2048}, {1, 32}};
    const int max_rows = 40;
    qgemm_ctx_t *ctx = qgemm_ctx_new(max_rows, 2048), *sc = qgemm_ctx_new(max_rows, 2048);
    assert_int_equal(qgemm_set_threads(ctx, 3), 0);
    assert_int_equal(qgemm_set_isa(sc, QGEMM_ISA_SCALAR), 0);
    const bool avx2 = avx2_ok();
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int64_t n_out = shapes[si][0], n_in = shapes[si][1];
        for (int kind = 0; kind < 2; kind++) {
            uint8_t *w = kind == 0 ? q8_random(n_out, n_in, 7 + si) : weights_quantized(GGML_TYPE_Q8_0, n_out, n_in, 9 + si);
            void *packed = qgemm_pack(GGML_TYPE_Q8_0, w, n_out, n_in, 2);
            assert_non_null(packed);
            float *x = activations(max_rows, n_in, 11 + si);
            size_t ny = (size_t)max_rows * (size_t)n_out;
            float *ref = xmalloc(ny * sizeof(float)), *got = xmalloc(ny * sizeof(float));
            float *all = xmalloc((size_t)max_rows * ny * sizeof(float)); /* packed result per n_rows */
            for (size_t isa = 0; isa < N_VECTOR_ISAS; isa++) {
                if (!isa_runs(VECTOR_ISAS[isa]))
                    continue;
                assert_int_equal(qgemm_set_isa(ctx, VECTOR_ISAS[isa]), 0);
                for (int n_rows = 1; n_rows <= max_rows; n_rows++) {
                    size_t n = (size_t)n_rows * (size_t)n_out * sizeof(float);
                    run1(sc, w, NULL, n_out, n_in, x, n_rows, ref);
                    run1(sc, w, packed, n_out, n_in, x, n_rows, got); /* scalar: packed ignored */
                    assert_memory_equal(got, ref, n);
                    memset(got, 0xff, n);
                    run1(ctx, w, NULL, n_out, n_in, x, n_rows, got);
                    assert_memory_equal(got, ref, n);
                    memset(got, 0xff, n);
                    run1(ctx, w, packed, n_out, n_in, x, n_rows, got);
                    assert_memory_equal(got, ref, n);
                    memcpy(all + (size_t)(n_rows - 1) * ny, got, n);
                    /* column pieces of 8 or 16 (the last one ragged), thread 0..2 */
                    memset(got, 0xff, n);
                    qgemm_mat_t m = {.type = GGML_TYPE_Q8_0, .w = w, .n_out = n_out, .y = got, .packed = packed};
                    assert_int_equal(qgemm_quantize(ctx, x, n_rows, n_in), 0);
                    int piece = 0;
                    for (int64_t c0 = 0; c0 < n_out; piece++) {
                        int64_t c1 = c0 + 8 * (1 + piece % 2);
                        c1 = c1 < n_out ? c1 : n_out;
                        assert_int_equal(qgemm_mat_cols(ctx, &m, n_in, n_rows, c0, c1, piece % 3), 0);
                        c0 = c1;
                    }
                    assert_memory_equal(got, ref, n);
                }
            }
            assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AUTO), 0);
            /* W gone: the vector kernels must get everything from the packing
             * (ctx is on the best ISA here; every ISA matched scalar above) */
            if (avx2) {
                memset(w, 0x7f, quant_row_bytes(GGML_TYPE_Q8_0, n_in) * (size_t)n_out);
                for (int n_rows = 1; n_rows <= max_rows; n_rows++) {
                    size_t n = (size_t)n_rows * (size_t)n_out * sizeof(float);
                    memset(got, 0xff, n);
                    run1(ctx, w, packed, n_out, n_in, x, n_rows, got);
                    assert_memory_equal(got, all + (size_t)(n_rows - 1) * ny, n);
                }
            }
            qgemm_pack_free(&packed);
            free(w);
            free(x);
            free(ref);
            free(got);
            free(all);
        }
    }
    qgemm_ctx_free(&ctx);
    qgemm_ctx_free(&sc);
}

/* The AVX-512 wide tiles (3 rows × 64 columns, from 16 X rows: qgemm.c)
 * and their edges: row counts around the tile and the threshold (1, 7, 8,
 * 9, 16, 17, 18, 19, 512), n_out a multiple of 64, not one (a last unit of
 * pairs and a lone panel, a ragged last panel), n_in of 1, 3, 5 and 64
 * blocks, 1 and 2 threads, qgemm_multi and qgemm_mat_cols in pieces of
 * 64, 72 and 8 columns. Every vector ISA against the scalar kernel on the
 * unpacked W, bit for bit. */
static void test_wide_tiles(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {{64, 32}, {77, 96}, {200, 160}, {136, 2048}, {8, 64}, {1000, 32}};
    static const int rows[] = {1, 7, 8, 9, 16, 17, 18, 19, 512};
    const int max_rows = 512;
    qgemm_ctx_t *ctx = qgemm_ctx_new(max_rows, 2048), *sc = qgemm_ctx_new(max_rows, 2048);
    assert_int_equal(qgemm_set_isa(sc, QGEMM_ISA_SCALAR), 0);
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const int64_t n_out = shapes[si][0], n_in = shapes[si][1];
        uint8_t *w = q8_random(n_out, n_in, 50 + si);
        void *packed = qgemm_pack(GGML_TYPE_Q8_0, w, n_out, n_in, 2);
        assert_non_null(packed);
        float *x = activations(max_rows, n_in, 60 + si);
        const size_t ny = (size_t)max_rows * (size_t)n_out;
        float *ref = xmalloc(ny * sizeof(float)), *got = xmalloc(ny * sizeof(float));
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
            const int n_rows = rows[ri];
            /* the long shapes at 512 rows only with few columns: the scalar
             * reference is slow under sanitizers */
            if (n_rows == max_rows && n_out * n_in > 200 * 160)
                continue;
            const size_t n = (size_t)n_rows * (size_t)n_out * sizeof(float);
            run1(sc, w, NULL, n_out, n_in, x, n_rows, ref);
            for (size_t isa = 0; isa < N_VECTOR_ISAS; isa++) {
                if (!isa_runs(VECTOR_ISAS[isa]))
                    continue;
                assert_int_equal(qgemm_set_isa(ctx, VECTOR_ISAS[isa]), 0);
                for (int nt = 1; nt <= 2; nt++) {
                    assert_int_equal(qgemm_set_threads(ctx, nt), 0);
                    memset(got, 0xff, n);
                    run1(ctx, w, packed, n_out, n_in, x, n_rows, got);
                    assert_memory_equal(got, ref, n);
                }
                memset(got, 0xff, n);
                qgemm_mat_t m = {.type = GGML_TYPE_Q8_0, .w = w, .n_out = n_out, .y = got, .packed = packed};
                assert_int_equal(qgemm_quantize(ctx, x, n_rows, n_in), 0);
                static const int64_t pieces[] = {64, 72, 8};
                int piece = 0;
                for (int64_t c0 = 0; c0 < n_out; piece++) {
                    int64_t c1 = c0 + pieces[piece % 3];
                    c1 = c1 < n_out ? c1 : n_out;
                    assert_int_equal(qgemm_mat_cols(ctx, &m, n_in, n_rows, c0, c1, piece % 2), 0);
                    c0 = c1;
                }
                assert_memory_equal(got, ref, n);
            }
        }
        qgemm_pack_free(&packed);
        free(w);
        free(x);
        free(ref);
        free(got);
    }
    qgemm_ctx_free(&ctx);
    qgemm_ctx_free(&sc);
}

/* One qgemm_multi call over packed Q8_0, unpacked Q8_0 and Q4_K / Q6_K
 * matrices equals separate unpacked calls. */
static void test_multi_mixed(void **state)
{
    (void)state;
    const int64_t n_in = 512;
    enum { NM = 4 };
    const uint32_t types[NM] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q8_0, GGML_TYPE_Q6_K};
    const int64_t n_out[NM] = {37, 24, 16, 9};
    qgemm_ctx_t *ctx = qgemm_ctx_new(24, n_in);
    uint8_t *w[NM];
    void *packed[NM] = {NULL};
    for (int i = 0; i < NM; i++)
        w[i] = weights_quantized(types[i], n_out[i], n_in, 30 + (uint64_t)i);
    packed[0] = qgemm_pack(GGML_TYPE_Q8_0, w[0], n_out[0], n_in, 1);
    packed[2] = qgemm_pack(GGML_TYPE_Q8_0, w[2], n_out[2], n_in, 1);
    assert_non_null(packed[0]);
    assert_non_null(packed[2]);
    float *x = activations(24, n_in, 40);
    static const int rows[] = {1, 3, 8, 9, 24};
    for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++) {
        int n_rows = rows[ri];
        float *ref[NM], *got[NM];
        qgemm_mat_t m[NM];
        for (int i = 0; i < NM; i++) {
            size_t n = (size_t)n_rows * (size_t)n_out[i];
            ref[i] = xmalloc(n * sizeof(float));
            got[i] = xmalloc(n * sizeof(float));
            memset(got[i], 0xff, n * sizeof(float));
            assert_int_equal(qgemm(ctx, types[i], w[i], n_out[i], n_in, x, n_rows, ref[i]), 0);
            m[i] = (qgemm_mat_t){.type = types[i], .w = w[i], .n_out = n_out[i], .y = got[i], .packed = packed[i]};
        }
        assert_int_equal(qgemm_multi(ctx, m, NM, n_in, x, n_rows), 0);
        for (int i = 0; i < NM; i++) {
            assert_memory_equal(got[i], ref[i], (size_t)n_rows * (size_t)n_out[i] * sizeof(float));
            free(ref[i]);
            free(got[i]);
        }
    }
    for (int i = 0; i < NM; i++) {
        qgemm_pack_free(&packed[i]);
        free(w[i]);
    }
    free(x);
    qgemm_ctx_free(&ctx);
}

static void test_hostile(void **state)
{
    (void)state;
    uint8_t *w = q8_random(16, 64, 3);
    const int64_t big = (int64_t)1 << 40;
    static const struct { uint32_t type; int64_t n_out, n_in; } bad[] = {
        {GGML_TYPE_Q4_0, 16, 48}, {GGML_TYPE_Q4_K, 16, 128}, {GGML_TYPE_F32, 16, 64}, {12345, 16, 64},
        {GGML_TYPE_Q8_0, 0, 64},  {GGML_TYPE_Q8_0, -8, 64},  {GGML_TYPE_Q8_0, 16, 0}, {GGML_TYPE_Q8_0, 16, -32},
        {GGML_TYPE_Q8_0, 16, 31}, {GGML_TYPE_Q8_0, 16, 48},  {GGML_TYPE_Q8_0, 16, big},
        {GGML_TYPE_Q8_0, big, 64}, {GGML_TYPE_Q8_0, INT64_MAX, INT64_MAX - 31},
        {GGML_TYPE_Q8_0, INT64_MIN, 64},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(qgemm_packed_size(bad[i].type, bad[i].n_out, bad[i].n_in), 0);
        assert_null(qgemm_pack(bad[i].type, w, bad[i].n_out, bad[i].n_in, 2));
    }
    assert_null(qgemm_pack(GGML_TYPE_Q8_0, NULL, 16, 64, 1));
    /* qgemm_pack_to: the same refusals, plus a NULL or misaligned dst, which
     * stays untouched */
    size_t sz = qgemm_packed_size(GGML_TYPE_Q8_0, 16, 64);
    uint8_t *dst = xaligned_alloc(sz + 64);
    memset(dst, 0x33, sz + 64);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(qgemm_pack_to(bad[i].type, w, bad[i].n_out, bad[i].n_in, dst, 1), -1);
    assert_int_equal(qgemm_pack_to(GGML_TYPE_Q8_0, w, 16, 64, NULL, 1), -1);
    assert_int_equal(qgemm_pack_to(GGML_TYPE_Q8_0, NULL, 16, 64, dst, 1), -1);
    assert_int_equal(qgemm_pack_to(GGML_TYPE_Q8_0, w, 16, 64, dst + 32, 1), -1);
    for (size_t k = 0; k < sz + 64; k++)
        assert_int_equal(dst[k], 0x33);
    free(dst);

    /* a packing used with another shape or type, or a buffer that is not a
     * packing: -1, y untouched */
    void *p = qgemm_pack(GGML_TYPE_Q8_0, w, 16, 64, 0);
    assert_non_null(p);
    qgemm_ctx_t *ctx = qgemm_ctx_new(4, 128);
    float *x = activations(4, 128, 5);
    float y[4 * 24];
    uint8_t *w128 = q8_random(24, 128, 4);
    uint8_t *not_packed = xaligned_alloc(4096);
    memset(not_packed, 0, 4096);
    const struct { uint32_t type; const void *w; int64_t n_out, n_in; const void *packed; } mis[] = {
        {GGML_TYPE_Q8_0, w, 8, 64, p},      /* fewer rows */
        {GGML_TYPE_Q8_0, w128, 24, 128, p}, /* other shape */
        {GGML_TYPE_Q4_0, w, 16, 64, p},     /* other type */
        {GGML_TYPE_Q8_0, w, 16, 64, not_packed},
    };
    for (size_t i = 0; i < sizeof mis / sizeof *mis; i++) {
        memset(y, 0x5a, sizeof y);
        qgemm_mat_t m = {.type = mis[i].type, .w = mis[i].w, .n_out = mis[i].n_out, .y = y, .packed = mis[i].packed};
        assert_int_equal(qgemm_multi(ctx, &m, 1, mis[i].n_in, x, 4), -1);
        assert_int_equal(qgemm_quantize(ctx, x, 4, mis[i].n_in), 0);
        assert_int_equal(qgemm_mat_cols(ctx, &m, mis[i].n_in, 4, 0, 8, 0), -1);
        for (size_t k = 0; k < sizeof y; k++)
            assert_int_equal(((uint8_t *)y)[k], 0x5a);
    }
    /* the matching call works */
    qgemm_mat_t m = {.type = GGML_TYPE_Q8_0, .w = w, .n_out = 16, .y = y, .packed = p};
    assert_int_equal(qgemm_multi(ctx, &m, 1, 64, x, 4), 0);
    assert_int_equal(qgemm_mat_cols(ctx, NULL, 64, 4, 0, 8, 0), -1);
    qgemm_pack_free(&p);
    free(not_packed);
    free(w128);
    free(x);
    free(w);
    qgemm_ctx_free(&ctx);
}

/* ---- benchmark (QGEMM_PACK_BENCH=1) --------------------------------------------- */

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

static void run_bench(void)
{
    static const struct { const char *name; int64_t n_out, n_in; } shapes[] = {
        {"attn 768x768", 768, 768}, {"ffn-up 2048x768", 2048, 768}, {"ffn-down 768x2048", 768, 2048},
        {"cls 32000x768", 32000, 768},
    };
    static const int rows[] = {1, 2, 4, 8, 9, 16, 32, 64, 256};
    int reps = getenv("QGEMM_BENCH_REPS") ? atoi(getenv("QGEMM_BENCH_REPS")) : 30;
    int nt = getenv("QGEMM_BENCH_THREADS") ? atoi(getenv("QGEMM_BENCH_THREADS")) : 1;
    qgemm_ctx_t *ctx = qgemm_ctx_new(256, 2048);
    qgemm_set_threads(ctx, nt);
    printf("packed vs unpacked Q8_0, %d thread(s), best of %d (us)\n", nt, reps);
    printf("%-18s %4s %10s %10s %7s\n", "shape", "rows", "unpacked", "packed", "ratio");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t n_out = shapes[s].n_out, n_in = shapes[s].n_in;
        uint8_t *w = weights_quantized(GGML_TYPE_Q8_0, n_out, n_in, 5);
        void *p = qgemm_pack(GGML_TYPE_Q8_0, w, n_out, n_in, nt);
        float *x = activations(256, n_in, 6);
        float *y = xmalloc((size_t)256 * (size_t)n_out * sizeof(float));
        for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
            qgemm_mat_t mu = {.type = GGML_TYPE_Q8_0, .w = w, .n_out = n_out, .y = y};
            qgemm_mat_t mp = mu;
            mp.packed = p;
            double tu = 1e30, tp = 1e30;
            for (int round = 0; round < 3; round++) { /* interleaved */
                double a = best_us(reps / 3 + 1, ctx, &mu, n_in, x, rows[r]);
                double b = best_us(reps / 3 + 1, ctx, &mp, n_in, x, rows[r]);
                tu = a < tu ? a : tu;
                tp = b < tp ? b : tp;
            }
            printf("%-18s %4d %10.1f %10.1f %7.2f\n", shapes[s].name, rows[r], tu, tp, tu / tp);
        }
        qgemm_pack_free(&p);
        free(w);
        free(x);
        free(y);
    }
    qgemm_ctx_free(&ctx);
}

/* ---- prefill benchmark (QGEMM_PACK_BENCH=w1b) ------------------------------------ */

/* CPU seconds of the whole process (all threads): on a shared machine a
 * rate per CPU second suffers less from the other tenants than one per
 * wall second (it still includes cache and memory contention). */
static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* 12 independent vpdpbusd chains: the int8 peak of one core, in ops (a
 * multiply-add = 2) per CPU second. */
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) static double vnni_peak_gops(void)
{
    volatile long vn = 4000000;
    const long n = vn;
    __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
    __m512i c[12];
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++)
        c[i] = _mm512_set1_epi32(i); /* distinct, so no two chains merge */
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = cpu_s();
        for (long k = 0; k < n; k++)
#pragma GCC unroll 12
            for (int i = 0; i < 12; i++)
                c[i] = _mm512_dpbusd_epi32(c[i], a, b);
        double dt = cpu_s() - t0, g = (double)n * 12 * 128 / dt / 1e9;
        best = g > best ? g : best;
    }
    __m512i s = c[0];
#pragma GCC unroll 12
    for (int i = 1; i < 12; i++)
        s = _mm512_add_epi32(s, c[i]);
    /* kept live through a wrapping (unsigned) sum: the chains overflow
     * int32, which _mm512_reduce_add_epi32 does as signed C arithmetic
     * (UBSan stops the sanitizer build there) */
    uint32_t lanes[16], sum = 0;
    _mm512_storeu_si512((void *)lanes, s);
    for (int i = 0; i < 16; i++)
        sum += lanes[i];
    volatile uint32_t sink = sum;
    (void)sink;
    return best;
}

/* Packed Q8_0 at the 1.1B llama shapes (dim 2048, FFN 5632, vocab 32000)
 * and QGEMM_BENCH_ROWS (512) X rows, the prefill case: per shape the best
 * wall time and GOPS per CPU second (2 ops per multiply-add) of
 * QGEMM_BENCH_REPS (5) calls, against the VNNI peak of a dpbusd loop; then
 * the same without the X quantization ("tiles": X quantized once by
 * qgemm_quantize, then qgemm_mat_cols over all columns on the calling
 * thread, best of the reps, so one thread whatever QGEMM_BENCH_THREADS):
 * the kernel's own rate. A small shape (QGEMM_BENCH_SHAPE=64x256,
 * QGEMM_BENCH_ROWS=48) keeps W and X in L1. */
static void run_bench_w1b(void)
{
    struct { const char *name; int64_t n_out, n_in; } shapes[] = {
        {"wq/wo 2048x2048", 2048, 2048}, {"gate/up 5632x2048", 5632, 2048}, {"down 2048x5632", 2048, 5632},
        {"head 32000x2048", 32000, 2048},
    };
    size_t n_shapes = sizeof shapes / sizeof *shapes;
    const char *one = getenv("QGEMM_BENCH_SHAPE"); /* "N_OUTxN_IN": that shape alone */
    long long so = 0, si = 0;
    if (one && sscanf(one, "%lldx%lld", &so, &si) == 2 && so > 0 && si > 0 && si <= 5632 && si % 32 == 0) {
        shapes[0].name = one;
        shapes[0].n_out = so;
        shapes[0].n_in = si;
        n_shapes = 1;
    }
    int reps = getenv("QGEMM_BENCH_REPS") ? atoi(getenv("QGEMM_BENCH_REPS")) : 5;
    int nt = getenv("QGEMM_BENCH_THREADS") ? atoi(getenv("QGEMM_BENCH_THREADS")) : 1;
    int rows = getenv("QGEMM_BENCH_ROWS") ? atoi(getenv("QGEMM_BENCH_ROWS")) : 512;
    if (reps < 1 || nt < 1 || rows < 1 || rows > 4096)
        abort();
    qgemm_ctx_t *ctx = qgemm_ctx_new(rows, 5632);
    qgemm_set_threads(ctx, nt);
    double peak = qgemm_isa_available(QGEMM_ISA_AVX512VNNI) ? vnni_peak_gops() : 0;
    printf("packed Q8_0, %d rows, %d thread(s), isa %s, best of %d; vpdpbusd peak %.0f GOPS per CPU second\n",
           rows, nt, qgemm_isa_name(qgemm_get_isa(ctx)), reps, peak);
    printf("%-18s %10s %12s %10s %12s %10s\n", "shape", "wall ms", "GOPS/cpu-s", "of peak", "tiles GOPS", "of peak");
    for (size_t s = 0; s < n_shapes; s++) {
        int64_t n_out = shapes[s].n_out, n_in = shapes[s].n_in;
        uint8_t *w = q8_random(n_out, n_in, 11);
        void *p = qgemm_pack(GGML_TYPE_Q8_0, w, n_out, n_in, nt);
        float *x = activations(rows, n_in, 6);
        float *y = xmalloc((size_t)rows * (size_t)n_out * sizeof(float));
        qgemm_mat_t m = {.type = GGML_TYPE_Q8_0, .w = w, .n_out = n_out, .y = y, .packed = p};
        double wall = 1e30, cpu = 1e30;
        for (int i = 0; i < reps; i++) {
            double c0 = cpu_s();
            int64_t t0 = clock_now_us();
            if (qgemm_multi(ctx, &m, 1, n_in, x, rows) != 0)
                abort();
            double dt = (double)(clock_now_us() - t0) * 1e-3, dc = cpu_s() - c0;
            wall = dt < wall ? dt : wall;
            cpu = dc < cpu ? dc : cpu;
        }
        double gops = 2.0 * (double)rows * (double)n_out * (double)n_in / cpu / 1e9;
        /* the tiles alone: enough calls of a small shape for ~10 ms */
        int inner = (int)(2e7 / ((double)rows * (double)n_out * (double)n_in / 64)) + 1;
        double tcpu = 1e30;
        if (qgemm_quantize(ctx, x, rows, n_in) != 0)
            abort();
        for (int i = 0; i < reps; i++) {
            double c0 = cpu_s();
            for (int j = 0; j < inner; j++)
                if (qgemm_mat_cols(ctx, &m, n_in, rows, 0, n_out, 0) != 0)
                    abort();
            double dc = (cpu_s() - c0) / inner;
            tcpu = dc < tcpu ? dc : tcpu;
        }
        double tg = 2.0 * (double)rows * (double)n_out * (double)n_in / tcpu / 1e9;
        printf("%-18s %10.2f %12.1f %9.0f%% %12.1f %9.0f%%\n", shapes[s].name, wall, gops, peak > 0 ? 100 * gops / peak : 0,
               tg, peak > 0 ? 100 * tg / peak : 0);
        qgemm_pack_free(&p);
        free(w);
        free(x);
        free(y);
    }
    qgemm_ctx_free(&ctx);
}

int main(void)
{
    if (getenv("QGEMM_PACK_BENCH") && strcmp(getenv("QGEMM_PACK_BENCH"), "w1b") == 0) {
        run_bench_w1b();
        return 0;
    }
    if (getenv("QGEMM_PACK_BENCH") && strcmp(getenv("QGEMM_PACK_BENCH"), "0") != 0) {
        run_bench();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_hostile),
        cmocka_unit_test(test_packed_equals_unpacked),
        cmocka_unit_test(test_multi_mixed),
        cmocka_unit_test(test_wide_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
