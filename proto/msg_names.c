/* msg_names.c — the names of the protocol's message types, finish reasons,
 * request kinds, admin ops, error causes and decoder statuses (declared in
 * msg.h and status.h), and the HTTP-like code of each error cause. */
#include "proto/msg.h"

#include <stddef.h>


const char *proto_type_name(int type)
{
    static const char *const names[] = {NULL,     "REGISTER", "HEARTBEAT", "SUBMIT", "CANCEL",
                                        "EVENT",  "ERROR",    "DRAIN",     "SHUTDOWN", "KV",
                                        "LORA",   "LORA_ACK"};
    if (type < PROTO_TYPE_MIN || type > PROTO_TYPE_MAX)
        return "UNKNOWN";
    return names[type];
}

static const char *const finish_names[] = {NULL, "stop", "length", "cancelled", "error",
                                           "timeout"};
#define N_FINISH ((int)(sizeof finish_names / sizeof finish_names[0]))

const char *proto_finish_name(proto_finish_t f)
{
    if ((int)f <= 0 || (int)f >= N_FINISH)
        return NULL;
    return finish_names[f];
}

static const char *const kind_names[] = {"chat", "completion"};

const char *proto_kind_name(proto_kind_t k)
{
    return (int)k == 1 ? kind_names[1] : kind_names[0];
}

const char *proto_op_name(proto_op_t op)
{
    switch (op) {
    case PROTO_OP_TOKENIZE: return "tokenize";
    case PROTO_OP_DETOKENIZE: return "detokenize";
    case PROTO_OP_EMBED: return "embed";
    case PROTO_OP_RANK: return "rank";
    default: return "generate";
    }
}

/* The error-cause table of msg.h: name and ERROR code, by proto_err_t. */
static const struct {
    const char *name;
    uint32_t code;
} err_table[] = {
    [PROTO_ERR_NONE] = {"unspecified", PROTO_CODE_INTERNAL},
    [PROTO_ERR_BAD_REQUEST] = {"bad_request", PROTO_CODE_BAD_REQUEST},
    [PROTO_ERR_CONTEXT_LENGTH] = {"context_length", PROTO_CODE_TOO_LONG},
    [PROTO_ERR_DUPLICATE_ID] = {"duplicate_id", PROTO_CODE_BAD_REQUEST},
    [PROTO_ERR_UNAVAILABLE] = {"unavailable", PROTO_CODE_UNAVAILABLE},
    [PROTO_ERR_DEADLINE] = {"deadline", 504},
    [PROTO_ERR_ENGINE] = {"engine", PROTO_CODE_INTERNAL},
    [PROTO_ERR_NOT_REGISTERED] = {"not_registered", PROTO_CODE_NOT_REGISTERED},
};
_Static_assert(sizeof err_table / sizeof err_table[0] == PROTO_ERR_LAST + 1,
               "one err_table row per proto_err_t");

const char *proto_err_name(uint32_t err)
{
    return err <= PROTO_ERR_LAST ? err_table[err].name : err_table[0].name;
}

uint32_t proto_err_code(uint32_t err)
{
    return err <= PROTO_ERR_LAST ? err_table[err].code : PROTO_CODE_INTERNAL;
}

proto_err_t proto_error_cause(const proto_error_t *e)
{
    if (e->err != PROTO_ERR_NONE && e->err <= PROTO_ERR_LAST)
        return (proto_err_t)e->err;
    switch (e->code) {
    case PROTO_CODE_NOT_REGISTERED: return PROTO_ERR_NOT_REGISTERED;
    case PROTO_CODE_TOO_LONG: return PROTO_ERR_CONTEXT_LENGTH;
    case PROTO_CODE_UNAVAILABLE: return PROTO_ERR_UNAVAILABLE;
    default: return e->code >= 400 && e->code < 500 ? PROTO_ERR_BAD_REQUEST : PROTO_ERR_ENGINE;
    }
}

proto_err_t proto_event_cause(const proto_event_t *ev)
{
    if (ev->err != PROTO_ERR_NONE && ev->err <= PROTO_ERR_LAST)
        return (proto_err_t)ev->err;
    return ev->finish == PROTO_FINISH_TIMEOUT ? PROTO_ERR_DEADLINE : PROTO_ERR_ENGINE;
}

const char *proto_status_name(int status)
{
    switch (status) {
    case PROTO_OK: return "ok";
    case PROTO_ESYS: return "zeromq error";
    case PROTO_EFRAMES: return "wrong frames";
    case PROTO_ETAG: return "not a pagoda protocol tag";
    case PROTO_EVERSION: return "unsupported protocol version";
    case PROTO_ETYPE: return "unknown message type";
    case PROTO_EMSGPACK: return "malformed msgpack";
    case PROTO_EFIELD: return "bad field";
    case PROTO_ERANGE: return "value out of range";
    default: return "unknown status";
    }
}
