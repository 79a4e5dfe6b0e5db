/* text_model.h — the words of one model: its tokenizer, its chat template and
 * the token ids that end an assistant turn, read from a GGUF file's metadata.
 *
 * Both processes hold one per model: the worker inside its engine
 * (worker/engine.h, next to the weights), the gateway for routing by cache
 * (gateway/route.c), where it is all that is loaded — no tensor is read.
 * common/text/prompt.h turns text and chat messages into prompt ids with it.
 *
 * Ownership: text_model_from_gguf() and text_model_load() return a model
 * freed with text_model_free(), which NULLs the pointer. The model copies
 * what it needs; the gguf_t may be closed afterwards. Read-only once built:
 * any number of threads may use it at once.
 */
#ifndef PAGODA_TEXT_TEXT_MODEL_H
#define PAGODA_TEXT_TEXT_MODEL_H

#include <stdint.h>

#include "common/text/chat_template.h"
#include "common/text/gguf.h"
#include "common/text/tokenizer.h"

typedef struct text_model {
    tokenizer_t *tok;          /* owned */
    chat_template_t *tmpl;     /* owned; ChatML when the file has none */
    int32_t *turn_end_ids;     /* (n_turn_end) ids of the template's end-of-turn texts, owned */
    int32_t n_turn_end;
} text_model_t;

/* From g's metadata. n_vocab >= 0 is the model's vocabulary size, which the
 * tokenizer must not exceed (-1: no weights to check against); path names the
 * file in messages. NULL with a message in err on failure. */
text_model_t *text_model_from_gguf(const gguf_t *g, int32_t n_vocab, const char *path, char *err,
                                   size_t errlen);

/* mmaps path, reads its metadata (not its tensors' data) and unmaps it.
 * NULL with a message in err on failure. */
text_model_t *text_model_load(const char *path, char *err, size_t errlen);

void text_model_free(text_model_t **t);

#endif
