/* lark.c — OpenAI custom-tool grammars (a Lark subset, whole-text regexes)
 * → GBNF text (see lark.h).
 *
 * One pass of recursive descent over the Lark text writes one GBNF line per
 * definition as it goes (GBNF allows references before definitions); names
 * are checked afterwards (undefined, terminal cycles), then the text is run
 * through gbnf_parse, whose refusals (left recursion, rules that never
 * finish, size) are mapped back to the Lark definition through a table of
 * the Lark offset each output line came from.
 *
 * Where %ignore is not yet known (it usually comes last), rules carry a
 * MARK byte before every terminal; the last step replaces it by the ignore
 * rule's name, or by nothing. Output never holds a raw control byte
 * otherwise (literals and classes escape them), so MARK is unambiguous. */
#include "common/grammar/lark.h"

#include <assert.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"
#include "common/grammar/regex.h"
#include "common/strbuf.h"
#include "common/utf8.h"
#include "common/vec.h"
#include "common/xalloc.h"

#define MARK '\x01'          /* "ignored terminals may stand here" (rules only) */
#define HASH_SLOTS 16384     /* > 2 * LARK_MAX_DEFS: open addressing stays short */

/* ---- common.lark ------------------------------------------------------------- */

/* The terminals `%import common.NAME` provides, in Lark syntax (compiled by
 * this file like any definition; their references are to each other). */
static const struct common_def {
    const char *name;
    const char *def;
} COMMON[] = {
    {"DIGIT", "\"0\"..\"9\""},
    {"HEXDIGIT", "\"a\"..\"f\" | \"A\"..\"F\" | DIGIT"},
    {"INT", "DIGIT+"},
    {"DIGITS", "DIGIT+"},
    {"SIGNED_INT", "[\"+\"|\"-\"] INT"},
    {"DECIMAL", "INT \".\" INT? | \".\" INT"},
    {"_EXP", "(\"e\"|\"E\") SIGNED_INT"},
    {"FLOAT", "INT _EXP | DECIMAL _EXP?"},
    {"SIGNED_FLOAT", "[\"+\"|\"-\"] FLOAT"},
    {"NUMBER", "FLOAT | INT"},
    {"SIGNED_NUMBER", "[\"+\"|\"-\"] NUMBER"},
    /* "..." where a backslash escapes the next character (not a newline) */
    {"ESCAPED_STRING", "\"\\\"\" /([^\"\\\\\\n]|\\\\.)*/ \"\\\"\""},
    {"LCASE_LETTER", "\"a\"..\"z\""},
    {"UCASE_LETTER", "\"A\"..\"Z\""},
    {"LETTER", "UCASE_LETTER | LCASE_LETTER"},
    {"WORD", "LETTER+"},
    {"CNAME", "(\"_\"|LETTER) (\"_\"|LETTER|DIGIT)*"},
    {"WS_INLINE", "(\" \"|/\\t/)+"},
    {"WS", "/[ \\t\\f\\r\\n]/+"},
    {"CR", "/\\r/"},
    {"LF", "/\\n/"},
    {"NEWLINE", "(CR? LF)+"},
    {"SH_COMMENT", "/#[^\\n]*/"},
    {"CPP_COMMENT", "/\\/\\/[^\\n]*/"},
    /* a C comment in its regular form (the token Lark's lazy .*? picks) */
    {"C_COMMENT", "\"/*\" /([^*]|\\*+[^*\\/])*/ /\\*+/ \"/\""},
    {"SQL_COMMENT", "/--[^\\n]*/"},
};
#define N_COMMON ((int)(sizeof COMMON / sizeof COMMON[0]))
_Static_assert(sizeof COMMON / sizeof COMMON[0] <= 64, "common_done is a 64-bit mask");

static int common_find(const char *name, size_t n)
{
    for (int i = 0; i < N_COMMON; i++)
        if (strlen(COMMON[i].name) == n && memcmp(COMMON[i].name, name, n) == 0)
            return i;
    return -1;
}

/* ---- compiler state ------------------------------------------------------------ */

typedef struct def {
    char *name;     /* as written, without ! ? modifiers */
    bool terminal;  /* uppercase name */
    bool defined;
    size_t off;     /* offset of the definition, or of the first reference */
} def_t;

typedef struct edge {
    int32_t from, to; /* terminal `from` uses terminal `to` */
} edge_t;

typedef struct origin {
    size_t off;       /* Lark offset the output line came from */
    char what[160];   /* "rule 'x'", "terminal 'X'", "regex", ... */
} origin_t;

enum { CTX_RULE = -1, CTX_IGNORE = -2, CTX_COMMON = -3 }; /* lk_t.ctx when not a terminal's index */

typedef struct lk {
    const uint8_t *src;   /* (src_n) the Lark text (error positions) */
    size_t src_n;
    const uint8_t *s;     /* (n) the text being read: src, or a COMMON definition */
    size_t n, p;
    size_t common_at;     /* offset of the %import while reading COMMON text */
    int mode;             /* enum lark_mode */
    const char *pfx;
    strbuf_t out;           /* GBNF lines written so far (with MARKs) */
    origin_t *org;        /* (n_org) one per line of out */
    size_t n_org, cap_org;
    def_t *defs;          /* (n_defs) every name defined or referenced */
    int32_t n_defs, cap_defs;
    int32_t *slot;        /* (HASH_SLOTS) def index + 1, 0 = empty */
    edge_t *edges;        /* (n_edges) terminal → terminal uses */
    size_t n_edges, cap_edges;
    int32_t ctx;          /* ≥ 0: reading that terminal's body; else CTX_* */
    uint64_t common_done; /* COMMON[i] written (bit i) */
    bool ignore;          /* a %ignore was read */
    strbuf_t ign;           /* the ignore rule's alternatives */
    size_t ign_off;
    int n_regex;
    int depth;
    bool failed;
    char err[512];
} lk_t;

static void line_col(const uint8_t *s, size_t n, size_t off, int *line, int *col)
{
    *line = 1, *col = 1;
    for (size_t i = 0; i < off && i < n; i++) {
        if (s[i] == '\n')
            ++*line, *col = 1;
        else if ((s[i] & 0xC0) != 0x80)
            ++*col;
    }
}

static void lk_fail(lk_t *L, size_t off, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void lk_fail(lk_t *L, size_t off, const char *fmt, ...)
{
    if (L->failed)
        return;
    L->failed = true;
    if (L->s != L->src)
        off = L->common_at;
    int line, col;
    line_col(L->src, L->src_n, off, &line, &col);
    int k = snprintf(L->err, sizeof L->err, "line %d, column %d: ", line, col);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(L->err + k, sizeof L->err - (size_t)k, fmt, ap);
    va_end(ap);
}

/* One finished GBNF line "<pfx><kind><name> ::= body" from Lark offset off. */
static void emit_line(lk_t *L, size_t off, const char *what, const char *kind, const char *name, size_t name_n,
                      const char *body)
{
    if (L->out.len + strlen(body) > GBNF_MAX_TEXT) {
        lk_fail(L, off, "the grammar is too large (its GBNF exceeds %u bytes)", GBNF_MAX_TEXT);
        return;
    }
    strbuf_printf(&L->out, "%s%s%.*s ::= %s\n", L->pfx, kind, (int)name_n, name, body);
    vec_reserve(L->org, L->cap_org, L->n_org + 1);
    origin_t *o = &L->org[L->n_org++];
    o->off = L->s == L->src ? off : L->common_at;
    snprintf(o->what, sizeof o->what, "%s", what);
}

static uint32_t name_hash(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

/* The def for name (created when absent); -1 (failed) past LARK_MAX_DEFS. */
static int32_t def_get(lk_t *L, const char *name, size_t n, size_t off)
{
    uint32_t h = name_hash(name, n) & (HASH_SLOTS - 1);
    while (L->slot[h]) {
        def_t *d = &L->defs[L->slot[h] - 1];
        if (strlen(d->name) == n && memcmp(d->name, name, n) == 0)
            return L->slot[h] - 1;
        h = (h + 1) & (HASH_SLOTS - 1);
    }
    if (L->n_defs >= LARK_MAX_DEFS) {
        lk_fail(L, off, "too many names (more than %d)", LARK_MAX_DEFS);
        return -1;
    }
    vec_reserve(L->defs, L->cap_defs, L->n_defs + 1);
    def_t *d = &L->defs[L->n_defs];
    d->name = xmalloc(n + 1);
    memcpy(d->name, name, n);
    d->name[n] = 0;
    d->terminal = name[name[0] == '_'] >= 'A' && name[name[0] == '_'] <= 'Z';
    d->defined = false;
    d->off = off;
    L->slot[h] = ++L->n_defs;
    return L->n_defs - 1;
}

/* ---- lexing -------------------------------------------------------------------- */

static int peek(const lk_t *L) { return L->p < L->n ? L->s[L->p] : -1; }
static int peek2(const lk_t *L) { return L->p + 1 < L->n ? L->s[L->p + 1] : -1; }
static bool name_char(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }
static bool at_newline(const lk_t *L) { return peek(L) == '\n' || (peek(L) == '\r' && peek2(L) == '\n'); }

/* Skips blanks, comments and `\`-newline joins inside a statement (not the
 * newline that ends it). */
static void skip_ws(lk_t *L)
{
    for (;;) {
        int c = peek(L);
        if (c == ' ' || c == '\t') {
            L->p++;
        } else if (c == '#' || (c == '/' && peek2(L) == '/')) {
            while (L->p < L->n && L->s[L->p] != '\n')
                L->p++;
            if (L->p > 0 && L->s[L->p - 1] == '\r' && L->p < L->n)
                L->p--; /* leave "\r\n" whole for at_newline */
        } else if (c == '\\') {
            size_t q = L->p + 1;
            while (q < L->n && L->s[q] == ' ')
                q++;
            if (q < L->n && L->s[q] == '\r')
                q++;
            if (q < L->n && L->s[q] == '\n')
                L->p = q + 1;
            else
                return;
        } else {
            return;
        }
    }
}

/* Skips blank lines and comments between statements (and before a `|`). */
static void skip_blank(lk_t *L)
{
    for (;;) {
        skip_ws(L);
        if (peek(L) == '\n')
            L->p++;
        else if (peek(L) == '\r' && peek2(L) == '\n')
            L->p += 2;
        else
            return;
    }
}

/* At a newline: when the next non-blank text is `|`, moves there (the
 * alternatives continue) and returns true. */
static bool continues(lk_t *L)
{
    if (!at_newline(L))
        return false;
    size_t save = L->p;
    skip_blank(L);
    if (peek(L) == '|')
        return true;
    L->p = save;
    return false;
}

/* A name [A-Za-z0-9_]+ at p; its length (0: none; failed when too long). */
static size_t read_name(lk_t *L)
{
    size_t b = L->p;
    while (L->p < L->n && name_char(L->s[L->p]))
        L->p++;
    if (L->p - b > LARK_MAX_NAME) {
        lk_fail(L, b, "name longer than %d bytes", LARK_MAX_NAME);
        return 0;
    }
    return L->p - b;
}

/* 1 rule name, 2 terminal name, 0 neither. */
static int name_kind(const char *s, size_t n)
{
    size_t i = n > 0 && s[0] == '_';
    if (i >= n)
        return 0;
    bool lower = s[i] >= 'a' && s[i] <= 'z', upper = s[i] >= 'A' && s[i] <= 'Z';
    if (!lower && !upper)
        return 0;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_' || (c >= '0' && c <= '9'))
            continue;
        if (lower ? !(c >= 'a' && c <= 'z') : !(c >= 'A' && c <= 'Z'))
            return 0;
    }
    return lower ? 1 : 2;
}

/* ---- literals ---------------------------------------------------------------- */

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* Reads a "..." literal at p (Lark's escapes, lark.h) into code points;
 * sets *icase for a trailing i. Returns the count, -1 on error. */
static int read_string(lk_t *L, uint32_t **cps, size_t *cap, bool *icase)
{
    size_t at = L->p++;
    int n = 0;
    for (;;) {
        if (L->p >= L->n || L->s[L->p] == '\n') {
            lk_fail(L, at, "unterminated string literal");
            return -1;
        }
        uint8_t c = L->s[L->p];
        if (c == '"') {
            L->p++;
            break;
        }
        vec_reserve(*cps, *cap, (size_t)n + 2);
        if (c != '\\') {
            size_t k = utf8_char(L->s + L->p, L->n - L->p, NULL);
            assert(k > 0); /* the text was checked */
            uint32_t cp = k == 1 ? c : k == 2 ? c & 0x1F : k == 3 ? c & 0x0F : c & 0x07;
            for (size_t i = 1; i < k; i++)
                cp = (cp << 6) | (L->s[L->p + i] & 0x3F);
            (*cps)[n++] = cp;
            L->p += k;
            continue;
        }
        size_t e = L->p;
        int x = L->p + 1 < L->n ? L->s[L->p + 1] : -1;
        int nhex = x == 'x' ? 2 : x == 'u' ? 4 : x == 'U' ? 8 : 0;
        L->p += 2;
        if (x == '\\' || x == '"') {
            (*cps)[n++] = (uint32_t)x;
        } else if (x == 'n' || x == 't' || x == 'r' || x == 'f') {
            (*cps)[n++] = x == 'n' ? '\n' : x == 't' ? '\t' : x == 'r' ? '\r' : '\f';
        } else if (nhex) {
            uint32_t v = 0;
            for (int i = 0; i < nhex; i++, L->p++) {
                int h = L->p < L->n ? hexval(L->s[L->p]) : -1;
                if (h < 0) {
                    lk_fail(L, e, "escape '\\%c' needs %d hex digits", x, nhex);
                    return -1;
                }
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                lk_fail(L, e, "escape is not a Unicode scalar value");
                return -1;
            }
            (*cps)[n++] = v;
        } else if (x == '\n' || x < 0) {
            lk_fail(L, at, "unterminated string literal");
            return -1;
        } else {
            /* any other \c is the two characters (x itself may be UTF-8) */
            (*cps)[n++] = '\\';
            L->p--;
        }
    }
    *icase = peek(L) == 'i';
    if (*icase)
        L->p++;
    return n;
}

/* Appends code point cp, as the text to match, inside a GBNF "..." literal. */
static void lit_cp(strbuf_t *b, uint32_t cp, int mode)
{
    if (mode == LARK_JSON_STRING) {
        static const char SHORT[][2] = {{'"', '"'}, {'\\', '\\'}, {'\b', 'b'}, {'\f', 'f'},
                                        {'\n', 'n'}, {'\r', 'r'}, {'\t', 't'}};
        for (size_t i = 0; i < sizeof SHORT / sizeof SHORT[0]; i++)
            if (cp == (uint8_t)SHORT[i][0]) {
                /* a JSON backslash, then the letter (itself escaped for GBNF) */
                strbuf_puts(b, "\\\\");
                if (SHORT[i][1] == '"' || SHORT[i][1] == '\\')
                    strbuf_puts(b, "\\");
                strbuf_append(b, &SHORT[i][1], 1);
                return;
            }
        if (cp < 0x20) {
            strbuf_printf(b, "\\\\u%04x", cp);
            return;
        }
    }
    gbnf_escape_cp(b, cp);
}

/* A string literal as one GBNF item (a literal, or a group for "..."i). */
static void emit_literal(lk_t *L, strbuf_t *b, const uint32_t *cps, int n, bool icase, size_t at)
{
    if (!icase) {
        strbuf_puts(b, "\"");
        for (int i = 0; i < n; i++)
            lit_cp(b, cps[i], L->mode);
        strbuf_puts(b, "\"");
        return;
    }
    for (int i = 0; i < n; i++)
        if (cps[i] >= 0x80) {
            lk_fail(L, at, "a case-insensitive string (\"...\"i) with non-ASCII characters is not supported");
            return;
        }
    strbuf_puts(b, "(\"");
    for (int i = 0; i < n; i++) {
        uint32_t c = cps[i], lo = c | 0x20;
        if (lo >= 'a' && lo <= 'z')
            strbuf_printf(b, "\" [%c%c] \"", (char)lo, (char)(lo - 0x20));
        else
            lit_cp(b, c, L->mode);
    }
    strbuf_puts(b, "\")");
}

/* Compiles regex text re[0..n) (at Lark offset at) with flags into a new
 * x-N rule; writes its name to b. */
static void emit_regex(lk_t *L, strbuf_t *b, const uint8_t *re, size_t n, unsigned flags, size_t at)
{
    if (L->mode == LARK_RAW)
        flags |= REGEX_RAW;
    char err[200];
    size_t off = 0;
    char *expr = regex_to_gbnf(re, n, flags | REGEX_PYRUST | REGEX_NO_ANCHORS, err,
                                           sizeof err, &off);
    if (!expr) {
        lk_fail(L, at + off, "regex: %s is not supported", err);
        return;
    }
    char name[32];
    int k = snprintf(name, sizeof name, "%d", L->n_regex++);
    emit_line(L, at, "regex", "x-", name, (size_t)k, expr);
    free(expr);
    strbuf_printf(b, "%sx-%s", L->pfx, name);
}

/* A one-character class "a".."z" as a GBNF item. */
static void emit_range(lk_t *L, strbuf_t *b, uint32_t lo, uint32_t hi, size_t at)
{
    strbuf_t re = {0};
    strbuf_puts(&re, "[");
    uint32_t ends[2] = {lo, hi};
    for (int i = 0; i < 2; i++) {
        if (i)
            strbuf_puts(&re, "-");
        if (ends[i] <= 0xFFFF) {
            strbuf_printf(&re, "\\u%04x", ends[i]);
        } else {
            char u[4];
            strbuf_append(&re, u, utf8_put(ends[i], u));
        }
    }
    strbuf_puts(&re, "]");
    char err[200];
    char *expr = regex_to_gbnf((const uint8_t *)re.s, re.len,
                                           REGEX_PYRUST | (L->mode == LARK_RAW ? REGEX_RAW : 0),
                                           err, sizeof err, NULL);
    free(re.s);
    if (!expr) {
        lk_fail(L, at, "range: %s", err);
        return;
    }
    strbuf_puts(b, expr);
    free(expr);
}

/* ---- expansions ------------------------------------------------------------------- */

static void parse_expansions(lk_t *L, strbuf_t *b);
static void common_ensure(lk_t *L, int i);

/* A reference to name s[at..at+n). */
static void parse_ref(lk_t *L, strbuf_t *b, size_t at, size_t n, bool *multi)
{
    const char *name = (const char *)L->s + at;
    int kind = name_kind(name, n);
    if (kind == 0) {
        lk_fail(L, at, "'%.*s' is not a name (rules are lowercase, terminals uppercase)", (int)n, name);
        return;
    }
    size_t save = L->p;
    skip_ws(L);
    if (peek(L) == '{') {
        lk_fail(L, L->p, "templates ('%.*s{...}') are not supported", (int)n, name);
        return;
    }
    L->p = save;
    if (L->ctx == CTX_COMMON) {
        int i = common_find(name, n);
        assert(i >= 0); /* COMMON refers only to COMMON */
        common_ensure(L, i);
        strbuf_printf(b, "%sc-%.*s", L->pfx, (int)n, name);
        return;
    }
    if (kind == 1 && L->ctx != CTX_RULE) {
        if (L->ctx == CTX_IGNORE)
            lk_fail(L, at, "%%ignore takes terminals, not rule '%.*s'", (int)n, name);
        else
            lk_fail(L, at, "terminal '%s' uses rule '%.*s' (terminals may use only terminals)",
                    L->defs[L->ctx].name, (int)n, name);
        return;
    }
    int32_t d = def_get(L, name, n, at);
    if (d < 0)
        return;
    if (L->ctx >= 0) {
        vec_reserve(L->edges, L->cap_edges, L->n_edges + 1);
        L->edges[L->n_edges++] = (edge_t){L->ctx, d};
    }
    if (kind == 2 && L->ctx == CTX_RULE) {
        strbuf_append(b, &(char){MARK}, 1);
        *multi = true;
    }
    strbuf_printf(b, "%s%s%.*s", L->pfx, kind == 1 ? "r-" : "t-", (int)n, name);
}

/* One atom as GBNF; *multi when it is more than one GBNF item. */
static void parse_atom(lk_t *L, strbuf_t *b, bool *multi)
{
    size_t at = L->p;
    int c = peek(L);
    *multi = false;
    if (c == '(' || c == '[') {
        L->p++;
        strbuf_puts(b, "(");
        parse_expansions(L, b);
        if (L->failed)
            return;
        skip_ws(L);
        if (peek(L) != (c == '(' ? ')' : ']')) {
            lk_fail(L, at, "unclosed '%c'", c);
            return;
        }
        L->p++;
        strbuf_puts(b, c == '(' ? ")" : ")?");
        *multi = c == '[';
    } else if (c == '"') {
        uint32_t *cps = NULL;
        size_t cap = 0;
        bool icase = false;
        int n = read_string(L, &cps, &cap, &icase);
        if (n < 0) {
            free(cps);
            return;
        }
        size_t save = L->p;
        skip_ws(L);
        bool range = peek(L) == '.' && peek2(L) == '.';
        if (L->ctx == CTX_RULE) {
            strbuf_append(b, &(char){MARK}, 1);
            *multi = true;
        }
        if (range) {
            L->p += 2;
            skip_ws(L);
            uint32_t *cps2 = NULL;
            size_t cap2 = 0;
            bool icase2 = false;
            int n2 = peek(L) == '"' ? read_string(L, &cps2, &cap2, &icase2) : -2;
            if (n2 == -2)
                lk_fail(L, L->p, "a range needs a string after '..'");
            else if (n2 >= 0 && (n != 1 || n2 != 1))
                lk_fail(L, at, "a range (\"a\"..\"z\") needs single characters");
            else if (n2 >= 0 && (icase || icase2))
                lk_fail(L, at, "a case-insensitive range is not supported");
            else if (n2 >= 0 && cps2[0] < cps[0])
                lk_fail(L, at, "the range is out of order");
            else if (n2 >= 0)
                emit_range(L, b, cps[0], cps2[0], at);
            free(cps2);
        } else {
            L->p = save;
            emit_literal(L, b, cps, n, icase, at);
        }
        free(cps);
    } else if (c == '/') {
        size_t b0 = ++L->p;
        while (L->p < L->n && L->s[L->p] != '/') {
            if (L->s[L->p] == '\n') {
                lk_fail(L, at, "unterminated regex (or a newline inside /.../, not supported)");
                return;
            }
            L->p += L->s[L->p] == '\\' && L->p + 1 < L->n && L->s[L->p + 1] != '\n' ? 2 : 1;
        }
        if (L->p >= L->n) {
            lk_fail(L, at, "unterminated regex");
            return;
        }
        size_t e = L->p++;
        unsigned flags = 0;
        while (L->p < L->n && L->s[L->p] && strchr("imslux", L->s[L->p])) {
            char f = (char)L->s[L->p];
            if (f == 's')
                flags |= REGEX_DOTALL;
            else if (f != 'm' && f != 'u') {
                lk_fail(L, L->p, "regex flag '%c' is not supported (only s, m, u)", f);
                return;
            }
            L->p++;
        }
        if (L->ctx == CTX_RULE) {
            strbuf_append(b, &(char){MARK}, 1);
            *multi = true;
        }
        emit_regex(L, b, L->s + b0, e - b0, flags, b0);
    } else if (c >= 0 && name_char(c)) {
        size_t n = read_name(L);
        if (!L->failed)
            parse_ref(L, b, at, n, multi);
    } else if (c == '!' || c == '?' || c == '*' || c == '+' || c == '~') {
        lk_fail(L, at, "misplaced operator '%c'", c);
    } else if (c == '{' || c == '}') {
        lk_fail(L, at, "templates ('{...}') are not supported");
    } else if (c == '%') {
        lk_fail(L, at, "a directive must start its own line");
    } else {
        if (c >= 0x20 && c < 0x7F)
            lk_fail(L, at, "unexpected '%c'", c);
        else
            lk_fail(L, at, "unexpected byte 0x%02x", (unsigned)c);
    }
}

/* A repetition count [+-]?[0-9]+; -1 (failed) when bad. */
static long read_count(lk_t *L)
{
    skip_ws(L);
    size_t at = L->p;
    long v = 0;
    bool neg = peek(L) == '-';
    if (peek(L) == '-' || peek(L) == '+')
        L->p++;
    if (!(peek(L) >= '0' && peek(L) <= '9')) {
        lk_fail(L, at, "'~' needs a number");
        return -1;
    }
    while (peek(L) >= '0' && peek(L) <= '9') {
        v = v * 10 + (L->s[L->p++] - '0');
        if (v > GBNF_MAX_REPEAT) {
            lk_fail(L, at, "repetition count above %d", GBNF_MAX_REPEAT);
            return -1;
        }
    }
    if (neg && v) {
        lk_fail(L, at, "negative repetition count");
        return -1;
    }
    return v;
}

static void parse_expr(lk_t *L, strbuf_t *b)
{
    strbuf_t atom = {0};
    bool multi = false;
    parse_atom(L, &atom, &multi);
    if (L->failed) {
        free(atom.s);
        return;
    }
    skip_ws(L);
    int c = peek(L);
    char post[48] = "";
    if (c == '?' || c == '*' || c == '+') {
        L->p++;
        post[0] = (char)c, post[1] = 0;
    } else if (c == '~') {
        size_t at = L->p++;
        long m = read_count(L), M = m;
        skip_ws(L);
        if (!L->failed && peek(L) == '.' && peek2(L) == '.') {
            L->p += 2;
            M = read_count(L);
        }
        if (!L->failed && M < m)
            lk_fail(L, at, "repetition ~ %ld..%ld: the maximum is below the minimum", m, M);
        if (m == M)
            snprintf(post, sizeof post, "{%ld}", m);
        else
            snprintf(post, sizeof post, "{%ld,%ld}", m, M);
    }
    if (!L->failed && post[0]) {
        skip_ws(L);
        if (peek(L) == '?' || peek(L) == '*' || peek(L) == '+' || peek(L) == '~')
            lk_fail(L, L->p, "misplaced operator '%c' (one operator per item)", peek(L));
    }
    if (!L->failed) {
        if (post[0] && multi)
            strbuf_printf(b, "(%s)%s", atom.s, post);
        else
            strbuf_printf(b, "%s%s", atom.s, post);
    }
    free(atom.s);
}

/* A sequence (possibly empty), up to | ) ] -> or the end of the statement. */
static void parse_expansion(lk_t *L, strbuf_t *b)
{
    bool any = false;
    for (;;) {
        skip_ws(L);
        int c = peek(L);
        if (c < 0 || at_newline(L) || c == '|' || c == ')' || c == ']' || (c == '-' && peek2(L) == '>'))
            break;
        if (any)
            strbuf_puts(b, " ");
        parse_expr(L, b);
        if (L->failed)
            return;
        any = true;
    }
    if (!any)
        strbuf_puts(b, "\"\"");
    skip_ws(L);
    if (peek(L) == '-' && peek2(L) == '>') { /* an alias names the tree node: no effect here */
        L->p += 2;
        skip_ws(L);
        size_t at = L->p, n = read_name(L);
        if (!L->failed && name_kind((const char *)L->s + at, n) != 1)
            lk_fail(L, at, "'->' needs a rule name (lowercase)");
    }
}

static void parse_expansions(lk_t *L, strbuf_t *b)
{
    if (++L->depth > LARK_MAX_NESTING) {
        lk_fail(L, L->p, "groups nested deeper than %d", LARK_MAX_NESTING);
        return;
    }
    parse_expansion(L, b);
    while (!L->failed) {
        skip_ws(L);
        if (peek(L) != '|' && !continues(L))
            break;
        L->p++; /* '|' */
        strbuf_puts(b, " | ");
        parse_expansion(L, b);
    }
    L->depth--;
}

/* The end of a statement: a newline or the end of the text. */
static void statement_end(lk_t *L)
{
    skip_ws(L);
    if (L->failed || L->p >= L->n || at_newline(L))
        return;
    int c = peek(L);
    if (c == ':')
        lk_fail(L, L->p, "unexpected ':' (a definition must start its own line)");
    else if (c == ')' || c == ']')
        lk_fail(L, L->p, "unmatched '%c'", c);
    else
        lk_fail(L, L->p, "unexpected '%c'", c >= 0x20 && c < 0x7F ? c : '?');
}

/* Writes COMMON[i] (and what it uses) once, as c-NAME. */
static void common_ensure(lk_t *L, int i)
{
    if (L->common_done & (1ull << i))
        return;
    L->common_done |= 1ull << i;
    const uint8_t *s = L->s;
    size_t n = L->n, p = L->p;
    int32_t ctx = L->ctx;
    L->s = (const uint8_t *)COMMON[i].def, L->n = strlen(COMMON[i].def), L->p = 0, L->ctx = CTX_COMMON;
    strbuf_t body = {0};
    parse_expansions(L, &body);
    statement_end(L);
    assert(L->failed || L->p == L->n);
    if (!L->failed) {
        char what[64];
        snprintf(what, sizeof what, "common.%s", COMMON[i].name);
        emit_line(L, 0, what, "c-", COMMON[i].name, strlen(COMMON[i].name), body.s);
    }
    free(body.s);
    L->s = s, L->n = n, L->p = p, L->ctx = ctx;
}

/* Defines terminal local[0..ln) as common NAME c[0..cn). */
static void import_one(lk_t *L, size_t at, const char *c, size_t cn, const char *local, size_t ln)
{
    int i = common_find(c, cn);
    if (i < 0) {
        lk_fail(L, at, "common.%.*s is not supported (supported: LF CR NEWLINE WS WS_INLINE DIGIT DIGITS INT "
                       "SIGNED_INT DECIMAL FLOAT SIGNED_FLOAT NUMBER SIGNED_NUMBER LETTER WORD CNAME "
                       "ESCAPED_STRING HEXDIGIT LCASE_LETTER UCASE_LETTER SH_COMMENT CPP_COMMENT C_COMMENT "
                       "SQL_COMMENT)", (int)cn, c);
        return;
    }
    if (name_kind(local, ln) != 2) {
        lk_fail(L, at, "an imported terminal needs an uppercase name, not '%.*s'", (int)ln, local);
        return;
    }
    int32_t d = def_get(L, local, ln, at);
    if (d < 0)
        return;
    if (L->defs[d].defined) {
        lk_fail(L, at, "'%.*s' is defined twice", (int)ln, local);
        return;
    }
    L->defs[d].defined = true;
    L->defs[d].off = at;
    L->common_at = at;
    common_ensure(L, i);
    char body[LARK_MAX_NAME + 64];
    snprintf(body, sizeof body, "%sc-%s", L->pfx, COMMON[i].name);
    char what[LARK_MAX_NAME + 32];
    snprintf(what, sizeof what, "%%import of '%.*s'", (int)ln, local);
    emit_line(L, at, what, "t-", local, ln, body);
}

static void directive(lk_t *L)
{
    size_t at = L->p++;
    size_t n = read_name(L);
    const char *d = (const char *)L->s + at + 1;
    if (n == 6 && memcmp(d, "ignore", 6) == 0) {
        skip_ws(L);
        int32_t ctx = L->ctx;
        L->ctx = CTX_IGNORE;
        if (L->ignore)
            strbuf_puts(&L->ign, " | ");
        else
            L->ign_off = at;
        L->ignore = true;
        strbuf_puts(&L->ign, "(");
        parse_expansions(L, &L->ign);
        strbuf_puts(&L->ign, ")");
        L->ctx = ctx;
        statement_end(L);
    } else if (n == 6 && memcmp(d, "import", 6) == 0) {
        skip_ws(L);
        size_t pa = L->p;
        if (peek(L) == '.') {
            lk_fail(L, pa, "relative %%import is not supported (only %%import common.NAME)");
            return;
        }
        size_t pn = read_name(L);
        if (L->failed)
            return;
        if (pn != 6 || memcmp(L->s + pa, "common", 6) != 0) {
            lk_fail(L, pa, "%%import of '%.*s' is not supported (only %%import common.NAME)", (int)pn,
                    (const char *)L->s + pa);
            return;
        }
        if (peek(L) == '.') {
            L->p++;
            size_t cb = L->p, cn = read_name(L);
            if (L->failed)
                return;
            if (cn == 0 || peek(L) == '.') {
                lk_fail(L, cb, "expected common.NAME");
                return;
            }
            const char *local = (const char *)L->s + cb;
            size_t ln = cn;
            skip_ws(L);
            if (peek(L) == '-' && peek2(L) == '>') {
                L->p += 2;
                skip_ws(L);
                size_t lb = L->p;
                ln = read_name(L);
                local = (const char *)L->s + lb;
                if (L->failed)
                    return;
            }
            import_one(L, at, (const char *)L->s + cb, cn, local, ln);
        } else {
            skip_ws(L);
            if (peek(L) != '(') {
                lk_fail(L, L->p, "expected common.NAME or common (NAME, ...)");
                return;
            }
            L->p++;
            for (;;) {
                skip_ws(L);
                size_t cb = L->p, cn = read_name(L);
                if (L->failed)
                    return;
                if (cn == 0) {
                    lk_fail(L, cb, "expected a name in the %%import list");
                    return;
                }
                import_one(L, cb, (const char *)L->s + cb, cn, (const char *)L->s + cb, cn);
                if (L->failed)
                    return;
                skip_ws(L);
                if (peek(L) == ',') {
                    L->p++;
                } else if (peek(L) == ')') {
                    L->p++;
                    break;
                } else {
                    lk_fail(L, L->p, "expected ',' or ')' in the %%import list");
                    return;
                }
            }
        }
        statement_end(L);
    } else {
        lk_fail(L, at, "'%%%.*s' is not supported (only %%import common and %%ignore)", (int)(n > 32 ? 32 : n), d);
    }
}

static void definition(lk_t *L)
{
    size_t at = L->p;
    int mods = 0;
    while (peek(L) == '!' || peek(L) == '?')
        L->p++, mods++;
    size_t nb = L->p, n = read_name(L);
    if (L->failed)
        return;
    const char *name = (const char *)L->s + nb;
    if (n == 0) {
        lk_fail(L, nb, "expected a rule or terminal definition");
        return;
    }
    int kind = name_kind(name, n);
    if (kind == 0 || (kind == 2 && mods) || mods > 2) {
        lk_fail(L, at, "illegal name '%.*s' (rules are lowercase, terminals uppercase)", (int)n, name);
        return;
    }
    skip_ws(L);
    if (peek(L) == '.') {
        lk_fail(L, L->p, "priorities ('%.*s.N') are not supported", (int)n, name);
        return;
    }
    if (peek(L) == '{') {
        lk_fail(L, L->p, "templates ('%.*s{...}') are not supported", (int)n, name);
        return;
    }
    if (peek(L) != ':') {
        lk_fail(L, L->p, "expected ':' after '%.*s'", (int)n, name);
        return;
    }
    L->p++;
    int32_t d = def_get(L, name, n, nb);
    if (d < 0)
        return;
    if (L->defs[d].defined) {
        lk_fail(L, nb, "'%.*s' is defined twice", (int)n, name);
        return;
    }
    L->defs[d].defined = true;
    L->defs[d].off = nb;
    L->ctx = kind == 2 ? d : CTX_RULE;
    strbuf_t body = {0};
    parse_expansions(L, &body);
    statement_end(L);
    L->ctx = CTX_RULE;
    if (!L->failed) {
        char what[LARK_MAX_NAME + 32];
        snprintf(what, sizeof what, "%s '%.*s'", kind == 1 ? "rule" : "terminal", (int)n, name);
        emit_line(L, nb, what, kind == 1 ? "r-" : "t-", name, n, body.s);
    }
    free(body.s);
}

/* Fails when terminals use each other in a cycle (Lark's terminals are
 * regular). Kahn's algorithm, no recursion. */
static void terminal_cycles(lk_t *L)
{
    int32_t nd = L->n_defs;
    int32_t *left = xcalloc((size_t)nd + 1, sizeof *left);  /* uses not yet resolved */
    int32_t *first = xcalloc((size_t)nd + 2, sizeof *first); /* edges by `to` (counting sort) */
    int32_t *by_to = xmalloc((L->n_edges + 1) * sizeof *by_to);
    int32_t *queue = xmalloc(((size_t)nd + 1) * sizeof *queue);
    for (size_t e = 0; e < L->n_edges; e++)
        left[L->edges[e].from]++, first[L->edges[e].to + 1]++;
    for (int32_t i = 0; i < nd; i++)
        first[i + 1] += first[i];
    int32_t *fill = xmalloc(((size_t)nd + 1) * sizeof *fill);
    memcpy(fill, first, (size_t)nd * sizeof *fill);
    for (size_t e = 0; e < L->n_edges; e++)
        by_to[fill[L->edges[e].to]++] = (int32_t)e;
    int32_t qn = 0, qh = 0;
    for (int32_t i = 0; i < nd; i++)
        if (left[i] == 0)
            queue[qn++] = i;
    while (qh < qn) {
        int32_t v = queue[qh++];
        for (int32_t k = first[v]; k < first[v + 1]; k++)
            if (--left[L->edges[by_to[k]].from] == 0)
                queue[qn++] = L->edges[by_to[k]].from;
    }
    for (int32_t i = 0; i < nd && qn < nd; i++)
        if (left[i] > 0) {
            lk_fail(L, L->defs[i].off, "terminal '%s' is recursive (terminals must be regular: use a rule)",
                    L->defs[i].name);
            break;
        }
    free(left), free(first), free(by_to), free(queue), free(fill);
}

/* A GBNF refusal of our output, in Lark terms. `shift` output lines precede
 * ours (a wrapper root). */
static void gbnf_refused(lk_t *L, const char *gerr, int gline, int shift)
{
    const char *why = strstr(gerr, ": ");
    why = why ? why + 2 : gerr;
    bool known = strstr(why, "left-recursive") || strstr(why, "never finish") || strstr(why, "too large") ||
                 strstr(why, "too many") || strstr(why, "longer than") || strstr(why, "nested deeper");
    long i = (long)gline - 1 - shift;
    const origin_t *o = i >= 0 && (size_t)i < L->n_org ? &L->org[i] : NULL;
    const uint8_t *s = L->s;
    L->s = L->src; /* the origin offsets are in the Lark text */
    if (!known)
        lk_fail(L, o ? o->off : 0, "internal error: the GBNF written for %s is refused: %s", o ? o->what : "?", gerr);
    else if (strstr(why, "left-recursive"))
        lk_fail(L, o ? o->off : 0, "%s cannot be compiled: %s (a rule reaches itself before any character, or "
                "something that can be empty is repeated with * + or ~)", o ? o->what : "the grammar", why);
    else
        lk_fail(L, o ? o->off : 0, "%s cannot be compiled: %s", o ? o->what : "the grammar", why);
    L->s = s;
}

/* Checks text with gbnf_parse (wrapped when prefixed); fails L when refused. */
static void check_gbnf(lk_t *L, const char *text)
{
    char *wrapped = L->pfx[0] ? json_schema_gbnf_wrap(text, L->pfx, NULL, NULL) : NULL;
    const char *t = wrapped ? wrapped : text;
    grammar_t *g = NULL;
    char gerr[300];
    int line = 0, col = 0;
    if (gbnf_parse((const uint8_t *)t, strlen(t), &g, gerr, sizeof gerr, &line, &col) != 0)
        gbnf_refused(L, gerr, line, wrapped ? 1 : 0);
    gbnf_free(&g);
    free(wrapped);
}

static bool prefix_ok(const char *p)
{
    for (; *p; p++)
        if (!name_char(*p) && *p != '-')
            return false;
    return true;
}

/* The checks both entry points make on their arguments: 0, or -1 with err
 * set (what = "grammar" or "regex"). */
static int check_args(const char *prefix, int mode, size_t len, const char *what, char *err, size_t errlen)
{
    assert(prefix_ok(prefix));
    if (mode != LARK_RAW && mode != LARK_JSON_STRING) {
        errbuf_set(err, errlen, "unknown mode %d", mode);
        return -1;
    }
    if (len > LARK_MAX_TEXT) {
        errbuf_set(err, errlen, "the %s is longer than %u bytes", what, LARK_MAX_TEXT);
        return -1;
    }
    return 0;
}

char *lark_to_gbnf_prefixed(const uint8_t *text, size_t len, int mode, const char *prefix, char *err,
                            size_t errlen)
{
    prefix = prefix ? prefix : "";
    if (check_args(prefix, mode, len, "grammar", err, errlen) < 0)
        return NULL;
    if (!utf8_valid(text, len)) {
        errbuf_set(err, errlen, "the grammar is not valid UTF-8");
        return NULL;
    }
    lk_t L = {.src = text, .src_n = len, .s = text, .n = len, .mode = mode, .pfx = prefix, .ctx = CTX_RULE};
    L.slot = xcalloc(HASH_SLOTS, sizeof *L.slot);
    char *result = NULL;
    strbuf_t out = {0};
    for (;;) {
        skip_blank(&L);
        if (L.failed || L.p >= L.n)
            break;
        if (peek(&L) == '%')
            directive(&L);
        else
            definition(&L);
    }
    /* names */
    int32_t start = -1;
    for (int32_t i = 0; i < L.n_defs && !L.failed; i++) {
        const def_t *d = &L.defs[i];
        if (!d->defined)
            lk_fail(&L, d->off, "undefined %s '%s'", d->terminal ? "terminal" : "rule", d->name);
        else if (strcmp(d->name, "start") == 0)
            start = i;
    }
    if (!L.failed && start < 0)
        lk_fail(&L, 0, "the grammar has no 'start' rule");
    if (!L.failed)
        terminal_cycles(&L);
    if (L.failed)
        goto done;
    /* root, the ignore rules, then MARK → "igns " or nothing */
    strbuf_t body = {0};
    strbuf_printf(&body, "%sr-start", L.pfx);
    if (L.ignore)
        strbuf_printf(&body, " %signs", L.pfx); /* ignored text may also end the input */
    emit_line(&L, L.defs[start].off, "rule 'start'", "", "root", 4, body.s);
    if (L.ignore) {
        emit_line(&L, L.ign_off, "%ignore", "", "ign", 3, L.ign.s);
        strbuf_reset(&body);
        strbuf_printf(&body, "%sign*", L.pfx);
        emit_line(&L, L.ign_off, "%ignore", "", "igns", 4, body.s);
    }
    free(body.s);
    for (size_t i = 0; i < L.out.len; i++) {
        if (L.out.s[i] != MARK)
            strbuf_append(&out, L.out.s + i, 1);
        else if (L.ignore)
            strbuf_printf(&out, "%signs ", L.pfx);
    }
    if (out.len > GBNF_MAX_TEXT) {
        lk_fail(&L, 0, "the grammar is too large (its GBNF exceeds %u bytes)", GBNF_MAX_TEXT);
        goto done;
    }
    check_gbnf(&L, out.s);
    if (!L.failed) {
        result = out.s;
        out.s = NULL;
    }
done:
    if (L.failed)
        errbuf_set(err, errlen, "%s", L.err);
    free(out.s);
    free(L.out.s);
    free(L.org);
    for (int32_t i = 0; i < L.n_defs; i++)
        free(L.defs[i].name);
    free(L.defs);
    free(L.slot);
    free(L.edges);
    free(L.ign.s);
    return result;
}

char *lark_to_gbnf(const uint8_t *text, size_t len, int mode, char *err, size_t errlen)
{
    return lark_to_gbnf_prefixed(text, len, mode, NULL, err, errlen);
}

char *lark_regex_to_gbnf_prefixed(const uint8_t *re, size_t len, int mode, const char *prefix, char *err,
                                  size_t errlen)
{
    prefix = prefix ? prefix : "";
    if (check_args(prefix, mode, len, "regex", err, errlen) < 0)
        return NULL;
    char rerr[200];
    size_t off = 0;
    char *expr = regex_to_gbnf(re, len, REGEX_PYRUST | (mode == LARK_RAW ? REGEX_RAW : 0),
                                           rerr, sizeof rerr, &off);
    if (!expr) {
        errbuf_set(err, errlen, "regex offset %zu: %s is not supported", off, rerr);
        return NULL;
    }
    strbuf_t out = {0};
    strbuf_printf(&out, "%sroot ::= %s\n", prefix, expr);
    free(expr);
    if (out.len > GBNF_MAX_TEXT) {
        errbuf_set(err, errlen, "the regex is too large (its GBNF exceeds %u bytes)", GBNF_MAX_TEXT);
        free(out.s);
        return NULL;
    }
    char *wrapped = prefix[0] ? json_schema_gbnf_wrap(out.s, prefix, NULL, NULL) : NULL;
    const char *t = wrapped ? wrapped : out.s;
    grammar_t *g = NULL;
    char gerr[300];
    int rc = gbnf_parse((const uint8_t *)t, strlen(t), &g, gerr, sizeof gerr, NULL, NULL);
    gbnf_free(&g);
    free(wrapped);
    if (rc != 0) {
        const char *why = strstr(gerr, ": ");
        errbuf_set(err, errlen, "the regex cannot be compiled: %s%s", why ? why + 2 : gerr,
                   strstr(gerr, "left-recursive") ? " (something that can be empty is repeated)" : "");
        free(out.s);
        return NULL;
    }
    return out.s;
}

char *lark_regex_to_gbnf(const uint8_t *re, size_t len, int mode, char *err, size_t errlen)
{
    return lark_regex_to_gbnf_prefixed(re, len, mode, NULL, err, errlen);
}
