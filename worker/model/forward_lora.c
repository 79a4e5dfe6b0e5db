/* forward_lora.c — the adapter updates of a forward step (forward_int.h):
 * rows grouped by adapter set, the lowrank jobs of each projection, run in
 * regions of their own (lora_add) or handed to proj_fused (lora_jobs). */
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "worker/kernels/lowrank.h"
#include "worker/model/forward_int.h"
#include "worker/model/lora.h"

/* Groups this step's rows by adapter set (f->lora_rows / grp0 / gset), in
 * ascending set index and row order; n_lora_grp 0 when no row has one. */
void forward_lora_group(forward_t *f, const fwd_batch_t *b)
{
    f->n_lora_grp = 0;
    if (!b->lora_set)
        return;
    int n = 0;
    for (int32_t s = 0; s < b->n_lora_sets; s++) {
        const int start = n;
        if (b->lora_sets[s].n == 0)
            continue;
        for (int r = 0; r < b->n_rows; r++)
            if (b->lora_set[r] == s)
                f->lora_rows[n++] = r;
        if (n > start) {
            f->lora_grp0[f->n_lora_grp] = start;
            f->lora_gset[f->n_lora_grp++] = s;
        }
    }
    f->lora_grp0[f->n_lora_grp] = n;
}

/* Runs the jobs gathered in f->lr_jobs (one region) and empties the list. */
static void lora_flush(forward_t *f, int *n_jobs, size_t *t_used)
{
    int rc = lowrank_apply(f->lr_jobs, *n_jobs, f->lr_t, f->n_threads);
    assert(rc == 0 && "adapters were checked against the model at load");
    (void)rc;
    *n_jobs = 0;
    *t_used = 0;
}

/* After a flush the job being built becomes job 0: its pairs and scales
 * move to slot 0 (the flushed jobs that used it are done). */
static void lora_pairs_to_slot0(forward_t *f, const lowrank_t ***pairs, float **s, int n_pairs)
{
    memmove(f->lr_pairs, *pairs, (size_t)n_pairs * sizeof **pairs);
    memmove(f->lr_s, *s, (size_t)n_pairs * sizeof **s);
    *pairs = f->lr_pairs;
    *s = f->lr_s;
}

/* One job slot's pairs: group g's adapters that adapt projection p of
 * layer l, in the set's order, with their scales (scale · factor), in slot
 * `slot` of f->lr_pairs / f->lr_s. */
typedef struct lora_slot {
    const lowrank_t **pairs;
    float *s;
    int n;         /* pairs */
    size_t sum_r;  /* their ranks' sum */
} lora_slot_t;

static lora_slot_t lora_set_pairs_in(forward_t *f, const fwd_batch_t *b, int g, int l, enum lora_proj p, int slot,
                                     const lowrank_t **pairs, float *s)
{
    const lora_set_t *set = &b->lora_sets[f->lora_gset[g]];
    lora_slot_t sl = {.pairs = pairs + (size_t)slot * LORA_SET_MAX, .s = s + (size_t)slot * LORA_SET_MAX};
    for (int i = 0; i < set->n; i++) {
        const lowrank_t *lr = lora_pair(set->ad[i], l, p);
        if (!lr)
            continue;
        sl.pairs[sl.n] = lr;
        sl.s[sl.n++] = set->scale[i] * lr->factor;
        sl.sum_r += (size_t)lr->rank;
    }
    return sl;
}

static lora_slot_t lora_set_pairs(forward_t *f, const fwd_batch_t *b, int g, int l, enum lora_proj p, int slot)
{
    return lora_set_pairs_in(f, b, g, l, p, slot, f->lr_pairs, f->lr_s);
}

/* For each of the n_p projections p[k] of layer l (that share no output):
 * y[k] (R, ldy[k]) += each row's adapters' update (lowrank.h) of x[k]
 * (R, ldx[k]), adapter by adapter in the set's order. Every group and
 * projection in one lowrank_apply region (more only when the scratch is
 * full); a row's sum does not depend on the other rows. */
void forward_lora_add(forward_t *f, const fwd_batch_t *b, int l, int n_p, const enum lora_proj *p,
                      const float *const *x, const int64_t *ldx, float *const *y, const int64_t *ldy)
{
    int n_jobs = 0;
    size_t t_used = 0;
    for (int k = 0; k < n_p; k++)
        for (int g = 0; g < f->n_lora_grp; g++) {
            const lora_slot_t sl = lora_set_pairs(f, b, g, l, p[k], n_jobs);
            const lowrank_t **pairs = sl.pairs;
            float *s = sl.s;
            const int n_pairs = sl.n;
            const size_t sum_r = sl.sum_r;
            if (n_pairs == 0)
                continue;
            /* the group's rows, in chunks that fit the scratch */
            const int32_t *rows = f->lora_rows + f->lora_grp0[g];
            int left = f->lora_grp0[g + 1] - f->lora_grp0[g];
            while (left > 0) {
                if (t_used + sum_r > f->lr_t_cap) {
                    lora_flush(f, &n_jobs, &t_used);
                    lora_pairs_to_slot0(f, &pairs, &s, n_pairs);
                }
                const size_t fit = (f->lr_t_cap - t_used) / sum_r;
                const int n = (size_t)left < fit ? left : (int)fit;
                f->lr_jobs[n_jobs++] = (lowrank_job_t){ .x = x[k], .ldx = ldx[k], .y = y[k], .ldy = ldy[k],
                                                        .rows = rows, .n = n, .pairs = pairs, .s = s,
                                                        .n_pairs = n_pairs };
                t_used += (size_t)n * sum_r;
                rows += n;
                left -= n;
                if (left > 0 || n_jobs == FWD_LORA_JOBS) {
                    lora_flush(f, &n_jobs, &t_used);
                    lora_pairs_to_slot0(f, &pairs, &s, n_pairs);
                }
            }
        }
    if (n_jobs > 0)
        lora_flush(f, &n_jobs, &t_used);
}

/* lora_add of one projection. */
void forward_lora_add1(forward_t *f, const fwd_batch_t *b, int l, enum lora_proj p, const float *x, int64_t ldx,
                       float *y, int64_t ldy)
{
    forward_lora_add(f, b, l, 1, &p, &x, &ldx, &y, &ldy);
}

/* The jobs of the n projections p[k] of layer l, group by group, into
 * jobs (their pairs and scales in the slots of pairs and s): projection
 * k's are jobs[first[k] .. first[k + 1]) (first may be NULL). x, y (NULL:
 * none) and ldy (with y) are the jobs' input and outputs. Returns the
 * count; *t_used the scratch floats they need. */
static int lora_jobs_into(forward_t *f, const fwd_batch_t *b, int l, int n, const enum lora_proj *p, const float *x,
                          int64_t ldx, float *const *y, const int64_t *ldy, int *first, lowrank_job_t *jobs,
                          const lowrank_t **pairs, float *s, size_t *t_used)
{
    int n_jobs = 0;
    *t_used = 0;
    for (int k = 0; k < n; k++) {
        if (first)
            first[k] = n_jobs;
        for (int g = 0; g < f->n_lora_grp; g++) {
            assert(n_jobs < FWD_LORA_FUSED_JOBS);
            const lora_slot_t sl = lora_set_pairs_in(f, b, g, l, p[k], n_jobs, pairs, s);
            if (sl.n == 0)
                continue;
            const int n_rows = f->lora_grp0[g + 1] - f->lora_grp0[g];
            jobs[n_jobs++] = (lowrank_job_t){ .x = x, .ldx = ldx, .y = y ? y[k] : NULL, .ldy = y ? ldy[k] : 0,
                                              .rows = f->lora_rows + f->lora_grp0[g], .n = n_rows,
                                              .pairs = sl.pairs, .s = sl.s, .n_pairs = sl.n };
            *t_used += (size_t)n_rows * sl.sum_r;
        }
    }
    if (first)
        first[n] = n_jobs;
    return n_jobs;
}

/* The jobs of the n projections p[k] of layer l (input x (R, ldx), outputs
 * y[k] (R, ldy[k])) for one proj_fused region, group by group:
 * projection k's are f->lr_jobs[first[k] .. first[k + 1]). They always fit
 * (f->lr_t_cap, FWD_LORA_FUSED_JOBS: R <= FWD_LORA_FUSED_MAX_ROWS). */
void forward_lora_jobs(forward_t *f, const fwd_batch_t *b, int l, int n, const enum lora_proj *p, const float *x,
                       int64_t ldx, float *const *y, const int64_t *ldy, int *first)
{
    size_t t_used;
    const int n_jobs = lora_jobs_into(f, b, l, n, p, x, ldx, y, ldy, first, f->lr_jobs, f->lr_pairs, f->lr_s, &t_used);
    assert(t_used <= f->lr_t_cap);
    (void)t_used;
    int rc = lowrank_check(f->lr_jobs, n_jobs);
    assert(rc == 0 && "adapters were checked against the model at load");
    (void)rc;
}

/* The jobs forward_lora_jobs will make for the n projections p[k] of layer
 * l, into f->lr_jobs_nx (x and y NULL: only their rows and pairs, for
 * lowrank_prefetch_a); returns their count. */
int forward_lora_jobs_next(forward_t *f, const fwd_batch_t *b, int l, int n, const enum lora_proj *p)
{
    size_t t_used;
    return lora_jobs_into(f, b, l, n, p, NULL, 0, NULL, NULL, NULL, f->lr_jobs_nx, f->lr_pairs_nx, f->lr_s_nx,
                          &t_used);
}
