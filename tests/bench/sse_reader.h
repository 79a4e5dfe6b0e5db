/* sse_reader.h — incremental parser for text/event-stream (Server-Sent Events).
 *
 * pagoda-bench reads the gateway's streamed completions through this. Bytes
 * arrive in arbitrary pieces (a TCP read may end in the middle of a line, or
 * between the CR and LF of a CRLF pair), so the reader keeps the partial line
 * and the partial event between calls.
 *
 * Format handled (WHATWG HTML "server-sent events", the subset that matters):
 *   - lines end with LF, CRLF or a lone CR;
 *   - "field: value" or "field:value" (one leading space after ':' is dropped);
 *     a line without ':' is a field with an empty value;
 *   - lines starting with ':' are comments (keep-alives) and are ignored;
 *   - field "data" appends value + '\n' to the event's data; field "event"
 *     sets the event name; "id" and "retry" are ignored;
 *   - an empty line dispatches the event if any data line was seen; the final
 *     '\n' of the data is removed; the name defaults to "message".
 *   - an event still incomplete when the stream ends is discarded (spec rule).
 *
 * Limits: a line or an event's data longer than max_bytes is an error (the
 * server is not trusted to bound its output). Event names are cut at 63 bytes.
 *
 * Ownership: the reader owns its buffers; sse_reader_fini() releases them.
 * The strings passed to the callback are valid only during the call.
 */
#ifndef PAGODA_BENCH_SSE_READER_H
#define PAGODA_BENCH_SSE_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Called once per dispatched event. `event` is NUL-terminated; `data` has
 * data_len bytes followed by a NUL (data may itself contain NUL bytes). */
typedef void (*sse_reader_event_fn)(void *ud, const char *event, const char *data,
                                    size_t data_len);

typedef struct sse_reader {
    char *line;          /* current partial line, line_len bytes (no terminator) */
    size_t line_len, line_cap;
    char *data;          /* data of the event being built, data_len bytes */
    size_t data_len, data_cap;
    char event[64];      /* event name of the event being built, "" = default */
    bool has_data;       /* at least one data line in the current event */
    bool last_cr;        /* previous byte was CR: a following LF is part of it */
    size_t max_bytes;    /* bound on one line and on one event's data */
    uint64_t n_events;   /* events dispatched so far */
} sse_reader_t;

void sse_reader_init(sse_reader_t *r, size_t max_bytes);
void sse_reader_fini(sse_reader_t *r);

/* Feeds len bytes; calls fn for each completed event.
 * Returns 0 ok, -1 a line or event exceeded max_bytes (the reader is then in
 * an unspecified state and should only be finalised). */
int sse_reader_feed(sse_reader_t *r, const uint8_t *buf, size_t len,
                    sse_reader_event_fn fn, void *ud);

#endif
