/* volatile_block.h — prompt blocks that agents put at the front of a
 * conversation, that change on every run, and that are not instructions to
 * the model: dropped before templating so they do not defeat the prefix
 * cache.
 *
 * A prefix cache reuses a conversation's KV only up to the first token that
 * differs. Claude Code's first system block is
 *   "x-anthropic-billing-header: cc_version=2.1.332.ea8; cc_entrypoint=sdk-cli;"
 * whose hash suffix changes between runs; at position 0 it made every new
 * conversation a full prefill of its ~20k-token system prompt. It carries
 * billing data for Anthropic's servers, not instructions, so it is dropped.
 *
 * The table (volatile_block.c) has one row per kind of block: the API
 * surface and the place it sits in ("system": a block of the top-level
 * system field), and the prefix that identifies it. The next such block is
 * one row. The gateway's --keep-volatile-blocks (YAML keep_volatile_blocks)
 * keeps them all (the prompt the client sent, byte for byte).
 */
#ifndef PAGODA_GATEWAY_VOLATILE_BLOCK_H
#define PAGODA_GATEWAY_VOLATILE_BLOCK_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    const char *surface; /* "anthropic", "responses", "openai" */
    const char *where;   /* "system": one block of the system prompt */
    const char *prefix;  /* the block's text starts with this */
    const char *why;     /* what it is, for docs and logs */
} volatile_block_t;

/* The row whose surface and place match and whose prefix starts
 * text[0..len), or NULL. */
const volatile_block_t *volatile_block_match(const char *surface, const char *where, const char *text,
                                             size_t len);

/* (n) rows, for docs and tests. */
const volatile_block_t *volatile_block_table(size_t *n);

#endif
