/* vit_attn.h — full (non-causal) softmax attention of a vision encoder:
 * every patch attends to every patch, per head, over contiguous rows.
 *
 *   q, k, v  (n, ld) floats, head h in columns [h·hd, (h+1)·hd)
 *   out      (n, ld) floats: out_h = softmax(q_h k_hᵀ · scale) v_h
 *
 * The text model's attention kernels (attention.h) read a paged KV cache
 * with causal ranges; this one reads the encoder's own Q/K/V matrices.
 * vit_attn picks by vit_isa_default() (vit_gemm.h): on AVX-512, blocks of
 * 12 queries whose scores (against 32-key panels of a transposed copy of
 * K) and value sums run on vit_gemm_block's 12 × 32 register block; on
 * AVX2 (hd a multiple of 8), 4 queries against 16 keys at a time from a
 * transposed copy of K, V summed the same way; otherwise vit_attn_ref, the
 * portable loop they are tested against (tests/worker/kernels/
 * test_vit_attn.c). Either way a query row's result depends only on q's
 * row and k, v: the same image gives the same bits wherever its rows sit
 * in a batch.
 *
 * Memory: `scratch` is caller-owned, at least vit_attn_scratch(n, ld,
 * n_threads) floats; nothing is allocated or owned. Threads: n_threads
 * OpenMP threads over (head, block of queries).
 */
#ifndef PAGODA_WORKER_KERNELS_VIT_ATTN_H
#define PAGODA_WORKER_KERNELS_VIT_ATTN_H

#include <stddef.h>

#include "worker/kernels/vit_gemm.h"

size_t vit_attn_scratch(int n, int ld, int n_threads);
void vit_attn(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd, float scale,
              float *out, float *scratch, int n_threads);
/* vit_attn on the given path (vit_attn takes vit_isa_default()); a path
 * the CPU lacks, or AVX2 with hd not a multiple of 8, steps down to the
 * next one. For the tests. */
void vit_attn_isa(vit_isa_t isa, const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd,
                  float scale, float *out, float *scratch, int n_threads);
/* The portable reference: one query row at a time, scores summed in
 * order; scratch of n_threads · n floats. */
void vit_attn_ref(const float *q, const float *k, const float *v, int n, int ld, int n_head, int hd, float scale,
                  float *out, float *scratch, int n_threads);

#endif
