/* sched.c — continuous-batching scheduler (see sched.h for the step and the
 * sequence state machine). */
#include "worker/sched.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "common/vec.h"
#include "common/text/detok.h"
#include "worker/model/forward.h"
#include "worker/kv_pool.h"
#include "worker/step_cost.h"
#include "worker/kernels/qgemm.h"
#include "worker/grammar/vocab_mask.h"

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
    const char *draw_error;    /* set by sample_draw: end the sequence with this error */
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
    int32_t out_token;         /* the latest draw (sample_draw) */
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
                                         blocks behind pos - W + 1 are released (kv_trim) */
    bool kv_window_fits;              /* kv_window > 0 and the pool holds a full chunk's window:
                                         sequences run to the context, admitted by first chunk */
    sched_stats_t st;

    /* step time budget (step_cost.h) */
    step_cost_t cost;                 /* the learned step cost of this model on this machine */
    step_cost_rows_t rows;            /* the step being built: its rows as the model counts them */
    double target_us;                 /* its time target, 0 = none */
    uint64_t *h_ids;                  /* (max_seqs) sched_step_info_t.ids scratch */
    int32_t *h_rows;                  /* (max_seqs) sched_step_info_t.n_rows scratch */
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

/* ---- helpers ------------------------------------------------------------- */

const char *sched_finish_name(enum sched_finish f)
{
    switch (f) {
    case SCHED_FINISH_STOP: return "stop";
    case SCHED_FINISH_LENGTH: return "length";
    case SCHED_FINISH_CANCELLED: return "cancelled";
    case SCHED_FINISH_ERROR: return "error";
    default: return "none";
    }
}

void sched_config_default(sched_config_t *c)
{
    memset(c, 0, sizeof *c);
    c->max_seqs = 32;
    c->max_batch_tokens = 512;
    c->block_size = 32;
    c->n_threads = 2;
    c->kv_budget_bytes = (size_t)1 << 30;
    c->kv_type = KV_TYPE_AUTO;
    c->spec = SPEC_OFF;
    c->spec_max_draft = 8;
    c->spec_max_rows = 16;
    c->step_budget_ms = SCHED_STEP_BUDGET_AUTO;
    c->step_budget_factor = 2.0;
    c->step_min_chunk = 64;
    c->prefill_age_steps = 32;
}

/* KV_TYPE_AUTO → F16 when every layer's K and V projections run on the int8
 * kernels (int8_on and a quantized type), F32 otherwise (kv_store.h). */
kv_type_t sched_kv_type_for(const model_t *m, kv_type_t t, bool int8_on)
{
    if (t != KV_TYPE_AUTO)
        return t;
    if (!int8_on)
        return KV_TYPE_F32;
    for (int l = 0; l < m->cfg.n_layer; l++)
        if (!qgemm_supported(m->layers[l].wk.type) || !qgemm_supported(m->layers[l].wv.type))
            return KV_TYPE_F32;
    return KV_TYPE_F16;
}

static void seq_free(seq_t **ps)
{
    seq_t *q = *ps;
    if (!q)
        return;
    kv_seq_free(&q->kv);
    kv_seq_free(&q->dkv);
    sampler_free(&q->sampler);
    detok_free(&q->detok);
    gmatch_free(&q->gm);
    free(q->gmask);
    free(q->tokens);
    free(q->stop_ids);
    free(q->out_text);
    free(q->emb_sum);
    free(q->emb_out);
    free(q->imgs);
    free(q->img_embd);
    free(q->out_lps);
    free(q);
    *ps = NULL;
}

static void seq_push_token(seq_t *q, int32_t t)
{
    vec_push(q->tokens, q->n_tokens, q->cap, t);
}

static seq_t *find_seq(const sched_t *s, uint64_t id)
{
    for (int32_t i = 0; i < s->n_seqs; i++)
        if (s->seqs[i]->id == id)
            return s->seqs[i];
    return NULL;
}

static int32_t n_running(const sched_t *s)
{
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_seqs; i++)
        n += s->seqs[i]->state == SEQ_RUNNING;
    return n;
}

/* a should be served before b: better priority, then earlier arrival. */
static bool seq_before(const seq_t *a, const seq_t *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    return a->arrival < b->arrival;
}

/* Sliding-window models: releases q's blocks that no later row can read (all
 * their positions before n_computed - W + 1, the first position the next row
 * attends to). Cached ones stay in the prefix cache as evictable blocks. */
static void kv_trim(sched_t *s, seq_t *q)
{
    if (s->kv_window > 0)
        kv_seq_drop_before(q->kv, q->n_computed - s->kv_window + 1);
}

/* Drops q's blocks and sends it back to the waiting queue; everything it has
 * generated stays, and is recomputed (not resampled) when it is readmitted. */
static void preempt(sched_t *s, seq_t *q)
{
    log_debug("preempt request %llu (priority %d, %d tokens)", (unsigned long long)q->id,
              q->priority, q->n_tokens);
    kv_seq_release(q->kv);
    q->n_computed = 0;
    if (q->dkv) {
        kv_seq_release(q->dkv);
        q->d_computed = 0;
    }
    q->n_draft = 0;
    q->state = SEQ_WAITING;
    q->in_batch = false;
    s->st.preemptions++;
}

/* The running sequence to preempt for a request of priority `prio`: the
 * lowest-priority, most recently admitted one, not worse-placed than `prio`
 * allows (victims must have priority value >= prio; `self` is eligible only
 * when allow_self). NULL when none. */
static seq_t *pick_victim(sched_t *s, int32_t prio, const seq_t *self, bool allow_self,
                          bool strictly_lower)
{
    seq_t *v = NULL;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        seq_t *q = s->seqs[i];
        if (q->state != SEQ_RUNNING || (q == self && !allow_self))
            continue;
        if (strictly_lower ? q->priority <= prio : q->priority < prio)
            continue;
        if (!v || q->priority > v->priority ||
            (q->priority == v->priority && q->admitted > v->admitted))
            v = q;
    }
    return v;
}

/* Reserves KV for n more positions of q, preempting lower-priority (or equal
 * priority, newer) sequences when the pool is full. Returns false when q
 * cannot get them (q itself may have been preempted then: check its state). */
static bool reserve_or_preempt(sched_t *s, seq_t *q, int32_t n)
{
    for (;;) {
        int rc = kv_seq_reserve(q->kv, n);
        if (rc == KV_POOL_OK)
            return true;
        if (rc != KV_POOL_NO_CAPACITY)
            return false;
        seq_t *v = pick_victim(s, q->priority, q, true, false);
        if (!v)
            return false;
        preempt(s, v);
        if (v == q)
            return false;
    }
}

static void emit(sched_t *s, seq_t *q, const char *text, size_t text_len, const int32_t *toks,
                 int32_t n_toks, const sched_token_logprob_t *lp, enum sched_finish fin,
                 sched_rc_t error_code, const char *error)
{
    sched_event_t ev = {
        .id = q->id,
        .index = q->index,
        .text = text ? text : "",
        .text_len = text_len,
        .tokens = toks,
        .n_tokens = n_toks,
        .logprobs = lp,
        .finish = fin,
        .stop = fin == SCHED_FINISH_STOP && q->detok && detok_finish_reason(q->detok) == DETOK_FINISH_STOP
                    ? detok_stop_index(q->detok) + 1
                    : 0,
        .error = error,
        .error_code = error_code,
        .n_prompt = q->n_prompt,
        .n_cached = q->n_cached,
        .n_completion = q->n_generated,
        .n_resumed = q->n_resumed,
    };
    if (s->on_event)
        s->on_event(s->ud, &ev);
}

static void remove_seq_at(sched_t *s, int32_t i)
{
    seq_free(&s->seqs[i]);
    s->seqs[i] = s->seqs[--s->n_seqs];
}

/* ---- lifecycle ------------------------------------------------------------- */

sched_t *sched_new(const model_t *m, const tokenizer_t *tok, const sched_config_t *c,
                   sched_event_fn on_event, void *ud, char *err, size_t errlen)
{
    sched_t *s = NULL;
    const model_config_t *mc = &m->cfg;
    if (c->max_seqs < 1 || c->max_seqs > 4096 || c->max_batch_tokens < 1 ||
        c->max_batch_tokens > 65536 || c->block_size < 1 || c->block_size > 4096 ||
        c->n_threads < 1 ||
        (kv_type_size(c->kv_type) == 0 && c->kv_type != KV_TYPE_AUTO && c->kv_type != KV_TYPE_Q8_0) ||
        c->spec_max_draft < 0 || c->spec_max_draft > SPEC_MAX_DRAFT || c->spec_max_rows < 0 ||
        c->spec_max_rows > 4096 || c->step_budget_ms < SCHED_STEP_BUDGET_AUTO ||
        c->step_budget_ms > 600000 || !(c->step_budget_factor >= 1.0 && c->step_budget_factor <= 1000.0) ||
        c->step_min_chunk < 1 || c->prefill_age_steps < 1) {
        errbuf_set(err, errlen, "invalid scheduler limits (max_seqs %d, max_batch_tokens %d, block_size %d, kv type %d)",
                   c->max_seqs, c->max_batch_tokens, c->block_size, (int)c->kv_type);
        return NULL;
    }
    s = xcalloc(1, sizeof *s);
    s->model = m;
    s->tok = tok;
    s->cfg = *c;
    s->on_event = on_event;
    s->ud = ud;
    /* a batch always has room for one decode row per sequence */
    if (s->cfg.max_batch_tokens < s->cfg.max_seqs)
        s->cfg.max_batch_tokens = s->cfg.max_seqs;

    s->fwd = forward_new(m, s->cfg.max_batch_tokens, c->n_threads);
    if (!s->fwd) {
        errbuf_set(err, errlen, "cannot create the forward pass context");
        goto err;
    }
    bool int8_on = !c->exact_matmul;
    if (int8_on && forward_set_int8(s->fwd, true) != 0) {
        log_warn("int8 matmul kernels unavailable: using dequantize + sgemm");
        int8_on = false;
    }
    s->cfg.kv_type = sched_kv_type_for(m, c->kv_type, int8_on);
    c = &s->cfg;
    const int32_t qblock = c->kv_type == KV_TYPE_Q8_0 ? kv_store_qblock(mc->head_dim) : 0;
    if (c->kv_type == KV_TYPE_Q8_0 && (qblock == 0 || mc->head_dim > 512)) {
        errbuf_set(err, errlen, "--kv-type q8_0 needs a head_dim that is a multiple of 8 and at most 512 (this model: %d)",
                   mc->head_dim);
        goto err;
    }

    int32_t n_blocks = c->kv_blocks;
    size_t budget = c->kv_budget_bytes ? c->kv_budget_bytes : ((size_t)1 << 30);
    if (n_blocks <= 0) {
        int32_t want = (int32_t)(((int64_t)s->cfg.max_seqs * mc->ctx + c->block_size - 1) / c->block_size);
        size_t per = kv_pool_block_bytes_q(mc->n_layer, mc->kv_dim, c->block_size, c->kv_type, qblock);
        if (c->kv_auto && c->kv_budget_bytes == 0) {
            /* the budget covers the draft pool too (as many blocks, its own size) */
            if (c->spec == SPEC_DRAFT && c->draft_model)
                per += kv_pool_block_bytes(c->draft_model->cfg.n_layer, c->draft_model->cfg.kv_dim, c->block_size,
                                           sched_kv_type_for(c->draft_model, KV_TYPE_AUTO, int8_on));
            kv_budget_in_t in = c->kv_mem;
            in.cap_mib = ((uint64_t)want * per + (1u << 20) - 1) >> 20;
            kv_budget_t kb;
            kv_budget_auto(&in, &kb);
            char line[512];
            kv_budget_describe(&in, &kb, line, sizeof line);
            if (kb.bound == KV_BUDGET_FLOOR)
                log_warn("kv pool: %s (memory is short: set --kv-budget-mb, lower --max-seqs or add memory)", line);
            else
                log_info("kv pool: %s", line);
            budget = (size_t)kb.mib << 20;
        }
        size_t fit = per ? budget / per : 0, lim = (size_t)INT32_MAX / (size_t)c->block_size;
        fit = fit < lim ? fit : lim;
        n_blocks = (size_t)want < fit ? want : (int32_t)fit;
    }
    s->kv_budget_mib = c->kv_blocks > 0 ? 0 : (int32_t)(budget >> 20);
    if (n_blocks < 1) {
        errbuf_set(err, errlen, "KV budget holds no block");
        goto err;
    }
    s->pool = kv_pool_new_q(mc->n_layer, mc->kv_dim, n_blocks, c->block_size, c->kv_type, qblock);
    if (!s->pool) {
        errbuf_set(err, errlen, "cannot create a KV pool of %d blocks", n_blocks);
        goto err;
    }
    kv_pool_prefault_head(s->pool, (size_t)2 << 20); /* one huge page per layer's K and V */
    s->max_positions = mc->ctx < n_blocks * c->block_size ? mc->ctx : n_blocks * c->block_size;
    s->kv_window = model_kv_window(mc);
    if (s->kv_window > 0) {
        /* A windowed sequence holds at most the blocks spanning its window
         * plus the chunk being computed: ceil((W - 1 + chunk) / bs) + 1. When
         * the pool has that for a full chunk, a lone sequence always makes
         * progress, so only the context limits its length. */
        int64_t live = ((int64_t)s->kv_window - 1 + s->cfg.max_batch_tokens + c->block_size - 1) / c->block_size + 1;
        if (n_blocks >= live) {
            s->max_positions = mc->ctx;
            s->kv_window_fits = true;
        }
    }
    int32_t mb = s->cfg.max_batch_tokens, ms = s->cfg.max_seqs;
    s->b_token = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_pos = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_seq = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_want = xmalloc((size_t)mb);
    s->b_embd = xcalloc((size_t)mb, sizeof *s->b_embd);
    s->b_att_end = xcalloc((size_t)mb, sizeof *s->b_att_end);
    s->b_hid = xmalloc((size_t)mb);
    s->hidden = xmalloc((size_t)mb * (size_t)mc->dim * sizeof(float));
    s->b_tables = xmalloc((size_t)ms * sizeof *s->b_tables);
    s->b_nblocks = xmalloc((size_t)ms * sizeof(int32_t));
    s->b_seqs = xmalloc((size_t)ms * sizeof *s->b_seqs);
    s->lrows = lora_rows_new(mb, ms);
    s->b_draw = xmalloc((size_t)ms * sizeof *s->b_draw);
    s->b_chunk = xmalloc((size_t)ms * sizeof(int32_t));
    s->b_drow = xmalloc((size_t)ms * sizeof(int32_t));
    s->b_ndraft = xmalloc((size_t)ms * sizeof(int32_t));
    s->b_vdraw = xmalloc((size_t)ms * sizeof *s->b_vdraw);
    s->b_vrow = xmalloc((size_t)ms * sizeof(int32_t));
    s->h_ids = xmalloc((size_t)ms * sizeof *s->h_ids);
    s->h_rows = xmalloc((size_t)ms * sizeof *s->h_rows);
    /* 0.98: the fit follows the last ~50 steps (a few seconds of decoding),
     * quick to see the machine change, long enough to average out noise */
    step_cost_init(&s->cost, 0.98);
    if (c->spec == SPEC_DRAFT) {
        const model_t *dm = c->draft_model;
        if (!dm || dm->cfg.vocab != mc->vocab) {
            errbuf_set(err, errlen, "--spec draft needs a draft model with the target's vocabulary (%d tokens)",
                       mc->vocab);
            goto err;
        }
        s->dfwd = forward_new(dm, s->cfg.max_batch_tokens, c->n_threads);
        if (!s->dfwd) {
            errbuf_set(err, errlen, "cannot create the draft model's forward pass");
            goto err;
        }
        if (int8_on && forward_set_int8(s->dfwd, true) != 0)
            log_warn("draft model: int8 matmul kernels unavailable");
        /* as many blocks as the target's pool: a draft model is smaller, so
         * this is less memory, and every running sequence fits */
        kv_type_t dt = sched_kv_type_for(dm, KV_TYPE_AUTO, int8_on);
        s->dpool = kv_pool_new(dm->cfg.n_layer, dm->cfg.kv_dim, n_blocks, c->block_size, dt);
        if (!s->dpool) {
            errbuf_set(err, errlen, "cannot create the draft model's KV pool");
            goto err;
        }
        s->dlogits = xmalloc((size_t)ms * (size_t)mc->vocab * sizeof(float));
        s->d_token = xmalloc((size_t)mb * sizeof(int32_t));
        s->d_pos = xmalloc((size_t)mb * sizeof(int32_t));
        s->d_seq = xmalloc((size_t)mb * sizeof(int32_t));
        s->d_want = xmalloc((size_t)mb);
        s->d_tables = xmalloc((size_t)ms * sizeof *s->d_tables);
        s->d_nblocks = xmalloc((size_t)ms * sizeof(int32_t));
        s->d_seqs = xmalloc((size_t)ms * sizeof *s->d_seqs);
    }
    s->logits = xmalloc(((size_t)ms + (size_t)c->spec_max_rows) * (size_t)mc->vocab * sizeof(float));
    char sb[64];
    if (c->step_budget_ms == SCHED_STEP_BUDGET_AUTO)
        snprintf(sb, sizeof sb, "auto (%.1fx decode, chunks >= %d)", c->step_budget_factor, c->step_min_chunk);
    else if (c->step_budget_ms > 0)
        snprintf(sb, sizeof sb, "%d ms (chunks >= %d)", c->step_budget_ms, c->step_min_chunk);
    else
        snprintf(sb, sizeof sb, "off");
    log_info("scheduler: %d seqs, %d batch tokens, step budget %s, %d KV blocks of %d positions (%s, %.1f MiB)",
             ms, mb, sb, n_blocks, c->block_size, kv_type_name(c->kv_type),
             (double)n_blocks * (double)kv_pool_block_bytes_q(mc->n_layer, mc->kv_dim, c->block_size, c->kv_type,
                                                              qblock) /
                 1048576.0);
    return s;
err:
    sched_free(&s);
    return NULL;
}

void sched_free(sched_t **ps)
{
    sched_t *s = *ps;
    if (!s)
        return;
    for (int32_t i = 0; i < s->n_seqs; i++)
        seq_free(&s->seqs[i]);
    free(s->seqs);
    forward_free(&s->fwd);
    kv_pool_free(&s->pool);
    kv_pool_free(&s->dpool); /* after the sequences' dkv */
    free(s->b_token);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_want);
    free(s->b_embd);
    free(s->b_att_end);
    free(s->b_hid);
    free(s->hidden);
    free(s->b_tables);
    free(s->b_nblocks);
    free(s->b_seqs);
    lora_rows_free(&s->lrows);
    free(s->b_draw);
    free(s->b_chunk);
    free(s->b_drow);
    free(s->b_ndraft);
    free(s->b_vdraw);
    free(s->b_vrow);
    free(s->h_ids);
    free(s->h_rows);
    free(s->logits);
    forward_free(&s->dfwd);
    free(s->dlogits);
    free(s->d_token);
    free(s->d_pos);
    free(s->d_seq);
    free(s->d_want);
    free(s->d_tables);
    free(s->d_nblocks);
    free(s->d_seqs);
    for (int i = 0; i < SCHED_GRAMMAR_CACHE; i++) {
        free(s->gcache[i].text);
        gmask_grammar_unref(&s->gcache[i].gg);
    }
    gvocab_free(&s->gvocab);
    free(s);
    *ps = NULL;
}

int32_t sched_context_length(const sched_t *s) { return s->max_positions; }
int32_t sched_capacity(const sched_t *s) { return s->cfg.max_seqs; }
void sched_set_progress(sched_t *s, _Atomic uint64_t *layers_done)
{
    forward_set_progress(s->fwd, layers_done);
}
bool sched_busy(const sched_t *s) { return s->n_seqs > 0; }
int sched_check(const sched_t *s) { return kv_pool_check(s->pool); }
kv_pool_t *sched_kv_pool(sched_t *s) { return s->pool; }

void sched_stats(const sched_t *s, sched_stats_t *out)
{
    *out = s->st;
    kv_pool_stats_t ps;
    kv_pool_stats(s->pool, &ps);
    out->n_running = n_running(s);
    out->n_waiting = s->n_seqs - out->n_running;
    out->kv_blocks_total = ps.n_blocks;
    out->kv_blocks_used = ps.n_used;
    out->kv_blocks_cached = ps.n_cached;
    out->prefix_query_tokens = ps.n_prefix_query_tokens;
    out->prefix_hit_tokens = ps.n_prefix_hit_tokens;
    out->prefix_disk_hit_tokens = ps.n_tier_hit_tokens;
    out->kv_evictions = ps.n_evictions;
}

kv_type_t sched_kv_type(const sched_t *s)
{
    return s->cfg.kv_type;
}

/* The compiled grammar for text (from the cache, or parsed now); a new
 * reference the caller releases. NULL with a message on a bad grammar. */
static gmask_grammar_t *grammar_get(sched_t *s, const char *text, size_t len, char *err, size_t errlen)
{
    s->gclock++;
    for (int i = 0; i < SCHED_GRAMMAR_CACHE; i++)
        if (s->gcache[i].text && s->gcache[i].len == len && memcmp(s->gcache[i].text, text, len) == 0) {
            s->gcache[i].used = s->gclock;
            gmask_grammar_ref(s->gcache[i].gg);
            return s->gcache[i].gg;
        }
    if (!s->gvocab) {
        int32_t V = s->model->cfg.vocab, nt = tokenizer_n_vocab(s->tok);
        const uint8_t **pieces = xcalloc((size_t)V, sizeof *pieces);
        size_t *lens = xcalloc((size_t)V, sizeof *lens);
        bool *eog = xcalloc((size_t)V, sizeof *eog);
        for (int32_t i = 0; i < V && i < nt; i++) {
            pieces[i] = (const uint8_t *)tokenizer_token_piece(s->tok, i, false, &lens[i]);
            eog[i] = tokenizer_is_eog(s->tok, i);
        }
        int64_t t0 = clock_now_us();
        s->gvocab = gvocab_new(pieces, lens, eog, V);
        log_info("grammar: vocabulary trie of %d tokens built in %.1f ms", V,
                 (double)(clock_now_us() - t0) / 1000.0);
        free(pieces);
        free(lens);
        free(eog);
    }
    grammar_t *g = NULL;
    char perr[512];
    if (gbnf_parse((const uint8_t *)text, len, &g, perr, sizeof perr, NULL, NULL) != 0) {
        errbuf_set(err, errlen, "invalid grammar: %s", perr);
        return NULL;
    }
    gmask_grammar_t *gg = gmask_grammar_new(g, s->gvocab);
    int slot = 0;
    for (int i = 1; i < SCHED_GRAMMAR_CACHE; i++)
        if (!s->gcache[i].text || (s->gcache[slot].text && s->gcache[i].used < s->gcache[slot].used))
            slot = i;
    free(s->gcache[slot].text);
    gmask_grammar_unref(&s->gcache[slot].gg);
    s->gcache[slot].text = xmalloc(len + 1);
    memcpy(s->gcache[slot].text, text, len);
    s->gcache[slot].text[len] = 0;
    s->gcache[slot].len = len;
    s->gcache[slot].gg = gg;
    s->gcache[slot].used = s->gclock;
    gmask_grammar_ref(gg);
    return gg;
}
static int submit_one(sched_t *s, const sched_req_t *r, int32_t index, char *err, size_t errlen);

/* SCHED_ETOO_LONG's message: what limit the input exceeds, and (when it is
 * the KV pool, not the model's context) the setting that made the pool, so a
 * client (and its operator) can tell "too long for this model" from "too
 * long for this server". "prompt is too long" begins it as in the Anthropic
 * API's own message, which agents look for. n_gen: positions the request
 * needs past its input (1 to generate, 0 to embed). */
static void too_long(const sched_t *s, const char *what, int32_t n, int32_t n_resume, int32_t n_gen, char *err,
                     size_t errlen)
{
    char resumed[48] = "", gen[48] = "", why[160];
    if (n_resume > 0)
        snprintf(resumed, sizeof resumed, " (plus %d already generated)", n_resume);
    if (n_gen > 0)
        snprintf(gen, sizeof gen, ", %d of them for the reply", n_gen);
    if (s->max_positions >= s->model->cfg.ctx) {
        errbuf_set(err, errlen, "%s is too long: %d tokens%s, but the model's context length is %d tokens%s", what,
                   n, resumed, s->max_positions, gen);
        return;
    }
    if (s->kv_budget_mib == 0)
        snprintf(why, sizeof why, "--kv-blocks %d", s->max_positions / s->cfg.block_size);
    else if (s->cfg.kv_auto && s->cfg.kv_budget_bytes == 0)
        snprintf(why, sizeof why, "a %d MiB pool sized from free memory; --kv-budget-mb sets it", s->kv_budget_mib);
    else
        snprintf(why, sizeof why, "--kv-budget-mb %d", s->kv_budget_mib);
    errbuf_set(err, errlen,
               "%s is too long: %d tokens%s, but this server's KV cache holds at most %d positions per sequence "
               "(%s)%s; the model's context length is %d",
               what, n, resumed, s->max_positions, why, gen, s->model->cfg.ctx);
}

/* The request's image spans lie in the prompt, in order, each within one
 * batch. 0 ok, -1 with a message. */
static int check_images(const sched_t *s, const sched_req_t *r, char *err, size_t errlen)
{
    if (r->n_images < 0 || (r->n_images > 0 && !r->images))
        return errbuf_set(err, errlen, "bad image list");
    int32_t end = 0;
    for (int32_t i = 0; i < r->n_images; i++) {
        const sched_image_t *im = &r->images[i];
        if (!im->embd || im->n_tok < 1 || im->pos < end || im->pos > r->n_prompt - im->n_tok)
            return errbuf_set(err, errlen, "image %d: %d rows at position %d do not fit the prompt (%d tokens) "
                              "after the previous image", i, im->n_tok, im->pos, r->n_prompt);
        if (im->n_tok > s->cfg.max_batch_tokens)
            return errbuf_set(err, errlen, "image %d: %d rows exceed max_batch_tokens %d", i, im->n_tok,
                              s->cfg.max_batch_tokens);
        end = im->pos + im->n_tok;
    }
    return 0;
}

/* The prefix-cache partition of a request: its own, mixed with its images'
 * keys and positions when it has any (so blocks holding image rows are
 * shared only between requests with the same images in the same places). */
static uint64_t image_partition(const sched_req_t *r)
{
    uint64_t h = r->partition;
    for (int32_t i = 0; i < r->n_images; i++) {
        h ^= r->images[i].key + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
        h ^= (uint64_t)r->images[i].pos * 0xff51afd7ed558ccdull;
    }
    return r->n_images > 0 && h == 0 ? 1 : h;
}

int sched_submit(sched_t *s, const sched_req_t *r, char *err, size_t errlen)
{
    const int32_t ctx = s->max_positions, vocab = s->model->cfg.vocab;
    if (r->n_prompt < 1) {
        errbuf_set(err, errlen, "the prompt is empty");
        return SCHED_EINVAL;
    }
    if (r->n_resume < 0 || (int64_t)r->n_prompt + r->n_resume + 1 > ctx) {
        too_long(s, "prompt", r->n_prompt, r->n_resume, 1, err, errlen);
        return SCHED_ETOO_LONG;
    }
    for (int32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= vocab) {
            errbuf_set(err, errlen, "prompt token %d is out of the vocabulary", r->prompt[i]);
            return SCHED_EINVAL;
        }
    for (int32_t i = 0; i < r->n_resume; i++)
        if (r->resume[i] < 0 || r->resume[i] >= vocab) {
            errbuf_set(err, errlen, "resumed token %d is out of the vocabulary", r->resume[i]);
            return SCHED_EINVAL;
        }
    if (r->max_tokens > 0 && r->n_resume >= r->max_tokens) {
        errbuf_set(err, errlen, "%d resumed tokens already reach max_tokens %d", r->n_resume,
                   r->max_tokens);
        return SCHED_EINVAL;
    }
    if (check_images(s, r, err, errlen) != 0)
        return SCHED_EINVAL;
    if (find_seq(s, r->id)) {
        errbuf_set(err, errlen, "request %llu is already running", (unsigned long long)r->id);
        return SCHED_EDUPLICATE;
    }
    int32_t n_choices = r->n_choices == 0 ? 1 : r->n_choices;
    if (n_choices < 1 || n_choices > SCHED_MAX_CHOICES || (n_choices > 1 && r->n_resume > 0)) {
        errbuf_set(err, errlen, "n = %d choices: want 1..%d, and 1 when resuming", n_choices,
                   SCHED_MAX_CHOICES);
        return SCHED_EINVAL;
    }
    for (int32_t i = 0; i < n_choices; i++) {
        sched_req_t ri = *r;
        if (i > 0 && ri.sampling.has_seed)
            ri.sampling.seed += (uint64_t)i; /* choice i = a request seeded seed + i */
        if (submit_one(s, &ri, i, err, errlen) < 0) {
            for (int32_t k = s->n_seqs - 1; k >= 0; k--)
                if (s->seqs[k]->id == r->id)
                    remove_seq_at(s, k);
            return SCHED_EINVAL; /* submit_one: invalid sampling or stop strings */
        }
    }
    return SCHED_OK;
}

/* One sequence of request r: choice `index`. */
static int submit_one(sched_t *s, const sched_req_t *r, int32_t index, char *err, size_t errlen)
{
    const int32_t vocab = s->model->cfg.vocab;
    seq_t *q = xcalloc(1, sizeof *q);
    q->id = r->id;
    q->index = index;
    q->wait_first = index > 0;
    q->priority = r->priority < 0 ? 0 : r->priority > 2 ? 2 : r->priority;
    q->state = SEQ_WAITING;
    q->arrival = s->n_arrivals++;
    q->deadline_us = r->deadline_us;
    q->idle_us = r->idle_us;
    q->max_tokens = r->max_tokens;
    q->ignore_eos = r->ignore_eos;
    q->top_logprobs = r->top_logprobs > SAMPLER_MAX_TOP_LOGPROBS ? SAMPLER_MAX_TOP_LOGPROBS
                                                                : r->top_logprobs;
    q->n_prompt = r->n_prompt;
    q->no_spec = r->no_spec;
    q->lora = r->lora;
    if (q->top_logprobs >= 0)
        q->out_lps = xcalloc(SPEC_MAX_DRAFT + 1, sizeof *q->out_lps);
    for (int32_t i = 0; i < r->n_prompt; i++)
        seq_push_token(q, r->prompt[i]);
    if (r->n_stop_ids > 0) {
        q->stop_ids = xmalloc((size_t)r->n_stop_ids * sizeof(int32_t));
        memcpy(q->stop_ids, r->stop_ids, (size_t)r->n_stop_ids * sizeof(int32_t));
        q->n_stop_ids = r->n_stop_ids;
    }
    q->kv = kv_seq_new(s->pool);
    kv_seq_set_partition(q->kv, image_partition(r));
    if (r->n_images > 0) { /* copies: the caller's rows need not outlive the call */
        const size_t dim = (size_t)s->model->cfg.dim;
        size_t n_rows = 0;
        for (int32_t i = 0; i < r->n_images; i++)
            n_rows += (size_t)r->images[i].n_tok;
        q->img_embd = xmalloc(n_rows * dim * sizeof(float));
        q->imgs = xmalloc((size_t)r->n_images * sizeof *q->imgs);
        q->n_imgs = r->n_images;
        size_t off = 0;
        for (int32_t i = 0; i < r->n_images; i++) {
            q->imgs[i] = r->images[i];
            memcpy(q->img_embd + off, r->images[i].embd, (size_t)r->images[i].n_tok * dim * sizeof(float));
            q->imgs[i].embd = q->img_embd + off;
            off += (size_t)r->images[i].n_tok * dim;
        }
        q->no_spec = true;
    }
    if (s->dpool)
        q->dkv = kv_seq_new(s->dpool);
    sampler_params_t sp = r->sampling;
    sp.n_top_logprobs = q->top_logprobs > 0 ? q->top_logprobs : 0;
    q->sampler = sampler_new(&sp, vocab);
    q->detok = detok_new(r->stop, (size_t)(r->n_stop > 0 ? r->n_stop : 0));
    if (!q->sampler || !q->detok) {
        errbuf_set(err, errlen, "invalid sampling parameters or stop strings");
        seq_free(&q);
        return SCHED_EINVAL;
    }
    sampler_accept_prompt(q->sampler, r->prompt, r->n_prompt);
    if (r->grammar && r->grammar_len > 0) {
        gmask_grammar_t *gg = grammar_get(s, r->grammar, r->grammar_len, err, errlen);
        if (!gg) {
            seq_free(&q);
            return -1;
        }
        q->gm = gmatch_new(gg);
        gmask_grammar_unref(&gg);
        if (!q->gm) {
            errbuf_set(err, errlen, "the grammar matches nothing");
            seq_free(&q);
            return -1;
        }
        q->gmask = xmalloc(gvocab_mask_words(s->gvocab) * sizeof *q->gmask);
        for (int32_t i = 0; i < r->n_resume; i++)
            if (gmatch_accept(q->gm, r->resume[i]) != 0) {
                errbuf_set(err, errlen, "resumed token %d does not match the grammar", r->resume[i]);
                seq_free(&q);
                return -1;
            }
        /* the shortest complete document (in bytes, at least as many
         * tokens as it needs) plus the end token must fit in the context.
         * A max_tokens below it is the caller's choice, as with OpenAI and
         * Anthropic: the output keeps to the grammar and is cut short with
         * finish "length" (grammar_draw: nothing fits → keep to the
         * grammar), so a forced tool call comes back partial, not refused. */
        int64_t left = (int64_t)s->max_positions - r->n_prompt - r->n_resume;
        int64_t need = gmatch_cost(q->gm) + 1;
        if (need > left) {
            errbuf_set(err, errlen,
                       "the context leaves %lld tokens, but the shortest output the response format or "
                       "grammar allows needs up to %lld",
                       (long long)left, (long long)need);
            seq_free(&q);
            return -1;
        }
    }
    /* Resumed tokens were delivered already: they join the sequence as
     * generated text, and the detokenizer sees them so UTF-8 and stop-string
     * state carry on exactly where the client's stream left off. */
    for (int32_t i = 0; i < r->n_resume; i++) {
        seq_push_token(q, r->resume[i]);
        q->n_generated++;
        sampler_accept(q->sampler, r->resume[i]);
        size_t plen = 0;
        const char *piece = tokenizer_token_piece(s->tok, r->resume[i], false, &plen);
        const char *d;
        size_t dl;
        detok_push(q->detok, piece, plen, &d, &dl);
    }
    q->n_resumed = r->n_resume;
    /* each of them cost the interrupted run one draw: a seeded request
     * continues the same random stream */
    sampler_skip(q->sampler, r->n_resume);
    vec_push(s->seqs, s->n_seqs, s->cap_seqs, q);
    return 0;
}

/* Floats an embedding sequence reports: the model's dim, or its rank
 * head's scores. */
static int32_t emb_width(const sched_t *s, const seq_t *q)
{
    return q->embed == MODEL_POOL_RANK ? s->model->rank->n_scores : s->model->cfg.dim;
}

/* Whether prompt position p is the one a rank sequence's head reads: the
 * first token, or the last (rank_head_t.last). */
static bool rank_row(const sched_t *s, const seq_t *q, int32_t p)
{
    return s->model->rank->last ? p == q->n_tokens - 1 : p == 0;
}

int sched_submit_embed(sched_t *s, const sched_embed_req_t *r, char *err, size_t errlen)
{
    const int32_t ctx = s->max_positions, vocab = s->model->cfg.vocab, dim = s->model->cfg.dim;
    if (r->n_inputs < 1 || r->n_inputs > SCHED_MAX_CHOICES) {
        errbuf_set(err, errlen, "%d inputs: want 1..%d", r->n_inputs, SCHED_MAX_CHOICES);
        return SCHED_EINVAL;
    }
    for (int32_t i = 0; i < r->n_inputs; i++) {
        if (r->n_prompts[i] < 1) {
            errbuf_set(err, errlen, "input %d is empty", i);
            return SCHED_EINVAL;
        }
        if (r->n_prompts[i] > ctx) {
            char what[32];
            snprintf(what, sizeof what, "input %d", i);
            too_long(s, what, r->n_prompts[i], 0, 0, err, errlen);
            return SCHED_ETOO_LONG;
        }
        for (int32_t k = 0; k < r->n_prompts[i]; k++)
            if (r->prompts[i][k] < 0 || r->prompts[i][k] >= vocab) {
                errbuf_set(err, errlen, "input %d: token %d is out of the vocabulary (%d)", i,
                           r->prompts[i][k], vocab);
                return SCHED_EINVAL;
            }
    }
    if (r->pooling == MODEL_POOL_RANK && !s->model->rank) {
        errbuf_set(err, errlen, "this model cannot rank: it has no rank head (pooling_type 4 with cls tensors)");
        return SCHED_EINVAL;
    }
    if (find_seq(s, r->id)) {
        errbuf_set(err, errlen, "request %llu is already running", (unsigned long long)r->id);
        return SCHED_EDUPLICATE;
    }
    for (int32_t i = 0; i < r->n_inputs; i++) {
        seq_t *q = xcalloc(1, sizeof *q);
        q->id = r->id;
        q->index = i;
        q->priority = r->priority < 0 ? 0 : r->priority > 2 ? 2 : r->priority;
        q->state = SEQ_WAITING;
        q->arrival = s->n_arrivals++;
        q->deadline_us = r->deadline_us;
        q->idle_us = r->idle_us;
        q->top_logprobs = -1;
        q->n_prompt = r->n_prompts[i];
        for (int32_t k = 0; k < r->n_prompts[i]; k++)
            seq_push_token(q, r->prompts[i][k]);
        q->kv = kv_seq_new(s->pool);
        kv_seq_set_partition(q->kv, r->partition);
        q->embed = r->pooling == MODEL_POOL_LAST || r->pooling == MODEL_POOL_RANK ? r->pooling : MODEL_POOL_MEAN;
        q->emb_sum = xcalloc((size_t)dim, sizeof *q->emb_sum);
        q->emb_out = xcalloc((size_t)emb_width(s, q), sizeof *q->emb_out);
        vec_push(s->seqs, s->n_seqs, s->cap_seqs, q);
    }
    return SCHED_OK;
}

/* The end of an embedding sequence's prompt: its pooled vector, L2-normalised
 * (a zero vector stays zero), into q->emb_out; for a rank sequence the
 * head's scores over the one pooled state. */
static void embed_finish(const sched_t *s, seq_t *q)
{
    const int32_t dim = s->model->cfg.dim;
    if (q->embed == MODEL_POOL_RANK) {
        float *x = xmalloc((size_t)dim * sizeof *x);
        for (int32_t i = 0; i < dim; i++)
            x[i] = (float)q->emb_sum[i];
        rank_head_apply(s->model->rank, x, q->emb_out);
        free(x);
        return;
    }
    const double scale = q->embed == MODEL_POOL_MEAN ? 1.0 / q->n_prompt : 1.0;
    double ss = 0;
    for (int32_t i = 0; i < dim; i++) {
        double v = q->emb_sum[i] * scale;
        ss += v * v;
    }
    const double inv = ss > 0 ? 1.0 / sqrt(ss) : 0.0;
    for (int32_t i = 0; i < dim; i++)
        q->emb_out[i] = (float)(q->emb_sum[i] * scale * inv);
}

int32_t sched_abort_all(sched_t *s)
{
    int32_t n = s->n_seqs;
    while (s->n_seqs > 0)
        remove_seq_at(s, 0);
    return n;
}

int sched_cancel(sched_t *s, uint64_t id)
{
    int found = -1;
    for (int32_t i = 0; i < s->n_seqs; i++)
        if (s->seqs[i]->id == id) {
            s->seqs[i]->cancelled = true;
            found = 0;
        }
    return found;
}

/* Choice 0 of q's request has sampled a token, or is gone: q (a later
 * choice) may be admitted and will find the prompt's full blocks cached. */
static bool first_ready(const sched_t *s, const seq_t *q)
{
    for (int32_t i = 0; i < s->n_seqs; i++) {
        const seq_t *p = s->seqs[i];
        if (p->id == q->id && p->index == 0)
            return p->n_generated > p->n_resumed;
    }
    return true;
}

/* ---- the step ------------------------------------------------------------- */

/* Ends cancelled and expired sequences: their blocks go back now. */
static void reap(sched_t *s)
{
    int64_t now = 0;
    for (int32_t i = 0; i < s->n_seqs;) {
        seq_t *q = s->seqs[i];
        enum sched_finish fin = SCHED_FINISH_NONE;
        const char *msg = NULL;
        if (q->cancelled) {
            fin = SCHED_FINISH_CANCELLED;
        } else if (q->deadline_us) {
            if (!now)
                now = clock_now_us();
            if (now > q->deadline_us) {
                fin = SCHED_FINISH_ERROR;
                msg = "the request's deadline passed";
            }
        }
        if (fin == SCHED_FINISH_NONE) {
            i++;
            continue;
        }
        emit(s, q, NULL, 0, NULL, 0, NULL, fin, msg ? SCHED_EDEADLINE : SCHED_OK, msg);
        remove_seq_at(s, i);
    }
}

/* Admits waiting sequences in (priority, arrival) order while slots and KV
 * blocks allow; a waiting request of strictly higher priority may preempt a
 * running one when every slot is taken. */
static void admit(sched_t *s)
{
    for (;;) {
        seq_t *best = NULL;
        for (int32_t i = 0; i < s->n_seqs; i++) {
            seq_t *q = s->seqs[i];
            if (q->state != SEQ_WAITING)
                continue;
            if (q->wait_first) {
                if (!first_ready(s, q))
                    continue;
                q->wait_first = false;
            }
            if (!best || seq_before(q, best))
                best = q;
        }
        if (!best)
            return;
        if (n_running(s) >= s->cfg.max_seqs) {
            seq_t *v = pick_victim(s, best->priority, best, false, true);
            if (!v)
                return;
            preempt(s, v);
        }
        /* Attach cached prefix blocks, then reserve the rest of the prompt
         * (and resumed tokens): admission needs room for the whole recompute
         * so a new sequence never starts only to be preempted mid-prompt. */
        /* embeddings pool every prompt position: nothing from the cache */
        kv_pool_stats_t ps0, ps1;
        kv_pool_stats(s->pool, &ps0);
        int64_t t_match = clock_now_us();
        int32_t hit = best->embed ? 0 : kv_pool_match_prefix(s->pool, best->tokens, best->n_tokens, best->kv);
        kv_pool_stats(s->pool, &ps1);
        if (ps1.n_tier_hit_tokens > ps0.n_tier_hit_tokens || ps1.n_warm_hit_tokens > ps0.n_warm_hit_tokens)
            log_info("prefix of %d tokens: %llu from RAM (%llu warmed at start), %llu loaded from the disk tier in "
                     "%.1f ms", best->n_tokens,
                     (unsigned long long)(ps1.n_prefix_hit_tokens - ps0.n_prefix_hit_tokens),
                     (unsigned long long)(ps1.n_warm_hit_tokens - ps0.n_warm_hit_tokens),
                     (unsigned long long)(ps1.n_tier_hit_tokens - ps0.n_tier_hit_tokens),
                     (double)(clock_now_us() - t_match) / 1000.0);
        if (hit < 0)
            hit = 0;
        int32_t need = best->n_tokens - hit;
        if (s->kv_window > 0) {
            /* windowed: the cached blocks behind the window go at once; when
             * the pool holds a full chunk's window, the prompt's blocks are
             * taken chunk by chunk as older ones are released (build_batch),
             * so admission counts the first chunk. (A smaller pool keeps the
             * whole-prompt reservation: a lone sequence then always fits.) */
            kv_seq_drop_before(best->kv, hit - s->kv_window + 1);
            if (s->kv_window_fits && need > s->cfg.max_batch_tokens)
                need = s->cfg.max_batch_tokens;
        }
        /* Watermark: leave every running sequence a block to grow into, or
         * the admission would only cause preemptions a few steps later. */
        int32_t bs = s->cfg.block_size;
        int32_t need_blocks = (hit + need + bs - 1) / bs - hit / bs;
        int32_t running = n_running(s);
        bool fits = running == 0 || kv_pool_n_available(s->pool) - need_blocks >= running;
        if (!fits || kv_seq_reserve(best->kv, need) != KV_POOL_OK) {
            seq_t *v = pick_victim(s, best->priority, best, false, true);
            kv_seq_release(best->kv);
            if (!v)
                return; /* wait for blocks to come back */
            preempt(s, v);
            continue;
        }
        best->state = SEQ_RUNNING;
        best->admitted = s->n_admissions++;
        best->n_computed = hit;
        if (best->embed) /* (re)admitted: its sum starts again with position 0 */
            memset(best->emb_sum, 0, (size_t)s->model->cfg.dim * sizeof *best->emb_sum);
        if (!best->first_admission_done) {
            /* usage counts prompt tokens: a resumed request's hit can reach
             * into its resumed tokens, which are not prompt */
            best->n_cached = hit < best->n_prompt ? hit : best->n_prompt;
            best->first_admission_done = true;
        }
    }
}

/* Appends a detokenizer delta to q's text for this step. */
static void out_append(seq_t *q, const char *d, size_t n)
{
    if (!n)
        return;
    if (q->out_len + n > q->out_cap) {
        q->out_cap = (q->out_len + n) * 2 + 64;
        q->out_text = xrealloc(q->out_text, q->out_cap);
    }
    memcpy(q->out_text + q->out_len, d, n);
    q->out_len += n;
}

/* Constrained draw: from the grammar's mask, banning and redrawing tokens
 * the length budget (tokens left, this one included) cannot afford; after
 * GMATCH_REDRAWS bans the mask is recomputed with the budget applied to
 * every token. When the budget is tight (at most one byte of slack over the
 * fewest bytes that complete the document) that budget mask is used from
 * the first draw, since most grammar tokens would not fit. Either way the
 * token is drawn from the fitting ones (greedy: the best fitting token).
 * Returns -1 (q->draw_error set) when no token is allowed. */
static int32_t grammar_draw(seq_t *q, const float *row, int64_t budget, sampler_logprobs_t *lp)
{
    int32_t n_ok = gmatch_mask(q->gm, q->gmask);
    if (n_ok == 0) {
        q->draw_error = "the grammar allows no token of this vocabulary here";
        return -1;
    }
    /* close to the limit most draws would not fit: apply the budget at once */
    if (budget - 2 <= gmatch_cost(q->gm) + 1) {
        int32_t n_fit = gmatch_mask_budget(q->gm, budget, q->gmask);
        if (n_fit > 0)
            n_ok = n_fit;
        else
            gmatch_mask(q->gm, q->gmask);
    }
    int32_t t = sampler_sample_masked(q->sampler, row, q->gmask, lp);
    for (int attempt = 1; !gmatch_fits(q->gm, t, budget); attempt++) {
        q->gmask[t >> 6] &= ~(1ull << (t & 63));
        n_ok--;
        if (attempt > GMATCH_REDRAWS) /* the budget mask holds only fitting tokens */
            break;
        if (attempt == GMATCH_REDRAWS || n_ok == 0) {
            attempt = GMATCH_REDRAWS;
            n_ok = gmatch_mask_budget(q->gm, budget, q->gmask);
            if (n_ok == 0) { /* nothing fits: keep to the grammar, end by length */
                n_ok = gmatch_mask(q->gm, q->gmask);
                t = sampler_redraw_masked(q->sampler, row, q->gmask, lp, attempt);
                (void)gmatch_fits(q->gm, t, INT64_MAX);
                break;
            }
        }
        t = sampler_redraw_masked(q->sampler, row, q->gmask, lp, attempt);
    }
    return t;
}

/* Draws the next token of q from its logits row into q->out_token (and
 * q->out_lp). Touches only q and its sampler, so the sequences of a step
 * are drawn in parallel (sched_step). max_positions: the sequence limit. */
static void sample_draw(seq_t *q, const float *row, int32_t max_positions)
{
    sampler_logprobs_t lp;
    sampler_logprobs_t *lpp = q->top_logprobs >= 0 ? &lp : NULL;
    int32_t t;
    if (q->gm) {
        int64_t budget = (int64_t)max_positions - q->n_tokens;
        if (q->max_tokens > 0 && q->max_tokens - q->n_generated < budget)
            budget = q->max_tokens - q->n_generated;
        t = grammar_draw(q, row, budget, lpp);
        if (t < 0) {
            q->out_token = 0;
            return;
        }
    } else {
        t = sampler_sample(q->sampler, row, lpp);
    }
    q->out_token = t;
    if (q->top_logprobs >= 0) {
        q->out_lp.token = t;
        q->out_lp.logprob = lp.logprob;
        int32_t n = lp.n_top < q->top_logprobs ? lp.n_top : q->top_logprobs;
        q->out_lp.n_top = n;
        for (int32_t i = 0; i < n; i++) {
            q->out_lp.top[i].token = lp.top_token[i];
            q->out_lp.top[i].logprob = lp.top_logprob[i];
        }
    }
}

/* After sample_draw: takes q->out_token into the sequence and runs the stop
 * checks in OpenAI's order: end-of-generation token, stop string, length. */
static void sample_finish(sched_t *s, seq_t *q)
{
    const int32_t t = q->out_token;
    q->out_valid = true;
    if (q->draw_error) {
        q->out_valid = false;
        q->finish = SCHED_FINISH_ERROR;
        return;
    }
    sampler_accept(q->sampler, t);
    seq_push_token(q, t);
    q->n_generated++;
    s->st.generated_tokens++;
    q->out_toks[q->n_out] = t;
    if (q->out_lps)
        q->out_lps[q->n_out] = q->out_lp;
    q->n_out++;

    const char *d;
    size_t dl;
    bool eog = tokenizer_is_eog(s->tok, t);
    for (int32_t i = 0; !eog && i < q->n_stop_ids; i++)
        eog = q->stop_ids[i] == t;
    if (q->gm) {
        int rc = gmatch_accept(q->gm, t);
        assert(rc == 0 || !tokenizer_is_eog(s->tok, t));
        (void)rc;
    }
    if (eog && (!q->ignore_eos || q->gm)) { /* a grammar's end is the end */
        detok_finish(q->detok, DETOK_FINISH_EOS, &d, &dl);
        out_append(q, d, dl);
        q->finish = SCHED_FINISH_STOP;
        return;
    }
    size_t plen = 0;
    const char *piece = tokenizer_token_piece(s->tok, t, false, &plen);
    int rc = detok_push(q->detok, piece, plen, &d, &dl);
    out_append(q, d, dl);
    if (rc == DETOK_STOP || (q->gm && gmatch_done(q->gm))) {
        if (rc != DETOK_STOP) { /* the document is complete: nothing may follow */
            detok_finish(q->detok, DETOK_FINISH_EOS, &d, &dl);
            out_append(q, d, dl);
        }
        q->finish = SCHED_FINISH_STOP;
        return;
    }
    bool at_max = q->max_tokens > 0 && q->n_generated >= q->max_tokens;
    bool ctx_full = q->n_tokens >= s->max_positions;
    if (at_max || ctx_full) {
        detok_finish(q->detok, DETOK_FINISH_LENGTH, &d, &dl);
        out_append(q, d, dl);
        q->finish = detok_finish_reason(q->detok) == DETOK_FINISH_STOP ? SCHED_FINISH_STOP
                                                                       : SCHED_FINISH_LENGTH;
    }
}

/* q's tier for prefill order: its priority, better by one for every
 * prefill_age_steps steps it was passed over for a better tier (0 at best). */
static int32_t aged_priority(const sched_t *s, const seq_t *q)
{
    int32_t p = q->priority - q->n_passed / s->cfg.prefill_age_steps;
    return p > 0 ? p : 0;
}

/* The next sequence to give rows to: pass 0 takes decode rows (one pending
 * token after a sampled one), pass 1 prefill chunks. Decode rows go best
 * priority first; prefill chunks best aged priority first, then arrival
 * (FIFO within a tier: docs/BATCHING.md says why not shortest first). */
static seq_t *next_for_batch(sched_t *s, int pass)
{
    seq_t *pick = NULL;
    int32_t pick_p = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        seq_t *q = s->seqs[i];
        if (q->state != SEQ_RUNNING || q->in_batch)
            continue;
        bool is_decode = q->n_tokens - q->n_computed == 1 && q->n_generated > 0;
        if ((pass == 0) != is_decode)
            continue;
        if (pass == 0) {
            if (!pick || seq_before(q, pick))
                pick = q;
            continue;
        }
        int32_t p = aged_priority(s, q);
        if (!pick || p < pick_p || (p == pick_p && q->arrival < pick->arrival)) {
            pick = q;
            pick_p = p;
        }
    }
    return pick;
}

/* The step's time target once its decode rows are packed (s->rows): 0 when
 * nothing decodes (a prompt alone prefills at full speed) or the budget is
 * off; with auto, step_budget_factor x the model's decode-only step, 0 while
 * the model is not ready (step_cost_chunk then gives the floor chunk). */
static double step_target_us(const sched_t *s)
{
    if (s->rows.n_decode == 0 || s->cfg.step_budget_ms == 0)
        return 0;
    if (s->cfg.step_budget_ms > 0)
        return s->cfg.step_budget_ms * 1000.0;
    if (!step_cost_ready(&s->cost))
        return 1; /* any positive target: step_cost_chunk gives the floor */
    step_cost_rows_t dec = {s->rows.n_decode, 0, s->rows.n_attn};
    return s->cfg.step_budget_factor * step_cost_predict(&s->cost, &dec);
}

/* ---- speculative decoding (spec.h) ----------------------------------------- */

void sched_set_drafter(sched_t *s, sched_drafter_fn fn, void *ud)
{
    s->drafter = fn;
    s->drafter_ud = ud;
}

int sched_draft_check(const model_t *target, const tokenizer_t *ttok, const model_t *draft,
                      const tokenizer_t *dtok, char *err, size_t errlen)
{
    if (target->cfg.vocab != draft->cfg.vocab || tokenizer_n_vocab(ttok) != tokenizer_n_vocab(dtok)) {
        errbuf_set(err, errlen, "the draft model has %d tokens, the model %d: not the same vocabulary",
                   draft->cfg.vocab, target->cfg.vocab);
        return -1;
    }
    for (int32_t t = 0; t < tokenizer_n_vocab(ttok); t++) {
        size_t na = 0, nb = 0;
        const char *a = tokenizer_token_piece(ttok, t, true, &na);
        const char *b = tokenizer_token_piece(dtok, t, true, &nb);
        if (na != nb || (na && memcmp(a, b, na) != 0)) {
            errbuf_set(err, errlen, "the draft model's token %d differs from the model's: not the same vocabulary",
                       t);
            return -1;
        }
    }
    return 0;
}

/* The index of the largest logit (ties: the lowest id). */
static int32_t argmax(const float *row, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (row[i] > row[best])
            best = i;
    return best;
}

/* SPEC_DRAFT: the draft model proposes, greedily, up to q->n_draft tokens for
 * each of the n sequences in d (their wanted lengths): round 0 feeds each the
 * tokens its draft KV lacks (catch-up, at most the step's row budget in all;
 * a sequence whose catch-up does not fit drafts nothing this step), round j
 * feeds every sequence still drafting its j-th draft. Each round is one
 * batched pass over the sequences. Only real tokens are recorded in the
 * draft KV; spec_verify adds the drafts that were accepted (q->d_fed of them
 * were fed, so their K/V is there). */
static void draft_run(sched_t *s, seq_t **d, int32_t n)
{
    const int32_t vocab = s->model->cfg.vocab, budget = s->cfg.max_batch_tokens;
    int32_t rows = 0, nb = 0;
    for (int32_t i = 0; i < n; i++) {
        seq_t *q = d[i];
        int32_t catchup = q->n_tokens - q->d_computed;
        q->d_len = q->n_draft;
        q->n_draft = 0;
        q->d_fed = 0;
        /* a long catch-up (a new prompt) goes in chunks over several steps,
         * without drafts until it is complete */
        int32_t chunk = catchup < budget - rows ? catchup : budget - rows;
        if (chunk < catchup)
            q->d_len = 0;
        if (chunk < 1 || kv_seq_reserve(q->dkv, chunk + (q->d_len > 0 ? q->d_len - 1 : 0)) != KV_POOL_OK)
            continue;
        int rc = kv_seq_append(q->dkv, q->tokens + q->d_computed, chunk);
        assert(rc == KV_POOL_OK);
        (void)rc;
        for (int32_t j = 0; j < chunk; j++) {
            s->d_token[rows] = q->tokens[q->d_computed + j];
            s->d_pos[rows] = q->d_computed + j;
            s->d_seq[rows] = nb;
            s->d_want[rows] = q->d_len > 0 && j == chunk - 1;
            rows++;
        }
        q->d_computed += chunk;
        s->d_seqs[nb++] = q;
    }
    while (nb > 0) {
        for (int32_t b = 0; b < nb; b++) {
            s->d_tables[b] = kv_seq_block_table(s->d_seqs[b]->dkv);
            s->d_nblocks[b] = kv_seq_n_blocks(s->d_seqs[b]->dkv);
        }
        fwd_batch_t fb = {.n_rows = rows, .token = s->d_token, .pos = s->d_pos, .seq = s->d_seq,
                          .want_logits = s->d_want, .n_seq = nb, .block_tables = s->d_tables,
                          .n_blocks = s->d_nblocks};
        if (forward_run(s->dfwd, &fb, kv_pool_store(s->dpool), s->dlogits) != 0) {
            const char *msg = forward_error(s->dfwd);
            log_warn("draft model pass failed: %s; no drafts this step", msg ? msg : "?");
            for (int32_t b = 0; b < nb; b++)
                s->d_seqs[b]->n_draft = 0;
            return;
        }
        /* one logits row per sequence, in order; then the next round's rows */
        int32_t nb2 = 0, lrow = 0;
        rows = 0;
        for (int32_t b = 0; b < nb; b++) {
            seq_t *q = s->d_seqs[b];
            if (q->d_len == 0)
                continue; /* catch-up only */
            int32_t t = argmax(s->dlogits + (size_t)lrow++ * vocab, vocab);
            q->draft[q->n_draft++] = t;
            if (q->n_draft >= q->d_len || tokenizer_is_eog(s->tok, t))
                continue;
            s->d_token[rows] = t; /* fed at the draft's position: its K/V for the next round */
            s->d_pos[rows] = q->n_tokens - 1 + q->n_draft;
            s->d_seq[rows] = nb2;
            s->d_want[rows] = 1;
            q->d_fed++;
            rows++;
            s->d_seqs[nb2++] = q;
        }
        nb = nb2;
    }
}

static bool is_decode_ready(const seq_t *q)
{
    return q->state == SEQ_RUNNING && q->n_tokens - q->n_computed == 1 && q->n_generated > 0;
}

/* Cuts q's draft at a token outside the vocabulary, after an end token
 * (nothing follows it), and where the grammar (if any) refuses. */
static void draft_filter(const sched_t *s, seq_t *q)
{
    int32_t n = q->n_draft;
    for (int32_t j = 0; j < n; j++)
        if (q->draft[j] < 0 || q->draft[j] >= s->model->cfg.vocab || tokenizer_is_eog(s->tok, q->draft[j])) {
            n = q->draft[j] < 0 || q->draft[j] >= s->model->cfg.vocab ? j : j + 1;
            break;
        }
    if (q->gm && n > 0)
        n = gmatch_prefix_allowed(q->gm, q->draft, n);
    q->n_draft = n > 0 ? n : 0;
}

/* Gives decoding sequences their drafts for this step (q->n_draft), best
 * priority first, while the step's rows — one per decoding sequence, every
 * pending prefill token, the drafts — stay within spec_max_rows: above that
 * the step is compute-bound and drafts would cost their share of its time. */
static void spec_plan(sched_t *s)
{
    int32_t n_dec = 0, n_other = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        seq_t *q = s->seqs[i];
        q->n_draft = 0;
        if (q->state != SEQ_RUNNING)
            continue;
        if (is_decode_ready(q))
            s->b_vdraw[n_dec++] = q; /* scratch: the candidates */
        else
            n_other += q->n_tokens - q->n_computed;
    }
    if ((s->cfg.spec == SPEC_OFF && !s->drafter) || s->cfg.spec_max_draft <= 0)
        return;
    int32_t limit = s->cfg.spec_max_rows < s->cfg.max_batch_tokens ? s->cfg.spec_max_rows
                                                                   : s->cfg.max_batch_tokens;
    int32_t room = limit - n_dec - n_other;
    /* priority order (a few sequences at most get here: room is small) */
    for (int32_t i = 1; i < n_dec; i++)
        for (int32_t j = i; j > 0 && seq_before(s->b_vdraw[j], s->b_vdraw[j - 1]); j--) {
            seq_t *t = s->b_vdraw[j];
            s->b_vdraw[j] = s->b_vdraw[j - 1];
            s->b_vdraw[j - 1] = t;
        }
    int32_t n_model = 0; /* sequences for the draft model, compacted at the front of b_vdraw */
    for (int32_t i = 0; i < n_dec && room > 0; i++) {
        seq_t *q = s->b_vdraw[i];
        /* logprobs travel one token per EVENT (worker.c): such requests
         * decode a token per step */
        if (q->no_spec || q->embed || q->top_logprobs >= 0)
            continue;
        /* the last draft's position stays inside the context, and every
         * draft plus the bonus token within max_tokens */
        int32_t lim = s->cfg.spec_max_draft < room ? s->cfg.spec_max_draft : room;
        if (lim > s->max_positions - q->n_tokens - 1)
            lim = s->max_positions - q->n_tokens - 1;
        if (q->max_tokens > 0 && lim > q->max_tokens - q->n_generated - 1)
            lim = q->max_tokens - q->n_generated - 1;
        if (lim <= 0)
            continue;
        int32_t k = s->cfg.spec_fixed ? lim : spec_seq_len(&q->spec, lim);
        if (k <= 0)
            continue;
        if (!s->drafter && s->dpool) { /* the draft model runs for all of them below */
            q->n_draft = k;
            s->b_vdraw[n_model++] = q; /* i >= n_model: the list is consumed in order */
            room -= k;
            continue;
        }
        int32_t n = s->drafter ? s->drafter(s->drafter_ud, q->id, q->index, q->tokens, q->n_tokens, k,
                                            q->draft)
                               : spec_ngram_draft(q->tokens, q->n_tokens, k, q->draft);
        q->n_draft = n > k ? k : n;
        draft_filter(s, q);
        room -= q->n_draft;
    }
    if (n_model > 0) {
        draft_run(s, s->b_vdraw, n_model);
        for (int32_t i = 0; i < n_model; i++)
            draft_filter(s, s->b_vdraw[i]);
    }
}

/* Draws q's tokens from its 1 + n_draft logits rows (rows: the first): row i
 * gives position P+1+i, drawn exactly as without speculation; the run goes
 * on while the draw equals the draft fed at that position. Records the
 * accepted drafts' positions in the KV (the rest are overwritten later). */
static void spec_verify(sched_t *s, seq_t *q, const float *rows)
{
    const size_t vocab = (size_t)s->model->cfg.vocab;
    const int32_t nd = q->n_draft;
    int32_t m = 0; /* drafts equal to the draws, in a row */
    q->out_len = 0;
    q->n_out = 0;
    for (int32_t i = 0; i <= nd; i++) {
        sample_draw(q, rows + (size_t)i * vocab, s->max_positions);
        sample_finish(s, q);
        if (!q->out_valid || q->finish != SCHED_FINISH_NONE)
            break;
        if (i == nd || q->out_token != q->draft[i])
            break;
        m++;
    }
    if (m < nd && q->n_out == m + 1 && q->out_valid && q->out_token == q->draft[m])
        m++; /* matched, but the sequence ended on it */
    s->st.spec_drafts++;
    s->st.spec_draft_tokens += (uint64_t)nd;
    s->st.spec_accepted_tokens += (uint64_t)m;
    for (int32_t i = 0; i < m; i++)
        s->st.spec_accepted_per_pos[i]++;
    spec_seq_update(&q->spec, nd, m);
    if (q->finish != SCHED_FINISH_NONE)
        return; /* retired after the report */
    /* the draft model's K/V of the accepted drafts it was fed is there too */
    if (q->dkv && q->d_computed == q->n_computed) {
        int32_t a = m < q->d_fed ? m : q->d_fed;
        int drc = kv_seq_append(q->dkv, q->tokens + q->d_computed, a);
        assert(drc == KV_POOL_OK);
        (void)drc;
        q->d_computed += a;
    }
    /* positions P+1..P+m hold the K/V of tokens the sequence now has */
    int rc = kv_seq_append(q->kv, q->tokens + q->n_computed, m);
    assert(rc == KV_POOL_OK);
    (void)rc;
    q->n_computed += m;
    assert(q->n_tokens - q->n_computed == 1);
    kv_pool_commit_full_blocks(s->pool, q->kv);
    kv_trim(s, q);
}

/* A prefill chunk of q from n_computed, cut so it never ends inside an
 * image (whose rows attend to each other both ways, so all of them not yet
 * computed go in one batch): ends before the image when the chunk starts
 * before it, else takes the rest of the image if room allows, else 0. */
static int32_t image_chunk(const seq_t *q, int32_t chunk, int32_t room)
{
    const int32_t start = q->n_computed, end = start + chunk;
    for (int32_t i = 0; i < q->n_imgs; i++) {
        const int32_t p = q->imgs[i].pos, e = p + q->imgs[i].n_tok;
        if (p < end && e > end)
            return p > start ? p - start : e - start <= room ? e - start : 0;
    }
    return chunk;
}

/* Row `row` of the batch at position p of q: its image input and the end
 * of its image's rows, or none. */
static void image_row(sched_t *s, const seq_t *q, int32_t p, int32_t row)
{
    s->b_embd[row] = NULL;
    s->b_att_end[row] = 0;
    for (int32_t i = 0; i < q->n_imgs; i++) {
        const sched_image_t *im = &q->imgs[i];
        if (p >= im->pos && p < im->pos + im->n_tok) {
            s->b_embd[row] = im->embd + (size_t)(p - im->pos) * (size_t)s->model->cfg.dim;
            s->b_att_end[row] = im->pos + im->n_tok;
            s->n_img_rows++;
        }
    }
}

/* Packs the step's batch; returns its row count. Preemption while packing
 * can take a sequence that is already in the batch, so packing restarts
 * from scratch whenever it preempts (it preempts at most n_seqs times). */
static int32_t build_batch(sched_t *s, int32_t *n_bseq_out)
{
    const int32_t budget = s->cfg.max_batch_tokens;
    spec_plan(s); /* once: a preempted sequence loses its drafts (preempt) */
restart:
    for (int32_t i = 0; i < s->n_seqs; i++)
        s->seqs[i]->in_batch = false;
    int32_t n_rows = 0, n_bseq = 0;
    s->n_img_rows = 0;
    s->rows = (step_cost_rows_t){0, 0, 0};
    s->target_us = 0;
    int32_t best_prefill = INT32_MAX; /* best priority among the packed prefill chunks */
    for (int pass = 0; pass < 2; pass++) {
        seq_t *q;
        if (pass == 1)
            s->target_us = step_target_us(s);
        while (n_rows < budget && n_bseq < s->cfg.max_seqs && (q = next_for_batch(s, pass))) {
            int32_t pending = q->n_tokens - q->n_computed;
            int32_t chunk = pending < budget - n_rows ? pending : budget - n_rows;
            if (pass == 1 && s->target_us > 0) {
                chunk = step_cost_chunk(&s->cost, &s->rows, q->n_computed, chunk, s->cfg.step_min_chunk,
                                        s->target_us);
                if (chunk == 0)
                    break; /* the step is full by time: later chunks would not fit either */
            }
            if (q->n_imgs > 0 && (chunk = image_chunk(q, chunk, budget - n_rows)) == 0) {
                q->in_batch = true; /* its next image does not fit this step's rows */
                continue;
            }
            /* drafts take blocks only when free ones are there: never preempt for them */
            int32_t nd = q->n_draft;
            if (n_rows + chunk + nd > budget) /* keep within the budget */
                nd = budget - n_rows - chunk;
            if (nd > 0 && kv_seq_capacity(q->kv) - q->n_computed < chunk + nd &&
                kv_seq_reserve(q->kv, chunk + nd) != KV_POOL_OK)
                nd = 0;
            q->n_draft = nd > 0 ? nd : 0;
            if (kv_seq_capacity(q->kv) - q->n_computed < chunk) {
                uint64_t before = s->st.preemptions;
                bool ok = reserve_or_preempt(s, q, chunk);
                if (s->st.preemptions != before)
                    goto restart;
                if (!ok) {
                    q->in_batch = true; /* skip it this step */
                    continue;
                }
            }
            q->in_batch = true;
            int32_t b = n_bseq++;
            s->b_seqs[b] = q;
            s->lrows->by_seq[b] = &q->lora;
            s->b_chunk[b] = chunk;
            s->b_ndraft[b] = q->n_draft;
            if (pass == 0) {
                s->rows.n_decode += chunk + q->n_draft;
            } else {
                s->rows.n_prefill += chunk;
                best_prefill = q->priority < best_prefill ? q->priority : best_prefill;
            }
            s->rows.n_attn += step_cost_chunk_attn(q->n_computed, chunk + q->n_draft);
            for (int32_t k = 0; k < chunk; k++) {
                int32_t p = q->n_computed + k;
                s->b_token[n_rows] = q->tokens[p];
                s->b_pos[n_rows] = p;
                s->b_seq[n_rows] = b;
                bool last = p == q->n_tokens - 1;
                s->b_want[n_rows] = (uint8_t)(last && !q->embed);
                s->b_hid[n_rows] = (uint8_t)(q->embed == MODEL_POOL_MEAN || (q->embed == MODEL_POOL_LAST && last) ||
                                             (q->embed == MODEL_POOL_RANK && rank_row(s, q, p)));
                image_row(s, q, p, n_rows);
                n_rows++;
            }
            for (int32_t k = 0; k < q->n_draft; k++) { /* drafts at P+1.., each with logits */
                s->b_token[n_rows] = q->draft[k];
                s->b_pos[n_rows] = q->n_computed + chunk + k;
                s->b_seq[n_rows] = b;
                s->b_want[n_rows] = 1;
                s->b_hid[n_rows] = 0;
                s->b_embd[n_rows] = NULL;
                s->b_att_end[n_rows] = 0;
                n_rows++;
            }
        }
    }
    /* aging: a prefill that got no rows while a better tier's did */
    for (int32_t i = 0; i < s->n_seqs; i++) {
        seq_t *q = s->seqs[i];
        if (q->state == SEQ_RUNNING && !q->in_batch && !is_decode_ready(q) && best_prefill < q->priority)
            q->n_passed++;
    }
    *n_bseq_out = n_bseq;
    return n_rows;
}

bool sched_prefault_step(sched_t *s, size_t max_bytes)
{
    return kv_pool_prefault_step(s->pool, max_bytes) || (s->dpool && kv_pool_prefault_step(s->dpool, max_bytes));
}

int sched_step(sched_t *s)
{
    reap(s);
    admit(s);

    int32_t n_bseq = 0;
    int32_t n_rows = build_batch(s, &n_bseq);
    if (n_rows == 0)
        return 0;
    const int64_t t_start = clock_now_us();
    const step_cost_rows_t rows = s->rows;
    const double target_us = s->target_us;
    for (int32_t b = 0; b < n_bseq; b++) {
        const seq_t *q = s->b_seqs[b];
        s->h_ids[b] = q->id;
        s->h_rows[b] = is_decode_ready(q) ? 0 : s->b_chunk[b];
    }
    for (int32_t b = 0; b < n_bseq; b++) {
        seq_t *q = s->b_seqs[b];
        /* positions [n_computed, n_computed + chunk) are written by this pass */
        int rc = kv_seq_append(q->kv, q->tokens + q->n_computed, s->b_chunk[b]);
        assert(rc == KV_POOL_OK);
        (void)rc;
        s->b_tables[b] = kv_seq_block_table(q->kv);
        s->b_nblocks[b] = kv_seq_n_blocks(q->kv);
    }
    fwd_batch_t fb = {
        .n_rows = n_rows,
        .token = s->b_token,
        .pos = s->b_pos,
        .seq = s->b_seq,
        .want_logits = s->b_want,
        .n_seq = n_bseq,
        .block_tables = s->b_tables,
        .n_blocks = s->b_nblocks,
    };
    lora_rows_fill(s->lrows, &fb);
    for (int32_t r = 0; r < n_rows; r++)
        if (s->b_hid[r]) {
            fb.want_hidden = s->b_hid;
            fb.hidden = s->hidden;
            break;
        }
    if (s->n_img_rows > 0) {
        fb.embd = s->b_embd;
        fb.att_end = s->b_att_end;
    }
    if (forward_run(s->fwd, &fb, kv_pool_store(s->pool), s->logits) != 0) {
        const char *msg = forward_error(s->fwd);
        log_error("forward pass failed: %s", msg ? msg : "unknown error");
        while (s->n_seqs > 0) {
            emit(s, s->seqs[0], NULL, 0, NULL, 0, NULL, SCHED_FINISH_ERROR, SCHED_EENGINE,
                 "engine error");
            remove_seq_at(s, 0);
        }
        return -1;
    }
    s->st.steps++;

    /* Logits rows come in batch order, one per sequence whose chunk ended on
     * its last pending token (rows of one sequence are contiguous). */
    int32_t n_draw = 0, n_vdraw = 0, lrow = 0; /* lrow: next logits row */
    const int32_t dim = s->model->cfg.dim;
    int32_t row = 0, i_hid = 0; /* this sequence's first row; next hidden-state row */
    const int64_t t_end = clock_now_us();
    for (int32_t b = 0; b < n_bseq; b++) {
        seq_t *q = s->b_seqs[b];
        int32_t end = q->n_computed + s->b_chunk[b];
        if (q->idle_us && q->deadline_us)
            q->deadline_us = t_end + q->idle_us; /* progress: a chunk or a token of its own */
        /* embeddings: sum (mean) or keep (last) the hidden states of its rows */
        for (int32_t k = 0; k < s->b_chunk[b]; k++, row++) {
            if (!s->b_hid[row])
                continue;
            assert(q->embed);
            const float *h = s->hidden + (size_t)i_hid++ * dim;
            for (int32_t i = 0; i < dim; i++)
                q->emb_sum[i] += h[i];
        }
        row += s->b_ndraft[b];
        if (q->n_computed < q->n_prompt) {
            int32_t pe = end < q->n_prompt ? end : q->n_prompt;
            s->st.prompt_tokens += (uint64_t)(pe - q->n_computed);
        }
        q->n_computed = end;
        if (end == q->n_tokens)
            q->n_passed = 0; /* prompt computed: aging starts again at the next prefill */
        kv_pool_commit_full_blocks(s->pool, q->kv);
        kv_trim(s, q);
        if (end == q->n_tokens && q->embed) {
            embed_finish(s, q);
            sched_event_t ev = {
                .id = q->id,
                .index = q->index,
                .text = "",
                .finish = SCHED_FINISH_STOP,
                .n_prompt = q->n_prompt,
                .embedding = q->emb_out,
                .n_embedding = emb_width(s, q),
            };
            if (s->on_event)
                s->on_event(s->ud, &ev);
            q->finish = SCHED_FINISH_STOP; /* retired below */
        } else if (end == q->n_tokens && s->b_ndraft[b] > 0) {
            s->b_vdraw[n_vdraw] = q;
            s->b_vrow[n_vdraw++] = lrow;
            lrow += 1 + s->b_ndraft[b];
        } else if (end == q->n_tokens) {
            s->b_draw[n_draw] = q;
            s->b_drow[n_draw++] = lrow++;
        }
    }
    /* Drawing is per sequence (its own sampler and RNG), ~30-60 us per row at
     * a 32k vocabulary: split over the threads instead of leaving the other
     * cores idle; the results do not depend on the split. */
    const size_t vocab = (size_t)s->model->cfg.vocab;
    const int n_par = n_draw >= 4 ? s->cfg.n_threads : 1;
    (void)n_par; /* unused without OpenMP */
#pragma omp parallel for num_threads(n_par) schedule(dynamic, 1)
    for (int32_t i = 0; i < n_draw; i++)
        sample_draw(s->b_draw[i], s->logits + (size_t)s->b_drow[i] * vocab, s->max_positions);
    for (int32_t i = 0; i < n_draw; i++) {
        s->b_draw[i]->out_len = 0;
        s->b_draw[i]->n_out = 0;
        sample_finish(s, s->b_draw[i]);
    }
    /* sequences with drafts: a run of draws each (few of them: spec_max_rows) */
    for (int32_t i = 0; i < n_vdraw; i++)
        spec_verify(s, s->b_vdraw[i], s->logits + (size_t)s->b_vrow[i] * vocab);

    /* Report, then retire finished sequences (their full blocks stay cached). */
    for (int32_t i = 0; i < s->n_seqs;) {
        seq_t *q = s->seqs[i];
        if (q->out_valid) {
            q->out_valid = false;
            emit(s, q, q->out_text, q->out_len, q->out_toks, q->n_out,
                 q->top_logprobs >= 0 ? q->out_lps : NULL, q->finish, SCHED_OK, NULL);
        } else if (q->draw_error && q->finish == SCHED_FINISH_ERROR) {
            emit(s, q, NULL, 0, NULL, 0, NULL, q->finish, SCHED_EENGINE, q->draw_error);
        }
        if (q->finish != SCHED_FINISH_NONE) {
            remove_seq_at(s, i);
            continue;
        }
        i++;
    }

    /* learn what this step cost (the events are out: that is what the
     * streams waited for) */
    sched_step_info_t info = {
        .n_decode = rows.n_decode,
        .n_prefill = rows.n_prefill,
        .n_attn = rows.n_attn,
        .target_us = target_us,
        .n_seq = n_bseq,
        .ids = s->h_ids,
        .n_rows = s->h_rows,
        .measured_us = (double)(clock_now_us() - t_start),
    };
    double t_us = s->step_hook ? s->step_hook(s->step_hook_ud, &info) : info.measured_us;
    step_cost_add(&s->cost, &rows, t_us);
    return n_rows;
}

void sched_set_step_hook(sched_t *s, sched_step_fn fn, void *ud)
{
    s->step_hook = fn;
    s->step_hook_ud = ud;
}
