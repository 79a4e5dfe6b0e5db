/* sched.h — the worker's continuous-batching scheduler.
 *
 * One scheduler owns one model's forward context, its paged KV pool and every
 * sequence the worker has accepted. Each call to sched_step() runs one forward
 * pass over a batch packed from all active sequences:
 *
 *   1. drop cancelled sequences (their blocks are released in this step);
 *   2. admit waiting sequences in (priority, arrival) order while there is a
 *      free sequence slot (--max-seqs) and KV blocks for their first chunk;
 *      a prefix-cache lookup lets a new sequence skip cached full blocks;
 *   3. pack the batch under the token budget (--max-batch-tokens): one decode
 *      row for every running sequence that has sampled a token, then prefill
 *      chunks of sequences still reading their prompt (chunked prefill),
 *      best (aged) priority first, FIFO within a tier; while some sequence
 *      decodes, the chunks are also sized by the step time budget
 *      (--step-budget-ms, worker/step_cost.h) so the step keeps the streams'
 *      pace; a higher tier's prefill takes the step before a lower
 *      tier's, which pauses (its KV stays; no rows of a worse aged tier share
 *      a step with a better one's chunk) until the higher one is done or
 *      aging lifts it (sched_config_t.prefill_age_steps);
 *      Models with a window on every layer (model_kv_window) release the
 *      blocks behind each sequence's window after every step, so a
 *      sequence's length is bounded by the context, not the pool;
 *   4. when the KV pool has no block for a row, preempt the lowest-priority,
 *      most recently admitted sequence: free its blocks and put it back in the
 *      waiting queue to recompute prompt + generated tokens later;
 *   5. forward the batch, sample one token for every sequence whose prompt is
 *      fully computed, detokenize, check stop conditions and report events.
 *
 * Sequence states (enum seq_state in sched_int.h):
 *
 *   WAITING ──admit──► RUNNING ──stop / length / cancel / deadline──► (freed)
 *      ▲                  │
 *      └────preempt───────┘
 *
 * WAITING holds no KV blocks. A RUNNING sequence owns blocks; it is
 * prefilling while some prompt (or recomputed) tokens are not in its KV yet,
 * and decoding once only its latest sampled token is — one state with a
 * counter (n_computed) rather than two, because chunked prefill moves a
 * sequence through both within the same batches.
 *
 * A resumed request (sched_req_t.resume: tokens another replica already
 * delivered) starts with those tokens as generated text: the detokenizer is
 * primed with them (its output discarded) and the sampler's PRNG is advanced
 * by one draw per token (sampler_skip), so a greedy or seeded request goes
 * on exactly as the interrupted run would have.
 *
 * Constrained decoding: a request with a grammar (sched_req_t.grammar) has a
 * matcher (worker/grammar/vocab_mask.h); its draw is restricted to the
 * tokens the grammar allows next (masks computed inside the parallel draw,
 * cached per grammar and state), and to tokens after which the shortest
 * completion still fits the tokens left, so the output is a complete
 * document and ends with finish "stop" (also with ignore_eos). Compiled
 * grammars are kept in a small LRU keyed by their text, so concurrent
 * requests with one schema share the mask cache.
 * n choices (sched_req_t.n_choices > 1): the request becomes n sequences
 * with the same id, choice index 0..n-1. Choice 0 prefills the prompt; the
 * others wait (WAITING, not admissible) until choice 0 has sampled its first
 * token, then are admitted like any sequence: the prefix cache hands them
 * every full block of the prompt (shared, ref-counted), and they compute
 * only the partial last block (< block_size positions; recomputed, not
 * copied) and sample their first token from their own logits. Choice i
 * samples with seed + i (wrapping), so a seeded request gives the same n
 * texts as n single requests with seeds seed, seed + 1, ...; without a seed
 * each draws its own. Cancel and deadline end all n; each reports its own
 * events (sched_event_t.index) and finish.
 *
 * Embeddings (sched_submit_embed): each input is a prefill-only sequence
 * that goes through the same steps as generation (admitted by priority,
 * packed in prefill chunks beside decode rows, preemptible) but samples
 * nothing: its rows ask the forward pass for their final hidden state
 * (fwd_batch_t.want_hidden; every row for mean pooling, the last prompt
 * row for last pooling) instead of logits. After its last prompt row the
 * pooled vector is L2-normalised and reported in one event (finish STOP,
 * n_completion 0) and the sequence ends. Mean pooling needs every prompt
 * token's hidden state, so embedding sequences never take blocks from the
 * prefix cache (their full blocks still go into it when computed, for
 * later generation requests); a preempted one starts its sum again.
 * Reranking rides the same path with pooling MODEL_POOL_RANK (the model
 * must have a rank head, model.rank): the one row its head reads (the
 * first or the last prompt token, rank_head.h) asks for its hidden state,
 * and the event's `embedding` is the head's n_scores outputs (score 0 is
 * the relevance), not normalised.
 *
 * A sequence that is preempted keeps its generated tokens, sampler state and
 * detokenizer, so resuming it reproduces exactly what an uninterrupted run
 * would have produced (the recompute samples nothing).
 *
 * Ownership: sched_new() borrows the model and tokenizer (they must outlive
 * the scheduler); sched_submit() copies everything it is given. Events passed
 * to the callback are valid only during the call.
 */
#ifndef PAGODA_WORKER_SCHED_H
#define PAGODA_WORKER_SCHED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/kv_store.h"
#include "worker/kv_budget.h"
#include "worker/model/lora.h"
#include "worker/model/model.h"
#include "worker/sampler.h"
#include "worker/spec.h"
#include "common/text/tokenizer.h"

typedef struct sched_config {
    int32_t max_seqs;          /* sequence slots; 1 turns batching off */
    int32_t max_batch_tokens;  /* rows in one forward step (decode rows + prefill chunks) */
    int32_t kv_blocks;         /* physical KV blocks; 0 = derive from kv_budget_bytes */
    size_t kv_budget_bytes;    /* used when kv_blocks == 0; 0 = kv_auto's size, or 1 GiB
                                * without kv_auto */
    bool kv_auto;              /* kv_blocks == 0 and kv_budget_bytes == 0: size the pool
                                * by worker/kv_budget.h's rule from kv_mem */
    kv_budget_in_t kv_mem;     /* kv_auto's inputs but cap_mib, which sched_new computes
                                * (max_seqs full contexts in this pool's and the draft
                                * pool's blocks) */
    int32_t block_size;        /* token positions per KV block (32) */
    int32_t n_threads;         /* threads for the forward pass */
    bool exact_matmul;         /* quantized weights via dequant+sgemm instead of int8 kernels */
    kv_type_t kv_type;         /* K/V element type (F16: half the memory and attention traffic);
                                * KV_TYPE_AUTO (the default) picks F16 for int8-kernel K/V
                                * projections, F32 otherwise; sched_new resolves it */
    spec_mode_t spec;          /* speculative decoding (worker/spec.h); default SPEC_OFF */
    int32_t spec_max_draft;    /* draft tokens per sequence and step, 1..SPEC_MAX_DRAFT (8) */
    int32_t spec_max_rows;     /* drafts are added only while the step has at most this many
                                * rows, drafts included (16): beyond it the step is
                                * compute-bound and each row costs its share of the time */
    bool spec_fixed;           /* benchmarks: always the longest draft allowed (no adaptation) */
    const model_t *draft_model; /* SPEC_DRAFT: the draft model (borrowed, outlives the
                                * scheduler); its vocabulary must be the target's
                                * (sched_draft_check) */
    /* Step time budget (worker/step_cost.h, docs/BATCHING.md): while some
     * sequence decodes, prefill chunks are sized so the step's predicted time
     * stays within a target, so running streams keep their pace. */
    int32_t step_budget_ms;    /* the target: SCHED_STEP_BUDGET_AUTO (the default) =
                                * step_budget_factor x the step's decode rows alone;
                                * > 0 = that many ms; 0 = off (max_batch_tokens only) */
    double step_budget_factor; /* auto: the target as a multiple of the decode-only step (2) */
    int32_t step_min_chunk;    /* beside decoding streams, a step's first prefill chunk is
                                * never smaller (8, one row tile of the int8 kernels: the
                                * 16-row floor made every such step ~2.7x a decode step
                                * on 2 cores, over the target; docs/BATCHING.md) */
    int32_t prefill_age_steps; /* a prefill passed over for a higher tier gains one tier
                                * per this many such steps (32), so it waits at most
                                * 2 x this many before it is served */
    int32_t prefill_max_stops; /* a prefill-only step of a worse tier stops at the next layer
                                * boundary when a better tier's request arrives
                                * (sched_preempt_offer), at most this many times in a row
                                * for any sequence in it (2); 0 = never stop a step */
} sched_config_t;

#define SCHED_STEP_BUDGET_AUTO (-1)

/* Defaults: 32 seqs, 512 batch tokens, 32-token blocks, 2 threads, F16 K/V,
 * no speculation (max draft 8, 16 rows), a KV pool that holds max_seqs
 * full contexts or 1 GiB, whichever is smaller, and the step time budget on
 * (auto, factor 2, chunks of at least 64, aging every 32 steps), and at
 * most 2 preemption stops in a row for a prefill. */
void sched_config_default(sched_config_t *c);

enum sched_finish {
    SCHED_FINISH_NONE = 0,   /* still running: a delta */
    SCHED_FINISH_STOP,       /* EOS/EOT token or a stop string */
    SCHED_FINISH_LENGTH,     /* max_tokens or the context length */
    SCHED_FINISH_CANCELLED,  /* sched_cancel() */
    SCHED_FINISH_ERROR,      /* see sched_event_t.error */
};
const char *sched_finish_name(enum sched_finish f); /* "stop", "length", ... */

/* Result codes: what sched_submit returns, and why a request ended with
 * SCHED_FINISH_ERROR (sched_event_t.error_code). The worker turns each into
 * a proto_err_t (worker.c); the message that goes with it is for people. */
typedef enum sched_rc {
    SCHED_OK = 0,
    SCHED_EINVAL = -1,       /* submit: empty prompt, token outside the vocabulary, resumed
                              * tokens already at max_tokens, invalid sampling or stop strings */
    SCHED_ETOO_LONG = -2,    /* submit: prompt + resumed + 1 > the context */
    SCHED_EDUPLICATE = -3,   /* submit: a live request has this id */
    SCHED_EDEADLINE = -4,    /* event: the request's deadline passed */
    SCHED_EENGINE = -5,      /* event: the forward pass failed */
} sched_rc_t;

/* One request, as the worker hands it over (copied by sched_submit). */
/* One image's rows in a prompt: prompt[pos .. pos + n_tok) hold its
 * placeholder token and their input rows are embd's (worker/model/
 * vision.h made them) instead of token embeddings. The image's rows attend
 * to each other both ways (fwd_batch_t.att_end), so a prefill chunk never
 * ends inside one: n_tok must fit max_batch_tokens. */
typedef struct sched_image {
    int32_t pos;               /* first prompt position of its rows */
    int32_t n_tok;             /* rows (>= 1) */
    const float *embd;         /* (n_tok, model dim); copied by sched_submit */
    uint64_t key;              /* the image's content key (its hash): requests with images
                                * reuse cached blocks only with requests holding the same
                                * images (the key enters the prefix-cache partition) */
    bool causal;               /* the rows attend causally, like text (idefics3, as llama.cpp
                                * decodes it); false: to each other both ways (gemma3) */
} sched_image_t;

typedef struct sched_req {
    uint64_t id;               /* unique among live requests */
    int32_t priority;          /* 0 high, 1 normal, 2 low: admission and preemption order */
    const int32_t *prompt;     /* (n_prompt) token ids, BOS included when wanted */
    int32_t n_prompt;
    const int32_t *resume;     /* (n_resume) tokens already generated and delivered elsewhere */
    int32_t n_resume;
    int32_t max_tokens;        /* new tokens in all, resumed ones included; <= 0: up to the context */
    bool ignore_eos;           /* keep going past EOS/EOT (benchmarks) */
    const char *const *stop;   /* (n_stop) stop strings */
    int32_t n_stop;
    const int32_t *stop_ids;   /* (n_stop_ids) extra token ids that end generation */
    int32_t n_stop_ids;
    sampler_params_t sampling;
    int32_t top_logprobs;      /* -1: no logprobs; 0..SAMPLER_MAX_TOP_LOGPROBS: chosen token
                                * plus that many alternatives */
    int64_t deadline_us;       /* clock_now_us() deadline; 0 = none */
    int64_t idle_us;           /* > 0: deadline_us is a no-progress deadline: every step
                                * that computes rows of the request (a prefill chunk or a
                                * token) moves it to that step's end + idle_us */
    const char *grammar;       /* GBNF text (grammar_len bytes) constraining the output
                                * (constrained decoding, worker/grammar/); NULL/0 = none */
    size_t grammar_len;
    int32_t n_choices;         /* sequences sharing the prompt, 1..SCHED_MAX_CHOICES; 0 = 1.
                                  n > 1 needs n_resume == 0 */
    bool no_spec;              /* never speculate for this request (the output is the same
                                * either way; this only opts out of the extra rows) */
    uint64_t partition;        /* prefix-cache partition (kv_seq_set_partition; SUBMIT part):
                                * only blocks of the same partition are reused; 0 = public */
    lora_set_t lora;           /* adapters every row of the request runs with (lora.h; n 0 =
                                * the base); they must outlive the request. The caller folds
                                * them into partition (prefix_key_adapters) */
    const sched_image_t *images; /* (n_images) in increasing pos, not overlapping; NULL/0 = none.
                                  * Requests with images do not speculate. */
    int32_t n_images;
} sched_req_t;

#define SCHED_MAX_CHOICES 128

typedef struct sched_top_logprob {
    int32_t token;
    float logprob;
} sched_top_logprob_t;

typedef struct sched_token_logprob {
    int32_t token;
    float logprob;
    int32_t n_top;
    sched_top_logprob_t top[SAMPLER_MAX_TOP_LOGPROBS];
} sched_token_logprob_t;

/* What the scheduler reports for one request after a step. */
typedef struct sched_event {
    uint64_t id;
    int32_t index;             /* choice 0..n_choices-1 */
    const char *text;          /* UTF-8 delta (text_len bytes, may be 0) */
    size_t text_len;
    const int32_t *tokens;     /* (n_tokens) ids generated in this step */
    int32_t n_tokens;
    const sched_token_logprob_t *logprobs; /* (n_tokens) or NULL */
    enum sched_finish finish;
    int32_t stop;              /* with finish STOP: 1 + index (into sched_req_t.stop) of the stop
                                * string that ended it; 0 = EOS, a grammar's end, or not a stop */
    const char *error;         /* message when finish == SCHED_FINISH_ERROR */
    sched_rc_t error_code;     /* why, with SCHED_FINISH_ERROR: SCHED_EDEADLINE or
                                * SCHED_EENGINE; SCHED_OK otherwise */
    /* usage, meaningful with finish != NONE */
    int32_t n_prompt;          /* prompt tokens */
    int32_t n_cached;          /* prompt tokens served from the prefix cache at first admission */
    int32_t n_completion;      /* tokens generated, resumed ones included */
    int32_t n_resumed;         /* the request's n_resume (echoed in EVENT n_resumed) */
    const float *embedding;    /* embedding requests, with finish STOP: (n_embedding) floats,
                                * L2-normalised; NULL otherwise */
    int32_t n_embedding;       /* the model's dim */
} sched_event_t;

typedef void (*sched_event_fn)(void *ud, const sched_event_t *ev);

typedef struct sched_stats {
    int32_t n_running;         /* admitted sequences */
    int32_t n_waiting;         /* accepted, not admitted (preempted ones included) */
    int32_t kv_blocks_total;
    int32_t kv_blocks_used;    /* referenced by a sequence */
    int32_t kv_blocks_cached;  /* unreferenced, kept for the prefix cache */
    uint64_t prefix_query_tokens;
    uint64_t prefix_hit_tokens;     /* found in RAM */
    uint64_t prefix_disk_hit_tokens; /* loaded from the disk tier (kv_pool_set_tier) */
    uint64_t kv_evictions;          /* cached blocks evicted from RAM */
    uint64_t preemptions;
    uint64_t prompt_tokens;    /* prompt tokens computed (cache hits excluded) */
    uint64_t generated_tokens;
    uint64_t steps;
    uint64_t steps_stopped;    /* steps stopped for a better tier (sched_preempt_offer): not in steps */
    /* speculative decoding (vLLM's spec_decode counters) */
    uint64_t spec_drafts;          /* verifies of a sequence with at least one draft token */
    uint64_t spec_draft_tokens;    /* draft tokens verified */
    uint64_t spec_accepted_tokens; /* of those, accepted (equal to the target's draw) */
    uint64_t spec_accepted_per_pos[SPEC_MAX_DRAFT]; /* accepted at draft position i */
} sched_stats_t;

typedef struct sched sched_t;

/* Returns NULL with a message in err when the model or config can't be used. */
sched_t *sched_new(const model_t *m, const tokenizer_t *tok, const sched_config_t *c,
                   sched_event_fn on_event, void *ud, char *err, size_t errlen);
void sched_free(sched_t **s);

/* Accepts a request (all its n_choices sequences). Returns SCHED_OK (queued),
 * or with a message in err:
 *   SCHED_EINVAL      invalid request (see sched_rc_t; also n_choices out of
 *                     range, or > 1 with resumed tokens)
 *   SCHED_ETOO_LONG   prompt + resumed + 1 > context
 *   SCHED_EDUPLICATE  a live request has this id */
int sched_submit(sched_t *s, const sched_req_t *r, char *err, size_t errlen);
/* An embedding request: n_inputs prompts pooled by `pooling`, one sequence
 * each, sharing the id (sched_event_t.index = input index). */
typedef struct sched_embed_req {
    uint64_t id;               /* unique among live requests */
    int32_t priority;          /* 0 high, 1 normal, 2 low */
    int64_t deadline_us;       /* clock_now_us() deadline; 0 = none */
    int64_t idle_us;           /* > 0: a no-progress deadline, as sched_req_t.idle_us */
    enum model_pooling pooling; /* MEAN, LAST, or RANK (the model must have a rank head) */
    const int32_t *const *prompts; /* (n_inputs) pointers, each (n_prompts[i]) token ids */
    const int32_t *n_prompts;  /* (n_inputs) */
    int32_t n_inputs;          /* 1..SCHED_MAX_CHOICES */
    uint64_t partition;        /* prefix-cache partition of the blocks it registers */
} sched_embed_req_t;

/* Accepts an embedding request (copied). Returns SCHED_OK, or with a
 * message in err: SCHED_EINVAL (no inputs or too many, an empty input, a
 * token outside the vocabulary, RANK without a rank head), SCHED_ETOO_LONG
 * (an input longer than the context), SCHED_EDUPLICATE. Each input ends with
 * its own event. */
int sched_submit_embed(sched_t *s, const sched_embed_req_t *r, char *err, size_t errlen);
/* Cancels a request at any phase (every choice); its blocks are freed in the
 * next step and a final event with SCHED_FINISH_CANCELLED is reported for each
 * choice still running. 0 ok, -1 unknown id. */
int sched_cancel(sched_t *s, uint64_t id);
/* Drops every request at once, without events, and frees their blocks: the
 * gateway they came from is gone, so nobody could receive a final event —
 * and a new gateway may SUBMIT the same ids again right away. Returns how
 * many were dropped. */
int32_t sched_abort_all(sched_t *s);

/* Runs one step. Returns the number of rows forwarded (0 when idle), -1 on an
 * engine error (every active request then ends with SCHED_FINISH_ERROR). */
int sched_step(sched_t *s);
/* Maps up to max_bytes more of the KV pools' pages ahead of use
 * (kv_pool_prefault_step): for the owner's idle time. True while some
 * remain. */
bool sched_prefault_step(sched_t *s, size_t max_bytes);
/* A throwaway forward pass before the first request (worker start-up): one
 * row (token 0 at position 0) of a sequence of its own in one free KV
 * block, which is never committed to the prefix cache and goes back to the
 * free list after the pass; the logits are discarded. It faults in what the
 * first real step would otherwise pay for (weights, the forward pass's
 * scratch, the OpenMP threads). The pool's free-block count and prefix
 * cache are as before, and no later output changes (a block's bytes are
 * written before any row reads them). Returns 0 ok, -1 no free block (the
 * pass is skipped) or the pass failed (logged). Not while busy. */
int sched_warm_up(sched_t *s);
/* True while any request is accepted and not finished. */
bool sched_busy(const sched_t *s);
void sched_stats(const sched_t *s, sched_stats_t *out);
/* KV pool consistency check (tests): 0 ok. */
int sched_check(const sched_t *s);
/* Replaces the n-gram drafter (any spec mode, SPEC_OFF included) with fn:
 * it writes up to max_draft proposed next tokens of the sequence (request
 * id, choice index; tokens[0..n_tokens) = prompt + generated so far) to out
 * and returns their count. For tests and benchmarks (an oracle that knows
 * the greedy continuation, a drafter that is always wrong). NULL restores
 * the configured mode. */
typedef int32_t (*sched_drafter_fn)(void *ud, uint64_t id, int32_t index, const int32_t *tokens,
                                    int32_t n_tokens, int32_t max_draft, int32_t *out);
void sched_set_drafter(sched_t *s, sched_drafter_fn fn, void *ud);

/* 0 when draft (with its tokenizer dtok) can draft for target (ttok): the
 * same vocabulary size and every token's text the same; else -1 with a
 * message in err. */
int sched_draft_check(const model_t *target, const tokenizer_t *ttok, const model_t *draft,
                      const tokenizer_t *dtok, char *err, size_t errlen);

/* One step as the cost model sees it, for sched_set_step_hook. */
typedef struct sched_step_info {
    int32_t n_decode;          /* decode rows (drafts included) */
    int32_t n_prefill;         /* prompt / recompute rows */
    int64_t n_attn;            /* sum over rows of (pos + 1) */
    double target_us;          /* the step's time target; 0 = none (no decode rows or budget off) */
    int32_t n_seq;             /* sequences with rows */
    const uint64_t *ids;       /* (n_seq) their request ids */
    const int32_t *n_rows;     /* (n_seq) their prefill rows (0: a decode row) */
    double measured_us;        /* wall time of the step (forward pass through events) */
} sched_step_info_t;
/* Called after each step with what it held; returns the step time (µs) the
 * cost model learns from (return info->measured_us to keep the real one).
 * For tests and benchmarks: a synthetic cost makes the chunk sizes exact
 * and independent of the machine. NULL restores measuring. */
typedef double (*sched_step_fn)(void *ud, const sched_step_info_t *info);
void sched_set_step_hook(sched_t *s, sched_step_fn fn, void *ud);

/* Preemption at a layer boundary (docs/BATCHING.md). Before each forward
 * pass the scheduler arms its preemption word with the step's bar: a step
 * that holds only prefill rows (no decode or draft rows) of aged tier T > 0,
 * none of whose sequences has been stopped prefill_max_stops times in a
 * row, can be stopped by a request of priority < T. Another thread (the
 * worker's link thread, when a SUBMIT comes in) calls sched_preempt_offer
 * with the newcomer's priority *after* handing the request to the step
 * loop; the forward pass then returns between two layers, the step's rows
 * count as not computed, and the next step admits the newcomer. An offer
 * while no step is armed (between steps) is remembered until the next
 * arming, so a request that came after the step loop last looked for
 * messages still stops the step it would otherwise wait for.
 *
 * The word (one _Atomic uint32_t, every access relaxed: it is the only
 * datum the two threads share through it, and compare-and-swap makes the
 * check against the bar and the setting of the stop bit one step):
 *   bits 0..7   bar: priority < bar stops the step; 0 = not armed
 *   bits 8..15  1 + the best priority offered while not armed, 0 = none
 *   bits 16..30 generation of the armed step (an offer judged against one
 *               step never stops the next one)
 *   bit 31      FWD_STOP: the forward pass stops (model/forward.h) */
_Atomic uint32_t *sched_preempt_word(sched_t *s);
/* Offers a request of `priority` (0 high, 1 normal, 2 low) to the step in
 * flight through `word` (sched_preempt_word); any thread. True when it
 * stops the step now. */
bool sched_preempt_offer(_Atomic uint32_t *word, int32_t priority);
/* For tests: called after the word is armed and before the forward pass
 * starts (as if a request arrived just then). NULL = none. */
typedef void (*sched_armed_fn)(void *ud, sched_t *s);
void sched_set_armed_hook(sched_t *s, sched_armed_fn fn, void *ud);

/* The scheduler's KV pool (borrowed; e.g. to read its KV events). */
struct kv_pool *sched_kv_pool(sched_t *s);
int32_t sched_context_length(const sched_t *s);
int32_t sched_capacity(const sched_t *s);
/* A counter the forward pass advances after each layer (forward_set_progress),
 * so another thread can tell a long step from a wedged one. NULL = none. */
void sched_set_progress(sched_t *s, _Atomic uint64_t *layers_done);
/* The KV cache's element type (KV_TYPE_AUTO resolved: F16 or F32). */
kv_type_t sched_kv_type(const sched_t *s);
/* What KV_TYPE_AUTO (t) becomes for model m: F16 when int8_on (the int8
 * kernels are in use) and every layer's K and V weights are quantized, F32
 * otherwise; any other t is returned as is. */
kv_type_t sched_kv_type_for(const model_t *m, kv_type_t t, bool int8_on);

#endif
