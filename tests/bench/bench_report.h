/* bench_report.h — pagoda-bench output: the human table, JSON, per-request
 * dumps and the gnuplot chart of a concurrency sweep.
 *
 * JSON of one run (bench_report_json), all times in milliseconds:
 *   url, model, endpoint ("completions"|"chat"), concurrency, rate (req/s or
 *   null), requests, warmup, max_tokens, prompt_words, ignore_eos,
 *   shared_prefix,
 *   duration_s, requests_ok, requests_err, req_per_s, output_tok_per_s,
 *   prompt_tok_per_s, total_tok_per_s, output_tokens, prompt_tokens,
 *   output_tokens_mean, prompt_tokens_mean, cached_prompt_tokens (sum of
 *   usage.prompt_tokens_details.cached_tokens, null when never reported),
 *   prompt_tokens_source / output_tokens_source ("usage" when every ok request
 *   reported usage, else "estimate": words resp. content chunks),
 *   ttft_ms, itl_ms, tpot_ms, e2e_ms: {n, mean, min, p50, p90, p99, max},
 *   errors: [{message, count}], errors_other (count beyond the distinct list).
 *
 * Ownership: bench_report_json() returns a new reference (json_decref it).
 */
#ifndef PAGODA_BENCH_REPORT_H
#define PAGODA_BENCH_REPORT_H

#include <jansson.h>
#include <stdio.h>

#include "tests/bench/bench_run.h"

/* One curve of a sweep chart: n runs of the same load at rising concurrency. */
typedef struct bench_series {
    const char *name;                /* legend, e.g. "batching" */
    const bench_config_t *cfgs;      /* (n) */
    const bench_result_t *results;   /* (n) */
    size_t n;
} bench_series_t;

json_t *bench_report_json(const bench_config_t *cfg, const bench_result_t *res);

/* The human table of one run. */
void bench_report_print(FILE *f, const bench_config_t *cfg, const bench_result_t *res);

/* One row per run of a sweep. */
void bench_report_print_sweep(FILE *f, const bench_series_t *s);

/* Up to max_shown distinct error messages with counts, indented. */
void bench_report_print_errors(FILE *f, const bench_result_t *res, size_t max_shown);

/* Writes every measured request as one JSON line: {concurrency, url,
 * t_send_ms, ttft_ms, e2e_ms, prompt_tokens, cached_tokens, output_tokens,
 * itl_ms: [...], error} (null = not observed); append = true
 * adds to the file. Returns 0, or -1 when the file cannot be written. */
int bench_report_dump(const char *path, const bench_config_t *cfg, const bench_result_t *res,
                      bool append);

/* Draws throughput and latency against concurrency for 1..n_series series
 * into png with gnuplot (a generated script, run as a subprocess).
 * Returns 0 written, 1 skipped because gnuplot is not installed (a warning is
 * logged), -1 gnuplot failed. */
int bench_report_chart(const char *png, const char *title, const bench_series_t *series,
                       size_t n_series);

#endif
