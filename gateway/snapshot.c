/* snapshot.c — what the core answers GET /health, /v1/models, /metrics and
 * the operations API (/admin/...) with, read from its tables (see
 * snapshot.h). The builders (static, taking the CALL command) run on the
 * core thread only; the public functions at the end ask the core to run
 * them, from any thread. */
#include "gateway/snapshot.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/gateway_core.h"
#include "gateway/supervisor.h"

/* ---- GET /health ---- */

static void *run_health(struct gateway *gw, const gateway_cmd_t *cmd)
{
    int64_t now = clock_now_us();
    json_t *workers = json_array();
    for (size_t i = 0; i < gw->n_workers; i++) {
        const gateway_worker_t *w = &gw->workers[i];
        int64_t left_us = gateway_worker_expiry_us(w) - now;
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
        json_t *prog = json_null();
        if (w->has_progress) {
            const proto_progress_t *g = &w->progress;
            int64_t stall = g->busy ? g->stall_ms + (now - w->t_progress_us) / 1000 : 0;
            prog = json_pack("{s:I, s:b, s:I, s:I, s:I}", "steps", (json_int_t)g->steps,
                             "busy", g->busy, "stall_ms", (json_int_t)stall,
                             "slow_ms", (json_int_t)g->slow_ms,
                             "deadline_ms",
                             (json_int_t)(gw->progress_timeout_us
                                              ? gateway_worker_progress_deadline_us(gw, w) / 1000 : 0));
        }
        int64_t last = w->t_last_heartbeat_us ? w->t_last_heartbeat_us : w->t_last_seen_us;
        json_array_append_new(
            workers,
            json_pack("{s:s, s:s, s:s, s:I, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o}",
                      "id", w->reg.replica, "model", w->reg.model, "host", w->reg.host,
                      "pid", (json_int_t)w->reg.pid, "state", gateway_worker_state_name(w->state),
                      "last_heartbeat_ms_ago", (json_int_t)((now - last) / 1000),
                      "liveness", (json_int_t)liveness,
                      "capacity", (json_int_t)w->reg.capacity,
                      "n_ctx", (json_int_t)w->reg.n_ctx,
                      "n_vocab", (json_int_t)w->reg.n_vocab,
                      "kv_blocks", (json_int_t)w->reg.kv_blocks,
                      "block_size", (json_int_t)w->reg.block_size,
                      "assigned", (json_int_t)w->n_assigned, "load", load, "progress", prog));
    }
    json_t *models = json_object();
    for (size_t i = 0; i < gw->n_models; i++) {
        gateway_model_t *m = &gw->models[i];
        json_int_t replicas = 0, running = 0, free_slots = 0;
        for (size_t k = 0; k < gw->n_workers; k++) {
            const gateway_worker_t *w = &gw->workers[k];
            if (strcmp(w->reg.model, m->name) != 0)
                continue;
            replicas++;
            running += w->n_assigned;
            int64_t c = gateway_worker_credit(w);
            free_slots += c > 0 ? c : 0;
        }
        supervisor_model_info_t li;
        gateway_model_local(gw, m->name, &li);
        const char *state = gateway_model_ready_replicas(gw, m->name) ? "ready"
                            : gateway_model_failed(gw, m, &li)         ? "failed"
                            : li.n_running + li.n_backoff      ? "starting"
                            : li.n_idle                        ? "idle"
                            : replicas                         ? "draining"
                                                               : "unavailable";
        json_t *jm = json_pack("{s:s, s:I, s:I, s:I, s:I, s:b, s:I, s:b}", "state", state,
                               "replicas", replicas, "queued", (json_int_t)prio_queue_len(m->queue),
                               "running", running, "free_slots", free_slots,
                               "configured", m->configured, "local_workers", (json_int_t)li.n_children,
                               "on_demand", li.on_demand);
        if (m->failed)
            json_object_set_new(jm, "failed_reason", json_string(li.reason));
        json_t *queue = json_object();
        for (int t = 0; t < PRIO_N_TIERS; t++) {
            int64_t oldest = prio_queue_oldest_us(m->queue, (prio_tier_t)t);
            json_object_set_new(queue, prio_tier_name((prio_tier_t)t),
                                json_pack("{s:I, s:I}", "queued",
                                          (json_int_t)prio_queue_len_tier(m->queue, (prio_tier_t)t),
                                          "oldest_wait_ms", (json_int_t)(oldest ? (now - oldest) / 1000 : 0)));
        }
        json_object_set_new(jm, "queue", queue);
        json_object_set_new(models, m->name, jm);
    }
    return json_pack("{s:s, s:i, s:s, s:o, s:o, s:o}", "status", gw->n_workers ? "ok" : "no_workers",
                     "heartbeat_ms", gw->heartbeat_ms, "host", gw->hostname, "models", models,
                     "workers", workers, "local_workers", gw->sup ? supervisor_json(gw->sup) : json_array());
}

/* ---- operations API ---- */

static json_t *admin_error(int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static json_t *admin_error(int status, const char *code, const char *fmt, ...)
{
    oai_error_t e;
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset(&e, status, code, fmt, ap);
    va_end(ap);
    json_t *j = oai_error_object(&e);
    json_object_set_new(j, "status", json_integer(status));
    return j;
}

static json_t *admin_workers(struct gateway *gw)
{
    int64_t now = clock_now_us();
    json_t *local = gw->sup ? supervisor_json(gw->sup) : json_array();
    json_t *out = json_array();
    for (size_t i = 0; i < gw->n_workers; i++) {
        const gateway_worker_t *w = &gw->workers[i];
        json_t *child = NULL;
        size_t k;
        json_t *c;
        if (strcmp(w->reg.host, gw->hostname) == 0) {
            json_array_foreach(local, k, c) {
                if (json_integer_value(json_object_get(c, "pid")) == (json_int_t)w->reg.pid) {
                    child = c;
                    break;
                }
            }
        }
        json_t *load = json_null();
        if (w->has_load)
            load = json_pack("{s:I, s:I, s:I, s:I, s:I}", "running", (json_int_t)w->load.running,
                             "waiting", (json_int_t)w->load.waiting,
                             "kv_blocks_used", (json_int_t)w->load.kv_blocks_used,
                             "kv_blocks_total", (json_int_t)w->load.kv_blocks_total,
                             "free_slots", (json_int_t)w->load.free_slots);
        json_t *jw = json_pack("{s:s, s:s, s:s, s:I, s:s, s:b, s:f, s:I, s:I, s:o}",
                               "id", w->reg.replica, "model", w->reg.model, "host", w->reg.host,
                               "pid", (json_int_t)w->reg.pid, "state", gateway_worker_state_name(w->state),
                               "local", child != NULL,
                               "uptime_s", (double)(now - w->t_registered_us) / 1e6,
                               "assigned", (json_int_t)w->n_assigned,
                               "capacity", (json_int_t)w->reg.capacity, "load", load);
        json_object_set(jw, "restarts", child ? json_object_get(child, "restarts") : json_null());
        json_object_set(jw, "last_exit", child ? json_object_get(child, "last_exit") : json_null());
        if (child)
            json_object_set_new(child, "registered", json_true());
        json_array_append_new(out, jw);
    }
    size_t k;
    json_t *c;
    json_array_foreach(local, k, c) {
        if (json_object_get(c, "registered"))
            continue;
        const char *st = json_string_value(json_object_get(c, "state"));
        json_t *jw = json_pack("{s:n, s:O, s:s, s:O, s:s, s:b, s:O, s:O, s:O, s:O}", "id",
                               "model", json_object_get(c, "model"), "host", gw->hostname,
                               "pid", json_object_get(c, "pid"),
                               "state", st && strcmp(st, "running") == 0 ? "starting" : st ? st : "?",
                               "local", 1, "uptime_s", json_object_get(c, "uptime_s"),
                               "restarts", json_object_get(c, "restarts"),
                               "next_start_ms", json_object_get(c, "next_start_ms"),
                               "last_exit", json_object_get(c, "last_exit"));
        json_object_set(jw, "standby_pid", json_object_get(c, "standby_pid"));
        json_array_append_new(out, jw);
    }
    json_decref(local);
    return json_pack("{s:i, s:o}", "status", 200, "workers", out);
}

/* By replica id, or by pid written in decimal. */
static gateway_worker_t *worker_by_target(struct gateway *gw, const char *t)
{
    gateway_worker_t *w = gateway_worker_by_replica(gw, t);
    if (w)
        return w;
    char *end;
    unsigned long pid = strtoul(t, &end, 10);
    if (!*t || *end)
        return NULL;
    for (size_t i = 0; i < gw->n_workers; i++)
        if (gw->workers[i].reg.pid == pid)
            return &gw->workers[i];
    return NULL;
}

/* Drains every ready local worker of model m with exit plan `plan`; returns
 * how many. (A drain may remove a worker from the table: count it first.) */
static unsigned drain_local(struct gateway *gw, gateway_model_t *m, supervisor_exit_plan_t plan)
{
    unsigned draining = 0;
    for (size_t i = 0; i < gw->n_workers;) {
        gateway_worker_t *w = &gw->workers[i];
        size_t n_before = gw->n_workers;
        if (strcmp(w->reg.model, m->name) == 0 && w->state == GATEWAY_WORKER_READY &&
            gateway_worker_is_local(gw, w)) {
            draining++;
            gateway_worker_drain(gw, w, plan);
        }
        if (gw->n_workers == n_before)
            i++;
    }
    return draining;
}

/* START_MODEL / STOP_MODEL of an on-demand model: what a first request and
 * the idle timer do, now. */
static json_t *admin_on_demand(struct gateway *gw, bool start, const char *target)
{
    gateway_model_t *m = gateway_model_find(gw, target);
    if (!m)
        return admin_error(404, "model_not_found", "The model '%s' does not exist", target);
    supervisor_model_info_t li;
    gateway_model_local(gw, m->name, &li);
    if (!li.on_demand)
        return admin_error(409, "not_on_demand",
                           "The model '%s' is not an on-demand model: drain or restart its workers "
                           "(POST /admin/workers/{id}/drain, /admin/models/%s/restart)",
                           m->name, m->name);
    int64_t now = clock_now_us();
    if (start) {
        unsigned started = supervisor_wake(gw->sup, m->name);
        m->t_last_active_us = now;
        if (started && m->t_no_replica_us)
            m->t_no_replica_us = now; /* the grace period counts from the start */
        log_info("admin: start on-demand model %s: %u local workers starting", m->name, started);
        return json_pack("{s:i, s:s, s:I}", "status", 200, "model", m->name, "started", (json_int_t)started);
    }
    /* idle from now on: the idle check stops replicas that are still starting
     * once they are ready */
    int64_t idle_us = m->idle_timeout_us ? m->idle_timeout_us : gw->idle_timeout_us;
    m->t_last_active_us = now - idle_us;
    unsigned draining = drain_local(gw, m, SUPERVISOR_EXIT_IDLE);
    log_info("admin: stop on-demand model %s: %u local workers draining to idle", m->name, draining);
    return json_pack("{s:i, s:s, s:I}", "status", 200, "model", m->name, "draining", (json_int_t)draining);
}

static json_t *admin(struct gateway *gw, gateway_admin_op_t op, const char *target)
{
    if (op == GATEWAY_ADMIN_WORKERS)
        return admin_workers(gw);
    if (op == GATEWAY_ADMIN_RESTART_MODEL) {
        gateway_model_t *m = gateway_model_find(gw, target);
        if (!m)
            return admin_error(404, "model_not_found", "The model '%s' does not exist", target);
        unsigned started = gw->sup ? supervisor_restart_model(gw->sup, m->name) : 0;
        unsigned draining = drain_local(gw, m, SUPERVISOR_EXIT_RESTART);
        if (started)
            m->t_no_replica_us = m->t_no_replica_us ? clock_now_us() : 0;
        gateway_model_failed(gw, m, &(supervisor_model_info_t){0});
        log_info("admin: restart model %s: %u local workers started, %u draining to restart",
                 m->name, started, draining);
        return json_pack("{s:i, s:s, s:I, s:I}", "status", 200, "model", m->name,
                         "started", (json_int_t)started, "draining", (json_int_t)draining);
    }
    if (op == GATEWAY_ADMIN_START_MODEL || op == GATEWAY_ADMIN_STOP_MODEL)
        return admin_on_demand(gw, op == GATEWAY_ADMIN_START_MODEL, target);
    gateway_worker_t *w = worker_by_target(gw, target);
    if (!w)
        return admin_error(404, "worker_not_found",
                           "No registered worker has id or pid '%s' (see GET /admin/workers)", target);
    bool local = gateway_worker_is_local(gw, w);
    bool restart = op == GATEWAY_ADMIN_RESTART && local;
    json_t *res = json_pack("{s:i, s:s, s:s, s:I, s:s, s:b, s:b, s:I}", "status", 200,
                            "id", w->reg.replica, "model", w->reg.model, "pid", (json_int_t)w->reg.pid,
                            "state", "draining", "local", local, "restart", restart,
                            "assigned", (json_int_t)w->n_assigned);
    log_info("admin: %s worker %s", op == GATEWAY_ADMIN_RESTART ? "restart" : "drain", w->reg.replica);
    if (w->state == GATEWAY_WORKER_DRAINING) {
        /* already draining: only the exit plan changes */
        if (local)
            supervisor_expect_exit(gw->sup, (pid_t)w->reg.pid,
                                   restart ? SUPERVISOR_EXIT_RESTART : SUPERVISOR_EXIT_STAY_DOWN);
    } else {
        gateway_worker_drain(gw, w, local ? (restart ? SUPERVISOR_EXIT_RESTART : SUPERVISOR_EXIT_STAY_DOWN) : 0);
    }
    return res;
}

static void *run_models(struct gateway *gw, const gateway_cmd_t *cmd)
{
    (void)cmd;
    gateway_model_list_t *l = xcalloc(1, sizeof *l);
    l->models = xcalloc(gw->n_models + 1, sizeof *l->models);
    for (size_t i = 0; i < gw->n_models; i++)
        l->models[i] = (gateway_model_info_t){.name = xstrdup(gw->models[i].name),
                                              .n_ctx = gw->models[i].n_ctx};
    l->n = gw->n_models;
    return l;
}

static void *run_metrics(struct gateway *gw, const gateway_cmd_t *cmd)
{
    for (size_t i = 0; i < gw->n_models; i++) {
        const gateway_model_t *m = &gw->models[i];
        const char *lab[] = {m->name};
        double running = 0, waiting = (double)prio_queue_len(m->queue), used = 0, total = 0;
        for (size_t k = 0; k < gw->n_workers; k++) {
            const gateway_worker_t *w = &gw->workers[k];
            if (strcmp(w->reg.model, m->name) != 0)
                continue;
            running += w->n_assigned;
            if (w->has_load) {
                waiting += w->load.waiting;
                used += w->load.kv_blocks_used;
                total += w->load.kv_blocks_total;
            }
        }
        metrics_gauge_set(gw->m.num_requests_running, lab, running);
        metrics_gauge_set(gw->m.num_requests_waiting, lab, waiting);
        metrics_gauge_set(gw->m.kv_cache_usage_perc, lab, total > 0 ? used / total : 0);
        metrics_gauge_set(gw->m.workers_connected, lab, (double)gateway_model_replicas(gw, m->name));
        for (size_t k = 0; k < gw->n_workers; k++) {
            const gateway_worker_t *w = &gw->workers[k];
            if (w->slot >= 0 && strcmp(w->reg.model, m->name) == 0)
                metrics_gauge_set(gw->m.prefix_index_replica, (const char *[]){m->name, w->reg.replica},
                                  (double)prefix_index_slot_size(gw->pindex, w->slot));
        }
        for (int t = 0; t < PRIO_N_TIERS; t++)
            metrics_gauge_set(gw->m.queue_length, (const char *[]){m->name, prio_tier_name(t)},
                              (double)prio_queue_len_tier(m->queue, t));
    }
    metrics_gauge_set(gw->m.prefix_index_entries, NULL, (double)prefix_index_size(gw->pindex));
    return metrics_render(gw->metrics, NULL);
}

static void *run_admin(struct gateway *gw, const gateway_cmd_t *cmd)
{
    return admin(gw, cmd->op, cmd->target ? cmd->target : "");
}

static void json_item_free(void *p)
{
    json_decref(p);
}

/* Asks the core to run `run` and waits for its answer. */
static void *ask(struct gateway *gw, void *(*run)(struct gateway *, const gateway_cmd_t *),
                 void (*item_free)(void *), gateway_admin_op_t op, const char *target, int64_t timeout_us)
{
    gateway_cmd_t *cmd = xcalloc(1, sizeof *cmd);
    cmd->kind = GATEWAY_CMD_CALL;
    cmd->run = run;
    cmd->op = op;
    cmd->target = target ? xstrdup(target) : NULL;
    return gateway_ask(gw, cmd, item_free, timeout_us);
}

json_t *gateway_health(struct gateway *gw, int64_t timeout_us)
{
    return ask(gw, run_health, json_item_free, 0, NULL, timeout_us);
}

static void model_list_item_free(void *p)
{
    gateway_model_list_t *l = p;
    gateway_model_list_free(&l);
}

gateway_model_list_t *gateway_models(struct gateway *gw, int64_t timeout_us)
{
    return ask(gw, run_models, model_list_item_free, 0, NULL, timeout_us);
}

void gateway_model_list_free(gateway_model_list_t **lp)
{
    gateway_model_list_t *l = *lp;
    if (!l)
        return;
    *lp = NULL;
    for (size_t i = 0; i < l->n; i++)
        free(l->models[i].name);
    free(l->models);
    free(l);
}

char *gateway_metrics_text(struct gateway *gw, int64_t timeout_us)
{
    return ask(gw, run_metrics, free, 0, NULL, timeout_us);
}

json_t *gateway_admin(struct gateway *gw, gateway_admin_op_t op, const char *target, int64_t timeout_us)
{
    return ask(gw, run_admin, json_item_free, op, target, timeout_us);
}

static void *run_vis(struct gateway *gw, const gateway_cmd_t *cmd)
{
    proto_vis_t *v = xcalloc(1, sizeof *v);
    gateway_model_t *m = gateway_model_find(gw, cmd->target ? cmd->target : "");
    if (m)
        *v = m->vis;
    return v;
}

void gateway_model_vis(struct gateway *gw, const char *model, proto_vis_t *out, int64_t timeout_us)
{
    memset(out, 0, sizeof *out);
    proto_vis_t *v = ask(gw, run_vis, free, GATEWAY_ADMIN_WORKERS, model ? model : "", timeout_us);
    if (v) {
        *out = *v;
        free(v);
    }
}
