/* http_guard.h — what a request's headers decide before its body is read
 * (http_guard.c; the order and the answers are in http.h). */
#ifndef PAGODA_GATEWAY_HTTP_GUARD_H
#define PAGODA_GATEWAY_HTTP_GUARD_H

#include <stdbool.h>
#include <stdint.h>

#include "gateway/http_impl.h"

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
