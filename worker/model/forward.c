/* forward.c — batched llama/qwen2 forward pass over a paged KV cache (see
 * forward.h). Reads like the math, one comment per step; every scratch
 * pointer carries its shape. R = rows of the current batch (<= max_rows). */
#include "worker/model/forward.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "common/xalloc.h"
#include "worker/kernels/matmul.h"
#include "worker/kernels/attention.h"

struct forward {
    const model_t *m;
    int max_rows;
    int n_threads;
    matmul_t *mm;        /* dequant tile scratch for quantized weights */
    /* activations, row-major, one row per batch row */
    float *x;            /* (max_rows, dim)    residual stream */
    float *xb;           /* (max_rows, dim)    normed input of a sublayer / output proj result */
    float *q;            /* (max_rows, q_dim)  queries, then rotated */
    float *k;            /* (max_rows, kv_dim) keys of this step's rows, rotated */
    float *v;            /* (max_rows, kv_dim) values of this step's rows */
    float *att;          /* (max_rows, q_dim)  attention output, heads concatenated */
    float *hg;           /* (max_rows, ffn)    gate projection, then silu(gate) * up */
    float *hu;           /* (max_rows, ffn)    up projection */
    float *rope_cos;     /* (max_rows, rope_dim/2) cos(pos * theta_i) */
    float *rope_sin;     /* (max_rows, rope_dim/2) sin(pos * theta_i) */
    float *scores;       /* (n_threads, scores_ld) attention weights, one row per thread */
    size_t scores_ld;    /* ctx rounded up to 16 floats (no false sharing) */
    int32_t *wanted;     /* (max_rows)         indices of rows with want_logits */
    char err[160];
};

/* Threads for a parallel region touching `work` floats: below the threshold
 * the region runs on the calling thread, because waking the pool and the
 * closing barrier cost more than they save (and on a loaded machine a
 * barrier waits for a descheduled thread). */
#define FWD_PAR_MIN_WORK 32768
__attribute__((unused)) static int nth(const forward_t *f, size_t work)
{
    return work >= FWD_PAR_MIN_WORK ? f->n_threads : 1;
}

static int bad(forward_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(forward_t *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return -1;
}

int forward_set_int8(forward_t *f, bool on)
{
    if (!on) {
        matmul_free(&f->mm);
        f->mm = matmul_new(f->m->max_cols, f->n_threads);
        return 0;
    }
    if (matmul_use_int8(f->mm, f->max_rows) != 0)
        return -1;
    /* BF16 weights on AVX512-BF16 (1 = not on this CPU: exact path) */
    return matmul_use_bf16(f->mm, f->max_rows) < 0 ? -1 : 0;
}

forward_t *forward_new(const model_t *m, int max_rows, int n_threads)
{
    const model_config_t *c = &m->cfg;
    forward_t *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->max_rows = max_rows > 0 ? max_rows : 1;
    f->n_threads = n_threads > 0 ? n_threads : 2;
    f->mm = matmul_new(m->max_cols, f->n_threads);
    size_t R = (size_t)f->max_rows, half = (size_t)c->rope_dim / 2;
    /* zeroed here so the pages are mapped now, not in the first step */
#define ALLOC(n) memset(xaligned_alloc((n) * sizeof(float)), 0, (n) * sizeof(float))
    f->x = ALLOC(R * c->dim);
    f->xb = ALLOC(R * c->dim);
    f->q = ALLOC(R * c->q_dim);
    f->k = ALLOC(R * c->kv_dim);
    f->v = ALLOC(R * c->kv_dim);
    f->att = ALLOC(R * c->q_dim);
    f->hg = ALLOC(R * c->ffn_dim);
    f->hu = ALLOC(R * c->ffn_dim);
    f->rope_cos = ALLOC(R * half + 1);
    f->rope_sin = ALLOC(R * half + 1);
    f->scores_ld = ((size_t)c->ctx + 15) / 16 * 16;
    f->scores = ALLOC((size_t)f->n_threads * f->scores_ld);
#undef ALLOC
    f->wanted = xmalloc(R * sizeof(int32_t));
    return f;
}

void forward_free(forward_t **fp)
{
    if (!fp || !*fp)
        return;
    forward_t *f = *fp;
    matmul_free(&f->mm);
    free(f->x);
    free(f->xb);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->hg);
    free(f->hu);
    free(f->rope_cos);
    free(f->rope_sin);
    free(f->scores);
    free(f->wanted);
    free(f);
    *fp = NULL;
}

const char *forward_error(const forward_t *f)
{
    return f->err;
}

int forward_max_rows(const forward_t *f)
{
    return f->max_rows;
}

/* Every index in the batch is checked before anything is written. */
static int validate(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv)
{
    const model_config_t *c = &f->m->cfg;
    if (b->n_rows < 0 || b->n_rows > f->max_rows)
        return bad(f, "n_rows %d outside [0, %d]", b->n_rows, f->max_rows);
    if (b->n_rows == 0)
        return 0;
    if (!b->token || !b->pos || !b->seq || !b->want_logits || !b->block_tables || b->n_seq < 1)
        return bad(f, "batch arrays missing");
    if (!kv || !kv->k || !kv->v || kv->n_layer != c->n_layer || kv->kv_dim != c->kv_dim ||
        kv->block_size < 1 || kv->n_blocks < 1 || kv_type_size(kv->type) == 0)
        return bad(f, "kv_store shape does not fit the model (n_layer %d kv_dim %d) or has an unknown type",
                   c->n_layer, c->kv_dim);
    for (int r = 0; r < b->n_rows; r++) {
        int32_t t = b->token[r], p = b->pos[r], s = b->seq[r];
        if (t < 0 || t >= c->vocab)
            return bad(f, "row %d: token %d outside [0, %d)", r, t, c->vocab);
        if (p < 0 || p >= c->ctx)
            return bad(f, "row %d: position %d outside [0, %d)", r, p, c->ctx);
        if (s < 0 || s >= b->n_seq || !b->block_tables[s])
            return bad(f, "row %d: sequence %d outside [0, %d) or without block table", r, s, b->n_seq);
        int32_t last = p / kv->block_size;
        if (b->n_blocks && last >= b->n_blocks[s])
            return bad(f, "row %d: position %d needs block %d, sequence %d has %d", r, p, last, s, b->n_blocks[s]);
        for (int32_t i = 0; i <= last; i++) {
            int32_t pb = b->block_tables[s][i];
            if (pb < 0 || pb >= kv->n_blocks)
                return bad(f, "sequence %d: block table entry %d = %d outside [0, %d)", s, i, pb, kv->n_blocks);
        }
    }
    return 0;
}

/* ---- vector kernels -------------------------------------------------------
 *
 * AVX2+FMA(+F16C) versions chosen at run time, portable C otherwise. Each computes a
 * row's values in a fixed order that depends only on that row (never on the
 * batch), so batching and chunking do not change results. */

#include "worker/kernels/vmath.h"
#ifdef VMATH_X86
#define FWD_X86 1
#define AVX2_FN VMATH_FN

/* h[i] = silu(g[i]) * u[i] = g / (1 + e^-g) * u, n elements. */
AVX2_FN static void silu_mul_avx2(float *h, const float *g, const float *u, size_t n)
{
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), lim = _mm256_set1_ps(80.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        /* e^-g overflows below g = -88: clamp (silu is -0 there anyway) */
        __m256 e = vmath_exp8(_mm256_min_ps(_mm256_sub_ps(_mm256_setzero_ps(), gv), lim));
        __m256 sv = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(h + i, _mm256_mul_ps(sv, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static int have_avx2(void)
{
    return cpu_has_avx2_fma_f16c();
}
#else
static int have_avx2(void) { return 0; }
#endif

static void silu_mul(float *h, const float *g, const float *u, size_t n)
{
#ifdef FWD_X86
    if (have_avx2()) {
        silu_mul_avx2(h, g, u, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        h[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* ---- steps ------------------------------------------------------------------ */

#ifdef FWD_X86
/* add_rmsnorm_row for n % 16 == 0: the sum of squares in double, 16 partial
 * sums (4 vectors of 4) combined in a fixed order, so a row's result depends
 * on that row only. The scalar loop was one serial chain of double adds
 * (~1 us per 768-wide row, 25 calls per step on the calling thread). */
AVX2_FN static void add_rmsnorm_row_avx2(float *x, const float *d, float *out, const float *w, int n, float eps)
{
    __m256d s0 = _mm256_setzero_pd(), s1 = s0, s2 = s0, s3 = s0;
    for (int i = 0; i < n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        if (d) {
            a = _mm256_add_ps(a, _mm256_loadu_ps(d + i));
            b = _mm256_add_ps(b, _mm256_loadu_ps(d + i + 8));
            _mm256_storeu_ps(x + i, a);
            _mm256_storeu_ps(x + i + 8, b);
        }
        __m256d a0 = _mm256_cvtps_pd(_mm256_castps256_ps128(a)), a1 = _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1));
        __m256d b0 = _mm256_cvtps_pd(_mm256_castps256_ps128(b)), b1 = _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1));
        s0 = _mm256_fmadd_pd(a0, a0, s0);
        s1 = _mm256_fmadd_pd(a1, a1, s1);
        s2 = _mm256_fmadd_pd(b0, b0, s2);
        s3 = _mm256_fmadd_pd(b1, b1, s3);
    }
    __m256d t = _mm256_add_pd(_mm256_add_pd(s0, s1), _mm256_add_pd(s2, s3));
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(t), _mm256_extractf128_pd(t, 1));
    double ss = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    const __m256 inv = _mm256_set1_ps((float)(1.0 / sqrt(ss / n + eps)));
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv), _mm256_loadu_ps(w + i)));
}
#endif

/* Row r: x[r] += d[r] (when d), then out[r] = x[r] / sqrt(mean(x[r]²) + eps) * w.
 * Fuses the residual add of one sublayer with the norm of the next. */
static void add_rmsnorm_row(float *x, const float *d, float *out, const float *w, int n, float eps)
{
#ifdef FWD_X86
    if (n % 16 == 0 && have_avx2()) {
        add_rmsnorm_row_avx2(x, d, out, w, n, eps);
        return;
    }
#endif
    if (d)
        for (int i = 0; i < n; i++)
            x[i] += d[i];
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / n + eps));
    for (int i = 0; i < n; i++)
        out[i] = x[i] * inv * w[i];
}

/* x (R, n) += d (when d); out (R, n) = rmsnorm(x) * w, row by row. */
static void add_rmsnorm(forward_t *f, float *x, const float *d, float *out, const float *w, int R, int n,
                        float eps)
{
#pragma omp parallel for num_threads(nth(f, (size_t)R * n)) schedule(static)
    for (int r = 0; r < R; r++)
        add_rmsnorm_row(x + (size_t)r * n, d ? d + (size_t)r * n : NULL, out + (size_t)r * n, w, n, eps);
}

/* Rotates the first rope_dim dims of each of n_heads heads of row r of v
 * (n_heads*head_dim). Normal pairing: (2i, 2i+1); NeoX: (i, i+half). */
static void rope_row(const forward_t *f, float *v, int r, int n_heads)
{
    const model_config_t *c = &f->m->cfg;
    const int half = c->rope_dim / 2, hd = c->head_dim;
    const float *cs = f->rope_cos + (size_t)r * half, *sn = f->rope_sin + (size_t)r * half;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            int i0 = c->rope_neox ? i : 2 * i, i1 = c->rope_neox ? i + half : 2 * i + 1;
            float a = x[i0], bb = x[i1];
            x[i0] = a * cs[i] - bb * sn[i];
            x[i1] = a * sn[i] + bb * cs[i];
        }
    }
}

static void add_bias_row(float *y, const float *b, int n)
{
    if (b)
        for (int i = 0; i < n; i++)
            y[i] += b[i];
}

/* After the Q/K/V projections, per row: biases, rope of q and k by the row's
 * position, then k and v into the cache slot of (layer l, row's position). */
static void qkv_post(forward_t *f, const model_layer_t *L, const fwd_batch_t *b, const kv_store_t *kv, int l)
{
    const model_config_t *c = &f->m->cfg;
    const int R = b->n_rows;
#pragma omp parallel for num_threads(nth(f, (size_t)R * (c->q_dim + 2 * c->kv_dim) * 2)) schedule(static)
    for (int r = 0; r < R; r++) {
        float *q = f->q + (size_t)r * c->q_dim, *k = f->k + (size_t)r * c->kv_dim, *v = f->v + (size_t)r * c->kv_dim;
        add_bias_row(q, L->bq, c->q_dim);
        add_bias_row(k, L->bk, c->kv_dim);
        add_bias_row(v, L->bv, c->kv_dim);
        rope_row(f, q, r, c->n_head);
        rope_row(f, k, r, c->n_kv_head);
        const int32_t *bt = b->block_tables[b->seq[r]];
        int p = b->pos[r];
        int blk = bt[p / kv->block_size], slot = p % kv->block_size;
        kv_store_write(kv->type, kv_store_k_at(kv, l, blk, slot), k, (size_t)c->kv_dim);
        kv_store_write(kv->type, kv_store_v_at(kv, l, blk, slot), v, (size_t)c->kv_dim);
    }
}

static void mm(forward_t *f, const matmul_weight_t *w, const float *x, int R, float *y)
{
    int rc = matmul_run(f->mm, w, x, R, y);
    assert(rc == 0 && "weights were validated at load");
    (void)rc;
}

/* Several projections of the same input in one parallel region. */
static void mm_multi(forward_t *f, const matmul_weight_t *const *ws, int n, const float *x, int R,
                     float *const *ys)
{
    int rc = matmul_run_multi(f->mm, ws, n, x, R, ys);
    assert(rc == 0 && "weights were validated at load");
    (void)rc;
}

/* Attention work below which one thread does it all (floats of K and V
 * read; ~10 us of AVX2 work, less than waking a thread and the barrier). */
#define FWD_ATT_PAR_MIN 32768

/* Causal attention of every (row, head) against its sequence's cached K/V
 * for layer l. q (R, q_dim) → att (R, q_dim). */
static void attention(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv, int l)
{
    const model_config_t *c = &f->m->cfg;
    const int hd = c->head_dim, group = c->n_head / c->n_kv_head;
    const float scale = 1.0f / sqrtf((float)hd);
    const int R = b->n_rows;
    size_t work = 0;  /* floats of K and V read: Σ_r (pos+1) * q_dim * 2 */
    for (int r = 0; r < R; r++)
        work += (size_t)(b->pos[r] + 1) * (size_t)c->q_dim * 2;
    const int n_par = work >= FWD_ATT_PAR_MIN ? f->n_threads : 1;
    (void)n_par;  /* unused when compiled without OpenMP */
#pragma omp parallel for num_threads(n_par) schedule(dynamic, 1) collapse(2)
    for (int r = 0; r < R; r++) {
        for (int h = 0; h < c->n_head; h++) {
            const int32_t *bt = b->block_tables[b->seq[r]];
            const int n_pos = b->pos[r] + 1;        /* attends to positions 0..pos */
            const int kvo = (h / group) * hd;       /* offset of this head's kv head in a K/V vector */
            const float *qh = f->q + (size_t)r * c->q_dim + (size_t)h * hd;  /* (hd) */
            float *sc = f->scores + (size_t)omp_get_thread_num() * f->scores_ld; /* (n_pos) */
            float *out = f->att + (size_t)r * c->q_dim + (size_t)h * hd;     /* (hd) */
            attention_head(qh, kv, l, bt, 0, n_pos, kvo, hd, scale, 0.0f, sc, out);
        }
    }
}

/* Q/K/V projections, biases, rope, cache write and attention in ONE
 * parallel region: task g = kv head g with its group of query heads. The
 * task computes the q/k/v columns of its heads for all rows, writes its
 * slice of every row's K/V, then attends with them: attention of head h
 * only reads kv head g's slice, so no barrier is needed between the
 * projections and the attention (the two-region path has one). Requires
 * head_dim % 16 == 0 (matmul_run_range's column alignment). */
static void qkv_attention_by_head(forward_t *f, const model_layer_t *L, const fwd_batch_t *b, const kv_store_t *kv,
                                  int l)
{
    const model_config_t *c = &f->m->cfg;
    const int R = b->n_rows, hd = c->head_dim, group = c->n_head / c->n_kv_head;
    const float scale = 1.0f / sqrtf((float)hd);
    int rc = matmul_prepare(f->mm, f->xb, R, c->dim);
    assert(rc == 0);
    (void)rc;
#pragma omp parallel for num_threads(f->n_threads) schedule(dynamic, 1)
    for (int g = 0; g < c->n_kv_head; g++) {
        const int t = omp_get_thread_num();
        const int64_t q0 = (int64_t)g * group * hd, k0 = (int64_t)g * hd;
        const int nq = group * hd;
        int bad_mm = matmul_run_range(f->mm, &L->wq, f->xb, R, q0, q0 + nq, f->q, t) |
                     matmul_run_range(f->mm, &L->wk, f->xb, R, k0, k0 + hd, f->k, t) |
                     matmul_run_range(f->mm, &L->wv, f->xb, R, k0, k0 + hd, f->v, t);
        assert(bad_mm == 0 && "weights were validated at load");
        (void)bad_mm;
        for (int r = 0; r < R; r++) {
            float *q = f->q + (size_t)r * c->q_dim + q0;   /* (group, hd) */
            float *k = f->k + (size_t)r * c->kv_dim + k0;  /* (hd) */
            float *v = f->v + (size_t)r * c->kv_dim + k0;  /* (hd) */
            add_bias_row(q, L->bq ? L->bq + q0 : NULL, nq);
            add_bias_row(k, L->bk ? L->bk + k0 : NULL, hd);
            add_bias_row(v, L->bv ? L->bv + k0 : NULL, hd);
            rope_row(f, q, r, group);
            rope_row(f, k, r, 1);
            const int32_t *bt = b->block_tables[b->seq[r]];
            int p = b->pos[r];
            int blk = bt[p / kv->block_size], slot = p % kv->block_size;
            const size_t at = (size_t)k0 * kv_type_size(kv->type);  /* bytes to this head's slice */
            kv_store_write(kv->type, (char *)kv_store_k_at(kv, l, blk, slot) + at, k, (size_t)hd);
            kv_store_write(kv->type, (char *)kv_store_v_at(kv, l, blk, slot) + at, v, (size_t)hd);
        }
        float *sc = f->scores + (size_t)t * f->scores_ld;
        for (int r = 0; r < R; r++) {
            const int32_t *bt = b->block_tables[b->seq[r]];
            for (int h = 0; h < group; h++) {
                const float *qh = f->q + (size_t)r * c->q_dim + q0 + (size_t)h * hd;
                float *out = f->att + (size_t)r * c->q_dim + q0 + (size_t)h * hd;
                attention_head(qh, kv, l, bt, 0, b->pos[r] + 1, (int)k0, hd, scale, 0.0f, sc, out);
            }
        }
    }
}

/* Batches up to this many rows take qkv_attention_by_head. */
#define FWD_BY_HEAD_MAX_ROWS 8

/* FFN columns per task of ffn_gate_up (a multiple of 16). */
#define FWD_FFN_COLS 64

/* hg (R, ffn) = silu(xb · Wgateᵀ) * (xb · Wupᵀ) in one region: each task
 * takes FWD_FFN_COLS columns of both projections and applies silu * up to
 * them while they are in cache. */
static void ffn_gate_up(forward_t *f, const model_layer_t *L, int R)
{
    const model_config_t *c = &f->m->cfg;
    const int ffn = c->ffn_dim, n_chunks = (ffn + FWD_FFN_COLS - 1) / FWD_FFN_COLS;
    int rc = matmul_prepare(f->mm, f->xb, R, c->dim);
    assert(rc == 0);
    (void)rc;
#pragma omp parallel for num_threads(f->n_threads) schedule(dynamic, 1)
    for (int ch = 0; ch < n_chunks; ch++) {
        const int t = omp_get_thread_num();
        const int64_t n0 = (int64_t)ch * FWD_FFN_COLS, n1 = n0 + FWD_FFN_COLS < ffn ? n0 + FWD_FFN_COLS : ffn;
        int bad_mm = matmul_run_range(f->mm, &L->w_gate, f->xb, R, n0, n1, f->hg, t) |
                     matmul_run_range(f->mm, &L->w_up, f->xb, R, n0, n1, f->hu, t);
        assert(bad_mm == 0 && "weights were validated at load");
        (void)bad_mm;
        for (int r = 0; r < R; r++) {
            float *h = f->hg + (size_t)r * ffn + n0;
            silu_mul(h, h, f->hu + (size_t)r * ffn + n0, (size_t)(n1 - n0));
        }
    }
}

int forward_run(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv, float *logits)
{
    const model_t *m = f->m;
    const model_config_t *c = &m->cfg;
    f->err[0] = '\0';
    if (validate(f, b, kv) != 0)
        return -1;
    const int R = b->n_rows, dim = c->dim, half = c->rope_dim / 2;
    if (R == 0)
        return 0;

    /* x (R, dim) = token_embd[token[r]] */
#pragma omp parallel for num_threads(nth(f, (size_t)R * dim)) schedule(static)
    for (int r = 0; r < R; r++) {
        int rc = matmul_weight_rows(&m->tok_embd, b->token[r], 1, f->x + (size_t)r * dim);
        assert(rc == 0);
        (void)rc;
    }

    /* rope tables (R, half): angle = pos * pos_scale * inv_freq[i], in double
     * so large positions keep their precision. */
#pragma omp parallel for num_threads(nth(f, (size_t)R * half * 8)) schedule(static)
    for (int r = 0; r < R; r++) {
        double p = (double)b->pos[r] * m->rope_pos_scale;
        for (int i = 0; i < half; i++) {
            double a = p * m->rope_inv_freq[i];
            f->rope_cos[(size_t)r * half + i] = (float)cos(a);
            f->rope_sin[(size_t)r * half + i] = (float)sin(a);
        }
    }

    /* xb (R, dim) = rmsnorm(x) * attn_norm of layer 0; later layers get it
     * fused with the residual add that ends the previous layer. */
    add_rmsnorm(f, f->x, NULL, f->xb, m->layers[0].attn_norm, R, dim, c->norm_eps);
    /* Head-wise fused attention block for small batches, where the saved
     * barrier is a large part of the step; larger batches keep the finer
     * chunks of the two-region path (a thread preempted inside a whole-head
     * task holds the others up longer: measured 32-row decode 551 -> 526
     * tok/s best, 1-row 117 -> 122). Needs the kv heads to spread evenly
     * over the threads (or enough of them that the remainder matters little)
     * and 16-aligned head slices. */
    const bool by_head = R <= FWD_BY_HEAD_MAX_ROWS && c->head_dim % 16 == 0 &&
                         (c->n_kv_head % f->n_threads == 0 || c->n_kv_head >= 4 * f->n_threads);
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer_t *L = &m->layers[l];

        if (by_head) {
            /* everything below in one region, one task per kv head */
            qkv_attention_by_head(f, L, b, kv, l);
        } else {
            /* q (R, q_dim), k, v (R, kv_dim) = xb · W{q,k,v}ᵀ: one region */
            const matmul_weight_t *wqkv[3] = {&L->wq, &L->wk, &L->wv};
            float *const yqkv[3] = {f->q, f->k, f->v};
            mm_multi(f, wqkv, 3, f->xb, R, yqkv);

            /* + biases; rotate q and k by their row's position;
             * cache[l, block_table[pos / bs], pos % bs] = k, v  (all rows before any attends) */
            qkv_post(f, L, b, kv, l);

            /* att (R, q_dim) = softmax(q kᵀ / sqrt(hd), causal) v, per head over its kv head */
            attention(f, b, kv, l);
        }

        /* xb = att · Woᵀ;  x += xb;  xb = rmsnorm(x) * ffn_norm */
        mm(f, &L->wo, f->att, R, f->xb);
        add_rmsnorm(f, f->x, f->xb, f->xb, L->ffn_norm, R, dim, c->norm_eps);

        /* hg (R, ffn) = silu(xb · Wgateᵀ) * (xb · Wupᵀ), one region */
        ffn_gate_up(f, L, R);

        /* xb = hg · Wdownᵀ;  x += xb;  xb = rmsnorm(x) * next layer's attn_norm */
        mm(f, &L->w_down, f->hg, R, f->xb);
        if (l + 1 < c->n_layer)
            add_rmsnorm(f, f->x, f->xb, f->xb, m->layers[l + 1].attn_norm, R, dim, c->norm_eps);
    }

    /* Only wanted rows go through the output head:
     * x[wanted[j]] += xb[wanted[j]] (the last residual), then
     * xb[j] (n_want, dim) = rmsnorm(x[wanted[j]]) * output_norm. */
    int n_want = 0;
    for (int r = 0; r < R; r++)
        if (b->want_logits[r])
            f->wanted[n_want++] = r;
    if (n_want == 0)
        return 0;
    /* in place: row j <= wanted[j] and wanted[] increases, so writing row j
     * never clobbers the delta of a later wanted row */
    for (int j = 0; j < n_want; j++) {
        size_t r = (size_t)f->wanted[j];
        add_rmsnorm_row(f->x + r * dim, f->xb + r * dim, f->xb + (size_t)j * dim, m->output_norm, dim, c->norm_eps);
    }
    /* logits (n_want, vocab) = xb · Woutᵀ */
    mm(f, &m->output, f->xb, n_want, logits);
    return 0;
}
