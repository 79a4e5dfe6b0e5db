/* Unit tests for common/text/image_run: the tile grid of an idefics3 image
 * and the token run an image gets, against values worked out here from the
 * rule image_run.h documents (llama.cpp's libmtmd layout), not from the
 * code's output:
 *
 *   grid: s = min(L/w, L/h); nx = ceil(w·s / S), ny = ceil(h·s / S); L = 0: 0 × 0
 *   run:  per tile (R, C) row-major: <fake_token_around_image> <row_R_col_C> <image>×n,
 *         "\n" between rows of tiles; then "\n\n" <fake_token_around_image>
 *         <global-img> <image>×n <fake_token_around_image>
 *
 * The vocabulary is pagoda-mkmodel's builtin one with the idefics3 image
 * tokens (--projector idefics3): the tokens looked up here by their stored
 * text ("<0x0A>" is SentencePiece's byte token for "\n"), independently of
 * image_run_piece's decoding. A vocabulary without the image tokens
 * (stories260K) gets an error and nothing appended. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/text/gguf.h"
#include "common/text/image_run.h"
#include "common/text/tokenizer.h"
#include "tests/support/support.h"

static char g_dir[] = "/tmp/pagoda-test-image-run-XXXXXX";
static tokenizer_t *g_tok;

static tokenizer_t *load_file(const char *path)
{
    gguf_t *g = NULL;
    char err[256];
    if (gguf_open(path, &g, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", path, err);
        return NULL;
    }
    tokenizer_t *t = tokenizer_from_gguf(g, err, sizeof err);
    gguf_close(&g);
    return t;
}

static int setup(void **state)
{
    (void)state;
    if (!mkdtemp(g_dir))
        return -1;
    char args[512], path[128];
    snprintf(args, sizeof args,
             "--arch llama --dim 64 --layers 1 --heads 4 --kv-heads 2 --ffn 128 --ctx 256 --vocab 512 --type F32 "
             "--projector idefics3 --mmproj %s/mmproj.gguf --vis-size 56 --vis-patch 7 --vis-merge 2",
             g_dir);
    if (support_mkmodel(g_dir, "text.gguf", args) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/text.gguf", g_dir);
    g_tok = load_file(path);
    return g_tok ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    tokenizer_free(&g_tok);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_grid(void **state)
{
    (void)state;
    static const struct {
        int32_t w, h, tile, longest, nx, ny;
    } cases[] = {
        {112, 112, 56, 112, 2, 2},   /* already the longest edge: 2 x 2 */
        {100, 100, 56, 112, 2, 2},   /* scaled up to 112 first */
        {200, 100, 56, 112, 2, 1},   /* 112 x 56 */
        {30, 500, 56, 112, 1, 2},    /* 6.72 x 112: the narrow side still one tile */
        {56, 56, 56, 56, 1, 1},      /* one tile */
        {1000, 700, 512, 2048, 4, 3}, /* SmolVLM: 2048 x 1433.6 → 4 x 3 */
        {640, 480, 512, 2048, 4, 3},  /* 2048 x 1536 → 4 x 3 */
        {64, 64, 56, 0, 0, 0},       /* no preproc_image_size: no tiles */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t nx, ny, rw, rh;
        assert_int_equal(image_run_grid(cases[i].w, cases[i].h, cases[i].tile, cases[i].longest, &nx, &ny, &rw, &rh),
                         0);
        assert_int_equal(nx, cases[i].nx);
        assert_int_equal(ny, cases[i].ny);
        assert_int_equal(rw, cases[i].nx * cases[i].tile);
        assert_int_equal(rh, cases[i].ny * cases[i].tile);
    }
    int32_t nx, ny, rw, rh;
    /* 9 x 9 = 81 tiles: over IMAGE_RUN_MAX_TILES */
    assert_int_equal(image_run_grid(9 * 56, 9 * 56, 56, 9 * 56, &nx, &ny, &rw, &rh), -1);
    assert_int_equal(image_run_grid(0, 10, 56, 112, &nx, &ny, &rw, &rh), -1);
}

/* the id of the token stored as s */
static int32_t id_of(const char *s)
{
    int32_t id = tokenizer_find(g_tok, s, strlen(s));
    assert_true(id >= 0);
    return id;
}

/* The expected run for an nx × ny grid, written from the rule at the top. */
static int32_t expected(int32_t nx, int32_t ny, int32_t n_tok, int32_t *out, int32_t *pos)
{
    const int32_t fake = id_of("<fake_token_around_image>"), glob = id_of("<global-img>");
    const int32_t img = id_of("<image>"), nl = id_of("<0x0A>"), nn = id_of("\n\n");
    int32_t n = 0, k = 0;
    for (int32_t r = 1; r <= ny; r++) {
        for (int32_t c = 1; c <= nx; c++) {
            char t[32];
            snprintf(t, sizeof t, "<row_%d_col_%d>", (int)r, (int)c);
            out[n++] = fake;
            out[n++] = id_of(t);
            pos[k++] = n;
            for (int32_t i = 0; i < n_tok; i++)
                out[n++] = img;
        }
        if (r < ny)
            out[n++] = nl;
    }
    out[n++] = nn;
    out[n++] = fake;
    out[n++] = glob;
    pos[k++] = n;
    for (int32_t i = 0; i < n_tok; i++)
        out[n++] = img;
    out[n++] = fake;
    return n;
}

static void test_layout(void **state)
{
    (void)state;
    const image_run_info_t *ri = image_run_find("idefics3");
    assert_non_null(ri);
    assert_false(ri->non_causal);
    assert_true(image_run_find("gemma3")->non_causal);
    static const int32_t grids[][2] = {{0, 0}, {1, 1}, {2, 1}, {1, 2}, {2, 2}, {3, 2}, {4, 4}};
    for (size_t g = 0; g < sizeof grids / sizeof grids[0]; g++) {
        const int32_t nx = grids[g][0], ny = grids[g][1], n_tok = 5;
        int32_t want[512], want_pos[IMAGE_RUN_MAX_TILES + 1];
        int32_t n_want = expected(nx, ny, n_tok, want, want_pos);
        /* after a prefix token, as in a prompt */
        int32_t *ids = malloc(sizeof *ids), n = 1, cap = 1, pos[IMAGE_RUN_MAX_TILES + 1];
        ids[0] = 1;
        char err[256];
        int k = image_run_append_grid(g_tok, ri, n_tok, nx, ny, &ids, &n, &cap, pos, err, sizeof err);
        assert_int_equal(k, nx * ny + 1);
        assert_int_equal(n, 1 + n_want);
        assert_memory_equal(ids + 1, want, (size_t)n_want * sizeof *want);
        for (int i = 0; i < k; i++)
            assert_int_equal(pos[i], 1 + want_pos[i]);
        free(ids);
    }
    /* piece lookup: "\n" is the byte token, "\n\n" the normal piece */
    assert_int_equal(image_run_piece(g_tok, "\n"), id_of("<0x0A>"));
    assert_int_equal(image_run_piece(g_tok, "\n\n"), id_of("\n\n"));
    assert_int_equal(image_run_piece(g_tok, "<global-img>"), id_of("<global-img>"));
}

static void test_missing_tokens(void **state)
{
    (void)state;
    tokenizer_t *t = load_file(support_shared_model("stories260K.gguf"));
    assert_non_null(t);
    int32_t *ids = NULL, n = 0, cap = 0, pos[IMAGE_RUN_MAX_TILES + 1];
    char err[256];
    assert_int_equal(image_run_append_grid(t, image_run_find("idefics3"), 4, 2, 2, &ids, &n, &cap, pos, err,
                                           sizeof err),
                     -1);
    assert_non_null(strstr(err, "<image>"));
    assert_int_equal(n, 0);
    free(ids);
    tokenizer_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grid),
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_missing_tokens),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
