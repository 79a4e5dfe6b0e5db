/* Unit tests for gateway/reasoning: the split of whole answers (a table of
 * hand-worked Qwen3 / DeepSeek-R1 style outputs), the streaming split as a
 * property over every prefix of every entry (what is released as reasoning
 * only grows, never contains a byte of </think> or of the content, and at
 * the end equals the whole answer's reasoning), and the response patch. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/oai.h"
#include "gateway/reasoning.h"

typedef struct {
    const char *text;
    bool has;               /* reasoning found */
    const char *reasoning;  /* expected reasoning (has) */
    const char *content;    /* expected content */
} case_t;

static const case_t CASES[] = {
    {"<think>\nI add 2 and 2.\n</think>\n\n4", true, "\nI add 2 and 2.\n", "\n\n4"},
    {"<think></think>answer", true, "", "answer"},
    {"  \n<think>x</think>y", true, "x", "y"},
    /* cut off before </think>: all reasoning */
    {"<think>\nstill thinking", true, "\nstill thinking", ""},
    {"<think>\nstill thinking </thi", true, "\nstill thinking </thi", ""},
    /* only the first </think> ends it */
    {"<think>a</think>b</think>c", true, "a", "b</think>c"},
    /* not at the start: plain content */
    {"The tag <think>x</think> is mentioned", false, NULL, "The tag <think>x</think> is mentioned"},
    {"", false, NULL, ""},
    {"<thin", false, NULL, "<thin"},
    {"<THINK>x</THINK>", false, NULL, "<THINK>x</THINK>"},
    {"Reasoning is: </think> no", false, NULL, "Reasoning is: </think> no"},
    {"<think>é — 世界 </think>😀", true, "é — 世界 ", "😀"},
};

static void test_split_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const case_t *c = &CASES[i];
        size_t len = strlen(c->text);
        reasoning_split_t sp;
        reasoning_split(c->text, len, &sp);
        if (sp.has_reasoning != c->has)
            fail_msg("case %zu (%s): has_reasoning %d", i, c->text, sp.has_reasoning);
        assert_false(sp.undecided);
        if (c->has) {
            assert_int_equal(sp.r_len, strlen(c->reasoning));
            assert_memory_equal(c->text + sp.r_start, c->reasoning, sp.r_len);
        }
        assert_true(sp.c_start <= len);
        assert_int_equal(len - sp.c_start, strlen(c->content));
        assert_memory_equal(c->text + sp.c_start, c->content, len - sp.c_start);
    }
}

static void test_stream_property(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const char *t = CASES[i].text;
        size_t len = strlen(t), released = 0, r_start = 0;
        bool decided = false, decided_has = false;
        for (size_t l = 0; l <= len; l++) {
            reasoning_split_t sp;
            reasoning_stream_feed(t, l, &sp);
            if (sp.undecided) {
                if (decided)
                    fail_msg("case %zu: undecided again at %zu", i, l);
                continue;
            }
            if (decided && sp.has_reasoning != decided_has)
                fail_msg("case %zu: changed its mind at %zu", i, l);
            decided = true;
            decided_has = sp.has_reasoning;
            if (!sp.has_reasoning) {
                assert_int_equal(sp.c_start, 0); /* all content, from the first byte */
                continue;
            }
            if (released && sp.r_start != r_start)
                fail_msg("case %zu: reasoning moved", i);
            r_start = sp.r_start;
            if (sp.r_len < released)
                fail_msg("case %zu: reasoning shrank at %zu", i, l);
            released = sp.r_len;
            /* nothing released may be part of </think> or of the content */
            if (CASES[i].has && released > strlen(CASES[i].reasoning) && strstr(t, "</think>") &&
                sp.r_start + released > (size_t)(strstr(t + sp.r_start, "</think>") - t))
                fail_msg("case %zu: released past </think> at %zu", i, l);
        }
        reasoning_split_t fin;
        reasoning_split(t, len, &fin);
        if (fin.has_reasoning) {
            assert_true(decided_has);
            assert_true(released <= fin.r_len); /* the rest is flushed at the end */
            assert_memory_equal(t + r_start, t + fin.r_start, released);
        }
    }
}

static void test_patch(void **state)
{
    (void)state;
    oai_meta_t meta = {.id = "chatcmpl-x", .model = "m", .created = 1};
    oai_usage_t u = {1, 2, 0};
    oai_logprobs_t lp = {0};
    json_error_t je;
    /* a message: reasoning added, content kept */
    char *body = oai_chat_completion_json(&meta, "\n\n4", 3, "stop", &lp, &u);
    body = reasoning_patch(body, 0, "think \xff", 7, false, false);
    json_t *j = json_loads(body, 0, &je);
    assert_non_null(j);
    json_t *m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_string_equal(json_string_value(json_object_get(m, "reasoning_content")), "think \xef\xbf\xbd");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "\n\n4");
    json_decref(j);
    free(body);
    /* only reasoning: content null */
    body = reasoning_patch(oai_chat_completion_json(&meta, "", 0, "length", &lp, &u), 0, "r", 1, false, false);
    j = json_loads(body, 0, &je);
    m = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    assert_true(json_is_null(json_object_get(m, "content")));
    json_decref(j);
    free(body);
    /* a chunk: the delta carries reasoning_content instead of content */
    oai_chunk_t c = {.text = ""};
    body = reasoning_patch(oai_chat_chunk_json(&meta, &c), 0, "step", 4, true, true);
    j = json_loads(body, 0, &je);
    json_t *d = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "delta");
    assert_null(json_object_get(d, "content"));
    assert_string_equal(json_string_value(json_object_get(d, "reasoning_content")), "step");
    json_decref(j);
    free(body);
    /* not our body: unchanged */
    char *other = strdup("{\"x\":1}");
    assert_ptr_equal(reasoning_patch(other, 0, "r", 1, false, false), other);
    free(other);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_table),
        cmocka_unit_test(test_stream_property),
        cmocka_unit_test(test_patch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
