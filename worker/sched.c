/* sched.c — continuous-batching scheduler (see sched.h for the step and the
 * sequence state machine). */
#include "worker/sched_int.h"

#include <assert.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/errbuf.h"
#include "common/log.h"
#include "common/prefix_key.h"
#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"

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
    c->step_min_chunk = 8;
    c->prefill_age_steps = 32;
    c->prefill_max_stops = 2;
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

static seq_t *find_seq(const sched_t *s, uint64_t id)
{
    for (int32_t i = 0; i < s->n_seqs; i++)
        if (s->seqs[i]->id == id)
            return s->seqs[i];
    return NULL;
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

/* The limits of c are in range (the rest is checked where it is used). */
static bool config_valid(const sched_config_t *c)
{
    return c->max_seqs >= 1 && c->max_seqs <= 4096 && c->max_batch_tokens >= 1 && c->max_batch_tokens <= 65536 &&
           c->block_size >= 1 && c->block_size <= 4096 && c->n_threads >= 1 &&
           (kv_type_size(c->kv_type) != 0 || c->kv_type == KV_TYPE_AUTO || c->kv_type == KV_TYPE_Q8_0) &&
           c->spec_max_draft >= 0 && c->spec_max_draft <= SPEC_MAX_DRAFT && c->spec_max_rows >= 0 &&
           c->spec_max_rows <= 4096 && c->step_budget_ms >= SCHED_STEP_BUDGET_AUTO && c->step_budget_ms <= 600000 &&
           c->step_budget_factor >= 1.0 && c->step_budget_factor <= 1000.0 && c->step_min_chunk >= 1 &&
           c->prefill_age_steps >= 1 && c->prefill_max_stops >= 0;
}

/* The KV pool's block count: --kv-blocks, or as many blocks of `per` bytes
 * as the budget holds (the budget from --kv-budget-mb or, with kv_auto,
 * kv_budget.h's rule over free memory), at most max_seqs full contexts.
 * *budget_mib: the budget used (MiB), 0 with --kv-blocks. */
static int32_t pool_blocks(const sched_t *s, size_t per, bool int8_on, int32_t *budget_mib)
{
    const sched_config_t *c = &s->cfg;
    const model_config_t *mc = &s->model->cfg;
    *budget_mib = 0;
    if (c->kv_blocks > 0)
        return c->kv_blocks;
    size_t budget = c->kv_budget_bytes ? c->kv_budget_bytes : ((size_t)1 << 30);
    int32_t want = (int32_t)(((int64_t)c->max_seqs * mc->ctx + c->block_size - 1) / c->block_size);
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
    *budget_mib = (int32_t)(budget >> 20);
    size_t fit = per ? budget / per : 0, lim = (size_t)INT32_MAX / (size_t)c->block_size;
    fit = fit < lim ? fit : lim;
    return (size_t)want < fit ? want : (int32_t)fit;
}

/* A sequence's position limit once the pool has n_blocks: see
 * sched_t.max_positions and kv_window_fits. */
static void set_max_positions(sched_t *s, int32_t n_blocks)
{
    const model_config_t *mc = &s->model->cfg;
    const int32_t bs = s->cfg.block_size;
    s->max_positions = mc->ctx < n_blocks * bs ? mc->ctx : n_blocks * bs;
    s->kv_window = model_kv_window(mc);
    if (s->kv_window > 0) {
        /* A windowed sequence holds at most the blocks spanning its window
         * plus the chunk being computed: ceil((W - 1 + chunk) / bs) + 1. When
         * the pool has that for a full chunk, a lone sequence always makes
         * progress, so only the context limits its length. */
        int64_t live = ((int64_t)s->kv_window - 1 + s->cfg.max_batch_tokens + bs - 1) / bs + 1;
        if (n_blocks >= live) {
            s->max_positions = mc->ctx;
            s->kv_window_fits = true;
        }
    }
}

/* The step's scratch, sized once from max_batch_tokens and max_seqs. */
static void alloc_scratch(sched_t *s)
{
    const int32_t mb = s->cfg.max_batch_tokens, ms = s->cfg.max_seqs;
    s->b_token = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_pos = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_seq = xmalloc((size_t)mb * sizeof(int32_t));
    s->b_want = xmalloc((size_t)mb);
    s->b_hid = xmalloc((size_t)mb);
    s->b_embd = xcalloc((size_t)mb, sizeof *s->b_embd);
    s->b_att_end = xcalloc((size_t)mb, sizeof *s->b_att_end);
    s->hidden = xmalloc((size_t)mb * (size_t)s->model->cfg.dim * sizeof(float));
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
    s->logits = xmalloc(((size_t)ms + (size_t)s->cfg.spec_max_rows) * (size_t)s->model->cfg.vocab * sizeof(float));
}

/* SPEC_DRAFT: the draft model's pass, pool (n_blocks, as many as the
 * target's) and scratch. 0, or -1 with err set. */
static int draft_init(sched_t *s, int32_t n_blocks, bool int8_on, char *err, size_t errlen)
{
    const model_t *dm = s->cfg.draft_model;
    const int32_t mb = s->cfg.max_batch_tokens, ms = s->cfg.max_seqs, vocab = s->model->cfg.vocab;
    if (!dm || dm->cfg.vocab != vocab) {
        errbuf_set(err, errlen, "--spec draft needs a draft model with the target's vocabulary (%d tokens)", vocab);
        return -1;
    }
    s->dfwd = forward_new(dm, mb, s->cfg.n_threads);
    if (!s->dfwd) {
        errbuf_set(err, errlen, "cannot create the draft model's forward pass");
        return -1;
    }
    if (int8_on && forward_set_int8(s->dfwd, true) != 0)
        log_warn("draft model: int8 matmul kernels unavailable");
    /* as many blocks as the target's pool: a draft model is smaller, so
     * this is less memory, and every running sequence fits */
    kv_type_t dt = sched_kv_type_for(dm, KV_TYPE_AUTO, int8_on);
    s->dpool = kv_pool_new(dm->cfg.n_layer, dm->cfg.kv_dim, n_blocks, s->cfg.block_size, dt);
    if (!s->dpool) {
        errbuf_set(err, errlen, "cannot create the draft model's KV pool");
        return -1;
    }
    s->dlogits = xmalloc((size_t)ms * (size_t)vocab * sizeof(float));
    s->d_token = xmalloc((size_t)mb * sizeof(int32_t));
    s->d_pos = xmalloc((size_t)mb * sizeof(int32_t));
    s->d_seq = xmalloc((size_t)mb * sizeof(int32_t));
    s->d_want = xmalloc((size_t)mb);
    s->d_tables = xmalloc((size_t)ms * sizeof *s->d_tables);
    s->d_nblocks = xmalloc((size_t)ms * sizeof(int32_t));
    s->d_seqs = xmalloc((size_t)ms * sizeof *s->d_seqs);
    return 0;
}

/* The start-up line: limits, step budget, KV pool. */
static void log_config(const sched_t *s, int32_t n_blocks, size_t block_bytes)
{
    const sched_config_t *c = &s->cfg;
    char sb[64];
    if (c->step_budget_ms == SCHED_STEP_BUDGET_AUTO)
        snprintf(sb, sizeof sb, "auto (%.1fx decode, chunks >= %d)", c->step_budget_factor, c->step_min_chunk);
    else if (c->step_budget_ms > 0)
        snprintf(sb, sizeof sb, "%d ms (chunks >= %d)", c->step_budget_ms, c->step_min_chunk);
    else
        snprintf(sb, sizeof sb, "off");
    log_info("scheduler: %d seqs, %d batch tokens, step budget %s, %d KV blocks of %d positions (%s, %.1f MiB)",
             c->max_seqs, c->max_batch_tokens, sb, n_blocks, c->block_size, kv_type_name(c->kv_type),
             (double)n_blocks * (double)block_bytes / 1048576.0);
}

sched_t *sched_new(const model_t *m, const tokenizer_t *tok, const sched_config_t *c,
                   sched_event_fn on_event, void *ud, char *err, size_t errlen)
{
    sched_t *s = NULL;
    const model_config_t *mc = &m->cfg;
    if (!config_valid(c)) {
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
    const size_t per = kv_pool_block_bytes_q(mc->n_layer, mc->kv_dim, c->block_size, c->kv_type, qblock);
    int32_t n_blocks = pool_blocks(s, per, int8_on, &s->kv_budget_mib);
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
    set_max_positions(s, n_blocks);
    alloc_scratch(s);
    atomic_init(&s->preempt, 0);
    forward_set_stop(s->fwd, &s->preempt);
    /* 0.98: the fit follows the last ~50 steps (a few seconds of decoding),
     * quick to see the machine change, long enough to average out noise */
    step_cost_init(&s->cost, 0.98);
    step_cost_init(&s->cost_dec, 0.98);
    if (c->spec == SPEC_DRAFT && draft_init(s, n_blocks, int8_on, err, errlen) != 0)
        goto err;
    log_config(s, n_blocks, per);
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
    out->n_running = sched_n_running(s);
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

/* The prefix-cache partition of a request: its own, with its images' keys
 * and positions folded in when it has any (common/prefix_key.h
 * prefix_key_image, the fold the gateway's routing keys use too), so blocks
 * holding image rows are shared only between requests with the same images
 * in the same places. */
static uint64_t image_partition(const sched_req_t *r)
{
    uint64_t h = r->partition;
    for (int32_t i = 0; i < r->n_images; i++)
        h = prefix_key_image(h, r->images[i].key, r->images[i].pos);
    return h;
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
 * last token (worker/model/rank_head.h). */
static bool rank_row(const seq_t *q, int32_t p)
{
    return p == q->n_tokens - 1;
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
            if (!pick || sched_seq_before(q, pick))
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
 * off; with auto, step_budget_factor x the decode-only step as the
 * decode-only fit (cost_dec) predicts it, 1 µs while the models are not
 * ready (step_cost_chunk then gives the floor chunk). */
static double step_target_us(const sched_t *s)
{
    if (s->rows.n_decode == 0 || s->cfg.step_budget_ms == 0)
        return 0;
    if (s->cfg.step_budget_ms > 0)
        return s->cfg.step_budget_ms * 1000.0;
    if (!step_cost_ready(&s->cost) || s->cost_dec.n_samples < 3)
        return 1; /* any positive target: step_cost_chunk gives the floor */
    /* no extrapolation in attention: the streams' contexts grow a step at a
     * time, in step with any drift of the machine's speed, so the fit can
     * put that drift on the attention term and the target would then climb
     * with every step of a long prefill (it did: +9 ms a step on a loaded
     * host); past the attention seen, the decode-only step is taken as
     * the last one seen */
    int64_t attn = s->rows.n_attn < s->cost_dec.attn_max ? s->rows.n_attn : s->cost_dec.attn_max;
    step_cost_rows_t dec = {s->rows.n_decode, 0, attn};
    return s->cfg.step_budget_factor * step_cost_predict(&s->cost_dec, &dec);
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
            s->b_att_end[row] = im->causal ? 0 : im->pos + im->n_tok;
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
    spec_plan_step(s); /* once: a preempted sequence loses its drafts (preempt) */
restart:
    for (int32_t i = 0; i < s->n_seqs; i++)
        s->seqs[i]->in_batch = false;
    int32_t n_rows = 0, n_bseq = 0;
    s->n_img_rows = 0;
    s->rows = (step_cost_rows_t){0, 0, 0};
    s->target_us = 0;
    int32_t best_prefill = INT32_MAX; /* best priority among the packed prefill chunks */
    int32_t step_tier = INT32_MAX;    /* aged tier of the step's first prefill chunk */
    for (int pass = 0; pass < 2; pass++) {
        seq_t *q;
        if (pass == 1)
            s->target_us = step_target_us(s);
        while (n_rows < budget && n_bseq < s->cfg.max_seqs && (q = next_for_batch(s, pass))) {
            /* a worse aged tier does not share a step with a better one's
             * prefill: it pauses (its K/V stays), so the better prompt's step
             * is as short as that prompt makes it (chunks come in aged-tier
             * order: every later one is worse too) */
            if (pass == 1 && aged_priority(s, q) > step_tier)
                break;
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
                bool ok = sched_reserve_or_preempt(s, q, chunk);
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
                if (step_tier == INT32_MAX)
                    step_tier = aged_priority(s, q);
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
                                             (q->embed == MODEL_POOL_RANK && rank_row(q, p)));
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
        if (q->state == SEQ_RUNNING && !q->in_batch && !sched_seq_decoding(q) && best_prefill < q->priority)
            q->n_passed++;
    }
    s->step_tier = step_tier;
    *n_bseq_out = n_bseq;
    return n_rows;
}

bool sched_prefault_step(sched_t *s, size_t max_bytes)
{
    return kv_pool_prefault_step(s->pool, max_bytes) || (s->dpool && kv_pool_prefault_step(s->dpool, max_bytes));
}

int sched_warm_up(sched_t *s)
{
    assert(!sched_busy(s));
    kv_pool_stats_t ps;
    kv_pool_stats(s->pool, &ps);
    if (ps.n_free < 1) /* taking a block would evict a cached one */
        return -1;
    kv_seq_t *q = kv_seq_new(s->pool);
    const int32_t token = 0, pos = 0, seq = 0;
    const uint8_t want = 1;
    int rc = kv_seq_reserve(q, 1);
    if (rc == KV_POOL_OK)
        rc = kv_seq_append(q, &token, 1);
    if (rc != KV_POOL_OK) {
        kv_seq_free(&q);
        return -1;
    }
    const int32_t *table = kv_seq_block_table(q);
    const int32_t n_blocks = kv_seq_n_blocks(q);
    fwd_batch_t fb = {.n_rows = 1, .token = &token, .pos = &pos, .seq = &seq, .want_logits = &want,
                      .n_seq = 1, .block_tables = &table, .n_blocks = &n_blocks};
    rc = forward_run(s->fwd, &fb, kv_pool_store(s->pool), s->logits);
    if (rc != 0)
        log_warn("warm-up forward pass failed: %s", forward_error(s->fwd));
    kv_seq_free(&q); /* never committed: the block goes back to the free list */
    return rc == 0 ? 0 : -1;
}

/* Runs the forward pass over the packed batch and records the step's rows
 * in the KV (positions [n_computed, n_computed + chunk) of each batch
 * sequence are written by this pass). FWD_STOPPED when the pass was
 * preempted (nothing recorded). On failure every sequence ends with an
 * engine error and -1 is returned. */
static int step_forward(sched_t *s, int32_t n_rows, int32_t n_bseq)
{
    for (int32_t b = 0; b < n_bseq; b++) {
        seq_t *q = s->b_seqs[b];
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
    fb.n_lora_sets = lora_rows_fill(s->lrows, fb.n_seq, fb.n_rows, fb.seq, &fb.lora_set, &fb.lora_sets);
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
    int frc = forward_run(s->fwd, &fb, kv_pool_store(s->pool), s->logits);
    if (frc == FWD_STOPPED)
        return FWD_STOPPED; /* nothing recorded: the rows count as not computed */
    if (frc == 0) {
        /* the rows' K/V is written: record their tokens (after the pass, so a
         * stopped step leaves no trace in the sequence's KV: its positions
         * are rewritten when the rows run again, and no block of them can be
         * committed to the prefix cache before that) */
        for (int32_t b = 0; b < n_bseq; b++) {
            seq_t *q = s->b_seqs[b];
            int rc = kv_seq_append(q->kv, q->tokens + q->n_computed, s->b_chunk[b]);
            assert(rc == KV_POOL_OK);
            (void)rc;
        }
        return 0;
    }
    const char *msg = forward_error(s->fwd);
    log_error("forward pass failed: %s", msg ? msg : "unknown error");
    while (s->n_seqs > 0) {
        emit(s, s->seqs[0], NULL, 0, NULL, 0, NULL, SCHED_FINISH_ERROR, SCHED_EENGINE, "engine error");
        remove_seq_at(s, 0);
    }
    return -1;
}

/* After the pass: advances each batch sequence past its chunk (pooling
 * embedding rows, committing full blocks), ends finished embeddings, and
 * lists the sequences that draw this step: *n_draw plain ones (b_draw,
 * b_drow) and *n_vdraw with drafts to verify (b_vdraw, b_vrow). Logits rows
 * come in batch order, one per sequence whose chunk ended on its last
 * pending token (plus one per draft row). */
static void step_advance(sched_t *s, int32_t n_bseq, int32_t *n_draw, int32_t *n_vdraw)
{
    const int32_t dim = s->model->cfg.dim;
    int32_t lrow = 0, row = 0, i_hid = 0; /* next logits row; this sequence's first row; next hidden row */
    *n_draw = *n_vdraw = 0;
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
        sched_kv_trim(s, q);
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
            q->finish = SCHED_FINISH_STOP; /* retired by step_report */
        } else if (end == q->n_tokens && s->b_ndraft[b] > 0) {
            s->b_vdraw[*n_vdraw] = q;
            s->b_vrow[(*n_vdraw)++] = lrow;
            lrow += 1 + s->b_ndraft[b];
        } else if (end == q->n_tokens) {
            s->b_draw[*n_draw] = q;
            s->b_drow[(*n_draw)++] = lrow++;
        }
    }
}

/* Draws the step's tokens: the plain draws, then the verify runs. */
static void step_draw(sched_t *s, int32_t n_draw, int32_t n_vdraw)
{
    /* Drawing is per sequence (its own sampler and RNG), ~30-60 us per row at
     * a 32k vocabulary: split over the threads instead of leaving the other
     * cores idle; the results do not depend on the split. */
    const size_t vocab = (size_t)s->model->cfg.vocab;
    const int n_par = n_draw >= 4 ? s->cfg.n_threads : 1;
    (void)n_par; /* unused without OpenMP */
#pragma omp parallel for num_threads(n_par) schedule(dynamic, 1)
    for (int32_t i = 0; i < n_draw; i++)
        sched_sample_draw(s->b_draw[i], s->logits + (size_t)s->b_drow[i] * vocab, s->max_positions);
    for (int32_t i = 0; i < n_draw; i++) {
        s->b_draw[i]->out_len = 0;
        s->b_draw[i]->n_out = 0;
        sched_sample_finish(s, s->b_draw[i]);
    }
    /* sequences with drafts: a run of draws each (few of them: spec_max_rows) */
    for (int32_t i = 0; i < n_vdraw; i++)
        spec_verify_seq(s, s->b_vdraw[i], s->logits + (size_t)s->b_vrow[i] * vocab);
}

/* Reports the step's output, then retires finished sequences (their full
 * blocks stay cached). */
static void step_report(sched_t *s)
{
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
}

/* Arms the preemption word for the step just packed (sched.h): bar = its
 * aged tier when it holds only prefill rows and none of its sequences was
 * stopped prefill_max_stops times in a row, else 0 (not armed). True when
 * an offer remembered since the last step already beats the bar: the step
 * is stopped before it starts (that request may not have been in the
 * scheduler when the batch was packed). */
static bool preempt_arm(sched_t *s, int32_t n_bseq)
{
    uint32_t bar = 0;
    if (s->cfg.prefill_max_stops > 0 && s->rows.n_decode == 0 && s->step_tier != INT32_MAX && s->step_tier > 0) {
        bar = (uint32_t)(s->step_tier < 255 ? s->step_tier : 255);
        for (int32_t b = 0; b < n_bseq; b++)
            if (s->b_seqs[b]->n_stopped >= s->cfg.prefill_max_stops || s->b_ndraft[b] > 0)
                bar = 0;
    }
    s->preempt_gen = (s->preempt_gen + 1) & 0x7fffu;
    uint32_t old = atomic_exchange_explicit(&s->preempt, bar ? s->preempt_gen << 16 | bar : 0, memory_order_relaxed);
    uint32_t pending = (old >> 8) & 0xffu;
    if (bar && pending && pending - 1 < bar)
        return true;
    if (bar && s->armed_hook)
        s->armed_hook(s->armed_hook_ud, s);
    return false;
}

/* The step was stopped for a better tier: nothing of it counts (its
 * sequences' n_computed and KV stay as they were; the reserved blocks stay
 * with them, to be written when the rows run again), and every sequence in
 * it has been stopped once more in a row. */
static void step_stopped(sched_t *s, int32_t n_bseq)
{
    for (int32_t b = 0; b < n_bseq; b++) {
        seq_t *q = s->b_seqs[b];
        q->n_stopped++;
        q->in_batch = false;
        q->n_draft = 0;
    }
    s->st.steps_stopped++;
    log_debug("step stopped for a better tier (%d prefill rows not computed)", s->rows.n_prefill);
}

_Atomic uint32_t *sched_preempt_word(sched_t *s)
{
    return &s->preempt;
}

bool sched_preempt_offer(_Atomic uint32_t *word, int32_t priority)
{
    if (priority < 0 || priority > 254)
        return false;
    const uint32_t p = (uint32_t)priority;
    uint32_t w = atomic_load_explicit(word, memory_order_relaxed);
    for (;;) {
        uint32_t bar = w & 0xffu, want;
        if (bar) { /* armed: stop it if p beats the bar */
            if (p >= bar || (w & FWD_STOP))
                return false;
            want = w | FWD_STOP;
        } else { /* between steps: remember the best offer for the next arming */
            uint32_t pending = (w >> 8) & 0xffu;
            if (pending && pending - 1 <= p)
                return false;
            want = (w & ~0xff00u) | (p + 1) << 8;
        }
        /* fails (and reloads w) when the step loop changed the word since
         * the load: judge the new one */
        if (atomic_compare_exchange_weak_explicit(word, &w, want, memory_order_relaxed, memory_order_relaxed))
            return bar != 0;
    }
}

void sched_set_armed_hook(sched_t *s, sched_armed_fn fn, void *ud)
{
    s->armed_hook = fn;
    s->armed_hook_ud = ud;
}

int sched_step(sched_t *s)
{
    reap(s);
    sched_admit(s);

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
        s->h_rows[b] = sched_seq_decoding(q) ? 0 : s->b_chunk[b];
    }
    int frc = preempt_arm(s, n_bseq) ? FWD_STOPPED : step_forward(s, n_rows, n_bseq);
    atomic_store_explicit(&s->preempt, 0, memory_order_relaxed); /* disarmed: offers are remembered */
    if (frc == FWD_STOPPED) {
        step_stopped(s, n_bseq);
        return n_rows;
    }
    if (frc != 0)
        return -1;
    s->st.steps++;
    for (int32_t b = 0; b < n_bseq; b++)
        s->b_seqs[b]->n_stopped = 0;
    int32_t n_draw, n_vdraw;
    step_advance(s, n_bseq, &n_draw, &n_vdraw);
    step_draw(s, n_draw, n_vdraw);
    step_report(s);

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
    /* where the step time goes (PAGODA_LOG=debug; docs/BATCHING.md): the
     * rows, the target, what the model predicted and what it took */
    log_debug("step cost: decode %d prefill %d attn %lld seqs %d target %.2f ms predicted %.2f ms took %.2f ms",
              rows.n_decode, rows.n_prefill, (long long)rows.n_attn, n_bseq, target_us / 1000.0,
              step_cost_predict(&s->cost, &rows) / 1000.0, t_us / 1000.0);
    step_cost_add(&s->cost, &rows, t_us);
    if (rows.n_prefill == 0)
        step_cost_add(&s->cost_dec, &rows, t_us);
    return n_rows;
}

void sched_set_step_hook(sched_t *s, sched_step_fn fn, void *ud)
{
    s->step_hook = fn;
    s->step_hook_ud = ud;
}
