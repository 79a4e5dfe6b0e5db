/* partition.c — prefix-cache partitions from keys, groups and salts (see
 * partition.h for the derivations). */
#include "gateway/partition.h"

#include <string.h>

#include <sodium.h>

/* The first 8 bytes of a 16-byte BLAKE2b state's digest, little-endian,
 * moved off the public partition. */
static uint64_t finish(crypto_generichash_state *st)
{
    uint8_t d[16];
    crypto_generichash_final(st, d, sizeof d);
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | d[i];
    return v == PARTITION_PUBLIC ? 1 : v;
}

static void absorb(crypto_generichash_state *st, const void *p, size_t n)
{
    crypto_generichash_update(st, (const unsigned char *)p, n);
}

uint64_t partition_of_key(const uint8_t sha256[32], const char *group)
{
    crypto_generichash_state st;
    if (group && group[0]) {
        static const char dom[] = "pagoda/partition/group/v1"; /* absorbed with its NUL */
        crypto_generichash_init(&st, NULL, 0, 16);
        absorb(&st, dom, sizeof dom);
        absorb(&st, group, strlen(group));
    } else {
        static const char dom[] = "pagoda/partition/key/v1";
        crypto_generichash_init(&st, sha256, 32, 16);
        absorb(&st, dom, sizeof dom - 1);
    }
    return finish(&st);
}

uint64_t partition_salted(uint64_t partition, const char *salt, size_t len)
{
    if (!salt)
        return partition;
    static const char dom[] = "pagoda/partition/salt/v1";
    uint8_t le[8];
    for (int i = 0; i < 8; i++)
        le[i] = (uint8_t)(partition >> (8 * i));
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, 16);
    absorb(&st, dom, sizeof dom);
    absorb(&st, le, sizeof le);
    absorb(&st, salt, len);
    return finish(&st);
}
