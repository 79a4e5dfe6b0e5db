/* supervisor.h — spawns and restarts the gateway's local workers.
 *
 * `pagoda-gateway --model NAME=FILE.gguf` (repeatable) makes the gateway run
 * one local `pagoda-worker --gateway ENDPOINT --model NAME=FILE [flags]` per
 * model. The worker binary is `pagoda-worker` next to the gateway's own
 * executable (dirname of /proc/self/exe) unless a path is given. Workers
 * started by hand elsewhere simply register as more replicas.
 *
 * A thread checks the children every SUPERVISOR_TICK_MS (waitpid WNOHANG).
 * A child that exits (any status) is started again after a backoff that
 * doubles from SUPERVISOR_BACKOFF_MIN_MS up to SUPERVISOR_BACKOFF_MAX_MS and
 * resets once a child has run for SUPERVISOR_STABLE_MS; each restart adds 1
 * to pagoda_worker_restarts_total{model_name}. Children get
 * PR_SET_PDEATHSIG=SIGTERM so they do not outlive a gateway killed with -9.
 * supervisor_free() sends SIGTERM, waits up to SUPERVISOR_STOP_MS, then
 * SIGKILLs what is left.
 *
 * Threads: supervisor_new/add/start/free from one thread (main); the
 * supervisor's own thread does the rest.
 */
#ifndef PAGODA_GATEWAY_SUPERVISOR_H
#define PAGODA_GATEWAY_SUPERVISOR_H

#include <stddef.h>

#include "gateway/metrics.h"

#define SUPERVISOR_TICK_MS 100
#define SUPERVISOR_BACKOFF_MIN_MS 500
#define SUPERVISOR_BACKOFF_MAX_MS 30000
#define SUPERVISOR_STABLE_MS 60000
#define SUPERVISOR_STOP_MS 5000

typedef struct supervisor_config {
    const char *worker_bin;          /* NULL = pagoda-worker next to /proc/self/exe */
    const char *endpoint;            /* what workers connect to; a wildcard host
                                        (0.0.0.0, *, [::]) becomes 127.0.0.1 */
    const char *const *worker_args;  /* (n_worker_args) extra flags for every worker */
    size_t n_worker_args;
    metrics_family_t *restarts;      /* counter [model_name], may be NULL */
} supervisor_config_t;

typedef struct supervisor supervisor_t;

/* Copies the configuration. NULL (logged) when the worker binary is not
 * executable. */
supervisor_t *supervisor_new(const supervisor_config_t *cfg);
/* One local worker for model `name` on `file` (copied). Before start. */
void supervisor_add(supervisor_t *s, const char *name, const char *file);
/* The same with flags of its own (copied) placed before the shared
 * worker_args, which therefore win where both set a flag. Call it N times
 * for N replicas. */
void supervisor_add_args(supervisor_t *s, const char *name, const char *file,
                         const char *const *args, size_t n_args);
/* Spawns the workers and starts the thread. 0, or -1 (logged). */
int supervisor_start(supervisor_t *s);
/* Stops the workers (SIGTERM, then SIGKILL) and frees; NULLs *s. */
void supervisor_free(supervisor_t **s);

/* Restarts so far (all models), for tests and logs. */
unsigned supervisor_restarts(supervisor_t *s);

#endif
