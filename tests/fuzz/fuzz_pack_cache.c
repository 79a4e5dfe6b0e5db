/* libFuzzer target for the packed-weight cache's header parser
 * (worker/pack_cache.c, pack_cache_parse): the first bytes of a pack
 * file as found on disk. Raw input first (fixed part alone, then with the
 * table); an accepted header must be self-consistent (offsets, sizes, sum).
 * Half the runs then build a whole header from the input's own bytes (n
 * matrices of input-chosen sizes, a right checksum): it must be accepted,
 * and with any one byte changed it must not. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/kv_disk.h"
#include "worker/pack_cache.h"

static const file_mac_key_t g_key = {{9, 8, 7}}; /* the worker's MAC key in these tests */

static void check_raw(const uint8_t *data, size_t size)
{
    pack_cache_header_t h;
    char err[128];
    int n = pack_cache_parse(data, size, &g_key, &h, NULL, err, sizeof err);
    if (n <= 0)
        return;
    if (h.file_bytes != h.payload_off + h.payload_bytes || h.payload_off % 4096)
        abort();
    pack_cache_entry_t *e = malloc((size_t)n * sizeof *e);
    if (!e)
        abort();
    int n2 = pack_cache_parse(data, size, &g_key, &h, e, err, sizeof err);
    if (n2 >= 0) {
        uint64_t sum = 0;
        if (n2 != n)
            abort();
        for (int i = 0; i < n2; i++) {
            if (e[i].bytes == 0 || e[i].bytes % 64)
                abort();
            sum += e[i].bytes;
        }
        if (sum != h.payload_bytes || (size_t)PACK_CACHE_HEAD + (size_t)n2 * PACK_CACHE_ENTRY + 8 > h.payload_off)
            abort();
    }
    free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_raw(data, size);
    if (size < 2 || !(data[0] & 1))
        return 0;
    uint32_t n = 1 + data[1] % 8, ver = PACK_CACHE_VERSION;
    size_t end = PACK_CACHE_HEAD + (size_t)n * PACK_CACHE_ENTRY + 8;
    uint8_t *b = calloc(1, end);
    if (!b)
        abort();
    memcpy(b, data, size < end ? size : end); /* the input's bytes where the rules allow any */
    memcpy(b, PACK_CACHE_MAGIC, 8);
    memcpy(b + 8, &ver, 4);
    memcpy(b + 12, &n, 4);
    uint64_t pay = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *e = b + PACK_CACHE_HEAD + PACK_CACHE_ENTRY * i;
        uint64_t bytes = 64 * (1 + (uint64_t)e[24] + 256 * (uint64_t)e[25]);
        memset(e + 4, 0, 4);
        memcpy(e + 24, &bytes, 8);
        pay += bytes;
    }
    uint64_t off = (end + 4095) / 4096 * 4096 + 4096 * (uint64_t)(data[0] >> 5), fb = off + pay;
    memcpy(b + 32, &off, 8);
    memcpy(b + 40, &pay, 8);
    memcpy(b + 48, &fb, 8);
    uint64_t sum = file_mac64(&g_key, b, end - 8);
    memcpy(b + end - 8, &sum, 8);
    pack_cache_header_t h;
    pack_cache_entry_t e[8];
    char err[128];
    if (pack_cache_parse(b, end, &g_key, &h, e, err, sizeof err) != (int)n)
        abort(); /* a whole header must pass */
    size_t at = (size_t)data[size - 1] * 13 % end;
    b[at] ^= (uint8_t)(data[size / 2] | 1);
    if (pack_cache_parse(b, end, &g_key, &h, e, err, sizeof err) >= 0)
        abort(); /* one changed byte must not */
    check_raw(b, end);
    free(b);
    return 0;
}
