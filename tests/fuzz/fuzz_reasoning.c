/* fuzz_reasoning.c — libFuzzer target for gateway/reasoning.h: arbitrary
 * model output. Beyond ASan/UBSan it checks that the split stays inside the
 * text, that the streaming split only grows over prefixes and agrees with
 * the final split, and that a patched body is still JSON. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gateway/oai.h"
#include "gateway/reasoning.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    reasoning_split_t fin;
    reasoning_split(text, size, &fin);
    if (fin.c_start > size || fin.r_start + fin.r_len > size || fin.undecided)
        __builtin_trap();
    if (fin.has_reasoning && fin.closed && fin.r_start + fin.r_len + 8 != fin.c_start)
        __builtin_trap();
    size_t prev = 0, step = size / 16 + 1;
    for (size_t l = 0; l <= size; l += step) {
        reasoning_split_t sp;
        reasoning_stream_feed(text, l, &sp);
        if (sp.has_reasoning) {
            if (!fin.has_reasoning || sp.r_start != fin.r_start || sp.r_len < prev || sp.r_len > fin.r_len)
                __builtin_trap();
            prev = sp.r_len;
        }
    }
    oai_meta_t meta = {.id = "chatcmpl-x", .model = "m", .created = 1};
    oai_usage_t u = {1, 1, 0};
    oai_logprobs_t lp = {0};
    char *body = oai_chat_completion_json(&meta, text + fin.c_start, size - fin.c_start, "stop", &lp, &u);
    body = reasoning_patch(body, 0, text + fin.r_start, fin.r_len, false, false);
    json_error_t je;
    json_t *j = json_loads(body, JSON_ALLOW_NUL, &je);
    if (!j)
        __builtin_trap();
    json_decref(j);
    free(body);
    return 0;
}
