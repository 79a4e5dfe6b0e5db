/* spinbar.h — a barrier for the threads of one OpenMP region: a spin of
 * up to 50 us (less once waits have had to sleep), then a futex sleep.
 *
 * Why: libgomp's waits (the end of a region, the dock between regions, an
 * `omp barrier`) spin GOMP_SPINCOUNT iterations and then sleep on a futex.
 * The worker bounds that spin (wait_policy.h) because a long spin on shared
 * cores steals the core a working thread needs; on this Zen 5 VM the bound
 * of 1000 iterations is ~1 us, so a decode step's ~90 regions each paid one
 * or two futex sleeps and wake-ups (~50 us of region for 1 us of gap,
 * measured with a 2-thread region after a busy wait). A one-row step whose
 * layers run in ONE region with these barriers between their phases waits
 * without a sleep on idle cores; a thread that waits longer than the spin
 * (the other thread lost its core on a loaded machine) sleeps, as
 * libgomp's threads would.
 *
 * The last thread to arrive may run a serial step before it releases the
 * others (spinbar_arrive / spinbar_release): one barrier instead of two
 * around work only one thread does.
 *
 * Usage: spinbar_init(b, n) by one thread before any waits (all n threads
 * must use every barrier); then in the region
 *     unsigned g;
 *     if (spinbar_arrive(b, &g)) { serial step; spinbar_release(b); }
 *     else spinbar_wait(b, g);
 * or spinbar_sync(b). Writes before the barrier are visible to every
 * thread after it (acquire / release on the generation).
 * Ownership: the caller owns the spinbar_t (no allocation). */
#ifndef PAGODA_WORKER_KERNELS_SPINBAR_H
#define PAGODA_WORKER_KERNELS_SPINBAR_H

#include <stdatomic.h>
#include <stdbool.h>

typedef struct {
    _Alignas(64) atomic_uint count; /* threads arrived in this generation */
    _Alignas(64) atomic_uint gen;   /* +1 at every release (a futex word) */
    atomic_uint sleepers;           /* threads asleep on gen (woken by the release) */
    atomic_int spin_ns;             /* how long a wait spins before it sleeps (adapts, spinbar.c) */
    int n;                          /* threads that take part */
} spinbar_t;

/* n ≥ 1 threads; not thread-safe (before the region, or by one thread
 * followed by a barrier of its own). */
void spinbar_init(spinbar_t *b, int n);

/* Arrives; true for the last thread of the generation (it must call
 * spinbar_release), else false and *gen is the generation to pass to
 * spinbar_wait. */
bool spinbar_arrive(spinbar_t *b, unsigned *gen);

/* The last thread's release of the others (after its serial step). */
void spinbar_release(spinbar_t *b);

/* Waits until the generation moves past gen (spin, then a futex sleep). */
void spinbar_wait(spinbar_t *b, unsigned gen);

/* A plain barrier. */
void spinbar_sync(spinbar_t *b);

#endif
