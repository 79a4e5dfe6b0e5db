/* proc_env.h — the environment a worker process starts with.
 *
 * Two libraries read their settings from the environment once, at load
 * time, before main:
 *   - libgomp's spin at barriers (GOMP_SPINCOUNT): the worker wants a short
 *     one (worker/wait_policy.h says why) and re-executes itself to get it
 *     when the variable is missing, which costs a second exec (~10 ms);
 *   - OpenBLAS's thread pool (OPENBLAS_NUM_THREADS): started by a library
 *     constructor, its threads spin in sched_yield for ~0.1 s, taking the
 *     cores from a just-started worker's first forward pass (~1.7x slower);
 *     the worker runs OpenBLAS single-threaded anyway (matmul_new).
 * proc_env_worker gives the gateway's supervisor both, so a supervised or
 * on-demand worker starts once and at full speed. The user's OMP_WAIT_POLICY
 * or GOMP_SPINCOUNT is kept; OPENBLAS_NUM_THREADS is always 1, as the worker
 * would set it at run time anyway, so another value only starts threads
 * that are never used. The systemd unit and the Kubernetes manifests in
 * deploy/ set the same two for workers on other hosts. */
#ifndef PAGODA_COMMON_PROC_ENV_H
#define PAGODA_COMMON_PROC_ENV_H

/* The spin bound a worker runs with when the user set neither
 * OMP_WAIT_POLICY nor GOMP_SPINCOUNT. */
#define PROC_ENV_GOMP_SPINCOUNT "1000"

/* env (NULL-terminated, e.g. environ) with the settings above: a new
 * NULL-terminated array whose strings are env's (but its
 * OPENBLAS_NUM_THREADS) or static; the caller frees the array (free), not
 * the strings. */
char **proc_env_worker(char *const *env);

#endif
