/* bench_run.c — the load loop of pagoda-bench: one thread, one curl multi
 * handle, one easy handle per in-flight request (see bench_run.h). */
#include "tests/bench/bench_run.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "tests/bench/bench_prompt.h"
#include "tests/bench/bench_stream.h"

/* One request in flight. */
struct req {
    CURL *easy;
    bench_stream_t *st;
    char *body;              /* JSON request body; libcurl borrows it */
    bool measured;           /* false for warm-up requests */
    char errbuf[CURL_ERROR_SIZE];
};

/* State of one bench_run() call. */
struct run {
    const bench_config_t *cfg;
    bench_result_t *res;
    CURLM *multi;
    struct curl_slist *headers;  /* shared by every request */
    json_t *extra;               /* parsed cfg->extra_json, or NULL */
    size_t n_in_flight;
    size_t cap_records;
    /* measured phase */
    int64_t t0_us;               /* start of the measured phase */
    int64_t t_end_us;            /* latest completion */
    size_t n_done;               /* measured requests finished */
    int64_t t_progress_us;       /* last progress output */
    bool tty;                    /* stderr is a terminal */
};

char *bench_run_endpoint(const char *base, bool chat)
{
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
    size_t pl = strlen(path);
    if (n >= pl && memcmp(base + n - pl, path, pl) == 0)
        return xstrndup(base, n);
    /* Another full endpoint path: keep it (the user knows best). */
    const char *other = chat ? "/v1/completions" : "/v1/chat/completions";
    size_t ol = strlen(other);
    if (n >= ol && memcmp(base + n - ol, other, ol) == 0)
        return xstrndup(base, n);
    bool has_v1 = n >= 3 && memcmp(base + n - 3, "/v1", 3) == 0;
    const char *suffix = has_v1 ? path + 3 : path;
    size_t sl = strlen(suffix);
    char *u = xmalloc(n + sl + 1);
    memcpy(u, base, n);
    memcpy(u + n, suffix, sl + 1);
    return u;
}

static char *make_body(struct run *run, uint64_t i_request)
{
    const bench_config_t *cfg = run->cfg;
    char *prompt = cfg->groups ? bench_prompt_conversation(cfg->prompt_words, cfg->seed, i_request,
                                                           cfg->groups, cfg->turns, cfg->turn_words)
                               : bench_prompt_make(cfg->prompt_words, cfg->seed, i_request,
                                                   cfg->shared_prefix);
    json_t *b = json_object();
    json_object_set_new(b, "model", json_string(cfg->model));
    if (cfg->chat) {
        json_t *msg = json_pack("{s:s, s:s}", "role", "user", "content", prompt);
        json_object_set_new(b, "messages", json_pack("[o]", msg));
    } else {
        json_object_set_new(b, "prompt", json_string(prompt));
    }
    json_object_set_new(b, "max_tokens", json_integer((json_int_t)cfg->max_tokens));
    json_object_set_new(b, "stream", json_true());
    json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (cfg->ignore_eos)
        json_object_set_new(b, "ignore_eos", json_true());
    if (run->extra)
        json_object_update(b, run->extra);
    char *s = json_dumps(b, JSON_COMPACT);
    if (!s)
        abort(); /* only fails on allocation */
    json_decref(b);
    free(prompt);
    return s;
}

static size_t on_write(char *ptr, size_t size, size_t nmemb, void *ud)
{
    struct req *r = ud;
    size_t n = size * nmemb;
    int64_t now = clock_now_us();
    if (r->st->http_status == 0) {
        long code = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
        bench_stream_set_status(r->st, code);
    }
    bench_stream_feed(r->st, (const uint8_t *)ptr, n, now);
    return n;
}

static void start_request(struct run *run, uint64_t i_request, bool measured)
{
    const bench_config_t *cfg = run->cfg;
    struct req *r = xcalloc(1, sizeof *r);
    r->measured = measured;
    r->body = make_body(run, i_request);
    r->easy = curl_easy_init();
    if (!r->easy) {
        log_error("curl_easy_init failed");
        abort();
    }
    CURL *e = r->easy;
    curl_easy_setopt(e, CURLOPT_URL, cfg->url);
    curl_easy_setopt(e, CURLOPT_POST, 1L);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(r->body));
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, run->headers);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->errbuf);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    if (!getenv("NO_PROXY") && !getenv("no_proxy"))
        curl_easy_setopt(e, CURLOPT_NOPROXY, "localhost,127.0.0.1,::1");
    if (cfg->timeout_s > 0)
        curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(cfg->timeout_s * 1000.0));
    r->st = bench_stream_new(clock_now_us());
    if (measured && run->t0_us == 0)
        run->t0_us = r->st->t_start_us;
    curl_multi_add_handle(run->multi, e);
    run->n_in_flight++;
}

static void count_error(bench_result_t *res, const char *msg)
{
    for (size_t i = 0; i < res->n_distinct_errors; i++) {
        if (strcmp(res->errors[i].message, msg) == 0) {
            res->errors[i].count++;
            return;
        }
    }
    if (res->n_distinct_errors < BENCH_MAX_DISTINCT_ERRORS) {
        res->errors[res->n_distinct_errors].message = xstrdup(msg);
        res->errors[res->n_distinct_errors].count = 1;
        res->n_distinct_errors++;
    } else {
        res->n_other_errors++;
    }
}

static void finish_request(struct run *run, struct req *r, CURLcode rc)
{
    int64_t now = clock_now_us();
    bench_stream_t *st = r->st;
    if (st->http_status == 0) {
        long code = 0;
        curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &code);
        bench_stream_set_status(st, code);
    }
    const char *terr = NULL;
    if (rc != CURLE_OK)
        terr = r->errbuf[0] ? r->errbuf : curl_easy_strerror(rc);
    bool ok = bench_stream_finish(st, terr, now);
    if (r->measured) {
        bench_result_t *res = run->res;
        if (res->n_records == run->cap_records) {
            run->cap_records = run->cap_records ? 2 * run->cap_records : 64;
            res->records = xrealloc(res->records, run->cap_records * sizeof *res->records);
        }
        bench_record_t *rec = &res->records[res->n_records++];
        memset(rec, 0, sizeof *rec);
        rec->t_send_us = st->t_start_us - run->t0_us;
        rec->ttft_us = st->n_content > 0 ? st->t_first_us - st->t_start_us : -1;
        rec->e2e_us = now - st->t_start_us;
        rec->prompt_tokens = st->prompt_tokens;
        rec->cached_tokens = st->cached_tokens;
        rec->output_tokens = bench_stream_output_tokens(st);
        rec->output_from_usage = st->completion_tokens >= 0;
        rec->n_content = st->n_content;
        if (st->n_itl > 0) {
            rec->itl_ms = xmalloc(st->n_itl * sizeof *rec->itl_ms);
            for (size_t i = 0; i < st->n_itl; i++)
                rec->itl_ms[i] = (double)st->itl_us[i] / 1000.0;
        }
        if (ok) {
            res->n_ok++;
        } else {
            res->n_err++;
            rec->error = xstrdup(st->error);
            count_error(res, st->error);
        }
        run->n_done++;
        run->t_end_us = now;
    }
    curl_multi_remove_handle(run->multi, r->easy);
    curl_easy_cleanup(r->easy);
    bench_stream_free(&r->st);
    free(r->body);
    free(r);
    run->n_in_flight--;
}

/* Progress on stderr: redrawn in place on a terminal (<= 10 per second),
 * one line per second otherwise. */
static void progress(struct run *run, bool final)
{
    const bench_config_t *cfg = run->cfg;
    if (!cfg->progress || cfg->n_requests == 0)
        return;
    int64_t now = clock_now_us();
    int64_t every = run->tty ? 100000 : 1000000;
    if (!final && now - run->t_progress_us < every)
        return;
    run->t_progress_us = now;
    double el = run->t0_us ? (double)(now - run->t0_us) / 1e6 : 0.0;
    size_t total = cfg->n_requests, done = run->n_done;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    size_t fill = done * WIDTH / total;
    for (size_t i = 0; i < WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "%s%s%s[%s] %zu/%zu  ok %zu  err %zu  in-flight %zu  %.1fs  %.2f req/s%s",
            run->tty ? "\r\033[K" : "", cfg->label ? cfg->label : "", cfg->label ? " " : "", bar,
            done, total, run->res->n_ok, run->res->n_err, run->n_in_flight, el,
            el > 0 ? (double)done / el : 0.0, run->tty && !final ? "" : "\n");
    fflush(stderr);
}

/* Runs n requests (indices i_first..) to completion. arrivals_us, when not
 * NULL, holds each request's send time relative to the phase start. */
static void run_phase(struct run *run, size_t n, uint64_t i_first, bool measured,
                      const int64_t *arrivals_us)
{
    size_t cap = run->cfg->concurrency;
    size_t n_started = 0, n_finished = 0;
    int64_t t_phase = clock_now_us();
    while (n_finished < n) {
        int64_t now = clock_now_us();
        while (n_started < n && run->n_in_flight < cap &&
               (!arrivals_us || now - t_phase >= arrivals_us[n_started])) {
            start_request(run, i_first + n_started, measured);
            n_started++;
        }
        int still_running = 0;
        curl_multi_perform(run->multi, &still_running);
        CURLMsg *msg;
        int left;
        bool any = false;
        while ((msg = curl_multi_info_read(run->multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct req *r = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            finish_request(run, r, msg->data.result);
            n_finished++;
            any = true;
        }
        if (measured)
            progress(run, false);
        if (any)
            continue; /* fill freed slots before waiting */
        int timeout_ms = 100;
        if (arrivals_us && n_started < n && run->n_in_flight < cap) {
            int64_t wait = arrivals_us[n_started] - (clock_now_us() - t_phase);
            if (wait < 0)
                wait = 0;
            int64_t w_ms = (wait + 999) / 1000;
            if (w_ms < timeout_ms)
                timeout_ms = (int)w_ms;
        }
        curl_multi_poll(run->multi, NULL, 0, timeout_ms, NULL);
    }
}

static void summarize(const bench_config_t *cfg, bench_result_t *res)
{
    size_t n = res->n_records, n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (!res->records[i].error && res->records[i].n_content > 1)
            n_itl += res->records[i].n_content - 1;
    double *ttft = xmalloc((n + 1) * sizeof *ttft);
    double *tpot = xmalloc((n + 1) * sizeof *tpot);
    double *e2e = xmalloc((n + 1) * sizeof *e2e);
    double *itl = xmalloc((n_itl + 1) * sizeof *itl);
    size_t k_ttft = 0, k_tpot = 0, k_e2e = 0, k_itl = 0, n_prompt_rep = 0, n_out_rep = 0;
    for (size_t i = 0; i < n; i++) {
        const bench_record_t *r = &res->records[i];
        if (r->error)
            continue;
        e2e[k_e2e++] = (double)r->e2e_us / 1000.0;
        if (r->ttft_us >= 0)
            ttft[k_ttft++] = (double)r->ttft_us / 1000.0;
        if (r->ttft_us >= 0 && r->output_tokens > 1)
            tpot[k_tpot++] = (double)(r->e2e_us - r->ttft_us) / 1000.0 / (double)(r->output_tokens - 1);
        for (uint64_t j = 0; j + 1 < r->n_content; j++)
            itl[k_itl++] = r->itl_ms[j];
        res->output_tokens += r->output_tokens;
        if (r->cached_tokens >= 0) {
            res->cached_tokens += r->cached_tokens;
            res->n_cached_reported++;
        }
        if (r->prompt_tokens >= 0) {
            res->prompt_tokens += r->prompt_tokens;
            n_prompt_rep++;
        } else {
            res->prompt_tokens += (int64_t)cfg->prompt_words;
        }
        n_out_rep += r->output_from_usage;
    }
    res->ttft_ms = bench_stats_summarize(ttft, k_ttft);
    res->tpot_ms = bench_stats_summarize(tpot, k_tpot);
    res->e2e_ms = bench_stats_summarize(e2e, k_e2e);
    res->itl_ms = bench_stats_summarize(itl, k_itl);
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
    res->prompt_from_server = res->n_ok > 0 && n_prompt_rep == res->n_ok;
    res->output_from_server = res->n_ok > 0 && n_out_rep == res->n_ok;
    if (res->n_ok > 0) {
        res->prompt_tokens_mean = (double)res->prompt_tokens / (double)res->n_ok;
        res->output_tokens_mean = (double)res->output_tokens / (double)res->n_ok;
    }
    if (res->duration_s > 0) {
        res->req_per_s = (double)res->n_ok / res->duration_s;
        res->output_tok_per_s = (double)res->output_tokens / res->duration_s;
        res->prompt_tok_per_s = (double)res->prompt_tokens / res->duration_s;
    }
}

int bench_run(const bench_config_t *cfg, bench_result_t *res)
{
    memset(res, 0, sizeof *res);
    struct run run = { .cfg = cfg, .res = res, .tty = isatty(STDERR_FILENO) == 1 };
    if (cfg->extra_json) {
        json_error_t jerr;
        run.extra = json_loads(cfg->extra_json, 0, &jerr);
        if (!json_is_object(run.extra)) {
            log_error("--extra-json: not a JSON object (%s)", jerr.text);
            json_decref(run.extra);
            return -1;
        }
    }
    run.multi = curl_multi_init();
    if (!run.multi) {
        log_error("curl_multi_init failed");
        json_decref(run.extra);
        return -1;
    }
    /* Keep one idle connection per client so keep-alive is never the bottleneck. */
    curl_multi_setopt(run.multi, CURLMOPT_MAXCONNECTS, (long)(cfg->concurrency + 4));
    run.headers = curl_slist_append(NULL, "Content-Type: application/json");
    run.headers = curl_slist_append(run.headers, "Accept: text/event-stream");
    /* No "Expect: 100-continue" round trip for bodies over 1 KiB. */
    run.headers = curl_slist_append(run.headers, "Expect:");
    if (cfg->api_key) {
        size_t n = strlen(cfg->api_key) + 32;
        char *h = xmalloc(n);
        snprintf(h, n, "Authorization: Bearer %s", cfg->api_key);
        run.headers = curl_slist_append(run.headers, h);
        free(h);
    }
    if (!run.headers)
        abort();

    /* Warm-up: prompt indices after the measured ones so no prompt repeats.
     * With --groups they start at a multiple of groups * turns: the warm-up
     * runs conversations of their own (first turns: the system prompts get
     * cached) and caches no measured conversation's history. */
    uint64_t i_warm = cfg->n_requests;
    if (cfg->groups) {
        uint64_t cyc = (uint64_t)cfg->groups * (cfg->turns ? cfg->turns : 1);
        i_warm = (cfg->n_requests + cyc - 1) / cyc * cyc;
    }
    if (cfg->n_warmup > 0)
        run_phase(&run, cfg->n_warmup, i_warm, false, NULL);

    int64_t *arrivals = NULL;
    if (cfg->rate > 0 && cfg->n_requests > 0) {
        arrivals = xmalloc(cfg->n_requests * sizeof *arrivals);
        uint64_t st = cfg->seed ^ 0xa5a5a5a5a5a5a5a5ull;
        double t = 0;
        for (size_t i = 0; i < cfg->n_requests; i++) {
            arrivals[i] = (int64_t)(t * 1e6);
            /* uniform in (0,1]: 53 random bits */
            double u = ((double)(bench_prompt_rand(&st) >> 11) + 1.0) / 9007199254740992.0;
            t += -log(u) / cfg->rate;
        }
    }
    run.t_progress_us = 0;
    run_phase(&run, cfg->n_requests, 0, true, arrivals);
    progress(&run, true);
    free(arrivals);
    if (run.t0_us && run.t_end_us > run.t0_us)
        res->duration_s = (double)(run.t_end_us - run.t0_us) / 1e6;
    summarize(cfg, res);

    curl_slist_free_all(run.headers);
    curl_multi_cleanup(run.multi);
    json_decref(run.extra);
    return 0;
}

void bench_result_fini(bench_result_t *res)
{
    for (size_t i = 0; i < res->n_records; i++) {
        free(res->records[i].itl_ms);
        free(res->records[i].error);
    }
    free(res->records);
    for (size_t i = 0; i < res->n_distinct_errors; i++)
        free(res->errors[i].message);
    memset(res, 0, sizeof *res);
}
