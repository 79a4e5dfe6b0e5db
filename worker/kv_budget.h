/* kv_budget.h — the KV pool's size when the operator gives none.
 *
 * `--kv-budget-mb 0` (the default; `kv_budget_mb: 0` in the gateway's
 * configuration) and no `--kv-blocks`: the worker sizes its pool at start-up
 * from the memory the host has free and what its model needs. In MiB:
 *
 *   R     = max(1024, A / 10)                  reserve: the OS, page cache for
 *                                              the rest of the host, and each
 *                                              worker's activations and scratch
 *   share = (A - R) / N - W                    this worker's slice of the host,
 *                                              less its own weights
 *   now   = F - R / N - W                      what is free when this worker
 *                                              starts, less its part of R
 *   KV    = max(floor, min(share, now, cap))   floor = min(256, cap)
 *
 *   A    memory available to the host's workers (memavail.h: MemAvailable or
 *        the cgroup v2 headroom, the smaller), measured once by the gateway
 *        when it starts its local workers (--mem-avail-mb), or by a worker
 *        started by hand at its own start
 *   N    workers sharing A: every local replica of every model the gateway
 *        supervises, on-demand ones included (--mem-workers; 1 by hand)
 *   F    A as this worker measures it at its start, after loading the GGUF,
 *        before packing and the pool (equal to A for a worker started by hand)
 *   W    what the worker holds of its weights: the matrices it reads from the
 *        mmap plus its packed int8 copies (whose file pages it drops), and the
 *        draft model's the same way
 *   cap  what max_seqs full contexts take (max_seqs x ctx positions, in this
 *        pool's blocks, the draft's pool included): more is never used
 *
 * Why two terms: `share` gives every worker the same slice whenever it
 * starts (a restarted or on-demand worker gets what it got at first, not
 * what its running siblings left), and `now` keeps a worker from taking
 * memory that something else has taken since the gateway measured: at a
 * restart F is about A minus the siblings' slices, so `now` is about
 * `share` plus the siblings' part of R and does not bind.
 *
 * The pool is mapped lazily (untouched pages cost nothing at start-up) and
 * the worker maps it in 8 MiB pieces while idle, so the whole of KV becomes
 * resident within seconds of the start: the rule budgets all of it.
 *
 * Pure functions: no I/O; the caller measures (memavail_read) and logs.
 */
#ifndef PAGODA_WORKER_KV_BUDGET_H
#define PAGODA_WORKER_KV_BUDGET_H

#include <stddef.h>
#include <stdint.h>

#define KV_BUDGET_MIN_RESERVE_MIB 1024 /* R's floor */
#define KV_BUDGET_RESERVE_PCT 10       /* R's share of A */
#define KV_BUDGET_FLOOR_MIB 256        /* the smallest pool sized this way */

typedef struct kv_budget_in {
    uint64_t avail_mib;   /* A */
    uint64_t free_mib;    /* F */
    uint32_t n_workers;   /* N (0 is taken as 1) */
    uint64_t weights_mib; /* W */
    uint64_t cap_mib;     /* cap (0: no cap) */
} kv_budget_in_t;

/* Which term set the size. */
typedef enum kv_budget_bound {
    KV_BUDGET_SHARE = 0,  /* share */
    KV_BUDGET_FREE,       /* now */
    KV_BUDGET_CAP,        /* cap */
    KV_BUDGET_FLOOR,      /* floor: the host is short of memory */
} kv_budget_bound_t;

typedef struct kv_budget {
    uint64_t mib;          /* KV */
    uint64_t reserve_mib;  /* R */
    int64_t share_mib;     /* share (negative: the weights alone exceed the slice) */
    int64_t now_mib;       /* now */
    kv_budget_bound_t bound;
} kv_budget_t;

/* The rule above. */
void kv_budget_auto(const kv_budget_in_t *in, kv_budget_t *out);

/* "share", "free memory", "context cap", "floor". */
const char *kv_budget_bound_name(kv_budget_bound_t b);

/* The rule with its numbers, for the start-up log line, into buf:
 * "6144 MiB = min((avail 20480 - reserve 2048) / 2 workers - weights 4200 = 5016,
 *  free 20000 - reserve/2 1024 - weights 4200 = 14776, ctx cap 16384), floor 256: share". */
void kv_budget_describe(const kv_budget_in_t *in, const kv_budget_t *b, char *buf, size_t len);

#endif
