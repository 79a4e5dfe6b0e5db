/* regex.h — a regex subset compiled to one GBNF expression (gbnf.h).
 *
 * Used for JSON Schema's `pattern` (json_schema.c), Lark's /regex/
 * terminals and OpenAI custom tools' regex grammars (lark.c). The subset is
 * ECMA-262's: literals, escapes \n \t \r \f \v \0 \xHH \uHHHH, \d \w \s
 * \D \W \S (ASCII, as in ECMA), classes [...] with ranges and negation, '.',
 * groups (...) and (?:...), '|', quantifiers * + ? {m} {m,} {m,n} (counts ≤
 * REGEX_MAX_COUNT; a lazy '?' after one is accepted: same language); ^ and $
 * only at the ends of top-level alternatives (dropped there). Refused, with
 * the byte offset: lookaround, named groups, backreferences, word
 * boundaries, anchors elsewhere, two quantifiers in a row.
 *
 * The expression — one line, no rule names, usable as one item — matches
 * exactly the whole strings the regex matches. By default it matches their
 * JSON-escaped form (the body of a JSON string: '"' '\' and controls
 * escaped as JSON.stringify writes them, \b \f \n \r \t short, other
 * controls \u00xx, everything else itself); flags change that:
 */
#ifndef PAGODA_COMMON_GRAMMAR_REGEX_H
#define PAGODA_COMMON_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"

#define REGEX_RAW 1u        /* match the characters themselves, unescaped */
#define REGEX_PYRUST 2u     /* Python re / Rust regex: '.' excludes only \n (ECMA also \r,
                             * U+2028, U+2029); '[' inside a class and the class set
                             * operators && -- ~~ are refused (they differ between the two) */
#define REGEX_DOTALL 4u     /* '.' matches every character (the s flag) */
#define REGEX_NO_ANCHORS 8u /* ^ and $ refused everywhere (else accepted and dropped at the
                             * ends of top-level alternatives) */

#define REGEX_MAX_COUNT 10000 /* largest m, n of {m,n} */
#define REGEX_INF (1LL << 40) /* an unbounded length */

/* Length range, in code points, of the strings an expression generates
 * (hi = REGEX_INF: unbounded). */
typedef struct regex_len {
    long long lo, hi;
} regex_len_t;

/* Fitting a regex into length limits (JSON Schema minLength/maxLength next
 * to a pattern): the generated language becomes a subset of the regex's. */
typedef struct regex_limits {
    long long cap;   /* ≥ 0: repetition counts above it are cut to it; -1: none */
    long long floor; /* > 0: counts of repetitions that must occur (min ≥ 1) are raised to it;
                      * < 0: -floor, optional repetitions too; 0: none */
    bool bmp;        /* classes keep only characters of one UTF-16 unit, so a length
                      * in code points (JSON Schema) and in UTF-16 units (zod) agree */
} regex_limits_t;

/* Appends the expression for re[0..len) (UTF-8; not checked here) to out,
 * without enclosing parentheses, under lim (NULL = none) and flags.
 * *out_len (may be NULL) gets the length range generated. 0 ok; -1 refused:
 * *err_what (may be NULL) says what is not supported, *err_off (may be
 * NULL) its byte offset in re, and out holds a partial expression (the
 * caller drops it). */
int regex_compile(const char *re, size_t len, unsigned flags, const regex_limits_t *lim, strbuf_t *out,
                  regex_len_t *out_len, size_t *err_off, const char **err_what);

/* The expression for the whole regex, in parentheses, as a malloc'd string
 * (caller frees); re must be valid UTF-8. NULL on a refused regex: err gets
 * what is not supported and *err_off (may be NULL) its byte offset. */
char *regex_to_gbnf(const uint8_t *re, size_t len, unsigned flags, char *err, size_t errlen, size_t *err_off);

#endif
