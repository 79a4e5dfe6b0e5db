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

#include "worker/kernels/kv_store.h"

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

/* Every head of one row: query head h (0..n_head-1) at q + h*head_dim
 * attends with kv head h / (n_head / n_kv_head) (kv_off = that * head_dim)
 * and writes out + h*head_dim; scores is scratch of n_head rows of
 * scores_ld >= t1 - t0 floats. The AVX2 path computes the scores position
 * by position over the whole K vector (a K/V vector is contiguous, a head's
 * slice of it is not: walking one head at a time reads scattered 2-line
 * pieces), prefetching K ahead and each position's V vector on the way,
 * then each kv head's softmax and values as attention_group does; without
 * AVX2 it is attention_row_by_group. Every head's result has the bits
 * attention_head gives it (same operations per (head, position) in the
 * same order), on either path. n_kv_head must divide n_head. */
void attention_row(const float *q, int n_head, int n_kv_head, const kv_store_t *kv, int layer, const int32_t *bt,
                   int t0, int t1, int head_dim, float scale, float softcap, float *scores, size_t scores_ld,
                   float *out);

/* The same heads and bits as attention_row, kv head by kv head through
 * attention_group: scores is scratch of only n_head / n_kv_head rows (for
 * contexts where n_head rows of scratch would be too large). */
void attention_row_by_group(const float *q, int n_head, int n_kv_head, const kv_store_t *kv, int layer,
                            const int32_t *bt, int t0, int t1, int head_dim, float scale, float softcap,
                            float *scores, size_t scores_ld, float *out);

#endif
