/* gateway.h — the gateway's state and its core thread.
 *
 * Threads of pagoda-gateway:
 *   main      parses options, starts the rest, waits for SIGINT/SIGTERM,
 *             tears everything down (see gateway_main.c)
 *   http      libmicrohttpd's threads (gateway/http.c): parse requests,
 *             answer from results the core sends back
 *   core      this module: the only thread that touches the ZeroMQ ROUTER
 *             socket and the worker table (ZeroMQ sockets are not
 *             thread-safe, and one owner needs no locks on the table)
 *
 * Other threads talk to the core by pushing a gateway_cmd_t into
 * gw->inbox (a chan_t whose eventfd the core polls next to the socket);
 * every command carries its own reply channel, which the core answers on.
 * Requests (SUBMIT → EVENTs) will flow the same way: an HTTP thread posts a
 * command, the core dispatches to a worker, and streams EVENTs back on the
 * request's reply channel.
 *
 * Liveness (Paranoid Pirate, see proto/msg.h): the core sends every
 * registered worker a HEARTBEAT each heartbeat_ms, and forgets a worker after
 * PROTO_LIVENESS of the worker's own intervals without a message from it, or
 * at once when ZeroMQ reports its connection gone (EHOSTUNREACH on send).
 * A message from an unknown connection other than REGISTER is answered with
 * ERROR 409 so the worker registers again (e.g. after a gateway restart).
 */
#ifndef PAGODA_GATEWAY_GATEWAY_H
#define PAGODA_GATEWAY_GATEWAY_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/chan.h"
#include "proto/msg.h"

typedef struct gateway_config {
    const char *worker_endpoint;  /* ZeroMQ endpoint the ROUTER binds, "tcp://127.0.0.1:5557" */
    int heartbeat_ms;             /* our HEARTBEAT interval to workers */
} gateway_config_t;

typedef enum gateway_worker_state {
    GATEWAY_WORKER_READY = 0,     /* registered, heartbeating */
    GATEWAY_WORKER_DRAINING,      /* told to DRAIN: no new SUBMITs */
} gateway_worker_state_t;

/* One connected worker replica. */
typedef struct gateway_worker {
    proto_peer_t peer;            /* ROUTER identity of its connection */
    proto_register_t reg;         /* what it announced; owns its strings */
    gateway_worker_state_t state;
    int64_t t_registered_us;      /* monotonic */
    int64_t t_last_seen_us;       /* last valid message of any type */
    int64_t t_last_heartbeat_us;  /* last HEARTBEAT, 0 = none yet */
    int64_t interval_us;          /* its heartbeat interval (REGISTER/HEARTBEAT hb_ms) */
    uint64_t heartbeat_seq;       /* seq of its last HEARTBEAT */
    bool has_load;                /* load below came with a HEARTBEAT */
    proto_load_t load;            /* last reported load */
} gateway_worker_t;

/* The gateway process state. Fields marked [core] are touched only by the
 * core thread once it runs; [any] are safe from any thread. */
struct gateway {
    /* configuration (copied) */
    char *worker_endpoint;        /* [any] as bound: a port 0 is resolved ("tcp://127.0.0.1:41234") */
    int heartbeat_ms;             /* [any] read-only after gateway_new */

    /* ZeroMQ */
    void *zctx;                   /* [core] context, terminated in gateway_free */
    void *router;                 /* [core] ROUTER bound to worker_endpoint */

    /* worker table: a small array, removal moves the last entry into the gap */
    gateway_worker_t *workers;    /* [core] (n_workers) of cap_workers */
    size_t n_workers, cap_workers;

    /* our heartbeats */
    uint64_t heartbeat_seq;       /* [core] seq of the next HEARTBEAT we send */
    int64_t t_next_heartbeat_us;  /* [core] when to send it (monotonic) */

    /* counters, for /health and /metrics later */
    uint64_t n_malformed;         /* [core] messages dropped as malformed */
    uint64_t n_workers_lost;      /* [core] workers removed as dead */

    /* threads */
    chan_t *inbox;                /* [any] gateway_cmd_t* to the core (CHAN_FD) */
    pthread_t core;               /* the core thread */
    bool core_started;            /* [main] joined in gateway_free */
};

typedef enum gateway_cmd_kind {
    GATEWAY_CMD_HEALTH,           /* reply: json_t* /health body */
} gateway_cmd_kind_t;

/* A command to the core. The core answers by pushing a result onto `reply`
 * (for HEALTH a json_t* the receiver owns) and then frees the command. */
typedef struct gateway_cmd {
    gateway_cmd_kind_t kind;
    chan_t *reply;                /* a reference owned by the command */
} gateway_cmd_t;

/* Binds the ROUTER socket and starts the core thread. Returns NULL (logged)
 * when the endpoint cannot be bound. Free with gateway_free. */
struct gateway *gateway_new(const gateway_config_t *cfg);

/* Stops the core thread, closes the socket and frees everything; NULLs *gw. */
void gateway_free(struct gateway **gw);

/* Any thread: a snapshot of the gateway for GET /health, or NULL when the
 * core did not answer within timeout_us (or is stopping). Caller owns the
 * returned object (json_decref). Shape:
 *   {"status": "ok" | "no_workers", "heartbeat_ms": int,
 *    "workers": [{"id", "model", "host", "pid", "state", "last_heartbeat_ms_ago",
 *                 "liveness", "capacity", "n_ctx", "n_vocab", "kv_blocks",
 *                 "block_size", "load": {...} | null}]}
 * "liveness" counts heartbeat intervals left before the worker is dropped
 * (PROTO_LIVENESS when fresh). */
json_t *gateway_health(struct gateway *gw, int64_t timeout_us);

#endif
