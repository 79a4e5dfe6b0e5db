/* engine.c — loads model, tokenizer and chat template from one GGUF file and
 * turns text or chat messages into prompt token ids (see engine.h). */
#include "worker/engine.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/text/prompt.h"
#include "common/xalloc.h"
#include "proto/submit_prompt.h"
#include "worker/kernels/qgemm.h"

engine_t *engine_load(const char *path, char *err, size_t errlen)
{
    engine_t *e = xcalloc(1, sizeof *e);
    if (model_load(path, &e->model, err, errlen) != 0)
        goto err;
    e->text = text_model_from_gguf(e->model->gguf, e->model->cfg.vocab, path, err, errlen);
    if (!e->text)
        goto err;
    e->tok = e->text->tok;
    e->tmpl = e->text->tmpl;
    e->turn_end_ids = e->text->turn_end_ids;
    e->n_turn_end = e->text->n_turn_end;
    log_info("loaded %s: chat template %s (%s)", path,
             chat_family_name(chat_template_family(e->tmpl)), chat_template_variant(e->tmpl));
    return e;
err:
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
    for (int32_t i = 0; i < e->n_lora; i++)
        lora_free(&e->lora[i].ad);
    text_model_free(&e->text);
    model_free(&e->model);
    free(e);
    *pe = NULL;
}

int engine_add_lora(engine_t *e, const char *spec, char *err, size_t errlen)
{
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) > PROTO_MAX_NAME || !eq[1])
        return errbuf_set(err, errlen, "--lora %s: expected NAME=FILE[:SCALE], NAME 1..%d bytes", spec,
                          PROTO_MAX_NAME);
    char name[PROTO_MAX_NAME + 1], *path = xstrdup(eq + 1);
    snprintf(name, sizeof name, "%.*s", (int)(eq - spec), spec);
    float scale = 1.0f;
    char *colon = strrchr(path, ':');
    if (colon) { /* ":SCALE" only when what follows is a whole number */
        char *end;
        double v = strtod(colon + 1, &end);
        if (end != colon + 1 && *end == '\0') {
            if (!(v >= -100 && v <= 100)) {
                free(path);
                return errbuf_set(err, errlen, "--lora %s: scale %g outside [-100, 100]", spec, v);
            }
            scale = (float)v;
            *colon = '\0';
        }
    }
    char lerr[512];
    int rc = engine_load_lora(e, name, path, scale, lerr, sizeof lerr);
    if (rc != 0)
        errbuf_set(err, errlen, "--lora %s: %s", spec, lerr);
    free(path);
    return rc;
}

int engine_load_lora(engine_t *e, const char *name, const char *path, float scale, char *err, size_t errlen)
{
    if (!*name || strlen(name) > PROTO_MAX_NAME)
        return errbuf_set(err, errlen, "an adapter name is 1..%d bytes", PROTO_MAX_NAME);
    if (engine_find_lora(e, name))
        return errbuf_set(err, errlen, "the name %s is used twice", name);
    if (e->n_lora >= LORA_MAX_ADAPTERS)
        return errbuf_set(err, errlen, "at most %d adapters per worker", LORA_MAX_ADAPTERS);
    engine_lora_t *l = &e->lora[e->n_lora];
    char lerr[256];
    if (lora_load(path, e->model, &l->ad, lerr, sizeof lerr) != 0)
        return errbuf_set(err, errlen, "%s", lerr);
    snprintf(l->name, sizeof l->name, "%s", name);
    l->scale = scale;
    e->n_lora++;
    log_info("adapter %s: %s, %d matrices, rank up to %d, alpha %g, %.1f MB", name, path, l->ad->n_pairs,
             l->ad->max_rank, (double)l->ad->alpha, (double)lora_bytes(l->ad) / 1e6);
    return 0;
}

int engine_unload_lora(engine_t *e, const char *name)
{
    for (int32_t i = 0; i < e->n_lora; i++)
        if (strcmp(e->lora[i].name, name) == 0) {
            lora_free(&e->lora[i].ad); /* the engine's reference; requests keep theirs */
            memmove(&e->lora[i], &e->lora[i + 1], (size_t)(e->n_lora - i - 1) * sizeof *e->lora);
            e->n_lora--;
            log_info("adapter %s unloaded", name);
            return 0;
        }
    return -1;
}

const engine_lora_t *engine_find_lora(const engine_t *e, const char *name)
{
    for (int32_t i = 0; i < e->n_lora; i++)
        if (strcmp(e->lora[i].name, name) == 0)
            return &e->lora[i];
    return NULL;
}

int32_t engine_prompt_text(const engine_t *e, const char *text, size_t len, int32_t **out,
                           char *err, size_t errlen)
{
    return prompt_text(e->text, text, len, SIZE_MAX, out, NULL, err, errlen);
}

int32_t engine_prompt_chat(const engine_t *e, const chat_msg_t *msgs, size_t n, const char *tools_json,
                           int32_t **out, char *err, size_t errlen)
{
    chat_render_opts_t o = {.tools_json = tools_json, .add_generation_prompt = true, .enable_thinking = -1};
    return prompt_chat(e->text, msgs, n, &o, SIZE_MAX, out, NULL, err, errlen);
}

int32_t engine_prompt_submit(const engine_t *e, const proto_submit_t *s, int32_t **out, char *err,
                             size_t errlen)
{
    return submit_prompt_encode(e->text, s, SIZE_MAX, out, NULL, err, errlen);
}

/* text[0..len) tokenized (no BOS, special texts as the caller says) onto
 * the end of ids[0..*n) (capacity *cap, grown). Returns 0, or -1 with err. */
static int append_tokens(const tokenizer_t *t, const char *text, size_t len, bool parse_special, int32_t **ids,
                         int32_t *n, int32_t *cap, char *err, size_t errlen)
{
    if (len > TOKENIZER_MAX_TEXT) {
        errbuf_set(err, errlen, "text of %zu bytes is longer than the tokenizer takes", len);
        return -1;
    }
    int need = (int)(4 * len + 4);
    if (*n + need > *cap) {
        *cap = *n + need;
        *ids = xrealloc(*ids, (size_t)*cap * sizeof **ids);
    }
    int k = tokenizer_encode(t, text, len, false, parse_special, *ids + *n, need);
    if (k < 0 || k > need) {
        errbuf_set(err, errlen, "cannot tokenize a text of %zu bytes", len);
        return -1;
    }
    *n += k;
    return 0;
}

/* One id onto ids (room is kept by the caller's capacity + 4 slack). */
static void push_id(int32_t **ids, int32_t *n, int32_t *cap, int32_t id)
{
    if (*n + 1 > *cap) {
        *cap = *n + 8;
        *ids = xrealloc(*ids, (size_t)*cap * sizeof **ids);
    }
    (*ids)[(*n)++] = id;
}

/* A bool of the file's metadata, def when absent. */
static bool meta_bool(const engine_t *e, const char *key, bool def)
{
    bool v;
    return gguf_get_bool(e->model->gguf, key, &v) == 0 ? v : def;
}

int32_t engine_prompt_rerank(const engine_t *e, const char *query, size_t query_len, const char *doc,
                             size_t doc_len, int32_t **out, char *err, size_t errlen)
{
    int32_t *ids = NULL, n = 0, cap = 0;
    gguf_str_t tmpl;
    *out = NULL;
    if (gguf_get_str(e->model->gguf, "tokenizer.chat_template.rerank", &tmpl) == 0) {
        /* the template with its placeholders replaced, then tokenized whole */
        strbuf_t text = STRBUF_INIT;
        strbuf_reserve(&text, (size_t)tmpl.len);
        for (size_t i = 0; i < (size_t)tmpl.len;) {
            const char *rest = tmpl.ptr + i;
            size_t left = (size_t)tmpl.len - i;
            const char *put = NULL;
            size_t put_len = 0, skip = 1;
            if (left >= 7 && memcmp(rest, "{query}", 7) == 0) {
                put = query, put_len = query_len, skip = 7;
            } else if (left >= 10 && memcmp(rest, "{document}", 10) == 0) {
                put = doc, put_len = doc_len, skip = 10;
            } else {
                put = rest, put_len = 1;
            }
            strbuf_append(&text, put, put_len);
            i += skip;
        }
        int rc = append_tokens(e->tok, text.s, text.len, true, &ids, &n, &cap, err, errlen);
        strbuf_free(&text);
        if (rc < 0) {
            free(ids);
            return -1;
        }
        *out = ids;
        return n;
    }
    const bool add_eos = meta_bool(e, "tokenizer.ggml.add_eos_token", false);
    const bool add_sep = meta_bool(e, "tokenizer.ggml.add_sep_token", false);
    int64_t sep = -1;
    if (gguf_get_int(e->model->gguf, "tokenizer.ggml.seperator_token_id", &sep) != 0 || sep < 0 ||
        sep >= tokenizer_n_vocab(e->tok))
        sep = -1;
    int32_t eos = tokenizer_eos(e->tok) >= 0 ? tokenizer_eos(e->tok) : (int32_t)sep;
    if (tokenizer_add_bos(e->tok) && tokenizer_bos(e->tok) >= 0)
        push_id(&ids, &n, &cap, tokenizer_bos(e->tok));
    if (append_tokens(e->tok, query, query_len, false, &ids, &n, &cap, err, errlen) < 0)
        goto err;
    if (add_eos && eos >= 0)
        push_id(&ids, &n, &cap, eos);
    if (add_sep && sep >= 0)
        push_id(&ids, &n, &cap, (int32_t)sep);
    if (append_tokens(e->tok, doc, doc_len, false, &ids, &n, &cap, err, errlen) < 0)
        goto err;
    if (add_eos && eos >= 0)
        push_id(&ids, &n, &cap, eos);
    *out = ids;
    return n;
err:
    free(ids);
    return -1;
}
