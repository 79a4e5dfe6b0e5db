/* keys.c — parsing the API keys file and constant-time bearer-token lookup.
 * Format and thread-safety rules are in keys.h. */
#include "gateway/keys.h"

#include <errno.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "common/errbuf.h"
#include "common/hex.h"
#include "common/vec.h"
#include "common/xalloc.h"
#include "gateway/partition.h"

struct keys {
    keys_entry_t *entries; /* (n) in file order */
    size_t n;
};

static int name_char_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-' || c == '@';
}

/* A field of a line: [p, p+len). */
typedef struct {
    const char *p;
    size_t len;
} field_t;

static int field_is(const field_t *f, const char *s)
{
    return f->len == strlen(s) && memcmp(f->p, s, f->len) == 0;
}

#define KEYS_N_FLAGS 3 /* admin, metrics, group=NAME */
#define KEYS_USAGE "(want: name tier sha256hex [admin] [metrics] [group=NAME])"

/* A name (key or group): 1..KEYS_NAME_MAX of [A-Za-z0-9._@-] into out.
 * 0, or -1 with *why set. */
static int parse_name(const field_t *f, char out[KEYS_NAME_MAX + 1], const char *what, const char **why,
                      char *detail, size_t detail_cap)
{
    if (f->len == 0 || f->len > KEYS_NAME_MAX) {
        snprintf(detail, detail_cap, "%s must be 1..64 characters", what);
        *why = detail;
        return -1;
    }
    for (size_t k = 0; k < f->len; k++) {
        if (!name_char_ok((unsigned char)f->p[k])) {
            snprintf(detail, detail_cap, "%s may only contain A-Z a-z 0-9 . _ @ -", what);
            *why = detail;
            return -1;
        }
    }
    memcpy(out, f->p, f->len);
    out[f->len] = '\0';
    return 0;
}

/* Parses one non-comment line into *e. Returns 0, or -1 with err set. */
static int parse_line(const char *line, size_t len, keys_entry_t *e, const char **why, char *detail,
                      size_t detail_cap)
{
    field_t f[3 + KEYS_N_FLAGS];
    size_t n_f = 0, i = 0;
    while (i < len) {
        while (i < len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == len)
            break;
        size_t start = i;
        while (i < len && line[i] != ' ' && line[i] != '\t')
            i++;
        if (n_f == 3 + KEYS_N_FLAGS) {
            *why = "too many fields " KEYS_USAGE;
            return -1;
        }
        f[n_f++] = (field_t){line + start, i - start};
    }
    if (n_f < 3) {
        *why = "too few fields " KEYS_USAGE;
        return -1;
    }
    /* name */
    if (f[0].len > KEYS_NAME_MAX) {
        *why = "name longer than 64 characters";
        return -1;
    }
    if (parse_name(&f[0], e->name, "name", why, detail, detail_cap) < 0)
        return -1;
    /* tier */
    if (field_is(&f[1], "high"))
        e->tier = PRIO_TIER_HIGH;
    else if (field_is(&f[1], "normal"))
        e->tier = PRIO_TIER_NORMAL;
    else if (field_is(&f[1], "low"))
        e->tier = PRIO_TIER_LOW;
    else {
        snprintf(detail, detail_cap, "unknown tier '%.*s' (want high, normal or low)",
                 (int)(f[1].len > 32 ? 32 : f[1].len), f[1].p);
        *why = detail;
        return -1;
    }
    /* hash */
    if (f[2].len != 64) {
        snprintf(detail, detail_cap,
                 "hash must be 64 hex digits (SHA-256 of the key), got %zu characters; "
                 "make one with --hash-key",
                 f[2].len);
        *why = detail;
        return -1;
    }
    for (size_t k = 0; k < 32; k++) {
        int hi = hex_value((unsigned char)f[2].p[2 * k]), lo = hex_value((unsigned char)f[2].p[2 * k + 1]);
        if (hi < 0 || lo < 0) {
            *why = "hash contains a non-hex character";
            return -1;
        }
        e->sha256[k] = (uint8_t)(hi << 4 | lo);
    }
    /* flags */
    e->admin = e->metrics = 0;
    e->group[0] = '\0';
    bool has_group = false;
    for (size_t j = 3; j < n_f; j++) {
        int *flag = field_is(&f[j], "admin") ? &e->admin : field_is(&f[j], "metrics") ? &e->metrics : NULL;
        if (flag) {
            if (*flag) {
                snprintf(detail, detail_cap, "flag '%.*s' given twice", (int)f[j].len, f[j].p);
                *why = detail;
                return -1;
            }
            *flag = 1;
        } else if (f[j].len >= 6 && memcmp(f[j].p, "group=", 6) == 0) {
            if (has_group) {
                *why = "flag 'group=' given twice";
                return -1;
            }
            field_t g = {f[j].p + 6, f[j].len - 6};
            if (parse_name(&g, e->group, "group name", why, detail, detail_cap) < 0)
                return -1;
            has_group = true;
        } else {
            snprintf(detail, detail_cap, "unknown flag '%.*s' (known: admin, metrics, group=NAME)",
                     (int)(f[j].len > 32 ? 32 : f[j].len), f[j].p);
            *why = detail;
            return -1;
        }
    }
    if (e->admin)
        e->metrics = 1;
    e->partition = partition_of_key(e->sha256, e->group);
    return 0;
}

int keys_parse(const uint8_t *buf, size_t len, const char *source, keys_t **out, char *err,
               size_t err_cap)
{
    *out = NULL;
    if (!source)
        source = "keys";
    if (sodium_init() < 0) {
        errbuf_set(err, err_cap, "%s: libsodium failed to initialise", source);
        return -1;
    }
    if (len > KEYS_FILE_MAX) {
        errbuf_set(err, err_cap, "%s: file larger than %u bytes", source, KEYS_FILE_MAX);
        return -1;
    }
    keys_t *k = xcalloc(1, sizeof(*k));
    size_t cap = 0;
    size_t pos = 0, line_no = 0;
    char detail[160];
    while (pos < len) {
        line_no++;
        const uint8_t *nl = memchr(buf + pos, '\n', len - pos);
        size_t end = nl ? (size_t)(nl - buf) : len;
        const char *line = (const char *)buf + pos;
        size_t line_len = end - pos;
        pos = nl ? end + 1 : len;
        if (line_len > KEYS_LINE_MAX) {
            errbuf_set(err, err_cap, "%s:%zu: line longer than %d bytes", source, line_no, KEYS_LINE_MAX);
            goto err;
        }
        if (line_len > 0 && line[line_len - 1] == '\r')
            line_len--;
        if (memchr(line, '\0', line_len)) {
            errbuf_set(err, err_cap, "%s:%zu: NUL byte in line", source, line_no);
            goto err;
        }
        size_t i = 0;
        while (i < line_len && (line[i] == ' ' || line[i] == '\t'))
            i++;
        if (i == line_len || line[i] == '#')
            continue;
        for (size_t c = i; c < line_len; c++) {
            unsigned char ch = (unsigned char)line[c];
            if (ch < 0x20 && ch != '\t') {
                errbuf_set(err, err_cap, "%s:%zu: control character 0x%02x in line", source, line_no, ch);
                goto err;
            }
        }
        if (k->n == KEYS_MAX_ENTRIES) {
            errbuf_set(err, err_cap, "%s:%zu: more than %d entries", source, line_no, KEYS_MAX_ENTRIES);
            goto err;
        }
        vec_reserve(k->entries, cap, k->n + 1);
        keys_entry_t *e = &k->entries[k->n];
        memset(e, 0, sizeof(*e));
        const char *why = NULL;
        if (parse_line(line + i, line_len - i, e, &why, detail, sizeof(detail)) != 0) {
            errbuf_set(err, err_cap, "%s:%zu: %s", source, line_no, why);
            goto err;
        }
        /* Uniqueness: quadratic, but only at load time and bounded by the file size. */
        for (size_t j = 0; j < k->n; j++) {
            if (strcmp(k->entries[j].name, e->name) == 0) {
                errbuf_set(err, err_cap, "%s:%zu: duplicate name '%s'", source, line_no, e->name);
                goto err;
            }
            if (memcmp(k->entries[j].sha256, e->sha256, 32) == 0) {
                errbuf_set(err, err_cap, "%s:%zu: same key hash as '%s'", source, line_no,
                           k->entries[j].name);
                goto err;
            }
        }
        k->n++;
    }
    *out = k;
    return 0;
err:
    keys_free(&k);
    return -1;
}

int keys_load(const char *path, keys_t **out, char *err, size_t err_cap)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        errbuf_set(err, err_cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, n = 0;
    uint8_t *buf = xmalloc(cap);
    for (;;) {
        if (n == cap) {
            if (cap > KEYS_FILE_MAX) {
                fclose(f);
                free(buf);
                errbuf_set(err, err_cap, "%s: file larger than %u bytes", path, KEYS_FILE_MAX);
                return -1;
            }
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errbuf_set(err, err_cap, "%s: read error", path);
        return -1;
    }
    int rc = keys_parse(buf, n, path, out, err, err_cap);
    free(buf);
    return rc;
}

void keys_free(keys_t **kp)
{
    if (!kp || !*kp)
        return;
    keys_t *k = *kp;
    if (k->entries)
        sodium_memzero(k->entries, k->n * sizeof(keys_entry_t));
    free(k->entries);
    free(k);
    *kp = NULL;
}

size_t keys_count(const keys_t *keys)
{
    return keys ? keys->n : 0;
}

const keys_entry_t *keys_entry(const keys_t *keys, size_t i)
{
    return (keys && i < keys->n) ? &keys->entries[i] : NULL;
}

const keys_entry_t *keys_lookup(const keys_t *keys, const char *bearer_token)
{
    if (!keys || !bearer_token || keys->n == 0)
        return NULL;
    size_t len = strnlen(bearer_token, KEYS_TOKEN_MAX + 1);
    if (len == 0 || len > KEYS_TOKEN_MAX)
        return NULL;
    /* No sodium_init() here: keys_parse did it, and SHA-256 and memcmp need
     * none of its runtime state. */
    uint8_t d[32];
    crypto_hash_sha256(d, (const unsigned char *)bearer_token, len);
    /* Visit every entry and select the match with masks, so neither the
     * position of the matching entry nor a partial digest match shows in
     * the timing. Digests are unique (checked at load), so ≤ 1 match. */
    size_t found = 0, any = 0;
    for (size_t i = 0; i < keys->n; i++) {
        size_t eq = (size_t)(sodium_memcmp(keys->entries[i].sha256, d, 32) == 0);
        size_t mask = (size_t)0 - eq;
        found = (found & ~mask) | (i & mask);
        any |= eq;
    }
    sodium_memzero(d, sizeof(d));
    return any ? &keys->entries[found] : NULL;
}

int keys_hash_hex(const char *secret, char out[65])
{
    if (sodium_init() < 0)
        return -1;
    uint8_t d[32];
    crypto_hash_sha256(d, (const unsigned char *)secret, strlen(secret));
    sodium_bin2hex(out, 65, d, sizeof(d));
    return 0;
}

int keys_secret_new(char out[KEYS_SECRET_LEN + 1])
{
    if (sodium_init() < 0)
        return -1;
    uint8_t r[36];
    randombytes_buf(r, sizeof(r));
    memcpy(out, "pgd-", 4);
    sodium_bin2base64(out + 4, KEYS_SECRET_LEN + 1 - 4, r, sizeof(r),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    sodium_memzero(r, sizeof(r));
    return 0;
}
