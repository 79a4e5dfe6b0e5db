/* fuzz_rerank.c — libFuzzer target for the reranking surfaces' parser and
 * renderer (gateway/rerank.h).
 *
 * Input layout (seeds in tests/fuzz/corpus/rerank/):
 *   byte 0     bit 0: the /v1/score shape (text_1 / text_2), else /v1/rerank
 *   bytes 1..  the HTTP request body
 *
 * Beyond ASan/UBSan it checks: a refusal is -1 with status 400, nothing left
 * to free, and an error body that is valid JSON; an accepted request is op
 * rank, kind completion, with a model, a query and 1..RERANK_MAX_DOCUMENTS
 * text documents, and 1 ≤ top_n ≤ their number; the surface's complete body,
 * rendered from one EVENT per document whose score is drawn from the body's
 * bytes, is valid JSON with top_n results (rerank) or one per document
 * (score). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/xalloc.h"
#include "gateway/rerank.h"

static void must_be_json(char *s)
{
    json_t *j = json_loads(s, 0, NULL);
    if (!j)
        __builtin_trap();
    json_decref(j);
    free(s);
}

/* The complete body for n documents; returns the number of entries in its
 * results / data. */
static size_t render(const api_surface_t *api, request_t *o, const uint8_t *data, size_t size)
{
    api_call_t call = {.kind = REQUEST_COMPLETION, .op = REQUEST_OP_RANK, .created = 1};
    if (api->parse(&call, data, size, o, &(oai_error_t){0}) != 0)
        __builtin_trap(); /* the same body parsed once already */
    call.n_choices = (uint32_t)o->n_inputs; /* as http.c sets them after parse */
    call.model = o->model;
    api->begin(&call, o);
    size_t n = o->n_inputs;
    gateway_reply_t **ev = xcalloc(n, sizeof *ev);
    for (size_t i = 0; i < n; i++) {
        ev[i] = xcalloc(1, sizeof *ev[i]);
        ev[i]->kind = GATEWAY_REPLY_EVENT;
        ev[i]->event.choice = (uint32_t)(n - 1 - i); /* arrival order differs from the index */
        ev[i]->event.finish = PROTO_FINISH_STOP;
        ev[i]->event.n_embedding = 1;
        ev[i]->event.embedding = xmalloc(sizeof(float));
        ev[i]->event.embedding[0] = (float)data[i % size] / 7.0f - 10.0f;
        ev[i]->event.has_usage = true;
        ev[i]->event.usage.prompt_tokens = 3;
    }
    int status = 0;
    char *body = api->complete(&call, ev, n, &status);
    if (status != 200)
        __builtin_trap();
    json_t *j = json_loads(body, 0, NULL);
    if (!j)
        __builtin_trap();
    json_t *arr = json_object_get(j, "results");
    if (!arr)
        arr = json_object_get(j, "data");
    size_t got = json_array_size(arr);
    json_decref(j);
    free(body);
    for (size_t i = 0; i < n; i++)
        gateway_reply_free(&ev[i]);
    free(ev);
    api->end(&call);
    return got;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const bool score = data[0] & 1;
    request_t r;
    rerank_opts_t opts;
    oai_error_t err;
    int rc = rerank_parse(data + 1, size - 1, score, &r, &opts, &err);
    if (rc != 0) {
        if (rc != -1 || err.status != 400 || r.model || r.prompt || r.inputs)
            __builtin_trap();
        must_be_json(oai_error_json(&err));
        return 0;
    }
    if (r.op != REQUEST_OP_RANK || r.kind != REQUEST_COMPLETION || !r.model || !r.prompt || r.n_inputs < 1 ||
        r.n_inputs > RERANK_MAX_DOCUMENTS || opts.top_n < 1 || opts.top_n > (int64_t)r.n_inputs)
        __builtin_trap();
    for (size_t i = 0; i < r.n_inputs; i++)
        if (!r.inputs[i].text || r.inputs[i].ids)
            __builtin_trap();
    const size_t n = r.n_inputs;
    const int64_t top_n = opts.top_n;
    request_free(&r);
    /* through the surface, as http.c drives it */
    request_t o;
    size_t got = render(score ? &score_surface : &rerank_surface, &o, data + 1, size - 1);
    request_free(&o);
    if (got != (score ? n : (size_t)top_n))
        __builtin_trap();
    return 0;
}
