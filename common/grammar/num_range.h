/* num_range.h — JSON numbers between bounds, and multiples, as GBNF rules.
 *
 * The schema compiler (json_schema.c) reads an integer or number node's
 * minimum / maximum / exclusiveMinimum / exclusiveMaximum / multipleOf into
 * a num_range_t; this writes the rules that generate exactly a subset of the
 * numbers the keywords accept:
 *   - integers of at most 15 digits (NUM_RANGE_MAX), without leading zeros,
 *     written digit range by digit range ("1" [5-9] | [2-8] [0-9] | ...);
 *   - numbers without an exponent, on the coarsest decimal grid (≤ 6
 *     fraction digits) that has a value inside the bounds, each bound checked
 *     on the decimal text a client parses (so 0.3 > 0.3 is never generated);
 *   - multipleOf a positive integer m (≤ 10^12), or 1/n (integers generated):
 *     few multiples listed, else every multiple with a remainder automaton
 *     over the digits (m = c·10^j with c ≤ 64) or the endings of a power of
 *     ten m divides.
 *
 * Rules are written as "<pfx>sN ::= ...\n" lines into out, numbered on from
 * *n_rules (which counts them), and refer to the shared rules
 * <pfx>integer / <pfx>number of an unbounded node; the returned rule is the
 * node's.
 */
#ifndef PAGODA_COMMON_GRAMMAR_NUM_RANGE_H
#define PAGODA_COMMON_GRAMMAR_NUM_RANGE_H

#include <stdbool.h>
#include <stddef.h>

#include "common/strbuf.h"

#define NUM_RANGE_MAX 999999999999999LL /* integers have at most 15 digits */

/* One side of a range: value v, exclusive or not; set = false when absent
 * or when it cannot bind what is generated (|v| ≥ 10^15 on the open side). */
typedef struct num_bound {
    bool set, excl;
    double v;
} num_bound_t;

typedef struct num_range {
    num_bound_t lo, hi; /* minimum side, maximum side */
    bool has_mult;      /* multipleOf given */
    double mult;        /* its value (any number: checked here) */
    bool integer;       /* type integer (else number) */
} num_range_t;

/* Writes the node's rules; returns its rule number (≥ 0), or -1: *err_key
 * names the keyword refused ("minimum", "maximum", "multipleOf") and err
 * says why, or *err_key is NULL when max_rules would be passed (the schema
 * is too large). Rules already written stay in out on failure. */
int num_range_rules(const num_range_t *spec, strbuf_t *out, const char *pfx, int *n_rules, int max_rules,
                    const char **err_key, char *err, size_t errlen);

#endif
