/* lowrank.c — LoRA pairs' updates of some batch rows, all groups of a step's
 * matrix in one parallel region (see lowrank.h). */
#include "worker/kernels/lowrank.h"

#include <omp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/quant.h"
#include "worker/kernels/vmath.h"

/* Bytes of one element of a factor: F32 4, F16 2, other types 0. */
static size_t elem_bytes(uint32_t type)
{
    return type == GGML_TYPE_F32 ? 4 : type == GGML_TYPE_F16 ? 2 : 0;
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

static int job_check(const lowrank_job_t *j)
{
    if (j->n < 0 || j->n_pairs < 0 || (j->n > 0 && j->n_pairs > 0 && (!j->rows || !j->x || !j->y || !j->s)))
        return -1;
    for (int i = 0; i < j->n_pairs; i++) {
        const lowrank_t *lr = j->pairs[i];
        if (pair_check(lr) != 0 || lr->a.cols != j->pairs[0]->a.cols || lr->b.rows != j->pairs[0]->b.rows ||
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

/* out[r] = xs[r][0..len) · w[0..len) for r < nr (nr <= LOWRANK_ROWS), w F32
 * or F16 (f16: widened exactly): eight float lanes over the multiples of 8,
 * a fixed horizontal sum, then the tail in order. Each row's arithmetic is
 * the same whatever nr is, and an F16 w gives the bits of an F32 w holding
 * the same values. */
#ifdef VMATH_X86
static inline __attribute__((always_inline, target("avx2,fma,f16c"))) void
dots_avx2_n(const float *const *xs, const int nr, const void *wv, const int f16, int64_t len, float *out)
{
    const float *w32 = wv;
    const uint16_t *w16 = wv;
    __m256 acc[LOWRANK_ROWS];
    for (int r = 0; r < nr; r++)
        acc[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
        const __m256 w = f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w16 + i))) : _mm256_loadu_ps(w32 + i);
        for (int r = 0; r < nr; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(xs[r] + i), w, acc[r]);
    }
    for (int r = 0; r < nr; r++) {
        float v = vmath_hsum8(acc[r]);
        for (int64_t k = i; k < len; k++)
            v += xs[r][k] * (f16 ? quant_fp16_to_fp32(w16[k]) : w32[k]);
        out[r] = v;
    }
}

VMATH_FN static void dots_avx2(const float *const *xs, int nr, const void *w, int f16, int64_t len, float *out)
{
#define LOWRANK_DOTS(F)                                    \
    switch (nr) {                                          \
    case 4: dots_avx2_n(xs, 4, w, F, len, out); break;     \
    case 3: dots_avx2_n(xs, 3, w, F, len, out); break;     \
    case 2: dots_avx2_n(xs, 2, w, F, len, out); break;     \
    default: dots_avx2_n(xs, 1, w, F, len, out); break;    \
    }
    if (f16) {
        LOWRANK_DOTS(1)
    } else {
        LOWRANK_DOTS(0)
    }
#undef LOWRANK_DOTS
}
#endif

static void dots_scalar(const float *const *xs, int nr, const void *wv, int f16, int64_t len, float *out)
{
    const float *w32 = wv;
    const uint16_t *w16 = wv;
    for (int r = 0; r < nr; r++) {
        float lane[8] = {0};
        int64_t i = 0;
        for (; i + 8 <= len; i += 8)
            for (int l = 0; l < 8; l++)
                lane[l] += xs[r][i + l] * (f16 ? quant_fp16_to_fp32(w16[i + l]) : w32[i + l]);
        float v = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
        for (int64_t k = i; k < len; k++)
            v += xs[r][k] * (f16 ? quant_fp16_to_fp32(w16[k]) : w32[k]);
        out[r] = v;
    }
}

typedef void (*dots_fn)(const float *const *xs, int nr, const void *w, int f16, int64_t len, float *out);

static inline int64_t claim(atomic_llong *next)
{
    return atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
}

/* Phase 1 task: t rows j0..j0+nr, ranks k0..k1 of pair lr = x[rows] · Aᵀ. */
static void task_a(dots_fn dots, const lowrank_job_t *jb, const lowrank_t *lr, float *t, int j0, int nr, int k0,
                   int k1)
{
    const int64_t in = lr->a.cols, r = lr->rank;
    const float *xs[LOWRANK_ROWS];
    for (int q = 0; q < nr; q++)
        xs[q] = jb->x + (size_t)jb->rows[j0 + q] * (size_t)jb->ldx;
    for (int k = k0; k < k1; k++) {
        float v[LOWRANK_ROWS];
        dots(xs, nr, lr->a.data + (size_t)k * lr->a.row_bytes, lr->a.type == GGML_TYPE_F16, in, v);
        for (int q = 0; q < nr; q++)
            t[(size_t)(j0 + q) * (size_t)r + (size_t)k] = v[q];
    }
}

/* Phase 2 task: y[rows][o0..o1) += s_i · t_i · B_iᵀ for every row of the
 * job, pair by pair in order; t the job's scratch (pair after pair). */
static void task_b(dots_fn dots, const lowrank_job_t *jb, const float *t, int64_t o0, int64_t o1)
{
    for (int j0 = 0; j0 < jb->n; j0 += LOWRANK_ROWS) {
        const int nr = jb->n - j0 < LOWRANK_ROWS ? jb->n - j0 : LOWRANK_ROWS;
        const float *tp = t;
        for (int i = 0; i < jb->n_pairs; i++) {
            const lowrank_t *lr = jb->pairs[i];
            const int64_t r = lr->rank;
            const float s = jb->s[i];
            const float *ts[LOWRANK_ROWS];
            for (int q = 0; q < nr; q++)
                ts[q] = tp + (size_t)(j0 + q) * (size_t)r;
            for (int64_t o = o0; o < o1; o++) {
                float v[LOWRANK_ROWS];
                dots(ts, nr, lr->b.data + (size_t)o * lr->b.row_bytes, lr->b.type == GGML_TYPE_F16, r, v);
                for (int q = 0; q < nr; q++)
                    jb->y[(size_t)jb->rows[j0 + q] * (size_t)jb->ldy + (size_t)o] += s * v[q];
            }
            tp += (size_t)jb->n * (size_t)r;
        }
    }
}

int lowrank_apply(const lowrank_job_t *jobs, int n_jobs, float *t, int n_threads)
{
    if (n_jobs < 0 || (n_jobs > 0 && !jobs))
        return -1;
    bool any = false;
    for (int jb = 0; jb < n_jobs; jb++) {
        if (job_check(&jobs[jb]) != 0)
            return -1;
        any |= jobs[jb].n > 0 && jobs[jb].n_pairs > 0;
    }
    if (!any)
        return 0;
    dots_fn dots = dots_scalar;
#ifdef VMATH_X86
    if (cpu_has_avx2_fma_f16c())
        dots = dots_avx2;
#endif
    /* Every thread walks the same task list in the same order and runs the
     * tasks whose index it claims (dynamic scheduling, no index lookup). */
    atomic_llong next_a = 0, next_b = 0;
#pragma omp parallel num_threads(n_threads > 0 ? n_threads : 1)
    {
        int64_t want = claim(&next_a), idx = 0;
        float *tj = t;
        for (int q = 0; q < n_jobs; q++) {
            const lowrank_job_t *jb = &jobs[q];
            for (int i = 0; i < jb->n_pairs && jb->n > 0; i++) {
                const lowrank_t *lr = jb->pairs[i];
                for (int j0 = 0; j0 < jb->n; j0 += LOWRANK_ROWS)
                    for (int k0 = 0; k0 < lr->rank; k0 += LOWRANK_KS, idx++) {
                        if (idx != want)
                            continue;
                        const int nr = jb->n - j0 < LOWRANK_ROWS ? jb->n - j0 : LOWRANK_ROWS;
                        const int k1 = k0 + LOWRANK_KS < lr->rank ? k0 + LOWRANK_KS : lr->rank;
                        task_a(dots, jb, lr, tj, j0, nr, k0, k1);
                        want = claim(&next_a);
                    }
                tj += (size_t)jb->n * (size_t)lr->rank;
            }
        }
#pragma omp barrier
        want = claim(&next_b);
        idx = 0;
        tj = t;
        for (int q = 0; q < n_jobs; q++) {
            const lowrank_job_t *jb = &jobs[q];
            if (jb->n == 0 || jb->n_pairs == 0)
                continue;
            const int64_t out = jb->pairs[0]->b.rows;
            for (int64_t o0 = 0; o0 < out; o0 += LOWRANK_COLS, idx++) {
                if (idx != want)
                    continue;
                task_b(dots, jb, tj, o0, o0 + LOWRANK_COLS < out ? o0 + LOWRANK_COLS : out);
                want = claim(&next_b);
            }
            for (int i = 0; i < jb->n_pairs; i++)
                tj += (size_t)jb->n * (size_t)jb->pairs[i]->rank;
        }
    }
    return 0;
}

/* Element (row, col) of an F32 or F16 factor. */
static double elem(const matmul_weight_t *w, int64_t row, int64_t col)
{
    const uint8_t *p = w->data + (size_t)row * w->row_bytes;
    return w->type == GGML_TYPE_F16 ? (double)quant_fp16_to_fp32(((const uint16_t *)p)[col])
                                    : (double)((const float *)p)[col];
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
                acc += (double)xr[i] * elem(&lr->a, k, i);
            t[k] = acc;
        }
        float *yr = y + (size_t)rows[j] * ldy;
        for (int64_t o = 0; o < out; o++) {
            double acc = 0;
            for (int64_t k = 0; k < r; k++)
                acc += t[k] * elem(&lr->b, o, k);
            yr[o] = (float)((double)yr[o] + (double)s * acc);
        }
    }
    free(t);
}
