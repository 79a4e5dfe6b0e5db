/* fuzz_oai_tools.c — libFuzzer target for the tool-call parser of the
 * gateway (gateway/oai_tools.h): arbitrary model output.
 *
 * Beyond "no crash, no leak, no overread" (ASan/UBSan), it checks:
 *   - extracted calls have a name, JSON arguments and a call_ id, and the
 *     content length is within the text;
 *   - the streaming hold-back only grows with the text and never releases
 *     a byte past the content of the text's calls;
 *   - a patched response body is still valid JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/oai.h"
#include "gateway/oai_tools.h"

static char *names[] = {"get_weather", "lookup", "f"};

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
        body = oai_tools_patch(body, 0, text, content_len, calls, n, false);
        json_error_t je;
        json_t *j = json_loads(body, 0, &je);
        if (!j)
            __builtin_trap();
        json_decref(j);
        free(body);
    }
    oai_tool_calls_free(calls, n);
    return 0;
}
