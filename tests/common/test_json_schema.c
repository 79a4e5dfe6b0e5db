/* test_json_schema.c — the JSON Schema keywords clients write (zod 4,
 * pydantic v2, OpenAI strict mode) through common/grammar/json_schema.c:
 * for each schema, strings the compiled grammar must accept and strings it
 * must reject (checked by the GBNF matcher); refused schemas with the JSON
 * pointer of the refused keyword; relaxed compiling (non-strict tools).
 *
 * Tables are written with ' for " so the JSON stays readable; no case
 * needs a literal '. The accepted strings were checked by hand against the
 * JSON Schema meaning (and, for formats, against ajv-formats' rules), not
 * taken from the compiler's output. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"

/* ' → " (a fresh string) */
static char *dq(const char *s)
{
    char *t = strdup(s);
    for (char *p = t; *p; p++)
        if (*p == '\'')
            *p = '"';
    return t;
}

static json_t *load(const char *text)
{
    char *t = dq(text);
    json_error_t je;
    json_t *s = json_loads(t, JSON_DECODE_ANY, &je);
    if (!s)
        fail_msg("bad test schema %s: %s", t, je.text);
    free(t);
    return s;
}

static grammar_t *parse_prefixed(const char *text)
{
    char *wrapped = json_schema_gbnf_wrap(text, "p-", NULL, NULL);
    grammar_t *g = NULL;
    char err[300];
    if (gbnf_parse((const uint8_t *)wrapped, strlen(wrapped), &g, err, sizeof err, NULL, NULL) != 0)
        fail_msg("grammar does not parse: %s\n%s", err, wrapped);
    free(wrapped);
    return g;
}

/* One schema and documents: "+doc" must match, "-doc" must not. */
static const struct {
    const char *schema;
    const char *docs[8];
} OK[] = {
    /* bounds that cannot bind: zod's z.number().int() */
    {"{'type':'integer','minimum':-9007199254740991,'maximum':9007199254740991}", {"+0", "+-42", "+123456789012345", "-1.5", "-'1'"}},
    {"{'type':'number','minimum':-1e300,'maximum':1e300}", {"+1.5", "+-3", "-'x'"}},
    /* z.number().positive(), .nonnegative(), .negative() */
    {"{'type':'number','exclusiveMinimum':0}", {"+1", "+7.25", "+1000", "-0", "-0.0", "--1", "--0.5"}},
    {"{'type':'number','minimum':0}", {"+0", "+0.5", "+12", "--1", "--0.5"}},
    {"{'type':'number','exclusiveMaximum':0}", {"+-1", "+-2.5", "-0", "-1"}},
    /* fractional and exclusive bounds */
    {"{'type':'number','exclusiveMinimum':0.5,'exclusiveMaximum':10.25}", {"+1", "+9.99", "+10", "-0.5", "-10.5", "-11"}},
    {"{'type':'number','exclusiveMinimum':0,'exclusiveMaximum':1}", {"+0.1", "+0.9", "-0", "-1", "-1.0", "-0.10"}},
    {"{'type':'number','minimum':0.31,'maximum':0.35}", {"+0.31", "+0.33", "+0.35", "-0.30", "-0.36", "-0.3"}},
    {"{'type':'number','minimum':-0.35,'maximum':-0.3}", {"+-0.3", "--0.4", "-0.3"}},
    {"{'type':'number','minimum':-2.5,'maximum':3.5}", {"+-2", "+-1.75", "+3", "-3.25", "--2.75", "-4"}},
    {"{'type':'integer','exclusiveMinimum':0.5,'maximum':3.7}", {"+1", "+3", "-0", "-4"}},
    {"{'type':'integer','exclusiveMinimum':true,'minimum':3}", {"+4", "-3"}},
    /* multipleOf (integers) */
    {"{'type':'integer','minimum':-9007199254740991,'maximum':9007199254740991,'multipleOf':5}",
     {"+0", "+5", "+-10", "+1234567890", "+123456789012345", "-1234567890123455", "-3", "-01"}},
    {"{'type':'integer','multipleOf':64}", {"+64", "+-640", "+128", "-100", "-32"}},
    {"{'type':'integer','multipleOf':7}", {"+7", "+999999999999994", "-1000000000000006", "-8"}},
    {"{'type':'integer','multipleOf':7,'minimum':0}", {"+0", "+7", "+49", "+700000", "-8", "--7"}},
    {"{'type':'integer','multipleOf':3,'minimum':1,'maximum':20}", {"+3", "+18", "-21", "-0", "-4"}},
    {"{'type':'integer','multipleOf':5,'minimum':3}", {"+5", "+10", "+123455", "-0", "--5", "-3"}},
    {"{'type':'integer','multipleOf':1000,'exclusiveMinimum':0}", {"+1000", "+23000", "-0", "-100", "-1500"}},
    {"{'type':'integer','multipleOf':12}", {"+24", "+-36", "+120", "-100", "-6"}},
    {"{'type':'number','multipleOf':2}", {"+4", "-3", "-4.5"}},
    /* multipleOf 1/n: integers (z.number().multipleOf(0.01)) */
    {"{'type':'number','multipleOf':0.01,'minimum':0}", {"+5", "+0", "-0.5", "--1"}},
    {"{'type':'number','multipleOf':0.25}", {"+-7", "-0.25"}},
    /* formats: the generated subset is valid for ajv-formats */
    {"{'type':'string','format':'date-time'}",
     {"+'2024-02-28T23:59:59.123Z'", "+'1999-12-31T00:00:00Z'", "-'2024-02-30T00:00:00Z'", "-'2024-01-01T24:00:00Z'",
      "-'2024-01-01 10:00:00'", "-'2024-01-01T10:00:00'"}},
    {"{'type':'string','format':'date'}", {"+'2024-04-30'", "+'2023-02-28'", "-'2024-04-31'", "-'2024-13-01'", "-'24-01-01'"}},
    {"{'type':'string','format':'time'}", {"+'10:30:00Z'", "+'23:59:59.5Z'", "-'24:00:00Z'", "-'10:30'"}},
    {"{'type':'string','format':'duration'}",
     {"+'P1W'", "+'P1Y2M'", "+'PT5S'", "+'P3DT4H'", "-'P'", "-'PT'", "-'P1YT'", "-'P1W2D'"}},
    {"{'type':'string','format':'email'}", {"+'a.b@c-d.ex.com'", "+'x@y.io'", "-'a@b'", "-'@b.com'", "-'a@-b.com'", "-'a b@c.de'"}},
    {"{'type':'string','format':'hostname'}", {"+'example.com'", "+'a-b.c'", "-'-a.com'", "-'a_b.com'", "-''"}},
    {"{'type':'string','format':'ipv4'}", {"+'192.168.0.1'", "+'0.0.0.0'", "+'255.255.255.255'", "-'256.1.1.1'", "-'01.1.1.1'", "-'1.1.1'"}},
    {"{'type':'string','format':'ipv6'}", {"+'2001:db8:0:0:0:0:0:1'", "-'2001:db8::1:2:3:4:5:6:7'", "-'1:2:3'"}},
    {"{'type':'string','format':'uuid'}",
     {"+'123e4567-e89b-42d3-a456-426614174000'", "-'123e4567-e89b-02d3-a456-426614174000'", "-'123e4567e89b42d3a456426614174000'"}},
    {"{'type':'string','format':'uri','minLength':1,'maxLength':2083}", {"+'https://a.example/x'", "+'http://b.cd'", "-'http://b.c'", "-'http://a.6'", "-'a'", "-'https://'"}},
    /* zod's format + pattern pairs: the format's grammar, the pattern accepts its strings */
    {"{'type':'string','format':'email','pattern':'^(?:[A-Za-z0-9_+\\\\-]+\\\\.)*[A-Za-z0-9_+\\\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\\\-]*\\\\.)+[A-Za-z]{2,}$'}",
     {"+'ab@cd.ef'", "-'ab@cd'"}},
    {"{'type':'string','format':'duration','pattern':'^P(?:(\\\\d+W)|(?!.*W)(?=\\\\d|T\\\\d)(\\\\d+Y)?)$'}", {"+'P2W'", "-'P'"}},
    /* an unknown format next to a pattern is an annotation (zod's cuid, base64) */
    {"{'type':'string','format':'cuid','pattern':'^[cC][0-9a-z]{6,}$'}", {"+'c123456'", "-'x123456'"}},
    {"{'type':'string','format':'base64','pattern':'^$|^(?:[0-9a-zA-Z+/]{4})*(?:(?:[0-9a-zA-Z+/]{2}==)|(?:[0-9a-zA-Z+/]{3}=))?$'}",
     {"+''", "+'YWJj'", "+'YQ=='", "-'YWJ'"}},
    /* oneOf: alternatives (z.discriminatedUnion) */
    {"{'oneOf':[{'type':'object','properties':{'kind':{'type':'string','const':'a'},'x':{'type':'number'}},'required':['kind','x'],"
     "'additionalProperties':false},{'type':'object','properties':{'kind':{'type':'string','const':'b'},'y':{'type':'string'}},"
     "'required':['kind','y'],'additionalProperties':false}]}",
     {"+{'kind':'a','x':1}", "+{'kind':'b','y':'s'}", "-{'kind':'a','y':'s'}", "-{'kind':'c','x':1}"}},
    {"{'discriminator':{'propertyName':'k'},'oneOf':[{'const':1},{'const':2}]}", {"+1", "+2", "-3"}},
    /* allOf of object schemas: merged */
    {"{'allOf':[{'type':'object','properties':{'a':{'type':'string'}},'required':['a']},"
     "{'type':'object','properties':{'b':{'type':'integer'}},'required':['b']}]}",
     {"+{'a':'x','b':1}", "-{'a':'x'}", "-{'b':1}", "-{'a':1,'b':1}"}},
    {"{'$defs':{'A':{'type':'object','properties':{'a':{'type':'string'}}}},"
     "'allOf':[{'$ref':'#/$defs/A'},{'properties':{'b':{'type':'integer'}}}],'required':['b']}",
     {"+{'a':'x','b':1}", "+{'b':1}", "-{'a':'x'}"}},
    {"{'allOf':[{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'integer'}}},"
     "{'type':'object','properties':{'a':{'type':'integer'}},'additionalProperties':false}]}",
     {"+{'a':1}", "+{}", "-{'a':1,'b':2}"}},
    {"{'allOf':[{'type':'object','properties':{'n':{'type':'integer','minimum':0}}},"
     "{'type':'object','properties':{'n':{'type':'integer','maximum':5}}}]}",
     {"+{'n':3}", "+{}", "-{'n':6}", "-{'n':-1}"}},
    {"{'allOf':[{'type':'string'},{'maxLength':3},{'minLength':1,'maxLength':5}]}", {"+'abc'", "-''", "-'abcd'", "-1"}},
    {"{'type':'integer','allOf':[{'minimum':3},{'minimum':5,'maximum':9}]}", {"+5", "+9", "-4", "-10"}},
    /* propertyNames (z.record) */
    {"{'type':'object','propertyNames':{'type':'string'},'additionalProperties':{'type':'number'}}",
     {"+{'a':1,'b':2}", "+{}", "-{'a':'x'}"}},
    {"{'type':'object','propertyNames':{'type':'string','enum':['x','y']},'additionalProperties':{'type':'number'},'required':['x','y']}",
     {"+{'x':1,'y':2}", "-{'x':1}", "-{'z':1,'x':1,'y':2}"}},
    {"{'type':'object','propertyNames':{'type':'string','enum':['x','y']},'additionalProperties':{'type':'number'}}",
     {"+{}", "+{'y':2}", "-{'z':2}"}},
    {"{'type':'object','propertyNames':{'pattern':'^[a-z]+$'},'additionalProperties':{'type':'integer'},'minProperties':1,'maxProperties':2}",
     {"+{'a':1}", "+{'a':1,'bc':2}", "-{}", "-{'a':1,'b':2,'c':3}", "-{'A':1}"}},
    /* tuples: prefixItems (2020-12) and items arrays (draft 7) */
    {"{'type':'array','prefixItems':[{'type':'string'},{'type':'number'}],'items':false,'minItems':2,'maxItems':2}",
     {"+['a', 1]", "-['a']", "-['a',1,2]", "-[]", "-[1,'a']"}},
    {"{'type':'array','items':[{'type':'string'},{'type':'number'}],'additionalItems':false,'minItems':2,'maxItems':2}",
     {"+['a',1]", "-['a',1,2]"}},
    {"{'type':'array','items':[{'type':'string'}],'additionalItems':{'type':'number'},'minItems':1}",
     {"+['a']", "+['a',1,2]", "-[]", "-['a','b']"}},
    {"{'type':'array','prefixItems':[{'type':'string'}],'items':{'type':'number'},'minItems':1}", {"+['a',1]", "-['a','b']"}},
    {"{'type':'array','prefixItems':[{'type':'string'},{'type':'integer'}]}", {"+[]", "+['a']", "+['a',1]", "-['a',1,2]", "-[1]"}},
    {"{'type':'array','prefixItems':[{'type':'string'}],'minItems':3}", {"+['a',1,null]", "-['a',1]"}},
    {"{'type':'array','items':{'type':'integer'},'uniqueItems':false,'maxItems':2}", {"+[1,1]", "-[1,2,3]"}},
    /* minProperties / maxProperties over listed properties */
    {"{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'integer'},'c':{'type':'integer'}},'minProperties':2,'maxProperties':2}",
     {"+{'a':1,'b':2}", "+{'a':1,'c':2}", "+{'b':1,'c':2}", "-{'a':1}", "-{'a':1,'b':2,'c':3}", "-{}"}},
    {"{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'integer'}},'required':['a'],'maxProperties':1}",
     {"+{'a':1}", "-{'a':1,'b':2}", "-{}"}},
    {"{'type':'object','additionalProperties':{'type':'boolean'},'minProperties':2}", {"+{'a':true,'b':false}", "-{'a':true}"}},
    /* dependentRequired: the dependents are required */
    {"{'type':'object','properties':{'a':{'type':'integer'},'b':{'type':'integer'}},'dependentRequired':{'a':['b']}}",
     {"+{'a':1,'b':2}", "+{'b':1}", "-{'a':1}"}},
    /* additionalProperties next to properties: only the listed ones are generated */
    {"{'type':'object','properties':{'a':{'type':'string'}},'required':['a'],'additionalProperties':{}}", {"+{'a':'x'}", "-{'a':'x','b':1}"}},
    {"{'type':'object','properties':{'a':{'type':'string'}},'additionalProperties':{'type':'number'},'required':['a','n']}",
     {"+{'a':'x','n':1}", "-{'a':'x','n':'y'}", "-{'a':'x'}"}},
    /* pattern with maxLength (z.string().max(8).regex(...)): repetitions cut so
     * every match fits; BMP characters only (zod counts UTF-16 units) */
    {"{'type':'string','maxLength':5,'pattern':'^[a-z]+$'}", {"+'abcde'", "+'a'", "-'abcdef'", "-''", "-'A'"}},
    {"{'type':'string','minLength':2,'maxLength':8,'pattern':'^[a-z]+@[a-z]+$'}", {"+'a@b'", "+'abc@def'", "-'abcd@defg'"}},
    {"{'type':'string','maxLength':3,'pattern':'^a.$'}", {"+'ab'", "-'a\xf0\x9f\x98\x80'"}},
    /* minLength: repetitions raised (those that must occur first) */
    {"{'type':'string','minLength':3,'maxLength':5,'pattern':'^[a-z]+$'}", {"+'abc'", "+'abcde'", "-'ab'", "-'abcdef'"}},
    {"{'type':'string','minLength':2,'maxLength':12,'pattern':'^[a-z]+(-[a-z]+)*$'}", {"+'ab'", "+'ab-cd'", "-'a'", "-'abcdefghijklm'"}},
    {"{'type':'string','minLength':4,'maxLength':4,'pattern':'^[0-9]*$'}", {"+'1234'", "-'123'", "-'12345'"}},
    /* pattern anchors on each top-level alternative */
    {"{'type':'string','pattern':'^ab$|^cd$'}", {"+'ab'", "+'cd'", "-'abcd'"}},
};

static void test_accept_reject(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof OK / sizeof OK[0]; i++) {
        json_t *s = load(OK[i].schema);
        char err[300], path[200];
        char *text = json_schema_to_gbnf(s, "p-", err, sizeof err, path, sizeof path);
        if (!text)
            fail_msg("case %zu %s: refused at %s: %s", i, OK[i].schema, path, err);
        grammar_t *g = parse_prefixed(text);
        for (size_t k = 0; k < 8 && OK[i].docs[k]; k++) {
            char *doc = dq(OK[i].docs[k] + 1);
            int want = OK[i].docs[k][0] == '+';
            int m = gbnf_match(g, (const uint8_t *)doc, strlen(doc));
            if (m != want)
                fail_msg("case %zu %s: %s is %s (want %s)", i, OK[i].schema, doc, m ? "accepted" : "rejected",
                         want ? "accepted" : "rejected");
            free(doc);
        }
        /* nothing to relax: the relaxed compiler writes the same grammar */
        char *relaxed = NULL;
        char *t2 = json_schema_to_gbnf_relaxed(s, "p-", &relaxed, err, sizeof err);
        assert_non_null(t2);
        assert_null(relaxed);
        assert_string_equal(text, t2);
        free(t2);
        gbnf_free(&g);
        free(text);
        json_decref(s);
    }
}

/* Refused: the pointer of the refused keyword and part of the message. */
static const struct {
    const char *schema, *path, *msg;
} BAD[] = {
    {"{'type':'object','properties':{'a':{'not':{}}}}", "/properties/a/not", "unsupported JSON Schema keyword 'not'"},
    {"{'if':{},'then':{}}", "/if", "'if'"},
    {"{'type':'array','uniqueItems':true}", "/uniqueItems", "only as false"},
    {"{'type':'array','items':{'type':'number','multipleOf':0.3}}", "/items/multipleOf", "positive integer"},
    {"{'type':'integer','multipleOf':1001}", "/multipleOf", "at most 64"},
    {"{'type':'integer','multipleOf':5,'minimum':7}", "/multipleOf", "more than 256"},
    {"{'type':'integer','minimum':5,'maximum':4}", "/minimum", "no number"},
    {"{'type':'number','exclusiveMinimum':0.3,'maximum':0.3}", "/minimum", "no number"},
    {"{'type':'number','minimum':1e16}", "/minimum", "at most 15 digits"},
    {"{'type':'string','format':'iri'}", "/format", "not supported"},
    {"{'type':'string','format':'uuid','pattern':'^[0-9]+$'}", "/pattern", "does not accept the format"},
    {"{'type':'string','format':'uuid','maxLength':10}", "/maxLength", "next to format"},
    {"{'type':'string','pattern':'(?=a)'}", "/pattern", "lookaround"},
    {"{'type':'string','pattern':'a^b'}", "/pattern", "anchor"},
    {"{'type':'string','pattern':'^abcd$','maxLength':3}", "/maxLength", "no match within"},
    {"{'type':'string','pattern':'^ab?$','minLength':5}", "/minLength", "no match as long as minLength"},
    {"{'$ref':'http://example.com/s'}", "/$ref", "does not resolve"},
    {"{'type':'object','properties':{'a':{}},'required':['b'],'additionalProperties':false}", "/required", "'b' is not in"},
    {"{'type':'object','propertyNames':{'type':'integer'}}", "/propertyNames", "string schema"},
    {"{'type':'object','properties':{'a':{}},'propertyNames':{'pattern':'^a'}}", "/propertyNames", "enum of names"},
    {"{'type':'object','properties':{'a':{}},'minProperties':2}", "/minProperties", "no object"},
    {"{'type':'object','properties':{'a':{}},'dependentRequired':{'a':['zz']}}", "/dependentRequired", "'zz'"},
    {"{'allOf':[{'type':'string'},{'pattern':'^a'},{'pattern':'^b'}]}", "/allOf", "different values for 'pattern'"},
    {"{'allOf':[{'type':'string'},{'not':{}}]}", "/allOf", "independent keywords"},
    {"{'allOf':[{'type':'object','properties':{'a':{}},'required':['a']},{'type':'object','additionalProperties':false}]}",
     "/allOf", "not allowed"},
    {"{'anyOf':[{}],'oneOf':[{}]}", "/oneOf", "next to 'anyOf'"},
    {"{'type':'object','oneOf':[{}]}", "/type", "next to 'oneOf'"},
    {"{'type':'array','prefixItems':[{}],'items':[{}]}", "/items", "next to 'prefixItems'"},
    {"{'type':'array','prefixItems':[{}],'items':false,'minItems':2}", "/minItems", "no array"},
    {"{'type':'frob'}", "/type", "unknown type"},
    {"false", "", "matches nothing"},
};

static void test_refused(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        json_t *s = load(BAD[i].schema);
        char err[300], path[200];
        char *text = json_schema_to_gbnf(s, NULL, err, sizeof err, path, sizeof path);
        if (text || strcmp(path, BAD[i].path) != 0 || !strstr(err, BAD[i].msg))
            fail_msg("case %zu (%s): got %s at '%s' (want '%s' at '%s')", i, BAD[i].schema, text ? "success" : err,
                     path, BAD[i].msg, BAD[i].path);
        /* relaxed: compiles, and reports that pointer */
        char *relaxed = NULL;
        char *t2 = json_schema_to_gbnf_relaxed(s, "p-", &relaxed, err, sizeof err);
        if (!t2 || !relaxed)
            fail_msg("case %zu (%s): relaxed compile gave %s", i, BAD[i].schema, t2 ? "no note" : err);
        char want[220];
        snprintf(want, sizeof want, "%s: ", BAD[i].path[0] ? BAD[i].path : "/");
        if (!strstr(relaxed, want))
            fail_msg("case %zu: relaxed note '%s' does not name %s", i, relaxed, want);
        grammar_t *g = parse_prefixed(t2);
        gbnf_free(&g);
        free(relaxed);
        free(t2);
        json_decref(s);
    }
}

/* Relaxing drops only the refused keyword: the rest is still enforced. */
static void test_relaxed(void **state)
{
    (void)state;
    json_t *s = load("{'type':'object','properties':{'a':{'type':'string','maxLength':3,'not':{'const':'x'}},"
                     "'b':{'type':'array','uniqueItems':true,'items':{'type':'integer','minimum':0,'maximum':9}},"
                     "'d':{'$ref':'#/nope'}},'required':['a','b'],'additionalProperties':false,'if':{}}");
    char err[300], *relaxed = NULL;
    char *text = json_schema_to_gbnf_relaxed(s, "p-", &relaxed, err, sizeof err);
    assert_non_null(text);
    assert_non_null(relaxed);
    const char *want[] = {"/if: ", "/properties/a/not: ", "/properties/b/uniqueItems: ", "/properties/d/$ref: "};
    for (size_t i = 0; i < 4; i++)
        if (!strstr(relaxed, want[i]))
            fail_msg("relaxed note '%s' lacks %s", relaxed, want[i]);
    grammar_t *g = parse_prefixed(text);
    const char *docs[][2] = {
        {"+", "{\"a\":\"x\",\"b\":[1,1]}"},           /* not and uniqueItems relaxed */
        {"+", "{\"a\":\"xy\",\"b\":[],\"d\":[true]}"}, /* the bad $ref: any value */
        {"-", "{\"a\":\"long\",\"b\":[]}"},            /* maxLength still holds */
        {"-", "{\"a\":\"x\",\"b\":[10]}"},             /* item bounds still hold */
        {"-", "{\"a\":\"x\"}"},                        /* required still holds */
        {"-", "{\"a\":\"x\",\"b\":[],\"e\":1}"},       /* no extra properties */
    };
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        int m = gbnf_match(g, (const uint8_t *)docs[i][1], strlen(docs[i][1]));
        if (m != (docs[i][0][0] == '+'))
            fail_msg("relaxed grammar: %s is %s", docs[i][1], m ? "accepted" : "rejected");
    }
    gbnf_free(&g);
    free(text);
    free(relaxed);
    json_decref(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accept_reject),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_relaxed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
