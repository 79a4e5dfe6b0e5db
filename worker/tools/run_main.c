/* run_main.c — pagoda-run: generate text from a GGUF model on the command line.
 *
 *   pagoda-run -m FILE -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P]
 *              [--min-p P] [--seed S] [--chat] [--threads N] [--ignore-eos] [--kv-type auto|f16|f32|q8_0]
 *              [--mmproj MMPROJ.gguf --image FILE.ppm [--dump-image OUT]]
 *   pagoda-run -m FILE --bench [--seqs 1,4,16,32] [--prompt-tokens P] [-n N] [--baseline]
 *   --lora NAME=FILE[:SCALE] (repeatable): a prompt runs with every adapter
 *   given (at most 4); --bench spreads them, sequence i running adapter
 *   i mod (n + 1) (0 = the base model)
 *   pagoda-run [-m FILE] --bench-bandwidth [--threads N]
 *   pagoda-run -m FILE (--tokens 1,2,3 | -p TEXT) --logits OUT.f32 [--lora ...] [--exact-matmul]:
 *   no generation; the logits of every position of the sequence, n x vocab
 *   float32, for a reference to compare (worker/tools/run_logits.h)
 *
 * Only the continuation goes to stdout; diagnostics go to stderr. It runs the
 * same scheduler as pagoda-worker (with one sequence), so what it prints is
 * what the server would stream. --bench measures engine-level prefill and
 * decode throughput at several concurrencies through that scheduler, and the
 * weight-read rate decode achieved (bytes of weights one step reads × steps
 * per second). --bench-bandwidth measures the machine's read bandwidth with
 * the same thread count (a parallel read loop over a buffer several times the
 * last-level cache), so the limit and the achieved rate come from one run;
 * with --bench both are printed.
 *
 * --mmproj and --image: the image (a binary PPM of the projector's input
 * size) goes before the prompt in one user message through the chat
 * template, as llama-mtmd-cli does with one --image (worker/tools/
 * run_image.h); the encode time goes to stderr. --dump-image OUT writes
 * the images the encoder took (an idefics3 picture's tiles and global
 * image) and their rows to OUT (worker/tools/image_dump.h) and exits
 * without generating (-p may then be left out).
 */
#include <omp.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "worker/engine.h"
#include "worker/kernels/qgemm.h"
#include "worker/model/forward.h"
#include "worker/wait_policy.h"
#include "worker/sched.h"
#include "worker/tools/run_image.h"
#include "worker/tools/run_logits.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: pagoda-run -m FILE.gguf -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P]\n"
            "                  [--min-p P] [--seed S] [--chat] [--threads N] [--ignore-eos]\n"
            "                  [--kv-type auto|f16|f32|q8_0] [--mmproj MMPROJ.gguf --image FILE.ppm]\n"
            "                  [--dump-image OUT]  (the encoder's images and rows into OUT, no generation)\n"
            "       pagoda-run -m FILE.gguf --bench [--seqs 1,4,16,32] [--prompt-tokens P] [-n N]\n"
            "                  [--max-batch-tokens N] [--exact-matmul] [--kv-type auto|f16|f32|q8_0] [--baseline]\n"
            "                  [--kv-budget-mb N]  (KV pool budget, default 1024) [--bench-bandwidth]\n"
            "       pagoda-run [-m FILE.gguf] --bench-bandwidth [--threads N]\n"
            "       pagoda-run -m FILE.gguf (--tokens 1,2,3 | -p TEXT) --logits OUT.f32 [--exact-matmul]\n"
            "                  (every position's logits, n x vocab float32; no generation)\n"
            "  --lora NAME=FILE[:SCALE] (repeatable): adapters; --bench spreads them over the sequences\n"
            "       pagoda-run -m FILE.gguf --bench-spec [-n N] [--threads N]\n"
            "  --spec off|ngram|draft (speculative decoding, default off), --draft-model FILE,\n  --spec-max-draft N (8),"
            "  --spec-max-rows N (16: no drafts in steps of more rows)\n"
            "Prints only the continuation on stdout. --temp 0 is greedy and deterministic.\n");
}

struct run_state {
    int32_t n_completion;
    const char *finish;
    int echo;                 /* write text deltas to stdout */
    int64_t t_first_us;       /* clock_now_us() of the first generated token, 0 = none yet */
};

static void on_event(void *ud, const sched_event_t *ev)
{
    struct run_state *rs = ud;
    if (ev->n_tokens > 0 && rs->t_first_us == 0)
        rs->t_first_us = clock_now_us();
    if (rs->echo && ev->text_len) {
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
    }
    if (ev->finish != SCHED_FINISH_NONE) {
        rs->n_completion += ev->n_completion;
        rs->finish = sched_finish_name(ev->finish);
        if (ev->finish == SCHED_FINISH_ERROR)
            log_error("request %llu failed: %s", (unsigned long long)ev->id,
                      ev->error ? ev->error : "error");
    }
}

/* One benchmark run: c sequences of prompt_tokens prompt tokens each
 * generate n_gen tokens with EOS ignored, max_seqs at a time. Prefill rate =
 * prompt tokens / time until every sequence has its first token; decode
 * rate = the remaining generated tokens / the remaining time; overall rate
 * = all generated tokens / wall time. With long prompts the first sequences
 * decode while later ones still prefill, so "decode" then mixes both; the
 * steady rate is the generated tokens per second over the steps in which
 * every sequence is prefilled and none has finished (0 steps when there are
 * none: raise -n above the prefill steps). Returns 0 or -1. */
struct bench_result {
    double prefill_tps, decode_tps, overall_tps, seconds, steady_tps;
    int steady_steps;
    /* paired reads (bench_pair): per steady step, read-pass time ÷ step
     * time, and the read pass's GB/s */
    double *share, *read_gbs;
    int n_pairs;
};

/* Pairing of decode steps with read passes (--bench with
 * --bench-bandwidth): after every steady step, the step's threads read a
 * buffer of the bytes the step read (its own pages, huge where the kernel
 * gives them), so each step is compared with the read speed of the same
 * moment. This host's bandwidth moves between ~45 and ~80 GB/s within
 * seconds, so a limit measured before the run and a decode rate averaged
 * over it are often taken in different phases. */
struct bench_pair {
    uint64_t *buf; /* read_buf_new */
    size_t bytes;  /* a multiple of n_threads * 4096 */
    int n_threads;
    bool vec;      /* read_vec() */
};

static double read_pass(const uint64_t *buf, size_t bytes, int n_threads, bool vec);

static int bench_once(engine_t *e, const sched_config_t *base, int c, int max_seqs,
                      int prompt_tokens, int n_gen, const struct bench_pair *bp, struct bench_result *out)
{
    out->share = out->read_gbs = NULL; /* freed by the caller, also after a failure */
    out->n_pairs = 0;
    sched_config_t cfg = *base;
    cfg.max_seqs = max_seqs;
    if (cfg.max_batch_tokens < max_seqs)
        cfg.max_batch_tokens = max_seqs;
    struct run_state rs = {0};
    char err[256];
    sched_t *s = sched_new(e->model, e->tok, &cfg, on_event, &rs, err, sizeof err);
    if (!s) {
        log_error("%s", err);
        return -1;
    }
    int32_t *prompt = xmalloc((size_t)prompt_tokens * sizeof *prompt);
    for (int i = 0; i < c; i++) {
        uint32_t x = 12345u + 977u * (uint32_t)i;
        for (int k = 0; k < prompt_tokens; k++) {
            x = x * 1664525u + 1013904223u;
            /* avoid control tokens at the bottom of the vocabulary */
            prompt[k] = 3 + (int32_t)((x >> 8) % (uint32_t)(e->model->cfg.vocab - 3));
        }
        if (tokenizer_bos(e->tok) >= 0)
            prompt[0] = tokenizer_bos(e->tok);
        sched_req_t r = {.id = (uint64_t)i + 1, .priority = 1, .prompt = prompt,
                         .n_prompt = prompt_tokens, .max_tokens = n_gen, .ignore_eos = true,
                         .top_logprobs = -1};
        /* with --lora: sequence i runs adapter i mod (n + 1), 0 = the base */
        int ai = e->n_lora > 0 ? i % (e->n_lora + 1) : 0;
        if (ai > 0)
            r.lora = (lora_set_t){.n = 1, .ad = {e->lora[ai - 1].ad}, .scale = {e->lora[ai - 1].scale}};
        sampler_params_default(&r.sampling);
        r.sampling.temperature = 0;
        if (sched_submit(s, &r, err, sizeof err) != 0) {
            log_error("%s", err);
            free(prompt);
            sched_free(&s);
            return -1;
        }
    }
    free(prompt);
    int64_t t0 = clock_now_us(), t_prefilled = 0, t_all = 0;
    uint64_t g_all = 0;
    bool steady_over = false;
    out->steady_steps = 0;
    out->steady_tps = 0;
    out->share = bp ? xmalloc((size_t)n_gen * sizeof *out->share) : NULL;
    out->read_gbs = bp ? xmalloc((size_t)n_gen * sizeof *out->read_gbs) : NULL;
    int64_t t_paused = 0; /* time in read passes, left out of the rates */
    sched_stats_t st;
    int rc = 0;
    while (sched_busy(s)) {
        const int64_t ts = clock_now_us();
        if (sched_step(s) < 0) {
            rc = -1;
            break;
        }
        const int64_t t_step = clock_now_us() - ts;
        sched_stats(s, &st);
        if (bp && t_all && !steady_over && st.n_running == c && out->n_pairs < n_gen && t_step > 0) {
            const int64_t tr = clock_now_us();
            const double secs = read_pass(bp->buf, bp->bytes, bp->n_threads, bp->vec);
            t_paused += clock_now_us() - tr;
            if (secs > 0) {
                out->share[out->n_pairs] = secs * 1e6 / (double)t_step;
                out->read_gbs[out->n_pairs++] = (double)bp->bytes / secs / 1e9;
            }
        }
        if (!t_prefilled && st.generated_tokens >= (uint64_t)c)
            t_prefilled = clock_now_us();
        if (!t_all && st.prompt_tokens >= (uint64_t)c * (uint64_t)prompt_tokens && st.n_running == c) {
            t_all = clock_now_us(); /* every prompt prefilled: all decode from the next step */
            g_all = st.generated_tokens;
        } else if (t_all && !steady_over) {
            if (st.n_running < c) {
                steady_over = true; /* a sequence finished */
            } else {
                out->steady_steps++;
                out->steady_tps =
                    (double)(st.generated_tokens - g_all) / ((double)(clock_now_us() - t_all - t_paused) / 1e6);
            }
        }
    }
    int64_t t1 = clock_now_us() - t_paused;
    sched_stats(s, &st);
    double pre_s = (double)(t_prefilled - t0) / 1e6, dec_s = (double)(t1 - t_prefilled) / 1e6;
    out->prefill_tps = pre_s > 0 ? (double)st.prompt_tokens / pre_s : 0;
    out->decode_tps = dec_s > 0 ? ((double)st.generated_tokens - c) / dec_s : 0;
    out->seconds = (double)(t1 - t0) / 1e6;
    out->overall_tps = out->seconds > 0 ? (double)st.generated_tokens / out->seconds : 0;
    sched_free(&s);
    return rc;
}

/* Bytes of weights one decode step reads, whatever its row count: every
 * layer matrix, the output projection (read even when tied to the
 * embedding, which only a row of is read), and for MoE layers the used
 * share of the experts (n_expert_used / n_expert: on average, for one row).
 * File (GGUF) sizes: the int8 packing of Q8_0 has the same bytes per weight
 * up to its scales. */
static double decode_weight_bytes(const model_t *m)
{
    double n = (double)model_weight_bytes(m) - (double)matmul_weight_bytes(&m->tok_embd);
    if (m->cfg.tied_output)
        n += (double)matmul_weight_bytes(&m->output);
    if (m->cfg.n_expert > 0) {
        double ex = 0;
        for (int l = 0; l < m->cfg.n_layer; l++)
            for (int e = 0; e < m->cfg.n_expert; e++)
                ex += (double)(matmul_weight_bytes(&m->layers[l].exp_gate[e]) +
                               matmul_weight_bytes(&m->layers[l].exp_up[e]) +
                               matmul_weight_bytes(&m->layers[l].exp_down[e]));
        n -= ex * (1.0 - (double)m->cfg.n_expert_used / m->cfg.n_expert);
    }
    return n;
}

/* One pass of the read loops over [p, p + n) (n a multiple of 256 bytes):
 * kind 0 sums 64-bit words in 8 independent chains; kind 1 (AVX2) adds
 * 32-byte loads into 4 vector accumulators. Which one reads faster differs
 * between machines and moments, so the bandwidth takes the best of both. */
static uint64_t read_words(const uint64_t *p, size_t n)
{
    uint64_t total = 0;
    for (size_t i = 0; i < n / 8; i += 8)
        total += p[i] + p[i + 1] + p[i + 2] + p[i + 3] + p[i + 4] + p[i + 5] + p[i + 6] + p[i + 7];
    return total;
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t read_ymm(const uint64_t *p, size_t n)
{
    const char *b = (const char *)p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(const void *)(b + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(const void *)(b + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(const void *)(b + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(const void *)(b + i + 96)));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    return (uint64_t)_mm256_extract_epi64(s, 0) + (uint64_t)_mm256_extract_epi64(s, 1) +
           (uint64_t)_mm256_extract_epi64(s, 2) + (uint64_t)_mm256_extract_epi64(s, 3);
}
#endif

/* bytes (a multiple of n_threads * 4096) allocated as the packed weights
 * are (huge pages where the kernel gives them: 4 KiB pages read ~10 %
 * slower here), every page written by the thread that will read it. */
static uint64_t *read_buf_new(size_t bytes, int n_threads)
{
    uint64_t *buf = xhuge_alloc(bytes);
    const size_t n = bytes / sizeof(uint64_t);
#pragma omp parallel for num_threads(n_threads) schedule(static)
    for (size_t i = 0; i < n; i++)
        buf[i] = i * 0x9E3779B97F4A7C15ull;
    return buf;
}

/* Whether read_pass can take its AVX2 loop on this CPU. */
static bool read_vec(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

/* One pass over buf (read_buf_new's bytes) by n_threads threads, each its
 * contiguous share: read_ymm when vec, read_words otherwise. Returns the
 * seconds it took (0 when the clock did not move). */
static double read_pass(const uint64_t *buf, size_t bytes, int n_threads, bool vec)
{
    const size_t share = bytes / (size_t)n_threads;
    uint64_t total = 0;
    int64_t t0 = clock_now_us();
#pragma omp parallel num_threads(n_threads) reduction(+ : total)
    {
        const uint64_t *p = buf + (size_t)omp_get_thread_num() * (share / sizeof(uint64_t));
#if defined(__x86_64__)
        total += vec ? read_ymm(p, share) : read_words(p, share);
#else
        (void)vec;
        total += read_words(p, share);
#endif
    }
    int64_t dt = clock_now_us() - t0;
    static volatile uint64_t sink;
    sink += total;
    return (double)dt / 1e6;
}

/* Read bandwidth with n_threads threads: each reads its contiguous share of
 * a read_buf_new buffer of 4x the last-level cache (512 MiB .. 2 GiB). 12
 * passes, alternating the two loops of read_words / read_ymm; the best pass
 * counts (a pass = the whole buffer once). Returns GB/s (1e9). */
static double bench_bandwidth(int n_threads)
{
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t bytes = llc > 0 ? (size_t)llc * 4 : (size_t)1 << 30;
    if (bytes < ((size_t)512 << 20))
        bytes = (size_t)512 << 20;
    if (bytes > ((size_t)2 << 30))
        bytes = (size_t)2 << 30;
    bytes = bytes / ((size_t)n_threads * 4096) * ((size_t)n_threads * 4096);
    uint64_t *buf = read_buf_new(bytes, n_threads);
    const bool ymm = read_vec();
    double best = 0;
    for (int pass = 0; pass < 12; pass++) {
        const double secs = read_pass(buf, bytes, n_threads, ymm && pass % 2 == 1);
        double gbs = secs > 0 ? (double)bytes / secs / 1e9 : 0;
        if (gbs > best)
            best = gbs;
    }
    printf("# read bandwidth: %.1f GB/s (%d threads, %.0f MiB buffer, best of 12 passes of two read loops)\n", best,
           n_threads, (double)bytes / 1048576.0);
    fflush(stdout);
    free(buf);
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The q-quantile (0..1) of v (n ≥ 1 values, sorted ascending). */
static double quantile(const double *v, int n, double q)
{
    return v[(int)(q * (n - 1) + 0.5)];
}

/* Engine benchmark over a list of concurrencies; with `baseline`, each is
 * also run with batching off (--max-seqs 1) and the speedup printed. */
static int run_bench(engine_t *e, const sched_config_t *base, const char *seqs_list,
                     int prompt_tokens, int n_gen, int baseline, double bw_gbs)
{
    const double wbytes = decode_weight_bytes(e->model);
    printf("# %s, %d prompt tokens, %d new tokens per sequence, %d threads, %s KV, isa %s\n",
           model_arch_name(e->model->cfg.arch), prompt_tokens, n_gen,
           base->n_threads, kv_type_name(sched_kv_type_for(e->model, base->kv_type, !base->exact_matmul)),
           base->exact_matmul ? "exact" : qgemm_isa_name(qgemm_isa_default()));
    printf("# weights read per decode step: %.1f MB\n", wbytes / 1e6);
    printf("%-6s %12s %12s %12s %10s %10s", "seqs", "prefill t/s", "decode t/s", "overall t/s",
           "seconds", "wt GB/s");
    if (bw_gbs > 0)
        printf(" %8s", "of limit");
    if (baseline)
        printf(" %14s %8s", "max-seqs-1 t/s", "speedup");
    printf("\n");
    /* with --bench-bandwidth, pair every steady step with a read pass of
     * its bytes (bench_pair) when they exceed the last-level cache (as the
     * OS reports it: on a VM that is often the whole socket's, 384 MiB here,
     * more than the 32 MiB a core's complex has) */
    struct bench_pair pair = {0}, *bp = NULL;
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const size_t unit = (size_t)base->n_threads * 4096;
    if (bw_gbs > 0 && wbytes > (double)(llc > 0 ? llc : 32 << 20)) {
        pair.n_threads = base->n_threads;
        pair.bytes = ((size_t)wbytes + unit - 1) / unit * unit;
        pair.buf = read_buf_new(pair.bytes, pair.n_threads);
        pair.vec = read_vec();
        bp = &pair;
    } else if (bw_gbs > 0) {
        printf("# no paired read passes: the step's %.1f MB fit in the last-level cache\n", wbytes / 1e6);
    }
    char *list = xstrdup(seqs_list);
    int rc = 0;
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int c = atoi(tok);
        if (c < 1)
            continue;
        struct bench_result r, b;
        if (bench_once(e, base, c, c, prompt_tokens, n_gen, bp, &r) != 0) {
            free(r.share);
            free(r.read_gbs);
            rc = 1;
            break;
        }
        /* one decode step reads the weights once for its c rows */
        double gbs = wbytes * (r.decode_tps / c) / 1e9;
        printf("%-6d %12.1f %12.1f %12.1f %10.2f %10.1f", c, r.prefill_tps, r.decode_tps,
               r.overall_tps, r.seconds, gbs);
        if (bw_gbs > 0)
            printf(" %7.0f%%", 100.0 * gbs / bw_gbs);
        if (baseline) {
            if (bench_once(e, base, c, 1, prompt_tokens, n_gen, NULL, &b) != 0) {
                free(r.share);
                free(r.read_gbs);
                rc = 1;
                break;
            }
            printf(" %14.1f %7.2fx", b.overall_tps,
                   b.overall_tps > 0 ? r.overall_tps / b.overall_tps : 0.0);
        }
        printf("\n");
        if (r.steady_steps > 0)
            printf("#   steady decode (all %d prefilled, none finished): %.1f tok/s over %d steps\n", c,
                   r.steady_tps, r.steady_steps);
        if (r.n_pairs > 0) {
            qsort(r.share, (size_t)r.n_pairs, sizeof *r.share, cmp_double);
            qsort(r.read_gbs, (size_t)r.n_pairs, sizeof *r.read_gbs, cmp_double);
            double q1 = quantile(r.share, r.n_pairs, 0.25), q2 = quantile(r.share, r.n_pairs, 0.5),
                   q3 = quantile(r.share, r.n_pairs, 0.75);
            printf("#   paired: decode at %.0f%% of the read speed of the same moment (median of %d steps each "
                   "followed by a read pass of %.1f MB; quartiles %.0f-%.0f%%; read passes median %.1f GB/s)\n",
                   100 * q2, r.n_pairs, (double)pair.bytes / 1e6, 100 * q1, 100 * q3,
                   quantile(r.read_gbs, r.n_pairs, 0.5));
        }
        free(r.share);
        free(r.read_gbs);
        fflush(stdout);
    }
    free(list);
    free(pair.buf);
    return rc;
}

/* ---- --bench-spec: speculative decoding's mechanism and n-gram acceptance ---- */

/* The oracle: the known greedy continuation (prompt + output of a run
 * without speculation); `wrong` proposes a token that is never it. */
struct oracle {
    const int32_t *ref;
    int32_t n_ref;
    int32_t vocab;
    bool wrong;
};

static int32_t oracle_draft(void *ud, uint64_t id, int32_t index, const int32_t *tokens, int32_t n_tokens,
                            int32_t max_draft, int32_t *out)
{
    const struct oracle *o = ud;
    int32_t k = 0;
    for (int32_t p = n_tokens; p < o->n_ref && k < max_draft; p++)
        out[k++] = o->wrong ? (o->ref[p] + 1) % o->vocab : o->ref[p];
    return k;
}

struct spec_run {
    int64_t t_first_us, t_end_us; /* first token, last event */
    int32_t *toks;                /* generated ids */
    int32_t n_toks, cap_toks;
};

static void on_event_spec(void *ud, const sched_event_t *ev)
{
    struct spec_run *r = ud;
    for (int32_t i = 0; i < ev->n_tokens; i++) {
        if (r->n_toks == r->cap_toks) {
            r->cap_toks = r->cap_toks ? r->cap_toks * 2 : 256;
            r->toks = xrealloc(r->toks, (size_t)r->cap_toks * sizeof *r->toks);
        }
        r->toks[r->n_toks++] = ev->tokens[i];
    }
    if (ev->n_tokens > 0 && !r->t_first_us)
        r->t_first_us = clock_now_us();
    r->t_end_us = clock_now_us();
}

/* One greedy sequence of prompt → n_gen tokens (EOS ignored) with cfg and
 * drafter (NULL: the configured mode). Fills out (generated ids, times) and
 * *st; returns decode seconds per step after the first token, or -1. */
static double spec_run_seqs(engine_t *e, const sched_config_t *cfg, const int32_t *prompt, int32_t n_prompt,
                            int n_gen, int n_seqs, struct oracle *o, struct spec_run *out, sched_stats_t *st)
{
    char err[256];
    memset(out, 0, sizeof *out);
    sched_config_t c = *cfg;
    if (c.max_seqs < n_seqs)
        c.max_seqs = n_seqs;
    sched_t *s = sched_new(e->model, e->tok, &c, on_event_spec, out, err, sizeof err);
    if (!s) {
        log_error("%s", err);
        return -1;
    }
    if (o)
        sched_set_drafter(s, oracle_draft, o);
    for (int i = 0; i < n_seqs; i++) {
        sched_req_t r = {.id = (uint64_t)i + 1, .priority = 1, .prompt = prompt, .n_prompt = n_prompt,
                         .max_tokens = n_gen, .ignore_eos = true, .top_logprobs = -1};
        sampler_params_default(&r.sampling);
        r.sampling.temperature = 0;
        if (sched_submit(s, &r, err, sizeof err) != 0) {
            log_error("%s", err);
            sched_free(&s);
            return -1;
        }
    }
    uint64_t steps_at_first = 0;
    while (sched_busy(s)) {
        if (sched_step(s) < 0)
            break;
        if (!steps_at_first && out->n_toks > 0) {
            sched_stats(s, st);
            steps_at_first = st->steps;
        }
    }
    sched_stats(s, st);
    sched_free(&s);
    uint64_t steps = st->steps - steps_at_first;
    return steps > 0 ? (double)(out->t_end_us - out->t_first_us) / 1e6 / (double)steps : -1;
}

static double spec_once(engine_t *e, const sched_config_t *cfg, const int32_t *prompt, int32_t n_prompt,
                        int n_gen, struct oracle *o, struct spec_run *out, sched_stats_t *st)
{
    return spec_run_seqs(e, cfg, prompt, n_prompt, n_gen, 1, o, out, st);
}

/* Decode tok/s of n_seqs greedy sequences (after the first token; all the
 * sequences' tokens) with the configuration c and drafter o (NULL: none). */
static double spec_tps(engine_t *e, const sched_config_t *c, const int32_t *prompt, int32_t n_prompt, int n_gen,
                       int n_seqs, struct oracle *o, sched_stats_t *st)
{
    struct spec_run run;
    spec_run_seqs(e, c, prompt, n_prompt, n_gen, n_seqs, o, &run, st);
    double secs = (double)(run.t_end_us - run.t_first_us) / 1e6;
    double tps = secs > 0 ? (run.n_toks - n_seqs) / secs : 0;
    free(run.toks);
    return tps;
}

static const char *const spec_prompts[] = {
    "Once upon a time, there was a little girl named Lily. She loved to play outside",
    "One day, a boy named Tom went to the park with his mom. He saw a big red ball",
    "There was a cat who lived in a small house. The cat liked to sleep in the sun",
    "Sam and his dog went for a walk in the forest. They found a shiny stone",
};

/* Prints the verify-cost curve (time of a decode step with k draft rows
 * that are all accepted ÷ a one-row step, k = 1..8, one sequence), the
 * oracle's and an always-wrong drafter's decode rate against no
 * speculation, and the n-gram drafter's acceptance on story continuations
 * (greedy; outputs checked equal to the run without speculation). */
static int run_bench_spec(engine_t *e, const sched_config_t *base, int n_gen)
{
    sched_config_t off = *base;
    off.spec = SPEC_OFF;
    off.max_seqs = 1;
    struct spec_run ref, run;
    sched_stats_t st;
    int32_t *prompt = NULL;
    char err[256];
    int rc = 0;
    int32_t n_prompt = engine_prompt_text(e, spec_prompts[0], strlen(spec_prompts[0]), &prompt, err, sizeof err);
    if (n_prompt < 0) {
        log_error("%s", err);
        return 1;
    }
    /* a warm-up run first (threads, page faults), then the reference */
    double t1 = spec_once(e, &off, prompt, n_prompt, n_gen, NULL, &ref, &st);
    free(ref.toks);
    t1 = spec_once(e, &off, prompt, n_prompt, n_gen, NULL, &ref, &st);
    if (t1 <= 0) {
        free(prompt);
        return 1;
    }
    int32_t n_ref = n_prompt + ref.n_toks;
    int32_t *full = xmalloc((size_t)n_ref * sizeof *full);
    memcpy(full, prompt, (size_t)n_prompt * sizeof *full);
    memcpy(full + n_prompt, ref.toks, (size_t)ref.n_toks * sizeof *full);
    struct oracle o = {.ref = full, .n_ref = n_ref, .vocab = e->model->cfg.vocab};
    printf("# %s, %d threads, %d new tokens, 1 sequence, greedy; no speculation: %.3f ms/step, %.1f tok/s\n",
           model_arch_name(e->model->cfg.arch), base->n_threads, n_gen, t1 * 1e3, 1.0 / t1);
    printf("%-3s %12s %14s %12s %10s\n", "k", "ms/step", "step / 1-row", "tok/s", "speedup");
    for (int k = 1; k <= 8; k++) {
        sched_config_t c = off;
        c.spec_max_draft = k;
        c.spec_max_rows = k + 1;
        c.spec_fixed = true;
        double tk = spec_once(e, &c, prompt, n_prompt, n_gen, &o, &run, &st);
        double secs = (double)(run.t_end_us - run.t_first_us) / 1e6;
        double tps = secs > 0 ? (run.n_toks - 1) / secs : 0;
        bool same = run.n_toks == ref.n_toks && !memcmp(run.toks, ref.toks, (size_t)ref.n_toks * sizeof(int32_t));
        printf("%-3d %12.3f %14.2f %12.1f %9.2fx%s\n", k, tk * 1e3, tk / t1, tps, tps * t1,
               same ? "" : "  OUTPUT DIFFERS");
        rc |= !same;
        free(run.toks);
    }
    /* adaptive length with drafts that are always wrong: what speculation
     * costs, at 1 and 32 sequences; runs with and without alternate (3
     * pairs) and the median of the per-pair ratios counts */
    for (int ns = 1; ns <= 32; ns += 31) {
        sched_config_t c = off, c_off = off;
        c.spec = SPEC_NGRAM;
        double ratio[3], tw = 0, to = 0;
        for (int i = 0; i < 3; i++) {
            o.wrong = false;
            to = spec_tps(e, &c_off, prompt, n_prompt, n_gen, ns, NULL, &st);
            o.wrong = true;
            tw = spec_tps(e, &c, prompt, n_prompt, n_gen, ns, &o, &st);
            ratio[i] = to > 0 ? tw / to : 0;
        }
        qsort(ratio, 3, sizeof ratio[0], cmp_double);
        printf("# always-wrong drafts, %d sequence%s (adaptive length, max %d, no drafts in steps over %d rows): "
               "%.3fx no speculation (median of 3 alternating pairs; last pair %.1f / %.1f tok/s); %llu drafts, "
               "%llu draft tokens in the last run\n",
               ns, ns > 1 ? "s" : "", c.spec_max_draft, c.spec_max_rows, ratio[1], tw, to,
               (unsigned long long)st.spec_drafts, (unsigned long long)st.spec_draft_tokens);
    }
    o.wrong = false;
    free(full);
    free(ref.toks);
    free(prompt);
    /* n-gram acceptance on story continuations */
    printf("%-7s %10s %12s %10s %12s %10s\n", "prompt", "drafts", "draft toks", "accepted", "accept rate", "tok/s x");
    uint64_t all_d = 0, all_a = 0;
    for (size_t i = 0; i < sizeof spec_prompts / sizeof *spec_prompts; i++) {
        n_prompt = engine_prompt_text(e, spec_prompts[i], strlen(spec_prompts[i]), &prompt, err, sizeof err);
        if (n_prompt < 0)
            return 1;
        double a = spec_once(e, &off, prompt, n_prompt, n_gen, NULL, &ref, &st);
        double ta = (double)(ref.t_end_us - ref.t_first_us) / 1e6;
        sched_config_t c = off;
        c.spec = base->spec == SPEC_DRAFT ? SPEC_DRAFT : SPEC_NGRAM;
        spec_once(e, &c, prompt, n_prompt, n_gen, NULL, &run, &st);
        double tb = (double)(run.t_end_us - run.t_first_us) / 1e6;
        bool same = run.n_toks == ref.n_toks && !memcmp(run.toks, ref.toks, (size_t)ref.n_toks * sizeof(int32_t));
        printf("%-7zu %10llu %12llu %10llu %11.1f%% %9.2fx%s\n", i, (unsigned long long)st.spec_drafts,
               (unsigned long long)st.spec_draft_tokens, (unsigned long long)st.spec_accepted_tokens,
               st.spec_draft_tokens ? 100.0 * (double)st.spec_accepted_tokens / (double)st.spec_draft_tokens : 0.0,
               a > 0 && tb > 0 ? ta / tb : 0.0, same ? "" : "  OUTPUT DIFFERS");
        rc |= !same;
        all_d += st.spec_draft_tokens;
        all_a += st.spec_accepted_tokens;
        free(run.toks);
        free(ref.toks);
        free(prompt);
    }
    printf("# %s acceptance over all prompts: %.1f%% of %llu draft tokens\n",
           base->spec == SPEC_DRAFT ? "draft-model" : "n-gram",
           all_d ? 100.0 * (double)all_a / (double)all_d : 0.0, (unsigned long long)all_d);
    return rc;
}

/* What the command line asks for. */
typedef struct run_opts {
    const char *model, *prompt, *seqs, *draft_path;
    const char *mmproj, *image; /* --mmproj, --image */
    const char *dump_image;     /* --dump-image: NULL, or the file for the encoder's images and rows */
    const char *logits, *tokens; /* --logits OUT, --tokens IDS */
    int n, chat, bench, bench_bw, bench_spec, prompt_tokens, ignore_eos, baseline;
    sampler_params_t sp;
    sched_config_t cfg;
    const char *loras[LORA_MAX_ADAPTERS]; /* --lora NAME=FILE[:SCALE], (n_loras) */
    int n_loras;
} run_opts_t;

/* Fills *o from argv. Returns -1 to go on, else the exit code (--help, a
 * bad value). */
static int parse_args(int argc, char **argv, run_opts_t *o)
{
    *o = (run_opts_t){.seqs = "1,4,16,32", .n = 128, .prompt_tokens = 32};
    sampler_params_default(&o->sp);
    o->sp.temperature = 0.8f;
    sched_config_default(&o->cfg);
    o->cfg.max_seqs = 1;
    sampler_params_t *sp = &o->sp;
    sched_config_t *cfg = &o->cfg;
    enum { O_TEMP = 256, O_TOPK, O_TOPP, O_MINP, O_SEED, O_CHAT, O_THREADS, O_BENCH, O_SEQS,
           O_PTOK, O_IGNORE_EOS, O_MBT, O_REP, O_EXACT, O_BASELINE, O_KVTYPE, O_KVMB, O_BENCH_BW, O_SPEC, O_SPEC_MAX, O_SPEC_ROWS, O_BENCH_SPEC, O_DRAFT, O_LORA,
           O_MMPROJ, O_IMAGE, O_DUMP_IMAGE, O_LOGITS, O_TOKENS };
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},     {"prompt", required_argument, 0, 'p'},
        {"n-predict", required_argument, 0, 'n'}, {"temp", required_argument, 0, O_TEMP},
        {"top-k", required_argument, 0, O_TOPK},  {"top-p", required_argument, 0, O_TOPP},
        {"min-p", required_argument, 0, O_MINP},  {"seed", required_argument, 0, O_SEED},
        {"repeat-penalty", required_argument, 0, O_REP},
        {"chat", no_argument, 0, O_CHAT},         {"threads", required_argument, 0, O_THREADS},
        {"bench", no_argument, 0, O_BENCH},       {"seqs", required_argument, 0, O_SEQS},
        {"prompt-tokens", required_argument, 0, O_PTOK},
        {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"max-batch-tokens", required_argument, 0, O_MBT},
        {"exact-matmul", no_argument, 0, O_EXACT},
        {"kv-type", required_argument, 0, O_KVTYPE},
        {"kv-budget-mb", required_argument, 0, O_KVMB},
        {"baseline", no_argument, 0, O_BASELINE},
        {"bench-bandwidth", no_argument, 0, O_BENCH_BW},
        {"spec", required_argument, 0, O_SPEC},
        {"spec-max-draft", required_argument, 0, O_SPEC_MAX},
        {"spec-max-rows", required_argument, 0, O_SPEC_ROWS},
        {"bench-spec", no_argument, 0, O_BENCH_SPEC},
        {"draft-model", required_argument, 0, O_DRAFT},
        {"lora", required_argument, 0, O_LORA},
        {"mmproj", required_argument, 0, O_MMPROJ},
        {"image", required_argument, 0, O_IMAGE},
        {"dump-image", required_argument, 0, O_DUMP_IMAGE},
        {"logits", required_argument, 0, O_LOGITS},
        {"tokens", required_argument, 0, O_TOKENS},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "m:p:n:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': o->model = optarg; break;
        case O_LORA:
            if (o->n_loras >= LORA_MAX_ADAPTERS) {
                fprintf(stderr, "pagoda-run: at most %d --lora\n", LORA_MAX_ADAPTERS);
                return 2;
            }
            o->loras[o->n_loras++] = optarg;
            break;
        case 'p': o->prompt = optarg; break;
        case 'n': o->n = atoi(optarg); break;
        case O_TEMP: sp->temperature = strtof(optarg, NULL); break;
        case O_TOPK: sp->top_k = atoi(optarg); break;
        case O_TOPP: sp->top_p = strtof(optarg, NULL); break;
        case O_MINP: sp->min_p = strtof(optarg, NULL); break;
        case O_REP: sp->repetition_penalty = strtof(optarg, NULL); break;
        case O_SEED: sp->seed = strtoull(optarg, NULL, 10); sp->has_seed = true; break;
        case O_CHAT: o->chat = 1; break;
        case 't':
        case O_THREADS: cfg->n_threads = atoi(optarg); break;
        case O_BENCH: o->bench = 1; break;
        case O_SEQS: o->seqs = optarg; break;
        case O_PTOK: o->prompt_tokens = atoi(optarg); break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
        case O_MBT: cfg->max_batch_tokens = atoi(optarg); break;
        case O_EXACT: cfg->exact_matmul = true; break;
        case O_KVTYPE:
            if (kv_type_parse(optarg, &cfg->kv_type) != 0) {
                fprintf(stderr, "pagoda-run: --kv-type must be auto, f16, f32 or q8_0\n");
                return 2;
            }
            break;
        case O_KVMB: cfg->kv_budget_bytes = (size_t)strtoull(optarg, NULL, 10) << 20; break;
        case O_BASELINE: o->baseline = 1; break;
        case O_BENCH_BW: o->bench_bw = 1; break;
        case O_SPEC:
            if (spec_mode_parse(optarg, &cfg->spec) != 0) {
                fprintf(stderr, "pagoda-run: --spec must be off, ngram or draft\n");
                return 2;
            }
            break;
        case O_SPEC_MAX: cfg->spec_max_draft = atoi(optarg); break;
        case O_SPEC_ROWS: cfg->spec_max_rows = atoi(optarg); break;
        case O_BENCH_SPEC: o->bench_spec = 1; break;
        case O_DRAFT: o->draft_path = optarg; cfg->spec = SPEC_DRAFT; break;
        case O_MMPROJ: o->mmproj = optarg; break;
        case O_IMAGE: o->image = optarg; break;
        case O_DUMP_IMAGE: o->dump_image = optarg; break;
        case O_LOGITS: o->logits = optarg; break;
        case O_TOKENS: o->tokens = optarg; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    return -1;
}

/* One prompt through the scheduler, its continuation on stdout. Returns the
 * exit code. */
static int generate(engine_t *e, engine_t *draft, run_opts_t *o)
{
    char err[512];
    int32_t *ids = NULL;
    int32_t n_ids;
    int64_t t_begin = clock_now_us(); /* TTFT: from here (after the projector's load), the encode counts */
    vision_t *vis = NULL;
    float *img_embd = NULL;
    sched_image_t *imgs = NULL;
    int n_imgs = 0;
    if (o->image) {
        int64_t t_enc = 0;
        if (vision_load(o->mmproj, o->cfg.n_threads, &vis, err, sizeof err) != 0) {
            fprintf(stderr, "pagoda-run: %s: %s\n", o->mmproj, err);
            return 1;
        }
        vision_set_fast(vis, !o->cfg.exact_matmul); /* the text model's rule: int8 / bf16 unless --exact-matmul */
        t_begin = clock_now_us();
        n_ids = run_image_prompt(e, vis, o->image, o->prompt ? o->prompt : "", &ids, &imgs, &n_imgs, &img_embd,
                                 &t_enc, o->dump_image, err, sizeof err);
        vision_free(&vis);
        if (n_ids >= 0)
            fprintf(stderr, "pagoda-run: image encoded in %.1f ms (%d x %d rows)\n", (double)t_enc / 1e3, n_imgs,
                    imgs[0].n_tok);
        if (n_ids >= 0 && o->dump_image) {
            fprintf(stderr, "pagoda-run: wrote %s\n", o->dump_image);
            free(ids);
            free(img_embd);
            free(imgs);
            return 0;
        }
        o->chat = 1; /* the template's turn ends stop it */
    } else if (o->chat) {
        chat_msg_t m = {.role = "user", .content = o->prompt};
        n_ids = engine_prompt_chat(e, &m, 1, NULL, &ids, err, sizeof err);
    } else {
        n_ids = engine_prompt_text(e, o->prompt, strlen(o->prompt), &ids, err, sizeof err);
    }
    if (n_ids < 0) {
        fprintf(stderr, "pagoda-run: %s\n", err);
        return 2;
    }
    struct run_state rs = {.echo = 1};
    if (draft && sched_draft_check(e->model, e->tok, draft->model, draft->tok, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-run: %s\n", err);
        free(ids);
        return 1;
    }
    sched_t *s = sched_new(e->model, e->tok, &o->cfg, on_event, &rs, err, sizeof err);
    int rc = 0;
    if (!s) {
        fprintf(stderr, "pagoda-run: %s\n", err);
        rc = 1;
        goto out;
    }
    sched_req_t r = {.id = 1, .priority = 1, .prompt = ids, .n_prompt = n_ids, .max_tokens = o->n,
                     .ignore_eos = o->ignore_eos, .sampling = o->sp, .top_logprobs = -1,
                     .stop_ids = o->chat ? e->turn_end_ids : NULL,
                     .n_stop_ids = o->chat ? e->n_turn_end : 0,
                     .images = imgs, .n_images = n_imgs};
    /* --lora: the prompt runs with every adapter given (at most LORA_SET_MAX) */
    for (int32_t i = 0; i < e->n_lora && i < LORA_SET_MAX; i++) {
        r.lora.ad[i] = e->lora[i].ad;
        r.lora.scale[i] = e->lora[i].scale;
        r.lora.n++;
    }
    if (sched_submit(s, &r, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-run: %s\n", err);
        rc = 2;
        goto out;
    }
    int64_t t0 = clock_now_us();
    while (sched_busy(s))
        if (sched_step(s) < 0) {
            rc = 1;
            break;
        }
    double dt = (double)(clock_now_us() - t0) / 1e6;
    if (isatty(STDOUT_FILENO))
        printf("\n"); /* only for a person at a terminal: pipes get the continuation alone */
    fprintf(stderr, "pagoda-run: %d prompt tokens, %d generated in %.2f s (%.1f tok/s), finish: %s, "
            "first token after %.1f ms\n",
            n_ids, rs.n_completion, dt, dt > 0 ? rs.n_completion / dt : 0.0,
            rs.finish ? rs.finish : "?", rs.t_first_us ? (double)(rs.t_first_us - t_begin) / 1e3 : 0.0);
    if (o->cfg.spec != SPEC_OFF) {
        sched_stats_t st;
        sched_stats(s, &st);
        fprintf(stderr, "pagoda-run: speculation %s: %llu of %llu draft tokens accepted in %llu steps\n",
                spec_mode_name(o->cfg.spec), (unsigned long long)st.spec_accepted_tokens,
                (unsigned long long)st.spec_draft_tokens, (unsigned long long)st.steps);
    }
out:
    sched_free(&s);
    free(ids);
    free(img_embd);
    free(imgs);
    return rc;
}

/* --logits: the sequence (--tokens, else -p tokenized as a prompt) and its
 * logits written. Returns the exit code. */
static int dump_logits(engine_t *e, run_opts_t *o)
{
    char err[512];
    int32_t *ids = NULL;
    int32_t n = o->tokens ? run_logits_parse_ids(o->tokens, e->model->cfg.vocab, e->model->cfg.ctx, &ids, err,
                                                 sizeof err)
                          : engine_prompt_text(e, o->prompt, strlen(o->prompt), &ids, err, sizeof err);
    if (n < 0) {
        fprintf(stderr, "pagoda-run: %s\n", err);
        return 2;
    }
    int rc = 0;
    if (run_logits_write(e, ids, n, o->cfg.n_threads, !o->cfg.exact_matmul, o->logits, err, sizeof err) != 0) {
        fprintf(stderr, "pagoda-run: %s\n", err);
        rc = 1;
    } else {
        fprintf(stderr, "pagoda-run: wrote %d x %d logits (%s kernels) to %s\n", n, e->model->cfg.vocab,
                o->cfg.exact_matmul ? "float" : "int8", o->logits);
    }
    free(ids);
    return rc;
}

/* The model (or the draft model) loaded and, unless --exact-matmul, packed;
 * NULL after printing why. */
static engine_t *load(const char *path, const char *what, const sched_config_t *cfg)
{
    char err[512];
    engine_t *e = engine_load(path, err, sizeof err);
    if (!e) {
        fprintf(stderr, "pagoda-run: %s%s\n", what, err);
        return NULL;
    }
    if (!cfg->exact_matmul)
        engine_pack_int8(e, cfg->n_threads);
    return e;
}

int main(int argc, char **argv)
{
    /* OpenMP threads that spin while idle steal the core the other process
     * (gateway, client, another worker) needs: re-exec once with a passive
     * wait policy unless the environment already chose one. */
    wait_policy_reexec(argv);
    log_init("pagoda-run", LOG_WARN);
    run_opts_t o;
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;
    sched_config_t *cfg = &o.cfg;
    engine_t *draft = NULL, *e = NULL;
    char err[512];
    if (o.draft_path) {
        if (!(draft = load(o.draft_path, "draft model: ", cfg)))
            return 1;
        cfg->draft_model = draft->model;
    }
    if (o.bench_spec && o.model) {
        if (!(e = load(o.model, "", cfg))) {
            engine_free(&draft);
            return 1;
        }
        rc = draft && sched_draft_check(e->model, e->tok, draft->model, draft->tok, err, sizeof err) != 0;
        if (rc)
            fprintf(stderr, "pagoda-run: %s\n", err);
        else
            rc = run_bench_spec(e, cfg, o.n);
        goto out;
    }
    if (o.bench_bw && !o.bench && !o.model && cfg->n_threads >= 1) {
        engine_free(&draft);
        return bench_bandwidth(cfg->n_threads) > 0 ? 0 : 1;
    }
    if (!o.model || (!o.prompt && !o.bench && !o.bench_bw && !o.dump_image && !o.tokens) || o.n < 1 ||
        o.prompt_tokens < 1 || cfg->n_threads < 1 || !o.mmproj != !o.image || (o.dump_image && !o.image) ||
        (o.tokens && !o.logits)) {
        usage(stderr);
        engine_free(&draft);
        return 2;
    }
    if (!(e = load(o.model, "", cfg))) {
        engine_free(&draft);
        return 1;
    }
    for (int i = 0; i < o.n_loras; i++)
        if (engine_add_lora(e, o.loras[i], err, sizeof err) != 0) {
            fprintf(stderr, "pagoda-run: %s\n", err);
            rc = 1;
            goto out;
        }
    const char *why = NULL;
    if (sampler_params_validate(&o.sp, e->model->cfg.vocab, &why) != 0) {
        fprintf(stderr, "pagoda-run: bad sampling parameters: %s\n", why ? why : "?");
        rc = 2;
    } else if (o.logits) {
        rc = dump_logits(e, &o);
    } else if (o.bench || o.bench_bw) {
        double bw = o.bench_bw ? bench_bandwidth(cfg->n_threads) : 0;
        rc = o.bench ? run_bench(e, cfg, o.seqs, o.prompt_tokens, o.n, o.baseline, bw) : 0;
    } else {
        rc = generate(e, draft, &o);
    }
out:
    engine_free(&e);
    engine_free(&draft);
    return rc;
}
