/* qkpack.h — Q4_0, Q4_K, Q5_K and Q6_K weights repacked for the int8 kernels.
 *
 * qgemm (qgemm.h) multiplies int8-quantized activations by quantized weights
 * 8 output columns ("a panel") at a time. For Q8_0 a packed panel is the
 * quants transposed (qgemm_pack); for the 4-6 bit formats here the file's
 * blocks are too costly to decode per call (6-bit scale unpacking, nibble and
 * high-bit shuffles, per-row scale tables: the fill was most of a K-quant
 * product). qgemm_pack therefore packs these types once, at load, into the
 * panel layout below, which keeps the weights at 4-6 bits (no expansion to
 * bytes) with the scales already decoded, and the kernels of qkpack.c read
 * it with a couple of vector ops per 64 weights.
 *
 * Panel layout (8 output columns c = 0..7 of W; nb = n_in / 32 blocks of 32
 * elements; the panel is ceil(nb / 8) "chunks" of 8 blocks = one K-quant
 * super-block per column; q(b, e, c) is the raw quant of element e (0..31)
 * of block b of column c, as quant.h decodes it: 0..15 Q4_0/Q4_K, 0..31
 * Q5_K, 0..63 Q6_K). Within a chunk, block j (0..7) = b mod 8; "group" g
 * (0..7) of a block = its elements 4g..4g+3:
 *
 *   qs  [128 j + 32 g + 4 c + i] (g < 4, i < 4) = q(b, 4g+i, c) & 15
 *           | (q(b, 16+4g+i, c) & 15) << 4
 *       so one 32-byte load holds group g (low nibbles) and group g+4 (high
 *       nibbles) of all 8 columns                              1024 bytes
 *   qh  Q5_K: [32 j + 4c + i] bit k = bit 4 of q(b, 4k+i, c)    256 bytes
 *       Q6_K: [64 j + 32 p + 4c + i] bits 2t, 2t+1 = bits 4, 5 of
 *             q(b, 16p + 4t + i, c)                              512 bytes
 *   sc  Q4_K/Q5_K: int8 [8 j + c] = 6-bit scale of sub-block j     64 bytes
 *       Q6_K: int8 [16 j + 8 h + c] = scale of elements 16h..16h+15 128 bytes
 *   mm  Q4_K/Q5_K: u8 [8 j + c] = 6-bit min of sub-block j         64 bytes
 *   d   Q4_K/Q5_K: f16 d[c] then f16 dmin[c]                       32 bytes
 *       Q6_K: f16 d[c]                                   16 (+16 pad) bytes
 *       Q4_0: f16 [8 j + c] = d of block b                         128 bytes
 *   chunk bytes: Q4_0 1152, Q4_K 1184, Q5_K 1440, Q6_K 1696 (all multiples of
 *   32, so every qs/qh load is aligned): 4.5 / 4.625 / 5.625 / 6.625 bits
 *   per weight against the file's 4.5 / 4.5 / 5.5 / 6.5625.
 * A panel is padded to a multiple of 64 bytes; columns ≥ n_out and blocks ≥
 * nb (Q4_0 with nb not a multiple of 8) are zero.
 *
 * Arithmetic: per (X row, column, block) the kernels compute the same exact
 * integers as qgemm's scalar kernel (I = Σ scale·q·x over the block, M = the
 * min / offset term) and finish them with the same float operations in the
 * same order, so every ISA gives the bits of the scalar path, and a row's
 * output never depends on the other rows of the batch.
 *
 * Ownership: nothing here allocates; the caller owns every buffer.
 */
#ifndef PAGODA_WORKER_QKPACK_H
#define PAGODA_WORKER_QKPACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Kernel flavours (the caller checks the CPU: common/cpu.h). */
typedef enum {
    QKPACK_AVX2 = 0,     /* avx2 + f16c: maddubs/madd */
    QKPACK_AVXVNNI,      /* + AVX-VNNI: 256-bit vpdpbusd */
    QKPACK_AVX512VNNI,   /* + AVX-512 F/BW/VL/VNNI: 512-bit vpdpbusd over two panels */
} qkpack_isa_t;

/* true for the types packed here: those whose traits row (quant.h) names
 * one of this file's panel kinds (Q4_0, Q4_K, Q5_K, Q6_K). */
bool qkpack_supported(uint32_t type);

/* Bytes of one packed panel of a W with n_in columns, a multiple of 64;
 * 0 when the type is not supported or n_in is not a positive multiple of
 * its block (32 for Q4_0, 256 for the K-quants). */
size_t qkpack_panel_bytes(uint32_t type, int64_t n_in);

/* Packs the nc (1..8) W rows at w, w + rb, ... (rb = quant_row_bytes(type,
 * n_in)) into one panel at dst (qkpack_panel_bytes bytes, 32-byte aligned;
 * fully written, columns ≥ nc zero). type and n_in as qkpack_panel_bytes
 * accepts (the caller checks). */
void qkpack_pack_panel(uint32_t type, const uint8_t *w, size_t rb, int nc, int64_t n_in, uint8_t *dst);

/* Y rows 0..n_rows-1, columns 0..nc-1 (y + r·ldy + c) = X · the columns
 * of panel (columns 0-7) and panel2 (columns 8-15; NULL: none, nc ≤ 8), for
 * the int8 X of qgemm (xq (n_rows, n_in) int8 row-major, xd (n_rows,
 * n_in/32) f32 block scales, xs (n_rows, n_in/32) int16 pairs of the
 * block's half sums). AVX512-VNNI runs both panels in one 16-column kernel
 * (a lone panel as twice itself). Prefetches the n_next bytes at next (the
 * following panels) on the way. The CPU must have isa. */
void qkpack_panel_run(qkpack_isa_t isa, uint32_t type, const uint8_t *panel, const uint8_t *panel2, int64_t n_in,
                      const int8_t *xq, const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy,
                      int nc, const uint8_t *next, size_t n_next);

/* ---- wide tiles: prefill batches on AVX512-VNNI -------------------------------
 *
 * For many X rows (a prefill step) the 16-column kernel broadcasts one
 * activation dword per vpdpbusd and unpacks every block again for each
 * tile of 8 rows. The wide path instead unpacks a unit of QKPACK_WIDE_PANELS
 * consecutive panels (64 columns) once per call into a per-thread scratch,
 * as bytes (one 0..63 quant per byte, the 16 columns of a panel pair per
 * 64-byte vector) with the per-block scales already as the kernel uses them,
 * then runs every row over it in tiles of up to 3 rows × 64 columns, where
 * each broadcast activation dword feeds 4 vpdpbusd. A W row longer than kblocks
 * blocks is unpacked and run in ranges of kblocks (a multiple of 8), the
 * accumulators of a range parked in y between ranges, so the scratch stays
 * in L2 while the rows go by. Per lane the integers and the float step are
 * those of the 16-column kernel (hence of the scalar reference): same bits. */
#define QKPACK_WIDE_PANELS 8
/* scratch bytes per block of a range: 2048 of quants, 512 of scales */
#define QKPACK_WIDE_BLOCK_BYTES (2048 + 512)
/* kblocks of qkpack_wide_run by default: 128 blocks (4096 inputs), 320 KB
 * of scratch, well inside a 1-2 MiB L2 beside the rows' stream */
#define QKPACK_WIDE_KBLOCKS 128

/* true for the types the wide tiles take: Q4_0, Q4_K, Q5_K. (Q6_K keeps
 * the 16-column kernel: its two half-block chains per row and column, each
 * scaled by vpmulld, left a 2-row wide tile 23% slower than it at 128 rows
 * of 2048 × 2048 on Zen 5.) */
bool qkpack_wide_supported(uint32_t type);

/* When the wide tiles beat the 16-column kernel (measured on Zen 5, 2
 * threads, the 1.1B shapes 5632 × 2048 and 2048 × 5632, QKPACK_BENCH_ROWS
 * of test_qkpack): the 16-column kernel streams all of X once per panel
 * pair and a unit of 8 panels once, so the wide tiles pay once X (n_rows ·
 * n_in int8) no longer fits the 1 MiB L2 beside the weights, and their
 * per-call unpack costs 5-10% below that. Q5_K, whose unpack per 8-row tile
 * (the fifth bits) the wide tiles do once, also pays from 128 rows. */
#define QKPACK_WIDE_X_BYTES (1 << 20)
#define QKPACK_WIDE_Q5K_ROWS 128
bool qkpack_wide_pays(uint32_t type, int n_rows, int64_t n_in);

/* Y rows 0..n_rows-1, columns 0..nc-1 (nc ≤ 64; y + r·ldy + c) = X · the
 * 64 columns of the 8 panels at panel, panel + pstride, ... (X as for
 * qkpack_panel_run). scratch: kblocks · QKPACK_WIDE_BLOCK_BYTES bytes,
 * 64-byte aligned; kblocks a positive multiple of 8. The CPU must have
 * AVX512-VNNI and type be one qkpack_wide_supported takes. */
void qkpack_wide_run(uint32_t type, const uint8_t *panel, size_t pstride, int64_t n_in, const int8_t *xq,
                     const float *xd, const int32_t *xs, int n_rows, float *y, int64_t ldy, int nc, uint8_t *scratch,
                     int64_t kblocks);

#endif
