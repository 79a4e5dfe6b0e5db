/* Unit tests for common/strbuf.h: appends of every kind against a plain
 * reference built independently (memcpy into a fixed array, snprintf), NUL
 * bytes kept, printf longer than any first guess, reserve + setlen, take
 * (an empty buffer gives "", never NULL), reset keeps the allocation, free
 * leaves a reusable buffer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/strbuf.h"

static void test_append_kinds(void **state)
{
    (void)state;
    strbuf_t b = STRBUF_INIT;
    char ref[8192];
    size_t n = 0;
    for (int i = 0; i < 300; i++) {
        char piece[32];
        int k = snprintf(piece, sizeof piece, "<%d:%x>", i, i * 7);
        switch (i % 4) {
        case 0:
            strbuf_puts(&b, piece);
            break;
        case 1:
            strbuf_printf(&b, "<%d:%x>", i, i * 7);
            break;
        case 2:
            strbuf_append(&b, piece, (size_t)k);
            break;
        default:
            for (int j = 0; j < k; j++)
                strbuf_putc(&b, piece[j]);
        }
        memcpy(ref + n, piece, (size_t)k);
        n += (size_t)k;
        assert_int_equal(b.len, n);
        assert_true(b.cap > b.len);
        assert_int_equal(b.s[b.len], 0);
    }
    assert_memory_equal(b.s, ref, n);
    strbuf_free(&b);
    assert_null(b.s);
    assert_int_equal(b.len, 0);
}

static void test_nul_bytes_and_empty(void **state)
{
    (void)state;
    strbuf_t b = STRBUF_INIT;
    strbuf_append(&b, "", 0);
    assert_non_null(b.s);
    assert_string_equal(b.s, "");
    const char bytes[5] = {'a', 0, 'b', 0, (char)0xff};
    strbuf_append(&b, bytes, sizeof bytes);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.s, bytes, 5);
    assert_int_equal(b.s[5], 0);
    strbuf_free(&b);
    /* an untouched buffer takes as "" */
    char *t = strbuf_take(&b);
    assert_non_null(t);
    assert_string_equal(t, "");
    free(t);
}

static void test_printf_long(void **state)
{
    (void)state;
    strbuf_t b = STRBUF_INIT;
    strbuf_puts(&b, "x");
    char *big = malloc(100001);
    memset(big, 'q', 100000);
    big[100000] = 0;
    strbuf_printf(&b, "[%s|%d]", big, 42);
    assert_int_equal(b.len, 1 + 100000 + 5);
    assert_int_equal(b.s[0], 'x');
    assert_int_equal(b.s[1], '[');
    assert_memory_equal(b.s + 2, big, 100000);
    assert_string_equal(b.s + 100002, "|42]");
    free(big);
    strbuf_free(&b);
}

static void test_reserve_setlen_take_reset(void **state)
{
    (void)state;
    strbuf_t b = STRBUF_INIT;
    strbuf_reserve(&b, 1000);
    assert_true(b.cap >= 1001);
    char *room = b.s;
    memcpy(b.s + b.len, "hello world", 11);
    strbuf_setlen(&b, 11);
    assert_string_equal(b.s, "hello world");
    strbuf_setlen(&b, 5); /* cut */
    assert_string_equal(b.s, "hello");
    strbuf_puts(&b, "!");
    assert_ptr_equal(b.s, room); /* reserved room: no move */
    strbuf_reset(&b);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.s, "");
    assert_ptr_equal(b.s, room); /* allocation kept */
    strbuf_puts(&b, "again");
    char *t = strbuf_take(&b);
    assert_string_equal(t, "again");
    assert_null(b.s);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    free(t);
    strbuf_puts(&b, "reused");
    assert_string_equal(b.s, "reused");
    strbuf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_append_kinds),
        cmocka_unit_test(test_nul_bytes_and_empty),
        cmocka_unit_test(test_printf_long),
        cmocka_unit_test(test_reserve_setlen_take_reset),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
