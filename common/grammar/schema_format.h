/* schema_format.h — the JSON Schema `format`s the compiler generates.
 *
 * Each supported format is generated from a fixed grammar: a subset of the
 * format chosen to be valid for ajv-formats ("full" mode) and for the
 * pattern zod 4 writes next to it (tests/integration/schema_corpus.mjs
 * checks both). ASCII only, no '"' or '\', so the text needs no JSON
 * escape. A schema using format i refers to the rule <prefix>fmt-NAME; the
 * rules of the formats used (and the pieces they share, <prefix>fd-*) are
 * written once at the end of the grammar by schema_format_rules.
 */
#ifndef PAGODA_COMMON_GRAMMAR_SCHEMA_FORMAT_H
#define PAGODA_COMMON_GRAMMAR_SCHEMA_FORMAT_H

#include "common/strbuf.h"

typedef struct schema_format {
    const char *name;    /* the format keyword's value ("date-time") */
    const char *gbnf;    /* its grammar; fd-* names the shared pieces (unprefixed) */
    int min, max;        /* length range of what the grammar generates (for minLength /
                          * maxLength next to the format) */
    const char *example; /* a string of the format that a `pattern` next to it must accept */
} schema_format_t;

#define SCHEMA_N_FORMATS 10
extern const schema_format_t SCHEMA_FORMATS[SCHEMA_N_FORMATS];

/* The index of the format named name in SCHEMA_FORMATS, or -1. */
int schema_format_find(const char *name);

/* Appends the rules of the formats in used (bit i = SCHEMA_FORMATS[i]) and
 * of the pieces they share, every name prefixed with p; nothing when used
 * is 0. */
void schema_format_rules(strbuf_t *b, const char *p, unsigned used);

#endif
