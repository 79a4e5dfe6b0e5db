/* memavail.c — MemAvailable and the cgroup v2 memory headroom (memavail.h). */
#include "common/memavail.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The unsigned decimal at buf[*i..]; advances *i. -1 on no digit or overflow. */
static int parse_dec(const uint8_t *buf, size_t len, size_t *i, uint64_t *v)
{
    size_t k = *i;
    uint64_t n = 0;
    if (k >= len || buf[k] < '0' || buf[k] > '9')
        return -1;
    for (; k < len && buf[k] >= '0' && buf[k] <= '9'; k++) {
        unsigned d = (unsigned)(buf[k] - '0');
        if (n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    *i = k;
    *v = n;
    return 0;
}

static bool is_blank(uint8_t c) { return c == ' ' || c == '\t'; }

/* The line starting at buf[at] ends at the returned index ('\n' or len). */
static size_t line_end(const uint8_t *buf, size_t len, size_t at)
{
    while (at < len && buf[at] != '\n')
        at++;
    return at;
}

int memavail_parse_meminfo(const uint8_t *buf, size_t len, uint64_t *bytes)
{
    static const char key[] = "MemAvailable:";
    const size_t klen = sizeof key - 1;
    for (size_t at = 0; at < len; at = line_end(buf, len, at) + 1) {
        size_t end = line_end(buf, len, at);
        if (end - at < klen || memcmp(buf + at, key, klen) != 0)
            continue;
        size_t i = at + klen;
        while (i < end && is_blank(buf[i]))
            i++;
        uint64_t kb;
        if (parse_dec(buf, end, &i, &kb) != 0)
            return -1;
        while (i < end && is_blank(buf[i]))
            i++;
        if (end - i != 2 || memcmp(buf + i, "kB", 2) != 0 || kb > UINT64_MAX / 1024)
            return -1;
        *bytes = kb * 1024;
        return 0;
    }
    return -1;
}

int memavail_parse_cgroup(const uint8_t *buf, size_t len, char *path, size_t cap)
{
    for (size_t at = 0; at < len; at = line_end(buf, len, at) + 1) {
        size_t end = line_end(buf, len, at);
        if (end - at < 4 || memcmp(buf + at, "0::/", 4) != 0)
            continue;
        size_t n = end - at - 3; /* from the '/' */
        const uint8_t *p = buf + at + 3;
        if (n + 1 > cap || memchr(p, '\0', n))
            return -1;
        for (size_t k = 0; k + 1 < n; k++)
            if (p[k] == '.' && p[k + 1] == '.')
                return -1;
        memcpy(path, p, n);
        path[n] = '\0';
        return 0;
    }
    return -1;
}

int memavail_parse_u64(const uint8_t *buf, size_t len, uint64_t *v)
{
    size_t i = 0;
    uint64_t n;
    if (len >= 3 && memcmp(buf, "max", 3) == 0) {
        i = 3;
        n = MEMAVAIL_UNLIMITED;
    } else if (parse_dec(buf, len, &i, &n) != 0) {
        return -1;
    }
    for (; i < len; i++)
        if (!is_blank(buf[i]) && buf[i] != '\n')
            return -1;
    *v = n;
    return 0;
}

int memavail_parse_stat(const uint8_t *buf, size_t len, const char *key, uint64_t *v)
{
    const size_t klen = strlen(key);
    for (size_t at = 0; at < len; at = line_end(buf, len, at) + 1) {
        size_t end = line_end(buf, len, at);
        if (end - at <= klen || memcmp(buf + at, key, klen) != 0 || buf[at + klen] != ' ')
            continue;
        size_t i = at + klen + 1;
        if (parse_dec(buf, end, &i, v) != 0 || i != end)
            return -1;
        return 0;
    }
    return -1;
}

/* Up to cap bytes of ROOT/path into buf; its length, or -1. */
static ssize_t read_small(const char *root, const char *path, uint8_t *buf, size_t cap)
{
    char full[1024];
    if (snprintf(full, sizeof full, "%s%s", root, path) >= (int)sizeof full)
        return -1;
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0) {
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    return (ssize_t)n;
}

/* The headroom of one cgroup folder (BASE + cg, relative to root), or
 * MEMAVAIL_UNLIMITED when it has no readable memory.max or "max". */
static uint64_t cgroup_headroom(const char *root, const char *dir)
{
    uint8_t buf[8192];
    char p[560]; /* dir (< 512) + a file name */
    uint64_t max, cur, inactive = 0;
    snprintf(p, sizeof p, "%s/memory.max", dir);
    ssize_t n = read_small(root, p, buf, sizeof buf);
    if (n < 0 || memavail_parse_u64(buf, (size_t)n, &max) != 0 || max == MEMAVAIL_UNLIMITED)
        return MEMAVAIL_UNLIMITED;
    snprintf(p, sizeof p, "%s/memory.current", dir);
    n = read_small(root, p, buf, sizeof buf);
    if (n < 0 || memavail_parse_u64(buf, (size_t)n, &cur) != 0)
        cur = 0;
    snprintf(p, sizeof p, "%s/memory.stat", dir);
    n = read_small(root, p, buf, sizeof buf);
    if (n < 0 || memavail_parse_stat(buf, (size_t)n, "inactive_file", &inactive) != 0 || inactive > cur)
        inactive = 0;
    uint64_t used = cur - inactive;
    return used < max ? max - used : 0;
}

void memavail_read(const char *root, memavail_t *out)
{
    if (!root)
        root = "";
    memset(out, 0, sizeof *out);
    out->meminfo_bytes = out->cgroup_bytes = MEMAVAIL_UNLIMITED;
    uint8_t buf[16384];
    ssize_t n = read_small(root, "/proc/meminfo", buf, sizeof buf);
    uint64_t v;
    if (n > 0 && memavail_parse_meminfo(buf, (size_t)n, &v) == 0)
        out->meminfo_bytes = v;

    char cg[256];
    n = read_small(root, "/proc/self/cgroup", buf, sizeof buf);
    if (n > 0 && memavail_parse_cgroup(buf, (size_t)n, cg, sizeof cg) == 0) {
        /* the v2 hierarchy: /sys/fs/cgroup on a v2 host, .../unified on a hybrid one */
        static const char *const bases[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++) {
            char dir[512];
            /* the cgroup, then each ancestor up to (not including) the root,
             * which has no memory.max */
            for (size_t end = strlen(cg); end > 1;) {
                snprintf(dir, sizeof dir, "%s%.*s", bases[b], (int)end, cg);
                uint64_t h = cgroup_headroom(root, dir);
                if (h < out->cgroup_bytes) {
                    out->cgroup_bytes = h;
                    snprintf(out->cgroup_path, sizeof out->cgroup_path, "%.*s", (int)end, cg);
                }
                while (end > 0 && cg[end - 1] != '/')
                    end--;
                if (end > 0)
                    end--; /* drop the '/' */
            }
        }
    }
    out->avail_bytes = out->meminfo_bytes < out->cgroup_bytes ? out->meminfo_bytes : out->cgroup_bytes;
}
