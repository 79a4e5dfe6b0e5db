/* model.h — a decoder-only transformer loaded from a GGUF file.
 *
 * Supported architectures (general.architecture, llama.cpp's names; the
 * table of what each one reads and switches on is MODEL_ARCH_TABLE in
 * arch.h, and a family is supported exactly when it has a row there):
 *   llama     Llama 2/3, TinyLlama, SmolLM, Mistral: RMSNorm, SwiGLU FFN, GQA,
 *             rope on adjacent pairs (x[2i], x[2i+1]) — llama.cpp's converter
 *             permutes HF's Q/K rows so that this "normal" pairing applies;
 *             optional linear rope scaling and Llama-3 rope scaling (the
 *             `rope_freqs.weight` tensor, or the `rope.scaling.type` = llama3
 *             metadata); output.weight absent → tied to token_embd.
 *             Mistral-style sliding window when llama.attention.sliding_window
 *             is given (every layer attends to the last W positions).
 *   qwen2     as llama plus Q/K/V biases, rope on half-split pairs
 *             (x[i], x[i + rope_dim/2]) ("NeoX" style).
 *   qwen3     qwen2's rope, no biases, RMSNorm of every q and k head
 *             (attn_q_norm / attn_k_norm, head_dim wide) before rope.
 *   qwen2moe  qwen2 with a mixture-of-experts FFN: softmax router over
 *             expert_count experts, top expert_used_count, weights not
 *             renormalised (expert_weights_norm overrides), plus a shared
 *             expert gated by sigmoid(x · ffn_gate_inp_shexp).
 *   qwen3moe  qwen3 attention with the MoE FFN, top-k weights renormalised,
 *             no shared expert.
 *   gemma2    embedding scaled by sqrt(dim), GeGLU FFN (gelu, tanh form),
 *             RMSNorm after attention and after the FFN too (post norms),
 *             attention and final logit soft-capping (cap * tanh(x / cap)),
 *             sliding-window layers (attention.sliding_window, default 4096)
 *             interleaved with global ones (sliding_window_pattern, default
 *             2: even layers local), NeoX rope, tied output.
 *   gemma3    gemma2 without attention soft-capping (final cap only if the
 *             metadata gives one), plus per-head Q/K RMSNorm, pattern
 *             default 6 (5 local : 1 global), local layers using
 *             rope.freq_base_swa (default 10000) without scaling, global
 *             ones rope.freq_base with the file's rope scaling.
 *   phi3      Phi-3/3.5/4-mini: fused attn_qkv and fused ffn_up (gate rows
 *             then up rows), NeoX rope, LongRoPE: rope_factors_short /
 *             rope_factors_long divide the frequencies (long when ctx >
 *             rope.scaling.original_context_length) and
 *             rope.scaling.attn_factor scales cos and sin. Its
 *             sliding_window metadata is ignored (as llama.cpp does).
 * Any architecture may use a fused attn_qkv (+ .bias) in place of
 * attn_q/k/v. Anything else (another architecture, yarn scaling, a tensor
 * type without a row in quant.h's traits table, a missing tensor
 * or a shape that does not match the metadata) is refused by model_load
 * with a message naming it.
 *
 * GGUF tensors used (ne listed fastest-first as in the file; `rows` below is
 * ne[1], `cols` is ne[0]):
 *   token_embd.weight        [dim, vocab]
 *   output_norm.weight       [dim]
 *   output.weight            [dim, vocab]           (optional: tied)
 *   rope_freqs.weight        [rope_dim/2]           (optional: llama3 factors)
 *   rope_factors_{short,long}.weight [rope_dim/2]   (phi3, optional)
 *   blk.L.attn_norm.weight   [dim]
 *   blk.L.attn_q.weight      [dim, n_head*head_dim]    .bias [n_head*head_dim] (qwen2)
 *   blk.L.attn_k.weight      [dim, n_kv_head*head_dim] .bias [kv_dim]          (qwen2)
 *   blk.L.attn_v.weight      [dim, n_kv_head*head_dim] .bias [kv_dim]          (qwen2)
 *   blk.L.attn_qkv.weight    [dim, q_dim + 2*kv_dim]   (instead of the three)
 *   blk.L.attn_q_norm.weight [head_dim], attn_k_norm   (qwen3, qwen3moe, gemma3)
 *   blk.L.attn_output.weight [n_head*head_dim, dim]
 *   blk.L.post_attention_norm.weight [dim]             (gemma2/3)
 *   blk.L.ffn_norm.weight    [dim]
 *   blk.L.ffn_gate.weight    [dim, ffn]
 *   blk.L.ffn_up.weight      [dim, ffn]             ([dim, 2*ffn] without gate: phi3)
 *   blk.L.ffn_down.weight    [ffn, dim]
 *   blk.L.post_ffw_norm.weight [dim]                   (gemma2/3)
 *   MoE (qwen2moe, qwen3moe) instead of ffn_gate/up/down:
 *   blk.L.ffn_gate_inp.weight  [dim, n_expert]         router
 *   blk.L.ffn_gate_exps.weight [dim, ffn_exp, n_expert], ffn_up_exps likewise,
 *   blk.L.ffn_down_exps.weight [ffn_exp, dim, n_expert]
 *   blk.L.ffn_gate_inp_shexp.weight [dim], ffn_{gate,up}_shexp [dim, ffn_shexp],
 *   blk.L.ffn_down_shexp [ffn_shexp, dim]              (qwen2moe shared expert)
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

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/gguf.h"
#include "worker/kernels/matmul.h"
#include "worker/model/arch.h" /* enum model_arch, enum model_ffn_act, the family table */
#include "worker/model/rank_head.h"

/* How an embedding pools a sequence's final hidden states: llama.cpp's
 * {arch}.pooling_type values. Embeddings are served mean or last; absent
 * and other values (0 none, 2 cls, 4 rank) load as mean (model_pooling).
 * RANK is what a rerank request (worker op "rank") asks of the scheduler:
 * one token's state (rank_head.h says which) through the model's head. */
enum model_pooling {
    MODEL_POOL_MEAN = 1,      /* average over every prompt token */
    MODEL_POOL_LAST = 3,      /* the last prompt token's state */
    MODEL_POOL_RANK = 4,      /* model.rank's token, then its head: the scores */
};

enum model_rope_scaling {
    MODEL_ROPE_SCALING_NONE = 0,
    MODEL_ROPE_SCALING_LINEAR = 1,  /* position divided by rope_scale_factor */
    MODEL_ROPE_SCALING_LLAMA3 = 2,  /* per-frequency factors (rope_freq_factors) */
    MODEL_ROPE_SCALING_LONGROPE = 3, /* phi3: rope_factors_{short,long} + attn_factor */
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
    /* family features (0 / 1 / none unless the architecture has them) */
    int qk_norm;           /* 1: RMSNorm of each q and k head before rope (qwen3, gemma3) */
    int post_norms;        /* 1: RMSNorm of the attention and FFN outputs before the residual add (gemma) */
    enum model_ffn_act ffn_act;
    float embd_scale;      /* x = token_embd[t] * embd_scale (gemma: sqrt(dim)); 1 otherwise */
    float attn_scale;      /* scores = q·k * attn_scale (1/sqrt(head_dim) unless the family says) */
    float attn_softcap;    /* > 0: scores = cap * tanh(scores / cap) (gemma2 attn_logit_softcapping) */
    float final_softcap;   /* > 0: logits = cap * tanh(logits / cap) (gemma2 final_logit_softcapping) */
    enum model_pooling pooling; /* embeddings: {arch}.pooling_type 3 → LAST, anything else MEAN */
    int32_t pooling_raw;   /* {arch}.pooling_type as written (-1 when absent) */
    int32_t swa_window;    /* > 0: sliding-window layers attend to positions pos-W+1..pos */
    int32_t swa_pattern;   /* layer l is sliding-window when l % pattern < pattern - 1 (1: all) */
    int n_swa_layers;      /* how many layers are sliding-window (0 .. n_layer) */
    int rope_swa_own;      /* 1: sliding-window layers use their own rope table (gemma3) */
    float rope_base_swa;   /* {arch}.rope.freq_base_swa (gemma3 local layers) */
    float rope_attn_factor;/* cos and sin multiplied by this (phi3 LongRoPE magnitude); 1 otherwise */
    /* mixture of experts (qwen2moe, qwen3moe); n_expert 0 for dense models */
    int32_t n_expert;      /* {arch}.expert_count */
    int32_t n_expert_used; /* {arch}.expert_used_count: experts per token */
    int32_t expert_ffn_dim;/* {arch}.expert_feed_forward_length (default ffn / n_expert_used) */
    int32_t shexp_ffn_dim; /* {arch}.expert_shared_feed_forward_length (qwen2moe; default ffn) */
    int expert_norm;       /* 1: top-k weights renormalised to sum 1 ({arch}.expert_weights_norm) */
    float expert_scale;    /* top-k weights multiplied by this ({arch}.expert_weights_scale, default 1) */
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
    const float *q_norm;      /* (head_dim) or NULL: per-head RMSNorm of q (qk_norm) */
    const float *k_norm;      /* (head_dim) or NULL */
    const float *attn_post_norm; /* (dim) or NULL (post_norms) */
    const float *ffn_post_norm;  /* (dim) or NULL */
    int swa;                  /* 1: this layer attends within cfg.swa_window */
    /* MoE layers (cfg.n_expert > 0): w_gate/w_up/w_down unused */
    matmul_weight_t router;   /* (n_expert, dim) */
    matmul_weight_t *exp_gate;/* (n_expert) views, each (expert_ffn_dim, dim); owned array */
    matmul_weight_t *exp_up;  /* (n_expert) views, each (expert_ffn_dim, dim) */
    matmul_weight_t *exp_down;/* (n_expert) views, each (dim, expert_ffn_dim) */
    const float *shexp_gate_inp; /* (dim) or NULL: shared expert gate sigmoid(x · w) */
    matmul_weight_t sh_gate;  /* (shexp_ffn_dim, dim) when shexp_gate_inp */
    matmul_weight_t sh_up;    /* (shexp_ffn_dim, dim) */
    matmul_weight_t sh_down;  /* (dim, shexp_ffn_dim) */
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
    double *rope_inv_freq_swa;/* (rope_dim/2), owned, or NULL: the sliding-window layers'
                               * table when cfg.rope_swa_own (position scale 1) */
    int64_t max_cols;         /* widest matrix row (for matmul scratch) */
    float *f32_arena;         /* owned storage behind the const float * fields */
    void *packed_arena;       /* owned: the packed weights (model_pack_int8) that the
                               * matmul_weight_t.packed pointers point into; NULL if none */
    size_t packed_bytes;      /* bytes of packings in packed_arena */
    void *packed_map;         /* owned, or NULL: the read-only file mapping that
                               * packed_arena lies in (model_pack_adopt_map), which
                               * model_free unmaps instead of freeing packed_arena */
    size_t packed_map_bytes;
    rank_head_t *rank;        /* owned, or NULL: the reranker head (pooling_type 4 with
                               * cls tensors, rank_head.h); NULL = the model cannot rank */
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

/* The matrices model_pack_int8 packs, in arena order: each with its packed
 * size (qgemm_packed_size, a multiple of 64) and whether another path (the
 * embedding lookup) reads its rows. model_pack_plan returns their number
 * (0 and *out NULL when none: no AVX2, already packed, no packable type);
 * *out is the caller's (free). model_pack_adopt(m, arena, plan, n) takes
 * an arena that holds plan's packings back to back (what model_pack_int8
 * would have built, e.g. read from worker/pack_cache's file): m owns
 * it from then on (free()d by model_free; allocate it with xhuge_alloc), the
 * matrices point into it and their file pages are dropped as in
 * model_pack_int8. m must not be packed yet. */
typedef struct model_packable {
    matmul_weight_t *w;
    size_t bytes;
    bool shared;
} model_packable_t;
int model_pack_plan(model_t *m, model_packable_t **out);
void model_pack_adopt(model_t *m, void *arena, const model_packable_t *plan, int n);
/* model_pack_adopt for an arena inside a read-only file mapping
 * [map, map + map_bytes) (worker/pack_cache maps its file when the kernel
 * maps it with huge pages): m owns the mapping and model_free unmaps it. */
void model_pack_adopt_map(model_t *m, void *map, size_t map_bytes, void *arena, const model_packable_t *plan,
                          int n);

/* Makes the weights the forward pass reads resident before the first step
 * (a restarted worker's first request otherwise pays the page faults):
 * madvise MADV_POPULATE_READ (MADV_WILLNEED where the kernel refuses it,
 * before Linux 5.14) over the pack file's mapping (packed_map) and, in the
 * GGUF's mapping, over every matrix still read from the file (the
 * embedding, unpacked matrices, routers); never over a packed matrix's file
 * pages, which model_pack_int8 dropped. Never changes a byte. Returns the
 * bytes advised (a hint: the kernel may still evict them later). */
size_t model_advise_resident(const model_t *m);

/* "llama", "qwen3moe", ... (the table's general.architecture names; "?"
 * for a value not in it). */
const char *model_arch_name(enum model_arch a);

/* One-line summary ("llama: 2 layers, dim 256, ...") into buf. */
void model_describe(const model_t *m, char *buf, size_t len);

/* The window W when EVERY layer is sliding-window (Mistral-style): no row at
 * position p ever reads a position below p - W + 1, so the KV blocks behind
 * that can be released (kv_seq_drop_before). 0 when the model has a global
 * layer (gemma2/3 mix local and global layers: the global ones read every
 * position, so every block is kept) or no window at all. */
static inline int32_t model_kv_window(const model_config_t *c)
{
    return c->swa_window > 0 && c->n_swa_layers == c->n_layer ? c->swa_window : 0;
}

/* Bytes of weight data in the mmap used by the model's matrices. */
size_t model_weight_bytes(const model_t *m);

/* Bytes of weights the process holds once the model is packed (or not):
 * model_weight_bytes, less the file bytes of each packed matrix whose pages
 * model_pack_int8 dropped (not the tied output, whose rows the embedding
 * lookup reads), plus the packings (packed_bytes). What the KV pool's
 * automatic size (worker/kv_budget.h) counts as the weights. */
size_t model_held_bytes(const model_t *m);

#endif
