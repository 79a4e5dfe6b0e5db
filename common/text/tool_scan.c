/* tool_scan.c — tool-call text scanned byte by byte (see tool_scan.h).
 *
 * Three machines, from the inside out:
 *   str  JSON string contents → UTF-8 (escapes, surrogate pairs)
 *   val  where one JSON value ends (string, container, scalar)
 *   obj  one call object: keys, the name, the arguments text
 * All state survives between calls, so each byte is looked at once. */
#include "common/text/tool_scan.h"

#include <string.h>

#include "common/hex.h"
#include "common/utf8.h"
#include "common/xalloc.h"

#define KEY_MAX 16                /* keys longer than this are none of ours */

bool tool_scan_is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

bool tool_scan_at(const char *s, size_t i, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return i + k <= n && memcmp(s + i, lit, k) == 0;
}

/* Longest suffix of s[0..n) that is a proper prefix of lit. */
size_t tool_scan_partial_suffix(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (memcmp(s + n - m, lit, m) == 0)
            return m;
    return 0;
}

size_t tool_scan_skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && tool_scan_is_ws(s[i]))
        i++;
    return i;
}

/* ---- strdec: string contents → UTF-8 ------------------------------------- */

enum { SD_TEXT, SD_ESC, SD_HEX };

static void put_utf8(strbuf_t *out, uint32_t cp)
{
    char b[4];
    size_t n = utf8_put(cp, b);
    if (out)
        strbuf_append(out, b, n);
}

/* One byte after the opening quote. Returns true when c is the closing
 * quote. Decoded bytes go to out (NULL = dropped). Invalid escapes and lone
 * surrogates write nothing (such JSON does not parse as a call anyway). */
static bool strdec_byte(tool_scan_str_t *d, char c, strbuf_t *out)
{
    switch (d->st) {
    case SD_TEXT:
        if (c == '"')
            return true;
        if (c == '\\') {
            d->st = SD_ESC;
            return false;
        }
        d->hi = 0;
        if (out)
            strbuf_putc(out, c);
        return false;
    case SD_ESC: {
        d->st = SD_TEXT;
        char v;
        switch (c) {
        case '"': case '\\': case '/': v = c; break;
        case 'b': v = '\b'; break;
        case 'f': v = '\f'; break;
        case 'n': v = '\n'; break;
        case 'r': v = '\r'; break;
        case 't': v = '\t'; break;
        case 'u':
            d->st = SD_HEX;
            d->n_hex = 0;
            d->u = 0;
            return false;
        default: return false;
        }
        d->hi = 0;
        if (out)
            strbuf_putc(out, v);
        return false;
    }
    default: { /* SD_HEX */
        int h = hex_value((unsigned char)c);
        if (h < 0) {
            d->st = SD_TEXT;
            d->hi = 0;
            return false;
        }
        d->u = d->u * 16 + (uint32_t)h;
        if (++d->n_hex < 4)
            return false;
        d->st = SD_TEXT;
        uint32_t u = d->u;
        if (d->hi && u >= 0xDC00 && u <= 0xDFFF) {
            put_utf8(out, 0x10000 + ((d->hi - 0xD800) << 10) + (u - 0xDC00));
            d->hi = 0;
        } else if (u >= 0xD800 && u <= 0xDBFF) {
            d->hi = u;
        } else {
            d->hi = 0;
            if (u < 0xDC00 || u > 0xDFFF)
                put_utf8(out, u);
        }
        return false;
    }
    }
}

/* ---- valscan: the extent of one JSON value -------------------------------- */

enum { VS_MORE, VS_DONE, VS_BEFORE }; /* c consumed / c ended it / it ended before c */

static int valscan_byte(tool_scan_val_t *v, char c)
{
    switch (v->kind) {
    case 0:
        v->kind = c == '"' ? 'S' : c == '{' || c == '[' ? 'C' : 'L';
        v->depth = v->kind == 'C';
        return VS_MORE;
    case 'S':
        if (v->esc)
            v->esc = false;
        else if (c == '\\')
            v->esc = true;
        else if (c == '"')
            return VS_DONE;
        return VS_MORE;
    case 'C':
        if (v->in_str) {
            if (v->esc)
                v->esc = false;
            else if (c == '\\')
                v->esc = true;
            else if (c == '"')
                v->in_str = false;
        } else if (c == '"') {
            v->in_str = true;
        } else if (c == '{' || c == '[') {
            v->depth++;
        } else if ((c == '}' || c == ']') && --v->depth == 0) {
            return VS_DONE;
        }
        return VS_MORE;
    default: /* 'L' */
        return tool_scan_is_ws(c) || c == ',' || c == '}' || c == ']' ? VS_BEFORE : VS_MORE;
    }
}

/* ---- objscan: one call object -------------------------------------------- */

enum { W_OTHER, W_NAME, W_ARGS };

/* For the next object; keeps the buffers. */
void tool_scan_obj_reset(tool_scan_obj_t *o)
{
    strbuf_t name = o->name, args = o->args, key = o->key;
    memset(o, 0, sizeof *o);
    o->name = name;
    o->args = args;
    o->key = key;
    strbuf_reset(&o->name);
    strbuf_reset(&o->args);
    strbuf_reset(&o->key);
}

void tool_scan_obj_free(tool_scan_obj_t *o)
{
    strbuf_free(&o->name);
    strbuf_free(&o->args);
    strbuf_free(&o->key);
}

/* The key just read is `lit`. */
static bool key_is(const tool_scan_obj_t *o, const char *lit)
{
    return o->key.len == strlen(lit) && memcmp(o->key.s, lit, o->key.len) == 0;
}

/* A byte of a non-string arguments value (already through valscan): kept
 * unless it is white space outside the value's strings. */
static void args_byte(tool_scan_obj_t *o, char c)
{
    if (!tool_scan_is_ws(c) || (o->vs.kind == 'C' && o->vs.in_str))
        strbuf_putc(&o->args, c);
}

/* One byte of the object. Returns false when c was not consumed (it ended a
 * scalar value: look at it again). */
bool tool_scan_obj_step(tool_scan_obj_t *o, char c)
{
    /* white space between the object's tokens is skipped (inside a key or
     * a value it is the value's) */
    if (o->st != TOOL_SCAN_KEY && o->st != TOOL_SCAN_VALUE && tool_scan_is_ws(c))
        return true;
    switch (o->st) {
    case TOOL_SCAN_OPEN:
        o->st = c == '{' ? TOOL_SCAN_KEY_OR_END : TOOL_SCAN_FAILED;
        return true;
    case TOOL_SCAN_KEY_OR_END:
        if (c == '}') {
            o->st = TOOL_SCAN_CLOSED;
        } else if (c == '"') {
            o->st = TOOL_SCAN_KEY;
            o->kd = (tool_scan_str_t){0};
            strbuf_reset(&o->key);
        } else {
            o->st = TOOL_SCAN_FAILED;
        }
        return true;
    case TOOL_SCAN_KEY:
        /* keys longer than ours are not looked at */
        if (strdec_byte(&o->kd, c, o->key.len <= KEY_MAX ? &o->key : NULL))
            o->st = TOOL_SCAN_COLON;
        return true;
    case TOOL_SCAN_COLON:
        o->st = c == ':' ? TOOL_SCAN_VALUE_START : TOOL_SCAN_FAILED;
        return true;
    case TOOL_SCAN_VALUE_START:
        o->which = W_OTHER;
        if (key_is(o, "name") && !o->name_done) {
            o->which = W_NAME;
        } else if (!o->args_seen && (key_is(o, "arguments") || key_is(o, "parameters"))) {
            o->which = W_ARGS;
            o->args_seen = true;
            o->args_string = c == '"';
        }
        o->vs = (tool_scan_val_t){0};
        o->vd = (tool_scan_str_t){0};
        valscan_byte(&o->vs, c);
        if (o->which == W_NAME && c != '"')
            o->name_bad = true;
        if (o->which == W_ARGS && !o->args_string)
            strbuf_putc(&o->args, c);
        o->st = TOOL_SCAN_VALUE;
        return true;
    case TOOL_SCAN_VALUE: {
        int r = valscan_byte(&o->vs, c);
        if (r == VS_BEFORE) {
            o->st = TOOL_SCAN_AFTER;
            return false;
        }
        if (o->which == W_NAME && !o->name_bad) {
            if (strdec_byte(&o->vd, c, &o->name))
                o->name_done = true;
        } else if (o->which == W_ARGS) {
            if (o->args_string)
                (void)strdec_byte(&o->vd, c, &o->args);
            else
                args_byte(o, c);
        }
        if (r == VS_DONE)
            o->st = TOOL_SCAN_AFTER;
        return true;
    }
    case TOOL_SCAN_AFTER:
        o->st = c == ',' ? TOOL_SCAN_KEY_OR_END : c == '}' ? TOOL_SCAN_CLOSED : TOOL_SCAN_FAILED;
        return true;
    default:
        return true;
    }
}

char *tool_scan_args_of(const char *obj, size_t len, size_t *used)
{
    tool_scan_obj_t o = {0};
    size_t i = 0;
    while (i < len && o.st != TOOL_SCAN_CLOSED && o.st != TOOL_SCAN_FAILED)
        i += tool_scan_obj_step(&o, obj[i]);
    if (used)
        *used = i;
    char *out = o.args_seen ? xstrndup(o.args.s ? o.args.s : "", o.args.len) : xstrdup("{}");
    tool_scan_obj_free(&o);
    return out;
}

