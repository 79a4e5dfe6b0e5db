/* tool_format_hermes.c — the Hermes tool-call syntax (Qwen2.5/Qwen3, and the
 * generic rewrite for families without native tools):
 *     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 * repeated for parallel calls, "\n" between. Read back leniently: any white
 * space around the object, the text before the first block is the content,
 * an unclosed block only at the very end. See tool_format.h. */
#include "common/text/tool_format.h"

#include <string.h>

#include "common/text/tool_scan.h"

#define OPEN "<tool_call>"
#define CLOSE "</tool_call>"

/* Blocks from s[i] (at OPEN) to the end of the text. */
static size_t parse(const char *s, size_t i, size_t n, tool_call_t **calls)
{
    size_t k = 0;
    while (tool_scan_at(s, i, n, OPEN)) {
        size_t end, start = tool_scan_skip_ws(s, i + strlen(OPEN), n);
        json_t *v = tool_format_json_at(s, start, n, &end);
        bool ok = tool_format_add_call(v, s, start, end, NULL, 0, calls, &k);
        json_decref(v);
        if (!ok)
            return tool_format_fail(calls, k);
        i = tool_scan_skip_ws(s, end, n);
        if (tool_scan_at(s, i, n, CLOSE))
            i = tool_scan_skip_ws(s, i + strlen(CLOSE), n);
        else if (i < n) /* an unclosed block is only accepted at the very end */
            return tool_format_fail(calls, k);
    }
    if (i < n)
        return tool_format_fail(calls, k);
    return k;
}

const tool_format_t tool_format_hermes = {
    .name = "hermes",
    .args_key = "arguments",
    .open = "",
    .call_open = OPEN "\n",
    .call_close = "\n" CLOSE,
    .sep = "\n",
    .close = "",
    .tag = OPEN,
    .parse_tagged = parse,
    .list_open = "",
    .call_start = OPEN,
    .call_end = CLOSE,
    .list_sep = "",
    .list_close = "",
};
