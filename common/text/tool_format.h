/* tool_format.h — how a model family writes a tool call, in one place per
 * family: the markers its chat template renders calls with
 * (common/text/chat_template.c) and the grammar that forces a call in that
 * syntax (common/text/tool_grammar.c). The gateway reads calls back out of
 * the model's answer in gateway/oai_tools.c (being made incremental in
 * common/text/tool_stream.c; both move here next, so that one module per family
 * owns writing and reading).
 *
 * Every call is the object {"name": "N", "<args_key>": A} wrapped in the
 * family's markers; a turn with calls reads
 *     open  call_open obj call_close  sep  call_open obj call_close ...  close
 *
 *   family   tool_format_   open            call_open / call_close         sep    close  args_key
 *   hermes   hermes         ""              "<tool_call>\n" / "\n</tool_call>" "\n"  ""     arguments
 *   mistral  mistral        "[TOOL_CALLS][" "" / ""                         ", "   "]"    arguments
 *   llama3   llama3         ""              "" / ""                         (one)  ""     parameters
 *
 * hermes is Qwen2.5/Qwen3's, and the form the worker's generic rewrite
 * teaches every family without native tools; mistral is Mistral Nemo's;
 * llama3 is Llama 3.1+'s. Reading an answer back is more lenient than
 * writing (gateway/oai_tools.h says how). *
 * Adding a family: a tool_format_<family>.c defining its tool_format_t, a
 * row in tool_format_all[] (tool_format.c), and chat_template_tool_format()
 * naming it for the templates that use it.
 *
 * Ownership: the formats are static.
 */
#ifndef PAGODA_TEXT_TOOL_FORMAT_H
#define PAGODA_TEXT_TOOL_FORMAT_H

#include <stddef.h>

typedef struct tool_format {
    const char *name;            /* "hermes", as chat_template_tool_format() says */
    const char *args_key;        /* key of the arguments in a call object */
    /* Writing (rendering and the forcing grammar): the markers above. sep is
     * NULL when the family takes one call per turn. */
    const char *open, *call_open, *call_close, *sep, *close;
} tool_format_t;

extern const tool_format_t tool_format_hermes;
extern const tool_format_t tool_format_mistral;
extern const tool_format_t tool_format_llama3;

/* Every family, NULL-terminated. */
extern const tool_format_t *const tool_format_all[];

/* The family named name ("hermes", ...), or NULL. */
const tool_format_t *tool_format_find(const char *name);

/* f's text of one call: call_open {"name": "N", "<args_key>": A} call_close,
 * where args is the arguments' JSON text as the template writes it.
 * malloc'd; the caller frees. */
char *tool_format_call_text(const tool_format_t *f, const char *name, const char *args);

#endif
