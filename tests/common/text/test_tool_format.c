/* Unit tests for common/text/tool_format: for every family, an answer written
 * with its markers (as the chat template renders calls) is accepted by the
 * forcing grammar built from the same markers (tool_grammar), read back by
 * tool_format_extract to the same names and arguments, and held back while
 * streaming from its first call on; answers that are not calls stay
 * content; the lookup by name covers the table. Runs in well under a
 * second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "common/text/tool_format.h"
#include "common/text/tool_grammar.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

/* f's answer with n calls after content: open call (sep call) close */
static char *answer(const tool_format_t *f, const char *content, size_t n_calls)
{
    static const char *const names[] = {"get_weather", "ping"};
    static const char *const args[] = {"{\"city\": \"Oslo\", \"unit\": \"c\"}", "{}"};
    char *out = calloc(1, 4096);
    strcat(out, content);
    strcat(out, f->open);
    for (size_t i = 0; i < n_calls; i++) {
        if (i)
            strcat(out, f->sep);
        char *c = tool_format_call_text(f, names[i], args[i]);
        strcat(out, c);
        free(c);
    }
    strcat(out, f->close);
    return out;
}

static void test_write_force_read(void **state)
{
    (void)state;
    char *names[] = {"get_weather", "ping"};
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        char err[256];
        char *gt = tool_grammar_build(TOOLS, "required", true, f->name, err, sizeof err);
        if (!gt)
            fail_msg("%s: no grammar: %s", f->name, err);
        grammar_t *g = NULL;
        if (gbnf_parse((const uint8_t *)gt, strlen(gt), &g, err, sizeof err, NULL, NULL) != 0)
            fail_msg("%s: grammar does not compile: %s", f->name, err);
        for (size_t n = 1; n <= (f->sep ? 2u : 1u); n++) {
            char *text = answer(f, "", n);
            if (!gbnf_match(g, (const uint8_t *)text, strlen(text)))
                fail_msg("%s: the grammar refuses %s", f->name, text);
            free(text);
            /* a tagged family keeps the text before its calls as content;
             * an untagged answer is all calls */
            const char *content = f->tag ? "Let me check. " : "";
            text = answer(f, content, n);
            tool_call_t *calls = NULL;
            size_t clen = 99;
            size_t got = tool_format_extract(text, strlen(text), names, 2, &calls, &clen);
            if (got != n)
                fail_msg("%s: %zu calls read from %s", f->name, got, text);
            assert_int_equal(clen, f->tag ? strlen(content) - 1 : 0); /* trailing space dropped */
            assert_string_equal(calls[0].name, "get_weather");
            assert_string_equal(calls[0].arguments, "{\"city\":\"Oslo\",\"unit\":\"c\"}");
            if (n == 2) {
                assert_string_equal(calls[1].name, "ping");
                assert_string_equal(calls[1].arguments, "{}");
            }
            tool_calls_free(calls, got);
            /* streaming: nothing from the first call on is released early */
            for (size_t p = 0; p <= strlen(text); p++)
                assert_true(tool_format_safe_prefix(text, p) <= strlen(content));
            free(text);
        }
        /* a family without sep takes one call: the grammar refuses two */
        if (!f->sep) {
            char *two = calloc(1, 4096);
            char *c = tool_format_call_text(f, "ping", "{}");
            snprintf(two, 4096, "%s%s%s", c, "\n", c);
            assert_false(gbnf_match(g, (const uint8_t *)two, strlen(two)));
            free(c);
            free(two);
        }
        gbnf_free(&g);
        free(gt);
        assert_ptr_equal(tool_format_find(f->name), f);
    }
    assert_null(tool_format_find("nope"));
    assert_null(tool_format_find(NULL));
}

static void test_not_calls(void **state)
{
    (void)state;
    char *names[] = {"ping"};
    static const char *const texts[] = {
        "Just text.",
        "{\"name\": \"other\", \"parameters\": {}}",                 /* not a tool of the request */
        "[{\"name\": \"other\", \"arguments\": {}}]",
        "<tool_call>\n{\"name\": \"ping\"}\n</tool_call> and more", /* text after the block */
        "[TOOL_CALLS][]",                                              /* no call */
        "{\"a\": 1}",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        tool_call_t *calls = (tool_call_t *)1;
        size_t clen = 0;
        assert_int_equal(tool_format_extract(texts[i], strlen(texts[i]), names, 1, &calls, &clen), 0);
        assert_null(calls);
        assert_int_equal(clen, strlen(texts[i]));
    }
    /* plain text streams as it comes; a partial marker is held */
    assert_int_equal(tool_format_safe_prefix("Hello there", 11), 11);
    assert_int_equal(tool_format_safe_prefix("Hello <tool_", 12), 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_force_read),
        cmocka_unit_test(test_not_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
