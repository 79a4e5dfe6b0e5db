/* volatile_block.c — the table of volatile prompt blocks (volatile_block.h). */
#include "gateway/volatile_block.h"

#include <string.h>

static const volatile_block_t rows[] = {
    {"anthropic", "system", "x-anthropic-billing-header:",
     "Claude Code's billing header for Anthropic (cc_version with a per-run hash)"},
};

const volatile_block_t *volatile_block_match(const char *surface, const char *where, const char *text,
                                             size_t len)
{
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        size_t n = strlen(rows[i].prefix);
        if (strcmp(rows[i].surface, surface) == 0 && strcmp(rows[i].where, where) == 0 && len >= n &&
            memcmp(text, rows[i].prefix, n) == 0)
            return &rows[i];
    }
    return NULL;
}

const volatile_block_t *volatile_block_table(size_t *n)
{
    *n = sizeof rows / sizeof rows[0];
    return rows;
}
