/* worker_link.h — a worker's connection to the gateway.
 *
 * Owns one ZeroMQ DEALER socket connected to the gateway's ROUTER, on a
 * thread of its own, and keeps the protocol's housekeeping out of the
 * worker's step loop:
 *   - sends REGISTER on every (re)connect;
 *   - sends HEARTBEAT every heartbeat interval, carrying the load set by
 *     worker_link_set_load and the step progress recorded by
 *     worker_link_step_begin/_end — also while a forward step runs for
 *     seconds: heartbeats never wait on the step loop, so the gateway judges
 *     a slow step by its progress deadline, not by missed heartbeats;
 *   - adopts the heartbeat interval the gateway announces in its HEARTBEATs
 *     (unless heartbeat_explicit);
 *   - treats any valid message from the gateway as a sign of life; after
 *     PROTO_LIVENESS of the gateway's intervals of silence it closes the
 *     socket and reconnects after a backoff that doubles from heartbeat_ms
 *     up to PROTO_RECONNECT_MAX_MS (reset once the gateway answers);
 *   - answers the gateway's ERROR 409 ("not registered") with a new REGISTER.
 * Everything else the gateway sends (SUBMIT, CANCEL, DRAIN, SHUTDOWN, other
 * ERRORs) is handed to the caller, in order, through an inproc PAIR pipe
 * (the link thread forwards the frames as they came; the caller's side
 * decodes them). The caller's EVENTs and ERRORs go the other way through the
 * same pipe.
 *
 * The step loop (worker.c) looks like:
 *     for (;;) {
 *         rc = worker_link_poll(link, busy ? 0 : heartbeat_ms, wake_fd, &msg);
 *         ... handle msg / wake ...
 *         if (busy) { worker_link_step_begin(link); step(); worker_link_step_end(link); }
 *     }
 *
 * Threads: worker_link_new/poll/send/take_lost/free from the caller's thread
 * (one thread); set_load, step_begin/_end, registered, reconnects and
 * heartbeat_ms are safe from any thread. The link thread is internal.
 */
#ifndef PAGODA_WORKER_WORKER_LINK_H
#define PAGODA_WORKER_WORKER_LINK_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/msg.h"

typedef struct worker_link_config {
    const char *endpoint;           /* gateway's ROUTER, "tcp://127.0.0.1:5557" */
    int heartbeat_ms;               /* our heartbeat interval (0 = PROTO_HEARTBEAT_MS) */
    bool heartbeat_explicit;        /* keep heartbeat_ms; false = adopt the gateway's */
    const _Atomic uint64_t *work_done; /* optional (NULL): a counter the step loop
                                       advances inside a step (forward layers,
                                       sched_set_progress); an advance counts as
                                       progress like a completed step. Must
                                       outlive the link. */
    _Atomic uint32_t *preempt;      /* optional (NULL): the scheduler's preemption word
                                       (sched_preempt_word): each generation SUBMIT is
                                       offered to it (sched_preempt_offer) once it is on
                                       its way to the caller, so a better tier stops a
                                       worse tier's prefill step. Must outlive the link. */
    const proto_register_t *reg;    /* announced on each connect; copied. Its
                                       version and heartbeat_ms are set here. */
    /* CURVE (proto/curve.h): all three Z85 keys, or none for a plain link */
    const char *curve_server_key;   /* the gateway's public key */
    const char *curve_public_key;   /* our key pair */
    const char *curve_secret_key;
} worker_link_config_t;

typedef struct worker_link worker_link_t;

/* worker_link_poll() results */
enum {
    WORKER_LINK_IDLE = 0,           /* timeout: nothing for the caller */
    WORKER_LINK_MSG = 1,            /* *out holds a message: proto_msg_clear it */
    WORKER_LINK_WAKE = 2,           /* wake_fd became readable (not read) */
};

/* Creates the ZeroMQ context and connects (REGISTER is queued at once; ZeroMQ
 * delivers it when the TCP connection is up). NULL on a bad endpoint (logged).
 * Free with worker_link_free. */
worker_link_t *worker_link_new(const worker_link_config_t *cfg);
void worker_link_free(worker_link_t **l);

/* The load the next HEARTBEATs carry (copied). running + waiting > 0 makes
 * the worker "busy" in the HEARTBEAT's progress (it owes steps). */
void worker_link_set_load(worker_link_t *l, const proto_load_t *load);

/* Brackets one scheduler step: the link counts completed steps, the time of
 * the last one and the slowest of the last PROTO_PROGRESS_WINDOW, for the
 * HEARTBEAT's "prog" (proto/msg.h). Its stall_ms counts from the last
 * completed step or the last advance of cfg.work_done (sampled at each
 * heartbeat), so a long step whose layers advance is not a stall. */
void worker_link_step_begin(worker_link_t *l);
void worker_link_step_end(worker_link_t *l);

/* The heartbeat interval in use now, ms (the gateway's once adopted). */
int worker_link_heartbeat_ms(const worker_link_t *l);

/* Waits up to timeout_ms (0 = just look) for a message from the gateway
 * (heartbeats and reconnects happen on the link thread meanwhile, whether
 * or not this is called). wake_fd (-1 = none) is polled too, e.g. a
 * signalfd. Returns one of the WORKER_LINK_* values above. */
int worker_link_poll(worker_link_t *l, int timeout_ms, int wake_fd, proto_msg_t *out);

/* Announces a new REGISTER (reg is copied; e.g. the adapter set changed at
 * run time): the link thread keeps it for its reconnects from now on and
 * sends it at once, in order with what worker_link_send queued before and
 * after. */
void worker_link_register(worker_link_t *l, const proto_register_t *reg);

/* Sends an EVENT or ERROR to the gateway without blocking (it is queued to
 * the link thread). Returns 0, or -1 when there is no connection right now
 * (the message is dropped; the gateway re-dispatches or fails requests of a
 * worker it lost). The link thread also drops, with a warning, a message the
 * DEALER cannot take at once (its queue full). */
int worker_link_send(worker_link_t *l, const proto_msg_t *m);

/* True once the gateway answered our latest REGISTER (with a heartbeat). */
bool worker_link_registered(const worker_link_t *l);

/* REGISTERs the gateway has answered since the link was made: a change
 * means a new registration (state the gateway keeps per registration, such
 * as the prefix-cache keys of KV messages, must be sent again). */
uint64_t worker_link_registrations(const worker_link_t *l);
/* True once after the link lost its gateway: it gave up on a silent one, or
 * the gateway answered ERROR 409 (it restarted, or dropped us). Requests the
 * worker holds came from that gateway and their results can no longer be
 * delivered (the gateway re-dispatches them), so the caller drops them —
 * before it handles the message this poll returned, which may already be a
 * SUBMIT from the new registration. */
bool worker_link_take_lost(worker_link_t *l);

/* Times the link gave up on a silent gateway and reconnected. */
uint64_t worker_link_reconnects(const worker_link_t *l);

#endif
