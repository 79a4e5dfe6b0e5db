/* http_routes.h — the HTTP route table and the handlers of the routes that
 * are not an API surface (http_routes.c). */
#ifndef PAGODA_GATEWAY_HTTP_ROUTES_H
#define PAGODA_GATEWAY_HTTP_ROUTES_H

#include <stdbool.h>

#include "gateway/http_impl.h"

/* The route for method (HEAD finds GET's) and url, with q->param set from a
 * '*' segment; NULL when none. *path_known tells whether the path has routes
 * of other methods, whose names (GET with HEAD) are appended to q->allow. */
const route_t *http_route_find(const http_server_t *s, const char *method, const char *url, http_req_t *q,
                               bool *path_known);

#endif
