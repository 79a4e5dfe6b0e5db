/* http_respond.h — how every HTTP answer goes out (http_respond.c).
 *
 * Each call queues one response on the connection and returns
 * libmicrohttpd's result. Bodies passed as char * are malloc'd and taken
 * (freed here, also on failure); a json_t is taken (decref'd). Every answer
 * is counted in pagoda_http_responses_total by status and carries the CORS
 * headers when its Origin is allowed. */
#ifndef PAGODA_GATEWAY_HTTP_RESPOND_H
#define PAGODA_GATEWAY_HTTP_RESPOND_H

#include <jansson.h>
#include <stdbool.h>

#include "gateway/http_impl.h"

/* Queues r (taken) with the status, the CORS headers and the count. */
enum MHD_Result http_queue(http_server_t *s, struct MHD_Connection *c, unsigned status,
                           struct MHD_Response *r);
/* `text` with the content type, an Allow and a Retry-After header when set,
 * and X-Pagoda-Warning when warning is set (api_call_t.warning). */
enum MHD_Result http_respond_text_warn(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                       char *text, const char *type, const char *allow,
                                       const char *retry_after, const char *warning);
enum MHD_Result http_respond_text(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                  char *text, const char *type, const char *allow,
                                  const char *retry_after);
/* text (malloc'd) with one trailing newline (readable curl output); NULL stays NULL. */
char *http_with_newline(char *text);
enum MHD_Result http_respond_json(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                  json_t *j);
/* An error in the shape of `api` (NULL = OpenAI's, for routes of no surface). */
enum MHD_Result http_respond_api_error(http_server_t *s, struct MHD_Connection *c,
                                       const api_surface_t *api, const oai_error_t *e,
                                       const char *allow);
enum MHD_Result http_respond_oai_error(http_server_t *s, struct MHD_Connection *c,
                                       const oai_error_t *e, const char *allow);
enum MHD_Result http_respond_error(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                   const char *code, const char *allow, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Browser origins: the configured list ("A,B" / "A B", "*" = any) into
 * s->cors, and whether an Origin header's value is one of them. */
void http_cors_parse(http_server_t *s, const char *list);
bool http_origin_allowed(const http_server_t *s, const char *origin);

#endif
