/* spinbar.c — a spin-then-yield barrier (spinbar.h). */
#include "worker/kernels/spinbar.h"

#include <assert.h>
#include <sched.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPINBAR_PAUSE() _mm_pause()
#else
#define SPINBAR_PAUSE() ((void)0)
#endif

/* Spins before each wait starts yielding: the other thread's last task is
 * usually under way (the same bound as lowrank_wait_t). */
#define SPINBAR_SPIN 2000

void spinbar_init(spinbar_t *b, int n)
{
    assert(n >= 1);
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    atomic_store_explicit(&b->gen, 0, memory_order_relaxed);
    b->n = n;
}

bool spinbar_arrive(spinbar_t *b, unsigned *gen)
{
    /* the generation cannot move before this thread has arrived */
    *gen = atomic_load_explicit(&b->gen, memory_order_acquire);
    /* acq_rel: the last thread sees every other thread's writes */
    return atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) + 1 == (unsigned)b->n;
}

void spinbar_release(spinbar_t *b)
{
    /* count is reset before the generation moves: a thread that sees the
     * new generation (acquire) and arrives at the next barrier counts
     * from 0 */
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->gen, 1, memory_order_release);
}

void spinbar_wait(spinbar_t *b, unsigned gen)
{
    for (int spin = 0; atomic_load_explicit(&b->gen, memory_order_acquire) == gen; spin++) {
        if (spin < SPINBAR_SPIN)
            SPINBAR_PAUSE();
        else
            sched_yield();
    }
}

void spinbar_sync(spinbar_t *b)
{
    unsigned g;
    if (spinbar_arrive(b, &g))
        spinbar_release(b);
    else
        spinbar_wait(b, g);
}
