/* fuzz_memavail.c — libFuzzer target for common/memavail.h's parsers.
 *
 * The input is fed to each parser whole (as /proc/meminfo, /proc/self/cgroup,
 * a memory.max and a memory.stat). Properties beyond ASan/UBSan: a cgroup
 * path accepted fits its buffer, starts with '/' and holds no ".."; a
 * MemAvailable accepted is a multiple of 1024. */
#include <stdint.h>
#include <string.h>

#include "common/memavail.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t v;
    char path[64];
    if (memavail_parse_meminfo(data, size, &v) == 0 && v % 1024 != 0)
        __builtin_trap();
    if (memavail_parse_cgroup(data, size, path, sizeof path) == 0 &&
        (path[0] != '/' || strlen(path) >= sizeof path || strstr(path, "..")))
        __builtin_trap();
    (void)memavail_parse_u64(data, size, &v);
    (void)memavail_parse_stat(data, size, "inactive_file", &v);
    return 0;
}
