/* matmul.h — Y = X · Wᵀ for one weight matrix kept in its file format.
 *
 * Every projection of the forward pass (Q, K, V, O, gate, up, down, output)
 * is one call here over all rows of the step batch:
 *
 *     X  (n_rows, in)    float, row-major, contiguous
 *     W  (out, in)       one row per output feature, each row stored in the
 *                        weight's ggml type (F32, F16, BF16, Q8_0, Q4_0,
 *                        Q4_K, Q5_K, Q6_K) exactly as in the GGUF mmap
 *     Y  (n_rows, out)   float, row-major, contiguous (overwritten)
 *
 * Paths (matmul.c):
 *   - int8 kernels (matmul_use_int8, worker/kernels/qgemm.h) for Q8_0, Q4_0, Q4_K,
 *     Q5_K, Q6_K when turned on; a weight with a `packed` copy (Q8_0 packed
 *     at load by model_pack_int8: 8-column panels, quants transposed in
 *     groups of 4, f16 scales after them; layout in qgemm.h) is read from
 *     it by the AVX2 kernels, skipping the per-call decode + transpose;
 *   - up to 64 rows, float: an AVX2 kernel of 4×3 register tiles reading
 *     W rows in place (F32 straight from the mmap, other types decoded a
 *     tile of rows at a time into a float scratch). No packing: at these
 *     row counts sgemm spent half its time copying W. Every output is one
 *     8-lane FMA accumulation over k in order, so a row's result does not
 *     depend on the other rows (bit for bit);
 *   - more rows: cblas_sgemm on the mmap (F32) or on dequantized tiles.
 *   - BF16 weights when matmul_use_bf16 is on (AVX512-BF16 CPUs): any row
 *     count up to its max_rows, X rounded to bf16, vdpbf16ps on W in place.
 *
 * Threads: matmul_run splits W's output rows into chunks (about 8 per
 * thread, 16-row aligned, claimed dynamically so a descheduled thread delays the others by
 * one chunk only) over n_threads OpenMP threads, each calling
 * single-threaded OpenBLAS. matmul_new therefore calls
 * openblas_set_num_threads(1), which is process-wide: two busy-waiting
 * thread pools on the same cores slow each other down badly.
 *
 * Ownership: matmul_new() allocates the scratch once (one tile per thread);
 * matmul_run() never allocates. matmul_free() releases it and NULLs the
 * pointer. One matmul_t must not be used by two callers at once.
 */
#ifndef PAGODA_WORKER_MATMUL_H
#define PAGODA_WORKER_MATMUL_H

#include <stddef.h>
#include <stdint.h>

/* A weight matrix as it lies in the file. */
typedef struct matmul_weight {
    uint32_t type;        /* enum ggml_type */
    int64_t rows;         /* out features (GGUF ne[1]) */
    int64_t cols;         /* in features (GGUF ne[0]); multiple of the type's block */
    size_t row_bytes;     /* bytes of one stored row */
    const uint8_t *data;  /* rows * row_bytes bytes, in the mmap (not owned) */
    const void *packed;   /* NULL, or qgemm_pack() of data (Q8_0; not owned,
                           * model_pack_int8 makes them): the int8 kernels on
                           * AVX2 read it instead of data; every other path
                           * (scalar, float, embedding rows) reads data */
} matmul_weight_t;

/* Bytes of w as stored (rows * row_bytes; 0 for a weight the model does not
 * have, whose fields are all zero). */
static inline size_t matmul_weight_bytes(const matmul_weight_t *w)
{
    return (size_t)w->rows * w->row_bytes;
}

typedef struct matmul matmul_t;

/* Scratch for weights with at most max_cols columns. n_threads is used for
 * the dequantization loops (OpenMP). */
matmul_t *matmul_new(int64_t max_cols, int n_threads);
void matmul_free(matmul_t **mm);

/* Integer kernels (worker/kernels/qgemm.h): for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K
 * weights, quantize each X row to 8 bits and multiply in int8 with AVX2.
 * Several times faster than dequantize+sgemm, at ~0.5% relative error per
 * dot product (the activation quantization llama.cpp also uses); results of
 * a row stay independent of the other rows in the batch. Off by default;
 * matmul_use_int8(mm, max_rows) turns it on for batches of up to max_rows
 * rows (scratch allocated here, once). 0 ok, -1 bad max_rows. */
int matmul_use_int8(matmul_t *mm, int max_rows);

/* BF16 weights through AVX512-BF16 (vdpbf16ps) for batches of up to
 * max_rows rows: X is rounded to bf16 once per call (round to nearest
 * even) and multiplied with W read in place, 32 products per instruction.
 * Not exact: |y − Σ w·x| ≤ 2^-8 · Σ|w·x| per output (observed ~1e-3
 * relative), against float rounding on the exact path. A row's result
 * still does not depend on the batch (bit for bit). Off by default; only
 * where the CPU has AVX512-BF16 and PAGODA_ISA does not force a lower
 * path (qgemm_isa_default() is avx512vnni or amx). Weights whose cols are not a
 * multiple of 32 keep the exact path. Returns 0 on, 1 not available on this
 * CPU (the exact path stays), -1 bad max_rows. */
int matmul_use_bf16(matmul_t *mm, int max_rows);

/* Y (n_rows, w->rows) = X (n_rows, w->cols) · Wᵀ.
 * Returns  0 ok
 *         -1 bad arguments (w->cols > max_cols, n_rows < 0) or a type
 *            the dequantizer does not know; Y is then unspecified. */
int matmul_run(matmul_t *mm, const matmul_weight_t *w, const float *x, int n_rows, float *y);

/* Several weights with the same input (Q/K/V, gate/up): ys[i] (n_rows,
 * ws[i]->rows) = X · ws[i]ᵀ for i < n (1 ≤ n ≤ MATMUL_MAX_MULTI), equal to n
 * matmul_run() calls but in one parallel region (one wake-up and barrier
 * instead of n). All ws[i]->cols must be equal. Returns as matmul_run(). */
#define MATMUL_MAX_MULTI 8
int matmul_run_multi(matmul_t *mm, const matmul_weight_t *const *ws, int n, const float *x, int n_rows,
                     float *const *ys);

/* Two-phase use, for callers that run their own OpenMP region (the forward
 * pass computes Q/K/V and attention head by head in one region):
 *   matmul_prepare(mm, x, n_rows, cols) once, on one thread, before the
 *     region (quantizes X for the int8 kernels when they are on);
 *   matmul_run_range(mm, w, x, n_rows, n0, n1, y, thread) from any thread:
 *     Y[:, n0:n1) of Y (n_rows, w->rows) = X · W[n0:n1)ᵀ, with the x that
 *     was prepared (w->cols == cols). n0 a multiple of 16, n1 a multiple of
 *     16 or w->rows; thread (0 <= thread < n_threads of matmul_new) picks
 *     the scratch. Calls with different threads and disjoint ranges may run
 *     concurrently; nothing inside opens a parallel region. The values equal
 *     matmul_run's (bit for bit up to 64 rows; more rows go through sgemm
 *     on blocks of another width, equal to float rounding).
 * 0 ok, -1 bad arguments. */
int matmul_prepare(matmul_t *mm, const float *x, int n_rows, int64_t cols);
int matmul_run_range(matmul_t *mm, const matmul_weight_t *w, const float *x, int n_rows, int64_t n0, int64_t n1,
                     float *y, int thread);

/* Dequantizes rows [row0, row0+n) of W into dst (n, w->cols) floats.
 * 0 ok, -1 unsupported type or rows out of range. Used for embedding
 * lookups and by tests. */
int matmul_weight_rows(const matmul_weight_t *w, int64_t row0, int64_t n, float *dst);

#endif
