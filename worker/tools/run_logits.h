/* run_logits.h — pagoda-run --logits: the logits of every position of one
 * token sequence, written for a reference to compare (tests/large/
 * lora_ref.sh against tests/ref/llama_ref.py).
 *
 * One forward pass over the whole sequence (one sequence, positions 0..n-1,
 * every row wanting logits), with the engine's adapters at their scales on
 * every row (the set pagoda-run --lora gives a prompt) and an F32 KV store.
 * int8: the model's int8 kernels, as the scheduler uses them unless
 * --exact-matmul (forward_set_int8).
 *
 * The file: n * vocab little-endian float32, row-major (position, token):
 * the layout llama_ref.py --out writes. */
#ifndef PAGODA_WORKER_RUN_LOGITS_H
#define PAGODA_WORKER_RUN_LOGITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/engine.h"

/* Parses "1,2,3" into *ids (malloc'd, the caller frees). Returns the count,
 * or -1 with a message in err: empty, not a decimal id, outside
 * [0, vocab), more than max_ids. */
int32_t run_logits_parse_ids(const char *s, int32_t vocab, int32_t max_ids, int32_t **ids, char *err, size_t errlen);

/* Runs ids[0..n) through e's model and writes the logits to path. 0 ok, -1
 * with a message in err (the forward's error, the file's). */
int run_logits_write(const engine_t *e, const int32_t *ids, int32_t n, int n_threads, bool int8, const char *path,
                     char *err, size_t errlen);

#endif
