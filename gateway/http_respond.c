/* http_respond.c — how every HTTP answer goes out: the status counted in
 * the metrics, CORS headers for an allowed browser origin (the origins
 * parsed from --cors-origin), text and JSON bodies, errors in an API
 * surface's shape (see http_respond.h). */
#include "gateway/http_respond.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

enum MHD_Result http_queue(http_server_t *s, struct MHD_Connection *c, unsigned status,
                             struct MHD_Response *r)
{
    /* an answer to an allowed browser origin lets that page read it; a
     * refused origin (403) gets no CORS header, so the page sees nothing */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (origin && http_origin_allowed(s, origin)) {
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
enum MHD_Result http_respond_text_warn(http_server_t *s, struct MHD_Connection *c, unsigned status,
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
    return http_queue(s, c, status, r);
}

/* respond_text_warn without a warning. */
enum MHD_Result http_respond_text(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                    char *text, const char *type, const char *allow,
                                    const char *retry_after)
{
    return http_respond_text_warn(s, c, status, text, type, allow, retry_after, NULL);
}

/* A JSON body plus one trailing newline (readable curl output). */
char *http_with_newline(char *text)
{
    if (!text)
        return NULL;
    size_t n = strlen(text);
    text = xrealloc(text, n + 2);
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}

enum MHD_Result http_respond_json(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                    json_t *j)
{
    char *text = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return http_respond_text(s, c, status, http_with_newline(text), "application/json", NULL, NULL);
}

/* An error in the shape of `api` (NULL = OpenAI's, for routes of no surface). */
enum MHD_Result http_respond_api_error(http_server_t *s, struct MHD_Connection *c,
                                         const api_surface_t *api, const oai_error_t *e,
                                         const char *allow)
{
    char *body = api ? api->error_body(e) : oai_error_json(e);
    return http_respond_text(s, c, (unsigned)e->status, http_with_newline(body), "application/json", allow,
                        e->status == 429 ? "1" : NULL);
}

enum MHD_Result http_respond_oai_error(http_server_t *s, struct MHD_Connection *c,
                                         const oai_error_t *e, const char *allow)
{
    return http_respond_api_error(s, c, NULL, e, allow);
}

enum MHD_Result http_respond_error(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *allow, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
enum MHD_Result http_respond_error(http_server_t *s, struct MHD_Connection *c, unsigned status,
                                     const char *code, const char *allow, const char *fmt, ...)
{
    oai_error_t e;
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset(&e, (int)status, code, fmt, ap);
    va_end(ap);
    return http_respond_oai_error(s, c, &e, allow);
}

/* ---- browser origins ---------------------------------------------------- */

/* Splits the configured list ("A,B" / "A B") into s->cors. */
void http_cors_parse(http_server_t *s, const char *list)
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
bool http_origin_allowed(const http_server_t *s, const char *origin)
{
    if (s->cors_any)
        return true;
    for (size_t i = 0; i < s->n_cors; i++)
        if (strcasecmp(s->cors[i], origin) == 0)
            return true;
    return false;
}

