/* Tests for worker/model/lora and the adapter path of the forward pass.
 *
 * Adapters are made by pagoda-mkmodel --lora-for (random A/B in the layout
 * llama.cpp's converter writes) for stories260K (../shared/models, or the
 * build's stand-in), and the logits checked against tests/ref/llama_ref.py
 * --lora FILE --lora-scale S, which adds s · B·A (s = scale · alpha / r) to
 * the weights in float64. Tolerance, as test_forward.c against the same
 * reference (F32 cache, exact matmuls):
 *     max |pagoda - ref| <= 5e-4 * max(1, max |ref|)   over every logit
 *
 *  - rank 8 (F32, alpha = r) and rank 64 (F16, alpha 16: the alpha / r rule)
 *    and rank 32 Q8_0, every row of the batch with the adapter;
 *  - a mixed batch: four sequences — base, adapter A, adapter B at 0.5,
 *    A and B together — in chunked steps (each step mixes every set), each
 *    sequence against its own reference and against itself run alone
 *    (max |batched - alone| <= 1e-4 * max(1, max |alone|));
 *  - refusals with a message naming the cause: an adapter of another
 *    architecture, one made for a base of other shapes, a model file given
 *    as an adapter, a PAGODA_LORA_PRECISION that is neither int8 nor float.
 * These run the float update (PAGODA_LORA_PRECISION=float, set by setup).
 * The int8 update (the default: factors rounded to int8 per row,
 * worker/kernels/lowrank.h) is checked on the rank 64 F16 adapter and the
 * mixed batch against the same reference, relative to how far the adapter
 * moves the logits (int8 rounds each factor element within 1/254 of its
 * row's largest; the error of an update is ~0.5% of it, and these random
 * adapters move the logits by as much as the base has):
 *     max |int8 - ref| <= 0.05 * max |ref - base|
 * and the mixed batch equal to each sequence alone (TOL_SELF) as above.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "worker/model/forward.h"
#include "worker/model/lora.h"
#include "worker/model/model.h"
#include "tests/support/support.h"

#define PY "/usr/bin/python3"
#define BS 16
#define TOL_REF 5e-4
#define TOL_SELF 1e-4
#define TOL_INT8 0.05
#define MAX_SEQ 4
#define SEQ_LEN 40

static char g_tmp[64];
static const char *g_base;  /* stories260K or its stand-in */
static model_t *g_m;
static bool g_unfused;      /* run(): forward_set_lora_fused(f, false) */
static bool g_int8;         /* run(): forward_set_int8(f, true), the worker's matmuls */

typedef struct sq {
    int32_t tok[SEQ_LEN];
    int n;
    int set;                /* index into the sets array, -1 = base */
} sq_t;

static void make_seq(sq_t *s, int n, uint32_t seed, int vocab)
{
    s->n = n;
    s->tok[0] = 1;
    for (int j = 1; j < n; j++) {
        seed = seed * 1664525u + 1013904223u;
        s->tok[j] = 3 + (int32_t)((seed >> 8) % (uint32_t)(vocab - 3));
    }
}

/* Makes an adapter for the base into g_tmp/name. */
static void mklora(const char *name, const char *args)
{
    char a[512];
    snprintf(a, sizeof a, "--lora-for %s %s", g_base, args);
    assert_int_equal(support_mkmodel(g_tmp, name, a), 0);
}

static lora_t *load_lora(const char *name)
{
    char path[128], err[256];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    lora_t *a = NULL;
    int rc = lora_load(path, g_m, &a, err, sizeof err);
    if (rc != 0)
        print_error("lora_load %s: %s\n", path, err);
    assert_int_equal(rc, 0);
    return a;
}

/* llama_ref.py logits (n, vocab) of one sequence with the adapters (file
 * names in g_tmp) and scales given. */
static float *ref_logits(const sq_t *s, const char *const *files, const float *scales, int n_ad)
{
    char cmd[2048], out[96];
    snprintf(out, sizeof out, "%s/ref.bin", g_tmp);
    size_t off = (size_t)snprintf(cmd, sizeof cmd, PY " tests/ref/llama_ref.py '%s' --out '%s'", g_base, out);
    for (int i = 0; i < n_ad; i++)
        off += (size_t)snprintf(cmd + off, sizeof cmd - off, " --lora '%s/%s' --lora-scale %.9g", g_tmp, files[i],
                                (double)scales[i]);
    off += (size_t)snprintf(cmd + off, sizeof cmd - off, " --seq ");
    for (int j = 0; j < s->n; j++)
        off += (size_t)snprintf(cmd + off, sizeof cmd - off, "%s%d", j ? "," : "", s->tok[j]);
    assert_true(off < sizeof cmd);
    assert_int_equal(system(cmd), 0);
    size_t len;
    float *buf = (float *)support_read_file(out, &len);
    unlink(out);
    assert_non_null(buf);
    assert_int_equal(len, (size_t)s->n * g_m->cfg.vocab * sizeof(float));
    return buf;
}

/* Runs the sequences together, `chunk` tokens of each per step (0: all at
 * once), each with its set; returns logits of every position, sequences
 * concatenated, malloc'd. */
static float *run(const sq_t *s, int n_seq, const lora_set_t *sets, int n_sets, int chunk)
{
    const int vocab = g_m->cfg.vocab;
    int total = 0;
    for (int i = 0; i < n_seq; i++)
        total += s[i].n;
    forward_t *f = forward_new(g_m, total, 2);
    forward_set_lora_fused(f, !g_unfused);
    assert_int_equal(forward_set_int8(f, g_int8), 0);
    const int per = (SEQ_LEN + BS - 1) / BS;
    kv_store_t kv = {.n_layer = g_m->cfg.n_layer, .n_blocks = n_seq * per, .block_size = BS,
                     .kv_dim = g_m->cfg.kv_dim, .type = KV_TYPE_F32};
    size_t kvn = (size_t)kv.n_layer * kv.n_blocks * BS * kv.kv_dim;
    kv.k = calloc(kvn, sizeof(float));
    kv.v = calloc(kvn, sizeof(float));
    int32_t bt[MAX_SEQ][(SEQ_LEN + BS - 1) / BS], nb[MAX_SEQ];
    const int32_t *btp[MAX_SEQ];
    for (int i = 0; i < n_seq; i++) {
        nb[i] = per;
        for (int j = 0; j < per; j++)
            bt[i][j] = i * per + j;
        btp[i] = bt[i];
    }
    float *out = malloc((size_t)total * vocab * sizeof(float));
    float *lg = malloc((size_t)total * vocab * sizeof(float));
    int32_t tok[MAX_SEQ * SEQ_LEN], pos[MAX_SEQ * SEQ_LEN], seq[MAX_SEQ * SEQ_LEN], ls[MAX_SEQ * SEQ_LEN],
        dst[MAX_SEQ * SEQ_LEN];
    uint8_t want[MAX_SEQ * SEQ_LEN];
    int done[MAX_SEQ] = {0}, first[MAX_SEQ];
    for (int i = 0, b = 0; i < n_seq; b += s[i].n, i++)
        first[i] = b;
    for (;;) {
        int R = 0;
        for (int i = 0; i < n_seq; i++)
            for (int j = 0; (chunk == 0 || j < chunk) && done[i] < s[i].n; j++, done[i]++, R++) {
                tok[R] = s[i].tok[done[i]];
                pos[R] = done[i];
                seq[R] = i;
                ls[R] = s[i].set;
                want[R] = 1;
                dst[R] = first[i] + done[i];
            }
        if (R == 0)
            break;
        fwd_batch_t b = {.n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want, .n_seq = n_seq,
                         .block_tables = btp, .n_blocks = nb, .lora_set = ls, .n_lora_sets = n_sets,
                         .lora_sets = sets};
        if (forward_run(f, &b, &kv, lg) != 0)
            fail_msg("forward_run: %s", forward_error(f));
        for (int r = 0; r < R; r++)
            memcpy(out + (size_t)dst[r] * vocab, lg + (size_t)r * vocab, (size_t)vocab * sizeof(float));
    }
    free(lg);
    free(kv.k);
    free(kv.v);
    forward_free(&f);
    return out;
}

static void expect_close(const float *got, const float *want, size_t n, double tol, const char *what)
{
    double scale = 1, worst = 0;
    for (size_t i = 0; i < n; i++)
        scale = fmax(scale, fabs((double)want[i]));
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        worst = isnan(d) ? INFINITY : fmax(worst, d);
    }
    if (!(worst <= tol * scale))
        fail_msg("%s: max |diff| %g > %g (scale %g)", what, worst, tol * scale, scale);
}

/* max |got - want| <= TOL_INT8 * max |want - base| over n logits */
static void expect_int8_close(const float *got, const float *want, const float *base, size_t n, const char *what)
{
    double worst = 0, moved = 0;
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)got[i] - (double)want[i]));
        moved = fmax(moved, fabs((double)want[i] - (double)base[i]));
    }
    print_message("%s (int8): max |pagoda - ref| %.3g, %.3g of max |ref - base| %.3g\n", what, worst,
                  worst / moved, moved);
    if (!(worst <= TOL_INT8 * moved))
        fail_msg("%s (int8): max |diff| %g > %g (the adapter moves the logits by %g)", what, worst,
                 TOL_INT8 * moved, moved);
}

/* One adapter on every row, against the reference (int8: relative to the
 * base's logits, expect_int8_close). */
static void one_adapter_p(const char *file, const char *args, float scale, int int8)
{
    setenv("PAGODA_LORA_PRECISION", int8 ? "int8" : "float", 1);
    mklora(file, args);
    lora_t *a = load_lora(file);
    lora_set_t set = {.n = 1, .ad = {a}, .scale = {scale}};
    sq_t s[2];
    make_seq(&s[0], 23, 11, g_m->cfg.vocab);
    make_seq(&s[1], 9, 12, g_m->cfg.vocab);
    s[0].set = s[1].set = 0;
    float *got = run(s, 2, &set, 1, 0);
    const char *files[1] = {file};
    /* the adapter changes something: the base's logits differ */
    s[0].set = s[1].set = -1;
    float *base = run(s, 2, &set, 1, 0);
    size_t off = 0;
    for (int i = 0; i < 2; i++) {
        float *want = ref_logits(&s[i], files, &scale, 1);
        if (int8)
            expect_int8_close(got + off, want, base + off, (size_t)s[i].n * g_m->cfg.vocab, file);
        else
            expect_close(got + off, want, (size_t)s[i].n * g_m->cfg.vocab, TOL_REF, file);
        off += (size_t)s[i].n * g_m->cfg.vocab;
        free(want);
    }
    setenv("PAGODA_LORA_PRECISION", "float", 1);
    double d = 0;
    for (size_t i = 0; i < off; i++)
        d = fmax(d, fabs((double)base[i] - (double)got[i]));
    assert_true(d > 1e-2);
    free(base);
    free(got);
    /* references (a request holding an unloaded adapter): the last one frees
     * it (ASan reports a leak or a use after free otherwise) */
    assert_int_equal(a->refs, 1);
    lora_t *held = lora_ref(a);
    assert_ptr_equal(held, a);
    assert_int_equal(a->refs, 2);
    lora_free(&a);
    assert_null(a);
    assert_int_equal(held->refs, 1);
    assert_true(lora_bytes(held) > 0); /* still alive */
    lora_free(&held);
    assert_null(held);
}

static void one_adapter(const char *file, const char *args, float scale)
{
    one_adapter_p(file, args, scale, 0);
}

static void test_rank8_f32(void **state)
{
    (void)state;
    one_adapter("r8.gguf", "--lora-rank 8 --seed 3", 0.8f);
}

static void test_rank64_f16_alpha(void **state)
{
    (void)state;
    one_adapter("r64.gguf", "--lora-rank 64 --lora-alpha 16 --type F16 --seed 4", 1.5f);
}

static void test_rank32_q8_0(void **state)
{
    (void)state;
    one_adapter("r32q8.gguf", "--lora-rank 32 --type Q8_0 --lora-targets attn_q,attn_v,ffn_down --seed 5", 1.0f);
}

static void test_rank64_f16_int8(void **state)
{
    (void)state;
    one_adapter_p("r64i8.gguf", "--lora-rank 64 --lora-alpha 16 --type F16 --seed 4", 1.5f, 1);
}

/* The mixed batch's four sequences: lengths 37, 12, 29, 20 with sets -1
 * (the base), 0, 1, 2 of three; tokens from seed0 + i. */
static const int mix_len[MAX_SEQ] = {37, 12, 29, 20}, mix_set[MAX_SEQ] = {-1, 0, 1, 2};

static void mix_seqs(sq_t *s, uint32_t seed0)
{
    for (int i = 0; i < MAX_SEQ; i++) {
        make_seq(&s[i], mix_len[i], seed0 + (uint32_t)i, g_m->cfg.vocab);
        s[i].set = mix_set[i];
    }
}

static void mixed_batch(int int8)
{
    setenv("PAGODA_LORA_PRECISION", int8 ? "int8" : "float", 1);
    mklora("ma.gguf", "--lora-rank 8 --seed 21");
    mklora("mb.gguf", "--lora-rank 16 --lora-targets attn_k,attn_output,ffn_gate,ffn_up --seed 22");
    lora_t *a = load_lora("ma.gguf"), *b = load_lora("mb.gguf");
    setenv("PAGODA_LORA_PRECISION", "float", 1);
    const lora_set_t sets[3] = {
        {.n = 1, .ad = {a}, .scale = {1.0f}},
        {.n = 1, .ad = {b}, .scale = {0.5f}},
        {.n = 2, .ad = {a, b}, .scale = {0.5f, 1.0f}},
    };
    sq_t s[MAX_SEQ];
    const int *set_of = mix_set;
    mix_seqs(s, 100);
    float *mixed = run(s, MAX_SEQ, sets, 3, 5);
    const char *files[2] = {"ma.gguf", "mb.gguf"};
    size_t off = 0;
    for (int i = 0; i < MAX_SEQ; i++) {
        const size_t n = (size_t)s[i].n * g_m->cfg.vocab;
        float *alone = run(&s[i], 1, sets, 3, 0);
        expect_close(mixed + off, alone, n, TOL_SELF, "mixed batch vs alone");
        float *want;
        if (set_of[i] < 0) {
            want = ref_logits(&s[i], files, NULL, 0);
        } else if (set_of[i] < 2) {
            want = ref_logits(&s[i], files + set_of[i], &sets[set_of[i]].scale[0], 1);
        } else {
            want = ref_logits(&s[i], files, sets[2].scale, 2);
        }
        if (int8 && set_of[i] >= 0) {
            sq_t b0 = s[i];
            b0.set = -1;
            float *base = run(&b0, 1, sets, 3, 0);
            expect_int8_close(mixed + off, want, base, n, "mixed batch vs reference");
            free(base);
        } else {
            expect_close(mixed + off, want, n, TOL_REF, "mixed batch vs reference");
        }
        free(want);
        free(alone);
        off += n;
    }
    free(mixed);
    lora_free(&a);
    lora_free(&b);
}

/* state: 0 float, 1 int8 */
static int k_float = 0, k_int8 = 1;

static void test_mixed_batch(void **state)
{
    mixed_batch(*(const int *)*state);
}

/* Steps with adapter rows of up to 64 rows add each update inside its
 * projection's region (forward.c proj_fused: gate/up stay fused, the update
 * before the activation); forward_set_lora_fused(f, false) runs the
 * projection, the update's own region and the activation apart, as larger
 * steps do. Both must give the same bits, and a base row of a mixed step
 * the bits of the same step without adapters: the mixed batch's sequences
 * in steps of 20 rows (chunk 5), exact comparison, on stories260K (float
 * matmuls) and on a Q8_0 model with the worker's int8 matmuls. */
static void fused_bits(void)
{
    mklora("fa.gguf", "--lora-rank 8 --seed 31");
    mklora("fb.gguf", "--lora-rank 64 --lora-alpha 16 --type F16 --lora-targets attn_q,attn_v,attn_output,ffn_up,ffn_down "
           "--seed 32");
    lora_t *a = load_lora("fa.gguf"), *b = load_lora("fb.gguf");
    const lora_set_t sets[3] = {
        {.n = 1, .ad = {a}, .scale = {1.0f}},
        {.n = 1, .ad = {b}, .scale = {0.5f}},
        {.n = 2, .ad = {b, a}, .scale = {1.0f, 0.25f}},
    };
    sq_t s[MAX_SEQ];
    const int *lens = mix_len;
    mix_seqs(s, 200);
    size_t total = 0;
    for (int i = 0; i < MAX_SEQ; i++)
        total += (size_t)lens[i] * g_m->cfg.vocab;
    float *fused = run(s, MAX_SEQ, sets, 3, 5);
    g_unfused = true;
    float *unfused = run(s, MAX_SEQ, sets, 3, 5);
    g_unfused = false;
    for (int i = 0; i < MAX_SEQ; i++)
        s[i].set = -1;
    float *plain = run(s, MAX_SEQ, sets, 3, 5);
    size_t diff = 0;
    for (size_t i = 0; i < total; i++)
        diff += memcmp(&fused[i], &unfused[i], sizeof(float)) != 0;
    if (diff)
        fail_msg("fused vs unfused updates: %zu of %zu logits differ", diff, total);
    /* sequence 0 (the base) comes first */
    diff = 0;
    for (size_t i = 0; i < (size_t)lens[0] * g_m->cfg.vocab; i++)
        diff += memcmp(&fused[i], &plain[i], sizeof(float)) != 0;
    if (diff)
        fail_msg("base rows of mixed steps vs steps without adapters: %zu logits differ", diff);
    /* and the adapters did something */
    assert_true(memcmp(fused + (size_t)lens[0] * g_m->cfg.vocab, plain + (size_t)lens[0] * g_m->cfg.vocab,
                       (total - (size_t)lens[0] * g_m->cfg.vocab) * sizeof(float)) != 0);
    free(fused);
    free(unfused);
    free(plain);
    lora_free(&a);
    lora_free(&b);
}

static void test_fused_bits(void **state)
{
    (void)state;
    fused_bits();
    /* a Q8_0 base of stories260K's tokenizer, int8 matmuls */
    char args[512], err[256], path[128];
    snprintf(args, sizeof args, "--type Q8_0 --dim 128 --layers 2 --heads 4 --kv-heads 2 --ffn 320 --vocab 512 "
             "--seed 5 --tokenizer-from %s", g_base);
    assert_int_equal(support_mkmodel(g_tmp, "q8.gguf", args), 0);
    snprintf(path, sizeof path, "%s/q8.gguf", g_tmp);
    model_t *m0 = g_m, *q8 = NULL;
    const char *b0 = g_base;
    if (model_load(path, &q8, err, sizeof err) != 0)
        fail_msg("model_load %s: %s", path, err);
    g_m = q8;
    g_base = path;
    g_int8 = true;
    fused_bits();
    g_int8 = false;
    g_m = m0;
    g_base = b0;
    model_free(&q8);
}

static void expect_refused(const char *path, const char *needle)
{
    char err[256] = "";
    lora_t *a = NULL;
    assert_int_equal(lora_load(path, g_m, &a, err, sizeof err), -1);
    assert_null(a);
    if (!strstr(err, needle))
        fail_msg("lora_load %s: \"%s\" does not mention \"%s\"", path, err, needle);
}

static void test_refused(void **state)
{
    (void)state;
    const model_config_t *c = &g_m->cfg;
    char args[512], path[128];
    /* a base of another architecture, same shapes */
    snprintf(args, sizeof args, "--arch qwen2 --dim %d --layers %d --heads %d --kv-heads %d --ffn %d --vocab %d "
             "--tokenizer-from %s", c->dim, c->n_layer, c->n_head, c->n_kv_head, c->ffn_dim, c->vocab, g_base);
    assert_int_equal(support_mkmodel(g_tmp, "q2.gguf", args), 0);
    snprintf(args, sizeof args, "--lora-for %s/q2.gguf", g_tmp);
    assert_int_equal(support_mkmodel(g_tmp, "q2lora.gguf", args), 0);
    snprintf(path, sizeof path, "%s/q2lora.gguf", g_tmp);
    expect_refused(path, "general.architecture");
    /* a llama base of twice the width */
    snprintf(args, sizeof args, "--dim %d --layers %d --heads %d --kv-heads %d --ffn %d --vocab %d "
             "--tokenizer-from %s", 2 * c->dim, c->n_layer, c->n_head, c->n_kv_head, c->ffn_dim, c->vocab, g_base);
    assert_int_equal(support_mkmodel(g_tmp, "wide.gguf", args), 0);
    snprintf(args, sizeof args, "--lora-for %s/wide.gguf --lora-targets attn_q", g_tmp);
    assert_int_equal(support_mkmodel(g_tmp, "widelora.gguf", args), 0);
    snprintf(path, sizeof path, "%s/widelora.gguf", g_tmp);
    expect_refused(path, "do not fit the base");
    /* a model is not an adapter */
    expect_refused(g_base, "general.type");
    /* nor a precision the loader does not know */
    setenv("PAGODA_LORA_PRECISION", "int4", 1);
    expect_refused(path, "PAGODA_LORA_PRECISION=int4");
    setenv("PAGODA_LORA_PRECISION", "float", 1);
    /* nor is a missing file */
    snprintf(path, sizeof path, "%s/absent.gguf", g_tmp);
    expect_refused(path, "absent.gguf");
}

/* LORA_STEP_BENCH=1 (else skipped): one decode step of
 * tests/bench/lora_bench.sh's shape through forward_run, mixed against
 * base, back to back — the 110M-shape Q8_0 base (LORA_STEP_BENCH_MODEL, else
 * $PAGODA_BUILD/models/m110-q8_0.gguf, made here when absent), adapters
 * a1..a8 as lora_bench makes them (F16, ranks 8 / 64 alternating, alpha 16
 * on the rank-64 ones, every projection; float factors unless
 * LORA_STEP_BENCH_PRECISION=int8), 32 rows at position LORA_STEP_BENCH_POS
 * (80) of their sequences, row i on a((i mod 9) + 1) or the base when
 * i mod 9 = 8, the int8 matmuls the worker runs, F16 KV (huge pages, filled), 2 threads
 * (LORA_STEP_BENCH_THREADS); LORA_STEP_BENCH_UNFUSED=1: the mixed step
 * on the unfused path (forward_set_lora_fused off, as before proj_fused).
 * Prints the medians of LORA_STEP_BENCH_REPS
 * (20) steps each (and their minima: sb_median sorts), wall and process
 * CPU time, and the ratio base / mixed (the throughput ratio lora_bench
 * measures), and the mean voluntary context switches per step (with the
 * worker's GOMP_SPINCOUNT=1000 a barrier that waits is a futex sleep:
 * they count the waits, whatever the machine's load). With PAGODA_FWD_PROFILE=32
 * the forward pass also prints each side's phases (mixed first). A
 * number, not an assertion. */
#define SB_ROWS 32

static double sb_now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec * 1e3 + 1e-6 * (double)ts.tv_nsec;
}

static int sb_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double sb_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, sb_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void test_step_bench(void **state)
{
    (void)state;
    if (!getenv("LORA_STEP_BENCH")) {
        print_message("skipped: LORA_STEP_BENCH unset (a benchmark, not a test)\n");
        return;
    }
    const char *e;
    const int reps = (e = getenv("LORA_STEP_BENCH_REPS")) ? atoi(e) : 20;
    const int pos = (e = getenv("LORA_STEP_BENCH_POS")) ? atoi(e) : 80;
    const int th = (e = getenv("LORA_STEP_BENCH_THREADS")) ? atoi(e) : 2;
    assert_true(reps > 0 && pos >= 0 && pos < 1024 && th > 0);
    char base[512], args[1024], err[256];
    if ((e = getenv("LORA_STEP_BENCH_MODEL"))) {
        snprintf(base, sizeof base, "%s", e);
    } else {
        snprintf(base, sizeof base, "%s/models/m110-q8_0.gguf", getenv("PAGODA_BUILD") ? getenv("PAGODA_BUILD") : "build");
        if (access(base, R_OK) != 0) {
            snprintf(args, sizeof args, "--type Q8_0 --dim 768 --layers 12 --heads 12 --kv-heads 12 --ffn 2048 "
                     "--vocab 32000 --ctx 2048 --seed 1 --tokenizer-from %s", g_base);
            assert_int_equal(support_mkmodel(g_tmp, "m110.gguf", args), 0);
            snprintf(base, sizeof base, "%s/m110.gguf", g_tmp);
        }
    }
    model_t *m = NULL;
    if (model_load(base, &m, err, sizeof err) != 0)
        fail_msg("model_load %s: %s", base, err);
    /* the worker's kernels: it packs the int8 weights at load (engine.c;
     * without this the step ran the unpacked AVX2 Q8_0 path, ~1.5x slower
     * than the server's base step, so the update looked cheaper here) */
    assert_true(model_pack_int8(m, th) >= 0);
    setenv("PAGODA_LORA_PRECISION", (e = getenv("LORA_STEP_BENCH_PRECISION")) ? e : "float", 1);
    lora_t *ad[8];
    lora_set_t sets[8];
    for (int k = 1; k <= 8; k++) {
        char name[32], path[128];
        snprintf(name, sizeof name, "sb%d.gguf", k);
        snprintf(args, sizeof args, "--lora-for %s --type F16 --seed %d %s", base, 100 + k,
                 k % 2 ? "--lora-rank 8" : "--lora-rank 64 --lora-alpha 16");
        assert_int_equal(support_mkmodel(g_tmp, name, args), 0);
        snprintf(path, sizeof path, "%s/%s", g_tmp, name);
        if (lora_load(path, m, &ad[k - 1], err, sizeof err) != 0)
            fail_msg("lora_load %s: %s", path, err);
        sets[k - 1] = (lora_set_t){.n = 1, .ad = {ad[k - 1]}, .scale = {1.0f}};
    }
    setenv("PAGODA_LORA_PRECISION", "float", 1);
    const int per = (pos + BS) / BS;
    kv_store_t kv = {.n_layer = m->cfg.n_layer, .n_blocks = SB_ROWS * per, .block_size = BS,
                     .kv_dim = m->cfg.kv_dim, .type = KV_TYPE_F16};
    const size_t kvb = (size_t)kv.n_layer * kv.n_blocks * BS * kv.kv_dim * 2;
    /* the cache as the worker's pool (kv_pool.c) holds it: huge pages,
     * and the positions before the rows' filled as a prompt would have
     * left them. Untouched zero pages (calloc) were one physical page the
     * attention read from cache: 1.7 ms a step against 3.6 filled, a base
     * step cheaper than the server's */
    kv.k = xhuge_zalloc(kvb);
    kv.v = xhuge_zalloc(kvb);
    for (size_t i = 0; i < kvb / 2; i++) {
        ((uint16_t *)kv.k)[i] = (uint16_t)(0x2c00u + (i * 2654435761u >> 22) % 0x400u); /* 0.0625..0.125 */
        ((uint16_t *)kv.v)[i] = (uint16_t)(0xac00u + (i * 40503u >> 6) % 0x400u);
    }
    int32_t *bt = malloc((size_t)SB_ROWS * per * sizeof *bt), nb[SB_ROWS], tok[SB_ROWS], ps[SB_ROWS], seq[SB_ROWS],
            ls[SB_ROWS];
    const int32_t *btp[SB_ROWS];
    uint8_t want[SB_ROWS];
    for (int i = 0; i < SB_ROWS; i++) {
        for (int j = 0; j < per; j++)
            bt[i * per + j] = i * per + j;
        btp[i] = bt + i * per;
        nb[i] = per;
        tok[i] = 3 + i * 7;
        ps[i] = pos;
        seq[i] = i;
        want[i] = 1;
        ls[i] = i % 9 == 8 ? -1 : i % 9;
    }
    float *lg = malloc((size_t)SB_ROWS * m->cfg.vocab * sizeof(float));
    forward_t *fw[2] = {forward_new(m, SB_ROWS, th), forward_new(m, SB_ROWS, th)}; /* mixed, base */
    double wall[2][reps], cpu[2][reps], csw[2] = {0, 0};
    for (int it = -2; it < reps; it++) /* two steps of each to warm up */
        for (int side = 0; side < 2; side++) {
            if (it == -2) {
                assert_int_equal(forward_set_int8(fw[side], true), 0);
                const char *uf = getenv("LORA_STEP_BENCH_UNFUSED");
                forward_set_lora_fused(fw[side], !uf || !*uf || !strcmp(uf, "0"));
            }
            fwd_batch_t b = {.n_rows = SB_ROWS, .token = tok, .pos = ps, .seq = seq, .want_logits = want,
                             .n_seq = SB_ROWS, .block_tables = btp, .n_blocks = nb,
                             .lora_set = side == 0 ? ls : NULL, .n_lora_sets = side == 0 ? 8 : 0,
                             .lora_sets = side == 0 ? sets : NULL};
            struct rusage u0, u1;
            getrusage(RUSAGE_SELF, &u0);
            const double w0 = sb_now(CLOCK_MONOTONIC), c0 = sb_now(CLOCK_PROCESS_CPUTIME_ID);
            if (forward_run(fw[side], &b, &kv, lg) != 0)
                fail_msg("forward_run: %s", forward_error(fw[side]));
            if (it >= 0) {
                wall[side][it] = sb_now(CLOCK_MONOTONIC) - w0;
                cpu[side][it] = sb_now(CLOCK_PROCESS_CPUTIME_ID) - c0;
                getrusage(RUSAGE_SELF, &u1);
                csw[side] += (double)(u1.ru_nvcsw - u0.ru_nvcsw) / reps;
            }
        }
    const double wm = sb_median(wall[0], reps), wb = sb_median(wall[1], reps);
    const double cm = sb_median(cpu[0], reps), cb = sb_median(cpu[1], reps);
    print_message("lora step bench: %s, 32 rows at position %d, %d threads, %d steps each, medians (min):\n", base,
                  pos, th, reps);
    print_message("  mixed  %.2f (%.2f) ms wall  %.2f (%.2f) ms CPU\n", wm, wall[0][0], cm, cpu[0][0]);
    print_message("  base   %.2f (%.2f) ms wall  %.2f (%.2f) ms CPU\n", wb, wall[1][0], cb, cpu[1][0]);
    print_message("  base / mixed: %.3f (%.3f) wall, %.3f (%.3f) CPU\n", wb / wm, wall[1][0] / wall[0][0], cb / cm,
                  cpu[1][0] / cpu[0][0]);
    print_message("  voluntary context switches per step (the process's threads): mixed %.1f, base %.1f\n", csw[0],
                  csw[1]);
    fflush(stdout);
    forward_free(&fw[0]);
    forward_free(&fw[1]);
    free(lg);
    free(bt);
    xhuge_zfree(kv.k, kvb);
    xhuge_zfree(kv.v, kvb);
    for (int k = 0; k < 8; k++)
        lora_free(&ad[k]);
    model_free(&m);
}

static int setup(void **state)
{
    (void)state;
    snprintf(g_tmp, sizeof g_tmp, "/tmp/pagoda-lora-XXXXXX");
    if (!mkdtemp(g_tmp))
        return -1;
    setenv("PAGODA_LORA_PRECISION", "float", 1); /* the int8 tests set int8 */
    g_base = support_shared_model("stories260K.gguf");
    if (!g_base)
        return -1;
    static char base[512];
    snprintf(base, sizeof base, "%s", g_base);
    g_base = base;
    char err[256];
    if (model_load(g_base, &g_m, err, sizeof err) != 0) {
        fprintf(stderr, "model_load %s: %s\n", g_base, err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    model_free(&g_m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rank8_f32),
        cmocka_unit_test(test_rank64_f16_alpha),
        cmocka_unit_test(test_rank32_q8_0),
        cmocka_unit_test(test_rank64_f16_int8),
        {"test_mixed_batch", test_mixed_batch, NULL, NULL, &k_float},
        {"test_mixed_batch_int8", test_mixed_batch, NULL, NULL, &k_int8},
        cmocka_unit_test(test_fused_bits),
        cmocka_unit_test(test_refused),
    };
    /* LORA_STEP_BENCH: the benchmark alone */
    const struct CMUnitTest bench[] = {cmocka_unit_test(test_step_bench)};
    if (getenv("LORA_STEP_BENCH"))
        return cmocka_run_group_tests(bench, setup, teardown);
    return cmocka_run_group_tests(tests, setup, teardown);
}
