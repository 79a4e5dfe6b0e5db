/* worker_image.h — a request's images into its scheduler request: the
 * worker's side of issue #40's interface (the wire, the prompt layout and
 * the gateway's decoding are proto/ and gateway/'s).
 *
 * SUBMIT carries decoded images (imgs: RGB8 at the encoder's input size,
 * with their BLAKE2b-256 hash) and the prompt layout (proto/
 * submit_prompt.c) turns a message's parts into token ids plus one span
 * per image occurrence {pos, n_tok, img}: prompt[pos .. pos + n_tok) are
 * the projector's placeholder token. worker_req_images encodes each
 * distinct image once (vision_encode_batch, on the calling thread:
 * admission time, not the step loop's; the worker holds the SUBMITs with
 * images it drains in one turn and encodes their images as one batch) and fills the request's sched_image_t list,
 * the image's hash (its first 8 bytes) as the prefix-cache key.
 *
 * REGISTER's `vis` map comes from worker_vis_info: {size, n_tok, proj}.
 *
 * Ownership: the request owns the rows and the list (worker_req_clear
 * frees them); the caller keeps the images and spans.
 */
#ifndef PAGODA_WORKER_IMAGE_H
#define PAGODA_WORKER_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/text/tokenizer.h"
#include "proto/msg.h"
#include "proto/submit_prompt.h"
#include "worker/engine.h"
#include "worker/model/vision.h"

struct worker_req;

/* One decoded image of a SUBMIT (imgs[i]). */
typedef struct worker_img {
    const uint8_t *rgb;     /* (h, w, 3) RGB8, top row first */
    uint32_t w, h;
    const uint8_t *hash;    /* 32 bytes: BLAKE2b-256 of rgb + w + h */
} worker_img_t;

/* One image occurrence in the prompt: the layout's output
 * (submit_prompt_encode_images), {pos, n_tok, img}. */
typedef submit_img_span_t worker_img_span_t;

/* REGISTER's vis map. */
typedef struct worker_vis_info {
    uint32_t size;          /* input side in pixels */
    uint32_t n_tok;         /* rows per image */
    const char *proj;       /* "gemma3" (static) */
    uint32_t preproc;       /* a tiled projector's longest side before tiling, 0 = no tiles */
} worker_vis_info_t;

void worker_vis_info(const vision_t *v, worker_vis_info_t *out);

/* The images of the requests admitted in one turn of the worker's loop,
 * encoded together: worker_req_images_add records each distinct image
 * (by hash: the same pixels in two requests are encoded once) and where
 * its rows go, worker_img_batch_run encodes them all in one
 * vision_encode_batch (rows stacked through the matmuls, attention per
 * image; an image's rows are bit for bit its rows alone, vision.h) and
 * copies the repeats. The batch keeps pointers to the images' pixels and
 * the requests' rows: both must live until worker_img_batch_run. */
typedef struct worker_img_copy {
    const float *src;
    float *dst;
} worker_img_copy_t;

typedef struct worker_img_batch {
    vision_t *v;
    int n, cap;                   /* distinct images to encode */
    const uint8_t **rgb;          /* (cap): pixels, not owned */
    int *w, *h;                   /* (cap) */
    float **out;                  /* (cap): rows of n_tok · out_dim in a request, not owned */
    const uint8_t **hash;         /* (cap): 32 bytes each, not owned */
    int n_copy, cap_copy;
    worker_img_copy_t *copy;      /* (cap_copy): repeats, copied in order after the encode */
} worker_img_batch_t;

void worker_img_batch_init(worker_img_batch_t *b, vision_t *v);
/* Encodes and copies everything added since the last run; the batch is
 * then empty (and reusable). */
void worker_img_batch_run(worker_img_batch_t *b);
void worker_img_batch_free(worker_img_batch_t *b);

/* worker_req_images without the encode: r's rows are written by
 * worker_img_batch_run(b). Same checks and returns (nothing is added to b
 * on a refusal). */
proto_err_t worker_req_images_add(struct worker_req *r, vision_t *v, const tokenizer_t *tok,
                                  const worker_img_t *imgs, uint32_t n_imgs, const worker_img_span_t *spans,
                                  uint32_t n_spans, worker_img_batch_t *b, char *err, size_t errlen);

/* Encodes the images the spans use and attaches them to r (r->prompt and
 * r->req.n_prompt already set). Returns PROTO_ERR_NONE, or
 * PROTO_ERR_BAD_REQUEST with a message (no projector: "this model takes no
 * images"; an index past n_imgs; a size other than the encoder's; a span
 * outside the prompt, of the wrong length, or over a token other than the
 * placeholder). */
proto_err_t worker_req_images(struct worker_req *r, vision_t *v, const tokenizer_t *tok, const worker_img_t *imgs,
                              uint32_t n_imgs, const worker_img_span_t *spans, uint32_t n_spans, char *err,
                              size_t errlen);

/* A SUBMIT with images (imgs) into r, made by worker_req_from_submit: the
 * prompt (which it left empty) with the images' runs (proto/submit_prompt.h's
 * layout for v's projector), then worker_req_images — or, with a batch b,
 * worker_req_images_add (the rows written by worker_img_batch_run(b); sm's
 * images must live until then). A SUBMIT without images: nothing done.
 * Returns PROTO_ERR_NONE, or PROTO_ERR_BAD_REQUEST with a message (no
 * projector: "this model takes no images"). */
proto_err_t worker_req_submit_images(struct worker_req *r, vision_t *v, const engine_t *e,
                                     const proto_submit_t *sm, worker_img_batch_t *b, char *err, size_t errlen);

#endif
