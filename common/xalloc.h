/* xalloc.h — checked allocation.
 *
 * Out of memory is fatal in pagoda (docs/ARCHITECTURE.md, "Conventions"):
 * these wrappers log the caller's file:line and abort() instead of returning
 * NULL. Out of *capacity* (a full queue, no free KV block) is never reported
 * through here.
 * Memory from these calls is released with free(), except xhuge_zalloc's
 * (xhuge_zfree).
 */
#ifndef PAGODA_COMMON_XALLOC_H
#define PAGODA_COMMON_XALLOC_H

#include <stddef.h>

void *xmalloc_at(size_t n, const char *file, int line);
void *xcalloc_at(size_t count, size_t size, const char *file, int line);
void *xrealloc_at(void *p, size_t n, const char *file, int line);
char *xstrdup_at(const char *s, const char *file, int line);
char *xstrndup_at(const char *s, size_t n, const char *file, int line);
/* 64-byte aligned (cache line / AVX-512), release with free(). */
void *xaligned_alloc_at(size_t n, const char *file, int line);
/* For large arrays streamed by the hot path (packed weights, the KV pool):
 * n ≥ 2 MiB is 2 MiB-aligned, rounded up to whole 2 MiB and hinted for
 * transparent huge pages (fewer TLB misses; the hint may be refused);
 * smaller n is xaligned_alloc. Not zeroed. Release with free(). */
void *xhuge_alloc_at(size_t n, const char *file, int line);
/* n zero bytes in a fresh anonymous mapping, 2 MiB aligned and hinted for
 * transparent huge pages, none of it touched yet: a page is mapped (zeroed
 * by the kernel) on its first use, or ahead of use by xhuge_populate. For
 * big arrays that must start zeroed without paying for it up front (the KV
 * pool). Release with xhuge_zfree(p, n), never free(). */
void *xhuge_zalloc_at(size_t n, const char *file, int line);
void xhuge_zfree(void *p, size_t n);
/* Maps in the pages that [p, p + n) touches (p need not be page-aligned)
 * inside an xhuge_zalloc block without
 * changing a byte of it (MADV_POPULATE_WRITE), so it is safe while other
 * threads read and write the block. 0, or -1 where the kernel lacks it
 * (before Linux 5.14): the pages are then mapped on first use. */
int xhuge_populate(void *p, size_t n);

#define xmalloc(n)          xmalloc_at((n), __FILE__, __LINE__)
#define xcalloc(c, s)       xcalloc_at((c), (s), __FILE__, __LINE__)
#define xrealloc(p, n)      xrealloc_at((p), (n), __FILE__, __LINE__)
#define xstrdup(s)          xstrdup_at((s), __FILE__, __LINE__)
#define xstrndup(s, n)      xstrndup_at((s), (n), __FILE__, __LINE__)
#define xaligned_alloc(n)   xaligned_alloc_at((n), __FILE__, __LINE__)
#define xhuge_alloc(n)      xhuge_alloc_at((n), __FILE__, __LINE__)
#define xhuge_zalloc(n)     xhuge_zalloc_at((n), __FILE__, __LINE__)

#endif
