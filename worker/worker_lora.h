/* worker_lora.h — the adapters a worker's running requests hold.
 *
 * An adapter unloaded at run time (LORA without path, proto/msg.h) leaves
 * the engine at once, but a request admitted with it runs to its end with
 * it: each request that names adapters takes a reference on each
 * (lora_ref, worker/model/lora.h) when the scheduler accepts it and drops
 * them when its last choice finishes (or the scheduler drops it), so the
 * adapter's memory goes with its last user.
 *
 *     worker_lora_holds_t hs = {0};
 *     if (sched_submit(...) == SCHED_OK) worker_lora_hold(&hs, &req);
 *     ... on each finishing EVENT: worker_lora_finished(&hs, id);
 *     ... sched_abort_all: worker_lora_release_all(&hs);
 *     worker_lora_holds_free(&hs);
 *
 * One thread (the step loop). Ownership: hs owns its array and the
 * references it took. */
#ifndef PAGODA_WORKER_LORA_HOLDS_H
#define PAGODA_WORKER_LORA_HOLDS_H

#include <stddef.h>
#include <stdint.h>

#include "worker/model/lora.h"
#include "worker/sched.h"

typedef struct worker_lora_hold {
    uint64_t id;                   /* the request */
    int32_t left;                  /* its choices not finished yet */
    int32_t n;                     /* adapters held */
    lora_t *ad[LORA_SET_MAX];      /* (n) one reference each */
} worker_lora_hold_t;

typedef struct worker_lora_holds {
    worker_lora_hold_t *h;         /* (n), cap allocated */
    size_t n, cap;
} worker_lora_holds_t;

/* Request r (accepted by the scheduler) holds its adapters; none: nothing. */
void worker_lora_hold(worker_lora_holds_t *hs, const sched_req_t *r);
/* One choice of request id finished: the last drops the request's references.
 * An id without adapters: nothing. */
void worker_lora_finished(worker_lora_holds_t *hs, uint64_t id);
/* Every request was dropped: drops every reference. */
void worker_lora_release_all(worker_lora_holds_t *hs);
/* worker_lora_release_all and frees the array. */
void worker_lora_holds_free(worker_lora_holds_t *hs);

#endif
