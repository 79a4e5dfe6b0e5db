/* bench_run.h — one pagoda-bench load run: many streamed requests against one
 * OpenAI-compatible endpoint, driven from a single thread with libcurl's
 * multi interface (one easy handle per in-flight request, all multiplexed by
 * curl_multi_poll; hundreds of concurrent streams cost one thread).
 *
 * Load shapes:
 *   closed loop (rate == 0): `concurrency` clients, each sending its next
 *       request as soon as the previous one ends;
 *   open loop (rate > 0): request i is sent at a Poisson arrival time
 *       (exponential inter-arrival gaps, mean 1/rate s, seeded), but never
 *       more than `concurrency` in flight (a late request is sent when a slot
 *       frees; latencies are measured from the actual send).
 *
 * Timing: every latency is measured from the moment the request is handed to
 * libcurl (so it includes connecting, when a kept-alive connection is not
 * available) with CLOCK_MONOTONIC. `duration_s` runs from the first send of
 * the measured phase to the last completion. Warm-up requests run first with
 * the same concurrency and are not counted.
 *
 * Ownership: bench_run() fills a caller-provided bench_result_t; release its
 * allocations with bench_result_fini(). The config's strings are borrowed.
 */
#ifndef PAGODA_BENCH_RUN_H
#define PAGODA_BENCH_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/bench/bench_stats.h"

typedef struct bench_config {
    const char *url;         /* endpoint URL (full path, see bench_run_endpoint) */
    const char *model;       /* "model" field of every request */
    const char *api_key;     /* sent as "Authorization: Bearer KEY"; NULL = none */
    const char *extra_json;  /* JSON object merged into every request body; NULL = none */
    bool chat;               /* /v1/chat/completions body (messages) instead of prompt */
    size_t concurrency;      /* max requests in flight, >= 1 */
    size_t n_requests;       /* measured requests */
    size_t n_warmup;         /* uncounted requests sent first */
    double rate;             /* Poisson arrivals per second; 0 = closed loop */
    size_t max_tokens;       /* "max_tokens" of every request */
    size_t prompt_words;     /* synthetic prompt length in words (~tokens) */
    bool ignore_eos;         /* send "ignore_eos": true */
    bool shared_prefix;      /* prompts share all but their last words */
    size_t groups;           /* > 0: multi-turn / shared-prefix workload with this many
                                long prefixes (bench_prompt_conversation) */
    size_t turns;            /* turns per conversation (with groups), ≥ 1 */
    size_t turn_words;       /* words each past turn adds to the history (with groups) */
    double timeout_s;        /* per-request limit; 0 = none */
    uint64_t seed;           /* prompts and arrival times */
    bool progress;           /* progress line on stderr */
    const char *label;       /* shown in the progress line, may be NULL */
} bench_config_t;

/* One measured request, for --dump. Times in microseconds; -1 = not observed. */
typedef struct bench_record {
    int64_t t_send_us;       /* since the start of the measured phase */
    int64_t ttft_us;         /* first content chunk - send */
    int64_t e2e_us;          /* transfer end - send */
    int64_t prompt_tokens;   /* usage.prompt_tokens, -1 = not reported */
    int64_t cached_tokens;   /* usage.prompt_tokens_details.cached_tokens, -1 = not reported */
    int64_t output_tokens;   /* usage.completion_tokens, else content chunks */
    bool output_from_usage;  /* output_tokens came from usage.completion_tokens */
    uint64_t n_content;      /* content chunks */
    double *itl_ms;          /* (n_content - 1) gaps, ms; owned by the result */
    char *error;             /* NULL = ok; owned by the result */
} bench_record_t;

enum { BENCH_MAX_DISTINCT_ERRORS = 16 };

typedef struct bench_error_count {
    char *message;           /* owned */
    size_t count;
} bench_error_count_t;

typedef struct bench_result {
    double duration_s;       /* first send -> last completion (measured phase) */
    size_t n_ok, n_err;
    double req_per_s;        /* n_ok / duration_s */
    double output_tok_per_s; /* output tokens of ok requests / duration_s */
    double prompt_tok_per_s; /* prompt tokens of ok requests / duration_s */
    int64_t output_tokens;   /* sum over ok requests */
    int64_t prompt_tokens;   /* sum over ok requests (server-reported, else words + 0) */
    int64_t cached_tokens;   /* sum of prompt_tokens_details.cached_tokens (ok requests) */
    size_t n_cached_reported; /* ok requests that reported cached_tokens */
    bool prompt_from_server; /* every ok request reported usage.prompt_tokens */
    bool output_from_server; /* every ok request reported usage.completion_tokens */
    double prompt_tokens_mean, output_tokens_mean; /* per ok request */
    bench_summary_t ttft_ms; /* ok requests that produced content */
    bench_summary_t itl_ms;  /* every gap of every ok request, pooled */
    bench_summary_t tpot_ms; /* per ok request with >1 token: (e2e - ttft)/(tokens - 1) */
    bench_summary_t e2e_ms;  /* ok requests */
    bench_error_count_t errors[BENCH_MAX_DISTINCT_ERRORS]; /* first distinct, in order seen */
    size_t n_distinct_errors;
    size_t n_other_errors;   /* errors whose message did not fit in errors[] */
    bench_record_t *records; /* (n_records) in completion order */
    size_t n_records;
} bench_result_t;

/* Builds the endpoint URL from what the user gave: a URL already ending in
 * /v1/completions or /v1/chat/completions is kept; one ending in /v1 gets
 * /completions or /chat/completions; anything else gets /v1/... appended
 * (a trailing '/' is dropped first). Returns a malloc'd string. */
char *bench_run_endpoint(const char *base, bool chat);

/* Runs warm-up then the measured requests. Returns 0 on success (even if
 * requests failed: they are counted in the result), -1 when the run could
 * not start (bad extra_json, libcurl failure; a message is logged). */
int bench_run(const bench_config_t *cfg, bench_result_t *res);

void bench_result_fini(bench_result_t *res);

#endif
