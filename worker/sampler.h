/* sampler.h — per-request token sampling: logit bias, repetition /
 * presence / frequency penalties, temperature, top-k, top-p, min-p, a
 * per-request PRNG, and logprobs.
 *
 * One sampler_t per request. It owns its PRNG and its token-history counts, so
 * a seeded request draws the same tokens whatever else is in the batch: each
 * sampler_sample() call consumes exactly one uniform from the request's own
 * xoshiro256** stream (also in greedy mode).
 *
 * Pipeline of sampler_sample(), on a private copy of the logits (n_vocab):
 *   1. z = logits + logit_bias                        (additive, entries summed)
 *   2. logprobs (if asked): log_softmax(z) — the model's distribution after
 *      logit_bias, BEFORE penalties, temperature and truncation (what OpenAI
 *      reports; vLLM's default "raw" mode minus the bias). Computed in double.
 *   3. repetition penalty (llama.cpp / HF): for every token present in the
 *      window of the last repetition_last_n tokens of prompt + generated text,
 *      z /= penalty if z > 0, else z *= penalty (once per distinct token).
 *   4. presence / frequency (OpenAI), over GENERATED tokens only:
 *      z -= presence_penalty * (count > 0) + frequency_penalty * count.
 *   5. temperature == 0: argmax of z, ties to the lowest token id. Done.
 *   6. top_k: keep the k largest z (partial selection, O(n_vocab)).
 *   7. p_i = exp((z_i - max z) / temperature).
 *   8. top_p: keep the smallest set of highest-p tokens whose mass >= top_p of
 *      the (top-k) total, ties by id (a histogram of mass over probability
 *      buckets finds the boundary; only the boundary bucket is sorted; sums
 *      are in double, so "exactly" is up to rounding at the boundary).
 *   9. min_p: drop tokens with p_i < min_p * max p.
 *  10. draw u ~ U[0,1) and invert the cumulative distribution of the kept
 *      candidates.
 * Token order among equal z is by id everywhere, so results are deterministic.
 *
 * Costs for n_vocab = V: a copy of V logits, one max pass, one exp pass (two
 * with logprobs; a vectorized exp, AVX2 when the CPU has it), O(V) top-k (a
 * heap scan for k <= 512, quickselect above) and O(V) top-p; no allocation
 * per call (8 bytes per vocab entry + 64 KiB of scratch, sized in
 * sampler_new). Measured at V = 151936 on the 2-core dev box (min of 40):
 * greedy 0.14 ms, T=1 0.40 ms, top_k=40 0.21 ms, top_p=0.9 0.67 ms. History counts
 * live in a small hash table sized by the number of DISTINCT tokens seen; it
 * grows (amortized, by doubling) inside sampler_accept*, never in sample.
 *
 * Ownership: sampler_new copies everything it needs from params (including
 * the logit_bias array); the caller keeps ownership of params. The sampler is
 * freed with sampler_free. A sampler is used by one thread at a time.
 */
#ifndef PAGODA_WORKER_SAMPLER_H
#define PAGODA_WORKER_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "proto/sampling.h"

#define SAMPLER_MAX_TOP_LOGPROBS 20
/* The logprob reported for a token of probability 0 (one a grammar forbids,
 * listed among the top alternatives when fewer than asked are allowed):
 * -inf has no JSON spelling and the wire refuses it; OpenAI and vLLM report
 * -9999.0 there. */
#define SAMPLER_LOGPROB_FLOOR (-9999.0f)

typedef struct sampler_bias {
    int32_t token;   /* in [0, n_vocab) */
    float bias;      /* added to the logit; finite */
} sampler_bias_t;

/* A knob of the table in the sampler's type (the row's stype). */
#define SAMPLER_KNOB_MEMBER(key, api, wtype, stype, member, ...) stype member;

typedef struct sampler_params {
    /* a member per row of PROTO_SAMPLING_KNOBS (proto/sampling.h), in its
     * sampler type: temperature (>= 0, finite; 0 = greedy), top_p ((0, 1];
     * 1 = off), top_k (<= 0 or >= n_vocab = off), min_p ([0, 1]; 0 = off),
     * repetition_penalty (> 0, finite; 1 = off), presence_penalty and
     * frequency_penalty (finite; 0 = off; OpenAI allows [-2, 2]), ... */
    PROTO_SAMPLING_KNOBS(SAMPLER_KNOB_MEMBER)
    int32_t repetition_last_n;  /* window (tokens of prompt + generated), >= 0;
                                   0 = the whole history (HF semantics) */
    const sampler_bias_t *logit_bias; /* n_logit_bias entries; copied by sampler_new */
    int32_t n_logit_bias;       /* >= 0 */
    int32_t n_top_logprobs;     /* 0..SAMPLER_MAX_TOP_LOGPROBS alternatives reported */
    bool has_seed;              /* false: seed drawn from getrandom(2) */
    uint64_t seed;
} sampler_params_t;

/* Logprobs of one sampled position (natural log, log_softmax of logits +
 * logit_bias; see step 2 above). */
typedef struct sampler_logprobs {
    int32_t token;              /* the sampled token */
    float logprob;              /* its logprob */
    int32_t n_top;              /* = params.n_top_logprobs (<= n_vocab) */
    int32_t top_token[SAMPLER_MAX_TOP_LOGPROBS];   /* descending logprob, ties by id */
    float top_logprob[SAMPLER_MAX_TOP_LOGPROBS];
} sampler_logprobs_t;

typedef struct sampler sampler_t;

/* Neutral parameters: every knob at its table default (temperature 1, no
 * truncation, no penalties), no bias, no logprobs, unseeded. */
void sampler_params_default(sampler_params_t *p);

/* Sets every knob of p from a SUBMIT's (proto_sampling_t.knobs), converted to
 * the sampler's types; the other members of p are left as they are. */
void sampler_params_set_knobs(sampler_params_t *p, const proto_knobs_t *k);

/* Checks params against the ranges above. Returns 0, or -1 and sets *why
 * (static string, may be NULL) to the first problem. */
int sampler_params_validate(const sampler_params_t *p, int32_t n_vocab, const char **why);

/* A sampler for a vocab of n_vocab (> 0) tokens; NULL when params are
 * invalid (sampler_params_validate). Out of memory aborts. */
sampler_t *sampler_new(const sampler_params_t *p, int32_t n_vocab);

/* Frees the sampler and NULLs *s. */
void sampler_free(sampler_t **s);

/* Adds prompt tokens to the history (repetition-penalty window only).
 * Returns 0, or -1 when a token is outside [0, n_vocab) (all valid ones
 * before it were added; it and the rest were not). */
int sampler_accept_prompt(sampler_t *s, const int32_t *tokens, int32_t n);

/* Adds one generated token (repetition window + presence/frequency counts).
 * Call once per token actually emitted — sampler_sample does not. Returns 0,
 * or -1 (ignored) when token is outside [0, n_vocab). */
int sampler_accept(sampler_t *s, int32_t token);

/* Samples a token from logits (n_vocab floats, finite or -inf, at least one
 * finite; not modified). Fills *lp when lp is non-NULL. Always returns a token
 * in [0, n_vocab). Consumes exactly one uniform. */
int32_t sampler_sample(sampler_t *s, const float *logits, sampler_logprobs_t *lp);

/* sampler_sample restricted to the tokens whose bit is set in allow (a
 * bitset of n_vocab bits, at least one allowed token with a finite logit):
 * the others get -inf in step 1, so logprobs are those of the constrained
 * distribution (forbidden alternatives: SAMPLER_LOGPROB_FLOOR). Consumes
 * exactly one uniform, like sampler_sample. */
int32_t sampler_sample_masked(sampler_t *s, const float *logits, const uint64_t *allow,
                              sampler_logprobs_t *lp);

/* Draws again for the same position (constrained decoding bans a token the
 * grammar's length budget cannot afford and redraws): the uniform is derived
 * from the position's draw and attempt (≥ 1), so the PRNG stream still
 * advances by exactly one per token and a seeded request stays reproducible. */
int32_t sampler_redraw_masked(sampler_t *s, const float *logits, const uint64_t *allow,
                              sampler_logprobs_t *lp, int attempt);

/* Advances the PRNG by n draws (n >= 0) without sampling: what n
 * sampler_sample() calls would have consumed. A request resumed after n
 * tokens that were already delivered (sched_req_t.resume) calls this so a
 * seeded run continues the very stream the interrupted one would have drawn
 * (each sampled token costs exactly one uniform, greedy included). */
void sampler_skip(sampler_t *s, int64_t n);

/* Writes to out (n_vocab floats) the logits after steps 1, 3 and 4 (bias and
 * penalties, before temperature): what the truncation and the draw see. For
 * tests and debugging; uses no randomness. */
void sampler_processed_logits(sampler_t *s, const float *logits, float *out);

/* The seed in use (the request's, or the one drawn), for logs and replays. */
uint64_t sampler_seed(const sampler_t *s);

#endif
