/* config.c — the gateway's YAML configuration (see config.h for the format).
 *
 * The file is read with libyaml's event API rather than its document API:
 * events come with the exact position of every key and value, aliases and
 * anchors can be refused as they appear (no alias expansion blow-ups), and the
 * schema is fixed and shallow, so each mapping is parsed by walking a table of
 * field descriptors. The same descriptors drive config_set (flags) and
 * config_format, so the three can never disagree about a key. */
#include "gateway/resp_store.h"
#include "gateway/config.h"
#include "gateway/config_int.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "common/errbuf.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/xalloc.h"
#include "common/image/image.h"
#include "gateway/gateway.h"
#include "gateway/http.h"
#include "gateway/image_fetch.h"
#include "gateway/oai.h"
#include "gateway/prio_queue.h"
#include "gateway/request.h"
#include "gateway/supervisor.h"

/* ---- field descriptors -------------------------------------------------- */

typedef enum {
    K_INT,     /* int, imin..imax */
    K_I64,     /* int64_t, imin..imax */
    K_DOUBLE,  /* double, dmin..dmax */
    K_BOOL,    /* bool */
    K_STR,     /* char *, required non-null */
    K_OPTSTR,  /* char *, null unsets */
    K_LEVEL,   /* int, a log level name */
    K_ENUM,    /* int, index of the value in names[] (NULL-terminated) */
    K_MAP,     /* nested mapping: sub/n_sub at offset */
    K_MODELS,  /* the models list */
    K_LORAS,   /* a model's adapter list (models[].loras) */
} kind_t;

/* Validates a string value; returns 0 or -1 with a reason in why. */
typedef int (*check_fn)(const char *s, char *why, size_t n);

typedef struct field {
    const char *key;
    kind_t kind;
    size_t off;               /* in the struct the table describes */
    int64_t imin, imax;
    double dmin, dmax;
    check_fn check;           /* K_STR / K_OPTSTR, optional */
    const char *const *names; /* K_ENUM */
    const struct field *sub;  /* K_MAP */
    size_t n_sub;
} field_t;


#define INT(k, st, m, lo, hi) {.key = k, .kind = K_INT, .off = offsetof(st, m), .imin = lo, .imax = hi}
#define I64(k, st, m, lo, hi) {.key = k, .kind = K_I64, .off = offsetof(st, m), .imin = lo, .imax = hi}
#define DBL(k, st, m, lo, hi) {.key = k, .kind = K_DOUBLE, .off = offsetof(st, m), .dmin = lo, .dmax = hi}
#define BOOL(k, st, m) {.key = k, .kind = K_BOOL, .off = offsetof(st, m)}
#define STR(k, st, m, fn) {.key = k, .kind = K_STR, .off = offsetof(st, m), .check = fn}
#define OPTSTR(k, st, m, fn) {.key = k, .kind = K_OPTSTR, .off = offsetof(st, m), .check = fn}
#define ENUM(k, st, m, tab) {.key = k, .kind = K_ENUM, .off = offsetof(st, m), .names = tab}
#define MAP(k, st, m, tab) \
    {.key = k, .kind = K_MAP, .off = offsetof(st, m), .sub = tab, .n_sub = sizeof tab / sizeof tab[0]}
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const field_t queue_fields[] = {
    INT("max_per_model", config_queue_t, max_per_model, 1, 1000000),
    DBL("aging_per_s", config_queue_t, aging_per_s, 0.0, 1000.0),
    DBL("default_timeout_s", config_queue_t, default_timeout_s, 0.001, 86400.0),
    DBL("replica_grace_s", config_queue_t, replica_grace_s, 0.001, 86400.0),
    INT("max_redispatch", config_queue_t, max_redispatch, 0, 1000),
};
static const field_t limits_fields[] = {
    I64("max_body_bytes", config_limits_t, max_body_bytes, 1024, 1073741824),
    INT("max_messages", config_limits_t, max_messages, 1, OAI_MAX_MESSAGES),
    I64("max_prompt_bytes", config_limits_t, max_prompt_bytes, 1, OAI_MAX_TEXT_BYTES),
    DBL("rate_per_key", config_limits_t, rate_per_key, 0.0, 1000000.0),
    INT("max_uploads", config_limits_t, max_uploads, 1, 1000000),
    INT("max_uploads_per_ip", config_limits_t, max_uploads_per_ip, 1, 1000000),
};
static const field_t restart_fields[] = {
    INT("backoff_initial_ms", config_restart_t, backoff_initial_ms, 1, 3600000),
    INT("backoff_max_ms", config_restart_t, backoff_max_ms, 1, 3600000),
    INT("crash_loop_restarts", config_restart_t, crash_loop_restarts, 1, SUPERVISOR_MAX_FAIL_RESTARTS),
    DBL("crash_loop_window_s", config_restart_t, crash_loop_window_s, 0.001, 86400.0),
};
static const field_t curve_fields[] = {
    OPTSTR("server_secret_key_file", config_curve_t, server_secret_key_file, config_check_path),
    OPTSTR("authorized_worker_keys_file", config_curve_t, authorized_worker_keys_file, config_check_path),
    BOOL("allow_plain_tcp", config_curve_t, allow_plain_tcp),
};
static const field_t routing_fields[] = {
    ENUM("mode", config_routing_t, mode, route_mode_names), /* gateway/route.h's list */
    INT("max_load_gap", config_routing_t, max_load_gap, 1, 65536),
    INT("index_entries", config_routing_t, index_entries, 1, 67108864),
};
static const field_t images_fields[] = {
    I64("max_bytes", config_images_t, max_bytes, 1, IMAGE_MAX_BYTES_DEFAULT),
    I64("max_pixels", config_images_t, max_pixels, 1, (int64_t)IMAGE_MAX_PIXELS_DEFAULT),
    INT("max_images", config_images_t, max_images, 1, REQUEST_MAX_IMAGES),
    /* remote image URLs (gateway/image_fetch.h) */
    OPTSTR("url_allow", config_images_t, url_allow, config_check_url_allow),
    INT("url_timeout_ms", config_images_t, url_timeout_ms, 1, 600000),
};
/* models[].kv_type, indexed by config_kv_type_t */
static const char *const kv_type_names[] = {"f16", "f32", "auto", "q8_0", NULL};

/* models[].spec: the worker's --spec names (worker/spec.h) */
static const char *const spec_names[] = {"off", "ngram", "draft", NULL};

const char *config_spec_name(int t)
{
    return t == 1 || t == 2 ? spec_names[t] : spec_names[0];
}

const char *config_kv_type_name(int t)
{
    return t >= 0 && t < CONFIG_KV_N ? kv_type_names[t] : "auto";
}

static const field_t model_fields[] = {
    STR("name", config_model_t, name, config_check_name),
    STR("path", config_model_t, path, config_check_path),
    INT("replicas", config_model_t, replicas, 0, 64),
    BOOL("on_demand", config_model_t, on_demand),
    BOOL("standby", config_model_t, standby),
    DBL("idle_timeout_s", config_model_t, idle_timeout_s, 0.001, 604800.0),
    INT("kv_blocks", config_model_t, kv_blocks, 0, 16777216),
    INT("kv_budget_mb", config_model_t, kv_budget_mb, 0, 1048576),
    INT("max_seqs", config_model_t, max_seqs, 1, 4096),
    INT("max_batch_tokens", config_model_t, max_batch_tokens, 1, 65536),
    INT("step_budget_ms", config_model_t, step_budget_ms, -1, 600000),
    INT("threads", config_model_t, threads, 1, 256),
    ENUM("kv_type", config_model_t, kv_type, kv_type_names),
    OPTSTR("kv_cache_dir", config_model_t, kv_cache_dir, config_check_path),
    INT("kv_cache_mb", config_model_t, kv_cache_mb, 1, 1073741824),
    ENUM("spec", config_model_t, spec, spec_names),
    INT("spec_max_draft", config_model_t, spec_max_draft, 1, 16),
    OPTSTR("draft_model", config_model_t, draft_model, config_check_path),
    OPTSTR("mmproj", config_model_t, mmproj, config_check_path),
    {.key = "loras", .kind = K_LORAS, .off = offsetof(config_model_t, loras)},
};
static const field_t lora_fields[] = {
    STR("name", config_lora_t, name, config_check_name),
    STR("file", config_lora_t, file, config_check_path),
    DBL("scale", config_lora_t, scale, -100.0, 100.0),
};
/* reasoning_parser, indexed by reasoning_parser_t (gateway/reasoning.h) */
static const char *const reasoning_parser_names[] = {"none", "qwen3", NULL};

static const field_t top_fields[] = {
    STR("listen", config_t, listen, config_check_listen),
    STR("worker_endpoint", config_t, worker_endpoint, config_check_endpoint),
    INT("heartbeat_ms", config_t, heartbeat_ms, 10, 600000),
    INT("progress_timeout_ms", config_t, progress_timeout_ms, 0, 86400000),
    {.key = "log_level", .kind = K_LEVEL, .off = offsetof(config_t, log_level)},
    OPTSTR("keys_file", config_t, keys_file, config_check_path),
    INT("http_threads", config_t, http_threads, 1, 256),
    DBL("http_idle_timeout_s", config_t, http_idle_timeout_s, 1.0, 86400.0),
    DBL("header_timeout_s", config_t, header_timeout_s, 0.1, 86400.0),
    DBL("body_timeout_s", config_t, body_timeout_s, 0.1, 86400.0),
    I64("body_min_rate", config_t, body_min_rate, 0, 1073741824),
    DBL("body_rate_window_s", config_t, body_rate_window_s, 0.1, 3600.0),
    OPTSTR("allowed_hosts", config_t, allowed_hosts, config_check_hosts),
    OPTSTR("worker_bin", config_t, worker_bin, config_check_path),
    DBL("drain_timeout_s", config_t, drain_timeout_s, 0.0, 86400.0),
    DBL("lora_timeout_s", config_t, lora_timeout_s, 0.1, 86400.0),
    OPTSTR("cors_origins", config_t, cors_origins, config_check_origins),
    BOOL("admin_open", config_t, admin_open),
    BOOL("no_ui", config_t, no_ui),
    ENUM("reasoning_parser", config_t, reasoning_parser, reasoning_parser_names),
    BOOL("keep_volatile_blocks", config_t, keep_volatile_blocks),
    OPTSTR("state_dir", config_t, state_dir, config_check_path),
    DBL("responses_max_age_s", config_t, responses_max_age_s, 1.0, 315360000.0),
    I64("responses_max_bytes", config_t, responses_max_bytes, 4096, 1099511627776LL),
    I64("responses_key_max_bytes", config_t, responses_key_max_bytes, 4096, 1099511627776LL),
    I64("responses_key_max_count", config_t, responses_key_max_count, 1, 2147483647LL),
    I64("responses_store_wait_ms", config_t, responses_store_wait_ms, 1, 600000),
    MAP("queue", config_t, queue, queue_fields),
    MAP("limits", config_t, limits, limits_fields),
    MAP("restart", config_t, restart, restart_fields),
    MAP("curve", config_t, curve, curve_fields),
    MAP("routing", config_t, routing, routing_fields),
    MAP("images", config_t, images, images_fields),
    {.key = "models", .kind = K_MODELS, .off = offsetof(config_t, models)},
};
#define MAX_FIELDS 40 /* entries of the largest table */
_Static_assert(sizeof top_fields / sizeof top_fields[0] <= MAX_FIELDS,
               "MAX_FIELDS: seen_line[] would overflow");

/* ---- defaults ----------------------------------------------------------- */

static void model_defaults(config_model_t *m)
{
    *m = (config_model_t){
        .replicas = 1,
        .on_demand = false,
        .idle_timeout_s = GATEWAY_DEFAULT_IDLE_S,
        .standby = true,
        .kv_blocks = 0,
        .kv_budget_mb = 0, /* sized from memory (worker/kv_budget.h) */
        .max_seqs = 32,
        .max_batch_tokens = 512,
        .step_budget_ms = -1, /* auto (worker/sched.h) */
        .threads = 2,
        .kv_type = CONFIG_KV_AUTO,
        .kv_cache_mb = 4096,
        .spec = 0,
        .spec_max_draft = 8,
    };
}

/* Characters no config string may hold: ASCII and C1 controls, and the
 * Unicode line/paragraph separators and BOM, which YAML folds or drops (a
 * value with them would not read back the same). Returns the offending
 * character's length in bytes at s, or 0. */
static size_t bad_char_at(const unsigned char *s, size_t left)
{
    if (s[0] < 0x20 || s[0] == 0x7f)
        return 1;
    if (left >= 2 && s[0] == 0xc2 && s[1] >= 0x80 && s[1] <= 0x9f)
        return 2;
    if (left >= 3 && s[0] == 0xe2 && s[1] == 0x80 && (s[2] == 0xa8 || s[2] == 0xa9))
        return 3;
    if (left >= 3 && s[0] == 0xef && s[1] == 0xbb && s[2] == 0xbf)
        return 3;
    return 0;
}

static bool is_null_word(const char *s)
{
    return !strcmp(s, "") || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

/* Copies up to 40 bytes of s into out for a message, '?' for controls. */
static const char *shown(const char *s, size_t len, char out[64])
{
    size_t k = 0;
    for (size_t i = 0; i < len && k < 40; i++)
        out[k++] = ((unsigned char)s[i] < 0x20 || s[i] == 0x7f) ? '?' : s[i];
    if (len > 40) {
        memcpy(out + k, "...", 3);
        k += 3;
    }
    out[k] = 0;
    return out;
}

/* Strict integer: [+-]?[0-9]+, no spaces, no other bases. */
static int parse_int(const char *s, int64_t *out)
{
    const char *p = s;
    bool neg = false;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (!*p)
        return -1;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        if (v > (INT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (*p - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

/* Strict decimal float: digits, '.', exponent; no inf/nan/hex. */
static int parse_double(const char *s, double *out)
{
    if (!*s || strspn(s, "0123456789+-.eE") != strlen(s) || !strpbrk(s, "0123456789"))
        return -1;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end || errno == ERANGE || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* Stores one scalar value (s, len; s NUL-terminated at len) into the field at
 * base. `plain` = unquoted YAML. Returns 0, or -1 with a reason in why and
 * nothing changed. */
static int set_scalar(const field_t *f, void *base, const char *s, size_t len, bool plain, char *why,
                      size_t n)
{
    char sh[64];
    void *dst = (char *)base + f->off;
    switch (f->kind) {
    case K_INT:
    case K_I64: {
        int64_t v;
        if (!plain || parse_int(s, &v) != 0 || v < f->imin || v > f->imax) {
            snprintf(why, n, "expected an integer in %lld..%lld, got %s'%s'", (long long)f->imin,
                     (long long)f->imax, plain ? "" : "the quoted string ", shown(s, len, sh));
            return -1;
        }
        if (f->kind == K_INT)
            *(int *)dst = (int)v;
        else
            *(int64_t *)dst = v;
        return 0;
    }
    case K_DOUBLE: {
        double v;
        if (!plain || parse_double(s, &v) != 0 || v < f->dmin || v > f->dmax) {
            snprintf(why, n, "expected a number in %g..%g, got %s'%s'", f->dmin, f->dmax,
                     plain ? "" : "the quoted string ", shown(s, len, sh));
            return -1;
        }
        *(double *)dst = v;
        return 0;
    }
    case K_BOOL: {
        bool t = !strcmp(s, "true") || !strcmp(s, "True") || !strcmp(s, "TRUE");
        bool fl = !strcmp(s, "false") || !strcmp(s, "False") || !strcmp(s, "FALSE");
        if (!plain || (!t && !fl)) {
            snprintf(why, n, "expected true or false, got %s'%s'", plain ? "" : "the quoted string ",
                     shown(s, len, sh));
            return -1;
        }
        *(bool *)dst = t;
        return 0;
    }
    case K_LEVEL: {
        int lv = strlen(s) == len ? log_level_parse(s) : -1;
        if (lv < 0) {
            snprintf(why, n, "expected debug, info, warn or error, got '%s'", shown(s, len, sh));
            return -1;
        }
        *(int *)dst = lv;
        return 0;
    }
    case K_ENUM: {
        for (int i = 0; f->names[i]; i++)
            if (strlen(f->names[i]) == len && !strcmp(f->names[i], s)) {
                *(int *)dst = i;
                return 0;
            }
        char list[128] = "";
        for (int i = 0; f->names[i]; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? " or " : "", f->names[i]);
        snprintf(why, n, "expected %s, got '%s'", list, shown(s, len, sh));
        return -1;
    }
    case K_STR:
    case K_OPTSTR: {
        if (plain && is_null_word(s)) {
            if (f->kind == K_STR) {
                snprintf(why, n, "expected a string, got null");
                return -1;
            }
            free(*(char **)dst);
            *(char **)dst = NULL;
            return 0;
        }
        if (len > CONFIG_MAX_STRING) {
            snprintf(why, n, "longer than %d bytes", CONFIG_MAX_STRING);
            return -1;
        }
        for (size_t i = 0; i < len; i++)
            if (bad_char_at((const unsigned char *)s + i, len - i)) {
                snprintf(why, n, "contains a control or invisible character at byte %zu", i);
                return -1;
            }
        if (f->check && f->check(s, why, n) != 0)
            return -1;
        free(*(char **)dst);
        *(char **)dst = xstrndup(s, len);
        return 0;
    }
    case K_MAP:
    case K_MODELS:
    case K_LORAS:
        break;
    }
    snprintf(why, n, "expected a %s", f->kind == K_MAP ? "mapping" : "list");
    return -1;
}

/* ---- config_t life cycle ------------------------------------------------ */

/* Re-derives listen_host / listen_port from listen (already validated). */
static void derive(config_t *c)
{
    char host[256];
    int port = 0;
    if (config_split_hostport(c->listen, false, 0, host, &port, NULL, 0) == 0) {
        free(c->listen_host);
        c->listen_host = xstrdup(host);
        c->listen_port = port;
    }
}

config_t *config_default(void)
{
    config_t *c = xcalloc(1, sizeof *c);
    c->listen = xstrdup("127.0.0.1:8080");
    c->worker_endpoint = xstrdup("tcp://127.0.0.1:5557");
    c->heartbeat_ms = PROTO_HEARTBEAT_MS;
    c->progress_timeout_ms = PROTO_PROGRESS_TIMEOUT_MS;
    c->log_level = LOG_INFO;
    c->keys_file = NULL;
    c->http_threads = 2;
    c->http_idle_timeout_s = HTTP_DEFAULT_IDLE_TIMEOUT_S;
    c->header_timeout_s = HTTP_DEFAULT_HEADER_TIMEOUT_S;
    c->body_timeout_s = HTTP_DEFAULT_BODY_TIMEOUT_S;
    c->body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE;
    c->body_rate_window_s = HTTP_DEFAULT_BODY_RATE_WINDOW_S;
    c->worker_bin = NULL;
    c->drain_timeout_s = 30;
    c->lora_timeout_s = GATEWAY_DEFAULT_LORA_TIMEOUT_S;
    c->state_dir = NULL; /* gateway_main.c picks the default directory */
    c->responses_max_age_s = RESP_STORE_DEFAULT_MAX_AGE_S;
    c->responses_max_bytes = RESP_STORE_DEFAULT_MAX_BYTES;
    c->responses_key_max_bytes = RESP_STORE_DEFAULT_KEY_MAX_BYTES;
    c->responses_key_max_count = RESP_STORE_DEFAULT_KEY_MAX_COUNT;
    c->responses_store_wait_ms = RESP_STORE_DEFAULT_BUSY_MS;
    /* the queue's own defaults (prio_queue.h, gateway.h), so that a gateway
     * started with or without a file behaves the same */
    prio_queue_config_t q;
    prio_queue_config_default(&q);
    c->queue = (config_queue_t){.max_per_model = GATEWAY_DEFAULT_MAX_QUEUE,
                                .aging_per_s = q.aging_per_s,
                                .default_timeout_s = GATEWAY_DEFAULT_TIMEOUT_S,
                                .replica_grace_s = GATEWAY_DEFAULT_GRACE_S,
                                .max_redispatch = GATEWAY_DEFAULT_MAX_REDISPATCH};
    c->limits = (config_limits_t){.max_body_bytes = CONFIG_DEFAULT_MAX_BODY,
                                  .max_messages = OAI_MAX_MESSAGES,
                                  .max_prompt_bytes = OAI_MAX_TEXT_BYTES,
                                  .rate_per_key = 0.0,
                                  .max_uploads = HTTP_DEFAULT_MAX_UPLOADS,
                                  .max_uploads_per_ip = HTTP_DEFAULT_MAX_UPLOADS_PER_IP};
    c->restart = (config_restart_t){.backoff_initial_ms = SUPERVISOR_BACKOFF_MIN_MS,
                                    .backoff_max_ms = SUPERVISOR_BACKOFF_MAX_MS,
                                    .crash_loop_restarts = SUPERVISOR_FAIL_RESTARTS,
                                    .crash_loop_window_s = SUPERVISOR_FAIL_WINDOW_MS / 1000};
    c->curve = (config_curve_t){.allow_plain_tcp = false};
    c->routing = (config_routing_t){.mode = ROUTE_CACHE_AWARE,
                                    .max_load_gap = ROUTE_DEFAULT_MAX_LOAD_GAP,
                                    .index_entries = PREFIX_INDEX_DEFAULT_ENTRIES};
    c->images = (config_images_t){.max_bytes = IMAGE_MAX_BYTES_DEFAULT,
                                  .max_pixels = (int64_t)IMAGE_MAX_PIXELS_DEFAULT,
                                  .max_images = REQUEST_MAX_IMAGES,
                                  .url_timeout_ms = IMAGE_FETCH_DEFAULT_TIMEOUT_MS};
    derive(c);
    return c;
}

void config_free(config_t **cp)
{
    if (!cp || !*cp)
        return;
    config_t *c = *cp;
    free(c->listen);
    free(c->listen_host);
    free(c->worker_endpoint);
    free(c->keys_file);
    free(c->worker_bin);
    free(c->cors_origins);
    free(c->allowed_hosts);
    free(c->images.url_allow);
    free(c->state_dir);
    free(c->curve.server_secret_key_file);
    free(c->curve.authorized_worker_keys_file);
    for (size_t i = 0; i < c->n_models; i++) {
        free(c->models[i].name);
        free(c->models[i].path);
        free(c->models[i].kv_cache_dir);
        free(c->models[i].draft_model);
        free(c->models[i].mmproj);
        for (size_t j = 0; j < c->models[i].n_loras; j++) {
            free(c->models[i].loras[j].name);
            free(c->models[i].loras[j].file);
        }
        free(c->models[i].loras);
    }
    free(c->models);
    free(c);
    *cp = NULL;
}

const config_model_t *config_model_find(const config_t *c, const char *name)
{
    for (size_t i = 0; i < c->n_models; i++)
        if (c->models[i].name && !strcmp(c->models[i].name, name))
            return &c->models[i];
    return NULL;
}

static config_model_t *model_append(config_t *c)
{
    c->models = xrealloc(c->models, (c->n_models + 1) * sizeof *c->models);
    config_model_t *m = &c->models[c->n_models++];
    model_defaults(m);
    return m;
}

/* ---- parser context ------------------------------------------------------ */

#define PATH_MAX_LEN 64

typedef struct pos {
    char path[PATH_MAX_LEN]; /* "models[3].on_demand" */
    int line, col;           /* 1-based, of the value */
} pos_t;

typedef struct ctx {
    yaml_parser_t parser;
    yaml_event_t ev;         /* the current event, valid while have_ev */
    bool have_ev;
    const uint8_t *buf;
    size_t len;
    const char *src;         /* name in messages */
    char *err;
    size_t errlen;
    pos_t *pos;              /* (n_pos) where each key's value was, for cross-field errors */
    size_t n_pos, cap_pos;
} ctx_t;

static void errf(ctx_t *x, int line, int col, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void errf(ctx_t *x, int line, int col, const char *path, const char *fmt, ...)
{
    if (!x->err || x->errlen == 0)
        return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char where[64] = "";
    if (line > 0)
        snprintf(where, sizeof where, ":%d:%d", line, col);
    snprintf(x->err, x->errlen, "%s%s: %s%s%s", x->src, where, path ? path : "",
             path && *path ? ": " : "", msg);
}

static void err_at(ctx_t *x, yaml_mark_t m, const char *path, const char *msg)
{
    errf(x, (int)m.line + 1, (int)m.column + 1, path, "%s", msg);
}

static void pos_add(ctx_t *x, const char *path, yaml_mark_t m)
{
    if (x->n_pos == x->cap_pos) {
        x->cap_pos = x->cap_pos ? 2 * x->cap_pos : 64;
        x->pos = xrealloc(x->pos, x->cap_pos * sizeof *x->pos);
    }
    pos_t *p = &x->pos[x->n_pos++];
    snprintf(p->path, sizeof p->path, "%s", path);
    p->line = (int)m.line + 1;
    p->col = (int)m.column + 1;
}

static const pos_t *pos_find(const ctx_t *x, const char *path)
{
    for (size_t i = 0; x && i < x->n_pos; i++)
        if (!strcmp(x->pos[i].path, path))
            return &x->pos[i];
    return NULL;
}

/* Advances to the next event. Refuses aliases, anchors and tags here, so no
 * caller has to think about them. */
static int next(ctx_t *x)
{
    if (x->have_ev)
        yaml_event_delete(&x->ev);
    x->have_ev = false;
    if (!yaml_parser_parse(&x->parser, &x->ev)) {
        yaml_parser_t *p = &x->parser;
        int line = (int)p->problem_mark.line + 1, col = (int)p->problem_mark.column + 1;
        if (p->error == YAML_READER_ERROR) {
            /* reader errors carry a byte offset, not a mark */
            size_t off = p->problem_offset < x->len ? p->problem_offset : x->len;
            line = 1;
            col = 1;
            for (size_t i = 0; i < off; i++) {
                if (x->buf[i] == '\n') {
                    line++;
                    col = 1;
                } else if ((x->buf[i] & 0xc0) != 0x80) {
                    col++;
                }
            }
        }
        errf(x, line, col, NULL, "YAML syntax: %s%s%s%s", p->problem ? p->problem : "error",
             p->context ? " (" : "", p->context ? p->context : "", p->context ? ")" : "");
        return -1;
    }
    x->have_ev = true;
    yaml_event_t *e = &x->ev;
    const char *what = NULL;
    if (e->type == YAML_ALIAS_EVENT)
        what = "aliases (*name) are not supported";
    else if ((e->type == YAML_SCALAR_EVENT && e->data.scalar.anchor) ||
             (e->type == YAML_SEQUENCE_START_EVENT && e->data.sequence_start.anchor) ||
             (e->type == YAML_MAPPING_START_EVENT && e->data.mapping_start.anchor))
        what = "anchors (&name) are not supported";
    else if ((e->type == YAML_SCALAR_EVENT && e->data.scalar.tag) ||
             (e->type == YAML_SEQUENCE_START_EVENT && e->data.sequence_start.tag) ||
             (e->type == YAML_MAPPING_START_EVENT && e->data.mapping_start.tag))
        what = "tags (!name) are not supported";
    if (what) {
        err_at(x, e->start_mark, NULL, what);
        return -1;
    }
    return 0;
}

static const char *event_noun(const yaml_event_t *e)
{
    switch (e->type) {
    case YAML_SCALAR_EVENT: return "a scalar";
    case YAML_SEQUENCE_START_EVENT: return "a list";
    case YAML_MAPPING_START_EVENT: return "a mapping";
    default: return "nothing";
    }
}

/* Edit distance, for "did you mean"; inputs are short keys (≤ 64 bytes). */
static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64)
        return 99;
    size_t row[65];
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            if (up + 1 < best)
                best = up + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

static int parse_map(ctx_t *x, const field_t *fields, size_t n_fields, void *base, const char *prefix,
                     int *seen_line);

/* models[i].loras: a list of {name, file, scale}. */
static int parse_loras(ctx_t *x, config_model_t *m, const char *prefix)
{
    for (bool first = true;; first = false) {
        yaml_mark_t at = x->ev.start_mark;
        char path[PATH_MAX_LEN + 24];
        snprintf(path, sizeof path, "%s[%zu]", prefix, m->n_loras);
        if (first ? x->ev.type != YAML_SEQUENCE_START_EVENT : x->ev.type != YAML_MAPPING_START_EVENT) {
            errf(x, (int)at.line + 1, (int)at.column + 1, first ? prefix : path, "expected %s, got %s",
                 first ? "a list of adapters (- name: ...)" : "a mapping (name: ..., file: ...)",
                 event_noun(&x->ev));
            return -1;
        }
        if (!first) {
            if (m->n_loras >= CONFIG_MAX_LORAS) {
                err_at(x, at, path, "too many adapters (CONFIG_MAX_LORAS)");
                return -1;
            }
            m->loras = xrealloc(m->loras, (m->n_loras + 1) * sizeof *m->loras);
            config_lora_t *l = &m->loras[m->n_loras++];
            *l = (config_lora_t){.scale = 1.0};
            int seen[MAX_FIELDS] = {0};
            if (parse_map(x, lora_fields, N_OF(lora_fields), l, path, seen))
                return -1;
            if (!seen[0] || !seen[1]) {
                err_at(x, at, path, seen[0] ? "missing required key 'file'" : "missing required key 'name'");
                return -1;
            }
        }
        if (next(x))
            return -1;
        if (x->ev.type == YAML_SEQUENCE_END_EVENT)
            return 0;
    }
}

static int parse_models(ctx_t *x, config_t *c)
{
    if (x->ev.type != YAML_SEQUENCE_START_EVENT) {
        errf(x, (int)x->ev.start_mark.line + 1, (int)x->ev.start_mark.column + 1, "models",
             "expected a list of models (- name: ...), got %s", event_noun(&x->ev));
        return -1;
    }
    for (;;) {
        if (next(x))
            return -1;
        if (x->ev.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        size_t i = c->n_models;
        char path[32]; /* "models[N]" */
        snprintf(path, sizeof path, "models[%zu]", i);
        yaml_mark_t start = x->ev.start_mark;
        if (x->ev.type != YAML_MAPPING_START_EVENT) {
            errf(x, (int)start.line + 1, (int)start.column + 1, path,
                 "expected a mapping (name: ..., path: ...), got %s", event_noun(&x->ev));
            return -1;
        }
        if (i >= CONFIG_MAX_MODELS) {
            errf(x, (int)start.line + 1, (int)start.column + 1, path, "more than %d models",
                 CONFIG_MAX_MODELS);
            return -1;
        }
        config_model_t *m = model_append(c);
        m->line = (int)start.line + 1;
        int seen[MAX_FIELDS] = {0};
        if (parse_map(x, model_fields, N_OF(model_fields), m, path, seen))
            return -1;
        for (size_t k = 0; k < 2; k++) /* name, path */
            if (!seen[k]) {
                char msg[96];
                snprintf(msg, sizeof msg, "missing required key '%s'", model_fields[k].key);
                err_at(x, start, path, msg);
                return -1;
            }
        for (size_t j = 0; j < i; j++)
            if (!strcmp(c->models[j].name, m->name)) {
                char npath[PATH_MAX_LEN], sh[64];
                snprintf(npath, sizeof npath, "%s.name", path);
                const pos_t *p = pos_find(x, npath);
                errf(x, p ? p->line : 0, p ? p->col : 0, npath,
                     "duplicate model name '%s' (first at line %d)",
                     shown(m->name, strlen(m->name), sh), c->models[j].line);
                return -1;
            }
    }
}

/* The current event is MAPPING_START; consumes through MAPPING_END.
 * seen_line[k] receives the 1-based line of field k, 0 when absent. */
static int parse_map(ctx_t *x, const field_t *fields, size_t n_fields, void *base, const char *prefix,
                     int *seen_line)
{
    for (;;) {
        if (next(x))
            return -1;
        if (x->ev.type == YAML_MAPPING_END_EVENT)
            return 0;
        yaml_mark_t km = x->ev.start_mark;
        if (x->ev.type != YAML_SCALAR_EVENT) {
            char msg[96];
            snprintf(msg, sizeof msg, "expected a key, got %s", event_noun(&x->ev));
            err_at(x, km, prefix, msg);
            return -1;
        }
        const char *key = (const char *)x->ev.data.scalar.value;
        size_t klen = x->ev.data.scalar.length;
        size_t k = 0;
        while (k < n_fields && !(strlen(fields[k].key) == klen && !memcmp(fields[k].key, key, klen)))
            k++;
        if (k == n_fields) {
            char sh[64], hint[96] = "";
            size_t best = 3, bi = 0;
            for (size_t j = 0; j < n_fields && strlen(key) == klen; j++) {
                size_t d = edit_distance(key, fields[j].key);
                if (d < best) {
                    best = d;
                    bi = j;
                }
            }
            if (best < 3)
                snprintf(hint, sizeof hint, " (did you mean '%s'?)", fields[bi].key);
            errf(x, (int)km.line + 1, (int)km.column + 1, prefix, "unknown key '%s'%s",
                 shown(key, klen, sh), hint);
            return -1;
        }
        const field_t *f = &fields[k];
        char path[PATH_MAX_LEN];
        snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", f->key);
        if (seen_line[k]) {
            char msg[96];
            snprintf(msg, sizeof msg, "duplicate key (first at line %d)", seen_line[k]);
            err_at(x, km, path, msg);
            return -1;
        }
        seen_line[k] = (int)km.line + 1;

        if (next(x))
            return -1;
        yaml_event_t *e = &x->ev;
        pos_add(x, path, e->start_mark);
        if (f->kind == K_MAP) {
            if (e->type != YAML_MAPPING_START_EVENT) {
                errf(x, (int)e->start_mark.line + 1, (int)e->start_mark.column + 1, path,
                     "expected a mapping, got %s", event_noun(e));
                return -1;
            }
            int seen[MAX_FIELDS] = {0};
            if (parse_map(x, f->sub, f->n_sub, (char *)base + f->off, path, seen))
                return -1;
        } else if (f->kind == K_MODELS) {
            if (parse_models(x, base))
                return -1;
        } else if (f->kind == K_LORAS) {
            if (parse_loras(x, base, path))
                return -1;
        } else {
            if (e->type != YAML_SCALAR_EVENT) {
                errf(x, (int)e->start_mark.line + 1, (int)e->start_mark.column + 1, path,
                     "expected a single value, got %s", event_noun(e));
                return -1;
            }
            const char *s = (const char *)e->data.scalar.value;
            size_t len = e->data.scalar.length;
            char why[256];
            if (strlen(s) != len) {
                err_at(x, e->start_mark, path, "contains a NUL character");
                return -1;
            }
            if (set_scalar(f, base, s, len, e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE, why,
                           sizeof why)) {
                err_at(x, e->start_mark, path, why);
                return -1;
            }
        }
    }
}

/* ---- cross-field rules ----------------------------------------------------- */

static bool host_is_loopback(const char *host)
{
    if (!strcmp(host, "localhost") || !strcmp(host, "::1"))
        return true;
    unsigned a, b, cc, d;
    char tail;
    return sscanf(host, "%u.%u.%u.%u%c", &a, &b, &cc, &d, &tail) == 4 && a == 127 && b < 256 &&
           cc < 256 && d < 256;
}

/* Reports a rule violation at the first of paths[] that has a position. */
static void cross_err(ctx_t *x, const char *const *paths, size_t n_paths, const char *msg)
{
    for (size_t i = 0; i < n_paths; i++) {
        const pos_t *p = pos_find(x, paths[i]);
        if (p) {
            errf(x, p->line, p->col, paths[i], "%s", msg);
            return;
        }
    }
    errf(x, 0, 0, paths[0], "%s", msg);
}

static int cross_check(const config_t *c, ctx_t *x)
{
    char msg[512];
    if (c->restart.backoff_max_ms < c->restart.backoff_initial_ms) {
        static const char *const p[] = {"restart.backoff_max_ms", "restart.backoff_initial_ms"};
        snprintf(msg, sizeof msg, "must be >= restart.backoff_initial_ms (%d), is %d",
                 c->restart.backoff_initial_ms, c->restart.backoff_max_ms);
        cross_err(x, p, 2, msg);
        return -1;
    }
    bool has_sk = c->curve.server_secret_key_file != NULL;
    bool has_ak = c->curve.authorized_worker_keys_file != NULL;
    if (has_sk != has_ak) {
        static const char *const p1[] = {"curve.authorized_worker_keys_file", "curve"};
        static const char *const p2[] = {"curve.server_secret_key_file", "curve"};
        cross_err(x, has_sk ? p1 : p2, 2,
                  "curve.server_secret_key_file and curve.authorized_worker_keys_file must be set "
                  "together");
        return -1;
    }
    if (!strncmp(c->worker_endpoint, "tcp://", 6) && !has_sk && !c->curve.allow_plain_tcp) {
        char host[256];
        if (config_split_hostport(c->worker_endpoint + 6, true, 1, host, NULL, NULL, 0) == 0 &&
            !host_is_loopback(host)) {
            static const char *const p[] = {"worker_endpoint", "curve.allow_plain_tcp"};
            cross_err(x, p, 2,
                      "a non-loopback tcp endpoint without CURVE lets anyone on the network act "
                      "as a worker; set curve.server_secret_key_file and "
                      "curve.authorized_worker_keys_file, or curve.allow_plain_tcp: true on a "
                      "trusted network");
            return -1;
        }
    }
    for (size_t i = 0; i < c->n_models; i++) {
        const config_model_t *m = &c->models[i];
        if (m->on_demand && m->replicas < 1) {
            char p0[PATH_MAX_LEN], p1[PATH_MAX_LEN];
            snprintf(p0, sizeof p0, "models[%zu].on_demand", i);
            snprintf(p1, sizeof p1, "models[%zu].replicas", i);
            const char *const p[] = {p0, p1};
            cross_err(x, p, 2, "on_demand needs replicas >= 1 (the gateway starts them)");
            return -1;
        }
    }
    for (size_t i = 0; i < c->n_models; i++)
        for (size_t j = 0; j < c->models[i].n_loras; j++) {
            const char *name = c->models[i].loras[j].name;
            const char *clash = config_model_find(c, name) ? "a model's" : NULL;
            for (size_t i2 = 0; !clash && i2 <= i; i2++)
                for (size_t j2 = 0; j2 < (i2 == i ? j : c->models[i2].n_loras); j2++)
                    if (!strcmp(c->models[i2].loras[j2].name, name))
                        clash = "another adapter's";
            char p0[PATH_MAX_LEN], sh[64];
            snprintf(p0, sizeof p0, "models[%zu].loras[%zu].name", i, j);
            snprintf(msg, sizeof msg, "'%s' is already %s name (an adapter is a model name of its own)",
                     shown(name, strlen(name), sh), clash ? clash : "");
            if (clash)
                return cross_err(x, (const char *const[]){p0}, 1, msg), -1;
        }
    return 0;
}

int config_check(const config_t *c, char *err, size_t errlen)
{
    char dummy[1];
    ctx_t x = {.src = "config", .err = err ? err : dummy, .errlen = err ? errlen : sizeof dummy};
    return cross_check(c, &x);
}

/* ---- config_parse / config_load ---------------------------------------------- */

static int parse_doc(ctx_t *x, config_t *c)
{
    if (next(x))
        return -1;
    if (x->ev.type != YAML_STREAM_START_EVENT) {
        err_at(x, x->ev.start_mark, NULL, "YAML syntax: expected a stream");
        return -1;
    }
    if (next(x))
        return -1;
    if (x->ev.type == YAML_STREAM_END_EVENT)
        return 0; /* empty file: all defaults */
    if (next(x)) /* past DOCUMENT_START: the root node */
        return -1;
    yaml_event_t *e = &x->ev;
    if (e->type == YAML_MAPPING_START_EVENT) {
        int seen[MAX_FIELDS] = {0};
        if (parse_map(x, top_fields, N_OF(top_fields), c, "", seen))
            return -1;
    } else if (!(e->type == YAML_SCALAR_EVENT && e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE &&
                 is_null_word((const char *)e->data.scalar.value))) {
        char msg[128];
        snprintf(msg, sizeof msg, "the file must be a mapping of keys (listen:, models:, ...), not %s",
                 event_noun(e));
        err_at(x, e->start_mark, NULL, msg);
        return -1;
    }
    if (next(x)) /* DOCUMENT_END */
        return -1;
    if (next(x))
        return -1;
    if (x->ev.type != YAML_STREAM_END_EVENT) {
        err_at(x, x->ev.start_mark, NULL, "only one YAML document is allowed");
        return -1;
    }
    return 0;
}

int config_parse(const uint8_t *buf, size_t len, const char *source, config_t **out, char *err,
                 size_t errlen)
{
    char dummy[1];
    ctx_t x = {
        .buf = buf,
        .len = len,
        .src = source ? source : "config",
        .err = err ? err : dummy,
        .errlen = err ? errlen : sizeof dummy,
    };
    x.err[0] = 0;
    *out = NULL;
    if (len > CONFIG_MAX_BYTES) {
        errf(&x, 0, 0, NULL, "larger than %u bytes", CONFIG_MAX_BYTES);
        return -1;
    }
    if (!yaml_parser_initialize(&x.parser)) {
        errf(&x, 0, 0, NULL, "cannot initialise the YAML parser");
        return -1;
    }
    /* libyaml reads from a const-less pointer but does not write through it */
    yaml_parser_set_input_string(&x.parser, len ? buf : (const unsigned char *)"", len);
    config_t *c = config_default();
    int rc = parse_doc(&x, c);
    if (rc == 0) {
        derive(c);
        rc = cross_check(c, &x);
    }
    if (x.have_ev)
        yaml_event_delete(&x.ev);
    yaml_parser_delete(&x.parser);
    free(x.pos);
    if (rc != 0) {
        config_free(&c);
        return -1;
    }
    *out = c;
    return 0;
}

int config_load(const char *path, config_t **out, char *err, size_t errlen)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        errbuf_set(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = xmalloc(CONFIG_MAX_BYTES + 1);
    size_t n = fread(buf, 1, CONFIG_MAX_BYTES + 1, f);
    int bad = ferror(f);
    fclose(f);
    int rc = -1;
    if (bad) {
        errbuf_set(err, errlen, "%s: read error", path);
    } else if (n > CONFIG_MAX_BYTES) {
        errbuf_set(err, errlen, "%s: larger than %u bytes", path, CONFIG_MAX_BYTES);
    } else {
        rc = config_parse(buf, n, path, out, err, errlen);
    }
    free(buf);
    return rc;
}

/* ---- flags ---------------------------------------------------------------- */

int config_set(config_t *c, const char *key, const char *value, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    const field_t *tab = top_fields;
    size_t n_tab = N_OF(top_fields);
    void *base = c;
    const char *k = key;
    const char *dot = strchr(k, '.');
    const field_t *f = NULL;
    for (;;) {
        size_t kl = dot ? (size_t)(dot - k) : strlen(k);
        f = NULL;
        for (size_t i = 0; i < n_tab; i++)
            if (strlen(tab[i].key) == kl && !memcmp(tab[i].key, k, kl))
                f = &tab[i];
        if (!f) {
            errbuf_set(err, errlen, "--%s: unknown configuration key", key);
            return -1;
        }
        if (!dot || f->kind != K_MAP)
            break;
        base = (char *)base + f->off;
        tab = f->sub;
        n_tab = f->n_sub;
        k = dot + 1;
        dot = strchr(k, '.');
    }
    if (dot || f->kind == K_MAP || f->kind == K_MODELS) {
        errbuf_set(err, errlen, "--%s: not a single value%s", key,
                   f->kind == K_MODELS ? " (use --model NAME=PATH)" : "");
        return -1;
    }
    char why[256];
    if (set_scalar(f, base, value, strlen(value), true, why, sizeof why)) {
        errbuf_set(err, errlen, "--%s: %s", key, why);
        return -1;
    }
    if (!strcmp(key, "listen"))
        derive(c);
    return 0;
}

int config_model_set(config_t *c, const char *arg, char *err, size_t errlen)
{
    char dummy[1], why[256];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    const char *eq = strchr(arg, '=');
    if (!eq) {
        errbuf_set(err, errlen, "--model: expected NAME=PATH");
        return -1;
    }
    size_t nl = (size_t)(eq - arg);
    if (nl > CONFIG_MAX_NAME) {
        errbuf_set(err, errlen, "--model: a model name has 1..%d characters", CONFIG_MAX_NAME);
        return -1;
    }
    char name[CONFIG_MAX_NAME + 1];
    memcpy(name, arg, nl);
    name[nl] = 0;
    if (config_check_name(name, why, sizeof why)) {
        errbuf_set(err, errlen, "--model: %s", why);
        return -1;
    }
    /* validate the path with the same rules as the file, into a scratch model */
    config_model_t tmp;
    model_defaults(&tmp);
    tmp.path = NULL;
    const char *path = eq + 1;
    if (set_scalar(&model_fields[1], &tmp, path, strlen(path), false, why, sizeof why)) {
        errbuf_set(err, errlen, "--model %s: %s", name, why);
        return -1;
    }
    config_model_t *m = (config_model_t *)config_model_find(c, name);
    if (!m) {
        if (c->n_models >= CONFIG_MAX_MODELS) {
            free(tmp.path);
            errbuf_set(err, errlen, "--model: more than %d models", CONFIG_MAX_MODELS);
            return -1;
        }
        m = model_append(c);
        m->name = xstrdup(name);
        m->line = 0;
    }
    free(m->path);
    m->path = tmp.path;
    return 0;
}

int config_models_set(config_t *c, const char *model, const char *key, const char *value,
                      char *err, size_t errlen)
{
    char dummy[1], why[256];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    const field_t *f = NULL;
    for (size_t i = 0; i < N_OF(model_fields); i++)
        if (!strcmp(model_fields[i].key, key))
            f = &model_fields[i];
    /* an optional string (a path: mmproj) only on a named model */
    if (!f || f->kind == K_STR || f->kind == K_LORAS || (f->kind == K_OPTSTR && !model)) {
        errbuf_set(err, errlen, "--models.%s: not a per-model setting", key);
        return -1;
    }
    /* validate once into a scratch model, so a bad value fails even with no
     * models and nothing changes on error */
    config_model_t tmp;
    model_defaults(&tmp);
    if (set_scalar(f, &tmp, value, strlen(value), true, why, sizeof why)) {
        errbuf_set(err, errlen, "--models.%s: %s", key, why);
        return -1;
    }
    if (f->kind == K_OPTSTR)
        free(*(char **)((char *)&tmp + f->off));
    if (model && !config_model_find(c, model)) {
        errbuf_set(err, errlen, "--models.%s: no model called '%s'", key, model);
        return -1;
    }
    for (size_t i = 0; i < c->n_models; i++)
        if (!model || !strcmp(c->models[i].name, model))
            set_scalar(f, &c->models[i], value, strlen(value), true, why, sizeof why);
    return 0;
}

int config_lora_add(config_t *c, const char *model, const char *spec, char *err, size_t errlen)
{
    char dummy[1], why[256];
    err = err && errlen ? err : dummy;
    errlen = err == dummy ? sizeof dummy : errlen;
    config_model_t *m = model ? (config_model_t *)config_model_find(c, model)
                        : c->n_models ? &c->models[c->n_models - 1] : NULL;
    const char *eq = strchr(spec, '='), *colon = eq ? strrchr(eq + 1, ':') : NULL;
    if (!m || !eq || eq == spec || !eq[1] || m->n_loras >= CONFIG_MAX_LORAS) {
        errbuf_set(err, errlen, "--lora %s: %s", spec,
                   !m ? "no --model before it" : m->n_loras >= CONFIG_MAX_LORAS ? "too many adapters"
                                                                                : "expected NAME=FILE[:SCALE]");
        return -1;
    }
    /* FILE[:SCALE]: a last ':' followed by a number is the scale */
    char *end = NULL;
    if (colon && (!colon[1] || (strtod(colon + 1, &end), *end)))
        colon = NULL;
    char *v[3] = {xstrndup(spec, (size_t)(eq - spec)),
                  xstrndup(eq + 1, colon ? (size_t)(colon - eq - 1) : strlen(eq + 1)), xstrdup(colon ? colon + 1 : "1")};
    config_lora_t l = {0};
    int rc = 0;
    for (size_t k = 0; k < 3 && !rc; k++)
        if ((rc = set_scalar(&lora_fields[k], &l, v[k], strlen(v[k]), true, why, sizeof why)))
            errbuf_set(err, errlen, "--lora %s: %s: %s", spec, lora_fields[k].key, why);
    if (!rc) {
        m->loras = xrealloc(m->loras, (m->n_loras + 1) * sizeof *m->loras);
        m->loras[m->n_loras++] = l;
    } else {
        free(l.name);
        free(l.file);
    }
    free(v[0]), free(v[1]), free(v[2]);
    return rc ? -1 : 0;
}

/* ---- config_format ------------------------------------------------------------ */

/* A double-quoted YAML string. Values never hold control characters (checked
 * on the way in), so only \ and " need escaping. */
static void put_yaml_quoted(strbuf_t *b, const char *s)
{
    strbuf_printf(b, "\"");
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            strbuf_putc(b, '\\');
        strbuf_putc(b, *s);
    }
    strbuf_printf(b, "\"");
}

static void format_fields(strbuf_t *b, const field_t *fields, size_t n, const void *base, int indent,
                          const config_t *c)
{
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    for (size_t i = 0; i < n; i++) {
        const field_t *f = &fields[i];
        const void *v = (const char *)base + f->off;
        strbuf_printf(b, "%*s%s:", indent, "", f->key);
        switch (f->kind) {
        case K_INT: strbuf_printf(b, " %d\n", *(const int *)v); break;
        case K_I64: strbuf_printf(b, " %lld\n", (long long)*(const int64_t *)v); break;
        case K_DOUBLE: {
            /* shortest spelling that reads back to the same double */
            double d = *(const double *)v;
            char tmp[40];
            if (d == floor(d) && fabs(d) < 1e15) {
                snprintf(tmp, sizeof tmp, "%.0f", d); /* 600, not 6e+02 */
            } else {
                for (int prec = 1; prec <= 17; prec++) {
                    snprintf(tmp, sizeof tmp, "%.*g", prec, d);
                    if (strtod(tmp, NULL) == d)
                        break;
                }
            }
            strbuf_printf(b, " %s\n", tmp);
            break;
        }
        case K_BOOL: strbuf_printf(b, " %s\n", *(const bool *)v ? "true" : "false"); break;
        case K_LEVEL: {
            int lv = *(const int *)v;
            strbuf_printf(b, " %s\n", lv >= 0 && lv < 4 ? levels[lv] : "info");
            break;
        }
        case K_ENUM: strbuf_printf(b, " %s\n", f->names[*(const int *)v]); break;
        case K_STR:
        case K_OPTSTR: {
            const char *s = *(char *const *)v;
            if (s) {
                strbuf_printf(b, " ");
                put_yaml_quoted(b, s);
                strbuf_printf(b, "\n");
            } else {
                strbuf_printf(b, " null\n");
            }
            break;
        }
        case K_MAP:
            strbuf_printf(b, "\n");
            format_fields(b, f->sub, f->n_sub, v, indent + 2, c);
            break;
        case K_MODELS:
            if (c->n_models == 0) {
                strbuf_printf(b, " []\n");
                break;
            }
            strbuf_printf(b, "\n");
            for (size_t m = 0; m < c->n_models; m++) {
                strbuf_printf(b, "%*s-\n", indent + 2, "");
                format_fields(b, model_fields, N_OF(model_fields), &c->models[m], indent + 4, c);
            }
            break;
        case K_LORAS: {
            const config_model_t *m = base;
            strbuf_printf(b, m->n_loras ? "\n" : " []\n");
            for (size_t j = 0; j < m->n_loras; j++) {
                strbuf_printf(b, "%*s-\n", indent + 2, "");
                format_fields(b, lora_fields, N_OF(lora_fields), &m->loras[j], indent + 4, c);
            }
            break;
        }
        }
    }
}

char *config_format(const config_t *c, size_t *len)
{
    strbuf_t b = STRBUF_INIT;
    strbuf_reserve(&b, 1024);
    strbuf_printf(&b, "# pagoda-gateway configuration (every key, effective values)\n");
    format_fields(&b, top_fields, N_OF(top_fields), c, 0, c);
    if (len)
        *len = b.len;
    return strbuf_take(&b);
}
