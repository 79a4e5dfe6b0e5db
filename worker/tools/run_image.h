/* run_image.h — one image and a user prompt into a prompt with an image
 * span, as llama.cpp's llama-mtmd-cli builds it (pagoda-run --image and the
 * image benchmark).
 *
 * The user message is the media marker followed by the prompt text,
 * rendered through the model's chat template (generation prompt added);
 * the rendered text is cut at the marker and the prompt becomes
 *   [BOS] tok(before) tok(begin) soft × n_tok tok(end) tok(after)
 * where begin, end and soft are the projector's tokens (vision.h's table)
 * and each tok() is a separate tokenization with special tokens recognised
 * (llama-mtmd-cli tokenizes its text pieces one by one). The server's
 * layout, with "\n\n" around the run as the Hugging Face processor writes
 * it, is proto/submit_prompt.c's.
 *
 * Ownership: *ids and *embd are malloc'd for the caller (free); img->embd
 * points into *embd. */
#ifndef PAGODA_WORKER_RUN_IMAGE_H
#define PAGODA_WORKER_RUN_IMAGE_H

#include <stdint.h>

#include "worker/engine.h"
#include "worker/model/vision.h"
#include "worker/sched.h"

/* llama.cpp's default media marker (mtmd_default_marker) */
#define RUN_IMAGE_MARKER "<__media__>"

/* Reads the PPM image at path (image_size square), encodes it with v, and
 * builds the prompt. Returns the token count (*ids, *img, *embd set), or -1
 * with a message in err. *t_encode_us gets the encode time (may be NULL). */
int32_t run_image_prompt(const engine_t *e, vision_t *v, const char *path, const char *prompt, int32_t **ids,
                         sched_image_t *img, float **embd, int64_t *t_encode_us, char *err, size_t errlen);

#endif
