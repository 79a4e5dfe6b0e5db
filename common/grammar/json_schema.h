/* json_schema.h — a JSON Schema subset compiled to GBNF (gbnf.h), so that
 * constrained decoding produces JSON that validates against the schema.
 *
 * Supported keywords (anything else is refused, naming the keyword and its
 * JSON pointer — never silently ignored; docs/API.md has the table):
 *   type          "object" "array" "string" "integer" "number" "boolean" "null",
 *                 or an array of them (alternatives)
 *   enum, const   any JSON values (written compactly, as json_dumps does)
 *   anyOf, oneOf  alternatives (oneOf's "exactly one" is not enforced)
 *   allOf         one schema, or object schemas merged (properties united,
 *                 required united, a closed part's unlisted properties left out)
 *   $ref          "#", "#/$defs/NAME", "#/definitions/NAME" (recursion allowed)
 *   object        properties, required, additionalProperties (false, absent, true
 *                 or a schema: only listed properties are generated when there
 *                 are any; without them, a map), propertyNames (a string schema
 *                 for map keys, or an enum of names: those become properties),
 *                 minProperties / maxProperties, dependentRequired (the
 *                 dependent properties are made required)
 *   array         items (one schema), prefixItems (+ items), items as an array
 *                 (+ additionalItems), minItems, maxItems (≤ JSON_SCHEMA_MAX_COUNT),
 *                 uniqueItems false
 *   string        minLength, maxLength (≤ JSON_SCHEMA_MAX_COUNT, in code points),
 *                 pattern (an ECMA-262 subset, common/grammar/regex.h: literals,
 *                 escapes \d \w \s \D \W \S, classes, ., groups, |, quantifiers;
 *                 ^ and $ only at the ends of top-level alternatives; no
 *                 lookaround or backreferences;
 *                 with minLength/maxLength its repetition counts are raised /
 *                 cut so every generated match fits),
 *                 format date, time, date-time, duration, email, hostname, ipv4,
 *                 ipv6, uuid, uri (a fixed subset of each, valid for ajv-formats;
 *                 a pattern next to it must accept the format's example; other
 *                 formats only next to a pattern, as annotations)
 *   integer       minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers,
 *                 or booleans next to minimum/maximum), multipleOf (integer)
 *   number        the same bounds, fractional too; multipleOf (integer: only
 *                 integers are generated). Bounds with |x| ≥ 10^15 on their open
 *                 side are no-ops (zod's ±(2^53-1) for .int()).
 *   annotations   $schema $id $anchor $comment title description default examples
 *                 deprecated readOnly writeOnly $defs definitions discriminator
 *                 contentEncoding contentMediaType (ignored)
 *
 * What is generated (a subset of what the schema accepts, chosen so a random
 * model still writes short, valid JSON): properties in the schema's order,
 * each optional one present or not; whitespace limited to one space or a
 * newline and ≤ 12 indents between tokens; integers ≤ 15 digits; numbers
 * without an exponent when bounded, on the coarsest decimal grid (≤ 6
 * fraction digits) that has a value inside the bounds; no properties beyond
 * the listed ones; a pattern's match itself (a string that *is* a match also
 * *contains* one, so unanchored patterns hold).
 *
 * Relaxed compiling (json_schema_to_gbnf_relaxed, for non-strict tools): a
 * keyword that would be refused is dropped from its schema node instead and
 * the node compiled again without it (a node refused as a whole — false, not
 * an object — becomes any value); each relaxed keyword is reported with its
 * pointer. Size limits still refuse.
 *
 * Rule names all start with `prefix` (NULL = ""), and the schema's rule is
 * `<prefix>root`, so several compiled schemas can be joined into one grammar
 * (e.g. root ::= "<tool>" t0-root "</tool>" | t1-root) — see
 * json_schema_gbnf_wrap.
 *
 * Ownership: returned strings are malloc'd; the caller frees them.
 */
#ifndef PAGODA_COMMON_GRAMMAR_JSON_SCHEMA_H
#define PAGODA_COMMON_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define JSON_SCHEMA_MAX_COUNT 10000     /* minItems, maxItems, minLength, maxLength */
#define JSON_SCHEMA_MAX_DEPTH 64        /* nested schemas */
#define JSON_SCHEMA_MAX_RULES 20000     /* generated rules */

/* GBNF text for `schema` (a JSON object or boolean). Returns NULL on a
 * schema it cannot compile: err gets the reason ("unsupported JSON Schema
 * keyword 'oneOf'") and path (may be NULL) the JSON pointer of the offending
 * keyword ("/properties/age/oneOf"). */
char *json_schema_to_gbnf(const json_t *schema, const char *prefix, char *err, size_t errlen,
                          char *path, size_t pathlen);

/* Like json_schema_to_gbnf, but refused keywords are relaxed (above).
 * *relaxed gets a malloc'd "POINTER: reason; ..." for what was relaxed, or
 * NULL. Returns NULL (err set) only when a size limit is hit. */
char *json_schema_to_gbnf_relaxed(const json_t *schema, const char *prefix, char **relaxed, char *err,
                                  size_t errlen);

/* GBNF text for any JSON object (response_format {"type":"json_object"}). */
char *json_schema_object_gbnf(const char *prefix);

/* Parses buf as JSON, compiles it and checks the result with gbnf_parse.
 * 0 ok, -1 error (message in err). For fuzzing and tests. */
int json_schema_check(const uint8_t *buf, size_t len, char *err, size_t errlen);

/* A grammar whose root is prefix_text <inner_prefix>root suffix_text, plus
 * the rules of inner (compiled with inner_prefix, which must not be ""):
 * for wrapping a schema in fixed text (tool-call markup). malloc'd. */
char *json_schema_gbnf_wrap(const char *inner, const char *inner_prefix, const char *prefix_text,
                            const char *suffix_text);

#endif
