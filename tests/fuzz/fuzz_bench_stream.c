/* fuzz_bench_stream.c — libFuzzer target for pagoda-bench's response parsing:
 * the SSE reader and the interpretation of OpenAI stream chunks
 * (tests/bench/sse_reader.c, tests/bench/bench_stream.c), fed hostile bytes in
 * hostile pieces.
 *
 * Input layout: byte 0 picks the HTTP status (even: 200, else 400 + byte),
 * byte 1 the piece size (1..256) the rest is cut into; the rest is the body.
 * pagoda-bench's sources are not in the fuzz library (they are a client, not
 * part of the server), so the two modules are compiled in here. */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "tests/bench/bench_stream.c"
#include "tests/bench/sse_reader.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    long status = data[0] % 2 == 0 ? 200 : 400 + data[0];
    size_t piece = (size_t)data[1] + 1;
    data += 2;
    size -= 2;
    bench_stream_t *s = bench_stream_new(0);
    bench_stream_set_status(s, status);
    int64_t t = 1;
    for (size_t i = 0; i < size; i += piece) {
        size_t n = size - i < piece ? size - i : piece;
        bench_stream_feed(s, data + i, n, t++);
    }
    bool ok = bench_stream_finish(s, NULL, t);
    /* invariants of the recorder itself */
    assert(ok == (s->error == NULL));
    assert(s->n_content == 0 || s->n_itl == s->n_content - 1);
    assert(s->err_len <= MAX_ERR_BODY);
    assert(bench_stream_output_tokens(s) >= 0);
    bench_stream_free(&s);
    return 0;
}
