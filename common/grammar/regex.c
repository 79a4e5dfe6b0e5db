/* regex.c — an ECMA-262 regex subset → one GBNF expression (see regex.h).
 *
 * A recursive-descent reader (alternatives → sequences → quantified atoms)
 * writes the expression as it reads; every character class becomes a set of
 * code point ranges (cpset_t), normalized, and is written either as the
 * characters themselves or as they appear JSON-escaped inside a string. The
 * length range of what is generated is counted alongside, so the schema
 * compiler can fit a pattern to minLength/maxLength (regex_limits_t). */
#include "common/grammar/regex.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/utf8.h"
#include "common/xalloc.h"

typedef struct rx {
    const char *s;
    size_t n, p;
    bool failed;        /* the first failure is in fail_off / fail_what */
    int depth;
    long long cap;      /* ≥ 0: repetition counts above it are cut to it (maxLength) */
    long long floor;    /* > 0: repetition counts below it are raised to it (minLength) */
    bool floor_all;     /* raise optional repetitions too (else only those of min ≥ 1) */
    bool bmp;           /* only characters of one UTF-16 unit (lengths are checked) */
    unsigned flags;     /* REGEX_* */
    regex_len_t atom;       /* length of the atom rx_atom just read */
    size_t fail_off;    /* the first failure: offset in s, and what */
    const char *fail_what;
} rx_t;

static long long rx_mul(long long a, long long k) { return a >= REGEX_INF || k >= REGEX_INF ? REGEX_INF : a * k < REGEX_INF ? a * k : REGEX_INF; }

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
    if (s->n > 1) /* r is NULL when empty ('.' with the s flag) */
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
static void cps_emit(strbuf_t *b, const cpset_t *s)
{
    strbuf_t cls = {0};
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
            strbuf_printf(&cls, "\\U%08x", parts[j][0]);
            if (parts[j][1] != parts[j][0])
                strbuf_printf(&cls, "-\\U%08x", parts[j][1]);
            plain = true;
        }
    }
    strbuf_puts(b, "(");
    bool any = false;
    if (plain) {
        strbuf_printf(b, "[%s]", cls.s);
        any = true;
    }
    free(cls.s);
    static const struct { uint32_t c; const char *esc; } E[] = {
        {'"', "\"\\\\\\\"\""}, {'\\', "\"\\\\\\\\\""}, {'\n', "\"\\\\n\""}, {'\r', "\"\\\\r\""},
        {'\t', "\"\\\\t\""}, {'\b', "\"\\\\b\""}, {'\f', "\"\\\\f\""}};
    for (size_t k = 0; k < sizeof E / sizeof E[0]; k++)
        if (cps_has(s, E[k].c)) {
            strbuf_printf(b, "%s%s", any ? " | " : "", E[k].esc);
            any = true;
        }
    for (uint32_t ch = 0; ch < 0x20; ch++)
        if (ch != '\n' && ch != '\r' && ch != '\t' && ch != '\b' && ch != '\f' && cps_has(s, ch)) {
            strbuf_printf(b, "%s\"\\\\u%04x\"", any ? " | " : "", ch);
            any = true;
        }
    if (!any)
        strbuf_puts(b, "[^\\x00-\\U0010ffff]"); /* nothing */
    strbuf_puts(b, ")");
}

/* Writes the same set as one raw character (no JSON escaping): a class of
 * code point ranges, surrogates cut (gbnf refuses them). */
static void cps_emit_raw(strbuf_t *b, const cpset_t *s)
{
    strbuf_t cls = {0};
    for (int i = 0; i < s->n; i++) {
        /* the range below the surrogates, and the one above */
        uint32_t part[2][2] = {{s->r[i].lo, s->r[i].hi < 0xD7FF ? s->r[i].hi : 0xD7FF},
                               {s->r[i].lo > 0xE000 ? s->r[i].lo : 0xE000, s->r[i].hi}};
        for (int j = 0; j < 2; j++) {
            if (part[j][0] > part[j][1] || (j == 1 && part[j][1] < 0xE000))
                continue;
            strbuf_printf(&cls, "\\U%08x", part[j][0]);
            if (part[j][1] != part[j][0])
                strbuf_printf(&cls, "-\\U%08x", part[j][1]);
        }
    }
    if (cls.s)
        strbuf_printf(b, "[%s]", cls.s);
    else
        strbuf_puts(b, "[^\\x00-\\U0010ffff]"); /* nothing */
    free(cls.s);
}

static void rx_fail(rx_t *x, const char *what)
{
    if (!x->failed)
        x->fail_off = x->p, x->fail_what = what;
    x->failed = true;
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
    case 'x':
    case 'u': {
        int nhex = e == 'x' ? 2 : 4;
        if (x->p + (size_t)nhex > x->n) {
            rx_fail(x, "short \\x or \\u escape");
            return -1;
        }
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            char h = x->s[x->p++];
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) {
                rx_fail(x, "bad \\x or \\u escape");
                return -1;
            }
            v = v * 16 + (uint32_t)d;
        }
        return (int32_t)v;
    }
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            x->p -= 2; /* the offset of the backslash */
            rx_fail(x, "escape (backreference, word boundary or unknown)");
            return -1;
        }
        (void)in_class;
        return (unsigned char)e;
    }
}

static regex_len_t rx_alt(rx_t *x, strbuf_t *b);

/* emits a character set; with x->bmp without astral characters, so a length
 * counted in code points (JSON Schema) and in UTF-16 units (zod) agree */
static void rx_emit(rx_t *x, strbuf_t *b, cpset_t *set)
{
    if (x->bmp) {
        int m = 0;
        for (int i = 0; i < set->n; i++)
            if (set->r[i].lo <= 0xFFFF) {
                set->r[m] = set->r[i];
                if (set->r[m].hi > 0xFFFF)
                    set->r[m].hi = 0xFFFF;
                m++;
            }
        set->n = m;
    }
    if (x->flags & REGEX_RAW)
        cps_emit_raw(b, set);
    else
        cps_emit(b, set);
}

static void rx_atom(rx_t *x, strbuf_t *b)
{
    char ch = x->s[x->p];
    x->atom = (regex_len_t){1, 1};
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
        strbuf_puts(b, "(");
        regex_len_t g = rx_alt(x, b);
        x->depth--;
        if (x->p >= x->n || x->s[x->p] != ')') {
            rx_fail(x, "unclosed group");
            return;
        }
        x->p++;
        strbuf_puts(b, ")");
        x->atom = g;
    } else if (ch == '[') {
        x->p++;
        bool neg = false;
        if (x->p < x->n && x->s[x->p] == '^')
            neg = true, x->p++;
        cpset_t set = {0};
        bool first = true;
        while (!x->failed) {
            if (x->p >= x->n) {
                rx_fail(x, "unclosed class");
                break;
            }
            if (x->s[x->p] == ']' && !first) {
                x->p++;
                break;
            }
            first = false;
            /* Python warns about and Rust gives meaning to these: refused */
            if ((x->flags & REGEX_PYRUST) && x->s[x->p] == '[') {
                rx_fail(x, "'[' inside a class (a nested or POSIX class)");
                break;
            }
            if ((x->flags & REGEX_PYRUST) && x->p + 1 < x->n && x->s[x->p + 1] == x->s[x->p] &&
                strchr("&-~", x->s[x->p])) {
                rx_fail(x, "class set operation (&&, --, ~~)");
                break;
            }
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
        if (!x->failed) {
            cps_norm(&set, neg);
            rx_emit(x, b, &set);
        }
        free(set.r);
    } else if (ch == '.') {
        x->p++;
        cpset_t set = {0};
        if (!(x->flags & REGEX_DOTALL)) {
            cps_add(&set, '\n', '\n');
            if (!(x->flags & REGEX_PYRUST)) {
                cps_add(&set, '\r', '\r');
                cps_add(&set, 0x2028, 0x2029);
            }
        }
        cps_norm(&set, true);
        rx_emit(x, b, &set);
        free(set.r);
    } else if (ch == '\\' && x->p + 1 < x->n && strchr("dDwWsS", x->s[x->p + 1])) {
        cpset_t set = {0};
        bool neg;
        rx_class_escape(x, x->s[x->p + 1], &set, &neg);
        x->p += 2;
        cps_norm(&set, neg);
        rx_emit(x, b, &set);
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
        rx_emit(x, b, &set);
        free(set.r);
    }
}

static regex_len_t rx_seq(rx_t *x, strbuf_t *b)
{
    bool any = false;
    regex_len_t len = {0, 0};
    while (x->p < x->n && !x->failed) {
        char ch = x->s[x->p];
        if (ch == '|' || ch == ')')
            break;
        /* anchors: ^ opening and $ closing a top-level alternative */
        bool anchors = !(x->flags & REGEX_NO_ANCHORS);
        if (anchors && ch == '^' && !any && x->depth == 0) {
            x->p++;
            continue;
        }
        if (anchors && ch == '$' && x->depth == 0 && (x->p + 1 == x->n || x->s[x->p + 1] == '|')) {
            x->p++;
            break;
        }
        strbuf_puts(b, any ? " " : "");
        rx_atom(x, b);
        if (x->failed)
            return len;
        any = true;
        long long qm = 1, qM = 1; /* repetition counts (qM = REGEX_INF: unbounded) */
        if (x->p < x->n) {
            ch = x->s[x->p];
            bool quantified = true;
            if (ch == '*' || ch == '+' || ch == '?') {
                qm = ch == '+', qM = ch == '?' ? 1 : REGEX_INF;
                x->p++;
            } else if (ch == '{') {
                size_t q = x->p + 1;
                long m = 0, M = -2;
                while (q < x->n && x->s[q] >= '0' && x->s[q] <= '9' && m <= REGEX_MAX_COUNT)
                    m = m * 10 + (x->s[q++] - '0');
                if (q < x->n && x->s[q] == '}') {
                    M = m;
                } else if (q < x->n && x->s[q] == ',') {
                    q++;
                    if (q < x->n && x->s[q] == '}') {
                        M = -1;
                    } else {
                        M = 0;
                        while (q < x->n && x->s[q] >= '0' && x->s[q] <= '9' && M <= REGEX_MAX_COUNT)
                            M = M * 10 + (x->s[q++] - '0');
                        if (q >= x->n || x->s[q] != '}')
                            M = -2;
                    }
                }
                if (M == -2 || q == x->p + 1 || m > REGEX_MAX_COUNT || M > REGEX_MAX_COUNT ||
                    (M >= 0 && M < m)) {
                    rx_fail(x, "bad {m,n} quantifier");
                    return len;
                }
                qm = m, qM = M == -1 ? REGEX_INF : M;
                x->p = q + 1;
            } else {
                quantified = false;
            }
            if (quantified) {
                /* length limits: counts cut at cap, raised to floor (a subset) */
                if (x->cap >= 0 && qM > x->cap)
                    qM = x->cap > qm ? x->cap : qm;
                if (x->floor > qm && (qm >= 1 || x->floor_all))
                    qm = x->floor < qM ? x->floor : qM;
                if (qm == 0 && qM == REGEX_INF)
                    strbuf_puts(b, "*");
                else if (qm == 1 && qM == REGEX_INF)
                    strbuf_puts(b, "+");
                else if (qm == 0 && qM == 1)
                    strbuf_puts(b, "?");
                else if (qM == REGEX_INF)
                    strbuf_printf(b, "{%lld,}", qm);
                else
                    strbuf_printf(b, "{%lld,%lld}", qm, qM);
            }
            if (x->p < x->n && x->s[x->p] == '?')
                x->p++; /* lazy: same language */
            if (x->p < x->n && strchr("*+?{", x->s[x->p])) {
                rx_fail(x, "two quantifiers in a row");
                return len;
            }
        }
        len.lo = len.lo + rx_mul(x->atom.lo, qm);
        len.hi = len.hi + rx_mul(x->atom.hi, qM);
        if (len.lo > REGEX_INF)
            len.lo = REGEX_INF;
        if (len.hi > REGEX_INF)
            len.hi = REGEX_INF;
    }
    if (!any)
        strbuf_puts(b, "\"\"");
    return len;
}

static regex_len_t rx_alt(rx_t *x, strbuf_t *b)
{
    regex_len_t len = rx_seq(x, b);
    while (!x->failed && x->p < x->n && x->s[x->p] == '|') {
        x->p++;
        strbuf_puts(b, " | ");
        regex_len_t l = rx_seq(x, b);
        if (l.lo < len.lo)
            len.lo = l.lo;
        if (l.hi > len.hi)
            len.hi = l.hi;
    }
    return len;
}

int regex_compile(const char *re, size_t len, unsigned flags, const regex_limits_t *lim, strbuf_t *out,
                  regex_len_t *out_len, size_t *err_off, const char **err_what)
{
    /* lim->floor < 0: -floor applies to optional repetitions too */
    rx_t x = {.s = re, .n = len, .cap = lim ? lim->cap : -1, .flags = flags};
    if (lim) {
        x.floor = lim->floor < 0 ? -lim->floor : lim->floor;
        x.floor_all = lim->floor < 0;
        x.bmp = lim->bmp;
    }
    regex_len_t l = rx_alt(&x, out);
    if (!x.failed && x.p < x.n)
        rx_fail(&x, "unmatched ')'");
    if (out_len)
        *out_len = l;
    if (x.failed) {
        if (err_off)
            *err_off = x.fail_off;
        if (err_what)
            *err_what = x.fail_what;
        return -1;
    }
    return 0;
}

char *regex_to_gbnf(const uint8_t *re, size_t len, unsigned flags, char *err, size_t errlen, size_t *err_off)
{
    if (err_off)
        *err_off = 0;
    if (!utf8_valid(re, len)) {
        errbuf_set(err, errlen, "the regex is not valid UTF-8");
        return NULL;
    }
    strbuf_t b = STRBUF_INIT;
    strbuf_puts(&b, "(");
    const char *what = NULL;
    if (regex_compile((const char *)re, len, flags, NULL, &b, NULL, err_off, &what) != 0) {
        errbuf_set(err, errlen, "%s", what);
        strbuf_free(&b);
        return NULL;
    }
    strbuf_puts(&b, ")");
    return strbuf_take(&b);
}
