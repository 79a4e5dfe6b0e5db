/* tool_stream.c — incremental tool-call parser (see tool_stream.h).
 *
 * The format layer (tool_stream_feed) over tool_scan.h's call-object
 * scanner: it finds where calls start and walks from one call object to the
 * next, both by the columns of the rows of tool_format_all[] (no family is
 * named here). All state survives between feeds, so each byte is looked at
 * once. */
#include "common/text/tool_stream.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "common/text/tool_format.h"
#include "common/text/tool_scan.h"
#include "common/vec.h"
#include "common/xalloc.h"

/* ---- the formats ---------------------------------------------------------- */

/* A family's calls are read as its row in tool_format_all[] says
 * (tool_format.h, "Reading incrementally"):
 *     list_open  call  (list_sep call)*  list_close,  call = call_start obj call_end
 * The modes: TS_DETECT looks for where calls may start (a family's tag
 * anywhere, or its bare_open at the start of the answer); TS_CALLS walks the
 * sequence of the family `fmt`; TS_CONTENT / TS_DONE: nothing more to find. */
enum mode { TS_DETECT, TS_CALLS, TS_CONTENT, TS_DONE };
/* TS_CALLS: the piece of the sequence expected next */
enum { SUB_LIST_OPEN, SUB_CALL_START, SUB_OBJ, SUB_IN_OBJ, SUB_CALL_END, SUB_BETWEEN };

struct tool_stream {
    char *const *names;           /* borrowed: the request's tools */
    size_t n_names;
    enum mode mode;
    const tool_format_t *fmt;     /* TS_CALLS: the family being read */
    bool bare;                    /* TS_CALLS: its untagged form (names must be tools) vs
                                     after its tag (any name) */
    bool bare_off;                /* the bare forms are ruled out */
    bool committed;               /* a call has begun: nothing is taken back */
    size_t released;              /* text[0..released) went out as content (or was
                                     dropped as a call's leading white space) */
    size_t pos;                   /* next byte the call modes look at */
    size_t searched;              /* tags were looked for in text[0..searched + tag) */
    int sub;                      /* TS_CALLS: SUB_* */
    tool_scan_obj_t obj;          /* SUB_IN_OBJ: the call object */
    uint32_t n_calls;             /* calls begun */
    bool call_open;               /* BEGIN sent, END not yet */
    bool cut;                     /* the answer ended inside a begun call (the final feed
                                     closed it): a stop string or max_tokens cut it short */
    size_t args_sent;             /* bytes of obj.args sent for the open call */
    char **call_names;            /* (n_calls) names sent with BEGIN, owned */
    tool_stream_delta_t *out;     /* (n_out) of this feed */
    size_t n_out, cap_out;
    strbuf_t argbuf;              /* this feed's ARGS bytes (deltas hold offsets until the end) */
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
    tool_scan_obj_free(&t->obj);
    for (uint32_t i = 0; i < t->n_calls; i++)
        free(t->call_names[i]);
    free(t->call_names);
    free(t->out);
    strbuf_free(&t->argbuf);
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
    strbuf_append(&t->argbuf, t->obj.args.s + t->args_sent, n);
    t->args_sent = t->obj.args.len;
}

static void end_call(tool_stream_t *t)
{
    if (!t->call_open)
        return;
    if (!t->obj.args_seen && t->obj.args.len == 0)
        strbuf_append(&t->obj.args, "{}", 2);
    flush_args(t);
    emit(t, (tool_stream_delta_t){.kind = TOOL_STREAM_END, .i_call = t->n_calls - 1});
    t->call_open = false;
}

static bool name_allowed(const tool_stream_t *t, const char *name)
{
    if (!name[0])
        return false;
    if (!t->bare)
        return true;
    for (size_t i = 0; i < t->n_names; i++)
        if (strcmp(t->names[i], name) == 0)
            return true;
    return false;
}

/* The object's name is known: the call begins (or the candidate fails). */
static bool begin_call(tool_stream_t *t)
{
    if (t->obj.name_bad || !name_allowed(t, t->obj.name.s ? t->obj.name.s : "") ||
        t->n_calls >= TOOL_FORMAT_MAX_CALLS)
        return false;
    t->call_names = xrealloc(t->call_names, (t->n_calls + 1) * sizeof *t->call_names);
    t->call_names[t->n_calls] = xstrdup(t->obj.name.s);
    emit(t, (tool_stream_delta_t){.kind = TOOL_STREAM_BEGIN, .i_call = t->n_calls,
                                  .name = t->call_names[t->n_calls]});
    t->n_calls++;
    t->call_open = true;
    t->committed = true;
    t->args_sent = 0;
    return true;
}

/* s[i..n) is a proper prefix of lit (more text may complete it). */
static bool prefix_of(const char *s, size_t i, size_t n, const char *lit)
{
    size_t k = strlen(lit);
    return n - i < k && memcmp(s + i, lit, n - i) == 0;
}

/* The family whose tag comes first in text[0..n) (ties: the earlier row),
 * with *where its offset; NULL when no tag is there. */
static const tool_format_t *find_tag(const char *text, size_t n, size_t *where)
{
    const tool_format_t *best = NULL;
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        const char *p = f->tag ? memmem(text, n, f->tag, strlen(f->tag)) : NULL;
        if (p && (!best || (size_t)(p - text) < *where)) {
            best = f;
            *where = (size_t)(p - text);
        }
    }
    return best;
}

/* The longest tag of any family (a tag may straddle two feeds). */
static size_t max_tag_len(void)
{
    size_t m = 0;
    for (size_t k = 0; tool_format_all[k]; k++)
        if (tool_format_all[k]->tag && strlen(tool_format_all[k]->tag) > m)
            m = strlen(tool_format_all[k]->tag);
    return m;
}

/* The longest partial tag (of any family) that ends text[0..len). */
static size_t partial_tag(const char *text, size_t len)
{
    size_t m = 0;
    for (size_t k = 0; tool_format_all[k]; k++) {
        const char *tag = tool_format_all[k]->tag;
        size_t p = tag ? tool_scan_partial_suffix(text, len, tag) : 0;
        m = p > m ? p : m;
    }
    return m;
}

static void enter(tool_stream_t *t, const tool_format_t *f, bool bare, size_t pos)
{
    t->mode = TS_CALLS;
    t->fmt = f;
    t->bare = bare;
    t->pos = pos;
    t->sub = SUB_LIST_OPEN;
    tool_scan_obj_reset(&t->obj);
}

/* Switches to the calls after a family's tag when the text has one
 * (content before it is released). Only while no call has begun. The
 * sequence starts at the tag when the tag is the family's call_start (it
 * opens every call), else right after it. */
static bool take_marker(tool_stream_t *t, const char *text, size_t len)
{
    size_t p = 0, from = t->searched < len ? t->searched : len, back = max_tag_len() + 1;
    const tool_format_t *f = find_tag(text + from, len - from, &p);
    /* a tag may straddle this feed and the next: look again at its tail */
    t->searched = len >= back ? len - back : 0;
    if (!f)
        return false;
    p += from;
    release_to(t, text, p);
    enter(t, f, false, strcmp(f->tag, f->call_start) == 0 ? p : p + strlen(f->tag));
    return true;
}

/* Where the untagged calls of a family would start: after any bare_prefix
 * (the rows in order, as tool_format_extract skips them), at a family's
 * bare_open. Returns 1 (entered), 0 (no bare form: *j is meaningless),
 * -1 (wait for more text). */
static int detect_bare(tool_stream_t *t, const char *text, size_t len, bool final)
{
    size_t j = tool_scan_skip_ws(text, 0, len);
    for (size_t k = 0; tool_format_all[k]; k++) {
        const char *pre = tool_format_all[k]->bare_prefix;
        if (!pre)
            continue;
        if (tool_scan_at(text, j, len, pre))
            j = tool_scan_skip_ws(text, j + strlen(pre), len);
        else if (prefix_of(text, j, len, pre) && !final)
            return -1;
    }
    if (j == len && !final)
        return -1;
    for (size_t k = 0; tool_format_all[k]; k++) {
        const tool_format_t *f = tool_format_all[k];
        if (!f->bare_open)
            continue;
        int m = tool_format_bare_match(f, text, j, len);
        if (m > 0) {
            enter(t, f, true, j);
            return 1;
        }
        if (m < 0 && !final)
            return -1;
    }
    return 0;
}

/* TS_DETECT: where may a call start? Returns true when the mode changed. */
static bool detect(tool_stream_t *t, const char *text, size_t len, bool final)
{
    if (take_marker(t, text, len))
        return true;
    if (!t->bare_off) {
        if (tool_scan_skip_ws(text, 0, len) == len)
            return false; /* only white space so far: a call may still begin */
        int r = detect_bare(t, text, len, final);
        if (r != 0)
            return r > 0;
        t->bare_off = true; /* the answer does not start like a bare call */
    }
    /* plain text: hold back only a partial tag at the end */
    release_to(t, text, final ? len : len - partial_tag(text, len));
    return false;
}

/* The candidate is not a call: before any call began, what was held is
 * content (a bare candidate: look again without the bare forms; after a
 * tag: everything, as the non-streaming parser does). After a call
 * began, the rest is dropped. */
static void fail(tool_stream_t *t)
{
    if (t->committed) {
        end_call(t);
        t->mode = TS_DONE;
    } else if (!t->bare) {
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
    tool_scan_obj_t *o = &t->obj;
    while (t->pos < len) {
        bool had_name = o->name_done;
        t->pos += tool_scan_obj_step(o, text[t->pos]);
        if (o->st == TOOL_SCAN_FAILED)
            return -1;
        if (!had_name && o->name_done && !begin_call(t))
            return -1;
        if (o->st == TOOL_SCAN_CLOSED) {
            if (!t->call_open)
                return -1; /* no name */
            end_call(t);
            return 1;
        }
    }
    flush_args(t);
    return 0;
}

/* The piece lit of the sequence at text[pos..) after white space: 1 there
 * (pos moves past it; "" is always there), 0 the text ends before it can
 * tell, -1 something else is there. */
static int piece(tool_stream_t *t, const char *text, size_t len, const char *lit)
{
    if (!lit || !lit[0])
        return 1;
    size_t i = tool_scan_skip_ws(text, t->pos, len);
    if (i == len || prefix_of(text, i, len, lit))
        return 0;
    if (!tool_scan_at(text, i, len, lit))
        return -1;
    t->pos = i + strlen(lit);
    return 1;
}

/* One step of TS_CALLS. Returns true to go on, false to wait for text. */
static bool step_calls(tool_stream_t *t, const char *text, size_t len)
{
    const tool_format_t *f = t->fmt;
    if (!t->committed && t->bare && take_marker(t, text, len))
        return true; /* a bare candidate, but the text has a tag: that wins */
    int r;
    switch (t->sub) {
    case SUB_LIST_OPEN:
        r = piece(t, text, len, f->list_open);
        if (r > 0)
            t->sub = SUB_CALL_START;
        break;
    case SUB_CALL_START:
        r = piece(t, text, len, f->call_start);
        if (r > 0)
            t->sub = SUB_OBJ;
        break;
    case SUB_OBJ:
        r = piece(t, text, len, "{");
        if (r > 0) {
            tool_scan_obj_reset(&t->obj);
            t->pos--; /* the object scanner reads its own '{' */
            t->sub = SUB_IN_OBJ;
        }
        break;
    case SUB_IN_OBJ:
        r = run_object(t, text, len);
        if (r > 0)
            t->sub = SUB_CALL_END;
        break;
    case SUB_CALL_END: /* an unclosed last call ends the answer (final feed) */
        r = piece(t, text, len, f->call_end);
        if (r > 0)
            t->sub = SUB_BETWEEN;
        break;
    default: /* SUB_BETWEEN: the list's end, or the next call */
        r = f->list_close && f->list_close[0] ? piece(t, text, len, f->list_close) : -1;
        if (r > 0) {
            t->mode = TS_DONE; /* the list is complete */
            return true;
        }
        if (r < 0)
            r = piece(t, text, len, f->list_sep);
        if (r > 0)
            t->sub = SUB_CALL_START;
        break;
    }
    if (r < 0)
        fail(t);
    return r != 0;
}

size_t tool_stream_feed(tool_stream_t *t, const char *text, size_t len, bool final,
                        const tool_stream_delta_t **out)
{
    t->n_out = 0;
    strbuf_reset(&t->argbuf);
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
        case TS_CALLS:
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
            t->out[i].text = t->argbuf.s + (uintptr_t)t->out[i].text;
    *out = t->out;
    return t->n_out;
}
