/* submit_prompt.h — the prompt ids a SUBMIT describes: chat messages (and
 * tools, thinking) through the model's template, a text prompt through its
 * tokenizer, prompt_ids as given.
 *
 * This is where the wire meets the text layer, and the one place that reads
 * a SUBMIT's prompt fields: the worker runs exactly these ids
 * (worker_req_from_submit) and the gateway keys them for routing by cache
 * (gateway/route.c), so the two agree token for token.
 *
 * Same return contract as prompt.h: the count with *out malloc'd (the caller
 * frees), or -1 with err.
 */
#ifndef PAGODA_PROTO_SUBMIT_PROMPT_H
#define PAGODA_PROTO_SUBMIT_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/text_model.h"
#include "proto/msg.h"

/* At most the first max_bytes of the rendered chat prompt or of the text
 * prompt are tokenized (SIZE_MAX: all); *truncated (may be NULL) says whether
 * they were cut. prompt_ids are never cut. */
int32_t submit_prompt_encode(const text_model_t *t, const proto_submit_t *s, size_t max_bytes,
                             int32_t **out, bool *truncated, char *err, size_t errlen);

#endif
