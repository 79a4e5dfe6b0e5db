/* kv_store.h — the memory layout of the paged KV cache, shared by the forward
 * pass (which reads and writes K/V through block tables) and the KV pool
 * (which decides which physical block each sequence uses).
 *
 * K and V are each one float array of shape
 *     (n_layer, n_blocks, block_size, kv_dim)      kv_dim = n_kv_head * head_dim
 * so the K vector of layer l, physical block b, slot s starts at
 *     k + (((size_t)l * n_blocks + b) * block_size + s) * kv_dim.
 * A sequence's token at position p lives in physical block
 *     block_table[p / block_size], slot p % block_size.
 * Memory is owned by whoever filled in the struct (kv_pool or a test); the
 * forward pass never allocates or frees it.
 */
#ifndef PAGODA_WORKER_KV_STORE_H
#define PAGODA_WORKER_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

typedef struct kv_store {
    int32_t n_layer;
    int32_t n_blocks;    /* physical blocks in the pool */
    int32_t block_size;  /* token positions per block (32 by default) */
    int32_t kv_dim;      /* n_kv_head * head_dim */
    float *k;            /* (n_layer, n_blocks, block_size, kv_dim) */
    float *v;            /* same shape as k */
} kv_store_t;

static inline float *kv_store_k(const kv_store_t *s, int layer, int block, int slot)
{
    return s->k + (((size_t)layer * (size_t)s->n_blocks + (size_t)block) * (size_t)s->block_size + (size_t)slot) * (size_t)s->kv_dim;
}

static inline float *kv_store_v(const kv_store_t *s, int layer, int block, int slot)
{
    return s->v + (((size_t)layer * (size_t)s->n_blocks + (size_t)block) * (size_t)s->block_size + (size_t)slot) * (size_t)s->kv_dim;
}

#endif
