/* tool_format_mistral.c — Mistral Nemo's tool-call syntax:
 *     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 * [TOOL_CALLS] is a control token, which the worker does not write into the
 * text, so a real Mistral model's calls arrive as the bare array
 * [{"name": <one of tools>, "arguments": ..}, ...] that must be the whole
 * answer. Extra keys in a call (its "id") are ignored. See tool_format.h. */
#include "common/text/tool_format.h"

#include <string.h>

#define TAG "[TOOL_CALLS]"

/* A non-empty array of calls at s[i] that ends the text. */
static size_t array(const char *s, size_t i, size_t n, char *const *names, size_t n_names, tool_call_t **calls)
{
    size_t end, k = 0;
    json_t *v = tool_format_json_at(s, i, n, &end);
    bool ok = json_is_array(v) && json_array_size(v) > 0 && tool_format_skip_ws(s, end, n) == n;
    for (size_t j = 0; ok && j < json_array_size(v); j++)
        ok = tool_format_add_call(json_array_get(v, j), names, n_names, calls, &k);
    json_decref(v);
    if (!ok) {
        tool_calls_free(*calls, k);
        *calls = NULL;
        return 0;
    }
    return k;
}

static size_t parse_tagged(const char *s, size_t i, size_t n, tool_call_t **calls)
{
    return array(s, tool_format_skip_ws(s, i + strlen(TAG), n), n, NULL, 0, calls);
}

const tool_format_t tool_format_mistral = {
    .name = "mistral",
    .args_key = "arguments",
    .open = TAG "[",
    .call_open = "",
    .call_close = "",
    .sep = ", ",
    .close = "]",
    .tag = TAG,
    .parse_tagged = parse_tagged,
    .bare_open = "[{",
    .parse_bare = array,
};
