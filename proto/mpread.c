/* mpread.c — bounded msgpack reader (see mpread.h).
 *
 * Format bytes, from the msgpack spec:
 *   0x00-0x7f positive fixint    0x80-0x8f fixmap    0x90-0x9f fixarray
 *   0xa0-0xbf fixstr             0xc0 nil  0xc1 (never used)  0xc2/0xc3 false/true
 *   0xc4-0xc6 bin 8/16/32        0xc7-0xc9 ext 8/16/32  0xca/0xcb float 32/64
 *   0xcc-0xcf uint 8..64         0xd0-0xd3 int 8..64    0xd4-0xd8 fixext 1..16
 *   0xd9-0xdb str 8/16/32        0xdc/0xdd array 16/32  0xde/0xdf map 16/32
 *   0xe0-0xff negative fixint
 * Multi-byte numbers are big-endian.
 */
#include "proto/mpread.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "proto/status.h"

void mpread_init(mpread_t *r, const uint8_t *buf, size_t len)
{
    static const uint8_t empty[1];
    if (!buf) /* arithmetic on NULL is undefined even for +0 */
        buf = empty, len = 0;
    r->p = buf;
    r->end = buf + len;
    r->status = 0;
    r->err[0] = '\0';
}

int mpread_fail(mpread_t *r, int status, const char *fmt, ...)
{
    if (r->status == 0) {
        r->status = status;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->err, sizeof r->err, fmt, ap);
        va_end(ap);
    }
    return -1;
}

size_t mpread_remaining(const mpread_t *r)
{
    return (size_t)(r->end - r->p);
}

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* Takes n bytes; NULL (and failure) when fewer remain. */
static const uint8_t *take(mpread_t *r, size_t n)
{
    if (r->status != 0)
        return NULL;
    if (mpread_remaining(r) < n) {
        mpread_fail(r, PROTO_EMSGPACK, "truncated msgpack");
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += n;
    return p;
}

mpread_kind_t mpread_peek(const mpread_t *r)
{
    if (r->status != 0 || r->p >= r->end)
        return MPREAD_NONE;
    uint8_t b = *r->p;
    if (b <= 0x7f || b >= 0xe0)
        return MPREAD_INT;
    if (b <= 0x8f)
        return MPREAD_MAP;
    if (b <= 0x9f)
        return MPREAD_ARRAY;
    if (b <= 0xbf)
        return MPREAD_STR;
    switch (b) {
    case 0xc0: return MPREAD_NIL;
    case 0xc2: case 0xc3: return MPREAD_BOOL;
    case 0xc4: case 0xc5: case 0xc6: return MPREAD_BIN;
    case 0xc7: case 0xc8: case 0xc9: return MPREAD_EXT;
    case 0xca: case 0xcb: return MPREAD_FLOAT;
    case 0xcc: case 0xcd: case 0xce: case 0xcf:
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: return MPREAD_INT;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8: return MPREAD_EXT;
    case 0xd9: case 0xda: case 0xdb: return MPREAD_STR;
    case 0xdc: case 0xdd: return MPREAD_ARRAY;
    case 0xde: case 0xdf: return MPREAD_MAP;
    default: return MPREAD_NONE; /* 0xc1 */
    }
}

static const char *kind_name(mpread_kind_t k)
{
    static const char *const names[] = {"nothing", "nil", "bool", "int", "float",
                                        "str", "bin", "array", "map", "ext"};
    return names[k];
}

/* Fails with the right status when the next value is not of kind `want`. */
static int expect(mpread_t *r, mpread_kind_t want)
{
    if (r->status != 0)
        return -1;
    if (r->p >= r->end)
        return mpread_fail(r, PROTO_EMSGPACK, "truncated msgpack");
    mpread_kind_t k = mpread_peek(r);
    if (k == MPREAD_NONE)
        return mpread_fail(r, PROTO_EMSGPACK, "invalid msgpack byte 0x%02x", *r->p);
    if (k != want)
        return mpread_fail(r, PROTO_EFIELD, "expected %s, got %s", kind_name(want), kind_name(k));
    return 0;
}

int mpread_nil(mpread_t *r)
{
    if (expect(r, MPREAD_NIL) < 0)
        return -1;
    r->p++;
    return 0;
}

int mpread_bool(mpread_t *r, bool *v)
{
    if (expect(r, MPREAD_BOOL) < 0)
        return -1;
    *v = *r->p++ == 0xc3;
    return 0;
}

/* Reads any integer as (negative?, magnitude-or-value). For negative values
 * *neg is set and *v holds the value as int64 bits. */
static int read_integer(mpread_t *r, bool *neg, uint64_t *u, int64_t *s)
{
    if (expect(r, MPREAD_INT) < 0)
        return -1;
    uint8_t b = *r->p++;
    const uint8_t *q;
    *neg = false;
    if (b <= 0x7f) {
        *u = b;
        return 0;
    }
    if (b >= 0xe0) {
        *neg = true;
        *s = (int8_t)b;
        return 0;
    }
    if (b >= 0xcc && b <= 0xcf) {
        int n = 1 << (b - 0xcc);
        if (!(q = take(r, (size_t)n)))
            return -1;
        *u = be(q, n);
        return 0;
    }
    /* 0xd0..0xd3: signed 8..64 */
    int n = 1 << (b - 0xd0);
    if (!(q = take(r, (size_t)n)))
        return -1;
    uint64_t raw = be(q, n);
    int64_t v;
    switch (n) {
    case 1: v = (int8_t)raw; break;
    case 2: v = (int16_t)raw; break;
    case 4: v = (int32_t)raw; break;
    default: memcpy(&v, &raw, sizeof v); break;
    }
    if (v < 0) {
        *neg = true;
        *s = v;
    } else {
        *u = (uint64_t)v;
    }
    return 0;
}

int mpread_uint(mpread_t *r, uint64_t *v)
{
    bool neg;
    uint64_t u = 0;
    int64_t s = 0;
    if (read_integer(r, &neg, &u, &s) < 0)
        return -1;
    if (neg)
        return mpread_fail(r, PROTO_ERANGE, "negative integer %lld where unsigned expected",
                           (long long)s);
    *v = u;
    return 0;
}

int mpread_int(mpread_t *r, int64_t *v)
{
    bool neg;
    uint64_t u = 0;
    int64_t s = 0;
    if (read_integer(r, &neg, &u, &s) < 0)
        return -1;
    if (neg) {
        *v = s;
        return 0;
    }
    if (u > (uint64_t)INT64_MAX)
        return mpread_fail(r, PROTO_ERANGE, "integer %llu does not fit int64",
                           (unsigned long long)u);
    *v = (int64_t)u;
    return 0;
}

int mpread_float(mpread_t *r, double *v)
{
    if (r->status != 0)
        return -1;
    mpread_kind_t k = mpread_peek(r);
    if (k == MPREAD_INT) {
        bool neg;
        uint64_t u = 0;
        int64_t s = 0;
        if (read_integer(r, &neg, &u, &s) < 0)
            return -1;
        *v = neg ? (double)s : (double)u;
        return 0;
    }
    if (expect(r, MPREAD_FLOAT) < 0)
        return -1;
    uint8_t b = *r->p++;
    const uint8_t *q;
    if (b == 0xca) {
        if (!(q = take(r, 4)))
            return -1;
        uint32_t raw = (uint32_t)be(q, 4);
        float f;
        memcpy(&f, &raw, sizeof f);
        *v = f;
    } else {
        if (!(q = take(r, 8)))
            return -1;
        uint64_t raw = be(q, 8);
        memcpy(v, &raw, sizeof *v);
    }
    return 0;
}

/* Length of a str/bin/ext payload after its format byte was consumed. */
static int read_len(mpread_t *r, int nbytes, uint32_t *n)
{
    const uint8_t *q = take(r, (size_t)nbytes);
    if (!q)
        return -1;
    *n = (uint32_t)be(q, nbytes);
    return 0;
}

int mpread_str(mpread_t *r, const uint8_t **s, uint32_t *n)
{
    if (expect(r, MPREAD_STR) < 0)
        return -1;
    uint8_t b = *r->p++;
    if (b >= 0xa0 && b <= 0xbf)
        *n = b & 0x1f;
    else if (read_len(r, 1 << (b - 0xd9), n) < 0)
        return -1;
    const uint8_t *q = take(r, *n);
    if (!q)
        return -1;
    *s = q;
    return 0;
}

int mpread_bin(mpread_t *r, const uint8_t **s, uint32_t *n)
{
    if (expect(r, MPREAD_BIN) < 0)
        return -1;
    uint8_t b = *r->p++;
    if (read_len(r, 1 << (b - 0xc4), n) < 0)
        return -1;
    const uint8_t *q = take(r, *n);
    if (!q)
        return -1;
    *s = q;
    return 0;
}

static int container(mpread_t *r, mpread_kind_t kind, uint32_t *n)
{
    if (expect(r, kind) < 0)
        return -1;
    uint8_t b = *r->p++;
    uint8_t fix = kind == MPREAD_MAP ? 0x80 : 0x90;
    uint8_t x16 = kind == MPREAD_MAP ? 0xde : 0xdc;
    if (b >= fix && b <= fix + 0x0f)
        *n = b & 0x0f;
    else if (read_len(r, b == x16 ? 2 : 4, n) < 0)
        return -1;
    /* Each element takes at least one byte: a count larger than what is
     * left cannot be honest, and must not size an allocation. */
    uint64_t min_bytes = (uint64_t)*n * (kind == MPREAD_MAP ? 2 : 1);
    if (min_bytes > mpread_remaining(r))
        return mpread_fail(r, PROTO_EMSGPACK, "%s of %u elements in %zu bytes (truncated)",
                           kind_name(kind), *n, mpread_remaining(r));
    return 0;
}

int mpread_array(mpread_t *r, uint32_t *n)
{
    return container(r, MPREAD_ARRAY, n);
}

int mpread_map(mpread_t *r, uint32_t *n)
{
    return container(r, MPREAD_MAP, n);
}

int mpread_skip(mpread_t *r, int max_depth)
{
    if (r->status != 0)
        return -1;
    if (max_depth < 0)
        return mpread_fail(r, PROTO_ERANGE, "msgpack nested too deeply");
    mpread_kind_t k = mpread_peek(r);
    const uint8_t *s;
    uint32_t n;
    switch (k) {
    case MPREAD_NONE:
        if (r->p >= r->end)
            return mpread_fail(r, PROTO_EMSGPACK, "truncated msgpack");
        return mpread_fail(r, PROTO_EMSGPACK, "invalid msgpack byte 0x%02x", *r->p);
    case MPREAD_NIL:
        return mpread_nil(r);
    case MPREAD_BOOL: {
        bool b;
        return mpread_bool(r, &b);
    }
    case MPREAD_INT: {
        bool neg;
        uint64_t u;
        int64_t i;
        return read_integer(r, &neg, &u, &i);
    }
    case MPREAD_FLOAT: {
        double d;
        return mpread_float(r, &d);
    }
    case MPREAD_STR:
        return mpread_str(r, &s, &n);
    case MPREAD_BIN:
        return mpread_bin(r, &s, &n);
    case MPREAD_EXT: {
        uint8_t b = *r->p++;
        if (b >= 0xd4)            /* fixext 1,2,4,8,16: type byte + data */
            n = 1u << (b - 0xd4);
        else if (read_len(r, 1 << (b - 0xc7), &n) < 0)
            return -1;
        return take(r, (size_t)n + 1) ? 0 : -1;
    }
    case MPREAD_ARRAY:
        if (mpread_array(r, &n) < 0)
            return -1;
        for (uint32_t i = 0; i < n; i++)
            if (mpread_skip(r, max_depth - 1) < 0)
                return -1;
        return 0;
    case MPREAD_MAP:
        if (mpread_map(r, &n) < 0)
            return -1;
        for (uint64_t i = 0; i < 2 * (uint64_t)n; i++)
            if (mpread_skip(r, max_depth - 1) < 0)
                return -1;
        return 0;
    }
    return -1;
}
