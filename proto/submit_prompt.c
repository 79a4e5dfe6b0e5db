/* submit_prompt.c — a SUBMIT's prompt fields into prompt ids (see
 * submit_prompt.h). */
#include "proto/submit_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/text/image_run.h"
#include "common/text/prompt.h"
#include "common/xalloc.h"

/* The chat messages of s; a message with parts takes its text from
 * texts[i] when texts is given. */
static chat_msg_t *chat_msgs(const proto_submit_t *s, char *const *texts)
{
    chat_msg_t *msgs = xcalloc(s->n_messages ? s->n_messages : 1, sizeof *msgs);
    for (uint32_t i = 0; i < s->n_messages; i++) {
        msgs[i].role = s->messages[i].role;
        msgs[i].content = texts && texts[i] ? texts[i] : s->messages[i].content;
        msgs[i].tool_calls = s->messages[i].tool_calls;
        msgs[i].tool_call_id = s->messages[i].tool_call_id;
    }
    return msgs;
}

static chat_render_opts_t render_opts(const proto_submit_t *s)
{
    return (chat_render_opts_t){.tools_json = s->tools, .add_generation_prompt = true,
                                .enable_thinking = s->has_think ? s->think : -1};
}

int32_t submit_prompt_encode(const text_model_t *t, const proto_submit_t *s, size_t max_bytes,
                             int32_t **out, bool *truncated, char *err, size_t errlen)
{
    if (truncated)
        *truncated = false;
    if (s->kind == PROTO_KIND_CHAT) {
        chat_msg_t *msgs = chat_msgs(s, NULL);
        chat_render_opts_t o = render_opts(s);
        int32_t n = prompt_chat(t, msgs, s->n_messages, &o, max_bytes, out, truncated, err, errlen);
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
    return prompt_text(t, p, strlen(p), max_bytes, out, truncated, err, errlen);
}

/* A message's parts as one text: the text parts and, for each image, the
 * marker, joined with "\n" (as the gateway joins a message's text parts
 * into its content); the images' indexes appended to order[*n_order..]. */
static char *parts_text(const proto_chat_msg_t *m, const char *marker, uint32_t *order, uint32_t *n_order)
{
    size_t len = 1, ml = strlen(marker);
    for (uint32_t k = 0; k < m->n_parts; k++)
        len += (m->parts[k].text ? strlen(m->parts[k].text) : ml) + 1;
    char *text = xmalloc(len), *p = text;
    for (uint32_t k = 0; k < m->n_parts; k++) {
        if (k)
            *p++ = '\n';
        const char *piece = m->parts[k].text ? m->parts[k].text : marker;
        size_t n = strlen(piece);
        memcpy(p, piece, n);
        p += n;
        if (!m->parts[k].text)
            order[(*n_order)++] = m->parts[k].img;
    }
    *p = '\0';
    return text;
}

/* ids += text[0..len) tokenized on its own; the first piece gets the
 * tokenizer's BOS rule unless the template wrote BOS itself (prompt_chat's
 * rule, so a prompt without images tokenizes as it always did). */
static void first_piece(const text_model_t *t, const char *text, size_t len, int32_t **ids, int32_t *n,
                        int32_t *cap)
{
    size_t bl = 0;
    int32_t bos = tokenizer_bos(t->tok);
    const char *bt = bos >= 0 ? tokenizer_token_text(t->tok, bos, &bl) : NULL;
    bool has_bos = bt && bl && len >= bl && memcmp(text, bt, bl) == 0;
    int need = (int)(4 * len + 8);
    *ids = xrealloc(*ids, (size_t)(*cap = need) * sizeof **ids);
    int k = tokenizer_encode(t->tok, text, len, !has_bos, true, *ids, need);
    *n = k > 0 ? k : 0;
}

/* Splits the rendered text at the markers: pieces tokenized one by one,
 * each marker its picture's run (one span per image of the picture: the
 * tiles of its grid, s->imgs[i].nx × ny, then the global image). Returns
 * the count, or -1 with err. */
static int32_t split_render(const text_model_t *t, const proto_submit_t *s, const image_run_info_t *ri,
                            int32_t n_tok, const char *text, const char *marker, const uint32_t *order,
                            uint32_t n_order, int32_t **out, submit_img_span_t *spans, uint32_t *n_spans,
                            char *err, size_t errlen)
{
    int32_t n = 0, cap = 0;
    size_t ml = strlen(marker);
    const char *p = text, *mk;
    uint32_t k = 0;
    for (; (mk = strstr(p, marker)) != NULL; p = mk + ml, k++) {
        if (p == text)
            first_piece(t, p, (size_t)(mk - p), out, &n, &cap);
        else
            image_run_append_text(t->tok, p, (size_t)(mk - p), out, &n, &cap);
        if (k >= n_order)
            return errbuf_set(err, errlen, "the chat template repeated an image");
        const proto_img_t *im = &s->imgs[order[k]];
        int32_t pos[IMAGE_RUN_MAX_TILES + 1];
        int ns = image_run_append_grid(t->tok, ri, n_tok, (int32_t)im->nx, (int32_t)im->ny, out, &n, &cap, pos,
                                       err, errlen);
        if (ns < 0)
            return -1;
        for (int j = 0; j < ns; j++) /* the grid's images follow its first (proto/msg.h imgs) */
            spans[(*n_spans)++] = (submit_img_span_t){.pos = pos[j], .n_tok = n_tok, .img = order[k] + (uint32_t)j};
    }
    if (k != n_order)
        return errbuf_set(err, errlen, "the chat template dropped %u of the %u images", n_order - k, n_order);
    if (p == text)
        first_piece(t, p, strlen(p), out, &n, &cap);
    else
        image_run_append_text(t->tok, p, strlen(p), out, &n, &cap);
    return n;
}

int32_t submit_prompt_encode_images(const text_model_t *t, const proto_submit_t *s, const char *proj,
                                    int32_t n_tok, int32_t **out, submit_img_span_t **spans, uint32_t *n_spans,
                                    char *err, size_t errlen)
{
    *out = NULL;
    *spans = NULL;
    *n_spans = 0;
    if (!s->n_imgs || s->kind != PROTO_KIND_CHAT)
        return submit_prompt_encode(t, s, SIZE_MAX, out, NULL, err, errlen);
    const image_run_info_t *ri = image_run_find(proj);
    if (!ri || n_tok <= 0)
        return errbuf_set(err, errlen, "this model takes no images (its workers have no --mmproj)");
    /* a marker no client text holds: random per render */
    uint64_t r;
    if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
        r = (uint64_t)clock_now_us() * 0x9E3779B97F4A7C15ull;
    char marker[48];
    snprintf(marker, sizeof marker, "<__pagoda_image_%016llx__>", (unsigned long long)r);
    uint32_t n_parts = 0;
    for (uint32_t i = 0; i < s->n_messages; i++)
        n_parts += s->messages[i].n_parts;
    uint32_t *order = xmalloc((n_parts ? n_parts : 1) * sizeof *order), n_order = 0;
    char **texts = xcalloc(s->n_messages ? s->n_messages : 1, sizeof *texts);
    for (uint32_t i = 0; i < s->n_messages; i++)
        if (s->messages[i].n_parts)
            texts[i] = parts_text(&s->messages[i], marker, order, &n_order);
    chat_msg_t *msgs = chat_msgs(s, texts);
    chat_render_opts_t o = render_opts(s);
    char *text = NULL;
    size_t tlen = 0;
    int32_t n = -1;
    size_t n_max = 0; /* spans: each picture's images (the decoder checked its grid) */
    for (uint32_t k = 0; k < n_order; k++)
        n_max += (size_t)s->imgs[order[k]].nx * s->imgs[order[k]].ny + 1;
    if (chat_template_render_opts(t->tmpl, msgs, s->n_messages, &o, &text, &tlen, err, errlen) == 0) {
        *spans = xcalloc(n_max ? n_max : 1, sizeof **spans);
        n = split_render(t, s, ri, n_tok, text, marker, order, n_order, out, *spans, n_spans, err, errlen);
    }
    for (uint32_t i = 0; i < s->n_messages; i++)
        free(texts[i]);
    free(texts);
    free(msgs);
    free(order);
    free(text);
    if (n < 0) {
        free(*out);
        free(*spans);
        *out = NULL;
        *spans = NULL;
        *n_spans = 0;
        return -1;
    }
    return n;
}
