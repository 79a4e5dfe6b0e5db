/* fuzz_keys.c — libFuzzer target for the API keys file parser (gateway/keys.h).
 *
 * Input layout (the seed corpus in tests/fuzz/corpus/keys/ uses it): the whole
 * input is the keys file. Its first line (e.g. a "#secret" comment line),
 * NUL-terminated and cut to 128 bytes, is also offered as a bearer token.
 *
 * Beyond "no crash, no leak, no overread" (ASan/UBSan), it checks the
 * documented contract:
 *   - refused: -1, *out stays NULL, the error names "fuzz:LINE: ...";
 *   - accepted: 0 ≤ count ≤ KEYS_MAX_ENTRIES, every name is 1..KEYS_NAME_MAX
 *     characters of [A-Za-z0-9._@-] and unique, every tier is a known one,
 *     admin is 0 or 1, digests are unique;
 *   - keys_lookup(token) returns NULL or the entry whose digest is
 *     SHA-256(token) (checked against keys_hash_hex); NULL and "" never match. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/keys.h"

static int name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n < 1 || n > KEYS_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '@' || c == '-'))
            return 0;
    }
    return 1;
}

static void hex32(const uint8_t d[32], char out[65])
{
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    keys_t *k = NULL;
    char err[256] = "";
    int rc = keys_parse(data, size, "fuzz", &k, err, sizeof err);
    if (rc != 0) {
        if (rc != -1 || k != NULL || strncmp(err, "fuzz:", 5) != 0)
            __builtin_trap();
        return 0;
    }
    if (!k)
        __builtin_trap();
    size_t n = keys_count(k);
    if (n > KEYS_MAX_ENTRIES)
        __builtin_trap();
    for (size_t i = 0; i < n; i++) {
        const keys_entry_t *e = keys_entry(k, i);
        if (!e || !name_ok(e->name) || (e->admin != 0 && e->admin != 1) ||
            (e->tier != PRIO_TIER_HIGH && e->tier != PRIO_TIER_NORMAL && e->tier != PRIO_TIER_LOW))
            __builtin_trap();
        for (size_t j = 0; j < i && j < 64; j++) {
            const keys_entry_t *f = keys_entry(k, j);
            if (strcmp(e->name, f->name) == 0 || memcmp(e->sha256, f->sha256, 32) == 0)
                __builtin_trap();
        }
    }
    if (keys_lookup(k, NULL) || keys_lookup(k, ""))
        __builtin_trap();

    /* the first line as a token */
    char tok[129];
    size_t tl = 0;
    while (tl < size && tl < 128 && data[tl] != '\n' && data[tl] != '\0')
        tl++;
    memcpy(tok, data, tl);
    tok[tl] = '\0';
    const keys_entry_t *hit = keys_lookup(k, tok);
    if (hit && tl > 0) {
        char want[65], got[65];
        if (keys_hash_hex(tok, want) != 0)
            __builtin_trap();
        hex32(hit->sha256, got);
        if (strcmp(want, got) != 0)
            __builtin_trap();
    }
    keys_free(&k);
    if (k != NULL)
        __builtin_trap();
    return 0;
}
