/* partition.h — the prefix-cache partition of a request: which tenant's
 * cached prefixes it may reuse (docs/SECURITY.md "Tenants and the prefix
 * cache").
 *
 * A partition is a 64-bit id that travels in the SUBMIT (proto/msg.h `part`)
 * and seeds the root of the request's block-key chain (common/prefix_key.h),
 * so a block cached under one partition is never a hit for another: not in
 * a worker's RAM prefix cache, not in its disk tier, not in the gateway's
 * routing index. It is computed here, on the gateway, from what the gateway
 * knows about the caller — never from the request body alone:
 *
 *   tenant partition   keys off:  0  (the public partition, today's cache)
 *                      keys on:   partition_of_key(the key's SHA-256 digest,
 *                                 its sharing group or NULL), at keys-file load
 *   request partition  tenant partition, or with a cache_salt S
 *                      partition_salted(tenant partition, S)
 *
 * Derivations (BLAKE2b-128 = libsodium crypto_generichash, first 8 bytes
 * little-endian; a result of 0 becomes 1 so that 0 is only ever the public
 * partition):
 *   key      BLAKE2b(key = digest, msg = "pagoda/partition/key/v1")
 *   group    BLAKE2b(msg = "pagoda/partition/group/v1" NUL group-name)
 *   salted   BLAKE2b(msg = "pagoda/partition/salt/v1" NUL le64(partition) salt)
 * A key's partition is keyed by its secret's digest, which only the keys file
 * holds, so it cannot be computed from anything a client sees. Two keys in
 * one group share a partition (they see each other's hits, by the operator's
 * choice); a key's partition does not change when it is renamed, re-tiered or
 * the file is reloaded, and is the same on every gateway and after a restart
 * (the disk tier stays warm). A salt narrows a partition: only requests with
 * the same key (or group) and the same salt share blocks.
 *
 * No allocation, no state; any thread (sodium_init must have succeeded, as
 * keys_parse ensures before computing key partitions).
 */
#ifndef PAGODA_GATEWAY_PARTITION_H
#define PAGODA_GATEWAY_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#define PARTITION_PUBLIC 0          /* no keys, no salt */
#define PARTITION_SALT_MAX 256      /* cache_salt bytes (1..) */

/* The partition of a keys-file entry: its group's when group is non-NULL and
 * non-empty, else its own from the digest. Never PARTITION_PUBLIC. */
uint64_t partition_of_key(const uint8_t sha256[32], const char *group);

/* partition narrowed by salt[0..len): a new partition, never PARTITION_PUBLIC;
 * salt NULL returns partition unchanged. */
uint64_t partition_salted(uint64_t partition, const char *salt, size_t len);

#endif
