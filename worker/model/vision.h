/* vision.h — an image encoder loaded from a llama.cpp "mmproj" GGUF file:
 * pixels in, rows of the text model's embedding width out.
 *
 * Supported projector (clip.projector_type): "gemma3" — Gemma 3's SigLIP
 * ViT, 4x4 average pooling, soft-embedding RMSNorm and input projection.
 * The forward pass, for one square RGB8 image of side S = image_size:
 *
 *   x_c = (pixel / 255 - image_mean[c]) / image_std[c]          3 planes (S, S)
 *   patches (N, 3·P·P), N = (S/P)², patch i = (row py, col px), i = py·(S/P)+px,
 *       its columns ordered (c, ky, kx) as the conv kernel's (kx fastest)
 *   h (N, D)  = patches · Wpatchᵀ + bpatch + pos_embd
 *   n_layer × pre-LN ViT block:
 *       a = LN1(h);  h += Wo · attn(Wq a + bq, Wk a + bk, Wv a + bv) + bo
 *       (every patch attends to every patch, scale 1/sqrt(head_dim))
 *       a = LN2(h);  h += Wdown · act(Wup a + bup) + bdown
 *   h = post_LN(h)
 *   pool: the (S/P)² grid averaged over k×k squares (k = scale_factor,
 *       default 4) → n_tok = (S/P/k)² rows in row-major grid order
 *   t = rmsnorm(pool) * soft_emb_norm;  out (n_tok, T) = t · Winproj
 *
 * LN is LayerNorm with weight and bias (eps clip.vision.attention.
 * layer_norm_epsilon); act is GELU in its tanh form when clip.use_gelu,
 * SiLU when clip.use_silu, else GELU-quick x·sigmoid(1.702x) (llama.cpp's
 * rule; the Gemma 3 converter writes use_gelu). The RMSNorm uses the same
 * eps.
 *
 * GGUF keys read (all required unless a default is given):
 *   clip.projector_type (or clip.vision.projector_type) = "gemma3",
 *   clip.has_vision_encoder (true when present),
 *   clip.vision.image_size, patch_size, embedding_length, feed_forward_length,
 *   block_count, attention.head_count, attention.head_count_kv (= head_count),
 *   attention.layer_norm_epsilon, projection_dim (= T, checked against the
 *   projection's shape), image_mean[3], image_std[3],
 *   projector.scale_factor (default 4), clip.use_gelu / clip.use_silu (false).
 * Tensors (ne fastest first, as in the file):
 *   v.patch_embd.weight [P, P, 3, D], v.patch_embd.bias [D],
 *   v.position_embd.weight [D, N],
 *   v.blk.L.ln1.{weight,bias} [D], attn_{q,k,v,out}.weight [D, D] + .bias [D],
 *   v.blk.L.ln2.{weight,bias} [D], ffn_up.weight [D, F] + .bias [F],
 *   ffn_down.weight [F, D] + .bias [D] (files that name the two the other
 *   way round, as old converters did, are read as llama.cpp reads them),
 *   v.post_ln.{weight,bias} [D], mm.soft_emb_norm.weight [D],
 *   mm.input_projection.weight [T, D].
 * Matrix types: any type with a row in quant.h's traits table whose block
 * divides the row (F32, F16 and BF16 always; Q8_0 etc. for D and F multiple
 * of 32); vectors and the projection are converted to F32 at load.
 * Anything else is refused with a message naming the key or tensor.
 *
 * Ownership: vision_load returns an encoder that owns its mmap and all
 * scratch (for vision_set_max_batch images, 1 by default); vision_free
 * releases it and NULLs the pointer.
 * Threads: vision_encode uses n_threads OpenMP threads; one encode at a
 * time per vision_t (the scratch is shared).
 */
#ifndef PAGODA_WORKER_VISION_H
#define PAGODA_WORKER_VISION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/gguf.h"
#include "common/text/image_run.h"

/* The projector families, one table: X(ENUM suffix, clip.projector_type,
 * the text model's tokens an image run opens and closes with as llama.cpp's
 * libmtmd writes them, the placeholder token of each embedding row) — the
 * text layer's (common/text/image_run.h), which the server's prompt layout
 * reads too. */
#define VISION_PROJ_TABLE(X) IMAGE_RUN_TABLE(X)

enum vision_proj {
#define VISION_PROJ_ENUM_(e, name, ...) VISION_PROJ_##e,
    VISION_PROJ_TABLE(VISION_PROJ_ENUM_)
#undef VISION_PROJ_ENUM_
    VISION_PROJ_COUNT
};

enum vision_act {
    VISION_ACT_GELU = 0,        /* tanh form */
    VISION_ACT_SILU = 1,
    VISION_ACT_GELU_QUICK = 2,  /* x * sigmoid(1.702 x) */
};

typedef struct vision_config {
    enum vision_proj proj;
    int32_t image_size;   /* S: input side in pixels (square) */
    int32_t patch_size;   /* P */
    int32_t n_side;       /* S / P patches per side */
    int32_t n_patches;    /* N = n_side² */
    int32_t dim;          /* D: ViT width */
    int32_t n_head;
    int32_t head_dim;     /* D / n_head */
    int32_t ffn_dim;      /* F */
    int32_t n_layer;
    int32_t merge;        /* k: pooling kernel side */
    int32_t n_tok;        /* (n_side / k)²: rows per image */
    int32_t head_in;      /* columns of the projection's input: D (gemma3), D·k² (idefics3) */
    int32_t out_dim;      /* T: text model width */
    int32_t longest_edge; /* idefics3: clip.vision.preproc_image_size, the side images are scaled
                           * to before tiling (0: no tiles; common/text/image_run.h); else 0 */
    float eps;
    float mean[3], std[3];
    enum vision_act act;
} vision_config_t;

typedef struct vision vision_t;

/* Opens and validates path. 0 and *out, or -1 with a message in err. */
int vision_load(const char *path, int n_threads, vision_t **out, char *err, size_t errlen);
/* The same from an opened GGUF: on success the encoder owns *g (set to
 * NULL); on failure *g stays the caller's. */
int vision_load_gguf(gguf_t **g, int n_threads, vision_t **out, char *err, size_t errlen);
void vision_free(vision_t **v);
const vision_config_t *vision_config(const vision_t *v);
/* A projector's row: name and the tokens of its image run. */
typedef image_run_info_t vision_proj_info_t;
/* The row of p; NULL when p is not a projector. */
const vision_proj_info_t *vision_proj_info(enum vision_proj p);

/* Encodes one image: rgb (h, w, 3) bytes, top row first, w == h ==
 * image_size (the caller resizes). out (n_tok, out_dim) floats.
 * 0 ok, -1 bad size (message in err). */
int vision_encode(vision_t *v, const uint8_t *rgb, int w, int h, float *out, char *err, size_t errlen);
/* Encodes n_img images as one batch: their rows stacked through every
 * matmul and row operation (R = N · n_img rows, up to the scratch's
 * vision_set_max_batch images per pass; more are taken in passes of that
 * many), attention image by image. out[b] (n_tok, out_dim) for rgb[b]
 * (w[b] x h[b]). An image's rows are the ones vision_encode gives it, bit
 * for bit: every kernel on the way computes a row from that row alone
 * (matmul.h, vit_attn.h, vit_ops.h) — with the int8 path on, the
 * activations are quantized row by row too. 0 ok, -1 a bad size (nothing
 * encoded; message in err). */
int vision_encode_batch(vision_t *v, const uint8_t *const *rgb, const int *w, const int *h, int n_img,
                        float *const *out, char *err, size_t errlen);
/* Scratch for batches of n images (n · N rows; about n · N · (3 P² + 7 D
 * + F) floats): reallocated here, once. 0 ok, -1 bad n. Default 1. */
int vision_set_max_batch(vision_t *v, int n);
/* The most images (1 ≤ n ≤ max) whose batch scratch fits in bytes. */
int vision_batch_for_bytes(const vision_t *v, size_t bytes, int max);
/* The matmuls' fast paths (matmul.h), off by default (the exact float
 * path, for comparisons): on, Q8_0 / Q4_* / Q*_K matrices take the int8
 * kernels (activations quantized per block of 32) and BF16 matrices the
 * AVX512-BF16 kernel where the CPU has it; F32 and F16 matrices stay on
 * the float path either way (docs/VISION.md's speed section says why).
 * 0 ok. */
int vision_set_fast(vision_t *v, bool on);

/* A binary PPM image (P6, maxval 255; comments after '#' allowed in the
 * header): the test and command-line image format (the server's images
 * arrive decoded). On success *rgb points into buf at w·h·3 bytes.
 * 0 ok, -1 with a message in err. */
int vision_ppm_parse(const uint8_t *buf, size_t len, int *w, int *h, const uint8_t **rgb, char *err,
                     size_t errlen);

#endif
