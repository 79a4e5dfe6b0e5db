/* engine.c — loads model, tokenizer and chat template from one GGUF file and
 * turns text or chat messages into prompt token ids (see engine.h). */
#include "worker/engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"

/* The token text of id as a NUL-terminated malloc'd string ("" for none). */
static char *token_text_dup(const tokenizer_t *t, int32_t id)
{
    size_t n = 0;
    const char *p = id >= 0 ? tokenizer_token_text(t, id, &n) : NULL;
    return xstrndup(p ? p : "", p ? n : 0);
}

/* Tokenizer, chat template and end-of-turn ids from g's metadata. vocab < 0:
 * no model to check the tokenizer's size against. */
static int text_init(engine_t *e, const gguf_t *g, int32_t vocab, const char *path, char *err,
                     size_t errlen)
{
    char *bos = NULL, *eos = NULL;
    e->tok = tokenizer_from_gguf(g, err, errlen);
    if (!e->tok)
        return -1;
    if (vocab >= 0 && tokenizer_n_vocab(e->tok) > vocab) {
        errbuf_set(err, errlen, "%s: the tokenizer has %d tokens but the model only %d", path,
                   tokenizer_n_vocab(e->tok), vocab);
        return -1;
    }
    gguf_str_t tmpl = {0};
    (void)gguf_get_str(g, "tokenizer.chat_template", &tmpl);
    bos = token_text_dup(e->tok, tokenizer_bos(e->tok));
    eos = token_text_dup(e->tok, tokenizer_eos(e->tok));
    e->tmpl = chat_template_new(tmpl.ptr, (size_t)tmpl.len, bos, eos);
    const char *const *stops = NULL;
    size_t n_stops = chat_template_stops(e->tmpl, &stops);
    e->turn_end_ids = xcalloc(n_stops + 1, sizeof(int32_t));
    for (size_t i = 0; i < n_stops; i++) {
        int32_t id = tokenizer_find(e->tok, stops[i], strlen(stops[i]));
        if (id >= 0)
            e->turn_end_ids[e->n_turn_end++] = id;
    }
    free(bos);
    free(eos);
    return 0;
}

engine_t *engine_load(const char *path, char *err, size_t errlen)
{
    engine_t *e = xcalloc(1, sizeof *e);
    if (model_load(path, &e->model, err, errlen) != 0)
        goto err;
    if (text_init(e, e->model->gguf, e->model->cfg.vocab, path, err, errlen) != 0)
        goto err;
    log_info("loaded %s: chat template %s (%s)", path,
             chat_family_name(chat_template_family(e->tmpl)), chat_template_variant(e->tmpl));
    return e;
err:
    engine_free(&e);
    return NULL;
}

engine_t *engine_load_text(const char *path, char *err, size_t errlen)
{
    engine_t *e = xcalloc(1, sizeof *e);
    gguf_t *g = NULL;
    if (gguf_open(path, &g, err, errlen) != 0)
        goto err;
    if (text_init(e, g, -1, path, err, errlen) != 0)
        goto err;
    gguf_close(&g);
    return e;
err:
    gguf_close(&g);
    engine_free(&e);
    return NULL;
}

void engine_pack_int8(engine_t *e, int n_threads)
{
    int64_t t0 = clock_now_us();
    int n = model_pack_int8(e->model, n_threads);
    if (n > 0)
        log_info("packed %d Q8_0 matrices for the int8 kernels (isa %s): %.1f MiB in %.0f ms", n,
                 qgemm_isa_name(qgemm_isa_default()), (double)e->model->packed_bytes / (1024.0 * 1024.0),
                 (double)(clock_now_us() - t0) / 1e3);
}

void engine_free(engine_t **pe)
{
    engine_t *e = *pe;
    if (!e)
        return;
    chat_template_free(&e->tmpl);
    tokenizer_free(&e->tok);
    model_free(&e->model);
    free(e->turn_end_ids);
    free(e);
    *pe = NULL;
}

/* Tokenizes text into a malloc'd *out, growing the buffer until it fits.
 * add_special: the tokenizer's BOS rule; parse_special: control-token texts. */
static int32_t encode(const engine_t *e, const char *text, size_t len, bool add_special,
                      bool parse_special, int32_t **out, char *err, size_t errlen)
{
    int cap = (int)(len < 1024 ? 64 + 2 * len : len / 2 + 64);
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    for (;;) {
        int n = tokenizer_encode(e->tok, text, len, add_special, parse_special, ids, cap);
        if (n < 0) {
            errbuf_set(err, errlen, "the prompt is too long (%zu bytes)", len);
            free(ids);
            return -1;
        }
        if (n <= cap) {
            *out = ids;
            return n;
        }
        cap = n;
        ids = xrealloc(ids, (size_t)cap * sizeof *ids);
    }
}

int32_t engine_prompt_text(const engine_t *e, const char *text, size_t len, int32_t **out,
                           char *err, size_t errlen)
{
    return encode(e, text, len, true, false, out, err, errlen);
}

int32_t engine_prompt_submit(const engine_t *e, const proto_submit_t *s, int32_t **out, char *err,
                             size_t errlen)
{
    return engine_prompt_submit_prefix(e, s, SIZE_MAX, out, NULL, err, errlen);
}

/* Renders msgs with o and tokenizes at most max_bytes of the prompt. */
static int32_t prompt_chat(const engine_t *e, const chat_msg_t *msgs, size_t n, const chat_render_opts_t *o,
                           size_t max_bytes, int32_t **out, bool *truncated, char *err, size_t errlen);

int32_t engine_prompt_submit_prefix(const engine_t *e, const proto_submit_t *s, size_t max_bytes,
                                    int32_t **out, bool *truncated, char *err, size_t errlen)
{
    if (truncated)
        *truncated = false;
    if (s->kind == PROTO_KIND_CHAT) {
        chat_msg_t *msgs = xcalloc(s->n_messages ? s->n_messages : 1, sizeof *msgs);
        for (uint32_t i = 0; i < s->n_messages; i++) {
            msgs[i].role = s->messages[i].role;
            msgs[i].content = s->messages[i].content;
            msgs[i].tool_calls = s->messages[i].tool_calls;
            msgs[i].tool_call_id = s->messages[i].tool_call_id;
        }
        chat_render_opts_t o = {.tools_json = s->tools, .add_generation_prompt = true,
                                .enable_thinking = s->has_think ? s->think : -1};
        int32_t n = prompt_chat(e, msgs, s->n_messages, &o, max_bytes, out, truncated, err, errlen);
        free(msgs);
        return n;
    }
    if (s->has_prompt_ids) {
        *out = xmalloc((s->n_prompt_ids ? s->n_prompt_ids : 1) * sizeof **out);
        if (s->n_prompt_ids)
            memcpy(*out, s->prompt_ids, s->n_prompt_ids * sizeof **out);
        return (int32_t)s->n_prompt_ids;
    }
    const char *p = s->prompt ? s->prompt : "";
    size_t len = strlen(p);
    if (len > max_bytes) {
        len = max_bytes;
        if (truncated)
            *truncated = true;
    }
    return engine_prompt_text(e, p, len, out, err, errlen);
}

int32_t engine_prompt_chat(const engine_t *e, const chat_msg_t *msgs, size_t n, const char *tools_json,
                           int32_t **out, char *err, size_t errlen)
{
    return engine_prompt_chat_prefix(e, msgs, n, tools_json, SIZE_MAX, out, NULL, err, errlen);
}

int32_t engine_prompt_chat_prefix(const engine_t *e, const chat_msg_t *msgs, size_t n,
                                  const char *tools_json, size_t max_bytes, int32_t **out,
                                  bool *truncated, char *err, size_t errlen)
{
    chat_render_opts_t o = {.tools_json = tools_json, .add_generation_prompt = true, .enable_thinking = -1};
    return prompt_chat(e, msgs, n, &o, max_bytes, out, truncated, err, errlen);
}

static int32_t prompt_chat(const engine_t *e, const chat_msg_t *msgs, size_t n, const chat_render_opts_t *o,
                           size_t max_bytes, int32_t **out, bool *truncated, char *err, size_t errlen)
{
    char *prompt = NULL;
    size_t plen = 0;
    if (chat_template_render_opts(e->tmpl, msgs, n, o, &prompt, &plen, err, errlen) != 0)
        return -1;
    if (truncated)
        *truncated = plen > max_bytes;
    if (plen > max_bytes)
        plen = max_bytes;
    /* The template writes BOS itself when the family wants it; the
     * tokenizer's add_bos must not add a second one. */
    size_t bl = 0;
    int32_t bos = tokenizer_bos(e->tok);
    const char *bt = bos >= 0 ? tokenizer_token_text(e->tok, bos, &bl) : NULL;
    bool has_bos = bt && bl && plen >= bl && memcmp(prompt, bt, bl) == 0;
    int32_t r = encode(e, prompt, plen, !has_bos, true, out, err, errlen);
    free(prompt);
    return r;
}
