/* strbuf.c — the growing byte buffer (see strbuf.h). */
#include "common/strbuf.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/vec.h"
#include "common/xalloc.h"

#define STRBUF_MIN_CAP 64

void strbuf_reserve(strbuf_t *b, size_t extra)
{
    if (extra > SIZE_MAX - 1 - b->len) {
        fprintf(stderr, "strbuf: %zu + %zu bytes overflow the address space\n", b->len, extra);
        abort();
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    b->cap = vec_grow_cap(b->cap, need, STRBUF_MIN_CAP, 1);
    b->s = xrealloc(b->s, b->cap);
}

void strbuf_append(strbuf_t *b, const void *p, size_t n)
{
    strbuf_reserve(b, n);
    if (n)
        memcpy(b->s + b->len, p, n);
    b->len += n;
    b->s[b->len] = 0;
}

void strbuf_puts(strbuf_t *b, const char *str) { strbuf_append(b, str, strlen(str)); }

void strbuf_putc(strbuf_t *b, char c) { strbuf_append(b, &c, 1); }

void strbuf_vprintf(strbuf_t *b, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    strbuf_reserve(b, 0);
    int n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    if (n < 0) { /* only an encoding error (%ls of a bad wide string): a bug */
        fprintf(stderr, "strbuf: vsnprintf failed on format '%s'\n", fmt);
        abort();
    }
    if ((size_t)n >= b->cap - b->len) { /* did not fit: grow and write again */
        strbuf_reserve(b, (size_t)n);
        vsnprintf(b->s + b->len, b->cap - b->len, fmt, again);
    }
    va_end(again);
    b->len += (size_t)n;
}

void strbuf_printf(strbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    strbuf_vprintf(b, fmt, ap);
    va_end(ap);
}

void strbuf_setlen(strbuf_t *b, size_t n)
{
    assert(b->s && n < b->cap);
    b->len = n;
    b->s[n] = 0;
}

char *strbuf_take(strbuf_t *b)
{
    char *s = b->s ? b->s : xstrdup("");
    *b = (strbuf_t)STRBUF_INIT;
    return s;
}

void strbuf_reset(strbuf_t *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = 0;
}

void strbuf_free(strbuf_t *b)
{
    free(b->s);
    *b = (strbuf_t)STRBUF_INIT;
}
