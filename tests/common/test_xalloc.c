/* Unit tests for common/xalloc.h's zeroed huge-page mappings:
 * xhuge_zalloc returns 2 MiB-aligned memory that reads zero and maps none
 * of its pages (mincore); xhuge_populate maps the pages a range touches,
 * from a start that is not page-aligned too, without changing a byte
 * written before; xhuge_zfree unmaps it. Where the kernel lacks
 * MADV_POPULATE_WRITE (before Linux 5.14) the populate checks are skipped
 * with a message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/xalloc.h"

static bool resident(const uint8_t *p)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char v = 0;
    uint8_t *a = (uint8_t *)((uintptr_t)p / page * page);
    assert_int_equal(mincore(a, page, &v), 0);
    return v & 1;
}

static void test_zalloc_populate(void **state)
{
    (void)state;
    const size_t n = ((size_t)6 << 20) + 12345;
    uint8_t *p = xhuge_zalloc(n);
    assert_int_equal((uintptr_t)p % ((size_t)2 << 20), 0);
    assert_false(resident(p + ((size_t)5 << 20)));
    for (size_t i = 0; i < n; i += 65537)
        assert_int_equal(p[i], 0);
    p[100] = 0x5a; /* the first huge page is now mapped and holds a byte */
    /* a start 5 bytes past a page boundary, in the untouched fourth huge page */
    uint8_t *q = p + ((size_t)3 << 20) + 4096 + 5;
    /* the kernel's support, asked with a page-aligned start (second huge page) */
    if (xhuge_populate(p + ((size_t)2 << 20), 1) != 0) {
        print_message("  no MADV_POPULATE_WRITE on this kernel: populate not checked\n");
    } else {
        assert_int_equal(xhuge_populate(q, 10), 0);
        assert_true(resident(q));
        assert_int_equal(xhuge_populate(p, n), 0);
        assert_true(resident(p + n - 1));
        assert_int_equal(p[100], 0x5a);
        for (size_t i = 0; i < n; i += 4099)
            if (i != 100)
                assert_int_equal(p[i], 0);
    }
    assert_int_equal(xhuge_populate(q, 0), 0);
    xhuge_zfree(p, n);
    xhuge_zfree(NULL, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zalloc_populate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
