/* Unit tests for common/text/text_model and prompt, and proto/submit_prompt:
 * a model's words load from GGUF metadata alone (and a file without a
 * tokenizer is refused with a message); prompt ids equal the tokenizer run on
 * the template's rendering (no second BOS); a cut prompt is the prompt of the
 * cut text; a SUBMIT's prompt is built from each of its three kinds.
 * Model: a GGUF written here (common/text/gguf_write.h) with a small
 * SentencePiece vocabulary (byte tokens, a few words, ChatML's markers as
 * control tokens) and a ChatML template. Runs in well under a second. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/text/prompt.h"
#include "common/text/text_model.h"
#include "proto/submit_prompt.h"
#include "common/text/gguf_write.h"

#define NO_TOKENIZER "tests/fuzz/corpus/gguf/meta.gguf"

static char g_path[64];

/* <unk> <s> </s>, the 256 byte tokens, words, and ChatML's markers */
static void write_model(const char *path)
{
    static const char *const words[] = {"\xe2\x96\x81" "a", "\xe2\x96\x81" "b", "\xe2\x96\x81" "c", "\xe2\x96\x81" "hi",
                                        "user", "system", "assistant"};
    static const char *const ctl[] = {"<|im_start|>", "<|im_end|>"};
    enum { N_WORDS = 7, N_CTL = 2, N = 3 + 256 + N_WORDS + N_CTL };
    char *tok[N];
    float sc[N];
    int32_t ty[N];
    size_t k = 0;
    const char *base[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3; i++) {
        tok[k] = strdup(base[i]);
        sc[k] = 0;
        ty[k++] = i == 0 ? 2 : 3; /* UNKNOWN, CONTROL */
    }
    for (int b = 0; b < 256; b++) {
        char x[8];
        snprintf(x, sizeof x, "<0x%02X>", b);
        tok[k] = strdup(x);
        sc[k] = 0;
        ty[k++] = 6; /* BYTE */
    }
    for (int i = 0; i < N_WORDS; i++) {
        tok[k] = strdup(words[i]);
        sc[k] = -(float)i;
        ty[k++] = 1; /* NORMAL */
    }
    for (int i = 0; i < N_CTL; i++) {
        tok[k] = strdup(ctl[i]);
        sc[k] = 0;
        ty[k++] = 3;
    }
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tok, N);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_TYPE_FLOAT32, sc, N);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, ty, N);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2);
    gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    gguf_writer_set_str(w, "tokenizer.chat_template",
                        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
                        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
                        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}");
    char err[256];
    if (gguf_writer_write_file(w, path, err, sizeof err) != 0)
        fail_msg("%s", err);
    gguf_writer_free(&w);
    for (size_t i = 0; i < N; i++)
        free(tok[i]);
}

static int setup(void **state)
{
    snprintf(g_path, sizeof g_path, "/tmp/pagoda-test-prompt-%d.gguf", (int)getpid());
    write_model(g_path);
    char err[256] = "";
    text_model_t *t = text_model_load(g_path, err, sizeof err);
    unlink(g_path);
    if (!t)
        fail_msg("%s: %s", g_path, err);
    *state = t;
    return 0;
}

static int teardown(void **state)
{
    text_model_t *t = *state;
    text_model_free(&t);
    assert_null(t);
    return 0;
}

/* tokenizer_encode into a fresh array (the reference the prompt functions are
 * checked against: the tokenizer alone, no prompt code) */
static int encode_ref(const text_model_t *t, const char *s, size_t len, bool add, bool special, int32_t **out)
{
    int32_t *ids = malloc((len + 8) * 4 * sizeof *ids);
    int n = tokenizer_encode(t->tok, s, len, add, special, ids, (int)(len + 8) * 4);
    assert_true(n >= 0 && n <= (int)(len + 8) * 4);
    *out = ids;
    return n;
}

static void test_load(void **state)
{
    const text_model_t *t = *state;
    assert_non_null(t->tok);
    assert_non_null(t->tmpl);
    assert_int_equal(chat_template_family(t->tmpl), CHAT_FAMILY_CHATML);
    /* a turn ends at <|im_end|> and at EOS, both in the vocabulary */
    assert_int_equal(t->n_turn_end, 2);
    assert_int_equal(t->turn_end_ids[0], tokenizer_find(t->tok, "<|im_end|>", 10));
    assert_int_equal(t->turn_end_ids[1], 2);

    char err[256] = "";
    assert_null(text_model_load(NO_TOKENIZER, err, sizeof err));
    assert_true(strlen(err) > 0);
    err[0] = '\0';
    assert_null(text_model_load("tests/no/such/file.gguf", err, sizeof err));
    assert_true(strlen(err) > 0);
}

static void test_text_cut(void **state)
{
    const text_model_t *t = *state;
    const char *s = "a b c a b c a b";
    char err[128];
    int32_t *all = NULL, *cut = NULL, *ref = NULL;
    bool tr = true;
    int32_t n_all = prompt_text(t, s, strlen(s), SIZE_MAX, &all, &tr, err, sizeof err);
    assert_false(tr);
    int n_ref = encode_ref(t, s, strlen(s), true, false, &ref);
    assert_int_equal(n_all, n_ref);
    assert_memory_equal(all, ref, (size_t)n_ref * sizeof *ref);
    free(ref);

    int32_t n_cut = prompt_text(t, s, strlen(s), 5, &cut, &tr, err, sizeof err);
    assert_true(tr);
    n_ref = encode_ref(t, s, 5, true, false, &ref);
    assert_int_equal(n_cut, n_ref);
    assert_memory_equal(cut, ref, (size_t)n_ref * sizeof *ref);
    assert_true(n_cut < n_all);
    free(ref);
    free(all);
    free(cut);
}

static void test_chat(void **state)
{
    const text_model_t *t = *state;
    chat_msg_t m[2] = {{.role = "system", .content = "be brief"}, {.role = "user", .content = "hi"}};
    chat_render_opts_t o = {.add_generation_prompt = true, .enable_thinking = -1};
    char err[256] = "";
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(chat_template_render_opts(t->tmpl, m, 2, &o, &text, &len, err, sizeof err), 0);
    int32_t *ids = NULL, *ref = NULL;
    bool tr = true;
    int32_t n = prompt_chat(t, m, 2, &o, SIZE_MAX, &ids, &tr, err, sizeof err);
    assert_false(tr);
    /* ChatML writes no BOS text itself, so the tokenizer's rule applies;
     * the markers are one control token each */
    int n_ref = encode_ref(t, text, len, true, true, &ref);
    assert_int_equal(n, n_ref);
    assert_int_equal(ids[1], tokenizer_find(t->tok, "<|im_start|>", 12));
    assert_memory_equal(ids, ref, (size_t)n * sizeof *ids);
    free(ids);
    free(ref);

    /* cut after 7 bytes of the rendering */
    n = prompt_chat(t, m, 2, &o, 7, &ids, &tr, err, sizeof err);
    assert_true(tr);
    n_ref = encode_ref(t, text, 7, true, true, &ref);
    assert_int_equal(n, n_ref);
    assert_memory_equal(ids, ref, (size_t)n * sizeof *ids);
    free(ids);
    free(ref);
    free(text);

    /* what the template refuses fails with a message, *out untouched */
    chat_msg_t bad = {.role = "wizard", .content = "x"};
    ids = (int32_t *)&n;
    err[0] = '\0';
    assert_int_equal(prompt_chat(t, &bad, 1, &o, SIZE_MAX, &ids, NULL, err, sizeof err), -1);
    assert_ptr_equal(ids, (int32_t *)&n);
    assert_true(strlen(err) > 0);
}

static void test_submit(void **state)
{
    const text_model_t *t = *state;
    char err[256] = "";
    int32_t *ids = NULL, *ref = NULL;
    bool tr = true;

    /* text */
    proto_submit_t s = {.kind = PROTO_KIND_COMPLETION, .prompt = "a b c"};
    int32_t n = submit_prompt_encode(t, &s, SIZE_MAX, &ids, &tr, err, sizeof err);
    int n_ref = encode_ref(t, "a b c", 5, true, false, &ref);
    assert_false(tr);
    assert_int_equal(n, n_ref);
    assert_memory_equal(ids, ref, (size_t)n * sizeof *ids);
    free(ids);
    free(ref);

    /* ids, as given, never cut */
    int32_t given[3] = {5, 1, 4};
    proto_submit_t si = {.kind = PROTO_KIND_COMPLETION, .has_prompt_ids = true, .prompt_ids = given,
                         .n_prompt_ids = 3};
    n = submit_prompt_encode(t, &si, 1, &ids, &tr, err, sizeof err);
    assert_int_equal(n, 3);
    assert_false(tr);
    assert_memory_equal(ids, given, sizeof given);
    free(ids);

    /* chat: the same ids as prompt_chat on the same messages */
    proto_chat_msg_t pm[1] = {{.role = "user", .content = "hi"}};
    proto_submit_t sc = {.kind = PROTO_KIND_CHAT, .messages = pm, .n_messages = 1};
    n = submit_prompt_encode(t, &sc, SIZE_MAX, &ids, &tr, err, sizeof err);
    chat_msg_t cm = {.role = "user", .content = "hi"};
    chat_render_opts_t o = {.add_generation_prompt = true, .enable_thinking = -1};
    n_ref = prompt_chat(t, &cm, 1, &o, SIZE_MAX, &ref, NULL, err, sizeof err);
    assert_true(n > 0);
    assert_int_equal(n, n_ref);
    assert_memory_equal(ids, ref, (size_t)n * sizeof *ids);
    free(ids);
    free(ref);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load),
        cmocka_unit_test(test_text_cut),
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_submit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
