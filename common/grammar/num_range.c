/* num_range.c — JSON numbers between bounds, and multiples, as GBNF rules
 * (see num_range.h). */
#include "common/grammar/num_range.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/gbnf.h"
#include "common/xalloc.h"

/* the rules being written, and the first failure */
typedef struct nr {
    strbuf_t *out;
    const char *pfx;
    int *n_rules;
    int max_rules;
    bool failed;
    const char *err_key; /* the keyword refused; NULL: too many rules */
    char *err;
    size_t errlen;
} nr_t;

static void nr_fail(nr_t *c, const char *key, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void nr_fail(nr_t *c, const char *key, const char *fmt, ...)
{
    if (c->failed)
        return;
    c->failed = true;
    c->err_key = key;
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(c->err, c->errlen, fmt, ap);
    va_end(ap);
}

static int new_rule(nr_t *c)
{
    if (*c->n_rules >= c->max_rules) {
        nr_fail(c, NULL, "too many rules");
        return -1;
    }
    return (*c->n_rules)++;
}

/* rule "<pfx>sN ::= " opened; the caller writes the body and "\n" */
static void rule_open(nr_t *c, int r) { strbuf_printf(c->out, "%ss%d ::= ", c->pfx, r); }
static void ref(nr_t *c, int r) { strbuf_printf(c->out, "%ss%d", c->pfx, r); }

/* GBNF for decimal strings of equal length n between L and H (L ≤ H). */
static void digits_range(strbuf_t *b, const char *L, const char *H, int n)
{
    if (n == 0) {
        strbuf_puts(b, "\"\"");
        return;
    }
    if (strncmp(L, H, (size_t)n) == 0) {
        gbnf_escape_literal(b, L, (size_t)n);
        return;
    }
    if (L[0] == H[0]) {
        strbuf_printf(b, "\"%c\" ", L[0]);
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
    strbuf_puts(b, "(");
    if (!low_zero) {
        strbuf_printf(b, "\"%c\" (", L[0]);
        digits_range(b, L + 1, nines, n - 1);
        strbuf_puts(b, ")");
        lo_first++;
        any = true;
    }
    if (!high_nine)
        hi_first--;
    if (lo_first <= hi_first) {
        if (any)
            strbuf_puts(b, " | ");
        strbuf_printf(b, "[%c-%c]", lo_first, hi_first);
        if (n > 1)
            strbuf_printf(b, " [0-9]{%d}", n - 1);
        any = true;
    }
    if (!high_nine) {
        if (any)
            strbuf_puts(b, " | ");
        strbuf_printf(b, "\"%c\" (", H[0]);
        digits_range(b, zeros, H + 1, n - 1);
        strbuf_puts(b, ")");
    }
    strbuf_puts(b, ")");
}

/* GBNF for the integers a..b, 0 ≤ a ≤ b ≤ NUM_RANGE_MAX, without leading zeros. */
static void uint_range(strbuf_t *b, long long a, long long hi)
{
    strbuf_puts(b, "(");
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
            strbuf_puts(b, " | ");
        first = false;
        digits_range(b, L, H, d);
    }
    strbuf_puts(b, ")");
}

/* reals with magnitude in [a, b] (0 ≤ a ≤ b, b may be NUM_RANGE_MAX+1 = unbounded) */
static void real_mag(strbuf_t *b, long long a, long long hi, bool unbounded)
{
    if (!unbounded && a == hi) {
        strbuf_printf(b, "\"%lld\"", a);
        return;
    }
    strbuf_puts(b, "(");
    uint_range(b, a, unbounded ? NUM_RANGE_MAX : hi - 1);
    strbuf_puts(b, " (\".\" [0-9]{1,15})?");
    if (!unbounded)
        strbuf_printf(b, " | \"%lld\"", hi);
    strbuf_puts(b, ")");
}

/* Does the decimal text t (as a client parses it) satisfy bound b? */
static bool text_ok(const char *t, const num_bound_t *b, bool lower)
{
    if (!b->set)
        return true;
    double x = strtod(t, NULL);
    if (lower)
        return b->excl ? x > b->v : x >= b->v;
    return b->excl ? x < b->v : x <= b->v;
}

/* n / 10^k as decimal text with exactly k fraction digits */
static void fixed_text(char *out, size_t len, long long n, int k)
{
    char d[48];
    int nd = snprintf(d, sizeof d, "%0*lld", k + 1, n < 0 ? -n : n);
    if (k == 0)
        snprintf(out, len, "%s%s", n < 0 ? "-" : "", d);
    else
        snprintf(out, len, "%s%.*s.%s", n < 0 ? "-" : "", nd - k, d, d + nd - k);
}

/* The smallest (lower) or largest (upper) n with n / 10^k inside b, checked
 * on the decimal text a client parses (so 0.3 > 0.3 is never generated). */
static long long grid_edge(const num_bound_t *b, bool lower, int k, long long unset)
{
    if (!b->set)
        return unset;
    double scale = pow(10, k);
    long long n = lower ? (long long)ceil(b->v * scale) - 2 : (long long)floor(b->v * scale) + 2;
    char t[64];
    for (int i = 0; i < 8; i++) {
        fixed_text(t, sizeof t, n, k);
        if (text_ok(t, b, lower))
            break;
        n += lower ? 1 : -1;
    }
    /* walk back while the neighbour is still inside */
    for (int i = 0; i < 8; i++) {
        fixed_text(t, sizeof t, lower ? n - 1 : n + 1, k);
        if (!text_ok(t, b, lower))
            break;
        n += lower ? -1 : 1;
    }
    return n;
}

/* magnitudes a..hi (0 ≤ a ≤ hi) scaled by 10^k, written with exactly k
 * fraction digits: the integer part, ".", k digits bounded at the ends */
static void fixed_mag(strbuf_t *b, long long a, long long hi, int k)
{
    assert(k >= 1 && k <= 6); /* number_rule's grid */
    long long scale = 1;
    for (int i = 0; i < k; i++)
        scale *= 10;
    long long ia = a / scale, fa = a % scale, ih = hi / scale, fh = hi % scale;
    char FA[8], FH[8], Z[8], N[8]; /* k digits each, written from the right */
    for (int i = k - 1; i >= 0; i--, fa /= 10, fh /= 10) {
        FA[i] = (char)('0' + fa % 10);
        FH[i] = (char)('0' + fh % 10);
        Z[i] = '0';
        N[i] = '9';
    }
    FA[k] = FH[k] = Z[k] = N[k] = 0;
    strbuf_puts(b, "(");
    if (ia == ih) {
        strbuf_printf(b, "\"%lld.\" (", ia);
        digits_range(b, FA, FH, k);
        strbuf_puts(b, ")");
    } else {
        strbuf_printf(b, "\"%lld.\" (", ia);
        digits_range(b, FA, N, k);
        strbuf_puts(b, ")");
        if (ih - ia > 1) {
            strbuf_puts(b, " | ");
            uint_range(b, ia + 1, ih - 1);
            strbuf_printf(b, " \".\" [0-9]{%d}", k);
        }
        strbuf_printf(b, " | \"%lld.\" (", ih);
        digits_range(b, Z, FH, k);
        strbuf_puts(b, ")");
    }
    strbuf_puts(b, ")");
}

/* Positive multiples of m with at most 15 digits. Two forms:
 *  - m divides 10^t (m = 2^a·5^b, 10^t/m ≤ 1000): the multiples below 10^t
 *    listed, or any digits followed by one of the t-digit endings that are
 *    multiples of m;
 *  - else m = c·10^j with c ≤ 64: a remainder automaton over the digits of
 *    a multiple of c (one rule per remainder and length), then j zeros.
 * Writes the rules; returns the rule for the multiples, or -1. */
static int multiples_rule(nr_t *c, long long m)
{
    long long pow10 = 1;
    int t = 0;
    while (t <= 15 && pow10 % m != 0)
        pow10 *= 10, t++;
    if (t <= 12 && pow10 % m == 0 && pow10 / m <= 1000) {
        int p = new_rule(c);
        if (p < 0)
            return -1;
        rule_open(c, p);
        for (long long k = m; k < pow10; k += m)
            strbuf_printf(c->out, "\"%lld\" | ", k);
        strbuf_printf(c->out, "[1-9] [0-9]{0,%d} (", 14 - t);
        for (long long k = 0; k < pow10; k += m)
            strbuf_printf(c->out, "%s\"%0*lld\"", k ? " | " : "", t, k);
        strbuf_puts(c->out, ")\n");
        return p;
    }
    int j = 0;
    while (m % 10 == 0)
        m /= 10, j++;
    if (m > 64) {
        nr_fail(c, "multipleOf", "'multipleOf' is supported for integers whose digits before trailing zeros are at most 64, "
                                 "or that divide a power of ten");
        return -1;
    }
    int nd = 15 - j; /* digits before the zeros */
    int q0 = *c->n_rules;
    for (long long i = 0; i < m * nd; i++)
        if (new_rule(c) < 0)
            return -1;
    /* rule q0 + r*nd + (d-1): remainder r after d digits; live[] = it can
     * still end on remainder 0 within nd digits (dead ones are written but
     * never referenced) */
    bool *live = xcalloc((size_t)(m * (nd + 1)), sizeof *live);
    for (int d = nd; d >= 1; d--)
        for (long long r = 0; r < m; r++) {
            bool l = r == 0;
            for (int e = 0; e < 10 && d < nd && !l; e++)
                l = live[((r * 10 + e) % m) * (nd + 1) + d + 1];
            live[r * (nd + 1) + d] = l;
        }
    for (long long r = 0; r < m; r++)
        for (int d = 1; d <= nd; d++) {
            rule_open(c, q0 + (int)(r * nd + d - 1));
            bool any = false;
            if (d < nd)
                for (int e = 0; e < 10; e++) {
                    long long to = (r * 10 + e) % m;
                    if (!live[to * (nd + 1) + d + 1])
                        continue;
                    bool first = true;
                    for (int f = 0; f < e; f++)
                        first &= (r * 10 + f) % m != to;
                    if (!first)
                        continue;
                    strbuf_printf(c->out, "%s[", any ? " | " : "");
                    for (int f = e; f < 10; f++)
                        if ((r * 10 + f) % m == to)
                            strbuf_printf(c->out, "%d", f);
                    strbuf_puts(c->out, "] ");
                    ref(c, q0 + (int)(to * nd + d));
                    any = true;
                }
            if (r == 0 || !any)
                strbuf_puts(c->out, any ? " | \"\"" : "\"\""); /* !any && r != 0: dead, never referenced */
            strbuf_puts(c->out, "\n");
        }
    int p = new_rule(c);
    if (p < 0)
        return -1;
    rule_open(c, p);
    strbuf_puts(c->out, "(");
    bool any = false;
    for (int d = 1; d < 10; d++) {
        if (!live[(d % m) * (nd + 1) + 1])
            continue;
        strbuf_printf(c->out, "%s\"%d\" ", any ? " | " : "", d);
        ref(c, q0 + (int)((d % m) * nd));
        any = true;
    }
    free(live);
    strbuf_puts(c->out, ")");
    if (j)
        strbuf_printf(c->out, " \"%0*d\"", j, 0);
    strbuf_puts(c->out, "\n");
    return p;
}

/* integer / number with bounds (any of minimum, maximum, exclusiveMinimum,
 * exclusiveMaximum, fractional or not) and multipleOf (integral). */
static int number_rule(nr_t *c, const num_range_t *spec)
{
    num_bound_t L = spec->lo, H = spec->hi;
    double mult = spec->mult;
    int hm = spec->has_mult;
    /* multipleOf 1/q (0.5, 0.01, z.number().multipleOf(0.01)): every
     * integer is a multiple, and n / m rounds to exactly n·q in binary
     * floating point too (what ajv and zod compute), so integers are
     * generated */
    bool whole = spec->integer;
    if (hm && mult > 0 && mult < 1) {
        double q = floor(1 / mult + 0.5);
        if (q >= 2 && q <= 1e6 && fabs(q * mult - 1) < 1e-12)
            hm = 0, whole = true;
    }
    if (hm && (!(mult > 0) || mult != floor(mult) || mult > 1e12)) {
        nr_fail(c, "multipleOf", "'multipleOf' is supported only as a positive integer (at most 10^12) or 1/n (0.5, 0.01, ...)");
        return -1;
    }
    if (hm && mult == 1)
        hm = 0, whole = true;
    whole |= hm != 0; /* only integers are generated */
    /* find the coarsest decimal grid (k fraction digits) with a value inside */
    int k = 0;
    long long lo = 0, hi = 0;
    for (;; k++) {
        if (k > (whole ? 0 : 6) || (k > 0 && (fabs(L.v) > 1e12 || fabs(H.v) > 1e12))) {
            nr_fail(c, L.set ? "minimum" : "maximum", "no number satisfies these bounds");
            return -1;
        }
        lo = grid_edge(&L, true, k, -NUM_RANGE_MAX);
        hi = grid_edge(&H, false, k, NUM_RANGE_MAX);
        if (lo <= hi)
            break;
    }
    int r = new_rule(c);
    if (r < 0)
        return -1;
    if (hm) {
        long long m = (long long)mult;
        long long qa = lo >= 0 ? (lo + m - 1) / m : -((-lo) / m), qb = hi >= 0 ? hi / m : -((-hi + m - 1) / m);
        if (qa > qb) {
            nr_fail(c, "multipleOf", "no multiple of 'multipleOf' lies within the bounds");
            return -1;
        }
        if (qb - qa < 256) { /* few: list them */
            rule_open(c, r);
            for (long long q = qa; q <= qb; q++)
                strbuf_printf(c->out, "%s\"%lld\"", q > qa ? " | " : "", q * m);
            strbuf_puts(c->out, "\n");
            return r;
        }
        /* many: every multiple of each sign the bounds allow wholesale */
        bool neg = !L.set, zero = lo <= 0 && hi >= 0, pos = !H.set;
        if ((L.set && lo > m) || (H.set && hi < -m) || (L.set && lo < 0) || (H.set && hi > 0)) {
            nr_fail(c, "multipleOf", "'multipleOf' with bounds spanning more than 256 multiples is supported "
                                      "only with bounds at 0 or within one multiple of it");
            return -1;
        }
        int p = multiples_rule(c, m);
        if (p < 0)
            return -1;
        rule_open(c, r);
        bool any = false;
        if (neg) {
            strbuf_puts(c->out, "\"-\" ");
            ref(c, p);
            any = true;
        }
        if (zero) {
            strbuf_printf(c->out, "%s\"0\"", any ? " | " : "");
            any = true;
        }
        if (pos) {
            strbuf_puts(c->out, any ? " | " : "");
            ref(c, p);
        }
        strbuf_puts(c->out, "\n");
        return r;
    }
    rule_open(c, r);
    if (!L.set && !H.set) {
        strbuf_printf(c->out, "%s%s", c->pfx, whole ? "integer" : "number");
        strbuf_puts(c->out, "\n");
        return r;
    }
    bool any = false;
    strbuf_puts(c->out, "(");
    if (lo < 0) { /* negative part: magnitudes [max(1 or 0, -hi), -lo] */
        strbuf_puts(c->out, "\"-\" ");
        if (whole) {
            uint_range(c->out, hi >= 0 ? 1 : -hi, -lo);
        } else if (k == 0) {
            real_mag(c->out, hi >= 0 ? 0 : -hi, -lo, !L.set);
        } else {
            fixed_mag(c->out, hi >= 0 ? 1 : -hi, -lo, k);
        }
        any = true;
    }
    if (hi >= 0) {
        if (any)
            strbuf_puts(c->out, " | ");
        long long a = lo > 0 ? lo : 0;
        if (whole)
            uint_range(c->out, a, hi);
        else if (k == 0)
            real_mag(c->out, a, hi, !H.set);
        else
            fixed_mag(c->out, a, hi, k);
    }
    strbuf_puts(c->out, ")\n");
    return r;
}


int num_range_rules(const num_range_t *spec, strbuf_t *out, const char *pfx, int *n_rules, int max_rules,
                    const char **err_key, char *err, size_t errlen)
{
    nr_t c = {.out = out, .pfx = pfx, .n_rules = n_rules, .max_rules = max_rules, .err = err, .errlen = errlen};
    int r = number_rule(&c, spec);
    if (r < 0 || c.failed) {
        if (err_key)
            *err_key = c.err_key;
        return -1;
    }
    return r;
}
