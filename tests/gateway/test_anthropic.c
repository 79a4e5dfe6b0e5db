/* Unit tests for gateway/anthropic: Messages bodies → the internal request
 * (field by field, tools and tool results, thinking, count_tokens), refused
 * bodies as a table (each with the words the error must say), the error
 * shape per status, the message object and the event stream for answers
 * with text, reasoning and a tool call. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/anthropic.h"
#include "gateway/oai_tools.h"

static int parse(const char *body, bool count, request_t *o, oai_error_t *e)
{
    return anthropic_parse_request((const uint8_t *)body, strlen(body), count, o, e);
}

static void parse_ok(const char *body, bool count, request_t *o)
{
    oai_error_t e;
    if (parse(body, count, o, &e) != 0)
        fail_msg("refused (%d): %s\n%s", e.status, e.message, body);
}

static void test_basic_fields(void **st)
{
    request_t o;
    parse_ok("{\"model\":\"m\",\"max_tokens\":64,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},"
             "{\"type\":\"text\",\"text\":\"Be kind.\"}],\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"Hello\"}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]}],"
             "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,\"stop_sequences\":[\"END\"],\"stream\":true,"
             "\"metadata\":{\"user_id\":\"u-1\"},\"anthropic_beta_unknown_field\":1}",
             false, &o);
    assert_string_equal(o.model, "m");
    assert_int_equal(o.max_tokens, 64);
    assert_int_equal(o.n_messages, 4);
    assert_int_equal(o.messages[0].role, REQUEST_ROLE_SYSTEM);
    assert_string_equal(o.messages[0].content, "Be brief.\nBe kind.");
    assert_int_equal(o.messages[1].role, REQUEST_ROLE_USER);
    assert_string_equal(o.messages[1].content, "Hi");
    assert_int_equal(o.messages[2].role, REQUEST_ROLE_ASSISTANT);
    assert_string_equal(o.messages[2].content, "Hello");
    assert_string_equal(o.messages[3].content, "a\nb");
    assert_true(o.temperature == 0.5);
    assert_true(o.top_p == 0.9);
    assert_int_equal(o.top_k, 7);
    assert_int_equal(o.n_stop, 1);
    assert_string_equal(o.stop[0], "END");
    assert_true(o.stream);
    assert_string_equal(o.user, "u-1");
    /* Anthropic's default: no thinking */
    assert_true(o.has_enable_thinking);
    assert_false(o.enable_thinking);
    assert_null(o.tools_json);
    assert_int_equal(o.op, REQUEST_OP_GENERATE);
    request_free(&o);
}

static void test_tools_round_trip(void **st)
{
    request_t o;
    parse_ok("{\"model\":\"m\",\"max_tokens\":100,"
             "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":{\"type\":\"object\","
             "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}],"
             "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\",\"disable_parallel_tool_use\":true},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
             "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"\"},"
             "{\"type\":\"text\",\"text\":\"Checking.\"},{\"type\":\"tool_use\",\"id\":\"toolu_01\",\"name\":"
             "\"get_weather\",\"input\":{\"city\":\"Paris\"}}]},"
             "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_01\",\"content\":"
             "[{\"type\":\"text\",\"text\":\"18C\"}]},{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_02\","
             "\"content\":\"down\",\"is_error\":true},{\"type\":\"text\",\"text\":\"Thanks\"}]}]}",
             false, &o);
    assert_non_null(o.tools_json);
    assert_int_equal(o.n_tools, 1);
    assert_string_equal(o.tool_names[0], "get_weather");
    assert_int_equal(o.tool_choice, REQUEST_TOOL_CHOICE_NAMED);
    assert_string_equal(o.tool_choice_name, "get_weather");
    assert_false(o.parallel_tool_calls);
    /* user, assistant (text + call), tool, tool, user */
    assert_int_equal(o.n_messages, 5);
    assert_int_equal(o.messages[1].role, REQUEST_ROLE_ASSISTANT);
    assert_string_equal(o.messages[1].content, "Checking.");
    json_t *calls = json_loads(o.messages[1].tool_calls_json, 0, NULL);
    assert_int_equal(json_array_size(calls), 1);
    json_t *c0 = json_array_get(calls, 0);
    assert_string_equal(json_string_value(json_object_get(c0, "id")), "toolu_01");
    json_t *fn = json_object_get(c0, "function");
    assert_string_equal(json_string_value(json_object_get(fn, "name")), "get_weather");
    json_t *args = json_object_get(fn, "arguments");
    json_t *city = json_is_object(args) ? json_object_get(args, "city")
                                        : json_object_get(json_loads(json_string_value(args), 0, NULL), "city");
    assert_string_equal(json_string_value(city), "Paris");
    json_decref(calls);
    assert_int_equal(o.messages[2].role, REQUEST_ROLE_TOOL);
    assert_string_equal(o.messages[2].tool_call_id, "toolu_01");
    assert_string_equal(o.messages[2].content, "18C");
    assert_int_equal(o.messages[3].role, REQUEST_ROLE_TOOL);
    assert_string_equal(o.messages[3].content, "Error: down");
    assert_int_equal(o.messages[4].role, REQUEST_ROLE_USER);
    assert_string_equal(o.messages[4].content, "Thanks");
    request_free(&o);

    const struct {
        const char *choice;
        request_tool_choice_t want;
    } choices[] = {
        {"{\"type\":\"auto\"}", REQUEST_TOOL_CHOICE_AUTO},
        {"{\"type\":\"any\"}", REQUEST_TOOL_CHOICE_REQUIRED},
        {"{\"type\":\"none\"}", REQUEST_TOOL_CHOICE_NONE},
    };
    for (size_t i = 0; i < 3; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
                 "\"tool_choice\":%s,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", choices[i].choice);
        parse_ok(body, false, &o);
        assert_int_equal(o.tool_choice, choices[i].want);
        assert_true(o.parallel_tool_calls);
        request_free(&o);
    }
}

static void test_thinking_and_count(void **st)
{
    request_t o;
    parse_ok("{\"model\":\"m\",\"max_tokens\":4096,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":2048},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", false, &o);
    assert_true(o.has_enable_thinking && o.enable_thinking);
    request_free(&o);
    parse_ok("{\"model\":\"m\",\"max_tokens\":10,\"thinking\":{\"type\":\"disabled\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", false, &o);
    assert_true(o.has_enable_thinking && !o.enable_thinking);
    request_free(&o);
    /* count_tokens: no max_tokens, the tokenizer op, tools kept (they are in the prompt) */
    parse_ok("{\"model\":\"m\",\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
             "\"messages\":[{\"role\":\"user\",\"content\":\"count me\"}]}", true, &o);
    assert_int_equal(o.op, REQUEST_OP_TOKENIZE);
    assert_non_null(o.tools_json);
    assert_null(o.grammar);
    assert_false(o.stream);
    request_free(&o);
}

/* What Claude Code (2.1.x) sends with any model name: a system turn inside
 * messages, adaptive thinking, a budget above max_tokens, output_config,
 * context_management, an Anthropic-defined tool, the billing header. */
static void test_claude_code_shapes(void **st)
{
    static const char *body =
        "{\"model\":\"local\",\"max_tokens\":300,\"stream\":true,"
        "\"system\":[{\"type\":\"text\",\"text\":\"x-anthropic-billing-header: cc_version=2.1.332.ea8; "
        "cc_entrypoint=sdk-cli;\"},{\"type\":\"text\",\"text\":\"You are an agent.\",\"cache_control\":"
        "{\"type\":\"ephemeral\"}}],"
        "\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"say hi\"}]},"
        "{\"role\":\"system\",\"content\":[{\"type\":\"text\",\"text\":\"# Environment\"}]}],"
        "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024,\"display\":\"omitted\"},"
        "\"context_management\":{\"edits\":[{\"type\":\"clear_thinking_20251015\",\"keep\":\"all\"}]},"
        "\"output_config\":{\"effort\":\"high\"},"
        "\"tools\":[{\"name\":\"Read\",\"input_schema\":{\"type\":\"object\"},\"defer_loading\":true},"
        "{\"type\":\"web_search_20250305\",\"name\":\"web_search\",\"max_uses\":3}]}";
    request_t o;
    parse_ok(body, false, &o);
    assert_int_equal(o.n_messages, 3);
    assert_int_equal(o.messages[0].role, REQUEST_ROLE_SYSTEM);
    assert_string_equal(o.messages[0].content, "You are an agent."); /* billing header dropped */
    assert_int_equal(o.messages[1].role, REQUEST_ROLE_USER);
    assert_int_equal(o.messages[2].role, REQUEST_ROLE_SYSTEM);
    assert_string_equal(o.messages[2].content, "# Environment");
    assert_true(o.has_enable_thinking && o.enable_thinking);
    assert_int_equal(o.max_tokens, 300);
    assert_int_equal(o.n_tools, 1); /* web_search left out */
    assert_string_equal(o.tool_names[0], "Read");
    assert_non_null(o.warning);
    assert_non_null(strstr(o.warning, "web_search_20250305"));
    request_free(&o);
    /* kept on request (--keep-volatile-blocks) */
    oai_error_t e;
    assert_int_equal(anthropic_parse_request((const uint8_t *)body, strlen(body), ANTHROPIC_PARSE_KEEP_VOLATILE,
                                             &o, &e), 0);
    assert_non_null(strstr(o.messages[0].content, "x-anthropic-billing-header"));
    request_free(&o);
    /* count_tokens takes the same body and renders the same prompt */
    parse_ok(body, true, &o);
    assert_int_equal(o.op, REQUEST_OP_TOKENIZE);
    assert_string_equal(o.messages[0].content, "You are an agent.");
    request_free(&o);
    /* adaptive thinking: on, no budget */
    parse_ok("{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"adaptive\",\"display\":\"omitted\"},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", false, &o);
    assert_true(o.has_enable_thinking && o.enable_thinking);
    request_free(&o);
    /* output_config.format: structured output */
    parse_ok("{\"model\":\"m\",\"max_tokens\":50,\"output_config\":{\"format\":{\"type\":\"json_schema\","
             "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}},"
             "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", false, &o);
    assert_non_null(o.grammar);
    request_free(&o);
}

static void test_refused(void **st)
{
    static const struct {
        const char *body;
        const char *says;
    } cases[] = {
        {"{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":0,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "max_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":5}", "messages"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[]}", "messages"},
        {"{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "model"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "role"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
         "\"source\":{\"type\":\"base64\",\"media_type\":\"image/png\",\"data\":\"AA==\"}}]}]}", "not a PNG"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"document\"}]}]}",
         "not supported"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"wat\"}]}]}",
         "unknown content block"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"tool_use\","
         "\"id\":\"a\",\"name\":\"f\",\"input\":{}}]}]}", "assistant"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"temperature\":1.5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "temperature"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "budget_tokens"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}],"
         "\"tool_choice\":{\"type\":\"tool\",\"name\":\"web_search\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "does not run"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"thinking\":{\"type\":\"sometimes\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "adaptive"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"output_config\":{\"format\":{\"type\":\"xml\"}},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "output_config.format"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tool_choice\":{\"type\":\"maybe\"},"
         "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "tool_choice"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
         "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "g"},
        {"{\"model\":\"m\",\"max_tokens\":5,\"mcp_servers\":[{}],\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}",
         "mcp_servers"},
        {"[1]", "object"},
        {"{\"model\":\"m\",\"model\":\"n\"}", "parse"},
        {"", "empty"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        request_t o;
        oai_error_t e;
        if (parse(cases[i].body, false, &o, &e) == 0)
            fail_msg("accepted: %s", cases[i].body);
        assert_int_equal(e.status, 400);
        if (!strstr(e.message, cases[i].says))
            fail_msg("error for %s does not say '%s': %s", cases[i].body, cases[i].says, e.message);
        request_free(&o); /* harmless after a refusal */
    }
}

static void test_error_shape(void **st)
{
    static const struct {
        int status;
        const char *type;
    } rows[] = {
        {400, "invalid_request_error"}, {401, "authentication_error"}, {403, "permission_error"},
        {404, "not_found_error"},       {413, "request_too_large"},    {429, "rate_limit_error"},
        {500, "api_error"},             {503, "overloaded_error"},     {504, "api_error"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        oai_error_t e;
        oai_error_set(&e, rows[i].status, NULL, "boom %d", rows[i].status);
        char *s = anthropic_error_json(&e);
        json_t *j = json_loads(s, 0, NULL);
        assert_non_null(j);
        assert_string_equal(json_string_value(json_object_get(j, "type")), "error");
        json_t *err = json_object_get(j, "error");
        assert_string_equal(json_string_value(json_object_get(err, "type")), rows[i].type);
        char want[32];
        snprintf(want, sizeof want, "boom %d", rows[i].status);
        assert_string_equal(json_string_value(json_object_get(err, "message")), want);
        json_decref(j);
        free(s);
    }
}

static char *tool_names[] = {"get_weather"};

static void test_message_json(void **st)
{
    const char *text = "<think>\nthe user wants weather\n</think>\n\nLet me look.\n<tool_call>\n{\"name\": "
                       "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    anthropic_meta_t m = {.id = "msg_1", .model = "qwen", .reasoning = true, .tool_names = tool_names, .n_tools = 1};
    oai_usage_t u = {.prompt_tokens = 100, .completion_tokens = 20, .cached_tokens = 64};
    char *s = anthropic_message_json(&m, text, strlen(text), PROTO_FINISH_STOP, 0, &u);
    json_t *j = json_loads(s, 0, NULL);
    free(s);
    assert_string_equal(json_string_value(json_object_get(j, "type")), "message");
    assert_string_equal(json_string_value(json_object_get(j, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "tool_use");
    assert_true(json_is_null(json_object_get(j, "stop_sequence")));
    json_t *c = json_object_get(j, "content");
    assert_int_equal(json_array_size(c), 3);
    json_t *b0 = json_array_get(c, 0), *b1 = json_array_get(c, 1), *b2 = json_array_get(c, 2);
    assert_string_equal(json_string_value(json_object_get(b0, "type")), "thinking");
    assert_string_equal(json_string_value(json_object_get(b0, "thinking")), "\nthe user wants weather\n");
    assert_string_equal(json_string_value(json_object_get(b1, "type")), "text");
    assert_string_equal(json_string_value(json_object_get(b1, "text")), "\n\nLet me look.");
    assert_string_equal(json_string_value(json_object_get(b2, "type")), "tool_use");
    assert_memory_equal(json_string_value(json_object_get(b2, "id")), "toolu_", 6);
    assert_string_equal(json_string_value(json_object_get(b2, "name")), "get_weather");
    assert_string_equal(json_string_value(json_object_get(json_object_get(b2, "input"), "city")), "Paris");
    json_t *us = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(us, "input_tokens")), 36);
    assert_int_equal(json_integer_value(json_object_get(us, "cache_read_input_tokens")), 64);
    assert_int_equal(json_integer_value(json_object_get(us, "output_tokens")), 20);
    json_decref(j);

    anthropic_meta_t plain = {.id = "msg_2", .model = "m"};
    /* a stop string ended it: stop_sequence names it */
    char *stops[] = {"END", "\n\n"};
    anthropic_meta_t stopped = {.id = "msg_s", .model = "m", .stop = stops, .n_stop = 2};
    s = anthropic_message_json(&stopped, "done", 4, PROTO_FINISH_STOP, 2, &u);
    j = json_loads(s, 0, NULL);
    free(s);
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "stop_sequence");
    assert_string_equal(json_string_value(json_object_get(j, "stop_sequence")), "\n\n");
    json_decref(j);
    s = anthropic_message_json(&stopped, "done", 4, PROTO_FINISH_STOP, 0, &u); /* EOS */
    j = json_loads(s, 0, NULL);
    free(s);
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "end_turn");
    assert_true(json_is_null(json_object_get(j, "stop_sequence")));
    json_decref(j);
    s = anthropic_message_json(&plain, "cut", 3, PROTO_FINISH_LENGTH, 0, &u);
    j = json_loads(s, 0, NULL);
    free(s);
    assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), "max_tokens");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(j, "content"), 0), "text")),
                        "cut");
    json_decref(j);
}

/* Splits an SSE body into (event name, data object) pairs. */
static size_t sse_events(const char *buf, size_t len, char names[][48], json_t **data, size_t max)
{
    size_t n = 0;
    const char *p = buf, *end = buf + len;
    while (p < end && n < max) {
        const char *sep = strstr(p, "\n\n");
        assert_non_null(sep);
        assert_memory_equal(p, "event: ", 7);
        const char *nl = strchr(p, '\n');
        snprintf(names[n], 48, "%.*s", (int)(nl - p - 7), p + 7);
        assert_memory_equal(nl + 1, "data: ", 6);
        data[n] = json_loadb(nl + 7, (size_t)(sep - nl - 7), 0, NULL);
        assert_non_null(data[n]);
        /* the event line and the data's type agree */
        assert_string_equal(json_string_value(json_object_get(data[n], "type")), names[n]);
        n++;
        p = sep + 2;
    }
    return n;
}

static void test_stream(void **st)
{
    /* the answer in small deltas, as a worker sends it */
    const char *text = "<think>hmm</think>Sure.<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}"
                       "</tool_call>";
    anthropic_meta_t m = {.id = "msg_3", .model = "qwen", .reasoning = true, .tool_names = tool_names, .n_tools = 1};
    anthropic_stream_t *s = anthropic_stream_new(&m);
    strbuf_t buf = {0};
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += 3) {
        proto_event_t ev = {.text = (char *)text + i, .text_len = (uint32_t)(n - i < 3 ? n - i : 3)};
        if (i + 3 >= n) {
            ev.finish = PROTO_FINISH_STOP;
            ev.has_usage = true;
            ev.usage = (proto_usage_t){.prompt_tokens = 50, .cached_tokens = 32, .completion_tokens = 30};
        }
        bool done = anthropic_stream_event(s, &ev, &buf);
        assert_int_equal(done, i + 3 >= n);
    }
    anthropic_stream_free(&s);
    char names[128][48];
    json_t *data[128];
    size_t k = sse_events(buf.s, buf.len, names, data, 128);
    free(buf.s);
    /* message_start, ping, thinking block, text block, tool_use block, message_delta, message_stop */
    assert_string_equal(names[0], "message_start");
    assert_string_equal(names[1], "ping");
    assert_string_equal(names[k - 2], "message_delta");
    assert_string_equal(names[k - 1], "message_stop");
    char thinking[64] = "", texts[64] = "", partial[128] = "";
    int open = -1, n_blocks = 0;
    const char *types[3] = {0};
    for (size_t i = 2; i < k - 2; i++) {
        json_t *d = data[i];
        int idx = (int)json_integer_value(json_object_get(d, "index"));
        if (strcmp(names[i], "content_block_start") == 0) {
            assert_int_equal(open, -1);
            assert_int_equal(idx, n_blocks);
            types[n_blocks] = json_string_value(json_object_get(json_object_get(d, "content_block"), "type"));
            open = idx;
            n_blocks++;
        } else if (strcmp(names[i], "content_block_stop") == 0) {
            assert_int_equal(idx, open);
            open = -1;
        } else {
            assert_string_equal(names[i], "content_block_delta");
            assert_int_equal(idx, open);
            json_t *dl = json_object_get(d, "delta");
            const char *dt = json_string_value(json_object_get(dl, "type"));
            if (strcmp(dt, "thinking_delta") == 0)
                strcat(thinking, json_string_value(json_object_get(dl, "thinking")));
            else if (strcmp(dt, "text_delta") == 0)
                strcat(texts, json_string_value(json_object_get(dl, "text")));
            else if (strcmp(dt, "input_json_delta") == 0)
                strcat(partial, json_string_value(json_object_get(dl, "partial_json")));
            else
                assert_string_equal(dt, "signature_delta");
        }
    }
    assert_int_equal(open, -1);
    assert_int_equal(n_blocks, 3);
    assert_string_equal(types[0], "thinking");
    assert_string_equal(types[1], "text");
    assert_string_equal(types[2], "tool_use");
    assert_string_equal(thinking, "hmm");
    assert_string_equal(texts, "Sure.");
    json_t *input = json_loads(partial, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(input, "city")), "Rome");
    json_decref(input);
    json_t *md = data[k - 2];
    assert_string_equal(json_string_value(json_object_get(json_object_get(md, "delta"), "stop_reason")), "tool_use");
    json_t *u = json_object_get(md, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "output_tokens")), 30);
    assert_int_equal(json_integer_value(json_object_get(u, "input_tokens")), 18);
    assert_int_equal(json_integer_value(json_object_get(u, "cache_read_input_tokens")), 32);
    for (size_t i = 0; i < k; i++)
        json_decref(data[i]);
}

static void test_stream_error(void **st)
{
    anthropic_meta_t m = {.id = "msg_4", .model = "m"};
    anthropic_stream_t *s = anthropic_stream_new(&m);
    strbuf_t buf = {0};
    proto_event_t ev = {.text = "Hel", .text_len = 3};
    assert_false(anthropic_stream_event(s, &ev, &buf));
    proto_event_t fail = {.text = "", .finish = PROTO_FINISH_ERROR};
    assert_true(anthropic_stream_event(s, &fail, &buf));
    anthropic_stream_free(&s);
    char names[16][48];
    json_t *data[16];
    size_t k = sse_events(buf.s, buf.len, names, data, 16);
    free(buf.s);
    assert_string_equal(names[k - 1], "error");
    assert_string_equal(json_string_value(json_object_get(json_object_get(data[k - 1], "error"), "type")), "api_error");
    for (size_t i = 0; i < k; i++)
        assert_string_not_equal(names[i], "message_stop");
    for (size_t i = 0; i < k; i++)
        json_decref(data[i]);
}

/* A tool_use block cut short (gateway/answer.h): the block is there in both
 * modes, and stop_reason is why generation ended (max_tokens, or
 * stop_sequence with the string), never tool_use. */
static void test_cut_call(void **st)
{
    (void)st;
    const char *text = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"days\":[1,2";
    char *stops[] = {"]"};
    const struct { proto_finish_t f; uint32_t stop; const char *reason, *seq; } CASES[] = {
        {PROTO_FINISH_LENGTH, 0, "max_tokens", NULL},
        {PROTO_FINISH_STOP, 1, "stop_sequence", "]"},
    };
    oai_usage_t u = {.prompt_tokens = 10, .completion_tokens = 20};
    for (size_t k = 0; k < 2; k++) {
        anthropic_meta_t m = {.id = "msg_c", .model = "qwen", .tool_names = tool_names, .n_tools = 1,
                              .stop = stops, .n_stop = 1};
        char *s = anthropic_message_json(&m, text, strlen(text), CASES[k].f, CASES[k].stop, &u);
        json_t *j = json_loads(s, 0, NULL);
        free(s);
        assert_string_equal(json_string_value(json_object_get(j, "stop_reason")), CASES[k].reason);
        json_t *b = json_array_get(json_object_get(j, "content"), 0);
        assert_string_equal(json_string_value(json_object_get(b, "type")), "tool_use");
        assert_string_equal(json_string_value(json_object_get(b, "name")), "get_weather");
        json_decref(j);

        anthropic_stream_t *sm = anthropic_stream_new(&m);
        strbuf_t buf = {0};
        proto_event_t e1 = {.text = (char *)text, .text_len = 20};
        proto_event_t e2 = {.text = (char *)text + 20, .text_len = (uint32_t)(strlen(text) - 20),
                            .finish = CASES[k].f, .stop = CASES[k].stop, .has_usage = true};
        assert_false(anthropic_stream_event(sm, &e1, &buf));
        assert_true(anthropic_stream_event(sm, &e2, &buf));
        anthropic_stream_free(&sm);
        char names[64][48];
        json_t *data[64];
        size_t n = sse_events(buf.s, buf.len, names, data, 64);
        free(buf.s);
        bool tool_block = false;
        for (size_t i = 0; i < n; i++) {
            json_t *cb = json_object_get(data[i], "content_block");
            if (strcmp(names[i], "content_block_start") == 0 &&
                strcmp(json_string_value(json_object_get(cb, "type")), "tool_use") == 0)
                tool_block = true;
        }
        assert_true(tool_block);
        assert_string_equal(names[n - 2], "message_delta");
        json_t *d = json_object_get(data[n - 2], "delta");
        assert_string_equal(json_string_value(json_object_get(d, "stop_reason")), CASES[k].reason);
        if (CASES[k].seq)
            assert_string_equal(json_string_value(json_object_get(d, "stop_sequence")), CASES[k].seq);
        else
            assert_true(json_is_null(json_object_get(d, "stop_sequence")));
        for (size_t i = 0; i < n; i++)
            json_decref(data[i]);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_fields), cmocka_unit_test(test_tools_round_trip),
        cmocka_unit_test(test_thinking_and_count), cmocka_unit_test(test_claude_code_shapes),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_error_shape), cmocka_unit_test(test_message_json),
        cmocka_unit_test(test_stream), cmocka_unit_test(test_stream_error), cmocka_unit_test(test_cut_call),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
