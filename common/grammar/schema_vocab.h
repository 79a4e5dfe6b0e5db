/* schema_vocab.h — the JSON Schema vocabulary of the schema compiler: which
 * keywords it compiles, which it ignores as annotations, and where a $ref
 * points. Shared by the compiler (json_schema.c) and the allOf merger
 * (schema_allof.c), below both. Nothing here allocates; the json_t
 * returned is borrowed from root. */
#ifndef PAGODA_COMMON_GRAMMAR_SCHEMA_VOCAB_H
#define PAGODA_COMMON_GRAMMAR_SCHEMA_VOCAB_H

#include <jansson.h>
#include <stdbool.h>

/* True for the keywords without effect on what is generated ($schema,
 * title, description, $defs, ...). */
bool schema_vocab_is_annotation(const char *key);
/* True for the keywords the compiler turns into grammar (type, enum,
 * properties, minLength, ...). */
bool schema_vocab_is_supported(const char *key);

/* The schema a "$ref" pointer names inside root: "#", "#/$defs/NAME" or
 * "#/definitions/NAME" (NAME JSON-pointer escaped); NULL when none. */
const json_t *schema_vocab_resolve_ref(const json_t *root, const char *pointer);

#endif
