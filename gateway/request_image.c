/* request_image.c — image parts of the internal request (request_image.h). */
#include "gateway/request_image.h"

#include <assert.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/text/image_run.h"
#include "common/xalloc.h"
#include "gateway/image_fetch.h"

/* A 400 naming param; the expression is -1. */
#define refuse(e, param, ...) (oai_error_set((e), 400, (param), __VA_ARGS__), -1)

/* Appends the checked file; returns its index. Takes bytes. */
static int add(request_t *r, uint8_t *bytes, size_t n, const char *param)
{
    r->images = xrealloc(r->images, (r->n_images + 1) * sizeof *r->images);
    request_image_t *im = &r->images[r->n_images];
    memset(im, 0, sizeof *im);
    im->bytes = bytes;
    im->n_bytes = n;
    im->param = xstrdup(param);
    return (int)r->n_images++;
}

/* The magic of bytes (and, when declared is not UNKNOWN, that it agrees). */
static int check_magic(const uint8_t *b, size_t n, image_format_t declared, const char *param, oai_error_t *e)
{
    image_format_t f = image_sniff(b, n);
    if (f == IMAGE_FMT_UNKNOWN)
        return refuse(e, param, "'%s' is not a PNG, JPEG, WebP or GIF image (by its first bytes).", param);
    if (declared != IMAGE_FMT_UNKNOWN && declared != f)
        return refuse(e, param, "'%s' says image/%s but the data is a %s image.", param,
                      image_format_name(declared), image_format_name(f));
    return 0;
}

static int too_many(const request_t *r, const char *param, oai_error_t *e)
{
    if (r->n_images < REQUEST_MAX_IMAGES)
        return 0;
    return refuse(e, param, "More than %d images in one request.", REQUEST_MAX_IMAGES);
}

int request_image_add_url(request_t *r, const char *url, size_t len, const char *param, oai_error_t *e)
{
    if (too_many(r, param, e) < 0)
        return -1;
    if (!(len >= 5 && strncasecmp(url, "data:", 5) == 0)) {
        /* a remote URL: its scheme now, the allow list once the server's
         * is at hand (request_images_check_urls), the bytes later */
        image_url_t u;
        char why[300];
        image_url_status_t st = image_url_check(NULL, url, len, &u, why, sizeof why);
        if (st == IMAGE_URL_E_SYNTAX && !memchr(url, ':', len))
            return refuse(e, param, "'%s' must be a data:image/...;base64, URL or an http(s) URL.", param);
        if (st != IMAGE_URL_OK && st != IMAGE_URL_E_DISABLED)
            return refuse(e, param, "'%s': %s.", param, why);
        int i = add(r, NULL, 0, param);
        r->images[i].url = xstrndup(url, len);
        return i;
    }
    uint8_t *b = NULL;
    size_t n = 0;
    image_format_t f;
    char why[200];
    image_status_t s = image_data_url_parse(url, len, IMAGE_MAX_BYTES_DEFAULT, &b, &n, &f, why, sizeof why);
    if (s != IMAGE_OK)
        return refuse(e, param, "'%s': %s.", param, why);
    /* A data URL's media type is often wrong in the wild (a PNG sent as
     * image/jpeg): the bytes decide; an unknown image/ type is fine too. */
    if (check_magic(b, n, IMAGE_FMT_UNKNOWN, param, e) < 0) {
        free(b);
        return -1;
    }
    return add(r, b, n, param);
}

int request_image_add_base64(request_t *r, const char *media_type, size_t mt_len, const char *data, size_t len,
                             const char *param, oai_error_t *e)
{
    if (too_many(r, param, e) < 0)
        return -1;
    image_format_t declared = image_format_of_media_type(media_type, mt_len);
    if (declared == IMAGE_FMT_UNKNOWN)
        return refuse(e, param, "'%s.media_type' must be image/png, image/jpeg, image/webp or image/gif.",
                      param);
    uint8_t *b = NULL;
    size_t n = 0;
    char why[200];
    if (image_base64_decode(data, len, IMAGE_MAX_BYTES_DEFAULT, &b, &n, why, sizeof why) != IMAGE_OK)
        return refuse(e, param, "'%s.data': %s.", param, why);
    if (check_magic(b, n, declared, param, e) < 0) {
        free(b);
        return -1;
    }
    return add(r, b, n, param);
}

size_t request_images_remote(const request_t *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->n_images; i++)
        n += r->images[i].url != NULL;
    return n;
}

int request_images_check_urls(const request_t *r, const image_url_allow_t *allow, oai_error_t *e)
{
    for (size_t i = 0; i < r->n_images; i++) {
        const request_image_t *im = &r->images[i];
        if (!im->url)
            continue;
        image_url_t u;
        char why[300];
        if (image_url_check(allow, im->url, strlen(im->url), &u, why, sizeof why) != IMAGE_URL_OK)
            return refuse(e, im->param, "'%s': %s.", im->param, why);
    }
    return 0;
}

int request_image_fetched(request_t *r, size_t i, uint8_t *bytes, size_t n, const char *why, oai_error_t *e)
{
    request_image_t *im = &r->images[i];
    assert(im->url && !im->bytes);
    if (!bytes)
        return refuse(e, im->param, "'%s': %s.", im->param, why ? why : "not fetched");
    if (check_magic(bytes, n, IMAGE_FMT_UNKNOWN, im->param, e) < 0) {
        free(bytes);
        return -1;
    }
    im->bytes = bytes;
    im->n_bytes = n;
    free(im->url);
    im->url = NULL;
    return 0;
}

static request_part_t *new_part(request_message_t *m)
{
    m->parts = xrealloc(m->parts, (m->n_parts + 1) * sizeof *m->parts);
    request_part_t *p = &m->parts[m->n_parts++];
    memset(p, 0, sizeof *p);
    return p;
}

void request_message_add_text(request_message_t *m, const char *text, size_t n)
{
    request_part_t *p = new_part(m);
    p->i_image = -1;
    p->text = xstrndup(text, n);
    p->text_len = n;
}

void request_message_add_image(request_message_t *m, int32_t i_image)
{
    new_part(m)->i_image = i_image;
}

/* im's decoded picture into the encoder's images (see request_image.h):
 * fitted to one square, or, for a tiled projector, its grid of tiles and
 * its global image (common/image image_tiles, as pagoda-run cuts them);
 * *bytes += their pixels. 0, or -1 with a 400 (a grid over
 * IMAGE_RUN_MAX_TILES). Takes full. */
static int encoder_images(request_image_t *im, image_rgb_t *full, const proto_vis_t *vis, uint64_t *bytes,
                          oai_error_t *e)
{
    const image_run_info_t *ri = image_run_find(vis->proj);
    int32_t nx = 0, ny = 0, rw, rh;
    if (ri && ri->tile_fmt &&
        image_run_grid((int32_t)full->w, (int32_t)full->h, (int32_t)vis->size, (int32_t)vis->preproc, &nx, &ny,
                       &rw, &rh) != 0) {
        uint32_t w = full->w, h = full->h;
        image_rgb_free(full);
        return refuse(e, im->param,
                      "'%s': a %ux%u picture is more than %d tiles of %u pixels for this model (longest side "
                      "%u before tiling).", im->param, w, h, IMAGE_RUN_MAX_TILES, vis->size, vis->preproc);
    }
    size_t nt = (size_t)nx * ny;
    image_rgb_t *out = xcalloc(nt + 1, sizeof *out);
    if (ri && ri->tile_fmt)
        image_tiles(full, vis->size, (uint32_t)nx, (uint32_t)ny, out);
    else
        image_fit_square(full, vis->size, &out[0]);
    image_rgb_free(full);
    im->nx = (uint32_t)nx;
    im->ny = (uint32_t)ny;
    im->tiles = nt ? xcalloc(nt, sizeof *im->tiles) : NULL;
    for (size_t t = 0; t < nt; t++) {
        im->tiles[t].rgb = out[t].rgb;
        image_hash(&out[t], im->tiles[t].hash);
    }
    image_hash(&out[nt], im->hash);
    im->w = out[nt].w;
    im->h = out[nt].h;
    im->rgb = out[nt].rgb;
    free(out);
    *bytes += (uint64_t)(nt + 1) * vis->size * vis->size * 3;
    return 0;
}

int request_images_prepare(request_t *r, const proto_vis_t *vis, const request_image_limits_t *lim,
                           oai_error_t *e)
{
    if (r->n_images == 0)
        return 0;
    size_t max_images = lim && lim->max_images ? lim->max_images : REQUEST_MAX_IMAGES;
    if (r->n_images > max_images)
        return refuse(e, r->images[max_images].param,
                      "More than %zu images in one request (the server's images.max_images, --max-images).",
                      max_images);
    image_limits_t il = IMAGE_LIMITS_DEFAULT;
    if (lim && lim->max_bytes)
        il.max_bytes = lim->max_bytes;
    if (lim && lim->max_pixels)
        il.max_pixels = lim->max_pixels;
    bool reads = vis && vis->has;
    /* the encoder's pixels travel in one SUBMIT (≤ PROTO_MAX_BODY) beside the
     * text, which a message with images carries twice (content and parts),
     * and 1 MiB for the other fields; a tiled picture counts each tile */
    uint64_t bytes = 1u << 20;
    for (size_t i = 0; i < r->n_messages; i++)
        bytes += 2 * (uint64_t)r->messages[i].content_len;
    /* Every image is decoded even for a model without vision, so a broken
     * image is named as such rather than hidden behind the model's refusal;
     * one decoded image at a time is held. */
    for (size_t i = 0; i < r->n_images; i++) {
        request_image_t *im = &r->images[i];
        assert(!im->url); /* fetched first (request_image_fetched) */
        image_rgb_t full;
        char why[256];
        image_status_t st = image_decode(im->bytes, im->n_bytes, &il, &full, why, sizeof why);
        if (st != IMAGE_OK)
            return refuse(e, im->param, "'%s': %s%s.", im->param, why,
                          st == IMAGE_E_BYTES    ? " (the server's images.max_bytes, --image-max-bytes)"
                          : st == IMAGE_E_PIXELS ? " (the server's images.max_pixels, --image-max-pixels)"
                                                 : "");
        if (!reads) {
            image_rgb_free(&full);
            continue;
        }
        if (encoder_images(im, &full, vis, &bytes, e) < 0)
            return -1;
        free(im->bytes);
        im->bytes = NULL;
        im->n_bytes = 0;
        if (bytes > PROTO_MAX_BODY)
            return refuse(e, im->param,
                          "'%s': %zu images as %ux%u encoder images (tiles included) and this much text do not "
                          "fit one request to the model (%llu bytes, limit %u): send fewer or smaller images.",
                          im->param, i + 1, vis->size, vis->size, (unsigned long long)bytes, PROTO_MAX_BODY);
    }
    if (reads)
        r->vis = *vis;
    if (!reads)
        return refuse(e, r->images[0].param,
                      "Model '%s' does not accept images: it was started without a vision encoder "
                      "(--mmproj).", r->model ? r->model : "");
    return 0;
}
