/* Unit tests for gateway/answer: a choice's text split into reasoning,
 * content and tool-call parts, streamed (fed one byte per event, and in one
 * piece) and whole, and the two agreeing:
 *   - without tools or reasoning the text passes through as content;
 *   - <think>…</think> then a Hermes call: reasoning, then the call with its
 *     id ("call_" + 24 hex), name and arguments in several fragments adding
 *     up to answer_whole_split's arguments;
 *   - a failed end releases no held-back call;
 *   - answer_whole_split: reasoning, content before the calls, the calls;
 *   - a call cut short (the text ends where a stop string matched or
 *     max_tokens ran out): both modes return the same content, calls and
 *     arguments as written, and neither ends in calls (so the finish is the
 *     worker's, not "tool_calls"); cut before the name: content only.
 * Runs in milliseconds. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/answer.h"

static char *names[] = {"get_weather", "lookup"};

typedef struct {
    char reasoning[512], content[512], args[4][512], id[4][40], name[4][64];
    size_t r_len, c_len, a_len[4];
    unsigned n_calls, n_arg_parts, n_ends;
} got_t;

static void take(got_t *g, const answer_part_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (p[i].kind) {
        case ANSWER_REASONING:
            assert_int_equal(g->c_len + g->n_calls, 0); /* reasoning comes first */
            memcpy(g->reasoning + g->r_len, p[i].text, p[i].len);
            g->r_len += p[i].len;
            break;
        case ANSWER_CONTENT:
            assert_int_equal(g->n_calls, 0);
            memcpy(g->content + g->c_len, p[i].text, p[i].len);
            g->c_len += p[i].len;
            break;
        case ANSWER_TOOL_BEGIN:
            assert_int_equal(p[i].i_call, g->n_calls);
            snprintf(g->id[g->n_calls], sizeof g->id[0], "%s", p[i].id);
            snprintf(g->name[g->n_calls], sizeof g->name[0], "%s", p[i].name);
            g->n_calls++;
            break;
        case ANSWER_TOOL_ARGS:
            memcpy(g->args[p[i].i_call] + g->a_len[p[i].i_call], p[i].text, p[i].len);
            g->a_len[p[i].i_call] += p[i].len;
            g->n_arg_parts++;
            break;
        case ANSWER_TOOL_END:
            g->n_ends++;
            break;
        }
    }
}

/* Feeds text one byte per event (or whole), the last with `end`. */
static void feed(answer_t *a, const char *text, bool bytewise, answer_end_t end, got_t *g)
{
    memset(g, 0, sizeof *g);
    const answer_part_t *p;
    size_t len = strlen(text), n;
    if (bytewise) {
        for (size_t i = 0; i + 1 < len; i++) {
            n = answer_feed(a, text + i, 1, ANSWER_MORE, &p);
            take(g, p, n);
        }
        n = answer_feed(a, text + (len ? len - 1 : 0), len ? 1 : 0, end, &p);
    } else {
        n = answer_feed(a, text, len, end, &p);
    }
    take(g, p, n);
}

static void test_pass_through(void **state)
{
    (void)state;
    answer_t *a = answer_new(NULL, 0, false);
    got_t g;
    feed(a, "{\"name\": \"lookup\"} <think>not split</think>", true, ANSWER_DONE, &g);
    assert_int_equal(g.c_len, strlen("{\"name\": \"lookup\"} <think>not split</think>"));
    assert_int_equal(g.n_calls + g.r_len, 0);
    assert_int_equal(answer_n_calls(a), 0);
    answer_free(&a);
    assert_null(a);
}

static void test_reasoning_then_call(void **state)
{
    (void)state;
    const char *text = "<think>Paris, so weather.</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"location\": \"Paris\", \"days\": 3}}\n</tool_call>";
    answer_whole_t w;
    answer_whole_split(text, strlen(text), names, 2, true, true, &w);
    assert_true(w.has_reasoning);
    assert_int_equal(w.n_calls, 1);
    assert_int_equal(w.content_len, 0);
    for (int bytewise = 0; bytewise < 2; bytewise++) {
        answer_t *a = answer_new(names, 2, true);
        got_t g;
        feed(a, text, bytewise, ANSWER_DONE, &g);
        assert_int_equal(g.r_len, w.reasoning_len);
        assert_memory_equal(g.reasoning, w.reasoning, g.r_len);
        assert_int_equal(g.n_calls, 1);
        assert_int_equal(g.n_ends, 1);
        assert_int_equal(answer_n_calls(a), 1);
        assert_string_equal(g.name[0], "get_weather");
        assert_int_equal(strlen(g.id[0]), 29);
        assert_memory_equal(g.id[0], "call_", 5);
        assert_int_equal(g.a_len[0], strlen(w.calls[0].arguments));
        assert_memory_equal(g.args[0], w.calls[0].arguments, g.a_len[0]);
        if (bytewise)
            assert_true(g.n_arg_parts > 10); /* it grew as it was written */
        /* only white space between </think> and the call went out as content */
        for (size_t i = 0; i < g.c_len; i++)
            assert_non_null(strchr(" \n", g.content[i]));
        answer_free(&a);
    }
    answer_whole_clear(&w);
}

static void test_failed_end(void **state)
{
    (void)state;
    answer_t *a = answer_new(names, 2, false);
    got_t g;
    feed(a, "Sure. <tool_call>{\"nam", true, ANSWER_FAILED, &g);
    assert_int_equal(g.c_len, strlen("Sure. "));
    assert_int_equal(g.n_calls, 0);
    answer_free(&a);
}

static void test_whole_split(void **state)
{
    (void)state;
    const char *text = "Checking.\n<tool_call>{\"name\":\"lookup\",\"arguments\":{\"q\": 1.50}}</tool_call>";
    answer_whole_t w;
    answer_whole_split(text, strlen(text), names, 2, false, true, &w);
    assert_false(w.has_reasoning);
    assert_int_equal(w.content_len, strlen("Checking."));
    assert_int_equal(w.n_calls, 1);
    assert_string_equal(w.calls[0].arguments, "{\"q\":1.50}"); /* as written, no white space */
    answer_whole_clear(&w);
    /* not ended normally: no calls parsed */
    answer_whole_split(text, strlen(text), names, 2, false, false, &w);
    assert_int_equal(w.n_calls, 0);
    assert_int_equal(w.content_len, strlen(text));
    answer_whole_clear(&w);
}

/* Answers cut short, as the worker ends them: the text stops where the
 * caller's stop string matched (the string itself is not in the text) or
 * where max_tokens ran out (anywhere, mid-string included). */
static const struct cut_case {
    const char *why, *text;
    unsigned n_calls;             /* calls begun, the last cut unless complete */
    bool ends_in_calls;           /* every call completed ("tool_calls") */
    const char *content;          /* content (whole: trailing white space dropped) */
    const char *name[2], *args[2];
} CUT[] = {
    {"stop \"]\" inside an array argument",
     "<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"tags\": [\"a\", \"b\"", 1, false, "",
     {"lookup"}, {"{\"tags\":[\"a\",\"b\""}},
    {"stop \"]\", text before the call",
     "Let me look.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"tags\": [", 1, false,
     "Let me look.", {"lookup"}, {"{\"tags\":["}},
    {"length mid-string", "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Par", 1, false, "",
     {"get_weather"}, {"{\"location\":\"Par"}},
    /* no arguments key written: "{}", as for a complete call without one (tool_stream.h) */
    {"length right after the name", "<tool_call>{\"name\":\"get_weather\",", 1, false, "", {"get_weather"}, {"{}"}},
    {"length in the second call",
     "<tool_call>{\"name\":\"lookup\",\"arguments\":{\"q\":1}}</tool_call>\n<tool_call>{\"name\":\"get_weather\","
     "\"arguments\":{\"days\":[1,", 2, false, "", {"lookup", "get_weather"}, {"{\"q\":1}", "{\"days\":[1,"}},
    {"length in a bare list (Mistral/Llama forms)", "[{\"name\": \"lookup\", \"arguments\": {\"q\": \"x", 1, false, "",
     {"lookup"}, {"{\"q\":\"x"}},
    {"length after the object closed, before </tool_call>: complete",
     "<tool_call>{\"name\":\"lookup\",\"arguments\":{\"q\":1}}", 1, true, "", {"lookup"}, {"{\"q\":1}"}},
    {"length before the name is complete: content", "Hi <tool_call>{\"name\":\"look", 0, false,
     "Hi <tool_call>{\"name\":\"look", {0}, {0}},
};

static void test_cut_calls(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof CUT / sizeof CUT[0]; k++) {
        const struct cut_case *c = &CUT[k];
        print_message("# %s\n", c->why);
        answer_whole_t w;
        answer_whole_split(c->text, strlen(c->text), names, 2, false, true, &w);
        assert_int_equal(w.n_calls, c->n_calls);
        assert_int_equal(answer_whole_ends_in_calls(&w), c->ends_in_calls);
        assert_int_equal(w.cut, c->n_calls && !c->ends_in_calls);
        assert_int_equal(w.content_len, strlen(c->content));
        assert_memory_equal(w.content, c->content, w.content_len);
        for (unsigned i = 0; i < c->n_calls; i++) {
            assert_string_equal(w.calls[i].name, c->name[i]);
            assert_string_equal(w.calls[i].arguments, c->args[i]);
            assert_memory_equal(w.calls[i].id, "call_", 5);
        }
        for (int bytewise = 0; bytewise < 2; bytewise++) {
            answer_t *a = answer_new(names, 2, false);
            got_t g;
            feed(a, c->text, bytewise, ANSWER_DONE, &g);
            assert_int_equal(g.n_calls, c->n_calls);
            assert_int_equal(g.n_ends, c->n_calls); /* a cut call is ended too */
            assert_int_equal(answer_n_calls(a), c->n_calls);
            assert_int_equal(answer_ends_in_calls(a), c->ends_in_calls);
            /* the streamed content may keep white space before the call */
            assert_true(g.c_len >= w.content_len);
            assert_memory_equal(g.content, w.content, w.content_len);
            for (size_t i = w.content_len; i < g.c_len; i++)
                assert_non_null(strchr(" \n", g.content[i]));
            for (unsigned i = 0; i < c->n_calls; i++) {
                assert_string_equal(g.name[i], c->name[i]);
                assert_int_equal(g.a_len[i], strlen(c->args[i]));
                assert_memory_equal(g.args[i], c->args[i], g.a_len[i]);
            }
            answer_free(&a);
        }
        answer_whole_clear(&w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_through),
        cmocka_unit_test(test_reasoning_then_call),
        cmocka_unit_test(test_failed_end),
        cmocka_unit_test(test_whole_split),
        cmocka_unit_test(test_cut_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
