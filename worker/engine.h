/* engine.h — everything a worker needs from one GGUF file, loaded together:
 * the model (weights, config), its tokenizer, its chat template and the token
 * ids that end an assistant turn. Shared by pagoda-worker and pagoda-run so
 * both turn text into prompts exactly the same way.
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

#include "proto/msg.h"
#include "common/text/chat_template.h"
#include "worker/model/model.h"
#include "common/text/tokenizer.h"

typedef struct engine {
    model_t *model;            /* owned */
    tokenizer_t *tok;          /* owned */
    chat_template_t *tmpl;     /* owned; ChatML when the file has none */
    int32_t *turn_end_ids;     /* (n_turn_end) ids of the template's end-of-turn texts */
    int32_t n_turn_end;
} engine_t;

/* Loads path. Returns NULL with a message in err on any failure. */
engine_t *engine_load(const char *path, char *err, size_t errlen);
void engine_free(engine_t **e);

/* Only the text side of path (tokenizer, chat template; model = NULL): what
 * the gateway needs to compute the prompt tokens a worker of this model will
 * see (routing by cache). Reads the GGUF's metadata, not its weights.
 * NULL with a message in err on failure. The prompt functions below work on
 * it; engine_pack_int8 must not be called. */
engine_t *engine_load_text(const char *path, char *err, size_t errlen);

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

/* The prompt tokens of a SUBMIT, as the worker builds them: chat messages
 * (and tools) through the template, a text prompt through the tokenizer,
 * prompt_ids copied. Same return contract (*out malloc'd). The gateway's
 * cache-aware routing calls this too, so both sides agree on the tokens. */
int32_t engine_prompt_submit(const engine_t *e, const proto_submit_t *s, int32_t **out, char *err,
                             size_t errlen);

/* engine_prompt_submit / engine_prompt_chat over at most the first max_bytes
 * of the rendered chat prompt or the text prompt (*truncated, may be NULL,
 * says whether it was cut; prompt_ids are never cut). The tokens of a cut
 * prompt agree with the whole prompt's except near the cut: the gateway uses
 * this to key long prompts cheaply (gateway/route.c). */
int32_t engine_prompt_submit_prefix(const engine_t *e, const proto_submit_t *s, size_t max_bytes,
                                    int32_t **out, bool *truncated, char *err, size_t errlen);
int32_t engine_prompt_chat_prefix(const engine_t *e, const chat_msg_t *msgs, size_t n,
                                  const char *tools_json, size_t max_bytes, int32_t **out,
                                  bool *truncated, char *err, size_t errlen);

#endif
