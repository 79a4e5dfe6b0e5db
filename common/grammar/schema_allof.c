/* schema_allof.c — allOf parts merged into one schema (see schema_allof.h). */
#include "common/grammar/schema_allof.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/schema_vocab.h"
#include "common/xalloc.h"

static bool in_list(const char *k, const char *const *l)
{
    for (; *l; l++)
        if (strcmp(k, *l) == 0)
            return true;
    return false;
}

/* Keywords an allOf part may use to be merged (besides annotations). */
static const char *const MERGEABLE[] = {"type", "properties", "required", "additionalProperties", NULL};

/* allOf of object schemas (and the object keywords next to it) → one object
 * schema, new reference: properties united in order (a property two parts
 * describe differently gets allOf of both), required united, properties a
 * closed part (additionalProperties false) does not list are left out, and
 * nothing beyond the listed properties is generated. NULL on failure. */
static json_t *all_of_merge(const json_t *root, const json_t *s, const json_t *all, char *err, size_t errlen)
{
    size_t n = json_array_size(all);
    const json_t **parts = xmalloc((n + 1) * sizeof *parts);
    size_t np = 0;
    parts[np++] = s;
    json_t *props = json_object(), *req = json_array(), *out = NULL;
    for (size_t i = 0; i < n; i++) {
        const json_t *e = json_array_get(all, i);
        const json_t *r = json_is_object(e) ? json_object_get(e, "$ref") : NULL;
        if (r) {
            const json_t *t = json_is_string(r) ? schema_vocab_resolve_ref(root, json_string_value(r)) : NULL;
            if (!t || json_object_get(t, "$ref")) {
                errbuf_set(err, errlen, "'allOf' item %zu: its '$ref' does not resolve to a schema without '$ref'", i);
                goto out;
            }
            e = t;
        }
        if (!json_is_object(e)) {
            errbuf_set(err, errlen, "'allOf' item %zu must be an object schema to be merged", i);
            goto out;
        }
        parts[np++] = e;
    }
    for (size_t i = 0; i < np; i++) {
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)parts[i], key, v) {
            if (schema_vocab_is_annotation(key) || (i == 0 && strcmp(key, "allOf") == 0) || (i > 0 && strcmp(key, "$ref") == 0))
                continue;
            if (!in_list(key, MERGEABLE) ||
                (strcmp(key, "type") == 0 && !(json_is_string(v) && strcmp(json_string_value(v), "object") == 0)) ||
                (strcmp(key, "properties") == 0 && !json_is_object(v)) ||
                (strcmp(key, "required") == 0 && !json_is_array(v))) {
                errbuf_set(err, errlen, "'allOf' is supported with one schema, or with object schemas (type object, "
                                    "properties, required, additionalProperties); %s has '%.40s'",
                        i ? "an item" : "the schema next to it", key);
                goto out;
            }
        }
        const char *k;
        json_t *sub;
        json_object_foreach(json_object_get(parts[i], "properties"), k, sub) {
            json_t *have = json_object_get(props, k);
            if (!have)
                json_object_set(props, k, sub);
            else if (!json_equal(have, sub))
                json_object_set_new(props, k, json_pack("{s:[O,O]}", "allOf", have, sub));
        }
        size_t j;
        json_t *rk;
        json_array_foreach(json_object_get(parts[i], "required"), j, rk) {
            bool dup = false;
            for (size_t q = 0; q < json_array_size(req); q++)
                dup |= json_equal(json_array_get(req, q), rk);
            if (!dup)
                json_array_append(req, rk);
        }
    }
    /* what each part says about the properties it does not list */
    for (size_t i = 0; i < np; i++) {
        const json_t *add = json_object_get(parts[i], "additionalProperties");
        const json_t *own = json_object_get(parts[i], "properties");
        if (!add || json_is_true(add) || (json_is_object(add) && json_object_size(add) == 0))
            continue;
        const char *k;
        json_t *sub;
        void *tmp;
        json_object_foreach_safe(props, tmp, k, sub) {
            if (own && json_object_get(own, k))
                continue;
            if (json_is_false(add)) {
                for (size_t q = 0; q < json_array_size(req); q++)
                    if (strcmp(json_string_value(json_array_get(req, q)), k) == 0) {
                        errbuf_set(err, errlen, "'allOf': property '%.100s' is required by one part and not allowed by another", k);
                        goto out;
                    }
                json_object_del(props, k);
            } else if (!json_equal(sub, add)) {
                json_object_set_new(props, k, json_pack("{s:[O,O]}", "allOf", sub, add));
            }
        }
    }
    out = json_pack("{s:s,s:O,s:O,s:b}", "type", "object", "properties", props, "required", req,
                    "additionalProperties", 0);
out:
    json_decref(props);
    json_decref(req);
    free(parts);
    return out;
}

/* allOf part i of s (0 = s itself), its $ref resolved; NULL when it is not
 * an object schema. */
static const json_t *all_of_part(const json_t *root, const json_t *s, const json_t *all, size_t i)
{
    const json_t *e = i == 0 ? s : json_array_get(all, i - 1);
    const json_t *r = i && json_is_object(e) ? json_object_get(e, "$ref") : NULL;
    if (r)
        e = json_is_string(r) ? schema_vocab_resolve_ref(root, json_string_value(r)) : NULL;
    return json_is_object(e) ? e : NULL;
}

/* Does some part of the allOf describe an object? Then the parts are merged
 * as objects (all_of_merge), else keyword by keyword (all_of_scalars). */
static bool all_of_is_objects(const json_t *root, const json_t *s, const json_t *all)
{
    for (size_t i = 0; i <= json_array_size(all); i++) {
        const json_t *e = all_of_part(root, s, all, i);
        const json_t *t = e ? json_object_get(e, "type") : NULL;
        if (e && (json_object_get(e, "properties") || json_object_get(e, "required") ||
                  json_object_get(e, "additionalProperties") ||
                  (json_is_string(t) && strcmp(json_string_value(t), "object") == 0)))
            return true;
    }
    return false;
}

/* Keywords allOf parts may combine one by one: a conjunction of
 * independent constraints is the union of the keywords. Where two parts
 * give the same keyword, the values must be equal, or the keyword is a
 * bound and the tighter one is kept (sign: +1 keep the larger, -1 the
 * smaller). */
static const struct {
    const char *key;
    int sign;
} SCALAR_KEYS[] = {{"type", 0}, {"enum", 0}, {"const", 0}, {"minimum", 1}, {"exclusiveMinimum", 1},
                   {"maximum", -1}, {"exclusiveMaximum", -1}, {"multipleOf", 0}, {"minLength", 1},
                   {"maxLength", -1}, {"pattern", 0}, {"format", 0}, {"minItems", 1}, {"maxItems", -1},
                   {"uniqueItems", 0}, {"items", 0}};

/* allOf of non-object schemas → one schema (new reference), or NULL. */
static json_t *all_of_scalars(const json_t *root, const json_t *s, const json_t *all, char *err, size_t errlen)
{
    json_t *out = json_object();
    for (size_t i = 0; i <= json_array_size(all); i++) {
        const json_t *e = all_of_part(root, s, all, i);
        if (!e) {
            errbuf_set(err, errlen, "'allOf' item %zu must be an object schema to be merged", i - 1);
            goto fail;
        }
        const char *key;
        json_t *v;
        json_object_foreach((json_t *)e, key, v) {
            if (schema_vocab_is_annotation(key) || (i == 0 && strcmp(key, "allOf") == 0) || (i > 0 && strcmp(key, "$ref") == 0))
                continue;
            int k = -1;
            for (size_t q = 0; q < sizeof SCALAR_KEYS / sizeof SCALAR_KEYS[0]; q++)
                if (strcmp(SCALAR_KEYS[q].key, key) == 0)
                    k = (int)q;
            if (k < 0) {
                errbuf_set(err, errlen, "'allOf' is supported with one schema, with object schemas, or with schemas of "
                                    "independent keywords (%s has '%.40s')", i ? "an item" : "the schema next to it", key);
                goto fail;
            }
            json_t *have = json_object_get(out, key);
            if (!have || json_equal(have, v)) {
                json_object_set(out, key, v);
            } else if (SCALAR_KEYS[k].sign && json_is_number(have) && json_is_number(v)) {
                double a = json_number_value(have), b = json_number_value(v);
                if (SCALAR_KEYS[k].sign > 0 ? b > a : b < a)
                    json_object_set(out, key, v);
            } else {
                errbuf_set(err, errlen, "'allOf' parts give different values for '%.40s'", key);
                goto fail;
            }
        }
    }
    return out;
fail:
    json_decref(out);
    return NULL;
}

json_t *schema_allof_merge(const json_t *root, const json_t *s, const json_t *all, char *err, size_t errlen)
{
    return all_of_is_objects(root, s, all) ? all_of_merge(root, s, all, err, errlen)
                                           : all_of_scalars(root, s, all, err, errlen);
}
