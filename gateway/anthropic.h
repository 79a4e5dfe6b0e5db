/* anthropic.h — the Anthropic Messages API surface (POST /v1/messages,
 * POST /v1/messages/count_tokens).
 *
 * In: a Messages body is translated into a chat-completions JSON object and
 * validated by oai_parse_chat_root, so it becomes the one internal request
 * (request_t) every surface submits; nothing here talks to workers.
 *
 *   model, max_tokens (required, ≥ 1)     model, max_tokens
 *   system: string | [text blocks]        a first "system" message, without the
 *                                         volatile blocks of volatile_block.h (Claude
 *                                         Code's billing header) unless kept
 *   messages[].role user | assistant      user | assistant
 *                   | system              a "system" message where it stands (the
 *                                         chat template renders or folds it)
 *   messages[].content: string | blocks   text → content (blocks joined by "\n");
 *                                         tool_use (assistant) → tool_calls (input
 *                                         as arguments); tool_result (user) → a
 *                                         "tool" message per block (string or text
 *                                         blocks; is_error prefixes "Error: ");
 *                                         thinking / redacted_thinking: dropped;
 *                                         image, document, others → 400
 *   stop_sequences, temperature (0..1), top_p, top_k, stream
 *   metadata.user_id                      user
 *   tools [{name, description, input_schema}]  function tools; Anthropic-defined
 *                                         tools (a versioned "type": web_search_*,
 *                                         bash_*, ...) are left out with a warning
 *                                         (out->warning), 400 if tool_choice names one
 *   tool_choice auto | any | tool{name} | none  auto | required | named | none;
 *     disable_parallel_tool_use           parallel_tool_calls false
 *   thinking enabled | adaptive           chat_template_kwargs.enable_thinking true
 *            | disabled | absent          | false (Anthropic's default is off);
 *                                         enabled needs budget_tokens >= 1024; a
 *                                         budget >= max_tokens is accepted (as with
 *                                         interleaved thinking): max_tokens bounds
 *                                         both; "display" is accepted
 *   output_config.effort                  accepted (one effort here)
 *   output_config.format json_schema      response_format json_schema
 *   context_management, cache_control,    accepted and ignored (no server-side edits;
 *   anthropic-beta, ?beta=true            the prefix cache is automatic)
 *   mcp_servers, container                400 (not served here)
 * Unknown fields are ignored, as Anthropic does.
 *
 * Out: the answer's parts (gateway/answer.h) become content blocks —
 * thinking (signature ""), text, tool_use (id "toolu_…", input object) —
 * with stop_reason end_turn | max_tokens | stop_sequence (stop_sequence = the
 * string, from the EVENT's `stop`) | tool_use, and
 * usage {input_tokens = prompt − cached, output_tokens,
 * cache_creation_input_tokens 0, cache_read_input_tokens = cached}: input
 * tokens as Anthropic counts them, the prefix cache's hits as cache reads.
 *
 * Streaming: message_start, ping, then per block content_block_start,
 * content_block_delta (text_delta | thinking_delta | input_json_delta),
 * content_block_stop; message_delta {stop_reason, stop_sequence, usage
 * {output_tokens, input_tokens, cache_read_input_tokens}}; message_stop.
 * A failure after the stream started is an `error` event; nothing follows.
 *
 * Errors: {"type":"error","error":{"type","message"}} with type by status:
 * 400/405/413/415 invalid_request_error (413 request_too_large), 401
 * authentication_error, 403 permission_error, 404 not_found_error, 429
 * rate_limit_error, 503 overloaded_error, 500/502/504 and others api_error.
 */
#ifndef PAGODA_GATEWAY_ANTHROPIC_H
#define PAGODA_GATEWAY_ANTHROPIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/api_surface.h"
#include "gateway/oai.h"
#include "proto/msg.h"

/* Parses a /v1/messages body into *out. flags: ANTHROPIC_PARSE_COUNT (a
 * /v1/messages/count_tokens body: max_tokens not required, op
 * REQUEST_OP_TOKENIZE, no constraint), ANTHROPIC_PARSE_KEEP_VOLATILE (keep the
 * volatile system blocks of gateway/volatile_block.h, dropped otherwise).
 * Returns 0 (request_free releases it; out->warning says what was left
 * out), or -1 with a 400 in *err and nothing to free. */
#define ANTHROPIC_PARSE_COUNT 1u
#define ANTHROPIC_PARSE_KEEP_VOLATILE 2u
int anthropic_parse_request(const uint8_t *body, size_t len, unsigned flags, request_t *out,
                            oai_error_t *err);

/* The error in Anthropic's shape (malloc'd JSON). */
char *anthropic_error_json(const oai_error_t *e);
/* Anthropic's error type for an HTTP status (table above). */
const char *anthropic_error_type(int status);

/* What a response says about its request. */
typedef struct anthropic_meta {
    const char *id;          /* "msg_…" */
    const char *model;
    bool reasoning;          /* split <think>…</think> into thinking blocks */
    char *const *tool_names; /* (n_tools) calls are parsed when not NULL */
    size_t n_tools;
    char *const *stop;       /* (n_stop) the request's stop_sequences, for stop_sequence */
    size_t n_stop;
} anthropic_meta_t;

/* Non-streaming: the message object for the whole answer text.
 * finish and stop are the last EVENT's (STOP or LENGTH; stop = 1 + index
 * of the stop string that ended it, 0 = none). Malloc'd JSON. */
char *anthropic_message_json(const anthropic_meta_t *m, const char *text, size_t len,
                             proto_finish_t finish, uint32_t stop, const oai_usage_t *usage);

/* {"input_tokens": n} for count_tokens. */
char *anthropic_count_json(int64_t n);

/* Streaming: one per request; the SSE bytes of each EVENT are appended to
 * out. meta's strings are copied; its tool names are borrowed and must
 * outlive the stream. */
typedef struct anthropic_stream anthropic_stream_t;
anthropic_stream_t *anthropic_stream_new(const anthropic_meta_t *m);
void anthropic_stream_free(anthropic_stream_t **st);
/* One EVENT (text delta; finish and usage on the last). Returns true when
 * the stream is complete (message_stop or error written). */
bool anthropic_stream_event(anthropic_stream_t *st, const proto_event_t *ev, strbuf_t *out);
/* A failure: an `error` event. Always completes the stream. */
void anthropic_stream_error(anthropic_stream_t *st, const oai_error_t *e, strbuf_t *out);

/* The surface (api_surface.h) of POST /v1/messages, and of
 * POST /v1/messages/count_tokens with the route's op REQUEST_OP_TOKENIZE. */
extern const api_surface_t anthropic_surface;

#endif
