/* libFuzzer target for the CURVE authorized-keys and key-file parsers
 * (proto/curve.c).
 *
 * A refusal must leave *out NULL with a message starting with the source
 * name. An accepted list must hold valid, distinct keys whose Z85 text
 * decodes to the stored bytes, and names of allowed characters; writing the
 * list back as "KEY NAME" lines must parse to the same list. The single-key
 * parser must accept exactly the inputs whose list has one key.
 *
 * Seed corpus: tests/fuzz/corpus/curve_keys/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/curve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    curve_keylist_t *l = (curve_keylist_t *)1;
    char err[256];
    if (curve_keylist_parse(data, size, "fuzz", &l, err, sizeof err) != 0) {
        if (l || strncmp(err, "fuzz", 4) != 0)
            abort();
        return 0;
    }
    size_t cap = l->n * (CURVE_Z85_LEN + CURVE_NAME_MAX + 3) + 1;
    char *text = malloc(cap);
    size_t len = 0;
    for (size_t i = 0; i < l->n; i++) {
        const curve_key_entry_t *e = &l->keys[i];
        uint8_t k[CURVE_KEY_BYTES];
        if (strlen(e->z85) != CURVE_Z85_LEN || curve_key_decode(e->z85, CURVE_Z85_LEN, k) != 0 ||
            memcmp(k, e->key, sizeof k) != 0 || curve_keylist_find(l, e->key) != e)
            abort();
        for (const char *p = e->name; *p; p++)
            if (*p <= ' ' || *p >= 0x7f || *p == '#')
                abort();
        len += (size_t)snprintf(text + len, cap - len, "%s%s%s\n", e->z85, e->name[0] ? " " : "",
                                e->name);
    }
    curve_keylist_t *l2 = NULL;
    if (curve_keylist_parse((const uint8_t *)text, len, "again", &l2, err, sizeof err) != 0 ||
        l2->n != l->n)
        abort();
    for (size_t i = 0; i < l->n; i++)
        if (memcmp(l->keys[i].key, l2->keys[i].key, CURVE_KEY_BYTES) != 0 ||
            strcmp(l->keys[i].name, l2->keys[i].name) != 0)
            abort();
    char z[CURVE_Z85_LEN + 1];
    int one = curve_key_file_parse(data, size, "fuzz", z, err, sizeof err);
    if ((one == 0) != (l->n == 1) || (one == 0 && strcmp(z, l->keys[0].z85) != 0))
        abort();
    free(text);
    curve_keylist_free(&l2);
    curve_keylist_free(&l);
    return 0;
}
