/* lowrank.h — the low-rank update of a LoRA adapter over some rows of a batch.
 *
 * For one adapted matrix W (out, in) with factors
 *     A (r, in)    float, row-major (the file's lora_a)
 *     B (out, r)   float, row-major (the file's lora_b)
 * and the rows rows[0..n) of a batch (ascending or not, distinct), adds
 *     Y[rows[j]] += s · (X[rows[j]] · Aᵀ) · Bᵀ
 * where X (R, in) is the matrix's input and Y (R, out) its output as the
 * base matmul left it (the base product runs once for every row; each
 * adapter's update then touches its own rows only).
 *
 * lowrank_add does it in three moves through the base's kernels
 * (matmul.h, F32 weights read in place): gather X's rows into xg (n, in),
 * t (n, r) = xg · Aᵀ, d (n, out) = t · Bᵀ, then Y[rows[j]] += s · d[j].
 * Every row's result depends only on that row (matmul's float kernels are
 * row-independent up to 64 rows; above, sgemm, equal to float rounding), so
 * mixing adapters in one batch gives each row what it gets alone.
 * lowrank_add_ref is the scalar reference: plain loops, double accumulation.
 *
 * Threads: lowrank_add runs matmul's parallel regions (its n_threads).
 * Memory: the caller owns every buffer; nothing is allocated.
 */
#ifndef PAGODA_WORKER_LOWRANK_H
#define PAGODA_WORKER_LOWRANK_H

#include <stdint.h>

#include "worker/kernels/matmul.h"

typedef struct lowrank {
    int32_t rank;        /* r (0: no update) */
    float factor;        /* alpha / r, or 1 without alpha: s = scale · factor */
    matmul_weight_t a;   /* F32 (r, in) */
    matmul_weight_t b;   /* F32 (out, r) */
} lowrank_t;

/* Scratch lowrank_add needs: xg (n, in), t (n, r), d (n, out) floats. */
typedef struct lowrank_scratch {
    float *xg;
    float *t;
    float *d;
} lowrank_scratch_t;

/* Y[rows[j]] (ldy floats apart) += s · (X[rows[j]] · Aᵀ) · Bᵀ for j < n,
 * X rows ldx floats apart. mm's max_cols must cover in and r. Returns 0,
 * -1 bad arguments (n < 0, a type other than F32, shapes that disagree). */
int lowrank_add(matmul_t *mm, const lowrank_t *lr, float s, const float *x, int64_t ldx, const int32_t *rows,
                int n, float *y, int64_t ldy, const lowrank_scratch_t *scr);

/* The same in scalar code with double accumulation (tests, the reference). */
void lowrank_add_ref(const lowrank_t *lr, float s, const float *x, int64_t ldx, const int32_t *rows, int n,
                     float *y, int64_t ldy);

#endif
