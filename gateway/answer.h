/* answer.h — a model's answer split into the parts every API surface
 * renders: reasoning, content and tool calls.
 *
 * The worker streams one choice's text in EVENTs. Before an API surface
 * (gateway/api_surface.h) can render it, two things the model wrote in its
 * own conventions are taken out of the text:
 *   - reasoning: <think>...</think> at the start, with --reasoning-parser
 *     (gateway/reasoning.h);
 *   - tool calls: the family's call syntax (gateway/oai_tools.h), when the
 *     request announced tools.
 * What remains is content. This module does it for a stream (answer_t, fed
 * event by event) and for a whole answer (answer_whole_split), so the
 * OpenAI, Anthropic and Responses renderers share one decision about which
 * byte is what.
 *
 * Streaming yields parts in the order the client must see them:
 *   ANSWER_REASONING  a fragment of the reasoning
 *   ANSWER_CONTENT    a fragment of the content
 *   ANSWER_TOOL_BEGIN call i_call starts: its id ("call_" + 24 hex) and name
 *   ANSWER_TOOL_ARGS  a fragment of call i_call's arguments (JSON text);
 *                     the fragments of one call concatenated are its whole
 *                     arguments, exactly the non-streamed `arguments`
 *   ANSWER_TOOL_END   call i_call's arguments are complete
 * Calls are numbered 0, 1, ... within the choice; a call begins as soon as
 * its name is written and its arguments follow fragment by fragment as the
 * model writes them (common/text/tool_stream.h), so every surface can show them
 * growing (OpenAI delta.tool_calls, Anthropic input_json_delta, Responses
 * response.function_call_arguments.delta). Content that may still turn into a
 * call (from a marker on) is held back until it is decided; ordinary text
 * streams as it comes.
 *
 * Cut-short calls (the rule both modes follow, docs/API.md "Tool calling"):
 * once a call has begun (its name is written), an answer that ends inside it
 * — the caller's stop string matched, or max_tokens ran out — still returns
 * that call and the ones before it, with the arguments as written so far
 * (usually not complete JSON), streamed or not. The finish is then the real
 * reason the generation ended (stop, length), not "tool_calls"
 * (answer_ends_in_calls, answer_whole_t.cut): "tool_calls" / "tool_use"
 * only when every call begun was completed. Text before the first call stays
 * content; a cut before the name is complete leaves no call, only content.
 *
 * Ownership: part texts and names point into the answer_t (or into the text
 * fed) and are valid until the next answer_feed / answer_free.
 */
#ifndef PAGODA_GATEWAY_ANSWER_H
#define PAGODA_GATEWAY_ANSWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/oai_tools.h"

typedef enum answer_part_kind {
    ANSWER_REASONING,
    ANSWER_CONTENT,
    ANSWER_TOOL_BEGIN,
    ANSWER_TOOL_ARGS,
    ANSWER_TOOL_END,
} answer_part_kind_t;

typedef struct answer_part {
    answer_part_kind_t kind;
    const char *text;             /* REASONING, CONTENT, TOOL_ARGS: (len) bytes */
    size_t len;
    uint32_t i_call;              /* TOOL_*: the call's number in this choice */
    const char *id, *name;        /* TOOL_BEGIN: NUL-terminated */
} answer_part_t;

typedef struct answer answer_t;

/* One choice's answer. tool_names[0..n_tools) (borrowed, must outlive the
 * answer) are the request's tools, NULL = the answer is not parsed for
 * calls; `reasoning` = split <think>...</think> off the start. */
answer_t *answer_new(char *const *tool_names, size_t n_tools, bool reasoning);
void answer_free(answer_t **a);

/* How the EVENT fed ends its choice. */
typedef enum answer_end {
    ANSWER_MORE,                  /* more text follows */
    ANSWER_DONE,                  /* ended normally (stop, length): everything held back
                                     is decided now, tool calls included */
    ANSWER_FAILED,                /* ended with an error: reasoning is released, held-back
                                     content and calls are dropped */
} answer_end_t;

/* Adds text[0..len) (the next EVENT's text; borrowed) and returns the parts
 * it decides, in order, in *parts (n returned; owned by the answer, valid
 * until the next call). Not called again after an end other than MORE. */
size_t answer_feed(answer_t *a, const char *text, size_t len, answer_end_t end,
                   const answer_part_t **parts);

/* Calls the answer has begun so far. */
uint32_t answer_n_calls(const answer_t *a);

/* After the ANSWER_DONE feed: the answer ends in tool calls, i.e. at least
 * one call began and none was cut short (finish_reason "tool_calls",
 * stop_reason "tool_use"). False when the last call was cut by a stop string
 * or max_tokens: the worker's finish stands. */
bool answer_ends_in_calls(const answer_t *a);

/* A whole answer (non-streaming), split the same way. Pointers go into
 * `text`; calls are owned (answer_whole_clear frees them). */
typedef struct answer_whole {
    bool has_reasoning;           /* the answer started with <think> */
    const char *reasoning;        /* (reasoning_len) */
    size_t reasoning_len;
    const char *content;          /* what follows the reasoning, (content_len); with
                                     calls, only the text before them (trailing white
                                     space dropped) */
    size_t content_len;
    oai_tool_call_t *calls;       /* (n_calls), NULL = none */
    size_t n_calls;
    bool cut;                     /* the last call was cut short (stop string, max_tokens):
                                     its arguments are what was written; the finish is the
                                     worker's, not "tool_calls" */
} answer_whole_t;

/* w's calls are the answer's end (finish_reason "tool_calls"): as
 * answer_ends_in_calls. */
static inline bool answer_whole_ends_in_calls(const answer_whole_t *w)
{
    return w->n_calls > 0 && !w->cut;
}

/* Splits text[0..len). `parse_calls`: the answer ended normally (stop or
 * length), so it is parsed for tool calls (when tool_names is not NULL).
 * An answer cut inside a begun call gives the same calls, arguments and
 * content as the stream (answer_feed) would (`cut` set); otherwise the
 * calls are tool_format_extract's (tool_stream.h says where the two differ
 * on output that is not a well-formed call list). */
void answer_whole_split(const char *text, size_t len, char *const *tool_names, size_t n_tools,
                        bool reasoning, bool parse_calls, answer_whole_t *out);
void answer_whole_clear(answer_whole_t *w);

#endif
