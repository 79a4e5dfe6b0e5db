/* sse_reader.c — incremental text/event-stream parser (see sse_reader.h). */
#include "tests/bench/sse_reader.h"

#include <string.h>

#include <stdlib.h>

#include "common/xalloc.h"
#include "common/vec.h"

void sse_reader_init(sse_reader_t *r, size_t max_bytes)
{
    memset(r, 0, sizeof *r);
    r->max_bytes = max_bytes;
}

void sse_reader_fini(sse_reader_t *r)
{
    free(r->line);
    free(r->data);
    memset(r, 0, sizeof *r);
}

/* Grows *buf so that it holds at least need+1 bytes (room for a NUL). */
static void grow(char **buf, size_t *cap, size_t need)
{
    vec_reserve(*buf, *cap, need + 1);
}

static void dispatch(sse_reader_t *r, sse_reader_event_fn fn, void *ud)
{
    if (r->has_data) {
        size_t n = r->data_len;
        if (n > 0 && r->data[n - 1] == '\n')
            n--;
        grow(&r->data, &r->data_cap, n);
        r->data[n] = '\0';
        r->n_events++;
        if (fn)
            fn(ud, r->event[0] ? r->event : "message", r->data, n);
    }
    r->data_len = 0;
    r->has_data = false;
    r->event[0] = '\0';
}

/* Interprets one complete line (without its terminator). */
static int process_line(sse_reader_t *r, const char *line, size_t len,
                        sse_reader_event_fn fn, void *ud)
{
    if (len == 0) {
        dispatch(r, fn, ud);
        return 0;
    }
    if (line[0] == ':')
        return 0; /* comment / keep-alive */
    const char *colon = memchr(line, ':', len);
    size_t name_len = colon ? (size_t)(colon - line) : len;
    const char *value = colon ? colon + 1 : line + len;
    size_t value_len = colon ? len - name_len - 1 : 0;
    if (value_len > 0 && value[0] == ' ') {
        value++;
        value_len--;
    }
    if (name_len == 4 && memcmp(line, "data", 4) == 0) {
        if (r->data_len + value_len + 1 > r->max_bytes)
            return -1;
        grow(&r->data, &r->data_cap, r->data_len + value_len + 1);
        memcpy(r->data + r->data_len, value, value_len);
        r->data_len += value_len;
        r->data[r->data_len++] = '\n';
        r->has_data = true;
    } else if (name_len == 5 && memcmp(line, "event", 5) == 0) {
        size_t n = value_len < sizeof r->event - 1 ? value_len : sizeof r->event - 1;
        memcpy(r->event, value, n);
        r->event[n] = '\0';
    }
    /* "id", "retry" and unknown fields are ignored. */
    return 0;
}

int sse_reader_feed(sse_reader_t *r, const uint8_t *buf, size_t len,
                    sse_reader_event_fn fn, void *ud)
{
    size_t i = 0;
    while (i < len) {
        if (r->last_cr) {
            r->last_cr = false;
            if (buf[i] == '\n') { /* second half of a CRLF split across calls */
                i++;
                continue;
            }
        }
        /* Find the next line terminator. */
        size_t j = i;
        while (j < len && buf[j] != '\n' && buf[j] != '\r')
            j++;
        const char *seg = (const char *)buf + i;
        size_t seg_len = j - i;
        if (j == len) { /* no terminator yet: keep the partial line */
            if (r->line_len + seg_len > r->max_bytes)
                return -1;
            grow(&r->line, &r->line_cap, r->line_len + seg_len);
            memcpy(r->line + r->line_len, seg, seg_len);
            r->line_len += seg_len;
            break;
        }
        int rc;
        if (r->line_len > 0) { /* complete a line started in an earlier call */
            if (r->line_len + seg_len > r->max_bytes)
                return -1;
            grow(&r->line, &r->line_cap, r->line_len + seg_len);
            memcpy(r->line + r->line_len, seg, seg_len);
            r->line_len += seg_len;
            rc = process_line(r, r->line, r->line_len, fn, ud);
            r->line_len = 0;
        } else {
            if (seg_len > r->max_bytes)
                return -1;
            rc = process_line(r, seg, seg_len, fn, ud);
        }
        if (rc != 0)
            return rc;
        if (buf[j] == '\r') {
            if (j + 1 < len) {
                if (buf[j + 1] == '\n')
                    j++;
            } else {
                r->last_cr = true;
            }
        }
        i = j + 1;
    }
    return 0;
}
