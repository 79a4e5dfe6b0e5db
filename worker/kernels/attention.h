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

/* Most query vectors (rows × heads) one AVX-512 tile holds, and the largest
 * head_dim it takes (stack scratch: head_dim × 16 floats of transposed K). */
#define ATT_TILE_MAX_VECS 64
#define ATT_TILE_MAX_HEAD_DIM 256

/* The paths of attention_tile (chosen at run time from CPUID). */
typedef enum {
    ATT_PATH_AUTO = 0, /* the best the CPU has */
    ATT_PATH_PORTABLE, /* attention_group row by row, whatever it runs */
    ATT_PATH_AVX2,     /* the same (attention_group's AVX2 kernels) */
    ATT_PATH_AVX512,   /* the tile kernel: AVX-512 F/BW/DQ/VL (cpu_has_avx512_vnni) */
} att_path_t;

/* Attention of a tile of query rows of ONE sequence (prefill): n_rows rows
 * that all start at position t0, row r attending positions [t0, t1[r]),
 * each with the n_q query heads that share the kv head at kv_off. Row r's
 * head h reads q + r*q_ld + h*head_dim and writes out + r*q_ld +
 * h*head_dim; scores is scratch of max(n_q, min(n_rows * n_q,
 * ATT_TILE_MAX_VECS)) rows of scores_ld >= max_r t1[r] - t0 floats.
 *
 * On AVX-512 (F16/F32 K/V, head_dim a multiple of 16, <= 256) the tile's
 * vectors (row, head) are computed together: per 16 positions the K slices
 * are converted and transposed once (position u in lane u) and every
 * vector's 16 scores come from broadcasts of its query; the softmax is
 * softmax_avx2's; per V vector load and conversion six vectors' outputs
 * (64 floats each per pass) are fed. Every (row, head) gets the bits
 * attention_head gives it on AVX2 (each score is the same eight partial
 * FMA chains and the same reduction, one position per lane; each output
 * the same FMA per position in order), which attention_head_ref defines.
 * Otherwise (no AVX-512, Q8_0 K/V, other head sizes) row by row through
 * attention_group: its bits as well. */
void attention_tile(const float *q, size_t q_ld, int n_rows, int n_q, const kv_store_t *kv, int layer,
                    const int32_t *bt, int t0, const int *t1, int kv_off, int head_dim, float scale, float softcap,
                    float *scores, size_t scores_ld, float *out);

/* The path attention_tile takes now (never ATT_PATH_AUTO). */
att_path_t attention_tile_path(void);

/* Test hook: make attention_tile take path p (ATT_PATH_AUTO: the CPU's
 * best again). 0 ok, -1 the CPU lacks it. Not thread-safe against running
 * attention. */
int attention_tile_set_path(att_path_t p);

/* Scalar reference of the vector paths' arithmetic (attention_head and
 * attention_group on AVX2, attention_row, attention_tile on AVX2 and
 * AVX-512), one (row, head), F32/F16 K/V, head_dim a multiple of 8:
 *   score  a_j = Σ_c fma over i = 8c + j (c in order, from 0), j < 8;
 *          s = (((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))) * scale
 *   softcap: positions in whole groups of eight (from t0) by vmath_tanh8's
 *          operations, the rest by tanhf
 *   exp    e^(s - max): whole groups of eight by vmath_exp8's operations
 *          (fmaf, nearbyintf), summed per lane j = (t - t0) % 8 in order
 *          and reduced as above; the rest by expf, added in order
 *   out_i  = (Σ_t fma(e_t, v_t[i], ·) in order, from 0) * (1 / sum)
 * The portable path (no AVX2) is attend_plain, whose sums run in plain
 * order: not these bits. scores: t1 - t0 floats of scratch. Slow; for
 * tests. */
void attention_head_ref(const float *q, const kv_store_t *kv, int layer, const int32_t *bt, int t0, int t1,
                        int kv_off, int head_dim, float scale, float softcap, float *scores, float *out);

#endif
