/* fuzz_image.c — libFuzzer target for common/image/image.h: the decoding
 * path of every image a client sends.
 *
 * An input starting "data:" goes through image_data_url_parse first (then
 * its bytes are decoded); anything else is decoded as a file. A decoded
 * image is fitted to a 16-pixel square and hashed. Properties checked on
 * every input (beyond ASan/UBSan/LSan):
 *   - image_decode returns IMAGE_OK exactly when it filled an image, whose
 *     w·h is within the pixel limit; on a refusal the image is empty and an
 *     error message was written;
 *   - image_sniff agrees with the format the decoder accepted;
 *   - the fitted image is side × side.
 * The pixel limit is 1 MP here so a single input cannot take longer than
 * libFuzzer's timeout; the limit itself is checked from the header.
 * Seeds (tests/fuzz/corpus/image/): small files of each format written by
 * the libraries' encoders (build/tests/common/image/test_image --write-seeds). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/image/image.h"

static void decode_one(const uint8_t *buf, size_t len)
{
    image_limits_t lim = {.max_bytes = 1u << 20, .max_pixels = 1000000};
    image_rgb_t img;
    char err[256] = "";
    image_status_t s = image_decode(buf, len, &lim, &img, err, sizeof err);
    if (s != IMAGE_OK) {
        if (img.rgb || img.w || img.h || !err[0])
            __builtin_trap();
        return;
    }
    if (!img.rgb || !img.w || !img.h || (uint64_t)img.w * img.h > lim.max_pixels ||
        image_sniff(buf, len) == IMAGE_FMT_UNKNOWN)
        __builtin_trap();
    image_rgb_t sq;
    image_fit_square(&img, 16, &sq);
    if (sq.w != 16 || sq.h != 16)
        __builtin_trap();
    uint8_t h[IMAGE_HASH_BYTES];
    image_hash(&sq, h);
    image_rgb_free(&sq);
    image_rgb_free(&img);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 5 && memcmp(data, "data:", 5) == 0) {
        uint8_t *bytes = NULL;
        size_t n = 0;
        image_format_t f;
        char err[256] = "";
        image_status_t s = image_data_url_parse((const char *)data, size, 1u << 20, &bytes, &n, &f, err, sizeof err);
        if ((s == IMAGE_OK) != (bytes != NULL) || (s != IMAGE_OK && !err[0]))
            __builtin_trap();
        if (bytes)
            decode_one(bytes, n);
        free(bytes);
        return 0;
    }
    decode_one(data, size);
    return 0;
}
