/* errbuf.h — the one way to write an error message into a caller's buffer.
 *
 * Functions that can fail on outside input take (char *err, size_t errlen)
 * and describe the failure there; these write it: printf-formatted,
 * truncated to errlen - 1 bytes, always NUL-terminated, and nothing at all
 * when err is NULL or errlen is 0 (the caller did not ask). They return -1,
 * so a parser can `return errbuf_set(err, errlen, "bad %s", what);`.
 * Modules that keep err/errlen in a context struct (a GGUF cursor, a
 * loader) call errbuf_vset from their own varargs wrapper.
 */
#ifndef PAGODA_COMMON_ERRBUF_H
#define PAGODA_COMMON_ERRBUF_H

#include <stdarg.h>
#include <stddef.h>

int errbuf_set(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int errbuf_vset(char *err, size_t errlen, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#endif
