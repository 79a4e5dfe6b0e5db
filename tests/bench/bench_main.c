/* bench_main.c — pagoda-bench, the end-to-end load generator for pagoda's
 * OpenAI-compatible HTTP API (or any server speaking it).
 *
 * It sends streamed completions (POST /v1/completions, or
 * /v1/chat/completions with --chat) with synthetic prompts of a chosen length
 * from many concurrent clients, all driven by one thread through libcurl's
 * multi interface, and reports throughput and latency percentiles.
 *
 * Usage:
 *   pagoda-bench --url URL [--model NAME] [options]
 *
 *   --url URL            server base URL (http://127.0.0.1:8080), or a full
 *                        .../v1/completions or .../v1/chat/completions URL
 *   --model NAME         "model" of every request (default: the first model
 *                        listed by GET /v1/models on --url)
 *   -c, --concurrency N  clients / max requests in flight (default 1)
 *   -n, --requests N     measured requests (default 100; per level with --sweep)
 *   --max-tokens T       max_tokens of every request (default 128)
 *   --prompt-tokens P    synthetic prompt length, words ~ tokens (default 128)
 *   --ignore-eos         send "ignore_eos": true so every request makes T tokens
 *   --rate R             open loop: Poisson arrivals at R req/s (-c caps in flight;
 *                        without -c the cap is the request count)
 *   --chat               use /v1/chat/completions (one user message)
 *   --shared-prefix      prompts share all but their last 8 words (prefix cache on)
 *   --groups G           multi-turn / shared-prefix workload: G long prefixes
 *                        ("system prompts" of --prompt-tokens words), each used by
 *                        a stream of conversations (tests/bench/bench_prompt.h)
 *   --turns T            turns per conversation (default 1: requests of a group
 *                        share the prefix, tails differ)
 *   --turn-words W       words each past turn adds to the history (default 64)
 *   --api-key KEY        send Authorization: Bearer KEY (default $PAGODA_API_KEY)
 *   --timeout S          per-request time limit in seconds (default 300; 0 = none)
 *   --warmup N           requests sent first and not counted (default 0)
 *   --seed S             prompts and arrival times (default 0)
 *   --extra-json OBJ     JSON object merged into every request body
 *                        (e.g. '{"temperature":0}')
 *   --json               print one JSON object (an array for --sweep) on stdout
 *   --progress / --no-progress  progress line on stderr (default: when a tty)
 *   --sweep 1,4,16,32    run once per concurrency level; table + chart
 *   --chart FILE.png     chart of a sweep (default bench.png; gnuplot needed)
 *   --compare            run the load against --baseline-url (a gateway whose
 *                        worker runs --max-seqs 1) then --url; print speedups
 *   --baseline-url URL   the baseline server for --compare
 *   --dump FILE          one JSON line per measured request (times, ITL gaps)
 *
 * Examples (against `make run`, which serves on 127.0.0.1:8080):
 *   pagoda-bench --url http://127.0.0.1:8080 --model stories -c 8 -n 64 \
 *       --max-tokens 64 --prompt-tokens 32 --ignore-eos
 *   pagoda-bench --url http://127.0.0.1:8080 --model stories --sweep 1,4,16,32 \
 *       -n 64 --ignore-eos --chart sweep.png
 *
 * Exit status: 0 every run finished and had at least one successful request;
 * 1 a run could not start or had no successful request; 2 bad usage.
 * docs/BENCH.md explains every number.
 */
#include <curl/curl.h>
#include <getopt.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/xalloc.h"
#include "tests/bench/bench_report.h"
#include "tests/bench/bench_run.h"

enum { MAX_SWEEP = 64 };

/* Everything the command line decides. */
struct options {
    bench_config_t cfg;        /* template for every run (url filled per run) */
    const char *url;           /* as given */
    const char *baseline_url;  /* --baseline-url */
    const char *chart;         /* --chart */
    const char *dump;          /* --dump */
    bool json;
    bool compare;
    bool concurrency_given;
    int progress;              /* -1 auto, 0 off, 1 on */
    size_t sweep[MAX_SWEEP];   /* concurrency levels */
    size_t n_sweep;            /* 0 = no sweep */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-bench --url URL [--model NAME] [-c N] [-n N] [--max-tokens T]\n"
            "         [--prompt-tokens P] [--ignore-eos] [--rate R] [--chat] [--shared-prefix]\n"
            "         [--groups G [--turns T] [--turn-words W]]\n"
            "         [--api-key KEY] [--timeout S] [--warmup N] [--seed S] [--extra-json OBJ]\n"
            "         [--json] [--progress|--no-progress] [--sweep 1,4,16] [--chart FILE.png]\n"
            "         [--compare --baseline-url URL] [--dump FILE]\n"
            "See the header of tests/bench/bench_main.c or docs/BENCH.md.\n");
}

static bool parse_size(const char *s, size_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end != '\0')
        return false;
    *out = (size_t)v;
    return true;
}

static bool parse_double(const char *s, double *out)
{
    char *end;
    if (!s || !*s)
        return false;
    double v = strtod(s, &end);
    if (*end != '\0' || !(v >= 0) || v > 1e12)
        return false;
    *out = v;
    return true;
}

static bool parse_sweep(const char *s, struct options *o)
{
    o->n_sweep = 0;
    const char *p = s;
    while (*p) {
        char *end;
        if (*p < '0' || *p > '9')
            return false;
        unsigned long long v = strtoull(p, &end, 10);
        if (v == 0 || v > 100000 || o->n_sweep == MAX_SWEEP)
            return false;
        o->sweep[o->n_sweep++] = (size_t)v;
        if (*end == ',')
            end++;
        else if (*end != '\0')
            return false;
        p = end;
    }
    return o->n_sweep > 0;
}

/* Returns 0 ok, 1 --help shown, 2 bad usage (message printed). */
static int parse_args(int argc, char **argv, struct options *o)
{
    enum {
        O_URL = 256, O_MODEL, O_MAXTOK, O_PROMPT, O_IGNORE_EOS, O_RATE, O_CHAT, O_SHARED,
        O_KEY, O_TIMEOUT, O_WARMUP, O_SEED, O_EXTRA, O_JSON, O_PROGRESS, O_NOPROGRESS,
        O_SWEEP, O_CHART, O_COMPARE, O_BASELINE, O_DUMP, O_GROUPS, O_TURNS, O_TURN_WORDS,
    };
    static const struct option longopts[] = {
        { "url", required_argument, 0, O_URL },
        { "model", required_argument, 0, O_MODEL },
        { "concurrency", required_argument, 0, 'c' },
        { "requests", required_argument, 0, 'n' },
        { "max-tokens", required_argument, 0, O_MAXTOK },
        { "prompt-tokens", required_argument, 0, O_PROMPT },
        { "ignore-eos", no_argument, 0, O_IGNORE_EOS },
        { "rate", required_argument, 0, O_RATE },
        { "chat", no_argument, 0, O_CHAT },
        { "shared-prefix", no_argument, 0, O_SHARED },
        { "api-key", required_argument, 0, O_KEY },
        { "timeout", required_argument, 0, O_TIMEOUT },
        { "warmup", required_argument, 0, O_WARMUP },
        { "seed", required_argument, 0, O_SEED },
        { "extra-json", required_argument, 0, O_EXTRA },
        { "json", no_argument, 0, O_JSON },
        { "progress", no_argument, 0, O_PROGRESS },
        { "no-progress", no_argument, 0, O_NOPROGRESS },
        { "sweep", required_argument, 0, O_SWEEP },
        { "chart", required_argument, 0, O_CHART },
        { "compare", no_argument, 0, O_COMPARE },
        { "baseline-url", required_argument, 0, O_BASELINE },
        { "dump", required_argument, 0, O_DUMP },
        { "groups", required_argument, 0, O_GROUPS },
        { "turns", required_argument, 0, O_TURNS },
        { "turn-words", required_argument, 0, O_TURN_WORDS },
        { "help", no_argument, 0, 'h' },
        { 0, 0, 0, 0 },
    };
    bench_config_t *c = &o->cfg;
    c->concurrency = 1;
    c->n_requests = 100;
    c->max_tokens = 128;
    c->prompt_words = 128;
    c->turns = 1;
    c->turn_words = 64;
    c->timeout_s = 300;
    c->api_key = getenv("PAGODA_API_KEY");
    o->chart = "bench.png";
    o->progress = -1;
    int ch;
    bool ok = true;
    size_t seed = 0;
    while ((ch = getopt_long(argc, argv, "c:n:h", longopts, NULL)) != -1) {
        switch (ch) {
        case O_URL: o->url = optarg; break;
        case O_MODEL: c->model = optarg; break;
        case 'c':
            ok = parse_size(optarg, &c->concurrency) && c->concurrency > 0;
            o->concurrency_given = true;
            break;
        case 'n': ok = parse_size(optarg, &c->n_requests); break;
        case O_MAXTOK: ok = parse_size(optarg, &c->max_tokens) && c->max_tokens > 0; break;
        case O_PROMPT: ok = parse_size(optarg, &c->prompt_words) && c->prompt_words < (1u << 24); break;
        case O_IGNORE_EOS: c->ignore_eos = true; break;
        case O_RATE: ok = parse_double(optarg, &c->rate) && c->rate > 0; break;
        case O_CHAT: c->chat = true; break;
        case O_SHARED: c->shared_prefix = true; break;
        case O_KEY: c->api_key = optarg; break;
        case O_TIMEOUT: ok = parse_double(optarg, &c->timeout_s); break;
        case O_WARMUP: ok = parse_size(optarg, &c->n_warmup); break;
        case O_SEED: ok = parse_size(optarg, &seed); c->seed = seed; break;
        case O_EXTRA: c->extra_json = optarg; break;
        case O_JSON: o->json = true; break;
        case O_PROGRESS: o->progress = 1; break;
        case O_NOPROGRESS: o->progress = 0; break;
        case O_SWEEP: ok = parse_sweep(optarg, o); break;
        case O_CHART: o->chart = optarg; break;
        case O_COMPARE: o->compare = true; break;
        case O_BASELINE: o->baseline_url = optarg; break;
        case O_DUMP: o->dump = optarg; break;
        case O_GROUPS: ok = parse_size(optarg, &c->groups) && c->groups > 0 && c->groups < (1u << 20); break;
        case O_TURNS: ok = parse_size(optarg, &c->turns) && c->turns > 0 && c->turns < 4096; break;
        case O_TURN_WORDS: ok = parse_size(optarg, &c->turn_words) && c->turn_words < (1u << 16); break;
        case 'h': usage(stdout); return 1;
        default: usage(stderr); return 2;
        }
        if (!ok) {
            fprintf(stderr, "pagoda-bench: bad value for %s: '%s'\n", argv[optind - 1],
                    optarg ? optarg : "");
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "pagoda-bench: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    if (!o->url) {
        fprintf(stderr, "pagoda-bench: --url is required\n");
        usage(stderr);
        return 2;
    }
    if (o->compare && !o->baseline_url) {
        fprintf(stderr, "pagoda-bench: --compare needs --baseline-url\n");
        return 2;
    }
    if (c->rate > 0 && !o->concurrency_given)
        c->concurrency = c->n_requests > 0 ? c->n_requests : 1;
    return 0;
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *ud)
{
    strbuf_t *b = ud;
    size_t n = size * nmemb;
    if (b->len + n > (1u << 20))
        return 0; /* a model list is small; stop a runaway body */
    strbuf_append(b, ptr, n);
    return n;
}

/* The first model id of GET <base>/v1/models, malloc'd, or NULL (logged). */
static char *fetch_default_model(const char *base, const char *api_key)
{
    char *ep = bench_run_endpoint(base, false); /* .../v1/completions */
    size_t n = strlen(ep), sl = strlen("/completions");
    char *url = xmalloc(n + 16);
    memcpy(url, ep, n - sl);
    strcpy(url + n - sl, "/models");
    free(ep);
    char *model = NULL;
    strbuf_t b = STRBUF_INIT;
    struct curl_slist *h = NULL;
    CURL *e = curl_easy_init();
    if (!e)
        goto out;
    if (api_key) {
        char auth[1024];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        h = curl_slist_append(h, auth);
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    }
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &b);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    if (!getenv("NO_PROXY") && !getenv("no_proxy"))
        curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status != 200) {
        if (rc != CURLE_OK)
            log_error("no --model given and GET %s failed: %s", url, curl_easy_strerror(rc));
        else
            log_error("no --model given and GET %s answered HTTP %ld", url, status);
        goto out;
    }
    json_t *j = json_loadb(b.s ? b.s : "", b.len, 0, NULL);
    json_t *first = json_array_get(json_object_get(j, "data"), 0);
    json_t *id = json_object_get(first, "id");
    if (json_is_string(id) && json_string_length(id) > 0)
        model = xstrdup(json_string_value(id));
    else
        log_error("no --model given and %s lists no model", url);
    json_decref(j);
out:
    if (e)
        curl_easy_cleanup(e);
    curl_slist_free_all(h);
    strbuf_free(&b);
    free(url);
    return model;
}

/* The runs of one server: one per sweep level (or a single one). */
struct series_runs {
    const char *name;
    char *url;                  /* endpoint, owned */
    bench_config_t cfgs[MAX_SWEEP];
    bench_result_t results[MAX_SWEEP];
    size_t n;
    size_t n_done;
};

static int run_series(const struct options *o, struct series_runs *s, const char *base_url,
                      const char *name, bool *first_dump)
{
    s->name = name;
    s->url = bench_run_endpoint(base_url, o->cfg.chat);
    s->n = o->n_sweep ? o->n_sweep : 1;
    for (size_t i = 0; i < s->n; i++) {
        bench_config_t *c = &s->cfgs[i];
        *c = o->cfg;
        c->url = s->url;
        if (o->n_sweep)
            c->concurrency = o->sweep[i];
        c->progress = o->progress == 1 || (o->progress == -1 && isatty(STDERR_FILENO));
        char *label = xmalloc(128);
        snprintf(label, 128, "%s%sc=%zu", name ? name : "", name ? " " : "", c->concurrency);
        c->label = label;
        int rc = bench_run(c, &s->results[i]);
        free(label);
        c->label = NULL;
        if (rc != 0)
            return -1;
        s->n_done++;
        if (o->dump) {
            if (bench_report_dump(o->dump, c, &s->results[i], !*first_dump) != 0)
                return -1;
            *first_dump = false;
        }
    }
    return 0;
}

static void series_fini(struct series_runs *s)
{
    for (size_t i = 0; i < s->n_done; i++)
        bench_result_fini(&s->results[i]);
    free(s->url);
    s->url = NULL;
}

static json_t *series_json(const struct series_runs *s, bool as_array)
{
    if (!as_array)
        return bench_report_json(&s->cfgs[0], &s->results[0]);
    json_t *a = json_array();
    for (size_t i = 0; i < s->n; i++)
        json_array_append_new(a, bench_report_json(&s->cfgs[i], &s->results[i]));
    return a;
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

/* Speedup of main over baseline at one level: throughput ratios main/base,
 * latency ratios base/main (above 1 = main is better). */
static json_t *speedup_json(const bench_config_t *c, const bench_result_t *base,
                            const bench_result_t *main_)
{
    return json_pack("{s:I, s:f, s:f, s:f, s:f}", "concurrency", (json_int_t)c->concurrency,
                     "output_tok_per_s", ratio(main_->output_tok_per_s, base->output_tok_per_s),
                     "req_per_s", ratio(main_->req_per_s, base->req_per_s), "e2e_p50",
                     ratio(base->e2e_ms.p50, main_->e2e_ms.p50), "ttft_p50",
                     ratio(base->ttft_ms.p50, main_->ttft_ms.p50));
}

static void print_speedup(FILE *f, const bench_config_t *c, const bench_result_t *base,
                          const bench_result_t *main_)
{
    fprintf(f, "  c=%-4zu output tok/s %8.1f -> %8.1f  x%.2f   req/s x%.2f   E2E p50 %.0f -> %.0f ms\n",
            c->concurrency, base->output_tok_per_s, main_->output_tok_per_s,
            ratio(main_->output_tok_per_s, base->output_tok_per_s),
            ratio(main_->req_per_s, base->req_per_s), base->e2e_ms.p50, main_->e2e_ms.p50);
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    if (s)
        printf("%s\n", s);
    free(s);
}

static bool all_runs_had_success(const struct series_runs *s)
{
    for (size_t i = 0; i < s->n_done; i++)
        if (s->cfgs[i].n_requests > 0 && s->results[i].n_ok == 0)
            return false;
    return true;
}

int main(int argc, char **argv)
{
    log_init("bench", LOG_INFO);
    /* Also makes bench_main.o pull clock.o out of libpagoda_common.a, which the
     * link line lists before the other tests/bench objects. */
    int64_t t_main_us = clock_now_us();
    struct options o;
    memset(&o, 0, sizeof o);
    int prc = parse_args(argc, argv, &o);
    if (prc == 1)
        return 0;
    if (prc != 0)
        return 2;
    signal(SIGPIPE, SIG_IGN);
    /* One socket per stream: allow as many as the hard limit permits. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        log_error("curl_global_init failed");
        return 1;
    }

    static struct series_runs base, main_runs; /* large: keep off the stack */
    bool first_dump = true;
    int rc = 0;
    char *model = NULL;
    if (!o.cfg.model) {
        model = fetch_default_model(o.url, o.cfg.api_key);
        if (!model) {
            rc = 1;
            goto out;
        }
        o.cfg.model = model;
        if (!o.json)
            log_info("model %s (first of /v1/models)", model);
    }
    if (o.compare && run_series(&o, &base, o.baseline_url, "baseline", &first_dump) != 0)
        rc = 1;
    if (rc == 0 && run_series(&o, &main_runs, o.url, o.compare ? "main" : NULL, &first_dump) != 0)
        rc = 1;
    if (rc != 0)
        goto out;

    bool sweep = o.n_sweep > 0;
    if (o.json) {
        json_t *j;
        if (o.compare) {
            json_t *sp = sweep ? json_array() : NULL;
            for (size_t i = 0; sweep && i < main_runs.n; i++)
                json_array_append_new(sp, speedup_json(&main_runs.cfgs[i], &base.results[i],
                                                       &main_runs.results[i]));
            if (!sweep)
                sp = speedup_json(&main_runs.cfgs[0], &base.results[0], &main_runs.results[0]);
            j = json_pack("{s:o, s:o, s:o}", "baseline", series_json(&base, sweep), "main",
                          series_json(&main_runs, sweep), "speedup", sp);
        } else {
            j = series_json(&main_runs, sweep);
        }
        print_json(j);
        json_decref(j);
    } else {
        struct series_runs *all[2] = { &base, &main_runs };
        for (size_t k = o.compare ? 0 : 1; k < 2; k++) {
            struct series_runs *s = all[k];
            if (sweep) {
                bench_series_t bs = { s->name, s->cfgs, s->results, s->n };
                bench_report_print_sweep(stdout, &bs);
                for (size_t i = 0; i < s->n; i++) {
                    if (s->results[i].n_err > 0) {
                        printf("  errors at c=%zu:\n", s->cfgs[i].concurrency);
                        bench_report_print_errors(stdout, &s->results[i], 5);
                    }
                }
            } else {
                if (s->name)
                    printf("%s\n", s->name);
                bench_report_print(stdout, &s->cfgs[0], &s->results[0]);
            }
            printf("\n");
        }
        if (o.compare) {
            printf("speedup of %s over baseline %s:\n", main_runs.url, base.url);
            for (size_t i = 0; i < main_runs.n; i++)
                print_speedup(stdout, &main_runs.cfgs[i], &base.results[i],
                              &main_runs.results[i]);
        }
    }
    fflush(stdout);

    if (sweep) {
        bench_series_t ser[2];
        size_t n_ser = 0;
        if (o.compare)
            ser[n_ser++] = (bench_series_t){ "baseline", base.cfgs, base.results, base.n };
        ser[n_ser++] = (bench_series_t){ o.compare ? "batching" : "", main_runs.cfgs,
                                         main_runs.results, main_runs.n };
        char title[512];
        snprintf(title, sizeof title, "pagoda-bench  %s  prompt %zu words, max_tokens %zu%s",
                 o.cfg.model, o.cfg.prompt_words, o.cfg.max_tokens,
                 o.cfg.ignore_eos ? ", ignore_eos" : "");
        int crc = bench_report_chart(o.chart, title, ser, n_ser);
        if (crc == 0)
            log_info("chart written to %s", o.chart);
        else if (crc < 0)
            log_warn("chart %s not written", o.chart);
    }
    if (!all_runs_had_success(&main_runs) || (o.compare && !all_runs_had_success(&base)))
        rc = 1;
    if (!o.json)
        log_info("finished in %.1f s", (double)(clock_now_us() - t_main_us) / 1e6);
out:
    series_fini(&base);
    series_fini(&main_runs);
    free(model);
    curl_global_cleanup();
    return rc;
}
