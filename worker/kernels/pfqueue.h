/* pfqueue.h — software prefetches spread over a compute-bound kernel.
 *
 * A thread that will soon read bytes the cache does not hold (a LoRA
 * update's factors after the base product of the same columns) pushes
 * them here; the matmul kernels it runs meanwhile call pfq_step between
 * their row blocks, which issues a few cache-line prefetches at a time
 * (prefetcht0: the update's first reads after the product took 3.1
 * Mcycles a thread a step with it, 3.8 with prefetcht1; docs/FORWARD.md), so the loads run beside the products instead of before them (all
 * at once, the prefetch instructions wait on the core's miss queue) or
 * after them (the update then waits on memory). pfq_drain issues what is
 * left. Hints only: no result depends on them, and a prefetch never faults.
 *
 * The queue is per thread (thread-local), holds up to PFQ_SPANS spans
 * (pfq_push drops what does not fit: a hint) and is empty unless a caller
 * pushed to it, so pfq_step costs a load and a compare on the paths that
 * never push.
 */
#ifndef PAGODA_WORKER_PFQUEUE_H
#define PAGODA_WORKER_PFQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/vmath.h"

#define PFQ_SPANS 64
/* lines pfq_step issues per call (a row block of a matmul is ~1-3 µs) */
#define PFQ_STEP_LINES 64

typedef struct pfq {
    const char *cur[PFQ_SPANS]; /* next line of each span */
    const char *end[PFQ_SPANS];
    int head, n;                /* spans [head, n) are pending */
} pfq_t;

extern _Thread_local pfq_t pfq_tls;

/* Queues [p, p + n) (from its cache line) for the calling thread. */
static inline void pfq_push(const void *p, size_t n)
{
    pfq_t *q = &pfq_tls;
    if (n == 0 || q->n >= PFQ_SPANS)
        return;
    q->cur[q->n] = (const char *)((uintptr_t)p & ~(uintptr_t)63);
    q->end[q->n] = (const char *)p + n;
    q->n++;
}

/* Issues up to `lines` queued prefetches (prefetcht0). */
static inline void pfq_issue(int lines)
{
    pfq_t *q = &pfq_tls;
    while (lines > 0 && q->head < q->n) {
        const char *c = q->cur[q->head], *e = q->end[q->head];
        for (; lines > 0 && c < e; c += 64, lines--) {
#ifdef VMATH_X86
            _mm_prefetch(c, _MM_HINT_T0);
#endif
        }
        q->cur[q->head] = c;
        if (c >= e)
            q->head++;
    }
    if (q->head >= q->n)
        q->head = q->n = 0;
}

/* A kernel's hook between row blocks. */
static inline void pfq_step(void)
{
    if (pfq_tls.n)
        pfq_issue(PFQ_STEP_LINES);
}

/* Issues everything still queued and empties the queue. */
static inline void pfq_drain(void)
{
    if (pfq_tls.n)
        pfq_issue(1 << 30);
}

#endif
