/* libFuzzer target for the KV disk tier's block-file check (worker/kv_disk.c,
 * kv_disk_check): the bytes of a file as found on disk, against a fixed small
 * shape (2 layers, blocks of 4, kv_dim 8, f16). Half the runs first repair
 * the input's size, header, tokens and MAC from the input's own bytes,
 * so the fuzzer reaches the accepting path too; then the check must accept
 * exactly when the file is whole (recomputed independently here). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/prefix_key.h"
#include "worker/kv_disk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const kv_disk_shape_t sh = {.weights_hash = 7, .kv_type = KV_TYPE_F16, .qblock = 0, .block_size = 4,
                                .n_layer = 2, .kv_dim = 8};
    const int32_t tok[4] = {1, 2, 3, 4};
    const file_mac_key_t key = {{7}};
    const size_t len = KV_DISK_HEADER_BYTES + 16 + 2 * 2 * 4 * 16 + KV_DISK_MAC_BYTES;
    kv_disk_check(&sh, &key, data, size, 0x1234, PREFIX_KEY_PUBLIC_ROOT, tok);
    if (size < 1 || !(data[0] & 1))
        return 0;
    /* repaired: a file whose payload is the input, everything else right */
    uint8_t *b = calloc(1, len);
    if (!b)
        abort();
    memcpy(b, data, size < len ? size : len);
    const uint64_t ident = kv_disk_ident(&sh), pub = 0x1234, parent = PREFIX_KEY_PUBLIC_ROOT, payload = 256;
    const uint32_t ver = 2, hb = KV_DISK_HEADER_BYTES, rb = 16;
    const int32_t geo[5] = {4, 2, 8, KV_TYPE_F16, 0};
    memcpy(b, "PGKVBLK2", 8);
    memcpy(b + 8, &ver, 4);
    memcpy(b + 12, &hb, 4);
    memcpy(b + 16, &ident, 8);
    memcpy(b + 24, &sh.weights_hash, 8);
    memcpy(b + 32, &pub, 8);
    memcpy(b + 40, &parent, 8);
    memcpy(b + 48, geo, sizeof geo);
    memcpy(b + 68, &rb, 4);
    memcpy(b + 72, &payload, 8);
    memset(b + 80, 0, 16);
    memcpy(b + KV_DISK_HEADER_BYTES, tok, sizeof tok);
    file_mac(&key, b, len - KV_DISK_MAC_BYTES, b + len - KV_DISK_MAC_BYTES, KV_DISK_MAC_BYTES);
    if (kv_disk_check(&sh, &key, b, len, pub, parent, tok) != 0)
        abort(); /* a whole file must pass */
    if (size > 1) { /* and one changed byte must not */
        size_t at = (size_t)data[1] * 7 % len;
        b[at] ^= (uint8_t)(data[size - 1] | 1);
        if (kv_disk_check(&sh, &key, b, len, pub, parent, tok) == 0)
            abort();
    }
    free(b);
    return 0;
}
