/* http_routes.c — the HTTP route table (a line per route: method, path,
 * handler or API surface, authorization, kind, batch, op) and the handlers
 * of the routes that are not an API surface: /health, /metrics, /v1/models
 * (the core's plain list rendered by the OpenAI surface, oai_models_json),
 * the stored-response routes, the operations API (with run-time LoRA
 * adapters and vLLM's names for them) and the web console.
 * Generation routes name their surface and run in http.c. */
#include "gateway/http_routes.h"

#include <assert.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/xalloc.h"
#include "gateway/anthropic.h"
#include "gateway/gateway_lora.h"
#include "gateway/model_name.h"
#include "gateway/http_guard.h"
#include "gateway/http_respond.h"
#include "gateway/oai.h"
#include "gateway/oai_stream.h"
#include "gateway/rerank.h"
#include "gateway/resp_store.h"
#include "gateway/responses.h"
#include "gateway/snapshot.h"
#include "gateway/ui.h"

/* ---- handlers ---------------------------------------------------------- */

static enum MHD_Result handle_health(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    json_t *j = gateway_health(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!j)
        return http_respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    if (s->keys_path && !http_may_read_metrics(s, c)) {
        /* with keys, cumulative counters are /metrics' (docs/SECURITY.md):
         * they move with other tenants' requests */
        static const char *const counters[] = {"prefix_cache_queries", "prefix_cache_hits", "tokens_generated",
                                               "prompt_tokens"};
        size_t i;
        json_t *w;
        json_array_foreach(json_object_get(j, "workers"), i, w) {
            json_t *load = json_object_get(w, "load");
            for (size_t k = 0; json_is_object(load) && k < sizeof counters / sizeof *counters; k++)
                json_object_del(load, counters[k]);
        }
    }
    bool ok = json_array_size(json_object_get(j, "workers")) > 0;
    return http_respond_json(s, c, ok ? 200 : 503, j);
}

static enum MHD_Result handle_metrics(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    char *text = gateway_metrics_text(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!text)
        return http_respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    return http_respond_text(s, c, 200, text, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

static enum MHD_Result handle_models(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    gateway_model_list_t *l = gateway_models(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!l)
        return http_respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    const lora_table_t *lt = s->gw->loras;
    size_t n_lora = atomic_load(&lt->n); /* it may grow meanwhile (run-time loads) */
    oai_model_info_t *info = xcalloc(l->n + n_lora + 1, sizeof *info);
    int64_t created = clock_wall_s();
    size_t n = 0;
    for (size_t i = 0; i < l->n; i++) {
        info[n++] = (oai_model_info_t){.id = l->models[i].name, .created = created, .owned_by = "pagoda",
                                       .max_model_len = l->models[i].n_ctx};
        for (size_t j = 0; j < n_lora; j++) /* its adapters: model names of their own */
            if (atomic_load(&lt->e[j].state) == LORA_ENTRY_LIVE && !strcmp(lt->e[j].base, l->models[i].name))
                info[n++] = (oai_model_info_t){.id = lt->e[j].name, .created = created, .owned_by = "pagoda",
                                               .max_model_len = l->models[i].n_ctx};
    }
    char *text = oai_models_json(info, n);
    free(info);
    gateway_model_list_free(&l);
    return http_respond_text(s, c, 200, http_with_newline(text), "application/json", NULL, NULL);
}

/* llama-server's GET /lora-adapters: [{"id", "path", "scale"}], id = the
 * index llama.cpp's per-request `lora` names. "path" is the adapter's name,
 * not its file: the server's file layout is not the clients' business. */
static enum MHD_Result handle_lora_adapters(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    const lora_table_t *lt = s->gw->loras;
    json_t *a = json_array();
    size_t n_lora = atomic_load(&lt->n);
    for (size_t i = 0; i < n_lora; i++)
        if (atomic_load(&lt->e[i].state) == LORA_ENTRY_LIVE) /* ids stay the table's indexes */
            json_array_append_new(a, json_pack("{s:I, s:s, s:f, s:s}", "id", (json_int_t)i, "path", lt->e[i].name,
                                           "scale", lt->e[i].scale, "model", lt->e[i].base));
    return http_respond_json(s, c, 200, a);
}

static enum MHD_Result handle_reload_keys(http_server_t *s, struct MHD_Connection *c,
                                          http_req_t *req)
{
    char err[512];
    if (http_server_reload_keys(s, err, sizeof err) < 0)
        return http_respond_error(s, c, 400, NULL, NULL, "%s", err);
    pthread_rwlock_rdlock(&s->keys_lock);
    size_t n = keys_count(s->keys);
    pthread_rwlock_unlock(&s->keys_lock);
    return http_respond_json(s, c, 200, json_pack("{s:b, s:I}", "reloaded", 1, "keys", (json_int_t)n));
}

/* The stored-response routes (responses.h); the caller sees only its own. */
static enum MHD_Result respond_stored(http_server_t *s, struct MHD_Connection *c, http_req_t *req,
                                      responses_op_t op)
{
    const char *order = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "order");
    const char *stream = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "stream");
    if (op == RESPONSES_GET && stream && strcmp(stream, "true") == 0) {
        oai_error_t e;
        oai_error_set(&e, 400, "stream", "Replaying a stored response as a stream is not supported; "
                                         "GET it without 'stream'.");
        return http_respond_oai_error(s, c, &e, NULL);
    }
    int status = 500;
    char *body = responses_stored(s->responses, req->owner, req->param, op, order && strcmp(order, "asc") == 0,
                                  &status);
    return http_respond_text(s, c, (unsigned)status, http_with_newline(body), "application/json", NULL, NULL);
}

static enum MHD_Result handle_responses_get(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    return respond_stored(s, c, req, RESPONSES_GET);
}

static enum MHD_Result handle_responses_delete(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    return respond_stored(s, c, req, RESPONSES_DELETE);
}

static enum MHD_Result handle_responses_items(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    return respond_stored(s, c, req, RESPONSES_INPUT_ITEMS);
}

/* The core's answer to an operations command: {"status": N, ...}. */
static enum MHD_Result respond_admin(http_server_t *s, struct MHD_Connection *c, json_t *j)
{
    if (!j)
        return http_respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    json_int_t status = json_integer_value(json_object_get(j, "status"));
    json_object_del(j, "status");
    return http_respond_json(s, c, status >= 200 && status <= 599 ? (unsigned)status : 500, j);
}

static enum MHD_Result handle_admin_workers(http_server_t *s, struct MHD_Connection *c,
                                            http_req_t *req)
{
    return respond_admin(s, c, gateway_admin(s->gw, GATEWAY_ADMIN_WORKERS, NULL, SNAPSHOT_TIMEOUT_US));
}

static enum MHD_Result handle_admin_drain(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    return respond_admin(s, c, gateway_admin(s->gw, GATEWAY_ADMIN_DRAIN, req->param, SNAPSHOT_TIMEOUT_US));
}

static enum MHD_Result handle_admin_restart(http_server_t *s, struct MHD_Connection *c,
                                            http_req_t *req)
{
    return respond_admin(s, c, gateway_admin(s->gw, GATEWAY_ADMIN_RESTART, req->param, SNAPSHOT_TIMEOUT_US));
}

static enum MHD_Result handle_admin_restart_model(http_server_t *s, struct MHD_Connection *c,
                                                  http_req_t *req)
{
    return respond_admin(s, c, gateway_admin(s->gw, GATEWAY_ADMIN_RESTART_MODEL, req->param,
                                             SNAPSHOT_TIMEOUT_US));
}

static enum MHD_Result handle_admin_start_model(http_server_t *s, struct MHD_Connection *c,
                                                http_req_t *req)
{
    return respond_admin(s, c, gateway_admin(s->gw, GATEWAY_ADMIN_START_MODEL, req->param,
                                             SNAPSHOT_TIMEOUT_US));
}

static enum MHD_Result handle_admin_stop_model(http_server_t *s, struct MHD_Connection *c,
                                               http_req_t *req)
{
    return respond_admin(s, c, gateway_admin(s->gw, GATEWAY_ADMIN_STOP_MODEL, req->param,
                                             SNAPSHOT_TIMEOUT_US));
}

/* ---- run-time LoRA adapters (gateway/gateway_lora.h) ---- */

/* The JSON object body of req, or NULL with a 400 in *e (oai_load_body: the
 * API bodies' own checks: depth, duplicate keys, an object). */
static json_t *body_object(http_req_t *req, oai_error_t *e)
{
    return oai_load_body((const uint8_t *)req->body, req->body ? req->body_len : 0, e);
}

/* A string member key of j (NULL when absent); -1 with a 400 when it is
 * there but not a string. */
static int body_str(json_t *j, const char *key, const char **out, oai_error_t *e)
{
    json_t *v = json_object_get(j, key);
    *out = json_string_value(v);
    if (v && !json_is_string(v)) {
        oai_error_set(e, 400, key, "'%s' must be a string.", key);
        return -1;
    }
    return 0;
}

/* Runs a load or unload and answers: the core's JSON, or vLLM's plain
 * "Success: ..." text on its routes. */
static enum MHD_Result admin_lora_run(http_server_t *s, struct MHD_Connection *c, const gateway_lora_req_t *rq,
                                bool vllm)
{
    json_t *j = gateway_lora_admin(s->gw, rq);
    if (!j)
        return http_respond_error(s, c, 504, "timeout", NULL, "The gateway core did not answer in time");
    json_int_t status = json_integer_value(json_object_get(j, "status"));
    if (vllm && status == 200) {
        json_decref(j);
        char text[PROTO_MAX_NAME + 80];
        snprintf(text, sizeof text, "Success: LoRA adapter '%s' %s successfully.", rq->name,
                 rq->load ? "added" : "removed");
        return http_respond_text(s, c, 200, xstrdup(text), "text/plain; charset=utf-8", NULL, NULL);
    }
    return respond_admin(s, c, j);
}

/* vLLM's load names no base model: "base_model_name" (ours) picks one, else
 * the gateway's only model; with several and none named: 400. 0 with
 * model[PROTO_MAX_NAME + 1] set, or -1 with *e. */
static int vllm_base(http_server_t *s, json_t *body, char *model, oai_error_t *e)
{
    const char *base;
    if (body_str(body, "base_model_name", &base, e) < 0)
        return -1;
    if (base) {
        snprintf(model, PROTO_MAX_NAME + 1, "%s", base);
        return 0;
    }
    gateway_model_list_t *l = gateway_models(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!l) {
        oai_error_set(e, 503, NULL, "The gateway core did not answer");
        return -1;
    }
    size_t n = l->n;
    if (n == 1)
        snprintf(model, PROTO_MAX_NAME + 1, "%s", l->models[0].name);
    gateway_model_list_free(&l);
    if (n != 1) {
        oai_error_set(e, 400, "base_model_name",
                      "The gateway serves %zu models: name the adapter's base model in 'base_model_name'.", n);
        return -1;
    }
    return 0;
}

/* A load: the body's name, path and scale checked on the HTTP thread (the
 * file too), then the core's operation. vllm: vLLM's keys and base model. */
static enum MHD_Result admin_lora_load(http_server_t *s, struct MHD_Connection *c, http_req_t *req, bool vllm)
{
    oai_error_t e;
    json_t *body = body_object(req, &e);
    if (!body)
        return http_respond_oai_error(s, c, &e, NULL);
    const char *name_key = vllm ? "lora_name" : "name", *path_key = vllm ? "lora_path" : "path";
    const char *name, *path;
    char why[128], model[PROTO_MAX_NAME + 1];
    if (!vllm)
        snprintf(model, sizeof model, "%.*s", PROTO_MAX_NAME, req->param);
    else if (vllm_base(s, body, model, &e) < 0)
        goto bad;
    if (body_str(body, name_key, &name, &e) < 0 || body_str(body, path_key, &path, &e) < 0)
        goto bad;
    if (!name || model_name_check(name, why, sizeof why) != 0) {
        oai_error_set(&e, 400, name_key, "'%s': %s.", name_key, name ? why : "required (the adapter's model name)");
        goto bad;
    }
    if (!path) {
        oai_error_set(&e, 400, path_key, "'%s' is required: the adapter's GGUF file on the gateway's host.",
                      path_key);
        goto bad;
    }
    json_t *sv = json_object_get(body, "scale");
    double scale = sv ? json_number_value(sv) : 1.0;
    if (sv && (!json_is_number(sv) || !(scale >= -100 && scale <= 100))) {
        oai_error_set(&e, 400, "scale", "'scale' must be a number in [-100, 100].");
        goto bad;
    }
    if (gateway_lora_check_file(path, &e) != 0)
        goto bad;
    gateway_lora_req_t rq = {.load = true, .model = model, .name = (char *)name, .path = (char *)path,
                             .scale = scale};
    enum MHD_Result r = admin_lora_run(s, c, &rq, vllm);
    json_decref(body);
    return r;
bad:
    json_decref(body);
    return http_respond_oai_error(s, c, &e, NULL);
}

/* POST /admin/models/{model}/loras {"name", "path", "scale"} */
static enum MHD_Result handle_lora_load(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    return admin_lora_load(s, c, req, false);
}

/* DELETE /admin/models/{model}/loras/{name} (param "model/name") */
static enum MHD_Result handle_lora_unload(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    char *model = req->param, *name = strchr(req->param, '/');
    assert(name); /* route_match joined the two segments with '/' */
    *name++ = '\0';
    gateway_lora_req_t rq = {.load = false, .model = model, .name = name};
    return admin_lora_run(s, c, &rq, false);
}

/* vLLM's POST /v1/load_lora_adapter {"lora_name", "lora_path"} */
static enum MHD_Result handle_vllm_load(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    return admin_lora_load(s, c, req, true);
}

/* vLLM's POST /v1/unload_lora_adapter {"lora_name"}: the adapter's base
 * model is the table's. */
static enum MHD_Result handle_vllm_unload(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    oai_error_t e;
    json_t *body = body_object(req, &e);
    if (!body)
        return http_respond_oai_error(s, c, &e, NULL);
    const char *name;
    int rc = body_str(body, "lora_name", &name, &e);
    if (rc == 0 && !name) {
        oai_error_set(&e, 400, "lora_name", "'lora_name' is required.");
        rc = -1;
    }
    if (rc < 0) {
        json_decref(body);
        return http_respond_oai_error(s, c, &e, NULL);
    }
    const lora_entry_t *le = lora_table_find(s->gw->loras, name);
    if (!le) {
        oai_error_set(&e, 404, "lora_name", "No loaded adapter is called '%.300s'.", name);
        e.code = "adapter_not_found";
        json_decref(body);
        return http_respond_oai_error(s, c, &e, NULL);
    }
    gateway_lora_req_t rq = {.load = false, .model = le->base, .name = (char *)name};
    enum MHD_Result r = admin_lora_run(s, c, &rq, true);
    json_decref(body);
    return r;
}

/* The web console (ui.h): /ui/ and /ui/NAME are files of its table (a name
 * not in it is the usual 404), /ui redirects to /ui/. */
static enum MHD_Result handle_ui(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    unsigned status = 200;
    struct MHD_Response *r = ui_response(
        req->param, MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
        &status);
    if (!r) {
        oai_error_t e;
        oai_error_set(&e, 404, NULL, "Invalid URL (GET /ui/%.300s)", req->param);
        e.type = "invalid_request_error";
        e.code = "not_found";
        return http_respond_oai_error(s, c, &e, NULL);
    }
    return http_queue(s, c, status, r);
}

static enum MHD_Result handle_ui_redirect(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    struct MHD_Response *r = ui_redirect();
    return r ? http_queue(s, c, 308, r) : MHD_NO;
}

/* ---- the table --------------------------------------------------------- */

static const route_t routes[] = {
    {"GET", "/health", handle_health, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/metrics", handle_metrics, AUTH_METRICS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/v1/models", handle_models, AUTH_KEY, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/lora-adapters", handle_lora_adapters, AUTH_KEY, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/v1/chat/completions", NULL, AUTH_KEY, REQUEST_CHAT, false, REQUEST_OP_GENERATE,
     &oai_surface},
    {"POST", "/v1/completions", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_GENERATE,
     &oai_surface},
    {"POST", "/v1/batch/chat/completions", NULL, AUTH_KEY, REQUEST_CHAT, true, REQUEST_OP_GENERATE,
     &oai_surface},
    {"POST", "/v1/batch/completions", NULL, AUTH_KEY, REQUEST_COMPLETION, true, REQUEST_OP_GENERATE,
     &oai_surface},
    {"POST", "/v1/embeddings", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_EMBED,
     &oai_surface},
    {"POST", "/v1/rerank", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &rerank_surface},
    {"POST", "/rerank", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &rerank_surface},
    {"POST", "/v2/rerank", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &rerank_surface},
    {"POST", "/v1/reranking", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &rerank_surface},
    {"POST", "/reranking", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &rerank_surface},
    {"POST", "/v1/score", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &score_surface},
    {"POST", "/score", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_RANK, &score_surface},
    {"POST", "/tokenize", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_TOKENIZE,
     &oai_surface},
    {"POST", "/detokenize", NULL, AUTH_KEY, REQUEST_COMPLETION, false, REQUEST_OP_DETOKENIZE,
     &oai_surface},
    {"POST", "/v1/messages", NULL, AUTH_KEY, REQUEST_CHAT, false, REQUEST_OP_GENERATE, &anthropic_surface},
    {"POST", "/v1/messages/count_tokens", NULL, AUTH_KEY, REQUEST_CHAT, false, REQUEST_OP_TOKENIZE,
     &anthropic_surface},
    {"POST", "/v1/responses", NULL, AUTH_KEY, REQUEST_CHAT, false, REQUEST_OP_GENERATE, &responses_surface},
    {"GET", "/v1/responses/*", handle_responses_get, AUTH_KEY, 0, false, REQUEST_OP_GENERATE, NULL},
    {"DELETE", "/v1/responses/*", handle_responses_delete, AUTH_KEY, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/v1/responses/*/input_items", handle_responses_items, AUTH_KEY, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/reload-keys", handle_reload_keys, AUTH_ADMIN, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/admin/workers", handle_admin_workers, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/workers/*/drain", handle_admin_drain, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/workers/*/restart", handle_admin_restart, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/models/*/restart", handle_admin_restart_model, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/models/*/start", handle_admin_start_model, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/models/*/stop", handle_admin_stop_model, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/admin/models/*/loras", handle_lora_load, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"DELETE", "/admin/models/*/loras/*", handle_lora_unload, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/v1/load_lora_adapter", handle_vllm_load, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"POST", "/v1/unload_lora_adapter", handle_vllm_unload, AUTH_OPS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/ui", handle_ui_redirect, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/ui/", handle_ui, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/ui/*", handle_ui, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* Matches url against a route path where each '*' stands for one non-empty
 * path segment (no '/'); the segments go to param joined by '/' (param_len
 * bytes, else no match). */
static bool route_match(const char *pattern, const char *url, char *param, size_t param_len)
{
    size_t n_param = 0;
    param[0] = '\0';
    for (;;) {
        const char *star = strchr(pattern, '*');
        if (!star)
            return strcmp(pattern, url) == 0;
        size_t pre = (size_t)(star - pattern);
        if (strncmp(pattern, url, pre) != 0)
            return false;
        const char *seg = url + pre, *slash = strchr(seg, '/');
        size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
        size_t sep = n_param ? 1 : 0;
        if (n == 0 || n_param + sep + n >= param_len)
            return false;
        if (sep)
            param[n_param++] = '/';
        memcpy(param + n_param, seg, n);
        n_param += n;
        param[n_param] = '\0';
        pattern = star + 1;
        url = seg + n;
    }
}

const route_t *http_route_find(const http_server_t *s, const char *method, const char *url, http_req_t *q,
                               bool *path_known)
{
    /* HEAD is GET without a body; libmicrohttpd drops the body itself */
    const char *m = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0 ? MHD_HTTP_METHOD_GET : method;
    *path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++) {
        const route_t *r = &routes[i];
        if ((!s->ui && (r->fn == handle_ui || r->fn == handle_ui_redirect)) ||
            !route_match(r->path, url, q->param, sizeof q->param))
            continue;
        if (strcmp(r->method, m) == 0)
            return r;
        *path_known = true;
        size_t n = strlen(q->allow);
        snprintf(q->allow + n, sizeof q->allow - n, "%s%s%s", n ? ", " : "", r->method,
                 strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
    }
    return NULL;
}
