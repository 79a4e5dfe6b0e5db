/* Unit tests for worker/sampler. Every expected value is computed here by a
 * straightforward reference (full sorts, double-precision softmax), never
 * taken from the sampler itself. Distribution tests use Pearson's chi-square
 * with a fixed seed and the alpha = 0.001 critical value for the test's
 * degrees of freedom. SAMPLER_BENCH=1 runs a benchmark instead (bench_sample). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "worker/sampler.h"

/* ---- test-side helpers -------------------------------------------------- */

static uint64_t trng_state;
static uint64_t trng(void)
{
    uint64_t z = (trng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
static double trng_unif(void) { return (double)(trng() >> 11) * 0x1.0p-53; }
static float trng_normal(void)
{
    double u1 = trng_unif() + 1e-300, u2 = trng_unif();
    return (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
}
static void random_logits(float *l, int n, float scale)
{
    for (int i = 0; i < n; i++)
        l[i] = scale * trng_normal();
}

static int ref_argmax(const float *l, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > l[b])
            b = i;
    return b;
}

typedef struct { double v; int id; } ref_t;
static int ref_cmp(const void *x, const void *y)
{
    const ref_t *a = x, *b = y;
    if (a->v != b->v)
        return a->v > b->v ? -1 : 1;
    return a->id - b->id;
}

/* Reference distribution of steps 6-9 on already processed logits z:
 * prob[i] (0 for dropped tokens). Straightforward: sort everything. */
static void ref_dist(const float *z, int n, float temp, int top_k, float top_p, float min_p, double *prob)
{
    ref_t *r = malloc((size_t)n * sizeof *r);
    for (int i = 0; i < n; i++)
        r[i] = (ref_t){z[i], i};
    qsort(r, (size_t)n, sizeof *r, ref_cmp);
    int keep = (top_k > 0 && top_k < n) ? top_k : n;
    double m = r[0].v, tot = 0;
    for (int i = 0; i < keep; i++)
        tot += exp((r[i].v - m) / temp);
    if (top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < keep; i++) {
            acc += exp((r[i].v - m) / temp);
            if (acc >= (double)top_p * tot) {
                keep = i + 1;
                break;
            }
        }
    }
    for (int i = 0; i < n; i++)
        prob[i] = 0;
    double kept = 0;
    for (int i = 0; i < keep; i++) {
        double p = exp((r[i].v - m) / temp); /* p_max = 1 */
        if (min_p > 0 && p < min_p)
            continue;
        prob[r[i].id] = p;
        kept += p;
    }
    for (int i = 0; i < n; i++)
        prob[i] /= kept;
    free(r);
}

/* Chi-square critical value at alpha = 0.001: table for small df,
 * Wilson-Hilferty approximation above. */
static double chi2_crit(int df)
{
    static const double t[] = {0, 10.828, 13.816, 16.266, 18.467, 20.515, 22.458,
                                24.322, 26.124, 27.877, 29.588, 31.264};
    if (df <= 11)
        return t[df];
    double z = 3.0902, k = 2.0 / (9.0 * df);
    return df * pow(1 - k + z * sqrt(k), 3);
}

/* Draws n_draw tokens and checks them against prob: tokens with prob 0
 * never appear, and the counts pass chi-square. */
static void check_dist(sampler_t *s, const float *logits, int n, const double *prob, int n_draw)
{
    int *cnt = calloc((size_t)n, sizeof *cnt);
    for (int d = 0; d < n_draw; d++) {
        int32_t t = sampler_sample(s, logits, NULL);
        assert_true(t >= 0 && t < n);
        cnt[t]++;
    }
    double chi = 0;
    int df = -1;
    for (int i = 0; i < n; i++) {
        if (prob[i] == 0) {
            if (cnt[i] != 0)
                fail_msg("token %d has probability 0 but was drawn %d times", i, cnt[i]);
            continue;
        }
        double e = prob[i] * n_draw;
        assert_true(e >= 5); /* chi-square validity: tests pick their logits so */
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
        df++;
    }
    if (df > 0) {
        double crit = chi2_crit(df);
        printf("# chi2 = %.2f, df = %d, critical(0.001) = %.2f\n", chi, df, crit);
        if (chi > crit)
            fail_msg("chi-square %.2f > %.2f (df %d)", chi, crit, df);
    }
    free(cnt);
}

static sampler_params_t params(void)
{
    sampler_params_t p;
    sampler_params_default(&p);
    p.has_seed = true;
    p.seed = 1234;
    return p;
}

/* ---- tests -------------------------------------------------------------- */

static void test_validate(void **state)
{
    (void)state;
    sampler_bias_t bad_tok = {10, 1.0f}, bad_val = {1, NAN};
    struct { const char *what; sampler_params_t p; } cases[] = {
        {"negative temperature", params()}, {"nan temperature", params()},
        {"top_p 0", params()},              {"top_p > 1", params()},
        {"min_p > 1", params()},            {"repetition_penalty 0", params()},
        {"window < 0", params()},           {"inf presence", params()},
        {"bias token", params()},           {"bias value", params()},
        {"bias NULL", params()},            {"21 logprobs", params()},
    };
    cases[0].p.temperature = -1;
    cases[1].p.temperature = NAN;
    cases[2].p.top_p = 0;
    cases[3].p.top_p = 1.5f;
    cases[4].p.min_p = 1.1f;
    cases[5].p.repetition_penalty = 0;
    cases[6].p.repetition_last_n = -1;
    cases[7].p.presence_penalty = INFINITY;
    cases[8].p.logit_bias = &bad_tok;
    cases[8].p.n_logit_bias = 1;
    cases[9].p.logit_bias = &bad_val;
    cases[9].p.n_logit_bias = 1;
    cases[10].p.n_logit_bias = 1;
    cases[11].p.n_top_logprobs = 21;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *why = NULL;
        if (sampler_params_validate(&cases[i].p, 10, &why) != -1 || !why)
            fail_msg("case '%s' accepted", cases[i].what);
        assert_null(sampler_new(&cases[i].p, 10));
    }
    sampler_params_t ok = params();
    const char *why = "x";
    assert_int_equal(sampler_params_validate(&ok, 10, &why), 0);
    assert_null(why);
    assert_null(sampler_new(&ok, 0));
    sampler_t *s = sampler_new(&ok, 10);
    assert_non_null(s);
    assert_int_equal(sampler_accept(s, 10), -1);
    assert_int_equal(sampler_accept(s, -1), -1);
    int32_t pr[2] = {3, 99};
    assert_int_equal(sampler_accept_prompt(s, pr, 2), -1);
    sampler_free(&s);
    assert_null(s);
}

static void test_greedy(void **state)
{
    (void)state;
    trng_state = 1;
    enum { V = 1000 };
    float l[V];
    sampler_params_t p = params();
    p.temperature = 0;
    sampler_t *s = sampler_new(&p, V);
    for (int r = 0; r < 50; r++) {
        random_logits(l, V, 3);
        assert_int_equal(sampler_sample(s, l, NULL), ref_argmax(l, V));
    }
    /* ties go to the lowest id */
    for (int i = 0; i < V; i++)
        l[i] = 0;
    l[700] = l[300] = l[900] = 2;
    assert_int_equal(sampler_sample(s, l, NULL), 300);
    sampler_free(&s);

    /* temperature -> 0: with logit gaps >= 0.05 and T = 1e-3 every other
     * token has relative probability <= exp(-50) */
    for (int i = 0; i < V; i++)
        l[i] = 0.05f * (float)((i * 7919) % V);
    int am = ref_argmax(l, V);
    for (float t = 1e-3f; t > 1e-40f; t *= 1e-6f) {
        p.temperature = t;
        for (uint64_t seed = 0; seed < 100; seed++) {
            p.seed = seed;
            s = sampler_new(&p, V);
            assert_int_equal(sampler_sample(s, l, NULL), am);
            sampler_free(&s);
        }
    }

    /* top_k = 1 at T = 1 is greedy */
    p = params();
    p.top_k = 1;
    s = sampler_new(&p, V);
    for (int r = 0; r < 50; r++) {
        random_logits(l, V, 1);
        assert_int_equal(sampler_sample(s, l, NULL), ref_argmax(l, V));
    }
    sampler_free(&s);
}

/* Chi-square of the full pipeline against the reference, small vocab. */
static void test_distribution(void **state)
{
    (void)state;
    enum { V = 12 };
    float l[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.7f, -1.0f, 1.5f, 0.0f, -0.2f, 0.9f, 1.2f, -0.7f};
    double prob[V];
    struct { float t; int k; float top_p, min_p; } cfg[] = {
        {1.0f, 0, 1.0f, 0.0f},   /* plain softmax */
        {0.7f, 5, 1.0f, 0.0f},   /* temperature + top-k */
        {1.0f, 0, 0.8f, 0.0f},   /* top-p */
        {1.3f, 0, 1.0f, 0.3f},   /* min-p */
        {0.9f, 8, 0.9f, 0.15f},  /* all together */
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sampler_params_t p = params();
        p.seed = 42 + c;
        p.temperature = cfg[c].t;
        p.top_k = cfg[c].k;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        sampler_t *s = sampler_new(&p, V);
        ref_dist(l, V, p.temperature, p.top_k, p.top_p, p.min_p, prob);
        check_dist(s, l, V, prob, 40000);
        sampler_free(&s);
    }
}

/* top-p keeps exactly the smallest prefix reaching p. */
static void test_top_p_set(void **state)
{
    (void)state;
    /* probabilities 0.5, 0.25, 0.15, 0.1 (shuffled): p = 0.7 -> {0.5, 0.25};
     * p = 0.8 -> {0.5, 0.25, 0.15}; p = 0.5 -> {0.5} */
    float l[4] = {logf(0.15f), logf(0.5f), logf(0.1f), logf(0.25f)};
    struct { float p; int allowed[4]; } cases[] = {
        {0.7f, {0, 1, 0, 1}}, {0.8f, {1, 1, 0, 1}}, {0.45f, {0, 1, 0, 0}}, {0.95f, {1, 1, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampler_params_t p = params();
        p.top_p = cases[c].p;
        sampler_t *s = sampler_new(&p, 4);
        int seen[4] = {0};
        for (int d = 0; d < 4000; d++)
            seen[sampler_sample(s, l, NULL)]++;
        for (int i = 0; i < 4; i++)
            if ((seen[i] > 0) != cases[c].allowed[i])
                fail_msg("top_p %.2f: token %d drawn %d times", cases[c].p, i, seen[i]);
        sampler_free(&s);
    }
}

/* Large vocab: the selection paths (multi-round nucleus, quickselect) keep
 * exactly the reference sets. */
static void test_large_vocab_sets(void **state)
{
    (void)state;
    enum { V = 151936 };
    float *l = malloc(V * sizeof *l);
    double *prob = malloc(V * sizeof *prob);
    trng_state = 7;
    random_logits(l, V, 0.5f); /* flat: the nucleus spans tens of thousands */
    struct { int k; float top_p, min_p; } cfg[] = {{50, 1, 0}, {0, 0.9f, 0}, {0, 1, 0.9f}, {1000, 0.5f, 0.5f}};
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sampler_params_t p = params();
        p.top_k = cfg[c].k;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        sampler_t *s = sampler_new(&p, V);
        ref_dist(l, V, 1.0f, p.top_k, p.top_p, p.min_p, prob);
        int n_kept = 0;
        for (int i = 0; i < V; i++)
            n_kept += prob[i] > 0;
        for (int d = 0; d < 100; d++) {
            int32_t t = sampler_sample(s, l, NULL);
            if (!(prob[t] > 0))
                fail_msg("config %zu: token %d outside the reference set of %d", c, t, n_kept);
        }
        sampler_free(&s);
    }
    /* all equal: top-k keeps the lowest ids */
    for (int i = 0; i < V; i++)
        l[i] = 0.25f;
    sampler_params_t p = params();
    p.top_k = 10;
    sampler_t *s = sampler_new(&p, V);
    for (int d = 0; d < 200; d++)
        assert_true(sampler_sample(s, l, NULL) < 10);
    sampler_free(&s);
    free(l);
    free(prob);
}

/* Penalties and bias vs a direct computation from the definitions. */
static void check_penalties(int last_n)
{
    enum { V = 50 };
    float l[V], got[V];
    trng_state = 99 + (uint64_t)last_n;
    random_logits(l, V, 2);
    sampler_bias_t bias[3] = {{4, 1.5f}, {7, -3.0f}, {4, 0.5f}}; /* 4 twice: summed */
    sampler_params_t p = params();
    p.repetition_penalty = 1.3f;
    p.repetition_last_n = last_n;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.25f;
    p.logit_bias = bias;
    p.n_logit_bias = 3;
    sampler_t *s = sampler_new(&p, V);
    int32_t prompt[10] = {1, 2, 3, 2, 9, 4, 4, 11, 12, 13};
    int32_t gen[8] = {5, 5, 6, 2, 5, 20, 21, 7};
    assert_int_equal(sampler_accept_prompt(s, prompt, 10), 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(sampler_accept(s, gen[i]), 0);
    sampler_processed_logits(s, l, got);

    int32_t all[18];
    memcpy(all, prompt, sizeof prompt);
    memcpy(all + 10, gen, sizeof gen);
    int from = last_n > 0 && last_n < 18 ? 18 - last_n : 0;
    for (int t = 0; t < V; t++) {
        float z = l[t];
        float b = 0;
        for (int i = 0; i < 3; i++)
            if (bias[i].token == t)
                b += bias[i].bias;
        if (b != 0)
            z += b;
        int in_window = 0, n_gen = 0;
        for (int i = from; i < 18; i++)
            in_window |= all[i] == t;
        for (int i = 0; i < 8; i++)
            n_gen += gen[i] == t;
        if (in_window)
            z = z > 0 ? z / 1.3f : z * 1.3f;
        z -= 0.4f * (n_gen > 0) + 0.25f * (float)n_gen;
        if (fabsf(got[t] - z) > 1e-6f)
            fail_msg("last_n %d token %d: got %g want %g", last_n, t, got[t], z);
    }
    sampler_free(&s);
}

static void test_penalties(void **state)
{
    (void)state;
    check_penalties(0);  /* whole history */
    check_penalties(6);  /* window: last 6 of prompt + generated */
    check_penalties(12);
    check_penalties(100);
}

/* The full path uses the processed logits: chi-square with penalties on. */
static void test_penalties_distribution(void **state)
{
    (void)state;
    enum { V = 8 };
    float l[V] = {1.0f, 0.5f, -0.3f, 0.8f, 0.1f, -0.6f, 0.4f, 1.1f}, z[V];
    double prob[V];
    sampler_params_t p = params();
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 0.3f;
    p.temperature = 0.8f;
    sampler_t *s = sampler_new(&p, V);
    int32_t pr[2] = {0, 7};
    sampler_accept_prompt(s, pr, 2);
    sampler_accept(s, 3);
    sampler_accept(s, 3);
    for (int t = 0; t < V; t++) {
        z[t] = l[t];
        if (t == 0 || t == 7 || t == 3)
            z[t] = z[t] > 0 ? z[t] / 1.5f : z[t] * 1.5f;
        if (t == 3)
            z[t] -= 0.3f * 2;
    }
    ref_dist(z, V, 0.8f, 0, 1, 0, prob);
    check_dist(s, l, V, prob, 40000);
    sampler_free(&s);
}

static void test_logit_bias(void **state)
{
    (void)state;
    enum { V = 6 };
    float l[V] = {3.0f, 2.5f, 1.0f, 0.0f, -1.0f, 2.9f};
    sampler_bias_t ban = {0, -100.0f}, force = {4, 100.0f};
    sampler_params_t p = params();
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    p.temperature = 0;
    sampler_t *s = sampler_new(&p, V);
    assert_int_equal(sampler_sample(s, l, NULL), 5);
    sampler_free(&s);
    p.temperature = 1.5f;
    s = sampler_new(&p, V);
    for (int d = 0; d < 20000; d++)
        assert_int_not_equal(sampler_sample(s, l, NULL), 0);
    sampler_free(&s);
    p.logit_bias = &force;
    s = sampler_new(&p, V);
    for (int d = 0; d < 20000; d++)
        assert_int_equal(sampler_sample(s, l, NULL), 4);
    sampler_free(&s);
}

/* Constrained decoding with fewer allowed tokens than top_logprobs asks for:
 * the forbidden alternatives (probability 0, logit -inf) are reported at
 * SAMPLER_LOGPROB_FLOOR, never -inf (which the wire refuses: #22's property
 * test found such EVENTs dropped as malformed). The allowed ones keep the
 * log-softmax of the constrained distribution: log(e^3/(e^3+e^2.5)). */
static void test_logprobs_masked(void **state)
{
    (void)state;
    enum { V = 6 };
    float l[V] = {3.0f, 2.5f, 1.0f, 0.0f, -1.0f, 2.9f};
    uint64_t allow = (1u << 0) | (1u << 1);
    sampler_params_t p = params();
    p.temperature = 0;
    p.n_top_logprobs = 5;
    sampler_t *s = sampler_new(&p, V);
    sampler_logprobs_t lp;
    assert_int_equal(sampler_sample_masked(s, l, &allow, &lp), 0);
    double want0 = 3.0 - (3.0 + log1p(exp(2.5 - 3.0)));
    assert_true(fabs(lp.logprob - want0) < 1e-5);
    assert_int_equal(lp.n_top, 5);
    assert_int_equal(lp.top_token[0], 0);
    assert_int_equal(lp.top_token[1], 1);
    assert_true(fabs(lp.top_logprob[1] - (2.5 - (3.0 + log1p(exp(2.5 - 3.0))))) < 1e-5);
    for (int j = 2; j < 5; j++)
        assert_true(lp.top_logprob[j] == SAMPLER_LOGPROB_FLOOR);
    sampler_free(&s);
}

static void test_seeds(void **state)
{
    (void)state;
    enum { V = 300, N = 300 };
    float *l = malloc((size_t)N * V * sizeof *l);
    trng_state = 5;
    random_logits(l, N * V, 1.5f);
    sampler_params_t p = params();
    p.top_p = 0.95f;
    p.seed = 777;
    int32_t a[N], b[N], c[N];
    sampler_t *s = sampler_new(&p, V);
    for (int i = 0; i < N; i++) {
        a[i] = sampler_sample(s, l + (size_t)i * V, NULL);
        sampler_accept(s, a[i]);
    }
    sampler_free(&s);

    /* same seed, interleaved with two other requests (one with the same
     * logits, other params and seed; one greedy) drawing in between */
    sampler_params_t q = params();
    q.seed = 778;
    q.top_k = 7;
    q.frequency_penalty = 0.5f;
    sampler_params_t g = params();
    g.temperature = 0;
    s = sampler_new(&p, V);
    sampler_t *o = sampler_new(&q, V), *gr = sampler_new(&g, V);
    int n_same = 0;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j <= i % 3; j++)
            sampler_accept(o, sampler_sample(o, l + (size_t)((i + j) % N) * V, NULL));
        b[i] = sampler_sample(s, l + (size_t)i * V, NULL);
        sampler_accept(s, b[i]);
        c[i] = sampler_sample(o, l + (size_t)i * V, NULL);
        n_same += c[i] == b[i];
        sampler_sample(gr, l + (size_t)i * V, NULL);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_true(n_same < N / 2); /* the other request really is different */
    sampler_free(&s);
    sampler_free(&o);
    sampler_free(&gr);

    /* a different seed gives a different sequence */
    p.seed = 779;
    s = sampler_new(&p, V);
    int n_diff = 0;
    for (int i = 0; i < N; i++) {
        int32_t t = sampler_sample(s, l + (size_t)i * V, NULL);
        sampler_accept(s, t);
        n_diff += t != a[i];
    }
    assert_true(n_diff > N / 4);
    sampler_free(&s);

    /* unseeded requests get distinct seeds */
    p.has_seed = false;
    sampler_t *u1 = sampler_new(&p, V), *u2 = sampler_new(&p, V);
    assert_true(sampler_seed(u1) != sampler_seed(u2));
    sampler_free(&u1);
    sampler_free(&u2);
    free(l);
}

static void check_logprobs(int V, int n_top, float temp)
{
    float *l = malloc((size_t)V * sizeof *l);
    ref_t *r = malloc((size_t)V * sizeof *r);
    random_logits(l, V, 4);
    sampler_bias_t bias[2] = {{1, 2.0f}, {V - 1, -1.0f}};
    sampler_params_t p = params();
    p.n_top_logprobs = n_top;
    p.temperature = temp;
    p.top_k = 20;
    p.repetition_penalty = 2.0f; /* must not affect the reported logprobs */
    p.logit_bias = bias;
    p.n_logit_bias = 2;
    sampler_t *s = sampler_new(&p, V);
    int32_t pr[3] = {0, 1, 2};
    sampler_accept_prompt(s, pr, 3);
    /* reference: log_softmax of logits + bias, double precision */
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++) {
        float z = l[i];
        if (i == 1)
            z += 2.0f;
        if (i == V - 1)
            z += -1.0f;
        r[i] = (ref_t){z, i};
        m = fmax(m, z);
    }
    for (int i = 0; i < V; i++)
        sum += exp(r[i].v - m);
    double lz = m + log(sum);
    double *lp_ref = malloc((size_t)V * sizeof *lp_ref);
    for (int i = 0; i < V; i++)
        lp_ref[i] = r[i].v - lz;
    qsort(r, (size_t)V, sizeof *r, ref_cmp);

    sampler_logprobs_t lp;
    for (int d = 0; d < 20; d++) {
        memset(&lp, 0xee, sizeof lp);
        int32_t t = sampler_sample(s, l, &lp);
        assert_int_equal(lp.token, t);
        if (fabs(lp.logprob - lp_ref[t]) > 1e-5)
            fail_msg("V %d: logprob of %d = %.8f, want %.8f", V, t, lp.logprob, lp_ref[t]);
        int want_top = n_top < V ? n_top : V;
        assert_int_equal(lp.n_top, want_top);
        for (int j = 0; j < want_top; j++) {
            assert_int_equal(lp.top_token[j], r[j].id);
            if (fabs(lp.top_logprob[j] - (r[j].v - lz)) > 1e-5)
                fail_msg("V %d: top %d logprob %.8f want %.8f", V, j, lp.top_logprob[j], r[j].v - lz);
        }
    }
    sampler_free(&s);
    free(l);
    free(r);
    free(lp_ref);
}

/* sampler_skip(n) leaves the PRNG where n samples would have: a run that
 * samples k tokens, then a fresh sampler that accepts those k tokens and
 * skips k draws, continue with the same tokens (at temperature 1 with
 * top-p, where every draw matters). Skipping 0 is a no-op, and skipping the
 * wrong count gives another stream (so the check can fail). */
static void test_skip(void **state)
{
    (void)state;
    enum { V = 64, N = 200, K = 73 };
    float *l = malloc((size_t)N * V * sizeof *l);
    trng_state = 11;
    random_logits(l, N * V, 1.0f);
    sampler_params_t p = params();
    p.top_p = 0.9f;
    p.seed = 4242;
    p.presence_penalty = 0.3f;
    int32_t full[N], res[N], off[N];
    sampler_t *s = sampler_new(&p, V);
    for (int i = 0; i < N; i++) {
        full[i] = sampler_sample(s, l + (size_t)i * V, NULL);
        sampler_accept(s, full[i]);
    }
    sampler_free(&s);
    for (int variant = 0; variant < 2; variant++) {
        s = sampler_new(&p, V);
        for (int i = 0; i < K; i++)
            sampler_accept(s, full[i]);
        sampler_skip(s, 0);
        sampler_skip(s, variant == 0 ? K : K - 1);
        int32_t *out = variant == 0 ? res : off;
        for (int i = K; i < N; i++) {
            out[i] = sampler_sample(s, l + (size_t)i * V, NULL);
            sampler_accept(s, out[i]);
        }
        sampler_free(&s);
    }
    assert_memory_equal(res + K, full + K, (N - K) * sizeof(int32_t));
    int differ = 0;
    for (int i = K; i < N; i++)
        differ += off[i] != full[i];
    assert_true(differ > 0);
    free(l);
}

static void test_logprobs(void **state)
{
    (void)state;
    trng_state = 11;
    check_logprobs(5000, 20, 1.0f);
    check_logprobs(5000, 3, 0.0f);
    check_logprobs(7, 20, 0.8f); /* more alternatives asked than the vocab has */
    check_logprobs(151936, 5, 1.0f);
}

/* A benchmark, not a test (it could not fail, so it is not in the suite):
 * SAMPLER_BENCH=1 build/tests/worker/test_sampler prints the cost per call at
 * Qwen3's vocabulary instead of running the tests. */
static void bench_sample(void)
{
    enum { V = 151936, R = 40 };
    float *l = malloc(V * sizeof *l);
    trng_state = 3;
    random_logits(l, V, 3);
    struct { const char *name; float t; int k; float top_p, min_p; int lp; } cfg[] = {
        {"greedy", 0, 0, 1, 0, 0},         {"T=1", 1, 0, 1, 0, 0},
        {"top_k=40", 1, 40, 1, 0, 0},      {"top_p=0.9", 1, 0, 0.9f, 0, 0},
        {"min_p=0.05", 1, 0, 1, 0.05f, 0}, {"top_k40+p0.9+logprobs5", 0.8f, 40, 0.9f, 0, 5},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sampler_params_t p = params();
        p.temperature = cfg[c].t;
        p.top_k = cfg[c].k;
        p.top_p = cfg[c].top_p;
        p.min_p = cfg[c].min_p;
        p.n_top_logprobs = cfg[c].lp;
        p.repetition_penalty = 1.1f;
        sampler_t *s = sampler_new(&p, V);
        for (int i = 0; i < 200; i++)
            sampler_accept(s, (int32_t)((i * 7919) % V));
        sampler_logprobs_t lp;
        /* minimum over calls: the machine is shared, the minimum is the cost */
        int64_t best = INT64_MAX;
        for (int r = 0; r < R; r++) {
            int64_t t0 = clock_now_us();
            sampler_sample(s, l, cfg[c].lp ? &lp : NULL);
            int64_t dt = clock_now_us() - t0;
            best = dt < best ? dt : best;
        }
        printf("# sample V=%d %-26s %6lld us/call (min of %d)\n", V, cfg[c].name, (long long)best, R);
        sampler_free(&s);
    }
    free(l);
}

/* Every row of the knob table (proto/sampling.h) reaches its member of
 * sampler_params_t: the default, and a SUBMIT's value (in the sampler's
 * type), with nothing else of the params touched. */
static void test_knob_rows(void **state)
{
    (void)state;
    sampler_params_t p;
    sampler_params_default(&p);
    proto_knobs_t def, k;
    proto_knobs_default(&def);
    proto_knobs_default(&k);
    for (int i = 0; i < PROTO_N_KNOBS; i++)
        proto_knob_set(&k, &proto_knob_rows[i], proto_knob_rows[i].is_uint ? 3 + i : 0.125 * (i + 1));
    p.repetition_last_n = 77;
    sampler_params_set_knobs(&p, &k);
    assert_int_equal(p.repetition_last_n, 77);
    assert_null(p.logit_bias);
    assert_false(p.has_seed);
    sampler_params_t back;
    sampler_params_default(&back);
    /* each member, read back through the table's offset in proto_knobs_t */
#define CHECK_KNOB(key, api, wtype, stype, member, def_, ...)                                          \
    assert_true(p.member == (stype)k.member);                                                           \
    assert_true(back.member == (stype)(def_));                                                          \
    assert_true((double)def.member == (def_));
    PROTO_SAMPLING_KNOBS(CHECK_KNOB)
#undef CHECK_KNOB
}

int main(void)
{
    if (getenv("SAMPLER_BENCH")) {
        bench_sample();
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),
        cmocka_unit_test(test_knob_rows),
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_top_p_set),
        cmocka_unit_test(test_large_vocab_sets),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_penalties_distribution),
        cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_seeds),
        cmocka_unit_test(test_skip),
        cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_logprobs_masked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
