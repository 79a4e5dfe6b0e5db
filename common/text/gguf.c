/* gguf.c — reader for GGUF model files (see gguf.h for the format).
 *
 * The parser walks the buffer with a bounds-checked cursor; every read that
 * would pass the end fails with a message naming the field. Counts that size
 * an allocation (n_kv, n_tensors, array lengths) are checked against the bytes
 * left before anything is allocated, so a hostile header cannot make us
 * allocate more than a small multiple of the file size.
 */
#include "common/text/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/xalloc.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_ALIGNMENT (1u << 30)

size_t gguf_scalar_size(uint32_t t)
{
    switch (t) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
    case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
    case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
    case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- bounds-checked cursor ----------------------------------------------- */

typedef struct cursor {
    const uint8_t *buf;
    size_t len;
    size_t pos;
    char *err;
    size_t errlen;
} cursor_t;

static int fail(cursor_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(cursor_t *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(c->err, c->errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static size_t left(const cursor_t *c) { return c->len - c->pos; }

static int rd_bytes(cursor_t *c, void *out, size_t n, const char *what)
{
    if (left(c) < n)
        return fail(c, "truncated file: %s at offset %zu needs %zu bytes, %zu left",
                    what, c->pos, n, left(c));
    memcpy(out, c->buf + c->pos, n);
    c->pos += n;
    return 0;
}

/* Little-endian loads: the format is LE whatever the host is. */
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static int rd_u32(cursor_t *c, uint32_t *v, const char *what)
{
    uint8_t b[4] = {0};
    if (rd_bytes(c, b, 4, what))
        return -1;
    *v = le32(b);
    return 0;
}

static int rd_u64(cursor_t *c, uint64_t *v, const char *what)
{
    uint8_t b[8] = {0};
    if (rd_bytes(c, b, 8, what))
        return -1;
    *v = le64(b);
    return 0;
}

static int rd_str(cursor_t *c, gguf_str_t *s, const char *what)
{
    uint64_t n;
    size_t at = c->pos;
    if (rd_u64(c, &n, what))
        return -1;
    if (n > left(c))
        return fail(c, "%s at offset %zu: string length %llu past end of file (%zu bytes left)",
                    what, at, (unsigned long long)n, left(c));
    s->ptr = (const char *)c->buf + c->pos;
    s->len = n;
    c->pos += (size_t)n;
    return 0;
}

/* Printable copy of a (possibly hostile) name for error messages. */
static const char *printable(gguf_str_t s, char out[72])
{
    size_t n = s.len < 64 ? (size_t)s.len : 64;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        out[i] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s.len > 64) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = 0;
    return out;
}

/* ---- parsing ------------------------------------------------------------- */

static int parse_value(cursor_t *c, gguf_kv_t *kv, const char *kname)
{
    size_t at = c->pos;
    switch (kv->type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
    case GGUF_TYPE_FLOAT32: case GGUF_TYPE_FLOAT64: case GGUF_TYPE_BOOL: {
        size_t sz = gguf_scalar_size(kv->type);
        uint8_t b[8] = {0};
        if (left(c) < sz)
            return fail(c, "key '%s': value at offset %zu past end of file", kname, at);
        memcpy(b, c->buf + c->pos, sz);
        c->pos += sz;
        switch (kv->type) {
        case GGUF_TYPE_UINT8: kv->v.u = b[0]; break;
        case GGUF_TYPE_BOOL: kv->v.u = b[0] != 0; break;
        case GGUF_TYPE_UINT16: kv->v.u = le16(b); break;
        case GGUF_TYPE_UINT32: kv->v.u = le32(b); break;
        case GGUF_TYPE_UINT64: kv->v.u = le64(b); break;
        case GGUF_TYPE_INT8: kv->v.i = (int8_t)b[0]; break;
        case GGUF_TYPE_INT16: kv->v.i = (int16_t)le16(b); break;
        case GGUF_TYPE_INT32: kv->v.i = (int32_t)le32(b); break;
        case GGUF_TYPE_INT64: kv->v.i = (int64_t)le64(b); break;
        case GGUF_TYPE_FLOAT32: {
            uint32_t u = le32(b);
            float f;
            memcpy(&f, &u, 4);
            kv->v.f = f;
            break;
        }
        case GGUF_TYPE_FLOAT64: {
            uint64_t u = le64(b);
            memcpy(&kv->v.f, &u, 8);
            break;
        }
        }
        return 0;
    }
    case GGUF_TYPE_STRING:
        return rd_str(c, &kv->v.s, "string value");
    case GGUF_TYPE_ARRAY: {
        uint32_t et;
        uint64_t n;
        if (rd_u32(c, &et, "array element type") || rd_u64(c, &n, "array count"))
            return -1;
        if (et == GGUF_TYPE_ARRAY)
            return fail(c, "key '%s': nested arrays are not supported", kname);
        if (et >= GGUF_TYPE_COUNT)
            return fail(c, "key '%s': unknown array element type %u", kname, et);
        kv->arr_type = et;
        /* Every element takes at least its scalar size (8 for a string's
         * length), so the count is bounded by the bytes left: check before
         * allocating anything. */
        size_t esz = et == GGUF_TYPE_STRING ? 8 : gguf_scalar_size(et);
        if (n > left(c) / esz)
            return fail(c, "key '%s': array count %llu past end of file (%zu bytes left)",
                        kname, (unsigned long long)n, left(c));
        kv->arr_n = n;
        kv->arr_data = c->buf + c->pos;
        if (et != GGUF_TYPE_STRING) {
            c->pos += (size_t)n * esz;
            return 0;
        }
        kv->arr_str = xcalloc(n ? (size_t)n : 1, sizeof(gguf_str_t));
        for (uint64_t i = 0; i < n; i++) {
            if (rd_str(c, &kv->arr_str[i], "array string"))
                return fail(c, "key '%s': string %llu of %llu past end of file", kname,
                            (unsigned long long)i, (unsigned long long)n);
        }
        return 0;
    }
    default:
        return fail(c, "key '%s': unknown value type %u", kname, kv->type);
    }
}

static int cmp_str(gguf_str_t a, gguf_str_t b)
{
    size_t n = a.len < b.len ? (size_t)a.len : (size_t)b.len;
    int r = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (r)
        return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

static int cmp_str_ptr(const void *a, const void *b)
{
    return cmp_str(**(const gguf_str_t *const *)a, **(const gguf_str_t *const *)b);
}

/* Finds a duplicate among n strings (O(n log n)); returns its index or -1. */
static int64_t find_duplicate(const gguf_str_t **v, uint64_t n)
{
    if (n < 2)
        return -1;
    qsort(v, (size_t)n, sizeof *v, cmp_str_ptr);
    for (uint64_t i = 1; i < n; i++)
        if (cmp_str(*v[i - 1], *v[i]) == 0)
            return (int64_t)i;
    return -1;
}

static int parse_kvs(cursor_t *c, gguf_t *g)
{
    char name[72];
    /* Smallest key/value: key length (8) + empty key + type (4) + u8 value (1). */
    if (g->n_kv > left(c) / 13)
        return fail(c, "n_kv %llu is larger than the file allows",
                    (unsigned long long)g->n_kv);
    g->kv = xcalloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof(gguf_kv_t));
    for (uint64_t i = 0; i < g->n_kv; i++) {
        gguf_kv_t *kv = &g->kv[i];
        if (rd_str(c, &kv->key, "metadata key"))
            return -1;
        printable(kv->key, name);
        if (rd_u32(c, &kv->type, "metadata value type"))
            return -1;
        if (parse_value(c, kv, name))
            return -1;
    }
    const gguf_str_t **keys = xmalloc((g->n_kv ? (size_t)g->n_kv : 1) * sizeof *keys);
    for (uint64_t i = 0; i < g->n_kv; i++)
        keys[i] = &g->kv[i].key;
    int64_t d = find_duplicate(keys, g->n_kv);
    if (d >= 0) {
        printable(*keys[d], name);
        free(keys);
        return fail(c, "duplicate metadata key '%s'", name);
    }
    free(keys);
    return 0;
}

static int parse_alignment(cursor_t *c, gguf_t *g)
{
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv_t *kv = gguf_find_kv(g, "general.alignment");
    if (!kv)
        return 0;
    if (kv->type != GGUF_TYPE_UINT32)
        return fail(c, "general.alignment must be a uint32 (got value type %u)", kv->type);
    uint64_t a = kv->v.u;
    if (a == 0 || (a & (a - 1)) != 0 || a > GGUF_MAX_ALIGNMENT)
        return fail(c, "general.alignment %llu is not a power of two in 1..2^30",
                    (unsigned long long)a);
    g->alignment = (uint32_t)a;
    return 0;
}

static int parse_tensor_infos(cursor_t *c, gguf_t *g)
{
    char name[72];
    /* Smallest tensor info: name length 8 + n_dims 4 + one ne 8 + type 4 + offset 8. */
    if (g->n_tensors > left(c) / 32)
        return fail(c, "n_tensors %llu is larger than the file allows",
                    (unsigned long long)g->n_tensors);
    g->tensors = xcalloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof(gguf_tensor_t));
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        if (rd_str(c, &t->name, "tensor name"))
            return -1;
        printable(t->name, name);
        if (rd_u32(c, &t->n_dims, "tensor n_dims"))
            return -1;
        if (t->n_dims < 1 || t->n_dims > 4)
            return fail(c, "tensor '%s': n_dims %u not in 1..4", name, t->n_dims);
        for (uint32_t d = 0; d < 4; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if (rd_u64(c, &t->ne[d], "tensor dimension"))
                return -1;
        if (rd_u32(c, &t->type, "tensor type") || rd_u64(c, &t->offset, "tensor offset"))
            return -1;

        uint32_t be = ggml_type_block_elems(t->type), bb = ggml_type_block_bytes(t->type);
        if (be == 0)
            return fail(c, "tensor '%s': unknown tensor type %u", name, t->type);
        /* Element count must fit int64 (consumers use int64 indices). */
        uint64_t nel = 1;
        for (uint32_t d = 0; d < 4; d++) {
            if (t->ne[d] == 0)
                return fail(c, "tensor '%s': dimension %u is zero", name, d);
            if (t->ne[d] > (uint64_t)INT64_MAX || nel > (uint64_t)INT64_MAX / t->ne[d])
                return fail(c, "tensor '%s': element count overflows", name);
            nel *= t->ne[d];
        }
        if (t->ne[0] % be != 0)
            return fail(c, "tensor '%s': row length %llu is not a multiple of the %s block (%u)",
                        name, (unsigned long long)t->ne[0], ggml_type_name(t->type), be);
        uint64_t nblk = nel / be;
        if (nblk > UINT64_MAX / bb)
            return fail(c, "tensor '%s': byte size overflows", name);
        t->nbytes = nblk * bb;
    }
    const gguf_str_t **names = xmalloc((g->n_tensors ? (size_t)g->n_tensors : 1) * sizeof *names);
    for (uint64_t i = 0; i < g->n_tensors; i++)
        names[i] = &g->tensors[i].name;
    int64_t d = find_duplicate(names, g->n_tensors);
    if (d >= 0) {
        printable(*names[d], name);
        free(names);
        return fail(c, "duplicate tensor name '%s'", name);
    }
    free(names);
    return 0;
}

static int place_tensors(cursor_t *c, gguf_t *g)
{
    char name[72];
    /* The data section starts at the first alignment boundary after the
     * tensor infos. */
    size_t pos = c->pos, a = g->alignment;
    size_t pad = (a - pos % a) % a;
    if (g->n_tensors == 0)
        return 0;
    if (pad > left(c))
        return fail(c, "data section starts past end of file");
    size_t data_start = pos + pad;
    uint64_t data_len = c->len - data_start;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor_t *t = &g->tensors[i];
        printable(t->name, name);
        if (t->offset % a != 0)
            return fail(c, "tensor '%s': offset %llu is not a multiple of the alignment %u",
                        name, (unsigned long long)t->offset, g->alignment);
        if (t->offset > data_len || t->nbytes > data_len - t->offset)
            return fail(c, "tensor '%s': data range past end of file "
                           "(offset %llu + %llu bytes, data section %llu bytes)",
                        name, (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                        (unsigned long long)data_len);
        t->data = c->buf + data_start + (size_t)t->offset;
    }
    return 0;
}

static void gguf_free_parts(gguf_t *g)
{
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++)
            free(g->kv[i].arr_str);
    free(g->kv);
    free(g->tensors);
}

int gguf_parse(const uint8_t *buf, size_t len, gguf_t **out, char *err, size_t errlen)
{
    cursor_t c = {.buf = buf, .len = buf ? len : 0, .pos = 0, .err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = 0;
    *out = NULL;
    uint32_t magic, version;
    if (rd_u32(&c, &magic, "magic"))
        return -1;
    if (magic != GGUF_MAGIC)
        return fail(&c, "bad magic 0x%08x (not a GGUF file)", magic);
    if (rd_u32(&c, &version, "version"))
        return -1;
    if (version == 1)
        return fail(&c, "GGUF version 1 is not supported (re-convert the model)");
    if (version != 2 && version != 3) {
        if ((version & 0xffff) == 0)
            return fail(&c, "GGUF version %u not supported (big-endian file?)", version);
        return fail(&c, "GGUF version %u not supported (want 2 or 3)", version);
    }
    gguf_t *g = xcalloc(1, sizeof *g);
    g->version = version;
    g->buf = buf;
    g->len = len;
    if (rd_u64(&c, &g->n_tensors, "n_tensors") || rd_u64(&c, &g->n_kv, "n_kv"))
        goto err;
    if (parse_kvs(&c, g) || parse_alignment(&c, g))
        goto err;
    if (parse_tensor_infos(&c, g))
        goto err;
    if (place_tensors(&c, g))
        goto err;
    *out = g;
    return 0;
err:
    gguf_free_parts(g);
    free(g);
    return -1;
}

int gguf_open(const char *path, gguf_t **out, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) {
        errbuf_set(err, errlen, "%s: not a regular non-empty file", path);
        close(fd);
        return -1;
    }
    size_t len = (size_t)st.st_size;
    void *map = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        errbuf_set(err, errlen, "%s: mmap: %s", path, strerror(mmap_errno));
        return -1;
    }
    gguf_t *g;
    if (gguf_parse(map, len, &g, err, errlen) != 0) {
        /* Prefix the path so the caller's message says which file. */
        if (err && errlen) {
            char *tmp = xstrdup(err);
            errbuf_set(err, errlen, "%s: %s", path, tmp);
            free(tmp);
        }
        munmap(map, len);
        return -1;
    }
    g->map = map;
    g->map_len = len;
    *out = g;
    return 0;
}

void gguf_close(gguf_t **gp)
{
    if (!gp || !*gp)
        return;
    gguf_t *g = *gp;
    gguf_free_parts(g);
    if (g->map)
        munmap(g->map, g->map_len);
    free(g);
    *gp = NULL;
}

/* ---- lookups ------------------------------------------------------------- */

bool gguf_str_eq(gguf_str_t s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

const gguf_kv_t *gguf_find_kv(const gguf_t *g, const char *key)
{
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (gguf_str_eq(g->kv[i].key, key))
            return &g->kv[i];
    return NULL;
}

const gguf_tensor_t *gguf_find_tensor(const gguf_t *g, const char *name)
{
    for (uint64_t i = 0; i < g->n_tensors; i++)
        if (gguf_str_eq(g->tensors[i].name, name))
            return &g->tensors[i];
    return NULL;
}

static int scalar_to_int(uint32_t type, uint64_t u, int64_t i, int64_t *out)
{
    switch (type) {
    case GGUF_TYPE_UINT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_UINT32: case GGUF_TYPE_UINT64:
        if (u > (uint64_t)INT64_MAX)
            return -1;
        *out = (int64_t)u;
        return 0;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        *out = i;
        return 0;
    default:
        return -1;
    }
}

int gguf_get_int(const gguf_t *g, const char *key, int64_t *out)
{
    const gguf_kv_t *kv = gguf_find_kv(g, key);
    if (!kv)
        return -1;
    return scalar_to_int(kv->type, kv->v.u, kv->v.i, out);
}

int gguf_get_float(const gguf_t *g, const char *key, double *out)
{
    const gguf_kv_t *kv = gguf_find_kv(g, key);
    if (!kv || (kv->type != GGUF_TYPE_FLOAT32 && kv->type != GGUF_TYPE_FLOAT64))
        return -1;
    *out = kv->v.f;
    return 0;
}

int gguf_get_bool(const gguf_t *g, const char *key, bool *out)
{
    const gguf_kv_t *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_TYPE_BOOL)
        return -1;
    *out = kv->v.u != 0;
    return 0;
}

int gguf_get_str(const gguf_t *g, const char *key, gguf_str_t *out)
{
    const gguf_kv_t *kv = gguf_find_kv(g, key);
    if (!kv || kv->type != GGUF_TYPE_STRING)
        return -1;
    *out = kv->v.s;
    return 0;
}

int gguf_get_arr(const gguf_t *g, const char *key, uint32_t elem_type, const gguf_kv_t **kv)
{
    const gguf_kv_t *e = gguf_find_kv(g, key);
    if (!e || e->type != GGUF_TYPE_ARRAY || e->arr_type != elem_type)
        return -1;
    *kv = e;
    return 0;
}

/* Element i of a numeric array, widened like the scalar getters. */
int gguf_arr_get_int(const gguf_kv_t *kv, uint64_t i, int64_t *out)
{
    if (kv->type != GGUF_TYPE_ARRAY || i >= kv->arr_n)
        return -1;
    size_t sz = gguf_scalar_size(kv->arr_type);
    if (sz == 0 || kv->arr_type == GGUF_TYPE_BOOL || kv->arr_type == GGUF_TYPE_FLOAT32 ||
        kv->arr_type == GGUF_TYPE_FLOAT64)
        return -1;
    const uint8_t *p = kv->arr_data + (size_t)i * sz;
    uint64_t u = 0;
    int64_t s = 0;
    switch (kv->arr_type) {
    case GGUF_TYPE_UINT8: u = p[0]; break;
    case GGUF_TYPE_UINT16: u = le16(p); break;
    case GGUF_TYPE_UINT32: u = le32(p); break;
    case GGUF_TYPE_UINT64: u = le64(p); break;
    case GGUF_TYPE_INT8: s = (int8_t)p[0]; break;
    case GGUF_TYPE_INT16: s = (int16_t)le16(p); break;
    case GGUF_TYPE_INT32: s = (int32_t)le32(p); break;
    case GGUF_TYPE_INT64: s = (int64_t)le64(p); break;
    }
    return scalar_to_int(kv->arr_type, u, s, out);
}

int gguf_arr_get_float(const gguf_kv_t *kv, uint64_t i, double *out)
{
    if (kv->type != GGUF_TYPE_ARRAY || i >= kv->arr_n)
        return -1;
    if (kv->arr_type == GGUF_TYPE_FLOAT32) {
        uint32_t u = le32(kv->arr_data + (size_t)i * 4);
        float f;
        memcpy(&f, &u, 4);
        *out = f;
        return 0;
    }
    if (kv->arr_type == GGUF_TYPE_FLOAT64) {
        uint64_t u = le64(kv->arr_data + (size_t)i * 8);
        memcpy(out, &u, 8);
        return 0;
    }
    return -1;
}
