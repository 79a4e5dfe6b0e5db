/* Tests for worker/tools/run_logits (pagoda-run --logits): the --tokens
 * parser's table of good and bad lists, and the written file against
 * tests/ref/llama_ref.py on stories260K (or the build's stand-in) with a
 * rank-8 adapter from pagoda-mkmodel --lora-for at scale 0.5, float kernels:
 *     max |file - ref| <= 5e-4 * max(1, max |ref|)
 * (test_forward.c's tolerance against the same reference), and the int8
 * kernels' file within 5e-2 of it (they round activations to 8 bits; the
 * check is that every row is written in the right place, not the rounding). */
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

#include "worker/engine.h"
#include "worker/tools/run_logits.h"
#include "tests/support/support.h"

#define PY "/usr/bin/python3"

static const struct {
    const char *in;
    int32_t want_n;   /* -1: refused */
    const char *err;  /* a piece of the message */
    int32_t first, last;
} parse_cases[] = {
    {"1", 1, NULL, 1, 1},
    {"1,2,3", 3, NULL, 1, 3},
    {"0,511", 2, NULL, 0, 511},
    {"", -1, "not a token id", 0, 0},
    {"1,,2", -1, "not a token id", 0, 0},
    {"1,2,", -1, "not a token id", 0, 0},
    {"1,x", -1, "'x'", 0, 0},
    {"-1", -1, "not a token id in [0, 512)", 0, 0},
    {"512", -1, "not a token id in [0, 512)", 0, 0},
    {"1 2", -1, "not a token id", 0, 0},
    {"99999999999999999999", -1, "not a token id", 0, 0},
    {"1,2,3,4,5", -1, "more than 4 ids", 0, 0},
};

static void test_parse(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof parse_cases / sizeof parse_cases[0]; i++) {
        int32_t *ids = (int32_t *)1;
        char err[128] = "";
        int32_t n = run_logits_parse_ids(parse_cases[i].in, 512, 4, &ids, err, sizeof err);
        if (n != parse_cases[i].want_n)
            fail_msg("'%s': %d ids, want %d (%s)", parse_cases[i].in, n, parse_cases[i].want_n, err);
        if (n < 0) {
            assert_null(ids);
            if (!strstr(err, parse_cases[i].err))
                fail_msg("'%s': message '%s' lacks '%s'", parse_cases[i].in, err, parse_cases[i].err);
            continue;
        }
        assert_int_equal(ids[0], parse_cases[i].first);
        assert_int_equal(ids[n - 1], parse_cases[i].last);
        free(ids);
    }
}

static float *read_f32(const char *path, size_t want)
{
    size_t len;
    float *b = (float *)support_read_file(path, &len);
    assert_non_null(b);
    assert_int_equal(len, want * sizeof(float));
    return b;
}

static double max_diff(const float *a, const float *b, size_t n, double *scale)
{
    double d = 0;
    *scale = 1;
    for (size_t i = 0; i < n; i++) {
        *scale = fmax(*scale, fabs((double)b[i]));
        double x = fabs((double)a[i] - (double)b[i]);
        d = isnan(x) ? INFINITY : fmax(d, x);
    }
    return d;
}

static void test_write_vs_reference(void **state)
{
    (void)state;
    char tmp[] = "/tmp/pagoda-run-logits-XXXXXX";
    assert_non_null(mkdtemp(tmp));
    const char *base = support_shared_model("stories260K.gguf");
    assert_non_null(base);
    char b[512], args[1024], spec[600], path[600], cmd[2048];
    snprintf(b, sizeof b, "%s", base);
    snprintf(args, sizeof args, "--lora-for %s --lora-rank 8 --seed 3", b);
    assert_int_equal(support_mkmodel(tmp, "a8.gguf", args), 0);
    char err[512];
    engine_t *e = engine_load(b, err, sizeof err);
    assert_non_null(e);
    snprintf(spec, sizeof spec, "x=%s/a8.gguf:0.5", tmp);
    if (engine_add_lora(e, spec, err, sizeof err) != 0)
        fail_msg("engine_add_lora: %s", err);
    const int32_t ids[] = {1, 400, 30, 99, 250, 7, 311, 42, 5, 100, 64, 480, 3, 77, 200, 1, 18, 19, 20, 300,
                           301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315};
    const int32_t n = (int32_t)(sizeof ids / sizeof ids[0]); /* 35: two KV blocks */
    const size_t cnt = (size_t)n * e->model->cfg.vocab;
    snprintf(path, sizeof path, "%s/exact.f32", tmp);
    if (run_logits_write(e, ids, n, 2, false, path, err, sizeof err) != 0)
        fail_msg("run_logits_write: %s", err);
    float *got = read_f32(path, cnt);
    snprintf(path, sizeof path, "%s/int8.f32", tmp);
    engine_pack_int8(e, 2);
    if (run_logits_write(e, ids, n, 2, true, path, err, sizeof err) != 0)
        fail_msg("run_logits_write (int8): %s", err);
    float *got8 = read_f32(path, cnt);
    size_t off = (size_t)snprintf(cmd, sizeof cmd, PY " tests/ref/llama_ref.py '%s' --lora '%s/a8.gguf' "
                                  "--lora-scale 0.5 --out '%s/ref.f32' --seq ", b, tmp, tmp);
    for (int32_t i = 0; i < n; i++)
        off += (size_t)snprintf(cmd + off, sizeof cmd - off, "%s%d", i ? "," : "", ids[i]);
    assert_int_equal(system(cmd), 0);
    snprintf(path, sizeof path, "%s/ref.f32", tmp);
    float *want = read_f32(path, cnt);
    double scale, d = max_diff(got, want, cnt, &scale);
    if (!(d <= 5e-4 * scale))
        fail_msg("float kernels: max |diff| %g > 5e-4 x %g", d, scale);
    d = max_diff(got8, want, cnt, &scale);
    if (!(d <= 5e-2 * scale))
        fail_msg("int8 kernels: max |diff| %g > 5e-2 x %g", d, scale);
    /* a file that cannot be written is an error, not a crash */
    assert_int_equal(run_logits_write(e, ids, n, 1, false, "/nonexistent-dir/x.f32", err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x.f32"));
    free(got);
    free(got8);
    free(want);
    engine_free(&e);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_write_vs_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
