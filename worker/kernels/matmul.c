/* matmul.c — Y = X · Wᵀ over all rows of a step batch (see matmul.h).
 *
 * Threading: ONE pool. The output rows of W are split into n_threads
 * contiguous shares (OpenMP); each thread runs single-threaded OpenBLAS on
 * its share and writes its own column block of Y. Letting OpenBLAS's pthread
 * pool and OpenMP's pool both spin on 2 cores made steps up to 10x slower and
 * erratic (each pool busy-waits while the other needs the core), so the
 * forward pass sets OpenBLAS to 1 thread and parallelizes here instead.
 *
 * F32 weights: cblas_sgemm (sgemv when there is one row) on the mmap, no copy.
 * Quantized weights, many rows (prefill): each thread walks its share in
 * tiles of tile_rows rows, decodes a tile into its own float scratch and
 * multiplies it with one BLAS call into Y's column block [r0, r0+nn).
 * Quantized weights, <= MATMUL_FUSED_MAX_ROWS rows (decode): each W row is
 * decoded into L1 and dotted with every X row directly — decoding costs
 * O(out·in) per call whatever n_rows is, so for small batches it must be
 * cheap (AVX2 decoders) and must not round-trip through a large tile. */
#include "worker/kernels/matmul.h"
#include "worker/kernels/qgemm.h"

#include <assert.h>
#include <cblas.h>
#include <omp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/qblock.h"
#include "worker/kernels/quant.h"

/* Floats per dequantized tile: ~1 MiB keeps the tile cache-resident while
 * the GEMM streams X over it. */
#define MATMUL_TILE_FLOATS (256 * 1024)
/* Up to this many X rows, quantized weights take the fused row path. */
#define MATMUL_FUSED_MAX_ROWS 8
/* F32 weights with up to this many X rows use gemm_nt_avx2 (no packing)
 * instead of sgemm. */
#define MATMUL_OWN_MAX_ROWS 64
/* Multiply-adds below which one thread does the whole product. */
#define MATMUL_PAR_MIN_MACS (256.0 * 1024)

struct matmul {
    int64_t max_cols;
    int64_t tile_rows;   /* output rows per dequantized tile */
    int n_threads;
    float *tile;         /* (n_threads, tile_rows, max_cols): one tile per thread */
    qgemm_ctx_t *q;      /* int8 kernels, NULL when off */
    int q_rows;          /* rows q was sized for */
    uint16_t *xbf;       /* (bf_rows, max_cols) X rounded to bf16 for the
                          * AVX512-BF16 kernel; NULL when that path is off */
    size_t xbf_bytes;    /* xbf is an xhuge_zalloc block of this size */
    int bf_rows;         /* rows xbf was sized for */
    const float *xbf_of; /* the X xbf holds (set by bf16_prepare), NULL: none */
    int xbf_n;           /* its rows */
};

matmul_t *matmul_new(int64_t max_cols, int n_threads)
{
    matmul_t *mm = xcalloc(1, sizeof *mm);
    if (max_cols < 1)
        max_cols = 1;
    mm->max_cols = max_cols;
    mm->tile_rows = MATMUL_TILE_FLOATS / max_cols;
    if (mm->tile_rows < 16)
        mm->tile_rows = 16;
    mm->tile_rows -= mm->tile_rows % 16;
    mm->n_threads = n_threads > 0 ? n_threads : 1;
    openblas_set_num_threads(1);
    size_t tile_bytes = (size_t)mm->n_threads * (size_t)mm->tile_rows * (size_t)max_cols * sizeof(float);
    mm->tile = memset(xaligned_alloc(tile_bytes), 0, tile_bytes); /* mapped now, not in the first call */
    return mm;
}

void matmul_free(matmul_t **mm)
{
    if (!mm || !*mm)
        return;
    free((*mm)->tile);
    xhuge_zfree((*mm)->xbf, (*mm)->xbf_bytes);
    qgemm_ctx_free(&(*mm)->q);
    free(*mm);
    *mm = NULL;
}

/* ---- row decoding -------------------------------------------------------
 *
 * decode_row() turns one stored row into floats. For Q8_0, Q4_0, Q4_K and
 * Q6_K on AVX2 machines it uses the vector decoders below, which compute
 * every value with the same float operations, in the same order, as
 * quant_dequantize() (x = (float)q * d, x = dl * q - ml, ...), so results
 * are bit-identical (tests/worker/kernels/test_matmul.c checks this); everything
 * else goes through quant_dequantize(). */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MATMUL_X86 1

/* 8 int8 / uint8 lanes of a 128-bit value (low 8 bytes) as floats. */
#define I8x8(v) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
#define U8x8(v) _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))

__attribute__((target("avx2,fma"))) static void dec_q8_0_avx2(const uint8_t *b, float *y, int64_t nb)
{
    const qblock_q8_0_t *blk = (const qblock_q8_0_t *)b;
    for (int64_t i = 0; i < nb; i++, blk++, y += 32) {
        __m256 d = _mm256_set1_ps(quant_fp16_to_fp32(blk->d));
        for (int j = 0; j < 4; j++) {
            __m128i q = _mm_loadl_epi64((const __m128i *)(const void *)(blk->qs + 8 * j));
            _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(I8x8(q), d));
        }
    }
}

__attribute__((target("avx2,fma"))) static void dec_q4_0_avx2(const uint8_t *b, float *y, int64_t nb)
{
    const __m128i m4 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
    const qblock_q4_0_t *blk = (const qblock_q4_0_t *)b;
    for (int64_t i = 0; i < nb; i++, blk++, y += 32) {
        __m256 d = _mm256_set1_ps(quant_fp16_to_fp32(blk->d));
        __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)blk->qs);
        __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, m4), eight);                     /* elements 0..15 */
        __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), m4), eight);  /* 16..31 */
        _mm256_storeu_ps(y + 0, _mm256_mul_ps(d, I8x8(lo)));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, I8x8(_mm_srli_si128(lo, 8))));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, I8x8(hi)));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, I8x8(_mm_srli_si128(hi, 8))));
    }
}

__attribute__((target("avx2,fma"))) static void dec_q4_k_avx2(const uint8_t *b, float *y, int64_t nb)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    const qblock_q4_k_t *blk = (const qblock_q4_k_t *)b;
    for (int64_t i = 0; i < nb; i++, blk++, y += 256) {
        float d = quant_fp16_to_fp32(blk->d), dmin = quant_fp16_to_fp32(blk->dmin);
        const uint8_t *scales = blk->scales, *qs = blk->qs;
        for (int c = 0; c < 4; c++) {
            __m256i q = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * c));
            __m256i nib[2] = { _mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4) };
            for (int half = 0; half < 2; half++) {
                int j = 2 * c + half, sc, m;
                qblock_k_scale_min(scales, j, &sc, &m);
                __m256 dl = _mm256_set1_ps(d * (float)sc), ml = _mm256_set1_ps(dmin * (float)m);
                __m128i h0 = _mm256_castsi256_si128(nib[half]), h1 = _mm256_extracti128_si256(nib[half], 1);
                float *o = y + 32 * j;
                _mm256_storeu_ps(o + 0, _mm256_sub_ps(_mm256_mul_ps(dl, U8x8(h0)), ml));
                _mm256_storeu_ps(o + 8, _mm256_sub_ps(_mm256_mul_ps(dl, U8x8(_mm_srli_si128(h0, 8))), ml));
                _mm256_storeu_ps(o + 16, _mm256_sub_ps(_mm256_mul_ps(dl, U8x8(h1)), ml));
                _mm256_storeu_ps(o + 24, _mm256_sub_ps(_mm256_mul_ps(dl, U8x8(_mm_srli_si128(h1, 8))), ml));
            }
        }
    }
}

__attribute__((target("avx2,fma"))) static void dec_q6_k_avx2(const uint8_t *b, float *y, int64_t nb)
{
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3), k32 = _mm256_set1_epi8(32);
    const qblock_q6_k_t *blk = (const qblock_q6_k_t *)b;
    for (int64_t i = 0; i < nb; i++, blk++, y += 256) {
        const uint8_t *ql = blk->ql, *qh = blk->qh;
        const int8_t *sc = blk->scales;
        float d = quant_fp16_to_fp32(blk->d);
        for (int h = 0; h < 2; h++) {
            __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h));
            __m256i a2 = _mm256_loadu_si256((const __m256i *)(const void *)(ql + 64 * h + 32));
            __m256i hb = _mm256_loadu_si256((const __m256i *)(const void *)(qh + 32 * h));
            for (int r = 0; r < 4; r++) {
                __m256i src = (r & 1) ? a2 : a;
                __m256i lo = r < 2 ? _mm256_and_si256(src, m4) : _mm256_and_si256(_mm256_srli_epi16(src, 4), m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * r), m3);
                /* q - 32 in -32..31: lo | hi << 4, minus 32 */
                __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), k32);
                __m128i q0 = _mm256_castsi256_si128(q), q1 = _mm256_extracti128_si256(q, 1);
                int e = 128 * h + 32 * r;
                __m256 s0 = _mm256_set1_ps(d * (float)sc[e / 16]), s1 = _mm256_set1_ps(d * (float)sc[e / 16 + 1]);
                _mm256_storeu_ps(y + e + 0, _mm256_mul_ps(s0, I8x8(q0)));
                _mm256_storeu_ps(y + e + 8, _mm256_mul_ps(s0, I8x8(_mm_srli_si128(q0, 8))));
                _mm256_storeu_ps(y + e + 16, _mm256_mul_ps(s1, I8x8(q1)));
                _mm256_storeu_ps(y + e + 24, _mm256_mul_ps(s1, I8x8(_mm_srli_si128(q1, 8))));
            }
        }
    }
}

/* Horizontal sum of 8 lanes. */
__attribute__((target("avx2,fma"))) static inline float hsum8(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* y[m * ldy] = w · x[m] (K floats) for m < M. Four X rows share each load of
 * w. Every row is summed in the same order (one 8-lane accumulator, then the
 * scalar tail) whether it is processed in a group of four or alone, so a
 * row's result does not depend on M or on its place in the batch. */
__attribute__((target("avx2,fma"))) static void dot_rows_avx2(const float *w, const float *x, int M, int K,
                                                             float *y, size_t ldy)
{
    const int K8 = K & ~7;
    int m = 0;
    for (; m + 4 <= M; m += 4) {
        const float *x0 = x + (size_t)m * K, *x1 = x0 + K, *x2 = x1 + K, *x3 = x2 + K;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int k = 0; k < K8; k += 8) {
            __m256 wv = _mm256_loadu_ps(w + k);
            a0 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x0 + k), a0);
            a1 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x1 + k), a1);
            a2 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x2 + k), a2);
            a3 = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x3 + k), a3);
        }
        float s0 = hsum8(a0), s1 = hsum8(a1), s2 = hsum8(a2), s3 = hsum8(a3);
        for (int k = K8; k < K; k++) {
            s0 += w[k] * x0[k];
            s1 += w[k] * x1[k];
            s2 += w[k] * x2[k];
            s3 += w[k] * x3[k];
        }
        y[(size_t)m * ldy] = s0;
        y[(size_t)(m + 1) * ldy] = s1;
        y[(size_t)(m + 2) * ldy] = s2;
        y[(size_t)(m + 3) * ldy] = s3;
    }
    for (; m < M; m++) {
        const float *x0 = x + (size_t)m * K;
        __m256 a0 = _mm256_setzero_ps();
        for (int k = 0; k < K8; k += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x0 + k), a0);
        float s0 = hsum8(a0);
        for (int k = K8; k < K; k++)
            s0 += w[k] * x0[k];
        y[(size_t)m * ldy] = s0;
    }
}

/* (MR, NR) register tile: y[i * ldy + j] = x_i · w_j (x rows and w rows K
 * floats apart). Each output is accumulated exactly as dot_rows_avx2 does
 * (one 8-lane accumulator over k in order, hsum8, scalar tail), so a result
 * does not depend on the tiling or on the number of rows. */
#define GT_MR 4
#define GT_NR 3
static inline __attribute__((always_inline, target("avx2,fma"))) void
tile_avx2(int MR, int NR, const float *x, const float *w, int K, float *y, size_t ldy)
{
    const int K8 = K & ~7;
    __m256 acc[GT_MR][GT_NR];
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm256_setzero_ps();
    for (int k = 0; k < K8; k += 8) {
        __m256 wv[GT_NR];
#pragma GCC unroll 3
        for (int j = 0; j < NR; j++)
            wv[j] = _mm256_loadu_ps(w + (size_t)j * K + k);
#pragma GCC unroll 4
        for (int i = 0; i < MR; i++) {
            __m256 xv = _mm256_loadu_ps(x + (size_t)i * K + k);
#pragma GCC unroll 3
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm256_fmadd_ps(wv[j], xv, acc[i][j]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 3
        for (int j = 0; j < NR; j++) {
            const float *xi = x + (size_t)i * K, *wj = w + (size_t)j * K;
            float s = hsum8(acc[i][j]);
            for (int k = K8; k < K; k++)
                s += wj[k] * xi[k];
            y[(size_t)i * ldy + j] = s;
        }
}

#define TILE_CASE(MR)                                                    \
    static __attribute__((target("avx2,fma"))) void tile_avx2_##MR(int NR, const float *x, const float *w, int K, \
                                                                  float *y, size_t ldy) \
    {                                                                    \
        switch (NR) {                                                    \
        case 3: tile_avx2(MR, 3, x, w, K, y, ldy); break;                \
        case 2: tile_avx2(MR, 2, x, w, K, y, ldy); break;                \
        default: tile_avx2(MR, 1, x, w, K, y, ldy); break;               \
        }                                                                \
    }
TILE_CASE(4)
TILE_CASE(3)
TILE_CASE(2)
TILE_CASE(1)

/* W rows per cache block of gemm_nt_avx2: 48 rows of up to 2048 floats
 * (384 KiB) stay in L2 while every 4-row group of X passes over them. */
#define GT_NB 48

/* Y[m * ldy + n] = x_m · w_n for m < M, n < NN; x (M, K), w (NN, K) row-major.
 * No packing: for the row counts of decode batches and short prefills the
 * copies sgemm makes cost as much as half its multiply. */
__attribute__((target("avx2,fma"))) static void gemm_nt_avx2(const float *x, int M, int K, const float *w,
                                                            int64_t NN, float *y, size_t ldy)
{
    for (int64_t n0 = 0; n0 < NN; n0 += GT_NB) {
        const int64_t n1 = n0 + GT_NB < NN ? n0 + GT_NB : NN;
        for (int m = 0; m < M; m += GT_MR) {
            const int mr = M - m < GT_MR ? M - m : GT_MR;
            const float *xm = x + (size_t)m * K;
            for (int64_t n = n0; n < n1; n += GT_NR) {
                const int nr = n1 - n < GT_NR ? (int)(n1 - n) : GT_NR;
                const float *wn = w + (size_t)n * K;
                float *yo = y + (size_t)m * ldy + n;
                switch (mr) {
                case 4: tile_avx2_4(nr, xm, wn, K, yo, ldy); break;
                case 3: tile_avx2_3(nr, xm, wn, K, yo, ldy); break;
                case 2: tile_avx2_2(nr, xm, wn, K, yo, ldy); break;
                default: tile_avx2_1(nr, xm, wn, K, yo, ldy); break;
                }
            }
        }
    }
}

static int have_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* ---- AVX512-BF16 (vdpbf16ps) for BF16 weights ------------------------------
 *
 * BF16 W rows are read in place: two consecutive bf16 values are one 32-bit
 * lane, the pair layout vdpbf16ps takes. X is rounded to bf16 once per call
 * (round to nearest even, vcvtne2ps2bf16) into mm->xbf. Each output is one
 * 16-lane accumulator over k in order, then _mm512_reduce_add_ps, so a row's
 * result does not depend on the other rows or on the tiling. Numerics: W is
 * exact; x loses its low 16 mantissa bits (relative error ≤ 2^-9 per
 * element) and vdpbf16ps sums pairs in f32 (products of two bf16 are exact
 * in f32), so |y − Σ w·x| ≤ 2^-8 · Σ|w·x| (tests/worker/kernels/test_matmul.c). */
#define BF_TARGET "avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma"
#define BF_MR 4
#define BF_NR 4

__attribute__((target(BF_TARGET))) static void bf16_round_rows(const float *x, int M, int K, uint16_t *xb)
{
    for (size_t i = 0; i < (size_t)M * (size_t)K; i += 32) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512((void *)(xb + i), (__m512i)v);
    }
}

static inline __attribute__((always_inline, target(BF_TARGET))) void
bf16_tile(int MR, int NR, const uint16_t *x, const uint16_t *w, int K, float *y, size_t ldy)
{
    __m512 acc[BF_MR][BF_NR];
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            acc[i][j] = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 32) {
        __m512i wv[BF_NR];
        for (int j = 0; j < NR; j++)
            wv[j] = _mm512_loadu_si512((const void *)(w + (size_t)j * K + k));
        for (int i = 0; i < MR; i++) {
            __m512i xv = _mm512_loadu_si512((const void *)(x + (size_t)i * K + k));
            for (int j = 0; j < NR; j++)
                acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)xv, (__m512bh)wv[j]);
        }
    }
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++)
            y[(size_t)i * ldy + j] = _mm512_reduce_add_ps(acc[i][j]);
}

#define BF_TILE_MR(MR)                                                                                   \
    __attribute__((target(BF_TARGET))) static void bf16_tile_##MR(int nr, const uint16_t *x, const uint16_t *w, \
                                                                  int K, float *y, size_t ldy)           \
    {                                                                                                    \
        switch (nr) {                                                                                    \
        case 4: bf16_tile(MR, 4, x, w, K, y, ldy); break;                                                \
        case 3: bf16_tile(MR, 3, x, w, K, y, ldy); break;                                                \
        case 2: bf16_tile(MR, 2, x, w, K, y, ldy); break;                                                \
        default: bf16_tile(MR, 1, x, w, K, y, ldy); break;                                               \
        }                                                                                                \
    }
BF_TILE_MR(1)
BF_TILE_MR(2)
BF_TILE_MR(3)
BF_TILE_MR(4)

/* Y[:, n0:n1) (row stride ldy) = Xbf (M, K) · W[n0:n1)ᵀ, W BF16 rows of K. */
static void gemm_bf16(const uint16_t *xb, int M, int K, const uint16_t *w, int64_t n0, int64_t n1, float *y,
                      size_t ldy)
{
    for (int m = 0; m < M; m += BF_MR) {
        const int mr = M - m < BF_MR ? M - m : BF_MR;
        for (int64_t n = n0; n < n1; n += BF_NR) {
            const int nr = n1 - n < BF_NR ? (int)(n1 - n) : BF_NR;
            const uint16_t *xm = xb + (size_t)m * K, *wn = w + (size_t)n * K;
            float *yo = y + (size_t)m * ldy + n;
            switch (mr) {
            case 4: bf16_tile_4(nr, xm, wn, K, yo, ldy); break;
            case 3: bf16_tile_3(nr, xm, wn, K, yo, ldy); break;
            case 2: bf16_tile_2(nr, xm, wn, K, yo, ldy); break;
            default: bf16_tile_1(nr, xm, wn, K, yo, ldy); break;
            }
        }
    }
}
#endif

static void dot_rows_plain(const float *w, const float *x, int M, int K, float *y, size_t ldy)
{
    for (int m = 0; m < M; m++) {
        const float *xm = x + (size_t)m * K;
        float s = 0;
        for (int k = 0; k < K; k++)
            s += w[k] * xm[k];
        y[(size_t)m * ldy] = s;
    }
}

/* Row of n elements at src → dst (n floats). 0 ok, -1 unsupported type. */
static int decode_row(uint32_t type, const uint8_t *src, float *dst, int64_t n)
{
#ifdef MATMUL_X86
    if (have_avx2()) {
        switch (type) {
        case GGML_TYPE_Q8_0: if (n % 32) break; dec_q8_0_avx2(src, dst, n / 32); return 0;
        case GGML_TYPE_Q4_0: if (n % 32) break; dec_q4_0_avx2(src, dst, n / 32); return 0;
        case GGML_TYPE_Q4_K: if (n % 256) break; dec_q4_k_avx2(src, dst, n / 256); return 0;
        case GGML_TYPE_Q6_K: if (n % 256) break; dec_q6_k_avx2(src, dst, n / 256); return 0;
        default: break;
        }
    }
#endif
    return quant_dequantize(type, src, dst, n);
}

/* y[m * ldy] = w · x[m] for m < M. */
static void dot_rows(const float *w, const float *x, int M, int K, float *y, size_t ldy)
{
#ifdef MATMUL_X86
    if (have_avx2()) {
        dot_rows_avx2(w, x, M, K, y, ldy);
        return;
    }
#endif
    dot_rows_plain(w, x, M, K, y, ldy);
}

int matmul_weight_rows(const matmul_weight_t *w, int64_t row0, int64_t n, float *dst)
{
    if (row0 < 0 || n < 0 || row0 + n > w->rows)
        return -1;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *src = w->data + (size_t)(row0 + r) * w->row_bytes;
        if (decode_row(w->type, src, dst + (size_t)r * (size_t)w->cols, w->cols) != 0)
            return -1;
    }
    return 0;
}

/* Y[:, n0:n0+nn] (M, nn) = X (M, K) · Wf (nn, K)ᵀ with Wf float rows; ldy = N. */
static void gemm_block(int M, int nn, int K, const float *x, const float *wf, float *y, int ldy)
{
    if (M == 1)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, nn, K, 1.0f, wf, K, x, 1, 0.0f, y, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, nn, K, 1.0f, x, K, wf, K, 0.0f, y, ldy);
}

int matmul_use_int8(matmul_t *mm, int max_rows)
{
    if (max_rows < 1)
        return -1;
    qgemm_ctx_free(&mm->q);
    mm->q = qgemm_ctx_new(max_rows, mm->max_cols);
    mm->q_rows = mm->q ? max_rows : 0;
    /* the matmul's thread count, when the pool allows it */
    if (mm->q)
        (void)qgemm_set_threads(mm->q, mm->n_threads);
    return mm->q ? 0 : -1;
}

int matmul_use_bf16(matmul_t *mm, int max_rows)
{
    if (max_rows < 1)
        return -1;
    xhuge_zfree(mm->xbf, mm->xbf_bytes);
    mm->xbf = NULL;
    mm->xbf_bytes = 0;
    mm->bf_rows = 0;
    mm->xbf_of = NULL;
#ifdef MATMUL_X86
    if (!cpu_has_avx512_bf16() || qgemm_isa_default() < QGEMM_ISA_AVX512VNNI)
        return 1;
    size_t n = (size_t)max_rows * (size_t)mm->max_cols;
    /* a fresh zeroed mapping, touched only by the rows of BF16 products
     * (none at all for a model without BF16 matrices) */
    mm->xbf_bytes = n * sizeof(uint16_t) + 64;
    mm->xbf = xhuge_zalloc(mm->xbf_bytes);
    mm->bf_rows = max_rows;
    return 0;
#else
    return 1;
#endif
}

/* true when w takes the BF16 kernel for a batch of M rows */
static bool bf16_path(const matmul_t *mm, const matmul_weight_t *w, int M)
{
    return mm->xbf && w->type == GGML_TYPE_BF16 && M <= mm->bf_rows && w->cols % 32 == 0;
}

/* X (M, K) rounded to bf16 into mm->xbf, on the calling thread. */
static void bf16_prepare(matmul_t *mm, const float *x, int M, int64_t K)
{
#ifdef MATMUL_X86
    bf16_round_rows(x, M, (int)K, mm->xbf);
    mm->xbf_of = x;
    mm->xbf_n = M;
#else
    (void)mm, (void)x, (void)M, (void)K;
#endif
}

/* Output rows of W per dynamic chunk: about MATMUL_CHUNKS_PER_THREAD chunks
 * per thread over all matrices of the call (a late or descheduled thread
 * then holds the others up by one small chunk), a multiple of 16, at least
 * min_rows (sgemm wants wide blocks), at most the tile. */
#define MATMUL_CHUNKS_PER_THREAD 8
static int64_t chunk_rows(const matmul_t *mm, int64_t total, int nt, int64_t min_rows)
{
    int64_t c = total / ((int64_t)nt * MATMUL_CHUNKS_PER_THREAD);
    c = (c + 15) / 16 * 16;
    if (c < min_rows)
        c = min_rows;
    if (c > mm->tile_rows)
        c = mm->tile_rows;
    return c;
}

/* Y[:, n0:n1] = X · W[n0:n1]ᵀ with the calling thread's tile. 0 ok, -1 bad type. */
static int run_rows(matmul_t *mm, const matmul_weight_t *w, const float *x, int M, float *y, int64_t n0,
                    int64_t n1, float *tile)
{
    const int K = (int)w->cols;
    const int64_t N = w->rows;
#ifdef MATMUL_X86
    if (bf16_path(mm, w, M)) {
        assert(mm->xbf_of == x && mm->xbf_n == M);
        gemm_bf16(mm->xbf, M, K, (const uint16_t *)(const void *)w->data, n0, n1, y, (size_t)N);
        return 0;
    }
#endif
    if (M <= MATMUL_FUSED_MAX_ROWS) {
        /* Few rows (decode): take one W row at a time (F32 in place, others
         * decoded into L1) and dot it with every X row. W is read once,
         * nothing is packed or tiled. */
#ifdef MATMUL_X86
        if (w->type == GGML_TYPE_F32 && have_avx2()) {
            gemm_nt_avx2(x, M, K, (const float *)(const void *)(w->data + (size_t)n0 * w->row_bytes), n1 - n0,
                         y + n0, (size_t)N);
            return 0;
        }
#endif
        for (int64_t n = n0; n < n1; n++) {
            const uint8_t *src = w->data + (size_t)n * w->row_bytes;
            const float *wr = (const float *)(const void *)src;
            if (w->type != GGML_TYPE_F32) {
                if (decode_row(w->type, src, tile, K) != 0)
                    return -1;
                wr = tile;
            }
            dot_rows(wr, x, M, K, y + n, (size_t)N);
        }
        return 0;
    }
    if (w->type == GGML_TYPE_F32) {
#ifdef MATMUL_X86
        if (M <= MATMUL_OWN_MAX_ROWS && have_avx2()) {
            gemm_nt_avx2(x, M, K, (const float *)(const void *)(w->data + (size_t)n0 * w->row_bytes), n1 - n0,
                         y + n0, (size_t)N);
            return 0;
        }
#endif
        /* straight from the mmap */
        gemm_block(M, (int)(n1 - n0), K, x, (const float *)(const void *)(w->data + (size_t)n0 * w->row_bytes),
                   y + n0, (int)N);
        return 0;
    }
    for (int64_t r0 = n0; r0 < n1; r0 += mm->tile_rows) {
        int64_t nn = n1 - r0 < mm->tile_rows ? n1 - r0 : mm->tile_rows;
        /* tile (nn, K) = dequant(W rows r0 .. r0+nn) */
        for (int64_t r = 0; r < nn; r++)
            if (decode_row(w->type, w->data + (size_t)(r0 + r) * w->row_bytes, tile + (size_t)r * (size_t)K, K) != 0)
                return -1;
        /* Y[:, r0:r0+nn] = X · tileᵀ */
#ifdef MATMUL_X86
        if (M <= MATMUL_OWN_MAX_ROWS && have_avx2()) {
            gemm_nt_avx2(x, M, K, tile, nn, y + r0, (size_t)N);
            continue;
        }
#endif
        gemm_block(M, (int)nn, K, x, tile, y + r0, (int)N);
    }
    return 0;
}

int matmul_run_multi(matmul_t *mm, const matmul_weight_t *const *ws, int n, const float *x, int n_rows,
                     float *const *ys)
{
    if (n < 1 || n > MATMUL_MAX_MULTI || n_rows < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (ws[i]->cols != ws[0]->cols || ws[i]->cols > mm->max_cols)
            return -1;
    if (n_rows == 0)
        return 0;
    const int M = n_rows, K = (int)ws[0]->cols;
    if (mm->q && n_rows <= mm->q_rows) {
        int n_q = 0;
        for (int i = 0; i < n; i++)
            n_q += qgemm_supported(ws[i]->type);
        if (n_q == n) {
            qgemm_mat_t qm[MATMUL_MAX_MULTI];
            for (int i = 0; i < n; i++)
                qm[i] = (qgemm_mat_t){.type = ws[i]->type, .w = ws[i]->data, .n_out = ws[i]->rows, .y = ys[i],
                                      .packed = ws[i]->packed};
            return qgemm_multi(mm->q, qm, n, K, x, n_rows);
        }
        if (n_q > 0) {
            /* mixed: each matrix on its own path */
            for (int i = 0; i < n; i++)
                if (matmul_run_multi(mm, &ws[i], 1, x, n_rows, &ys[i]) != 0)
                    return -1;
            return 0;
        }
    }

    for (int i = 0; i < n; i++)
        if (bf16_path(mm, ws[i], M)) {
            bf16_prepare(mm, x, M, K);
            break;
        }

    /* Chunks of output rows over all matrices, claimed dynamically. */
    int64_t total = 0;
    for (int i = 0; i < n; i++)
        total += ws[i]->rows;
    /* Small products run on the calling thread (pool wake-up and barrier
     * cost more than the work). */
    const int n_par = (double)M * (double)total * K >= MATMUL_PAR_MIN_MACS ? mm->n_threads : 1;
    const int64_t cr = chunk_rows(mm, total, n_par, M <= MATMUL_FUSED_MAX_ROWS ? 16 : 64);
    int64_t first[MATMUL_MAX_MULTI + 1]; /* global index of each matrix's first chunk */
    first[0] = 0;
    for (int i = 0; i < n; i++)
        first[i + 1] = first[i] + (ws[i]->rows + cr - 1) / cr;
    const int64_t n_chunks = first[n];
    int bad = 0;
    (void)n_par;  /* unused when compiled without OpenMP */
#pragma omp parallel num_threads(n_par) reduction(| : bad)
    {
        float *tile = mm->tile + (size_t)omp_get_thread_num() * (size_t)mm->tile_rows * (size_t)mm->max_cols;
        int mi = 0;
#pragma omp for schedule(dynamic, 1)
        for (int64_t g = 0; g < n_chunks; g++) {
            while (g >= first[mi + 1])
                mi++;
            while (g < first[mi])
                mi--;
            int64_t n0 = (g - first[mi]) * cr, n1 = n0 + cr < ws[mi]->rows ? n0 + cr : ws[mi]->rows;
            if (!bad && run_rows(mm, ws[mi], x, M, ys[mi], n0, n1, tile) != 0)
                bad = 1;
        }
    }
    return bad ? -1 : 0;
}

int matmul_prepare(matmul_t *mm, const float *x, int n_rows, int64_t cols)
{
    if (n_rows < 0 || cols < 1 || cols > mm->max_cols)
        return -1;
    if (mm->xbf && n_rows <= mm->bf_rows && n_rows > 0 && cols % 32 == 0)
        bf16_prepare(mm, x, n_rows, cols);
    if (mm->q && n_rows <= mm->q_rows && n_rows > 0 && cols % 32 == 0)
        return qgemm_quantize(mm->q, x, n_rows, cols);
    return 0;
}

int matmul_run_range(matmul_t *mm, const matmul_weight_t *w, const float *x, int n_rows, int64_t n0, int64_t n1,
                     float *y, int thread)
{
    if (n_rows < 0 || w->cols > mm->max_cols || thread < 0 || thread >= mm->n_threads || n0 < 0 || n1 < n0 ||
        n1 > w->rows || n0 % 16 != 0 || (n1 % 16 != 0 && n1 != w->rows))
        return -1;
    if (n_rows == 0 || n1 == n0)
        return 0;
    if (mm->q && n_rows <= mm->q_rows && qgemm_supported(w->type)) {
        qgemm_mat_t qm = {.type = w->type, .w = w->data, .n_out = w->rows, .y = y, .packed = w->packed};
        return qgemm_mat_cols(mm->q, &qm, w->cols, n_rows, n0, n1, thread);
    }
    float *tile = mm->tile + (size_t)thread * (size_t)mm->tile_rows * (size_t)mm->max_cols;
    return run_rows(mm, w, x, n_rows, y, n0, n1, tile);
}

int matmul_run(matmul_t *mm, const matmul_weight_t *w, const float *x, int n_rows, float *y)
{
    return matmul_run_multi(mm, &w, 1, x, n_rows, &y);
}
