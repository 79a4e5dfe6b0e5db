/* forward.h — the batched forward pass over a paged KV cache.
 *
 * One call runs one scheduler step: a batch of n_rows token rows drawn from
 * any number of sequences (decode rows and prefill chunks mixed). Every
 * projection is one matrix multiply over all rows; attention reads each
 * sequence's past K/V through that sequence's block table (kv_store.h).
 *
 * Batch layout (fwd_batch_t), all arrays owned by the caller:
 *
 *   row r (0 <= r < n_rows):
 *     token[r]        token id, 0 <= token < vocab
 *     pos[r]          position in its sequence, 0 <= pos < cfg.ctx
 *     seq[r]          sequence index, 0 <= seq < n_seq
 *     want_logits[r]  nonzero: write this row's logits
 *   sequence s (0 <= s < n_seq):
 *     block_tables[s] logical block -> physical block in the kv_store;
 *                     position p lives in block_tables[s][p / block_size],
 *                     slot p % block_size; when every layer is
 *                     sliding-window (model_kv_window W > 0), entries of
 *                     blocks wholly before pos - W + 1 of the sequence's
 *                     first row are never read and may be -1
 *                     (KV_SEQ_NO_BLOCK: released by the KV pool)
 *     n_blocks[s]     entries in block_tables[s] (may be NULL: then trusted)
 *
 * Semantics: row r's K/V are written to its cache slot for every layer; it
 * attends to positions 0..pos[r] of its sequence (causal). Positions below
 * the batch's own rows must already be in the cache (earlier steps or
 * prefix-cache blocks). Rows of one sequence inside a batch must appear in
 * increasing position order with no gaps; all of them are written before
 * any of them attends, so a prefill chunk sees itself. Rows of different
 * sequences may interleave freely.
 *
 * Output: logits for the rows whose want_logits is set, in row order,
 * (n_wanted, vocab) floats; and, when want_hidden is given, the output of the
 * final norm for the rows whose want_hidden is set into hidden, in row order,
 * (n_hidden, dim) floats (embeddings pool these; a row may want both).
 *
 * Memory: forward_new allocates all scratch for max_rows rows once;
 * forward_run never allocates. The KV store belongs to the caller.
 * Threads: n_threads OpenMP threads for everything, never in one static
 * share per thread: the int8 matmuls, the gate/up tasks and the per-kv-head
 * tasks in per-thread ranges with stealing (worksteal.h), float matmuls in
 * dynamic chunks of W's output rows (single-threaded OpenBLAS inside; see
 * matmul.h — this sets OpenBLAS to 1 thread process-wide), attention one
 * row per dynamic task (attention_row) or, for batches of <= 8 rows, Q/K/V
 * + attention as one task per kv head; 4-5 parallel regions per layer
 * (docs/FORWARD.md).
 */
#ifndef PAGODA_WORKER_FORWARD_H
#define PAGODA_WORKER_FORWARD_H

#include <stdbool.h>
#include <stdint.h>

#include "worker/kernels/kv_store.h"
#include "worker/model/lora.h"
#include "worker/model/model.h"

typedef struct fwd_batch {
    int32_t n_rows;
    const int32_t *token;                /* (n_rows) */
    const int32_t *pos;                  /* (n_rows) */
    const int32_t *seq;                  /* (n_rows) */
    const uint8_t *want_logits;          /* (n_rows) */
    int32_t n_seq;
    const int32_t *const *block_tables;  /* (n_seq) pointers, each (n_blocks[s]) */
    const int32_t *n_blocks;             /* (n_seq) or NULL */
    const uint8_t *want_hidden;          /* (n_rows) or NULL: nonzero = write this row's
                                          * final hidden state (embeddings) */
    float *hidden;                       /* (rows with want_hidden, dim) output, row order:
                                          * rmsnorm(x) * output_norm, what the LM head reads */
    /* LoRA (lora.h): row r runs with the adapters lora_sets[lora_set[r]]
     * (-1: the base alone). NULL lora_set: every row is the base's. */
    const int32_t *lora_set;             /* (n_rows) or NULL */
    int32_t n_lora_sets;
    const lora_set_t *lora_sets;         /* (n_lora_sets) */
    const float *const *embd;            /* (n_rows) or NULL: a non-NULL embd[r] (dim floats,
                                          * an image row from worker/model/vision.h) is row r's
                                          * input instead of token_embd[token[r]], taken as is
                                          * (no embedding scale); token[r] must still be valid */
    const int32_t *att_end;              /* (n_rows) or NULL: row r attends to positions
                                          * < max(pos[r] + 1, att_end[r]) of its sequence
                                          * (an image's rows see the whole image, as llama.cpp
                                          * decodes Gemma 3 images non-causally); the
                                          * positions past pos[r] must be rows of this batch */
} fwd_batch_t;

typedef struct forward forward_t;

/* Scratch for batches of up to max_rows rows (>= 1) on model m (not owned;
 * must outlive the forward_t). n_threads <= 0 means 2. */
forward_t *forward_new(const model_t *m, int max_rows, int n_threads);
void forward_free(forward_t **f);
/* Quantized weights through int8 kernels (see matmul_use_int8): faster,
 * ~0.5% relative error per product; and BF16 weights through AVX512-BF16
 * where the CPU has it (matmul_use_bf16, ≤ 2^-8 relative to Σ|w·x|). On by
 * default in pagoda-worker and pagoda-run (--exact-matmul turns both off);
 * tests comparing against the float reference turn it off.
 * 0 ok, -1 could not allocate the scratch. */
int forward_set_int8(forward_t *f, bool on);

/* Test hook: off (on is the default) makes steps with adapter rows run
 * each projection, then its updates in a region of their own (lowrank_apply)
 * and gate/up unfused, as steps over 64 rows always do; on, steps of up to
 * 64 rows add each update inside its projection's region. Both give the
 * same bits (test_lora checks it). */
void forward_set_lora_fused(forward_t *f, bool on);

/* Test hook: off (on is the default) makes small dense steps without
 * adapters (up to 8 rows) fork and join a parallel region per phase of a
 * layer instead of running every layer in one region with spin-then-yield
 * barriers between the phases. Both give the same bits (test_forward
 * checks it). */
void forward_set_one_region(forward_t *f, bool on);

/* A counter forward_run advances by one after each layer (relaxed atomic
 * add; NULL = none, the default). Another thread reads it to see that a
 * long step is still making progress (worker_link's hang detection). Not
 * owned; must outlive f or be unset. */
void forward_set_progress(forward_t *f, _Atomic uint64_t *layers_done);

/* A word another thread may set FWD_STOP in (the scheduler's preemption
 * word, sched.h): forward_run checks it up to three times per layer (a
 * relaxed load; the bit carries no data, so no ordering is needed) and,
 * once it is set, returns FWD_STOPPED at the next check: between two layers,
 * and inside a layer before its FFN and before the FFN's down projection.
 * Then the K/V of the layers already run is written at the batch's
 * positions (the caller must treat those positions as not computed: they
 * are overwritten when the rows run again) and logits / hidden are not.
 * Never once the last layer's FFN is done: a step that got that far
 * completes. Not owned; NULL (the default) = never. */
#define FWD_STOP 0x80000000u
#define FWD_STOPPED 1
void forward_set_stop(forward_t *f, const _Atomic uint32_t *word);

/* Runs one step. Returns
 *    0  ok: logits holds (number of rows with want_logits, vocab) floats
 *   -1  bad input (row count, token, position, sequence index, block table
 *       entry out of range, or a kv_store whose shape does not fit the
 *       model); nothing was written to the KV store or logits, and
 *       forward_error() says why
 *    1  FWD_STOPPED: stopped at a check (forward_set_stop). */
int forward_run(forward_t *f, const fwd_batch_t *b, const kv_store_t *kv, float *logits);

/* Message of the last failing forward_run (empty string if none). */
const char *forward_error(const forward_t *f);

int forward_max_rows(const forward_t *f);

#endif
