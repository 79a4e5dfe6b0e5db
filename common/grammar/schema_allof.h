/* schema_allof.h — a JSON Schema allOf as the one schema it amounts to.
 *
 * The schema compiler (json_schema.c) compiles one schema per node; an allOf
 * of several parts is first merged here (the parts' $refs resolved against
 * the root, schema_vocab_resolve_ref):
 *   - when some part describes an object (type object, properties, required,
 *     additionalProperties): one object schema — properties united in order
 *     (a property two parts describe differently gets allOf of both),
 *     required united, properties a closed part (additionalProperties false)
 *     does not list left out, nothing beyond the listed properties;
 *   - else keyword by keyword: keywords of independent constraints united
 *     (type, enum, const, bounds, lengths, pattern, format, items, ...); the
 *     same keyword twice must agree, except bounds, where the tighter wins.
 * Anything else is refused with the reason (the caller's error key is
 * "allOf").
 */
#ifndef PAGODA_COMMON_GRAMMAR_SCHEMA_ALLOF_H
#define PAGODA_COMMON_GRAMMAR_SCHEMA_ALLOF_H

#include <jansson.h>
#include <stddef.h>

/* s: the node holding "allOf" (its other keywords are part 0); all: the
 * allOf array; root: the whole schema ($ref targets). Returns a new
 * reference (caller json_decref's it), or NULL with err set. */
json_t *schema_allof_merge(const json_t *root, const json_t *s, const json_t *all, char *err, size_t errlen);

#endif
