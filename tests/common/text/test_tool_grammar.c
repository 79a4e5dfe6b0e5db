/* Unit tests for common/text/tool_grammar: the grammar of a forced tool call
 * compiles (gbnf_parse), accepts exactly the call syntax of each format and
 * each tool's schema (a table of hand-written outputs), and everything it
 * accepts is parsed back into calls by the gateway's parser
 * (gateway/oai_tools.h) — the two sides agree on the syntax. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "gateway/oai_tools.h"
#include "common/text/tool_grammar.h"

static const char *TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":8},\"unit\":{\"enum\":[\"c\",\"f\"]}},"
    "\"required\":[\"city\",\"unit\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"ping\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"odd\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"n\":{\"type\":\"integer\",\"maximum\":5,\"not\":{\"const\":3}}},\"required\":[\"n\"],\"if\":{}}}}]";

typedef struct {
    const char *fmt, *choice;
    bool parallel;
    const char *text;
    bool match;
} case_t;

#define W "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}\n</tool_call>"
#define P "<tool_call>\n{\"name\": \"ping\", \"arguments\": {}}\n</tool_call>"

static const case_t CASES[] = {
    {"hermes", "required", true, W, true},
    {"hermes", "required", true, P, true},
    {"hermes", "required", true, W "\n" P, true},
    {"hermes", "required", false, W "\n" P, false},           /* one call only */
    {"hermes", "required", true, "Sure. " W, false},          /* nothing before the call */
    {"hermes", "required", true, "", false},
    {"hermes", "function:ping", true, P, true},
    {"hermes", "function:ping", true, W, false},
    /* the schema: unit is an enum, city ≤ 8 code points, both required */
    {"hermes", "required", true,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"k\"}}\n</tool_call>", false},
    {"hermes", "required", true,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>", false},
    {"hermes", "required", true,
     "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Amsterdam!\", \"unit\": \"c\"}}\n</tool_call>",
     false},
    /* a tool whose schema has refused keywords (not strict): only those are
     * relaxed ('not', 'if'); the rest (type, maximum, required) still holds */
    {"hermes", "function:odd", true, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {\"n\": 3}}\n</tool_call>", true},
    {"hermes", "function:odd", true, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {\"n\": 9}}\n</tool_call>", false},
    {"hermes", "function:odd", true, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {}}\n</tool_call>", false},
    {"hermes", "function:odd", true, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {\"x\": [1, 2]}}\n</tool_call>", false},
    {"hermes", "required", true, "<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>", false},
    {"llama3", "required", true, "{\"name\": \"ping\", \"parameters\": {}}", true},
    {"llama3", "required", true, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\", \"unit\": \"f\"}}", true},
    {"llama3", "required", true, "{\"name\": \"ping\", \"arguments\": {}}", false},
    {"llama3", "function:get_weather", true, "{\"name\": \"ping\", \"parameters\": {}}", false},
    /* Mistral Nemo */
    {"mistral", "required", true, "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}]", true},
    {"mistral", "required", true,
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}, "
     "{\"name\": \"ping\", \"arguments\": {}}]", true},
    {"mistral", "required", false,
     "[TOOL_CALLS][{\"name\": \"ping\", \"arguments\": {}}, {\"name\": \"ping\", \"arguments\": {}}]", false},
    {"mistral", "required", true, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}]",
     false},
    {"mistral", "required", true, "[TOOL_CALLS][]", false},
    {"mistral", "required", true, "[{\"name\": \"ping\", \"arguments\": {}}]", false},
    {"mistral", "function:ping", true, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"unit\": \"c\"}}]", false},
    {"mistral", "required", true, P, false},
};

static void test_table(void **state)
{
    (void)state;
    char *names[] = {"get_weather", "ping", "odd"};
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        const case_t *c = &CASES[i];
        char err[256];
        char *text = tool_grammar_build(TOOLS, c->choice, c->parallel, c->fmt, err, sizeof err);
        if (!text)
            fail_msg("case %zu: no grammar: %s", i, err);
        grammar_t *g = NULL;
        if (gbnf_parse((const uint8_t *)text, strlen(text), &g, err, sizeof err, NULL, NULL) != 0)
            fail_msg("case %zu: grammar does not compile: %s\n%s", i, err, text);
        int m = gbnf_match(g, (const uint8_t *)c->text, strlen(c->text));
        if (m != c->match)
            fail_msg("case %zu (%s, %s): match %d, expected %d for %s", i, c->fmt, c->choice, m, c->match, c->text);
        if (m) {
            oai_tool_call_t *calls;
            size_t content_len;
            size_t n = oai_tools_extract(c->text, strlen(c->text), names, 3, &calls, &content_len);
            if (n == 0 || content_len != 0)
                fail_msg("case %zu: the gateway does not parse what the grammar accepts: %s", i, c->text);
            oai_tool_calls_free(calls, n);
        }
        gbnf_free(&g);
        free(text);
    }
}

static void test_errors(void **state)
{
    (void)state;
    char err[256] = "";
    assert_null(tool_grammar_build(TOOLS, "function:missing", true, "hermes", err, sizeof err));
    assert_non_null(strstr(err, "missing"));
    assert_null(tool_grammar_build("{}", "required", true, "hermes", err, sizeof err));
    const char *strict = "[{\"type\":\"function\",\"function\":{\"name\":\"s\",\"strict\":true,"
                         "\"parameters\":{\"type\":\"object\",\"oneOf\":[]}}}]";
    assert_null(tool_grammar_build(strict, "required", true, "hermes", err, sizeof err));
    assert_non_null(strstr(err, "oneOf"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
