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

#include <stdint.h>

#include "worker/model/kv_store.h"

void attention_head(const float *q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                    int kv_off, int head_dim, float scale, float softcap, float *scores, float *out);

#endif
