/* route.c — gateway-side prompt keys and the replica choice (see route.h). */
#include "gateway/route.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/prefix_key.h"
#include "common/xalloc.h"
#include "common/text/text_model.h"
#include "proto/submit_prompt.h"

struct route_text {
    char **names;                 /* (n) model names */
    text_model_t **text;          /* (n) tokenizer + template of each, NULL = none */
    size_t n;
};

const char *const route_mode_names[ROUTE_N_MODES + 1] = {
#define ROUTE_MODE_NAME_(e, name, fn, uses_prefix, help) [ROUTE_##e] = name,
    ROUTE_MODES(ROUTE_MODE_NAME_)
#undef ROUTE_MODE_NAME_
    [ROUTE_N_MODES] = NULL,
};

int route_mode_parse(const char *s, route_mode_t *out)
{
    for (int m = 0; m < ROUTE_N_MODES; m++)
        if (strcmp(s, route_mode_names[m]) == 0) {
            *out = (route_mode_t)m;
            return 0;
        }
    return -1;
}

const char *route_mode_name(route_mode_t m)
{
    return m >= 0 && m < ROUTE_N_MODES ? route_mode_names[m] : route_mode_names[0];
}

bool route_mode_uses_prefix(route_mode_t m)
{
    static const bool uses[ROUTE_N_MODES] = {
#define ROUTE_MODE_USES_(e, name, fn, uses_prefix, help) [ROUTE_##e] = uses_prefix,
        ROUTE_MODES(ROUTE_MODE_USES_)
#undef ROUTE_MODE_USES_
    };
    return uses[m >= 0 && m < ROUTE_N_MODES ? m : 0];
}

const char *route_mode_help(route_mode_t m)
{
    static const char *const help[ROUTE_N_MODES] = {
#define ROUTE_MODE_HELP_(e, name, fn, uses_prefix, help) [ROUTE_##e] = help,
        ROUTE_MODES(ROUTE_MODE_HELP_)
#undef ROUTE_MODE_HELP_
    };
    return help[m >= 0 && m < ROUTE_N_MODES ? m : 0];
}

const char *route_reason_name(route_reason_t r)
{
    return r == ROUTE_BY_CACHE ? "cache" : r == ROUTE_BY_OVERLOAD ? "overload" : "load";
}

route_text_t *route_text_new(const char *const *names, const char *const *paths, size_t n)
{
    route_text_t *t = xcalloc(1, sizeof *t);
    t->n = n;
    t->names = xcalloc(n ? n : 1, sizeof *t->names);
    t->text = xcalloc(n ? n : 1, sizeof *t->text);
    for (size_t i = 0; i < n; i++) {
        t->names[i] = xstrdup(names[i]);
        if (!paths || !paths[i])
            continue;
        char err[512] = "";
        t->text[i] = text_model_load(paths[i], err, sizeof err);
        if (!t->text[i])
            log_warn("model %s: no tokenizer for routing by cache (%s): routed by load", names[i], err);
    }
    return t;
}

void route_text_free(route_text_t **tp)
{
    if (!tp || !*tp)
        return;
    route_text_t *t = *tp;
    for (size_t i = 0; i < t->n; i++) {
        free(t->names[i]);
        text_model_free(&t->text[i]);
    }
    free(t->names);
    free(t->text);
    free(t);
    *tp = NULL;
}

/* The prompt ids of s and the partition its blocks are keyed in on a worker.
 * Without images: submit_prompt_encode (cut at ROUTE_MAX_TEXT_BYTES,
 * *cut) and s's partition. With images: the image layout of the model's
 * projector (submit_prompt_encode_images, never cut), and each image's key
 * and position folded into the partition as the worker's scheduler does
 * (common/prefix_key.h prefix_key_image). Returns the count (ids malloc'd)
 * or -1. */
static int32_t route_prompt(const text_model_t *tm, const proto_submit_t *s, const proto_vis_t *vis,
                            int32_t **ids, bool *cut, uint64_t *partition)
{
    char err[256];
    *partition = s->partition;
    *cut = false;
    if (!s->n_imgs)
        return submit_prompt_encode(tm, s, ROUTE_MAX_TEXT_BYTES, ids, cut, err, sizeof err);
    if (!vis || !vis->has)
        return -1; /* the worker refuses it: nothing to route by */
    submit_img_span_t *sp = NULL;
    uint32_t ns = 0;
    int32_t n = submit_prompt_encode_images(tm, s, vis->proj, (int32_t)vis->n_tok, ids, &sp, &ns, err, sizeof err);
    if (n < 0)
        return -1;
    /* the images step of the key (after the adapters' when there are any) */
    for (uint32_t i = 0; i < ns; i++) {
        if (sp[i].img >= s->n_imgs) {
            free(sp);
            free(*ids);
            *ids = NULL;
            return -1;
        }
        *partition = prefix_key_image(*partition, prefix_key_image_key(s->imgs[sp[i].img].hash), sp[i].pos);
    }
    free(sp);
    return n;
}

int32_t route_text_keys(const route_text_t *t, const char *model, const proto_submit_t *s, const proto_vis_t *vis,
                        int32_t block_size, uint64_t **keys)
{
    *keys = NULL;
    const text_model_t *tm = NULL;
    for (size_t i = 0; t && i < t->n; i++)
        if (strcmp(t->names[i], model) == 0)
            tm = t->text[i];
    if (!tm || block_size < 1)
        return 0;
    /* the same prompt construction as the worker's (proto/submit_prompt.h) */
    int32_t *ids = NULL;
    bool cut = false;
    uint64_t part;
    int32_t n_ids = route_prompt(tm, s, vis, &ids, &cut, &part);
    int32_t n = 0;
    if (n_ids > block_size) {
        int32_t max = (n_ids - 1) / block_size - (cut ? ROUTE_CUT_BLOCKS : 0);
        if (max > ROUTE_MAX_KEYS)
            max = ROUTE_MAX_KEYS;
        if (max > 0) {
            *keys = xmalloc((size_t)max * sizeof **keys);
            n = prefix_key_chain(part, ids, n_ids, block_size, *keys, max);
        }
    }
    free(ids);
    return n;
}

/* a better least-loaded candidate than b (b < 0 = none) */
static bool less_loaded(const route_cand_t *c, int a, int b)
{
    if (b < 0)
        return true;
    if (c[a].credit != c[b].credit)
        return c[a].credit > c[b].credit;
    return c[a].assigned < c[b].assigned;
}

/* The least-loaded candidate with credit (*least) and the one holding the
 * longest prefix, ties to the less loaded (*cached); both -1 when none has
 * credit. */
static void scan(const route_cand_t *c, size_t n, int *least, int *cached)
{
    *least = *cached = -1;
    for (size_t i = 0; i < n; i++) {
        if (c[i].credit <= 0)
            continue;
        if (less_loaded(c, (int)i, *least))
            *least = (int)i;
        if (*cached < 0 || c[i].hit_blocks > c[*cached].hit_blocks ||
            (c[i].hit_blocks == c[*cached].hit_blocks && less_loaded(c, (int)i, *cached)))
            *cached = (int)i;
    }
}

/* "least-loaded": the most credit, then the fewest of our requests. */
static int route_pick_least_loaded(const route_cand_t *c, size_t n, uint32_t max_load_gap, route_reason_t *why)
{
    int least, cached;
    scan(c, n, &least, &cached);
    *why = ROUTE_BY_LOAD;
    return least;
}

/* "cache-aware": the replica holding the longest prefix, unless it has more
 * than max_load_gap requests beyond the least loaded. */
static int route_pick_cache_aware(const route_cand_t *c, size_t n, uint32_t max_load_gap, route_reason_t *why)
{
    int least, cached;
    scan(c, n, &least, &cached);
    *why = ROUTE_BY_LOAD;
    if (least < 0 || c[cached].hit_blocks == 0)
        return least;
    if (c[cached].hit_blocks == c[least].hit_blocks) {
        *why = ROUTE_BY_CACHE; /* the least loaded holds the longest prefix too */
        return least;
    }
    if (c[cached].assigned > c[least].assigned + max_load_gap) {
        *why = ROUTE_BY_OVERLOAD;
        return least;
    }
    *why = ROUTE_BY_CACHE;
    return cached;
}

int route_pick(route_mode_t mode, const route_cand_t *c, size_t n, uint32_t max_load_gap,
               route_reason_t *why)
{
    typedef int (*policy_fn)(const route_cand_t *, size_t, uint32_t, route_reason_t *);
    static const policy_fn policies[ROUTE_N_MODES] = {
#define ROUTE_MODE_FN_(e, name, fn, uses_prefix, help) [ROUTE_##e] = fn,
        ROUTE_MODES(ROUTE_MODE_FN_)
#undef ROUTE_MODE_FN_
    };
    return policies[mode >= 0 && mode < ROUTE_N_MODES ? mode : 0](c, n, max_load_gap, why);
}
