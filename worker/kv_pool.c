/* kv_pool.c — the paged KV cache's block manager: ref-counted blocks, a free
 * stack, an LRU list of evictable cached blocks and a chained hash map from
 * prefix key to cached block (see kv_pool.h and docs/KV_CACHE.md). */
#include "worker/kv_pool.h"

#include <assert.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"
#include "common/idxlist.h"
#include "common/log.h"
#include "common/prefix_key.h"
#include "common/splitmix.h"
#include "common/vec.h"
#include "common/xalloc.h"

typedef struct kv_block {
    int32_t ref;            /* sequences referencing the block */
    bool cached;            /* registered in the prefix cache (in the hash map) */
    idxlist_link_t lru;     /* LRU links, valid when ref == 0 && cached; -1 = none */
    int32_t hnext;          /* next block in the same hash bucket, -1 = end */
    uint64_t key;           /* prefix key of the block (valid when cached) */
    uint64_t parent_key;    /* key of the parent block (root key for block 0) */
    int32_t parent_block;   /* parent's physical id at registration, -1 = root */
    uint64_t parent_serial; /* parent's serial at registration, 0 = root */
    uint64_t serial;        /* unique per registration; 0 = never registered */
    uint64_t pub;           /* public key (common/prefix_key.h), valid when cached */
    uint64_t parent_pub;    /* the parent's public key (its partition's public root for block 0) */
    bool warm;              /* loaded by a warm start, not adopted yet (kv_pool.h) */
    int32_t pnext;          /* next block in the same public-key bucket, -1 = end */
} kv_block_t;

struct kv_seq {
    kv_pool_t *pool;
    kv_seq_t *prev, *next;  /* the pool's list of live sequences */
    int32_t *blocks;        /* (cap_blocks) physical ids, n_blocks used; the first
                             * n_dropped are KV_SEQ_NO_BLOCK (kv_seq_drop_before) */
    int32_t n_blocks, cap_blocks;
    int32_t n_dropped;      /* leading logical blocks released by kv_seq_drop_before */
    int32_t *tokens;        /* (cap_tokens) token ids of positions, n_tokens used */
    int32_t n_tokens, cap_tokens;
    uint64_t *keys;         /* (cap_blocks) prefix key of each committed block */
    uint64_t *pubs;         /* (cap_blocks) public key of each committed block */
    int32_t n_committed;    /* full blocks already passed to commit/match */
    /* Identity of the cached block holding the content of logical block
     * n_committed - 1 (ours, or the equal block that was cached before ours):
     * the parent the next committed block is registered under. */
    int32_t chain_block;
    uint64_t chain_serial;
    /* prefix-cache partition (kv_seq_set_partition): the parent keys of
     * block 0 in the pool's private chain and in the public chain */
    uint64_t partition;
    uint64_t root_key;      /* pool root_key ^ mix(partition) */
    uint64_t root_pub;      /* prefix_key_root(partition) */
};

struct kv_pool {
    kv_store_t store;       /* K/V memory, (n_layer, n_blocks, block_size, kv_dim) each */
    int32_t n_blocks, bs;
    kv_block_t *blk;        /* (n_blocks) */
    int32_t *blk_tokens;    /* (n_blocks, bs) token ids of cached blocks */
    int32_t *free_ids;      /* stack of free block ids, n_free used */
    int32_t n_free;
    idxlist_t lru;          /* evictable cached blocks, head = least recently released */
    int32_t n_used;
    int32_t n_cached_total;
    int32_t *bucket;        /* (mask + 1) hash chains, -1 = empty */
    uint64_t mask;
    int32_t *pbucket;       /* (mask + 1) chains by public key of cached and warm blocks, -1 = empty */
    int32_t n_warm;         /* blocks in the warm state */
    uint64_t *warm_plan;    /* (n_plan) public keys a warm start loads, most recent first */
    int32_t n_plan, i_plan; /* its length, and the next to load */
    uint64_t root_key;      /* parent key of every sequence's block 0 */
    uint64_t next_serial;
    kv_pool_hash_fn hash;   /* NULL = default */
    kv_seq_t *seqs;         /* live sequences */
    int32_t n_seqs;
    kv_pool_stats_t st;     /* counters (gauges are filled in by kv_pool_stats) */
    /* KV events (kv_pool_events_enable): public keys cached/evicted, in order */
    kv_pool_event_t *ev;    /* (cap_ev) ring, NULL = events off */
    int32_t cap_ev, head_ev, n_ev;
    bool ev_overflow;       /* events were lost: the reader must resync */
    kv_pool_tier_t tier;    /* lower tier, tier.store NULL = none */
    size_t n_bytes;         /* of store.k and of store.v (xhuge_zalloc) */
    size_t prefaulted;      /* bytes of k, then v, that kv_pool_prefault_step mapped */
    size_t head_bytes;      /* kv_pool_prefault_head's span per layer region */
    pthread_t head;         /* its thread, joined by kv_pool_free */
    bool head_thread;
    /* the same thread then keeps mapping ahead of use: every layer region up
     * to block `ahead` past the highest id handed out (a step that writes
     * into a fresh block of every layer would otherwise fault and zero a
     * 2 MiB page per layer region inside the step: ~0.1 s stalls of every
     * running stream when they all cross into new blocks at once) */
    atomic_int hi_id;       /* 1 + the highest block id handed out */
    atomic_int ready_id;    /* blocks [0, ready_id) are mapped in every layer, or
                             * n_blocks once the thread has ended (nothing to wake) */
    int32_t ahead;          /* blocks mapped past hi_id */
    pthread_mutex_t ahead_mu;
    pthread_cond_t ahead_cv;
    bool ahead_stop;        /* kv_pool_free: the thread ends */
};

/* ---- hashing ------------------------------------------------------------ */

/* The block hash is common/prefix_key.h's; the pool keys its own map from a
 * random root, and keeps each block's public key (constant root) beside it
 * for the KV events the gateway routes by. */
#define hash_default prefix_key_next

static inline uint64_t pool_hash(const kv_pool_t *p, uint64_t parent, const int32_t *t)
{
    return p->hash ? p->hash(parent, t, p->bs) : hash_default(parent, t, p->bs);
}

/* Cached block with this key, parent and tokens, or -1. */
static int32_t map_find(const kv_pool_t *p, uint64_t key, uint64_t parent_key, int32_t parent_block,
                        uint64_t parent_serial, const int32_t *tokens)
{
    for (int32_t id = p->bucket[key & p->mask]; id >= 0; id = p->blk[id].hnext) {
        const kv_block_t *b = &p->blk[id];
        if (b->key == key && b->parent_key == parent_key && b->parent_block == parent_block &&
            b->parent_serial == parent_serial &&
            memcmp(p->blk_tokens + (size_t)id * (size_t)p->bs, tokens, (size_t)p->bs * sizeof(int32_t)) == 0)
            return id;
    }
    return -1;
}

static void map_insert(kv_pool_t *p, int32_t id)
{
    uint64_t h = p->blk[id].key & p->mask;
    p->blk[id].hnext = p->bucket[h];
    p->bucket[h] = id;
}

static void map_remove(kv_pool_t *p, int32_t id)
{
    int32_t *link = &p->bucket[p->blk[id].key & p->mask];
    while (*link != id) {
        assert(*link >= 0);
        link = &p->blk[*link].hnext;
    }
    *link = p->blk[id].hnext;
    p->blk[id].hnext = -1;
}

/* The public-key map: every cached or warm block, by pub (a key may be
 * there twice: the same content registered under two chains). */
static void pmap_insert(kv_pool_t *p, int32_t id)
{
    uint64_t h = splitmix64_mix(p->blk[id].pub) & p->mask;
    p->blk[id].pnext = p->pbucket[h];
    p->pbucket[h] = id;
}

static void pmap_remove(kv_pool_t *p, int32_t id)
{
    int32_t *link = &p->pbucket[splitmix64_mix(p->blk[id].pub) & p->mask];
    while (*link != id) {
        assert(*link >= 0);
        link = &p->blk[*link].pnext;
    }
    *link = p->blk[id].pnext;
    p->blk[id].pnext = -1;
}

/* A warm block with this public key, parent public key and tokens, or -1. */
static int32_t warm_find(const kv_pool_t *p, uint64_t pub, uint64_t parent_pub, const int32_t *tokens)
{
    if (p->n_warm == 0)
        return -1;
    for (int32_t id = p->pbucket[splitmix64_mix(pub) & p->mask]; id >= 0; id = p->blk[id].pnext) {
        const kv_block_t *b = &p->blk[id];
        if (b->warm && b->pub == pub && b->parent_pub == parent_pub &&
            memcmp(p->blk_tokens + (size_t)id * (size_t)p->bs, tokens, (size_t)p->bs * sizeof(int32_t)) == 0)
            return id;
    }
    return -1;
}

/* ---- block lists -------------------------------------------------------- */

static void lru_push_tail(kv_pool_t *p, int32_t id) { idxlist_push_tail(&p->lru, &p->blk[0].lru, sizeof *p->blk, id); }

static void lru_remove(kv_pool_t *p, int32_t id) { idxlist_remove(&p->lru, &p->blk[0].lru, sizeof *p->blk, id); }

/* A block with ref 1 for a new owner: free first, else evict the LRU head. */
/* ---- KV events ---------------------------------------------------------- */

static void event_push(kv_pool_t *p, uint64_t pub, bool added)
{
    if (!p->ev)
        return;
    if (p->n_ev == p->cap_ev) {
        /* the reader is behind: drop the log, it resyncs from the full set */
        p->ev_overflow = true;
        p->n_ev = 0;
        p->head_ev = 0;
    }
    if (p->ev_overflow)
        return;
    p->ev[(p->head_ev + p->n_ev) % p->cap_ev] = (kv_pool_event_t){.key = pub, .added = added};
    p->n_ev++;
}

void kv_pool_events_enable(kv_pool_t *p, int32_t cap)
{
    assert(cap > 0 && !p->ev);
    p->ev = xmalloc((size_t)cap * sizeof *p->ev);
    p->cap_ev = cap;
    p->head_ev = p->n_ev = 0;
    p->ev_overflow = p->n_cached_total > 0; /* blocks cached before: start with a full set */
}

int32_t kv_pool_events_take(kv_pool_t *p, kv_pool_event_t *out, int32_t max, bool *overflow)
{
    *overflow = p->ev_overflow;
    if (p->ev_overflow) {
        p->ev_overflow = false;
        p->n_ev = p->head_ev = 0;
        return 0;
    }
    int32_t n = p->n_ev < max ? p->n_ev : max;
    for (int32_t i = 0; i < n; i++)
        out[i] = p->ev[(p->head_ev + i) % p->cap_ev];
    p->head_ev = p->cap_ev ? (p->head_ev + n) % p->cap_ev : 0;
    p->n_ev -= n;
    return n;
}

static void tier_drain_dropped(kv_pool_t *p);

int32_t kv_pool_cached_keys(const kv_pool_t *p, uint64_t *out, int32_t max)
{
    int32_t n = 0;
    for (int32_t id = 0; id < p->n_blocks && n < max; id++)
        if (p->blk[id].cached)
            out[n++] = p->blk[id].pub;
    return n;
}

void kv_pool_set_tier(kv_pool_t *p, const kv_pool_tier_t *tier)
{
    if (tier)
        p->tier = *tier;
    else
        memset(&p->tier, 0, sizeof p->tier);
}

int32_t kv_pool_n_held_keys(const kv_pool_t *p)
{
    int64_t n = (int64_t)p->n_cached_total + (p->tier.n_keys ? p->tier.n_keys(p->tier.ud) : 0);
    return n > INT32_MAX ? INT32_MAX : (int32_t)n;
}

int32_t kv_pool_held_keys(const kv_pool_t *p, uint64_t *out, int32_t max)
{
    int32_t n = kv_pool_cached_keys(p, out, max);
    if (p->tier.keys && n < max)
        n += p->tier.keys(p->tier.ud, out + n, max - n);
    return n;
}

int32_t kv_pool_tier_flush(kv_pool_t *p)
{
    if (!p->tier.store)
        return 0;
    int32_t n = 0;
    for (int32_t id = 0; id < p->n_blocks; id++)
        if (p->blk[id].cached &&
            p->tier.store(p->tier.ud, &p->store, id, p->blk[id].pub, p->blk[id].parent_pub,
                          p->blk_tokens + (size_t)id * (size_t)p->bs) == 0)
            n++;
    tier_drain_dropped(p);
    return n;
}

/* Whether a cached or warm block has public key pub. */
static bool ram_holds(const kv_pool_t *p, uint64_t pub)
{
    for (int32_t id = p->pbucket[splitmix64_mix(pub) & p->mask]; id >= 0; id = p->blk[id].pnext)
        if (p->blk[id].pub == pub)
            return true;
    return false;
}

/* Keys the tier dropped become eviction events unless RAM still has them. */
static void tier_drain_dropped(kv_pool_t *p)
{
    if (!p->tier.take_dropped)
        return;
    uint64_t k[64];
    int32_t n;
    while ((n = p->tier.take_dropped(p->tier.ud, k, 64)) > 0)
        for (int32_t i = 0; i < n; i++)
            if (!ram_holds(p, k[i]))
                event_push(p, k[i], false);
}

/* Block id leaves the free stack: wake the prefault thread when the mapped
 * span gets within half its lead of the ids in use. */
static void note_taken(kv_pool_t *p, int32_t id)
{
    if (id < atomic_load_explicit(&p->hi_id, memory_order_relaxed))
        return;
    atomic_store_explicit(&p->hi_id, id + 1, memory_order_relaxed);
    if (p->head_thread && id + 1 + p->ahead / 2 > atomic_load_explicit(&p->ready_id, memory_order_relaxed)) {
        pthread_mutex_lock(&p->ahead_mu);
        pthread_cond_signal(&p->ahead_cv);
        pthread_mutex_unlock(&p->ahead_mu);
    }
}

static int32_t block_take(kv_pool_t *p)
{
    int32_t id;
    if (p->n_free > 0) {
        id = p->free_ids[--p->n_free];
        note_taken(p, id);
    } else if (p->lru.head >= 0 && p->blk[p->lru.head].warm) {
        /* a warm block nobody used: the tier had it when it was loaded */
        id = p->lru.head;
        lru_remove(p, id);
        pmap_remove(p, id);
        p->blk[id].warm = false;
        p->n_warm--;
        p->st.n_evictions++;
        if (!(p->tier.has && p->tier.has(p->tier.ud, p->blk[id].pub)))
            event_push(p, p->blk[id].pub, false);
    } else if (p->lru.head >= 0) {
        id = p->lru.head;
        lru_remove(p, id);
        map_remove(p, id);
        pmap_remove(p, id);
        p->blk[id].cached = false;
        p->n_cached_total--;
        p->st.n_evictions++;
        /* the K/V are still intact: the tier may keep them */
        bool kept = p->tier.store &&
                    p->tier.store(p->tier.ud, &p->store, id, p->blk[id].pub, p->blk[id].parent_pub,
                                  p->blk_tokens + (size_t)id * (size_t)p->bs) == 0;
        if (kept)
            p->st.n_tier_stored++;
        else
            event_push(p, p->blk[id].pub, false);
        tier_drain_dropped(p);
    } else {
        return -1;
    }
    kv_block_t *b = &p->blk[id];
    assert(b->ref == 0 && !b->cached);
    b->ref = 1;
    p->n_used++;
    return id;
}

static void block_ref(kv_pool_t *p, int32_t id)
{
    kv_block_t *b = &p->blk[id];
    assert(b->cached && !b->warm); /* only cached (full, immutable) blocks are shared */
    if (b->ref == 0) {
        lru_remove(p, id);
        p->n_used++;
    }
    b->ref++;
}

static void block_unref(kv_pool_t *p, int32_t id)
{
    kv_block_t *b = &p->blk[id];
    assert(b->ref > 0);
    if (--b->ref > 0)
        return;
    p->n_used--;
    if (b->cached)
        lru_push_tail(p, id);
    else
        p->free_ids[p->n_free++] = id;
}

/* ---- pool --------------------------------------------------------------- */

size_t kv_pool_block_bytes(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type)
{
    return kv_pool_block_bytes_q(n_layer, kv_dim, block_size, type, 0);
}

size_t kv_pool_block_bytes_q(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type, int32_t qblock)
{
    const size_t rb = kv_type_row_bytes(type, kv_dim, qblock);
    if (n_layer <= 0 || kv_dim <= 0 || block_size <= 0 || rb == 0)
        return 0;
    size_t kv = 2u * (size_t)n_layer * (size_t)block_size * rb;
    size_t meta = sizeof(kv_block_t) + (size_t)block_size * sizeof(int32_t) + 2 * sizeof(int32_t);
    return kv + meta;
}

int32_t kv_pool_blocks_for_budget(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type,
                                  size_t budget_bytes)
{
    return kv_pool_blocks_for_budget_q(n_layer, kv_dim, block_size, type, 0, budget_bytes);
}

int32_t kv_pool_blocks_for_budget_q(int32_t n_layer, int32_t kv_dim, int32_t block_size, kv_type_t type,
                                    int32_t qblock, size_t budget_bytes)
{
    size_t per = kv_pool_block_bytes_q(n_layer, kv_dim, block_size, type, qblock);
    if (per == 0)
        return 0;
    size_t n = budget_bytes / per;
    size_t cap = (size_t)(INT32_MAX / block_size);
    return (int32_t)(n < cap ? n : cap);
}

kv_pool_t *kv_pool_new(int32_t n_layer, int32_t kv_dim, int32_t n_blocks, int32_t block_size, kv_type_t type)
{
    return kv_pool_new_q(n_layer, kv_dim, n_blocks, block_size, type, 0);
}

kv_pool_t *kv_pool_new_q(int32_t n_layer, int32_t kv_dim, int32_t n_blocks, int32_t block_size, kv_type_t type,
                         int32_t qblock)
{
    const size_t esz = kv_type_row_bytes(type, kv_dim, qblock); /* bytes per K vector */
    if (n_layer <= 0 || kv_dim <= 0 || n_blocks <= 0 || block_size <= 0 ||
        n_blocks > INT32_MAX / block_size || esz == 0) {
        log_error("kv_pool: invalid geometry n_layer=%d kv_dim=%d n_blocks=%d block_size=%d type=%d",
                  n_layer, kv_dim, n_blocks, block_size, (int)type);
        return NULL;
    }
    size_t per_layer = (size_t)n_blocks * (size_t)block_size; /* fits: checked above */
    if (esz > SIZE_MAX / per_layer / (size_t)n_layer) {
        log_error("kv_pool: %d layers x %d blocks x %d x %d elements overflow size_t",
                  n_layer, n_blocks, block_size, kv_dim);
        return NULL;
    }
    size_t n_bytes = (size_t)n_layer * per_layer * esz;

    kv_pool_t *p = xcalloc(1, sizeof *p);
    p->n_blocks = n_blocks;
    p->bs = block_size;
    p->store.n_layer = n_layer;
    p->store.n_blocks = n_blocks;
    p->store.block_size = block_size;
    p->store.kv_dim = kv_dim;
    p->store.type = type;
    p->store.qblock = type == KV_TYPE_Q8_0 ? qblock : 0;
    /* on huge pages where allowed (the attention's scattered block reads
     * miss the TLB less), zero (all-zero bits are 0.0 in f32 and f16, and
     * a zero q8_0 scale) and not mapped yet: kv_pool_prefault_step maps
     * it ahead of use while the owner is idle, off the start-up path */
    p->n_bytes = n_bytes;
    p->store.k = xhuge_zalloc(n_bytes);
    p->store.v = xhuge_zalloc(n_bytes);

    p->blk = xcalloc((size_t)n_blocks, sizeof *p->blk);
    p->blk_tokens = xcalloc(per_layer, sizeof(int32_t));
    p->free_ids = xmalloc((size_t)n_blocks * sizeof(int32_t));
    for (int32_t i = 0; i < n_blocks; i++) {
        p->blk[i].lru.prev = p->blk[i].lru.next = p->blk[i].hnext = p->blk[i].pnext = -1;
        p->free_ids[i] = n_blocks - 1 - i; /* block 0 is taken first */
    }
    p->n_free = n_blocks;
    p->lru = IDXLIST_EMPTY;

    size_t n_buckets = 16;
    while (n_buckets < (size_t)n_blocks)
        n_buckets <<= 1;
    p->bucket = xmalloc(n_buckets * sizeof(int32_t));
    p->pbucket = xmalloc(n_buckets * sizeof(int32_t));
    for (size_t i = 0; i < n_buckets; i++)
        p->bucket[i] = p->pbucket[i] = -1;
    p->mask = n_buckets - 1;

    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed)
        seed = (uint64_t)clock_now_us() ^ (uint64_t)(uintptr_t)p;
    p->root_key = splitmix64_next(&seed);
    p->next_serial = 1;
    return p;
}

void kv_pool_free(kv_pool_t **pp)
{
    if (!pp || !*pp)
        return;
    kv_pool_t *p = *pp;
    assert(p->n_seqs == 0 && "kv_pool_free with live sequences");
    if (p->head_thread) {
        pthread_mutex_lock(&p->ahead_mu);
        p->ahead_stop = true;
        pthread_cond_signal(&p->ahead_cv);
        pthread_mutex_unlock(&p->ahead_mu);
        pthread_join(p->head, NULL);
        pthread_mutex_destroy(&p->ahead_mu);
        pthread_cond_destroy(&p->ahead_cv);
    }
    xhuge_zfree(p->store.k, p->n_bytes);
    xhuge_zfree(p->store.v, p->n_bytes);
    free(p->blk);
    free(p->blk_tokens);
    free(p->free_ids);
    free(p->bucket);
    free(p->pbucket);
    free(p->warm_plan);
    free(p->ev);
    free(p);
    *pp = NULL;
}

/* Bytes of one block in one layer region of K (or of V). */
static size_t layer_block_bytes(const kv_pool_t *p)
{
    return p->n_bytes / (size_t)p->store.n_layer / (size_t)p->n_blocks;
}

/* Maps [from, to) of every layer region of K and V; -1 without
 * MADV_POPULATE_WRITE (first use maps them then). */
static int populate_span(kv_pool_t *p, size_t from, size_t to)
{
    const size_t region = p->n_bytes / (size_t)p->store.n_layer; /* one layer's blocks */
    if (to > region)
        to = region;
    if (to <= from)
        return 0;
    for (int32_t l = 0; l < p->store.n_layer; l++)
        if (xhuge_populate((uint8_t *)p->store.k + (size_t)l * region + from, to - from) != 0 ||
            xhuge_populate((uint8_t *)p->store.v + (size_t)l * region + from, to - from) != 0)
            return -1;
    return 0;
}

static void *prefault_head_run(void *arg)
{
    kv_pool_t *p = arg;
    const size_t per_block = layer_block_bytes(p);
    size_t done = p->head_bytes;
    if (populate_span(p, 0, done) != 0)
        goto ended;
    for (;;) {
        int32_t ready = (int32_t)(done / per_block < (size_t)p->n_blocks ? done / per_block : (size_t)p->n_blocks);
        atomic_store_explicit(&p->ready_id, ready, memory_order_relaxed);
        if (ready >= p->n_blocks)
            return NULL;
        pthread_mutex_lock(&p->ahead_mu);
        int32_t want = 0;
        while (!p->ahead_stop &&
               ready >= (want = atomic_load_explicit(&p->hi_id, memory_order_relaxed) + p->ahead))
            pthread_cond_wait(&p->ahead_cv, &p->ahead_mu);
        bool stop = p->ahead_stop;
        pthread_mutex_unlock(&p->ahead_mu);
        if (stop)
            return NULL;
        size_t to = (size_t)(want < p->n_blocks ? want : p->n_blocks) * per_block;
        to = (to + ((size_t)2 << 20) - 1) / ((size_t)2 << 20) * ((size_t)2 << 20); /* whole huge pages */
        if (populate_span(p, done, to) != 0)
            goto ended;
        done = to;
    }
ended:
    /* no MADV_POPULATE_WRITE (first use maps the pages): block_take stops
     * waking a thread that is gone */
    atomic_store_explicit(&p->ready_id, p->n_blocks, memory_order_relaxed);
    return NULL;
}

void kv_pool_prefault_head(kv_pool_t *p, size_t bytes)
{
    if (!p || p->head_thread || bytes == 0)
        return;
    p->head_bytes = bytes;
    const size_t per_block = layer_block_bytes(p);
    /* lead: two huge pages of every layer region, at least 64 blocks */
    size_t lead = ((size_t)4 << 20) / (per_block ? per_block : 1);
    p->ahead = (int32_t)(lead < 64 ? 64 : lead > (size_t)p->n_blocks ? (size_t)p->n_blocks : lead);
    pthread_mutex_init(&p->ahead_mu, NULL);
    pthread_cond_init(&p->ahead_cv, NULL);
    p->head_thread = pthread_create(&p->head, NULL, prefault_head_run, p) == 0;
    if (!p->head_thread) {
        pthread_mutex_destroy(&p->ahead_mu);
        pthread_cond_destroy(&p->ahead_cv);
    }
}

bool kv_pool_prefault_step(kv_pool_t *p, size_t max_bytes)
{
    const size_t total = 2 * p->n_bytes;
    if (p->prefaulted >= total)
        return false;
    size_t at = p->prefaulted, n = total - at < max_bytes ? total - at : max_bytes;
    if (at < p->n_bytes && at + n > p->n_bytes)
        n = p->n_bytes - at; /* k's end: v is another mapping */
    uint8_t *base = at < p->n_bytes ? (uint8_t *)p->store.k + at : (uint8_t *)p->store.v + (at - p->n_bytes);
    if (xhuge_populate(base, n) != 0) {
        /* a kernel before 5.14: write each page's first byte back (only
         * the owner uses the pool, and it is here) */
        for (size_t o = 0; o < n; o += 4096) {
            volatile uint8_t *b = base + o;
            *b = *b;
        }
    }
    p->prefaulted = at + n;
    return p->prefaulted < total;
}

kv_store_t *kv_pool_store(kv_pool_t *p) { return &p->store; }
int32_t kv_pool_block_size(const kv_pool_t *p) { return p->bs; }
int32_t kv_pool_n_available(const kv_pool_t *p) { return p->n_free + p->lru.n; }

void kv_pool_stats(const kv_pool_t *p, kv_pool_stats_t *out)
{
    *out = p->st;
    out->n_blocks = p->n_blocks;
    out->n_used = p->n_used;
    out->n_cached = p->lru.n;
    out->n_free = p->n_free;
    out->n_cached_total = p->n_cached_total;
    out->n_seqs = p->n_seqs;
    out->block_size = p->bs;
    out->n_warm = p->n_warm;
    out->n_warm_planned = p->n_plan - p->i_plan;
}

void kv_pool_test_set_hash(kv_pool_t *p, kv_pool_hash_fn fn)
{
    assert(p->n_cached_total == 0);
    p->hash = fn;
}

/* ---- sequences ---------------------------------------------------------- */

/* Sequences are bounded by the context (< 2^20 tokens), far from int32 limits. */
static void seq_grow_blocks(kv_seq_t *s, int32_t need)
{
    if (need <= s->cap_blocks)
        return;
    assert(need <= INT32_MAX / 2);
    /* three parallel arrays, one capacity */
    size_t cap = vec_grow_cap((size_t)s->cap_blocks, (size_t)need, 8, sizeof *s->keys);
    s->blocks = xrealloc(s->blocks, cap * sizeof *s->blocks);
    s->keys = xrealloc(s->keys, cap * sizeof *s->keys);
    s->pubs = xrealloc(s->pubs, cap * sizeof *s->pubs);
    s->cap_blocks = (int32_t)cap;
}

static void seq_grow_tokens(kv_seq_t *s, int32_t need)
{
    assert(need <= INT32_MAX / 2);
    vec_reserve(s->tokens, s->cap_tokens, need);
}

kv_seq_t *kv_seq_new(kv_pool_t *p)
{
    kv_seq_t *s = xcalloc(1, sizeof *s);
    s->pool = p;
    s->chain_block = -1;
    s->root_key = p->root_key;
    s->root_pub = PREFIX_KEY_PUBLIC_ROOT;
    s->next = p->seqs;
    if (p->seqs)
        p->seqs->prev = s;
    p->seqs = s;
    p->n_seqs++;
    return s;
}

int kv_seq_set_partition(kv_seq_t *s, uint64_t partition)
{
    if (!s || s->n_blocks != 0 || s->n_tokens != 0)
        return KV_POOL_EINVAL;
    s->partition = partition;
    /* mix is a bijection with mix(0) = 0: partition 0 keeps the pool's root,
     * and distinct partitions get distinct roots, so block 0 (compared by
     * parent key in map_find) never matches across partitions */
    s->root_key = s->pool->root_key ^ splitmix64_mix(partition);
    s->root_pub = prefix_key_root(partition);
    return KV_POOL_OK;
}

uint64_t kv_seq_partition(const kv_seq_t *s) { return s->partition; }

void kv_seq_release(kv_seq_t *s)
{
    for (int32_t i = s->n_blocks - 1; i >= s->n_dropped; i--)
        block_unref(s->pool, s->blocks[i]);
    s->n_blocks = 0;
    s->n_dropped = 0;
    s->n_tokens = 0;
    s->n_committed = 0;
    s->chain_block = -1;
    s->chain_serial = 0;
}

void kv_seq_free(kv_seq_t **sp)
{
    if (!sp || !*sp)
        return;
    kv_seq_t *s = *sp;
    kv_pool_t *p = s->pool;
    kv_seq_release(s);
    if (s->prev)
        s->prev->next = s->next;
    else
        p->seqs = s->next;
    if (s->next)
        s->next->prev = s->prev;
    p->n_seqs--;
    free(s->blocks);
    free(s->keys);
    free(s->pubs);
    free(s->tokens);
    free(s);
    *sp = NULL;
}

int kv_seq_reserve(kv_seq_t *s, int32_t n)
{
    kv_pool_t *p = s->pool;
    if (n < 0 || (int64_t)s->n_tokens + n > INT32_MAX)
        return KV_POOL_EINVAL;
    int64_t need = ((int64_t)s->n_tokens + n + p->bs - 1) / p->bs;
    int64_t add = need - s->n_blocks;
    if (add <= 0)
        return KV_POOL_OK;
    if (add > (int64_t)p->n_free + p->lru.n)
        return KV_POOL_NO_CAPACITY;
    seq_grow_blocks(s, (int32_t)need);
    for (int64_t i = 0; i < add; i++) {
        int32_t id = block_take(p);
        assert(id >= 0);
        s->blocks[s->n_blocks++] = id;
    }
    return KV_POOL_OK;
}

int kv_seq_append(kv_seq_t *s, const int32_t *tokens, int32_t n)
{
    kv_pool_t *p = s->pool;
    if (n < 0 || (n > 0 && !tokens) || (int64_t)s->n_tokens + n > (int64_t)s->n_blocks * p->bs)
        return KV_POOL_EINVAL;
    if (n == 0)
        return KV_POOL_OK;
    /* The invariant that makes sharing safe without copy-on-write: positions
     * are only written in blocks this sequence owns alone and that are not
     * (yet) in the prefix cache. */
    for (int32_t b = s->n_tokens / p->bs; b <= (s->n_tokens + n - 1) / p->bs; b++) {
        const kv_block_t *blk = &p->blk[s->blocks[b]];
        assert(blk->ref == 1 && !blk->cached);
        (void)blk;
    }
    seq_grow_tokens(s, s->n_tokens + n);
    memcpy(s->tokens + s->n_tokens, tokens, (size_t)n * sizeof(int32_t));
    s->n_tokens += n;
    return KV_POOL_OK;
}

int32_t kv_seq_drop_before(kv_seq_t *s, int32_t first)
{
    const int32_t bs = s->pool->bs;
    if (first < 0)
        first = 0;
    /* whole blocks before `first`, committed ones only: a block not yet
     * committed is still being written (or awaits its commit) */
    int32_t upto = first / bs;
    if (upto > s->n_committed)
        upto = s->n_committed;
    int32_t n = 0;
    /* last logical block first, as kv_seq_release: a released chain is then
     * evicted tail first */
    for (int32_t i = upto - 1; i >= s->n_dropped; i--, n++) {
        block_unref(s->pool, s->blocks[i]);
        s->blocks[i] = KV_SEQ_NO_BLOCK;
    }
    if (upto > s->n_dropped)
        s->n_dropped = upto;
    return n;
}

int32_t kv_seq_n_live(const kv_seq_t *s) { return s->n_blocks - s->n_dropped; }
int32_t kv_seq_n_dropped(const kv_seq_t *s) { return s->n_dropped; }
int32_t kv_seq_n_tokens(const kv_seq_t *s) { return s->n_tokens; }
int32_t kv_seq_n_blocks(const kv_seq_t *s) { return s->n_blocks; }
int32_t kv_seq_capacity(const kv_seq_t *s) { return s->n_blocks * s->pool->bs; }
const int32_t *kv_seq_block_table(const kv_seq_t *s) { return s->blocks; }
const int32_t *kv_seq_tokens(const kv_seq_t *s) { return s->tokens; }

/* ---- prefix cache ------------------------------------------------------- */

/* Blocks loaded from the tier in one batch of a prefix lookup. */
#define KV_POOL_LOAD_RUN 32

/* Registers block id (ref 1, holding tokens t's K/V: loaded from the tier
 * or adopted warm) in the prefix cache under the chain *parent_* and
 * attaches it to s as logical block i; the chain moves to it. */
static void seq_attach_loaded(kv_pool_t *p, kv_seq_t *s, int32_t i, int32_t id, const int32_t *t, uint64_t pub,
                              uint64_t parent_pub, uint64_t *parent_key, int32_t *parent_block,
                              uint64_t *parent_serial)
{
    uint64_t key = pool_hash(p, *parent_key, t);
    kv_block_t *b = &p->blk[id];
    assert(b->ref == 1 && !b->cached && !b->warm);
    b->cached = true;
    b->key = key;
    b->parent_key = *parent_key;
    b->parent_block = *parent_block;
    b->parent_serial = *parent_serial;
    b->serial = p->next_serial++;
    b->pub = pub;
    b->parent_pub = parent_pub;
    event_push(p, pub, true);
    memmove(p->blk_tokens + (size_t)id * (size_t)p->bs, t, (size_t)p->bs * sizeof(int32_t));
    map_insert(p, id);
    pmap_insert(p, id);
    p->n_cached_total++;
    seq_grow_blocks(s, i + 1);
    s->blocks[i] = id;
    s->keys[i] = key;
    s->pubs[i] = pub;
    s->n_blocks = i + 1;
    *parent_key = key;
    *parent_block = id;
    *parent_serial = b->serial;
}

void kv_pool_warm_begin(kv_pool_t *p, int32_t max_blocks)
{
    free(p->warm_plan);
    p->warm_plan = NULL;
    p->n_plan = p->i_plan = 0;
    if (max_blocks <= 0 || !p->tier.recent_keys || !p->tier.load_batch)
        return;
    p->warm_plan = xmalloc((size_t)max_blocks * sizeof *p->warm_plan);
    p->n_plan = p->tier.recent_keys(p->tier.ud, p->warm_plan, max_blocks);
}

bool kv_pool_warm_step(kv_pool_t *p, int32_t n)
{
    if (n > KV_POOL_LOAD_RUN)
        n = KV_POOL_LOAD_RUN;
    kv_pool_tier_req_t req[KV_POOL_LOAD_RUN];
    int32_t n_req = 0;
    while (n_req < n && p->i_plan < p->n_plan) {
        if (p->n_free == 0) { /* never evict for a guess: done */
            p->i_plan = p->n_plan;
            break;
        }
        uint64_t pub = p->warm_plan[p->i_plan++];
        if (ram_holds(p, pub))
            continue;
        int32_t id = p->free_ids[--p->n_free];
        note_taken(p, id);
        req[n_req++] = (kv_pool_tier_req_t){
            .block = id, .pub = pub, .tokens = p->blk_tokens + (size_t)id * (size_t)p->bs};
    }
    if (n_req > 0)
        p->tier.load_batch(p->tier.ud, &p->store, req, n_req, true);
    for (int32_t k = 0; k < n_req; k++) {
        int32_t id = req[k].block;
        kv_block_t *b = &p->blk[id];
        if (req[k].rc != 0 || ram_holds(p, req[k].pub)) {
            p->free_ids[p->n_free++] = id;
            continue;
        }
        b->warm = true;
        b->pub = req[k].pub;
        b->parent_pub = req[k].parent_pub;
        pmap_insert(p, id);
        /* older than anything a request released: evicted first; the plan
         * goes from the most recent key, so the head stays the oldest */
        idxlist_push_head(&p->lru, &p->blk[0].lru, sizeof *p->blk, id);
        p->n_warm++;
        p->st.n_warm_loaded++;
    }
    if (n_req > 0)
        tier_drain_dropped(p);
    if (p->i_plan >= p->n_plan && p->warm_plan) {
        free(p->warm_plan);
        p->warm_plan = NULL;
        p->n_plan = p->i_plan = 0;
    }
    return p->i_plan < p->n_plan;
}

int32_t kv_pool_match_prefix(kv_pool_t *p, const int32_t *tokens, int32_t n, kv_seq_t *s)
{
    if (!s || s->pool != p || s->n_blocks != 0 || s->n_tokens != 0 || n < 0 || (n > 0 && !tokens))
        return KV_POOL_EINVAL;
    p->st.n_prefix_queries++;
    p->st.n_prefix_query_tokens += (uint64_t)n;
    int32_t max_blocks = n > 0 ? (n - 1) / p->bs : 0;
    uint64_t parent_key = s->root_key;
    int32_t parent_block = -1;
    uint64_t parent_serial = 0;
    int32_t i = 0;
    for (; i < max_blocks; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)p->bs;
        uint64_t key = pool_hash(p, parent_key, t);
        int32_t id = map_find(p, key, parent_key, parent_block, parent_serial, t);
        if (id < 0)
            break;
        block_ref(p, id);
        seq_grow_blocks(s, i + 1);
        s->blocks[i] = id;
        s->keys[i] = key;
        s->pubs[i] = p->blk[id].pub;
        s->n_blocks = i + 1;
        parent_key = key;
        parent_block = id;
        parent_serial = p->blk[id].serial;
    }
    const int32_t n_ram = i;
    /* past the RAM chain: warm blocks (loaded at start-up), and blocks of
     * the lower tier, each loaded into a new block; both registered as if
     * this sequence had computed them */
    int32_t n_warm = 0, n_loaded = 0;
    const bool tier = p->tier.load || p->tier.load_batch;
    kv_pool_tier_req_t req[KV_POOL_LOAD_RUN];
    uint64_t parent_pubs[KV_POOL_LOAD_RUN];
    while (i < max_blocks) {
        const int32_t *t = tokens + (size_t)i * (size_t)p->bs;
        const uint64_t parent_pub = i > 0 ? s->pubs[i - 1] : s->root_pub;
        const uint64_t pub = prefix_key_next(parent_pub, t, p->bs);
        int32_t id = warm_find(p, pub, parent_pub, t);
        if (id >= 0) {
            kv_block_t *b = &p->blk[id];
            lru_remove(p, id);
            pmap_remove(p, id);
            b->warm = false;
            p->n_warm--;
            b->ref = 1;
            p->n_used++;
            seq_attach_loaded(p, s, i, id, t, pub, parent_pub, &parent_key, &parent_block, &parent_serial);
            n_warm++;
            i++;
            continue;
        }
        if (!tier)
            break;
        /* a run of the next blocks the tier has (none warm), loaded at
         * once; the first is tried even when the tier does not know it (a
         * replica sharing the folder may have written it) */
        int32_t n_run = 0;
        for (uint64_t pp = parent_pub, pk = pub; i + n_run < max_blocks && n_run < KV_POOL_LOAD_RUN;) {
            const int32_t *tk = tokens + (size_t)(i + n_run) * (size_t)p->bs;
            if (n_run > 0) {
                pk = prefix_key_next(pp, tk, p->bs);
                if (!p->tier.load_batch || !p->tier.has || !p->tier.has(p->tier.ud, pk) ||
                    warm_find(p, pk, pp, tk) >= 0)
                    break;
            }
            int32_t nid = block_take(p);
            if (nid < 0)
                break;
            req[n_run] = (kv_pool_tier_req_t){.block = nid, .pub = pk, .parent_pub = pp, .tokens = (int32_t *)tk};
            parent_pubs[n_run] = pp;
            n_run++;
            pp = pk;
        }
        if (n_run == 0)
            break;
        if (p->tier.load_batch) {
            p->tier.load_batch(p->tier.ud, &p->store, req, n_run, false);
        } else {
            for (int32_t k = 0; k < n_run; k++)
                req[k].rc = p->tier.load(p->tier.ud, &p->store, req[k].block, req[k].pub, req[k].parent_pub,
                                         req[k].tokens);
        }
        int32_t k = 0;
        for (; k < n_run && req[k].rc == 0; k++, i++)
            seq_attach_loaded(p, s, i, req[k].block, req[k].tokens, req[k].pub, parent_pubs[k], &parent_key,
                              &parent_block, &parent_serial);
        n_loaded += k;
        bool whole = k == n_run;
        for (; k < n_run; k++) { /* after a miss or a rejected file: back to the free stack */
            kv_block_t *b = &p->blk[req[k].block];
            b->ref = 0;
            p->n_used--;
            p->free_ids[p->n_free++] = req[k].block;
        }
        if (!whole)
            break;
    }
    tier_drain_dropped(p);
    p->st.n_tier_hit_tokens += (uint64_t)n_loaded * (uint64_t)p->bs;
    p->st.n_warm_hit_tokens += (uint64_t)n_warm * (uint64_t)p->bs;
    int32_t covered = i * p->bs;
    seq_grow_tokens(s, covered);
    if (covered > 0)
        memcpy(s->tokens, tokens, (size_t)covered * sizeof(int32_t));
    s->n_tokens = covered;
    s->n_committed = i;
    s->chain_block = parent_block;
    s->chain_serial = parent_serial;
    p->st.n_prefix_hit_tokens += (uint64_t)(n_ram + n_warm) * (uint64_t)p->bs;
    p->st.n_prefix_hit_blocks += (uint64_t)(n_ram + n_warm);
    return covered;
}

int32_t kv_pool_commit_full_blocks(kv_pool_t *p, kv_seq_t *s)
{
    if (!s || s->pool != p)
        return KV_POOL_EINVAL;
    int32_t n_full = s->n_tokens / p->bs;
    int32_t n_new = 0;
    for (int32_t i = s->n_committed; i < n_full; i++) {
        int32_t id = s->blocks[i];
        kv_block_t *b = &p->blk[id];
        assert(b->ref == 1 && !b->cached); /* written by this sequence alone */
        const int32_t *t = s->tokens + (size_t)i * (size_t)p->bs;
        uint64_t parent_key = i > 0 ? s->keys[i - 1] : s->root_key;
        uint64_t key = pool_hash(p, parent_key, t);
        s->keys[i] = key;
        uint64_t pub = prefix_key_next(i > 0 ? s->pubs[i - 1] : s->root_pub, t, p->bs);
        s->pubs[i] = pub;
        int32_t dup = map_find(p, key, parent_key, s->chain_block, s->chain_serial, t);
        if (dup >= 0) {
            /* Same content already cached (computed concurrently by another
             * sequence): keep ours private, chain later blocks to the cached one
             * so they stay reachable from the root. */
            s->chain_block = dup;
            s->chain_serial = p->blk[dup].serial;
            continue;
        }
        b->cached = true;
        b->key = key;
        b->parent_key = parent_key;
        b->parent_block = s->chain_block;
        b->parent_serial = s->chain_serial;
        b->serial = p->next_serial++;
        b->pub = pub;
        b->parent_pub = i > 0 ? s->pubs[i - 1] : s->root_pub;
        event_push(p, pub, true);
        memcpy(p->blk_tokens + (size_t)id * (size_t)p->bs, t, (size_t)p->bs * sizeof(int32_t));
        map_insert(p, id);
        pmap_insert(p, id);
        p->n_cached_total++;
        p->st.n_registered++;
        s->chain_block = id;
        s->chain_serial = b->serial;
        n_new++;
        /* write-through: the tier gets every block when it is computed, so
         * a crash (kill -9) loses nothing that was committed */
        if (p->tier.store)
            p->tier.store(p->tier.ud, &p->store, id, pub, b->parent_pub, t);
    }
    if (p->tier.store && n_new)
        tier_drain_dropped(p);
    s->n_committed = n_full > s->n_committed ? n_full : s->n_committed;
    return n_new;
}

/* ---- consistency check -------------------------------------------------- */

#define CHECK(cond, ...)                  \
    do {                                  \
        if (!(cond)) {                    \
            log_error("kv_pool_check: " __VA_ARGS__); \
            goto fail;                    \
        }                                 \
    } while (0)

int kv_pool_check(const kv_pool_t *p)
{
    int32_t nb = p->n_blocks;
    int32_t *refs = xcalloc((size_t)nb, sizeof(int32_t));
    uint8_t *seen = xcalloc((size_t)nb, 1); /* bit 1 free stack, 2 LRU, 4 map, 8 pub map */
    int rc = -1;

    /* references from live sequences */
    int32_t n_seqs = 0;
    for (const kv_seq_t *s = p->seqs; s; s = s->next) {
        n_seqs++;
        CHECK(s->pool == p, "sequence of another pool");
        CHECK(s->n_tokens >= 0 && s->n_tokens <= s->n_blocks * p->bs,
              "seq has %d tokens in %d blocks", s->n_tokens, s->n_blocks);
        CHECK(s->n_committed >= 0 && s->n_committed <= s->n_tokens / p->bs,
              "seq committed %d blocks with %d tokens", s->n_committed, s->n_tokens);
        CHECK(s->n_dropped >= 0 && s->n_dropped <= s->n_committed, "seq dropped %d blocks, committed %d",
              s->n_dropped, s->n_committed);
        for (int32_t i = 0; i < s->n_dropped; i++)
            CHECK(s->blocks[i] == KV_SEQ_NO_BLOCK, "seq's dropped logical block %d holds %d", i, s->blocks[i]);
        for (int32_t i = s->n_dropped; i < s->n_blocks; i++) {
            int32_t id = s->blocks[i];
            CHECK(id >= 0 && id < nb, "seq block id %d out of range", id);
            for (int32_t j = s->n_dropped; j < i; j++)
                CHECK(s->blocks[j] != id, "seq references block %d twice", id);
            refs[id]++;
            const kv_block_t *b = &p->blk[id];
            if (b->cached) {
                CHECK(i < s->n_committed, "seq's uncommitted block %d (logical %d) is cached", id, i);
                CHECK(memcmp(p->blk_tokens + (size_t)id * (size_t)p->bs,
                             s->tokens + (size_t)i * (size_t)p->bs, (size_t)p->bs * sizeof(int32_t)) == 0,
                      "cached block %d does not hold the seq's tokens of logical block %d", id, i);
                CHECK(s->keys[i] == b->key, "seq key of logical block %d differs from block %d's", i, id);
            }
        }
    }
    CHECK(n_seqs == p->n_seqs, "seq list has %d, counter %d", n_seqs, p->n_seqs);
    /* blocks being written (at or past the first non-full one) are exclusive */
    for (const kv_seq_t *s = p->seqs; s; s = s->next)
        for (int32_t i = s->n_committed; i < s->n_blocks; i++)
            CHECK(refs[s->blocks[i]] == 1 && !p->blk[s->blocks[i]].cached,
                  "uncommitted block %d shared or cached", s->blocks[i]);

    /* free stack */
    CHECK(p->n_free >= 0 && p->n_free <= nb, "n_free %d", p->n_free);
    for (int32_t i = 0; i < p->n_free; i++) {
        int32_t id = p->free_ids[i];
        CHECK(id >= 0 && id < nb && !(seen[id] & 1), "free stack entry %d bad or repeated", id);
        seen[id] |= 1;
    }
    /* LRU list, both directions */
    int32_t n_lru = 0, prev = -1;
    for (int32_t id = p->lru.head; id >= 0; id = p->blk[id].lru.next) {
        CHECK(id < nb && !(seen[id] & 2), "LRU entry %d bad or cycle", id);
        CHECK(p->blk[id].lru.prev == prev, "LRU back link of %d", id);
        seen[id] |= 2;
        prev = id;
        n_lru++;
    }
    CHECK(prev == p->lru.tail, "LRU tail %d, walked to %d", p->lru.tail, prev);
    CHECK(n_lru == p->lru.n, "LRU has %d, counter %d", n_lru, p->lru.n);
    /* hash map */
    int32_t n_map = 0;
    for (uint64_t h = 0; h <= p->mask; h++) {
        for (int32_t id = p->bucket[h]; id >= 0; id = p->blk[id].hnext) {
            CHECK(id < nb && !(seen[id] & 4), "map entry %d bad or repeated", id);
            CHECK((p->blk[id].key & p->mask) == h, "block %d in wrong bucket", id);
            seen[id] |= 4;
            n_map++;
        }
    }
    CHECK(n_map == p->n_cached_total, "map has %d, counter %d", n_map, p->n_cached_total);
    /* public-key map: exactly the cached and warm blocks */
    int32_t n_pmap = 0, n_warm = 0;
    for (uint64_t h = 0; h <= p->mask; h++) {
        for (int32_t id = p->pbucket[h]; id >= 0; id = p->blk[id].pnext) {
            CHECK(id < nb && !(seen[id] & 8), "pub map entry %d bad or repeated", id);
            CHECK((splitmix64_mix(p->blk[id].pub) & p->mask) == h, "block %d in wrong pub bucket", id);
            CHECK(p->blk[id].cached || p->blk[id].warm, "pub map holds block %d, neither cached nor warm", id);
            seen[id] |= 8;
            n_pmap++;
        }
    }

    /* per block: exactly one state, refs agree */
    int32_t n_used = 0;
    for (int32_t id = 0; id < nb; id++) {
        const kv_block_t *b = &p->blk[id];
        CHECK(b->ref == refs[id], "block %d ref %d but %d sequences reference it", id, b->ref, refs[id]);
        CHECK(b->cached == ((seen[id] & 4) != 0), "block %d cached flag %d vs map", id, b->cached);
        CHECK((b->cached || b->warm) == ((seen[id] & 8) != 0), "block %d cached/warm vs pub map", id);
        if (b->warm) {
            n_warm++;
            CHECK(b->ref == 0 && !b->cached && (seen[id] & 3) == 2, "warm block %d not (only) on LRU, or used", id);
        } else if (b->ref > 0) {
            n_used++;
            CHECK(!(seen[id] & 3), "used block %d on free stack or LRU", id);
        } else if (b->cached) {
            CHECK((seen[id] & 3) == 2, "cached block %d not (only) on LRU", id);
        } else {
            CHECK((seen[id] & 3) == 1, "free block %d not (only) on free stack", id);
        }
    }
    CHECK(n_used == p->n_used, "used %d, counter %d", n_used, p->n_used);
    CHECK(n_warm == p->n_warm && n_pmap == p->n_cached_total + n_warm, "warm %d (counter %d), pub map %d",
          n_warm, p->n_warm, n_pmap);
    CHECK(p->n_free + p->lru.n + p->n_used == nb, "free %d + cached %d + used %d != %d",
          p->n_free, p->lru.n, p->n_used, nb);
    rc = 0;
fail:
    free(refs);
    free(seen);
    return rc;
}
