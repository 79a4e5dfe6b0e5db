/* test_bench_client.c — unit tests of pagoda-bench's parts: the SSE reader,
 * the per-request stream interpretation, percentiles, synthetic prompts and
 * endpoint URLs.
 *
 * pagoda-bench's sources live in tests/bench/, and the Makefile links every
 * every tests/bench .c file into the pagoda-bench binary, so a test program cannot sit
 * there (its main() would clash). This program compiles the modules it tests
 * into itself instead. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/bench/bench_prompt.c"
#include "tests/bench/bench_run.c"
#include "tests/bench/bench_stats.c"
#include "tests/bench/bench_stream.c"
#include "tests/bench/sse_reader.c"

/* ---- SSE reader ---------------------------------------------------------- */

/* Events seen, rendered as "name|data\n" lines (data NULs shown as '0'). */
struct seen {
    char buf[4096];
    size_t len;
};

static void record_event(void *ud, const char *event, const char *data, size_t data_len)
{
    struct seen *s = ud;
    int n = snprintf(s->buf + s->len, sizeof s->buf - s->len, "%s|", event);
    s->len += (size_t)n;
    for (size_t i = 0; i < data_len && s->len + 2 < sizeof s->buf; i++)
        s->buf[s->len++] = data[i] ? data[i] : '0';
    s->buf[s->len++] = '\n';
    s->buf[s->len] = '\0';
}

/* Feeds `in` in pieces of the given sizes (cycled) and returns the events. */
static void feed_split(const char *in, size_t split_every, struct seen *out, int *rc)
{
    sse_reader_t r;
    sse_reader_init(&r, 1 << 16);
    memset(out, 0, sizeof *out);
    size_t len = strlen(in), i = 0;
    *rc = 0;
    while (i < len && *rc == 0) {
        size_t n = split_every == 0 ? len : split_every;
        if (n > len - i)
            n = len - i;
        *rc = sse_reader_feed(&r, (const uint8_t *)in + i, n, record_event, out);
        i += n;
    }
    sse_reader_fini(&r);
}

/* Input stream -> expected events; expectations follow the WHATWG rules
 * quoted in sse_reader.h, written by hand. */
static const struct {
    const char *in;
    const char *want;
} sse_cases[] = {
    { "data: hello\n\n", "message|hello\n" },
    { "data:hello\n\n", "message|hello\n" },
    { "data:  two spaces\n\n", "message| two spaces\n" },
    { "data: a\ndata: b\n\n", "message|a\nb\n" },
    { "data: a\r\n\r\ndata: b\r\rdata: c\n\n", "message|a\nmessage|b\nmessage|c\n" },
    { ": comment\n\ndata: x\n\n", "message|x\n" },
    { "event: error\ndata: {\"e\":1}\n\ndata: after\n\n", "error|{\"e\":1}\nmessage|after\n" },
    { "event: only-name\n\n", "" },
    { "data\n\n", "message|\n" },
    { "data:\n\n", "message|\n" },
    { "id: 7\nretry: 100\nfoo: bar\ndata: y\n\n", "message|y\n" },
    { "data: incomplete at end\n", "" },
    { "data: [DONE]\n\n", "message|[DONE]\n" },
    { "\n\n\ndata: z\n\n\n", "message|z\n" },
    { "data: colon: inside\n\n", "message|colon: inside\n" },
};

static void test_sse_table_every_split(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof sse_cases / sizeof sse_cases[0]; c++) {
        size_t len = strlen(sse_cases[c].in);
        for (size_t split = 0; split <= len; split++) {
            struct seen got;
            int rc;
            feed_split(sse_cases[c].in, split, &got, &rc);
            if (rc != 0 || strcmp(got.buf, sse_cases[c].want) != 0) {
                print_error("case %zu split %zu: got '%s' want '%s' rc %d\n", c, split,
                            got.buf, sse_cases[c].want, rc);
                fail();
            }
        }
    }
}

/* A CR at the end of one read and an LF at the start of the next are one
 * line end, not two (which would dispatch an extra, empty event boundary). */
static void test_sse_crlf_across_reads(void **state)
{
    (void)state;
    sse_reader_t r;
    sse_reader_init(&r, 1024);
    struct seen got = { 0 };
    const char *a = "data: a\r", *b = "\ndata: b\r", *c = "\n\r", *d = "\n";
    assert_int_equal(sse_reader_feed(&r, (const uint8_t *)a, strlen(a), record_event, &got), 0);
    assert_int_equal(sse_reader_feed(&r, (const uint8_t *)b, strlen(b), record_event, &got), 0);
    assert_int_equal(r.n_events, 0);
    assert_int_equal(sse_reader_feed(&r, (const uint8_t *)c, strlen(c), record_event, &got), 0);
    assert_int_equal(sse_reader_feed(&r, (const uint8_t *)d, strlen(d), record_event, &got), 0);
    assert_string_equal(got.buf, "message|a\nb\n");
    sse_reader_fini(&r);
}

static void test_sse_limits(void **state)
{
    (void)state;
    sse_reader_t r;
    sse_reader_init(&r, 16);
    const char *long_line = "data: 0123456789abcdef\n\n";
    assert_int_equal(sse_reader_feed(&r, (const uint8_t *)long_line, strlen(long_line), NULL, NULL), -1);
    sse_reader_fini(&r);
    /* the same line arriving byte by byte is caught too */
    sse_reader_init(&r, 16);
    int rc = 0;
    for (size_t i = 0; long_line[i] && rc == 0; i++)
        rc = sse_reader_feed(&r, (const uint8_t *)long_line + i, 1, NULL, NULL);
    assert_int_equal(rc, -1);
    sse_reader_fini(&r);
    /* many short data lines adding up past the limit */
    sse_reader_init(&r, 16);
    const char *many = "data: 01234\ndata: 01234\ndata: 01234\n\n";
    assert_int_equal(sse_reader_feed(&r, (const uint8_t *)many, strlen(many), NULL, NULL), -1);
    sse_reader_fini(&r);
    /* embedded NUL bytes are data, not terminators */
    sse_reader_init(&r, 64);
    struct seen got = { 0 };
    const uint8_t nul[] = "data: a\0b\n\n";
    assert_int_equal(sse_reader_feed(&r, nul, sizeof nul - 1, record_event, &got), 0);
    assert_string_equal(got.buf, "message|a0b\n");
    sse_reader_fini(&r);
}

/* ---- one streamed response ---------------------------------------------- */

static void feed_str(bench_stream_t *s, const char *text, int64_t t_us)
{
    bench_stream_feed(s, (const uint8_t *)text, strlen(text), t_us);
}

static void test_stream_completions(void **state)
{
    (void)state;
    bench_stream_t *s = bench_stream_new(1000);
    bench_stream_set_status(s, 200);
    feed_str(s, ": ping\n\n", 1500);
    feed_str(s, "data: {\"choices\":[{\"index\":0,\"text\":\" a\"}]}\n\n", 51000);
    /* two chunks in one read, the second split mid-JSON */
    feed_str(s, "data: {\"choices\":[{\"text\":\" b\"}]}\n\ndata: {\"choices\":[{\"te", 61000);
    feed_str(s, "xt\":\" c\"}]}\n\n", 75000);
    /* empty text with finish_reason is not content */
    feed_str(s, "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n", 80000);
    feed_str(s, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,"
                "\"prompt_tokens_details\":{\"cached_tokens\":8}}}\n\n"
                "data: [DONE]\n\n", 81000);
    assert_true(bench_stream_finish(s, NULL, 82000));
    assert_null(s->error);
    assert_true(s->done);
    assert_int_equal(s->n_content, 3);
    assert_int_equal(s->t_first_us, 51000);
    assert_int_equal(s->n_itl, 2);
    assert_int_equal(s->itl_us[0], 10000);
    assert_int_equal(s->itl_us[1], 14000);
    assert_int_equal(s->prompt_tokens, 12);
    assert_int_equal(s->completion_tokens, 3);
    assert_int_equal(s->cached_tokens, 8);
    assert_int_equal(bench_stream_output_tokens(s), 3);
    bench_stream_free(&s);
    assert_null(s);
}

static void test_stream_chat_role_chunk_not_content(void **state)
{
    (void)state;
    bench_stream_t *s = bench_stream_new(0);
    bench_stream_set_status(s, 200);
    feed_str(s, "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n", 5000);
    feed_str(s, "data: {\"choices\":[{\"delta\":{\"content\":null}}]}\n\n", 6000);
    feed_str(s, "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n", 40000);
    feed_str(s, "data: {\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n", 52000);
    feed_str(s, "data: [DONE]\n\n", 53000);
    assert_true(bench_stream_finish(s, NULL, 53000));
    assert_int_equal(s->t_first_us, 40000);
    assert_int_equal(s->n_itl, 1);
    assert_int_equal(s->itl_us[0], 12000);
    /* no usage: tokens fall back to content chunks */
    assert_int_equal(s->prompt_tokens, -1);
    assert_int_equal(s->cached_tokens, -1);
    assert_int_equal(bench_stream_output_tokens(s), 2);
    bench_stream_free(&s);
}

/* Error cases: input pieces -> expected error message (NULL = success). */
static const struct {
    long status;
    const char *body;
    const char *transport;
    const char *want;
} err_cases[] = {
    { 500, "{\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}", NULL, "HTTP 500: boom" },
    { 429, "queue full\n", NULL, "HTTP 429: queue full " },
    { 503, "", NULL, "HTTP 503: (empty body)" },
    { 404, "{\"error\":\"no such model\"}", NULL, "HTTP 404: no such model" },
    { 200, "data: {\"choices\":[{\"text\":\"x\"}]}\n\nevent: error\ndata: {\"error\":{\"message\":\"worker died\"}}\n\n",
      NULL, "SSE error: worker died" },
    { 200, "event: error\ndata: plain text\n\n", NULL, "SSE error: plain text" },
    { 200, "data: {\"error\":{\"message\":\"late\"}}\n\ndata: [DONE]\n\n", NULL, "SSE error: late" },
    { 200, "data: {not json\n\ndata: [DONE]\n\n", NULL, "bad chunk: {not json" },
    { 200, "data: [1,2]\n\ndata: [DONE]\n\n", NULL, "bad chunk: [1,2]" },
    { 200, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n", NULL, "stream ended without data: [DONE]" },
    { 200, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n", "Timeout was reached",
      "transport: Timeout was reached" },
    { 0, "", "Could not connect to server", "transport: Could not connect to server" },
    { 200, "data: {\"choices\":[{\"text\":\"x\"}]}\n\ndata: [DONE]\n\n", NULL, NULL },
    /* nothing after [DONE] counts, not even an error */
    { 200, "data: [DONE]\n\ndata: {\"error\":\"x\"}\n\n", NULL, NULL },
    /* wrong types are ignored, not trusted */
    { 200, "data: {\"choices\":7,\"usage\":{\"prompt_tokens\":\"9\"}}\n\ndata: [DONE]\n\n", NULL, NULL },
};

static void test_stream_errors(void **state)
{
    (void)state;
    for (size_t c = 0; c < sizeof err_cases / sizeof err_cases[0]; c++) {
        bench_stream_t *s = bench_stream_new(0);
        if (err_cases[c].status)
            bench_stream_set_status(s, err_cases[c].status);
        feed_str(s, err_cases[c].body, 10);
        bool ok = bench_stream_finish(s, err_cases[c].transport, 20);
        if (err_cases[c].want == NULL) {
            if (!ok || s->error) {
                print_error("case %zu: unexpected error '%s'\n", c, s->error);
                fail();
            }
        } else if (ok || !s->error || strcmp(s->error, err_cases[c].want) != 0) {
            print_error("case %zu: got '%s' want '%s'\n", c, s->error ? s->error : "(none)",
                        err_cases[c].want);
            fail();
        }
        bench_stream_free(&s);
    }
}

static void test_stream_error_body_bounded(void **state)
{
    (void)state;
    bench_stream_t *s = bench_stream_new(0);
    bench_stream_set_status(s, 500);
    char chunk[1000];
    memset(chunk, 'x', sizeof chunk);
    for (int i = 0; i < 100; i++)
        bench_stream_feed(s, (const uint8_t *)chunk, sizeof chunk, 1);
    assert_int_equal(s->err_len, MAX_ERR_BODY);
    assert_false(bench_stream_finish(s, NULL, 2));
    assert_true(strlen(s->error) <= strlen("HTTP 500: ") + MAX_MSG);
    bench_stream_free(&s);
}

/* ---- percentiles ---------------------------------------------------------- */

/* Expected values worked by hand from the rule in bench_stats.h
 * (rank = p/100*(n-1), linear interpolation). */
static void test_stats_percentiles(void **state)
{
    (void)state;
    double ten[] = { 10, 9, 8, 7, 6, 5, 4, 3, 2, 1 };
    bench_summary_t s = bench_stats_summarize(ten, 10);
    assert_int_equal(s.n, 10);
    assert_float_equal(s.mean, 5.5, 1e-12);
    assert_float_equal(s.min, 1, 0);
    assert_float_equal(s.max, 10, 0);
    assert_float_equal(s.p50, 5.5, 1e-12);   /* rank 4.5 */
    assert_float_equal(s.p90, 9.1, 1e-12);   /* rank 8.1 */
    assert_float_equal(s.p99, 9.91, 1e-12);  /* rank 8.91 */
    double three[] = { 30, 10, 20 };
    s = bench_stats_summarize(three, 3);
    assert_float_equal(s.p50, 20, 1e-12);
    assert_float_equal(s.p90, 28, 1e-12);    /* rank 1.8 */
    assert_float_equal(s.p99, 29.8, 1e-12);  /* rank 1.98 */
    double one[] = { 7 };
    s = bench_stats_summarize(one, 1);
    assert_float_equal(s.p50, 7, 0);
    assert_float_equal(s.p99, 7, 0);
    s = bench_stats_summarize(NULL, 0);
    assert_int_equal(s.n, 0);
    assert_float_equal(s.p99, 0, 0);
    double two[] = { 0, 100 };
    assert_float_equal(bench_stats_percentile(two, 2, 0), 0, 0);
    assert_float_equal(bench_stats_percentile(two, 2, 100), 100, 0);
    assert_float_equal(bench_stats_percentile(two, 2, 37.5), 37.5, 1e-12);
}

/* ---- prompts ------------------------------------------------------------- */

static size_t count_words(const char *s)
{
    size_t n = 0;
    bool in = false;
    for (; *s; s++) {
        if (*s == ' ') {
            in = false;
        } else if (!in) {
            in = true;
            n++;
        }
    }
    return n;
}

/* Pointer to the start of word i (0-based). */
static const char *word_at(const char *s, size_t i)
{
    while (i > 0 && *s) {
        if (*s++ == ' ')
            i--;
    }
    return s;
}

static void test_prompt_shape(void **state)
{
    (void)state;
    static const size_t lengths[] = { 0, 1, 7, 8, 9, 128, 2000 };
    for (size_t k = 0; k < sizeof lengths / sizeof lengths[0]; k++) {
        char *p = bench_prompt_make(lengths[k], 42, 3, false);
        assert_int_equal(count_words(p), lengths[k]);
        assert_true(strstr(p, "  ") == NULL);
        char *again = bench_prompt_make(lengths[k], 42, 3, false);
        assert_string_equal(p, again); /* deterministic */
        free(again);
        free(p);
    }
}

static bool starts_with(const char *s, const char *pre)
{
    return strncmp(s, pre, strlen(pre)) == 0;
}

/* --groups/--turns: turn t extends turn t-1 of the same conversation; a
 * slot's conversations share the system prompt; other slots share nothing. */
static void test_prompt_conversation(void **state)
{
    (void)state;
    enum { G = 3, T = 4, P = 50, W = 20 };
    char *p[2 * G * T];
    for (size_t i = 0; i < 2 * G * T; i++) {
        p[i] = bench_prompt_conversation(P, 5, i, G, T, W);
        size_t turn = (i / G) % T;
        assert_int_equal(count_words(p[i]), P + (turn + 1) * BENCH_PROMPT_TAIL + turn * W);
        char *again = bench_prompt_conversation(P, 5, i, G, T, W);
        assert_string_equal(p[i], again);
        free(again);
    }
    for (size_t i = 0; i < 2 * G * T; i++) {
        size_t turn = (i / G) % T;
        if (turn > 0) {
            /* the previous turn's prompt is a prefix of this one's */
            assert_true(starts_with(p[i], p[i - G]));
            assert_true(strlen(p[i]) > strlen(p[i - G]));
        }
        if (i >= G)
            assert_int_equal(memcmp(p[i], p[i % G], (size_t)(word_at(p[i % G], P) - p[i % G])),
                             0); /* same slot: same system prompt */
        if (i % G != 0)
            assert_int_not_equal(memcmp(p[i], p[0], 4), 0);
    }
    /* a new conversation in the same slot restarts the history */
    assert_false(starts_with(p[G * T], p[G * (T - 1)]));
    assert_int_equal(count_words(p[G * T]), P + BENCH_PROMPT_TAIL);
    for (size_t i = 0; i < 2 * G * T; i++)
        free(p[i]);
}

static void test_prompt_prefixes(void **state)
{
    (void)state;
    enum { N = 64, WORDS = 40 };
    char *p[N], *q[N];
    for (size_t i = 0; i < N; i++) {
        p[i] = bench_prompt_make(WORDS, 7, i, false);
        q[i] = bench_prompt_make(WORDS, 7, i, true);
    }
    /* unshared: the first 4 words already differ between any two requests */
    for (size_t i = 0; i < N; i++)
        for (size_t j = i + 1; j < N; j++) {
            size_t l = (size_t)(word_at(p[i], 4) - p[i]);
            assert_false(l == (size_t)(word_at(p[j], 4) - p[j]) && memcmp(p[i], p[j], l) == 0);
        }
    /* shared: identical up to the tail, and the whole prompts differ */
    size_t pre = (size_t)(word_at(q[0], WORDS - BENCH_PROMPT_TAIL) - q[0]);
    for (size_t i = 1; i < N; i++) {
        assert_int_equal(memcmp(q[0], q[i], pre), 0);
        assert_string_not_equal(q[0], q[i]);
    }
    for (size_t i = 0; i < N; i++) {
        free(p[i]);
        free(q[i]);
    }
    /* another seed, another shared prefix */
    char *a = bench_prompt_make(WORDS, 1, 0, true), *b = bench_prompt_make(WORDS, 2, 0, true);
    assert_string_not_equal(a, b);
    free(a);
    free(b);
}

/* ---- endpoint URLs ------------------------------------------------------- */

static void test_endpoint(void **state)
{
    (void)state;
    static const struct { const char *in; bool chat; const char *want; } t[] = {
        { "http://h:1", false, "http://h:1/v1/completions" },
        { "http://h:1/", true, "http://h:1/v1/chat/completions" },
        { "http://h:1/v1", false, "http://h:1/v1/completions" },
        { "http://h:1/v1/", true, "http://h:1/v1/chat/completions" },
        { "http://h:1/v1/completions", false, "http://h:1/v1/completions" },
        { "http://h:1/v1/chat/completions", true, "http://h:1/v1/chat/completions" },
        { "http://h:1/v1/completions", true, "http://h:1/v1/completions" },
        { "http://h:1/api", false, "http://h:1/api/v1/completions" },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        char *u = bench_run_endpoint(t[i].in, t[i].chat);
        assert_string_equal(u, t[i].want);
        free(u);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sse_table_every_split),
        cmocka_unit_test(test_sse_crlf_across_reads),
        cmocka_unit_test(test_sse_limits),
        cmocka_unit_test(test_stream_completions),
        cmocka_unit_test(test_stream_chat_role_chunk_not_content),
        cmocka_unit_test(test_stream_errors),
        cmocka_unit_test(test_stream_error_body_bounded),
        cmocka_unit_test(test_stats_percentiles),
        cmocka_unit_test(test_prompt_shape),
        cmocka_unit_test(test_prompt_prefixes),
        cmocka_unit_test(test_prompt_conversation),
        cmocka_unit_test(test_endpoint),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
