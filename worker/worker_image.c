/* worker_image.c — a request's images into its scheduler request (see
 * worker_image.h). */
#include "worker/worker_image.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/prefix_key.h"
#include "common/text/tokenizer.h"
#include "common/xalloc.h"
#include "proto/submit_prompt.h"
#include "worker/worker_req.h"

void worker_vis_info(const vision_t *v, worker_vis_info_t *out)
{
    const vision_config_t *c = vision_config(v);
    const vision_proj_info_t *pi = vision_proj_info(c->proj);
    *out = (worker_vis_info_t){.size = (uint32_t)c->image_size, .n_tok = (uint32_t)c->n_tok, .proj = pi->name,
                               .preproc = pi->tile_fmt && c->longest_edge > 0 ? (uint32_t)c->longest_edge : 0};
}

/* writes the message into err, then refuses */
#define BAD(...) (errbuf_set(err, errlen, __VA_ARGS__), PROTO_ERR_BAD_REQUEST)

void worker_img_batch_init(worker_img_batch_t *b, vision_t *v)
{
    *b = (worker_img_batch_t){.v = v};
}

void worker_img_batch_free(worker_img_batch_t *b)
{
    free(b->rgb);
    free(b->w);
    free(b->h);
    free(b->out);
    free(b->hash);
    free(b->copy);
    *b = (worker_img_batch_t){0};
}

/* rows already in the batch (src) to be copied to dst once it ran */
static void batch_copy(worker_img_batch_t *b, const float *src, float *dst)
{
    if (b->n_copy == b->cap_copy) {
        b->cap_copy = b->cap_copy ? 2 * b->cap_copy : 8;
        b->copy = xrealloc(b->copy, (size_t)b->cap_copy * sizeof *b->copy);
    }
    b->copy[b->n_copy++] = (worker_img_copy_t){.src = src, .dst = dst};
}

/* an image to encode into dst, or a copy when the batch already encodes
 * the same pixels (the same 32-byte hash: another request's image) */
static void batch_image(worker_img_batch_t *b, const worker_img_t *im, float *dst)
{
    for (int i = 0; i < b->n; i++)
        if (memcmp(b->hash[i], im->hash, 32) == 0) {
            batch_copy(b, b->out[i], dst);
            return;
        }
    if (b->n == b->cap) {
        b->cap = b->cap ? 2 * b->cap : 4;
        b->rgb = xrealloc(b->rgb, (size_t)b->cap * sizeof *b->rgb);
        b->w = xrealloc(b->w, (size_t)b->cap * sizeof *b->w);
        b->h = xrealloc(b->h, (size_t)b->cap * sizeof *b->h);
        b->out = xrealloc(b->out, (size_t)b->cap * sizeof *b->out);
        b->hash = xrealloc(b->hash, (size_t)b->cap * sizeof *b->hash);
    }
    b->rgb[b->n] = im->rgb;
    b->w[b->n] = (int)im->w;
    b->h[b->n] = (int)im->h;
    b->out[b->n] = dst;
    b->hash[b->n] = im->hash;
    b->n++;
}

void worker_img_batch_run(worker_img_batch_t *b)
{
    if (b->n > 0) {
        char err[256];
        /* the sizes were checked when each image joined */
        int rc = vision_encode_batch(b->v, b->rgb, b->w, b->h, b->n, b->out, err, sizeof err);
        assert(rc == 0);
        (void)rc;
    }
    for (int i = 0; i < b->n_copy; i++)
        memcpy(b->copy[i].dst, b->copy[i].src,
               (size_t)vision_config(b->v)->n_tok * (size_t)vision_config(b->v)->out_dim * sizeof(float));
    b->n = b->n_copy = 0;
}

proto_err_t worker_req_images_add(struct worker_req *r, vision_t *v, const tokenizer_t *tok,
                                  const worker_img_t *imgs, uint32_t n_imgs, const worker_img_span_t *spans,
                                  uint32_t n_spans, worker_img_batch_t *b, char *err, size_t errlen)
{
    if (n_spans == 0)
        return PROTO_ERR_NONE;
    if (!v)
        return BAD("this model takes no images (its workers have no --mmproj)");
    const vision_config_t *c = vision_config(v);
    const vision_proj_info_t *pi = vision_proj_info(c->proj);
    const char *st = pi->tok_soft;
    int32_t soft = -1;
    if (tokenizer_encode(tok, st, strlen(st), false, true, &soft, 1) != 1)
        return BAD("the model's vocabulary has no image placeholder token %s", st);
    int32_t end = 0;
    for (uint32_t i = 0; i < n_spans; i++) {
        const worker_img_span_t *sp = &spans[i];
        if (sp->img >= n_imgs)
            return BAD("image span %ld names image %ld, past the request's images", (long)i,
                       (long)sp->img);
        const worker_img_t *im = &imgs[sp->img];
        if (im->w != (uint32_t)c->image_size || im->h != (uint32_t)c->image_size || !im->rgb || !im->hash)
            return BAD("image %ld is not %ld pixels square", (long)sp->img, (long)c->image_size);
        if (sp->n_tok != c->n_tok || sp->pos < end || sp->pos > r->req.n_prompt - sp->n_tok)
            return BAD("image span %ld does not hold %ld rows inside the prompt", (long)i,
                       (long)c->n_tok);
        for (int32_t p = sp->pos; p < sp->pos + sp->n_tok; p++)
            if (r->prompt[p] != soft)
                return BAD("image span %ld: position %ld is not the placeholder token", (long)i,
                           (long)p);
        end = sp->pos + sp->n_tok;
    }
    /* each distinct image once: batch_image encodes the first occurrence of
     * a hash and copies its rows to every later one (this request's repeats
     * and other requests' in the same batch); the encode itself is the
     * batch's (worker_img_batch_run) */
    const size_t rows = (size_t)c->n_tok * (size_t)c->out_dim;
    r->img_embd = xmalloc((size_t)n_spans * rows * sizeof(float));
    r->images = xcalloc(n_spans, sizeof *r->images);
    for (uint32_t i = 0; i < n_spans; i++) {
        const worker_img_span_t *sp = &spans[i];
        const worker_img_t *im = &imgs[sp->img];
        float *dst = r->img_embd + (size_t)i * rows;
        batch_image(b, im, dst);
        r->images[i] = (sched_image_t){.pos = sp->pos, .n_tok = sp->n_tok, .embd = dst,
                                       .key = prefix_key_image_key(im->hash), .causal = !pi->non_causal};
    }
    r->req.images = r->images;
    r->req.n_images = (int32_t)n_spans;
    return PROTO_ERR_NONE;
}

proto_err_t worker_req_images(struct worker_req *r, vision_t *v, const tokenizer_t *tok, const worker_img_t *imgs,
                              uint32_t n_imgs, const worker_img_span_t *spans, uint32_t n_spans, char *err,
                              size_t errlen)
{
    worker_img_batch_t b;
    worker_img_batch_init(&b, v);
    proto_err_t rc = worker_req_images_add(r, v, tok, imgs, n_imgs, spans, n_spans, &b, err, errlen);
    if (rc == PROTO_ERR_NONE)
        worker_img_batch_run(&b);
    worker_img_batch_free(&b);
    return rc;
}

proto_err_t worker_req_submit_images(struct worker_req *r, vision_t *v, const engine_t *e,
                                     const proto_submit_t *sm, worker_img_batch_t *b, char *err, size_t errlen)
{
    if (!sm->n_imgs)
        return PROTO_ERR_NONE;
    if (!v)
        return BAD("this model takes no images (its workers have no --mmproj)");
    worker_vis_info_t vi;
    worker_vis_info(v, &vi);
    int32_t *ids;
    submit_img_span_t *sp;
    uint32_t ns;
    int32_t n = submit_prompt_encode_images(e->text, sm, vi.proj, (int32_t)vi.n_tok, &ids, &sp, &ns, err, errlen);
    if (n < 0)
        return PROTO_ERR_BAD_REQUEST;
    free(r->prompt);
    r->prompt = ids;
    r->req.prompt = ids;
    r->req.n_prompt = n;
    worker_img_t *imgs = xcalloc(sm->n_imgs, sizeof *imgs);
    for (uint32_t i = 0; i < sm->n_imgs; i++)
        imgs[i] = (worker_img_t){.rgb = sm->imgs[i].rgb, .w = sm->imgs[i].w, .h = sm->imgs[i].h,
                                 .hash = sm->imgs[i].hash};
    proto_err_t rc = b ? worker_req_images_add(r, v, e->tok, imgs, sm->n_imgs, sp, ns, b, err, errlen)
                       : worker_req_images(r, v, e->tok, imgs, sm->n_imgs, sp, ns, err, errlen);
    free(imgs);
    free(sp);
    return rc;
}
