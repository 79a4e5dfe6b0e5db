/* vec.h — growable arrays: one way to make room, for every array in the tree.
 *
 * An array here is three plain variables (or struct fields) the caller
 * owns — a pointer, a count and a capacity — not a new type, so existing
 * structs keep their layout and their field comments:
 *
 *     int32_t *ids = NULL;          // (n_ids) token ids
 *     size_t n_ids = 0, cap_ids = 0;
 *     vec_push(ids, n_ids, cap_ids, 42);
 *     vec_append(ids, n_ids, cap_ids, more, n_more);
 *     vec_reserve(ids, cap_ids, n_ids + 100);   // room only, count unchanged
 *     free(ids);
 *
 * Capacity doubles (from VEC_MIN_CAP), so n pushes cost O(n) copies in all.
 * Count and capacity may be any integer type (int32_t, size_t, ...); the
 * element size comes from the pointer's type. Growing goes through
 * xrealloc: out of memory aborts (common/xalloc.h). The pointer may move on
 * every call: do not keep pointers into the array across them.
 *
 * Arguments are evaluated more than once: pass plain lvalues, no side effects.
 */
#ifndef PAGODA_COMMON_VEC_H
#define PAGODA_COMMON_VEC_H

#include <stddef.h>
#include <string.h>

#include "common/xalloc.h"

#define VEC_MIN_CAP 16

/* The capacity to grow `cap` to so it holds `need` elements of elem bytes:
 * cap (or min, when cap is 0) doubled until it does. Returns cap when it
 * already fits. Aborts (out of memory) when the bytes would overflow size_t. */
size_t vec_grow_cap(size_t cap, size_t need, size_t min, size_t elem);

/* Makes the capacity of ptr at least `need` elements (count unchanged). */
#define vec_reserve(ptr, cap, need)                                                    \
    do {                                                                               \
        if ((size_t)(need) > (size_t)(cap)) {                                          \
            size_t vec_cap_ =                                                          \
                vec_grow_cap((size_t)(cap), (size_t)(need), VEC_MIN_CAP, sizeof *(ptr)); \
            (ptr) = xrealloc((ptr), vec_cap_ * sizeof *(ptr));                         \
            (cap) = vec_cap_;                                                          \
        }                                                                              \
    } while (0)

/* Appends one element. */
#define vec_push(ptr, n, cap, value)                                                 \
    do {                                                                             \
        vec_reserve(ptr, cap, (size_t)(n) + 1);                                      \
        (ptr)[(n)++] = (value);                                                      \
    } while (0)

/* Appends count elements copied from src (count may be 0). */
#define vec_append(ptr, n, cap, src, count)                                          \
    do {                                                                             \
        size_t vec_k_ = (size_t)(count);                                             \
        vec_reserve(ptr, cap, (size_t)(n) + vec_k_);                                 \
        if (vec_k_)                                                                  \
            memcpy((ptr) + (n), (src), vec_k_ * sizeof *(ptr));                      \
        (n) += vec_k_;                                                               \
    } while (0)

#endif
