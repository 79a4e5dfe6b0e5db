/* model.c — validates a GGUF file's metadata and tensors against the
 * architecture table (arch.h: a family's row says which keys, tensors and
 * features it has) and builds the model_t the forward pass reads (see
 * model.h). The file is hostile input: every key, shape, type and byte count
 * is checked before a pointer into it is kept. */
#include "worker/model/model.h"

#include <assert.h>
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
    const char *arch;     /* general.architecture, e.g. "llama" */
    const model_arch_info_t *fam; /* its row of the architecture table */
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

/* w = rows [row0, row0 + n) of the matrix `whole` (a fused tensor split
 * into its parts: rows are contiguous, so a part is a sub-range). */
static matmul_weight_t matrix_rows(const matmul_weight_t *whole, int64_t row0, int64_t n)
{
    matmul_weight_t w = *whole;
    w.rows = n;
    w.data = (const uint8_t *)whole->data + (size_t)row0 * whole->row_bytes;
    w.packed = NULL;
    return w;
}

/* 3-D expert tensor [cols, rows, n_expert]: n_expert views of (rows, cols)
 * into *out (malloc'd array, owned by the layer). Required. */
static int load_experts(loader_t *ld, const char *name, int64_t cols, int64_t rows, int64_t n_expert,
                        matmul_weight_t **out)
{
    const gguf_tensor_t *t = gguf_find_tensor(ld->g, name);
    if (!t)
        return fail(ld, "tensor %s missing", name);
    if (!ggml_type_supported(t->type))
        return fail(ld, "tensor %s has unsupported type %s (%u)", name, ggml_type_name(t->type), t->type);
    for (uint32_t d = 3; d < t->n_dims; d++)
        if (t->ne[d] != 1)
            return fail(ld, "tensor %s has %u dimensions, expected 3", name, t->n_dims);
    if ((int64_t)t->ne[0] != cols || (int64_t)t->ne[1] != rows || (int64_t)t->ne[2] != n_expert)
        return fail(ld, "tensor %s has shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 "], expected [%" PRId64
                    ", %" PRId64 ", %" PRId64 "]", name, t->ne[0], t->ne[1], t->ne[2], cols, rows, n_expert);
    uint32_t be = ggml_type_block_elems(t->type);
    if (be == 0 || cols % be != 0)
        return fail(ld, "tensor %s: row length %" PRId64 " is not a multiple of the %s block (%u)",
                    name, cols, ggml_type_name(t->type), be);
    size_t rb = quant_row_bytes(t->type, cols);
    if (rb == 0 || t->nbytes != rb * (uint64_t)rows * (uint64_t)n_expert)
        return fail(ld, "tensor %s: %" PRIu64 " bytes, expected %" PRIu64, name, t->nbytes,
                    (uint64_t)(rb * (uint64_t)rows * (uint64_t)n_expert));
    if (((uintptr_t)t->data & 3) != 0)
        return fail(ld, "tensor %s: data is not 4-byte aligned", name);
    matmul_weight_t whole = { .type = t->type, .rows = rows * n_expert, .cols = cols, .row_bytes = rb,
                              .data = t->data };
    *out = xcalloc((size_t)n_expert, sizeof(matmul_weight_t));
    for (int64_t e = 0; e < n_expert; e++)
        (*out)[e] = matrix_rows(&whole, e * rows, rows);
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

/* Sliding-window layout: {arch}.attention.sliding_window (window W) and
 * sliding_window_pattern, an integer p (layer l local when l % p < p - 1)
 * or an array of n_layer bools. def_window 0: no window unless the file
 * gives one. */
static int load_swa(loader_t *ld, model_config_t *c, int32_t def_window, int32_t def_pattern)
{
    if (get_i(ld, "attention.sliding_window", def_window, 0, MODEL_MAX_CTX, &c->swa_window))
        return -1;
    c->swa_pattern = def_pattern;
    c->n_swa_layers = 0;
    if (c->swa_window == 0)
        return 0;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ld->arch);
    const gguf_kv_t *kv = gguf_find_kv(ld->g, key);
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_type != GGUF_TYPE_BOOL || kv->arr_n != (uint64_t)c->n_layer)
            return fail(ld, "metadata %s: expected %d bools", key, c->n_layer);
        c->swa_pattern = 0;  /* per layer, from the array (model_t layers[].swa) */
    } else if (get_i(ld, "attention.sliding_window_pattern", def_pattern, 1, MODEL_MAX_LAYERS, &c->swa_pattern)) {
        return -1;
    }
    return 0;
}

/* The features of the family (its row of arch.h's table); generic metadata
 * already read. */
static int load_family(loader_t *ld, model_config_t *c)
{
    const model_arch_info_t *t = ld->fam;
    c->ffn_act = t->ffn_act;
    c->qk_norm = t->qk_norm;
    c->post_norms = t->post_norms;
    c->embd_scale = t->embd_scale_sqrt_dim ? sqrtf((float)c->dim) : 1.0f;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    c->rope_attn_factor = 1.0f;
    c->rope_base_swa = c->rope_base;
    /* gemma_pytorch: the 27B models scale by 1/sqrt(dim / n_head) (their
     * query_pre_attn_scalar), the others by 1/sqrt(head_dim); llama.cpp
     * tells them apart by layer count (46: gemma2 27B, 62: gemma3 27B) */
    if (t->attn_scale_layers > 0 && c->n_layer == t->attn_scale_layers)
        c->attn_scale = 1.0f / sqrtf((float)c->dim / (float)c->n_head);
    if (t->softcap) {
        if (get_f(ld, "attn_logit_softcapping", t->attn_softcap, &c->attn_softcap) ||
            get_f(ld, "final_logit_softcapping", t->final_softcap, &c->final_softcap))
            return -1;
        if (t->attn_softcap_off)
            c->attn_softcap = 0;  /* removed in Gemma 3 */
        if (c->attn_softcap < 0 || c->final_softcap < 0)
            return fail(ld, "negative soft-capping");
    }
    /* llama: Mistral v0.1-style, every layer within the window when the file
     * gives one; gemma: local layers interleaved with global ones */
    if (t->swa && load_swa(ld, c, t->swa_window, t->swa_pattern))
        return -1;
    if (t->rope_swa) {
        if (get_f(ld, "rope.freq_base_swa", t->rope_base_swa > 0 ? t->rope_base_swa : c->rope_base,
                  &c->rope_base_swa))
            return -1;
        if (!(c->rope_base_swa > 0))
            return fail(ld, "rope.freq_base_swa is not positive");
        /* gemma3's local layers: own base, no scaling; gemma2: the same rope everywhere */
        c->rope_swa_own = t->rope_swa_own && c->swa_window > 0 &&
                          (c->rope_base_swa != c->rope_base || c->rope_scaling != MODEL_ROPE_SCALING_NONE);
    }
    if (t->longrope) {
        c->swa_window = 0;  /* llama.cpp ignores phi3's sliding_window too (see model.h) */
        if (get_f(ld, "rope.scaling.attn_factor", 1.0, &c->rope_attn_factor))
            return -1;
        if (!(c->rope_attn_factor > 0))
            return fail(ld, "rope.scaling.attn_factor is not positive");
    }
    if (t->moe) {
        if (get_i(ld, "expert_count", -1, 1, 4096, &c->n_expert) ||
            get_i(ld, "expert_used_count", -1, 1, 4096, &c->n_expert_used))
            return -1;
        if (c->n_expert_used > c->n_expert)
            return fail(ld, "expert_used_count %d > expert_count %d", c->n_expert_used, c->n_expert);
        if (get_i(ld, "expert_feed_forward_length", c->ffn_dim / c->n_expert_used, 1, MODEL_MAX_DIM,
                  &c->expert_ffn_dim) ||
            get_i(ld, "expert_shared_feed_forward_length", c->ffn_dim, 1, MODEL_MAX_DIM, &c->shexp_ffn_dim) ||
            get_f(ld, "expert_weights_scale", 1.0, &c->expert_scale))
            return -1;
        if (c->expert_scale == 0)
            c->expert_scale = 1;  /* llama.cpp writes 0 for "not set" */
        char key[128];
        bool norm = t->moe_norm;  /* Qwen3-MoE norm_topk_prob; Qwen1.5/2-MoE don't */
        snprintf(key, sizeof key, "%s.expert_weights_norm", ld->arch);
        if (gguf_find_kv(ld->g, key) && gguf_get_bool(ld->g, key, &norm) != 0)
            return fail(ld, "metadata %s is not a bool", key);
        c->expert_norm = norm;
        snprintf(key, sizeof key, "%s.expert_gating_func", ld->arch);
        int64_t gf;
        if (gguf_find_kv(ld->g, key) && (gguf_get_int(ld->g, key, &gf) != 0 || gf != 1))
            return fail(ld, "metadata %s: only 1 (softmax) is supported", key);
    }
    return 0;
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
    c->pooling_raw = -1;
    char pkey[128];
    snprintf(pkey, sizeof pkey, "%s.pooling_type", ld->arch);
    if (gguf_find_kv(ld->g, pkey) && get_i(ld, "pooling_type", 0, 0, 1000, &c->pooling_raw))
        return -1;
    /* llama.cpp's enum: 1 mean, 3 last; unset (-1), none (0), cls (2) and
     * rank (4) fall back to mean, which every decoder-only model can give */
    c->pooling = c->pooling_raw == MODEL_POOL_LAST ? MODEL_POOL_LAST : MODEL_POOL_MEAN;
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
    c->rope_neox = ld->fam->rope_neox;

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
    return load_family(ld, c);
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

    if (c->rope_swa_own) {
        m->rope_inv_freq_swa = xmalloc((size_t)half * sizeof(double));
        for (int i = 0; i < half; i++)
            m->rope_inv_freq_swa[i] = pow((double)c->rope_base_swa, -2.0 * i / c->rope_dim);
    }

    const float *factors;
    if (ld->fam->longrope) {
        /* LongRoPE: short factors while the context fits the original one */
        const char *which = c->ctx > c->rope_llama3_orig_ctx ? "rope_factors_long.weight" : "rope_factors_short.weight";
        int rc = load_vector(ld, which, half, 1, &factors);
        if (rc < 0)
            return -1;
        if (rc == 1) {
            for (int i = 0; i < half; i++) {
                if (!(factors[i] > 0))
                    return fail(ld, "%s[%d] is not positive", which, i);
                m->rope_inv_freq[i] /= factors[i];
            }
            c->rope_scaling = MODEL_ROPE_SCALING_LONGROPE;
        }
        return 0;
    }
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

/* Attention tensors of layer l: attn_q/k/v (+ biases) or the fused attn_qkv. */
static int load_attention(loader_t *ld, const model_config_t *c, int l, model_layer_t *L)
{
    char name[96];
#define T(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    const int64_t n_qkv = (int64_t)c->q_dim + 2 * (int64_t)c->kv_dim;
    matmul_weight_t qkv = {0};
    int rc = load_matrix(ld, T("attn_qkv.weight"), c->dim, n_qkv, 1, &qkv);
    if (rc < 0)
        return -1;
    if (rc == 1) {
        L->wq = matrix_rows(&qkv, 0, c->q_dim);
        L->wk = matrix_rows(&qkv, c->q_dim, c->kv_dim);
        L->wv = matrix_rows(&qkv, c->q_dim + c->kv_dim, c->kv_dim);
        const float *b;
        if (load_vector(ld, T("attn_qkv.bias"), n_qkv, 1, &b) < 0)
            return -1;
        if (b) {
            L->bq = b;
            L->bk = b + c->q_dim;
            L->bv = b + c->q_dim + c->kv_dim;
        }
    } else {
        if (load_matrix(ld, T("attn_q.weight"), c->dim, c->q_dim, 0, &L->wq) < 0 ||
            load_matrix(ld, T("attn_k.weight"), c->dim, c->kv_dim, 0, &L->wk) < 0 ||
            load_matrix(ld, T("attn_v.weight"), c->dim, c->kv_dim, 0, &L->wv) < 0)
            return -1;
        /* qwen2 requires Q/K/V biases; any other file carrying them has them
         * honoured too (qkv_bias_required in arch.h). */
        int opt = !ld->fam->qkv_bias_required;
        if (load_vector(ld, T("attn_q.bias"), c->q_dim, opt, &L->bq) < 0 ||
            load_vector(ld, T("attn_k.bias"), c->kv_dim, opt, &L->bk) < 0 ||
            load_vector(ld, T("attn_v.bias"), c->kv_dim, opt, &L->bv) < 0)
            return -1;
        if (!L->bq != !L->bk || !L->bq != !L->bv)
            return fail(ld, "layer %d: Q/K/V biases must be all present or all absent", l);
    }
    if (load_matrix(ld, T("attn_output.weight"), c->q_dim, c->dim, 0, &L->wo) < 0)
        return -1;
    if (gguf_find_tensor(ld->g, T("attn_output.bias")))
        return fail(ld, "tensor %s (output projection bias) is not supported", name);
    if (c->qk_norm && (load_vector(ld, T("attn_q_norm.weight"), c->head_dim, 0, &L->q_norm) < 0 ||
                       load_vector(ld, T("attn_k_norm.weight"), c->head_dim, 0, &L->k_norm) < 0))
        return -1;
    if (c->post_norms && load_vector(ld, T("post_attention_norm.weight"), c->dim, 0, &L->attn_post_norm) < 0)
        return -1;
#undef T
    return 0;
}

/* FFN tensors of layer l: gate/up/down, phi3's fused up, or the experts. */
static int load_ffn(loader_t *ld, const model_config_t *c, int l, model_layer_t *L)
{
    char name[96];
#define T(suffix) (snprintf(name, sizeof name, "blk.%d.%s", l, suffix), name)
    if (load_vector(ld, T("ffn_norm.weight"), c->dim, 0, &L->ffn_norm) < 0)
        return -1;
    if (c->post_norms && load_vector(ld, T("post_ffw_norm.weight"), c->dim, 0, &L->ffn_post_norm) < 0)
        return -1;
    if (c->n_expert > 0) {
        const int64_t fe = c->expert_ffn_dim, ne = c->n_expert;
        if (load_matrix(ld, T("ffn_gate_inp.weight"), c->dim, ne, 0, &L->router) < 0 ||
            load_experts(ld, T("ffn_gate_exps.weight"), c->dim, fe, ne, &L->exp_gate) < 0 ||
            load_experts(ld, T("ffn_up_exps.weight"), c->dim, fe, ne, &L->exp_up) < 0 ||
            load_experts(ld, T("ffn_down_exps.weight"), fe, c->dim, ne, &L->exp_down) < 0)
            return -1;
        /* the shared expert: required where the family always has one (qwen2moe) */
        int opt = !ld->fam->moe_shared_expert;
        int rc = load_vector(ld, T("ffn_gate_inp_shexp.weight"), c->dim, opt, &L->shexp_gate_inp);
        if (rc < 0)
            return -1;
        if (rc == 1 && (load_matrix(ld, T("ffn_gate_shexp.weight"), c->dim, c->shexp_ffn_dim, 0, &L->sh_gate) < 0 ||
                        load_matrix(ld, T("ffn_up_shexp.weight"), c->dim, c->shexp_ffn_dim, 0, &L->sh_up) < 0 ||
                        load_matrix(ld, T("ffn_down_shexp.weight"), c->shexp_ffn_dim, c->dim, 0, &L->sh_down) < 0))
            return -1;
        return 0;
    }
    if (load_matrix(ld, T("ffn_down.weight"), c->ffn_dim, c->dim, 0, &L->w_down) < 0)
        return -1;
    int rc = load_matrix(ld, T("ffn_gate.weight"), c->dim, c->ffn_dim, ld->fam->fused_up, &L->w_gate);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        /* phi3: ffn_up holds the gate rows, then the up rows */
        matmul_weight_t up2 = {0};
        if (load_matrix(ld, T("ffn_up.weight"), c->dim, 2 * (int64_t)c->ffn_dim, 0, &up2) < 0)
            return -1;
        L->w_gate = matrix_rows(&up2, 0, c->ffn_dim);
        L->w_up = matrix_rows(&up2, c->ffn_dim, c->ffn_dim);
        return 0;
    }
    if (load_matrix(ld, T("ffn_up.weight"), c->dim, c->ffn_dim, 0, &L->w_up) < 0)
        return -1;
#undef T
    return 0;
}

/* Which layers attend within the sliding window (cfg.swa_window > 0). */
static void load_swa_layers(loader_t *ld, model_t *m)
{
    model_config_t *c = &m->cfg;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", ld->arch);
    const gguf_kv_t *kv = c->swa_pattern == 0 ? gguf_find_kv(ld->g, key) : NULL;
    c->n_swa_layers = 0;
    for (int l = 0; l < c->n_layer; l++) {
        int swa = 0;
        if (c->swa_window > 0)
            swa = kv ? kv->arr_data[l] != 0 : (l % c->swa_pattern < c->swa_pattern - 1 || c->swa_pattern == 1);
        m->layers[l].swa = swa;
        c->n_swa_layers += swa;
    }
}

static int load_layers(loader_t *ld, model_t *m)
{
    const model_config_t *c = &m->cfg;
    char name[96];
    m->layers = xcalloc((size_t)c->n_layer, sizeof(model_layer_t));
    for (int l = 0; l < c->n_layer; l++) {
        model_layer_t *L = &m->layers[l];
        snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
        if (load_vector(ld, name, c->dim, 0, &L->attn_norm) < 0 || load_attention(ld, c, l, L) < 0 ||
            load_ffn(ld, c, l, L) < 0)
            return -1;
        widen(m, &L->wq);
        widen(m, &L->wo);
        if (c->n_expert > 0) {
            widen(m, &L->router);
            widen(m, &L->exp_gate[0]);
            widen(m, &L->exp_down[0]);
            if (L->shexp_gate_inp)
                widen(m, &L->sh_down);
        } else {
            widen(m, &L->w_gate);
            widen(m, &L->w_down);
        }
    }
    load_swa_layers(ld, m);
    return 0;
}

static void free_layers(model_t *m)
{
    if (!m->layers)
        return;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        free(m->layers[l].exp_gate);
        free(m->layers[l].exp_up);
        free(m->layers[l].exp_down);
    }
    free(m->layers);
    m->layers = NULL;
}

const char *model_arch_name(enum model_arch a)
{
    const model_arch_info_t *t = model_arch_info(a);
    return t ? t->name : "?";
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
    ld.fam = model_arch_find(arch.ptr, (size_t)arch.len);
    if (!ld.fam) {
        char names[256];
        model_arch_list(names, sizeof names, ", ");
        fail(&ld, "architecture '%.*s' is not supported (supported: %s)", (int)(arch.len > 64 ? 64 : arch.len),
             arch.ptr, names);
        goto err;
    }
    c->arch = ld.fam->arch;
    ld.arch = ld.fam->name;
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
    ld.arena_cap = (size_t)c->n_layer * (5 * (size_t)c->dim + (size_t)c->q_dim + 2 * (size_t)c->kv_dim +
                                         2 * (size_t)c->head_dim) +
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
    if (rank_head_load(ld.g, ld.fam, c->dim, c->pooling_raw, &m->rank, err, errlen) < 0)
        goto err;

    m->gguf = *gp;
    *gp = NULL;
    *out = m;
    return 0;
err:
    rank_head_free(&m->rank);
    free_layers(m);
    free(m->rope_inv_freq);
    free(m->rope_inv_freq_swa);
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
            if (!lw[i]->data)
                continue;  /* MoE layers have no dense FFN */
            shared[n] = 0;
            ws[n++] = lw[i];
        }
        for (int e = 0; e < m->cfg.n_expert; e++) {
            matmul_weight_t *ew[3] = {&L->exp_gate[e], &L->exp_up[e], &L->exp_down[e]};
            for (int i = 0; i < 3; i++) {
                shared[n] = 0;
                ws[n++] = ew[i];
            }
        }
        if (L->shexp_gate_inp) {
            matmul_weight_t *sw[3] = {&L->sh_gate, &L->sh_up, &L->sh_down};
            for (int i = 0; i < 3; i++) {
                shared[n] = 0;
                ws[n++] = sw[i];
            }
        }
    }
    shared[n] = m->output.data == m->tok_embd.data;
    ws[n++] = &m->output;
    return n;
}

int model_pack_plan(model_t *m, model_packable_t **out)
{
    *out = NULL;
    if (!m || m->packed_arena || !qgemm_avx2_available())
        return 0;
    int n_ws = (10 + 3 * m->cfg.n_expert) * m->cfg.n_layer + 1, n = 0;
    matmul_weight_t **ws = xmalloc((size_t)n_ws * sizeof *ws);
    int *shared = xmalloc((size_t)n_ws * sizeof *shared);
    n_ws = matmul_weights(m, ws, shared);
    model_packable_t *plan = xmalloc((size_t)n_ws * sizeof *plan);
    for (int i = 0; i < n_ws; i++) {
        size_t sz = ws[i]->packed || !ws[i]->data ? 0 : qgemm_packed_size(ws[i]->type, ws[i]->rows, ws[i]->cols);
        if (sz)
            plan[n++] = (model_packable_t){.w = ws[i], .bytes = sz, .shared = shared[i] != 0};
    }
    free(ws);
    free(shared);
    if (n == 0) {
        free(plan);
        return 0;
    }
    *out = plan;
    return n;
}

/* Drop the file pages wholly inside w: the hot path reads the packing now.
 * Only for a file mapping (MAP_PRIVATE, never written): the pages come back
 * from the file on the next read. */
static void drop_file_pages(const model_t *m, const model_packable_t *p)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!(m->gguf && m->gguf->map) || p->shared || page == 0)
        return;
    uintptr_t a = (uintptr_t)p->w->data, e = a + (size_t)p->w->rows * p->w->row_bytes;
    a = (a + page - 1) / page * page;
    e = e / page * page;
    if (e > a)
        (void)madvise((void *)a, e - a, MADV_DONTNEED);
}

void model_pack_adopt(model_t *m, void *arena, const model_packable_t *plan, int n)
{
    assert(m && !m->packed_arena && arena);
    uint8_t *at = arena;
    for (int i = 0; i < n; i++) {
        plan[i].w->packed = at;
        at += plan[i].bytes;
        drop_file_pages(m, &plan[i]);
    }
    m->packed_arena = arena;
    m->packed_bytes = (size_t)(at - (uint8_t *)arena);
}

void model_pack_adopt_map(model_t *m, void *map, size_t map_bytes, void *arena, const model_packable_t *plan,
                          int n)
{
    assert(map && (uint8_t *)arena >= (uint8_t *)map && (uint8_t *)arena < (uint8_t *)map + map_bytes);
    model_pack_adopt(m, arena, plan, n);
    assert((uint8_t *)arena + m->packed_bytes <= (uint8_t *)map + map_bytes);
    m->packed_map = map;
    m->packed_map_bytes = map_bytes;
}

int model_pack_int8(model_t *m, int n_threads)
{
    model_packable_t *plan;
    int n_plan = model_pack_plan(m, &plan), n_packed = 0;
    if (n_plan == 0)
        return 0;
    /* one arena for all packings: each size is a multiple of 64, so every
     * packing starts 64-byte aligned */
    size_t total = 0;
    for (int i = 0; i < n_plan; i++)
        total += plan[i].bytes;
    /* On huge pages the 1-row decode, which streams every packed byte from
     * DRAM once per token, ran ~10 % faster (fewer TLB misses; the hardware
     * prefetcher does not cross 4 KiB pages), and packing faults in 2 MiB
     * at a time (110M model: 45 instead of 95 ms). */
    void *arena = xhuge_alloc(total);
    m->packed_arena = arena;
    uint8_t *at = arena;
    for (int i = 0; i < n_plan; i++) {
        matmul_weight_t *w = plan[i].w;
        if (qgemm_pack_to(w->type, w->data, w->rows, w->cols, at, n_threads) != 0)
            continue;
        w->packed = at;
        at += plan[i].bytes;
        n_packed++;
        drop_file_pages(m, &plan[i]);
    }
    m->packed_bytes = (size_t)(at - (uint8_t *)arena);
    free(plan);
    return n_packed;
}

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

/* Pages of [p, p + n) faulted in now (or read ahead, on an older kernel):
 * from the page holding p; 0 when there is nothing to advise. */
static size_t advise_range(const void *p, size_t n)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (!p || n == 0 || page == 0)
        return 0;
    uintptr_t a = (uintptr_t)p / page * page;
    size_t len = n + ((uintptr_t)p - a);
    if (madvise((void *)a, len, MADV_POPULATE_READ) != 0)
        (void)madvise((void *)a, len, MADV_WILLNEED);
    return n;
}

/* A matrix in the GGUF mapping that the forward pass reads from the file:
 * not packed, or shared with the embedding lookup (the tied output). */
static size_t advise_file_weight(const model_t *m, const matmul_weight_t *w, bool shared)
{
    if (!w->data || (w->packed && !shared) || !(m->gguf && m->gguf->map))
        return 0;
    return advise_range(w->data, matmul_weight_bytes(w));
}

size_t model_advise_resident(const model_t *m)
{
    size_t n = m->packed_map ? advise_range(m->packed_map, m->packed_map_bytes) : 0;
    n += advise_file_weight(m, &m->tok_embd, true);
    int n_ws = (10 + 3 * m->cfg.n_expert) * m->cfg.n_layer + 1;
    matmul_weight_t **ws = xmalloc((size_t)n_ws * sizeof *ws);
    int *shared = xmalloc((size_t)n_ws * sizeof *shared);
    n_ws = matmul_weights((model_t *)m, ws, shared); /* only reads */
    for (int i = 0; i < n_ws; i++)
        if (ws[i]->data != m->tok_embd.data) /* the tied output: advised above */
            n += advise_file_weight(m, ws[i], shared[i] != 0);
    free(ws);
    free(shared);
    for (int l = 0; l < m->cfg.n_layer; l++)
        n += advise_file_weight(m, &m->layers[l].router, false);
    return n;
}

void model_free(model_t **mp)
{
    if (!mp || !*mp)
        return;
    model_t *m = *mp;
    if (m->packed_map)
        (void)munmap(m->packed_map, m->packed_map_bytes);
    else
        free(m->packed_arena);
    gguf_close(&m->gguf);
    rank_head_free(&m->rank);
    free_layers(m);
    free(m->rope_inv_freq);
    free(m->rope_inv_freq_swa);
    free(m->f32_arena);
    free(m);
    *mp = NULL;
}

size_t model_weight_bytes(const model_t *m)
{
    size_t n = matmul_weight_bytes(&m->tok_embd) + (m->cfg.tied_output ? 0 : matmul_weight_bytes(&m->output));
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const model_layer_t *L = &m->layers[l];
        n += matmul_weight_bytes(&L->wq) + matmul_weight_bytes(&L->wk) + matmul_weight_bytes(&L->wv) + matmul_weight_bytes(&L->wo) +
             matmul_weight_bytes(&L->w_gate) + matmul_weight_bytes(&L->w_up) + matmul_weight_bytes(&L->w_down) + matmul_weight_bytes(&L->router) +
             matmul_weight_bytes(&L->sh_gate) + matmul_weight_bytes(&L->sh_up) + matmul_weight_bytes(&L->sh_down);
        for (int e = 0; e < m->cfg.n_expert; e++)
            n += matmul_weight_bytes(&L->exp_gate[e]) + matmul_weight_bytes(&L->exp_up[e]) + matmul_weight_bytes(&L->exp_down[e]);
    }
    return n;
}

size_t model_held_bytes(const model_t *m)
{
    size_t n = model_weight_bytes(m) + m->packed_bytes;
    int n_ws = (10 + 3 * m->cfg.n_expert) * m->cfg.n_layer + 1;
    matmul_weight_t **ws = xmalloc((size_t)n_ws * sizeof *ws);
    int *shared = xmalloc((size_t)n_ws * sizeof *shared);
    n_ws = matmul_weights((model_t *)m, ws, shared); /* only reads */
    for (int i = 0; i < n_ws; i++)
        if (ws[i]->packed && !shared[i]) /* its file pages were dropped */
            n -= matmul_weight_bytes(ws[i]);
    free(ws);
    free(shared);
    return n;
}

void model_describe(const model_t *m, char *buf, size_t len)
{
    const model_config_t *c = &m->cfg;
    static const char *const scal[] = { "none", "linear", "llama3", "longrope" };
    char fam[160] = "";
    if (c->n_expert > 0)
        snprintf(fam, sizeof fam, ", %d experts (%d used, ffn %d%s%s)", c->n_expert, c->n_expert_used,
                 c->expert_ffn_dim, c->expert_norm ? ", normalised" : "",
                 m->layers[0].shexp_gate_inp ? ", shared expert" : "");
    if (c->swa_window > 0)
        snprintf(fam + strlen(fam), sizeof fam - strlen(fam), ", sliding window %d on %d/%d layers",
                 c->swa_window, c->n_swa_layers, c->n_layer);
    if (c->attn_softcap > 0 || c->final_softcap > 0)
        snprintf(fam + strlen(fam), sizeof fam - strlen(fam), ", softcap %g/%g", (double)c->attn_softcap,
                 (double)c->final_softcap);
    snprintf(buf, len,
             "%s: %d layers, dim %d, %d heads (%d kv, head_dim %d), ffn %d, vocab %d, ctx %d, "
             "rope %s base %g dim %d scaling %s x%g, eps %g, %s output%s, weights %s %.1f MiB",
             model_arch_name(c->arch), c->n_layer, c->dim, c->n_head,
             c->n_kv_head, c->head_dim, c->ffn_dim, c->vocab, c->ctx, c->rope_neox ? "neox" : "normal",
             (double)c->rope_base, c->rope_dim, scal[c->rope_scaling], (double)c->rope_scale_factor,
             (double)c->norm_eps, c->tied_output ? "tied" : "separate", fam,
             ggml_type_name(m->layers[0].wq.type), (double)model_weight_bytes(m) / (1024.0 * 1024.0));
}
