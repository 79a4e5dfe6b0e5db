/* api_surface.c — the byte buffer API surfaces write their streams into
 * (see api_surface.h). */
#include "gateway/api_surface.h"

#include <stdlib.h>
#include <string.h>

#include "common/vec.h"
#include "common/xalloc.h"

void api_buf_append(api_buf_t *b, const char *s, size_t n)
{
    vec_reserve(b->p, b->cap, b->len + n);
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

void api_buf_sse(api_buf_t *b, const char *event, char *json)
{
    if (event) {
        api_buf_append(b, "event: ", 7);
        api_buf_append(b, event, strlen(event));
        api_buf_append(b, "\n", 1);
    }
    api_buf_append(b, "data: ", 6);
    api_buf_append(b, json, strlen(json));
    api_buf_append(b, "\n\n", 2);
    free(json);
}
