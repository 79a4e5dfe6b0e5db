/* curve.c — CURVE key files and the authorized-keys list (see curve.h).
 *
 * Z85 is decoded here rather than with zmq_z85_decode so that the alphabet
 * and the 32-bit overflow of each 5-character group are checked the same way
 * whatever libzmq version is installed; libzmq is used for what needs
 * libsodium (key generation, deriving a public key). */
#include "proto/curve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/errbuf.h"
#include "common/log.h"
#include "common/xalloc.h"

static const char z85_chars[] =
    "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

bool curve_available(void)
{
    return zmq_has("curve") != 0;
}

/* Value 0..84 of a Z85 character, -1 for anything else. */
static int z85_value(char ch)
{
    if (ch == 0)
        return -1;
    const char *p = strchr(z85_chars, ch);
    return p ? (int)(p - z85_chars) : -1;
}

int curve_key_decode(const char *s, size_t len, uint8_t out[CURVE_KEY_BYTES])
{
    if (len != CURVE_Z85_LEN)
        return -1;
    uint8_t tmp[CURVE_KEY_BYTES];
    /* 5 characters = one big-endian 32-bit word, base 85 */
    for (size_t g = 0; g < CURVE_Z85_LEN / 5; g++) {
        uint64_t v = 0;
        for (size_t i = 0; i < 5; i++) {
            int d = z85_value(s[g * 5 + i]);
            if (d < 0)
                return -1;
            v = v * 85 + (uint64_t)d;
        }
        if (v > UINT32_MAX)
            return -1;
        tmp[g * 4 + 0] = (uint8_t)(v >> 24);
        tmp[g * 4 + 1] = (uint8_t)(v >> 16);
        tmp[g * 4 + 2] = (uint8_t)(v >> 8);
        tmp[g * 4 + 3] = (uint8_t)v;
    }
    if (out)
        memcpy(out, tmp, sizeof tmp);
    return 0;
}

/* ---- lists ------------------------------------------------------------------ */

curve_keylist_t *curve_keylist_new(void)
{
    return xcalloc(1, sizeof(curve_keylist_t));
}

void curve_keylist_free(curve_keylist_t **lp)
{
    if (!lp || !*lp)
        return;
    free((*lp)->keys);
    free(*lp);
    *lp = NULL;
}

const curve_key_entry_t *curve_keylist_find(const curve_keylist_t *l,
                                            const uint8_t key[CURVE_KEY_BYTES])
{
    /* linear: lists are short and lookups happen once per connection */
    for (size_t i = 0; l && i < l->n; i++)
        if (!memcmp(l->keys[i].key, key, CURVE_KEY_BYTES))
            return &l->keys[i];
    return NULL;
}

static curve_key_entry_t *append(curve_keylist_t *l)
{
    l->keys = xrealloc(l->keys, (l->n + 1) * sizeof *l->keys);
    curve_key_entry_t *e = &l->keys[l->n++];
    memset(e, 0, sizeof *e);
    return e;
}

int curve_keylist_add(curve_keylist_t *l, const char *z85, const char *name)
{
    uint8_t key[CURVE_KEY_BYTES];
    if (!z85 || curve_key_decode(z85, strlen(z85), key) < 0)
        return -1;
    if (curve_keylist_find(l, key))
        return 0;
    curve_key_entry_t *e = append(l);
    memcpy(e->key, key, sizeof key);
    memcpy(e->z85, z85, CURVE_Z85_LEN);
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
    return 0;
}

curve_keylist_t *curve_keylist_copy(const curve_keylist_t *l)
{
    curve_keylist_t *c = curve_keylist_new();
    if (l && l->n) {
        c->keys = xmalloc(l->n * sizeof *c->keys);
        memcpy(c->keys, l->keys, l->n * sizeof *c->keys);
        c->n = l->n;
    }
    return c;
}

/* ---- parsing ------------------------------------------------------------------ */

static bool is_blank(char ch)
{
    return ch == ' ' || ch == '\t';
}

static bool name_char(char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("._-@:/", ch));
}

/* Parses one line [p, end) (without its newline) into l. Returns 0, or -1
 * with a reason in why. */
static int parse_line(const char *p, const char *end, int line, curve_keylist_t *l, char *why,
                      size_t n)
{
    while (p < end && is_blank(*p))
        p++;
    while (end > p && is_blank(end[-1]))
        end--;
    if (p == end)
        return 0;
    for (const char *q = p; q < end; q++)
        if (((unsigned char)*q < 0x20 && *q != '\t') || (unsigned char)*q >= 0x7f) {
            snprintf(why, n, "non-printable or non-ASCII byte 0x%02x", (unsigned char)*q);
            return -1;
        }
    const char *w = p;
    while (p < end && !is_blank(*p))
        p++;
    size_t wl = (size_t)(p - w);
    uint8_t key[CURVE_KEY_BYTES];
    if (wl != CURVE_Z85_LEN || curve_key_decode(w, wl, key) < 0) {
        if (w[0] == '#')
            return 0; /* a comment line */
        if (wl != CURVE_Z85_LEN)
            snprintf(why, n, "expected a %d-character Z85 public key, got a word of %zu characters",
                     CURVE_Z85_LEN, wl);
        else
            snprintf(why, n, "not a valid Z85 key (bad character or value)");
        return -1;
    }
    const curve_key_entry_t *dup = curve_keylist_find(l, key);
    if (dup) {
        snprintf(why, n, "duplicate key (first at line %d)", dup->line);
        return -1;
    }
    if (l->n >= CURVE_KEYLIST_MAX) {
        snprintf(why, n, "more than %d keys", CURVE_KEYLIST_MAX);
        return -1;
    }
    char name[CURVE_NAME_MAX + 1] = "";
    while (p < end && is_blank(*p))
        p++;
    if (p < end && *p != '#') {
        const char *nm = p;
        while (p < end && !is_blank(*p))
            p++;
        size_t nl = (size_t)(p - nm);
        if (nl > CURVE_NAME_MAX) {
            snprintf(why, n, "key name longer than %d characters", CURVE_NAME_MAX);
            return -1;
        }
        for (size_t i = 0; i < nl; i++)
            if (!name_char(nm[i])) {
                snprintf(why, n, "bad character '%c' in key name (allowed: A-Z a-z 0-9 . _ - @ : /)",
                         nm[i]);
                return -1;
            }
        memcpy(name, nm, nl);
        name[nl] = 0;
        while (p < end && is_blank(*p))
            p++;
        if (p < end && *p != '#') {
            snprintf(why, n, "unexpected text after the key name (comments start with '#')");
            return -1;
        }
    }
    curve_key_entry_t *e = append(l);
    memcpy(e->key, key, sizeof key);
    memcpy(e->z85, w, CURVE_Z85_LEN);
    e->z85[CURVE_Z85_LEN] = 0;
    memcpy(e->name, name, sizeof name);
    e->line = line;
    return 0;
}

int curve_keylist_parse(const uint8_t *buf, size_t len, const char *source, curve_keylist_t **out,
                        char *err, size_t errlen)
{
    char dummy[1], why[192];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    err[0] = 0;
    *out = NULL;
    if (!source)
        source = "keys";
    if (len > CURVE_FILE_MAX) {
        errbuf_set(err, errlen, "%s: larger than %u bytes", source, CURVE_FILE_MAX);
        return -1;
    }
    curve_keylist_t *l = curve_keylist_new();
    const char *p = (const char *)buf, *end = p + len;
    int line = 0;
    while (p < end) {
        line++;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        const char *ce = le > p && le[-1] == '\r' ? le - 1 : le;
        if (parse_line(p, ce, line, l, why, sizeof why) < 0) {
            errbuf_set(err, errlen, "%s:%d: %s", source, line, why);
            curve_keylist_free(&l);
            return -1;
        }
        p = nl ? nl + 1 : end;
    }
    *out = l;
    return 0;
}

/* Reads a whole file (at most CURVE_FILE_MAX bytes); *mode gets its
 * permission bits when non-NULL. NULL with err on failure. */
static uint8_t *read_file(const char *path, size_t *len, mode_t *mode, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        errbuf_set(err, errlen, "%s: cannot open: %s", path, strerror(e));
        errno = e;
        return NULL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        errbuf_set(err, errlen, "%s: not a regular file", path);
        close(fd);
        return NULL;
    }
    if (mode)
        *mode = st.st_mode & 07777;
    uint8_t *buf = xmalloc(CURVE_FILE_MAX + 1);
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, CURVE_FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            errbuf_set(err, errlen, "%s: read error: %s", path, strerror(errno));
            close(fd);
            free(buf);
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > CURVE_FILE_MAX) {
            errbuf_set(err, errlen, "%s: larger than %u bytes", path, CURVE_FILE_MAX);
            close(fd);
            free(buf);
            return NULL;
        }
    }
    close(fd);
    *len = n;
    return buf;
}

int curve_keylist_load(const char *path, curve_keylist_t **out, char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    *out = NULL;
    size_t len;
    uint8_t *buf = read_file(path, &len, NULL, err, errlen);
    if (!buf)
        return -1;
    int rc = curve_keylist_parse(buf, len, path, out, err, errlen);
    free(buf);
    return rc;
}

int curve_key_file_parse(const uint8_t *buf, size_t len, const char *source,
                         char z85[CURVE_Z85_LEN + 1], char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (!source)
        source = "key";
    curve_keylist_t *l = NULL;
    if (curve_keylist_parse(buf, len, source, &l, err, errlen) < 0)
        return -1;
    int rc = -1;
    if (l->n == 0)
        errbuf_set(err, errlen, "%s: no key in the file (expected one line of %d Z85 characters)",
                   source, CURVE_Z85_LEN);
    else if (l->n > 1)
        errbuf_set(err, errlen, "%s:%d: a second key (a key file holds exactly one)", source,
                   l->keys[1].line);
    else {
        memcpy(z85, l->keys[0].z85, CURVE_Z85_LEN + 1);
        rc = 0;
    }
    curve_keylist_free(&l);
    return rc;
}

static int derive_public(const char secret[CURVE_Z85_LEN + 1], char public_z85[CURVE_Z85_LEN + 1],
                         const char *source, char *err, size_t errlen)
{
    char pub[CURVE_Z85_LEN + 1];
    if (zmq_curve_public(pub, secret) != 0) {
        errbuf_set(err, errlen, "%s: cannot derive the public key: %s", source, zmq_strerror(errno));
        return -1;
    }
    if (public_z85)
        memcpy(public_z85, pub, sizeof pub);
    return 0;
}

int curve_secret_load(const char *path, char secret_z85[CURVE_Z85_LEN + 1],
                      char public_z85[CURVE_Z85_LEN + 1], char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    size_t len;
    mode_t mode = 0;
    uint8_t *buf = read_file(path, &len, &mode, err, errlen);
    if (!buf)
        return -1;
    char secret[CURVE_Z85_LEN + 1];
    int rc = curve_key_file_parse(buf, len, path, secret, err, errlen);
    explicit_bzero(buf, len);
    free(buf);
    if (rc == 0)
        rc = derive_public(secret, public_z85, path, err, errlen);
    if (rc == 0) {
        memcpy(secret_z85, secret, sizeof secret);
        if (mode & 077)
            log_warn("%s: secret key is readable by group or others (mode %04o); chmod 600 it",
                     path, (unsigned)mode);
    }
    explicit_bzero(secret, sizeof secret);
    return rc;
}

int curve_secret_from_text(const char *text, char secret_z85[CURVE_Z85_LEN + 1],
                           char public_z85[CURVE_Z85_LEN + 1], char *err, size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    char secret[CURVE_Z85_LEN + 1];
    if (curve_key_file_parse((const uint8_t *)text, strlen(text), "secret key", secret, err,
                             errlen) < 0)
        return -1;
    if (derive_public(secret, public_z85, "secret key", err, errlen) < 0)
        return -1;
    memcpy(secret_z85, secret, sizeof secret);
    explicit_bzero(secret, sizeof secret);
    return 0;
}

int curve_public_load(const char *key_or_path, char public_z85[CURVE_Z85_LEN + 1], char *err,
                      size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    size_t kl = strlen(key_or_path);
    if (kl == CURVE_Z85_LEN && curve_key_decode(key_or_path, kl, NULL) == 0 &&
        access(key_or_path, F_OK) != 0) {
        memcpy(public_z85, key_or_path, CURVE_Z85_LEN + 1);
        return 0;
    }
    size_t len;
    uint8_t *buf = read_file(key_or_path, &len, NULL, err, errlen);
    if (!buf) {
        if (errno == ENOENT && kl != CURVE_Z85_LEN) {
            size_t used = strlen(err);
            if (used < errlen)
                errbuf_set(err + used, errlen - used, " (and not a %d-character Z85 key)",
                           CURVE_Z85_LEN);
        }
        return -1;
    }
    int rc = curve_key_file_parse(buf, len, key_or_path, public_z85, err, errlen);
    free(buf);
    return rc;
}

int curve_keypair_new(char public_z85[CURVE_Z85_LEN + 1], char secret_z85[CURVE_Z85_LEN + 1])
{
    return zmq_curve_keypair(public_z85, secret_z85) == 0 ? 0 : -1;
}

static int write_all(int fd, const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Creates `path` (must not exist) with `mode` and writes text. */
static int write_new(const char *path, mode_t mode, const char *text, char *err, size_t errlen)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd < 0) {
        errbuf_set(err, errlen, "%s: %s", path,
                   errno == EEXIST ? "exists already (not overwritten)" : strerror(errno));
        return -1;
    }
    /* the umask may have taken bits away; never added any */
    if (fchmod(fd, mode) != 0 || write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
        errbuf_set(err, errlen, "%s: write error: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        return -1;
    }
    if (close(fd) != 0) {
        errbuf_set(err, errlen, "%s: write error: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

int curve_keypair_write(const char *prefix, char public_z85[CURVE_Z85_LEN + 1], char *err,
                        size_t errlen)
{
    char dummy[1];
    if (!err || !errlen) {
        err = dummy;
        errlen = sizeof dummy;
    }
    if (!curve_available()) {
        errbuf_set(err, errlen, "this libzmq has no CURVE support (built without libsodium)");
        return -1;
    }
    size_t pl = strlen(prefix);
    if (pl == 0 || pl > 4000) {
        errbuf_set(err, errlen, "bad key file prefix");
        return -1;
    }
    char pub[CURVE_Z85_LEN + 1], sec[CURVE_Z85_LEN + 1];
    if (curve_keypair_new(pub, sec) < 0) {
        errbuf_set(err, errlen, "cannot generate a key pair: %s", zmq_strerror(errno));
        return -1;
    }
    /* the name in PREFIX.pub: PREFIX's basename, limited to name characters */
    const char *base = strrchr(prefix, '/');
    base = base ? base + 1 : prefix;
    char name[CURVE_NAME_MAX + 1];
    size_t k = 0;
    for (const char *p = base; *p && k < CURVE_NAME_MAX; p++)
        name[k++] = name_char(*p) ? *p : '_';
    name[k] = 0;
    char kpath[4100], ppath[4100], text[512];
    snprintf(kpath, sizeof kpath, "%s.key", prefix);
    snprintf(ppath, sizeof ppath, "%s.pub", prefix);
    snprintf(text, sizeof text,
             "# pagoda CURVE secret key: keep it private (mode 0600).\n"
             "# Its public key (in %s.pub): %s\n%s\n",
             base, pub, sec);
    int rc = write_new(kpath, 0600, text, err, errlen);
    explicit_bzero(text, sizeof text);
    explicit_bzero(sec, sizeof sec);
    if (rc < 0)
        return -1;
    snprintf(text, sizeof text, "%s%s%s\n", pub, name[0] ? " " : "", name);
    if (write_new(ppath, 0644, text, err, errlen) < 0) {
        unlink(kpath);
        return -1;
    }
    if (public_z85)
        memcpy(public_z85, pub, sizeof pub);
    return 0;
}

int curve_keypair_cli(const char *prog, const char *prefix)
{
    char err[512], pub[CURVE_Z85_LEN + 1];
    if (curve_keypair_write(prefix, pub, err, sizeof err) < 0) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 1;
    }
    printf("wrote %s.key (secret, mode 0600) and %s.pub\npublic key: %s\n", prefix, prefix, pub);
    return 0;
}
