/* gguf_write.h — builds GGUF v3 files (format in gguf.h).
 *
 * Usage:
 *   gguf_writer_t *w = gguf_writer_new();
 *   gguf_writer_set_str(w, "general.architecture", "llama");
 *   gguf_writer_set_u32(w, "llama.block_count", 12);
 *   gguf_writer_copy_prefix(w, src, "tokenizer.");     // from a parsed file
 *   uint64_t ne[2] = {768, 32000};                      // ne[0] = row length
 *   gguf_writer_add_tensor(w, "token_embd.weight", GGML_TYPE_Q8_0, 2, ne, data, nbytes);
 *   gguf_writer_write_file(w, "out.gguf", err, sizeof err);
 *   gguf_writer_free(&w);
 *
 * Layout written: header (version 3), key/values in insertion order, tensor
 * infos in insertion order, zero padding to 32 bytes, tensor data in the same
 * order, each tensor padded to 32 bytes. general.alignment is not written
 * (32 is the default); copying it from another file is refused silently.
 *
 * Setting a key that already exists replaces its value in place (keeps its
 * position). Keys, strings, arrays and (for add_tensor) tensor data are
 * copied: the caller keeps ownership of what it passes. Out of memory aborts
 * (xalloc). Numeric arrays and tensor data are taken in host byte order; the
 * writer only builds on little-endian hosts (checked at compile time).
 */
#ifndef PAGODA_TEXT_GGUF_WRITE_H
#define PAGODA_TEXT_GGUF_WRITE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/text/gguf.h"

typedef struct gguf_writer gguf_writer_t;

gguf_writer_t *gguf_writer_new(void);
/* Frees the writer and all copies it holds; NULLs *w. */
void gguf_writer_free(gguf_writer_t **w);

/* Scalars (key is NUL-terminated). */
void gguf_writer_set_u8(gguf_writer_t *w, const char *key, uint8_t v);
void gguf_writer_set_i8(gguf_writer_t *w, const char *key, int8_t v);
void gguf_writer_set_u16(gguf_writer_t *w, const char *key, uint16_t v);
void gguf_writer_set_i16(gguf_writer_t *w, const char *key, int16_t v);
void gguf_writer_set_u32(gguf_writer_t *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer_t *w, const char *key, int32_t v);
void gguf_writer_set_u64(gguf_writer_t *w, const char *key, uint64_t v);
void gguf_writer_set_i64(gguf_writer_t *w, const char *key, int64_t v);
void gguf_writer_set_f32(gguf_writer_t *w, const char *key, float v);
void gguf_writer_set_f64(gguf_writer_t *w, const char *key, double v);
void gguf_writer_set_bool(gguf_writer_t *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer_t *w, const char *key, const char *s);
void gguf_writer_set_strn(gguf_writer_t *w, const char *key, const char *s, size_t len);

/* Array of n numeric elements of elem_type (UINT8..FLOAT64 or BOOL, not
 * STRING/ARRAY), packed in host order. Returns 0, or -1 for a bad elem_type. */
int gguf_writer_set_arr(gguf_writer_t *w, const char *key, uint32_t elem_type,
                        const void *data, uint64_t n);
/* Array of n NUL-terminated strings. */
void gguf_writer_set_arr_str(gguf_writer_t *w, const char *key, const char *const *strs,
                             uint64_t n);
/* Array of n (ptr,len) strings, e.g. kv->arr_str of a parsed file. */
void gguf_writer_set_arr_gstr(gguf_writer_t *w, const char *key, const gguf_str_t *strs,
                              uint64_t n);

/* Copies one parsed entry (any type, its own key). Returns 0, or 1 when the
 * key is general.alignment (skipped). */
int gguf_writer_copy_kv(gguf_writer_t *w, const gguf_kv_t *kv);
/* Copies every entry of g whose key starts with prefix ("" = all); returns
 * the number copied. */
int gguf_writer_copy_prefix(gguf_writer_t *w, const gguf_t *g, const char *prefix);
/* True when key is set. */
bool gguf_writer_has_key(const gguf_writer_t *w, const char *key);

/* Adds a tensor; data (nbytes, which must equal the size implied by type and
 * ne[0..n_dims-1]) is copied. Returns 0, or -1 with a log message for a bad
 * type, n_dims outside 1..4, a zero dimension, a row not a multiple of the
 * block, a size mismatch or a duplicate name. */
int gguf_writer_add_tensor(gguf_writer_t *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne, const void *data, size_t nbytes);

/* Like add_tensor, but the data is produced at write time: fill(ctx, buf)
 * must write the tensor's nbytes into buf (a scratch buffer of the writer)
 * and return 0, or -1 to abort the write. ctx must stay valid until the last
 * write. Keeps memory at one tensor when generating large models. */
typedef int (*gguf_tensor_fill_fn)(void *ctx, uint8_t *buf, size_t nbytes);
int gguf_writer_add_tensor_fn(gguf_writer_t *w, const char *name, uint32_t type,
                              uint32_t n_dims, const uint64_t *ne, gguf_tensor_fill_fn fill,
                              void *ctx);

/* Writes the file to a stream. Returns 0, or -1 and a message in err. */
int gguf_writer_write(gguf_writer_t *w, FILE *f, char *err, size_t errlen);
/* Writes to path atomically (path.tmp then rename). Returns 0 / -1 + err. */
int gguf_writer_write_file(gguf_writer_t *w, const char *path, char *err, size_t errlen);
/* Writes into a malloc'd buffer (*out, caller frees). Returns 0 / -1 + err. */
int gguf_writer_write_mem(gguf_writer_t *w, uint8_t **out, size_t *len, char *err,
                          size_t errlen);

#endif
