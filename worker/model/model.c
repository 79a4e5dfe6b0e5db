/* model.c — validates a GGUF file's metadata and tensors against the llama /
 * qwen2 architectures and builds the model_t the forward pass reads (see
 * model.h). The file is hostile input: every key, shape, type and byte count
 * is checked before a pointer into it is kept. */
#include "worker/model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"

/* Hard upper bounds on metadata: beyond these a file is treated as bogus
 * rather than risking overflow in size arithmetic. */
#define MODEL_MAX_LAYERS 1024
#define MODEL_MAX_DIM (1 << 17)
#define MODEL_MAX_HEADS 1024
#define MODEL_MAX_VOCAB (1 << 22)
#define MODEL_MAX_CTX (1 << 24)

typedef struct loader {
    const gguf_t *g;
    const char *arch;     /* "llama" or "qwen2" */
    char *err;
    size_t errlen;
    float *arena;         /* f32 storage for 1-D tensors */
    size_t arena_used, arena_cap;
} loader_t;

static int fail(loader_t *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader_t *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(ld->err, ld->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* Integer metadata {arch}.<suffix>; def < 0 means required. */
static int get_i(loader_t *ld, const char *suffix, int64_t def, int64_t lo, int64_t hi, int32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    int64_t v;
    if (gguf_get_int(ld->g, key, &v) != 0) {
        if (gguf_find_kv(ld->g, key))
            return fail(ld, "metadata %s has an unexpected type", key);
        if (def < 0)
            return fail(ld, "metadata %s missing", key);
        v = def;
    }
    if (v < lo || v > hi)
        return fail(ld, "metadata %s = %" PRId64 " out of range [%" PRId64 ", %" PRId64 "]", key, v, lo, hi);
    *out = (int32_t)v;
    return 0;
}

static int get_f(loader_t *ld, const char *suffix, double def, float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, suffix);
    double v;
    if (gguf_get_float(ld->g, key, &v) != 0) {
        if (gguf_find_kv(ld->g, key))
            return fail(ld, "metadata %s has an unexpected type", key);
        v = def;
    }
    if (!isfinite(v))
        return fail(ld, "metadata %s is not finite", key);
    *out = (float)v;
    return 0;
}

/* Checks that tensor `name` exists (unless optional), has the given
 * [cols, rows] shape (rows = 0 for 1-D), a loadable type and consistent
 * byte count. Returns 1 found, 0 absent-and-optional, -1 error. */
static int find_checked(loader_t *ld, const char *name, int64_t cols, int64_t rows, int optional,
                        const gguf_tensor_t **out)
{
    const gguf_tensor_t *t = gguf_find_tensor(ld->g, name);
    *out = t;
    if (!t) {
        if (optional)
            return 0;
        return fail(ld, "tensor %s missing", name);
    }
    if (!ggml_type_supported(t->type))
        return fail(ld, "tensor %s has unsupported type %s (%u)", name, ggml_type_name(t->type), t->type);
    uint32_t want_dims = rows ? 2 : 1;
    for (uint32_t d = want_dims; d < t->n_dims; d++)
        if (t->ne[d] != 1)
            return fail(ld, "tensor %s has %u dimensions, expected %u", name, t->n_dims, want_dims);
    if ((int64_t)t->ne[0] != cols || (rows && (int64_t)t->ne[1] != rows) || (!rows && t->ne[1] != 1))
        return fail(ld, "tensor %s has shape [%" PRIu64 ", %" PRIu64 "], expected [%" PRId64 ", %" PRId64 "]",
                    name, t->ne[0], t->ne[1], cols, rows ? rows : 1);
    uint32_t be = ggml_type_block_elems(t->type);
    if (be == 0 || cols % be != 0)
        return fail(ld, "tensor %s: row length %" PRId64 " is not a multiple of the %s block (%u)",
                    name, cols, ggml_type_name(t->type), be);
    size_t rb = quant_row_bytes(t->type, cols);
    uint64_t n_rows = rows ? (uint64_t)rows : 1;
    if (rb == 0 || t->nbytes != rb * n_rows)
        return fail(ld, "tensor %s: %" PRIu64 " bytes, expected %" PRIu64, name, t->nbytes, (uint64_t)(rb * n_rows));
    /* sgemm reads F32 weights in place: they must be float-aligned. */
    if (((uintptr_t)t->data & 3) != 0)
        return fail(ld, "tensor %s: data is not 4-byte aligned", name);
    return 1;
}

static int load_matrix(loader_t *ld, const char *name, int64_t cols, int64_t rows, int optional,
                       matmul_weight_t *w)
{
    const gguf_tensor_t *t;
    int rc = find_checked(ld, name, cols, rows, optional, &t);
    if (rc <= 0)
        return rc;
    w->type = t->type;
    w->rows = rows;
    w->cols = cols;
    w->row_bytes = quant_row_bytes(t->type, cols);
    w->data = t->data;
    return 1;
}

/* 1-D tensor converted to floats in the arena. */
static int load_vector(loader_t *ld, const char *name, int64_t n, int optional, const float **out)
{
    const gguf_tensor_t *t;
    *out = NULL;
    int rc = find_checked(ld, name, n, 0, optional, &t);
    if (rc <= 0)
        return rc;
    if (ld->arena_used + (size_t)n > ld->arena_cap)
        return fail(ld, "tensor %s: internal arena exhausted", name);
    float *dst = ld->arena + ld->arena_used;
    if (quant_dequantize(t->type, t->data, dst, n) != 0)
        return fail(ld, "tensor %s: cannot convert type %s", name, ggml_type_name(t->type));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return fail(ld, "tensor %s: non-finite value at %" PRId64, name, i);
    ld->arena_used += (size_t)n;
    *out = dst;
    return 1;
}

static int load_config(loader_t *ld, model_config_t *c)
{
    if (get_i(ld, "block_count", -1, 1, MODEL_MAX_LAYERS, &c->n_layer) ||
        get_i(ld, "embedding_length", -1, 1, MODEL_MAX_DIM, &c->dim) ||
        get_i(ld, "attention.head_count", -1, 1, MODEL_MAX_HEADS, &c->n_head) ||
        get_i(ld, "attention.head_count_kv", c->n_head, 1, MODEL_MAX_HEADS, &c->n_kv_head) ||
        get_i(ld, "feed_forward_length", -1, 1, MODEL_MAX_DIM, &c->ffn_dim) ||
        get_i(ld, "context_length", -1, 1, MODEL_MAX_CTX, &c->ctx))
        return -1;
    if (c->n_head % c->n_kv_head != 0)
        return fail(ld, "head_count %d is not a multiple of head_count_kv %d", c->n_head, c->n_kv_head);
    char klen[128];
    snprintf(klen, sizeof klen, "%s.attention.key_length", ld->arch);
    if (c->dim % c->n_head != 0 && !gguf_find_kv(ld->g, klen))
        return fail(ld, "embedding_length %d is not a multiple of head_count %d", c->dim, c->n_head);
    if (get_i(ld, "attention.key_length", c->dim / c->n_head, 2, 4096, &c->head_dim))
        return -1;
    int32_t vlen;
    if (get_i(ld, "attention.value_length", c->head_dim, 1, 4096, &vlen))
        return -1;
    if (vlen != c->head_dim)
        return fail(ld, "attention.value_length %d != key_length %d is not supported", vlen, c->head_dim);
    if ((int64_t)c->n_head * c->head_dim > MODEL_MAX_DIM)
        return fail(ld, "n_head * head_dim too large");
    c->q_dim = c->n_head * c->head_dim;
    c->kv_dim = c->n_kv_head * c->head_dim;
    if (get_f(ld, "attention.layer_norm_rms_epsilon", 1e-5, &c->norm_eps) ||
        get_f(ld, "rope.freq_base", 10000.0, &c->rope_base) ||
        get_i(ld, "rope.dimension_count", c->head_dim, 2, c->head_dim, &c->rope_dim))
        return -1;
    if (c->norm_eps < 0 || c->rope_base <= 0)
        return fail(ld, "bad norm epsilon or rope base");
    if (c->rope_dim % 2 != 0)
        return fail(ld, "rope.dimension_count %d is odd", c->rope_dim);
    c->rope_neox = c->arch == MODEL_ARCH_QWEN2;

    /* Rope scaling: {arch}.rope.scaling.type, or the older rope.scale_linear. */
    char key[128];
    gguf_str_t st;
    c->rope_scaling = MODEL_ROPE_SCALING_NONE;
    c->rope_scale_factor = 1.0f;
    snprintf(key, sizeof key, "%s.rope.scaling.type", ld->arch);
    if (gguf_get_str(ld->g, key, &st) == 0) {
        if (gguf_str_eq(st, "linear"))
            c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
        else if (gguf_str_eq(st, "llama3"))
            c->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;
        else if (!gguf_str_eq(st, "none"))
            return fail(ld, "rope scaling type '%.*s' is not supported", (int)(st.len > 32 ? 32 : st.len), st.ptr);
    } else if (gguf_find_kv(ld->g, key)) {
        return fail(ld, "metadata %s is not a string", key);
    }
    if (c->rope_scaling != MODEL_ROPE_SCALING_NONE) {
        if (get_f(ld, "rope.scaling.factor", c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3 ? 8.0 : 1.0,
                  &c->rope_scale_factor))
            return -1;
    } else {
        float lin;
        if (get_f(ld, "rope.scale_linear", 1.0, &lin))
            return -1;
        if (lin != 1.0f) {
            c->rope_scaling = MODEL_ROPE_SCALING_LINEAR;
            c->rope_scale_factor = lin;
        }
    }
    if (!(c->rope_scale_factor > 0))
        return fail(ld, "rope scaling factor %g is not positive", c->rope_scale_factor);
    if (get_f(ld, "rope.scaling.low_freq_factor", 1.0, &c->rope_llama3_low) ||
        get_f(ld, "rope.scaling.high_freq_factor", 4.0, &c->rope_llama3_high) ||
        get_i(ld, "rope.scaling.original_context_length", 8192, 1, MODEL_MAX_CTX, &c->rope_llama3_orig_ctx))
        return -1;
    if (c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3 &&
        !(c->rope_llama3_high > c->rope_llama3_low && c->rope_llama3_low > 0))
        return fail(ld, "llama3 rope: need high_freq_factor > low_freq_factor > 0");
    return 0;
}

/* inv_freq[i] = base^(-2i/rope_dim), then the scaling's per-frequency factors. */
static int load_rope(loader_t *ld, model_t *m)
{
    model_config_t *c = &m->cfg;
    int half = c->rope_dim / 2;
    m->rope_inv_freq = xmalloc((size_t)half * sizeof(double));
    m->rope_pos_scale = 1.0;
    for (int i = 0; i < half; i++)
        m->rope_inv_freq[i] = pow((double)c->rope_base, -2.0 * i / c->rope_dim);
    if (c->rope_scaling == MODEL_ROPE_SCALING_LINEAR)
        m->rope_pos_scale = 1.0 / c->rope_scale_factor;

    const float *factors;
    int rc = load_vector(ld, "rope_freqs.weight", half, 1, &factors);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        /* llama.cpp's converter writes the llama3 factors as a tensor. */
        for (int i = 0; i < half; i++) {
            if (!(factors[i] > 0))
                return fail(ld, "rope_freqs.weight[%d] is not positive", i);
            m->rope_inv_freq[i] /= factors[i];
        }
        c->rope_scaling = MODEL_ROPE_SCALING_LLAMA3;
    } else if (c->rope_scaling == MODEL_ROPE_SCALING_LLAMA3) {
        /* Llama 3.1: keep high frequencies, divide low ones by factor, blend between. */
        double factor = c->rope_scale_factor, lo = c->rope_llama3_low, hi = c->rope_llama3_high;
        double old = c->rope_llama3_orig_ctx;
        for (int i = 0; i < half; i++) {
            double f = m->rope_inv_freq[i], wavelen = 2.0 * M_PI / f;
            if (wavelen < old / hi)
                continue;
            if (wavelen > old / lo) {
                m->rope_inv_freq[i] = f / factor;
            } else {
                double s = (old / wavelen - lo) / (hi - lo);
                m->rope_inv_freq[i] = (1.0 - s) * f / factor + s * f;
            }
        }
    }
    return 0;
}

static void widen(model_t *m, const matmul_weight_t *w)
{
    if (w->cols > m->max_cols)
        m->max_cols = w->cols;
}

static int load_layers(loader_t *ld, model_t *m)
{
    const model_config_t *c = &m->cfg;
    char name[96];
    m->layers = xcalloc((size_t)c->n_layer, sizeof(model_layer_t));
    for (int l = 0; l < c->n_layer; l++) {
        model_layer_t *L = &m->layers[l];
#define T(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
        if (load_vector(ld, T("attn_norm.weight"), c->dim, 0, &L->attn_norm) < 0 ||
            load_matrix(ld, T("attn_q.weight"), c->dim, c->q_dim, 0, &L->wq) < 0 ||
            load_matrix(ld, T("attn_k.weight"), c->dim, c->kv_dim, 0, &L->wk) < 0 ||
            load_matrix(ld, T("attn_v.weight"), c->dim, c->kv_dim, 0, &L->wv) < 0 ||
            load_matrix(ld, T("attn_output.weight"), c->q_dim, c->dim, 0, &L->wo) < 0 ||
            load_vector(ld, T("ffn_norm.weight"), c->dim, 0, &L->ffn_norm) < 0 ||
            load_matrix(ld, T("ffn_gate.weight"), c->dim, c->ffn_dim, 0, &L->w_gate) < 0 ||
            load_matrix(ld, T("ffn_up.weight"), c->dim, c->ffn_dim, 0, &L->w_up) < 0 ||
            load_matrix(ld, T("ffn_down.weight"), c->ffn_dim, c->dim, 0, &L->w_down) < 0)
            return -1;
        /* qwen2 has Q/K/V biases; llama files normally have none, but a
         * llama file carrying them is honoured too. */
        int opt = c->arch != MODEL_ARCH_QWEN2;
        if (load_vector(ld, T("attn_q.bias"), c->q_dim, opt, &L->bq) < 0 ||
            load_vector(ld, T("attn_k.bias"), c->kv_dim, opt, &L->bk) < 0 ||
            load_vector(ld, T("attn_v.bias"), c->kv_dim, opt, &L->bv) < 0)
            return -1;
        if (!L->bq != !L->bk || !L->bq != !L->bv)
            return fail(ld, "layer %d: Q/K/V biases must be all present or all absent", l);
        if (gguf_find_tensor(ld->g, T("attn_output.bias")))
            return fail(ld, "tensor %s (output projection bias) is not supported", name);
#undef T
        widen(m, &L->wq);
        widen(m, &L->wo);
        widen(m, &L->w_gate);
        widen(m, &L->w_down);
    }
    return 0;
}

int model_load_gguf(gguf_t **gp, model_t **out, char *err, size_t errlen)
{
    loader_t ld = { .g = *gp, .err = err, .errlen = errlen };
    model_t *m = xcalloc(1, sizeof *m);
    model_config_t *c = &m->cfg;
    if (err && errlen)
        err[0] = '\0';

    gguf_str_t arch;
    if (gguf_get_str(ld.g, "general.architecture", &arch) != 0) {
        fail(&ld, "metadata general.architecture missing");
        goto err;
    }
    if (gguf_str_eq(arch, "llama")) {
        c->arch = MODEL_ARCH_LLAMA;
        ld.arch = "llama";
    } else if (gguf_str_eq(arch, "qwen2")) {
        c->arch = MODEL_ARCH_QWEN2;
        ld.arch = "qwen2";
    } else {
        fail(&ld, "architecture '%.*s' is not supported (supported: llama, qwen2)",
             (int)(arch.len > 64 ? 64 : arch.len), arch.ptr);
        goto err;
    }
    if (load_config(&ld, c) != 0)
        goto err;

    /* vocab comes from the embedding's shape. */
    const gguf_tensor_t *emb = gguf_find_tensor(ld.g, "token_embd.weight");
    if (!emb) {
        fail(&ld, "tensor token_embd.weight missing");
        goto err;
    }
    if (emb->ne[1] < 1 || emb->ne[1] > MODEL_MAX_VOCAB) {
        fail(&ld, "token_embd.weight: vocabulary size %" PRIu64 " out of range", emb->ne[1]);
        goto err;
    }
    c->vocab = (int32_t)emb->ne[1];

    /* Every 1-D float tensor the loader may convert: norms, biases, rope factors. */
    ld.arena_cap = (size_t)c->n_layer * (2 * (size_t)c->dim + (size_t)c->q_dim + 2 * (size_t)c->kv_dim) +
                   (size_t)c->dim + (size_t)c->rope_dim;
    ld.arena = m->f32_arena = xmalloc(ld.arena_cap * sizeof(float));

    if (load_matrix(&ld, "token_embd.weight", c->dim, c->vocab, 0, &m->tok_embd) < 0 ||
        load_vector(&ld, "output_norm.weight", c->dim, 0, &m->output_norm) < 0)
        goto err;
    int rc = load_matrix(&ld, "output.weight", c->dim, c->vocab, 1, &m->output);
    if (rc < 0)
        goto err;
    if (rc == 0) {
        m->output = m->tok_embd;
        c->tied_output = 1;
    }
    widen(m, &m->output);
    if (load_rope(&ld, m) != 0 || load_layers(&ld, m) != 0)
        goto err;

    m->gguf = *gp;
    *gp = NULL;
    *out = m;
    return 0;
err:
    free(m->layers);
    free(m->rope_inv_freq);
    free(m->f32_arena);
    free(m);
    return -1;
}

int model_load(const char *path, model_t **out, char *err, size_t errlen)
{
    gguf_t *g = NULL;
    if (gguf_open(path, &g, err, errlen) != 0)
        return -1;
    if (model_load_gguf(&g, out, err, errlen) != 0) {
        gguf_close(&g);
        return -1;
    }
    return 0;
}

/* Every matmul weight of m that model_pack_int8 may pack, with whether
 * another path (the embedding lookup) reads its rows. */
static int matmul_weights(model_t *m, matmul_weight_t **ws, int *shared)
{
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        model_layer_t *L = &m->layers[l];
        matmul_weight_t *lw[7] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
        for (int i = 0; i < 7; i++) {
            shared[n] = 0;
            ws[n++] = lw[i];
        }
    }
    shared[n] = m->output.data == m->tok_embd.data;
    ws[n++] = &m->output;
    return n;
}

int model_pack_int8(model_t *m, int n_threads)
{
    if (!m || m->packed_arena || !qgemm_avx2_available())
        return 0;
    int n_ws = 7 * m->cfg.n_layer + 1, n_packed = 0;
    matmul_weight_t **ws = xmalloc((size_t)n_ws * sizeof *ws);
    int *shared = xmalloc((size_t)n_ws * sizeof *shared);
    n_ws = matmul_weights(m, ws, shared);
    /* one arena for all packings: each size is a multiple of 64, so every
     * packing starts 64-byte aligned */
    size_t total = 0;
    for (int i = 0; i < n_ws; i++)
        if (!ws[i]->packed)
            total += qgemm_packed_size(ws[i]->type, ws[i]->rows, ws[i]->cols);
    if (total == 0)
        goto out;
    /* On huge pages the 1-row decode, which streams every packed byte from
     * DRAM once per token, ran ~10 % faster (fewer TLB misses; the hardware
     * prefetcher does not cross 4 KiB pages), and packing faults in 2 MiB
     * at a time (110M model: 45 instead of 95 ms). */
    void *arena = xhuge_alloc(total);
    m->packed_arena = arena;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const bool mapped = m->gguf && m->gguf->map;
    uint8_t *at = arena;
    for (int i = 0; i < n_ws; i++) {
        matmul_weight_t *w = ws[i];
        size_t sz = w->packed ? 0 : qgemm_packed_size(w->type, w->rows, w->cols);
        if (sz == 0 || qgemm_pack_to(w->type, w->data, w->rows, w->cols, at, n_threads) != 0)
            continue;
        w->packed = at;
        at += sz;
        n_packed++;
        /* Drop the file pages wholly inside this matrix: the hot path reads
         * the packing now. Only for a file mapping (MAP_PRIVATE, never
         * written): the pages come back from the file on the next read. */
        if (mapped && !shared[i] && page > 0) {
            uintptr_t a = (uintptr_t)w->data, e = a + (size_t)w->rows * w->row_bytes;
            a = (a + page - 1) / page * page;
            e = e / page * page;
            if (e > a)
                (void)madvise((void *)a, e - a, MADV_DONTNEED);
        }
    }
    m->packed_bytes = (size_t)(at - (uint8_t *)arena);
out:
    free(ws);
    free(shared);
    return n_packed;
}

void model_free(model_t **mp)
{
    if (!mp || !*mp)
        return;
    model_t *m = *mp;
    free(m->packed_arena);
    gguf_close(&m->gguf);
    free(m->layers);
    free(m->rope_inv_freq);
    free(m->f32_arena);
    free(m);
    *mp = NULL;
}

static size_t wbytes(const matmul_weight_t *w)
{
    return (size_t)w->rows * w->row_bytes;
}

size_t model_weight_bytes(const model_t *m)
{
    size_t n = wbytes(&m->tok_embd) + (m->cfg.tied_output ? 0 : wbytes(&m->output));
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const model_layer_t *L = &m->layers[l];
        n += wbytes(&L->wq) + wbytes(&L->wk) + wbytes(&L->wv) + wbytes(&L->wo) +
             wbytes(&L->w_gate) + wbytes(&L->w_up) + wbytes(&L->w_down);
    }
    return n;
}

void model_describe(const model_t *m, char *buf, size_t len)
{
    const model_config_t *c = &m->cfg;
    static const char *const scal[] = { "none", "linear", "llama3" };
    snprintf(buf, len,
             "%s: %d layers, dim %d, %d heads (%d kv, head_dim %d), ffn %d, vocab %d, ctx %d, "
             "rope %s base %g dim %d scaling %s x%g, eps %g, %s output, weights %s %.1f MiB",
             c->arch == MODEL_ARCH_QWEN2 ? "qwen2" : "llama", c->n_layer, c->dim, c->n_head,
             c->n_kv_head, c->head_dim, c->ffn_dim, c->vocab, c->ctx, c->rope_neox ? "neox" : "normal",
             (double)c->rope_base, c->rope_dim, scal[c->rope_scaling], (double)c->rope_scale_factor,
             (double)c->norm_eps, c->tied_output ? "tied" : "separate",
             ggml_type_name(m->layers[0].wq.type), (double)model_weight_bytes(m) / (1024.0 * 1024.0));
}
