/* oai_tools.h — tool calling in the OpenAI layer of the gateway.
 *
 * Requests: `tools` (function tools with JSON-Schema parameters), `tool_choice`
 * (none | auto | required | {"type":"function","function":{"name"}}),
 * `parallel_tool_calls`, assistant messages with `tool_calls` and `tool`
 * messages with `tool_call_id`. oai_parse_request() calls the two parsers
 * below; what they accept is forwarded to the worker (proto SUBMIT `tools`,
 * `tool_choice`, `par_tools`, message `tool_calls`/`tool_call_id`), whose
 * chat template renders it (common/text/chat_template.h).
 *
 * Responses: the model writes a call in its family's convention
 * (common/text/tool_format.h: hermes, mistral, llama3 — the markers its
 * template rendered and the forcing grammar used, and how each is read
 * back). oai_tools_extract reads the whole answer with tool_format_extract
 * and gives each call an OpenAI id; common/text/tool_stream.h reads the same
 * calls fragment by fragment while they are written, and both give the same
 * arguments text. When nothing parses, the text is plain content and
 * finish_reason is what the worker said. oai_tools_safe_prefix
 * (tool_format_safe_prefix) says what plain content may be released before
 * a call is decided (from a marker on, a leading '{', or a leading '['
 * followed by '{' is held), so ordinary text streams as it comes.
 */
#ifndef PAGODA_GATEWAY_OAI_TOOLS_H
#define PAGODA_GATEWAY_OAI_TOOLS_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/strbuf.h"
#include "gateway/oai_error.h"
#include "gateway/request.h"

#define OAI_MAX_TOOLS 128            /* tools per request */
#define OAI_MAX_TOOL_CALLS 128       /* calls per assistant message, and parsed per answer */
#define OAI_MAX_TOOL_NAME 64         /* function names: [A-Za-z0-9_-]{1,64}, as OpenAI */

/* Parses `tools`, `tool_choice`, `parallel_tool_calls` (and refuses the
 * legacy `functions`/`function_call` with a pointer to `tools`) into r.
 * Returns 0, or -1 with a 400 in *e naming the field. */
int oai_tools_parse_request(json_t *root, request_t *r, oai_error_t *e);

/* Parses message i's `tool_calls` (assistant) and `tool_call_id` (tool) into
 * m. Returns 0, or -1 with a 400 in *e. */
int oai_tools_parse_message(json_t *msg, size_t i, request_message_t *m, oai_error_t *e);

/* One call parsed from the model's output. Strings are malloc'd. */
typedef struct {
    char id[40];                 /* "call_" + 24 random hex */
    char *name;
    char *arguments;             /* JSON text (tool_stream.h: the model's, minus white space) */
    bool custom;                 /* a custom tool's call (oai_tools_mark_custom): rendered
                                    with its free-form input, oai_custom_input(arguments) */
} oai_tool_call_t;

/* Custom tools. OpenAI's custom tools take free-form text, not JSON
 * arguments: {"type":"custom","custom":{"name","description","format":
 * {"type":"text"} | {"type":"grammar","grammar":{"syntax":"lark"|"regex",
 * "definition"}}}} (chat; the Responses API's {"type":"custom","name",
 * "format":{"type":"grammar","syntax","definition"}} translates to it). The
 * model is shown each as a function with one string argument "input" (its
 * description says the format and carries the grammar), and a forced call's
 * input is constrained by the grammar compiled in JSON-string form
 * (json_schema.h "x-grammar", common/grammar/lark.h): the model writes
 * {"input": "<text>"} and the client gets <text>. A custom call comes back
 * as {"id","type":"custom","custom":{"name","input"}} (chat) or a
 * custom_tool_call item (Responses), and earlier custom calls in the
 * conversation are shown to the model as the function call it wrote.
 *
 * The input of a custom call from its arguments text {"input": "..."}: the
 * decoded string, also of a prefix of the arguments (a call cut short, or
 * still streaming: an escape cut in the middle is left out), so decoding a
 * longer prefix only appends. Arguments that are not of that shape give
 * themselves. Malloc'd, NUL-terminated, *out_len bytes (may hold NUL). */
char *oai_custom_input(const char *args, size_t len, size_t *out_len);
/* Sets calls[i].custom for the calls whose name is a custom tool of the
 * request (names[0..n_names), custom[k] per name; custom NULL = none). */
void oai_tools_mark_custom(oai_tool_call_t *calls, size_t n, char *const *names, const bool *custom,
                           size_t n_names);
/* Whether `name` is one of the request's custom tools. */
bool oai_tool_is_custom(const char *name, char *const *names, const bool *custom, size_t n_names);

/* A custom call's input while its arguments stream: feed each arguments
 * fragment; returns the input bytes that fragment completed (malloc'd,
 * *out_len, possibly 0). Zero-initialize; oai_custom_acc_clear frees. */
typedef struct {
    strbuf_t raw;                /* the arguments so far */
    size_t sent;                 /* input bytes returned so far */
} oai_custom_acc_t;
char *oai_custom_acc_feed(oai_custom_acc_t *a, const char *frag, size_t n, size_t *out_len);
void oai_custom_acc_clear(oai_custom_acc_t *a);

/* Parses text[0..len) for tool calls (formats above). names[0..n_names) are
 * the request's tool names (for the bare-JSON form). Returns the number of
 * calls (0 = none: the text is content) with *calls malloc'd (free with
 * oai_tool_calls_free) and *content_len = the length of the content before
 * the calls (trailing white space dropped). */
size_t oai_tools_extract(const char *text, size_t len, char *const *names, size_t n_names,
                         oai_tool_call_t **calls, size_t *content_len);
void oai_tool_calls_free(oai_tool_call_t *calls, size_t n);

/* Streaming: how many bytes of text[0..len) (everything generated so far)
 * are plain content for sure, i.e. before anything that may still turn out
 * to be a tool call. Monotonic as text grows. */
size_t oai_tools_safe_prefix(const char *text, size_t len);

/* The OpenAI `tool_calls` array: [{"index"?, "id", "type":"function",
 * "function":{"name","arguments"}}] ("index" when with_index: stream
 * deltas); a custom call is {"index"?, "id", "type":"custom", "custom":
 * {"name","input"}}. New reference. */
json_t *oai_tool_calls_json(const oai_tool_call_t *calls, size_t n, bool with_index);

/* Rewrites a response body built by oai_chat_completion_json /
 * oai_chat_chunk_json for choice `index`: the message (or delta) gets
 * `tool_calls`, its content becomes content[0..content_len) (null when
 * empty; the delta gets none), and with `ends_in_calls` a non-null
 * finish_reason becomes "tool_calls" (without, the calls were cut short and
 * the finish stays: gateway/answer.h). Takes `body`, returns the new
 * malloc'd body. */
char *oai_tools_patch(char *body, size_t index, const char *content, size_t content_len,
                      const oai_tool_call_t *calls, size_t n, bool ends_in_calls, bool is_chunk);

/* Writes "<prefix><24 random hex>" + NUL into out (cap ≥ strlen(prefix)+25),
 * e.g. prefix "chatcmpl-", "cmpl-" or "call_" (the ids of every surface's
 * answers and tool calls). Random from getrandom(2). */
void oai_id_new(const char *prefix, char *out, size_t cap);

#endif
