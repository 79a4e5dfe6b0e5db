/* Speculative decoding inside the scheduler's step: the draft model's
 * passes, the plan of each step's drafts (spec_plan_step) and their
 * verification (spec_verify_seq), declared in sched_int.h. The pure parts
 * of speculation (modes, the n-gram drafter, acceptance history) are
 * worker/spec.c, which knows nothing of the scheduler. */
#include <assert.h>
#include <string.h>

#include "common/errbuf.h"
#include "common/log.h"
#include "worker/sched_int.h"

/* ---- in the scheduler's step (sched_int.h) --------------------------------- */

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
 * draft KV; spec_verify_seq adds the drafts that were accepted (q->d_fed of them
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
void spec_plan_step(sched_t *s)
{
    int32_t n_dec = 0, n_other = 0;
    for (int32_t i = 0; i < s->n_seqs; i++) {
        seq_t *q = s->seqs[i];
        q->n_draft = 0;
        if (q->state != SEQ_RUNNING)
            continue;
        if (sched_seq_decoding(q))
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
        for (int32_t j = i; j > 0 && sched_seq_before(s->b_vdraw[j], s->b_vdraw[j - 1]); j--) {
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
void spec_verify_seq(sched_t *s, seq_t *q, const float *rows)
{
    const size_t vocab = (size_t)s->model->cfg.vocab;
    const int32_t nd = q->n_draft;
    int32_t m = 0; /* drafts equal to the draws, in a row */
    q->out_len = 0;
    q->n_out = 0;
    for (int32_t i = 0; i <= nd; i++) {
        sched_sample_draw(q, rows + (size_t)i * vocab, s->max_positions);
        sched_sample_finish(s, q);
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
    sched_kv_trim(s, q);
}
