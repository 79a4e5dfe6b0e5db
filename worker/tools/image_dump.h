/* image_dump.h — pagoda-run --dump-image: one picture's encoder inputs and
 * outputs in a file, so a test can hold them against an independent
 * reference (tests/ref/image_ref.py reads and writes the same format;
 * tests/integration/vision_tiles.sh compares the two).
 *
 * The file, all integers unsigned 32-bit little-endian:
 *
 *   offset  size              field
 *   0       8                 magic "PGIMGDMP"
 *   8       4                 version, 1
 *   12      4                 nx: tile columns (0 when the projector does not tile)
 *   16      4                 ny: tile rows (0 likewise)
 *   20      4                 n_img: images encoded, nx·ny + 1 (1 without tiles)
 *   24      4                 side: each image is side × side pixels
 *   28      4                 n_tok: rows per image
 *   32      4                 dim: floats per row (the text model's width)
 *   36      n_img·side²·3     the images' RGB8 pixels, (side, side, 3) each, top row first
 *   …       n_img·n_tok·dim·4 their rows, float32 little-endian, (n_tok, dim) each
 *
 * Both in encode order, which is the prompt's order: the tiles row-major
 * (tile (r, c) is image r·nx + c), then the global image; a projector that
 * does not tile (gemma3) has the one image as it was given.
 *
 * Ownership: nothing is kept; the caller owns every buffer passed in. */
#ifndef PAGODA_WORKER_IMAGE_DUMP_H
#define PAGODA_WORKER_IMAGE_DUMP_H

#include <stddef.h>
#include <stdint.h>

#include "common/image/image.h"

#define IMAGE_DUMP_MAGIC "PGIMGDMP"
#define IMAGE_DUMP_VERSION 1u

/* Writes the file at path: imgs[0..n_img), each side × side, and embd, n_img
 * blocks of (n_tok, dim) floats. 0, or -1 with a message in err (the file
 * may then be partly written). */
int image_dump_write(const char *path, const image_rgb_t *imgs, int n_img, int32_t nx, int32_t ny,
                     const float *embd, int32_t n_tok, int32_t dim, char *err, size_t errlen);

#endif
