/* vision.c — the mmproj image encoder (see vision.h): validates the file's
 * keys and tensors, then runs the ViT + projector on the worker's matmul
 * kernels. The file is hostile input: every key, shape, type and byte count
 * is checked before a pointer into it is kept. */
#include "worker/model/vision.h"

#include <assert.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/text/gguf.h"
#include "common/xalloc.h"
#include "worker/kernels/matmul.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"
#include "worker/model/vision_idefics3.h"
#include "worker/kernels/vit_attn.h"
#include "worker/kernels/vit_gemm.h"
#include "worker/kernels/vit_ops.h"

_Static_assert((int)VISION_ACT_GELU == (int)VIT_ACT_GELU && (int)VISION_ACT_SILU == (int)VIT_ACT_SILU &&
                   (int)VISION_ACT_GELU_QUICK == (int)VIT_ACT_GELU_QUICK,
               "vision_act is vit_act");

/* Bounds beyond which a file is bogus (SigLIP-so400m: D 1152, F 4304, 27 layers, S 896). */
#define VIS_MAX_SIDE 4096
#define VIS_MAX_PATCHES 16384
#define VIS_MAX_DIM 16384
#define VIS_MAX_LAYERS 256

typedef struct vis_layer {
    const float *ln1_w, *ln1_b;   /* (D) */
    matmul_weight_t wq, wk, wv;   /* (D, D) */
    const float *bq, *bk, *bv;    /* (D) */
    matmul_weight_t wo;           /* (D, D) */
    const float *bo;              /* (D) */
    const float *ln2_w, *ln2_b;   /* (D) */
    matmul_weight_t w_up;         /* (F, D) */
    const float *b_up;            /* (F) */
    matmul_weight_t w_down;       /* (D, F) */
    const float *b_down;          /* (D) */
} vis_layer_t;

struct vision {
    vision_config_t cfg;
    gguf_t *g;                    /* owned: the mmap every matmul_weight_t points into */
    int n_threads;
    matmul_t *mm;
    matmul_weight_t w_patch;      /* (D, 3·P·P) */
    const float *b_patch;         /* (D) */
    const float *pos;             /* (N, D) */
    vis_layer_t *layers;          /* (n_layer), owned */
    const float *post_w, *post_b; /* (D) */
    const float *soft_norm;       /* (D) */
    matmul_weight_t w_proj;       /* gemma3 (T, D): the file's [T, D] transposed into f32 below;
                                     idefics3 (T, D·k²): mm.model.fc.weight as stored */
    float *proj_t;                /* gemma3 (T, D) owned */
    float *arena;                 /* owned storage of the const float * vectors */
    size_t arena_used, arena_cap;
    /* scratch for max_batch images, their rows stacked: R = N · max_batch */
    float *patches;               /* (R, 3·P·P) */
    float *h;                     /* (R, D) residual */
    float *a;                     /* (R, D) normed input / attention output */
    float *q, *k, *v;             /* (R, D) */
    float *o;                     /* (R, D) projection outputs */
    float *f;                     /* (R, F) */
    float *scores;                /* vit_attn_scratch(N, D, n_threads) floats */
    float *pooled;                /* (n_tok, D) */
    int max_batch;                /* images the scratch holds (rows stacked: R = N · max_batch) */
    bool fast;                    /* matmul's int8 / bf16 paths on (vision_set_fast) */
    bool bf16;                    /* ... and the bf16 one is there (AVX512-BF16) */
    vit_isa_t isa;                /* vit_isa_default(): VIT_ISA_AVX512 puts F32 / F16 matrices
                                     on vit_gemm when fast */
    float *gemm_scratch;          /* vit_gemm_scratch(n_threads) floats, owned */
};

typedef struct vloader {
    const gguf_t *g;
    vision_t *v;
    char *err;
    size_t errlen;
} vloader_t;

static int vfail(vloader_t *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int vfail(vloader_t *ld, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(ld->err, ld->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static const vision_proj_info_t proj_rows[] = {
#define VISION_PROJ_ROW_(e, name, beg, end, soft, lead, tile, row_end, nc) \
    {name, beg, end, soft, lead, tile, row_end, nc},
    VISION_PROJ_TABLE(VISION_PROJ_ROW_)
#undef VISION_PROJ_ROW_
};
_Static_assert(sizeof proj_rows / sizeof proj_rows[0] == VISION_PROJ_COUNT, "one row per projector");

const vision_proj_info_t *vision_proj_info(enum vision_proj p)
{
    return (unsigned)p < VISION_PROJ_COUNT ? &proj_rows[p] : NULL;
}

/* Integer key: required when def < 0; range-checked. */
static int key_int(vloader_t *ld, const char *key, int64_t def, int64_t lo, int64_t hi, int32_t *out)
{
    int64_t x;
    if (gguf_get_int(ld->g, key, &x) != 0) {
        if (gguf_find_kv(ld->g, key))
            return vfail(ld, "metadata %s has an unexpected type", key);
        if (def < 0)
            return vfail(ld, "metadata %s missing", key);
        x = def;
    }
    if (x < lo || x > hi)
        return vfail(ld, "metadata %s = %" PRId64 " out of range [%" PRId64 ", %" PRId64 "]", key, x, lo, hi);
    *out = (int32_t)x;
    return 0;
}

static int key_bool(vloader_t *ld, const char *key, bool *out)
{
    *out = false;
    if (gguf_get_bool(ld->g, key, out) != 0 && gguf_find_kv(ld->g, key))
        return vfail(ld, "metadata %s is not a bool", key);
    return 0;
}

/* Three finite floats from an array key (image_mean / image_std). */
static int key_rgb(vloader_t *ld, const char *key, float out[3], bool positive)
{
    const gguf_kv_t *kv;
    if (gguf_get_arr(ld->g, key, GGUF_TYPE_FLOAT32, &kv) != 0)
        return vfail(ld, "metadata %s missing or not an array of float32", key);
    if (kv->arr_n != 3)
        return vfail(ld, "metadata %s has %" PRIu64 " values, expected 3", key, kv->arr_n);
    for (int i = 0; i < 3; i++) {
        double d;
        if (gguf_arr_get_float(kv, (uint64_t)i, &d) != 0 || !isfinite(d) || (positive && !(d > 0)))
            return vfail(ld, "metadata %s[%d] is not a %s number", key, i, positive ? "positive" : "finite");
        out[i] = (float)d;
    }
    return 0;
}

/* Tensor `name` with exactly the dims ne[0..n_dims) (trailing 1s allowed),
 * a type the kernels know, whose block divides ne[0], the right byte count
 * and aligned data. */
static const gguf_tensor_t *tensor_checked(vloader_t *ld, const char *name, int n_dims, const int64_t *ne)
{
    const gguf_tensor_t *t = gguf_find_tensor(ld->g, name);
    if (!t) {
        vfail(ld, "tensor %s missing", name);
        return NULL;
    }
    if (!ggml_type_supported(t->type)) {
        vfail(ld, "tensor %s has unsupported type %s (%u)", name, ggml_type_name(t->type), t->type);
        return NULL;
    }
    uint64_t n_rows = 1;
    for (int d = 0; d < 4; d++) {
        uint64_t want = d < n_dims ? (uint64_t)ne[d] : 1;
        if (t->ne[d] != want) {
            vfail(ld, "tensor %s has shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "], expected %d dims "
                      "[%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64 "]",
                  name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], n_dims, ne[0], n_dims > 1 ? ne[1] : 1,
                  n_dims > 2 ? ne[2] : 1, n_dims > 3 ? ne[3] : 1);
            return NULL;
        }
        if (d > 0)
            n_rows *= want;
    }
    uint32_t be = ggml_type_block_elems(t->type);
    if (be == 0 || ne[0] % be != 0) {
        vfail(ld, "tensor %s: row length %" PRId64 " is not a multiple of the %s block (%u)", name, ne[0],
              ggml_type_name(t->type), be);
        return NULL;
    }
    size_t rb = quant_row_bytes(t->type, ne[0]);
    if (rb == 0 || t->nbytes != rb * n_rows) {
        vfail(ld, "tensor %s: %" PRIu64 " bytes, expected %" PRIu64, name, t->nbytes, (uint64_t)(rb * n_rows));
        return NULL;
    }
    if (((uintptr_t)t->data & 3) != 0) {
        vfail(ld, "tensor %s: data is not 4-byte aligned", name);
        return NULL;
    }
    return t;
}

/* A matrix from a tensor of n_dims dims: its rows the last dim, each row
 * the elements of the others (ne[0] fastest: the conv kernel [P, P, 3, D]
 * is D rows of 3·P·P). */
static int get_matrix(vloader_t *ld, const char *name, int n_dims, const int64_t *ne, matmul_weight_t *w)
{
    const gguf_tensor_t *t = tensor_checked(ld, name, n_dims, ne);
    if (!t)
        return -1;
    int64_t cols = 1;
    for (int d = 0; d < n_dims - 1; d++)
        cols *= ne[d];
    uint32_t be = ggml_type_block_elems(t->type);
    if (cols % be != 0 || quant_row_bytes(t->type, cols) * (size_t)ne[n_dims - 1] != t->nbytes)
        return vfail(ld, "tensor %s: rows of %" PRId64 " do not fit the %s blocks", name, cols,
                     ggml_type_name(t->type));
    *w = (matmul_weight_t){.type = t->type, .rows = ne[n_dims - 1], .cols = cols,
                           .row_bytes = quant_row_bytes(t->type, cols), .data = t->data};
    return 0;
}

/* n floats from tensor `name` (shape ne) into the arena, checked finite. */
static int get_floats(vloader_t *ld, const char *name, int n_dims, const int64_t *ne, const float **out)
{
    const gguf_tensor_t *t = tensor_checked(ld, name, n_dims, ne);
    if (!t)
        return -1;
    int64_t n = 1;
    for (int d = 0; d < n_dims; d++)
        n *= ne[d];
    vision_t *v = ld->v;
    if (v->arena_used + (size_t)n > v->arena_cap)
        return vfail(ld, "tensor %s: internal arena exhausted", name);
    float *dst = v->arena + v->arena_used;
    if (quant_dequantize(t->type, t->data, dst, n) != 0)
        return vfail(ld, "tensor %s: cannot convert type %s", name, ggml_type_name(t->type));
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(dst[i]))
            return vfail(ld, "tensor %s: non-finite value at %" PRId64, name, i);
    v->arena_used += (size_t)n;
    *out = dst;
    return 0;
}

static int get_vec(vloader_t *ld, const char *name, int64_t n, const float **out)
{
    return get_floats(ld, name, 1, &n, out);
}

/* The projector heads after the ViT's post-LN, one row per VISION_PROJ_TABLE
 * row: the scale_factor when the file has none (llama.cpp's), the columns
 * of the projection's input per ViT feature for merge k, the head's
 * tensors, and its forward pass (an image's post-LN rows a (N, D) → out (n_tok, T)). */
typedef struct vision_head {
    int32_t merge_default;
    int32_t (*in_per_dim)(int32_t k);
    int (*load)(vloader_t *ld);
    void (*run)(vision_t *v, const float *a, float *out);
} vision_head_t;

static int32_t in_one(int32_t k);
static int32_t in_k2(int32_t k);
static int head_gemma3_load(vloader_t *ld);
static void head_gemma3_run(vision_t *v, const float *a, float *out);
static int head_idefics3_load(vloader_t *ld);
static void head_idefics3_run(vision_t *v, const float *a, float *out);

static const vision_head_t heads[] = {
    [VISION_PROJ_GEMMA3] = {4, in_one, head_gemma3_load, head_gemma3_run},
    [VISION_PROJ_IDEFICS3] = {1, in_k2, head_idefics3_load, head_idefics3_run},
};
_Static_assert(sizeof heads / sizeof heads[0] == VISION_PROJ_COUNT, "one head per projector");

/* "gemma3, idefics3": the supported types, for messages */
static const char *proj_names(void)
{
    static char buf[256];
    if (!buf[0])
        for (int p = 0; p < VISION_PROJ_COUNT; p++)
            snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", p ? ", " : "", proj_rows[p].name);
    return buf;
}

static int load_config(vloader_t *ld, vision_config_t *c)
{
    gguf_str_t s;
    if (gguf_get_str(ld->g, "clip.projector_type", &s) != 0 &&
        gguf_get_str(ld->g, "clip.vision.projector_type", &s) != 0)
        return vfail(ld, "metadata clip.projector_type missing: not an mmproj file?");
    c->proj = VISION_PROJ_COUNT;
    for (int p = 0; p < VISION_PROJ_COUNT; p++)
        if (gguf_str_eq(s, proj_rows[p].name))
            c->proj = (enum vision_proj)p;
    if (c->proj == VISION_PROJ_COUNT)
        return vfail(ld, "clip.projector_type \"%.*s\" is not supported (supported: %s)",
                     (int)(s.len > 64 ? 64 : s.len), s.ptr, proj_names());
    bool has_vis = true;
    if (gguf_find_kv(ld->g, "clip.has_vision_encoder") &&
        (key_bool(ld, "clip.has_vision_encoder", &has_vis) != 0 || !has_vis))
        return vfail(ld, "clip.has_vision_encoder is not true: no image encoder in this file");
    int32_t n_kv;
    if (key_int(ld, "clip.vision.image_size", -1, 1, VIS_MAX_SIDE, &c->image_size) ||
        key_int(ld, "clip.vision.patch_size", -1, 1, VIS_MAX_SIDE, &c->patch_size) ||
        key_int(ld, "clip.vision.embedding_length", -1, 1, VIS_MAX_DIM, &c->dim) ||
        key_int(ld, "clip.vision.feed_forward_length", -1, 1, 4 * VIS_MAX_DIM, &c->ffn_dim) ||
        key_int(ld, "clip.vision.block_count", -1, 1, VIS_MAX_LAYERS, &c->n_layer) ||
        key_int(ld, "clip.vision.attention.head_count", -1, 1, 1024, &c->n_head) ||
        key_int(ld, "clip.vision.attention.head_count_kv", c->n_head, 1, 1024, &n_kv) ||
        key_int(ld, "clip.vision.projection_dim", -1, 1, 1 << 17, &c->out_dim) ||
        key_int(ld, "clip.vision.projector.scale_factor", heads[c->proj].merge_default, 1, VIS_MAX_SIDE,
                &c->merge))
        return -1;
    double eps;
    if (gguf_get_float(ld->g, "clip.vision.attention.layer_norm_epsilon", &eps) != 0 || !(eps > 0) || !(eps < 1))
        return vfail(ld, "metadata clip.vision.attention.layer_norm_epsilon missing or not in (0, 1)");
    c->eps = (float)eps;
    if (n_kv != c->n_head)
        return vfail(ld, "clip.vision.attention.head_count_kv %d != head_count %d: not a SigLIP encoder", n_kv,
                     c->n_head);
    if (c->dim % c->n_head != 0)
        return vfail(ld, "clip.vision.embedding_length %d is not a multiple of head_count %d", c->dim, c->n_head);
    c->head_dim = c->dim / c->n_head;
    if (c->image_size % c->patch_size != 0)
        return vfail(ld, "clip.vision.image_size %d is not a multiple of patch_size %d", c->image_size,
                     c->patch_size);
    c->n_side = c->image_size / c->patch_size;
    c->n_patches = c->n_side * c->n_side;
    if (c->n_patches > VIS_MAX_PATCHES || 3 * c->patch_size * c->patch_size > VIS_MAX_DIM)
        return vfail(ld, "%d patches of %d px: too large", c->n_patches, c->patch_size);
    if (c->n_side % c->merge != 0)
        return vfail(ld, "%d patches per side do not pool by clip.vision.projector.scale_factor %d", c->n_side,
                     c->merge);
    c->n_tok = (c->n_side / c->merge) * (c->n_side / c->merge);
    c->head_in = c->dim * heads[c->proj].in_per_dim(c->merge);
    bool gelu, silu;
    if (key_bool(ld, "clip.use_gelu", &gelu) || key_bool(ld, "clip.use_silu", &silu))
        return -1;
    if (gelu && silu)
        return vfail(ld, "clip.use_gelu and clip.use_silu are both true");
    c->act = gelu ? VISION_ACT_GELU : silu ? VISION_ACT_SILU : VISION_ACT_GELU_QUICK;
    if (key_rgb(ld, "clip.vision.image_mean", c->mean, false) || key_rgb(ld, "clip.vision.image_std", c->std, true))
        return -1;
    return 0;
}

/* v.blk.l.<part>.weight [cols, rows] and its .bias [rows]. */
static int load_linear(vloader_t *ld, int l, const char *part, int64_t cols, int64_t rows, matmul_weight_t *w,
                       const float **b)
{
    char nm[96];
    const int64_t ne[2] = {cols, rows};
    snprintf(nm, sizeof nm, "v.blk.%d.%s.weight", l, part);
    if (get_matrix(ld, nm, 2, ne, w))
        return -1;
    snprintf(nm, sizeof nm, "v.blk.%d.%s.bias", l, part);
    return get_vec(ld, nm, rows, b);
}

/* v.blk.l.<part>.weight and .bias [D]: a LayerNorm. */
static int load_norm(vloader_t *ld, int l, const char *part, int64_t D, const float **w, const float **b)
{
    char nm[96];
    snprintf(nm, sizeof nm, "v.blk.%d.%s.weight", l, part);
    if (get_vec(ld, nm, D, w))
        return -1;
    snprintf(nm, sizeof nm, "v.blk.%d.%s.bias", l, part);
    return get_vec(ld, nm, D, b);
}

static int load_layer(vloader_t *ld, int l, vis_layer_t *L)
{
    const vision_config_t *c = &ld->v->cfg;
    const int64_t D = c->dim, F = c->ffn_dim;
    if (load_norm(ld, l, "ln1", D, &L->ln1_w, &L->ln1_b) || load_linear(ld, l, "attn_q", D, D, &L->wq, &L->bq) ||
        load_linear(ld, l, "attn_k", D, D, &L->wk, &L->bk) || load_linear(ld, l, "attn_v", D, D, &L->wv, &L->bv) ||
        load_linear(ld, l, "attn_out", D, D, &L->wo, &L->bo) || load_norm(ld, l, "ln2", D, &L->ln2_w, &L->ln2_b))
        return -1;
    /* ffn_up [D, F] / ffn_down [F, D]; a file whose ffn_down has rows of
     * D (old converters named the two the other way round) is read as
     * llama.cpp reads it, the names swapped (so with F == D always) */
    char nm[96];
    snprintf(nm, sizeof nm, "v.blk.%d.ffn_down.weight", l);
    const gguf_tensor_t *td = gguf_find_tensor(ld->g, nm);
    bool swapped = td && (int64_t)td->ne[0] == D;
    return load_linear(ld, l, swapped ? "ffn_down" : "ffn_up", D, F, &L->w_up, &L->b_up) ||
                   load_linear(ld, l, swapped ? "ffn_up" : "ffn_down", F, D, &L->w_down, &L->b_down)
               ? -1
               : 0;
}

static int load_tensors(vloader_t *ld)
{
    vision_t *v = ld->v;
    const vision_config_t *c = &v->cfg;
    const int64_t D = c->dim, P = c->patch_size;
    const int64_t pe[4] = {P, P, 3, D}, pos[2] = {D, c->n_patches};
    if (get_matrix(ld, "v.patch_embd.weight", 4, pe, &v->w_patch) ||
        get_vec(ld, "v.patch_embd.bias", D, &v->b_patch) || get_floats(ld, "v.position_embd.weight", 2, pos, &v->pos))
        return -1;
    v->layers = xcalloc((size_t)c->n_layer, sizeof *v->layers);
    for (int l = 0; l < c->n_layer; l++)
        if (load_layer(ld, l, &v->layers[l]))
            return -1;
    if (get_vec(ld, "v.post_ln.weight", D, &v->post_w) || get_vec(ld, "v.post_ln.bias", D, &v->post_b))
        return -1;
    return heads[c->proj].load(ld);
}

/* The scratch of a batch of up to n images (rows stacked). */
static void free_scratch(vision_t *v)
{
    free(v->patches);
    free(v->h);
    free(v->a);
    free(v->q);
    free(v->k);
    free(v->v);
    free(v->o);
    free(v->f);
    free(v->scores);
    free(v->pooled);
}

static void alloc_scratch(vision_t *v, int n)
{
    const vision_config_t *c = &v->cfg;
    const size_t D = (size_t)c->dim, F = (size_t)c->ffn_dim, R = (size_t)c->n_patches * (size_t)n;
    const size_t PP = 3 * (size_t)c->patch_size * (size_t)c->patch_size;
    v->patches = xmalloc(R * PP * sizeof(float));
    v->h = xmalloc(R * D * sizeof(float));
    v->a = xmalloc(R * D * sizeof(float));
    v->q = xmalloc(R * D * sizeof(float));
    v->k = xmalloc(R * D * sizeof(float));
    v->v = xmalloc(R * D * sizeof(float));
    v->o = xmalloc(R * D * sizeof(float));
    v->f = xmalloc(R * F * sizeof(float));
    v->scores = xmalloc(vit_attn_scratch(c->n_patches, c->dim, v->n_threads) * sizeof(float));
    v->pooled = xmalloc((size_t)c->n_tok * D * sizeof(float));
    v->max_batch = n;
}

/* The fast matmul paths for batches of up to v->max_batch images. */
static void set_paths(vision_t *v)
{
    const int rows = v->cfg.n_patches * v->max_batch;
    if (!v->fast)
        return;
    (void)matmul_use_int8(v->mm, rows);  /* -1: no scratch that large, the float path stays */
    v->bf16 = matmul_use_bf16(v->mm, rows) == 0; /* 1: not on this CPU, the float path stays */
}

int vision_batch_for_bytes(const vision_t *v, size_t bytes, int max)
{
    const vision_config_t *c = &v->cfg;
    const size_t per = (size_t)c->n_patches *
                       (3 * (size_t)c->patch_size * (size_t)c->patch_size + 7 * (size_t)c->dim + (size_t)c->ffn_dim) *
                       sizeof(float);
    size_t n = bytes / per;
    return n < 1 ? 1 : n > (size_t)max ? max : (int)n;
}

int vision_set_max_batch(vision_t *v, int n)
{
    if (n < 1 || (int64_t)n * v->cfg.n_patches > INT32_MAX / 4)
        return -1;
    if (n == v->max_batch)
        return 0;
    free_scratch(v);
    alloc_scratch(v, n);
    set_paths(v);
    return 0;
}

int vision_set_fast(vision_t *v, bool on)
{
    if (on == v->fast)
        return 0;
    v->fast = on;
    if (!on) {
        /* the matmul keeps its fast paths once on: a new one without them */
        const size_t PP = 3 * (size_t)v->cfg.patch_size * (size_t)v->cfg.patch_size, F = (size_t)v->cfg.ffn_dim,
                     D = (size_t)v->cfg.dim;
        size_t max_cols = PP > F ? PP : F;
        max_cols = max_cols > (size_t)v->cfg.head_in ? max_cols : (size_t)v->cfg.head_in;
        matmul_free(&v->mm);
        v->bf16 = false;
        v->mm = matmul_new((int64_t)(max_cols > D ? max_cols : D), v->n_threads);
        return 0;
    }
    set_paths(v);
    return 0;
}

int vision_load(const char *path, int n_threads, vision_t **out, char *err, size_t errlen)
{
    *out = NULL;
    gguf_t *g = NULL;
    if (gguf_open(path, &g, err, errlen) != 0)
        return -1;
    if (vision_load_gguf(&g, n_threads, out, err, errlen) != 0) {
        gguf_close(&g);
        return -1;
    }
    return 0;
}

int vision_load_gguf(gguf_t **g, int n_threads, vision_t **out, char *err, size_t errlen)
{
    *out = NULL;
    vision_t *v = xcalloc(1, sizeof *v);
    v->n_threads = n_threads > 0 ? n_threads : 2;
    vloader_t ld = {.v = v, .g = *g, .err = err, .errlen = errlen};
    vision_config_t *c = &v->cfg;
    if (load_config(&ld, c) != 0)
        goto err;
    const size_t D = (size_t)c->dim, F = (size_t)c->ffn_dim, N = (size_t)c->n_patches;
    /* arena: the vectors (8 D + F per layer, 4 D + D besides), the position
     * table (N D) and the projection before its transpose (T D) */
    v->arena_cap = (size_t)c->n_layer * (9 * D + F) + 5 * D + N * D + (size_t)c->out_dim * D;
    /* every arena float is a stored element (>= 4 bits) and the scratch is
     * a small multiple of the weights: a file much smaller than its
     * metadata says is refused before anything that large is allocated */
    const size_t PP = 3 * (size_t)c->patch_size * (size_t)c->patch_size;
    const size_t scratch = (N * (PP + 7 * D + F) + vit_attn_scratch((int)N, (int)D, v->n_threads)) * sizeof(float);
    if (v->arena_cap > 2 * (*g)->len || scratch > 64 * (*g)->len + ((size_t)64 << 20)) {
        vfail(&ld, "the file (%zu bytes) is too small for the encoder its metadata describes", (*g)->len);
        goto err;
    }
    v->arena = xmalloc(v->arena_cap * sizeof(float));
    if (load_tensors(&ld) != 0)
        goto err;
    size_t max_cols = PP > F ? PP : F;
    max_cols = max_cols > (size_t)c->head_in ? max_cols : (size_t)c->head_in;
    v->mm = matmul_new((int64_t)(max_cols > D ? max_cols : D), v->n_threads);
    v->isa = vit_isa_default();
    v->gemm_scratch = xmalloc(vit_gemm_scratch(v->n_threads) * sizeof(float));
    alloc_scratch(v, 1);
    v->g = *g;
    *g = NULL;
    *out = v;
    return 0;
err:
    vision_free(&v);
    return -1;
}

void vision_free(vision_t **vp)
{
    if (!vp || !*vp)
        return;
    vision_t *v = *vp;
    matmul_free(&v->mm);
    free(v->layers);
    free(v->proj_t);
    free(v->gemm_scratch);
    free(v->arena);
    free_scratch(v);
    gguf_close(&v->g);
    free(v);
    *vp = NULL;
}

const vision_config_t *vision_config(const vision_t *v)
{
    return &v->cfg;
}

/* y (n, D) = LayerNorm(x) * w + b, per row, statistics in double (the
 * sums in 4 double lanes on AVX2: worker/kernels/vit_ops.h). */
static void layer_norm(const float *x, float *y, const float *w, const float *b, int n, int D, float eps,
                       int n_threads)
{
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (int r = 0; r < n; r++)
        vit_layer_norm_row(x + (size_t)r * D, y + (size_t)r * D, w, b, D, eps);
}

/* true when w's kernel computes a row from that row alone at any row
 * count — the int8 and BF16 paths (matmul.h) — so the images of a batch
 * share one call and keep their bits; the float path's sgemm promises no
 * such thing (OpenBLAS picks its kernels by size), so there each image's
 * N rows are one call (at N >= 64 rows sgemm loses nothing by it). */
static bool on_vit_gemm(const vision_t *v, const matmul_weight_t *w)
{
    return v->fast && v->isa == VIT_ISA_AVX512 && vit_gemm_supported(w);
}

static bool rows_independent(const vision_t *v, const matmul_weight_t *w)
{
    return on_vit_gemm(v, w) ||
           (v->fast && (qgemm_supported(w->type) || (w->type == GGML_TYPE_BF16 && v->bf16 && w->cols % 32 == 0)));
}

/* y (n, cols) = x · Wᵀ + bias (bias may be NULL), n rows of whole images
 * (or fewer than one image's: the projection's). */
static void linear(vision_t *v, const matmul_weight_t *w, const float *bias, const float *x, int n, float *y)
{
    if (on_vit_gemm(v, w)) {
        vit_gemm(v->isa, w, x, n, y, v->gemm_scratch, v->n_threads);
    } else {
        const int per = n > v->cfg.n_patches && !rows_independent(v, w) ? v->cfg.n_patches : n;
        for (int r0 = 0; r0 < n; r0 += per) {
            int rc = matmul_run(v->mm, w, x + (size_t)r0 * w->cols, per, y + (size_t)r0 * w->rows);
            assert(rc == 0 && "weights were validated at load");
            (void)rc;
        }
    }
    if (!bias)
        return;
    const int64_t m = w->rows;
#pragma omp parallel for num_threads(v->n_threads) schedule(static)
    for (int r = 0; r < n; r++)
        vit_add(y + (size_t)r * m, bias, (int)m);
}

/* a (N, D) = softmax(q kᵀ / sqrt(hd)) v per head for the image whose rows
 * start at element off of q, k, v, a: every patch to every patch (no
 * mask), worker/kernels/vit_attn.h. The exact path (not fast) keeps the
 * AVX2 kernel it was compared with llama.cpp on. */
static void attention_full(vision_t *v, size_t off)
{
    const vision_config_t *c = &v->cfg;
    const vit_isa_t isa = v->fast || v->isa < VIT_ISA_AVX2 ? v->isa : VIT_ISA_AVX2;
    vit_attn_isa(isa, v->q + off, v->k + off, v->v + off, c->n_patches, c->dim, c->n_head, c->head_dim,
                 1.0f / sqrtf((float)c->head_dim), v->a + off, v->scores, v->n_threads);
}

static int32_t in_one(int32_t k)
{
    (void)k;
    return 1;
}

static int32_t in_k2(int32_t k)
{
    return k * k;
}

/* gemma3: mm.soft_emb_norm.weight [D], mm.input_projection.weight [T, D] */
static int head_gemma3_load(vloader_t *ld)
{
    vision_t *v = ld->v;
    const int64_t D = v->cfg.dim, T = v->cfg.out_dim;
    if (get_vec(ld, "mm.soft_emb_norm.weight", D, &v->soft_norm))
        return -1;
    /* mm.input_projection.weight [T, D]: row d holds the T outputs' weights
     * of input d (x · W); the kernels want (T, D) rows of inputs, so it is
     * transposed once into F32 */
    const int64_t ip[2] = {T, D};
    const float *w;
    if (get_floats(ld, "mm.input_projection.weight", 2, ip, &w))
        return -1;
    v->proj_t = xmalloc((size_t)T * (size_t)D * sizeof(float));
    for (int64_t d = 0; d < D; d++)
        for (int64_t t = 0; t < T; t++)
            v->proj_t[t * D + d] = w[d * T + t];
    v->w_proj = (matmul_weight_t){.type = GGML_TYPE_F32, .rows = T, .cols = D,
                                  .row_bytes = (size_t)D * sizeof(float), .data = (const uint8_t *)v->proj_t};
    return 0;
}


/* out (n_tok, T) of image b of the batch from its post-LN rows a (N, D):
 * pooled (n_tok, D) = mean of each k×k square of the patch grid, row-major,
 * then rmsnorm · soft_emb_norm, then · Winproj. */
static void head_gemma3_run(vision_t *v, const float *a, float *out)
{
    const vision_config_t *c = &v->cfg;
    const int D = c->dim, k = c->merge, side = c->n_side / k;
    for (int oy = 0; oy < side; oy++)
        for (int ox = 0; ox < side; ox++) {
            float *pr = v->pooled + ((size_t)oy * side + ox) * D;
            memset(pr, 0, (size_t)D * sizeof(float));
            for (int dy = 0; dy < k; dy++)
                for (int dx = 0; dx < k; dx++) {
                    const float *hr = a + ((size_t)(oy * k + dy) * c->n_side + (size_t)(ox * k + dx)) * D;
                    for (int i = 0; i < D; i++)
                        pr[i] += hr[i];
                }
            for (int i = 0; i < D; i++)
                pr[i] /= (float)(k * k);
            /* rmsnorm * soft_emb_norm */
            double ss = 0;
            for (int i = 0; i < D; i++)
                ss += (double)pr[i] * pr[i];
            const float inv = (float)(1.0 / sqrt(ss / D + c->eps));
            for (int i = 0; i < D; i++)
                pr[i] = pr[i] * inv * v->soft_norm[i];
        }
    linear(v, &v->w_proj, NULL, v->pooled, c->n_tok, out);
}

/* idefics3: mm.model.fc.weight [D·k², T] (vision_idefics3.h), and the
 * longest edge llama.cpp scales an image to before cutting it into tiles
 * (clip.vision.preproc_image_size; absent: 0, no tiles, the global image
 * alone — common/text/image_run.h). */
static int head_idefics3_load(vloader_t *ld)
{
    vision_t *v = ld->v;
    vision_config_t *c = &v->cfg;
    if (key_int(ld, "clip.vision.preproc_image_size", 0, 0, 1 << 20, &c->longest_edge))
        return -1;
    const int64_t fc[2] = {c->head_in, c->out_dim};
    return get_matrix(ld, "mm.model.fc.weight", 2, fc, &v->w_proj);
}

static void head_idefics3_run(vision_t *v, const float *a, float *out)
{
    const vision_config_t *c = &v->cfg;
    /* v->o (n_tok, D·k²): free after the blocks, N·D floats */
    vision_idefics3_shuffle(a, c->n_side, c->dim, c->merge, v->o);
    linear(v, &v->w_proj, NULL, v->o, c->n_tok, out);
}

/* patches (N, 3·P·P) of one image: patch (py, px), column (ch, ky, kx),
 * normalized pixel */
static void image_patches(const vision_config_t *c, const uint8_t *rgb, float *patches)
{
    const int P = c->patch_size, S = c->image_size, PP = 3 * P * P;
    for (int py = 0; py < c->n_side; py++)
        for (int px = 0; px < c->n_side; px++) {
            float *row = patches + ((size_t)py * c->n_side + px) * PP;
            for (int ch = 0; ch < 3; ch++)
                for (int ky = 0; ky < P; ky++)
                    for (int kx = 0; kx < P; kx++) {
                        const uint8_t b = rgb[((size_t)(py * P + ky) * S + (size_t)(px * P + kx)) * 3 + ch];
                        row[(ch * P + ky) * P + kx] = ((float)b / 255.0f - c->mean[ch]) / c->std[ch];
                    }
        }
}

/* n_img <= max_batch images through the ViT, their R = N · n_img rows
 * stacked through every matmul and row operation; attention per image. */
static void encode_chunk(vision_t *v, const uint8_t *const *rgb, int n_img, float *const *out)
{
    const vision_config_t *c = &v->cfg;
    const int N = c->n_patches, D = c->dim, F = c->ffn_dim, PP = 3 * c->patch_size * c->patch_size;
    const int R = N * n_img;
    const size_t ND = (size_t)N * D;
    for (int b = 0; b < n_img; b++)
        image_patches(c, rgb[b], v->patches + (size_t)b * N * PP);
    /* h (R, D) = patches · Wpatchᵀ + bpatch + pos */
    linear(v, &v->w_patch, v->b_patch, v->patches, R, v->h);
    for (int b = 0; b < n_img; b++)
        vit_add(v->h + (size_t)b * ND, v->pos, (int)ND);

    for (int l = 0; l < c->n_layer; l++) {
        const vis_layer_t *L = &v->layers[l];
        /* a = LN1(h); q, k, v = a · W{q,k,v}ᵀ + b */
        layer_norm(v->h, v->a, L->ln1_w, L->ln1_b, R, D, c->eps, v->n_threads);
        linear(v, &L->wq, L->bq, v->a, R, v->q);
        linear(v, &L->wk, L->bk, v->a, R, v->k);
        linear(v, &L->wv, L->bv, v->a, R, v->v);
        /* a = attention, image by image; h += a · Woᵀ + bo */
        for (int b = 0; b < n_img; b++)
            attention_full(v, (size_t)b * ND);
        linear(v, &L->wo, L->bo, v->a, R, v->o);
        vit_add(v->h, v->o, R * D);
        /* a = LN2(h); f = act(a · Wupᵀ + bup); h += f · Wdownᵀ + bdown */
        layer_norm(v->h, v->a, L->ln2_w, L->ln2_b, R, D, c->eps, v->n_threads);
        linear(v, &L->w_up, L->b_up, v->a, R, v->f);
#pragma omp parallel for num_threads(v->n_threads) schedule(static)
        for (int r = 0; r < R; r++)
            vit_act((enum vit_act)c->act, v->f + (size_t)r * F, F);
        linear(v, &L->w_down, L->b_down, v->f, R, v->o);
        vit_add(v->h, v->o, R * D);
    }
    /* a = post_LN(h); each image's rows pooled and projected */
    layer_norm(v->h, v->a, v->post_w, v->post_b, R, D, c->eps, v->n_threads);
    for (int b = 0; b < n_img; b++)
        heads[c->proj].run(v, v->a + (size_t)b * ND, out[b]);
}

int vision_encode_batch(vision_t *v, const uint8_t *const *rgb, const int *w, const int *h, int n_img,
                        float *const *out, char *err, size_t errlen)
{
    const vision_config_t *c = &v->cfg;
    for (int b = 0; b < n_img; b++)
        if (!rgb[b] || !out[b] || w[b] != c->image_size || h[b] != c->image_size)
            return errbuf_set(err, errlen, "image %d is %dx%d, the encoder takes %dx%d", b, w[b], h[b],
                              c->image_size, c->image_size);
    for (int b0 = 0; b0 < n_img; b0 += v->max_batch)
        encode_chunk(v, rgb + b0, n_img - b0 < v->max_batch ? n_img - b0 : v->max_batch, out + b0);
    return 0;
}

int vision_encode(vision_t *v, const uint8_t *rgb, int w, int h, float *out, char *err, size_t errlen)
{
    const vision_config_t *c = &v->cfg;
    if (!rgb || !out || w != c->image_size || h != c->image_size)
        return errbuf_set(err, errlen, "image is %dx%d, the encoder takes %dx%d", w, h, c->image_size,
                          c->image_size);
    encode_chunk(v, &rgb, 1, &out);
    return 0;
}

/* The next header number of a PPM at *pos (whitespace and # comments before
 * it), at most 65535; -1 when absent. */
static long ppm_number(const uint8_t *buf, size_t len, size_t *pos)
{
    size_t i = *pos;
    for (;;) {
        while (i < len && (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\n' || buf[i] == '\r'))
            i++;
        if (i < len && buf[i] == '#') {
            while (i < len && buf[i] != '\n')
                i++;
            continue;
        }
        break;
    }
    long v = 0;
    size_t d = 0;
    for (; i < len && buf[i] >= '0' && buf[i] <= '9' && d < 6; i++, d++)
        v = v * 10 + (buf[i] - '0');
    if (d == 0 || d == 6 || v > 65535)
        return -1;
    *pos = i;
    return v;
}

int vision_ppm_parse(const uint8_t *buf, size_t len, int *w, int *h, const uint8_t **rgb, char *err,
                     size_t errlen)
{
    if (!buf || len < 2 || buf[0] != 'P' || buf[1] != '6')
        return errbuf_set(err, errlen, "not a binary PPM (P6) image");
    size_t pos = 2;
    long W = ppm_number(buf, len, &pos), H = W < 0 ? -1 : ppm_number(buf, len, &pos),
         M = H < 0 ? -1 : ppm_number(buf, len, &pos);
    if (W < 1 || H < 1 || M != 255)
        return errbuf_set(err, errlen, "PPM header: want positive width and height and maxval 255");
    if (pos >= len || !(buf[pos] == ' ' || buf[pos] == '\t' || buf[pos] == '\n' || buf[pos] == '\r'))
        return errbuf_set(err, errlen, "PPM header: no whitespace before the pixels");
    pos++;
    if (len - pos < (size_t)W * (size_t)H * 3)
        return errbuf_set(err, errlen, "PPM: %zu pixel bytes, %ldx%ld needs %zu", len - pos, W, H,
                          (size_t)W * (size_t)H * 3);
    *w = (int)W;
    *h = (int)H;
    *rgb = buf + pos;
    return 0;
}
