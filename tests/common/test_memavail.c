/* Unit tests for common/memavail.h: the parsers on real-looking and broken
 * texts, and memavail_read over a fake /proc + /sys/fs/cgroup tree:
 * MemAvailable alone; a cgroup v2 memory.max below it wins, less
 * inactive_file counted as free; an ancestor's limit (a Kubernetes pod's)
 * applies to a child without one; "max" everywhere = MemAvailable; the
 * hybrid layout (/sys/fs/cgroup/unified); nothing readable = unlimited. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/memavail.h"

#define B(s) (const uint8_t *)(s), strlen(s)
#define MIB (1024ull * 1024)

static void test_parse_meminfo(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(memavail_parse_meminfo(B("MemTotal:       24684544 kB\nMemFree:        20802048 kB\n"
                                              "MemAvailable:   22863360 kB\nBuffers:          123 kB\n"),
                                            &v),
                     0);
    assert_true(v == 22863360ull * 1024);
    assert_int_equal(memavail_parse_meminfo(B("MemAvailable: 7 kB"), &v), 0); /* no final newline */
    assert_true(v == 7 * 1024);
    assert_int_equal(memavail_parse_meminfo(B("MemTotal: 5 kB\n"), &v), -1);          /* missing */
    assert_int_equal(memavail_parse_meminfo(B("MemAvailable: kB\n"), &v), -1);        /* no number */
    assert_int_equal(memavail_parse_meminfo(B("MemAvailable: 5 MB\n"), &v), -1);      /* unit */
    assert_int_equal(memavail_parse_meminfo(B("MemAvailable: 99999999999999999999 kB\n"), &v), -1);
    assert_int_equal(memavail_parse_meminfo(B("MemAvailable: 18014398509481984 kB\n"), &v), -1); /* *1024 overflows */
    assert_int_equal(memavail_parse_meminfo(B("XMemAvailable: 5 kB\n"), &v), -1);
}

static void test_parse_cgroup(void **state)
{
    (void)state;
    char p[64];
    assert_int_equal(memavail_parse_cgroup(B("0::/system.slice/pagoda.service\n"), p, sizeof p), 0);
    assert_string_equal(p, "/system.slice/pagoda.service");
    assert_int_equal(memavail_parse_cgroup(B("9:name=systemd:/\n4:memory:/x\n0::/\n"), p, sizeof p), 0);
    assert_string_equal(p, "/");
    assert_int_equal(memavail_parse_cgroup(B("4:memory:/x\n"), p, sizeof p), -1);  /* v1 only */
    assert_int_equal(memavail_parse_cgroup(B("0::/a/../../etc\n"), p, sizeof p), -1);
    assert_int_equal(memavail_parse_cgroup(B("0::/0123456789\n"), p, 8), -1);       /* too long */
    assert_int_equal(memavail_parse_cgroup((const uint8_t *)"0::/a\0b\n", 8, p, sizeof p), -1);
}

static void test_parse_numbers(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(memavail_parse_u64(B("max\n"), &v), 0);
    assert_true(v == MEMAVAIL_UNLIMITED);
    assert_int_equal(memavail_parse_u64(B("4294967296\n"), &v), 0);
    assert_true(v == 4294967296ull);
    assert_int_equal(memavail_parse_u64(B("12x\n"), &v), -1);
    assert_int_equal(memavail_parse_u64(B(""), &v), -1);
    assert_int_equal(memavail_parse_stat(B("anon 5\nfile 9\ninactive_file 7\nactive_file 2\n"), "inactive_file", &v), 0);
    assert_true(v == 7);
    assert_int_equal(memavail_parse_stat(B("inactive_filex 7\n"), "inactive_file", &v), -1);
    assert_int_equal(memavail_parse_stat(B("inactive_file 7 8\n"), "inactive_file", &v), -1);
}

/* ---- a fake tree --------------------------------------------------------- */

static char root[256];

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s%s", root, rel);
    for (char *s = path + strlen(root) + 1; (s = strchr(s, '/')); s++) {
        *s = '\0';
        mkdir(path, 0700);
        *s = '/';
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "%s/memavail.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    return system(cmd) == 0 ? 0 : -1;
}

static void test_read_tree(void **state)
{
    (void)state;
    memavail_t m;
    /* nothing readable: no limit */
    memavail_read(root, &m);
    assert_true(m.avail_bytes == MEMAVAIL_UNLIMITED);

    /* MemAvailable alone (no cgroup v2 line) */
    put("/proc/meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n");
    put("/proc/self/cgroup", "4:memory:/x\n");
    memavail_read(root, &m);
    assert_true(m.avail_bytes == 8192 * MIB);
    assert_true(m.cgroup_bytes == MEMAVAIL_UNLIMITED);

    /* a service's cgroup with memory.max 4 GiB, 1.5 GiB used of which 0.5 inactive file */
    put("/proc/self/cgroup", "0::/system.slice/pagoda.service\n");
    put("/sys/fs/cgroup/system.slice/pagoda.service/memory.max", "4294967296\n");
    put("/sys/fs/cgroup/system.slice/pagoda.service/memory.current", "1610612736\n");
    put("/sys/fs/cgroup/system.slice/pagoda.service/memory.stat", "anon 1\ninactive_file 536870912\n");
    memavail_read(root, &m);
    assert_true(m.avail_bytes == 3072 * MIB);
    assert_string_equal(m.cgroup_path, "/system.slice/pagoda.service");

    /* the limit is on an ancestor (a pod), the container's own is max */
    put("/sys/fs/cgroup/system.slice/pagoda.service/memory.max", "max\n");
    put("/sys/fs/cgroup/system.slice/memory.max", "2147483648\n");
    put("/sys/fs/cgroup/system.slice/memory.current", "1073741824\n");
    memavail_read(root, &m);
    assert_true(m.avail_bytes == 1024 * MIB);
    assert_string_equal(m.cgroup_path, "/system.slice");

    /* over the limit already: 0 headroom */
    put("/sys/fs/cgroup/system.slice/memory.current", "3221225472\n");
    memavail_read(root, &m);
    assert_true(m.avail_bytes == 0);

    /* every limit "max": MemAvailable */
    put("/sys/fs/cgroup/system.slice/memory.max", "max\n");
    memavail_read(root, &m);
    assert_true(m.avail_bytes == 8192 * MIB);

    /* the hybrid layout: v2 under /sys/fs/cgroup/unified */
    put("/proc/self/cgroup", "0::/u\n");
    put("/sys/fs/cgroup/unified/u/memory.max", "1073741824\n");
    put("/sys/fs/cgroup/unified/u/memory.current", "0\n");
    memavail_read(root, &m);
    assert_true(m.avail_bytes == 1024 * MIB);
    assert_true(m.meminfo_bytes == 8192 * MIB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_meminfo),
        cmocka_unit_test(test_parse_cgroup),
        cmocka_unit_test(test_parse_numbers),
        cmocka_unit_test_setup_teardown(test_read_tree, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
