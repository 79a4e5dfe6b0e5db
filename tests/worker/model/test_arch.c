/* Unit tests for the architecture table (worker/model/arch.h), driven by
 * the table: every row is checked, so a new row is tested without editing
 * this file.
 *
 *   - lookups: by enum and by name agree, model_arch_name gives the row's
 *     name, unknown names and values are refused, and model_load's refusal
 *     of an unknown architecture lists every row;
 *   - the columns' implications model.c relies on (a required bias is a
 *     bias, a shared expert is MoE, a family's own swa rope has a window,
 *     LongRoPE has none, ...);
 *   - writer and loader agree on every row: pagoda-mkmodel
 *     ($PAGODA_BUILD/pagoda-mkmodel) writes a tiny model of the family, and
 *     model_load reads back exactly the features the row names (q/k norm,
 *     post-norms, rope pairing, activation, embedding scale, biases, MoE and
 *     shared expert, sliding window, tied output). (Both sides read the
 *     row, so this shows every row makes a loadable model; that a row's
 *     values are the family's, and that each family runs a forward step,
 *     is test_mkmodel's and test_forward's job, which name them.)
 * About 1 s of CPU (eight tiny models).
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
#include <sys/wait.h>
#include <unistd.h>

#include "worker/model/arch.h"
#include "common/text/gguf_write.h"
#include "worker/model/model.h"

#define TINY_TOK "tests/fuzz/corpus/gguf/llama.gguf"

static void test_lookups(void **s)
{
    (void)s;
    char list[512];
    model_arch_list(list, sizeof list, " ");
    for (int a = 0; a < MODEL_ARCH_COUNT; a++) {
        const model_arch_info_t *t = model_arch_info((enum model_arch)a);
        assert_non_null(t);
        assert_int_equal(t->arch, a);
        assert_true(t->name && t->name[0]);
        assert_ptr_equal(model_arch_find(t->name, strlen(t->name)), t);
        assert_string_equal(model_arch_name((enum model_arch)a), t->name);
        /* the name is a whole word of the list */
        char word[64];
        snprintf(word, sizeof word, " %s ", t->name);
        char padded[600];
        snprintf(padded, sizeof padded, " %s ", list);
        assert_non_null(strstr(padded, word));
    }
    assert_null(model_arch_info(MODEL_ARCH_COUNT));
    assert_string_equal(model_arch_name(MODEL_ARCH_COUNT), "?");
    assert_null(model_arch_find("nope", 4));
    assert_null(model_arch_find("llam", 4));     /* a prefix of a name is not the name */
    assert_null(model_arch_find("llamaX", 6));
    char tiny[8];
    model_arch_list(tiny, sizeof tiny, ", "); /* truncated, NUL-terminated */
    assert_true(strlen(tiny) < sizeof tiny);

    /* model_load's refusal lists every supported family */
    gguf_writer_t *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "nope");
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[512];
    assert_int_equal(gguf_writer_write_mem(w, &buf, &len, err, sizeof err), 0);
    gguf_writer_free(&w);
    gguf_t *g = NULL;
    assert_int_equal(gguf_parse(buf, len, &g, err, sizeof err), 0);
    model_t *m = NULL;
    assert_int_equal(model_load_gguf(&g, &m, err, sizeof err), -1);
    assert_non_null(strstr(err, "'nope' is not supported"));
    for (int a = 0; a < MODEL_ARCH_COUNT; a++)
        assert_non_null(strstr(err, model_arch_name((enum model_arch)a)));
    gguf_close(&g);
    free(buf);
}

static void test_column_implications(void **s)
{
    (void)s;
    for (int a = 0; a < MODEL_ARCH_COUNT; a++) {
        const model_arch_info_t *t = model_arch_info((enum model_arch)a);
        print_message("  %s\n", t->name);
        assert_true(!t->qkv_bias_required || t->qkv_bias);
        assert_true(!t->moe_shared_expert || t->moe);
        assert_true(!t->moe_norm || t->moe);
        assert_true(!t->fused_up || !t->moe);
        assert_true(!t->attn_softcap_off || t->softcap);
        assert_true(t->attn_softcap >= 0 && t->final_softcap >= 0);
        assert_true(!t->softcap || t->attn_softcap > 0 || t->final_softcap > 0 || t->attn_softcap_off);
        assert_true(!t->swa || t->swa_pattern >= 1);
        assert_true(t->swa_window >= 0 && t->synth_window >= 0);
        assert_true(t->synth_window == 0 || t->swa);
        assert_true(!t->rope_swa_own || (t->rope_swa && t->swa));
        assert_true(!t->rope_swa || t->swa);
        assert_true(t->rope_base_swa >= 0);
        assert_true(!t->longrope || !t->swa);
        assert_true(t->attn_scale_layers >= 0);
        assert_true(t->synth_rope_base > 0 && t->synth_eps > 0);
        assert_true(t->ffn_act == MODEL_FFN_SILU || t->ffn_act == MODEL_FFN_GELU_TANH);
    }
}

/* Every row through pagoda-mkmodel and model_load. */
static void test_every_row_loads(void **s)
{
    (void)s;
    const char *build = getenv("PAGODA_BUILD");
    char dir[] = "/tmp/pagoda-arch-test-XXXXXX", bin[1024];
    snprintf(bin, sizeof bin, "%s/pagoda-mkmodel", build ? build : "build");
    assert_int_equal(access(bin, X_OK), 0);
    assert_non_null(mkdtemp(dir));
    for (int a = 0; a < MODEL_ARCH_COUNT; a++) {
        const model_arch_info_t *t = model_arch_info((enum model_arch)a);
        char path[1200], cmd[4096], err[512];
        snprintf(path, sizeof path, "%s/%s.gguf", dir, t->name);
        snprintf(cmd, sizeof cmd,
                 "%s -o %s --tokenizer-from " TINY_TOK " --arch %s --dim 64 --layers 2 --heads 4 --kv-heads 2 "
                 "--ffn 96 --expert-ffn 32 --experts 4 --experts-used 2 --window 8 --type Q8_0 > %s/log 2>&1",
                 bin, path, t->name, dir);
        int st = system(cmd);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fail_msg("%s: pagoda-mkmodel failed (%s/log)", t->name, dir);
        model_t *m = NULL;
        if (model_load(path, &m, err, sizeof err) != 0)
            fail_msg("%s: %s", t->name, err);
        unlink(path);
        const model_config_t *c = &m->cfg;
        const model_layer_t *L = &m->layers[0];
        assert_int_equal(c->arch, t->arch);
        assert_int_equal(c->rope_neox, t->rope_neox);
        assert_int_equal(c->qk_norm, t->qk_norm);
        assert_int_equal(L->q_norm != NULL, t->qk_norm);
        assert_int_equal(c->post_norms, t->post_norms);
        assert_int_equal(L->attn_post_norm != NULL && L->ffn_post_norm != NULL, t->post_norms);
        assert_int_equal(c->ffn_act, t->ffn_act);
        assert_true(c->embd_scale == (t->embd_scale_sqrt_dim ? sqrtf(64.0f) : 1.0f));
        assert_int_equal(L->bq != NULL, t->qkv_bias);
        assert_int_equal(c->n_expert > 0, t->moe);
        assert_int_equal(L->shexp_gate_inp != NULL, t->moe_shared_expert);
        assert_int_equal(c->swa_window, t->swa ? 8 : 0);
        assert_int_equal(c->tied_output, t->tied_output);
        assert_true(c->attn_softcap == (t->softcap && !t->attn_softcap_off ? t->attn_softcap : 0.0f));
        assert_true(c->final_softcap == (t->softcap ? t->final_softcap : 0.0f));
        model_free(&m);
    }
    char log[1200];
    snprintf(log, sizeof log, "%s/log", dir);
    unlink(log);
    assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lookups),
        cmocka_unit_test(test_column_implications),
        cmocka_unit_test(test_every_row_loads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
