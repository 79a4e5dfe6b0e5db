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
#define OAI_MAX_WARNING 512            /* bytes of request_t.warning */

/* ---- errors ------------------------------------------------------------ */

/* An OpenAI-shaped error: {"error":{"message","type","param","code"}}.
 * Filled by the parser and by oai_error_set(); no heap memory. */
typedef struct {
    int status;            /* HTTP status: 400, 401, 403, 404, 405, 413, 429, 500, 503, 504 */
    const char *type;      /* static string, e.g. "invalid_request_error" */
    const char *code;      /* static string or NULL → JSON null */
    char param[128];       /* offending field ("messages[2].content", "temperature"), "" → null */
    char message[512];     /* human-readable, names the field and the rule */
} oai_error_t;

/* Sets *e to `status` with the type and default code of the status table:
 *   400 invalid_request_error  (code null)
 *   401 authentication_error   invalid_api_key
 *   403 permission_error       insufficient_permissions
 *   404 not_found_error        not_found (model_not_found via oai_error_model_not_found)
 *   405 invalid_request_error  method_not_allowed
 *   413 invalid_request_error  request_too_large
 *   429 rate_limit_error       rate_limit_exceeded
 *   500 server_error           internal_error
 *   503 server_error           service_unavailable
 *   504 server_error           timeout
 * (other statuses: server_error, code null). `param` may be NULL. */
void oai_error_set(oai_error_t *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 404 for an unknown model, code "model_not_found", param "model". */
void oai_error_model_not_found(oai_error_t *e, const char *model);
/* A worker's typed error (proto/msg.h proto_err_t) as the client sees it —
 * the one table from wire cause to HTTP status and OpenAI code:
 *   bad_request     400 invalid_request_error  (code null)
 *   context_length  400 invalid_request_error  context_length_exceeded
 *   duplicate_id    400 invalid_request_error  (code null)
 *   unavailable     503 server_error           service_unavailable
 *   deadline        504 server_error           timeout
 *   engine          500 server_error           internal_error
 *   not_registered, unknown causes: 500 server_error internal_error */
void oai_error_from_worker(oai_error_t *e, proto_err_t cause, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* oai_error_set with a va_list and the OpenAI code given: `code` (a static
 * string) replaces the status table's unless NULL; param is null. */
void oai_error_vset(oai_error_t *e, int status, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
/* A JSON string from bytes that may not be UTF-8 (tokenizer output, model
 * text): invalid sequences become U+FFFD. New reference; the one such
 * constructor every surface's renderer uses. */
json_t *oai_json_text(const char *s, size_t len);
/* The error as the JSON object {"error":{"message","type","param","code"}}
 * (a new reference; strings sanitized to UTF-8) — the one encoder of the
 * OpenAI error shape, used for every error body the gateway writes. */
json_t *oai_error_object(const oai_error_t *e);
/* oai_error_object serialized (malloc'd). */
char *oai_error_json(const oai_error_t *e);

/* ---- requests ---------------------------------------------------------- */

typedef enum { REQUEST_CHAT = 0, REQUEST_COMPLETION = 1 } request_kind_t;

/* What a request asks of the worker: generation (the /v1 routes), or the
 * tokenizer alone (POST /tokenize, /detokenize; oai_parse_tokenizer). */
typedef enum {
    REQUEST_OP_GENERATE = 0,
    REQUEST_OP_TOKENIZE = 1,
    REQUEST_OP_DETOKENIZE = 2,
    REQUEST_OP_EMBED = 3,            /* POST /v1/embeddings (oai_parse_embeddings) */
    REQUEST_OP_RANK = 4,             /* POST /v1/rerank, /v1/score (gateway/rerank.h): prompt = the
                                    query, inputs = the documents (text) */
} request_op_t;

#define OAI_MAX_EMBED_INPUTS 128       /* inputs per /v1/embeddings request (= PROTO_MAX_CHOICES) */
#define OAI_MAX_EMBED_DIM 65536        /* `dimensions` upper bound (= PROTO_MAX_EMBED_DIM) */

/* One /v1/embeddings input: text, or token ids. */
typedef struct {
    char *text;                  /* NULL when given as token ids */
    size_t text_len;
    int32_t *ids;                /* (n_ids ≥ 1) ids 0..2^31-1, when text is NULL */
    size_t n_ids;
} request_embed_input_t;

typedef enum {
    REQUEST_ROLE_SYSTEM = 0,   /* "system", and "developer" (its newer name) */
    REQUEST_ROLE_USER = 1,
    REQUEST_ROLE_ASSISTANT = 2,
    REQUEST_ROLE_TOOL = 3,     /* a tool result fed back in; content only */
} request_role_t;

/* "system", "user", "assistant", "tool". */
const char *request_role_name(request_role_t r);

typedef struct {
    request_role_t role;
    char *content;         /* UTF-8, NUL-terminated; text parts joined with "\n"; "" allowed */
    size_t content_len;    /* bytes */
    char *name;            /* optional participant name, NULL if absent */
    char *tool_calls_json; /* assistant: its tool calls as a JSON array
                              [{"id","type":"function","function":{"name","arguments"}}]
                              with arguments parsed from the client's string when it
                              is JSON (kept a string otherwise); NULL if none */
    char *tool_call_id;    /* tool: the call it answers, NULL if absent */
} request_message_t;

typedef enum {
    REQUEST_TOOL_CHOICE_AUTO = 0,    /* the model decides (default when tools are given) */
    REQUEST_TOOL_CHOICE_NONE,        /* no call: tools are not announced to the model */
    REQUEST_TOOL_CHOICE_REQUIRED,    /* at least one call, enforced by a grammar */
    REQUEST_TOOL_CHOICE_NAMED,       /* a call of tool_choice_name, enforced by a grammar */
} request_tool_choice_t;

typedef struct {
    int32_t token;         /* token id ≥ 0 (checked against the vocabulary by the worker) */
    float bias;            /* [-100, 100], added to the logit */
} request_logit_bias_t;

/* A validated request. Strings are owned copies; free with request_free.
 * Defaults in brackets are what the parser stores when a field is absent or null. */
typedef struct {
    request_kind_t kind;
    char *model;                 /* required, 1..OAI_MAX_MODEL_BYTES */
    /* chat */
    request_message_t *messages;     /* (n_messages ≥ 1) */
    size_t n_messages;
    /* completion: exactly one of prompt / prompt_tokens is set */
    char *prompt;                /* text prompt, NULL when given as token ids */
    size_t prompt_len;
    int32_t *prompt_tokens;      /* (n_prompt_tokens) ids when given as an int array */
    size_t n_prompt_tokens;
    /* limits and sampling */
    int64_t max_tokens;          /* [-1 = not given: server default] max_completion_tokens wins over max_tokens */
    double temperature;          /* [1.0] 0..2; 0 means greedy */
    double top_p;                /* [1.0] (0, 1] */
    int32_t top_k;               /* [0 = off] ≥ 1 or off; -1 in the request also means off */
    double min_p;                /* [0.0] [0, 1] */
    double presence_penalty;     /* [0.0] [-2, 2] */
    double frequency_penalty;    /* [0.0] [-2, 2] */
    double repetition_penalty;   /* [1.0] > 0, ≤ 10 (vLLM extension) */
    bool has_seed;
    int64_t seed;
    char **stop;                 /* (n_stop ≤ OAI_MAX_STOP) non-empty strings */
    size_t n_stop;
    request_logit_bias_t *logit_bias; /* (n_logit_bias) */
    size_t n_logit_bias;
    bool logprobs;               /* [false] return logprobs of sampled tokens */
    int32_t top_logprobs;        /* [0] alternatives per token, 0..20
                                    (completions: the integer `logprobs` N sets logprobs=true, top_logprobs=N) */
    bool stream;                 /* [false] */
    bool include_usage;          /* [false] stream_options.include_usage */
    bool ignore_eos;             /* [false] vLLM extension */
    bool no_spec;                /* [false] `"speculative": false`: no speculative decoding
                                    for this request (pagoda extension) */
    int64_t n;                   /* [1] choices, 1..OAI_MAX_N */
    request_op_t op;                 /* [REQUEST_OP_GENERATE] */
    /* embeddings (op REQUEST_OP_EMBED) */
    request_embed_input_t *inputs;   /* (n_inputs, 1..OAI_MAX_EMBED_INPUTS) */
    size_t n_inputs;
    bool base64;                 /* [false] encoding_format "base64" (little-endian float32) */
    int64_t dimensions;          /* [0 = not given] 1..OAI_MAX_EMBED_DIM, checked by the worker */
    bool add_special;            /* tokenize: [true] BOS per the tokenizer's rule (text prompts) */
    char *user;                  /* NULL if absent */
    char *grammar;               /* GBNF text the output must match (constrained decoding):
                                    from `grammar`, or response_format json_object / json_schema
                                    compiled by common/grammar/json_schema.h; NULL = free text */
    /* tools (gateway/oai_tools.h) */
    char *tools_json;            /* compact JSON array of the tool objects, NULL = no tools */
    char **tool_names;           /* (n_tools) function names, in order */
    bool *tool_custom;           /* (n_tools) the tool is a custom tool (free-form input,
                                    gateway/oai_tools.h), NULL when none is */
    size_t n_tools;
    request_tool_choice_t tool_choice; /* [auto] */
    char *tool_choice_name;      /* NAMED: the function, else NULL */
    bool parallel_tool_calls;    /* [true] more than one call per answer allowed */
    /* chat_template_kwargs (chat only; other keys are ignored) */
    bool has_enable_thinking;    /* enable_thinking given */
    bool enable_thinking;        /* its value, when has_enable_thinking */
    /* what a surface left out of the request rather than refusing it (hosted
     * tools it cannot run, ...): logged and sent back in the X-Pagoda-Warning
     * response header; NULL = nothing (< OAI_MAX_WARNING bytes) */
    char *warning;
    /* cache-aware routing affinity (Responses `prompt_cache_key`): requests
     * with the same key go to the same replica; NULL = none */
    char *affinity_key;
    /* vLLM's `cache_salt` (every generation surface): 1..PARTITION_SALT_MAX
     * bytes that narrow the caller's prefix-cache partition (gateway/
     * partition.h); NULL = none */
    char *cache_salt;
} request_t;

/* Appends "what" to a warning buffer (cap bytes, NUL-terminated) under a
 * heading: "HEADING: a, b, c" (the heading is written once, before the
 * first item; a second heading starts "; HEADING2: ..."). Truncates. */
void request_warning_add(char *warn, size_t cap, const char *heading, const char *what);

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
/* Frees what the parser allocated and zeroes *r. NULL-safe. */
void request_free(request_t *r);

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

/* The operator's limits, tighter than the parser's fixed ones (config
 * limits.max_messages ≤ OAI_MAX_MESSAGES, limits.max_prompt_bytes ≤
 * OAI_MAX_TEXT_BYTES): chat messages per request, and bytes of text (all
 * message contents, or a text prompt). 0 = that limit is off. Returns 0, or
 * -1 with a 400 in *err. */
int request_check_limits(const request_t *r, size_t max_messages, size_t max_text_bytes,
                             oai_error_t *err);

/* ---- responses --------------------------------------------------------- */

/* Writes "<prefix><24 random hex>" + NUL into out (cap ≥ strlen(prefix)+25),
 * e.g. prefix "chatcmpl-" or "cmpl-". Random from getrandom(2). */
void oai_id_new(const char *prefix, char *out, size_t cap);

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
