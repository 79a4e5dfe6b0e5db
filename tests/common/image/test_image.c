/* Unit tests for common/image/image.h.
 *
 * Test images are written by each format's own reference encoder in this
 * file (libpng's writer, libjpeg-turbo's compressor, libwebp's encoder,
 * giflib's EGif*), from pixels the test chose, so the decoder is checked
 * against the pixels that went in, never against its own output:
 *   PNG, lossless WebP, GIF: exact (alpha compositing within 1 of the float
 *   formula c·a/255 + 255·(1 - a/255));
 *   JPEG (quality 95) and lossy WebP (quality 95) of a smooth image: mean
 *   absolute error ≤ 3 and max ≤ 40 per channel (lossy codecs).
 * Zip-bomb headers (a PNG IHDR, a JPEG SOF, a GIF screen, a WebP VP8L header
 * claiming far more pixels than the limit) must be refused from the header:
 * the test sets max_pixels low and checks IMAGE_E_PIXELS for files whose
 * pixel data is absent, so a decoder that read on would report corruption.
 * Resizing is checked against a double-precision evaluation of the
 * align-corners bilinear definition (±1 for float truncation), hashing
 * against one BLAKE2b call over the concatenated bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <sodium.h>
#include <webp/encode.h>

#include "common/image/image.h"

/* ---- encoders -------------------------------------------------------------------------- */

typedef struct membuf {
    uint8_t *p;
    size_t n, cap;
} membuf_t;

static void mb_put(membuf_t *m, const void *d, size_t n)
{
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2;
        m->p = realloc(m->p, m->cap);
        assert_non_null(m->p);
    }
    memcpy(m->p + m->n, d, n);
    m->n += n;
}

static void png_w(png_structp png, png_bytep d, size_t n) { mb_put(png_get_io_ptr(png), d, n); }
static void png_f(png_structp png) {}

/* A PNG of w×h, colour type ct, bit depth bd, from raw rows of row_bytes;
 * palette (n_pal) and trns (n_trns) for palette images. */
static membuf_t enc_png(uint32_t w, uint32_t h, int ct, int bd, bool interlace, const uint8_t *raw,
                        size_t row_bytes, const png_color *pal, int n_pal, const uint8_t *trns, int n_trns)
{
    membuf_t m = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    assert_int_equal(setjmp(png_jmpbuf(png)), 0);
    png_set_write_fn(png, &m, png_w, png_f);
    png_set_IHDR(png, info, w, h, bd, ct, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (pal)
        png_set_PLTE(png, info, pal, n_pal);
    if (trns)
        png_set_tRNS(png, info, trns, n_trns, NULL);
    png_write_info(png, info);
    if (bd == 16)
        png_set_swap(png); /* our raw 16-bit samples are little-endian */
    png_bytep *rows = malloc(sizeof(png_bytep) * h);
    for (uint32_t y = 0; y < h; y++)
        rows[y] = (png_bytep)raw + y * row_bytes;
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    return m;
}

static membuf_t enc_jpeg(uint32_t w, uint32_t h, int comps, J_COLOR_SPACE cs, const uint8_t *raw, int quality)
{
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr e;
    unsigned char *out = NULL;
    unsigned long n = 0;
    c.err = jpeg_std_error(&e);
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &out, &n);
    c.image_width = w;
    c.image_height = h;
    c.input_components = comps;
    c.in_color_space = cs;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, quality, TRUE);
    jpeg_start_compress(&c, TRUE);
    while (c.next_scanline < h) {
        JSAMPROW r = (JSAMPROW)raw + (size_t)c.next_scanline * w * comps;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    membuf_t m = {0};
    mb_put(&m, out, n);
    free(out);
    return m;
}

static int gif_w(GifFileType *g, const GifByteType *d, int n)
{
    mb_put(g->UserData, d, (size_t)n);
    return n;
}

/* A GIF of w×h with palette pal (n_pal, a power of two), frames of index
 * pixels (each w×h), transparent index (or -1) in a GCE before frame 0. */
static membuf_t enc_gif(int w, int h, const GifColorType *pal, int n_pal, uint8_t *const *frames, int n_frames,
                        int transparent, bool interlace)
{
    membuf_t m = {0};
    int e = 0;
    GifFileType *g = EGifOpen(&m, gif_w, &e);
    assert_non_null(g);
    ColorMapObject *cm = GifMakeMapObject(n_pal, pal);
    EGifSetGifVersion(g, true);
    assert_int_equal(EGifPutScreenDesc(g, w, h, 8, 0, cm), GIF_OK);
    for (int f = 0; f < n_frames; f++) {
        GraphicsControlBlock gcb = {.DisposalMode = DISPOSAL_UNSPECIFIED, .DelayTime = 10,
                                    .TransparentColor = f == 0 ? transparent : NO_TRANSPARENT_COLOR};
        GifByteType ext[4];
        size_t n = EGifGCBToExtension(&gcb, ext);
        assert_int_equal(EGifPutExtension(g, GRAPHICS_EXT_FUNC_CODE, (int)n, ext), GIF_OK);
        assert_int_equal(EGifPutImageDesc(g, 0, 0, w, h, interlace, NULL), GIF_OK);
        if (!interlace) {
            for (int y = 0; y < h; y++)
                assert_int_equal(EGifPutLine(g, frames[f] + y * w, w), GIF_OK);
        } else {
            static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
            for (int p = 0; p < 4; p++)
                for (int y = start[p]; y < h; y += step[p])
                    assert_int_equal(EGifPutLine(g, frames[f] + y * w, w), GIF_OK);
        }
    }
    assert_int_equal(EGifCloseFile(g, &e), GIF_OK);
    GifFreeMapObject(cm);
    return m;
}

/* ---- helpers --------------------------------------------------------------------------- */

static uint32_t rng = 12345;
static uint8_t rnd8(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (uint8_t)(rng >> 24);
}

/* A smooth image (lossy codecs keep it well): gradients plus a soft wave. */
static uint8_t *smooth_rgb(uint32_t w, uint32_t h)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            uint8_t *o = p + ((size_t)y * w + x) * 3;
            o[0] = (uint8_t)(x * 255 / (w - 1));
            o[1] = (uint8_t)(y * 255 / (h - 1));
            o[2] = (uint8_t)(128 + 100 * sin((double)(x + y) / 9.0));
        }
    return p;
}

static image_rgb_t decode_ok(const membuf_t *m)
{
    image_rgb_t img;
    char err[200] = "";
    image_status_t s = image_decode(m->p, m->n, NULL, &img, err, sizeof err);
    if (s != IMAGE_OK)
        fail_msg("decode: %d %s", s, err);
    return img;
}

static image_status_t decode_status(const uint8_t *p, size_t n, uint64_t max_pixels)
{
    image_limits_t lim = IMAGE_LIMITS_DEFAULT;
    if (max_pixels)
        lim.max_pixels = max_pixels;
    image_rgb_t img;
    char err[200] = "";
    image_status_t s = image_decode(p, n, &lim, &img, err, sizeof err);
    if (s != IMAGE_OK)
        assert_true(err[0] != 0); /* every refusal says why */
    assert_null(img.rgb == NULL || s == IMAGE_OK ? NULL : img.rgb);
    image_rgb_free(&img);
    return s;
}

static void expect_close(const uint8_t *got, const uint8_t *want, size_t n, double max_mean, int max_abs)
{
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)got[i] - (int)want[i]);
        sum += d;
        if (d > worst)
            worst = d;
    }
    if (sum / (double)n > max_mean || worst > max_abs)
        fail_msg("mean abs err %.3f (max %.1f), worst %d (max %d)", sum / (double)n, max_mean, worst, max_abs);
}

static uint8_t ref_over_white(uint8_t c, uint8_t a)
{
    double v = c * (a / 255.0) + 255.0 * (1.0 - a / 255.0);
    return (uint8_t)lround(v);
}

/* Every truncation of a valid file is refused without a crash (ASan checks
 * the reads); the first byte lengths must not decode either. */
static void expect_truncations_refused(const membuf_t *m, size_t n_needed)
{
    for (size_t n = 0; n < n_needed; n += (n < 64 ? 1 : m->n / 37 + 1)) {
        image_status_t s = decode_status(m->p, n, 0);
        if (s != IMAGE_E_CORRUPT && s != IMAGE_E_FORMAT)
            fail_msg("truncated to %zu of %zu bytes: status %d", n, m->n, s);
    }
}

/* ---- PNG ------------------------------------------------------------------------------- */

static void test_png_rgb_exact(void **state)
{
    uint32_t w = 37, h = 23;
    uint8_t *raw = malloc(w * h * 3);
    for (size_t i = 0; i < w * h * 3; i++)
        raw[i] = rnd8();
    for (int il = 0; il < 2; il++) {
        membuf_t m = enc_png(w, h, PNG_COLOR_TYPE_RGB, 8, il, raw, w * 3, NULL, 0, NULL, 0);
        assert_int_equal(image_sniff(m.p, m.n), IMAGE_FMT_PNG);
        image_rgb_t img = decode_ok(&m);
        assert_int_equal(img.w, w);
        assert_int_equal(img.h, h);
        assert_memory_equal(img.rgb, raw, w * h * 3);
        image_rgb_free(&img);
        if (!il)
            expect_truncations_refused(&m, m.n);
        free(m.p);
    }
    free(raw);
}

static void test_png_grey_palette_16bit(void **state)
{
    uint32_t w = 19, h = 11;
    /* grey 8-bit */
    uint8_t *g = malloc(w * h);
    for (size_t i = 0; i < w * h; i++)
        g[i] = rnd8();
    membuf_t m = enc_png(w, h, PNG_COLOR_TYPE_GRAY, 8, false, g, w, NULL, 0, NULL, 0);
    image_rgb_t img = decode_ok(&m);
    for (size_t i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(img.rgb[i * 3 + k], g[i]);
    image_rgb_free(&img);
    free(m.p);

    /* palette with a tRNS: entry 2 half transparent, 3 fully */
    png_color pal[4] = {{255, 0, 0}, {0, 255, 0}, {10, 20, 30}, {1, 2, 3}};
    uint8_t trns[4] = {255, 255, 128, 0};
    for (size_t i = 0; i < w * h; i++)
        g[i] = rnd8() & 3;
    m = enc_png(w, h, PNG_COLOR_TYPE_PALETTE, 8, false, g, w, pal, 4, trns, 4);
    img = decode_ok(&m);
    for (size_t i = 0; i < w * h; i++) {
        const png_color *c = &pal[g[i]];
        uint8_t want[3] = {ref_over_white(c->red, trns[g[i]]), ref_over_white(c->green, trns[g[i]]),
                           ref_over_white(c->blue, trns[g[i]])};
        for (int k = 0; k < 3; k++)
            assert_true(abs((int)img.rgb[i * 3 + k] - (int)want[k]) <= 1);
    }
    image_rgb_free(&img);
    free(m.p);

    /* 16-bit RGB: the high byte of each sample */
    uint16_t *s16 = malloc(w * h * 3 * 2);
    for (size_t i = 0; i < w * h * 3; i++)
        s16[i] = (uint16_t)(rnd8() << 8 | rnd8());
    m = enc_png(w, h, PNG_COLOR_TYPE_RGB, 16, false, (uint8_t *)s16, w * 6, NULL, 0, NULL, 0);
    img = decode_ok(&m);
    for (size_t i = 0; i < w * h * 3; i++)
        assert_int_equal(img.rgb[i], s16[i] >> 8);
    image_rgb_free(&img);
    free(m.p);
    free(s16);
    free(g);
}

static void test_png_alpha_over_white(void **state)
{
    uint32_t w = 16, h = 16;
    uint8_t *raw = malloc(w * h * 4);
    for (size_t i = 0; i < w * h * 4; i++)
        raw[i] = rnd8();
    raw[3] = 0;   /* one fully transparent pixel: pure white */
    raw[7] = 255; /* one opaque: its colour */
    membuf_t m = enc_png(w, h, PNG_COLOR_TYPE_RGBA, 8, false, raw, w * 4, NULL, 0, NULL, 0);
    image_rgb_t img = decode_ok(&m);
    for (size_t i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++)
            assert_true(abs((int)img.rgb[i * 3 + k] - (int)ref_over_white(raw[i * 4 + k], raw[i * 4 + 3])) <= 1);
    assert_int_equal(img.rgb[0], 255);
    assert_int_equal(img.rgb[3], raw[4]);
    image_rgb_free(&img);
    free(m.p);
    free(raw);
}

static uint32_t crc32_ref(const uint8_t *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A PNG signature and a valid IHDR (its CRC right) of 60000×60000 RGB,
 * and nothing else: a zip bomb's header. */
static void bomb_png(uint8_t png[33])
{
    memcpy(png, "\x89PNG\r\n\x1a\n", 8);
    put_be32(png + 8, 13);
    memcpy(png + 12, "IHDR", 4);
    put_be32(png + 16, 60000);
    put_be32(png + 20, 60000);
    png[24] = 8, png[25] = 2, png[26] = 0, png[27] = 0, png[28] = 0;
    put_be32(png + 29, crc32_ref(png + 12, 17));
}

/* Rewrites a JPEG's SOF0 to say side × side; false when it has none. */
static bool patch_sof(membuf_t *j, uint16_t side)
{
    for (size_t i = 2; i + 9 < j->n; i++)
        if (j->p[i] == 0xFF && j->p[i + 1] == 0xC0) {
            j->p[i + 5] = j->p[i + 7] = (uint8_t)(side >> 8);
            j->p[i + 6] = j->p[i + 8] = (uint8_t)(side & 0xFF);
            return true;
        }
    return false;
}

static void test_bomb_headers(void **state)
{
    /* PNG: signature + a valid IHDR (CRC right) of 60000×60000 RGB, no IDAT. */
    uint8_t png[33];
    bomb_png(png);
    assert_int_equal(decode_status(png, sizeof png, 0), IMAGE_E_PIXELS);

    /* JPEG: a real 16×16 file whose SOF0 says 60000×60000, cut after the SOF. */
    uint8_t *raw = smooth_rgb(16, 16);
    membuf_t j = enc_jpeg(16, 16, 3, JCS_RGB, raw, 90);
    assert_true(patch_sof(&j, 60000));
    assert_int_equal(decode_status(j.p, j.n, 0), IMAGE_E_PIXELS);
    free(j.p);

    /* GIF: the logical screen says 65535×65535 (4.3 GP). */
    GifColorType pal[2] = {{0, 0, 0}, {255, 255, 255}};
    uint8_t fr[4] = {0, 1, 1, 0};
    uint8_t *frames[1] = {fr};
    membuf_t g = enc_gif(2, 2, pal, 2, frames, 1, -1, false);
    g.p[6] = g.p[7] = g.p[8] = g.p[9] = 0xFF;
    assert_int_equal(decode_status(g.p, g.n, 0), IMAGE_E_PIXELS);
    free(g.p);

    /* WebP lossless: VP8L header 16384×16384 (268 MP). */
    uint8_t *out = NULL;
    size_t n = WebPEncodeLosslessRGB(raw, 16, 16, 16 * 3, &out);
    assert_true(n > 25);
    assert_memory_equal(out + 12, "VP8L", 4);
    out[21] = out[22] = out[23] = 0xFF;
    out[24] = (uint8_t)(out[24] | 0x0F); /* 14 + 14 bits of w-1, h-1 */
    {
        image_limits_t lim = IMAGE_LIMITS_DEFAULT;
        image_rgb_t img;
        char err[200] = "";
        image_status_t s = image_decode(out, n, &lim, &img, err, sizeof err);
        if (s != IMAGE_E_PIXELS)
            fail_msg("webp bomb: %d %s", s, err);
    }
    WebPFree(out);

    /* And a small real image against a small pixel limit. */
    membuf_t p = enc_png(16, 16, PNG_COLOR_TYPE_RGB, 8, false, raw, 48, NULL, 0, NULL, 0);
    assert_int_equal(decode_status(p.p, p.n, 255), IMAGE_E_PIXELS);
    assert_int_equal(decode_status(p.p, p.n, 256), IMAGE_OK);
    free(p.p);
    free(raw);
}

/* ---- JPEG ------------------------------------------------------------------------------ */

static void test_jpeg(void **state)
{
    uint32_t w = 64, h = 48;
    uint8_t *raw = smooth_rgb(w, h);
    membuf_t m = enc_jpeg(w, h, 3, JCS_RGB, raw, 95);
    assert_int_equal(image_sniff(m.p, m.n), IMAGE_FMT_JPEG);
    image_rgb_t img = decode_ok(&m);
    assert_int_equal(img.w, w);
    assert_int_equal(img.h, h);
    expect_close(img.rgb, raw, w * h * 3, 3.0, 40);
    image_rgb_free(&img);
    expect_truncations_refused(&m, m.n);
    free(m.p);

    /* grey → R = G = B */
    uint8_t *g = malloc(w * h);
    for (size_t i = 0; i < w * h; i++)
        g[i] = raw[i * 3];
    m = enc_jpeg(w, h, 1, JCS_GRAYSCALE, g, 95);
    img = decode_ok(&m);
    uint8_t *g3 = malloc(w * h * 3);
    for (size_t i = 0; i < w * h * 3; i++)
        g3[i] = g[i / 3];
    expect_close(img.rgb, g3, w * h * 3, 3.0, 40);
    for (size_t i = 0; i < w * h; i++)
        assert_true(img.rgb[i * 3] == img.rgb[i * 3 + 1] && img.rgb[i * 3] == img.rgb[i * 3 + 2]);
    image_rgb_free(&img);
    free(m.p);

    /* CMYK: refused, saying so */
    uint8_t *cmyk = malloc(w * h * 4);
    for (size_t i = 0; i < w * h * 4; i++)
        cmyk[i] = rnd8();
    m = enc_jpeg(w, h, 4, JCS_CMYK, cmyk, 90);
    char err[200] = "";
    image_limits_t lim = IMAGE_LIMITS_DEFAULT;
    assert_int_equal(image_decode(m.p, m.n, &lim, &img, err, sizeof err), IMAGE_E_UNSUPPORTED);
    assert_non_null(strstr(err, "CMYK"));
    assert_null(img.rgb);
    free(m.p);
    free(cmyk);
    free(g);
    free(g3);
    free(raw);
}

/* ---- WebP ------------------------------------------------------------------------------ */

static void test_webp(void **state)
{
    uint32_t w = 40, h = 30;
    uint8_t *raw = smooth_rgb(w, h);
    for (size_t i = 0; i < 50; i++)
        raw[i * 7] = rnd8(); /* some noise: lossless must keep it */
    uint8_t *out = NULL;
    size_t n = WebPEncodeLosslessRGB(raw, (int)w, (int)h, (int)w * 3, &out);
    membuf_t m = {out, n, n};
    assert_int_equal(image_sniff(out, n), IMAGE_FMT_WEBP);
    image_rgb_t img = decode_ok(&m);
    assert_int_equal(img.w, w);
    assert_int_equal(img.h, h);
    assert_memory_equal(img.rgb, raw, w * h * 3);
    image_rgb_free(&img);
    expect_truncations_refused(&m, m.n);
    WebPFree(out);

    raw = realloc(raw, w * h * 4);
    uint8_t *rgba = raw;
    for (size_t i = 0; i < w * h * 4; i++)
        rgba[i] = rnd8();
    n = WebPEncodeLosslessRGBA(rgba, (int)w, (int)h, (int)w * 4, &out);
    m = (membuf_t){out, n, n};
    img = decode_ok(&m);
    for (size_t i = 0; i < w * h; i++)
        for (int k = 0; k < 3; k++) {
            /* lossless WebP may rewrite the colour of fully transparent pixels: both are white then */
            int want = ref_over_white(rgba[i * 4 + k], rgba[i * 4 + 3]);
            assert_true(abs((int)img.rgb[i * 3 + k] - want) <= 1);
        }
    image_rgb_free(&img);
    WebPFree(out);
    free(raw);

    raw = smooth_rgb(w, h);
    n = WebPEncodeRGB(raw, (int)w, (int)h, (int)w * 3, 95, &out);
    m = (membuf_t){out, n, n};
    img = decode_ok(&m);
    expect_close(img.rgb, raw, w * h * 3, 3.0, 40);
    image_rgb_free(&img);
    WebPFree(out);
    free(raw);
}

/* ---- GIF ------------------------------------------------------------------------------- */

static void test_gif_first_frame(void **state)
{
    int w = 21, h = 13;
    GifColorType pal[8];
    for (int i = 0; i < 8; i++)
        pal[i] = (GifColorType){rnd8(), rnd8(), rnd8()};
    uint8_t *f0 = malloc((size_t)w * h), *f1 = malloc((size_t)w * h);
    for (int i = 0; i < w * h; i++) {
        f0[i] = rnd8() & 7;
        f1[i] = rnd8() & 7;
    }
    uint8_t *frames[2] = {f0, f1};
    for (int il = 0; il < 2; il++) {
        membuf_t m = enc_gif(w, h, pal, 8, frames, 2, 5, il);
        assert_int_equal(image_sniff(m.p, m.n), IMAGE_FMT_GIF);
        image_rgb_t img = decode_ok(&m);
        assert_int_equal(img.w, (uint32_t)w);
        assert_int_equal(img.h, (uint32_t)h);
        for (int i = 0; i < w * h; i++) {
            uint8_t want[3] = {pal[f0[i]].Red, pal[f0[i]].Green, pal[f0[i]].Blue};
            if (f0[i] == 5)
                want[0] = want[1] = want[2] = 255; /* transparent: the white background */
            assert_memory_equal(img.rgb + i * 3, want, 3);
        }
        image_rgb_free(&img);
        /* A GIF cut after its first frame is still that frame: the cuts
         * that must fail are those inside frame 0 (a single-frame file,
         * less its block terminator and trailer). */
        if (!il) {
            membuf_t one = enc_gif(w, h, pal, 8, frames, 1, 5, false);
            expect_truncations_refused(&one, one.n - 2);
            free(one.p);
        }
        free(m.p);
    }
    free(f0);
    free(f1);
}

/* ---- magic, limits, base64 ------------------------------------------------------------- */

static void test_magic_and_bytes(void **state)
{
    static const uint8_t junk[] = "hello, this is not an image at all";
    assert_int_equal(image_sniff(junk, sizeof junk), IMAGE_FMT_UNKNOWN);
    assert_int_equal(decode_status(junk, sizeof junk, 0), IMAGE_E_FORMAT);
    assert_int_equal(decode_status(junk, 0, 0), IMAGE_E_FORMAT);
    image_limits_t lim = {.max_bytes = 10, .max_pixels = 1000};
    image_rgb_t img;
    char err[100];
    assert_int_equal(image_decode(junk, sizeof junk, &lim, &img, err, sizeof err), IMAGE_E_BYTES);
    assert_int_equal(image_format_of_media_type("image/jpg", 9), IMAGE_FMT_JPEG);
    assert_int_equal(image_format_of_media_type("IMAGE/PNG", 9), IMAGE_FMT_PNG);
    assert_int_equal(image_format_of_media_type("image/tiff", 10), IMAGE_FMT_UNKNOWN);
}

static void test_data_url(void **state)
{
    static const struct {
        const char *url;
        image_status_t want;
        const char *bytes; /* when ok */
        image_format_t fmt;
    } cases[] = {
        {"data:image/png;base64,aGVsbG8=", IMAGE_OK, "hello", IMAGE_FMT_PNG},
        {"data:image/png;base64,aGVsbG8", IMAGE_OK, "hello", IMAGE_FMT_PNG},
        {"DATA:image/jpeg;name=x.jpg;base64,aGVs\nbG8=", IMAGE_OK, "hello", IMAGE_FMT_JPEG},
        {"data:image/x-foo;base64,aGk=", IMAGE_OK, "hi", IMAGE_FMT_UNKNOWN},
        {"data:image/png;base64,", IMAGE_OK, "", IMAGE_FMT_PNG},
        {"data:image/png;base64,aGVsb*8=", IMAGE_E_BASE64, NULL, 0},
        {"data:image/png;base64,aGVsbG8==x", IMAGE_E_BASE64, NULL, 0},
        {"data:image/png;base64,a", IMAGE_E_BASE64, NULL, 0},
        {"data:image/png,hello", IMAGE_E_URL, NULL, 0},
        {"data:text/plain;base64,aGk=", IMAGE_E_URL, NULL, 0},
        {"https://example.com/cat.png", IMAGE_E_URL, NULL, 0},
        {"data:image/png;base64", IMAGE_E_URL, NULL, 0},
        {"data:image/png;base64,QUFBQUFBQUFBQUFB", IMAGE_E_BYTES, NULL, 0}, /* 12 bytes > 10 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint8_t *b = (uint8_t *)1;
        size_t n = 99;
        image_format_t f;
        char err[200] = "";
        image_status_t s = image_data_url_parse(cases[i].url, strlen(cases[i].url), 10, &b, &n, &f, err, sizeof err);
        if (s != cases[i].want)
            fail_msg("case %zu (%s): %d, want %d (%s)", i, cases[i].url, s, cases[i].want, err);
        if (s == IMAGE_OK) {
            assert_int_equal(n, strlen(cases[i].bytes));
            assert_memory_equal(b, cases[i].bytes, n);
            assert_int_equal(f, cases[i].fmt);
        } else {
            assert_null(b);
            assert_true(err[0]);
        }
        free(b);
    }
}

/* ---- resize and hash ------------------------------------------------------------------- */

static void ref_fit(const image_rgb_t *s, uint32_t side, uint8_t *out)
{
    double sc = fmin((double)side / s->w, (double)side / s->h);
    uint32_t nw = (uint32_t)ceil(s->w * sc - 1e-6), nh = (uint32_t)ceil(s->h * sc - 1e-6);
    nw = nw > side ? side : nw;
    nh = nh > side ? side : nh;
    uint32_t ox = (side - nw) / 2, oy = (side - nh) / 2;
    memset(out, 0, (size_t)side * side * 3);
    for (uint32_t y = 0; y < nh; y++)
        for (uint32_t x = 0; x < nw; x++) {
            double sx = nw > 1 ? x * (double)(s->w - 1) / (nw - 1) : 0;
            double sy = nh > 1 ? y * (double)(s->h - 1) / (nh - 1) : 0;
            uint32_t x0 = (uint32_t)floor(sx), y0 = (uint32_t)floor(sy);
            uint32_t x1 = x0 + 1 < s->w ? x0 + 1 : x0, y1 = y0 + 1 < s->h ? y0 + 1 : y0;
            double fx = sx - x0, fy = sy - y0;
            for (int k = 0; k < 3; k++) {
                double v = (1 - fx) * (1 - fy) * s->rgb[(y0 * s->w + x0) * 3 + k] +
                           fx * (1 - fy) * s->rgb[(y0 * s->w + x1) * 3 + k] +
                           (1 - fx) * fy * s->rgb[(y1 * s->w + x0) * 3 + k] + fx * fy * s->rgb[(y1 * s->w + x1) * 3 + k];
                out[((oy + y) * side + ox + x) * 3 + k] = (uint8_t)v;
            }
        }
}

static void test_fit_square(void **state)
{
    static const uint32_t shapes[][3] = {{100, 50, 32}, {50, 100, 32}, {7, 7, 32}, {32, 32, 32}, {1, 300, 16},
                                         {640, 480, 96}, {3, 2, 5}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        image_rgb_t s = {shapes[t][0], shapes[t][1], NULL};
        uint32_t side = shapes[t][2];
        s.rgb = malloc((size_t)s.w * s.h * 3);
        for (size_t i = 0; i < (size_t)s.w * s.h * 3; i++)
            s.rgb[i] = rnd8();
        image_rgb_t o;
        image_fit_square(&s, side, &o);
        assert_int_equal(o.w, side);
        assert_int_equal(o.h, side);
        uint8_t *ref = malloc((size_t)side * side * 3);
        ref_fit(&s, side, ref);
        expect_close(o.rgb, ref, (size_t)side * side * 3, 0.05, 1);
        if (s.w == side && s.h == side)
            assert_memory_equal(o.rgb, s.rgb, (size_t)side * side * 3);
        free(ref);
        image_rgb_free(&o);
        image_rgb_free(&s);
    }
}

static void test_hash(void **state)
{
    uint8_t px[2 * 3 * 3];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = rnd8();
    image_rgb_t a = {2, 3, px}, b = {3, 2, px};
    uint8_t ha[32], hb[32], ref[32];
    image_hash(&a, ha);
    image_hash(&b, hb);
    assert_memory_not_equal(ha, hb, 32); /* same bytes, other shape */
    uint8_t cat[sizeof px + 8];
    memcpy(cat, px, sizeof px);
    memcpy(cat + sizeof px, "\x02\0\0\0\x03\0\0\0", 8);
    crypto_generichash(ref, 32, cat, sizeof cat, NULL, 0);
    assert_memory_equal(ha, ref, 32);
    px[5] ^= 1;
    image_hash(&a, hb);
    assert_memory_not_equal(ha, hb, 32);
}

/* test_image --write-seeds DIR: small files of each format, written by the
 * encoders above, as the seed corpus of tests/fuzz/fuzz_image.c. */
static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

/* write_file of m, then frees it. */
static void write_take(const char *dir, const char *name, membuf_t *m)
{
    write_file(dir, name, m->p, m->n);
    free(m->p);
    *m = (membuf_t){0};
}

static int write_seeds(const char *dir)
{
    uint32_t w = 12, h = 9;
    uint8_t *raw = smooth_rgb(w, h);
    membuf_t m = enc_png(w, h, PNG_COLOR_TYPE_RGB, 8, false, raw, w * 3, NULL, 0, NULL, 0);
    write_take(dir, "rgb.png", &m);
    png_color pal[4] = {{255, 0, 0}, {0, 255, 0}, {10, 20, 30}, {1, 2, 3}};
    uint8_t trns[3] = {255, 0, 128};
    uint8_t idx[12 * 9];
    for (size_t i = 0; i < sizeof idx; i++)
        idx[i] = (uint8_t)(i % 4);
    m = enc_png(w, h, PNG_COLOR_TYPE_PALETTE, 8, true, idx, w, pal, 4, trns, 3);
    write_take(dir, "palette-interlaced.png", &m);
    uint16_t s16[12 * 9 * 4];
    for (size_t i = 0; i < 12 * 9 * 4; i++)
        s16[i] = (uint16_t)(i * 601);
    m = enc_png(w, h, PNG_COLOR_TYPE_RGBA, 16, false, (uint8_t *)s16, w * 8, NULL, 0, NULL, 0);
    write_take(dir, "rgba16.png", &m);
    m = enc_jpeg(w, h, 3, JCS_RGB, raw, 80);
    write_take(dir, "rgb.jpg", &m);
    m = enc_jpeg(w, h, 1, JCS_GRAYSCALE, idx, 80);
    write_take(dir, "grey.jpg", &m);
    uint8_t *out = NULL;
    size_t n = WebPEncodeLosslessRGB(raw, (int)w, (int)h, (int)w * 3, &out);
    write_file(dir, "lossless.webp", out, n);
    WebPFree(out);
    n = WebPEncodeRGB(raw, (int)w, (int)h, (int)w * 3, 70, &out);
    write_file(dir, "lossy.webp", out, n);
    WebPFree(out);
    GifColorType gp[4] = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}, {0, 0, 255}};
    uint8_t *frames[2] = {idx, idx};
    m = enc_gif((int)w, (int)h, gp, 4, frames, 2, 2, true);
    write_take(dir, "two-frames.gif", &m);
    static const char url[] = "data:image/png;base64,iVBORw0KGgo=";
    write_file(dir, "data-url.txt", url, sizeof url - 1);
    free(raw);
    return 0;
}

/* test_image --write-hostile DIR: files the gateway must refuse or take
 * with care (tests/integration/images.sh): a CMYK JPEG, zip-bomb headers
 * (PNG, JPEG, GIF), a 16-bit PNG and a two-frame GIF (both accepted). */
static int write_hostile(const char *dir)
{
    uint32_t w = 16, h = 16;
    uint8_t *cmyk = malloc(w * h * 4);
    for (size_t i = 0; i < w * h * 4; i++)
        cmyk[i] = rnd8();
    membuf_t m = enc_jpeg(w, h, 4, JCS_CMYK, cmyk, 90);
    write_take(dir, "cmyk.jpg", &m);
    free(cmyk);
    uint8_t png[33];
    bomb_png(png);
    write_file(dir, "bomb.png", png, sizeof png);
    uint8_t *raw = smooth_rgb(w, h);
    m = enc_jpeg(w, h, 3, JCS_RGB, raw, 90);
    patch_sof(&m, 60000);
    write_take(dir, "bomb.jpg", &m);
    m = enc_jpeg(w, h, 3, JCS_RGB, raw, 90);
    write_take(dir, "ok.jpg", &m);
    uint16_t *s16 = malloc(w * h * 3 * 2);
    for (size_t i = 0; i < w * h * 3; i++)
        s16[i] = (uint16_t)(i * 257);
    m = enc_png(w, h, PNG_COLOR_TYPE_RGB, 16, false, (uint8_t *)s16, w * 6, NULL, 0, NULL, 0);
    write_take(dir, "rgb16.png", &m);
    free(s16);
    m = enc_png(w, h, PNG_COLOR_TYPE_RGB, 8, false, raw, w * 3, NULL, 0, NULL, 0);
    write_take(dir, "ok.png", &m);
    GifColorType gp[2] = {{0, 0, 0}, {255, 255, 255}};
    uint8_t idx[16 * 16];
    for (size_t i = 0; i < sizeof idx; i++)
        idx[i] = (uint8_t)(i & 1);
    uint8_t *frames[2] = {idx, idx};
    m = enc_gif((int)w, (int)h, gp, 2, frames, 2, -1, false);
    write_file(dir, "animated.gif", m.p, m.n);
    m.p[6] = m.p[7] = m.p[8] = m.p[9] = 0xFF;
    write_take(dir, "bomb.gif", &m);
    uint8_t *out = NULL;
    size_t n = WebPEncodeLosslessRGB(raw, (int)w, (int)h, (int)w * 3, &out);
    write_file(dir, "ok.webp", out, n);
    WebPFree(out);
    free(raw);
    return 0;
}

/* image_tiles: a 6 x 4 picture cut into a 3 x 2 grid of 2 px tiles is
 * already the refined size (no resize), so each tile is its 2 x 2 block of
 * the picture, row-major; the last image is the picture stretched to the
 * side (image_stretch, as documented); a 0 x 0 grid is that alone. */
static void test_tiles(void **state)
{
    (void)state;
    uint8_t px[4 * 6 * 3];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 7 + 1);
    image_rgb_t src = {6, 4, px}, out[7], g;
    image_tiles(&src, 2, 3, 2, out);
    for (uint32_t ty = 0; ty < 2; ty++)
        for (uint32_t tx = 0; tx < 3; tx++) {
            const image_rgb_t *t = &out[ty * 3 + tx];
            assert_int_equal(t->w, 2);
            assert_int_equal(t->h, 2);
            for (uint32_t y = 0; y < 2; y++)
                assert_memory_equal(t->rgb + y * 6, px + ((ty * 2 + y) * 6 + tx * 2) * 3, 6);
        }
    image_stretch(&src, 2, 2, &g);
    assert_int_equal(out[6].w, 2);
    assert_memory_equal(out[6].rgb, g.rgb, 2 * 2 * 3);
    for (int i = 0; i < 7; i++)
        image_rgb_free(&out[i]);
    image_tiles(&src, 2, 0, 0, out);
    assert_memory_equal(out[0].rgb, g.rgb, 2 * 2 * 3);
    image_rgb_free(&out[0]);
    image_rgb_free(&g);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-hostile") == 0)
        return write_hostile(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--write-seeds") == 0)
        return write_seeds(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_rgb_exact),   cmocka_unit_test(test_png_grey_palette_16bit),
        cmocka_unit_test(test_png_alpha_over_white), cmocka_unit_test(test_bomb_headers),
        cmocka_unit_test(test_jpeg),            cmocka_unit_test(test_webp),
        cmocka_unit_test(test_gif_first_frame), cmocka_unit_test(test_magic_and_bytes),
        cmocka_unit_test(test_data_url),        cmocka_unit_test(test_fit_square),
        cmocka_unit_test(test_hash),            cmocka_unit_test(test_tiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
