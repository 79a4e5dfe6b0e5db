/* fuzz_utf8.c — libFuzzer target for common/utf8.h.
 *
 * Properties checked on every input (beyond ASan/UBSan):
 *   - utf8_sanitize's output is well-formed (utf8_valid), and equals the
 *     input when the input was well-formed;
 *   - walking the input with utf8_char (its length, or the maximal-subpart
 *     length when ill-formed) covers it exactly, and the number of
 *     ill-formed subparts is the number of U+FFFD that sanitizing added;
 *   - utf8_valid(input) is true exactly when that walk met no ill-formed part;
 *   - utf8_complete_len holds back at most 3 bytes, and nothing when the
 *     input is well-formed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n_bad = 0, n_fffd_in = 0, i = 0;
    while (i < size) {
        size_t bad = 0, k = utf8_char(data + i, size - i, &bad);
        if (k) {
            if (k > 4 || k > size - i)
                __builtin_trap();
            if (k == 3 && memcmp(data + i, UTF8_REPLACEMENT, 3) == 0)
                n_fffd_in++;
            i += k;
        } else {
            if (bad < 1 || bad > 3 || bad > size - i)
                __builtin_trap();
            n_bad++;
            i += bad;
        }
    }
    bool valid = utf8_valid(data, size);
    if (valid != (n_bad == 0))
        __builtin_trap();
    size_t n_out = 0;
    char *out = utf8_sanitize((const char *)data, size, &n_out);
    if (!utf8_valid((const uint8_t *)out, n_out) || out[n_out] != '\0')
        __builtin_trap();
    if (valid && (n_out != size || memcmp(out, data, size) != 0))
        __builtin_trap();
    /* every U+FFFD of the output was in the input or replaced one subpart */
    size_t n_fffd_out = 0;
    for (size_t j = 0; j + 3 <= n_out;) {
        size_t k = utf8_char((const uint8_t *)out + j, n_out - j, NULL);
        if (k == 3 && memcmp(out + j, UTF8_REPLACEMENT, 3) == 0)
            n_fffd_out++;
        j += k;
    }
    if (n_fffd_out != n_fffd_in + n_bad)
        __builtin_trap();
    free(out);
    size_t c = utf8_complete_len((const char *)data, size);
    if (c > size || size - c > 3 || (valid && c != size))
        __builtin_trap();
    return 0;
}
