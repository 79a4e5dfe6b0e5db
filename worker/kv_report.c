/* kv_report.c — KV messages from the pool's event log (see kv_report.h). */
#include "worker/kv_report.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "proto/msg.h"

struct kv_report {
    kv_pool_t *pool;              /* borrowed */
    uint64_t epoch;               /* worker_link_registrations at the last full set */
    bool need_full;               /* a send failed: resend everything */
    kv_pool_event_t *ev;          /* (PROTO_MAX_KV_KEYS) events of one batch */
    uint32_t *order;              /* (PROTO_MAX_KV_KEYS) event indices, sorted by key */
    uint64_t *add, *del;          /* (PROTO_MAX_KV_KEYS each) net change of one batch */
    uint64_t *all;                /* (n_all) full set */
    int32_t n_blocks, n_all;
    uint64_t n_msgs, n_keys, n_full; /* counters */
};

kv_report_t *kv_report_new(kv_pool_t *pool)
{
    kv_report_t *r = xcalloc(1, sizeof *r);
    kv_pool_stats_t st;
    kv_pool_stats(pool, &st);
    r->pool = pool;
    r->n_blocks = st.n_blocks;
    r->ev = xmalloc(PROTO_MAX_KV_KEYS * sizeof *r->ev);
    r->order = xmalloc(PROTO_MAX_KV_KEYS * sizeof *r->order);
    r->add = xmalloc(PROTO_MAX_KV_KEYS * sizeof *r->add);
    r->del = xmalloc(PROTO_MAX_KV_KEYS * sizeof *r->del);
    r->all = xmalloc(((size_t)st.n_blocks + 1) * sizeof *r->all);
    r->n_all = st.n_blocks;
    /* a step registers or evicts at most a few blocks per sequence; 4 pools'
     * worth of changes between two flushes means the reader is far behind */
    int64_t cap = 4 * (int64_t)st.n_blocks + 1024;
    kv_pool_events_enable(pool, cap > (1 << 24) ? (1 << 24) : (int32_t)cap);
    return r;
}

void kv_report_free(kv_report_t **rp)
{
    if (!rp || !*rp)
        return;
    kv_report_t *r = *rp;
    free(r->ev);
    free(r->order);
    free(r->add);
    free(r->del);
    free(r->all);
    free(r);
    *rp = NULL;
}

static int send_kv(kv_report_t *r, worker_link_t *link, bool reset, uint64_t *add, uint32_t n_add,
                   uint64_t *del, uint32_t n_del)
{
    proto_msg_t m = {.type = PROTO_KV,
                     .kv = {.reset = reset, .add = add, .n_add = n_add, .del = del, .n_del = n_del}};
    if (worker_link_send(link, &m) != 0)
        return -1;
    r->n_msgs++;
    r->n_keys += n_add + n_del;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int send_full(kv_report_t *r, worker_link_t *link)
{
    /* both tiers: RAM's cached blocks and the disk tier's (kv_pool_set_tier) */
    int32_t want = kv_pool_n_held_keys(r->pool);
    if (want > r->n_all) {
        r->n_all = want;
        r->all = xrealloc(r->all, ((size_t)want + 1) * sizeof *r->all);
    }
    int32_t n = kv_pool_held_keys(r->pool, r->all, r->n_all);
    if (n > 1) {
        /* a block in RAM and on disk (write-through) is listed by both: once */
        qsort(r->all, (size_t)n, sizeof *r->all, cmp_u64);
        int32_t m = 1;
        for (int32_t i = 1; i < n; i++)
            if (r->all[i] != r->all[m - 1])
                r->all[m++] = r->all[i];
        n = m;
    }
    r->n_full++;
    int32_t i = 0;
    do {
        uint32_t k = (uint32_t)(n - i < (int32_t)PROTO_MAX_KV_KEYS ? n - i : (int32_t)PROTO_MAX_KV_KEYS);
        if (send_kv(r, link, i == 0, r->all + i, k, NULL, 0) < 0)
            return -1;
        i += (int32_t)k;
    } while (i < n);
    return 0;
}

static kv_report_t *sort_ctx; /* qsort has no context argument; single-threaded */

static int by_key_then_order(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint64_t ka = sort_ctx->ev[i].key, kb = sort_ctx->ev[j].key;
    if (ka != kb)
        return ka < kb ? -1 : 1;
    return i < j ? -1 : i > j;
}

void kv_report_flush(kv_report_t *r, worker_link_t *link)
{
    if (!worker_link_registered(link))
        return;
    uint64_t epoch = worker_link_registrations(link);
    bool full = r->need_full || epoch != r->epoch;
    for (;;) {
        bool overflow = false;
        int32_t n = kv_pool_events_take(r->pool, r->ev, PROTO_MAX_KV_KEYS, &overflow);
        full = full || overflow;
        if (n == 0 && !overflow)
            break;
        if (full || n == 0)
            continue; /* drain; the full set covers it */
        /* net change per key: the last event of each key wins */
        for (int32_t i = 0; i < n; i++)
            r->order[i] = (uint32_t)i;
        sort_ctx = r;
        qsort(r->order, (size_t)n, sizeof *r->order, by_key_then_order);
        uint32_t n_add = 0, n_del = 0;
        for (int32_t i = 0; i < n; i++) {
            if (i + 1 < n && r->ev[r->order[i + 1]].key == r->ev[r->order[i]].key)
                continue;
            const kv_pool_event_t *e = &r->ev[r->order[i]];
            if (e->added)
                r->add[n_add++] = e->key;
            else
                r->del[n_del++] = e->key;
        }
        if (send_kv(r, link, false, r->add, n_add, r->del, n_del) < 0) {
            full = true; /* this change is lost: resync */
        }
    }
    if (full) {
        r->need_full = send_full(r, link) < 0;
        r->epoch = epoch;
        if (r->need_full)
            log_debug("KV full set not sent; retrying after the next step");
    }
}

void kv_report_counts(const kv_report_t *r, uint64_t *n_msgs, uint64_t *n_keys, uint64_t *n_full)
{
    *n_msgs = r->n_msgs;
    *n_keys = r->n_keys;
    *n_full = r->n_full;
}
