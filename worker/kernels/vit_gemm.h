/* vit_gemm.h — the vision encoder's float GEMM: Y = X · Wᵀ for F16 and F32
 * weight matrices, and the register-blocked block product its attention
 * shares (worker/kernels/vit_attn.c).
 *
 * Why its own kernel: an encoder image is hundreds to thousands of rows
 * (SmolVLM's 512 px tile: 1024), so every matrix is a large GEMM. Through
 * matmul.c's float path (W dequantized a tile of rows at a time, then
 * single-threaded sgemm on each thread's share of W's rows) OpenBLAS
 * repacked all of X for every share and ran its AVX2 (Haswell) kernel:
 * ~20% of an encode was that packing. Here W is packed instead — 32
 * output columns by KC inputs at a time, F16 converted to F32 once per
 * call (vcvtph2ps), so no F32 copy of the weights is kept — and X is read
 * in place, 12 rows at a time broadcast against two 16-lane vectors of
 * the panel: 24 AVX-512 accumulators.
 *
 * Numerics: every output is one fused multiply-add chain over k in order,
 * starting from 0 (y = fma(x_k, w_k, y)), whatever the row count, the
 * thread count, the row's place in its block or the ISA: the AVX-512
 * kernel and the portable one (fmaf) give the same bits
 * (tests/worker/kernels/test_vit_gemm.c), and an image's rows are its
 * rows alone in any batch. Against exact arithmetic the usual bound of a
 * float sum: |y − Σ x·w| ≤ K · 2⁻²⁴ · Σ |x·w| (F16 weights are exact in
 * F32).
 *
 * Memory: nothing is allocated; vit_gemm takes caller-owned scratch of
 * vit_gemm_scratch(n_threads) floats. Threads: n_threads OpenMP threads
 * over chunks of VIT_GEMM_NC output columns, claimed dynamically.
 */
#ifndef PAGODA_WORKER_KERNELS_VIT_GEMM_H
#define PAGODA_WORKER_KERNELS_VIT_GEMM_H

#include <stdbool.h>
#include <stddef.h>

#include "worker/kernels/matmul.h"

/* The vector paths of the encoder's kernels. */
typedef enum vit_isa {
    VIT_ISA_SCALAR = 0, /* portable C: vit_gemm's and vit_attn's references */
    VIT_ISA_AVX2,       /* AVX2 + FMA + F16C: vit_attn's 4-query kernel; vit_gemm runs the portable loop */
    VIT_ISA_AVX512,     /* AVX-512 F/BW/DQ/VL: vit_gemm's 12×32 kernel, vit_attn on it */
} vit_isa_t;

/* The best path this CPU runs, lowered by PAGODA_ISA as the int8 kernels
 * are (qgemm_isa_default(): avx2 or avxvnni → VIT_ISA_AVX2, scalar →
 * VIT_ISA_SCALAR), so one variable forces every kernel down. */
vit_isa_t vit_isa_default(void);
/* true when this CPU runs isa. */
bool vit_isa_available(vit_isa_t isa);
const char *vit_isa_name(vit_isa_t isa);

/* Columns of one packed panel, rows of the register block, output columns
 * per thread chunk, inputs per packed block. */
#define VIT_GEMM_NR 32
#define VIT_GEMM_MR 12
#define VIT_GEMM_NC 128
#define VIT_GEMM_KC 256

/* C (m, nc) = [C +] A (m, kc) · B (kc, nc), nc <= VIT_GEMM_NR:
 *   a[i·lda + k], b[k·ldb + j] (only columns j < nc are read), c[i·ldc + j];
 * accumulate false starts each output from 0, true from the C given (an
 * FMA chain continued over blocks of k is the same chain). isa
 * VIT_ISA_AVX512 takes the vector kernel (the caller checked
 * vit_isa_available), any other the portable loop. */
void vit_gemm_block(vit_isa_t isa, const float *a, size_t lda, int m, const float *b, size_t ldb, int kc, float *c,
                    size_t ldc, int nc, bool accumulate);

/* true when vit_gemm takes w (F32 or F16). */
bool vit_gemm_supported(const matmul_weight_t *w);
size_t vit_gemm_scratch(int n_threads);
/* Y (n_rows, w->rows) = X (n_rows, w->cols) · Wᵀ for a vit_gemm_supported
 * w. scratch: vit_gemm_scratch(n_threads) floats. */
void vit_gemm(vit_isa_t isa, const matmul_weight_t *w, const float *x, int n_rows, float *y, float *scratch,
              int n_threads);

#endif
