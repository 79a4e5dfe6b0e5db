/* http.c — libmicrohttpd daemon, route table, authorization, and the
 * transport side of generation requests: an API surface (api_surface.h;
 * OpenAI's is oai_stream.c) parses the body and renders the core's replies,
 * while this file owns the connection — suspend/resume instead of blocked
 * threads, SSE bytes handed to libmicrohttpd, the hang-up watcher for
 * suspended connections (see http.h). */
#include "gateway/http.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/anthropic.h"
#include "gateway/api_surface.h"
#include "gateway/gateway.h"
#include "gateway/snapshot.h"
#include "gateway/keys.h"
#include "gateway/oai.h"
#include "gateway/oai_stream.h"
#include "gateway/partition.h"
#include "gateway/reasoning.h"
#include "gateway/request_image.h"
#include "gateway/rerank.h"
#include "gateway/resp_store.h"
#include "gateway/responses.h"
#include "gateway/ui.h"

#define HTTP_DEFAULT_MAX_BODY (16u << 20)
#define SNAPSHOT_TIMEOUT_US 2000000
#define HTTP_IMAGE_ASK_US 1000000    /* the core tells whether a model reads images */
#define WATCH_MAX 8192              /* connections the watcher polls at once */
/* descriptors kept out of the HTTP connection limit: ZeroMQ sockets and its
 * internal pipes, worker pipes, log and keys files */
#define FD_HEADROOM 256

typedef struct http_req http_req_t;

/* One TCP connection, from MHD_CONNECTION_NOTIFY_STARTED to _CLOSED, for
 * the deadlines the watcher enforces (libmicrohttpd's own timeout restarts
 * at every byte, so a client dripping one byte a second would hold its
 * connection forever):
 *   - headers: a connection whose first request's headers are not complete
 *     header_timeout_us after it opened is shut down;
 *   - body: while a request's body is arriving (`uploading`, an upload slot
 *     held) it must be complete body_timeout_us after the headers and bring
 *     body_min_rate bytes/s over each window of body_window_us. */
typedef struct http_conn {
    int fd;
    int64_t t_open_us;          /* monotonic */
    bool headers_done;          /* [conn_lock] on_request ran for it */
    bool shut;                  /* [conn_lock] shutdown() already called */
    struct http_conn *prev, *next;
    uint8_t addr[16];           /* the client: IPv4 (4 bytes), or the /64 of IPv6 (8 bytes), */
    uint8_t addr_len;           /* compared for max_uploads_per_ip; 0 = unknown */
    /* [conn_lock] the body of the current request */
    bool uploading;             /* in s->uploads, holding an upload slot */
    int64_t t_body_us;          /* its headers were complete (monotonic) */
    uint64_t n_body;            /* body bytes received */
    int64_t t_window_us;        /* the current rate window began */
    uint64_t n_window;          /* n_body when it began */
    struct http_conn *up_prev, *up_next; /* in s->uploads */
} http_conn_t;

struct http_server {
    struct MHD_Daemon *daemon;
    struct gateway *gw;         /* borrowed */
    size_t max_body;
    size_t max_messages, max_prompt_bytes; /* http_config_t; 0 = off */
    uint16_t port;

    /* API keys; NULL path = open gateway */
    char *keys_path;
    pthread_rwlock_t keys_lock; /* guards keys */
    keys_t *keys;

    /* generation requests in flight, for the hang-up watcher and shutdown */
    pthread_mutex_t live_lock;  /* guards live, stopping */
    http_req_t *live;           /* doubly linked */
    bool stopping;
    pthread_t watcher;
    bool watcher_started;

    /* per-key rate limit: one token bucket per key name, grown on demand
     * (a keys file holds a bounded number of keys) */
    double rate_per_key;        /* tokens per second, 0 = off */
    pthread_mutex_t rate_lock;  /* guards buckets */
    struct rate_bucket {
        char name[KEYS_NAME_MAX + 1];
        double tokens;          /* available requests, <= max(1, rate) */
        int64_t t_us;           /* last refill, monotonic */
    } *buckets;
    size_t n_buckets, cap_buckets;

    /* open connections, for the header and body deadlines */
    pthread_mutex_t conn_lock;  /* guards conns, uploads and their flags */
    http_conn_t *conns;         /* doubly linked */
    int64_t header_timeout_us;
    http_conn_t *uploads;       /* the connections holding an upload slot (n_uploads) */
    unsigned n_uploads, max_uploads, max_uploads_per_ip;
    int64_t body_timeout_us, body_window_us;
    uint64_t body_min_rate;     /* bytes/s, 0 = off */

    /* the Host check (http_host_allowed); read-only after start */
    char *listen_host;          /* HOST of the listen address, without brackets */
    char *allowed_hosts;        /* allowed_hosts as configured, NULL = none */

    /* browsers (http.h "Browser safety"); read-only after start */
    char **cors;                /* (n_cors) allowed Origin values, as configured */
    size_t n_cors;
    bool cors_any;              /* "*" was listed: every origin is allowed */
    bool admin_open;            /* ops routes open without a keys file */
    reasoning_parser_t reasoning; /* --reasoning-parser */
    bool keep_volatile;         /* --keep-volatile-blocks (volatile_block.h) */
    resp_store_t *responses;    /* stored responses (borrowed), NULL = none */
    bool ui;                    /* the web console is served (not --no-ui) */
};

/* AUTH_OPS: an admin key when a keys file is loaded, open otherwise (an open
 * gateway trusts whoever reaches it; AUTH_ADMIN routes make no sense without
 * keys and answer 403). AUTH_METRICS: with a keys file, a key flagged admin
 * or metrics (counters move with other tenants' requests: docs/SECURITY.md);
 * open without one. */
typedef enum { AUTH_NONE, AUTH_KEY, AUTH_ADMIN, AUTH_OPS, AUTH_METRICS } auth_t;

typedef enum MHD_Result (*http_handler_fn)(http_server_t *s, struct MHD_Connection *c,
                                           http_req_t *req);

typedef struct route {
    const char *method;
    const char *path;
    http_handler_fn fn;
    auth_t auth;
    request_kind_t kind;            /* generation routes */
    bool batch;                 /* the /v1/batch routes: tier low */
    request_op_t op;                /* /tokenize, /detokenize: the tokenizer alone */
    const api_surface_t *surface; /* generation routes (fn NULL): the API's translation */
} route_t;

/* Per-request state, made on the first callback of a request and freed by
 * request_completed(). Fields marked [lock] are guarded by greq->lock (the
 * core's notify hook and the watcher touch them). */
struct http_req {
    http_server_t *s;
    struct MHD_Connection *conn;
    /* what the headers decided (admit), on libmicrohttpd's first call */
    bool path_ctl;              /* the raw path holds a control byte (%00-%1f, %7f) */
    bool path_long;             /* the raw request target is over HTTP_MAX_URL */
    bool headers_seen;          /* admit ran */
    bool refused;               /* answer `refusal` (in err_surface's shape) on the final call */
    bool preflight;             /* answer the CORS preflight on the final call */
    char allow[128];            /* the path's methods (405, preflight) */
    oai_error_t refusal;
    const api_surface_t *err_surface; /* the route's API, NULL = OpenAI's */
    const struct route *route;  /* admitted: the route to run */
    bool keyed;                 /* a valid key came with it (authorize) */
    http_conn_t *upload;        /* holding an upload slot on this connection, else NULL */
    char *body;                 /* (body_len) + NUL, NULL when empty */
    size_t body_len, body_cap;  /* cap grows ×2: uploads arrive in small chunks */
    bool too_large;             /* body exceeded max_body: answer 413 */
    char param[512];            /* the path segment a route's '*' matched */
    prio_tier_t tier;           /* from the key */
    uint64_t partition;         /* prefix-cache partition of the key (gateway/partition.h),
                                   PARTITION_PUBLIC without keys */
    char owner[65];             /* the key's SHA-256 in hex, RESP_STORE_ANON without keys:
                                   who owns the responses it stores */

    /* generation */
    gateway_request_t *greq;    /* NULL until submitted */
    http_req_t *prev, *next;    /* in s->live while greq is set */
    int fd;                     /* the connection's socket, for the watcher */
    bool suspended;             /* [lock] we called MHD_suspend_connection */
    bool gone;                  /* [lock] client hung up / server stopping */
    bool woken;                 /* [lock] the surface's own work finished (api_surface.h
                                   "Waiting"); cleared when taken */
    bool finished;              /* the last reply was taken */
    const api_surface_t *surface; /* the route's API (api_surface.h); NULL = OpenAI's */
    api_call_t call;            /* what the surface renders from; call.state is its own */
    bool began;                 /* surface->parse succeeded: surface->end must run */
    /* non-streaming: every EVENT reply until the last */
    gateway_reply_t **events;
    size_t n_events, cap_events;
    uint32_t n_finished;        /* choices whose final EVENT came */
    /* streaming: bytes not yet handed to libmicrohttpd, from out_off */
    api_buf_t out;
    size_t out_off;
};

/* ------------------------------------------------------------------------ */
/* responses                                                                 */

static bool origin_allowed(const http_server_t *s, const char *origin);

static enum MHD_Result queue(http_server_t *s, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r)
{
    /* an answer to an allowed browser origin lets that page read it; a
     * refused origin (403) gets no CORS header, so the page sees nothing */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && origin_allowed(s, origin)) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", origin);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
    }
    if (s->n_cors)
        MHD_add_response_header(r, "Vary", "Origin");
    char code[8];
    snprintf(code, sizeof code, "%u", status);
    metrics_counter_add(s->gw->m.http_responses, (const char *[]){code}, 1);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Sends `text` (malloc'd, taken) with the given status and content type, and
 * an X-Pagoda-Warning when warning is set (what the request left out,
 * api_call_t.warning). */
static enum MHD_Result respond_text_warn(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                         char *text, const char *type, const char *allow,
                                         const char *retry_after, const char *warning)
{
    if (!text)
        return MHD_NO;
    size_t n = strlen(text);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    if (retry_after)
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, retry_after);
    if (warning)
        MHD_add_response_header(r, "X-Pagoda-Warning", warning);
    return queue(s, c, status, r);
}

/* respond_text_warn without a warning. */
static enum MHD_Result respond_text(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                    char *text, const char *type, const char *allow,
                                    const char *retry_after)
{
    return respond_text_warn(s, c, status, text, type, allow, retry_after, NULL);
}

/* A JSON body plus one trailing newline (readable curl output). */
static char *with_newline(char *text)
{
    if (!text)
        return NULL;
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}

static enum MHD_Result respond_json(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                    json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return respond_text(s, c, status, with_newline(text), "application/json", NULL, NULL);
}

/* An error in the shape of `api` (NULL = OpenAI's, for routes of no surface). */
static enum MHD_Result respond_api_error(http_server_t *s, struct MHD_Connection *c,
                                         const api_surface_t *api, const oai_error_t *e,
                                         const char *allow)
{
    char *body = api ? api->error_body(e) : oai_error_json(e);
    return respond_text(s, c, (unsigned)e->status, with_newline(body), "application/json", allow,
                        e->status == 429 ? "1" : NULL);
}

static enum MHD_Result respond_oai_error(http_server_t *s, struct MHD_Connection *c,
                                         const oai_error_t *e, const char *allow)
{
    return respond_api_error(s, c, NULL, e, allow);
}

static enum MHD_Result respond_error(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *allow, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result respond_error(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *allow, const char *fmt, ...)
{
    oai_error_t e;
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset(&e, (int)status, code, fmt, ap);
    va_end(ap);
    return respond_oai_error(s, c, &e, allow);
}

/* ------------------------------------------------------------------------ */
/* API keys                                                                  */

int http_server_reload_keys(http_server_t *s, char *err, size_t err_len)
{
    char buf[512];
    if (!s->keys_path) {
        snprintf(buf, sizeof buf, "no keys file: the gateway runs without API keys");
        goto fail;
    }
    keys_t *k = NULL;
    if (keys_load(s->keys_path, &k, buf, sizeof buf) < 0)
        goto fail;
    pthread_rwlock_wrlock(&s->keys_lock);
    keys_t *old = s->keys;
    s->keys = k;
    pthread_rwlock_unlock(&s->keys_lock);
    keys_free(&old); /* lookups copy what they need under the read lock */
    log_info("loaded %zu API keys from %s", keys_count(k), s->keys_path);
    return 0;
fail:
    log_error("keys not (re)loaded: %s", buf);
    errbuf_set(err, err_len, "%s", buf);
    return -1;
}

/* Takes one request from key `name`'s bucket. Returns 0, or the whole
 * seconds until a token is back (>= 1) when the bucket is empty. */
static int rate_take(http_server_t *s, const char *name)
{
    double burst = s->rate_per_key > 1 ? s->rate_per_key : 1;
    int64_t now = clock_now_us();
    pthread_mutex_lock(&s->rate_lock);
    struct rate_bucket *b = NULL;
    for (size_t i = 0; i < s->n_buckets && !b; i++)
        if (strcmp(s->buckets[i].name, name) == 0)
            b = &s->buckets[i];
    if (!b) {
        vec_reserve(s->buckets, s->cap_buckets, s->n_buckets + 1);
        b = &s->buckets[s->n_buckets++];
        snprintf(b->name, sizeof b->name, "%s", name);
        b->tokens = burst;
        b->t_us = now;
    }
    b->tokens += (double)(now - b->t_us) / 1e6 * s->rate_per_key;
    if (b->tokens > burst)
        b->tokens = burst;
    b->t_us = now;
    int wait = 0;
    if (b->tokens >= 1) {
        b->tokens -= 1;
    } else {
        double secs = (1 - b->tokens) / s->rate_per_key;
        wait = (int)secs + 1;
    }
    pthread_mutex_unlock(&s->rate_lock);
    return wait;
}

/* The key a request carries: "Authorization: Bearer KEY" (OpenAI), or
 * "x-api-key: KEY" (Anthropic's SDKs); NULL when none. */
static const char *request_key(struct MHD_Connection *c)
{
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tok = NULL;
    if (h && strncasecmp(h, "Bearer ", 7) == 0)
        tok = h + 7;
    else if (!h)
        tok = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "x-api-key");
    while (tok && *tok == ' ')
        tok++;
    return tok;
}

/* With keys on: does the request carry a key that may read /metrics (admin
 * or metrics)? Routes open to anyone (/health) show their counters only then. */
static bool request_may_read_metrics(http_server_t *s, struct MHD_Connection *c)
{
    const char *tok = request_key(c);
    if (!tok)
        return false;
    pthread_rwlock_rdlock(&s->keys_lock);
    const keys_entry_t *k = keys_lookup(s->keys, tok);
    bool may = k && k->metrics;
    pthread_rwlock_unlock(&s->keys_lock);
    return may;
}

/* Checks the bearer key for a route. Returns 0 (tier set in q), or -1 with
 * *e filled (401/403, or 429 when the key is over its rate limit). */
static int authorize(http_server_t *s, struct MHD_Connection *c, const route_t *rt, http_req_t *q,
                     oai_error_t *e)
{
    q->tier = PRIO_TIER_NORMAL;
    q->partition = PARTITION_PUBLIC;
    snprintf(q->owner, sizeof q->owner, "%s", RESP_STORE_ANON);
    if (rt->auth == AUTH_NONE || (rt->auth == AUTH_METRICS && !s->keys_path))
        return 0;
    if (!s->keys_path) {
        if (rt->auth == AUTH_ADMIN) {
            oai_error_set(e, 403, NULL, "Admin endpoints need a keys file with an admin key "
                                        "(pagoda-gateway --keys FILE)");
            return -1;
        }
        if (rt->auth == AUTH_OPS && !s->admin_open) {
            oai_error_set(e, 403, NULL, "Operations endpoints need a keys file with an admin key "
                                        "(pagoda-gateway --keys FILE), or --admin-open to serve "
                                        "them without keys");
            return -1;
        }
        return 0; /* AUTH_OPS with --admin-open: open gateway */
    }
    /* the key, on every route */
    const char *tok = request_key(c);
    if (!tok) {
        oai_error_set(e, 401, NULL, "You didn't provide an API key. Send it as "
                                    "'Authorization: Bearer YOUR_KEY' (or 'x-api-key: YOUR_KEY').");
        return -1;
    }
    bool found = false, admin = false, metrics = false;
    char name[KEYS_NAME_MAX + 1] = "";
    pthread_rwlock_rdlock(&s->keys_lock);
    const keys_entry_t *k = keys_lookup(s->keys, tok);
    if (k) {
        found = true;
        q->keyed = true;
        admin = k->admin;
        metrics = k->metrics;
        q->tier = k->tier;
        q->partition = k->partition;
        snprintf(name, sizeof name, "%s", k->name);
        for (int i = 0; i < 32; i++)
            snprintf(q->owner + 2 * i, 3, "%02x", k->sha256[i]);
    }
    pthread_rwlock_unlock(&s->keys_lock);
    if (!found) {
        oai_error_set(e, 401, NULL, "Incorrect API key provided.");
        return -1;
    }
    if ((rt->auth == AUTH_ADMIN || rt->auth == AUTH_OPS) && !admin) {
        oai_error_set(e, 403, NULL, "This key may not use admin endpoints");
        return -1;
    }
    if (rt->auth == AUTH_METRICS && !metrics) {
        oai_error_set(e, 403, NULL, "This key may not read /metrics (keys-file flag 'metrics' or 'admin')");
        return -1;
    }
    int wait;
    if (rt->auth == AUTH_KEY && s->rate_per_key > 0 && (wait = rate_take(s, name)) > 0) {
        oai_error_set(e, 429, NULL,
                      "Rate limit reached for key '%s': %g requests per second. "
                      "Try again in %d s.", name, s->rate_per_key, wait);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* browsers: Origin, CORS, Content-Type                                      */

/* Splits the configured list ("A,B" / "A B") into s->cors. */
static void cors_parse(http_server_t *s, const char *list)
{
    for (const char *p = list ? list : ""; *p;) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (len == 0)
            break;
        if (len == 1 && p[0] == '*')
            s->cors_any = true;
        s->cors = xrealloc(s->cors, (s->n_cors + 1) * sizeof *s->cors);
        s->cors[s->n_cors++] = xstrndup(p, len);
        p += len;
    }
}

/* Origin values are compared whole and case-insensitively (browsers send
 * scheme and host lowercased; a listed "HTTP://X" still matches). "null"
 * (sandboxed frames, file:// pages) matches only if listed as such. */
static bool origin_allowed(const http_server_t *s, const char *origin)
{
    if (s->cors_any)
        return true;
    for (size_t i = 0; i < s->n_cors; i++)
        if (strcasecmp(s->cors[i], origin) == 0)
            return true;
    return false;
}

/* 1 when the Content-Type header says JSON: media type application/json
 * (any case, blanks around it), parameters allowed but a charset only if it
 * is UTF-8 (RFC 8259: JSON between systems is UTF-8). 0 otherwise, also
 * when the header is missing. */
static int content_type_is_json(const char *ct)
{
    if (!ct)
        return 0;
    ct += strspn(ct, " \t");
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1) != 0)
        return 0;
    const char *p = ct + sizeof want - 1;
    p += strspn(p, " \t");
    if (*p == '\0')
        return 1;
    if (*p != ';')
        return 0; /* application/jsonx, application/json-seq, ... */
    /* parameters: only charset is looked at */
    while (*p == ';') {
        p++;
        p += strspn(p, " \t");
        size_t n = strcspn(p, ";");
        if (n >= 8 && strncasecmp(p, "charset=", 8) == 0) {
            const char *v = p + 8;
            size_t vn = n - 8;
            while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t'))
                vn--;
            if (vn >= 2 && v[0] == '"' && v[vn - 1] == '"') {
                v++;
                vn -= 2;
            }
            if (!((vn == 5 && strncasecmp(v, "utf-8", 5) == 0) ||
                  (vn == 4 && strncasecmp(v, "utf8", 4) == 0)))
                return 0;
        }
        p += n;
    }
    return 1;
}

/* Header values echoed in a preflight answer must be header-safe: token
 * characters, commas and blanks, bounded. */
static bool header_list_ok(const char *v)
{
    size_t n = strlen(v);
    if (n == 0 || n > 1024)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (!(isalnum(ch) || strchr("!#$%&'*+-.^_`|~, \t", ch)))
            return false;
    }
    return true;
}

/* A CORS preflight from an allowed origin: 204 and what the page may send.
 * `allow` = the methods of the path. */
static enum MHD_Result respond_preflight(http_server_t *s, struct MHD_Connection *c,
                                         const char *allow)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    char methods[160];
    snprintf(methods, sizeof methods, "%s, OPTIONS", allow);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", methods);
    const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                 "Access-Control-Request-Headers");
    MHD_add_response_header(r, "Access-Control-Allow-Headers",
                            rh && header_list_ok(rh) ? rh : "authorization, content-type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, methods);
    return queue(s, c, 204, r);
}

/* ------------------------------------------------------------------------ */
/* simple handlers                                                           */

static enum MHD_Result handle_health(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    json_t *j = gateway_health(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!j)
        return respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    if (s->keys_path && !request_may_read_metrics(s, c)) {
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
    return respond_json(s, c, ok ? 200 : 503, j);
}

static enum MHD_Result handle_metrics(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    char *text = gateway_metrics_text(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!text)
        return respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    return respond_text(s, c, 200, text, "text/plain; version=0.0.4; charset=utf-8", NULL, NULL);
}

static enum MHD_Result handle_models(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    char *text = gateway_models_json(s->gw, SNAPSHOT_TIMEOUT_US);
    if (!text)
        return respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    return respond_text(s, c, 200, with_newline(text), "application/json", NULL, NULL);
}

static enum MHD_Result handle_reload_keys(http_server_t *s, struct MHD_Connection *c,
                                          http_req_t *req)
{
    char err[512];
    if (http_server_reload_keys(s, err, sizeof err) < 0)
        return respond_error(s, c, 400, NULL, NULL, "%s", err);
    pthread_rwlock_rdlock(&s->keys_lock);
    size_t n = keys_count(s->keys);
    pthread_rwlock_unlock(&s->keys_lock);
    return respond_json(s, c, 200, json_pack("{s:b, s:I}", "reloaded", 1, "keys", (json_int_t)n));
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
        return respond_oai_error(s, c, &e, NULL);
    }
    int status = 500;
    char *body = responses_stored(s->responses, req->owner, req->param, op, order && strcmp(order, "asc") == 0,
                                  &status);
    return respond_text(s, c, (unsigned)status, with_newline(body), "application/json", NULL, NULL);
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
        return respond_error(s, c, 503, NULL, NULL, "The gateway core did not answer");
    json_int_t status = json_integer_value(json_object_get(j, "status"));
    json_object_del(j, "status");
    return respond_json(s, c, status >= 200 && status <= 599 ? (unsigned)status : 500, j);
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
        return respond_oai_error(s, c, &e, NULL);
    }
    return queue(s, c, status, r);
}

static enum MHD_Result handle_ui_redirect(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    struct MHD_Response *r = ui_redirect();
    return r ? queue(s, c, 308, r) : MHD_NO;
}

/* ------------------------------------------------------------------------ */
/* generation: flow                                                          */

/* The core's notify hook: runs on the core thread with greq->lock held. */
static void on_reply(void *ctx)
{
    http_req_t *q = ctx;
    if (q->suspended) {
        q->suspended = false;
        MHD_resume_connection(q->conn);
    }
}

/* Takes the next reply, or suspends the connection (returns NULL, *gone
 * false) — or reports the client gone (NULL, *gone true). */
static gateway_reply_t *next_reply(http_req_t *q, bool *gone)
{
    pthread_mutex_lock(&q->greq->lock);
    *gone = q->gone;
    gateway_reply_t *rep = NULL;
    if (!q->gone) {
        rep = chan_pop(q->greq->replies, 0);
        if (!rep) {
            q->suspended = true;
            MHD_suspend_connection(q->conn);
        }
    }
    pthread_mutex_unlock(&q->greq->lock);
    return rep;
}

/* The surface's wake (api_surface.h "Waiting"), from any thread. */
static void on_surface_wake(void *ctx)
{
    http_req_t *q = ctx;
    pthread_mutex_lock(&q->greq->lock);
    q->woken = true;
    if (q->suspended) {
        q->suspended = false;
        MHD_resume_connection(q->conn);
    }
    pthread_mutex_unlock(&q->greq->lock);
}

/* While the surface waits: true when it was woken (call it again now);
 * false when the connection is now suspended, or the client is gone
 * (*gone). */
static bool surface_woken(http_req_t *q, bool *gone)
{
    pthread_mutex_lock(&q->greq->lock);
    *gone = q->gone;
    bool woken = !q->gone && q->woken;
    q->woken = false;
    if (!q->gone && !woken) {
        q->suspended = true;
        MHD_suspend_connection(q->conn);
    }
    pthread_mutex_unlock(&q->greq->lock);
    return woken;
}

/* One reply through the surface into q->out; the stream's last bytes mark
 * the request finished. */
static void stream_render(http_req_t *q, gateway_reply_t *rep)
{
    q->surface->stream_event(&q->call, rep, &q->out);
    if (q->call.done)
        q->finished = true;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    http_req_t *q = cls;
    while (q->out_off == q->out.len) {
        q->out_off = q->out.len = 0;
        if (q->call.done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        bool gone;
        if (q->call.waiting) { /* api_surface.h "Waiting" */
            if (!surface_woken(q, &gone))
                return gone ? MHD_CONTENT_READER_END_WITH_ERROR : 0;
            stream_render(q, NULL);
            continue;
        }
        gateway_reply_t *rep = next_reply(q, &gone);
        if (gone)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (!rep)
            return 0; /* suspended: on_reply resumes us */
        stream_render(q, rep);
    }
    size_t n = q->out.len - q->out_off;
    if (n > max)
        n = max;
    memcpy(buf, q->out.p + q->out_off, n);
    q->out_off += n;
    return (ssize_t)n;
}

/* Not streaming: the surface's body for every event collected. */
static enum MHD_Result respond_complete(http_server_t *s, struct MHD_Connection *c, http_req_t *q)
{
    for (;;) {
        int status = 500;
        char *body = q->surface->complete(&q->call, q->events, q->n_events, &status);
        if (!q->call.waiting)
            return respond_text_warn(s, c, (unsigned)status, with_newline(body), "application/json", NULL,
                                     status == 429 ? "1" : NULL,
                                     q->call.warning);
        free(body); /* api_surface.h "Waiting": again once woken */
        bool gone;
        if (!surface_woken(q, &gone))
            return gone ? MHD_NO : MHD_YES;
    }
}

/* Called on every resume until a response is queued. */
static enum MHD_Result gen_continue(http_server_t *s, struct MHD_Connection *c, http_req_t *q)
{
    if (q->finished && !q->call.stream) /* resumed while the surface waits */
        return respond_complete(s, c, q);
    for (;;) {
        bool gone;
        gateway_reply_t *rep = next_reply(q, &gone);
        if (gone)
            return MHD_NO; /* close: request_completed cancels */
        if (!rep)
            return MHD_YES;
        if (rep->kind == GATEWAY_REPLY_ERROR) {
            q->finished = true;
            enum MHD_Result ret = respond_api_error(s, c, q->surface, &rep->error, NULL);
            gateway_reply_free(&rep);
            return ret;
        }
        if (q->call.stream) {
            /* the first event: headers go out now, errors from here on are
             * the surface's stream error events */
            stream_render(q, rep);
            struct MHD_Response *r =
                MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, q, NULL);
            if (!r)
                return MHD_NO;
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
            MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
            MHD_add_response_header(r, "X-Accel-Buffering", "no");
            if (q->call.warning)
                MHD_add_response_header(r, "X-Pagoda-Warning", q->call.warning);
            return queue(s, c, 200, r);
        }
        vec_reserve(q->events, q->cap_events, q->n_events + 1);
        q->events[q->n_events++] = rep;
        proto_finish_t fin = rep->event.finish;
        if (fin != PROTO_FINISH_NONE &&
            (fin == PROTO_FINISH_ERROR || fin == PROTO_FINISH_TIMEOUT ||
             ++q->n_finished >= q->call.n_choices)) {
            q->finished = true;
            return respond_complete(s, c, q);
        }
    }
}

static void live_remove(http_server_t *s, http_req_t *q)
{
    if (q->prev)
        q->prev->next = q->next;
    else if (s->live == q)
        s->live = q->next;
    if (q->next)
        q->next->prev = q->prev;
    q->prev = q->next = NULL;
}

/* A generation route: the surface parses the body into the internal
 * request, the core runs it, the surface renders the replies. */
static enum MHD_Result handle_generate(http_server_t *s, struct MHD_Connection *c, http_req_t *q,
                                       const route_t *rt)
{
    const api_surface_t *api = rt->surface;
    q->surface = api;
    q->call.kind = rt->kind;
    q->call.op = rt->op;
    q->call.owner = q->owner;
    q->call.store = s->responses;
    q->call.keep_volatile = s->keep_volatile;
    q->call.wake = on_surface_wake;
    q->call.wake_ctx = q;
    request_t o;
    oai_error_t e;
    const uint8_t *body = (const uint8_t *)(q->body ? q->body : "");
    if (api->parse(&q->call, body, q->body_len, &o, &e) < 0)
        return respond_api_error(s, c, api, &e, NULL);
    q->began = true; /* parse may have set call.state: end() frees it from here on */
    if (o.warning) {
        log_warn("%s: %s", rt->path, o.warning);
        q->call.warning = o.warning;
        o.warning = NULL;
    }
    if (request_check_limits(&o, s->max_messages, s->max_prompt_bytes, &e) < 0) {
        request_free(&o);
        return respond_api_error(s, c, api, &e, NULL);
    }
    if (o.n_images) { /* decoded here, on this thread (gateway/request_image.h) */
        proto_vis_t vis;
        gateway_model_vis(s->gw, o.model, &vis, HTTP_IMAGE_ASK_US);
        if (request_images_prepare(&o, &vis, NULL, &e) < 0) {
            request_free(&o);
            return respond_api_error(s, c, api, &e, NULL);
        }
    }
    prio_tier_t tier = rt->batch ? PRIO_TIER_LOW : q->tier;
    api_call_t *call = &q->call;
    call->kind = o.kind;
    call->stream = o.stream;
    call->n_choices = rt->op == REQUEST_OP_EMBED || rt->op == REQUEST_OP_RANK ? (uint32_t)o.n_inputs : o.n > 1 ? (uint32_t)o.n : 1;
    call->model = xstrdup(o.model);
    call->created = clock_wall_s();
    call->want_logprobs = o.logprobs;
    call->request_timeout_s = s->gw->request_timeout_us / 1000000;
    if (o.tools_json && o.tool_choice != REQUEST_TOOL_CHOICE_NONE) {
        /* the answer is parsed for calls: keep the names (o is freed below) */
        call->tool_names = o.tool_names;
        call->tool_custom = o.tool_custom;
        call->n_tools = o.n_tools;
        o.tool_names = NULL;
        o.tool_custom = NULL;
        o.n_tools = 0;
    }
    call->reasoning = rt->kind == REQUEST_CHAT && rt->op == REQUEST_OP_GENERATE && s->reasoning != REASONING_NONE;
    api->begin(call, &o);
    /* the partition is the key's, narrowed by the body's cache_salt: a body
     * alone can never name another tenant's partition */
    uint64_t part = partition_salted(q->partition, o.cache_salt, o.cache_salt ? strlen(o.cache_salt) : 0);
    q->greq = gateway_request_from_oai(s->gw, &o, tier, part);
    request_free(&o);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    q->fd = ci ? ci->connect_fd : -1;
    q->conn = c;
    gateway_request_set_notify(q->greq, on_reply, q);

    pthread_mutex_lock(&s->live_lock);
    bool stopping = s->stopping;
    if (!stopping) {
        q->next = s->live;
        if (s->live)
            s->live->prev = q;
        s->live = q;
    }
    pthread_mutex_unlock(&s->live_lock);
    if (stopping || gateway_submit(s->gw, q->greq) < 0) {
        q->finished = true;
        oai_error_set(&e, 503, NULL, "The gateway is shutting down");
        return respond_api_error(s, c, api, &e, NULL);
    }
    log_debug("%s request %" PRIu64 " for %s (tier %s%s)", rt->path, q->greq->id, call->model,
              prio_tier_name(tier), call->stream ? ", stream" : "");
    return gen_continue(s, c, q);
}

/* ------------------------------------------------------------------------ */
/* the hang-up watcher                                                       */

static void upload_unlink(http_server_t *s, http_conn_t *k);

/* The header deadline, then the body deadline and rate (http_conn_t). */
static void enforce_deadlines(http_server_t *s)
{
    int64_t now = clock_now_us();
    pthread_mutex_lock(&s->conn_lock);
    for (http_conn_t *k = s->conns; k; k = k->next) {
        if (k->headers_done || k->shut || now - k->t_open_us < s->header_timeout_us)
            continue;
        /* libmicrohttpd sees the end of the stream and closes it; the fd
         * stays valid until the CLOSED notification, which takes conn_lock */
        k->shut = true;
        log_debug("http: connection without complete request headers after %.1f s: closed",
                  (double)(now - k->t_open_us) / 1e6);
        shutdown(k->fd, SHUT_RDWR);
    }
    for (http_conn_t *k = s->uploads, *next; k; k = next) {
        next = k->up_next;
        const char *why = NULL;
        if (now - k->t_body_us >= s->body_timeout_us) {
            why = "not complete within the body deadline";
        } else if (now - k->t_window_us >= s->body_window_us) {
            /* bytes of this window against the floor, then a new window */
            double want = (double)s->body_min_rate * (double)(now - k->t_window_us) / 1e6;
            if ((double)(k->n_body - k->n_window) < want)
                why = "below the minimum rate";
            k->t_window_us = now;
            k->n_window = k->n_body;
        }
        if (!why)
            continue;
        log_debug("http: request body %s (%" PRIu64 " bytes in %.1f s): connection closed", why,
                  k->n_body, (double)(now - k->t_body_us) / 1e6);
        /* the slot is free now; the request ends when libmicrohttpd sees
         * the shut-down socket */
        upload_unlink(s, k);
        k->shut = true;
        shutdown(k->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&s->conn_lock);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    http_server_t *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci)
            return;
        http_conn_t *k = xcalloc(1, sizeof *k);
        k->fd = ci->connect_fd;
        k->t_open_us = clock_now_us();
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        const struct sockaddr *sa = ai ? ai->client_addr : NULL;
        if (sa && sa->sa_family == AF_INET) {
            memcpy(k->addr, &((const struct sockaddr_in *)sa)->sin_addr, 4);
            k->addr_len = 4;
        } else if (sa && sa->sa_family == AF_INET6) {
            const struct in6_addr *a6 = &((const struct sockaddr_in6 *)sa)->sin6_addr;
            if (IN6_IS_ADDR_V4MAPPED(a6)) { /* a v4 client of a dual-stack socket */
                memcpy(k->addr, a6->s6_addr + 12, 4);
                k->addr_len = 4;
            } else { /* one client holds a whole /64 */
                memcpy(k->addr, a6->s6_addr, 8);
                k->addr_len = 8;
            }
        }
        pthread_mutex_lock(&s->conn_lock);
        k->next = s->conns;
        if (s->conns)
            s->conns->prev = k;
        s->conns = k;
        pthread_mutex_unlock(&s->conn_lock);
        *socket_context = k;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conn_t *k = *socket_context;
        if (!k)
            return;
        *socket_context = NULL;
        pthread_mutex_lock(&s->conn_lock);
        upload_unlink(s, k);
        if (k->prev)
            k->prev->next = k->next;
        else
            s->conns = k->next;
        if (k->next)
            k->next->prev = k->prev;
        pthread_mutex_unlock(&s->conn_lock);
        free(k);
    }
}

/* The request headers on k are complete: its header deadline is met. */
static void connection_headers_done(http_server_t *s, http_conn_t *k)
{
    if (!k)
        return;
    pthread_mutex_lock(&s->conn_lock);
    k->headers_done = true;
    pthread_mutex_unlock(&s->conn_lock);
}

static void *watcher_main(void *arg)
{
    http_server_t *s = arg;
    struct pollfd *pfd = xcalloc(WATCH_MAX, sizeof *pfd);
    uint64_t *ids = xcalloc(WATCH_MAX, sizeof *ids);
    for (;;) {
        size_t n = 0;
        pthread_mutex_lock(&s->live_lock);
        if (s->stopping) {
            pthread_mutex_unlock(&s->live_lock);
            break;
        }
        for (http_req_t *q = s->live; q && n < WATCH_MAX; q = q->next) {
            pthread_mutex_lock(&q->greq->lock);
            bool gone = q->gone;
            pthread_mutex_unlock(&q->greq->lock);
            if (q->fd < 0 || gone)
                continue;
            pfd[n] = (struct pollfd){.fd = q->fd, .events = POLLRDHUP};
            ids[n++] = q->greq->id;
        }
        pthread_mutex_unlock(&s->live_lock);
        enforce_deadlines(s);
        int k = poll(pfd, n, HTTP_WATCH_MS);
        if (k <= 0)
            continue;
        pthread_mutex_lock(&s->live_lock);
        for (size_t i = 0; i < n; i++) {
            if (!(pfd[i].revents & (POLLRDHUP | POLLHUP | POLLERR)))
                continue;
            /* match by request id: the fd may have been closed and reused */
            for (http_req_t *q = s->live; q; q = q->next) {
                if (q->greq->id != ids[i])
                    continue;
                pthread_mutex_lock(&q->greq->lock);
                if (!q->gone)
                    log_debug("request %" PRIu64 ": client hung up", ids[i]);
                q->gone = true;
                if (q->suspended) {
                    q->suspended = false;
                    MHD_resume_connection(q->conn);
                }
                pthread_mutex_unlock(&q->greq->lock);
                break;
            }
        }
        pthread_mutex_unlock(&s->live_lock);
    }
    free(pfd);
    free(ids);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* dispatch                                                                  */

static const route_t routes[] = {
    {"GET", "/health", handle_health, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/metrics", handle_metrics, AUTH_METRICS, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/v1/models", handle_models, AUTH_KEY, 0, false, REQUEST_OP_GENERATE, NULL},
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
    {"GET", "/ui", handle_ui_redirect, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/ui/", handle_ui, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
    {"GET", "/ui/*", handle_ui, AUTH_NONE, 0, false, REQUEST_OP_GENERATE, NULL},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* Matches url against a route path where '*' stands for one non-empty path
 * segment (no '/'), copied into param (param_len bytes, else no match). */
static bool route_match(const char *pattern, const char *url, char *param, size_t param_len)
{
    const char *star = strchr(pattern, '*');
    if (!star) {
        if (strcmp(pattern, url) != 0)
            return false;
        param[0] = '\0';
        return true;
    }
    size_t pre = (size_t)(star - pattern);
    if (strncmp(pattern, url, pre) != 0)
        return false;
    const char *seg = url + pre, *slash = strchr(seg, '/');
    size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
    if (n == 0 || n >= param_len || strcmp(star + 1, seg + n) != 0)
        return false;
    memcpy(param, seg, n);
    param[n] = '\0';
    return true;
}

/* ------------------------------------------------------------------------ */
/* the headers decide (http.h)                                               */

/* An IP literal: dotted IPv4, or IPv6 (without brackets). */
static bool is_ip_literal(const char *h, size_t n)
{
    char buf[INET6_ADDRSTRLEN + 1];
    unsigned char a[16];
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, h, n);
    buf[n] = '\0';
    return inet_pton(AF_INET, buf, a) == 1 || inet_pton(AF_INET6, buf, a) == 1;
}

/* name (n bytes, no trailing dot) against one allowed_hosts entry. */
static bool host_entry_matches(const char *name, size_t n, const char *ent, size_t en)
{
    if (en && ent[en - 1] == '.')
        en--;
    if (en == 1 && ent[0] == '*')
        return true;
    if (en > 2 && ent[0] == '*' && ent[1] == '.') /* "*.SUFFIX": NAME.SUFFIX, not SUFFIX itself */
        return n > en - 1 && strncasecmp(name + n - (en - 1), ent + 1, en - 1) == 0;
    return n == en && strncasecmp(name, ent, n) == 0;
}

bool http_host_allowed(const char *host, const char *listen_host, const char *allowed)
{
    if (!host)
        return true;
    const char *name = host;
    size_t n;
    if (host[0] == '[') { /* [IPv6]:PORT: a literal or nothing */
        const char *close = strchr(host, ']');
        if (!close || (close[1] && close[1] != ':'))
            return false;
        return is_ip_literal(host + 1, (size_t)(close - host - 1));
    }
    const char *colon = strchr(host, ':');
    n = colon ? (size_t)(colon - host) : strlen(host);
    if (colon && (!colon[1] || strspn(colon + 1, "0123456789") != strlen(colon + 1)))
        return false; /* a port that is not a number (or a second colon) */
    if (n && name[n - 1] == '.')
        n--; /* "localhost." is localhost */
    if (n == 0)
        return false;
    if (is_ip_literal(name, n) || (n == 9 && strncasecmp(name, "localhost", 9) == 0))
        return true;
    if (listen_host && !is_ip_literal(listen_host, strlen(listen_host)) &&
        host_entry_matches(name, n, listen_host, strlen(listen_host)))
        return true;
    for (const char *p = allowed ? allowed : ""; *p;) {
        p += strspn(p, ", \t");
        size_t len = strcspn(p, ", \t");
        if (len && host_entry_matches(name, n, p, len))
            return true;
        p += len;
    }
    return false;
}

/* libmicrohttpd's URI log callback: the request target as the client sent
 * it, before decoding (a %00 would cut the decoded path short). Makes the
 * request's state; its return value becomes *con_cls. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    http_req_t *q = xcalloc(1, sizeof *q);
    q->s = cls;
    q->fd = -1;
    size_t n = strlen(uri), path_n = strcspn(uri, "?");
    q->path_long = n > HTTP_MAX_URL;
    for (size_t i = 0; i < path_n && !q->path_ctl; i++) {
        unsigned char ch = (unsigned char)uri[i];
        if (ch < 0x20 || ch == 0x7f) {
            q->path_ctl = true;
        } else if (ch == '%' && i + 2 < path_n && isxdigit((unsigned char)uri[i + 1]) &&
                   isxdigit((unsigned char)uri[i + 2])) {
            char hex[3] = {uri[i + 1], uri[i + 2], 0};
            long v = strtol(hex, NULL, 16);
            q->path_ctl = v < 0x20 || v == 0x7f;
        }
    }
    return q;
}

/* Content-Length as declared (0 when absent); *chunked when the body comes
 * in chunks of unknown total. libmicrohttpd has refused malformed values. */
static uint64_t declared_body(struct MHD_Connection *c, bool *chunked)
{
    const char *te = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    *chunked = te && strcasestr(te, "chunked") != NULL;
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return cl ? strtoull(cl, NULL, 10) : 0;
}

/* Refuses with `status` in the route's shape: *e is q->refusal. */
static oai_error_t *refuse(http_req_t *q, const route_t *rt)
{
    q->refused = true;
    q->err_surface = rt ? rt->surface : NULL;
    return &q->refusal;
}

/* Everything the headers decide (http.h), in order. Returns 0 with q->route
 * set (or q->preflight), or -1 with q->refused and q->refusal set. */
static int admit(http_server_t *s, struct MHD_Connection *c, const char *url, const char *method,
                 http_req_t *q)
{
    /* HEAD is GET without a body; libmicrohttpd drops the body itself */
    const char *m = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0 ? MHD_HTTP_METHOD_GET : method;
    const route_t *rt = NULL;
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES && !rt; i++) {
        const route_t *r = &routes[i];
        if ((!s->ui && (r->fn == handle_ui || r->fn == handle_ui_redirect)) ||
            !route_match(r->path, url, q->param, sizeof q->param))
            continue;
        if (strcmp(r->method, m) == 0) {
            rt = r;
            break;
        }
        path_known = true;
        size_t n = strlen(q->allow);
        snprintf(q->allow + n, sizeof q->allow - n, "%s%s%s", n ? ", " : "", r->method,
                 strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
    }
    oai_error_t *e;
    /* the path as sent: a control byte would be cut out of (or cut) the
     * decoded one the routes see */
    if (q->path_ctl) {
        e = refuse(q, rt);
        oai_error_set(e, 400, NULL, "The request path contains a control character (%%00-%%1F or "
                                    "%%7F, percent-encoded or not); no path of this API has one.");
        e->code = "invalid_path";
        return -1;
    }
    if (q->path_long) {
        e = refuse(q, rt);
        oai_error_set(e, 414, NULL, "The request target is longer than %d bytes.", HTTP_MAX_URL);
        e->type = "invalid_request_error";
        e->code = "uri_too_long";
        return -1;
    }
    /* a Host that is not this server's: a DNS rebinding page (its name now
     * resolves to us, so the browser calls it same-origin) */
    const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST);
    if (!http_host_allowed(host, s->listen_host, s->allowed_hosts)) {
        e = refuse(q, rt);
        oai_error_set(e, 421, NULL, "Host '%.200s' is not a name of this server: allow it with "
                                    "--allowed-host NAME (config allowed_hosts), or call it by IP "
                                    "address or localhost.", host);
        e->type = "invalid_request_error";
        e->code = "host_not_allowed";
        log_debug("refused %s %.200s for Host '%.200s'", method, url, host);
        return -1;
    }
    /* browsers: a web page of a foreign origin gets nothing at all, on any
     * route (http.h "Browser safety") */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && !origin_allowed(s, origin) && !(s->ui && ui_origin_is_self(origin, host))) {
        e = refuse(q, rt);
        oai_error_set(e, 403, NULL, "Requests from web pages of origin '%.200s' are not allowed "
                                    "(the gateway allows %s; see --cors-origin)", origin,
                      s->n_cors ? "other origins" : "no browser origin");
        e->code = "origin_not_allowed";
        log_debug("refused %s %.200s from origin '%.200s'", method, url, origin);
        return -1;
    }
    if (!rt && path_known && origin && strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0) {
        q->preflight = true;
        return 0;
    }
    if (!rt && path_known) {
        e = refuse(q, NULL);
        oai_error_set(e, 405, NULL, "Method %.40s is not allowed on %.300s (allowed: %s)", method, url,
                      q->allow);
        return -1;
    }
    if (!rt) {
        /* as OpenAI answers an unknown URL: invalid_request_error, not not_found_error */
        e = refuse(q, NULL);
        oai_error_set(e, 404, NULL, "Invalid URL (%.100s %.300s)", method, url);
        e->type = "invalid_request_error";
        e->code = "not_found";
        return -1;
    }
    /* refusals of a surface's route come in its API's shape */
    e = &q->refusal;
    if (authorize(s, c, rt, q, e) < 0) {
        refuse(q, rt);
        return -1;
    }
    /* the body: what the route takes, before a byte of it is read */
    bool chunked;
    uint64_t len = declared_body(c, &chunked);
    size_t limit = rt->surface ? s->max_body : q->keyed ? HTTP_SMALL_BODY : 0;
    if (len > limit || (chunked && limit == 0)) {
        e = refuse(q, rt);
        if (limit == 0)
            oai_error_set(e, 413, NULL, "%.10s %.300s takes no request body", method, url);
        else
            oai_error_set(e, 413, NULL, "Request body exceeds %zu bytes", limit);
        return -1;
    }
    /* a body must say it is JSON: a page may POST text/plain (or a Blob
     * without a type) cross-origin without a preflight */
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if ((len || chunked) && !content_type_is_json(ct)) {
        e = refuse(q, rt);
        oai_error_set(e, 415, NULL, "Unsupported Content-Type '%.100s': request bodies "
                                    "must be JSON (Content-Type: application/json)",
                      ct ? ct : "(none)");
        e->type = "invalid_request_error";
        e->code = "unsupported_media_type";
        return -1;
    }
    q->route = rt;
    return 0;
}

/* The connection's record (on_connection), or NULL. */
static http_conn_t *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void upload_unlink(http_server_t *s, http_conn_t *k)
{
    if (!k->uploading)
        return;
    if (k->up_prev)
        k->up_prev->up_next = k->up_next;
    else
        s->uploads = k->up_next;
    if (k->up_next)
        k->up_next->up_prev = k->up_prev;
    k->up_prev = k->up_next = NULL;
    k->uploading = false;
    s->n_uploads--;
}

/* Takes an upload slot for q's body on k. Returns 0, or -1 with q refused
 * (503 all slots taken, 429 this address's). */
static int upload_begin(http_server_t *s, http_req_t *q, http_conn_t *k)
{
    unsigned mine = 0;
    pthread_mutex_lock(&s->conn_lock);
    for (http_conn_t *u = s->uploads; u && k->addr_len; u = u->up_next)
        mine += u->addr_len == k->addr_len && memcmp(u->addr, k->addr, k->addr_len) == 0;
    bool full = s->n_uploads >= s->max_uploads, over = mine >= s->max_uploads_per_ip;
    if (!full && !over) {
        int64_t now = clock_now_us();
        k->uploading = true;
        k->t_body_us = k->t_window_us = now;
        k->n_body = k->n_window = 0;
        k->up_prev = NULL;
        k->up_next = s->uploads;
        if (s->uploads)
            s->uploads->up_prev = k;
        s->uploads = k;
        s->n_uploads++;
        q->upload = k;
    }
    unsigned n_all = s->n_uploads;
    pthread_mutex_unlock(&s->conn_lock);
    if (!full && !over)
        return 0;
    oai_error_t *e = refuse(q, q->route);
    q->route = NULL;
    if (full)
        oai_error_set(e, 503, NULL, "The gateway is receiving %u request bodies, its limit "
                                    "(--max-uploads); try again shortly.", n_all);
    else
        oai_error_set(e, 429, NULL, "Your address is sending %u request bodies at once, the limit "
                                    "(--max-uploads-per-ip); try again shortly.", mine);
    log_debug("upload slot refused (%s: %u of all, %u of this address)", full ? "all" : "address",
              n_all, mine);
    return -1;
}

/* q's body is complete (or the request ends): its slot is free again. */
static void upload_end(http_server_t *s, http_req_t *q)
{
    if (!q->upload)
        return;
    pthread_mutex_lock(&s->conn_lock);
    upload_unlink(s, q->upload);
    pthread_mutex_unlock(&s->conn_lock);
    q->upload = NULL;
}

/* Once the body is complete: what needed it, then the route's handler. */
static enum MHD_Result dispatch(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    if (req->preflight)
        return respond_preflight(s, c, req->allow);
    if (req->refused)
        return respond_api_error(s, c, req->err_surface, &req->refusal,
                                 req->refusal.status == 405 ? req->allow : NULL);
    const route_t *rt = req->route;
    oai_error_t e;
    if (req->too_large) { /* chunked: no length was declared */
        oai_error_set(&e, 413, NULL, "Request body exceeds %zu bytes",
                      rt->surface ? s->max_body : (size_t)HTTP_SMALL_BODY);
        return respond_api_error(s, c, rt->surface, &e, NULL);
    }
    return rt->fn ? rt->fn(s, c, req) : handle_generate(s, c, req, rt);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    http_server_t *s = cls;
    http_req_t *req = *con_cls;
    if (!req) /* on_uri made it; libmicrohttpd always calls that first */
        return MHD_NO;
    if (!req->headers_seen) {
        /* first call: the headers, no body byte read yet */
        req->headers_seen = true;
        http_conn_t *k = conn_of(c);
        connection_headers_done(s, k);
        log_debug("%s %s", method, url);
        bool chunked;
        bool body = declared_body(c, &chunked) > 0 || chunked;
        if (admit(s, c, url, method, req) == 0 && body && req->route && k)
            upload_begin(s, req, k);
        /* a refusal of a request with a body is answered now: the body is
         * never read, and libmicrohttpd closes the connection after it */
        if ((req->refused || req->preflight) && body)
            return dispatch(s, c, req);
        return MHD_YES;
    }
    if (req->greq) /* resumed */
        return gen_continue(s, c, req);
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (req->upload) {
            pthread_mutex_lock(&s->conn_lock);
            req->upload->n_body += n;
            pthread_mutex_unlock(&s->conn_lock);
        }
        size_t limit = req->route && req->route->surface ? s->max_body : HTTP_SMALL_BODY;
        if (!req->route || req->too_large || req->body_len + n > limit) {
            /* keep reading (and discarding) so we can answer 413 cleanly;
             * the body deadline bounds how long */
            req->too_large = req->route != NULL;
            return MHD_YES;
        }
        if (req->body_len + n + 1 > req->body_cap) {
            size_t cap = req->body_cap ? req->body_cap : 4096;
            while (cap < req->body_len + n + 1)
                cap *= 2;
            if (cap > limit + 1)
                cap = limit + 1;
            req->body = xrealloc(req->body, cap);
            req->body_cap = cap;
        }
        memcpy(req->body + req->body_len, upload_data, n);
        req->body_len += n;
        req->body[req->body_len] = '\0';
        return MHD_YES;
    }
    upload_end(s, req);
    return dispatch(s, c, req);
}

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    http_server_t *s = cls;
    http_req_t *q = *con_cls;
    if (!q)
        return;
    *con_cls = NULL;
    upload_end(s, q);
    if (q->began) /* first: a surface's wake (which takes greq->lock) stops here */
        q->surface->end(&q->call);
    if (q->greq) {
        gateway_request_set_notify(q->greq, NULL, NULL);
        pthread_mutex_lock(&s->live_lock);
        live_remove(s, q);
        pthread_mutex_unlock(&s->live_lock);
        if (!q->finished) {
            log_info("request %" PRIu64 ": client gone (%s), cancelling", q->greq->id,
                     toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "closed" : "aborted");
            gateway_cancel(s->gw, q->greq->id);
        }
        chan_close(q->greq->replies);
        gateway_request_unref(&q->greq);
    }
    for (size_t i = 0; i < q->n_events; i++)
        gateway_reply_free(&q->events[i]);
    free(q->events);
    for (size_t i = 0; i < q->call.n_tools; i++)
        free(q->call.tool_names[i]);
    free(q->call.tool_names);
    free(q->call.tool_custom);
    free(q->call.warning);
    free(q->out.p);
    free(q->call.model);
    free(q->body);
    free(q);
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
    /* a client that went away (or one the header deadline shut down) is
     * routine, not a warning */
    if (strstr(line, "connection closure") || strstr(line, "Connection reset"))
        log_debug("http: %s", line);
    else
        log_warn("http: %s", line);
}

/* ------------------------------------------------------------------------ */
/* lifetime                                                                  */

int http_parse_hostport(const char *s, char *host, size_t host_len, uint16_t *port)
{
    const char *colon, *h = s;
    size_t hn;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || close[1] != ':')
            return -1;
        h = s + 1;
        hn = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -1;
        hn = (size_t)(colon - s);
    }
    if (hn == 0 || hn >= host_len)
        return -1;
    char *end;
    errno = 0;
    long p = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end || p < 0 || p > 65535)
        return -1;
    memcpy(host, h, hn);
    host[hn] = '\0';
    *port = (uint16_t)p;
    return 0;
}

http_server_t *http_server_new(const http_config_t *cfg, struct gateway *gw)
{
    char host[256];
    uint16_t port;
    if (http_parse_hostport(cfg->listen, host, sizeof host, &port) < 0) {
        log_error("bad listen address '%s' (want HOST:PORT)", cfg->listen);
        return NULL;
    }
    http_server_t *s = xcalloc(1, sizeof *s);
    s->gw = gw;
    s->max_body = cfg->max_body ? cfg->max_body : HTTP_DEFAULT_MAX_BODY;
    s->max_messages = cfg->max_messages;
    s->max_prompt_bytes = cfg->max_prompt_bytes;
    pthread_rwlock_init(&s->keys_lock, NULL);
    pthread_mutex_init(&s->live_lock, NULL);
    pthread_mutex_init(&s->conn_lock, NULL);
    pthread_mutex_init(&s->rate_lock, NULL);
    s->rate_per_key = cfg->rate_per_key > 0 ? cfg->rate_per_key : 0;
    cors_parse(s, cfg->cors_origins);
    s->admin_open = cfg->admin_open;
    s->reasoning = (reasoning_parser_t)cfg->reasoning_parser;
    s->keep_volatile = cfg->keep_volatile_blocks;
    s->responses = cfg->responses;
    s->ui = !cfg->no_ui;
    s->header_timeout_us = (cfg->header_timeout_ms > 0 ? cfg->header_timeout_ms
                                                        : HTTP_DEFAULT_HEADER_TIMEOUT_S * 1000) * 1000;
    s->body_timeout_us = (cfg->body_timeout_ms > 0 ? cfg->body_timeout_ms
                                                    : HTTP_DEFAULT_BODY_TIMEOUT_S * 1000) * 1000;
    s->body_window_us = (cfg->body_rate_window_ms > 0 ? cfg->body_rate_window_ms
                                                       : HTTP_DEFAULT_BODY_RATE_WINDOW_S * 1000) * 1000;
    s->body_min_rate = cfg->body_min_rate;
    s->max_uploads = cfg->max_uploads ? cfg->max_uploads : HTTP_DEFAULT_MAX_UPLOADS;
    s->max_uploads_per_ip = cfg->max_uploads_per_ip ? cfg->max_uploads_per_ip
                                                    : HTTP_DEFAULT_MAX_UPLOADS_PER_IP;
    s->listen_host = xstrdup(host);
    s->allowed_hosts = cfg->allowed_hosts ? xstrdup(cfg->allowed_hosts) : NULL;
    unsigned idle_s = cfg->idle_timeout_s ? cfg->idle_timeout_s : HTTP_DEFAULT_IDLE_TIMEOUT_S;
    /* connection limit from the descriptor limit (raised to the hard limit):
     * libmicrohttpd's default (FD_SETSIZE − 4) lets ~1000 idle sockets lock
     * everyone else out */
    struct rlimit rl;
    unsigned conn_limit = 1000;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < rl.rlim_max) {
            struct rlimit want = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};
            if (want.rlim_cur == RLIM_INFINITY || want.rlim_cur > 1u << 20)
                want.rlim_cur = 1u << 20;
            if (want.rlim_cur > rl.rlim_cur && setrlimit(RLIMIT_NOFILE, &want) == 0)
                rl.rlim_cur = want.rlim_cur;
        }
        rlim_t cur = rl.rlim_cur == RLIM_INFINITY ? 1u << 20 : rl.rlim_cur;
        conn_limit = cur > 2 * FD_HEADROOM ? (unsigned)(cur - FD_HEADROOM) : (unsigned)(cur / 2);
    }
    if (cfg->keys_path) {
        s->keys_path = xstrdup(cfg->keys_path);
        if (http_server_reload_keys(s, NULL, 0) < 0)
            goto err;
    } else {
        log_warn("no --keys file: the API is open to anyone who can reach it (every request "
                 "is tier normal)");
        if (s->admin_open)
            log_warn("*** --admin-open: /admin/* (drain, restart workers) is open to ANYONE who "
                     "can reach this port, without a key ***");
    }
    if (cfg->keys_path && s->admin_open)
        log_warn("--admin-open is ignored: with a keys file /admin/* need an admin key");
    /* the Host check: a client that names this server by a DNS name gets
     * 421 unless the name is allowed; say so where that is likely */
    bool wildcard = strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0;
    if (s->allowed_hosts && http_host_allowed("any.name.invalid", NULL, s->allowed_hosts))
        log_warn("--allowed-host '*': any Host header is accepted (no DNS rebinding protection)");
    else if (wildcard && !s->allowed_hosts)
        log_warn("listening on %s without --allowed-host: requests that name this server by a DNS "
                 "name (a Service name, a proxy's Host) get 421; only IP addresses and localhost "
                 "are accepted as Host. Add --allowed-host NAME (repeatable, *.SUFFIX allowed).", host);
    if (s->cors_any)
        log_warn("CORS: every browser origin may call the API (cors_origins '*')");
    else if (s->n_cors)
        log_info("CORS: %zu browser origin(s) allowed (%s%s)", s->n_cors, s->cors[0],
                 s->n_cors > 1 ? ", ..." : "");

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%u", port);
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0) {
        log_error("cannot resolve listen host '%s': %s", host, gai_strerror(gai));
        goto err;
    }
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG |
                     MHD_ALLOW_SUSPEND_RESUME;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, port, NULL, NULL, on_request, s,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, /* first, so it covers the rest */
        MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_THREAD_POOL_SIZE, cfg->n_threads ? cfg->n_threads : 2u,
        MHD_OPTION_NOTIFY_COMPLETED, request_completed, s,
        MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u,
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s,
        MHD_OPTION_CONNECTION_LIMIT, conn_limit,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HTTP_CONN_MEMORY,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        log_error("cannot listen on %s: %s", cfg->listen, strerror(errno));
        goto err;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    if (pthread_create(&s->watcher, NULL, watcher_main, s) != 0) {
        log_error("cannot start the hang-up watcher");
        goto err;
    }
    s->watcher_started = true;
    log_info("listening on http://%s%s%s:%u (up to %u connections, idle timeout %u s, "
             "header deadline %.1f s, body deadline %.1f s, body rate >= %" PRIu64 " B/s per %.1f s, "
             "uploads <= %u, <= %u per address)", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", s->port, conn_limit, idle_s,
             (double)s->header_timeout_us / 1e6, (double)s->body_timeout_us / 1e6, s->body_min_rate,
             (double)s->body_window_us / 1e6, s->max_uploads, s->max_uploads_per_ip);
    return s;
err:
    http_server_free(&s);
    return NULL;
}

void http_server_free(http_server_t **sp)
{
    http_server_t *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    /* libmicrohttpd must not be stopped with suspended connections: mark
     * every request gone and resume it, so its handler closes it */
    pthread_mutex_lock(&s->live_lock);
    s->stopping = true;
    for (http_req_t *q = s->live; q; q = q->next) {
        pthread_mutex_lock(&q->greq->lock);
        q->gone = true;
        if (q->suspended) {
            q->suspended = false;
            MHD_resume_connection(q->conn);
        }
        pthread_mutex_unlock(&q->greq->lock);
    }
    pthread_mutex_unlock(&s->live_lock);
    if (s->watcher_started)
        pthread_join(s->watcher, NULL);
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    keys_free(&s->keys);
    free(s->keys_path);
    pthread_rwlock_destroy(&s->keys_lock);
    pthread_mutex_destroy(&s->live_lock);
    pthread_mutex_destroy(&s->conn_lock);
    pthread_mutex_destroy(&s->rate_lock);
    free(s->buckets);
    free(s->listen_host);
    free(s->allowed_hosts);
    for (size_t i = 0; i < s->n_cors; i++)
        free(s->cors[i]);
    free(s->cors);
    free(s);
}

size_t http_server_active(http_server_t *s)
{
    size_t n = 0;
    pthread_mutex_lock(&s->live_lock);
    for (http_req_t *q = s->live; q; q = q->next)
        n++;
    pthread_mutex_unlock(&s->live_lock);
    return n;
}

uint16_t http_server_port(const http_server_t *s)
{
    return s->port;
}
