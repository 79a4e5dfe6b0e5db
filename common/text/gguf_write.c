/* gguf_write.c — GGUF v3 writer (see gguf_write.h).
 *
 * Each key/value is kept pre-serialized (value type u32 + encoded value) so
 * writing is a straight copy and replacing a key is a swap of one buffer.
 */
#include "common/text/gguf_write.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/xalloc.h"
#include "common/vec.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "gguf_write copies host-order numbers; GGUF is little-endian");

#define GGUF_WRITE_ALIGN 32

static void b_u32(strbuf_t *b, uint32_t v) { strbuf_append(b, &v, 4); }
static void b_u64(strbuf_t *b, uint64_t v) { strbuf_append(b, &v, 8); }
static void b_str(strbuf_t *b, const char *s, size_t n)
{
    b_u64(b, n);
    strbuf_append(b, s, n);
}

typedef struct wkv {
    char *key;   /* key_len bytes (keys from parsed files may hold NULs) */
    size_t key_len;
    strbuf_t val; /* u32 type + value, as in the file */
} wkv_t;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[4];
    size_t nbytes;
    uint64_t offset;          /* in the data section, set at write time */
    uint8_t *data;            /* owned copy, or NULL when fill is set */
    gguf_tensor_fill_fn fill;
    void *ctx;
} wtensor_t;

struct gguf_writer {
    wkv_t *kv;
    size_t n_kv, cap_kv;
    wtensor_t *t;
    size_t n_t, cap_t;
};

gguf_writer_t *gguf_writer_new(void) { return xcalloc(1, sizeof(gguf_writer_t)); }

void gguf_writer_free(gguf_writer_t **wp)
{
    if (!wp || !*wp)
        return;
    gguf_writer_t *w = *wp;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        strbuf_free(&w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->t[i].name);
        free(w->t[i].data);
    }
    free(w->kv);
    free(w->t);
    free(w);
    *wp = NULL;
}

static wkv_t *find_kv(const gguf_writer_t *w, const char *key, size_t klen)
{
    for (size_t i = 0; i < w->n_kv; i++)
        if (w->kv[i].key_len == klen && memcmp(w->kv[i].key, key, klen) == 0)
            return &w->kv[i];
    return NULL;
}

bool gguf_writer_has_key(const gguf_writer_t *w, const char *key)
{
    return find_kv(w, key, strlen(key)) != NULL;
}

/* Returns the (emptied) value buffer for key, creating the entry if needed. */
static strbuf_t *kv_slot(gguf_writer_t *w, const char *key, size_t klen, uint32_t type)
{
    wkv_t *e = find_kv(w, key, klen);
    if (!e) {
        vec_reserve(w->kv, w->cap_kv, w->n_kv + 1);
        e = &w->kv[w->n_kv++];
        e->key = xmalloc(klen + 1);
        memcpy(e->key, key, klen);
        e->key[klen] = 0;
        e->key_len = klen;
        e->val = (strbuf_t)STRBUF_INIT;
    }
    strbuf_reset(&e->val);
    b_u32(&e->val, type);
    return &e->val;
}

#define SETTER(fn, ctype, gtype)                                               \
    void gguf_writer_set_##fn(gguf_writer_t *w, const char *key, ctype v)      \
    {                                                                          \
        strbuf_append(kv_slot(w, key, strlen(key), gtype), &v, sizeof v);         \
    }
SETTER(u8, uint8_t, GGUF_TYPE_UINT8)
SETTER(i8, int8_t, GGUF_TYPE_INT8)
SETTER(u16, uint16_t, GGUF_TYPE_UINT16)
SETTER(i16, int16_t, GGUF_TYPE_INT16)
SETTER(u32, uint32_t, GGUF_TYPE_UINT32)
SETTER(i32, int32_t, GGUF_TYPE_INT32)
SETTER(u64, uint64_t, GGUF_TYPE_UINT64)
SETTER(i64, int64_t, GGUF_TYPE_INT64)
SETTER(f32, float, GGUF_TYPE_FLOAT32)
SETTER(f64, double, GGUF_TYPE_FLOAT64)
#undef SETTER

void gguf_writer_set_bool(gguf_writer_t *w, const char *key, bool v)
{
    uint8_t b = v ? 1 : 0;
    strbuf_append(kv_slot(w, key, strlen(key), GGUF_TYPE_BOOL), &b, 1);
}

void gguf_writer_set_strn(gguf_writer_t *w, const char *key, const char *s, size_t len)
{
    b_str(kv_slot(w, key, strlen(key), GGUF_TYPE_STRING), s, len);
}

void gguf_writer_set_str(gguf_writer_t *w, const char *key, const char *s)
{
    gguf_writer_set_strn(w, key, s, strlen(s));
}

static void set_arr_n(gguf_writer_t *w, const char *key, size_t klen, uint32_t et,
                      const void *data, uint64_t n)
{
    strbuf_t *b = kv_slot(w, key, klen, GGUF_TYPE_ARRAY);
    b_u32(b, et);
    b_u64(b, n);
    strbuf_append(b, data, (size_t)n * gguf_scalar_size(et));
}

int gguf_writer_set_arr(gguf_writer_t *w, const char *key, uint32_t elem_type,
                        const void *data, uint64_t n)
{
    if (gguf_scalar_size(elem_type) == 0)
        return -1;
    set_arr_n(w, key, strlen(key), elem_type, data, n);
    return 0;
}

void gguf_writer_set_arr_str(gguf_writer_t *w, const char *key, const char *const *strs,
                             uint64_t n)
{
    strbuf_t *b = kv_slot(w, key, strlen(key), GGUF_TYPE_ARRAY);
    b_u32(b, GGUF_TYPE_STRING);
    b_u64(b, n);
    for (uint64_t i = 0; i < n; i++)
        b_str(b, strs[i], strlen(strs[i]));
}

static void set_arr_gstr_n(gguf_writer_t *w, const char *key, size_t klen,
                           const gguf_str_t *strs, uint64_t n)
{
    strbuf_t *b = kv_slot(w, key, klen, GGUF_TYPE_ARRAY);
    b_u32(b, GGUF_TYPE_STRING);
    b_u64(b, n);
    for (uint64_t i = 0; i < n; i++)
        b_str(b, strs[i].ptr, (size_t)strs[i].len);
}

void gguf_writer_set_arr_gstr(gguf_writer_t *w, const char *key, const gguf_str_t *strs,
                              uint64_t n)
{
    set_arr_gstr_n(w, key, strlen(key), strs, n);
}

int gguf_writer_copy_kv(gguf_writer_t *w, const gguf_kv_t *kv)
{
    const char *k = kv->key.ptr;
    size_t kl = (size_t)kv->key.len;
    if (gguf_str_eq(kv->key, "general.alignment"))
        return 1;
    if (kv->type == GGUF_TYPE_ARRAY) {
        if (kv->arr_type == GGUF_TYPE_STRING)
            set_arr_gstr_n(w, k, kl, kv->arr_str, kv->arr_n);
        else
            set_arr_n(w, k, kl, kv->arr_type, kv->arr_data, kv->arr_n);
        return 0;
    }
    strbuf_t *b = kv_slot(w, k, kl, kv->type);
    switch (kv->type) {
    case GGUF_TYPE_STRING:
        b_str(b, kv->v.s.ptr, (size_t)kv->v.s.len);
        break;
    case GGUF_TYPE_FLOAT32: {
        float f = (float)kv->v.f;
        strbuf_append(b, &f, 4);
        break;
    }
    case GGUF_TYPE_FLOAT64:
        strbuf_append(b, &kv->v.f, 8);
        break;
    case GGUF_TYPE_INT8: case GGUF_TYPE_INT16: case GGUF_TYPE_INT32: case GGUF_TYPE_INT64:
        strbuf_append(b, &kv->v.i, gguf_scalar_size(kv->type)); /* low bytes of the LE int64 */
        break;
    default: /* unsigned and bool */
        strbuf_append(b, &kv->v.u, gguf_scalar_size(kv->type));
        break;
    }
    return 0;
}

int gguf_writer_copy_prefix(gguf_writer_t *w, const gguf_t *g, const char *prefix)
{
    size_t pl = strlen(prefix);
    int n = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const gguf_kv_t *kv = &g->kv[i];
        if (kv->key.len >= pl && memcmp(kv->key.ptr, prefix, pl) == 0 &&
            gguf_writer_copy_kv(w, kv) == 0)
            n++;
    }
    return n;
}

static int add_tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims,
                      const uint64_t *ne, size_t *nbytes_out)
{
    uint32_t be = ggml_type_block_elems(type), bb = ggml_type_block_bytes(type);
    if (be == 0) {
        log_error("gguf_write: tensor '%s': unknown type %u", name, type);
        return -1;
    }
    if (n_dims < 1 || n_dims > 4) {
        log_error("gguf_write: tensor '%s': n_dims %u not in 1..4", name, n_dims);
        return -1;
    }
    uint64_t nel = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] == 0 || ne[d] > (uint64_t)INT64_MAX / nel) {
            log_error("gguf_write: tensor '%s': bad dimension %u", name, d);
            return -1;
        }
        nel *= ne[d];
    }
    if (ne[0] % be != 0) {
        log_error("gguf_write: tensor '%s': row %llu not a multiple of the %s block %u", name,
                  (unsigned long long)ne[0], ggml_type_name(type), be);
        return -1;
    }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) {
            log_error("gguf_write: duplicate tensor '%s'", name);
            return -1;
        }
    vec_reserve(w->t, w->cap_t, w->n_t + 1);
    wtensor_t *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    t->name = xstrdup(name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = (size_t)(nel / be * bb);
    *nbytes_out = t->nbytes;
    return 0;
}

int gguf_writer_add_tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne, const void *data, size_t nbytes)
{
    size_t want;
    if (add_tensor(w, name, type, n_dims, ne, &want))
        return -1;
    if (nbytes != want) {
        log_error("gguf_write: tensor '%s': %zu bytes given, %s shape needs %zu", name, nbytes,
                  ggml_type_name(type), want);
        free(w->t[w->n_t].name);
        return -1;
    }
    wtensor_t *t = &w->t[w->n_t++];
    t->data = xmalloc(want ? want : 1);
    memcpy(t->data, data, want);
    return 0;
}

int gguf_writer_add_tensor_fn(gguf_writer_t *w, const char *name, uint32_t type,
                              uint32_t n_dims, const uint64_t *ne, gguf_tensor_fill_fn fill,
                              void *ctx)
{
    size_t want;
    if (add_tensor(w, name, type, n_dims, ne, &want))
        return -1;
    wtensor_t *t = &w->t[w->n_t++];
    t->fill = fill;
    t->ctx = ctx;
    return 0;
}

static int put(FILE *f, const void *p, size_t n)
{
    return n == 0 || fwrite(p, 1, n, f) == n ? 0 : -1;
}

static int pad(FILE *f, uint64_t pos)
{
    static const uint8_t zeros[GGUF_WRITE_ALIGN];
    size_t n = (size_t)((GGUF_WRITE_ALIGN - pos % GGUF_WRITE_ALIGN) % GGUF_WRITE_ALIGN);
    return put(f, zeros, n);
}

int gguf_writer_write(gguf_writer_t *w, FILE *f, char *err, size_t errlen)
{
    /* Header, key/values and tensor infos are built in memory (small), then
     * the data is streamed tensor by tensor. */
    strbuf_t h = STRBUF_INIT;
    b_u32(&h, 0x46554747u);
    b_u32(&h, 3);
    b_u64(&h, w->n_t);
    b_u64(&h, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        b_str(&h, w->kv[i].key, w->kv[i].key_len);
        strbuf_append(&h, w->kv[i].val.s, w->kv[i].val.len);
    }
    uint64_t off = 0;
    size_t max_fill = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        wtensor_t *t = &w->t[i];
        t->offset = off;
        off += t->nbytes;
        off += (GGUF_WRITE_ALIGN - off % GGUF_WRITE_ALIGN) % GGUF_WRITE_ALIGN;
        b_str(&h, t->name, strlen(t->name));
        b_u32(&h, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            b_u64(&h, t->ne[d]);
        b_u32(&h, t->type);
        b_u64(&h, t->offset);
        if (t->fill && t->nbytes > max_fill)
            max_fill = t->nbytes;
    }
    int rc = put(f, h.s, h.len);
    if (rc == 0 && w->n_t)
        rc = pad(f, h.len);
    strbuf_free(&h);
    uint8_t *scratch = max_fill ? xmalloc(max_fill) : NULL;
    for (size_t i = 0; rc == 0 && i < w->n_t; i++) {
        wtensor_t *t = &w->t[i];
        const uint8_t *src = t->data;
        if (t->fill) {
            if (t->fill(t->ctx, scratch, t->nbytes) != 0) {
                errbuf_set(err, errlen, "tensor '%s': data generator failed", t->name);
                free(scratch);
                return -1;
            }
            src = scratch;
        }
        rc = put(f, src, t->nbytes);
        if (rc == 0)
            rc = pad(f, t->nbytes);
    }
    free(scratch);
    if (rc == 0)
        rc = fflush(f) == 0 ? 0 : -1;
    if (rc != 0 && err && errlen)
        errbuf_set(err, errlen, "write failed: %s", strerror(errno));
    return rc;
}

int gguf_writer_write_file(gguf_writer_t *w, const char *path, char *err, size_t errlen)
{
    size_t n = strlen(path) + 5;
    char *tmp = xmalloc(n);
    snprintf(tmp, n, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int rc = gguf_writer_write(w, f, err, errlen);
    if (fclose(f) != 0 && rc == 0) {
        rc = -1;
        errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
    }
    if (rc == 0 && rename(tmp, path) != 0) {
        rc = -1;
        errbuf_set(err, errlen, "rename %s: %s", path, strerror(errno));
    }
    if (rc != 0)
        unlink(tmp);
    free(tmp);
    return rc;
}

int gguf_writer_write_mem(gguf_writer_t *w, uint8_t **out, size_t *len, char *err,
                          size_t errlen)
{
    char *p = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&p, &n);
    if (!f) {
        errbuf_set(err, errlen, "open_memstream: %s", strerror(errno));
        return -1;
    }
    int rc = gguf_writer_write(w, f, err, errlen);
    fclose(f);
    if (rc != 0) {
        free(p);
        return -1;
    }
    *out = (uint8_t *)p;
    *len = n;
    return 0;
}
