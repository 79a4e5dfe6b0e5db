/* oai_stream.c — the OpenAI API surface: request bodies into the internal
 * request, replies into SSE chunks and complete bodies (see oai_stream.h). */
#include "gateway/oai_stream.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/answer.h"
#include "gateway/oai_tools.h"
#include "gateway/reasoning.h"

/* A streamed call: whether it is a custom tool's, and its input so far. */
typedef struct call_state {
    bool custom;
    oai_custom_acc_t acc;
} call_state_t;

/* Per-request render state (api_call_t.state). */
typedef struct oai_stream {
    char id[48];                  /* "chatcmpl-…" / "cmpl-…" / "embd-…" */
    bool include_usage;           /* stream_options.include_usage */
    bool base64;                  /* embeddings: encoding_format base64 */
    uint32_t n_finished;          /* choices whose final EVENT came */
    oai_usage_t usage;            /* summed over finished choices */
    bool role_sent[OAI_MAX_N];    /* chat: the choice's first chunk (role) is out */
    int64_t text_offset[OAI_MAX_N]; /* completions logprobs: code points so far */
    answer_t *answer[OAI_MAX_N];  /* each choice's split (made at its first EVENT) */
    call_state_t *calls[OAI_MAX_N]; /* (n_calls) each choice's calls so far, by number */
    size_t n_calls[OAI_MAX_N];
} oai_stream_t;

/* ------------------------------------------------------------------------ */
/* shared by streams and complete bodies                                     */

/* Logprobs of a run of events, pointing into their memory (plus per-token
 * `top` arrays this struct owns). */
typedef struct lp_run {
    oai_token_logprob_t *tok;
    size_t n, cap;
} lp_run_t;

static void lp_add(lp_run_t *lp, const proto_event_t *ev)
{
    for (uint32_t i = 0; i < ev->n_logprobs; i++) {
        const proto_logprob_t *p = &ev->logprobs[i];
        vec_reserve(lp->tok, lp->cap, lp->n + 1);
        oai_top_logprob_t *top = p->n_top ? xcalloc(p->n_top, sizeof *top) : NULL;
        for (uint32_t k = 0; k < p->n_top; k++)
            top[k] = (oai_top_logprob_t){(const char *)p->top[k].bytes, p->top[k].n_bytes,
                                         p->top[k].logprob};
        lp->tok[lp->n++] = (oai_token_logprob_t){(const char *)p->bytes, p->n_bytes, p->logprob,
                                                 top, p->n_top};
    }
}

static void lp_clear(lp_run_t *lp)
{
    for (size_t i = 0; i < lp->n; i++)
        free((void *)lp->tok[i].top);
    free(lp->tok);
    memset(lp, 0, sizeof *lp);
}

static const char *finish_name(proto_finish_t f)
{
    switch (f) {
    case PROTO_FINISH_STOP: return "stop";
    case PROTO_FINISH_LENGTH: return "length";
    default: return "abort"; /* cancelled, as vLLM names it */
    }
}

static oai_meta_t meta_of(const api_call_t *call)
{
    const oai_stream_t *st = call->state;
    return (oai_meta_t){.id = st->id, .model = call->model, .created = call->created};
}

/* ------------------------------------------------------------------------ */
/* parse                                                                     */

static int oai_parse(api_call_t *call, const uint8_t *body, size_t len, request_t *o,
                     oai_error_t *e)
{
    switch (call->op) {
    case REQUEST_OP_GENERATE: return oai_parse_request(body, len, call->kind, o, e);
    case REQUEST_OP_EMBED: return oai_parse_embeddings(body, len, o, e);
    default: return oai_parse_tokenizer(body, len, call->op, o, e);
    }
}

static void oai_begin(api_call_t *call, request_t *o)
{
    oai_stream_t *st = xcalloc(1, sizeof *st);
    st->include_usage = o->include_usage;
    st->base64 = o->base64;
    oai_id_new(call->op == REQUEST_OP_EMBED ? "embd-" : call->kind == REQUEST_CHAT ? "chatcmpl-" : "cmpl-",
               st->id, sizeof st->id);
    call->state = st;
}

static void oai_end(api_call_t *call)
{
    oai_stream_t *st = call->state;
    if (!st)
        return;
    for (size_t i = 0; i < OAI_MAX_N; i++) {
        answer_free(&st->answer[i]);
        for (size_t k = 0; k < st->n_calls[i]; k++)
            oai_custom_acc_clear(&st->calls[i][k].acc);
        free(st->calls[i]);
    }
    free(st);
    call->state = NULL;
}

static char *oai_error_body(const oai_error_t *e)
{
    return oai_error_json(e);
}

/* ------------------------------------------------------------------------ */
/* streams                                                                   */

static char *chunk_json(const api_call_t *call, const oai_chunk_t *ch)
{
    oai_meta_t meta = meta_of(call);
    return call->kind == REQUEST_CHAT ? oai_chat_chunk_json(&meta, ch) : oai_completion_chunk_json(&meta, ch);
}

static void sse_done(strbuf_t *out)
{
    strbuf_append(out, "data: [DONE]\n\n", 14);
}

/* An error event, then [DONE]: every stream ends the same way. */
static void stream_fail(api_call_t *call, strbuf_t *out, const oai_error_t *e)
{
    api_sse(out, NULL, oai_error_json(e));
    sse_done(out);
    call->done = true;
}

/* The event's logprobs, handed to the first chunk that carries text. */
typedef struct lp_once {
    const proto_event_t *ev;
    bool sent;
} lp_once_t;

/* A content (or completion text) chunk, or with `reasoning` one whose delta
 * carries only reasoning_content; it takes the event's logprobs if no chunk
 * did yet. */
static void emit_text(api_call_t *call, uint32_t ci, const char *text, size_t len, bool reasoning,
                      lp_once_t *lpo, strbuf_t *out)
{
    oai_stream_t *st = call->state;
    lp_run_t lp = {0};
    bool with_lp = !lpo->sent && lpo->ev->n_logprobs > 0;
    if (with_lp)
        lp_add(&lp, lpo->ev);
    lpo->sent = true;
    oai_logprobs_t lps = {.present = with_lp, .tokens = lp.tok, .n_tokens = lp.n,
                          .text_offset0 = reasoning ? 0 : st->text_offset[ci]};
    oai_chunk_t ch = {.index = (int32_t)ci, .text = reasoning ? "" : text, .text_len = reasoning ? 0 : len,
                      .logprobs = &lps, .include_usage = st->include_usage};
    char *json = chunk_json(call, &ch);
    if (reasoning)
        json = reasoning_patch(json, 0, text, len, true, true);
    else
        st->text_offset[ci] += (int64_t)utf8_count(text, len);
    api_sse(out, NULL, json);
    lp_clear(&lp);
}

/* One chunk with delta.tool_calls for a run of tool parts: one entry per
 * call, "index" first (the call's number in the choice), then "id", "type"
 * and function.name when the run holds its BEGIN, and function.arguments =
 * the run's fragments of it joined. Nothing when the run only ends calls. */
static void emit_tool_calls(api_call_t *call, uint32_t ci, const answer_part_t *p, size_t n,
                            strbuf_t *out)
{
    oai_stream_t *st = call->state;
    json_t *arr = json_array();
    for (size_t i = 0; i < n;) {
        /* the run's parts of one call are adjacent */
        const answer_part_t *begin = NULL;
        size_t j = i, args_len = 0;
        for (; j < n && p[j].i_call == p[i].i_call; j++) {
            if (p[j].kind == ANSWER_TOOL_BEGIN)
                begin = &p[j];
            else if (p[j].kind == ANSWER_TOOL_ARGS)
                args_len += p[j].len;
        }
        if (begin || args_len) {
            char *args = xmalloc(args_len + 1);
            size_t off = 0;
            for (size_t k = i; k < j; k++)
                if (p[k].kind == ANSWER_TOOL_ARGS) {
                    memcpy(args + off, p[k].text, p[k].len);
                    off += p[k].len;
                }
            uint32_t ic = p[i].i_call;
            if (ic >= st->n_calls[ci]) {
                st->calls[ci] = xrealloc(st->calls[ci], (ic + 1) * sizeof *st->calls[ci]);
                memset(st->calls[ci] + st->n_calls[ci], 0, (ic + 1 - st->n_calls[ci]) * sizeof *st->calls[ci]);
                st->n_calls[ci] = ic + 1;
            }
            call_state_t *cs = &st->calls[ci][ic];
            if (begin)
                cs->custom = oai_tool_is_custom(begin->name, call->tool_names, call->tool_custom, call->n_tools);
            json_t *c = json_pack("{s:I}", "index", (json_int_t)ic);
            json_t *fn = json_object();
            if (begin) {
                json_object_set_new(c, "id", json_string(begin->id));
                json_object_set_new(c, "type", json_string(cs->custom ? "custom" : "function"));
                json_object_set_new(fn, "name", json_string(begin->name));
            }
            bool some = begin != NULL;
            if (cs->custom) {
                /* a custom call streams its decoded input, not the JSON */
                size_t dl;
                char *d = oai_custom_acc_feed(&cs->acc, args, args_len, &dl);
                json_object_set_new(fn, "input", oai_json_text(d, dl));
                some = some || dl > 0;
                free(d);
            } else {
                json_object_set_new(fn, "arguments", json_stringn(args, args_len));
                some = true;
            }
            json_object_set_new(c, cs->custom ? "custom" : "function", fn);
            if (some)
                json_array_append_new(arr, c);
            else
                json_decref(c);
            free(args);
        }
        i = j;
    }
    if (json_array_size(arr) == 0) {
        json_decref(arr);
        return;
    }
    oai_chunk_t ch = {.index = (int32_t)ci, .include_usage = st->include_usage};
    char *body = chunk_json(call, &ch);
    json_error_t je;
    json_t *root = json_loads(body, JSON_ALLOW_NUL, &je);
    free(body);
    json_t *delta = json_object_get(json_array_get(json_object_get(root, "choices"), 0), "delta");
    json_object_del(delta, "content");
    json_object_set_new(delta, "tool_calls", arr);
    api_sse(out, NULL, json_dumps(root, JSON_COMPACT));
    json_decref(root);
}

/* The parts of one EVENT as chunks, in order. */
static void emit_parts(api_call_t *call, uint32_t ci, const answer_part_t *p, size_t n,
                       const proto_event_t *ev, strbuf_t *out)
{
    lp_once_t lpo = {.ev = ev};
    for (size_t i = 0; i < n;) {
        switch (p[i].kind) {
        case ANSWER_REASONING:
            emit_text(call, ci, p[i].text, p[i].len, true, &lpo, out);
            i++;
            break;
        case ANSWER_CONTENT:
            emit_text(call, ci, p[i].text, p[i].len, false, &lpo, out);
            i++;
            break;
        default: { /* a run of tool parts: one chunk */
            if (!lpo.sent && ev->n_logprobs)
                emit_text(call, ci, "", 0, false, &lpo, out);
            size_t j = i;
            while (j < n && p[j].kind >= ANSWER_TOOL_BEGIN)
                j++;
            emit_tool_calls(call, ci, p + i, j - i, out);
            i = j;
        }
        }
    }
    if (!lpo.sent && ev->n_logprobs) /* logprobs of tokens whose text is held back */
        emit_text(call, ci, "", 0, false, &lpo, out);
}

/* A choice's final EVENT: its finish_reason chunk; after the last choice the
 * usage chunk and [DONE] (or, when it failed, the error and [DONE]). */
static void emit_finish(api_call_t *call, uint32_t ci, const proto_event_t *ev, strbuf_t *out)
{
    oai_stream_t *st = call->state;
    oai_usage_t u;
    api_event_usage(ev, &u);
    st->usage.prompt_tokens = u.prompt_tokens;
    st->usage.cached_tokens = u.cached_tokens;
    st->usage.completion_tokens += u.completion_tokens;
    if (api_finish_failed(ev->finish)) {
        oai_error_t e;
        api_event_error(ev, &e, -1);
        stream_fail(call, out, &e);
        return;
    }
    bool calls = st->answer[ci] && answer_ends_in_calls(st->answer[ci]); /* not when cut short */
    oai_chunk_t ch = {.index = (int32_t)ci, .finish_reason = calls ? "tool_calls" : finish_name(ev->finish),
                      .include_usage = st->include_usage};
    if (call->kind == REQUEST_COMPLETION)
        ch.text = "";
    api_sse(out, NULL, chunk_json(call, &ch));
    if (++st->n_finished < call->n_choices)
        return; /* the stream ends after the last choice */
    if (st->include_usage) {
        oai_chunk_t uc = {.include_usage = true, .usage = &st->usage};
        api_sse(out, NULL, chunk_json(call, &uc));
    }
    sse_done(out);
    call->done = true;
}

/* One reply → its chunks: the role chunk (chat, first of a choice), the
 * parts its text splits into, and the finish. */
static void oai_stream_event(api_call_t *call, gateway_reply_t *rep, strbuf_t *out)
{
    oai_stream_t *st = call->state;
    if (rep->kind == GATEWAY_REPLY_ERROR) {
        stream_fail(call, out, &rep->error);
        gateway_reply_free(&rep);
        return;
    }
    const proto_event_t *ev = &rep->event;
    const uint32_t ci = ev->choice < OAI_MAX_N ? ev->choice : 0; /* the core checked it < n */
    if (call->kind == REQUEST_CHAT && !st->role_sent[ci]) {
        oai_chunk_t ch = {.index = (int32_t)ci, .role = true, .text = "",
                          .include_usage = st->include_usage};
        api_sse(out, NULL, chunk_json(call, &ch));
        st->role_sent[ci] = true;
    }
    if (!st->answer[ci])
        st->answer[ci] = answer_new(call->tool_names, call->n_tools, call->reasoning);
    answer_end_t end = ev->finish == PROTO_FINISH_NONE ? ANSWER_MORE
                       : api_finish_failed(ev->finish)      ? ANSWER_FAILED
                       : ev->finish == PROTO_FINISH_STOP || ev->finish == PROTO_FINISH_LENGTH
                           ? ANSWER_DONE
                           : ANSWER_FAILED;
    const answer_part_t *parts;
    size_t n = answer_feed(st->answer[ci], ev->text, ev->text_len, end, &parts);
    emit_parts(call, ci, parts, n, ev, out);
    if (ev->finish != PROTO_FINISH_NONE)
        emit_finish(call, ci, ev, out);
    gateway_reply_free(&rep);
}

/* ------------------------------------------------------------------------ */
/* complete bodies                                                           */

/* /v1/embeddings: one EVENT per input (choice = its index) with the vector;
 * usage.prompt_tokens sums the inputs' token counts. */
static char *complete_embeddings(api_call_t *call, gateway_reply_t *const *events, size_t n_events,
                                 int *status)
{
    oai_stream_t *st = call->state;
    const uint32_t n = call->n_choices;
    oai_embedding_t *emb = xcalloc(n ? n : 1, sizeof *emb);
    uint64_t prompt_tokens = 0;
    for (size_t i = 0; i < n_events; i++) {
        const proto_event_t *ev = &events[i]->event;
        if (ev->choice < n && ev->n_embedding) {
            emb[ev->choice].v = ev->embedding;
            emb[ev->choice].dim = ev->n_embedding;
        }
        if (ev->has_usage && ev->finish != PROTO_FINISH_NONE)
            prompt_tokens += ev->usage.prompt_tokens;
    }
    char *body = NULL;
    bool complete = true;
    for (uint32_t i = 0; i < n; i++)
        complete = complete && emb[i].v && emb[i].dim == emb[0].dim;
    if (complete)
        body = oai_embeddings_json(call->model, emb, n, st->base64, prompt_tokens);
    free(emb);
    if (!body) {
        oai_error_t e;
        oai_error_set(&e, 500, NULL, "The worker's embeddings were incomplete or not finite");
        *status = 500;
        return oai_error_json(&e);
    }
    *status = 200;
    return body;
}

/* /tokenize → {"tokens":[ids],"count","max_model_len"}; /detokenize →
 * {"prompt": text} (vLLM's shapes), from the worker's EVENTs. */
static char *complete_tokenizer(api_call_t *call, gateway_reply_t *const *events, size_t n_events,
                                int *status)
{
    json_t *j;
    if (call->op == REQUEST_OP_TOKENIZE) {
        json_t *ids = json_array();
        for (size_t i = 0; i < n_events; i++) {
            const proto_event_t *ev = &events[i]->event;
            for (uint32_t k = 0; k < ev->n_ids; k++)
                json_array_append_new(ids, json_integer(ev->ids[k]));
        }
        j = json_pack("{s:I, s:o, s:I}", "count", (json_int_t)json_array_size(ids), "tokens", ids,
                      "max_model_len", (json_int_t)events[n_events - 1]->n_ctx);
    } else {
        size_t len;
        char *text = api_events_text(events, n_events, &len);
        j = json_pack("{s:s%}", "prompt", text, len);
        free(text);
    }
    *status = 200;
    char *body = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return body;
}

/* One choice's text, logprobs and finish from the events (arrival order). */
typedef struct choice_acc {
    char *text;                   /* (len) + NUL */
    size_t len;
    lp_run_t lp;
    oai_logprobs_t lps;
    const char *finish;           /* NULL while not finished */
    answer_whole_t split;
} choice_acc_t;

static void choice_collect(choice_acc_t *c, uint32_t k, gateway_reply_t *const *events, size_t n_events,
                           bool want_lp, oai_usage_t *u)
{
    size_t len = 0;
    bool any_lp = false;
    for (size_t i = 0; i < n_events; i++) {
        const proto_event_t *ev = &events[i]->event;
        if (ev->choice == k) {
            len += ev->text_len;
            any_lp |= ev->n_logprobs > 0;
        }
    }
    c->text = xmalloc(len + 1);
    for (size_t i = 0; i < n_events; i++) {
        const proto_event_t *ev = &events[i]->event;
        if (ev->choice != k)
            continue;
        memcpy(c->text + c->len, ev->text, ev->text_len);
        c->len += ev->text_len;
        lp_add(&c->lp, ev);
        if (ev->finish != PROTO_FINISH_NONE) {
            oai_usage_t e;
            api_event_usage(ev, &e);
            u->prompt_tokens = e.prompt_tokens;
            u->cached_tokens = e.cached_tokens;
            u->completion_tokens += e.completion_tokens;
            c->finish = finish_name(ev->finish);
        }
    }
    c->text[len] = '\0';
    c->lps = (oai_logprobs_t){.present = want_lp || any_lp, .tokens = c->lp.tok, .n_tokens = c->lp.n};
}

static char *oai_complete(api_call_t *call, gateway_reply_t *const *events, size_t n_events, int *status)
{
    const proto_event_t *last = &events[n_events - 1]->event;
    if (api_finish_failed(last->finish)) {
        oai_error_t e;
        api_event_error(last, &e, call->request_timeout_s);
        *status = e.status;
        return oai_error_json(&e);
    }
    if (call->op == REQUEST_OP_EMBED)
        return complete_embeddings(call, events, n_events, status);
    if (call->op != REQUEST_OP_GENERATE)
        return complete_tokenizer(call, events, n_events, status);
    /* one choice at a time: its events' text and logprobs in arrival order,
     * split into reasoning, content and tool calls */
    const uint32_t n = call->n_choices;
    choice_acc_t *acc = xcalloc(n, sizeof *acc);
    oai_choice_t *ch = xcalloc(n, sizeof *ch);
    oai_usage_t u = {0};
    for (uint32_t k = 0; k < n; k++) {
        choice_acc_t *c = &acc[k];
        choice_collect(c, k, events, n_events, call->want_logprobs, &u);
        bool ended = c->finish && (strcmp(c->finish, "stop") == 0 || strcmp(c->finish, "length") == 0);
        answer_whole_split(c->text, c->len, call->tool_names, call->n_tools, call->reasoning, ended,
                           &c->split);
        /* the message's content: what follows the reasoning (before the calls) */
        ch[k] = (oai_choice_t){c->split.content, c->split.content_len, c->finish, &c->lps};
    }
    oai_meta_t meta = meta_of(call);
    char *body = call->kind == REQUEST_CHAT ? oai_chat_completion_n_json(&meta, ch, n, &u)
                                        : oai_completion_n_json(&meta, ch, n, &u);
    for (uint32_t k = 0; k < n; k++) {
        const answer_whole_t *w = &acc[k].split;
        if (w->has_reasoning)
            body = reasoning_patch(body, k, w->reasoning, w->reasoning_len, false, false);
        if (w->n_calls)
            oai_tools_mark_custom(w->calls, w->n_calls, call->tool_names, call->tool_custom, call->n_tools);
        if (w->n_calls)
            body = oai_tools_patch(body, k, w->content, w->content_len, w->calls, w->n_calls,
                                   answer_whole_ends_in_calls(w), false);
    }
    for (uint32_t k = 0; k < n; k++) {
        lp_clear(&acc[k].lp);
        answer_whole_clear(&acc[k].split);
        free(acc[k].text);
    }
    free(acc);
    free(ch);
    *status = 200;
    return body;
}

const api_surface_t oai_surface = {
    .name = "openai",
    .parse = oai_parse,
    .begin = oai_begin,
    .stream_event = oai_stream_event,
    .complete = oai_complete,
    .error_body = oai_error_body,
    .end = oai_end,
};
