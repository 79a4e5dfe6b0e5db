/* prefix_index.c — block key → replica set, chained hash map + LRU over a
 * fixed entry array (see prefix_index.h). */
#include "gateway/prefix_index.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/idxlist.h"
#include "common/splitmix.h"
#include "common/xalloc.h"

typedef struct entry {
    uint64_t key;
    uint64_t slots;               /* bit i: slot i holds the key; 0 = entry free */
    int32_t hnext;                /* bucket chain, -1 = end */
    idxlist_link_t lru;           /* LRU (used) or free list (lru.next only); -1 = end */
} entry_t;

struct prefix_index {
    entry_t *e;                   /* (cap) */
    int32_t cap;
    int32_t *bucket;              /* (mask + 1) chains, -1 = empty */
    uint64_t mask;
    uint64_t secret;              /* bucket = mix(key ^ secret) */
    int32_t free_head;            /* free entries, linked by lru.next */
    idxlist_t lru;                /* used entries, head = least recently used */
    size_t n_used;
    size_t n_slot[PREFIX_INDEX_MAX_SLOTS]; /* keys per slot */
    uint64_t n_evictions;
};

static inline size_t bucket_of(const prefix_index_t *x, uint64_t key)
{
    return (size_t)(splitmix64_mix(key ^ x->secret) & x->mask);
}

prefix_index_t *prefix_index_new(size_t max_entries)
{
    if (max_entries == 0)
        max_entries = PREFIX_INDEX_DEFAULT_ENTRIES;
    if (max_entries > (1u << 30))
        max_entries = 1u << 30;
    prefix_index_t *x = xcalloc(1, sizeof *x);
    x->cap = (int32_t)max_entries;
    x->e = xmalloc((size_t)x->cap * sizeof *x->e);
    for (int32_t i = 0; i < x->cap; i++)
        x->e[i] = (entry_t){.hnext = -1, .lru = {-1, i + 1 < x->cap ? i + 1 : -1}};
    x->free_head = 0;
    size_t nb = 16;
    while (nb < max_entries)
        nb <<= 1;
    x->bucket = xmalloc(nb * sizeof *x->bucket);
    for (size_t i = 0; i < nb; i++)
        x->bucket[i] = -1;
    x->mask = nb - 1;
    x->lru = IDXLIST_EMPTY;
    if (getrandom(&x->secret, sizeof x->secret, 0) != (ssize_t)sizeof x->secret)
        x->secret = splitmix64_mix((uint64_t)clock_now_us() ^ (uint64_t)(uintptr_t)x);
    return x;
}

void prefix_index_free(prefix_index_t **xp)
{
    if (!xp || !*xp)
        return;
    free((*xp)->e);
    free((*xp)->bucket);
    free(*xp);
    *xp = NULL;
}

static void lru_unlink(prefix_index_t *x, int32_t i) { idxlist_remove(&x->lru, &x->e[0].lru, sizeof *x->e, i); }

static void lru_push_tail(prefix_index_t *x, int32_t i) { idxlist_push_tail(&x->lru, &x->e[0].lru, sizeof *x->e, i); }

static int32_t find(const prefix_index_t *x, uint64_t key)
{
    for (int32_t i = x->bucket[bucket_of(x, key)]; i >= 0; i = x->e[i].hnext)
        if (x->e[i].key == key)
            return i;
    return -1;
}

/* Unlinks entry i from its bucket and the LRU, clears its slots' counts and
 * puts it on the free list. */
static void entry_remove(prefix_index_t *x, int32_t i)
{
    entry_t *e = &x->e[i];
    int32_t *link = &x->bucket[bucket_of(x, e->key)];
    while (*link != i) {
        assert(*link >= 0);
        link = &x->e[*link].hnext;
    }
    *link = e->hnext;
    lru_unlink(x, i);
    for (uint64_t s = e->slots; s; s &= s - 1)
        x->n_slot[__builtin_ctzll(s)]--;
    *e = (entry_t){.hnext = -1, .lru = {-1, x->free_head}};
    x->free_head = i;
    x->n_used--;
}

void prefix_index_add(prefix_index_t *x, uint64_t key, int slot)
{
    if (slot < 0 || slot >= PREFIX_INDEX_MAX_SLOTS)
        return;
    uint64_t bit = 1ULL << slot;
    int32_t i = find(x, key);
    if (i < 0) {
        if (x->free_head < 0) {
            assert(x->lru.head >= 0);
            entry_remove(x, x->lru.head);
            x->n_evictions++;
        }
        i = x->free_head;
        entry_t *e = &x->e[i];
        x->free_head = e->lru.next;
        size_t b = bucket_of(x, key);
        *e = (entry_t){.key = key, .slots = 0, .hnext = x->bucket[b], .lru = {-1, -1}};
        x->bucket[b] = i;
        x->n_used++;
        lru_push_tail(x, i);
    } else {
        lru_unlink(x, i);
        lru_push_tail(x, i);
    }
    if (!(x->e[i].slots & bit)) {
        x->e[i].slots |= bit;
        x->n_slot[slot]++;
    }
}

void prefix_index_del(prefix_index_t *x, uint64_t key, int slot)
{
    if (slot < 0 || slot >= PREFIX_INDEX_MAX_SLOTS)
        return;
    int32_t i = find(x, key);
    if (i < 0)
        return;
    uint64_t bit = 1ULL << slot;
    if (!(x->e[i].slots & bit))
        return;
    x->e[i].slots &= ~bit;
    x->n_slot[slot]--;
    if (!x->e[i].slots)
        entry_remove(x, i);
}

void prefix_index_drop_slot(prefix_index_t *x, int slot)
{
    if (slot < 0 || slot >= PREFIX_INDEX_MAX_SLOTS || x->n_slot[slot] == 0)
        return;
    uint64_t bit = 1ULL << slot;
    for (int32_t i = x->lru.head; i >= 0;) {
        int32_t next = x->e[i].lru.next;
        if (x->e[i].slots & bit) {
            x->e[i].slots &= ~bit;
            x->n_slot[slot]--;
            if (!x->e[i].slots)
                entry_remove(x, i);
        }
        i = next;
    }
    assert(x->n_slot[slot] == 0);
}

uint64_t prefix_index_match(prefix_index_t *x, const uint64_t *keys, int32_t n,
                            int32_t depth[PREFIX_INDEX_MAX_SLOTS])
{
    for (int s = 0; s < PREFIX_INDEX_MAX_SLOTS; s++)
        depth[s] = 0;
    uint64_t alive = ~0ULL, any = 0;
    for (int32_t k = 0; k < n && alive; k++) {
        int32_t i = find(x, keys[k]);
        alive &= i >= 0 ? x->e[i].slots : 0;
        if (!alive)
            break;
        lru_unlink(x, i);
        lru_push_tail(x, i);
        any |= alive;
        for (uint64_t s = alive; s; s &= s - 1)
            depth[__builtin_ctzll(s)] = k + 1;
    }
    return any;
}

size_t prefix_index_size(const prefix_index_t *x) { return x->n_used; }

size_t prefix_index_slot_size(const prefix_index_t *x, int slot)
{
    return slot >= 0 && slot < PREFIX_INDEX_MAX_SLOTS ? x->n_slot[slot] : 0;
}

uint64_t prefix_index_evictions(const prefix_index_t *x) { return x->n_evictions; }
