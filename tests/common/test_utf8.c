/* Unit tests for common/utf8.h.
 *
 * utf8_valid / utf8_char are checked against an independent reference: a
 * decoder that assembles the code point from the bit patterns first and
 * then rejects by value (overlong for its length, surrogate, past
 * U+10FFFF) — the other way round from the module, which narrows byte
 * ranges (Unicode Table 3-7). Exhaustively over every 1- and 2-byte input
 * and every 3-byte input with an E0..EF lead; over every 4-byte input with
 * an F0..F4 lead whose last byte is one of 7F 80 BF C0. Then: utf8_put
 * round-trips every scalar value; the maximal-subpart replacement of
 * Unicode's own example (Table 3-8); utf8_count; utf8_complete_len. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"

/* The reference: is s[0..n) one or more well-formed characters? */
static bool ref_valid(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            len = 2;
            cp = c & 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            len = 3;
            cp = c & 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            len = 4;
            cp = c & 0x07;
        } else {
            return false;
        }
        if (n - i < len)
            return false;
        for (size_t j = 1; j < len; j++) {
            if ((s[i + j] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + j] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += len;
    }
    return true;
}

static void check(const uint8_t *s, size_t n)
{
    bool want = ref_valid(s, n);
    if (utf8_valid(s, n) != want)
        fail_msg("utf8_valid(%02x %02x %02x %02x, %zu) != reference %d", s[0], n > 1 ? s[1] : 0,
                 n > 2 ? s[2] : 0, n > 3 ? s[3] : 0, n, want);
    /* one character as long as its lead byte says: utf8_char agrees too */
    if (utf8_lead_len(s[0]) == n && (utf8_char(s, n, NULL) == n) != want)
        fail_msg("utf8_char(%02x.., %zu) disagrees with the reference (%d)", s[0], n, want);
}

static void test_against_reference(void **state)
{
    (void)state;
    uint8_t b[4];
    for (int a = 0; a < 256; a++) {
        b[0] = (uint8_t)a;
        check(b, 1);
        for (int c = 0; c < 256; c++) {
            b[1] = (uint8_t)c;
            check(b, 2);
        }
    }
    for (int a = 0xE0; a <= 0xEF; a++)
        for (int c = 0; c < 256; c++)
            for (int d = 0; d < 256; d++) {
                b[0] = (uint8_t)a, b[1] = (uint8_t)c, b[2] = (uint8_t)d;
                check(b, 3);
            }
    static const uint8_t last[] = {0x7F, 0x80, 0xBF, 0xC0};
    for (int a = 0xF0; a <= 0xF4; a++)
        for (int c = 0; c < 256; c++)
            for (int d = 0; d < 256; d++)
                for (size_t e = 0; e < sizeof last; e++) {
                    b[0] = (uint8_t)a, b[1] = (uint8_t)c, b[2] = (uint8_t)d, b[3] = last[e];
                    check(b, 4);
                }
}

static void test_put_roundtrip(void **state)
{
    (void)state;
    size_t n_chars = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF)
            continue;
        char out[4];
        size_t n = utf8_put(cp, out);
        size_t want = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
        assert_int_equal(n, want);
        assert_int_equal(utf8_char((const uint8_t *)out, n, NULL), n);
        assert_true(ref_valid((const uint8_t *)out, n));
        assert_int_equal(utf8_count(out, n), 1);
        n_chars++;
    }
    assert_int_equal(n_chars, 0x110000 - 0x800);
}

/* Unicode 15, Table 3-8: U+FFFD for each maximal subpart. */
static void test_maximal_subparts(void **state)
{
    (void)state;
    static const char in[] = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
    static const char want[] = "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD"
                               "c\xEF\xBF\xBD\xEF\xBF\xBD" "d";
    size_t n = 0;
    char *out = utf8_sanitize(in, sizeof in - 1, &n);
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(out, want, n);
    assert_int_equal(out[n], 0);
    free(out);
    size_t bad = 0;
    assert_int_equal(utf8_char((const uint8_t *)"\xF1\x80\x80\xE1", 4, &bad), 0);
    assert_int_equal(bad, 3);
    assert_int_equal(utf8_char((const uint8_t *)"\xE0\x80", 2, &bad), 0); /* overlong lead */
    assert_int_equal(bad, 1);
    assert_int_equal(utf8_char((const uint8_t *)"\xED\xA0\x80", 3, &bad), 0); /* surrogate */
    assert_int_equal(bad, 1);
    assert_int_equal(utf8_char((const uint8_t *)"\xE2\x82", 2, &bad), 0); /* cut short */
    assert_int_equal(bad, 2);
    assert_true(utf8_valid((const uint8_t *)"a\0b", 3)); /* NUL is well-formed */
    assert_true(utf8_valid((const uint8_t *)"", 0));
}

static void test_count_and_complete(void **state)
{
    (void)state;
    assert_int_equal(utf8_count("a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 10), 4);
    assert_int_equal(utf8_count("", 0), 0);
    static const struct {
        const char *s;
        size_t len, want;
    } c[] = {
        {"abc", 3, 3},
        {"a\xE2\x82", 3, 1},             /* euro sign cut after 2 of 3 bytes */
        {"a\xE2", 2, 1},
        {"a\xE2\x82\xAC", 4, 4},
        {"\xF0\x9F\x98", 3, 0},          /* 3 of 4 */
        {"a\x80", 2, 2},                 /* a stray continuation never completes */
        {"a\xE2" "b", 3, 3},             /* an interrupted lead is not held */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++)
        if (utf8_complete_len(c[i].s, c[i].len) != c[i].want)
            fail_msg("case %zu: %zu, want %zu", i, utf8_complete_len(c[i].s, c[i].len), c[i].want);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_put_roundtrip),
        cmocka_unit_test(test_maximal_subparts),
        cmocka_unit_test(test_count_and_complete),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
