/* Unit tests for worker/tokenizer.
 *
 * Three modes:
 *   - default (make test): small vocabularies built here with the GGUF writer,
 *     whose expected tokenizations are worked out by hand from the algorithm
 *     in tokenizer.h (score-ordered SPM merges, rank-ordered BPE merges,
 *     leftmost-longest special tokens); a table of malformed metadata that
 *     must be refused; and the real stories260K vocabulary (../shared):
 *     decode(encode(s)) == s for text and arbitrary bytes, token-count bound.
 *   - reference (PAGODA_TOKREF=expected.json, run by
 *     tests/integration/tokenizer_ref.sh): every case of the JSON produced by
 *     tests/js/tokenizer_ref.mjs (Hugging Face tokenizers on the same
 *     vocabularies) must give identical ids, plus round trips and timing.
 *   - speed (PAGODA_TOKBENCH=1 build/tests/common/text/test_tokenizer, from
 *     the repository root): prints stories260K's encode times (4 KB mixed,
 *     4 KB English, a 10 KB word); asserts nothing (a unit test never
 *     depends on the machine's speed).
 */
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

#include <jansson.h>
#include <pthread.h>

#include "common/utf8.h"
#include "common/clock.h"
#include "common/xalloc.h"
#include "tests/support/support.h"
#include "common/text/gguf.h"
#include "common/text/gguf_write.h"
#include "common/text/tokenizer.h"

/* ---- helpers ------------------------------------------------------------ */

/* Parses the writer's output, builds the tokenizer and releases the GGUF
 * image at once: the tokenizer must not keep pointers into it. */
static tokenizer_t *from_writer(gguf_writer_t *w, char *err, size_t errlen)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(gguf_writer_write_mem(w, &buf, &len, err, errlen), 0);
    gguf_t *g = NULL;
    assert_int_equal(gguf_parse(buf, len, &g, err, errlen), 0);
    tokenizer_t *t = tokenizer_from_gguf(g, err, errlen);
    gguf_close(&g);
    memset(buf, 0xAB, len);
    free(buf);
    return t;
}

static tokenizer_t *load_file(const char *path)
{
    gguf_t *g = NULL;
    char err[256];
    if (gguf_open(path, &g, err, sizeof err) != 0)
        fail_msg("%s", err);
    tokenizer_t *t = tokenizer_from_gguf(g, err, sizeof err);
    if (!t)
        fail_msg("%s: %s", path, err);
    gguf_close(&g);
    return t;
}

static int enc(const tokenizer_t *t, const char *s, size_t len, bool add_special, bool parse_special,
               int32_t *out, int max_out)
{
    int n = tokenizer_encode(t, s, len, add_special, parse_special, out, max_out);
    assert_true(n >= 0 && n <= max_out);
    assert_true((size_t)n <= 4 * len + 4);
    return n;
}

static int32_t id_of(const tokenizer_t *t, const char *text)
{
    int32_t id = tokenizer_find(t, text, strlen(text));
    if (id < 0)
        fail_msg("token '%s' not in the vocabulary", text);
    return id;
}

/* Encodes s and compares with the tokens whose texts are listed (NULL-ended). */
static void expect_texts(const tokenizer_t *t, const char *s, bool add_special, bool parse_special, ...)
{
    int32_t want[64];
    int nw = 0;
    va_list ap;
    va_start(ap, parse_special);
    for (const char *x; (x = va_arg(ap, const char *)) != NULL;)
        want[nw++] = id_of(t, x);
    va_end(ap);
    int32_t got[64];
    int ng = enc(t, s, strlen(s), add_special, parse_special, got, 64);
    if (ng != nw || memcmp(got, want, (size_t)nw * sizeof *got) != 0) {
        char msg[512];
        int k = snprintf(msg, sizeof msg, "'%s': got", s);
        for (int i = 0; i < ng && k < 400; i++)
            k += snprintf(msg + k, sizeof msg - (size_t)k, " %d", got[i]);
        k += snprintf(msg + k, sizeof msg - (size_t)k, " want");
        for (int i = 0; i < nw && k < 500; i++)
            k += snprintf(msg + k, sizeof msg - (size_t)k, " %d", want[i]);
        fail_msg("%s", msg);
    }
}

static char *decode_all(const tokenizer_t *t, const int32_t *ids, int n, bool special, size_t *len)
{
    size_t need = tokenizer_decode(t, ids, n, special, NULL, 0);
    char *out = xmalloc(need + 1);
    assert_int_equal(tokenizer_decode(t, ids, n, special, out, need), need);
    out[need] = 0;
    *len = need;
    return out;
}

/* encode (no specials) then decode must give the input back byte for byte */
static void check_roundtrip(const tokenizer_t *t, const char *s, size_t len)
{
    /* A literal U+2581 is SentencePiece's space marker: it decodes as ' '
     * (as in sentencepiece and llama.cpp), so it cannot round-trip. */
    if (tokenizer_model(t) == TOKENIZER_MODEL_SPM && memmem(s, len, "\xe2\x96\x81", 3))
        return;
    int cap = (int)(4 * len + 4);
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    int n = enc(t, s, len, true, false, ids, cap);
    size_t dl;
    char *d = decode_all(t, ids, n, false, &dl);
    if (dl != len || memcmp(d, s, len) != 0)
        fail_msg("round trip of %zu bytes gave %zu bytes: '%.60s' -> '%.60s'", len, dl, s, d);
    free(d);
    free(ids);
}

/* ---- synthetic SPM vocabulary ---------------------------------------------- */

/* <unk> <s> </s> <0x00>..<0xFF> then pieces with scores (higher merges first). */
static tokenizer_t *spm_vocab(bool add_space_prefix, int with_bytes)
{
    static const struct { const char *text; float score; } pieces[] = {
        {"\xe2\x96\x81", -1}, {"a", -1}, {"b", -1}, {"c", -1},
        {"ab", -2}, {"bc", -1}, {"\xe2\x96\x81" "a", -5}, {"abc", -3}, {"aa", -1}, {"<u>", 0},
        {"  ", -1000}, /* a whitespace run as llama.cpp writes Gemma's: USER_DEFINED, spaces */
    };
    size_t np = sizeof pieces / sizeof pieces[0];
    size_t n = 3 + (with_bytes ? 256 : 0) + np;
    char **tok = xcalloc(n, sizeof *tok);
    float *sc = xcalloc(n, sizeof *sc);
    int32_t *ty = xcalloc(n, sizeof *ty);
    size_t k = 0;
    tok[k] = xstrdup("<unk>"); ty[k++] = TOKENIZER_TOKEN_UNKNOWN;
    tok[k] = xstrdup("<s>"); ty[k++] = TOKENIZER_TOKEN_CONTROL;
    tok[k] = xstrdup("</s>"); ty[k++] = TOKENIZER_TOKEN_CONTROL;
    for (int b = 0; with_bytes && b < 256; b++) {
        char x[8];
        snprintf(x, sizeof x, "<0x%02X>", b);
        tok[k] = xstrdup(x);
        ty[k++] = TOKENIZER_TOKEN_BYTE;
    }
    for (size_t i = 0; i < np; i++) {
        tok[k] = xstrdup(pieces[i].text);
        sc[k] = pieces[i].score;
        ty[k++] = strcmp(pieces[i].text, "<u>") == 0 || pieces[i].text[0] == ' ' ? TOKENIZER_TOKEN_USER_DEFINED
                                                                                  : TOKENIZER_TOKEN_NORMAL;
    }
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, n);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", add_space_prefix);
    char err[256];
    tokenizer_t *t = from_writer(w, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    gguf_writer_free(&w);
    for (size_t i = 0; i < n; i++)
        free(tok[i]);
    free(tok);
    free(sc);
    free(ty);
    return t;
}

#define SP "\xe2\x96\x81"

static void test_spm_merges(void **s)
{
    (void)s;
    tokenizer_t *t = spm_vocab(true, 1);
    assert_int_equal(tokenizer_model(t), TOKENIZER_MODEL_SPM);
    assert_string_equal(tokenizer_pre_name(t), "spm");
    assert_int_equal(tokenizer_bos(t), 1);
    assert_true(tokenizer_add_bos(t));
    /* "▁abc": pairs ▁a(-5) ab(-2) bc(-1) -> bc; then a+bc=abc(-3) beats ▁a(-5);
     * ▁+abc is no token. */
    expect_texts(t, "abc", false, true, SP, "abc", NULL);
    expect_texts(t, "abc", true, true, "<s>", SP, "abc", NULL);
    /* "▁a" alone: the only pair */
    expect_texts(t, "a", false, true, SP "a", NULL);
    /* byte fallback: é = C3 A9 and z are no pieces; ' ' -> ▁ */
    expect_texts(t, "z\xc3\xa9 b", false, true, SP, "<0x7A>", "<0xC3>", "<0xA9>", SP, "b", NULL);
    /* invalid UTF-8 bytes fall back byte by byte */
    expect_texts(t, "\xff" "a\xc3", false, true, SP, "<0xFF>", "a", "<0xC3>", NULL);
    /* specials: recognised only with parse_special, and each text segment
     * after a special gets the space prefix again */
    expect_texts(t, "a<s>b", false, true, SP "a", "<s>", SP, "b", NULL);
    expect_texts(t, "<s>", false, false, SP, "<0x3C>", "<0x73>", "<0x3E>", NULL);
    expect_texts(t, "<unk>", false, true, "<unk>", NULL);
    /* USER_DEFINED texts are matched even without parse_special */
    expect_texts(t, "<u>a", false, false, "<u>", SP "a", NULL);
    expect_texts(t, "", true, true, "<s>", NULL);
    expect_texts(t, "", false, true, NULL);
    tokenizer_free(&t);
    assert_null(t);

    /* without the space prefix; ties go to the leftmost pair */
    t = spm_vocab(false, 1);
    expect_texts(t, "aaa", false, true, "aa", "a", NULL);
    expect_texts(t, "aaaa", false, true, "aa", "aa", NULL);
    expect_texts(t, "abc", false, true, "abc", NULL);
    /* Gemma-style whitespace piece: split out of the raw text as a
     * USER_DEFINED text; a literal ▁▁ in the input merges into it too */
    expect_texts(t, "a  b", false, false, "a", "  ", "b", NULL);
    expect_texts(t, "a" SP SP "b", false, false, "a", "  ", "b", NULL);
    expect_texts(t, "a" SP "b", false, false, "a", SP, "b", NULL);
    tokenizer_free(&t);

    /* no byte tokens: a missing character becomes one UNKNOWN */
    t = spm_vocab(false, 0);
    expect_texts(t, "az", false, true, "a", "<unk>", NULL);
    tokenizer_free(&t);
}

static void test_spm_decode(void **s)
{
    (void)s;
    tokenizer_t *t = spm_vocab(true, 1);
    int32_t ids[8] = {1, id_of(t, SP), id_of(t, "abc"), id_of(t, "<0xC3>"), id_of(t, "<0xA9>"), 2};
    size_t len;
    char *d = decode_all(t, ids, 6, false, &len);
    assert_string_equal(d, "abc\xc3\xa9"); /* leading space of the text dropped */
    free(d);
    d = decode_all(t, ids, 6, true, &len);
    assert_string_equal(d, "<s> abc\xc3\xa9</s>");
    free(d);
    /* per-token pieces apply no stripping */
    const char *p = tokenizer_token_piece(t, id_of(t, SP "a"), false, &len);
    assert_int_equal(len, 2);
    assert_memory_equal(p, " a", 2);
    p = tokenizer_token_piece(t, 1, false, &len);
    assert_int_equal(len, 0);
    p = tokenizer_token_piece(t, 1, true, &len);
    assert_int_equal(len, 3);
    assert_null(tokenizer_token_piece(t, -1, true, &len));
    assert_null(tokenizer_token_piece(t, tokenizer_n_vocab(t), true, &len));
    /* decode truncates to cap but reports the full size */
    char small[4];
    assert_int_equal(tokenizer_decode(t, ids, 6, false, small, sizeof small), 5);
    assert_memory_equal(small, "abc\xc3", 4);
    tokenizer_free(&t);
}

/* ---- synthetic byte-level BPE vocabulary ------------------------------------ */

/* The GPT-2 byte alphabet, written out independently of the tokenizer:
 * printable bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF stand for themselves,
 * the rest take U+0100, U+0101, ... in byte order. */
static void bytechar(int b, char out[4])
{
    static int map[256];
    static bool init;
    if (!init) {
        int next = 256;
        for (int i = 0; i < 256; i++) {
            bool self = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE);
            map[i] = self ? i : next++;
        }
        init = true;
    }
    int cp = map[b];
    memset(out, 0, 4);
    if (cp < 0x80) {
        out[0] = (char)cp;
    } else {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
    }
}

#define G "\xc4\xa0" /* Ġ, the byte-level character of ' ' */

typedef struct bpe_opts {
    const char *pre;       /* tokenizer.ggml.pre, NULL to omit */
    int drop_byte;         /* leave this byte's token out (-1 none) */
    const char *bad_merge; /* extra merge line, NULL none */
} bpe_opts_t;

static gguf_writer_t *bpe_writer(bpe_opts_t o)
{
    static const char *const extra[] = {"ab", "abc", "bc", G "a", "xyz", "12", "<|x|>", "<|x", "<u>",
                                        "<|endoftext|>", "<|im_end|>"};
    static const int extra_type[] = {1, 1, 1, 1, 1, 1, 3, 3, 4, 3, 3};
    static const char *const merges[] = {"a b", "ab c", "b c", G " a", "1 2", "q zz" /* not tokens: ignored */};
    size_t ne = sizeof extra / sizeof extra[0], nm = sizeof merges / sizeof merges[0];
    const char *tok[256 + 16];
    int32_t ty[256 + 16];
    char chars[256][4];
    size_t n = 0;
    for (int b = 0; b < 256; b++) {
        bytechar(b, chars[b]);
        if (b == o.drop_byte)
            continue;
        tok[n] = chars[b];
        ty[n++] = TOKENIZER_TOKEN_NORMAL;
    }
    for (size_t i = 0; i < ne; i++) {
        tok[n] = extra[i];
        ty[n++] = extra_type[i];
    }
    const char *mg[16];
    for (size_t i = 0; i < nm; i++)
        mg[i] = merges[i];
    if (o.bad_merge)
        mg[nm++] = o.bad_merge;
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (o.pre)
        gguf_writer_set_str(w, "tokenizer.ggml.pre", o.pre);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mg, nm);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n - 2)); /* <|endoftext|> */
    return w;
}

static tokenizer_t *bpe_vocab(const char *pre)
{
    gguf_writer_t *w = bpe_writer((bpe_opts_t){.pre = pre, .drop_byte = -1});
    char err[256];
    tokenizer_t *t = from_writer(w, err, sizeof err);
    if (!t)
        fail_msg("%s", err);
    gguf_writer_free(&w);
    return t;
}

static void test_bpe_merges(void **s)
{
    (void)s;
    tokenizer_t *t = bpe_vocab("gpt2");
    assert_int_equal(tokenizer_model(t), TOKENIZER_MODEL_BPE);
    assert_string_equal(tokenizer_pre_name(t), "gpt2");
    assert_false(tokenizer_add_bos(t));
    expect_texts(t, "abc", true, true, "abc", NULL);
    /* a b c b c: ab(0) first, then ab+c(1), then b+c(2) */
    expect_texts(t, "abcbc", false, true, "abc", "bc", NULL);
    /* " ab": Ġa has rank 3 but ab rank 0 wins, and Ġ+ab is no merge */
    expect_texts(t, " ab", false, true, G, "ab", NULL);
    expect_texts(t, " a", false, true, G "a", NULL);
    /* no whole-word lookup for gpt2: xyz has no merges */
    expect_texts(t, "xyz", false, true, "x", "y", "z", NULL);
    expect_texts(t, "a12", false, true, "a", "12", NULL);
    /* specials: leftmost-longest, CONTROL only with parse_special,
     * USER_DEFINED always */
    expect_texts(t, "<|x|>b", false, true, "<|x|>", "b", NULL);
    expect_texts(t, "<|x|b", false, true, "<|x", "|", "b", NULL);
    expect_texts(t, "<|x|>b", false, false, "<", "|", "x", "|", ">", "b", NULL);
    expect_texts(t, "a<u>b", false, false, "a", "<u>", "b", NULL);
    /* invalid UTF-8: each byte is its byte-level token */
    char c0[4], c1[4];
    bytechar(0xff, c0);
    bytechar(0xfe, c1);
    expect_texts(t, "\xff\xfe", false, true, c0, c1, NULL);
    /* end of generation and end of turn */
    int32_t eot = id_of(t, "<|im_end|>"), eos = id_of(t, "<|endoftext|>");
    assert_int_equal(tokenizer_eos(t), eos);
    assert_int_equal(tokenizer_eot(t), eot);
    assert_true(tokenizer_is_eog(t, eot));
    assert_true(tokenizer_is_eog(t, eos));
    assert_false(tokenizer_is_eog(t, id_of(t, "<|x|>")));
    assert_false(tokenizer_is_eog(t, -5));
    assert_int_equal(tokenizer_token_type(t, eot), TOKENIZER_TOKEN_CONTROL);
    assert_int_equal(tokenizer_token_type(t, 1 << 30), 0);
    /* decode: byte-level characters back to bytes */
    int32_t ids[4] = {id_of(t, G "a"), id_of(t, "b"), eot, id_of(t, c0)};
    size_t len;
    char *d = decode_all(t, ids, 4, false, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(d, " ab\xff", 4);
    free(d);
    d = decode_all(t, ids, 4, true, &len);
    assert_memory_equal(d, " ab<|im_end|>\xff", len);
    free(d);
    check_roundtrip(t, "a b\tc\n\xff\xc3(", 10);
    tokenizer_free(&t);

    /* llama3: whole words found in the vocabulary skip the merges; 3 digits per piece */
    t = bpe_vocab("llama-bpe");
    assert_string_equal(tokenizer_pre_name(t), "llama3");
    expect_texts(t, "xyz", false, true, "xyz", NULL);
    expect_texts(t, "a12", false, true, "a", "12", NULL);
    tokenizer_free(&t);
    /* qwen2 and smollm isolate digits */
    t = bpe_vocab("qwen2");
    expect_texts(t, "a12", false, true, "a", "1", "2", NULL);
    expect_texts(t, "xyz", false, true, "x", "y", "z", NULL);
    tokenizer_free(&t);
    t = bpe_vocab("smollm");
    expect_texts(t, "a12", false, true, "a", "1", "2", NULL);
    tokenizer_free(&t);
    /* no pre key: GPT-2 regex */
    t = bpe_vocab(NULL);
    assert_string_equal(tokenizer_pre_name(t), "gpt2");
    tokenizer_free(&t);
}

/* ---- malformed metadata --------------------------------------------------- */

enum mut {
    M_NO_MODEL, M_MODEL_BERT, M_NO_TOKENS, M_TOKENS_INT, M_EMPTY_TOKENS, M_SCORES_SHORT, M_SCORES_NAN,
    M_TYPES_LONG, M_TYPE_9, M_BOS_RANGE, M_EOS_STR, M_ADD_BOS_U32, M_ADD_BOS_NO_BOS, M_BAD_BYTE_TOKEN,
    M_NO_BYTES_NO_UNK, M_BPE_NO_MERGES, M_BPE_MERGE_NOSPACE, M_BPE_PRE_UNKNOWN, M_BPE_MISSING_BYTE,
    M_BPE_ADD_EOS_NO_EOS,
};

static const struct {
    enum mut m;
    const char *want; /* substring of the error message */
} k_bad[] = {
    {M_NO_MODEL, "tokenizer.ggml.model"},
    {M_MODEL_BERT, "not supported"},
    {M_NO_TOKENS, "tokenizer.ggml.tokens"},
    {M_TOKENS_INT, "tokenizer.ggml.tokens"},
    {M_EMPTY_TOKENS, "tokenizer.ggml.tokens"},
    {M_SCORES_SHORT, "tokenizer.ggml.scores"},
    {M_SCORES_NAN, "not a number"},
    {M_TYPES_LONG, "tokenizer.ggml.token_type"},
    {M_TYPE_9, "token_type[4]"},
    {M_BOS_RANGE, "out of range"},
    {M_EOS_STR, "not an integer"},
    {M_ADD_BOS_U32, "not a bool"},
    {M_ADD_BOS_NO_BOS, "no BOS"},
    {M_BAD_BYTE_TOKEN, "not <0xNN>"},
    {M_NO_BYTES_NO_UNK, "no <0x00> byte token"},
    {M_BPE_NO_MERGES, "merges"},
    {M_BPE_MERGE_NOSPACE, "no space"},
    {M_BPE_PRE_UNKNOWN, "pre-tokenizer 'klingon' not supported"},
    {M_BPE_MISSING_BYTE, "byte 0x41"},
    {M_BPE_ADD_EOS_NO_EOS, "no EOS"},
};

/* A small valid SPM vocabulary (tokens t0..t5 + 256 byte tokens), mutated. */
static gguf_writer_t *spm_mutant(enum mut m)
{
    size_t n = 6 + 256;
    char **tok = xcalloc(n, sizeof *tok);
    float *sc = xcalloc(n, sizeof *sc);
    int32_t *ty = xcalloc(n + 1, sizeof *ty) /* +1: M_TYPES_LONG */;
    const char *base[] = {"<unk>", "<s>", "</s>", SP, "a", "b"};
    for (size_t i = 0; i < 6; i++) {
        tok[i] = xstrdup(base[i]);
        ty[i] = i == 0 ? 2 : i < 3 ? 3 : 1;
    }
    for (int b = 0; b < 256; b++) {
        char x[8];
        snprintf(x, sizeof x, "<0x%02X>", b);
        tok[6 + b] = xstrdup(x);
        ty[6 + b] = 6;
    }
    gguf_writer_t *w = gguf_writer_new();
    if (m != M_NO_MODEL)
        gguf_writer_set_str(w, "tokenizer.ggml.model", m == M_MODEL_BERT ? "bert" : "llama");
    size_t nt = m == M_NO_BYTES_NO_UNK ? 6 : n;
    if (m == M_BAD_BYTE_TOKEN) {
        free(tok[6 + 0x41]);
        tok[6 + 0x41] = xstrdup("<0xZZ>");
    }
    if (m == M_TOKENS_INT)
        gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_TYPE_INT32, ty, nt);
    else if (m == M_EMPTY_TOKENS)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, 0);
    else if (m != M_NO_TOKENS)
        gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, nt);
    if (m == M_SCORES_NAN)
        sc[4] = NAN;
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, m == M_SCORES_SHORT ? nt - 1 : nt);
    if (m == M_TYPE_9)
        ty[4] = 9;
    if (m == M_NO_BYTES_NO_UNK)
        ty[0] = 1;
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, m == M_TYPES_LONG ? nt + 1 : nt);
    if (m != M_ADD_BOS_NO_BOS)
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", m == M_BOS_RANGE ? (uint32_t)nt : 1);
    if (m == M_EOS_STR)
        gguf_writer_set_str(w, "tokenizer.ggml.eos_token_id", "2");
    else
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    if (m == M_ADD_BOS_U32)
        gguf_writer_set_u32(w, "tokenizer.ggml.add_bos_token", 1);
    if (m == M_ADD_BOS_NO_BOS)
        gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    for (size_t i = 0; i < n; i++)
        free(tok[i]);
    free(tok);
    free(sc);
    free(ty);
    return w;
}

static void test_malformed(void **s)
{
    (void)s;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
        enum mut m = k_bad[i].m;
        gguf_writer_t *w;
        if (m >= M_BPE_NO_MERGES) {
            bpe_opts_t o = {.pre = "gpt2", .drop_byte = -1};
            if (m == M_BPE_MERGE_NOSPACE) o.bad_merge = "abc";
            if (m == M_BPE_PRE_UNKNOWN) o.pre = "klingon";
            if (m == M_BPE_MISSING_BYTE) o.drop_byte = 0x41;
            w = bpe_writer(o);
            if (m == M_BPE_NO_MERGES) /* merges of the wrong type count as missing */
                gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_TYPE_INT32, (int32_t[]){1}, 1);
            if (m == M_BPE_ADD_EOS_NO_EOS) {
                gguf_writer_set_i32(w, "tokenizer.ggml.eos_token_id", -1);
                gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true);
            }
        } else {
            w = spm_mutant(m);
        }
        char err[256] = "";
        tokenizer_t *t = from_writer(w, err, sizeof err);
        gguf_writer_free(&w);
        if (t) {
            tokenizer_free(&t);
            fail_msg("case %zu: accepted, expected an error with '%s'", i, k_bad[i].want);
        }
        if (!strstr(err, k_bad[i].want))
            fail_msg("case %zu: error '%s' does not mention '%s'", i, err, k_bad[i].want);
    }
    /* the unmutated vocabularies load */
    gguf_writer_t *w = spm_mutant((enum mut)-1);
    char err[256];
    tokenizer_t *t = from_writer(w, err, sizeof err);
    assert_non_null(t);
    tokenizer_free(&t);
    gguf_writer_free(&w);
}

static void test_utf8_complete(void **s)
{
    (void)s;
    static const struct { const char *s; size_t len, want; } c[] = {
        {"abc", 3, 3},
        {"a\xc3", 2, 1},             /* é cut after its lead byte */
        {"a\xc3\xa9", 3, 3},
        {"\xe6\x97", 2, 0},          /* 3-byte CJK cut */
        {"\xe6\x97\xa5", 3, 3},
        {"x\xf0\x9f\x98", 4, 1},     /* emoji cut after 3 of 4 bytes */
        {"\xf0\x9f\x98\x80", 4, 4},
        {"\xff", 1, 1},              /* never valid: not held back */
        {"a\x80", 2, 2},             /* stray continuation byte */
        {"", 0, 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (utf8_complete_len(c[i].s, c[i].len) != c[i].want)
            fail_msg("case %zu: got %zu want %zu", i, utf8_complete_len(c[i].s, c[i].len), c[i].want);
}

/* ---- stories260K ------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

static json_t *load_corpus(void)
{
    json_error_t je;
    json_t *c = json_load_file("tests/ref/tokenizer_corpus.json", JSON_ALLOW_NUL, &je);
    if (!c || !json_is_array(c))
        fail_msg("tests/ref/tokenizer_corpus.json: %s", je.text);
    return c;
}

/* Time to encode `len` bytes: the best of `reps` runs, microseconds. */
static double time_encode(const tokenizer_t *t, const char *s, size_t len, int reps, int *n_tok)
{
    int cap = (int)(4 * len + 4);
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = clock_now_us();
        *n_tok = tokenizer_encode(t, s, len, true, true, ids, cap);
        double dt = (double)(clock_now_us() - t0);
        if (dt < best)
            best = dt;
    }
    free(ids);
    return best;
}

/* A 4 KB English prompt. */
static char *prompt_english(size_t *len)
{
    static const char para[] =
        "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
        "One day, she saw a big, red ball in the park. She asked her mom, \"Can I play with it?\" Her mom "
        "said yes, and Lily played all day long. The quick brown fox jumps over the lazy dog; 12 dogs, 345 "
        "cats and 6789 birds.\n";
    char *p = xmalloc(4096 + 1);
    size_t n = 0;
    while (n < 4096) {
        size_t k = sizeof para - 1 < 4096 - n ? sizeof para - 1 : 4096 - n;
        memcpy(p + n, para, k);
        n += k;
    }
    p[n] = 0;
    *len = n;
    return p;
}

/* A 4 KB prompt made of the corpus' short lines: prose, code, many scripts. */
static char *prompt_4k(json_t *corpus, size_t *len)
{
    char *p = xmalloc(4096 + 1);
    size_t n = 0;
    for (size_t i = 0; n < 4096; i = (i + 1) % json_array_size(corpus)) {
        const char *s = json_string_value(json_array_get(corpus, i));
        size_t k = strlen(s);
        if (k > 200 || strstr(s, "<"))
            continue;
        if (k > 4096 - n)
            k = 4096 - n;
        memcpy(p + n, s, k);
        n += k;
    }
    p[n] = 0;
    *len = n;
    return p;
}

/* stories260K's tokenizer (../shared), or the test is skipped. */
static tokenizer_t *load_stories260k(void)
{
    const char *path = support_shared_model("stories260K.gguf");
    if (!path)
        skip();
    return load_file(path);
}

static void test_stories260k(void **s)
{
    (void)s;
    tokenizer_t *t = load_stories260k();
    assert_int_equal(tokenizer_n_vocab(t), 512);
    assert_int_equal(tokenizer_model(t), TOKENIZER_MODEL_SPM);
    assert_int_equal(tokenizer_bos(t), 1);
    assert_int_equal(tokenizer_eos(t), 2);
    assert_int_equal(tokenizer_unk(t), 0);
    assert_true(tokenizer_add_bos(t));
    assert_true(tokenizer_is_eog(t, 2));
    assert_false(tokenizer_is_eog(t, 1));
    /* every token's stored text is found again */
    for (int32_t i = 0; i < tokenizer_n_vocab(t); i++) {
        size_t len;
        const char *x = tokenizer_token_text(t, i, &len);
        assert_int_equal(tokenizer_find(t, x, len), i);
    }
    int32_t ids[64];
    int n = enc(t, "Once upon a time", 16, true, false, ids, 64);
    assert_true(n > 1);
    assert_int_equal(ids[0], 1);
    /* the pieces spell the input with the SPM prefix space */
    char buf[64];
    size_t k = 0;
    for (int i = 1; i < n; i++) {
        size_t len;
        const char *p = tokenizer_token_piece(t, ids[i], false, &len);
        memcpy(buf + k, p, len);
        k += len;
    }
    assert_int_equal(k, 17);
    assert_memory_equal(buf, " Once upon a time", 17);
    /* truncated output reports the full count */
    int32_t few[2];
    assert_int_equal(tokenizer_encode(t, "Once upon a time", 16, true, false, few, 2), n);
    assert_int_equal(tokenizer_encode(t, "Once upon a time", 16, true, false, NULL, 0), n);
    assert_int_equal(tokenizer_encode(t, NULL, 0, true, false, few, 2), 1); /* just BOS */
    assert_int_equal(tokenizer_encode(t, "x", TOKENIZER_MAX_TEXT + 1, true, false, few, 2), -1);

    json_t *corpus = load_corpus();
    for (size_t i = 0; i < json_array_size(corpus); i++) {
        json_t *xj = json_array_get(corpus, i);
        check_roundtrip(t, json_string_value(xj), json_string_length(xj));
    }
    /* arbitrary bytes survive byte fallback exactly */
    char rb[300];
    for (int r = 0; r < 300; r++) {
        size_t len = rnd() % sizeof rb;
        for (size_t i = 0; i < len; i++)
            rb[i] = (char)(r % 3 == 0 ? (int)(rnd() & 0xff) : " abc\xc3\xa9\xe6\x97\xa5<>s/\n\xe2"[rnd() % 16]);
        check_roundtrip(t, rb, len);
        int32_t tmp[1300];
        (void)enc(t, rb, len, true, true, tmp, 1300); /* specials on: no crash, bound holds */
    }

    /* a 10 KB word: one long merge run (its speed: test_bench) */
    char *word = xmalloc(10240);
    for (size_t i = 0; i < 10240; i++)
        word[i] = "abcdefghij"[rnd() % 10];
    check_roundtrip(t, word, 10240);
    free(word);
    json_decref(corpus);
    tokenizer_free(&t);
}

/* ---- concurrency: one tokenizer, several threads ------------------------------ */

typedef struct job {
    const tokenizer_t *t;
    json_t *corpus;
    int32_t *ids;   /* results, concatenated */
    size_t n_ids;
} job_t;

static void *encode_all(void *arg)
{
    job_t *j = arg;
    size_t cap = 1 << 16, n = 0;
    j->ids = xmalloc(cap * sizeof *j->ids);
    for (int rep = 0; rep < 3; rep++)
        for (size_t i = 0; i < json_array_size(j->corpus); i++) {
            json_t *x = json_array_get(j->corpus, i);
            size_t len = json_string_length(x);
            if (n + 4 * len + 4 > cap) {
                cap = 2 * (n + 4 * len + 4);
                j->ids = xrealloc(j->ids, cap * sizeof *j->ids);
            }
            n += (size_t)tokenizer_encode(j->t, json_string_value(x), len, true, true, j->ids + n, (int)(cap - n));
        }
    j->n_ids = n;
    return NULL;
}

static void test_threads(void **s)
{
    (void)s;
    json_t *corpus = load_corpus();
    tokenizer_t *t = bpe_vocab("llama-bpe"); /* regex path: per-call match data */
    job_t one = {.t = t, .corpus = corpus};
    encode_all(&one);
    enum { NT = 4 };
    job_t jobs[NT];
    pthread_t th[NT];
    for (int i = 0; i < NT; i++) {
        jobs[i] = (job_t){.t = t, .corpus = corpus};
        assert_int_equal(pthread_create(&th[i], NULL, encode_all, &jobs[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].n_ids, one.n_ids);
        assert_memory_equal(jobs[i].ids, one.ids, one.n_ids * sizeof *one.ids);
        free(jobs[i].ids);
    }
    free(one.ids);
    tokenizer_free(&t);
    json_decref(corpus);
}

/* ---- reference mode --------------------------------------------------------- */

static void print_ids(const char *label, const int32_t *ids, int n)
{
    fprintf(stderr, "    %s (%d):", label, n);
    for (int i = 0; i < n && i < 40; i++)
        fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 40 ? " ...\n" : "\n");
}

static void test_reference(void **s)
{
    (void)s;
    const char *path = getenv("PAGODA_TOKREF");
    json_error_t je;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &je);
    if (!root)
        fail_msg("%s: %s", path, je.text);
    json_t *vocabs = json_object_get(root, "vocabs");
    assert_true(json_is_array(vocabs) && json_array_size(vocabs) > 0);
    json_t *corpus = load_corpus();
    size_t plen;
    char *prompt = prompt_4k(corpus, &plen);
    size_t elen;
    char *english = prompt_english(&elen);
    int total_fail = 0, total = 0;
    for (size_t v = 0; v < json_array_size(vocabs); v++) {
        json_t *vj = json_array_get(vocabs, v);
        const char *name = json_string_value(json_object_get(vj, "name"));
        const char *gguf = json_string_value(json_object_get(vj, "gguf"));
        bool add_special = json_is_true(json_object_get(vj, "add_special"));
        int64_t t0 = clock_now_us();
        tokenizer_t *t = load_file(gguf);
        int64_t t_load = clock_now_us() - t0;
        json_t *cases = json_object_get(vj, "cases");
        int fails = 0;
        for (size_t c = 0; c < json_array_size(cases); c++) {
            json_t *cj = json_array_get(cases, c);
            json_t *tj = json_object_get(cj, "text");
            const char *text = json_string_value(tj);
            size_t len = json_string_length(tj);
            bool ps = json_is_true(json_object_get(cj, "parse_special"));
            json_t *want = json_object_get(cj, "ids");
            int nw = (int)json_array_size(want);
            int cap = (int)(4 * len + 4);
            int32_t *got = xmalloc((size_t)cap * sizeof *got);
            int ng = enc(t, text, len, add_special, ps, got, cap);
            bool same = ng == nw;
            for (int i = 0; same && i < nw; i++)
                same = got[i] == (int32_t)json_integer_value(json_array_get(want, (size_t)i));
            total++;
            if (!same) {
                fails++;
                fprintf(stderr, "MISMATCH %s parse_special=%d text=\"%.80s\"%s\n", name, ps, text,
                        len > 80 ? "..." : "");
                int32_t *w = xmalloc(((size_t)nw + 1) * sizeof *w);
                for (int i = 0; i < nw; i++)
                    w[i] = (int32_t)json_integer_value(json_array_get(want, (size_t)i));
                print_ids("got ", got, ng);
                print_ids("want", w, nw);
                free(w);
            }
            if (!ps)
                check_roundtrip(t, text, len);
            free(got);
        }
        int nt, ne;
        double us = time_encode(t, prompt, plen, 20, &nt);
        double us_en = time_encode(t, english, elen, 20, &ne);
        print_message("%-14s n_vocab %6d pre %-6s load %5.1f ms; %zu cases, %d mismatches; 4 KB "
                      "mixed -> %d tokens in %.0f us, English -> %d tokens in %.0f us\n",
                      name, tokenizer_n_vocab(t), tokenizer_pre_name(t), (double)t_load / 1000.0,
                      json_array_size(cases), fails, nt, us, ne, us_en);
        total_fail += fails;
        tokenizer_free(&t);
    }
    free(prompt);
    free(english);
    json_decref(corpus);
    json_decref(root);
    if (total_fail)
        fail_msg("%d of %d reference cases differ", total_fail, total);
}

/* ---- speed (PAGODA_TOKBENCH=1): numbers printed, nothing asserted --------------- */

/* Encode times of stories260K's vocabulary: a 4 KB prompt of mixed scripts,
 * a 4 KB English one, and a 10 KB word (the merge loop must stay
 * near-linear). A benchmark command, not a test: the numbers depend on the
 * machine. */
static void test_bench(void **s)
{
    (void)s;
    tokenizer_t *t = load_stories260k();
    json_t *corpus = load_corpus();
    size_t plen;
    char *p = prompt_4k(corpus, &plen);
    int nt;
    double us = time_encode(t, p, plen, 20, &nt);
    print_message("stories260K: encode %zu bytes (mixed scripts) -> %d tokens in %.0f us (best of 20)\n",
                  plen, nt, us);
    free(p);
    p = prompt_english(&plen);
    us = time_encode(t, p, plen, 20, &nt);
    print_message("stories260K: encode %zu bytes (English) -> %d tokens in %.0f us (best of 20)\n", plen, nt, us);
    free(p);
    char *word = xmalloc(10240);
    for (size_t i = 0; i < 10240; i++)
        word[i] = "abcdefghij"[rnd() % 10];
    us = time_encode(t, word, 10240, 3, &nt);
    print_message("stories260K: 10 KB word -> %d tokens in %.0f us (best of 3)\n", nt, us);
    free(word);
    json_decref(corpus);
    tokenizer_free(&t);
}

int main(void)
{
    if (getenv("PAGODA_TOKREF")) {
        const struct CMUnitTest ref[] = {cmocka_unit_test(test_reference)};
        return cmocka_run_group_tests(ref, NULL, NULL);
    }
    if (getenv("PAGODA_TOKBENCH")) {
        const struct CMUnitTest bench[] = {cmocka_unit_test(test_bench)};
        return cmocka_run_group_tests(bench, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spm_merges),
        cmocka_unit_test(test_spm_decode),
        cmocka_unit_test(test_bpe_merges),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_utf8_complete),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_stories260k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
