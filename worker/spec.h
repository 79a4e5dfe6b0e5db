/* spec.h — speculative decoding: who proposes draft tokens, and how many.
 *
 * The scheduler verifies drafts (spec_verify_seq, planned by spec_plan_step;
 * both in sched_spec.c, declared in sched_int.h) as extra rows of its normal step: a
 * decoding sequence with k drafts d1..dk contributes k + 1 rows at
 * consecutive positions P..P+k (its pending token, then the drafts), every
 * row asks for logits, and the sequence's own sampler then draws position
 * P+1 from row 0, P+2 from row 1, ... for as long as each draw equals the
 * draft fed at that position. The first draw that differs (or the draw of
 * the last row) is the step's bonus token. So a step emits 1..k+1 tokens and
 * every one of them is an ordinary draw from the target model's
 * distribution, with the sequence's own PRNG stream and history, at the very
 * position it would have been drawn without speculation:
 *
 *   - greedy output is byte-identical with speculation on and off;
 *   - a seeded sampled request gives the same tokens on and off, whatever
 *     the batch, the draft lengths or the acceptance;
 *   - the drafters here are deterministic (q = a point mass on the draft d),
 *     and for such a q the speculative-sampling rule (accept d with
 *     probability min(1, p(d)/q(d)) = p(d), else resample from
 *     norm(max(0, p - q)) = p without d) has exactly the joint law of "draw
 *     x ~ p, accept iff x == d": P(accept) = p(d), and a rejection leaves x
 *     distributed as p restricted to x != d. Drawing x is that rule, with
 *     the acceptance test folded into the draw, at the acceptance rate of
 *     the optimal rule for q.
 *
 * KV of rejected positions: the rows of d_{m+1}..d_k were written to blocks
 * the sequence reserved past its recorded positions; only the accepted ones
 * are recorded (kv_seq_append) and committed to the prefix cache, so the
 * rejected ones are simply overwritten by later rows. Shared (cached) blocks
 * are never written: reservations are exclusive blocks.
 *
 * Drafters:
 *   SPEC_NGRAM  prompt lookup: the latest earlier occurrence of the
 *               sequence's last n tokens (n = SPEC_NGRAM_MAX down to
 *               SPEC_NGRAM_MIN) in its own prompt and output, and the tokens
 *               that followed it. No model.
 *   SPEC_DRAFT  a draft model (sched_config_t.draft_model), greedy, run by spec.c
 *               (draft_run) in batched rounds across the drafting sequences.
 *   test hook   sched_set_drafter (sched.h): any function, e.g. an oracle
 *               reading the known greedy continuation (benchmarks, tests).
 *
 * Draft length adapts per sequence (spec_seq_t): a geometric model of the
 * per-token acceptance a, estimated from the sequence's recent verifies;
 * the k-th draft token is used with probability a^k, so drafts stop where
 * that falls below SPEC_MIN_USE. A sequence at a < SPEC_MIN_USE drafts
 * nothing and probes with one token every SPEC_PROBE_EVERY steps. The
 * scheduler adds drafts only while the step stays at most spec_max_rows rows
 * (sched_config_t): above that the step is compute-bound and extra rows cost
 * time in proportion, so with many streams speculation turns itself off.
 */
#ifndef PAGODA_WORKER_SPEC_H
#define PAGODA_WORKER_SPEC_H

#include <stdbool.h>
#include <stdint.h>

typedef enum spec_mode {
    SPEC_OFF = 0,
    SPEC_NGRAM,      /* prompt lookup */
    SPEC_DRAFT,      /* draft model (--draft-model) */
} spec_mode_t;

#define SPEC_MAX_DRAFT 16     /* hard cap of --spec-max-draft */
#define SPEC_NGRAM_MAX 4      /* longest n-gram looked up */
#define SPEC_NGRAM_MIN 2      /* shortest */
#define SPEC_MIN_USE 0.2      /* draft while the k-th token's use probability a^k >= this */
#define SPEC_PROBE_EVERY 16   /* steps between one-token probes when drafting is off */

/* "off", "ngram", "draft" → *out: 0, or -1 for anything else. */
int spec_mode_parse(const char *s, spec_mode_t *out);
const char *spec_mode_name(spec_mode_t m);

/* Prompt lookup over tokens[0..n): writes up to max_draft (<= SPEC_MAX_DRAFT)
 * proposed next tokens to out and returns their count (0: no match). */
int32_t spec_ngram_draft(const int32_t *tokens, int32_t n, int32_t max_draft, int32_t *out);

/* Per-sequence acceptance state (zero-initialised = no history: a prior of
 * a = 0.5 plus an optimistic start). */
typedef struct spec_seq {
    double acc;      /* decayed count of accepted draft tokens */
    double tries;    /* decayed count of draft tokens that were tested (accepted + first rejections) */
    int32_t idle;    /* steps since the last draft while drafting is off */
} spec_seq_t;

/* How many draft tokens the sequence should get now (0..max_draft). */
int32_t spec_seq_len(spec_seq_t *q, int32_t max_draft);
/* Records a verify: n_drafted tokens proposed, the first n_accepted of them
 * matched the draws (n_accepted <= n_drafted). */
void spec_seq_update(spec_seq_t *q, int32_t n_drafted, int32_t n_accepted);
/* The current per-token acceptance estimate, in (0, 1). */
double spec_seq_rate(const spec_seq_t *q);

#endif
