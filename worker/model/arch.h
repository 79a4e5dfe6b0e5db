/* arch.h — the architecture table: one row per model family the worker
 * loads (general.architecture, llama.cpp's names), the only list of them.
 *
 * model.c reads a family's row to decide which metadata keys to read
 * (with which defaults), which tensors to require, allow or split, and
 * which features to switch on in model_config_t; forward.c reads only
 * those config fields (never the family's name). pagoda-mkmodel reads the
 * same rows to write a synthetic file of the family. Adding an
 * architecture whose layers are made of these parts is one row of
 * MODEL_ARCH_TABLE; a new kind of layer also needs its step in forward.c
 * (and its column here). model.h describes each family in prose.
 *
 * Every family reads the generic hyper-parameters {arch}.block_count,
 * embedding_length, attention.head_count(_kv), feed_forward_length,
 * context_length, attention.key_length/value_length,
 * attention.layer_norm_rms_epsilon, rope.freq_base, rope.dimension_count,
 * rope.scaling.*, pooling_type, and the tensors token_embd, output_norm,
 * output (optional: tied), rope_freqs (optional), blk.L.attn_norm,
 * attn_q/k/v (or a fused attn_qkv, optional biases), attn_output, ffn_norm,
 * ffn_gate/up/down. The columns add to that:
 *
 *   column                keys read / tensors used
 *   rope_neox             rope rotates pairs (i, i + rope_dim/2); else (2i, 2i+1)
 *   qkv_bias              attn_{q,k,v}.bias are part of the family (mkmodel writes them)
 *   qkv_bias_required     ... and a file without them is refused
 *   fused_qkv             the family's files hold attn_qkv (mkmodel)
 *   qk_norm               attn_q_norm, attn_k_norm [head_dim] (required)
 *   post_norms            post_attention_norm, post_ffw_norm [dim] (required)
 *   embd_scale_sqrt_dim   token embeddings scaled by sqrt(dim)
 *   attn_scale_layers     n_layer of the family's model whose scores scale by
 *                         1/sqrt(dim / n_head) instead of 1/sqrt(head_dim) (0: none)
 *   softcap               attn_logit_softcapping, final_logit_softcapping,
 *                         defaulting to attn_softcap / final_softcap
 *   attn_softcap_off      attention soft-capping forced off whatever the file says
 *   swa                   attention.sliding_window (default swa_window),
 *                         attention.sliding_window_pattern (default swa_pattern:
 *                         layer l local when l % p < p - 1; 1 = every layer);
 *                         false: no window, the keys are ignored
 *   rope_swa              rope.freq_base_swa (default rope_base_swa, 0 = rope.freq_base)
 *   rope_swa_own          local layers get their own rope table (that base, no scaling)
 *   longrope              rope.scaling.attn_factor and rope_factors_{short,long}
 *                         instead of rope_freqs; no sliding window
 *   ffn_act               the gate's activation (SwiGLU / GeGLU)
 *   fused_up              no ffn_gate: ffn_up [dim, 2·ffn] holds gate rows, then up rows
 *   moe                   expert_count, expert_used_count,
 *                         expert_(shared_)feed_forward_length, expert_weights_scale,
 *                         expert_weights_norm (default moe_norm), expert_gating_func;
 *                         ffn_gate_inp + ffn_{gate,up,down}_exps instead of the dense FFN
 *   moe_shared_expert     ffn_gate_inp_shexp + ffn_{gate,up,down}_shexp required
 *                         (otherwise honoured when present)
 *   tied_output           the family's files have no output.weight (mkmodel)
 *   rank_last_softmax     a rank-pooled file (pooling_type 4, worker/model/rank_head.h)
 *                         softmaxes the outputs (Qwen3-Reranker); other families give
 *                         raw outputs (every family's head reads the last token)
 *   synth_rope_base, synth_eps, synth_window
 *                         pagoda-mkmodel's defaults for --rope-base, --eps, --window
 *
 * The table is static data: nothing to free; any thread.
 */
#ifndef PAGODA_WORKER_ARCH_H
#define PAGODA_WORKER_ARCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* FFN activation of the gate projection. */
enum model_ffn_act {
    MODEL_FFN_SILU = 0,       /* SwiGLU: silu(g) * u */
    MODEL_FFN_GELU_TANH = 1,  /* GeGLU: gelu(g) * u, gelu in its tanh form */
};

/* X(ENUM suffix, general.architecture, column = value, ...): columns not
 * named are false / 0 (SwiGLU, no window, ...). */
#define MODEL_ARCH_TABLE(X)                                                                            \
    X(LLAMA, "llama", .swa = true, .swa_pattern = 1,                                                   \
      .synth_rope_base = 10000.0, .synth_eps = 1e-5)                                                   \
    X(QWEN2, "qwen2", .rope_neox = true, .qkv_bias = true, .qkv_bias_required = true,                  \
      .synth_rope_base = 1e6, .synth_eps = 1e-6)                                                       \
    X(QWEN3, "qwen3", .rope_neox = true, .qk_norm = true, .rank_last_softmax = true,                   \
      .synth_rope_base = 1e6, .synth_eps = 1e-6)                                                       \
    X(QWEN2MOE, "qwen2moe", .rope_neox = true, .qkv_bias = true, .moe = true, .moe_shared_expert = true, \
      .synth_rope_base = 1e6, .synth_eps = 1e-6)                                                       \
    X(QWEN3MOE, "qwen3moe", .rope_neox = true, .qk_norm = true, .moe = true, .moe_norm = true,         \
      .synth_rope_base = 1e6, .synth_eps = 1e-6)                                                       \
    X(GEMMA2, "gemma2", .rope_neox = true, .post_norms = true, .embd_scale_sqrt_dim = true,            \
      .attn_scale_layers = 46, .softcap = true, .attn_softcap = 50.0f, .final_softcap = 30.0f,         \
      .swa = true, .swa_window = 4096, .swa_pattern = 2, .rope_swa = true,                             \
      .ffn_act = MODEL_FFN_GELU_TANH, .tied_output = true,                                             \
      .synth_rope_base = 1e6, .synth_eps = 1e-6, .synth_window = 4096)                                 \
    X(GEMMA3, "gemma3", .rope_neox = true, .qk_norm = true, .post_norms = true,                        \
      .embd_scale_sqrt_dim = true, .attn_scale_layers = 62, .softcap = true, .attn_softcap_off = true, \
      .swa = true, .swa_pattern = 6, .rope_swa = true, .rope_base_swa = 10000.0f, .rope_swa_own = true, \
      .ffn_act = MODEL_FFN_GELU_TANH, .tied_output = true,                                             \
      .synth_rope_base = 1e6, .synth_eps = 1e-6, .synth_window = 512)                                  \
    X(PHI3, "phi3", .rope_neox = true, .fused_qkv = true, .longrope = true, .fused_up = true,          \
      .synth_rope_base = 1e6, .synth_eps = 1e-6)

enum model_arch {
#define MODEL_ARCH_ENUM_(e, name, ...) MODEL_ARCH_##e,
    MODEL_ARCH_TABLE(MODEL_ARCH_ENUM_)
#undef MODEL_ARCH_ENUM_
    MODEL_ARCH_COUNT
};

/* One row (columns described above). */
typedef struct model_arch_info {
    enum model_arch arch;
    const char *name;          /* general.architecture; the {arch}. prefix of its keys */
    bool rope_neox;
    bool qkv_bias, qkv_bias_required, fused_qkv;
    bool qk_norm;
    bool post_norms;
    bool embd_scale_sqrt_dim;
    int32_t attn_scale_layers;
    bool softcap, attn_softcap_off;
    float attn_softcap, final_softcap; /* defaults of the softcapping keys */
    bool swa;
    int32_t swa_window, swa_pattern;   /* defaults of the sliding-window keys */
    bool rope_swa, rope_swa_own;
    float rope_base_swa;               /* default of rope.freq_base_swa; 0 = rope.freq_base */
    bool longrope;
    enum model_ffn_act ffn_act;
    bool fused_up;
    bool moe, moe_shared_expert, moe_norm;
    bool tied_output;
    bool rank_last_softmax;            /* rank pooling (worker/model/rank_head.h) reads the last
                                          token and softmaxes the head's outputs (Qwen3-Reranker's
                                          yes/no rows); otherwise the first token, raw outputs */
    double synth_rope_base, synth_eps; /* pagoda-mkmodel defaults */
    int32_t synth_window;
} model_arch_info_t;

/* The row of a; NULL when a is not an architecture. */
const model_arch_info_t *model_arch_info(enum model_arch a);
/* The row named name (len bytes, not NUL-terminated), NULL when none is. */
const model_arch_info_t *model_arch_find(const char *name, size_t len);
/* "llama, qwen2, ..." (sep between names) into buf (len bytes, truncated,
 * NUL-terminated): for "supported:" messages and usage texts. */
void model_arch_list(char *buf, size_t len, const char *sep);

#endif
