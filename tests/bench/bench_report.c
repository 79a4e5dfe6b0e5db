/* bench_report.c — tables, JSON, dumps and charts of pagoda-bench runs
 * (see bench_report.h). */
#include "tests/bench/bench_report.h"

#include <errno.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "tests/bench/bench_prompt.h"

extern char **environ;

static json_t *summary_json(const bench_summary_t *s)
{
    return json_pack("{s:I, s:f, s:f, s:f, s:f, s:f, s:f}", "n", (json_int_t)s->n, "mean",
                     s->mean, "min", s->min, "p50", s->p50, "p90", s->p90, "p99", s->p99, "max",
                     s->max);
}

json_t *bench_report_json(const bench_config_t *cfg, const bench_result_t *res)
{
    json_t *j = json_object();
    json_object_set_new(j, "url", json_string(cfg->url));
    json_object_set_new(j, "model", json_string(cfg->model));
    json_object_set_new(j, "endpoint", json_string(cfg->chat ? "chat" : "completions"));
    json_object_set_new(j, "concurrency", json_integer((json_int_t)cfg->concurrency));
    json_object_set_new(j, "rate", cfg->rate > 0 ? json_real(cfg->rate) : json_null());
    json_object_set_new(j, "requests", json_integer((json_int_t)cfg->n_requests));
    json_object_set_new(j, "warmup", json_integer((json_int_t)cfg->n_warmup));
    json_object_set_new(j, "max_tokens", json_integer((json_int_t)cfg->max_tokens));
    json_object_set_new(j, "prompt_words", json_integer((json_int_t)cfg->prompt_words));
    json_object_set_new(j, "ignore_eos", json_boolean(cfg->ignore_eos));
    json_object_set_new(j, "shared_prefix", json_boolean(cfg->shared_prefix));
    json_object_set_new(j, "groups", json_integer((json_int_t)cfg->groups));
    json_object_set_new(j, "turns", json_integer((json_int_t)cfg->turns));
    json_object_set_new(j, "duration_s", json_real(res->duration_s));
    json_object_set_new(j, "requests_ok", json_integer((json_int_t)res->n_ok));
    json_object_set_new(j, "requests_err", json_integer((json_int_t)res->n_err));
    json_object_set_new(j, "req_per_s", json_real(res->req_per_s));
    json_object_set_new(j, "output_tok_per_s", json_real(res->output_tok_per_s));
    json_object_set_new(j, "prompt_tok_per_s", json_real(res->prompt_tok_per_s));
    json_object_set_new(j, "total_tok_per_s",
                        json_real(res->output_tok_per_s + res->prompt_tok_per_s));
    json_object_set_new(j, "output_tokens", json_integer(res->output_tokens));
    json_object_set_new(j, "prompt_tokens", json_integer(res->prompt_tokens));
    json_object_set_new(j, "output_tokens_mean", json_real(res->output_tokens_mean));
    json_object_set_new(j, "prompt_tokens_mean", json_real(res->prompt_tokens_mean));
    /* prefix-cache hits, when the server reports them */
    json_object_set_new(j, "cached_prompt_tokens", res->n_cached_reported
                                                       ? json_integer(res->cached_tokens)
                                                       : json_null());
    json_object_set_new(j, "prompt_tokens_source",
                        json_string(res->prompt_from_server ? "usage" : "estimate"));
    json_object_set_new(j, "output_tokens_source",
                        json_string(res->output_from_server ? "usage" : "estimate"));
    json_object_set_new(j, "ttft_ms", summary_json(&res->ttft_ms));
    json_object_set_new(j, "itl_ms", summary_json(&res->itl_ms));
    json_object_set_new(j, "tpot_ms", summary_json(&res->tpot_ms));
    json_object_set_new(j, "e2e_ms", summary_json(&res->e2e_ms));
    json_t *errs = json_array();
    for (size_t i = 0; i < res->n_distinct_errors; i++)
        json_array_append_new(errs, json_pack("{s:s, s:I}", "message", res->errors[i].message,
                                              "count", (json_int_t)res->errors[i].count));
    json_object_set_new(j, "errors", errs);
    json_object_set_new(j, "errors_other", json_integer((json_int_t)res->n_other_errors));
    return j;
}

static void print_summary_row(FILE *f, const char *name, const bench_summary_t *s)
{
    if (s->n == 0) {
        fprintf(f, "  %-6s %9s %9s %9s %9s %9s   (no samples)\n", name, "-", "-", "-", "-", "-");
        return;
    }
    fprintf(f, "  %-6s %9.2f %9.2f %9.2f %9.2f %9.2f   (%zu samples)\n", name, s->mean, s->p50,
            s->p90, s->p99, s->max, s->n);
}

void bench_report_print_errors(FILE *f, const bench_result_t *res, size_t max_shown)
{
    size_t shown = res->n_distinct_errors < max_shown ? res->n_distinct_errors : max_shown;
    for (size_t i = 0; i < shown; i++)
        fprintf(f, "    %5zu x %s\n", res->errors[i].count, res->errors[i].message);
    size_t rest = res->n_other_errors;
    for (size_t i = shown; i < res->n_distinct_errors; i++)
        rest += res->errors[i].count;
    if (rest > 0)
        fprintf(f, "    %5zu x (other errors)\n", rest);
}

void bench_report_print(FILE *f, const bench_config_t *cfg, const bench_result_t *res)
{
    fprintf(f, "pagoda-bench  %s  model %s\n", cfg->url, cfg->model);
    if (cfg->rate > 0)
        fprintf(f, "  load       Poisson %.2f req/s, at most %zu in flight", cfg->rate,
                cfg->concurrency);
    else
        fprintf(f, "  load       %zu concurrent clients", cfg->concurrency);
    fprintf(f, ", %zu requests (+%zu warm-up), prompt %zu words%s, max_tokens %zu%s\n",
            cfg->n_requests, cfg->n_warmup, cfg->prompt_words,
            cfg->shared_prefix ? " (shared prefix)" : "", cfg->max_tokens,
            cfg->ignore_eos ? ", ignore_eos" : "");
    if (cfg->groups)
        fprintf(f, "  workload   %zu prefixes of %zu words, %zu turns per conversation, +%zu words "
                   "per turn\n", cfg->groups, cfg->prompt_words, cfg->turns,
                cfg->turn_words + BENCH_PROMPT_TAIL);
    fprintf(f, "  duration   %.3f s\n", res->duration_s);
    fprintf(f, "  requests   %zu ok, %zu errors\n", res->n_ok, res->n_err);
    fprintf(f, "  throughput %.2f req/s, %.1f output tok/s, %.1f prompt tok/s\n", res->req_per_s,
            res->output_tok_per_s, res->prompt_tok_per_s);
    fprintf(f, "  tokens     output %.1f per request (%s), prompt %.1f per request (%s)\n",
            res->output_tokens_mean, res->output_from_server ? "usage" : "counted chunks",
            res->prompt_tokens_mean, res->prompt_from_server ? "usage" : "estimated = words");
    if (res->n_cached_reported > 0)
        fprintf(f, "  cache      %.1f%% of prompt tokens were prefix-cache hits (%lld tokens)\n",
                res->prompt_tokens > 0
                    ? 100.0 * (double)res->cached_tokens / (double)res->prompt_tokens
                    : 0.0,
                (long long)res->cached_tokens);
    fprintf(f, "  latency ms      mean       p50       p90       p99       max\n");
    print_summary_row(f, "TTFT", &res->ttft_ms);
    print_summary_row(f, "ITL", &res->itl_ms);
    print_summary_row(f, "TPOT", &res->tpot_ms);
    print_summary_row(f, "E2E", &res->e2e_ms);
    if (res->n_err > 0) {
        fprintf(f, "  errors:\n");
        bench_report_print_errors(f, res, 5);
    }
}

void bench_report_print_sweep(FILE *f, const bench_series_t *s)
{
    if (s->name)
        fprintf(f, "%s\n", s->name);
    fprintf(f, "  %5s %6s %5s %9s %10s %9s %9s %9s %9s %9s %9s\n", "conc", "ok", "err", "req/s",
            "out tok/s", "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "E2E p50", "E2E p99");
    for (size_t i = 0; i < s->n; i++) {
        const bench_result_t *r = &s->results[i];
        fprintf(f, "  %5zu %6zu %5zu %9.2f %10.1f %9.1f %9.1f %9.2f %9.2f %9.1f %9.1f\n",
                s->cfgs[i].concurrency, r->n_ok, r->n_err, r->req_per_s, r->output_tok_per_s,
                r->ttft_ms.p50, r->ttft_ms.p99, r->itl_ms.p50, r->itl_ms.p99, r->e2e_ms.p50,
                r->e2e_ms.p99);
    }
    fprintf(f, "  (latencies in ms)\n");
}

static json_t *ms_or_null(int64_t us)
{
    return us >= 0 ? json_real((double)us / 1000.0) : json_null();
}

int bench_report_dump(const char *path, const bench_config_t *cfg, const bench_result_t *res,
                      bool append)
{
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) {
        log_error("--dump %s: %s", path, strerror(errno));
        return -1;
    }
    for (size_t i = 0; i < res->n_records; i++) {
        const bench_record_t *r = &res->records[i];
        json_t *itl = json_array();
        for (uint64_t k = 0; k + 1 < r->n_content; k++)
            json_array_append_new(itl, json_real(r->itl_ms[k]));
        json_t *j = json_object();
        json_object_set_new(j, "concurrency", json_integer((json_int_t)cfg->concurrency));
        json_object_set_new(j, "url", json_string(cfg->url));
        json_object_set_new(j, "t_send_ms", ms_or_null(r->t_send_us));
        json_object_set_new(j, "ttft_ms", ms_or_null(r->ttft_us));
        json_object_set_new(j, "e2e_ms", ms_or_null(r->e2e_us));
        json_object_set_new(j, "prompt_tokens",
                            r->prompt_tokens >= 0 ? json_integer(r->prompt_tokens) : json_null());
        json_object_set_new(j, "cached_tokens",
                            r->cached_tokens >= 0 ? json_integer(r->cached_tokens) : json_null());
        json_object_set_new(j, "output_tokens", json_integer(r->output_tokens));
        json_object_set_new(j, "itl_ms", itl);
        json_object_set_new(j, "error", r->error ? json_string(r->error) : json_null());
        char *s = json_dumps(j, JSON_COMPACT);
        if (s)
            fprintf(f, "%s\n", s);
        free(s);
        json_decref(j);
    }
    int rc = ferror(f) ? -1 : 0;
    if (fclose(f) != 0)
        rc = -1;
    if (rc != 0)
        log_error("--dump %s: write failed", path);
    return rc;
}

/* Writes s as a gnuplot single-quoted string ('' stands for '). */
static void gp_quote(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        if (*s == '\'')
            fputc('\'', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('\'', f);
}

int bench_report_chart(const char *png, const char *title, const bench_series_t *series,
                       size_t n_series)
{
    char dir[] = "/tmp/pagoda-bench.XXXXXX";
    if (!mkdtemp(dir)) {
        log_warn("chart: mkdtemp: %s", strerror(errno));
        return -1;
    }
    char script[sizeof dir + 16], data[sizeof dir + 32];
    snprintf(script, sizeof script, "%s/chart.gp", dir);
    int rc = -1;
    FILE *g = fopen(script, "w");
    if (!g)
        goto out;
    /* One data file per series; columns:
     * 1 concurrency, 2 req/s, 3 output tok/s, 4 TTFT p50, 5 ITL p50,
     * 6 E2E p50, 7 TTFT p99, 8 E2E p99 (ms) */
    for (size_t k = 0; k < n_series; k++) {
        snprintf(data, sizeof data, "%s/series%zu.dat", dir, k);
        FILE *d = fopen(data, "w");
        if (!d) {
            fclose(g);
            goto out;
        }
        const bench_series_t *s = &series[k];
        for (size_t i = 0; i < s->n; i++) {
            const bench_result_t *r = &s->results[i];
            fprintf(d, "%zu %.6g %.6g %.6g %.6g %.6g %.6g %.6g\n", s->cfgs[i].concurrency,
                    r->req_per_s, r->output_tok_per_s, r->ttft_ms.p50, r->itl_ms.p50,
                    r->e2e_ms.p50, r->ttft_ms.p99, r->e2e_ms.p99);
        }
        fclose(d);
    }
    fprintf(g, "set terminal pngcairo size 1000,900 noenhanced font 'sans,10'\n");
    fprintf(g, "set output ");
    gp_quote(g, png);
    fprintf(g, "\nset multiplot layout 2,1 title ");
    gp_quote(g, title);
    fprintf(g, "\nset logscale x 2\nset grid\nset key outside right top\n");
    fprintf(g, "set xlabel 'concurrent clients'\nset ylabel 'tokens/s'\nset y2label 'requests/s'\n"
               "set ytics nomirror\nset y2tics\nset yrange [0:*]\nset y2range [0:*]\n");
    /* Colour = metric, line style = series (solid, dashed, dotted). */
    fprintf(g, "set lmargin at screen 0.08\nset rmargin at screen 0.68\n"
               "set offsets graph 0.03, graph 0.03, graph 0.05, 0\n");
    fprintf(g, "set title 'Throughput'\nplot ");
    for (size_t k = 0; k < n_series; k++) {
        const char *nm = series[k].name && series[k].name[0] ? series[k].name : NULL;
        int dt = (int)k + 1, pt = 7 - (int)k;
        char t[160];
        fprintf(g, "%s'%s/series%zu.dat' using 1:3 with linespoints lw 2 dt %d pt %d "
                   "lc rgb '#1f77b4' title ", k ? ", " : "", dir, k, dt, pt);
        snprintf(t, sizeof t, "%s%soutput tok/s", nm ? nm : "", nm ? " " : "");
        gp_quote(g, t);
        fprintf(g, ", '%s/series%zu.dat' using 1:2 axes x1y2 with linespoints lw 2 dt %d pt %d "
                   "lc rgb '#ff7f0e' title ", dir, k, dt, pt);
        snprintf(t, sizeof t, "%s%sreq/s (right axis)", nm ? nm : "", nm ? " " : "");
        gp_quote(g, t);
    }
    fprintf(g, "\nunset y2label\nunset y2tics\nset ytics mirror\nset logscale y\nset yrange [*:*]\n"
               "set ylabel 'milliseconds (log)'\nset title 'Latency'\n"
               "set offsets graph 0.03, graph 0.03, graph 0.05, graph 0.05\nplot ");
    /* zero values (e.g. no ITL with max_tokens 1) cannot sit on a log axis */
    static const struct { int col; const char *what, *rgb; } lat[] = {
        { 4, "TTFT p50", "#1f77b4" }, { 7, "TTFT p99", "#9ecae1" }, { 5, "ITL p50", "#2ca02c" },
        { 6, "E2E p50", "#d62728" }, { 8, "E2E p99", "#ff9896" },
    };
    for (size_t k = 0; k < n_series; k++) {
        const char *nm = series[k].name && series[k].name[0] ? series[k].name : NULL;
        for (size_t m = 0; m < sizeof lat / sizeof lat[0]; m++) {
            fprintf(g, "%s'%s/series%zu.dat' using 1:($%d>0?$%d:1/0) with linespoints lw 2 "
                       "dt %d pt %d lc rgb '%s' title ", k || m ? ", " : "", dir, k, lat[m].col,
                    lat[m].col, (int)k + 1, 7 - (int)k, lat[m].rgb);
            char t[160];
            snprintf(t, sizeof t, "%s%s%s", nm ? nm : "", nm ? " " : "", lat[m].what);
            gp_quote(g, t);
        }
    }
    fprintf(g, "\nunset multiplot\nset output\n");
    if (fclose(g) != 0)
        goto out;

    pid_t pid;
    char *argv[] = { "gnuplot", script, NULL };
    int e = posix_spawnp(&pid, "gnuplot", NULL, NULL, argv, environ);
    if (e == ENOENT) {
        log_warn("gnuplot not found (Debian package gnuplot-nox): chart %s not written", png);
        rc = 1;
        goto out;
    }
    if (e != 0) {
        log_warn("chart: cannot run gnuplot: %s", strerror(e));
        goto out;
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0 && access(png, F_OK) == 0)
        rc = 0;
    else
        log_warn("chart: gnuplot failed (status %d); script kept in %s", status, script);
out:
    if (rc != -1 || access(script, F_OK) != 0) {
        for (size_t k = 0; k < n_series; k++) {
            snprintf(data, sizeof data, "%s/series%zu.dat", dir, k);
            unlink(data);
        }
        unlink(script);
        rmdir(dir);
    }
    return rc;
}
