/* gateway_calls.c — the gateway's side that other threads touch: a
 * request's handle (made from the internal request with its routing keys,
 * reference-counted, its replies pushed by the core and popped by HTTP) and
 * the commands HTTP and main post to the core's inbox (gateway_ask,
 * gateway_submit, gateway_cancel, ...). Declared in gateway.h, the core's
 * own halves (gateway_request_push, gateway_cmd_free) in gateway_core.h.
 * Nothing here calls into gateway.c: the core reads the inbox. */
#include "gateway/gateway.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/splitmix.h"
#include "common/xalloc.h"
#include "gateway/gateway_core.h"
#include "gateway/submit.h"

/* ------------------------------------------------------------------------ */
/* replies and requests                                                      */

void gateway_reply_free(gateway_reply_t **rp)
{
    gateway_reply_t *r = *rp;
    if (!r)
        return;
    *rp = NULL;
    if (r->kind == GATEWAY_REPLY_EVENT) {
        proto_msg_t m = {.type = PROTO_EVENT, .event = r->event};
        proto_msg_clear(&m);
    }
    free(r);
}

static void reply_item_free(void *p)
{
    gateway_reply_t *r = p;
    gateway_reply_free(&r);
}

gateway_request_t *gateway_request_from_oai(struct gateway *gw, const request_t *o,
                                            prio_tier_t tier, uint64_t partition)
{
    gateway_request_t *r = xcalloc(1, sizeof *r);
    r->id = atomic_fetch_add(&gw->next_request_id, 1);
    r->model = xstrdup(o->lora_base ? o->lora_base : o->model); /* an adapter runs on its base */
    r->tier = tier;
    r->t_arrival_us = clock_now_us();
    r->replies = chan_new(reply_item_free, 0);
    pthread_mutex_init(&r->lock, NULL);
    atomic_init(&r->refs, 1);

    proto_msg_init(&r->submit, PROTO_SUBMIT);
    proto_submit_t *s = &r->submit.submit;
    submit_from_request(o, r->id, tier, s);
    s->partition = partition;
    for (size_t i = 0; i < o->n_adapters; i++) { /* gateway/lora_table.h; none = no `lora` key */
        s->lora[s->n_lora++] = (proto_lora_t){.name = xstrdup(o->adapters[i].name), .has_scale = true,
                                              .scale = o->adapters[i].scale};
        metrics_counter_add(gw->m.lora_requests, (const char *[]){r->model, o->adapters[i].name}, 1);
    }
    if (o->affinity_key) {
        /* FNV-1a over model, NUL, key; mixed so its low bits pick a slot.
         * The partition is in it: one tenant's key does not steer another's */
        uint64_t h = 1469598103934665603ull;
        for (const char *p = o->model; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        h *= 1099511628211ull;
        for (const char *p = o->affinity_key; *p; p++)
            h = (h ^ (uint8_t)*p) * 1099511628211ull;
        r->affinity = splitmix64_mix(h ^ splitmix64_mix(partition)) | 1; /* never 0 */
    }
    /* embeddings and rank skip the prefix cache (worker/sched.h): no cache
     * routing. Adapters key blocks in a partition of their own, which the
     * gateway computes as the worker does from the hashes the replicas
     * registered (lora_table_key_partition): none known yet, no keys */
    proto_submit_t keyed = *s; /* a shallow view with the worker's partition */
    if (route_mode_uses_prefix(gw->routing) && gw->route_text && o->op != REQUEST_OP_EMBED &&
        o->op != REQUEST_OP_RANK && lora_table_key_partition(gw->loras, s, &keyed.partition) == 0) {
        int64_t t0 = clock_now_us();
        r->route_block_size = atomic_load(&gw->route_block_size);
        r->n_route_keys = route_text_keys(gw->route_text, r->model, &keyed, &o->vis, r->route_block_size,
                                          &r->route_keys);
        if (r->n_route_keys > 0) {
            const char *lab[] = {r->model};
            metrics_counter_add(gw->m.route_keys_seconds, lab, (double)(clock_now_us() - t0) / 1e6);
            metrics_counter_add(gw->m.route_keys_requests, lab, 1);
        }
    }
    return r;
}

/* The last reference is gone. */
static void request_release(gateway_request_t *r)
{
    proto_msg_clear(&r->submit);
    free(r->sent_ids);
    free(r->route_keys);
    chan_unref(&r->replies);
    pthread_mutex_destroy(&r->lock);
    free(r->model);
    free(r);
}

void gateway_request_unref(gateway_request_t **rp)
{
    gateway_request_t *r = *rp;
    *rp = NULL;
    if (r && atomic_fetch_sub(&r->refs, 1) == 1)
        request_release(r);
}

gateway_request_t *gateway_request_ref(gateway_request_t *r)
{
    atomic_fetch_add(&r->refs, 1);
    return r;
}

void gateway_request_set_notify(gateway_request_t *r, void (*fn)(void *ctx), void *ctx)
{
    pthread_mutex_lock(&r->lock);
    r->notify = fn;
    r->notify_ctx = ctx;
    pthread_mutex_unlock(&r->lock);
}

/* Core: hands a reply to the HTTP side (which may be gone: then it is freed). */
void gateway_request_push(gateway_request_t *r, gateway_reply_t *rep)
{
    if (r->cancelled || chan_push(r->replies, rep) < 0) {
        gateway_reply_free(&rep);
        return;
    }
    pthread_mutex_lock(&r->lock);
    if (r->notify)
        r->notify(r->notify_ctx);
    pthread_mutex_unlock(&r->lock);
}

/* ------------------------------------------------------------------------ */
/* commands other threads post to the core's inbox                           */

void gateway_cmd_free(void *p)
{
    gateway_cmd_t *cmd = p;
    chan_unref(&cmd->reply);
    gateway_request_unref(&cmd->request);
    if (cmd->arg && cmd->arg_free)
        cmd->arg_free(cmd->arg);
    free(cmd->target);
    free(cmd);
}

void *gateway_ask(struct gateway *gw, gateway_cmd_t *cmd, void (*item_free)(void *), int64_t timeout_us)
{
    chan_t *reply = chan_new(item_free, 0);
    cmd->item_free = item_free;
    cmd->reply = chan_ref(reply);
    if (chan_push(gw->inbox, cmd) < 0) {
        gateway_cmd_free(cmd);
        chan_unref(&reply);
        return NULL;
    }
    void *item = chan_pop(reply, timeout_us);
    chan_close(reply); /* a late answer is freed with the channel */
    chan_unref(&reply);
    return item;
}

static void no_free(void *p)
{
    (void)p;
}

void gateway_set_supervisor(struct gateway *gw, struct supervisor *sup)
{
    chan_t *reply = chan_new(no_free, 0);
    gateway_cmd_t *cmd = xcalloc(1, sizeof *cmd);
    cmd->kind = GATEWAY_CMD_SET_SUPERVISOR;
    cmd->sup = sup;
    cmd->reply = chan_ref(reply);
    if (chan_push(gw->inbox, cmd) < 0) {
        gateway_cmd_free(cmd); /* the core is gone: nobody will use the pointer */
    } else {
        /* no timeout: returning early would let the core use a freed supervisor */
        while (!chan_pop(reply, 1000000) && !chan_closed(gw->inbox))
            ;
    }
    chan_close(reply);
    chan_unref(&reply);
}

void gateway_set_stopping(struct gateway *gw)
{
    atomic_store(&gw->stopping, true);
}

size_t gateway_inflight(struct gateway *gw)
{
    return atomic_load(&gw->n_inflight);
}

int gateway_fatal_fd(struct gateway *gw)
{
    return gw->fatal_fd;
}

int gateway_submit(struct gateway *gw, gateway_request_t *r)
{
    gateway_cmd_t *cmd = xcalloc(1, sizeof *cmd);
    cmd->kind = GATEWAY_CMD_SUBMIT;
    cmd->request = gateway_request_ref(r);
    if (chan_push(gw->inbox, cmd) < 0) {
        gateway_cmd_free(cmd);
        return -1;
    }
    return 0;
}

void gateway_cancel(struct gateway *gw, uint64_t id)
{
    gateway_cmd_t *cmd = xcalloc(1, sizeof *cmd);
    cmd->kind = GATEWAY_CMD_CANCEL;
    cmd->id = id;
    if (chan_push(gw->inbox, cmd) < 0)
        gateway_cmd_free(cmd);
}
