/* api_surface.h — the seam between the HTTP transport (gateway/http.c) and
 * one HTTP API's JSON: an "API surface".
 *
 * pagoda serves several APIs over ONE internal request: request_t
 * (gateway/request.h: messages, tools, tool_choice, response format / grammar,
 * sampling, limits, stream), which gateway/submit.c turns into the SUBMIT a
 * worker runs. A surface translates its API's request body into that
 * internal request and the core's replies (gateway_reply_t: EVENTs and
 * ERRORs) back into its API's JSON — and nothing else: transport, auth,
 * limits, queueing, suspend/resume and the hang-up watcher stay in http.c
 * (and its http_guard.c, http_routes.c, http_respond.c),
 * the split of an answer into reasoning / content / tool calls is shared
 * (gateway/answer.h).
 *
 *   surface            file                   routes
 *   oai_surface        gateway/oai_stream.c   /v1/chat/completions, /v1/completions,
 *                                             /v1/batch/..., /v1/embeddings,
 *                                             /tokenize, /detokenize
 *   rerank_surface     gateway/rerank.c       /v1/rerank (+ /rerank, /v2/rerank, /v1/reranking,
 *                                             /reranking)
 *   score_surface      gateway/rerank.c       /v1/score, /score
 *   anthropic_surface  gateway/anthropic.c    /v1/messages, /v1/messages/count_tokens
 *   responses_surface  gateway/responses.c    POST /v1/responses (its GET / DELETE /
 *                                             input_items routes are plain handlers
 *                                             over the stored responses)
 *
 * A new API = one translation file defining a const api_surface_t, plus one
 * route line in http_routes.c's route table naming it, as
 *   {"POST", "/v1/messages", NULL, AUTH_KEY, REQUEST_CHAT, false, REQUEST_OP_GENERATE,
 *    &anthropic_surface},
 * and its docs (docs/API.md). docs/ARCHITECTURE.md "A new endpoint" walks
 * through it.
 *
 * Life of a request on a surface route (all on HTTP threads):
 *   1. parse(call, body) → internal request `o`, or an error (rendered with
 *      error_body). http.c then checks the server's limits on `o`, takes the
 *      tool names out of it into call->tool_names, sets call->reasoning, and
 *   2. begin(call, o): the surface keeps what it renders from (ids, options;
 *      its own state in call->state). `o` is freed after begin.
 *   3. Streaming (call->stream): stream_event(call, reply, out) for every
 *      reply, in order, appends the bytes to send (SSE framing included;
 *      api_sse helps); it sets call->done with the stream's last bytes.
 *      An ERROR before the first EVENT is answered with error_body instead
 *      (no stream has started: a plain error response).
 *   4. Not streaming: complete(call, events) once every choice has its final
 *      EVENT (or one failed) → status and body.
 *   5. end(call) frees call->state (always, once, also when the client left).
 * Waiting: a surface whose answer must wait for work of its own (the
 * Responses API commits a stored response before answering) starts it,
 * sets call->waiting and returns (complete: NULL; stream_event: the bytes
 * so far, done false). Its work calls call->wake(call->wake_ctx) from any
 * thread when it is finished; http.c suspends the connection meanwhile (no
 * HTTP thread waits) and then calls complete() again with the same events,
 * or stream_event() with a NULL reply, until waiting is false. end() must
 * make sure wake is not called after it returns.
 * Every error a surface route answers — auth, 413, 415, 429, 503, refusals
 * of the worker — goes through error_body, so a client sees its own API's
 * error shape.
 */
#ifndef PAGODA_GATEWAY_API_SURFACE_H
#define PAGODA_GATEWAY_API_SURFACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"
#include "gateway/gateway.h"
#include "gateway/oai.h"

struct resp_store;

/* A stream's bytes go into a strbuf_t (common/strbuf.h) the caller owns.
 * One SSE event: "event: NAME\n" (when event is not NULL), "data: JSON\n\n".
 * Takes json (malloc'd). */
void api_sse(strbuf_t *b, const char *event, char *json);

/* Helpers over the core's replies, for every surface's renderer. */
/* A final EVENT that failed (finish error or timeout). */
bool api_finish_failed(proto_finish_t f);
/* The usage of a final EVENT (its usage block; without one, its n). */
void api_event_usage(const proto_event_t *ev, oai_usage_t *u);
/* The error of a failed final EVENT. A complete body names the deadline
 * (timeout_s >= 0); a stream (timeout_s < 0) says only that it ran past it. */
void api_event_error(const proto_event_t *ev, oai_error_t *e, int64_t timeout_s);
/* The text of events[0..n) joined in order (malloc'd, NUL-terminated,
 * *len bytes). */
char *api_events_text(gateway_reply_t *const *events, size_t n, size_t *len);

/* One generation request as its surface renders it. http.c fills the
 * fields above `state`; the surface owns `state` and sets `done`. */
typedef struct api_call {
    /* from the route */
    request_kind_t kind;              /* REQUEST_CHAT / REQUEST_COMPLETION */
    request_op_t op;                  /* generate, embed, tokenize, detokenize, rank */
    /* from the internal request (after parse) */
    char *model;                  /* owned by http.c */
    int64_t created;              /* wall clock, s */
    bool stream;
    uint32_t n_choices;           /* choices (n), or inputs for embeddings and rank */
    bool want_logprobs;           /* the request asked for logprobs */
    char **tool_names;            /* (n_tools) the request's tools when the answer is
                                     parsed for calls (tools announced, tool_choice not
                                     none), else NULL; owned by http.c */
    bool *tool_custom;            /* (n_tools) which of them are custom tools (free-form
                                     input, oai_tools.h), NULL = none; owned by http.c */
    size_t n_tools;
    bool reasoning;               /* the server splits <think>...</think> off chat answers */
    int64_t request_timeout_s;    /* --request-timeout, for error messages */
    /* from the server, for surfaces that keep state (set before parse) */
    const char *owner;            /* who calls: the API key's SHA-256 in hex, or
                                     RESP_STORE_ANON without a keys file (http.c's) */
    struct resp_store *store;     /* stored responses (resp_store.h), NULL = none */
    bool keep_volatile;           /* --keep-volatile-blocks: surfaces keep the agents'
                                     volatile prompt blocks (volatile_block.h) */
    char *warning;                /* what the request left out (request_t.warning),
                                     sent as X-Pagoda-Warning; owned by http.c */
    void (*wake)(void *ctx);      /* "Waiting" above: what the surface's work calls when it
                                     is finished (http.c's, any thread) */
    void *wake_ctx;
    /* the surface's */
    void *state;                  /* per-request render state, freed by end() */
    bool done;                    /* stream: its last bytes are written */
    bool waiting;                 /* "Waiting": call again once woken */
} api_call_t;

typedef struct api_surface {
    const char *name;             /* "openai", for logs */
    /* body[0..len) (hostile, not NUL-terminated) → *o. Returns 0, or -1 with
     * *e (status, type, code, message) filled. call->kind/op/owner/store are
     * set. A surface whose API carries more than the internal request (the
     * Responses API: input items, the stored conversation, echoed fields) may
     * set call->state here; end() frees it once parse returned 0 — a parse
     * that fails leaves call->state NULL. */
    int (*parse)(api_call_t *call, const uint8_t *body, size_t len, request_t *o,
                 oai_error_t *e);
    /* After parse: keep what rendering needs (may take fields out of o,
     * leaving them NULL), set call->state. */
    void (*begin)(api_call_t *call, request_t *o);
    /* Streaming: appends the bytes for one reply (taken: free it with
     * gateway_reply_free) to out; sets call->done with the last bytes. */
    void (*stream_event)(api_call_t *call, gateway_reply_t *rep, strbuf_t *out);
    /* Not streaming: the body for events[0..n) (borrowed, in arrival order;
     * the last is a final EVENT), malloc'd, with its HTTP status in *status. */
    char *(*complete)(api_call_t *call, gateway_reply_t *const *events, size_t n, int *status);
    /* The body of an error response in this API's shape (status = e->status),
     * malloc'd. Also used for refusals before parse (auth, 413, 415, 429). */
    char *(*error_body)(const oai_error_t *e);
    /* Frees call->state (NULL-safe). */
    void (*end)(api_call_t *call);
} api_surface_t;

#endif
