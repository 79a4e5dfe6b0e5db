/* ggml_type.h — tensor element types (ggml numbering) and the facts about
 * them that need no kernel: name, elements per block, bytes per block.
 *
 * This is the header kernels include for `enum ggml_type`; it knows nothing
 * about the GGUF container (common/text/gguf.h) or about how a type is
 * computed with (worker/kernels/quant.h and qblock.h: dequantize, int8 and
 * packed paths). The block structs these sizes describe are in
 * worker/kernels/qblock.h.
 */
#ifndef PAGODA_TEXT_GGML_TYPE_H
#define PAGODA_TEXT_GGML_TYPE_H

#include <stdbool.h>
#include <stdint.h>

/* Tensor element types (ggml numbering). Only those listed in
 * ggml_type_supported() can be loaded; others are refused by name. */
enum ggml_type {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_Q8_K = 15,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_COUNT = 40
};

/* Type facts: elements per block (1 for F32/F16/BF16, 32 for Q4_0/Q8_0,
 * 256 for K-quants) and bytes per block; 0 for unknown types. */
uint32_t ggml_type_block_elems(uint32_t type);
uint32_t ggml_type_block_bytes(uint32_t type);
const char *ggml_type_name(uint32_t type); /* "F32", "Q4_K", ... or "unknown" */
bool ggml_type_supported(uint32_t type);   /* F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K */

#endif
