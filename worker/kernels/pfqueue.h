/* pfqueue.h — software prefetches spread over a compute-bound kernel.
 *
 * A thread that will soon read bytes the cache does not hold (a LoRA
 * update's factors after the base product of the same columns) pushes
 * them here; the matmul kernels it runs meanwhile issue a few cache-line
 * prefetches at a time (prefetcht0: the update's first reads after the
 * product took 3.1 Mcycles a thread a step with it, 3.8 with prefetcht1;
 * docs/FORWARD.md), so the loads run beside the products instead of
 * before them or after them (the update then waits on memory). pfq_drain
 * issues what is left of the foreground list. Hints only: no result
 * depends on them, and a prefetch never faults.
 *
 * Bursts are cheap to issue but a large one is partly dropped: 576 lines
 * asked for at once, then read, took 2,536 cycles against 583 after plain
 * loads; 64 at a time 966, 32 at a time 623 (a stand-alone test,
 * docs/BENCH_LOG.md). So the kernels with a block loop (the wide Q8_0
 * kernel, the packed K-quant tiles) call pfq_tick_at inside it, a few lines
 * per block: the queue then drains in small bursts at the pace of the
 * product (one 32-row step of the lora bench: base / mixed 0.799 with
 * 64-line bursts between row blocks, 0.823 with 6 lines per block); the
 * others call pfq_step between row blocks.
 *
 * Two lists: the foreground one (pfq_push: what the current work reads
 * next) is issued first, the background one (pfq_push_bg: the next
 * projection's phase 1) only when the foreground one is empty.
 *
 * The queue is per thread (thread-local), holds up to PFQ_SPANS spans a
 * list (a push that does not fit is dropped: a hint) and is empty unless a
 * caller pushed to it, so the hooks cost a load and a compare on the paths
 * that never push.
 */
#ifndef PAGODA_WORKER_PFQUEUE_H
#define PAGODA_WORKER_PFQUEUE_H

#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/vmath.h"

#define PFQ_SPANS 64
/* lines pfq_step issues per call (a row block of a matmul is ~1-3 µs) */
#define PFQ_STEP_LINES 64

typedef struct pfq_list {
    const char *cur[PFQ_SPANS]; /* next line of each span */
    const char *end[PFQ_SPANS];
    int head, n;                /* spans [head, n) are pending */
} pfq_list_t;

typedef struct pfq {
    pfq_list_t fg;              /* pfq_push: issued first */
    pfq_list_t bg;              /* pfq_push_bg: issued when fg is empty */
    int n;                      /* spans pending in both (0: nothing to do) */
} pfq_t;

extern _Thread_local pfq_t pfq_tls;

static inline void pfq_list_push(pfq_t *q, pfq_list_t *l, const void *p, size_t n)
{
    if (n == 0 || l->n >= PFQ_SPANS)
        return;
    l->cur[l->n] = (const char *)((uintptr_t)p & ~(uintptr_t)63);
    l->end[l->n] = (const char *)p + n;
    l->n++;
    q->n++;
}

/* Queues [p, p + n) (from its cache line) for the calling thread. */
static inline void pfq_push(const void *p, size_t n)
{
    pfq_list_push(&pfq_tls, &pfq_tls.fg, p, n);
}

/* Queues [p, p + n) behind everything pfq_push queued, before or later:
 * bytes wanted after the current work (the next projection's phase 1). */
static inline void pfq_push_bg(const void *p, size_t n)
{
    pfq_list_push(&pfq_tls, &pfq_tls.bg, p, n);
}

/* Forgets the background spans not yet issued. */
static inline void pfq_clear_bg(void)
{
    pfq_t *q = &pfq_tls;
    q->n -= q->bg.n - q->bg.head;
    q->bg.head = q->bg.n = 0;
}

/* Issues up to `lines` of list l; returns the lines left. */
static inline int pfq_list_issue(pfq_t *q, pfq_list_t *l, int lines)
{
    while (lines > 0 && l->head < l->n) {
        const char *c = l->cur[l->head], *e = l->end[l->head];
        for (; lines > 0 && c < e; c += 64, lines--) {
#ifdef VMATH_X86
            _mm_prefetch(c, _MM_HINT_T0);
#endif
        }
        l->cur[l->head] = c;
        if (c >= e) {
            l->head++;
            q->n--;
        }
    }
    if (l->head >= l->n)
        l->head = l->n = 0;
    return lines;
}

/* Issues up to `lines` of q's queued prefetches (prefetcht0), the
 * foreground list first. */
static inline void pfq_issue_at(pfq_t *q, int lines)
{
    lines = pfq_list_issue(q, &q->fg, lines);
    if (lines > 0)
        pfq_list_issue(q, &q->bg, lines);
}

/* Issues up to `lines` of the calling thread's queued prefetches. */
static inline void pfq_issue(int lines)
{
    pfq_issue_at(&pfq_tls, lines);
}

/* A kernel's hook between row blocks. */
static inline void pfq_step(void)
{
    if (pfq_tls.n)
        pfq_issue(PFQ_STEP_LINES);
}

/* The calling thread's queue, for pfq_tick_at in a kernel's loop: taken
 * once before the loop (not inlined: the thread-local address then never
 * sits in an AVX-512-encoded instruction, which the linker's TLS
 * relaxation of binutils 2.40 refuses) */
pfq_t *pfq_self(void);

/* lines pfq_tick_at issues per call */
#define PFQ_TICK_LINES 6
/* A kernel's hook inside its block loop (once per block of a few hundred
 * cycles), q = pfq_self() */
static inline void pfq_tick_at(pfq_t *q)
{
    if (q->n)
        pfq_issue_at(q, PFQ_TICK_LINES);
}

/* Issues everything still in the foreground list (the background one
 * stays for later ticks). */
static inline void pfq_drain(void)
{
    if (pfq_tls.fg.n)
        pfq_list_issue(&pfq_tls, &pfq_tls.fg, 1 << 30);
}

#endif
