/* lora_table.c — the gateway's LoRA adapters by name and by llama.cpp id
 * (gateway/lora_table.h). */
#include "gateway/lora_table.h"

#include <assert.h>
#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/prefix_key.h"
#include "common/xalloc.h"
#include "proto/msg.h"

_Static_assert(REQUEST_MAX_LORA == PROTO_MAX_LORA, "a request's adapters fit one SUBMIT's lora");

lora_table_t *lora_table_new(void)
{
    lora_table_t *t = xcalloc(1, sizeof *t);
    t->e = xcalloc(LORA_TABLE_MAX, sizeof *t->e);
    return t;
}

void lora_table_free(lora_table_t **tp)
{
    lora_table_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    size_t n = atomic_load(&t->n);
    for (size_t i = 0; i < n; i++) {
        free(t->e[i].name);
        free(t->e[i].base);
    }
    free(t->e);
    free(t);
    *tp = NULL;
}

long lora_table_append(lora_table_t *t, const char *name, const char *base, double scale,
                       enum lora_entry_state state)
{
    size_t n = atomic_load(&t->n);
    if (n >= LORA_TABLE_MAX)
        return -1;
    lora_entry_t *e = &t->e[n];
    e->name = xstrdup(name);
    e->base = xstrdup(base);
    e->scale = scale;
    atomic_init(&e->hash, 0);
    atomic_init(&e->state, (int)state);
    atomic_store(&t->n, n + 1); /* published: readers see a filled entry */
    return (long)n;
}

void lora_table_add(lora_table_t *t, const char *name, const char *base, double scale)
{
    long i = lora_table_append(t, name, base, scale, LORA_ENTRY_LIVE);
    assert(i >= 0); /* the configuration holds far fewer */
    (void)i;
}

/* The entry called name in one of the states of mask (1 << state). */
static lora_entry_t *find_in(const lora_table_t *t, const char *name, int mask)
{
    size_t n = t ? atomic_load(&t->n) : 0;
    for (size_t i = 0; name && i < n; i++)
        if ((mask & (1 << atomic_load(&t->e[i].state))) && !strcmp(t->e[i].name, name))
            return &t->e[i];
    return NULL;
}

const lora_entry_t *lora_table_find(const lora_table_t *t, const char *name)
{
    return find_in(t, name, 1 << LORA_ENTRY_LIVE);
}

lora_entry_t *lora_table_taken(const lora_table_t *t, const char *name)
{
    return find_in(t, name, (1 << LORA_ENTRY_LIVE) | (1 << LORA_ENTRY_LOADING));
}

size_t lora_table_count(const lora_table_t *t, const char *base)
{
    size_t n = atomic_load(&t->n), k = 0;
    for (size_t i = 0; i < n; i++)
        k += atomic_load(&t->e[i].state) != LORA_ENTRY_GONE && !strcmp(t->e[i].base, base);
    return k;
}

/* Appends one adapter to r's list; -1 with a 400 when it is there already. */
static int adapter_push(request_t *r, const lora_entry_t *l, double scale, oai_error_t *err)
{
    for (size_t i = 0; i < r->n_adapters; i++)
        if (!strcmp(r->adapters[i].name, l->name)) {
            oai_error_set(err, 400, "lora", "Adapter '%s' is selected twice.", l->name);
            return -1;
        }
    r->adapters[r->n_adapters++] = (request_adapter_t){.name = xstrdup(l->name), .scale = scale};
    return 0;
}

int lora_table_resolve(const lora_table_t *t, request_t *r, oai_error_t *err)
{
    const lora_entry_t *named = lora_table_find(t, r->model);
    if (!named && r->n_lora_ids == 0)
        return 0; /* no adapter: the request is untouched */
    const char *base = named ? named->base : r->model;
    if (named && adapter_push(r, named, named->scale, err) < 0)
        goto fail;
    for (size_t i = 0; i < r->n_lora_ids; i++) {
        const request_lora_id_t *li = &r->lora_ids[i];
        size_t n = t ? atomic_load(&t->n) : 0;
        if (li->id < 0 || (size_t)li->id >= n || atomic_load(&t->e[li->id].state) != LORA_ENTRY_LIVE) {
            oai_error_set(err, 400, "lora", "Unknown adapter id %lld: see GET /lora-adapters.",
                          (long long)li->id);
            goto fail;
        }
        const lora_entry_t *l = &t->e[li->id];
        if (strcmp(l->base, base) != 0) {
            oai_error_set(err, 400, "lora", "Adapter %lld ('%s') belongs to model '%s', not '%s'.",
                          (long long)li->id, l->name, l->base, base);
            goto fail;
        }
        if (li->scale == 0.0) /* llama-server leaves a scale-0 adapter out */
            continue;
        if (r->n_adapters == REQUEST_MAX_LORA) {
            oai_error_set(err, 400, "lora", "At most %d adapters per request.", REQUEST_MAX_LORA);
            goto fail;
        }
        if (adapter_push(r, l, li->scale, err) < 0)
            goto fail;
    }
    if (r->n_adapters)
        r->lora_base = xstrdup(base);
    return 0;
fail:
    for (size_t i = 0; i < r->n_adapters; i++)
        free(r->adapters[i].name);
    r->n_adapters = 0;
    return -1;
}

const proto_reg_lora_t *lora_reg_find(const proto_register_t *reg, const char *name)
{
    for (uint32_t i = 0; reg->lora && i < reg->n_lora; i++)
        if (!strcmp(reg->lora[i].name, name))
            return &reg->lora[i];
    return NULL;
}

void lora_table_note_worker(lora_table_t *t, const proto_register_t *reg, const proto_register_t *const *peers,
                            size_t n_peers)
{
    size_t n = t ? atomic_load(&t->n) : 0;
    for (size_t i = 0; i < n; i++) {
        lora_entry_t *e = &t->e[i];
        if (strcmp(e->base, reg->model) != 0 || atomic_load(&e->state) == LORA_ENTRY_GONE)
            continue;
        const proto_reg_lora_t *l = lora_reg_find(reg, e->name);
        if (!l) {
            log_warn("worker %s (model %s) has no adapter '%s': requests naming it go to other replicas",
                     reg->replica, reg->model, e->name);
            continue;
        }
        uint64_t known = atomic_load(&e->hash);
        bool kept = false; /* a peer holds the known file */
        for (size_t k = 0; known && k < n_peers && !kept; k++) {
            const proto_reg_lora_t *pl = lora_reg_find(peers[k], e->name);
            kept = pl && pl->hash == known;
        }
        if (!kept)
            atomic_store(&e->hash, l->hash);
        else if (l->hash != known)
            log_warn("worker %s (model %s) has adapter '%s' from another file (hash %016" PRIx64
                     ", the other replicas' %016" PRIx64 "): requests naming it go to other replicas",
                     reg->replica, reg->model, e->name, l->hash, known);
    }
}

bool lora_table_worker_serves(const lora_table_t *t, const proto_register_t *reg, const proto_submit_t *s)
{
    for (uint32_t i = 0; i < s->n_lora; i++) {
        const proto_reg_lora_t *l = lora_reg_find(reg, s->lora[i].name);
        const lora_entry_t *e = lora_table_find(t, s->lora[i].name);
        if (!l || (e && atomic_load(&e->hash) != l->hash))
            return false;
    }
    return true;
}

int lora_table_key_partition(const lora_table_t *t, const proto_submit_t *s, uint64_t *out)
{
    uint64_t hash[PROTO_MAX_LORA];
    float scale[PROTO_MAX_LORA];
    for (uint32_t i = 0; i < s->n_lora; i++) {
        const lora_entry_t *e = lora_table_find(t, s->lora[i].name);
        hash[i] = e ? atomic_load(&e->hash) : 0;
        if (!hash[i])
            return -1;
        /* the worker's: the SUBMIT's scale, else its own default (which a
         * SUBMIT from lora_table_resolve always overrides) */
        scale[i] = (float)(s->lora[i].has_scale ? s->lora[i].scale : e->scale);
    }
    *out = prefix_key_adapters(s->partition, hash, scale, (int)s->n_lora);
    return 0;
}
