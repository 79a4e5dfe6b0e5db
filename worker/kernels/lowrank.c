/* lowrank.c — a LoRA pair's update of some batch rows (see lowrank.h). */
#include "worker/kernels/lowrank.h"

#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

#include "common/text/ggml_type.h"

static int lowrank_check(const lowrank_t *lr, int n)
{
    if (n < 0 || lr->rank < 1 || lr->a.type != GGML_TYPE_F32 || lr->b.type != GGML_TYPE_F32 ||
        lr->a.rows != lr->rank || lr->b.cols != lr->rank)
        return -1;
    return 0;
}

int lowrank_add(matmul_t *mm, const lowrank_t *lr, float s, const float *x, int64_t ldx, const int32_t *rows,
                int n, float *y, int64_t ldy, const lowrank_scratch_t *scr)
{
    if (lowrank_check(lr, n) != 0)
        return -1;
    if (n == 0)
        return 0;
    const int64_t in = lr->a.cols, out = lr->b.rows;
    /* xg (n, in) = X[rows] */
    for (int j = 0; j < n; j++)
        memcpy(scr->xg + (size_t)j * in, x + (size_t)rows[j] * ldx, (size_t)in * sizeof(float));
    /* t (n, r) = xg · Aᵀ;  d (n, out) = t · Bᵀ */
    if (matmul_run(mm, &lr->a, scr->xg, n, scr->t) != 0 || matmul_run(mm, &lr->b, scr->t, n, scr->d) != 0)
        return -1;
    /* Y[rows[j]] += s · d[j] */
    for (int j = 0; j < n; j++) {
        float *yr = y + (size_t)rows[j] * ldy;
        const float *dr = scr->d + (size_t)j * out;
        for (int64_t i = 0; i < out; i++)
            yr[i] += s * dr[i];
    }
    return 0;
}

void lowrank_add_ref(const lowrank_t *lr, float s, const float *x, int64_t ldx, const int32_t *rows, int n,
                     float *y, int64_t ldy)
{
    if (lowrank_check(lr, n) != 0)
        return;
    const int64_t in = lr->a.cols, out = lr->b.rows, r = lr->rank;
    const float *A = (const float *)lr->a.data, *B = (const float *)lr->b.data;
    double *t = xmalloc((size_t)r * sizeof(double));
    for (int j = 0; j < n; j++) {
        const float *xr = x + (size_t)rows[j] * ldx;
        for (int64_t k = 0; k < r; k++) {
            double acc = 0;
            for (int64_t i = 0; i < in; i++)
                acc += (double)xr[i] * A[k * in + i];
            t[k] = acc;
        }
        float *yr = y + (size_t)rows[j] * ldy;
        for (int64_t o = 0; o < out; o++) {
            double acc = 0;
            for (int64_t k = 0; k < r; k++)
                acc += t[k] * B[o * r + k];
            yr[o] = (float)((double)yr[o] + (double)s * acc);
        }
    }
    free(t);
}
