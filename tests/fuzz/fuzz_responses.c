/* fuzz_responses.c — libFuzzer target for the Responses API parser
 * (gateway/responses.h), with a real in-memory resp_store behind it.
 *
 * Input layout (seeds in tests/fuzz/corpus/responses/):
 *   byte 0     bit 0: reasoning split on in the renderers; bit 1: the
 *              answer ends by length (incomplete)
 *   bytes 1..  the HTTP request body; previous_response_id "resp_prev"
 *              resolves to a stored two-message conversation
 *
 * Beyond ASan/UBSan it checks: a refusal is -1 with status 400 (404 only for
 * an unknown previous_response_id), nothing to free; an accepted request has
 * a model, ≥ 1 message, input and context arrays (context ⊇ input); the
 * response object and the event stream built from the last message's text
 * are valid JSON, with sequence numbers 0, 1, 2, … and a final
 * response.completed / response.incomplete; what was stored reads back. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "gateway/responses.h"

static resp_store_t *store;

static int load(void *ctx, const char *id, json_t **context)
{
    if (strcmp(id, "resp_prev") != 0)
        return 1;
    *context = json_loads("[{\"type\":\"message\",\"id\":\"msg_1\",\"role\":\"user\",\"content\":[{\"type\":"
                          "\"input_text\",\"text\":\"hi\"}]},{\"type\":\"message\",\"id\":\"msg_2\",\"role\":"
                          "\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"hello\"}]}]",
                          0, NULL);
    return 0;
}

static json_t *must_be_json(char *s)
{
    json_t *j = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!j)
        __builtin_trap();
    free(s);
    return j;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (!store && resp_store_open(":memory:", NULL, &store, NULL, 0) != 0)
        __builtin_trap();
    responses_request_t r;
    oai_error_t err;
    int rc = responses_parse_request(data + 1, size - 1, load, NULL, &r, &err);
    if (rc != 0) {
        if (rc != -1 || (err.status != 400 && err.status != 404) || r.chat.model || r.input || r.echo)
            __builtin_trap();
        json_decref(must_be_json(oai_error_json(&err)));
        return 0;
    }
    if (!r.chat.model || r.chat.n_messages < 1 || !json_is_array(r.input) || !json_is_array(r.context) ||
        json_array_size(r.context) < json_array_size(r.input) || !json_is_object(r.echo))
        __builtin_trap();
    const request_message_t *last = &r.chat.messages[r.chat.n_messages - 1];
    static unsigned long n_ids;
    char id[48];
    snprintf(id, sizeof id, "resp_f%lu", n_ids++);
    /* made now: the stored-response routes check age against the wall clock */
    const int64_t now = (int64_t)time(NULL);
    responses_meta_t m = {.id = id, .model = r.chat.model, .created = now, .reasoning = data[0] & 1,
                          .tool_names = r.chat.tool_names, .n_tools = r.chat.n_tools, .store = store,
                          .owner = "fuzz"};
    proto_finish_t fin = (data[0] & 2) ? PROTO_FINISH_LENGTH : PROTO_FINISH_STOP;
    oai_usage_t u = {10, 5, 3};
    json_decref(must_be_json(responses_complete_json(&m, &r, last->content, last->content_len, fin, &u)));
    if (r.store) {
        resp_store_row_t row;
        if (resp_store_get(store, id, "fuzz", now, &row) != 0)
            __builtin_trap();
        resp_store_row_free(&row);
        int status;
        json_decref(must_be_json(responses_stored(store, "fuzz", id, RESPONSES_INPUT_ITEMS, data[0] & 4, &status)));
        if (status != 200)
            __builtin_trap();
        json_decref(must_be_json(responses_stored(store, "fuzz", id, RESPONSES_DELETE, false, &status)));
        if (status != 200)
            __builtin_trap();
    }
    m.store = NULL;
    responses_stream_t *st = responses_stream_new(&m, &r);
    strbuf_t buf = {0};
    bool done = false;
    for (size_t i = 0; !done; i += 7) {
        size_t n = last->content_len > i ? last->content_len - i : 0;
        proto_event_t ev = {.text = last->content + (n ? i : 0), .text_len = (uint32_t)(n < 7 ? n : 7)};
        if (n <= 7)
            ev.finish = fin;
        done = responses_stream_event(st, &ev, &buf);
        if (done != (n <= 7))
            __builtin_trap();
    }
    responses_stream_free(&st);
    const char *p = buf.s, *end = buf.s + buf.len;
    json_int_t seq = 0;
    const char *final = NULL;
    while (p < end) {
        const char *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!sep || !nl || memcmp(p, "event: ", 7) != 0 || memcmp(nl + 1, "data: ", 6) != 0)
            __builtin_trap();
        json_t *j = json_loadb(nl + 7, (size_t)(sep - nl - 7), 0, NULL);
        if (!j || json_integer_value(json_object_get(j, "sequence_number")) != seq++)
            __builtin_trap();
        final = json_string_value(json_object_get(j, "type"));
        final = final && (strcmp(final, "response.completed") == 0 || strcmp(final, "response.incomplete") == 0)
                    ? "ok" : NULL;
        json_decref(j);
        p = sep + 2;
    }
    if (!final)
        __builtin_trap();
    free(buf.s);
    responses_request_free(&r);
    return 0;
}
