/* image_run.h — the text model's tokens for one image, per projector type:
 * the one table both the server's prompt layout (proto/submit_prompt.c) and
 * the worker's encoder (worker/model/vision.h's VISION_PROJ_TABLE is this
 * table) read, and the functions that append an image's run.
 *
 * The run, as llama.cpp's libmtmd writes it (tools/mtmd/mtmd.cpp):
 *
 *   gemma3 (no tiles):
 *     tok(begin) soft × n_tok tok(end)
 *   idefics3 (SmolVLM), a grid of nx × ny tiles plus the global image:
 *     for R = 1..ny: for C = 1..nx:
 *         tok(printf(tile_fmt, R, C)) soft × n_tok
 *       piece(row_end) after each row of tiles but the last
 *     piece(lead) tok(begin) soft × n_tok tok(end)
 *   so for idefics3 1 × 1:
 *     <fake_token_around_image><row_1_col_1> <image>×n "\n\n"
 *     <fake_token_around_image><global-img> <image>×n <fake_token_around_image>
 *
 * tok() is a tokenization on its own with special tokens recognised (no
 * BOS); piece() the first token of the vocabulary whose decoded text is
 * exactly that (libmtmd's lookup_token: "\n" is SentencePiece's <0x0A>,
 * GPT-2's "Ċ"); soft the placeholder token of each embedding row. A
 * grid of 0 × 0 (the file has no clip.vision.preproc_image_size) is the
 * global image alone, with its lead piece. The spans of soft rows, in
 * order: the tiles row-major, then the global image.
 *
 * The grid (image_run_grid, llama.cpp's idefics3 preprocessor after Hugging
 * Face's Idefics3 processor): the image is scaled so its longest side is
 * L = preproc_image_size (up or down; s = min(L/w, L/h) in float), each side
 * rounded up to a multiple of the tile side S = image_size:
 *   rw = ceil(w·s / S)·S, rh = ceil(h·s / S)·S, nx = rw / S, ny = rh / S;
 * L = 0 gives 0 × 0. Tokens per image: (nx·ny + 1) · n_tok rows, plus the
 * markers.
 *
 * non_causal: the image's rows attend to each other both ways (llama.cpp's
 * mtmd_decode_use_non_causal: gemma3), else causally like text (idefics3). */
#ifndef PAGODA_COMMON_TEXT_IMAGE_RUN_H
#define PAGODA_COMMON_TEXT_IMAGE_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/tokenizer.h"

/* X(ENUM suffix, clip.projector_type, begin, end, soft, lead (NULL: none),
 * tile_fmt (NULL: no tiles), row_end, non_causal) — see the top */
#define IMAGE_RUN_TABLE(X)                                                                                    \
    X(GEMMA3, "gemma3", "<start_of_image>", "<end_of_image>", "<image_soft_token>", NULL, NULL, NULL, true)     \
    X(IDEFICS3, "idefics3", "<fake_token_around_image><global-img>", "<fake_token_around_image>", "<image>",   \
      "\n\n", "<fake_token_around_image><row_%d_col_%d>", "\n", false)

/* tiles one image may have (nx·ny); llama.cpp sets no bound, SmolVLM's
 * 2048 px over 512 px tiles gives at most 16 */
#define IMAGE_RUN_MAX_TILES 64

typedef struct image_run_info {
    const char *name;       /* clip.projector_type */
    const char *tok_begin;  /* text before the (global) image's rows */
    const char *tok_end;    /* text after them */
    const char *tok_soft;   /* placeholder token of one row */
    const char *lead;       /* piece before tok_begin, or NULL */
    const char *tile_fmt;   /* text before tile (row, col), 1-based; NULL: the projector has no tiles */
    const char *row_end;    /* piece after each row of tiles but the last */
    bool non_causal;        /* the rows attend to each other both ways */
} image_run_info_t;

/* The row named proj; NULL when there is none. */
const image_run_info_t *image_run_find(const char *proj);

/* Appends text[0..len) tokenized on its own (no BOS, special tokens
 * recognised) to (*ids, *n), growing *cap. */
void image_run_append_text(const tokenizer_t *tok, const char *text, size_t len, int32_t **ids, int32_t *n,
                           int32_t *cap);

/* The first token whose decoded text (special tokens as their text) is
 * exactly text, or -1 (llama.cpp's lookup_token). */
int32_t image_run_piece(const tokenizer_t *tok, const char *text);

/* The tile grid of a w × h image (see the top): *nx, *ny tiles, the
 * refined size *rw × *rh it is resized to before cutting. tile ≥ 1,
 * longest ≥ 0 (0: no tiles, all four 0). 0, or -1 when more than
 * IMAGE_RUN_MAX_TILES tiles or w, h < 1. */
int image_run_grid(int32_t w, int32_t h, int32_t tile, int32_t longest, int32_t *nx, int32_t *ny, int32_t *rw,
                   int32_t *rh);

/* Appends one image's run for an nx × ny grid (0 × 0 for a projector
 * without tiles or an image without; the server's layout, proto/submit_prompt.c,
 * and pagoda-run's both call this): pos[i] gets the first position of
 * span i (nx·ny + 1 spans of n_tok soft tokens, the tiles row-major then the
 * global image; pos has room for IMAGE_RUN_MAX_TILES + 1). Returns the span
 * count, or -1 with a message in err when a token of the run is not in this
 * vocabulary (nothing appended then). */
int image_run_append_grid(const tokenizer_t *tok, const image_run_info_t *ri, int32_t n_tok, int32_t nx,
                          int32_t ny, int32_t **ids, int32_t *n, int32_t *cap, int32_t *pos, char *err,
                          size_t errlen);

#endif
