/* gateway.h — the gateway's state, its core thread and the request path.
 *
 * Threads of pagoda-gateway:
 *   main      parses options, starts the rest, waits for signals (SIGHUP
 *             reloads the keys file), tears everything down (gateway_main.c)
 *   http      libmicrohttpd's pool (gateway/http*.c): parse and authorize
 *             requests, turn replies into JSON bodies or SSE streams
 *   core      this module: the only thread that touches the ZeroMQ ROUTER
 *             socket, the worker table, the per-model queues and the table
 *             of requests in flight (ZeroMQ sockets are not thread-safe, and
 *             one owner needs no locks on the tables)
 *   supervisor  spawns and restarts local workers (gateway/supervisor.h)
 *
 * Other threads talk to the core by pushing a gateway_cmd_t into gw->inbox
 * (a chan_t whose eventfd the core polls next to the socket).
 *
 * Life of a generation request
 * ----------------------------
 *   1. An HTTP thread builds a gateway_request_t (gateway_request_from_oai),
 *      registers a notify hook and calls gateway_submit().
 *   2. The core looks the model up: unknown → reply 404; no replica for
 *      longer than replica_grace → 503 (not while a local worker of the
 *      model is starting or restarting: then requests wait up to their
 *      deadline); queue full → 429. Otherwise the
 *      request enters the model's priority queue (prio_queue.h) with its
 *      tier and a deadline (now + request_timeout).
 *   3. Dispatch: while the queue is not empty and a READY replica of the
 *      model has credit, the most urgent request goes to the replica with
 *      the most free slots as a SUBMIT (priority = tier). Credit of a replica
 *      = min(capacity − requests we have on it, free_slots of its last
 *      HEARTBEAT − SUBMITs since + finishes since).
 *   4. Each EVENT from the worker is pushed, as a gateway_reply_t, onto the
 *      request's `replies` channel, then the notify hook runs (under the
 *      request's lock) so the HTTP side can resume its connection. The last
 *      reply is an EVENT with a finish reason or an ERROR.
 *   5. Failures: a queued request past its deadline → 504; a running one
 *      without progress for request_timeout (no EVENT for it and no step on
 *      its worker; the worker itself ends one that gets no rows) → 504; a
 *      worker ERROR →
 *      an ERROR reply with its code (503 "no credit" before any output →
 *      back into the queue instead); a worker that dies (liveness or
 *      disconnect) → each of its requests goes back into the queue with its
 *      original enqueue time. One that had produced output is *resumed*: the
 *      core keeps every token id it passed to the HTTP side (sent_ids), and
 *      the next SUBMIT carries them as `resume`, so the new replica continues
 *      after them without sending them again — the client sees one unbroken
 *      stream (or one complete JSON body). Only when no replica takes it
 *      before its deadline (504) or the model has had none for
 *      replica_grace (503; but a local worker being restarted is waited
 *      for up to the deadline) does it end with an ERROR reply.
 *   6. gateway_cancel() (client gone): queued → removed at once; on a worker
 *      → CANCEL sent, the record is dropped at the worker's final EVENT.
 *
 * Liveness (Paranoid Pirate, see proto/msg.h): the core sends every
 * registered worker a HEARTBEAT each heartbeat_ms, and forgets a worker after
 * PROTO_LIVENESS of the worker's own intervals without a message from it, or
 * at once when ZeroMQ reports its connection gone (EHOSTUNREACH on send).
 * Workers heartbeat from a thread that does not wait on the forward pass, so
 * silence means a stopped or dead process, never a slow step. A worker that
 * heartbeats but makes no progress — busy (it holds requests) and no step
 * completed for max(progress_timeout, PROTO_PROGRESS_SCALE × its slowest
 * recent step), from the HEARTBEAT's "prog" — is hung: removed like a silent
 * one (its requests re-dispatched, a local one SIGKILLed and restarted).
 * A message from an unknown connection other than REGISTER is answered with
 * ERROR 409 so the worker registers again (e.g. after a gateway restart).
 *
 * Local workers (gateway_set_supervisor): a worker whose host is ours and
 * whose pid is a supervisor child is "local". A local worker dropped for
 * silence (hung, e.g. SIGSTOP) is killed with SIGKILL so the supervisor
 * restarts it. A model whose local workers are all FAILED (crash loop) and
 * that has no other replica answers 503 at once. On-demand models get their
 * worker started by the first queued request and drained after idle_timeout
 * without requests. The operations API (gateway_admin) drains and restarts
 * workers.
 */
#ifndef PAGODA_GATEWAY_GATEWAY_H
#define GATEWAY_AFFINITY_SLOTS 4096 /* affinity keys remembered (gateway.affinity) */
#define PAGODA_GATEWAY_GATEWAY_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/chan.h"
#include "gateway/lora_table.h"
#include "gateway/metrics.h"
#include "gateway/oai.h"
#include "gateway/prefix_index.h"
#include "gateway/prio_queue.h"
#include "gateway/route.h"
#include "gateway/submit.h"
#include "proto/curve.h"
#include "proto/msg.h"

#define GATEWAY_DEFAULT_TIMEOUT_S 600     /* --request-timeout */
#define GATEWAY_DEFAULT_GRACE_S 30        /* --replica-grace */
#define GATEWAY_DEFAULT_MAX_QUEUE 1024    /* --max-queue, per model */
#define GATEWAY_DEFAULT_IDLE_S 300        /* --idle-timeout, on-demand models */
#define GATEWAY_DEFAULT_LORA_TIMEOUT_S 60 /* --lora-timeout: the workers' answers to one adapter load or unload */
#define GATEWAY_DEFAULT_MAX_REDISPATCH 2  /* --max-redispatch: worker losses a request survives */
/* A RUNNING request past its progress deadline by this much (the worker enforces
 * deadline_ms itself, so normally its final EVENT comes first) gets 504 and a
 * CANCEL; a cancelled RUNNING request whose final EVENT has not come this long
 * after the CANCEL is dropped (its worker slot freed). */
#define GATEWAY_RUNNING_DEADLINE_SLACK_US 1000000
#define GATEWAY_CANCEL_GRACE_US 5000000

typedef struct gateway_config {
    const char *worker_endpoint;  /* ZeroMQ endpoint the ROUTER binds, "tcp://127.0.0.1:5557" */
    int heartbeat_ms;             /* our HEARTBEAT interval to workers, 0 = default */
    size_t max_queue;             /* per-model queue bound, 0 = GATEWAY_DEFAULT_MAX_QUEUE */
    double aging_per_s;           /* priority units per waited second, < 0 = prio_queue default */
    int64_t request_timeout_us;   /* queue deadline and running no-progress deadline (also
                                     passed to workers), 0 = default */
    int64_t replica_grace_us;     /* how long a known model may have no replica before
                                     its requests get 503, 0 = default; not applied
                                     while a local worker of it is (re)starting */
    int64_t lora_timeout_us;      /* how long a run-time adapter load or unload waits for
                                     the workers' LORA_ACKs, 0 = default */
    const char *const *models;    /* (n_models) model names known from the start (local
                                     workers); others become known when a worker registers */
    size_t n_models;
    int64_t idle_timeout_us;      /* on-demand models: drain the local worker after this
                                     long without requests, 0 = GATEWAY_DEFAULT_IDLE_S */
    const double *idle_timeout_s; /* (n_models) per-model idle time of on-demand models, s;
                                     NULL (or an entry ≤ 0) = idle_timeout_us */
    const char *curve_secret_key; /* Z85 secret key: the ROUTER becomes a CURVE server that
                                     admits only curve_authorized (gateway/zap.h); NULL = plain */
    const curve_keylist_t *curve_authorized; /* worker public keys (copied), with the above */
    int max_redispatch;           /* a request whose worker is lost more often than this
                                     gets 502; 0 = GATEWAY_DEFAULT_MAX_REDISPATCH, < 0 = none */
    int64_t progress_timeout_ms;  /* a busy worker with no completed step for
                                     max(this, PROTO_PROGRESS_SCALE × its slowest recent
                                     step) is hung; 0 = PROTO_PROGRESS_TIMEOUT_MS, < 0 = off */
    route_mode_t routing;         /* which replica gets a request (gateway/route.h) */
    const char *const *model_paths; /* (n_models) GGUF file of each model, read for its
                                     tokenizer (routing by cache); NULL / NULL entry = none */
    size_t prefix_index_entries;  /* keys in the routing index, 0 = PREFIX_INDEX_DEFAULT_ENTRIES */
    uint32_t route_max_load_gap;  /* cache-aware: how many more requests than the least-loaded
                                     replica the one holding the prefix may have; 0 =
                                     ROUTE_DEFAULT_MAX_LOAD_GAP */
    lora_table_t *loras;          /* LoRA adapters as model names (gateway/lora_table.h);
                                     taken by gateway_new (also when it fails), NULL = none */
} gateway_config_t;

typedef enum gateway_worker_state {
    GATEWAY_WORKER_READY = 0,     /* registered, heartbeating */
    GATEWAY_WORKER_DRAINING,      /* told to DRAIN: no new SUBMITs */
} gateway_worker_state_t;

/* One connected worker replica. */
typedef struct gateway_worker {
    uint64_t uid;                 /* gateway-local id of this registration, never reused */
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
    bool has_progress;            /* progress below came with a HEARTBEAT (newer workers) */
    proto_progress_t progress;    /* step progress of its last HEARTBEAT */
    int64_t t_progress_us;        /* when that HEARTBEAT came (its stall_ms is as of then) */
    uint32_t n_assigned;          /* our requests on it (SUBMIT sent, no final reply yet) */
    int64_t hb_credit;            /* free_slots of the last HEARTBEAT (capacity before one),
                                     − SUBMITs since, + finishes since */
    int slot;                     /* its slot in gw->pindex, -1 = none (over 64 replicas) */
    bool has_counted;             /* `counted` holds cumulative counters already added to
                                     our metrics (this or an earlier registration) */
    proto_load_t counted;         /* their values (prefix cache, preemptions) */
} gateway_worker_t;

/* Cumulative counters of a removed registration, kept so that the same
 * worker process registering again (reconnect, ERROR 409) is counted from
 * where it left off, not from 0 again. */
typedef struct gateway_retired {
    char replica[PROTO_MAX_NAME + 1]; /* "" = empty entry */
    proto_load_t counted;
} gateway_retired_t;
#define GATEWAY_RETIRED 64

/* One model: known from the configuration or from a registration. */
typedef struct gateway_model {
    char *name;
    prio_queue_t *queue;          /* requests waiting for a replica slot */
    bool configured;              /* named in gateway_config_t.models */
    int64_t t_no_replica_us;      /* since when no replica is up, 0 = some is */
    uint32_t n_ctx;               /* context length of the last replica seen */
    int64_t t_last_active_us;     /* last request submitted or finished (on-demand idling) */
    int64_t idle_timeout_us;      /* on-demand: idle time before the drain, 0 = gw's */
    bool failed;                  /* last seen: local workers given up (crash loop) */
    proto_vis_t vis;              /* the vision encoder of the last replica seen (REGISTER
                                     vis); has = false: the model takes no images */
} gateway_model_t;

/* The gateway process state. Fields marked [core] are touched only by the
 * core thread once it runs; [any] are safe from any thread. */
struct gateway {
    /* configuration (copied) */
    char *worker_endpoint;        /* [any] as bound: a port 0 is resolved ("tcp://127.0.0.1:41234") */
    int heartbeat_ms;             /* [any] read-only after gateway_new */
    prio_queue_config_t queue_cfg;/* [any] read-only */
    int64_t request_timeout_us;   /* [any] read-only */
    int64_t replica_grace_us;     /* [any] read-only */
    int64_t lora_timeout_us;      /* [any] read-only: adapter loads' wait (gateway_lora.c) */
    int64_t idle_timeout_us;      /* [any] read-only */
    uint32_t max_redispatch;      /* [any] read-only */
    int64_t progress_timeout_us;  /* [any] read-only; floor of the progress deadline, 0 = off */
    int64_t t_next_sweep_us;      /* [core] next check of RUNNING deadlines */
    char hostname[256];           /* [any] ours: a worker on this host may be a local child */

    /* ZeroMQ */
    void *zctx;                   /* [core] context, terminated in gateway_free */
    void *router;                 /* [core] ROUTER bound to worker_endpoint */
    struct zap *zap;              /* [any] CURVE ZAP handler (zap.h), NULL = plain */

    /* worker table: a small array, removal moves the last entry into the gap */
    gateway_worker_t *workers;    /* [core] (n_workers) of cap_workers */
    size_t n_workers, cap_workers;
    uint64_t next_worker_uid;     /* [core] */

    /* models */
    gateway_model_t *models;      /* [core] (n_models) of cap_models */
    size_t n_models, cap_models;

    /* requests in flight (queued or on a worker): chained hash by id */
    struct gateway_request **req_buckets; /* [core] (n_req_buckets), a power of two */
    size_t n_req_buckets, n_requests;

    /* our heartbeats */
    uint64_t heartbeat_seq;       /* [core] seq of the next HEARTBEAT we send */
    int64_t t_next_heartbeat_us;  /* [core] when to send it (monotonic) */

    /* routing by cache (gateway/route.h) */
    lora_table_t *loras;          /* [any] read-only: adapters served as model names, never NULL */
    route_mode_t routing;         /* [any] read-only */
    uint32_t route_max_load_gap;  /* [any] read-only */
    route_text_t *route_text;     /* [any] read-only: tokenizers for request keys */
    atomic_int route_block_size;  /* [any] tokens per KV block of the last registration */
    prefix_index_t *pindex;       /* [core] block key → replica slots, from KV messages */
    uint64_t slots_used;          /* [core] pindex slots held by registrations */
    /* affinity keys (Responses prompt_cache_key): hash of model + key → the
     * replica (worker uid) its last request went to; a fixed table, a newer
     * key overwrites an older one in its slot */
    struct gateway_affinity { uint64_t h, uid; } affinity[GATEWAY_AFFINITY_SLOTS]; /* [core] */
    gateway_retired_t retired[GATEWAY_RETIRED]; /* [core] ring of removed registrations' counters */
    size_t i_retired;             /* [core] next entry of the ring to overwrite */

    /* local workers */
    struct supervisor *sup;       /* [core] borrowed, NULL = none (gateway_set_supervisor) */
    /* run-time adapter loads and unloads waiting for their workers (gateway_lora.h) */
    struct gateway_lora_op *lora_ops; /* [core] (n_lora_ops) of cap_lora_ops */
    size_t n_lora_ops, cap_lora_ops;
    uint64_t next_lora_seq;       /* [core] the last LORA seq sent */
    /* [core] that module's hooks, installed by its first operation (NULL
     * before): the core calls them, it does not call the module */
    void (*lora_ack)(struct gateway *gw, gateway_worker_t *w, const proto_lora_op_t *ack);
    void (*lora_tick)(struct gateway *gw, int64_t now);
    int64_t (*lora_wake)(const struct gateway *gw); /* the earliest operation deadline, or INT64_MAX:
                                                       the core wakes then to tick (a 504 is on time
                                                       whatever the heartbeat interval) */
    void (*lora_stop)(struct gateway *gw);

    /* lifetime */
    atomic_bool stopping;         /* [any] SIGTERM: new requests get 503 */
    atomic_size_t n_inflight;     /* [any] mirror of n_requests for the main thread */
    int fatal_fd;                 /* [any] eventfd written when the core thread dies */

    /* counters, for /health and /metrics */
    uint64_t n_malformed;         /* [core] messages dropped as malformed */
    uint64_t n_workers_lost;      /* [core] workers removed as dead */
    uint64_t n_requeued;          /* [core] requests put back after a worker loss/refusal */

    /* metrics: the registry locks itself */
    metrics_t *metrics;           /* [any] */
    metrics_std_t m;              /* [any] the standard families in `metrics` */

    /* threads */
    atomic_uint_fast64_t next_request_id; /* [any] */
    chan_t *inbox;                /* [any] gateway_cmd_t* to the core (CHAN_FD) */
    pthread_t core;               /* the core thread */
    bool core_started;            /* [main] joined in gateway_free */
};

/* ---- requests -------------------------------------------------------------- */

typedef enum gateway_reply_kind {
    GATEWAY_REPLY_EVENT,          /* an EVENT from the worker (finish set on the last) */
    GATEWAY_REPLY_ERROR,          /* the request failed; always the last reply */
} gateway_reply_kind_t;

/* What the core sends back for a request. Free with gateway_reply_free. */
typedef struct gateway_reply {
    gateway_reply_kind_t kind;
    proto_event_t event;          /* EVENT: a decoded event, owns its arrays */
    oai_error_t error;            /* ERROR: status, type, code, message */
    uint32_t n_ctx;               /* EVENT: context length of the worker that sent it */
} gateway_reply_t;

void gateway_reply_free(gateway_reply_t **r);

typedef enum gateway_request_state {
    GATEWAY_REQ_NEW = 0,          /* not yet seen by the core */
    GATEWAY_REQ_QUEUED,           /* in its model's queue */
    GATEWAY_REQ_RUNNING,          /* SUBMIT sent to worker_uid */
} gateway_request_state_t;

/* A generation request, shared by its HTTP thread and the core and
 * reference-counted (each side holds one reference). */
typedef struct gateway_request {
    /* set before gateway_submit, read-only afterwards */
    uint64_t id;                  /* [any] unique, ≥ 1, also the SUBMIT id */
    char *model;                  /* [any] requested model name */
    prio_tier_t tier;             /* [any] queue tier, also the SUBMIT priority */
    proto_msg_t submit;           /* [core] the SUBMIT (heap strings, owned) */
    int64_t t_arrival_us;         /* [any] monotonic */

    /* reply path */
    chan_t *replies;              /* [any] gateway_reply_t*, core → HTTP thread */
    pthread_mutex_t lock;         /* guards notify/notify_ctx (and what the hook touches) */
    void (*notify)(void *ctx);    /* called with `lock` held after each reply is pushed */
    void *notify_ctx;
    atomic_int refs;

    /* [core] bookkeeping */
    gateway_request_state_t state;
    uint64_t worker_uid;          /* RUNNING: on which registration */
    bool cancelled;               /* the client is gone; drop replies */
    bool output_sent;             /* an EVENT with tokens reached the HTTP side */
    int64_t t_enqueue_us;         /* first enqueue (kept on requeue) */
    int64_t t_deadline_us;        /* queued: arrival + request_timeout; running: last
                                     progress (dispatch, an EVENT) + request_timeout */
    int64_t t_first_token_us, t_last_token_us;
    int32_t *sent_ids;            /* (n_sent) token ids passed to the HTTP side: the resume
                                     list if its worker is lost */
    uint32_t n_sent, cap_sent;
    uint32_t n_lost;              /* workers lost while running it (> max_redispatch → 502) */
    int64_t t_cancel_us;          /* when a RUNNING request was cancelled (0 = not) */
    uint32_t n_prompt;            /* prompt tokens as a worker last reported (0 = not yet) */
    uint32_t n_slots;             /* RUNNING: sequence slots taken on its worker (n choices,
                                     at most the worker's capacity) */
    uint32_t n_done;              /* choices whose final EVENT came (the request ends at n) */
    uint64_t *route_keys;         /* [any] (n_route_keys) public block keys of the prompt
                                     (routing by cache), NULL = none */
    int32_t n_route_keys;
    int32_t route_block_size;     /* [any] tokens per block the keys were made for */
    uint64_t affinity;            /* [any] hash of model + affinity key (prompt_cache_key)
                                     + partition, 0 = none: requests with one go to the
                                     same replica */
    struct gateway_request *next; /* hash chain */
} gateway_request_t;

/* A request for `r` at `tier` in prefix-cache partition `partition` (the
 * caller's, from its key and r's cache_salt: gateway/partition.h): a fresh
 * id, its SUBMIT built by submit_from_request (gateway/submit.h; r is not kept)
 * with `part` = partition and, with cache-aware routing, its prompt's block
 * keys in that partition. One reference, owned by the caller. */
gateway_request_t *gateway_request_from_oai(struct gateway *gw, const request_t *r,
                                            prio_tier_t tier, uint64_t partition);
gateway_request_t *gateway_request_ref(gateway_request_t *r);
/* Drops a reference, NULLs *r; the last one frees everything. */
void gateway_request_unref(gateway_request_t **r);
/* Sets (fn != NULL) or clears the notify hook under the request's lock.
 * After clearing returns, the core will not call the old hook again. */
void gateway_request_set_notify(gateway_request_t *r, void (*fn)(void *ctx), void *ctx);

/* Hands the request to the core (which takes its own reference). Replies
 * arrive on r->replies. Returns 0, or -1 when the core is stopping (no reply
 * will come). */
int gateway_submit(struct gateway *gw, gateway_request_t *r);
/* The client is gone: remove request `id` from its queue or CANCEL it on the
 * worker. Unknown ids are ignored. */
void gateway_cancel(struct gateway *gw, uint64_t id);

/* ---- snapshots for HTTP ---------------------------------------------------- */

typedef enum gateway_cmd_kind {
    GATEWAY_CMD_CALL,             /* run(gw, cmd) on the core; reply: what it returns
                                     (the snapshots of gateway/snapshot.h) */
    GATEWAY_CMD_SUBMIT,           /* request: replies on request->replies */
    GATEWAY_CMD_CANCEL,           /* id; no reply */
    GATEWAY_CMD_SET_SUPERVISOR,   /* sup; reply: the same pointer (a sync point) */
    GATEWAY_CMD_CALL_LATER,       /* start(gw, cmd) on the core: it may keep a reference
                                     to reply and answer later (gateway/gateway_lora.h) */
} gateway_cmd_kind_t;

typedef enum gateway_admin_op {
    GATEWAY_ADMIN_WORKERS,        /* GET /admin/workers */
    GATEWAY_ADMIN_DRAIN,          /* POST /admin/workers/{id}/drain */
    GATEWAY_ADMIN_RESTART,        /* POST /admin/workers/{id}/restart */
    GATEWAY_ADMIN_RESTART_MODEL,  /* POST /admin/models/{name}/restart */
    GATEWAY_ADMIN_START_MODEL,    /* POST /admin/models/{name}/start (on-demand) */
    GATEWAY_ADMIN_STOP_MODEL,     /* POST /admin/models/{name}/stop (on-demand) */
} gateway_admin_op_t;

/* A command to the core. Snapshot commands are answered on `reply`; the
 * core frees the command. */
typedef struct gateway_cmd {
    gateway_cmd_kind_t kind;
    chan_t *reply;                /* snapshot commands: a reference owned by the command */
    gateway_request_t *request;   /* SUBMIT: a reference owned by the command */
    uint64_t id;                  /* CANCEL */
    struct supervisor *sup;       /* SET_SUPERVISOR */
    /* CALL: runs on the core thread and returns the reply item, freed with
     * item_free when the asker gave up */
    void *(*run)(struct gateway *gw, const struct gateway_cmd *cmd);
    void (*item_free)(void *item);
    gateway_admin_op_t op;        /* CALL of the operations API */
    char *target;                 /* CALL: worker id / model name, owned */
    /* CALL_LATER: runs on the core thread; it may take arg (NULL it) */
    void (*start)(struct gateway *gw, struct gateway_cmd *cmd);
    void *arg;                    /* CALL_LATER: owned, freed with arg_free unless taken */
    void (*arg_free)(void *arg);
} gateway_cmd_t;

/* Any thread: sends cmd (owned from here on) to the core and waits up to
 * timeout_us for its one reply item; NULL when the core is gone or did not
 * answer (a late answer is freed with item_free). */
void *gateway_ask(struct gateway *gw, gateway_cmd_t *cmd, void (*item_free)(void *), int64_t timeout_us);

struct supervisor;

/* Binds the ROUTER socket and starts the core thread. Returns NULL (logged)
 * when the endpoint cannot be bound. Free with gateway_free. */
struct gateway *gateway_new(const gateway_config_t *cfg);

/* Stops the core thread (requests still in flight get ERROR 503), closes the
 * socket and frees everything; NULLs *gw. */
void gateway_free(struct gateway **gw);

/* Lets the core drive local workers through `sup` (borrowed; NULL detaches).
 * Synchronous: after it returns the core uses only the new pointer, so
 * detach before supervisor_free. */
void gateway_set_supervisor(struct gateway *gw, struct supervisor *sup);

/* SIGTERM, step 1: new generation requests get 503 from now on; requests in
 * flight go on. Any thread. */
void gateway_set_stopping(struct gateway *gw);
/* Requests in flight (queued or running). Any thread. */
size_t gateway_inflight(struct gateway *gw);
/* An fd that becomes readable when the core thread stopped on a fatal error
 * (the process should exit non-zero). */
int gateway_fatal_fd(struct gateway *gw);

#endif
