/* spinbar.c — a spin-then-sleep barrier (spinbar.h). */
#include "worker/kernels/spinbar.h"

#include <assert.h>
#include <limits.h>
#include <stdint.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPINBAR_PAUSE() _mm_pause()
#else
#define SPINBAR_PAUSE() ((void)0)
#endif

/* A wait spins up to the barrier's budget, then sleeps on a futex. Waits
 * inside a one-row step on idle cores end within a few us (the other
 * thread's last task). On a loaded machine the thread waited for has often
 * lost its core, or shares ours, and a spin only burns the time it needs:
 * there each wait that has to sleep halves the budget (down to the floor,
 * about libgomp's short spin), each that ends in the spin raises it by an
 * eighth (up to the cap). */
#define SPINBAR_SPIN_MAX_NS 50000
#define SPINBAR_SPIN_MIN_NS 2000
/* pauses between two reads of the clock (~25-60 ns each on Zen 5) */
#define SPINBAR_PAUSES 32

static long futex(atomic_uint *addr, int op, unsigned val)
{
    return syscall(SYS_futex, (unsigned *)addr, op, val, NULL, NULL, 0);
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void spinbar_init(spinbar_t *b, int n)
{
    assert(n >= 1);
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    atomic_store_explicit(&b->gen, 0, memory_order_relaxed);
    atomic_store_explicit(&b->sleepers, 0, memory_order_relaxed);
    atomic_store_explicit(&b->spin_ns, SPINBAR_SPIN_MAX_NS, memory_order_relaxed);
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
    /* seq_cst with the sleeper's count-then-check: either it sees the new
     * generation or we see it counted */
    atomic_fetch_add_explicit(&b->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&b->sleepers, memory_order_seq_cst) > 0)
        futex(&b->gen, FUTEX_WAKE_PRIVATE, INT_MAX);
}

void spinbar_wait(spinbar_t *b, unsigned gen)
{
    int64_t t_end = 0;
    for (int spin = 0; atomic_load_explicit(&b->gen, memory_order_acquire) == gen; spin++) {
        SPINBAR_PAUSE();
        if (spin % SPINBAR_PAUSES != SPINBAR_PAUSES - 1)
            continue;
        const int64_t now = mono_ns();
        if (t_end == 0)
            t_end = now + atomic_load_explicit(&b->spin_ns, memory_order_relaxed);
        if (now < t_end)
            continue;
        /* the budget is a hint: a lost update between threads is harmless */
        const int budget = atomic_load_explicit(&b->spin_ns, memory_order_relaxed) / 2;
        atomic_store_explicit(&b->spin_ns, budget < SPINBAR_SPIN_MIN_NS ? SPINBAR_SPIN_MIN_NS : budget,
                              memory_order_relaxed);
        atomic_fetch_add_explicit(&b->sleepers, 1, memory_order_seq_cst);
        while (atomic_load_explicit(&b->gen, memory_order_seq_cst) == gen)
            futex(&b->gen, FUTEX_WAIT_PRIVATE, gen); /* returns at once if gen moved */
        atomic_fetch_sub_explicit(&b->sleepers, 1, memory_order_relaxed);
        return;
    }
    if (t_end != 0) {
        const int budget = atomic_load_explicit(&b->spin_ns, memory_order_relaxed);
        const int up = budget + budget / 8;
        atomic_store_explicit(&b->spin_ns, up > SPINBAR_SPIN_MAX_NS ? SPINBAR_SPIN_MAX_NS : up, memory_order_relaxed);
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
