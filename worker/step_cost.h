/* step_cost.h — what a forward step costs, learned online, and the prefill
 * chunk that keeps a step within a time target.
 *
 * The scheduler's step time budget (docs/BATCHING.md, "Step time budget"):
 * running streams see one token per step, so a step that also carries a
 * 512-token prefill chunk makes every stream wait for it. The cost model
 * predicts a step's wall time from its rows,
 *
 *   t = c0 + c1 * n_decode + c2 * n_prefill + c3 * n_attn      (µs)
 *
 *   n_decode   decode rows (one per generating sequence, drafts included)
 *   n_prefill  prompt (or recomputed) rows
 *   n_attn     attention work: the sum over every row of the positions it
 *              attends to (pos + 1)
 *
 * c0 is the part that does not grow with rows (reading the weights once:
 * decode is memory-bound), c1 and c2 the per-row GEMM work (separate,
 * because a few decode rows ride on the weight read while prefill rows are
 * compute-bound), c3 the attention. The coefficients are a least-squares fit
 * of the measured steps with exponential forgetting (each new step weighs
 * 1, the one before `decay`, ...), so the model follows the machine (other
 * processes, thermal limits) and needs no calibration run. A coefficient the
 * fit makes negative is dropped and the rest refitted (non-negative least
 * squares over four terms), so a prediction never falls as rows are added
 * and the chunk search below is a bisection.
 *
 * Ownership: plain values, no allocation; step_cost_t is embedded by value. */
#ifndef PAGODA_WORKER_STEP_COST_H
#define PAGODA_WORKER_STEP_COST_H

#include <stdbool.h>
#include <stdint.h>

#define STEP_COST_N 4 /* terms: 1, n_decode, n_prefill, n_attn */

/* A step's rows, as the model counts them. */
typedef struct step_cost_rows {
    int32_t n_decode;
    int32_t n_prefill;
    int64_t n_attn;            /* sum over rows of (pos + 1) */
} step_cost_rows_t;

typedef struct step_cost {
    double xtx[STEP_COST_N][STEP_COST_N]; /* decayed sum of x x^T (scaled terms) */
    double xty[STEP_COST_N];   /* decayed sum of x t */
    double coef[STEP_COST_N];  /* the fit, in µs per unscaled unit (c0..c3) */
    double decay;              /* weight kept by the past at each new step, (0, 1] */
    double w_decode_only;      /* decayed count of steps without prefill rows */
    double w_prefill;          /* decayed count of steps with prefill rows */
    bool ready;                /* both counts have reached the readiness bar once */
    int64_t attn_max;          /* the largest n_attn of a step added */
    int64_t n_samples;
} step_cost_t;

/* decay: 0.98 keeps ~50 steps' memory; out of (0, 1] is taken as 1. */
void step_cost_init(step_cost_t *c, double decay);
/* Adds one measured step of t_us µs and refits. Ignores t_us <= 0 and empty steps. */
void step_cost_add(step_cost_t *c, const step_cost_rows_t *r, double t_us);
/* True once the fit has seen enough steps with and without prefill rows
 * (>= 3 of each, decayed) to tell prefill cost from the rest; it stays
 * true: a long prefill beside streams is all mixed steps, whose decay
 * takes the decode-only count below the bar after ~150 of them (the data
 * that taught the fit are still in it, only weighed less), and the chunks
 * must not fall back to the floor then. */
bool step_cost_ready(const step_cost_t *c);
/* Predicted µs of a step with these rows (0 with no samples). */
double step_cost_predict(const step_cost_t *c, const step_cost_rows_t *r);

/* The attention work of `chunk` rows at positions pos0 .. pos0 + chunk - 1. */
int64_t step_cost_chunk_attn(int32_t pos0, int32_t chunk);

/* The prefill chunk for a sequence at position pos0 in a step that already
 * holds `base` rows: the largest chunk in [0, max_chunk] whose step stays
 * within target_us by the model, but
 *   - max_chunk when base has no decode rows (nobody waits on the step), or
 *     when target_us <= 0 (no time budget);
 *   - at least min(min_chunk, max_chunk) when base has no prefill rows yet
 *     (the step's first chunk: smaller GEMMs would waste the compute), and
 *     exactly that when the model is not ready;
 *   - 0 for a later chunk that does not fit (or a model not ready).
 * max_chunk is what the token budget and the prompt allow. */
int32_t step_cost_chunk(const step_cost_t *c, const step_cost_rows_t *base, int32_t pos0,
                        int32_t max_chunk, int32_t min_chunk, double target_us);

#endif
