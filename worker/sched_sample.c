/* sched_sample.c — a sequence's next token: the draw from its logits row
 * (free or grammar-constrained) and the stop checks that follow it (end
 * token, stop strings, grammar end, length). */
#include "worker/sched_int.h"

#include <assert.h>
#include <string.h>

#include "common/xalloc.h"

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
void sched_sample_draw(seq_t *q, const float *row, int32_t max_positions)
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

/* After sched_sample_draw: takes q->out_token into the sequence and runs the stop
 * checks in OpenAI's order: end-of-generation token, stop string, length. */
void sched_sample_finish(sched_t *s, seq_t *q)
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
