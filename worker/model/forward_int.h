/* forward_int.h — the state forward.c shares with the files it was split
 * into (forward_lora.c: the adapter updates of a step). Not an API: only
 * the forward module's files include it; the public one is forward.h.
 * Ownership: as forward.h (the forward_t and everything it points to belong
 * to forward_new / forward_free). */
#ifndef PAGODA_WORKER_MODEL_FORWARD_INT_H
#define PAGODA_WORKER_MODEL_FORWARD_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/lowrank.h"
#include "worker/kernels/matmul.h"
#include "worker/kernels/spinbar.h"
#include "worker/kernels/worksteal.h"
#include "worker/model/forward.h"

/* phases of a step timed with PAGODA_FWD_PROFILE (prof_print); PH_QKV_ATT
 * is the fused attention block of small batches (qkv_attention_by_head),
 * PH_QKV / PH_ATT the two regions of larger ones, PH_LORA every adapter
 * update outside the fused gate/up */
enum { PH_EMBED, PH_QKV_ATT, PH_QKV, PH_ATT, PH_WO, PH_NORM, PH_GATE_UP, PH_DOWN, PH_LORA, PH_HEAD, PH_N };

struct forward {
    const model_t *m;
    int max_rows;
    int n_threads;
    matmul_t *mm;        /* dequant tile scratch for quantized weights */
    uint8_t *scratch;    /* owned (xhuge_zalloc): every float buffer below is carved from it */
    size_t scratch_bytes;
    /* activations, row-major, one row per batch row */
    float *x;            /* (max_rows, dim)    residual stream */
    float *xb;           /* (max_rows, dim)    normed input of a sublayer / output proj result */
    float *q;            /* (max_rows, q_dim)  queries, then rotated */
    float *k;            /* (max_rows, kv_dim) keys of this step's rows, rotated */
    float *v;            /* (max_rows, kv_dim) values of this step's rows */
    float *att;          /* (max_rows, q_dim)  attention output, heads concatenated */
    float *hg;           /* (max_rows, ffn)    gate projection, then act(gate) * up (ffn: the widest FFN) */
    float *hu;           /* (max_rows, ffn)    up projection */
    float *rope_cos[2];  /* (max_rows, rope_dim/2) cos(pos * theta_i) * attn_factor; [1]: sliding-window
                          * layers' table when the model has its own for them (else == [0]) */
    float *rope_sin[2];  /* (max_rows, rope_dim/2) sin(pos * theta_i) * attn_factor */
    /* mixture of experts (n_expert > 0 only, else NULL) */
    float *moe_logits;   /* (max_rows, n_expert) router logits, then probabilities */
    int32_t *moe_sel;    /* (max_rows, n_expert_used) experts chosen per row */
    float *moe_wt;       /* (max_rows, n_expert_used) their weights */
    int32_t *exp_rows;   /* (n_expert, max_rows) rows routed to each expert, ascending */
    float *exp_wt;       /* (n_expert, max_rows) the weight of each of those rows */
    int32_t *exp_n;      /* (n_expert) rows routed to each expert this step */
    float *xe;           /* (max_rows, dim) rows gathered for one expert */
    float *ye;           /* (max_rows, dim) one expert's output for them */
    float *moe_out;      /* (max_rows, dim) Σ over a row's experts of weight * output */
    float *scores;       /* (n_threads, score_rows, scores_ld) attention weights: each
                          * thread has one row per query head (att_row) or per query
                          * head of a kv head's group */
    bool att_row;        /* batches > 8 rows attend with attention_row: the scores of
                          * all heads fit FWD_ATT_ROW_SCRATCH */
    int score_rows;      /* n_head when att_row (at least ATT_TILE_MAX_VECS for the
                          * prefill tiles when that fits FWD_ATT_ROW_SCRATCH), else
                          * the group size */
    size_t scores_ld;    /* ctx rounded up to 16 floats (no false sharing) */
    int32_t *wanted;     /* (max_rows)         indices of rows with want_logits */
    /* LoRA (fwd_batch_t.lora_set): this step's rows grouped by adapter set */
    int32_t *lora_rows;  /* (max_rows) rows of group 0, then of group 1, ... */
    int32_t *lora_grp0;  /* (max_rows + 1) group g's rows are lora_rows[grp0[g] .. grp0[g+1]) */
    int32_t *lora_gset;  /* (max_rows) the set index of group g */
    int n_lora_grp;      /* groups this step (0: no row has an adapter) */
    bool lora_unfused;   /* forward_set_lora_fused(f, false): never proj_fused's updates */
    lowrank_job_t *lr_jobs;          /* (FWD_LORA_FUSED_JOBS) one lowrank call's jobs */
    const lowrank_t **lr_pairs;      /* (FWD_LORA_FUSED_JOBS, LORA_SET_MAX) their pairs */
    float *lr_s;                     /* (FWD_LORA_FUSED_JOBS, LORA_SET_MAX) their scales */
    lowrank_job_t *lr_jobs_nx;       /* the same three for the next projection's */
    const lowrank_t **lr_pairs_nx;   /*   jobs (forward_lora_jobs_next): proj_fused */
    float *lr_s_nx;                  /*   queues their A rows during its products */
    ws_t *ws_lr;                     /* per-thread ranges of a proj_fused region's phase 1 */
    float *lr_t;                     /* (lr_t_cap) lowrank's scratch */
    size_t lr_t_cap;                 /* the larger of (max_rows + LORA_SET_MAX) * LORA_MAX_RANK
                                      * (lora_add) and q/k/v of every row of a proj_fused step
                                      * with LORA_SET_MAX adapters of LORA_MAX_RANK */
    spinbar_t bar;       /* the barriers of layers_one_region */
    bool multi_region;   /* forward_set_one_region(f, false): never layers_one_region */
    ws_t *ws;            /* per-thread ranges of ffn_gate_up's column tasks and of
                          * qkv_attention_by_head's kv heads */
    _Atomic uint64_t *layers_done; /* +1 per layer computed, NULL = none (forward_set_progress) */
    const _Atomic uint32_t *stop;  /* FWD_STOP set: return at the next check, stop_set (forward_set_stop) */
    char err[160];
    /* PAGODA_FWD_PROFILE=N: time per phase of N-row steps (1 when the
     * value is not a number above 0), printed to stderr by forward_free (a
     * profiling aid for the decode path) */
    int prof;
    uint64_t prof_steps;
    double prof_ns[PH_N], prof_bytes[PH_N];
};

/* Jobs (group × projection) one lowrank_apply call takes at most (more
 * make another call). */
#define FWD_LORA_JOBS 64
/* Steps of up to this many rows with adapters add each projection's update
 * inside the projection's own region (proj_fused): matmul_run_range equals
 * matmul_run bit for bit up to 64 rows (matmul.h), so a base row of such a
 * step keeps the bits of a step without adapters. Larger steps (prefill)
 * run the projection, then lora_add. */
#define FWD_LORA_FUSED_MAX_ROWS 64
/* Jobs of one proj_fused region: q/k/v × one group per row at most */
#define FWD_LORA_FUSED_JOBS (3 * FWD_LORA_FUSED_MAX_ROWS)

/* ---- forward_lora.c: the adapter updates of a step ---- */

/* Groups this step's rows by adapter set (f->lora_rows / grp0 / gset), in
 * ascending set index and row order; n_lora_grp 0 when no row has one. */
void forward_lora_group(forward_t *f, const fwd_batch_t *b);

/* For each of the n_p projections p[k] of layer l (that share no output):
 * y[k] (R, ldy[k]) += each row's adapters' update of x[k] (R, ldx[k]), in
 * regions of their own (lowrank_apply). */
void forward_lora_add(forward_t *f, const fwd_batch_t *b, int l, int n_p, const enum lora_proj *p,
                      const float *const *x, const int64_t *ldx, float *const *y, const int64_t *ldy);

/* forward_lora_add of one projection. */
void forward_lora_add1(forward_t *f, const fwd_batch_t *b, int l, enum lora_proj p, const float *x, int64_t ldx,
                       float *y, int64_t ldy);

/* The jobs of the n projections p[k] of layer l for one proj_fused region
 * into f->lr_jobs: projection k's are [first[k], first[k + 1]). */
int forward_lora_jobs_next(forward_t *f, const fwd_batch_t *b, int l, int n, const enum lora_proj *p);
void forward_lora_jobs(forward_t *f, const fwd_batch_t *b, int l, int n, const enum lora_proj *p, const float *x,
                       int64_t ldx, float *const *y, const int64_t *ldy, int *first);

#endif
