/* fuzz_anthropic.c — libFuzzer target for the Anthropic Messages parser
 * (gateway/anthropic.h).
 *
 * Input layout (seeds in tests/fuzz/corpus/anthropic/):
 *   byte 0     bit 0: the count_tokens parser; bit 1: reasoning split on in
 *              the renderers
 *   bytes 1..  the HTTP request body
 *
 * Beyond ASan/UBSan it checks: a refusal is -1 with status 400, nothing left
 * to free, and an Anthropic error body that is valid JSON; an accepted
 * request has a model, ≥ 1 message, max_tokens ≥ 1 (unless count_tokens,
 * then op tokenize and no grammar); the message object and the event stream
 * built from the request's own last message (as if the model said it, in
 * 5-byte deltas) are valid JSON / well-framed SSE ending in message_stop. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/anthropic.h"

static void must_be_json(char *s)
{
    json_t *j = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (!j)
        __builtin_trap();
    json_decref(j);
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool count = data[0] & 1, reasoning = data[0] & 2;
    request_t r;
    oai_error_t err;
    int rc = anthropic_parse_request(data + 1, size - 1, count, &r, &err);
    if (rc != 0) {
        if (rc != -1 || err.status != 400 || r.model || r.messages)
            __builtin_trap();
        must_be_json(anthropic_error_json(&err));
        return 0;
    }
    if (!r.model || r.n_messages < 1 || (count ? r.op != REQUEST_OP_TOKENIZE || r.grammar : r.max_tokens < 1))
        __builtin_trap();
    const request_message_t *last = &r.messages[r.n_messages - 1];
    anthropic_meta_t m = {.id = "msg_fuzz", .model = r.model, .reasoning = reasoning,
                          .tool_names = r.tool_names, .n_tools = r.n_tools, .stop = r.stop, .n_stop = r.n_stop};
    oai_usage_t u = {10, 5, 3};
    must_be_json(anthropic_message_json(&m, last->content, last->content_len,
                                        (data[0] & 4) ? PROTO_FINISH_LENGTH : PROTO_FINISH_STOP, (uint32_t)(data[0] >> 3), &u));
    anthropic_stream_t *st = anthropic_stream_new(&m);
    strbuf_t buf = {0};
    bool done = false;
    for (size_t i = 0; !done; i += 5) {
        size_t n = last->content_len > i ? last->content_len - i : 0;
        proto_event_t ev = {.text = last->content + (n ? i : 0), .text_len = (uint32_t)(n < 5 ? n : 5)};
        if (n <= 5)
            ev.finish = PROTO_FINISH_STOP;
        done = anthropic_stream_event(st, &ev, &buf);
        if (done != (n <= 5))
            __builtin_trap();
    }
    anthropic_stream_free(&st);
    /* every event: "event: X\ndata: JSON\n\n"; the last is message_stop */
    const char *p = buf.s, *end = buf.s + buf.len, *last_name = NULL;
    while (p < end) {
        const char *sep = memmem(p, (size_t)(end - p), "\n\n", 2);
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!sep || !nl || memcmp(p, "event: ", 7) != 0 || memcmp(nl + 1, "data: ", 6) != 0)
            __builtin_trap();
        json_t *j = json_loadb(nl + 7, (size_t)(sep - nl - 7), 0, NULL);
        if (!j)
            __builtin_trap();
        json_decref(j);
        last_name = p + 7;
        p = sep + 2;
    }
    if (!last_name || strncmp(last_name, "message_stop\n", 13) != 0)
        __builtin_trap();
    free(buf.s);
    request_free(&r);
    return 0;
}
