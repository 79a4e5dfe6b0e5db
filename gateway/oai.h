/* oai.h — the OpenAI-compatible request/response layer of the gateway.
 *
 * Parsing: oai_parse_request() turns the body of POST /v1/chat/completions or
 * POST /v1/completions into an request_t, validating every field it knows
 * (types, ranges, sizes). Unknown fields are ignored, like OpenAI does. Known
 * fields we cannot honour (n > 1, echo, tools, image parts, multiple prompts…)
 * are refused with a 400 naming the field rather than silently ignored. The
 * body is hostile input: JSON nesting deeper than OAI_MAX_DEPTH is refused
 * before jansson sees it (no recursion blow-up), duplicate keys are refused,
 * strings must be valid UTF-8 without NUL (jansson checks), and every string
 * and array has a size bound below. The HTTP layer bounds the body size (413).
 *
 * Response building: the oai_*_json() builders return malloc'd, NUL-terminated
 * compact JSON (caller frees with free()); they never fail on valid arguments
 * (out of memory aborts). Text handed to them may come from a tokenizer and is
 * not trusted to be UTF-8: invalid sequences are replaced by U+FFFD.
 * Logprob values that are -inf/NaN (impossible tokens) are written as -9999.0
 * since JSON has no infinities.
 *
 * Field names follow the OpenAI API reference (chat.completion,
 * chat.completion.chunk, text_completion, model list, error object).
 */
#ifndef PAGODA_GATEWAY_OAI_H
#define PAGODA_GATEWAY_OAI_H

#include <jansson.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/oai_error.h"
#include "gateway/oai_tools.h"
#include "gateway/request.h"
#include "proto/msg.h"

/* ---- limits ------------------------------------------------------------ */

#define OAI_MAX_DEPTH 32               /* JSON nesting of the whole body */
/* Every limit here is at most the matching proto/msg.h limit of a SUBMIT (checked
 * by _Static_assert in submit.c): a request the gateway accepts must reach the
 * worker, or the worker drops the SUBMIT and the client waits for nothing. */
#define OAI_MAX_MESSAGES 1024          /* chat messages per request (= PROTO_MAX_MESSAGES) */
#define OAI_MAX_CONTENT_PARTS 256      /* content parts per message */
#define OAI_MAX_TEXT_BYTES (4u << 20)  /* one message / the prompt / all messages together */
#define OAI_MAX_MODEL_BYTES 256
#define OAI_MAX_USER_BYTES 1024
#define OAI_MAX_NAME_BYTES 256         /* message "name" */
#define OAI_MAX_STOP 16                /* stop strings */
#define OAI_MAX_N 128                  /* n: choices per request (= PROTO_MAX_CHOICES) */
#define OAI_MAX_STOP_BYTES 1024        /* per stop string */
#define OAI_MAX_LOGIT_BIAS 1024        /* logit_bias entries */
#define OAI_MAX_PROMPT_TOKENS (1u << 20) /* token-id prompts */
#define OAI_MAX_TOP_LOGPROBS 20
#define OAI_MAX_MAX_TOKENS 1000000     /* max_tokens upper bound (the context limit is checked later) */
#define OAI_MAX_GRAMMAR_BYTES (256u << 10) /* `grammar` text; a compiled schema may reach GBNF_MAX_TEXT */

/* ---- errors (the record: gateway/oai_error.h) ---------------------------- */

/* The error as the JSON object {"error":{"message","type","param","code"}}
 * (a new reference; strings sanitized to UTF-8) — the one encoder of the
 * OpenAI error shape, used for every error body the gateway writes. */
json_t *oai_error_object(const oai_error_t *e);
/* oai_error_object serialized (malloc'd). */
char *oai_error_json(const oai_error_t *e);

/* ---- requests ---------------------------------------------------------- */

/* Parses and validates. Returns 0 and fills *out (release with
 * request_free), or -1 with *err filled (status 400, type
 * invalid_request_error, param naming the field) and *out left empty (nothing
 * to free, but request_free on it is harmless). */
int oai_parse_request(const uint8_t *body, size_t len, request_kind_t kind, request_t *out,
                      oai_error_t *err);
/* The other API surfaces (gateway/anthropic.h, gateway/responses.h) translate
 * their bodies into a chat-completions JSON object and validate it here, so
 * the one internal request is checked by one parser:
 * oai_load_body returns the body as a JSON object (a new reference; NULL with
 * a 400 in *err: empty, nested deeper than OAI_MAX_DEPTH, invalid, duplicate
 * keys, not an object); oai_parse_chat_root is oai_parse_request(REQUEST_CHAT)
 * on such an object (root is borrowed). */
json_t *oai_load_body(const uint8_t *body, size_t len, oai_error_t *err);
int oai_parse_chat_root(json_t *root, request_t *out, oai_error_t *err);

/* POST /tokenize and /detokenize bodies (vLLM's shapes), into the same
 * request type (op set, kind COMPLETION unless "messages" is given):
 *   tokenize:   {"model", "prompt": str | "messages": [...] (chat template applied),
 *                "add_special_tokens" | "add_special": bool [true]}
 *   detokenize: {"model", "tokens": [int 0..2^31-1, ≤ OAI_MAX_PROMPT_TOKENS]}
 * Unknown fields are ignored. Returns 0, or -1 with a 400 in *err. */
int oai_parse_tokenizer(const uint8_t *body, size_t len, request_op_t op, request_t *out,
                        oai_error_t *err);

/* POST /v1/embeddings body (OpenAI's shape) into the same request type (op
 * REQUEST_OP_EMBED, kind COMPLETION):
 *   {"model", "input": str | [str, ...] | [int, ...] | [[int, ...], ...],
 *    "encoding_format": "float" | "base64" [float], "dimensions": int, "user": str}
 * Strings must be non-empty (≤ OAI_MAX_TEXT_BYTES in all), token arrays
 * non-empty (ids 0..2^31-1, ≤ OAI_MAX_PROMPT_TOKENS in all), at most
 * OAI_MAX_EMBED_INPUTS inputs; unknown fields are ignored. Returns 0, or -1
 * with a 400 in *err. */
int oai_parse_embeddings(const uint8_t *body, size_t len, request_t *out, oai_error_t *err);

/* One embedding of an /v1/embeddings answer: (dim) floats. */
typedef struct {
    const float *v;
    size_t dim;
} oai_embedding_t;

/* The /v1/embeddings answer (malloc'd JSON):
 * {"object":"list","data":[{"object":"embedding","index":i,"embedding":[floats] |
 *  "base64 of little-endian float32"}],"model","usage":{"prompt_tokens","total_tokens"}}.
 * NULL when a value is not finite (the caller answers 500). */
char *oai_embeddings_json(const char *model, const oai_embedding_t *emb, size_t n, bool base64,
                          uint64_t prompt_tokens);


/* ---- responses --------------------------------------------------------- */

/* (ids: oai_id_new, gateway/oai_tools.h) */

/* Fields common to every response object of one request. */
typedef struct {
    const char *id;                 /* "chatcmpl-…" / "cmpl-…" */
    const char *model;
    int64_t created;                /* Unix seconds (clock_wall_s) */
    const char *system_fingerprint; /* NULL → JSON null */
} oai_meta_t;

typedef struct {
    int64_t prompt_tokens;
    int64_t completion_tokens;
    int64_t cached_tokens;          /* prompt tokens served from the prefix cache */
} oai_usage_t;

/* One alternative at a position. `token` is the token's text as raw bytes
 * (may be a partial UTF-8 sequence). */
typedef struct {
    const char *token;
    size_t token_len;
    double logprob;
} oai_top_logprob_t;

/* One sampled token with its logprob and top alternatives. */
typedef struct {
    const char *token;
    size_t token_len;
    double logprob;
    const oai_top_logprob_t *top;   /* (n_top) most likely first */
    size_t n_top;
} oai_token_logprob_t;

/* Logprobs for a run of tokens, or "none requested" (present = false → JSON null). */
typedef struct {
    bool present;
    const oai_token_logprob_t *tokens; /* (n_tokens) */
    size_t n_tokens;
    int64_t text_offset0;           /* completions only: text offset of the first token,
                                       in Unicode code points (the stream's running offset) */
} oai_logprobs_t;

/* Chat shape:   {"content":[{"token","logprob","bytes":[..],"top_logprobs":[{"token","logprob","bytes"}]}],
 *                "refusal":null}
 * Legacy shape: {"tokens":[..],"token_logprobs":[..],"top_logprobs":[{"tok":lp,..}],"text_offset":[..]}
 * Token strings are sanitized to UTF-8; "bytes" always carries the raw bytes. */
char *oai_logprobs_chat_json(const oai_logprobs_t *lp);
char *oai_logprobs_completion_json(const oai_logprobs_t *lp);

/* Non-streaming chat completion:
 * {"id","object":"chat.completion","created","model","system_fingerprint",
 *  "choices":[{"index":0,"message":{"role":"assistant","content"},"logprobs","finish_reason"}],
 *  "usage":{"prompt_tokens","completion_tokens","total_tokens","prompt_tokens_details":{"cached_tokens"}}} */
char *oai_chat_completion_json(const oai_meta_t *meta, const char *content, size_t content_len,
                               const char *finish_reason, const oai_logprobs_t *lp,
                               const oai_usage_t *usage);
/* Non-streaming text completion: same envelope, "object":"text_completion",
 * choices [{"text","index":0,"logprobs","finish_reason"}]. */
char *oai_completion_json(const oai_meta_t *meta, const char *text, size_t text_len,
                          const char *finish_reason, const oai_logprobs_t *lp, const oai_usage_t *usage);

/* One choice of a non-streaming answer (n > 1: several, index = position). */
typedef struct {
    const char *text;               /* message content / completion text (text_len bytes) */
    size_t text_len;
    const char *finish_reason;
    const oai_logprobs_t *logprobs; /* NULL or !present → null */
} oai_choice_t;

/* The same envelopes with n choices, "index" 0..n-1 in order; usage covers
 * all of them (completion_tokens summed by the caller). */
char *oai_chat_completion_n_json(const oai_meta_t *meta, const oai_choice_t *choices, size_t n,
                                 const oai_usage_t *usage);
char *oai_completion_n_json(const oai_meta_t *meta, const oai_choice_t *choices, size_t n,
                            const oai_usage_t *usage);

/* One streaming chunk (the JSON after "data: "). */
typedef struct {
    int32_t index;              /* choices[0].index: which of the n choices (0 with n = 1) */
    bool role;                  /* chat: put "role":"assistant" in the delta (first chunk) */
    const char *text;           /* delta content / completion text; NULL → chat delta has no
                                   "content", completion "text" is "" */
    size_t text_len;
    const char *finish_reason;  /* NULL → null (every chunk but the last of a choice) */
    const oai_logprobs_t *logprobs; /* NULL or !present → null */
    /* stream_options.include_usage: every chunk carries "usage":null, and the
     * extra final chunk (usage != NULL) has "choices":[] and the totals. */
    bool include_usage;
    const oai_usage_t *usage;   /* non-NULL → this is the usage-only chunk */
} oai_chunk_t;

/* {"id","object":"chat.completion.chunk","created","model","system_fingerprint",
 *  "choices":[{"index":0,"delta":{["role"],["content"]},"logprobs","finish_reason"}][, "usage"]}
 * The usual sequence: {role, text ""} → {text "…"}… → {finish_reason, empty delta}
 * → (include_usage) {usage} → the HTTP layer writes "data: [DONE]". */
char *oai_chat_chunk_json(const oai_meta_t *meta, const oai_chunk_t *c);
/* {"id","object":"text_completion","created","model","system_fingerprint",
 *  "choices":[{"index":0,"text","logprobs","finish_reason"}][, "usage"]} */
char *oai_completion_chunk_json(const oai_meta_t *meta, const oai_chunk_t *c);

/* GET /v1/models: {"object":"list","data":[{"id","object":"model","created","owned_by",
 * "max_model_len"?}]} (max_model_len omitted when ≤ 0). */
typedef struct {
    const char *id;
    int64_t created;
    const char *owned_by;        /* NULL → "pagoda" */
    int64_t max_model_len;
} oai_model_info_t;
char *oai_models_json(const oai_model_info_t *models, size_t n);

#endif
