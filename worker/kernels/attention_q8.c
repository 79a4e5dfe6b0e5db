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

/* ---- integer dots: is[(j*nh + h)*nb + b] for the n slots of one block ---- */

/* K quants of slot j at row0 + j*rb + kvo (rb = bytes per K vector). */
static void isums_scalar(const int8_t *qq, int nh, int hd, int qb, const char *row0, size_t rb, int kvo, int n,
                         int32_t *is)
{
    const int nb = hd / qb;
    for (int j = 0; j < n; j++) {
        const int8_t *k = (const int8_t *)(row0 + (size_t)j * rb) + kvo;
        for (int h = 0; h < nh; h++)
            for (int b = 0; b < nb; b++) {
                const int8_t *a = qq + (size_t)h * hd + (size_t)b * qb, *c = k + (size_t)b * qb;
                int32_t s = 0;
                for (int i = 0; i < qb; i++)
                    s += (int32_t)a[i] * (int32_t)c[i];
                is[(j * nh + h) * nb + b] = s;
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

/* Four int32 sums of 8 lanes each: [Σa, Σb, Σc, Σd]. */
#define HSUM4_BODY                                                                                      \
    __m256i x = _mm256_hadd_epi32(a, b), y = _mm256_hadd_epi32(c, d);                                   \
    __m256i z = _mm256_hadd_epi32(x, y);                                                                \
    return _mm_add_epi32(_mm256_castsi256_si128(z), _mm256_extracti128_si256(z, 1));

static inline __attribute__((always_inline, target(T_AVX2))) __m128i hsum4_avx2(__m256i a, __m256i b, __m256i c,
                                                                                 __m256i d)
{
    HSUM4_BODY
}

/* The dot of 32 int8 pairs as 8 int32 partial sums: |q| as the unsigned
 * operand, k with q's sign as the signed one (|q|, |k| <= 127: no int16
 * saturation in maddubs, exact in every path). DOT(aq, sk) per ISA. */
#define DOT_AVX2(aq, sk) _mm256_madd_epi16(_mm256_maddubs_epi16(aq, sk), _mm256_set1_epi16(1))
#define DOT_VNNI(aq, sk) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), aq, sk)
#define DOT_V512(aq, sk) _mm256_dpbusd_epi32(_mm256_setzero_si256(), aq, sk)

/* isums_scalar with qb == 32 and nh <= 4, nb <= ATTQ8_MAX_HEAD_DIM / 32. */
#define ISUMS_FN(NAME, TARGET, DOT)                                                                     \
    static __attribute__((target(TARGET))) void NAME(const int8_t *qq, int nh, int hd, const char *row0, \
                                                     size_t rb, int kvo, int n, int32_t *is)            \
    {                                                                                                   \
        const int nb = hd / 32, nv = nh * nb;                                                           \
        __m256i qv[4 * (ATTQ8_MAX_HEAD_DIM / 32)], aq[4 * (ATTQ8_MAX_HEAD_DIM / 32)];                    \
        for (int v = 0; v < nv; v++) { /* v = h*nb + b */                                                \
            qv[v] = _mm256_loadu_si256((const __m256i *)(qq + (size_t)v * 32));                        \
            aq[v] = _mm256_abs_epi8(qv[v]);                                                             \
        }                                                                                               \
        for (int j = 0; j < n; j++) {                                                                   \
            const int8_t *k = (const int8_t *)(row0 + (size_t)j * rb) + kvo;                            \
            if (j + 2 < n)                                                                              \
                _mm_prefetch(row0 + (size_t)(j + 2) * rb + kvo, _MM_HINT_T0);                           \
            int32_t *o = is + (size_t)j * nv;                                                           \
            __m256i acc[4];                                                                             \
            int na = 0, v0 = 0;                                                                         \
            for (int v = 0; v < nv; v++) {                                                              \
                const __m256i kb = _mm256_loadu_si256((const __m256i *)(k + (size_t)(v % nb) * 32));    \
                acc[na++] = DOT(aq[v], _mm256_sign_epi8(kb, qv[v]));                                    \
                if (na == 4 || v == nv - 1) {                                                           \
                    while (na < 4)                                                                      \
                        acc[na++] = _mm256_setzero_si256();                                             \
                    int32_t tmp[4];                                                                     \
                    _mm_storeu_si128((__m128i *)tmp, hsum4_avx2(acc[0], acc[1], acc[2], acc[3]));       \
                    for (int u = v0; u <= v; u++)                                                       \
                        o[u] = tmp[u - v0];                                                             \
                    na = 0;                                                                             \
                    v0 = v + 1;                                                                         \
                }                                                                                       \
            }                                                                                           \
        }                                                                                               \
    }

ISUMS_FN(isums_avx2, T_AVX2, DOT_AVX2)
ISUMS_FN(isums_vnni, T_VNNI, DOT_VNNI)
ISUMS_FN(isums_v512, T_V512, DOT_V512)

/* attention_q8_values' AVX2 loop (every vector ISA): 16 outputs of each
 * head per pass, one V conversion shared by the heads. */
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
                const float d0 = quant_fp16_to_fp32(vd[b0]);
                const __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)vq)));
                if (two) {
                    const float d1 = quant_fp16_to_fp32(vd[b1]);
                    const __m256 v1 =
                        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(vq + 8))));
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < nh) {
                            const float wt = w[(size_t)h * ld + o + (size_t)j];
                            acc[h][0] = _mm256_fmadd_ps(_mm256_set1_ps(wt * d0), v0, acc[h][0]);
                            acc[h][1] = _mm256_fmadd_ps(_mm256_set1_ps(wt * d1), v1, acc[h][1]);
                        }
                } else {
#pragma GCC unroll 4
                    for (int h = 0; h < 4; h++)
                        if (h < nh)
                            acc[h][0] = _mm256_fmadd_ps(_mm256_set1_ps(w[(size_t)h * ld + o + (size_t)j] * d0), v0,
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
#endif

/* ---- scores ------------------------------------------------------------- */

void attention_q8_scores(qgemm_isa_t isa, const int8_t *qq, const float *qd, int nh, const kv_store_t *kv, int l,
                         const int32_t *bt, int t0, int t1, int kvo, int hd, float scale, float *sc, size_t ld)
{
    const int bs = kv->block_size, qb = kv->qblock, nb = hd / qb;
    assert(kv->type == KV_TYPE_Q8_0 && qb > 0 && hd % qb == 0 && kvo % qb == 0 && nh >= 1 && nh <= 4);
    assert(hd <= ATTQ8_MAX_HEAD_DIM && t0 >= 0 && t1 > t0);
    const size_t rb = kv_store_row_bytes(kv);
    int32_t is[16 * 4 * (ATTQ8_MAX_HEAD_DIM / 8)]; /* up to 16 slots of one block per pass */
    for (int t = t0; t < t1;) {
        const int slot0 = t % bs, left = (t1 - t < bs - slot0) ? t1 - t : bs - slot0;
        const int n = left < 16 ? left : 16;
        const char *row0 = kv_store_k_at(kv, l, bt[t / bs], slot0);
#ifdef ATTQ8_X86
        if (qb == 32 && isa == QGEMM_ISA_AVX512VNNI)
            isums_v512(qq, nh, hd, row0, rb, kvo, n, is);
        else if (qb == 32 && isa == QGEMM_ISA_AVXVNNI)
            isums_vnni(qq, nh, hd, row0, rb, kvo, n, is);
        else if (qb == 32 && isa == QGEMM_ISA_AVX2)
            isums_avx2(qq, nh, hd, row0, rb, kvo, n, is);
        else
#endif
            isums_scalar(qq, nh, hd, qb, row0, rb, kvo, n, is);
        /* the float part: the same code whatever computed the sums */
        const size_t o = (size_t)(t - t0);
        for (int j = 0; j < n; j++) {
            const uint16_t *kd = (const uint16_t *)(row0 + (size_t)j * rb + kv->kv_dim) + kvo / qb;
            float kdf[ATTQ8_MAX_HEAD_DIM / 8];
            for (int b = 0; b < nb; b++)
                kdf[b] = quant_fp16_to_fp32(kd[b]);
            for (int h = 0; h < nh; h++) {
                const int32_t *ih = is + (size_t)(j * nh + h) * nb;
                float s = 0;
                for (int b = 0; b < nb; b++) {
                    float p = qd[h * nb + b] * kdf[b];
                    p = p * (float)ih[b];
                    s = b ? s + p : p;
                }
                sc[(size_t)h * ld + o + (size_t)j] = s * scale;
            }
        }
        t += n;
    }
}

/* ---- values ------------------------------------------------------------- */

static void values_scalar(const float *w, size_t ld, int nh, const float *inv, const kv_store_t *kv, int l,
                          const int32_t *bt, int t0, int t1, int kvo, int hd, float *out)
{
    const int bs = kv->block_size, qb = kv->qblock;
    const size_t rb = kv_store_row_bytes(kv);
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
                const float c = wt * quant_fp16_to_fp32(vd[b]);
                for (int i = b * qb; i < (b + 1) * qb; i++)
                    acc[i] = fmaf(c, (float)vq[i], acc[i]);
            }
        }
        for (int i = 0; i < hd; i++)
            out[(size_t)h * hd + i] = acc[i] * inv[h];
    }
    (void)rb;
}

void attention_q8_values(qgemm_isa_t isa, const float *w, size_t ld, int nh, const float *inv, const kv_store_t *kv,
                         int l, const int32_t *bt, int t0, int t1, int kvo, int hd, float *out)
{
    assert(kv->type == KV_TYPE_Q8_0 && kv->qblock > 0 && hd % kv->qblock == 0 && kvo % kv->qblock == 0);
    assert(nh >= 1 && nh <= 4 && hd <= ATTQ8_MAX_HEAD_DIM && t0 >= 0 && t1 > t0);
#ifdef ATTQ8_X86
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
