/* Unit tests for common/chan: FIFO order, timeouts, the eventfd's level,
 * close semantics, reference counting, and many producers against one
 * consumer on real threads (every item arrives exactly once). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/chan.h"
#include "common/clock.h"

static bool fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

static void test_fifo_and_fd(void **state)
{
    chan_t *c = chan_new(NULL, CHAN_FD);
    int fd = chan_fd(c);
    assert_true(fd >= 0);
    assert_false(fd_readable(fd));
    int v[3] = {1, 2, 3};
    for (int i = 0; i < 3; i++)
        assert_int_equal(chan_push(c, &v[i]), 0);
    assert_true(fd_readable(fd));
    assert_ptr_equal(chan_pop(c, 0), &v[0]);
    assert_true(fd_readable(fd)); /* still two queued */
    assert_ptr_equal(chan_pop(c, 0), &v[1]);
    assert_ptr_equal(chan_pop(c, 0), &v[2]);
    assert_false(fd_readable(fd)); /* empty: lowered */
    assert_null(chan_pop(c, 0));
    chan_unref(&c);
    assert_null(c);

    chan_t *nofd = chan_new(NULL, 0);
    assert_int_equal(chan_fd(nofd), -1);
    chan_unref(&nofd);
}

static void test_timeout(void **state)
{
    chan_t *c = chan_new(NULL, 0);
    int64_t t0 = clock_now_us();
    assert_null(chan_pop(c, 30000));
    int64_t dt = clock_now_us() - t0;
    assert_true(dt >= 30000);
    assert_true(dt < 2000000);
    chan_unref(&c);
}

static void test_close(void **state)
{
    chan_t *c = chan_new(NULL, CHAN_FD);
    int a = 1, b = 2;
    assert_int_equal(chan_push(c, &a), 0);
    chan_close(c);
    assert_true(chan_closed(c));
    assert_int_equal(chan_push(c, &b), -1);   /* caller keeps b */
    assert_true(fd_readable(chan_fd(c)));
    assert_ptr_equal(chan_pop(c, -1), &a);    /* queued items still come out */
    assert_null(chan_pop(c, -1));             /* closed and empty: no blocking */
    assert_true(fd_readable(chan_fd(c)));     /* stays readable once closed */
    chan_unref(&c);
}

static int n_freed;
static void count_free(void *p)
{
    n_freed++;
    free(p);
}

static void test_refs_free_leftovers(void **state)
{
    n_freed = 0;
    chan_t *c = chan_new(count_free, 0);
    chan_t *other = chan_ref(c);
    for (int i = 0; i < 4; i++)
        chan_push(c, malloc(8));
    free(chan_pop(c, 0));
    chan_unref(&c);
    assert_int_equal(n_freed, 0);   /* `other` still holds it */
    chan_unref(&other);
    assert_int_equal(n_freed, 3);   /* the three left behind */
}

enum { N_PRODUCERS = 4, N_PER = 5000 };

static void *producer(void *arg)
{
    chan_t *c = arg;
    static int values[N_PRODUCERS * N_PER];
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static int next = 0;
    for (int i = 0; i < N_PER; i++) {
        pthread_mutex_lock(&mu);
        int k = next++;
        values[k] = k;
        pthread_mutex_unlock(&mu);
        assert_int_equal(chan_push(c, &values[k]), 0);
    }
    chan_unref(&c);
    return NULL;
}

static void test_threads(void **state)
{
    chan_t *c = chan_new(NULL, CHAN_FD);
    pthread_t th[N_PRODUCERS];
    for (int i = 0; i < N_PRODUCERS; i++)
        pthread_create(&th[i], NULL, producer, chan_ref(c));
    static bool seen[N_PRODUCERS * N_PER];
    int got = 0;
    while (got < N_PRODUCERS * N_PER) {
        /* wait on the fd like an event loop would, then drain */
        struct pollfd p = {.fd = chan_fd(c), .events = POLLIN};
        assert_int_equal(poll(&p, 1, 5000), 1);
        int *v;
        while ((v = chan_pop(c, 0))) {
            assert_false(seen[*v]);
            seen[*v] = true;
            got++;
        }
    }
    for (int i = 0; i < N_PRODUCERS; i++)
        pthread_join(th[i], NULL);
    assert_false(fd_readable(chan_fd(c)));
    chan_unref(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fifo_and_fd),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_close),
        cmocka_unit_test(test_refs_free_leftovers),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
