/* libFuzzer target for the tokenizer (common/text/tokenizer.c): arbitrary bytes
 * are encoded and decoded again.
 *
 * Input layout: byte 0 picks the case, the rest is the text.
 *   bit 0  vocabulary: 0 = SentencePiece ("llama"), 1 = byte-level BPE ("gpt2")
 *   bit 1  parse_special
 *   bit 2  add_special
 *
 * Vocabularies, loaded once:
 *   SPM  $PAGODA_FUZZ_VOCAB if set, else ../shared/models/stories260K.gguf,
 *        else ../../shared/models/stories260K.gguf (from build/fuzz), else a
 *        small SentencePiece vocabulary built here (byte tokens, a few pieces,
 *        <s>/</s>/<unk>).
 *   BPE  built here: the 256 byte-level tokens, a few merges, CONTROL tokens
 *        "<|im_start|>", "<|im_end|>" and a USER_DEFINED "<tool>"; GPT-2
 *        pre-tokenizer via PCRE2, so invalid UTF-8 reaches the regex engine.
 *
 * Checked on every input: the count obeys the documented bound (4*len + 4)
 * and is the same when the output buffer is too small; every id is in range;
 * BPE decodes back to the exact input (special texts included); SPM without
 * parse_special decodes back to the input unless it holds a literal U+2581
 * (SentencePiece's space marker, which decodes as ' ').
 *
 * Seed corpus: tests/fuzz/corpus/tokenizer/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/text/gguf.h"
#include "common/text/gguf_write.h"
#include "common/text/tokenizer.h"

static tokenizer_t *g_spm, *g_bpe;

static tokenizer_t *from_writer(gguf_writer_t *w)
{
    uint8_t *buf;
    size_t len;
    char err[256];
    gguf_t *g = NULL;
    if (gguf_writer_write_mem(w, &buf, &len, err, sizeof err) != 0 || gguf_parse(buf, len, &g, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    tokenizer_t *t = tokenizer_from_gguf(g, err, sizeof err);
    if (!t) {
        fprintf(stderr, "fuzz_tokenizer: %s\n", err);
        abort();
    }
    gguf_close(&g);
    free(buf);
    gguf_writer_free(&w);
    return t;
}

static tokenizer_t *spm_fallback(void)
{
    static const char *const pieces[] = {"\xe2\x96\x81", "a", "b", "\xe2\x96\x81" "a", "ab", "abc",
                                         "\xe6\x97\xa5", "\xe2\x96\x81\xe2\x96\x81"};
    const char *tok[3 + 256 + 8];
    char bytes[256][8];
    float sc[3 + 256 + 8] = {0};
    int32_t ty[3 + 256 + 8];
    size_t n = 0;
    tok[n] = "<unk>"; ty[n++] = 2;
    tok[n] = "<s>"; ty[n++] = 3;
    tok[n] = "</s>"; ty[n++] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        tok[n] = bytes[b];
        ty[n++] = 6;
    }
    for (size_t i = 0; i < sizeof pieces / sizeof pieces[0]; i++) {
        tok[n] = pieces[i];
        sc[n] = -(float)i;
        ty[n++] = 1;
    }
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, n);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    return from_writer(w);
}

static tokenizer_t *bpe_vocab(void)
{
    static const char *const extra[] = {"ab", "abc", "\xc4\xa0" "a", "12", "<|im_start|>", "<|im_end|>", "<tool>"};
    static const int32_t extra_type[] = {1, 1, 1, 1, 3, 3, 4};
    static const char *const merges[] = {"a b", "ab c", "\xc4\xa0 a", "1 2"};
    const char *tok[256 + 8];
    char chars[256][4];
    int32_t ty[256 + 8];
    size_t n = 0;
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int cp = self ? b : next++;
        memset(chars[b], 0, 4);
        if (cp < 0x80) {
            chars[b][0] = (char)cp;
        } else {
            chars[b][0] = (char)(0xC0 | (cp >> 6));
            chars[b][1] = (char)(0x80 | (cp & 0x3F));
        }
        tok[n] = chars[b];
        ty[n++] = 1;
    }
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
        tok[n] = extra[i];
        ty[n++] = extra_type[i];
    }
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-2");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tok, n);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, n);
    gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, sizeof merges / sizeof merges[0]);
    return from_writer(w);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *paths[] = {getenv("PAGODA_FUZZ_VOCAB"), "../shared/models/stories260K.gguf",
                           "../../shared/models/stories260K.gguf"};
    for (size_t i = 0; i < 3 && !g_spm; i++) {
        gguf_t *g = NULL;
        char err[256];
        if (!paths[i] || gguf_open(paths[i], &g, err, sizeof err) != 0)
            continue;
        g_spm = tokenizer_from_gguf(g, err, sizeof err);
        gguf_close(&g);
        if (g_spm)
            fprintf(stderr, "fuzz_tokenizer: SPM vocabulary %s\n", paths[i]);
    }
    if (!g_spm) {
        fprintf(stderr, "fuzz_tokenizer: stories260K.gguf not found; using a built-in SPM vocabulary\n");
        g_spm = spm_fallback();
    }
    g_bpe = bpe_vocab();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    uint8_t mode = data[0];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    const tokenizer_t *t = (mode & 1) ? g_bpe : g_spm;
    bool parse_special = mode & 2, add_special = mode & 4;

    int cap = (int)(4 * len + 4);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    int n = tokenizer_encode(t, text, len, add_special, parse_special, ids, cap);
    if (n < 0 || n > cap)
        abort();
    int32_t small[4];
    if (tokenizer_encode(t, text, len, add_special, parse_special, small, 4) != n)
        abort();
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tokenizer_n_vocab(t))
            abort();
    if (n >= 4 && memcmp(small, ids, sizeof small) != 0)
        abort();

    bool bpe = mode & 1;
    size_t need = tokenizer_decode(t, ids, n, bpe, NULL, 0);
    char *out = malloc(need + 1);
    if (tokenizer_decode(t, ids, n, bpe, out, need) != need)
        abort();
    bool check = bpe || (!parse_special && !memmem(text, len, "\xe2\x96\x81", 3));
    if (check && (need != len || memcmp(out, text, len) != 0))
        abort();
    if (utf8_complete_len(out, need) > need)
        abort();
    for (int i = 0; i < n; i++) {
        size_t pl;
        tokenizer_token_piece(t, ids[i], true, &pl);
    }
    free(out);
    free(ids);
    return 0;
}
