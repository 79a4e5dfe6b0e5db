/* Unit tests for gateway/prio_queue: tier order, FIFO within a tier, aging
 * (time injected, no sleeping), the bound, remove, expire, and a randomized
 * comparison against a naive reference that evaluates the effective-priority
 * formula directly at pop time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/prio_queue.h"

#define S (1000000LL) /* one second in µs */

static prio_queue_t *mkq(size_t max, double b0, double b1, double b2, double aging)
{
    prio_queue_config_t c;
    prio_queue_config_default(&c);
    c.max_entries = max;
    c.tier_base[0] = b0;
    c.tier_base[1] = b1;
    c.tier_base[2] = b2;
    c.aging_per_s = aging;
    prio_queue_t *q = prio_queue_new(&c);
    assert_non_null(q);
    return q;
}

static uint64_t pop_id(prio_queue_t *q)
{
    prio_queue_entry_t e;
    assert_int_equal(prio_queue_pop(q, &e), PRIO_QUEUE_OK);
    return e.id;
}

static void test_tier_names(void **st)
{
    (void)st;
    prio_tier_t t;
    assert_int_equal(prio_tier_parse("high", &t), 0);
    assert_int_equal(t, PRIO_TIER_HIGH);
    assert_int_equal(prio_tier_parse("low", &t), 0);
    assert_int_equal(t, PRIO_TIER_LOW);
    assert_int_equal(prio_tier_parse("HIGH", &t), -1);
    assert_int_equal(prio_tier_parse("", &t), -1);
    assert_int_equal(prio_tier_parse(NULL, &t), -1);
    assert_string_equal(prio_tier_name(PRIO_TIER_NORMAL), "normal");
}

/* The oldest waiter per tier (for /health): pushes out of time order,
 * then removals of the oldest, down to empty tiers. */
static void test_oldest_per_tier(void **st)
{
    (void)st;
    prio_queue_t *q = mkq(16, 0, 1, 2, 1.0 / 30);
    assert_int_equal(prio_queue_oldest_us(q, PRIO_TIER_HIGH), 0);
    assert_int_equal(prio_queue_push(q, 1, PRIO_TIER_LOW, 50 * S, 0, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_push(q, 2, PRIO_TIER_LOW, 20 * S, 0, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_push(q, 3, PRIO_TIER_HIGH, 70 * S, 0, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_push(q, 4, PRIO_TIER_LOW, 90 * S, 0, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_oldest_us(q, PRIO_TIER_LOW), 20 * S);
    assert_int_equal(prio_queue_oldest_us(q, PRIO_TIER_HIGH), 70 * S);
    assert_int_equal(prio_queue_oldest_us(q, PRIO_TIER_NORMAL), 0);
    assert_int_equal(prio_queue_remove(q, 2, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_oldest_us(q, PRIO_TIER_LOW), 50 * S);
    assert_int_equal(pop_id(q), 3);
    assert_int_equal(prio_queue_oldest_us(q, PRIO_TIER_HIGH), 0);
    assert_int_equal(prio_queue_oldest_us(q, (prio_tier_t)7), 0);
    prio_queue_free(&q);
}

static void test_bad_config(void **st)
{
    (void)st;
    prio_queue_config_t c;
    prio_queue_config_default(&c);
    c.max_entries = 0;
    assert_null(prio_queue_new(&c));
    prio_queue_config_default(&c);
    c.aging_per_s = -1;
    assert_null(prio_queue_new(&c));
    prio_queue_config_default(&c);
    c.tier_base[2] = 0.5; /* low more urgent than normal */
    assert_null(prio_queue_new(&c));
    assert_null(prio_queue_new(NULL));
}

static void test_tiers_and_fifo(void **st)
{
    (void)st;
    prio_queue_t *q = mkq(16, 0, 1, 2, 0); /* no aging: strict tiers */
    /* Interleave tiers, all at the same instant, ids in push order. */
    const prio_tier_t tiers[] = {PRIO_TIER_LOW, PRIO_TIER_NORMAL, PRIO_TIER_HIGH, PRIO_TIER_LOW,
                                 PRIO_TIER_HIGH, PRIO_TIER_NORMAL, PRIO_TIER_LOW, PRIO_TIER_HIGH};
    for (uint64_t i = 0; i < 8; i++)
        assert_int_equal(prio_queue_push(q, 100 + i, tiers[i], 5 * S, 0, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_len_tier(q, PRIO_TIER_HIGH), 3);
    assert_int_equal(prio_queue_len_tier(q, PRIO_TIER_LOW), 3);
    /* Expected: each tier in push order (FIFO), tiers high → low. */
    const uint64_t want[] = {102, 104, 107, 101, 105, 100, 103, 106};
    for (int i = 0; i < 8; i++)
        assert_int_equal(pop_id(q), want[i]);
    assert_int_equal(prio_queue_pop(q, NULL), PRIO_QUEUE_EMPTY);
    assert_int_equal(prio_queue_peek(q, NULL), PRIO_QUEUE_EMPTY);
    prio_queue_free(&q);
    assert_null(q);
    prio_queue_free(&q); /* NULL-safe */
}

static void test_fifo_by_time_not_push_order(void **st)
{
    (void)st;
    prio_queue_t *q = mkq(8, 0, 1, 2, 0.1);
    /* Same tier, pushed out of time order: the older leaves first. */
    assert_int_equal(prio_queue_push(q, 1, PRIO_TIER_NORMAL, 20 * S, 0, NULL), 0);
    assert_int_equal(prio_queue_push(q, 2, PRIO_TIER_NORMAL, 10 * S, 0, NULL), 0);
    assert_int_equal(prio_queue_push(q, 3, PRIO_TIER_NORMAL, 15 * S, 0, NULL), 0);
    assert_int_equal(pop_id(q), 2);
    assert_int_equal(pop_id(q), 3);
    assert_int_equal(pop_id(q), 1);
    prio_queue_free(&q);
}

static void test_aging_overtake(void **st)
{
    (void)st;
    /* Defaults: bases 0/1/2, aging 1/30 per s: a low request equals a fresh
     * normal one after exactly 30 s, a fresh high one after 60 s. */
    prio_queue_config_t c;
    prio_queue_config_default(&c);
    prio_queue_t *q = prio_queue_new(&c);
    assert_non_null(q);
    const int64_t t0 = 1000 * S;
    assert_int_equal(prio_queue_push(q, 1, PRIO_TIER_LOW, t0, 0, NULL), 0);
    /* A normal request 29.999 s later still beats the low one ... */
    assert_int_equal(prio_queue_push(q, 2, PRIO_TIER_NORMAL, t0 + 30 * S - 1000, 0, NULL), 0);
    assert_int_equal(pop_id(q), 2);
    /* ... one arriving at exactly +30 s ties and loses to the older low one ... */
    assert_int_equal(prio_queue_push(q, 3, PRIO_TIER_NORMAL, t0 + 30 * S, 0, NULL), 0);
    assert_int_equal(pop_id(q), 1);
    assert_int_equal(pop_id(q), 3);
    /* ... and one arriving later than +30 s loses outright. */
    assert_int_equal(prio_queue_push(q, 4, PRIO_TIER_LOW, t0, 0, NULL), 0);
    assert_int_equal(prio_queue_push(q, 5, PRIO_TIER_NORMAL, t0 + 31 * S, 0, NULL), 0);
    prio_queue_entry_t e;
    assert_int_equal(prio_queue_peek(q, &e), 0);
    assert_int_equal(e.id, 4);
    assert_int_equal(pop_id(q), 4);
    assert_int_equal(pop_id(q), 5);
    /* Low vs high: overtakes after 60 s. */
    assert_int_equal(prio_queue_push(q, 6, PRIO_TIER_LOW, t0, 0, NULL), 0);
    assert_int_equal(prio_queue_push(q, 7, PRIO_TIER_HIGH, t0 + 59 * S, 0, NULL), 0);
    assert_int_equal(prio_queue_push(q, 8, PRIO_TIER_HIGH, t0 + 61 * S, 0, NULL), 0);
    assert_int_equal(pop_id(q), 7);
    assert_int_equal(pop_id(q), 6);
    assert_int_equal(pop_id(q), 8);
    /* The effective priority formula, evaluated directly. */
    prio_queue_entry_t x = {.id = 9, .tier = PRIO_TIER_LOW, .t_enqueue_us = t0};
    assert_float_equal(prio_queue_effective(q, &x, t0), 2.0, 1e-12);
    assert_float_equal(prio_queue_effective(q, &x, t0 + 30 * S), 1.0, 1e-9);
    prio_queue_free(&q);
}

static void test_bound_and_duplicates(void **st)
{
    (void)st;
    prio_queue_t *q = mkq(3, 0, 1, 2, 0.5);
    assert_int_equal(prio_queue_capacity(q), 3);
    for (uint64_t i = 0; i < 3; i++)
        assert_int_equal(prio_queue_push(q, i, PRIO_TIER_LOW, (int64_t)i, 0, NULL), 0);
    assert_int_equal(prio_queue_push(q, 9, PRIO_TIER_HIGH, 0, 0, NULL), PRIO_QUEUE_FULL);
    assert_int_equal(prio_queue_push(q, 1, PRIO_TIER_HIGH, 0, 0, NULL), PRIO_QUEUE_DUPLICATE);
    assert_int_equal(prio_queue_push(q, 9, (prio_tier_t)7, 0, 0, NULL), PRIO_QUEUE_BAD_ARG);
    assert_int_equal(prio_queue_len(q), 3);
    assert_int_equal(pop_id(q), 0);
    assert_int_equal(prio_queue_push(q, 9, PRIO_TIER_HIGH, 0, 0, NULL), PRIO_QUEUE_OK);
    assert_int_equal(pop_id(q), 9);
    prio_queue_free(&q);
}

static void test_remove(void **st)
{
    (void)st;
    prio_queue_t *q = mkq(64, 0, 1, 2, 0);
    int tag[40];
    for (int i = 0; i < 40; i++) {
        tag[i] = i;
        assert_int_equal(prio_queue_push(q, (uint64_t)i, (prio_tier_t)(i % 3), i * S, 0, &tag[i]), 0);
    }
    prio_queue_entry_t e;
    assert_int_equal(prio_queue_remove(q, 0, &e), PRIO_QUEUE_OK); /* the current head */
    assert_int_equal(e.id, 0);
    assert_ptr_equal(e.data, &tag[0]);
    assert_int_equal(prio_queue_remove(q, 0, &e), PRIO_QUEUE_NOT_FOUND);
    assert_int_equal(prio_queue_remove(q, 1000, NULL), PRIO_QUEUE_NOT_FOUND);
    for (int i = 1; i < 40; i += 2)
        assert_int_equal(prio_queue_remove(q, (uint64_t)i, NULL), PRIO_QUEUE_OK);
    assert_int_equal(prio_queue_len(q), 19);
    assert_false(prio_queue_contains(q, 5));
    assert_true(prio_queue_contains(q, 6));
    /* Survivors: even ids 2..38; high tier (i%3==0) first, in time order. */
    int64_t last_tier = -1, last_t = -1;
    while (prio_queue_pop(q, &e) == PRIO_QUEUE_OK) {
        assert_int_equal(e.id % 2, 0);
        assert_int_equal(*(int *)e.data, (int)e.id);
        if ((int64_t)e.tier == last_tier)
            assert_true(e.t_enqueue_us > last_t);
        else
            assert_true((int64_t)e.tier > last_tier);
        last_tier = e.tier;
        last_t = e.t_enqueue_us;
    }
    prio_queue_free(&q);
}

typedef struct {
    uint64_t ids[64];
    int64_t deadlines[64];
    size_t n;
} expired_t;

static void on_expire(const prio_queue_entry_t *e, void *ctx)
{
    expired_t *x = ctx;
    x->ids[x->n] = e->id;
    x->deadlines[x->n] = e->t_deadline_us;
    x->n++;
}

static void test_expire(void **st)
{
    (void)st;
    prio_queue_t *q = mkq(32, 0, 1, 2, 0.1);
    /* id i has deadline (30 - i) s, ids ≥ 20 no deadline. */
    for (uint64_t i = 0; i < 25; i++)
        assert_int_equal(prio_queue_push(q, i, (prio_tier_t)(i % 3), 0, i < 20 ? (30 - (int64_t)i) * S : 0,
                                         NULL), 0);
    expired_t x = {0};
    assert_int_equal(prio_queue_expire(q, 10 * S, on_expire, &x), 0);
    assert_int_equal(prio_queue_expire(q, 15 * S, on_expire, &x), 5); /* ids 15..19 */
    assert_int_equal(x.n, 5);
    for (size_t i = 0; i < x.n; i++) {
        assert_true(x.ids[i] >= 15 && x.ids[i] <= 19);
        assert_true(x.deadlines[i] <= 15 * S);
        if (i > 0)
            assert_true(x.deadlines[i] >= x.deadlines[i - 1]); /* deadline order */
        assert_false(prio_queue_contains(q, x.ids[i]));
    }
    assert_int_equal(prio_queue_len(q), 20);
    /* Removing the earliest-deadline entries leaves the cached bound stale; a
     * later expire must still find the right set. */
    assert_int_equal(prio_queue_remove(q, 14, NULL), 0);
    assert_int_equal(prio_queue_remove(q, 13, NULL), 0);
    x.n = 0;
    assert_int_equal(prio_queue_expire(q, 20 * S, on_expire, &x), 3); /* 10, 11, 12 */
    assert_int_equal(x.ids[0], 12);
    assert_int_equal(x.ids[2], 10);
    assert_int_equal(prio_queue_expire(q, 1000 * S, NULL, NULL), 10); /* 0..9 */
    assert_int_equal(prio_queue_len(q), 5);                             /* no deadline */
    prio_queue_free(&q);
}

/* ---- randomized check against a naive reference ------------------------- */

typedef struct {
    uint64_t id;
    int tier;
    int64_t t;
    int64_t deadline;
    uint64_t seq;
} ref_t;

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Index of the entry the spec says leaves next at `now`: minimal effective
 * priority, ties → oldest enqueue time, then first pushed. Values are chosen so
 * the arithmetic is exact in binary (whole seconds, aging 1/4 per second). */
static size_t ref_best(const ref_t *r, size_t n, const double *base, double aging, int64_t now)
{
    size_t best = 0;
    double best_eff = 0;
    for (size_t i = 0; i < n; i++) {
        double eff = base[r[i].tier] - aging * (double)((now - r[i].t) / S);
        if (i == 0 || eff < best_eff ||
            (eff == best_eff && (r[i].t < r[best].t || (r[i].t == r[best].t && r[i].seq < r[best].seq)))) {
            best = i;
            best_eff = eff;
        }
    }
    return best;
}

static void run_random(double aging, int n_ops)
{
    const double base[3] = {0, 1, 2};
    const size_t cap = 200;
    prio_queue_t *q = mkq(cap, base[0], base[1], base[2], aging);
    ref_t *ref = calloc(cap, sizeof(ref_t));
    size_t n = 0;
    uint64_t next_id = 1, seq = 0;
    int64_t now = 1000 * S;
    for (int op = 0; op < n_ops; op++) {
        now += (int64_t)(rnd() % 3) * S; /* time moves on in whole seconds */
        unsigned k = (unsigned)(rnd() % 10);
        if (k < 5) { /* push */
            int tier = (int)(rnd() % 3);
            int64_t dl = (rnd() % 4 == 0) ? now + (int64_t)(1 + rnd() % 40) * S : 0;
            int rc = prio_queue_push(q, next_id, (prio_tier_t)tier, now, dl, NULL);
            if (n == cap) {
                assert_int_equal(rc, PRIO_QUEUE_FULL);
            } else {
                assert_int_equal(rc, PRIO_QUEUE_OK);
                ref[n++] = (ref_t){next_id, tier, now, dl, seq++};
            }
            next_id++;
        } else if (k < 8) { /* pop */
            prio_queue_entry_t e;
            int rc = prio_queue_pop(q, &e);
            if (n == 0) {
                assert_int_equal(rc, PRIO_QUEUE_EMPTY);
                continue;
            }
            assert_int_equal(rc, PRIO_QUEUE_OK);
            size_t b = ref_best(ref, n, base, aging, now);
            assert_int_equal(e.id, ref[b].id);
            ref[b] = ref[--n];
        } else if (k < 9) { /* remove a random (maybe absent) id */
            uint64_t id = 1 + rnd() % next_id;
            size_t i = 0;
            while (i < n && ref[i].id != id)
                i++;
            int rc = prio_queue_remove(q, id, NULL);
            if (i == n) {
                assert_int_equal(rc, PRIO_QUEUE_NOT_FOUND);
            } else {
                assert_int_equal(rc, PRIO_QUEUE_OK);
                ref[i] = ref[--n];
            }
        } else { /* expire */
            size_t want = 0;
            for (size_t i = 0; i < n;) {
                if (ref[i].deadline > 0 && ref[i].deadline <= now) {
                    ref[i] = ref[--n];
                    want++;
                } else {
                    i++;
                }
            }
            assert_int_equal(prio_queue_expire(q, now, NULL, NULL), want);
        }
        assert_int_equal(prio_queue_len(q), n);
        size_t per_tier[3] = {0};
        for (size_t i = 0; i < n; i++)
            per_tier[ref[i].tier]++;
        for (int t = 0; t < 3; t++)
            assert_int_equal(prio_queue_len_tier(q, (prio_tier_t)t), per_tier[t]);
    }
    /* Drain: the order must keep matching the reference. */
    while (n > 0) {
        size_t b = ref_best(ref, n, base, aging, now);
        assert_int_equal(pop_id(q), ref[b].id);
        ref[b] = ref[--n];
    }
    free(ref);
    prio_queue_free(&q);
}

static void test_random_vs_reference(void **st)
{
    (void)st;
    run_random(0.25, 20000); /* aging: low = normal after 4 s */
    run_random(0.0, 20000);  /* strict tiers */
    run_random(4.0, 20000);  /* fast aging: age dominates */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tier_names),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_oldest_per_tier),
        cmocka_unit_test(test_tiers_and_fifo),
        cmocka_unit_test(test_fifo_by_time_not_push_order),
        cmocka_unit_test(test_aging_overtake),
        cmocka_unit_test(test_bound_and_duplicates),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_expire),
        cmocka_unit_test(test_random_vs_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
