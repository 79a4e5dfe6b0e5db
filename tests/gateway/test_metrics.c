/* Unit tests for gateway/metrics: render → parse back every sample and compare
 * with values the test computes itself; escaping; concurrency; number
 * formatting round-trips; the cardinality guard; and `promtool check metrics`
 * on the gateway's standard families when promtool is installed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gateway/metrics.h"

/* Value of the sample line whose text before the final space equals `series`
 * exactly (e.g. `foo_bucket{m="a",le="0.5"}`). Fails the test when absent or
 * present twice. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    const char *p = text, *hit = NULL;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        if (p[0] != '#' && len > n && memcmp(p, series, n) == 0 && p[n] == ' ') {
            if (hit)
                fail_msg("series %s appears twice", series);
            hit = p + n + 1;
        }
        p += len + (eol ? 1 : 0);
    }
    if (!hit)
        fail_msg("series %s not found in:\n%s", series, text);
    if (strncmp(hit, "+Inf", 4) == 0)
        return INFINITY;
    return strtod(hit, NULL);
}

static int count_lines_with(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void test_counter_gauge_render(void **st)
{
    (void)st;
    metrics_t *m = metrics_new();
    const char *const L[] = {"model_name", "tier"};
    metrics_family_t *c = metrics_counter_new(m, "pagoda_things_total", "Things.", 2, L);
    metrics_family_t *g = metrics_gauge_new(m, "pagoda_level", "A level.", 0, NULL);
    metrics_family_t *c0 = metrics_counter_new(m, "pagoda_unlabelled_total", "No labels.", 0, NULL);
    const char *const a_hi[] = {"model-a", "high"}, *const a_lo[] = {"model-a", "low"},
                      *const b_hi[] = {"model-b", "high"};
    double want_a_hi = 0, want_a_lo = 0;
    for (int i = 1; i <= 10; i++) {
        metrics_counter_add(c, a_hi, i);
        want_a_hi += i;
        if (i % 2)
            metrics_counter_add(c, a_lo, 0.5);
        if (i % 2)
            want_a_lo += 0.5;
    }
    metrics_counter_add(c, b_hi, 0);
    metrics_gauge_set(g, NULL, 7);
    metrics_gauge_add(g, NULL, -2.25);
    assert_float_equal(metrics_value(c, a_hi), want_a_hi, 0);
    assert_float_equal(metrics_value(g, NULL), 4.75, 0);

    size_t len = 0;
    char *text = metrics_render(m, &len);
    assert_int_equal(len, strlen(text));
    assert_non_null(strstr(text, "# HELP pagoda_things_total Things.\n# TYPE pagoda_things_total counter\n"));
    assert_non_null(strstr(text, "# TYPE pagoda_level gauge\n"));
    assert_float_equal(sample(text, "pagoda_things_total{model_name=\"model-a\",tier=\"high\"}"), want_a_hi, 0);
    assert_float_equal(sample(text, "pagoda_things_total{model_name=\"model-a\",tier=\"low\"}"), want_a_lo, 0);
    assert_float_equal(sample(text, "pagoda_things_total{model_name=\"model-b\",tier=\"high\"}"), 0, 0);
    assert_float_equal(sample(text, "pagoda_level"), 4.75, 0);
    assert_float_equal(sample(text, "pagoda_unlabelled_total"), 0, 0); /* seeded at 0 */
    /* Families render in registration order. */
    assert_true(strstr(text, "pagoda_things_total") < strstr(text, "pagoda_level"));
    assert_true(strstr(text, "pagoda_level") < strstr(text, "pagoda_unlabelled_total"));
    free(text);
    (void)c0;
    metrics_free(&m);
    assert_null(m);
    metrics_free(&m);
}

static void test_histogram(void **st)
{
    (void)st;
    metrics_t *m = metrics_new();
    const char *const L[] = {"model_name"};
    const double bounds[] = {0.1, 0.5, 1, 2.5};
    metrics_family_t *h = metrics_histogram_new(m, "pagoda_lat_seconds", "Latency.", 1, L, bounds, 4);
    const char *const v[] = {"m1"};
    /* Observations, including values exactly on a bound (le is inclusive). */
    const double obs[] = {0.05, 0.1, 0.1000001, 0.3, 0.5, 0.7, 1.0, 2.0, 2.5, 3, 100, 0};
    const size_t n_obs = sizeof(obs) / sizeof(obs[0]);
    double sum = 0;
    for (size_t i = 0; i < n_obs; i++) {
        metrics_histogram_observe(h, v, obs[i]);
        sum += obs[i];
    }
    char *text = metrics_render(m, NULL);
    /* Independent cumulative counts straight from the definition. */
    const char *les[] = {"0.1", "0.5", "1", "2.5"};
    for (size_t b = 0; b < 4; b++) {
        double want = 0;
        for (size_t i = 0; i < n_obs; i++)
            want += obs[i] <= bounds[b];
        char series[128];
        snprintf(series, sizeof(series), "pagoda_lat_seconds_bucket{model_name=\"m1\",le=\"%s\"}", les[b]);
        assert_float_equal(sample(text, series), want, 0);
    }
    assert_float_equal(sample(text, "pagoda_lat_seconds_bucket{model_name=\"m1\",le=\"+Inf\"}"), n_obs, 0);
    assert_float_equal(sample(text, "pagoda_lat_seconds_count{model_name=\"m1\"}"), n_obs, 0);
    assert_float_equal(sample(text, "pagoda_lat_seconds_sum{model_name=\"m1\"}"), sum, 1e-12);
    assert_float_equal(metrics_value(h, v), n_obs, 0);
    assert_float_equal(metrics_histogram_sum(h, v), sum, 1e-12);
    assert_non_null(strstr(text, "# TYPE pagoda_lat_seconds histogram\n"));
    free(text);
    metrics_free(&m);
}

static void test_escaping(void **st)
{
    (void)st;
    metrics_t *m = metrics_new();
    const char *const L[] = {"model_name"};
    metrics_family_t *g = metrics_gauge_new(m, "pagoda_esc", "Help with \\ backslash\nand newline.", 1, L);
    const char *const v[] = {"we\"ird\\na\nme"};
    metrics_gauge_set(g, v, 1);
    char *text = metrics_render(m, NULL);
    assert_non_null(strstr(text, "# HELP pagoda_esc Help with \\\\ backslash\\nand newline.\n"));
    assert_float_equal(sample(text, "pagoda_esc{model_name=\"we\\\"ird\\\\na\\nme\"}"), 1, 0);
    free(text);
    metrics_free(&m);
}

static void test_format_double(void **st)
{
    (void)st;
    char out[40];
    metrics_format_double(0.25, out, sizeof(out));
    assert_string_equal(out, "0.25");
    metrics_format_double(3, out, sizeof(out));
    assert_string_equal(out, "3");
    metrics_format_double(INFINITY, out, sizeof(out));
    assert_string_equal(out, "+Inf");
    metrics_format_double(-INFINITY, out, sizeof(out));
    assert_string_equal(out, "-Inf");
    metrics_format_double(NAN, out, sizeof(out));
    assert_string_equal(out, "NaN");
    /* Round trip on awkward values. */
    uint64_t x = 88172645463325252ULL;
    for (int i = 0; i < 20000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double d;
        uint64_t bits = x;
        memcpy(&d, &bits, sizeof(d));
        if (!isfinite(d))
            continue;
        metrics_format_double(d, out, sizeof(out));
        assert_true(strtod(out, NULL) == d);
    }
    const double vals[] = {0.1, 1e-7, 123456789.125, 2560, 1.0 / 3.0, 5e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        metrics_format_double(vals[i], out, sizeof(out));
        assert_true(strtod(out, NULL) == vals[i]);
    }
}

typedef struct {
    metrics_t *m;
    metrics_family_t *c, *h, *g;
    int id;
} thr_arg_t;

static void *hammer(void *p)
{
    thr_arg_t *a = p;
    char model[16];
    snprintf(model, sizeof(model), "m%d", a->id % 2);
    const char *const v[] = {model};
    for (int i = 0; i < 20000; i++) {
        metrics_counter_add(a->c, v, 1);
        metrics_histogram_observe(a->h, v, 0.001 * (i % 100));
        metrics_gauge_add(a->g, NULL, 1);
        if (i % 5000 == 0)
            free(metrics_render(a->m, NULL)); /* rendering races with updates */
    }
    return NULL;
}

static void test_threads(void **st)
{
    (void)st;
    metrics_t *m = metrics_new();
    const char *const L[] = {"model_name"};
    const double bounds[] = {0.01, 0.05};
    thr_arg_t t[4];
    metrics_family_t *c = metrics_counter_new(m, "pagoda_t_total", "T.", 1, L);
    metrics_family_t *h = metrics_histogram_new(m, "pagoda_t_seconds", "T.", 1, L, bounds, 2);
    metrics_family_t *g = metrics_gauge_new(m, "pagoda_t_gauge", "T.", 0, NULL);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (thr_arg_t){m, c, h, g, i};
        assert_int_equal(pthread_create(&th[i], NULL, hammer, &t[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    const char *const m0[] = {"m0"}, *const m1[] = {"m1"};
    assert_float_equal(metrics_value(c, m0), 40000, 0);
    assert_float_equal(metrics_value(c, m1), 40000, 0);
    assert_float_equal(metrics_value(h, m0), 40000, 0);
    assert_float_equal(metrics_value(g, NULL), 80000, 0);
    char *text = metrics_render(m, NULL);
    /* Expected le="0.01" count, evaluated with the same double arithmetic. */
    double per100 = 0;
    for (int k = 0; k < 100; k++)
        per100 += 0.001 * k <= 0.01;
    assert_float_equal(sample(text, "pagoda_t_seconds_bucket{model_name=\"m0\",le=\"0.01\"}"),
                       per100 * 400, 0);
    free(text);
    metrics_free(&m);
}

static void test_cardinality_guard(void **st)
{
    (void)st;
    metrics_t *m = metrics_new();
    const char *const L[] = {"model_name"};
    metrics_family_t *c = metrics_counter_new(m, "pagoda_card_total", "C.", 1, L);
    char name[32];
    const char *const v[] = {name};
    for (int i = 0; i < METRICS_MAX_SERIES + 10; i++) {
        snprintf(name, sizeof(name), "m%d", i);
        metrics_counter_add(c, v, 1);
    }
    assert_int_equal(metrics_dropped(m), 10);
    snprintf(name, sizeof(name), "m%d", METRICS_MAX_SERIES + 5);
    assert_float_equal(metrics_value(c, v), 0, 0);
    snprintf(name, sizeof(name), "m0");
    metrics_counter_add(c, v, 1); /* existing series still count */
    assert_float_equal(metrics_value(c, v), 2, 0);
    char *text = metrics_render(m, NULL);
    assert_int_equal(count_lines_with(text, "pagoda_card_total{"), METRICS_MAX_SERIES);
    free(text);
    metrics_free(&m);
}

/* Fills the standard families with plausible traffic. */
static char *render_std(void)
{
    metrics_t *m = metrics_new();
    metrics_std_t s;
    metrics_std_register(m, &s);
    const char *models[] = {"qwen3-0.6b", "llama-3.2-1b"};
    const char *reasons[] = {"stop", "length", "abort"};
    const char *tiers[] = {"high", "normal", "low"};
    for (int k = 0; k < 2; k++) {
        const char *const lm[] = {models[k]};
        metrics_gauge_set(s.num_requests_running, lm, 3);
        metrics_gauge_set(s.num_requests_waiting, lm, 7);
        metrics_gauge_set(s.kv_cache_usage_perc, lm, 0.42);
        metrics_counter_add(s.prefix_cache_queries, lm, 1000);
        metrics_counter_add(s.prefix_cache_hits, lm, 640);
        metrics_counter_add(s.external_prefix_cache_hits, lm, 128);
        metrics_counter_add(s.kv_disk_written, lm, 4096);
        metrics_gauge_set(s.kv_disk_enabled, (const char *[]){"qwen3-0.6b", "host:1:a"}, 1);
        metrics_counter_add(s.num_preemptions, lm, 2);
        metrics_counter_add(s.steps_stopped, lm, 3);
        metrics_counter_add(s.prompt_tokens, lm, 1234);
        metrics_counter_add(s.generation_tokens, lm, 4321);
        for (int r = 0; r < 3; r++) {
            const char *const lr[] = {models[k], reasons[r]};
            metrics_counter_add(s.request_success, lr, r + 1);
        }
        for (int i = 0; i < 50; i++) {
            metrics_histogram_observe(s.time_to_first_token, lm, 0.01 * i);
            metrics_histogram_observe(s.inter_token_latency, lm, 0.002 * i);
            metrics_histogram_observe(s.e2e_request_latency, lm, 0.5 * i);
            metrics_histogram_observe(s.request_queue_time, lm, 0.1 * i);
        }
        for (int t = 0; t < 3; t++) {
            const char *const lt[] = {models[k], tiers[t]};
            metrics_counter_add(s.requests, lt, 10);
            metrics_counter_add(s.rejected_queue_full, lt, 1);
            metrics_gauge_set(s.queue_length, lt, t);
        }
        metrics_counter_add(s.worker_restarts, lm, 1);
        metrics_gauge_set(s.workers_connected, lm, 2);
    }
    const char *const c200[] = {"200"}, *const c429[] = {"429"};
    metrics_counter_add(s.http_responses, c200, 100);
    metrics_counter_add(s.http_responses, c429, 6);
    char *text = metrics_render(m, NULL);
    metrics_free(&m);
    return text;
}

static void test_std_families(void **st)
{
    (void)st;
    char *text = render_std();
    const char *names[] = {
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "vllm:num_preemptions_total",
        "pagoda_steps_stopped_total",
        "vllm:external_prefix_cache_hits_total", "pagoda_kv_disk_written_bytes_total", "pagoda_kv_disk_enabled",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
        "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds", "pagoda_requests_total",
        "pagoda_rejected_queue_full_total", "pagoda_http_responses_total", "pagoda_worker_restarts_total",
        "pagoda_workers_connected", "pagoda_queue_length", "pagoda_prompt_tokens_computed_total"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char line[128];
        snprintf(line, sizeof(line), "# TYPE %s ", names[i]);
        if (!strstr(text, line))
            fail_msg("missing family %s", names[i]);
    }
    assert_float_equal(
        sample(text, "vllm:request_success_total{model_name=\"qwen3-0.6b\",finished_reason=\"length\"}"), 2, 0);
    assert_float_equal(sample(text, "vllm:kv_cache_usage_perc{model_name=\"llama-3.2-1b\"}"), 0.42, 0);
    assert_float_equal(
        sample(text, "vllm:time_to_first_token_seconds_bucket{model_name=\"qwen3-0.6b\",le=\"2560\"}"), 50, 0);
    assert_float_equal(sample(text, "pagoda_http_responses_total{code=\"429\"}"), 6, 0);
    free(text);
}

/* promtool's parser must accept the exposition; its linter may only complain
 * about the ':' in vLLM's names (see metrics.h). */
static void test_promtool(void **st)
{
    (void)st;
    if (access("/usr/bin/promtool", X_OK) != 0 && system("command -v promtool >/dev/null 2>&1") != 0) {
        print_message("promtool not installed; skipping\n");
        skip();
    }
    char *text = render_std();
    char path[] = "/tmp/pagoda-metrics-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1; echo \"rc=$?\"", path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[512];
    int rc = -1, n_colon = 0, n_other = 0;
    while (fgets(line, sizeof(line), p)) {
        if (sscanf(line, "rc=%d", &rc) == 1)
            continue;
        if (strncmp(line, "vllm:", 5) == 0 && strstr(line, "metric names should not contain ':'")) {
            n_colon++;
        } else {
            n_other++;
            print_message("promtool: %s", line);
        }
    }
    pclose(p);
    unlink(path);
    assert_true(rc == 0 || rc == 3); /* 1 would be a parse failure */
    assert_int_equal(n_other, 0);
    assert_int_equal(n_colon, 14);   /* one per vllm: family, nothing else */

    /* The pagoda_* part alone must be entirely lint-clean (rc 0). */
    char *pg = strstr(text, "# HELP pagoda_");
    assert_non_null(pg);
    char path2[] = "/tmp/pagoda-metrics-XXXXXX";
    fd = mkstemp(path2);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, pg, strlen(pg)), (ssize_t)strlen(pg));
    close(fd);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s >/dev/null 2>&1", path2);
    int st2 = system(cmd);
    unlink(path2);
    assert_int_equal(WEXITSTATUS(st2), 0);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_gauge_render),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_format_double),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_cardinality_guard),
        cmocka_unit_test(test_std_families),
        cmocka_unit_test(test_promtool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
