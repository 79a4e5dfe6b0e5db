/* worksteal.c — allocation and setup of the range scheduler (worksteal.h). */
#include "worker/kernels/worksteal.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* Thread counts beyond this are refused (no machine pagoda runs on has
 * them; it bounds the allocation). */
#define WS_MAX_THREADS 4096

ws_t *ws_new(int max_threads)
{
    if (max_threads < 1 || max_threads > WS_MAX_THREADS)
        return NULL;
    ws_t *w = xcalloc(1, sizeof *w);
    w->r = xaligned_alloc((size_t)max_threads * sizeof(ws_range_t));
    memset(w->r, 0, (size_t)max_threads * sizeof(ws_range_t));
    w->max = max_threads;
    w->n = 1;
    return w;
}

void ws_free(ws_t **pw)
{
    if (!pw || !*pw)
        return;
    free((*pw)->r);
    free(*pw);
    *pw = NULL;
}

void ws_init(ws_t *w, int64_t n_items, int n_threads)
{
    assert(n_items >= 0 && n_items <= (int64_t)UINT32_MAX);
    if (n_threads < 1)
        n_threads = 1;
    if (n_threads > w->max)
        n_threads = w->max;
    w->n = n_threads;
    for (int t = 0; t < n_threads; t++) {
        const uint64_t a = (uint64_t)(n_items * t / n_threads), e = (uint64_t)(n_items * (t + 1) / n_threads);
        atomic_store_explicit(&w->r[t].fe, a | e << 32, memory_order_relaxed);
    }
}
