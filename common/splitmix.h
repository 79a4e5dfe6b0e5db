/* splitmix.h — SplitMix64 (Steele, Lea, Flood 2014), the one copy.
 *
 * splitmix64_mix is its finalizer: a bijective 64-bit mixer (every output
 * bit depends on every input bit), used to spread sequential ids and keys
 * over hash buckets. splitmix64_next is the generator: it advances *state
 * by the golden-ratio increment and returns the mixed value; it seeds the
 * sampler's xoshiro256**, the KV pool's random root key and mkmodel's
 * synthetic weights. Neither is cryptographic.
 *
 * Header only (inline: the hash tables call the mixer per lookup); no
 * state, any thread.
 */
#ifndef PAGODA_COMMON_SPLITMIX_H
#define PAGODA_COMMON_SPLITMIX_H

#include <stdint.h>

static inline uint64_t splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t splitmix64_next(uint64_t *state)
{
    return splitmix64_mix(*state += 0x9E3779B97F4A7C15ULL);
}

#endif
