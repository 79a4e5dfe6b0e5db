/* oai_error.h — the error record every API surface fills: an HTTP status,
 * an OpenAI-style type and code, the offending field and a message. Parsers
 * and the core fill it; each surface renders it in its own shape (OpenAI's
 * {"error":{...}} by oai_error_object in gateway/oai.h, Anthropic's and the
 * Responses API's in their files). No heap memory.
 *
 * Also the one constructor of a JSON string from untrusted bytes every
 * surface's renderer uses (oai_json_text). */
#ifndef PAGODA_GATEWAY_OAI_ERROR_H
#define PAGODA_GATEWAY_OAI_ERROR_H

#include <jansson.h>
#include <stdarg.h>

#include "proto/msg.h"

/* An OpenAI-shaped error: {"error":{"message","type","param","code"}}.
 * Filled by the parser and by oai_error_set(); no heap memory. */
typedef struct oai_error {
    int status;            /* HTTP status: 400, 401, 403, 404, 405, 413, 429, 500, 503, 504 */
    const char *type;      /* static string, e.g. "invalid_request_error" */
    const char *code;      /* static string or NULL → JSON null */
    char param[128];       /* offending field ("messages[2].content", "temperature"), "" → null */
    char message[512];     /* human-readable, names the field and the rule */
} oai_error_t;

/* Sets *e to `status` with the type and default code of the status table:
 *   400 invalid_request_error  (code null)
 *   401 authentication_error   invalid_api_key
 *   403 permission_error       insufficient_permissions
 *   404 not_found_error        not_found (model_not_found via oai_error_model_not_found)
 *   405 invalid_request_error  method_not_allowed
 *   413 invalid_request_error  request_too_large
 *   429 rate_limit_error       rate_limit_exceeded
 *   500 server_error           internal_error
 *   503 server_error           service_unavailable
 *   504 server_error           timeout
 * (other statuses: server_error, code null). `param` may be NULL. */
void oai_error_set(oai_error_t *e, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* 404 for an unknown model, code "model_not_found", param "model". */
void oai_error_model_not_found(oai_error_t *e, const char *model);
/* A worker's typed error (proto/msg.h proto_err_t) as the client sees it —
 * the one table from wire cause to HTTP status and OpenAI code:
 *   bad_request     400 invalid_request_error  (code null)
 *   context_length  400 invalid_request_error  context_length_exceeded
 *   duplicate_id    400 invalid_request_error  (code null)
 *   unavailable     503 server_error           service_unavailable
 *   deadline        504 server_error           timeout
 *   engine          500 server_error           internal_error
 *   not_registered, unknown causes: 500 server_error internal_error */
void oai_error_from_worker(oai_error_t *e, proto_err_t cause, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* oai_error_set with a va_list and the OpenAI code given: `code` (a static
 * string) replaces the status table's unless NULL; param is null. */
void oai_error_vset(oai_error_t *e, int status, const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));
/* A JSON string from bytes that may not be UTF-8 (tokenizer output, model
 * text): invalid sequences become U+FFFD. New reference; the one such
 * constructor every surface's renderer uses. */
json_t *oai_json_text(const char *s, size_t len);
/* oai_error_set with a va_list (the status table's type and code). */
void oai_error_vset_param(oai_error_t *e, int status, const char *param, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

#endif
