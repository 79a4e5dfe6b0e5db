/* forward_bench.c — prefill and decode throughput at several concurrency
 * levels (see forward_bench.h). */
#include "worker/tools/forward_bench.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/xalloc.h"
#include "worker/model/forward.h"
#include "worker/model/model.h"

#define BENCH_BLOCK 32

static const int default_levels[] = { 1, 4, 16, 32 };

/* One concurrency level. Returns 0 ok, -1 on a failing step. */
static int bench_level(const model_t *m, forward_t *f, const forward_bench_opts_t *o, int n_seq,
                       FILE *out, forward_bench_result_t *res)
{
    const model_config_t *c = &m->cfg;
    const int total_pos = o->prompt_len + o->n_decode;
    const int bps = (total_pos + BENCH_BLOCK - 1) / BENCH_BLOCK;   /* blocks per sequence */
    const int rows = o->step_rows > n_seq ? o->step_rows : n_seq;

    kv_store_t kv = { .n_layer = c->n_layer, .n_blocks = n_seq * bps, .block_size = BENCH_BLOCK,
                      .kv_dim = c->kv_dim, .type = o->kv_type, .qblock = kv_store_qblock(c->head_dim) };
    size_t kvn = (size_t)kv.n_layer * kv.n_blocks * BENCH_BLOCK;  /* K (or V) vectors */
    kv.k = xcalloc(kvn, kv_store_row_bytes(&kv));
    kv.v = xcalloc(kvn, kv_store_row_bytes(&kv));
    int32_t *tables = xmalloc((size_t)n_seq * bps * sizeof(int32_t));
    const int32_t **bt = xmalloc((size_t)n_seq * sizeof(*bt));
    int32_t *nb = xmalloc((size_t)n_seq * sizeof(int32_t));
    for (int s = 0; s < n_seq; s++) {
        for (int i = 0; i < bps; i++)
            tables[s * bps + i] = s * bps + i;
        bt[s] = tables + s * bps;
        nb[s] = bps;
    }
    int32_t *tok = xmalloc((size_t)rows * sizeof(int32_t)), *pos = xmalloc((size_t)rows * sizeof(int32_t));
    int32_t *seq = xmalloc((size_t)rows * sizeof(int32_t));
    uint8_t *want = xmalloc((size_t)rows);
    float *logits = xmalloc((size_t)rows * c->vocab * sizeof(float));
    int *done = xcalloc((size_t)n_seq, sizeof(int));
    uint32_t rng = 12345;
    int rc = 0;

    /* prefill: fill steps of up to `rows` rows, sequence after sequence */
    int64_t t0 = clock_now_us();
    for (int s = 0; s < n_seq && rc == 0;) {
        int R = 0;
        while (R < rows && s < n_seq) {
            rng = rng * 1664525u + 1013904223u;
            tok[R] = done[s] == 0 ? 1 : (int32_t)(3 + (rng >> 8) % (uint32_t)(c->vocab - 3));
            pos[R] = done[s];
            seq[R] = s;
            want[R] = ++done[s] == o->prompt_len;
            R++;
            if (done[s] == o->prompt_len)
                s++;
        }
        fwd_batch_t b = { .n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                          .n_seq = n_seq, .block_tables = bt, .n_blocks = nb };
        rc = forward_run(f, &b, &kv, logits);
    }
    int64_t t1 = clock_now_us();

    /* decode: one row per sequence per step */
    for (int step = 0; step < o->n_decode && rc == 0; step++) {
        for (int s = 0; s < n_seq; s++) {
            rng = rng * 1664525u + 1013904223u;
            tok[s] = (int32_t)(3 + (rng >> 8) % (uint32_t)(c->vocab - 3));
            pos[s] = o->prompt_len + step;
            seq[s] = s;
            want[s] = 1;
        }
        fwd_batch_t b = { .n_rows = n_seq, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                          .n_seq = n_seq, .block_tables = bt, .n_blocks = nb };
        rc = forward_run(f, &b, &kv, logits);
    }
    int64_t t2 = clock_now_us();

    if (rc != 0) {
        fprintf(out, "bench: step failed: %s\n", forward_error(f));
    } else {
        res->n_seq = n_seq;
        res->prefill_tok_s = (double)n_seq * o->prompt_len / ((double)(t1 - t0) / 1e6);
        res->decode_tok_s = (double)n_seq * o->n_decode / ((double)(t2 - t1) / 1e6);
        res->decode_step_ms = (double)(t2 - t1) / 1e3 / o->n_decode;
        fprintf(out, "%5d  %13.1f  %12.1f  %14.2f\n", n_seq, res->prefill_tok_s, res->decode_tok_s,
                res->decode_step_ms);
        fflush(out);
    }
    free(kv.k); free(kv.v); free(tables); free(bt); free(nb);
    free(tok); free(pos); free(seq); free(want); free(logits); free(done);
    return rc;
}

int forward_bench_run(const char *model_path, const forward_bench_opts_t *opts, FILE *out,
                      forward_bench_result_t *results)
{
    forward_bench_opts_t o = opts ? *opts : (forward_bench_opts_t){ 0 };
    if (o.n_threads <= 0) o.n_threads = 2;
    if (o.prompt_len <= 0) o.prompt_len = 128;
    if (o.n_decode <= 0) o.n_decode = 32;
    if (o.step_rows <= 0) o.step_rows = 512;
    if (!o.levels || o.n_levels <= 0) {
        o.levels = default_levels;
        o.n_levels = (int)(sizeof default_levels / sizeof *default_levels);
    }
    model_t *m = NULL;
    char err[256];
    if (model_load(model_path, &m, err, sizeof err) != 0) {
        fprintf(out, "bench: %s: %s\n", model_path, err);
        return -1;
    }
    if (o.prompt_len + o.n_decode > m->cfg.ctx) {
        fprintf(out, "bench: prompt_len + n_decode = %d exceeds the context %d\n", o.prompt_len + o.n_decode,
                m->cfg.ctx);
        model_free(&m);
        return -1;
    }
    char desc[512];
    model_describe(m, desc, sizeof desc);
    fprintf(out, "%s\n%d threads, prompt %d tokens, %d decode steps, prefill steps of <= %d rows\n",
            desc, o.n_threads, o.prompt_len, o.n_decode, o.step_rows);
    fprintf(out, "seqs  prefill tok/s  decode tok/s  decode ms/step\n");
    int max_level = 0;
    for (int i = 0; i < o.n_levels; i++)
        if (o.levels[i] > max_level)
            max_level = o.levels[i];
    forward_t *f = forward_new(m, o.step_rows > max_level ? o.step_rows : max_level, o.n_threads);
    int rc = 0;
    for (int i = 0; i < o.n_levels && rc == 0; i++) {
        forward_bench_result_t r = { 0 };
        rc = bench_level(m, f, &o, o.levels[i] > 0 ? o.levels[i] : 1, out, &r);
        if (results)
            results[i] = r;
    }
    forward_free(&f);
    model_free(&m);
    return rc;
}
