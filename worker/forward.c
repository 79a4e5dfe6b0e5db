/* forward.c — batched llama/qwen2 forward pass over a paged KV cache (see
 * forward.h). Reads like the math, one comment per step; every scratch
 * pointer carries its shape. R = rows of the current batch (<= max_rows). */
#include "worker/forward.h"

#include <assert.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "worker/matmul.h"

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
    float *scores;       /* (n_threads, ctx)   attention weights, one row per thread */
    int32_t *wanted;     /* (max_rows)         indices of rows with want_logits */
    char err[160];
};

/* Threads for a parallel region touching `work` floats: below the threshold
 * the region runs on the calling thread, because waking the pool and the
 * closing barrier cost more than they save (and on a loaded machine a
 * barrier waits for a descheduled thread). */
#define FWD_PAR_MIN_WORK 16384
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
    return matmul_use_int8(f->mm, f->max_rows);
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
#define ALLOC(n) xaligned_alloc((n) * sizeof(float))
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
    f->scores = ALLOC((size_t)f->n_threads * (size_t)c->ctx);
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

int forward_env_reexec(char **argv)
{
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT"))
        return 0;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0)
        return -1;
    execv("/proc/self/exe", argv);
    return -1;
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
        kv->block_size < 1 || kv->n_blocks < 1)
        return bad(f, "kv_store shape does not fit the model (n_layer %d kv_dim %d)", c->n_layer, c->kv_dim);
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

/* out (R, n) = x / sqrt(mean(x²) + eps) * w, row by row. */
static void rmsnorm(forward_t *f, float *out, const float *x, const float *w, int R, int n, float eps)
{
#pragma omp parallel for num_threads(nth(f, (size_t)R * n)) schedule(static)
    for (int r = 0; r < R; r++) {
        const float *xr = x + (size_t)r * n;
        float *o = out + (size_t)r * n;
        double ss = 0;
        for (int i = 0; i < n; i++)
            ss += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(ss / n + eps));
        for (int i = 0; i < n; i++)
            o[i] = xr[i] * inv * w[i];
    }
}

/* Rotates the first rope_dim dims of each of n_heads heads of every row.
 * v (R, n_heads*head_dim). Normal pairing: (2i, 2i+1); NeoX: (i, i+half). */
static void rope(forward_t *f, float *v, int R, int n_heads)
{
    const model_config_t *c = &f->m->cfg;
    const int half = c->rope_dim / 2, hd = c->head_dim;
#pragma omp parallel for num_threads(nth(f, (size_t)R * n_heads * hd)) schedule(static) collapse(2)
    for (int r = 0; r < R; r++) {
        for (int h = 0; h < n_heads; h++) {
            float *x = v + ((size_t)r * n_heads + h) * hd;
            const float *cs = f->rope_cos + (size_t)r * half, *sn = f->rope_sin + (size_t)r * half;
            for (int i = 0; i < half; i++) {
                int i0 = c->rope_neox ? i : 2 * i, i1 = c->rope_neox ? i + half : 2 * i + 1;
                float a = x[i0], bb = x[i1];
                x[i0] = a * cs[i] - bb * sn[i];
                x[i1] = a * sn[i] + bb * cs[i];
            }
        }
    }
}

/* y (R, n) += b (n) for every row. */
static void add_bias(forward_t *f, float *y, const float *b, int R, int n)
{
    if (!b)
        return;
#pragma omp parallel for num_threads(nth(f, (size_t)R * n)) schedule(static)
    for (int r = 0; r < R; r++)
        for (int i = 0; i < n; i++)
            y[(size_t)r * n + i] += b[i];
}

/* x (R, n) += d (R, n). */
static void residual(forward_t *f, float *x, const float *d, int R, int n)
{
    size_t N = (size_t)R * n;
#pragma omp parallel for num_threads(nth(f, N)) schedule(static)
    for (size_t i = 0; i < N; i++)
        x[i] += d[i];
}

static void mm(forward_t *f, const matmul_weight_t *w, const float *x, int R, float *y)
{
    int rc = matmul_run(f->mm, w, x, R, y);
    assert(rc == 0 && "weights were validated at load");
    (void)rc;
}

/* Causal attention of every (row, head) against its sequence's cached K/V
 * for layer l. q (R, q_dim) → att (R, q_dim). */
static void attention(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv, int l)
{
    const model_config_t *c = &f->m->cfg;
    const int hd = c->head_dim, group = c->n_head / c->n_kv_head, bs = kv->block_size;
    const float scale = 1.0f / sqrtf((float)hd);
    const int R = b->n_rows;
    size_t work = 0;  /* floats of K and V read: Σ_r (pos+1) * q_dim */
    for (int r = 0; r < R; r++)
        work += (size_t)(b->pos[r] + 1) * (size_t)c->q_dim;
    (void)work;  /* unused when compiled without OpenMP */
#pragma omp parallel for num_threads(nth(f, work)) schedule(dynamic, 1) collapse(2)
    for (int r = 0; r < R; r++) {
        for (int h = 0; h < c->n_head; h++) {
            const int32_t *bt = b->block_tables[b->seq[r]];
            const int n_pos = b->pos[r] + 1;        /* attends to positions 0..pos */
            const int kvo = (h / group) * hd;       /* offset of this head's kv head in a K/V vector */
            const float *qh = f->q + (size_t)r * c->q_dim + (size_t)h * hd;  /* (hd) */
            float *sc = f->scores + (size_t)omp_get_thread_num() * c->ctx;    /* (n_pos) */
            float *out = f->att + (size_t)r * c->q_dim + (size_t)h * hd;     /* (hd) */
            /* sc[t] = q · k_t / sqrt(hd) */
            float mx = -INFINITY;
            for (int t = 0; t < n_pos; t++) {
                const float *kt = kv_store_k(kv, l, bt[t / bs], t % bs) + kvo;
                float d = 0;
                for (int i = 0; i < hd; i++)
                    d += qh[i] * kt[i];
                sc[t] = d * scale;
                if (sc[t] > mx)
                    mx = sc[t];
            }
            /* sc = softmax(sc) */
            float sum = 0;
            for (int t = 0; t < n_pos; t++) {
                sc[t] = expf(sc[t] - mx);
                sum += sc[t];
            }
            const float inv = 1.0f / sum;
            /* out = Σ_t sc[t] v_t */
            for (int i = 0; i < hd; i++)
                out[i] = 0;
            for (int t = 0; t < n_pos; t++) {
                const float *vt = kv_store_v(kv, l, bt[t / bs], t % bs) + kvo;
                const float w = sc[t] * inv;
                for (int i = 0; i < hd; i++)
                    out[i] += w * vt[i];
            }
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

    for (int l = 0; l < c->n_layer; l++) {
        const model_layer_t *L = &m->layers[l];

        /* xb (R, dim) = rmsnorm(x) * attn_norm */
        rmsnorm(f, f->xb, f->x, L->attn_norm, R, dim, c->norm_eps);

        /* q (R, q_dim), k, v (R, kv_dim) = xb · W{q,k,v}ᵀ (+ bias) */
        mm(f, &L->wq, f->xb, R, f->q);
        mm(f, &L->wk, f->xb, R, f->k);
        mm(f, &L->wv, f->xb, R, f->v);
        add_bias(f, f->q, L->bq, R, c->q_dim);
        add_bias(f, f->k, L->bk, R, c->kv_dim);
        add_bias(f, f->v, L->bv, R, c->kv_dim);

        /* rotate q and k by their row's position */
        rope(f, f->q, R, c->n_head);
        rope(f, f->k, R, c->n_kv_head);

        /* cache[l, block_table[pos / bs], pos % bs] = k, v  (all rows before any attends) */
        for (int r = 0; r < R; r++) {
            const int32_t *bt = b->block_tables[b->seq[r]];
            int p = b->pos[r];
            int blk = bt[p / kv->block_size], slot = p % kv->block_size;
            memcpy(kv_store_k(kv, l, blk, slot), f->k + (size_t)r * c->kv_dim, (size_t)c->kv_dim * sizeof(float));
            memcpy(kv_store_v(kv, l, blk, slot), f->v + (size_t)r * c->kv_dim, (size_t)c->kv_dim * sizeof(float));
        }

        /* att (R, q_dim) = softmax(q kᵀ / sqrt(hd), causal) v, per head over its kv head */
        attention(f, b, kv, l);

        /* x += att · Woᵀ   (xb reused as (R, dim) output) */
        mm(f, &L->wo, f->att, R, f->xb);
        residual(f, f->x, f->xb, R, dim);

        /* xb = rmsnorm(x) * ffn_norm */
        rmsnorm(f, f->xb, f->x, L->ffn_norm, R, dim, c->norm_eps);

        /* hg, hu (R, ffn) = xb · W{gate,up}ᵀ;  hg = silu(hg) * hu */
        mm(f, &L->w_gate, f->xb, R, f->hg);
        mm(f, &L->w_up, f->xb, R, f->hu);
        const size_t N = (size_t)R * c->ffn_dim;
#pragma omp parallel for num_threads(nth(f, N)) schedule(static)
        for (size_t i = 0; i < N; i++) {
            float g = f->hg[i];
            f->hg[i] = g / (1.0f + expf(-g)) * f->hu[i];
        }

        /* x += hg · Wdownᵀ */
        mm(f, &L->w_down, f->hg, R, f->xb);
        residual(f, f->x, f->xb, R, dim);
    }

    /* Only wanted rows go through the output head: xb[j] (n_want, dim) = x[wanted[j]]. */
    int n_want = 0;
    for (int r = 0; r < R; r++)
        if (b->want_logits[r])
            f->wanted[n_want++] = r;
    if (n_want == 0)
        return 0;
    for (int j = 0; j < n_want; j++)
        memcpy(f->xb + (size_t)j * dim, f->x + (size_t)f->wanted[j] * dim, (size_t)dim * sizeof(float));

    /* xb (n_want, dim) = rmsnorm(xb) * output_norm;  logits (n_want, vocab) = xb · Woutᵀ */
    rmsnorm(f, f->xb, f->xb, m->output_norm, n_want, dim, c->norm_eps);
    mm(f, &m->output, f->xb, n_want, logits);
    return 0;
}
