/* quant.c — ggml weight formats to and from float (see quant.h for layouts).
 *
 * Arithmetic is float32 on purpose and in the order ggml uses (scale products
 * first, then times the quant, then minus the min), so dequantized values are
 * bit-identical to ggml's. Build without -ffast-math / FP contraction for
 * that to hold (the Makefile's -std=c11 implies -ffp-contract=off in GCC).
 */
#include "worker/kernels/quant.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "worker/kernels/qblock.h"

#define QK QBLOCK_QK /* elements per Q8_0 / Q4_0 block */

/* ---- scalar conversions -------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float quant_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return sign ? -v : v;
    }
    if (exp == 31)
        return bits_f32(sign | 0x7f800000u | mant << 13);
    return bits_f32(sign | (exp + 112) << 23 | mant << 13);
}

uint16_t quant_fp32_to_fp16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00 | ((x >> 13) & 0x3ff));
    if (x >= 0x477ff000u) /* >= 65520 rounds to +inf (65504 is the largest half) */
        return (uint16_t)(sign | 0x7c00);
    uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
    if (x < 0x38800000u) {
        /* below 2^-14: half subnormal, result = round(value / 2^-24) */
        if (e == 0 && (x & 0x7fffffu) == 0)
            return sign;
        uint32_t shift = 126 - e; /* value/2^-24 = m * 2^(e-126) */
        if (shift > 24)
            return sign;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t h = (e - 112) << 10 | (x & 0x7fffffu) >> 13;
    uint32_t rem = x & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
        h++; /* a carry into the exponent is the correct rounding */
    return (uint16_t)(sign | h);
}

float quant_bf16_to_fp32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t quant_fp32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1)) >> 16);
}

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* ---- dequantizers: one block each ---------------------------------------- */

static void deq_q8_0(const uint8_t *p, float *y)
{
    const qblock_q8_0_t *b = (const qblock_q8_0_t *)p;
    float d = quant_fp16_to_fp32(b->d);
    for (int i = 0; i < QK; i++)
        y[i] = (float)b->qs[i] * d;
}

static void deq_q4_0(const uint8_t *p, float *y)
{
    const qblock_q4_0_t *b = (const qblock_q4_0_t *)p;
    float d = quant_fp16_to_fp32(b->d);
    const uint8_t *qs = b->qs;
    for (int i = 0; i < QK / 2; i++) {
        y[i] = d * (float)((qs[i] & 15) - 8);
        y[i + QK / 2] = d * (float)((qs[i] >> 4) - 8);
    }
}

/* Q4_K (qh == NULL) and Q5_K share everything but the 5th bit. */
static void deq_q45_k(float d, float dmin, const uint8_t *scales, const uint8_t *qh,
                      const uint8_t *qs, float *y)
{
    for (int c = 0; c < 4; c++) {
        for (int half = 0; half < 2; half++) {
            int j = 2 * c + half;
            int sc, m;
            qblock_k_scale_min(scales, j, &sc, &m);
            float dl = d * (float)sc, ml = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                int q = half ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
                if (qh)
                    q |= ((qh[l] >> j) & 1) << 4;
                y[32 * j + l] = dl * (float)q - ml;
            }
        }
    }
}

static void deq_q4_k(const uint8_t *p, float *y)
{
    const qblock_q4_k_t *b = (const qblock_q4_k_t *)p;
    deq_q45_k(quant_fp16_to_fp32(b->d), quant_fp16_to_fp32(b->dmin), b->scales, NULL, b->qs, y);
}

static void deq_q5_k(const uint8_t *p, float *y)
{
    const qblock_q5_k_t *b = (const qblock_q5_k_t *)p;
    deq_q45_k(quant_fp16_to_fp32(b->d), quant_fp16_to_fp32(b->dmin), b->scales, b->qh, b->qs, y);
}

static void deq_q6_k(const uint8_t *p, float *y)
{
    const qblock_q6_k_t *b = (const qblock_q6_k_t *)p;
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    float d = quant_fp16_to_fp32(b->d);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 32; l++) {
                int e = 128 * h + 32 * r + l;
                uint8_t lo = ql[64 * h + l + 32 * (r & 1)];
                int q = (r < 2 ? lo & 15 : lo >> 4) | ((qh[32 * h + l] >> (2 * r)) & 3) << 4;
                y[e] = (d * (float)sc[e / 16]) * (float)(q - 32);
            }
}

/* Row functions of the traits table: n_blocks blocks from src into dst. */
static void deq_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void deq_f16(const void *src, float *dst, int64_t n)
{
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_fp16_to_fp32(rd16(s + 2 * i));
}

static void deq_bf16(const void *src, float *dst, int64_t n)
{
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = quant_bf16_to_fp32(rd16(s + 2 * i));
}

/* A row function over blocks of blk_t (elems each) from a one-block decoder. */
#define DEQ_ROWS(fn, blk_t, elems)                                      \
    static void fn##_rows(const void *src, float *dst, int64_t n)       \
    {                                                                   \
        for (int64_t i = 0; i < n; i++)                                 \
            fn((const uint8_t *)src + (size_t)i * sizeof(blk_t), dst + i * (elems)); \
    }
DEQ_ROWS(deq_q8_0, qblock_q8_0_t, QK)
DEQ_ROWS(deq_q4_0, qblock_q4_0_t, QK)
DEQ_ROWS(deq_q4_k, qblock_q4_k_t, QBLOCK_QKK)
DEQ_ROWS(deq_q5_k, qblock_q5_k_t, QBLOCK_QKK)
DEQ_ROWS(deq_q6_k, qblock_q6_k_t, QBLOCK_QKK)
#undef DEQ_ROWS

/* ---- quantizers ---------------------------------------------------------- */

/* ggml reference Q8_0: d = amax/127 (stored as f16), q = round(x / d) with
 * the unrounded reciprocal, ties away from zero. */
static void q_q8_0(const float *x, uint8_t *p)
{
    qblock_q8_0_t *b = (qblock_q8_0_t *)p;
    float amax = 0;
    for (int i = 0; i < QK; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    b->d = quant_fp32_to_fp16(d);
    for (int i = 0; i < QK; i++) {
        float v = roundf(x[i] * id);
        b->qs[i] = (int8_t)fmaxf(-127.0f, fminf(127.0f, v));
    }
}

/* ggml reference Q4_0: the signed value of largest magnitude maps to -8,
 * d = max / -8, q = trunc(x/d + 8.5) clamped to 15. */
static void q_q4_0(const float *x, uint8_t *p)
{
    qblock_q4_0_t *b = (qblock_q4_0_t *)p;
    float amax = 0, max = 0;
    for (int i = 0; i < QK; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    float d = max / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    b->d = quant_fp32_to_fp16(d);
    for (int i = 0; i < QK / 2; i++) {
        float a = x[i] * id + 8.5f, c = x[i + QK / 2] * id + 8.5f;
        int qa = (int)fmaxf(0.0f, fminf(15.0f, a)), qc = (int)fmaxf(0.0f, fminf(15.0f, c));
        b->qs[i] = (uint8_t)(qa | qc << 4);
    }
}

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Q4_K / Q5_K (nmax = 15 / 31), one pass: each 32-element sub-block gets an
 * affine grid from min(0, min x) to max x; the 8 scales and 8 mins are then
 * quantized to 6 bits against the super-block d / dmin, and the elements are
 * re-quantized against the scales actually stored. */
static void q_q45_k(const float *x, uint8_t *b, int nmax)
{
    float scale[8], min[8], max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        float lo = 0, hi = -INFINITY;
        for (int l = 0; l < 32; l++) {
            lo = fminf(lo, x[32 * j + l]);
            hi = fmaxf(hi, x[32 * j + l]);
        }
        scale[j] = (hi - lo) / (float)nmax;
        min[j] = -lo; /* >= 0: x = scale*q - min */
        max_scale = fmaxf(max_scale, scale[j]);
        max_min = fmaxf(max_min, min[j]);
    }
    uint16_t dh = quant_fp32_to_fp16(max_scale / 63.0f), mh = quant_fp32_to_fp16(max_min / 63.0f);
    float d = quant_fp16_to_fp32(dh), dmin = quant_fp16_to_fp32(mh);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0 ? clampi((int)lrintf(scale[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0 ? clampi((int)lrintf(min[j] / dmin), 0, 63) : 0);
    }
    /* Q4_K is Q5_K without qh: the fields before qh are the same */
    _Static_assert(offsetof(qblock_q4_k_t, qs) == offsetof(qblock_q5_k_t, qh), "Q4_K/Q5_K heads agree");
    qblock_q5_k_t *b5 = (qblock_q5_k_t *)b;
    qblock_q4_k_t *b4 = (qblock_q4_k_t *)b;
    bool q5 = nmax == 31;
    uint8_t *scales = b4->scales, *qh = q5 ? b5->qh : NULL, *qs = q5 ? b5->qs : b4->qs;
    b4->d = dh;
    b4->dmin = mh;
    for (int k = 0; k < 4; k++) {
        scales[k] = (uint8_t)((sc[k] & 63) | (sc[k + 4] >> 4) << 6);
        scales[k + 4] = (uint8_t)((m[k] & 63) | (m[k + 4] >> 4) << 6);
        scales[k + 8] = (uint8_t)((sc[k + 4] & 15) | (m[k + 4] & 15) << 4);
    }
    if (qh)
        memset(qh, 0, 32);
    memset(qs, 0, 128);
    for (int j = 0; j < 8; j++) {
        float dl = d * (float)sc[j], ml = dmin * (float)m[j];
        int c = j / 2, hi = j & 1;
        for (int l = 0; l < 32; l++) {
            int q = dl > 0 ? clampi((int)lrintf((x[32 * j + l] + ml) / dl), 0, nmax) : 0;
            qs[32 * c + l] |= (uint8_t)((q & 15) << (hi ? 4 : 0));
            if (qh)
                qh[l] |= (uint8_t)(((q >> 4) & 1) << j);
        }
    }
}

/* Q6_K, one pass: each 16-element sub-block gets a symmetric scale
 * amax/31, the 16 scales are stored as int8 against d = max scale / 127, and
 * the elements are quantized to -32..31 against the stored scales. */
static void q_q6_k(const float *x, uint8_t *b)
{
    float scale[16], max_scale = 0;
    for (int s = 0; s < 16; s++) {
        float amax = 0;
        for (int l = 0; l < 16; l++)
            amax = fmaxf(amax, fabsf(x[16 * s + l]));
        scale[s] = amax / 31.0f;
        max_scale = fmaxf(max_scale, scale[s]);
    }
    uint16_t dh = quant_fp32_to_fp16(max_scale / 127.0f);
    float d = quant_fp16_to_fp32(dh);
    qblock_q6_k_t *blk = (qblock_q6_k_t *)b;
    uint8_t *ql = blk->ql, *qh = blk->qh;
    int8_t *sc = blk->scales;
    for (int s = 0; s < 16; s++)
        sc[s] = (int8_t)(d > 0 ? clampi((int)lrintf(scale[s] / d), -128, 127) : 0);
    blk->d = dh;
    memset(ql, 0, 128);
    memset(qh, 0, 64);
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < 4; r++)
            for (int l = 0; l < 32; l++) {
                int e = 128 * h + 32 * r + l;
                float ds = d * (float)sc[e / 16];
                int q = ds > 0 ? clampi((int)lrintf(x[e] / ds), -32, 31) + 32 : 32;
                ql[64 * h + l + 32 * (r & 1)] |= (uint8_t)((q & 15) << (r < 2 ? 0 : 4));
                qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * r));
            }
}

static void q_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * 4); }

static void q_f16(const float *src, void *dst, int64_t n)
{
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        wr16(d + 2 * i, quant_fp32_to_fp16(src[i]));
}

static void q_bf16(const float *src, void *dst, int64_t n)
{
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++)
        wr16(d + 2 * i, quant_fp32_to_bf16(src[i]));
}

static void q_q4_k(const float *x, uint8_t *b) { q_q45_k(x, b, 15); }
static void q_q5_k(const float *x, uint8_t *b) { q_q45_k(x, b, 31); }

#define Q_ROWS(fn, blk_t, elems)                                        \
    static void fn##_rows(const float *src, void *dst, int64_t n)       \
    {                                                                   \
        for (int64_t i = 0; i < n; i++)                                 \
            fn(src + i * (elems), (uint8_t *)dst + (size_t)i * sizeof(blk_t)); \
    }
Q_ROWS(q_q8_0, qblock_q8_0_t, QK)
Q_ROWS(q_q4_0, qblock_q4_0_t, QK)
Q_ROWS(q_q4_k, qblock_q4_k_t, QBLOCK_QKK)
Q_ROWS(q_q5_k, qblock_q5_k_t, QBLOCK_QKK)
Q_ROWS(q_q6_k, qblock_q6_k_t, QBLOCK_QKK)
#undef Q_ROWS

/* ---- the traits table ------------------------------------------------------ */

/* One row per type pagoda computes with (quant.h). ROW fills the format
 * columns from ggml_type.h's table and the block struct; the assert below
 * each row ties that struct to ggml_type.h's geometry. */
#define ROW(NAME, blk_t, deq, q, int8_path, pack_path, ftype)                              \
    [GGML_TYPE_##NAME] = {.type = GGML_TYPE_##NAME, .name = #NAME,                          \
                          .block_elems = GGML_##NAME##_BLOCK_ELEMS, .block_bytes = sizeof(blk_t), \
                          .dequantize = deq, .quantize = q, .int8 = int8_path, .packed = pack_path, \
                          .file_type = ftype}
#define ROW_ASSERT(NAME, blk_t, elems)                                                     \
    _Static_assert(sizeof(blk_t) == GGML_##NAME##_BLOCK_BYTES && (elems) == GGML_##NAME##_BLOCK_ELEMS, \
                   #NAME " block struct = ggml_type.h's row")

/* file_type: llama.cpp's general.file_type for a model whose matrices are
 * all this type (F32 0, F16 1, Q4_0 2, Q8_0 7, Q4_K_S 14, Q5_K_S 16, Q6_K 18,
 * BF16 32); pagoda-mkmodel writes it. */
static const quant_traits_t traits[GGML_TYPE_COUNT] = {
    /*  type  block struct     to float        from float    int8 kernels      packed at load    file_type */
    ROW(F32,  float,           deq_f32,        q_f32,        QUANT_INT8_NONE,  QUANT_PACK_NONE,  0),
    ROW(F16,  uint16_t,        deq_f16,        q_f16,        QUANT_INT8_NONE,  QUANT_PACK_NONE,  1),
    ROW(BF16, uint16_t,        deq_bf16,       q_bf16,       QUANT_INT8_NONE,  QUANT_PACK_NONE,  32),
    ROW(Q8_0, qblock_q8_0_t,   deq_q8_0_rows,  q_q8_0_rows,  QUANT_INT8_Q8_0,  QUANT_PACK_Q8_0,  7),
    ROW(Q4_0, qblock_q4_0_t,   deq_q4_0_rows,  q_q4_0_rows,  QUANT_INT8_Q4_0,  QUANT_PACK_Q4_0,  2),
    ROW(Q4_K, qblock_q4_k_t,   deq_q4_k_rows,  q_q4_k_rows,  QUANT_INT8_Q45_K, QUANT_PACK_Q4_K,  14),
    ROW(Q5_K, qblock_q5_k_t,   deq_q5_k_rows,  q_q5_k_rows,  QUANT_INT8_Q45_K, QUANT_PACK_Q5_K,  16),
    ROW(Q6_K, qblock_q6_k_t,   deq_q6_k_rows,  q_q6_k_rows,  QUANT_INT8_Q6_K,  QUANT_PACK_Q6_K,  18),
};
ROW_ASSERT(F32, float, 1);
ROW_ASSERT(F16, uint16_t, 1);
ROW_ASSERT(BF16, uint16_t, 1);
ROW_ASSERT(Q8_0, qblock_q8_0_t, QBLOCK_QK);
ROW_ASSERT(Q4_0, qblock_q4_0_t, QBLOCK_QK);
ROW_ASSERT(Q4_K, qblock_q4_k_t, QBLOCK_QKK);
ROW_ASSERT(Q5_K, qblock_q5_k_t, QBLOCK_QKK);
ROW_ASSERT(Q6_K, qblock_q6_k_t, QBLOCK_QKK);
#undef ROW
#undef ROW_ASSERT

const quant_traits_t *quant_traits(uint32_t type)
{
    return type < GGML_TYPE_COUNT && traits[type].dequantize ? &traits[type] : NULL;
}

const quant_traits_t *quant_traits_at(size_t i)
{
    for (size_t k = 0; k < GGML_TYPE_COUNT; k++)
        if (traits[k].dequantize && i-- == 0)
            return &traits[k];
    return NULL;
}

bool ggml_type_supported(uint32_t type) { return quant_traits(type) != NULL; }

bool quant_can_dequantize(uint32_t type) { return quant_traits(type) != NULL; }

bool quant_can_quantize(uint32_t type) { return quant_traits(type) != NULL; }

size_t quant_row_bytes(uint32_t type, int64_t n)
{
    uint32_t be = ggml_type_block_elems(type);
    if (be == 0 || n < 0 || n % be != 0)
        return 0;
    return (size_t)(n / be) * ggml_type_block_bytes(type);
}

/* Blocks in n elements of row t; -1 when t is NULL or n is negative or not
 * a whole number of blocks. */
static int64_t n_blocks(const quant_traits_t *t, int64_t n)
{
    return t && n >= 0 && n % t->block_elems == 0 ? n / t->block_elems : -1;
}

int quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n)
{
    const quant_traits_t *t = quant_traits(type);
    int64_t nb = n_blocks(t, n);
    if (nb >= 0)
        t->dequantize(src, dst, nb);
    return nb >= 0 ? 0 : -1;
}

int quant_quantize(uint32_t type, const float *src, void *dst, int64_t n)
{
    const quant_traits_t *t = quant_traits(type);
    int64_t nb = n_blocks(t, n);
    if (nb >= 0)
        t->quantize(src, dst, nb);
    return nb >= 0 ? 0 : -1;
}
