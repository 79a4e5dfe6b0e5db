/* metrics.c — Prometheus text-format registry (see metrics.h). Families and
 * series are small arrays searched linearly: a family has a handful of series
 * (models × finish reasons), and every update takes the registry mutex. */
#include "gateway/metrics.h"

#include <assert.h>
#include <stdbool.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/strbuf.h"
#include "common/vec.h"
#include "common/xalloc.h"

typedef struct {
    char **values;      /* (n_labels) label values */
    double value;       /* counter / gauge */
    uint64_t *buckets;  /* histogram: (n_bounds + 1) non-cumulative counts, last = above all bounds */
    double sum;         /* histogram */
    uint64_t count;     /* histogram */
} series_t;

struct metrics_family {
    metrics_t *reg;
    metrics_type_t type;
    char *name;
    char *help;
    size_t n_labels;
    char *labels[METRICS_MAX_LABELS];
    double *bounds;     /* (n_bounds) histogram upper bounds */
    size_t n_bounds;
    series_t *series;   /* (n_series) */
    size_t n_series, cap_series;
};

struct metrics {
    pthread_mutex_t lock;
    metrics_family_t **families; /* (n) in registration order */
    size_t n, cap;
    uint64_t dropped;
    int warned;
};

/* ---- names ------------------------------------------------------------- */

static int name_ok(const char *s, int allow_colon)
{
    if (!s || !*s)
        return 0;
    for (size_t i = 0; s[i]; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':') ||
                 (i > 0 && c >= '0' && c <= '9');
        if (!ok)
            return 0;
    }
    return 1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* ---- registry ---------------------------------------------------------- */

metrics_t *metrics_new(void)
{
    metrics_t *m = xcalloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

static void series_clear(metrics_family_t *f, series_t *s)
{
    for (size_t j = 0; j < f->n_labels; j++)
        free(s->values[j]);
    free(s->values);
    free(s->buckets);
}

void metrics_free(metrics_t **mp)
{
    if (!mp || !*mp)
        return;
    metrics_t *m = *mp;
    for (size_t i = 0; i < m->n; i++) {
        metrics_family_t *f = m->families[i];
        for (size_t k = 0; k < f->n_series; k++)
            series_clear(f, &f->series[k]);
        free(f->series);
        for (size_t j = 0; j < f->n_labels; j++)
            free(f->labels[j]);
        free(f->bounds);
        free(f->name);
        free(f->help);
        free(f);
    }
    free(m->families);
    pthread_mutex_destroy(&m->lock);
    free(m);
    *mp = NULL;
}

/* Finds or creates the series; NULL when the family is full. Lock held. */
static series_t *series_get(metrics_family_t *f, const char *const *values, int create)
{
    for (size_t k = 0; k < f->n_series; k++) {
        series_t *s = &f->series[k];
        size_t j = 0;
        while (j < f->n_labels && strcmp(s->values[j], values[j]) == 0)
            j++;
        if (j == f->n_labels)
            return s;
    }
    if (!create)
        return NULL;
    if (f->n_series >= METRICS_MAX_SERIES) {
        f->reg->dropped++;
        if (!f->reg->warned) {
            f->reg->warned = 1;
            log_warn("metrics: %s has %d series; dropping new label combinations", f->name,
                     METRICS_MAX_SERIES);
        }
        return NULL;
    }
    vec_reserve(f->series, f->cap_series, f->n_series + 1);
    series_t *s = &f->series[f->n_series++];
    memset(s, 0, sizeof(*s));
    s->values = xcalloc(f->n_labels ? f->n_labels : 1, sizeof(char *));
    for (size_t j = 0; j < f->n_labels; j++)
        s->values[j] = xstrdup(values[j]);
    if (f->type == METRICS_HISTOGRAM)
        s->buckets = xcalloc(f->n_bounds + 1, sizeof(uint64_t));
    return s;
}

static metrics_family_t *family_new(metrics_t *m, metrics_type_t type, const char *name, const char *help,
                                    size_t n_labels, const char *const *labels)
{
    assert(name_ok(name, 1));
    assert(help);
    assert(n_labels <= METRICS_MAX_LABELS);
    assert(type != METRICS_COUNTER || ends_with(name, "_total"));
    metrics_family_t *f = xcalloc(1, sizeof(*f));
    f->reg = m;
    f->type = type;
    f->name = xstrdup(name);
    f->help = xstrdup(help);
    f->n_labels = n_labels;
    for (size_t j = 0; j < n_labels; j++) {
        assert(name_ok(labels[j], 0) && strncmp(labels[j], "__", 2) != 0);
        assert(type != METRICS_HISTOGRAM || strcmp(labels[j], "le") != 0);
        f->labels[j] = xstrdup(labels[j]);
    }
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n; i++)
        assert(strcmp(m->families[i]->name, name) != 0);
    vec_reserve(m->families, m->cap, m->n + 1);
    m->families[m->n++] = f;
    pthread_mutex_unlock(&m->lock);
    return f;
}

static void family_seed(metrics_family_t *f)
{
    /* A label-less family always has its one series, so it renders as 0. */
    if (f->n_labels == 0) {
        pthread_mutex_lock(&f->reg->lock);
        series_get(f, NULL, 1);
        pthread_mutex_unlock(&f->reg->lock);
    }
}

metrics_family_t *metrics_counter_new(metrics_t *m, const char *name, const char *help, size_t n_labels,
                                      const char *const *labels)
{
    metrics_family_t *f = family_new(m, METRICS_COUNTER, name, help, n_labels, labels);
    family_seed(f);
    return f;
}

metrics_family_t *metrics_gauge_new(metrics_t *m, const char *name, const char *help, size_t n_labels,
                                    const char *const *labels)
{
    metrics_family_t *f = family_new(m, METRICS_GAUGE, name, help, n_labels, labels);
    family_seed(f);
    return f;
}

metrics_family_t *metrics_histogram_new(metrics_t *m, const char *name, const char *help,
                                        size_t n_labels, const char *const *labels,
                                        const double *bounds, size_t n_bounds)
{
    assert(n_bounds >= 1 && n_bounds <= METRICS_MAX_BUCKETS);
    for (size_t i = 0; i < n_bounds; i++) {
        assert(isfinite(bounds[i]));
        assert(i == 0 || bounds[i] > bounds[i - 1]);
    }
    metrics_family_t *f = family_new(m, METRICS_HISTOGRAM, name, help, n_labels, labels);
    f->bounds = xmalloc(n_bounds * sizeof(double));
    memcpy(f->bounds, bounds, n_bounds * sizeof(double));
    f->n_bounds = n_bounds;
    family_seed(f);
    return f;
}

/* ---- updates ----------------------------------------------------------- */

static void check_values(const metrics_family_t *f, const char *const *values)
{
    assert(f->n_labels == 0 || values);
    for (size_t j = 0; j < f->n_labels; j++)
        assert(values[j]);
    (void)f;
    (void)values;
}

/* Sets (add = false) or increments a series' value under the registry lock. */
static void series_update(metrics_family_t *f, const char *const *values, double v, bool add)
{
    check_values(f, values);
    pthread_mutex_lock(&f->reg->lock);
    series_t *s = series_get(f, values, 1);
    if (s)
        s->value = add ? s->value + v : v;
    pthread_mutex_unlock(&f->reg->lock);
}

void metrics_counter_add(metrics_family_t *f, const char *const *values, double v)
{
    assert(f->type == METRICS_COUNTER);
    assert(v >= 0.0);
    series_update(f, values, v, true);
}

void metrics_gauge_set(metrics_family_t *f, const char *const *values, double v)
{
    assert(f->type == METRICS_GAUGE);
    series_update(f, values, v, false);
}

void metrics_gauge_add(metrics_family_t *f, const char *const *values, double v)
{
    assert(f->type == METRICS_GAUGE);
    series_update(f, values, v, true);
}

void metrics_histogram_observe(metrics_family_t *f, const char *const *values, double v)
{
    assert(f->type == METRICS_HISTOGRAM);
    check_values(f, values);
    /* First bound ≥ v (Prometheus buckets are "less than or equal"); NaN goes
     * to +Inf only, like the reference client libraries. */
    size_t b = 0;
    while (b < f->n_bounds && !(v <= f->bounds[b]))
        b++;
    pthread_mutex_lock(&f->reg->lock);
    series_t *s = series_get(f, values, 1);
    if (s) {
        s->buckets[b]++;
        s->sum += v;
        s->count++;
    }
    pthread_mutex_unlock(&f->reg->lock);
}

double metrics_value(metrics_family_t *f, const char *const *values)
{
    check_values(f, values);
    pthread_mutex_lock(&f->reg->lock);
    series_t *s = series_get(f, values, 0);
    double v = 0.0;
    if (s)
        v = f->type == METRICS_HISTOGRAM ? (double)s->count : s->value;
    pthread_mutex_unlock(&f->reg->lock);
    return v;
}

double metrics_histogram_sum(metrics_family_t *f, const char *const *values)
{
    check_values(f, values);
    pthread_mutex_lock(&f->reg->lock);
    series_t *s = series_get(f, values, 0);
    double v = (s && f->type == METRICS_HISTOGRAM) ? s->sum : 0.0;
    pthread_mutex_unlock(&f->reg->lock);
    return v;
}

uint64_t metrics_dropped(metrics_t *m)
{
    pthread_mutex_lock(&m->lock);
    uint64_t d = m->dropped;
    pthread_mutex_unlock(&m->lock);
    return d;
}

/* ---- rendering --------------------------------------------------------- */

/* Escapes \ and newline (HELP) or also " (label values). */
static void buf_escaped(strbuf_t *b, const char *s, int quote)
{
    for (; *s; s++) {
        if (*s == '\\')
            strbuf_puts(b, "\\\\");
        else if (*s == '\n')
            strbuf_puts(b, "\\n");
        else if (quote && *s == '"')
            strbuf_puts(b, "\\\"");
        else
            strbuf_append(b, s, 1);
    }
}

void metrics_format_double(double v, char *out, size_t cap)
{
    if (isnan(v)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(out, cap, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /* Integers print plainly ("2560", not "2.56e+03"); the rest as the
     * shortest %.Ng that reads back to the same double. */
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, cap, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

/* name{l1="v1",...[,le="B"]} value\n */
static void render_sample(strbuf_t *b, const metrics_family_t *f, const series_t *s, const char *suffix,
                          const char *le, double value)
{
    strbuf_puts(b, f->name);
    strbuf_puts(b, suffix);
    if (f->n_labels > 0 || le) {
        strbuf_puts(b, "{");
        for (size_t j = 0; j < f->n_labels; j++) {
            if (j > 0)
                strbuf_puts(b, ",");
            strbuf_puts(b, f->labels[j]);
            strbuf_puts(b, "=\"");
            buf_escaped(b, s->values[j], 1);
            strbuf_puts(b, "\"");
        }
        if (le) {
            if (f->n_labels > 0)
                strbuf_puts(b, ",");
            strbuf_puts(b, "le=\"");
            strbuf_puts(b, le);
            strbuf_puts(b, "\"");
        }
        strbuf_puts(b, "}");
    }
    char num[40];
    metrics_format_double(value, num, sizeof(num));
    strbuf_puts(b, " ");
    strbuf_puts(b, num);
    strbuf_puts(b, "\n");
}

char *metrics_render(metrics_t *m, size_t *len)
{
    static const char *type_names[] = {"counter", "gauge", "histogram"};
    strbuf_t b = STRBUF_INIT;
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n; i++) {
        const metrics_family_t *f = m->families[i];
        strbuf_puts(&b, "# HELP ");
        strbuf_puts(&b, f->name);
        strbuf_puts(&b, " ");
        buf_escaped(&b, f->help, 0);
        strbuf_puts(&b, "\n# TYPE ");
        strbuf_puts(&b, f->name);
        strbuf_puts(&b, " ");
        strbuf_puts(&b, type_names[f->type]);
        strbuf_puts(&b, "\n");
        for (size_t k = 0; k < f->n_series; k++) {
            const series_t *s = &f->series[k];
            if (f->type != METRICS_HISTOGRAM) {
                render_sample(&b, f, s, "", NULL, s->value);
                continue;
            }
            uint64_t cum = 0;
            char le[40];
            for (size_t q = 0; q < f->n_bounds; q++) {
                cum += s->buckets[q];
                metrics_format_double(f->bounds[q], le, sizeof(le));
                render_sample(&b, f, s, "_bucket", le, (double)cum);
            }
            cum += s->buckets[f->n_bounds];
            render_sample(&b, f, s, "_bucket", "+Inf", (double)cum);
            render_sample(&b, f, s, "_sum", NULL, s->sum);
            render_sample(&b, f, s, "_count", NULL, (double)s->count);
        }
    }
    pthread_mutex_unlock(&m->lock);
    if (len)
        *len = b.len;
    return strbuf_take(&b);
}

/* ---- standard families ------------------------------------------------- */

const double metrics_buckets_ttft[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                       0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                       20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const size_t metrics_n_buckets_ttft = sizeof(metrics_buckets_ttft) / sizeof(double);
const double metrics_buckets_itl[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
const size_t metrics_n_buckets_itl = sizeof(metrics_buckets_itl) / sizeof(double);
const double metrics_buckets_request[] = {0.3,  0.5,  0.8,  1.0,   1.5,   2.0,   2.5,
                                          5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                          60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const size_t metrics_n_buckets_request = sizeof(metrics_buckets_request) / sizeof(double);

void metrics_std_register(metrics_t *m, metrics_std_t *o)
{
    static const char *const L_MODEL[] = {"model_name"};
    static const char *const L_MODEL_REASON[] = {"model_name", "finished_reason"};
    static const char *const L_MODEL_TIER[] = {"model_name", "tier"};
    static const char *const L_CODE[] = {"code"};
    memset(o, 0, sizeof(*o));
    o->num_requests_running = metrics_gauge_new(m, "vllm:num_requests_running",
                                                "Number of requests being processed by workers.", 1, L_MODEL);
    o->num_requests_waiting = metrics_gauge_new(m, "vllm:num_requests_waiting",
                                                "Number of requests waiting to be processed.", 1, L_MODEL);
    o->kv_cache_usage_perc = metrics_gauge_new(m, "vllm:kv_cache_usage_perc",
                                               "KV-cache usage. 1 means 100 percent usage.", 1, L_MODEL);
    o->prefix_cache_queries = metrics_counter_new(
        m, "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried prompt tokens.", 1, L_MODEL);
    o->prefix_cache_hits = metrics_counter_new(m, "vllm:prefix_cache_hits_total",
                                               "Prefix cache hits, in terms of number of cached tokens.", 1,
                                               L_MODEL);
    o->external_prefix_cache_hits = metrics_counter_new(
        m, "vllm:external_prefix_cache_hits_total",
        "Prefix cache hits from the workers' disk tier, in terms of number of loaded tokens.", 1, L_MODEL);
    o->num_preemptions = metrics_counter_new(m, "vllm:num_preemptions_total",
                                             "Cumulative number of preemptions by the workers.", 1, L_MODEL);
    o->spec_num_drafts = metrics_counter_new(m, "vllm:spec_decode_num_drafts_total",
                                             "Number of spec decoding drafts (verifies of a sequence "
                                             "with draft tokens).", 1, L_MODEL);
    o->spec_num_draft_tokens = metrics_counter_new(m, "vllm:spec_decode_num_draft_tokens_total",
                                                   "Number of draft tokens.", 1, L_MODEL);
    o->spec_num_accepted = metrics_counter_new(m, "vllm:spec_decode_num_accepted_tokens_total",
                                               "Number of accepted tokens.", 1, L_MODEL);
    o->prompt_tokens = metrics_counter_new(m, "vllm:prompt_tokens_total", "Number of prefill tokens processed.",
                                           1, L_MODEL);
    o->generation_tokens = metrics_counter_new(m, "vllm:generation_tokens_total",
                                               "Number of generation tokens processed.", 1, L_MODEL);
    o->request_success = metrics_counter_new(m, "vllm:request_success_total",
                                             "Count of successfully processed requests.", 2, L_MODEL_REASON);
    o->time_to_first_token = metrics_histogram_new(
        m, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", 1, L_MODEL,
        metrics_buckets_ttft, metrics_n_buckets_ttft);
    o->inter_token_latency = metrics_histogram_new(
        m, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", 1, L_MODEL,
        metrics_buckets_itl, metrics_n_buckets_itl);
    o->e2e_request_latency = metrics_histogram_new(
        m, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", 1, L_MODEL,
        metrics_buckets_request, metrics_n_buckets_request);
    o->request_queue_time = metrics_histogram_new(
        m, "vllm:request_queue_time_seconds", "Histogram of time spent in the gateway queue in seconds.", 1,
        L_MODEL, metrics_buckets_request, metrics_n_buckets_request);
    o->prompt_tokens_computed = metrics_counter_new(
        m, "pagoda_prompt_tokens_computed_total",
        "Prompt tokens the workers computed (prefilled): cache hits excluded, recomputation included.", 1,
        L_MODEL);
    o->steps_stopped = metrics_counter_new(m, "pagoda_steps_stopped_total",
                                           "Worker steps stopped inside the forward pass for a better tier's "
                                           "request (their rows run again later).", 1, L_MODEL);
    o->requests = metrics_counter_new(m, "pagoda_requests_total",
                                      "Requests accepted into a model queue, by API key tier.", 2, L_MODEL_TIER);
    o->rejected_queue_full = metrics_counter_new(
        m, "pagoda_rejected_queue_full_total", "Requests answered 429 because the model queue was full.", 2,
        L_MODEL_TIER);
    o->http_responses = metrics_counter_new(m, "pagoda_http_responses_total",
                                            "HTTP responses sent, by status code.", 1, L_CODE);
    o->worker_restarts = metrics_counter_new(m, "pagoda_worker_restarts_total",
                                             "Local worker processes restarted by the supervisor.", 1, L_MODEL);
    o->workers_connected = metrics_gauge_new(m, "pagoda_workers_connected",
                                             "Worker replicas currently registered.", 1, L_MODEL);
    o->queue_length = metrics_gauge_new(m, "pagoda_queue_length", "Requests queued, by API key tier.", 2,
                                        L_MODEL_TIER);
    o->workers_lost = metrics_counter_new(m, "pagoda_workers_lost_total",
                                          "Worker registrations dropped: connection closed or heartbeats missed.",
                                          1, L_MODEL);
    o->requests_redispatched = metrics_counter_new(
        m, "pagoda_requests_redispatched_total",
        "Requests moved to another replica after their worker was lost; resumed = output had started.", 2,
        (const char *[]){"model_name", "phase"});
    o->model_failed = metrics_gauge_new(m, "pagoda_model_failed",
                                        "1 while a model's local workers are given up after a crash loop.", 1,
                                        L_MODEL);
    static const char *const L_MODEL_REPLICA[] = {"model_name", "replica"};
    o->routed = metrics_counter_new(m, "pagoda_routed_total",
                                    "Requests dispatched, by why the replica was chosen: cache (it holds "
                                    "the longest prefix), load (none holds any), overload (the one holding "
                                    "it was too loaded).",
                                    2, (const char *[]){"model_name", "by"});
    o->replica_prefix_queries = metrics_counter_new(
        m, "pagoda_replica_prefix_cache_queries_total",
        "Prompt tokens looked up in the prefix cache, per replica.", 2, L_MODEL_REPLICA);
    o->replica_prefix_hits = metrics_counter_new(
        m, "pagoda_replica_prefix_cache_hits_total",
        "Prompt tokens served from the prefix cache, per replica.", 2, L_MODEL_REPLICA);
    o->replica_prefix_hit_rate = metrics_gauge_new(
        m, "pagoda_replica_prefix_cache_hit_rate",
        "Prefix-cache hit rate (hit / queried prompt tokens) of a replica since it started.", 2,
        L_MODEL_REPLICA);
    o->kv_evictions = metrics_counter_new(m, "pagoda_kv_evictions_total",
                                          "KV blocks evicted from the workers' RAM prefix cache.", 1, L_MODEL);
    o->kv_disk_written = metrics_counter_new(m, "pagoda_kv_disk_written_bytes_total",
                                             "Bytes of KV blocks written to the disk tier.", 1, L_MODEL);
    o->kv_disk_read = metrics_counter_new(m, "pagoda_kv_disk_read_bytes_total",
                                          "Bytes of KV blocks loaded from the disk tier.", 1, L_MODEL);
    o->kv_disk_evictions = metrics_counter_new(m, "pagoda_kv_disk_evictions_total",
                                               "KV block files removed by the disk tier's size cap.", 1, L_MODEL);
    o->kv_disk_rejected = metrics_counter_new(
        m, "pagoda_kv_disk_rejected_total",
        "KV block files found but not served (torn, truncated or corrupt: checksum or header mismatch).", 1,
        L_MODEL);
    o->kv_disk_enabled = metrics_gauge_new(
        m, "pagoda_kv_disk_enabled",
        "1 while a replica's disk tier works, 0 after an I/O error (full or read-only disk) turned it off.", 2,
        (const char *[]){"model_name", "replica"});
    o->kv_disk_bytes = metrics_gauge_new(m, "pagoda_kv_disk_bytes", "Bytes of KV block files a replica's disk tier holds.",
                                         2, (const char *[]){"model_name", "replica"});
    o->prefix_index_entries = metrics_gauge_new(m, "pagoda_prefix_index_entries",
                                                "Block keys in the gateway's routing index.", 0, NULL);
    o->prefix_index_replica = metrics_gauge_new(m, "pagoda_prefix_index_replica_entries",
                                                "Block keys the routing index holds for a replica.", 2,
                                                L_MODEL_REPLICA);
    o->route_keys_seconds = metrics_counter_new(
        m, "pagoda_route_keys_seconds_total",
        "Time the gateway spent computing request block keys (template, tokenize, hash).", 1, L_MODEL);
    o->route_keys_requests = metrics_counter_new(m, "pagoda_route_keys_requests_total",
                                                 "Requests whose block keys the gateway computed.", 1,
                                                 L_MODEL);
    static const char *const L_MODEL_ADAPTER[] = {"model_name", "adapter"};
    o->lora_requests = metrics_counter_new(m, "pagoda_lora_requests_total",
                                           "Requests run with a LoRA adapter, per adapter (one per adapter of a "
                                           "request).", 2, L_MODEL_ADAPTER);
}
