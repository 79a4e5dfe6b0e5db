/* kv_store.h — the memory layout of the paged KV cache, shared by the forward
 * pass (which reads and writes K/V through block tables) and the KV pool
 * (which decides which physical block each sequence uses).
 *
 * K and V are each one array of `type` elements of shape
 *     (n_layer, n_blocks, block_size, kv_dim)      kv_dim = n_kv_head * head_dim
 * so the K vector of layer l, physical block b, slot s starts at element
 *     (((size_t)l * n_blocks + b) * block_size + s) * kv_dim
 * of k (kv_store_k_at gives its address for either type).
 * A sequence's token at position p lives in physical block
 *     block_table[p / block_size], slot p % block_size.
 *
 * Element types:
 *     KV_TYPE_F32   float                                  4 bytes
 *     KV_TYPE_F16   IEEE half (uint16_t bits), written     2 bytes
 *                   from float by round to nearest even
 *                   (overflow → ±inf), read back exactly
 *     KV_TYPE_Q8_0  int8 quants in blocks of `qblock`       1 + 2/qblock bytes
 *                   elements, one f16 scale per block
 * The forward pass computes in float; with F16 only the stored K/V are
 * rounded (llama.cpp's default cache type). F32 is 0 so a zero-initialized
 * store is F32 (tests build stores by hand).
 *
 * A Q8_0 vector (one K or V of kv_dim elements, kv_store_row_bytes bytes):
 *     int8_t   q[kv_dim]               element i = d[i / qblock] * q[i]
 *     uint16_t d[kv_dim / qblock]      f16 scales, after the quants
 * qblock (32, 16 or 8: the largest dividing head_dim, kv_store_qblock) never
 * straddles two heads, so one head's slice is qblock-aligned quants plus its
 * own scales. Quantization of a block x[0..qblock): amax = max |x_i|,
 * d = amax / 127, d16 = f16(d), q_i = round-half-even(x_i * (1/d)) clamped
 * to [-127, 127] (never -128: the AVX2 sign trick needs |q| <= 127); all
 * zeros when amax is 0 (kv_store_quantize; same for every CPU: scalar).
 * 34 bytes per 32 elements, as llama.cpp's q8_0: 1.88x the tokens of f16.
 *
 * Memory is owned by whoever filled in the struct (kv_pool or a test); the
 * forward pass never allocates or frees it.
 */
#ifndef PAGODA_KERNELS_KV_STORE_H
#define PAGODA_KERNELS_KV_STORE_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kv_type {
    KV_TYPE_F32 = 0,
    KV_TYPE_F16 = 1,
    /* configuration only, never the type of a store: sched_new resolves it
     * to F16 when the K/V projections run on the int8 kernels (their rows
     * have the same bits in any batch, so f16 keeps batched == alone exact)
     * and to F32 otherwise (sgemm's batch-shape rounding noise could flip a
     * half and break that invariant) */
    KV_TYPE_AUTO = 2,
    KV_TYPE_Q8_0 = 3,
} kv_type_t;

typedef struct kv_store {
    int32_t n_layer;
    int32_t n_blocks;    /* physical blocks in the pool */
    int32_t block_size;  /* token positions per block (32 by default) */
    int32_t kv_dim;      /* n_kv_head * head_dim */
    kv_type_t type;      /* element type of k and v */
    int32_t qblock;      /* Q8_0: elements per scale (kv_store_qblock); 0 otherwise */
    void *k;             /* (n_layer, n_blocks, block_size) vectors of kv_store_row_bytes */
    void *v;             /* same shape and type as k */
} kv_store_t;

/* Bytes of one element of a float type t: 4 (F32), 2 (F16); 0 for Q8_0
 * (no whole bytes per element: use kv_store_row_bytes) and unknown types. */
static inline size_t kv_type_size(kv_type_t t)
{
    return t == KV_TYPE_F32 ? 4 : t == KV_TYPE_F16 ? 2 : 0;
}

/* The q8 block length for a head of head_dim elements: 32, 16 or 8, the
 * largest that divides head_dim; 0 when none does (Q8_0 then refused). */
static inline int32_t kv_store_qblock(int32_t head_dim)
{
    return head_dim > 0 && head_dim % 32 == 0 ? 32 : head_dim > 0 && head_dim % 16 == 0 ? 16
           : head_dim > 0 && head_dim % 8 == 0 ? 8 : 0;
}

/* Bytes of one K (or V) vector of kv_dim elements of type t with q8 block
 * qblock (ignored for float types); 0 for an unknown type or a Q8_0 shape
 * whose qblock does not divide kv_dim. */
static inline size_t kv_type_row_bytes(kv_type_t t, int32_t kv_dim, int32_t qblock)
{
    if (kv_dim <= 0)
        return 0;
    if (t == KV_TYPE_Q8_0)
        return qblock > 0 && kv_dim % qblock == 0 ? (size_t)kv_dim + 2 * (size_t)(kv_dim / qblock) : 0;
    return kv_type_size(t) * (size_t)kv_dim;
}

static inline size_t kv_store_row_bytes(const kv_store_t *s)
{
    return kv_type_row_bytes(s->type, s->kv_dim, s->qblock);
}

/* "f32" / "f16" / "q8_0" / "auto" ("?" for an unknown type). */
const char *kv_type_name(kv_type_t t);

/* Parses "f32", "f16", "q8_0" or "auto" (exactly, lower case) into *out.
 * Returns 0 ok, -1 anything else (*out unchanged). */
int kv_type_parse(const char *s, kv_type_t *out);

/* Element index of the first K (or V) element of (layer, block, slot). */
static inline size_t kv_store_index(const kv_store_t *s, int layer, int block, int slot)
{
    return (((size_t)layer * (size_t)s->n_blocks + (size_t)block) * (size_t)s->block_size + (size_t)slot) *
           (size_t)s->kv_dim;
}

/* Address of the K / V vector (kv_store_row_bytes) of (layer, block, slot). */
static inline size_t kv_store_vec(const kv_store_t *s, int layer, int block, int slot)
{
    return ((size_t)layer * (size_t)s->n_blocks + (size_t)block) * (size_t)s->block_size + (size_t)slot;
}

static inline void *kv_store_k_at(const kv_store_t *s, int layer, int block, int slot)
{
    return (char *)s->k + kv_store_vec(s, layer, block, slot) * kv_store_row_bytes(s);
}

static inline void *kv_store_v_at(const kv_store_t *s, int layer, int block, int slot)
{
    return (char *)s->v + kv_store_vec(s, layer, block, slot) * kv_store_row_bytes(s);
}

/* Typed views for an F32 store (asserted). */
static inline float *kv_store_k(const kv_store_t *s, int layer, int block, int slot)
{
    assert(s->type == KV_TYPE_F32);
    return (float *)s->k + kv_store_index(s, layer, block, slot);
}

static inline float *kv_store_v(const kv_store_t *s, int layer, int block, int slot)
{
    assert(s->type == KV_TYPE_F32);
    return (float *)s->v + kv_store_index(s, layer, block, slot);
}

/* dst (n elements of type t) = src (n floats) converted: a copy for F32,
 * round to nearest even for F16 (F16C instructions when the CPU has them,
 * quant_fp32_to_fp16 otherwise; the two give identical bits). F32/F16 only. */
void kv_store_write(kv_type_t t, void *dst, const float *src, size_t n);

/* dst (n floats) = src (n elements of type t) widened exactly. F32/F16 only. */
void kv_store_read(kv_type_t t, const void *src, float *dst, size_t n);

/* Elements [e0, e0 + n) of the vector at row (kv_store_row_bytes bytes, as
 * kv_store_k_at gives) = src (n floats), any type of s. For Q8_0, e0 and n
 * must be multiples of s->qblock (asserted: the forward pass writes whole
 * heads). */
void kv_store_write_slice(const kv_store_t *s, void *row, int e0, const float *src, int n);

/* dst (n floats) = elements [e0, e0 + n) of the vector at row, widened
 * (F32/F16 exactly, Q8_0 as d * q); same alignment rule. */
void kv_store_read_slice(const kv_store_t *s, const void *row, int e0, float *dst, int n);

/* One q8 block: q (qb int8) and *d (f16 bits) from x (qb floats), by the
 * rule above. */
void kv_store_quantize(const float *x, int qb, int8_t *q, uint16_t *d);

/* Test hook: 1 forces the portable F16 converter even where F16C exists,
 * 0 restores detection. Returns 1 when F16C is available on this CPU. */
int kv_store_test_portable(int on);

#endif
