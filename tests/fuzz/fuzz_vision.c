/* fuzz_vision.c — libFuzzer target for the image encoder's parsers
 * (worker/model/vision.h).
 *
 * Input layout (seeds in tests/fuzz/corpus/vision/):
 *   byte 0     bit 0 clear: bytes 1.. are a PPM (vision_ppm_parse);
 *              set: bytes 1.. are an mmproj GGUF (gguf_parse, then
 *              vision_load_gguf, then one encode of a grey image)
 *
 * Beyond ASan/UBSan it checks that an accepted PPM's pixels lie inside the
 * input. An accepted projector is run once on a grey image for memory
 * safety only: its output is not checked, since a file may hold NaN or
 * infinite weights (the loader checks keys and shapes, not values), so
 * NaN rows are a faithful answer (tests/fuzz/corpus/vision/nan-weights). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/model/vision.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    char err[256];
    const uint8_t *buf = data + 1;
    size_t len = size - 1;
    if (!(data[0] & 1)) {
        int w, h;
        const uint8_t *rgb;
        if (vision_ppm_parse(buf, len, &w, &h, &rgb, err, sizeof err) == 0 &&
            (w < 1 || h < 1 || rgb < buf || (size_t)(rgb - buf) + (size_t)w * h * 3 > len))
            __builtin_trap();
        return 0;
    }
    /* the GGUF reader wants its buffer aligned as a file mapping is */
    uint8_t *copy = aligned_alloc(64, (len + 63) / 64 * 64 + 64);
    memcpy(copy, buf, len);
    gguf_t *g = NULL;
    vision_t *v = NULL;
    if (gguf_parse(copy, len, &g, err, sizeof err) == 0 && vision_load_gguf(&g, 1, &v, err, sizeof err) == 0) {
        const vision_config_t *c = vision_config(v);
        if ((size_t)c->image_size * c->image_size <= (1u << 16)) {
            size_t n = (size_t)c->image_size * c->image_size * 3;
            uint8_t *px = malloc(n);
            memset(px, 128, n);
            float *out = malloc((size_t)c->n_tok * c->out_dim * sizeof(float));
            (void)vision_encode(v, px, c->image_size, c->image_size, out, err, sizeof err);
            free(out);
            free(px);
        }
        vision_free(&v);
    }
    gguf_close(&g);
    free(copy);
    return 0;
}
