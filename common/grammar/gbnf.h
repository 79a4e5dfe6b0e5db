/* gbnf.h — GBNF grammars (llama.cpp's grammar text format) compiled to a
 * byte-level pushdown automaton, for constrained decoding.
 *
 * Text format (what gbnf_parse accepts):
 *
 *   rule      ::= name "::=" alternatives (newline | end of text)
 *   name      [A-Za-z0-9_-]+ ; the grammar starts at the rule named "root"
 *   alternatives: sequences separated by "|"
 *   items     "literal"        UTF-8 text; escapes \n \r \t \\ \" \' \[ \] \xHH \uHHHH \UHHHHHHHH
 *             [a-z0-9_]        character class over code points, ranges a-z, [^...] negated,
 *                              the same escapes
 *             .                any code point
 *             name             another rule (defined anywhere in the text)
 *             ( alternatives ) a group
 *   postfix   * + ? {m} {m,} {m,n}  repetition of the item before (m, n ≤ GBNF_MAX_REPEAT)
 *   comments  # to the end of the line
 *
 * A rule's alternatives may span lines after "::=", after "|" and inside
 * parentheses; a line that starts with "|" continues the previous rule.
 *
 * Compiled form. Matching works on bytes, so a token that ends in the middle
 * of a UTF-8 character leaves the automaton in the middle of that character.
 * Every character class becomes the UTF-8 byte sequences of its code point
 * ranges (an ASCII-only class is one byte-set element; others an anonymous
 * rule whose alternatives are sequences of byte sets, as regex engines
 * compile UTF-8). Literals become one single-byte set per byte. Repetition
 * becomes tail-recursive anonymous rules (x* → R ::= x R | ε), so matching a
 * long repetition does not grow the stack.
 *
 * Elements: every alternative of every rule is a run of elements in el[]
 * ending with GR_END. A *position* is an element index. A *stack* is a list
 * of positions (bottom → top), each the next element to match in one open
 * rule; the top is always a GR_BYTES element. A matcher state is a set of
 * stacks (the grammar may be ambiguous); the empty stack means the whole
 * input matched "root" completely.
 *
 * Checks at parse time (all → error with line and column): syntax, undefined
 * rules, missing root, duplicate definitions, left recursion (a rule that can
 * reach itself without consuming a byte: it would loop forever), a rule that
 * can never finish, and size limits (GBNF_MAX_TEXT bytes of text,
 * GBNF_MAX_ELEMS elements after expansion, GBNF_MAX_RULES rules, nesting of
 * groups ≤ GBNF_MAX_NESTING).
 *
 * Ownership: gbnf_parse returns a grammar_t the caller frees with
 * gbnf_free (NULLs the pointer). A grammar is read-only after parsing and may
 * be shared by any number of threads. Arenas and states belong to one thread
 * at a time.
 */
#ifndef PAGODA_COMMON_GRAMMAR_GBNF_H
#define PAGODA_COMMON_GRAMMAR_GBNF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"

#define GBNF_MAX_TEXT (1u << 20)     /* bytes of grammar text */
#define GBNF_MAX_ELEMS (1 << 20)     /* compiled elements */
#define GBNF_MAX_RULES (1 << 16)     /* rules, anonymous ones included */
#define GBNF_MAX_NESTING 64          /* ( ... ) depth */
#define GBNF_MAX_REPEAT 10000        /* m and n of {m,n} */
#define GBNF_MAX_STACKS 64           /* stacks kept in one matcher state (more are dropped) */
#define GBNF_MAX_DEPTH 4096          /* frames in one stack (deeper → no match) */

enum gr_kind {
    GR_END = 0,    /* end of an alternative */
    GR_BYTES = 1,  /* one byte from set arg */
    GR_REF = 2,    /* rule arg */
};

typedef struct gr_elem {
    int32_t kind;  /* enum gr_kind */
    int32_t arg;   /* GR_BYTES: set index; GR_REF: rule index; GR_END: rule index */
} gr_elem_t;

typedef struct grammar {
    gr_elem_t *el;         /* (n_el) all alternatives, each ending in GR_END */
    int32_t n_el;
    uint64_t *sets;        /* (n_sets, 4) 256-bit byte sets */
    int32_t n_sets;
    int32_t *alt;          /* (n_alt) first element of each alternative */
    int32_t n_alt;
    int32_t *rule_alt0;    /* (n_rules) index into alt[] of the rule's first alternative */
    int32_t *rule_nalt;    /* (n_rules) its number of alternatives */
    char **rule_name;      /* (n_rules) "root", "x", or "x#3" for anonymous rules made inside x */
    int32_t n_rules;
    int32_t root;          /* rule index of "root" */
    int32_t *min_rest;     /* (n_el) fewest bytes that complete the alternative from here */
} grammar_t;

/* Parses and compiles grammar text. Returns 0 with *out set, or -1 with a
 * message in err ("line L, column C: ...") and *line / *col (1-based, may be
 * NULL) pointing at the problem; *out is then NULL. */
int gbnf_parse(const uint8_t *buf, size_t len, grammar_t **out, char *err, size_t errlen,
               int *line, int *col);
void gbnf_free(grammar_t **g);

/* ---- matching ----------------------------------------------------------- */

/* Stack ids: ≥ 0 a node in an arena; GR_EMPTY the empty stack (accepted);
 * GR_BOTTOM(i) ≤ -2: the bottom of a truncated stack i was reached (the
 * caller continues with what lies below; vocab_mask.c uses this to reuse
 * masks computed for the top frames only). */
#define GR_EMPTY (-1)
#define GR_BOTTOM(i) (-2 - (i))

typedef struct gr_node {
    int32_t pos;     /* element index (GR_BYTES or a return position) */
    int32_t parent;  /* next node down, or GR_EMPTY / GR_BOTTOM(i) */
} gr_node_t;

/* Persistent stacks as linked nodes, appended; reset to a mark to free. */
typedef struct gr_arena {
    gr_node_t *node;   /* (cap) */
    int32_t n, cap;
    int32_t work;      /* expansion steps left in the current call (runaway guard) */
} gr_arena_t;

void gr_arena_init(gr_arena_t *a);
void gr_arena_free(gr_arena_t *a);
int32_t gr_push(gr_arena_t *a, int32_t pos, int32_t parent);

/* Expands stack s (whose top may be a rule reference or a return position)
 * until every result has a GR_BYTES top or is GR_EMPTY / GR_BOTTOM; appends
 * the results to out[*n_out..cap) without duplicates. */
void gr_expand(const grammar_t *g, gr_arena_t *a, int32_t s, int32_t *out, int *n_out, int cap);

/* Advances every stack of in[0..n_in) by byte b; returns the number of
 * resulting stacks written to out (≤ cap, duplicates removed). GR_EMPTY and
 * GR_BOTTOM inputs have nothing left to match and are dropped. */
int gr_advance(const grammar_t *g, gr_arena_t *a, const int32_t *in, int n_in, uint8_t b,
               int32_t *out, int cap);

/* Fewest bytes that complete stack s (0 for GR_EMPTY). */
int64_t gr_cost(const grammar_t *g, const gr_arena_t *a, int32_t s);

/* A matcher state stored between steps: stacks as position arrays.
 * data = for each stack: [len, pos_bottom, ..., pos_top]. */
typedef struct gr_state {
    int32_t *data;      /* (cap) */
    int32_t n, cap;     /* used / allocated entries of data */
    int32_t n_stacks;
} gr_state_t;

void gr_state_free(gr_state_t *st);
/* The start state: root expanded. Returns 0, or -1 when it has no stack. */
int gr_state_start(const grammar_t *g, gr_arena_t *a, gr_state_t *st);
/* Loads st into the arena; writes its stack ids (≤ GBNF_MAX_STACKS) to ids. */
int gr_state_load(const gr_state_t *st, gr_arena_t *a, int32_t *ids);
/* Stores stacks ids[0..n) of the arena into st (replacing it). -1 when a
 * stack is deeper than GBNF_MAX_DEPTH. */
int gr_state_store(gr_state_t *st, const gr_arena_t *a, const int32_t *ids, int n);
/* Advances st by the bytes s[0..len); 0 ok (st updated), -1 no match (st unchanged). */
int gr_state_advance(const grammar_t *g, gr_arena_t *a, gr_state_t *st, const uint8_t *s,
                     size_t len);
/* True when some stack is empty (the text so far is a complete match). */
bool gr_state_accepting(const gr_state_t *st);
/* True when every stack is empty (nothing more may follow). */
bool gr_state_done(const gr_state_t *st);
/* Fewest bytes that complete st (min over its stacks). */
int64_t gr_state_cost(const grammar_t *g, const gr_state_t *st);
/* 1 when the whole text matches root, 0 when not (tests). */
int gbnf_match(const grammar_t *g, const uint8_t *s, size_t len);

/* ---- writing GBNF text ------------------------------------------------------
 * The one escaper for text that becomes a literal in generated grammars
 * (json_schema.c, lark.c, tool_grammar.c): '"' and '\' get a backslash,
 * every control character (0x00-0x1F) and DEL as \xHH, everything else
 * itself, so gbnf_parse reads the code points back and the literal matches
 * exactly those bytes. A literal is UTF-8 text: a byte that is not part of
 * valid UTF-8 cannot be matched by any literal, and gbnf_parse refuses the
 * text that holds it (give these functions UTF-8). */

/* Appends s[0..n) as one quoted GBNF literal ("..."). */
void gbnf_escape_literal(strbuf_t *b, const char *s, size_t n);
/* Appends code point cp as it stands between the quotes of a literal. */
void gbnf_escape_cp(strbuf_t *b, uint32_t cp);

#endif
