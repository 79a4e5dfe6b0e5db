/* lora_table.c — the gateway's LoRA adapters by name and by llama.cpp id
 * (gateway/lora_table.h). */
#include "gateway/lora_table.h"

#include <inttypes.h>
#include <string.h>

#include "common/log.h"
#include "common/prefix_key.h"
#include "common/xalloc.h"
#include "proto/msg.h"

_Static_assert(REQUEST_MAX_LORA == PROTO_MAX_LORA, "a request's adapters fit one SUBMIT's lora");

lora_table_t *lora_table_new(void)
{
    return xcalloc(1, sizeof(lora_table_t));
}

void lora_table_free(lora_table_t **tp)
{
    lora_table_t *t = tp ? *tp : NULL;
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++) {
        free(t->e[i].name);
        free(t->e[i].base);
    }
    free(t->e);
    free(t);
    *tp = NULL;
}

void lora_table_add(lora_table_t *t, const char *name, const char *base, double scale)
{
    t->e = xrealloc(t->e, (t->n + 1) * sizeof *t->e);
    lora_entry_t *e = &t->e[t->n++];
    e->name = xstrdup(name);
    e->base = xstrdup(base);
    e->scale = scale;
    atomic_init(&e->hash, 0);
}

const lora_entry_t *lora_table_find(const lora_table_t *t, const char *name)
{
    for (size_t i = 0; t && name && i < t->n; i++)
        if (!strcmp(t->e[i].name, name))
            return &t->e[i];
    return NULL;
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
        if (li->id < 0 || !t || (size_t)li->id >= t->n) {
            oai_error_set(err, 400, "lora", "Unknown adapter id %lld: GET /lora-adapters lists %zu.",
                          (long long)li->id, t ? t->n : 0);
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

/* reg's adapter called name, or NULL */
static const proto_reg_lora_t *reg_lora(const proto_register_t *reg, const char *name)
{
    for (uint32_t i = 0; reg->lora && i < reg->n_lora; i++)
        if (!strcmp(reg->lora[i].name, name))
            return &reg->lora[i];
    return NULL;
}

void lora_table_note_worker(lora_table_t *t, const proto_register_t *reg, const proto_register_t *const *peers,
                            size_t n_peers)
{
    for (size_t i = 0; t && i < t->n; i++) {
        lora_entry_t *e = &t->e[i];
        if (strcmp(e->base, reg->model) != 0)
            continue;
        const proto_reg_lora_t *l = reg_lora(reg, e->name);
        if (!l) {
            log_warn("worker %s (model %s) has no adapter '%s': requests naming it go to other replicas",
                     reg->replica, reg->model, e->name);
            continue;
        }
        uint64_t known = atomic_load(&e->hash);
        bool kept = false; /* a peer holds the known file */
        for (size_t k = 0; known && k < n_peers && !kept; k++) {
            const proto_reg_lora_t *pl = reg_lora(peers[k], e->name);
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
        const proto_reg_lora_t *l = reg_lora(reg, s->lora[i].name);
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
