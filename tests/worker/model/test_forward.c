/* Tests for worker/model + worker/matmul + worker/forward.
 *
 * Numerics are checked against tests/ref/llama_ref.py, an independent float64
 * NumPy forward pass (full-sequence causal attention, no paging, no
 * batching), run through /usr/bin/python3. Tolerance against the reference:
 *
 *     max |pagoda - ref| <= 5e-4 * max(1, max |ref|)      over every logit
 *
 * (pagoda computes in float32; the observed error is ~1e-5 relative.)
 * Both KV element types are checked: an F32 cache against the plain
 * reference, an F16 cache against the reference run with --kv-f16, which
 * rounds K and V to np.float16 exactly where the cache stores them, with
 * the same tolerance (and the F16 run must sit closer to that reference than
 * to the unrounded one: the cache really holds halves).
 * A Q8_0 cache (int8 + f16 scale per block of K/V and quantized queries,
 * kv_store.h) is compared with the plain f32-KV reference at TOL_REF_Q8
 * (5e-2 of the logit scale; observed 4e-3 to 3.4e-2, printed per family;
 * stories260K, head_dim 8 so blocks of 8: 1e-1, observed 4.8e-2), on every
 * dense family and every shared model, and with every family (MoE too: a
 * router's top-k can flip under any K/V perturbation, and then logits move
 * by O(1)) against the reference run with --kv-q8, which quantizes K/V and
 * queries as the cache and the q8 attention do, at 1e-2 (observed <= 3.6e-3;
 * stories260K 2e-2, observed 7e-3: quants of K computed in float32 here and
 * float64 there differ by one step now and then).
 * Quantized files are compared with the reference run on their
 * `.dequant-f32` twin, which holds the same weights dequantized by the
 * `gguf` Python package.
 *
 * Invariants checked pagoda-vs-pagoda with a tight tolerance
 * (max abs diff <= 1e-4 * max(1, max |logit|) with an F32 cache):
 *   batched == alone, chunked prefill == one-shot prefill (chunks straddle the
 *   32-token block boundaries), shuffled block tables == contiguous ones.
 * With an F16 cache the same invariants hold to 5e-4 (TOL_SELF_F16): the
 * projections are not bitwise independent of the batch shape (~1e-7
 * relative), and rounding K/V to 11 significant bits turns such a difference
 * into a whole half-ulp (2^-11 relative) on the rare element that sits next
 * to a rounding midpoint. Observed: 1.6e-4 on zoo (head_dim 32); 3.3e-4 on
 * stories260K, whose head_dim 8 gives one element more weight, which is
 * also why stories260K's f16 logits are not compared with the reference
 * (one chunking came within 1% of TOL_REF); its f16 greedy continuation is.
 * With the int8 kernels (per-row activation quantization, exact integer
 * sums) every row gets the same bits in any batch, and the f16 invariants
 * are observed exact (diff 0); they are asserted with TOL_SELF_F16 all the same.
 * The KV store is filled with NaN before each run, so reading any slot that
 * was never written poisons the logits and fails the comparison.
 *
 * Models: ../shared/models (skipped with a message when absent) and tiny
 * random models written by tests/ref/make_test_models.py (qwen2, rope
 * scaling variants, files that must be refused).
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
#include <unistd.h>

#include "worker/kv_pool.h"
#include "worker/model/forward.h"
#include "worker/model/model.h"
#include "tests/support/support.h"

#define PY "/usr/bin/python3"
#define BS 32           /* KV block size used by the tests */
#define TOL_REF 5e-4    /* vs NumPy reference, relative to logit scale */
#define TOL_SELF 1e-4   /* pagoda vs pagoda, relative to logit scale (F32 cache) */
#define TOL_REF_Q8 5e-2 /* Q8_0 cache vs the unrounded (f32 K/V) reference, relative to logit scale */
#define TOL_REF_Q8_MODEL 1e-2 /* Q8_0 cache vs the reference quantizing as the cache does */
#define TOL_SELF_F16 5e-4 /* pagoda vs pagoda with an F16 cache (see above) */

static char g_tmp[64];  /* temp dir with generated models and reference outputs */

/* ---- sequences -------------------------------------------------------- */

typedef struct tseq {
    int32_t tok[128];
    int n;
} tseq_t;

/* BOS then pseudo-random ids in [3, vocab): arbitrary but fixed inputs. */
static void make_seqs(tseq_t *s, const int *lens, int n_seq, int vocab, uint32_t seed)
{
    for (int i = 0; i < n_seq; i++) {
        s[i].n = lens[i];
        s[i].tok[0] = 1;
        for (int j = 1; j < lens[i]; j++) {
            seed = seed * 1664525u + 1013904223u;
            s[i].tok[j] = 3 + (int32_t)((seed >> 8) % (uint32_t)(vocab - 3));
        }
    }
}

static int total_len(const tseq_t *s, int n_seq)
{
    int t = 0;
    for (int i = 0; i < n_seq; i++)
        t += s[i].n;
    return t;
}

/* ---- reference --------------------------------------------------------- */

/* Logits (sum of lengths, vocab) from llama_ref.py (K/V rounded to f16 when
 * kv is KV_TYPE_F16; K/V and queries as q8 when kv is KV_TYPE_Q8_0 and
 * g_ref_q8 is set), malloc'd; NULL on failure. */
static int g_ref_q8;
static double g_tol_q8; /* > 0: TOL_REF_Q8 replaced for one model */

static float *ref_logits(const char *model, const tseq_t *s, int n_seq, int vocab, kv_type_t kv)
{
    static int counter;
    char out[128];
    snprintf(out, sizeof out, "%s/ref%d.bin", g_tmp, counter++);
    size_t cap = 256 + strlen(model) + (size_t)n_seq * 128 * 8;
    char *cmd = malloc(cap);
    size_t off = (size_t)snprintf(cmd, cap, PY " tests/ref/llama_ref.py '%s'%s --out '%s'", model,
                                  kv == KV_TYPE_F16                ? " --kv-f16"
                                  : kv == KV_TYPE_Q8_0 && g_ref_q8 ? " --kv-q8"
                                                                   : "",
                                  out);
    for (int i = 0; i < n_seq; i++) {
        off += (size_t)snprintf(cmd + off, cap - off, " --seq ");
        for (int j = 0; j < s[i].n; j++)
            off += (size_t)snprintf(cmd + off, cap - off, "%s%d", j ? "," : "", s[i].tok[j]);
    }
    int rc = system(cmd);
    free(cmd);
    if (rc != 0) {
        print_error("reference failed (%d) on %s\n", rc, model);
        return NULL;
    }
    size_t len;
    float *buf = (float *)support_read_file(out, &len);
    unlink(out);
    if (!buf || len != (size_t)total_len(s, n_seq) * (size_t)vocab * sizeof(float)) {
        print_error("reference output has %zu bytes, expected %zu\n", buf ? len : 0,
                    (size_t)total_len(s, n_seq) * (size_t)vocab * sizeof(float));
        free(buf);
        return NULL;
    }
    return buf;
}

/* ---- pagoda harness --------------------------------------------------- */

typedef struct plan {
    const int *chunks;  /* chunk sizes per step, cycled; NULL = whole sequence at once */
    int n_chunks;
    int shuffle;        /* 1: block tables map to a shuffled, gappy set of physical blocks */
    uint32_t seed;
    kv_type_t kv;       /* KV cache element type */
    int int8;           /* 1: int8 matmul kernels (forward_set_int8) */
    int multi_region;   /* 1: a region per phase for small steps (forward_set_one_region off) */
} plan_t;

/* K/V arrays of kv (shape and type set) allocated and filled with NaN, so a
 * read of a slot never written poisons the logits. Free kv->k, kv->v. */
static void kv_alloc_nan(kv_store_t *kv)
{
    size_t n = (size_t)kv->n_layer * kv->n_blocks * kv->block_size * kv->kv_dim;
    if (kv->type == KV_TYPE_Q8_0) { /* quants 0x11, every scale a NaN */
        size_t nvec = n / (size_t)kv->kv_dim, rb = kv_store_row_bytes(kv);
        assert_true(rb > 0);
        kv->k = malloc(nvec * rb);
        kv->v = malloc(nvec * rb);
        memset(kv->k, 0x11, nvec * rb);
        memset(kv->v, 0x11, nvec * rb);
        for (size_t r = 0; r < nvec; r++)
            for (int b = 0; b < kv->kv_dim / kv->qblock; b++) {
                ((uint16_t *)((char *)kv->k + r * rb + kv->kv_dim))[b] = 0x7e00;
                ((uint16_t *)((char *)kv->v + r * rb + kv->kv_dim))[b] = 0x7e00;
            }
        return;
    }
    kv->k = malloc(n * kv_type_size(kv->type));
    kv->v = malloc(n * kv_type_size(kv->type));
    for (size_t i = 0; i < n; i++) {
        if (kv->type == KV_TYPE_F16) {
            ((uint16_t *)kv->k)[i] = ((uint16_t *)kv->v)[i] = 0x7e00; /* quiet NaN */
        } else {
            ((float *)kv->k)[i] = ((float *)kv->v)[i] = NAN;
        }
    }
}

static float max_abs(const float *a, size_t n)
{
    float m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(a[i]));
    return m;
}

/* max |a-b|, NaN counts as infinite. */
static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

/* Runs the sequences through forward_run following `plan` (every step takes
 * the next chunk of every unfinished sequence), logits for every position
 * wanted. Returns (sum of lengths, vocab) malloc'd, sequences concatenated. */
static float *pagoda_logits(const model_t *m, const tseq_t *s, int n_seq, const plan_t *p)
{
    const int vocab = m->cfg.vocab, total = total_len(s, n_seq);
    forward_t *f = forward_new(m, total, 2);
    if (p->int8)
        assert_int_equal(forward_set_int8(f, true), 0);
    if (p->multi_region)
        forward_set_one_region(f, false);

    /* physical blocks: twice what is needed, handed out shuffled or in order */
    int need = 0;
    for (int i = 0; i < n_seq; i++)
        need += (s[i].n + BS - 1) / BS;
    int n_phys = 2 * need + 1;
    int32_t *perm = malloc((size_t)n_phys * sizeof(int32_t));
    for (int i = 0; i < n_phys; i++)
        perm[i] = i;
    uint32_t seed = p->seed ? p->seed : 7;
    if (p->shuffle)
        for (int i = n_phys - 1; i > 0; i--) {
            seed = seed * 1664525u + 1013904223u;
            int j = (int)((seed >> 8) % (uint32_t)(i + 1));
            int32_t t = perm[i];
            perm[i] = perm[j];
            perm[j] = t;
        }
    int32_t **bt = malloc((size_t)n_seq * sizeof(int32_t *));
    int32_t *nb = malloc((size_t)n_seq * sizeof(int32_t));
    int next = 0;
    for (int i = 0; i < n_seq; i++) {
        nb[i] = (s[i].n + BS - 1) / BS;
        bt[i] = malloc((size_t)nb[i] * sizeof(int32_t));
        for (int j = 0; j < nb[i]; j++)
            bt[i][j] = perm[next++ * (p->shuffle ? 2 : 1) % n_phys];
    }

    kv_store_t kv = { .n_layer = m->cfg.n_layer, .n_blocks = n_phys, .block_size = BS, .kv_dim = m->cfg.kv_dim,
                      .type = p->kv, .qblock = kv_store_qblock(m->cfg.head_dim) };
    kv_alloc_nan(&kv);

    float *out = malloc((size_t)total * vocab * sizeof(float));
    float *step_logits = malloc((size_t)total * vocab * sizeof(float));
    int32_t *tok = malloc((size_t)total * sizeof(int32_t)), *pos = malloc((size_t)total * sizeof(int32_t));
    int32_t *seq = malloc((size_t)total * sizeof(int32_t)), *dst = malloc((size_t)total * sizeof(int32_t));
    uint8_t *want = malloc((size_t)total);
    int *done = calloc((size_t)n_seq, sizeof(int));
    int *base = malloc((size_t)n_seq * sizeof(int));
    for (int i = 0, b = 0; i < n_seq; b += s[i].n, i++)
        base[i] = b;

    for (int step = 0;; step++) {
        int R = 0;
        for (int i = 0; i < n_seq; i++) {
            int c = p->chunks ? p->chunks[(step + i) % p->n_chunks] : s[i].n;
            for (int j = 0; j < c && done[i] < s[i].n; j++, done[i]++, R++) {
                tok[R] = s[i].tok[done[i]];
                pos[R] = done[i];
                seq[R] = i;
                want[R] = 1;
                dst[R] = base[i] + done[i];
            }
        }
        if (R == 0)
            break;
        fwd_batch_t b = { .n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                          .n_seq = n_seq, .block_tables = (const int32_t *const *)bt, .n_blocks = nb };
        int rc = forward_run(f, &b, &kv, step_logits);
        if (rc != 0)
            print_error("forward_run: %s\n", forward_error(f));
        assert_int_equal(rc, 0);
        for (int r = 0; r < R; r++)
            memcpy(out + (size_t)dst[r] * vocab, step_logits + (size_t)r * vocab, (size_t)vocab * sizeof(float));
    }

    for (int i = 0; i < n_seq; i++)
        free(bt[i]);
    free(bt); free(nb); free(perm); free(kv.k); free(kv.v); free(step_logits);
    free(tok); free(pos); free(seq); free(dst); free(want); free(done); free(base);
    forward_free(&f);
    assert_null(f);
    return out;
}

static model_t *load(const char *path)
{
    model_t *m = NULL;
    char err[256];
    int rc = model_load(path, &m, err, sizeof err);
    if (rc != 0)
        print_error("model_load %s: %s\n", path, err);
    assert_int_equal(rc, 0);
    char desc[512];
    model_describe(m, desc, sizeof desc);
    print_message("%s\n", desc);
    return m;
}

/* pagoda on `model` with a `kv` cache vs the reference on `ref_model` (K/V
 * rounded as the cache does), 4 sequences of lengths 1, 7, 33, 70 in one
 * batch with shuffled block tables, then again chunked, then decode-shaped. */
static void check_vs_ref(const char *model, const char *ref_model, kv_type_t kv)
{
    static const int lens[] = { 1, 7, 33, 70 };
    model_t *m = load(model);
    print_message("  KV cache %s\n", kv_type_name(kv));
    tseq_t s[4];
    make_seqs(s, lens, 4, m->cfg.vocab, 42);
    size_t n = (size_t)total_len(s, 4) * m->cfg.vocab;
    float *ref = ref_logits(ref_model, s, 4, m->cfg.vocab, kv);
    assert_non_null(ref);
    float scale = fmaxf(1.0f, max_abs(ref, n));
    const double tol = kv != KV_TYPE_Q8_0 ? TOL_REF : g_tol_q8 > 0 ? g_tol_q8 : g_ref_q8 ? TOL_REF_Q8_MODEL : TOL_REF_Q8;
    if (kv == KV_TYPE_Q8_0)
        print_message("  reference: %s\n", g_ref_q8 ? "q8-modelled K/V and queries (--kv-q8)" : "f32 K/V");

    plan_t one = { .shuffle = 1, .seed = 3, .kv = kv };
    float *got = pagoda_logits(m, s, 4, &one);
    double d = max_diff(got, ref, n);
    print_message("  one step: max |diff| %.3g (logit scale %.3g, tolerance %.3g)\n", d, scale, tol * scale);
    assert_true(d <= tol * scale);
    free(got);

    static const int chunks[] = { 5, 30, 1, 34, 3 };
    plan_t ch = { .chunks = chunks, .n_chunks = 5, .shuffle = 1, .seed = 11, .kv = kv };
    got = pagoda_logits(m, s, 4, &ch);
    d = max_diff(got, ref, n);
    print_message("  chunked:  max |diff| %.3g\n", d);
    assert_true(d <= tol * scale);
    free(got);

    /* one token per sequence per step: the decode shape (<= 4 rows) */
    static const int tok1[] = { 1 };
    plan_t dec = { .chunks = tok1, .n_chunks = 1, .shuffle = 1, .seed = 13, .kv = kv };
    got = pagoda_logits(m, s, 4, &dec);
    d = max_diff(got, ref, n);
    print_message("  decode:   max |diff| %.3g\n", d);
    assert_true(d <= tol * scale);
    free(got);
    free(ref);
    model_free(&m);
    assert_null(m);
}

static void check_shared_vs_ref(const char *rel, const char *ref_rel, kv_type_t kv)
{
    char model[4096], ref[4096];
    const char *p = support_shared_model(rel);
    if (!p)
        skip();
    snprintf(model, sizeof model, "%s", p);
    p = support_shared_model(ref_rel);
    if (!p)
        skip();
    snprintf(ref, sizeof ref, "%s", p);
    check_vs_ref(model, ref, kv);
}

static void test_zoo_f32_vs_ref(void **state)
{
    (void)state;
    check_shared_vs_ref("zoo/zoo-F32.gguf", "zoo/zoo-F32.gguf", KV_TYPE_F32);
}

/* The f16 cache vs the reference that rounds K/V to float16, and a check
 * that the rounding is real: the f16 run is closer to that reference than to
 * the unrounded one (an f16 cache that kept floats would not be). */
static void test_zoo_kv_f16_vs_ref(void **state)
{
    (void)state;
    check_shared_vs_ref("zoo/zoo-F32.gguf", "zoo/zoo-F32.gguf", KV_TYPE_F16);
    const char *path = support_shared_model("zoo/zoo-F32.gguf");
    if (!path)
        skip();
    static const int lens[] = { 70 };
    model_t *m = load(path);
    tseq_t s[1];
    make_seqs(s, lens, 1, m->cfg.vocab, 77);
    size_t n = (size_t)total_len(s, 1) * m->cfg.vocab;
    float *ref16 = ref_logits(path, s, 1, m->cfg.vocab, KV_TYPE_F16);
    float *ref32 = ref_logits(path, s, 1, m->cfg.vocab, KV_TYPE_F32);
    assert_non_null(ref16);
    assert_non_null(ref32);
    plan_t p16 = { .kv = KV_TYPE_F16 }, p32 = { .kv = KV_TYPE_F32 };
    float *got16 = pagoda_logits(m, s, 1, &p16), *got32 = pagoda_logits(m, s, 1, &p32);
    double d16_16 = max_diff(got16, ref16, n), d16_32 = max_diff(got16, ref32, n);
    double d32_32 = max_diff(got32, ref32, n), d32_16 = max_diff(got32, ref16, n);
    print_message("  f16 cache: %.3g from the f16 reference, %.3g from the f32 one\n", d16_16, d16_32);
    print_message("  f32 cache: %.3g from the f32 reference, %.3g from the f16 one\n", d32_32, d32_16);
    assert_true(d16_16 < d16_32);
    assert_true(d32_32 < d32_16);
    free(ref16);
    free(ref32);
    free(got16);
    free(got32);
    model_free(&m);
}

static void test_zoo_q8_dequant_f32_vs_ref(void **state)
{
    (void)state;
    check_shared_vs_ref("zoo/zoo-Q8_0.dequant-f32.gguf", "zoo/zoo-Q8_0.dequant-f32.gguf", KV_TYPE_F32);
}

static void test_stories_vs_ref(void **state)
{
    (void)state;
    check_shared_vs_ref("stories260K.gguf", "stories260K.gguf", KV_TYPE_F32);
}

static void test_zoo_f16_bf16_vs_ref(void **state)
{
    (void)state;
    check_shared_vs_ref("zoo/zoo-F16.gguf", "zoo/zoo-F16.gguf", KV_TYPE_F32);
    check_shared_vs_ref("zoo/zoo-BF16.gguf", "zoo/zoo-BF16.gguf", KV_TYPE_F32);
}

/* Quantized weights, dequantized on the fly, vs the reference on the twin. */
static void test_zoo_quantized_vs_dequant_twin(void **state)
{
    (void)state;
    static const char *const types[] = { "Q8_0", "Q4_K_M", "Q4_0", "Q5_K_M", "Q6_K" };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        char a[64], b[64];
        snprintf(a, sizeof a, "zoo/zoo-%s.gguf", types[i]);
        snprintf(b, sizeof b, "zoo/zoo-%s.dequant-f32.gguf", types[i]);
        check_shared_vs_ref(a, b, i == 0 ? KV_TYPE_F16 : KV_TYPE_F32);
    }
}

/* Loader variants the shared models lack: qwen2 (biases, NeoX rope, tied
 * output), linear rope scaling with partial rope, llama3 rope factors from a
 * tensor and from metadata. */
static void test_generated_variants_vs_ref(void **state)
{
    (void)state;
    static const char *const names[] = { "qwen2-tied", "llama-linear", "llama-ropefreqs", "llama-llama3" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s.gguf", g_tmp, names[i]);
        check_vs_ref(p, p, KV_TYPE_F32);
        check_vs_ref(p, p, KV_TYPE_F16);
    }
    model_t *m = NULL;
    char p[128], err[256];
    snprintf(p, sizeof p, "%s/qwen2-tied.gguf", g_tmp);
    assert_int_equal(model_load(p, &m, err, sizeof err), 0);
    assert_int_equal(m->cfg.arch, MODEL_ARCH_QWEN2);
    assert_true(m->cfg.rope_neox && m->cfg.tied_output && m->layers[0].bq);
    model_free(&m);
    snprintf(p, sizeof p, "%s/llama-linear.gguf", g_tmp);
    assert_int_equal(model_load(p, &m, err, sizeof err), 0);
    assert_int_equal(m->cfg.rope_scaling, MODEL_ROPE_SCALING_LINEAR);
    assert_int_equal(m->cfg.rope_dim, 8);
    assert_int_equal(m->cfg.head_dim, 16);
    assert_false(m->cfg.rope_neox);
    model_free(&m);
}

/* Every architecture family (tests/ref/make_test_models.py FAMILIES), F32
 * and Q8_0 weights, F32 and F16 caches, against the reference; then the
 * invariants on each (alone == batched, chunked == one shot, shuffled ==
 * contiguous blocks; the sliding windows (8, 16) are much shorter than the
 * 33- and 70-token sequences, so windowed attention crosses blocks). */
static void invariants_path(const char *path, kv_type_t kv, int int8);

static void test_families_vs_ref(void **state)
{
    (void)state;
    static const char *const names[] = { "llama-swa", "qwen3", "qwen3moe", "qwen2moe", "gemma2", "gemma3", "phi3" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[128], q[128];
        snprintf(p, sizeof p, "%s/%s.gguf", g_tmp, names[i]);
        snprintf(q, sizeof q, "%s/%s-q8.gguf", g_tmp, names[i]);
        check_vs_ref(p, p, KV_TYPE_F32);
        check_vs_ref(p, p, KV_TYPE_F16);
        check_vs_ref(q, q, KV_TYPE_F32);
        invariants_path(p, KV_TYPE_F32, 0);
        invariants_path(q, KV_TYPE_F16, 1);
    }
}

/* A Q8_0 cache on every family (F32 and Q8_0 weights), the generated
 * variants and the shared models, against the f32-KV reference at
 * TOL_REF_Q8; the invariants with the int8 kernels (every row's K/V, hence
 * its quants, have the same bits in any batch: observed exact). */
static void test_kv_q8_vs_ref(void **state)
{
    (void)state;
    static const char *const names[] = { "llama-swa", "qwen3", "qwen3moe", "qwen2moe", "gemma2", "gemma3", "phi3",
                                         "qwen2-tied", "llama-linear", "llama-llama3" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[128], q[128];
        snprintf(p, sizeof p, "%s/%s.gguf", g_tmp, names[i]);
        snprintf(q, sizeof q, "%s/%s-q8.gguf", g_tmp, names[i]);
        /* MoE routers pick experts by a top-k: a K/V perturbation may flip
         * one choice and move logits by O(1), so those families are held
         * to the q8-modelled reference only */
        const int moe = strstr(names[i], "moe") != NULL;
        g_ref_q8 = 1;
        check_vs_ref(p, p, KV_TYPE_Q8_0);
        g_ref_q8 = 0;
        if (!moe)
            check_vs_ref(p, p, KV_TYPE_Q8_0);
        if (access(q, R_OK) == 0) {
            g_ref_q8 = moe;
            check_vs_ref(q, q, KV_TYPE_Q8_0);
            g_ref_q8 = 0;
            invariants_path(q, KV_TYPE_Q8_0, 1);
        }
    }
    for (g_ref_q8 = 1; g_ref_q8 >= 0; g_ref_q8--) {
        check_shared_vs_ref("zoo/zoo-F32.gguf", "zoo/zoo-F32.gguf", KV_TYPE_Q8_0);
        /* head_dim 8: q8 blocks of 8 elements, the coarsest case (observed
         * 4.8e-2 of the logit scale against the f32-KV reference, 7e-3
         * against the modelled one: a float32 K and the reference's float64
         * K round to different quants now and then, and with 8 elements per
         * scale each such step weighs more) */
        g_tol_q8 = g_ref_q8 ? 2e-2 : 1e-1;
        check_shared_vs_ref("stories260K.gguf", "stories260K.gguf", KV_TYPE_Q8_0);
        g_tol_q8 = 0;
    }
    g_ref_q8 = 0;
}

/* What the loader makes of each family's metadata. */
static void test_families_config(void **state)
{
    (void)state;
    char p[128], err[256];
    model_t *m = NULL;
#define LOAD(name) (snprintf(p, sizeof p, "%s/%s.gguf", g_tmp, name), model_load(p, &m, err, sizeof err))
    assert_int_equal(LOAD("gemma3"), 0);
    assert_int_equal(m->cfg.arch, MODEL_ARCH_GEMMA3);
    assert_true(m->layers[0].swa && m->layers[1].swa && !m->layers[2].swa);
    assert_int_equal(m->cfg.swa_window, 8);
    assert_true(m->cfg.qk_norm && m->cfg.post_norms && m->rope_inv_freq_swa);
    assert_true(m->cfg.final_softcap == 0 && m->cfg.attn_softcap == 0);
    model_free(&m);
    assert_int_equal(LOAD("gemma2"), 0);
    assert_true(m->layers[0].swa && !m->layers[1].swa && !m->rope_inv_freq_swa);
    assert_true(m->cfg.attn_softcap == 2.0f && m->cfg.final_softcap == 5.0f && m->cfg.tied_output);
    model_free(&m);
    assert_int_equal(LOAD("qwen3moe"), 0);
    assert_true(m->cfg.n_expert == 8 && m->cfg.n_expert_used == 2 && m->cfg.expert_norm);
    assert_null(m->layers[0].shexp_gate_inp);
    model_free(&m);
    assert_int_equal(LOAD("qwen2moe"), 0);
    assert_true(m->cfg.n_expert == 4 && !m->cfg.expert_norm && m->layers[0].shexp_gate_inp && m->layers[0].bq);
    model_free(&m);
    assert_int_equal(LOAD("phi3"), 0);
    assert_int_equal(m->cfg.rope_scaling, MODEL_ROPE_SCALING_LONGROPE);
    assert_true(m->cfg.rope_neox && m->cfg.rope_attn_factor == 1.2f);
    model_free(&m);
    assert_int_equal(LOAD("llama-swa"), 0);
    assert_true(m->cfg.swa_window == 16 && m->cfg.n_swa_layers == m->cfg.n_layer && !m->cfg.rope_neox);
    model_free(&m);
#undef LOAD
}

static void expect_refused(const char *file, const char *needle)
{
    char p[128], err[256] = "";
    model_t *m = NULL;
    snprintf(p, sizeof p, "%s/%s", g_tmp, file);
    assert_int_equal(model_load(p, &m, err, sizeof err), -1);
    assert_null(m);
    print_message("  %s refused: %s\n", file, err);
    assert_non_null(strstr(err, needle));
}

static void test_load_refusals(void **state)
{
    (void)state;
    expect_refused("bad-arch.gguf", "gpt2");
    expect_refused("bad-type.gguf", "Q2_K");
    expect_refused("bad-shape.gguf", "attn_k");
}

/* ---- invariants (pagoda vs pagoda) ---------------------------------- */

static void check_close(const float *a, const float *b, size_t n, const char *what, kv_type_t kv)
{
    float scale = fmaxf(1.0f, max_abs(b, n));
    double d = max_diff(a, b, n), tol = kv == KV_TYPE_F32 ? TOL_SELF : TOL_SELF_F16;
    print_message("  %s: max |diff| %.3g (scale %.3g, tolerance %.3g)\n", what, d, scale, tol * scale);
    assert_true(d <= tol * scale);
}

static void invariants_on(const char *rel, kv_type_t kv, int int8)
{
    const char *path = support_shared_model(rel);
    if (!path)
        skip();
    invariants_path(path, kv, int8);
}

static void invariants_path(const char *path, kv_type_t kv, int int8)
{
    model_t *m = load(path);
    print_message("  KV cache %s, %s matmul\n", kv_type_name(kv), int8 ? "int8" : "float");
    const int V = m->cfg.vocab;
    static const int lens[] = { 1, 7, 33, 70 };
    tseq_t s[4];
    make_seqs(s, lens, 4, V, 99);
    size_t n = (size_t)total_len(s, 4) * V;

    /* contiguous blocks, one step, all four together */
    plan_t contig = { .shuffle = 0, .kv = kv, .int8 = int8 };
    float *together = pagoda_logits(m, s, 4, &contig);

    /* (a) each sequence alone == inside the batch */
    for (int i = 0, off = 0; i < 4; off += s[i].n, i++) {
        float *alone = pagoda_logits(m, &s[i], 1, &contig);
        check_close(alone, together + (size_t)off * V, (size_t)s[i].n * V, "alone vs batched", kv);
        free(alone);
    }
    /* (b) chunked prefill == one shot; chunk sizes straddle blocks 32 and 64 */
    static const int chunks_a[] = { 31, 2, 30, 7 };
    static const int chunks_b[] = { 1 };
    plan_t ca = { .chunks = chunks_a, .n_chunks = 4, .kv = kv, .int8 = int8 },
           cb = { .chunks = chunks_b, .n_chunks = 1, .kv = kv, .int8 = int8 };
    float *chunked = pagoda_logits(m, s, 4, &ca);
    check_close(chunked, together, n, "chunked {31,2,30,7} vs one shot", kv);
    free(chunked);
    chunked = pagoda_logits(m, s, 4, &cb);
    check_close(chunked, together, n, "token by token vs one shot", kv);
    free(chunked);
    /* (c) shuffled, non-contiguous physical blocks == contiguous */
    plan_t shuf = { .shuffle = 1, .seed = 5, .kv = kv, .int8 = int8 };
    float *paged = pagoda_logits(m, s, 4, &shuf);
    check_close(paged, together, n, "shuffled blocks vs contiguous", kv);
    free(paged);
    free(together);
    model_free(&m);
}

/* Small dense steps run every layer in one region (layers_one_region)
 * with the same bits as a region per phase: token by token (1-row steps),
 * and the four sequences in steps of up to 4 rows, on float and int8
 * matmuls, a family with post-norms (gemma2), sliding windows and qk-norms
 * (gemma3), fused q/k/v and gate/up (phi3). Exact: memcmp. */
static void one_region_same_bits(const char *path, kv_type_t kv, int int8)
{
    model_t *m = load(path);
    const int V = m->cfg.vocab;
    static const int lens[] = { 1, 7, 33, 20 };
    tseq_t s[4];
    make_seqs(s, lens, 4, V, 7);
    static const int one[] = { 1 };
    for (int n_seq = 1; n_seq <= 4; n_seq += 3) {
        const size_t n = (size_t)total_len(s, n_seq) * V;
        plan_t a = { .chunks = one, .n_chunks = 1, .kv = kv, .int8 = int8 };
        plan_t b = a;
        b.multi_region = 1;
        float *la = pagoda_logits(m, s, n_seq, &a), *lb = pagoda_logits(m, s, n_seq, &b);
        print_message("  %s, %d seq, %s: one region vs a region per phase, max |diff| %.3g\n", path, n_seq,
                      int8 ? "int8" : "float", max_diff(la, lb, n));
        assert_memory_equal(la, lb, n * sizeof(float));
        free(la);
        free(lb);
    }
    model_free(&m);
}

static void test_one_region_same_bits(void **state)
{
    (void)state;
    static const char *const zoo[] = { "zoo/zoo-F32.gguf", "zoo/zoo-Q8_0.gguf", "zoo/zoo-Q4_K_M.gguf" };
    for (size_t i = 0; i < sizeof zoo / sizeof *zoo; i++) {
        const char *path = support_shared_model(zoo[i]);
        if (!path)
            skip();
        one_region_same_bits(path, KV_TYPE_F16, i > 0);
    }
    static const char *const names[] = { "gemma2-q8", "gemma3-q8", "phi3-q8", "qwen2-tied" };
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char p[128];
        snprintf(p, sizeof p, "%s/%s.gguf", g_tmp, names[i]);
        one_region_same_bits(p, KV_TYPE_F32, i < 3);
    }
}

/* The stop word and the progress counter in the one-region path: a step
 * started with FWD_STOP set returns FWD_STOPPED (at the first check, after
 * layer 0's attention block) having counted no layer; cleared, the same
 * step runs, counts every layer, and gives the logits of a step that was
 * never stopped (the stopped one wrote only this step's own K/V slots). */
static void test_one_region_stop(void **state)
{
    (void)state;
    const char *path = support_shared_model("zoo/zoo-Q8_0.gguf");
    if (!path)
        skip();
    model_t *m = load(path);
    const int V = m->cfg.vocab;
    float *l_stop = malloc((size_t)V * sizeof(float)), *l_ref = malloc((size_t)V * sizeof(float));
    int32_t bt[1] = { 0 }, nbs[1] = { 1 }, tok[1] = { 5 }, pos[1] = { 0 }, seq[1] = { 0 };
    const int32_t *bts[1] = { bt };
    uint8_t want[1] = { 1 };
    fwd_batch_t b = { .n_rows = 1, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                      .n_seq = 1, .block_tables = bts, .n_blocks = nbs };
    for (int pass = 0; pass < 2; pass++) {
        forward_t *f = forward_new(m, 4, 2);
        assert_int_equal(forward_set_int8(f, true), 0);
        kv_store_t kv = { .n_layer = m->cfg.n_layer, .n_blocks = 1, .block_size = BS, .kv_dim = m->cfg.kv_dim,
                          .type = KV_TYPE_F16, .qblock = kv_store_qblock(m->cfg.head_dim) };
        kv_alloc_nan(&kv);
        _Atomic uint32_t word = pass == 0 ? FWD_STOP : 0;
        _Atomic uint64_t done = 0;
        forward_set_stop(f, &word);
        forward_set_progress(f, &done);
        if (pass == 0) {
            assert_int_equal(forward_run(f, &b, &kv, l_stop), FWD_STOPPED);
            assert_int_equal(atomic_load(&done), 0);
            atomic_store(&word, 0);
        }
        assert_int_equal(forward_run(f, &b, &kv, pass == 0 ? l_stop : l_ref), 0);
        assert_int_equal(atomic_load(&done), m->cfg.n_layer);
        free(kv.k);
        free(kv.v);
        forward_free(&f);
    }
    assert_memory_equal(l_stop, l_ref, (size_t)V * sizeof(float));
    free(l_stop);
    free(l_ref);
    model_free(&m);
}

static void test_invariants_f32(void **state)
{
    (void)state;
    invariants_on("zoo/zoo-F32.gguf", KV_TYPE_F32, 0);
    invariants_on("zoo/zoo-F32.gguf", KV_TYPE_F16, 0);
}

static void test_invariants_q4_k_m(void **state)
{
    (void)state;
    invariants_on("zoo/zoo-Q4_K_M.gguf", KV_TYPE_F16, 0);
    invariants_on("zoo/zoo-Q4_K_M.gguf", KV_TYPE_F16, 1);
}

/* ---- greedy decoding of stories260K ---------------------------------- */

static int32_t vocab_id(const model_t *m, const char *piece)
{
    const gguf_kv_t *kv;
    if (gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv) != 0)
        return -1;
    for (uint64_t i = 0; i < kv->arr_n; i++)
        if (gguf_str_eq(kv->arr_str[i], piece))
            return (int32_t)i;
    return -1;
}

static int argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void greedy_stories(kv_type_t kvt)
{
    const char *path = support_shared_model("stories260K.gguf");
    if (!path)
        skip();
    model_t *m = load(path);
    /* q8_0: 200 tokens against the reference that quantizes K/V and
     * queries as the cache does (stories260K's q8 text leaves the f32 one
     * after ~70 tokens: see docs/KV_CACHE.md) */
    const int V = m->cfg.vocab, N_GEN = kvt == KV_TYPE_Q8_0 ? 200 : 30;
    /* "Once upon a time" as sentencepiece pieces, ids looked up in the file's vocab */
    static const char *const pieces[] = { "\xe2\x96\x81Once", "\xe2\x96\x81upon", "\xe2\x96\x81" "a", "\xe2\x96\x81time" };
    int32_t prompt[5] = { 1 };
    for (int i = 0; i < 4; i++) {
        prompt[i + 1] = vocab_id(m, pieces[i]);
        assert_true(prompt[i + 1] > 2);
    }

    /* reference: greedy ids printed on stdout */
    char cmd[512];
    snprintf(cmd, sizeof cmd, PY " tests/ref/llama_ref.py '%s'%s --seq %d,%d,%d,%d,%d --greedy %d", path,
             kvt == KV_TYPE_F16 ? " --kv-f16" : kvt == KV_TYPE_Q8_0 ? " --kv-q8" : "", prompt[0], prompt[1], prompt[2],
             prompt[3], prompt[4], N_GEN);
    FILE *pp = popen(cmd, "r");
    assert_non_null(pp);
    int ref[256], n_ref = 0;
    while (n_ref < N_GEN && fscanf(pp, "%d", &ref[n_ref]) == 1)
        n_ref++;
    assert_int_equal(pclose(pp), 0);
    assert_int_equal(n_ref, N_GEN);

    /* pagoda: two identical sequences decoded side by side; prefill of the
     * prompt, then one decode row per sequence per step */
    forward_t *f = forward_new(m, 16, 2);
    kv_store_t kv = { .n_layer = m->cfg.n_layer, .n_blocks = 16, .block_size = BS, .kv_dim = m->cfg.kv_dim,
                      .type = kvt, .qblock = kv_store_qblock(m->cfg.head_dim) };
    kv_alloc_nan(&kv);
    int32_t bt0[8] = { 3, 0, 5, 7, 9, 11, 13, 15 }, bt1[8] = { 1, 2, 4, 6, 8, 10, 12, 14 };
    const int32_t *bts[2] = { bt0, bt1 };
    int32_t nbs[2] = { 8, 8 };
    int32_t tok[16], pos[16], seq[16];
    uint8_t want[16];
    float *logits = malloc(2 * (size_t)V * sizeof(float));
    int R = 0;
    for (int sq = 0; sq < 2; sq++)
        for (int i = 0; i < 5; i++, R++) {
            tok[R] = prompt[i];
            pos[R] = i;
            seq[R] = sq;
            want[R] = i == 4;
        }
    int gen[2][256];
    char text[4096] = "";
    size_t tl = 0;
    for (int step = 0; step < N_GEN; step++) {
        fwd_batch_t b = { .n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                          .n_seq = 2, .block_tables = bts, .n_blocks = nbs };
        assert_int_equal(forward_run(f, &b, &kv, logits), 0);
        for (int sq = 0; sq < 2; sq++)
            gen[sq][step] = argmax(logits + (size_t)sq * V, V);
        const gguf_kv_t *tk;
        if (gguf_get_arr(m->gguf, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &tk) == 0 && tl < sizeof text - 64)
            tl += (size_t)snprintf(text + tl, sizeof text - tl, "%.*s", (int)tk->arr_str[gen[0][step]].len,
                                   tk->arr_str[gen[0][step]].ptr);
        R = 0;
        for (int sq = 0; sq < 2; sq++, R++) {
            tok[R] = gen[sq][step];
            pos[R] = 5 + step;
            seq[R] = sq;
            want[R] = 1;
        }
    }
    print_message("  greedy (%s KV): %s\n", kv_type_name(kvt), text);
    for (int i = 0; i < N_GEN; i++) {
        assert_int_equal(gen[0][i], ref[i]);
        assert_int_equal(gen[1][i], ref[i]);
    }
    free(logits);
    free(kv.k);
    free(kv.v);
    forward_free(&f);
    model_free(&m);
}

static void test_greedy_stories(void **state)
{
    (void)state;
    greedy_stories(KV_TYPE_F32);
    greedy_stories(KV_TYPE_F16);
    greedy_stories(KV_TYPE_Q8_0);
}

/* ---- bad input -------------------------------------------------------- */

static void test_bad_batch_refused(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/llama-linear.gguf", g_tmp);
    model_t *m = load(p);
    forward_t *f = forward_new(m, 4, 1);
    kv_store_t kv = { .n_layer = m->cfg.n_layer, .n_blocks = 2, .block_size = BS, .kv_dim = m->cfg.kv_dim };
    size_t kvn = (size_t)kv.n_layer * kv.n_blocks * BS * kv.kv_dim;
    kv.k = calloc(kvn, sizeof(float));
    kv.v = calloc(kvn, sizeof(float));
    int32_t bt[2] = { 1, 0 };
    const int32_t *bts[1] = { bt };
    int32_t nb[1] = { 2 };
    int32_t tok[2] = { 1, 5 }, pos[2] = { 0, 1 }, seq[2] = { 0, 0 };
    uint8_t want[2] = { 1, 1 };
    float *logits = calloc(2 * (size_t)m->cfg.vocab, sizeof(float));
    fwd_batch_t good = { .n_rows = 2, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                         .n_seq = 1, .block_tables = bts, .n_blocks = nb };
    struct { const char *what; int32_t tok, pos, seq, blk, n_rows; } cases[] = {
        { "token", 128, 1, 0, 0, 2 },  { "token", -1, 1, 0, 0, 2 }, { "position", 5, 256, 0, 0, 2 },
        { "position", 5, 64, 0, 0, 2 }, { "sequence", 5, 1, 1, 0, 2 }, { "block", 5, 1, 0, 2, 2 },
        { "n_rows", 5, 1, 0, 0, 5 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fwd_batch_t b = good;
        tok[1] = cases[i].tok;
        pos[1] = cases[i].pos;
        seq[1] = cases[i].seq;
        bt[0] = cases[i].blk ? cases[i].blk : 1;
        b.n_rows = cases[i].n_rows;
        assert_int_equal(forward_run(f, &b, &kv, logits), -1);
        print_message("  %s: %s\n", cases[i].what, forward_error(f));
        assert_true(strlen(forward_error(f)) > 0);
    }
    /* nothing was written */
    assert_true(max_abs(kv.k, kvn) == 0 && max_abs(kv.v, kvn) == 0);  /* F32 store: float arrays */
    assert_true(max_abs(logits, 2 * (size_t)m->cfg.vocab) == 0);
    /* a kv_store of the wrong shape */
    tok[1] = 5; pos[1] = 1; seq[1] = 0; bt[0] = 1;
    kv_store_t wrong = kv;
    wrong.kv_dim++;
    assert_int_equal(forward_run(f, &good, &wrong, logits), -1);
    wrong = kv;
    wrong.type = (kv_type_t)7;  /* unknown element type */
    assert_int_equal(forward_run(f, &good, &wrong, logits), -1);
    assert_int_equal(forward_run(f, &good, &kv, logits), 0);
    free(logits);
    free(kv.k);
    free(kv.v);
    forward_free(&f);
    model_free(&m);
}

/* ---- sliding window: blocks behind the window released ------------------ */

/* Runs the sequences through forward_run on a kv_pool of n_blocks blocks of
 * bs positions, as the scheduler does for a windowed model: the first step
 * takes `prefill` tokens of each, then one token per step; before each step
 * every sequence drops the blocks behind pos - W + 1 (kv_seq_drop_before).
 * The pool's K/V starts as NaN, and released blocks are reused by the other
 * sequences, so a read of a dropped slot shows in the logits. *max_live gets
 * the most blocks one sequence held. Returns (sum of lengths, vocab) logits. */
static float *window_pool_logits(const model_t *m, const tseq_t *s, int n_seq, int bs, int n_blocks,
                                 int prefill, kv_type_t kvt, int int8, int *max_live)
{
    const int V = m->cfg.vocab, W = model_kv_window(&m->cfg), total = total_len(s, n_seq);
    assert_true(W > 0 && n_seq <= 4);
    forward_t *f = forward_new(m, n_seq * prefill, 2);
    if (int8)
        assert_int_equal(forward_set_int8(f, true), 0);
    kv_pool_t *pool = kv_pool_new(m->cfg.n_layer, m->cfg.kv_dim, n_blocks, bs, kvt);
    kv_store_t *kv = kv_pool_store(pool);
    size_t n_el = (size_t)kv->n_layer * kv->n_blocks * kv->block_size * kv->kv_dim;
    for (size_t i = 0; i < n_el; i++) {
        if (kvt == KV_TYPE_F16)
            ((uint16_t *)kv->k)[i] = ((uint16_t *)kv->v)[i] = 0x7e00;
        else
            ((float *)kv->k)[i] = ((float *)kv->v)[i] = NAN;
    }
    kv_seq_t *ks[4];
    int done[4] = { 0 }, base[4];
    for (int i = 0, b = 0; i < n_seq; b += s[i].n, i++) {
        ks[i] = kv_seq_new(pool);
        base[i] = b;
    }
    float *out = malloc((size_t)total * V * sizeof(float));
    float *lg = malloc((size_t)n_seq * prefill * V * sizeof(float));
    int32_t tok[4 * 64], pos[4 * 64], seq[4 * 64], dst[4 * 64];
    uint8_t want[4 * 64];
    assert_true(prefill <= 64);
    const int32_t *tables[4];
    int32_t nb[4];
    *max_live = 0;
    for (int step = 0;; step++) {
        int R = 0, n_b = 0;
        for (int i = 0; i < n_seq; i++) {
            int c = step == 0 ? prefill : 1;
            if (c > s[i].n - done[i])
                c = s[i].n - done[i];
            if (c <= 0)
                continue;
            kv_seq_drop_before(ks[i], done[i] - W + 1);
            assert_int_equal(kv_seq_reserve(ks[i], c), KV_POOL_OK);
            assert_int_equal(kv_seq_append(ks[i], s[i].tok + done[i], c), KV_POOL_OK);
            int live = kv_seq_n_live(ks[i]);
            *max_live = live > *max_live ? live : *max_live;
            /* the bound the scheduler budgets for: the window plus the chunk */
            assert_true(live <= (W - 1 + c + bs - 1) / bs + 1);
            tables[n_b] = kv_seq_block_table(ks[i]);
            nb[n_b] = kv_seq_n_blocks(ks[i]);
            for (int j = 0; j < c; j++, R++) {
                tok[R] = s[i].tok[done[i] + j];
                pos[R] = done[i] + j;
                seq[R] = n_b;
                want[R] = 1;
                dst[R] = base[i] + done[i] + j;
            }
            n_b++;
            done[i] += c;
        }
        if (R == 0)
            break;
        fwd_batch_t b = { .n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                          .n_seq = n_b, .block_tables = tables, .n_blocks = nb };
        int rc = forward_run(f, &b, kv, lg);
        if (rc != 0)
            print_error("forward_run: %s\n", forward_error(f));
        assert_int_equal(rc, 0);
        for (int r = 0; r < R; r++)
            memcpy(out + (size_t)dst[r] * V, lg + (size_t)r * V, (size_t)V * sizeof(float));
        for (int i = 0; i < n_seq; i++)
            kv_pool_commit_full_blocks(pool, ks[i]);
        assert_int_equal(kv_pool_check(pool), 0);
    }
    for (int i = 0; i < n_seq; i++) {
        /* every sequence really let blocks go (its table has holes) */
        assert_true(kv_seq_n_dropped(ks[i]) > 0);
        kv_seq_free(&ks[i]);
    }
    kv_pool_free(&pool);
    forward_free(&f);
    free(lg);
    return out;
}

/* A model with a window on every layer (llama-swa: W 16) releases the blocks
 * behind the window: three sequences of 128, 100 and 77 tokens (8, 6 and 4
 * windows) run in a pool of 15 blocks of 8 positions (the 305 positions would
 * need 40 without releasing), each holding at most ceil((W - 1 + chunk) / 8)
 * + 1 blocks, and every position's logits match the NumPy reference (which
 * keeps the whole sequence and masks). Batched == alone: bit-exact with the
 * int8 kernels and an F16 cache, to TOL_SELF with float weights. Mixed
 * models (gemma2/3) keep every block: model_kv_window is 0 for them. */
static void test_window_pool_vs_ref(void **state)
{
    (void)state;
    char p[128], q[128];
    snprintf(p, sizeof p, "%s/llama-swa.gguf", g_tmp);
    snprintf(q, sizeof q, "%s/llama-swa-q8.gguf", g_tmp);
    static const int lens[] = { 128, 100, 77 };
    const int bs = 8, prefill = 20;
    for (int v = 0; v < 2; v++) {
        model_t *m = load(v == 0 ? p : q);
        const int V = m->cfg.vocab, W = model_kv_window(&m->cfg);
        assert_int_equal(W, 16);
        tseq_t s[3];
        make_seqs(s, lens, 3, V, 4242);
        size_t n = (size_t)total_len(s, 3) * V;
        int live = 0;
        /* vs the reference: float matmuls (the int8 kernels quantize the
         * activations, so they are checked against this run, not the
         * reference), F32 cache; ceil((16 - 1 + 20) / 8) + 1 = 6 blocks per
         * sequence at most while prefilling */
        float *got = window_pool_logits(m, s, 3, bs, 15, prefill, KV_TYPE_F32, 0, &live);
        print_message("  %s: at most %d live blocks per sequence (W %d, block %d)\n", v ? "Q8_0" : "F32", live,
                      W, bs);
        assert_true(live <= 6);
        float *ref = ref_logits(v == 0 ? p : q, s, 3, V, KV_TYPE_F32);
        assert_non_null(ref);
        float scale = fmaxf(1.0f, max_abs(ref, n));
        double d = max_diff(got, ref, n);
        print_message("  windowed pool vs reference: max |diff| %.3g (scale %.3g, tolerance %.3g)\n", d, scale,
                      TOL_REF * scale);
        assert_true(d <= TOL_REF * scale);
        kv_type_t kvt = KV_TYPE_F32;
        if (v == 1) { /* the serving configuration: int8 kernels, F16 cache */
            free(got);
            kvt = KV_TYPE_F16;
            got = window_pool_logits(m, s, 3, bs, 15, prefill, kvt, 1, &live);
            d = max_diff(got, ref, n);
            print_message("  int8 + F16 cache vs reference: max |diff| %.3g (not asserted: int8 activations)\n", d);
        }
        for (int i = 0, off = 0; i < 3; off += s[i].n, i++) {
            int l1 = 0;
            float *alone = window_pool_logits(m, &s[i], 1, bs, 6, prefill, kvt, v, &l1);
            if (v == 1)
                assert_memory_equal(alone, got + (size_t)off * V, (size_t)s[i].n * V * sizeof(float));
            else
                check_close(alone, got + (size_t)off * V, (size_t)s[i].n * V, "windowed alone vs batched", kvt);
            free(alone);
        }
        free(ref);
        free(got);
        model_free(&m);
    }
    /* mixed local/global models keep every block */
    const char *mixed[] = { "gemma2", "gemma3" };
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s.gguf", g_tmp, mixed[i]);
        model_t *m = load(p);
        assert_true(m->cfg.swa_window > 0 && m->cfg.n_swa_layers < m->cfg.n_layer);
        assert_int_equal(model_kv_window(&m->cfg), 0);
        model_free(&m);
    }
}

/* A dropped entry is refused where a row would read it, accepted below the
 * window. */
static void test_window_table_checked(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/llama-swa.gguf", g_tmp);
    model_t *m = load(p);
    forward_t *f = forward_new(m, 4, 1);
    kv_store_t kv = { .n_layer = m->cfg.n_layer, .n_blocks = 8, .block_size = 8, .kv_dim = m->cfg.kv_dim,
                      .type = KV_TYPE_F32 };
    kv_alloc_nan(&kv);
    float *lg = malloc((size_t)m->cfg.vocab * sizeof(float));
    /* position 40 reads 25..40: blocks 3..5; 0..2 are never read */
    int32_t table[6] = { KV_SEQ_NO_BLOCK, KV_SEQ_NO_BLOCK, KV_SEQ_NO_BLOCK, 1, 2, 3 }, nb = 6;
    int32_t tok = 5, pos = 40, seq = 0;
    uint8_t want = 1;
    const int32_t *tables[1] = { table };
    fwd_batch_t b = { .n_rows = 1, .token = &tok, .pos = &pos, .seq = &seq, .want_logits = &want, .n_seq = 1,
                      .block_tables = tables, .n_blocks = &nb };
    assert_int_equal(forward_run(f, &b, &kv, lg), 0);
    table[3] = KV_SEQ_NO_BLOCK;
    assert_int_equal(forward_run(f, &b, &kv, lg), -1);
    print_message("  refused: %s\n", forward_error(f));
    free(lg);
    free(kv.k);
    free(kv.v);
    forward_free(&f);
    model_free(&m);
}

/* ---- setup -------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (access(PY, X_OK) != 0) {
        fprintf(stderr, "%s missing: the reference cannot run\n", PY);
        return -1;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/pagoda-fwd.XXXXXX");
    if (!mkdtemp(g_tmp))
        return -1;
    char cmd[256];
    snprintf(cmd, sizeof cmd, PY " tests/ref/make_test_models.py %s", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    /* PAGODA_TEST_FILTER=test_families* runs a subset while iterating */
    if (getenv("PAGODA_TEST_FILTER"))
        cmocka_set_test_filter(getenv("PAGODA_TEST_FILTER"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zoo_f32_vs_ref),
        cmocka_unit_test(test_zoo_kv_f16_vs_ref),
        cmocka_unit_test(test_zoo_q8_dequant_f32_vs_ref),
        cmocka_unit_test(test_stories_vs_ref),
        cmocka_unit_test(test_zoo_f16_bf16_vs_ref),
        cmocka_unit_test(test_zoo_quantized_vs_dequant_twin),
        cmocka_unit_test(test_generated_variants_vs_ref),
        cmocka_unit_test(test_families_config),
        cmocka_unit_test(test_families_vs_ref),
        cmocka_unit_test(test_kv_q8_vs_ref),
        cmocka_unit_test(test_window_pool_vs_ref),
        cmocka_unit_test(test_window_table_checked),
        cmocka_unit_test(test_load_refusals),
        cmocka_unit_test(test_one_region_same_bits),
        cmocka_unit_test(test_one_region_stop),
        cmocka_unit_test(test_invariants_f32),
        cmocka_unit_test(test_invariants_q4_k_m),
        cmocka_unit_test(test_greedy_stories),
        cmocka_unit_test(test_bad_batch_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
