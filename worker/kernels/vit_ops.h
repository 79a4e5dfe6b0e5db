/* vit_ops.h — the row-wise operations of a vision encoder besides its
 * matmuls and attention: LayerNorm, bias add, the FFN activations.
 *
 * Each picks an AVX2 loop at run time (common/cpu.h) or runs the portable
 * one; a row's result depends only on that row. Tolerances against the
 * portable forms (tests/worker/kernels/test_vit_ops.c): the activations
 * use vmath.h's e^x / tanh (~1e-6 relative, ~1e-7 absolute near 0), the
 * norm's sums are double either way (only their order differs).
 * Nothing is allocated or owned.
 */
#ifndef PAGODA_WORKER_KERNELS_VIT_OPS_H
#define PAGODA_WORKER_KERNELS_VIT_OPS_H

enum vit_act {
    VIT_ACT_GELU = 0,        /* 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³))) */
    VIT_ACT_SILU = 1,        /* x · sigmoid(x) */
    VIT_ACT_GELU_QUICK = 2,  /* x · sigmoid(1.702 x) */
};

/* y (d) = (x - mean) / sqrt(var + eps) * w + b; mean and var in double. */
void vit_layer_norm_row(const float *x, float *y, const float *w, const float *b, int d, float eps);
/* y (d) += b (d). */
void vit_add(float *y, const float *b, int d);
/* x (n) = act(x) in place. */
void vit_act(enum vit_act a, float *x, int n);
/* The portable forms (libm), for the tests. */
void vit_layer_norm_row_ref(const float *x, float *y, const float *w, const float *b, int d, float eps);
void vit_act_ref(enum vit_act a, float *x, int n);

#endif
