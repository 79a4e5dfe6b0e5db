/* answer.h — a chat answer as parts, for the API surfaces that are not
 * chat completions (gateway/anthropic.h, gateway/responses.h).
 *
 * The worker sends text; what the text means (reasoning between <think> and
 * </think> with --reasoning-parser, plain content, tool calls in the model's
 * syntax) is decided by gateway/reasoning.h and gateway/oai_tools.h. This
 * module applies them once and hands each surface typed parts, so a surface
 * only renders:
 *
 *   ANSWER_REASONING  a run of reasoning text
 *   ANSWER_TEXT       a run of content text
 *   ANSWER_CALL       a tool call: id ("call_…"), name, arguments (JSON text)
 *
 * Streaming holds back exactly what chat streaming holds back: a possible
 * partial <think>/</think>, and from the first byte that may start a call
 * (oai_tools_safe_prefix). Calls are parsed when the answer ends; their
 * arguments therefore come whole, as one part per call.
 */
#ifndef PAGODA_GATEWAY_ANSWER_H
#define PAGODA_GATEWAY_ANSWER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "gateway/oai_tools.h"

typedef enum { ANSWER_REASONING, ANSWER_TEXT, ANSWER_CALL } answer_part_kind_t;

/* One part; pointers are valid during the callback only. */
typedef struct answer_part {
    answer_part_kind_t kind;
    const char *text;            /* REASONING / TEXT: (len) bytes, may be invalid UTF-8 */
    size_t len;
    const oai_tool_call_t *call; /* CALL */
} answer_part_t;

typedef void (*answer_emit_fn)(void *ctx, const answer_part_t *part);

typedef struct answer_stream answer_stream_t;

/* A decoder for one answer: reasoning split on or off, tool names of the
 * request (names borrowed for its life; n_tools 0 = no calls parsed). */
answer_stream_t *answer_stream_new(bool reasoning, char *const *tool_names, size_t n_tools);
void answer_stream_free(answer_stream_t **a);

/* Feeds the next text delta; emits what is decided. final = the answer is
 * over (then everything left is emitted, calls included). Returns the
 * number of calls emitted by this call. */
size_t answer_stream_feed(answer_stream_t *a, const char *text, size_t len, bool final,
                          answer_emit_fn emit, void *ctx);

/* The whole answer at once: the same parts answer_stream_feed would emit
 * over all its deltas, merged (one REASONING, one TEXT, then the calls).
 * Returns the number of calls. */
size_t answer_split(bool reasoning, char *const *tool_names, size_t n_tools, const char *text,
                    size_t len, answer_emit_fn emit, void *ctx);

/* Helpers every surface's renderer uses. */
/* A JSON string from untrusted bytes (invalid UTF-8 → U+FFFD). New reference. */
json_t *answer_jstr(const char *s, size_t len);
/* Appends "event: NAME\ndata: JSON\n\n" (event line left out when name is
 * NULL) to (*out, *len, *cap), growing it; takes `data`. */
void answer_sse(char **out, size_t *len, size_t *cap, const char *name, json_t *data);

#endif
