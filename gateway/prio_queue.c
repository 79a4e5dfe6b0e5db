/* prio_queue.c — binary min-heap on a time-invariant aging key, plus an
 * id → heap-slot index (linear probing, backward-shift deletion) so that a
 * cancelled request leaves the queue in O(log n). See prio_queue.h for why the
 * key is time-invariant. */
#include "gateway/prio_queue.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/splitmix.h"
#include "common/xalloc.h"

/* One heap slot. */
typedef struct {
    prio_queue_entry_t e;
    int64_t key_us;     /* t_enqueue_us + tier offset (virtual µs), or age for no-aging */
    uint64_t seq;       /* push counter: final tie-break, keeps pops deterministic */
} slot_t;

#define INDEX_EMPTY UINT32_MAX

struct prio_queue {
    prio_queue_config_t cfg;
    int64_t tier_offset_us[PRIO_N_TIERS]; /* base/aging in µs (aging > 0 only) */
    int aging;                 /* 1 when aging_per_s > 0 */
    slot_t *heap;              /* (max_entries) min-heap by slot_less */
    size_t n;                  /* entries in heap */
    size_t n_tier[PRIO_N_TIERS];
    uint64_t seq;
    /* index: open addressing, capacity power of two ≥ 2*max_entries */
    uint64_t *idx_id;          /* (idx_cap) request ids */
    uint32_t *idx_pos;         /* (idx_cap) heap position, INDEX_EMPTY = free */
    size_t idx_cap;
    /* Lower bound on the earliest deadline queued (INT64_MAX = none). Removals
     * leave it stale-low, which only costs one extra scan that refreshes it. */
    int64_t t_min_deadline_us;
};

const char *prio_tier_name(prio_tier_t tier)
{
    switch (tier) {
    case PRIO_TIER_HIGH: return "high";
    case PRIO_TIER_NORMAL: return "normal";
    case PRIO_TIER_LOW: return "low";
    }
    return "?";
}

int prio_tier_parse(const char *s, prio_tier_t *out)
{
    if (!s)
        return -1;
    for (int t = 0; t < PRIO_N_TIERS; t++) {
        if (strcmp(s, prio_tier_name((prio_tier_t)t)) == 0) {
            *out = (prio_tier_t)t;
            return 0;
        }
    }
    return -1;
}

void prio_queue_config_default(prio_queue_config_t *cfg)
{
    cfg->max_entries = 1024;
    cfg->tier_base[PRIO_TIER_HIGH] = 0.0;
    cfg->tier_base[PRIO_TIER_NORMAL] = 1.0;
    cfg->tier_base[PRIO_TIER_LOW] = 2.0;
    cfg->aging_per_s = 1.0 / 30.0;
}

/* ---- ordering ---------------------------------------------------------- */

static int slot_less(const prio_queue_t *q, const slot_t *a, const slot_t *b)
{
    if (q->aging) {
        if (a->key_us != b->key_us)
            return a->key_us < b->key_us;
    } else if (a->e.tier != b->e.tier) {
        return a->e.tier < b->e.tier;
    }
    if (a->e.t_enqueue_us != b->e.t_enqueue_us)
        return a->e.t_enqueue_us < b->e.t_enqueue_us;
    return a->seq < b->seq;
}

/* ---- index ------------------------------------------------------------- */

static size_t id_hash(uint64_t id)
{
    /* request ids are sequential: spread them */
    return (size_t)splitmix64_mix(id);
}

/* Slot of `id` in the index, or of the empty slot where it would go. */
static size_t idx_find(const prio_queue_t *q, uint64_t id)
{
    size_t mask = q->idx_cap - 1;
    size_t i = id_hash(id) & mask;
    while (q->idx_pos[i] != INDEX_EMPTY && q->idx_id[i] != id)
        i = (i + 1) & mask;
    return i;
}

static void idx_set(prio_queue_t *q, uint64_t id, size_t pos)
{
    size_t i = idx_find(q, id);
    q->idx_id[i] = id;
    q->idx_pos[i] = (uint32_t)pos;
}

static void idx_del(prio_queue_t *q, uint64_t id)
{
    size_t mask = q->idx_cap - 1;
    size_t i = idx_find(q, id);
    assert(q->idx_pos[i] != INDEX_EMPTY);
    q->idx_pos[i] = INDEX_EMPTY;
    /* Backward-shift: move later members of the probe run into the hole when
     * their home slot does not lie cyclically in (hole, j]. */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (q->idx_pos[j] == INDEX_EMPTY)
            break;
        size_t home = id_hash(q->idx_id[j]) & mask;
        int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (in_range)
            continue;
        q->idx_id[i] = q->idx_id[j];
        q->idx_pos[i] = q->idx_pos[j];
        q->idx_pos[j] = INDEX_EMPTY;
        i = j;
    }
}

/* ---- heap -------------------------------------------------------------- */

static void heap_place(prio_queue_t *q, size_t pos, const slot_t *s)
{
    q->heap[pos] = *s;
    idx_set(q, s->e.id, pos);
}

static void sift_up(prio_queue_t *q, size_t pos)
{
    slot_t s = q->heap[pos];
    while (pos > 0) {
        size_t parent = (pos - 1) / 2;
        if (!slot_less(q, &s, &q->heap[parent]))
            break;
        heap_place(q, pos, &q->heap[parent]);
        pos = parent;
    }
    heap_place(q, pos, &s);
}

static void sift_down(prio_queue_t *q, size_t pos)
{
    slot_t s = q->heap[pos];
    for (;;) {
        size_t l = 2 * pos + 1, best = pos;
        const slot_t *bs = &s;
        if (l < q->n && slot_less(q, &q->heap[l], bs)) {
            best = l;
            bs = &q->heap[l];
        }
        if (l + 1 < q->n && slot_less(q, &q->heap[l + 1], bs))
            best = l + 1;
        if (best == pos)
            break;
        heap_place(q, pos, &q->heap[best]);
        pos = best;
    }
    heap_place(q, pos, &s);
}

/* Takes heap slot `pos` out, returning its entry. */
static prio_queue_entry_t heap_take(prio_queue_t *q, size_t pos)
{
    assert(pos < q->n);
    prio_queue_entry_t out = q->heap[pos].e;
    idx_del(q, out.id);
    q->n_tier[out.tier]--;
    q->n--;
    if (pos != q->n) {
        q->heap[pos] = q->heap[q->n];
        /* The moved slot may need to go either way. */
        if (pos > 0 && slot_less(q, &q->heap[pos], &q->heap[(pos - 1) / 2]))
            sift_up(q, pos);
        else
            sift_down(q, pos);
    }
    return out;
}

/* ---- public ------------------------------------------------------------ */

prio_queue_t *prio_queue_new(const prio_queue_config_t *cfg)
{
    if (!cfg || cfg->max_entries < 1 || cfg->max_entries > (1u << 30))
        return NULL;
    if (!(cfg->aging_per_s >= 0.0) || !isfinite(cfg->aging_per_s))
        return NULL;
    for (int t = 0; t < PRIO_N_TIERS; t++) {
        if (!(cfg->tier_base[t] >= 0.0 && cfg->tier_base[t] <= 1e6))
            return NULL;
        if (t > 0 && cfg->tier_base[t] < cfg->tier_base[t - 1])
            return NULL;
    }
    prio_queue_t *q = xcalloc(1, sizeof(*q));
    q->cfg = *cfg;
    q->aging = cfg->aging_per_s > 0.0;
    for (int t = 0; t < PRIO_N_TIERS; t++) {
        if (q->aging) {
            double off = cfg->tier_base[t] / cfg->aging_per_s * 1e6;
            /* ≤ ~290 years of virtual time keeps key_us far from overflow. */
            if (!(off < 9e15))
                goto err;
            q->tier_offset_us[t] = llround(off);
        }
    }
    q->heap = xcalloc(cfg->max_entries, sizeof(slot_t));
    q->idx_cap = 16;
    while (q->idx_cap < 2 * cfg->max_entries)
        q->idx_cap *= 2;
    q->idx_id = xcalloc(q->idx_cap, sizeof(uint64_t));
    q->idx_pos = xmalloc(q->idx_cap * sizeof(uint32_t));
    for (size_t i = 0; i < q->idx_cap; i++)
        q->idx_pos[i] = INDEX_EMPTY;
    q->t_min_deadline_us = INT64_MAX;
    return q;
err:
    prio_queue_free(&q);
    return NULL;
}

void prio_queue_free(prio_queue_t **qp)
{
    if (!qp || !*qp)
        return;
    prio_queue_t *q = *qp;
    free(q->heap);
    free(q->idx_id);
    free(q->idx_pos);
    free(q);
    *qp = NULL;
}

int prio_queue_push(prio_queue_t *q, uint64_t id, prio_tier_t tier, int64_t t_enqueue_us,
                    int64_t t_deadline_us, void *data)
{
    if ((int)tier < 0 || (int)tier >= PRIO_N_TIERS)
        return PRIO_QUEUE_BAD_ARG;
    if (prio_queue_contains(q, id))
        return PRIO_QUEUE_DUPLICATE;
    if (q->n >= q->cfg.max_entries)
        return PRIO_QUEUE_FULL;
    slot_t s = {
        .e = {.id = id, .tier = tier, .t_enqueue_us = t_enqueue_us,
              .t_deadline_us = t_deadline_us > 0 ? t_deadline_us : 0, .data = data},
        .key_us = q->aging ? t_enqueue_us + q->tier_offset_us[tier] : 0,
        .seq = q->seq++,
    };
    q->heap[q->n] = s;
    q->n++;
    q->n_tier[tier]++;
    sift_up(q, q->n - 1);
    if (s.e.t_deadline_us > 0 && s.e.t_deadline_us < q->t_min_deadline_us)
        q->t_min_deadline_us = s.e.t_deadline_us;
    return PRIO_QUEUE_OK;
}

int prio_queue_peek(const prio_queue_t *q, prio_queue_entry_t *out)
{
    if (q->n == 0)
        return PRIO_QUEUE_EMPTY;
    if (out)
        *out = q->heap[0].e;
    return PRIO_QUEUE_OK;
}

int prio_queue_pop(prio_queue_t *q, prio_queue_entry_t *out)
{
    if (q->n == 0)
        return PRIO_QUEUE_EMPTY;
    prio_queue_entry_t e = heap_take(q, 0);
    if (out)
        *out = e;
    return PRIO_QUEUE_OK;
}

int prio_queue_contains(const prio_queue_t *q, uint64_t id)
{
    return q->idx_pos[idx_find(q, id)] != INDEX_EMPTY;
}

int prio_queue_remove(prio_queue_t *q, uint64_t id, prio_queue_entry_t *out)
{
    size_t i = idx_find(q, id);
    if (q->idx_pos[i] == INDEX_EMPTY)
        return PRIO_QUEUE_NOT_FOUND;
    prio_queue_entry_t e = heap_take(q, q->idx_pos[i]);
    if (out)
        *out = e;
    return PRIO_QUEUE_OK;
}

static int cmp_deadline(const void *a, const void *b)
{
    const prio_queue_entry_t *x = a, *y = b;
    if (x->t_deadline_us != y->t_deadline_us)
        return x->t_deadline_us < y->t_deadline_us ? -1 : 1;
    return x->id < y->id ? -1 : (x->id > y->id);
}

size_t prio_queue_expire(prio_queue_t *q, int64_t now_us, prio_queue_expire_cb cb, void *ctx)
{
    if (q->n == 0 || now_us < q->t_min_deadline_us)
        return 0;
    /* Collect first: removing while scanning the heap array would reorder it. */
    prio_queue_entry_t *dead = xmalloc(q->n * sizeof(*dead));
    size_t n_dead = 0;
    int64_t t_min = INT64_MAX;
    for (size_t i = 0; i < q->n; i++) {
        const prio_queue_entry_t *e = &q->heap[i].e;
        if (e->t_deadline_us == 0)
            continue;
        if (e->t_deadline_us <= now_us)
            dead[n_dead++] = *e;
        else if (e->t_deadline_us < t_min)
            t_min = e->t_deadline_us;
    }
    q->t_min_deadline_us = t_min;
    for (size_t i = 0; i < n_dead; i++) {
        int rc = prio_queue_remove(q, dead[i].id, NULL);
        assert(rc == PRIO_QUEUE_OK);
        (void)rc;
    }
    qsort(dead, n_dead, sizeof(*dead), cmp_deadline);
    for (size_t i = 0; cb && i < n_dead; i++)
        cb(&dead[i], ctx);
    free(dead);
    return n_dead;
}

size_t prio_queue_len(const prio_queue_t *q)
{
    return q->n;
}

size_t prio_queue_len_tier(const prio_queue_t *q, prio_tier_t tier)
{
    if ((int)tier < 0 || (int)tier >= PRIO_N_TIERS)
        return 0;
    return q->n_tier[tier];
}

int64_t prio_queue_oldest_us(const prio_queue_t *q, prio_tier_t tier)
{
    if ((int)tier < 0 || (int)tier >= PRIO_N_TIERS || !q->n_tier[tier])
        return 0;
    int64_t oldest = INT64_MAX;
    for (size_t i = 0; i < q->n; i++)
        if (q->heap[i].e.tier == tier && q->heap[i].e.t_enqueue_us < oldest)
            oldest = q->heap[i].e.t_enqueue_us;
    return oldest;
}

size_t prio_queue_capacity(const prio_queue_t *q)
{
    return q->cfg.max_entries;
}

double prio_queue_effective(const prio_queue_t *q, const prio_queue_entry_t *e, int64_t now_us)
{
    return q->cfg.tier_base[e->tier] -
           q->cfg.aging_per_s * (double)(now_us - e->t_enqueue_us) / 1e6;
}
