/* errbuf.c — formatted error messages into caller buffers (see errbuf.h). */
#include "common/errbuf.h"

#include <stdio.h>

int errbuf_vset(char *err, size_t errlen, const char *fmt, va_list ap)
{
    if (err && errlen)
        vsnprintf(err, errlen, fmt, ap);
    return -1;
}

int errbuf_set(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errbuf_vset(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}
