/* tool_format_hermes.c — the Hermes tool-call syntax (Qwen2.5/Qwen3, and the
 * generic rewrite for families without native tools):
 *     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 * repeated for parallel calls, "\n" between; the text before the first
 * block is the content. See tool_format.h. */
#include "common/text/tool_format.h"

#include <string.h>

#define OPEN "<tool_call>"
#define CLOSE "</tool_call>"

/* Blocks from s[i] (at "<tool_call>") to the end; an unclosed block is only
 * accepted at the very end. */
static size_t parse(const char *s, size_t i, size_t n, tool_call_t **calls)
{
    size_t k = 0;
    while (tool_format_at(s, i, n, OPEN)) {
        size_t end;
        json_t *v = tool_format_json_at(s, tool_format_skip_ws(s, i + strlen(OPEN), n), n, &end);
        bool ok = tool_format_add_call(v, NULL, 0, calls, &k);
        json_decref(v);
        if (!ok)
            goto bad;
        i = tool_format_skip_ws(s, end, n);
        if (tool_format_at(s, i, n, CLOSE))
            i = tool_format_skip_ws(s, i + strlen(CLOSE), n);
        else if (i < n)
            goto bad;
    }
    if (i < n)
        goto bad;
    return k;
bad:
    tool_calls_free(*calls, k);
    *calls = NULL;
    return 0;
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
};
