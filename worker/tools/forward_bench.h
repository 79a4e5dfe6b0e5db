/* forward_bench.h — throughput of the forward pass on a real model file.
 *
 * For each concurrency level n_seq (default 1, 4, 16, 32) it measures
 *   prefill  n_seq prompts of prompt_len random tokens, packed into steps of
 *            at most step_rows rows (chunked prefill, as the scheduler does),
 *            logits wanted for each prompt's last row only;
 *   decode   n_decode steps of one row per sequence continuing those
 *            prompts (logits for every row),
 * and prints one table row per level to `out`:
 *
 *   seqs  prefill tok/s  decode tok/s  decode ms/step
 *
 * Token ids are arbitrary (throughput does not depend on them). The KV store
 * is allocated for exactly the positions used. Nothing here is used by the
 * serving path; pagoda-run --bench calls it.
 */
#ifndef PAGODA_WORKER_FORWARD_BENCH_H
#define PAGODA_WORKER_FORWARD_BENCH_H

#include <stdio.h>

#include "worker/kernels/kv_store.h"

typedef struct forward_bench_opts {
    int n_threads;          /* OpenMP threads (BLAS runs inside them); <= 0: 2 */
    int prompt_len;         /* tokens per prompt; <= 0: 128 */
    int n_decode;           /* decode steps measured; <= 0: 32 */
    int step_rows;          /* max rows per prefill step; <= 0: 512 */
    const int *levels;      /* concurrency levels; NULL: {1, 4, 16, 32} */
    int n_levels;
    kv_type_t kv_type;      /* K/V element type; 0 = KV_TYPE_F32 */
} forward_bench_opts_t;

typedef struct forward_bench_result {
    int n_seq;
    double prefill_tok_s;   /* prompt tokens per second */
    double decode_tok_s;    /* generated tokens per second, all sequences */
    double decode_step_ms;  /* mean wall time of one decode step */
} forward_bench_result_t;

/* Loads model_path, runs every level, prints the table (and a model summary
 * line) to out. results (may be NULL) receives n_levels entries.
 * Returns 0 ok, -1 when the model cannot be loaded or a step fails
 * (message on out). */
int forward_bench_run(const char *model_path, const forward_bench_opts_t *opts, FILE *out,
                      forward_bench_result_t *results);

#endif
