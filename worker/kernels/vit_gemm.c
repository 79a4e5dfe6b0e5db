/* vit_gemm.c — the vision encoder's float GEMM (see vit_gemm.h): W packed
 * into panels of 32 columns, a 12 × 32 AVX-512 register block and its
 * portable twin. */
#include "worker/kernels/vit_gemm.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "common/text/ggml_type.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"

vit_isa_t vit_isa_default(void)
{
    static int isa = -1;
    if (isa < 0) {
        const qgemm_isa_t q = qgemm_isa_default();
        isa = q >= QGEMM_ISA_AVX512VNNI && cpu_has_avx512_vnni() ? VIT_ISA_AVX512
              : q >= QGEMM_ISA_AVX2 && cpu_has_avx2_fma_f16c() ? VIT_ISA_AVX2
                                                                : VIT_ISA_SCALAR;
    }
    return (vit_isa_t)isa;
}

bool vit_isa_available(vit_isa_t isa)
{
    switch (isa) {
    case VIT_ISA_SCALAR: return true;
    case VIT_ISA_AVX2: return cpu_has_avx2_fma_f16c();
    case VIT_ISA_AVX512: return cpu_has_avx512_vnni();
    }
    return false;
}

const char *vit_isa_name(vit_isa_t isa)
{
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return (unsigned)isa < sizeof names / sizeof names[0] ? names[isa] : "?";
}

static void block_ref(const float *a, size_t lda, int m, const float *b, size_t ldb, int kc, float *c, size_t ldc,
                      int nc, bool accumulate)
{
    for (int i = 0; i < m; i++)
        for (int j = 0; j < nc; j++) {
            float s = accumulate ? c[(size_t)i * ldc + j] : 0.0f;
            for (int k = 0; k < kc; k++)
                s = fmaf(a[(size_t)i * lda + k], b[(size_t)k * ldb + j], s);
            c[(size_t)i * ldc + j] = s;
        }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VG_X86 1
#define VG_TARGET "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,f16c"

/* MR rows (a compile-time constant after inlining) × 32 columns: 2·MR
 * accumulators, the two B vectors loaded once per k and every A value
 * broadcast against both. Columns ≥ nc are neither read nor written. */
static inline __attribute__((always_inline, target(VG_TARGET))) void
tile512(int MR, const float *a, size_t lda, const float *b, size_t ldb, int kc, float *c, size_t ldc,
        __mmask16 m0, __mmask16 m1, bool accumulate)
{
    __m512 c0[VIT_GEMM_MR], c1[VIT_GEMM_MR];
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        c0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, c + (size_t)r * ldc) : _mm512_setzero_ps();
        c1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, c + (size_t)r * ldc + 16) : _mm512_setzero_ps();
    }
    for (int k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, b + (size_t)k * ldb);
        const __m512 b1 = _mm512_maskz_loadu_ps(m1, b + (size_t)k * ldb + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
            const __m512 x = _mm512_set1_ps(a[(size_t)r * lda + k]);
            c0[r] = _mm512_fmadd_ps(x, b0, c0[r]);
            c1[r] = _mm512_fmadd_ps(x, b1, c1[r]);
        }
    }
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
        _mm512_mask_storeu_ps(c + (size_t)r * ldc, m0, c0[r]);
        _mm512_mask_storeu_ps(c + (size_t)r * ldc + 16, m1, c1[r]);
    }
}

#define VG_TILE(MR)                                                                                             \
    __attribute__((target(VG_TARGET))) static void tile512_##MR(const float *a, size_t lda, const float *b,   \
                                                                 size_t ldb, int kc, float *c, size_t ldc,     \
                                                                 __mmask16 m0, __mmask16 m1, bool acc)         \
    {                                                                                                           \
        tile512(MR, a, lda, b, ldb, kc, c, ldc, m0, m1, acc);                                                   \
    }
VG_TILE(1)
VG_TILE(2)
VG_TILE(3)
VG_TILE(4)
VG_TILE(5)
VG_TILE(6)
VG_TILE(7)
VG_TILE(8)
VG_TILE(9)
VG_TILE(10)
VG_TILE(11)
VG_TILE(12)

typedef void tile_fn(const float *, size_t, const float *, size_t, int, float *, size_t, __mmask16, __mmask16, bool);
static tile_fn *const tiles[VIT_GEMM_MR + 1] = {
    NULL, tile512_1, tile512_2, tile512_3, tile512_4, tile512_5, tile512_6,
    tile512_7, tile512_8, tile512_9, tile512_10, tile512_11, tile512_12,
};

static void block512(const float *a, size_t lda, int m, const float *b, size_t ldb, int kc, float *c, size_t ldc,
                     int nc, bool accumulate)
{
    const __mmask16 m0 = (__mmask16)(nc >= 16 ? 0xffff : (1u << nc) - 1);
    const __mmask16 m1 = (__mmask16)(nc >= 32 ? 0xffff : nc <= 16 ? 0 : (1u << (nc - 16)) - 1);
    for (int i = 0; i < m; i += VIT_GEMM_MR) {
        const int mr = m - i < VIT_GEMM_MR ? m - i : VIT_GEMM_MR;
        tiles[mr](a + (size_t)i * lda, lda, b, ldb, kc, c + (size_t)i * ldc, ldc, m0, m1, accumulate);
    }
}

/* out[c] = column c of the 16 × 16 block r[0..15] (row i of it r[i]):
 * 32-bit, then 64-bit interleaves within 128-bit lanes, then two rounds
 * of 128-bit lane shuffles. */
static inline __attribute__((always_inline, target(VG_TARGET))) void transpose16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    /* u[4g + c], lane L: column 4L + c of rows 4g .. 4g+3 */
    for (int g = 0; g < 4; g++) {
        const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 2]);
        const __m512d c = _mm512_castps_pd(t[4 * g + 1]), d = _mm512_castps_pd(t[4 * g + 3]);
        u[4 * g + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    for (int c = 0; c < 4; c++) {
        const __m512 x0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88), x1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
        const __m512 y0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
        const __m512 y1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
        r[c] = _mm512_shuffle_f32x4(x0, y0, 0x88);
        r[c + 4] = _mm512_shuffle_f32x4(x1, y1, 0x88);
        r[c + 8] = _mm512_shuffle_f32x4(x0, y0, 0xdd);
        r[c + 12] = _mm512_shuffle_f32x4(x1, y1, 0xdd);
    }
}

/* p (kc, 32) = columns [k0, k0+kc) of n <= 32 rows of w (F16 when f16,
 * else F32; row stride ldw elements), transposed; rows ≥ n give 0. 16
 * rows × 16 columns per transpose; a last partial group of 16 columns one
 * value at a time. */
__attribute__((target(VG_TARGET))) static void pack512(const void *w, size_t ldw, bool f16, int n, int k0, int kc,
                                                       float *p)
{
    const uint16_t *wh = w;
    const float *wf = w;
    for (int j0 = 0; j0 < VIT_GEMM_NR; j0 += 16) {
        int k = 0;
        for (; k + 16 <= kc; k += 16) {
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++) {
                const size_t off = (size_t)(j0 + i) * ldw + (size_t)(k0 + k);
                r[i] = j0 + i >= n ? _mm512_setzero_ps()
                       : f16       ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(wh + off)))
                                   : _mm512_loadu_ps(wf + off);
            }
            transpose16(r);
#pragma GCC unroll 16
            for (int c = 0; c < 16; c++)
                _mm512_storeu_ps(p + (size_t)(k + c) * VIT_GEMM_NR + j0, r[c]);
        }
        for (; k < kc; k++)
            for (int i = 0; i < 16; i++) {
                const size_t off = (size_t)(j0 + i) * ldw + (size_t)(k0 + k);
                p[(size_t)k * VIT_GEMM_NR + j0 + i] =
                    j0 + i >= n ? 0.0f : f16 ? quant_fp16_to_fp32(wh[off]) : wf[off];
            }
    }
}
#endif

void vit_gemm_block(vit_isa_t isa, const float *a, size_t lda, int m, const float *b, size_t ldb, int kc, float *c,
                    size_t ldc, int nc, bool accumulate)
{
    assert(nc >= 0 && nc <= VIT_GEMM_NR);
#ifdef VG_X86
    if (isa == VIT_ISA_AVX512) {
        block512(a, lda, m, b, ldb, kc, c, ldc, nc, accumulate);
        return;
    }
#endif
    (void)isa;
    block_ref(a, lda, m, b, ldb, kc, c, ldc, nc, accumulate);
}

/* p (kc, 32) from n <= 32 rows of w starting at row n0: F32 or F16. */
static void pack(vit_isa_t isa, const matmul_weight_t *w, int64_t n0, int n, int k0, int kc, float *p)
{
    const bool f16 = w->type == GGML_TYPE_F16;
    assert(f16 || w->type == GGML_TYPE_F32);
    const size_t ldw = w->row_bytes / (f16 ? 2 : 4);
    const uint8_t *src = w->data + (size_t)n0 * w->row_bytes;
#ifdef VG_X86
    if (isa == VIT_ISA_AVX512) {
        pack512(src, ldw, f16, n, k0, kc, p);
        return;
    }
#endif
    (void)isa;
    const uint16_t *wh = (const uint16_t *)(const void *)src;
    const float *wf = (const float *)(const void *)src;
    for (int k = 0; k < kc; k++)
        for (int j = 0; j < VIT_GEMM_NR; j++) {
            const size_t off = (size_t)j * ldw + (size_t)(k0 + k);
            p[(size_t)k * VIT_GEMM_NR + j] = j >= n ? 0.0f : f16 ? quant_fp16_to_fp32(wh[off]) : wf[off];
        }
}

bool vit_gemm_supported(const matmul_weight_t *w)
{
    return w->type == GGML_TYPE_F32 || w->type == GGML_TYPE_F16;
}

size_t vit_gemm_scratch(int n_threads)
{
    return (size_t)(n_threads > 0 ? n_threads : 1) * VIT_GEMM_NC * VIT_GEMM_KC;
}

void vit_gemm(vit_isa_t isa, const matmul_weight_t *w, const float *x, int n_rows, float *y, float *scratch,
              int n_threads)
{
    assert(vit_gemm_supported(w));
    const int K = (int)w->cols;
    const int64_t N = w->rows, n_chunks = (N + VIT_GEMM_NC - 1) / VIT_GEMM_NC;
    const int nt = n_threads > 0 ? n_threads : 1;
    if (n_rows <= 0)
        return;
#pragma omp parallel num_threads(nt)
    {
        /* this thread's panels: (VIT_GEMM_NC / 32) of (KC, 32) */
        float *pan = scratch + (size_t)omp_get_thread_num() * VIT_GEMM_NC * VIT_GEMM_KC;
#pragma omp for schedule(dynamic, 1)
        for (int64_t ch = 0; ch < n_chunks; ch++) {
            const int64_t n0 = ch * VIT_GEMM_NC;
            const int nn = N - n0 < VIT_GEMM_NC ? (int)(N - n0) : VIT_GEMM_NC;
            const int n_pan = (nn + VIT_GEMM_NR - 1) / VIT_GEMM_NR;
            for (int k0 = 0; k0 < K; k0 += VIT_GEMM_KC) {
                const int kc = K - k0 < VIT_GEMM_KC ? K - k0 : VIT_GEMM_KC;
                for (int p = 0; p < n_pan; p++) {
                    const int np = nn - p * VIT_GEMM_NR < VIT_GEMM_NR ? nn - p * VIT_GEMM_NR : VIT_GEMM_NR;
                    pack(isa, w, n0 + (int64_t)p * VIT_GEMM_NR, np, k0, kc, pan + (size_t)p * kc * VIT_GEMM_NR);
                }
                /* 12 rows of X (12 · kc floats, L1) against every panel
                 * of the chunk (L2) before the next 12 */
                for (int i = 0; i < n_rows; i += VIT_GEMM_MR) {
                    const int mr = n_rows - i < VIT_GEMM_MR ? n_rows - i : VIT_GEMM_MR;
                    for (int p = 0; p < n_pan; p++) {
                        const int np = nn - p * VIT_GEMM_NR < VIT_GEMM_NR ? nn - p * VIT_GEMM_NR : VIT_GEMM_NR;
                        vit_gemm_block(isa, x + (size_t)i * K + k0, (size_t)K, mr, pan + (size_t)p * kc * VIT_GEMM_NR,
                                       VIT_GEMM_NR, kc, y + (size_t)i * N + n0 + (size_t)p * VIT_GEMM_NR, (size_t)N, np,
                                       k0 > 0);
                    }
                }
            }
        }
    }
}
