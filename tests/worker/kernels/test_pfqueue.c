/* Unit tests for worker/kernels/pfqueue.h: the per-thread prefetch queue's
 * bookkeeping (the prefetches themselves are hints with no visible effect;
 * what can go wrong is which lines are issued when, and the counts the
 * kernels' hooks test).
 *
 * Claims checked:
 *   - an empty queue: n is 0 and the hooks (pfq_step, pfq_tick_at,
 *     pfq_drain) leave it so;
 *   - spans are issued line by line from their first cache line, the
 *     foreground list before the background one: with 10 foreground lines
 *     and 5 background lines queued, issuing 4 moves the foreground span's
 *     cursor 4 lines on, issuing 10 more finishes it and takes 4 of the
 *     background span, and n counts the spans not finished (2, 2, 1);
 *   - pfq_drain finishes the foreground list only; pfq_clear_bg drops what
 *     is left of the background list and n follows;
 *   - a list holds PFQ_SPANS spans, more are dropped (n stays the count
 *     of spans held), and zero-byte spans are not queued;
 *   - pfq_self() is this thread's queue.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "worker/kernels/pfqueue.h"

static _Alignas(64) char g_buf[64 * 64];

static void reset(void)
{
    memset(&pfq_tls, 0, sizeof pfq_tls);
}

static void test_empty(void **state)
{
    (void)state;
    reset();
    assert_ptr_equal(pfq_self(), &pfq_tls);
    assert_int_equal(pfq_tls.n, 0);
    pfq_step();
    pfq_tick_at(pfq_self());
    pfq_drain();
    assert_int_equal(pfq_tls.n, 0);
    pfq_push(g_buf, 0);
    pfq_push_bg(g_buf, 0);
    assert_int_equal(pfq_tls.n, 0);
}

static void test_order(void **state)
{
    (void)state;
    reset();
    pfq_push(g_buf + 10, 10 * 64 - 10); /* lines 0..9 (from its cache line) */
    pfq_push_bg(g_buf + 20 * 64, 5 * 64); /* lines 20..24 */
    assert_int_equal(pfq_tls.n, 2);
    assert_ptr_equal(pfq_tls.fg.cur[0], g_buf);
    pfq_issue(4);
    assert_ptr_equal(pfq_tls.fg.cur[0], g_buf + 4 * 64);
    assert_ptr_equal(pfq_tls.bg.cur[0], g_buf + 20 * 64);
    assert_int_equal(pfq_tls.n, 2);
    pfq_issue(10); /* 6 foreground lines, then 4 background ones */
    assert_int_equal(pfq_tls.fg.n, 0);
    assert_int_equal(pfq_tls.bg.head, 0);
    assert_ptr_equal(pfq_tls.bg.cur[0], g_buf + 24 * 64);
    assert_int_equal(pfq_tls.n, 1);
    pfq_tick_at(pfq_self()); /* the last background line */
    assert_int_equal(pfq_tls.n, 0);
    assert_int_equal(pfq_tls.bg.n, 0);
}

static void test_drain_and_clear(void **state)
{
    (void)state;
    reset();
    pfq_push(g_buf, 3 * 64);
    pfq_push(g_buf + 8 * 64, 64);
    pfq_push_bg(g_buf + 16 * 64, 3 * 64);
    pfq_push_bg(g_buf + 32 * 64, 3 * 64);
    assert_int_equal(pfq_tls.n, 4);
    pfq_drain();
    assert_int_equal(pfq_tls.fg.n, 0);
    assert_int_equal(pfq_tls.bg.n, 2);
    assert_int_equal(pfq_tls.n, 2);
    pfq_issue(4); /* the first background span and one line of the second */
    assert_int_equal(pfq_tls.n, 1);
    pfq_clear_bg();
    assert_int_equal(pfq_tls.n, 0);
    assert_int_equal(pfq_tls.bg.n, 0);
    assert_int_equal(pfq_tls.bg.head, 0);
}

static void test_full(void **state)
{
    (void)state;
    reset();
    for (int i = 0; i < PFQ_SPANS + 5; i++)
        pfq_push(g_buf + (i % 64) * 64, 64);
    assert_int_equal(pfq_tls.fg.n, PFQ_SPANS);
    assert_int_equal(pfq_tls.n, PFQ_SPANS);
    pfq_push_bg(g_buf, 64);
    assert_int_equal(pfq_tls.n, PFQ_SPANS + 1);
    pfq_issue(PFQ_SPANS + 1);
    assert_int_equal(pfq_tls.n, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_drain_and_clear),
        cmocka_unit_test(test_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
