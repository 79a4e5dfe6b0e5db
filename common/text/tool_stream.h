/* tool_stream.h — tool calls parsed out of a model's answer while it is
 * being written: content, then each call's name and its arguments in
 * fragments, as OpenAI and vLLM stream delta.tool_calls.
 *
 * The formats are the rows of tool_format_all[] (common/text/tool_format.h,
 * whose tool_format_extract is the non-streaming parser), read by each row's
 * tag / bare_prefix / bare_open and its reading columns, never by a
 * family's name. Today:
 *   hermes   <tool_call>{"name": .., "arguments": ..}</tool_call> ... (Qwen, generic)
 *   mistral  [TOOL_CALLS][{"name": .., "arguments": ..}, ...]
 *   bare     [{"name": <a tool>, "arguments": ..}, ...] (Mistral without its control token)
 *   llama3   [<|python_tag|>]{"name": <a tool>, "parameters": ..}[; {...}]
 * Each call object is scanned byte by byte by common/text/tool_scan.h,
 * which also defines its arguments text (tool_scan_args_of, the one
 * definition both parsers use). The fragments of one call concatenated are exactly that text, wherever the
 * answer was split into events (tests/common/text/test_tool_stream.c checks every
 * split point of every format).
 *
 * What is held back: content that may still become a call — from a marker
 * (or a partial marker at the end) on, or all of an answer that starts like a
 * bare call ('{', '[' + '{', <|python_tag|>) — exactly as
 * tool_format_safe_prefix holds it. A call begins (TOOL_STREAM_BEGIN) once its
 * name is known (and, for the bare forms, is one of the request's tools);
 * from then on it is streamed and cannot be taken back. So for output that is
 * not a well-formed call list the two parsers can differ: if what follows a
 * begun call is not a call (text after </tool_call>, a broken object), the
 * stream has sent the calls so far and drops the rest, while the
 * non-streaming parser would call the whole answer content. Before the first
 * call begins, a failed candidate is released as content, as the
 * non-streaming parser would.
 *
 * An answer that ends inside a begun call (cut short by a stop string or
 * max_tokens) ends that call at the final feed with the arguments written so
 * far, and tool_stream_cut says so. Cut before the name is complete, no call
 * has begun and everything held back is content.
 *
 * No dependency on the API layer: call ids are the caller's.
 */
#ifndef PAGODA_TEXT_TOOL_STREAM_H
#define PAGODA_TEXT_TOOL_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum tool_stream_kind {
    TOOL_STREAM_CONTENT,          /* text: content (points into the text fed) */
    TOOL_STREAM_BEGIN,            /* call i_call starts; name */
    TOOL_STREAM_ARGS,             /* text: a fragment of call i_call's arguments */
    TOOL_STREAM_END,              /* call i_call is complete */
} tool_stream_kind_t;

typedef struct tool_stream_delta {
    tool_stream_kind_t kind;
    const char *text;             /* CONTENT, ARGS: (len) bytes */
    size_t len;
    uint32_t i_call;              /* BEGIN, ARGS, END: 0, 1, ... in the answer */
    const char *name;             /* BEGIN: NUL-terminated */
} tool_stream_delta_t;

typedef struct tool_stream tool_stream_t;

/* names[0..n_names) (borrowed; outlive the stream): the request's tools,
 * which the bare forms must name. */
tool_stream_t *tool_stream_new(char *const *names, size_t n_names);
void tool_stream_free(tool_stream_t **t);

/* text[0..len) is everything written so far: what the previous call saw plus
 * new bytes (the caller keeps it; same bytes each time). `final`: the answer
 * is complete — what is held back is decided (a candidate that never became
 * a call is content; an open call ends). Returns the deltas in order in
 * *out (owned by the stream, valid until the next call). Not called again
 * after a final call. */
size_t tool_stream_feed(tool_stream_t *t, const char *text, size_t len, bool final,
                        const tool_stream_delta_t **out);

/* Calls begun so far. */
uint32_t tool_stream_n_calls(const tool_stream_t *t);

/* After the final feed: the answer ended inside a begun call (its object
 * never closed), i.e. a stop string or max_tokens cut the call short. That
 * call still got its BEGIN, the arguments as written so far (usually not
 * complete JSON) and an END; the caller reports the real finish (stop,
 * length), not "tool_calls" (answer.h). */
bool tool_stream_cut(const tool_stream_t *t);

#endif
