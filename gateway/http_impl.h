/* http_impl.h — the HTTP front end's private state, shared by its files
 * (http.c: the daemon, connections and generation transport; http_guard.c:
 * what the headers decide; http_respond.c: how answers go out;
 * http_routes.c: the route table and the simple handlers). Not for anyone
 * else: the public interface is http.h. Types only; no functions. */
#ifndef PAGODA_GATEWAY_HTTP_IMPL_H
#define PAGODA_GATEWAY_HTTP_IMPL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/strbuf.h"
#include "gateway/api_surface.h"
#include "gateway/gateway.h"
#include "gateway/image_fetch.h"
#include "gateway/keys.h"
#include "gateway/oai.h"
#include "gateway/reasoning.h"
#include "gateway/request_image.h"
#include "gateway/resp_store.h"

typedef struct http_server http_server_t; /* as http.h says */

#define HTTP_DEFAULT_MAX_BODY (16u << 20)
#define SNAPSHOT_TIMEOUT_US 2000000

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
    request_image_limits_t image_limits;   /* http_config_t */
    image_fetch_t *fetch;       /* remote image URLs (gateway/image_fetch.h); its list may be empty */
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
    request_t *pending;         /* parsed, while its remote images are fetched (fetch) */
    image_fetch_job_t *fetch;   /* that fetch, until its bodies are taken */
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
    strbuf_t out;
    size_t out_off;
};

#endif
