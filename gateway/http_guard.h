/* http_guard.h — what a request's headers decide before its body is read
 * (http_guard.c; the order and the answers are in http.h). */
#ifndef PAGODA_GATEWAY_HTTP_GUARD_H
#define PAGODA_GATEWAY_HTTP_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "gateway/http_impl.h"

/* Longest request target (path and query) answered by a route; longer: 414. */
#define HTTP_MAX_URL 8192
/* Body limit of the routes that need a key but take no body (it is read and ignored). */
#define HTTP_SMALL_BODY 4096

/* Reloads the keys file given at start (SIGHUP, POST /admin/reload-keys).
 * Returns 0, or -1 with the old table kept (the error is logged and, when
 * err is not NULL, written there). Without a keys file: -1. */
int http_server_reload_keys(http_server_t *s, char *err, size_t err_len);

/* Whether a Host header value names this server: an IP literal (v4, or v6
 * in brackets) or localhost (any port: no DNS name is involved, so no DNS
 * rebinding either), the listen host, or a name matched by allowed (the
 * http_config_t allowed_hosts syntax, may be NULL). NULL host (HTTP/1.0
 * without Host) is allowed. Pure; exposed for the unit test. */
bool http_host_allowed(const char *host, const char *listen_host, const char *allowed);

/* Everything the headers decide, in order, for the route http_route_find
 * found (rt NULL: none; path_known: the path has routes of other methods,
 * listed in q->allow). Returns 0 with q->route set (or q->preflight), or -1
 * with q->refused and q->refusal set. */
int http_admit(http_server_t *s, struct MHD_Connection *c, const char *url, const char *method,
               const route_t *rt, bool path_known, http_req_t *q);
/* With keys on: does the request carry a key that may read /metrics (admin
 * or metrics)? Routes open to anyone (/health) show their counters only then. */
bool http_may_read_metrics(http_server_t *s, struct MHD_Connection *c);
/* Content-Length as declared (0 when absent); *chunked when the body comes
 * in chunks of unknown total. */
uint64_t http_declared_body(struct MHD_Connection *c, bool *chunked);
/* Marks q refused in the route's shape (rt NULL = OpenAI's) and returns
 * &q->refusal for the caller to fill. */
oai_error_t *http_refuse(http_req_t *q, const route_t *rt);
/* The answer to a CORS preflight (OPTIONS from an allowed origin) for a path
 * whose methods are `allow`. */
enum MHD_Result http_respond_preflight(http_server_t *s, struct MHD_Connection *c,
                                       const char *allow);

#endif
