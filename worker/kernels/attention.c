/* attention.c — one (row, head) of softmax attention over the paged KV
 * cache (see attention.h): an AVX2 kernel for F32/F16 K/V and a portable
 * fallback computing the same thing. */
#include "worker/kernels/attention.h"

#include <assert.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "common/cpu.h"
#include "worker/kernels/attention_q8.h"
#include "worker/kernels/quant.h"
#include "worker/kernels/vmath.h"

/* The K (k_vec) or V (v_vec) vector of position t of a sequence with block
 * table bt, from element kvo on (the kv head's), elements of esz bytes. */
static inline const char *k_vec(const kv_store_t *kv, int l, const int32_t *bt, int t, int kvo, size_t esz)
{
    return (const char *)kv_store_k_at(kv, l, bt[t / kv->block_size], t % kv->block_size) + (size_t)kvo * esz;
}

static inline const char *v_vec(const kv_store_t *kv, int l, const int32_t *bt, int t, int kvo, size_t esz)
{
    return (const char *)kv_store_v_at(kv, l, bt[t / kv->block_size], t % kv->block_size) + (size_t)kvo * esz;
}

#ifdef VMATH_X86
/* 8 K/V elements at element index i of base, widened to float. */
VMATH_INL __m256 ld8(const void *base, size_t i, const bool f16)
{
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)base + i)))
               : _mm256_loadu_ps((const float *)base + i);
}

/* sc (n) = softcap * tanh(sc / softcap), in place. */
VMATH_INL void softcap_avx2(float *sc, int n, float softcap)
{
    const __m256 c = _mm256_set1_ps(softcap), ic = _mm256_set1_ps(1.0f / softcap);
    int t = 0;
    for (; t + 8 <= n; t += 8)
        _mm256_storeu_ps(sc + t, _mm256_mul_ps(c, vmath_tanh8(_mm256_mul_ps(_mm256_loadu_ps(sc + t), ic))));
    for (; t < n; t++)
        sc[t] = softcap * tanhf(sc[t] / softcap);
}

/* Soft-capping (softcap > 0), then sc (n_pos) = e^(sc - max sc) in place;
 * returns 1 / Σ sc. The one softmax of both AVX2 kernels, so a head's bits
 * do not depend on which of them ran it. */
VMATH_INL float softmax_avx2(float *sc, int n_pos, float softcap)
{
    if (softcap > 0)
        softcap_avx2(sc, n_pos, softcap);
    /* max over the scores */
    __m256 mx8 = _mm256_set1_ps(-INFINITY);
    float mx;
    int t = 0;
    for (; t + 8 <= n_pos; t += 8)
        mx8 = _mm256_max_ps(mx8, _mm256_loadu_ps(sc + t));
    {
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx8), _mm256_extractf128_ps(mx8, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        mx = _mm_cvtss_f32(m4);
    }
    for (; t < n_pos; t++)
        mx = sc[t] > mx ? sc[t] : mx;
    /* sc = e^(sc - max), normalized at the end */
    __m256 mxv = _mm256_set1_ps(mx), sum8 = _mm256_setzero_ps();
    for (t = 0; t + 8 <= n_pos; t += 8) {
        __m256 e = vmath_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + t), mxv));
        _mm256_storeu_ps(sc + t, e);
        sum8 = _mm256_add_ps(sum8, e);
    }
    float sum = vmath_hsum8(sum8);
    for (; t < n_pos; t++) {
        sc[t] = expf(sc[t] - mx);
        sum += sc[t];
    }
    return 1.0f / sum;
}

/* out (hd) = Σ_t w[t - t0] v_t * inv over one head's slice (kvo) of the
 * V vectors, 64 output floats (8 registers) per pass, each element summed
 * over t in order. */
VMATH_INL void head_values(const float *sc, float inv_s, const kv_store_t *kv, int l, const int32_t *bt, int t0,
                           int t1, int kvo, int hd, float *out, const bool f16)
{
    const int bs = kv->block_size;
    const size_t ld = (size_t)kv->kv_dim;
    const size_t esz = f16 ? 2 : 4;
    const __m256 inv = _mm256_set1_ps(inv_s);
    /* out = Σ_t sc[t] v_t / sum, 64 output floats (8 registers) per pass */
    for (int i0 = 0; i0 < hd; i0 += 64) {
        const int nv = (hd - i0 < 64 ? hd - i0 : 64) / 8;
        __m256 acc[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            acc[j] = _mm256_setzero_ps();
        for (int tb = t0; tb < t1;) {
            const int slot0 = tb % bs, n = (t1 - tb < bs - slot0) ? t1 - tb : bs - slot0;
            const void *vb = kv_store_v_at(kv, l, bt[tb / bs], 0);  /* element (slot, i) at kvo + slot*ld + i */
            const float *w_t = sc + (tb - t0);
            for (int tt = 0; tt < n; tt++) {
                const size_t vt = (size_t)kvo + (size_t)i0 + (size_t)(slot0 + tt) * ld;
                if (tt + 8 < n)
                    for (size_t by = 0; by < (size_t)nv * 8 * esz; by += 64)
                        _mm_prefetch((const char *)vb + (vt + 8 * ld) * esz + by, _MM_HINT_T0);
                __m256 w = _mm256_set1_ps(w_t[tt]);
                /* constant indices only (j < 8 unrolled, nv tested per j):
                 * acc then stays in registers; a loop to nv made GCC keep
                 * the array on the stack, one store-load round trip per FMA */
#pragma GCC unroll 8
                for (int j = 0; j < 8; j++)
                    if (j < nv)
                        acc[j] = _mm256_fmadd_ps(w, ld8(vb, vt + 8 * (size_t)j, f16), acc[j]);
            }
            tb += n;
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            if (j < nv)
                _mm256_storeu_ps(out + i0 + 8 * j, _mm256_mul_ps(acc[j], inv));
    }
}

/* (q · k) * scale for the K vector at element offset k0 of kb: one
 * accumulator fed over i in order, then vmath_hsum8 (score4 per position). */
VMATH_INL float score1(const float *q, const void *kb, size_t k0, int hd, float scale, const bool f16)
{
    __m256 a0 = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), ld8(kb, k0 + (size_t)i, f16), a0);
    return vmath_hsum8(a0) * scale;
}

/* o[0..3] = (q · k_p) * scale for the four K vectors at element offsets
 * k0, k0 + kld, k0 + 2 kld, k0 + 3 kld of kb: one accumulator per
 * position fed over i in order, then vmath_hsum8 (the reduction every
 * score of both kernels uses, so their bits agree). */
VMATH_INL void score4(const float *q, const void *kb, size_t k0, size_t kld, int hd, float scale, float *o,
                      const bool f16)
{
    const size_t k1 = k0 + kld, k2 = k1 + kld, k3 = k2 + kld;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int i = 0; i < hd; i += 8) {
        __m256 qv = _mm256_loadu_ps(q + i);
        a0 = _mm256_fmadd_ps(qv, ld8(kb, k0 + (size_t)i, f16), a0);
        a1 = _mm256_fmadd_ps(qv, ld8(kb, k1 + (size_t)i, f16), a1);
        a2 = _mm256_fmadd_ps(qv, ld8(kb, k2 + (size_t)i, f16), a2);
        a3 = _mm256_fmadd_ps(qv, ld8(kb, k3 + (size_t)i, f16), a3);
    }
    o[0] = vmath_hsum8(a0) * scale;
    o[1] = vmath_hsum8(a1) * scale;
    o[2] = vmath_hsum8(a2) * scale;
    o[3] = vmath_hsum8(a3) * scale;
}

/* attention_head with head_dim hd a multiple of 8. Positions t0..t1-1 are
 * walked block by block (a block may be entered mid-way when t0 is not
 * block-aligned); sc[t - t0] holds position t's score. f16 is a
 * compile-time constant in each caller: the loads differ, the arithmetic
 * and its order do not. */
VMATH_INL void attend_avx2_impl(const float *q, const kv_store_t *kv, int l, const int32_t *bt, int t0, int t1,
                                int kvo, int hd, float scale, float softcap, float *sc, float *out, const bool f16)
{
    const int bs = kv->block_size, n_pos = t1 - t0;
    const size_t ld = (size_t)kv->kv_dim;
    const size_t esz = f16 ? 2 : 4;
    /* sc[t] = q · k_t * scale; four positions at a time share each q load */
    for (int t = t0; t < t1;) {
        const int slot0 = t % bs, n = (t1 - t < bs - slot0) ? t1 - t : bs - slot0;
        const void *kb = kv_store_k_at(kv, l, bt[t / bs], 0);  /* element (slot, i) at kvo + slot*ld + i */
        float *o = sc + (t - t0);
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            const size_t k0 = (size_t)kvo + (size_t)(slot0 + j) * ld;
            if (j + 8 + 4 <= n)
                for (int u = 0; u < 4; u++)
                    for (size_t by = 0; by < (size_t)hd * esz; by += 64)
                        _mm_prefetch((const char *)kb + (k0 + (size_t)(8 + u) * ld) * esz + by, _MM_HINT_T0);
            /* the same reduction as the single-position loop below */
            score4(q, kb, k0, ld, hd, scale, o + j, f16);
        }
        for (; j < n; j++) {
            o[j] = score1(q, kb, (size_t)kvo + (size_t)(slot0 + j) * ld, hd, scale, f16);
        }
        t += n;
    }
    head_values(sc, softmax_avx2(sc, n_pos, softcap), kv, l, bt, t0, t1, kvo, hd, out, f16);
}

/* attend_avx2_impl for the store's element type. */
VMATH_FN static void attend_avx2(const float *q, const kv_store_t *kv, int l, const int32_t *bt, int t0, int t1,
                                 int kvo, int hd, float scale, float softcap, float *sc, float *out)
{
    if (kv->type == KV_TYPE_F16)
        attend_avx2_impl(q, kv, l, bt, t0, t1, kvo, hd, scale, softcap, sc, out, true);
    else
        attend_avx2_impl(q, kv, l, bt, t0, t1, kvo, hd, scale, softcap, sc, out, false);
}

/* Scores of heads q[0..nh) (nh <= 4, head h at q + h*hd) for positions
 * t0..t1-1: sc[h*ld + t - t0] = (q_h · k_t) * scale. Two positions per
 * pass share each K load among the heads; every (head, position) keeps
 * its own accumulator, fed over i in the order attend_avx2_impl uses, and
 * the same reduction, so its bits are attend_avx2_impl's. */
VMATH_INL void group_scores(const float *q, const int nh, const kv_store_t *kv, int l, const int32_t *bt, int t0,
                            int t1, int kvo, int hd, float scale, float *sc, size_t ld, const bool f16)
{
    const int bs = kv->block_size;
    const size_t kld = (size_t)kv->kv_dim, esz = f16 ? 2 : 4;
    for (int t = t0; t < t1;) {
        const int slot0 = t % bs, n = (t1 - t < bs - slot0) ? t1 - t : bs - slot0;
        const void *kb = kv_store_k_at(kv, l, bt[t / bs], 0);
        const size_t o = (size_t)(t - t0);
        int j = 0;
        for (; j + 2 <= n; j += 2) {
            const size_t k0 = (size_t)kvo + (size_t)(slot0 + j) * kld, k1 = k0 + kld;
            if (j + 8 + 2 <= n)
                for (int u = 0; u < 2; u++)
                    for (size_t by = 0; by < (size_t)hd * esz; by += 64)
                        _mm_prefetch((const char *)kb + (k0 + (size_t)(8 + u) * kld) * esz + by, _MM_HINT_T0);
            __m256 a[4][2];
            #pragma GCC unroll 4
            for (int h = 0; h < nh; h++)
                a[h][0] = a[h][1] = _mm256_setzero_ps();
            for (int i = 0; i < hd; i += 8) {
                const __m256 kv0 = ld8(kb, k0 + (size_t)i, f16), kv1 = ld8(kb, k1 + (size_t)i, f16);
                #pragma GCC unroll 4
                for (int h = 0; h < nh; h++) {
                    const __m256 qv = _mm256_loadu_ps(q + (size_t)h * hd + i);
                    a[h][0] = _mm256_fmadd_ps(qv, kv0, a[h][0]);
                    a[h][1] = _mm256_fmadd_ps(qv, kv1, a[h][1]);
                }
            }
            #pragma GCC unroll 4
            for (int h = 0; h < nh; h++) {
                sc[h * ld + o + j] = vmath_hsum8(a[h][0]) * scale;
                sc[h * ld + o + j + 1] = vmath_hsum8(a[h][1]) * scale;
            }
        }
        for (; j < n; j++) {
            const size_t k0 = (size_t)kvo + (size_t)(slot0 + j) * kld;
            #pragma GCC unroll 4
            for (int h = 0; h < nh; h++)
                sc[h * ld + o + j] = score1(q + (size_t)h * hd, kb, k0, hd, scale, f16);
        }
        t += n;
    }
}

/* out_h (hd) = Σ_t w_h[t] v_t * inv[h] for heads 0..nh-1 (nh <= 4, weights
 * w + h*ld, outputs out + h*hd), 16 output floats of each head per pass so
 * that one V load serves every head. Each output element sums over t in
 * order, as attend_avx2_impl does: the same bits. */
VMATH_INL void group_values(const float *w, size_t ld, const int nh, const float *inv, const kv_store_t *kv, int l,
                            const int32_t *bt, int t0, int t1, int kvo, int hd, float *out, const bool f16)
{
    const int bs = kv->block_size;
    const size_t vld = (size_t)kv->kv_dim;
    for (int i0 = 0; i0 < hd; i0 += 16) {
        const int nv = hd - i0 >= 16 ? 2 : 1;
        __m256 acc[4][2];
        #pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
            acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int tb = t0; tb < t1;) {
            const int slot0 = tb % bs, n = (t1 - tb < bs - slot0) ? t1 - tb : bs - slot0;
            const void *vb = kv_store_v_at(kv, l, bt[tb / bs], 0);
            const size_t o = (size_t)(tb - t0);
            for (int tt = 0; tt < n; tt++) {
                const size_t vt = (size_t)kvo + (size_t)i0 + (size_t)(slot0 + tt) * vld;
                if (nv == 2) {
                    const __m256 v0 = ld8(vb, vt, f16), v1 = ld8(vb, vt + 8, f16);
                    #pragma GCC unroll 4
                    for (int h = 0; h < nh; h++) {
                        const __m256 wv = _mm256_set1_ps(w[h * ld + o + tt]);
                        acc[h][0] = _mm256_fmadd_ps(wv, v0, acc[h][0]);
                        acc[h][1] = _mm256_fmadd_ps(wv, v1, acc[h][1]);
                    }
                } else {
                    const __m256 v0 = ld8(vb, vt, f16);
                    #pragma GCC unroll 4
                    for (int h = 0; h < nh; h++)
                        acc[h][0] = _mm256_fmadd_ps(_mm256_set1_ps(w[h * ld + o + tt]), v0, acc[h][0]);
                }
            }
            tb += n;
        }
        #pragma GCC unroll 4
        for (int h = 0; h < nh; h++)
            for (int j = 0; j < nv; j++)
                _mm256_storeu_ps(out + (size_t)h * hd + i0 + 8 * j,
                                 _mm256_mul_ps(acc[h][j], _mm256_set1_ps(inv[h])));
    }
}

/* attention_group for 2 to 4 heads at once, hd a multiple of 8. */
VMATH_INL void attend_group_avx2_impl(const float *q, const int nh, const kv_store_t *kv, int l, const int32_t *bt,
                                      int t0, int t1, int kvo, int hd, float scale, float softcap, float *sc,
                                      size_t ld, float *out, const bool f16)
{
    float inv[4];
    group_scores(q, nh, kv, l, bt, t0, t1, kvo, hd, scale, sc, ld, f16);
    for (int h = 0; h < nh; h++)
        inv[h] = softmax_avx2(sc + (size_t)h * ld, t1 - t0, softcap);
    group_values(sc, ld, nh, inv, kv, l, bt, t0, t1, kvo, hd, out, f16);
}

/* attend_group_avx2_impl with nh and the element type as constants. */
VMATH_FN static void attend_group_avx2(const float *q, int nh, const kv_store_t *kv, int l, const int32_t *bt,
                                       int t0, int t1, int kvo, int hd, float scale, float softcap, float *sc,
                                       size_t ld, float *out)
{
    const bool f16 = kv->type == KV_TYPE_F16;
#define ATT_GROUP_CASE(N)                                                                                      \
    case N:                                                                                                    \
        if (f16)                                                                                               \
            attend_group_avx2_impl(q, N, kv, l, bt, t0, t1, kvo, hd, scale, softcap, sc, ld, out, true);       \
        else                                                                                                   \
            attend_group_avx2_impl(q, N, kv, l, bt, t0, t1, kvo, hd, scale, softcap, sc, ld, out, false);      \
        break;
    switch (nh) {
        ATT_GROUP_CASE(2)
        ATT_GROUP_CASE(3)
        ATT_GROUP_CASE(4)
    default:
        assert(0 && "nh is 2..4");
    }
#undef ATT_GROUP_CASE
}

/* Scores of every head of a row, sc[h*ld + t - t0] = (q_h · k_t[kv head of
 * h]) * scale, walking positions (four at a time) over the whole K vector;
 * each (head, position) is one accumulator fed over i in attend_avx2_impl's
 * order and reduced the same way, so the bits are attend_avx2_impl's. The
 * V vectors of the positions are prefetched for the value passes. */
VMATH_INL void row_scores(const float *q, int n_head, int group, const kv_store_t *kv, int l, const int32_t *bt,
                          int t0, int t1, int hd, float scale, float *sc, size_t ld, const bool f16)
{
    const int bs = kv->block_size;
    const size_t kld = (size_t)kv->kv_dim, esz = f16 ? 2 : 4, vbytes = kld * esz;
    for (int t = t0; t < t1;) {
        const int slot0 = t % bs, n = (t1 - t < bs - slot0) ? t1 - t : bs - slot0;
        const void *kb = kv_store_k_at(kv, l, bt[t / bs], 0);
        const char *vb = kv_store_v_at(kv, l, bt[t / bs], slot0);
        const size_t o = (size_t)(t - t0);
        const char *kc = (const char *)kb + (size_t)slot0 * vbytes;
        /* the first positions' K vectors */
        for (size_t by = 0; by < (size_t)(n < 8 ? n : 8) * vbytes; by += 64)
            _mm_prefetch(kc + by, _MM_HINT_T0);
        int j = 0;
        for (; j + 4 <= n; j += 4) {
            const size_t p0 = (size_t)(slot0 + j) * kld;
            /* K 8 positions ahead, and these positions' V vectors for the
             * value passes (they read them head slice by head slice) */
            {
                const int ja = j + 8 < n ? j + 8 : n, je = j + 12 < n ? j + 12 : n;
                for (size_t by = (size_t)ja * vbytes; by < (size_t)je * vbytes; by += 64)
                    _mm_prefetch(kc + by, _MM_HINT_T0);
                for (size_t by = (size_t)j * vbytes; by < (size_t)(j + 4) * vbytes; by += 64)
                    _mm_prefetch(vb + by, _MM_HINT_T0);
            }
            for (int h = 0; h < n_head; h++)
                score4(q + (size_t)h * (size_t)hd, kb, p0 + (size_t)(h / group) * (size_t)hd, kld, hd, scale,
                       sc + (size_t)h * ld + o + (size_t)j, f16);
        }
        for (; j < n; j++) {
            const size_t p0 = (size_t)(slot0 + j) * kld;
            for (size_t by = (size_t)j * vbytes; by < (size_t)(j + 1) * vbytes; by += 64)
                _mm_prefetch(vb + by, _MM_HINT_T0);
            for (int h = 0; h < n_head; h++)
                sc[(size_t)h * ld + o + (size_t)j] =
                    score1(q + (size_t)h * (size_t)hd, kb, p0 + (size_t)(h / group) * (size_t)hd, hd, scale, f16);
        }
        t += n;
    }
}

/* attention_row on AVX2: the scores of every head first (row_scores), then
 * per kv head the softmax and the values of its query heads, four at a
 * time as attend_group_avx2_impl does (a lone head: attend_avx2_impl's
 * value loop, head_values). */
VMATH_INL void attend_row_avx2_impl(const float *q, int n_head, int n_kv, const kv_store_t *kv, int l,
                                    const int32_t *bt, int t0, int t1, int hd, float scale, float softcap, float *sc,
                                    size_t ld, float *out, const bool f16)
{
    const int group = n_head / n_kv, n_pos = t1 - t0;
    row_scores(q, n_head, group, kv, l, bt, t0, t1, hd, scale, sc, ld, f16);
    for (int g = 0; g < n_kv; g++)
        for (int h0 = g * group; h0 < (g + 1) * group; h0 += 4) {
            const int nh = (g + 1) * group - h0 < 4 ? (g + 1) * group - h0 : 4;
            float inv[4];
            for (int h = 0; h < nh; h++)
                inv[h] = softmax_avx2(sc + (size_t)(h0 + h) * ld, n_pos, softcap);
            if (nh == 1)
                head_values(sc + (size_t)h0 * ld, inv[0], kv, l, bt, t0, t1, g * hd, hd, out + (size_t)h0 * (size_t)hd,
                            f16);
            else
                group_values(sc + (size_t)h0 * ld, ld, nh, inv, kv, l, bt, t0, t1, g * hd, hd,
                             out + (size_t)h0 * (size_t)hd, f16);
        }
}

VMATH_FN static void attend_row_avx2(const float *q, int n_head, int n_kv, const kv_store_t *kv, int l,
                                     const int32_t *bt, int t0, int t1, int hd, float scale, float softcap,
                                     float *sc, size_t ld, float *out)
{
    if (kv->type == KV_TYPE_F16)
        attend_row_avx2_impl(q, n_head, n_kv, kv, l, bt, t0, t1, hd, scale, softcap, sc, ld, out, true);
    else
        attend_row_avx2_impl(q, n_head, n_kv, kv, l, bt, t0, t1, hd, scale, softcap, sc, ld, out, false);
}

/* ---- Tiles of query rows (prefill), AVX-512 ---------------------------- */

#define ATT512_INL                                                                                               \
    static inline __attribute__((always_inline, target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))
#define ATT512_FN __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")))

/* 16 K/V elements at element index i of base, widened to float. */
ATT512_INL __m512 ld16(const void *base, size_t i, const bool f16)
{
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + i)))
               : _mm512_loadu_ps((const float *)base + i);
}

/* vmath_exp8 on 16 lanes: the same operations lane by lane (the same bits). */
ATT512_INL __m512 exp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.33654f), hi = _mm512_set1_ps(88.72283f);
    const __mmask16 under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145752f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i ni = _mm512_cvtps_epi32(n);
    const __m512i n1 = _mm512_srai_epi32(ni, 1), n2 = _mm512_sub_epi32(ni, n1);
    const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n1, _mm512_set1_epi32(127)), 23));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n2, _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_mul_ps(_mm512_mul_ps(p, s1), s2));
}

/* softmax_avx2 with 16 lanes where it can: the same bits (soft-capping and
 * e^x lane by lane as the 8-lane code, groups of eight positions from the
 * start; the sum of the exponentials per lane j = t % 8, the two halves of
 * each 16 added in order, then vmath_hsum8 and the scalar tail). */
ATT512_INL float softmax512(float *sc, int n_pos, float softcap)
{
    if (softcap > 0)
        softcap_avx2(sc, n_pos, softcap);
    __m512 mx16 = _mm512_set1_ps(-INFINITY);
    int t = 0;
    for (; t + 16 <= n_pos; t += 16)
        mx16 = _mm512_max_ps(mx16, _mm512_loadu_ps(sc + t));
    float mx = _mm512_reduce_max_ps(mx16);
    for (; t < n_pos; t++)
        mx = sc[t] > mx ? sc[t] : mx;
    const __m512 mxv = _mm512_set1_ps(mx);
    __m256 sum8 = _mm256_setzero_ps();
    for (t = 0; t + 16 <= n_pos; t += 16) {
        const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sc + t), mxv));
        _mm512_storeu_ps(sc + t, e);
        sum8 = _mm256_add_ps(_mm256_add_ps(sum8, _mm512_castps512_ps256(e)), _mm512_extractf32x8_ps(e, 1));
    }
    if (t + 8 <= n_pos) {
        const __m256 e = vmath_exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + t), _mm512_castps512_ps256(mxv)));
        _mm256_storeu_ps(sc + t, e);
        sum8 = _mm256_add_ps(sum8, e);
        t += 8;
    }
    float sum = vmath_hsum8(sum8);
    for (; t < n_pos; t++) {
        sc[t] = expf(sc[t] - mx);
        sum += sc[t];
    }
    return 1.0f / sum;
}

/* r[0..15] (row n = 16 floats) transposed in place: afterwards lane n of
 * r[c] is what lane c of r[n] was. */
ATT512_INL void transpose16(__m512 r[16])
{
    __m512 t[16];
    #pragma GCC unroll 8
    for (int k = 0; k < 16; k += 2) {
        t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
    #pragma GCC unroll 4
    for (int k = 0; k < 16; k += 4) {
        r[k] = _mm512_shuffle_ps(t[k], t[k + 2], 0x44);
        r[k + 1] = _mm512_shuffle_ps(t[k], t[k + 2], 0xEE);
        r[k + 2] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0x44);
        r[k + 3] = _mm512_shuffle_ps(t[k + 1], t[k + 3], 0xEE);
    }
    /* r[4a + b], 128-bit lane L: rows 4a..4a+3 of column 4L + b */
    #pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        t[b] = _mm512_shuffle_f32x4(r[b], r[4 + b], 0x88);      /* lanes L0 L2 of r[b], L0 L2 of r[4+b] */
        t[4 + b] = _mm512_shuffle_f32x4(r[b], r[4 + b], 0xDD);  /* lanes L1 L3 */
        t[8 + b] = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0x88);
        t[12 + b] = _mm512_shuffle_f32x4(r[8 + b], r[12 + b], 0xDD);
    }
    #pragma GCC unroll 4
    for (int b = 0; b < 4; b++) {
        r[b] = _mm512_shuffle_f32x4(t[b], t[8 + b], 0x88);            /* column b */
        r[8 + b] = _mm512_shuffle_f32x4(t[b], t[8 + b], 0xDD);        /* column 8 + b */
        r[4 + b] = _mm512_shuffle_f32x4(t[4 + b], t[12 + b], 0x88);    /* column 4 + b */
        r[12 + b] = _mm512_shuffle_f32x4(t[4 + b], t[12 + b], 0xDD);   /* column 12 + b */
    }
}

/* kt (hd, 16) = the head slices (kvo) of the K vectors of positions
 * tb..tb+15, transposed (kt[i*16 + u] = element i of position tb + u);
 * positions at or past te are zeros (never used, but finite). The slices
 * of the 32 positions after these are prefetched. */
ATT512_INL void tile_k_transpose(const kv_store_t *kv, int l, const int32_t *bt, int tb, int te, int kvo, int hd,
                                 float *kt, const bool f16)
{
    const size_t esz = f16 ? 2 : 4, bytes = (size_t)hd * esz;
    const char *kp[16];
    const int n = te - tb < 16 ? te - tb : 16;
    #pragma GCC unroll 16
    for (int u = 0; u < 16; u++)
        kp[u] = u < n ? k_vec(kv, l, bt, tb + u, kvo, esz) : NULL;
    for (int t = tb + 32; t < tb + 48 && t < te; t++) {
        const char *p = k_vec(kv, l, bt, t, kvo, esz);
        for (size_t by = 0; by < bytes; by += 64)
            _mm_prefetch(p + by, _MM_HINT_T0);
    }
    for (int i0 = 0; i0 < hd; i0 += 16) {
        __m512 r[16];
        if (n == 16) {
            #pragma GCC unroll 16
            for (int u = 0; u < 16; u++)
                r[u] = ld16(kp[u], (size_t)i0, f16);
        } else {
            #pragma GCC unroll 16
            for (int u = 0; u < 16; u++)
                r[u] = u < n ? ld16(kp[u], (size_t)i0, f16) : _mm512_setzero_ps();
        }
        transpose16(r);
        #pragma GCC unroll 16
        for (int c = 0; c < 16; c++)
            _mm512_store_ps(kt + (size_t)(i0 + c) * 16, r[c]);
    }
}

/* Scores of MB query vectors qp[0..MB) against NP * 16 positions (kt, and
 * kt + hd*16 for the second 16): per (vector, position) the eight partial
 * sums a_j = Σ_c q[8c+j] k[8c+j] (one FMA each, c in order, from 0) and
 * vmath_hsum8's reduction ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)), times
 * scale: score1's operations with one position per lane, so the bits are
 * attend_avx2_impl's. The partial sums are computed two at a time in the
 * reduction's order (a0 a4, a2 a6, a1 a5, a3 a7), each pair folded at
 * once, so a cell (vector, 16 positions) holds at most four registers and
 * 3 × 2 cells fit: 5 loads per 12 FMAs. Lane u of 16-block p goes to
 * sp[m] + 16p + u where bit u of mask[p] is set. */
ATT512_INL void tile_scores_mb(const float *const *qp, const int MB, const int NP, const float *kt, int hd,
                               float scale, float *const *sp, const __mmask16 *mask)
{
    static const int pair[4][2] = {{0, 4}, {2, 6}, {1, 5}, {3, 7}};
    __m512 g0[3][2], hp[3][2], g1[3][2];
    const size_t kb = (size_t)hd * 16;
    #pragma GCC unroll 4
    for (int ph = 0; ph < 4; ph++) {
        const int ja = pair[ph][0], jb = pair[ph][1];
        __m512 a[3][2], b[3][2];
        #pragma GCC unroll 3
        for (int m = 0; m < MB; m++)
            #pragma GCC unroll 2
            for (int p = 0; p < NP; p++)
                a[m][p] = b[m][p] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i += 8) {
            __m512 ka[2], kbv[2];
            #pragma GCC unroll 2
            for (int p = 0; p < NP; p++) {
                ka[p] = _mm512_load_ps(kt + (size_t)p * kb + (size_t)(i + ja) * 16);
                kbv[p] = _mm512_load_ps(kt + (size_t)p * kb + (size_t)(i + jb) * 16);
                /* in registers: GCC would fold the load into every FMA
                 * that uses it, one load per FMA instead of per MB */
                __asm__("" : "+v"(ka[p]), "+v"(kbv[p]));
            }
            #pragma GCC unroll 3
            for (int m = 0; m < MB; m++) {
                const __m512 qa = _mm512_set1_ps(qp[m][i + ja]), qb = _mm512_set1_ps(qp[m][i + jb]);
                #pragma GCC unroll 2
                for (int p = 0; p < NP; p++) {
                    a[m][p] = _mm512_fmadd_ps(qa, ka[p], a[m][p]);
                    b[m][p] = _mm512_fmadd_ps(qb, kbv[p], b[m][p]);
                }
            }
        }
        #pragma GCC unroll 3
        for (int m = 0; m < MB; m++)
            #pragma GCC unroll 2
            for (int p = 0; p < NP; p++) {
                const __m512 h = _mm512_add_ps(a[m][p], b[m][p]); /* a_ja + a_jb */
                if (ph == 0 || ph == 2)
                    hp[m][p] = h;
                else if (ph == 1)
                    g0[m][p] = _mm512_add_ps(hp[m][p], h);
                else
                    g1[m][p] = _mm512_add_ps(hp[m][p], h);
            }
    }
    const __m512 sv = _mm512_set1_ps(scale);
    #pragma GCC unroll 3
    for (int m = 0; m < MB; m++)
        #pragma GCC unroll 2
        for (int p = 0; p < NP; p++)
            _mm512_mask_storeu_ps(sp[m] + 16 * p, mask[p], _mm512_mul_ps(_mm512_add_ps(g0[m][p], g1[m][p]), sv));
}

/* out_m[i0 .. i0 + 16 NV) = Σ_t w_m[t - t0] v_t * inv[m] for MB vectors
 * (weights wp[m], positions t0 <= t < te[m], outputs op[m]): one FMA per
 * term, t in order from 0, then the product with inv, as head_values /
 * group_values do (the same bits). The positions every vector has share
 * each V load and conversion; the rest (te[m] past the block's least) go
 * vector by vector. */
ATT512_INL void tile_values_mb(const float *const *wp, const int MB, const int NV, const float *inv, const int *te,
                               const kv_store_t *kv, int l, const int32_t *bt, int t0, int kvo, int i0,
                               float *const *op, const bool f16)
{
    const int bs = kv->block_size;
    const size_t ld = (size_t)kv->kv_dim;
    int tmin = te[0];
    for (int m = 1; m < MB; m++)
        tmin = te[m] < tmin ? te[m] : tmin;
    const float *w[6];
    __m512 acc[6][4];
    #pragma GCC unroll 6
    for (int m = 0; m < MB; m++) {
        w[m] = wp[m] - t0;
        #pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            acc[m][j] = _mm512_setzero_ps();
    }
    for (int tb = t0; tb < tmin;) {
        const int slot0 = tb % bs, n = (tmin - tb < bs - slot0) ? tmin - tb : bs - slot0;
        const char *vb = (const char *)kv_store_v_at(kv, l, bt[tb / bs], slot0);
        const size_t e0 = (size_t)kvo + (size_t)i0;
        for (int tt = 0; tt < n; tt++) {
            const size_t vt = e0 + (size_t)tt * ld;
            if (tt + 8 < n) /* the slice 8 positions ahead */
                for (size_t by = 0; by < (size_t)NV * 16 * (f16 ? 2 : 4); by += 64)
                    _mm_prefetch(vb + (vt + 8 * ld) * (f16 ? 2 : 4) + by, _MM_HINT_T0);
            __m512 v[4];
            #pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                v[j] = ld16(vb, vt + 16 * (size_t)j, f16);
            #pragma GCC unroll 6
            for (int m = 0; m < MB; m++) {
                const __m512 wv = _mm512_set1_ps(w[m][tb + tt]);
                #pragma GCC unroll 4
                for (int j = 0; j < NV; j++)
                    acc[m][j] = _mm512_fmadd_ps(wv, v[j], acc[m][j]);
            }
        }
        tb += n;
    }
    #pragma GCC unroll 6
    for (int m = 0; m < MB; m++) {
        for (int t = tmin; t < te[m]; t++) {
            const void *vp = kv_store_v_at(kv, l, bt[t / bs], t % bs);
            const __m512 wv = _mm512_set1_ps(w[m][t]);
            #pragma GCC unroll 4
            for (int j = 0; j < NV; j++)
                acc[m][j] = _mm512_fmadd_ps(wv, ld16(vp, (size_t)kvo + (size_t)i0 + 16 * (size_t)j, f16), acc[m][j]);
        }
        const __m512 iv = _mm512_set1_ps(inv[m]);
        #pragma GCC unroll 4
        for (int j = 0; j < NV; j++)
            _mm512_storeu_ps(op[m] + i0 + 16 * j, _mm512_mul_ps(acc[m][j], iv));
    }
}

/* tile_values_mb over the whole head, 64 outputs per pass. */
ATT512_INL void tile_values(const float *const *wp, const int MB, const float *inv, const int *te,
                            const kv_store_t *kv, int l, const int32_t *bt, int t0, int kvo, int hd, float *const *op,
                            const bool f16)
{
    for (int i0 = 0; i0 < hd; i0 += 64)
        switch ((hd - i0 < 64 ? hd - i0 : 64) / 16) {
        case 4: tile_values_mb(wp, MB, 4, inv, te, kv, l, bt, t0, kvo, i0, op, f16); break;
        case 3: tile_values_mb(wp, MB, 3, inv, te, kv, l, bt, t0, kvo, i0, op, f16); break;
        case 2: tile_values_mb(wp, MB, 2, inv, te, kv, l, bt, t0, kvo, i0, op, f16); break;
        default: tile_values_mb(wp, MB, 1, inv, te, kv, l, bt, t0, kvo, i0, op, f16); break;
        }
}

/* attention_tile on AVX-512, head_dim a multiple of 16 (at most
 * ATT_TILE_MAX_HEAD_DIM), M = n_rows * n_q <= ATT_TILE_MAX_VECS vectors
 * (vector m = row m / n_q, head m % n_q). Per 32 positions the K slices
 * are widened and transposed once (kt: two 16-position blocks) and every
 * vector's scores read them, 3 vectors per pass; then each vector's
 * softmax (softmax512); then the values, six vectors per V pass. */
ATT512_INL void attend_tile512_impl(const float *q, size_t q_ld, int n_rows, int n_q, const kv_store_t *kv, int l,
                                    const int32_t *bt, int t0, const int *t1, int kvo, int hd, float scale,
                                    float softcap, float *sc, size_t ld, float *out, const bool f16)
{
    const int M = n_rows * n_q;
    assert(M <= ATT_TILE_MAX_VECS && hd % 16 == 0 && hd <= ATT_TILE_MAX_HEAD_DIM);
    const float *qp[ATT_TILE_MAX_VECS];
    float *sp[ATT_TILE_MAX_VECS], *op[ATT_TILE_MAX_VECS];
    float inv[ATT_TILE_MAX_VECS];
    int te[ATT_TILE_MAX_VECS];
    int tmax = t1[0];
    for (int m = 0; m < M; m++) {
        const int r = m / n_q, h = m % n_q;
        qp[m] = q + (size_t)r * q_ld + (size_t)h * hd;
        op[m] = out + (size_t)r * q_ld + (size_t)h * hd;
        te[m] = t1[r];
        tmax = t1[r] > tmax ? t1[r] : tmax;
    }
    _Alignas(64) float kt[2 * ATT_TILE_MAX_HEAD_DIM * 16];
    for (int tb = t0; tb < tmax; tb += 32) {
        const int np = tmax - tb > 16 ? 2 : 1;
        __mmask16 mask[2];
        for (int p = 0; p < np; p++) {
            const int left = tmax - tb - 16 * p;
            mask[p] = (__mmask16)(left >= 16 ? 0xFFFF : (1u << left) - 1);
            tile_k_transpose(kv, l, bt, tb + 16 * p, tmax, kvo, hd, kt + (size_t)p * hd * 16, f16);
        }
        for (int m = 0; m < M; m += 3) {
            const int mb = M - m < 3 ? M - m : 3;
            float *spm[3];
            for (int u = 0; u < mb; u++)
                spm[u] = sc + (size_t)(m + u) * ld + (size_t)(tb - t0);
#define TILE_SCORES_CASE(MB_, NP_)                                                                           \
    if (mb == MB_ && np == NP_)                                                                              \
        tile_scores_mb(qp + m, MB_, NP_, kt, hd, scale, spm, mask);
            TILE_SCORES_CASE(3, 2)
            TILE_SCORES_CASE(2, 2)
            TILE_SCORES_CASE(1, 2)
            TILE_SCORES_CASE(3, 1)
            TILE_SCORES_CASE(2, 1)
            TILE_SCORES_CASE(1, 1)
#undef TILE_SCORES_CASE
        }
    }
    for (int m = 0; m < M; m++) {
        sp[m] = sc + (size_t)m * ld;
        inv[m] = softmax512(sp[m], te[m] - t0, softcap);
    }
    for (int m = 0; m < M; m += 6) {
        const int mb = M - m < 6 ? M - m : 6;
        const float *const *wp = (const float *const *)(sp + m);
        switch (mb) {
        case 6: tile_values(wp, 6, inv + m, te + m, kv, l, bt, t0, kvo, hd, op + m, f16); break;
        case 5: tile_values(wp, 5, inv + m, te + m, kv, l, bt, t0, kvo, hd, op + m, f16); break;
        case 4: tile_values(wp, 4, inv + m, te + m, kv, l, bt, t0, kvo, hd, op + m, f16); break;
        case 3: tile_values(wp, 3, inv + m, te + m, kv, l, bt, t0, kvo, hd, op + m, f16); break;
        case 2: tile_values(wp, 2, inv + m, te + m, kv, l, bt, t0, kvo, hd, op + m, f16); break;
        default: tile_values(wp, 1, inv + m, te + m, kv, l, bt, t0, kvo, hd, op + m, f16); break;
        }
    }
}

ATT512_FN static void attend_tile512(const float *q, size_t q_ld, int n_rows, int n_q, const kv_store_t *kv, int l,
                                     const int32_t *bt, int t0, const int *t1, int kvo, int hd, float scale,
                                     float softcap, float *sc, size_t ld, float *out)
{
    if (kv->type == KV_TYPE_F16)
        attend_tile512_impl(q, q_ld, n_rows, n_q, kv, l, bt, t0, t1, kvo, hd, scale, softcap, sc, ld, out, true);
    else
        attend_tile512_impl(q, q_ld, n_rows, n_q, kv, l, bt, t0, t1, kvo, hd, scale, softcap, sc, ld, out, false);
}

#endif

/* Element i of the K/V vector at p, as float. */
static inline float kv_elt(const kv_store_t *kv, const void *p, int i)
{
    return kv->type == KV_TYPE_F16 ? quant_fp16_to_fp32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

/* Portable attention of one (row, head), as attend_avx2, either element type. */
static void attend_plain(const float *q, const kv_store_t *kv, int l, const int32_t *bt, int t0, int t1, int kvo,
                         int hd, float scale, float softcap, float *sc, float *out)
{
    const int n_pos = t1 - t0;
    const size_t esz = kv_type_size(kv->type);
    float mx = -INFINITY;
    for (int j = 0; j < n_pos; j++) {
        const int t = t0 + j;
        const void *kt = k_vec(kv, l, bt, t, kvo, esz);
        float d = 0;
        for (int i = 0; i < hd; i++)
            d += q[i] * kv_elt(kv, kt, i);
        sc[j] = d * scale;
        if (softcap > 0)
            sc[j] = softcap * tanhf(sc[j] / softcap);
        if (sc[j] > mx)
            mx = sc[j];
    }
    float sum = 0;
    for (int j = 0; j < n_pos; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    const float inv = 1.0f / sum;
    for (int i = 0; i < hd; i++)
        out[i] = 0;
    for (int j = 0; j < n_pos; j++) {
        const int t = t0 + j;
        const void *vt = v_vec(kv, l, bt, t, kvo, esz);
        const float w = sc[j];
        for (int i = 0; i < hd; i++)
            out[i] += w * kv_elt(kv, vt, i);
    }
    for (int i = 0; i < hd; i++)
        out[i] *= inv;
}

/* Soft-capping, then sc = e^(sc - max) in place; returns 1 / Σ sc
 * (attend_plain's softmax). */
static float softmax_plain(float *sc, int n_pos, float softcap)
{
    float mx = -INFINITY;
    for (int j = 0; j < n_pos; j++) {
        if (softcap > 0)
            sc[j] = softcap * tanhf(sc[j] / softcap);
        if (sc[j] > mx)
            mx = sc[j];
    }
    float sum = 0;
    for (int j = 0; j < n_pos; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    return 1.0f / sum;
}

#ifdef VMATH_X86
VMATH_FN static float softmax_vec(float *sc, int n_pos, float softcap)
{
    return softmax_avx2(sc, n_pos, softcap);
}
#endif

/* attention_group over a Q8_0 store (attention_q8.h): queries quantized per
 * head, integer scores, the softmax of the other kernels, values
 * dequantized on the fly; up to ATTQ8_MAX_HEADS heads (a whole GQA group)
 * share each K/V read. */
static void attend_q8(const float *q, int n_q, const kv_store_t *kv, int l, const int32_t *bt, int t0, int t1,
                      int kvo, int hd, float scale, float softcap, float *sc, size_t ld, float *out)
{
    const int qb = kv->qblock;
    assert(qb > 0 && hd % qb == 0 && hd <= ATTQ8_MAX_HEAD_DIM);
    const qgemm_isa_t isa = attention_q8_isa();
    int8_t qq[ATTQ8_MAX_HEADS * ATTQ8_MAX_HEAD_DIM];
    float qd[ATTQ8_MAX_HEADS * (ATTQ8_MAX_HEAD_DIM / 8)];
    for (int h0 = 0; h0 < n_q; h0 += ATTQ8_MAX_HEADS) {
        const int nh = n_q - h0 < ATTQ8_MAX_HEADS ? n_q - h0 : ATTQ8_MAX_HEADS;
        float inv[ATTQ8_MAX_HEADS];
        attention_q8_quantize_q(q + (size_t)h0 * hd, nh, hd, qb, qq, qd);
        attention_q8_scores(isa, qq, qd, nh, kv, l, bt, t0, t1, kvo, hd, scale, sc + (size_t)h0 * ld, ld);
        for (int h = 0; h < nh; h++) {
#ifdef VMATH_X86
            if (isa != QGEMM_ISA_SCALAR && cpu_has_avx2_fma_f16c()) {
                inv[h] = softmax_vec(sc + (size_t)(h0 + h) * ld, t1 - t0, softcap);
                continue;
            }
#endif
            inv[h] = softmax_plain(sc + (size_t)(h0 + h) * ld, t1 - t0, softcap);
        }
        attention_q8_values(isa, sc + (size_t)h0 * ld, ld, nh, inv, kv, l, bt, t0, t1, kvo, hd,
                            out + (size_t)h0 * hd);
    }
}

void attention_head(const float *q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                    int kv_off, int head_dim, float scale, float softcap, float *scores, float *out)
{
    if (kv->type == KV_TYPE_Q8_0) {
        assert(t0 >= 0 && t1 > t0);
        attend_q8(q, 1, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap, scores, (size_t)(t1 - t0), out);
        return;
    }
    assert(t0 >= 0 && t1 > t0);
#ifdef VMATH_X86
    /* The AVX2 path also reads f16 K/V (F16C): every AVX2 CPU has F16C, and
     * one without it takes the portable path. */
    if (head_dim % 8 == 0 && cpu_has_avx2_fma_f16c()) {
        attend_avx2(q, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap, scores, out);
        return;
    }
#endif
    attend_plain(q, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap, scores, out);
}

void attention_group(const float *q, int n_q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                     int kv_off, int head_dim, float scale, float softcap, float *scores, size_t scores_ld,
                     float *out)
{
    assert(t0 >= 0 && t1 > t0 && n_q >= 1 && scores_ld >= (size_t)(t1 - t0));
    if (kv->type == KV_TYPE_Q8_0) {
        attend_q8(q, n_q, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap, scores, scores_ld, out);
        return;
    }
#ifdef VMATH_X86
    if (head_dim % 8 == 0 && cpu_has_avx2_fma_f16c()) {
        for (int h = 0; h < n_q; h += 4) {
            const int nh = n_q - h < 4 ? n_q - h : 4;
            if (nh == 1) { /* nothing to share: the one-head kernel keeps 4 positions in flight */
                attend_avx2(q + (size_t)h * head_dim, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap,
                            scores + (size_t)h * scores_ld, out + (size_t)h * head_dim);
                continue;
            }
            attend_group_avx2(q + (size_t)h * head_dim, nh, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap,
                              scores + (size_t)h * scores_ld, scores_ld, out + (size_t)h * head_dim);
        }
        return;
    }
#endif
    for (int h = 0; h < n_q; h++)
        attend_plain(q + (size_t)h * head_dim, kv, layer, bt, t0, t1, kv_off, head_dim, scale, softcap,
                     scores + (size_t)h * scores_ld, out + (size_t)h * head_dim);
}

void attention_row(const float *q, int n_head, int n_kv_head, const kv_store_t *kv, int layer, const int32_t *bt,
                   int t0, int t1, int head_dim, float scale, float softcap, float *scores, size_t scores_ld,
                   float *out)
{
    assert(n_head >= 1 && n_kv_head >= 1 && n_head % n_kv_head == 0);
#ifdef VMATH_X86
    if (head_dim % 8 == 0 && cpu_has_avx2_fma_f16c() && kv->type != KV_TYPE_Q8_0) {
        attend_row_avx2(q, n_head, n_kv_head, kv, layer, bt, t0, t1, head_dim, scale, softcap, scores, scores_ld,
                        out);
        return;
    }
#endif
    attention_row_by_group(q, n_head, n_kv_head, kv, layer, bt, t0, t1, head_dim, scale, softcap, scores, scores_ld,
                           out);
}

void attention_row_by_group(const float *q, int n_head, int n_kv_head, const kv_store_t *kv, int layer,
                            const int32_t *bt, int t0, int t1, int head_dim, float scale, float softcap,
                            float *scores, size_t scores_ld, float *out)
{
    assert(n_head >= 1 && n_kv_head >= 1 && n_head % n_kv_head == 0);
    const int group = n_head / n_kv_head;
    for (int g = 0; g < n_kv_head; g++)
        attention_group(q + (size_t)g * group * head_dim, group, kv, layer, bt, t0, t1, g * head_dim, head_dim, scale,
                        softcap, scores, scores_ld, out + (size_t)g * group * head_dim);
}

/* The path attention_tile takes: ATT_PATH_AUTO until a test chooses. */
static _Atomic int g_tile_path = ATT_PATH_AUTO;

att_path_t attention_tile_path(void)
{
    const int p = g_tile_path;
    if (p != ATT_PATH_AUTO)
        return (att_path_t)p;
#ifdef VMATH_X86
    if (cpu_has_avx512_vnni())
        return ATT_PATH_AVX512;
    if (cpu_has_avx2_fma_f16c())
        return ATT_PATH_AVX2;
#endif
    return ATT_PATH_PORTABLE;
}

int attention_tile_set_path(att_path_t p)
{
#ifdef VMATH_X86
    if ((p == ATT_PATH_AVX512 && !cpu_has_avx512_vnni()) || (p == ATT_PATH_AVX2 && !cpu_has_avx2_fma_f16c()))
        return -1;
#else
    if (p == ATT_PATH_AVX512 || p == ATT_PATH_AVX2)
        return -1;
#endif
    g_tile_path = p;
    return 0;
}

void attention_tile(const float *q, size_t q_ld, int n_rows, int n_q, const kv_store_t *kv, int layer,
                    const int32_t *bt, int t0, const int *t1, int kv_off, int head_dim, float scale, float softcap,
                    float *scores, size_t scores_ld, float *out)
{
    assert(n_rows >= 1 && n_q >= 1 && t0 >= 0);
    assert((size_t)n_q * (size_t)head_dim <= q_ld);
    const att_path_t path = attention_tile_path();
#ifdef VMATH_X86
    if (path == ATT_PATH_AVX512 && kv->type != KV_TYPE_Q8_0 && head_dim % 16 == 0 &&
        head_dim <= ATT_TILE_MAX_HEAD_DIM) {
        for (int r0 = 0; r0 < n_rows;) {
            /* as many rows as ATT_TILE_MAX_VECS vectors hold */
            int nr = ATT_TILE_MAX_VECS / n_q;
            if (nr < 1) {  /* a group larger than the tile: its heads in parts, row by row */
                for (int h0 = 0; h0 < n_q; h0 += ATT_TILE_MAX_VECS) {
                    const int nh = n_q - h0 < ATT_TILE_MAX_VECS ? n_q - h0 : ATT_TILE_MAX_VECS;
                    assert(scores_ld >= (size_t)(t1[r0] - t0));
                    attend_tile512(q + (size_t)r0 * q_ld + (size_t)h0 * head_dim, q_ld, 1, nh, kv, layer, bt, t0,
                                   t1 + r0, kv_off, head_dim, scale, softcap, scores, scores_ld,
                                   out + (size_t)r0 * q_ld + (size_t)h0 * head_dim);
                }
                r0++;
                continue;
            }
            nr = n_rows - r0 < nr ? n_rows - r0 : nr;
            for (int r = r0; r < r0 + nr; r++)
                assert(t1[r] > t0 && scores_ld >= (size_t)(t1[r] - t0));
            attend_tile512(q + (size_t)r0 * q_ld, q_ld, nr, n_q, kv, layer, bt, t0, t1 + r0, kv_off, head_dim, scale,
                           softcap, scores, scores_ld, out + (size_t)r0 * q_ld);
            r0 += nr;
        }
        return;
    }
#endif
    (void)path;
    for (int r = 0; r < n_rows; r++)
        attention_group(q + (size_t)r * q_ld, n_q, kv, layer, bt, t0, t1[r], kv_off, head_dim, scale, softcap, scores,
                        scores_ld, out + (size_t)r * q_ld);
}

/* ---- Scalar reference of the vector arithmetic ------------------------- */

/* vmath_exp8, one lane: the same IEEE operations in the same order (fmaf
 * for each fused multiply-add, nearbyintf for the round to nearest even). */
static float exp_ref(float x)
{
    const float lo = -87.33654f, hi = 88.72283f;
    const bool under = x < lo;
    x = x > lo ? x : lo;  /* _mm256_max_ps(x, lo) */
    x = x < hi ? x : hi;  /* _mm256_min_ps(x, hi) */
    const float n = nearbyintf(x * 1.44269504f);
    float r = fmaf(-n, 0.693145752f, x);
    r = fmaf(-n, 1.42860677e-6f, r);
    float p = 1.0f / 720;
    p = fmaf(p, r, 1.0f / 120);
    p = fmaf(p, r, 1.0f / 24);
    p = fmaf(p, r, 1.0f / 6);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    const int32_t ni = (int32_t)n, n1 = ni >> 1, n2 = ni - n1;
    const uint32_t b1 = (uint32_t)(n1 + 127) << 23, b2 = (uint32_t)(n2 + 127) << 23;
    float s1, s2;
    memcpy(&s1, &b1, 4);
    memcpy(&s2, &b2, 4);
    return under ? 0.0f : (p * s1) * s2;
}

/* vmath_tanh8, one lane. */
static float tanh_ref(float x)
{
    float ax = fabsf(x);
    ax = ax < 40.0f ? ax : 40.0f;
    const float e = exp_ref(ax + ax);
    const float t = 1.0f - 2.0f / (e + 1.0f);
    return signbit(x) ? -t : t;
}

/* vmath_hsum8's order over a[0..8). */
static float hsum8_ref(const float *a)
{
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

void attention_head_ref(const float *q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                        int kv_off, int head_dim, float scale, float softcap, float *sc, float *out)
{
    assert(t0 >= 0 && t1 > t0 && head_dim % 8 == 0 && kv->type != KV_TYPE_Q8_0);
    const int n_pos = t1 - t0, hd = head_dim;
    const size_t esz = kv_type_size(kv->type);
    /* scores: eight partial sums, one fused multiply-add per element */
    for (int j = 0; j < n_pos; j++) {
        const int t = t0 + j;
        const void *kt = k_vec(kv, layer, bt, t, kv_off, esz);
        float a[8] = {0};
        for (int i = 0; i < hd; i += 8)
            for (int u = 0; u < 8; u++)
                a[u] = fmaf(q[i + u], kv_elt(kv, kt, i + u), a[u]);
        sc[j] = hsum8_ref(a) * scale;
    }
    /* soft-capping: eight positions at a time as vmath_tanh8, the rest tanhf */
    const int n8 = n_pos / 8 * 8;
    if (softcap > 0) {
        const float ic = 1.0f / softcap;
        for (int j = 0; j < n_pos; j++)
            sc[j] = j < n8 ? softcap * tanh_ref(sc[j] * ic) : softcap * tanhf(sc[j] / softcap);
    }
    float mx = -INFINITY;
    for (int j = 0; j < n_pos; j++)
        mx = sc[j] > mx ? sc[j] : mx;
    /* e^(s - max): lane sums over whole groups of eight, then the rest */
    float lane[8] = {0};
    for (int j = 0; j < n8; j++) {
        sc[j] = exp_ref(sc[j] - mx);
        lane[j % 8] += sc[j];
    }
    float sum = hsum8_ref(lane);
    for (int j = n8; j < n_pos; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    const float inv = 1.0f / sum;
    /* values: per output element one fused multiply-add per position, in order */
    for (int i = 0; i < hd; i++)
        out[i] = 0;
    for (int j = 0; j < n_pos; j++) {
        const int t = t0 + j;
        const void *vt = v_vec(kv, layer, bt, t, kv_off, esz);
        for (int i = 0; i < hd; i++)
            out[i] = fmaf(sc[j], kv_elt(kv, vt, i), out[i]);
    }
    for (int i = 0; i < hd; i++)
        out[i] *= inv;
}
