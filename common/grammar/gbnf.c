/* gbnf.c — GBNF text → byte-level pushdown automaton, and its matcher
 * (see gbnf.h for the format and the compiled form).
 *
 * Parsing is one pass that builds rules out of growable alternatives; rule
 * references are resolved by name at the end. Then the alternatives are
 * flattened into el[], and three analyses run on it: the fewest bytes each
 * rule needs (Knuth's generalization of Dijkstra to grammars; a rule with
 * no finite cost can never finish), nullability (cost 0), and left
 * recursion (a cycle through references that can be reached without
 * consuming a byte). */
#include "common/grammar/gbnf.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/hex.h"
#include "common/utf8.h"
#include "common/xalloc.h"

#define COST_INF ((int64_t)1 << 40)
#define EXPAND_MAX_DEPTH 512     /* nested expansions in one gr_expand call */
#define ADVANCE_WORK (1 << 12)   /* expansion steps per advance (runaway guard) */

/* ---- parser state ---------------------------------------------------------- */

typedef struct palt {
    gr_elem_t *e;      /* (cap) elements so far (no GR_END) */
    int32_t n, cap;
} palt_t;

typedef struct prule {
    char *name;
    bool defined;
    size_t ref_off;    /* offset of the first reference (for "undefined rule") */
    size_t def_off;    /* offset of the definition / creating item */
    int32_t *alts;     /* (cap_alts) indices into parser.alts */
    int32_t n_alts, cap_alts;
} prule_t;

typedef struct parser {
    const char *s;          /* the text (len bytes, not NUL-terminated) */
    size_t len, p;          /* cursor */
    prule_t *rules;         /* (cap_rules) */
    int32_t n_rules, cap_rules;
    int32_t *htab;          /* (hcap) named rule index + 1, 0 empty */
    uint32_t hcap;
    palt_t *alts;           /* (cap_alts) */
    int32_t n_alts, cap_alts;
    uint64_t *sets;         /* (cap_sets, 4) */
    int32_t n_sets, cap_sets;
    int32_t *range_set;     /* (65536) set index + 1 of byte range lo..hi, 0 none */
    int64_t n_elems;        /* elements emitted so far (limit check) */
    int depth;              /* ( ) nesting */
    int32_t cur_rule;       /* named rule being defined (anonymous rule names) */
    bool failed;
    size_t err_off;
    char *err;
    size_t errlen;
} parser_t;

static void fail(parser_t *P, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void fail(parser_t *P, size_t off, const char *fmt, ...)
{
    if (P->failed)
        return;
    P->failed = true;
    P->err_off = off;
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(P->err, P->errlen, fmt, ap);
    va_end(ap);
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

static int32_t rule_new(parser_t *P, char *name, size_t off)
{
    if (P->n_rules >= GBNF_MAX_RULES) {
        fail(P, off, "too many rules (more than %d after expanding repetitions)", GBNF_MAX_RULES);
        free(name);
        return -1;
    }
    if (P->n_rules == P->cap_rules) {
        P->cap_rules = P->cap_rules ? P->cap_rules * 2 : 64;
        P->rules = xrealloc(P->rules, (size_t)P->cap_rules * sizeof *P->rules);
    }
    prule_t *r = &P->rules[P->n_rules];
    memset(r, 0, sizeof *r);
    r->name = name;
    r->def_off = off;
    r->ref_off = off;
    return P->n_rules++;
}

static void htab_grow(parser_t *P)
{
    uint32_t cap = P->hcap ? P->hcap * 2 : 256;
    int32_t *t = xcalloc(cap, sizeof *t);
    for (uint32_t i = 0; i < P->hcap; i++) {
        if (!P->htab[i])
            continue;
        const char *nm = P->rules[P->htab[i] - 1].name;
        uint32_t h = name_hash(nm, strlen(nm)) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = P->htab[i];
    }
    free(P->htab);
    P->htab = t;
    P->hcap = cap;
}

/* The named rule `name` (created, undefined, when new). -1 on failure. */
static int32_t rule_named(parser_t *P, const char *name, size_t n, size_t off)
{
    if (!P->hcap || (uint32_t)P->n_rules * 2 >= P->hcap)
        htab_grow(P);
    uint32_t h = name_hash(name, n) & (P->hcap - 1);
    while (P->htab[h]) {
        const char *nm = P->rules[P->htab[h] - 1].name;
        if (strlen(nm) == n && memcmp(nm, name, n) == 0)
            return P->htab[h] - 1;
        h = (h + 1) & (P->hcap - 1);
    }
    int32_t r = rule_new(P, xstrndup(name, n), off);
    if (r >= 0)
        P->htab[h] = r + 1;
    return r;
}

/* An anonymous rule, named after the rule being defined. */
static int32_t rule_anon(parser_t *P, size_t off)
{
    char buf[300];
    const char *base = P->cur_rule >= 0 ? P->rules[P->cur_rule].name : "anon";
    snprintf(buf, sizeof buf, "%.250s#%d", base, P->n_rules);
    int32_t r = rule_new(P, xstrdup(buf), off);
    if (r >= 0)
        P->rules[r].defined = true;
    return r;
}

static int32_t alt_new(parser_t *P, int32_t rule)
{
    if (P->n_alts == P->cap_alts) {
        P->cap_alts = P->cap_alts ? P->cap_alts * 2 : 64;
        P->alts = xrealloc(P->alts, (size_t)P->cap_alts * sizeof *P->alts);
    }
    memset(&P->alts[P->n_alts], 0, sizeof(palt_t));
    prule_t *r = &P->rules[rule];
    if (r->n_alts == r->cap_alts) {
        r->cap_alts = r->cap_alts ? r->cap_alts * 2 : 4;
        r->alts = xrealloc(r->alts, (size_t)r->cap_alts * sizeof *r->alts);
    }
    r->alts[r->n_alts++] = P->n_alts;
    return P->n_alts++;
}

static void emit(parser_t *P, int32_t a, int32_t kind, int32_t arg)
{
    if (++P->n_elems > GBNF_MAX_ELEMS) {
        fail(P, P->p, "the grammar is too large (more than %d elements after expanding repetitions)",
             GBNF_MAX_ELEMS);
        return;
    }
    palt_t *x = &P->alts[a];
    if (x->n == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 8;
        x->e = xrealloc(x->e, (size_t)x->cap * sizeof *x->e);
    }
    x->e[x->n].kind = kind;
    x->e[x->n].arg = arg;
    x->n++;
}

static int32_t set_new(parser_t *P)
{
    if (P->n_sets == P->cap_sets) {
        P->cap_sets = P->cap_sets ? P->cap_sets * 2 : 64;
        P->sets = xrealloc(P->sets, (size_t)P->cap_sets * 4 * sizeof *P->sets);
    }
    memset(&P->sets[(size_t)P->n_sets * 4], 0, 4 * sizeof *P->sets);
    return P->n_sets++;
}

/* The set of bytes lo..hi (interned). */
static int32_t set_range(parser_t *P, uint8_t lo, uint8_t hi)
{
    int32_t *slot = &P->range_set[lo * 256 + hi];
    if (*slot)
        return *slot - 1;
    int32_t s = set_new(P);
    for (int b = lo; b <= hi; b++)
        P->sets[(size_t)s * 4 + (b >> 6)] |= 1ull << (b & 63);
    *slot = s + 1;
    return s;
}

/* ---- lexing ---------------------------------------------------------------- */

static bool at_end(const parser_t *P) { return P->p >= P->len; }
static int peek(const parser_t *P) { return at_end(P) ? -1 : (uint8_t)P->s[P->p]; }

static bool is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Skips blanks and comments; newlines too when nl. */
static void skip_space(parser_t *P, bool nl)
{
    while (!at_end(P)) {
        int c = peek(P);
        if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && nl)) {
            P->p++;
        } else if (c == '#') {
            while (!at_end(P) && peek(P) != '\n' && peek(P) != '\r')
                P->p++;
        } else {
            break;
        }
    }
}

/* Decodes one UTF-8 character at the cursor; -1 (and fails) when invalid. */
static int32_t read_utf8(parser_t *P)
{
    const uint8_t *s = (const uint8_t *)P->s + P->p;
    size_t left = P->len - P->p;
    uint8_t c = s[0];
    int n;
    uint32_t cp, min;
    if (c < 0x80) {
        P->p++;
        return c;
    } else if (c >= 0xC2 && c <= 0xDF) {
        n = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4, cp = c & 0x07, min = 0x10000;
    } else {
        fail(P, P->p, "invalid UTF-8 byte 0x%02x", c);
        return -1;
    }
    if (left < (size_t)n) {
        fail(P, P->p, "truncated UTF-8 character");
        return -1;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            fail(P, P->p, "invalid UTF-8 character");
            return -1;
        }
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        fail(P, P->p, "invalid UTF-8 character");
        return -1;
    }
    P->p += (size_t)n;
    return (int32_t)cp;
}

/* One character of a literal or class (escape or UTF-8); -1 on error. */
static int32_t read_char(parser_t *P)
{
    if (at_end(P)) {
        fail(P, P->p, "unexpected end of text");
        return -1;
    }
    if (peek(P) != '\\')
        return read_utf8(P);
    size_t at = P->p++;
    if (at_end(P)) {
        fail(P, at, "unfinished escape");
        return -1;
    }
    int c = (uint8_t)P->s[P->p++];
    int nhex = 0;
    switch (c) {
    case 'n': return '\n';
    case 'r': return '\r';
    case 't': return '\t';
    case '0': return 0;
    case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
        return c;
    case 'x': nhex = 2; break;
    case 'u': nhex = 4; break;
    case 'U': nhex = 8; break;
    default:
        fail(P, at, "unknown escape '\\%c'", c >= 32 && c < 127 ? c : '?');
        return -1;
    }
    uint32_t v = 0;
    for (int i = 0; i < nhex; i++) {
        int h = at_end(P) ? -1 : hex_value(peek(P));
        if (h < 0) {
            fail(P, at, "escape '\\%c' needs %d hex digits", c, nhex);
            return -1;
        }
        v = v * 16 + (uint32_t)h;
        P->p++;
    }
    if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
        fail(P, at, "escape is not a Unicode scalar value");
        return -1;
    }
    return (int32_t)v;
}

static int utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    } else if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | (cp >> 18));
    out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- items ----------------------------------------------------------------- */

static void parse_literal(parser_t *P, int32_t a)
{
    size_t at = P->p++; /* opening quote */
    for (;;) {
        if (at_end(P)) {
            fail(P, at, "unterminated string literal");
            return;
        }
        if (peek(P) == '"') {
            P->p++;
            return;
        }
        if (peek(P) == '\n' || peek(P) == '\r') {
            fail(P, at, "unterminated string literal (newline inside)");
            return;
        }
        int32_t cp = read_char(P);
        if (cp < 0)
            return;
        uint8_t b[4];
        int n = utf8_encode((uint32_t)cp, b);
        for (int i = 0; i < n; i++)
            emit(P, a, GR_BYTES, set_range(P, b[i], b[i]));
    }
}

typedef struct cprange {
    uint32_t lo, hi;
} cprange_t;

static int cmp_range(const void *x, const void *y)
{
    const cprange_t *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Emits into rule r the UTF-8 byte sequences of code points lo..hi (lo ≥ 0x80). */
static void u8_range(parser_t *P, int32_t r, uint32_t lo, uint32_t hi)
{
    static const uint32_t top[3] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= top[i] && hi > top[i]) {
            u8_range(P, r, lo, top[i]);
            u8_range(P, r, top[i] + 1, hi);
            return;
        }
    uint8_t L[4], H[4];
    int n = utf8_encode(lo, L);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                u8_range(P, r, lo, lo | m);
                u8_range(P, r, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                u8_range(P, r, lo, (hi & ~m) - 1);
                u8_range(P, r, hi & ~m, hi);
                return;
            }
        }
    }
    utf8_encode(hi, H);
    int32_t a = alt_new(P, r);
    for (int k = 0; k < n; k++)
        emit(P, a, GR_BYTES, set_range(P, L[k], H[k]));
}

/* Emits the class (sorted, merged, surrogates removed by the caller) into alt a. */
static void emit_class(parser_t *P, int32_t a, const cprange_t *rg, int n, size_t off)
{
    bool ascii_only = n == 0 || rg[n - 1].hi < 0x80;
    int32_t aset = -1;
    if (n > 0 && rg[0].lo < 0x80) {
        aset = set_new(P);
        for (int i = 0; i < n && rg[i].lo < 0x80; i++)
            for (uint32_t c = rg[i].lo; c <= rg[i].hi && c < 0x80; c++)
                P->sets[(size_t)aset * 4 + (c >> 6)] |= 1ull << (c & 63);
    }
    if (ascii_only) {
        if (aset < 0)
            aset = set_new(P); /* matches nothing */
        emit(P, a, GR_BYTES, aset);
        return;
    }
    int32_t r = rule_anon(P, off);
    if (r < 0)
        return;
    if (aset >= 0) {
        int32_t x = alt_new(P, r);
        emit(P, x, GR_BYTES, aset);
    }
    for (int i = 0; i < n && !P->failed; i++) {
        uint32_t lo = rg[i].lo < 0x80 ? 0x80 : rg[i].lo;
        if (rg[i].hi >= lo)
            u8_range(P, r, lo, rg[i].hi);
    }
    emit(P, a, GR_REF, r);
}

/* Normalizes n ranges in rg (capacity ≥ 2n + 4): sort, merge, optionally
 * complement over the scalar values, remove surrogates. Returns the count. */
static int class_normalize(cprange_t *rg, int n, bool negate)
{
    qsort(rg, (size_t)n, sizeof *rg, cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m > 0 && rg[i].lo <= rg[m - 1].hi + 1) {
            if (rg[i].hi > rg[m - 1].hi)
                rg[m - 1].hi = rg[i].hi;
        } else {
            rg[m++] = rg[i];
        }
    }
    if (negate) {
        cprange_t *tmp = xmalloc((size_t)(m + 1) * sizeof *tmp);
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (rg[i].lo > next)
                tmp[k++] = (cprange_t){next, rg[i].lo - 1};
            next = rg[i].hi + 1;
        }
        if (next <= 0x10FFFF)
            tmp[k++] = (cprange_t){next, 0x10FFFF};
        memcpy(rg, tmp, (size_t)k * sizeof *tmp);
        free(tmp);
        m = k;
    }
    /* cut out D800..DFFF */
    int k = 0;
    cprange_t *out = xmalloc((size_t)(2 * m + 1) * sizeof *out);
    for (int i = 0; i < m; i++) {
        cprange_t x = rg[i];
        if (x.hi < 0xD800 || x.lo > 0xDFFF) {
            out[k++] = x;
            continue;
        }
        if (x.lo < 0xD800)
            out[k++] = (cprange_t){x.lo, 0xD7FF};
        if (x.hi > 0xDFFF)
            out[k++] = (cprange_t){0xE000, x.hi};
    }
    memcpy(rg, out, (size_t)k * sizeof *out);
    free(out);
    return k;
}

static void parse_class(parser_t *P, int32_t a)
{
    size_t at = P->p++; /* '[' */
    bool negate = false;
    if (peek(P) == '^') {
        negate = true;
        P->p++;
    }
    int n = 0, cap = 16;
    cprange_t *rg = xmalloc((size_t)cap * sizeof *rg);
    for (;;) {
        if (at_end(P)) {
            fail(P, at, "unterminated character class");
            break;
        }
        if (peek(P) == ']') {
            P->p++;
            break;
        }
        int32_t lo = read_char(P);
        if (lo < 0)
            break;
        int32_t hi = lo;
        if (peek(P) == '-' && P->p + 1 < P->len && P->s[P->p + 1] != ']') {
            P->p++;
            size_t hat = P->p;
            hi = read_char(P);
            if (hi < 0)
                break;
            if (hi < lo) {
                fail(P, hat, "character range is out of order");
                break;
            }
        }
        if (2 * n + 8 >= cap) {
            cap *= 2;
            rg = xrealloc(rg, (size_t)cap * sizeof *rg);
        }
        rg[n++] = (cprange_t){(uint32_t)lo, (uint32_t)hi};
    }
    if (!P->failed) {
        rg = xrealloc(rg, (size_t)(2 * n + 8) * sizeof *rg);
        n = class_normalize(rg, n, negate);
        emit_class(P, a, rg, n, at);
    }
    free(rg);
}

static void parse_alternates(parser_t *P, int32_t rule, bool nested);

/* Applies repetition {min, max} (max -1 = unbounded) to the item that starts
 * at element `start` of alternative a. */
static void repeat(parser_t *P, int32_t a, int32_t start, int min, int max, size_t off)
{
    int32_t k = P->alts[a].n - start;
    gr_elem_t x;
    if (k == 1) {
        x = P->alts[a].e[start];
    } else {
        /* several elements (a literal): wrap them in a rule */
        int32_t r = rule_anon(P, off);
        if (r < 0)
            return;
        int32_t ra = alt_new(P, r);
        for (int32_t i = 0; i < k; i++)
            emit(P, ra, P->alts[a].e[start + i].kind, P->alts[a].e[start + i].arg);
        x.kind = GR_REF;
        x.arg = r;
    }
    P->alts[a].n = start;
    if (k == 0)
        return; /* repeating nothing is nothing */
    for (int i = 0; i < min && !P->failed; i++)
        emit(P, a, x.kind, x.arg);
    if (max < 0) {
        int32_t r = rule_anon(P, off); /* R ::= x R | ε */
        if (r < 0)
            return;
        int32_t ra = alt_new(P, r);
        emit(P, ra, x.kind, x.arg);
        emit(P, ra, GR_REF, r);
        alt_new(P, r);
        emit(P, a, GR_REF, r);
    } else if (max > min) {
        int32_t prev = -1; /* R_j ::= x R_{j-1} | ε, R_1 ::= x | ε */
        for (int j = 1; j <= max - min && !P->failed; j++) {
            int32_t r = rule_anon(P, off);
            if (r < 0)
                return;
            int32_t ra = alt_new(P, r);
            emit(P, ra, x.kind, x.arg);
            if (prev >= 0)
                emit(P, ra, GR_REF, prev);
            alt_new(P, r);
            prev = r;
        }
        if (prev >= 0)
            emit(P, a, GR_REF, prev);
    }
}

static int read_uint(parser_t *P, int *out)
{
    size_t at = P->p;
    long v = 0;
    if (at_end(P) || peek(P) < '0' || peek(P) > '9') {
        fail(P, at, "expected a number");
        return -1;
    }
    while (!at_end(P) && peek(P) >= '0' && peek(P) <= '9') {
        v = v * 10 + (peek(P) - '0');
        if (v > GBNF_MAX_REPEAT) {
            fail(P, at, "repetition count above %d", GBNF_MAX_REPEAT);
            return -1;
        }
        P->p++;
    }
    *out = (int)v;
    return 0;
}

static void parse_postfix(parser_t *P, int32_t a, int32_t start)
{
    for (;;) {
        int c = peek(P);
        size_t at = P->p;
        if (c == '*') {
            P->p++;
            repeat(P, a, start, 0, -1, at);
        } else if (c == '+') {
            P->p++;
            repeat(P, a, start, 1, -1, at);
        } else if (c == '?') {
            P->p++;
            repeat(P, a, start, 0, 1, at);
        } else if (c == '{') {
            P->p++;
            skip_space(P, false);
            int mn = 0, mx = 0;
            if (read_uint(P, &mn) < 0)
                return;
            skip_space(P, false);
            if (peek(P) == ',') {
                P->p++;
                skip_space(P, false);
                if (peek(P) == '}') {
                    mx = -1;
                } else {
                    if (read_uint(P, &mx) < 0)
                        return;
                    if (mx < mn) {
                        fail(P, at, "repetition {%d,%d}: the maximum is below the minimum", mn, mx);
                        return;
                    }
                }
            } else {
                mx = mn;
            }
            skip_space(P, false);
            if (peek(P) != '}') {
                fail(P, P->p, "expected '}' to close the repetition");
                return;
            }
            P->p++;
            repeat(P, a, start, mn, mx, at);
        } else {
            return;
        }
        if (P->failed)
            return;
    }
}

static void parse_sequence(parser_t *P, int32_t a, bool nested)
{
    for (;;) {
        skip_space(P, nested);
        if (P->failed || at_end(P))
            return;
        int32_t start = P->alts[a].n;
        int c = peek(P);
        size_t at = P->p;
        if (c == '"') {
            parse_literal(P, a);
        } else if (c == '[') {
            parse_class(P, a);
        } else if (c == '.') {
            P->p++;
            cprange_t rg[8] = {{0, 0x10FFFF}};
            int n = class_normalize(rg, 1, false);
            emit_class(P, a, rg, n, at);
        } else if (is_name_char(c)) {
            size_t b = P->p;
            while (!at_end(P) && is_name_char(peek(P)))
                P->p++;
            size_t e = P->p;
            skip_space(P, false);
            if (P->len - P->p >= 3 && memcmp(P->s + P->p, "::=", 3) == 0) {
                fail(P, b, "expected a newline before the next rule '%.*s'", (int)(e - b > 64 ? 64 : e - b),
                     P->s + b);
                return;
            }
            P->p = e;
            int32_t r = rule_named(P, P->s + b, e - b, b);
            if (r < 0)
                return;
            emit(P, a, GR_REF, r);
        } else if (c == '(') {
            P->p++;
            if (++P->depth > GBNF_MAX_NESTING) {
                fail(P, at, "groups nested deeper than %d", GBNF_MAX_NESTING);
                return;
            }
            int32_t r = rule_anon(P, at);
            if (r < 0)
                return;
            parse_alternates(P, r, true);
            if (P->failed)
                return;
            skip_space(P, true);
            if (peek(P) != ')') {
                fail(P, at, "unclosed '('");
                return;
            }
            P->p++;
            P->depth--;
            emit(P, a, GR_REF, r);
        } else {
            return;
        }
        if (P->failed)
            return;
        parse_postfix(P, a, start);
        if (P->failed)
            return;
    }
}

static void parse_alternates(parser_t *P, int32_t rule, bool nested)
{
    for (;;) {
        int32_t a = alt_new(P, rule);
        parse_sequence(P, a, nested);
        if (P->failed)
            return;
        skip_space(P, nested);
        if (peek(P) == '|') {
            P->p++;
            skip_space(P, true);
            continue;
        }
        if (!nested) {
            /* a following line that starts with '|' continues the rule */
            size_t save = P->p;
            skip_space(P, true);
            if (peek(P) == '|') {
                P->p++;
                skip_space(P, true);
                continue;
            }
            P->p = save;
        }
        return;
    }
}

static void parse_rules(parser_t *P)
{
    for (;;) {
        skip_space(P, true);
        if (at_end(P) || P->failed)
            return;
        size_t b = P->p;
        while (!at_end(P) && is_name_char(peek(P)))
            P->p++;
        if (P->p == b) {
            fail(P, b, "expected a rule name");
            return;
        }
        size_t e = P->p;
        skip_space(P, false);
        if (P->len - P->p < 3 || memcmp(P->s + P->p, "::=", 3) != 0) {
            fail(P, P->p, "expected '::=' after the rule name");
            return;
        }
        P->p += 3;
        int32_t r = rule_named(P, P->s + b, e - b, b);
        if (r < 0)
            return;
        if (P->rules[r].defined) {
            fail(P, b, "rule '%.*s' is defined twice", (int)(e - b > 64 ? 64 : e - b), P->s + b);
            return;
        }
        P->rules[r].defined = true;
        P->rules[r].def_off = b;
        P->cur_rule = r;
        skip_space(P, true);
        parse_alternates(P, r, false);
        if (P->failed)
            return;
        skip_space(P, false);
        if (!at_end(P) && peek(P) != '\n' && peek(P) != '\r') {
            int c = peek(P);
            if (c == ')')
                fail(P, P->p, "unmatched ')'");
            else
                fail(P, P->p, "unexpected character '%c'", c >= 32 && c < 127 ? c : '?');
            return;
        }
    }
}

/* ---- analyses ----------------------------------------------------------------- */

typedef struct hitem {
    int64_t cost;
    int32_t rule;
} hitem_t;

static void heap_push(hitem_t *h, int32_t *n, hitem_t x)
{
    int32_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2].cost > x.cost) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = x;
}

static hitem_t heap_pop(hitem_t *h, int32_t *n)
{
    hitem_t top = h[0], x = h[--(*n)];
    int32_t i = 0;
    for (;;) {
        int32_t l = 2 * i + 1, m = l;
        if (l >= *n)
            break;
        if (l + 1 < *n && h[l + 1].cost < h[l].cost)
            m = l + 1;
        if (h[m].cost >= x.cost)
            break;
        h[i] = h[m];
        i = m;
    }
    h[i] = x;
    return top;
}

/* rule_cost[r] = fewest bytes rule r matches (COST_INF: never finishes). */
static void min_costs(const grammar_t *g, int64_t *rule_cost)
{
    int32_t n_alt = g->n_alt, n_rules = g->n_rules;
    int32_t *alt_rule = xmalloc((size_t)n_alt * sizeof *alt_rule);
    int32_t *pending = xcalloc((size_t)n_alt, sizeof *pending);
    int64_t *sum = xcalloc((size_t)n_alt, sizeof *sum);
    int32_t *occ_n = xcalloc((size_t)n_rules + 1, sizeof *occ_n);
    for (int32_t r = 0; r < n_rules; r++)
        for (int32_t i = 0; i < g->rule_nalt[r]; i++)
            alt_rule[g->rule_alt0[r] + i] = r;
    int32_t n_occ = 0;
    for (int32_t a = 0; a < n_alt; a++)
        for (int32_t e = g->alt[a]; g->el[e].kind != GR_END; e++) {
            if (g->el[e].kind == GR_REF) {
                pending[a]++;
                occ_n[g->el[e].arg + 1]++;
                n_occ++;
            } else {
                sum[a]++;
            }
        }
    for (int32_t r = 0; r < n_rules; r++)
        occ_n[r + 1] += occ_n[r];
    int32_t *occ = xmalloc(((size_t)n_occ + 1) * sizeof *occ);
    int32_t *fill = xmalloc(((size_t)n_rules + 1) * sizeof *fill);
    memcpy(fill, occ_n, ((size_t)n_rules + 1) * sizeof *fill);
    for (int32_t a = 0; a < n_alt; a++)
        for (int32_t e = g->alt[a]; g->el[e].kind != GR_END; e++)
            if (g->el[e].kind == GR_REF)
                occ[fill[g->el[e].arg]++] = a;
    hitem_t *heap = xmalloc(((size_t)n_alt + 1) * sizeof *heap);
    int32_t hn = 0;
    bool *done = xcalloc((size_t)n_rules, sizeof *done);
    for (int32_t r = 0; r < n_rules; r++)
        rule_cost[r] = COST_INF;
    for (int32_t a = 0; a < n_alt; a++)
        if (pending[a] == 0)
            heap_push(heap, &hn, (hitem_t){sum[a], alt_rule[a]});
    while (hn > 0) {
        hitem_t it = heap_pop(heap, &hn);
        if (done[it.rule])
            continue;
        done[it.rule] = true;
        rule_cost[it.rule] = it.cost;
        for (int32_t k = occ_n[it.rule]; k < occ_n[it.rule + 1]; k++) {
            int32_t a = occ[k];
            sum[a] += it.cost;
            if (sum[a] > COST_INF)
                sum[a] = COST_INF;
            if (--pending[a] == 0)
                heap_push(heap, &hn, (hitem_t){sum[a], alt_rule[a]});
        }
    }
    free(alt_rule);
    free(pending);
    free(sum);
    free(occ_n);
    free(occ);
    free(fill);
    free(heap);
    free(done);
}

/* A rule reachable from itself through left corners; -1 when none. */
static int32_t find_left_recursion(const grammar_t *g, const int64_t *rule_cost)
{
    int32_t n = g->n_rules;
    uint8_t *color = xcalloc((size_t)n, 1); /* 0 new, 1 on path, 2 done */
    /* explicit DFS stack: (rule, alt index, element) */
    typedef struct { int32_t r, ai, e; } fr_t;
    fr_t *st = xmalloc((size_t)n * sizeof *st);
    int32_t found = -1;
    for (int32_t r0 = 0; r0 < n && found < 0; r0++) {
        if (color[r0])
            continue;
        int32_t sp = 0;
        st[sp++] = (fr_t){r0, 0, -1};
        color[r0] = 1;
        while (sp > 0 && found < 0) {
            fr_t *f = &st[sp - 1];
            if (f->ai >= g->rule_nalt[f->r]) {
                color[f->r] = 2;
                sp--;
                continue;
            }
            if (f->e < 0)
                f->e = g->alt[g->rule_alt0[f->r] + f->ai];
            gr_elem_t x = g->el[f->e];
            if (x.kind != GR_REF) { /* a byte or the end stops the left corner */
                f->ai++;
                f->e = -1;
                continue;
            }
            /* next time: the element after x if x is nullable, else the next alt */
            if (rule_cost[x.arg] == 0) {
                f->e++;
            } else {
                f->ai++;
                f->e = -1;
            }
            if (color[x.arg] == 1) {
                found = x.arg;
            } else if (color[x.arg] == 0) {
                color[x.arg] = 1;
                st[sp++] = (fr_t){x.arg, 0, -1};
            }
        }
    }
    free(color);
    free(st);
    return found;
}

static void offset_to_linecol(const char *s, size_t len, size_t off, int *line, int *col)
{
    int l = 1, c = 1;
    for (size_t i = 0; i < off && i < len; i++) {
        if (s[i] == '\n') {
            l++;
            c = 1;
        } else if (((uint8_t)s[i] & 0xC0) != 0x80) {
            c++;
        }
    }
    *line = l;
    *col = c;
}

void gbnf_free(grammar_t **pg)
{
    if (!pg || !*pg)
        return;
    grammar_t *g = *pg;
    free(g->el);
    free(g->sets);
    free(g->alt);
    free(g->rule_alt0);
    free(g->rule_nalt);
    for (int32_t i = 0; g->rule_name && i < g->n_rules; i++)
        free(g->rule_name[i]);
    free(g->rule_name);
    free(g->min_rest);
    free(g);
    *pg = NULL;
}

int gbnf_parse(const uint8_t *buf, size_t len, grammar_t **out, char *err, size_t errlen, int *line,
               int *col)
{
    *out = NULL;
    parser_t P = {.s = (const char *)buf, .len = len, .err = err, .errlen = errlen, .cur_rule = -1};
    grammar_t *g = NULL;
    int64_t *rule_cost = NULL;
    if (err && errlen)
        err[0] = 0;
    if (len > GBNF_MAX_TEXT) {
        fail(&P, 0, "the grammar text is longer than %u bytes", GBNF_MAX_TEXT);
        goto err;
    }
    P.range_set = xcalloc(65536, sizeof *P.range_set);
    parse_rules(&P);
    if (P.failed)
        goto err;
    int32_t root = -1;
    for (int32_t r = 0; r < P.n_rules; r++) {
        if (!P.rules[r].defined) {
            fail(&P, P.rules[r].ref_off, "undefined rule '%.64s'", P.rules[r].name);
            goto err;
        }
        if (strcmp(P.rules[r].name, "root") == 0)
            root = r;
    }
    if (root < 0) {
        fail(&P, 0, "the grammar has no 'root' rule");
        goto err;
    }

    /* flatten */
    g = xcalloc(1, sizeof *g);
    g->n_rules = P.n_rules;
    g->root = root;
    g->n_alt = P.n_alts;
    int64_t n_el = 0;
    for (int32_t a = 0; a < P.n_alts; a++)
        n_el += P.alts[a].n + 1;
    g->el = xmalloc((size_t)n_el * sizeof *g->el);
    g->alt = xmalloc(((size_t)P.n_alts + 1) * sizeof *g->alt);
    g->rule_alt0 = xmalloc((size_t)P.n_rules * sizeof *g->rule_alt0);
    g->rule_nalt = xmalloc((size_t)P.n_rules * sizeof *g->rule_nalt);
    g->rule_name = xcalloc((size_t)P.n_rules, sizeof *g->rule_name);
    int32_t ai = 0, ei = 0;
    for (int32_t r = 0; r < P.n_rules; r++) {
        prule_t *pr = &P.rules[r];
        g->rule_alt0[r] = ai;
        g->rule_nalt[r] = pr->n_alts;
        g->rule_name[r] = pr->name;
        pr->name = NULL;
        for (int32_t k = 0; k < pr->n_alts; k++) {
            palt_t *pa = &P.alts[pr->alts[k]];
            g->alt[ai++] = ei;
            for (int32_t i = 0; i < pa->n; i++)
                g->el[ei++] = pa->e[i];
            g->el[ei++] = (gr_elem_t){GR_END, r};
        }
    }
    g->n_el = ei;
    g->sets = P.sets;
    g->n_sets = P.n_sets;
    P.sets = NULL;

    rule_cost = xmalloc((size_t)g->n_rules * sizeof *rule_cost);
    min_costs(g, rule_cost);
    for (int32_t r = 0; r < g->n_rules; r++)
        if (rule_cost[r] >= COST_INF) {
            fail(&P, P.rules[r].def_off, "rule '%.64s' can never finish (every alternative recurses)",
                 g->rule_name[r]);
            goto err;
        }
    int32_t lr = find_left_recursion(g, rule_cost);
    if (lr >= 0) {
        fail(&P, P.rules[lr].def_off, "rule '%.64s' is left-recursive", g->rule_name[lr]);
        goto err;
    }
    g->min_rest = xmalloc((size_t)g->n_el * sizeof *g->min_rest);
    for (int32_t a = 0; a < g->n_alt; a++) {
        int32_t e = g->alt[a];
        while (g->el[e].kind != GR_END)
            e++;
        int64_t acc = 0;
        g->min_rest[e] = 0;
        for (e--; e >= g->alt[a]; e--) {
            acc += g->el[e].kind == GR_BYTES ? 1 : rule_cost[g->el[e].arg];
            if (acc > (1 << 30))
                acc = 1 << 30;
            g->min_rest[e] = (int32_t)acc;
        }
    }
    free(rule_cost);
    rule_cost = NULL;
    *out = g;
    g = NULL;
    goto done;
err:
    if (line && col)
        offset_to_linecol(P.s, P.len, P.err_off, line, col);
    if (err && errlen) {
        int l = 0, c = 0;
        offset_to_linecol(P.s, P.len, P.err_off, &l, &c);
        char tmp[512];
        snprintf(tmp, sizeof tmp, "line %d, column %d: %s", l, c, err);
        errbuf_set(err, errlen, "%s", tmp);
    }
    free(rule_cost);
    gbnf_free(&g);
done:
    for (int32_t r = 0; r < P.n_rules; r++) {
        free(P.rules[r].name);
        free(P.rules[r].alts);
    }
    free(P.rules);
    for (int32_t a = 0; a < P.n_alts; a++)
        free(P.alts[a].e);
    free(P.alts);
    free(P.sets);
    free(P.htab);
    free(P.range_set);
    return *out ? 0 : -1;
}

/* ---- matching ----------------------------------------------------------------- */

void gr_arena_init(gr_arena_t *a) { memset(a, 0, sizeof *a); }

void gr_arena_free(gr_arena_t *a)
{
    free(a->node);
    memset(a, 0, sizeof *a);
}

int32_t gr_push(gr_arena_t *a, int32_t pos, int32_t parent)
{
    if (a->n == a->cap) {
        a->cap = a->cap ? a->cap * 2 : 1024;
        a->node = xrealloc(a->node, (size_t)a->cap * sizeof *a->node);
    }
    a->node[a->n].pos = pos;
    a->node[a->n].parent = parent;
    return a->n++;
}

static bool stack_eq(const gr_arena_t *a, int32_t x, int32_t y)
{
    while (x >= 0 && y >= 0) {
        if (x == y)
            return true;
        if (a->node[x].pos != a->node[y].pos)
            return false;
        x = a->node[x].parent;
        y = a->node[y].parent;
    }
    return x == y;
}

static void add_unique(const gr_arena_t *a, int32_t s, int32_t *out, int *n, int cap)
{
    for (int i = 0; i < *n; i++)
        if (stack_eq(a, out[i], s))
            return;
    if (*n < cap)
        out[(*n)++] = s;
}

static void expand(const grammar_t *g, gr_arena_t *a, int32_t s, int32_t *out, int *n_out, int cap,
                   int depth)
{
    if (a->work-- <= 0 || depth > EXPAND_MAX_DEPTH)
        return;
    if (s < 0) {
        add_unique(a, s, out, n_out, cap);
        return;
    }
    int32_t pos = a->node[s].pos;
    gr_elem_t e = g->el[pos];
    if (e.kind == GR_BYTES) {
        add_unique(a, s, out, n_out, cap);
        return;
    }
    int32_t parent = a->node[s].parent;
    if (e.kind == GR_END) {
        expand(g, a, parent, out, n_out, cap, depth + 1);
        return;
    }
    int32_t next = pos + 1;
    int32_t base = g->el[next].kind == GR_END ? parent : gr_push(a, next, parent);
    for (int32_t i = 0; i < g->rule_nalt[e.arg]; i++) {
        int32_t start = g->alt[g->rule_alt0[e.arg] + i];
        if (g->el[start].kind == GR_END)
            expand(g, a, base, out, n_out, cap, depth + 1);
        else
            expand(g, a, gr_push(a, start, base), out, n_out, cap, depth + 1);
    }
}

void gr_expand(const grammar_t *g, gr_arena_t *a, int32_t s, int32_t *out, int *n_out, int cap)
{
    if (a->work <= 0)
        a->work = ADVANCE_WORK;
    expand(g, a, s, out, n_out, cap, 0);
}

int gr_advance(const grammar_t *g, gr_arena_t *a, const int32_t *in, int n_in, uint8_t b,
               int32_t *out, int cap)
{
    int n = 0;
    a->work = ADVANCE_WORK;
    for (int i = 0; i < n_in; i++) {
        int32_t s = in[i];
        if (s < 0)
            continue;
        int32_t pos = a->node[s].pos;
        assert(g->el[pos].kind == GR_BYTES);
        const uint64_t *set = &g->sets[(size_t)g->el[pos].arg * 4];
        if (!((set[b >> 6] >> (b & 63)) & 1))
            continue;
        int32_t next = pos + 1, parent = a->node[s].parent;
        if (g->el[next].kind == GR_END)
            expand(g, a, parent, out, &n, cap, 0);
        else if (g->el[next].kind == GR_BYTES)
            add_unique(a, gr_push(a, next, parent), out, &n, cap);
        else
            expand(g, a, gr_push(a, next, parent), out, &n, cap, 0);
    }
    return n;
}

int64_t gr_cost(const grammar_t *g, const gr_arena_t *a, int32_t s)
{
    int64_t c = 0;
    for (; s >= 0; s = a->node[s].parent)
        c += g->min_rest[a->node[s].pos];
    return c;
}

void gr_state_free(gr_state_t *st)
{
    free(st->data);
    memset(st, 0, sizeof *st);
}

int gr_state_store(gr_state_t *st, const gr_arena_t *a, const int32_t *ids, int n)
{
    int32_t need = 0;
    for (int i = 0; i < n; i++) {
        int32_t d = 0;
        for (int32_t s = ids[i]; s >= 0; s = a->node[s].parent)
            d++;
        if (d > GBNF_MAX_DEPTH)
            return -1;
        need += d + 1;
    }
    if (need > st->cap) {
        st->cap = need + 64;
        st->data = xrealloc(st->data, (size_t)st->cap * sizeof *st->data);
    }
    int32_t k = 0;
    for (int i = 0; i < n; i++) {
        int32_t d = 0;
        for (int32_t s = ids[i]; s >= 0; s = a->node[s].parent)
            d++;
        st->data[k] = d;
        int32_t j = k + d;
        for (int32_t s = ids[i]; s >= 0; s = a->node[s].parent)
            st->data[j--] = a->node[s].pos;
        k += d + 1;
    }
    st->n = k;
    st->n_stacks = n;
    return 0;
}

int gr_state_load(const gr_state_t *st, gr_arena_t *a, int32_t *ids)
{
    int32_t k = 0;
    for (int i = 0; i < st->n_stacks; i++) {
        int32_t d = st->data[k], s = GR_EMPTY;
        for (int32_t j = 1; j <= d; j++)
            s = gr_push(a, st->data[k + j], s);
        ids[i] = s;
        k += d + 1;
    }
    return st->n_stacks;
}

int gr_state_start(const grammar_t *g, gr_arena_t *a, gr_state_t *st)
{
    int32_t out[GBNF_MAX_STACKS];
    int n = 0;
    a->n = 0;
    a->work = ADVANCE_WORK;
    int32_t r = g->root;
    for (int32_t i = 0; i < g->rule_nalt[r]; i++) {
        int32_t start = g->alt[g->rule_alt0[r] + i];
        if (g->el[start].kind == GR_END)
            expand(g, a, GR_EMPTY, out, &n, GBNF_MAX_STACKS, 0);
        else
            expand(g, a, gr_push(a, start, GR_EMPTY), out, &n, GBNF_MAX_STACKS, 0);
    }
    if (n == 0 || gr_state_store(st, a, out, n) != 0)
        return -1;
    return 0;
}

int gr_state_advance(const grammar_t *g, gr_arena_t *a, gr_state_t *st, const uint8_t *s, size_t len)
{
    int32_t buf[2][GBNF_MAX_STACKS];
    a->n = 0;
    int n = gr_state_load(st, a, buf[0]);
    int cur = 0;
    for (size_t i = 0; i < len && n > 0; i++) {
        n = gr_advance(g, a, buf[cur], n, s[i], buf[cur ^ 1], GBNF_MAX_STACKS);
        cur ^= 1;
    }
    if (n == 0)
        return -1;
    return gr_state_store(st, a, buf[cur], n);
}

bool gr_state_accepting(const gr_state_t *st)
{
    int32_t k = 0;
    for (int i = 0; i < st->n_stacks; i++) {
        if (st->data[k] == 0)
            return true;
        k += st->data[k] + 1;
    }
    return false;
}

bool gr_state_done(const gr_state_t *st)
{
    int32_t k = 0;
    for (int i = 0; i < st->n_stacks; i++) {
        if (st->data[k] != 0)
            return false;
        k += st->data[k] + 1;
    }
    return true;
}

int64_t gr_state_cost(const grammar_t *g, const gr_state_t *st)
{
    int64_t best = COST_INF;
    int32_t k = 0;
    for (int i = 0; i < st->n_stacks; i++) {
        int64_t c = 0;
        for (int32_t j = 1; j <= st->data[k]; j++)
            c += g->min_rest[st->data[k + j]];
        if (c < best)
            best = c;
        k += st->data[k] + 1;
    }
    return best;
}

int gbnf_match(const grammar_t *g, const uint8_t *s, size_t len)
{
    gr_arena_t a;
    gr_state_t st = {0};
    gr_arena_init(&a);
    int ok = gr_state_start(g, &a, &st) == 0 && gr_state_advance(g, &a, &st, s, len) == 0 &&
             gr_state_accepting(&st);
    gr_state_free(&st);
    gr_arena_free(&a);
    return ok;
}

/* ---- writing GBNF text ------------------------------------------------------ */

void gbnf_escape_cp(strbuf_t *b, uint32_t cp)
{
    if (cp == '"' || cp == '\\') {
        strbuf_putc(b, '\\');
        strbuf_putc(b, (char)cp);
    } else if (cp < 0x20 || cp == 0x7F) {
        strbuf_printf(b, "\\x%02x", cp);
    } else {
        char u[4];
        strbuf_append(b, u, utf8_put(cp, u));
    }
}

void gbnf_escape_literal(strbuf_t *b, const char *s, size_t n)
{
    strbuf_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80)
            gbnf_escape_cp(b, c);
        else
            strbuf_putc(b, (char)c); /* UTF-8 continues as it is */
    }
    strbuf_putc(b, '"');
}
