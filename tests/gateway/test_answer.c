/* Unit tests for gateway/answer: a choice's text split into reasoning,
 * content and tool-call parts, streamed (fed one byte per event, and in one
 * piece) and whole, and the two agreeing:
 *   - without tools or reasoning the text passes through as content;
 *   - <think>…</think> then a Hermes call: reasoning, then the call with its
 *     id ("call_" + 24 hex), name and arguments in several fragments adding
 *     up to answer_whole_split's arguments;
 *   - a failed end releases no held-back call;
 *   - answer_whole_split: reasoning, content before the calls, the calls.
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pass_through),
        cmocka_unit_test(test_reasoning_then_call),
        cmocka_unit_test(test_failed_end),
        cmocka_unit_test(test_whole_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
