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

#include "gateway/oai.h"

#define OAI_MAX_TOOLS 128            /* tools per request */
#define OAI_MAX_TOOL_CALLS 128       /* calls per assistant message, and parsed per answer */
#define OAI_MAX_TOOL_NAME 64         /* function names: [A-Za-z0-9_-]{1,64}, as OpenAI */

/* Parses `tools`, `tool_choice`, `parallel_tool_calls` (and refuses the
 * legacy `functions`/`function_call` with a pointer to `tools`) into r.
 * Returns 0, or -1 with a 400 in *e naming the field. */
int oai_tools_parse_request(json_t *root, oai_request_t *r, oai_error_t *e);

/* Parses message i's `tool_calls` (assistant) and `tool_call_id` (tool) into
 * m. Returns 0, or -1 with a 400 in *e. */
int oai_tools_parse_message(json_t *msg, size_t i, oai_message_t *m, oai_error_t *e);

/* One call parsed from the model's output. Strings are malloc'd. */
typedef struct {
    char id[40];                 /* "call_" + 24 random hex */
    char *name;
    char *arguments;             /* JSON text (tool_stream.h: the model's, minus white space) */
} oai_tool_call_t;

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
 * deltas). New reference. */
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

#endif
