/* tool_format_mistral.c — Mistral Nemo's tool-call syntax:
 *     [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 * ([TOOL_CALLS] is a control token; the forcing grammar spells it in text
 * tokens). See tool_format.h. */
#include "common/text/tool_format.h"

const tool_format_t tool_format_mistral = {
    .name = "mistral",
    .args_key = "arguments",
    .open = "[TOOL_CALLS][",
    .call_open = "",
    .call_close = "",
    .sep = ", ",
    .close = "]",
};
