/* ggml_type.h — the ggml tensor element types: their numbers in a GGUF
 * file, their names and their block geometry.
 *
 * This is what the file format says a type *is*, for every type the GGUF
 * reader accepts (it checks each tensor's size against it), whether or not
 * pagoda computes with it. What pagoda *does* with a type (dequantize,
 * quantize, int8 kernels, packing at load) is the worker's traits table,
 * quant_traits() in worker/kernels/quant.h: a type is supported exactly
 * when it has a row there, and that table _Static_asserts its block structs
 * (worker/kernels/qblock.h) against the sizes below.
 *
 * GGML_TYPE_TABLE is the one list, a row per type:
 *     X(NAME, number, elements per block, bytes per block)
 * It generates the enum (GGML_TYPE_NAME = number), the compile-time
 * geometry constants GGML_NAME_BLOCK_ELEMS / GGML_NAME_BLOCK_BYTES (for
 * _Static_assert) and the runtime lookups below. A type not listed here is
 * refused by the GGUF reader as unknown. Block layouts (little-endian, f16 =
 * IEEE half bits):
 *   F32 / F16 / BF16  one element
 *   Q4_0  d + 16 nibble bytes                      = 18 bytes / 32
 *   Q4_1  d, m + 16                                = 20 bytes / 32
 *   Q5_0  d + qh[4] + qs[16]                       = 22 bytes / 32
 *   Q5_1  d, m + qh[4] + qs[16]                    = 24 bytes / 32
 *   Q8_0  d + 32 int8                              = 34 bytes / 32
 *   Q8_1  d, s + 32 int8                           = 36 bytes / 32
 *   Q2_K  scales[16] qs[64] d dmin                 = 84 bytes / 256
 *   Q3_K  hmask[32] qs[64] scales[12] d            = 110 bytes / 256
 *   Q4_K  d dmin scales[12] qs[128]                = 144 bytes / 256
 *   Q5_K  d dmin scales[12] qh[32] qs[128]         = 176 bytes / 256
 *   Q6_K  ql[128] qh[64] scales[16] d              = 210 bytes / 256
 *   Q8_K  f32 d, qs[256], i16 bsums[16]            = 292 bytes / 256
 *
 * No state, no allocation; any thread. Shared by both processes (the
 * gateway reads GGUF metadata for its tokenizers).
 */
#ifndef PAGODA_COMMON_TEXT_GGML_TYPE_H
#define PAGODA_COMMON_TEXT_GGML_TYPE_H

#include <stdbool.h>
#include <stdint.h>

/* X(NAME, ggml number, elements per block, bytes per block) */
#define GGML_TYPE_TABLE(X)   \
    X(F32, 0, 1, 4)          \
    X(F16, 1, 1, 2)          \
    X(Q4_0, 2, 32, 18)       \
    X(Q4_1, 3, 32, 20)       \
    X(Q5_0, 6, 32, 22)       \
    X(Q5_1, 7, 32, 24)       \
    X(Q8_0, 8, 32, 34)       \
    X(Q8_1, 9, 32, 36)       \
    X(Q2_K, 10, 256, 84)     \
    X(Q3_K, 11, 256, 110)    \
    X(Q4_K, 12, 256, 144)    \
    X(Q5_K, 13, 256, 176)    \
    X(Q6_K, 14, 256, 210)    \
    X(Q8_K, 15, 256, 292)    \
    X(BF16, 30, 1, 2)

/* Tensor element types (ggml numbering). GGML_TYPE_COUNT bounds the
 * numbers ggml has used; not every number below it is a type. */
enum ggml_type {
#define GGML_TYPE_ENUM_(name, num, elems, bytes) GGML_TYPE_##name = num,
    GGML_TYPE_TABLE(GGML_TYPE_ENUM_)
#undef GGML_TYPE_ENUM_
    GGML_TYPE_COUNT = 40
};

/* GGML_<NAME>_BLOCK_ELEMS / _BLOCK_BYTES: the table's geometry as constants. */
enum ggml_type_geometry {
#define GGML_TYPE_GEOM_(name, num, elems, bytes) \
    GGML_##name##_BLOCK_ELEMS = elems, GGML_##name##_BLOCK_BYTES = bytes,
    GGML_TYPE_TABLE(GGML_TYPE_GEOM_)
#undef GGML_TYPE_GEOM_
};

/* Elements per block (1 for F32/F16/BF16, 32 for Q4_0/Q8_0, 256 for
 * K-quants) and bytes per block; 0 for types not in the table. */
uint32_t ggml_type_block_elems(uint32_t type);
uint32_t ggml_type_block_bytes(uint32_t type);
/* "F32", "Q4_K", ... (the table's NAME) or "unknown". */
const char *ggml_type_name(uint32_t type);
/* The type called `name` (case-insensitive, as ggml_type_name spells it):
 * 0 and *type set, -1 when no row has that name. */
int ggml_type_from_name(const char *name, uint32_t *type);

#endif
