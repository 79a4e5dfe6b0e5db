/* api_surface.c — helpers every API surface's renderer shares: SSE
 * events into the stream's strbuf_t, and readings of the core's replies
 * (see api_surface.h). */
#include "gateway/api_surface.h"

#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

void api_sse(strbuf_t *b, const char *event, char *json)
{
    if (event) {
        strbuf_puts(b, "event: ");
        strbuf_puts(b, event);
        strbuf_putc(b, '\n');
    }
    strbuf_puts(b, "data: ");
    strbuf_puts(b, json);
    strbuf_puts(b, "\n\n");
    free(json);
}

bool api_finish_failed(proto_finish_t f)
{
    return f == PROTO_FINISH_ERROR || f == PROTO_FINISH_TIMEOUT;
}

void api_event_usage(const proto_event_t *ev, oai_usage_t *u)
{
    *u = (oai_usage_t){0};
    if (ev->has_usage) {
        u->prompt_tokens = ev->usage.prompt_tokens;
        u->completion_tokens = ev->usage.completion_tokens;
        u->cached_tokens = ev->usage.cached_tokens;
    } else {
        u->completion_tokens = ev->n_tokens;
    }
}

void api_event_error(const proto_event_t *ev, oai_error_t *e, int64_t timeout_s)
{
    if (proto_event_cause(ev) != PROTO_ERR_DEADLINE)
        oai_error_from_worker(e, proto_event_cause(ev), "Generation failed on the worker");
    else if (timeout_s >= 0)
        oai_error_from_worker(e, PROTO_ERR_DEADLINE, "The request made no progress for %lld s (--request-timeout)",
                              (long long)timeout_s);
    else
        oai_error_from_worker(e, PROTO_ERR_DEADLINE, "The request made no progress within its deadline on the worker");
}

char *api_events_text(gateway_reply_t *const *events, size_t n, size_t *len)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += events[i]->event.text_len;
    char *text = xmalloc(total + 1);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(text + off, events[i]->event.text, events[i]->event.text_len);
        off += events[i]->event.text_len;
    }
    text[total] = '\0';
    *len = total;
    return text;
}
