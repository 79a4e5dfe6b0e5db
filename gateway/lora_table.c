/* lora_table.c — the gateway's LoRA adapters by name and by llama.cpp id
 * (gateway/lora_table.h). */
#include "gateway/lora_table.h"

#include <string.h>

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
    t->e[t->n++] = (lora_entry_t){.name = xstrdup(name), .base = xstrdup(base), .scale = scale};
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
