/* utf8.c — UTF-8 validation, assembly limits and sanitizing (see utf8.h). */
#include "common/utf8.h"

#include <string.h>

#include "common/xalloc.h"

size_t utf8_lead_len(uint8_t c)
{
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return 2;
    if (c >= 0xE0 && c <= 0xEF)
        return 3;
    if (c >= 0xF0 && c <= 0xF4)
        return 4;
    return 0;
}

void utf8_second_range(uint8_t lead, uint8_t *lo, uint8_t *hi)
{
    *lo = 0x80;
    *hi = 0xBF;
    switch (lead) {
    case 0xE0: *lo = 0xA0; break; /* no overlongs */
    case 0xED: *hi = 0x9F; break; /* no surrogates */
    case 0xF0: *lo = 0x90; break; /* no overlongs */
    case 0xF4: *hi = 0x8F; break; /* <= U+10FFFF */
    default: break;
    }
}

size_t utf8_char(const uint8_t *s, size_t n, size_t *bad)
{
    size_t need = utf8_lead_len(s[0]);
    if (need == 0) {
        if (bad)
            *bad = 1;
        return 0;
    }
    for (size_t k = 1; k < need; k++) {
        uint8_t lo = 0x80, hi = 0xBF;
        if (k == 1)
            utf8_second_range(s[0], &lo, &hi);
        if (k >= n || s[k] < lo || s[k] > hi) {
            if (bad)
                *bad = k;
            return 0;
        }
    }
    return need;
}

bool utf8_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { /* ASCII runs are the common case */
            i++;
            continue;
        }
        size_t k = utf8_char(s + i, n - i, NULL);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

size_t utf8_count(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((uint8_t)s[i] & 0xC0) != 0x80;
    return k;
}

size_t utf8_put(uint32_t cp, char out[4])
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

size_t utf8_complete_len(const char *buf, size_t len)
{
    const uint8_t *p = (const uint8_t *)buf;
    /* Look at the last up-to-3 bytes for the lead byte of a sequence that
     * the buffer cuts short. */
    size_t back = len < 3 ? len : 3;
    for (size_t i = 1; i <= back; i++) {
        uint8_t c = p[len - i];
        if ((c & 0xC0) == 0x80)
            continue; /* continuation: keep looking for the lead */
        size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
        if (need > i) {
            /* Hold back only if what is there so far could still become valid. */
            for (size_t j = 1; j < i; j++)
                if ((p[len - i + j] & 0xC0) != 0x80)
                    return len;
            return len - i;
        }
        return len;
    }
    return len;
}

char *utf8_sanitize(const char *str, size_t len, size_t *out_len)
{
    const uint8_t *s = (const uint8_t *)str;
    /* Worst case every byte becomes 3 bytes of U+FFFD. */
    char *out = xmalloc(len * 3 + 1);
    size_t o = 0, i = 0;
    while (i < len) {
        size_t bad = 0, n = utf8_char(s + i, len - i, &bad);
        if (n) {
            memcpy(out + o, s + i, n);
            o += n;
            i += n;
        } else {
            memcpy(out + o, UTF8_REPLACEMENT, UTF8_REPLACEMENT_LEN);
            o += UTF8_REPLACEMENT_LEN;
            i += bad;
        }
    }
    out[o] = '\0';
    if (out_len)
        *out_len = o;
    return out;
}
