/* Unit tests for gateway/responses: Responses bodies → the internal request
 * (input forms, items with calls and outputs, previous_response_id through a
 * loader, tools, text.format, reasoning), refused bodies as a table, the
 * response object (completed / incomplete, usage, storing into a real
 * in-memory resp_store whose context continues the conversation), and the
 * typed event stream (order, sequence numbers, item/content indexes). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gateway/responses.h"

static int parse(const char *body, responses_load_fn load, void *ctx, responses_request_t *r, oai_error_t *e)
{
    return responses_parse_request((const uint8_t *)body, strlen(body), load, ctx, r, e);
}

static void parse_ok(const char *body, responses_load_fn load, void *ctx, responses_request_t *r)
{
    oai_error_t e;
    if (parse(body, load, ctx, r, &e) != 0)
        fail_msg("refused (%d): %s\n%s", e.status, e.message, body);
}

static void test_string_input(void **st)
{
    responses_request_t r;
    parse_ok("{\"model\":\"m\",\"input\":\"Hi\",\"instructions\":\"Be brief.\",\"max_output_tokens\":20,"
             "\"temperature\":0.2,\"top_p\":0.5,\"seed\":9,\"metadata\":{\"k\":\"v\"},\"user\":\"u\"}",
             NULL, NULL, &r);
    assert_int_equal(r.chat.n_messages, 2);
    assert_int_equal(r.chat.messages[0].role, REQUEST_ROLE_SYSTEM);
    assert_string_equal(r.chat.messages[0].content, "Be brief.");
    assert_int_equal(r.chat.messages[1].role, REQUEST_ROLE_USER);
    assert_string_equal(r.chat.messages[1].content, "Hi");
    assert_int_equal(r.chat.max_tokens, 20);
    assert_true(r.chat.temperature == 0.2 && r.chat.top_p == 0.5);
    assert_true(r.chat.has_seed && r.chat.seed == 9);
    assert_false(r.chat.has_enable_thinking);
    assert_true(r.store);
    /* input items: one user message with an id; context = input (no previous) */
    assert_int_equal(json_array_size(r.input), 1);
    json_t *it = json_array_get(r.input, 0);
    assert_string_equal(json_string_value(json_object_get(it, "type")), "message");
    assert_memory_equal(json_string_value(json_object_get(it, "id")), "msg_", 4);
    assert_true(json_equal(r.input, r.context));
    /* the echo */
    assert_string_equal(json_string_value(json_object_get(r.echo, "instructions")), "Be brief.");
    assert_string_equal(json_string_value(json_object_get(json_object_get(r.echo, "metadata"), "k")), "v");
    assert_int_equal(json_integer_value(json_object_get(r.echo, "max_output_tokens")), 20);
    assert_string_equal(json_string_value(json_object_get(r.echo, "tool_choice")), "auto");
    responses_request_free(&r);
}

static void test_items_and_tools(void **st)
{
    responses_request_t r;
    parse_ok("{\"model\":\"m\",\"store\":false,\"reasoning\":{\"effort\":\"minimal\"},"
             "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
             "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"],\"additionalProperties\":false},"
             "\"strict\":true}],\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"},"
             "\"parallel_tool_calls\":false,"
             "\"input\":[{\"role\":\"developer\",\"content\":\"Use tools.\"},"
             "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"Weather?\"}]},"
             "{\"type\":\"function_call\",\"call_id\":\"call_1\",\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Oslo\\\"}\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"-3C\"},"
             "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]}]}",
             NULL, NULL, &r);
    assert_false(r.store);
    assert_true(r.chat.has_enable_thinking && !r.chat.enable_thinking);
    assert_int_equal(r.chat.tool_choice, REQUEST_TOOL_CHOICE_NAMED);
    assert_false(r.chat.parallel_tool_calls);
    assert_int_equal(r.chat.n_tools, 1);
    /* system, user, assistant(call), tool */
    assert_int_equal(r.chat.n_messages, 4);
    assert_int_equal(r.chat.messages[0].role, REQUEST_ROLE_SYSTEM);
    assert_int_equal(r.chat.messages[2].role, REQUEST_ROLE_ASSISTANT);
    assert_non_null(strstr(r.chat.messages[2].tool_calls_json, "call_1"));
    assert_non_null(strstr(r.chat.messages[2].tool_calls_json, "Oslo"));
    assert_int_equal(r.chat.messages[3].role, REQUEST_ROLE_TOOL);
    assert_string_equal(r.chat.messages[3].tool_call_id, "call_1");
    assert_string_equal(r.chat.messages[3].content, "-3C");
    assert_int_equal(json_array_size(r.input), 5);
    json_t *tools = json_object_get(r.echo, "tools");
    assert_string_equal(json_string_value(json_object_get(json_array_get(tools, 0), "name")), "get_weather");
    responses_request_free(&r);

    /* text.format json_schema → a grammar; json_object too */
    parse_ok("{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"p\","
             "\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"],"
             "\"additionalProperties\":false},\"strict\":true}}}", NULL, NULL, &r);
    assert_non_null(r.chat.grammar);
    assert_string_equal(json_string_value(json_object_get(json_object_get(json_object_get(r.echo, "text"), "format"),
                                                          "type")), "json_schema");
    responses_request_free(&r);
}

/* A loader that knows one id. */
static int load_one(void *ctx, const char *id, json_t **context)
{
    if (strcmp(id, "resp_prev") != 0)
        return 1;
    *context = json_loads((const char *)ctx, 0, NULL);
    return 0;
}

static void test_previous(void **st)
{
    const char *ctx = "[{\"type\":\"message\",\"id\":\"msg_a\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\","
                      "\"text\":\"My name is Ada.\"}]},{\"type\":\"message\",\"id\":\"msg_b\",\"role\":\"assistant\","
                      "\"content\":[{\"type\":\"output_text\",\"text\":\"Hello Ada.\"}]}]";
    responses_request_t r;
    parse_ok("{\"model\":\"m\",\"previous_response_id\":\"resp_prev\",\"input\":\"Who am I?\"}", load_one,
             (void *)ctx, &r);
    assert_int_equal(r.chat.n_messages, 3);
    assert_string_equal(r.chat.messages[0].content, "My name is Ada.");
    assert_int_equal(r.chat.messages[1].role, REQUEST_ROLE_ASSISTANT);
    assert_string_equal(r.chat.messages[1].content, "Hello Ada.");
    assert_string_equal(r.chat.messages[2].content, "Who am I?");
    assert_int_equal(json_array_size(r.input), 1);
    assert_int_equal(json_array_size(r.context), 3);
    assert_string_equal(json_string_value(json_object_get(r.echo, "previous_response_id")), "resp_prev");
    responses_request_free(&r);
    oai_error_t e;
    assert_int_equal(parse("{\"model\":\"m\",\"previous_response_id\":\"resp_other\",\"input\":\"x\"}", load_one,
                           (void *)ctx, &r, &e), -1);
    assert_int_equal(e.status, 404);
    assert_non_null(strstr(e.message, "resp_other"));
}

static void test_refused(void **st)
{
    static const struct {
        const char *body;
        const char *says;
    } cases[] = {
        {"{\"model\":\"m\"}", "input"},
        {"{\"input\":\"x\"}", "model"},
        {"{\"model\":\"m\",\"input\":5}", "input"},
        {"{\"model\":\"m\",\"input\":[]}", "at least one"},
        {"{\"model\":\"m\",\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
         "data:image"},
        {"{\"model\":\"m\",\"input\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "role"},
        {"{\"model\":\"m\",\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", "not supported"},
        {"{\"model\":\"m\",\"input\":[{\"type\":\"function_call\",\"name\":\"f\"}]}", "call_id"},
        {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"teleport\"}]}", "function, custom or namespace"},
        {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}],\"tool_choice\":{\"type\":\"web_search\"}}",
         "hosted tool"},
        {"{\"model\":\"m\",\"input\":\"x\",\"tool_choice\":{\"type\":\"file_search\"}}", "tool_choice"},
        {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"namespace\",\"name\":\"n\",\"tools\":[{\"type\":"
         "\"web_search\"}]}]}", "namespace holds"},
        {"{\"model\":\"m\",\"input\":\"x\",\"tools\":[{\"type\":\"custom\",\"name\":\"c\",\"format\":{\"type\":"
         "\"grammar\",\"syntax\":\"yacc\",\"definition\":\"x\"}}]}", "syntax"},
        {"{\"model\":\"m\",\"input\":\"x\",\"prompt_cache_key\":7}", "prompt_cache_key"},
        {"{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", "text.format.type"},
        {"{\"model\":\"m\",\"input\":\"x\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":{}}}}", "name"},
        {"{\"model\":\"m\",\"input\":\"x\",\"max_output_tokens\":0}", "max_output_tokens"},
        {"{\"model\":\"m\",\"input\":\"x\",\"temperature\":3}", "temperature"},
        {"{\"model\":\"m\",\"input\":\"x\",\"reasoning\":{\"effort\":\"extreme\"}}", "effort"},
        {"{\"model\":\"m\",\"input\":\"x\",\"background\":true}", "background"},
        {"{\"model\":\"m\",\"input\":\"x\",\"truncation\":\"auto\"}", "truncation"},
        {"{\"model\":\"m\",\"input\":\"x\",\"store\":\"yes\"}", "store"},
        {"{\"model\":\"m\",\"input\":\"x\",\"conversation\":\"conv_1\"}", "conversation"},
        {"{\"model\":\"m\",\"input\":\"x\",\"metadata\":{\"k\":1}}", "metadata"},
        {"{\"model\":\"m\",\"input\":\"x\",\"previous_response_id\":\"resp_x\"}", "not found"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        responses_request_t r;
        oai_error_t e;
        if (parse(cases[i].body, NULL, NULL, &r, &e) == 0)
            fail_msg("accepted: %s", cases[i].body);
        if (!strstr(e.message, cases[i].says))
            fail_msg("error for %s does not say '%s': %s", cases[i].body, cases[i].says, e.message);
        responses_request_free(&r);
    }
}

static char *names[] = {"get_weather"};

/* What Codex CLI (0.171) sends by default, and a custom tool's round trip:
 * namespaced functions flattened (a clash renamed NS__NAME), a hosted tool
 * left out with a warning, prompt_cache_key as the affinity key, the custom
 * tool's call answered as a custom_tool_call with the decoded input, and
 * that call and its output accepted in the next input. */
static void test_codex_shapes(void **st)
{
    const int64_t now = (int64_t)time(NULL);
    responses_request_t r;
    parse_ok("{\"model\":\"local\",\"stream\":false,\"store\":false,\"tool_choice\":\"auto\","
             "\"include\":[\"reasoning.encrypted_content\"],\"prompt_cache_key\":\"sess-1\","
             "\"client_metadata\":{\"x-codex-window-id\":\"w\"},\"reasoning\":{\"summary\":\"auto\"},"
             "\"input\":[{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\","
             "\"text\":\"You are Codex.\"}]},{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":"
             "\"input_text\",\"text\":\"say hi\"}]}],"
             "\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\",\"strict\":false,\"parameters\":"
             "{\"type\":\"object\"}},{\"type\":\"namespace\",\"name\":\"multi_agent_v1\",\"description\":\"d\","
             "\"tools\":[{\"type\":\"function\",\"name\":\"spawn_agent\",\"parameters\":{\"type\":\"object\"}},"
             "{\"type\":\"function\",\"name\":\"exec_command\",\"parameters\":{\"type\":\"object\"}}]},"
             "{\"type\":\"web_search\",\"external_web_access\":false},"
             "{\"type\":\"custom\",\"name\":\"apply_patch\",\"description\":\"Edit files.\",\"format\":{\"type\":"
             "\"text\"}}]}",
             NULL, NULL, &r);
    assert_int_equal(r.chat.n_tools, 4);
    assert_string_equal(r.chat.tool_names[0], "exec_command");
    assert_string_equal(r.chat.tool_names[1], "spawn_agent");
    assert_string_equal(r.chat.tool_names[2], "multi_agent_v1__exec_command");
    assert_string_equal(r.chat.tool_names[3], "apply_patch");
    assert_non_null(r.chat.tool_custom);
    assert_true(r.chat.tool_custom[3] && !r.chat.tool_custom[0]);
    assert_non_null(strstr(r.chat.warning, "web_search"));
    assert_string_equal(r.chat.affinity_key, "sess-1");
    /* the custom tool is shown as a function with one string argument */
    assert_non_null(strstr(r.chat.tools_json, "\"input\""));
    /* answers: a namespaced call comes back with its namespace and own name,
     * a custom call as custom_tool_call with the decoded input */
    char *tn[] = {"exec_command", "spawn_agent", "multi_agent_v1__exec_command", "apply_patch"};
    responses_meta_t m = {.id = "resp_c", .model = "local", .created = now, .tool_names = tn, .n_tools = 4};
    const char *text = "<tool_call>\n{\"name\": \"multi_agent_v1__exec_command\", \"arguments\": {}}\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"apply_patch\", \"arguments\": {\"input\": \"*** Begin Patch\\n"
                       "\\u00e9\\\"q\\\"\"}}\n</tool_call>";
    oai_usage_t u = {.prompt_tokens = 10, .completion_tokens = 5};
    char *s = responses_complete_json(&m, &r, text, strlen(text), PROTO_FINISH_STOP, &u);
    json_t *j = json_loads(s, 0, NULL);
    json_t *out = json_object_get(j, "output");
    assert_int_equal(json_array_size(out), 2);
    json_t *c0 = json_array_get(out, 0), *c1 = json_array_get(out, 1);
    assert_string_equal(json_string_value(json_object_get(c0, "type")), "function_call");
    assert_string_equal(json_string_value(json_object_get(c0, "name")), "exec_command");
    assert_string_equal(json_string_value(json_object_get(c0, "namespace")), "multi_agent_v1");
    assert_string_equal(json_string_value(json_object_get(c1, "type")), "custom_tool_call");
    assert_string_equal(json_string_value(json_object_get(c1, "name")), "apply_patch");
    assert_string_equal(json_string_value(json_object_get(c1, "input")), "*** Begin Patch\n\xc3\xa9\"q\"");
    json_decref(j);
    free(s);
    responses_request_free(&r);
    /* the next turn: the custom call and its output, and a namespaced call */
    parse_ok("{\"model\":\"local\",\"input\":[{\"type\":\"message\",\"role\":\"user\",\"content\":\"go\"},"
             "{\"type\":\"custom_tool_call\",\"call_id\":\"call_1\",\"name\":\"apply_patch\",\"input\":\"P\\n\"},"
             "{\"type\":\"custom_tool_call_output\",\"call_id\":\"call_1\",\"output\":\"Done!\"},"
             "{\"type\":\"function_call\",\"call_id\":\"call_2\",\"namespace\":\"multi_agent_v1\",\"name\":"
             "\"spawn_agent\",\"arguments\":\"{}\"},"
             "{\"type\":\"function_call_output\",\"call_id\":\"call_2\",\"output\":\"ok\"}],"
             "\"tools\":[{\"type\":\"custom\",\"name\":\"apply_patch\"},{\"type\":\"namespace\",\"name\":"
             "\"multi_agent_v1\",\"tools\":[{\"type\":\"function\",\"name\":\"spawn_agent\"}]}]}",
             NULL, NULL, &r);
    assert_int_equal(r.chat.n_messages, 5);
    assert_int_equal(r.chat.messages[1].role, REQUEST_ROLE_ASSISTANT);
    assert_non_null(strstr(r.chat.messages[1].tool_calls_json, "\"input\":\"P\\n\""));
    assert_int_equal(r.chat.messages[2].role, REQUEST_ROLE_TOOL);
    assert_string_equal(r.chat.messages[2].content, "Done!");
    assert_non_null(strstr(r.chat.messages[3].tool_calls_json, "\"name\":\"spawn_agent\""));
    responses_request_free(&r);
    /* tool_choice names a namespaced tool by namespace + name; without a
     * namespace, the top-level tool of that name */
    static const char *two = "\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\"},{\"type\":\"namespace\","
                             "\"name\":\"ns\",\"tools\":[{\"type\":\"function\",\"name\":\"exec_command\"}]}]";
    char b[512];
    snprintf(b, sizeof b, "{\"model\":\"m\",\"input\":\"x\",%s,\"tool_choice\":{\"type\":\"function\",\"name\":"
             "\"exec_command\",\"namespace\":\"ns\"}}", two);
    parse_ok(b, NULL, NULL, &r);
    assert_string_equal(r.chat.tool_choice_name, "ns__exec_command");
    responses_request_free(&r);
    snprintf(b, sizeof b, "{\"model\":\"m\",\"input\":\"x\",%s,\"tool_choice\":{\"type\":\"function\",\"name\":"
             "\"exec_command\"}}", two);
    parse_ok(b, NULL, NULL, &r);
    assert_string_equal(r.chat.tool_choice_name, "exec_command");
    responses_request_free(&r);
}

static void test_complete_and_store(void **st)
{
    const int64_t now = (int64_t)time(NULL); /* the routes check age against the wall clock */
    resp_store_t *store = NULL;
    assert_int_equal(resp_store_open(":memory:", NULL, &store, NULL, 0), 0);
    responses_request_t r;
    parse_ok("{\"model\":\"m\",\"input\":\"Weather in Rome?\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\","
             "\"parameters\":{\"type\":\"object\"}}]}", NULL, NULL, &r);
    /* Responses tools are strict unless they say otherwise */
    assert_non_null(strstr(r.chat.tools_json, "\"strict\":true"));
    responses_meta_t m = {.id = "resp_1", .model = "m", .created = now, .tool_names = names, .n_tools = 1,
                          .store = store, .owner = "key-a"};
    const char *text = "<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Rome\"}}</tool_call>";
    oai_usage_t u = {.prompt_tokens = 40, .completion_tokens = 12, .cached_tokens = 32};
    char *s = responses_complete_json(&m, &r, text, strlen(text), PROTO_FINISH_STOP, &u);
    json_t *j = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "object")), "response");
    assert_string_equal(json_string_value(json_object_get(j, "status")), "completed");
    json_t *out = json_object_get(j, "output");
    assert_int_equal(json_array_size(out), 1);
    json_t *fc = json_array_get(out, 0);
    assert_string_equal(json_string_value(json_object_get(fc, "type")), "function_call");
    assert_memory_equal(json_string_value(json_object_get(fc, "call_id")), "call_", 5);
    assert_string_equal(json_string_value(json_object_get(fc, "arguments")), "{\"city\":\"Rome\"}");
    json_t *us = json_object_get(j, "usage");
    assert_int_equal(json_integer_value(json_object_get(us, "input_tokens")), 40);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(us, "input_tokens_details"), "cached_tokens")),
                     32);
    assert_int_equal(json_integer_value(json_object_get(us, "total_tokens")), 52);
    /* stored under its owner, with the conversation through the call */
    resp_store_row_t row;
    assert_int_equal(resp_store_get(store, "resp_1", "key-a", now, &row), 0);
    json_t *stored = json_loads(row.response, 0, NULL);
    assert_true(json_equal(stored, j));
    json_t *ctx = NULL;
    assert_int_equal(resp_store_context(store, "resp_1", "key-a", now, &ctx), 0);
    assert_int_equal(json_array_size(ctx), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(ctx, 1), "type")), "function_call");
    int status = 0;
    char *items = responses_stored(store, "key-a", "resp_1", RESPONSES_INPUT_ITEMS, false, &status);
    assert_int_equal(status, 200);
    json_t *li = json_loads(items, 0, NULL);
    assert_int_equal(json_array_size(json_object_get(li, "data")), 1);
    assert_false(json_is_true(json_object_get(li, "has_more")));
    free(items);
    json_decref(li);
    json_decref(stored);
    json_decref(ctx);
    resp_store_row_free(&row);
    assert_int_equal(resp_store_get(store, "resp_1", "key-b", now, &row), 1);
    /* the routes: GET gives the response as answered; another owner 404; DELETE once */
    char *got = responses_stored(store, "key-a", "resp_1", RESPONSES_GET, false, &status);
    assert_int_equal(status, 200);
    assert_string_equal(got, s);
    free(got);
    got = responses_stored(store, "key-b", "resp_1", RESPONSES_GET, false, &status);
    assert_int_equal(status, 404);
    assert_non_null(strstr(got, "not_found_error"));
    free(got);
    free(responses_stored(store, "key-b", "resp_1", RESPONSES_DELETE, false, &status));
    assert_int_equal(status, 404);
    got = responses_stored(store, "key-a", "resp_1", RESPONSES_DELETE, false, &status);
    assert_int_equal(status, 200);
    assert_non_null(strstr(got, "\"deleted\":true"));
    free(got);
    free(responses_stored(store, "key-a", "resp_1", RESPONSES_GET, false, &status));
    assert_int_equal(status, 404);
    free(responses_stored(NULL, "key-a", "resp_1", RESPONSES_GET, false, &status));
    assert_int_equal(status, 503);
    json_decref(j);
    free(s);
    responses_request_free(&r);

    /* max_output_tokens reached: incomplete, and store false keeps nothing */
    parse_ok("{\"model\":\"m\",\"input\":\"x\",\"store\":false}", NULL, NULL, &r);
    responses_meta_t m2 = {.id = "resp_2", .model = "m", .created = now, .store = store, .owner = "key-a"};
    s = responses_complete_json(&m2, &r, "partial", 7, PROTO_FINISH_LENGTH, &u);
    j = json_loads(s, 0, NULL);
    assert_string_equal(json_string_value(json_object_get(j, "status")), "incomplete");
    assert_string_equal(json_string_value(json_object_get(json_object_get(j, "incomplete_details"), "reason")),
                        "max_output_tokens");
    json_t *msg = json_array_get(json_object_get(j, "output"), 0);
    assert_string_equal(json_string_value(json_object_get(msg, "status")), "incomplete");
    assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(msg, "content"), 0), "text")),
                        "partial");
    assert_int_equal(resp_store_get(store, "resp_2", "key-a", now, &row), 1);
    json_decref(j);
    free(s);
    responses_request_free(&r);
    resp_store_close(&store);
}

static void test_stream(void **st)
{
    responses_request_t r;
    parse_ok("{\"model\":\"m\",\"input\":\"x\",\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":"
             "\"get_weather\",\"parameters\":{\"type\":\"object\"}}]}", NULL, NULL, &r);
    responses_meta_t m = {.id = "resp_s", .model = "m", .created = 1, .reasoning = true, .tool_names = names,
                          .n_tools = 1};
    responses_stream_t *s = responses_stream_new(&m, &r);
    const char *text = "<think>ok</think>Here.<tool_call>{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Oslo\"}}"
                       "</tool_call>";
    strbuf_t buf = {0};
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i += 4) {
        proto_event_t ev = {.text = (char *)text + i, .text_len = (uint32_t)(n - i < 4 ? n - i : 4)};
        if (i + 4 >= n) {
            ev.finish = PROTO_FINISH_STOP;
            ev.has_usage = true;
            ev.usage = (proto_usage_t){.prompt_tokens = 10, .completion_tokens = 30};
        }
        assert_int_equal(responses_stream_event(s, &ev, &buf), i + 4 >= n);
    }
    responses_stream_free(&s);
    responses_request_free(&r);
    /* parse the SSE: event name = data.type, sequence numbers 0, 1, 2, ... */
    const char *p = buf.s, *end = buf.s + buf.len;
    int64_t seq = 0;
    char order[2048] = "";
    char text_out[64] = "", reasoning[64] = "", args[128] = "";
    json_t *final = NULL;
    while (p < end) {
        const char *sep = strstr(p, "\n\n");
        assert_non_null(sep);
        const char *nl = strchr(p, '\n');
        assert_memory_equal(p, "event: ", 7);
        json_t *d = json_loadb(nl + 7, (size_t)(sep - nl - 7), 0, NULL);
        assert_non_null(d);
        const char *ty = json_string_value(json_object_get(d, "type"));
        assert_int_equal(strncmp(p + 7, ty, strlen(ty)), 0);
        assert_int_equal(json_integer_value(json_object_get(d, "sequence_number")), seq++);
        /* the order of event types, a run of deltas written once */
        char word[64];
        snprintf(word, sizeof word, "%s ", ty + 9); /* without "response." */
        size_t ol = strlen(order), wl = strlen(word);
        if (!(strstr(ty, ".delta") && ol >= wl && strcmp(order + ol - wl, word) == 0))
            strcat(order, word);
        if (strcmp(ty, "response.output_text.delta") == 0)
            strcat(text_out, json_string_value(json_object_get(d, "delta")));
        if (strcmp(ty, "response.reasoning_text.delta") == 0)
            strcat(reasoning, json_string_value(json_object_get(d, "delta")));
        if (strcmp(ty, "response.function_call_arguments.delta") == 0)
            strcat(args, json_string_value(json_object_get(d, "delta")));
        if (strcmp(ty, "response.completed") == 0)
            final = json_incref(json_object_get(d, "response"));
        json_decref(d);
        p = sep + 2;
    }
    free(buf.s);
    assert_string_equal(order, "created in_progress output_item.added content_part.added reasoning_text.delta "
                               "reasoning_text.done content_part.done output_item.done output_item.added "
                               "content_part.added output_text.delta output_text.done content_part.done "
                               "output_item.done output_item.added function_call_arguments.delta "
                               "function_call_arguments.done output_item.done completed ");
    assert_string_equal(reasoning, "ok");
    assert_string_equal(text_out, "Here.");
    assert_string_equal(args, "{\"city\":\"Oslo\"}");
    assert_non_null(final);
    json_t *o = json_object_get(final, "output");
    assert_int_equal(json_array_size(o), 3);
    assert_string_equal(json_string_value(json_object_get(json_array_get(o, 1), "status")), "completed");
    assert_string_equal(json_string_value(json_object_get(json_array_get(o, 2), "arguments")), "{\"city\":\"Oslo\"}");
    json_decref(final);
}

/* A failure after output began: the open item is closed, response.failed
 * carries the error, nothing is stored. */
static void test_stream_failed(void **st)
{
    resp_store_t *store = NULL;
    assert_int_equal(resp_store_open(":memory:", NULL, &store, NULL, 0), 0);
    responses_request_t r;
    parse_ok("{\"model\":\"m\",\"input\":\"x\",\"stream\":true}", NULL, NULL, &r);
    responses_meta_t m = {.id = "resp_f", .model = "m", .created = (int64_t)time(NULL), .store = store,
                          .owner = "k"};
    responses_stream_t *s = responses_stream_new(&m, &r);
    strbuf_t buf = {0};
    proto_event_t ev = {.text = "Hel", .text_len = 3};
    assert_false(responses_stream_event(s, &ev, &buf));
    proto_event_t fail = {.text = "", .finish = PROTO_FINISH_TIMEOUT, .err = PROTO_ERR_DEADLINE};
    assert_true(responses_stream_event(s, &fail, &buf));
    responses_stream_free(&s);
    /* the last event */
    const char *last = strstr(buf.s, "event: response.failed\n");
    assert_non_null(last);
    json_t *d = json_loads(strstr(last, "data: ") + 6, JSON_DISABLE_EOF_CHECK, NULL);
    json_t *resp = json_object_get(d, "response");
    assert_string_equal(json_string_value(json_object_get(resp, "status")), "failed");
    assert_string_equal(json_string_value(json_object_get(json_object_get(resp, "error"), "code")), "timeout");
    json_t *item = json_array_get(json_object_get(resp, "output"), 0);
    assert_string_equal(json_string_value(json_object_get(item, "status")), "incomplete");
    assert_non_null(strstr(buf.s, "event: response.output_item.done"));
    assert_null(strstr(buf.s, "response.completed"));
    json_decref(d);
    free(buf.s);
    resp_store_row_t row;
    assert_int_equal(resp_store_get(store, "resp_f", "k", m.created, &row), 1);
    responses_request_free(&r);
    resp_store_close(&store);
}

/* A loader over a real store (what the surface does). */
typedef struct {
    resp_store_t *store;
    const char *owner;
} store_loader_t;

static int load_stored(void *ctx, const char *id, json_t **context)
{
    store_loader_t *l = ctx;
    return resp_store_context(l->store, id, l->owner, (int64_t)time(NULL), context);
}

/* A 512-step previous_response_id chain through the real parse + complete
 * path: the stored bytes grow linearly (each step stores its own items and
 * a link), printed next to what storing the whole conversation at every
 * step (schema 1) would have cost; the last step still sees every turn.
 * Reasoning input items (never shown to the model) are kept as id-only
 * stubs, so a tenant cannot fill the store with them. */
static void test_chain_size(void **st)
{
    enum { STEPS = 512 };
    const int64_t now = (int64_t)time(NULL);
    resp_store_t *store = NULL;
    assert_int_equal(resp_store_open(":memory:", NULL, &store, NULL, 0), 0);
    store_loader_t l = {store, "key-a"};
    char prev[48] = "", id[48];
    int64_t old_bytes = 0, first_step = 0, last_bytes = 0, max_step = 0;
    const char *answer = "Sure. Here is a short answer of about forty tokens, the way a small model would write "
                         "one for a question like this, with a few more words to make it realistic enough.";
    for (int i = 0; i < STEPS; i++) {
        char body[512];
        if (i == 0)
            snprintf(body, sizeof body, "{\"model\":\"m\",\"input\":\"Question %d: tell me one more thing about "
                                        "the history of the place we talked about.\"}", i);
        else
            snprintf(body, sizeof body, "{\"model\":\"m\",\"previous_response_id\":\"%s\",\"input\":\"Question %d: "
                                        "tell me one more thing about the history of the place we talked about.\"}",
                     prev, i);
        responses_request_t r;
        parse_ok(body, load_stored, &l, &r);
        assert_int_equal(json_array_size(r.context), (size_t)(2 * i + 1));
        snprintf(id, sizeof id, "resp_%04d", i);
        responses_meta_t m = {.id = id, .model = "m", .created = now, .store = store, .owner = "key-a"};
        oai_usage_t u = {.prompt_tokens = 40, .completion_tokens = 42};
        char *out = responses_complete_json(&m, &r, answer, strlen(answer), PROTO_FINISH_STOP, &u);
        json_t *j = json_loads(out, 0, NULL);
        assert_true(json_is_true(json_object_get(j, "store")));
        assert_null(json_object_get(j, "warning"));
        /* schema 1 kept response + input + the whole conversation through the output */
        json_t *ctx = json_deep_copy(r.context);
        json_array_extend(ctx, json_object_get(j, "output"));
        char *c = json_dumps(ctx, JSON_COMPACT), *in = json_dumps(r.input, JSON_COMPACT);
        old_bytes += (int64_t)(strlen(out) + strlen(in) + strlen(c));
        free(c);
        free(in);
        json_decref(ctx);
        json_decref(j);
        free(out);
        responses_request_free(&r);
        int64_t n, bytes;
        assert_int_equal(resp_store_stats(store, &n, &bytes), 0);
        assert_int_equal(n, i + 1);
        if (i == 0)
            first_step = bytes;
        if (bytes - last_bytes > max_step)
            max_step = bytes - last_bytes;
        last_bytes = bytes;
        memcpy(prev, id, sizeof prev);
    }
    print_message("512-step chain: %lld bytes stored as deltas (%lld per step, at most %lld), %lld bytes as whole "
                  "conversations per step (schema 1)\n", (long long)last_bytes, (long long)(last_bytes / STEPS),
                  (long long)max_step, (long long)old_bytes);
    assert_true(max_step <= 2 * first_step);              /* every step costs about the same */
    assert_true(last_bytes <= (int64_t)STEPS * 2 * first_step); /* linear */
    assert_true(old_bytes > 50 * last_bytes);
    /* the whole conversation is still there */
    json_t *ctx = NULL;
    assert_int_equal(resp_store_context(store, prev, "key-a", now, &ctx), 0);
    assert_int_equal(json_array_size(ctx), 2 * STEPS);
    json_decref(ctx);
    /* reasoning input items: an id-only stub, whatever they carried */
    char *big = malloc(1 << 20);
    memset(big, 'r', (1 << 20) - 1);
    big[(1 << 20) - 1] = 0;
    size_t bl = strlen(big) + 256;
    char *body = malloc(bl);
    snprintf(body, bl, "{\"model\":\"m\",\"input\":[{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[{\"type\":"
                       "\"summary_text\",\"text\":\"%s\"}]},{\"role\":\"user\",\"content\":\"hi\"}]}", big);
    responses_request_t r;
    parse_ok(body, NULL, NULL, &r);
    char *in = json_dumps(r.input, JSON_COMPACT);
    assert_true(strlen(in) < 300);
    assert_non_null(strstr(in, "\"rs_1\""));
    free(in);
    responses_request_free(&r);
    free(body);
    free(big);
    resp_store_close(&store);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_string_input), cmocka_unit_test(test_items_and_tools),
        cmocka_unit_test(test_previous),     cmocka_unit_test(test_refused),
        cmocka_unit_test(test_complete_and_store), cmocka_unit_test(test_stream),
        cmocka_unit_test(test_chain_size),
        cmocka_unit_test(test_stream_failed), cmocka_unit_test(test_codex_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
