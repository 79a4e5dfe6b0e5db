/* json_schema.c — JSON Schema subset → GBNF text (see json_schema.h).
 *
 * Every schema node becomes one rule "<prefix>sN ::= ..." written into a
 * growing text; shared JSON pieces (value, string, char, number, ws, ...)
 * are written once at the end. $ref targets are memoized by their pointer
 * text before they are compiled, so recursive schemas become recursive
 * rules. The text is checked by gbnf_parse afterwards by the callers
 * (json_schema_check), which also catches schemas that can never finish. */
#include "common/grammar/json_schema.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/gbnf.h"
#include "common/grammar/num_range.h"
#include "common/grammar/schema_allof.h"
#include "common/grammar/schema_format.h"
#include "common/grammar/schema_vocab.h"
#include "common/grammar/regex.h"
#include "common/strbuf.h"
#include "common/xalloc.h"

_Static_assert(REGEX_MAX_COUNT == JSON_SCHEMA_MAX_COUNT, "pattern counts and minLength/maxLength share one limit");

typedef struct memo {
    char *ref;
    int rule;
} memo_t;

typedef struct sc {
    strbuf_t out;              /* rules written so far */
    const json_t *root;      /* the whole schema ($ref "#") */
    const char *pfx;
    int n_rules;
    memo_t *memo;            /* (n_memo) $ref → rule */
    int n_memo, cap_memo;
    int depth;
    char path[512];          /* JSON pointer of the node being compiled */
    const json_t *cur;       /* the node being compiled (its keywords are path/KEY) */
    unsigned formats;        /* shared format rules used (bit i = SCHEMA_FORMATS[i]) */
    bool failed;
    bool fatal;              /* a limit was hit: no relaxing helps */
    const json_t *fnode;     /* node whose keyword failed (cur at the failure) */
    char fkey[64];           /* that keyword ("" = the node itself) */
    char ferr[300];          /* why */
    char fpath[600];         /* JSON pointer of the keyword */
    bool relax;              /* relax refused keywords instead of failing */
    int n_relaxed;
    strbuf_t relaxed;          /* "pointer: reason; ..." */
} sc_t;

#define MAX_RELAXED 64 /* relaxed keywords per schema (each costs a recompile of its node) */

static void sc_fail(sc_t *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sc_fail(sc_t *c, const char *key, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->ferr, sizeof c->ferr, fmt, ap);
    va_end(ap);
    snprintf(c->fpath, sizeof c->fpath, "%s%s%s", c->path, key ? "/" : "", key ? key : "");
    snprintf(c->fkey, sizeof c->fkey, "%s", key ? key : "");
    c->fnode = c->cur;
}

/* A failure that relaxing cannot help (size limits). */
static void sc_fatal(sc_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sc_fatal(sc_t *c, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = c->fatal = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->ferr, sizeof c->ferr, fmt, ap);
    va_end(ap);
    snprintf(c->fpath, sizeof c->fpath, "%s", c->path);
    c->fkey[0] = 0;
    c->fnode = NULL;
}

static int new_rule(sc_t *c)
{
    if (c->n_rules >= JSON_SCHEMA_MAX_RULES) {
        sc_fatal(c, "the schema is too large (more than %d grammar rules)", JSON_SCHEMA_MAX_RULES);
        return -1;
    }
    return c->n_rules++;
}

/* path push/pop */
static size_t path_push(sc_t *c, const char *a, const char *b)
{
    size_t old = strlen(c->path);
    snprintf(c->path + old, sizeof c->path - old, "/%s%s%s", a, b ? "/" : "", b ? b : "");
    return old;
}
static void path_pop(sc_t *c, size_t old) { c->path[old] = 0; }

static int compile(sc_t *c, const json_t *s);
static int alternatives_rule(sc_t *c, const int *subs, size_t n);

/* rule "<pfx>sN ::= " opened; caller writes the body and "\n" */
static void rule_open(sc_t *c, int r) { strbuf_printf(&c->out, "%ss%d ::= ", c->pfx, r); }
static void ref(sc_t *c, strbuf_t *b, int r) { strbuf_printf(b, "%ss%d", c->pfx, r); }
static void shared(sc_t *c, strbuf_t *b, const char *name) { strbuf_printf(b, "%s%s", c->pfx, name); }

static int json_literal_rule(sc_t *c, const json_t **vals, size_t n)
{
    int r = new_rule(c);
    if (r < 0)
        return -1;
    strbuf_t body = {0};
    for (size_t i = 0; i < n; i++) {
        char *t = json_dumps(vals[i], JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) {
            free(body.s);
            sc_fail(c, NULL, "cannot write a value of enum/const");
            return -1;
        }
        if (i)
            strbuf_puts(&body, " | ");
        gbnf_escape_literal(&body, t, strlen(t));
        free(t);
    }
    rule_open(c, r);
    strbuf_puts(&c->out, n ? body.s : "\"\"");
    strbuf_puts(&c->out, "\n");
    free(body.s);
    return r;
}

/* ---- numbers: the keywords read here, the rules written by num_range.c ---- */

/* Reads a numeric keyword; 0 absent, 1 set, -1 error. */
static int get_num(sc_t *c, const json_t *s, const char *key, double *out)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        sc_fail(c, key, "'%s' must be a number", key);
        return -1;
    }
    *out = json_number_value(v);
    return 1;
}

/* The tighter of minimum / exclusiveMinimum (lower = true) or of maximum /
 * exclusiveMaximum. exclusiveMinimum may also be a boolean next to minimum
 * (draft 4, OpenAPI 3.0). 0 ok, -1 error. */
static int get_side(sc_t *c, const json_t *s, bool lower, num_bound_t *out)
{
    const char *ik = lower ? "minimum" : "maximum", *ek = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    *out = (num_bound_t){0};
    double iv = 0, ev = 0;
    bool old_excl = json_is_boolean(json_object_get(s, ek));
    int hi = get_num(c, s, ik, &iv), he = old_excl ? 0 : get_num(c, s, ek, &ev);
    if (hi < 0 || he < 0)
        return -1;
    if (hi)
        *out = (num_bound_t){.set = true, .excl = old_excl && json_is_true(json_object_get(s, ek)), .v = iv};
    if (he && (!hi || (lower ? ev >= iv : ev <= iv)))
        *out = (num_bound_t){.set = true, .excl = true, .v = ev};
    if (!out->set)
        return 0;
    const char *key = out->excl && !old_excl ? ek : ik;
    /* a bound the generator cannot reach (integers have ≤ 15 digits) is a
     * no-op: zod writes z.number().int() as ±(2^53 - 1) */
    if (lower ? out->v <= -(double)NUM_RANGE_MAX : out->v >= (double)NUM_RANGE_MAX) {
        out->set = false;
        return 0;
    }
    if (lower ? out->v >= (double)NUM_RANGE_MAX : out->v <= -(double)NUM_RANGE_MAX) {
        sc_fail(c, key, "'%s' leaves no number of at most 15 digits", key);
        return -1;
    }
    return 0;
}

/* integer / number with bounds and multipleOf (num_range.h). */
static int number_rule(sc_t *c, const json_t *s, bool integer)
{
    num_range_t spec = {.integer = integer};
    if (get_side(c, s, true, &spec.lo) < 0 || get_side(c, s, false, &spec.hi) < 0)
        return -1;
    int hm = get_num(c, s, "multipleOf", &spec.mult);
    if (hm < 0)
        return -1;
    spec.has_mult = hm > 0;
    const char *key = NULL;
    char why[sizeof c->ferr];
    int r = num_range_rules(&spec, &c->out, c->pfx, &c->n_rules, JSON_SCHEMA_MAX_RULES, &key, why, sizeof why);
    if (r >= 0)
        return r;
    if (key)
        sc_fail(c, key, "%s", why);
    else
        sc_fatal(c, "the schema is too large (more than %d grammar rules)", JSON_SCHEMA_MAX_RULES);
    return -1;
}

/* ---- schema nodes ---------------------------------------------------------- */

static int get_count(sc_t *c, const json_t *s, const char *key, long long *out)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        sc_fail(c, key, "'%s' must be a non-negative integer", key);
        return -1;
    }
    if (json_integer_value(v) > JSON_SCHEMA_MAX_COUNT) {
        sc_fail(c, key, "'%s' above %d is not supported", key, JSON_SCHEMA_MAX_COUNT);
        return -1;
    }
    *out = json_integer_value(v);
    return 1;
}

/* minX / maxX: *mn (0 when absent) and *mx (-1 when absent), *has_mn and
 * *has_mx whether given; 0, or -1 (c failed) when one is bad or max < min. */
static int get_count_range(sc_t *c, const json_t *s, const char *kmin, const char *kmax, long long *mn,
                           long long *mx, int *has_mn, int *has_mx)
{
    *mn = 0, *mx = -1;
    *has_mn = get_count(c, s, kmin, mn);
    *has_mx = get_count(c, s, kmax, mx);
    if (*has_mn < 0 || *has_mx < 0)
        return -1;
    if (*has_mx && *mx < *mn) {
        sc_fail(c, kmax, "%s is below %s", kmax, kmin);
        return -1;
    }
    return 0;
}

/* Compiles `pattern` into body (the GBNF of the quoted JSON string), with
 * repetition counts cut at cap (≥ 0) and raised to floor (≠ 0, see
 * regex_limits_t), and BMP-only classes (bmp). Returns the length range of
 * what it generates; a pattern regex.c refuses fails c (when c is not NULL)
 * and gives {-1, -1}. */
static regex_len_t pattern_body(sc_t *c, const json_t *pat, strbuf_t *body, long long cap, long long floor, bool bmp)
{
    regex_limits_t lim = {.cap = cap, .floor = floor, .bmp = bmp};
    regex_len_t len;
    size_t off = 0;
    const char *what = "";
    strbuf_puts(body, "\"\\\"\" (");
    if (regex_compile(json_string_value(pat), json_string_length(pat), 0, &lim, body, &len, &off, &what) != 0) {
        if (c)
            sc_fail(c, "pattern", "pattern feature not supported at offset %zu: %s", off, what);
        len = (regex_len_t){-1, -1};
    }
    strbuf_puts(body, ") \"\\\"\"");
    return len;
}

/* The length range of pattern's generated matches, or {-1, -1} when the
 * pattern does not compile. */
static regex_len_t pattern_len(const json_t *pat, long long cap, long long floor)
{
    strbuf_t body = STRBUF_INIT;
    regex_len_t len = pattern_body(NULL, pat, &body, cap, floor, true);
    strbuf_free(&body);
    return len;
}

/* A pattern with minLength/maxLength: the pattern's own matches, with its
 * repetition counts raised to the smallest floor that makes every match
 * reach minLength and cut to the largest cap that keeps every match within
 * maxLength (a subset of the pattern). Sets *cap (-1: no cut) and *floor
 * (0: none); 0 ok, -1 refused (no such floor and cap). */
static int pattern_limits(sc_t *c, const json_t *pat, long long mn, long long mx, long long *cap, long long *floor)
{
    *cap = -1, *floor = 0;
    regex_len_t len = pattern_len(pat, -1, 0);
    if (len.lo < 0)
        return 0; /* pattern_body on c reports the failure */
    if (len.lo < mn) {
        /* raise the repetitions that must occur; if that is not enough, the
         * optional ones too (floor < 0, see pattern_body) */
        long long sign = pattern_len(pat, -1, mn).lo >= mn ? 1 : -1;
        if (sign < 0 && pattern_len(pat, -1, -mn).lo < mn) {
            sc_fail(c, "minLength", "'pattern' has no match as long as minLength");
            return -1;
        }
        long long lo = 1, hi = mn; /* smallest floor with every match ≥ mn */
        while (lo < hi) {
            long long mid = (lo + hi) / 2;
            if (pattern_len(pat, -1, sign * mid).lo >= mn)
                hi = mid;
            else
                lo = mid + 1;
        }
        *floor = sign * lo;
        len = pattern_len(pat, -1, *floor);
    }
    if (mx >= 0 && len.hi > mx) {
        long long lo = 0, hi = mx; /* largest cap with every match ≤ mx */
        if (pattern_len(pat, 0, *floor).hi > mx) {
            sc_fail(c, "maxLength", "'pattern' has no match within maxLength");
            return -1;
        }
        while (lo < hi) {
            long long mid = (lo + hi + 1) / 2;
            if (pattern_len(pat, mid, *floor).hi <= mx)
                lo = mid;
            else
                hi = mid - 1;
        }
        *cap = lo;
        len = pattern_len(pat, lo, *floor);
    }
    if (len.lo < mn || (mx >= 0 && len.hi > mx)) {
        sc_fail(c, mx >= 0 ? "maxLength" : "minLength",
                "'pattern' has no matches between minLength and maxLength that this compiler can generate");
        return -1;
    }
    return 0;
}

/* A pattern next to a format: the format's grammar is generated, so the
 * pattern must at least accept the format's example string (a pattern this
 * compiler cannot read — lookaround — is not checked). */
static void format_pattern_check(sc_t *c, const json_t *pat, int f)
{
    strbuf_t body = STRBUF_INIT;
    if (pattern_body(NULL, pat, &body, -1, 0, false).lo < 0) {
        strbuf_free(&body);
        return;
    }
    strbuf_t g = {0};
    strbuf_printf(&g, "root ::= %s\n", body.s);
    free(body.s);
    grammar_t *gr = NULL;
    char ex[64], e[200];
    snprintf(ex, sizeof ex, "\"%s\"", SCHEMA_FORMATS[f].example);
    int ok = gbnf_parse((const uint8_t *)g.s, g.len, &gr, e, sizeof e, NULL, NULL) == 0 &&
             gbnf_match(gr, (const uint8_t *)ex, strlen(ex)) == 1;
    gbnf_free(&gr);
    free(g.s);
    if (!ok)
        sc_fail(c, "pattern", "'pattern' next to format '%s' does not accept the format's strings (e.g. %s)",
                SCHEMA_FORMATS[f].name, SCHEMA_FORMATS[f].example);
}

static int string_rule(sc_t *c, const json_t *s)
{
    long long mn, mx;
    int a, b;
    if (get_count_range(c, s, "minLength", "maxLength", &mn, &mx, &a, &b) < 0)
        return -1;
    const json_t *pat = json_object_get(s, "pattern");
    const json_t *fmt = json_object_get(s, "format");
    if (pat && !json_is_string(pat)) {
        sc_fail(c, "pattern", "'pattern' must be a string");
        return -1;
    }
    int f = -1;
    if (fmt) {
        if (!json_is_string(fmt)) {
            sc_fail(c, "format", "'format' must be a string");
            return -1;
        }
        f = schema_format_find(json_string_value(fmt));
        /* an unknown format next to a pattern (zod: cuid, nanoid, e164,
         * base64, ...) is an annotation: the pattern is what is enforced */
        if (f < 0 && !pat) {
            sc_fail(c, "format", "format '%.40s' is not supported (supported: date, time, date-time, duration, "
                                 "email, hostname, ipv4, ipv6, uuid, uri)", json_string_value(fmt));
            return -1;
        }
    }
    int r = new_rule(c);
    if (r < 0)
        return -1;
    strbuf_t body = {0};
    if (f >= 0) {
        if (pat)
            format_pattern_check(c, pat, f);
        if ((a && mn > SCHEMA_FORMATS[f].min) || (b && mx < SCHEMA_FORMATS[f].max))
            sc_fail(c, a && mn > SCHEMA_FORMATS[f].min ? "minLength" : "maxLength",
                    "minLength/maxLength next to format '%s' is supported only when they allow %d to %d characters",
                    SCHEMA_FORMATS[f].name, SCHEMA_FORMATS[f].min, SCHEMA_FORMATS[f].max);
        c->formats |= 1u << f;
        strbuf_puts(&body, "\"\\\"\" ");
        strbuf_printf(&body, "%sfmt-%s", c->pfx, SCHEMA_FORMATS[f].name);
        strbuf_puts(&body, " \"\\\"\"");
    } else if (pat) {
        long long cap = -1, floor = 0;
        if ((a || b) && pattern_limits(c, pat, mn, b ? mx : -1, &cap, &floor) != 0) {
            free(body.s);
            return -1;
        }
        pattern_body(c, pat, &body, cap, floor, a || b);
    } else if (!a && !b) {
        shared(c, &body, "string");
    } else {
        strbuf_puts(&body, "\"\\\"\" ");
        shared(c, &body, "bchar");
        if (b)
            strbuf_printf(&body, "{%lld,%lld}", mn, mx);
        else
            strbuf_printf(&body, "{%lld,}", mn);
        strbuf_puts(&body, " \"\\\"\"");
    }
    if (!c->failed) {
        rule_open(c, r);
        strbuf_puts(&c->out, body.s);
        strbuf_puts(&c->out, "\n");
    }
    free(body.s);
    return c->failed ? -1 : r;
}

/* Compiles a sub-schema at path /a[/b]. */
static int compile_at(sc_t *c, const json_t *sub, const char *a, const char *b)
{
    size_t old = path_push(c, a, b);
    int r = compile(c, sub);
    path_pop(c, old);
    return r;
}

/* An array without tuple items: rule r is "[" then between ra and rb (-1:
 * unbounded) items `it` separated by commas. */
static void write_list_array(sc_t *c, int r, const char *it, long long ra, long long rb)
{
    rule_open(c, r);
    strbuf_puts(&c->out, "\"[\" ");
    shared(c, &c->out, "ws");
    strbuf_puts(&c->out, " ");
    if (rb != 0) {
        if (ra == 0)
            strbuf_puts(&c->out, "(");
        strbuf_printf(&c->out, "%s (\",\" ", it);
        shared(c, &c->out, "ws");
        strbuf_printf(&c->out, " %s)", it);
        long long lo = ra > 0 ? ra - 1 : 0;
        if (rb >= 0)
            strbuf_printf(&c->out, "{%lld,%lld}", lo, rb - 1);
        else
            strbuf_printf(&c->out, "{%lld,}", lo);
        if (ra == 0)
            strbuf_puts(&c->out, ")?");
    }
    strbuf_puts(&c->out, " \"]\"\n");
}

/* A tuple: rule r is "[" the first np of the element rules el (nreq of them
 * required), then between ra and rb (-1: unbounded) rest items `it`. Tail
 * rules t_i = "," e_i ws t_(i+1) (optional when i ≥ nreq), the last followed
 * by the rest items. r, or -1. */
static int write_tuple_array(sc_t *c, int r, const int *el, const char *it, long long np, long long nreq,
                             long long ra, long long rb)
{
    int next = -1; /* rule for what follows element i (-1 = nothing) */
    if (rb != 0) {
        next = new_rule(c);
        if (next < 0)
            return -1;
        rule_open(c, next);
        strbuf_puts(&c->out, "(\",\" ");
        shared(c, &c->out, "ws");
        strbuf_printf(&c->out, " %s)", it);
        if (rb >= 0)
            strbuf_printf(&c->out, "{%lld,%lld}\n", ra, rb);
        else
            strbuf_printf(&c->out, "{%lld,}\n", ra);
    }
    for (long long i = np - 1; i >= 1; i--) {
        int t = new_rule(c);
        if (t < 0)
            return -1;
        rule_open(c, t);
        strbuf_puts(&c->out, i >= nreq ? "(\",\" " : "\",\" ");
        shared(c, &c->out, "ws");
        strbuf_puts(&c->out, " ");
        ref(c, &c->out, el[i]);
        strbuf_puts(&c->out, " ");
        shared(c, &c->out, "ws");
        if (next >= 0) {
            strbuf_puts(&c->out, " ");
            ref(c, &c->out, next);
        }
        strbuf_puts(&c->out, i >= nreq ? ")?\n" : "\n");
        next = t;
    }
    rule_open(c, r);
    strbuf_puts(&c->out, "\"[\" ");
    shared(c, &c->out, "ws");
    if (np > 0) {
        strbuf_puts(&c->out, nreq > 0 ? " " : " (");
        ref(c, &c->out, el[0]);
        strbuf_puts(&c->out, " ");
        shared(c, &c->out, "ws");
        if (next >= 0) {
            strbuf_puts(&c->out, " ");
            ref(c, &c->out, next);
        }
        strbuf_puts(&c->out, nreq > 0 ? "" : ")?");
    }
    strbuf_puts(&c->out, " \"]\"\n");
    return r;
}

/* Arrays: items (one schema), prefixItems + items (2020-12 tuples), items
 * as an array + additionalItems (draft 7 tuples), minItems, maxItems,
 * uniqueItems false. Tuple elements are generated in order; prefix items
 * beyond minItems are optional (each only after the one before), further
 * items (the rest schema) only after all prefix items and only as many as
 * minItems needs when no rest schema is given. */
static int array_rule(sc_t *c, const json_t *s)
{
    long long mn, mx;
    int a, b;
    if (get_count_range(c, s, "minItems", "maxItems", &mn, &mx, &a, &b) < 0)
        return -1;
    const json_t *uniq = json_object_get(s, "uniqueItems");
    if (uniq && !json_is_false(uniq)) {
        sc_fail(c, "uniqueItems", "'uniqueItems' is supported only as false");
        return -1;
    }
    const json_t *items = json_object_get(s, "items");
    const json_t *prefix = json_object_get(s, "prefixItems");
    const json_t *rest = items;
    const char *rest_key = "items";
    if (prefix) {
        if (!json_is_array(prefix)) {
            sc_fail(c, "prefixItems", "'prefixItems' must be an array of schemas");
            return -1;
        }
        if (json_is_array(items)) {
            sc_fail(c, "items", "'items' as an array next to 'prefixItems' is not supported");
            return -1;
        }
    } else if (json_is_array(items)) {
        prefix = items;
        rest = json_object_get(s, "additionalItems");
        rest_key = "additionalItems";
    }
    const char *pkey = prefix == items ? "items" : "prefixItems";
    size_t n = prefix ? json_array_size(prefix) : 0;
    if (n > JSON_SCHEMA_MAX_COUNT) {
        sc_fail(c, pkey, "more than %d tuple items", JSON_SCHEMA_MAX_COUNT);
        return -1;
    }
    if (rest && !json_is_boolean(rest) && !json_is_object(rest)) {
        sc_fail(c, rest_key, "'%s' must be a schema", rest_key);
        return -1;
    }
    int *el = xcalloc(n + 1, sizeof *el);
    for (size_t i = 0; i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        el[i] = compile_at(c, json_array_get(prefix, i), pkey, idx);
        if (el[i] < 0) {
            free(el);
            return -1;
        }
    }
    int item = -1; /* the rest schema's rule; -1 = any value */
    bool rest_none = rest && json_is_false(rest);
    if (rest && json_is_object(rest)) {
        item = compile_at(c, rest, rest_key, NULL);
        if (item < 0) {
            free(el);
            return -1;
        }
    }
    /* how many prefix items may appear, how many must; the rest's count */
    long long np = b && mx < (long long)n ? mx : (long long)n;
    long long nreq = mn < np ? mn : np;
    long long ra = mn > (long long)n ? mn - (long long)n : 0, rb;
    if (n == 0)
        rb = b ? mx : -1;
    else if (rest_none || np < (long long)n)
        rb = 0;
    else if (!rest)
        rb = ra; /* absent: any value allowed, generated only when needed */
    else
        rb = b ? mx - (long long)n : -1;
    if (rest_none && n == 0 && mn > 0) {
        sc_fail(c, rest_key, "no array satisfies minItems with '%s': false", rest_key);
        free(el);
        return -1;
    }
    if (rb >= 0 && ra > rb) {
        sc_fail(c, "minItems", "no array satisfies minItems with these tuple items");
        free(el);
        return -1;
    }
    int r = new_rule(c);
    if (r < 0) {
        free(el);
        return -1;
    }
    strbuf_t it = {0}; /* one rest item and the white space after it */
    if (item >= 0)
        ref(c, &it, item);
    else
        shared(c, &it, "value");
    strbuf_puts(&it, " ");
    shared(c, &it, "ws");
    if (n == 0)
        write_list_array(c, r, it.s, ra, rest_none ? 0 : rb);
    else if (write_tuple_array(c, r, el, it.s, np, nreq, ra, rb) < 0)
        r = -1;
    free(it.s);
    free(el);
    return r;
}

/* One listed property of an object being compiled. */
typedef struct oprop {
    const char *key;
    const json_t *schema;
    const char *via;       /* path of the schema: "properties" or "additionalProperties" */
    bool required;
} oprop_t;

/* propertyNames that lists its names (enum/const of strings): n, or -1. */
static long long enum_names(const json_t *pn, const json_t **arr)
{
    if (!json_is_object(pn))
        return -1;
    const json_t *e = json_object_get(pn, "enum"), *k = json_object_get(pn, "const");
    if (k && json_is_string(k)) {
        *arr = NULL;
        return 1;
    }
    if (!json_is_array(e) || json_array_size(e) == 0)
        return -1;
    for (size_t i = 0; i < json_array_size(e); i++)
        if (!json_is_string(json_array_get(e, i)))
            return -1;
    *arr = e;
    return (long long)json_array_size(e);
}

/* A map: "{" (key ws ":" ws value ws),{mn,mx} "}" — keys from propertyNames
 * (a string schema) or any string. */
static int map_rule(sc_t *c, const json_t *s, const json_t *add, long long mn, long long mx)
{
    const json_t *pn = json_object_get(s, "propertyNames");
    int kr = -1, v = -1;
    if (pn && !json_is_true(pn)) {
        const json_t *t = json_is_object(pn) ? json_object_get(pn, "type") : NULL;
        if (!json_is_object(pn) || (t && !(json_is_string(t) && strcmp(json_string_value(t), "string") == 0))) {
            sc_fail(c, "propertyNames", "'propertyNames' must be a string schema");
            return -1;
        }
        kr = compile_at(c, pn, "propertyNames", NULL);
        if (kr < 0)
            return -1;
    }
    if (json_is_object(add)) {
        v = compile_at(c, add, "additionalProperties", NULL);
        if (v < 0)
            return -1;
    }
    int r = new_rule(c);
    if (r < 0)
        return -1;
    strbuf_t kv = {0};
    if (kr >= 0)
        ref(c, &kv, kr);
    else
        shared(c, &kv, "string");
    strbuf_puts(&kv, " ");
    shared(c, &kv, "ws");
    strbuf_puts(&kv, " \":\" ");
    shared(c, &kv, "ws");
    strbuf_puts(&kv, " ");
    if (v >= 0)
        ref(c, &kv, v);
    else
        shared(c, &kv, "value");
    strbuf_puts(&kv, " ");
    shared(c, &kv, "ws");
    rule_open(c, r);
    strbuf_puts(&c->out, "\"{\" ");
    shared(c, &c->out, "ws");
    if (mx != 0) {
        strbuf_printf(&c->out, " %s%s (\",\" ", mn == 0 ? "(" : "", kv.s);
        shared(c, &c->out, "ws");
        strbuf_printf(&c->out, " %s)", kv.s);
        if (mx > 0)
            strbuf_printf(&c->out, "{%lld,%lld}", mn > 0 ? mn - 1 : 0, mx - 1);
        else
            strbuf_printf(&c->out, "{%lld,}", mn > 0 ? mn - 1 : 0);
        strbuf_puts(&c->out, mn == 0 ? ")?" : "");
    }
    strbuf_puts(&c->out, " \"}\"\n");
    free(kv.s);
    return r;
}

/* The types of an object node's keywords: 0, or -1 (c failed). */
static int object_keywords_check(sc_t *c, const json_t *props, const json_t *req, const json_t *add,
                                 const json_t *pn, const json_t *dep)
{
    if (props && !json_is_object(props)) {
        sc_fail(c, "properties", "'properties' must be an object");
        return -1;
    }
    if (req && !json_is_array(req)) {
        sc_fail(c, "required", "'required' must be an array of strings");
        return -1;
    }
    size_t n_req = req ? json_array_size(req) : 0;
    for (size_t i = 0; i < n_req; i++)
        if (!json_is_string(json_array_get(req, i))) {
            sc_fail(c, "required", "'required' must be an array of strings");
            return -1;
        }
    if (add && !json_is_boolean(add) && !json_is_object(add)) {
        sc_fail(c, "additionalProperties", "'additionalProperties' must be a boolean or a schema");
        return -1;
    }
    if (pn && !json_is_boolean(pn) && !json_is_object(pn)) {
        sc_fail(c, "propertyNames", "'propertyNames' must be a schema");
        return -1;
    }
    if (dep && !json_is_object(dep)) {
        sc_fail(c, "dependentRequired", "'dependentRequired' must be an object of string arrays");
        return -1;
    }
    return 0;
}

/* Marks the required properties of P[0..*n) (required, and dependentRequired
 * of a listed trigger), appending required names that are not listed
 * (their schema: value_schema) where that is allowed. 0, or -1 (c failed). */
static int mark_required(sc_t *c, const json_t *req, const json_t *dep, oprop_t *P, size_t *n, bool closed,
                         long long n_names, size_t n_props, const json_t *value_schema)
{
    size_t n_req = req ? json_array_size(req) : 0;
    const char *key;
    for (size_t i = 0; i < n_req; i++) {
        const char *k = json_string_value(json_array_get(req, i));
        size_t j = 0;
        while (j < *n && strcmp(P[j].key, k) != 0)
            j++;
        if (j == *n) {
            bool allowed = !closed && (n_names < 0 || !n_props);
            if (!allowed || (n_names > 0 && !n_props)) {
                sc_fail(c, "required", "required property '%.100s' is not in 'properties'", k);
                return -1;
            }
            P[(*n)++] = (oprop_t){k, value_schema, "additionalProperties", false};
        }
        P[j].required = true;
    }
    if (dep) {
        json_t *list;
        json_object_foreach((json_t *)dep, key, list) {
            if (!json_is_array(list)) {
                sc_fail(c, "dependentRequired", "'dependentRequired' must be an object of string arrays");
                return -1;
            }
            size_t trig = 0;
            while (trig < *n && strcmp(P[trig].key, key) != 0)
                trig++;
            if (trig == *n)
                continue; /* a property never generated triggers nothing */
            for (size_t i = 0; i < json_array_size(list); i++) {
                const char *k = json_string_value(json_array_get(list, i));
                size_t j = 0;
                while (k && j < *n && strcmp(P[j].key, k) != 0)
                    j++;
                if (!k || j == *n) {
                    sc_fail(c, "dependentRequired", "'dependentRequired' names '%.100s', which is not in 'properties'",
                            k ? k : "(not a string)");
                    return -1;
                }
                P[j].required = true;
            }
        }
    }
    return 0;
}

/* One rule per property: "<key>" ws ":" ws value ws, into kv[i]. 0, or -1. */
static int property_rules(sc_t *c, const oprop_t *P, size_t n, int *kv)
{
    for (size_t i = 0; i < n; i++) {
        int v = compile_at(c, P[i].schema, P[i].via, strcmp(P[i].via, "properties") == 0 ? P[i].key : NULL);
        if (v < 0)
            return -1;
        int r = new_rule(c);
        if (r < 0)
            return -1;
        json_t *ks = json_string(P[i].key);
        char *kt = json_dumps(ks, JSON_ENCODE_ANY);
        json_decref(ks);
        rule_open(c, r);
        gbnf_escape_literal(&c->out, kt, strlen(kt));
        free(kt);
        strbuf_puts(&c->out, " ");
        shared(c, &c->out, "ws");
        strbuf_puts(&c->out, " \":\" ");
        shared(c, &c->out, "ws");
        strbuf_puts(&c->out, " ");
        ref(c, &c->out, v);
        strbuf_puts(&c->out, " ");
        shared(c, &c->out, "ws");
        strbuf_puts(&c->out, "\n");
        kv[i] = r;
    }
    return 0;
}

static int fail_free(void *p)
{
    free(p);
    return -1;
}

/* The listed properties in order, each optional one present or not, with
 * their count kept inside [mn, mx] (hb: mx set): rule "{" ws <chain> "}".
 * The rule, or -1. */
static int count_rules(sc_t *c, const oprop_t *P, size_t n, const int *kv, long long mn, long long mx, bool hb)
{
    /* states (j, k): properties j.. still to decide, k present so far
     * (k > 0: the next one needs a comma). k saturates at K: past max(mn,
     * mx, 1) the exact count no longer matters. */
    long long K = mn > mx ? mn : mx;
    if (K < 1)
        K = 1;
    if ((long long)(n + 1) * (K + 1) > JSON_SCHEMA_MAX_RULES / 4) {
        sc_fail(c, mn ? "minProperties" : "maxProperties",
                "minProperties/maxProperties over %zu optional properties is not supported", n);
        return -1;
    }
    int *st = xmalloc((n + 1) * (size_t)(K + 1) * sizeof *st);
    size_t rreq = 0; /* required among j.. */
    for (size_t jj = n + 1; jj-- > 0;) {
        if (jj < n)
            rreq += P[jj].required;
        for (long long k = 0; k <= K; k++) {
            int *me = &st[jj * (size_t)(K + 1) + (size_t)k];
            *me = -1;
            /* viable: the count can still end inside [mn, mx] */
            if (k < K && ((hb && k + (long long)rreq > mx) || k + (long long)(n - jj) < mn))
                continue;
            if (k == K && hb && K == mx && rreq > 0)
                continue;
            bool take = false, skip = false;
            int t = -1, sk = -1;
            if (jj < n) {
                long long k1 = k + 1 > K ? K : k + 1;
                t = st[(jj + 1) * (size_t)(K + 1) + (size_t)k1];
                take = t >= 0 && !(hb && k + 1 > mx);
                sk = st[(jj + 1) * (size_t)(K + 1) + (size_t)k];
                skip = !P[jj].required && sk >= 0;
                if (!take && !skip)
                    continue;
            }
            int r = new_rule(c);
            if (r < 0)
                return fail_free(st);
            *me = r;
            rule_open(c, r);
            if (jj == n) {
                strbuf_puts(&c->out, "\"\"\n");
                continue;
            }
            if (take) {
                if (k > 0) {
                    strbuf_puts(&c->out, "\",\" ");
                    shared(c, &c->out, "ws");
                    strbuf_puts(&c->out, " ");
                }
                ref(c, &c->out, kv[jj]);
                strbuf_puts(&c->out, " ");
                ref(c, &c->out, t);
            }
            if (skip) {
                strbuf_puts(&c->out, take ? " | " : "");
                ref(c, &c->out, sk);
            }
            strbuf_puts(&c->out, "\n");
        }
    }
    if (st[0] < 0) {
        sc_fail(c, "minProperties", "no object of the listed properties satisfies minProperties/maxProperties");
        return fail_free(st);
    }
    int r = new_rule(c);
    if (r < 0)
        return fail_free(st);
    rule_open(c, r);
    strbuf_puts(&c->out, "\"{\" ");
    shared(c, &c->out, "ws");
    strbuf_puts(&c->out, " ");
    ref(c, &c->out, st[0]);
    strbuf_puts(&c->out, " \"}\"\n");
    free(st);
    return r;
}

/* Objects. Listed properties are generated in the schema's order, each
 * optional one present or not; additionalProperties true or a schema next
 * to properties allows more, which are not generated; required names that
 * are not listed get the additionalProperties schema; propertyNames that
 * enumerates names (z.record(z.enum(...))) lists them. Without listed
 * properties, additionalProperties / propertyNames make a map.
 * minProperties / maxProperties count the properties present (a chain of
 * rules per (property, count so far)); dependentRequired makes the
 * dependent properties required. */
static int object_rule(sc_t *c, const json_t *s)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
    const json_t *pn = json_object_get(s, "propertyNames");
    const json_t *dep = json_object_get(s, "dependentRequired");
    if (object_keywords_check(c, props, req, add, pn, dep) < 0)
        return -1;
    size_t n_req = req ? json_array_size(req) : 0;
    long long mn, mx;
    int ha, hb;
    if (get_count_range(c, s, "minProperties", "maxProperties", &mn, &mx, &ha, &hb) < 0)
        return -1;
    bool closed = add && json_is_false(add);
    size_t n_props = props ? json_object_size(props) : 0;
    const json_t *names = NULL;
    long long n_names = pn ? enum_names(pn, &names) : -1;
    if (pn && n_props && n_names < 0 && !json_is_true(pn)) {
        sc_fail(c, "propertyNames", "'propertyNames' next to 'properties' is supported only as an enum of names");
        return -1;
    }
    /* the listed properties */
    size_t cap = n_props + n_req + (n_names > 0 ? (size_t)n_names : 0) + 1;
    oprop_t *P = xcalloc(cap, sizeof *P);
    size_t n = 0;
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)props, key, sub) P[n++] = (oprop_t){key, sub, "properties", false};
    const json_t *value_schema = json_is_object(add) ? add : json_true();
    if (n_names > 0 && n_props) {
        json_object_foreach((json_t *)props, key, sub) {
            bool listed = false;
            for (long long i = 0; i < n_names; i++)
                listed |= strcmp(key, names ? json_string_value(json_array_get(names, (size_t)i))
                                            : json_string_value(json_object_get(pn, "const"))) == 0;
            if (!listed) {
                sc_fail(c, "propertyNames", "property '%.100s' is not one of 'propertyNames'", key);
                free(P);
                return -1;
            }
        }
    }
    if (n_names > 0 && !n_props && !closed) {
        for (long long i = 0; i < n_names; i++) {
            const char *k = names ? json_string_value(json_array_get(names, (size_t)i))
                                  : json_string_value(json_object_get(pn, "const"));
            bool dup = false;
            for (size_t j = 0; j < n; j++)
                dup |= strcmp(P[j].key, k) == 0;
            if (!dup)
                P[n++] = (oprop_t){k, value_schema, "additionalProperties", false};
        }
    }
    int rc = -1;
    int *kv = NULL;
    if (mark_required(c, req, dep, P, &n, closed, n_names, n_props, value_schema) < 0)
        goto out;
    if (n == 0 && (pn || (add && !closed) || mn > 0)) {
        rc = map_rule(c, s, add, mn, hb ? mx : -1);
        goto out;
    }
    size_t n_required = 0;
    for (size_t i = 0; i < n; i++)
        n_required += P[i].required;
    /* bounds that cannot bind: no counting needed */
    if (hb && mx >= (long long)n)
        hb = 0, mx = -1;
    if (mn <= (long long)n_required)
        mn = 0;
    if ((hb && (long long)n_required > mx) || mn > (long long)n) {
        sc_fail(c, hb && (long long)n_required > mx ? "maxProperties" : "minProperties",
                "no object of the listed properties satisfies minProperties/maxProperties");
        goto out;
    }
    kv = xcalloc(n + 1, sizeof *kv);
    if (property_rules(c, P, n, kv) < 0)
        goto out;
    rc = count_rules(c, P, n, kv, mn, mx, hb != 0);
out:
    free(kv);
    free(P);
    return c->failed ? -1 : rc;
}

static int type_rule(sc_t *c, const json_t *s, const char *type)
{
    if (strcmp(type, "object") == 0)
        return object_rule(c, s);
    if (strcmp(type, "array") == 0)
        return array_rule(c, s);
    if (strcmp(type, "string") == 0)
        return string_rule(c, s);
    if (strcmp(type, "integer") == 0)
        return number_rule(c, s, true);
    if (strcmp(type, "number") == 0)
        return number_rule(c, s, false);
    const char *sh = strcmp(type, "boolean") == 0 ? "boolean" : strcmp(type, "null") == 0 ? "null" : NULL;
    if (!sh) {
        sc_fail(c, "type", "unknown type '%.40s'", type);
        return -1;
    }
    int r = new_rule(c);
    if (r < 0)
        return -1;
    rule_open(c, r);
    shared(c, &c->out, sh);
    strbuf_puts(&c->out, "\n");
    return r;
}

static int alternatives_rule(sc_t *c, const int *subs, size_t n)
{
    int r = new_rule(c);
    if (r < 0)
        return -1;
    rule_open(c, r);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strbuf_puts(&c->out, " | ");
        ref(c, &c->out, subs[i]);
    }
    strbuf_puts(&c->out, "\n");
    return r;
}

/* alternatives_rule, then subs (malloc'd) freed. */
static int alternatives_free(sc_t *c, int *subs, size_t n)
{
    int r = alternatives_rule(c, subs, n);
    free(subs);
    return r;
}

/* alternatives of anyOf / oneOf (key) */
static int alternatives_of(sc_t *c, const json_t *s, const char *kw)
{
    const json_t *alts = json_object_get(s, kw);
    if (!json_is_array(alts) || json_array_size(alts) == 0) {
        sc_fail(c, kw, "'%s' must be a non-empty array", kw);
        return -1;
    }
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (strcmp(key, kw) && !schema_vocab_is_annotation(key)) {
            sc_fail(c, key, "keyword '%.60s' next to '%s' is not supported", key, kw);
            return -1;
        }
    }
    size_t n = json_array_size(alts);
    int *subs = xmalloc(n * sizeof *subs);
    for (size_t i = 0; i < n; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%zu", i);
        subs[i] = compile_at(c, json_array_get(alts, i), kw, idx);
        if (subs[i] < 0)
            return fail_free(subs);
    }
    return alternatives_free(c, subs, n);
}

static bool has_any(const json_t *s, const char *const *keys)
{
    for (; *keys; keys++)
        if (json_object_get(s, *keys))
            return true;
    return false;
}

static const char *const OBJECT_KEYS[] = {"properties", "required", "additionalProperties", "propertyNames",
                                          "minProperties", "maxProperties", "dependentRequired", NULL};
static const char *const ARRAY_KEYS[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                         "uniqueItems", NULL};
static const char *const STRING_KEYS[] = {"minLength", "maxLength", "pattern", "format", NULL};
static const char *const NUMBER_KEYS[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                          "multipleOf", NULL};

static int any_rule(sc_t *c)
{
    int rr = new_rule(c);
    if (rr < 0)
        return -1;
    rule_open(c, rr);
    shared(c, &c->out, "value");
    strbuf_puts(&c->out, "\n");
    return rr;
}

/* A node with $ref (only annotations beside it): memoized by the pointer
 * text before the target is compiled, so recursion refers back to it. */
static int ref_rule(sc_t *c, const json_t *s, const json_t *r)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (strcmp(key, "$ref") && !schema_vocab_is_annotation(key)) {
            sc_fail(c, key, "keyword '%.60s' next to '$ref' is not supported", key);
            return -1;
        }
    }
    if (!json_is_string(r)) {
        sc_fail(c, "$ref", "'$ref' must be a string");
        return -1;
    }
    const char *p = json_string_value(r);
    for (int i = 0; i < c->n_memo; i++)
        if (strcmp(c->memo[i].ref, p) == 0)
            return c->memo[i].rule;
    const json_t *target = schema_vocab_resolve_ref(c->root, p);
    if (!target) {
        sc_fail(c, "$ref", "'$ref' '%.100s' does not resolve (supported: #, #/$defs/NAME, #/definitions/NAME)", p);
        return -1;
    }
    int rr = new_rule(c);
    if (rr < 0)
        return -1;
    if (c->n_memo == c->cap_memo) {
        c->cap_memo = c->cap_memo ? c->cap_memo * 2 : 8;
        c->memo = xrealloc(c->memo, (size_t)c->cap_memo * sizeof *c->memo);
    }
    c->memo[c->n_memo].ref = xstrdup(p);
    c->memo[c->n_memo++].rule = rr;
    char save[sizeof c->path];
    memcpy(save, c->path, sizeof save);
    snprintf(c->path, sizeof c->path, "%s", p + 1);
    int t = compile(c, target);
    memcpy(c->path, save, sizeof save);
    if (t < 0)
        return -1;
    rule_open(c, rr);
    ref(c, &c->out, t);
    strbuf_puts(&c->out, "\n");
    return rr;
}

/* allOf: one part alone is that part; object parts are merged into one
 * object schema, scalar parts into one scalar schema. */
static int all_of_rule(sc_t *c, const json_t *s, const json_t *all_of)
{
    const char *key;
    json_t *v;
    if (!json_is_array(all_of) || json_array_size(all_of) == 0) {
        sc_fail(c, "allOf", "'allOf' must be a non-empty array");
        return -1;
    }
    bool alone = true;
    json_object_foreach((json_t *)s, key, v) alone &= strcmp(key, "allOf") == 0 || schema_vocab_is_annotation(key);
    if (alone && json_array_size(all_of) == 1)
        return compile_at(c, json_array_get(all_of, 0), "allOf", "0");
    char why[sizeof c->ferr];
    json_t *m = schema_allof_merge(c->root, s, all_of, why, sizeof why);
    if (!m) {
        sc_fail(c, "allOf", "%s", why);
        return -1;
    }
    int result = compile_at(c, m, "allOf", NULL);
    json_decref(m);
    return result;
}

/* "type": [...]: the alternatives of each type (the node's other keywords
 * apply to each). */
static int type_list_rule(sc_t *c, const json_t *s, const json_t *type)
{
    size_t n = json_array_size(type);
    if (n == 0) {
        sc_fail(c, "type", "'type' must not be an empty array");
        return -1;
    }
    int *subs = xmalloc(n * sizeof *subs);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(type, i);
        if (!json_is_string(t)) {
            sc_fail(c, "type", "'type' entries must be strings");
            return fail_free(subs);
        }
        subs[i] = type_rule(c, s, json_string_value(t));
        if (subs[i] < 0)
            return fail_free(subs);
    }
    return alternatives_free(c, subs, n);
}

/* One node, no relaxing (compile() wraps it). */
static int compile_once(sc_t *c, const json_t *s)
{
    if (json_is_true(s))
        return any_rule(c);
    if (json_is_false(s)) {
        sc_fail(c, NULL, "the schema 'false' matches nothing");
        return -1;
    }
    if (!json_is_object(s)) {
        sc_fail(c, NULL, "a schema must be an object or a boolean");
        return -1;
    }
    if (c->depth + 1 > JSON_SCHEMA_MAX_DEPTH) {
        sc_fatal(c, "schemas nested deeper than %d", JSON_SCHEMA_MAX_DEPTH);
        return -1;
    }
    c->depth++;
    int result = -1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (!schema_vocab_is_supported(key) && !schema_vocab_is_annotation(key)) {
            sc_fail(c, key, "unsupported JSON Schema keyword '%.60s'", key);
            goto out;
        }
    }
    const json_t *r = json_object_get(s, "$ref");
    if (r) {
        result = ref_rule(c, s, r);
        goto out;
    }
    const json_t *cst = json_object_get(s, "const");
    const json_t *en = json_object_get(s, "enum");
    if (cst) {
        result = json_literal_rule(c, &cst, 1);
        goto out;
    }
    if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) {
            sc_fail(c, "enum", "'enum' must be a non-empty array");
            goto out;
        }
        size_t n = json_array_size(en);
        const json_t **vals = xmalloc(n * sizeof *vals);
        for (size_t i = 0; i < n; i++)
            vals[i] = json_array_get(en, i);
        result = json_literal_rule(c, vals, n);
        free(vals);
        goto out;
    }
    const json_t *all_of = json_object_get(s, "allOf");
    if (all_of) {
        result = all_of_rule(c, s, all_of);
        goto out;
    }
    if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) {
        sc_fail(c, "oneOf", "'oneOf' next to 'anyOf' is not supported");
        goto out;
    }
    /* oneOf: alternatives; that exactly one matches is not enforced */
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) {
        result = alternatives_of(c, s, json_object_get(s, "anyOf") ? "anyOf" : "oneOf");
        goto out;
    }
    const json_t *type = json_object_get(s, "type");
    if (type && json_is_string(type)) {
        result = type_rule(c, s, json_string_value(type));
        goto out;
    }
    if (type && json_is_array(type)) {
        result = type_list_rule(c, s, type);
        goto out;
    }
    if (type) {
        sc_fail(c, "type", "'type' must be a string or an array of strings");
        goto out;
    }
    /* no type: infer it from the keywords used */
    if (has_any(s, OBJECT_KEYS))
        result = object_rule(c, s);
    else if (has_any(s, ARRAY_KEYS))
        result = array_rule(c, s);
    else if (has_any(s, STRING_KEYS))
        result = string_rule(c, s);
    else if (has_any(s, NUMBER_KEYS))
        result = number_rule(c, s, false);
    else
        result = any_rule(c);
out:
    c->depth--;
    return c->failed ? -1 : result;
}

/* Compiles node s. When relaxing, a keyword of s that fails is dropped (s
 * is compiled again without it, its rules so far forgotten) and noted; a
 * node that fails as a whole becomes "any value". */
static int compile(sc_t *c, const json_t *s)
{
    if (c->failed)
        return -1;
    size_t out_n = c->out.len;
    int n_rules = c->n_rules, n_memo = c->n_memo;
    unsigned formats = c->formats;
    json_t *copy = NULL;
    const json_t *node = s;
    for (;;) {
        const json_t *prev = c->cur;
        c->cur = node;
        int r = compile_once(c, node);
        c->cur = prev;
        if (!c->failed || !c->relax || c->fatal || c->fnode != node || c->n_relaxed >= MAX_RELAXED) {
            json_decref(copy);
            return c->failed ? -1 : r;
        }
        if (c->out.s)
            strbuf_setlen(&c->out, out_n);
        c->n_rules = n_rules;
        for (int i = n_memo; i < c->n_memo; i++)
            free(c->memo[i].ref);
        c->n_memo = n_memo;
        c->formats = formats;
        strbuf_printf(&c->relaxed, "%s%s: %s", c->n_relaxed ? "; " : "", c->fpath[0] ? c->fpath : "/", c->ferr);
        c->n_relaxed++;
        c->failed = false;
        json_t *next;
        if (c->fkey[0] && json_is_object(node) && json_object_get(node, c->fkey)) {
            next = json_copy((json_t *)node);
            json_object_del(next, c->fkey);
        } else {
            next = json_true();
        }
        json_decref(copy);
        copy = next;
        node = next;
    }
}

/* The shared JSON rules, every name prefixed. */
static void shared_rules(strbuf_t *b, const char *p)
{
    strbuf_printf(b, "%svalue ::= %sobject | %sarray | %sstring | %snumber | %sboolean | %snull\n", p, p, p, p, p, p, p);
    strbuf_printf(b, "%sobject ::= \"{\" %sws (%sstring %sws \":\" %sws %svalue %sws (\",\" %sws %sstring %sws \":\" %sws %svalue %sws)*)? \"}\"\n",
              p, p, p, p, p, p, p, p, p, p, p, p, p);
    strbuf_printf(b, "%sarray ::= \"[\" %sws (%svalue %sws (\",\" %sws %svalue %sws)*)? \"]\"\n", p, p, p, p, p, p, p);
    strbuf_printf(b, "%sstring ::= \"\\\"\" %schar* \"\\\"\"\n", p, p);
    strbuf_printf(b, "%schar ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n", p);
    /* a character that is one UTF-16 unit too (no astral characters, no
     * surrogate escapes): length limits then hold for code points (JSON
     * Schema, ajv) and for UTF-16 length (JavaScript, zod) alike */
    strbuf_printf(b, "%sbchar ::= [^\"\\\\\\x00-\\x1f\\U00010000-\\U0010ffff] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3})\n", p);
    strbuf_printf(b, "%sinteger ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14})\n", p);
    /* exponents of ≤ 2 digits: the value stays finite in a double */
    strbuf_printf(b, "%snumber ::= %sinteger (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,2})?\n", p, p);
    strbuf_printf(b, "%sboolean ::= \"true\" | \"false\"\n", p);
    strbuf_printf(b, "%snull ::= \"null\"\n", p);
    strbuf_printf(b, "%sws ::= (\" \" | \"\\n\" [ \\t]{0,12})?\n", p);
}

static char *to_gbnf(const json_t *schema, const char *prefix, bool relax, char **relaxed, char *err,
                     size_t errlen, char *path, size_t pathlen)
{
    sc_t c = {.root = schema, .pfx = prefix ? prefix : "", .relax = relax};
    if (err && errlen)
        err[0] = 0;
    if (path && pathlen)
        path[0] = 0;
    if (relaxed)
        *relaxed = NULL;
    int top = compile(&c, schema);
    for (int i = 0; i < c.n_memo; i++)
        free(c.memo[i].ref);
    free(c.memo);
    if (top < 0 || c.failed) {
        if (err && errlen)
            errbuf_set(err, errlen, "%s", c.ferr);
        if (path && pathlen)
            snprintf(path, pathlen, "%s", c.fpath);
        free(c.out.s);
        free(c.relaxed.s);
        return NULL;
    }
    strbuf_t out = STRBUF_INIT;
    strbuf_printf(&out, "%sroot ::= %ss%d\n", c.pfx, c.pfx, top);
    if (c.out.s)
        strbuf_append(&out, c.out.s, c.out.len);
    free(c.out.s);
    shared_rules(&out, c.pfx);
    schema_format_rules(&out, c.pfx, c.formats);
    if (out.len > GBNF_MAX_TEXT) {
        errbuf_set(err, errlen, "the schema is too large (its grammar exceeds %u bytes)", GBNF_MAX_TEXT);
        free(out.s);
        free(c.relaxed.s);
        return NULL;
    }
    if (relaxed)
        *relaxed = c.relaxed.s;
    else
        free(c.relaxed.s);
    return out.s;
}

char *json_schema_to_gbnf(const json_t *schema, const char *prefix, char *err, size_t errlen, char *path,
                          size_t pathlen)
{
    return to_gbnf(schema, prefix, false, NULL, err, errlen, path, pathlen);
}

char *json_schema_to_gbnf_relaxed(const json_t *schema, const char *prefix, char **relaxed, char *err,
                                  size_t errlen)
{
    return to_gbnf(schema, prefix, true, relaxed, err, errlen, NULL, 0);
}

char *json_schema_object_gbnf(const char *prefix)
{
    const char *p = prefix ? prefix : "";
    strbuf_t out = STRBUF_INIT;
    strbuf_printf(&out, "%sroot ::= %sobject\n", p, p);
    shared_rules(&out, p);
    return strbuf_take(&out);
}

char *json_schema_gbnf_wrap(const char *inner, const char *inner_prefix, const char *prefix_text,
                            const char *suffix_text)
{
    strbuf_t out = STRBUF_INIT;
    strbuf_puts(&out, "root ::= ");
    if (prefix_text && *prefix_text) {
        gbnf_escape_literal(&out, prefix_text, strlen(prefix_text));
        strbuf_puts(&out, " ");
    }
    strbuf_printf(&out, "%sroot", inner_prefix);
    if (suffix_text && *suffix_text) {
        strbuf_puts(&out, " ");
        gbnf_escape_literal(&out, suffix_text, strlen(suffix_text));
    }
    strbuf_puts(&out, "\n");
    strbuf_puts(&out, inner);
    return strbuf_take(&out);
}

int json_schema_check(const uint8_t *buf, size_t len, char *err, size_t errlen)
{
    json_error_t je;
    json_t *s = json_loadb((const char *)buf, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!s) {
        errbuf_set(err, errlen, "invalid JSON: %s", je.text);
        return -1;
    }
    char path[256];
    char *text = json_schema_to_gbnf(s, NULL, err, errlen, path, sizeof path);
    json_decref(s);
    if (!text)
        return -1;
    grammar_t *g = NULL;
    int rc = gbnf_parse((const uint8_t *)text, strlen(text), &g, err, errlen, NULL, NULL);
    gbnf_free(&g);
    free(text);
    return rc;
}
