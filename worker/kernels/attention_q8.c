/* attention_q8.c — scores and values of attention over a Q8_0 KV cache (see
 * attention_q8.h): integer q·k dot products per ISA, values dequantized on
 * the fly, every path giving the scalar path's bits. */
#include "worker/kernels/attention_q8.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>

#include "common/cpu.h"
#include "worker/kernels/quant.h"

/* ---- queries ------------------------------------------------------------ */

void attention_q8_quantize_q(const float *q, int nh, int hd, int qb, int8_t *qq, float *qd)
{
    assert(qb > 0 && hd % qb == 0);
    const int nb = hd / qb;
    for (int h = 0; h < nh; h++)
        for (int b = 0; b < nb; b++) {
            const float *x = q + (size_t)h * hd + (size_t)b * qb;
            int8_t *o = qq + (size_t)h * hd + (size_t)b * qb;
            float amax = 0;
            for (int i = 0; i < qb; i++) {
                float a = fabsf(x[i]);
                amax = a > amax ? a : amax;
            }
            const float d = amax / 127.0f, id = d > 0 ? 1.0f / d : 0.0f;
            qd[h * nb + b] = d;
            for (int i = 0; i < qb; i++) {
                float r = nearbyintf(x[i] * id);
                o[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
            }
        }
}

/* ---- scores ------------------------------------------------------------- */

/* The float part of one (head, position) score from its block sums ih[nb],
 * the head's query scales qdh[nb] and the position's K scales kdf[nb]:
 * the one definition every path follows (the vector path computes the
 * same operations per lane). */
static inline float combine1(const int32_t *ih, const float *qdh, const float *kdf, int nb, float scale)
{
    float s = 0;
    for (int b = 0; b < nb; b++) {
        float p = qdh[b] * kdf[b];
        p = p * (float)ih[b];
        s = b ? s + p : p;
    }
    return s * scale;
}

/* Scores of n consecutive slots (K vectors at row0 + j*rb, this head slice
 * at byte kvo, scales at byte kv_dim + 2*kvo/qb) into sc[h*ld + j]. */
static void scores_scalar(const int8_t *qq, const float *qd, int nh, int hd, int qb, const char *row0, size_t rb,
                          int kvo, int kv_dim, int n, float scale, float *sc, size_t ld)
{
    const int nb = hd / qb;
    int32_t ih[ATTQ8_MAX_HEAD_DIM / 8];
    float kdf[ATTQ8_MAX_HEAD_DIM / 8];
    for (int j = 0; j < n; j++) {
        const char *row = row0 + (size_t)j * rb;
        const int8_t *k = (const int8_t *)row + kvo;
        const uint16_t *kd = (const uint16_t *)(row + kv_dim) + kvo / qb;
        for (int b = 0; b < nb; b++)
            kdf[b] = quant_fp16_to_fp32(kd[b]);
        for (int h = 0; h < nh; h++) {
            for (int b = 0; b < nb; b++) {
                const int8_t *a = qq + (size_t)h * hd + (size_t)b * qb, *c = k + (size_t)b * qb;
                int32_t t = 0;
                for (int i = 0; i < qb; i++)
                    t += (int32_t)a[i] * (int32_t)c[i];
                ih[b] = t;
            }
            sc[(size_t)h * ld + (size_t)j] = combine1(ih, qd + (size_t)h * nb, kdf, nb, scale);
        }
    }
}

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ATTQ8_X86 1

#define T_AVX2 "avx2,f16c"
#define T_VNNI "avx2,f16c,avxvnni"
#define T_V512 "avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni"
#define T_FMA "avx2,fma,f16c"

/* The dot of 32 int8 pairs as 8 int32 partial sums: |q| as the unsigned
 * operand, k with q's sign as the signed one (|q|, |k| <= 127: no int16
 * saturation in maddubs, exact in every path). */
#define DOT_AVX2(aq, sk) _mm256_madd_epi16(_mm256_maddubs_epi16(aq, sk), _mm256_set1_epi16(1))
#define DOT_VNNI(aq, sk) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aq, sk)
#define DOT_V512(aq, sk) _mm256_dpbusd_epi32(_mm256_setzero_si256(), aq, sk)

/* scores_scalar with qb == 32 (nh <= 4): eight positions at a time, their
 * eight block sums reduced into one vector (lane u = position j+u) and the
 * float part done lane-wise with combine1's operations in combine1's order;
 * the remaining positions one by one through combine1. Same bits. */
#define SCORES_FN(NAME, TARGET, DOT)                                                                       \
    static __attribute__((target(TARGET))) void NAME(const int8_t *qq, const float *qd, int nh, int hd,    \
                                                     const char *row0, size_t rb, int kvo, int kv_dim,     \
                                                     int n, float scale, float *sc, size_t ld)              \
    {                                                                                                      \
        const int nb = hd / 32, nv = nh * nb;                                                              \
        __m256i qv[4 * (ATTQ8_MAX_HEAD_DIM / 32)], aq[4 * (ATTQ8_MAX_HEAD_DIM / 32)];                       \
        for (int v = 0; v < nv; v++) { /* v = h*nb + b */                                                   \
            qv[v] = _mm256_loadu_si256((const __m256i *)(qq + (size_t)v * 32));                           \
            aq[v] = _mm256_abs_epi8(qv[v]);                                                                \
        }                                                                                                  \
        const __m256 scv = _mm256_set1_ps(scale);                                                          \
        int j = 0;                                                                                         \
        for (; j + 8 <= n; j += 8) {                                                                       \
            float kdf[ATTQ8_MAX_HEAD_DIM / 32][8];                                                         \
            for (int u = 0; u < 8; u++) {                                                                  \
                const uint16_t *kd = (const uint16_t *)(row0 + (size_t)(j + u) * rb + kv_dim) + kvo / 32;  \
                for (int b = 0; b < nb; b++)                                                               \
                    kdf[b][u] = _cvtsh_ss(kd[b]);                                                          \
            }                                                                                              \
            if (j + 16 <= n)                                                                               \
                for (int u = 8; u < 16; u++)                                                               \
                    _mm_prefetch(row0 + (size_t)(j + u) * rb + kvo, _MM_HINT_T0);                          \
            for (int h = 0; h < nh; h++) {                                                                 \
                __m256 s = _mm256_setzero_ps();                                                            \
                for (int b = 0; b < nb; b++) {                                                             \
                    const int v = h * nb + b;                                                              \
                    __m256i d[8];                                                                          \
                    for (int u = 0; u < 8; u++) {                                                          \
                        const __m256i kb = _mm256_loadu_si256(                                             \
                            (const __m256i *)(row0 + (size_t)(j + u) * rb + (size_t)kvo + (size_t)b * 32)); \
                        d[u] = DOT(aq[v], _mm256_sign_epi8(kb, qv[v]));                                    \
                    }                                                                                      \
                    const __m256i x0 = _mm256_hadd_epi32(d[0], d[1]), x1 = _mm256_hadd_epi32(d[2], d[3]);  \
                    const __m256i x2 = _mm256_hadd_epi32(d[4], d[5]), x3 = _mm256_hadd_epi32(d[6], d[7]);  \
                    const __m256i y0 = _mm256_hadd_epi32(x0, x1), y1 = _mm256_hadd_epi32(x2, x3);          \
                    const __m256i is8 = _mm256_add_epi32(_mm256_permute2x128_si256(y0, y1, 0x20),          \
                                                         _mm256_permute2x128_si256(y0, y1, 0x31));         \
                    __m256 p = _mm256_mul_ps(_mm256_set1_ps(qd[v]), _mm256_loadu_ps(kdf[b]));              \
                    p = _mm256_mul_ps(p, _mm256_cvtepi32_ps(is8));                                         \
                    s = b ? _mm256_add_ps(s, p) : p;                                                       \
                }                                                                                          \
                _mm256_storeu_ps(sc + (size_t)h * ld + (size_t)j, _mm256_mul_ps(s, scv));                  \
            }                                                                                              \
        }                                                                                                  \
        for (; j < n; j++) {                                                                               \
            const char *row = row0 + (size_t)j * rb;                                                       \
            const uint16_t *kd = (const uint16_t *)(row + kv_dim) + kvo / 32;                              \
            float kdf1[ATTQ8_MAX_HEAD_DIM / 32];                                                           \
            int32_t ih[ATTQ8_MAX_HEAD_DIM / 32];                                                           \
            for (int b = 0; b < nb; b++)                                                                   \
                kdf1[b] = _cvtsh_ss(kd[b]);                                                                \
            for (int h = 0; h < nh; h++) {                                                                 \
                for (int b = 0; b < nb; b++) {                                                             \
                    const int v = h * nb + b;                                                              \
                    const __m256i kb =                                                                     \
                        _mm256_loadu_si256((const __m256i *)(row + (size_t)kvo + (size_t)b * 32));         \
                    const __m256i dv = DOT(aq[v], _mm256_sign_epi8(kb, qv[v]));                            \
                    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(dv), _mm256_extracti128_si256(dv, 1)); \
                    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));                                      \
                    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));                                      \
                    ih[b] = _mm_cvtsi128_si32(t);                                                          \
                }                                                                                          \
                sc[(size_t)h * ld + (size_t)j] = combine1(ih, qd + (size_t)h * nb, kdf1, nb, scale);       \
            }                                                                                              \
        }                                                                                                  \
    }

SCORES_FN(scores_avx2, T_AVX2, DOT_AVX2)
SCORES_FN(scores_vnni, T_VNNI, DOT_VNNI)
SCORES_FN(scores_v512, T_V512, DOT_V512)

/* attention_q8_values' AVX2 loop (every vector ISA): 16 outputs of each
 * head per pass; each position's V slice is dequantized once (d * q, as
 * the scalar path) and shared by the heads. */
static __attribute__((target(T_FMA))) void values_avx2(const float *w, size_t ld, int nh, const float *inv,
                                                       const kv_store_t *kv, int l, const int32_t *bt, int t0,
                                                       int t1, int kvo, int hd, float *out)
{
    const int bs = kv->block_size, qb = kv->qblock;
    const size_t rb = kv_store_row_bytes(kv);
    for (int i0 = 0; i0 < hd; i0 += 16) {
        const int two = hd - i0 >= 16;
        const int b0 = (kvo + i0) / qb, b1 = (kvo + i0 + 8) / qb;
        __m256 acc[4][2];
        for (int h = 0; h < 4; h++)
            acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int tb = t0; tb < t1;) {
            const int slot0 = tb % bs, n = (t1 - tb < bs - slot0) ? t1 - tb : bs - slot0;
            const char *row0 = kv_store_v_at(kv, l, bt[tb / bs], slot0);
            const size_t o = (size_t)(tb - t0);
            for (int j = 0; j < n; j++) {
                const char *row = row0 + (size_t)j * rb;
                const int8_t *vq = (const int8_t *)row + kvo + i0;
                const uint16_t *vd = (const uint16_t *)(row + kv->kv_dim);
                if (j + 4 < n)
                    _mm_prefetch(row + 4 * rb + kvo + i0, _MM_HINT_T0);
                const __m256 v0 = _mm256_mul_ps(
                    _mm256_set1_ps(_cvtsh_ss(vd[b0])), /* exact, = quant_fp16_to_fp32 */
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)vq))));
                if (two) {
                    const __m256 v1 = _mm256_mul_ps(
                        _mm256_set1_ps(_cvtsh_ss(vd[b1])),
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(vq + 8)))));
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < nh) {
                            const __m256 wv = _mm256_set1_ps(w[(size_t)h * ld + o + (size_t)j]);
                            acc[h][0] = _mm256_fmadd_ps(wv, v0, acc[h][0]);
                            acc[h][1] = _mm256_fmadd_ps(wv, v1, acc[h][1]);
                        }
                } else {
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < nh)
                            acc[h][0] = _mm256_fmadd_ps(_mm256_set1_ps(w[(size_t)h * ld + o + (size_t)j]), v0,
                                                        acc[h][0]);
                }
            }
            tb += n;
        }
        for (int h = 0; h < nh; h++) {
            _mm256_storeu_ps(out + (size_t)h * hd + i0, _mm256_mul_ps(acc[h][0], _mm256_set1_ps(inv[h])));
            if (two)
                _mm256_storeu_ps(out + (size_t)h * hd + i0 + 8, _mm256_mul_ps(acc[h][1], _mm256_set1_ps(inv[h])));
        }
    }
}

/* values_avx2 with 16-lane vectors (the avx512vnni ISA): 32 outputs of each
 * head per pass; each lane does values_scalar's operations. */
static __attribute__((target(T_V512 ",fma"))) void values_v512(const float *w, size_t ld, int nh, const float *inv,
                                                              const kv_store_t *kv, int l, const int32_t *bt,
                                                              int t0, int t1, int kvo, int hd, float *out)
{
    const int bs = kv->block_size, qb = kv->qblock;
    const size_t rb = kv_store_row_bytes(kv);
    for (int i0 = 0; i0 < hd; i0 += 32) {
        const int two = hd - i0 >= 32; /* else 16 left (hd is a multiple of 16 here) */
        const int b0 = (kvo + i0) / qb, b0h = (kvo + i0 + 8) / qb, b1 = (kvo + i0 + 16) / qb,
                  b1h = (kvo + i0 + 24) / qb;
        __m512 acc[4][2];
        for (int h = 0; h < 4; h++)
            acc[h][0] = acc[h][1] = _mm512_setzero_ps();
        for (int tb = t0; tb < t1;) {
            const int slot0 = tb % bs, n = (t1 - tb < bs - slot0) ? t1 - tb : bs - slot0;
            const char *row0 = kv_store_v_at(kv, l, bt[tb / bs], slot0);
            const size_t o = (size_t)(tb - t0);
            for (int j = 0; j < n; j++) {
                const char *row = row0 + (size_t)j * rb;
                const int8_t *vq = (const int8_t *)row + kvo + i0;
                const uint16_t *vd = (const uint16_t *)(row + kv->kv_dim);
                if (j + 4 < n)
                    _mm_prefetch(row + 4 * rb + kvo + i0, _MM_HINT_T0);
                /* the scale of each 8-element group (blocks of 8 or 16 change inside a vector) */
                const __m512 d0 = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(vd[b0]))),
                                                     _mm256_set1_ps(_cvtsh_ss(vd[b0h])), 1);
                const __m512 v0 = _mm512_mul_ps(
                    d0, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)vq))));
                if (two) {
                    const __m512 d1 = _mm512_insertf32x8(
                        _mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(vd[b1]))), _mm256_set1_ps(_cvtsh_ss(vd[b1h])), 1);
                    const __m512 v1 = _mm512_mul_ps(
                        d1, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(vq + 16)))));
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < nh) {
                            const __m512 wv = _mm512_set1_ps(w[(size_t)h * ld + o + (size_t)j]);
                            acc[h][0] = _mm512_fmadd_ps(wv, v0, acc[h][0]);
                            acc[h][1] = _mm512_fmadd_ps(wv, v1, acc[h][1]);
                        }
                } else {
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < nh)
                            acc[h][0] = _mm512_fmadd_ps(_mm512_set1_ps(w[(size_t)h * ld + o + (size_t)j]), v0,
                                                        acc[h][0]);
                }
            }
            tb += n;
        }
        for (int h = 0; h < nh; h++) {
            _mm512_storeu_ps(out + (size_t)h * hd + i0, _mm512_mul_ps(acc[h][0], _mm512_set1_ps(inv[h])));
            if (two)
                _mm512_storeu_ps(out + (size_t)h * hd + i0 + 16, _mm512_mul_ps(acc[h][1], _mm512_set1_ps(inv[h])));
        }
    }
}
#endif

void attention_q8_scores(qgemm_isa_t isa, const int8_t *qq, const float *qd, int nh, const kv_store_t *kv, int l,
                         const int32_t *bt, int t0, int t1, int kvo, int hd, float scale, float *sc, size_t ld)
{
    const int bs = kv->block_size, qb = kv->qblock;
    assert(kv->type == KV_TYPE_Q8_0 && qb > 0 && hd % qb == 0 && kvo % qb == 0 && nh >= 1 && nh <= 4);
    assert(hd <= ATTQ8_MAX_HEAD_DIM && t0 >= 0 && t1 > t0);
    const size_t rb = kv_store_row_bytes(kv);
    for (int t = t0; t < t1;) {
        const int slot0 = t % bs, n = (t1 - t < bs - slot0) ? t1 - t : bs - slot0;
        const char *row0 = kv_store_k_at(kv, l, bt[t / bs], slot0);
        float *o = sc + (size_t)(t - t0);
#ifdef ATTQ8_X86
        if (qb == 32 && isa == QGEMM_ISA_AVX512VNNI)
            scores_v512(qq, qd, nh, hd, row0, rb, kvo, kv->kv_dim, n, scale, o, ld);
        else if (qb == 32 && isa == QGEMM_ISA_AVXVNNI)
            scores_vnni(qq, qd, nh, hd, row0, rb, kvo, kv->kv_dim, n, scale, o, ld);
        else if (qb == 32 && isa == QGEMM_ISA_AVX2)
            scores_avx2(qq, qd, nh, hd, row0, rb, kvo, kv->kv_dim, n, scale, o, ld);
        else
#endif
            scores_scalar(qq, qd, nh, hd, qb, row0, rb, kvo, kv->kv_dim, n, scale, o, ld);
        t += n;
    }
}

/* ---- values ------------------------------------------------------------- */

static void values_scalar(const float *w, size_t ld, int nh, const float *inv, const kv_store_t *kv, int l,
                          const int32_t *bt, int t0, int t1, int kvo, int hd, float *out)
{
    const int bs = kv->block_size, qb = kv->qblock;
    for (int h = 0; h < nh; h++) {
        float acc[ATTQ8_MAX_HEAD_DIM];
        for (int i = 0; i < hd; i++)
            acc[i] = 0;
        for (int t = t0; t < t1; t++) {
            const char *row = kv_store_v_at(kv, l, bt[t / bs], t % bs);
            const int8_t *vq = (const int8_t *)row + kvo;
            const uint16_t *vd = (const uint16_t *)(row + kv->kv_dim) + kvo / qb;
            const float wt = w[(size_t)h * ld + (size_t)(t - t0)];
            for (int b = 0; b < hd / qb; b++) {
                const float d = quant_fp16_to_fp32(vd[b]);
                for (int i = b * qb; i < (b + 1) * qb; i++)
                    acc[i] = fmaf(wt, d * (float)vq[i], acc[i]);
            }
        }
        for (int i = 0; i < hd; i++)
            out[(size_t)h * hd + i] = acc[i] * inv[h];
    }
}

void attention_q8_values(qgemm_isa_t isa, const float *w, size_t ld, int nh, const float *inv, const kv_store_t *kv,
                         int l, const int32_t *bt, int t0, int t1, int kvo, int hd, float *out)
{
    assert(kv->type == KV_TYPE_Q8_0 && kv->qblock > 0 && hd % kv->qblock == 0 && kvo % kv->qblock == 0);
    assert(nh >= 1 && nh <= 4 && hd <= ATTQ8_MAX_HEAD_DIM && t0 >= 0 && t1 > t0);
#ifdef ATTQ8_X86
    if (isa == QGEMM_ISA_AVX512VNNI && hd % 16 == 0 && cpu_has_avx512_vnni()) {
        values_v512(w, ld, nh, inv, kv, l, bt, t0, t1, kvo, hd, out);
        return;
    }
    if (isa != QGEMM_ISA_SCALAR && isa != QGEMM_ISA_AUTO && cpu_has_avx2_fma_f16c()) {
        values_avx2(w, ld, nh, inv, kv, l, bt, t0, t1, kvo, hd, out);
        return;
    }
#endif
    values_scalar(w, ld, nh, inv, kv, l, bt, t0, t1, kvo, hd, out);
}

/* ---- ISA choice --------------------------------------------------------- */

static _Atomic int g_isa; /* 0: qgemm_isa_default() */

qgemm_isa_t attention_q8_isa(void)
{
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    return v ? (qgemm_isa_t)v : qgemm_isa_default();
}

int attention_q8_set_isa(qgemm_isa_t isa)
{
    if (isa != QGEMM_ISA_AUTO && !qgemm_isa_available(isa))
        return -1;
    atomic_store_explicit(&g_isa, (int)isa, memory_order_relaxed);
    return 0;
}
