/* lowrank.h — the low-rank updates of LoRA adapters over some rows of a batch.
 *
 * For one adapted matrix W (out, in) with factors
 *     A (r, in)    F32 or F16, row-major (the file's lora_a)
 *     B (out, r)   F32 or F16, row-major (the file's lora_b)
 * and the rows rows[0..n) of a batch (ascending or not, distinct), an
 * update adds
 *     Y[rows[j]] += s · (X[rows[j]] · Aᵀ) · Bᵀ
 * where X (R, in) is the matrix's input and Y (R, out) its output as the
 * base matmul left it (the base product runs once for every row; each
 * adapter's update then touches its own rows only).
 *
 * lowrank_apply does every update of a step's matrix (or of several
 * matrices that share an input, q/k/v or gate/up) in ONE parallel region:
 * a job is one group of rows (the rows of one adapter set) and the pairs of
 * that set for one matrix, applied in order. Two phases, one barrier:
 *   1. t (n, r) = X[rows] · Aᵀ for every job and pair, split over
 *      (job, pair, block of LOWRANK_ROWS rows, block of LOWRANK_KS ranks);
 *   2. Y[rows[j]][o] += s_i · t_i[j] · B_i[o] for every job, pair in order,
 *      split over (job, block of LOWRANK_COLS outputs).
 * Phase 1's outputs are dot products in a fixed order (16 float lanes of
 * fused multiply-adds, lanes l and l + 8 added, a fixed horizontal sum of
 * the 8, then the tail: one zmm on AVX-512, two ymm halves on AVX2, the
 * same bits on every path); phase 2 reads B transposed (bt,
 * made once at load by lowrank_prepare) so that each output is a chain of
 * fused multiply-adds over k = 0..r-1 in order, 16 (AVX2) or 64 (AVX-512)
 * outputs of up to LOWRANK_ROWS rows a register block, no horizontal sums (a rank-8 B row is
 * one vector: summing it per output cost more than the products). Both are
 * computed the same way whichever rows, jobs or threads run beside them: a
 * row's result depends on that row only, bit for bit, so mixing adapters in
 * one batch gives each row what it gets alone. F16 factors are widened exactly (F16C), so they give the bits of
 * F32 factors holding the same values while a step reads half the bytes:
 * at a few rows per adapter the update streams its factors from memory
 * (rank 64 on every projection of a 110M model: 45 MB in F32 per adapter,
 * more than the Q8_0 base's 116 MB once three such adapters run).
 * The update's FLOPs are 2·r·(in + out) per row and pair, small
 * beside the base's 2·in·out when r is small (rank 64 on a 2048×2048
 * matrix: 6%).
 * int8 pairs (lowrank_prepare(lr, 1)) read int8 copies of A and Bᵀ with a
 * scale per row of A and per row of B, converted exactly to float in the
 * same chains: phase 1's dot times a_d[k], phase 2's chain times bt_d[o]
 * before y = fma(s, ·, y). The scalar and AVX2 kernels give the same bits
 * (every product and sum is the same IEEE operation in the same order).
 * lowrank_add_ref is the scalar reference: plain loops, double accumulation
 * (an int8 pair's reference uses its int8 values times their scales).
 *
 * Threads: lowrank_apply runs one OpenMP region of n_threads;
 * lowrank_run_t / lowrank_run_cols run its two phases inside a region the
 * caller opens (the forward pass puts them in its projection's region).
 * Memory: lowrank_apply allocates nothing (the caller owns every buffer);
 * a pair owns the block of copies lowrank_prepare made (Bᵀ: B's bytes
 * again; int8 pairs A, Bᵀ and scales), or borrows the caller's block
 * (lowrank_prepare_in).
 */
#ifndef PAGODA_WORKER_LOWRANK_H
#define PAGODA_WORKER_LOWRANK_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "worker/kernels/matmul.h"
#include "worker/kernels/qgemm.h"

/* The type of an int8 copy (a8, bt of an int8 pair): not a ggml type. */
#define LOWRANK_I8 0x100u

typedef struct lowrank {
    int32_t rank;        /* r (0: no update) */
    float factor;        /* alpha / r, or 1 without alpha: s = scale · factor */
    matmul_weight_t a;   /* F32 or F16 (r, in) */
    matmul_weight_t b;   /* F32 or F16 (out, r) */
    matmul_weight_t bt;  /* in the block of copies: B transposed (r, out), B's type (LOWRANK_I8
                          * for an int8 pair), in panels of LOWRANK_COLS
                          * outputs: the panel of outputs o0.. is
                          * (r, w = min(LOWRANK_COLS, out - o0)) row-major from
                          * element o0 · r (lowrank_prepare; row_bytes is out's) */
    /* int8 pairs only (lowrank_prepare(lr, 1); a8.data NULL otherwise), in
     * the block of copies: */
    matmul_weight_t a8;  /* A rounded to int8 (r, in), LOWRANK_I8 */
    float *a_d;          /* (r) A's row k ≈ a_d[k] · a8's row k */
    float *bt_d;         /* (out) B's row o ≈ bt_d[o] · bt's column o */
    void *own;           /* the block holding the copies above when lowrank_prepare
                          * allocated it (NULL after lowrank_prepare_in) */
} lowrank_t;

/* Makes lr->bt from lr->b (a copy the pair owns: lowrank_release frees it;
 * copies made before are freed first). lowrank_apply reads B through bt, so
 * every pair it is given must have been prepared. int8 != 0 makes an int8
 * pair: A and B rounded to int8 with one scale per row of A and per row of
 * B (d = max |row| / 127, each element within d / 2 of the factor's), which
 * lowrank_apply then reads instead of a and b (a quarter of F32's bytes, half
 * of F16's). Returns 0, -1 a pair lowrank_apply would refuse (then lr is
 * unchanged). */
int lowrank_prepare(lowrank_t *lr, int int8);

/* lowrank_prepare with the copies in mem, the caller's (64-byte aligned,
 * lowrank_copy_bytes of the pair; lowrank_release then frees none of it):
 * an adapter puts all its pairs' copies in one block of huge pages, which
 * the update streams with fewer TLB misses than 4 KiB pages (and the
 * hardware prefetchers stop at page boundaries). */
int lowrank_prepare_in(lowrank_t *lr, int int8, void *mem);

/* The bytes of a prepared pair's copies: rank r, in inputs, out outputs,
 * B of type b_type (0 for r, in or out <= 0). */
size_t lowrank_copy_bytes(int64_t r, int64_t in, int64_t out, uint32_t b_type, int int8);

/* Frees lowrank_prepare's copies (NULL or unprepared: nothing; copies in a
 * caller's block are only forgotten). */
void lowrank_release(lowrank_t *lr);

/* The kernels lowrank_apply runs: QGEMM_ISA_AVX2 (AVX2 + FMA + F16C) when
 * the CPU has it and PAGODA_ISA does not say scalar, else QGEMM_ISA_SCALAR;
 * or what lowrank_set_isa chose. Both give the same bits. */
qgemm_isa_t lowrank_isa(void);

/* Test hook: run isa (QGEMM_ISA_SCALAR or QGEMM_ISA_AVX2; QGEMM_ISA_AUTO:
 * back to the default). 0 ok, -1 another ISA or one the CPU lacks. Not
 * thread-safe against a running lowrank_apply. */
int lowrank_set_isa(qgemm_isa_t isa);

/* Rows, ranks and outputs per task of lowrank_apply (LOWRANK_COLS: also
 * the width of bt's panels). */
#define LOWRANK_ROWS 4
#define LOWRANK_KS 16
#define LOWRANK_COLS 64

/* One group's updates of one matrix: for j < n and i < n_pairs, in order of i,
 *     y[rows[j] * ldy + o] += s[i] · (x[rows[j] * ldx ..] · A_iᵀ) · B_i[o]ᵀ
 * All pairs of a job have the same in (x's width) and out (y's width).
 * Jobs that write the same y must have disjoint rows. Pointers are borrowed. */
typedef struct lowrank_job {
    const float *x;           /* (R, ldx) the matrix's input */
    int64_t ldx;
    float *y;                 /* (R, ldy) its output */
    int64_t ldy;
    const int32_t *rows;      /* (n) distinct row indices */
    int n;
    const lowrank_t *const *pairs;  /* (n_pairs) */
    const float *s;           /* (n_pairs) each pair's scale (scale · factor) */
    int n_pairs;
} lowrank_job_t;

/* Floats of scratch lowrank_apply needs for these jobs: Σ n · Σ rank. */
size_t lowrank_scratch_floats(const lowrank_job_t *jobs, int n_jobs);

/* Applies every job (above) with n_threads threads, t the scratch of at
 * least lowrank_scratch_floats(jobs, n_jobs) floats. Returns 0, -1 bad
 * arguments (n < 0, n_pairs < 0, a factor neither F32 nor F16, shapes that
 * disagree);
 * nothing is written then. */
int lowrank_apply(const lowrank_job_t *jobs, int n_jobs, float *t, int n_threads);

/* lowrank_apply's two phases inside a parallel region the caller runs, so
 * an update shares the region (and the tasks) of the matmul it follows:
 *   before the region: lowrank_check(jobs, n_jobs) == 0,
 *     lowrank_phase_init(&ph, jobs, n_jobs), t of
 *     lowrank_scratch_floats(jobs, n_jobs) floats;
 *   every thread of the region: lowrank_run_t(jobs, n_jobs, t, &ph)
 *     (phase 1: claims its tasks until none is left; returns while other
 *     threads may still run theirs), then work of its own (the matmul);
 *   lowrank_wait_t(&ph) before a thread's first lowrank_run_cols: returns
 *     once every phase 1 task is done (acquire; a short spin, then
 *     sched_yield). No barrier: a thread that is late or descheduled at
 *     the start holds nobody up, the others take its phase 1 tasks;
 *   lowrank_run_cols(jobs, n_jobs, t, o0, o1): phase 2 for outputs
 *     [o0, o1) of every job (o0 a multiple of LOWRANK_COLS; clipped to each
 *     job's out; jobs narrower than o0 add nothing), from any thread.
 *     Calls for disjoint output ranges may run concurrently. jobs may be a
 *     run jobs[j0 ..] of the list phase 1 ran, with t +
 *     lowrank_scratch_floats(jobs, j0).
 * Each output gets the same operations as in lowrank_apply (same bits).
 * lowrank_check returns 0, -1 where lowrank_apply would refuse. */
typedef struct lowrank_phase {
    atomic_llong next;   /* phase 1 tasks claimed */
    atomic_llong done;   /* phase 1 tasks finished */
    int64_t n_tasks;     /* phase 1 tasks of the jobs */
    struct ws_t *ws;     /* NULL: tasks claimed in order from `next`; else
                          * per-thread ranges (lowrank_phase_ranges) */
} lowrank_phase_t;
int lowrank_check(const lowrank_job_t *jobs, int n_jobs);
void lowrank_phase_init(lowrank_phase_t *ph, const lowrank_job_t *jobs, int n_jobs);
/* After lowrank_phase_init: phase 1's tasks in n_threads contiguous ranges
 * of ws (worksteal.h; range t = tasks [n·t / T, n·(t+1) / T) of the order
 * above), thread t taking its own from the front, then stealing: the
 * ranges whose A rows lowrank_prefetch_a queued on each thread while it
 * ran the previous projection's products. ws is the caller's (not the one
 * the region's column tasks use). */
void lowrank_phase_ranges(lowrank_phase_t *ph, struct ws_t *ws, int n_threads);
void lowrank_run_t(const lowrank_job_t *jobs, int n_jobs, float *t, lowrank_phase_t *ph);
void lowrank_wait_t(lowrank_phase_t *ph);
void lowrank_run_cols(const lowrank_job_t *jobs, int n_jobs, const float *t, int64_t o0, int64_t o1);
/* A hint that hides the latency of the update's reads: queues the factor
 * bytes a lowrank_run_cols(jobs, n_jobs, ., o0, o1) will read on the
 * calling thread's prefetch queue (pfqueue.h), which the matmul kernels
 * issue (prefetcht0) between their row blocks. The fused projection calls it
 * before the product of those columns and pfq_drain after it. Changes no
 * result. */
void lowrank_prefetch_cols(const lowrank_job_t *jobs, int n_jobs, int64_t o0, int64_t o1);

/* Queues (pfqueue.h, behind the calling thread's other prefetches:
 * pfq_push_bg) the A rows of the phase 1 tasks of jobs in range part of
 * n_parts (lowrank_phase_ranges' split), its first max_bytes: the thread
 * that will take them first asks for them while it runs the products
 * before. Only the jobs'
 * rows and pairs are read (x and y may be NULL). A hint: changes no
 * result. */
void lowrank_prefetch_a(const lowrank_job_t *jobs, int n_jobs, int part, int n_parts, size_t max_bytes);

/* One pair's update in scalar code with double accumulation (tests, the
 * reference). */
void lowrank_add_ref(const lowrank_t *lr, float s, const float *x, int64_t ldx, const int32_t *rows, int n,
                     float *y, int64_t ldy);

#endif
