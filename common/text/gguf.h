/* gguf.h — reader for GGUF model files (versions 2 and 3).
 *
 * A GGUF file is little-endian:
 *
 *   header
 *     u32  magic            "GGUF" (0x46554747 read as u32)
 *     u32  version          2 or 3 (1 is refused)
 *     u64  n_tensors        number of tensor infos
 *     u64  n_kv             number of metadata key/value pairs
 *   n_kv × key/value
 *     str  key              u64 length + bytes (not NUL-terminated)
 *     u32  value type       enum gguf_type
 *     ...  value            scalar, str, or array = u32 elem type + u64 count + elems
 *   n_tensors × tensor info
 *     str  name
 *     u32  n_dims           1..4
 *     u64  ne[n_dims]       elements per dimension, ne[0] fastest-varying (row length)
 *     u32  type             enum ggml_type
 *     u64  offset           from the start of the data section; multiple of alignment
 *   padding to `general.alignment` (u32 metadata, default 32)
 *   data section            tensor bytes
 *
 * Every count, length, offset, dimension and type is checked against the
 * buffer before use; anything malformed makes gguf_parse() return -1 with a
 * message naming what is wrong. The parsed view points into the caller's
 * buffer (or the mmap made by gguf_open): strings are (ptr, len) pairs, not
 * NUL-terminated.
 *
 * Ownership: gguf_parse() does not copy or own `buf`; it must outlive the
 * gguf_t. gguf_open() owns its mapping. gguf_close() frees everything and
 * NULLs the pointer.
 */
#ifndef PAGODA_TEXT_GGUF_H
#define PAGODA_TEXT_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/text/ggml_type.h"

enum gguf_type {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT
};

/* Size in bytes of one scalar value of GGUF type t; 0 for STRING, ARRAY and
 * unknown types. Shared by the reader and the writer (gguf_write.h). */
size_t gguf_scalar_size(uint32_t t);

typedef struct gguf_str {
    const char *ptr; /* into the file buffer; not NUL-terminated */
    uint64_t len;
} gguf_str_t;

typedef struct gguf_kv {
    gguf_str_t key;
    uint32_t type;          /* enum gguf_type */
    /* Scalars (type != ARRAY): the value, widened. */
    union {
        uint64_t u;         /* UINT8..UINT64, BOOL */
        int64_t i;          /* INT8..INT64 */
        double f;           /* FLOAT32, FLOAT64 */
        gguf_str_t s;       /* STRING */
    } v;
    /* Arrays (type == ARRAY) */
    uint32_t arr_type;      /* element type (never ARRAY: nested arrays are refused) */
    uint64_t arr_n;         /* element count */
    const uint8_t *arr_data;/* first element in the buffer (numeric arrays: packed LE) */
    gguf_str_t *arr_str;    /* arr_n entries when arr_type == STRING, else NULL (owned) */
} gguf_kv_t;

typedef struct gguf_tensor {
    gguf_str_t name;
    uint32_t n_dims;        /* 1..4 */
    uint64_t ne[4];         /* unused dims are 1; ne[0] is the row length */
    uint32_t type;          /* enum ggml_type */
    uint64_t offset;        /* from the start of the data section */
    const uint8_t *data;    /* into the buffer, checked to lie inside it */
    uint64_t nbytes;
} gguf_tensor_t;

typedef struct gguf {
    uint32_t version;
    uint32_t alignment;
    uint64_t n_kv;
    gguf_kv_t *kv;          /* n_kv entries (owned) */
    uint64_t n_tensors;
    gguf_tensor_t *tensors; /* n_tensors entries (owned) */
    const uint8_t *buf;     /* the whole file */
    size_t len;
    void *map;              /* mmap made by gguf_open, else NULL */
    size_t map_len;
} gguf_t;

/* Parses a GGUF image. Returns 0 and sets *out, or -1 and writes a message
 * into err (errlen bytes, may be 0). */
int gguf_parse(const uint8_t *buf, size_t len, gguf_t **out, char *err, size_t errlen);
/* mmaps `path` read-only and parses it. Same returns as gguf_parse. */
int gguf_open(const char *path, gguf_t **out, char *err, size_t errlen);
void gguf_close(gguf_t **g);

/* Lookups by NUL-terminated name; NULL when absent. */
const gguf_kv_t *gguf_find_kv(const gguf_t *g, const char *key);
const gguf_tensor_t *gguf_find_tensor(const gguf_t *g, const char *name);

/* Typed getters: 0 ok; -1 absent or of an incompatible type (any integer type
 * converts to int64 if it fits; FLOAT32/FLOAT64 to float/double). */
int gguf_get_int(const gguf_t *g, const char *key, int64_t *out);
int gguf_get_float(const gguf_t *g, const char *key, double *out);
int gguf_get_bool(const gguf_t *g, const char *key, bool *out);
int gguf_get_str(const gguf_t *g, const char *key, gguf_str_t *out);
/* Array getter: 0 ok and *kv is the entry, -1 absent or not an array of elem_type. */
int gguf_get_arr(const gguf_t *g, const char *key, uint32_t elem_type, const gguf_kv_t **kv);

/* Element i of a numeric array kv (from gguf_get_arr): 0 ok, -1 when i is out
 * of range or the element type does not convert (same rules as the scalar
 * getters: integer types to int64 if they fit, FLOAT32/FLOAT64 to double). */
int gguf_arr_get_int(const gguf_kv_t *kv, uint64_t i, int64_t *out);
int gguf_arr_get_float(const gguf_kv_t *kv, uint64_t i, double *out);

/* True when s (ptr,len) equals the NUL-terminated c string. */
bool gguf_str_eq(gguf_str_t s, const char *c);

#endif
