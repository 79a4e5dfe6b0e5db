/* Unit tests for common/: log level parsing, checked allocation, clocks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <stdlib.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

static void test_log_level_parse(void **state)
{
    (void)state;
    assert_int_equal(log_level_parse("debug"), LOG_DEBUG);
    assert_int_equal(log_level_parse("INFO"), LOG_INFO);
    assert_int_equal(log_level_parse("warn"), LOG_WARN);
    assert_int_equal(log_level_parse("error"), LOG_ERROR);
    assert_int_equal(log_level_parse("verbose"), -1);
    assert_int_equal(log_level_parse(NULL), -1);
}

static void test_xalloc(void **state)
{
    (void)state;
    char *s = xstrndup("abcdef", 3);
    assert_string_equal(s, "abc");
    free(s);
    float *a = xaligned_alloc(100 * sizeof(float));
    assert_int_equal((uintptr_t)a % 64, 0);
    free(a);
    int *z = xcalloc(16, sizeof(int));
    for (int i = 0; i < 16; i++)
        assert_int_equal(z[i], 0);
    free(z);
}

static void test_clock_monotonic(void **state)
{
    (void)state;
    int64_t a = clock_now_us();
    clock_sleep_us(2000);
    int64_t b = clock_now_us();
    assert_true(b - a >= 2000);
    assert_true(clock_wall_s() > 1700000000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_log_level_parse),
        cmocka_unit_test(test_xalloc),
        cmocka_unit_test(test_clock_monotonic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
