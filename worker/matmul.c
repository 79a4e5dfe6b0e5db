/* matmul.c — Y = X · Wᵀ over all rows of a step batch (see matmul.h).
 *
 * F32 weights: one cblas_sgemm on the mmap, no copy.
 * Quantized weights: W is walked in tiles of tile_rows output rows; each
 * tile is dequantized (OpenMP over rows) into the float scratch and
 * multiplied with one cblas_sgemm (OpenBLAS threads) into Y's column block
 * [r0, r0+n). Dequantizing costs O(out·in) per call whatever n_rows is, the
 * same order as the GEMM itself when n_rows is small, and amortized when the
 * batch is large. */
#include "worker/matmul.h"

#include <cblas.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "worker/gguf.h"
#include "worker/quant.h"

/* Floats per dequantized tile: ~1 MiB keeps the tile cache-resident while
 * the GEMM streams X over it. */
#define MATMUL_TILE_FLOATS (256 * 1024)

struct matmul {
    int64_t max_cols;
    int64_t tile_rows;   /* output rows per dequantized tile */
    int n_threads;
    float *tile;         /* (tile_rows, max_cols) dequantized rows */
};

matmul_t *matmul_new(int64_t max_cols, int n_threads)
{
    matmul_t *mm = xcalloc(1, sizeof *mm);
    if (max_cols < 1)
        max_cols = 1;
    mm->max_cols = max_cols;
    mm->tile_rows = MATMUL_TILE_FLOATS / max_cols;
    if (mm->tile_rows < 16)
        mm->tile_rows = 16;
    mm->tile_rows -= mm->tile_rows % 16;
    mm->n_threads = n_threads > 0 ? n_threads : 1;
    mm->tile = xaligned_alloc((size_t)mm->tile_rows * (size_t)max_cols * sizeof(float));
    return mm;
}

void matmul_free(matmul_t **mm)
{
    if (!mm || !*mm)
        return;
    free((*mm)->tile);
    free(*mm);
    *mm = NULL;
}

int matmul_weight_rows(const matmul_weight_t *w, int64_t row0, int64_t n, float *dst)
{
    if (row0 < 0 || n < 0 || row0 + n > w->rows)
        return -1;
    for (int64_t r = 0; r < n; r++) {
        const uint8_t *src = w->data + (size_t)(row0 + r) * w->row_bytes;
        if (quant_dequantize(w->type, src, dst + (size_t)r * (size_t)w->cols, w->cols) != 0)
            return -1;
    }
    return 0;
}

int matmul_run(matmul_t *mm, const matmul_weight_t *w, const float *x, int n_rows, float *y)
{
    if (n_rows < 0 || w->cols > mm->max_cols)
        return -1;
    if (n_rows == 0)
        return 0;
    const int M = n_rows, K = (int)w->cols, N = (int)w->rows;

    if (w->type == GGML_TYPE_F32) {
        /* Y (M,N) = X (M,K) · W(N,K)ᵀ straight from the mmap. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K,
                    1.0f, x, K, (const float *)(const void *)w->data, K, 0.0f, y, N);
        return 0;
    }

    for (int64_t r0 = 0; r0 < N; r0 += mm->tile_rows) {
        int64_t nt = N - r0 < mm->tile_rows ? N - r0 : mm->tile_rows;
        int bad = 0;
        /* tile (nt, K) = dequant(W rows r0 .. r0+nt) */
#pragma omp parallel for num_threads(mm->n_threads) schedule(static) reduction(| : bad)
        for (int64_t r = 0; r < nt; r++) {
            const uint8_t *src = w->data + (size_t)(r0 + r) * w->row_bytes;
            if (quant_dequantize(w->type, src, mm->tile + (size_t)r * (size_t)K, K) != 0)
                bad |= 1;
        }
        if (bad)
            return -1;
        /* Y[:, r0:r0+nt] (M, nt) = X (M,K) · tileᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, (int)nt, K,
                    1.0f, x, K, mm->tile, K, 0.0f, y + r0, N);
    }
    return 0;
}
