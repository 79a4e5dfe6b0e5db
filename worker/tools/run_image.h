/* run_image.h — one image and a user prompt into a prompt with an image
 * span, as llama.cpp's llama-mtmd-cli builds it (pagoda-run --image and the
 * image benchmark).
 *
 * The user message is the media marker followed by the prompt text,
 * rendered through the model's chat template (generation prompt added);
 * the rendered text is cut at the marker and the prompt becomes
 *   [BOS] tok(before) RUN tok(after)
 * where RUN is the projector's image run (common/text/image_run.h: gemma3
 * tok(begin) soft × n_tok tok(end); idefics3 its tiles, then the global
 * image) and each tok() is a separate tokenization with special tokens
 * recognised (llama-mtmd-cli tokenizes its text pieces one by one).
 *
 * The pixels, as llama.cpp's preprocessor makes them: gemma3 takes the
 * image as it is (image_size square); idefics3 cuts the image, scaled into
 * its refined size (image_run_grid; common/image's image_fit_bicubic), into
 * image_size tiles row-major, and adds the whole image stretched to
 * image_size² (image_stretch, bilinear) as the global image: nx·ny + 1
 * encodings, one span of rows each, decoded causally. The server's
 * layout, with "\n\n" around the run as the Hugging Face processor writes
 * it, is proto/submit_prompt.c's.
 *
 * Ownership: *ids, *imgs and *embd are malloc'd for the caller (free); each
 * (*imgs)[i].embd points into *embd. */
#ifndef PAGODA_WORKER_RUN_IMAGE_H
#define PAGODA_WORKER_RUN_IMAGE_H

#include <stdint.h>

#include "worker/engine.h"
#include "worker/model/vision.h"
#include "worker/sched.h"

/* llama.cpp's default media marker (mtmd_default_marker) */
#define RUN_IMAGE_MARKER "<__media__>"

/* Reads the PPM image at path (gemma3: image_size square; idefics3 any
 * size), encodes it with v, and builds the prompt. Returns the token count
 * (*ids, *imgs[0..*n_imgs) — its spans of rows — and *embd set), or -1 with
 * a message in err. *t_encode_us gets the encode time (may be NULL). dump:
 * NULL, or a file that gets the encoded images' pixels and rows
 * (worker/tools/image_dump.h, pagoda-run --dump-image). */
int32_t run_image_prompt(const engine_t *e, vision_t *v, const char *path, const char *prompt, int32_t **ids,
                         sched_image_t **imgs, int *n_imgs, float **embd, int64_t *t_encode_us, const char *dump,
                         char *err, size_t errlen);

#endif
