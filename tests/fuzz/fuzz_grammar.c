/* libFuzzer target for common/grammar/gbnf: arbitrary grammar text.
 * When the text parses, the matcher runs too, and the contract is checked:
 *   - a token the mask allows can be accepted (gmatch_fits with no budget
 *     limit, then gmatch_accept succeeds); one it refuses cannot;
 *   - the budget mask is a subset of the mask.
 * Vocabulary: the 256 single bytes, a few multi-byte and partial-UTF-8
 * tokens, and one end-of-generation token. The walk follows the smallest
 * allowed token for a few steps. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/grammar/gbnf.h"
#include "worker/grammar/vocab_mask.h"

#define N_EXTRA 8
static const char *const extra[N_EXTRA] = {"ab", "\"}", "{\"", "\xc3", "\xa9", "\xc3\xa9", "true", "  "};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    grammar_t *g = NULL;
    char err[256];
    int line, col;
    if (gbnf_parse(data, size, &g, err, sizeof err, &line, &col) != 0) {
        if (line < 1 || col < 1)
            abort();
        return 0;
    }
    /* the grammar's own text as input (gbnf_match → gr_state_advance) */
    (void)gbnf_match(g, data, size);
    enum { V = 256 + N_EXTRA + 1 };
    static uint8_t bytes[256];
    const uint8_t *pieces[V];
    size_t lens[V];
    bool eog[V];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (uint8_t)i;
        pieces[i] = &bytes[i];
        lens[i] = 1;
        eog[i] = false;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        pieces[256 + i] = (const uint8_t *)extra[i];
        lens[256 + i] = strlen(extra[i]);
        eog[256 + i] = false;
    }
    pieces[V - 1] = NULL;
    lens[V - 1] = 0;
    eog[V - 1] = true;
    gvocab_t *v = gvocab_new(pieces, lens, eog, V);
    gmask_grammar_t *gg = gmask_grammar_new(g, v);
    gmatch_t *m = gmatch_new(gg);
    uint64_t mask[(V + 63) / 64], bmask[(V + 63) / 64];
    for (int step = 0; m && step < 8; step++) {
        int32_t n = gmatch_mask(m, mask);
        int32_t nb = gmatch_mask_budget(m, 4, bmask);
        int32_t pick = -1;
        for (int32_t t = 0; t < V; t++) {
            int allowed = (mask[t >> 6] >> (t & 63)) & 1;
            if (((bmask[t >> 6] >> (t & 63)) & 1) && !allowed)
                abort();
            if (gmatch_fits(m, t, INT64_MAX / 4) != allowed)
                abort();
            if (allowed && pick < 0)
                pick = t;
        }
        (void)n;
        (void)nb;
        if (pick < 0 || gmatch_accept(m, pick) != 0)
            break;
        if (gmatch_done(m))
            break;
    }
    gmatch_free(&m);
    gmask_grammar_unref(&gg);
    gvocab_free(&v);
    return 0;
}
