/* snapshot.h — the read-mostly HTTP routes' answers: GET /health, GET
 * /v1/models, GET /metrics, and the operations API (GET /admin/workers,
 * drain / restart of a worker or a model).
 *
 * Any thread calls these; each sends the core a CALL command (gateway.h)
 * that runs this file's builder on the core thread, which owns the worker
 * table, the models and the queues, so nothing here locks. The core does
 * not know this file: it only runs what a command names (so the core and
 * its snapshots are no circle of files). */
#ifndef PAGODA_GATEWAY_SNAPSHOT_H
#define PAGODA_GATEWAY_SNAPSHOT_H

#include <jansson.h>

#include "gateway/gateway.h"

/* Any thread: a snapshot of the gateway for GET /health, or NULL when the
 * core did not answer within timeout_us (or is stopping). Caller owns the
 * returned object (json_decref). Shape:
 *   {"status": "ok" | "no_workers", "heartbeat_ms": int, "host": our hostname,
 *    "models": {NAME: {"state", "replicas": int, "queued": int, "running": int,
 *                      "free_slots": int, "configured": bool, "local_workers": int,
 *                      "on_demand": bool, "failed_reason"?,
 *                      "queue": {"high"|"normal"|"low": {"queued": int,
 *                                "oldest_wait_ms": int (0 when empty)}}}},
 *    "local_workers": supervisor_json()'s array (every local process slot:
 *                 model, pid, prev_pid, state, restarts, ...; [] without any),
 *    "workers": [{"id", "model", "host", "pid", "state", "last_heartbeat_ms_ago",
 *                 "liveness", "capacity", "n_ctx", "n_vocab", "kv_blocks",
 *                 "block_size", "assigned", "load": {...} | null,
 *                 "progress": {"steps", "busy", "stall_ms", "slow_ms",
 *                              "deadline_ms"} | null}]}
 * "liveness" counts heartbeat intervals left before the worker is dropped
 * (PROTO_LIVENESS when fresh); "assigned"/"running" count our requests on
 * workers, load.running what the worker itself last reported. "progress":
 * steps completed, busy (holds requests), stall_ms (no step completed for
 * that long while busy, now), slow_ms (slowest recent step) and the stall
 * deadline_ms past which it is declared hung (0 = check off). */
json_t *gateway_health(struct gateway *gw, int64_t timeout_us);

/* GET /v1/models's data: every known model, as plain data (the OpenAI
 * surface renders the body, oai_models_json). NULL on timeout; free with
 * gateway_model_list_free. */
typedef struct gateway_model_info {
    char *name;                   /* malloc'd */
    uint32_t n_ctx;               /* the last replica's context length, 0 = none seen */
} gateway_model_info_t;
typedef struct gateway_model_list {
    gateway_model_info_t *models; /* (n) */
    size_t n;
} gateway_model_list_t;
gateway_model_list_t *gateway_models(struct gateway *gw, int64_t timeout_us);
void gateway_model_list_free(gateway_model_list_t **l);

/* GET /metrics body (malloc'd, caller frees) or NULL on timeout. The core
 * refreshes the gauges (queue lengths, running, KV usage, replicas) first. */
char *gateway_metrics_text(struct gateway *gw, int64_t timeout_us);

/* Operations API. Returns NULL on timeout, else a JSON object the caller
 * owns with an integer "status" (the HTTP status to answer; take it out
 * before sending) and either the result or an OpenAI-shaped "error":
 *   WORKERS        200 {"workers": [{"id" (replica id, null for a local
 *                  worker that is not registered), "model", "host", "pid",
 *                  "state" ("ready"|"draining" registered; "starting"|
 *                  "backoff"|"failed"|"stopped"|"idle" local and not
 *                  registered), "local", "uptime_s", "assigned", "load",
 *                  "restarts" (local: crash restarts; null otherwise),
 *                  "last_exit"}]}
 *   DRAIN          target = replica id or pid: 200 {"id", "model", "pid",
 *                  "state":"draining", "local", "restart": false, "assigned"
 *                  (requests it still runs)}; a drained local worker is not restarted
 *   RESTART        the same, then a local worker is started again
 *                  ("restart": true; a remote one only drains, "restart": false)
 *   RESTART_MODEL  target = model name: 200 {"model", "started", "draining"}:
 *                  FAILED/stopped local workers start now, live local ones
 *                  drain and restart.
 *   START_MODEL    target = an on-demand model: 200 {"model", "started"}: its
 *                  idle local workers start now (as a request would start
 *                  them) and its idle time counts from now
 *   STOP_MODEL     target = an on-demand model: 200 {"model", "draining"}: it
 *                  is idle from now: ready local workers drain to idle at
 *                  once, starting ones once ready; the next request starts
 *                  it again. 409 not_on_demand for another model.
 *   404 for an unknown worker or model. */
json_t *gateway_admin(struct gateway *gw, gateway_admin_op_t op, const char *target,
                      int64_t timeout_us);

/* The vision encoder of `model` as its workers registered it (REGISTER vis):
 * out->has = false for an unknown model, one without vision, or no answer
 * within timeout_us. Any thread. */
void gateway_model_vis(struct gateway *gw, const char *model, proto_vis_t *out, int64_t timeout_us);

#endif
