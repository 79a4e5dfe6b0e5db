/* wait_policy.h — makes the process's OpenMP threads sleep, not spin, at
 * barriers.
 *
 * OpenMP threads busy-wait at every barrier by default. When the worker's
 * cores are shared (other workers, the gateway, other tenants) a spinning
 * thread steals the core a working thread needs: measured 5-10x slower
 * steps on a loaded 2-core machine (docs/FORWARD.md, "Wait policy").
 * libgomp reads OMP_WAIT_POLICY only at load time, so programs call this
 * first thing in main().
 */
#ifndef PAGODA_WORKER_WAIT_POLICY_H
#define PAGODA_WORKER_WAIT_POLICY_H

/* When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets
 * OMP_WAIT_POLICY=passive and re-executes the program's own binary (the
 * path /proc/self/exe resolves to, so the process keeps its name) with the
 * same argv. Returns
 *    0  the environment was already set: nothing done
 *   -1  the re-exec failed (the program may continue, with spinning threads)
 * and does not return on a successful re-exec. */
int wait_policy_reexec(char **argv);

#endif
