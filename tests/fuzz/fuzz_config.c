/* libFuzzer target for the gateway configuration parser (gateway/config.c).
 *
 * Parses the input as a YAML config. A refusal must leave *out NULL and give a
 * message that starts with the source name. An accepted config must survive a
 * round trip: config_format → config_parse succeeds and formats to the same
 * text (so every accepted value is representable and read back unchanged),
 * and config_check must agree with the parser's own cross-field checks.
 *
 * Seed corpus: tests/fuzz/corpus/config/ (valid files, flow style, edge
 * values, and invalid files near each rule).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    config_t *c = (config_t *)1;
    char err[512];
    if (config_parse(data, size, "fuzz", &c, err, sizeof err) != 0) {
        if (c || strncmp(err, "fuzz", 4) != 0)
            abort();
        return 0;
    }
    if (config_check(c, err, sizeof err) != 0)
        abort();
    size_t len = 0;
    char *text = config_format(c, &len);
    if (strlen(text) != len)
        abort();
    config_t *c2 = NULL;
    if (config_parse((const uint8_t *)text, len, "formatted", &c2, err, sizeof err) != 0)
        abort();
    size_t len2 = 0;
    char *text2 = config_format(c2, &len2);
    if (len2 != len || memcmp(text, text2, len) != 0)
        abort();
    for (size_t i = 0; i < c->n_models; i++)
        if (config_model_find(c2, c->models[i].name) != &c2->models[i])
            abort();
    free(text);
    free(text2);
    config_free(&c2);
    config_free(&c);
    return 0;
}
