/* vit_attn.c — full softmax attention for vision encoders (see vit_attn.h):
 * a portable reference, an AVX2 kernel blocked over 4 queries, and the
 * AVX-512 one: both products of a block of 12 queries (scores, then
 * probabilities · values) on vit_gemm's 12 × 32 register block. */
#include "worker/kernels/vit_attn.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "common/cpu.h"
#include "worker/kernels/vit_gemm.h"
#include "worker/kernels/vmath.h"

/* queries per block: the AVX2 kernel's, the AVX-512 one's (its register block) */
#define VA_QB 4
#define VA_QB512 VIT_GEMM_MR

/* Task t of the (head, block of qb queries) pairs, n queries per head:
 * its head, first query and query count. */
static inline void va_task(long t, int n, int qb, int *h, int *i0, int *nq)
{
    const int n_blk = (n + qb - 1) / qb;
    *h = (int)(t / n_blk);
    *i0 = (int)(t % n_blk) * qb;
    *nq = n - *i0 < qb ? n - *i0 : qb;
}

size_t vit_attn_scratch(int n, int ld, int n_threads)
{
    /* kᵀ of every head, n rounded up to the 32-key panels ((ld, n) for
     * AVX2) + per thread a block of queries' n scores */
    const size_t n32 = ((size_t)n + VIT_GEMM_NR - 1) / VIT_GEMM_NR * VIT_GEMM_NR;
    return (size_t)ld * n32 + (size_t)n_threads * VA_QB512 * (size_t)n;
}

void vit_attn_ref(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd, float scale,
                  float *out, float *scratch, int n_threads)
{
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 16)
    for (long task = 0; task < (long)n_head * n; task++) {
        const int h = (int)(task / n), i = (int)(task % n);
        float *sc = scratch + (size_t)omp_get_thread_num() * n;
        const float *qi = q + (size_t)i * ld + (size_t)h * hd;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            const float *kj = k + (size_t)j * ld + (size_t)h * hd;
            float s = 0;
            for (int d = 0; d < hd; d++)
                s += qi[d] * kj[d];
            sc[j] = s * scale;
            mx = sc[j] > mx ? sc[j] : mx;
        }
        float sum = 0;
        for (int j = 0; j < n; j++)
            sum += (sc[j] = expf(sc[j] - mx));
        float *oi = out + (size_t)i * ld + (size_t)h * hd;
        memset(oi, 0, (size_t)hd * sizeof(float));
        for (int j = 0; j < n; j++) {
            const float p = sc[j] / sum, *vj = v + (size_t)j * ld + (size_t)h * hd;
            for (int d = 0; d < hd; d++)
                oi[d] += p * vj[d];
        }
    }
}

#ifdef VMATH_X86
/* sc (nq rows of n, row stride n) = q_r · kt[:, j] · scale for nq <= VA_QB
 * query rows q + r·ld; kt (hd, n). 16 keys by 4 queries per pass (8
 * accumulators), the tail 8 then 1 key at a time; each score is summed
 * over d in order, whatever nq is. */
VMATH_FN static void scores_blk(const float *q, int nq, int ld, const float *kt, int n, int hd, float scale,
                                float *sc)
{
    const float *qr[VA_QB];
    for (int r = 0; r < VA_QB; r++)
        qr[r] = q + (size_t)(r < nq ? r : 0) * ld;
    const __m256 s8 = _mm256_set1_ps(scale);
    int j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 a[VA_QB][2];
        for (int r = 0; r < VA_QB; r++)
            a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            const float *kd = kt + (size_t)d * n + j;
            __m256 k0 = _mm256_loadu_ps(kd), k1 = _mm256_loadu_ps(kd + 8);
            for (int r = 0; r < VA_QB; r++) {
                __m256 qd = _mm256_broadcast_ss(qr[r] + d);
                a[r][0] = _mm256_fmadd_ps(qd, k0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(qd, k1, a[r][1]);
            }
        }
        for (int r = 0; r < nq; r++) {
            _mm256_storeu_ps(sc + (size_t)r * n + j, _mm256_mul_ps(a[r][0], s8));
            _mm256_storeu_ps(sc + (size_t)r * n + j + 8, _mm256_mul_ps(a[r][1], s8));
        }
    }
    for (; j + 8 <= n; j += 8) {
        __m256 a[VA_QB];
        for (int r = 0; r < VA_QB; r++)
            a[r] = _mm256_setzero_ps();
        for (int d = 0; d < hd; d++) {
            __m256 k0 = _mm256_loadu_ps(kt + (size_t)d * n + j);
            for (int r = 0; r < VA_QB; r++)
                a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(qr[r] + d), k0, a[r]);
        }
        for (int r = 0; r < nq; r++)
            _mm256_storeu_ps(sc + (size_t)r * n + j, _mm256_mul_ps(a[r], s8));
    }
    for (; j < n; j++)
        for (int r = 0; r < nq; r++) {
            float s = 0;
            for (int d = 0; d < hd; d++)
                s = fmaf(qr[r][d], kt[(size_t)d * n + j], s);
            sc[(size_t)r * n + j] = s * scale;
        }
}

/* sc (n) = e^(scale · (sc − max sc)) in place; returns 1 / Σ
 * (scale 1 for the AVX2 kernel, whose scores are scaled already). */
VMATH_FN static float softmax_row_scaled(float *sc, int n, float scale)
{
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8)
        m8 = _mm256_max_ps(m8, _mm256_loadu_ps(sc + j));
    float lanes[8], mx = -INFINITY;
    _mm256_storeu_ps(lanes, m8);
    for (int l = 0; l < 8; l++)
        mx = lanes[l] > mx ? lanes[l] : mx;
    for (; j < n; j++)
        mx = sc[j] > mx ? sc[j] : mx;
    const __m256 mv = _mm256_set1_ps(mx), sv = _mm256_set1_ps(scale);
    __m256 s8 = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = vmath_exp8(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mv), sv));
        _mm256_storeu_ps(sc + j, e);
        s8 = _mm256_add_ps(s8, e);
    }
    float sum = vmath_hsum8(s8);
    for (; j < n; j++)
        sum += (sc[j] = expf((sc[j] - mx) * scale));
    return 1.0f / sum;
}

/* out_r (hd) = inv_r · Σ_j sc_r[j] v_j for nq rows: 16 columns by 4 rows
 * per pass (8 accumulators), then 8 columns; summed over j in order. */
VMATH_FN static void values_blk(const float *sc, const float *inv, int nq, int n, const float *v, int ld, int hd,
                                float *out)
{
    const float *sr[VA_QB];
    for (int r = 0; r < VA_QB; r++)
        sr[r] = sc + (size_t)(r < nq ? r : 0) * n;
    int c = 0;
    for (; c + 16 <= hd; c += 16) {
        __m256 a[VA_QB][2];
        for (int r = 0; r < VA_QB; r++)
            a[r][0] = a[r][1] = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) {
            const float *vj = v + (size_t)j * ld + c;
            __m256 v0 = _mm256_loadu_ps(vj), v1 = _mm256_loadu_ps(vj + 8);
            for (int r = 0; r < VA_QB; r++) {
                __m256 p = _mm256_broadcast_ss(sr[r] + j);
                a[r][0] = _mm256_fmadd_ps(p, v0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(p, v1, a[r][1]);
            }
        }
        for (int r = 0; r < nq; r++) {
            __m256 iv = _mm256_set1_ps(inv[r]);
            _mm256_storeu_ps(out + (size_t)r * ld + c, _mm256_mul_ps(a[r][0], iv));
            _mm256_storeu_ps(out + (size_t)r * ld + c + 8, _mm256_mul_ps(a[r][1], iv));
        }
    }
    for (; c < hd; c += 8) {
        __m256 a[VA_QB];
        for (int r = 0; r < VA_QB; r++)
            a[r] = _mm256_setzero_ps();
        for (int j = 0; j < n; j++) {
            __m256 v0 = _mm256_loadu_ps(v + (size_t)j * ld + c);
            for (int r = 0; r < VA_QB; r++)
                a[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(sr[r] + j), v0, a[r]);
        }
        for (int r = 0; r < nq; r++)
            _mm256_storeu_ps(out + (size_t)r * ld + c, _mm256_mul_ps(a[r], _mm256_set1_ps(inv[r])));
    }
}

static void vit_attn_avx2(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd,
                          float scale, float *out, float *scratch, int n_threads)
{
    float *kt = scratch;                   /* (ld, n): kt[c·n + j] = k[j·ld + c] */
    float *sc_all = scratch + (size_t)ld * n;
#pragma omp parallel num_threads(n_threads)
    {
#pragma omp for schedule(static)
        for (int c = 0; c < ld; c++)
            for (int j = 0; j < n; j++)
                kt[(size_t)c * n + j] = k[(size_t)j * ld + c];
        float *sc = sc_all + (size_t)omp_get_thread_num() * VA_QB * n;
#pragma omp for schedule(dynamic, 4)
        for (long task = 0; task < (long)n_head * ((n + VA_QB - 1) / VA_QB); task++) {
            int h, i0, nq;
            va_task(task, n, VA_QB, &h, &i0, &nq);
            float inv[VA_QB];
            scores_blk(q + (size_t)i0 * ld + (size_t)h * hd, nq, ld, kt + (size_t)h * hd * n, n, hd, scale, sc);
            for (int r = 0; r < nq; r++)
                inv[r] = softmax_row_scaled(sc + (size_t)r * n, n, 1.0f);
            values_blk(sc, inv, nq, n, v + (size_t)h * hd, ld, hd, out + (size_t)i0 * ld + (size_t)h * hd);
        }
    }
}

/* Per head: K_h packed as 32-key panels of kᵀ (hd, 32), zero past n;
 * per block of 12 queries: S (12, n) = Q_h · K_hᵀ panel by panel, each
 * row's softmax, O_h (12, hd) = P · V_h (V read in place, 32 columns at a
 * time), times 1 / Σ. Every score and output is one FMA chain in order
 * (vit_gemm.h), so a query's row does not depend on its block. */
static void vit_attn_512(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd,
                         float scale, float *out, float *scratch, int n_threads)
{
    const int n_pan = (n + VIT_GEMM_NR - 1) / VIT_GEMM_NR;
    const size_t pan = (size_t)hd * VIT_GEMM_NR; /* floats of one panel */
    float *kp = scratch;                          /* (n_head, n_pan, hd, 32) */
    float *sc_all = scratch + (size_t)ld * (size_t)n_pan * VIT_GEMM_NR;
#pragma omp parallel num_threads(n_threads)
    {
#pragma omp for schedule(static)
        for (int hp = 0; hp < n_head * n_pan; hp++) {
            const int h = hp / n_pan, p = hp % n_pan, j0 = p * VIT_GEMM_NR;
            float *dst = kp + (size_t)hp * pan;
            for (int jj = 0; jj < VIT_GEMM_NR; jj++) {
                const float *kj = k + (size_t)(j0 + jj) * ld + (size_t)h * hd;
                for (int d = 0; d < hd; d++)
                    dst[(size_t)d * VIT_GEMM_NR + jj] = j0 + jj < n ? kj[d] : 0.0f;
            }
        }
        float *sc = sc_all + (size_t)omp_get_thread_num() * VA_QB512 * n;
#pragma omp for schedule(dynamic, 2)
        for (long task = 0; task < (long)n_head * ((n + VA_QB512 - 1) / VA_QB512); task++) {
            int h, i0, nq;
            va_task(task, n, VA_QB512, &h, &i0, &nq);
            const float *qh = q + (size_t)i0 * ld + (size_t)h * hd;
            for (int p = 0; p < n_pan; p++) {
                const int nc = n - p * VIT_GEMM_NR < VIT_GEMM_NR ? n - p * VIT_GEMM_NR : VIT_GEMM_NR;
                vit_gemm_block(VIT_ISA_AVX512, qh, (size_t)ld, nq, kp + ((size_t)h * n_pan + p) * pan, VIT_GEMM_NR,
                               hd, sc + (size_t)p * VIT_GEMM_NR, (size_t)n, nc, false);
            }
            float inv[VA_QB512];
            for (int r = 0; r < nq; r++)
                inv[r] = softmax_row_scaled(sc + (size_t)r * n, n, scale);
            float *oh = out + (size_t)i0 * ld + (size_t)h * hd;
            for (int c = 0; c < hd; c += VIT_GEMM_NR)
                vit_gemm_block(VIT_ISA_AVX512, sc, (size_t)n, nq, v + (size_t)h * hd + c, (size_t)ld, n, oh + c,
                               (size_t)ld, hd - c < VIT_GEMM_NR ? hd - c : VIT_GEMM_NR, false);
            for (int r = 0; r < nq; r++)
                for (int c = 0; c < hd; c++)
                    oh[(size_t)r * ld + c] *= inv[r];
        }
    }
}
#endif

void vit_attn_isa(vit_isa_t isa, const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd,
                  float scale, float *out, float *scratch, int n_threads)
{
#ifdef VMATH_X86
    if (isa == VIT_ISA_AVX512 && vit_isa_available(VIT_ISA_AVX512)) {
        vit_attn_512(q, k, v, n, ld, n_head, hd, scale, out, scratch, n_threads);
        return;
    }
    if (isa >= VIT_ISA_AVX2 && hd % 8 == 0 && cpu_has_avx2_fma_f16c()) {
        vit_attn_avx2(q, k, v, n, ld, n_head, hd, scale, out, scratch, n_threads);
        return;
    }
#else
    (void)isa;
#endif
    vit_attn_ref(q, k, v, n, ld, n_head, hd, scale, out, scratch, n_threads);
}

void vit_attn(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd, float scale,
              float *out, float *scratch, int n_threads)
{
    vit_attn_isa(vit_isa_default(), q, k, v, n, ld, n_head, hd, scale, out, scratch, n_threads);
}
