/* Unit tests for common/proc_env.h: the worker's environment gets
 * GOMP_SPINCOUNT when missing and always OPENBLAS_NUM_THREADS=1 (any other
 * value replaced), keeps every other variable it was given (in order, the
 * same strings) and never overrides the user's spin: OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT keeps it unset; a name that only starts alike
 * (GOMP_SPINCOUNTX) does not count. NULL env works. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/proc_env.h"

static int count(char **e, const char *prefix)
{
    int n = 0;
    for (; *e; e++)
        n += strncmp(*e, prefix, strlen(prefix)) == 0;
    return n;
}

static size_t len(char **e)
{
    size_t n = 0;
    while (e[n])
        n++;
    return n;
}

static void test_adds_missing(void **state)
{
    (void)state;
    char *in[] = {"PATH=/bin", "HOME=/root", "GOMP_SPINCOUNTX=5", NULL};
    char **out = proc_env_worker(in);
    assert_int_equal(len(out), 5);
    for (int i = 0; i < 3; i++)
        assert_ptr_equal(out[i], in[i]);
    assert_int_equal(count(out, "GOMP_SPINCOUNT=" PROC_ENV_GOMP_SPINCOUNT), 1);
    assert_int_equal(count(out, "OPENBLAS_NUM_THREADS=1"), 1);
    free(out);
    out = proc_env_worker(NULL);
    assert_int_equal(len(out), 2);
    free(out);
}

static void test_user_wins(void **state)
{
    (void)state;
    char *a[] = {"OMP_WAIT_POLICY=passive", "OPENBLAS_NUM_THREADS=8", "X=1", NULL};
    char **out = proc_env_worker(a);
    assert_int_equal(len(out), 3);
    assert_int_equal(count(out, "GOMP_SPINCOUNT="), 0);
    assert_ptr_equal(out[0], a[0]);
    assert_ptr_equal(out[1], a[2]);
    assert_string_equal(out[2], "OPENBLAS_NUM_THREADS=1");
    free(out);
    char *b[] = {"GOMP_SPINCOUNT=0", NULL};
    out = proc_env_worker(b);
    assert_int_equal(len(out), 2);
    assert_int_equal(count(out, "GOMP_SPINCOUNT="), 1);
    assert_string_equal(out[0], "GOMP_SPINCOUNT=0");
    assert_string_equal(out[1], "OPENBLAS_NUM_THREADS=1");
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_adds_missing),
        cmocka_unit_test(test_user_wins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
