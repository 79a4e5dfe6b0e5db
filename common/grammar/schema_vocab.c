/* schema_vocab.c — the JSON Schema keywords the compiler knows, and $ref
 * pointers (see schema_vocab.h). */
#include "common/grammar/schema_vocab.h"

#include <string.h>

/* Keywords without effect on what is generated. discriminator (OpenAPI,
 * pydantic) names the property whose const tells oneOf's alternatives
 * apart; contentEncoding/contentMediaType are annotations in 2020-12. */
static const char *const ANNOTATIONS[] = {"$schema", "$id", "$comment", "title", "description", "default",
                                          "examples", "deprecated", "readOnly", "writeOnly", "$defs",
                                          "definitions", "discriminator", "contentEncoding",
                                          "contentMediaType", "$anchor", NULL};
static const char *const SUPPORTED[] = {"type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "properties",
                                        "required", "additionalProperties", "propertyNames", "minProperties",
                                        "maxProperties", "dependentRequired", "items", "prefixItems",
                                        "additionalItems", "minItems", "maxItems", "uniqueItems", "minLength",
                                        "maxLength", "pattern", "format", "minimum", "maximum",
                                        "exclusiveMinimum", "exclusiveMaximum", "multipleOf", NULL};

static bool in_list(const char *k, const char *const *l)
{
    for (; *l; l++)
        if (strcmp(k, *l) == 0)
            return true;
    return false;
}

bool schema_vocab_is_annotation(const char *key) { return in_list(key, ANNOTATIONS); }

bool schema_vocab_is_supported(const char *key) { return in_list(key, SUPPORTED); }

const json_t *schema_vocab_resolve_ref(const json_t *root, const char *p)
{
    if (strcmp(p, "#") == 0)
        return root;
    const char *name = NULL;
    const json_t *defs = NULL;
    if (strncmp(p, "#/$defs/", 8) == 0)
        name = p + 8, defs = json_object_get(root, "$defs");
    else if (strncmp(p, "#/definitions/", 14) == 0)
        name = p + 14, defs = json_object_get(root, "definitions");
    if (!name || strchr(name, '/') || !json_is_object(defs))
        return NULL;
    /* JSON pointer unescape: ~1 → /, ~0 → ~ */
    char buf[256];
    size_t k = 0;
    for (const char *q = name; *q && k + 1 < sizeof buf; q++) {
        if (q[0] == '~' && q[1] == '1')
            buf[k++] = '/', q++;
        else if (q[0] == '~' && q[1] == '0')
            buf[k++] = '~', q++;
        else
            buf[k++] = *q;
    }
    buf[k] = 0;
    return json_object_get(defs, buf);
}
