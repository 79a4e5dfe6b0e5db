/* gateway.c — the gateway core: one thread that owns the ZeroMQ ROUTER
 * socket, the worker table, the per-model queues and the requests in flight;
 * it serves commands from the HTTP threads, dispatches by credit, routes
 * EVENTs back, keeps workers' liveness and sends heartbeats (see gateway.h). */
#include "gateway/gateway.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "common/vec.h"
#include "gateway/gateway_core.h"
#include "gateway/submit.h"
#include "gateway/supervisor.h"
#include "gateway/zap.h"

/* While a queue holds requests the core wakes at least this often to expire
 * deadlines (prio_queue has no "next deadline" query). */
#define QUEUE_TICK_US 50000

static void request_finish(struct gateway *gw, gateway_request_t *r);
static void request_reply_error(struct gateway *gw, gateway_request_t *r, int status,
                                const char *code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void redispatch(struct gateway *gw, gateway_request_t *r, const char *why, bool lost);

/* --- the request table ---------------------------------------------------- */

static size_t req_slot(const struct gateway *gw, uint64_t id)
{
    return (size_t)((id * 0x9E3779B97F4A7C15ull) >> 20) & (gw->n_req_buckets - 1);
}

static gateway_request_t *req_find(struct gateway *gw, uint64_t id)
{
    for (gateway_request_t *r = gw->req_buckets[req_slot(gw, id)]; r; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

static void req_insert(struct gateway *gw, gateway_request_t *r)
{
    if (gw->n_requests + 1 > 2 * gw->n_req_buckets) {
        size_t old_n = gw->n_req_buckets;
        gateway_request_t **old = gw->req_buckets;
        gw->n_req_buckets *= 2;
        gw->req_buckets = xcalloc(gw->n_req_buckets, sizeof *gw->req_buckets);
        for (size_t i = 0; i < old_n; i++) {
            for (gateway_request_t *q = old[i], *nx; q; q = nx) {
                nx = q->next;
                size_t k = req_slot(gw, q->id);
                q->next = gw->req_buckets[k];
                gw->req_buckets[k] = q;
            }
        }
        free(old);
    }
    size_t k = req_slot(gw, r->id);
    r->next = gw->req_buckets[k];
    gw->req_buckets[k] = r;
    gw->n_requests++;
    atomic_store(&gw->n_inflight, gw->n_requests);
}

static void req_unlink(struct gateway *gw, gateway_request_t *r)
{
    for (gateway_request_t **p = &gw->req_buckets[req_slot(gw, r->id)]; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            r->next = NULL;
            gw->n_requests--;
            atomic_store(&gw->n_inflight, gw->n_requests);
            return;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* models                                                                    */

gateway_model_t *gateway_model_find(struct gateway *gw, const char *name)
{
    for (size_t i = 0; i < gw->n_models; i++)
        if (strcmp(gw->models[i].name, name) == 0)
            return &gw->models[i];
    return NULL;
}

static gateway_model_t *model_add(struct gateway *gw, const char *name, bool configured)
{
    gateway_model_t *m = gateway_model_find(gw, name);
    if (m) {
        m->configured |= configured;
        return m;
    }
    vec_reserve(gw->models, gw->cap_models, gw->n_models + 1);
    m = &gw->models[gw->n_models++];
    memset(m, 0, sizeof *m);
    m->name = xstrdup(name);
    m->queue = prio_queue_new(&gw->queue_cfg);
    m->configured = configured;
    m->t_no_replica_us = clock_now_us();
    return m;
}

size_t gateway_model_replicas(const struct gateway *gw, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < gw->n_workers; i++)
        n += strcmp(gw->workers[i].reg.model, name) == 0;
    return n;
}

size_t gateway_model_ready_replicas(const struct gateway *gw, const char *name)
{
    size_t n = 0;
    for (size_t i = 0; i < gw->n_workers; i++)
        n += strcmp(gw->workers[i].reg.model, name) == 0 &&
             gw->workers[i].state == GATEWAY_WORKER_READY;
    return n;
}

/* Its local workers, all zero without a supervisor. */
void gateway_model_local(struct gateway *gw, const char *name, supervisor_model_info_t *out)
{
    if (gw->sup)
        supervisor_model_info(gw->sup, name, out);
    else
        memset(out, 0, sizeof *out);
}

/* True when every local worker of the model is given up (crash loop) and
 * nothing else serves it: its requests get 503 at once. Keeps m->failed and
 * the pagoda_model_failed gauge current. */
bool gateway_model_failed(struct gateway *gw, gateway_model_t *m, supervisor_model_info_t *li)
{
    bool failed = li->n_failed > 0 && li->n_running + li->n_backoff == 0 &&
                  gateway_model_replicas(gw, m->name) == 0;
    if (failed != m->failed) {
        m->failed = failed;
        metrics_gauge_set(gw->m.model_failed, (const char *[]){m->name}, failed);
    }
    return failed;
}

/* True while the supervisor is bringing a local worker of the model up: one
 * is spawned and has not registered yet (loading), or waits in back-off for
 * its restart — not FAILED, STOPPED or IDLE. A model without a replica then
 * keeps its requests queued up to their own deadline instead of answering
 * 503 after --replica-grace: loading and repacking a real-size model can
 * take longer than the grace (a 1.1B worker needed > 30 s on a loaded
 * host), and a crash loop ends in FAILED (503 model_failed) anyway. Only
 * meaningful while the model has no replica: a registered local worker is
 * RUNNING too. */
static bool model_local_starting(const supervisor_model_info_t *li)
{
    return li->n_running + li->n_backoff > 0;
}

/* ------------------------------------------------------------------------ */
/* worker table                                                              */

const char *gateway_worker_state_name(gateway_worker_state_t s)
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

gateway_worker_t *gateway_worker_by_uid(struct gateway *gw, uint64_t uid)
{
    for (size_t i = 0; i < gw->n_workers; i++)
        if (gw->workers[i].uid == uid)
            return &gw->workers[i];
    return NULL;
}

gateway_worker_t *gateway_worker_by_replica(struct gateway *gw, const char *replica)
{
    for (size_t i = 0; i < gw->n_workers; i++)
        if (strcmp(gw->workers[i].reg.replica, replica) == 0)
            return &gw->workers[i];
    return NULL;
}

/* A worker on our host whose pid is one of the supervisor's children. */
bool gateway_worker_is_local(struct gateway *gw, const gateway_worker_t *w)
{
    return gw->sup && strcmp(w->reg.host, gw->hostname) == 0 &&
           supervisor_owns(gw->sup, (pid_t)w->reg.pid);
}

typedef enum {
    REMOVE_REPLACED,              /* re-registered: the process is alive */
    REMOVE_CLOSED,                /* its connection closed: it died */
    REMOVE_SILENT,                /* missed heartbeats: hung (a local one is killed) */
    REMOVE_STALLED,               /* heartbeats but no step progress: hung (killed too) */
} remove_kind_t;

static void worker_remove(struct gateway *gw, gateway_worker_t *w, const char *why,
                          remove_kind_t kind)
{
    log_info("worker %s (model %s) removed: %s", w->reg.replica, w->reg.model, why);
    uint64_t uid = w->uid;
    char *model = xstrdup(w->reg.model);
    if (kind != REMOVE_REPLACED) {
        gw->n_workers_lost++;
        metrics_counter_add(gw->m.workers_lost, (const char *[]){model}, 1);
    }
    if (kind == REMOVE_SILENT && gateway_worker_is_local(gw, w))
        supervisor_kill(gw->sup, (pid_t)w->reg.pid, "missed its heartbeats");
    if (kind == REMOVE_STALLED && gateway_worker_is_local(gw, w))
        supervisor_kill(gw->sup, (pid_t)w->reg.pid, "made no progress");
    if (w->has_counted) {
        gateway_retired_t *rt = &gw->retired[gw->i_retired++ % GATEWAY_RETIRED];
        snprintf(rt->replica, sizeof rt->replica, "%s", w->reg.replica);
        rt->counted = w->counted;
    }
    if (w->slot >= 0) {
        /* a dead or replaced registration's cache is gone with it */
        metrics_gauge_set(gw->m.prefix_index_replica, (const char *[]){w->reg.model, w->reg.replica}, 0);
        prefix_index_drop_slot(gw->pindex, w->slot);
        gw->slots_used &= ~(1ULL << w->slot);
    }
    proto_msg_t m = {.type = PROTO_REGISTER, .reg = w->reg};
    proto_msg_clear(&m); /* frees the registration's strings */
    size_t i = (size_t)(w - gw->workers);
    gw->workers[i] = gw->workers[--gw->n_workers];

    /* its requests: collect first, requeueing may dispatch (and so touch the
     * table) only later, from the main loop */
    size_t n = 0, cap = 0;
    gateway_request_t **lost = NULL;
    for (size_t b = 0; b < gw->n_req_buckets; b++)
        for (gateway_request_t *r = gw->req_buckets[b]; r; r = r->next)
            if (r->state == GATEWAY_REQ_RUNNING && r->worker_uid == uid) {
                vec_reserve(lost, cap, n + 1);
                lost[n++] = r;
            }
    for (size_t k = 0; k < n; k++)
        redispatch(gw, lost[k], why, true);
    free(lost);

    gateway_model_t *gm = gateway_model_find(gw, model);
    if (gm && gateway_model_replicas(gw, model) == 0) {
        gm->t_no_replica_us = clock_now_us();
        log_warn("model %s has no replica left", model);
    }
    metrics_gauge_set(gw->m.workers_connected, (const char *[]){model},
                      (double)gateway_model_replicas(gw, model));
    free(model);
}

int64_t gateway_worker_expiry_us(const gateway_worker_t *w)
{
    return w->t_last_seen_us + PROTO_LIVENESS * w->interval_us;
}

/* The progress deadline of a worker, µs without a completed step while busy:
 * max(--progress-timeout-ms, PROTO_PROGRESS_SCALE × its slowest recent step). */
int64_t gateway_worker_progress_deadline_us(const struct gateway *gw, const gateway_worker_t *w)
{
    int64_t scaled = (int64_t)PROTO_PROGRESS_SCALE * w->progress.slow_ms * 1000;
    return scaled > gw->progress_timeout_us ? scaled : gw->progress_timeout_us;
}

/* When a busy worker is judged hung for lack of progress (INT64_MAX: not
 * busy, no progress reported, or the check is off). */
static int64_t worker_stall_expiry_us(const struct gateway *gw, const gateway_worker_t *w)
{
    if (!gw->progress_timeout_us || !w->has_progress || !w->progress.busy)
        return INT64_MAX;
    return w->t_progress_us - (int64_t)w->progress.stall_ms * 1000 +
           gateway_worker_progress_deadline_us(gw, w);
}

int64_t gateway_worker_credit(const gateway_worker_t *w)
{
    if (w->state != GATEWAY_WORKER_READY)
        return 0;
    int64_t c = (int64_t)w->reg.capacity - w->n_assigned;
    return w->hb_credit < c ? w->hb_credit : c;
}

/* ------------------------------------------------------------------------ */
/* sending                                                                   */

/* Sends m; returns 0, or -1 when it was not sent. On EHOSTUNREACH the worker
 * is removed (w is then invalid: the table moved). */
static int send_to(struct gateway *gw, gateway_worker_t *w, const proto_peer_t *peer,
                   const proto_msg_t *m)
{
    /* ROUTER sends never block here: ZMQ_DONTWAIT, and ROUTER_MANDATORY
     * turns "peer gone" into EHOSTUNREACH instead of a silent drop. */
    if (proto_send(gw->router, peer, m, ZMQ_DONTWAIT) == PROTO_OK)
        return 0;
    if (errno == EHOSTUNREACH && w) {
        worker_remove(gw, w, "connection closed", REMOVE_CLOSED);
    } else if (errno != EHOSTUNREACH)
        log_warn("send %s to %s: %s", proto_type_name(m->type), w ? w->reg.replica : "peer",
                 zmq_strerror(errno));
    return -1;
}

int gateway_worker_send(struct gateway *gw, gateway_worker_t *w, const proto_msg_t *m)
{
    return send_to(gw, w, &w->peer, m);
}

static void send_heartbeat(struct gateway *gw, gateway_worker_t *w)
{
    proto_msg_t hb;
    proto_msg_init(&hb, PROTO_HEARTBEAT);
    hb.heartbeat.seq = gw->heartbeat_seq;
    hb.heartbeat.heartbeat_ms = (uint32_t)gw->heartbeat_ms;
    send_to(gw, w, &w->peer, &hb);
}

/* Sends DRAIN to worker w and marks it draining; `plan` says what a local
 * one does when it exits (0: nothing to tell the supervisor). */
void gateway_worker_drain(struct gateway *gw, gateway_worker_t *w, int plan)
{
    if (plan && gw->sup && strcmp(w->reg.host, gw->hostname) == 0)
        supervisor_expect_exit(gw->sup, (pid_t)w->reg.pid, (supervisor_exit_plan_t)plan);
    w->state = GATEWAY_WORKER_DRAINING;
    log_info("worker %s (model %s): DRAIN (%u requests to finish)", w->reg.replica, w->reg.model,
             w->n_assigned);
    proto_msg_t d;
    proto_msg_init(&d, PROTO_DRAIN);
    send_to(gw, w, &w->peer, &d);
}

/* ------------------------------------------------------------------------ */
/* request life                                                              */

static void request_reply_error(struct gateway *gw, gateway_request_t *r, int status,
                                const char *code, const char *fmt, ...)
{
    gateway_reply_t *rep = xcalloc(1, sizeof *rep);
    rep->kind = GATEWAY_REPLY_ERROR;
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset(&rep->error, status, code, fmt, ap);
    va_end(ap);
    gateway_request_push(r, rep);
}

/* Choices the request asks for (a SUBMIT built without n_choices: 1). */
static uint32_t req_choices(const gateway_request_t *r)
{
    return r->submit.submit.n_choices > 1 ? r->submit.submit.n_choices : 1;
}

/* Drops the core's record (after its last reply). */
static void request_finish(struct gateway *gw, gateway_request_t *r)
{
    if (r->state == GATEWAY_REQ_QUEUED) {
        gateway_model_t *m = gateway_model_find(gw, r->model);
        if (m)
            prio_queue_remove(m->queue, r->id, NULL);
    } else if (r->state == GATEWAY_REQ_RUNNING) {
        gateway_worker_t *w = gateway_worker_by_uid(gw, r->worker_uid);
        if (w) {
            w->n_assigned -= r->n_slots;
            w->hb_credit += r->n_slots;
        }
    }
    r->state = GATEWAY_REQ_NEW;
    gateway_model_t *m = gateway_model_find(gw, r->model);
    if (m)
        m->t_last_active_us = clock_now_us();
    req_unlink(gw, r);
    gateway_request_unref(&r);
}

static int enqueue(struct gateway *gw, gateway_model_t *m, gateway_request_t *r)
{
    int rc = prio_queue_push(m->queue, r->id, r->tier, r->t_enqueue_us, r->t_deadline_us, r);
    if (rc == PRIO_QUEUE_OK)
        r->state = GATEWAY_REQ_QUEUED;
    return rc;
}

/* A request whose worker is gone (lost) or refused it before starting: back
 * into its model's queue with its original enqueue time and deadline. A
 * request that had produced output keeps its sent_ids, which the next SUBMIT
 * carries as `resume`; only a full queue ends it here (503). */
static void redispatch(struct gateway *gw, gateway_request_t *r, const char *why, bool lost)
{
    gateway_worker_t *w = gateway_worker_by_uid(gw, r->worker_uid);
    if (w && r->state == GATEWAY_REQ_RUNNING) {
        w->n_assigned -= r->n_slots;
        w->hb_credit += r->n_slots;
    }
    r->state = GATEWAY_REQ_NEW;
    if (r->cancelled) {
        request_finish(gw, r);
        return;
    }
    if ((req_choices(r) > 1 || r->submit.submit.op != PROTO_OP_GENERATE) && r->output_sent) {
        /* n choices are not resumed: the delivered tokens of each would have
         * to travel back (and the worker prefill them n times) */
        request_reply_error(gw, r, 502, "worker_lost",
                            "The worker serving this request was lost (%s) after output had "
                            "started; requests with n > 1 are not resumed", why);
        request_finish(gw, r);
        return;
    }
    if (lost && ++r->n_lost > gw->max_redispatch) {
        /* a poison request (it crashes or stalls every worker it lands on)
         * must not take the model's replicas down one after the other */
        log_warn("request %" PRIu64 " failed: its worker was lost %u times (%s)", r->id, r->n_lost, why);
        request_reply_error(gw, r, 502, "worker_lost",
                            "The worker serving this request was lost %u times (last: %s); the "
                            "request is not retried again",
                            r->n_lost, why);
        request_finish(gw, r);
        return;
    }
    gateway_model_t *m = gateway_model_find(gw, r->model);
    if (m && enqueue(gw, m, r) == PRIO_QUEUE_OK) {
        gw->n_requeued++;
        metrics_counter_add(gw->m.requests_redispatched,
                            (const char *[]){r->model, r->n_sent ? "resumed" : "queued"}, 1);
        log_info("request %" PRIu64 " back in the %s queue (%s)%s%.0u%s", r->id, r->model, why,
                 r->n_sent ? ": resumes after " : "", r->n_sent, r->n_sent ? " tokens" : "");
        return;
    }
    request_reply_error(gw, r, 503, "service_unavailable",
                        "The worker serving this request stopped (%s) and the queue of model '%s' "
                        "is full", why, r->model);
    request_finish(gw, r);
}

/* A resumed request that has nothing left to generate (its last token was
 * delivered but the final EVENT was lost with the worker, or prompt +
 * delivered tokens fill the context): ends it as "length". */
static void finish_length(struct gateway *gw, gateway_request_t *r)
{
    gateway_reply_t *rep = xcalloc(1, sizeof *rep);
    rep->kind = GATEWAY_REPLY_EVENT;
    rep->event.id = r->id;
    rep->event.text = xstrdup("");
    rep->event.n_tokens = r->n_sent;
    rep->event.n_resumed = r->n_sent;
    rep->event.finish = PROTO_FINISH_LENGTH;
    rep->event.has_usage = true;
    rep->event.usage = (proto_usage_t){.prompt_tokens = r->n_prompt, .completion_tokens = r->n_sent};
    metrics_counter_add(gw->m.request_success, (const char *[]){r->model, "length"}, 1);
    gateway_request_push(r, rep);
    request_finish(gw, r);
}

static void on_submit(struct gateway *gw, gateway_request_t *r)
{
    int64_t now = clock_now_us();
    gateway_model_t *m = gateway_model_find(gw, r->model);
    req_insert(gw, r); /* the command's reference is now the table's */
    if (!m) {
        gateway_reply_t *rep = xcalloc(1, sizeof *rep);
        rep->kind = GATEWAY_REPLY_ERROR;
        oai_error_model_not_found(&rep->error, r->model);
        gateway_request_push(r, rep);
        request_finish(gw, r);
        return;
    }
    const char *labels[] = {m->name, prio_tier_name(r->tier)};
    if (atomic_load(&gw->stopping)) {
        request_reply_error(gw, r, 503, "service_unavailable",
                            "The gateway is shutting down; retry against another instance");
        request_finish(gw, r);
        return;
    }
    m->t_last_active_us = now;
    supervisor_model_info_t li;
    gateway_model_local(gw, m->name, &li);
    if (gateway_model_failed(gw, m, &li)) {
        request_reply_error(gw, r, 503, "model_failed",
                            "Model '%s' is unavailable: its worker crashed repeatedly (%s). An "
                            "operator can retry with POST /admin/models/%s/restart",
                            m->name, li.reason, m->name);
        request_finish(gw, r);
        return;
    }
    bool starting = model_local_starting(&li);
    if (li.on_demand && gateway_model_ready_replicas(gw, m->name) == 0 &&
        supervisor_wake(gw->sup, m->name) > 0) {
        starting = true;
        if (m->t_no_replica_us)
            m->t_no_replica_us = now; /* the grace period counts from the start */
    }
    if (m->t_no_replica_us && now - m->t_no_replica_us > gw->replica_grace_us && !starting) {
        request_reply_error(gw, r, 503, "service_unavailable",
                            "No worker serves model '%s' right now (none for %lld s)", m->name,
                            (long long)((now - m->t_no_replica_us) / 1000000));
        request_finish(gw, r);
        return;
    }
    r->t_enqueue_us = now;
    r->t_deadline_us = r->t_arrival_us + gw->request_timeout_us;
    int rc = enqueue(gw, m, r);
    if (rc != PRIO_QUEUE_OK) {
        metrics_counter_add(gw->m.rejected_queue_full, labels, 1);
        request_reply_error(gw, r, 429, "rate_limit_exceeded",
                            "The queue of model '%s' is full (%zu requests); retry later",
                            m->name, prio_queue_capacity(m->queue));
        request_finish(gw, r);
        return;
    }
    metrics_counter_add(gw->m.requests, labels, 1);
    log_debug("request %" PRIu64 " queued for %s at tier %s (%zu waiting)", r->id, m->name,
              prio_tier_name(r->tier), prio_queue_len(m->queue));
}

/* CANCEL to the worker running r; its final EVENT drops the record, or the
 * sweep does GATEWAY_CANCEL_GRACE_US later. */
static void send_cancel(struct gateway *gw, gateway_worker_t *w, gateway_request_t *r)
{
    r->cancelled = true;
    r->t_cancel_us = clock_now_us();
    proto_msg_t c;
    proto_msg_init(&c, PROTO_CANCEL);
    c.cancel.id = r->id;
    send_to(gw, w, &w->peer, &c);
}

static void on_cancel(struct gateway *gw, uint64_t id)
{
    gateway_request_t *r = req_find(gw, id);
    if (!r)
        return;
    r->cancelled = true;
    if (r->state != GATEWAY_REQ_RUNNING) {
        /* it was counted in pagoda_requests_total when queued: it ends as an
         * abort, as a cancelled running request does with its final EVENT
         * (the soak's accounting check caught this path uncounted) */
        log_debug("request %" PRIu64 " cancelled while queued", id);
        if (r->state == GATEWAY_REQ_QUEUED)
            metrics_counter_add(gw->m.request_success, (const char *[]){r->model, "abort"}, 1);
        request_finish(gw, r);
        return;
    }
    gateway_worker_t *w = gateway_worker_by_uid(gw, r->worker_uid);
    if (!w) {
        metrics_counter_add(gw->m.request_success, (const char *[]){r->model, "abort"}, 1);
        request_finish(gw, r);
        return;
    }
    log_debug("request %" PRIu64 " cancelled: CANCEL to %s", id, w->reg.replica);
    send_cancel(gw, w, r);
}

/* Sends queued requests of model m to replicas with credit. */
static void dispatch_model(struct gateway *gw, gateway_model_t *m, int64_t now)
{
    route_cand_t *cand = xmalloc((gw->n_workers ? gw->n_workers : 1) * sizeof *cand);
    while (prio_queue_len(m->queue) > 0) {
        prio_queue_entry_t e;
        prio_queue_peek(m->queue, &e);
        gateway_request_t *r = e.data;
        /* which replicas hold how much of its prefix (routing by cache) */
        int32_t depth[PREFIX_INDEX_MAX_SLOTS] = {0};
        if (route_mode_uses_prefix(gw->routing) && r->n_route_keys > 0)
            prefix_index_match(gw->pindex, r->route_keys, r->n_route_keys, depth);
        /* a request naming adapters goes only to replicas that hold them
         * (lora_table_note_worker logged the others at registration) */
        bool adapters = r->submit.submit.n_lora > 0, held = !adapters;
        size_t n_ready = 0;
        for (size_t i = 0; i < gw->n_workers; i++) {
            gateway_worker_t *w = &gw->workers[i];
            bool ours = strcmp(w->reg.model, m->name) == 0;
            if (ours && adapters) {
                n_ready += w->state == GATEWAY_WORKER_READY;
                ours = lora_table_worker_serves(gw->loras, &w->reg, &r->submit.submit);
                held |= ours && w->state == GATEWAY_WORKER_READY;
            }
            /* n choices take n sequence slots (at most the replica's capacity,
             * so any request can be placed on an idle replica) */
            int64_t need = req_choices(r) > w->reg.capacity ? w->reg.capacity : req_choices(r);
            if (need < 1)
                need = 1;
            int64_t credit = ours ? gateway_worker_credit(w) : 0;
            cand[i] = (route_cand_t){
                .credit = credit >= need ? credit - need + 1 : 0,
                .assigned = w->n_assigned,
                .hit_blocks = ours && w->slot >= 0 && (int32_t)w->reg.block_size == r->route_block_size
                                  ? depth[w->slot] : 0,
            };
        }
        /* an affinity key's last replica counts as holding the whole prefix:
         * the same policy then keeps the key there unless it is overloaded */
        struct gateway_affinity *aff = r->affinity ? &gw->affinity[r->affinity % GATEWAY_AFFINITY_SLOTS] : NULL;
        if (aff && aff->h == r->affinity && route_mode_uses_prefix(gw->routing))
            for (size_t i = 0; i < gw->n_workers; i++)
                if (gw->workers[i].uid == aff->uid && cand[i].credit > 0)
                    cand[i].hit_blocks = ROUTE_MAX_KEYS;
        if (!held && n_ready > 0) { /* replicas are up and none holds the adapters */
            prio_queue_pop(m->queue, &e);
            r->state = GATEWAY_REQ_NEW;
            request_reply_error(gw, r, 404, "model_not_found",
                                "No replica of model '%s' has adapter%s '%s'%s loaded.", m->name,
                                r->submit.submit.n_lora > 1 ? "s" : "", r->submit.submit.lora[0].name,
                                r->submit.submit.n_lora > 1 ? ", ..." : "");
            request_finish(gw, r);
            continue;
        }
        route_reason_t why;
        int pick = route_pick(gw->routing, cand, gw->n_workers, gw->route_max_load_gap, &why);
        if (pick < 0)
            break;
        gateway_worker_t *best = &gw->workers[pick];
        if (aff) {
            aff->h = r->affinity;
            aff->uid = best->uid;
        }
        metrics_counter_add(gw->m.routed, (const char *[]){m->name, route_reason_name(why)}, 1);
        prio_queue_pop(m->queue, &e);
        assert(e.data == r);
        proto_submit_t *sm = &r->submit.submit;
        if (r->n_sent && sm->max_tokens && r->n_sent >= sm->max_tokens) {
            r->state = GATEWAY_REQ_NEW;
            finish_length(gw, r);
            continue;
        }
        free(sm->resume);
        sm->resume = NULL;
        sm->n_resume = r->n_sent;
        if (r->n_sent) {
            sm->resume = xmalloc(r->n_sent * sizeof *sm->resume);
            memcpy(sm->resume, r->sent_ids, r->n_sent * sizeof *sm->resume);
            log_info("request %" PRIu64 " resumes on %s after %u delivered tokens", r->id,
                     best->reg.replica, r->n_sent);
        }
        r->state = GATEWAY_REQ_RUNNING;
        r->worker_uid = best->uid;
        r->n_slots = req_choices(r) > best->reg.capacity ? best->reg.capacity : req_choices(r);
        if (r->n_slots < 1)
            r->n_slots = 1;
        r->n_done = 0;
        best->n_assigned += r->n_slots;
        best->hb_credit -= r->n_slots;
        /* running, the deadline is one of progress (--request-timeout without
         * a step of its own), here and on the worker (SUBMIT deadline_ms) */
        r->t_deadline_us = now + gw->request_timeout_us;
        int64_t idle_ms = gw->request_timeout_us / 1000;
        r->submit.submit.deadline_ms = idle_ms < 1 ? 1 : idle_ms > UINT32_MAX ? UINT32_MAX : (uint32_t)idle_ms;
        metrics_histogram_observe(gw->m.request_queue_time, (const char *[]){m->name},
                                  (double)(now - r->t_enqueue_us) / 1e6);
        log_debug("request %" PRIu64 " (%s) → %s (by %s, %d cached blocks) after %.1f ms in queue",
                  r->id, prio_tier_name(r->tier), best->reg.replica, route_reason_name(why),
                  cand[pick].hit_blocks, (double)(now - r->t_enqueue_us) / 1e3);
        uint64_t uid = best->uid;
        if (send_to(gw, best, &best->peer, &r->submit) < 0) {
            /* removed with its worker (requeued there), or not sent */
            gateway_worker_t *w = gateway_worker_by_uid(gw, uid);
            if (w && r->state == GATEWAY_REQ_RUNNING && r->worker_uid == uid) {
                w->hb_credit = 0; /* do not retry it until it heartbeats */
                redispatch(gw, r, "send failed", false);
            }
        }
    }
    free(cand);
}

static void dispatch_all(struct gateway *gw, int64_t now)
{
    for (size_t i = 0; i < gw->n_models; i++)
        dispatch_model(gw, &gw->models[i], now);
}

/* ------------------------------------------------------------------------ */
/* messages from workers                                                     */

static void on_register(struct gateway *gw, const proto_peer_t *from, proto_msg_t *m,
                        int64_t now)
{
    proto_register_t *r = &m->reg;
    gateway_worker_t *w = worker_by_peer(gw, from);
    if (w && strcmp(w->reg.model, r->model) != 0) {
        worker_remove(gw, w, "re-registered with another model", REMOVE_REPLACED);
        w = NULL;
    }
    if (!w) {
        /* the same process on a new connection replaces its old entry */
        gateway_worker_t *old = gateway_worker_by_replica(gw, r->replica);
        if (old)
            worker_remove(gw, old, "re-registered on a new connection", REMOVE_REPLACED);
        vec_reserve(gw->workers, gw->cap_workers, gw->n_workers + 1);
        w = &gw->workers[gw->n_workers++];
        memset(w, 0, sizeof *w);
        w->uid = ++gw->next_worker_uid;
        w->peer = *from;
        for (size_t k = 0; k < GATEWAY_RETIRED; k++) {
            gateway_retired_t *rt = &gw->retired[k];
            if (rt->replica[0] && strcmp(rt->replica, r->replica) == 0) {
                w->has_counted = true; /* counted before: continue from there */
                w->counted = rt->counted;
                rt->replica[0] = '\0';
            }
        }
        w->slot = ~gw->slots_used ? __builtin_ctzll(~gw->slots_used) : -1;
        if (w->slot >= 0)
            gw->slots_used |= 1ULL << w->slot;
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
    w->hb_credit = (int64_t)w->reg.capacity - w->n_assigned;
    atomic_store(&gw->route_block_size, (int)w->reg.block_size);
    gateway_model_t *gm = model_add(gw, w->reg.model, false);
    gm->t_no_replica_us = 0;
    gm->n_ctx = w->reg.n_ctx;
    gm->vis = w->reg.vis;
    if (gw->loras->n) { /* its adapters against the other live replicas' */
        const proto_register_t **peers = xmalloc(gw->n_workers * sizeof *peers);
        size_t n_peers = 0;
        for (size_t i = 0; i < gw->n_workers; i++)
            if (&gw->workers[i] != w && gw->workers[i].state == GATEWAY_WORKER_READY &&
                strcmp(gw->workers[i].reg.model, w->reg.model) == 0)
                peers[n_peers++] = &gw->workers[i].reg;
        lora_table_note_worker(gw->loras, &w->reg, peers, n_peers);
        free(peers);
    }
    metrics_gauge_set(gw->m.workers_connected, (const char *[]){gm->name},
                      (double)gateway_model_replicas(gw, gm->name));
    log_info("worker %s registered: model %s, capacity %u, n_ctx %u, %u KV blocks of %u, "
             "heartbeat %u ms (%zu connected)",
             w->reg.replica, w->reg.model, w->reg.capacity, w->reg.n_ctx, w->reg.kv_blocks,
             w->reg.block_size, (unsigned)(w->interval_us / 1000), gw->n_workers);
    /* an immediate heartbeat doubles as the acknowledgement */
    send_heartbeat(gw, w);
}

/* Cumulative worker counters → our counters (deltas; a counter that went
 * backwards means a restarted process and counts from 0). */
static void load_deltas(struct gateway *gw, gateway_worker_t *w, const proto_load_t *nl)
{
    const char *lab[] = {w->reg.model};
    const proto_load_t *ol = &w->counted;
    bool had = w->has_counted;
    /* the first heartbeat of a worker process counts from 0: it covers what
     * the worker did since it started (a process registering again continues
     * from its retired counters) */
#define DELTA(field) (had && nl->field >= ol->field ? nl->field - ol->field : nl->field)
    uint64_t dq = DELTA(prefix_cache_queries), dh = DELTA(prefix_cache_hits);
    uint64_t dp = DELTA(preemptions), dpc = DELTA(prompt_tokens);
    uint64_t dsn = DELTA(spec_drafts), dsd = DELTA(spec_draft_tokens), dsa = DELTA(spec_accepted_tokens);
    uint64_t dss = DELTA(steps_stopped);
    uint64_t ddh = DELTA(prefix_cache_disk_hits), dev = DELTA(kv_evictions), dwb = DELTA(kv_disk_bytes_written),
             drb = DELTA(kv_disk_bytes_read), dde = DELTA(kv_disk_evictions), drj = DELTA(kv_disk_rejected);
#undef DELTA
    /* the KV tiers (worker/kv_disk.h) */
    if (ddh)
        metrics_counter_add(gw->m.external_prefix_cache_hits, lab, (double)ddh);
    if (dev)
        metrics_counter_add(gw->m.kv_evictions, lab, (double)dev);
    if (dwb)
        metrics_counter_add(gw->m.kv_disk_written, lab, (double)dwb);
    if (drb)
        metrics_counter_add(gw->m.kv_disk_read, lab, (double)drb);
    if (dde)
        metrics_counter_add(gw->m.kv_disk_evictions, lab, (double)dde);
    if (drj)
        metrics_counter_add(gw->m.kv_disk_rejected, lab, (double)drj);
    /* tokens, like vLLM's counters: workers report prompt tokens looked up
     * and tokens found cached */
    const char *rlab[] = {w->reg.model, w->reg.replica};
    if (dq) {
        metrics_counter_add(gw->m.prefix_cache_queries, lab, (double)dq);
        metrics_counter_add(gw->m.replica_prefix_queries, rlab, (double)dq);
    }
    if (dh) {
        metrics_counter_add(gw->m.prefix_cache_hits, lab, (double)dh);
        metrics_counter_add(gw->m.replica_prefix_hits, rlab, (double)dh);
    }
    if (nl->prefix_cache_queries)
        metrics_gauge_set(gw->m.replica_prefix_hit_rate, rlab,
                          (double)nl->prefix_cache_hits / (double)nl->prefix_cache_queries);
    if (dp)
        metrics_counter_add(gw->m.num_preemptions, lab, (double)dp);
    if (dpc)
        metrics_counter_add(gw->m.prompt_tokens_computed, lab, (double)dpc);
    if (dsn)
        metrics_counter_add(gw->m.spec_num_drafts, lab, (double)dsn);
    if (dsd)
        metrics_counter_add(gw->m.spec_num_draft_tokens, lab, (double)dsd);
    if (dsa)
        metrics_counter_add(gw->m.spec_num_accepted, lab, (double)dsa);
    if (dss)
        metrics_counter_add(gw->m.steps_stopped, lab, (double)dss);
    if (nl->kv_disk_state) {
        metrics_gauge_set(gw->m.kv_disk_enabled, rlab, nl->kv_disk_state == 1 ? 1.0 : 0.0);
        metrics_gauge_set(gw->m.kv_disk_bytes, rlab, (double)nl->kv_disk_bytes_used);
    }
    w->has_counted = true;
    w->counted = *nl;
}

/* A worker's prefix-cache changes → the routing index (order: reset, del, add). */
static void on_kv(struct gateway *gw, gateway_worker_t *w, const proto_kv_t *kv)
{
    if (w->slot < 0)
        return;
    if (kv->reset)
        prefix_index_drop_slot(gw->pindex, w->slot);
    for (uint32_t i = 0; i < kv->n_del; i++)
        prefix_index_del(gw->pindex, kv->del[i], w->slot);
    for (uint32_t i = 0; i < kv->n_add; i++)
        prefix_index_add(gw->pindex, kv->add[i], w->slot);
    log_debug("KV from %s: reset %d, +%u -%u keys (%zu held)", w->reg.replica, kv->reset, kv->n_add,
              kv->n_del, prefix_index_slot_size(gw->pindex, w->slot));
}

static void on_event(struct gateway *gw, gateway_worker_t *w, proto_msg_t *m, int64_t now)
{
    proto_event_t *ev = &m->event;
    gateway_request_t *r = req_find(gw, ev->id);
    if (!r || r->state != GATEWAY_REQ_RUNNING || r->worker_uid != w->uid) {
        log_debug("EVENT for unknown request %" PRIu64 " from %s", ev->id, w->reg.replica);
        return;
    }
    const char *lab[] = {r->model};
    uint32_t n_new = ev->n_ids;
    r->t_deadline_us = now + gw->request_timeout_us; /* progress (sweep_running) */
    /* tokenizer ops (/tokenize, /detokenize) generate nothing: no token metrics */
    bool gen = r->submit.submit.op == PROTO_OP_GENERATE;
    if ((n_new || ev->text_len) && !gen) {
        if (!r->cancelled)
            r->output_sent = true;
    } else if (n_new || ev->text_len) {
        if (!r->t_first_token_us) {
            r->t_first_token_us = now;
            metrics_histogram_observe(gw->m.time_to_first_token, lab,
                                      (double)(now - r->t_arrival_us) / 1e6);
        } else if (n_new) {
            double itl = (double)(now - r->t_last_token_us) / 1e6 / n_new;
            for (uint32_t i = 0; i < n_new && i < 64; i++)
                metrics_histogram_observe(gw->m.inter_token_latency, lab, itl);
        }
        r->t_last_token_us = now;
        if (!r->cancelled)
            r->output_sent = true;
    }
    if (ev->n_resumed != r->submit.submit.n_resume)
        log_warn("request %" PRIu64 ": %s resumed after %u tokens, not %u", r->id, w->reg.replica,
                 ev->n_resumed, r->submit.submit.n_resume);
    if (ev->choice >= req_choices(r)) {
        log_warn("EVENT for choice %u of request %" PRIu64 " (n = %u) from %s: dropped", ev->choice,
                 r->id, req_choices(r), w->reg.replica);
        return;
    }
    /* sent_ids are the resume list: only a single-choice request resumes */
    if (n_new && !r->cancelled && req_choices(r) == 1
        && r->submit.submit.op == PROTO_OP_GENERATE) {
        vec_append(r->sent_ids, r->n_sent, r->cap_sent, ev->ids, n_new);
    }
    if (ev->has_usage)
        r->n_prompt = ev->usage.prompt_tokens;
    proto_finish_t fin = ev->finish;
    /* the request is over when every choice has finished */
    bool last = fin != PROTO_FINISH_NONE && ++r->n_done >= req_choices(r);
    if (fin != PROTO_FINISH_NONE && ev->has_usage && gen)
        metrics_counter_add(gw->m.generation_tokens, lab, ev->usage.completion_tokens);
    if (last && gen) {
        const char *reason = fin == PROTO_FINISH_STOP ? "stop" : fin == PROTO_FINISH_LENGTH ? "length"
                                                                                           : "abort";
        if (fin != PROTO_FINISH_ERROR)
            metrics_counter_add(gw->m.request_success, (const char *[]){r->model, reason}, 1);
        metrics_histogram_observe(gw->m.e2e_request_latency, lab, (double)(now - r->t_arrival_us) / 1e6);
        if (ev->has_usage)
            metrics_counter_add(gw->m.prompt_tokens, lab, ev->usage.prompt_tokens);
    }
    gateway_reply_t *rep = xcalloc(1, sizeof *rep);
    rep->kind = GATEWAY_REPLY_EVENT;
    rep->event = *ev;
    rep->n_ctx = w->reg.n_ctx;
    memset(ev, 0, sizeof *ev); /* the reply owns the arrays now */
    m->type = 0;
    gateway_request_push(r, rep);
    if (last)
        request_finish(gw, r);
}

static void on_worker_error(struct gateway *gw, gateway_worker_t *w, const proto_error_t *e)
{
    gateway_request_t *r = e->id ? req_find(gw, e->id) : NULL;
    if (!r || r->state != GATEWAY_REQ_RUNNING || r->worker_uid != w->uid) {
        log_warn("worker %s: error %u%s%" PRIu64 ": %s", w->reg.replica, e->code,
                 e->id ? " on unknown request " : " (request ", e->id, e->message);
        return;
    }
    proto_err_t cause = proto_error_cause(e);
    if (cause == PROTO_ERR_UNAVAILABLE && !r->cancelled) {
        w->hb_credit = 0; /* it is full or draining: wait for its next heartbeat */
        redispatch(gw, r, e->message, false);
        return;
    }
    if (cause == PROTO_ERR_CONTEXT_LENGTH && r->n_sent && !r->cancelled) {
        /* prompt + delivered tokens fill the context: the interrupted run
         * would have stopped here with "length" */
        finish_length(gw, r);
        return;
    }
    log_info("request %" PRIu64 " failed on %s: %u %s: %s", r->id, w->reg.replica, e->code,
             proto_err_name(cause), e->message);
    gateway_reply_t *rep = xcalloc(1, sizeof *rep);
    rep->kind = GATEWAY_REPLY_ERROR;
    oai_error_from_worker(&rep->error, cause, "%s", e->message);
    gateway_request_push(r, rep);
    request_finish(gw, r);
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
        e.error.err = PROTO_ERR_NOT_REGISTERED;
        e.error.code = proto_err_code(PROTO_ERR_NOT_REGISTERED);
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
        if (m->heartbeat.has_progress) {
            w->has_progress = true;
            w->progress = m->heartbeat.progress;
            w->t_progress_us = now;
        }
        if (m->heartbeat.has_load) {
            load_deltas(gw, w, &m->heartbeat.load);
            w->has_load = true;
            w->load = m->heartbeat.load;
            w->hb_credit = w->load.free_slots;
        }
        break;
    case PROTO_EVENT:
        on_event(gw, w, m, now);
        break;
    case PROTO_ERROR:
        on_worker_error(gw, w, &m->error);
        break;
    case PROTO_KV:
        on_kv(gw, w, &m->kv);
        break;
    case PROTO_LORA_ACK:
        if (gw->lora_ack) /* else no operation ever ran: a stray answer */
            gw->lora_ack(gw, w, &m->lora);
        break;
    default:
        log_warn("worker %s sent %s, which only the gateway sends: dropped", w->reg.replica,
                 proto_type_name(m->type));
        break;
    }
}

/* A malformed EVENT or ERROR from w whose request id was readable (proto
 * keeps it): that request cannot go on as the worker meant it, so it fails
 * now with 502 (a stream that had started ends with an error event and
 * [DONE]) instead of waiting for its deadline. After an EVENT the worker may
 * still be generating, so it gets a CANCEL and the record goes with its
 * final EVENT (or the cancel grace); after an ERROR the worker has already
 * dropped the request. */
static void on_malformed(struct gateway *gw, gateway_worker_t *w, const proto_msg_t *m,
                         const char *why)
{
    uint64_t id = m->type == PROTO_EVENT ? m->event.id : m->type == PROTO_ERROR ? m->error.id : 0;
    gateway_request_t *r = id ? req_find(gw, id) : NULL;
    if (!r || r->state != GATEWAY_REQ_RUNNING || r->worker_uid != w->uid)
        return;
    if (r->cancelled) {
        /* the client is gone or the deadline answered: only the record is left */
        if (m->type == PROTO_ERROR)
            request_finish(gw, r);
        return;
    }
    log_warn("request %" PRIu64 " failed: %s sent a malformed %s for it (%s)", r->id,
             w->reg.replica, proto_type_name(m->type), why);
    request_reply_error(gw, r, 502, "bad_worker_message",
                        "The worker serving this request sent a malformed %s message (%s); the "
                        "request was stopped. This is a server bug: please report it.",
                        proto_type_name(m->type), why);
    if (m->type == PROTO_EVENT)
        send_cancel(gw, w, r);
    else
        request_finish(gw, r);
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
            if (w)
                on_malformed(gw, w, &m, err);
            continue;
        }
        on_message(gw, &from, &m);
        proto_msg_clear(&m);
    }
}

/* ------------------------------------------------------------------------ */
/* commands from other threads (posted by gateway_calls.c)                   */

static void on_command(struct gateway *gw, gateway_cmd_t *cmd)
{
    switch (cmd->kind) {
    case GATEWAY_CMD_CALL: {
        void *item = cmd->run(gw, cmd);
        if (chan_push(cmd->reply, item) < 0)
            cmd->item_free(item); /* the asker gave up */
        break;
    }
    case GATEWAY_CMD_SUBMIT:
        on_submit(gw, cmd->request);
        cmd->request = NULL; /* the table owns that reference */
        break;
    case GATEWAY_CMD_CANCEL:
        on_cancel(gw, cmd->id);
        break;
    case GATEWAY_CMD_SET_SUPERVISOR:
        gw->sup = cmd->sup;
        if (chan_push(cmd->reply, gw) < 0)
            (void)0; /* the asker gave up; nothing to free */
        break;
    case GATEWAY_CMD_CALL_LATER:
        cmd->start(gw, cmd);
        break;
    }
    gateway_cmd_free(cmd);
}

/* ------------------------------------------------------------------------ */
/* the core loop                                                             */

static void on_expired(const prio_queue_entry_t *e, void *ctx)
{
    struct gateway *gw = ctx;
    gateway_request_t *r = e->data;
    r->state = GATEWAY_REQ_NEW; /* already out of the queue */
    if (r->n_lost)
        request_reply_error(gw, r, 504, "timeout",
                            "The worker serving this request was lost and no replica of model '%s' "
                            "took it over before its deadline", r->model);
    else
        request_reply_error(gw, r, 504, "timeout",
                            "The request waited %.1f s in the queue of model '%s' without a free worker%s",
                            (double)(clock_now_us() - r->t_enqueue_us) / 1e6, r->model,
                            gateway_model_replicas(gw, r->model) ? "" : " (none registered)");
    request_finish(gw, r);
}

/* Answers every request queued for m with 503 (OpenAI code `code`, message
 * msg — after "The worker serving this request was lost. " for requests
 * that lost one, when say_lost) and drops them. */
static void queue_refuse_all(struct gateway *gw, gateway_model_t *m, const char *code, bool say_lost,
                             const char *msg)
{
    prio_queue_entry_t e;
    while (prio_queue_pop(m->queue, &e) == PRIO_QUEUE_OK) {
        gateway_request_t *r = e.data;
        r->state = GATEWAY_REQ_NEW;
        request_reply_error(gw, r, 503, code, "%s%s",
                            say_lost && r->n_lost ? "The worker serving this request was lost. " : "",
                            msg);
        request_finish(gw, r);
    }
}

/* Supervisor-facing upkeep of one model: crash-loop FAILED answers its
 * queued requests with 503; an on-demand model is woken for queued work and
 * drained after idle_timeout without requests. */
static void local_workers_tick(struct gateway *gw, gateway_model_t *m, int64_t now)
{
    if (!gw->sup)
        return;
    supervisor_model_info_t li;
    supervisor_model_info(gw->sup, m->name, &li);
    if (!li.n_children)
        return;
    if (gateway_model_failed(gw, m, &li)) {
        char msg[512];
        snprintf(msg, sizeof msg, "Model '%s' is unavailable: its worker crashed repeatedly (%s)",
                 m->name, li.reason);
        queue_refuse_all(gw, m, "model_failed", false, msg);
        return;
    }
    if (!li.on_demand)
        return;
    bool ready = gateway_model_ready_replicas(gw, m->name) > 0;
    if (prio_queue_len(m->queue) && !ready) {
        if (supervisor_wake(gw->sup, m->name) > 0 && m->t_no_replica_us)
            m->t_no_replica_us = now;
        return;
    }
    if (!ready || prio_queue_len(m->queue) || now - m->t_last_active_us < (m->idle_timeout_us ? m->idle_timeout_us : gw->idle_timeout_us))
        return;
    for (size_t i = 0; i < gw->n_workers; i++) {
        gateway_worker_t *w = &gw->workers[i];
        if (strcmp(w->reg.model, m->name) != 0 || w->state != GATEWAY_WORKER_READY ||
            w->n_assigned || !gateway_worker_is_local(gw, w))
            continue;
        log_info("model %s idle for %lld s: stopping its on-demand worker %s", m->name,
                 (long long)((now - m->t_last_active_us) / 1000000), w->reg.replica);
        gateway_worker_drain(gw, w, SUPERVISOR_EXIT_IDLE);
        return; /* the table may have changed */
    }
}

/* The deadline of RUNNING r: --request-timeout after its last EVENT (or its
 * dispatch), or after its worker's last completed step when that is later —
 * a long prefill sends no EVENT, and the worker ends a request of its own that
 * makes no progress itself (SUBMIT deadline_ms); this catches a worker that
 * does not. */
static int64_t running_deadline_us(const struct gateway *gw, const gateway_request_t *r,
                                   const gateway_worker_t *w)
{
    if (!w || !w->has_progress || !w->progress.busy)
        return r->t_deadline_us;
    int64_t t_step = w->t_progress_us - (int64_t)w->progress.stall_ms * 1000;
    int64_t d = t_step + gw->request_timeout_us;
    return d > r->t_deadline_us ? d : r->t_deadline_us;
}

/* RUNNING requests: past their deadline → 504 and CANCEL; cancelled without
 * a final EVENT for GATEWAY_CANCEL_GRACE_US → dropped. Either way the client
 * gets an answer and the worker slot comes back even from a worker that never
 * answers for a request. */
static void sweep_running(struct gateway *gw, int64_t now)
{
    if (now < gw->t_next_sweep_us)
        return;
    gw->t_next_sweep_us = now + QUEUE_TICK_US * 4;
    for (size_t b = 0; b < gw->n_req_buckets; b++) {
        gateway_request_t *nx;
        for (gateway_request_t *r = gw->req_buckets[b]; r; r = nx) {
            nx = r->next; /* request_finish unlinks r only */
            if (r->state != GATEWAY_REQ_RUNNING)
                continue;
            if (r->cancelled) {
                if (r->t_cancel_us && now - r->t_cancel_us > GATEWAY_CANCEL_GRACE_US) {
                    log_warn("request %" PRIu64 ": no final EVENT %.1f s after its CANCEL: dropped",
                             r->id, (double)(now - r->t_cancel_us) / 1e6);
                    request_finish(gw, r);
                }
                continue;
            }
            gateway_worker_t *w = gateway_worker_by_uid(gw, r->worker_uid);
            int64_t deadline = running_deadline_us(gw, r, w);
            if (now - deadline <= GATEWAY_RUNNING_DEADLINE_SLACK_US)
                continue;
            log_warn("request %" PRIu64 " made no progress for %.1f s: 504 and CANCEL", r->id,
                     (double)(now - deadline + gw->request_timeout_us) / 1e6);
            request_reply_error(gw, r, 504, "timeout",
                                "The request made no progress for %.0f s (--request-timeout)",
                                (double)gw->request_timeout_us / 1e6);
            if (w)
                send_cancel(gw, w, r);
            else
                request_finish(gw, r);
        }
    }
}

static void tick(struct gateway *gw, int64_t now)
{
    if (gw->lora_tick)
        gw->lora_tick(gw, now);
    /* forget workers that went silent: iterate backwards, removal moves the
     * last entry into the gap */
    for (size_t i = gw->n_workers; i-- > 0;) {
        if (i >= gw->n_workers)
            continue; /* a removal above took more than one */
        gateway_worker_t *w = &gw->workers[i];
        if (now >= gateway_worker_expiry_us(w)) {
            char why[96];
            snprintf(why, sizeof why, "no message for %lld ms (%d heartbeat intervals)",
                     (long long)((now - w->t_last_seen_us) / 1000), PROTO_LIVENESS);
            worker_remove(gw, w, why, REMOVE_SILENT);
        } else if (now >= worker_stall_expiry_us(gw, w)) {
            char why[160];
            snprintf(why, sizeof why,
                     "no step completed for %lld ms while busy (deadline %lld ms: max of "
                     "--progress-timeout-ms and %d x its slowest recent step, %u ms)",
                     (long long)((now - w->t_progress_us) / 1000 + w->progress.stall_ms),
                     (long long)(gateway_worker_progress_deadline_us(gw, w) / 1000),
                     PROTO_PROGRESS_SCALE, w->progress.slow_ms);
            worker_remove(gw, w, why, REMOVE_STALLED);
        }
    }
    for (size_t i = 0; i < gw->n_models; i++) {
        gateway_model_t *m = &gw->models[i];
        prio_queue_expire(m->queue, now, on_expired, gw);
        local_workers_tick(gw, m, now);
        if (m->t_no_replica_us && now - m->t_no_replica_us > gw->replica_grace_us &&
            prio_queue_len(m->queue)) {
            supervisor_model_info_t li;
            gateway_model_local(gw, m->name, &li);
            if (model_local_starting(&li))
                continue; /* its requests wait for the worker, up to their deadline */
            char msg[512];
            snprintf(msg, sizeof msg, "No worker came up for model '%s' within %lld s", m->name,
                     (long long)(gw->replica_grace_us / 1000000));
            queue_refuse_all(gw, m, "service_unavailable", true, msg);
        }
    }
    if (now >= gw->t_next_heartbeat_us) {
        for (size_t i = gw->n_workers; i-- > 0;)
            if (i < gw->n_workers)
                send_heartbeat(gw, &gw->workers[i]);
        gw->heartbeat_seq++;
        gw->t_next_heartbeat_us += (int64_t)gw->heartbeat_ms * 1000;
        if (gw->t_next_heartbeat_us <= now) /* we were stalled: do not burst */
            gw->t_next_heartbeat_us = now + (int64_t)gw->heartbeat_ms * 1000;
    }
    sweep_running(gw, now);
    dispatch_all(gw, now);
}

static void *core_main(void *arg)
{
    struct gateway *gw = arg;
    gw->t_next_heartbeat_us = clock_now_us() + (int64_t)gw->heartbeat_ms * 1000;
    for (;;) {
        int64_t now = clock_now_us();
        int64_t wake = gw->t_next_heartbeat_us;
        for (size_t i = 0; i < gw->n_workers; i++) {
            if (gateway_worker_expiry_us(&gw->workers[i]) < wake)
                wake = gateway_worker_expiry_us(&gw->workers[i]);
            if (worker_stall_expiry_us(gw, &gw->workers[i]) < wake)
                wake = worker_stall_expiry_us(gw, &gw->workers[i]);
        }
        for (size_t i = 0; i < gw->n_models; i++)
            if (prio_queue_len(gw->models[i].queue) && now + QUEUE_TICK_US < wake)
                wake = now + QUEUE_TICK_US;
        if (gw->n_requests && gw->t_next_sweep_us < wake)
            wake = gw->t_next_sweep_us < now ? now : gw->t_next_sweep_us;
        int64_t lora_due = gw->lora_wake ? gw->lora_wake(gw) : INT64_MAX; /* an adapter load's 504 */
        if (lora_due < wake)
            wake = lora_due < now ? now : lora_due;
        long timeout_ms = wake <= now ? 0 : (long)((wake - now + 999) / 1000);
        zmq_pollitem_t items[2] = {
            {.socket = gw->router, .events = ZMQ_POLLIN},
            {.socket = NULL, .fd = chan_fd(gw->inbox), .events = ZMQ_POLLIN},
        };
        if (zmq_poll(items, 2, timeout_ms) < 0) {
            if (errno == EINTR)
                continue;
            log_error("zmq_poll: %s: the gateway core stops", zmq_strerror(errno));
            uint64_t one = 1;
            if (write(gw->fatal_fd, &one, sizeof one) != sizeof one)
                abort(); /* cannot even report it */
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
    if (gw->lora_stop)
        gw->lora_stop(gw);
    log_debug("core thread stops");
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* lifetime                                                                  */

struct gateway *gateway_new(const gateway_config_t *cfg)
{
    struct gateway *gw = xcalloc(1, sizeof *gw);
    gw->fatal_fd = -1;
    gw->worker_endpoint = xstrdup(cfg->worker_endpoint);
    gw->heartbeat_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : PROTO_HEARTBEAT_MS;
    prio_queue_config_default(&gw->queue_cfg);
    gw->queue_cfg.max_entries = cfg->max_queue ? cfg->max_queue : GATEWAY_DEFAULT_MAX_QUEUE;
    if (cfg->aging_per_s >= 0)
        gw->queue_cfg.aging_per_s = cfg->aging_per_s;
    gw->request_timeout_us = cfg->request_timeout_us > 0 ? cfg->request_timeout_us
                                                         : (int64_t)GATEWAY_DEFAULT_TIMEOUT_S * 1000000;
    gw->replica_grace_us = cfg->replica_grace_us > 0 ? cfg->replica_grace_us
                                                     : (int64_t)GATEWAY_DEFAULT_GRACE_S * 1000000;
    gw->lora_timeout_us = cfg->lora_timeout_us > 0 ? cfg->lora_timeout_us
                                                   : (int64_t)GATEWAY_DEFAULT_LORA_TIMEOUT_S * 1000000;
    gw->idle_timeout_us = cfg->idle_timeout_us > 0 ? cfg->idle_timeout_us
                                                   : (int64_t)GATEWAY_DEFAULT_IDLE_S * 1000000;
    gw->progress_timeout_us = cfg->progress_timeout_ms > 0    ? cfg->progress_timeout_ms * 1000
                              : cfg->progress_timeout_ms == 0 ? (int64_t)PROTO_PROGRESS_TIMEOUT_MS * 1000
                                                              : 0;
    gw->max_redispatch = cfg->max_redispatch > 0    ? (uint32_t)cfg->max_redispatch
                         : cfg->max_redispatch == 0 ? GATEWAY_DEFAULT_MAX_REDISPATCH
                                                    : 0;
    if (gethostname(gw->hostname, sizeof gw->hostname - 1) != 0)
        snprintf(gw->hostname, sizeof gw->hostname, "localhost");
    atomic_init(&gw->stopping, false);
    atomic_init(&gw->n_inflight, 0);
    gw->fatal_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    atomic_init(&gw->next_request_id, 1);
    gw->n_req_buckets = 64;
    gw->req_buckets = xcalloc(gw->n_req_buckets, sizeof *gw->req_buckets);
    gw->metrics = metrics_new();
    metrics_std_register(gw->metrics, &gw->m);
    for (size_t i = 0; i < cfg->n_models; i++) {
        gateway_model_t *m = model_add(gw, cfg->models[i], true);
        if (cfg->idle_timeout_s && cfg->idle_timeout_s[i] > 0)
            m->idle_timeout_us = (int64_t)(cfg->idle_timeout_s[i] * 1e6);
    }
    gw->loras = cfg->loras ? cfg->loras : lora_table_new();
    gw->routing = cfg->routing;
    gw->route_max_load_gap = cfg->route_max_load_gap ? cfg->route_max_load_gap
                                                     : ROUTE_DEFAULT_MAX_LOAD_GAP;
    atomic_init(&gw->route_block_size, 32);
    gw->pindex = prefix_index_new(cfg->prefix_index_entries);
    if (route_mode_uses_prefix(gw->routing) && cfg->model_paths)
        gw->route_text = route_text_new(cfg->models, cfg->model_paths, cfg->n_models);
    gw->inbox = chan_new(gateway_cmd_free, CHAN_FD);
    if (gw->fatal_fd < 0) {
        log_error("eventfd: %s", strerror(errno));
        goto err;
    }
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
    /* SUBMITs and CANCELs queue rather than fail when a worker reads slowly
     * (a send that would block is treated as a lost peer) */
    int unlimited = 0;
    zmq_setsockopt(gw->router, ZMQ_SNDHWM, &unlimited, sizeof unlimited);
    if (cfg->curve_secret_key &&
        !(gw->zap = zap_new(gw->zctx, gw->router, cfg->curve_secret_key, cfg->curve_authorized)))
        goto err;
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
    /* requests still in flight: tell whoever waits, then drop */
    for (size_t b = 0; b < gw->n_req_buckets; b++) {
        while (gw->req_buckets[b]) {
            gateway_request_t *r = gw->req_buckets[b];
            if (r->state == GATEWAY_REQ_RUNNING)
                r->state = GATEWAY_REQ_NEW; /* the workers go with us */
            request_reply_error(gw, r, 503, "service_unavailable", "The gateway is shutting down");
            request_finish(gw, r);
        }
    }
    free(gw->req_buckets);
    while (gw->n_workers) {
        gateway_worker_t *w = &gw->workers[gw->n_workers - 1];
        proto_msg_t m = {.type = PROTO_REGISTER, .reg = w->reg};
        proto_msg_clear(&m);
        gw->n_workers--;
    }
    free(gw->workers);
    for (size_t i = 0; i < gw->n_models; i++) {
        free(gw->models[i].name);
        prio_queue_free(&gw->models[i].queue);
    }
    free(gw->models);
    if (gw->router)
        zmq_close(gw->router);
    zap_free(&gw->zap);
    if (gw->zctx)
        zmq_ctx_term(gw->zctx);
    chan_unref(&gw->inbox);
    if (gw->fatal_fd >= 0)
        close(gw->fatal_fd);
    metrics_free(&gw->metrics);
    prefix_index_free(&gw->pindex);
    route_text_free(&gw->route_text);
    lora_table_free(&gw->loras);
    free(gw->worker_endpoint);
    free(gw);
}
