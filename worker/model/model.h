/* model.h — a decoder-only transformer loaded from a GGUF file.
 *
 * Supported architectures (general.architecture):
 *   llama  Llama 2/3, TinyLlama, SmolLM, Mistral: RMSNorm, SwiGLU FFN, GQA,
 *          rope on adjacent pairs (x[2i], x[2i+1]) — llama.cpp's converter
 *          permutes HF's Q/K rows so that this "normal" pairing applies;
 *          optional linear rope scaling and Llama-3 rope scaling (the
 *          `rope_freqs.weight` tensor, or the `rope.scaling.type` = llama3
 *          metadata); output.weight absent → tied to token_embd.
 *   qwen2  as llama plus Q/K/V biases, rope on half-split pairs
 *          (x[i], x[i + rope_dim/2]) ("NeoX" style).
 * Anything else (another architecture, yarn scaling, a tensor type other than
 * F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K, a missing tensor or a shape that does
 * not match the metadata) is refused by model_load with a message naming it.
 *
 * GGUF tensors used (ne listed fastest-first as in the file; `rows` below is
 * ne[1], `cols` is ne[0]):
 *   token_embd.weight        [dim, vocab]
 *   output_norm.weight       [dim]
 *   output.weight            [dim, vocab]           (optional: tied)
 *   rope_freqs.weight        [rope_dim/2]           (optional: llama3 factors)
 *   blk.L.attn_norm.weight   [dim]
 *   blk.L.attn_q.weight      [dim, n_head*head_dim]    .bias [n_head*head_dim] (qwen2)
 *   blk.L.attn_k.weight      [dim, n_kv_head*head_dim] .bias [kv_dim]          (qwen2)
 *   blk.L.attn_v.weight      [dim, n_kv_head*head_dim] .bias [kv_dim]          (qwen2)
 *   blk.L.attn_output.weight [n_head*head_dim, dim]
 *   blk.L.ffn_norm.weight    [dim]
 *   blk.L.ffn_gate.weight    [dim, ffn]
 *   blk.L.ffn_up.weight      [dim, ffn]
 *   blk.L.ffn_down.weight    [ffn, dim]
 *
 * Matrices stay in the mmap in their stored type (matmul_weight_t). Small
 * 1-D tensors (norm weights, biases, rope factors) are converted to float
 * arrays owned by the model.
 *
 * Ownership: model_load() returns a model that owns its gguf_t (and so the
 * mmap); model_free() releases everything and NULLs the pointer. A loaded
 * model is read-only and may be shared by any number of forward_t.
 */
#ifndef PAGODA_WORKER_MODEL_H
#define PAGODA_WORKER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model/gguf.h"
#include "worker/kernels/matmul.h"

enum model_arch { MODEL_ARCH_LLAMA = 0, MODEL_ARCH_QWEN2 = 1 };

enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR = 1,  /* position divided by rope_scale_factor */
    MODEL_ROPE_SCALING_LLAMA3 = 2,  /* per-frequency factors (rope_freq_factors) */
};

typedef struct model_config {
    enum model_arch arch;
    int32_t n_layer;       /* {arch}.block_count */
    int32_t dim;           /* {arch}.embedding_length */
    int32_t n_head;        /* {arch}.attention.head_count */
    int32_t n_kv_head;     /* {arch}.attention.head_count_kv (default n_head) */
    int32_t head_dim;      /* {arch}.attention.key_length (default dim / n_head) */
    int32_t q_dim;         /* n_head * head_dim */
    int32_t kv_dim;        /* n_kv_head * head_dim */
    int32_t ffn_dim;       /* {arch}.feed_forward_length */
    int32_t vocab;         /* rows of token_embd.weight */
    int32_t ctx;           /* {arch}.context_length: positions must be < ctx */
    float norm_eps;        /* {arch}.attention.layer_norm_rms_epsilon (default 1e-5) */
    float rope_base;       /* {arch}.rope.freq_base (default 10000) */
    int32_t rope_dim;      /* {arch}.rope.dimension_count (default head_dim); even, <= head_dim */
    int rope_neox;         /* 1: pairs (i, i+rope_dim/2) (qwen2); 0: pairs (2i, 2i+1) (llama) */
    enum model_rope_scaling rope_scaling;
    float rope_scale_factor;    /* {arch}.rope.scaling.factor (linear, llama3); 1 if none */
    float rope_llama3_low;      /* {arch}.rope.scaling.low_freq_factor (llama3 metadata) */
    float rope_llama3_high;     /* {arch}.rope.scaling.high_freq_factor */
    int32_t rope_llama3_orig_ctx; /* {arch}.rope.scaling.original_context_length */
    int tied_output;       /* 1 when output.weight is absent and token_embd is reused */
} model_config_t;

typedef struct model_layer {
    const float *attn_norm;   /* (dim) */
    matmul_weight_t wq;       /* (q_dim, dim) */
    matmul_weight_t wk;       /* (kv_dim, dim) */
    matmul_weight_t wv;       /* (kv_dim, dim) */
    matmul_weight_t wo;       /* (dim, q_dim) */
    const float *bq;          /* (q_dim) or NULL */
    const float *bk;          /* (kv_dim) or NULL */
    const float *bv;          /* (kv_dim) or NULL */
    const float *ffn_norm;    /* (dim) */
    matmul_weight_t w_gate;   /* (ffn_dim, dim) */
    matmul_weight_t w_up;     /* (ffn_dim, dim) */
    matmul_weight_t w_down;   /* (dim, ffn_dim) */
} model_layer_t;

typedef struct model {
    model_config_t cfg;
    gguf_t *gguf;             /* owned; every matmul_weight_t points into its mmap */
    matmul_weight_t tok_embd; /* (vocab, dim) */
    const float *output_norm; /* (dim) */
    matmul_weight_t output;   /* (vocab, dim); == tok_embd when tied */
    model_layer_t *layers;    /* (n_layer), owned */
    /* Rope inverse frequencies with scaling folded in: the angle for pair i at
     * position p is p * rope_pos_scale * rope_inv_freq[i]. */
    double *rope_inv_freq;    /* (rope_dim/2), owned */
    double rope_pos_scale;    /* 1 / rope_scale_factor for linear scaling, else 1 */
    int64_t max_cols;         /* widest matrix row (for matmul scratch) */
    float *f32_arena;         /* owned storage behind the const float * fields */
    void *packed_arena;       /* owned: the packed weights (model_pack_int8) that the
                               * matmul_weight_t.packed pointers point into; NULL if none */
    size_t packed_bytes;      /* bytes of packings in packed_arena */
} model_t;

/* Opens `path` (mmap) and loads it. Returns 0 and *out, or -1 with a
 * message in err (errlen bytes) naming the refused architecture, type,
 * tensor or key. */
int model_load(const char *path, model_t **out, char *err, size_t errlen);

/* Loads from an already opened GGUF. On success the model takes ownership
 * of *g and sets *g = NULL; on failure *g is left to the caller. */
int model_load_gguf(gguf_t **g, model_t **out, char *err, size_t errlen);

void model_free(model_t **m);

/* Packs every Q8_0 matrix used as a matmul (the layers' seven and the
 * output projection; not the embedding lookup, which keeps reading
 * token_embd rows even when the output is tied to it) into the int8
 * kernels' panel layout (qgemm_pack, qgemm.h), with n_threads OpenMP
 * threads, and sets each one's matmul_weight_t.packed. Worth it when the
 * int8 kernels will run (forward_set_int8 on) on an AVX2 CPU: each matmul
 * then skips the per-call decode + transpose of W. Does nothing on a CPU
 * without AVX2 (the scalar kernels read the file layout) or when already
 * packed. The packed copy replaces the file pages in memory: when the
 * model was mmap'd by model_load, the pages of each packed matrix that no
 * other path reads are dropped (madvise MADV_DONTNEED; a later read, e.g.
 * with int8 off, faults them in again from the file). The packings lie in
 * one arena (packed_arena, 2 MiB aligned, advised MADV_HUGEPAGE: fewer TLB
 * misses while decode streams it) owned by the model; model_free frees it. Call before sharing the model with
 * forward_t's, not concurrently with forward_run. Returns the number of
 * matrices packed (0: none is Q8_0, or no AVX2). */
int model_pack_int8(model_t *m, int n_threads);

/* One-line summary ("llama: 2 layers, dim 256, ...") into buf. */
void model_describe(const model_t *m, char *buf, size_t len);

/* Bytes of weight data in the mmap used by the model's matrices. */
size_t model_weight_bytes(const model_t *m);

#endif
