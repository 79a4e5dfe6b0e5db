/* vision_idefics3.h — the Idefics3 / SmolVLM projector head
 * (clip.projector_type "idefics3"), after the SigLIP ViT of vision.c:
 *
 *   y = pixel_shuffle(post_LN(h), k)      (n_side/k)² rows of D·k²
 *   out (n_tok, T) = y · Wfcᵀ             mm.model.fc.weight [D·k², T]
 *
 * k = clip.vision.projector.scale_factor (llama.cpp's default 1 when the
 * key is absent; the converter writes the model's, 2 for SmolVLM/SmolVLM2
 * 256M/500M, 3 for Idefics3-8B/SmolVLM-2.2B... whatever config.json holds).
 * There is no norm and no bias in the head.
 *
 * The pixel shuffle (space to depth) as Idefics3's connector defines it in
 * Hugging Face transformers (view/permute/reshape of the (side, side, D)
 * grid): output row (oy, ox), row-major over the (side/k)² grid, is the
 * concatenation of the k×k patches (oy·k + dy, ox·k + dx) in the order dy
 * slowest, then dx, then the D features: column (dy·k + dx)·D + d. */
#ifndef PAGODA_WORKER_VISION_IDEFICS3_H
#define PAGODA_WORKER_VISION_IDEFICS3_H

#include <stdint.h>

/* x (n_side², dim) row-major patch grid → y ((n_side/k)², dim·k²).
 * n_side % k == 0 (the loader checks); x and y do not overlap. */
void vision_idefics3_shuffle(const float *x, int32_t n_side, int32_t dim, int32_t k, float *y);

#endif
