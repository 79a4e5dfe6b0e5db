/* route.h — routing by cache: which replica of a model a request goes to.
 *
 * Two parts:
 *   - keys: the gateway renders and tokenizes a request's prompt exactly as a
 *     worker will (the same code, proto/submit_prompt.h over a
 *     common/text/text_model.h read from the model's GGUF metadata:
 *     tokenizer + chat template, no weights) and turns
 *     the tokens into the public block-key chain (common/prefix_key.h). Runs
 *     on the HTTP thread that parsed the request, so the core thread never
 *     tokenizes. A model without a GGUF file on the gateway's host (a
 *     remote-only model) gets no keys and is routed by load.
 *   - pick: given, per candidate replica, its credit, load and how many of the
 *     request's leading blocks it holds (gateway/prefix_index.h), choose one.
 *
 * Policy (route_pick), among replicas with credit > 0:
 *   least  = the least-loaded replica (most credit, then fewest assigned) —
 *            the whole policy in ROUTE_LEAST_LOADED mode;
 *   cached = the one holding the longest prefix (ties: least loaded).
 *   If cached holds more than least does and its load (requests we have on
 *   it) exceeds least's by at most max_load_gap, the request goes to cached
 *   ("cache"); if the gap is larger, to least ("overload": a hot prefix must
 *   not pile onto one replica — the other one caches it too after serving
 *   it); if no replica holds any of it, to least ("load").
 * The queue's order (priority, aging) is not touched: this only decides
 * where the most urgent request goes.
 *
 * Ownership: route_text_new loads text models it owns (route_text_free NULLs).
 * A route_text_t is read-only after creation: any thread may call
 * route_text_keys concurrently. route_pick is a pure function.
 */
#ifndef PAGODA_GATEWAY_ROUTE_H
#define PAGODA_GATEWAY_ROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/msg.h"

/* The routing policies, the one list of them: a row is
 *     X(ENUM suffix, name in --routing / routing.mode, policy function,
 *       uses_prefix, what it does in words)
 * and a policy is one function of route_pick's signature in route.c
 * (route_pick dispatches on the mode). uses_prefix: the policy reads the
 * candidates' hit_blocks, so the gateway loads each model's tokenizer
 * (route_text_new), computes a request's block keys (route_text_keys),
 * matches them against the prefix index and counts an affinity key's last
 * replica as holding the whole prefix; false: none of that is done and
 * hit_blocks is always 0. Callers ask route_mode_uses_prefix, never a mode
 * by name. A new policy = its function + its row here: routing.mode in the
 * config table (and so --routing and --print-config) takes its names from
 * route_mode_names, the --help text its words from route_mode_help;
 * docs/OPERATIONS.md describes each mode. The first row is the default. */
#define ROUTE_MODES(X)                                                                  \
    X(CACHE_AWARE, "cache-aware", route_pick_cache_aware, true,                         \
      "to the replica holding the prompt's prefix unless it is overloaded")             \
    X(LEAST_LOADED, "least-loaded", route_pick_least_loaded, false,                     \
      "to the least-loaded replica; prompts are not tokenized")

typedef enum route_mode {
#define ROUTE_MODE_ENUM_(e, name, fn, uses_prefix, help) ROUTE_##e,
    ROUTE_MODES(ROUTE_MODE_ENUM_)
#undef ROUTE_MODE_ENUM_
    ROUTE_N_MODES
} route_mode_t;

/* The modes' names indexed by route_mode_t, NULL-terminated (static). */
extern const char *const route_mode_names[ROUTE_N_MODES + 1];

#define ROUTE_DEFAULT_MAX_LOAD_GAP 4
#define ROUTE_MAX_KEYS 65536          /* blocks of a prompt looked up (2M tokens at 32) */
/* Bytes of a rendered prompt the gateway tokenizes for keys: a longer prompt
 * is keyed on its first ROUTE_MAX_TEXT_BYTES (≈ 32k tokens), minus
 * ROUTE_CUT_BLOCKS blocks before the cut (whose tokens may differ from the
 * whole prompt's), so a hostile multi-MiB prompt costs the gateway little. */
#define ROUTE_MAX_TEXT_BYTES (128u << 10)
#define ROUTE_CUT_BLOCKS 2

/* A name of route_mode_names → mode; 0 ok, -1 unknown. */
int route_mode_parse(const char *s, route_mode_t *out);
const char *route_mode_name(route_mode_t m);
/* The row's uses_prefix column (above): whether the gateway needs
 * tokenizers, block keys, the prefix index and affinity for mode m. */
bool route_mode_uses_prefix(route_mode_t m);
/* The row's words, for --help (static). */
const char *route_mode_help(route_mode_t m);

typedef struct route_text route_text_t;

/* Loads the text side (tokenizer, chat template) of each model's GGUF;
 * paths[i] NULL = none for names[i]. A file that fails to load is logged
 * and that model routed by load. Never NULL. */
route_text_t *route_text_new(const char *const *names, const char *const *paths, size_t n);
void route_text_free(route_text_t **t);

/* Public key chain of the prompt s will have on a worker of `model` with
 * block_size tokens per block, in the prefix-cache partition the worker
 * keys it in (common/prefix_key.h): s->partition, and for a SUBMIT with
 * images (s->imgs, parts) each image's hash and position folded in
 * (prefix_key_image) with the prompt laid out for vis, the model's encoder
 * (its REGISTER vis; NULL or !has: a request with images gets no keys).
 * *keys (malloc'd, caller frees; NULL when 0) gets the keys of the blocks a
 * prefix-cache lookup can hit. Returns their count, 0 when the model has no
 * text model or the prompt does not render (the worker will then answer the
 * error itself). Text past ROUTE_MAX_TEXT_BYTES is not tokenized (see
 * above) unless the request has images (their layout is never cut; the
 * request's size is bounded by the HTTP limits). */
int32_t route_text_keys(const route_text_t *t, const char *model, const proto_submit_t *s, const proto_vis_t *vis,
                        int32_t block_size, uint64_t **keys);

/* One candidate replica for route_pick. */
typedef struct route_cand {
    int64_t credit;               /* SUBMITs it takes now; ≤ 0 = not a candidate */
    uint32_t assigned;            /* our requests on it */
    int32_t hit_blocks;           /* leading blocks of the request it holds */
} route_cand_t;

typedef enum route_reason {
    ROUTE_BY_LOAD = 0,            /* no replica holds any of the prefix (or least-loaded mode) */
    ROUTE_BY_CACHE = 1,           /* the replica holding the longest prefix */
    ROUTE_BY_OVERLOAD = 2,        /* a replica held more, but was too loaded */
} route_reason_t;
const char *route_reason_name(route_reason_t r); /* "load", "cache", "overload" */

/* Index of the chosen candidate, or -1 when none has credit. *why says why. */
int route_pick(route_mode_t mode, const route_cand_t *c, size_t n, uint32_t max_load_gap,
               route_reason_t *why);

#endif
