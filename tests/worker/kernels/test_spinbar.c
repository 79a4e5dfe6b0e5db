/* Unit tests for worker/kernels/spinbar.h: a spin-then-sleep barrier.
 *
 * Claims checked, with real OpenMP threads (1-4) over 5,000 barriers (twice each):
 *   - no thread leaves a barrier before every thread has arrived: each
 *     thread adds 1 to a shared count before barrier k and reads n·(k+1)
 *     after it;
 *   - exactly one thread per barrier is the last (spinbar_arrive true),
 *     and what it writes in its serial step before spinbar_release is seen
 *     by every thread after the barrier;
 *   - a thread descheduled for a while (a 20 ms sleep before one barrier)
 *     holds the others, who sleep on the futex (past 50 us of spin),
 *     and are woken by the release instead of passing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <omp.h>
#include <stdatomic.h>
#include <time.h>

#include "worker/kernels/spinbar.h"

#define ROUNDS 5000

static void run(int n_threads)
{
    spinbar_t b;
    spinbar_init(&b, n_threads);
    atomic_long count = 0, bad = 0, lasts = 0;
    long serial = -1; /* written by the last thread of barrier k: k */
#pragma omp parallel num_threads(n_threads)
    {
        if (omp_get_num_threads() == n_threads) {
            for (long k = 0; k < ROUNDS; k++) {
                atomic_fetch_add(&count, 1);
                if (k == ROUNDS / 2 && omp_get_thread_num() == 0)
                    nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
                unsigned g;
                if (spinbar_arrive(&b, &g)) {
                    atomic_fetch_add(&lasts, 1);
                    serial = k;
                    spinbar_release(&b);
                } else {
                    spinbar_wait(&b, g);
                }
                if (atomic_load(&count) != (long)n_threads * (k + 1) || serial != k)
                    atomic_fetch_add(&bad, 1);
                /* nobody adds for barrier k + 1 before all have checked k */
                spinbar_sync(&b);
            }
        }
    }
    assert_int_equal(atomic_load(&bad), 0);
    assert_int_equal(atomic_load(&lasts), ROUNDS);
}

static void test_barrier(void **state)
{
    (void)state;
    for (int n = 1; n <= 4; n++)
        run(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_barrier),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
