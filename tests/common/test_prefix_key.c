/* Tests for common/prefix_key's adapter keys (prefix_key_adapters,
 * prefix_key_bytes); the block chain itself is checked through its users
 * (test_kv_pool.c, test_prefix_index.c).
 *
 * An adapter set folded into a partition must: leave the partition as it
 * is with no adapter (the base keeps its keys); never give back the
 * partition itself (an adapter never shares the base's blocks); separate
 * sets that differ in an adapter, a scale or the order; give equal keys for
 * equal sets (a repeated set hits). prefix_key_bytes must change with any
 * byte and with the length. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "common/prefix_key.h"

static void test_adapters(void **state)
{
    (void)state;
    const uint64_t parts[3] = {0, 1, 0xfedcba9876543210ULL};
    const uint64_t h[2] = {0x1234, 0x5678};
    const float s1[2] = {1.0f, 0.5f}, s2[2] = {0.5f, 1.0f};
    const uint64_t h_rev[2] = {0x5678, 0x1234};
    for (int i = 0; i < 3; i++) {
        uint64_t p = parts[i];
        assert_true(prefix_key_adapters(p, h, s1, 0) == p);
        uint64_t a = prefix_key_adapters(p, h, s1, 1), ab = prefix_key_adapters(p, h, s1, 2);
        assert_true(a != p && ab != p && a != ab);
        assert_true(prefix_key_adapters(p, h, s1, 2) == ab);             /* deterministic */
        assert_true(prefix_key_adapters(p, h, s2, 2) != ab);             /* scales */
        assert_true(prefix_key_adapters(p, h_rev, s2, 2) != ab);         /* order */
        assert_true(prefix_key_adapters(p, h + 1, s1, 1) != a);          /* another adapter */
        for (int j = 0; j < 3; j++)
            if (j != i)
                assert_true(prefix_key_adapters(parts[j], h, s1, 1) != a); /* partitions stay apart */
    }
}

static void test_bytes(void **state)
{
    (void)state;
    uint8_t buf[37];
    for (size_t i = 0; i < sizeof buf; i++)
        buf[i] = (uint8_t)(i * 7);
    uint64_t k = prefix_key_bytes(buf, sizeof buf);
    assert_true(prefix_key_bytes(buf, sizeof buf) == k);
    assert_true(prefix_key_bytes(buf, sizeof buf - 1) != k);
    for (size_t i = 0; i < sizeof buf; i++) {
        buf[i] ^= 1;
        assert_true(prefix_key_bytes(buf, sizeof buf) != k);
        buf[i] ^= 1;
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adapters),
        cmocka_unit_test(test_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
