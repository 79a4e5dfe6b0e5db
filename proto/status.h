/* status.h — the return codes of the wire layer: proto_decode*() and
 * proto_recv() (proto/msg.h) and the msgpack reader under them
 * (proto/mpread.h, whose sticky status is one of these). A header of its
 * own so the reader needs nothing of the message module above it. */
#ifndef PAGODA_PROTO_STATUS_H
#define PAGODA_PROTO_STATUS_H

/* Return codes of proto_decode*() and proto_recv(). */
typedef enum proto_status {
    PROTO_OK = 0,
    PROTO_ESYS = -1,        /* ZeroMQ call failed; errno says why (EAGAIN, EINTR...) */
    PROTO_EFRAMES = -2,     /* wrong number of frames, or an empty/oversized frame */
    PROTO_ETAG = -3,        /* frame 1 is not a PGDA tag */
    PROTO_EVERSION = -4,    /* PGDA tag with an unsupported version */
    PROTO_ETYPE = -5,       /* unknown message type byte */
    PROTO_EMSGPACK = -6,    /* body is not well-formed msgpack (truncated, bad byte, trailing data) */
    PROTO_EFIELD = -7,      /* wrong type, missing required key, duplicate key */
    PROTO_ERANGE = -8,      /* value, length or count outside the documented limit */
} proto_status_t;

#endif
