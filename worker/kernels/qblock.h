/* qblock.h — the ggml quantized block formats as packed C structs.
 *
 * One struct per block type, byte for byte as in a GGUF file (little-endian;
 * "f16" fields hold IEEE half bits; convert with quant_fp16_to_fp32). The
 * structs are packed (alignment 1), so a pointer to one may point anywhere in
 * a mmapped tensor: GGUF tensors are 32-byte aligned but a 34-byte Q8_0 block
 * is not. Every struct's size is checked here against the block bytes of
 * common/text/ggml_type.h's table (GGML_<NAME>_BLOCK_BYTES), and the
 * traits table in quant.c asserts the same of each row.
 *
 * What the fields mean (dequantization, quant.h has the same in prose):
 *
 *   Q8_0  x[i] = d · qs[i]                                       32 elements
 *   Q4_0  x[i] = d · ((qs[i] & 15) − 8), x[i+16] = d · ((qs[i] >> 4) − 8)
 *   Q4_K  256 elements, 8 sub-blocks j of 32 with 6-bit scale sc_j and min m_j
 *         (qblock_k_scale_min); chunk c (0..3): qs[32c + l] low nibble is
 *         element 64c + l (sub-block 2c), high nibble element 64c + 32 + l;
 *         x = (d · sc_j) · q − dmin · m_j
 *   Q5_K  as Q4_K, plus bit j of qh[l] is bit 4 of element 32j + l
 *   Q6_K  256 elements; half h, r = 0..3, l < 32, element e = 128h + 32r + l:
 *         low 4 bits in ql[64h + 32(r & 1) + l] (low nibble for r < 2, high
 *         nibble otherwise), high 2 bits (qh[32h + l] >> 2r) & 3;
 *         x[e] = (d · scales[e / 16]) · (q − 32)
 *
 * Nothing here allocates or owns memory.
 */
#ifndef PAGODA_WORKER_QBLOCK_H
#define PAGODA_WORKER_QBLOCK_H

#include <stdint.h>

#include "common/text/ggml_type.h"

#define QBLOCK_QK 32   /* elements of a Q8_0 / Q4_0 block */
#define QBLOCK_QKK 256 /* elements of a K-quant super-block */
_Static_assert(QBLOCK_QK == GGML_Q8_0_BLOCK_ELEMS && QBLOCK_QK == GGML_Q4_0_BLOCK_ELEMS, "32-element blocks");
_Static_assert(QBLOCK_QKK == GGML_Q4_K_BLOCK_ELEMS && QBLOCK_QKK == GGML_Q6_K_BLOCK_ELEMS, "256-element super-blocks");

typedef struct __attribute__((packed)) {
    uint16_t d;    /* f16 scale */
    int8_t qs[32]; /* quants */
} qblock_q8_0_t;
_Static_assert(sizeof(qblock_q8_0_t) == GGML_Q8_0_BLOCK_BYTES, "Q8_0 block is 34 bytes");

typedef struct __attribute__((packed)) {
    uint16_t d;     /* f16 scale */
    uint8_t qs[16]; /* element i in the low nibble of qs[i], i + 16 in the high one */
} qblock_q4_0_t;
_Static_assert(sizeof(qblock_q4_0_t) == GGML_Q4_0_BLOCK_BYTES, "Q4_0 block is 18 bytes");

typedef struct __attribute__((packed)) {
    uint16_t d;          /* f16 super-block scale of the sub-block scales */
    uint16_t dmin;       /* f16 super-block scale of the sub-block mins */
    uint8_t scales[12];  /* 8 six-bit scales and 8 six-bit mins, qblock_k_scale_min */
    uint8_t qs[128];     /* 4-bit quants, two sub-blocks per 32 bytes */
} qblock_q4_k_t;
_Static_assert(sizeof(qblock_q4_k_t) == GGML_Q4_K_BLOCK_BYTES, "Q4_K block is 144 bytes");

typedef struct __attribute__((packed)) {
    uint16_t d;          /* as Q4_K */
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[32];      /* bit j of qh[l]: bit 4 of element 32j + l */
    uint8_t qs[128];     /* low 4 bits, as Q4_K */
} qblock_q5_k_t;
_Static_assert(sizeof(qblock_q5_k_t) == GGML_Q5_K_BLOCK_BYTES, "Q5_K block is 176 bytes");

typedef struct __attribute__((packed)) {
    uint8_t ql[128];     /* low 4 bits of the quants */
    uint8_t qh[64];      /* high 2 bits, 4 quants per byte */
    int8_t scales[16];   /* one per 16 elements */
    uint16_t d;          /* f16 super-block scale */
} qblock_q6_k_t;
_Static_assert(sizeof(qblock_q6_k_t) == GGML_Q6_K_BLOCK_BYTES, "Q6_K block is 210 bytes");

/* The 6-bit scale *sc and min *m (0..63) of sub-block j (0..7) of a Q4_K /
 * Q5_K super-block, from its 12 scale bytes:
 *   j < 4:  sc = s[j] & 63,  m = s[j+4] & 63
 *   j >= 4: sc = (s[j+4] & 15) | (s[j-4] >> 6) << 4,  m = (s[j+4] >> 4) | (s[j] >> 6) << 4 */
static inline void qblock_k_scale_min(const uint8_t s[12], int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

/* Prefetch of a line of weights streamed from memory ahead of use. When
 * the call reads each weight once (all its X rows in one register tile, as
 * in a 1-row decode), a non-temporal hint: the line goes to L1 only, and the
 * panel being streamed does not push older lines out of L2 (measured on Zen 5,
 * 1.1B Q4_K_M, 1-row decode: +4-5 % over T0; T1 was 5 % slower). When
 * later tiles of rows read the panel again, T0, so they find it in L2. */
#define QB_PREFETCH(p, once)                                   \
    do {                                                       \
        if (once)                                              \
            _mm_prefetch((const char *)(p), _MM_HINT_NTA);     \
        else                                                   \
            _mm_prefetch((const char *)(p), _MM_HINT_T0);      \
    } while (0)

#endif
