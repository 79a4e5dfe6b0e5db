/* qkpack.c — packing and kernels for Q4_0 / Q4_K / Q5_K / Q6_K panels
 * (layout and arithmetic in qkpack.h; the kernel body is qkpack_kern.inc,
 * compiled once per instruction set).
 *
 * No FP contraction may fuse the float step of the kernels (the scalar
 * reference in qgemm.c does a separate multiply and add): GCC's -std=c11
 * implies -ffp-contract=off and the pragma covers clang.
 */
#include "worker/kernels/qkpack.h"
#include "worker/kernels/pfqueue.h"

#include <immintrin.h>
#include <string.h>

#include "worker/kernels/qblock.h"
#include "worker/kernels/quant.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* The panel kinds, named by the traits table's packed column (quant.h). */
enum qk_kind { QK_Q40 = QUANT_PACK_Q4_0, QK_Q4K = QUANT_PACK_Q4_K, QK_Q5K = QUANT_PACK_Q5_K, QK_Q6K = QUANT_PACK_Q6_K };
#define QK_AFFINE(k) ((k) == QK_Q4K || (k) == QK_Q5K)

/* Offsets inside a chunk (8 blocks × 8 columns), qkpack.h. */
static inline size_t qk_qh_bytes(enum qk_kind k) { return k == QK_Q5K ? 256 : k == QK_Q6K ? 512 : 0; }
static inline size_t qk_off_sc(enum qk_kind k) { return 1024 + qk_qh_bytes(k); }
static inline size_t qk_off_mm(enum qk_kind k) { return qk_off_sc(k) + (k == QK_Q6K ? 128 : QK_AFFINE(k) ? 64 : 0); }
static inline size_t qk_off_d(enum qk_kind k) { return qk_off_mm(k) + (QK_AFFINE(k) ? 64 : 0); }
static inline size_t qk_chunk_bytes(enum qk_kind k)
{
    switch (k) {
    case QK_Q40: return 1024 + 128;
    case QK_Q4K: return 1024 + 64 + 64 + 32;
    case QK_Q5K: return 1024 + 256 + 64 + 64 + 32;
    case QK_Q6K: return 1024 + 512 + 128 + 32; /* 16 bytes of d, 16 of padding */
    }
    return 0;
}

/* The panel kind of a type packed here (its row's packed column). */
static bool kind_of(uint32_t type, enum qk_kind *k)
{
    const quant_traits_t *t = quant_traits(type);
    switch (t ? t->packed : QUANT_PACK_NONE) {
    case QUANT_PACK_Q4_0:
    case QUANT_PACK_Q4_K:
    case QUANT_PACK_Q5_K:
    case QUANT_PACK_Q6_K: *k = (enum qk_kind)t->packed; return true;
    default: return false;
    }
}

bool qkpack_supported(uint32_t type)
{
    enum qk_kind k;
    return kind_of(type, &k);
}

size_t qkpack_panel_bytes(uint32_t type, int64_t n_in)
{
    enum qk_kind k;
    if (!kind_of(type, &k) || n_in <= 0 || n_in % (int64_t)ggml_type_block_elems(type) != 0)
        return 0;
    int64_t nb = n_in / 32, n_chunks = (nb + 7) / 8;
    return ((size_t)n_chunks * qk_chunk_bytes(k) + 63) / 64 * 64;
}

/* ---- packing ---------------------------------------------------------------- */

/* Raw quants q[8][32] (blocks 8ch..8ch+7 of a row, n valid) and, for
 * K-quants, integer scales sc[8][2] (per half block), mins m[8], and the
 * f16 bits d, dmin of chunk ch (= super-block ch); Q4_0's per-block d16[8]. */
typedef struct {
    uint8_t q[8][32];
    int sc[8][2], m[8];
    uint16_t d, dmin, d16[8];
} chunk_src_t;

static void chunk_decode(enum qk_kind k, const uint8_t *row, int64_t ch, int n, chunk_src_t *s)
{
    memset(s, 0, sizeof *s);
    if (k == QK_Q40) {
        const qblock_q4_0_t *b = (const qblock_q4_0_t *)row + 8 * ch;
        for (int j = 0; j < n; j++) {
            s->d16[j] = b[j].d;
            for (int i = 0; i < 16; i++) {
                s->q[j][i] = b[j].qs[i] & 15;
                s->q[j][i + 16] = b[j].qs[i] >> 4;
            }
        }
        return;
    }
    if (k == QK_Q6K) {
        const qblock_q6_k_t *b = (const qblock_q6_k_t *)row + ch;
        s->d = b->d;
        for (int e = 0; e < 256; e++) {
            int h = e / 128, r = (e % 128) / 32, l = e % 32;
            uint8_t lo = b->ql[64 * h + 32 * (r & 1) + l];
            s->q[e / 32][e % 32] = (uint8_t)((r < 2 ? lo & 15 : lo >> 4) | ((b->qh[32 * h + l] >> (2 * r)) & 3) << 4);
        }
        for (int j = 0; j < 8; j++) {
            s->sc[j][0] = b->scales[2 * j];
            s->sc[j][1] = b->scales[2 * j + 1];
        }
        return;
    }
    /* Q4_K / Q5_K: Q5_K's head (d, dmin, scales) is Q4_K's */
    const qblock_q4_k_t *b4 = (const qblock_q4_k_t *)row + ch;
    const qblock_q5_k_t *b5 = (const qblock_q5_k_t *)row + ch;
    const qblock_q4_k_t *head = k == QK_Q5K ? (const qblock_q4_k_t *)(const void *)b5 : b4;
    const uint8_t *qs = k == QK_Q5K ? b5->qs : b4->qs;
    s->d = head->d;
    s->dmin = head->dmin;
    for (int j = 0; j < 8; j++) {
        int sc, m;
        qblock_k_scale_min(head->scales, j, &sc, &m);
        s->sc[j][0] = s->sc[j][1] = sc;
        s->m[j] = m;
        for (int l = 0; l < 32; l++) {
            uint8_t x = qs[32 * (j / 2) + l];
            int q = (j & 1) ? x >> 4 : x & 15;
            if (k == QK_Q5K)
                q |= ((b5->qh[l] >> j) & 1) << 4;
            s->q[j][l] = (uint8_t)q;
        }
    }
}

static void wr16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

void qkpack_pack_panel(uint32_t type, const uint8_t *w, size_t rb, int nc, int64_t n_in, uint8_t *dst)
{
    enum qk_kind k;
    if (!kind_of(type, &k))
        return;
    const int64_t nb = n_in / 32, n_chunks = (nb + 7) / 8;
    const size_t CH = qk_chunk_bytes(k), OQH = 1024, OSC = qk_off_sc(k), OMM = qk_off_mm(k), OD = qk_off_d(k);
    memset(dst, 0, qkpack_panel_bytes(type, n_in));
    chunk_src_t s;
    for (int c = 0; c < nc; c++) {
        const uint8_t *row = w + (size_t)c * rb;
        for (int64_t ch = 0; ch < n_chunks; ch++) {
            int n = nb - 8 * ch < 8 ? (int)(nb - 8 * ch) : 8;
            chunk_decode(k, row, ch, n, &s);
            uint8_t *o = dst + (size_t)ch * CH;
            for (int j = 0; j < n; j++) {
                for (int g = 0; g < 4; g++)
                    for (int i = 0; i < 4; i++) {
                        uint8_t lo = s.q[j][4 * g + i], hi = s.q[j][16 + 4 * g + i];
                        o[128 * j + 32 * g + 4 * c + i] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                        if (k == QK_Q6K) {
                            o[OQH + 64 * j + 4 * c + i] |= (uint8_t)((lo >> 4) << (2 * g));
                            o[OQH + 64 * j + 32 + 4 * c + i] |= (uint8_t)((hi >> 4) << (2 * g));
                        }
                    }
                if (k == QK_Q5K)
                    for (int g = 0; g < 8; g++)
                        for (int i = 0; i < 4; i++)
                            o[OQH + 32 * j + 4 * c + i] |= (uint8_t)(((s.q[j][4 * g + i] >> 4) & 1) << g);
                if (QK_AFFINE(k)) {
                    o[OSC + 8 * j + c] = (uint8_t)(int8_t)s.sc[j][0];
                    o[OMM + 8 * j + c] = (uint8_t)s.m[j];
                } else if (k == QK_Q6K) {
                    o[OSC + 16 * j + c] = (uint8_t)(int8_t)s.sc[j][0];
                    o[OSC + 16 * j + 8 + c] = (uint8_t)(int8_t)s.sc[j][1];
                } else {
                    wr16(o + OD + 16 * j + 2 * c, s.d16[j]);
                }
            }
            if (k != QK_Q40)
                wr16(o + OD + 2 * c, s.d);
            if (QK_AFFINE(k))
                wr16(o + OD + 16 + 2 * c, s.dmin);
        }
    }
}

/* ---- kernels ------------------------------------------------------------------ */

#define QK_ATTR __attribute__((target("avx2,f16c")))
#define QK_SFX(n) n##_avx2
#define QK_ISA 0
#include "worker/kernels/qkpack_kern.inc"
#undef QK_ATTR
#undef QK_SFX
#undef QK_ISA

#define QK_ATTR __attribute__((target("avx2,f16c,avxvnni")))
#define QK_SFX(n) n##_avxvnni
#define QK_ISA 1
#include "worker/kernels/qkpack_kern.inc"
#undef QK_ATTR
#undef QK_SFX
#undef QK_ISA

/* AVX512-VNNI: two panels (16 columns) per zmm, so every vpdpbusd takes
 * one activation dword broadcast to all 16 lanes, and 8 X rows per tile.
 * Same integers and the same float step per lane as the kernels above. */
#define AVX512 __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define RT512 8

/* 32 bytes at a (columns 0-7) and b (columns 8-15) as one zmm */
static inline __attribute__((always_inline)) AVX512 __m512i ld2x256(const uint8_t *a, const uint8_t *b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_load_si256((const __m256i *)(const void *)a)),
                              _mm256_load_si256((const __m256i *)(const void *)b), 1);
}

/* 8 bytes at a and 8 at b as the low / high half of an xmm */
static inline __attribute__((always_inline)) AVX512 __m128i ld2x64(const uint8_t *a, const uint8_t *b)
{
    return _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(const void *)a),
                              _mm_loadl_epi64((const __m128i *)(const void *)b));
}

/* 8 f16 at a and 8 at b as 16 floats */
static inline __attribute__((always_inline)) AVX512 __m512 ld2h(const uint8_t *a, const uint8_t *b)
{
    __m256i h = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_load_si128((const __m128i *)(const void *)a)),
                                        _mm_load_si128((const __m128i *)(const void *)b), 1);
    return _mm512_cvtph_ps(h);
}

/* Q4_K / Q5_K float step with the scale folded into the weight side.
 * The scalar reference computes t = (float)(I·s)·d − (float)(m·X)·dm with
 * I = Σ q·x (unscaled), s, m the 6-bit scale and min, X = Σ x of the block,
 * d, dm the f16 super-block scales. Here: t = (float)I·(d·s) − (float)X·(dm·m).
 * Same bits: |I·s| ≤ 31·32·127·63 < 2^24 and |m·X| ≤ 63·32·127 < 2^24, so
 * both integer products convert exactly; d·s and dm·m are exact in f32 (an
 * f16 significand of 11 bits times a 6-bit integer); so each product is the
 * one rounding of the same real number. (A zero's sign may differ, but acc
 * starts at +0 and x + (−0) = x for every x ≠ −0, so the sum never sees it;
 * NaN d / dm propagate as NaN either way.) This takes the scale multiply
 * (vpmulld) and the min pair multiply (vpmaddwd) out of the per-row work:
 * d·s and dm·m are per column and block, shared by all the rows of a tile,
 * and (float)X per row and block is converted once per chunk. */

#define AINL static inline __attribute__((always_inline)) AVX512

/* The weight side of one block of a 16-column tile, shared by its rows. */
typedef struct {
    __m512i wl[4], wh[4]; /* quants of groups g (elements 4g..4g+3) and g + 4 */
    __m512i s_lo, s_hi;   /* Q6_K: int32 scales of elements 0-15 / 16-31 */
    __m512 ds, dmm;       /* affine: d·s, dm·m; Q6_K: d; Q4_0: the block's d */
} blk16_t;

/* Block j of chunks c0 / c1 (d, dm: the chunk's f16 scales as floats). */
AINL void blk16_load(enum qk_kind kind, const uint8_t *c0, const uint8_t *c1, int j, __m512 d, __m512 dm, blk16_t *o)
{
    const size_t OQH = 1024, OSC = qk_off_sc(kind), OMM = qk_off_mm(kind), OD = qk_off_d(kind);
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512i qh0 = _mm512_setzero_si512(), qh1 = qh0;
    o->s_lo = o->s_hi = _mm512_setzero_si512();
    o->ds = d;
    o->dmm = dm;
    if (kind == QK_Q6K) {
        o->s_lo = _mm512_cvtepi8_epi32(ld2x64(c0 + OSC + 16 * j, c1 + OSC + 16 * j));
        o->s_hi = _mm512_cvtepi8_epi32(ld2x64(c0 + OSC + 16 * j + 8, c1 + OSC + 16 * j + 8));
        qh0 = ld2x256(c0 + OQH + 64 * j, c1 + OQH + 64 * j);
        qh1 = ld2x256(c0 + OQH + 64 * j + 32, c1 + OQH + 64 * j + 32);
    } else if (kind == QK_Q40) {
        o->ds = ld2h(c0 + OD + 16 * j, c1 + OD + 16 * j);
    } else {
        /* d·s and dm·m of the 16 columns (exact, see above) */
        o->ds = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(ld2x64(c0 + OSC + 8 * j, c1 + OSC + 8 * j))), d);
        o->dmm =
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(ld2x64(c0 + OMM + 8 * j, c1 + OMM + 8 * j))), dm);
        if (kind == QK_Q5K)
            qh0 = ld2x256(c0 + OQH + 32 * j, c1 + OQH + 32 * j);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        __m512i v = ld2x256(c0 + 128 * j + 32 * g, c1 + 128 * j + 32 * g);
        __m512i lo = _mm512_and_si512(v, m4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        if (kind == QK_Q5K) {
            const __m512i b4 = _mm512_set1_epi8(16);
            __m512i hl = _mm512_slli_epi16(qh0, 4 - g);
            __m512i hh = g == 0 ? qh0 : _mm512_srli_epi16(qh0, g);
            lo = _mm512_or_si512(lo, _mm512_and_si512(hl, b4));
            hi = _mm512_or_si512(hi, _mm512_and_si512(hh, b4));
        }
        if (kind == QK_Q6K) {
            const __m512i b45 = _mm512_set1_epi8(0x30);
            __m512i hl = g < 3 ? _mm512_slli_epi16(qh0, 4 - 2 * g) : _mm512_srli_epi16(qh0, 2);
            __m512i hh = g < 3 ? _mm512_slli_epi16(qh1, 4 - 2 * g) : _mm512_srli_epi16(qh1, 2);
            lo = _mm512_or_si512(lo, _mm512_and_si512(hl, b45));
            hi = _mm512_or_si512(hi, _mm512_and_si512(hh, b45));
        }
        o->wl[g] = lo;
        o->wh[g] = hi;
    }
}

/* acc + one X row's block xb (scale dx, Σx as float xsf; xm: Q4_0 −8·Σx,
 * Q6_K −32·Σx of each half) against the block w: the two halves in two
 * dpbusd chains, then the float step of the scalar kernel (affine kinds:
 * with the folded scales). Q4_0 and Q6_K start the chains at minus the
 * offset term instead of subtracting it after: the scalar I − M, with
 * M = Σ 8·x (Q4_0) or Σ 32·s·x (Q6_K), is (za − 8X) + zb, respectively
 * s_lo·(za − 32·X_lo) + s_hi·(zb − 32·X_hi), the same int32 (no overflow:
 * |s·(za − 32·X)| ≤ 128·(16·63·127 + 32·16·128) < 2^25), so the bits do not
 * change and the per-row madd and subtract are gone. */
AINL __m512 row16(enum qk_kind kind, const blk16_t *w, const int8_t *xb, float dx, float xsf, const int32_t *xm,
                  __m512 acc)
{
    __m512i za = _mm512_setzero_si512(), zb = za;
    if (kind == QK_Q40) {
        za = _mm512_set1_epi32(xm[0]);
    } else if (kind == QK_Q6K) {
        za = _mm512_set1_epi32(xm[0]);
        zb = _mm512_set1_epi32(xm[1]);
    }
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        int32_t x4l, x4h;
        memcpy(&x4l, xb + 4 * g, 4);
        memcpy(&x4h, xb + 16 + 4 * g, 4);
        za = _mm512_dpbusd_epi32(za, w->wl[g], _mm512_set1_epi32(x4l));
        zb = _mm512_dpbusd_epi32(zb, w->wh[g], _mm512_set1_epi32(x4h));
    }
    __m512 vdx = _mm512_set1_ps(dx);
    if (QK_AFFINE(kind)) {
        __m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(za, zb)), w->ds),
                                 _mm512_mul_ps(_mm512_set1_ps(xsf), w->dmm));
        return _mm512_add_ps(acc, _mm512_mul_ps(vdx, t));
    }
    __m512i I = kind == QK_Q6K ? _mm512_add_epi32(_mm512_mullo_epi32(za, w->s_lo), _mm512_mullo_epi32(zb, w->s_hi))
                               : _mm512_add_epi32(za, zb);
    return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(w->ds, vdx)));
}

/* The chunk's f16 scales: d (all but Q4_0) and dm (affine). */
AINL void chunk_scales(enum qk_kind kind, const uint8_t *c0, const uint8_t *c1, __m512 *d, __m512 *dm)
{
    const size_t OD = qk_off_d(kind);
    *d = *dm = _mm512_setzero_ps();
    if (kind != QK_Q40)
        *d = ld2h(c0 + OD, c1 + OD);
    if (QK_AFFINE(kind))
        *dm = ld2h(c0 + OD + 16, c1 + OD + 16);
}

/* (float) Σx of R rows' 8 blocks from block b0 (affine kinds; nb is then a
 * multiple of 8), from the int16 half sums. */
AINL void xsum8(int R, const int32_t *xs, int64_t nb, int64_t b0, float xsf[RT512][8])
{
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m256i h = _mm256_loadu_si256((const __m256i *)(const void *)(xs + (int64_t)r * nb + b0));
        _mm256_storeu_ps(xsf[r], _mm256_cvtepi32_ps(_mm256_madd_epi16(h, _mm256_set1_epi16(1))));
    }
}

/* The chains' start values of R rows' nj blocks from block b0 (Q4_0:
 * xm[r][j] = −8·(X_lo + X_hi); Q6_K: xm[r][2j + h] = −32·X_h), from the
 * int16 half sums (X_lo in the low half of each int32). Blocks ≥ nj are
 * not read (Q4_0's last chunk may be short). */
AINL void xoff8(enum qk_kind kind, int R, const int32_t *xs, int64_t nb, int64_t b0, int nj, int32_t xm[RT512][16])
{
    const __mmask8 k = (__mmask8)((1u << nj) - 1);
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        __m256i h = _mm256_maskz_loadu_epi32(k, xs + (int64_t)r * nb + b0);
        if (kind == QK_Q40)
            _mm256_storeu_si256((__m256i *)(void *)xm[r], _mm256_madd_epi16(h, _mm256_set1_epi16(-8)));
        else
            _mm512_storeu_si512(xm[r], _mm512_mullo_epi32(_mm512_cvtepi16_epi32(h), _mm512_set1_epi32(-32)));
    }
}

/* R (≤ RT512) rows against the whole panel pair, block by block (each
 * block's weights unpacked once into registers for the R rows). */
AINL void tile16(enum qk_kind kind, int R, const uint8_t *p0, const uint8_t *p1, int64_t nb, const int8_t *xq,
                 int64_t n_in, const float *xd, const int32_t *xs, float out[RT512][16], const uint8_t *next,
                 size_t n_next, bool once)
{
    const size_t CH = qk_chunk_bytes(kind);
    __m512 acc[RT512];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    const int64_t n_chunks = (nb + 7) / 8;
    size_t pf = 0, pf_step = (n_next / (size_t)nb + 63) / 64 * 64;
    pfq_t *pq = pfq_self();
    for (int64_t ch = 0; ch < n_chunks; ch++) {
        pfq_tick_at(pq); /* a LoRA update's queued factor lines, a few a chunk */
        const uint8_t *c0 = p0 + (size_t)ch * CH, *c1 = p1 + (size_t)ch * CH;
        const int nj = nb - 8 * ch < 8 ? (int)(nb - 8 * ch) : 8;
        __m512 d, dm;
        chunk_scales(kind, c0, c1, &d, &dm);
        float xsf[RT512][8] = {{0}};
        int32_t xm[RT512][16];
        if (QK_AFFINE(kind))
            xsum8(R, xs, nb, 8 * ch, xsf);
        else
            xoff8(kind, R, xs, nb, 8 * ch, nj, xm);
        for (int j = 0; j < nj; j++) {
            const int64_t b = 8 * ch + j;
            for (size_t e = pf + pf_step; pf < e && pf < n_next; pf += 64)
                QB_PREFETCH((const char *)next + pf, once);
            blk16_t w;
            blk16_load(kind, c0, c1, j, d, dm, &w);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r] = row16(kind, &w, xq + (int64_t)r * n_in + 32 * b, xd[(int64_t)r * nb + b], xsf[r][j],
                               xm[r] + (kind == QK_Q6K ? 2 * j : j), acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out[r], acc[r]);
}

AINL void run16_kind(enum qk_kind kind, const uint8_t *p0, const uint8_t *p1, int64_t n_in, const int8_t *xq,
                     const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy, int nc,
                     const uint8_t *next, size_t n_next)
{
    const int64_t nb = n_in / 32;
    /* (Unpacking each chunk once into L1 for all the tiles of a larger
     * batch was measured slower: 32 rows Q4_K 244 vs 229 us, Q6_K 273 vs
     * 262; the weight side is not the bottleneck at 8 rows per tile.) */
    for (int r0 = 0; r0 < n_rows; r0 += RT512) {
        const int R = n_rows - r0 < RT512 ? n_rows - r0 : RT512;
        float out[RT512][16];
        const int8_t *xq0 = xq + (int64_t)r0 * n_in;
        const float *xd0 = xd + (int64_t)r0 * nb;
        const int32_t *xs0 = xs + (int64_t)r0 * nb;
        const size_t nn = r0 == 0 ? n_next : 0;
#define T16(n) tile16(kind, n, p0, p1, nb, xq0, n_in, xd0, xs0, out, next, nn, n_rows <= RT512)
        switch (R) {
        case 8: T16(8); break;
        case 7: T16(7); break;
        case 6: T16(6); break;
        case 5: T16(5); break;
        case 4: T16(4); break;
        case 3: T16(3); break;
        case 2: T16(2); break;
        default: T16(1); break;
        }
#undef T16
        for (int r = 0; r < R; r++)
            memcpy(y + (int64_t)(r0 + r) * ldy, out[r], (size_t)nc * sizeof(float));
    }
}

static AVX512 void run_avx512vnni(enum qk_kind k, const uint8_t *p0, const uint8_t *p1, int64_t n_in,
                                  const int8_t *xq, const float *xd, const int32_t *xs, int n_rows, float *y,
                                  int64_t ldy, int nc, const uint8_t *next, size_t n_next)
{
    switch (k) {
    case QK_Q40: run16_kind(QK_Q40, p0, p1, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    case QK_Q4K: run16_kind(QK_Q4K, p0, p1, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    case QK_Q5K: run16_kind(QK_Q5K, p0, p1, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    case QK_Q6K: run16_kind(QK_Q6K, p0, p1, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    }
}

/* ---- wide tiles (qkpack.h, "wide tiles") ---------------------------------------- */

#define WV 4 /* vectors (panel pairs, 16 columns each) of a wide unit */
#define WR 3 /* X rows per wide tile */
_Static_assert(2 * WV == QKPACK_WIDE_PANELS, "a unit is WV panel pairs");
#define WQ_BYTES 2048 /* quants of one block of a unit: 8 groups × WV × 64 */
#define WS_BYTES 512  /* its scales: 2 vectors × WV × 64 */
_Static_assert(WQ_BYTES == 8 * WV * 64 && WS_BYTES == 2 * WV * 64 && WQ_BYTES + WS_BYTES == QKPACK_WIDE_BLOCK_BYTES,
               "the scratch layout of wide_unpack");

/* The panel kind of a type the wide tiles take (not Q6_K: qkpack.h). */
static bool wide_kind_of(uint32_t type, enum qk_kind *k) { return kind_of(type, k) && *k != QK_Q6K; }

/* Scratch of a range of n blocks from b0: the quants of block b0 + i, group
 * k (elements 4k..4k+3; k < 4 the low nibbles of the packing's group k,
 * k ≥ 4 the high ones of group k - 4), vector v at byte (8i + k)·256 + 64v:
 * lane c holds column 16v + c's 4 quants, one per byte, as blk16_load makes
 * them. Then, from byte 2048·n, each block's scales, 512 bytes: 16-lane
 * vectors at (4s + v)·64, s = 0: d·s (Q4_K / Q5_K) or the block's d (Q4_0);
 * s = 1: dm·m (Q4_K / Q5_K). (Q6_K is not taken: qkpack.h.) */
static AVX512 void wide_unpack(enum qk_kind kind, const uint8_t *panel, size_t pstride, int64_t b0, int64_t b1,
                               uint8_t *scr)
{
    const size_t CH = qk_chunk_bytes(kind);
    uint8_t *sp = scr + (size_t)(b1 - b0) * WQ_BYTES;
    for (int v = 0; v < WV; v++) {
        const uint8_t *p0 = panel + (size_t)(2 * v) * pstride, *p1 = p0 + pstride;
        int64_t ch_at = -1;
        __m512 d = _mm512_setzero_ps(), dm = d;
        for (int64_t b = b0; b < b1; b++) {
            const int64_t ch = b / 8;
            const uint8_t *c0 = p0 + (size_t)ch * CH, *c1 = p1 + (size_t)ch * CH;
            if (ch != ch_at) {
                chunk_scales(kind, c0, c1, &d, &dm);
                ch_at = ch;
            }
            blk16_t w;
            blk16_load(kind, c0, c1, (int)(b % 8), d, dm, &w);
            uint8_t *q = scr + (size_t)(b - b0) * WQ_BYTES + 64 * (size_t)v;
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                _mm512_store_si512((void *)(q + 256 * g), w.wl[g]);
                _mm512_store_si512((void *)(q + 256 * (g + 4)), w.wh[g]);
            }
            uint8_t *ps = sp + (size_t)(b - b0) * WS_BYTES + 64 * (size_t)v;
            _mm512_store_ps((void *)ps, w.ds);
            if (QK_AFFINE(kind))
                _mm512_store_ps((void *)(ps + 256), w.dmm);
        }
    }
}

/* R rows (xq, xd, xs at the tile's first row) over the n unpacked blocks
 * from b0: acc starts at zero (first range) or at what y holds (a later
 * range), and ends in y's nc valid columns. Per lane, the integers and float
 * step of row16. */
AINL void wide_tile(enum qk_kind kind, int R, const uint8_t *scr, int64_t b0, int64_t n, const int8_t *xq,
                    int64_t n_in, const float *xd, const int32_t *xs, int64_t nb, float *y, int64_t ldy, int nc,
                    bool first)
{
    __m512 acc[WR][WV];
    __mmask16 mk[WV];
#pragma GCC unroll 4
    for (int v = 0; v < WV; v++) {
        const int l = nc - 16 * v;
        mk[v] = l >= 16 ? (__mmask16)0xffff : l <= 0 ? (__mmask16)0 : (__mmask16)((1u << l) - 1);
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < WV; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mk[v], y + (int64_t)r * ldy + 16 * v);
    const uint8_t *sp = scr + (size_t)n * WQ_BYTES;
    pfq_t *pq = pfq_self();
    for (int64_t i = 0; i < n; i++) {
        const int64_t b = b0 + i;
        pfq_tick_at(pq); /* a LoRA update's queued factor lines, a few a block */
        __m512i za[WR][WV];
        float xsf[WR];
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            const int32_t h = xs[(int64_t)r * nb + b];
            const int32_t xlo = (int16_t)(uint16_t)((uint32_t)h & 0xffffu), xhi = (int16_t)(uint16_t)((uint32_t)h >> 16);
            /* one chain over both halves (an exact int32, as row16's two):
             * Q4_0 starts at −8·Σx (row16), the affine kinds at 0 and take
             * (float)Σx in the float step */
            const __m512i s0 = _mm512_set1_epi32(kind == QK_Q40 ? -8 * (xlo + xhi) : 0);
            xsf[r] = (float)(xlo + xhi);
#pragma GCC unroll 4
            for (int v = 0; v < WV; v++)
                za[r][v] = s0;
        }
        const uint8_t *wq = scr + (size_t)i * WQ_BYTES;
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i w[WV];
#pragma GCC unroll 4
            for (int v = 0; v < WV; v++) {
                w[v] = _mm512_load_si512((const void *)(wq + 256 * k + 64 * v));
                /* opaque: kept in a register for the R rows, not
                 * reloaded from memory by each vpdpbusd's operand */
                __asm__("" : "+v"(w[v]));
            }
#pragma GCC unroll 3
            for (int r = 0; r < R; r++) {
                int32_t x4;
                memcpy(&x4, xq + (int64_t)r * n_in + 32 * b + 4 * k, 4);
                const __m512i xb = _mm512_set1_epi32(x4);
#pragma GCC unroll 4
                for (int v = 0; v < WV; v++)
                    za[r][v] = _mm512_dpbusd_epi32(za[r][v], w[v], xb);
            }
        }
        const uint8_t *ps = sp + (size_t)i * WS_BYTES;
#pragma GCC unroll 4
        for (int v = 0; v < WV; v++) {
            const __m512 p0 = _mm512_load_ps((const void *)(ps + 64 * v));
#pragma GCC unroll 3
            for (int r = 0; r < R; r++) {
                const __m512 vdx = _mm512_set1_ps(xd[(int64_t)r * nb + b]);
                if (QK_AFFINE(kind)) {
                    const __m512 dmm = _mm512_load_ps((const void *)(ps + 256 + 64 * v));
                    __m512 t = _mm512_sub_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(za[r][v]), p0),
                                             _mm512_mul_ps(_mm512_set1_ps(xsf[r]), dmm));
                    acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(vdx, t));
                } else {
                    acc[r][v] =
                        _mm512_add_ps(acc[r][v], _mm512_mul_ps(_mm512_cvtepi32_ps(za[r][v]), _mm512_mul_ps(p0, vdx)));
                }
            }
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < WV; v++)
            _mm512_mask_storeu_ps(y + (int64_t)r * ldy + 16 * v, mk[v], acc[r][v]);
}

AINL void wide_run_kind(enum qk_kind kind, const uint8_t *panel, size_t pstride, int64_t n_in, const int8_t *xq,
                        const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy, int nc, uint8_t *scr,
                        int64_t kblocks)
{
    const int64_t nb = n_in / 32;
    /* ranges of equal size (a multiple of 8 blocks, so each starts a chunk) */
    const int64_t n_rng = (nb + kblocks - 1) / kblocks, per = ((nb + n_rng - 1) / n_rng + 7) / 8 * 8;
    for (int64_t b0 = 0; b0 < nb; b0 += per) {
        const int64_t b1 = b0 + per < nb ? b0 + per : nb;
        wide_unpack(kind, panel, pstride, b0, b1, scr);
        for (int r0 = 0; r0 < n_rows; r0 += WR) {
            const int R = n_rows - r0 < WR ? n_rows - r0 : WR;
#define WT(n)                                                                                                    \
    wide_tile(kind, n, scr, b0, b1 - b0, xq + (int64_t)r0 * n_in, n_in, xd + (int64_t)r0 * nb,                  \
              xs + (int64_t)r0 * nb, nb, y + (int64_t)r0 * ldy, ldy, nc, b0 == 0)
            _Static_assert(WR == 3, "one case per row count");
            if (R == 3)
                WT(3);
            else if (R == 2)
                WT(2);
            else
                WT(1);
#undef WT
        }
    }
}

static AVX512 void wide_run(enum qk_kind k, const uint8_t *panel, size_t pstride, int64_t n_in, const int8_t *xq,
                            const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy, int nc,
                            uint8_t *scr, int64_t kblocks)
{
    switch (k) {
    case QK_Q40: wide_run_kind(QK_Q40, panel, pstride, n_in, xq, xd, xs, n_rows, y, ldy, nc, scr, kblocks); break;
    case QK_Q4K: wide_run_kind(QK_Q4K, panel, pstride, n_in, xq, xd, xs, n_rows, y, ldy, nc, scr, kblocks); break;
    case QK_Q5K: wide_run_kind(QK_Q5K, panel, pstride, n_in, xq, xd, xs, n_rows, y, ldy, nc, scr, kblocks); break;
    case QK_Q6K: break; /* not taken (qkpack_wide_supported) */
    }
}

bool qkpack_wide_supported(uint32_t type)
{
    enum qk_kind k;
    return wide_kind_of(type, &k);
}

bool qkpack_wide_pays(uint32_t type, int n_rows, int64_t n_in)
{
    enum qk_kind k;
    if (!wide_kind_of(type, &k))
        return false;
    if (k == QK_Q5K && n_rows >= QKPACK_WIDE_Q5K_ROWS)
        return true;
    return (int64_t)n_rows * n_in >= QKPACK_WIDE_X_BYTES;
}

void qkpack_wide_run(uint32_t type, const uint8_t *panel, size_t pstride, int64_t n_in, const int8_t *xq,
                     const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy, int nc, uint8_t *scratch,
                     int64_t kblocks)
{
    enum qk_kind k;
    if (!wide_kind_of(type, &k) || kblocks < 8 || kblocks % 8 != 0)
        return;
    wide_run(k, panel, pstride, n_in, xq, xd, xs, n_rows, y, ldy, nc, scratch, kblocks);
}

void qkpack_panel_run(qkpack_isa_t isa, uint32_t type, const uint8_t *panel, const uint8_t *panel2, int64_t n_in,
                      const int8_t *xq, const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy,
                      int nc, const uint8_t *next, size_t n_next)
{
    enum qk_kind k;
    if (!kind_of(type, &k))
        return;
    if (isa == QKPACK_AVX512VNNI) {
        /* a lone panel runs as the pair (panel, panel), columns 8-15 dropped */
        run_avx512vnni(k, panel, panel2 ? panel2 : panel, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next);
        return;
    }
    for (int h = 0; h < (panel2 ? 2 : 1); h++) {
        const uint8_t *p = h ? panel2 : panel;
        int nch = h ? nc - 8 : nc < 8 ? nc : 8;
        if (isa == QKPACK_AVX2)
            run_avx2(k, p, n_in, xq, xd, xs, n_rows, y + 8 * h, ldy, nch, next, h ? 0 : n_next);
        else
            run_avxvnni(k, p, n_in, xq, xd, xs, n_rows, y + 8 * h, ldy, nch, next, h ? 0 : n_next);
    }
}
