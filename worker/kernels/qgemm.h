/* qgemm.h — matrix multiply with ggml-quantized weights, in integer arithmetic.
 *
 *   Y (n_rows × n_out, f32, row-major) = X (n_rows × n_in, f32, row-major) · Wᵀ
 *
 * W is (n_out × n_in): n_out rows of n_in elements each, every row stored as
 * quant_row_bytes(type, n_in) bytes of ggml blocks (formats in quant.h), rows
 * back to back — exactly a GGUF 2-D tensor with ne[0] = n_in, ne[1] = n_out.
 * Supported types: those whose traits row (quant.h) names an int8 kernel
 * family — today Q8_0, Q4_0, Q4_K, Q5_K, Q6_K (F16/BF16/F32 are not handled
 * here: convert them and use sgemm).
 *
 * How (qgemm.c has the details):
 *   1. every row of X is quantized on the fly into blocks of 32: int8 q[32]
 *      (round to nearest even of x / d, d = max|x| / 127, d kept as f32) plus
 *      the two 16-element sums of q (for the offset / min terms of Q4_0,
 *      Q4_K, Q5_K, Q6_K);
 *   2. output columns go 8 at a time (8 rows of W). A "panel" holds the 8
 *      rows transposed so that one 256-bit register holds 4 consecutive
 *      weights of each of the 8 columns; every X row (4 at a time, sharing
 *      each weight register) runs against it. A W packed at load
 *      (qgemm_pack, below) is already a sequence of panels: the kernel reads
 *      them in place, for every n_rows (Q4_0 / K-quant packed panels keep
 *      4-6 bits per weight and have their own kernels, qkpack.h, with
 *      AVX2, AVX-VNNI and AVX512-VNNI flavours). Otherwise small batches of Q8_0
 *      (n_rows ≤ 8) and Q4_0 (≤ 4) use the "direct" AVX2 path: each W block
 *      is multiplied in place against the X block and the 8 columns' partial
 *      sums are folded with a horizontal-add tree; larger batches decode and
 *      transpose the 8 rows into a per-thread panel first ("fill"), so the
 *      fill cost is shared by the whole batch;
 *   3. products use _mm256_maddubs_epi16 / _mm256_madd_epi16: each (row,
 *      column, 32-block) dot product is an exact int32 sum, then scaled and
 *      accumulated in f32.
 *
 * Speed (AMD EPYC Zen 3, 1 thread, weights in L3, 2048×768): Q8_0 1 row
 * 63 us (26 GB/s of weights), 32 rows ≈ 100 GFLOP/s (int8 ops counted as
 * 2 per multiply-add); Q4_K/Q6_K 1 row ≈ 290 us (the panel path: decode
 * dominated), 32 rows ≈ 95 GFLOP/s. dequantize + cblas_sgemm is 10-30×
 * slower below 32 rows. Packed Q4_0 / K-quants (test_qkpack's benchmark,
 * Zen 5, loaded box): Q4_K 1/8/32/128 rows 198/323/766/2596 us unpacked
 * against 31/149/575/2337 packed with AVX2, 22/66/246/1003 with
 * AVX512-VNNI. Packed Q8_0 (test_qgemm_pack's benchmark, same
 * shape): 1/2/4/8 rows 42/68/116/224 us against 63/98/168/323 direct,
 * 9/16/32 rows 259/442/879 us against 403/586/1030 with the fill; from
 * DRAM (32000×768) 1 row 1.04 ms (25 GB/s) against 1.17 direct.
 * VNNI (AMD Zen 5, 1 thread, packed 2048×768, loaded machine): 1/8/32/256
 * rows avx2 34/158/618/8177 us, avxvnni 30/105/394/3133, avx512vnni
 * 27/64/229/1793 (docs/BENCH_LOG.md). Prefill at the 1.1B shapes, 512
 * rows, avx512vnni (QGEMM_PACK_BENCH=w1b test_qgemm_pack): ~300 GOPS per
 * CPU second with the 8 × 16 tiles, ~400-500 with the 3 × 64 ones, against
 * ~870 for a loop of vpdpbusd alone (docs/FORWARD.md). The wide Q4_0 /
 * Q4_K / Q5_K tiles (qkpack.h) against the 8 × 16 ones, 2 threads, 320
 * rows of 2048 × 5632: 6772 → 6141, 7303 → 6947, 8093 → 6720 µs; below
 * qkpack_wide_pays they lose (docs/BENCH_LOG.md, session 12).
 *
 * Accuracy. The weights are used exactly as quant_dequantize() would decode
 * them (up to float rounding of scale products); the only approximation is
 * the 8-bit quantization of X, the same approach llama.cpp uses (its Q8_0 /
 * Q8_K activation blocks), with a per-32 f32 scale. Per element the error is
 * at most d/2 = max|x_block| / 254, so for every output
 *     |y - Σ w·x| ≤ Σ_blocks (max|x_block| / 254) · Σ_block |w|  + float rounding
 * (≈ 2^-24 · n_in/32 relative to Σ|w·x|). Statistically the rounding error
 * is uniform in ±d/2, so the expected relative error is ≈ rms(d)/√12/rms(x):
 * measured ‖y − y_ref‖/‖y_ref‖ = 0.5 % for Gaussian activations and 1.1 %
 * when 1 % of them are 20σ outliers (each matches the prediction within a
 * few %); tests/worker/kernels/test_qgemm.c checks the bound and the prediction.
 * Non-finite X (inf, NaN) in a block gives NaN in every output of that row.
 *
 * Determinism. The value of Y[r][c] depends only on X row r and W row c: the
 * per-block integer sums are exact and the f32 accumulation runs over blocks
 * in increasing order, independent of n_rows, of which other rows are in the
 * batch, of the thread count, of the path (direct, filled or packed
 * panel) and of the ISA. The AVX2 and the scalar paths are bit-identical
 * (tested), a row computed alone equals the same row computed inside a
 * batch (batch invariance, tested), and a packed W gives the same bits as
 * the file's (tests/worker/kernels/test_qgemm_pack.c).
 *
 * Threading. qgemm() runs an OpenMP parallel region (num_threads = the
 * thread count fixed at qgemm_ctx_new: omp_get_max_threads() then) over
 * units of 8-64 output columns (64: packed Q8_0 on AVX-512 from 16 rows,
 * packed Q4_0 / Q4_K / Q5_K where the wide tiles pay), a contiguous range of units per thread
 * with stealing from the back of the others' ranges (worksteal.h): each
 * thread's prefetch of the next panels reads its own next unit, and a
 * thread that is descheduled or slow to wake delays the others by one
 * unit; X quantization is split over rows when X is large, done on
 * the calling thread before the region otherwise (saves a barrier). A
 * context must not be used by two qgemm() calls at the same time; use one
 * context per calling thread, and do not call it from inside another
 * OpenMP parallel region. On a machine whose cores are shared with other
 * busy processes, libgomp's default spin-waiting makes 2-thread regions
 * collapse (measured: 100× slower); pagoda's programs bound the spin
 * (worker/wait_policy.h: GOMP_SPINCOUNT=1000, read when libgomp loads, so it
 * must be in the environment before exec). Likewise OpenBLAS's pthread build spins
 * after each call: interleaving it with qgemm on the same cores costs time.
 *
 * Memory. The context owns all scratch: X quantized (max_rows × max_in bytes
 * plus 8 bytes per 32-block) and one panel per thread (≈ 13-15 bytes per
 * input element per thread: 8 columns × (1 byte + scale data)).
 * qgemm() never allocates. Packed weights belong to whoever packed them
 * (the model: model_pack_int8).
 */
#ifndef PAGODA_WORKER_QGEMM_H
#define PAGODA_WORKER_QGEMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct qgemm_ctx qgemm_ctx_t;

/* Instruction set used by a context's kernels. Every path gives the same
 * bits as the scalar one (tested); they differ only in speed. The VNNI
 * paths change only the kernels of packed weights (qgemm_pack: Q8_0 here,
 * Q4_0 / K-quants in qkpack.h); all other work (X quantization, unpacked
 * weights) runs the AVX2 code there. */
typedef enum {
    QGEMM_ISA_AUTO = 0,   /* qgemm_isa_default() */
    QGEMM_ISA_SCALAR,     /* portable C, any CPU */
    QGEMM_ISA_AVX2,       /* needs avx2 and f16c */
    QGEMM_ISA_AVXVNNI,    /* AVX2 + AVX-VNNI: packed weights with 256-bit vpdpbusd
                           * (one instruction per 4 products instead of
                           * sign + maddubs + madd + add) */
    QGEMM_ISA_AVX512VNNI, /* AVX2 + AVX-512 F/BW/DQ/VL/VNNI: packed weights with
                           * 512-bit vpdpbusd (Q8_0: over two panels, 16
                           * output columns, and up to 8 X rows per register
                           * tile; from 16 X rows 3 rows × 64 columns, 8
                           * panels; qkpack: two groups of one panel) */
    QGEMM_ISA_AMX,        /* AVX512VNNI + AMX-TILE/AMX-INT8 (and the process's
                           * tile permission, cpu_has_amx_int8): batches of
                           * ≥ 16 X rows run 16 rows at a time as tile
                           * products (tdpbssd / tdpbsud) against 8-column
                           * panels (filled, or a packed Q8_0 in place),
                           * the last n_rows % 16 rows and smaller batches
                           * the AVX512VNNI kernels (qgemm_amx.inc) */
} qgemm_isa_t;

/* Context for calls with n_rows ≤ max_rows and n_in ≤ max_in (both > 0).
 * Allocates all scratch once (aborts on out of memory like xmalloc).
 * Returns NULL only when max_rows or max_in is not positive. Starts with
 * QGEMM_ISA_AUTO. Free with qgemm_ctx_free. */
qgemm_ctx_t *qgemm_ctx_new(int max_rows, int64_t max_in);

/* Frees the context and its scratch, sets *c to NULL. NULL / *c NULL ok. */
void qgemm_ctx_free(qgemm_ctx_t **c);

/* Threads of later calls, 1 <= n_threads <= QGEMM_MAX_THREADS; grows the
 * per-thread panel scratch when n_threads exceeds what is allocated (so it
 * may allocate: call it at setup, not concurrently with other calls).
 * 0 ok, -1 out of range. */
#define QGEMM_MAX_THREADS 1024
int qgemm_set_threads(qgemm_ctx_t *c, int n_threads);

/* Selects the kernels of context c. Returns 0 ok, -1 when the CPU lacks the
 * ISA or isa is not one of the enum (the context keeps its previous
 * choice). For tests and benchmarks. */
int qgemm_set_isa(qgemm_ctx_t *c, qgemm_isa_t isa);

/* The ISA c actually runs (never QGEMM_ISA_AUTO), and its name
 * ("scalar", "avx2", "avxvnni", "avx512vnni", "amx"; "auto" for AUTO). */
qgemm_isa_t qgemm_get_isa(const qgemm_ctx_t *c);
const char *qgemm_isa_name(qgemm_isa_t isa);

/* true when this CPU runs isa (CPUID and XGETBV via common/cpu.h, cached);
 * SCALAR and AUTO always. */
bool qgemm_isa_available(qgemm_isa_t isa);

/* The ISA QGEMM_ISA_AUTO means: the environment variable PAGODA_ISA when
 * it names an ISA this CPU runs ("scalar", "avx2", "avxvnni",
 * "avx512vnni", "amx"; "auto" or unset: no override), otherwise the best
 * available in the order amx, avx512vnni, avxvnni, avx2, scalar. An
 * unknown or unavailable name is reported once on stderr (for amx with
 * the reason, cpu_amx_why_not) and ignored. Read at the first call and
 * cached for the life of the process. */
qgemm_isa_t qgemm_isa_default(void);

/* For tests: on, the AMX tile kernel runs with its tile operations
 * emulated in portable C (worker/kernels/amx_tile.h) on any CPU, for
 * batches of ≥ 16 rows, whatever ISA c has (the rest of the work, and the
 * rows after the last full 16, run c's ISA). Same bits as every other
 * path; slow. Off again with false. */
void qgemm_set_amx_emulated(qgemm_ctx_t *c, bool on);

/* Packed Q4_0 / Q4_K / Q5_K W on AVX512-VNNI run the wide tiles (qkpack.h)
 * where qkpack_wide_pays says they beat the 16-column kernel (large
 * batches: prefill), unpacking a W row in ranges of at most kblocks blocks
 * of 32 (default QKPACK_WIDE_KBLOCKS, or the row when shorter). For tests
 * (every edge on small shapes) and tuning: kblocks a positive multiple of
 * 8, at most the context's default; always: the wide tiles for every batch
 * of ≥ 16 rows of those types. Returns 0, or -1 (unchanged) otherwise. */
int qgemm_set_wide_kblocks(qgemm_ctx_t *c, int64_t kblocks, bool always);

/* true when this CPU runs the AVX2 kernels (avx2 + f16c), the ones that
 * read packed weights. */
bool qgemm_avx2_available(void);

/* true for the weight types qgemm() handles: the traits row's int8 column
 * (quant.h) is not QUANT_INT8_NONE. */
bool qgemm_supported(uint32_t type);

/* y = x · wᵀ, shapes as above: w has n_out rows of quant_row_bytes(type,
 * n_in) bytes, x is n_rows × n_in floats, y is n_rows × n_out floats
 * (overwritten, must not overlap x or w). n_in must be a multiple of the
 * type's block (32 for Q8_0/Q4_0, 256 for K-quants).
 * Returns:
 *    0  ok (n_rows == 0 or n_out == 0 is ok and writes nothing)
 *   -1  unsupported type, n_in not a multiple of the block, n_in > max_in,
 *       n_rows > max_rows, or a negative / zero size where one is required
 *       (n_in ≤ 0, n_out < 0, n_rows < 0); y is untouched. */
int qgemm(qgemm_ctx_t *c, uint32_t type, const void *w, int64_t n_out, int64_t n_in,
          const float *x, int n_rows, float *y);

/* Several matrices with the same input: mats[i].y (n_rows × mats[i].n_out)
 * = x · mats[i].wᵀ for i < n_mats (≤ QGEMM_MAX_MATS), as n_mats qgemm()
 * calls would give, bit for bit, but X is quantized once and all panels
 * share one parallel region (one wake-up and one barrier instead of n_mats).
 * The forward pass uses it for Q/K/V and for gate/up. Types may differ per
 * matrix; n_in must suit every type. Returns 0 ok, -1 as qgemm() (any
 * matrix failing the checks; nothing is written then). */
#define QGEMM_MAX_MATS 8
typedef struct qgemm_mat {
    uint32_t type;   /* ggml type, qgemm_supported() */
    const void *w;   /* n_out rows of quant_row_bytes(type, n_in) bytes (not owned) */
    int64_t n_out;   /* rows of w, columns of y (≥ 0) */
    float *y;        /* (n_rows, n_out) f32, overwritten (not owned) */
    const void *packed; /* optional qgemm_pack(type, w, n_out, n_in) (not owned),
                         * read instead of w by the AVX2 kernels; NULL: none.
                         * w must stay valid (the scalar kernels read it, and
                         * the AVX2 ISA reads a Q6_K w instead of its packing
                         * above 32 X rows, where the fill is faster). A
                         * packing of another type or shape fails the call. */
} qgemm_mat_t;
int qgemm_multi(qgemm_ctx_t *c, const qgemm_mat_t *mats, int n_mats, int64_t n_in, const float *x,
                int n_rows);

/* Two-phase use, for callers that run their own OpenMP region (the forward
 * pass computes Q/K/V and attention head by head in one region):
 *   qgemm_quantize(c, x, n_rows, n_in): X into the context's scratch, on
 *     the calling thread (n_in a multiple of 32; 0 ok, -1 bad sizes);
 *   qgemm_cols(c, type, w, n_out, n_in, n_rows, col0, col1, y, thread):
 *     y[r][col0..col1) for the X of the last qgemm_quantize (or qgemm /
 *     qgemm_multi) call, whose n_rows and n_in must be passed again; y is
 *     (n_rows, n_out) as in qgemm(). col0 a multiple of 8, col1 a multiple
 *     of 8 or n_out; thread (0 <= thread < the larger of
 *     omp_get_max_threads() at qgemm_ctx_new and the last qgemm_set_threads)
 *     picks the panel scratch. Calls with different threads
 *     and disjoint column ranges may run concurrently; no OpenMP inside.
 *     Results equal qgemm()'s bit for bit. 0 ok, -1 bad arguments or no
 *     matching quantized X. */
int qgemm_quantize(qgemm_ctx_t *c, const float *x, int n_rows, int64_t n_in);
int qgemm_cols(qgemm_ctx_t *c, uint32_t type, const void *w, int64_t n_out, int64_t n_in, int n_rows,
               int64_t col0, int64_t col1, float *y, int thread);
/* qgemm_cols for one qgemm_mat_t (type, w, n_out, y and the optional
 * packed W); same rules and returns. */
int qgemm_mat_cols(qgemm_ctx_t *c, const qgemm_mat_t *m, int64_t n_in, int n_rows, int64_t col0, int64_t col1,
                   int thread);

/* Packed weights: W decoded and transposed once (at model load) into the
 * panel layout the AVX2 kernel reads, so calls skip the per-call panel fill
 * (about 1/5 of a 32-row Q8_0 product; most of a K-quant one). Q8_0 as
 * below; Q4_0, Q4_K, Q5_K, Q6_K with the same header and panels in the
 * layout of qkpack.h (4-6 bits per weight, scales pre-decoded). One buffer,
 * 64-byte aligned, packed size = 64 + n_panels · panel_bytes, about the
 * size of W:
 *
 *   header (64 bytes): magic u32 "QGPK", type u32, n_out i64, n_in i64,
 *                      panel_bytes u64, total bytes u64, zero padding
 *   panel ip (0 <= ip < n_panels = ceil(n_out / 8)), at 64 + ip·panel_bytes,
 *   output columns 8ip .. 8ip+7 (columns ≥ n_out are zero), nb = n_in / 32:
 *     q   nb × 256 bytes: int8 weight 4k+i (k < 8, i < 4) of block b of
 *         column c at q[256b + 32k + 4c + i] (one aligned 32-byte load =
 *         4 weights of each of the 8 columns), the file's quants unchanged
 *     dh  nb × 8 f16 (16 bytes per block): scale of block b of column c at
 *         dh[8b + c], the file's f16 bits unchanged (f16 rather than f32:
 *         the same bytes as the file, and converting 8 of them with one
 *         vcvtph2ps per block costs nothing measurable)
 *     zero padding to panel_bytes = round_up(nb · 272, 64)
 * Quants and scales are split per panel (not interleaved per block) so every
 * 32-byte load of q is aligned: 272-byte blocks would put half of them
 * across cache lines.
 *
 * qgemm_packed_size(type, n_out, n_in): bytes of the packing, 0 when it is
 *   refused: type whose traits row (quant.h) has no packed layout (today
 *   Q8_0/Q4_0/Q4_K/Q5_K/Q6_K have one), n_out < 1 or > 2^34,
 *   n_in < 32 or > 2^21 or not a multiple of the type's block (32; 256
 *   for K-quants).
 * qgemm_pack(type, w, n_out, n_in, n_threads): a new packing of w (n_out
 *   rows of quant_row_bytes(type, n_in) bytes), built by up to n_threads
 *   OpenMP threads (≤ 0: 1); NULL when refused as above or w is NULL;
 *   aborts on out of memory (xmalloc). Reads every byte of w once; w is not
 *   needed by the AVX2 kernels afterwards. Owned by the caller: free with
 *   qgemm_pack_free (sets *packed to NULL; NULL / *packed NULL ok).
 * qgemm_pack_to(type, w, n_out, n_in, dst, n_threads): the same into the
 *   caller's dst (64-byte aligned, qgemm_packed_size bytes; e.g. one arena
 *   for a whole model, on huge pages). 0 ok, -1 refused (as above, or dst
 *   NULL or misaligned; dst untouched).
 * Results with a packing are bit-identical to those without (the kernel
 * reads the same integers and converts the same f16 scales). */
size_t qgemm_packed_size(uint32_t type, int64_t n_out, int64_t n_in);
void *qgemm_pack(uint32_t type, const void *w, int64_t n_out, int64_t n_in, int n_threads);
int qgemm_pack_to(uint32_t type, const void *w, int64_t n_out, int64_t n_in, void *dst, int n_threads);
void qgemm_pack_free(void **packed);

#endif
