/* quant.h — ggml weight formats: dequantize to float, quantize from float.
 *
 * A row of n elements of a ggml type is n / block_elems consecutive blocks
 * (see ggml_type_block_elems/_bytes in gguf.h). Block layouts (little-endian,
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

/* Bytes of a row of n elements; 0 when the type is unknown or n is not a
 * multiple of its block size (or n < 0). */
size_t quant_row_bytes(uint32_t type, int64_t n);

/* Decodes n elements of `type` from src into dst (n floats).
 * Returns 0 ok, -1 unsupported type or n not a multiple of the block. */
int quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n);

/* Encodes n floats into src-type blocks at dst (quant_row_bytes(type, n) bytes).
 * Supported: F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K.
 * Returns 0 ok, -1 unsupported type or n not a multiple of the block. */
int quant_quantize(uint32_t type, const float *src, void *dst, int64_t n);

bool quant_can_dequantize(uint32_t type);
bool quant_can_quantize(uint32_t type);

/* IEEE half / bfloat16 conversions. fp32→fp16 and fp32→bf16 round to
 * nearest even; NaN stays NaN (quiet), overflow gives ±inf. */
float quant_fp16_to_fp32(uint16_t h);
uint16_t quant_fp32_to_fp16(float f);
float quant_bf16_to_fp32(uint16_t h);
uint16_t quant_fp32_to_bf16(float f);

#endif
