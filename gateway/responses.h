/* responses.h — the OpenAI Responses API surface (POST /v1/responses,
 * GET/DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items).
 *
 * In: the body is translated into a chat-completions JSON object and
 * validated by oai_parse_chat_root (the one internal request):
 *
 *   model                                   model
 *   instructions                            a first "system" message (not carried
 *                                           over by previous_response_id, as OpenAI)
 *   input: string                           one user message
 *   input: items                            message {role user|assistant|system|developer,
 *                                           content string | input_text/output_text parts}
 *                                           (type may be left out); function_call
 *                                           {call_id, name, arguments} → the assistant's
 *                                           tool_calls; function_call_output {call_id,
 *                                           output} → a "tool" message; reasoning: dropped;
 *                                           input_image, input_file, item_reference,
 *                                           other types → 400
 *   previous_response_id                    the stored conversation of that response
 *                                           (its context, input and output items) goes first
 *   tools [{type:"function", name, description, parameters, strict}]  function tools;
 *                                           strict defaults to true here (as OpenAI's
 *                                           Responses API; chat's default is false);
 *                                           other tool types → 400
 *   tool_choice "auto"|"none"|"required"|{type:"function",name}
 *   parallel_tool_calls, temperature, top_p, seed, stream, user
 *   text.format {type text|json_object|json_schema{name, schema, strict}}  response_format
 *   max_output_tokens                       max_tokens
 *   reasoning {effort}                      enable_thinking: false for "none"/"minimal",
 *                                           true otherwise; absent: the model's default
 *   metadata (≤ 16 string values)           echoed and stored
 *   store [true]                            keep the response (gateway/resp_store.h)
 *   truncation "disabled" (others → 400), background true → 400, conversation,
 *   prompt → 400; include, service_tier, prompt_cache_key, safety_identifier: ignored
 *
 * Out: output items reasoning {content [reasoning_text]}, message {content
 * [output_text]}, function_call {call_id "call_…", arguments}; status
 * completed, incomplete (incomplete_details.reason "max_output_tokens") or
 * failed (error {code, message}); usage {input_tokens, input_tokens_details
 * {cached_tokens}, output_tokens, output_tokens_details {reasoning_tokens 0},
 * total_tokens}. Streaming: response.created, response.in_progress, per item
 * response.output_item.added / (content_part.added, output_text.delta…,
 * output_text.done, content_part.done | reasoning_text.* |
 * function_call_arguments.delta, .done) / output_item.done, then
 * response.completed (or .incomplete / .failed); every event carries
 * sequence_number. An error before the answer is an OpenAI error body.
 */
#ifndef PAGODA_GATEWAY_RESPONSES_H
#define PAGODA_GATEWAY_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/api_surface.h"
#include "gateway/oai.h"
#include "gateway/resp_store.h"
#include "proto/msg.h"

#define RESPONSES_MAX_ITEMS 1024        /* input items per request (context included) */
#define RESPONSES_MAX_METADATA 16       /* metadata keys */

/* Looks up previous_response_id: 0 with *context (a new reference to the
 * JSON array of its conversation items), 1 when there is none for this
 * caller, -1 on a storage error. */
typedef int (*responses_load_fn)(void *ctx, const char *id, json_t **context);

/* A parsed request: the internal request and what the response repeats. */
typedef struct responses_request {
    request_t chat;          /* the internal request */
    json_t *input;               /* this request's input items, normalized, each with an id */
    json_t *context;             /* the conversation before the answer: previous context
                                    + input (stored as the next context with the output) */
    json_t *echo;                /* request fields the response object repeats */
    json_t *tool_map;            /* the model's name of each custom or namespaced tool →
                                    {"name", "namespace"?, "custom": bool, "model_name"} */
    bool store;                  /* [true] */
    char *previous_id;           /* previous_response_id (malloc'd), NULL = none */
    size_t n_previous;           /* context[0, n_previous) came from it */
} responses_request_t;

/* Parses a POST /v1/responses body. `load` resolves previous_response_id
 * (NULL: any previous_response_id is "not found"). Returns 0 (release with
 * responses_request_free), or -1 with *err filled: 400, or 404 for an
 * unknown previous_response_id, 500 when the store failed. */
int responses_parse_request(const uint8_t *body, size_t len, responses_load_fn load, void *load_ctx,
                            responses_request_t *out, oai_error_t *err);
void responses_request_free(responses_request_t *r);

/* How the answer is turned into a response and where it is kept. */
typedef struct responses_meta {
    const char *id;              /* "resp_…" */
    const char *model;
    int64_t created;             /* Unix seconds */
    bool reasoning;              /* --reasoning-parser on */
    char *const *tool_names;     /* (n_tools) calls are parsed when not NULL */
    size_t n_tools;
    resp_store_t *store;         /* NULL: nothing is stored */
    const char *owner;           /* the API key's hash (RESP_STORE_ANON without keys) */
    void (*wake)(void *ctx);     /* streaming: the store is asynchronous and calls this when
                                    it has answered (then responses_stream_resume); NULL:
                                    responses_stream_event waits for it */
    void *wake_ctx;
} responses_meta_t;

/* Non-streaming: the response object for the whole answer (stored when
 * req->store and m->store, waiting for the store; a store that fails makes
 * it "store": false with a "warning" {code, message}, docs/API.md). finish
 * is the last EVENT's. Malloc'd JSON. */
char *responses_complete_json(const responses_meta_t *m, const responses_request_t *req, const char *text,
                              size_t len, proto_finish_t finish, const oai_usage_t *usage);

/* Streaming, one per request: copies what it needs from m and req (takes
 * references to req's JSON; m's tool names are borrowed and must outlive
 * the stream). SSE bytes are appended to out. */
typedef struct responses_stream responses_stream_t;
responses_stream_t *responses_stream_new(const responses_meta_t *m, const responses_request_t *req);
void responses_stream_free(responses_stream_t **st);
/* One EVENT; returns true when the stream is complete (and the response
 * stored). With m->wake, the final EVENT may return false with the store
 * in flight (responses_stream_waiting): once wake was called,
 * responses_stream_resume writes the last event. */
bool responses_stream_event(responses_stream_t *st, const proto_event_t *ev, strbuf_t *out);
bool responses_stream_resume(responses_stream_t *st, strbuf_t *out);
bool responses_stream_waiting(const responses_stream_t *st);
/* A failure after the stream started: response.failed. Completes it;
 * nothing is stored. */
void responses_stream_error(responses_stream_t *st, const oai_error_t *e, strbuf_t *out);

/* The surface (api_surface.h) of POST /v1/responses: call->store and
 * call->owner resolve previous_response_id and keep the answer. */
extern const api_surface_t responses_surface;

/* The stored-response routes, answered from the store for `owner`: the
 * body (malloc'd; an OpenAI error object when *status is not 200).
 *   RESPONSES_GET          GET /v1/responses/{id}: the response as answered
 *   RESPONSES_INPUT_ITEMS  GET /v1/responses/{id}/input_items: {"object":"list",
 *                          "data":[its input items],"first_id","last_id",
 *                          "has_more":false}; newest first unless asc
 *   RESPONSES_DELETE       DELETE /v1/responses/{id}: {"id","object":"response",
 *                          "deleted":true}
 * 404 when there is no such response for this owner (never made, deleted,
 * expired, or another key's), 503 without a store, 500 on a storage error. */
typedef enum { RESPONSES_GET, RESPONSES_INPUT_ITEMS, RESPONSES_DELETE } responses_op_t;
char *responses_stored(resp_store_t *store, const char *owner, const char *id, responses_op_t op, bool asc,
                       int *status);

#endif
