/* Tests for worker/model/vision: the Gemma 3 and Idefics3 (SmolVLM) mmproj
 * encoders against
 * tests/ref/vision_ref.py, an independent float64 NumPy implementation,
 * on random-weight projectors written by pagoda-mkmodel --mmproj (112 px
 * images, 7 px patches, width 64, 2 blocks, 4x4 pooling: 16 rows of width
 * 64 per image) with F32, F16 and Q8_0 ViT matrices, and three images the
 * test writes as binary PPM files (a gradient, a checkerboard, seeded
 * noise). Tolerance, over every element of the (16, 64) output:
 *
 *     max |pagoda - ref| <= 1e-3 * max(1, max |ref|)
 *
 * (pagoda computes in float32 from the same stored weights the reference
 * decodes; observed ~1e-6 relative, printed.) Also: bad image sizes and
 * files that are not projectors are refused with a message.
 *
 * The same for idefics3 projectors (pagoda-mkmodel --arch llama --projector
 * idefics3 --vis-merge 2: pixel shuffle 2x2, 64 rows of width 64 per
 * image; F32, F16 and Q8_0), same tolerances.
 *
 * Image rows in the sequence: a prompt with an image's 16 rows in the
 * middle goes through the scheduler (worker/sched.h, sched_req_t.images)
 * with max_batch_tokens 16, so the prefill is cut before the image, takes
 * the image whole, then the rest; its greedy continuation must equal
 * tests/ref/llama_ref.py's float64 one given the same rows (--image-rows:
 * unscaled inputs, the image's positions attending to each other both
 * ways), on a text model whose next token is clear (--logit-scale 8). And
 * the same prompt with another image continues differently.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/engine.h"
#include "worker/model/vision.h"
#include "worker/sched.h"
#include "tests/support/support.h"

#define PY "/usr/bin/python3"
#define TOL_REF 1e-3
#define SIDE 112

static char g_dir[] = "/tmp/pagoda-vision-test-XXXXXX";
static const char *const g_types[] = {"F32", "F16", "Q8_0", "BF16"};
#define N_TYPES 4
/* The fast paths' bound (vision_set_fast: Q8_0 through the int8 kernels,
 * activations rounded to 8 bits per block of 32; BF16 through vdpbf16ps,
 * activations rounded to bf16; F32 / F16 stay on the float path), as a
 * fraction of max(1, max |ref|) like TOL_REF. */
static const double g_tol_fast[N_TYPES] = {TOL_REF, TOL_REF, 2e-2, 1e-2};
/* the projectors under test: file prefix, mkmodel arguments, type, rows per
 * image, how many of g_types */
static const struct {
    const char *prefix, *args;
    enum vision_proj proj;
    int n_tok;
    size_t n_types;
} g_projs[] = {
    {"mmproj", "--arch gemma3 --vis-merge 4", VISION_PROJ_GEMMA3, 16, N_TYPES},
    {"idf-mmproj", "--arch llama --projector idefics3 --vis-merge 2", VISION_PROJ_IDEFICS3, 64, 3},
};
static const char *const g_images[] = {"gradient", "checker", "noise"};

/* image i (SIDE x SIDE RGB8) */
static void make_image(int i, uint8_t *rgb)
{
    uint32_t seed = 12345;
    for (int y = 0; y < SIDE; y++)
        for (int x = 0; x < SIDE; x++) {
            uint8_t *p = rgb + ((size_t)y * SIDE + x) * 3;
            if (i == 0) {
                p[0] = (uint8_t)(x * 255 / (SIDE - 1));
                p[1] = (uint8_t)(y * 255 / (SIDE - 1));
                p[2] = (uint8_t)((x + y) * 255 / (2 * SIDE - 2));
            } else if (i == 1) {
                int on = ((x / 14) + (y / 14)) % 2;
                p[0] = on ? 230 : 20, p[1] = on ? 40 : 200, p[2] = on ? 90 : 160;
            } else {
                for (int c = 0; c < 3; c++) {
                    seed = seed * 1664525u + 1013904223u;
                    p[c] = (uint8_t)(seed >> 24);
                }
            }
        }
}

static void write_ppm(const char *path, const uint8_t *rgb)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fprintf(f, "P6\n%d %d\n255\n", SIDE, SIDE);
    assert_int_equal(fwrite(rgb, 1, (size_t)SIDE * SIDE * 3, f), (size_t)SIDE * SIDE * 3);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir))
        return -1;
    for (size_t pj = 0; pj < 2; pj++)
        for (size_t t = 0; t < g_projs[pj].n_types; t++) {
            char name[64], args[512];
            snprintf(name, sizeof name, "%stext-%s.gguf", pj ? "idf-" : "", g_types[t]);
            snprintf(args, sizeof args,
                     "%s --dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 128 --ctx 256 --vocab 512 "
                     "--type %s --seed 40 --untied --mute-special --logit-scale 8 --mmproj %s/%s-%s.gguf --vis-size %d "
                     "--vis-patch 7 --vis-dim 64 --vis-layers 2 --vis-heads 4 --vis-ffn 128",
                     g_projs[pj].args, g_types[t], g_dir, g_projs[pj].prefix, g_types[t], SIDE);
            if (support_mkmodel(g_dir, name, args) != 0) {
                fprintf(stderr, "pagoda-mkmodel failed (see %s/log)\n", g_dir);
                return -1;
            }
        }
    uint8_t *rgb = malloc((size_t)SIDE * SIDE * 3);
    for (int i = 0; i < 3; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s.ppm", g_dir, g_images[i]);
        make_image(i, rgb);
        write_ppm(path, rgb);
    }
    free(rgb);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint8_t *read_ppm(const char *path)
{
    size_t len;
    unsigned char *buf = support_read_file(path, &len);
    assert_non_null(buf);
    char hdr[32];
    int n = snprintf(hdr, sizeof hdr, "P6\n%d %d\n255\n", SIDE, SIDE);
    assert_int_equal(len, (size_t)n + (size_t)SIDE * SIDE * 3);
    assert_memory_equal(buf, hdr, (size_t)n);
    memmove(buf, buf + n, (size_t)SIDE * SIDE * 3);
    return buf;
}

static void test_against_reference(void **state)
{
    (void)state;
    for (size_t pj = 0; pj < 2; pj++)
        for (size_t pt = 0; pt < 2 * g_projs[pj].n_types; pt++) {
            const size_t t = pt / 2;
            const int fast = (int)(pt % 2);
            char mm[128], err[256];
            snprintf(mm, sizeof mm, "%s/%s-%s.gguf", g_dir, g_projs[pj].prefix, g_types[t]);
            vision_t *v = NULL;
            if (vision_load(mm, 2, &v, err, sizeof err) != 0)
                fail_msg("%s: %s", mm, err);
            assert_int_equal(vision_set_fast(v, fast), 0);
            const vision_config_t *c = vision_config(v);
            assert_int_equal(c->proj, g_projs[pj].proj);
            assert_int_equal(c->image_size, SIDE);
            assert_int_equal(c->n_tok, g_projs[pj].n_tok);
            assert_int_equal(c->out_dim, 64);
            const size_t n_out = (size_t)c->n_tok * c->out_dim;
            const double tol = fast ? g_tol_fast[t] : TOL_REF;
            float *out = malloc(n_out * sizeof(float));
            for (int i = 0; i < 3; i++) {
                char img[128], ref[128], cmd[512];
                snprintf(img, sizeof img, "%s/%s.ppm", g_dir, g_images[i]);
                snprintf(ref, sizeof ref, "%s/ref-%s-%s-%s.f32", g_dir, g_projs[pj].prefix, g_types[t], g_images[i]);
                if (access(ref, F_OK) != 0) {
                    snprintf(cmd, sizeof cmd, PY " tests/ref/vision_ref.py '%s' '%s' --out '%s'", mm, img, ref);
                    assert_int_equal(system(cmd), 0);
                }
                uint8_t *rgb = read_ppm(img);
                assert_int_equal(vision_encode(v, rgb, SIDE, SIDE, out, err, sizeof err), 0);
                free(rgb);
                size_t len;
                float *want = (float *)support_read_file(ref, &len);
                assert_non_null(want);
                assert_int_equal(len, n_out * sizeof(float));
                double scale = 1, diff = 0;
                for (size_t j = 0; j < n_out; j++)
                    scale = fmax(scale, fabs(want[j]));
                for (size_t j = 0; j < n_out; j++) {
                    assert_true(isfinite(out[j]));
                    diff = fmax(diff, fabs(out[j] - want[j]));
                }
                printf("# %s %-4s %s %-8s max|diff| %.3g (scale %.3g, relative %.2g, bound %.0e)\n",
                       vision_proj_info(c->proj)->name, g_types[t],
                       fast ? "fast " : "exact", g_images[i], diff, scale, diff / scale, tol);
                if (diff > tol * scale)
                    fail_msg("%s %s %s: max |pagoda - ref| %g > %g", g_types[t], fast ? "fast" : "exact",
                             g_images[i], diff, tol * scale);
                free(want);
            }
            free(out);
            vision_free(&v);
            assert_null(v);
        }
}

/* Batched across requests: the three images (and the first again) encoded
 * as one batch — with scratch for 2 images, so in passes of 2 + 2 — give
 * each image the bits it gets alone, for every matrix type, exact and fast
 * (every kernel computes a row from that row alone: matmul.h, vit_attn.h,
 * vit_ops.h). */
static void test_batch_equals_alone(void **state)
{
    (void)state;
    uint8_t *rgb[4];
    for (int i = 0; i < 4; i++) {
        rgb[i] = malloc((size_t)SIDE * SIDE * 3);
        make_image(i % 3, rgb[i]);
    }
    for (size_t t = 0; t < N_TYPES; t++)
        for (int fast = 0; fast <= 1; fast++) {
            char mm[128], err[256];
            snprintf(mm, sizeof mm, "%s/mmproj-%s.gguf", g_dir, g_types[t]);
            vision_t *v = NULL;
            assert_int_equal(vision_load(mm, 2, &v, err, sizeof err), 0);
            assert_int_equal(vision_set_fast(v, fast), 0);
            const size_t n = (size_t)vision_config(v)->n_tok * vision_config(v)->out_dim;
            float *alone = malloc(4 * n * sizeof(float)), *batch = malloc(4 * n * sizeof(float));
            for (int i = 0; i < 4; i++)
                assert_int_equal(vision_encode(v, rgb[i], SIDE, SIDE, alone + i * n, err, sizeof err), 0);
            assert_int_equal(vision_set_max_batch(v, 2), 0);
            assert_int_equal(vision_set_fast(v, fast), 0);
            const uint8_t *px[4] = {rgb[0], rgb[1], rgb[2], rgb[3]};
            float *outs[4] = {batch, batch + n, batch + 2 * n, batch + 3 * n};
            const int ws[4] = {SIDE, SIDE, SIDE, SIDE};
            assert_int_equal(vision_encode_batch(v, px, ws, ws, 4, outs, err, sizeof err), 0);
            for (int i = 0; i < 4; i++)
                if (memcmp(alone + i * n, batch + i * n, n * sizeof(float)) != 0)
                    fail_msg("%s %s: image %d's rows in the batch differ from its rows alone", g_types[t],
                             fast ? "fast" : "exact", i);
            /* a bad size anywhere refuses the batch */
            const int bad[2] = {SIDE, SIDE - 1};
            assert_int_equal(vision_encode_batch(v, px, bad, ws, 2, outs, err, sizeof err), -1);
            assert_non_null(strstr(err, "image 1"));
            free(alone);
            free(batch);
            vision_free(&v);
        }
    for (int i = 0; i < 4; i++)
        free(rgb[i]);
}

/* Different images give different embeddings (the encoder reads the pixels). */
static void test_images_differ(void **state)
{
    (void)state;
    char mm[128], err[256];
    snprintf(mm, sizeof mm, "%s/mmproj-F32.gguf", g_dir);
    vision_t *v = NULL;
    assert_int_equal(vision_load(mm, 1, &v, err, sizeof err), 0);
    const size_t n = (size_t)vision_config(v)->n_tok * vision_config(v)->out_dim;
    float *a = malloc(n * sizeof(float)), *b = malloc(n * sizeof(float));
    uint8_t *rgb = malloc((size_t)SIDE * SIDE * 3);
    make_image(0, rgb);
    assert_int_equal(vision_encode(v, rgb, SIDE, SIDE, a, err, sizeof err), 0);
    make_image(1, rgb);
    assert_int_equal(vision_encode(v, rgb, SIDE, SIDE, b, err, sizeof err), 0);
    assert_true(memcmp(a, b, n * sizeof(float)) != 0);
    /* the same image twice: the same bits (no state kept between images) */
    make_image(0, rgb);
    assert_int_equal(vision_encode(v, rgb, SIDE, SIDE, b, err, sizeof err), 0);
    assert_memory_equal(a, b, n * sizeof(float));
    free(a);
    free(b);
    free(rgb);
    vision_free(&v);
}

static void test_refusals(void **state)
{
    (void)state;
    char path[128], err[256];
    vision_t *v = NULL;
    /* a text model is not a projector */
    snprintf(path, sizeof path, "%s/text-F32.gguf", g_dir);
    assert_int_equal(vision_load(path, 1, &v, err, sizeof err), -1);
    assert_null(v);
    assert_non_null(strstr(err, "clip.projector_type"));
    /* no such file */
    snprintf(path, sizeof path, "%s/absent.gguf", g_dir);
    assert_int_equal(vision_load(path, 1, &v, err, sizeof err), -1);
    assert_true(err[0] != '\0');
    /* a wrong image size */
    snprintf(path, sizeof path, "%s/mmproj-F32.gguf", g_dir);
    assert_int_equal(vision_load(path, 1, &v, err, sizeof err), 0);
    float *out = malloc((size_t)vision_config(v)->n_tok * vision_config(v)->out_dim * sizeof(float));
    uint8_t px[3 * 4] = {0};
    assert_int_equal(vision_encode(v, px, 2, 2, out, err, sizeof err), -1);
    assert_non_null(strstr(err, "112x112"));
    free(out);
    vision_free(&v);
}

#define N_GEN 8
#define IMG_POS 5

struct gen {
    int32_t toks[64];
    int n;
};

static void on_event(void *ud, const sched_event_t *ev)
{
    struct gen *g = ud;
    for (int32_t i = 0; i < ev->n_tokens && g->n < 64; i++)
        g->toks[g->n++] = ev->tokens[i];
}

/* The prompt: BOS, 4 words, the image's 16 placeholders, 7 words. */
static int make_prompt(int32_t *ids, int32_t soft)
{
    int n = 0;
    ids[n++] = 1;
    for (int i = 0; i < IMG_POS - 1; i++)
        ids[n++] = 300 + 7 * i;
    for (int i = 0; i < 16; i++)
        ids[n++] = soft;
    for (int i = 0; i < 7; i++)
        ids[n++] = 320 + 11 * i;
    return n;
}

/* Greedy N_GEN tokens through the scheduler with image img's rows. */
static void sched_greedy(engine_t *e, const float *rows, const int32_t *ids, int n, struct gen *g)
{
    char err[256];
    sched_config_t cfg;
    sched_config_default(&cfg);
    cfg.max_seqs = 1;
    cfg.max_batch_tokens = 16; /* chunks: [0, 5), the image [5, 21), the rest */
    cfg.exact_matmul = true;
    cfg.kv_type = KV_TYPE_F32;
    cfg.n_threads = 2;
    sched_t *s = sched_new(e->model, e->tok, &cfg, on_event, g, err, sizeof err);
    if (!s)
        fail_msg("sched_new: %s", err);
    sched_image_t im = {.pos = IMG_POS, .n_tok = 16, .embd = rows, .key = 7};
    sched_req_t r = {.id = 1, .priority = 1, .prompt = ids, .n_prompt = n, .max_tokens = N_GEN,
                     .ignore_eos = true, .top_logprobs = -1, .images = &im, .n_images = 1};
    sampler_params_default(&r.sampling);
    r.sampling.temperature = 0;
    if (sched_submit(s, &r, err, sizeof err) != 0)
        fail_msg("sched_submit: %s", err);
    while (sched_busy(s))
        assert_true(sched_step(s) >= 0);
    sched_free(&s);
}

static void test_image_in_sequence(void **state)
{
    (void)state;
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/text-F32.gguf", g_dir);
    engine_t *e = engine_load(path, err, sizeof err);
    if (!e)
        fail_msg("%s: %s", path, err);
    snprintf(path, sizeof path, "%s/mmproj-F32.gguf", g_dir);
    vision_t *v = NULL;
    assert_int_equal(vision_load(path, 2, &v, err, sizeof err), 0);
    const vision_config_t *c = vision_config(v);
    assert_int_equal(c->out_dim, e->model->cfg.dim);
    int32_t soft;
    const char *st = vision_proj_info(c->proj)->tok_soft;
    assert_int_equal(tokenizer_encode(e->tok, st, strlen(st), false, true, &soft, 1), 1);
    int32_t ids[64];
    int n = make_prompt(ids, soft);
    uint8_t *rgb = malloc((size_t)SIDE * SIDE * 3);
    float *rows[2];
    struct gen g[2] = {{{0}, 0}, {{0}, 0}};
    for (int i = 0; i < 2; i++) {
        rows[i] = malloc((size_t)c->n_tok * c->out_dim * sizeof(float));
        make_image(i, rgb);
        assert_int_equal(vision_encode(v, rgb, SIDE, SIDE, rows[i], err, sizeof err), 0);
        sched_greedy(e, rows[i], ids, n, &g[i]);
        assert_int_equal(g[i].n, N_GEN);
    }
    /* the reference, given image 0's rows */
    char rf[128], cmd[1024];
    snprintf(rf, sizeof rf, "%s/rows0.f32", g_dir);
    FILE *f = fopen(rf, "wb");
    assert_non_null(f);
    fwrite(rows[0], sizeof(float), (size_t)c->n_tok * c->out_dim, f);
    fclose(f);
    size_t off = (size_t)snprintf(cmd, sizeof cmd, PY " tests/ref/llama_ref.py '%s/text-F32.gguf' --image-rows '%s' "
                                  "--image-pos %d --greedy %d --seq ", g_dir, rf, IMG_POS, N_GEN);
    for (int i = 0; i < n; i++)
        off += (size_t)snprintf(cmd + off, sizeof cmd - off, "%s%d", i ? "," : "", ids[i]);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int32_t want[N_GEN];
    for (int i = 0; i < N_GEN; i++)
        assert_int_equal(fscanf(p, "%d", &want[i]), 1);
    assert_int_equal(pclose(p), 0);
    printf("# greedy with image 0: pagoda");
    for (int i = 0; i < N_GEN; i++)
        printf(" %d", g[0].toks[i]);
    printf(" | reference");
    for (int i = 0; i < N_GEN; i++)
        printf(" %d", want[i]);
    printf("\n");
    assert_memory_equal(g[0].toks, want, sizeof want);
    /* another image, another continuation */
    assert_true(memcmp(g[0].toks, g[1].toks, sizeof want) != 0);
    for (int i = 0; i < 2; i++)
        free(rows[i]);
    free(rgb);
    vision_free(&v);
    engine_free(&e);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_batch_equals_alone),
        cmocka_unit_test(test_images_differ),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_image_in_sequence),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
