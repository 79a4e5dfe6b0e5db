/* Unit tests for worker/kv_budget.h: the KV pool's size from memory,
 *   KV = max(floor, min((A - R) / N - W, F - R / N - W, cap)),
 *   R = max(1024, A / 10), floor = min(256, cap),
 * one row per case (a host alone, two workers, a restart beside a running
 * sibling, memory taken since the gateway measured, a short host, the cap,
 * the reserve's 10 %, N 0 taken as 1, an unreadable /proc/meminfo), and the
 * log line names every number. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "worker/kv_budget.h"

typedef struct row {
    const char *what;
    kv_budget_in_t in;       /* avail, free, n_workers, weights, cap (MiB) */
    uint64_t mib;            /* expected KV */
    uint64_t reserve;        /* expected R */
    kv_budget_bound_t bound; /* expected binding term */
} row_t;

static const row_t rows[] = {
    {"one worker, 20 GiB free, 7B Q4 weights", {20480, 20480, 1, 4200, 65536}, 14232, 2048, KV_BUDGET_SHARE},
    {"the context cap binds (small model)", {20480, 20480, 1, 600, 1408}, 1408, 2048, KV_BUDGET_CAP},
    {"two workers share the host", {20480, 20480, 2, 4200, 0}, 5016, 2048, KV_BUDGET_SHARE},
    /* a restart: the sibling holds its weights, its 5016 MiB pool and 300 MiB of
     * scratch; F - R/2 - W = 5740 >= the share, so the worker gets what it got at first */
    {"restart beside a running sibling", {20480, 20480 - 4200 - 5016 - 300, 2, 4200, 0}, 5016, 2048, KV_BUDGET_SHARE},
    {"memory taken since the gateway measured", {20480, 6000, 2, 4200, 0}, 776, 2048, KV_BUDGET_FREE},
    {"weights exceed the host: floor", {4096, 4096, 1, 4200, 65536}, 256, 1024, KV_BUDGET_FLOOR},
    {"floor never above the cap", {4096, 4096, 1, 4200, 100}, 100, 1024, KV_BUDGET_FLOOR},
    {"10 % reserve on a big host, 4 workers", {102400, 102400, 4, 7000, 0}, 16040, 10240, KV_BUDGET_SHARE},
    {"reserve rounds down (12345 -> 1234)", {12345, 12345, 1, 0, 0}, 11111, 1234, KV_BUDGET_SHARE},
    {"n_workers 0 is 1", {8192, 8192, 0, 0, 0}, 7168, 1024, KV_BUDGET_SHARE},
    {"cap equal to the share: cap", {8192, 8192, 1, 0, 7168}, 7168, 1024, KV_BUDGET_CAP},
    {"meminfo unreadable (0): floor", {0, 0, 1, 10, 5000}, 256, 1024, KV_BUDGET_FLOOR},
    {"absurd inputs do not overflow", {UINT64_MAX, UINT64_MAX, 1, 0, 1000}, 1000, 0, KV_BUDGET_CAP},
};

static void test_rule_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const row_t *r = &rows[i];
        kv_budget_t b;
        kv_budget_auto(&r->in, &b);
        if (b.mib != r->mib || (r->reserve && b.reserve_mib != r->reserve) || b.bound != r->bound)
            fail_msg("%s: got %llu MiB (reserve %llu, %s), want %llu (reserve %llu, %s)", r->what,
                     (unsigned long long)b.mib, (unsigned long long)b.reserve_mib, kv_budget_bound_name(b.bound),
                     (unsigned long long)r->mib, (unsigned long long)r->reserve, kv_budget_bound_name(r->bound));
        /* the result is never above the cap nor below the floor */
        if (r->in.cap_mib)
            assert_true(b.mib <= r->in.cap_mib);
        assert_true(b.mib >= (r->in.cap_mib && r->in.cap_mib < KV_BUDGET_FLOOR_MIB ? r->in.cap_mib
                                                                                  : KV_BUDGET_FLOOR_MIB));
    }
}

static void test_describe(void **state)
{
    (void)state;
    kv_budget_in_t in = {20480, 19000, 2, 4200, 16384};
    kv_budget_t b;
    kv_budget_auto(&in, &b);
    char line[512];
    kv_budget_describe(&in, &b, line, sizeof line);
    assert_string_equal(line, "5016 MiB = min((avail 20480 - reserve 2048) / 2 workers - weights 4200 = 5016, "
                              "free 19000 - reserve/2 1024 - weights 4200 = 13776, ctx cap 16384), floor 256: share");
    in = (kv_budget_in_t){4096, 4096, 1, 4200, 0};
    kv_budget_auto(&in, &b);
    kv_budget_describe(&in, &b, line, sizeof line);
    assert_string_equal(line, "256 MiB = min((avail 4096 - reserve 1024) / 1 worker - weights 4200 = -1128, "
                              "free 4096 - reserve/1 1024 - weights 4200 = -1128, no ctx cap), floor 256: floor");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rule_table),
        cmocka_unit_test(test_describe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
