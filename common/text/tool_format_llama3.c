/* tool_format_llama3.c — Llama 3.1+'s tool-call syntax: the answer is
 *     {"name": "f", "parameters": {...}}
 * one call per turn, as the templates render it. See tool_format.h. */
#include "common/text/tool_format.h"

const tool_format_t tool_format_llama3 = {
    .name = "llama3",
    .args_key = "parameters",
    .open = "",
    .call_open = "",
    .call_close = "",
    .sep = NULL,
    .close = "",
};
