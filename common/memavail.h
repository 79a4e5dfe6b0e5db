/* memavail.h — how much memory this process may still take, as Linux tells it.
 *
 * Two limits apply to a process and the smaller one wins:
 *   - the machine's: MemAvailable in /proc/meminfo (free memory plus the page
 *     cache and slab the kernel can reclaim without swapping);
 *   - its cgroup's (cgroup v2, what systemd's MemoryMax= and a Kubernetes
 *     container's memory limit set): for the process's cgroup and each
 *     ancestor that has a memory.max, max - (memory.current - inactive_file
 *     of memory.stat). inactive_file is page cache the kernel drops first
 *     under the limit; Kubernetes leaves it out of a container's working set
 *     for the same reason.
 * cgroup v1 (memory.limit_in_bytes) is not read: a v1-only host is sized by
 * MemAvailable alone.
 *
 * The gateway reads it once at start-up to share among the local workers it
 * supervises; a worker reads it at its start (worker/kv_budget.h has the
 * rule that turns it into a KV pool size).
 *
 * The parsers take (buf, len) so they can be fuzzed (tests/fuzz/fuzz_memavail.c);
 * memavail_read does the file I/O. Nothing here allocates memory the caller
 * frees.
 */
#ifndef PAGODA_COMMON_MEMAVAIL_H
#define PAGODA_COMMON_MEMAVAIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MEMAVAIL_UNLIMITED UINT64_MAX

typedef struct memavail {
    uint64_t meminfo_bytes;  /* MemAvailable; MEMAVAIL_UNLIMITED when /proc/meminfo is unreadable */
    uint64_t cgroup_bytes;   /* least headroom over the cgroup and its ancestors;
                              * MEMAVAIL_UNLIMITED when no memory.max applies */
    uint64_t avail_bytes;    /* min of the two; MEMAVAIL_UNLIMITED when neither was read */
    char cgroup_path[256];   /* the cgroup whose limit is the least ("" when none) */
} memavail_t;

/* "MemAvailable:   12345 kB" out of /proc/meminfo's text. 0 and *bytes, or
 * -1 when the line is missing or malformed. */
int memavail_parse_meminfo(const uint8_t *buf, size_t len, uint64_t *bytes);

/* The cgroup v2 path ("0::/PATH" line) out of /proc/self/cgroup's text into
 * path (NUL-terminated, starts with '/'). 0, or -1 when there is no such
 * line or it does not fit in cap bytes or holds "..". */
int memavail_parse_cgroup(const uint8_t *buf, size_t len, char *path, size_t cap);

/* One number file of a cgroup (memory.max, memory.current): a decimal
 * integer or "max" (MEMAVAIL_UNLIMITED), then optional whitespace. 0 or -1. */
int memavail_parse_u64(const uint8_t *buf, size_t len, uint64_t *v);

/* The value of "KEY N" in a memory.stat text. 0, or -1 when missing. */
int memavail_parse_stat(const uint8_t *buf, size_t len, const char *key, uint64_t *v);

/* Reads the limits above. root is prepended to every path ("" or NULL for
 * the real /proc and /sys; a test passes a folder laid out the same way:
 * ROOT/proc/meminfo, ROOT/proc/self/cgroup, ROOT/sys/fs/cgroup/...). Never
 * fails: what cannot be read does not limit. */
void memavail_read(const char *root, memavail_t *out);

#endif
