/* Tests for model_pack_int8 (worker/model/model.h): packing a loaded model's Q8_0
 * matrices for the int8 kernels changes no result.
 *
 * Models come from the real $PAGODA_BUILD/pagoda-mkmodel (Q8_0, llama and
 * qwen2, vocab 687: the output projection's n_out is not a multiple of 8)
 * and, when ../shared is present, the llama-quantize zoo-Q8_0.gguf. For each:
 *   1. forward_run over a fixed plan (a 12-row prefill step of two
 *      sequences, the panel path, then 2-row decode steps, the path that
 *      used to be the direct one), int8 on and int8 off, before packing;
 *   2. model_pack_int8: every layer matrix and the output are packed (the
 *      return value and packed_bytes are checked against qgemm_packed_size),
 *      the embedding is not;
 *   3. the same plan again: int8 logits bit-identical to step 1 (the packed
 *      panels hold the file's integers and scales), and int8-off logits
 *      bit-identical too (the float path reads the file pages, which
 *      model_pack_int8 dropped with MADV_DONTNEED: they must come back from
 *      the file unchanged);
 *   4. packing again does nothing.
 * A model whose output is tied to token_embd (made by aliasing the two after
 * load, as model_load does for files without output.weight) keeps its
 * embedding rows readable and unpacked while the output is packed.
 * model_held_bytes follows: the file's matrices before packing, the
 * embedding plus the packings after (tied or not).
 * Without AVX2 + F16C model_pack_int8 must do nothing (checked instead). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "tests/support/support.h"
#include "worker/model/forward.h"
#include "worker/model/model.h"
#include "worker/kernels/qgemm.h"

static char g_dir[] = "/tmp/pagoda-model-pack-test-XXXXXX";

static int setup(void **s)
{
    (void)s;
    if (!mkdtemp(g_dir))
        return -1;
    if (support_mkmodel(g_dir, "llama.gguf", "--dim 64 --layers 2 --heads 4 --kv-heads 2 --ffn 160 --type Q8_0 --seed 3") != 0 ||
        support_mkmodel(g_dir, "qwen2.gguf", "--dim 96 --layers 2 --heads 6 --kv-heads 2 --ffn 224 --type Q8_0 --arch qwen2") != 0)
        return -1;
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    return system(cmd) == 0 ? 0 : -1;
}

#define BS 16
#define N_DECODE 3

/* Logits of the plan: step 0 prefills 9 tokens of sequence 0 and 3 of
 * sequence 1 (12 rows, logits of each last row), then N_DECODE steps of one
 * row per sequence. Returns (1 + N_DECODE) * 2 * vocab floats (malloc'd). */
static float *run_plan(const model_t *m, bool int8)
{
    const int V = m->cfg.vocab;
    forward_t *f = forward_new(m, 16, 2);
    assert_non_null(f);
    assert_int_equal(forward_set_int8(f, int8), 0);
    kv_store_t kv = {.n_layer = m->cfg.n_layer, .n_blocks = 2, .block_size = BS, .kv_dim = m->cfg.kv_dim};
    size_t kvn = (size_t)kv.n_layer * kv.n_blocks * BS * kv.kv_dim;
    kv.k = xcalloc(kvn, sizeof(float));
    kv.v = xcalloc(kvn, sizeof(float));
    int32_t bt0[1] = {1}, bt1[1] = {0};
    const int32_t *bts[2] = {bt0, bt1};
    int32_t nbs[2] = {1, 1};
    float *out = xmalloc((size_t)(1 + N_DECODE) * 2 * (size_t)V * sizeof(float));
    int32_t tok[16], pos[16], seq[16];
    uint8_t want[16];
    int R = 0;
    for (int i = 0; i < 12; i++, R++) {
        int s = i < 9 ? 0 : 1;
        tok[R] = (7 + 31 * i) % V;
        pos[R] = s == 0 ? i : i - 9;
        seq[R] = s;
        want[R] = i == 8 || i == 11;
    }
    int next_pos[2] = {9, 3};
    for (int step = 0; step <= N_DECODE; step++) {
        fwd_batch_t b = {.n_rows = R, .token = tok, .pos = pos, .seq = seq, .want_logits = want,
                         .n_seq = 2, .block_tables = bts, .n_blocks = nbs};
        float *lg = out + (size_t)step * 2 * (size_t)V;
        assert_int_equal(forward_run(f, &b, &kv, lg), 0);
        R = 0;
        for (int s = 0; s < 2; s++, R++) {
            tok[R] = (int32_t)((11 * step + 5 * s + 1) % V);
            pos[R] = next_pos[s]++;
            seq[R] = s;
            want[R] = 1;
        }
    }
    free(kv.k);
    free(kv.v);
    forward_free(&f);
    return out;
}

static size_t packed_size(const matmul_weight_t *w)
{
    return qgemm_packed_size(w->type, w->rows, w->cols);
}

/* Steps 1-4 of the file comment on the model at path. tie: alias the
 * output to token_embd before packing. */
static void check_model(const char *path, bool tie)
{
    model_t *m = NULL;
    char err[256];
    assert_int_equal(model_load(path, &m, err, sizeof err), 0);
    if (tie) {
        m->output = m->tok_embd;
        m->cfg.tied_output = 1;
    }
    const size_t nl = (size_t)(1 + N_DECODE) * 2 * (size_t)m->cfg.vocab * sizeof(float);
    float *q_before = run_plan(m, true), *f_before = run_plan(m, false);
    assert_int_equal(model_held_bytes(m), model_weight_bytes(m)); /* nothing packed: the file's matrices */
    int n = model_pack_int8(m, 2);
    if (!qgemm_avx2_available()) {
        print_message("  no AVX2 + F16C: nothing packed\n");
        assert_int_equal(n, 0);
        assert_int_equal(m->packed_bytes, 0);
    } else {
        const int L = m->cfg.n_layer;
        assert_int_equal(n, 7 * L + 1);
        size_t want = packed_size(&m->output);
        for (int l = 0; l < L; l++) {
            const model_layer_t *ly = &m->layers[l];
            const matmul_weight_t *ws[7] = {&ly->wq, &ly->wk, &ly->wv, &ly->wo, &ly->w_gate, &ly->w_up, &ly->w_down};
            for (int i = 0; i < 7; i++) {
                assert_non_null(ws[i]->packed);
                want += packed_size(ws[i]);
            }
        }
        assert_non_null(m->output.packed);
        assert_null(m->tok_embd.packed);
        assert_int_equal(m->packed_bytes, want);
        /* held: the embedding's file rows (read by the lookup, tied or not) and the
         * packings; every packed matrix's own file pages were dropped */
        assert_int_equal(model_held_bytes(m), matmul_weight_bytes(&m->tok_embd) + want);
        assert_int_equal(model_pack_int8(m, 2), 0); /* already packed */
    }
    float *q_after = run_plan(m, true), *f_after = run_plan(m, false);
    assert_memory_equal(q_after, q_before, nl);
    assert_memory_equal(f_after, f_before, nl);
    /* not a vacuous comparison: the int8 logits differ from the float ones */
    assert_true(memcmp(q_after, f_after, nl) != 0);
    free(q_before);
    free(f_before);
    free(q_after);
    free(f_after);
    model_free(&m);
    assert_null(m);
}

static void test_mkmodel_llama(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/llama.gguf", g_dir);
    check_model(p, false);
}

static void test_mkmodel_qwen2(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/qwen2.gguf", g_dir);
    check_model(p, false);
}

static void test_tied_output(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/llama.gguf", g_dir);
    check_model(p, true);
}

static void test_zoo_q8_0(void **state)
{
    (void)state;
    const char *p = support_shared_model("zoo/zoo-Q8_0.gguf");
    if (!p)
        skip();
    check_model(p, false);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mkmodel_llama),
        cmocka_unit_test(test_mkmodel_qwen2),
        cmocka_unit_test(test_tied_output),
        cmocka_unit_test(test_zoo_q8_0),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
