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

/* One image occurrence in the prompt: ids[pos .. pos + n_tok) are the
 * projector's placeholder token, to be replaced by image img's rows. */
typedef struct submit_img_span {
    int32_t pos;
    int32_t n_tok;
    uint32_t img;            /* index into the SUBMIT's imgs */
} submit_img_span_t;

/* The prompt of a SUBMIT with images (imgs, and parts in its messages) for
 * a model whose projector is proj (clip.projector_type) with n_tok rows per
 * image: each message with parts is its text parts joined with "\n", a
 * per-render random marker in place of each image; the chat template
 * renders the messages; the text is cut at the markers, each piece
 * tokenized on its own (special tokens recognised; the first with
 * prompt_chat's BOS rule), and each marker becomes the picture's run
 * (common/text/image_run.h image_run_append_grid: for gemma3 begin, n_tok ×
 * soft, end; for a picture cut into tiles, imgs[k].nx × ny, the tiles' runs
 * then the global image's). *spans (malloc'd, *n_spans, in prompt order)
 * says where each encoder image's rows go: one span per image, a tiled
 * picture's spans naming its images k, k+1, … in order. A SUBMIT
 * without images gives submit_prompt_encode's ids and no spans. Returns the
 * count, or -1 with err (an unknown projector or none, a grid for a
 * projector without tiles, a template that dropped or repeated a marker).
 * Never truncated. */
int32_t submit_prompt_encode_images(const text_model_t *t, const proto_submit_t *s, const char *proj,
                                    int32_t n_tok, int32_t **out, submit_img_span_t **spans, uint32_t *n_spans,
                                    char *err, size_t errlen);

#endif
