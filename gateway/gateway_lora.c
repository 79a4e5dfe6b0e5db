/* gateway_lora.c — run-time LoRA loads and unloads: the file check (any
 * thread), the HTTP side's wait, and the core's operations waiting for the
 * workers' LORA_ACKs (see gateway_lora.h). */
#include "gateway/gateway_lora.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/chan.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/text/gguf.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/gateway.h"
#include "gateway/gateway_core.h"
#include "gateway/lora_table.h"
#include "gateway/oai.h"
#include "gateway/supervisor.h"

/* One load or unload waiting for its workers. */
typedef struct gateway_lora_op {
    uint64_t seq;                 /* the LORAs' seq */
    gateway_lora_req_t *rq;       /* owned */
    long entry;                   /* its lora table index */
    chan_t *reply;                /* a reference: the HTTP side waits on it */
    int64_t deadline_us;          /* monotonic */
    uint64_t *uids;               /* (n) the workers asked */
    bool *done;                   /* (n) answered (or gone) */
    bool *loaded;                 /* (n) answered "done" */
    size_t n;
    char *error;                  /* the first worker refusal, or NULL */
} gateway_lora_op_t;

/* ---- any thread ---------------------------------------------------------- */

int gateway_lora_check_file(const char *path, oai_error_t *e)
{
    struct stat st;
    if (!path || !*path || strlen(path) > PROTO_MAX_PATH) {
        oai_error_set(e, 400, "path", "The adapter path must be 1..%d bytes.", PROTO_MAX_PATH);
        return -1;
    }
    if (path[0] != '/') {
        oai_error_set(e, 400, "path", "The adapter path '%.300s' must be absolute.", path);
        return -1;
    }
    if (lstat(path, &st) != 0) {
        oai_error_set(e, 400, "path", "The adapter file '%.300s' cannot be found: %s.", path, strerror(errno));
        return -1;
    }
    if (S_ISLNK(st.st_mode)) {
        oai_error_set(e, 400, "path", "The adapter path '%.300s' is a symbolic link; name the file itself.",
                      path);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        oai_error_set(e, 400, "path", "The adapter path '%.300s' is not a regular file.", path);
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        oai_error_set(e, 400, "path", "The adapter file '%.300s' is not readable by the gateway: %s.", path,
                      strerror(errno));
        return -1;
    }
    uint8_t magic[4];
    ssize_t n = read(fd, magic, sizeof magic);
    close(fd);
    if (n != (ssize_t)sizeof magic || memcmp(magic, "GGUF", 4) != 0) {
        oai_error_set(e, 400, "path", "The adapter file '%.300s' is not a GGUF file.", path);
        return -1;
    }
    gguf_t *g = NULL;
    char gerr[200];
    if (gguf_open(path, &g, gerr, sizeof gerr) != 0) {
        oai_error_set(e, 400, "path", "The adapter file '%.300s' is not a valid GGUF file.", path);
        return -1;
    }
    gguf_str_t type = {0};
    bool adapter = gguf_get_str(g, "general.type", &type) == 0 && gguf_str_eq(type, "adapter");
    gguf_close(&g);
    if (!adapter) {
        oai_error_set(e, 400, "path",
                      "The file '%.300s' is not a LoRA adapter (GGUF general.type is not 'adapter': "
                      "a model file?).", path);
        return -1;
    }
    return 0;
}

static void json_item_free(void *p)
{
    json_decref(p);
}

static void req_free(gateway_lora_req_t **rqp)
{
    gateway_lora_req_t *rq = *rqp;
    if (!rq)
        return;
    *rqp = NULL;
    free(rq->model);
    free(rq->name);
    free(rq->path);
    free(rq);
}

static void req_item_free(void *p)
{
    gateway_lora_req_t *rq = p;
    req_free(&rq);
}

static void start_cmd(struct gateway *gw, gateway_cmd_t *cmd);

json_t *gateway_lora_admin(struct gateway *gw, const gateway_lora_req_t *rq)
{
    gateway_cmd_t *cmd = xcalloc(1, sizeof *cmd);
    cmd->kind = GATEWAY_CMD_CALL_LATER;
    cmd->start = start_cmd;
    gateway_lora_req_t *c = xcalloc(1, sizeof *c);
    *c = (gateway_lora_req_t){.load = rq->load, .model = xstrdup(rq->model), .name = xstrdup(rq->name),
                              .path = rq->path ? xstrdup(rq->path) : NULL, .scale = rq->scale};
    cmd->arg = c;
    cmd->arg_free = req_item_free;
    /* the core answers by its own deadline; the margin covers its tick */
    return gateway_ask(gw, cmd, json_item_free, gw->lora_timeout_us + 5000000);
}

/* ---- core ---------------------------------------------------------------- */

static json_t *error_json(int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static json_t *error_json(int status, const char *code, const char *param, const char *fmt, ...)
{
    oai_error_t e;
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset_param(&e, status, param, fmt, ap);
    va_end(ap);
    if (code)
        e.code = code;
    json_t *j = oai_error_object(&e);
    json_object_set_new(j, "status", json_integer(status));
    return j;
}

static void answer(chan_t *reply, json_t *j)
{
    if (chan_push(reply, j) < 0)
        json_decref(j); /* the asker gave up */
}

/* Sends LORA (load when path, else unload) of adapter name to worker uid. */
static void send_lora(struct gateway *gw, uint64_t uid, uint64_t seq, const char *name, const char *path,
                      double scale)
{
    gateway_worker_t *w = gateway_worker_by_uid(gw, uid);
    if (!w)
        return;
    proto_msg_t m;
    proto_msg_init(&m, PROTO_LORA);
    m.lora.seq = seq;
    m.lora.name = (char *)name;
    m.lora.path = (char *)path;
    m.lora.scale = scale;
    gateway_worker_send(gw, w, &m); /* may remove w (its connection closed): then it is gone */
}

/* The spec a local worker is restarted with: "NAME=FILE:SCALE". */
static char *lora_spec(const gateway_lora_req_t *rq)
{
    strbuf_t b = {0};
    strbuf_printf(&b, "%s=%s:%.17g", rq->name, rq->path, rq->scale);
    return strbuf_take(&b);
}

static void op_free(gateway_lora_op_t *op)
{
    req_free(&op->rq);
    chan_unref(&op->reply);
    free(op->uids);
    free(op->done);
    free(op->loaded);
    free(op->error);
}

/* op's workers have all answered, or its deadline passed (timed_out):
 * settle the table and the supervisor, answer, forget op (index i). */
static void op_finish(struct gateway *gw, size_t i, bool timed_out)
{
    gateway_lora_op_t *op = &gw->lora_ops[i];
    const gateway_lora_req_t *rq = op->rq;
    lora_entry_t *e = &gw->loras->e[op->entry];
    size_t n_loaded = 0;
    for (size_t k = 0; k < op->n; k++)
        n_loaded += op->loaded[k];
    json_t *j;
    if (!rq->load) {
        log_info("admin: adapter %s of model %s unloaded (%zu of %zu workers answered)", rq->name, rq->model,
                 n_loaded, op->n);
        j = json_pack("{s:i, s:s, s:s, s:s, s:I}", "status", 200, "object", "lora_adapter", "name", rq->name,
                      "model", rq->model, "unloaded", (json_int_t)n_loaded);
    } else if (!op->error && !timed_out && n_loaded > 0) {
        atomic_store(&e->state, LORA_ENTRY_LIVE);
        if (gw->sup) {
            char *spec = lora_spec(rq);
            supervisor_set_lora(gw->sup, rq->model, rq->name, spec);
            free(spec);
        }
        log_info("admin: adapter %s of model %s loaded from %s on %zu workers", rq->name, rq->model, rq->path,
                 n_loaded);
        j = json_pack("{s:i, s:s, s:s, s:s, s:f, s:I}", "status", 200, "object", "lora_adapter", "name", rq->name,
                      "model", rq->model, "scale", rq->scale, "workers", (json_int_t)n_loaded);
    } else {
        atomic_store(&e->state, LORA_ENTRY_GONE);
        for (size_t k = 0; k < op->n; k++) /* undo where it did load (or may still) */
            if (op->loaded[k] || !op->done[k])
                send_lora(gw, op->uids[k], ++gw->next_lora_seq, rq->name, NULL, 0);
        if (op->error)
            j = error_json(400, "invalid_adapter", "path", "Adapter '%s' was not loaded: %s", rq->name, op->error);
        else if (timed_out)
            j = error_json(504, "timeout", NULL, "The workers of model '%s' did not answer the load of adapter '%s' "
                                                 "within %g s (--lora-timeout).", rq->model, rq->name,
                           (double)gw->lora_timeout_us / 1e6);
        else
            j = error_json(503, "no_replica", NULL, "The workers of model '%s' went away while loading adapter '%s'.",
                           rq->model, rq->name);
        log_info("admin: adapter %s of model %s not loaded: %s", rq->name, rq->model,
                 op->error ? op->error : timed_out ? "timeout" : "workers gone");
    }
    answer(op->reply, j);
    op_free(op);
    gw->lora_ops[i] = gw->lora_ops[--gw->n_lora_ops];
}

/* Starts op on the ready workers of rq->model (local ones only for a load:
 * the path is on our host) that pass `want`; answers at once when none. */
static void op_begin(struct gateway *gw, gateway_lora_req_t **rqp, chan_t *reply, long entry)
{
    gateway_lora_req_t *rq = *rqp;
    vec_reserve(gw->lora_ops, gw->cap_lora_ops, gw->n_lora_ops + 1);
    gateway_lora_op_t *op = &gw->lora_ops[gw->n_lora_ops];
    *op = (gateway_lora_op_t){.seq = ++gw->next_lora_seq, .rq = rq, .entry = entry, .reply = chan_ref(reply),
                              .deadline_us = clock_now_us() + gw->lora_timeout_us};
    *rqp = NULL;
    op->uids = xcalloc(gw->n_workers + 1, sizeof *op->uids);
    for (size_t i = 0; i < gw->n_workers; i++) {
        gateway_worker_t *w = &gw->workers[i];
        if (w->state != GATEWAY_WORKER_READY || strcmp(w->reg.model, rq->model) != 0)
            continue;
        if (rq->load && !gateway_worker_is_local(gw, w))
            continue;
        if (!rq->load && !lora_reg_find(&w->reg, rq->name))
            continue;
        op->uids[op->n++] = w->uid;
    }
    op->done = xcalloc(op->n + 1, sizeof *op->done);
    op->loaded = xcalloc(op->n + 1, sizeof *op->loaded);
    gw->n_lora_ops++;
    size_t n = op->n;
    uint64_t seq = op->seq;
    for (size_t k = 0; k < n; k++) /* a send may remove a worker: the tick sees it gone */
        send_lora(gw, gw->lora_ops[gw->n_lora_ops - 1].uids[k], seq, rq->name, rq->path, rq->scale);
    if (n == 0)
        op_finish(gw, gw->n_lora_ops - 1, false);
}

static void on_ack(struct gateway *gw, gateway_worker_t *w, const proto_lora_op_t *ack);
static void tick(struct gateway *gw, int64_t now);
static void stop(struct gateway *gw);

/* The earliest deadline of the operations in flight (INT64_MAX: none). */
static int64_t wake(const struct gateway *gw)
{
    int64_t t = INT64_MAX;
    for (size_t i = 0; i < gw->n_lora_ops; i++)
        if (gw->lora_ops[i].deadline_us < t)
            t = gw->lora_ops[i].deadline_us;
    return t;
}

/* Starts the operation of a command (takes its request). */
static void start(struct gateway *gw, gateway_lora_req_t **rqp, chan_t *reply)
{
    gateway_lora_req_t *rq = *rqp;
    lora_table_t *t = gw->loras;
    gateway_model_t *m = gateway_model_find(gw, rq->model);
    if (!m) {
        answer(reply, error_json(404, "model_not_found", "model", "The model '%s' does not exist", rq->model));
        req_free(rqp);
        return;
    }
    if (!rq->load) {
        lora_entry_t *e = lora_table_taken(t, rq->name);
        if (!e || strcmp(e->base, rq->model) != 0 || atomic_load(&e->state) != LORA_ENTRY_LIVE) {
            answer(reply, error_json(404, "adapter_not_found", "lora_name",
                                     "Model '%s' has no loaded adapter '%s'.", rq->model, rq->name));
            req_free(rqp);
            return;
        }
        atomic_store(&e->state, LORA_ENTRY_GONE); /* new requests: 404 from now on */
        if (gw->sup)
            supervisor_set_lora(gw->sup, rq->model, rq->name, NULL);
        op_begin(gw, rqp, reply, (long)(e - t->e));
        return;
    }
    if (gateway_model_find(gw, rq->name) || lora_table_taken(t, rq->name)) {
        answer(reply, error_json(400, "adapter_exists", "lora_name",
                                 "The name '%s' is taken by a model or an adapter already.", rq->name));
        req_free(rqp);
        return;
    }
    if (lora_table_count(t, rq->model) >= PROTO_MAX_REG_LORA) {
        answer(reply, error_json(400, "too_many_adapters", "lora_name",
                                 "Model '%s' has %d adapters, the most a worker holds: unload one first.",
                                 rq->model, PROTO_MAX_REG_LORA));
        req_free(rqp);
        return;
    }
    bool any = false;
    for (size_t i = 0; i < gw->n_workers && !any; i++)
        any = gw->workers[i].state == GATEWAY_WORKER_READY && !strcmp(gw->workers[i].reg.model, rq->model) &&
              gateway_worker_is_local(gw, &gw->workers[i]);
    if (!any) {
        answer(reply, error_json(503, "no_replica", NULL,
                                 "Model '%s' has no ready local worker to load adapter '%s' into; start it first.",
                                 rq->model, rq->name));
        req_free(rqp);
        return;
    }
    long entry = lora_table_append(t, rq->name, rq->model, rq->scale, LORA_ENTRY_LOADING);
    if (entry < 0) {
        answer(reply, error_json(400, "too_many_adapters", "lora_name",
                                 "The gateway has loaded %d adapters since it started, its limit; restart it.",
                                 LORA_TABLE_MAX));
        req_free(rqp);
        return;
    }
    op_begin(gw, rqp, reply, entry);
}

static void start_cmd(struct gateway *gw, gateway_cmd_t *cmd)
{
    gw->lora_ack = on_ack;
    gw->lora_tick = tick;
    gw->lora_wake = wake;
    gw->lora_stop = stop;
    gateway_lora_req_t *rq = cmd->arg;
    cmd->arg = NULL;
    start(gw, &rq, cmd->reply);
}

static void on_ack(struct gateway *gw, gateway_worker_t *w, const proto_lora_op_t *ack)
{
    for (size_t i = 0; i < gw->n_lora_ops; i++) {
        gateway_lora_op_t *op = &gw->lora_ops[i];
        if (op->seq != ack->seq)
            continue;
        size_t left = 0;
        for (size_t k = 0; k < op->n; k++) {
            if (op->uids[k] == w->uid && !op->done[k]) {
                op->done[k] = true;
                op->loaded[k] = !ack->message;
                if (ack->message && !op->error)
                    op->error = xstrdup(ack->message);
            }
            left += !op->done[k];
        }
        if (left == 0)
            op_finish(gw, i, false);
        return;
    }
    /* an undo's answer, or one after the timeout */
    if (ack->message)
        log_info("worker %s: LORA %s: %s", w->reg.replica, ack->name, ack->message);
}

static void tick(struct gateway *gw, int64_t now)
{
    for (size_t i = gw->n_lora_ops; i-- > 0;) {
        gateway_lora_op_t *op = &gw->lora_ops[i];
        size_t left = 0;
        for (size_t k = 0; k < op->n; k++) {
            if (!op->done[k] && !gateway_worker_by_uid(gw, op->uids[k]))
                op->done[k] = true; /* gone: a restarted one comes with the current set */
            left += !op->done[k];
        }
        if (left == 0 || now >= op->deadline_us)
            op_finish(gw, i, left > 0);
    }
}

static void stop(struct gateway *gw)
{
    for (size_t i = 0; i < gw->n_lora_ops; i++) {
        answer(gw->lora_ops[i].reply, error_json(503, NULL, NULL, "The gateway is stopping."));
        op_free(&gw->lora_ops[i]);
    }
    free(gw->lora_ops);
    gw->lora_ops = NULL;
    gw->n_lora_ops = gw->cap_lora_ops = 0;
}
