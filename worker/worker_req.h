/* worker_req.h — a scheduler request made from a SUBMIT (bodies in
 * worker.c). Its own header so that worker_image.c, which fills a request's
 * images, needs no worker.h (worker.c calls worker_image.c: no include
 * circle). */
#ifndef PAGODA_WORKER_REQ_H
#define PAGODA_WORKER_REQ_H

#include <stdint.h>

#include "proto/msg.h"
#include "worker/engine.h"
#include "worker/sampler.h"
#include "worker/sched.h"

/* A scheduler request made from a SUBMIT, with the storage it points to.
 * `req` also borrows from the SUBMIT (stop strings, resume ids) and from the
 * engine (end-of-turn ids): both must outlive its sched_submit() call. */
typedef struct worker_req {
    sched_req_t req;
    int32_t *prompt;               /* owned: (req.n_prompt) token ids */
    sampler_bias_t *bias;          /* owned: (req.sampling.n_logit_bias) */
    char *tool_grammar;            /* owned: the grammar of a forced tool call
                                      (tool_choice required/named), or NULL */
    sched_image_t *images;         /* owned: req.images (worker_image.h), or NULL */
    float *img_embd;               /* owned: their rows */
} worker_req_t;

/* Translates one SUBMIT into a scheduler request: templates and tokenizes
 * the prompt (chat messages, text, or ids as given), copies limits, stop
 * strings and sampling parameters, turns deadline_ms into an absolute
 * deadline from now_us (clock_now_us()), and validates the sampling
 * parameters against the vocabulary. Every SUBMIT field the scheduler needs
 * is translated here and nowhere else: a new SUBMIT field lands in this one
 * function. A SUBMIT with images (n_imgs) gets no prompt here (NULL, 0
 * tokens): worker_req_submit_images (worker_image.h) templates and tokenizes
 * it, with the images' runs, and must follow. Returns PROTO_ERR_NONE with
 * *out filled (release with worker_req_clear), or PROTO_ERR_BAD_REQUEST with
 * a message in err and *out cleared (nothing to free). */
proto_err_t worker_req_from_submit(const engine_t *e, const proto_submit_t *sm, int64_t now_us,
                                   worker_req_t *out, char *err, size_t errlen);
/* Frees what worker_req_from_submit allocated and zeroes *r; safe twice. */
void worker_req_clear(worker_req_t *r);

#endif
