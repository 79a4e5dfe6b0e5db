/* tool_format_hermes.c — the Hermes tool-call syntax (Qwen2.5/Qwen3, and the
 * generic rewrite for families without native tools):
 *     <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 * repeated for parallel calls, "\n" between. See tool_format.h. */
#include "common/text/tool_format.h"

const tool_format_t tool_format_hermes = {
    .name = "hermes",
    .args_key = "arguments",
    .open = "",
    .call_open = "<tool_call>\n",
    .call_close = "\n</tool_call>",
    .sep = "\n",
    .close = "",
};
