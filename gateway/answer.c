/* answer.c — a generated chat answer as reasoning / content / tool-call parts
 * (see answer.h): reasoning.h's split and oai_tools.h's parser and hold-back,
 * applied to the text so far. */
#include "gateway/answer.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/xalloc.h"
#include "gateway/reasoning.h"

struct answer_stream {
    bool reasoning;
    char *const *names;
    size_t n_names;
    char *text;        /* everything so far, (len) */
    size_t len, cap;
    size_t r_emitted;  /* reasoning bytes emitted */
    size_t c_emitted;  /* content bytes emitted */
    bool done;
};

answer_stream_t *answer_stream_new(bool reasoning, char *const *tool_names, size_t n_tools)
{
    answer_stream_t *a = xcalloc(1, sizeof *a);
    a->reasoning = reasoning;
    a->names = tool_names;
    a->n_names = tool_names ? n_tools : 0;
    return a;
}

void answer_stream_free(answer_stream_t **ap)
{
    answer_stream_t *a = *ap;
    if (!a)
        return;
    *ap = NULL;
    free(a->text);
    free(a);
}

static void emit_text(answer_emit_fn emit, void *ctx, answer_part_kind_t k, const char *t, size_t n)
{
    if (n == 0)
        return;
    answer_part_t p = {.kind = k, .text = t, .len = n};
    emit(ctx, &p);
}

size_t answer_stream_feed(answer_stream_t *a, const char *text, size_t len, bool final,
                          answer_emit_fn emit, void *ctx)
{
    if (a->done)
        return 0;
    if (a->len + len + 1 > a->cap) {
        a->cap = (a->len + len + 1) * 2;
        a->text = xrealloc(a->text, a->cap);
    }
    memcpy(a->text + a->len, text, len);
    a->len += len;
    a->text[a->len] = '\0';
    size_t c0 = 0;
    bool content_ready = true;
    if (a->reasoning) {
        reasoning_split_t sp;
        if (final)
            reasoning_split(a->text, a->len, &sp);
        else
            reasoning_stream_feed(a->text, a->len, &sp);
        if (sp.undecided) {
            content_ready = false;
        } else if (sp.has_reasoning) {
            if (sp.r_len > a->r_emitted) {
                emit_text(emit, ctx, ANSWER_REASONING, a->text + sp.r_start + a->r_emitted,
                          sp.r_len - a->r_emitted);
                a->r_emitted = sp.r_len;
            }
            content_ready = sp.closed;
            c0 = sp.c_start;
        }
    }
    if (!content_ready) {
        a->done = final;
        return 0;
    }
    const char *content = a->text + c0;
    size_t clen = a->len - c0;
    size_t n_calls = 0;
    if (final && a->n_names) {
        oai_tool_call_t *calls = NULL;
        size_t content_len;
        n_calls = oai_tools_extract(content, clen, a->names, a->n_names, &calls, &content_len);
        if (n_calls) {
            if (content_len > a->c_emitted)
                emit_text(emit, ctx, ANSWER_TEXT, content + a->c_emitted, content_len - a->c_emitted);
            for (size_t i = 0; i < n_calls; i++) {
                answer_part_t p = {.kind = ANSWER_CALL, .call = &calls[i]};
                emit(ctx, &p);
            }
            oai_tool_calls_free(calls, n_calls);
            a->c_emitted = clen;
        }
    }
    size_t safe = clen;
    if (!final && a->n_names)
        safe = oai_tools_safe_prefix(content, clen); /* what may still become a call waits */
    if (safe > a->c_emitted) {
        emit_text(emit, ctx, ANSWER_TEXT, content + a->c_emitted, safe - a->c_emitted);
        a->c_emitted = safe;
    }
    a->done = final;
    return n_calls;
}

size_t answer_split(bool reasoning, char *const *tool_names, size_t n_tools, const char *text,
                    size_t len, answer_emit_fn emit, void *ctx)
{
    answer_stream_t *a = answer_stream_new(reasoning, tool_names, n_tools);
    size_t n = answer_stream_feed(a, text, len, true, emit, ctx);
    answer_stream_free(&a);
    return n;
}

json_t *answer_jstr(const char *s, size_t len)
{
    size_t n;
    char *clean = utf8_sanitize(s ? s : "", s ? len : 0, &n);
    json_t *j = json_stringn_nocheck(clean, n);
    free(clean);
    if (!j)
        abort(); /* jansson fails only on OOM here */
    return j;
}

static void append(char **out, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n > *cap) {
        *cap = (*len + n) * 2 + 256;
        *out = xrealloc(*out, *cap);
    }
    memcpy(*out + *len, s, n);
    *len += n;
}

void answer_sse(char **out, size_t *len, size_t *cap, const char *name, json_t *data)
{
    char *text = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    if (!text)
        abort();
    if (name) {
        append(out, len, cap, "event: ", 7);
        append(out, len, cap, name, strlen(name));
        append(out, len, cap, "\n", 1);
    }
    append(out, len, cap, "data: ", 6);
    append(out, len, cap, text, strlen(text));
    append(out, len, cap, "\n\n", 2);
    free(text);
}
