/* bench_stream.h — what pagoda-bench learns from one streamed completion.
 *
 * A bench_stream_t follows one HTTP response of POST /v1/completions or
 * /v1/chat/completions with "stream": true. The caller feeds the response body
 * as it arrives, stamped with the monotonic time it was read, and finally
 * says how the transfer ended. The stream records:
 *
 *   t_first_us   arrival of the first *content* chunk (a chunk whose
 *                choices[i].text, or choices[i].delta.content for chat, is a
 *                non-empty string) — the basis of time-to-first-token;
 *   itl_us[]     gaps between consecutive content chunks (inter-token
 *                latency when the server sends one token per chunk);
 *   usage        prompt_tokens / completion_tokens (and
 *                prompt_tokens_details.cached_tokens, the prefix-cache hits)
 *                from any chunk carrying a "usage" object (the final one, with
 *                stream_options.include_usage);
 *   done         whether "data: [DONE]" was seen;
 *   error        the first error: HTTP status >= 300 (message taken from an
 *                OpenAI error body {"error":{"message":...}} when present), an
 *                SSE "error" event, a chunk with an "error" member, unparsable
 *                chunk JSON, a transport failure, or a stream that ended
 *                without [DONE].
 *
 * Hostile input: the body is untrusted; sizes are bounded (one SSE event at
 * most 1 MiB, an error body at most 4 KiB kept) and every JSON field is type
 * checked. The parser entry point bench_stream_feed() takes (buf, len) and is
 * fuzzed by tests/fuzz/fuzz_bench_stream.c.
 *
 * Ownership: bench_stream_new() allocates; bench_stream_free() releases the
 * stream, its gap array and error string, and NULLs the pointer.
 */
#ifndef PAGODA_BENCH_STREAM_H
#define PAGODA_BENCH_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/bench/sse_reader.h"

typedef struct bench_stream {
    sse_reader_t sse;
    long http_status;        /* 0 until bench_stream_set_status() */
    int64_t t_start_us;      /* request handed to the transport */
    int64_t t_first_us;      /* first content chunk, 0 = none yet */
    int64_t t_last_us;       /* latest content chunk, 0 = none yet */
    int64_t t_end_us;        /* transfer finished (bench_stream_finish) */
    int64_t *itl_us;         /* (n_itl) gaps between content chunks, us */
    size_t n_itl, cap_itl;
    uint64_t n_content;      /* content chunks seen */
    int64_t prompt_tokens;   /* usage.prompt_tokens, -1 = not reported */
    int64_t completion_tokens; /* usage.completion_tokens, -1 = not reported */
    int64_t cached_tokens;   /* usage.prompt_tokens_details.cached_tokens, -1 = not reported */
    bool done;               /* "data: [DONE]" seen */
    char *error;             /* first error message (owned), NULL = none */
    char *err_body;          /* body of a non-2xx response, err_len bytes + NUL */
    size_t err_len;
} bench_stream_t;

bench_stream_t *bench_stream_new(int64_t t_start_us);
void bench_stream_free(bench_stream_t **s);

/* Records the HTTP status once headers are in; call before feeding the body.
 * A status outside 200..299 makes the body be kept as an error body instead
 * of parsed as SSE. */
void bench_stream_set_status(bench_stream_t *s, long status);

/* Feeds response-body bytes read at now_us. Never fails: problems are
 * recorded in s->error. */
void bench_stream_feed(bench_stream_t *s, const uint8_t *buf, size_t len, int64_t now_us);

/* Ends the stream at now_us. transport_error is NULL when the transfer
 * completed, else a short description (e.g. curl's message). Decides the
 * final error, if any. Returns true when the request succeeded. */
bool bench_stream_finish(bench_stream_t *s, const char *transport_error, int64_t now_us);

/* Output tokens of the request: usage.completion_tokens when reported,
 * otherwise the number of content chunks. */
int64_t bench_stream_output_tokens(const bench_stream_t *s);

#endif
