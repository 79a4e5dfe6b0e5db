/* supervisor.h — spawns, restarts and stops the gateway's local workers.
 *
 * `pagoda-gateway --model NAME=FILE.gguf` (repeatable) makes the gateway run
 * local `pagoda-worker --gateway ENDPOINT --model NAME=FILE [flags]`
 * processes (one per replica). The worker binary is `pagoda-worker` next to
 * the gateway's own executable (dirname of /proc/self/exe) unless a path is
 * given. Workers started by hand elsewhere simply register as more replicas.
 *
 * The gateway's heartbeat interval goes to every local worker as
 * `--heartbeat-ms N` (supervisor_config_t.heartbeat_ms), so one flag on the
 * gateway sets both sides.
 *
 * Each local worker ("child") is a small state machine:
 *
 *   RUNNING ──exits (crash, or killed as hung)──► BACKOFF ──delay──► RUNNING
 *      │                   └── the Nth restart within the window ──► FAILED
 *      ├── exits after supervisor_expect_exit(restart) ─────────────► RUNNING (at once)
 *      ├── exits after supervisor_expect_exit(stay down) ───────────► STOPPED
 *      └── exits after supervisor_expect_exit(idle) (on-demand) ────► IDLE
 *   FAILED / STOPPED ── supervisor_restart_model ──► RUNNING
 *   IDLE ── supervisor_wake ──► RUNNING      (on-demand children start IDLE)
 *
 * Standby (on-demand children added with standby): while a child is IDLE
 * the supervisor keeps one more process of it, started with
 * `--standby-fd N`: it has exec'd, hashed and loaded the model (GGUF,
 * tokenizer; the weights stay in the page cache) and waits for one byte on
 * a pipe before it packs, allocates its KV pool and connects. supervisor_wake
 * writes that byte, so an on-demand start skips the process start and the
 * load (~10 ms of a ~30 ms start on the 1.1B model). When the model file
 * changed since the standby started (device, inode, size, times) it is
 * killed and a fresh worker starts instead. A standby that dies is started
 * again after a delay that doubles like a crash backoff (not counted as a
 * restart); closing the pipe (supervisor_free, a standby no longer wanted)
 * makes it exit 0.
 *
 * - Backoff doubles from SUPERVISOR_BACKOFF_MIN_MS up to
 *   SUPERVISOR_BACKOFF_MAX_MS and resets once a child has run for
 *   SUPERVISOR_STABLE_MS.
 * - Crash loop: a child that exits unexpectedly after `fail_restarts`
 *   restarts within `fail_window_ms` is FAILED and left down until an
 *   operator asks (POST /admin/models/NAME/restart); its reason is kept for
 *   /health and /admin/workers.
 * - Every restart after a crash adds 1 to pagoda_worker_restarts_total
 *   {model_name}; requested restarts and on-demand starts do not.
 * - Children get PR_SET_PDEATHSIG=SIGTERM so they do not outlive a gateway
 *   killed with -9. supervisor_free() sends SIGTERM (and SIGCONT, for a
 *   stopped one), waits up to SUPERVISOR_STOP_MS, then SIGKILLs what is left.
 *
 * Threads: supervisor_new/add/start/free from one thread (main); the
 * supervisor's own thread reaps and respawns every SUPERVISOR_TICK_MS; the
 * query and control calls below are safe from any thread (one mutex; the
 * gateway core calls them).
 */
#ifndef PAGODA_GATEWAY_SUPERVISOR_H
#define PAGODA_GATEWAY_SUPERVISOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "gateway/metrics.h"

#define SUPERVISOR_TICK_MS 100
#define SUPERVISOR_BACKOFF_MIN_MS 500
#define SUPERVISOR_BACKOFF_MAX_MS 30000
#define SUPERVISOR_STABLE_MS 60000
#define SUPERVISOR_STOP_MS 5000
#define SUPERVISOR_FAIL_RESTARTS 5        /* crash loop: restarts ... */
#define SUPERVISOR_FAIL_WINDOW_MS 60000   /* ... within this window */
#define SUPERVISOR_MAX_FAIL_RESTARTS 64

typedef struct supervisor_config {
    const char *worker_bin;          /* NULL = pagoda-worker next to /proc/self/exe */
    const char *endpoint;            /* what workers connect to; a wildcard host
                                        (0.0.0.0, *, [::]) becomes 127.0.0.1 */
    int heartbeat_ms;                /* > 0: every worker gets --heartbeat-ms N (before its own
                                        args and worker_args, which may override it) */
    const char *const *worker_args;  /* (n_worker_args) extra flags for every worker */
    size_t n_worker_args;
    metrics_family_t *restarts;      /* counter [model_name], may be NULL */
    unsigned fail_restarts;          /* 0 = SUPERVISOR_FAIL_RESTARTS, ≤ SUPERVISOR_MAX_FAIL_RESTARTS */
    int64_t fail_window_ms;          /* 0 = SUPERVISOR_FAIL_WINDOW_MS */
    int64_t backoff_min_ms;          /* first restart delay, 0 = SUPERVISOR_BACKOFF_MIN_MS */
    int64_t backoff_max_ms;          /* its ceiling, 0 = SUPERVISOR_BACKOFF_MAX_MS */
} supervisor_config_t;

typedef struct supervisor supervisor_t;

/* What a child does when its process exits next (supervisor_expect_exit). */
typedef enum supervisor_exit_plan {
    SUPERVISOR_EXIT_RESTART = 1,     /* start it again at once (admin restart) */
    SUPERVISOR_EXIT_STAY_DOWN,       /* STOPPED: drained by an operator */
    SUPERVISOR_EXIT_IDLE,            /* IDLE: an on-demand model went idle */
} supervisor_exit_plan_t;

/* A model's local workers at a glance. */
typedef struct supervisor_model_info {
    unsigned n_children;             /* local workers of the model (0 = none) */
    unsigned n_running;              /* with a live process */
    unsigned n_backoff;              /* waiting to be restarted */
    unsigned n_failed;               /* given up after a crash loop */
    unsigned n_idle;                 /* on-demand, not running */
    unsigned n_stopped;              /* drained, not restarted */
    bool on_demand;
    unsigned restarts;               /* crash restarts so far, all its children */
    char reason[192];                /* the last exit of a FAILED child ("" if none) */
} supervisor_model_info_t;

/* Copies the configuration. NULL (logged) when the worker binary is not
 * executable. */
supervisor_t *supervisor_new(const supervisor_config_t *cfg);
/* One local worker for model `name` on `file` (copied). On-demand children
 * start only on supervisor_wake. Before start. */
void supervisor_add(supervisor_t *s, const char *name, const char *file, bool on_demand);
/* The same with flags of its own (copied) placed before the shared
 * worker_args, which therefore win where both set a flag, and a standby
 * (on-demand children only; see above). Call it N times for N replicas. */
void supervisor_add_args(supervisor_t *s, const char *name, const char *file, bool on_demand, bool standby,
                         const char *const *args, size_t n_args);
/* Spawns the (not on-demand) workers and starts the thread. 0, or -1 (logged). */
int supervisor_start(supervisor_t *s);
/* Stops the workers (SIGTERM, then SIGKILL) and frees; NULLs *s. */
void supervisor_free(supervisor_t **s);

/* Crash restarts so far (all models), for tests and logs. */
unsigned supervisor_restarts(supervisor_t *s);

/* Fills *out for model `name` (all zero when it has no local worker). */
void supervisor_model_info(supervisor_t *s, const char *name, supervisor_model_info_t *out);
/* True when pid is one of our running children. */
bool supervisor_owns(supervisor_t *s, pid_t pid);
/* Decides what happens when child `pid` exits next (it is about to be
 * drained). 0, or -1 when pid is not ours. */
int supervisor_expect_exit(supervisor_t *s, pid_t pid, supervisor_exit_plan_t plan);
/* Kills child `pid` with SIGKILL (it stopped answering heartbeats); it is
 * restarted like a crashed one. 0, or -1 when pid is not ours. */
int supervisor_kill(supervisor_t *s, pid_t pid, const char *why);
/* On-demand model: starts its IDLE children now, and makes children that
 * are on their way to IDLE (draining) restart instead. Returns how many
 * will start (0: nothing to do). */
unsigned supervisor_wake(supervisor_t *s, const char *name);
/* Operator restart of a model: FAILED, STOPPED and BACKOFF children start
 * now (crash history forgotten). Running children are not touched here: the
 * caller drains them with expect_exit(RESTART). Returns how many start. */
unsigned supervisor_restart_model(supervisor_t *s, const char *name);
/* The adapter set of model `name`'s local workers changed at run time
 * (/admin .../loras): from the next start on, each runs without its
 * `--lora ADAPTER=...` flag and, when spec ("ADAPTER=FILE:SCALE") is set,
 * with `--lora spec` (a crashed worker comes back with the current set). A
 * standby process (loaded with the old set) is replaced. Returns the
 * children changed. Any thread. */
unsigned supervisor_set_lora(supervisor_t *s, const char *name, const char *adapter, const char *spec);

/* [{"model", "pid" (0 when down), "prev_pid" (the process before this one,
 *   or the last one when down; 0 = none yet), "state": "running"|"backoff"|
 *   "failed"|"stopped"|"idle", "standby_pid" (0 = none), "on_demand",
 *   "restarts", "uptime_s" | null,
 *   "next_start_ms" | null, "last_exit" | null}] — caller owns it. */
json_t *supervisor_json(supervisor_t *s);

#endif
