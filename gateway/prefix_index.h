/* prefix_index.h — the gateway's map from prefix-cache block key to the
 * replicas that hold that block, for routing by cache (docs/BATCHING.md).
 *
 * Keys are the public block keys of common/prefix_key.h: workers report
 * theirs in KV messages (proto/msg.h) as blocks are cached and evicted; the
 * gateway computes a request's chain from its prompt tokens. A replica is a
 * *slot* 0..PREFIX_INDEX_MAX_SLOTS-1 that the gateway assigns per
 * registration; each key maps to a bit set of slots.
 *
 * Memory is bounded: at most max_entries keys, each 32 bytes plus a bucket
 * slot. Past that, the least recently used key (added or matched longest
 * ago) is forgotten for every replica — the index then under-reports what is
 * cached, which costs a cache hit, never correctness (the worker confirms
 * every hit by comparing tokens).
 *
 * Buckets are chosen by re-mixing the key with a random per-index secret, so
 * clients who can predict public keys cannot aim at one bucket.
 *
 * Ownership: prefix_index_new returns an index freed with prefix_index_free
 * (NULLs the pointer). Not thread-safe: the gateway's core thread owns it.
 */
#ifndef PAGODA_GATEWAY_PREFIX_INDEX_H
#define PAGODA_GATEWAY_PREFIX_INDEX_H

#include <stddef.h>
#include <stdint.h>

#define PREFIX_INDEX_MAX_SLOTS 64          /* replicas tracked (bits of a uint64_t) */
#define PREFIX_INDEX_DEFAULT_ENTRIES (1u << 18)

typedef struct prefix_index prefix_index_t;

/* max_entries ≥ 1 keys (0 = PREFIX_INDEX_DEFAULT_ENTRIES). */
prefix_index_t *prefix_index_new(size_t max_entries);
void prefix_index_free(prefix_index_t **idx);

/* Slot now holds key (makes it most recently used). slot outside
 * [0, PREFIX_INDEX_MAX_SLOTS) is ignored. */
void prefix_index_add(prefix_index_t *idx, uint64_t key, int slot);
/* Slot no longer holds key; a key no slot holds is removed. */
void prefix_index_del(prefix_index_t *idx, uint64_t key, int slot);
/* Forgets every key of slot (its worker is gone, or resends its full set).
 * O(entries). */
void prefix_index_drop_slot(prefix_index_t *idx, int slot);

/* For each slot, the number of leading keys of keys[0..n) it holds (a chain:
 * a slot stops counting at its first missing key) into
 * depth[0..PREFIX_INDEX_MAX_SLOTS). Keys matched by any slot become most
 * recently used. Returns the set of slots with depth > 0. */
uint64_t prefix_index_match(prefix_index_t *idx, const uint64_t *keys, int32_t n,
                            int32_t depth[PREFIX_INDEX_MAX_SLOTS]);

/* Keys in the index; keys held by one slot; keys forgotten for lack of room. */
size_t prefix_index_size(const prefix_index_t *idx);
size_t prefix_index_slot_size(const prefix_index_t *idx, int slot);
uint64_t prefix_index_evictions(const prefix_index_t *idx);

#endif
