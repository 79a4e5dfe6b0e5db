/* run_image.c — an image and a prompt into a prompt with an image span
 * (see run_image.h). */
#include "worker/tools/run_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/xalloc.h"
#include "common/text/chat_template.h"
#include "common/text/image_run.h"
#include "common/text/tokenizer.h"

/* 64-bit FNV-1a of the pixels and size: the image's key in the prefix cache */
static uint64_t image_key(const uint8_t *rgb, size_t n, int w, int h)
{
    uint64_t x = 0xcbf29ce484222325ull ^ ((uint64_t)(uint32_t)w << 32 | (uint32_t)h);
    for (size_t i = 0; i < n; i++)
        x = (x ^ rgb[i]) * 0x100000001b3ull;
    return x;
}

int32_t run_image_prompt(const engine_t *e, vision_t *v, const char *path, const char *prompt, int32_t **ids,
                         sched_image_t *img, float **embd, int64_t *t_encode_us, char *err, size_t errlen)
{
    const vision_config_t *c = vision_config(v);
    const vision_proj_info_t *pi = vision_proj_info(c->proj);
    *ids = NULL;
    *embd = NULL;
    if (c->out_dim != e->model->cfg.dim)
        return errbuf_set(err, errlen, "the projector writes rows of %d, the model's width is %d", c->out_dim,
                          e->model->cfg.dim);
    /* the placeholder token must be one token of this vocabulary */
    int32_t soft[4];
    if (!pi->tok_begin)
        return errbuf_set(err, errlen, "the prompt layout of %s images is not supported yet (the encoder is)",
                          pi->name);
    if (tokenizer_encode(e->tok, pi->tok_soft, strlen(pi->tok_soft), false, true, soft, 4) != 1 ||
        tokenizer_encode(e->tok, pi->tok_begin, strlen(pi->tok_begin), false, true, soft + 1, 3) != 1)
        return errbuf_set(err, errlen, "the model's vocabulary has no %s / %s token: not a %s text model",
                          pi->tok_soft, pi->tok_begin, pi->name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return errbuf_set(err, errlen, "cannot open %s", path);
    size_t cap = 1 << 20, len = 0;
    uint8_t *buf = xmalloc(cap);
    for (size_t r; (r = fread(buf + len, 1, cap - len, f)) > 0;)
        if ((len += r) == cap && cap < ((size_t)1 << 28))
            buf = xrealloc(buf, cap *= 2);
    fclose(f);
    int w, h;
    const uint8_t *rgb;
    if (vision_ppm_parse(buf, len, &w, &h, &rgb, err, errlen) != 0) {
        free(buf);
        return -1;
    }
    *embd = xmalloc((size_t)c->n_tok * c->out_dim * sizeof(float));
    int64_t t0 = clock_now_us();
    int rc = vision_encode(v, rgb, w, h, *embd, err, errlen);
    if (t_encode_us)
        *t_encode_us = clock_now_us() - t0;
    uint64_t key = image_key(rgb, (size_t)w * h * 3, w, h);
    free(buf);
    if (rc != 0)
        goto err;

    size_t plen = strlen(prompt);
    char *content = xmalloc(plen + sizeof RUN_IMAGE_MARKER);
    memcpy(content, RUN_IMAGE_MARKER, sizeof RUN_IMAGE_MARKER - 1);
    memcpy(content + sizeof RUN_IMAGE_MARKER - 1, prompt, plen + 1);
    chat_msg_t m = {.role = "user", .content = content};
    char *text = NULL;
    size_t tlen = 0;
    rc = chat_template_render(e->tmpl, &m, 1, true, &text, &tlen, err, errlen);
    free(content);
    if (rc != CHAT_TEMPLATE_OK)
        goto err;
    const char *mk = strstr(text, RUN_IMAGE_MARKER);
    if (!mk) {
        free(text);
        errbuf_set(err, errlen, "the chat template dropped the image marker");
        goto err;
    }
    int32_t n = 0, icap = 0;
    if (tokenizer_add_bos(e->tok) && tokenizer_bos(e->tok) >= 0) {
        *ids = xmalloc(sizeof **ids);
        icap = 1;
        (*ids)[n++] = tokenizer_bos(e->tok);
    }
    image_run_append_text(e->tok, text, (size_t)(mk - text), ids, &n, &icap);
    img->pos = image_run_append(e->tok, image_run_find(pi->name), c->n_tok, ids, &n, &icap, err, errlen);
    img->n_tok = c->n_tok;
    img->embd = *embd;
    img->key = key;
    const char *after = mk + sizeof RUN_IMAGE_MARKER - 1;
    image_run_append_text(e->tok, after, strlen(after), ids, &n, &icap);
    free(text);
    return n;
err:
    free(*ids);
    free(*embd);
    *ids = NULL;
    *embd = NULL;
    return -1;
}
