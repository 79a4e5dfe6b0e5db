/* arch.c — MODEL_ARCH_TABLE as an array, and its lookups (see arch.h). */
#include "worker/model/arch.h"

#include <stdio.h>
#include <string.h>

static const model_arch_info_t rows[MODEL_ARCH_COUNT] = {
#define ROW_(e, nm, ...) [MODEL_ARCH_##e] = {.arch = MODEL_ARCH_##e, .name = nm, __VA_ARGS__},
    MODEL_ARCH_TABLE(ROW_)
#undef ROW_
};

const model_arch_info_t *model_arch_info(enum model_arch a)
{
    return (int)a >= 0 && a < MODEL_ARCH_COUNT ? &rows[a] : NULL;
}

const model_arch_info_t *model_arch_find(const char *name, size_t len)
{
    for (int a = 0; a < MODEL_ARCH_COUNT; a++)
        if (strlen(rows[a].name) == len && memcmp(rows[a].name, name, len) == 0)
            return &rows[a];
    return NULL;
}

void model_arch_list(char *buf, size_t len, const char *sep)
{
    size_t used = 0;
    if (len == 0)
        return;
    buf[0] = '\0';
    for (int a = 0; a < MODEL_ARCH_COUNT && used < len; a++) {
        int n = snprintf(buf + used, len - used, "%s%s", a ? sep : "", rows[a].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}
