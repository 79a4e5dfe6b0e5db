/* request_image.h — image parts of the internal request (gateway/request.h),
 * shared by the three chat surfaces:
 *   Chat Completions  {"type":"image_url","image_url":"data:…" | {"url":"data:…","detail":…}}
 *   Anthropic         {"type":"image","source":{"type":"base64","media_type","data"}}
 *   Responses         {"type":"input_image","image_url":"data:…"} ("file_id": 400)
 *
 * Two stages, both on the HTTP thread:
 *   1. parse (each surface, while it reads its JSON): request_image_add_url /
 *      _add_base64 decode the base64, check the bytes' magic (and the declared
 *      media type where the API makes it mandatory) and append a
 *      request_image_t holding the compressed file, plus the message parts
 *      (request_message_add_text / _add_image). Nothing is decompressed yet.
 *   2. prepare (http.c, once the model is known): request_images_prepare
 *      decodes every file (common/image/image.h, under the operator's limits)
 *      and, when the model reads images (its workers' REGISTER `vis`, which
 *      http.c asks the core for: gateway_model_vis, gateway/snapshot.h), fits it to the encoder's square and hashes
 *      it — or, for a tiled projector (idefics3: vis.preproc), cuts it into
 *      its grid of tiles and its global image (image_run_grid, image_tiles:
 *      as pagoda-run does), each hashed (request_image_t.tiles); a model
 *      without vision gets a 400.
 * Every refusal is a 400 naming the part (`param`), in the caller's
 * oai_error_t, which each surface renders in its own shape.
 *
 * Remote http(s) image URLs (gateway/image_fetch.h: refused unless the
 * operator allows their host; a server that fetches URLs given by clients
 * is a server-side request forgery hole) add a stage between the two:
 *   1. parse: request_image_add_url records the URL (request_image_t.url,
 *      no bytes); a scheme other than http/https/data, a user name in it,
 *      a bad host are refused here.
 *   1b. http.c: request_images_check_urls against the server's allow list
 *      (400 without any connection when the list is empty or lacks the
 *      host); the fetch runs on image_fetch's threads while the connection
 *      is suspended; each body comes back through request_image_fetched,
 *      which checks its magic as for a data: URL (the Content-Type is not
 *      trusted). Then prepare decodes it under the same limits.
 *
 * Ownership: what is appended belongs to the request (request_free). */
#ifndef PAGODA_GATEWAY_REQUEST_IMAGE_H
#define PAGODA_GATEWAY_REQUEST_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "common/image/image.h"
#include "gateway/image_fetch.h"
#include "gateway/oai_error.h"
#include "gateway/request.h"

/* The operator's image limits (gateway config images.max_bytes,
 * images.max_pixels, images.max_images; flags --image-max-bytes,
 * --image-max-pixels, --max-images), each ≤ the parser's fixed one, which
 * the surfaces' parsers apply while reading the JSON; 0 = that default.
 * Applied by request_images_prepare; a refusal names the limit. */
typedef struct request_image_limits {
    size_t max_bytes;    /* compressed bytes per image [IMAGE_MAX_BYTES_DEFAULT] */
    uint64_t max_pixels; /* pixels per image before fitting [IMAGE_MAX_PIXELS_DEFAULT] */
    size_t max_images;   /* images per request [REQUEST_MAX_IMAGES] */
} request_image_limits_t;

/* A data: or http(s) URL image (Chat Completions, Responses, Anthropic's
 * url source). Returns its index in r->images, or -1 with a 400 in *e
 * (another scheme, a user name in the URL, not a data URL, bad base64,
 * over the byte limit, not PNG/JPEG/WebP/GIF, more than
 * REQUEST_MAX_IMAGES). An http(s) URL is only recorded (see above). */
int request_image_add_url(request_t *r, const char *url, size_t len, const char *param, oai_error_t *e);

/* Images of r with a URL still to fetch. */
size_t request_images_remote(const request_t *r);

/* Every remote URL of r against allow (NULL = empty): 0, or -1 with a 400
 * naming the part and the reason (disabled, host not listed). */
int request_images_check_urls(const request_t *r, const image_url_allow_t *allow, oai_error_t *e);

/* Image i's URL was fetched: bytes[0..n) (taken), or NULL with why (not
 * taken). Returns 0, or -1 with a 400 (the fetch failed, or the body is not
 * a PNG/JPEG/WebP/GIF by its first bytes). */
int request_image_fetched(request_t *r, size_t i, uint8_t *bytes, size_t n, const char *why, oai_error_t *e);

/* A base64 image with its declared media type (Anthropic): as above, and
 * the media type must be one of image/png, image/jpeg, image/webp,
 * image/gif and match the bytes' magic. */
int request_image_add_base64(request_t *r, const char *media_type, size_t mt_len, const char *data, size_t len,
                             const char *param, oai_error_t *e);

/* Appends a text part (a copy of text[0..n)) or an image part to m->parts. */
void request_message_add_text(request_message_t *m, const char *text, size_t n);
void request_message_add_image(request_message_t *m, int32_t i_image);

/* Stage 2 (see above) for a request with images; 0 and nothing done for one
 * without. Every image is decoded under the limits first (a broken one is
 * named even for a text model); then vis, the model's encoder, decides: NULL
 * or !has → 400 "does not accept images". Other 400s: a grid over
 * IMAGE_RUN_MAX_TILES; the encoder images (tiles counted) and the text over
 * one SUBMIT (PROTO_MAX_BODY). Returns 0, or -1 with a 400 in *e. */
int request_images_prepare(request_t *r, const proto_vis_t *vis, const request_image_limits_t *lim,
                           oai_error_t *e);

#endif
