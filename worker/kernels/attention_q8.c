/* attention_q8.c — scores and values of attention over a Q8_0 KV cache (see
 * attention_q8.h): integer q·k dot products per ISA, values dequantized on
 * the fly, every path giving the scalar path's bits. */
#include "worker/kernels/attention_q8.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

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
 * the one definition every path follows (the vector paths compute the
 * same operations per lane, one lane per position). */
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

/* Addresses of the n (1..w) K or V vectors (base: kv->k or kv->v) of the
 * positions from the cursor (block-table index *blk, slot *slot) on, which
 * it advances; rows[n..w) repeat the last one (lanes computed on real data
 * and never stored). The positions may cross block boundaries. */
static inline void rows_fill(const kv_store_t *kv, const void *base, int l, const int32_t *bt, int *blk, int *slot,
                             int n, int w, const char **rows)
{
    const size_t rb = kv_store_row_bytes(kv);
    for (int u = 0; u < n; u++) {
        rows[u] = (const char *)base + kv_store_vec(kv, l, bt[*blk], *slot) * rb;
        if (++*slot == kv->block_size) {
            *slot = 0;
            ++*blk;
        }
    }
    for (int u = n; u < w; u++)
        rows[u] = rows[n - 1];
}

/* Positions the scores kernels prefetch ahead of the one they read. */
#define ATTQ8_PF_AHEAD 64

/* A cursor that prefetches, position by position up to `upto`, the head
 * slice [kvo, kvo + hd) and its scales of both the K vector (the scores
 * read it next) and the V vector (the value pass reads it after the
 * softmax: it then comes from L2, as the f16 kernels arrange too). */
typedef struct pf_cursor {
    int blk, slot, t;
} pf_cursor_t;

static inline void pf_run(const kv_store_t *kv, int l, const int32_t *bt, pf_cursor_t *p, int upto, int kvo, int hd)
{
    const size_t rb = kv_store_row_bytes(kv);
    const int sco = kv->kv_dim + 2 * (kvo / kv->qblock);
    for (; p->t < upto; p->t++) {
        const size_t off = kv_store_vec(kv, l, bt[p->blk], p->slot) * rb;
        const char *k = (const char *)kv->k + off, *v = (const char *)kv->v + off;
        for (int by = 0; by < hd; by += 64) {
            __builtin_prefetch(k + kvo + by);
            __builtin_prefetch(v + kvo + by);
        }
        __builtin_prefetch(k + kvo + hd - 1);
        __builtin_prefetch(v + kvo + hd - 1);
        __builtin_prefetch(k + sco);
        __builtin_prefetch(v + sco);
        if (++p->slot == kv->block_size) {
            p->slot = 0;
            p->blk++;
        }
    }
}

/* The query side of the transposed kernels, per head h and block b
 * (v = h*nb + b): the quants as 8 dwords qw[v*8 + k] (bytes 4k..4k+3 of the
 * block), their absolute values qa likewise, and corr[v] = -128 Σ_i q_i
 * (for the kernels that feed k + 128 as vpdpbusd's unsigned operand:
 * Σ (k_i + 128) q_i - 128 Σ q_i = Σ k_i q_i, exact in int32). */
static void q_side(const int8_t *qq, int nv, int32_t *qw, int32_t *qa, int32_t *corr)
{
    memcpy(qw, qq, (size_t)nv * 32);
    for (int v = 0; v < nv; v++) {
        int32_t s = 0;
        int8_t a[32];
        for (int i = 0; i < 32; i++) {
            s += qq[v * 32 + i];
            a[i] = (int8_t)(qq[v * 32 + i] < 0 ? -qq[v * 32 + i] : qq[v * 32 + i]);
        }
        if (qa)
            memcpy(qa + v * 8, a, 32);
        corr[v] = -128 * s;
    }
}

/* 8 x 8 dword transpose: r[u] dword c -> r[c] dword u. */
#define TR8_BODY(r)                                                                                     \
    do {                                                                                                \
        __m256i a_[8], b_[8];                                                                           \
        for (int i_ = 0; i_ < 4; i_++) {                                                                \
            a_[2 * i_] = _mm256_unpacklo_epi32(r[2 * i_], r[2 * i_ + 1]);                               \
            a_[2 * i_ + 1] = _mm256_unpackhi_epi32(r[2 * i_], r[2 * i_ + 1]);                           \
        }                                                                                               \
        /* b_[4i + k], 128-bit lane L: rows 4i..4i+3 of dword column 4L + k */                          \
        for (int i_ = 0; i_ < 2; i_++) {                                                                \
            b_[4 * i_] = _mm256_unpacklo_epi64(a_[4 * i_], a_[4 * i_ + 2]);                             \
            b_[4 * i_ + 1] = _mm256_unpackhi_epi64(a_[4 * i_], a_[4 * i_ + 2]);                         \
            b_[4 * i_ + 2] = _mm256_unpacklo_epi64(a_[4 * i_ + 1], a_[4 * i_ + 3]);                     \
            b_[4 * i_ + 3] = _mm256_unpackhi_epi64(a_[4 * i_ + 1], a_[4 * i_ + 3]);                     \
        }                                                                                               \
        for (int k_ = 0; k_ < 4; k_++) {                                                                \
            r[k_] = _mm256_permute2x128_si256(b_[k_], b_[4 + k_], 0x20);                                \
            r[4 + k_] = _mm256_permute2x128_si256(b_[k_], b_[4 + k_], 0x31);                            \
        }                                                                                               \
    } while (0)

/* The block dot of one head over 8 positions from the transposed K block
 * (col[k] lane u = bytes 4k..4k+3 of position u): acc lane u = Σ q·k. */
#define DOTT_AVX2(acc, col, qw8, qa8)                                                                   \
    for (int k_ = 0; k_ < 8; k_++)                                                                      \
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi32(qa8[k_]),      \
                                                                       _mm256_sign_epi8(col[k_], _mm256_set1_epi32(qw8[k_]))), \
                                                  _mm256_set1_epi16(1)))
#define DOTT_VNNI(acc, col, qw8, qa8)                                                                   \
    for (int k_ = 0; k_ < 8; k_++)                                                                      \
    acc = _mm256_dpbusd_avx_epi32(acc, col[k_], _mm256_set1_epi32(qw8[k_]))
#define DOTT_V256(acc, col, qw8, qa8)                                                                   \
    for (int k_ = 0; k_ < 8; k_++)                                                                      \
    acc = _mm256_dpbusd_epi32(acc, col[k_], _mm256_set1_epi32(qw8[k_]))

/* scores_scalar with qb == 32 on 256-bit vectors, every head of the call
 * per pass: eight positions at a time (crossing KV blocks as the table
 * says), each 32-byte K block of the eight loaded once and transposed to
 * dword columns (lane u = position u), then per head eight dots of a column
 * with one broadcast query dword give the eight block sums in one vector,
 * and the float part is combine1's operations in its order, lane-wise.
 * UNS: the dot takes k + 128 as the unsigned operand (k ^ 0x80; the sum
 * starts from corr) — vpdpbusd; else |q| and sign(k, q) (maddubs: |q|,
 * |k| <= 127, no int16 saturation). The integer sums are exact on every
 * path, hence the same bits. */
#define SCORES_T8(NAME, TARGET, DOTT, UNS)                                                              \
    static __attribute__((target(TARGET))) void NAME(const int8_t *qq, const float *qd, int nh, int hd,  \
                                                     const kv_store_t *kv, int l, const int32_t *bt,    \
                                                     int t0, int t1, int kvo, float scale, float *sc,    \
                                                     size_t ld)                                          \
    {                                                                                                    \
        const int nb = hd / 32, kvd = kv->kv_dim, bs = kv->block_size;                                   \
        int32_t qw[ATTQ8_MAX_HEADS * ATTQ8_MAX_HEAD_DIM / 4], qa[UNS ? 1 : ATTQ8_MAX_HEADS * ATTQ8_MAX_HEAD_DIM / 4]; \
        int32_t corr[ATTQ8_MAX_HEADS * (ATTQ8_MAX_HEAD_DIM / 32)];                                        \
        q_side(qq, nh * nb, qw, UNS ? NULL : qa, corr);                                                  \
        __m256 sacc[ATTQ8_MAX_HEADS];                                                                     \
        const __m256 scv = _mm256_set1_ps(scale);                                                        \
        const char *rw[8];                                                                               \
        int blk = t0 / bs, slot = t0 % bs;                                                               \
        pf_cursor_t pf = {blk, slot, t0};                                                                \
        for (int t = t0; t < t1; t += 8) {                                                               \
            const int n = t1 - t < 8 ? t1 - t : 8;                                                       \
            pf_run(kv, l, bt, &pf, t + 8 + ATTQ8_PF_AHEAD < t1 ? t + 8 + ATTQ8_PF_AHEAD : t1, kvo, hd);   \
            rows_fill(kv, kv->k, l, bt, &blk, &slot, n, 8, rw);                                          \
            const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
            for (int b = 0; b < nb; b++) {                                                               \
                __m256i col[8];                                                                          \
                uint16_t kh[8];                                                                          \
                for (int u = 0; u < 8; u++) {                                                            \
                    col[u] = _mm256_loadu_si256((const __m256i *)(rw[u] + kvo + 32 * b));                \
                    if (UNS)                                                                             \
                        col[u] = _mm256_xor_si256(col[u], _mm256_set1_epi8((char)0x80));                 \
                    memcpy(&kh[u], rw[u] + kvd + 2 * (kvo / 32 + b), 2);                                 \
                }                                                                                        \
                TR8_BODY(col);                                                                           \
                const __m256 kdv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)kh));                \
                for (int h = 0; h < nh; h++) {                                                           \
                    const int v = h * nb + b;                                                            \
                    const int32_t *qw8 = qw + v * 8, *qa8 = qa + (UNS ? 0 : v * 8);                      \
                    __m256i acc = _mm256_set1_epi32(UNS ? corr[v] : 0);                                  \
                    DOTT(acc, col, qw8, qa8);                                                            \
                    (void)qa8;                                                                           \
                    __m256 p = _mm256_mul_ps(_mm256_set1_ps(qd[v]), kdv);                                \
                    p = _mm256_mul_ps(p, _mm256_cvtepi32_ps(acc));                                       \
                    const __m256 s = b ? _mm256_add_ps(sacc[h], p) : p;                                  \
                    if (b == nb - 1)                                                                     \
                        _mm256_maskstore_ps(sc + (size_t)h * ld + (size_t)(t - t0), mask, _mm256_mul_ps(s, scv)); \
                    else                                                                                 \
                        sacc[h] = s;                                                                     \
                }                                                                                        \
            }                                                                                            \
        }                                                                                                \
    }

SCORES_T8(scores_avx2, T_AVX2, DOTT_AVX2, 0)
SCORES_T8(scores_vnni, T_VNNI, DOTT_VNNI, 1)
SCORES_T8(scores_v256, T_V512, DOTT_V256, 1)

/* 16 x 16 dword transpose in place: r[u] dword c -> r[c] dword u. */
static inline __attribute__((always_inline, target(T_V512))) void tr16(__m512i *r)
{
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* b[4i + k], 128-bit lane L: rows 4i..4i+3 of dword column 4L + k */
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    for (int k = 0; k < 4; k++) {
        const __m512i e0 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0x44), e1 = _mm512_shuffle_i32x4(b[k], b[4 + k], 0xee);
        const __m512i f0 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0x44),
                      f1 = _mm512_shuffle_i32x4(b[8 + k], b[12 + k], 0xee);
        r[k] = _mm512_shuffle_i32x4(e0, f0, 0x88);
        r[4 + k] = _mm512_shuffle_i32x4(e0, f0, 0xdd);
        r[8 + k] = _mm512_shuffle_i32x4(e1, f1, 0x88);
        r[12 + k] = _mm512_shuffle_i32x4(e1, f1, 0xdd);
    }
}

/* SCORES_T8 on 512-bit vectors for hd % 64 == 0: sixteen positions at a
 * time, each 64-byte piece (two q8 blocks) of their K slices loaded once,
 * k ^ 0x80, transposed to 16 dword columns; per head eight vpdpbusd with a
 * broadcast query dword per block give sixteen positions' block sums. */
static __attribute__((target(T_V512))) void scores_v512(const int8_t *qq, const float *qd, int nh, int hd,
                                                        const kv_store_t *kv, int l, const int32_t *bt, int t0,
                                                        int t1, int kvo, float scale, float *sc, size_t ld)
{
    const int nb = hd / 32, kvd = kv->kv_dim, bs = kv->block_size;
    int32_t qw[ATTQ8_MAX_HEADS * ATTQ8_MAX_HEAD_DIM / 4], corr[ATTQ8_MAX_HEADS * (ATTQ8_MAX_HEAD_DIM / 32)];
    q_side(qq, nh * nb, qw, NULL, corr);
    __m512 sacc[ATTQ8_MAX_HEADS];
    const __m512 scv = _mm512_set1_ps(scale);
    const __m512i x80 = _mm512_set1_epi8((char)0x80);
    const char *rw[16];
    int blk = t0 / bs, slot = t0 % bs;
    pf_cursor_t pf = {blk, slot, t0};
    for (int t = t0; t < t1; t += 16) {
        const int n = t1 - t < 16 ? t1 - t : 16;
        pf_run(kv, l, bt, &pf, t + 16 + ATTQ8_PF_AHEAD < t1 ? t + 16 + ATTQ8_PF_AHEAD : t1, kvo, hd);
        rows_fill(kv, kv->k, l, bt, &blk, &slot, n, 16, rw);
        const __mmask16 m = (__mmask16)(n == 16 ? 0xffffu : (1u << n) - 1);
        for (int c = 0; c < hd / 64; c++) {
            __m512i col[16];
            uint32_t kw[16]; /* the two f16 scales of this piece, per position */
            for (int u = 0; u < 16; u++) {
                col[u] = _mm512_xor_si512(_mm512_loadu_si512(rw[u] + kvo + 64 * c), x80);
                memcpy(&kw[u], rw[u] + kvd + 2 * (kvo / 32 + 2 * c), 4);
            }
            tr16(col);
            const __m512i kwv = _mm512_loadu_si512(kw);
            const __m512 kd0 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(kwv));
            const __m512 kd1 = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(kwv, 16)));
            for (int h = 0; h < nh; h++) {
                const int v = h * nb + 2 * c;
                const int32_t *q16 = qw + v * 8;
                __m512i a0 = _mm512_set1_epi32(corr[v]), a1 = _mm512_set1_epi32(corr[v + 1]);
                for (int k = 0; k < 8; k++) {
                    a0 = _mm512_dpbusd_epi32(a0, col[k], _mm512_set1_epi32(q16[k]));
                    a1 = _mm512_dpbusd_epi32(a1, col[8 + k], _mm512_set1_epi32(q16[8 + k]));
                }
                __m512 p0 = _mm512_mul_ps(_mm512_set1_ps(qd[v]), kd0);
                p0 = _mm512_mul_ps(p0, _mm512_cvtepi32_ps(a0));
                __m512 p1 = _mm512_mul_ps(_mm512_set1_ps(qd[v + 1]), kd1);
                p1 = _mm512_mul_ps(p1, _mm512_cvtepi32_ps(a1));
                const __m512 s = _mm512_add_ps(c ? _mm512_add_ps(sacc[h], p0) : p0, p1);
                if (c == hd / 64 - 1)
                    _mm512_mask_storeu_ps(sc + (size_t)h * ld + (size_t)(t - t0), m, _mm512_mul_ps(s, scv));
                else
                    sacc[h] = s;
            }
        }
    }
}

/* ---- values, vector paths ------------------------------------------------ */

/* out_h = Σ_t w_h[t] · (d · q)_t · inv[h] for NH heads (a constant, <= 8),
 * NV (1 or 2) vectors of 8 outputs of every head per pass over the
 * positions: each position's V slice is dequantized once per pass (d * q,
 * exact, as values_scalar) and shared by the heads; each output sums over
 * t in order with one FMA per term: values_scalar's bits. */
static inline __attribute__((always_inline, target(T_FMA))) void
values_avx2_impl(const float *w, size_t ld, const int NH, const float *inv, const kv_store_t *kv, int l,
                 const int32_t *bt, int t0, int t1, int kvo, int hd, float *out, const int NV)
{
    const int bs = kv->block_size, qb = kv->qblock;
    const size_t rb = kv_store_row_bytes(kv);
    for (int i0 = 0; i0 < hd; i0 += 8 * NV) {
        const int two = NV == 2 && hd - i0 >= 16;
        const int b0 = (kvo + i0) / qb, b1 = (kvo + i0 + 8) / qb;
        __m256 acc[8][2];
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++)
            acc[h][0] = acc[h][1] = _mm256_setzero_ps();
        for (int tb = t0; tb < t1;) {
            const int slot0 = tb % bs, n = (t1 - tb < bs - slot0) ? t1 - tb : bs - slot0;
            const char *row0 = kv_store_v_at(kv, l, bt[tb / bs], slot0);
            const float *wt = w + (size_t)(tb - t0);
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
#pragma GCC unroll 8
                    for (int h = 0; h < NH; h++) {
                        const __m256 wv = _mm256_set1_ps(wt[(size_t)h * ld + (size_t)j]);
                        acc[h][0] = _mm256_fmadd_ps(wv, v0, acc[h][0]);
                        acc[h][1] = _mm256_fmadd_ps(wv, v1, acc[h][1]);
                    }
                } else {
#pragma GCC unroll 8
                    for (int h = 0; h < NH; h++)
                        acc[h][0] = _mm256_fmadd_ps(_mm256_set1_ps(wt[(size_t)h * ld + (size_t)j]), v0, acc[h][0]);
                }
            }
            tb += n;
        }
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            _mm256_storeu_ps(out + (size_t)h * hd + i0, _mm256_mul_ps(acc[h][0], _mm256_set1_ps(inv[h])));
            if (two)
                _mm256_storeu_ps(out + (size_t)h * hd + i0 + 8, _mm256_mul_ps(acc[h][1], _mm256_set1_ps(inv[h])));
        }
    }
}

/* attention_q8_values on AVX2 (every vector ISA without AVX-512): heads in
 * chunks of 8 (one vector of each per pass) or, for 4 heads or fewer, two
 * vectors of each per pass. */
static __attribute__((target(T_FMA))) void values_avx2(const float *w, size_t ld, int nh, const float *inv,
                                                       const kv_store_t *kv, int l, const int32_t *bt, int t0,
                                                       int t1, int kvo, int hd, float *out)
{
    for (int h0 = 0; h0 < nh; h0 += 8) {
        const int n = nh - h0 < 8 ? nh - h0 : 8;
        const float *wh = w + (size_t)h0 * ld;
        float *oh = out + (size_t)h0 * hd;
        switch (n) {
#define VA_CASE(N, NV)                                                                                    \
    case N:                                                                                               \
        values_avx2_impl(wh, ld, N, inv + h0, kv, l, bt, t0, t1, kvo, hd, oh, NV);                        \
        break;
            VA_CASE(1, 2)
            VA_CASE(2, 2)
            VA_CASE(3, 2)
            VA_CASE(4, 2)
            VA_CASE(5, 1)
            VA_CASE(6, 1)
            VA_CASE(7, 1)
            VA_CASE(8, 1)
#undef VA_CASE
        }
    }
}

/* 16 dequantized V elements e..e+15 of the row (quants vq0, scales vd). */
static inline __attribute__((always_inline, target(T_V512 ",fma"))) __m512 deq16(const int8_t *vq0,
                                                                                  const uint16_t *vd, int e, int qb)
{
    __m512 d;
    if (qb >= 16) /* e is a multiple of 16: one block */
        d = _mm512_set1_ps(_cvtsh_ss(vd[e / qb]));
    else
        d = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(vd[e / qb]))),
                               _mm256_set1_ps(_cvtsh_ss(vd[e / qb + 1])), 1);
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(vq0 + e)))));
}

/* values_avx2_impl with 16-lane vectors (the avx512vnni ISA, hd % 16 == 0):
 * NH (<= 8) heads, 32 outputs of each per pass. */
static inline __attribute__((always_inline, target(T_V512 ",fma"))) void
values_v512_impl(const float *w, size_t ld, const int NH, const float *inv, const kv_store_t *kv, int l,
                 const int32_t *bt, int t0, int t1, int kvo, int hd, float *out)
{
    const int bs = kv->block_size, qb = kv->qblock;
    const size_t rb = kv_store_row_bytes(kv);
    for (int i0 = 0; i0 < hd; i0 += 32) {
        const int two = hd - i0 >= 32; /* else 16 left */
        const int e0 = kvo + i0;
        __m512 acc[8][2];
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++)
            acc[h][0] = acc[h][1] = _mm512_setzero_ps();
        for (int tb = t0; tb < t1;) {
            const int slot0 = tb % bs, n = (t1 - tb < bs - slot0) ? t1 - tb : bs - slot0;
            const char *row0 = kv_store_v_at(kv, l, bt[tb / bs], slot0);
            const float *wt = w + (size_t)(tb - t0);
            for (int j = 0; j < n; j++) {
                const char *row = row0 + (size_t)j * rb;
                const uint16_t *vd = (const uint16_t *)(row + kv->kv_dim);
                if (j + 4 < n)
                    _mm_prefetch(row + 4 * rb + e0, _MM_HINT_T0);
                const __m512 v0 = deq16((const int8_t *)row, vd, e0, qb);
                if (two) {
                    const __m512 v1 = deq16((const int8_t *)row, vd, e0 + 16, qb);
#pragma GCC unroll 8
                    for (int h = 0; h < NH; h++) {
                        const __m512 wv = _mm512_set1_ps(wt[(size_t)h * ld + (size_t)j]);
                        acc[h][0] = _mm512_fmadd_ps(wv, v0, acc[h][0]);
                        acc[h][1] = _mm512_fmadd_ps(wv, v1, acc[h][1]);
                    }
                } else {
#pragma GCC unroll 8
                    for (int h = 0; h < NH; h++)
                        acc[h][0] = _mm512_fmadd_ps(_mm512_set1_ps(wt[(size_t)h * ld + (size_t)j]), v0, acc[h][0]);
                }
            }
            tb += n;
        }
#pragma GCC unroll 8
        for (int h = 0; h < NH; h++) {
            _mm512_storeu_ps(out + (size_t)h * hd + i0, _mm512_mul_ps(acc[h][0], _mm512_set1_ps(inv[h])));
            if (two)
                _mm512_storeu_ps(out + (size_t)h * hd + i0 + 16, _mm512_mul_ps(acc[h][1], _mm512_set1_ps(inv[h])));
        }
    }
}

/* values_v512_impl over heads in chunks of 8. */
static __attribute__((target(T_V512 ",fma"))) void values_v512(const float *w, size_t ld, int nh, const float *inv,
                                                              const kv_store_t *kv, int l, const int32_t *bt,
                                                              int t0, int t1, int kvo, int hd, float *out)
{
    for (int h0 = 0; h0 < nh; h0 += 8) {
        const int n = nh - h0 < 8 ? nh - h0 : 8;
        const float *wh = w + (size_t)h0 * ld;
        float *oh = out + (size_t)h0 * hd;
        switch (n) {
#define VV_CASE(N)                                                                                        \
    case N:                                                                                               \
        values_v512_impl(wh, ld, N, inv + h0, kv, l, bt, t0, t1, kvo, hd, oh);                            \
        break;
            VV_CASE(1)
            VV_CASE(2)
            VV_CASE(3)
            VV_CASE(4)
            VV_CASE(5)
            VV_CASE(6)
            VV_CASE(7)
            VV_CASE(8)
#undef VV_CASE
        }
    }
}
#endif

void attention_q8_scores(qgemm_isa_t isa, const int8_t *qq, const float *qd, int nh, const kv_store_t *kv, int l,
                         const int32_t *bt, int t0, int t1, int kvo, int hd, float scale, float *sc, size_t ld)
{
    const int bs = kv->block_size, qb = kv->qblock;
    assert(kv->type == KV_TYPE_Q8_0 && qb > 0 && hd % qb == 0 && kvo % qb == 0);
    assert(nh >= 1 && nh <= ATTQ8_MAX_HEADS && hd <= ATTQ8_MAX_HEAD_DIM && t0 >= 0 && t1 > t0);
#ifdef ATTQ8_X86
    if (qb == 32 && isa == QGEMM_ISA_AVX512VNNI && hd % 64 == 0) {
        scores_v512(qq, qd, nh, hd, kv, l, bt, t0, t1, kvo, scale, sc, ld);
        return;
    }
    if (qb == 32 && isa == QGEMM_ISA_AVX512VNNI) {
        scores_v256(qq, qd, nh, hd, kv, l, bt, t0, t1, kvo, scale, sc, ld);
        return;
    }
    if (qb == 32 && isa == QGEMM_ISA_AVXVNNI) {
        scores_vnni(qq, qd, nh, hd, kv, l, bt, t0, t1, kvo, scale, sc, ld);
        return;
    }
    if (qb == 32 && isa == QGEMM_ISA_AVX2) {
        scores_avx2(qq, qd, nh, hd, kv, l, bt, t0, t1, kvo, scale, sc, ld);
        return;
    }
#endif
    const size_t rb = kv_store_row_bytes(kv);
    for (int t = t0; t < t1;) {
        const int slot0 = t % bs, n = (t1 - t < bs - slot0) ? t1 - t : bs - slot0;
        const char *row0 = kv_store_k_at(kv, l, bt[t / bs], slot0);
        scores_scalar(qq, qd, nh, hd, qb, row0, rb, kvo, kv->kv_dim, n, scale, sc + (size_t)(t - t0), ld);
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
    assert(nh >= 1 && nh <= ATTQ8_MAX_HEADS && hd <= ATTQ8_MAX_HEAD_DIM && t0 >= 0 && t1 > t0);
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
    qgemm_isa_t isa = v ? (qgemm_isa_t)v : qgemm_isa_default();
    /* no AMX attention kernel: the AMX machines run the AVX-512 ones */
    return isa == QGEMM_ISA_AMX ? QGEMM_ISA_AVX512VNNI : isa;
}

int attention_q8_set_isa(qgemm_isa_t isa)
{
    if (isa != QGEMM_ISA_AUTO && !qgemm_isa_available(isa))
        return -1;
    atomic_store_explicit(&g_isa, (int)isa, memory_order_relaxed);
    return 0;
}
