/* wait_policy.h — bounds how long the process's OpenMP threads spin at
 * barriers before they sleep.
 *
 * libgomp's default is to spin for a long time (300,000 iterations, several
 * milliseconds) at every barrier and between parallel regions. When the
 * worker's cores are shared (other workers, the gateway, other tenants) a
 * spinning thread steals the core a working thread needs: measured 5-10x
 * slower steps on a loaded 2-core machine. Sleeping at once (passive) costs
 * a futex wake-up at each of the ~60-100 parallel regions of a decode step:
 * on dedicated cores one-sequence decode of the 110M Q4_K_M model ran at
 * ~275 tok/s passive against ~380 with a 1000-iteration spin
 * (docs/FORWARD.md, "Wait policy"). The default is that short spin
 * (GOMP_SPINCOUNT=1000, about 25 us here): regions of a step follow each
 * other within microseconds, so the threads rarely sleep inside a step, and
 * between steps they sleep after 25 us. libgomp reads these variables only
 * at load time, so programs call this first thing in main().
 */
#ifndef PAGODA_WORKER_WAIT_POLICY_H
#define PAGODA_WORKER_WAIT_POLICY_H

#include "common/proc_env.h"

/* The spin bound set when the user set neither variable. */
#define WAIT_POLICY_SPINCOUNT PROC_ENV_GOMP_SPINCOUNT

/* When neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set: sets
 * GOMP_SPINCOUNT=WAIT_POLICY_SPINCOUNT and re-executes the program's own
 * binary (the path /proc/self/exe resolves to, so the process keeps its
 * name) with the same argv. The user's own setting always wins
 * (OMP_WAIT_POLICY=passive: sleep at once, for heavily shared hosts).
 * Returns
 *    0  the environment was already set: nothing done
 *   -1  the re-exec failed (the program may continue, with libgomp's
 *       default spinning)
 * and does not return on a successful re-exec. */
int wait_policy_reexec(char **argv);

#endif
