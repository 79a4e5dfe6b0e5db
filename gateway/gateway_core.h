/* gateway_core.h — the core's worker and model tables as other core-thread
 * modules (snapshot.c) read and act on them. Private to the gateway core:
 * every function here must be called on the core thread (gateway.h, "[core]"
 * fields), never from an HTTP thread. */
#ifndef PAGODA_GATEWAY_GATEWAY_CORE_H
#define PAGODA_GATEWAY_GATEWAY_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/gateway.h"
#include "gateway/supervisor.h"

/* models */
gateway_model_t *gateway_model_find(struct gateway *gw, const char *name);    /* NULL = unknown */
size_t gateway_model_replicas(const struct gateway *gw, const char *name);    /* registered */
size_t gateway_model_ready_replicas(const struct gateway *gw, const char *name); /* not draining */
/* Its local workers, all zero without a supervisor. */
void gateway_model_local(struct gateway *gw, const char *name, supervisor_model_info_t *out);
/* True when every local worker of the model is given up (crash loop) and
 * nothing else serves it; keeps m->failed and pagoda_model_failed current. */
bool gateway_model_failed(struct gateway *gw, gateway_model_t *m, supervisor_model_info_t *li);

/* workers */
const char *gateway_worker_state_name(gateway_worker_state_t s); /* "ready" / "draining" */
gateway_worker_t *gateway_worker_by_replica(struct gateway *gw, const char *replica);
gateway_worker_t *gateway_worker_by_uid(struct gateway *gw, uint64_t uid);      /* NULL = gone */
/* Sends m to w without blocking; a closed connection removes w (its
 * requests are re-dispatched). 0, or -1. */
int gateway_worker_send(struct gateway *gw, gateway_worker_t *w, const proto_msg_t *m);
/* On our host with a pid that is one of the supervisor's children. */
bool gateway_worker_is_local(struct gateway *gw, const gateway_worker_t *w);
/* Sends DRAIN; `plan` = the supervisor's exit plan for a local one (0 = none). */
void gateway_worker_drain(struct gateway *gw, gateway_worker_t *w, int plan);
int64_t gateway_worker_expiry_us(const gateway_worker_t *w);  /* silence deadline, monotonic */
/* How long a busy worker may complete no step before it is hung. */
int64_t gateway_worker_progress_deadline_us(const struct gateway *gw, const gateway_worker_t *w);
int64_t gateway_worker_credit(const gateway_worker_t *w);     /* SUBMITs it can take now */

/* the core's halves of gateway_calls.c */
/* Hands a reply to the HTTP side (which may be gone: then it is freed). */
void gateway_request_push(gateway_request_t *r, gateway_reply_t *rep);
/* Frees a command (a gateway_cmd_t *; the inbox's item free) with its
 * reply channel and request references. */
void gateway_cmd_free(void *cmd);

#endif
