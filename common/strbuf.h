/* strbuf.h — the growing byte buffer: one for every text built piece by
 * piece in the tree (grammars, JSON, SSE lines, messages).
 *
 * A strbuf_t is plain data the caller owns; zero-initialized it is empty
 * and ready ({0} or STRBUF_INIT):
 *
 *     strbuf_t b = STRBUF_INIT;
 *     strbuf_puts(&b, "root ::= ");
 *     strbuf_printf(&b, "s%d\n", 3);
 *     char *text = strbuf_take(&b);   // caller frees text; b is empty again
 *
 * Fields: s is the bytes (s[0..len)), NUL-terminated at s[len] whenever s
 * is not NULL (so s is a C string when the bytes hold no NUL); len the byte
 * count; cap the allocation (≥ len + 1 once anything was reserved). Reading
 * s and len directly is fine; writing goes through these calls (or, after
 * strbuf_reserve, into s[len..] and then strbuf_setlen).
 *
 * Capacity doubles (vec_grow_cap), so n appends cost O(n) copies in all.
 * Out of memory is fatal, as everywhere (common/xalloc.h): no call here
 * fails. s may move on every call that adds bytes.
 *
 * Ownership: the buffer owns s until strbuf_take hands it to the caller
 * (who frees it); strbuf_free releases it.
 */
#ifndef PAGODA_COMMON_STRBUF_H
#define PAGODA_COMMON_STRBUF_H

#include <stdarg.h>
#include <stddef.h>

typedef struct strbuf {
    char *s;    /* (cap) bytes, s[len] = 0; NULL until the first byte is reserved */
    size_t len; /* bytes held */
    size_t cap; /* bytes allocated */
} strbuf_t;

#define STRBUF_INIT {NULL, 0, 0}

/* Room for `extra` more bytes (plus the NUL) without another allocation. */
void strbuf_reserve(strbuf_t *b, size_t extra);
/* Appends n bytes (any values, NUL included). */
void strbuf_append(strbuf_t *b, const void *p, size_t n);
void strbuf_puts(strbuf_t *b, const char *str);
void strbuf_putc(strbuf_t *b, char c);
void strbuf_printf(strbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void strbuf_vprintf(strbuf_t *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Sets len to n ≤ cap - 1 (after writing into reserved room, or to cut
 * the tail off) and writes the NUL there. */
void strbuf_setlen(strbuf_t *b, size_t n);
/* The bytes as a malloc'd NUL-terminated string ("" when empty, never
 * NULL); the buffer is left empty (no allocation). Caller frees. */
char *strbuf_take(strbuf_t *b);
/* Empties the buffer, keeping its allocation for reuse. */
void strbuf_reset(strbuf_t *b);
/* Releases the allocation; the buffer is empty (and reusable) after. */
void strbuf_free(strbuf_t *b);

#endif
