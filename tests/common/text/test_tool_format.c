/* Unit tests for common/text/tool_format: for every family, calls written
 * with its markers (as the template renders them and the grammar forces
 * them) read back to the same names and arguments; every prefix of such an
 * answer is held back from the marker on while streaming; the lookup by
 * name covers the table. Runs in well under a second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/tool_format.h"

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

static void test_round_trip(void **state)
{
    (void)state;
    char *names[] = {"get_weather", "ping"};
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        size_t max_calls = f->sep ? 2 : 1;
        for (size_t n = 1; n <= max_calls; n++) {
            /* hermes keeps the text before its calls as content; the
             * untagged forms are the whole answer */
            const char *content = f->tag && f->call_open[0] ? "Let me check. " : "";
            char *text = answer(f, content, n);
            tool_call_t *calls = NULL;
            size_t clen = 99;
            size_t got = tool_format_extract(text, strlen(text), names, 2, &calls, &clen);
            if (got != n)
                fail_msg("%s: %zu calls read from %s", f->name, got, text);
            assert_int_equal(clen, strlen(content) ? strlen(content) - 1 : 0); /* trailing space dropped */
            assert_string_equal(calls[0].name, "get_weather");
            assert_string_equal(calls[0].arguments, "{\"city\":\"Oslo\",\"unit\":\"c\"}");
            if (n == 2) {
                assert_string_equal(calls[1].name, "ping");
                assert_string_equal(calls[1].arguments, "{}");
            }
            tool_calls_free(calls, got);

            /* streaming: nothing from the first call on is released early */
            size_t len = strlen(text);
            for (size_t p = 0; p <= len; p++)
                assert_true(tool_format_safe_prefix(text, p) <= strlen(content));
            free(text);
        }
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
        "{\"name\": \"other\", \"parameters\": {}}",         /* not a tool of the request */
        "[{\"name\": \"other\", \"arguments\": {}}]",
        "<tool_call>\n{\"name\": \"ping\"}\n</tool_call> and more", /* text after the block */
        "[TOOL_CALLS][]",                                      /* no call */
        "{\"a\": 1}",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        tool_call_t *calls = (tool_call_t *)1;
        size_t clen = 0;
        assert_int_equal(tool_format_extract(texts[i], strlen(texts[i]), names, 1, &calls, &clen), 0);
        assert_null(calls);
        assert_int_equal(clen, strlen(texts[i]));
    }
    /* plain text streams as it comes */
    assert_int_equal(tool_format_safe_prefix("Hello there", 11), 11);
    assert_int_equal(tool_format_safe_prefix("Hello <tool_", 12), 6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_not_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
