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
#include <stdio.h>
#include <string.h>

#include <jansson.h>

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

/* A custom tool as the gateway sends it (gateway/oai_tools.c: a function with
 * one string "input" carrying x-grammar): the forced call's input must be in
 * the Lark grammar (Codex's apply_patch, narrowed to one file name), written
 * as a JSON string; the gateway decodes the input back to the patch. */
static void test_custom_tool(void **state)
{
    (void)state;
    const char *lark = "start: begin_patch hunk+ end_patch\n"
                       "begin_patch: \"*** Begin Patch\" LF\n"
                       "end_patch: \"*** End Patch\" LF?\n"
                       "hunk: add_hunk\n"
                       "add_hunk: \"*** Add File: \" filename LF add_line+\n"
                       "filename: \"scratch.txt\"\n"
                       "add_line: \"+\" /(.*)/ LF -> line\n"
                       "%import common.LF\n";
    json_t *tools = json_pack("[{s:s, s:{s:s, s:{s:s, s:{s:{s:s, s:{s:s, s:s}}}, s:[s]}}}]", "type", "function",
                              "function", "name", "apply_patch", "parameters", "type", "object", "properties",
                              "input", "type", "string", "x-grammar", "syntax", "lark", "definition", lark,
                              "required", "input");
    char *tj = json_dumps(tools, JSON_COMPACT);
    json_decref(tools);
    char err[256];
    char *text = tool_grammar_build(tj, "function:apply_patch", false, "hermes", err, sizeof err);
    if (!text)
        fail_msg("no grammar: %s", err);
    grammar_t *g = NULL;
    if (gbnf_parse((const uint8_t *)text, strlen(text), &g, err, sizeof err, NULL, NULL) != 0)
        fail_msg("grammar does not compile: %s\n%s", err, text);
    static const struct {
        const char *patch;
        bool ok;
    } rows[] = {
        {"*** Begin Patch\n*** Add File: scratch.txt\n+hello \"world\"\n+\tx\n*** End Patch\n", true},
        {"*** Begin Patch\n*** Add File: scratch.txt\n+a\n*** End Patch", true},
        {"*** Begin Patch\n*** Add File: other.txt\n+a\n*** End Patch\n", false},
        {"*** Begin Patch\n*** Add File: scratch.txt\n*** End Patch\n", false},
        {"*** Begin Patch\n*** Add File: scratch.txt\n+a\n", false},
    };
    char *names[] = {"apply_patch"};
    bool custom[] = {true};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        /* the model's call, its input JSON-encoded by jansson (the reference) */
        json_t *args = json_pack("{s:s}", "input", rows[i].patch);
        char *a = json_dumps(args, JSON_COMPACT);
        json_decref(args);
        /* jansson writes {"input":"..."}; the model writes the template's spacing */
        char call[1024];
        snprintf(call, sizeof call, "<tool_call>\n{\"name\": \"apply_patch\", \"arguments\": {\"input\": %s}\n</tool_call>",
                 a + strlen("{\"input\":"));
        free(a);
        int m = gbnf_match(g, (const uint8_t *)call, strlen(call));
        if (m != rows[i].ok)
            fail_msg("row %zu: match %d, expected %d for %s", i, m, rows[i].ok, call);
        if (m) {
            oai_tool_call_t *calls;
            size_t cl;
            size_t n = oai_tools_extract(call, strlen(call), names, 1, &calls, &cl);
            assert_int_equal(n, 1);
            oai_tools_mark_custom(calls, n, names, custom, 1);
            json_t *j = oai_tool_calls_json(calls, n, false);
            assert_string_equal(json_string_value(json_object_get(json_object_get(json_array_get(j, 0), "custom"), "input")),
                                rows[i].patch);
            json_decref(j);
            oai_tool_calls_free(calls, n);
        }
    }
    gbnf_free(&g);
    free(text);
    free(tj);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_custom_tool),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
