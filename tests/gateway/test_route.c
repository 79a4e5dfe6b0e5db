/* test_route.c — every row of ROUTE_MODES (gateway/route.h) is complete and
 * its columns tell the truth: a name that parses back to the mode, words for
 * --help, and uses_prefix true exactly when the policy reads hit_blocks (a
 * policy that reads them while its row says false would never see a hit:
 * the gateway computes no keys for it). The policies' own choices are
 * test_prefix_index.c's table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "gateway/route.h"

/* Candidate sets where holding a prefix could matter: (credit, assigned,
 * hit_blocks) of 3 replicas. */
static const route_cand_t probes[][3] = {
    {{4, 0, 0}, {3, 1, 5}, {0, 0, 0}},
    {{4, 0, 0}, {1, 3, 5}, {4, 0, 2}},
    {{3, 1, 2}, {3, 1, 7}, {3, 1, 5}},
    {{2, 2, 9}, {2, 1, 0}, {2, 0, 0}},
    {{8, 0, 0}, {1, 7, 9}, {0, 0, 0}},
    {{1, 0, 0}, {1, 0, 0}, {1, 0, 1}},
};
#define N_PROBES (sizeof probes / sizeof probes[0])

static void test_every_mode_named(void **state)
{
    (void)state;
    assert_null(route_mode_names[ROUTE_N_MODES]);
    for (int m = 0; m < ROUTE_N_MODES; m++) {
        const char *name = route_mode_names[m];
        assert_non_null(name);
        assert_string_equal(route_mode_name((route_mode_t)m), name);
        route_mode_t back = ROUTE_N_MODES;
        assert_int_equal(route_mode_parse(name, &back), 0);
        assert_int_equal(back, m);
        assert_non_null(route_mode_help((route_mode_t)m));
        assert_true(strlen(route_mode_help((route_mode_t)m)) > 0);
        for (int o = 0; o < m; o++)
            assert_string_not_equal(route_mode_names[o], name);
    }
    route_mode_t back;
    assert_int_equal(route_mode_parse("no-such-mode", &back), -1);
}

/* Every mode: nothing with credit → -1; a pick always has credit; and the
 * uses_prefix column matches the policy: with it false, the pick and the
 * reason are the same with every hit zeroed; with it true, some probe's pick
 * changes when the hits are zeroed. */
static void test_every_mode_uses_prefix_is_true(void **state)
{
    (void)state;
    for (int m = 0; m < ROUTE_N_MODES; m++) {
        const char *name = route_mode_names[m];
        route_cand_t none[3] = {{0, 0, 4}, {-1, 2, 1}, {0, 1, 0}};
        route_reason_t why;
        assert_int_equal(route_pick((route_mode_t)m, none, 3, 4, &why), -1);
        bool reads_hits = false;
        for (size_t p = 0; p < N_PROBES; p++) {
            route_cand_t c[3], z[3];
            memcpy(c, probes[p], sizeof c);
            memcpy(z, probes[p], sizeof z);
            for (int i = 0; i < 3; i++)
                z[i].hit_blocks = 0;
            route_reason_t wc = ROUTE_BY_LOAD, wz = ROUTE_BY_LOAD;
            int pc = route_pick((route_mode_t)m, c, 3, 1, &wc);
            int pz = route_pick((route_mode_t)m, z, 3, 1, &wz);
            if (pc < 0 || c[pc].credit <= 0 || pz < 0 || z[pz].credit <= 0)
                fail_msg("mode %s probe %zu: picked %d / %d, which has no credit", name, p, pc, pz);
            if (pc != pz || wc != wz)
                reads_hits = true;
            if (!route_mode_uses_prefix((route_mode_t)m) && wc != ROUTE_BY_LOAD)
                fail_msg("mode %s without uses_prefix gave reason %s", name, route_reason_name(wc));
        }
        if (reads_hits != route_mode_uses_prefix((route_mode_t)m))
            fail_msg("mode %s: its row says uses_prefix %d, but the policy %s hit_blocks", name,
                     (int)route_mode_uses_prefix((route_mode_t)m), reads_hits ? "reads" : "ignores");
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_mode_named),
        cmocka_unit_test(test_every_mode_uses_prefix_is_true),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
