/* step_cost.c — online least-squares step cost model and prefill chunk
 * sizing (see step_cost.h). */
#include "worker/step_cost.h"

#include <math.h>
#include <string.h>

/* Terms are scaled to O(1) for typical steps before they enter the normal
 * equations, so one small ridge suits all four. */
static const double scale[STEP_COST_N] = {1.0, 1.0 / 8.0, 1.0 / 64.0, 1.0 / 65536.0};
#define RIDGE 1e-9 /* keeps an unseen direction (e.g. one n_decode only) solvable */

static void terms(const step_cost_rows_t *r, double x[STEP_COST_N])
{
    x[0] = scale[0];
    x[1] = r->n_decode * scale[1];
    x[2] = r->n_prefill * scale[2];
    x[3] = (double)r->n_attn * scale[3];
}

/* Solves the normal equations restricted to the terms with on[i]; beta of
 * the others is 0. Gaussian elimination with partial pivoting. */
static void solve(const step_cost_t *c, const bool on[STEP_COST_N], double beta[STEP_COST_N])
{
    double a[STEP_COST_N][STEP_COST_N + 1];
    int idx[STEP_COST_N], n = 0;
    for (int i = 0; i < STEP_COST_N; i++)
        if (on[i])
            idx[n++] = i;
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++)
            a[i][j] = c->xtx[idx[i]][idx[j]] + (i == j ? RIDGE : 0.0);
        a[i][n] = c->xty[idx[i]];
    }
    for (int k = 0; k < n; k++) {
        int p = k;
        for (int i = k + 1; i < n; i++)
            if (fabs(a[i][k]) > fabs(a[p][k]))
                p = i;
        if (p != k)
            for (int j = 0; j <= n; j++) {
                double t = a[k][j];
                a[k][j] = a[p][j];
                a[p][j] = t;
            }
        for (int i = k + 1; i < n; i++) {
            double f = a[i][k] / a[k][k];
            for (int j = k; j <= n; j++)
                a[i][j] -= f * a[k][j];
        }
    }
    memset(beta, 0, STEP_COST_N * sizeof *beta);
    for (int i = n - 1; i >= 0; i--) {
        double v = a[i][n];
        for (int j = i + 1; j < n; j++)
            v -= a[i][j] * beta[idx[j]];
        beta[idx[i]] = v / a[i][i];
    }
}

static void refit(step_cost_t *c)
{
    bool on[STEP_COST_N] = {true, true, true, true};
    double beta[STEP_COST_N];
    /* drop the most negative coefficient and refit until none is negative */
    for (int round = 0; round < STEP_COST_N; round++) {
        solve(c, on, beta);
        int worst = -1;
        for (int i = 0; i < STEP_COST_N; i++)
            if (on[i] && beta[i] < 0 && (worst < 0 || beta[i] < beta[worst]))
                worst = i;
        if (worst < 0)
            break;
        on[worst] = false;
        beta[worst] = 0;
    }
    for (int i = 0; i < STEP_COST_N; i++)
        c->coef[i] = beta[i] > 0 && isfinite(beta[i]) ? beta[i] * scale[i] : 0.0;
}

void step_cost_init(step_cost_t *c, double decay)
{
    memset(c, 0, sizeof *c);
    c->decay = decay > 0 && decay <= 1 ? decay : 1.0;
}

void step_cost_add(step_cost_t *c, const step_cost_rows_t *r, double t_us)
{
    if (!(t_us > 0) || r->n_decode + r->n_prefill <= 0)
        return;
    double x[STEP_COST_N];
    terms(r, x);
    for (int i = 0; i < STEP_COST_N; i++) {
        for (int j = 0; j < STEP_COST_N; j++)
            c->xtx[i][j] = c->xtx[i][j] * c->decay + x[i] * x[j];
        c->xty[i] = c->xty[i] * c->decay + x[i] * t_us;
    }
    c->w_decode_only = c->w_decode_only * c->decay + (r->n_prefill == 0);
    c->w_prefill = c->w_prefill * c->decay + (r->n_prefill > 0);
    /* decayed weights: 3 fresh steps of each kind, or more older ones */
    c->ready = c->ready || (c->w_decode_only >= 2.5 && c->w_prefill >= 2.5);
    c->attn_max = r->n_attn > c->attn_max ? r->n_attn : c->attn_max;
    c->n_samples++;
    refit(c);
}

bool step_cost_ready(const step_cost_t *c)
{
    return c->ready;
}

double step_cost_predict(const step_cost_t *c, const step_cost_rows_t *r)
{
    return c->coef[0] + c->coef[1] * r->n_decode + c->coef[2] * r->n_prefill + c->coef[3] * (double)r->n_attn;
}

int64_t step_cost_chunk_attn(int32_t pos0, int32_t chunk)
{
    /* sum of (p + 1) for p = pos0 .. pos0 + chunk - 1 */
    return (int64_t)chunk * pos0 + (int64_t)chunk * (chunk + 1) / 2;
}

int32_t step_cost_chunk(const step_cost_t *c, const step_cost_rows_t *base, int32_t pos0,
                        int32_t max_chunk, int32_t min_chunk, double target_us)
{
    if (max_chunk <= 0)
        return 0;
    if (base->n_decode == 0 || target_us <= 0)
        return max_chunk;
    const int32_t floor = base->n_prefill == 0 ? (min_chunk < max_chunk ? min_chunk : max_chunk) : 0;
    if (!step_cost_ready(c))
        return floor;
    /* largest chunk with predict <= target: predict grows with the chunk
     * (non-negative coefficients), so bisect over [0, max_chunk] */
    int32_t lo = 0, hi = max_chunk; /* lo fits (or is 0); answer in [lo, hi] */
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        step_cost_rows_t r = {base->n_decode, base->n_prefill + mid,
                              base->n_attn + step_cost_chunk_attn(pos0, mid)};
        if (step_cost_predict(c, &r) <= target_us)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo > floor ? lo : floor;
}
