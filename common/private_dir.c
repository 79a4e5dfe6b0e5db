/* private_dir.c — owner-only folders and temporaries (see private_dir.h). */
#include "common/private_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/log.h"

void private_dir_random_hex(char out[17])
{
    uint64_t r = 0;
    size_t got = 0;
    while (got < sizeof r) {
        ssize_t n = getrandom((char *)&r + got, sizeof r - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* getrandom cannot fail on Linux >= 3.17 with a seeded pool */
            log_error("getrandom: %s", strerror(errno));
            abort();
        }
        got += (size_t)n;
    }
    snprintf(out, 17, "%016llx", (unsigned long long)r);
}

int private_dir_check(const char *path, const char *what, char *err, size_t errlen)
{
    struct stat sb;
    if (lstat(path, &sb) != 0)
        return errbuf_set(err, errlen, "%s %s: %s", what, path, strerror(errno));
    if (S_ISLNK(sb.st_mode)) {
        /* a symlink is fine when it is ours and leads to a folder that passes */
        if (sb.st_uid != geteuid())
            return errbuf_set(err, errlen, "%s %s is a symlink owned by uid %u, not by us (uid %u): "
                              "remove it, or point the flag at a folder of our own", what, path,
                              (unsigned)sb.st_uid, (unsigned)geteuid());
        if (stat(path, &sb) != 0)
            return errbuf_set(err, errlen, "%s %s: %s", what, path, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return errbuf_set(err, errlen, "%s %s is not a folder", what, path);
    if (sb.st_uid != geteuid())
        return errbuf_set(err, errlen, "%s %s is owned by uid %u, not by this process (uid %u): another user "
                          "could plant files in it; remove it or `chown -R %u %s`, then `chmod 700 %s`",
                          what, path, (unsigned)sb.st_uid, (unsigned)geteuid(), (unsigned)geteuid(), path, path);
    if (sb.st_mode & (S_IWGRP | S_IWOTH))
        return errbuf_set(err, errlen, "%s %s is group- or world-writable (mode %03o): others could plant "
                          "files in it; `chmod 700 %s` (and check what is in it)", what, path,
                          (unsigned)(sb.st_mode & 0777), path);
    if ((sb.st_mode & 0777) != 0700) {
        /* only too readable (others may list names; the files are 0600):
         * narrowed, or left as it is where it cannot be (a read-only mount
         * is no place to plant anything either) */
        if (chmod(path, 0700) == 0)
            log_info("%s %s: mode %03o narrowed to 700 (it holds users' data)", what, path,
                     (unsigned)(sb.st_mode & 0777));
        else
            log_warn("%s %s: mode %03o, cannot narrow it to 700: %s", what, path, (unsigned)(sb.st_mode & 0777),
                     strerror(errno));
    }
    return 0;
}

int private_dir_make(const char *path, const char *what, char *err, size_t errlen)
{
    char tmp[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof tmp)
        return errbuf_set(err, errlen, "%s: empty or too long a path", what);
    memcpy(tmp, path, n + 1);
    while (n > 1 && tmp[n - 1] == '/')
        tmp[--n] = 0;
    for (size_t i = 1; i <= n; i++) {
        if (tmp[i] != '/' && tmp[i] != 0)
            continue;
        char c = tmp[i];
        tmp[i] = 0;
        if (mkdir(tmp, 0700) == 0) {
            if (chmod(tmp, 0700) != 0) /* the umask may have taken bits: set exactly */
                return errbuf_set(err, errlen, "%s %s: chmod 700: %s", what, tmp, strerror(errno));
        } else if (errno != EEXIST) {
            return errbuf_set(err, errlen, "%s: cannot create %s: %s", what, tmp, strerror(errno));
        }
        tmp[i] = c;
    }
    return private_dir_check(tmp, what, err, errlen);
}

int private_dir_tmpfile(const char *dir, const char *prefix, char *path_out, size_t n)
{
    for (int tries = 0; tries < 16; tries++) {
        char r[17];
        private_dir_random_hex(r);
        if ((size_t)snprintf(path_out, n, "%s/%s%s", dir, prefix, r) >= n) {
            errno = ENAMETOOLONG;
            return -1;
        }
        int fd = open(path_out, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0) {
            if (fchmod(fd, 0600) != 0) { /* the umask cannot add bits, but set it exactly */
                int e = errno;
                close(fd);
                unlink(path_out);
                errno = e;
                return -1;
            }
            return fd;
        }
        if (errno != EEXIST)
            return -1;
    }
    errno = EEXIST;
    return -1;
}
