/* gateway.c — the gateway core: one thread that owns the ZeroMQ ROUTER
 * socket and the worker table, serves commands from the HTTP threads, keeps
 * workers' liveness and sends heartbeats (see gateway.h). */
#include "gateway/gateway.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

/* ------------------------------------------------------------------------ */
/* worker table                                                              */

static const char *worker_state_name(gateway_worker_state_t s)
{
    return s == GATEWAY_WORKER_DRAINING ? "draining" : "ready";
}

static gateway_worker_t *worker_by_peer(struct gateway *gw, const proto_peer_t *p)
{
    for (size_t i = 0; i < gw->n_workers; i++) {
        gateway_worker_t *w = &gw->workers[i];
        if (w->peer.len == p->len && memcmp(w->peer.id, p->id, p->len) == 0)
            return w;
    }
    return NULL;
}

static gateway_worker_t *worker_by_replica(struct gateway *gw, const char *replica)
{
    for (size_t i = 0; i < gw->n_workers; i++)
        if (strcmp(gw->workers[i].reg.replica, replica) == 0)
            return &gw->workers[i];
    return NULL;
}

static void worker_remove(struct gateway *gw, gateway_worker_t *w, const char *why)
{
    log_info("worker %s (model %s) removed: %s", w->reg.replica, w->reg.model, why);
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = w->reg};
    proto_msg_clear(&m); /* frees the registration's strings */
    size_t i = (size_t)(w - gw->workers);
    gw->workers[i] = gw->workers[--gw->n_workers];
}

static int64_t worker_expiry_us(const gateway_worker_t *w)
{
    return w->t_last_seen_us + PROTO_LIVENESS * w->interval_us;
}

/* ------------------------------------------------------------------------ */
/* messages from workers                                                     */

static void send_to(struct gateway *gw, gateway_worker_t *w, const proto_peer_t *peer,
                    const proto_msg_t *m)
{
    /* ROUTER sends never block here: ZMQ_DONTWAIT, and ROUTER_MANDATORY
     * turns "peer gone" into EHOSTUNREACH instead of a silent drop. */
    if (proto_send(gw->router, peer, m, ZMQ_DONTWAIT) == PROTO_OK)
        return;
    if (errno == EHOSTUNREACH && w) {
        gw->n_workers_lost++;
        worker_remove(gw, w, "connection closed");
    }
    else if (errno != EHOSTUNREACH)
        log_warn("send %s to %s: %s", proto_type_name(m->type), w ? w->reg.replica : "peer",
                 zmq_strerror(errno));
}

static void send_heartbeat(struct gateway *gw, gateway_worker_t *w)
{
    proto_msg_t hb;
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.heartbeat.seq = gw->heartbeat_seq;
    hb.heartbeat.heartbeat_ms = (uint32_t)gw->heartbeat_ms;
    send_to(gw, w, &w->peer, &hb);
}

static void on_register(struct gateway *gw, const proto_peer_t *from, proto_msg_t *m,
                        int64_t now)
{
    proto_register_t *r = &m->reg;
    gateway_worker_t *w = worker_by_peer(gw, from);
    if (!w) {
        /* the same process on a new connection replaces its old entry */
        gateway_worker_t *old = worker_by_replica(gw, r->replica);
        if (old)
            worker_remove(gw, old, "re-registered on a new connection");
        if (gw->n_workers == gw->cap_workers) {
            gw->cap_workers = gw->cap_workers ? 2 * gw->cap_workers : 8;
            gw->workers = xrealloc(gw->workers, gw->cap_workers * sizeof *gw->workers);
        }
        w = &gw->workers[gw->n_workers++];
        memset(w, 0, sizeof *w);
        w->peer = *from;
        w->t_registered_us = now;
    } else {
        proto_msg_t old = {.type = PROTO_REGISTER, .reg = w->reg};
        proto_msg_clear(&old);
    }
    w->reg = *r;
    memset(r, 0, sizeof *r); /* the table owns the strings now */
    m->type = 0;
    w->state = GATEWAY_WORKER_READY;
    w->t_last_seen_us = now;
    w->interval_us = (int64_t)(w->reg.heartbeat_ms ? w->reg.heartbeat_ms : PROTO_HEARTBEAT_MS) * 1000;
    log_info("worker %s registered: model %s, capacity %u, n_ctx %u, %u KV blocks of %u, "
             "heartbeat %u ms (%zu connected)",
             w->reg.replica, w->reg.model, w->reg.capacity, w->reg.n_ctx, w->reg.kv_blocks,
             w->reg.block_size, (unsigned)(w->interval_us / 1000), gw->n_workers);
    /* an immediate heartbeat doubles as the acknowledgement */
    send_heartbeat(gw, w);
}

static void on_message(struct gateway *gw, const proto_peer_t *from, proto_msg_t *m)
{
    int64_t now = clock_now_us();
    if (m->type == PROTO_REGISTER) {
        on_register(gw, from, m, now);
        return;
    }
    gateway_worker_t *w = worker_by_peer(gw, from);
    if (!w) {
        /* e.g. we restarted, or dropped it for silence: ask it to register */
        proto_msg_t e;
        proto_msg_init(&e, PROTO_ERROR);
        e.error.code = PROTO_CODE_NOT_REGISTERED;
        e.error.message = "not registered: send REGISTER";
        log_debug("%s from an unregistered connection: asking it to register",
                  proto_type_name(m->type));
        send_to(gw, NULL, from, &e);
        return;
    }
    w->t_last_seen_us = now;
    switch (m->type) {
    case PROTO_HEARTBEAT:
        w->t_last_heartbeat_us = now;
        w->heartbeat_seq = m->heartbeat.seq;
        if (m->heartbeat.heartbeat_ms)
            w->interval_us = (int64_t)m->heartbeat.heartbeat_ms * 1000;
        if (m->heartbeat.has_load) {
            w->has_load = true;
            w->load = m->heartbeat.load;
        }
        break;
    case PROTO_EVENT:
        /* request routing arrives with the request queue; until then an
         * EVENT cannot belong to anything */
        log_debug("EVENT for unknown request %" PRIu64 " from %s", m->event.id, w->reg.replica);
        break;
    case PROTO_ERROR:
        log_warn("worker %s: error %u on request %" PRIu64 ": %s", w->reg.replica,
                 m->error.code, m->error.id, m->error.message);
        break;
    default:
        log_warn("worker %s sent %s, which only the gateway sends: dropped", w->reg.replica,
                 proto_type_name(m->type));
        break;
    }
}

/* Reads what is queued on the ROUTER, at most a batch so commands and
 * heartbeats are not starved by a chatty worker. */
static void drain_router(struct gateway *gw)
{
    for (int i = 0; i < 256; i++) {
        proto_peer_t from;
        proto_msg_t m;
        char err[256];
        int rc = proto_recv(gw->router, &from, &m, ZMQ_DONTWAIT, err, sizeof err);
        if (rc == PROTO_ESYS) {
            if (errno != EAGAIN && errno != EINTR)
                log_error("zmq recv: %s", zmq_strerror(errno));
            return;
        }
        if (rc != PROTO_OK) {
            gw->n_malformed++;
            gateway_worker_t *w = worker_by_peer(gw, &from);
            log_warn("dropped malformed message from %s: %s (%s)",
                     w ? w->reg.replica : "unregistered peer", proto_status_name(rc), err);
            continue;
        }
        on_message(gw, &from, &m);
        proto_msg_clear(&m);
    }
}

/* ------------------------------------------------------------------------ */
/* commands from other threads                                               */

static json_t *health_json(struct gateway *gw)
{
    int64_t now = clock_now_us();
    json_t *workers = json_array();
    for (size_t i = 0; i < gw->n_workers; i++) {
        const gateway_worker_t *w = &gw->workers[i];
        int64_t left_us = worker_expiry_us(w) - now;
        int64_t liveness = left_us <= 0 ? 0 : (left_us + w->interval_us - 1) / w->interval_us;
        json_t *load = json_null();
        if (w->has_load) {
            const proto_load_t *l = &w->load;
            load = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                             "running", (json_int_t)l->running,
                             "waiting", (json_int_t)l->waiting,
                             "kv_blocks_used", (json_int_t)l->kv_blocks_used,
                             "kv_blocks_total", (json_int_t)l->kv_blocks_total,
                             "free_slots", (json_int_t)l->free_slots,
                             "prefix_cache_queries", (json_int_t)l->prefix_cache_queries,
                             "prefix_cache_hits", (json_int_t)l->prefix_cache_hits,
                             "preemptions", (json_int_t)l->preemptions,
                             "tokens_generated", (json_int_t)l->tokens_generated,
                             "prompt_tokens", (json_int_t)l->prompt_tokens);
        }
        int64_t last = w->t_last_heartbeat_us ? w->t_last_heartbeat_us : w->t_last_seen_us;
        json_array_append_new(
            workers,
            json_pack("{s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o}",
                      "id", w->reg.replica, "model", w->reg.model, "host", w->reg.host,
                      "pid", (json_int_t)w->reg.pid, "state", worker_state_name(w->state),
                      "last_heartbeat_ms_ago", (json_int_t)((now - last) / 1000),
                      "liveness", (json_int_t)liveness,
                      "capacity", (json_int_t)w->reg.capacity,
                      "n_ctx", (json_int_t)w->reg.n_ctx,
                      "n_vocab", (json_int_t)w->reg.n_vocab,
                      "kv_blocks", (json_int_t)w->reg.kv_blocks,
                      "block_size", (json_int_t)w->reg.block_size, "load", load));
    }
    return json_pack("{s:s, s:i, s:o}", "status", gw->n_workers ? "ok" : "no_workers",
                     "heartbeat_ms", gw->heartbeat_ms, "workers", workers);
}

static void cmd_free(void *p)
{
    gateway_cmd_t *cmd = p;
    chan_unref(&cmd->reply);
    free(cmd);
}

static void json_item_free(void *p)
{
    json_decref(p);
}

static void on_command(struct gateway *gw, gateway_cmd_t *cmd)
{
    switch (cmd->kind) {
    case GATEWAY_CMD_HEALTH: {
        json_t *j = health_json(gw);
        if (chan_push(cmd->reply, j) < 0)
            json_decref(j); /* the asker gave up */
        break;
    }
    }
    cmd_free(cmd);
}

json_t *gateway_health(struct gateway *gw, int64_t timeout_us)
{
    chan_t *reply = chan_new(json_item_free, 0);
    gateway_cmd_t *cmd = xcalloc(1, sizeof *cmd);
    cmd->kind = GATEWAY_CMD_HEALTH;
    cmd->reply = chan_ref(reply);
    if (chan_push(gw->inbox, cmd) < 0) {
        cmd_free(cmd);
        chan_unref(&reply);
        return NULL;
    }
    json_t *j = chan_pop(reply, timeout_us);
    chan_close(reply); /* a late answer is freed with the channel */
    chan_unref(&reply);
    return j;
}

/* ------------------------------------------------------------------------ */
/* the core loop                                                             */

static void tick(struct gateway *gw, int64_t now)
{
    /* forget workers that went silent: iterate backwards, removal moves the
     * last entry into the gap */
    for (size_t i = gw->n_workers; i-- > 0;) {
        gateway_worker_t *w = &gw->workers[i];
        if (now >= worker_expiry_us(w)) {
            gw->n_workers_lost++;
            char why[96];
            snprintf(why, sizeof why, "no message for %lld ms (%d heartbeat intervals)",
                     (long long)((now - w->t_last_seen_us) / 1000), PROTO_LIVENESS);
            worker_remove(gw, w, why);
        }
    }
    if (now >= gw->t_next_heartbeat_us) {
        for (size_t i = gw->n_workers; i-- > 0;)
            send_heartbeat(gw, &gw->workers[i]);
        gw->heartbeat_seq++;
        gw->t_next_heartbeat_us += (int64_t)gw->heartbeat_ms * 1000;
        if (gw->t_next_heartbeat_us <= now) /* we were stalled: do not burst */
            gw->t_next_heartbeat_us = now + (int64_t)gw->heartbeat_ms * 1000;
    }
}

static void *core_main(void *arg)
{
    struct gateway *gw = arg;
    gw->t_next_heartbeat_us = clock_now_us() + (int64_t)gw->heartbeat_ms * 1000;
    for (;;) {
        int64_t now = clock_now_us();
        int64_t wake = gw->t_next_heartbeat_us;
        for (size_t i = 0; i < gw->n_workers; i++)
            if (worker_expiry_us(&gw->workers[i]) < wake)
                wake = worker_expiry_us(&gw->workers[i]);
        long timeout_ms = wake <= now ? 0 : (long)((wake - now + 999) / 1000);
        zmq_pollitem_t items[2] = {
            {.socket = gw->router, .events = ZMQ_POLLIN},
            {.socket = NULL, .fd = chan_fd(gw->inbox), .events = ZMQ_POLLIN},
        };
        if (zmq_poll(items, 2, timeout_ms) < 0) {
            if (errno == EINTR)
                continue;
            log_error("zmq_poll: %s", zmq_strerror(errno));
            break;
        }
        if (items[0].revents & ZMQ_POLLIN)
            drain_router(gw);
        if (items[1].revents & ZMQ_POLLIN) {
            gateway_cmd_t *cmd;
            while ((cmd = chan_pop(gw->inbox, 0)))
                on_command(gw, cmd);
            if (chan_closed(gw->inbox))
                break;
        }
        tick(gw, clock_now_us());
    }
    log_debug("core thread stops");
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* lifetime                                                                  */

struct gateway *gateway_new(const gateway_config_t *cfg)
{
    struct gateway *gw = xcalloc(1, sizeof *gw);
    gw->worker_endpoint = xstrdup(cfg->worker_endpoint);
    gw->heartbeat_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : PROTO_HEARTBEAT_MS;
    gw->inbox = chan_new(cmd_free, CHAN_FD);
    gw->zctx = zmq_ctx_new();
    if (!gw->zctx) {
        log_error("zmq_ctx_new: %s", zmq_strerror(errno));
        goto err;
    }
    gw->router = zmq_socket(gw->zctx, ZMQ_ROUTER);
    if (!gw->router) {
        log_error("zmq_socket: %s", zmq_strerror(errno));
        goto err;
    }
    int linger = 0, mandatory = 1;
    int64_t maxmsg = (int64_t)PROTO_MAX_BODY + 1024; /* a bigger frame drops the peer */
    zmq_setsockopt(gw->router, ZMQ_LINGER, &linger, sizeof linger);
    zmq_setsockopt(gw->router, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory);
    zmq_setsockopt(gw->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    if (zmq_bind(gw->router, gw->worker_endpoint) != 0) {
        log_error("cannot bind worker endpoint %s: %s", gw->worker_endpoint,
                  zmq_strerror(errno));
        goto err;
    }
    char bound[256] = "";
    size_t bound_len = sizeof bound;
    if (zmq_getsockopt(gw->router, ZMQ_LAST_ENDPOINT, bound, &bound_len) == 0 && bound[0]) {
        free(gw->worker_endpoint);
        gw->worker_endpoint = xstrdup(bound);
    }
    if (pthread_create(&gw->core, NULL, core_main, gw) != 0) {
        log_error("cannot start the core thread");
        goto err;
    }
    gw->core_started = true;
    log_info("workers connect to %s (heartbeat %d ms)", gw->worker_endpoint, gw->heartbeat_ms);
    return gw;
err:
    gateway_free(&gw);
    return NULL;
}

void gateway_free(struct gateway **gwp)
{
    struct gateway *gw = *gwp;
    if (!gw)
        return;
    *gwp = NULL;
    chan_close(gw->inbox); /* the core sees the fd, drains, and returns */
    if (gw->core_started)
        pthread_join(gw->core, NULL);
    while (gw->n_workers)
        worker_remove(gw, &gw->workers[gw->n_workers - 1], "gateway stopping");
    free(gw->workers);
    if (gw->router)
        zmq_close(gw->router);
    if (gw->zctx)
        zmq_ctx_term(gw->zctx);
    chan_unref(&gw->inbox);
    free(gw->worker_endpoint);
    free(gw);
}
