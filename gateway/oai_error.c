/* oai_error.c — the error record every API surface fills, its status table
 * and the worker's causes (see oai_error.h). */
#include "gateway/oai_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

/* ====================================================================== */
/* errors                                                                  */
/* ====================================================================== */

typedef struct {
    int status;
    const char *type;
    const char *code;
} status_row_t;

static const status_row_t STATUS_TABLE[] = {
    {400, "invalid_request_error", NULL},
    {401, "authentication_error", "invalid_api_key"},
    {403, "permission_error", "insufficient_permissions"},
    {404, "not_found_error", "not_found"},
    {405, "invalid_request_error", "method_not_allowed"},
    {413, "invalid_request_error", "request_too_large"},
    {429, "rate_limit_error", "rate_limit_exceeded"},
    {500, "server_error", "internal_error"},
    {503, "server_error", "service_unavailable"},
    {504, "server_error", "timeout"},
};

void oai_error_vset_param(oai_error_t *e, int status, const char *param, const char *fmt, va_list ap)
{
    e->status = status;
    e->type = "server_error";
    e->code = NULL;
    for (size_t i = 0; i < sizeof(STATUS_TABLE) / sizeof(STATUS_TABLE[0]); i++) {
        if (STATUS_TABLE[i].status == status) {
            e->type = STATUS_TABLE[i].type;
            e->code = STATUS_TABLE[i].code;
        }
    }
    snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
    vsnprintf(e->message, sizeof(e->message), fmt, ap);
}

void oai_error_vset(oai_error_t *e, int status, const char *code, const char *fmt, va_list ap)
{
    oai_error_vset_param(e, status, NULL, fmt, ap);
    if (code)
        e->code = code;
}

void oai_error_set(oai_error_t *e, int status, const char *param, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset_param(e, status, param, fmt, ap);
    va_end(ap);
}

void oai_error_model_not_found(oai_error_t *e, const char *model)
{
    oai_error_set(e, 404, "model", "The model '%.200s' does not exist or is not served here. "
                                   "GET /v1/models lists the models.", model ? model : "");
    e->code = "model_not_found";
}

/* proto_err_t → HTTP status and OpenAI code (oai.h). */
static const struct {
    proto_err_t cause;
    int status;
    const char *code; /* NULL: the status table's */
} WORKER_ERR_TABLE[] = {
    {PROTO_ERR_BAD_REQUEST, 400, NULL},
    {PROTO_ERR_CONTEXT_LENGTH, 400, "context_length_exceeded"},
    {PROTO_ERR_DUPLICATE_ID, 400, NULL},
    {PROTO_ERR_UNAVAILABLE, 503, NULL},
    {PROTO_ERR_DEADLINE, 504, NULL},
    {PROTO_ERR_ENGINE, 500, NULL},
};

void oai_error_from_worker(oai_error_t *e, proto_err_t cause, const char *fmt, ...)
{
    int status = 500;
    const char *code = NULL;
    for (size_t i = 0; i < sizeof WORKER_ERR_TABLE / sizeof WORKER_ERR_TABLE[0]; i++) {
        if (WORKER_ERR_TABLE[i].cause == cause) {
            status = WORKER_ERR_TABLE[i].status;
            code = WORKER_ERR_TABLE[i].code;
        }
    }
    va_list ap;
    va_start(ap, fmt);
    oai_error_vset_param(e, status, NULL, fmt, ap);
    va_end(ap);
    if (code)
        e->code = code;
}

json_t *oai_json_text(const char *s, size_t len)
{
    size_t n;
    char *clean = utf8_sanitize(s ? s : "", s ? len : 0, &n);
    json_t *j = json_stringn_nocheck(clean, n);
    free(clean);
    if (!j)
        abort(); /* jansson only fails on OOM here */
    return j;
}
