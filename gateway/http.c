/* http.c — libmicrohttpd daemon, route table and JSON responses for the
 * gateway (see http.h). */
#include "gateway/http.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "gateway/gateway.h"

#define HTTP_DEFAULT_MAX_BODY (16u << 20)
#define HEALTH_TIMEOUT_US 1000000

struct http_server {
    struct MHD_Daemon *daemon;
    struct gateway *gw;       /* borrowed */
    size_t max_body;
    uint16_t port;
};

/* Per-request state, made on the first callback of a request and freed by
 * request_completed(). */
typedef struct http_req {
    char *body;               /* (body_len) + NUL, NULL when empty */
    size_t body_len;
    bool too_large;           /* body exceeded max_body: answer 413 */
} http_req_t;

typedef enum MHD_Result (*http_handler_fn)(http_server_t *s, struct MHD_Connection *c,
                                           http_req_t *req);

/* ------------------------------------------------------------------------ */
/* responses                                                                 */

/* Sends j (reference stolen) with the given status. */
static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *j,
                                    const char *allow)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!text)
        return MHD_NO;
    size_t n = strlen(text);
    /* one trailing newline makes curl output readable */
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    struct MHD_Response *r = MHD_create_response_from_buffer(n + 1, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* An OpenAI-shaped error: {"error":{"message","type","param","code"}}. */
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *type,
                                     const char *code, const char *allow, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *type,
                                     const char *code, const char *allow, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    json_t *j = json_pack("{s:{s:s, s:s, s:n, s:s*}}", "error", "message", msg, "type", type,
                          "param", "code", code);
    return respond_json(c, status, j, allow);
}

/* ------------------------------------------------------------------------ */
/* handlers                                                                  */

static enum MHD_Result handle_health(http_server_t *s, struct MHD_Connection *c, http_req_t *req)
{
    json_t *j = gateway_health(s->gw, HEALTH_TIMEOUT_US);
    if (!j)
        return respond_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "server_error", "unavailable", NULL,
                             "The gateway core did not answer");
    return respond_json(c, MHD_HTTP_OK, j, NULL);
}

static const struct route {
    const char *method;
    const char *path;
    http_handler_fn fn;
} routes[] = {
    {"GET", "/health", handle_health},
};
#define N_ROUTES (sizeof routes / sizeof routes[0])

/* ------------------------------------------------------------------------ */
/* dispatch                                                                  */

static enum MHD_Result dispatch(http_server_t *s, struct MHD_Connection *c, const char *url,
                                const char *method, http_req_t *req)
{
    /* HEAD is GET without a body; libmicrohttpd drops the body itself */
    const char *m = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0 ? MHD_HTTP_METHOD_GET : method;
    char allow[128] = "";
    bool path_known = false;
    for (size_t i = 0; i < N_ROUTES; i++) {
        if (strcmp(routes[i].path, url) != 0)
            continue;
        if (strcmp(routes[i].method, m) == 0) {
            if (req->too_large)
                return respond_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "invalid_request_error",
                                     "request_too_large", NULL,
                                     "Request body exceeds %zu bytes", s->max_body);
            return routes[i].fn(s, c, req);
        }
        path_known = true;
        size_t n = strlen(allow);
        snprintf(allow + n, sizeof allow - n, "%s%s%s", n ? ", " : "", routes[i].method,
                 strcmp(routes[i].method, "GET") == 0 ? ", HEAD" : "");
    }
    if (path_known)
        return respond_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "invalid_request_error",
                             "method_not_allowed", allow, "Method %s is not allowed on %s (allowed: %s)",
                             method, url, allow);
    return respond_error(c, MHD_HTTP_NOT_FOUND, "invalid_request_error", "not_found", NULL,
                         "Invalid URL (%s %s)", method, url);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    http_server_t *s = cls;
    http_req_t *req = *con_cls;
    if (!req) {
        /* first call: headers only */
        *con_cls = xcalloc(1, sizeof(http_req_t));
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (req->too_large || req->body_len + n > s->max_body) {
            /* keep reading (and discarding) so we can answer 413 cleanly */
            req->too_large = true;
            return MHD_YES;
        }
        req->body = xrealloc(req->body, req->body_len + n + 1);
        memcpy(req->body + req->body_len, upload_data, n);
        req->body_len += n;
        req->body[req->body_len] = '\0';
        return MHD_YES;
    }
    log_debug("%s %s", method, url);
    return dispatch(s, c, url, method, req);
}

static void request_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                              enum MHD_RequestTerminationCode toe)
{
    http_req_t *req = *con_cls;
    if (!req)
        return;
    free(req->body);
    free(req);
    *con_cls = NULL;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = '\0';
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
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *ai = NULL;
    char portstr[8];
    snprintf(portstr, sizeof portstr, "%u", port);
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0) {
        log_error("cannot resolve listen host '%s': %s", host, gai_strerror(gai));
        return NULL;
    }
    http_server_t *s = xcalloc(1, sizeof *s);
    s->gw = gw;
    s->max_body = cfg->max_body ? cfg->max_body : HTTP_DEFAULT_MAX_BODY;
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
        MHD_OPTION_CONNECTION_TIMEOUT, 120u,
        MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->daemon) {
        log_error("cannot listen on %s: %s", cfg->listen, strerror(errno));
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    log_info("listening on http://%s%s%s:%u", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", s->port);
    return s;
}

void http_server_free(http_server_t **sp)
{
    http_server_t *s = *sp;
    if (!s)
        return;
    *sp = NULL;
    MHD_stop_daemon(s->daemon);
    free(s);
}

uint16_t http_server_port(const http_server_t *s)
{
    return s->port;
}
