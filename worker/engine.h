/* engine.h — everything a worker needs from one GGUF file, loaded together:
 * the model (weights, config) and its words (common/text/text_model.h:
 * tokenizer, chat template, the token ids that end an assistant turn).
 * Shared by pagoda-worker and pagoda-run so both turn text into prompts
 * exactly the same way; the prompt functions below are common/text/prompt.h
 * and proto/submit_prompt.h applied to the engine's text model, which is
 * also what the gateway loads (without the weights) to route by cache.
 *
 * Ownership: engine_load() returns an engine freed with engine_free(), which
 * NULLs the pointer. Token arrays returned by the prompt functions are
 * malloc'd; the caller frees them.
 */
#ifndef PAGODA_WORKER_ENGINE_H
#define PAGODA_WORKER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/chat_template.h"
#include "common/text/text_model.h"
#include "common/text/tokenizer.h"
#include "proto/msg.h"
#include "worker/model/lora.h"
#include "worker/model/model.h"

/* A LoRA adapter loaded next to the model (--lora NAME=FILE[:SCALE]). */
typedef struct engine_lora {
    char name[PROTO_MAX_NAME + 1];
    lora_t *ad;                /* owned */
    float scale;               /* used when a request names it without a scale */
} engine_lora_t;

typedef struct engine {
    model_t *model;            /* owned */
    text_model_t *text;        /* owned: the words, read from the same file */
    /* text's fields, borrowed (freed with text) for the worker's many uses */
    tokenizer_t *tok;          /* text->tok */
    chat_template_t *tmpl;     /* text->tmpl; ChatML when the file has none */
    int32_t *turn_end_ids;     /* text->turn_end_ids, (n_turn_end) */
    int32_t n_turn_end;
    engine_lora_t lora[LORA_MAX_ADAPTERS]; /* (n_lora) adapters, checked against model */
    int32_t n_lora;
} engine_t;

/* Loads path. Returns NULL with a message in err on any failure. */
engine_t *engine_load(const char *path, char *err, size_t errlen);
void engine_free(engine_t **e);

/* Loads the adapter of spec "NAME=FILE[:SCALE]" (scale default 1) for the
 * engine's model (lora_load's checks). 0 ok; -1 with err: a bad spec, a
 * name already used, more than LORA_MAX_ADAPTERS, or a file lora_load
 * refuses. */
int engine_add_lora(engine_t *e, const char *spec, char *err, size_t errlen);

/* Loads adapter `name` from path (lora_load's checks against the model) at
 * default scale `scale`: engine_add_lora without the spec, also used at run
 * time (LORA, proto/msg.h). 0 ok; -1 with err: a name already used or not
 * 1..PROTO_MAX_NAME bytes, LORA_MAX_ADAPTERS reached, lora_load's refusal. */
int engine_load_lora(engine_t *e, const char *name, const char *path, float scale, char *err, size_t errlen);

/* Drops adapter `name` from the engine (its reference: requests that hold
 * the adapter keep it until they end, lora.h). 0, or -1 when not loaded. */
int engine_unload_lora(engine_t *e, const char *name);

/* The adapter called name, or NULL. */
const engine_lora_t *engine_find_lora(const engine_t *e, const char *name);

/* model_pack_int8(e->model, n_threads) (model.h), logging what was packed
 * and how long it took. Call once after engine_load when the int8 kernels
 * will be on (not with --exact-matmul), before the model is shared. */
void engine_pack_int8(engine_t *e, int n_threads);

/* A raw-text prompt (completions): BOS per the tokenizer's add_bos rule, no
 * special-token parsing (user text is never read as control tokens).
 * Returns the token count (>= 0) with *out set, or -1 with err. */
int32_t engine_prompt_text(const engine_t *e, const char *text, size_t len, int32_t **out,
                           char *err, size_t errlen);

/* A chat prompt: render msgs with the template (generation prompt added),
 * announcing tools_json (a JSON array of OpenAI tools, or NULL; see
 * chat_template_render_tools), then tokenize with special tokens recognised
 * in the rendered text. Returns the token count with *out set, or -1 with err
 * (bad roles, ...). */
int32_t engine_prompt_chat(const engine_t *e, const chat_msg_t *msgs, size_t n, const char *tools_json,
                           int32_t **out, char *err, size_t errlen);

/* One (query, document) pair of a rerank request, as llama-server builds
 * it: with the file's rerank template (tokenizer.chat_template.rerank, the
 * Qwen3-Reranker converter writes one), every "{query}" and "{document}"
 * in it replaced and the result tokenized with special tokens recognised
 * and no BOS added; without one, [BOS] query [EOS] [SEP] document [EOS],
 * each marker only when the tokenizer's add_bos / add_eos / add_sep rule
 * says (query and document tokenized as plain text). Returns the token
 * count with *out set (malloc'd), or -1 with err. */
int32_t engine_prompt_rerank(const engine_t *e, const char *query, size_t query_len, const char *doc,
                             size_t doc_len, int32_t **out, char *err, size_t errlen);

/* The prompt tokens of a SUBMIT (submit_prompt_encode, uncut): chat messages
 * (and tools) through the template, a text prompt through the tokenizer,
 * prompt_ids copied. Same return contract (*out malloc'd). */
int32_t engine_prompt_submit(const engine_t *e, const proto_submit_t *s, int32_t **out, char *err,
                             size_t errlen);

#endif
