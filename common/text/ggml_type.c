/* ggml_type.c — lookups over GGML_TYPE_TABLE (see ggml_type.h). */
#include "common/text/ggml_type.h"

#include <stddef.h>
#include <strings.h>

static const struct {
    uint32_t type;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} rows[] = {
#define ROW_(name, num, elems, bytes) {GGML_TYPE_##name, #name, elems, bytes},
    GGML_TYPE_TABLE(ROW_)
#undef ROW_
};
#define N_ROWS (sizeof rows / sizeof rows[0])

static int row_of(uint32_t type)
{
    for (size_t i = 0; i < N_ROWS; i++)
        if (rows[i].type == type)
            return (int)i;
    return -1;
}

uint32_t ggml_type_block_elems(uint32_t type)
{
    int i = row_of(type);
    return i < 0 ? 0 : rows[i].block_elems;
}

uint32_t ggml_type_block_bytes(uint32_t type)
{
    int i = row_of(type);
    return i < 0 ? 0 : rows[i].block_bytes;
}

const char *ggml_type_name(uint32_t type)
{
    int i = row_of(type);
    return i < 0 ? "unknown" : rows[i].name;
}

int ggml_type_from_name(const char *name, uint32_t *type)
{
    for (size_t i = 0; name && i < N_ROWS; i++)
        if (strcasecmp(name, rows[i].name) == 0) {
            *type = rows[i].type;
            return 0;
        }
    return -1;
}
