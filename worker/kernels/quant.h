/* quant.h — ggml weight formats: the quant-type traits table, dequantize to
 * float, quantize from float.
 *
 * The traits table (quant_traits) has one row per type the worker computes
 * with, and is the only list of them: a type is supported (the loader takes
 * its tensors, quant_dequantize/quant_quantize convert it, qgemm multiplies
 * it, qgemm_pack packs it) exactly when its row says so. A row holds:
 *     name, block elements, block bytes   (ggml_type.h's geometry; quant.c
 *                                          _Static_asserts the block struct
 *                                          of qblock.h against it)
 *     dequantize, quantize                 blocks to / from float
 *     int8                                 qgemm's kernel family (qgemm.c)
 *     packed                               qgemm_pack's layout (qgemm.h for
 *                                          Q8_0, qkpack.h for the others)
 *     file_type                            general.file_type of a model that
 *                                          is all this type (pagoda-mkmodel)
 * Adding a format: its block struct in qblock.h, its row functions and its
 * row in quant.c, and kernels in qgemm.c / qkpack.c if it gets an int8 or
 * packed path that no existing family serves (a type ggml_type.h lacks also
 * needs its line there). The KV cache's quantized types read the same rows.
 *
 * A row of n elements of a ggml type is n / block_elems consecutive blocks
 * (see ggml_type_block_elems/_bytes in common/text/ggml_type.h). Block layouts (little-endian,
 * "f16" = IEEE half; declared as packed C structs in qblock.h, which every
 * reader of these formats uses instead of byte offsets):
 *
 *   F32   f32                                   1 element
 *   F16   f16                                   1 element
 *   BF16  upper 16 bits of an f32               1 element
 *   Q8_0  f16 d; i8 q[32]                       x[i] = d * q[i]
 *   Q4_0  f16 d; u8 qs[16]                      x[i]    = d * ((qs[i] & 15) - 8)
 *                                               x[i+16] = d * ((qs[i] >> 4) - 8)   (i < 16)
 *   Q4_K  f16 d; f16 dmin; u8 scales[12]; u8 qs[128]      (256 elements, 8 sub-blocks of 32)
 *         sub-block j has a 6-bit scale sc[j] and 6-bit min m[j] packed in scales[]:
 *           k < 4: sc[k]   = scales[k] & 63,  m[k] = scales[k+4] & 63
 *                  sc[k+4] = (scales[k+8] & 15) | (scales[k] >> 6) << 4
 *                  m[k+4]  = (scales[k+8] >> 4) | (scales[k+4] >> 6) << 4
 *         chunk c (0..3) of 64 elements: qs[32c+l] low nibble is element 64c+l
 *         (sub-block 2c), high nibble element 64c+32+l (sub-block 2c+1);
 *         x = (d*sc[j]) * q - (dmin*m[j])
 *   Q5_K  f16 d; f16 dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *         as Q4_K plus a 5th bit: element 32j+l of sub-block j has bit j of qh[l]
 *         as bit 4 of q (q in 0..31)
 *   Q6_K  u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
 *         half h (0,1) of 128 elements, l in 0..31, element e = 128h + 32r + l
 *         for r = 0..3: low 4 bits = ql[64h + l + 32(r&1)] (low nibble for r<2,
 *         high nibble for r>=2), high 2 bits = (qh[32h + l] >> 2r) & 3;
 *         x[e] = (d * scales[e/16]) * (q - 32)
 *
 * The dequantizers reproduce ggml's float arithmetic (same operation order,
 * float32), so results are bit-identical to ggml and the `gguf` Python
 * package. The Q8_0/Q4_0 quantizers follow ggml's reference rounding, so
 * they reproduce llama-quantize's bytes; the K-quant quantizers are simpler
 * (one pass, no search) and only promise bounded error.
 *
 * No function allocates; the caller owns every buffer.
 */
#ifndef PAGODA_WORKER_QUANT_H
#define PAGODA_WORKER_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/ggml_type.h"

/* The family of qgemm's int8 kernels that multiplies a type (qgemm.c: one
 * scalar reference, AVX2 fill and direct paths per family). */
typedef enum quant_int8 {
    QUANT_INT8_NONE = 0, /* no int8 path: matmul converts to f32 / bf16 */
    QUANT_INT8_Q8_0,     /* signed 8-bit quants, one f16 scale per 32 */
    QUANT_INT8_Q4_0,     /* 4-bit quants offset by 8, one f16 scale per 32 */
    QUANT_INT8_Q6_K,     /* 6-bit quants offset by 32, an int8 scale per 16 */
    QUANT_INT8_Q45_K,    /* 4/5-bit affine: 6-bit scale and min per 32 (Q4_K, Q5_K) */
} quant_int8_t;

/* The layout qgemm_pack packs a type into at load (qgemm.h). */
typedef enum quant_pack {
    QUANT_PACK_NONE = 0, /* not packed: the kernels read the file's blocks */
    QUANT_PACK_Q8_0,     /* qgemm's own: int8 quants transposed, f16 scales */
    QUANT_PACK_Q4_0,     /* qkpack.h's 4-6 bit panels, one kernel kind each */
    QUANT_PACK_Q4_K,
    QUANT_PACK_Q5_K,
    QUANT_PACK_Q6_K,
} quant_pack_t;

/* One row of the traits table. Rows are static: never freed. */
typedef struct quant_traits {
    uint32_t type;        /* enum ggml_type */
    const char *name;     /* "Q4_K", as ggml_type_name */
    uint32_t block_elems; /* elements per block */
    uint32_t block_bytes; /* bytes per block = sizeof its block struct */
    /* n_blocks blocks at src to n_blocks · block_elems floats at dst, and back */
    void (*dequantize)(const void *src, float *dst, int64_t n_blocks);
    void (*quantize)(const float *src, void *dst, int64_t n_blocks);
    quant_int8_t int8;    /* qgemm's kernel family; NONE: qgemm refuses the type */
    quant_pack_t packed;  /* qgemm_pack's layout; NONE: not packed */
    int32_t file_type;    /* general.file_type of an all-this-type model (llama_ftype) */
} quant_traits_t;

/* The row of `type`, NULL when the worker does not compute with it. */
const quant_traits_t *quant_traits(uint32_t type);
/* Row i (0, 1, ... in type number order) of the table, NULL past the last:
 * for listing the supported types. */
const quant_traits_t *quant_traits_at(size_t i);
/* quant_traits(type) != NULL: the tensor types the model loader accepts
 * (the name is older than the table; the loader and tests use it). */
bool ggml_type_supported(uint32_t type);

/* Bytes of a row of n elements; 0 when the type is unknown or n is not a
 * multiple of its block size (or n < 0). */
size_t quant_row_bytes(uint32_t type, int64_t n);

/* Decodes n elements of `type` from src into dst (n floats).
 * Returns 0 ok, -1 unsupported type or n not a multiple of the block. */
int quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n);

/* Encodes n floats into src-type blocks at dst (quant_row_bytes(type, n) bytes).
 * Supported: every type of the traits table.
 * Returns 0 ok, -1 unsupported type or n not a multiple of the block. */
int quant_quantize(uint32_t type, const float *src, void *dst, int64_t n);

/* quant_traits(type) != NULL (every row does both). */
bool quant_can_dequantize(uint32_t type);
bool quant_can_quantize(uint32_t type);

/* IEEE half / bfloat16 conversions. fp32→fp16 and fp32→bf16 round to
 * nearest even; NaN stays NaN (quiet), overflow gives ±inf. */
float quant_fp16_to_fp32(uint16_t h);
uint16_t quant_fp32_to_fp16(float f);
float quant_bf16_to_fp32(uint16_t h);
uint16_t quant_fp32_to_bf16(float f);

#endif
