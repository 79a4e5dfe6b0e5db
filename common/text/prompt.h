/* prompt.h — prompt construction: text or chat messages into the token ids a
 * model is given, the same way in both processes (the worker to run them, the
 * gateway to key them for routing by cache; proto/submit_prompt.h applies it
 * to a SUBMIT).
 *
 * Return contract of every function: the token count (>= 0) with *out set to
 * a malloc'd array the caller frees, or -1 with a message in err and *out
 * untouched.
 */
#ifndef PAGODA_TEXT_PROMPT_H
#define PAGODA_TEXT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/chat_template.h"
#include "common/text/text_model.h"

/* A raw-text prompt (completions): BOS per the tokenizer's add_bos rule, no
 * special-token parsing (user text is never read as control tokens). At most
 * the first max_bytes of text are used (SIZE_MAX: all); *truncated (may be
 * NULL) says whether they were cut. */
int32_t prompt_text(const text_model_t *t, const char *text, size_t len, size_t max_bytes,
                    int32_t **out, bool *truncated, char *err, size_t errlen);

/* A chat prompt: msgs rendered with the template under o (tools, generation
 * prompt, thinking; chat_template.h), then tokenized with special tokens
 * recognised in the rendered text and no second BOS when the template wrote
 * one. Fails on what the template refuses (bad roles, ...). Only the first
 * max_bytes of the rendered text are tokenized (SIZE_MAX: all; *truncated
 * as above): the tokens of a cut prompt agree with the whole prompt's except
 * near the cut, which is what the gateway needs to key long prompts cheaply. */
int32_t prompt_chat(const text_model_t *t, const chat_msg_t *msgs, size_t n, const chat_render_opts_t *o,
                    size_t max_bytes, int32_t **out, bool *truncated, char *err, size_t errlen);

#endif
