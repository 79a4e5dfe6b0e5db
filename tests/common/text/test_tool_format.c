/* Unit tests for common/text/tool_format: for every family, an answer written
 * with its markers (as the chat template renders calls) is accepted by the
 * forcing grammar built from the same markers (tool_grammar) and read back
 * by the gateway's parser (gateway/oai_tools.h) to the same names and
 * arguments; the lookup by name covers the table. Runs in well under a
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
#include "gateway/oai_tools.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}}]";

/* f's answer with n calls: open call (sep call) close */
static char *answer(const tool_format_t *f, size_t n_calls)
{
    static const char *const names[] = {"get_weather", "ping"};
    static const char *const args[] = {"{\"city\": \"Oslo\", \"unit\": \"c\"}", "{}"};
    char *out = calloc(1, 4096);
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
            char *text = answer(f, n);
            if (!gbnf_match(g, (const uint8_t *)text, strlen(text)))
                fail_msg("%s: the grammar refuses %s", f->name, text);
            oai_tool_call_t *calls = NULL;
            size_t clen = 99;
            size_t got = oai_tools_extract(text, strlen(text), names, 2, &calls, &clen);
            if (got != n)
                fail_msg("%s: %zu calls read from %s", f->name, got, text);
            assert_int_equal(clen, 0);
            assert_string_equal(calls[0].name, "get_weather");
            assert_string_equal(calls[0].arguments, "{\"city\":\"Oslo\",\"unit\":\"c\"}");
            if (n == 2) {
                assert_string_equal(calls[1].name, "ping");
                assert_string_equal(calls[1].arguments, "{}");
            }
            oai_tool_calls_free(calls, got);
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_force_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
