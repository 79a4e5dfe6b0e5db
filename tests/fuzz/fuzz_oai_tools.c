/* fuzz_oai_tools.c — libFuzzer target for the tool-call parser of the
 * gateway (gateway/oai_tools.h): arbitrary model output.
 *
 * Beyond "no crash, no leak, no overread" (ASan/UBSan), it checks:
 *   - extracted calls have a name, JSON arguments and a call_ id, and the
 *     content length is within the text;
 *   - the streaming hold-back only grows with the text and never releases
 *     a byte past the content of the text's calls;
 *   - a patched response body is still valid JSON;
 *   - the incremental parser (common/text/tool_stream.h), fed the same text in
 *     pieces cut by a PRNG seeded from the input: deltas well ordered (BEGIN,
 *     ARGS, END per call; content only before the first call, and the
 *     content is a prefix of the text), and, when the text does not start
 *     like a bare call (whose early commit may differ by design), the same
 *     calls as the non-streaming parser with each call's fragments adding up
 *     to its arguments. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/oai.h"
#include "gateway/oai_tools.h"
#include "common/text/tool_stream.h"

static char *names[] = {"get_weather", "lookup", "f"};

/* The text starts (after white space, <|python_tag|>) with '{' or '[': a bare
 * candidate, which the stream may commit to early (tool_stream.h). */
static bool starts_bare(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && memchr(" \n\t\r", s[i], 4))
        i++;
    if (n - i >= 14 && memcmp(s + i, "<|python_tag|>", 14) == 0)
        return true;
    return i < n && (s[i] == '{' || s[i] == '[');
}

static void stream_check(const char *text, size_t size, const oai_tool_call_t *calls, size_t n,
                         size_t content_len)
{
    char *buf = malloc(size + 1);
    tool_stream_t *t = tool_stream_new(names, 3);
    const tool_stream_delta_t *d;
    size_t content = 0;       /* content bytes released, all a prefix of the text */
    uint32_t n_calls = 0;
    int state[130] = {0};     /* per call: 1 begun, 2 ended */
    char *args[130] = {0};
    size_t args_len[130] = {0};
    uint64_t x = size * 0x9E3779B97F4A7C15ull + 1;
    size_t at = 0;
    for (bool final = false; !final;) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        at += 1 + (size_t)(x % 8);
        if (at >= size) {
            at = size;
            final = true;
        }
        memcpy(buf, text, at);
        size_t nd = tool_stream_feed(t, buf, at, final, &d);
        for (size_t i = 0; i < nd; i++) {
            switch (d[i].kind) {
            case TOOL_STREAM_CONTENT:
                if (n_calls || d[i].text != buf + content || content + d[i].len > at)
                    __builtin_trap();
                content += d[i].len;
                break;
            case TOOL_STREAM_BEGIN:
                if (d[i].i_call != n_calls || n_calls >= 128 || !d[i].name[0])
                    __builtin_trap();
                state[n_calls++] = 1;
                break;
            case TOOL_STREAM_ARGS:
                if (d[i].i_call >= n_calls || state[d[i].i_call] != 1 || !d[i].len)
                    __builtin_trap();
                args[d[i].i_call] = realloc(args[d[i].i_call], args_len[d[i].i_call] + d[i].len);
                memcpy(args[d[i].i_call] + args_len[d[i].i_call], d[i].text, d[i].len);
                args_len[d[i].i_call] += d[i].len;
                break;
            case TOOL_STREAM_END:
                if (d[i].i_call >= n_calls || state[d[i].i_call] != 1)
                    __builtin_trap();
                state[d[i].i_call] = 2;
                break;
            }
        }
    }
    for (uint32_t i = 0; i < n_calls; i++)
        if (state[i] != 2)
            __builtin_trap();
    if (!n_calls && content != size)
        __builtin_trap(); /* no call: everything is content */
    if (!starts_bare(text, size)) {
        if (n && n_calls != n)
            __builtin_trap();
        for (size_t i = 0; n && i < n; i++)
            if (args_len[i] != strlen(calls[i].arguments) ||
                (args_len[i] && memcmp(args[i], calls[i].arguments, args_len[i])) ||
                content < content_len)
                __builtin_trap();
    }
    for (uint32_t i = 0; i < n_calls; i++)
        free(args[i]);
    tool_stream_free(&t);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    oai_tool_call_t *calls;
    size_t content_len;
    size_t n = oai_tools_extract(text, size, names, 3, &calls, &content_len);
    if (content_len > size)
        __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        if (!calls[i].name[0] || strncmp(calls[i].id, "call_", 5) != 0)
            __builtin_trap();
        (void)calls[i].arguments;
    }
    /* hold-back: monotonic, and never past the calls' content */
    size_t prev = 0, step = size / 16 + 1;
    for (size_t l = 0; l <= size; l += step) {
        size_t safe = oai_tools_safe_prefix(text, l);
        if (safe > l || safe < prev)
            __builtin_trap();
        prev = safe;
    }
    if (n) {
        size_t safe = oai_tools_safe_prefix(text, size);
        for (size_t k = content_len; k < safe; k++)
            if (!memchr(" \n\t\r", text[k], 4))
                __builtin_trap();
        oai_meta_t meta = {.id = "chatcmpl-x", .model = "m", .created = 1};
        oai_usage_t u = {1, 1, 0};
        oai_logprobs_t lp = {0};
        char *body = oai_chat_completion_json(&meta, text, size, "stop", &lp, &u);
        body = oai_tools_patch(body, 0, text, content_len, calls, n, size & 1, false);
        json_error_t je;
        json_t *j = json_loads(body, JSON_ALLOW_NUL, &je);
        if (!j)
            __builtin_trap();
        json_decref(j);
        free(body);
    }
    stream_check(text, size, calls, n, content_len);
    oai_tool_calls_free(calls, n);
    return 0;
}
