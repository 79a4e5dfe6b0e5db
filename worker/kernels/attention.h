/* attention.h — one (row, head) of softmax attention over a paged KV cache.
 *
 * The forward pass (worker/model/forward.c) calls this for every (row, query
 * head) of a step; it owns the choice of positions (causal, sliding window)
 * and of the kv head. The cache layout is kv_store.h's: position t of a
 * sequence lives in physical block bt[t / block_size], slot t % block_size;
 * a head's slice starts at element kv_off of the K/V vector there.
 *
 *   s_t   = (q · k_t) * scale                         t0 <= t < t1
 *   s_t   = softcap * tanh(s_t / softcap)             when softcap > 0 (Gemma 2)
 *   out   = Σ_t softmax(s)_t v_t                      (head_dim floats)
 *
 * AVX2 (chosen at run time, head_dim a multiple of 8) or portable C; either
 * way a head's result depends only on its inputs, never on the batch.
 * K/V elements are read as F32 or F16 per kv->type.
 *
 * Memory: nothing is allocated; `scores` is caller scratch of at least
 * t1 - t0 floats, `out` head_dim floats. Nothing is owned.
 * Preconditions (asserted): 0 <= t0 < t1, the block table covers t1 - 1.
 */
#ifndef PAGODA_WORKER_KERNELS_ATTENTION_H
#define PAGODA_WORKER_KERNELS_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model/kv_store.h"

void attention_head(const float *q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                    int kv_off, int head_dim, float scale, float softcap, float *scores, float *out);

/* attention_head for the n_q query heads that share one kv head (grouped-
 * query attention): head h's query at q + h*head_dim, its output at
 * out + h*head_dim, its scores in scores + h*scores_ld (scratch of n_q rows
 * of scores_ld >= t1 - t0 floats). The AVX2 path reads each K/V element
 * once per 4 heads instead of once per head; every head's result has the
 * bits attention_head gives it (same operations in the same order), on
 * either path. */
void attention_group(const float *q, int n_q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                     int kv_off, int head_dim, float scale, float softcap, float *scores, size_t scores_ld,
                     float *out);

#endif
