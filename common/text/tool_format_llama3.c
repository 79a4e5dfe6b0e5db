/* tool_format_llama3.c — Llama 3.1+'s tool-call syntax: the answer is
 *     {"name": "f", "parameters": {...}}
 * one call per turn as the templates render it; read back also after
 * <|python_tag|> and several joined by ";". The name must be one of the
 * request's tools, so a JSON answer that is not a call stays content. See
 * tool_format.h. */
#include "common/text/tool_format.h"

#include "common/text/tool_scan.h"

static size_t parse_bare(const char *s, size_t i, size_t n, char *const *names, size_t n_names,
                         tool_call_t **calls)
{
    size_t k = 0;
    for (;;) {
        size_t end;
        json_t *v = tool_format_json_at(s, i, n, &end);
        bool ok = tool_format_add_call(v, s, i, end, names, n_names, calls, &k);
        json_decref(v);
        if (!ok)
            return tool_format_fail(calls, k);
        i = tool_scan_skip_ws(s, end, n);
        if (i == n)
            return k;
        if (s[i] != ';')
            return tool_format_fail(calls, k);
        i = tool_scan_skip_ws(s, i + 1, n);
    }
}

const tool_format_t tool_format_llama3 = {
    .name = "llama3",
    .args_key = "parameters",
    .open = "",
    .call_open = "",
    .call_close = "",
    .sep = NULL,
    .close = "",
    .bare_open = "{",
    .bare_prefix = "<|python_tag|>",
    .parse_bare = parse_bare,
    .list_open = "",
    .call_start = "",
    .call_end = "",
    .list_sep = ";",
    .list_close = "",
};
