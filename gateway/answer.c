/* answer.c — a choice's text split into reasoning, content and tool-call
 * parts, streamed or whole (see answer.h). */
#include "gateway/answer.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/oai.h"
#include "gateway/reasoning.h"
#include "common/text/tool_scan.h"
#include "common/text/tool_stream.h"

struct answer {
    char *const *tool_names;      /* borrowed; NULL = not parsed for calls */
    size_t n_tools;
    bool reasoning;               /* <think>...</think> split off */
    bool ended;                   /* a feed other than ANSWER_MORE came */
    strbuf_t text;                /* everything fed so far (only when tools or reasoning:
                                     otherwise text passes straight through) */
    size_t emitted;               /* bytes of the content part released as content */
    size_t r_emitted;             /* bytes of the reasoning part released */
    tool_stream_t *tools;         /* the calls in the content, NULL without tool_names */
    char (*ids)[40];              /* (n_ids) "call_…" id of each call begun */
    size_t n_ids, cap_ids;
    answer_part_t *parts;         /* (n_parts) of the last feed */
    size_t n_parts, cap_parts;
};

answer_t *answer_new(char *const *tool_names, size_t n_tools, bool reasoning)
{
    answer_t *a = xcalloc(1, sizeof *a);
    a->tool_names = tool_names;
    a->n_tools = n_tools;
    a->reasoning = reasoning;
    if (tool_names)
        a->tools = tool_stream_new(tool_names, n_tools);
    return a;
}

void answer_free(answer_t **ap)
{
    answer_t *a = *ap;
    if (!a)
        return;
    *ap = NULL;
    tool_stream_free(&a->tools);
    free(a->ids);
    free(a->parts);
    strbuf_free(&a->text);
    free(a);
}

uint32_t answer_n_calls(const answer_t *a)
{
    return a->tools ? tool_stream_n_calls(a->tools) : 0;
}

bool answer_ends_in_calls(const answer_t *a)
{
    return answer_n_calls(a) > 0 && !tool_stream_cut(a->tools);
}

static void push(answer_t *a, answer_part_t p)
{
    vec_reserve(a->parts, a->cap_parts, a->n_parts + 1);
    a->parts[a->n_parts++] = p;
}

static void push_text(answer_t *a, answer_part_kind_t kind, const char *text, size_t len)
{
    if (len)
        push(a, (answer_part_t){.kind = kind, .text = text, .len = len});
}

/* Releases the reasoning decided so far; returns where content starts in
 * a->text.s, or SIZE_MAX while that is not known yet. */
static size_t release_reasoning(answer_t *a, answer_end_t end)
{
    if (!a->reasoning)
        return 0;
    reasoning_split_t sp;
    if (end != ANSWER_MORE)
        reasoning_split(a->text.s, a->text.len, &sp);
    else
        reasoning_stream_feed(a->text.s, a->text.len, &sp);
    if (sp.undecided)
        return SIZE_MAX;
    if (!sp.has_reasoning)
        return 0;
    if (sp.r_len > a->r_emitted) {
        push_text(a, ANSWER_REASONING, a->text.s + sp.r_start + a->r_emitted, sp.r_len - a->r_emitted);
        a->r_emitted = sp.r_len;
    }
    return sp.closed ? sp.c_start : SIZE_MAX;
}

/* Releases the content decided so far (content = a->text.s + c0) and, with
 * tools, the tool calls in it as the tool stream decides them. */
static void release_content(answer_t *a, size_t c0, answer_end_t end)
{
    const char *content = a->text.s + c0;
    size_t clen = a->text.len - c0;
    if (!a->tools) {
        push_text(a, ANSWER_CONTENT, content + a->emitted, clen - a->emitted);
        a->emitted = clen;
        return;
    }
    const tool_stream_delta_t *d;
    size_t n = tool_stream_feed(a->tools, content, clen, end == ANSWER_DONE, &d);
    size_t first = a->n_parts;
    for (size_t i = 0; i < n; i++) {
        switch (d[i].kind) {
        case TOOL_STREAM_CONTENT:
            push_text(a, ANSWER_CONTENT, d[i].text, d[i].len);
            break;
        case TOOL_STREAM_BEGIN:
            assert(d[i].i_call == a->n_ids);
            vec_reserve(a->ids, a->cap_ids, a->n_ids + 1);
            oai_id_new("call_", a->ids[a->n_ids++], sizeof a->ids[0]);
            push(a, (answer_part_t){.kind = ANSWER_TOOL_BEGIN, .i_call = d[i].i_call, .name = d[i].name});
            break;
        case TOOL_STREAM_ARGS:
            push(a, (answer_part_t){.kind = ANSWER_TOOL_ARGS, .i_call = d[i].i_call, .text = d[i].text,
                                    .len = d[i].len});
            break;
        case TOOL_STREAM_END:
            push(a, (answer_part_t){.kind = ANSWER_TOOL_END, .i_call = d[i].i_call});
            break;
        }
    }
    for (size_t i = first; i < a->n_parts; i++) /* ids no longer move */
        if (a->parts[i].kind == ANSWER_TOOL_BEGIN)
            a->parts[i].id = a->ids[a->parts[i].i_call];
}

size_t answer_feed(answer_t *a, const char *text, size_t len, answer_end_t end,
                   const answer_part_t **parts)
{
    assert(!a->ended);
    a->ended = end != ANSWER_MORE;
    a->n_parts = 0;
    if (!a->tool_names && !a->reasoning) {
        /* nothing to take out: the text is content as it comes */
        push_text(a, ANSWER_CONTENT, text, len);
        *parts = a->parts;
        return a->n_parts;
    }
    strbuf_append(&a->text, text, len);
    size_t c0 = release_reasoning(a, end);
    if (c0 != SIZE_MAX)
        release_content(a, c0, end);
    *parts = a->parts;
    return a->n_parts;
}

/* The answer read as the stream reads it (tool_stream, one final feed):
 * when it ends inside a begun call, its content and calls are taken from
 * that reading (so both modes return the same cut call) and true is
 * returned; otherwise out is untouched. */
static bool whole_cut_calls(answer_whole_t *out, char *const *tool_names, size_t n_tools)
{
    tool_stream_t *ts = tool_stream_new(tool_names, n_tools);
    const tool_stream_delta_t *d;
    size_t n = tool_stream_feed(ts, out->content, out->content_len, true, &d);
    bool cut = tool_stream_cut(ts);
    if (cut) {
        size_t content_end = 0; /* CONTENT deltas: text[0..content_end), before the calls */
        out->n_calls = tool_stream_n_calls(ts);
        out->calls = xcalloc(out->n_calls, sizeof *out->calls);
        for (size_t i = 0; i < n; i++) {
            oai_tool_call_t *c = d[i].kind == TOOL_STREAM_CONTENT ? NULL : &out->calls[d[i].i_call];
            switch (d[i].kind) {
            case TOOL_STREAM_CONTENT:
                content_end = (size_t)(d[i].text - out->content) + d[i].len;
                break;
            case TOOL_STREAM_BEGIN:
                c->name = xstrdup(d[i].name);
                c->arguments = xstrdup("");
                oai_id_new("call_", c->id, sizeof c->id);
                break;
            case TOOL_STREAM_ARGS: {
                size_t have = strlen(c->arguments);
                c->arguments = xrealloc(c->arguments, have + d[i].len + 1);
                memcpy(c->arguments + have, d[i].text, d[i].len);
                c->arguments[have + d[i].len] = '\0';
                break;
            }
            case TOOL_STREAM_END:
                break;
            }
        }
        while (content_end && tool_scan_is_ws(out->content[content_end - 1]))
            content_end--; /* as oai_tools_extract: trailing white space dropped */
        out->content_len = content_end;
        out->cut = true;
    }
    tool_stream_free(&ts);
    return cut;
}

void answer_whole_split(const char *text, size_t len, char *const *tool_names, size_t n_tools,
                        bool reasoning, bool parse_calls, answer_whole_t *out)
{
    *out = (answer_whole_t){.content = text, .content_len = len};
    if (reasoning) {
        reasoning_split_t rs;
        reasoning_split(text, len, &rs);
        if (rs.has_reasoning) { /* the content is what follows </think> */
            out->has_reasoning = true;
            out->reasoning = text + rs.r_start;
            out->reasoning_len = rs.r_len;
            out->content = text + rs.c_start;
            out->content_len = len - rs.c_start;
        }
    }
    if (tool_names && parse_calls && whole_cut_calls(out, tool_names, n_tools))
        return;
    if (tool_names && parse_calls) {
        size_t content_len;
        out->n_calls = oai_tools_extract(out->content, out->content_len, tool_names, n_tools,
                                         &out->calls, &content_len);
        if (out->n_calls)
            out->content_len = content_len;
    }
}

void answer_whole_clear(answer_whole_t *w)
{
    oai_tool_calls_free(w->calls, w->n_calls);
    *w = (answer_whole_t){0};
}
