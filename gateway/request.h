/* request.h — the one internal request every API surface parses into.
 *
 * OpenAI chat/completions (gateway/oai.c), the Anthropic Messages API
 * (gateway/anthropic.c) and the OpenAI Responses API (gateway/responses.c)
 * each translate their bodies into a request_t; the core queues it and
 * gateway/submit.c turns it into a SUBMIT. Its defaults live in one
 * initializer (request_init); its sampling knobs are the rows of
 * proto/sampling.h, whose ranges request_check_knobs checks, once, for every
 * surface.
 *
 * Ownership: every pointer member is an owned heap copy; request_free frees
 * them all and zeroes the request.
 */
#ifndef PAGODA_GATEWAY_REQUEST_H
#define PAGODA_GATEWAY_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"
#include "proto/sampling.h"

#define OAI_MAX_WARNING 512            /* bytes of request_t.warning */
#define REQUEST_MAX_IMAGES 8           /* images a parser accepts per request (= PROTO_MAX_IMAGES);
                                          the operator's limit is ≤ this */

/* The error a parser or check fills (gateway/oai.h defines it, with the
 * status table; each surface renders it in its own shape). */
typedef struct oai_error oai_error_t;

typedef enum { REQUEST_CHAT = 0, REQUEST_COMPLETION = 1 } request_kind_t;

/* What a request asks of the worker: generation (the /v1 routes), or the
 * tokenizer alone (POST /tokenize, /detokenize; oai_parse_tokenizer). */
typedef enum {
    REQUEST_OP_GENERATE = 0,
    REQUEST_OP_TOKENIZE = 1,
    REQUEST_OP_DETOKENIZE = 2,
    REQUEST_OP_EMBED = 3,            /* POST /v1/embeddings (oai_parse_embeddings) */
    REQUEST_OP_RANK = 4,             /* POST /v1/rerank, /v1/score (gateway/rerank.h): prompt = the
                                      * query, inputs = the documents (text) */
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

/* One piece of a message that holds images (request_message_t.parts): text,
 * or an image of the request's list. */
typedef struct {
    int32_t i_image;       /* index into request_t.images, or -1 for text */
    char *text;            /* i_image < 0: UTF-8, NUL-terminated (owned) */
    size_t text_len;
} request_part_t;

/* One tile of a picture cut for a tiled projector (idefics3): w × h like
 * its picture's global image. */
typedef struct {
    uint8_t *rgb;          /* (h, w, 3) RGB8 */
    uint8_t hash[32];      /* BLAKE2b-256 */
} request_tile_t;

/* An image part, as parsed: the compressed file the client sent (format
 * checked by magic), until request_images_prepare (gateway/request_image.h)
 * decodes it and fits it to the model's encoder. */
typedef struct {
    uint8_t *bytes;        /* (n_bytes) the file; freed by prepare */
    size_t n_bytes;
    char *url;             /* a remote http(s) URL not fetched yet (bytes NULL), else NULL
                              (gateway/image_fetch.h) */
    char *param;           /* the part's JSON path, for errors ("messages[0].content[1]") */
    uint32_t w, h;         /* after prepare: the encoder's side, w = h */
    uint8_t *rgb;          /* after prepare: (h, w, 3) RGB8 */
    uint8_t hash[32];      /* after prepare: BLAKE2b-256 (common/image/image.h image_hash) */
    uint32_t nx, ny;       /* after prepare, a tiled projector: the grid (0 × 0: rgb alone) */
    request_tile_t *tiles; /* (nx·ny) row-major; rgb above is then the global image */
} request_image_t;

typedef struct {
    request_role_t role;
    request_part_t *parts; /* (n_parts) text and images in order, when the message holds
                              an image; NULL otherwise (content alone is the message) */
    size_t n_parts;
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

#define REQUEST_MAX_LORA 4      /* adapters of one request (= PROTO_MAX_LORA) */
#define REQUEST_MAX_LORA_IDS 64 /* entries of a `lora` list (scale-0 ones included) */

/* One entry of llama.cpp's per-request `lora` list. */
typedef struct request_lora_id {
    int64_t id;                  /* index in GET /lora-adapters */
    double scale;                /* [1] */
} request_lora_id_t;

/* An adapter a request runs with, resolved (gateway/lora_table.h). */
typedef struct request_adapter {
    char *name;                  /* the worker's --lora NAME */
    double scale;
} request_adapter_t;

/* A validated request. Strings are owned copies; free with request_free.
 * Defaults in brackets are what request_init stores (and the parser keeps
 * when a field is absent or null). */
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
    PROTO_KNOBS_FIELDS;          /* temperature, top_p, top_k, ...: a member per row of
                                    PROTO_SAMPLING_KNOBS (proto/sampling.h), with the
                                    row's default and request range */
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
    /* images (content parts of the chat surfaces, gateway/request_image.h):
     * each is referenced by one request_part_t of a message */
    request_image_t *images;     /* (n_images ≤ REQUEST_MAX_IMAGES) */
    size_t n_images;
    /* after request_images_prepare: the encoder the images were fitted for
     * (the model's REGISTER vis), which lays out their runs in the prompt
     * for the routing keys (gateway/route.h route_text_keys) */
    proto_vis_t vis;
    /* llama.cpp's `lora` ([{"id": N, "scale": S}], chat and completions) */
    request_lora_id_t lora_ids[REQUEST_MAX_LORA_IDS]; /* (n_lora_ids) */
    size_t n_lora_ids;
    /* set by lora_table_resolve: the base model the request runs on and its
     * adapters; NULL / 0 = no adapter (the request runs on `model`) */
    char *lora_base;
    request_adapter_t adapters[REQUEST_MAX_LORA]; /* (n_adapters) */
    size_t n_adapters;
} request_t;

/* Appends "what" to a warning buffer (cap bytes, NUL-terminated) under a
 * heading: "HEADING: a, b, c" (the heading is written once, before the
 * first item; a second heading starts "; HEADING2: ..."). Truncates. */
void request_warning_add(char *warn, size_t cap, const char *heading, const char *what);


/* Zeroes *r and stores every default: kind, op REQUEST_OP_GENERATE, max_tokens
 * -1 (server default), the knobs' table defaults, n 1, parallel_tool_calls
 * and add_special true. The one place a request's defaults are written. */
void request_init(request_t *r, request_kind_t kind, request_op_t op);

/* The ranges of the sampling knobs (each row's request range, lo..hi).
 * Returns NULL when all hold, else the first offending row (its `api` key
 * names the field). */
const proto_knob_row_t *request_check_knobs(const request_t *r);

/* Frees what the parser allocated and zeroes *r. NULL-safe. */
void request_free(request_t *r);

/* The operator's limits, tighter than the parser's fixed ones (config
 * limits.max_messages ≤ OAI_MAX_MESSAGES, limits.max_prompt_bytes ≤
 * OAI_MAX_TEXT_BYTES): chat messages per request, and bytes of text (all
 * message contents, or a text prompt). 0 = that limit is off. Returns 0, or
 * -1 with a 400 in *err. */
int request_check_limits(const request_t *r, size_t max_messages, size_t max_text_bytes,
                             oai_error_t *err);

#endif
