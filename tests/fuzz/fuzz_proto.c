/* fuzz_proto.c — libFuzzer target for the wire decoder (proto/msg.h).
 *
 * Input layout (the seed corpus in tests/fuzz/corpus/proto/ uses it):
 *   bytes 0..5  frame 1, the protocol tag ("PGDA01")
 *   byte  6     frame 2, the message type
 *   bytes 7..   frame 3, the msgpack body
 * Inputs shorter than 7 bytes are offered as a single frame.
 *
 * Beyond "no crash, no leak, no overread" (ASan/UBSan), every accepted
 * message must re-encode into a body that decodes again and re-encodes to the
 * very same bytes: decode ∘ encode is the identity on valid messages. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/msg.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    proto_msg_t m;
    char err[256];
    if (size < 7) {
        proto_frame_t one = {data, size};
        if (proto_decode(&one, 1, &m, err, sizeof err) == PROTO_OK)
            __builtin_trap(); /* one frame can never be a message */
        return 0;
    }
    proto_frame_t f[3] = {{data, 6}, {data + 6, 1}, {data + 7, size - 7}};
    if (proto_decode(f, 3, &m, err, sizeof err) != PROTO_OK)
        return 0;
    uint8_t *b1, *b2;
    size_t n1, n2;
    if (proto_encode(&m, &b1, &n1) != PROTO_OK)
        __builtin_trap();
    proto_msg_t m2;
    if (proto_decode_body(m.type, b1, n1, &m2, err, sizeof err) != PROTO_OK) {
        fprintf(stderr, "re-decode failed: %s\n", err);
        __builtin_trap();
    }
    if (proto_encode(&m2, &b2, &n2) != PROTO_OK || n1 != n2 || memcmp(b1, b2, n1) != 0)
        __builtin_trap();
    free(b1);
    free(b2);
    proto_msg_clear(&m);
    proto_msg_clear(&m2);
    return 0;
}
