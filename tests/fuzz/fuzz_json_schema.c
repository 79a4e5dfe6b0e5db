/* libFuzzer target for common/grammar/json_schema: arbitrary bytes as a JSON
 * Schema. json_schema_check parses the JSON, compiles the schema subset to
 * GBNF and parses the GBNF; any failure must come back as -1 with a message.
 * The relaxed compiler (non-strict tools) runs on the same schema: it may
 * refuse only with a message, and on a schema the strict compiler accepts it
 * must relax nothing and write the same grammar. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "common/grammar/json_schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    err[0] = 0;
    if (json_schema_check(data, size, err, sizeof err) != 0 && err[0] == 0)
        abort();
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, NULL);
    if (!s)
        return 0;
    char path[256];
    char *strict = json_schema_to_gbnf(s, "p-", err, sizeof err, path, sizeof path);
    char *relaxed = NULL;
    err[0] = 0;
    char *text = json_schema_to_gbnf_relaxed(s, "p-", &relaxed, err, sizeof err);
    if (!text && err[0] == 0)
        abort();
    if (strict && (!text || relaxed || strcmp(strict, text) != 0))
        abort();
    if (text) {
        /* the relaxed grammar is well-formed GBNF (it may still be refused,
         * e.g. a recursion that never finishes, but with a message) */
        char *w = json_schema_gbnf_wrap(text, "p-", NULL, NULL);
        grammar_t *g = NULL;
        err[0] = 0;
        if (gbnf_parse((const uint8_t *)w, strlen(w), &g, err, sizeof err, NULL, NULL) != 0 && err[0] == 0)
            abort();
        gbnf_free(&g);
        free(w);
    }
    free(strict);
    free(text);
    free(relaxed);
    json_decref(s);
    return 0;
}
