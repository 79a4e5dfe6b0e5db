/* qkpack.c — packing and kernels for Q4_0 / Q4_K / Q5_K / Q6_K panels
 * (layout and arithmetic in qkpack.h; the kernel body is qkpack_kern.inc,
 * compiled once per instruction set).
 *
 * No FP contraction may fuse the float step of the kernels (the scalar
 * reference in qgemm.c does a separate multiply and add): GCC's -std=c11
 * implies -ffp-contract=off and the pragma covers clang.
 */
#include "worker/kernels/qkpack.h"

#include <immintrin.h>
#include <string.h>

#include "worker/kernels/qblock.h"
#include "worker/model/gguf.h"

#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

enum qk_kind { QK_Q40, QK_Q4K, QK_Q5K, QK_Q6K };
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

static bool kind_of(uint32_t type, enum qk_kind *k)
{
    switch (type) {
    case GGML_TYPE_Q4_0: *k = QK_Q40; return true;
    case GGML_TYPE_Q4_K: *k = QK_Q4K; return true;
    case GGML_TYPE_Q5_K: *k = QK_Q5K; return true;
    case GGML_TYPE_Q6_K: *k = QK_Q6K; return true;
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

#define QK_ATTR __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define QK_SFX(n) n##_avx512vnni
#define QK_ISA 2
#include "worker/kernels/qkpack_kern.inc"
#undef QK_ATTR
#undef QK_SFX
#undef QK_ISA

void qkpack_panel_run(qkpack_isa_t isa, uint32_t type, const uint8_t *panel, int64_t n_in, const int8_t *xq,
                      const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy, int nc,
                      const uint8_t *next, size_t n_next)
{
    enum qk_kind k;
    if (!kind_of(type, &k))
        return;
    switch (isa) {
    case QKPACK_AVX2: run_avx2(k, panel, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    case QKPACK_AVXVNNI: run_avxvnni(k, panel, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    case QKPACK_AVX512VNNI: run_avx512vnni(k, panel, n_in, xq, xd, xs, n_rows, y, ldy, nc, next, n_next); break;
    }
}
