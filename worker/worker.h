/* worker.h — the pagoda-worker process as a module: one model served to a
 * gateway.
 *
 * A worker loads the model (engine.h: weights, tokenizer, chat template),
 * connects to the gateway (worker_link.h: REGISTER, heartbeats, reconnect)
 * and runs the step loop:
 *
 *   loop (worker_run_once):
 *     publish the load the next HEARTBEATs carry (credit = free slots)
 *     send the prefix-cache changes as KV messages (kv_report.h)
 *     poll the link: wait up to one heartbeat interval when idle, just look
 *       when sequences run; then take every queued message before stepping,
 *       so CANCELs and new SUBMITs join this step's batch
 *     SUBMIT → worker_req_from_submit() → sched_submit(), or an ERROR reply
 *     CANCEL → sched_cancel(); DRAIN → admit nothing new, exit once idle;
 *     SHUTDOWN or the wake fd (a signal) → stop
 *     one sched_step(); each sched_event_t goes back as one EVENT
 *
 * Liveness: the link runs on a thread of its own, so HEARTBEATs flow while a
 * step runs; each step is bracketed by worker_link_step_begin/_end and the
 * forward pass advances a layer counter (sched_set_progress), from which the
 * HEARTBEAT's "prog" tells the gateway whether a busy worker still makes
 * progress. TEST ONLY environment, read once by worker_new():
 *   PAGODA_TEST_STEP_SLEEP_MS=N   every step first sleeps N ms
 *   PAGODA_TEST_STEP_WEDGE=FILE   a step that finds FILE deletes it and
 *                                 never returns (tests/integration/liveness.sh)
 *   PAGODA_TEST_LOAD_SLEEP_MS=N   worker_new() sleeps N ms before loading the
 *                                 model, like a real-size model's slow load
 *                                 (tests/integration/restart_wait.sh)
 *
 * Credit: HEARTBEAT's free slots = capacity - requests held (running or
 * waiting), so the gateway keeps the rest in its priority queue, where
 * priority and aging are decided. Per-request failures (prompt too long, bad
 * messages, invalid sampling) go back as ERROR for that request only.
 *
 * The command line (flags, CURVE key files, signals) is worker_main.c's; this
 * module takes everything through worker_config_t, so tests run a worker
 * in-process against their own ROUTER socket (tests/worker/test_worker.c).
 *
 * Ownership: worker_new() copies what it needs from the config (strings and
 * keys included); worker_free() releases everything and NULLs the pointer.
 * Single-threaded: every call from the thread that made the worker.
 */
#ifndef PAGODA_WORKER_WORKER_H
#define PAGODA_WORKER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"
#include "worker/engine.h"
#include "worker/sampler.h"
#include "worker/sched.h"
#include "worker/worker_req.h"

typedef struct worker_config {
    const char *endpoint;          /* gateway's ROUTER, "tcp://127.0.0.1:5557" */
    const char *model_name;        /* name served, 1..PROTO_MAX_NAME bytes */
    const char *model_path;        /* its GGUF file */
    int heartbeat_ms;              /* 0 = PROTO_HEARTBEAT_MS */
    bool heartbeat_explicit;       /* keep heartbeat_ms; false = adopt the interval of the
                                      gateway's HEARTBEATs (worker_link.h) */
    uint32_t ctx_cap;              /* cap the context below the model's, 0 = none */
    sched_config_t sched;          /* scheduler limits (sched_config_default + flags); the
                                    * worker's default KV budget is 0: sized from memory
                                    * (worker/kv_budget.h) when kv_blocks is 0 too */
    uint64_t mem_avail_bytes;      /* --mem-avail-mb: memory of the host's workers as the
                                    * gateway measured it (kv_budget.h's A); 0 = measure here */
    uint32_t mem_workers;          /* --mem-workers: workers sharing it (N); 0 = 1 */
    const char *kv_cache_dir;      /* disk tier folder (worker/kv_disk.h), NULL = none */
    uint64_t kv_cache_bytes;       /* its size cap (default 4 GiB) */
    int32_t kv_warm_percent;       /* warm start: the disk tier's most recent blocks are loaded
                                    * into up to this % of the KV pool while idle (default 50,
                                    * 0 = off; kv_pool_warm_begin) */
    bool no_warm_up;               /* --no-warm-up: register without making the weights
                                    * resident (model_advise_resident) and without the
                                    * throwaway forward pass (sched_warm_up) */
    const char *kv_disk_key;       /* MAC key file of its files (common/file_mac.h), NULL =
                                      <kv_cache_dir>.key */
    const char *draft_path;        /* --draft-model: GGUF of the draft model (sched.spec
                                    * SPEC_DRAFT), NULL = none */
    const char *const *loras;      /* --lora NAME=FILE[:SCALE] (engine_add_lora), (n_loras);
                                    * the strings must outlive worker_new */
    int32_t n_loras;
    const char *mmproj_path;       /* --mmproj: the model's image projector (worker/model/
                                    * vision.h; its rows must be the model's width), NULL = none */
    /* CURVE (proto/curve.h): all three Z85 keys, or all NULL for a plain link */
    const char *curve_server_key;  /* the gateway's public key */
    const char *curve_public_key;  /* our key pair */
    const char *curve_secret_key;
    /* ≥ 0 (--standby-fd, from the gateway's supervisor): after loading the
     * model (weights hash, GGUF, tokenizer) wait for one byte on this fd
     * before packing, allocating the KV pool and connecting; EOF = released
     * before it was needed (worker_new returns NULL with an empty err). The
     * fd is closed either way. -1 = none. */
    int standby_fd;
} worker_config_t;

/* endpoint tcp://127.0.0.1:5557, default heartbeat, sched_config_default
 * but a KV pool sized from memory (kv_budget_bytes 0), no CURVE;
 * model_name/model_path must still be set. */
void worker_config_default(worker_config_t *c);

typedef struct worker worker_t;

/* Loads the model, makes the scheduler and connects to the gateway
 * (REGISTER queued at once). Returns NULL with a message in err when the
 * model cannot be loaded, the config is unusable or the endpoint is bad,
 * and NULL with err "" when a standby (cfg->standby_fd) was released. */
worker_t *worker_new(const worker_config_t *cfg, char *err, size_t errlen);
void worker_free(worker_t **w);

/* One turn of the loop above. wake_fd (-1 = none) is polled next to the
 * socket; readable means stop (common/sigwake.h: a signal), it is not read.
 * Returns true while the worker should go on, false once it stops
 * (SHUTDOWN, drained, wake_fd readable); then it stays stopped. */
bool worker_run_once(worker_t *w, int wake_fd);

/* worker_run_once until it returns false. Returns 0. */
int worker_run(worker_t *w, int wake_fd);

/* The replica id announced in REGISTER ("host:pid:random"). */
const char *worker_replica(const worker_t *w);
/* The scheduler and engine, for tests and stats (owned by the worker). */
const sched_t *worker_sched(const worker_t *w);
const engine_t *worker_engine(const worker_t *w);

/* --- SUBMIT → scheduler request ------------------------------------------- */

/* worker_req_t, worker_req_from_submit, worker_req_clear: worker/worker_req.h */

#endif
