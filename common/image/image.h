/* image.h — an image a client sent, made ready for a vision encoder: the
 * bytes of a PNG, JPEG, WebP or GIF file decoded to RGB8 by the Debian
 * libraries (libpng, libjpeg-turbo, libwebp, giflib), under limits checked
 * before anything is allocated, resized to the encoder's square input, and
 * hashed. The gateway runs it on every image part; the worker only ever sees
 * the result (proto/msg.h SUBMIT `imgs`).
 *
 * What each format gives (docs/API.md "Images"):
 *   PNG   every colour type and bit depth: grey and palette expand to RGB,
 *         16-bit samples are converted to 8 bits (the high byte, as
 *         llama.cpp's stb_image does), tRNS becomes alpha; interlaced too.
 *         No gamma or colour-profile conversion (stb_image does none either).
 *   JPEG  grey and YCbCr, baseline and progressive; CMYK/YCCK (Adobe) JPEGs
 *         are refused (IMAGE_E_UNSUPPORTED): a faithful conversion needs the
 *         file's ICC profile. A truncated or corrupt stream is an error, not
 *         grey fill; more than IMAGE_JPEG_MAX_SCANS scans is refused (a
 *         progressive file can make the decoder loop over the whole image
 *         once per scan).
 *   WebP  lossy and lossless, with or without alpha; an animated WebP gives
 *         its first frame over the canvas background.
 *   GIF   the first frame, on a canvas of the screen size; pixels it leaves
 *         uncovered and its transparent index are the alpha background.
 * Alpha is composited over white (IMAGE_ALPHA_BG): what a user sees of a
 * transparent screenshot in a browser. llama.cpp's stb_image drops alpha
 * instead; the two agree on every opaque pixel.
 *
 * Resizing (image_fit_square): the image keeps its aspect ratio, is scaled
 * with align-corners bilinear interpolation (each output sample at
 * x·(W-1)/(w-1) of the source, truncated to uint8) to fit the square, and is
 * centred on black. That is llama.cpp's gemma3 preprocessing (tools/mtmd:
 * RESIZE_ALGO_BILINEAR with PAD_CEIL padding), so the encoder sees the same
 * pixels from both servers and greedy text can be compared.
 *
 * Hash: BLAKE2b-256 (libsodium) of the RGB bytes, then w and h as 32-bit
 * little-endian: the image's identity in the prefix-cache block keys.
 *
 * Ownership: image_rgb_t.rgb is malloc'd by the call that fills it; the
 * caller releases it with image_rgb_free. No global state: any thread.
 */
#ifndef PAGODA_COMMON_IMAGE_IMAGE_H
#define PAGODA_COMMON_IMAGE_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#define IMAGE_MAX_BYTES_DEFAULT (20u << 20)    /* compressed bytes per image: 20 MiB */
#define IMAGE_MAX_PIXELS_DEFAULT 50000000ull   /* w·h of the file, before resizing: 50 MP */
#define IMAGE_MAX_PER_REQUEST_DEFAULT 8        /* images in one request */
#define IMAGE_MAX_SIDE 65535u                  /* no side beyond this, whatever the pixel limit */
#define IMAGE_JPEG_MAX_SCANS 256
#define IMAGE_ALPHA_BG 255 /* alpha composited over white */
#define IMAGE_HASH_BYTES 32

typedef enum image_format {
    IMAGE_FMT_UNKNOWN = 0,
    IMAGE_FMT_PNG,
    IMAGE_FMT_JPEG,
    IMAGE_FMT_WEBP,
    IMAGE_FMT_GIF,
} image_format_t;

/* Return codes of the calls below (0 ok, negative: the kind of refusal). */
typedef enum image_status {
    IMAGE_OK = 0,
    IMAGE_E_FORMAT = -1,      /* not PNG/JPEG/WebP/GIF by its magic, or not what media_type says */
    IMAGE_E_BYTES = -2,       /* more compressed bytes than limits.max_bytes */
    IMAGE_E_PIXELS = -3,      /* the header's w·h is over limits.max_pixels (or a side over IMAGE_MAX_SIDE, or 0) */
    IMAGE_E_CORRUPT = -4,     /* truncated or malformed data */
    IMAGE_E_UNSUPPORTED = -5, /* a valid file of a kind refused on purpose (CMYK JPEG) */
    IMAGE_E_BASE64 = -6,      /* image_data_url_parse: not base64 */
    IMAGE_E_URL = -7,         /* image_data_url_parse: not a data:image/...;base64, URL */
} image_status_t;

typedef struct image_limits {
    size_t max_bytes;    /* [IMAGE_MAX_BYTES_DEFAULT] compressed bytes */
    uint64_t max_pixels; /* [IMAGE_MAX_PIXELS_DEFAULT] w·h as the header states it */
} image_limits_t;

#define IMAGE_LIMITS_DEFAULT {IMAGE_MAX_BYTES_DEFAULT, IMAGE_MAX_PIXELS_DEFAULT}

typedef struct image_rgb {
    uint32_t w, h; /* pixels */
    uint8_t *rgb;  /* (h, w, 3) RGB8, top row first; malloc'd, image_rgb_free */
} image_rgb_t;

/* The format by the file's first bytes (magic), IMAGE_FMT_UNKNOWN if none. */
image_format_t image_sniff(const uint8_t *buf, size_t len);
/* "png", "jpeg", "webp", "gif" ("unknown"); and the format of a media type
 * "image/png" … ("image/jpg" too), IMAGE_FMT_UNKNOWN for any other. */
const char *image_format_name(image_format_t f);
image_format_t image_format_of_media_type(const char *media_type, size_t len);

/* Decodes buf[0..len) (the format by its magic) into *out as RGB8. Limits
 * are checked against the header before the pixel buffer is allocated. On
 * failure *out is left empty, a reason is written to err and the status
 * returned. */
image_status_t image_decode(const uint8_t *buf, size_t len, const image_limits_t *lim, image_rgb_t *out,
                            char *err, size_t errlen);

/* *out = src scaled to fit side × side and centred on black (see above).
 * side ≥ 1; src non-empty. */
void image_fit_square(const image_rgb_t *src, uint32_t side, image_rgb_t *out);

/* *out = src stretched to w × h (aspect ratio not kept) with the
 * align-corners bilinear above; a copy when the size is already w × h.
 * llama.cpp's idefics3 global image (RESIZE_ALGO_BILINEAR, PAD_NONE). */
void image_stretch(const image_rgb_t *src, uint32_t w, uint32_t h, image_rgb_t *out);
/* *out = src scaled to fit w × h, aspect ratio kept (each side ceil(side·s),
 * s = min(w/src.w, h/src.h)), centred on black, with llama.cpp's bicubic
 * (RESIZE_ALGO_BICUBIC, PAD_CEIL: its idefics3 tiles' refined image): the
 * cubic through four samples at x·src.w/w (no half-pixel shift), edges
 * clamped, rounded; a copy when the size is already w × h. */
void image_fit_bicubic(const image_rgb_t *src, uint32_t w, uint32_t h, image_rgb_t *out);

/* The images an idefics3 (SmolVLM) encoder reads for one picture, as
 * llama.cpp's libmtmd cuts them (docs/VISION.md "Idefics3"): out[0 ..
 * nx·ny) the side × side tiles row-major, cut from src scaled into
 * nx·side × ny·side by image_fit_bicubic; out[nx·ny] the global image, src
 * stretched to side × side by image_stretch. nx = ny = 0 gives the global
 * image alone. The grid comes from the caller (common/text/image_run.h
 * image_run_grid). out has room for nx·ny + 1; each is malloc'd
 * (image_rgb_free). side ≥ 1, nx, ny ≥ 0, src non-empty. */
void image_tiles(const image_rgb_t *src, uint32_t side, uint32_t nx, uint32_t ny, image_rgb_t *out);

/* BLAKE2b-256 of img (see above) into out[IMAGE_HASH_BYTES]. */
void image_hash(const image_rgb_t *img, uint8_t out[IMAGE_HASH_BYTES]);

void image_rgb_free(image_rgb_t *img);

/* A data URL "data:image/<type>[;param…];base64,<base64>" (RFC 2397):
 * decodes the base64 (standard alphabet, padding optional, ASCII whitespace
 * ignored) into a malloc'd *bytes of *n_bytes, refused with IMAGE_E_BYTES
 * before decoding when it would be over max_bytes. *fmt gets the media
 * type's format (IMAGE_FMT_UNKNOWN for an image type not listed above; the
 * caller decides). Errors: IMAGE_E_URL, IMAGE_E_BASE64, IMAGE_E_BYTES. */
image_status_t image_data_url_parse(const char *url, size_t len, size_t max_bytes, uint8_t **bytes,
                                    size_t *n_bytes, image_format_t *fmt, char *err, size_t errlen);

/* Plain base64 (Anthropic's source.data) the same way. */
image_status_t image_base64_decode(const char *b64, size_t len, size_t max_bytes, uint8_t **bytes,
                                   size_t *n_bytes, char *err, size_t errlen);

#endif
