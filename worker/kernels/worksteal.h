/* worksteal.h — items 0..n-1 of a parallel loop in contiguous per-thread
 * ranges, with stealing from the back of the others' ranges.
 *
 * Why: the int8 kernels prefetch the weights of the unit that follows the
 * one they run (the next panels in memory). With OpenMP's dynamic chunks a
 * thread's next chunk is wherever the shared counter points, so at every
 * chunk boundary that prefetch fetches the other thread's data and the new
 * chunk starts cold; a decode step is ~90 such loops, most with 128-352
 * units (1.1B Q4_K, one row, 2 threads: 2048×2048 at 34 GB/s in 16 chunks
 * per thread against 42 GB/s in 4). Static halves would stream best but a
 * thread that is descheduled (shared cores) would hold the other up for
 * half the loop. Here thread t owns range t and claims its items front to
 * back, one at a time; a thread whose range is empty takes items one at a
 * time from the back of another range, so a late thread holds the others
 * up by one item.
 *
 * Each range is one 64-bit word (front in the low half, end in the high
 * half) on its own cache line, claimed with a compare-and-swap: the owner
 * moves the front up, a thief moves the end down, an item is handed out
 * exactly once. Claims are relaxed: the items are independent and the
 * loop's closing barrier orders their results.
 *
 * Usage: ws_init once before the parallel region (by one thread); in the
 * region each thread calls ws_next(w, omp_get_thread_num()) until it
 * returns -1. A thread id ≥ the n_threads given to ws_init only steals, so
 * a region that got fewer or more threads than planned still runs every
 * item once.
 * Ownership: the caller owns the ws_t (ws_new / ws_free). */
#ifndef PAGODA_WORKER_KERNELS_WORKSTEAL_H
#define PAGODA_WORKER_KERNELS_WORKSTEAL_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    _Alignas(64) _Atomic uint64_t fe; /* front | end << 32 */
} ws_range_t;

typedef struct ws_t {
    ws_range_t *r; /* max ranges, 64-byte aligned */
    int max;       /* ranges allocated */
    int n;         /* ranges in use (ws_init) */
} ws_t;

/* A scheduler for up to max_threads ranges (≥ 1); NULL on a bad count. */
ws_t *ws_new(int max_threads);
void ws_free(ws_t **pw);

/* Items 0..n_items-1 (0 ≤ n_items < 2^32) over n_threads ranges (clamped to
 * 1..max): range t = [n·t / T, n·(t+1) / T). Not thread-safe: call before
 * the region. */
void ws_init(ws_t *w, int64_t n_items, int n_threads);

/* The next item for thread t: the front of range t, else the back of
 * another range (scanning from t + 1); -1 when every range is empty. */
static inline int64_t ws_next(ws_t *w, int t)
{
    const int n = w->n;
    for (int k = 0; k < n; k++) {
        const int v = (t + k) % n;
        _Atomic uint64_t *p = &w->r[v].fe;
        uint64_t cur = atomic_load_explicit(p, memory_order_relaxed);
        for (;;) {
            const uint32_t f = (uint32_t)cur, e = (uint32_t)(cur >> 32);
            if (f >= e)
                break;
            /* own range (k == 0 and t < n): take the front; else the back */
            const int own = k == 0 && t < n;
            const uint64_t next = own ? (cur + 1) : ((uint64_t)(e - 1) << 32 | f);
            if (atomic_compare_exchange_weak_explicit(p, &cur, next, memory_order_relaxed, memory_order_relaxed))
                return own ? (int64_t)f : (int64_t)(e - 1);
        }
    }
    return -1;
}

/* Items left in range t (its owner's and thieves' claims to come). */
static inline int64_t ws_left(ws_t *w, int t)
{
    if (t < 0 || t >= w->n)
        return 0;
    const uint64_t cur = atomic_load_explicit(&w->r[t].fe, memory_order_relaxed);
    const uint32_t f = (uint32_t)cur, e = (uint32_t)(cur >> 32);
    return f < e ? (int64_t)(e - f) : 0;
}

#endif
