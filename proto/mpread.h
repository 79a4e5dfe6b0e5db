/* mpread.h — a bounded, allocation-free msgpack reader.
 *
 * A cursor over (buf, len) that reads one msgpack value at a time in place,
 * following the msgpack specification (https://github.com/msgpack/msgpack/
 * blob/master/spec.md). It exists because the wire decoder (proto/msg.c) must
 * check every count against a field limit *before* allocating anything, which
 * msgpack-c's unpacker does not allow (see proto/msg.h).
 *
 * Every read checks the remaining length first; on any failure the reader
 * enters a sticky error state (r->status < 0, r->err names the problem) and
 * every later call fails too, so callers may check once at the end of a
 * group of reads. Status values are those of proto_status_t:
 *   PROTO_EMSGPACK  truncated input, the never-used byte 0xc1, trailing data
 *   PROTO_EFIELD    a value of another type than asked for
 *   PROTO_ERANGE    a number that does not fit the requested C type, or
 *                   nesting deeper than the skip limit
 *
 * Nothing is allocated; strings come back as pointers into buf.
 */
#ifndef PAGODA_PROTO_MPREAD_H
#define PAGODA_PROTO_MPREAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mpread {
    const uint8_t *p;     /* next byte */
    const uint8_t *end;   /* one past the last byte */
    int status;           /* 0 ok, else a negative proto_status_t (sticky) */
    char err[96];         /* what failed, for logs */
} mpread_t;

/* Coarse type of the next value, without consuming it. */
typedef enum mpread_kind {
    MPREAD_NONE = 0,      /* end of input or error */
    MPREAD_NIL,
    MPREAD_BOOL,
    MPREAD_INT,           /* any signed or unsigned integer encoding */
    MPREAD_FLOAT,         /* float32 or float64 */
    MPREAD_STR,
    MPREAD_BIN,
    MPREAD_ARRAY,
    MPREAD_MAP,
    MPREAD_EXT,
} mpread_kind_t;

void mpread_init(mpread_t *r, const uint8_t *buf, size_t len);
/* Marks the reader failed with status and a printf-style message (the first
 * failure wins). Returns -1 so callers can `return mpread_fail(...)`. */
int mpread_fail(mpread_t *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

mpread_kind_t mpread_peek(const mpread_t *r);
size_t mpread_remaining(const mpread_t *r);

/* Each returns 0 and the value, or -1 (reader failed). */
int mpread_nil(mpread_t *r);
int mpread_bool(mpread_t *r, bool *v);
/* Any integer encoding whose value is ≥ 0 (u64 range). */
int mpread_uint(mpread_t *r, uint64_t *v);
/* Any integer encoding whose value fits int64. */
int mpread_int(mpread_t *r, int64_t *v);
/* float32, float64, or any integer (converted). NaN/inf are returned as is. */
int mpread_float(mpread_t *r, double *v);
/* str: *s points into the buffer, *n bytes, not NUL-terminated. */
int mpread_str(mpread_t *r, const uint8_t **s, uint32_t *n);
/* bin: raw bytes. */
int mpread_bin(mpread_t *r, const uint8_t **s, uint32_t *n);
/* Array / map headers: *n elements (pairs for a map) follow. The count is
 * checked against the bytes left (each element takes ≥ 1 byte, each pair ≥ 2),
 * so a caller may allocate *n elements without trusting the sender further. */
int mpread_array(mpread_t *r, uint32_t *n);
int mpread_map(mpread_t *r, uint32_t *n);
/* Skips one value of any type, containers included, nesting at most
 * max_depth levels. */
int mpread_skip(mpread_t *r, int max_depth);

#endif
