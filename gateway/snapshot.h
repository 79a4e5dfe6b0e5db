/* snapshot.h — the core's answers to the read-mostly HTTP routes: GET
 * /health, GET /v1/models, GET /metrics, and the operations API (GET
 * /admin/workers, drain / restart of a worker or a model).
 *
 * Every function runs on the core thread (gateway.c's on_command), which owns
 * the worker table, the models and the queues, so nothing here locks. The
 * HTTP side reaches them through gateway_health / gateway_models_json /
 * gateway_metrics_text / gateway_admin (gateway.h documents the shapes). */
#ifndef PAGODA_GATEWAY_SNAPSHOT_H
#define PAGODA_GATEWAY_SNAPSHOT_H

#include <jansson.h>

#include "gateway/gateway.h"

/* GET /health body (gateway_health's shape). Caller owns it. */
json_t *snapshot_health(struct gateway *gw);
/* The operations API: {"status": HTTP status, ...result or "error"}
 * (gateway_admin's shape). DRAIN / RESTART / RESTART_MODEL act (drain a
 * worker, start local ones) before answering. Caller owns it. */
json_t *snapshot_admin(struct gateway *gw, gateway_admin_op_t op, const char *target);
/* GET /v1/models body, malloc'd. */
char *snapshot_models(struct gateway *gw);
/* GET /metrics body, malloc'd; refreshes the gauges (queues, running, KV
 * usage, replicas, routing index) first. */
char *snapshot_metrics(struct gateway *gw);

#endif
