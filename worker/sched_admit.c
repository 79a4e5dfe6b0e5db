/* sched_admit.c — the scheduler's admission and preemption: which waiting
 * sequence gets a slot and its KV blocks next, and which running one gives
 * them back when the pool is full (see sched.h for the rules). */
#include "worker/sched_int.h"

#include <assert.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

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
bool sched_reserve_or_preempt(sched_t *s, seq_t *q, int32_t n)
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

/* Admits waiting sequences in (priority, arrival) order while slots and KV
 * blocks allow; a waiting request of strictly higher priority may preempt a
 * running one when every slot is taken. */
void sched_admit(sched_t *s)
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
            if (!best || sched_seq_before(q, best))
                best = q;
        }
        if (!best)
            return;
        if (sched_n_running(s) >= s->cfg.max_seqs) {
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
        int32_t running = sched_n_running(s);
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
