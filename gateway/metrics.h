/* metrics.h — a small Prometheus registry rendered in the text exposition
 * format 0.0.4 (what GET /metrics returns, Content-Type
 * "text/plain; version=0.0.4; charset=utf-8").
 *
 * A registry holds metric *families* (one name, one HELP text, one type, fixed
 * label names) in registration order; each family holds *series* keyed by
 * their label values, created on first use. Three types:
 *   counter    monotonically increasing double; its name must end in `_total`
 *              and the TYPE line carries that same name (this is what promtool
 *              and the Prometheus text parser expect: a TYPE line for `foo`
 *              does not cover a sample named `foo_total`)
 *   gauge      a double that can go up and down
 *   histogram  fixed upper bounds (sorted, finite); rendered as cumulative
 *              `NAME_bucket{...,le="B"}` lines, a final le="+Inf" bucket,
 *              `NAME_sum` and `NAME_count`
 * Values are printed with the shortest decimal that reads back exactly;
 * ±Inf and NaN as "+Inf", "-Inf", "NaN". HELP text escapes \ and newline; label
 * values escape \, " and newline.
 *
 * Names and labels are chosen by code, not by users, so a malformed name, a
 * duplicate family, a wrong label count or a negative counter increment is a
 * programming error (assert). Label *values* may come from outside (model
 * names) and are escaped. A family holds at most METRICS_MAX_SERIES series;
 * past that, new label combinations are dropped and counted in
 * metrics_dropped() — a guard against label-cardinality blow-ups.
 *
 * Thread-safety: every call may be made from any thread; one mutex per
 * registry serializes updates and rendering. Families live as long as their
 * registry; metrics_free frees everything.
 *
 * Note on names: vLLM's metric names contain ':' ("vllm:num_requests_running").
 * We keep them for drop-in dashboard compatibility. promtool's *linter* reports
 * "metric names should not contain ':'" for them (colons are conventionally
 * reserved for recording rules); the exposition itself is valid and parses.
 * Every other lint check passes, and pagoda_* names are lint-clean.
 */
#ifndef PAGODA_GATEWAY_METRICS_H
#define PAGODA_GATEWAY_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_MAX_LABELS 4
#define METRICS_MAX_SERIES 4096
#define METRICS_MAX_BUCKETS 64

typedef enum { METRICS_COUNTER, METRICS_GAUGE, METRICS_HISTOGRAM } metrics_type_t;

typedef struct metrics metrics_t;
typedef struct metrics_family metrics_family_t;

metrics_t *metrics_new(void);
/* Frees the registry and all its families; NULLs *m. NULL-safe. */
void metrics_free(metrics_t **m);

/* Register a family. `labels` has n_labels label names (≤ METRICS_MAX_LABELS).
 * Strings are copied. The family is owned by the registry. A family without
 * labels starts with one series at 0 so it always shows up. */
metrics_family_t *metrics_counter_new(metrics_t *m, const char *name, const char *help, size_t n_labels,
                                      const char *const *labels);
metrics_family_t *metrics_gauge_new(metrics_t *m, const char *name, const char *help, size_t n_labels,
                                    const char *const *labels);
/* `bounds`: n_bounds strictly increasing finite upper bounds (copied). */
metrics_family_t *metrics_histogram_new(metrics_t *m, const char *name, const char *help,
                                        size_t n_labels, const char *const *labels,
                                        const double *bounds, size_t n_bounds);

/* Updates. `values` holds one label value per label name (NULL if none). */
void metrics_counter_add(metrics_family_t *f, const char *const *values, double v); /* v ≥ 0 */
void metrics_gauge_set(metrics_family_t *f, const char *const *values, double v);
void metrics_gauge_add(metrics_family_t *f, const char *const *values, double v);
void metrics_histogram_observe(metrics_family_t *f, const char *const *values, double v);

/* Current value of a counter/gauge series, or a histogram's observation count;
 * 0 when the series does not exist yet. For tests and /admin. */
double metrics_value(metrics_family_t *f, const char *const *values);
/* Sum of a histogram series (0 when absent or not a histogram). */
double metrics_histogram_sum(metrics_family_t *f, const char *const *values);

/* Observations dropped because a family hit METRICS_MAX_SERIES. */
uint64_t metrics_dropped(metrics_t *m);

/* Renders the whole registry. Returns a malloc'd NUL-terminated string (caller
 * frees with free()); *len (if non-NULL) receives strlen. */
char *metrics_render(metrics_t *m, size_t *len);

/* Formats v the way the renderer does ("0.25", "3", "+Inf", "1e-07"). out ≥ 32 bytes. */
void metrics_format_double(double v, char *out, size_t cap);

/* ---- the gateway's standard families ----------------------------------- */

/* Bucket boundaries (seconds), from vLLM's v1 metrics so dashboards line up. */
extern const double metrics_buckets_ttft[];     /* time to first token */
extern const size_t metrics_n_buckets_ttft;
extern const double metrics_buckets_itl[];      /* inter-token latency */
extern const size_t metrics_n_buckets_itl;
extern const double metrics_buckets_request[];  /* e2e latency, queue time */
extern const size_t metrics_n_buckets_request;

/* Every family the gateway exports. Label sets are in brackets. */
typedef struct {
    /* vLLM-compatible names */
    metrics_family_t *num_requests_running;   /* gauge   [model_name] requests on workers */
    metrics_family_t *num_requests_waiting;   /* gauge   [model_name] requests queued */
    metrics_family_t *kv_cache_usage_perc;    /* gauge   [model_name] used KV blocks, 0..1 */
    metrics_family_t *prefix_cache_queries;   /* counter [model_name] prompt tokens looked up */
    metrics_family_t *prefix_cache_hits;      /* counter [model_name] of those, found cached in RAM */
    metrics_family_t *external_prefix_cache_hits; /* counter [model_name] of those, loaded from the
                                                     workers' disk tier (worker/kv_disk.h) */
    metrics_family_t *num_preemptions;        /* counter [model_name] */
    metrics_family_t *steps_stopped;          /* counter [model_name] steps stopped for a better tier */
    metrics_family_t *spec_num_drafts;        /* counter [model_name] verifies with drafts */
    metrics_family_t *spec_num_draft_tokens;  /* counter [model_name] draft tokens verified */
    metrics_family_t *spec_num_accepted;      /* counter [model_name] draft tokens accepted */
    metrics_family_t *prompt_tokens;          /* counter [model_name] */
    metrics_family_t *prompt_tokens_computed; /* counter [model_name] prompt tokens the workers
                                                 prefilled (cache hits excluded; heartbeats) */
    metrics_family_t *generation_tokens;      /* counter [model_name] */
    metrics_family_t *request_success;        /* counter [model_name, finished_reason] */
    metrics_family_t *time_to_first_token;    /* histogram [model_name] seconds */
    metrics_family_t *inter_token_latency;    /* histogram [model_name] seconds */
    metrics_family_t *e2e_request_latency;    /* histogram [model_name] seconds */
    metrics_family_t *request_queue_time;     /* histogram [model_name] seconds */
    /* pagoda's own */
    metrics_family_t *requests;               /* counter [model_name, tier] accepted requests */
    metrics_family_t *rejected_queue_full;    /* counter [model_name, tier] 429 answers */
    metrics_family_t *http_responses;         /* counter [code] every HTTP response by status */
    metrics_family_t *worker_restarts;        /* counter [model_name] */
    metrics_family_t *workers_connected;      /* gauge   [model_name] live worker replicas */
    metrics_family_t *queue_length;           /* gauge   [model_name, tier] */
    metrics_family_t *workers_lost;           /* counter [model_name] registrations dropped as dead */
    metrics_family_t *requests_redispatched;  /* counter [model_name, phase] phase = "queued" (no
                                                 output yet) | "resumed" (stream continued) */
    metrics_family_t *model_failed;           /* gauge   [model_name] 1 = crash loop, given up */
    /* routing by cache (gateway/route.h) */
    metrics_family_t *routed;                 /* counter [model_name, by] by = "cache" | "load" |
                                                 "overload" */
    metrics_family_t *replica_prefix_queries; /* counter [model_name, replica] prompt tokens looked up */
    metrics_family_t *replica_prefix_hits;    /* counter [model_name, replica] of those, cached */
    metrics_family_t *replica_prefix_hit_rate;/* gauge   [model_name, replica] hits / queries since
                                                 the worker started */
    /* KV tiers (docs/KV_CACHE.md "Disk tier") */
    metrics_family_t *kv_evictions;           /* counter [model_name] blocks evicted from workers' RAM */
    metrics_family_t *kv_disk_written;        /* counter [model_name] bytes written to the disk tier */
    metrics_family_t *kv_disk_read;           /* counter [model_name] bytes loaded from it */
    metrics_family_t *kv_disk_evictions;      /* counter [model_name] files removed by the size cap */
    metrics_family_t *kv_disk_rejected;       /* counter [model_name] torn/corrupt files not served */
    metrics_family_t *kv_disk_enabled;        /* gauge   [model_name, replica] 1 on, 0 off after an
                                                 I/O error (absent: no disk tier) */
    metrics_family_t *kv_disk_bytes;          /* gauge   [model_name, replica] bytes of block files */
    metrics_family_t *prefix_index_entries;   /* gauge   [] block keys in the routing index */
    metrics_family_t *prefix_index_replica;   /* gauge   [model_name, replica] of those, held by it */
    metrics_family_t *route_keys_seconds;     /* counter [model_name] time spent computing request
                                                 keys (render + tokenize + hash) */
    metrics_family_t *route_keys_requests;    /* counter [model_name] requests keys were computed for */
    metrics_family_t *lora_requests;          /* counter [model_name, adapter] requests run with a
                                                 LoRA adapter (gateway/lora_table.h), per adapter */
} metrics_std_t;

/* Registers all of the above in m and fills *out. Call once per registry. */
void metrics_std_register(metrics_t *m, metrics_std_t *out);

#endif
