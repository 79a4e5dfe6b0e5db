/* file_mac.c — keyed BLAKE2b over libsodium, and the key file (file_mac.h). */
#include "common/file_mac.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/errbuf.h"
#include "common/log.h"

_Static_assert(sizeof(file_mac_state_t) >= sizeof(crypto_generichash_state), "file_mac_state_t too small");

static void init_once(void)
{
    if (sodium_init() < 0) {
        log_error("libsodium failed to initialise");
        abort();
    }
}

int file_mac_key_default_path(const char *dir, char *out, size_t n)
{
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/')
        len--;
    return (size_t)snprintf(out, n, "%.*s.key", (int)len, dir) < n ? 0 : -1;
}

static int read_key(int fd, const char *path, file_mac_key_t *out, char *err, size_t errlen)
{
    struct stat sb;
    if (fstat(fd, &sb) != 0)
        return errbuf_set(err, errlen, "key file %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return errbuf_set(err, errlen, "key file %s is not a regular file", path);
    if (sb.st_uid != geteuid())
        return errbuf_set(err, errlen, "key file %s is owned by uid %u, not by this process (uid %u): its "
                          "owner knows the key; remove it (a new one is made) or give --kv-disk-key a file "
                          "of ours", path, (unsigned)sb.st_uid, (unsigned)geteuid());
    if (sb.st_mode & 077)
        return errbuf_set(err, errlen, "key file %s has mode %03o: others may have read it; remove it "
                          "(a new one is made) or `chmod 600 %s`", path, (unsigned)(sb.st_mode & 0777), path);
    if (sb.st_size != FILE_MAC_KEY_BYTES)
        return errbuf_set(err, errlen, "key file %s is %lld bytes, not %d: remove it (a new one is made)", path,
                          (long long)sb.st_size, FILE_MAC_KEY_BYTES);
    size_t got = 0;
    while (got < FILE_MAC_KEY_BYTES) {
        ssize_t r = read(fd, out->k + got, FILE_MAC_KEY_BYTES - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return errbuf_set(err, errlen, "key file %s: short read", path);
        got += (size_t)r;
    }
    return 0;
}

int file_mac_key_load(const char *path, file_mac_key_t *out, char *err, size_t errlen)
{
    init_once();
    for (int tries = 0; tries < 2; tries++) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            int rc = read_key(fd, path, out, err, errlen);
            close(fd);
            return rc;
        }
        if (errno == ELOOP)
            return errbuf_set(err, errlen, "key file %s is a symlink: refused (remove it)", path);
        if (errno != ENOENT)
            return errbuf_set(err, errlen, "key file %s: %s", path, strerror(errno));
        /* none: make one; another process making it at once wins (EEXIST: read theirs) */
        fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
            if (errno == EEXIST)
                continue;
            return errbuf_set(err, errlen, "cannot create key file %s: %s", path, strerror(errno));
        }
        randombytes_buf(out->k, sizeof out->k);
        bool ok = fchmod(fd, 0600) == 0 && write(fd, out->k, sizeof out->k) == (ssize_t)sizeof out->k &&
                  fsync(fd) == 0;
        int e = errno;
        close(fd);
        if (!ok) {
            unlink(path);
            return errbuf_set(err, errlen, "cannot write key file %s: %s", path, strerror(e));
        }
        log_info("made the file MAC key %s (0600)", path);
        return 0;
    }
    return errbuf_set(err, errlen, "key file %s: made and removed by someone else at once", path);
}

void file_mac(const file_mac_key_t *key, const void *p, size_t n, uint8_t *out, size_t outlen)
{
    crypto_generichash(out, outlen, p, n, key->k, sizeof key->k);
}

uint64_t file_mac64(const file_mac_key_t *key, const void *p, size_t n)
{
    uint8_t m[16];
    file_mac(key, p, n, m, sizeof m);
    uint64_t v;
    memcpy(&v, m, 8);
    return v;
}

void file_mac_init(file_mac_state_t *st, const file_mac_key_t *key, size_t outlen)
{
    crypto_generichash_init((crypto_generichash_state *)st->opaque, key->k, sizeof key->k, outlen);
}

void file_mac_update(file_mac_state_t *st, const void *p, size_t n)
{
    crypto_generichash_update((crypto_generichash_state *)st->opaque, p, n);
}

void file_mac_final(file_mac_state_t *st, uint8_t *out, size_t outlen)
{
    crypto_generichash_final((crypto_generichash_state *)st->opaque, out, outlen);
}
