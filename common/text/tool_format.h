/* tool_format.h — how a model family writes a tool call, in one place per
 * family: the markers its chat template renders calls with
 * (common/text/chat_template.c), the grammar that forces a call in that
 * syntax (common/text/tool_grammar.c), and how its calls are read back out
 * of an answer, whole (tool_format_extract, with the family's parsers) and
 * while it is being written (common/text/tool_stream.c, which walks the
 * rows' reading columns). One module per family (tool_format_<family>.c)
 * owns its row; no code outside the family modules names a family.
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
 * writing (each family module's parse says how): the text before a hermes
 * block is the content; a Mistral array may come without its tag
 * ([TOOL_CALLS] is a control token the worker leaves out of the text), then
 * the whole answer is the array and every name must be a tool of the
 * request; a llama3 answer is the whole output (optionally after
 * <|python_tag|>, several joined by ";") and the names must be the request's
 * tools, so a JSON answer that is not a call stays content. A call's
 * arguments text is tool_scan_args_of's (tool_scan.h), so the streamed
 * fragments add up to what tool_format_extract returns.
 *
 * Reading incrementally (tool_stream.c) uses no parser of the family, only
 * its columns: from its tag (tagged form; the sequence starts at the tag when
 * the tag is call_start, else right after it) or from its bare_open at the
 * start of the answer (untagged form, after any family's bare_prefix), the
 * calls are
 *     list_open  call  (list_sep call)*  list_close,   call = call_start obj call_end
 * each piece a literal ("" = none) with white space allowed before it;
 * list_close "" = the calls run to the end of the answer.
 *
 *   family   list_open  call_start / call_end          list_sep  list_close
 *   hermes   ""         "<tool_call>" / "</tool_call>"  ""        ""
 *   mistral  "["        "" / ""                         ","       "]"
 *   llama3   ""         "" / ""                         ";"       ""
 *
 * Adding a family: a tool_format_<family>.c defining its tool_format_t (every
 * column above, and its parsers), a row in tool_format_all[] (tool_format.c),
 * and chat_template_tool_format() naming it for the templates that use it.
 * tests/common/text/test_tool_stream.c then checks, for every row, that
 * streamed calls equal whole ones on calls written in the family's syntax.
 *
 * Ownership: the formats are static. tool_format_extract returns malloc'd
 * calls freed with tool_calls_free.
 */
#ifndef PAGODA_TEXT_TOOL_FORMAT_H
#define PAGODA_TEXT_TOOL_FORMAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define TOOL_FORMAT_MAX_CALLS 128    /* calls read out of one answer */

/* One call read from an answer. Both strings malloc'd. */
typedef struct tool_call {
    char *name;
    char *arguments;             /* JSON text (tool_scan_args_of) */
} tool_call_t;

typedef struct tool_format {
    const char *name;            /* "hermes", as chat_template_tool_format() says */
    const char *args_key;        /* key of the arguments in a call object */
    /* Writing (rendering and the forcing grammar): the markers above. sep is
     * NULL when the family takes one call per turn. */
    const char *open, *call_open, *call_close, *sep, *close;
    /* Reading. tag: text that starts this family's calls anywhere in an
     * answer (NULL: none); parse_tagged reads the calls from a tag at s[i] on. bare_open: the
     * characters (white space allowed between) an untagged answer starts
     * with when it is this family's calls, read by parse_bare (NULL: no
     * untagged form); bare_prefix: a text that may come before them (NULL:
     * none). Both parsers return the number of calls appended to *calls —
     * the whole rest of the text must be calls — or 0 when it is not a valid
     * call sequence (nothing kept). names[0..n_names): the request's tools,
     * which an untagged call must name. */
    const char *tag;
    size_t (*parse_tagged)(const char *s, size_t i, size_t n, tool_call_t **calls);
    const char *bare_open, *bare_prefix;
    size_t (*parse_bare)(const char *s, size_t i, size_t n, char *const *names, size_t n_names,
                         tool_call_t **calls);
    /* Reading incrementally (above): the pieces of a call sequence, "" none. */
    const char *list_open, *call_start, *call_end, *list_sep, *list_close;
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

/* Reads the calls at the end of an answer text[0..len), in whichever
 * family's syntax it is (the earliest tag of any family; else an untagged
 * form at the start). Returns the number of calls (0 = none: the text is
 * content) with *calls malloc'd and *content_len = the length of the content
 * before them (trailing white space dropped). */
size_t tool_format_extract(const char *text, size_t len, char *const *names, size_t n_names,
                           tool_call_t **calls, size_t *content_len);

/* Streaming: how many bytes of text[0..len) (everything generated so far)
 * are plain content for sure, i.e. before anything that may still turn out
 * to be a call in some family's syntax. Monotonic as text grows. */
size_t tool_format_safe_prefix(const char *text, size_t len);

void tool_calls_free(tool_call_t *calls, size_t n);

/* 1: s[i..n) starts with f's bare_open (white space allowed between its
 * characters); 0: it cannot; -1: the text ends before it can tell. */
int tool_format_bare_match(const tool_format_t *f, const char *s, size_t i, size_t n);

/* ---- for the family modules -------------------------------------------- */

/* Appends the call described by obj ({"name", "arguments"|"parameters"}),
 * whose text is s[i..n), to *calls / *k when its name is non-empty and, with
 * names, one of them, and fewer than TOOL_FORMAT_MAX_CALLS are there; its
 * arguments are tool_scan_args_of that text. False otherwise (nothing
 * appended). */
bool tool_format_add_call(const json_t *obj, const char *s, size_t i, size_t n, char *const *names,
                          size_t n_names, tool_call_t **calls, size_t *k);

/* One JSON value starting at s[i] (new reference) with *end past it, or NULL. */
json_t *tool_format_json_at(const char *s, size_t i, size_t n, size_t *end);

/* Frees calls[0..k), NULLs *calls and returns 0: a parser's failure. */
size_t tool_format_fail(tool_call_t **calls, size_t k);

#endif
