/* Unit tests for gateway/request.h: the one initializer, and every row of
 * the sampling-knob table (proto/sampling.h) through every place of the
 * gateway that uses it — parsed from each API surface's body under its
 * request key, range-checked (a 400 naming the key past either end), and
 * carried into the SUBMIT (submit_from_request) and back off the wire. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/anthropic.h"
#include "gateway/oai.h"
#include "gateway/request.h"
#include "gateway/request_image.h"
#include "gateway/submit.h"
#include "proto/msg.h"

/* A value of the row inside its request range, not its default. */
static double inside(const proto_knob_row_t *row)
{
    double v = row->lo_open ? (row->lo + row->hi) / 2 : row->lo;
    if (v == row->def)
        v = row->hi;
    return row->is_uint ? (double)(int64_t)v : v;
}

static int parse_chat_with(const char *key, const char *value, request_t *r, oai_error_t *e)
{
    char body[512];
    snprintf(body, sizeof body, "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"%s\":%s}",
             key, value);
    return oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, r, e);
}

/* *d = m encoded and decoded again (both must succeed) */
static void over_the_wire(const proto_msg_t *m, proto_msg_t *d)
{
    uint8_t *body;
    size_t len;
    char err[160];
    assert_int_equal(proto_encode(m, &body, &len), PROTO_OK);
    assert_int_equal(proto_decode_body(PROTO_SUBMIT, body, len, d, err, sizeof err), PROTO_OK);
    free(body);
}

static void test_init_holds_the_defaults(void **state)
{
    (void)state;
    request_t r;
    memset(&r, 0xab, sizeof r);
    request_init(&r, REQUEST_CHAT, REQUEST_OP_GENERATE);
    assert_int_equal(r.kind, REQUEST_CHAT);
    assert_int_equal(r.op, REQUEST_OP_GENERATE);
    assert_int_equal(r.max_tokens, -1);
    assert_int_equal(r.n, 1);
    assert_null(r.model);
    for (int i = 0; i < PROTO_N_KNOBS; i++)
        assert_true(proto_knob_get(&r.knobs, &proto_knob_rows[i]) == proto_knob_rows[i].def);
    assert_null(request_check_knobs(&r));
    request_free(&r);

    /* a body that names no knob leaves every default */
    oai_error_t e;
    assert_int_equal(parse_chat_with("user", "\"u\"", &r, &e), 0);
    for (int i = 0; i < PROTO_N_KNOBS; i++)
        assert_true(proto_knob_get(&r.knobs, &proto_knob_rows[i]) == proto_knob_rows[i].def);
    request_free(&r);
}

static void test_every_row_parsed_and_checked(void **state)
{
    (void)state;
    for (int i = 0; i < PROTO_N_KNOBS; i++) {
        const proto_knob_row_t *row = &proto_knob_rows[i];
        request_t r;
        oai_error_t e;
        char v[64];
        snprintf(v, sizeof v, "%.17g", inside(row));
        assert_int_equal(parse_chat_with(row->api, v, &r, &e), 0);
        assert_true(proto_knob_get(&r.knobs, row) == inside(row));

        /* into the SUBMIT, over the wire and back */
        proto_msg_t m;
        proto_msg_init(&m, PROTO_SUBMIT);
        submit_from_request(&r, 9, PRIO_TIER_NORMAL, &m.submit);
        assert_true(proto_knob_get(&m.submit.sampling.knobs, row) == inside(row));
        proto_msg_t d;
        over_the_wire(&m, &d);
        assert_true(proto_knob_get(&d.submit.sampling.knobs, row) == inside(row));
        proto_msg_clear(&d);
        proto_msg_clear(&m);
        request_free(&r);

        /* past each end of the request range: 400 naming the key */
        double out[2] = {row->lo_open ? row->lo : row->lo - 1, row->hi + 1};
        for (int k = 0; k < 2; k++) {
            if (row->is_uint && out[k] == -1)
                out[k] = -2; /* -1 means off for an unsigned knob */
            snprintf(v, sizeof v, "%.17g", out[k]);
            assert_int_equal(parse_chat_with(row->api, v, &r, &e), -1);
            assert_int_equal(e.status, 400);
            assert_string_equal(e.param, row->api);
            request_free(&r);
        }
        /* not a number */
        assert_int_equal(parse_chat_with(row->api, "\"x\"", &r, &e), -1);
        assert_string_equal(e.param, row->api);
        request_free(&r);
    }
}

/* The Anthropic surface translates its body into the same parser: a knob it
 * passes on (temperature, top_p, top_k) lands in the same member. */
static void test_anthropic_shares_the_rows(void **state)
{
    (void)state;
    const char *body = "{\"model\":\"m\",\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                       "\"temperature\":0.5,\"top_p\":0.5,\"top_k\":3}";
    request_t r;
    oai_error_t e;
    assert_int_equal(anthropic_parse_request((const uint8_t *)body, strlen(body), 0, &r, &e), 0);
    assert_true(r.temperature == 0.5);
    assert_true(r.top_p == 0.5);
    assert_int_equal(r.top_k, 3);
    request_free(&r);
}

/* A chat with an image: the fitted image (pixels and hash as
 * request_images_prepare made them) and the message's parts go into the
 * SUBMIT and survive the wire; a request without images sends neither key. */
static void test_images_into_submit(void **state)
{
    (void)state;
    /* a 3x2 RGB PNG, fitted to the encoder's 4x4 */
    static const char body[] =
        "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":["
        "{\"type\":\"text\",\"text\":\"What?\"},{\"type\":\"image_url\",\"image_url\":\"data:image/png;base64,"
        "iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAIAAAASFvFNAAAAHElEQVR4nGNgOMEQMI1hQQoDg8aJioppFSdSKgA+5AdFSflBowAAAABJRU5ErkJggg==\"}]}]}";
    request_t r;
    oai_error_t e;
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), 0);
    proto_vis_t vis = {.has = true, .size = 4, .n_tok = 1, .proj = "gemma3"};
    request_image_limits_t lim = {0};
    assert_int_equal(request_images_prepare(&r, &vis, &lim, &e), 0);
    assert_int_equal(r.n_images, 1);
    proto_msg_t m;
    proto_msg_init(&m, PROTO_SUBMIT);
    submit_from_request(&r, 9, PRIO_TIER_NORMAL, &m.submit);
    proto_msg_t d;
    over_the_wire(&m, &d);
    const proto_submit_t *s = &d.submit;
    assert_int_equal(s->n_imgs, 1);
    assert_int_equal(s->imgs[0].w, r.images[0].w);
    assert_int_equal(s->imgs[0].h, r.images[0].h);
    assert_int_equal(s->imgs[0].w, 4);
    assert_memory_equal(s->imgs[0].rgb, r.images[0].rgb, 4 * 4 * 3);
    assert_memory_equal(s->imgs[0].hash, r.images[0].hash, 32);
    assert_int_equal(s->n_messages, 2);
    assert_int_equal(s->messages[0].n_parts, 0);
    assert_int_equal(s->messages[1].n_parts, 2);
    assert_string_equal(s->messages[1].parts[0].text, "What?");
    assert_null(s->messages[1].parts[1].text);
    assert_int_equal(s->messages[1].parts[1].img, 0);
    proto_msg_clear(&d);
    proto_msg_clear(&m);
    request_free(&r);

    /* images whose fitted pixels cannot fit one SUBMIT: a 400 */
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), 0);
    proto_vis_t huge = {.has = true, .size = 4096, .n_tok = 1, .proj = "gemma3"};
    assert_int_equal(request_images_prepare(&r, &huge, &lim, &e), -1);
    assert_int_equal(e.status, 400);
    assert_non_null(strstr(e.message, "do not fit"));
    request_free(&r);

    /* no images: no imgs, no parts on the wire */
    assert_int_equal(parse_chat_with("user", "\"u\"", &r, &e), 0);
    proto_msg_init(&m, PROTO_SUBMIT);
    submit_from_request(&r, 10, PRIO_TIER_NORMAL, &m.submit);
    uint8_t *wire;
    size_t len;
    assert_int_equal(proto_encode(&m, &wire, &len), PROTO_OK);
    assert_null(memmem(wire, len, "imgs", 4));
    assert_null(memmem(wire, len, "parts", 5));
    free(wire);
    proto_msg_clear(&m);
    request_free(&r);
}

/* A PNG of w × h pixels px (RGB8) through libpng's writer, as a data URL
 * (malloc'd). */
static char *png_data_url(const uint8_t *px, uint32_t w, uint32_t h)
{
    png_image im = {.version = PNG_IMAGE_VERSION, .width = w, .height = h, .format = PNG_FORMAT_RGB};
    png_alloc_size_t n = 0;
    assert_true(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL));
    uint8_t *png = malloc(n);
    assert_true(png_image_write_to_memory(&im, png, &n, 0, px, 0, NULL));
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *url = malloc(32 + 4 * (n / 3 + 1)), *p = url + sprintf(url, "data:image/png;base64,");
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)png[i] << 16 | (i + 1 < n ? (uint32_t)png[i + 1] << 8 : 0) | (i + 2 < n ? png[i + 2] : 0);
        *p++ = tab[v >> 18];
        *p++ = tab[(v >> 12) & 63];
        *p++ = i + 1 < n ? tab[(v >> 6) & 63] : '=';
        *p++ = i + 2 < n ? tab[v & 63] : '=';
    }
    *p = 0;
    free(png);
    return url;
}

/* A tiled projector (idefics3): each picture becomes its tiles and its
 * global image on the wire, the first carrying the grid, and a part names
 * the picture's first image. A 4 × 2 picture with 2 px tiles and a longest
 * side of 4 is a 2 × 1 grid at its own size (no resize: s = 1), so the
 * tiles are the picture's two 2 × 2 halves, pixel for pixel. */
static void test_tiled_images_into_submit(void **state)
{
    (void)state;
    uint8_t px[2 * 4 * 3];
    for (size_t i = 0; i < sizeof px; i++)
        px[i] = (uint8_t)(i * 10 + 3);
    char *url = png_data_url(px, 4, 2);
    size_t bl = strlen(url) * 2 + 400;
    char *body = malloc(bl);
    snprintf(body, bl,
             "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\","
             "\"image_url\":\"%s\"},{\"type\":\"text\",\"text\":\"and\"},{\"type\":\"image_url\","
             "\"image_url\":\"%s\"}]}]}", url, url);
    request_t r;
    oai_error_t e;
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), 0);
    proto_vis_t vis = {.has = true, .size = 2, .n_tok = 1, .proj = "idefics3", .preproc = 4};
    request_image_limits_t lim = {0};
    assert_int_equal(request_images_prepare(&r, &vis, &lim, &e), 0);
    proto_msg_t m, d;
    proto_msg_init(&m, PROTO_SUBMIT);
    submit_from_request(&r, 9, PRIO_TIER_NORMAL, &m.submit);
    over_the_wire(&m, &d);
    const proto_submit_t *s = &d.submit;
    assert_int_equal(s->n_imgs, 6); /* two pictures of 2 tiles + global */
    for (uint32_t k = 0; k < 6; k += 3) {
        assert_int_equal(s->imgs[k].nx, 2);
        assert_int_equal(s->imgs[k].ny, 1);
        for (uint32_t t = 0; t < 3; t++) {
            assert_int_equal(s->imgs[k + t].w, 2);
            assert_int_equal(s->imgs[k + t].h, 2);
        }
        assert_int_equal(s->imgs[k + 1].nx, 0);
        assert_int_equal(s->imgs[k + 2].nx, 0);
        for (uint32_t t = 0; t < 2; t++) /* tile t: columns 2t, 2t+1 of each row */
            for (uint32_t y = 0; y < 2; y++)
                assert_memory_equal(s->imgs[k + t].rgb + y * 6, px + (y * 4 + 2 * t) * 3, 6);
        assert_memory_not_equal(s->imgs[k].hash, s->imgs[k + 1].hash, 32);
        assert_memory_not_equal(s->imgs[k + 1].hash, s->imgs[k + 2].hash, 32);
    }
    assert_memory_equal(s->imgs[0].hash, s->imgs[3].hash, 32); /* the same picture, the same keys */
    assert_int_equal(s->messages[0].n_parts, 3);
    assert_int_equal(s->messages[0].parts[0].img, 0);
    assert_int_equal(s->messages[0].parts[2].img, 3);
    proto_msg_clear(&d);
    proto_msg_clear(&m);
    request_free(&r);

    /* a grid over IMAGE_RUN_MAX_TILES: longest side 40 makes it 20 × 10 */
    assert_int_equal(oai_parse_request((const uint8_t *)body, strlen(body), REQUEST_CHAT, &r, &e), 0);
    vis.preproc = 40;
    assert_int_equal(request_images_prepare(&r, &vis, &lim, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "messages[0].content[0].image_url");
    assert_non_null(strstr(e.message, "more than 64 tiles"));
    request_free(&r);
    free(body);
    free(url);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_holds_the_defaults),
        cmocka_unit_test(test_every_row_parsed_and_checked),
        cmocka_unit_test(test_anthropic_shares_the_rows),
        cmocka_unit_test(test_images_into_submit),
        cmocka_unit_test(test_tiled_images_into_submit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
