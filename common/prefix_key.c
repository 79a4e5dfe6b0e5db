/* prefix_key.c — the prefix cache's block hash chain (see prefix_key.h). */
#include "common/prefix_key.h"

#include <stddef.h>
#include <string.h>

#include "common/splitmix.h"

#define H_P1 0x9E3779B185EBCA87ULL
#define H_P2 0xC2B2AE3D27D4EB4FULL
#define H_P3 0x165667B19E3779F9ULL
#define H_P4 0x85EBCA77C2B2AE63ULL
#define H_P5 0x27D4EB2F165667C5ULL

static inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

uint64_t prefix_key_next(uint64_t parent, const int32_t *t, int32_t n)
{
    uint64_t h = parent ^ (H_P5 + (uint64_t)n * 4u);
    int32_t i = 0;
    for (; i + 1 < n; i += 2) {
        uint64_t w = (uint64_t)(uint32_t)t[i] | ((uint64_t)(uint32_t)t[i + 1] << 32);
        uint64_t k = rotl64(w * H_P2, 31) * H_P1;
        h ^= k;
        h = rotl64(h, 27) * H_P1 + H_P4;
    }
    if (i < n) {
        h ^= (uint64_t)(uint32_t)t[i] * H_P1;
        h = rotl64(h, 23) * H_P2 + H_P3;
    }
    h ^= h >> 33;
    h *= H_P2;
    h ^= h >> 29;
    h *= H_P3;
    h ^= h >> 32;
    return h;
}

uint64_t prefix_key_root(uint64_t partition)
{
    /* splitmix64_mix is a bijection with mix(0) = 0: partition 0 keeps the
     * constant root, and no two partitions share one */
    return PREFIX_KEY_PUBLIC_ROOT ^ splitmix64_mix(partition);
}

int32_t prefix_key_chain(uint64_t partition, const int32_t *tokens, int32_t n, int32_t bs, uint64_t *out,
                         int32_t max)
{
    if (bs < 1 || n < 1 || max < 1)
        return 0;
    int32_t nb = (n - 1) / bs;
    if (nb > max)
        nb = max;
    uint64_t k = prefix_key_root(partition);
    for (int32_t i = 0; i < nb; i++) {
        k = prefix_key_next(k, tokens + (size_t)i * (size_t)bs, bs);
        out[i] = k;
    }
    return nb;
}

uint64_t prefix_key_adapters(uint64_t partition, const uint64_t *hash, const float *scale, int n)
{
    if (n <= 0)
        return partition;
    /* a chain over (hash, scale bits) pairs, then mixed with the partition;
     * the length enters first so a set is never a prefix of a longer one */
    uint64_t h = H_P5 ^ (uint64_t)n;
    for (int i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &scale[i], sizeof bits);
        h = rotl64((h ^ hash[i]) * H_P1, 31) * H_P2;
        h = rotl64((h ^ bits) * H_P3, 27) * H_P1 + H_P4;
    }
    /* never 0 and never equal to partition: the adapters' keys are apart
     * from the base's in every partition */
    uint64_t k = partition ^ splitmix64_mix(h | 1);
    return k == partition || k == 0 ? k ^ H_P3 : k;
}

uint64_t prefix_key_bytes(const uint8_t *p, size_t len)
{
    uint64_t h = H_P5 + (uint64_t)len;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
        h ^= rotl64(w * H_P2, 31) * H_P1;
        h = rotl64(h, 27) * H_P1 + H_P4;
    }
    for (; i < len; i++) {
        h ^= (uint64_t)p[i] * H_P5;
        h = rotl64(h, 11) * H_P1;
    }
    return splitmix64_mix(h);
}

uint64_t prefix_key_image(uint64_t partition, uint64_t key, int32_t pos)
{
    /* boost-style combine of the key, then the position multiplied in */
    uint64_t h = partition;
    h ^= key + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    h ^= (uint64_t)pos * 0xff51afd7ed558ccdull;
    return h == 0 ? 1 : h;
}

uint64_t prefix_key_image_key(const uint8_t hash[32])
{
    uint64_t k = 0;
    for (int i = 7; i >= 0; i--)
        k = k << 8 | hash[i];
    return k;
}
