/* xalloc.h — checked allocation.
 *
 * Out of memory is fatal in pagoda (docs/ARCHITECTURE.md, "Conventions"):
 * these wrappers log the caller's file:line and abort() instead of returning
 * NULL. Out of *capacity* (a full queue, no free KV block) is never reported
 * through here.
 * Memory from these calls is released with free().
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

#define xmalloc(n)          xmalloc_at((n), __FILE__, __LINE__)
#define xcalloc(c, s)       xcalloc_at((c), (s), __FILE__, __LINE__)
#define xrealloc(p, n)      xrealloc_at((p), (n), __FILE__, __LINE__)
#define xstrdup(s)          xstrdup_at((s), __FILE__, __LINE__)
#define xstrndup(s, n)      xstrndup_at((s), (n), __FILE__, __LINE__)
#define xaligned_alloc(n)   xaligned_alloc_at((n), __FILE__, __LINE__)
#define xhuge_alloc(n)      xhuge_alloc_at((n), __FILE__, __LINE__)

#endif
