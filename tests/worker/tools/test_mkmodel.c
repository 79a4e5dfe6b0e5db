/* Tests for pagoda-mkmodel: runs the real binary ($PAGODA_BUILD/pagoda-mkmodel)
 * and reads its output back with the GGUF reader: llama.cpp tensor names and
 * shapes, metadata, vocab padding, weight scales, determinism, argument errors.
 * The tokenizer comes from the in-repo fuzz seed tests/fuzz/corpus/gguf/llama.gguf
 * (8 tokens), and from ../shared stories260K when present. */
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
#include <sys/wait.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "tests/support/support.h"
#include "common/text/gguf.h"
#include "worker/model/forward.h"
#include "worker/model/model.h"
#include "worker/kernels/quant.h"
#include "common/text/tokenizer.h"

#define TINY_TOK "tests/fuzz/corpus/gguf/llama.gguf"

static char g_bin[1024];
static char g_dir[] = "/tmp/pagoda-mkmodel-test-XXXXXX";

static int run(const char *args, char *out_path, size_t out_len, const char *name)
{
    snprintf(out_path, out_len, "%s/%s", g_dir, name);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s -o %s %s > %s/log 2>&1", g_bin, out_path, args, g_dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *read_log(void)
{
    char p[1100];
    size_t n;
    snprintf(p, sizeof p, "%s/log", g_dir);
    return (char *)support_read_file(p, &n);
}

static int setup(void **s)
{
    (void)s;
    const char *b = getenv("PAGODA_BUILD");
    snprintf(g_bin, sizeof g_bin, "%s/pagoda-mkmodel", b ? b : "build");
    if (access(g_bin, X_OK) != 0)
        return -1;
    return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **s)
{
    (void)s;
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static int64_t get_int(const gguf_t *g, const char *k)
{
    int64_t v = -1;
    if (gguf_get_int(g, k, &v) != 0)
        fail_msg("missing %s", k);
    return v;
}

static const gguf_tensor_t *need(const gguf_t *g, const char *name, uint32_t type, uint64_t ne0,
                                 uint64_t ne1)
{
    const gguf_tensor_t *t = gguf_find_tensor(g, name);
    if (!t)
        fail_msg("missing tensor %s", name);
    if (t->type != type || t->ne[0] != ne0 || t->ne[1] != ne1)
        fail_msg("%s: %s [%llu %llu], want %s [%llu %llu]", name, ggml_type_name(t->type),
                 (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                 ggml_type_name(type), (unsigned long long)ne0, (unsigned long long)ne1);
    return t;
}

/* mean and std of a whole tensor, dequantized */
static void stats(const gguf_tensor_t *t, double *mean, double *std)
{
    uint64_t n = t->ne[0] * t->ne[1];
    float *y = xmalloc(n * sizeof(float));
    assert_int_equal(quant_dequantize(t->type, t->data, y, (int64_t)n), 0);
    double s = 0, s2 = 0;
    for (uint64_t i = 0; i < n; i++) {
        s += y[i];
        s2 += (double)y[i] * y[i];
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    free(y);
}

static void check_model(const char *path, const char *arch, uint32_t type, int64_t dim,
                        int64_t layers, int64_t heads, int64_t kv_heads, int64_t ffn,
                        int64_t vocab)
{
    gguf_t *g = NULL;
    char err[256], key[128];
    if (gguf_open(path, &g, err, sizeof err) != 0)
        fail_msg("%s", err);
    gguf_str_t s;
    assert_int_equal(gguf_get_str(g, "general.architecture", &s), 0);
    assert_true(gguf_str_eq(s, arch));
#define K(x) (snprintf(key, sizeof key, "%s.%s", arch, x), key)
    assert_int_equal(get_int(g, K("embedding_length")), dim);
    assert_int_equal(get_int(g, K("block_count")), layers);
    assert_int_equal(get_int(g, K("attention.head_count")), heads);
    assert_int_equal(get_int(g, K("attention.head_count_kv")), kv_heads);
    assert_int_equal(get_int(g, K("feed_forward_length")), ffn);
    assert_int_equal(get_int(g, K("rope.dimension_count")), dim / heads);
    double d;
    assert_int_equal(gguf_get_float(g, K("attention.layer_norm_rms_epsilon"), &d), 0);
    assert_int_equal(gguf_get_float(g, K("rope.freq_base"), &d), 0);
#undef K
    const gguf_kv_t *tok;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok), 0);
    assert_int_equal((int64_t)tok->arr_n, vocab);
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &s), 0);

    int64_t kv_dim = dim / heads * kv_heads;
    const gguf_tensor_t *t = need(g, "token_embd.weight", type, (uint64_t)dim, (uint64_t)vocab);
    double mean, sd;
    stats(t, &mean, &sd);
    assert_true(fabs(sd - 1.0) < 0.1);
    need(g, "output_norm.weight", GGML_TYPE_F32, (uint64_t)dim, 1);
    t = need(g, "output.weight", type, (uint64_t)dim, (uint64_t)vocab);
    for (int64_t l = 0; l < layers; l++) {
        char n[96];
#define N(x) (snprintf(n, sizeof n, "blk.%lld.%s", (long long)l, x), n)
        t = need(g, N("attn_norm.weight"), GGML_TYPE_F32, (uint64_t)dim, 1);
        stats(t, &mean, &sd);
        assert_true(fabs(mean - 1.0) < 0.05 && sd > 0.05 && sd < 0.15);
        need(g, N("ffn_norm.weight"), GGML_TYPE_F32, (uint64_t)dim, 1);
        t = need(g, N("attn_q.weight"), type, (uint64_t)dim, (uint64_t)dim);
        stats(t, &mean, &sd);
        /* N(0, 1/in): std within 10% (plus quantization noise) */
        assert_true(fabs(sd * sqrt((double)dim) - 1.0) < 0.1);
        need(g, N("attn_k.weight"), type, (uint64_t)dim, (uint64_t)kv_dim);
        need(g, N("attn_v.weight"), type, (uint64_t)dim, (uint64_t)kv_dim);
        need(g, N("attn_output.weight"), type, (uint64_t)dim, (uint64_t)dim);
        need(g, N("ffn_gate.weight"), type, (uint64_t)dim, (uint64_t)ffn);
        need(g, N("ffn_up.weight"), type, (uint64_t)dim, (uint64_t)ffn);
        t = need(g, N("ffn_down.weight"), type, (uint64_t)ffn, (uint64_t)dim);
        stats(t, &mean, &sd);
        assert_true(fabs(sd * sqrt((double)ffn) - 1.0) < 0.1);
        bool q2 = strcmp(arch, "qwen2") == 0;
        assert_true((gguf_find_tensor(g, N("attn_q.bias")) != NULL) == q2);
        if (q2) {
            need(g, N("attn_q.bias"), GGML_TYPE_F32, (uint64_t)dim, 1);
            need(g, N("attn_k.bias"), GGML_TYPE_F32, (uint64_t)kv_dim, 1);
            need(g, N("attn_v.bias"), GGML_TYPE_F32, (uint64_t)kv_dim, 1);
        }
#undef N
    }
    assert_int_equal(g->n_tensors, 3 + layers * (strcmp(arch, "qwen2") == 0 ? 12 : 9));
    gguf_close(&g);
}

static void test_every_type(void **s)
{
    (void)s;
    const char *types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"};
    const uint32_t ids[] = {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16, GGML_TYPE_Q8_0,
                            GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    for (int i = 0; i < 8; i++) {
        char args[512], path[1200];
        snprintf(args, sizeof args,
                 "--tokenizer-from " TINY_TOK " --dim 256 --layers 2 --heads 4 --kv-heads 2 "
                 "--ffn 512 --vocab 300 --ctx 128 --type %s --seed 3", types[i]);
        assert_int_equal(run(args, path, sizeof path, "m.gguf"), 0);
        check_model(path, "llama", ids[i], 256, 2, 4, 2, 512, 300);
    }
}

/* --type Q4_K_M: Q4_K everywhere except output.weight and, in llama.cpp's
 * "use more bits" layers, attn_v and ffn_down (Q6_K). With 16 layers those
 * are i < 16/8, i >= 7*16/8, or (i - 2) % 3 == 2: layers 0 1 4 7 10 13 14 15,
 * written out here from the rule rather than computed by it. */
static void test_q4_k_m(void **s)
{
    (void)s;
    char path[1200];
    assert_int_equal(run("--tokenizer-from " TINY_TOK " --dim 256 --layers 16 --heads 4 "
                         "--kv-heads 2 --ffn 512 --vocab 300 --ctx 128 --type Q4_K_M --seed 5",
                         path, sizeof path, "km.gguf"), 0);
    static const int more[16] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
    gguf_t *g = NULL;
    char err[256];
    if (gguf_open(path, &g, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(get_int(g, "general.file_type"), 15); /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
    need(g, "token_embd.weight", GGML_TYPE_Q4_K, 256, 300);
    need(g, "output.weight", GGML_TYPE_Q6_K, 256, 300);
    for (int l = 0; l < 16; l++) {
        char n[96];
        uint32_t hi = more[l] ? GGML_TYPE_Q6_K : GGML_TYPE_Q4_K;
#define N(x) (snprintf(n, sizeof n, "blk.%d.%s", l, x), n)
        need(g, N("attn_q.weight"), GGML_TYPE_Q4_K, 256, 256);
        need(g, N("attn_k.weight"), GGML_TYPE_Q4_K, 256, 128);
        need(g, N("attn_v.weight"), hi, 256, 128);
        need(g, N("attn_output.weight"), GGML_TYPE_Q4_K, 256, 256);
        need(g, N("ffn_gate.weight"), GGML_TYPE_Q4_K, 256, 512);
        need(g, N("ffn_up.weight"), GGML_TYPE_Q4_K, 256, 512);
        const gguf_tensor_t *t = need(g, N("ffn_down.weight"), hi, 512, 256);
        double mean, sd;
        stats(t, &mean, &sd);
        assert_true(fabs(sd * sqrt(512.0) - 1.0) < 0.1);
#undef N
    }
    gguf_close(&g);
}

static void test_qwen2(void **s)
{
    (void)s;
    char path[1200];
    assert_int_equal(run("--tokenizer-from " TINY_TOK " --arch qwen2 --dim 64 --layers 3 "
                         "--heads 4 --kv-heads 1 --ffn 96 --type Q8_0",
                         path, sizeof path, "q.gguf"), 0);
    check_model(path, "qwen2", GGML_TYPE_Q8_0, 64, 3, 4, 1, 96, 8);
}

/* Every architecture family: the file loads (model_load validates every
 * family tensor and key), the loader sees the family's features, and one
 * forward step gives finite logits. */
static void test_families(void **s)
{
    (void)s;
    static const char *const archs[] = {"llama", "qwen3", "qwen2moe", "qwen3moe", "gemma2", "gemma3", "phi3"};
    for (size_t i = 0; i < sizeof archs / sizeof *archs; i++) {
        char path[1200], args[512], out[64], err[256], desc[512];
        snprintf(args, sizeof args, "--tokenizer-from " TINY_TOK " --arch %s --dim 64 --layers 2 --heads 4 "
                 "--kv-heads 2 --ffn 96 --expert-ffn 32 --experts 4 --window 8 --type Q8_0", archs[i]);
        snprintf(out, sizeof out, "fam-%s.gguf", archs[i]);
        assert_int_equal(run(args, path, sizeof path, out), 0);
        model_t *m = NULL;
        int rc = model_load(path, &m, err, sizeof err);
        if (rc != 0)
            print_error("%s: %s\n", archs[i], err);
        assert_int_equal(rc, 0);
        model_describe(m, desc, sizeof desc);
        print_message("  %s\n", desc);
        const model_config_t *c = &m->cfg;
        assert_string_equal(model_arch_name(c->arch), archs[i]);
        assert_int_equal(c->n_expert, strstr(archs[i], "moe") ? 4 : 0);
        assert_int_equal(c->swa_window, strcmp(archs[i], "qwen3") == 0 || strstr(archs[i], "moe") ||
                                                strcmp(archs[i], "phi3") == 0 ? 0 : 8);
        assert_int_equal(c->qk_norm, strcmp(archs[i], "qwen3") == 0 || strcmp(archs[i], "qwen3moe") == 0 ||
                                         strcmp(archs[i], "gemma3") == 0);
        assert_int_equal(c->post_norms, strncmp(archs[i], "gemma", 5) == 0);
        assert_true(m->layers[0].shexp_gate_inp ? strcmp(archs[i], "qwen2moe") == 0 : strcmp(archs[i], "qwen2moe") != 0);
        /* one step of 3 rows */
        kv_store_t kv = { .type = KV_TYPE_F32, .n_layer = c->n_layer, .n_blocks = 1, .block_size = 32,
                          .kv_dim = c->kv_dim };
        kv.k = xcalloc((size_t)c->n_layer * 32 * c->kv_dim, sizeof(float));
        kv.v = xcalloc((size_t)c->n_layer * 32 * c->kv_dim, sizeof(float));
        forward_t *f = forward_new(m, 3, 1);
        const int32_t tok[3] = {1, 5, 7}, pos[3] = {0, 1, 2}, seq[3] = {0, 0, 0}, bt0[1] = {0};
        const uint8_t want[3] = {1, 1, 1};
        const int32_t *bts[1] = {bt0};
        fwd_batch_t b = { .n_rows = 3, .token = tok, .pos = pos, .seq = seq, .want_logits = want, .n_seq = 1,
                          .block_tables = bts };
        float *logits = xmalloc((size_t)3 * c->vocab * sizeof(float));
        assert_int_equal(forward_run(f, &b, &kv, logits), 0);
        for (int64_t j = 0; j < 3 * (int64_t)c->vocab; j++)
            assert_true(isfinite(logits[j]));
        free(logits);
        forward_free(&f);
        free(kv.k);
        free(kv.v);
        model_free(&m);
    }
}

/* Same seed: identical bytes (also across thread counts); other seed: differs. */
static void test_deterministic(void **s)
{
    (void)s;
    char a[1200], b[1200], c[1200];
    const char *args = "--tokenizer-from " TINY_TOK " --dim 64 --layers 1 --heads 2 --ffn 64 "
                       "--type Q4_0 --seed 11";
    assert_int_equal(run(args, a, sizeof a, "a.gguf"), 0);
    setenv("OMP_NUM_THREADS", "1", 1);
    assert_int_equal(run(args, b, sizeof b, "b.gguf"), 0);
    unsetenv("OMP_NUM_THREADS");
    assert_int_equal(run("--tokenizer-from " TINY_TOK " --dim 64 --layers 1 --heads 2 --ffn 64 "
                         "--type Q4_0 --seed 12", c, sizeof c, "c.gguf"), 0);
    size_t la, lb, lc;
    uint8_t *x = support_read_file(a, &la), *y = support_read_file(b, &lb),
            *z = support_read_file(c, &lc);
    assert_true(x && y && z);
    assert_int_equal(la, lb);
    assert_memory_equal(x, y, la);
    assert_int_equal(la, lc);
    assert_memory_not_equal(x, z, la);
    free(x);
    free(y);
    free(z);
}

/* Padding a real 512-token vocabulary to 1000. */
static void test_vocab_padding(void **s)
{
    (void)s;
    const char *src = support_shared_model("stories260K.gguf");
    if (!src)
        skip();
    char args[2048], path[1200], err[256];
    snprintf(args, sizeof args, "--tokenizer-from %s --dim 64 --layers 1 --heads 8 --kv-heads 4 "
                                "--ffn 64 --vocab 1000", src);
    assert_int_equal(run(args, path, sizeof path, "p.gguf"), 0);
    gguf_t *g = NULL, *orig = NULL;
    assert_int_equal(gguf_open(path, &g, err, sizeof err), 0);
    assert_int_equal(gguf_open(src, &orig, err, sizeof err), 0);
    /* every tokenizer.* key of the source is present */
    for (uint64_t i = 0; i < orig->n_kv; i++) {
        const gguf_kv_t *kv = &orig->kv[i];
        char k[256];
        snprintf(k, sizeof k, "%.*s", (int)kv->key.len, kv->key.ptr);
        if (strncmp(k, "tokenizer.", 10) != 0)
            continue;
        const gguf_kv_t *c = gguf_find_kv(g, k);
        assert_non_null(c);
        assert_int_equal(c->type, kv->type);
    }
    assert_int_equal(get_int(g, "tokenizer.ggml.bos_token_id"), 1);
    const gguf_kv_t *tok, *otok, *sc, *tt;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok), 0);
    assert_int_equal(gguf_get_arr(orig, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &otok), 0);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &sc), 0);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &tt), 0);
    assert_int_equal(tok->arr_n, 1000);
    assert_int_equal(sc->arr_n, 1000);
    assert_int_equal(tt->arr_n, 1000);
    for (uint64_t i = 0; i < 1000; i++) {
        if (i < 512) {
            assert_int_equal(tok->arr_str[i].len, otok->arr_str[i].len);
            assert_memory_equal(tok->arr_str[i].ptr, otok->arr_str[i].ptr, tok->arr_str[i].len);
            continue;
        }
        assert_true(tok->arr_str[i].len > 4);
        assert_memory_equal(tok->arr_str[i].ptr, "\xe2\x96\x81w", 4);
        for (uint64_t j = 0; j < 512; j++) /* never a copy of a real piece */
            assert_false(tok->arr_str[i].len == otok->arr_str[j].len &&
                         memcmp(tok->arr_str[i].ptr, otok->arr_str[j].ptr, tok->arr_str[i].len) == 0);
        double f;
        int64_t t;
        assert_int_equal(gguf_arr_get_float(sc, i, &f), 0);
        assert_true(f <= -1e5);
        assert_int_equal(gguf_arr_get_int(tt, i, &t), 0);
        assert_int_equal(t, 1);
    }
    need(g, "token_embd.weight", GGML_TYPE_F32, 64, 1000);
    need(g, "output.weight", GGML_TYPE_F32, 64, 1000);
    gguf_close(&g);
    gguf_close(&orig);
}

/* Without --tokenizer-from the model gets the builtin SentencePiece-style
 * vocabulary: it must load as a tokenizer, encode any bytes (byte fallback)
 * and decode back to exactly the input. */
static void test_builtin_tokenizer(void **s)
{
    (void)s;
    char path[1200];
    assert_int_equal(run("--dim 64 --heads 4 --layers 1 --ffn 64", path, sizeof path, "builtin.gguf"), 0);
    gguf_t *g = NULL;
    char err[256];
    assert_int_equal(gguf_open(path, &g, err, sizeof err), 0);
    tokenizer_t *t = tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fail_msg("builtin tokenizer refused: %s", err);
    assert_int_equal(tokenizer_bos(t), 1);
    assert_int_equal(tokenizer_eos(t), 2);
    const char *texts[] = {"Once upon a time the little tree was happy", "x=42; {ok}!",
                           "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82", "  two  spaces\n"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        int32_t ids[512];
        int n = tokenizer_encode(t, texts[i], strlen(texts[i]), true, false, ids, 512);
        assert_true(n > 1 && n <= 512);
        assert_int_equal(ids[0], 1);
        char out[1024];
        size_t m = tokenizer_decode(t, ids + 1, n - 1, false, out, sizeof out);
        assert_true(m < sizeof out);
        out[m] = 0;
        assert_string_equal(out, texts[i]);
    }
    /* whole words of the builtin list are single tokens */
    int32_t ids[16];
    assert_int_equal(tokenizer_encode(t, "the", 3, false, false, ids, 16), 1);
    tokenizer_free(&t);
    gguf_close(&g);
    unlink(path);
}

/* The test models' stand-in options: the builtin tokenizer cut to 512
 * pieces by --vocab; --mute-special zeroes output.weight's rows of EOS, the
 * unknown and the byte tokens (BOS keeps its row); --logit-scale scales the
 * other rows' spread (std S/sqrt(dim), checked on the sample variance). */
static void test_standin_options(void **s)
{
    (void)s;
    char path[1200], err[256];
    assert_int_equal(run("--dim 64 --layers 1 --heads 4 --ffn 64 --vocab 512 --mute-special --logit-scale 8",
                         path, sizeof path, "standin.gguf"), 0);
    gguf_t *g = NULL;
    assert_int_equal(gguf_open(path, &g, err, sizeof err), 0);
    const gguf_kv_t *tok, *tt;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok), 0);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &tt), 0);
    assert_int_equal(tok->arr_n, 512);
    const gguf_tensor_t *out = need(g, "output.weight", GGML_TYPE_F32, 64, 512);
    const float *w = (const float *)out->data;
    double sum2 = 0;
    int64_t n_free = 0;
    for (int64_t r = 0; r < 512; r++) {
        int64_t ty = 0;
        assert_int_equal(gguf_arr_get_int(tt, (uint64_t)r, &ty), 0);
        bool muted = r == 2 || ty == 2 || ty == 6; /* EOS, UNKNOWN, BYTE */
        int zero = 1;
        for (int c = 0; c < 64; c++)
            zero &= w[r * 64 + c] == 0.0f;
        if (zero != (int)muted)
            fail_msg("row %lld (type %lld): %s", (long long)r, (long long)ty, zero ? "zero" : "not zero");
        if (!muted) {
            for (int c = 0; c < 64; c++)
                sum2 += (double)w[r * 64 + c] * w[r * 64 + c];
            n_free += 64;
        }
    }
    double var = sum2 / (double)n_free, want = 64.0 / 64.0; /* (8 / sqrt(64))^2 */
    print_message("  output.weight variance %.4f (want %.4f)\n", var, want);
    assert_true(var > 0.9 * want && var < 1.1 * want);
    gguf_close(&g);
    unlink(path);
}

static void test_argument_errors(void **s)
{
    (void)s;
    const struct { const char *args, *msg; } bad[] = {
        {"--dim 64 --heads 4 --vocab 100", "needs at least 450 pieces"}, /* builtin: bytes + ASCII */
        {"--dim 64 --heads 4 --arch gemma2 --mute-special", "need an output.weight"},
        {"--tokenizer-from " TINY_TOK " --type Q3_K", "unknown --type"},
        {"--tokenizer-from " TINY_TOK " --dim 100 --heads 12", "even head size"},
        {"--tokenizer-from " TINY_TOK " --dim 64 --heads 4 --kv-heads 3", "multiple of --kv-heads"},
        {"--tokenizer-from " TINY_TOK " --dim 96 --heads 4 --type Q4_K", "multiples of 256"},
        {"--tokenizer-from " TINY_TOK " --dim 64 --heads 4 --vocab 4", "smaller than"},
        {"--tokenizer-from /nonexistent.gguf --dim 64 --heads 4", "/nonexistent.gguf"},
        {"--tokenizer-from " TINY_TOK " --arch gpt2", "--arch must be"},
        {"--tokenizer-from " TINY_TOK " --layers x", "--layers must be an integer"},
        {"--tokenizer-from " TINY_TOK " --bogus 1", "unknown option"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[1200];
        int rc = run(bad[i].args, path, sizeof path, "bad.gguf");
        char *log = read_log();
        if (rc == 0 || !log || !strstr(log, bad[i].msg))
            fail_msg("'%s': rc %d, output \"%s\" lacks \"%s\"", bad[i].args, rc,
                     log ? log : "", bad[i].msg);
        assert_int_equal(access(path, F_OK), -1); /* nothing written */
        free(log);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_type),
        cmocka_unit_test(test_q4_k_m),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_families),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_vocab_padding),
        cmocka_unit_test(test_builtin_tokenizer),
        cmocka_unit_test(test_standin_options),
        cmocka_unit_test(test_argument_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
