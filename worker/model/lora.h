/* lora.h — a LoRA adapter loaded from a GGUF file, checked against its base.
 *
 * File layout (as llama.cpp's convert_lora_to_gguf.py writes it):
 *   general.type          = "adapter"
 *   general.architecture  = the base's (e.g. "llama"): must match
 *   adapter.type          = "lora"
 *   adapter.lora.alpha    float; 0 or absent = no alpha (scale used as given)
 *   for each adapted matrix W of the base, named `<W's name>` (e.g.
 *   blk.0.attn_q.weight), two tensors (ne fastest-first, as in the file):
 *     <name>.lora_a   [in, r]    A: r rows of `in` (W's ne[0]) floats
 *     <name>.lora_b   [r, out]   B: `out` (W's ne[1]) rows of r floats
 *   in F32, F16, BF16 or Q8_0 (Q8_0 needs the row length to be a multiple
 *   of 32, so only A of rank >= 1 with in % 32 == 0 and B of r % 32 == 0).
 *
 * The adapted matrix is W' = W + s · B·A, i.e. for an input row x:
 *     y = x·Wᵀ + s · (x·Aᵀ)·Bᵀ,   s = scale · alpha / r  (alpha != 0)
 *                                 s = scale               (alpha == 0)
 * with r = B's ne[0] — the rule of llama.cpp's llama_adapter_lora_weight.
 *
 * Adapted matrices: the seven projections of every layer (attn_q, attn_k,
 * attn_v, attn_output, ffn_gate, ffn_up, ffn_down) and a fused attn_qkv
 * (its B's rows split into the Q, K and V parts, sharing A). Anything else
 * (token_embd, output, MoE experts, phi3's fused ffn_up, a tensor the base
 * does not have) is refused by lora_load with a message naming it.
 *
 * F16 factors are kept as F16 (the converter's default type), F32, BF16 and
 * Q8_0 ones are converted to F32 at load (memory: r · (in + out) halves or
 * floats per matrix). Each pair is a lowrank_t of matmul_weight_t views
 * into the arena (worker/kernels/lowrank.h applies them), prepared by
 * lowrank_prepare_in (into the adapter's block of copies; the arena and
 * that block are on huge pages) as the environment's PAGODA_LORA_PRECISION
 * says: float
 * (the default; unset or empty too) reads the arena's values (and a Bᵀ
 * copy); int8 rounds A and B to int8 per row, the copies the update then
 * reads (half the bytes of F16 a step streams). Another value: lora_load
 * fails naming the variable.
 *
 * Ownership: lora_load returns an adapter that owns its arrays and nothing
 * else (the file is closed before it returns); the base model is only read.
 * It is reference-counted: lora_load's caller holds the first reference,
 * lora_ref takes another (a request that runs with it, from admission to its
 * end), lora_free drops one (NULLing the pointer) and frees the adapter with
 * the last — so an adapter unloaded at run time stays until the requests
 * that hold it end. The count is not atomic: one thread (the worker's step
 * loop) takes and drops references. A loaded adapter is read-only otherwise
 * and may be used by any number of forward passes at once.
 */
#ifndef PAGODA_WORKER_LORA_H
#define PAGODA_WORKER_LORA_H

#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/lowrank.h"
#include "worker/model/model.h"

/* Most adapters one worker holds, and the largest rank it loads. */
#define LORA_MAX_ADAPTERS 64
#define LORA_MAX_RANK 512

/* The adaptable matrices of a layer, in model_layer_t order. */
enum lora_proj { LORA_Q, LORA_K, LORA_V, LORA_O, LORA_GATE, LORA_UP, LORA_DOWN, LORA_N_PROJ };

typedef struct lora {
    float alpha;           /* adapter.lora.alpha (0: none) */
    int32_t n_layer;       /* the base's */
    int32_t max_rank;      /* the largest r of any pair */
    int32_t n_pairs;       /* adapted matrices (a fused attn_qkv counts 3) */
    /* (n_layer * LORA_N_PROJ), index l * LORA_N_PROJ + proj; .rank 0 = not
     * adapted. Each pair's scale folds alpha / r in (lowrank.h). */
    lowrank_t *pairs;
    uint64_t hash;         /* prefix_key_bytes of the whole file: what keys its
                            * KV blocks (prefix_key_adapters), computed the same
                            * way by the gateway from the same file */
    float *arena;          /* owned: every A and B (F16 ones as halves, two a float) */
    size_t n_floats;       /* floats in arena */
    uint8_t *prep;         /* owned: every pair's prepared copies (lowrank_prepare_in) */
    size_t prep_bytes;     /* bytes of them */
    int32_t refs;          /* holders (lora_ref / lora_free), >= 1 while alive */
} lora_t;

/* The adapters one batch row runs with: up to LORA_SET_MAX, each with its
 * scale (the user's: the pair's alpha / r is applied on top). A request's
 * set; n == 0 is the base model. */
#define LORA_SET_MAX 4
typedef struct lora_set {
    int32_t n;
    const lora_t *ad[LORA_SET_MAX];
    float scale[LORA_SET_MAX];
} lora_set_t;

/* A batch's rows → adapter sets for fwd_batch_t (forward.h): the sets of
 * the batch's sequences, equal ones merged so rows of one adapter set form
 * one group whichever sequence they belong to. Made once (lora_rows_new,
 * for up to max_rows rows and max_seqs sequences), refilled every step. */
typedef struct lora_rows {
    int32_t *row_set;      /* (max_rows) per row: index into sets, -1 = base */
    int32_t *seq_set;      /* (max_seqs) per sequence of the batch */
    const lora_set_t **by_seq; /* (max_seqs) the caller's: each batch sequence's set
                            * (NULL or n 0 = base), read by lora_rows_fill */
    lora_set_t *sets;      /* (max_seqs) the distinct non-empty sets */
    int32_t max_rows, max_seqs;
} lora_rows_t;

lora_rows_t *lora_rows_new(int32_t max_rows, int32_t max_seqs);
void lora_rows_free(lora_rows_t **lr);

/* The adapter sets of a batch of n_rows rows over n_seq sequences (seq[r]:
 * row r's sequence) from lr->by_seq[0..n_seq): returns the number of
 * distinct sets and points *row_set (per row: index into *sets, -1 = base)
 * and *sets at lr's arrays (valid until the next fill) — fwd_batch_t's
 * lora_set / lora_sets / n_lora_sets; 0 and NULLs when no sequence has an
 * adapter. */
int32_t lora_rows_fill(lora_rows_t *lr, int32_t n_seq, int32_t n_rows, const int32_t *seq, const int32_t **row_set,
                       const lora_set_t **sets);

/* Loads the adapter at path for base model m. Returns 0 and *out, or -1
 * with a message in err naming the key, tensor or shape that does not fit
 * (wrong general.type / adapter.type, another architecture, a tensor the
 * base lacks, A/B shapes that do not match the base matrix or each other,
 * rank 0 or above LORA_MAX_RANK, an unsupported type, A without B). */
int lora_load(const char *path, const model_t *m, lora_t **out, char *err, size_t errlen);

/* The pair of layer l, projection p, or NULL when that matrix is not adapted. */
static inline const lowrank_t *lora_pair(const lora_t *a, int l, enum lora_proj p)
{
    const lowrank_t *lr = &a->pairs[(size_t)l * LORA_N_PROJ + p];
    return lr->rank > 0 ? lr : NULL;
}

/* Bytes the adapter holds (its A and B floats). */
size_t lora_bytes(const lora_t *a);

/* Another reference to a (returned); lora_free drops it. */
lora_t *lora_ref(lora_t *a);

/* Drops the caller's reference and NULLs *a; the last one frees. NULL-safe. */
void lora_free(lora_t **a);

#endif
