/* forward.c — batched decoder forward pass over a paged KV cache for every
 * architecture model.h loads (see forward.h). Reads like the math, one comment per step; every scratch
 * pointer carries its shape. R = rows of the current batch (<= max_rows). */
#include "worker/model/forward.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/errbuf.h"
#include "common/cpu.h"
#include "common/xalloc.h"
#include "worker/kernels/matmul.h"
#include "worker/kernels/attention.h"
#include "worker/kernels/pfqueue.h"
#include "worker/kernels/spinbar.h"
#include "worker/kernels/worksteal.h"
#include "worker/model/forward_int.h"

static const char *const ph_name[PH_N] = {"embed+rope+norm", "qkv+attention", "qkv", "attention", "wo",
                                           "norms", "gate+up", "down", "lora", "head"};

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* PROF(ph, bytes, statement): times statement into phase ph when profiling */
#define PROF(ph, bytes, ...)                                                  \
    do {                                                                      \
        if (prof) {                                                           \
            double t_ = now_ns();                                             \
            __VA_ARGS__;                                                      \
            f->prof_ns[ph] += now_ns() - t_;                                  \
            f->prof_bytes[ph] += (double)(bytes);                             \
        } else {                                                              \
            __VA_ARGS__;                                                      \
        }                                                                     \
    } while (0)

/* Threads for a parallel region touching `work` floats: below the threshold
 * the region runs on the calling thread, because waking the pool and the
 * closing barrier cost more than they save (and on a loaded machine a
 * barrier waits for a descheduled thread). */
#define FWD_PAR_MIN_WORK 32768

/* FWD_STOP set (forward_set_stop): the pass returns FWD_STOPPED at the
 * next check — between layers and, inside a layer, before its FFN and
 * before the FFN's down projection, the three parts of a layer's matmul
 * work — so a better tier's request waits about a third of a layer, not a
 * whole one. One relaxed load: the bit carries no data. */
static bool stop_set(const forward_t *f)
{
    return f->stop && (atomic_load_explicit(f->stop, memory_order_relaxed) & FWD_STOP);
}

__attribute__((unused)) static int nth(const forward_t *f, size_t work)
{
    return work >= FWD_PAR_MIN_WORK ? f->n_threads : 1;
}

static int bad(forward_t *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(forward_t *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* matmul scratch width: the model's widest row (LoRA updates do not use
 * matmul: lowrank.h) */
static int64_t mm_cols(const model_t *m)
{
    return m->max_cols;
}

int forward_set_int8(forward_t *f, bool on)
{
    if (!on) {
        matmul_free(&f->mm);
        f->mm = matmul_new(mm_cols(f->m), f->n_threads);
        return 0;
    }
    if (matmul_use_int8(f->mm, f->max_rows) != 0)
        return -1;
    /* BF16 weights on AVX512-BF16 (1 = not on this CPU: exact path) */
    return matmul_use_bf16(f->mm, f->max_rows) < 0 ? -1 : 0;
}

void forward_set_lora_fused(forward_t *f, bool on)
{
    f->lora_unfused = !on;
}

void forward_set_one_region(forward_t *f, bool on)
{
    f->multi_region = !on;
}

void forward_set_progress(forward_t *f, _Atomic uint64_t *layers_done)
{
    f->layers_done = layers_done;
}

void forward_set_stop(forward_t *f, const _Atomic uint32_t *word)
{
    f->stop = word;
}

/* Per-thread scratch of attention_row's scores (n_head rows of the model's
 * context) up to which it is used; longer contexts × more heads attend kv
 * head by kv head with a group's rows of scratch (same bits). */
#define FWD_ATT_ROW_SCRATCH ((size_t)4 << 20)

/* n zeroed floats of the scratch mapping, 64-byte aligned (NULL while
 * forward_carve only measures: f->scratch NULL) */
static float *carve(forward_t *f, size_t n)
{
    float *p = f->scratch ? (float *)(f->scratch + f->scratch_bytes) : NULL;
    f->scratch_bytes += (n * sizeof(float) + 63) / 64 * 64;
    return p;
}

/* The activation buffers, carved from one zeroed mapping of huge pages
 * (xhuge_zalloc): run once to measure, once to carve. Nothing is touched
 * here: a step maps the pages it uses, 2 MiB at a time, so a start does
 * not wait for the ~50 MB a 512-row batch of a 1.1B model needs zeroing. */
static void forward_carve(forward_t *f)
{
    const model_t *m = f->m;
    const model_config_t *c = &m->cfg;
    size_t R = (size_t)f->max_rows, half = (size_t)c->rope_dim / 2;
    f->scratch_bytes = 0;
    f->x = carve(f, R * c->dim);
    f->xb = carve(f, R * c->dim);
    f->q = carve(f, R * c->q_dim);
    f->k = carve(f, R * c->kv_dim);
    f->v = carve(f, R * c->kv_dim);
    f->att = carve(f, R * c->q_dim);
    size_t ffn = (size_t)c->ffn_dim;
    if (c->n_expert > 0)
        ffn = (size_t)(c->expert_ffn_dim > c->shexp_ffn_dim ? c->expert_ffn_dim : c->shexp_ffn_dim);
    f->hg = carve(f, R * ffn);
    f->hu = carve(f, R * ffn);
    for (int i = 0; i < 2; i++) {
        f->rope_cos[i] = i == 1 && !m->rope_inv_freq_swa ? f->rope_cos[0] : carve(f, R * half + 1);
        f->rope_sin[i] = i == 1 && !m->rope_inv_freq_swa ? f->rope_sin[0] : carve(f, R * half + 1);
    }
    if (c->n_expert > 0) {
        size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
        f->moe_logits = carve(f, R * E);
        f->moe_wt = carve(f, R * K);
        f->exp_wt = carve(f, E * R);
        f->xe = carve(f, R * c->dim);
        f->ye = carve(f, R * c->dim);
        f->moe_out = carve(f, R * c->dim);
    }
    f->scores = carve(f, (size_t)f->n_threads * (size_t)f->score_rows * f->scores_ld);
    /* LoRA scratch: t (n, r) of every job of one lowrank call; one row of
     * the largest set always fits (lora_add flushes before it is full), and
     * every job of a proj_fused step (it cannot flush) */
    const size_t rf = R < FWD_LORA_FUSED_MAX_ROWS ? R : FWD_LORA_FUSED_MAX_ROWS;
    f->lr_t_cap = (R + LORA_SET_MAX) * LORA_MAX_RANK;
    if (f->lr_t_cap < 3 * rf * LORA_SET_MAX * LORA_MAX_RANK)
        f->lr_t_cap = 3 * rf * LORA_SET_MAX * LORA_MAX_RANK;
    f->lr_t = carve(f, f->lr_t_cap);
}

forward_t *forward_new(const model_t *m, int max_rows, int n_threads)
{
    const model_config_t *c = &m->cfg;
    forward_t *f = xcalloc(1, sizeof *f);
    f->m = m;
    f->max_rows = max_rows > 0 ? max_rows : 1;
    f->n_threads = n_threads > 0 ? n_threads : 2;
    f->mm = matmul_new(mm_cols(m), f->n_threads);
    size_t R = (size_t)f->max_rows;
    f->scores_ld = ((size_t)c->ctx + 15) / 16 * 16;
    f->att_row = (size_t)c->n_head * f->scores_ld * sizeof(float) <= FWD_ATT_ROW_SCRATCH;
    f->score_rows = f->att_row ? c->n_head : c->n_head / c->n_kv_head;
    /* attention_tiles: ATT_TILE_MAX_VECS score rows when they fit the limit too */
    if (f->att_row && f->score_rows < ATT_TILE_MAX_VECS &&
        (size_t)ATT_TILE_MAX_VECS * f->scores_ld * sizeof(float) <= FWD_ATT_ROW_SCRATCH)
        f->score_rows = ATT_TILE_MAX_VECS;
    forward_carve(f);
    f->scratch = xhuge_zalloc(f->scratch_bytes);
    forward_carve(f);
    if (c->n_expert > 0) {
        size_t E = (size_t)c->n_expert, K = (size_t)c->n_expert_used;
        f->moe_sel = xcalloc(R * K, sizeof(int32_t));
        f->exp_rows = xcalloc(E * R, sizeof(int32_t));
        f->exp_n = xcalloc(E, sizeof(int32_t));
    }
    f->wanted = xmalloc(R * sizeof(int32_t));
    f->lora_rows = xmalloc(R * sizeof(int32_t));
    f->lora_grp0 = xmalloc((R + 1) * sizeof(int32_t));
    f->lora_gset = xmalloc(R * sizeof(int32_t));
    f->lr_jobs = xmalloc(FWD_LORA_FUSED_JOBS * sizeof(lowrank_job_t));
    f->lr_pairs = xmalloc(FWD_LORA_FUSED_JOBS * LORA_SET_MAX * sizeof(lowrank_t *));
    f->lr_s = xmalloc(FWD_LORA_FUSED_JOBS * LORA_SET_MAX * sizeof(float));
    f->lr_jobs_nx = xmalloc(FWD_LORA_FUSED_JOBS * sizeof(lowrank_job_t));
    f->lr_pairs_nx = xmalloc(FWD_LORA_FUSED_JOBS * LORA_SET_MAX * sizeof(lowrank_t *));
    f->lr_s_nx = xmalloc(FWD_LORA_FUSED_JOBS * LORA_SET_MAX * sizeof(float));
    f->ws_lr = ws_new(f->n_threads);
    f->ws = ws_new(f->n_threads);
    const char *pe = getenv("PAGODA_FWD_PROFILE");
    f->prof = pe && *pe && *pe != '0' ? (atoi(pe) > 0 ? atoi(pe) : 1) : 0;
    return f;
}

static void prof_print(const forward_t *f)
{
    if (!f->prof || f->prof_steps == 0)
        return;
    double tot = 0, totb = 0;
    for (int i = 0; i < PH_N; i++) {
        tot += f->prof_ns[i];
        totb += f->prof_bytes[i];
    }
    const double n = (double)f->prof_steps;
    fprintf(stderr, "# forward profile, %llu %d-row steps: %.3f ms/step, %.1f MB weights, %.1f GB/s\n",
            (unsigned long long)f->prof_steps, f->prof, tot / n / 1e6, totb / n / 1e6, totb / tot);
    for (int i = 0; i < PH_N; i++)
        fprintf(stderr, "#   %-16s %7.3f ms %5.1f%%  %7.1f MB  %5.1f GB/s\n", ph_name[i], f->prof_ns[i] / n / 1e6,
                100 * f->prof_ns[i] / tot, f->prof_bytes[i] / n / 1e6,
                f->prof_ns[i] > 0 ? f->prof_bytes[i] / f->prof_ns[i] : 0.0);
}

void forward_free(forward_t **fp)
{
    if (!fp || !*fp)
        return;
    forward_t *f = *fp;
    prof_print(f);
    matmul_free(&f->mm);
    xhuge_zfree(f->scratch, f->scratch_bytes);
    free(f->moe_sel);
    free(f->exp_rows);
    free(f->exp_n);
    free(f->wanted);
    free(f->lora_rows);
    free(f->lora_grp0);
    free(f->lora_gset);
    free(f->lr_jobs);
    free(f->lr_pairs);
    free(f->lr_s);
    free(f->lr_jobs_nx);
    free(f->lr_pairs_nx);
    free(f->lr_s_nx);
    ws_free(&f->ws_lr);
    ws_free(&f->ws);
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
    if (b->want_hidden && !b->hidden)
        return bad(f, "want_hidden without a hidden output");
    if (!kv || !kv->k || !kv->v || kv->n_layer != c->n_layer || kv->kv_dim != c->kv_dim ||
        kv->block_size < 1 || kv->n_blocks < 1 || kv_store_row_bytes(kv) == 0 ||
        (kv->type == KV_TYPE_Q8_0 && (kv->qblock < 1 || c->head_dim % kv->qblock != 0 || c->head_dim > 512)))
        return bad(f, "kv_store shape does not fit the model (n_layer %d kv_dim %d head_dim %d) or has an unknown type",
                   c->n_layer, c->kv_dim, c->head_dim);
    for (int r = 0; r < b->n_rows; r++) {
        int32_t t = b->token[r], p = b->pos[r], s = b->seq[r];
        if (t < 0 || t >= c->vocab)
            return bad(f, "row %d: token %d outside [0, %d)", r, t, c->vocab);
        if (p < 0 || p >= c->ctx)
            return bad(f, "row %d: position %d outside [0, %d)", r, p, c->ctx);
        if (s < 0 || s >= b->n_seq || !b->block_tables[s])
            return bad(f, "row %d: sequence %d outside [0, %d) or without block table", r, s, b->n_seq);
        if (b->lora_set) {
            int32_t ls = b->lora_set[r];
            if (ls < -1 || ls >= b->n_lora_sets || !b->lora_sets)
                return bad(f, "row %d: adapter set %d outside [-1, %d)", r, ls, b->n_lora_sets);
            const lora_set_t *set = ls >= 0 ? &b->lora_sets[ls] : NULL;
            if (set && (set->n < 0 || set->n > LORA_SET_MAX))
                return bad(f, "adapter set %d has %d adapters (at most %d)", ls, set->n, LORA_SET_MAX);
            for (int i = 0; set && i < set->n; i++)
                if (!set->ad[i] || set->ad[i]->n_layer != c->n_layer || !isfinite(set->scale[i]))
                    return bad(f, "adapter set %d: adapter %d is missing, of another model or has a bad scale", ls, i);
        }
        int32_t last = p / kv->block_size;
        if (b->n_blocks && last >= b->n_blocks[s])
            return bad(f, "row %d: position %d needs block %d, sequence %d has %d", r, p, last, s, b->n_blocks[s]);
        /* entries a row never reads may be KV_SEQ_NO_BLOCK: with a window on
         * every layer, those of blocks wholly before pos - W + 1 */
        int32_t win = model_kv_window(c);
        int32_t first = win > 0 && p >= win ? (p - win + 1) / kv->block_size : 0;
        for (int32_t i = first; i <= last; i++) {
            int32_t pb = b->block_tables[s][i];
            if (pb < 0 || pb >= kv->n_blocks)
                return bad(f, "sequence %d: block table entry %d = %d outside [0, %d)", s, i, pb, kv->n_blocks);
        }
        /* a row attending past itself: those positions are rows of this
         * batch (rows of a sequence come in order without gaps, so its
         * last row's position is enough) */
        if (b->att_end && b->att_end[r] > p + 1) {
            int32_t e = b->att_end[r], last_pos = -1;
            for (int j = r + 1; j < b->n_rows; j++)
                if (b->seq[j] == s)
                    last_pos = b->pos[j];
            if (e > c->ctx || last_pos < e - 1)
                return bad(f, "row %d: attends to position %d, which is not a row of this batch", r, e - 1);
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

/* h[i] = gelu(g[i]) * u[i], gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
AVX2_FN static void gelu_mul_avx2(float *h, const float *g, const float *u, size_t n)
{
    size_t i = 0;
    const __m256 c0 = _mm256_set1_ps(0.7978845608f), c1 = _mm256_set1_ps(0.044715f), half = _mm256_set1_ps(0.5f),
                 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 inner = _mm256_mul_ps(c0, _mm256_fmadd_ps(_mm256_mul_ps(c1, x), _mm256_mul_ps(x, x), x));
        __m256 gl = _mm256_mul_ps(_mm256_mul_ps(half, x), _mm256_add_ps(one, vmath_tanh8(inner)));
        _mm256_storeu_ps(h + i, _mm256_mul_ps(gl, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        h[i] = 0.5f * g[i] * (1.0f + tanhf(0.7978845608f * (g[i] + 0.044715f * g[i] * g[i] * g[i]))) * u[i];
}

/* x (n) = cap * tanh(x / cap), in place. */
AVX2_FN static void softcap_avx2(float *x, size_t n, float cap)
{
    const __m256 c = _mm256_set1_ps(cap), ic = _mm256_set1_ps(1.0f / cap);
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(c, vmath_tanh8(_mm256_mul_ps(_mm256_loadu_ps(x + i), ic))));
    for (; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
}

static int have_avx2(void)
{
    return cpu_has_avx2_fma_f16c();
}
#else
static int have_avx2(void) { return 0; }
#endif

/* h = act(g) * u for n elements (h may be g): SwiGLU or GeGLU. */
static void act_mul(enum model_ffn_act act, float *h, const float *g, const float *u, size_t n)
{
#ifdef FWD_X86
    if (have_avx2()) {
        if (act == MODEL_FFN_GELU_TANH)
            gelu_mul_avx2(h, g, u, n);
        else
            silu_mul_avx2(h, g, u, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        h[i] = act == MODEL_FFN_GELU_TANH
                   ? 0.5f * g[i] * (1.0f + tanhf(0.7978845608f * (g[i] + 0.044715f * g[i] * g[i] * g[i]))) * u[i]
                   : g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* x (n) = cap * tanh(x / cap). */
static void softcap(float *x, size_t n, float cap)
{
#ifdef FWD_X86
    if (have_avx2()) {
        softcap_avx2(x, n, cap);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] / cap);
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

/* What one layer's attention needs besides its weights. */
typedef struct layer_att {
    const model_layer_t *L;
    int l;               /* layer index (KV cache layer) */
    const float *cos;    /* (R, rope_dim/2) this layer's rope table */
    const float *sin;    /* (R, rope_dim/2) */
    int32_t window;      /* 0: attend to 0..pos; W > 0: to pos-W+1..pos */
} layer_att_t;

/* Rotates the first rope_dim dims of each of n_heads heads of row r of v
 * (n_heads*head_dim) with table (cos, sin). Normal pairing: (2i, 2i+1);
 * NeoX: (i, i+half). */
static void rope_row(const forward_t *f, const layer_att_t *a, float *v, int r, int n_heads)
{
    const model_config_t *c = &f->m->cfg;
    const int half = c->rope_dim / 2, hd = c->head_dim;
    const float *cs = a->cos + (size_t)r * half, *sn = a->sin + (size_t)r * half;
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * hd;
        for (int i = 0; i < half; i++) {
            int i0 = c->rope_neox ? i : 2 * i, i1 = c->rope_neox ? i + half : 2 * i + 1;
            float a0 = x[i0], b0 = x[i1];
            x[i0] = a0 * cs[i] - b0 * sn[i];
            x[i1] = a0 * sn[i] + b0 * cs[i];
        }
    }
}

static void add_bias_row(float *y, const float *b, int n)
{
    if (b)
        for (int i = 0; i < n; i++)
            y[i] += b[i];
}

/* Each of n_heads heads of v (n_heads*head_dim) = rmsnorm(head) * w (head_dim). */
static void head_norm(const model_config_t *c, float *v, const float *w, int n_heads)
{
    for (int h = 0; h < n_heads; h++) {
        float *x = v + (size_t)h * c->head_dim;
        add_rmsnorm_row(x, NULL, x, w, c->head_dim, c->norm_eps);
    }
}

/* Row r's projections of heads [q0, q0+nq) and kv slice [k0, k0+nk):
 * biases, per-head Q/K norm, rope by the row's position, then k and v
 * into the cache slot of (layer, position). */
static void qkv_row_post(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv, int r,
                         int64_t q0, int nq, int64_t k0, int nk)
{
    const model_config_t *c = &f->m->cfg;
    const model_layer_t *L = a->L;
    float *q = f->q + (size_t)r * c->q_dim + q0;   /* (nq) */
    float *k = f->k + (size_t)r * c->kv_dim + k0;  /* (nk) */
    float *v = f->v + (size_t)r * c->kv_dim + k0;  /* (nk) */
    add_bias_row(q, L->bq ? L->bq + q0 : NULL, nq);
    add_bias_row(k, L->bk ? L->bk + k0 : NULL, nk);
    add_bias_row(v, L->bv ? L->bv + k0 : NULL, nk);
    if (L->q_norm) {
        head_norm(c, q, L->q_norm, nq / c->head_dim);
        head_norm(c, k, L->k_norm, nk / c->head_dim);
    }
    rope_row(f, a, q, r, nq / c->head_dim);
    rope_row(f, a, k, r, nk / c->head_dim);
    const int32_t *bt = b->block_tables[b->seq[r]];
    int p = b->pos[r];
    int blk = bt[p / kv->block_size], slot = p % kv->block_size;
    kv_store_write_slice(kv, kv_store_k_at(kv, a->l, blk, slot), (int)k0, k, nk);
    kv_store_write_slice(kv, kv_store_v_at(kv, a->l, blk, slot), (int)k0, v, nk);
}

/* One past the last position row r attends to: pos + 1 (causal), or further
 * for an image row (fwd_batch_t.att_end). */
static int att_end(const fwd_batch_t *b, int r)
{
    return b->att_end && b->att_end[r] > b->pos[r] + 1 ? b->att_end[r] : b->pos[r] + 1;
}

/* First position row r attends to: 0, or pos-W+1 in a sliding-window layer. */
static int att_first(const layer_att_t *a, int32_t pos)
{
    return a->window > 0 && pos >= a->window ? pos - a->window + 1 : 0;
}

/* After the Q/K/V projections, every row: qkv_row_post over all heads. */
static void qkv_post(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv)
{
    const model_config_t *c = &f->m->cfg;
    const int R = b->n_rows;
#pragma omp parallel for num_threads(nth(f, (size_t)R * (c->q_dim + 2 * c->kv_dim) * 2)) schedule(static)
    for (int r = 0; r < R; r++)
        qkv_row_post(f, a, b, kv, r, 0, c->q_dim, 0, c->kv_dim);
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

/* Fewest query vectors (rows × heads of one kv head) a tile must hold to
 * beat attention_row: each 16 positions' K slice is transposed once for the
 * tile's vectors. A 1-head, 32-dim model with a 128k context (8 score rows
 * a thread, so 8 vectors a tile) ran its long prompts ~1.3× slower through
 * the tiles (tests/agents/claude_code.sh: 38 s against 29 s). */
#define FWD_TILE_MIN_VECS 16

/* Rows of a tile: as many as the thread's score scratch holds for every
 * head of a kv head (score_rows / group), at most ATT_TILE_MAX_VECS. */
static int tile_rows(const forward_t *f)
{
    const int group = f->m->cfg.n_head / f->m->cfg.n_kv_head;
    const int tr = f->score_rows / group > 0 ? f->score_rows / group : 1;
    return tr < ATT_TILE_MAX_VECS ? tr : ATT_TILE_MAX_VECS;
}

/* Whether the batch attends through the tiles: the CPU has them, a tile
 * holds enough vectors, and the batch is mostly runs of rows that share a
 * sequence and a first position (a prefill chunk), whose tiles then share
 * each K/V load (attention_tiles); decode batches (a row per sequence) keep
 * attention_row's walk over whole K vectors. */
static bool att_tiled(const forward_t *f, const layer_att_t *a, const fwd_batch_t *b)
{
    if (attention_tile_path() != ATT_PATH_AVX512 ||
        tile_rows(f) * (f->m->cfg.n_head / f->m->cfg.n_kv_head) < FWD_TILE_MIN_VECS)
        return false;
    int shared = 0;
    for (int r = 1; r < b->n_rows; r++)
        shared += b->seq[r] == b->seq[r - 1] && att_first(a, b->pos[r]) == att_first(a, b->pos[r - 1]);
    return 2 * shared >= b->n_rows;
}

/* attention through attention_tile: the rows in slots of tr = score_rows /
 * group rows (the thread's scratch holds tr × group score rows: 8 rows of
 * 8 heads at the 1.1B shape; a tile's transposed K serves them all), one task
 * per (slot, kv head), the slots of the latest rows (most positions) first;
 * a task splits its slot into runs of one sequence and first position, one
 * attention_tile call each. The same bits as attention_row. */
static void attention_tiles(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv, int n_par)
{
    const model_config_t *c = &f->m->cfg;
    const int R = b->n_rows, group = c->n_head / c->n_kv_head, hd = c->head_dim;
    const int tr = tile_rows(f);
    const int n_slots = (R + tr - 1) / tr, n_tasks = n_slots * c->n_kv_head;
    (void)n_par;
#pragma omp parallel for num_threads(n_par) schedule(dynamic, 1)
    for (int k = 0; k < n_tasks; k++) {
        const int slot = n_slots - 1 - k / c->n_kv_head, g = k % c->n_kv_head;
        float *sc = f->scores + (size_t)omp_get_thread_num() * (size_t)f->score_rows * f->scores_ld;
        const int r_end = (slot + 1) * tr < R ? (slot + 1) * tr : R;
        int t1[ATT_TILE_MAX_VECS];
        for (int r0 = slot * tr, r1; r0 < r_end; r0 = r1) {
            const int t0 = att_first(a, b->pos[r0]);
            for (r1 = r0; r1 < r_end && b->seq[r1] == b->seq[r0] && att_first(a, b->pos[r1]) == t0; r1++)
                t1[r1 - r0] = att_end(b, r1);
            const size_t qo = (size_t)r0 * c->q_dim + (size_t)g * group * hd;
            attention_tile(f->q + qo, (size_t)c->q_dim, r1 - r0, group, kv, a->l, b->block_tables[b->seq[r0]], t0, t1,
                           g * hd, hd, c->attn_scale, c->attn_softcap, sc, f->scores_ld, f->att + qo);
        }
    }
}

/* Causal (or sliding-window) attention of every (row, head) against its
 * sequence's cached K/V for the layer, one task per row, claimed
 * dynamically (attention_row: all the row's heads, walking the K vectors
 * position by position, which are contiguous, where one head's slice of
 * them is not; docs/FORWARD.md "Attention tasks of larger batches").
 * q (R, q_dim) → att (R, q_dim). */
static void attention(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv)
{
    const model_config_t *c = &f->m->cfg;
    const int R = b->n_rows;
    size_t work = 0;  /* floats of K and V read: Σ_r positions * q_dim * 2 */
    for (int r = 0; r < R; r++)
        work += (size_t)(att_end(b, r) - att_first(a, b->pos[r])) * (size_t)c->q_dim * 2;
    const int n_par = work >= FWD_ATT_PAR_MIN ? f->n_threads : 1;
    (void)n_par;  /* unused when compiled without OpenMP */
    if (f->att_row && att_tiled(f, a, b)) {
        attention_tiles(f, a, b, kv, n_par);
        return;
    }
#pragma omp parallel for num_threads(n_par) schedule(dynamic, 1)
    for (int r = 0; r < R; r++) {
        float *sc = f->scores + (size_t)omp_get_thread_num() * (size_t)f->score_rows * f->scores_ld;
        const size_t q0 = (size_t)r * c->q_dim;
        const int32_t *bt = b->block_tables[b->seq[r]];
        const int t0 = att_first(a, b->pos[r]), t1 = att_end(b, r);
        (f->att_row ? attention_row : attention_row_by_group)(f->q + q0, c->n_head, c->n_kv_head, kv, a->l, bt, t0,
                                                              t1, c->head_dim, c->attn_scale, c->attn_softcap, sc,
                                                              f->scores_ld, f->att + q0);
    }
}

/* Q/K/V projections, biases, norms, rope, cache write and attention in ONE
 * parallel region: task g = kv head g with its group of query heads. The
 * task computes the q/k/v columns of its heads for all rows, writes its
 * slice of every row's K/V, then attends with them: attention of head h
 * only reads kv head g's slice, so no barrier is needed between the
 * projections and the attention (the two-region path has one). Requires
 * head_dim % 16 == 0 (matmul_run_range's column alignment). */
static void head_post_attend(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv, int g,
                             int t);

/* One task of qkv_attention_by_head on thread t: kv head g's q/k/v
 * columns (xb quantized by matmul_prepare), their post-processing, cache
 * write and the attention of its query heads. */
static void by_head_task(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv, int g,
                         int t)
{
    const model_config_t *c = &f->m->cfg;
    const model_layer_t *L = a->L;
    const int R = b->n_rows, hd = c->head_dim, group = c->n_head / c->n_kv_head;
    const int64_t q0 = (int64_t)g * group * hd, k0 = (int64_t)g * hd;
    const int nq = group * hd;
    int bad_mm = matmul_run_range(f->mm, &L->wq, f->xb, R, q0, q0 + nq, f->q, t) |
                 matmul_run_range(f->mm, &L->wk, f->xb, R, k0, k0 + hd, f->k, t) |
                 matmul_run_range(f->mm, &L->wv, f->xb, R, k0, k0 + hd, f->v, t);
    assert(bad_mm == 0 && "weights were validated at load");
    (void)bad_mm;
    head_post_attend(f, a, b, kv, g, t);
}

/* The rest of kv head g's task once its q/k/v columns are computed:
 * biases, norms, rope and cache write of its slices (qkv_row_post), then
 * the attention of its query heads, on thread t's score scratch. */
static void head_post_attend(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv, int g,
                             int t)
{
    const model_config_t *c = &f->m->cfg;
    const int R = b->n_rows, hd = c->head_dim, group = c->n_head / c->n_kv_head;
    const int64_t q0 = (int64_t)g * group * hd, k0 = (int64_t)g * hd;
    const int nq = group * hd;
    for (int r = 0; r < R; r++)
        qkv_row_post(f, a, b, kv, r, q0, nq, k0, hd);
    float *sc = f->scores + (size_t)t * (size_t)f->score_rows * f->scores_ld;
    for (int r = 0; r < R; r++) {
        const int32_t *bt = b->block_tables[b->seq[r]];
        const size_t qr = (size_t)r * c->q_dim + (size_t)q0;
        attention_group(f->q + qr, group, kv, a->l, bt, att_first(a, b->pos[r]), att_end(b, r), (int)k0, hd,
                        c->attn_scale, c->attn_softcap, sc, f->scores_ld, f->att + qr);
    }
}

static void qkv_attention_by_head(forward_t *f, const layer_att_t *a, const fwd_batch_t *b, const kv_store_t *kv)
{
    const model_config_t *c = &f->m->cfg;
    int rc = matmul_prepare(f->mm, f->xb, b->n_rows, c->dim);
    assert(rc == 0);
    (void)rc;
    /* kv heads in per-thread contiguous ranges (worksteal.h): the weight
     * columns of a thread's next head follow those of this one, which the
     * kernels prefetch */
    ws_init(f->ws, c->n_kv_head, f->n_threads);
#pragma omp parallel num_threads(f->n_threads)
    for (int64_t gi; (gi = ws_next(f->ws, omp_get_thread_num())) >= 0;)
        by_head_task(f, a, b, kv, (int)gi, omp_get_thread_num());
}

/* Batches up to this many rows take qkv_attention_by_head. */
#define FWD_BY_HEAD_MAX_ROWS 8

/* Columns per task of proj_fused: a multiple of 16 (matmul_run_range) and
 * of LOWRANK_COLS (the update's panels), so a task's update covers whole
 * panels. */
#define FWD_FFN_COLS 64
/* A thread queues the next projection's A rows (proj_fused) when fewer
 * than this many column tasks are left in its range. */
#ifndef FWD_LORA_PF_TASKS
#define FWD_LORA_PF_TASKS 8
#endif
/* ... at most this many bytes of them (the rest would push the first out
 * of the core's 1 MiB L2 before phase 1 reads them) */
#ifndef FWD_LORA_PF_BYTES
#define FWD_LORA_PF_BYTES (256u << 10)
#endif
_Static_assert(FWD_FFN_COLS % 16 == 0 && FWD_FFN_COLS % LOWRANK_COLS == 0, "proj_fused's column tasks");

/* ys[k] (R, ws[k]->rows) = x (R, cols) · ws[k]ᵀ for k < n (n <= 3, equal
 * cols) in ONE region of FWD_FFN_COLS-column tasks; act (n == 2, gate/up):
 * then ys[0] = act(ys[0]) * ys[1], each task on its columns while they are
 * in cache. lp (NULL: none) names the projections of layer l whose adapter
 * updates (b's groups, f->n_lora_grp > 0, R <= FWD_LORA_FUSED_MAX_ROWS)
 * join the region: each thread takes phase 1 tasks (t = x[rows] · Aᵀ,
 * lowrank_run_t) until none is left, then its column tasks; a task adds the
 * update of its columns right after their product (lowrank_run_cols),
 * before the activation, once every phase 1 task is done (lowrank_wait_t:
 * no barrier, so a late thread holds nobody up; with the worker's short
 * GOMP_SPINCOUNT each barrier of a step is a sleep and a wake-up). Every
 * output gets the operations of mm + lora_add in the same order (same
 * bits), in one region instead of three (four with the activation), and
 * the update's reads of its factors run beside the other thread's
 * products. */
static void proj_fused(forward_t *f, const fwd_batch_t *b, int l, const enum lora_proj *lp,
                       const matmul_weight_t *const *ws, int n, const float *x, int R, float *const *ys, bool act)
{
    const model_config_t *c = &f->m->cfg;
    assert(n >= 1 && n <= 3 && (!act || (n == 2 && ws[0]->rows == ws[1]->rows)));
    const int64_t in = ws[0]->cols;
    int rc = matmul_prepare(f->mm, x, R, in);
    assert(rc == 0);
    (void)rc;
    int first[4] = {0};
    size_t t_off[3] = {0};
    int64_t ldy[3], n_ch[3], n_tasks = 0;
    for (int k = 0; k < n; k++) {
        ldy[k] = ws[k]->rows;
        n_ch[k] = (ws[k]->rows + FWD_FFN_COLS - 1) / FWD_FFN_COLS;
        n_tasks += k == 0 || !act ? n_ch[k] : 0;
    }
    if (lp && f->n_lora_grp > 0) {
        assert(R <= FWD_LORA_FUSED_MAX_ROWS);
        forward_lora_jobs(f, b, l, n, lp, x, in, ys, ldy, first);
        for (int k = 0; k < n; k++)
            t_off[k] = lowrank_scratch_floats(f->lr_jobs, first[k]);
    }
    const int n_jobs = first[n];
    lowrank_phase_t ph;
    lowrank_phase_init(&ph, f->lr_jobs, n_jobs);
    /* phase 1 in per-thread ranges: each thread's range is the one it
     * queued the A rows of during the products of the projection before */
    if (n_jobs > 0)
        lowrank_phase_ranges(&ph, f->ws_lr, f->n_threads);
    /* the next projection with updates and no attention before it: its
     * phase 1's A rows are queued (behind this region's own prefetches)
     * while this region's last products run */
    int n_nx = 0;
    if (lp && f->n_lora_grp > 0) {
        static const enum lora_proj gu[2] = {LORA_GATE, LORA_UP}, dn[1] = {LORA_DOWN}, qkv[3] = {LORA_Q, LORA_K, LORA_V};
        if (lp[0] == LORA_O)
            n_nx = forward_lora_jobs_next(f, b, l, 2, gu);
        else if (lp[0] == LORA_GATE)
            n_nx = forward_lora_jobs_next(f, b, l, 1, dn);
        else if (lp[0] == LORA_DOWN && l + 1 < c->n_layer)
            n_nx = forward_lora_jobs_next(f, b, l + 1, 3, qkv);
    }
    /* per-thread contiguous ranges of tasks, stolen from the back when a
     * thread runs out (worksteal.h): each matrix's "next panels" prefetch
     * then reads the thread's own next task */
    ws_init(f->ws, n_tasks, f->n_threads);
#pragma omp parallel num_threads(f->n_threads)
    {
        bool t_ready = n_jobs == 0, queued = n_nx == 0;
        pfq_clear_bg(); /* what the region before queued and did not issue */
        if (n_jobs > 0)
            lowrank_run_t(f->lr_jobs, n_jobs, f->lr_t, &ph);
        for (int64_t task; (task = ws_next(f->ws, omp_get_thread_num())) >= 0;) {
            const int t = omp_get_thread_num();
            if (!queued && ws_left(f->ws, t) < FWD_LORA_PF_TASKS) {
                lowrank_prefetch_a(f->lr_jobs_nx, n_nx, t, f->n_threads, FWD_LORA_PF_BYTES);
                queued = true;
            }
            int k0 = 0;
            int64_t ch = task;
            while (!act && ch >= n_ch[k0])
                ch -= n_ch[k0++];
            const int64_t n0 = ch * FWD_FFN_COLS, n1 = n0 + FWD_FFN_COLS < ldy[k0] ? n0 + FWD_FFN_COLS : ldy[k0];
            for (int k = k0; k < (act ? 2 : k0 + 1); k++)
                if (first[k + 1] > first[k])
                    lowrank_prefetch_cols(f->lr_jobs + first[k], first[k + 1] - first[k], n0, n1);
            for (int k = k0; k < (act ? 2 : k0 + 1); k++) {
                int bad_mm = matmul_run_range(f->mm, ws[k], x, R, n0, n1, ys[k], t);
                assert(bad_mm == 0 && "weights were validated at load");
                (void)bad_mm;
                if (first[k + 1] > first[k] && !t_ready) {
                    lowrank_wait_t(&ph);
                    t_ready = true;
                }
                pfq_drain();
                if (first[k + 1] > first[k])
                    lowrank_run_cols(f->lr_jobs + first[k], first[k + 1] - first[k], f->lr_t + t_off[k], n0, n1);
            }
            for (int r = 0; act && r < R; r++) {
                float *h = ys[0] + (size_t)r * ldy[0] + n0;
                act_mul(c->ffn_act, h, h, ys[1] + (size_t)r * ldy[0] + n0, (size_t)(n1 - n0));
            }
        }
    }
}

/* hg (R, ffn) = act(x · Wgateᵀ) * (x · Wupᵀ), ffn = wg->rows (proj_fused,
 * no adapters) */
static void ffn_gate_up(forward_t *f, const matmul_weight_t *wg, const matmul_weight_t *wu, const float *x, int R)
{
    const matmul_weight_t *wgu[2] = {wg, wu};
    float *const ygu[2] = {f->hg, f->hu};
    proj_fused(f, NULL, 0, NULL, wgu, 2, x, R, ygu, true);
}

/* ffn_gate_up for a step with adapters: gate and up in one region, each
 * adapter's update of them, then the activation (the fused path applies it
 * inside the region, before an update could be added). */
static void ffn_gate_up_lora(forward_t *f, const fwd_batch_t *b, int l, int R, bool prof)
{
    const model_config_t *c = &f->m->cfg;
    const model_layer_t *L = &f->m->layers[l];
    const int64_t ffn = L->w_gate.rows;
    const matmul_weight_t *wgu[2] = {&L->w_gate, &L->w_up};
    float *const ygu[2] = {f->hg, f->hu};
    PROF(PH_GATE_UP, matmul_weight_bytes(&L->w_gate) + matmul_weight_bytes(&L->w_up), mm_multi(f, wgu, 2, f->xb, R, ygu));
    const enum lora_proj pgu[2] = {LORA_GATE, LORA_UP};
    const float *const xgu[2] = {f->xb, f->xb};
    const int64_t ldxgu[2] = {c->dim, c->dim}, ldygu[2] = {ffn, ffn};
    PROF(PH_LORA, 0, forward_lora_add(f, b, l, 2, pgu, xgu, ldxgu, ygu, ldygu));
    const double t0 = prof ? now_ns() : 0;
#pragma omp parallel for num_threads(nth(f, (size_t)R * ffn)) schedule(static)
    for (int r = 0; r < R; r++)
        act_mul(c->ffn_act, f->hg + (size_t)r * ffn, f->hg + (size_t)r * ffn, f->hu + (size_t)r * ffn, (size_t)ffn);
    if (prof)
        f->prof_ns[PH_GATE_UP] += now_ns() - t0;
}

/* Router of a MoE layer, per row: probabilities p (n_expert) = softmax(xb ·
 * Wrouterᵀ); the n_expert_used largest (ties: lower expert index) with
 * weights p_e (divided by their sum when expert_norm) * expert_scale; then
 * per expert the ascending list of rows routed to it. */
static void moe_route(forward_t *f, const model_layer_t *L, int R)
{
    const model_config_t *c = &f->m->cfg;
    const int E = c->n_expert, K = c->n_expert_used;
    mm(f, &L->router, f->xb, R, f->moe_logits);
    memset(f->exp_n, 0, (size_t)E * sizeof(int32_t));
    for (int r = 0; r < R; r++) {
        float *p = f->moe_logits + (size_t)r * E;  /* (E) */
        int32_t *sel = f->moe_sel + (size_t)r * K;  /* (K) */
        float *w = f->moe_wt + (size_t)r * K;       /* (K) */
        float mx = p[0], sum = 0;
        for (int e = 1; e < E; e++)
            mx = p[e] > mx ? p[e] : mx;
        for (int e = 0; e < E; e++)
            sum += (p[e] = expf(p[e] - mx));
        float wsum = 0;
        for (int j = 0; j < K; j++) {
            int best = -1;
            for (int e = 0; e < E; e++) {
                bool taken = false;
                for (int i = 0; i < j; i++)
                    taken |= sel[i] == e;
                if (!taken && (best < 0 || p[e] > p[best]))
                    best = e;
            }
            sel[j] = best;
            w[j] = p[best] / sum;
            wsum += w[j];
        }
        for (int j = 0; j < K; j++) {
            w[j] = (c->expert_norm ? w[j] / wsum : w[j]) * c->expert_scale;
            int e = sel[j], n = f->exp_n[e]++;
            f->exp_rows[(size_t)e * R + n] = r;
            f->exp_wt[(size_t)e * R + n] = w[j];
        }
    }
}

/* moe_out (R, dim) = Σ over each row's experts of weight * expert FFN(xb),
 * plus the gated shared expert. Expert by expert: the rows routed to it are
 * gathered and go through its three matrices together, so each expert's
 * weights are read once per step whatever the number of rows. A row adds
 * its experts' outputs in ascending expert order, so its result does not
 * depend on the other rows of the batch. */
static void ffn_moe(forward_t *f, const model_layer_t *L, int R)
{
    const model_config_t *c = &f->m->cfg;
    const int dim = c->dim;
    moe_route(f, L, R);
    memset(f->moe_out, 0, (size_t)R * dim * sizeof(float));
    for (int e = 0; e < c->n_expert; e++) {
        const int n = f->exp_n[e];
        if (n == 0)
            continue;
        const int32_t *rows = f->exp_rows + (size_t)e * R;  /* (n) */
        const float *wt = f->exp_wt + (size_t)e * R;         /* (n) */
        /* xe (n, dim) = xb[rows] */
        for (int j = 0; j < n; j++)
            memcpy(f->xe + (size_t)j * dim, f->xb + (size_t)rows[j] * dim, (size_t)dim * sizeof(float));
        /* hg (n, ffn_exp) = act(xe · Wgate_eᵀ) * (xe · Wup_eᵀ);  ye (n, dim) = hg · Wdown_eᵀ */
        ffn_gate_up(f, &L->exp_gate[e], &L->exp_up[e], f->xe, n);
        mm(f, &L->exp_down[e], f->hg, n, f->ye);
        /* moe_out[rows[j]] += wt[j] * ye[j] */
        for (int j = 0; j < n; j++) {
            float *o = f->moe_out + (size_t)rows[j] * dim;
            const float *y = f->ye + (size_t)j * dim;
            for (int i = 0; i < dim; i++)
                o[i] += wt[j] * y[i];
        }
    }
    if (!L->shexp_gate_inp)
        return;
    /* shared expert on every row: moe_out += sigmoid(xb · w_gate_inp) * FFN_shared(xb) */
    ffn_gate_up(f, &L->sh_gate, &L->sh_up, f->xb, R);
    mm(f, &L->sh_down, f->hg, R, f->ye);
    for (int r = 0; r < R; r++) {
        const float *x = f->xb + (size_t)r * dim, *y = f->ye + (size_t)r * dim;
        float d = 0, *o = f->moe_out + (size_t)r * dim;
        for (int i = 0; i < dim; i++)
            d += x[i] * L->shexp_gate_inp[i];
        const float gate = 1.0f / (1.0f + expf(-d));
        for (int i = 0; i < dim; i++)
            o[i] += gate * y[i];
    }
}

/* rope tables (R, half) for inverse frequencies inv (scaled positions
 * pos * pos_scale): cos/sin in double so large positions keep their
 * precision, times the family's attn_factor (phi3 LongRoPE; else 1). */
static void rope_tables(forward_t *f, const fwd_batch_t *b, const double *inv, double pos_scale, float *cs,
                        float *sn)
{
    const int R = b->n_rows, half = f->m->cfg.rope_dim / 2;
    const double af = f->m->cfg.rope_attn_factor;
#pragma omp parallel for num_threads(nth(f, (size_t)R * half * 8)) schedule(static)
    for (int r = 0; r < R; r++) {
        double p = (double)b->pos[r] * pos_scale;
        for (int i = 0; i < half; i++) {
            double a = p * inv[i];
            cs[(size_t)r * half + i] = (float)(cos(a) * af);
            sn[(size_t)r * half + i] = (float)(sin(a) * af);
        }
    }
}

/* x (R, dim) = token_embd[token[r]] * embd_scale, or an image row's input
 * as given (unscaled) */
static void embed_rows(forward_t *f, const fwd_batch_t *b)
{
    const model_t *m = f->m;
    const model_config_t *c = &m->cfg;
    const int R = b->n_rows, dim = c->dim;
#pragma omp parallel for num_threads(nth(f, (size_t)R * dim)) schedule(static)
    for (int r = 0; r < R; r++) {
        float *x = f->x + (size_t)r * dim;
        if (b->embd && b->embd[r]) { /* an image row, unscaled */
            memcpy(x, b->embd[r], (size_t)dim * sizeof(float));
            continue;
        }
        int rc = matmul_weight_rows(&m->tok_embd, b->token[r], 1, x);
        assert(rc == 0);
        (void)rc;
        if (c->embd_scale != 1.0f)
            for (int i = 0; i < dim; i++)
                x[i] *= c->embd_scale;
    }
}

/* Layer l's FFN, xb (R, dim) → xb. Dense: hg (R, ffn) = act(xb · Wgateᵀ) *
 * (xb · Wupᵀ), xb = hg · Wdownᵀ (with the adapters' updates); MoE: out
 * (R, dim) = Σ_experts weight * the same per expert (+ shared expert);
 * [gemma: out = rmsnorm(out) * ffn_post_norm]. FWD_STOPPED when the stop
 * word is set before the down projection (stop_set), else 0. */
static int layer_ffn(forward_t *f, const fwd_batch_t *b, const model_layer_t *L, int l, int R, bool prof)
{
    const model_config_t *c = &f->m->cfg;
    const int dim = c->dim;
    float *out = f->xb;
    if (c->n_expert > 0) {
        ffn_moe(f, L, R);
        out = f->moe_out;
    } else {
        /* proj_fused takes the updates (none, or few enough rows) */
        const bool fused = f->n_lora_grp == 0 || (R <= FWD_LORA_FUSED_MAX_ROWS && !f->lora_unfused);
        const matmul_weight_t *wgu[2] = {&L->w_gate, &L->w_up}, *wd = &L->w_down;
        float *const ygu[2] = {f->hg, f->hu};
        static const enum lora_proj pgu[2] = {LORA_GATE, LORA_UP}, pd = LORA_DOWN;
        if (fused)
            PROF(PH_GATE_UP, matmul_weight_bytes(&L->w_gate) + matmul_weight_bytes(&L->w_up),
                 proj_fused(f, b, l, pgu, wgu, 2, f->xb, R, ygu, true));
        else
            ffn_gate_up_lora(f, b, l, R, prof);
        if (stop_set(f))
            return FWD_STOPPED;
        if (fused && f->n_lora_grp > 0) {
            PROF(PH_DOWN, matmul_weight_bytes(wd), proj_fused(f, b, l, &pd, &wd, 1, f->hg, R, &f->xb, false));
        } else {
            PROF(PH_DOWN, matmul_weight_bytes(wd), mm(f, wd, f->hg, R, f->xb));
            PROF(PH_LORA, 0, forward_lora_add1(f, b, l, LORA_DOWN, f->hg, L->w_gate.rows, f->xb, dim));
        }
    }
    if (L->ffn_post_norm)
        add_rmsnorm(f, out, NULL, out, L->ffn_post_norm, R, dim, c->norm_eps);
    if (out != f->xb)
        memcpy(f->xb, out, (size_t)R * dim * sizeof(float));
    return 0;
}

/* rmsnorm_rows: add_rmsnorm's rows on the calling thread (inside a region) */
static void rmsnorm_rows(float *x, const float *d, float *out, const float *w, int R, int n, float eps)
{
    for (int r = 0; r < R; r++)
        add_rmsnorm_row(x + (size_t)r * n, d ? d + (size_t)r * n : NULL, out + (size_t)r * n, w, n, eps);
}

/* Output columns per task of wo and down in layers_one_region: one unit of
 * the 1-row kernels (two panels), so a late thread holds the other up by
 * ~2 us, not by a 64-column task (~25 us of down at 5632 inputs) */
#define FWD_STEP_COLS 16

/* The serial step between two phases of layers_one_region, run by the last
 * thread to reach the barrier: x quantized for the next matmul, its tasks
 * set up. */
static void step_next(forward_t *f, const float *x, int R, int64_t cols, int64_t n_tasks)
{
    int rc = matmul_prepare(f->mm, x, R, cols);
    assert(rc == 0);
    (void)rc;
    ws_init(f->ws, n_tasks, f->bar.n);
}

/* y (R, w->rows) = x · wᵀ by the FWD_STEP_COLS-column tasks thread t takes
 * from f->ws (layers_one_region's wo and down: both write dim columns). */
static void cols_tasks(forward_t *f, const matmul_weight_t *w, const float *x, int R, float *y, int t)
{
    const int64_t out = w->rows;
    for (int64_t task; (task = ws_next(f->ws, t)) >= 0;) {
        const int64_t n0 = task * FWD_STEP_COLS, n1 = n0 + FWD_STEP_COLS < out ? n0 + FWD_STEP_COLS : out;
        int bad_mm = matmul_run_range(f->mm, w, x, R, n0, n1, y, t);
        assert(bad_mm == 0 && "weights were validated at load");
        (void)bad_mm;
    }
}

/* Every layer of a small dense step without adapters (the by-head path) in
 * ONE parallel region: the four phases of a layer (q/k/v + attention by kv
 * head; wo; gate/up + activation; down) are column tasks (worksteal.h)
 * separated by spinbar barriers, whose last thread runs the serial step
 * between them (residual add + rmsnorm, quantizing the next matmul's input,
 * the stop check). The multi-region path forks and joins a region per
 * phase, and on this VM every fork / join with the worker's short
 * GOMP_SPINCOUNT was a futex sleep and wake-up (spinbar.h). Every output
 * gets the same operations in the same order as there: matmul_run_range
 * equals matmul_run bit for bit (matmul.h), the norms are the same rows.
 * x (R, dim) residual in, xb (R, dim) = the last layer's FFN output out
 * (as forward_run's layer loop). FWD_STOPPED when the stop word was seen at
 * one of the loop's checks, else 0. */
static int layers_one_region(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv, bool prof)
{
    const model_t *m = f->m;
    const model_config_t *c = &m->cfg;
    const int R = b->n_rows, dim = c->dim;
    const int64_t n_dim_tasks = (dim + FWD_STEP_COLS - 1) / FWD_STEP_COLS;
    /* head_dim % 16 == 0 (the by-head condition): q_dim and kv_dim split
     * into whole tasks */
    assert(c->q_dim % FWD_STEP_COLS == 0 && c->kv_dim % FWD_STEP_COLS == 0);
    const int64_t n_qkv_tasks = (c->q_dim + 2 * c->kv_dim) / FWD_STEP_COLS;
    bool stopped = false; /* written by a barrier's last thread, read by all after it */
    spinbar_init(&f->bar, f->n_threads);
    step_next(f, f->xb, R, dim, n_qkv_tasks);
#pragma omp parallel num_threads(f->n_threads)
    {
        /* the barrier counts the threads the region really has */
#pragma omp single
        f->bar.n = omp_get_num_threads();
        const int t = omp_get_thread_num();
        double t_ph = prof && t == 0 ? now_ns() : 0;
        /* PHASE(ph, bytes): thread 0 books the time since the last barrier */
#define PHASE(ph, bytes)                                   \
    do {                                                   \
        if (prof && t == 0) {                              \
            const double t_ = now_ns();                    \
            f->prof_ns[ph] += t_ - t_ph;                   \
            f->prof_bytes[ph] += (double)(bytes);          \
            t_ph = t_;                                     \
        }                                                  \
    } while (0)
        unsigned gen;
        for (int l = 0; l < c->n_layer; l++) {
            const model_layer_t *L = &m->layers[l];
            const int sw = L->swa ? 1 : 0;
            const layer_att_t a = { .L = L, .l = l, .cos = f->rope_cos[sw], .sin = f->rope_sin[sw],
                                    .window = L->swa ? c->swa_window : 0 };
            const int64_t ffn = L->w_gate.rows;

            /* q (R, q_dim), k, v (R, kv_dim) = xb · W{q,k,v}ᵀ: FWD_STEP_COLS-column
             * tasks over the three matrices in turn */
            for (int64_t task; (task = ws_next(f->ws, t)) >= 0;) {
                int64_t n0 = task * FWD_STEP_COLS;
                const matmul_weight_t *w = &L->wq;
                float *y = f->q;
                if (n0 >= c->q_dim + c->kv_dim) {
                    w = &L->wv, y = f->v, n0 -= c->q_dim + c->kv_dim;
                } else if (n0 >= c->q_dim) {
                    w = &L->wk, y = f->k, n0 -= c->q_dim;
                }
                const int64_t n1 = n0 + FWD_STEP_COLS < w->rows ? n0 + FWD_STEP_COLS : w->rows;
                int bad_mm = matmul_run_range(f->mm, w, f->xb, R, n0, n1, y, t);
                assert(bad_mm == 0 && "weights were validated at load");
                (void)bad_mm;
            }
            if (spinbar_arrive(&f->bar, &gen)) {
                ws_init(f->ws, c->n_kv_head, f->bar.n);
                spinbar_release(&f->bar);
            } else {
                spinbar_wait(&f->bar, gen);
            }
            /* biases, norms, rope, cache write, attention: a task per kv head */
            for (int64_t gi; (gi = ws_next(f->ws, t)) >= 0;)
                head_post_attend(f, &a, b, kv, (int)gi, t);
            if (spinbar_arrive(&f->bar, &gen)) {
                step_next(f, f->att, R, c->q_dim, n_dim_tasks);
                spinbar_release(&f->bar);
            } else {
                spinbar_wait(&f->bar, gen);
            }
            PHASE(PH_QKV_ATT, matmul_weight_bytes(&L->wq) + matmul_weight_bytes(&L->wk) + matmul_weight_bytes(&L->wv));

            /* xb = att · Woᵀ */
            cols_tasks(f, &L->wo, f->att, R, f->xb, t);
            /* [gemma: xb = rmsnorm(xb) * attn_post_norm]; x += xb; xb = rmsnorm(x) * ffn_norm */
            if (spinbar_arrive(&f->bar, &gen)) {
                if (L->attn_post_norm)
                    rmsnorm_rows(f->xb, NULL, f->xb, L->attn_post_norm, R, dim, c->norm_eps);
                rmsnorm_rows(f->x, f->xb, f->xb, L->ffn_norm, R, dim, c->norm_eps);
                stopped = stop_set(f);
                if (!stopped)
                    step_next(f, f->xb, R, dim, (ffn + FWD_FFN_COLS - 1) / FWD_FFN_COLS);
                spinbar_release(&f->bar);
            } else {
                spinbar_wait(&f->bar, gen);
            }
            PHASE(PH_WO, matmul_weight_bytes(&L->wo));
            if (stopped)
                break;

            /* hg = act(xb · Wgateᵀ) * (xb · Wupᵀ), by FWD_FFN_COLS columns */
            for (int64_t task; (task = ws_next(f->ws, t)) >= 0;) {
                const int64_t n0 = task * FWD_FFN_COLS, n1 = n0 + FWD_FFN_COLS < ffn ? n0 + FWD_FFN_COLS : ffn;
                int bad_mm = matmul_run_range(f->mm, &L->w_gate, f->xb, R, n0, n1, f->hg, t) |
                             matmul_run_range(f->mm, &L->w_up, f->xb, R, n0, n1, f->hu, t);
                assert(bad_mm == 0 && "weights were validated at load");
                (void)bad_mm;
                for (int r = 0; r < R; r++) {
                    float *h = f->hg + (size_t)r * ffn + n0;
                    act_mul(c->ffn_act, h, h, f->hu + (size_t)r * ffn + n0, (size_t)(n1 - n0));
                }
            }
            if (spinbar_arrive(&f->bar, &gen)) {
                stopped = stop_set(f);
                if (!stopped)
                    step_next(f, f->hg, R, ffn, n_dim_tasks);
                spinbar_release(&f->bar);
            } else {
                spinbar_wait(&f->bar, gen);
            }
            PHASE(PH_GATE_UP, matmul_weight_bytes(&L->w_gate) + matmul_weight_bytes(&L->w_up));
            if (stopped)
                break;

            /* xb = hg · Wdownᵀ */
            cols_tasks(f, &L->w_down, f->hg, R, f->xb, t);
            /* [gemma: xb = rmsnorm(xb) * ffn_post_norm]; then, before the
             * next layer: x += xb; xb = rmsnorm(x) * its attn_norm */
            if (spinbar_arrive(&f->bar, &gen)) {
                if (L->ffn_post_norm)
                    rmsnorm_rows(f->xb, NULL, f->xb, L->ffn_post_norm, R, dim, c->norm_eps);
                if (l + 1 < c->n_layer)
                    rmsnorm_rows(f->x, f->xb, f->xb, m->layers[l + 1].attn_norm, R, dim, c->norm_eps);
                if (f->layers_done)
                    atomic_fetch_add_explicit(f->layers_done, 1, memory_order_relaxed);
                stopped = l + 1 < c->n_layer && stop_set(f);
                if (!stopped && l + 1 < c->n_layer)
                    step_next(f, f->xb, R, dim, n_qkv_tasks);
                spinbar_release(&f->bar);
            } else {
                spinbar_wait(&f->bar, gen);
            }
            PHASE(PH_DOWN, matmul_weight_bytes(&L->w_down));
            if (stopped)
                break;
        }
#undef PHASE
    }
    return stopped ? FWD_STOPPED : 0;
}

int forward_run(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv, float *logits)
{
    const model_t *m = f->m;
    const model_config_t *c = &m->cfg;
    f->err[0] = '\0';
    if (validate(f, b, kv) != 0)
        return -1;
    const int R = b->n_rows, dim = c->dim;
    if (R == 0)
        return 0;
    const bool prof = f->prof == R;
    double t_start = prof ? now_ns() : 0;
    if (prof)
        f->prof_steps++;

    embed_rows(f, b);

    /* rope tables (R, half): angle = pos * pos_scale * inv_freq[i]; the
     * sliding-window layers' own table when the model has one (gemma3) */
    rope_tables(f, b, m->rope_inv_freq, m->rope_pos_scale, f->rope_cos[0], f->rope_sin[0]);
    if (m->rope_inv_freq_swa)
        rope_tables(f, b, m->rope_inv_freq_swa, 1.0, f->rope_cos[1], f->rope_sin[1]);

    /* xb (R, dim) = rmsnorm(x) * attn_norm of layer 0; later layers get it
     * fused with the residual add that ends the previous layer. */
    add_rmsnorm(f, f->x, NULL, f->xb, m->layers[0].attn_norm, R, dim, c->norm_eps);
    if (prof)
        f->prof_ns[PH_EMBED] += now_ns() - t_start;
    /* Head-wise fused attention block for small batches, where the saved
     * barrier is a large part of the step; larger batches keep the finer
     * chunks of the two-region path (a thread preempted inside a whole-head
     * task holds the others up longer: measured 32-row decode 551 -> 526
     * tok/s best, 1-row 117 -> 122). Needs the kv heads to spread evenly
     * over the threads (or enough of them that the remainder matters little)
     * and 16-aligned head slices. */
    /* rows with adapters add their updates between the projections and
     * rope: the two-region path, each projection's update in its region
     * (proj_fused) up to FWD_LORA_FUSED_MAX_ROWS rows */
    forward_lora_group(f, b);
    const bool fused = f->n_lora_grp > 0 && R <= FWD_LORA_FUSED_MAX_ROWS && !f->lora_unfused;
    const bool by_head = f->n_lora_grp == 0 && R <= FWD_BY_HEAD_MAX_ROWS && c->head_dim % 16 == 0 &&
                         (c->n_kv_head % f->n_threads == 0 || c->n_kv_head >= 4 * f->n_threads);
    /* small dense steps: every layer in one region (layers_one_region) */
    const bool one_region = by_head && c->n_expert == 0 && !f->multi_region;
    if (one_region && layers_one_region(f, b, kv, prof) == FWD_STOPPED)
        return FWD_STOPPED;
    for (int l = 0; l < (one_region ? 0 : c->n_layer); l++) {
        const model_layer_t *L = &m->layers[l];
        const int t = L->swa ? 1 : 0;
        const layer_att_t a = { .L = L, .l = l, .cos = f->rope_cos[t], .sin = f->rope_sin[t],
                                .window = L->swa ? c->swa_window : 0 };

        if (by_head) {
            /* everything below in one region, one task per kv head */
            PROF(PH_QKV_ATT, matmul_weight_bytes(&L->wq) + matmul_weight_bytes(&L->wk) + matmul_weight_bytes(&L->wv), qkv_attention_by_head(f, &a, b, kv));
        } else {
            /* q (R, q_dim), k, v (R, kv_dim) = xb · W{q,k,v}ᵀ: one region */
            const matmul_weight_t *wqkv[3] = {&L->wq, &L->wk, &L->wv};
            float *const yqkv[3] = {f->q, f->k, f->v};
            static const enum lora_proj pqkv[3] = {LORA_Q, LORA_K, LORA_V};
            const size_t qkv_bytes = matmul_weight_bytes(&L->wq) + matmul_weight_bytes(&L->wk) +
                                     matmul_weight_bytes(&L->wv);
            if (fused)
                PROF(PH_QKV, qkv_bytes, proj_fused(f, b, l, pqkv, wqkv, 3, f->xb, R, yqkv, false));
            else
                PROF(PH_QKV, qkv_bytes, mm_multi(f, wqkv, 3, f->xb, R, yqkv));
            if (f->n_lora_grp > 0 && !fused) {
                const float *const xqkv[3] = {f->xb, f->xb, f->xb};
                const int64_t ldxqkv[3] = {dim, dim, dim}, ldyqkv[3] = {c->q_dim, c->kv_dim, c->kv_dim};
                PROF(PH_LORA, 0, forward_lora_add(f, b, l, 3, pqkv, xqkv, ldxqkv, yqkv, ldyqkv));
            }

            /* + biases; per-head rmsnorm of q and k (qk_norm); rotate q and k by
             * their row's position; cache[l, block_table[pos / bs], pos % bs] = k, v
             * (all rows before any attends) */
            PROF(PH_ATT, 0, qkv_post(f, &a, b, kv));

            /* att (R, q_dim) = softmax(softcap(q kᵀ * attn_scale), causal, window) v,
             * per head over its kv head */
            PROF(PH_ATT, 0, attention(f, &a, b, kv));
        }

        /* xb = att · Woᵀ;  [gemma: xb = rmsnorm(xb) * attn_post_norm]
         * x += xb;  xb = rmsnorm(x) * ffn_norm */
        if (fused) {
            static const enum lora_proj po = LORA_O;
            const matmul_weight_t *wo = &L->wo;
            PROF(PH_WO, matmul_weight_bytes(wo), proj_fused(f, b, l, &po, &wo, 1, f->att, R, &f->xb, false));
        } else {
            PROF(PH_WO, matmul_weight_bytes(&L->wo), mm(f, &L->wo, f->att, R, f->xb));
            PROF(PH_LORA, 0, forward_lora_add1(f, b, l, LORA_O, f->att, c->q_dim, f->xb, dim));
        }
        PROF(PH_NORM, 0, {
            if (L->attn_post_norm)
                add_rmsnorm(f, f->xb, NULL, f->xb, L->attn_post_norm, R, dim, c->norm_eps);
            add_rmsnorm(f, f->x, f->xb, f->xb, L->ffn_norm, R, dim, c->norm_eps);
        });
        if (stop_set(f) || layer_ffn(f, b, L, l, R, prof) == FWD_STOPPED)
            return FWD_STOPPED; /* preempted inside the layer (stop_set) */

        /* x += xb;  xb = rmsnorm(x) * next layer's attn_norm */
        if (l + 1 < c->n_layer)
            PROF(PH_NORM, 0, add_rmsnorm(f, f->x, f->xb, f->xb, m->layers[l + 1].attn_norm, R, dim, c->norm_eps));
        if (f->layers_done) /* a long step shows its progress (forward_set_progress) */
            atomic_fetch_add_explicit(f->layers_done, 1, memory_order_relaxed);
        if (l + 1 < c->n_layer && stop_set(f))
            return FWD_STOPPED; /* preempted (forward_set_stop) */
    }

    /* Only wanted rows go through the output head:
     * x[wanted[j]] += xb[wanted[j]] (the last residual), then
     * xb[j] (n_want, dim) = rmsnorm(x[wanted[j]]) * output_norm. */
    /* Rows wanting their hidden state (embeddings) first, in row order:
     * x[r] += xb[r]; hidden[j] = rmsnorm(x[r]) * output_norm. Their residual
     * is then in x, so the logits pass below must not add xb again. */
    if (b->want_hidden) {
        int j = 0;
        for (int r = 0; r < R; r++)
            if (b->want_hidden[r]) {
                add_rmsnorm_row(f->x + (size_t)r * dim, f->xb + (size_t)r * dim,
                                b->hidden + (size_t)j * dim, m->output_norm, dim, c->norm_eps);
                j++;
            }
    }
    double t_head = prof ? now_ns() : 0;
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
        bool added = b->want_hidden && b->want_hidden[r];
        add_rmsnorm_row(f->x + r * dim, added ? NULL : f->xb + r * dim, f->xb + (size_t)j * dim,
                        m->output_norm, dim, c->norm_eps);
    }
    /* logits (n_want, vocab) = xb · Woutᵀ;  [gemma2: logits = cap * tanh(logits / cap)] */
    mm(f, &m->output, f->xb, n_want, logits);
    if (c->final_softcap > 0)
        softcap(logits, (size_t)n_want * c->vocab, c->final_softcap);
    if (prof) {
        f->prof_ns[PH_HEAD] += now_ns() - t_head;
        f->prof_bytes[PH_HEAD] += (double)matmul_weight_bytes(&m->output);
    }
    return 0;
}
