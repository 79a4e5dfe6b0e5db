/* image_run.h — the text model's tokens for one image, per projector type:
 * the one table both the server's prompt layout (proto/submit_prompt.c) and
 * the worker's encoder (worker/model/vision.h's VISION_PROJ_TABLE is this
 * table) read, and the one function that appends an image's run.
 *
 * The run, as llama.cpp's libmtmd writes it for gemma3:
 *   tok(begin) soft × n_tok tok(end)
 * each of begin, soft, end one special token of the vocabulary. */
#ifndef PAGODA_COMMON_TEXT_IMAGE_RUN_H
#define PAGODA_COMMON_TEXT_IMAGE_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "common/text/tokenizer.h"

/* X(ENUM suffix, clip.projector_type, the text that opens an image's run,
 * the text that closes it (both NULL: the layout is not built, images are
 * refused: idefics3, docs/VISION.md), the placeholder token of each
 * embedding row) */
#define IMAGE_RUN_TABLE(X)                                                                                    \
    X(GEMMA3, "gemma3", "<start_of_image>", "<end_of_image>", "<image_soft_token>")                             \
    X(IDEFICS3, "idefics3", NULL, NULL, "<image>")

typedef struct image_run_info {
    const char *name;       /* clip.projector_type */
    const char *tok_begin;  /* text before the image's rows */
    const char *tok_end;    /* text after them */
    const char *tok_soft;   /* placeholder token of one row */
} image_run_info_t;

/* The row named proj; NULL when there is none. */
const image_run_info_t *image_run_find(const char *proj);

/* Appends text[0..len) tokenized on its own (no BOS, special tokens
 * recognised) to (*ids, *n), growing *cap. */
void image_run_append_text(const tokenizer_t *tok, const char *text, size_t len, int32_t **ids, int32_t *n,
                           int32_t *cap);

/* Appends one image's run: tok(begin), n_tok × soft, tok(end). Returns the
 * position of its first soft token, or -1 with a message in err when soft
 * is not one token of this vocabulary. */
int32_t image_run_append(const tokenizer_t *tok, const image_run_info_t *ri, int32_t n_tok, int32_t **ids,
                         int32_t *n, int32_t *cap, char *err, size_t errlen);

#endif
