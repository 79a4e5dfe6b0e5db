/* rerank.c — the reranking API surfaces (/v1/rerank in Cohere / Jina shape,
 * vLLM's /v1/score) onto the internal request of op REQUEST_OP_RANK, and the
 * worker's scores back; see rerank.h. */
#include "gateway/rerank.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/xalloc.h"

/* Per-request render state (api_call_t.state). */
typedef struct rerank_state {
    char id[48];                 /* "rerank-…" / "score-…" */
    bool score;                  /* the /v1/score shape */
    rerank_opts_t opts;
    char **docs;                 /* (n_docs) texts, kept only for return_documents */
    size_t n_docs;
} rerank_state_t;

static int bad(oai_error_t *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(oai_error_t *e, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset_param(e, 400, param, fmt, ap);
    va_end(ap);
    return -1;
}

/* A text field: v a string (no NUL, within the bytes left of the request's
 * total) → a malloc'd copy in *out, its length in *len. */
static int take_text(json_t *v, const char *param, size_t *total, char **out, size_t *len, oai_error_t *e)
{
    if (!json_is_string(v))
        return bad(e, param, "'%s' must be a string, got %s.", param, json_is_null(v) ? "null" : "another type");
    size_t n = json_string_length(v);
    if (n > OAI_MAX_TEXT_BYTES - *total)
        return bad(e, param, "The texts are longer than %u bytes in all.", OAI_MAX_TEXT_BYTES);
    if (memchr(json_string_value(v), 0, n))
        return bad(e, param, "'%s' contains a NUL character.", param);
    *total += n;
    *out = xstrndup(json_string_value(v), n);
    *len = n;
    return 0;
}

/* The documents: an array of 1..RERANK_MAX_DOCUMENTS strings or
 * {"text": string} objects (rerank) / strings (score) into o->inputs. */
static int take_documents(json_t *arr, const char *name, bool objects, size_t *total, request_t *o,
                          oai_error_t *e)
{
    if (!arr)
        return bad(e, name, "'%s' is required: the documents to rank.", name);
    if (!json_is_array(arr))
        return bad(e, name, "'%s' must be an array of %s.", name, objects ? "strings or {\"text\": string} objects" : "strings");
    size_t n = json_array_size(arr);
    if (n == 0)
        return bad(e, name, "'%s' must not be empty.", name);
    if (n > RERANK_MAX_DOCUMENTS)
        return bad(e, name, "'%s' has %zu documents; this server ranks at most %d per request.", name, n,
                   RERANK_MAX_DOCUMENTS);
    o->inputs = xcalloc(n, sizeof *o->inputs);
    for (size_t i = 0; i < n; i++) {
        json_t *d = json_array_get(arr, i);
        char param[64];
        snprintf(param, sizeof param, "%s[%zu]", name, i);
        if (objects && json_is_object(d)) {
            json_t *t = json_object_get(d, "text");
            if (!t)
                return bad(e, param, "'%s' is an object without 'text'.", param);
            snprintf(param, sizeof param, "%s[%zu].text", name, i);
            d = t;
        }
        if (take_text(d, param, total, &o->inputs[i].text, &o->inputs[i].text_len, e) < 0)
            return -1;
        o->n_inputs = i + 1;
    }
    return 0;
}

static int parse_model(json_t *root, request_t *o, oai_error_t *e)
{
    json_t *m = json_object_get(root, "model");
    if (!json_is_string(m) || json_string_length(m) == 0 || json_string_length(m) > OAI_MAX_MODEL_BYTES)
        return bad(e, "model", "'model' is required: a string of 1..%d bytes.", OAI_MAX_MODEL_BYTES);
    if (memchr(json_string_value(m), 0, json_string_length(m)))
        return bad(e, "model", "'model' contains a NUL character.");
    o->model = xstrndup(json_string_value(m), json_string_length(m));
    return 0;
}

/* Cohere / Jina: query, documents, top_n, return_documents. */
static int parse_rerank_fields(json_t *root, request_t *o, rerank_opts_t *opts, oai_error_t *e)
{
    size_t total = 0;
    json_t *q = json_object_get(root, "query");
    if (!q)
        return bad(e, "query", "'query' is required: the text the documents are ranked against.");
    if (take_text(q, "query", &total, &o->prompt, &o->prompt_len, e) < 0)
        return -1;
    if (take_documents(json_object_get(root, "documents"), "documents", true, &total, o, e) < 0)
        return -1;
    opts->top_n = (int64_t)o->n_inputs;
    json_t *t = json_object_get(root, "top_n");
    if (t && !json_is_null(t)) {
        if (!json_is_integer(t) || json_integer_value(t) < 1)
            return bad(e, "top_n", "'top_n' must be an integer ≥ 1.");
        if (json_integer_value(t) < opts->top_n)
            opts->top_n = json_integer_value(t);
    }
    json_t *r = json_object_get(root, "return_documents");
    if (r && !json_is_null(r)) {
        if (!json_is_boolean(r))
            return bad(e, "return_documents", "'return_documents' must be a boolean.");
        opts->return_documents = json_is_true(r);
    }
    return 0;
}

/* vLLM: text_1 (one query: a string or a list of one), text_2 (a string or
 * a list). */
static int parse_score_fields(json_t *root, request_t *o, rerank_opts_t *opts, oai_error_t *e)
{
    size_t total = 0;
    json_t *t1 = json_object_get(root, "text_1"), *t2 = json_object_get(root, "text_2");
    if (!t1)
        return bad(e, "text_1", "'text_1' is required: the query (a string, or a list of one).");
    if (json_is_array(t1)) {
        if (json_array_size(t1) != 1)
            return bad(e, "text_1", "'text_1' must be one text (a string or a list of one): this server scores "
                                    "one query against every 'text_2', not %zu pairs.", json_array_size(t1));
        if (take_text(json_array_get(t1, 0), "text_1[0]", &total, &o->prompt, &o->prompt_len, e) < 0)
            return -1;
    } else if (take_text(t1, "text_1", &total, &o->prompt, &o->prompt_len, e) < 0) {
        return -1;
    }
    if (t2 && json_is_string(t2)) {
        o->inputs = xcalloc(1, sizeof *o->inputs);
        if (take_text(t2, "text_2", &total, &o->inputs[0].text, &o->inputs[0].text_len, e) < 0)
            return -1;
        o->n_inputs = 1;
    } else if (take_documents(t2, "text_2", false, &total, o, e) < 0) {
        return -1;
    }
    opts->top_n = (int64_t)o->n_inputs;
    return 0;
}

int rerank_parse(const uint8_t *body, size_t len, bool score, request_t *o, rerank_opts_t *opts,
                 oai_error_t *e)
{
    request_init(o, REQUEST_COMPLETION, REQUEST_OP_RANK);
    memset(opts, 0, sizeof *opts);
    memset(e, 0, sizeof *e);
    json_t *root = oai_load_body(body, len, e);
    if (!root)
        return -1;
    int rc = parse_model(root, o, e);
    if (rc == 0)
        rc = score ? parse_score_fields(root, o, opts, e) : parse_rerank_fields(root, o, opts, e);
    json_decref(root);
    if (rc != 0) {
        request_free(o);
        request_init(o, REQUEST_COMPLETION, REQUEST_OP_RANK);
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* the surfaces                                                              */

static int parse_common(api_call_t *call, const uint8_t *body, size_t len, request_t *o, oai_error_t *e,
                        bool score)
{
    rerank_opts_t opts;
    if (rerank_parse(body, len, score, o, &opts, e) < 0)
        return -1;
    rerank_state_t *st = xcalloc(1, sizeof *st);
    st->score = score;
    st->opts = opts;
    oai_id_new(score ? "score-" : "rerank-", st->id, sizeof st->id);
    call->state = st;
    return 0;
}

static int rerank_parse_call(api_call_t *call, const uint8_t *body, size_t len, request_t *o, oai_error_t *e)
{
    return parse_common(call, body, len, o, e, false);
}

static int score_parse_call(api_call_t *call, const uint8_t *body, size_t len, request_t *o, oai_error_t *e)
{
    return parse_common(call, body, len, o, e, true);
}

/* Keeps a copy of the documents' texts when the answer echoes them. */
static void rerank_begin(api_call_t *call, request_t *o)
{
    rerank_state_t *st = call->state;
    if (!st->opts.return_documents)
        return;
    st->docs = xcalloc(o->n_inputs ? o->n_inputs : 1, sizeof *st->docs);
    st->n_docs = o->n_inputs;
    for (size_t i = 0; i < o->n_inputs; i++) /* copies: the SUBMIT is built from o after begin */
        st->docs[i] = xstrdup(o->inputs[i].text);
}

static void rerank_end(api_call_t *call)
{
    rerank_state_t *st = call->state;
    if (!st)
        return;
    for (size_t i = 0; i < st->n_docs; i++)
        free(st->docs[i]);
    free(st->docs);
    free(st);
    call->state = NULL;
}

/* Never streamed (the parser sets no stream): a reply only ends it. */
static void rerank_stream_event(api_call_t *call, gateway_reply_t *rep, strbuf_t *out)
{
    (void)out;
    gateway_reply_free(&rep);
    call->done = true;
}

static char *dump(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(9));
    json_decref(j);
    if (!s)
        abort(); /* only OOM makes json_dumps fail on a tree we built */
    return s;
}

typedef struct scored {
    size_t index;
    double score;
} scored_t;

/* Highest score first; equal scores keep the documents' order. */
static int by_score(const void *a, const void *b)
{
    const scored_t *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static char *rerank_complete(api_call_t *call, gateway_reply_t *const *events, size_t n_events, int *status)
{
    rerank_state_t *st = call->state;
    oai_error_t e;
    const proto_event_t *last = &events[n_events - 1]->event;
    if (api_finish_failed(last->finish)) {
        api_event_error(last, &e, call->request_timeout_s);
        *status = e.status;
        return oai_error_json(&e);
    }
    /* one EVENT per document (choice = its index): emb[0] is its score */
    const size_t n = call->n_choices;
    scored_t *sc = xcalloc(n ? n : 1, sizeof *sc);
    bool *have = xcalloc(n ? n : 1, sizeof *have);
    int64_t prompt_tokens = 0;
    for (size_t i = 0; i < n_events; i++) {
        const proto_event_t *ev = &events[i]->event;
        if (ev->choice < n && ev->n_embedding && isfinite(ev->embedding[0])) {
            sc[ev->choice] = (scored_t){ev->choice, ev->embedding[0]};
            have[ev->choice] = true;
        }
        if (ev->has_usage && ev->finish != PROTO_FINISH_NONE)
            prompt_tokens += (int64_t)ev->usage.prompt_tokens;
    }
    bool complete = true;
    for (size_t i = 0; i < n; i++)
        complete = complete && have[i];
    free(have);
    if (!complete) {
        free(sc);
        oai_error_set(&e, 500, NULL, "The worker's scores were incomplete or not finite");
        *status = 500;
        return oai_error_json(&e);
    }
    json_t *usage = json_pack("{s:I, s:I}", "prompt_tokens", (json_int_t)prompt_tokens, "total_tokens",
                              (json_int_t)prompt_tokens);
    json_t *root;
    if (st->score) {
        json_object_set_new(usage, "completion_tokens", json_integer(0));
        json_t *data = json_array();
        for (size_t i = 0; i < n; i++)
            json_array_append_new(data, json_pack("{s:I, s:s, s:f}", "index", (json_int_t)i, "object", "score",
                                                  "score", sc[i].score));
        root = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", st->id, "object", "list", "created",
                         (json_int_t)call->created, "model", call->model, "data", data, "usage", usage);
    } else {
        qsort(sc, n, sizeof *sc, by_score);
        json_t *results = json_array();
        for (size_t k = 0; k < n && (int64_t)k < st->opts.top_n; k++) {
            json_t *r = json_pack("{s:I, s:f}", "index", (json_int_t)sc[k].index, "relevance_score", sc[k].score);
            if (st->opts.return_documents && sc[k].index < st->n_docs && st->docs[sc[k].index])
                json_object_set_new(r, "document", json_pack("{s:s}", "text", st->docs[sc[k].index]));
            json_array_append_new(results, r);
        }
        root = json_pack("{s:s, s:s, s:s, s:o, s:o}", "id", st->id, "model", call->model, "object", "list",
                         "usage", usage, "results", results);
    }
    free(sc);
    if (!root)
        abort(); /* json_pack fails only on OOM or invalid UTF-8, which the parser refused */
    *status = 200;
    return dump(root);
}

const api_surface_t rerank_surface = {
    .name = "rerank",
    .parse = rerank_parse_call,
    .begin = rerank_begin,
    .stream_event = rerank_stream_event,
    .complete = rerank_complete,
    .error_body = oai_error_json,
    .end = rerank_end,
};

const api_surface_t score_surface = {
    .name = "score",
    .parse = score_parse_call,
    .begin = rerank_begin,
    .stream_event = rerank_stream_event,
    .complete = rerank_complete,
    .error_body = oai_error_json,
    .end = rerank_end,
};
