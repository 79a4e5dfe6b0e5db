/* msg_frame.c — the frames of a message (see msg.h): the tag and
 * type frames checked around a body (proto_decode), and a message sent and
 * received over ZeroMQ (proto_send, proto_recv). The bodies themselves are
 * msg.c's (proto_encode, proto_decode_body). */
#include "proto/msg.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "common/errbuf.h"

/* errbuf_set, returning a proto_status instead of -1. */
static int decode_err(char *err, size_t err_len, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int decode_err(char *err, size_t err_len, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(err, err_len, fmt, ap);
    va_end(ap);
    return status;
}

int proto_decode(const proto_frame_t *frames, size_t n_frames, proto_msg_t *out, char *err,
                 size_t err_len)
{
    memset(out, 0, sizeof *out);
    if (n_frames != 3)
        return decode_err(err, err_len, PROTO_EFRAMES, "%zu frames, expected 3", n_frames);
    const proto_frame_t *tag = &frames[0], *type = &frames[1], *body = &frames[2];
    if (tag->len != PROTO_TAG_LEN || memcmp(tag->data, PROTO_TAG, PROTO_TAG_NAME_LEN) != 0)
        return decode_err(err, err_len, PROTO_ETAG, "frame 1 is not a %.*s tag",
                          PROTO_TAG_NAME_LEN, PROTO_TAG);
    uint8_t d1 = tag->data[4], d2 = tag->data[5];
    if (d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9')
        return decode_err(err, err_len, PROTO_ETAG, "tag version is not two digits");
    int version = (d1 - '0') * 10 + (d2 - '0');
    if (version != PROTO_VERSION)
        return decode_err(err, err_len, PROTO_EVERSION, "protocol version %d, expected %d",
                          version, PROTO_VERSION);
    if (type->len != 1)
        return decode_err(err, err_len, PROTO_EFRAMES, "type frame of %zu bytes", type->len);
    return proto_decode_body(type->data[0], body->data, body->len, out, err, err_len);
}

/* ---- over ZeroMQ ------------------------------------------------------- */

static void free_body(void *data, void *hint)
{
    free(data);
}

int proto_send(void *sock, const proto_peer_t *to, const proto_msg_t *m, int flags)
{
    uint8_t *body;
    size_t body_len;
    if (proto_encode(m, &body, &body_len) != PROTO_OK) {
        errno = EMSGSIZE;
        return PROTO_ESYS;
    }
    uint8_t type = (uint8_t)m->type;
    /* Later frames of a multipart message go out together with the first
     * (ZeroMQ queues them atomically), so only the first can block. */
    if (to && zmq_send(sock, to->id, to->len, flags | ZMQ_SNDMORE) < 0)
        goto err;
    if (zmq_send(sock, PROTO_TAG, PROTO_TAG_LEN, (to ? 0 : flags) | ZMQ_SNDMORE) < 0)
        goto err;
    if (zmq_send(sock, &type, 1, ZMQ_SNDMORE) < 0)
        goto err;
    zmq_msg_t msg;
    zmq_msg_init_data(&msg, body, body_len, free_body, NULL); /* takes body */
    if (zmq_msg_send(&msg, sock, 0) < 0) {
        int e = errno;
        zmq_msg_close(&msg);
        errno = e;
        return PROTO_ESYS;
    }
    return PROTO_OK;
err:
    free(body);
    return PROTO_ESYS;
}

int proto_recv(void *sock, proto_peer_t *from, proto_msg_t *out, int flags, char *err,
               size_t err_len)
{
    enum { MAX_PARTS = 4 };
    zmq_msg_t parts[MAX_PARTS];
    size_t n_parts = 0, n_total = 0;
    bool oversized = false;
    memset(out, 0, sizeof *out);
    if (from)
        from->len = 0;
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        /* Only the first part can be missing; the rest arrive with it. */
        if (zmq_msg_recv(&part, sock, n_total == 0 ? flags : 0) < 0) {
            int e = errno;
            zmq_msg_close(&part);
            for (size_t i = 0; i < n_parts; i++)
                zmq_msg_close(&parts[i]);
            errno = e;
            return PROTO_ESYS;
        }
        n_total++;
        bool more = zmq_msg_more(&part);
        if (n_parts < MAX_PARTS)
            parts[n_parts++] = part;
        else
            zmq_msg_close(&part);
        if (!more)
            break;
    }
    size_t first = 0;
    int rc;
    if (from) {
        size_t n = zmq_msg_size(&parts[0]);
        if (n > PROTO_MAX_IDENTITY)
            oversized = true;
        else {
            memcpy(from->id, zmq_msg_data(&parts[0]), n);
            from->len = n;
        }
        first = 1;
    }
    size_t n_frames = n_total - first;
    if (oversized || n_total > n_parts || n_frames != 3) {
        rc = decode_err(err, err_len, PROTO_EFRAMES, "%zu frames, expected 3", n_frames);
    } else {
        proto_frame_t frames[3];
        for (size_t i = 0; i < 3; i++) {
            frames[i].data = zmq_msg_data(&parts[first + i]);
            frames[i].len = zmq_msg_size(&parts[first + i]);
        }
        rc = proto_decode(frames, 3, out, err, err_len);
    }
    for (size_t i = 0; i < n_parts; i++)
        zmq_msg_close(&parts[i]);
    return rc;
}
