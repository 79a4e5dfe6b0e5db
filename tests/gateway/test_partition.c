/* Unit tests for gateway/partition: the derivations against an independent
 * reference (Python's hashlib.blake2b, digest_size=16, values pasted below:
 * the script is below), and the
 * properties the tenant isolation rests on (docs/SECURITY.md "Tenants and
 * the prefix cache"): never the public partition, distinct keys / groups /
 * salts give distinct partitions, a salt cannot reach another tenant's.
 *
 * Reference (python3):
 *   fin = lambda d: int.from_bytes(d[:8], 'little') or 1
 *   key = lambda dg: fin(blake2b(b"pagoda/partition/key/v1", digest_size=16, key=dg).digest())
 *   grp = lambda g: fin(blake2b(b"pagoda/partition/group/v1\0" + g, digest_size=16).digest())
 *   slt = lambda p, s: fin(blake2b(b"pagoda/partition/salt/v1\0" + p.to_bytes(8, 'little') + s,
 *                                  digest_size=16).digest())
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "gateway/partition.h"

static int setup(void **st)
{
    (void)st;
    return sodium_init() < 0 ? -1 : 0;
}

static void sha256(const char *s, uint8_t out[32])
{
    crypto_hash_sha256(out, (const unsigned char *)s, strlen(s));
}

/* Known answers, one row per derivation and input shape. */
static void test_known_answers(void **st)
{
    (void)st;
    uint8_t abc[32], zero[32] = {0};
    sha256("abc", abc);
    const uint64_t k_abc = 0x539ddea18593ec94ULL, g_team = 0x5a39892606eb0445ULL;
    static char salt256[257];
    memset(salt256, 'x', 256);
    const struct {
        const char *what;
        uint64_t got, want;
    } rows[] = {
        {"key sha256(abc)", partition_of_key(abc, NULL), k_abc},
        {"key with empty group = no group", partition_of_key(abc, ""), k_abc},
        {"key all-zero digest", partition_of_key(zero, NULL), 0xa1760a6964753b25ULL},
        {"group team", partition_of_key(abc, "team"), g_team},
        {"group team, other key", partition_of_key(zero, "team"), g_team},
        {"group a", partition_of_key(abc, "a"), 0x3bd4a8a90f2d162aULL},
        {"salt s1 without keys", partition_salted(0, "s1", 2), 0xc06197d4579922b8ULL},
        {"empty salt without keys", partition_salted(0, "", 0), 0x0ac36eed3b8c668fULL},
        {"salt s1 on key abc", partition_salted(k_abc, "s1", 2), 0x419c65f7f2ae9e46ULL},
        {"256-byte salt on group team", partition_salted(g_team, salt256, 256), 0xc780262f7ae3783aULL},
        {"no salt", partition_salted(k_abc, NULL, 0), k_abc},
        {"no salt, no keys", partition_salted(PARTITION_PUBLIC, NULL, 0), PARTITION_PUBLIC},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        if (rows[i].got != rows[i].want)
            fail_msg("%s: got %#llx, want %#llx", rows[i].what, (unsigned long long)rows[i].got,
                     (unsigned long long)rows[i].want);
}

/* Distinct inputs, distinct partitions; none is the public one. */
static void test_distinct(void **st)
{
    (void)st;
    enum { N = 64 };
    uint64_t seen[4 * N];
    size_t n = 0;
    char buf[32];
    for (int i = 0; i < N; i++) {
        uint8_t d[32];
        snprintf(buf, sizeof buf, "secret-%d", i);
        sha256(buf, d);
        uint64_t key = partition_of_key(d, NULL);
        seen[n++] = key;                                       /* a key of its own */
        snprintf(buf, sizeof buf, "group-%d", i);
        seen[n++] = partition_of_key(d, buf);                  /* a group */
        snprintf(buf, sizeof buf, "salt-%d", i);
        seen[n++] = partition_salted(0, buf, strlen(buf));     /* a salt without keys */
        seen[n++] = partition_salted(key, buf, strlen(buf));   /* a salt on the key */
    }
    for (size_t i = 0; i < n; i++) {
        assert_true(seen[i] != PARTITION_PUBLIC);
        for (size_t j = 0; j < i; j++)
            if (seen[i] == seen[j])
                fail_msg("partitions %zu and %zu are equal (%#llx)", j, i, (unsigned long long)seen[i]);
    }
}

/* A salt is bound to its partition: the same salt on two tenants, or two
 * salts on one, never meet; a tenant's salted partition is not its
 * unsalted one nor the no-keys partition of that salt. */
static void test_salt_binding(void **st)
{
    (void)st;
    uint8_t da[32], db[32];
    sha256("key-A", da);
    sha256("key-B", db);
    uint64_t a = partition_of_key(da, NULL), b = partition_of_key(db, NULL);
    static const char *const salts[] = {"s", "t", "tenant-a", "a", ""};
    for (size_t i = 0; i < sizeof salts / sizeof salts[0]; i++) {
        size_t len = strlen(salts[i]);
        uint64_t sa = partition_salted(a, salts[i], len), sb = partition_salted(b, salts[i], len);
        assert_true(sa != sb);
        assert_true(sa != a && sa != b && sb != a && sb != b);
        assert_true(sa != partition_salted(PARTITION_PUBLIC, salts[i], len));
        assert_true(sa == partition_salted(a, salts[i], len)); /* deterministic */
        for (size_t j = 0; j < i; j++)
            assert_true(sa != partition_salted(a, salts[j], strlen(salts[j])));
    }
    /* the length is part of it: "ab" is not "a" + a NUL-terminated tail */
    assert_true(partition_salted(a, "ab", 1) != partition_salted(a, "ab", 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_answers),
        cmocka_unit_test(test_distinct),
        cmocka_unit_test(test_salt_binding),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
