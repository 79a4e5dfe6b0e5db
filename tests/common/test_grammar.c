/* Unit tests for common/grammar: the GBNF parser (errors with line and
 * column), the byte-level matcher (multi-byte classes, repetition), and the
 * JSON-Schema subset compiler (supported keywords accept and refuse what the
 * JSON Schema specification says; unsupported keywords are named).
 *
 * Expected results are worked out by hand from the GBNF format (gbnf.h) and
 * the JSON Schema validation spec (draft 2020-12); the JSON documents were
 * also checked with ajv by hand when the table was written. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"

/* ---- parse errors -------------------------------------------------------- */

static const struct {
    const char *text;
    int line, col;
    const char *msg;  /* substring of the message */
} BAD[] = {
    {"", 1, 1, "no 'root'"},
    {"root ::= \"a\"\nroot ::= \"b\"", 2, 1, "defined twice"},
    {"root ::= foo", 1, 10, "undefined rule 'foo'"},
    {"root ::= \"abc", 1, 10, "unterminated string"},
    {"root ::= [a-", 1, 10, "unterminated character class"},
    {"root ::= [z-a]", 1, 13, "out of order"},
    {"root ::= (\"a\"", 1, 10, "unclosed '('"},
    {"root ::= \"a\")", 1, 13, "unmatched ')'"},
    {"root ::= \"a\"{3,2}", 1, 13, "below the minimum"},
    {"root ::= \"a\"{99999}", 1, 14, "above 10000"},
    {"root = \"a\"", 1, 6, "expected '::='"},
    {"\n\nroot ::= x\nx ::= x \"a\" | \"b\"", 4, 1, "left-recursive"},
    {"root ::= a\na ::= \"(\" a \")\"", 1, 1, "never finish"},
    {"root ::= \"\\q\"", 1, 11, "unknown escape"},
    {"root ::= \"\\x4\"", 1, 11, "hex digits"},
    {"root ::= \"\\uD800\"", 1, 11, "not a Unicode scalar"},
    {"root ::= \"a\" b ::= \"c\"", 1, 14, "newline before the next rule"},
    {"root ::= \"\xff\"", 1, 11, "invalid UTF-8"},
    {"  # only a comment\n  ::=", 2, 3, "expected a rule name"},
};

static void test_parse_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        grammar_t *g = NULL;
        char err[512];
        int line = 0, col = 0;
        int rc = gbnf_parse((const uint8_t *)BAD[i].text, strlen(BAD[i].text), &g, err, sizeof err, &line, &col);
        if (rc == 0 || line != BAD[i].line || col != BAD[i].col || !strstr(err, BAD[i].msg))
            fail_msg("case %zu (%s): rc %d, %d:%d '%s' (want %d:%d '%s')", i, BAD[i].text, rc, line, col, err,
                     BAD[i].line, BAD[i].col, BAD[i].msg);
        assert_null(g);
    }
}

/* ---- matching -------------------------------------------------------------- */

static const struct {
    const char *grammar;
    const char *input;
    int match;
} MATCH[] = {
    {"root ::= \"yes\" | \"no\"", "yes", 1},
    {"root ::= \"yes\" | \"no\"", "ye", 0},
    {"root ::= \"yes\" | \"no\"", "nope", 0},
    {"root ::= [a-c]+", "abcabc", 1},
    {"root ::= [a-c]+", "", 0},
    {"root ::= [a-c]*", "", 1},
    {"root ::= [^a-z]", "A", 1},
    {"root ::= [^a-z]", "q", 0},
    {"root ::= [^a-z]", "\xc3\xa9", 1},           /* é: 2-byte code point */
    {"root ::= [^a-z]", "\xe2\x82\xac", 1},       /* €: 3 bytes */
    {"root ::= [^a-z]", "\xf0\x9f\x98\x80", 1},   /* 😀: 4 bytes */
    {"root ::= [^a-z]", "\xc3", 0},               /* a partial character is no character */
    {"root ::= [\\u00e0-\\u00ff]", "\xc3\xa9", 1},
    {"root ::= [\\u00e0-\\u00ff]", "\xc3\x9f", 0}, /* ß U+00DF is below the range */
    {"root ::= [\\u0800-\\U0010FFFF]", "\xe0\xa0\x80", 1},
    {"root ::= [\\u0800-\\U0010FFFF]", "\xdf\xbf", 0},
    {"root ::= .", "\xed\x9f\xbf", 1},            /* U+D7FF */
    {"root ::= .", "\xed\xa0\x80", 0},            /* a surrogate is not a scalar value */
    {"root ::= \"a\"{2,3}", "aa", 1},
    {"root ::= \"a\"{2,3}", "aaa", 1},
    {"root ::= \"a\"{2,3}", "aaaa", 0},
    {"root ::= \"a\"{2,3}", "a", 0},
    {"root ::= (\"ab\" | \"c\")? \"d\"", "abd", 1},
    {"root ::= (\"ab\" | \"c\")? \"d\"", "d", 1},
    {"root ::= (\"ab\" | \"c\")? \"d\"", "abcd", 0},
    {"root ::= x x\nx ::= \"a\" | \"aa\"", "aaa", 1}, /* ambiguous: two stacks */
    {"root ::= \"\\\"\" [^\"]* \"\\\"\"", "\"hi\"", 1},
    {"root ::= \"\\x41\\u00e9\"", "A\xc3\xa9", 1},
    {"root ::= item (\",\" item)*\nitem ::= [0-9]+ # numbers\n", "1,22,333", 1},
    {"root ::= \"a\"\n  | \"b\"", "b", 1},            /* a line starting with | continues */
};

static void test_match(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof MATCH / sizeof MATCH[0]; i++) {
        grammar_t *g = NULL;
        char err[512];
        if (gbnf_parse((const uint8_t *)MATCH[i].grammar, strlen(MATCH[i].grammar), &g, err, sizeof err, NULL,
                       NULL) != 0)
            fail_msg("case %zu: %s", i, err);
        int m = gbnf_match(g, (const uint8_t *)MATCH[i].input, strlen(MATCH[i].input));
        if (m != MATCH[i].match)
            fail_msg("case %zu: grammar %s input '%s': got %d", i, MATCH[i].grammar, MATCH[i].input, m);
        gbnf_free(&g);
    }
}

/* Fewest bytes to complete: the length budget relies on it. */
static void test_cost(void **state)
{
    (void)state;
    const char *text = "root ::= \"{\" (\"ab\" | \"c\")+ \"}\"";
    grammar_t *g = NULL;
    assert_int_equal(gbnf_parse((const uint8_t *)text, strlen(text), &g, NULL, 0, NULL, NULL), 0);
    gr_arena_t a;
    gr_arena_init(&a);
    gr_state_t st = {0};
    assert_int_equal(gr_state_start(g, &a, &st), 0);
    assert_int_equal(gr_state_cost(g, &st), 3); /* "{c}" */
    assert_int_equal(gr_state_advance(g, &a, &st, (const uint8_t *)"{a", 2), 0);
    assert_int_equal(gr_state_cost(g, &st), 2); /* "b}" */
    assert_false(gr_state_accepting(&st));
    assert_int_equal(gr_state_advance(g, &a, &st, (const uint8_t *)"b}", 2), 0);
    assert_int_equal(gr_state_cost(g, &st), 0);
    assert_true(gr_state_done(&st));
    assert_int_equal(gr_state_advance(g, &a, &st, (const uint8_t *)"x", 1), -1);
    gr_state_free(&st);
    gr_arena_free(&a);
    gbnf_free(&g);
}

/* ---- JSON Schema subset ------------------------------------------------------ */

static const struct {
    const char *schema;
    const char *doc;
    int valid;  /* what JSON Schema says; the grammar generates a subset */
} SCHEMA_OK[] = {
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}",
     "{\"a\":5}", 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{}", 0},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}}}", "{\"b\":\"x\"}", 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}}}", "{}", 1},
    {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", "{\"a\":\"x\"}", 0},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", "-12", 1},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", "-13", 0},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", "305", 1},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", "306", 0},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", "299", 1},
    {"{\"type\":\"integer\",\"minimum\":-12,\"maximum\":305}", "1.5", 0},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", "0", 0},
    {"{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", "9", 1},
    {"{\"type\":\"integer\",\"minimum\":100}", "99", 0},
    {"{\"type\":\"integer\",\"minimum\":100}", "123456", 1},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "0.75", 1},
    {"{\"type\":\"number\",\"minimum\":0,\"maximum\":1}", "1.5", 0},
    {"{\"type\":\"number\"}", "-12.5e3", 1},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"ab\"", 1},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xc3\xa9\xc3\xa9\xc3\xa9\"", 1}, /* code points */
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"", 0},
    {"{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^[a-c]+x?$\"}", "\"abcx\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^[a-c]+x?$\"}", "\"abd\"", 0},
    {"{\"type\":\"string\",\"pattern\":\"^\\\\d{3}-\\\\w$\"}", "\"123-_\"", 1},
    {"{\"type\":\"string\",\"pattern\":\"^a\\\"b$\"}", "\"a\\\"b\"", 1}, /* a quote is written escaped */
    {"{\"enum\":[\"red\",1,null,{\"k\":[true]}]}", "{\"k\":[true]}", 1},
    {"{\"enum\":[\"red\",1,null,{\"k\":[true]}]}", "\"blue\"", 0},
    {"{\"const\":\"x\"}", "\"x\"", 1},
    {"{\"type\":[\"string\",\"null\"]}", "null", 1},
    {"{\"type\":[\"string\",\"null\"]}", "1", 0},
    {"{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}]}",
     "[1, 2]", 1},
    {"{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}]}",
     "[]", 0},
    {"{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}]}",
     "[1,2,3]", 0},
    {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/n\"},{\"type\":\"null\"}]}},"
     "\"required\":[\"next\"]}},\"$ref\":\"#/$defs/n\"}",
     "{\"next\":{\"next\":null}}", 1},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}", 1},
    {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":\"1\"}", 0},
    {"true", "[{\"a\":\"b\"}, 1.5, null]", 1},
};

static grammar_t *compile_schema(const char *schema_text, char *err, size_t errlen, char *path, size_t pathlen)
{
    json_error_t je;
    json_t *s = json_loads(schema_text, JSON_DECODE_ANY, &je);
    if (!s)
        fail_msg("bad test schema %s: %s", schema_text, je.text);
    char *text = json_schema_to_gbnf(s, "p-", err, errlen, path, pathlen);
    json_decref(s);
    if (!text)
        return NULL;
    /* the prefixed grammar needs a root: wrap it without extra text */
    char *wrapped = json_schema_gbnf_wrap(text, "p-", NULL, NULL);
    free(text);
    grammar_t *g = NULL;
    if (gbnf_parse((const uint8_t *)wrapped, strlen(wrapped), &g, err, errlen, NULL, NULL) != 0)
        g = NULL;
    free(wrapped);
    return g;
}

static void test_schema_match(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SCHEMA_OK / sizeof SCHEMA_OK[0]; i++) {
        char err[512], path[256];
        grammar_t *g = compile_schema(SCHEMA_OK[i].schema, err, sizeof err, path, sizeof path);
        if (!g)
            fail_msg("case %zu: %s at %s", i, err, path);
        int m = gbnf_match(g, (const uint8_t *)SCHEMA_OK[i].doc, strlen(SCHEMA_OK[i].doc));
        if (m != SCHEMA_OK[i].valid)
            fail_msg("case %zu: schema %s doc %s: grammar says %d", i, SCHEMA_OK[i].schema, SCHEMA_OK[i].doc, m);
        gbnf_free(&g);
    }
}

static const struct {
    const char *schema;
    const char *path;  /* JSON pointer of the offending keyword */
    const char *msg;
} SCHEMA_BAD[] = {
    {"{\"type\":\"array\",\"items\":{\"not\":{}}}", "/items/not", "'not'"},
    {"{\"type\":\"string\",\"contains\":{}}", "/contains", "'contains'"},
    {"{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}", "/minimum", "no number satisfies"},
    {"{\"type\":\"string\",\"maxLength\":20000}", "/maxLength", "above 10000"},
    {"{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "/pattern", "lookaround"},
    {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "/pattern", "backreference"},
    {"{\"$ref\":\"http://example.com/s\"}", "/$ref", "does not resolve"},
    {"{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"],\"additionalProperties\":false}", "/required",
     "'b' is not in"},
    {"{\"type\":\"frob\"}", "/type", "unknown type"},
    {"false", "", "matches nothing"},
};

static void test_schema_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof SCHEMA_BAD / sizeof SCHEMA_BAD[0]; i++) {
        char err[512], path[256];
        grammar_t *g = compile_schema(SCHEMA_BAD[i].schema, err, sizeof err, path, sizeof path);
        if (g || strcmp(path, SCHEMA_BAD[i].path) != 0 || !strstr(err, SCHEMA_BAD[i].msg))
            fail_msg("case %zu (%s): got %s at '%s' (want '%s' at '%s')", i, SCHEMA_BAD[i].schema,
                     g ? "success" : err, path, SCHEMA_BAD[i].msg, SCHEMA_BAD[i].path);
    }
    /* a schema that can never finish is refused by the grammar check */
    const char *loop = "{\"$defs\":{\"a\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/a\"},\"minItems\":1}},\"$ref\":\"#/$defs/a\"}";
    char err[512];
    assert_int_equal(json_schema_check((const uint8_t *)loop, strlen(loop), err, sizeof err), -1);
    assert_non_null(strstr(err, "never finish"));
}

/* A huge schema hits a limit and is refused, never accepted half-way. */
static void test_schema_limits(void **state)
{
    (void)state;
    size_t cap = 4u << 20, n = 0;
    char *big = malloc(cap);
    n += (size_t)snprintf(big + n, cap - n, "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < 30000; i++)
        n += (size_t)snprintf(big + n, cap - n, "%s\"p%d\":{\"type\":\"integer\",\"minimum\":%d,\"maximum\":%d}",
                              i ? "," : "", i, -i, 1000 + i);
    n += (size_t)snprintf(big + n, cap - n, "}}");
    char err[512];
    assert_int_equal(json_schema_check((const uint8_t *)big, n, err, sizeof err), -1);
    assert_non_null(strstr(err, "too large"));
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_errors), cmocka_unit_test(test_match),
        cmocka_unit_test(test_cost),         cmocka_unit_test(test_schema_match),
        cmocka_unit_test(test_schema_errors), cmocka_unit_test(test_schema_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
