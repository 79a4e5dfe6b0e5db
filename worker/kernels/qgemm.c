/* qgemm.c — Y = X · Wᵀ with ggml-quantized W, integer dot products (qgemm.h).
 *
 * Data flow of one call (shapes in elements; nb = n_in / 32 blocks):
 *
 *   X (n_rows, n_in) f32 ──quantize──► xq (n_rows, n_in) i8, xd (n_rows, nb) f32
 *                                       xs (n_rows, nb) int16 pair (Σq[0..15], Σq[16..31])
 *   W rows c0..c0+7 ──decode+transpose──► panel (per thread; a packed Q8_0 W,
 *   qgemm.h, is these q arrays already, with f16 scales dh (nb, 8) for d):
 *       q  (nb, 8 groups k, 8 columns c, 4 bytes)  weight 4k+i of column c of
 *          block b at q[256b + 32k + 4c + i]: one 32-byte load = group k of all
 *          8 columns; values are the raw quants (i8 for Q8_0, u8 0..63 otherwise)
 *       sc (nb, 2, 8) int32 = int16 pair (s, s): integer scale of elements
 *          0..15 / 16..31 of the block (Q4_K/Q5_K sc_j, Q6_K its two scales)
 *       mm (nb, 8) int32 = int16 pair: offset/min per 16 elements (Q4_K/Q5_K
 *          m_j, Q6_K 32·scale); Q4_0's offset 8 and Q8_0's 0 are constants
 *       d, dm (nb, 8) f32: the block's float scale and (Q4_K/Q5_K) min scale
 *   for each 4 rows of X × panel: per block b, per column c (one AVX2 lane)
 *       I = Σ_k s_k · Σ_{i<4} q_w[4k+i] · q_x[4k+i]     exact int32
 *       M = m_lo · xs_lo + m_hi · xs_hi                   exact int32
 *     "single scale" kinds (Q8_0, Q4_0, Q6_K, w = d·s·(q − m/s)):
 *       acc = acc + (float)(I − M) · (d · dx)
 *     "affine" kinds (Q4_K, Q5_K, w = d·s·q − dm·m):
 *       acc = acc + dx · ((float)I · d − (float)M · dm)
 *
 * Integer ranges (why nothing saturates or overflows): activations are in
 * [-127, 127]. _mm256_maddubs_epi16 multiplies an unsigned by a signed byte
 * and adds pairs with int16 saturation: Q8_0 uses |w| ≤ 128 against
 * sign(x, w), pairs ≤ 2·128·127 = 32512; the other types have unsigned
 * quants ≤ 63, pairs ≤ 16002. _mm256_madd_epi16 by the scale (|s| ≤ 128) then
 * gives ≤ 4.1e6 per group, ≤ 3.3e7 per block. So the integer part is exact
 * and the float part is a fixed sequence of IEEE operations: the scalar and
 * AVX2 paths give identical bits, whatever the tiling. The file must be built
 * without FP contraction (no FMA fusing): the pragma below covers clang;
 * GCC's -std=c11 implies -ffp-contract=off, and no function here is compiled
 * with the "fma" target, so nothing can be fused anyway.
 */
#include "worker/kernels/qgemm.h"

#include <assert.h>
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/amx_tile.h"
#include "worker/kernels/pfqueue.h"
#include "worker/kernels/qblock.h"
#include "worker/kernels/qkpack.h"
#include "worker/kernels/worksteal.h"
#include "worker/kernels/quant.h"


#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

#define QB 32 /* elements per activation block and per panel block */
#define NC 8  /* output columns per panel = lanes of a 256-bit int32 vector */
#define RT 4  /* X rows per register tile */
#define PANEL_BLOCK_BYTES (256 + 16 * 4 + 8 * 4 + 8 * 4 + 8 * 4)

/* The kernel families, named by the traits table's int8 column (quant.h). */
enum kind { K_Q8_0 = QUANT_INT8_Q8_0, K_Q4_0 = QUANT_INT8_Q4_0, K_Q6_K = QUANT_INT8_Q6_K, K_Q45_K = QUANT_INT8_Q45_K };

struct qgemm_ctx {
    int max_rows;      /* capacity in X rows */
    int64_t max_in;    /* capacity in input elements (multiple of 32, rounded up) */
    int n_threads;     /* OpenMP threads of every call (qgemm_set_threads) */
    int max_threads;   /* panels allocated: omp_get_max_threads() at creation */
    int xq_rows;       /* rows of X quantized in xq (-1: none yet) */
    int64_t xq_in;     /* their length */
    qgemm_isa_t isa;   /* kernels in use (qgemm_set_isa) */
    bool amx_emu;      /* the AMX kernel with emulated tiles (qgemm_set_amx_emulated) */
    int8_t *xq;        /* (max_rows, max_in) quantized X */
    float *xd;         /* (max_rows, max_in/32) X block scales */
    int32_t *xs;       /* (max_rows, max_in/32) int16 pairs of block half sums */
    int32_t *xc;       /* (max_rows, max_in/32) −128 · Σq of the block: the start
                        * of the VNNI kernels' accumulators, one broadcast load */
    uint8_t *panels;   /* n_threads panels of panel_bytes each */
    size_t x_bytes;    /* xq, xd, xs and xc: one xhuge_zalloc block of this size */
    ws_t *ws;          /* the panel loop's per-thread ranges (worksteal.h), max_threads */
    size_t panel_bytes;
    uint8_t *wide;     /* max_threads scratches of wide_bytes: the wide K-quant
                        * tiles' unpacked unit (qkpack_wide_run) */
    size_t wide_bytes;
    int64_t wide_kb;   /* blocks per range of those tiles (qgemm_set_wide_kblocks) */
    bool wide_always;  /* those tiles whenever they can run (qgemm_set_wide_kblocks) */
};

/* One thread's decoded W panel (layout in the file comment). */
typedef struct {
    uint8_t *q;  /* (nb, 8, 8, 4) */
    int32_t *sc; /* (nb, 2, 8) */
    int32_t *mm; /* (nb, 8) */
    float *d;    /* (nb, 8) */
    float *dm;   /* (nb, 8) */
    const uint16_t *dh; /* (nb, 8) f16 block scales of a packed Q8_0 panel
                         * (then d is unused); NULL for a filled panel */
    uint8_t *wide;      /* the thread's wide K-quant scratch (qgemm_ctx.wide) */
} panel_t;

/* The quantized X rows of the current call. */
typedef struct {
    const int8_t *q;  /* (n_rows, n_in) */
    const float *d;   /* (n_rows, nb) */
    const int32_t *s; /* (n_rows, nb) */
    int64_t n_in, nb;
    const int32_t *c; /* (n_rows, nb) −128·Σq per block (qgemm_ctx.xc) */
} qx_t;

/* Header of a packed W (qgemm_pack; layout in qgemm.h), PACK_HDR_BYTES
 * bytes before the first panel so the panels stay 64-byte aligned. */
#define PACK_MAGIC 0x4b504751u /* "QGPK" */
#define PACK_HDR_BYTES 64
typedef struct {
    uint32_t magic;       /* PACK_MAGIC */
    uint32_t type;        /* ggml type of the source W (Q8_0, or a qkpack type) */
    int64_t n_out, n_in;  /* shape of the source W */
    uint64_t panel_bytes; /* stride of the panels, a multiple of 64 */
    uint64_t total;       /* bytes of the whole buffer, header included */
} pack_hdr_t;
_Static_assert(sizeof(pack_hdr_t) <= PACK_HDR_BYTES, "pack header fits");

static bool cpu_has_avx2(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && cpu_has_f16c();
}

bool qgemm_avx2_available(void) { return cpu_has_avx2(); }

bool qgemm_isa_available(qgemm_isa_t isa)
{
    switch (isa) {
    case QGEMM_ISA_AUTO:
    case QGEMM_ISA_SCALAR: return true;
    case QGEMM_ISA_AVX2: return cpu_has_avx2();
    case QGEMM_ISA_AVXVNNI: return cpu_has_avx2() && cpu_has_avx_vnni();
    case QGEMM_ISA_AVX512VNNI: return cpu_has_avx2() && cpu_has_avx512_vnni();
    case QGEMM_ISA_AMX: return cpu_has_avx2() && cpu_has_avx512_vnni() && cpu_has_amx_int8();
    }
    return false;
}

/* The ISA of QGEMM_ISA_AUTO: PAGODA_ISA when set to a name the CPU runs,
 * else the best the CPU has. Read once (0 = not yet). */
static _Atomic int g_isa_default;

static qgemm_isa_t isa_best(void)
{
    /* QGEMM_ISA_AMX is opt-in (PAGODA_ISA=amx) until it is measured on AMX
     * hardware: bit-exact in emulation, speed unknown (docs/FORWARD.md). */
    static const qgemm_isa_t order[] = {QGEMM_ISA_AVX512VNNI, QGEMM_ISA_AVXVNNI, QGEMM_ISA_AVX2};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (qgemm_isa_available(order[i]))
            return order[i];
    return QGEMM_ISA_SCALAR;
}

qgemm_isa_t qgemm_isa_default(void)
{
    int v = atomic_load_explicit(&g_isa_default, memory_order_relaxed);
    if (v != 0)
        return (qgemm_isa_t)v;
    qgemm_isa_t isa = isa_best();
    const char *env = getenv("PAGODA_ISA");
    if (env && *env && strcmp(env, "auto") != 0) {
        qgemm_isa_t want = QGEMM_ISA_AUTO;
        for (int i = QGEMM_ISA_SCALAR; i <= QGEMM_ISA_AMX; i++)
            if (strcmp(env, qgemm_isa_name((qgemm_isa_t)i)) == 0)
                want = (qgemm_isa_t)i;
        if (want == QGEMM_ISA_AUTO)
            fprintf(stderr, "pagoda: PAGODA_ISA=%s unknown (scalar, avx2, avxvnni, avx512vnni, amx, auto); using %s\n",
                    env, qgemm_isa_name(isa));
        else if (want == QGEMM_ISA_AMX && !qgemm_isa_available(want))
            fprintf(stderr, "pagoda: PAGODA_ISA=amx: no usable AMX on this machine (%s); using %s\n",
                    cpu_has_avx512_vnni() ? cpu_amx_why_not() : "no AVX-512 VNNI", qgemm_isa_name(isa));
        else if (!qgemm_isa_available(want))
            fprintf(stderr, "pagoda: PAGODA_ISA=%s: this CPU lacks it; using %s\n", env, qgemm_isa_name(isa));
        else
            isa = want;
    }
    atomic_store_explicit(&g_isa_default, (int)isa, memory_order_relaxed);
    return isa;
}

bool qgemm_supported(uint32_t type)
{
    const quant_traits_t *t = quant_traits(type);
    return t && t->int8 != QUANT_INT8_NONE;
}

/* the type's kernel family (qgemm_supported(type)) */
static enum kind kind_of(uint32_t type) { return (enum kind)quant_traits(type)->int8; }

qgemm_ctx_t *qgemm_ctx_new(int max_rows, int64_t max_in)
{
    if (max_rows <= 0 || max_in <= 0)
        return NULL;
    qgemm_ctx_t *c = xcalloc(1, sizeof *c);
    c->max_rows = max_rows;
    c->max_in = (max_in + QB - 1) / QB * QB;
    c->n_threads = omp_get_max_threads();
    if (c->n_threads < 1)
        c->n_threads = 1;
    c->max_threads = c->n_threads;
    c->xq_rows = -1;
    c->isa = qgemm_isa_default();
    size_t nbm = (size_t)(c->max_in / QB);
    /* X's scratch is one fresh zeroed mapping, none of it touched here: a
     * call maps (the kernel zeroes) only the pages of the rows it quantizes,
     * so a worker's start does not pay for max_rows of X (2.9 MB for 512
     * rows of 5632, ~2 ms of faults and memset) */
    const size_t bq = ((size_t)max_rows * (size_t)c->max_in + 63) / 64 * 64,
                 bb = ((size_t)max_rows * nbm * sizeof(float) + 63) / 64 * 64;
    c->x_bytes = bq + 3 * bb;
    uint8_t *xb = xhuge_zalloc(c->x_bytes);
    c->xq = (int8_t *)xb;
    c->xd = (float *)(void *)(xb + bq);
    c->xs = (int32_t *)(void *)(xb + bq + bb);
    c->xc = (int32_t *)(void *)(xb + bq + 2 * bb);
    /* rounded to 64 bytes so every panel starts cache-line aligned */
    c->panel_bytes = (nbm * PANEL_BLOCK_BYTES + 63) / 64 * 64;
    c->panels = xaligned_alloc(c->panel_bytes * (size_t)c->n_threads);
    c->ws = ws_new(QGEMM_MAX_THREADS);
    memset(c->panels, 0, c->panel_bytes * (size_t)c->n_threads);
    /* the wide tiles' scratch: never touched here (a decode-only worker
     * never maps it) */
    c->wide_kb = ((int64_t)nbm + 7) / 8 * 8;
    if (c->wide_kb > QKPACK_WIDE_KBLOCKS)
        c->wide_kb = QKPACK_WIDE_KBLOCKS;
    c->wide_bytes = (size_t)c->wide_kb * QKPACK_WIDE_BLOCK_BYTES;
    c->wide = xaligned_alloc(c->wide_bytes * (size_t)c->n_threads);
    return c;
}

void qgemm_ctx_free(qgemm_ctx_t **pc)
{
    if (!pc || !*pc)
        return;
    qgemm_ctx_t *c = *pc;
    xhuge_zfree(c->xq, c->x_bytes);
    free(c->panels);
    free(c->wide);
    ws_free(&c->ws);
    free(c);
    *pc = NULL;
}

int qgemm_set_threads(qgemm_ctx_t *c, int n_threads)
{
    if (n_threads < 1 || n_threads > QGEMM_MAX_THREADS)
        return -1;
    if (n_threads > c->max_threads) {
        free(c->panels);
        c->panels = xaligned_alloc(c->panel_bytes * (size_t)n_threads);
        memset(c->panels, 0, c->panel_bytes * (size_t)n_threads);
        free(c->wide);
        c->wide = xaligned_alloc(c->wide_bytes * (size_t)n_threads);
        c->max_threads = n_threads;
    }
    c->n_threads = n_threads;
    return 0;
}

int qgemm_set_isa(qgemm_ctx_t *c, qgemm_isa_t isa)
{
    if (isa == QGEMM_ISA_AUTO) {
        c->isa = qgemm_isa_default();
        return 0;
    }
    if (isa < QGEMM_ISA_SCALAR || isa > QGEMM_ISA_AMX || !qgemm_isa_available(isa))
        return -1;
    c->isa = isa;
    return 0;
}

qgemm_isa_t qgemm_get_isa(const qgemm_ctx_t *c) { return c->isa; }

void qgemm_set_amx_emulated(qgemm_ctx_t *c, bool on) { c->amx_emu = on; }

int qgemm_set_wide_kblocks(qgemm_ctx_t *c, int64_t kblocks, bool always)
{
    if (!c || kblocks < 8 || kblocks % 8 != 0 || (size_t)kblocks * QKPACK_WIDE_BLOCK_BYTES > c->wide_bytes)
        return -1;
    c->wide_kb = kblocks;
    c->wide_always = always;
    return 0;
}

const char *qgemm_isa_name(qgemm_isa_t isa)
{
    switch (isa) {
    case QGEMM_ISA_AUTO: return "auto";
    case QGEMM_ISA_SCALAR: return "scalar";
    case QGEMM_ISA_AVX2: return "avx2";
    case QGEMM_ISA_AVXVNNI: return "avxvnni";
    case QGEMM_ISA_AVX512VNNI: return "avx512vnni";
    case QGEMM_ISA_AMX: return "amx";
    }
    return "unknown";
}

static panel_t panel_at(const qgemm_ctx_t *c, int i_thread)
{
    uint8_t *base = c->panels + c->panel_bytes * (size_t)i_thread;
    size_t nbm = (size_t)(c->max_in / QB);
    panel_t p;
    p.q = base;
    p.sc = (int32_t *)(base + nbm * 256);
    p.mm = p.sc + nbm * 16;
    p.d = (float *)(p.mm + nbm * 8);
    p.dm = p.d + nbm * 8;
    p.dh = NULL;
    p.wide = c->wide + c->wide_bytes * (size_t)i_thread;
    return p;
}

/* f16 scale bits of 32-block b of a Q8_0 or Q4_0 row */
static uint16_t blk_d16(enum kind kind, const uint8_t *row, int64_t b)
{
    if (kind == K_Q8_0)
        return ((const qblock_q8_0_t *)row)[b].d;
    return ((const qblock_q4_0_t *)row)[b].d;
}
static int32_t pair16(int lo, int hi) { return (int32_t)((uint32_t)(uint16_t)lo | (uint32_t)(uint16_t)hi << 16); }

/* ---- X quantization ------------------------------------------------------- */

/* Block of 32 floats → q[32] in [-127, 127], scale *d, half sums *s.
 * d = amax / 127 (f32), q = round-to-nearest-even(x / d). A block with a
 * non-finite value gets d = NaN and q = 0, so NaN reaches every output of the
 * row; d = 0 (all zero, or amax below ~1.8e-43) gives q = 0. */
static void xquant_block_scalar(const float *x, int8_t *q, float *d, int32_t *s)
{
    float amax = 0;
    bool finite = true;
    for (int i = 0; i < QB; i++) {
        float a = fabsf(x[i]);
        finite &= a <= FLT_MAX;
        amax = a > amax ? a : amax;
    }
    float dd = finite ? amax / 127.0f : NAN;
    /* x · (1/d), not x / d: one reciprocal per block instead of 32 divisions
     * (llama.cpp quantizes activations the same way); the AVX2 path too */
    float id = finite && dd != 0.0f ? 1.0f / dd : 0.0f;
    int sum[2] = {0, 0};
    for (int i = 0; i < QB; i++) {
        int v = 0;
        if (finite && dd != 0.0f) {
            v = (int)nearbyintf(x[i] * id);
            v = v < -127 ? -127 : v > 127 ? 127 : v;
        }
        q[i] = (int8_t)v;
        sum[i / 16] += v;
    }
    *d = dd;
    *s = pair16(sum[0], sum[1]);
}

/* ---- scalar panel decode --------------------------------------------------- */

/* Raw quants of 32-block b (of the row) into v[32]; for K-quants b counts
 * 32-blocks across super-blocks. */
static void decode_block_scalar(enum kind kind, uint32_t type, const uint8_t *row, int64_t b,
                                uint8_t *v)
{
    int64_t sb = b / 8;
    int j = (int)(b % 8);
    switch (kind) {
    case K_Q8_0:
        memcpy(v, ((const qblock_q8_0_t *)row)[b].qs, 32);
        return;
    case K_Q4_0: {
        const uint8_t *qs = ((const qblock_q4_0_t *)row)[b].qs;
        for (int i = 0; i < 16; i++) {
            v[i] = qs[i] & 15;
            v[i + 16] = qs[i] >> 4;
        }
        return;
    }
    case K_Q45_K: {
        bool q5 = type == GGML_TYPE_Q5_K;
        const qblock_q5_k_t *b5 = q5 ? (const qblock_q5_k_t *)row + sb : NULL;
        const uint8_t *qh = q5 ? b5->qh : NULL, *qs = q5 ? b5->qs : ((const qblock_q4_k_t *)row)[sb].qs;
        for (int l = 0; l < 32; l++) {
            uint8_t x = qs[32 * (j / 2) + l];
            v[l] = (j & 1) ? x >> 4 : x & 15;
            if (q5)
                v[l] |= (uint8_t)(((qh[l] >> j) & 1) << 4);
        }
        return;
    }
    case K_Q6_K: {
        const qblock_q6_k_t *blk = (const qblock_q6_k_t *)row + sb;
        int h = j / 4, r = j % 4;
        const uint8_t *ql = blk->ql + 64 * h + 32 * (r & 1), *qh = blk->qh + 32 * h;
        for (int l = 0; l < 32; l++) {
            int lo = r < 2 ? ql[l] & 15 : ql[l] >> 4;
            v[l] = (uint8_t)(lo | ((qh[l] >> (2 * r)) & 3) << 4);
        }
        return;
    }
    }
}

/* Panel meta data of K-quant column c from its row: sc, mm, d, dm for all
 * nb 32-blocks. Shared by both ISAs (the cost is per 256 weights). */
static inline __attribute__((always_inline)) void
fill_meta_k_with(enum kind kind, uint32_t type, const uint8_t *row, int64_t nb, int c, panel_t *p,
                 float (*h2f)(uint16_t))
{
    const size_t bb = ggml_type_block_bytes(type);
    for (int64_t sb = 0; sb < nb / 8; sb++) {
        const uint8_t *blk = row + (size_t)sb * bb;
        if (kind == K_Q6_K) {
            const qblock_q6_k_t *b6 = (const qblock_q6_k_t *)blk;
            const int8_t *scales = b6->scales;
            float d = h2f(b6->d);
            for (int j = 0; j < 8; j++) {
                int64_t b = sb * 8 + j;
                int s0 = scales[2 * j], s1 = scales[2 * j + 1];
                p->sc[16 * b + c] = pair16(s0, s0);
                p->sc[16 * b + 8 + c] = pair16(s1, s1);
                p->mm[8 * b + c] = pair16(32 * s0, 32 * s1);
                p->d[8 * b + c] = d;
                p->dm[8 * b + c] = 0;
            }
        } else {
            /* Q5_K's head (d, dmin, scales) is Q4_K's */
            const qblock_q4_k_t *b4 = (const qblock_q4_k_t *)blk;
            float d = h2f(b4->d), dmin = h2f(b4->dmin);
            for (int j = 0; j < 8; j++) {
                int64_t b = sb * 8 + j;
                int sc, m;
                qblock_k_scale_min(b4->scales, j, &sc, &m);
                p->sc[16 * b + c] = p->sc[16 * b + 8 + c] = pair16(sc, sc);
                p->mm[8 * b + c] = pair16(m, m);
                p->d[8 * b + c] = d;
                p->dm[8 * b + c] = dmin;
            }
        }
    }
}

static void fill_meta_k(enum kind kind, uint32_t type, const uint8_t *row, int64_t nb, int c,
                        panel_t *p)
{
    fill_meta_k_with(kind, type, row, nb, c, p, quant_fp16_to_fp32);
}

/* rows[c] (c < 8) point at the 8 W rows of the panel (missing columns repeat
 * a valid row; their outputs are dropped). */
static void fill_panel_scalar(enum kind kind, uint32_t type, const uint8_t *const rows[NC],
                              int64_t nb, panel_t *p)
{
    uint8_t v[32];
    for (int c = 0; c < NC; c++) {
        for (int64_t b = 0; b < nb; b++) {
            decode_block_scalar(kind, type, rows[c], b, v);
            for (int k = 0; k < 8; k++)
                memcpy(p->q + 256 * b + 32 * k + 4 * c, v + 4 * k, 4);
        }
        if (kind == K_Q8_0 || kind == K_Q4_0) {
            for (int64_t b = 0; b < nb; b++)
                p->d[8 * b + c] = quant_fp16_to_fp32(blk_d16(kind, rows[c], b));
        } else {
            fill_meta_k(kind, type, rows[c], nb, c, p);
        }
    }
}

/* ---- scalar kernel ----------------------------------------------------------- */

/* out[r][c] (r < R, c < 8) = row r0+r of X against the panel. */
static void kern_scalar(enum kind kind, const panel_t *p, const qx_t *x, int r0, int R,
                        float out[RT][NC])
{
    for (int r = 0; r < R; r++) {
        const int8_t *xq = x->q + (int64_t)(r0 + r) * x->n_in;
        const float *xd = x->d + (int64_t)(r0 + r) * x->nb;
        const int32_t *xs = x->s + (int64_t)(r0 + r) * x->nb;
        for (int c = 0; c < NC; c++) {
            float acc = 0;
            for (int64_t b = 0; b < x->nb; b++) {
                const uint8_t *wq = p->q + 256 * b;
                const int8_t *xb = xq + QB * b;
                int32_t I = 0;
                for (int k = 0; k < 8; k++) {
                    int32_t g = 0;
                    for (int i = 0; i < 4; i++) {
                        uint8_t u = wq[32 * k + 4 * c + i];
                        int w = kind == K_Q8_0 ? (int)(int8_t)u : (int)u;
                        g += w * xb[4 * k + i];
                    }
                    int32_t s = 1;
                    if (kind == K_Q6_K || kind == K_Q45_K)
                        s = (int16_t)(p->sc[16 * b + (k < 4 ? 0 : 8) + c] & 0xffff);
                    I += s * g;
                }
                float dx = xd[b];
                float d = p->d[8 * b + c];
                if (kind == K_Q8_0) {
                    acc = acc + (float)I * (d * dx);
                    continue;
                }
                int xlo = (int16_t)(xs[b] & 0xffff), xhi = (int16_t)((uint32_t)xs[b] >> 16);
                int mlo = 8, mhi = 8;
                if (kind != K_Q4_0) {
                    mlo = (int16_t)(p->mm[8 * b + c] & 0xffff);
                    mhi = (int16_t)((uint32_t)p->mm[8 * b + c] >> 16);
                }
                int32_t M = mlo * xlo + mhi * xhi;
                if (kind == K_Q45_K)
                    acc = acc + dx * ((float)I * d - (float)M * p->dm[8 * b + c]);
                else
                    acc = acc + (float)(I - M) * (d * dx);
            }
            out[r][c] = acc;
        }
    }
}

/* ---- AVX2 -------------------------------------------------------------------- */

#define AVX2 __attribute__((target("avx2,f16c")))
#define AVX2_INLINE static inline __attribute__((always_inline, target("avx2,f16c")))

/* Inlined into xquant_row_avx2's loop over a row's blocks (the 4-vector
 * loops unrolled): as a call per block, with the vectors through the stack
 * and a vzeroupper per call, the two dependent divisions of one block
 * barely overlapped the next block's work. */
AVX2_INLINE void xquant_block_avx2(const float *x, int8_t *q, float *d, int32_t *s)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 v[4], a[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        v[i] = _mm256_loadu_ps(x + 8 * i);
        a[i] = _mm256_and_ps(v[i], absmask);
    }
    /* non-finite: |x| > FLT_MAX or unordered */
    __m256 big = _mm256_set1_ps(FLT_MAX);
    __m256 nf = _mm256_or_ps(_mm256_or_ps(_mm256_cmp_ps(a[0], big, _CMP_NLE_UQ),
                                          _mm256_cmp_ps(a[1], big, _CMP_NLE_UQ)),
                             _mm256_or_ps(_mm256_cmp_ps(a[2], big, _CMP_NLE_UQ),
                                          _mm256_cmp_ps(a[3], big, _CMP_NLE_UQ)));
    if (_mm256_movemask_ps(nf)) {
        memset(q, 0, QB);
        *d = NAN;
        *s = 0;
        return;
    }
    __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float amax = _mm_cvtss_f32(m4);
    float dd = amax / 127.0f;
    *d = dd;
    if (dd == 0.0f) {
        memset(q, 0, QB);
        *s = 0;
        return;
    }
    __m256 idv = _mm256_set1_ps(1.0f / dd);
    __m256i iv[4];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        iv[i] = _mm256_cvtps_epi32(
            _mm256_round_ps(_mm256_mul_ps(v[i], idv), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    /* |x·(1/d)| ≤ 127 up to rounding, so the saturating packs equal the clamp */
    __m256i p16 = _mm256_packs_epi32(iv[0], iv[1]);
    __m256i p16b = _mm256_packs_epi32(iv[2], iv[3]);
    __m256i p8 = _mm256_packs_epi16(p16, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    p8 = _mm256_max_epi8(p8, _mm256_set1_epi8(-127));
    _mm256_storeu_si256((__m256i *)q, p8);
    /* half sums from the clamped bytes, as the scalar path */
    __m256i w16 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(p8));
    __m256i w16b = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(p8, 1));
    __m256i s32 = _mm256_madd_epi16(w16, _mm256_set1_epi16(1));
    __m256i s32b = _mm256_madd_epi16(w16b, _mm256_set1_epi16(1));
    /* lane-wise sums: hadd gives [a0+a1, a2+a3, b0+b1, b2+b3 | ...] */
    __m256i h = _mm256_hadd_epi32(s32, s32b);
    h = _mm256_hadd_epi32(h, h);
    /* h lanes: [lo(a) lo(b) .. | hi(a) hi(b) ..] (128-bit halves) */
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    *s = pair16(_mm_cvtsi128_si32(t), _mm_extract_epi32(t, 1));
}

AVX2_INLINE float rdh_f16c(uint16_t h) { return _cvtsh_ss(h); }

AVX2 static void fill_meta_k_avx2(enum kind kind, uint32_t type, const uint8_t *row, int64_t nb,
                                  int c, panel_t *p)
{
    if (kind == K_Q6_K)
        fill_meta_k_with(K_Q6_K, type, row, nb, c, p, rdh_f16c);
    else
        fill_meta_k_with(K_Q45_K, type, row, nb, c, p, rdh_f16c);
}

/* Raw quants of 32-block b of a row, as decode_block_scalar. */
AVX2_INLINE __m256i decode_block_avx2(enum kind kind, bool q5, const uint8_t *row, int64_t b)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    int64_t sb = b / 8;
    int j = (int)(b % 8);
    switch (kind) {
    case K_Q8_0:
        return _mm256_loadu_si256((const __m256i *)(const void *)((const qblock_q8_0_t *)row)[b].qs);
    case K_Q4_0: {
        __m128i qs = _mm_loadu_si128((const __m128i *)(const void *)((const qblock_q4_0_t *)row)[b].qs);
        __m128i lo = _mm_and_si128(qs, _mm_set1_epi8(15));
        __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), _mm_set1_epi8(15));
        return _mm256_set_m128i(hi, lo);
    }
    case K_Q45_K: {
        const qblock_q5_k_t *b5 = q5 ? (const qblock_q5_k_t *)row + sb : NULL;
        const uint8_t *qs = q5 ? b5->qs : ((const qblock_q4_k_t *)row)[sb].qs;
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(qs + 32 * (j / 2)));
        __m256i v = (j & 1) ? _mm256_and_si256(_mm256_srli_epi16(x, 4), m4) : _mm256_and_si256(x, m4);
        if (q5) {
            __m256i bit = _mm256_set1_epi8((char)(1 << j));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)b5->qh);
            __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
            v = _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(16)));
        }
        return v;
    }
    case K_Q6_K: {
        const qblock_q6_k_t *blk = (const qblock_q6_k_t *)row + sb;
        int h = j / 4, r = j % 4;
        __m256i l = _mm256_loadu_si256((const __m256i *)(const void *)(blk->ql + 64 * h + 32 * (r & 1)));
        __m256i lo = r < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
        __m256i qh = _mm256_loadu_si256((const __m256i *)(const void *)(blk->qh + 32 * h));
        /* 16-bit shifts: bits crossing from the neighbour byte are masked off */
        __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * r)),
                                      _mm256_set1_epi8(3));
        return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
    }
    }
    return _mm256_setzero_si256();
}

/* 8×8 transpose of 32-bit elements: in r[c] lane k → out[k] lane c. */
AVX2_INLINE void transpose8(__m256i r[8])
{
    __m256i t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm256_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm256_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm256_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm256_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int i = 0; i < 4; i++) {
        r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
        r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
    }
}

/* Also prefetches the n_next bytes at next (the following panel's rows,
 * contiguous in W) spread over the blocks, so the next fill finds them in
 * cache: 8 interleaved short row streams defeat the hardware prefetcher. */
AVX2_INLINE void fill_panel_avx2_kind(enum kind kind, uint32_t type, const uint8_t *const rows[NC],
                                      int64_t nb, panel_t *p, const uint8_t *next, size_t n_next)
{
    bool q5 = type == GGML_TYPE_Q5_K;
    size_t pf = 0, pf_step = (n_next / (size_t)nb + 63) / 64 * 64;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t e = pf + pf_step; pf < e && pf < n_next; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        __m256i v[8];
        for (int c = 0; c < NC; c++)
            v[c] = decode_block_avx2(kind, q5, rows[c], b);
        transpose8(v);
        for (int k = 0; k < 8; k++)
            _mm256_store_si256((__m256i *)(p->q + 256 * b + 32 * k), v[k]);
        if (kind == K_Q8_0 || kind == K_Q4_0) {
            __m128i h = _mm_setr_epi16(
                (short)blk_d16(kind, rows[0], b), (short)blk_d16(kind, rows[1], b),
                (short)blk_d16(kind, rows[2], b), (short)blk_d16(kind, rows[3], b),
                (short)blk_d16(kind, rows[4], b), (short)blk_d16(kind, rows[5], b),
                (short)blk_d16(kind, rows[6], b), (short)blk_d16(kind, rows[7], b));
            _mm256_store_ps(p->d + 8 * b, _mm256_cvtph_ps(h));
        }
    }
    if (kind == K_Q6_K || kind == K_Q45_K)
        for (int c = 0; c < NC; c++)
            fill_meta_k_avx2(kind, type, rows[c], nb, c, p);
}

AVX2 static void fill_panel_avx2(enum kind kind, uint32_t type, const uint8_t *const rows[NC],
                                 int64_t nb, panel_t *p, const uint8_t *next, size_t n_next)
{
    switch (kind) {
    case K_Q8_0: fill_panel_avx2_kind(K_Q8_0, type, rows, nb, p, next, n_next); break;
    case K_Q4_0: fill_panel_avx2_kind(K_Q4_0, type, rows, nb, p, next, n_next); break;
    case K_Q6_K: fill_panel_avx2_kind(K_Q6_K, type, rows, nb, p, next, n_next); break;
    case K_Q45_K: fill_panel_avx2_kind(K_Q45_K, type, rows, nb, p, next, n_next); break;
    }
}

/* R (1..4) rows of X from r0 against the panel; kind and R are constants
 * after inlining, so the r- and k-loops unroll and acc stays in registers. */
AVX2_INLINE void kern_avx2_kr(enum kind kind, int R, bool half, const panel_t *p, const qx_t *x, int r0,
                              float out[RT][NC], const uint8_t *next, size_t n_next, bool once)
{
    const __m256i ones = _mm256_set1_epi16(1), eight = _mm256_set1_epi16(8);
    const int8_t *xq[RT];
    const float *xd[RT];
    const int32_t *xs[RT];
    __m256 acc[RT];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        xq[r] = x->q + (int64_t)(r0 + r) * x->n_in;
        xd[r] = x->d + (int64_t)(r0 + r) * x->nb;
        xs[r] = x->s + (int64_t)(r0 + r) * x->nb;
        acc[r] = _mm256_setzero_ps();
    }
    /* packed panels: prefetch the next panel (n_next bytes at next) spread
     * over the blocks, as the fill does for W rows; without it a 1-row
     * product from DRAM ran at ~15 GB/s instead of ~23 */
    size_t pf = 0, pf_step = half ? (n_next / (size_t)x->nb + 63) / 64 * 64 : 0;
    for (int64_t b = 0; b < x->nb; b++) {
        if (half)
            for (size_t e = pf + pf_step; pf < e && pf < n_next; pf += 64)
                QB_PREFETCH((const char *)next + pf, once);
        const uint8_t *wq = p->q + 256 * b;
        __m256i sclo = ones, schi = ones;
        if (kind == K_Q6_K || kind == K_Q45_K) {
            sclo = _mm256_load_si256((const __m256i *)(p->sc + 16 * b));
            schi = _mm256_load_si256((const __m256i *)(p->sc + 16 * b + 8));
        }
        __m256i ia[RT];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            ia[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m256i w = _mm256_load_si256((const __m256i *)(wq + 32 * k));
            __m256i aw = kind == K_Q8_0 ? _mm256_abs_epi8(w) : w;
            __m256i sc = k < 4 ? sclo : schi;
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                int32_t x4;
                memcpy(&x4, xq[r] + QB * b + 4 * k, 4);
                __m256i xb = _mm256_set1_epi32(x4);
                __m256i prod = kind == K_Q8_0 ? _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xb, w))
                                              : _mm256_maddubs_epi16(w, xb);
                ia[r] = _mm256_add_epi32(ia[r], _mm256_madd_epi16(prod, sc));
                /* keeps GCC from reassociating the int32 sums into trees of
                 * temporaries, which spills registers at R = 4 */
                __asm__("" : "+x"(ia[r]));
            }
        }
        /* a packed panel keeps the f16 scales of the file: the conversion
         * gives the float fill_panel_avx2 would have stored */
        __m256 d = half ? _mm256_cvtph_ps(_mm_load_si128((const __m128i *)(p->dh + 8 * b)))
                        : _mm256_load_ps(p->d + 8 * b);
        __m256i mm = eight;
        __m256 dm = _mm256_setzero_ps();
        if (kind == K_Q6_K || kind == K_Q45_K)
            mm = _mm256_load_si256((const __m256i *)(p->mm + 8 * b));
        if (kind == K_Q45_K)
            dm = _mm256_load_ps(p->dm + 8 * b);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256 dx = _mm256_set1_ps(xd[r][b]);
            if (kind == K_Q8_0) {
                acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(ia[r]), _mm256_mul_ps(d, dx)));
                continue;
            }
            __m256i M = _mm256_madd_epi16(mm, _mm256_set1_epi32(xs[r][b]));
            if (kind == K_Q45_K) {
                __m256 t = _mm256_sub_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(ia[r]), d),
                                         _mm256_mul_ps(_mm256_cvtepi32_ps(M), dm));
                acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(dx, t));
            } else {
                __m256i I = _mm256_sub_epi32(ia[r], M);
                acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(d, dx)));
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        _mm256_storeu_ps(out[r], acc[r]);
}

#define KERN_AVX2(NAME, KIND)                                                                   \
    AVX2 static void NAME(const panel_t *p, const qx_t *x, int r0, int R, float out[RT][NC])   \
    {                                                                                          \
        switch (R) {                                                                           \
        case 4: kern_avx2_kr(KIND, 4, false, p, x, r0, out, NULL, 0, false); break;                   \
        case 3: kern_avx2_kr(KIND, 3, false, p, x, r0, out, NULL, 0, false); break;                   \
        case 2: kern_avx2_kr(KIND, 2, false, p, x, r0, out, NULL, 0, false); break;                   \
        default: kern_avx2_kr(KIND, 1, false, p, x, r0, out, NULL, 0, false); break;                  \
        }                                                                                      \
    }
KERN_AVX2(kern_avx2_q8_0, K_Q8_0)
KERN_AVX2(kern_avx2_q4_0, K_Q4_0)
KERN_AVX2(kern_avx2_q6_k, K_Q6_K)
KERN_AVX2(kern_avx2_q45_k, K_Q45_K)

/* A packed Q8_0 panel (f16 scales read in place); prefetches n_next bytes
 * at next meanwhile. */
AVX2 static void kern_avx2_q8_0_packed(const panel_t *p, const qx_t *x, int r0, int R, float out[RT][NC],
                                       const uint8_t *next, size_t n_next, bool once)
{
    switch (R) {
    case 4: kern_avx2_kr(K_Q8_0, 4, true, p, x, r0, out, next, n_next, once); break;
    case 3: kern_avx2_kr(K_Q8_0, 3, true, p, x, r0, out, next, n_next, once); break;
    case 2: kern_avx2_kr(K_Q8_0, 2, true, p, x, r0, out, next, n_next, once); break;
    default: kern_avx2_kr(K_Q8_0, 1, true, p, x, r0, out, next, n_next, once); break;
    }
}

/* ---- VNNI kernels for packed Q8_0 panels ------------------------------------
 *
 * vpdpbusd multiplies 4 unsigned bytes by 4 signed bytes and adds the four
 * products to an int32 lane, without saturation. Q8_0 weights and
 * activations are both signed, so the weight is biased: u = w + 128
 * (w XOR 0x80, in 0..255), and per block and X row
 *     Σ u·x = Σ w·x + 128·Σx,   Σx = the block's two half sums (xs),
 * so the accumulator starts at −128·Σx (kept per block in xc by the X
 * quantization) and ends at exactly the I of the
 * scalar kernel (|Σ u·x| ≤ 32·255·127 < 2^31: no wrap). The float part is
 * the scalar kernel's acc + (float)I · (d · dx), lane by lane, so every
 * path gives the same bits. One instruction per 4 products and row, where
 * AVX2 needs sign, maddubs, madd and add; the XOR is shared by the rows.
 * Each row keeps two integer chains (even and odd groups k, added at the
 * end of the block, exact) so the vpdpbusd latency is hidden. */

#define VNNI_CHAINS 2

static inline int32_t xsum(int32_t s) { return (int32_t)(int16_t)(s & 0xffff) + (int16_t)((uint32_t)s >> 16); }

/* One source, two widths (qgemm_vnni.inc): kern_vnni256_q8_0_packed
 * (AVX-VNNI, one panel, RT rows per tile) and kern_avx512_q8_0_packed
 * (AVX-512: two packed panels side by side in one 512-bit register, lanes
 * 0..7 = columns of panel ip, 8..15 = panel ip + 1, up to RT512 X rows per
 * tile: 32 vector registers hold RT512 · (VNNI_CHAINS + 1) accumulators). */
#define RT512 8
#define NC512 16

#define QV_BITS 256
#define QV_RT RT
#define QV_ATTR __attribute__((target("avx2,f16c,avxvnni")))
#define QV_NAME(n) kern_vnni256_##n
#include "worker/kernels/qgemm_vnni.inc"
#undef QV_BITS
#undef QV_RT
#undef QV_ATTR
#undef QV_NAME

#define QV_BITS 512
#define QV_RT RT512
#define QV_ATTR __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))
#define QV_NAME(n) kern_avx512_##n
#include "worker/kernels/qgemm_vnni.inc"
#undef QV_BITS
#undef QV_RT
#undef QV_ATTR
#undef QV_NAME

/* ---- AVX-512 VNNI wide tiles: many X rows against 8 packed Q8_0 panels ----
 *
 * The prefill case (n_rows ≥ WIDE_MIN_ROWS): a register tile of up to
 * WIDE_R X rows × WIDE_V vectors of 16 columns (8 panels, 64 output
 * columns). Per group k of a block the WIDE_V weight vectors are loaded
 * (two panels side by side, biased by the XOR) and each row's activation
 * dword is broadcast once and fed to WIDE_V vpdpbusd, where the 8-row ×
 * 16-column kernel above broadcasts once per vpdpbusd. Measured on Zen 5
 * (loaded machine, GOPS per CPU second, 2 ops per multiply-add): a loop of
 * the integer part alone ran ~600 as 12 rows × 1 vector and ~850-900 as
 * 3 × 4, the rate of 12 chains of vpdpbusd alone (~870); the kernel at
 * the 1.1B shapes with 512 rows ~300 before, ~450-500 as 3 × 4 (4 × 3 and
 * 6 × 2 measured the same within the noise), ~680 with its float step
 * left out (that step, 4 operations per 8 vpdpbusd, is the scalar
 * kernel's and stays).
 * Registers: WIDE_R · WIDE_V int32 chains (one per row and vector: 12
 * independent chains hide the latency), as many float accumulators, the
 * WIDE_V weight vectors, the bias and the broadcast. The arithmetic per
 * lane is the scalar kernel's (exact int32 I starting at −128·Σx, then
 * acc + (float)I · (d · dx)), so the bits are the same. */
#define WIDE_R 3
#define WIDE_V 4
#define WIDE_PANELS (2 * WIDE_V)
#define WIDE_NC (WIDE_PANELS * NC)
_Static_assert(WIDE_PANELS == QKPACK_WIDE_PANELS, "the wide Q8_0 and K-quant units are the same columns");
/* From this many X rows a packed Q8_0 W on AVX-512 runs in units of
 * WIDE_PANELS panels with the wide kernel; fewer rows (decode, small
 * batches) keep the 16-column kernel, whose prefetch suits a W read once. */
#define WIDE_MIN_ROWS 16
#define AVX512_ATTR __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")))

/* R (1..WIDE_R) rows from r0 against panels q[0..7] (f16 scales dh[0..7]);
 * out[r][16 v + c] = column c of panel pair v. */
static inline __attribute__((always_inline)) AVX512_ATTR void
wide_kr(int R, const uint8_t *const q[WIDE_PANELS], const uint16_t *const dh[WIDE_PANELS], const qx_t *x, int r0,
        float out[WIDE_R][WIDE_NC])
{
    const __m512i bias = _mm512_set1_epi8((char)0x80);
    const int64_t n_in = x->n_in, nb = x->nb;
    const int8_t *xq = x->q + (int64_t)r0 * n_in;
    const float *xd = x->d + (int64_t)r0 * nb;
    const int32_t *xc = x->c + (int64_t)r0 * nb;
    __m512 acc[WIDE_R][WIDE_V] = {{{0}}};
    pfq_t *pq = pfq_self();
    for (int64_t b = 0; b < nb; b++) {
        pfq_tick_at(pq); /* a LoRA update's queued factor lines, a few a block */
        __m512i ia[WIDE_R][WIDE_V];
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            const __m512i c = _mm512_set1_epi32(xc[r * nb + b]); /* −128·Σx */
#pragma GCC unroll 4
            for (int v = 0; v < WIDE_V; v++)
                ia[r][v] = c;
        }
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) {
            __m512i u[WIDE_V];
#pragma GCC unroll 4
            for (int v = 0; v < WIDE_V; v++)
                u[v] = _mm512_xor_si512(
                    _mm512_inserti64x4(
                        _mm512_castsi256_si512(_mm256_load_si256((const __m256i *)(q[2 * v] + 256 * b + 32 * k))),
                        _mm256_load_si256((const __m256i *)(q[2 * v + 1] + 256 * b + 32 * k)), 1),
                    bias);
#pragma GCC unroll 3
            for (int r = 0; r < R; r++) {
                int32_t x4;
                memcpy(&x4, xq + r * n_in + QB * b + 4 * k, 4);
                const __m512i xb = _mm512_set1_epi32(x4);
#pragma GCC unroll 4
                for (int v = 0; v < WIDE_V; v++)
                    ia[r][v] = _mm512_dpbusd_epi32(ia[r][v], u[v], xb);
            }
        }
#pragma GCC unroll 4
        for (int v = 0; v < WIDE_V; v++) {
            const __m512 d = _mm512_cvtph_ps(_mm256_inserti128_si256(
                _mm256_castsi128_si256(_mm_load_si128((const __m128i *)(dh[2 * v] + 8 * b))),
                _mm_load_si128((const __m128i *)(dh[2 * v + 1] + 8 * b)), 1));
#pragma GCC unroll 3
            for (int r = 0; r < R; r++)
                acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_mul_ps(_mm512_cvtepi32_ps(ia[r][v]),
                                                                   _mm512_mul_ps(d, _mm512_set1_ps(xd[r * nb + b]))));
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < WIDE_V; v++)
            _mm512_storeu_ps(out[r] + 16 * v, acc[r][v]);
}

AVX512_ATTR static void kern_avx512_q8_0_wide(const uint8_t *const q[WIDE_PANELS], const uint16_t *const dh[WIDE_PANELS],
                                              const qx_t *x, int r0, int R, float out[WIDE_R][WIDE_NC])
{
    _Static_assert(WIDE_R == 3, "one case per row count");
    switch (R) {
    case 3: wide_kr(3, q, dh, x, r0, out); break;
    case 2: wide_kr(2, q, dh, x, r0, out); break;
    default: wide_kr(1, q, dh, x, r0, out); break;
    }
}

/* Direct path for a few X rows (Q8_0 and Q4_0): no panel. Each W row's
 * block is decoded in element order and multiplied against the X block; the
 * 8 columns' int32 partial vectors are then reduced with a horizontal-add
 * tree into one vector of exact per-column block sums, the same integers I
 * the panel kernel builds, finished with the same float operations, so the
 * result is bit-identical to the panel path. Transposing a panel costs about
 * as much as the products of 8 rows; below that the tree is cheaper. */
#define RD 4 /* X rows per pass of the direct path */
/* Up to these n_rows the direct path beats the panel (measured on Zen 3,
 * 2048×768: Q8_0 1 row 63 vs 184 us, 8 rows 324 vs 366 us, 12 rows equal;
 * Q4_0 4 rows 188 vs 241 us, 5 rows equal). */
#define DIRECT_MAX_Q8_0 8
#define DIRECT_MAX_Q4_0 4

/* int32 partial sums (8 lanes over the elements) of the W block of column c
 * times each X row's block. */
AVX2_INLINE void direct_col(enum kind kind, int R, const uint8_t *row, int64_t b, const __m256i xv[RD],
                            __m256i part[RD])
{
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i w = decode_block_avx2(kind, false, row, b);
    __m256i aw = kind == K_Q8_0 ? _mm256_abs_epi8(w) : w;
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        __m256i prod = kind == K_Q8_0 ? _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv[r], w))
                                      : _mm256_maddubs_epi16(w, xv[r]);
        part[r] = _mm256_madd_epi16(prod, ones);
    }
}

/* Horizontal-add tree, interleaved with the products so few vectors are
 * live: h(c, c+1) = hadd(part c, part c+1), q = hadd(h01, h23) holds
 * [Σlo c0..c3 | Σhi c0..c3]; the final add of the two 128-bit halves gives
 * lane c = Σ of all 8 lanes of column c. */
AVX2_INLINE void direct_avx2_kr(enum kind kind, int R, const uint8_t *const rows[NC], const qx_t *x,
                                float out[RT][NC], const uint8_t *next, size_t n_next)
{
    const __m256i eight = _mm256_set1_epi16(8);
    __m256 acc[RD];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        acc[r] = _mm256_setzero_ps();
    /* prefetch the next panel's rows (contiguous) spread over the blocks:
     * 8 interleaved 1-KiB row streams are too short for the hardware
     * prefetcher (1-row decode ran at ~10 GB/s from DRAM without this) */
    size_t pf = 0, pf_step = (n_next / (size_t)x->nb + 63) / 64 * 64;
    for (int64_t b = 0; b < x->nb; b++) {
        for (size_t e = pf + pf_step; pf < e && pf < n_next; pf += 64)
            _mm_prefetch((const char *)next + pf, _MM_HINT_T0);
        __m256i xv[RD], q[2][RD];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            xv[r] = _mm256_loadu_si256((const __m256i *)(x->q + r * x->n_in + QB * b));
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            __m256i h[2][RD];
#pragma GCC unroll 2
            for (int pair = 0; pair < 2; pair++) {
                __m256i p0[RD], p1[RD];
                int c = 4 * half + 2 * pair;
                direct_col(kind, R, rows[c], b, xv, p0);
                direct_col(kind, R, rows[c + 1], b, xv, p1);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++)
                    h[pair][r] = _mm256_hadd_epi32(p0[r], p1[r]);
            }
#pragma GCC unroll 4
            for (int r = 0; r < R; r++)
                q[half][r] = _mm256_hadd_epi32(h[0][r], h[1][r]);
        }
        __m128i hd = _mm_setr_epi16((short)blk_d16(kind, rows[0], b), (short)blk_d16(kind, rows[1], b),
                                    (short)blk_d16(kind, rows[2], b), (short)blk_d16(kind, rows[3], b),
                                    (short)blk_d16(kind, rows[4], b), (short)blk_d16(kind, rows[5], b),
                                    (short)blk_d16(kind, rows[6], b), (short)blk_d16(kind, rows[7], b));
        __m256 d = _mm256_cvtph_ps(hd);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m256i I = _mm256_add_epi32(_mm256_permute2x128_si256(q[0][r], q[1][r], 0x20),
                                         _mm256_permute2x128_si256(q[0][r], q[1][r], 0x31));
            if (kind == K_Q4_0)
                I = _mm256_sub_epi32(I, _mm256_madd_epi16(eight, _mm256_set1_epi32(x->s[r * x->nb + b])));
            __m256 dx = _mm256_set1_ps(x->d[r * x->nb + b]);
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(d, dx)));
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < R; r++)
        _mm256_storeu_ps(out[r], acc[r]);
}

/* rows 0..R-1 of x (R ≤ RD) against the 8 W rows */
AVX2 static void direct_avx2(enum kind kind, int R, const uint8_t *const rows[NC], const qx_t *x,
                             float out[RT][NC], const uint8_t *next, size_t n_next)
{
#define DIRECT_R(K)                                                                \
    switch (R) {                                                                   \
    case 1: direct_avx2_kr(K, 1, rows, x, out, next, n_next); break;               \
    case 2: direct_avx2_kr(K, 2, rows, x, out, next, n_next); break;               \
    case 3: direct_avx2_kr(K, 3, rows, x, out, next, n_next); break;               \
    default: direct_avx2_kr(K, 4, rows, x, out, next, n_next); break;              \
    }
    if (kind == K_Q8_0)
        DIRECT_R(K_Q8_0)
    else
        DIRECT_R(K_Q4_0)
#undef DIRECT_R
}

/* ---- driver ------------------------------------------------------------------- */

/* One matrix of a call, with what the panel loop needs. */
typedef struct {
    enum kind kind;
    uint32_t type;
    const uint8_t *w;
    int64_t n_out;
    float *y;
    size_t rb;            /* bytes per W row */
    const uint8_t *packed;/* first packed panel (AVX2 only), else NULL */
    size_t pstride;       /* bytes from one packed panel to the next */
    bool direct;          /* small-batch AVX2 path, no panel */
    int ppu;              /* panels per work unit: for packed W on AVX-512
                           * WIDE_PANELS (≥ WIDE_MIN_ROWS rows: the wide
                           * kernels) or 2 (one 16-column kernel), else 1 */
    int64_t wide_kb;      /* qgemm_ctx.wide_kb */
    qgemm_isa_t isa;      /* the context's ISA (AVX512VNNI for AMX: every
                           * path but the AMX tiles runs its kernels) */
    int amx;              /* AMX tile kernel for 16-row groups: 0 none, 1 the
                           * instructions, 2 emulated (qgemm_amx.inc) */
    void (*kern)(const panel_t *, const qx_t *, int, int, float[RT][NC]);
} qmat_t;

/* X rows quantized per call below this many elements run on the calling
 * thread before the parallel region: a split would cost one more barrier
 * than the quantization itself (768 elements take ~0.3 us). */
#define XQUANT_PAR_MIN 16384

/* One row's nb blocks: quants q, scales d, half sums s, and xc = −128·Σq
 * per block (the VNNI kernels' accumulator start). */
AVX2 static void xquant_row_avx2(const float *x, int8_t *q, float *d, int32_t *s, int32_t *xc, int64_t nb)
{
    for (int64_t b = 0; b < nb; b++) {
        xquant_block_avx2(x + QB * b, q + QB * b, d + b, s + b);
        xc[b] = -128 * xsum(s[b]);
    }
}

static void xquant_rows(qgemm_ctx_t *c, const float *x, int r0, int r1, int64_t n_in, int64_t nb, bool avx2)
{
    if (avx2) {
        for (int r = r0; r < r1; r++)
            xquant_row_avx2(x + (int64_t)r * n_in, c->xq + (int64_t)r * n_in, c->xd + (int64_t)r * nb,
                            c->xs + (int64_t)r * nb, c->xc + (int64_t)r * nb, nb);
        return;
    }
    for (int r = r0; r < r1; r++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xr = x + (int64_t)r * n_in + QB * b;
            int8_t *q = c->xq + (int64_t)r * n_in + QB * b;
            float *d = c->xd + (int64_t)r * nb + b;
            int32_t *s = c->xs + (int64_t)r * nb + b;
            int32_t *xc = c->xc + (int64_t)r * nb + b;
            xquant_block_scalar(xr, q, d, s);
            *xc = -128 * xsum(*s);
        }
}

/* A tile row into Y: nc (≤ NC) floats. The full-panel case is a fixed-size
 * copy the compiler inlines; a library memcpy call per (panel, row) cost
 * ~1.5% of a 32-row decode step. */
static inline void store_cols(float *dst, const float *src, int nc)
{
    if (nc == NC)
        memcpy(dst, src, NC * sizeof(float));
    else
        memcpy(dst, src, (size_t)nc * sizeof(float));
}

/* The W rows of the panel at column c0 (nc ≤ 8 of them; missing columns
 * repeat the first) and those of the next panel, clipped to W (*next,
 * *n_next bytes: prefetched while this one runs). */
static void panel_rows(const qmat_t *m, int64_t c0, int nc, const uint8_t *rows[NC], const uint8_t **next,
                       size_t *n_next)
{
    for (int k = 0; k < NC; k++)
        rows[k] = m->w + (size_t)(c0 + (k < nc ? k : 0)) * m->rb;
    int64_t n_next_rows = m->n_out - (c0 + NC) < NC ? m->n_out - (c0 + NC) : NC;
    *n_next = n_next_rows > 0 ? (size_t)n_next_rows * m->rb : 0;
    *next = m->w + (size_t)(c0 + NC) * m->rb * (*n_next > 0);
}

/* Output columns [8 ip, 8 ip + 64) of a packed Q8_0 matrix m (AVX-512;
 * panels ip .. ip + 7 exist, columns ≥ n_out are dropped) for all rows,
 * WIDE_R rows at a time. W (8 panels: 139 KB at n_in = 2048) stays in L2
 * while the rows go by, so no software prefetch. */
static void run_wide(const qmat_t *m, int64_t ip, const qx_t *qx, int n_rows)
{
    const int64_t nb = qx->nb, n_out = m->n_out, c0 = ip * NC;
    const int nc = n_out - c0 < WIDE_NC ? (int)(n_out - c0) : WIDE_NC;
    const uint8_t *q[WIDE_PANELS];
    const uint16_t *dh[WIDE_PANELS];
    for (int j = 0; j < WIDE_PANELS; j++) {
        q[j] = m->packed + (size_t)(ip + j) * m->pstride;
        dh[j] = (const uint16_t *)(const void *)(q[j] + 256 * (size_t)nb);
    }
    for (int r0 = 0; r0 < n_rows; r0 += WIDE_R) {
        const int R = n_rows - r0 < WIDE_R ? n_rows - r0 : WIDE_R;
        float out[WIDE_R][WIDE_NC];
        kern_avx512_q8_0_wide(q, dh, qx, r0, R, out);
        for (int r = 0; r < R; r++)
            memcpy(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], (size_t)nc * sizeof(float));
    }
}

/* The same columns of a packed Q4_0 / Q4_K / Q5_K matrix on the wide tiles
 * (qkpack_wide_run; p->wide is the thread's scratch). */
static void run_wide_k(const qmat_t *m, int64_t ip, const qx_t *qx, int n_rows, const panel_t *p)
{
    const int64_t n_out = m->n_out, c0 = ip * NC;
    const int nc = n_out - c0 < WIDE_NC ? (int)(n_out - c0) : WIDE_NC;
    qkpack_wide_run(m->type, m->packed + (size_t)ip * m->pstride, m->pstride, qx->n_in, qx->q, qx->d, qx->s, n_rows,
                    m->y + c0, n_out, nc, p->wide, m->wide_kb);
    pfq_step();
}

/* Output columns [8 ip, 8 (ip + np)) (np ≤ m->ppu panels) of matrix m for
 * all rows; p is the calling thread's panel scratch. */
static void run_panel(const qmat_t *m, int64_t ip, int np, const qx_t *qx, int n_rows, bool avx2, panel_t *p)
{
    const int64_t n_in = qx->n_in, nb = qx->nb, n_out = m->n_out;
    int64_t c0 = ip * NC;
    int nc = n_out - c0 < NC ? (int)(n_out - c0) : NC;
    if (m->packed && np > 2) {
        /* AVX-512, n_rows ≥ WIDE_MIN_ROWS: units of WIDE_PANELS panels
         * (qmat_init) on the wide kernels, Q8_0's or the Q4_0 / K-quant
         * tiles (qkpack.h); a matrix's last unit may be shorter: its
         * leftover panels go by pairs (and a lone last one) as for fewer
         * rows, as do the Q4_0 / K-quant tail rows of the AMX path (below
         * WIDE_MIN_ROWS the tiles' unpack would cost more than it saves) */
        assert(m->isa == QGEMM_ISA_AVX512VNNI);
        const bool wide = m->kind == K_Q8_0 || n_rows >= WIDE_MIN_ROWS;
        int j = 0;
        for (; wide && np - j >= WIDE_PANELS; j += WIDE_PANELS) {
            if (m->kind == K_Q8_0)
                run_wide(m, ip + j, qx, n_rows);
            else
                run_wide_k(m, ip + j, qx, n_rows, p);
        }
        for (; j < np; j += 2)
            run_panel(m, ip + j, np - j < 2 ? 1 : 2, qx, n_rows, avx2, p);
        return;
    }
    if (m->packed && m->kind != K_Q8_0) {
        /* Q4_0 / K-quant panels ip (and ip + 1) packed at load (qkpack.h) */
        const uint8_t *pk = m->packed + (size_t)ip * m->pstride;
        qkpack_isa_t qi = m->isa == QGEMM_ISA_AVX512VNNI ? QKPACK_AVX512VNNI
                          : m->isa == QGEMM_ISA_AVXVNNI  ? QKPACK_AVXVNNI
                                                         : QKPACK_AVX2;
        int64_t rest = n_out - (c0 + np * NC); /* columns after this unit */
        size_t n_pnext = rest <= 0 ? 0 : rest > NC ? 2 * m->pstride : m->pstride;
        int ncu = n_out - c0 < np * NC ? (int)(n_out - c0) : np * NC;
        qkpack_panel_run(qi, m->type, pk, np == 2 ? pk + m->pstride : NULL, n_in, qx->q, qx->d, qx->s, n_rows,
                         m->y + c0, n_out, ncu, pk + np * m->pstride, n_pnext);
        pfq_step();
        return;
    }
    if (m->packed && np == 2) {
        /* AVX-512: panels ip and ip + 1 as one 16-column tile */
        assert(m->isa == QGEMM_ISA_AVX512VNNI);
        const uint8_t *q0 = m->packed + (size_t)ip * m->pstride, *q1 = q0 + m->pstride;
        const uint16_t *dh0 = (const uint16_t *)(const void *)(q0 + 256 * (size_t)nb);
        const uint16_t *dh1 = (const uint16_t *)(const void *)(q1 + 256 * (size_t)nb);
        const uint8_t *pnext = q1 + m->pstride;
        int64_t rest = n_out - (c0 + 2 * NC); /* columns after this unit */
        size_t n_pnext = rest <= 0 ? 0 : rest > NC ? 2 * m->pstride : m->pstride;
        int nc2 = n_out - c0 < 2 * NC ? (int)(n_out - c0) : 2 * NC;
        for (int r0 = 0; r0 < n_rows; r0 += RT512) {
            int R = n_rows - r0 < RT512 ? n_rows - r0 : RT512;
            float out[RT512][NC512];
            kern_avx512_q8_0_packed(q0, dh0, q1, dh1, qx, r0, R, out, pnext, r0 == 0 ? n_pnext : 0, n_rows <= RT512);
            for (int r = 0; r < R; r++)
                memcpy(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], (size_t)nc2 * sizeof(float));
            pfq_step();
        }
        return;
    }
    const uint8_t *rows[NC], *next;
    size_t n_next;
    panel_rows(m, c0, nc, rows, &next, &n_next);
    if (m->packed && m->isa == QGEMM_ISA_AVX512VNNI) {
        /* a lone last panel: the 16-column kernel with its second half
         * reading the same panel (outputs dropped) */
        const uint8_t *q0 = m->packed + (size_t)ip * m->pstride;
        const uint16_t *dh0 = (const uint16_t *)(const void *)(q0 + 256 * (size_t)nb);
        for (int r0 = 0; r0 < n_rows; r0 += RT512) {
            int R = n_rows - r0 < RT512 ? n_rows - r0 : RT512;
            float out[RT512][NC512];
            kern_avx512_q8_0_packed(q0, dh0, q0, dh0, qx, r0, R, out, NULL, 0, false);
            for (int r = 0; r < R; r++)
                store_cols(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], nc);
        }
        return;
    }
    if (m->packed) {
        /* panel ip as packed at load: no fill, the kernel reads it in place */
        panel_t pp = {0};
        pp.q = (uint8_t *)(uintptr_t)(m->packed + (size_t)ip * m->pstride);
        pp.dh = (const uint16_t *)(const void *)(pp.q + 256 * (size_t)nb);
        /* the next panel, contiguous after this one, when there is one */
        const uint8_t *pnext = pp.q + m->pstride;
        size_t n_pnext = c0 + NC < n_out ? m->pstride : 0;
        const bool vnni = m->isa == QGEMM_ISA_AVXVNNI;
        for (int r0 = 0; r0 < n_rows; r0 += RT) {
            int R = n_rows - r0 < RT ? n_rows - r0 : RT;
            float out[RT][NC];
            if (vnni)
                kern_vnni256_q8_0_packed(pp.q, pp.dh, pp.q, pp.dh, qx, r0, R, out, pnext, r0 == 0 ? n_pnext : 0, n_rows <= RT);
            else
                kern_avx2_q8_0_packed(&pp, qx, r0, R, out, pnext, r0 == 0 ? n_pnext : 0, n_rows <= RT);
            for (int r = 0; r < R; r++)
                store_cols(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], nc);
        }
        return;
    }
    if (m->direct) {
        for (int r0 = 0; r0 < n_rows; r0 += RD) {
            int R = n_rows - r0 < RD ? n_rows - r0 : RD;
            qx_t qr = {qx->q + (int64_t)r0 * n_in, qx->d + (int64_t)r0 * nb, qx->s + (int64_t)r0 * nb, n_in, nb,
                       qx->c + (int64_t)r0 * nb};
            float out[RT][NC];
            direct_avx2(m->kind, R, rows, &qr, out, next, r0 == 0 ? n_next : 0);
            for (int r = 0; r < R; r++)
                store_cols(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], nc);
        }
        return;
    }
    if (avx2) {
        fill_panel_avx2(m->kind, m->type, rows, nb, p, next, n_next);
    } else {
        fill_panel_scalar(m->kind, m->type, rows, nb, p);
    }
    for (int r0 = 0; r0 < n_rows; r0 += RT) {
        int R = n_rows - r0 < RT ? n_rows - r0 : RT;
        float out[RT][NC];
        if (avx2)
            m->kern(p, qx, r0, R, out);
        else
            kern_scalar(m->kind, p, qx, r0, R, out);
        for (int r = 0; r < R; r++)
            store_cols(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], nc);
    }
}

/* ---- AMX ----------------------------------------------------------------------- */

/* The tile kernel twice (qgemm_amx.inc): with the AMX instructions (their
 * target on these functions only; the float part vectorizes with
 * AVX-512) and with amx_tile.h's emulation (portable C). */
#define QA_ATTR __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,amx-tile,amx-int8")))
#define QA_NAME(n) amx_##n
#define QA_STATE
#define QA_CONFIG(cfg) _tile_loadconfig(cfg)
#define QA_LOAD(t, base, stride) _tile_loadd(t, base, stride)
#define QA_STORE(t, base, stride) _tile_stored(t, base, stride)
#define QA_ZERO(t) _tile_zero(t)
#define QA_DPBSSD(c, a, b) _tile_dpbssd(c, a, b)
#define QA_DPBSUD(c, a, b) _tile_dpbsud(c, a, b)
#define QA_RELEASE() _tile_release()
#include "worker/kernels/qgemm_amx.inc"

#define QA_ATTR
#define QA_NAME(n) amxemu_##n
#define QA_STATE amx_emu_t emu_
#define QA_CONFIG(cfg) amx_emu_config(&emu_, cfg)
#define QA_LOAD(t, base, stride) amx_emu_load(&emu_, t, base, stride)
#define QA_STORE(t, base, stride) amx_emu_store(&emu_, t, base, stride)
#define QA_ZERO(t) amx_emu_zero(&emu_, t)
#define QA_DPBSSD(c, a, b) amx_emu_dp(&emu_, c, a, b, 1, 1)
#define QA_DPBSUD(c, a, b) amx_emu_dp(&emu_, c, a, b, 1, 0)
#define QA_RELEASE() ((void)0)
#include "worker/kernels/qgemm_amx.inc"

/* AMX on groups of this many X rows; fewer rows (and a batch's last
 * n_rows % 16) take the context's other kernels */
#define AMX_ROWS 16

/* run_panel, with the first n_rows - n_rows % 16 rows on the AMX tile
 * kernel when m->amx and n_rows ≥ 16. The panel is filled from the file's
 * rows as for the scalar / AVX2 kernels, or, for a packed Q8_0 W, read in
 * place (its q arrays are the filled layout; the f16 scales are converted
 * into the scratch's d). The tail rows run the filled panel's kernel, or
 * run_panel on a packed W. Same bits as run_panel: a row's outputs do
 * not depend on the path. */
static void run_unit(const qmat_t *m, int64_t ip, int np, const qx_t *qx, int n_rows, bool avx2, panel_t *p)
{
    if (!m->amx || n_rows < AMX_ROWS) {
        run_panel(m, ip, np, qx, n_rows, avx2, p);
        return;
    }
    const int64_t n_in = qx->n_in, nb = qx->nb, n_out = m->n_out;
    const int n16 = n_rows / AMX_ROWS * AMX_ROWS;
    const bool in_place = m->packed && m->kind == K_Q8_0;
    for (int j = 0; j < np; j++) {
        const int64_t c0 = (ip + j) * NC;
        const int nc = n_out - c0 < NC ? (int)(n_out - c0) : NC;
        panel_t pp = *p;
        if (in_place) {
            pp.q = (uint8_t *)(uintptr_t)(m->packed + (size_t)(ip + j) * m->pstride);
            const uint16_t *dh = (const uint16_t *)(const void *)(pp.q + 256 * (size_t)nb);
            for (int64_t e = 0; e < 8 * nb; e++)
                pp.d[e] = quant_fp16_to_fp32(dh[e]);
        } else {
            const uint8_t *rows[NC], *next;
            size_t n_next;
            panel_rows(m, c0, nc, rows, &next, &n_next);
            if (avx2)
                fill_panel_avx2(m->kind, m->type, rows, nb, &pp, next, n_next);
            else
                fill_panel_scalar(m->kind, m->type, rows, nb, &pp);
        }
        for (int r0 = 0; r0 < n16; r0 += AMX_ROWS) {
            float out[AMX_ROWS][NC];
            if (m->amx == 1)
                amx_rows16(m->kind, &pp, qx, r0, out);
            else
                amxemu_rows16(m->kind, &pp, qx, r0, out);
            for (int r = 0; r < AMX_ROWS; r++)
                store_cols(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], nc);
        }
        if (n16 == n_rows || m->packed)
            continue;
        /* the tail rows on the panel just filled, as run_panel's fill path */
        for (int r0 = n16; r0 < n_rows; r0 += RT) {
            int R = n_rows - r0 < RT ? n_rows - r0 : RT;
            float out[RT][NC];
            if (avx2)
                m->kern(&pp, qx, r0, R, out);
            else
                kern_scalar(m->kind, &pp, qx, r0, R, out);
            for (int r = 0; r < R; r++)
                store_cols(m->y + (int64_t)(r0 + r) * n_out + c0, out[r], nc);
        }
    }
    if (n16 == n_rows || !m->packed)
        return;
    /* a packed W's tail rows: its own kernels, on a view from row n16 */
    qmat_t mt = *m;
    mt.y = m->y + (int64_t)n16 * n_out;
    const qx_t qt = {qx->q + (int64_t)n16 * n_in, qx->d + (int64_t)n16 * nb, qx->s + (int64_t)n16 * nb, n_in, nb,
                     qx->c + (int64_t)n16 * nb};
    run_panel(&mt, ip, np, &qt, n_rows - n16, avx2, p);
}

static bool mat_ok(const qgemm_ctx_t *c, uint32_t type, int64_t n_out, int64_t n_in)
{
    return qgemm_supported(type) && n_in > 0 && n_in <= c->max_in && n_in % ggml_type_block_elems(type) == 0 &&
           n_out >= 0;
}

/* packed (may be NULL) must be the packing of a (type, n_out, n_in) W */
static bool packed_ok(const void *packed, uint32_t type, int64_t n_out, int64_t n_in)
{
    if (!packed)
        return true;
    const pack_hdr_t *h = packed;
    return h->magic == PACK_MAGIC && h->type == type && h->n_out == n_out && h->n_in == n_in;
}

/* Packed Q6_K with the AVX2 ISA up to this many X rows; more rows take the
 * fill path (2048×768, 1 thread, Zen 5: 32 rows 742 packed vs 743 fill us,
 * 64 rows 1515 vs 1325, 128 rows 3070 vs 2455). */
#define PACKED_AVX2_Q6K_MAX_ROWS 32

static void qmat_init(qmat_t *m, const qgemm_ctx_t *c, uint32_t type, const void *w, const void *packed,
                      int64_t n_out, int64_t n_in, float *y, int n_rows)
{
    const bool avx2 = c->isa >= QGEMM_ISA_AVX2;
    m->kind = kind_of(type);
    m->isa = c->isa == QGEMM_ISA_AMX ? QGEMM_ISA_AVX512VNNI : c->isa;
    m->amx = c->amx_emu ? 2 : c->isa == QGEMM_ISA_AMX ? 1 : 0;
    m->type = type;
    m->w = w;
    m->n_out = n_out;
    m->y = y;
    m->rb = quant_row_bytes(type, n_in);
    m->packed = NULL;
    m->pstride = 0;
    /* AVX2 without VNNI: the packed Q6_K kernel splits the 6-bit quants
     * again for every 4-row tile; above PACKED_AVX2_Q6K_MAX_ROWS rows the
     * per-call fill of the file's blocks, shared by all rows, is cheaper,
     * so the packing is not used (same bits either way) */
    const bool route_fill = type == GGML_TYPE_Q6_K && m->isa == QGEMM_ISA_AVX2 && n_rows > PACKED_AVX2_Q6K_MAX_ROWS;
    if (packed && avx2 && !route_fill) {
        const pack_hdr_t *h = packed;
        m->packed = (const uint8_t *)packed + PACK_HDR_BYTES;
        m->pstride = (size_t)h->panel_bytes;
    }
    /* a packed W always takes the panel kernel: it beats the direct path
     * at every n_rows (qgemm.h, Speed) */
    m->direct = avx2 && !m->packed &&
                ((m->kind == K_Q8_0 && n_rows <= DIRECT_MAX_Q8_0) || (m->kind == K_Q4_0 && n_rows <= DIRECT_MAX_Q4_0));
    /* the wide kernels: Q8_0's from WIDE_MIN_ROWS rows, the K-quant / Q4_0
     * tiles where they pay (qkpack.h) */
    const bool wide = n_rows >= WIDE_MIN_ROWS &&
                      (m->kind == K_Q8_0 || (c->wide_always ? qkpack_wide_supported(type)
                                                            : qkpack_wide_pays(type, n_rows, n_in)));
    m->ppu = !m->packed || m->isa != QGEMM_ISA_AVX512VNNI ? 1 : wide ? WIDE_PANELS : 2;
    m->wide_kb = c->wide_kb;
    m->kern = NULL;
    switch (m->kind) {
    case K_Q8_0: m->kern = kern_avx2_q8_0; break;
    case K_Q4_0: m->kern = kern_avx2_q4_0; break;
    case K_Q6_K: m->kern = kern_avx2_q6_k; break;
    case K_Q45_K: m->kern = kern_avx2_q45_k; break;
    }
}

int qgemm_quantize(qgemm_ctx_t *c, const float *x, int n_rows, int64_t n_in)
{
    if (!c || n_rows < 0 || n_rows > c->max_rows || n_in <= 0 || n_in > c->max_in || n_in % QB != 0)
        return -1;
    xquant_rows(c, x, 0, n_rows, n_in, n_in / QB, c->isa >= QGEMM_ISA_AVX2);
    c->xq_rows = n_rows;
    c->xq_in = n_in;
    return 0;
}

int qgemm_mat_cols(qgemm_ctx_t *c, const qgemm_mat_t *mat, int64_t n_in, int n_rows, int64_t col0, int64_t col1,
                   int thread)
{
    if (!c || !mat)
        return -1;
    const int64_t n_out = mat->n_out;
    if (!mat_ok(c, mat->type, n_out, n_in) || !packed_ok(mat->packed, mat->type, n_out, n_in) ||
        n_rows != c->xq_rows || n_in != c->xq_in || thread < 0 || thread >= c->max_threads || col0 < 0 ||
        col0 % NC != 0 || col1 < col0 || col1 > n_out || (col1 % NC != 0 && col1 != n_out))
        return -1;
    qmat_t m;
    qmat_init(&m, c, mat->type, mat->w, mat->packed, n_out, n_in, mat->y, n_rows);
    const qx_t qx = {c->xq, c->xd, c->xs, n_in, n_in / QB, c->xc};
    panel_t p = panel_at(c, thread);
    const int64_t ip1 = (col1 + NC - 1) / NC;
    for (int64_t ip = col0 / NC; ip < ip1; ip += m.ppu)
        run_unit(&m, ip, ip1 - ip < m.ppu ? (int)(ip1 - ip) : m.ppu, &qx, n_rows, c->isa >= QGEMM_ISA_AVX2, &p);
    return 0;
}

int qgemm_cols(qgemm_ctx_t *c, uint32_t type, const void *w, int64_t n_out, int64_t n_in, int n_rows,
               int64_t col0, int64_t col1, float *y, int thread)
{
    qgemm_mat_t m = {.type = type, .w = w, .n_out = n_out, .y = y};
    return qgemm_mat_cols(c, &m, n_in, n_rows, col0, col1, thread);
}

int qgemm_multi(qgemm_ctx_t *c, const qgemm_mat_t *mats, int n_mats, int64_t n_in, const float *x, int n_rows)
{
    if (!c || n_mats < 0 || n_mats > QGEMM_MAX_MATS || (n_mats > 0 && !mats) || n_in <= 0 || n_rows < 0 ||
        n_in > c->max_in || n_rows > c->max_rows)
        return -1;
    for (int i = 0; i < n_mats; i++)
        if (!mat_ok(c, mats[i].type, mats[i].n_out, n_in) ||
            !packed_ok(mats[i].packed, mats[i].type, mats[i].n_out, n_in))
            return -1;
    if (n_rows == 0)
        return 0;
    const bool avx2 = c->isa >= QGEMM_ISA_AVX2;
    const int64_t nb = n_in / QB;
    qmat_t qm[QGEMM_MAX_MATS];
    int64_t first[QGEMM_MAX_MATS + 1]; /* global index of each matrix's first work unit */
    first[0] = 0;
    for (int i = 0; i < n_mats; i++) {
        qmat_init(&qm[i], c, mats[i].type, mats[i].w, mats[i].packed, mats[i].n_out, n_in, mats[i].y, n_rows);
        int64_t np = (qm[i].n_out + NC - 1) / NC;
        first[i + 1] = first[i] + (np + qm[i].ppu - 1) / qm[i].ppu;
    }
    /* the scratch now holds this X (qgemm_cols may use it) */
    c->xq_rows = n_rows;
    c->xq_in = n_in;
    const int64_t n_panels = first[n_mats]; /* work units */
    if (n_panels == 0)
        return 0;
    const qx_t qx = {c->xq, c->xd, c->xs, n_in, nb, c->xc};
    int n_threads = c->n_threads;
    if ((int64_t)n_threads > n_panels)
        n_threads = (int)n_panels;
    const bool xq_par = (int64_t)n_rows * n_in >= XQUANT_PAR_MIN && n_threads > 1;
    if (!xq_par)
        xquant_rows(c, x, 0, n_rows, n_in, nb, avx2);
    ws_init(c->ws, n_panels, n_threads);

#pragma omp parallel num_threads(n_threads)
    {
        if (xq_par) {
            /* 1. quantize X, split over rows; the barrier at the end of the
             * loop: every row is quantized before any panel runs */
#pragma omp for schedule(static)
            for (int r = 0; r < n_rows; r++)
                xquant_rows(c, x, r, r + 1, n_in, nb, avx2);
        }
        /* 2. work units (1-2 panels of 8 output columns) of all matrices:
         * a contiguous range per thread, stolen from the back by a thread
         * that runs out (worksteal.h), so each thread's "next panel"
         * prefetch is almost always the panel it runs next */
        const int tn = omp_get_thread_num();
        panel_t p = panel_at(c, tn);
        int mi = 0;
        for (int64_t g; (g = ws_next(c->ws, tn)) >= 0;) {
            while (g >= first[mi + 1])
                mi++;
            while (g < first[mi])
                mi--;
            const qmat_t *m = &qm[mi];
            int64_t ip = (g - first[mi]) * m->ppu, np = (m->n_out + NC - 1) / NC;
            run_unit(m, ip, np - ip < m->ppu ? (int)(np - ip) : m->ppu, &qx, n_rows, avx2, &p);
        }
    }
    return 0;
}

int qgemm(qgemm_ctx_t *c, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
          const float *x, int n_rows, float *y)
{
    qgemm_mat_t m = {.type = type, .w = w, .n_out = n_out, .y = y};
    return qgemm_multi(c, &m, 1, n_in, x, n_rows);
}

/* ---- packed weights ----------------------------------------------------------- */

/* Limits of qgemm_pack: enough for any real model (the largest GGUF
 * matrices are ~150k × 30k), small enough that no size computation below
 * can overflow (2^31 panels × 2^26 bytes < 2^63). */
#define PACK_MAX_OUT ((int64_t)1 << 34)
#define PACK_MAX_IN ((int64_t)1 << 21)

size_t qgemm_packed_size(uint32_t type, int64_t n_out, int64_t n_in)
{
    const quant_traits_t *t = quant_traits(type);
    if (!t || t->packed == QUANT_PACK_NONE || n_out < 1 || n_out > PACK_MAX_OUT || n_in < QB ||
        n_in > PACK_MAX_IN || n_in % ggml_type_block_elems(type) != 0)
        return 0;
    uint64_t nb = (uint64_t)(n_in / QB);
    uint64_t panel = t->packed == QUANT_PACK_Q8_0 ? (nb * (256 + 16) + 63) / 64 * 64 : qkpack_panel_bytes(type, n_in);
    uint64_t n_panels = ((uint64_t)n_out + NC - 1) / NC;
    if (n_panels > (SIZE_MAX - PACK_HDR_BYTES) / panel)
        return 0;
    return (size_t)(PACK_HDR_BYTES + n_panels * panel);
}

int qgemm_pack_to(uint32_t type, const void *w, int64_t n_out, int64_t n_in, void *dst, int n_threads)
{
    size_t total = qgemm_packed_size(type, n_out, n_in);
    if (!w || !dst || (uintptr_t)dst % 64 != 0 || total == 0)
        return -1;
    const int64_t nb = n_in / QB;
    const size_t rb = quant_row_bytes(type, n_in);
    const int64_t n_panels = (n_out + NC - 1) / NC;
    const size_t panel = (total - PACK_HDR_BYTES) / (size_t)n_panels;
    uint8_t *buf = dst;
    pack_hdr_t h = {.magic = PACK_MAGIC, .type = type, .n_out = n_out, .n_in = n_in,
                    .panel_bytes = panel, .total = total};
    memset(buf, 0, PACK_HDR_BYTES);
    memcpy(buf, &h, sizeof h);
    if (n_threads < 1)
        n_threads = 1;
    if ((int64_t)n_threads > n_panels)
        n_threads = (int)n_panels;
    const uint8_t *src = w;
#pragma omp parallel for schedule(dynamic, 64) num_threads(n_threads)
    for (int64_t ip = 0; ip < n_panels; ip++) {
        uint8_t *q = buf + PACK_HDR_BYTES + (size_t)ip * panel;
        if (quant_traits(type)->packed != QUANT_PACK_Q8_0) {
            int nc = n_out - ip * NC < NC ? (int)(n_out - ip * NC) : NC;
            qkpack_pack_panel(type, src + (size_t)(ip * NC) * rb, rb, nc, n_in, q);
            continue;
        }
        uint8_t *dh = q + 256 * (size_t)nb;
        /* columns past n_out and the tail padding stay zero */
        memset(q, 0, panel);
        for (int c = 0; c < NC && ip * NC + c < n_out; c++) {
            const uint8_t *row = src + (size_t)(ip * NC + c) * rb;
            for (int64_t b = 0; b < nb; b++) {
                const qblock_q8_0_t *blk = (const qblock_q8_0_t *)row + b;
                memcpy(dh + 2 * (8 * b + c), &blk->d, 2); /* f16 scale bits as in the file */
                for (int k = 0; k < 8; k++)
                    memcpy(q + 256 * b + 32 * k + 4 * c, blk->qs + 4 * k, 4);
            }
        }
    }
    return 0;
}

void *qgemm_pack(uint32_t type, const void *w, int64_t n_out, int64_t n_in, int n_threads)
{
    size_t total = qgemm_packed_size(type, n_out, n_in);
    if (!w || total == 0)
        return NULL;
    void *buf = xaligned_alloc(total);
    if (qgemm_pack_to(type, w, n_out, n_in, buf, n_threads) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

void qgemm_pack_free(void **packed)
{
    if (!packed)
        return;
    free(*packed);
    *packed = NULL;
}
