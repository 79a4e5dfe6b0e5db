/* vocab_mask.h — constrained decoding over a vocabulary: which tokens a
 * grammar (common/grammar/gbnf.h) allows next, per sequence.
 *
 * gvocab_t: the vocabulary as a byte trie, built once per model. Each token
 * is its raw bytes (a byte-fallback token or a BPE token may be half of a
 * UTF-8 character; the grammar matches bytes, so such tokens are handled like
 * any other). Tokens with no bytes (control, unused) and pieces longer than
 * GVOCAB_MAX_PIECE are never allowed; end-of-generation tokens are allowed
 * exactly when the text so far is a complete match.
 *
 * gmask_grammar_t: one compiled grammar for one vocabulary, shared by every
 * sequence that uses the same grammar text (refcounted), with a cache of
 * masks keyed by the matcher state. A mask is computed by walking the trie
 * with the state's stacks, pruning a subtree at the first byte no stack
 * accepts; states recur (inside a string, after a key), so the cache turns
 * most steps into a copy. The cache is shared by the threads that draw the
 * step's tokens (a mutex around lookups and inserts; computation outside).
 *
 * gmatch_t: one sequence's matcher state. Budget: generation must end with a
 * complete document before max_tokens, so a token is allowed only if the
 * fewest bytes that complete the document after it (≤ the tokens needed,
 * since every byte has a token in the vocabularies pagoda loads) still fit
 * in the tokens left, one kept for the end-of-generation token
 * (gmatch_fits). The sampler draws from the grammar mask, and a draw that
 * does not fit is banned and redrawn; after GMATCH_REDRAWS the mask is
 * recomputed with the budget applied to every token (gmatch_mask_budget),
 * which worker/sched.c also uses from the first draw when the budget is
 * tight.
 *
 * Ownership: gvocab_new copies the pieces. gmask_grammar_new takes the
 * grammar; gmatch_new takes a reference to the gmask_grammar_t. Free with the
 * matching *_free / gmask_grammar_unref. A gmatch_t is used by one thread at
 * a time; gmask_grammar_t and gvocab_t may be shared.
 */
#ifndef PAGODA_WORKER_GRAMMAR_VOCAB_MASK_H
#define PAGODA_WORKER_GRAMMAR_VOCAB_MASK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/grammar/gbnf.h"

#define GVOCAB_MAX_PIECE 256     /* bytes; longer tokens are never allowed */
#define GMATCH_REDRAWS 8         /* budget-violating draws before the exact budget mask */
#define GMASK_CACHE_BYTES (64u << 20) /* mask cache per grammar */
#define GMASK_MAX_WORK (8 << 20)      /* stack advances in one mask walk: a hostile, highly
                                       * ambiguous grammar gets a partial mask (still only
                                       * valid tokens) instead of stalling the step */

typedef struct gvocab gvocab_t;
typedef struct gmask_grammar gmask_grammar_t;
typedef struct gmatch gmatch_t;

/* pieces[i] (lens[i] bytes) is token i; eog[i] marks end-of-generation tokens. */
gvocab_t *gvocab_new(const uint8_t *const *pieces, const size_t *lens, const bool *eog, int32_t n_vocab);
void gvocab_free(gvocab_t **v);
int32_t gvocab_n_vocab(const gvocab_t *v);
/* 64-bit words of a mask: (n_vocab + 63) / 64. */
size_t gvocab_mask_words(const gvocab_t *v);

/* Takes ownership of g (also on failure). The vocabulary must outlive it. */
gmask_grammar_t *gmask_grammar_new(grammar_t *g, const gvocab_t *v);
void gmask_grammar_ref(gmask_grammar_t *gg);
void gmask_grammar_unref(gmask_grammar_t **gg);
const grammar_t *gmask_grammar_grammar(const gmask_grammar_t *gg);
/* cache hits / misses so far (tests, logs) */
void gmask_grammar_stats(gmask_grammar_t *gg, uint64_t *hits, uint64_t *misses);

/* A matcher at the grammar's start; NULL when the grammar matches nothing. */
gmatch_t *gmatch_new(gmask_grammar_t *gg);
void gmatch_free(gmatch_t **m);

/* Fills mask (gvocab_mask_words words) with the tokens the grammar allows
 * next; returns their count. */
int32_t gmatch_mask(gmatch_t *m, uint64_t *mask);
/* The same, keeping only tokens after which the document can still be
 * completed within budget - 1 more tokens plus an end-of-generation token
 * (budget: tokens left, this one included). */
int32_t gmatch_mask_budget(gmatch_t *m, int64_t budget, uint64_t *mask);
/* 1 when token t (allowed by the mask) leaves a completion that fits budget
 * (as above), else 0. Remembers the state after t for gmatch_accept. */
int gmatch_fits(gmatch_t *m, int32_t t, int64_t budget);
/* Advances by token t: 0 ok, -1 t is not allowed (state unchanged).
 * End-of-generation tokens are accepted when the state is accepting. */
int gmatch_accept(gmatch_t *m, int32_t t);
/* How many leading tokens of toks[0..n) the grammar allows in a row from the
 * current state (an end-of-generation token counts when the text so far is
 * complete, and ends the run). The state is not changed. For speculative
 * decoding: drafts stop at the first token the grammar would refuse. */
int32_t gmatch_prefix_allowed(gmatch_t *m, const int32_t *toks, int32_t n);
/* Nothing more may follow (every stack is empty). */
bool gmatch_done(const gmatch_t *m);
/* Fewest bytes that complete the document from here. */
int64_t gmatch_cost(const gmatch_t *m);

#endif
