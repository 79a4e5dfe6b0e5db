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
 * The forward pass computes in float; with F16 only the stored K/V are
 * rounded (llama.cpp's default cache type). F32 is 0 so a zero-initialized
 * store is F32 (tests build stores by hand).
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
} kv_type_t;

typedef struct kv_store {
    int32_t n_layer;
    int32_t n_blocks;    /* physical blocks in the pool */
    int32_t block_size;  /* token positions per block (32 by default) */
    int32_t kv_dim;      /* n_kv_head * head_dim */
    kv_type_t type;      /* element type of k and v */
    void *k;             /* (n_layer, n_blocks, block_size, kv_dim) elements of `type` */
    void *v;             /* same shape and type as k */
} kv_store_t;

/* Bytes of one element of type t: 4 (F32), 2 (F16), 0 for an unknown type. */
static inline size_t kv_type_size(kv_type_t t)
{
    return t == KV_TYPE_F32 ? 4 : t == KV_TYPE_F16 ? 2 : 0;
}

/* "f32" / "f16" / "auto" ("?" for an unknown type). */
const char *kv_type_name(kv_type_t t);

/* Parses "f32", "f16" or "auto" (exactly, lower case) into *out.
 * Returns 0 ok, -1 anything else (*out unchanged). */
int kv_type_parse(const char *s, kv_type_t *out);

/* Element index of the first K (or V) element of (layer, block, slot). */
static inline size_t kv_store_index(const kv_store_t *s, int layer, int block, int slot)
{
    return (((size_t)layer * (size_t)s->n_blocks + (size_t)block) * (size_t)s->block_size + (size_t)slot) *
           (size_t)s->kv_dim;
}

/* Address of the K / V vector (kv_dim elements of s->type) of (layer, block, slot). */
static inline void *kv_store_k_at(const kv_store_t *s, int layer, int block, int slot)
{
    return (char *)s->k + kv_store_index(s, layer, block, slot) * kv_type_size(s->type);
}

static inline void *kv_store_v_at(const kv_store_t *s, int layer, int block, int slot)
{
    return (char *)s->v + kv_store_index(s, layer, block, slot) * kv_type_size(s->type);
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
 * quant_fp32_to_fp16 otherwise; the two give identical bits). */
void kv_store_write(kv_type_t t, void *dst, const float *src, size_t n);

/* dst (n floats) = src (n elements of type t) widened exactly. */
void kv_store_read(kv_type_t t, const void *src, float *dst, size_t n);

/* Test hook: 1 forces the portable F16 converter even where F16C exists,
 * 0 restores detection. Returns 1 when F16C is available on this CPU. */
int kv_store_test_portable(int on);

#endif
