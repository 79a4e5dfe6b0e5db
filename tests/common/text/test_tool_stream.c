/* Unit tests for common/text/tool_stream: the incremental tool-call parser
 * checked against the non-streaming one (oai_tools_extract) on a table of
 * model outputs in every format, fed
 *   - in two pieces, for every split point of the text,
 *   - one byte at a time,
 *   - in random pieces (fixed seeds),
 * each time requiring: the same calls in the same order with the same names;
 * each call's ARGS fragments concatenated equal to the non-streamed
 * `arguments`; BEGIN, then ARGS, then END per call; the content released
 * equal to the non-streamed content (plus only the white space the
 * non-streaming parser trims before a call); and for the streams that must
 * show progress, arguments arriving in more than one fragment when fed byte
 * by byte. A few malformed outputs where the two parsers differ by design
 * (tool_stream.h) are checked for the documented streaming result.
 * Runs in well under a second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/oai_tools.h"
#include "common/text/tool_format.h"
#include "common/text/tool_stream.h"

static char *names[] = {"get_weather", "lookup"};
#define N_NAMES 2

/* What one run of the stream produced, rebuilt from its deltas. */
typedef struct {
    char content[4096];
    size_t content_len;
    uint32_t n_calls;
    char name[8][64];
    char args[8][1024];
    size_t args_len[8];
    unsigned n_frags[8];          /* ARGS deltas of each call */
    int state[8];                 /* 0 none, 1 begun, 2 ended */
} result_t;

static void collect(result_t *r, const tool_stream_delta_t *d, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (d[i].kind) {
        case TOOL_STREAM_CONTENT:
            assert_true(r->content_len + d[i].len < sizeof r->content);
            memcpy(r->content + r->content_len, d[i].text, d[i].len);
            r->content_len += d[i].len;
            /* content never comes after a call began */
            assert_int_equal(r->n_calls, 0);
            break;
        case TOOL_STREAM_BEGIN:
            assert_int_equal(d[i].i_call, r->n_calls);
            assert_true(r->n_calls < 8);
            snprintf(r->name[r->n_calls], sizeof r->name[0], "%s", d[i].name);
            r->state[r->n_calls] = 1;
            r->n_calls++;
            break;
        case TOOL_STREAM_ARGS:
            assert_true(d[i].i_call < r->n_calls);
            assert_int_equal(r->state[d[i].i_call], 1);
            assert_true(d[i].len > 0);
            memcpy(r->args[d[i].i_call] + r->args_len[d[i].i_call], d[i].text, d[i].len);
            r->args_len[d[i].i_call] += d[i].len;
            r->n_frags[d[i].i_call]++;
            break;
        case TOOL_STREAM_END:
            assert_true(d[i].i_call < r->n_calls);
            assert_int_equal(r->state[d[i].i_call], 1);
            r->state[d[i].i_call] = 2;
            break;
        }
    }
}

/* Feeds text with cut points cuts[0..n_cuts) (ascending, each < len), then
 * the whole text as final. */
static void run(const char *text, const size_t *cuts, size_t n_cuts, result_t *r)
{
    memset(r, 0, sizeof *r);
    size_t len = strlen(text);
    /* a private copy that grows like the answer buffer (no bytes past len) */
    char *buf = malloc(len + 1);
    tool_stream_t *t = tool_stream_new(names, N_NAMES);
    const tool_stream_delta_t *d;
    size_t n;
    for (size_t i = 0; i < n_cuts; i++) {
        memcpy(buf, text, cuts[i]);
        n = tool_stream_feed(t, buf, cuts[i], false, &d);
        collect(r, d, n);
    }
    memcpy(buf, text, len);
    n = tool_stream_feed(t, buf, len, true, &d);
    collect(r, d, n);
    assert_int_equal(tool_stream_n_calls(t), r->n_calls);
    tool_stream_free(&t);
    assert_null(t);
    free(buf);
    for (uint32_t i = 0; i < r->n_calls; i++)
        assert_int_equal(r->state[i], 2); /* every call ended */
}

static bool only_ws(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \n\t\r", s[i]))
            return false;
    return true;
}

/* The stream's result equals the non-streaming parser's. */
static void check_same(const char *text, const result_t *r, const char *how)
{
    oai_tool_call_t *calls;
    size_t content_len;
    size_t n = oai_tools_extract(text, strlen(text), names, N_NAMES, &calls, &content_len);
    if (r->n_calls != n)
        fail_msg("%s: %u streamed calls, %zu parsed, text: %s", how, r->n_calls, n, text);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(r->name[i], calls[i].name);
        if (r->args_len[i] != strlen(calls[i].arguments) ||
            memcmp(r->args[i], calls[i].arguments, r->args_len[i]) != 0)
            fail_msg("%s: call %zu arguments '%.*s' streamed, '%s' parsed", how, i, (int)r->args_len[i],
                     r->args[i], calls[i].arguments);
    }
    if (n == 0) {
        /* no call: the whole text is content, byte for byte */
        assert_int_equal(r->content_len, strlen(text));
        assert_memory_equal(r->content, text, r->content_len);
    } else {
        /* the content before the calls, plus at most the white space the
         * non-streaming parser trims */
        assert_true(r->content_len >= content_len);
        assert_memory_equal(r->content, text, content_len);
        assert_true(only_ws(r->content + content_len, r->content_len - content_len));
    }
    oai_tool_calls_free(calls, n);
}

/* Model outputs in every format the parsers know. `progress`: a call's
 * arguments are long enough that byte-by-byte feeding must give more than
 * one fragment. */
static const struct {
    const char *text;
    size_t n_calls;               /* what the non-streaming parser finds (checked) */
    bool progress;
} CASES[] = {
    /* Qwen / Hermes */
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>", 1, true},
    {"Let me check.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}\n</tool_call>", 1, false},
    {"<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Paris\"}}</tool_call>\n"
     "<tool_call>{\"name\":\"lookup\",\"arguments\":{\"q\":\"Rome\"}}</tool_call>", 2, true},
    {"<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": 1}}", 1, false},
    /* arguments first (held until the name is known: then all at once), extra
     * keys, nested values, strings holding braces, quotes, escapes and white space */
    {"<tool_call>{\"arguments\": {\"a\": [1, {\"b\": \"} ] {\"}], \"c\": \"x \\\" y\\\\\"}, \"id\": 7, "
     "\"name\": \"lookup\"}</tool_call>", 1, false},
    {"<tool_call>\n{\n  \"name\": \"lookup\",\n  \"arguments\": {\n    \"q\": \"tab\\there\",\n    \"n\": -2.50e+3,\n"
     "    \"ok\": true, \"no\": false, \"none\": null\n  }\n}\n</tool_call>", 1, true},
    /* arguments as a JSON string: decoded (escapes, \u00e9, a surrogate pair) */
    {"<tool_call>{\"name\": \"lookup\", \"arguments\": \"{\\\"q\\\": \\\"caf\\u00e9 \\ud83d\\ude00\\\"}\"}</tool_call>", 1, true},
    /* a call without arguments: "{}" */
    {"<tool_call>{\"name\": \"lookup\"}</tool_call>", 1, false},
    /* non-ASCII in arguments, as written */
    {"<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Zürich \\u00fc\"}}</tool_call>", 1, true},
    /* Mistral */
    {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}]", 1, true},
    {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}, \"id\": \"a1b2c3d4e\"}, "
     "{\"name\": \"lookup\", \"arguments\": {\"q\": [1, 2]}}]", 2, true},
    {"Checking.\n\n[TOOL_CALLS] [{\"name\": \"lookup\", \"arguments\": {}}]\n", 1, false},
    /* untagged Mistral list: declared names only */
    {"[{\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}}]", 1, false},
    {" [ {\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"lookup\", \"arguments\": {}} ] ", 2, false},
    /* Llama 3.1 JSON */
    {"{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Lima\"}}", 1, true},
    {"  <|python_tag|>{\"name\": \"lookup\", \"parameters\": {}}", 1, false},
    {"{\"name\": \"lookup\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"location\": \"X\"}}", 2, true},
    /* not calls: content, byte for byte */
    {"Hello there.", 0, false},
    {"", 0, false},
    {"   \n ", 0, false},
    {"a < b and <tool is not a call", 0, false},
    {"ends with a partial marker <tool_c", 0, false},
    {"ends with [TOOL_CA", 0, false},
    {"<tool_call>{\"arguments\":{}}</tool_call>", 0, false},
    {"[TOOL_CALLS] not json", 0, false},
    {"[TOOL_CALLS][]", 0, false},
    {"[{\"name\": \"not_declared\", \"arguments\": {}}]", 0, false},
    {"[1, 2, 3] are numbers", 0, false},
    {"[link](http://x) text", 0, false},
    {"{\"name\": \"not_declared\", \"parameters\": {}}", 0, false},
    {"{\"answer\": 42}", 0, false},
    {"<|python_tag|> print(1)", 0, false},
    /* a bare JSON answer that is not a call, then a Hermes call: the call wins */
    {"{\"x\": 1} <tool_call>{\"name\": \"lookup\", \"arguments\": {\"q\": 2}}</tool_call>", 1, false},
};
#define N_CASES (sizeof CASES / sizeof CASES[0])

static void test_table_is_right(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CASES; i++) {
        oai_tool_call_t *calls;
        size_t content_len;
        size_t n = oai_tools_extract(CASES[i].text, strlen(CASES[i].text), names, N_NAMES, &calls, &content_len);
        if (n != CASES[i].n_calls)
            fail_msg("case %zu: %zu calls parsed, table says %zu", i, n, CASES[i].n_calls);
        oai_tool_calls_free(calls, n);
    }
}

static void test_every_split_point(void **state)
{
    (void)state;
    result_t r;
    char how[64];
    for (size_t i = 0; i < N_CASES; i++) {
        size_t len = strlen(CASES[i].text);
        run(CASES[i].text, NULL, 0, &r);
        snprintf(how, sizeof how, "case %zu whole", i);
        check_same(CASES[i].text, &r, how);
        for (size_t k = 0; k < len; k++) {
            run(CASES[i].text, &k, 1, &r);
            snprintf(how, sizeof how, "case %zu split at %zu", i, k);
            check_same(CASES[i].text, &r, how);
        }
    }
}

static void test_byte_by_byte(void **state)
{
    (void)state;
    result_t r;
    char how[64];
    size_t cuts[2048];
    for (size_t i = 0; i < N_CASES; i++) {
        size_t len = strlen(CASES[i].text);
        assert_true(len < 2048);
        for (size_t k = 0; k < len; k++)
            cuts[k] = k;
        run(CASES[i].text, cuts, len, &r);
        snprintf(how, sizeof how, "case %zu byte by byte", i);
        check_same(CASES[i].text, &r, how);
        /* the arguments arrive as they are written, not at the end */
        if (CASES[i].progress) {
            unsigned most = 0;
            for (uint32_t c = 0; c < r.n_calls; c++)
                most = r.n_frags[c] > most ? r.n_frags[c] : most;
            if (most < 2)
                fail_msg("case %zu: arguments came in %u fragment(s)", i, most);
        }
    }
}

static void test_random_pieces(void **state)
{
    (void)state;
    result_t r;
    char how[64];
    size_t cuts[2048];
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    for (int rep = 0; rep < 20; rep++) {
        for (size_t i = 0; i < N_CASES; i++) {
            size_t len = strlen(CASES[i].text), n = 0;
            for (size_t k = 0; k < len; k++) {
                seed = seed * 6364136223846793005ull + 1442695040888963407ull;
                if ((seed >> 33) % 4 == 0)
                    cuts[n++] = k;
            }
            run(CASES[i].text, cuts, n, &r);
            snprintf(how, sizeof how, "case %zu rep %d", i, rep);
            check_same(CASES[i].text, &r, how);
        }
    }
}

/* Where the parsers differ by design (tool_stream.h): once a call began,
 * what follows that is not a call is dropped from the stream, while the
 * non-streaming parser calls the whole answer content. */
static void test_after_a_call_began(void **state)
{
    (void)state;
    result_t r;
    size_t cut = 60;
    const char *t1 = "<tool_call>{\"name\":\"lookup\",\"arguments\":{\"q\":1}}</tool_call> and more";
    run(t1, &cut, 1, &r);
    assert_int_equal(r.n_calls, 1);
    assert_string_equal(r.name[0], "lookup");
    assert_int_equal(r.args_len[0], 7);
    assert_memory_equal(r.args[0], "{\"q\":1}", 7);
    assert_int_equal(r.content_len, 0);
    /* a call cut off (max_tokens) ends with what was written */
    const char *t2 = "<tool_call>{\"name\":\"lookup\",\"arguments\":{\"q\":\"abc";
    run(t2, NULL, 0, &r);
    assert_int_equal(r.n_calls, 1);
    assert_int_equal(r.args_len[0], strlen("{\"q\":\"abc"));
    /* broken JSON after the call began: the arguments up to where it broke */
    const char *t3 = "<tool_call>{\"name\": \"lookup\", \"arguments\": {</tool_call>";
    run(t3, NULL, 0, &r);
    assert_int_equal(r.n_calls, 1);
    assert_int_equal(r.content_len, 0);
    /* the non-streaming parser refuses all three */
    oai_tool_call_t *calls;
    size_t cl;
    assert_int_equal(oai_tools_extract(t1, strlen(t1), names, N_NAMES, &calls, &cl), 0);
    assert_int_equal(oai_tools_extract(t2, strlen(t2), names, N_NAMES, &calls, &cl), 0);
    assert_int_equal(oai_tools_extract(t3, strlen(t3), names, N_NAMES, &calls, &cl), 0);
}

/* The first fragment of a call comes with its name, before the arguments
 * are complete: the client sees the call start. */
static void test_begin_before_arguments_end(void **state)
{
    (void)state;
    const char *text = "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Pa";
    tool_stream_t *t = tool_stream_new(names, N_NAMES);
    const tool_stream_delta_t *d;
    size_t n = tool_stream_feed(t, text, strlen(text), false, &d);
    assert_int_equal(n, 2);
    assert_int_equal(d[0].kind, TOOL_STREAM_BEGIN);
    assert_string_equal(d[0].name, "get_weather");
    assert_int_equal(d[1].kind, TOOL_STREAM_ARGS);
    assert_int_equal(d[1].len, strlen("{\"location\":\"Pa"));
    assert_memory_equal(d[1].text, "{\"location\":\"Pa", d[1].len);
    tool_stream_free(&t);
}

/* A turn of n calls written the way family f's chat template writes them
 * (open, calls by tool_format_call_text joined by sep, close), with `lead`
 * before it. malloc'd. */
static char *written(const tool_format_t *f, const char *lead, size_t n, const char *const *args)
{
    char *out = malloc(8192);
    size_t o = (size_t)snprintf(out, 8192, "%s%s", lead, f->open);
    for (size_t i = 0; i < n; i++) {
        char *c = tool_format_call_text(f, names[i % N_NAMES], args[i]);
        o += (size_t)snprintf(out + o, 8192 - o, "%s%s", i ? f->sep : "", c);
        free(c);
    }
    snprintf(out + o, 8192 - o, "%s", f->close);
    return out;
}

/* Every split point and byte by byte: streamed == whole, and the whole
 * parser finds the n calls that were written. */
static void check_written(const char *text, size_t n, const char *fam)
{
    oai_tool_call_t *calls;
    size_t cl, got = oai_tools_extract(text, strlen(text), names, N_NAMES, &calls, &cl);
    oai_tool_calls_free(calls, got);
    if (got != n)
        fail_msg("%s: %zu calls written, %zu read back whole: %s", fam, n, got, text);
    result_t r;
    char how[96];
    size_t len = strlen(text), cuts[8192];
    for (size_t k = 0; k < len; k++) {
        run(text, &k, 1, &r);
        snprintf(how, sizeof how, "%s, split at %zu", fam, k);
        check_same(text, &r, how);
        cuts[k] = k;
    }
    run(text, cuts, len, &r);
    snprintf(how, sizeof how, "%s, byte by byte", fam);
    check_same(text, &r, how);
}

/* Every row of tool_format_all[]: calls written in the family's syntax (one,
 * and as many as the family puts in a turn; with content before them when
 * the family has a tag; without the tag when it also has an untagged form)
 * stream exactly as the whole parser reads them. A new family whose reading
 * columns disagree with its parser fails here. */
static void test_every_family_streams_as_whole(void **state)
{
    (void)state;
    static const char *const args[] = {
        "{}",
        "{\"location\": \"Paris\", \"n\": [1, 2.5e3, {\"x\": \"} ]\\\"\"}], \"ok\": true}",
        "{\"q\": \"caf\\u00e9 \u00fc\", \"t\": \"a\\tb\"}",
    };
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        size_t max = f->sep ? 3 : 1;
        for (size_t n = 1; n <= max; n++) {
            for (int lead = 0; lead <= (f->tag != NULL); lead++) {
                const char *a[3] = {args[(n + 0) % 3], args[(n + 1) % 3], args[(n + 2) % 3]};
                char *text = written(f, lead ? "Let me look.\n" : "", n, a);
                char fam[64];
                snprintf(fam, sizeof fam, "%s, %zu call(s)%s", f->name, n, lead ? " after content" : "");
                check_written(text, n, fam);
                size_t tl = f->tag ? strlen(f->tag) : 0;
                if (!lead && f->bare_open && tl && strncmp(text, f->tag, tl) == 0) {
                    snprintf(fam, sizeof fam, "%s, %zu call(s) untagged", f->name, n);
                    check_written(text + tl, n, fam);
                }
                free(text);
            }
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_is_right),
        cmocka_unit_test(test_every_split_point),
        cmocka_unit_test(test_byte_by_byte),
        cmocka_unit_test(test_random_pieces),
        cmocka_unit_test(test_after_a_call_began),
        cmocka_unit_test(test_begin_before_arguments_end),
        cmocka_unit_test(test_every_family_streams_as_whole),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
