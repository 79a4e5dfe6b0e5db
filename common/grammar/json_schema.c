/* json_schema.c — JSON Schema subset → GBNF text (see json_schema.h).
 *
 * Every schema node becomes one rule "<prefix>sN ::= ..." written into a
 * growing text; shared JSON pieces (value, string, char, number, ws, ...)
 * are written once at the end. $ref targets are memoized by their pointer
 * text before they are compiled, so recursive schemas become recursive
 * rules. The text is checked by gbnf_parse afterwards by the callers
 * (json_schema_check), which also catches schemas that can never finish. */
#include "common/grammar/json_schema.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/gbnf.h"
#include "common/xalloc.h"

#define MAXV 999999999999999LL /* integers have at most 15 digits */

typedef struct sbuf {
    char *s;
    size_t n, cap;
} sbuf_t;

static void sb_putn(sbuf_t *b, const char *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2 + 256;
        b->s = xrealloc(b->s, b->cap);
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}
static void sb_puts(sbuf_t *b, const char *s) { sb_putn(b, s, strlen(s)); }
static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof tmp) {
        char *big = xmalloc((size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(big, (size_t)n + 1, fmt, ap);
        va_end(ap);
        sb_putn(b, big, (size_t)n);
        free(big);
    } else if (n > 0) {
        sb_putn(b, tmp, (size_t)n);
    }
}

/* A GBNF string literal for the bytes s[0..n). */
static void sb_lit(sbuf_t *b, const char *s, size_t n)
{
    sb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            sb_printf(b, "\\x%02x", c);
        else
            sb_putn(b, (const char *)&c, 1);
    }
    sb_puts(b, "\"");
}

typedef struct memo {
    char *ref;
    int rule;
} memo_t;

typedef struct sc {
    sbuf_t out;              /* rules written so far */
    const json_t *root;      /* the whole schema ($ref "#") */
    const char *pfx;
    int n_rules;
    memo_t *memo;            /* (n_memo) $ref → rule */
    int n_memo, cap_memo;
    int depth;
    char path[512];          /* JSON pointer of the node being compiled */
    bool failed;
    char *err;
    size_t errlen;
    char *epath;
    size_t epathlen;
} sc_t;

static void sc_fail(sc_t *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void sc_fail(sc_t *c, const char *key, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(c->err, c->errlen, fmt, ap);
    va_end(ap);
    if (c->epath && c->epathlen)
        snprintf(c->epath, c->epathlen, "%s%s%s", c->path, key ? "/" : "", key ? key : "");
}

static int new_rule(sc_t *c)
{
    if (c->n_rules >= JSON_SCHEMA_MAX_RULES) {
        sc_fail(c, NULL, "the schema is too large (more than %d grammar rules)", JSON_SCHEMA_MAX_RULES);
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

/* rule "<pfx>sN ::= " opened; caller writes the body and "\n" */
static void rule_open(sc_t *c, int r) { sb_printf(&c->out, "%ss%d ::= ", c->pfx, r); }
static void ref(sc_t *c, sbuf_t *b, int r) { sb_printf(b, "%ss%d", c->pfx, r); }
static void shared(sc_t *c, sbuf_t *b, const char *name) { sb_printf(b, "%s%s", c->pfx, name); }

static int json_literal_rule(sc_t *c, const json_t **vals, size_t n)
{
    int r = new_rule(c);
    if (r < 0)
        return -1;
    sbuf_t body = {0};
    for (size_t i = 0; i < n; i++) {
        char *t = json_dumps(vals[i], JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) {
            free(body.s);
            sc_fail(c, NULL, "cannot write a value of enum/const");
            return -1;
        }
        if (i)
            sb_puts(&body, " | ");
        sb_lit(&body, t, strlen(t));
        free(t);
    }
    rule_open(c, r);
    sb_puts(&c->out, n ? body.s : "\"\"");
    sb_puts(&c->out, "\n");
    free(body.s);
    return r;
}

/* ---- numbers ---------------------------------------------------------------- */

/* GBNF for decimal strings of equal length n between L and H (L ≤ H). */
static void digits_range(sbuf_t *b, const char *L, const char *H, int n)
{
    if (n == 0) {
        sb_puts(b, "\"\"");
        return;
    }
    if (strncmp(L, H, (size_t)n) == 0) {
        sb_lit(b, L, (size_t)n);
        return;
    }
    if (L[0] == H[0]) {
        sb_printf(b, "\"%c\" ", L[0]);
        digits_range(b, L + 1, H + 1, n - 1);
        return;
    }
    bool low_zero = true, high_nine = true;
    for (int i = 1; i < n; i++) {
        low_zero &= L[i] == '0';
        high_nine &= H[i] == '9';
    }
    char nines[32], zeros[32];
    memset(nines, '9', sizeof nines);
    memset(zeros, '0', sizeof zeros);
    char lo_first = L[0], hi_first = H[0];
    bool any = false;
    sb_puts(b, "(");
    if (!low_zero) {
        sb_printf(b, "\"%c\" (", L[0]);
        digits_range(b, L + 1, nines, n - 1);
        sb_puts(b, ")");
        lo_first++;
        any = true;
    }
    if (!high_nine)
        hi_first--;
    if (lo_first <= hi_first) {
        if (any)
            sb_puts(b, " | ");
        sb_printf(b, "[%c-%c]", lo_first, hi_first);
        if (n > 1)
            sb_printf(b, " [0-9]{%d}", n - 1);
        any = true;
    }
    if (!high_nine) {
        if (any)
            sb_puts(b, " | ");
        sb_printf(b, "\"%c\" (", H[0]);
        digits_range(b, zeros, H + 1, n - 1);
        sb_puts(b, ")");
    }
    sb_puts(b, ")");
}

/* GBNF for the integers a..b, 0 ≤ a ≤ b ≤ MAXV, without leading zeros. */
static void uint_range(sbuf_t *b, long long a, long long hi)
{
    sb_puts(b, "(");
    bool first = true;
    long long p = 1;
    for (int d = 1; d <= 15; d++, p *= 10) {
        long long lo_d = d == 1 ? 0 : p, hi_d = p * 10 - 1;
        long long lo = a > lo_d ? a : lo_d, h = hi < hi_d ? hi : hi_d;
        if (lo > h)
            continue;
        char L[32], H[32];
        snprintf(L, sizeof L, "%lld", lo);
        snprintf(H, sizeof H, "%lld", h);
        if (!first)
            sb_puts(b, " | ");
        first = false;
        digits_range(b, L, H, d);
    }
    sb_puts(b, ")");
}

/* reals with magnitude in [a, b] (0 ≤ a ≤ b, b may be MAXV+1 = unbounded) */
static void real_mag(sbuf_t *b, long long a, long long hi, bool unbounded)
{
    if (!unbounded && a == hi) {
        sb_printf(b, "\"%lld\"", a);
        return;
    }
    sb_puts(b, "(");
    uint_range(b, a, unbounded ? MAXV : hi - 1);
    sb_puts(b, " (\".\" [0-9]{1,15})?");
    if (!unbounded)
        sb_printf(b, " | \"%lld\"", hi);
    sb_puts(b, ")");
}

/* Reads a numeric bound; returns 0 (absent), 1 (set), -1 (error). */
static int get_bound(sc_t *c, const json_t *s, const char *key, bool integral, double *out)
{
    const json_t *v = json_object_get(s, key);
    if (!v)
        return 0;
    if (!json_is_number(v)) {
        sc_fail(c, key, "'%s' must be a number", key);
        return -1;
    }
    double x = json_number_value(v);
    if (integral && x != floor(x)) {
        sc_fail(c, key, "'%s' must be an integer here (non-integer bounds are supported only for integers)", key);
        return -1;
    }
    if (fabs(x) > (double)MAXV) {
        sc_fail(c, key, "'%s' is out of the supported range (|x| < 10^15)", key);
        return -1;
    }
    *out = x;
    return 1;
}

static int number_rule(sc_t *c, const json_t *s, bool integer)
{
    double mn = 0, mx = 0, emn = 0, emx = 0;
    int hmn = get_bound(c, s, "minimum", !integer, &mn);
    int hmx = get_bound(c, s, "maximum", !integer, &mx);
    int hemn = get_bound(c, s, "exclusiveMinimum", !integer, &emn);
    int hemx = get_bound(c, s, "exclusiveMaximum", !integer, &emx);
    if (hmn < 0 || hmx < 0 || hemn < 0 || hemx < 0)
        return -1;
    if (!integer && (hemn || hemx)) {
        sc_fail(c, hemn ? "exclusiveMinimum" : "exclusiveMaximum",
                "exclusive bounds are supported only for type integer");
        return -1;
    }
    int r = new_rule(c);
    if (r < 0)
        return -1;
    rule_open(c, r);
    if (!hmn && !hmx && !hemn && !hemx) {
        shared(c, &c->out, integer ? "integer" : "number");
        sb_puts(&c->out, "\n");
        return r;
    }
    long long lo = -MAXV, hi = MAXV;
    bool has_lo = false, has_hi = false;
    if (integer) {
        if (hmn) lo = (long long)ceil(mn), has_lo = true;
        if (hemn && (long long)floor(emn) + 1 > lo) lo = (long long)floor(emn) + 1, has_lo = true;
        if (hmx) hi = (long long)floor(mx), has_hi = true;
        if (hemx && (long long)ceil(emx) - 1 < hi) hi = (long long)ceil(emx) - 1, has_hi = true;
    } else {
        if (hmn) lo = (long long)mn, has_lo = true;
        if (hmx) hi = (long long)mx, has_hi = true;
    }
    if (lo > hi) {
        sc_fail(c, "minimum", "no number satisfies these bounds (minimum > maximum)");
        return -1;
    }
    bool any = false;
    sb_puts(&c->out, "(");
    if (lo < 0) { /* negative part: magnitudes [max(1 or 0, -hi), -lo] */
        sb_puts(&c->out, "\"-\" ");
        if (integer) {
            long long a = hi >= 0 ? 1 : -hi;
            uint_range(&c->out, a, -lo);
        } else {
            long long a = hi >= 0 ? 0 : -hi;
            real_mag(&c->out, a, -lo, !has_lo);
        }
        any = true;
    }
    if (hi >= 0) {
        if (any)
            sb_puts(&c->out, " | ");
        long long a = lo > 0 ? lo : 0;
        if (integer)
            uint_range(&c->out, a, hi);
        else
            real_mag(&c->out, a, hi, !has_hi);
    }
    sb_puts(&c->out, ")\n");
    return r;
}

/* ---- pattern (ECMA-262 subset) → GBNF of the JSON-escaped string body -------- */

typedef struct rx {
    const char *s;
    size_t n, p;
    sc_t *c;
    int depth;
} rx_t;

typedef struct cpr {
    uint32_t lo, hi;
} cpr_t;

typedef struct cpset {
    cpr_t *r;
    int n, cap;
} cpset_t;

static void cps_add(cpset_t *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->r = xrealloc(s->r, (size_t)s->cap * sizeof *s->r);
    }
    s->r[s->n++] = (cpr_t){lo, hi};
}

static int cmp_cpr(const void *x, const void *y)
{
    const cpr_t *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

static void cps_norm(cpset_t *s, bool negate)
{
    qsort(s->r, (size_t)s->n, sizeof *s->r, cmp_cpr);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[i].lo <= s->r[m - 1].hi + 1) {
            if (s->r[i].hi > s->r[m - 1].hi)
                s->r[m - 1].hi = s->r[i].hi;
        } else {
            s->r[m++] = s->r[i];
        }
    }
    s->n = m;
    if (!negate)
        return;
    cpset_t t = {0};
    uint32_t next = 0;
    for (int i = 0; i < m; i++) {
        if (s->r[i].lo > next)
            cps_add(&t, next, s->r[i].lo - 1);
        next = s->r[i].hi + 1;
    }
    if (next <= 0x10FFFF)
        cps_add(&t, next, 0x10FFFF);
    free(s->r);
    *s = t;
}

static bool cps_has(const cpset_t *s, uint32_t c)
{
    for (int i = 0; i < s->n; i++)
        if (c >= s->r[i].lo && c <= s->r[i].hi)
            return true;
    return false;
}

/* Writes a GBNF expression for "one character of s, as it appears inside a
 * JSON string": plain characters raw, '"' '\' and controls escaped. */
static void cps_emit(sbuf_t *b, const cpset_t *s)
{
    sbuf_t cls = {0};
    bool plain = false;
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i].lo, hi = s->r[i].hi;
        /* cut out 0..1F, '"', '\\', surrogates (the parser refuses those) */
        uint32_t cuts[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0xD800, 0xDFFF}};
        uint32_t parts[8][2];
        int np = 1;
        parts[0][0] = lo, parts[0][1] = hi;
        for (int k = 0; k < 4; k++) {
            int nn = 0;
            uint32_t out[8][2];
            for (int j = 0; j < np; j++) {
                uint32_t a = parts[j][0], z = parts[j][1];
                if (z < cuts[k][0] || a > cuts[k][1]) {
                    out[nn][0] = a, out[nn][1] = z, nn++;
                    continue;
                }
                if (a < cuts[k][0])
                    out[nn][0] = a, out[nn][1] = cuts[k][0] - 1, nn++;
                if (z > cuts[k][1])
                    out[nn][0] = cuts[k][1] + 1, out[nn][1] = z, nn++;
            }
            memcpy(parts, out, sizeof out);
            np = nn;
        }
        for (int j = 0; j < np; j++) {
            sb_printf(&cls, "\\U%08x", parts[j][0]);
            if (parts[j][1] != parts[j][0])
                sb_printf(&cls, "-\\U%08x", parts[j][1]);
            plain = true;
        }
    }
    sb_puts(b, "(");
    bool any = false;
    if (plain) {
        sb_printf(b, "[%s]", cls.s);
        any = true;
    }
    free(cls.s);
    static const struct { uint32_t c; const char *esc; } E[] = {
        {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""}, {'\r', "\"\\\\r\""},
        {'\t', "\"\\\\t\""}, {'\b', "\"\\\\b\""}, {'\f', "\"\\\\f\""}};
    for (size_t k = 0; k < sizeof E / sizeof E[0]; k++)
        if (cps_has(s, E[k].c)) {
            sb_printf(b, "%s%s", any ? " | " : "", E[k].esc);
            any = true;
        }
    for (uint32_t ch = 0; ch < 0x20; ch++)
        if (ch != '\n' && ch != '\r' && ch != '\t' && ch != '\b' && ch != '\f' && cps_has(s, ch)) {
            sb_printf(b, "%s\"\\\\u%04x\"", any ? " | " : "", ch);
            any = true;
        }
    if (!any)
        sb_puts(b, "[^\\x00-\\U0010ffff]"); /* nothing */
    sb_puts(b, ")");
}

static void rx_fail(rx_t *x, const char *what)
{
    sc_fail(x->c, "pattern", "pattern feature not supported at offset %zu: %s", x->p, what);
}

static void rx_class_escape(rx_t *x, int e, cpset_t *set, bool *neg_out)
{
    *neg_out = false;
    switch (e) {
    case 'd': cps_add(set, '0', '9'); break;
    case 'D': cps_add(set, '0', '9'); *neg_out = true; break;
    case 'w': cps_add(set, '0', '9'); cps_add(set, 'A', 'Z'); cps_add(set, 'a', 'z'); cps_add(set, '_', '_'); break;
    case 'W': cps_add(set, '0', '9'); cps_add(set, 'A', 'Z'); cps_add(set, 'a', 'z'); cps_add(set, '_', '_'); *neg_out = true; break;
    case 's': cps_add(set, ' ', ' '); cps_add(set, '\t', '\r'); break;
    case 'S': cps_add(set, ' ', ' '); cps_add(set, '\t', '\r'); *neg_out = true; break;
    default: rx_fail(x, "unknown escape");
    }
}

static int32_t rx_utf8(rx_t *x)
{
    const unsigned char *s = (const unsigned char *)x->s + x->p;
    size_t left = x->n - x->p;
    uint32_t c = s[0];
    int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if ((size_t)n > left) {
        rx_fail(x, "bad UTF-8");
        return -1;
    }
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1F : n == 3 ? c & 0x0F : c & 0x07;
    for (int i = 1; i < n; i++)
        cp = (cp << 6) | (s[i] & 0x3F);
    x->p += (size_t)n;
    return (int32_t)cp;
}

/* one literal char of the pattern (after a backslash or not) */
static int32_t rx_char(rx_t *x, bool in_class)
{
    if (x->s[x->p] != '\\')
        return rx_utf8(x);
    x->p++;
    if (x->p >= x->n) {
        rx_fail(x, "trailing backslash");
        return -1;
    }
    char e = x->s[x->p++];
    switch (e) {
    case 'n': return '\n';
    case 't': return '\t';
    case 'r': return '\r';
    case 'f': return '\f';
    case 'v': return '\v';
    case '0': return 0;
    case 'u': {
        if (x->p + 4 > x->n) {
            rx_fail(x, "short \\u escape");
            return -1;
        }
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
            char h = x->s[x->p++];
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) {
                rx_fail(x, "bad \\u escape");
                return -1;
            }
            v = v * 16 + (uint32_t)d;
        }
        return (int32_t)v;
    }
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            rx_fail(x, "escape (backreference, word boundary or unknown)");
            return -1;
        }
        (void)in_class;
        return (unsigned char)e;
    }
}

static void rx_alt(rx_t *x, sbuf_t *b);

static void rx_atom(rx_t *x, sbuf_t *b)
{
    char ch = x->s[x->p];
    if (ch == '(') {
        x->p++;
        if (x->p < x->n && x->s[x->p] == '?') {
            if (x->p + 1 < x->n && x->s[x->p + 1] == ':') {
                x->p += 2;
            } else {
                rx_fail(x, "lookaround or named group");
                return;
            }
        }
        if (++x->depth > 32) {
            rx_fail(x, "groups nested too deeply");
            return;
        }
        sb_puts(b, "(");
        rx_alt(x, b);
        x->depth--;
        if (x->p >= x->n || x->s[x->p] != ')') {
            rx_fail(x, "unclosed group");
            return;
        }
        x->p++;
        sb_puts(b, ")");
    } else if (ch == '[') {
        x->p++;
        bool neg = false;
        if (x->p < x->n && x->s[x->p] == '^')
            neg = true, x->p++;
        cpset_t set = {0};
        bool first = true;
        while (!x->c->failed) {
            if (x->p >= x->n) {
                rx_fail(x, "unclosed class");
                break;
            }
            if (x->s[x->p] == ']' && !first) {
                x->p++;
                break;
            }
            first = false;
            if (x->s[x->p] == '\\' && x->p + 1 < x->n && strchr("dDwWsS", x->s[x->p + 1])) {
                char e = x->s[x->p + 1];
                x->p += 2;
                if (e >= 'A' && e <= 'Z') {
                    rx_fail(x, "negated class escape inside a class");
                    break;
                }
                bool n2;
                rx_class_escape(x, e, &set, &n2);
                continue;
            }
            int32_t lo = rx_char(x, true), hi = lo;
            if (lo < 0)
                break;
            if (x->p + 1 < x->n && x->s[x->p] == '-' && x->s[x->p + 1] != ']') {
                x->p++;
                hi = rx_char(x, true);
                if (hi < lo) {
                    rx_fail(x, "bad range");
                    break;
                }
            }
            cps_add(&set, (uint32_t)lo, (uint32_t)hi);
        }
        if (!x->c->failed) {
            cps_norm(&set, neg);
            cps_emit(b, &set);
        }
        free(set.r);
    } else if (ch == '.') {
        x->p++;
        cpset_t set = {0};
        cps_add(&set, '\n', '\n');
        cps_add(&set, '\r', '\r');
        cps_add(&set, 0x2028, 0x2029);
        cps_norm(&set, true);
        cps_emit(b, &set);
        free(set.r);
    } else if (ch == '\\' && x->p + 1 < x->n && strchr("dDwWsS", x->s[x->p + 1])) {
        cpset_t set = {0};
        bool neg;
        rx_class_escape(x, x->s[x->p + 1], &set, &neg);
        x->p += 2;
        cps_norm(&set, neg);
        cps_emit(b, &set);
        free(set.r);
    } else if (ch == '^' || ch == '$') {
        rx_fail(x, "anchor inside the pattern");
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        rx_fail(x, "quantifier without an atom");
    } else {
        int32_t cp = rx_char(x, false);
        if (cp < 0)
            return;
        cpset_t set = {0};
        cps_add(&set, (uint32_t)cp, (uint32_t)cp);
        cps_emit(b, &set);
        free(set.r);
    }
}

static void rx_seq(rx_t *x, sbuf_t *b)
{
    bool any = false;
    while (x->p < x->n && !x->c->failed) {
        char ch = x->s[x->p];
        if (ch == '|' || ch == ')')
            break;
        if (ch == '$' && x->p + 1 == x->n && x->depth == 0) {
            x->p++;
            break;
        }
        sb_puts(b, any ? " " : "");
        rx_atom(x, b);
        if (x->c->failed)
            return;
        any = true;
        if (x->p < x->n) {
            ch = x->s[x->p];
            if (ch == '*' || ch == '+' || ch == '?') {
                sb_putn(b, &ch, 1);
                x->p++;
            } else if (ch == '{') {
                size_t q = x->p + 1;
                long m = 0, M = -2;
                while (q < x->n && x->s[q] >= '0' && x->s[q] <= '9' && m <= JSON_SCHEMA_MAX_COUNT)
                    m = m * 10 + (x->s[q++] - '0');
                if (q < x->n && x->s[q] == '}') {
                    M = m;
                } else if (q < x->n && x->s[q] == ',') {
                    q++;
                    if (q < x->n && x->s[q] == '}') {
                        M = -1;
                    } else {
                        M = 0;
                        while (q < x->n && x->s[q] >= '0' && x->s[q] <= '9' && M <= JSON_SCHEMA_MAX_COUNT)
                            M = M * 10 + (x->s[q++] - '0');
                        if (q >= x->n || x->s[q] != '}')
                            M = -2;
                    }
                }
                if (M == -2 || q == x->p + 1 || m > JSON_SCHEMA_MAX_COUNT || M > JSON_SCHEMA_MAX_COUNT ||
                    (M >= 0 && M < m)) {
                    rx_fail(x, "bad {m,n} quantifier");
                    return;
                }
                if (M == -1)
                    sb_printf(b, "{%ld,}", m);
                else
                    sb_printf(b, "{%ld,%ld}", m, M);
                x->p = q + 1;
            }
            if (x->p < x->n && x->s[x->p] == '?')
                x->p++; /* lazy: same language */
            if (x->p < x->n && strchr("*+?{", x->s[x->p])) {
                rx_fail(x, "two quantifiers in a row");
                return;
            }
        }
    }
    if (!any)
        sb_puts(b, "\"\"");
}

static void rx_alt(rx_t *x, sbuf_t *b)
{
    rx_seq(x, b);
    while (!x->c->failed && x->p < x->n && x->s[x->p] == '|') {
        x->p++;
        sb_puts(b, " | ");
        rx_seq(x, b);
    }
}

/* ---- schema nodes ---------------------------------------------------------- */

static const char *const ANNOTATIONS[] = {"$schema", "$id", "$comment", "title", "description", "default",
                                          "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", NULL};
static const char *const SUPPORTED[] = {"type", "enum", "const", "anyOf", "allOf", "$ref", "properties",
                                        "required", "additionalProperties", "items", "minItems", "maxItems",
                                        "minLength", "maxLength", "pattern", "minimum", "maximum",
                                        "exclusiveMinimum", "exclusiveMaximum", NULL};

static bool in_list(const char *k, const char *const *l)
{
    for (; *l; l++)
        if (strcmp(k, *l) == 0)
            return true;
    return false;
}

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

static int string_rule(sc_t *c, const json_t *s)
{
    long long mn = 0, mx = -1;
    int a = get_count(c, s, "minLength", &mn), b = get_count(c, s, "maxLength", &mx);
    if (a < 0 || b < 0)
        return -1;
    if (b && mx < mn) {
        sc_fail(c, "maxLength", "maxLength is below minLength");
        return -1;
    }
    const json_t *pat = json_object_get(s, "pattern");
    int r = new_rule(c);
    if (r < 0)
        return -1;
    sbuf_t body = {0};
    if (pat) {
        if (!json_is_string(pat)) {
            sc_fail(c, "pattern", "'pattern' must be a string");
            return -1;
        }
        if (a || b) {
            sc_fail(c, "pattern", "'pattern' together with minLength/maxLength is not supported");
            return -1;
        }
        rx_t x = {.s = json_string_value(pat), .n = json_string_length(pat), .c = c};
        if (x.n && x.s[0] == '^')
            x.p = 1;
        sb_puts(&body, "\"\\\"\" (");
        rx_alt(&x, &body);
        if (!c->failed && x.p < x.n)
            rx_fail(&x, "unmatched ')'");
        sb_puts(&body, ") \"\\\"\"");
    } else if (!a && !b) {
        shared(c, &body, "string");
    } else {
        sb_puts(&body, "\"\\\"\" ");
        shared(c, &body, "bchar");
        if (b)
            sb_printf(&body, "{%lld,%lld}", mn, mx);
        else
            sb_printf(&body, "{%lld,}", mn);
        sb_puts(&body, " \"\\\"\"");
    }
    if (!c->failed) {
        rule_open(c, r);
        sb_puts(&c->out, body.s);
        sb_puts(&c->out, "\n");
    }
    free(body.s);
    return c->failed ? -1 : r;
}

static int array_rule(sc_t *c, const json_t *s)
{
    long long mn = 0, mx = -1;
    int a = get_count(c, s, "minItems", &mn), b = get_count(c, s, "maxItems", &mx);
    if (a < 0 || b < 0)
        return -1;
    if (b && mx < mn) {
        sc_fail(c, "maxItems", "maxItems is below minItems");
        return -1;
    }
    const json_t *items = json_object_get(s, "items");
    int item;
    if (items) {
        if (json_is_array(items)) {
            sc_fail(c, "items", "'items' as an array (tuples) is not supported");
            return -1;
        }
        size_t old = path_push(c, "items", NULL);
        item = compile(c, items);
        path_pop(c, old);
        if (item < 0)
            return -1;
    } else {
        item = -1;
    }
    int r = new_rule(c);
    if (r < 0)
        return -1;
    sbuf_t it = {0};
    if (item >= 0)
        ref(c, &it, item);
    else
        shared(c, &it, "value");
    sb_puts(&it, " ");
    shared(c, &it, "ws");
    rule_open(c, r);
    sb_puts(&c->out, "\"[\" ");
    shared(c, &c->out, "ws");
    sb_puts(&c->out, " ");
    if (b && mx == 0) {
        /* nothing */
    } else {
        if (mn == 0)
            sb_puts(&c->out, "(");
        sb_printf(&c->out, "%s (\",\" ", it.s);
        shared(c, &c->out, "ws");
        sb_printf(&c->out, " %s)", it.s);
        long long lo = mn > 0 ? mn - 1 : 0;
        if (b)
            sb_printf(&c->out, "{%lld,%lld}", lo, mx - 1);
        else
            sb_printf(&c->out, "{%lld,}", lo);
        if (mn == 0)
            sb_puts(&c->out, ")?");
    }
    sb_puts(&c->out, " \"]\"\n");
    free(it.s);
    return r;
}

static int object_rule(sc_t *c, const json_t *s)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *add = json_object_get(s, "additionalProperties");
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
    bool map = add && !json_is_false(add);
    if (add && !json_is_boolean(add) && !json_is_object(add)) {
        sc_fail(c, "additionalProperties", "'additionalProperties' must be a boolean or a schema");
        return -1;
    }
    size_t n_props = props ? json_object_size(props) : 0;
    if (map && n_props) {
        sc_fail(c, "additionalProperties",
                "additionalProperties other than false together with 'properties' is not supported");
        return -1;
    }
    if (map && n_req) {
        sc_fail(c, "required", "'required' on a map (additionalProperties without properties) is not supported");
        return -1;
    }
    for (size_t i = 0; i < n_req; i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!props || !json_object_get(props, k)) {
            sc_fail(c, "required", "required property '%.100s' is not in 'properties'", k);
            return -1;
        }
    }
    if (map) {
        int v = -1;
        if (json_is_object(add)) {
            size_t old = path_push(c, "additionalProperties", NULL);
            v = compile(c, add);
            path_pop(c, old);
            if (v < 0)
                return -1;
        }
        int r = new_rule(c);
        if (r < 0)
            return -1;
        sbuf_t kv = {0};
        shared(c, &kv, "string");
        sb_puts(&kv, " ");
        shared(c, &kv, "ws");
        sb_puts(&kv, " \":\" ");
        shared(c, &kv, "ws");
        sb_puts(&kv, " ");
        if (v >= 0)
            ref(c, &kv, v);
        else
            shared(c, &kv, "value");
        sb_puts(&kv, " ");
        shared(c, &kv, "ws");
        rule_open(c, r);
        sb_puts(&c->out, "\"{\" ");
        shared(c, &c->out, "ws");
        sb_printf(&c->out, " (%s (\",\" ", kv.s);
        shared(c, &c->out, "ws");
        sb_printf(&c->out, " %s)*)? \"}\"\n", kv.s);
        free(kv.s);
        return r;
    }
    /* listed properties in order; each kv rule, then first_i / rest_i chains */
    int *kv = xcalloc(n_props + 1, sizeof *kv);
    bool *required = xcalloc(n_props + 1, sizeof *required);
    size_t i = 0;
    const char *key;
    json_t *sub;
    json_object_foreach((json_t *)props, key, sub) {
        for (size_t k = 0; k < n_req; k++)
            if (strcmp(json_string_value(json_array_get(req, k)), key) == 0)
                required[i] = true;
        size_t old = path_push(c, "properties", key);
        int v = compile(c, sub);
        path_pop(c, old);
        if (v < 0)
            goto fail;
        int r = new_rule(c);
        if (r < 0)
            goto fail;
        json_t *ks = json_string(key);
        char *kt = json_dumps(ks, JSON_ENCODE_ANY);
        json_decref(ks);
        rule_open(c, r);
        sb_lit(&c->out, kt, strlen(kt));
        free(kt);
        sb_puts(&c->out, " ");
        shared(c, &c->out, "ws");
        sb_puts(&c->out, " \":\" ");
        shared(c, &c->out, "ws");
        sb_puts(&c->out, " ");
        ref(c, &c->out, v);
        sb_puts(&c->out, " ");
        shared(c, &c->out, "ws");
        sb_puts(&c->out, "\n");
        kv[i++] = r;
    }
    int first_next = -1, rest_next = -1; /* -1 = empty */
    for (size_t j = n_props; j-- > 0;) {
        int rest = new_rule(c), first = new_rule(c);
        if (rest < 0 || first < 0)
            goto fail;
        rule_open(c, rest);
        sb_puts(&c->out, required[j] ? "" : "(");
        sb_puts(&c->out, "\",\" ");
        shared(c, &c->out, "ws");
        sb_puts(&c->out, " ");
        ref(c, &c->out, kv[j]);
        sb_puts(&c->out, required[j] ? " " : ")? ");
        if (rest_next >= 0)
            ref(c, &c->out, rest_next);
        sb_puts(&c->out, "\n");
        rule_open(c, first);
        ref(c, &c->out, kv[j]);
        sb_puts(&c->out, " ");
        if (rest_next >= 0)
            ref(c, &c->out, rest_next);
        if (!required[j]) {
            sb_puts(&c->out, " | ");
            if (first_next >= 0)
                ref(c, &c->out, first_next);
            else
                sb_puts(&c->out, "\"\"");
        }
        sb_puts(&c->out, "\n");
        rest_next = rest;
        first_next = first;
    }
    int r = new_rule(c);
    if (r < 0)
        goto fail;
    rule_open(c, r);
    sb_puts(&c->out, "\"{\" ");
    shared(c, &c->out, "ws");
    sb_puts(&c->out, " ");
    if (first_next >= 0)
        ref(c, &c->out, first_next);
    sb_puts(&c->out, " \"}\"\n");
    free(kv);
    free(required);
    return r;
fail:
    free(kv);
    free(required);
    return -1;
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
    sb_puts(&c->out, "\n");
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
            sb_puts(&c->out, " | ");
        ref(c, &c->out, subs[i]);
    }
    sb_puts(&c->out, "\n");
    return r;
}

static const json_t *resolve_ref(sc_t *c, const char *p)
{
    if (strcmp(p, "#") == 0)
        return c->root;
    const char *name = NULL;
    const json_t *defs = NULL;
    if (strncmp(p, "#/$defs/", 8) == 0)
        name = p + 8, defs = json_object_get(c->root, "$defs");
    else if (strncmp(p, "#/definitions/", 14) == 0)
        name = p + 14, defs = json_object_get(c->root, "definitions");
    if (!name || strchr(name, '/') || !json_is_object(defs))
        return NULL;
    /* JSON pointer unescape: ~1 → /, ~0 → ~ */
    char buf[256];
    size_t k = 0;
    for (const char *q = name; *q && k + 1 < sizeof buf; q++) {
        if (q[0] == '~' && q[1] == '1')
            buf[k++] = '/', q++;
        else if (q[0] == '~' && q[1] == '0')
            buf[k++] = '~', q++;
        else
            buf[k++] = *q;
    }
    buf[k] = 0;
    return json_object_get(defs, buf);
}

static int compile(sc_t *c, const json_t *s)
{
    if (c->failed)
        return -1;
    if (json_is_true(s))
        goto any;
    if (json_is_false(s)) {
        sc_fail(c, NULL, "the schema 'false' matches nothing");
        return -1;
    }
    if (!json_is_object(s)) {
        sc_fail(c, NULL, "a schema must be an object or a boolean");
        return -1;
    }
    if (++c->depth > JSON_SCHEMA_MAX_DEPTH) {
        sc_fail(c, NULL, "schemas nested deeper than %d", JSON_SCHEMA_MAX_DEPTH);
        return -1;
    }
    int result = -1;
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        if (!in_list(key, SUPPORTED) && !in_list(key, ANNOTATIONS)) {
            sc_fail(c, key, "unsupported JSON Schema keyword '%.60s'", key);
            goto out;
        }
    }
    const json_t *r = json_object_get(s, "$ref");
    if (r) {
        json_object_foreach((json_t *)s, key, v) {
            if (strcmp(key, "$ref") && !in_list(key, ANNOTATIONS)) {
                sc_fail(c, key, "keyword '%.60s' next to '$ref' is not supported", key);
                goto out;
            }
        }
        if (!json_is_string(r)) {
            sc_fail(c, "$ref", "'$ref' must be a string");
            goto out;
        }
        const char *p = json_string_value(r);
        for (int i = 0; i < c->n_memo; i++)
            if (strcmp(c->memo[i].ref, p) == 0) {
                result = c->memo[i].rule;
                goto out;
            }
        const json_t *target = resolve_ref(c, p);
        if (!target) {
            sc_fail(c, "$ref", "'$ref' '%.100s' does not resolve (supported: #, #/$defs/NAME, #/definitions/NAME)", p);
            goto out;
        }
        int rr = new_rule(c);
        if (rr < 0)
            goto out;
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
            goto out;
        rule_open(c, rr);
        ref(c, &c->out, t);
        sb_puts(&c->out, "\n");
        result = rr;
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
    const json_t *any_of = json_object_get(s, "anyOf");
    const json_t *all_of = json_object_get(s, "allOf");
    if (all_of) {
        if (!json_is_array(all_of) || json_array_size(all_of) != 1) {
            sc_fail(c, "allOf", "'allOf' is supported only with exactly one schema");
            goto out;
        }
        if (any_of || json_object_get(s, "type")) {
            sc_fail(c, "allOf", "'allOf' together with other constraints is not supported");
            goto out;
        }
        size_t old = path_push(c, "allOf", "0");
        result = compile(c, json_array_get(all_of, 0));
        path_pop(c, old);
        goto out;
    }
    if (any_of) {
        if (!json_is_array(any_of) || json_array_size(any_of) == 0) {
            sc_fail(c, "anyOf", "'anyOf' must be a non-empty array");
            goto out;
        }
        json_object_foreach((json_t *)s, key, v) {
            if (strcmp(key, "anyOf") && !in_list(key, ANNOTATIONS)) {
                sc_fail(c, key, "keyword '%.60s' next to 'anyOf' is not supported", key);
                goto out;
            }
        }
        size_t n = json_array_size(any_of);
        int *subs = xmalloc(n * sizeof *subs);
        for (size_t i = 0; i < n; i++) {
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            size_t old = path_push(c, "anyOf", idx);
            subs[i] = compile(c, json_array_get(any_of, i));
            path_pop(c, old);
            if (subs[i] < 0) {
                free(subs);
                goto out;
            }
        }
        result = alternatives_rule(c, subs, n);
        free(subs);
        goto out;
    }
    const json_t *type = json_object_get(s, "type");
    if (type && json_is_string(type)) {
        result = type_rule(c, s, json_string_value(type));
        goto out;
    }
    if (type && json_is_array(type)) {
        size_t n = json_array_size(type);
        if (n == 0) {
            sc_fail(c, "type", "'type' must not be an empty array");
            goto out;
        }
        int *subs = xmalloc(n * sizeof *subs);
        for (size_t i = 0; i < n; i++) {
            const json_t *t = json_array_get(type, i);
            if (!json_is_string(t)) {
                sc_fail(c, "type", "'type' entries must be strings");
                free(subs);
                goto out;
            }
            subs[i] = type_rule(c, s, json_string_value(t));
            if (subs[i] < 0) {
                free(subs);
                goto out;
            }
        }
        result = alternatives_rule(c, subs, n);
        free(subs);
        goto out;
    }
    if (type) {
        sc_fail(c, "type", "'type' must be a string or an array of strings");
        goto out;
    }
    /* no type: infer it from the keywords used */
    if (json_object_get(s, "properties") || json_object_get(s, "required") ||
        json_object_get(s, "additionalProperties"))
        result = object_rule(c, s);
    else if (json_object_get(s, "items") || json_object_get(s, "minItems") || json_object_get(s, "maxItems"))
        result = array_rule(c, s);
    else if (json_object_get(s, "minLength") || json_object_get(s, "maxLength") || json_object_get(s, "pattern"))
        result = string_rule(c, s);
    else if (json_object_get(s, "minimum") || json_object_get(s, "maximum") ||
             json_object_get(s, "exclusiveMinimum") || json_object_get(s, "exclusiveMaximum"))
        result = number_rule(c, s, false);
    else {
        c->depth--;
        goto any;
    }
out:
    c->depth--;
    return c->failed ? -1 : result;
any: {
    int rr = new_rule(c);
    if (rr < 0)
        return -1;
    rule_open(c, rr);
    shared(c, &c->out, "value");
    sb_puts(&c->out, "\n");
    return rr;
}
}

/* The shared JSON rules, every name prefixed. */
static void shared_rules(sbuf_t *b, const char *p)
{
    sb_printf(b, "%svalue ::= %sobject | %sarray | %sstring | %snumber | %sboolean | %snull\n", p, p, p, p, p, p, p);
    sb_printf(b, "%sobject ::= \"{\" %sws (%sstring %sws \":\" %sws %svalue %sws (\",\" %sws %sstring %sws \":\" %sws %svalue %sws)*)? \"}\"\n",
              p, p, p, p, p, p, p, p, p, p, p, p, p);
    sb_printf(b, "%sarray ::= \"[\" %sws (%svalue %sws (\",\" %sws %svalue %sws)*)? \"]\"\n", p, p, p, p, p, p, p);
    sb_printf(b, "%sstring ::= \"\\\"\" %schar* \"\\\"\"\n", p, p);
    sb_printf(b, "%schar ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n", p);
    /* a character that is one UTF-16 unit too (no astral characters, no
     * surrogate escapes): length limits then hold for code points (JSON
     * Schema, ajv) and for UTF-16 length (JavaScript, zod) alike */
    sb_printf(b, "%sbchar ::= [^\"\\\\\\x00-\\x1f\\U00010000-\\U0010ffff] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3})\n", p);
    sb_printf(b, "%sinteger ::= \"-\"? (\"0\" | [1-9] [0-9]{0,14})\n", p);
    sb_printf(b, "%snumber ::= %sinteger (\".\" [0-9]{1,15})? ([eE] [-+]? [0-9]{1,3})?\n", p, p);
    sb_printf(b, "%sboolean ::= \"true\" | \"false\"\n", p);
    sb_printf(b, "%snull ::= \"null\"\n", p);
    sb_printf(b, "%sws ::= (\" \" | \"\\n\" [ \\t]{0,12})?\n", p);
}

char *json_schema_to_gbnf(const json_t *schema, const char *prefix, char *err, size_t errlen, char *path,
                          size_t pathlen)
{
    sc_t c = {.root = schema, .pfx = prefix ? prefix : "", .err = err, .errlen = errlen, .epath = path,
              .epathlen = pathlen};
    if (err && errlen)
        err[0] = 0;
    if (path && pathlen)
        path[0] = 0;
    int top = compile(&c, schema);
    for (int i = 0; i < c.n_memo; i++)
        free(c.memo[i].ref);
    free(c.memo);
    if (top < 0 || c.failed) {
        free(c.out.s);
        return NULL;
    }
    sbuf_t out = {0};
    sb_printf(&out, "%sroot ::= %ss%d\n", c.pfx, c.pfx, top);
    sb_putn(&out, c.out.s, c.out.n);
    free(c.out.s);
    shared_rules(&out, c.pfx);
    if (out.n > GBNF_MAX_TEXT) {
        errbuf_set(err, errlen, "the schema is too large (its grammar exceeds %u bytes)", GBNF_MAX_TEXT);
        free(out.s);
        return NULL;
    }
    return out.s;
}

char *json_schema_object_gbnf(const char *prefix)
{
    const char *p = prefix ? prefix : "";
    sbuf_t out = {0};
    sb_printf(&out, "%sroot ::= %sobject\n", p, p);
    shared_rules(&out, p);
    return out.s;
}

char *json_schema_gbnf_wrap(const char *inner, const char *inner_prefix, const char *prefix_text,
                            const char *suffix_text)
{
    sbuf_t out = {0};
    sb_puts(&out, "root ::= ");
    if (prefix_text && *prefix_text) {
        sb_lit(&out, prefix_text, strlen(prefix_text));
        sb_puts(&out, " ");
    }
    sb_printf(&out, "%sroot", inner_prefix);
    if (suffix_text && *suffix_text) {
        sb_puts(&out, " ");
        sb_lit(&out, suffix_text, strlen(suffix_text));
    }
    sb_puts(&out, "\n");
    sb_puts(&out, inner);
    return out.s;
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
