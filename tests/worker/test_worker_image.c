/* Tests for worker/worker_image: a request's images into its scheduler
 * request — each distinct image encoded once (its rows equal
 * vision_encode's, a repeated image's rows copied), the hash's first 8
 * bytes as the key, REGISTER's vis info; and every refusal (no projector,
 * an image index past the list, a wrong size, a span outside the prompt or
 * over another token) a 400 with a message; two requests' images through
 * one batch (worker_img_batch) get their rows alone, bit for bit. Models:
 * pagoda-mkmodel --mmproj (gemma3, 112 px, 16 rows per image). And the
 * gateway's routing keys for a chat request with images (gateway/route.h
 * route_text_keys) are the keys this worker's KV pool publishes once it has
 * run it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/image/image.h"
#include "gateway/route.h"
#include "worker/kv_pool.h"
#include "worker/worker.h"
#include "worker/worker_image.h"
#include "tests/support/support.h"

#define SIDE 112

static char g_dir[] = "/tmp/pagoda-worker-image-XXXXXX";
static engine_t *g_e;
static vision_t *g_v;
static int32_t g_soft;

static int setup(void **state)
{
    (void)state;
    char args[512], path[128], err[256];
    if (!mkdtemp(g_dir))
        return -1;
    snprintf(args, sizeof args,
             "--arch gemma3 --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 128 --ctx 256 --vocab 512 "
             "--mmproj %s/mm.gguf --vis-size %d --vis-patch 7 --vis-dim 64 --vis-layers 1 --vis-heads 4 --vis-ffn 128",
             g_dir, SIDE);
    if (support_mkmodel(g_dir, "text.gguf", args) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/text.gguf", g_dir);
    if (!(g_e = engine_load(path, err, sizeof err)))
        return -1;
    snprintf(path, sizeof path, "%s/mm.gguf", g_dir);
    if (vision_load(path, 1, &g_v, err, sizeof err) != 0)
        return -1;
    const char *st = vision_proj_info(vision_config(g_v)->proj)->tok_soft;
    return tokenizer_encode(g_e->tok, st, strlen(st), false, true, &g_soft, 1) == 1 ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    vision_free(&g_v);
    engine_free(&g_e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* prompt: BOS, image at 1..16, word, image at 18..33, word, image at 35..50, word */
static void make_req(worker_req_t *r)
{
    memset(r, 0, sizeof *r);
    r->prompt = malloc(52 * sizeof(int32_t));
    int n = 0;
    r->prompt[n++] = 1;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 16; i++)
            r->prompt[n++] = g_soft;
        r->prompt[n++] = 300 + k;
    }
    r->req.prompt = r->prompt;
    r->req.n_prompt = n;
}

static void test_encode_once(void **state)
{
    (void)state;
    const size_t px = (size_t)SIDE * SIDE * 3;
    uint8_t *a = malloc(px), *b = malloc(px), ha[32], hb[32];
    for (size_t i = 0; i < px; i++) {
        a[i] = (uint8_t)(i * 7);
        b[i] = (uint8_t)(255 - i % 251);
    }
    for (int i = 0; i < 32; i++) {
        ha[i] = (uint8_t)i;
        hb[i] = (uint8_t)(100 + i);
    }
    worker_img_t imgs[2] = {{a, SIDE, SIDE, ha}, {b, SIDE, SIDE, hb}};
    worker_img_span_t spans[3] = {{1, 16, 0}, {18, 16, 1}, {35, 16, 0}};
    worker_req_t r;
    make_req(&r);
    char err[256] = "";
    assert_int_equal(worker_req_images(&r, g_v, g_e->tok, imgs, 2, spans, 3, err, sizeof err), PROTO_ERR_NONE);
    assert_int_equal(r.req.n_images, 3);
    const size_t rows = 16 * 64;
    float *want = malloc(rows * sizeof(float));
    assert_int_equal(vision_encode(g_v, a, SIDE, SIDE, want, err, sizeof err), 0);
    assert_memory_equal(r.req.images[0].embd, want, rows * sizeof(float));
    assert_memory_equal(r.req.images[2].embd, want, rows * sizeof(float));
    assert_int_equal(vision_encode(g_v, b, SIDE, SIDE, want, err, sizeof err), 0);
    assert_memory_equal(r.req.images[1].embd, want, rows * sizeof(float));
    uint64_t ka, kb;
    memcpy(&ka, ha, 8);
    memcpy(&kb, hb, 8);
    assert_true(r.req.images[0].key == ka && r.req.images[1].key == kb && r.req.images[2].key == ka);
    assert_int_equal(r.req.images[1].pos, 18);
    worker_req_clear(&r);
    worker_req_clear(&r); /* safe twice */
    worker_vis_info_t vi;
    worker_vis_info(g_v, &vi);
    assert_int_equal(vi.size, SIDE);
    assert_int_equal(vi.n_tok, 16);
    assert_string_equal(vi.proj, "gemma3");
    free(want);
    free(a);
    free(b);
}

/* Two requests admitted in one turn: their images go through one batch
 * (worker_req_images_add, worker_img_batch_run), the image both use (the
 * same hash) encoded once; each request's rows equal vision_encode's of
 * its images alone, bit for bit (scratch for 2 images: a, b, c in passes
 * of 2 + 1, the fast paths on). */
static void test_batch_across_requests(void **state)
{
    (void)state;
    const size_t px = (size_t)SIDE * SIDE * 3, rows = 16 * 64;
    uint8_t *a = malloc(px), *b = malloc(px), *c = malloc(px), ha[32], hb[32], hc[32];
    for (size_t i = 0; i < px; i++) {
        a[i] = (uint8_t)(i * 7);
        b[i] = (uint8_t)(255 - i % 251);
        c[i] = (uint8_t)(i % 13 * 19);
    }
    for (int i = 0; i < 32; i++)
        ha[i] = (uint8_t)i, hb[i] = (uint8_t)(100 + i), hc[i] = (uint8_t)(200 + i);
    assert_int_equal(vision_set_fast(g_v, true), 0);
    assert_int_equal(vision_set_max_batch(g_v, 2), 0);
    worker_img_t imgs1[2] = {{a, SIDE, SIDE, ha}, {b, SIDE, SIDE, hb}}, imgs2[2] = {{c, SIDE, SIDE, hc}, {a, SIDE, SIDE, ha}};
    worker_img_span_t spans1[3] = {{1, 16, 0}, {18, 16, 1}, {35, 16, 0}}, spans2[2] = {{1, 16, 1}, {18, 16, 0}};
    worker_req_t r1, r2;
    make_req(&r1);
    make_req(&r2);
    char err[256] = "";
    worker_img_batch_t bt;
    worker_img_batch_init(&bt, g_v);
    assert_int_equal(worker_req_images_add(&r1, g_v, g_e->tok, imgs1, 2, spans1, 3, &bt, err, sizeof err),
                     PROTO_ERR_NONE);
    assert_int_equal(worker_req_images_add(&r2, g_v, g_e->tok, imgs2, 2, spans2, 2, &bt, err, sizeof err),
                     PROTO_ERR_NONE);
    assert_int_equal(bt.n, 3); /* a, b, c: a once */
    worker_img_batch_run(&bt);
    assert_int_equal(bt.n, 0);
    worker_img_batch_free(&bt);
    float *want = malloc(3 * rows * sizeof(float));
    assert_int_equal(vision_encode(g_v, a, SIDE, SIDE, want, err, sizeof err), 0);
    assert_int_equal(vision_encode(g_v, b, SIDE, SIDE, want + rows, err, sizeof err), 0);
    assert_int_equal(vision_encode(g_v, c, SIDE, SIDE, want + 2 * rows, err, sizeof err), 0);
    const float *const got[5] = {r1.req.images[0].embd, r1.req.images[1].embd, r1.req.images[2].embd,
                                 r2.req.images[0].embd, r2.req.images[1].embd};
    const int which[5] = {0, 1, 0, 0, 2}; /* r2's spans: image 1 (a) at 1, image 0 (c) at 18 */
    for (int i = 0; i < 5; i++)
        if (memcmp(got[i], want + (size_t)which[i] * rows, rows * sizeof(float)) != 0)
            fail_msg("span %d of the batch: rows differ from its image's alone", i);
    worker_req_clear(&r1);
    worker_req_clear(&r2);
    assert_int_equal(vision_set_max_batch(g_v, 1), 0);
    assert_int_equal(vision_set_fast(g_v, false), 0);
    free(want);
    free(a);
    free(b);
    free(c);
}

static void test_refusals(void **state)
{
    (void)state;
    const size_t px = (size_t)SIDE * SIDE * 3;
    uint8_t *a = calloc(1, px), h[32] = {0};
    worker_img_t ok = {a, SIDE, SIDE, h}, small = {a, 56, 56, h};
    const struct {
        vision_t *v;
        worker_img_t img;
        worker_img_span_t span;
        const char *msg;
    } cases[] = {
        {NULL, ok, {1, 16, 0}, "no images"},
        {g_v, ok, {1, 16, 1}, "past the request's images"},
        {g_v, small, {1, 16, 0}, "pixels square"},
        {g_v, ok, {1, 15, 0}, "inside the prompt"},
        {g_v, ok, {45, 16, 0}, "inside the prompt"},
        {g_v, ok, {2, 16, 0}, "not the placeholder"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        worker_req_t r;
        make_req(&r);
        char err[256] = "";
        assert_int_equal(worker_req_images(&r, cases[i].v, g_e->tok, &cases[i].img, 1, &cases[i].span, 1, err,
                                           sizeof err),
                         PROTO_ERR_BAD_REQUEST);
        if (!strstr(err, cases[i].msg))
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, cases[i].msg);
        worker_req_clear(&r);
    }
    free(a);
}

static void on_event(void *ud, const sched_event_t *ev)
{
    (void)ud;
    (void)ev;
}

/* Runs sm through the worker's path (worker_req_from_submit, _submit_images,
 * the scheduler with 8-token blocks) and returns the public keys its pool
 * then holds (out, ≤ max). */
static int32_t worker_keys(const proto_submit_t *sm, uint64_t *out, int32_t max)
{
    char err[256] = "";
    worker_req_t r;
    if (worker_req_from_submit(g_e, sm, clock_now_us(), &r, err, sizeof err) != PROTO_ERR_NONE)
        fail_msg("worker_req_from_submit: %s", err);
    if (worker_req_submit_images(&r, g_v, g_e, sm, NULL, err, sizeof err) != PROTO_ERR_NONE)
        fail_msg("worker_req_submit_images: %s", err);
    sched_config_t cfg;
    sched_config_default(&cfg);
    cfg.max_seqs = 1;
    cfg.block_size = 8;
    cfg.kv_blocks = 64;
    cfg.n_threads = 1;
    sched_t *s = sched_new(g_e->model, g_e->tok, &cfg, on_event, NULL, err, sizeof err);
    if (!s)
        fail_msg("sched_new: %s", err);
    if (sched_submit(s, &r.req, err, sizeof err) != 0)
        fail_msg("sched_submit: %s", err);
    while (sched_busy(s))
        assert_true(sched_step(s) >= 0);
    int32_t n = kv_pool_cached_keys(sched_kv_pool(s), out, max);
    sched_free(&s);
    worker_req_clear(&r);
    return n;
}

static bool has_key(const uint64_t *set, int32_t n, uint64_t k)
{
    for (int32_t i = 0; i < n; i++)
        if (set[i] == k)
            return true;
    return false;
}

/* A chat request [image, text] in partition 5: every key route_text_keys
 * predicts (with the model's vis) is one the worker's pool holds after
 * running it, and there are as many as the prompt's full blocks; the same
 * request keyed as text only, or with another image's hash, has none of
 * them. */
static void test_route_keys_are_the_workers(void **state)
{
    (void)state;
    const size_t px = (size_t)SIDE * SIDE * 3;
    uint8_t *a = malloc(px);
    for (size_t i = 0; i < px; i++)
        a[i] = (uint8_t)(i * 13 + i / 97);
    proto_img_t img = {.w = SIDE, .h = SIDE, .rgb = a, .n_rgb = (uint32_t)px};
    image_hash(&(image_rgb_t){.w = SIDE, .h = SIDE, .rgb = a}, img.hash);
    char text[] = "What is in this picture? Tell me about the colours and the shapes in it.";
    proto_part_t parts[2] = {{.img = 0}, {.text = text}};
    proto_chat_msg_t m = {.role = "user", .content = text, .parts = parts, .n_parts = 2};
    proto_submit_t sm = {.kind = PROTO_KIND_CHAT, .messages = &m, .n_messages = 1, .imgs = &img, .n_imgs = 1,
                         .partition = 5, .max_tokens = 2};
    proto_knobs_default(&sm.sampling.knobs);
    uint64_t held[64];
    int32_t n_held = worker_keys(&sm, held, 64);

    char path[128];
    snprintf(path, sizeof path, "%s/text.gguf", g_dir);
    const char *names[] = {"vis"}, *paths[] = {path};
    route_text_t *rt = route_text_new(names, paths, 1);
    worker_vis_info_t vi;
    worker_vis_info(g_v, &vi);
    proto_vis_t vis = {.has = true, .size = vi.size, .n_tok = vi.n_tok};
    snprintf(vis.proj, sizeof vis.proj, "%s", vi.proj);
    uint64_t *k = NULL;
    int32_t n = route_text_keys(rt, "vis", &sm, &vis, 8, &k);
    print_message("%d predicted keys, %d held by the worker\n", n, n_held);
    assert_true(n >= 3); /* the image's 18 ids and the text: several 8-token blocks */
    assert_true(n_held >= n);
    for (int32_t i = 0; i < n; i++)
        assert_true(has_key(held, n_held, k[i]));
    free(k);
    /* no vis: no keys (the worker refuses such a request) */
    assert_int_equal(route_text_keys(rt, "vis", &sm, NULL, 8, &k), 0);
    assert_null(k);
    /* the same text without the image: other keys from block 0 */
    proto_chat_msg_t mt = {.role = "user", .content = text};
    proto_submit_t st = {.kind = PROTO_KIND_CHAT, .messages = &mt, .n_messages = 1, .partition = 5};
    n = route_text_keys(rt, "vis", &st, NULL, 8, &k);
    assert_true(n >= 2);
    for (int32_t i = 0; i < n; i++)
        assert_false(has_key(held, n_held, k[i]));
    free(k);
    /* another image (one bit of its key, the hash's first 8 bytes): none of them either */
    img.hash[0] ^= 1;
    n = route_text_keys(rt, "vis", &sm, &vis, 8, &k);
    assert_true(n >= 3);
    for (int32_t i = 0; i < n; i++)
        assert_false(has_key(held, n_held, k[i]));
    free(k);
    route_text_free(&rt);
    free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_once),
        cmocka_unit_test(test_batch_across_requests),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_route_keys_are_the_workers),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
