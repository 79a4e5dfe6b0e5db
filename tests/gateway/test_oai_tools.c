/* Unit tests for gateway/oai_tools: the request fields (parsed values of
 * valid requests), the output parser as a table of hand-worked model outputs,
 * and the streaming hold-back checked as a property over every split point
 * of every table entry (content never runs into a call; nothing is lost). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/oai.h"
#include "gateway/oai_tools.h"

static char *names[] = {"get_weather", "lookup"};

typedef struct {
    const char *text;
    size_t n_calls;             /* expected calls (0 = content only) */
    const char *name0, *args0;  /* first call: name, arguments as compact JSON */
    const char *name1, *args1;  /* second call, when n_calls == 2 */
    const char *content;        /* expected content before the calls (n_calls > 0) */
} out_case_t;

static const out_case_t OUT[] = {
    /* plain text */
    {"Hello there.", 0, NULL, NULL, NULL, NULL, NULL},
    {"", 0, NULL, NULL, NULL, NULL, NULL},
    {"a < b and <tool is not a call", 0, NULL, NULL, NULL, NULL, NULL},
    /* Hermes */
    {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>", 1,
     "get_weather", "{\"location\":\"Paris\"}", NULL, NULL, ""},
    {"Let me check.\n<tool_call>\n{\"name\": \"lookup\", \"arguments\": {}}\n</tool_call>", 1, "lookup", "{}",
     NULL, NULL, "Let me check."},
    {"<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Paris\"}}</tool_call>\n"
     "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"location\":\"Rome\"}}</tool_call>",
     2, "get_weather", "{\"location\":\"Paris\"}", "get_weather", "{\"location\":\"Rome\"}", ""},
    /* unclosed last block: the model stopped at EOS before the close tag */
    {"<tool_call>\n{\"name\": \"lookup\", \"arguments\": {\"q\": 1}}", 1, "lookup", "{\"q\":1}", NULL, NULL, ""},
    /* arguments given as a JSON string (some models do): kept as is */
    {"<tool_call>{\"name\": \"lookup\", \"arguments\": \"{\\\"q\\\": 2}\"}</tool_call>", 1, "lookup",
     "{\"q\": 2}", NULL, NULL, ""},
    /* broken JSON inside the block: no call, all content */
    {"<tool_call>{\"name\": \"lookup\", \"arguments\": {</tool_call>", 0, NULL, NULL, NULL, NULL, NULL},
    /* text after the block: not a clean call */
    {"<tool_call>{\"name\":\"lookup\",\"arguments\":{}}</tool_call> and more", 0, NULL, NULL, NULL, NULL, NULL},
    /* no name */
    {"<tool_call>{\"arguments\":{}}</tool_call>", 0, NULL, NULL, NULL, NULL, NULL},
    /* Mistral */
    {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}]", 1, "get_weather",
     "{\"location\":\"Oslo\"}", NULL, NULL, ""},
    {"[TOOL_CALLS] not json", 0, NULL, NULL, NULL, NULL, NULL},
    /* Mistral Nemo: parallel calls, the "id" a model may add is ignored, content before the tag */
    {"[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}, \"id\": \"a1b2c3d4e\"}, "
     "{\"name\": \"lookup\", \"arguments\": {\"q\": [1, 2]}}]", 2, "get_weather", "{\"location\":\"Oslo\"}", "lookup",
     "{\"q\":[1,2]}", ""},
    {"Checking.\n\n[TOOL_CALLS] [{\"name\": \"lookup\", \"arguments\": {}}]\n", 1, "lookup", "{}", NULL, NULL,
     "Checking."},
    {"[TOOL_CALLS][]", 0, NULL, NULL, NULL, NULL, NULL},
    {"[TOOL_CALLS][{\"name\": \"lookup\", \"arguments\": {}}] trailing", 0, NULL, NULL, NULL, NULL, NULL},
    {"[TOOL_CALLS][{\"arguments\": {}}]", 0, NULL, NULL, NULL, NULL, NULL},
    /* untagged (the [TOOL_CALLS] control token is not in the text): declared names only */
    {"[{\"name\": \"lookup\", \"arguments\": {\"q\": \"x\"}}]", 1, "lookup", "{\"q\":\"x\"}", NULL, NULL, ""},
    {" [ {\"name\": \"get_weather\", \"arguments\": {}}, {\"name\": \"lookup\", \"arguments\": {}} ] ", 2,
     "get_weather", "{}", "lookup", "{}", ""},
    {"[{\"name\": \"not_declared\", \"arguments\": {}}]", 0, NULL, NULL, NULL, NULL, NULL},
    {"[1, 2, 3] are numbers", 0, NULL, NULL, NULL, NULL, NULL},
    {"[link](http://x) text", 0, NULL, NULL, NULL, NULL, NULL},
    /* Llama 3 bare JSON: a declared name is required */
    {"{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Lima\"}}", 1, "get_weather",
     "{\"location\":\"Lima\"}", NULL, NULL, ""},
    {"  <|python_tag|>{\"name\": \"lookup\", \"parameters\": {}}", 1, "lookup", "{}", NULL, NULL, ""},
    {"{\"name\": \"lookup\", \"parameters\": {}}; {\"name\": \"get_weather\", \"parameters\": {\"location\": \"X\"}}",
     2, "lookup", "{}", "get_weather", "{\"location\":\"X\"}", ""},
    {"{\"name\": \"not_declared\", \"parameters\": {}}", 0, NULL, NULL, NULL, NULL, NULL},
    {"{\"answer\": 42}", 0, NULL, NULL, NULL, NULL, NULL},
};

static void test_extract_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof OUT / sizeof OUT[0]; i++) {
        const out_case_t *c = &OUT[i];
        oai_tool_call_t *calls;
        size_t content_len;
        size_t n = oai_tools_extract(c->text, strlen(c->text), names, 2, &calls, &content_len);
        if (n != c->n_calls)
            fail_msg("case %zu (%s): %zu calls, expected %zu", i, c->text, n, c->n_calls);
        if (n == 0) {
            assert_null(calls);
            assert_int_equal(content_len, strlen(c->text));
            continue;
        }
        assert_string_equal(calls[0].name, c->name0);
        assert_string_equal(calls[0].arguments, c->args0);
        assert_int_equal(strncmp(calls[0].id, "call_", 5), 0);
        assert_int_equal(strlen(calls[0].id), 29);
        if (n > 1) {
            assert_string_equal(calls[1].name, c->name1);
            assert_string_equal(calls[1].arguments, c->args1);
            assert_string_not_equal(calls[0].id, calls[1].id);
        }
        assert_int_equal(content_len, strlen(c->content));
        assert_memory_equal(c->text, c->content, content_len);
        oai_tool_calls_free(calls, n);
    }
}

/* Streaming: feed every prefix; what is released as content must never
 * reach into a call, must only grow, and content released + the finish
 * decision must give back exactly the text or its content part. */
static void test_hold_back_property(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof OUT / sizeof OUT[0]; i++) {
        const char *t = OUT[i].text;
        size_t len = strlen(t), prev = 0;
        for (size_t l = 0; l <= len; l++) {
            size_t safe = oai_tools_safe_prefix(t, l);
            assert_true(safe <= l);
            if (safe < prev)
                fail_msg("case %zu: released %zu bytes, then only %zu at length %zu", i, prev, safe, l);
            prev = safe;
            if (OUT[i].n_calls > 0 && safe > strlen(OUT[i].content)) {
                /* white space between content and the call may be released */
                for (size_t k = strlen(OUT[i].content); k < safe; k++)
                    if (!strchr(" \n\t\r", t[k]))
                        fail_msg("case %zu: released byte %zu ('%c') of a call", i, k, t[k]);
            }
        }
        if (OUT[i].n_calls == 0 && !strchr(t, '{') && !strchr(t, '[') && !strstr(t, "<tool_call"))
            assert_int_equal(oai_tools_safe_prefix(t, len), len); /* plain text streams entirely */
    }
}

static void test_parse_request(void **state)
{
    (void)state;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\": \\\"Paris\\\"}\"}},"
        "{\"id\":\"c2\",\"type\":\"function\",\"function\":{\"name\":\"lookup\",\"arguments\":\"not json\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"21 C\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
        "\"object\"}}},{\"type\":\"function\",\"function\":{\"name\":\"lookup\"}}],"
        "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"lookup\"}},\"parallel_tool_calls\":false}";
    request_t r;
    oai_error_t e;
    int rc = oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e);
    if (rc != 0)
        fail_msg("refused: %s (%s)", e.message, e.param);
    assert_int_equal(r.n_tools, 2);
    assert_string_equal(r.tool_names[0], "get_weather");
    assert_string_equal(r.tool_names[1], "lookup");
    assert_int_equal(r.tool_choice, REQUEST_TOOL_CHOICE_NAMED);
    assert_string_equal(r.tool_choice_name, "lookup");
    assert_false(r.parallel_tool_calls);
    /* tools forwarded as they came (compact), arguments parsed when JSON */
    json_error_t je;
    json_t *tools = json_loads(r.tools_json, 0, &je);
    assert_true(json_is_array(tools) && json_array_size(tools) == 2);
    json_decref(tools);
    json_t *calls = json_loads(r.messages[1].tool_calls_json, 0, &je);
    assert_true(json_is_array(calls) && json_array_size(calls) == 2);
    json_t *a0 = json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments");
    assert_true(json_is_object(a0));
    assert_string_equal(json_string_value(json_object_get(a0, "location")), "Paris");
    json_t *a1 = json_object_get(json_object_get(json_array_get(calls, 1), "function"), "arguments");
    assert_true(json_is_string(a1));
    assert_string_equal(json_string_value(a1), "not json");
    assert_string_equal(json_string_value(json_object_get(json_array_get(calls, 0), "id")), "c1");
    json_decref(calls);
    assert_string_equal(r.messages[2].tool_call_id, "c1");
    assert_string_equal(r.messages[1].content, "");
    request_free(&r);

    /* defaults */
    const char *b2 = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
    assert_int_equal(oai_parse_request((const uint8_t *)b2, strlen(b2), REQUEST_CHAT, &r, &e), 0);
    assert_null(r.tools_json);
    assert_int_equal(r.n_tools, 0);
    assert_int_equal(r.tool_choice, REQUEST_TOOL_CHOICE_AUTO);
    assert_true(r.parallel_tool_calls);
    request_free(&r);
}

/* Custom tools on chat: shown as a function with one string "input", named
 * by tool_choice {"type":"custom"}, earlier custom calls shown as the
 * function call the model wrote; the answer's call rendered as
 * {"type":"custom","custom":{"name","input"}}. */
static void test_custom_tools(void **state)
{
    (void)state;
    const char *body =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"patch it\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"custom\","
        "\"custom\":{\"name\":\"apply_patch\",\"input\":\"line\\n\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],"
        "\"tools\":[{\"type\":\"custom\",\"custom\":{\"name\":\"apply_patch\",\"description\":\"Patch.\","
        "\"format\":{\"type\":\"text\"}}},{\"type\":\"function\",\"function\":{\"name\":\"lookup\"}}],"
        "\"tool_choice\":{\"type\":\"custom\",\"custom\":{\"name\":\"apply_patch\"}}}";
    request_t r;
    oai_error_t e;
    if (oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e) != 0)
        fail_msg("refused: %s (%s)", e.message, e.param);
    assert_int_equal(r.n_tools, 2);
    assert_true(r.tool_custom && r.tool_custom[0] && !r.tool_custom[1]);
    assert_int_equal(r.tool_choice, REQUEST_TOOL_CHOICE_NAMED);
    assert_string_equal(r.tool_choice_name, "apply_patch");
    json_t *tools = json_loads(r.tools_json, 0, NULL);
    json_t *f0 = json_object_get(json_array_get(tools, 0), "function");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tools, 0), "type")), "function");
    assert_string_equal(json_string_value(json_object_get(
                            json_object_get(json_object_get(json_object_get(f0, "parameters"), "properties"), "input"),
                            "type")),
                        "string");
    json_decref(tools);
    json_t *calls = json_loads(r.messages[1].tool_calls_json, 0, NULL);
    json_t *a0 = json_object_get(json_object_get(json_array_get(calls, 0), "function"), "arguments");
    assert_string_equal(json_string_value(json_object_get(a0, "input")), "line\n");
    json_decref(calls);
    request_free(&r);

    oai_tool_call_t call = {.id = "call_1", .name = "apply_patch", .arguments = "{\"input\": \"a\\tb\"}"};
    char *tn[] = {"apply_patch"};
    bool tc[] = {true};
    oai_tools_mark_custom(&call, 1, tn, tc, 1);
    assert_true(call.custom);
    json_t *cj = oai_tool_calls_json(&call, 1, false);
    json_t *c0 = json_array_get(cj, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "type")), "custom");
    assert_string_equal(json_string_value(json_object_get(json_object_get(c0, "custom"), "input")), "a\tb");
    json_decref(cj);
}

/* oai_custom_input on every prefix of an encoded input gives a prefix of the
 * whole input (so streamed deltas concatenate to it): random texts with
 * quotes, backslashes, control characters and non-ASCII (jansson encodes
 * them, the independent reference). */
static void test_custom_input_prefixes(void **state)
{
    (void)state;
    uint64_t x = 42;
    static const char *alphabet[] = {"a", "\"", "\\", "\n", "\t", "\x01", "\xc3\xa9", "\xf0\x9f\x98\x80", "/", " "};
    for (int round = 0; round < 300; round++) {
        char text[256];
        size_t tl = 0;
        int n = (int)(x % 24);
        for (int k = 0; k < n; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            const char *a = alphabet[(x >> 33) % 10];
            memcpy(text + tl, a, strlen(a));
            tl += strlen(a);
        }
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        json_t *o = json_pack("{s:s%}", "input", text, tl);
        char *args = json_dumps(o, JSON_COMPACT | ((round & 1) ? JSON_ENSURE_ASCII : 0));
        json_decref(o);
        size_t al = strlen(args), prev = 0;
        for (size_t cut = 0; cut <= al; cut++) {
            size_t dl;
            char *d = oai_custom_input(args, cut, &dl);
            assert_true(dl >= prev && dl <= tl);
            assert_memory_equal(d, text, dl);
            prev = dl;
            free(d);
        }
        assert_int_equal(prev, tl);
        free(args);
    }
}

/* chat_template_kwargs: enable_thinking parsed; other keys ignored; wrong
 * types 400 naming the field. */
static void test_template_kwargs(void **state)
{
    (void)state;
    request_t r;
    oai_error_t e;
    const char *ok = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                     "\"chat_template_kwargs\":{\"enable_thinking\":false,\"custom\":[1,{\"x\":2}]}}";
    assert_int_equal(oai_parse_request((const uint8_t *)ok, strlen(ok), REQUEST_CHAT, &r, &e), 0);
    assert_true(r.has_enable_thinking);
    assert_false(r.enable_thinking);
    request_free(&r);
    const char *on = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                     "\"chat_template_kwargs\":{\"enable_thinking\":true}}";
    assert_int_equal(oai_parse_request((const uint8_t *)on, strlen(on), REQUEST_CHAT, &r, &e), 0);
    assert_true(r.has_enable_thinking);
    assert_true(r.enable_thinking);
    request_free(&r);
    const char *none = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"chat_template_kwargs\":{}}";
    assert_int_equal(oai_parse_request((const uint8_t *)none, strlen(none), REQUEST_CHAT, &r, &e), 0);
    assert_false(r.has_enable_thinking);
    request_free(&r);
    static const struct {
        const char *kw, *param;
    } BAD[] = {
        {"\"yes\"", "chat_template_kwargs"},
        {"[]", "chat_template_kwargs"},
        {"{\"enable_thinking\":\"false\"}", "chat_template_kwargs.enable_thinking"},
        {"{\"enable_thinking\":0}", "chat_template_kwargs.enable_thinking"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        char body[256];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                 "\"chat_template_kwargs\":%s}", BAD[i].kw);
        assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), -1);
        assert_int_equal(e.status, 400);
        assert_string_equal(e.param, BAD[i].param);
    }
}

/* A strict tool's schema must compile whole: 400 naming the parameters and
 * the refused keyword's JSON pointer; the same schema without strict is
 * accepted (the worker relaxes the keyword when it forces a call). */
static void test_strict_schema(void **state)
{
    (void)state;
    static const char *fmt =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":\"function\","
        "\"function\":{\"name\":\"a\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\",%s\"parameters\":"
        "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"array\",\"uniqueItems\":true}}}}}]}";
    char body[512];
    request_t r;
    oai_error_t e;
    snprintf(body, sizeof body, fmt, "\"strict\":true,");
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "tools[1].function.parameters");
    if (!strstr(e.message, "/properties/x/uniqueItems"))
        fail_msg("message without the pointer: %s", e.message);
    snprintf(body, sizeof body, fmt, "\"strict\":false,");
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), 0);
    request_free(&r);
    /* a strict schema that compiles is accepted */
    const char *good = "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":[{\"type\":"
                       "\"function\",\"function\":{\"name\":\"f\",\"strict\":true,\"parameters\":{\"type\":\"object\","
                       "\"properties\":{\"n\":{\"type\":\"integer\",\"minimum\":-9007199254740991}},\"required\":[\"n\"],"
                       "\"additionalProperties\":false}}}]}";
    assert_int_equal(oai_parse_request((const uint8_t *)good, strlen(good), REQUEST_CHAT, &r, &e), 0);
    request_free(&r);
}

/* The patched bodies are what the SDKs read: message.tool_calls with
 * id/type/function{name, arguments: string}, content null, finish
 * "tool_calls"; a chunk's delta.tool_calls carries index. */
static void test_patch(void **state)
{
    (void)state;
    oai_tool_call_t call = {.id = "call_0123456789abcdef01234567", .name = "lookup", .arguments = "{\"q\":1}"};
    oai_meta_t meta = {.id = "chatcmpl-x", .model = "m", .created = 1};
    oai_usage_t u = {1, 2, 0};
    oai_logprobs_t lp = {0};
    char *body = oai_chat_completion_json(&meta, "", 0, "stop", &lp, &u);
    body = oai_tools_patch(body, 0, "", 0, &call, 1, true, false);
    json_error_t je;
    json_t *j = json_loads(body, 0, &je);
    assert_non_null(j);
    json_t *ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *msg = json_object_get(ch, "message");
    assert_true(json_is_null(json_object_get(msg, "content")));
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "tool_calls");
    json_t *tc = json_array_get(json_object_get(msg, "tool_calls"), 0);
    assert_string_equal(json_string_value(json_object_get(tc, "id")), call.id);
    assert_string_equal(json_string_value(json_object_get(tc, "type")), "function");
    json_t *f = json_object_get(tc, "function");
    assert_string_equal(json_string_value(json_object_get(f, "name")), "lookup");
    assert_string_equal(json_string_value(json_object_get(f, "arguments")), "{\"q\":1}");
    json_decref(j);
    free(body);

    /* a call cut short (gateway/answer.h): the calls, and the finish stays */
    body = oai_tools_patch(oai_chat_completion_json(&meta, "", 0, "length", &lp, &u), 0, "", 0, &call, 1,
                           false, false);
    j = json_loads(body, 0, &je);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    assert_int_equal(json_array_size(json_object_get(json_object_get(ch, "message"), "tool_calls")), 1);
    json_decref(j);
    free(body);

    oai_chunk_t c = {0};
    body = oai_tools_patch(oai_chat_chunk_json(&meta, &c), 0, NULL, 0, &call, 1, true, true);
    j = json_loads(body, 0, &je);
    ch = json_array_get(json_object_get(j, "choices"), 0);
    json_t *d = json_object_get(ch, "delta");
    assert_null(json_object_get(d, "content"));
    tc = json_array_get(json_object_get(d, "tool_calls"), 0);
    assert_int_equal(json_integer_value(json_object_get(tc, "index")), 0);
    assert_true(json_is_null(json_object_get(ch, "finish_reason")));
    json_decref(j);
    free(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_extract_table),
        cmocka_unit_test(test_hold_back_property),
        cmocka_unit_test(test_parse_request),
        cmocka_unit_test(test_patch),
        cmocka_unit_test(test_template_kwargs),
        cmocka_unit_test(test_strict_schema),
        cmocka_unit_test(test_custom_tools),
        cmocka_unit_test(test_custom_input_prefixes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
