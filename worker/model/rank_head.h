/* rank_head.h — a reranker's scoring head: what turns one sequence's final
 * hidden state into its relevance score(s), as llama.cpp's converter writes
 * it and its rank pooling (LLAMA_POOLING_TYPE_RANK, build_pooling) reads it.
 *
 * A file is a ranker when {arch}.pooling_type is 4 (rank) and it carries
 * at least one of the head's layers (GGUF shapes are [cols, rows]):
 *
 *   cls.weight         [dim, n_hidden]   optional: h = tanh(cls.weight · x + cls.bias)
 *   cls.bias           [n_hidden]        optional (absent = 0)
 *   cls.output.weight  [in, n_out]       optional: y = cls.output.weight · h + cls.output.bias
 *                                        (in = n_hidden with cls.weight, else dim)
 *   cls.output.bias    [n_out]           optional (absent = 0)
 *
 * x is the output of the final norm (the hidden state embeddings pool) at
 * the LAST token of the sequence, whatever the family. llama.cpp reads the
 * first token ([CLS]) for its encoder-only (BERT-like) rerankers and the
 * last only for Qwen3; every family pagoda runs is a decoder with causal
 * attention, where the first position sees nothing but itself (a
 * classification head there would give every document the same score), so
 * pagoda reads the last position, as Hugging Face's *ForSequenceClassification
 * does for decoder models. A family whose row in MODEL_ARCH_TABLE has
 * rank_last_softmax (Qwen3-Reranker: cls.output holds the lm_head rows of
 * "yes" and "no", in that order) has its outputs softmaxed. The relevance
 * score is output 0: a raw logit for a classification head, P(yes) =
 * sigmoid(l_yes - l_no) for Qwen3.
 *
 * The head is small (at most dim·n_hidden + n_hidden·n_out weights), held
 * dequantized in floats owned by the head; scores are computed in double.
 * Read-only after loading: any number of threads may score at once.
 */
#ifndef PAGODA_WORKER_RANK_HEAD_H
#define PAGODA_WORKER_RANK_HEAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/gguf.h"
#include "worker/model/arch.h"

#define RANK_POOLING_TYPE 4      /* llama.cpp's {arch}.pooling_type for rank */
#define RANK_HEAD_MAX_OUT 64     /* cls.output rows accepted (labels) */

typedef struct rank_head {
    int32_t dim;                 /* input: the model's hidden size */
    int32_t n_hidden;            /* rows of cls.weight; 0 = no cls layer */
    float *cls_w;                /* (n_hidden, dim) or NULL */
    float *cls_b;                /* (n_hidden) or NULL */
    int32_t n_out;               /* rows of cls.output.weight; 0 = no output layer */
    float *out_w;                /* (n_out, n_hidden or dim) or NULL */
    float *out_b;                /* (n_out) or NULL */
    int32_t n_scores;            /* outputs per sequence: n_out, or n_hidden without cls.output */
    bool softmax;                /* softmax over the outputs */
} rank_head_t;

/* The head of the model in g (architecture row fam, hidden size dim,
 * pooling_type as written, -1 when absent). Returns 1 with *out (free with
 * rank_head_free), 0 with *out NULL when the file is no ranker (pooling
 * not 4, or no head tensor), -1 with a message in err for a head whose
 * tensors have the wrong shape or type or non-finite values. */
int rank_head_load(const gguf_t *g, const model_arch_info_t *fam, int32_t dim, int32_t pooling_raw,
                   rank_head_t **out, char *err, size_t errlen);

void rank_head_free(rank_head_t **h);

/* The head over x (dim floats): n_scores floats into out. out[0] is the
 * relevance score. */
void rank_head_apply(const rank_head_t *h, const float *x, float *out);

#endif
