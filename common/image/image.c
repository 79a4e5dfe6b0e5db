/* image.c — decoding, fitting and hashing a client's image (image.h).
 *
 * Each decoder reads the header first, checks w·h against the limits, and
 * only then allocates the RGB buffer; library errors (libpng, libjpeg
 * longjmp; libwebp, giflib return codes) become IMAGE_E_CORRUPT with the
 * library's message. */
#include "common/image/image.h"

#include <assert.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE */
#include <gif_lib.h>
#include <jpeglib.h>
#include <png.h>
#include <setjmp.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <strings.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

image_format_t image_sniff(const uint8_t *b, size_t n)
{
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
        return IMAGE_FMT_PNG;
    if (n >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return IMAGE_FMT_JPEG;
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0)
        return IMAGE_FMT_WEBP;
    if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0))
        return IMAGE_FMT_GIF;
    return IMAGE_FMT_UNKNOWN;
}

const char *image_format_name(image_format_t f)
{
    static const char *const names[] = {"unknown", "png", "jpeg", "webp", "gif"};
    _Static_assert(sizeof names / sizeof names[0] == IMAGE_FMT_GIF + 1, "a name per format");
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : names[0];
}

image_format_t image_format_of_media_type(const char *mt, size_t len)
{
    static const struct {
        const char *name;
        image_format_t f;
    } types[] = {
        {"image/png", IMAGE_FMT_PNG},   {"image/jpeg", IMAGE_FMT_JPEG}, {"image/jpg", IMAGE_FMT_JPEG},
        {"image/webp", IMAGE_FMT_WEBP}, {"image/gif", IMAGE_FMT_GIF},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strlen(types[i].name) == len && strncasecmp(types[i].name, mt, len) == 0)
            return types[i].f;
    return IMAGE_FMT_UNKNOWN;
}

/* w·h against the limits; the one check every decoder makes before allocating. */
static image_status_t check_dims(uint64_t w, uint64_t h, const image_limits_t *lim, char *err, size_t errlen)
{
    if (w == 0 || h == 0 || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE || w * h > lim->max_pixels) {
        errbuf_set(err, errlen, "image is %llux%llu pixels; the limit is %llu pixels (each side 1..%u)",
                   (unsigned long long)w, (unsigned long long)h, (unsigned long long)lim->max_pixels,
                   IMAGE_MAX_SIDE);
        return IMAGE_E_PIXELS;
    }
    return IMAGE_OK;
}

static inline uint8_t over_bg(uint32_t c, uint32_t a)
{
    return (uint8_t)((c * a + IMAGE_ALPHA_BG * (255u - a) + 127u) / 255u);
}

/* RGBA rows (n pixels) → RGB over the background, in place (dst may be src). */
static void rgba_to_rgb(uint8_t *dst, const uint8_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t a = src[4 * i + 3];
        uint8_t r = over_bg(src[4 * i], a), g = over_bg(src[4 * i + 1], a), b = over_bg(src[4 * i + 2], a);
        dst[3 * i] = r;
        dst[3 * i + 1] = g;
        dst[3 * i + 2] = b;
    }
}

/* ---- PNG ------------------------------------------------------------------------------- */

typedef struct png_src {
    const uint8_t *buf;
    size_t len, off;
    char msg[160]; /* libpng's error text */
} png_src_t;

static void png_read_mem(png_structp png, png_bytep out, size_t n)
{
    png_src_t *s = png_get_io_ptr(png);
    if (n > s->len - s->off)
        png_error(png, "truncated file");
    memcpy(out, s->buf + s->off, n);
    s->off += n;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src_t *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {}

static image_status_t decode_png(const uint8_t *buf, size_t len, const image_limits_t *lim, image_rgb_t *out,
                                 char *err, size_t errlen)
{
    /* IHDR is the first chunk; its size is checked before libpng reads on
     * to the first IDAT (which a zip bomb need not even have). */
    if (len >= 24 && memcmp(buf + 12, "IHDR", 4) == 0) {
        uint32_t w = (uint32_t)buf[16] << 24 | (uint32_t)buf[17] << 16 | (uint32_t)buf[18] << 8 | buf[19];
        uint32_t h = (uint32_t)buf[20] << 24 | (uint32_t)buf[21] << 16 | (uint32_t)buf[22] << 8 | buf[23];
        image_status_t d = check_dims(w, h, lim, err, errlen);
        if (d != IMAGE_OK)
            return d;
    }
    png_src_t src = {.buf = buf, .len = len};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    if (!png) {
        fprintf(stderr, "%s:%d: out of memory\n", __FILE__, __LINE__);
        abort();
    }
    png_infop info = png_create_info_struct(png);
    /* Set before any longjmp can happen; read after one, so volatile. */
    uint8_t *volatile rgba = NULL;
    png_bytep *volatile rows = NULL;
    volatile image_status_t st = IMAGE_E_CORRUPT;
    if (!info || setjmp(png_jmpbuf(png))) {
        if (st == IMAGE_E_CORRUPT)
            errbuf_set(err, errlen, "bad PNG: %s", src.msg[0] ? src.msg : "libpng error");
        free(rgba);
        free(rows);
        png_destroy_read_struct(&png, info ? &info : NULL, NULL);
        return st;
    }
    png_set_read_fn(png, &src, png_read_mem);
    /* Chunk sizes (zTXt, iCCP …) are bounded too, not only the pixels. */
    png_set_chunk_malloc_max(png, 8u << 20);
    png_set_user_limits(png, IMAGE_MAX_SIDE, IMAGE_MAX_SIDE);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    image_status_t d = check_dims(w, h, lim, err, errlen);
    if (d != IMAGE_OK) {
        st = d;
        png_longjmp(png, 1);
    }
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    if (depth == 16)
        png_set_strip_16(png); /* high byte, like stb_image */
    if (color == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_tRNS_to_alpha(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_add_alpha(png, 0xFF, PNG_FILLER_AFTER); /* always RGBA: one compositing path */
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 4) {
        snprintf(src.msg, sizeof src.msg, "unexpected row size");
        png_longjmp(png, 1);
    }
    rgba = xmalloc((size_t)w * h * 4);
    rows = xmalloc(sizeof(png_bytep) * h);
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = rgba + (size_t)y * w * 4;
    png_read_image(png, rows);
    /* The IEND and anything after the pixels is not needed. */
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    rgba_to_rgb(rgba, rgba, (size_t)w * h);
    out->w = w;
    out->h = h;
    out->rgb = xrealloc(rgba, (size_t)w * h * 3);
    return IMAGE_OK;
}

/* ---- JPEG ------------------------------------------------------------------------------ */

typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jmp;
    char msg[JMSG_LENGTH_MAX];
} jpeg_err_t;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_err_t *e = (jpeg_err_t *)c->err;
    c->err->format_message(c, e->msg);
    longjmp(e->jmp, 1);
}

/* Warnings (level -1) are corrupt data — a truncated file, a bad Huffman
 * code — which libjpeg would paper over with grey: refuse instead. */
static void jpeg_on_message(j_common_ptr c, int level)
{
    if (level < 0)
        jpeg_on_error(c);
}

static void jpeg_on_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    if (c->is_decompressor && d->input_scan_number > IMAGE_JPEG_MAX_SCANS) {
        jpeg_err_t *e = (jpeg_err_t *)c->err;
        snprintf(e->msg, sizeof e->msg, "more than %d scans", IMAGE_JPEG_MAX_SCANS);
        longjmp(e->jmp, 1);
    }
}

static image_status_t decode_jpeg(const uint8_t *buf, size_t len, const image_limits_t *lim, image_rgb_t *out,
                                  char *err, size_t errlen)
{
    struct jpeg_decompress_struct d;
    jpeg_err_t e;
    struct jpeg_progress_mgr prog = {.progress_monitor = jpeg_on_progress};
    uint8_t *volatile rgb = NULL;
    volatile image_status_t st = IMAGE_E_CORRUPT;
    memset(&d, 0, sizeof d);
    d.err = jpeg_std_error(&e.mgr);
    e.mgr.error_exit = jpeg_on_error;
    e.mgr.emit_message = jpeg_on_message;
    e.msg[0] = 0;
    if (setjmp(e.jmp)) {
        if (st == IMAGE_E_CORRUPT)
            errbuf_set(err, errlen, "bad JPEG: %s", e.msg[0] ? e.msg : "libjpeg error");
        jpeg_destroy_decompress(&d);
        free(rgb);
        return st;
    }
    jpeg_create_decompress(&d);
    d.progress = &prog;
    jpeg_mem_src(&d, buf, (unsigned long)len);
    jpeg_read_header(&d, TRUE);
    image_status_t s = check_dims(d.image_width, d.image_height, lim, err, errlen);
    if (s != IMAGE_OK) {
        st = s;
        longjmp(e.jmp, 1);
    }
    if (d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK || d.num_components == 4) {
        errbuf_set(err, errlen, "CMYK JPEG is not supported: convert the image to RGB");
        st = IMAGE_E_UNSUPPORTED;
        longjmp(e.jmp, 1);
    }
    d.out_color_space = JCS_RGB; /* grey and YCbCr both convert */
    jpeg_start_decompress(&d);
    if (d.output_components != 3 || d.output_width != d.image_width || d.output_height != d.image_height) {
        snprintf(e.msg, sizeof e.msg, "unexpected output shape");
        longjmp(e.jmp, 1);
    }
    size_t w = d.output_width, h = d.output_height;
    rgb = xmalloc(w * h * 3);
    while (d.output_scanline < d.output_height) {
        JSAMPROW row = rgb + (size_t)d.output_scanline * w * 3;
        if (jpeg_read_scanlines(&d, &row, 1) != 1) {
            snprintf(e.msg, sizeof e.msg, "no progress reading scanlines");
            longjmp(e.jmp, 1);
        }
    }
    jpeg_finish_decompress(&d);
    jpeg_destroy_decompress(&d);
    out->w = (uint32_t)w;
    out->h = (uint32_t)h;
    out->rgb = rgb;
    return IMAGE_OK;
}

/* ---- WebP ------------------------------------------------------------------------------ */

static const char *webp_status_name(VP8StatusCode c)
{
    /* indexed by VP8StatusCode (webp/decode.h: OK = 0 … NOT_ENOUGH_DATA = 7) */
    static const char *const names[] = {"ok", "out of memory", "invalid parameter", "bitstream error",
                                        "unsupported feature", "suspended", "aborted", "truncated file"};
    return (unsigned)c < sizeof names / sizeof names[0] ? names[c] : "error";
}

/* Decodes one still WebP bitstream (w×h as its features say) into RGBA. */
static image_status_t webp_rgba(const uint8_t *buf, size_t len, int w, int h, uint8_t *rgba, char *err,
                                size_t errlen)
{
    WebPDecoderConfig cfg;
    if (!WebPInitDecoderConfig(&cfg))
        return errbuf_set(err, errlen, "bad WebP: library version mismatch"), IMAGE_E_CORRUPT;
    cfg.output.colorspace = MODE_RGBA;
    cfg.output.is_external_memory = 1;
    cfg.output.u.RGBA.rgba = rgba;
    cfg.output.u.RGBA.stride = w * 4;
    cfg.output.u.RGBA.size = (size_t)w * h * 4;
    VP8StatusCode c = WebPDecode(buf, len, &cfg);
    WebPFreeDecBuffer(&cfg.output);
    if (c != VP8_STATUS_OK)
        return errbuf_set(err, errlen, "bad WebP: %s", webp_status_name(c)), IMAGE_E_CORRUPT;
    return IMAGE_OK;
}

static image_status_t decode_webp(const uint8_t *buf, size_t len, const image_limits_t *lim, image_rgb_t *out,
                                  char *err, size_t errlen)
{
    WebPBitstreamFeatures f;
    VP8StatusCode c = WebPGetFeatures(buf, len, &f);
    if (c != VP8_STATUS_OK)
        return errbuf_set(err, errlen, "bad WebP: %s", webp_status_name(c)), IMAGE_E_CORRUPT;
    image_status_t s = check_dims((uint64_t)f.width, (uint64_t)f.height, lim, err, errlen);
    if (s != IMAGE_OK)
        return s;
    size_t n = (size_t)f.width * (size_t)f.height;
    uint8_t *rgba = xmalloc(n * 4);
    if (!f.has_animation) {
        s = webp_rgba(buf, len, f.width, f.height, rgba, err, errlen);
    } else {
        /* The first frame, placed on the canvas (its features' size). */
        WebPData data = {buf, len};
        WebPDemuxer *dm = WebPDemux(&data);
        WebPIterator it;
        s = IMAGE_E_CORRUPT;
        memset(rgba, 0, n * 4); /* transparent: the alpha background shows */
        if (!dm || !WebPDemuxGetFrame(dm, 1, &it)) {
            errbuf_set(err, errlen, "bad WebP: animation without a first frame");
        } else {
            if (it.x_offset < 0 || it.y_offset < 0 || it.width <= 0 || it.height <= 0 ||
                it.x_offset + it.width > f.width || it.y_offset + it.height > f.height) {
                errbuf_set(err, errlen, "bad WebP: first frame outside the canvas");
            } else {
                uint8_t *fr = xmalloc((size_t)it.width * it.height * 4);
                s = webp_rgba(it.fragment.bytes, it.fragment.size, it.width, it.height, fr, err, errlen);
                for (int y = 0; s == IMAGE_OK && y < it.height; y++)
                    memcpy(rgba + (((size_t)(it.y_offset + y) * f.width) + it.x_offset) * 4,
                           fr + (size_t)y * it.width * 4, (size_t)it.width * 4);
                free(fr);
            }
            WebPDemuxReleaseIterator(&it);
        }
        WebPDemuxDelete(dm);
    }
    if (s != IMAGE_OK) {
        free(rgba);
        return s;
    }
    rgba_to_rgb(rgba, rgba, n);
    out->w = (uint32_t)f.width;
    out->h = (uint32_t)f.height;
    out->rgb = xrealloc(rgba, n * 3);
    return IMAGE_OK;
}

/* ---- GIF ------------------------------------------------------------------------------- */

typedef struct gif_src {
    const uint8_t *buf;
    size_t len, off;
} gif_src_t;

static int gif_read_mem(GifFileType *g, GifByteType *out, int n)
{
    gif_src_t *s = g->UserData;
    if (n < 0)
        return 0;
    size_t k = (size_t)n <= s->len - s->off ? (size_t)n : s->len - s->off;
    memcpy(out, s->buf + s->off, k);
    s->off += k;
    return (int)k;
}

static image_status_t gif_fail(GifFileType *g, int code, char *err, size_t errlen)
{
    const char *m = GifErrorString(code ? code : (g ? g->Error : 0));
    errbuf_set(err, errlen, "bad GIF: %s", m ? m : "giflib error");
    return IMAGE_E_CORRUPT;
}

static image_status_t decode_gif(const uint8_t *buf, size_t len, const image_limits_t *lim, image_rgb_t *out,
                                 char *err, size_t errlen)
{
    gif_src_t src = {buf, len, 0};
    int code = 0;
    GifFileType *g = DGifOpen(&src, gif_read_mem, &code);
    if (!g)
        return gif_fail(NULL, code, err, errlen);
    image_status_t s = check_dims((uint64_t)(g->SWidth > 0 ? g->SWidth : 0),
                                  (uint64_t)(g->SHeight > 0 ? g->SHeight : 0), lim, err, errlen);
    if (s != IMAGE_OK) {
        DGifCloseFile(g, &code);
        return s;
    }
    size_t W = (size_t)g->SWidth, H = (size_t)g->SHeight;
    uint8_t *rgb = NULL, *line = NULL;
    int transparent = -1;
    s = IMAGE_E_CORRUPT;
    for (;;) {
        GifRecordType rt;
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) {
            gif_fail(g, 0, err, errlen);
            break;
        }
        if (rt == TERMINATE_RECORD_TYPE) {
            errbuf_set(err, errlen, "bad GIF: no image");
            break;
        }
        if (rt == EXTENSION_RECORD_TYPE) {
            int ext;
            GifByteType *data;
            if (DGifGetExtension(g, &ext, &data) == GIF_ERROR) {
                gif_fail(g, 0, err, errlen);
                break;
            }
            bool bad = false;
            while (data) {
                GraphicsControlBlock gcb;
                if (ext == GRAPHICS_EXT_FUNC_CODE && data[0] == 4 &&
                    DGifExtensionToGCB(data[0], data + 1, &gcb) == GIF_OK)
                    transparent = gcb.TransparentColor;
                if (DGifGetExtensionNext(g, &data) == GIF_ERROR) {
                    bad = true;
                    break;
                }
            }
            if (bad) {
                gif_fail(g, 0, err, errlen);
                break;
            }
            continue;
        }
        if (rt != IMAGE_DESC_RECORD_TYPE)
            continue;
        if (DGifGetImageDesc(g) == GIF_ERROR) {
            gif_fail(g, 0, err, errlen);
            break;
        }
        GifImageDesc *id = &g->Image;
        ColorMapObject *cm = id->ColorMap ? id->ColorMap : g->SColorMap;
        if (!cm || id->Width <= 0 || id->Height <= 0 || id->Left < 0 || id->Top < 0 ||
            (size_t)id->Left + id->Width > W || (size_t)id->Top + id->Height > H) {
            errbuf_set(err, errlen, "bad GIF: %s", !cm ? "no colour map" : "frame outside the screen");
            break;
        }
        rgb = xmalloc(W * H * 3);
        memset(rgb, IMAGE_ALPHA_BG, W * H * 3); /* uncovered canvas: the alpha background */
        line = xmalloc((size_t)id->Width);
        /* Interlaced frames store rows in four passes: 0,8,16…; 4,12…; 2,6…; 1,3… */
        static const int start[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
        int n_pass = id->Interlace ? 4 : 1;
        bool ok = true;
        for (int p = 0; ok && p < n_pass; p++) {
            for (int y = id->Interlace ? start[p] : 0; ok && y < id->Height; y += id->Interlace ? step[p] : 1) {
                if (DGifGetLine(g, line, id->Width) == GIF_ERROR) {
                    ok = false;
                    break;
                }
                uint8_t *o = rgb + (((size_t)(id->Top + y) * W) + (size_t)id->Left) * 3;
                for (int x = 0; x < id->Width; x++, o += 3) {
                    int c = line[x];
                    if (c == transparent || c >= cm->ColorCount)
                        continue; /* stays background */
                    o[0] = cm->Colors[c].Red;
                    o[1] = cm->Colors[c].Green;
                    o[2] = cm->Colors[c].Blue;
                }
            }
        }
        if (!ok) {
            gif_fail(g, 0, err, errlen);
            break;
        }
        s = IMAGE_OK;
        break; /* the first frame only */
    }
    free(line);
    DGifCloseFile(g, &code);
    if (s != IMAGE_OK) {
        free(rgb);
        return s;
    }
    out->w = (uint32_t)W;
    out->h = (uint32_t)H;
    out->rgb = rgb;
    return IMAGE_OK;
}

/* ---- the calls ------------------------------------------------------------------------- */

image_status_t image_decode(const uint8_t *buf, size_t len, const image_limits_t *lim, image_rgb_t *out,
                            char *err, size_t errlen)
{
    image_limits_t dflt = IMAGE_LIMITS_DEFAULT;
    if (!lim)
        lim = &dflt;
    memset(out, 0, sizeof *out);
    if (len > lim->max_bytes) {
        errbuf_set(err, errlen, "image is %zu bytes; the limit is %zu", len, lim->max_bytes);
        return IMAGE_E_BYTES;
    }
    switch (image_sniff(buf, len)) {
    case IMAGE_FMT_PNG: return decode_png(buf, len, lim, out, err, errlen);
    case IMAGE_FMT_JPEG: return decode_jpeg(buf, len, lim, out, err, errlen);
    case IMAGE_FMT_WEBP: return decode_webp(buf, len, lim, out, err, errlen);
    case IMAGE_FMT_GIF: return decode_gif(buf, len, lim, out, err, errlen);
    default:
        errbuf_set(err, errlen, "not a PNG, JPEG, WebP or GIF image (by its first bytes)");
        return IMAGE_E_FORMAT;
    }
}

/* Align-corners bilinear: (sw,sh) → (dw,dh) into dst with row stride ds
 * pixels, truncating like llama.cpp's resize_bilinear (image.h). */
static void bilinear(const uint8_t *src, uint32_t sw, uint32_t sh, uint8_t *dst, uint32_t dw, uint32_t dh,
                     uint32_t ds)
{
    float xr = dw > 1 ? (float)(sw - 1) / (float)(dw - 1) : 0.0f;
    float yr = dh > 1 ? (float)(sh - 1) / (float)(dh - 1) : 0.0f;
    for (uint32_t y = 0; y < dh; y++) {
        float py = (float)y * yr;
        uint32_t y0 = (uint32_t)py < sh - 1 ? (uint32_t)py : sh - 1;
        uint32_t y1 = y0 + 1 < sh ? y0 + 1 : sh - 1;
        float fy = py - (float)y0;
        for (uint32_t x = 0; x < dw; x++) {
            float px = (float)x * xr;
            uint32_t x0 = (uint32_t)px < sw - 1 ? (uint32_t)px : sw - 1;
            uint32_t x1 = x0 + 1 < sw ? x0 + 1 : sw - 1;
            float fx = px - (float)x0;
            const uint8_t *a = src + ((size_t)y0 * sw + x0) * 3, *b = src + ((size_t)y0 * sw + x1) * 3;
            const uint8_t *c = src + ((size_t)y1 * sw + x0) * 3, *d = src + ((size_t)y1 * sw + x1) * 3;
            uint8_t *o = dst + ((size_t)y * ds + x) * 3;
            for (int k = 0; k < 3; k++) {
                float top = (float)a[k] + ((float)b[k] - (float)a[k]) * fx;
                float bot = (float)c[k] + ((float)d[k] - (float)c[k]) * fx;
                o[k] = (uint8_t)(top + (bot - top) * fy);
            }
        }
    }
}

typedef void (*resize_fn)(const uint8_t *, uint32_t, uint32_t, uint8_t *, uint32_t, uint32_t, uint32_t);

/* src scaled by resize to fit w × h, aspect ratio kept (each side
 * ceil(side·s), s = min(w/src.w, h/src.h) in float), centred on black; a
 * copy when src is already w × h (llama.cpp's PAD_CEIL resize) */
static void fit(const image_rgb_t *src, uint32_t w, uint32_t h, resize_fn resize, image_rgb_t *out)
{
    assert(w > 0 && h > 0 && src->w > 0 && src->h > 0 && src->rgb);
    size_t n = (size_t)w * h * 3;
    out->w = w, out->h = h;
    out->rgb = xmalloc(n);
    if (src->w == w && src->h == h) {
        memcpy(out->rgb, src->rgb, n);
        return;
    }
    memset(out->rgb, 0, n);
    float sx = (float)w / (float)src->w, sy = (float)h / (float)src->h;
    float sc = sx < sy ? sx : sy;
    uint32_t nw = (uint32_t)ceilf((float)src->w * sc), nh = (uint32_t)ceilf((float)src->h * sc);
    nw = nw > w ? w : nw < 1 ? 1 : nw;
    nh = nh > h ? h : nh < 1 ? 1 : nh;
    uint32_t ox = (w - nw) / 2, oy = (h - nh) / 2;
    resize(src->rgb, src->w, src->h, out->rgb + ((size_t)oy * w + ox) * 3, nw, nh, w);
}

void image_fit_square(const image_rgb_t *src, uint32_t side, image_rgb_t *out)
{
    fit(src, side, side, bilinear, out);
}

void image_stretch(const image_rgb_t *src, uint32_t w, uint32_t h, image_rgb_t *out)
{
    assert(w > 0 && h > 0 && src->w > 0 && src->h > 0 && src->rgb);
    size_t n = (size_t)w * h * 3;
    out->w = w, out->h = h;
    out->rgb = xmalloc(n);
    if (src->w == w && src->h == h)
        memcpy(out->rgb, src->rgb, n);
    else
        bilinear(src->rgb, src->w, src->h, out->rgb, w, h, w);
}

/* The cubic through (-1, a) (0, b) (1, c) (2, d) at t in [0, 1), in the
 * form of differences from b (as llama.cpp evaluates it: image.h). */
static float cubic4(float a, float b, float c, float d, float t)
{
    float d0 = a - b, d2 = c - b, d3 = d - b;
    float a1 = (float)(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
    float a2 = (float)(1.0 / 2 * d0 + 1.0 / 2 * d2);
    float a3 = (float)(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
    return b + a1 * t + a2 * t * t + a3 * t * t * t;
}

static int clampi(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

/* Bicubic (sw,sh) → (dw,dh) into dst with row stride ds pixels: output
 * (i, j) samples the source at (j·sw/dw, i·sh/dh), edges clamped, rounded
 * and clamped to 0..255. */
static void bicubic(const uint8_t *src, uint32_t sw, uint32_t sh, uint8_t *dst, uint32_t dw, uint32_t dh,
                    uint32_t ds)
{
    float tx = (float)sw / (float)dw, ty = (float)sh / (float)dh;
    int W = (int)sw, H = (int)sh;
    for (uint32_t i = 0; i < dh; i++) {
        int y = (int)(ty * (float)i);
        float fy = ty * (float)i - (float)y;
        for (uint32_t j = 0; j < dw; j++) {
            int x = (int)(tx * (float)j);
            float fx = tx * (float)j - (float)x;
            uint8_t *o = dst + ((size_t)i * ds + j) * 3;
            for (int k = 0; k < 3; k++) {
                float col[4];
                for (int r = 0; r < 4; r++) {
                    const uint8_t *row = src + (size_t)clampi(y - 1 + r, 0, H - 1) * sw * 3;
                    col[r] = cubic4(row[clampi(x - 1, 0, W - 1) * 3 + k], row[clampi(x, 0, W - 1) * 3 + k],
                                    row[clampi(x + 1, 0, W - 1) * 3 + k], row[clampi(x + 2, 0, W - 1) * 3 + k], fx);
                }
                float v = roundf(cubic4(col[0], col[1], col[2], col[3], fy));
                o[k] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
            }
        }
    }
}

void image_fit_bicubic(const image_rgb_t *src, uint32_t w, uint32_t h, image_rgb_t *out)
{
    fit(src, w, h, bicubic, out);
}

void image_hash(const image_rgb_t *img, uint8_t out[IMAGE_HASH_BYTES])
{
    crypto_generichash_state st;
    uint8_t wh[8];
    for (int i = 0; i < 4; i++) {
        wh[i] = (uint8_t)(img->w >> (8 * i));
        wh[4 + i] = (uint8_t)(img->h >> (8 * i));
    }
    crypto_generichash_init(&st, NULL, 0, IMAGE_HASH_BYTES);
    crypto_generichash_update(&st, img->rgb, (unsigned long long)img->w * img->h * 3);
    crypto_generichash_update(&st, wh, sizeof wh);
    crypto_generichash_final(&st, out, IMAGE_HASH_BYTES);
}

void image_tiles(const image_rgb_t *src, uint32_t side, uint32_t nx, uint32_t ny, image_rgb_t *out)
{
    assert(side > 0 && src->w > 0 && src->h > 0 && src->rgb);
    if (nx && ny) {
        const size_t rw = (size_t)nx * side, row = (size_t)side * 3;
        image_rgb_t ref;
        image_fit_bicubic(src, (uint32_t)rw, ny * side, &ref);
        for (uint32_t ty = 0; ty < ny; ty++)
            for (uint32_t tx = 0; tx < nx; tx++) {
                image_rgb_t *t = &out[ty * nx + tx];
                *t = (image_rgb_t){side, side, xmalloc((size_t)side * row)};
                for (uint32_t y = 0; y < side; y++)
                    memcpy(t->rgb + y * row, ref.rgb + ((size_t)(ty * side + y) * rw + (size_t)tx * side) * 3,
                           row);
            }
        image_rgb_free(&ref);
    } else {
        nx = ny = 0;
    }
    image_stretch(src, side, side, &out[nx * ny]);
}

void image_rgb_free(image_rgb_t *img)
{
    if (!img)
        return;
    free(img->rgb);
    img->rgb = NULL;
    img->w = img->h = 0;
}

/* ---- base64 and data URLs ---------------------------------------------------------------- */

image_status_t image_base64_decode(const char *b64, size_t len, size_t max_bytes, uint8_t **bytes,
                                   size_t *n_bytes, char *err, size_t errlen)
{
    *bytes = NULL;
    *n_bytes = 0;
    /* An upper bound of the decoded size, before allocating anything. */
    size_t n_chars = 0;
    for (size_t i = 0; i < len; i++)
        n_chars += !(b64[i] == ' ' || b64[i] == '\n' || b64[i] == '\r' || b64[i] == '\t' || b64[i] == '=');
    size_t bound = n_chars / 4 * 3 + (n_chars % 4 ? n_chars % 4 - 1 : 0);
    if (bound > max_bytes) {
        errbuf_set(err, errlen, "image is about %zu bytes; the limit is %zu", bound, max_bytes);
        return IMAGE_E_BYTES;
    }
    if (n_chars % 4 == 1) {
        errbuf_set(err, errlen, "bad base64: its length is not possible");
        return IMAGE_E_BASE64;
    }
    uint8_t *out = xmalloc(bound + 1);
    size_t n = 0;
    const char *end = NULL;
    /* ORIGINAL_NO_PADDING takes input with or without the '=' padding only
     * when we strip it, so strip trailing '=' and whitespace first. */
    size_t k = len;
    while (k > 0 && (b64[k - 1] == '=' || b64[k - 1] == ' ' || b64[k - 1] == '\n' || b64[k - 1] == '\r' ||
                     b64[k - 1] == '\t'))
        k--;
    if (sodium_base642bin(out, bound + 1, b64, k, " \t\r\n", &n, &end, sodium_base64_VARIANT_ORIGINAL_NO_PADDING) !=
            0 ||
        end != b64 + k) {
        free(out);
        errbuf_set(err, errlen, "bad base64 in the image data");
        return IMAGE_E_BASE64;
    }
    *bytes = out;
    *n_bytes = n;
    return IMAGE_OK;
}

image_status_t image_data_url_parse(const char *url, size_t len, size_t max_bytes, uint8_t **bytes,
                                    size_t *n_bytes, image_format_t *fmt, char *err, size_t errlen)
{
    *bytes = NULL;
    *n_bytes = 0;
    *fmt = IMAGE_FMT_UNKNOWN;
    if (len < 5 || strncasecmp(url, "data:", 5) != 0) {
        errbuf_set(err, errlen, "image URL must be a data:image/...;base64, URL");
        return IMAGE_E_URL;
    }
    const char *comma = memchr(url, ',', len);
    if (!comma) {
        errbuf_set(err, errlen, "data URL has no ','");
        return IMAGE_E_URL;
    }
    const char *mt = url + 5, *hdr_end = comma;
    const char *semi = memchr(mt, ';', (size_t)(hdr_end - mt));
    const char *mt_end = semi ? semi : hdr_end;
    size_t mt_len = (size_t)(mt_end - mt);
    if (mt_len < 6 || strncasecmp(mt, "image/", 6) != 0) {
        errbuf_set(err, errlen, "data URL media type must be image/png, image/jpeg, image/webp or image/gif");
        return IMAGE_E_URL;
    }
    /* ";base64" must be the last parameter (RFC 2397). */
    if ((size_t)(hdr_end - mt) < 7 || strncasecmp(hdr_end - 7, ";base64", 7) != 0) {
        errbuf_set(err, errlen, "data URL must be base64 (…;base64,)");
        return IMAGE_E_URL;
    }
    *fmt = image_format_of_media_type(mt, mt_len);
    const char *data = comma + 1;
    return image_base64_decode(data, (size_t)(url + len - data), max_bytes, bytes, n_bytes, err, errlen);
}
