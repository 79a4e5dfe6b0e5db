/* step_curve.c — what a forward step costs by its rows, the curve the step
 * time budget (docs/BATCHING.md, "Step time budget") sizes chunks on.
 * Not part of `make test`: numbers depend on the machine and its load.
 *
 * usage: step_curve MODEL.gguf D:P[,D:P...] [REPS] [CTX] [POS]
 *   (built and run by tests/bench/step_curve.sh; not in tests/bench/ itself,
 *   whose .c files pagoda-bench links)
 *
 * For each D:P, steps of D decode rows (one per sequence, at position CTX,
 * default 300) and P prompt rows of one more sequence (positions POS ..
 * POS + P - 1, default 400, logits for its last row only), as the scheduler packs a
 * mixed step, through forward_run with the int8 kernels on (as the
 * worker), 2 threads; 2 warm-up steps, then REPS (15) timed ones. Prints
 * the fastest and the median wall time and the process CPU time of a step.
 * With AB=1 in the environment every rep runs the step twice, in one
 * region (layers_one_region) and with a region per phase
 * (forward_set_one_region(f, false)), so both see the same moment of a
 * shared machine. The decode sequences share their K/V blocks but the one
 * each writes (the values do not change the time). Run it with the
 * worker's GOMP_SPINCOUNT (worker/wait_policy.h): the script does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/xalloc.h"
#include "worker/engine.h"
#include "worker/model/forward.h"

#define SC_MAX_ROWS 512
#define SC_MAX_REPS 200
#define SC_BS 32         /* positions per K/V block */
#define SC_SEQS 129      /* up to 128 decode sequences + the prompt's */
#define SC_POS_MAX 2048 /* the prompt's last position + 1 at most */

static double now_ms(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: step_curve MODEL.gguf D:P[,D:P...] [REPS] [CTX] [POS]\n");
        return 2;
    }
    const int reps = argc > 3 ? atoi(argv[3]) : 15, ctx = argc > 4 ? atoi(argv[4]) : 300,
              pos0 = argc > 5 ? atoi(argv[5]) : 400;
    if (reps < 1 || reps > SC_MAX_REPS || ctx < 0 || ctx >= SC_POS_MAX || pos0 < 0 ||
        pos0 + SC_MAX_ROWS > SC_POS_MAX) {
        fprintf(stderr, "REPS in [1, %d], CTX in [0, %d), POS in [0, %d]\n", SC_MAX_REPS, SC_POS_MAX,
                SC_POS_MAX - SC_MAX_ROWS);
        return 2;
    }
    char err[256];
    engine_t *e = engine_load(argv[1], err, sizeof err);
    if (!e) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    engine_pack_int8(e, 2);
    const model_config_t *c = &e->model->cfg;
    forward_t *f = forward_new(e->model, SC_MAX_ROWS, 2);
    if (forward_set_int8(f, true) != 0) {
        fprintf(stderr, "int8 kernels: %s\n", forward_error(f));
        return 1;
    }
    /* block tables (SC_SEQS, bps): the prompt's sequence (last) has its own
     * blocks; decode sequence s shares blocks 0 .. bps-1 but the one of its
     * position ctx, which is its own */
    const int ps = SC_SEQS - 1, bps = SC_POS_MAX / SC_BS;
    kv_store_t kv = {.n_layer = c->n_layer, .n_blocks = 2 * bps + SC_SEQS, .block_size = SC_BS,
                     .kv_dim = c->kv_dim, .type = KV_TYPE_F16};
    const size_t kvn = (size_t)kv.n_layer * (size_t)kv.n_blocks * SC_BS;
    kv.k = xcalloc(kvn, kv_store_row_bytes(&kv));
    kv.v = xcalloc(kvn, kv_store_row_bytes(&kv));
    int32_t *tables = xmalloc((size_t)SC_SEQS * bps * sizeof(int32_t));
    const int32_t **bt = xmalloc(SC_SEQS * sizeof *bt);
    int32_t *nb = xmalloc(SC_SEQS * sizeof(int32_t));
    for (int s = 0; s < SC_SEQS; s++) {
        for (int i = 0; i < bps; i++)
            tables[s * bps + i] = s == ps ? bps + i : i == ctx / SC_BS ? 2 * bps + s : i;
        bt[s] = tables + (size_t)s * bps;
        nb[s] = bps;
    }
    int32_t tok[SC_MAX_ROWS], pos[SC_MAX_ROWS], seq[SC_MAX_ROWS];
    uint8_t want[SC_MAX_ROWS];
    float *logits = xmalloc((size_t)SC_MAX_ROWS * c->vocab * sizeof(float));
    static double t[2][SC_MAX_REPS], u[2][SC_MAX_REPS];
    const int ab = getenv("AB") != NULL;
    int rc = 0;
    for (char *it = strtok(argv[2], ","); it && rc == 0; it = strtok(NULL, ",")) {
        int D = -1, P = -1;
        if (sscanf(it, "%d:%d", &D, &P) != 2 || D < 0 || P < 0 || D > ps || D + P < 1 || D + P > SC_MAX_ROWS) {
            fprintf(stderr, "bad D:P '%s' (D <= %d, 1 <= D + P <= %d)\n", it, ps, SC_MAX_ROWS);
            rc = 2;
            break;
        }
        int R = 0;
        for (int d = 0; d < D; d++, R++)
            tok[R] = 100 + d, pos[R] = ctx, seq[R] = d, want[R] = 1;
        for (int p = 0; p < P; p++, R++)
            tok[R] = 200 + p, pos[R] = pos0 + p, seq[R] = ps, want[R] = p == P - 1;
        fwd_batch_t b = {.n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                         .n_seq = SC_SEQS, .block_tables = bt, .n_blocks = nb};
        for (int i = -2; i < reps && rc == 0; i++)
            for (int k = 0; k <= ab; k++) {
                if (ab)
                    forward_set_one_region(f, k == 0);
                const double t0 = now_ms(CLOCK_MONOTONIC), u0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
                if (forward_run(f, &b, &kv, logits) != 0) {
                    fprintf(stderr, "step failed: %s\n", forward_error(f));
                    rc = 1;
                    break;
                }
                if (i >= 0) {
                    t[k][i] = now_ms(CLOCK_MONOTONIC) - t0;
                    u[k][i] = now_ms(CLOCK_PROCESS_CPUTIME_ID) - u0;
                }
            }
        for (int k = 0; k <= ab && rc == 0; k++) {
            qsort(t[k], (size_t)reps, sizeof **t, cmp_double);
            qsort(u[k], (size_t)reps, sizeof **u, cmp_double);
            printf("%sD %3d P %3d rows %3d: min %8.2f p50 %8.2f ms (min %.2f ms/row)  cpu min %8.2f p50 %8.2f ms\n",
                   !ab ? "" : k == 0 ? "one-region " : "multi      ", D, P, R, t[k][0], t[k][reps / 2],
                   t[k][0] / R, u[k][0], u[k][reps / 2]);
            fflush(stdout);
        }
    }
    free(kv.k);
    free(kv.v);
    free(tables);
    free(bt);
    free(nb);
    free(logits);
    forward_free(&f);
    engine_free(&e);
    return rc;
}
