/* xalloc.c — allocation that aborts with file:line on out-of-memory. */
#include "common/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static void oom(size_t n, const char *file, int line)
{
    fprintf(stderr, "pagoda: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

void *xmalloc_at(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n, file, line);
    return p;
}

void *xcalloc_at(size_t count, size_t size, const char *file, int line)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        oom(count * size, file, line);
    return p;
}

void *xrealloc_at(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n, file, line);
    return q;
}

char *xstrdup_at(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = xmalloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}

char *xstrndup_at(const char *s, size_t n, const char *file, int line)
{
    char *p = xmalloc_at(n + 1, file, line);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

void *xaligned_alloc_at(size_t n, const char *file, int line)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0)
        oom(n, file, line);
    return p;
}

#define HUGE_PAGE ((size_t)2 << 20)

static size_t huge_round(size_t n) { return (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE; }

void *xhuge_alloc_at(size_t n, const char *file, int line)
{
    if (n < HUGE_PAGE)
        return xaligned_alloc_at(n, file, line);
    size_t rounded = huge_round(n);
    void *p = NULL;
    if (rounded < n || posix_memalign(&p, HUGE_PAGE, rounded) != 0)
        return xaligned_alloc_at(n, file, line); /* aborts when out of memory */
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* a hint: fine if refused */
#endif
    return p;
}

void *xhuge_zalloc_at(size_t n, const char *file, int line)
{
    size_t len = huge_round(n ? n : 1);
    if (len < n || len + HUGE_PAGE < len)
        oom(n, file, line);
    /* map one huge page more and trim both ends to a 2 MiB-aligned start */
    uint8_t *m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        oom(n, file, line);
    uintptr_t a = ((uintptr_t)m + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    size_t head = a - (uintptr_t)m, tail = HUGE_PAGE - head;
    if (head)
        (void)munmap(m, head);
    if (tail)
        (void)munmap((uint8_t *)a + len, tail);
#ifdef MADV_HUGEPAGE
    (void)madvise((void *)a, len, MADV_HUGEPAGE); /* a hint: fine if refused */
#endif
    return (void *)a;
}

void xhuge_zfree(void *p, size_t n)
{
    if (p)
        (void)munmap(p, huge_round(n ? n : 1));
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

int xhuge_populate(void *p, size_t n)
{
    if (n == 0)
        return 0;
    /* madvise wants a page-aligned start: from the page holding p */
    static size_t page;
    if (!page) {
        long v = sysconf(_SC_PAGESIZE);
        page = v > 0 ? (size_t)v : 4096;
    }
    uintptr_t a = (uintptr_t)p / page * page;
    return madvise((void *)a, n + ((uintptr_t)p - a), MADV_POPULATE_WRITE) == 0 ? 0 : -1;
}
