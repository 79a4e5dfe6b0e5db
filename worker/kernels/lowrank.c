/* lowrank.c — LoRA pairs' updates of some batch rows, all groups of a step's
 * matrix in one parallel region (see lowrank.h). */
#include "worker/kernels/lowrank.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "worker/kernels/worksteal.h"
#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/pfqueue.h"
#include "worker/kernels/quant.h"
#include "worker/kernels/vmath.h"

/* Bytes of one element of a factor: F32 4, F16 2, LOWRANK_I8 1, other
 * types 0. */
static size_t elem_bytes(uint32_t type)
{
    return type == GGML_TYPE_F32 ? 4 : type == GGML_TYPE_F16 ? 2 : type == LOWRANK_I8 ? 1 : 0;
}

/* How the kernels read a factor's elements: F32, F16 (widened exactly) or
 * int8 (converted exactly; the scale is applied after the sum). */
enum { W_F32 = 0, W_F16 = 1, W_I8 = 2 };

static int w_kind(uint32_t type)
{
    return type == GGML_TYPE_F16 ? W_F16 : type == LOWRANK_I8 ? W_I8 : W_F32;
}

/* Bytes of one element of a factor of this kind */
static inline int64_t kind_bytes(int kind)
{
    return kind == W_I8 ? 1 : kind == W_F16 ? 2 : 4;
}

static inline float w_at(const void *wv, int kind, int64_t i)
{
    return kind == W_F16 ? quant_fp16_to_fp32(((const uint16_t *)wv)[i])
           : kind == W_I8 ? (float)((const int8_t *)wv)[i]
                          : ((const float *)wv)[i];
}

static int pair_check(const lowrank_t *lr)
{
    if (!lr || lr->rank < 1 || elem_bytes(lr->a.type) == 0 || elem_bytes(lr->b.type) == 0 ||
        lr->a.rows != lr->rank || lr->b.cols != lr->rank ||
        lr->a.row_bytes != (size_t)lr->a.cols * elem_bytes(lr->a.type) ||
        lr->b.row_bytes != (size_t)lr->b.cols * elem_bytes(lr->b.type))
        return -1;
    return 0;
}

/* lr->bt is B transposed as lowrank_prepare makes it. */
static int bt_check(const lowrank_t *lr)
{
    const matmul_weight_t *bt = &lr->bt;
    if (!bt->data || bt->type != (lr->a8.data ? LOWRANK_I8 : lr->b.type) || bt->rows != lr->rank ||
        bt->cols != lr->b.rows || bt->row_bytes != (size_t)bt->cols * elem_bytes(bt->type) ||
        (lr->a8.data && (!lr->a_d || !lr->bt_d)))
        return -1;
    return 0;
}

static int job_check(const lowrank_job_t *j)
{
    if (j->n < 0 || j->n_pairs < 0 || (j->n > 0 && j->n_pairs > 0 && (!j->rows || !j->x || !j->y || !j->s)))
        return -1;
    for (int i = 0; i < j->n_pairs; i++) {
        const lowrank_t *lr = j->pairs[i];
        if (pair_check(lr) != 0 || bt_check(lr) != 0 || lr->a.cols != j->pairs[0]->a.cols || lr->b.rows != j->pairs[0]->b.rows ||
            lr->a.cols > j->ldx || lr->b.rows > j->ldy)
            return -1;
    }
    return 0;
}

size_t lowrank_scratch_floats(const lowrank_job_t *jobs, int n_jobs)
{
    size_t n = 0;
    for (int jb = 0; jb < n_jobs; jb++)
        for (int i = 0; i < jobs[jb].n_pairs; i++)
            n += (size_t)(jobs[jb].n > 0 ? jobs[jb].n : 0) * (size_t)jobs[jb].pairs[i]->rank;
    return n;
}

/* out[r] = xs[r][0..len) · w[0..len) for r < nr (nr <= LOWRANK_ROWS), w F32,
 * F16 or int8 (kind; converted exactly): sixteen float lanes over the
 * multiples of 16 (lane l sums the products of elements 16m + l in order
 * of m, each a fused multiply-add), then lanes l and l + 8 added, a fixed
 * horizontal sum of those 8 (vmath_hsum8's), then the tail in order by
 * fused multiply-adds. Every path (scalar, AVX2 as two 8-lane halves,
 * AVX-512 as one 16-lane register) does these IEEE operations, so each
 * row's bits are the same whatever nr, the path or the rows beside it, and
 * an F16 w gives the bits of an F32 w holding the same values. */
static inline float dot_tail(float v, const float *x, const void *wv, int kind, int64_t i, int64_t len)
{
    for (int64_t k = i; k < len; k++)
        v = fmaf(x[k], w_at(wv, kind, k), v);
    return v;
}

static void dots_scalar1(const float *const *xs, int nr, const void *wv, int kind, int64_t len, float *out)
{
    for (int r = 0; r < nr; r++) {
        float lane[16] = {0}, h[8];
        int64_t i = 0;
        for (; i + 16 <= len; i += 16)
            for (int l = 0; l < 16; l++)
                lane[l] = fmaf(xs[r][i + l], w_at(wv, kind, i + l), lane[l]);
        for (int l = 0; l < 8; l++)
            h[l] = lane[l] + lane[l + 8];
        float v = ((h[0] + h[4]) + (h[2] + h[6])) + ((h[1] + h[5]) + (h[3] + h[7]));
        out[r] = dot_tail(v, xs[r], wv, kind, i, len);
    }
}

#ifdef VMATH_X86
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256 ldw(const void *wv, int64_t i,
                                                                                  const int kind)
{
    if (kind == W_I8)
        return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)wv + i))));
    return kind == W_F16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)wv + i)))
                         : _mm256_loadu_ps((const float *)wv + i);
}

/* ROW(x_q, a_q, b_q) for the rows q < nr (x0..x3, a0..a3, b0..b3 in scope) */
#define LOWRANK_EACH_ROW(ROW)                                                \
    do {                                                                     \
        ROW(x0, a0, b0);                                                     \
        if (nr > 1)                                                          \
            ROW(x1, a1, b1);                                                 \
        if (nr > 2)                                                          \
            ROW(x2, a2, b2);                                                 \
        if (nr > 3)                                                          \
            ROW(x3, a3, b3);                                                 \
    } while (0)

/* dots_scalar1's arithmetic for one w, the 16 lanes as two ymm halves a
 * row (rows' accumulators as named registers: an indexed array of them was
 * kept on the stack by GCC, a store and reload every iteration) */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
dots_avx2_n(const float *const *xs, const int nr, const void *w0, const int kind, int64_t len, float *out0,
            const uint8_t *pf)
{
    const int64_t eb = kind_bytes(kind);
    const float *x0 = xs[0], *x1 = xs[nr > 1 ? 1 : 0], *x2 = xs[nr > 2 ? 2 : 0], *x3 = xs[nr > 3 ? 3 : 0];
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
        if (pf && ((i * eb) & 63) == 0)
            _mm_prefetch((const char *)pf + i * eb, _MM_HINT_T0);
        const __m256 lo = ldw(w0, i, kind), hi = ldw(w0, i + 8, kind);
        /* row X's lanes 0-7 (A) and 8-15 (B) */
#define LOWRANK_ROW(X, A, B)                                          \
        do {                                                          \
            A = _mm256_fmadd_ps(_mm256_loadu_ps((X) + i), lo, A);     \
            B = _mm256_fmadd_ps(_mm256_loadu_ps((X) + i + 8), hi, B); \
        } while (0)
        LOWRANK_EACH_ROW(LOWRANK_ROW);
#undef LOWRANK_ROW
    }
    const __m256 as[4] = {a0, a1, a2, a3}, bs[4] = {b0, b1, b2, b3};
    for (int r = 0; r < nr; r++)
        out0[r] = dot_tail(vmath_hsum8(_mm256_add_ps(as[r], bs[r])), xs[r], w0, kind, i, len);
}

#define LOWRANK_NR(CALL)                                                     \
    switch (nr) {                                                            \
    case 4: CALL(4); break;                                                  \
    case 3: CALL(3); break;                                                  \
    case 2: CALL(2); break;                                                  \
    default: CALL(1); break;                                                 \
    }
/* CALL(N) with N = nr and K_ = kind as constants (the kernels inline per
 * row count and factor type) */
#define LOWRANK_KIND_NR(CALL)                                                \
    switch (kind) {                                                          \
    case W_F16: { enum { K_ = W_F16 }; LOWRANK_NR(CALL) } break;             \
    case W_I8: { enum { K_ = W_I8 }; LOWRANK_NR(CALL) } break;               \
    default: { enum { K_ = W_F32 }; LOWRANK_NR(CALL) } break;                \
    }

VMATH_FN static void dots_avx2(const float *const *xs, int nr, const void *w0, const void *w1, int kind,
                               int64_t len, float *out0, float *out1, const uint8_t *pf0, const uint8_t *pf1)
{
#define LOWRANK_D(N)                                                         \
    do {                                                                     \
        dots_avx2_n(xs, N, w0, K_, len, out0, pf0);                          \
        if (w1)                                                              \
            dots_avx2_n(xs, N, w1, K_, len, out1, pf1);                      \
    } while (0)
    LOWRANK_KIND_NR(LOWRANK_D)
#undef LOWRANK_D
}

#define LOWRANK_T512 "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl"

static inline __attribute__((always_inline, target(LOWRANK_T512))) __m512 ldw16(const void *wv, int64_t i,
                                                                                 const int kind)
{
    if (kind == W_I8)
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)wv + i))));
    return kind == W_F16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)wv + i)))
                         : _mm512_loadu_ps((const float *)wv + i);
}

static inline __attribute__((always_inline, target(LOWRANK_T512))) float hsum16(__m512 v)
{
    return vmath_hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/* dots_scalar1's arithmetic with the 16 lanes in one zmm, two w at once
 * (the x loads shared) */
static inline __attribute__((always_inline, target(LOWRANK_T512))) void
dots_avx512_n(const float *const *xs, const int nr, const void *w0, const void *w1, const int two, const int kind,
              int64_t len, float *out0, float *out1, const uint8_t *pf0, const uint8_t *pf1)
{
    const int64_t eb = kind_bytes(kind);
    const float *x0 = xs[0], *x1 = xs[nr > 1 ? 1 : 0], *x2 = xs[nr > 2 ? 2 : 0], *x3 = xs[nr > 3 ? 3 : 0];
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, b0 = a0, b1 = a0, b2 = a0, b3 = a0;
    int64_t i = 0;
    for (; i + 16 <= len; i += 16) {
        if (((i * eb) & 63) == 0) {
            if (pf0)
                _mm_prefetch((const char *)pf0 + i * eb, _MM_HINT_T0);
            if (two && pf1)
                _mm_prefetch((const char *)pf1 + i * eb, _MM_HINT_T0);
        }
        const __m512 v0 = ldw16(w0, i, kind), v1 = two ? ldw16(w1, i, kind) : v0;
#define LOWRANK_ROW(X, A, B)                                \
        do {                                                \
            const __m512 x_ = _mm512_loadu_ps((X) + i);     \
            A = _mm512_fmadd_ps(x_, v0, A);                 \
            if (two)                                        \
                B = _mm512_fmadd_ps(x_, v1, B);             \
        } while (0)
        LOWRANK_EACH_ROW(LOWRANK_ROW);
#undef LOWRANK_ROW
    }
    const __m512 as[4] = {a0, a1, a2, a3}, bs[4] = {b0, b1, b2, b3};
    for (int r = 0; r < nr; r++) {
        out0[r] = dot_tail(hsum16(as[r]), xs[r], w0, kind, i, len);
        if (two)
            out1[r] = dot_tail(hsum16(bs[r]), xs[r], w1, kind, i, len);
    }
}

__attribute__((target(LOWRANK_T512))) static void dots_avx512(const float *const *xs, int nr, const void *w0,
                                                               const void *w1, int kind, int64_t len, float *out0,
                                                               float *out1, const uint8_t *pf0, const uint8_t *pf1)
{
#define LOWRANK_D(N)                                                         \
    do {                                                                     \
        if (w1)                                                              \
            dots_avx512_n(xs, N, w0, w1, 1, K_, len, out0, out1, pf0, pf1);  \
        else                                                                 \
            dots_avx512_n(xs, N, w0, w1, 0, K_, len, out0, out1, pf0, pf1);  \
    } while (0)
    LOWRANK_KIND_NR(LOWRANK_D)
#undef LOWRANK_D
}
#endif

static void dots_scalar(const float *const *xs, int nr, const void *w0, const void *w1, int kind, int64_t len,
                        float *out0, float *out1, const uint8_t *pf0, const uint8_t *pf1)
{
    (void)pf0;
    (void)pf1;
    dots_scalar1(xs, nr, w0, kind, len, out0);
    if (w1)
        dots_scalar1(xs, nr, w1, kind, len, out1);
}

/* out0[r] = xs[r] · w0, and out1[r] = xs[r] · w1 unless w1 is NULL; pf0,
 * pf1 (NULL: none): bytes as long as w0's and w1's rows that the kernel
 * asks for (into L1) a line at a time while it sums them, spread over the
 * loop (a hint: no effect on any result) */
typedef void (*dots_fn)(const float *const *xs, int nr, const void *w0, const void *w1, int kind, int64_t len,
                        float *out0, float *out1, const uint8_t *pf0, const uint8_t *pf1);

/* Asks for the bytes [p, p + n) to be brought into L1 ahead of use: the
 * update reads its factors once a step, a few rows each, so without this
 * every A block starts with a run of cache misses the loops wait on (perf
 * put most of the kernels' time on their loads). A hint: no effect on any
 * result. */
static inline void prefetch_l1(const void *p, size_t n)
{
#ifdef VMATH_X86
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63), *e = (const char *)p + n;
    for (; c < e; c += 64)
        _mm_prefetch(c, _MM_HINT_T0);
#else
    (void)p;
    (void)n;
#endif
}

static inline int64_t claim(atomic_llong *next)
{
    return atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
}

/* How far ahead of its sums phase 1 asks for A's bytes (into L1): the
 * row this many bytes (rounded up to whole rows) after the one it sums, in
 * the stream of its tasks' A rows: the rest of the task's rows, then the
 * next task's. A task is 12-64 KB, so asking only within the task started
 * each one with a run of misses the sums waited on; crossing into the next
 * task keeps the stream going (a plain loop of the phase's sums over 24 KB
 * blocks in random order: 6.6 B/cycle asking within the block, 12 B/cycle
 * asking 6 KB ahead into the next block; 14 B/cycle over contiguous
 * memory). */
#define LOWRANK_PF_AHEAD 6144

/* Row k + ahead of the stream of rows cur (k0..k1) then nxt (nxt_rows
 * rows of nxt_rb bytes), or NULL past its end */
static inline const uint8_t *pf_row(const uint8_t *a, size_t rb, int k, int k1, int ahead, const uint8_t *nxt,
                                    int nxt_rows, size_t nxt_rb)
{
    const int kk = k + ahead;
    if (kk < k1)
        return a + (size_t)kk * rb;
    return nxt && kk - k1 < nxt_rows ? nxt + (size_t)(kk - k1) * nxt_rb : NULL;
}

/* Phase 1 task: t rows j0..j0+nr, ranks k0..k1 of pair lr = x[rows] · Aᵀ
 * (an int8 pair: the sum over its int8 A, times the row's scale a_d[k]).
 * nxt (NULL: none): the A rows of the thread's next task (nxt_rows rows of
 * nxt_rb bytes), asked for while this one's last rows are summed; first:
 * this task is the thread's first of the region. */
static void task_a(dots_fn dots, const lowrank_job_t *jb, const lowrank_t *lr, float *t, int j0, int nr, int k0,
                   int k1, const uint8_t *nxt, int nxt_rows, size_t nxt_rb, bool first)
{
    const int64_t in = lr->a.cols, r = lr->rank;
    const matmul_weight_t *a = lr->a8.data ? &lr->a8 : &lr->a;
    const float *xs[LOWRANK_ROWS];
    for (int q = 0; q < nr; q++)
        xs[q] = jb->x + (size_t)jb->rows[j0 + q] * (size_t)jb->ldx;
    /* the task's A rows are contiguous; the kernel asks for the rows
     * `ahead` after the two it sums while it sums them. Nobody asked for
     * the first rows of a thread's first task: it asks for them at once
     * (a burst the core partly drops, once a region) */
    const size_t rb = a->row_bytes;
    const int ahead = (int)((LOWRANK_PF_AHEAD + rb - 1) / rb);
    if (first)
        prefetch_l1(a->data + (size_t)k0 * rb, (size_t)(k1 - k0 < ahead ? k1 - k0 : ahead) * rb);
    for (int k = k0; k < k1; k += 2) {
        const bool two = k + 1 < k1;
        float v0[LOWRANK_ROWS], v1[LOWRANK_ROWS];
        dots(xs, nr, a->data + (size_t)k * rb, two ? a->data + (size_t)(k + 1) * rb : NULL, w_kind(a->type), in, v0,
             v1, pf_row(a->data, rb, k, k1, ahead, nxt, nxt_rows, nxt_rb),
             pf_row(a->data, rb, k + 1, k1, ahead, nxt, nxt_rows, nxt_rb));
        const float d0 = lr->a8.data ? lr->a_d[k] : 1, d1 = lr->a8.data && two ? lr->a_d[k + 1] : 1;
        for (int q = 0; q < nr; q++) {
            t[(size_t)(j0 + q) * (size_t)r + (size_t)k] = v0[q] * d0;
            if (two)
                t[(size_t)(j0 + q) * (size_t)r + (size_t)k + 1] = v1[q] * d1;
        }
    }
}

/* The next panel phase 2 will read after the one it sums: rows rows of
 * rb bytes from p (the same outputs as the current panel's) */
typedef struct {
    const uint8_t *p;
    size_t rb;
    int64_t rows;
} panel_t;

/* How many Bᵀ rows ahead of its chains phase 2 asks for a row (into L1),
 * in the stream of the panel's rows then the next panel's (nx): the
 * panels are 1-8 KB (rank 8-64, 64 outputs of F16), so asking only within
 * the panel started each one with a run of misses. */
#define LOWRANK_PF_ROWS 12

/* ys[q][o0..o1) += s · (ts[q][0..r) · Bᵀ) for q < nr (nr <= LOWRANK_ROWS),
 * bt = Bᵀ (r, out) F32, F16 or int8 (kind; converted exactly): each output
 * is a chain of fused multiply-adds over k = 0..r-1 in order, started from
 * 0, times d[o] for int8 (d non-NULL), then y = fma(s, that, y). The same
 * chain whichever lanes, rows or block width an output is computed in, so a
 * row's result depends on that row only, and an F16 bt gives the bits of an
 * F32 bt holding the same values. */
static void cols_scalar(const float *const *ts, int nr, const uint8_t *bt, size_t bt_rb, int kind, const float *d,
                        int64_t r, float s, int64_t o0, int64_t o1, float *const *ys, const panel_t *nx)
{
    (void)nx;
    for (int64_t o = o0; o < o1; o++)
        for (int q = 0; q < nr; q++) {
            float v = 0;
            for (int64_t k = 0; k < r; k++)
                v = fmaf(ts[q][k], w_at(bt + (size_t)k * bt_rb, kind, o), v);
            if (d)
                v *= d[o];
            ys[q][o] = fmaf(s, v, ys[q][o]);
        }
}

#ifdef VMATH_X86
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) __m256 scaled(__m256 acc, const float *d,
                                                                                     int64_t o)
{
    return d ? _mm256_mul_ps(acc, _mm256_loadu_ps(d + o)) : acc;
}

/* cols_scalar's arithmetic, 16 then 8 outputs a block: 2 × nr
 * accumulators in registers over the whole rank, each bt element widened
 * once for all nr rows. */
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
cols_avx2_n(const float *const *ts, const int nr, const uint8_t *bt, size_t bt_rb, const int kind, const float *d,
            int64_t r, float s, int64_t o0, int64_t o1, float *const *ys)
{
    const __m256 sv = _mm256_set1_ps(s);
    int64_t o = o0;
    for (; o + 16 <= o1; o += 16) {
        __m256 acc[LOWRANK_ROWS][2];
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++)
            acc[q][0] = acc[q][1] = _mm256_setzero_ps();
        for (int64_t k = 0; k < r; k++) {
            const uint8_t *row = bt + (size_t)k * bt_rb;
            const __m256 b0 = ldw(row, o, kind), b1 = ldw(row, o + 8, kind);
            _Pragma("GCC unroll 4")
            for (int q = 0; q < nr; q++) {
                const __m256 tq = _mm256_broadcast_ss(ts[q] + k);
                acc[q][0] = _mm256_fmadd_ps(tq, b0, acc[q][0]);
                acc[q][1] = _mm256_fmadd_ps(tq, b1, acc[q][1]);
            }
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++) {
            _mm256_storeu_ps(ys[q] + o, _mm256_fmadd_ps(sv, scaled(acc[q][0], d, o), _mm256_loadu_ps(ys[q] + o)));
            _mm256_storeu_ps(ys[q] + o + 8,
                             _mm256_fmadd_ps(sv, scaled(acc[q][1], d, o + 8), _mm256_loadu_ps(ys[q] + o + 8)));
        }
    }
    for (; o + 8 <= o1; o += 8) {
        __m256 acc[LOWRANK_ROWS];
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++)
            acc[q] = _mm256_setzero_ps();
        for (int64_t k = 0; k < r; k++) {
            const __m256 b0 = ldw(bt + (size_t)k * bt_rb, o, kind);
            _Pragma("GCC unroll 4")
            for (int q = 0; q < nr; q++)
                acc[q] = _mm256_fmadd_ps(_mm256_broadcast_ss(ts[q] + k), b0, acc[q]);
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++)
            _mm256_storeu_ps(ys[q] + o, _mm256_fmadd_ps(sv, scaled(acc[q], d, o), _mm256_loadu_ps(ys[q] + o)));
    }
    for (; o < o1; o++) /* the tail: the same chains one output at a time */
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++) {
            float v = 0;
            for (int64_t k = 0; k < r; k++)
                v = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(ts[q][k]), _mm_set_ss(w_at(bt + (size_t)k * bt_rb, kind, o)),
                                               _mm_set_ss(v)));
            if (d)
                v = _mm_cvtss_f32(_mm_mul_ss(_mm_set_ss(v), _mm_set_ss(d[o])));
            ys[q][o] = _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(s), _mm_set_ss(v), _mm_set_ss(ys[q][o])));
        }
}

VMATH_FN static void cols_avx2(const float *const *ts, int nr, const uint8_t *bt, size_t bt_rb, int kind,
                               const float *d, int64_t r, float s, int64_t o0, int64_t o1, float *const *ys,
                               const panel_t *nx)
{
    (void)nx;
#define LOWRANK_C(N) cols_avx2_n(ts, N, bt, bt_rb, K_, d, r, s, o0, o1, ys)
    LOWRANK_KIND_NR(LOWRANK_C)
#undef LOWRANK_C
}

/* cols_scalar's arithmetic with AVX-512: 64 then 16 outputs a block
 * (4 × nr or nr zmm accumulators over the whole rank; a 64-output panel is
 * one block), the tail one output at a time. Each output's chain is the
 * same as in cols_scalar, so the bits are too. */
static inline __attribute__((always_inline, target(LOWRANK_T512))) void
cols_avx512_n(const float *const *ts, const int nr, const uint8_t *bt, size_t bt_rb, const int kind, const float *d,
              int64_t r, float s, int64_t o0, int64_t o1, float *const *ys, const panel_t *nx)
{
    const __m512 sv = _mm512_set1_ps(s);
    const size_t eb = (size_t)kind_bytes(kind);
    int64_t o = o0;
    for (; o + 64 <= o1; o += 64) {
        __m512 acc[LOWRANK_ROWS][4];
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++)
            acc[q][0] = acc[q][1] = acc[q][2] = acc[q][3] = _mm512_setzero_ps();
        for (int64_t k = 0; k < r; k++) {
            const uint8_t *row = bt + (size_t)k * bt_rb;
            /* this block's 64 outputs of the row LOWRANK_PF_ROWS ahead in
             * the stream of this panel's rows then the next panel's */
            const int64_t kk = k + LOWRANK_PF_ROWS;
            if (kk < r)
                prefetch_l1(bt + (size_t)kk * bt_rb + (size_t)o * eb, 64 * eb);
            else if (nx && kk - r < nx->rows)
                prefetch_l1(nx->p + (size_t)(kk - r) * nx->rb + (size_t)o * eb, 64 * eb);
            const __m512 b0 = ldw16(row, o, kind), b1 = ldw16(row, o + 16, kind), b2 = ldw16(row, o + 32, kind),
                         b3 = ldw16(row, o + 48, kind);
            _Pragma("GCC unroll 4")
            for (int q = 0; q < nr; q++) {
                const __m512 tq = _mm512_set1_ps(ts[q][k]);
                acc[q][0] = _mm512_fmadd_ps(tq, b0, acc[q][0]);
                acc[q][1] = _mm512_fmadd_ps(tq, b1, acc[q][1]);
                acc[q][2] = _mm512_fmadd_ps(tq, b2, acc[q][2]);
                acc[q][3] = _mm512_fmadd_ps(tq, b3, acc[q][3]);
            }
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++)
            _Pragma("GCC unroll 4")
            for (int c = 0; c < 4; c++) {
                __m512 v = d ? _mm512_mul_ps(acc[q][c], _mm512_loadu_ps(d + o + 16 * c)) : acc[q][c];
                _mm512_storeu_ps(ys[q] + o + 16 * c, _mm512_fmadd_ps(sv, v, _mm512_loadu_ps(ys[q] + o + 16 * c)));
            }
    }
    for (; o + 16 <= o1; o += 16) {
        __m512 acc[LOWRANK_ROWS];
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++)
            acc[q] = _mm512_setzero_ps();
        for (int64_t k = 0; k < r; k++) {
            const __m512 b0 = ldw16(bt + (size_t)k * bt_rb, o, kind);
            _Pragma("GCC unroll 4")
            for (int q = 0; q < nr; q++)
                acc[q] = _mm512_fmadd_ps(_mm512_set1_ps(ts[q][k]), b0, acc[q]);
        }
        _Pragma("GCC unroll 4")
        for (int q = 0; q < nr; q++) {
            __m512 v = d ? _mm512_mul_ps(acc[q], _mm512_loadu_ps(d + o)) : acc[q];
            _mm512_storeu_ps(ys[q] + o, _mm512_fmadd_ps(sv, v, _mm512_loadu_ps(ys[q] + o)));
        }
    }
    if (o < o1) /* the tail: cols_avx2's, the same chains */
        cols_avx2(ts, nr, bt, bt_rb, kind, d, r, s, o, o1, ys, NULL);
}

__attribute__((target(LOWRANK_T512))) static void cols_avx512(const float *const *ts, int nr, const uint8_t *bt,
                                                               size_t bt_rb, int kind, const float *d, int64_t r,
                                                               float s, int64_t o0, int64_t o1, float *const *ys,
                                                               const panel_t *nx)
{
#define LOWRANK_C(N) cols_avx512_n(ts, N, bt, bt_rb, K_, d, r, s, o0, o1, ys, nx)
    LOWRANK_KIND_NR(LOWRANK_C)
#undef LOWRANK_C
}
#undef LOWRANK_KIND_NR
#undef LOWRANK_NR
#undef LOWRANK_EACH_ROW
#endif

typedef void (*cols_fn)(const float *const *ts, int nr, const uint8_t *bt, size_t bt_rb, int kind, const float *d,
                        int64_t r, float s, int64_t o0, int64_t o1, float *const *ys, const panel_t *nx);

/* Pair lr's panel of outputs o0..o1 (lowrank_prepare: (r, o1 - o0)
 * row-major from element o0 · r of Bᵀ) */
static panel_t panel_of(const lowrank_t *lr, int64_t o0, int64_t o1)
{
    const size_t eb = elem_bytes(lr->bt.type);
    return (panel_t){.p = lr->bt.data + (size_t)o0 * (size_t)lr->rank * eb, .rb = (size_t)(o1 - o0) * eb,
                     .rows = lr->rank};
}

/* Phase 2 task: y[rows][o0..o1) += s_i · t_i · B_iᵀ for every row of the
 * job, pair by pair in order; t the job's scratch (pair after pair). nxt:
 * the job phase 2 runs after this one (NULL: none), whose first panel the
 * last pair's chains ask for ahead. */
static void task_b(cols_fn cols, const lowrank_job_t *jb, const float *t, int64_t o0, int64_t o1,
                   const lowrank_job_t *nxt)
{
    panel_t after = {0};
    if (nxt && nxt->n > 0 && nxt->n_pairs > 0 && o0 < nxt->pairs[0]->b.rows)
        after = panel_of(nxt->pairs[0], o0, o1 < nxt->pairs[0]->b.rows ? o1 : nxt->pairs[0]->b.rows);
    for (int j0 = 0; j0 < jb->n; j0 += LOWRANK_ROWS) {
        const int nr = jb->n - j0 < LOWRANK_ROWS ? jb->n - j0 : LOWRANK_ROWS;
        float *ys[LOWRANK_ROWS];
        for (int q = 0; q < nr; q++)
            ys[q] = jb->y + (size_t)jb->rows[j0 + q] * (size_t)jb->ldy;
        const float *tp = t;
        for (int i = 0; i < jb->n_pairs; i++) {
            const lowrank_t *lr = jb->pairs[i];
            const int64_t r = lr->rank;
            const float *ts[LOWRANK_ROWS];
            for (int q = 0; q < nr; q++)
                ts[q] = tp + (size_t)(j0 + q) * (size_t)r;
            const panel_t pn = panel_of(lr, o0, o1);
            /* the panel read next: the next pair's, else (a later block of
             * rows reads panels already in cache) the next job's first */
            const panel_t nx = i + 1 < jb->n_pairs ? panel_of(jb->pairs[i + 1], o0, o1)
                               : j0 + LOWRANK_ROWS < jb->n ? (panel_t){0}
                                                            : after;
            float *yo[LOWRANK_ROWS];
            for (int q = 0; q < nr; q++)
                yo[q] = ys[q] + o0;
            cols(ts, nr, pn.p, pn.rb, w_kind(lr->bt.type), lr->bt_d ? lr->bt_d + o0 : NULL, r, jb->s[i], 0,
                 o1 - o0, yo, nx.p ? &nx : NULL);
            tp += (size_t)jb->n * (size_t)r;
        }
    }
}

int lowrank_check(const lowrank_job_t *jobs, int n_jobs)
{
    if (n_jobs < 0 || (n_jobs > 0 && !jobs))
        return -1;
    for (int jb = 0; jb < n_jobs; jb++)
        if (job_check(&jobs[jb]) != 0)
            return -1;
    return 0;
}

/* The kernels of this CPU (lowrank_isa) */
static void kernels(dots_fn *dots, cols_fn *cols)
{
    *dots = dots_scalar;
    *cols = cols_scalar;
#ifdef VMATH_X86
    const qgemm_isa_t isa = lowrank_isa();
    if (isa != QGEMM_ISA_SCALAR) {
        *dots = isa == QGEMM_ISA_AVX512VNNI ? dots_avx512 : dots_avx2;
        *cols = isa == QGEMM_ISA_AVX512VNNI ? cols_avx512 : cols_avx2;
    }
#endif
}

void lowrank_phase_init(lowrank_phase_t *ph, const lowrank_job_t *jobs, int n_jobs)
{
    int64_t n = 0;
    for (int q = 0; q < n_jobs; q++)
        for (int i = 0; i < jobs[q].n_pairs && jobs[q].n > 0; i++)
            n += (int64_t)((jobs[q].n + LOWRANK_ROWS - 1) / LOWRANK_ROWS) *
                 ((jobs[q].pairs[i]->rank + LOWRANK_KS - 1) / LOWRANK_KS);
    atomic_init(&ph->next, 0);
    atomic_init(&ph->done, 0);
    ph->n_tasks = n;
    ph->ws = NULL;
}

void lowrank_phase_ranges(lowrank_phase_t *ph, struct ws_t *ws, int n_threads)
{
    ws_init(ws, ph->n_tasks, n_threads);
    ph->ws = ws;
}

/* The next phase 1 task for the calling thread (-1: none) */
static int64_t claim_t(lowrank_phase_t *ph)
{
    if (ph->ws)
        return ws_next(ph->ws, omp_get_thread_num());
    const int64_t i = claim(&ph->next);
    return i < ph->n_tasks ? i : -1;
}


void lowrank_wait_t(lowrank_phase_t *ph)
{
    /* a short spin (the other threads' last tasks are usually under way),
     * then yield the core: on a shared machine the thread we wait for may
     * be the one that needs it */
    for (int spin = 0; atomic_load_explicit(&ph->done, memory_order_acquire) < ph->n_tasks; spin++) {
        if (spin < 2000) {
#ifdef VMATH_X86
            _mm_pause();
#endif
        } else {
            sched_yield();
        }
    }
}

/* A cursor over phase 1's tasks in their order (job, pair, block of
 * LOWRANK_ROWS rows, block of LOWRANK_KS ranks): idx, and where task idx
 * writes (tj: its pair's part of t). */
typedef struct {
    const lowrank_job_t *jobs;
    int n_jobs, q, i, j0, k0;
    int64_t idx;
    float *tj, *t0;
} titer_t;

/* Moves it to a pair with rows and ranks at or after (q, i), from k0 = j0 = 0;
 * false past the last. */
static bool titer_settle(titer_t *it)
{
    for (; it->q < it->n_jobs; it->q++, it->i = 0) {
        const lowrank_job_t *jb = &it->jobs[it->q];
        for (; jb->n > 0 && it->i < jb->n_pairs; it->i++) {
            if (jb->pairs[it->i]->rank > 0)
                return true;
            /* a rank-0 pair has no tasks and no part of t */
        }
    }
    return false;
}

static bool titer_init(titer_t *it, const lowrank_job_t *jobs, int n_jobs, float *t)
{
    *it = (titer_t){.jobs = jobs, .n_jobs = n_jobs, .tj = t, .t0 = t};
    return titer_settle(it);
}

/* Advances it to task target (>= it->idx); false when there is none. */
static bool titer_seek(titer_t *it, int64_t target)
{
    while (it->idx < target) {
        if (it->q >= it->n_jobs)
            return false;
        const lowrank_job_t *jb = &it->jobs[it->q];
        const lowrank_t *lr = jb->pairs[it->i];
        it->idx++;
        if ((it->k0 += LOWRANK_KS) < lr->rank)
            continue;
        it->k0 = 0;
        if ((it->j0 += LOWRANK_ROWS) < jb->n)
            continue;
        it->j0 = 0;
        it->tj += (size_t)jb->n * (size_t)lr->rank;
        it->i++;
        if (!titer_settle(it))
            return false;
    }
    return it->q < it->n_jobs;
}

/* The end of the block of ranks task it sums (k0 .. k1) */
static int titer_k1(const titer_t *it)
{
    const lowrank_t *lr = it->jobs[it->q].pairs[it->i];
    return it->k0 + LOWRANK_KS < lr->rank ? it->k0 + LOWRANK_KS : lr->rank;
}

/* The A rows task it reads: *rows rows of *rb bytes from the result */
static const uint8_t *titer_a(const titer_t *it, int *rows, size_t *rb)
{
    const lowrank_t *lr = it->jobs[it->q].pairs[it->i];
    const matmul_weight_t *a = lr->a8.data ? &lr->a8 : &lr->a;
    *rows = titer_k1(it) - it->k0;
    *rb = a->row_bytes;
    return a->data + (size_t)it->k0 * a->row_bytes;
}

void lowrank_prefetch_a(const lowrank_job_t *jobs, int n_jobs, int part, int n_parts, size_t max_bytes)
{
    size_t total = 0;
    lowrank_phase_t ph;
    lowrank_phase_init(&ph, jobs, n_jobs);
    if (ph.n_tasks <= 0 || n_parts <= 0 || part < 0 || part >= n_parts)
        return;
    const int64_t i0 = ph.n_tasks * part / n_parts, i1 = ph.n_tasks * (part + 1) / n_parts;
    titer_t it;
    if (i0 >= i1 || !titer_init(&it, jobs, n_jobs, NULL) || !titer_seek(&it, i0))
        return;
    const uint8_t *sp = NULL;
    size_t sn = 0;
    for (int64_t i = i0; i < i1; i++) {
        if (i > i0 && !titer_seek(&it, i))
            break;
        int rows;
        size_t rb;
        const uint8_t *p = titer_a(&it, &rows, &rb);
        const size_t b = (size_t)rows * rb;
        if ((total += b) > max_bytes)
            break;
        if (sp && p == sp + sn) {
            sn += b;
        } else if (!sp || p < sp || p + b > sp + sn) { /* a later block of rows reads the same A again */
            if (sp)
                pfq_push_bg(sp, sn);
            sp = p;
            sn = b;
        }
    }
    if (sp)
        pfq_push_bg(sp, sn);
}

/* Moves it to task target (>= 0), from the start when target is behind it
 * (a task stolen from the back of another thread's range); false when
 * there is none. */
static bool titer_goto(titer_t *it, int64_t target)
{
    if (target < it->idx && !titer_init(it, it->jobs, it->n_jobs, it->t0))
        return false;
    return titer_seek(it, target);
}

void lowrank_run_t(const lowrank_job_t *jobs, int n_jobs, float *t, lowrank_phase_t *ph)
{
    dots_fn dots;
    cols_fn cols;
    kernels(&dots, &cols);
    (void)cols;
    /* Every thread walks the same task list in the same order and runs the
     * tasks it claims (in order from a shared counter, or from its range of
     * ph->ws). A thread claims its next task before it runs the current
     * one, so that the current one can ask for the next one's A rows ahead
     * (task_a); it holds at most that one task unstarted. */
    titer_t cur, nx;
    const int64_t c0 = claim_t(ph);
    if (c0 < 0 || !titer_init(&cur, jobs, n_jobs, t) || !titer_goto(&cur, c0))
        return;
    for (bool first = true;; first = false) {
        nx = cur;
        const int64_t c1 = claim_t(ph);
        const bool more = c1 >= 0 && titer_goto(&nx, c1);
        int nxt_rows = 0;
        size_t nxt_rb = 0;
        const uint8_t *nxt = more ? titer_a(&nx, &nxt_rows, &nxt_rb) : NULL;
        const lowrank_job_t *jb = &jobs[cur.q];
        const lowrank_t *lr = jb->pairs[cur.i];
        const int nr = jb->n - cur.j0 < LOWRANK_ROWS ? jb->n - cur.j0 : LOWRANK_ROWS;
        task_a(dots, jb, lr, cur.tj, cur.j0, nr, cur.k0, titer_k1(&cur), nxt, nxt_rows, nxt_rb, first);
        atomic_fetch_add_explicit(&ph->done, 1, memory_order_release);
        if (!more)
            return;
        cur = nx;
    }
}

void lowrank_prefetch_cols(const lowrank_job_t *jobs, int n_jobs, int64_t o0, int64_t o1)
{
    for (int q = 0; q < n_jobs; q++) {
        const lowrank_job_t *jb = &jobs[q];
        if (jb->n <= 0)
            continue;
        for (int i = 0; i < jb->n_pairs; i++) {
            const lowrank_t *lr = jb->pairs[i];
            const int64_t out = lr->b.rows, end = o1 < out ? o1 : out;
            if (o0 >= end)
                continue;
            const size_t eb = elem_bytes(lr->bt.type);
            pfq_push(lr->bt.data + (size_t)o0 * (size_t)lr->rank * eb, (size_t)(end - o0) * (size_t)lr->rank * eb);
            if (lr->bt_d)
                pfq_push(lr->bt_d + o0, (size_t)(end - o0) * sizeof(float));
        }
    }
}

void lowrank_run_cols(const lowrank_job_t *jobs, int n_jobs, const float *t, int64_t o0, int64_t o1)
{
    assert(o0 % LOWRANK_COLS == 0);
    dots_fn dots;
    cols_fn cols;
    kernels(&dots, &cols);
    (void)dots;
    const float *tj = t;
    for (int q = 0; q < n_jobs; q++) {
        const lowrank_job_t *jb = &jobs[q];
        if (jb->n > 0 && jb->n_pairs > 0) {
            const int64_t out = jb->pairs[0]->b.rows, end = o1 < out ? o1 : out;
            for (int64_t o = o0; o < end; o += LOWRANK_COLS)
                task_b(cols, jb, tj, o, o + LOWRANK_COLS < end ? o + LOWRANK_COLS : end,
                       o + LOWRANK_COLS >= end && q + 1 < n_jobs ? &jobs[q + 1] : NULL);
        }
        for (int i = 0; i < jb->n_pairs; i++)
            tj += (size_t)(jb->n > 0 ? jb->n : 0) * (size_t)jb->pairs[i]->rank;
    }
}

int lowrank_apply(const lowrank_job_t *jobs, int n_jobs, float *t, int n_threads)
{
    if (lowrank_check(jobs, n_jobs) != 0)
        return -1;
    bool any = false;
    for (int jb = 0; jb < n_jobs; jb++)
        any |= jobs[jb].n > 0 && jobs[jb].n_pairs > 0;
    if (!any)
        return 0;
    dots_fn dots;
    cols_fn cols;
    kernels(&dots, &cols);
    (void)dots; /* phase 1 picks its own (lowrank_run_t) */
    lowrank_phase_t ph;
    lowrank_phase_init(&ph, jobs, n_jobs);
    atomic_llong next_b = 0;
#pragma omp parallel num_threads(n_threads > 0 ? n_threads : 1)
    {
        lowrank_run_t(jobs, n_jobs, t, &ph);
#pragma omp barrier
        int64_t want = claim(&next_b), idx = 0;
        const float *tj = t;
        for (int q = 0; q < n_jobs; q++) {
            const lowrank_job_t *jb = &jobs[q];
            if (jb->n == 0 || jb->n_pairs == 0)
                continue;
            const int64_t out = jb->pairs[0]->b.rows;
            for (int64_t o0 = 0; o0 < out; o0 += LOWRANK_COLS, idx++) {
                if (idx != want)
                    continue;
                task_b(cols, jb, tj, o0, o0 + LOWRANK_COLS < out ? o0 + LOWRANK_COLS : out, NULL);
                want = claim(&next_b);
            }
            for (int i = 0; i < jb->n_pairs; i++)
                tj += (size_t)jb->n * (size_t)jb->pairs[i]->rank;
        }
    }
    return 0;
}

/* ---- ISA choice --------------------------------------------------------- */

static _Atomic int g_isa; /* 0: the default */

qgemm_isa_t lowrank_isa(void)
{
    int v = atomic_load_explicit(&g_isa, memory_order_relaxed);
    if (v)
        return (qgemm_isa_t)v;
#ifdef VMATH_X86
    /* AVX-512 when the int8 kernels run it (PAGODA_ISA=avx512vnni or amx, or
     * the default on such a CPU), else AVX2 + FMA + F16C unless PAGODA_ISA
     * says scalar */
    const qgemm_isa_t q = qgemm_isa_default();
    if ((q == QGEMM_ISA_AVX512VNNI || q == QGEMM_ISA_AMX) && cpu_has_avx2_fma_f16c())
        return QGEMM_ISA_AVX512VNNI;
    if (q != QGEMM_ISA_SCALAR && cpu_has_avx2_fma_f16c())
        return QGEMM_ISA_AVX2;
#endif
    return QGEMM_ISA_SCALAR;
}

int lowrank_set_isa(qgemm_isa_t isa)
{
    if (isa != QGEMM_ISA_AUTO && isa != QGEMM_ISA_SCALAR && isa != QGEMM_ISA_AVX2 && isa != QGEMM_ISA_AVX512VNNI)
        return -1;
#ifdef VMATH_X86
    if ((isa == QGEMM_ISA_AVX2 && !cpu_has_avx2_fma_f16c()) ||
        (isa == QGEMM_ISA_AVX512VNNI && !(cpu_has_avx2_fma_f16c() && qgemm_isa_available(QGEMM_ISA_AVX512VNNI))))
        return -1;
#else
    if (isa != QGEMM_ISA_AUTO && isa != QGEMM_ISA_SCALAR)
        return -1;
#endif
    atomic_store_explicit(&g_isa, (int)isa, memory_order_relaxed);
    return 0;
}

/* Element (row, col) of an F32 or F16 factor. */
static double elem(const matmul_weight_t *w, int64_t row, int64_t col)
{
    const uint8_t *p = w->data + (size_t)row * w->row_bytes;
    return w->type == GGML_TYPE_F16 ? (double)quant_fp16_to_fp32(((const uint16_t *)p)[col])
                                    : (double)((const float *)p)[col];
}

/* q[0..n) = round(v[i] / d), d = max |v| / 127 (0 when every v is 0):
 * |v[i] - d · q[i]| <= d / 2. Returns d. */
static float quant_i8(const float *v, int64_t n, int8_t *q, int64_t stride)
{
    float m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(v[i]));
    const float d = m / 127.0f, inv = m > 0 ? 127.0f / m : 0;
    for (int64_t i = 0; i < n; i++) {
        long r = lrintf(v[i] * inv);
        q[i * stride] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    return d;
}

static size_t up64(size_t n)
{
    return (n + 63) / 64 * 64;
}

size_t lowrank_copy_bytes(int64_t r, int64_t in, int64_t out, uint32_t b_type, int int8)
{
    if (r <= 0 || in <= 0 || out <= 0)
        return 0;
    if (!int8)
        return up64((size_t)r * (size_t)out * elem_bytes(b_type));
    return up64((size_t)r * (size_t)in + 64) + up64((size_t)r * (size_t)out + 64) + up64((size_t)r * sizeof(float)) +
           up64((size_t)out * sizeof(float));
}

/* The int8 copies in mem: A per row (a8, a_d), Bᵀ's panels per output (bt,
 * bt_d: the scale of B's row o). */
static void prepare_i8(lowrank_t *lr, uint8_t *mem)
{
    const int64_t in = lr->a.cols, out = lr->b.rows, r = lr->rank;
    int8_t *a8 = (int8_t *)mem;
    int8_t *bt = a8 + up64((size_t)r * (size_t)in + 64);
    float *a_d = (float *)(void *)((uint8_t *)bt + up64((size_t)r * (size_t)out + 64));
    float *bt_d = (float *)(void *)((uint8_t *)a_d + up64((size_t)r * sizeof(float)));
    float *row = xmalloc((size_t)(in > r ? in : r) * sizeof(float));
    for (int64_t k = 0; k < r; k++) {
        for (int64_t i = 0; i < in; i++)
            row[i] = (float)elem(&lr->a, k, i);
        a_d[k] = quant_i8(row, in, a8 + (size_t)k * (size_t)in, 1);
    }
    for (int64_t o0 = 0; o0 < out; o0 += LOWRANK_COLS) {
        const int64_t w = out - o0 < LOWRANK_COLS ? out - o0 : LOWRANK_COLS;
        int8_t *panel = bt + (size_t)o0 * (size_t)r;
        for (int64_t o = 0; o < w; o++) {
            for (int64_t k = 0; k < r; k++)
                row[k] = (float)elem(&lr->b, o0 + o, k);
            bt_d[o0 + o] = quant_i8(row, r, panel + o, w);
        }
    }
    free(row);
    lr->a8 = (matmul_weight_t){.type = LOWRANK_I8, .rows = r, .cols = in, .row_bytes = (size_t)in,
                               .data = (const uint8_t *)a8};
    lr->a_d = a_d;
    lr->bt = (matmul_weight_t){.type = LOWRANK_I8, .rows = r, .cols = out, .row_bytes = (size_t)out,
                               .data = (const uint8_t *)bt};
    lr->bt_d = bt_d;
}

int lowrank_prepare_in(lowrank_t *lr, int int8, void *mem)
{
    if (pair_check(lr) != 0)
        return -1;
    lowrank_release(lr);
    if (int8) {
        prepare_i8(lr, mem);
        return 0;
    }
    const size_t eb = elem_bytes(lr->b.type);
    const int64_t out = lr->b.rows, r = lr->rank;
    uint8_t *bt = mem;
    /* panel by panel of LOWRANK_COLS outputs (a phase 2 task's), each
     * (r, w) row-major from element o0 · r: a task streams r · w
     * contiguous elements (rows of a whole Bᵀ lie 2 · out bytes apart, 4 KiB
     * for out = 2048 in F16, all in one L1 set) */
    for (int64_t o0 = 0; o0 < out; o0 += LOWRANK_COLS) {
        const int64_t w = out - o0 < LOWRANK_COLS ? out - o0 : LOWRANK_COLS;
        uint8_t *panel = bt + (size_t)o0 * (size_t)r * eb;
        for (int64_t o = 0; o < w; o++)
            for (int64_t k = 0; k < r; k++)
                memcpy(panel + ((size_t)k * (size_t)w + (size_t)o) * eb,
                       lr->b.data + (size_t)(o0 + o) * lr->b.row_bytes + (size_t)k * eb, eb);
    }
    lr->bt = (matmul_weight_t){.type = lr->b.type, .rows = r, .cols = out, .row_bytes = (size_t)out * eb, .data = bt};
    return 0;
}

int lowrank_prepare(lowrank_t *lr, int int8)
{
    if (pair_check(lr) != 0)
        return -1;
    void *mem = xaligned_alloc(lowrank_copy_bytes(lr->rank, lr->a.cols, lr->b.rows, lr->b.type, int8));
    int rc = lowrank_prepare_in(lr, int8, mem);
    assert(rc == 0);
    (void)rc;
    lr->own = mem;
    return 0;
}

void lowrank_release(lowrank_t *lr)
{
    if (!lr)
        return;
    free(lr->own);
    lr->own = NULL;
    lr->bt = lr->a8 = (matmul_weight_t){0};
    lr->a_d = lr->bt_d = NULL;
}

/* Element (row, col) of A or B as the pair's update uses it: the int8 copy
 * times its scale for an int8 pair (exact in double), else the factor. */
static double elem_a(const lowrank_t *lr, int64_t k, int64_t i)
{
    if (!lr->a8.data)
        return elem(&lr->a, k, i);
    return (double)lr->a_d[k] * (double)((const int8_t *)lr->a8.data)[(size_t)k * (size_t)lr->a8.cols + (size_t)i];
}

static double elem_b(const lowrank_t *lr, int64_t o, int64_t k)
{
    if (!lr->a8.data)
        return elem(&lr->b, o, k);
    const int64_t r = lr->rank, out = lr->b.rows, o0 = o / LOWRANK_COLS * LOWRANK_COLS;
    const int64_t w = out - o0 < LOWRANK_COLS ? out - o0 : LOWRANK_COLS;
    const int8_t *panel = (const int8_t *)lr->bt.data + (size_t)o0 * (size_t)r;
    return (double)lr->bt_d[o] * (double)panel[(size_t)k * (size_t)w + (size_t)(o - o0)];
}

void lowrank_add_ref(const lowrank_t *lr, float s, const float *x, int64_t ldx, const int32_t *rows, int n,
                     float *y, int64_t ldy)
{
    if (pair_check(lr) != 0 || n < 0)
        return;
    const int64_t in = lr->a.cols, out = lr->b.rows, r = lr->rank;
    double *t = xmalloc((size_t)r * sizeof(double));
    for (int j = 0; j < n; j++) {
        const float *xr = x + (size_t)rows[j] * ldx;
        for (int64_t k = 0; k < r; k++) {
            double acc = 0;
            for (int64_t i = 0; i < in; i++)
                acc += (double)xr[i] * elem_a(lr, k, i);
            t[k] = acc;
        }
        float *yr = y + (size_t)rows[j] * ldy;
        for (int64_t o = 0; o < out; o++) {
            double acc = 0;
            for (int64_t k = 0; k < r; k++)
                acc += t[k] * elem_b(lr, o, k);
            yr[o] = (float)((double)yr[o] + (double)s * acc);
        }
    }
    free(t);
}
