/* lora_table.h — the gateway's LoRA adapters: each a model name of its own
 * (models[].loras, --lora NAME=FILE[:SCALE]) that runs on its base model's
 * workers, and llama.cpp's per-request `lora` list ([{"id", "scale"}] with
 * ids in GET /lora-adapters order) on the base model's name.
 *
 * The table is filled before the HTTP threads start and grows at run time
 * (POST /admin/models/{model}/loras, gateway/gateway_lora.h) by appending:
 * its array is allocated once (LORA_TABLE_MAX entries, never moved), an
 * entry's strings and scale never change once it is published (n is stored
 * after the entry is filled), and only its state and hash change later
 * (atomically, from the core thread). So any thread may read it without a
 * lock; only the core thread writes. An unloaded adapter's entry stays,
 * GONE, so llama.cpp ids (indexes) of the others never move; a name loaded
 * again gets a new entry (a new id).
 *
 *     lora_table_t *t = lora_table_new();
 *     lora_table_add(t, "sql", "llama", 1.0);     // adapter sql of model llama
 *     if (lora_table_resolve(t, &req, &err) < 0)  // 400 in err (param "model"/"lora")
 *         ...
 *     lora_table_free(&t);
 *
 * Ownership: the table copies the strings it is given; lora_table_resolve
 * stores owned copies in the request (freed by request_free). */
#ifndef PAGODA_GATEWAY_LORA_TABLE_H
#define PAGODA_GATEWAY_LORA_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gateway/oai_error.h"
#include "gateway/request.h"
#include "proto/msg.h"

#define LORA_TABLE_MAX 1024  /* entries ever (configured + loaded at run time) */

/* An entry's life: configured ones start LIVE; run-time loads go LOADING →
 * LIVE (the replicas loaded it) or GONE (they refused, or it timed out);
 * an unload makes it GONE. Only LIVE entries are listed or resolved. */
enum lora_entry_state { LORA_ENTRY_LIVE = 0, LORA_ENTRY_LOADING, LORA_ENTRY_GONE };

typedef struct lora_entry {
    char *name;      /* the adapter's model name = the worker's --lora NAME */
    char *base;      /* the model whose workers load it */
    double scale;    /* its configured scale */
    /* content hash of its file (prefix_key_bytes) as the replicas of base
     * list it (lora_table_note_worker); 0 = no replica has yet.
     * Written by the core thread, read by any. */
    _Atomic uint64_t hash;
    _Atomic int state;   /* enum lora_entry_state */
} lora_entry_t;

typedef struct lora_table {
    lora_entry_t *e;     /* (LORA_TABLE_MAX), the first n in use, in configuration
                          * then load order: entry i is llama.cpp's id i */
    _Atomic size_t n;    /* published entries: read it once, then e[0..n) */
} lora_table_t;

lora_table_t *lora_table_new(void);
void lora_table_free(lora_table_t **tp);                 /* NULLs *tp; NULL-safe */
/* Appends a LIVE entry (configuration); the caller checked the count. */
void lora_table_add(lora_table_t *t, const char *name, const char *base, double scale);
/* Appends an entry in `state` (core thread): its index, or -1 when the table
 * holds LORA_TABLE_MAX entries already. */
long lora_table_append(lora_table_t *t, const char *name, const char *base, double scale,
                       enum lora_entry_state state);
/* The LIVE entry called name; NULL = none. */
const lora_entry_t *lora_table_find(const lora_table_t *t, const char *name);
/* The LIVE or LOADING entry called name (a name taken); NULL = none. */
lora_entry_t *lora_table_taken(const lora_table_t *t, const char *name);
/* LIVE and LOADING entries of model base. */
size_t lora_table_count(const lora_table_t *t, const char *base);

/* Resolves a request's adapters. r->model naming an adapter selects it at its
 * scale; r->lora_ids (llama.cpp's `lora` field) select adapters of r->model's
 * base by id with their own scales (scale 0 = left out, as llama-server does).
 * On a hit: r->lora_base = the base model's name and r->adapters /
 * r->n_adapters the SUBMIT's list. Neither = nothing changes (returns 0).
 * Returns 0, or -1 with a 400 in *err (param "lora": an unknown id, an
 * adapter of another model, more than PROTO_MAX_LORA, a repeated id). A
 * NULL table has no adapters. */
int lora_table_resolve(const lora_table_t *t, request_t *r, oai_error_t *err);

/* A replica of model reg->model registered (REGISTER `lora`, proto/msg.h);
 * peers[0..n_peers) are the model's other live replicas. Learns the hash of
 * each of the table's adapters of that model that reg lists: the hash known
 * so far stays while a peer lists the adapter with it (the first replica's
 * file wins), else reg's is taken (the file changed and its replicas
 * restarted). Logs, by replica, each adapter it lacks or holds from another
 * file (requests naming those go elsewhere). */
void lora_table_note_worker(lora_table_t *t, const proto_register_t *reg, const proto_register_t *const *peers,
                            size_t n_peers);

/* Whether a replica that registered reg may run SUBMIT s: it lists every
 * adapter s names, with the hash the table learnt for it. A request without
 * adapters: true. */
bool lora_table_worker_serves(const lora_table_t *t, const proto_register_t *reg, const proto_submit_t *s);

/* The partition a worker keys s's KV blocks in (the worker's
 * prefix_key_adapters over its adapters' hashes and scales, as float):
 * 0 and *out for a request without adapters (s->partition) or one whose
 * adapters' hashes are all known; -1 when one is not known yet (no replica
 * has listed it: no routing keys). */
int lora_table_key_partition(const lora_table_t *t, const proto_submit_t *s, uint64_t *out);

/* The adapter called name in a replica's REGISTER list, or NULL. */
const proto_reg_lora_t *lora_reg_find(const proto_register_t *reg, const char *name);

#endif
