/* worker_lora.c — the adapter references of a worker's running requests
 * (see worker_lora.h). A linear table: a worker runs at most its capacity
 * of requests, and only those with adapters are in it. */
#include "worker/worker_lora.h"

#include <stdlib.h>

#include "common/vec.h"

void worker_lora_hold(worker_lora_holds_t *hs, const sched_req_t *r)
{
    if (r->lora.n <= 0)
        return;
    vec_reserve(hs->h, hs->cap, hs->n + 1);
    worker_lora_hold_t *h = &hs->h[hs->n++];
    *h = (worker_lora_hold_t){.id = r->id, .left = r->n_choices > 1 ? r->n_choices : 1, .n = r->lora.n};
    for (int32_t i = 0; i < r->lora.n; i++)
        h->ad[i] = lora_ref((lora_t *)r->lora.ad[i]); /* the set's pointers are the engine's */
}

static void release_at(worker_lora_holds_t *hs, size_t i)
{
    for (int32_t k = 0; k < hs->h[i].n; k++)
        lora_free(&hs->h[i].ad[k]);
    hs->h[i] = hs->h[--hs->n];
}

void worker_lora_finished(worker_lora_holds_t *hs, uint64_t id)
{
    for (size_t i = 0; i < hs->n; i++)
        if (hs->h[i].id == id) {
            if (--hs->h[i].left <= 0)
                release_at(hs, i);
            return;
        }
}

void worker_lora_release_all(worker_lora_holds_t *hs)
{
    while (hs->n > 0)
        release_at(hs, hs->n - 1);
}

void worker_lora_holds_free(worker_lora_holds_t *hs)
{
    worker_lora_release_all(hs);
    free(hs->h);
    *hs = (worker_lora_holds_t){0};
}
