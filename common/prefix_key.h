/* prefix_key.h — the block keys of the prefix cache, shared by the worker's
 * KV pool (worker/kv_pool.c) and the gateway's routing index
 * (gateway/prefix_index.h).
 *
 * A full block of block_size token ids is keyed by a hash chain:
 *     key_i = prefix_key_next(key_{i-1}, tokens[i*bs .. (i+1)*bs), bs)
 *     key_{-1} = root
 * prefix_key_next is a 64-bit multiply-rotate hash over the 32-bit token ids
 * (xxHash64-like rounds, written for int32 tokens). Not cryptographic:
 * nothing's correctness depends on it (the worker confirms every hit by
 * comparing token ids).
 *
 * Two roots are used:
 *   - the KV pool's private root, random per pool, for its own hash map (keys
 *     unpredictable to clients, so its buckets cannot be flooded);
 *   - prefix_key_root(partition), a constant per partition: the *public* keys
 *     a worker reports in KV messages (proto/msg.h) and the gateway computes
 *     from a request's tokens. They are equal on every replica of a model, so
 *     the gateway can compare them. (The gateway's index re-mixes them with
 *     its own secret before bucketing.)
 *
 * Partitions (docs/SECURITY.md "Tenants and the prefix cache"). A request
 * carries a 64-bit partition id (SUBMIT `part`), derived on the gateway from
 * the API key and the request's cache_salt (gateway/partition.h). The
 * partition is mixed into the root of both chains, so the same tokens in
 * two partitions have different keys from block 0 on: RAM prefix cache,
 * disk-tier files and the gateway's routing index are all partitioned with
 * no other change. prefix_key_root is a bijection (distinct partitions get
 * distinct roots), and partition 0 — no keys, no salt — keeps the historic
 * root PREFIX_KEY_PUBLIC_ROOT.
 * No allocation, no state: any thread.
 */
#ifndef PAGODA_COMMON_PREFIX_KEY_H
#define PAGODA_COMMON_PREFIX_KEY_H

#include <stddef.h>
#include <stdint.h>

#define PREFIX_KEY_PUBLIC_ROOT 0x70616730646150ULL /* "Pad0gap", any constant */

/* The public root of a partition: PREFIX_KEY_PUBLIC_ROOT for 0, a distinct
 * value for every other partition. */
uint64_t prefix_key_root(uint64_t partition);

/* Adapters (LoRA) are part of the key the same way: a request's adapter
 * set — each adapter's content hash (prefix_key_bytes of its GGUF file) and
 * scale, in the request's order — is folded into its partition, so the
 * same tokens under two adapter sets (or one adapter at two scales) never
 * share a block, and a repeated set hits. n == 0 returns partition
 * unchanged (the base keeps its keys). The worker and the gateway's routing
 * both key through this one function. */
uint64_t prefix_key_adapters(uint64_t partition, const uint64_t *hash, const float *scale, int n);

/* Images are part of the key too (issue #40): a request's images — each
 * one's content key (prefix_key_image_key of its BLAKE2b-256 pixel hash)
 * and the prompt position of its first row — are folded into its
 * partition, one image at a time in prompt order, after the adapters:
 *     part = prefix_key_adapters(SUBMIT part, adapters)
 *     for each image span in prompt order: part = prefix_key_image(part, key, pos)
 * so the blocks of a request with images are shared only with requests
 * holding the same images at the same places, never with a text-only one.
 * The worker's scheduler (worker/sched.c) and the gateway's routing keys
 * (gateway/route.c route_text_keys) both fold through this one function.
 * The result is never 0 (the public partition). */
uint64_t prefix_key_image(uint64_t partition, uint64_t key, int32_t pos);

/* An image's content key: the first 8 bytes of its 32-byte hash, little-endian. */
uint64_t prefix_key_image_key(const uint8_t hash[32]);

/* 64-bit content hash of len bytes (an adapter file's). */
uint64_t prefix_key_bytes(const uint8_t *p, size_t len);

/* Key of a block of n token ids whose parent block has key `parent`. */
uint64_t prefix_key_next(uint64_t parent, const int32_t *tokens, int32_t n);

/* Public keys, in `partition`, of the blocks of a prompt of n tokens that a
 * prefix-cache lookup can hit: the first floor((n - 1) / bs) full blocks
 * (the last prompt token is always recomputed), at most max. Writes them to
 * out[0..) and returns their count (0 when n ≤ bs or bs < 1). */
int32_t prefix_key_chain(uint64_t partition, const int32_t *tokens, int32_t n, int32_t bs, uint64_t *out,
                         int32_t max);

#endif
