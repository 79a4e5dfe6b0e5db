/* sched_int.h — the scheduler's private state, shared by the files that
 * make up the scheduler (not part of its API: see sched.h):
 *
 *   sched.c         lifecycle, submission, the step (batch building, the
 *                   forward pass, reporting), prefill order and the step budget
 *   sched_admit.c   admission of waiting sequences and preemption for KV
 *   sched_sample.c  drawing a sequence's next token and the stop checks
 *   spec.c          speculative planning (drafts) and verification
 *
 * Every function here takes the scheduler's single thread except
 * sched_sample_draw (see there). */
#ifndef PAGODA_WORKER_SCHED_INT_H
#define PAGODA_WORKER_SCHED_INT_H

#include "worker/sched.h"

#include "common/vec.h"
#include "common/text/detok.h"
#include "worker/grammar/vocab_mask.h"
#include "worker/kv_pool.h"
#include "worker/model/forward.h"
#include "worker/step_cost.h"

#define SCHED_GRAMMAR_CACHE 8   /* compiled grammars kept for reuse (with their mask caches) */

enum seq_state {
    SEQ_WAITING = 0, /* accepted, holds no KV blocks */
    SEQ_RUNNING,     /* admitted: owns blocks; prefilling while n_computed < n_tokens - 1 */
};

typedef struct seq {
    uint64_t id;
    int32_t index;             /* choice index (n > 1: the sequences of one request share id) */
    bool wait_first;           /* index > 0: not admissible until choice 0 has sampled
                                  (its prompt's full blocks are then in the prefix cache) */
    int32_t priority;
    enum seq_state state;
    uint64_t arrival;          /* submit order: FIFO within a priority */
    uint64_t admitted;         /* admission order: preemption takes the newest */
    int64_t deadline_us;
    int64_t idle_us;           /* > 0: each step that computes its rows moves deadline_us */
    lora_set_t lora;           /* the request's adapters (n 0: base) */

    int32_t *tokens;           /* (cap) prompt then generated ids */
    int32_t n_tokens;
    int32_t cap;
    int32_t n_prompt;
    int32_t n_generated;       /* generated ids in tokens[], resumed ones included */
    int32_t n_resumed;         /* of those, given in the SUBMIT's resume */
    int32_t n_computed;        /* positions whose K/V is in the cache */
    int32_t n_cached;          /* prefix-cache hit at first admission (usage) */
    int32_t n_passed;          /* steps its prefill got no rows while a better tier's did
                                * (aging: sched_config_t.prefill_age_steps); 0 again once
                                * its prompt is computed */
    int32_t n_stopped;         /* its steps stopped in a row by a better tier's arrival
                                * (sched_preempt_offer); a step of it is not armed once this
                                * reaches cfg.prefill_max_stops; 0 again when one completes */
    bool first_admission_done;
    int32_t max_tokens;
    bool ignore_eos;
    int32_t *stop_ids;
    int32_t n_stop_ids;
    int32_t top_logprobs;      /* -1 = none */

    kv_seq_t *kv;
    sampler_t *sampler;
    detok_t *detok;
    gmatch_t *gm;              /* grammar matcher (constrained decoding), NULL = free text */
    uint64_t *gmask;           /* (gvocab_mask_words) allowed-token scratch for the draw */
    const char *draw_error;    /* set by sched_sample_draw: end the sequence with this error */
    bool cancelled;
    enum sched_finish finish;  /* set when the sequence ends during a step */
    enum model_pooling embed;  /* embedding (or rank) sequence: its pooling; 0 = generation */
    double *emb_sum;           /* (dim) embedding: sum (mean) or last hidden state so far */
    float *emb_out;            /* (dim) embedding: the reported vector; (n_scores) for rank */
    sched_image_t *imgs;       /* (n_imgs) the prompt's images, embd pointing into img_embd */
    int32_t n_imgs;
    float *img_embd;           /* owned: every image's rows, back to back */

    /* speculative decoding (spec.h) */
    bool no_spec;              /* the request opted out */
    spec_seq_t spec;           /* acceptance history: draft length */
    int32_t draft[SPEC_MAX_DRAFT]; /* this step's draft tokens (n_draft of them) */
    int32_t n_draft;
    kv_seq_t *dkv;             /* SPEC_DRAFT: the draft model's K/V of this sequence */
    int32_t d_computed;        /* positions in dkv (a prefix of tokens[]) */
    int32_t d_len;             /* this step: draft length wanted from the draft model */
    int32_t d_fed;             /* this step: drafts fed to the draft model (their K/V is in dkv's
                                * blocks past d_computed) */

    /* this step */
    bool in_batch;             /* has rows in the batch being built */
    bool out_valid;            /* sampled a token this step: report it */
    int32_t out_token;         /* the latest draw (sched_sample_draw) */
    sched_token_logprob_t out_lp;
    int32_t out_toks[SPEC_MAX_DRAFT + 1]; /* this step's tokens (n_out): one, or up to
                                            * n_draft + 1 with speculation */
    int32_t n_out;
    sched_token_logprob_t *out_lps; /* (SPEC_MAX_DRAFT + 1) their logprobs; with top_logprobs >= 0 */
    char *out_text;            /* (out_cap) this step's text delta */
    size_t out_len, out_cap;
} seq_t;

struct sched {
    const model_t *model;          /* borrowed */
    const tokenizer_t *tok;        /* borrowed */
    sched_config_t cfg;
    forward_t *fwd;
    kv_pool_t *pool;
    sched_event_fn on_event;
    void *ud;

    seq_t **seqs;                  /* (n_seqs) every live sequence, any state */
    int32_t n_seqs, cap_seqs;
    uint64_t n_arrivals, n_admissions;

    /* step scratch, sized once */
    int32_t *b_token, *b_pos, *b_seq; /* (max_batch_tokens) */
    uint8_t *b_want;                  /* (max_batch_tokens) */
    uint8_t *b_hid;                   /* (max_batch_tokens) rows whose hidden state embeddings pool */
    const float **b_embd;             /* (max_batch_tokens) image rows' inputs, NULL for tokens */
    int32_t n_img_rows;               /* rows of this step's batch with an image input */
    int32_t *b_att_end;               /* (max_batch_tokens) image rows: end of their image */
    float *hidden;                    /* (max_batch_tokens, dim) those hidden states, row order */
    const int32_t **b_tables;         /* (max_seqs) */
    int32_t *b_nblocks;               /* (max_seqs) */
    seq_t **b_seqs;                   /* (max_seqs) sequence of batch seq index */
    lora_rows_t *lrows;               /* rows → adapter sets of the step (lora.h) */
    seq_t **b_draw;                   /* (max_seqs) sequences sampled this step, logits row order */
    int32_t *b_drow;                  /* (max_seqs) logits row of each b_draw entry */
    int32_t *b_ndraft;                /* (max_seqs) draft rows after each batch sequence's chunk */
    seq_t **b_vdraw;                  /* (max_seqs) sequences verifying drafts this step */
    int32_t *b_vrow;                  /* (max_seqs) their first logits row */
    /* SPEC_DRAFT: the draft model's pass, pool and scratch (one row per
     * sequence per draft round, plus catch-up chunks in the first round) */
    forward_t *dfwd;
    kv_pool_t *dpool;
    float *dlogits;                   /* (max_seqs, vocab) */
    int32_t *d_token, *d_pos, *d_seq; /* (max_batch_tokens) */
    uint8_t *d_want;                  /* (max_batch_tokens) */
    const int32_t **d_tables;         /* (max_seqs) */
    int32_t *d_nblocks;               /* (max_seqs) */
    seq_t **d_seqs;                   /* (max_seqs) */
    sched_drafter_fn drafter;         /* sched_set_drafter: replaces the n-gram drafter */
    void *drafter_ud;
    int32_t *b_chunk;                 /* (max_seqs) rows given to each */
    float *logits;                    /* (max_seqs + spec_max_rows, vocab): one row per sampled
                                         sequence plus one per draft row */

    int32_t kv_budget_mib;            /* the pool's budget (MiB) when sized from one (--kv-budget-mb
                                       * or kv_budget.h's rule), 0 with --kv-blocks: for messages */
    int32_t max_positions;            /* a sequence's hard limit: min(context, KV pool positions),
                                         or the context for a windowed model whose pool holds a
                                         full chunk's window (see sched_new) */
    int32_t kv_window;                /* model_kv_window: > 0 → every layer is sliding-window and
                                         blocks behind pos - W + 1 are released (sched_kv_trim) */
    bool kv_window_fits;              /* kv_window > 0 and the pool holds a full chunk's window:
                                         sequences run to the context, admitted by first chunk */
    sched_stats_t st;

    /* step time budget (step_cost.h) */
    step_cost_t cost;                 /* the learned step cost of this model on this machine */
    step_cost_t cost_dec;             /* the same, of decode-only steps alone: the auto target's
                                       * base (what the streams' gap is without a prefill; in a
                                       * mixed step decode rows may cost less, and during a long
                                       * prefill `cost` forgets the decode-only steps) */
    step_cost_rows_t rows;            /* the step being built: its rows as the model counts them */
    double target_us;                 /* its time target, 0 = none */
    uint64_t *h_ids;                  /* (max_seqs) sched_step_info_t.ids scratch */
    int32_t *h_rows;                  /* (max_seqs) sched_step_info_t.n_rows scratch */
    int32_t step_tier;                /* aged tier of the step's first prefill chunk (build_batch;
                                       * INT32_MAX: no prefill rows) */
    _Atomic uint32_t preempt;         /* the preemption word (sched.h sched_preempt_word) */
    uint32_t preempt_gen;             /* generation of the last armed step */
    sched_armed_fn armed_hook;        /* sched_set_armed_hook */
    void *armed_hook_ud;
    sched_step_fn step_hook;          /* sched_set_step_hook */
    void *step_hook_ud;

    gvocab_t *gvocab;                 /* vocabulary trie for grammars, built at the first one */
    struct {
        char *text;                   /* grammar text (len bytes), NULL = free slot */
        size_t len;
        gmask_grammar_t *gg;          /* one reference held by the cache */
        uint64_t used;                /* gclock at the last use (LRU) */
    } gcache[SCHED_GRAMMAR_CACHE];
    uint64_t gclock;
};

static inline void seq_push_token(seq_t *q, int32_t t)
{
    vec_push(q->tokens, q->n_tokens, q->cap, t);
}

/* ---- small helpers of every scheduler file ------------------------------- */

/* Running sequences. */
static inline int32_t sched_n_running(const sched_t *s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_seqs; i++)
        n += s->seqs[i]->state == SEQ_RUNNING;
    return n;
}

/* a should be served before b: better priority, then earlier arrival. */
static inline bool sched_seq_before(const seq_t *a, const seq_t *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    return a->arrival < b->arrival;
}

/* q is running and its next row is a decode row (one pending sampled token). */
static inline bool sched_seq_decoding(const seq_t *q)
{
    return q->state == SEQ_RUNNING && q->n_tokens - q->n_computed == 1 && q->n_generated > 0;
}

/* Sliding-window models: releases q's blocks that no later row can read (all
 * their positions before n_computed - W + 1, the first position the next row
 * attends to). Cached ones stay in the prefix cache as evictable blocks. */
static inline void sched_kv_trim(sched_t *s, seq_t *q)
{
    if (s->kv_window > 0)
        kv_seq_drop_before(q->kv, q->n_computed - s->kv_window + 1);
}

/* ---- sched_admit.c --------------------------------------------------------- */

/* Admits waiting sequences while slots and KV blocks allow (may preempt). */
void sched_admit(sched_t *s);
/* Reserves KV for n more positions of q, preempting lower-priority (or equal
 * priority, newer) sequences when the pool is full. Returns false when q
 * cannot get them (q itself may have been preempted then: check its state). */
bool sched_reserve_or_preempt(sched_t *s, seq_t *q, int32_t n);

/* ---- sched_sample.c -------------------------------------------------------- */

/* Draws q's next token from its logits row into q->out_token (q->out_lp).
 * Touches only q and its sampler: the sequences of a step draw in parallel. */
void sched_sample_draw(seq_t *q, const float *row, int32_t max_positions);
/* Takes q->out_token into the sequence and runs the stop checks. */
void sched_sample_finish(sched_t *s, seq_t *q);

/* ---- spec.c (speculative decoding in the step) ----------------------------- */

/* Gives decoding sequences their drafts for this step (q->n_draft). */
void spec_plan_step(sched_t *s);
/* Draws q's tokens from its 1 + n_draft logits rows (rows: the first) and
 * records the accepted drafts. */
void spec_verify_seq(sched_t *s, seq_t *q, const float *rows);

#endif
