/* prio_queue.h — a bounded per-model priority queue with three tiers and aging.
 *
 * The gateway keeps one queue per model. Each queued request has a tier (from
 * its API key; /v1/batch forces low), the monotonic time it was enqueued and an
 * optional deadline. The request that leaves next is the one with the best
 * (lowest) *effective priority*
 *
 *     eff(now) = tier_base[tier] - aging_per_s * (now - t_enqueue) / 1e6
 *
 * so waiting improves a request's priority linearly and low tiers never starve:
 * with the defaults (bases 0/1/2, aging 1/30 per second) a low request that has
 * waited 30 s is exactly as urgent as a fresh normal one, and after 60 s as a
 * fresh high one. Ties go to the oldest request (FIFO), then to the first pushed.
 *
 * Why a plain binary heap works although priorities change with time: every
 * entry ages at the same rate, so for any two entries a, b
 *     eff_a(now) - eff_b(now) = (base_a + r*t_a) - (base_b + r*t_b)
 * does not depend on `now`. Ordering by the time-invariant key
 *     key = base/r + t_enqueue           (in microseconds of "virtual time")
 * is therefore the same as ordering by eff(now) at every instant, and heap order
 * never goes stale. With aging_per_s == 0 the key degenerates to (tier, age).
 *
 * Complexity: push, pop, remove-by-id O(log n) (an open-addressing index maps
 * id → heap slot); expire O(n) but skipped entirely while no deadline can have
 * passed (a cached lower bound on the earliest deadline).
 *
 * Not thread-safe: the gateway owns each queue from one thread or under its lock.
 * Memory: the queue never owns `data`; entries handed back (pop/remove/expire)
 * give the caller its pointer back.
 */
#ifndef PAGODA_GATEWAY_PRIO_QUEUE_H
#define PAGODA_GATEWAY_PRIO_QUEUE_H

#include <stddef.h>
#include <stdint.h>

/* Priority tiers, most urgent first. Shared with keys.h and the wire protocol. */
typedef enum {
    PRIO_TIER_HIGH = 0,
    PRIO_TIER_NORMAL = 1,
    PRIO_TIER_LOW = 2,
} prio_tier_t;
#define PRIO_N_TIERS 3

/* "high" | "normal" | "low" (static strings); "?" for anything else. */
const char *prio_tier_name(prio_tier_t tier);
/* Parses a tier name (exact, lower case). Returns 0 and sets *out, or -1. */
int prio_tier_parse(const char *s, prio_tier_t *out);

typedef struct {
    size_t max_entries;             /* bound; push past it returns PRIO_QUEUE_FULL (≥ 1) */
    double tier_base[PRIO_N_TIERS]; /* base priority per tier, lower = more urgent,
                                       must be non-decreasing high→low, each in [0, 1e6] */
    double aging_per_s;             /* priority units gained per waited second, ≥ 0 */
} prio_queue_config_t;

/* Defaults: 1024 entries, bases {0, 1, 2}, aging 1/30 per second. */
void prio_queue_config_default(prio_queue_config_t *cfg);

/* One queued request, as handed back to the caller. */
typedef struct {
    uint64_t id;            /* gateway request id, unique within the queue */
    prio_tier_t tier;
    int64_t t_enqueue_us;   /* monotonic enqueue time (clock_now_us) */
    int64_t t_deadline_us;  /* monotonic deadline, 0 = none */
    void *data;             /* caller's pointer, never dereferenced here */
} prio_queue_entry_t;

typedef struct prio_queue prio_queue_t;

/* Return codes. */
enum {
    PRIO_QUEUE_OK = 0,
    PRIO_QUEUE_FULL = 1,      /* push: the queue holds max_entries already */
    PRIO_QUEUE_EMPTY = 2,     /* pop/peek: nothing queued */
    PRIO_QUEUE_NOT_FOUND = 3, /* remove: no entry with that id */
    PRIO_QUEUE_DUPLICATE = 4, /* push: id already queued */
    PRIO_QUEUE_BAD_ARG = -1,  /* tier out of range */
};

/* Returns NULL when the config is invalid (see field comments). */
prio_queue_t *prio_queue_new(const prio_queue_config_t *cfg);
/* Frees the queue (not the entries' data) and NULLs *q. NULL-safe. */
void prio_queue_free(prio_queue_t **q);

/* Enqueues. Returns PRIO_QUEUE_OK, _FULL, _DUPLICATE or _BAD_ARG. */
int prio_queue_push(prio_queue_t *q, uint64_t id, prio_tier_t tier, int64_t t_enqueue_us,
                    int64_t t_deadline_us, void *data);
/* Removes the most urgent entry into *out. PRIO_QUEUE_OK or _EMPTY. */
int prio_queue_pop(prio_queue_t *q, prio_queue_entry_t *out);
/* Like pop but leaves the entry queued. */
int prio_queue_peek(const prio_queue_t *q, prio_queue_entry_t *out);
/* Removes entry `id` (cancel / client gone) into *out (may be NULL).
 * PRIO_QUEUE_OK or _NOT_FOUND. */
int prio_queue_remove(prio_queue_t *q, uint64_t id, prio_queue_entry_t *out);
/* 1 if `id` is queued, else 0. */
int prio_queue_contains(const prio_queue_t *q, uint64_t id);

/* Called once per expired entry, after it left the queue (it may push/remove). */
typedef void (*prio_queue_expire_cb)(const prio_queue_entry_t *e, void *ctx);
/* Removes every entry with 0 < t_deadline_us <= now_us, calling cb (may be
 * NULL) for each in deadline order. Returns how many were removed. */
size_t prio_queue_expire(prio_queue_t *q, int64_t now_us, prio_queue_expire_cb cb, void *ctx);

size_t prio_queue_len(const prio_queue_t *q);
size_t prio_queue_len_tier(const prio_queue_t *q, prio_tier_t tier);
/* The earliest t_enqueue_us among the tier's entries (its longest waiter),
 * 0 when the tier is empty. O(n): for /health, not for dispatch. */
int64_t prio_queue_oldest_us(const prio_queue_t *q, prio_tier_t tier);
size_t prio_queue_capacity(const prio_queue_t *q);
/* The effective priority formula above (lower = more urgent), for logs/admin. */
double prio_queue_effective(const prio_queue_t *q, const prio_queue_entry_t *e, int64_t now_us);

#endif
