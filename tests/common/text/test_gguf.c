/* Unit tests for worker/gguf (reader) and worker/gguf_write (writer):
 * the shared models parse with their known metadata, writer output parses
 * back to the same values, and a table of malformed files (built byte by
 * byte here, independently of the writer) is refused with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "tests/support/support.h"
#include "common/text/gguf.h"
#include "common/text/gguf_write.h"
#include "worker/kernels/quant.h"

/* ---- shared models ------------------------------------------------------- */

static void test_stories260k_metadata(void **s)
{
    (void)s;
    const char *path = support_shared_model("stories260K.gguf");
    if (!path)
        skip();
    gguf_t *g = NULL;
    char err[256];
    assert_int_equal(gguf_open(path, &g, err, sizeof err), 0);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->alignment, 32);
    gguf_str_t str;
    assert_int_equal(gguf_get_str(g, "general.architecture", &str), 0);
    assert_true(gguf_str_eq(str, "llama"));
    assert_int_equal(gguf_get_str(g, "tokenizer.ggml.model", &str), 0);
    assert_true(gguf_str_eq(str, "llama"));
    const struct { const char *key; int64_t want; } ints[] = {
        {"llama.block_count", 5},           {"llama.embedding_length", 64},
        {"llama.attention.head_count", 8},  {"llama.attention.head_count_kv", 4},
        {"llama.feed_forward_length", 172}, {"llama.context_length", 512},
        {"tokenizer.ggml.bos_token_id", 1}, {"tokenizer.ggml.eos_token_id", 2},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        int64_t v = -1;
        assert_int_equal(gguf_get_int(g, ints[i].key, &v), 0);
        assert_int_equal(v, ints[i].want);
    }
    double eps;
    assert_int_equal(gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps), 0);
    assert_true(eps > 0 && eps < 1e-3);
    /* wrong-type getters refuse */
    int64_t iv;
    assert_int_equal(gguf_get_int(g, "general.architecture", &iv), -1);
    assert_int_equal(gguf_get_float(g, "llama.block_count", &eps), -1);
    assert_int_equal(gguf_get_int(g, "no.such.key", &iv), -1);

    const gguf_kv_t *tok, *scores, *types;
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tok), 0);
    assert_int_equal(tok->arr_n, 512);
    assert_true(gguf_str_eq(tok->arr_str[1], "<s>"));
    assert_true(gguf_str_eq(tok->arr_str[2], "</s>"));
    assert_true(gguf_str_eq(tok->arr_str[3], "<0x00>"));
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, &tok), -1);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, &scores), 0);
    assert_int_equal(scores->arr_n, 512);
    double sc;
    assert_int_equal(gguf_arr_get_float(scores, 511, &sc), 0);
    assert_int_equal(gguf_arr_get_float(scores, 512, &sc), -1);
    assert_int_equal(gguf_get_arr(g, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, &types), 0);
    int64_t tt;
    assert_int_equal(gguf_arr_get_int(types, 3, &tt), 0);
    assert_int_equal(tt, 6); /* <0x00> is a BYTE token */
    assert_int_equal(gguf_arr_get_int(types, 300, &tt), 0);
    assert_int_equal(tt, 1); /* NORMAL */

    assert_int_equal(g->n_tensors, 48);
    const gguf_tensor_t *t = gguf_find_tensor(g, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, GGML_TYPE_F32);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 512);
    assert_int_equal(t->nbytes, 64 * 512 * 4);
    t = gguf_find_tensor(g, "blk.4.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->ne[0], 172);
    assert_int_equal(t->ne[1], 64);
    assert_null(gguf_find_tensor(g, "blk.5.ffn_down.weight"));
    gguf_close(&g);
    assert_null(g);
}

static void test_zoo_files_parse(void **s)
{
    (void)s;
    static const char *const names[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M",
                                        "Q5_K_M", "Q6_K"};
    int found = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "zoo/zoo-%s.gguf", names[i]);
        const char *path = support_shared_model(rel);
        if (!path)
            continue;
        found++;
        gguf_t *g = NULL;
        char err[256];
        assert_int_equal(gguf_open(path, &g, err, sizeof err), 0);
        int64_t v;
        assert_int_equal(gguf_get_int(g, "llama.block_count", &v), 0);
        assert_int_equal(v, 2);
        assert_int_equal(gguf_get_int(g, "llama.embedding_length", &v), 0);
        assert_int_equal(v, 256);
        assert_int_equal(g->n_tensors, 21);
        for (uint64_t k = 0; k < g->n_tensors; k++)
            assert_true(ggml_type_supported(g->tensors[k].type));
        gguf_close(&g);
    }
    if (!found)
        skip();
}

static void test_open_errors(void **s)
{
    (void)s;
    gguf_t *g = (gguf_t *)1;
    char err[256];
    assert_int_equal(gguf_open("/nonexistent/x.gguf", &g, err, sizeof err), -1);
    assert_null(g);
    assert_non_null(strstr(err, "/nonexistent/x.gguf"));
    assert_int_equal(gguf_open("/dev/null", &g, err, sizeof err), -1);
    assert_int_equal(gguf_open("Makefile", &g, err, sizeof err), -1);
    assert_non_null(strstr(err, "bad magic"));
}

/* ---- writer round trip --------------------------------------------------- */

static void test_writer_roundtrip(void **s)
{
    (void)s;
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_u8(w, "t.u8", 200);
    gguf_writer_set_i8(w, "t.i8", -100);
    gguf_writer_set_u16(w, "t.u16", 60000);
    gguf_writer_set_i16(w, "t.i16", -30000);
    gguf_writer_set_u32(w, "t.u32", 4000000000u);
    gguf_writer_set_i32(w, "t.i32", -2000000000);
    gguf_writer_set_u64(w, "t.u64", 0xffffffffffffffffull);
    gguf_writer_set_i64(w, "t.i64", -5000000000ll);
    gguf_writer_set_f32(w, "t.f32", 1.5f);
    gguf_writer_set_f64(w, "t.f64", 1e-300);
    gguf_writer_set_bool(w, "t.bool", true);
    gguf_writer_set_str(w, "t.str", "héllo");
    gguf_writer_set_str(w, "t.replaced", "first");
    gguf_writer_set_u32(w, "t.replaced", 7); /* replaces, keeps position */
    const char *strs[] = {"a", "", "▁w12", "<0x0A>"};
    gguf_writer_set_arr_str(w, "t.arr_str", strs, 4);
    const float fa[3] = {0.5f, -2.0f, 1e30f};
    assert_int_equal(gguf_writer_set_arr(w, "t.arr_f32", GGUF_TYPE_FLOAT32, fa, 3), 0);
    const int32_t ia[4] = {1, -2, 3, 2147483647};
    assert_int_equal(gguf_writer_set_arr(w, "t.arr_i32", GGUF_TYPE_INT32, ia, 4), 0);
    assert_int_equal(gguf_writer_set_arr(w, "t.arr_empty", GGUF_TYPE_UINT8, NULL, 0), 0);
    assert_int_equal(gguf_writer_set_arr(w, "t.bad", GGUF_TYPE_STRING, NULL, 0), -1);
    assert_int_equal(gguf_writer_set_arr(w, "t.bad", GGUF_TYPE_ARRAY, NULL, 0), -1);
    assert_false(gguf_writer_has_key(w, "t.bad"));

    /* tensors: F32 1-D, Q8_0 2-D, Q4_K 3-D */
    float v[7] = {1, 2, 3, 4, 5, 6, 7};
    uint64_t ne1[1] = {7};
    assert_int_equal(gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 1, ne1, v, sizeof v), 0);
    float x[64 * 3];
    for (int i = 0; i < 64 * 3; i++)
        x[i] = (float)(i % 17) - 8.0f;
    uint64_t ne2[2] = {64, 3};
    uint8_t q8[34 * 6];
    assert_int_equal(quant_quantize(GGML_TYPE_Q8_0, x, q8, 64 * 3), 0);
    assert_int_equal(gguf_writer_add_tensor(w, "b.q8", GGML_TYPE_Q8_0, 2, ne2, q8, sizeof q8), 0);
    uint64_t ne3[3] = {256, 1, 2};
    uint8_t q4k[144 * 2];
    memset(q4k, 0x5a, sizeof q4k);
    assert_int_equal(gguf_writer_add_tensor(w, "c", GGML_TYPE_Q4_K, 3, ne3, q4k, sizeof q4k), 0);
    /* refused tensors */
    assert_int_equal(gguf_writer_add_tensor(w, "a", GGML_TYPE_F32, 1, ne1, v, sizeof v), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "d", GGML_TYPE_F32, 1, ne1, v, 4), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "d", GGML_TYPE_Q8_0, 1, ne1, v, 34), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "d", 99, 1, ne1, v, sizeof v), -1);
    assert_int_equal(gguf_writer_add_tensor(w, "d", GGML_TYPE_F32, 5, ne1, v, sizeof v), -1);

    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256];
    assert_int_equal(gguf_writer_write_mem(w, &buf, &len, err, sizeof err), 0);
    gguf_writer_free(&w);
    assert_null(w);

    gguf_t *g = NULL;
    assert_int_equal(gguf_parse(buf, len, &g, err, sizeof err), 0);
    assert_int_equal(g->version, 3);
    assert_int_equal(g->n_kv, 17);
    assert_true(gguf_str_eq(g->kv[12].key, "t.replaced"));
    int64_t iv;
    const struct { const char *k; int64_t v; } ints[] = {
        {"t.u8", 200}, {"t.i8", -100}, {"t.u16", 60000}, {"t.i16", -30000},
        {"t.u32", 4000000000ll}, {"t.i32", -2000000000}, {"t.i64", -5000000000ll},
        {"t.replaced", 7},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        assert_int_equal(gguf_get_int(g, ints[i].k, &iv), 0);
        assert_int_equal(iv, ints[i].v);
    }
    assert_int_equal(gguf_get_int(g, "t.u64", &iv), -1); /* does not fit int64 */
    assert_int_equal(gguf_find_kv(g, "t.u64")->v.u, 0xffffffffffffffffull);
    double f;
    assert_int_equal(gguf_get_float(g, "t.f32", &f), 0);
    assert_true(f == 1.5);
    assert_int_equal(gguf_get_float(g, "t.f64", &f), 0);
    assert_true(f == 1e-300);
    bool b = false;
    assert_int_equal(gguf_get_bool(g, "t.bool", &b), 0);
    assert_true(b);
    gguf_str_t str;
    assert_int_equal(gguf_get_str(g, "t.str", &str), 0);
    assert_true(gguf_str_eq(str, "héllo"));
    const gguf_kv_t *kv;
    assert_int_equal(gguf_get_arr(g, "t.arr_str", GGUF_TYPE_STRING, &kv), 0);
    assert_int_equal(kv->arr_n, 4);
    for (int i = 0; i < 4; i++)
        assert_true(gguf_str_eq(kv->arr_str[i], strs[i]));
    assert_int_equal(gguf_get_arr(g, "t.arr_f32", GGUF_TYPE_FLOAT32, &kv), 0);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(gguf_arr_get_float(kv, (uint64_t)i, &f), 0);
        assert_true(f == fa[i]);
    }
    assert_int_equal(gguf_arr_get_int(kv, 0, &iv), -1);
    assert_int_equal(gguf_get_arr(g, "t.arr_i32", GGUF_TYPE_INT32, &kv), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(gguf_arr_get_int(kv, (uint64_t)i, &iv), 0);
        assert_int_equal(iv, ia[i]);
    }
    assert_int_equal(gguf_get_arr(g, "t.arr_empty", GGUF_TYPE_UINT8, &kv), 0);
    assert_int_equal(kv->arr_n, 0);

    assert_int_equal(g->n_tensors, 3);
    const gguf_tensor_t *t = gguf_find_tensor(g, "a");
    assert_int_equal(t->n_dims, 1);
    assert_memory_equal(t->data, v, sizeof v);
    t = gguf_find_tensor(g, "b.q8");
    assert_int_equal(t->type, GGML_TYPE_Q8_0);
    assert_int_equal(t->ne[1], 3);
    assert_memory_equal(t->data, q8, sizeof q8);
    float y[64 * 3];
    assert_int_equal(quant_dequantize(t->type, t->data, y, 64 * 3), 0);
    for (int i = 0; i < 64 * 3; i++) /* Q8_0 step 8/127: error <= half a step (+f16 d) */
        assert_true(fabsf(y[i] - x[i]) <= 8.0f / 127.0f * 0.57f);
    t = gguf_find_tensor(g, "c");
    assert_int_equal(t->n_dims, 3);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal((t->data - buf) % 32, 0);
    assert_memory_equal(t->data, q4k, sizeof q4k);
    gguf_close(&g);
    free(buf);
}

/* Copying all metadata and tensors of stories260K reproduces its content. */
static void test_writer_copies_model(void **s)
{
    (void)s;
    const char *path = support_shared_model("stories260K.gguf");
    if (!path)
        skip();
    gguf_t *src = NULL, *g = NULL;
    char err[256];
    assert_int_equal(gguf_open(path, &src, err, sizeof err), 0);
    gguf_writer_t *w = gguf_writer_new();
    assert_int_equal(gguf_writer_copy_prefix(w, src, ""), (int)src->n_kv);
    for (uint64_t i = 0; i < src->n_tensors; i++) {
        const gguf_tensor_t *t = &src->tensors[i];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
        assert_int_equal(gguf_writer_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data,
                                                t->nbytes), 0);
    }
    char out[] = "/tmp/pagoda-test-gguf-XXXXXX";
    int fd = mkstemp(out);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(gguf_writer_write_file(w, out, err, sizeof err), 0);
    gguf_writer_free(&w);
    assert_int_equal(gguf_open(out, &g, err, sizeof err), 0);
    /* The original's layout is the same (v3, 32-byte alignment, same order):
     * the copy must be byte-identical. */
    assert_int_equal(g->len, src->len);
    assert_memory_equal(g->buf, src->buf, src->len);
    gguf_close(&g);
    gguf_close(&src);
    unlink(out);
}

/* ---- malformed inputs ---------------------------------------------------- */

/* Tiny independent GGUF byte builder. */
typedef struct { uint8_t p[4096]; size_t n; } fb_t;
static void fb_put(fb_t *b, const void *s, size_t n) { memcpy(b->p + b->n, s, n); b->n += n; }
static void fb_u32(fb_t *b, uint32_t v) { fb_put(b, &v, 4); }
static void fb_u64(fb_t *b, uint64_t v) { fb_put(b, &v, 8); }
static void fb_str(fb_t *b, const char *s) { fb_u64(b, strlen(s)); fb_put(b, s, strlen(s)); }
static void fb_hdr(fb_t *b, uint32_t version, uint64_t n_t, uint64_t n_kv)
{
    b->n = 0;
    fb_put(b, "GGUF", 4);
    fb_u32(b, version);
    fb_u64(b, n_t);
    fb_u64(b, n_kv);
}
static void fb_kv_u32(fb_t *b, const char *k, uint32_t v)
{
    fb_str(b, k);
    fb_u32(b, GGUF_TYPE_UINT32);
    fb_u32(b, v);
}
static void fb_tinfo(fb_t *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t off)
{
    fb_str(b, name);
    fb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        fb_u64(b, ne[i]);
    fb_u32(b, type);
    fb_u64(b, off);
}
static void fb_data(fb_t *b, size_t n) /* pad to 32 then n bytes of data */
{
    while (b->n % 32)
        b->p[b->n++] = 0;
    for (size_t i = 0; i < n; i++)
        b->p[b->n++] = (uint8_t)i;
}

/* A valid file: 1 kv, one 4x2 F32 tensor. */
static void mk_valid(fb_t *b)
{
    fb_hdr(b, 3, 1, 1);
    fb_kv_u32(b, "k", 1);
    uint64_t ne[2] = {4, 2};
    fb_tinfo(b, "w", 2, ne, GGML_TYPE_F32, 0);
    fb_data(b, 32);
}
static void mk_v2(fb_t *b) { mk_valid(b); b->p[4] = 2; }
static void mk_bad_magic(fb_t *b) { mk_valid(b); b->p[0] = 'X'; }
static void mk_v1(fb_t *b) { mk_valid(b); b->p[4] = 1; }
static void mk_v99(fb_t *b) { mk_valid(b); b->p[4] = 99; }
static void mk_big_endian(fb_t *b) { mk_valid(b); b->p[4] = 0; b->p[7] = 3; }
static void mk_n_kv_huge(fb_t *b) { mk_valid(b); uint64_t v = 1ull << 60; memcpy(b->p + 16, &v, 8); }
static void mk_n_kv_max(fb_t *b) { mk_valid(b); memset(b->p + 16, 0xff, 8); }
static void mk_n_t_huge(fb_t *b) { mk_valid(b); uint64_t v = 1ull << 58; memcpy(b->p + 8, &v, 8); }
static void mk_n_t_short(fb_t *b) { mk_valid(b); b->p[8] = 2; }
static void mk_key_len(fb_t *b) { mk_valid(b); uint64_t v = 1000; memcpy(b->p + 24, &v, 8); }
static void mk_key_len_max(fb_t *b) { mk_valid(b); memset(b->p + 24, 0xff, 8); }
static void mk_str_len(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "s");
    fb_u32(b, GGUF_TYPE_STRING);
    fb_u64(b, 0xfffffffffffffff0ull);
    fb_put(b, "abc", 3);
}
static void mk_arr_huge(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "a");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, GGUF_TYPE_UINT64);
    fb_u64(b, 1ull << 61); /* x8 bytes wraps to 0 in 64 bits */
    fb_u64(b, 1);
}
static void mk_arr_str_huge(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "a");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, GGUF_TYPE_STRING);
    fb_u64(b, 1ull << 40);
    fb_str(b, "x");
}
static void mk_arr_str_short(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "a");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, GGUF_TYPE_STRING);
    fb_u64(b, 3);
    fb_str(b, "x");
    fb_str(b, "y");
    fb_u64(b, 5); /* third string claims 5 bytes, 2 left */
    fb_put(b, "zz", 2);
}
static void mk_nested(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "a");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u64(b, 1);
    fb_u32(b, GGUF_TYPE_UINT8);
    fb_u64(b, 1);
    fb_put(b, "x", 1);
}
static void mk_bad_vtype(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "a");
    fb_u32(b, 13);
    fb_u64(b, 0);
}
static void mk_bad_arr_etype(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "a");
    fb_u32(b, GGUF_TYPE_ARRAY);
    fb_u32(b, 77);
    fb_u64(b, 0);
}
static void mk_dup_key(fb_t *b)
{
    fb_hdr(b, 3, 0, 2);
    fb_kv_u32(b, "k", 1);
    fb_kv_u32(b, "k", 2);
}
static void mk_align_npot(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_kv_u32(b, "general.alignment", 24);
}
static void mk_align_zero(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_kv_u32(b, "general.alignment", 0);
}
static void mk_align_type(fb_t *b)
{
    fb_hdr(b, 3, 0, 1);
    fb_str(b, "general.alignment");
    fb_u32(b, GGUF_TYPE_STRING);
    fb_str(b, "32");
}
static void mk_tensor(fb_t *b, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off,
                      size_t data)
{
    fb_hdr(b, 3, 1, 0);
    fb_tinfo(b, "blk.0.attn_q.weight", n_dims, ne, type, off);
    fb_data(b, data);
}
static const uint64_t ne42[4] = {4, 2, 1, 1};
static void mk_bad_ttype(fb_t *b) { mk_tensor(b, 2, ne42, 99, 0, 32); }
static void mk_removed_ttype(fb_t *b) { mk_tensor(b, 2, ne42, 4, 0, 32); }
static void mk_ndims0(fb_t *b) { mk_tensor(b, 0, ne42, GGML_TYPE_F32, 0, 32); }
static void mk_ndims5(fb_t *b)
{
    uint64_t ne[5] = {1, 1, 1, 1, 1};
    mk_tensor(b, 5, ne, GGML_TYPE_F32, 0, 32);
}
static void mk_misaligned(fb_t *b) { mk_tensor(b, 2, ne42, GGML_TYPE_F32, 4, 64); }
static void mk_past_end(fb_t *b) { mk_tensor(b, 2, ne42, GGML_TYPE_F32, 32, 32); }
static void mk_short_data(fb_t *b) { mk_tensor(b, 2, ne42, GGML_TYPE_F32, 0, 31); }
static void mk_offset_huge(fb_t *b) { mk_tensor(b, 2, ne42, GGML_TYPE_F32, 0xffffffffffffffe0ull, 32); }
static void mk_ne_overflow(fb_t *b)
{
    uint64_t ne[3] = {1ull << 32, 1ull << 32, 4};
    mk_tensor(b, 3, ne, GGML_TYPE_F32, 0, 32);
}
static void mk_ne_huge(fb_t *b)
{
    uint64_t ne[1] = {0x8000000000000000ull};
    mk_tensor(b, 1, ne, GGML_TYPE_F32, 0, 32);
}
static void mk_bytes_overflow(fb_t *b)
{
    /* 2^62 elements fit int64, but 2^62 * 4 bytes does not fit size */
    uint64_t ne[2] = {1ull << 31, 1ull << 31};
    mk_tensor(b, 2, ne, GGML_TYPE_F32, 0, 32);
}
static void mk_ne_zero(fb_t *b)
{
    uint64_t ne[2] = {4, 0};
    mk_tensor(b, 2, ne, GGML_TYPE_F32, 0, 32);
}
static void mk_row_block(fb_t *b)
{
    uint64_t ne[1] = {33};
    mk_tensor(b, 1, ne, GGML_TYPE_Q8_0, 0, 64);
}
static void mk_dup_tensor(fb_t *b)
{
    fb_hdr(b, 3, 2, 0);
    fb_tinfo(b, "w", 2, ne42, GGML_TYPE_F32, 0);
    fb_tinfo(b, "w", 2, ne42, GGML_TYPE_F32, 32);
    fb_data(b, 64);
}
static void mk_tname_len(fb_t *b)
{
    fb_hdr(b, 3, 1, 0);
    fb_u64(b, 1ull << 63);
    fb_put(b, "w", 1);
    fb_data(b, 64);
}

static const struct {
    const char *what;
    void (*make)(fb_t *);
    const char *msg; /* substring of the error, NULL for a valid file */
} bad_files[] = {
    {"valid v3", mk_valid, NULL},
    {"valid v2", mk_v2, NULL},
    {"bad magic", mk_bad_magic, "bad magic"},
    {"version 1", mk_v1, "version 1"},
    {"version 99", mk_v99, "version 99"},
    {"big-endian", mk_big_endian, "big-endian"},
    {"n_kv huge", mk_n_kv_huge, "n_kv"},
    {"n_kv all ones", mk_n_kv_max, "n_kv"},
    {"n_tensors huge", mk_n_t_huge, "n_tensors"},
    {"n_tensors one too many", mk_n_t_short, "n_dims 0"},
    {"key length past end", mk_key_len, "string length"},
    {"key length 2^64-1", mk_key_len_max, "string length"},
    {"string value past end", mk_str_len, "string length"},
    {"array count huge", mk_arr_huge, "array count"},
    {"string array count huge", mk_arr_str_huge, "array count"},
    {"string array element past end", mk_arr_str_short, "string 2 of 3"},
    {"nested array", mk_nested, "nested"},
    {"unknown value type", mk_bad_vtype, "unknown value type 13"},
    {"unknown array element type", mk_bad_arr_etype, "element type 77"},
    {"duplicate key", mk_dup_key, "duplicate metadata key 'k'"},
    {"alignment not power of two", mk_align_npot, "alignment 24"},
    {"alignment zero", mk_align_zero, "alignment 0"},
    {"alignment wrong type", mk_align_type, "general.alignment must be"},
    {"tensor type 99", mk_bad_ttype, "unknown tensor type 99"},
    {"tensor type 4 (removed)", mk_removed_ttype, "unknown tensor type 4"},
    {"n_dims 0", mk_ndims0, "n_dims 0"},
    {"n_dims 5", mk_ndims5, "n_dims 5"},
    {"offset misaligned", mk_misaligned, "not a multiple of the alignment"},
    {"data past end", mk_past_end, "'blk.0.attn_q.weight': data range past end of file"},
    {"data one byte short", mk_short_data, "data range past end"},
    {"offset near 2^64", mk_offset_huge, "data range past end"},
    {"ne product overflow", mk_ne_overflow, "element count overflows"},
    {"ne >= 2^63", mk_ne_huge, "element count overflows"},
    {"byte size overflows", mk_bytes_overflow, "byte size overflows"},
    {"ne zero", mk_ne_zero, "dimension 1 is zero"},
    {"row not a block multiple", mk_row_block, "not a multiple of the Q8_0 block"},
    {"duplicate tensor", mk_dup_tensor, "duplicate tensor name 'w'"},
    {"tensor name length huge", mk_tname_len, "string length"},
};

/* Parses an exact-size heap copy so ASan sees any read past the end. */
static int parse_copy(const uint8_t *p, size_t n, char *err, size_t errlen)
{
    uint8_t *c = xmalloc(n ? n : 1);
    memcpy(c, p, n);
    gguf_t *g = NULL;
    int rc = gguf_parse(c, n, &g, err, errlen);
    if (rc == 0)
        assert_non_null(g);
    else
        assert_null(g);
    gguf_close(&g);
    free(c);
    return rc;
}

static void test_malformed_table(void **s)
{
    (void)s;
    fb_t b;
    for (size_t i = 0; i < sizeof bad_files / sizeof bad_files[0]; i++) {
        bad_files[i].make(&b);
        char err[256] = "";
        int rc = parse_copy(b.p, b.n, err, sizeof err);
        if (!bad_files[i].msg) {
            if (rc != 0)
                fail_msg("%s: refused: %s", bad_files[i].what, err);
            continue;
        }
        if (rc != -1)
            fail_msg("%s: accepted", bad_files[i].what);
        if (!strstr(err, bad_files[i].msg))
            fail_msg("%s: message \"%s\" lacks \"%s\"", bad_files[i].what, err, bad_files[i].msg);
        printf("  %-32s -> %s\n", bad_files[i].what, err);
        /* errlen 0 and a tiny buffer are fine too */
        assert_int_equal(parse_copy(b.p, b.n, NULL, 0), -1);
        char tiny[4];
        assert_int_equal(parse_copy(b.p, b.n, tiny, sizeof tiny), -1);
        assert_true(strlen(tiny) < sizeof tiny);
    }
}

/* Every strict prefix of a small valid writer-made file is refused (its
 * last tensor ends exactly at the end of the file). */
static void test_truncated_everywhere(void **s)
{
    (void)s;
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.block_count", 1);
    gguf_writer_set_f32(w, "eps", 1e-5f);
    const char *toks[] = {"<unk>", "<s>", "a"};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 3);
    float sc[3] = {0, 0, -1};
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, 3);
    float x[64] = {0};
    uint64_t ne[2] = {32, 2};
    uint8_t q[68];
    quant_quantize(GGML_TYPE_Q8_0, x, q, 64);
    gguf_writer_add_tensor(w, "q", GGML_TYPE_Q8_0, 2, ne, q, sizeof q);
    gguf_writer_add_tensor(w, "f", GGML_TYPE_F32, 2, ne, x, sizeof x);
    uint8_t *buf;
    size_t len;
    char err[256];
    assert_int_equal(gguf_writer_write_mem(w, &buf, &len, err, sizeof err), 0);
    gguf_writer_free(&w);
    assert_int_equal(parse_copy(buf, len, err, sizeof err), 0);
    for (size_t n = 0; n < len; n++) {
        err[0] = 0;
        if (parse_copy(buf, n, err, sizeof err) != -1)
            fail_msg("prefix of %zu of %zu bytes accepted", n, len);
        assert_true(err[0] != 0);
    }
    /* every single-byte corruption either parses or is refused, never crashes */
    for (size_t i = 0; i < len; i++) {
        uint8_t keep = buf[i];
        buf[i] ^= 0xff;
        parse_copy(buf, len, err, sizeof err);
        buf[i] = keep;
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k_metadata),
        cmocka_unit_test(test_zoo_files_parse),
        cmocka_unit_test(test_open_errors),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_writer_copies_model),
        cmocka_unit_test(test_malformed_table),
        cmocka_unit_test(test_truncated_everywhere),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
