/* run_image.c — an image and a prompt into a prompt with an image span
 * (see run_image.h). */
#include "worker/tools/run_image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/image/image.h"
#include "common/xalloc.h"
#include "common/text/chat_template.h"
#include "common/text/image_run.h"
#include "common/text/tokenizer.h"
#include "worker/tools/image_dump.h"

/* 64-bit FNV-1a of the pixels and size: the image's key in the prefix cache */
static uint64_t image_key(const uint8_t *rgb, size_t n, int w, int h)
{
    uint64_t x = 0xcbf29ce484222325ull ^ ((uint64_t)(uint32_t)w << 32 | (uint32_t)h);
    for (size_t i = 0; i < n; i++)
        x = (x ^ rgb[i]) * 0x100000001b3ull;
    return x;
}

/* The images to encode for one picture (run_image.h): *n of them, side S
 * each, into a malloc'd array of malloc'd (S, S, 3) buffers; *nx, *ny the
 * tile grid. 0, or -1 with err. */
static int prepare(const vision_config_t *c, const vision_proj_info_t *pi, const image_rgb_t *src,
                   image_rgb_t **out, int *n, int32_t *nx, int32_t *ny, char *err, size_t errlen)
{
    const int32_t S = c->image_size;
    int32_t rw, rh; /* image_tiles computes them again */
    *nx = *ny = 0;
    if (pi->tile_fmt &&
        image_run_grid((int32_t)src->w, (int32_t)src->h, S, c->longest_edge, nx, ny, &rw, &rh) != 0)
        return errbuf_set(err, errlen, "a %ux%u image makes more than %d tiles of %d px", src->w, src->h,
                          IMAGE_RUN_MAX_TILES, S);
    *n = *nx * *ny + 1;
    *out = xcalloc((size_t)*n, sizeof **out);
    if (!pi->tile_fmt) { /* as it is: the encoder checks the size */
        (*out)[0] = (image_rgb_t){src->w, src->h, xmalloc((size_t)src->w * src->h * 3)};
        memcpy((*out)[0].rgb, src->rgb, (size_t)src->w * src->h * 3);
        return 0;
    }
    image_tiles(src, (uint32_t)S, (uint32_t)*nx, (uint32_t)*ny, *out);
    return 0;
}

int32_t run_image_prompt(const engine_t *e, vision_t *v, const char *path, const char *prompt, int32_t **ids,
                         sched_image_t **imgs, int *n_imgs, float **embd, int64_t *t_encode_us, const char *dump,
                         char *err, size_t errlen)
{
    const vision_config_t *c = vision_config(v);
    const vision_proj_info_t *pi = vision_proj_info(c->proj);
    *ids = NULL;
    *embd = NULL;
    *imgs = NULL;
    *n_imgs = 0;
    if (c->out_dim != e->model->cfg.dim)
        return errbuf_set(err, errlen, "the projector writes rows of %d, the model's width is %d", c->out_dim,
                          e->model->cfg.dim);
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
    uint64_t key = image_key(rgb, (size_t)w * h * 3, w, h);
    image_rgb_t src = {(uint32_t)w, (uint32_t)h, (uint8_t *)rgb}, *parts = NULL;
    int n_parts = 0;
    int32_t nx, ny;
    int rc = prepare(c, pi, &src, &parts, &n_parts, &nx, &ny, err, errlen);
    free(buf);
    if (rc != 0)
        return -1;
    const size_t rows = (size_t)c->n_tok * c->out_dim;
    *embd = xmalloc((size_t)n_parts * rows * sizeof(float));
    int64_t t0 = clock_now_us();
    for (int i = 0; i < n_parts && rc == 0; i++)
        rc = vision_encode(v, parts[i].rgb, (int)parts[i].w, (int)parts[i].h, *embd + (size_t)i * rows, err,
                           errlen);
    if (t_encode_us)
        *t_encode_us = clock_now_us() - t0;
    if (rc == 0 && dump)
        rc = image_dump_write(dump, parts, n_parts, nx, ny, *embd, c->n_tok, c->out_dim, err, errlen);
    for (int i = 0; i < n_parts; i++)
        image_rgb_free(&parts[i]);
    free(parts);
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
    int32_t pos[IMAGE_RUN_MAX_TILES + 1];
    int k = image_run_append_grid(e->tok, image_run_find(pi->name), c->n_tok, nx, ny, ids, &n, &icap, pos, err,
                                  errlen);
    if (k != n_parts) {
        free(text);
        goto err;
    }
    *imgs = xcalloc((size_t)k, sizeof **imgs);
    for (int i = 0; i < k; i++) /* each span its own key: the same picture's tiles differ */
        (*imgs)[i] = (sched_image_t){.pos = pos[i], .n_tok = c->n_tok, .embd = *embd + (size_t)i * rows,
                                     .key = key ^ (0x9E3779B97F4A7C15ull * (uint64_t)i),
                                     .causal = !pi->non_causal};
    *n_imgs = k;
    const char *after = mk + sizeof RUN_IMAGE_MARKER - 1;
    image_run_append_text(e->tok, after, strlen(after), ids, &n, &icap);
    free(text);
    return n;
err:
    free(*ids);
    free(*embd);
    free(*imgs);
    *ids = NULL;
    *embd = NULL;
    *imgs = NULL;
    *n_imgs = 0;
    return -1;
}
