/* Unit tests for worker/kernels/worksteal.h: per-thread ranges with
 * stealing from the back.
 *
 * Claims checked, with real OpenMP threads:
 *   - every item 0..n-1 is handed out exactly once (a per-item counter,
 *     incremented atomically, is 1 everywhere), for n from 0 to 10007 and
 *     1-8 ranges, whatever the number of threads that actually run;
 *   - an owner takes its own range front to back and a thief takes the
 *     back of another range: on a 2-thread run of 40 items where thread 1
 *     sleeps 200 ms, thread 0's items are 0, 1, ... (its range, all of it
 *     unless thread 1 stole some) then 39, 38, ... (thread 1's range from
 *     the back);
 *   - a region with more threads than ranges (the extra ones only steal)
 *     and one with fewer (the missing owner's range is stolen) still run
 *     every item once;
 *   - ws_left counts the items still in a range: 10 items over 2 ranges
 *     give 5 and 5; two claims by owner 0 leave 3 there; a thief (thread
 *     0 once its range is empty) takes from range 1's back, which
 *     ws_left(1) shows; an unknown range has 0;
 *   - refusals: ws_new of 0 or a negative count is NULL, ws_free(NULL)
 *     and of a NULL pointer are no-ops.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "worker/kernels/worksteal.h"

/* Runs items 0..n-1 of w (initialised for n_ranges) on n_run threads and
 * checks that each ran exactly once. */
static void run_once_each(ws_t *w, int64_t n, int n_ranges, int n_run)
{
    _Atomic int *count = calloc((size_t)(n > 0 ? n : 1), sizeof *count);
    assert_non_null(count);
    ws_init(w, n, n_ranges);
#pragma omp parallel num_threads(n_run)
    for (int64_t i; (i = ws_next(w, omp_get_thread_num())) >= 0;) {
        if (i >= n)
            abort(); /* out of range: cmocka asserts are not thread-safe */
        atomic_fetch_add(&count[i], 1);
    }
    for (int64_t i = 0; i < n; i++)
        if (atomic_load(&count[i]) != 1) {
            print_error("n %lld ranges %d threads %d: item %lld ran %d times\n", (long long)n, n_ranges, n_run,
                        (long long)i, atomic_load(&count[i]));
            fail();
        }
    /* every range is empty afterwards */
    for (int t = 0; t < n_ranges + 2; t++)
        assert_int_equal(ws_next(w, t), -1);
    free(count);
}

static void test_every_item_once(void **state)
{
    (void)state;
    ws_t *w = ws_new(8);
    assert_non_null(w);
    const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 128, 352, 1000, 10007};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
        for (int ranges = 1; ranges <= 8; ranges++) {
            run_once_each(w, sizes[k], ranges, ranges);     /* as planned */
            run_once_each(w, sizes[k], ranges, ranges + 3); /* extra threads only steal */
            run_once_each(w, sizes[k], ranges, 1);          /* one thread runs every range */
        }
    /* more ranges asked than allocated: clamped, still once each */
    run_once_each(w, 500, 100, 4);
    ws_free(&w);
    assert_null(w);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_order_and_steal(void **state)
{
    (void)state;
    enum { N = 40 };
    ws_t *w = ws_new(2);
    ws_init(w, N, 2);
    int64_t seen[N];
    int n_seen = 0;
    _Atomic int t1_got = 0;
#pragma omp parallel num_threads(2)
    {
        if (omp_get_thread_num() == 1) {
            sleep_ms(200); /* "descheduled": thread 0 runs out and steals */
            for (int64_t i; (i = ws_next(w, 1)) >= 0;)
                atomic_fetch_add(&t1_got, 1);
        } else {
            for (int64_t i; (i = ws_next(w, 0)) >= 0;)
                seen[n_seen++] = i;
        }
    }
    /* thread 0 normally took everything (thread 1 slept 200 ms); if the
     * machine stalled thread 0 that long, thread 1 may have taken some of
     * its own range's front: then thread 0's sequence is still its range
     * in order followed by a decreasing run of stolen items */
    assert_int_equal(n_seen + atomic_load(&t1_got), N);
    int k = 0;
    while (k < n_seen && seen[k] == k) /* own range, front to back */
        k++;
    assert_true(k >= 1 && k <= N / 2);
    if (atomic_load(&t1_got) == 0)
        assert_int_equal(k, N / 2); /* nobody took from thread 0's range */
    for (int j = k; j < n_seen; j++)
        assert_int_equal(seen[j], N - 1 - (j - k)); /* stolen from the back, one by one */
    ws_free(&w);
}

static void test_left(void **state)
{
    (void)state;
    ws_t *w = ws_new(2);
    assert_non_null(w);
    ws_init(w, 10, 2);
    assert_int_equal(ws_left(w, 0), 5);
    assert_int_equal(ws_left(w, 1), 5);
    assert_int_equal(ws_next(w, 0), 0);
    assert_int_equal(ws_next(w, 0), 1);
    assert_int_equal(ws_left(w, 0), 3);
    for (int i = 2; i < 5; i++)
        assert_int_equal(ws_next(w, 0), i);
    assert_int_equal(ws_left(w, 0), 0);
    assert_int_equal(ws_next(w, 0), 9); /* stolen from range 1's back */
    assert_int_equal(ws_left(w, 1), 4);
    assert_int_equal(ws_next(w, 1), 5); /* the owner still takes its front */
    assert_int_equal(ws_left(w, 1), 3);
    assert_int_equal(ws_left(w, 2), 0);
    assert_int_equal(ws_left(w, -1), 0);
    ws_free(&w);
}

static void test_refusals(void **state)
{
    (void)state;
    assert_null(ws_new(0));
    assert_null(ws_new(-3));
    ws_free(NULL);
    ws_t *w = NULL;
    ws_free(&w);
    /* a fresh scheduler hands out nothing */
    w = ws_new(4);
    assert_int_equal(ws_next(w, 0), -1);
    assert_int_equal(ws_next(w, 3), -1);
    ws_free(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),
        cmocka_unit_test(test_order_and_steal),
        cmocka_unit_test(test_left),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
