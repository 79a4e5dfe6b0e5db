/* tool_stream.c — incremental tool-call parser (see tool_stream.h).
 *
 * Three byte-at-a-time machines, from the inside out:
 *   strdec   JSON string contents → UTF-8 (escapes, surrogate pairs)
 *   valscan  where one JSON value ends (string, container, scalar)
 *   objscan  one call object: keys, the name, the arguments text
 * and the format layer (tool_stream_feed) that finds where calls start and
 * walks from one call object to the next. All state survives between feeds,
 * so each byte is looked at once. */
#include "common/text/tool_stream.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/hex.h"
#include "common/utf8.h"
#include "common/text/tool_format.h"
#include "common/vec.h"
#include "common/xalloc.h"

/* The families' markers, each owned by its tool_format_<family>.c. */
#define HERMES_OPEN (tool_format_hermes.tag)
#define HERMES_CLOSE (tool_format_hermes.tag_close)
#define MISTRAL_TAG (tool_format_mistral.tag)
#define PYTHON_TAG (tool_format_llama3.bare_prefix)

#define MAX_CALLS 128             /* as OAI_MAX_TOOL_CALLS: the non-streaming parser's limit */
#define KEY_MAX 16                /* keys longer than this are none of ours */

/* ---- growing byte buffer ------------------------------------------------ */

typedef struct buf {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_put(buf_t *b, const char *s, size_t n)
{
    vec_reserve(b->p, b->cap, b->len + n + 1);
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_byte(buf_t *b, char c)
{
    buf_put(b, &c, 1);
}

bool tool_stream_is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* ---- strdec: string contents → UTF-8 ------------------------------------- */

enum { SD_TEXT, SD_ESC, SD_HEX };

typedef struct strdec {
    int st;
    int n_hex;                    /* SD_HEX: digits so far */
    uint32_t u;                   /* SD_HEX: value so far */
    uint32_t hi;                  /* a high surrogate waiting for its low half, 0 = none */
} strdec_t;

static void put_utf8(buf_t *out, uint32_t cp)
{
    char b[4];
    size_t n = utf8_put(cp, b);
    if (out)
        buf_put(out, b, n);
}

/* One byte after the opening quote. Returns true when c is the closing
 * quote. Decoded bytes go to out (NULL = dropped). Invalid escapes and lone
 * surrogates write nothing (such JSON does not parse as a call anyway). */
static bool strdec_byte(strdec_t *d, char c, buf_t *out)
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
            buf_byte(out, c);
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
            buf_byte(out, v);
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

typedef struct valscan {
    char kind;                    /* 0 not started, 'S' string, 'C' object/array, 'L' scalar */
    int depth;                    /* 'C': open brackets */
    bool in_str, esc;             /* 'C': inside a string of the container */
} valscan_t;

static int valscan_byte(valscan_t *v, char c)
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
        return tool_stream_is_ws(c) || c == ',' || c == '}' || c == ']' ? VS_BEFORE : VS_MORE;
    }
}

/* ---- objscan: one call object -------------------------------------------- */

enum { OS_OPEN, OS_KEY_OR_END, OS_KEY, OS_COLON, OS_VALUE_START, OS_VALUE, OS_AFTER, OS_CLOSED, OS_FAILED };
enum { W_OTHER, W_NAME, W_ARGS };

typedef struct objscan {
    int st;
    strdec_t kd;                  /* OS_KEY */
    buf_t key;                    /* the key being read, decoded */
    int which;                    /* the value being scanned: W_* */
    valscan_t vs;
    strdec_t vd;                  /* W_NAME, and W_ARGS given as a string */
    bool args_seen;               /* an arguments / parameters key came */
    bool args_string;             /* its value is a JSON string: decoded */
    buf_t name;
    bool name_done, name_bad;     /* name: complete / not a string */
    buf_t args;                   /* the arguments text so far */
} objscan_t;

static void buf_clear(buf_t *b)
{
    b->len = 0;
    if (b->p)
        b->p[0] = '\0';
}

/* For the next object; keeps the buffers. */
static void objscan_reset(objscan_t *o)
{
    buf_t name = o->name, args = o->args, key = o->key;
    memset(o, 0, sizeof *o);
    o->name = name;
    o->args = args;
    o->key = key;
    buf_clear(&o->name);
    buf_clear(&o->args);
    buf_clear(&o->key);
}

static void objscan_free(objscan_t *o)
{
    free(o->name.p);
    free(o->args.p);
    free(o->key.p);
}

/* The key just read is `lit`. */
static bool key_is(const objscan_t *o, const char *lit)
{
    return o->key.len == strlen(lit) && memcmp(o->key.p, lit, o->key.len) == 0;
}

/* A byte of a non-string arguments value (already through valscan): kept
 * unless it is white space outside the value's strings. */
static void args_byte(objscan_t *o, char c)
{
    if (!tool_stream_is_ws(c) || (o->vs.kind == 'C' && o->vs.in_str))
        buf_byte(&o->args, c);
}

/* One byte of the object. Returns false when c was not consumed (it ended a
 * scalar value: look at it again). */
static bool objscan_step(objscan_t *o, char c)
{
    switch (o->st) {
    case OS_OPEN:
        if (tool_stream_is_ws(c))
            return true;
        o->st = c == '{' ? OS_KEY_OR_END : OS_FAILED;
        return true;
    case OS_KEY_OR_END:
        if (tool_stream_is_ws(c))
            return true;
        if (c == '}') {
            o->st = OS_CLOSED;
        } else if (c == '"') {
            o->st = OS_KEY;
            o->kd = (strdec_t){0};
            buf_clear(&o->key);
        } else {
            o->st = OS_FAILED;
        }
        return true;
    case OS_KEY:
        /* keys longer than ours are not looked at */
        if (strdec_byte(&o->kd, c, o->key.len <= KEY_MAX ? &o->key : NULL))
            o->st = OS_COLON;
        return true;
    case OS_COLON:
        if (tool_stream_is_ws(c))
            return true;
        o->st = c == ':' ? OS_VALUE_START : OS_FAILED;
        return true;
    case OS_VALUE_START:
        if (tool_stream_is_ws(c))
            return true;
        o->which = W_OTHER;
        if (key_is(o, "name") && !o->name_done) {
            o->which = W_NAME;
        } else if (!o->args_seen && (key_is(o, "arguments") || key_is(o, "parameters"))) {
            o->which = W_ARGS;
            o->args_seen = true;
            o->args_string = c == '"';
        }
        o->vs = (valscan_t){0};
        o->vd = (strdec_t){0};
        valscan_byte(&o->vs, c);
        if (o->which == W_NAME && c != '"')
            o->name_bad = true;
        if (o->which == W_ARGS && !o->args_string)
            buf_byte(&o->args, c);
        o->st = OS_VALUE;
        return true;
    case OS_VALUE: {
        int r = valscan_byte(&o->vs, c);
        if (r == VS_BEFORE) {
            o->st = OS_AFTER;
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
            o->st = OS_AFTER;
        return true;
    }
    case OS_AFTER:
        if (tool_stream_is_ws(c))
            return true;
        o->st = c == ',' ? OS_KEY_OR_END : c == '}' ? OS_CLOSED : OS_FAILED;
        return true;
    default:
        return true;
    }
}

char *tool_stream_args_of(const char *obj, size_t len, size_t *used)
{
    objscan_t o = {0};
    size_t i = 0;
    while (i < len && o.st != OS_CLOSED && o.st != OS_FAILED)
        i += objscan_step(&o, obj[i]);
    if (used)
        *used = i;
    char *out = o.args_seen ? xstrndup(o.args.p ? o.args.p : "", o.args.len) : xstrdup("{}");
    objscan_free(&o);
    return out;
}

/* ---- the formats ---------------------------------------------------------- */

enum mode { TS_DETECT, TS_HERMES, TS_LIST, TS_BARE_JSON, TS_CONTENT, TS_DONE };
/* sub-states of the call modes */
enum { SUB_START, SUB_OBJ, SUB_IN_OBJ, SUB_AFTER };

struct tool_stream {
    char *const *names;           /* borrowed: the request's tools */
    size_t n_names;
    enum mode mode;
    bool list_named;              /* TS_LIST: the bare array (names must be tools) vs
                                     [TOOL_CALLS] (any name) */
    bool bare_off;                /* the bare forms are ruled out */
    bool committed;               /* a call has begun: nothing is taken back */
    size_t released;              /* text[0..released) went out as content (or was
                                     dropped as a call's leading white space) */
    size_t pos;                   /* next byte the call modes look at */
    size_t searched;              /* markers were looked for in text[0..searched + marker) */
    int sub;                      /* their sub-state */
    objscan_t obj;                /* SUB_IN_OBJ: the call object */
    uint32_t n_calls;             /* calls begun */
    bool call_open;               /* BEGIN sent, END not yet */
    bool cut;                     /* the answer ended inside a begun call (the final feed
                                     closed it): a stop string or max_tokens cut it short */
    size_t args_sent;             /* bytes of obj.args sent for the open call */
    char **call_names;            /* (n_calls) names sent with BEGIN, owned */
    tool_stream_delta_t *out;     /* (n_out) of this feed */
    size_t n_out, cap_out;
    buf_t argbuf;                 /* this feed's ARGS bytes (deltas hold offsets until the end) */
};

tool_stream_t *tool_stream_new(char *const *names, size_t n_names)
{
    tool_stream_t *t = xcalloc(1, sizeof *t);
    t->names = names;
    t->n_names = n_names;
    return t;
}

void tool_stream_free(tool_stream_t **tp)
{
    tool_stream_t *t = *tp;
    if (!t)
        return;
    *tp = NULL;
    objscan_free(&t->obj);
    for (uint32_t i = 0; i < t->n_calls; i++)
        free(t->call_names[i]);
    free(t->call_names);
    free(t->out);
    free(t->argbuf.p);
    free(t);
}

uint32_t tool_stream_n_calls(const tool_stream_t *t)
{
    return t->n_calls;
}

bool tool_stream_cut(const tool_stream_t *t)
{
    return t->cut;
}

static void emit(tool_stream_t *t, tool_stream_delta_t d)
{
    vec_reserve(t->out, t->cap_out, t->n_out + 1);
    t->out[t->n_out++] = d;
}

static void release_to(tool_stream_t *t, const char *text, size_t end)
{
    if (end <= t->released)
        return;
    emit(t, (tool_stream_delta_t){.kind = TOOL_STREAM_CONTENT, .text = text + t->released,
                                  .len = end - t->released});
    t->released = end;
}

/* The open call's new argument bytes as one ARGS delta (text = an offset
 * into argbuf until the feed ends). */
static void flush_args(tool_stream_t *t)
{
    if (!t->call_open || t->obj.args.len <= t->args_sent)
        return;
    size_t n = t->obj.args.len - t->args_sent;
    emit(t, (tool_stream_delta_t){.kind = TOOL_STREAM_ARGS, .text = (const char *)(uintptr_t)t->argbuf.len,
                                  .len = n, .i_call = t->n_calls - 1});
    buf_put(&t->argbuf, t->obj.args.p + t->args_sent, n);
    t->args_sent = t->obj.args.len;
}

static void end_call(tool_stream_t *t)
{
    if (!t->call_open)
        return;
    if (!t->obj.args_seen && t->obj.args.len == 0)
        buf_put(&t->obj.args, "{}", 2);
    flush_args(t);
    emit(t, (tool_stream_delta_t){.kind = TOOL_STREAM_END, .i_call = t->n_calls - 1});
    t->call_open = false;
}

static bool name_allowed(const tool_stream_t *t, const char *name)
{
    if (!name[0])
        return false;
    if (t->mode == TS_HERMES || (t->mode == TS_LIST && !t->list_named))
        return true;
    for (size_t i = 0; i < t->n_names; i++)
        if (strcmp(t->names[i], name) == 0)
            return true;
    return false;
}

/* The object's name is known: the call begins (or the candidate fails). */
static bool begin_call(tool_stream_t *t)
{
    if (t->obj.name_bad || !name_allowed(t, t->obj.name.p ? t->obj.name.p : "") ||
        t->n_calls >= MAX_CALLS)
        return false;
    t->call_names = xrealloc(t->call_names, (t->n_calls + 1) * sizeof *t->call_names);
    t->call_names[t->n_calls] = xstrdup(t->obj.name.p);
    emit(t, (tool_stream_delta_t){.kind = TOOL_STREAM_BEGIN, .i_call = t->n_calls,
                                  .name = t->call_names[t->n_calls]});
    t->n_calls++;
    t->call_open = true;
    t->committed = true;
    t->args_sent = 0;
    return true;
}

bool tool_stream_at(const char *s, size_t i, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return i + k <= n && memcmp(s + i, lit, k) == 0;
}

/* s[i..n) is a proper prefix of lit (more text may complete it). */
static bool prefix_of(const char *s, size_t i, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return n - i < k && memcmp(s + i, lit, n - i) == 0;
}

/* Longest suffix of s[0..n) that is a proper prefix of lit. */
size_t tool_stream_partial_suffix(const char *s, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    for (size_t m = k - 1 < n ? k - 1 : n; m > 0; m--)
        if (memcmp(s + n - m, lit, m) == 0)
            return m;
    return 0;
}

size_t tool_stream_skip_ws(const char *s, size_t i, size_t n)
{
    while (i < n && tool_stream_is_ws(s[i]))
        i++;
    return i;
}

/* The earliest marker in text[0..n): 0 none, 'h' hermes, 'm' mistral (*at). */
static int find_marker(const char *text, size_t n, size_t *where)
{
    const char *h = memmem(text, n, HERMES_OPEN, strlen(HERMES_OPEN));
    const char *m = memmem(text, n, MISTRAL_TAG, strlen(MISTRAL_TAG));
    if (h && (!m || h < m)) {
        *where = (size_t)(h - text);
        return 'h';
    }
    if (m) {
        *where = (size_t)(m - text);
        return 'm';
    }
    return 0;
}

static void enter(tool_stream_t *t, enum mode mode, size_t pos)
{
    t->mode = mode;
    t->pos = pos;
    t->sub = SUB_START;
    objscan_reset(&t->obj);
}

/* Switches to a marker's mode when the text has one (content before it is
 * released). Only while no call has begun. */
static bool take_marker(tool_stream_t *t, const char *text, size_t len)
{
    size_t p, from = t->searched < len ? t->searched : len;
    int mk = find_marker(text + from, len - from, &p);
    /* a marker may straddle this feed and the next: look again at its tail */
    t->searched = len >= strlen(MISTRAL_TAG) + 1 ? len - (strlen(MISTRAL_TAG) + 1) : 0;
    if (!mk)
        return false;
    p += from;
    release_to(t, text, p);
    if (mk == 'h') {
        enter(t, TS_HERMES, p);
    } else {
        enter(t, TS_LIST, p + strlen(MISTRAL_TAG));
        t->list_named = false;
    }
    return true;
}

/* TS_DETECT: where may a call start? Returns true when the mode changed. */
static bool detect(tool_stream_t *t, const char *text, size_t len, bool final)
{
    if (take_marker(t, text, len))
        return true;
    if (!t->bare_off) {
        size_t i = tool_stream_skip_ws(text, 0, len);
        if (i == len)
            return false; /* only white space so far: a call may still begin */
        size_t j = i;
        if (tool_stream_at(text, i, len, PYTHON_TAG))
            j = tool_stream_skip_ws(text, i + strlen(PYTHON_TAG), len);
        else if (prefix_of(text, i, len, PYTHON_TAG) && !final)
            return false;
        if (j == len && !final)
            return false;
        if (j < len && text[j] == '{') {
            enter(t, TS_BARE_JSON, j);
            return true;
        }
        if (j < len && text[j] == '[') {
            size_t k = tool_stream_skip_ws(text, j + 1, len);
            if (k == len && !final)
                return false;
            if (k < len && text[k] == '{') {
                enter(t, TS_LIST, j);
                t->list_named = true;
                return true;
            }
        }
        t->bare_off = true; /* the answer does not start like a bare call */
    }
    /* plain text: hold back only a partial marker at the end */
    size_t a = tool_stream_partial_suffix(text, len, HERMES_OPEN), b = tool_stream_partial_suffix(text, len, MISTRAL_TAG);
    release_to(t, text, final ? len : len - (a > b ? a : b));
    return false;
}

/* The candidate is not a call: before any call began, what was held is
 * content (a bare candidate: look again without the bare forms; after a
 * marker: everything, as the non-streaming parser does). After a call
 * began, the rest is dropped. */
static void fail(tool_stream_t *t)
{
    if (t->committed) {
        end_call(t);
        t->mode = TS_DONE;
    } else if (t->mode == TS_HERMES || (t->mode == TS_LIST && !t->list_named)) {
        t->mode = TS_CONTENT;
    } else {
        t->bare_off = true;
        t->mode = TS_DETECT;
    }
}

/* Runs the call object over text[pos..len). Returns 1 when it closed, 0 when
 * it needs more text, -1 when it failed. */
static int run_object(tool_stream_t *t, const char *text, size_t len)
{
    objscan_t *o = &t->obj;
    while (t->pos < len) {
        bool had_name = o->name_done;
        t->pos += objscan_step(o, text[t->pos]);
        if (o->st == OS_FAILED)
            return -1;
        if (!had_name && o->name_done && !begin_call(t))
            return -1;
        if (o->st == OS_CLOSED) {
            if (!t->call_open)
                return -1; /* no name */
            end_call(t);
            return 1;
        }
    }
    flush_args(t);
    return 0;
}

/* One step of a call mode. Returns true to go on, false to wait for text. */
static bool step_calls(tool_stream_t *t, const char *text, size_t len)
{
    if (!t->committed && t->mode != TS_HERMES && !(t->mode == TS_LIST && !t->list_named) &&
        take_marker(t, text, len))
        return true; /* a bare candidate, but the text has a marker: that wins */
    if (t->sub == SUB_IN_OBJ) {
        int r = run_object(t, text, len);
        if (r < 0)
            fail(t);
        else if (r > 0)
            t->sub = SUB_AFTER;
        return r != 0;
    }
    size_t i = tool_stream_skip_ws(text, t->pos, len);
    if (i == len)
        return false;
    const char *open = t->mode == TS_HERMES ? HERMES_OPEN : NULL;
    switch (t->sub) {
    case SUB_START: /* hermes: <tool_call>; lists: '[' */
        if (open) {
            if (prefix_of(text, i, len, open))
                return false;
            if (!tool_stream_at(text, i, len, open)) {
                fail(t);
                return true;
            }
            t->pos = i + strlen(open);
        } else if (t->mode == TS_LIST) {
            if (text[i] != '[') {
                fail(t);
                return true;
            }
            t->pos = i + 1;
        } else {
            t->pos = i;
        }
        t->sub = SUB_OBJ;
        return true;
    case SUB_OBJ:
        if (text[i] != '{') {
            fail(t);
            return true;
        }
        objscan_reset(&t->obj);
        t->pos = i;
        t->sub = SUB_IN_OBJ;
        return true;
    default: /* SUB_AFTER: between calls */
        if (t->mode == TS_HERMES) {
            if (prefix_of(text, i, len, HERMES_CLOSE))
                return false;
            if (!tool_stream_at(text, i, len, HERMES_CLOSE)) {
                fail(t); /* an unclosed block ends the answer */
                return true;
            }
            t->pos = i + strlen(HERMES_CLOSE);
            t->sub = SUB_START;
        } else if (t->mode == TS_LIST) {
            if (text[i] == ',') {
                t->pos = i + 1;
                t->sub = SUB_OBJ;
            } else if (text[i] == ']') {
                t->pos = i + 1;
                t->mode = TS_DONE; /* the list is complete */
            } else {
                fail(t);
            }
        } else { /* TS_BARE_JSON: calls joined by ';' */
            if (text[i] != ';') {
                fail(t);
                return true;
            }
            t->pos = i + 1;
            t->sub = SUB_OBJ;
        }
        return true;
    }
}

size_t tool_stream_feed(tool_stream_t *t, const char *text, size_t len, bool final,
                        const tool_stream_delta_t **out)
{
    t->n_out = 0;
    t->argbuf.len = 0;
    for (bool more = true; more;) {
        switch (t->mode) {
        case TS_DETECT:
            more = detect(t, text, len, final);
            break;
        case TS_CONTENT:
            release_to(t, text, len);
            more = false;
            break;
        case TS_DONE:
            more = false;
            break;
        default:
            more = step_calls(t, text, len);
            break;
        }
    }
    if (final) {
        /* held back and never a call: content (a candidate, white space, a
         * partial marker) */
        if (!t->committed)
            release_to(t, text, len);
        t->cut = t->call_open;
        end_call(t); /* cut off inside a call: its arguments as written so far */
        t->mode = TS_DONE;
    }
    /* ARGS texts: offsets into argbuf → pointers (argbuf no longer moves) */
    for (size_t i = 0; i < t->n_out; i++)
        if (t->out[i].kind == TOOL_STREAM_ARGS)
            t->out[i].text = t->argbuf.p + (uintptr_t)t->out[i].text;
    *out = t->out;
    return t->n_out;
}
