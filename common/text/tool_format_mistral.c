/* tool_format_mistral.c — Mistral Nemo's tool-call syntax:
 *     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 * [TOOL_CALLS] is a control token, which the worker does not write into the
 * text (the forcing grammar spells it in text tokens), so a real Mistral
 * model's calls arrive as the bare array [{"name": <one of tools>,
 * "arguments": ..}, ...] that must be the whole answer. Extra keys in a call
 * (its "id") are ignored. See tool_format.h. */
#include "common/text/tool_format.h"

#include <stdlib.h>
#include <string.h>

#include "common/text/tool_scan.h"

#define TAG "[TOOL_CALLS]"

/* A non-empty JSON array of call objects at s[i] that ends the text
 * (names = the declared tools for the untagged form). Elements are walked
 * in the text too, for each call's arguments text. */
static size_t call_list(const char *s, size_t i, size_t n, char *const *names, size_t n_names,
                        tool_call_t **calls)
{
    size_t end, k = 0;
    json_t *v = tool_format_json_at(s, i, n, &end);
    bool ok = json_is_array(v) && json_array_size(v) > 0 && tool_scan_skip_ws(s, end, n) == n;
    size_t p = i + 1; /* past '[' */
    for (size_t j = 0; ok && j < json_array_size(v); j++) {
        p = tool_scan_skip_ws(s, p, n);
        size_t used;
        free(tool_scan_args_of(s + p, end - p, &used)); /* only for where it ends */
        ok = tool_format_add_call(json_array_get(v, j), s, p, p + used, names, n_names, calls, &k);
        p = tool_scan_skip_ws(s, p + used, n);
        if (p < n && s[p] == ',')
            p++;
    }
    json_decref(v);
    if (!ok)
        return tool_format_fail(calls, k);
    return k;
}

static size_t parse_tagged(const char *s, size_t i, size_t n, tool_call_t **calls)
{
    return call_list(s, tool_scan_skip_ws(s, i + strlen(TAG), n), n, NULL, 0, calls);
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
    .parse_bare = call_list,
    .list_open = "[",
    .call_start = "",
    .call_end = "",
    .list_sep = ",",
    .list_close = "]",
};
