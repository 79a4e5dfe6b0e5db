/* Unit tests for worker/step_cost.h: the online fit and the chunk sizing.
 *
 *   fit recovers known coefficients   steps drawn from t = c0 + c1 d + c2 p + c3 a
 *                                     (a fixed PRNG), exact and with ±3 % noise;
 *   negative terms are dropped        data with no attention cost never gives a
 *                                     negative c3, and the others still fit;
 *   forgetting follows a change       after the machine halves its speed, the
 *                                     fit reaches the new coefficients;
 *   readiness                         needs steps with and without prefill rows,
 *                                     and stays through 400 mixed steps;
 *   chunk sizing                      the largest chunk within the target, by
 *                                     the known coefficients (checked at c and
 *                                     c + 1), never below the floor for a step's
 *                                     first chunk, 0 for a later one that does
 *                                     not fit, the whole max_chunk with no
 *                                     decode rows or no target, the floor while
 *                                     the model is not ready. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>

#include "worker/step_cost.h"

/* a 1.1B-shape model on 2 cores, roughly: 110 ms to read the weights, 2 ms a
 * decode row, 4 ms a prefill row, 0.05 µs per attended position */
static const double K[STEP_COST_N] = {110000.0, 2000.0, 4000.0, 0.05};

static double truth(const double k[STEP_COST_N], const step_cost_rows_t *r)
{
    return k[0] + k[1] * r->n_decode + k[2] * r->n_prefill + k[3] * (double)r->n_attn;
}

/* Knuth's MMIX LCG, high bits: a fixed sequence for every run */
static uint64_t rng = 1;
static uint32_t next_u32(void)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng >> 33);
}

/* A step like the scheduler's: d decode rows at contexts up to 2000, and
 * every other step a prefill chunk of 1..512 at a position up to 1500. */
static step_cost_rows_t random_rows(int i)
{
    step_cost_rows_t r = {0, 0, 0};
    r.n_decode = (int32_t)(next_u32() % 16);
    for (int32_t k = 0; k < r.n_decode; k++)
        r.n_attn += 1 + next_u32() % 2000;
    if (i % 2 || r.n_decode == 0) {
        int32_t pos = (int32_t)(next_u32() % 1500), c = 1 + (int32_t)(next_u32() % 512);
        r.n_prefill = c;
        r.n_attn += step_cost_chunk_attn(pos, c);
    }
    return r;
}

/* Adds n random steps costing k, times 1 ± noise (uniform). */
static void feed(step_cost_t *c, const double k[STEP_COST_N], int n, double noise)
{
    for (int i = 0; i < n; i++) {
        step_cost_rows_t r = random_rows(i);
        double u = (double)(next_u32() % 20001) / 10000.0 - 1.0; /* [-1, 1] */
        step_cost_add(c, &r, truth(k, &r) * (1.0 + noise * u));
        for (int j = 0; j < STEP_COST_N; j++)
            assert_true(c->coef[j] >= 0.0); /* never a negative term */
    }
}

static void assert_close(double got, double want, double rel, const char *what)
{
    if (fabs(got - want) > rel * fabs(want)) {
        fprintf(stderr, "%s: got %g, want %g (±%g %%)\n", what, got, want, rel * 100);
        fail();
    }
}

static void test_fit_exact(void **state)
{
    (void)state;
    step_cost_t c;
    step_cost_init(&c, 0.98);
    feed(&c, K, 200, 0.0);
    assert_true(step_cost_ready(&c));
    static const char *names[] = {"c0", "c1", "c2", "c3"};
    for (int i = 0; i < STEP_COST_N; i++)
        assert_close(c.coef[i], K[i], 1e-4, names[i]);
}

static void test_fit_noisy(void **state)
{
    (void)state;
    step_cost_t c;
    step_cost_init(&c, 0.995);
    feed(&c, K, 600, 0.03);
    /* the terms that carry most of the time fit within 5 %; the predictions
     * of typical steps within 3 % */
    assert_close(c.coef[0], K[0], 0.05, "c0");
    assert_close(c.coef[2], K[2], 0.05, "c2");
    for (int i = 0; i < 50; i++) {
        step_cost_rows_t r = random_rows(i);
        assert_close(step_cost_predict(&c, &r), truth(K, &r), 0.03, "prediction");
    }
}

static void test_fit_non_negative(void **state)
{
    (void)state;
    static const double k0[STEP_COST_N] = {80000.0, 1500.0, 3000.0, 0.0};
    step_cost_t c;
    step_cost_init(&c, 0.98);
    /* ±1 % noise: alone it would make c3 slightly negative about half the time */
    feed(&c, k0, 300, 0.01);
    assert_close(c.coef[0], k0[0], 0.05, "c0");
    assert_close(c.coef[2], k0[2], 0.05, "c2");
}

static void test_fit_follows_change(void **state)
{
    (void)state;
    double slow[STEP_COST_N];
    for (int i = 0; i < STEP_COST_N; i++)
        slow[i] = 2 * K[i]; /* another process took half the cores */
    const double *phase[2] = {K, slow};
    step_cost_t c;
    step_cost_init(&c, 0.98);
    for (int p = 0; p < 2; p++)
        feed(&c, phase[p], 300 + 100 * p, 0.0);
    /* 0.98^400 = 3e-4 of the old data's weight is left: c0 and c2 follow */
    for (int i = 0; i < STEP_COST_N; i += 2)
        assert_close(c.coef[i], slow[i], 0.01, i ? "c2 after the change" : "c0 after the change");
}

static void test_ready(void **state)
{
    (void)state;
    step_cost_t c;
    step_cost_init(&c, 0.98);
    assert_false(step_cost_ready(&c));
    step_cost_rows_t dec = {8, 0, 8000}, pre = {8, 64, 8000 + step_cost_chunk_attn(0, 64)};
    for (int i = 0; i < 10; i++)
        step_cost_add(&c, &dec, truth(K, &dec));
    assert_false(step_cost_ready(&c)); /* never saw a prefill row */
    for (int i = 0; i < 3; i++)
        step_cost_add(&c, &pre, truth(K, &pre));
    assert_true(step_cost_ready(&c));
    /* a long prefill beside streams: 400 mixed steps in a row decay the
     * decode-only count far below the bar (0.98^400), the fit stays ready
     * and still predicts the mixed steps it sees */
    for (int i = 0; i < 400; i++) {
        step_cost_rows_t r = {8, 8 + i % 5, 8000 + step_cost_chunk_attn(10 * i, 8 + i % 5)};
        step_cost_add(&c, &r, truth(K, &r));
    }
    assert_true(c.w_decode_only < 0.01);
    assert_true(step_cost_ready(&c));
    step_cost_rows_t mid = {8, 10, 8000 + step_cost_chunk_attn(4000, 10)};
    assert_close(step_cost_predict(&c, &mid), truth(K, &mid), 0.01, "a mixed step after 400 of them");
    /* ignored: an empty step, a non-positive time */
    step_cost_rows_t none = {0, 0, 0};
    int64_t n = c.n_samples;
    step_cost_add(&c, &none, 1000.0);
    step_cost_add(&c, &dec, 0.0);
    step_cost_add(&c, &dec, NAN);
    assert_int_equal(c.n_samples, n);
}

/* A model whose coefficients are K exactly (fitted from exact samples). */
static void fitted(step_cost_t *c)
{
    step_cost_init(c, 0.98);
    feed(c, K, 200, 0.0);
}

typedef struct chunk_row {
    const char *what;
    step_cost_rows_t base;     /* rows already in the step */
    int32_t pos0, max_chunk, min_chunk;
    double target_ms;
    int32_t want;              /* -1: the largest that fits by K (checked at c and c + 1) */
} chunk_row_t;

static const chunk_row_t chunk_rows[] = {
    {"8 streams, 2x their step: what fits", {8, 0, 8 * 1000}, 0, 512, 16, 2 * 126.4, -1},
    {"8 streams, 4x: what fits, deep in the prompt", {8, 0, 8 * 1000}, 900, 512, 16, 4 * 126.4, -1},
    {"tight target: the floor", {8, 0, 8 * 1000}, 0, 512, 64, 130.0, 64},
    {"floor capped by max_chunk", {8, 0, 8 * 1000}, 0, 20, 64, 130.0, 20},
    {"loose target: max_chunk", {8, 0, 8 * 1000}, 0, 512, 64, 100000.0, 512},
    {"later chunk that fits partly", {8, 100, 8 * 1000 + 5050}, 0, 512, 64, 700.0, -1},
    {"later chunk that does not fit: 0", {8, 100, 8 * 1000 + 5050}, 0, 512, 64, 400.0, 0},
    {"no decode rows: max_chunk", {0, 0, 0}, 0, 512, 64, 1.0, 512},
    {"no decode rows, later chunk: max_chunk", {0, 300, 45150}, 0, 212, 64, 1.0, 212},
    {"no target: max_chunk", {8, 0, 8 * 1000}, 0, 512, 64, 0.0, 512},
    {"max_chunk 0: 0", {8, 0, 8 * 1000}, 0, 0, 64, 300.0, 0},
};

static void test_chunk_sizing(void **state)
{
    (void)state;
    step_cost_t c;
    fitted(&c);
    for (size_t i = 0; i < sizeof chunk_rows / sizeof chunk_rows[0]; i++) {
        const chunk_row_t *t = &chunk_rows[i];
        double target = t->target_ms * 1000.0;
        int32_t got = step_cost_chunk(&c, &t->base, t->pos0, t->max_chunk, t->min_chunk, target);
        if (t->want >= 0) {
            if (got != t->want) {
                fprintf(stderr, "%s: chunk %d, want %d\n", t->what, got, t->want);
                fail();
            }
            continue;
        }
        /* the largest that fits, by the true coefficients (the fit equals
         * them to 1e-4; the targets are not within that of a boundary) */
        step_cost_rows_t at = t->base, above = t->base;
        at.n_prefill += got;
        at.n_attn += step_cost_chunk_attn(t->pos0, got);
        above.n_prefill += got + 1;
        above.n_attn += step_cost_chunk_attn(t->pos0, got + 1);
        if (!(got > 0 && got < t->max_chunk && truth(K, &at) <= target && truth(K, &above) > target)) {
            fprintf(stderr, "%s: chunk %d (%.1f ms, +1: %.1f ms, target %.1f ms)\n", t->what, got,
                    truth(K, &at) / 1000, truth(K, &above) / 1000, t->target_ms);
            fail();
        }
    }
}

static void test_chunk_not_ready(void **state)
{
    (void)state;
    step_cost_t c;
    step_cost_init(&c, 0.98);
    step_cost_rows_t dec = {8, 0, 8000}, later = {8, 64, 8000 + step_cost_chunk_attn(0, 64)};
    assert_int_equal(step_cost_chunk(&c, &dec, 0, 512, 64, 1e9), 64);   /* first chunk: the floor */
    assert_int_equal(step_cost_chunk(&c, &later, 0, 512, 64, 1e9), 0); /* later: nothing */
    step_cost_rows_t none = {0, 0, 0};
    assert_int_equal(step_cost_chunk(&c, &none, 0, 512, 64, 1e9), 512); /* nobody waits */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fit_exact),
        cmocka_unit_test(test_fit_noisy),
        cmocka_unit_test(test_fit_non_negative),
        cmocka_unit_test(test_fit_follows_change),
        cmocka_unit_test(test_ready),
        cmocka_unit_test(test_chunk_sizing),
        cmocka_unit_test(test_chunk_not_ready),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
