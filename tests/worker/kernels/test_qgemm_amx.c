/* Unit tests for qgemm's AMX tile kernel (worker/kernels/qgemm_amx.inc)
 * and the AMX detection (common/cpu.h).
 *
 * Exactness claims checked bit for bit against the scalar kernel
 * (QGEMM_ISA_SCALAR, itself checked against a double reference in
 * test_qgemm.c):
 *   - the emulated tile path (qgemm_set_amx_emulated: the kernel's tile
 *     config, panel-as-B layout, 16-row blocking, per-block K = 32 products
 *     (Q6_K: two of K = 16) and scaling order, with tdpbssd / tdpbsud
 *     emulated in C), with the rest of the work on every ISA this CPU runs,
 *     on W as in the file and packed (qgemm_pack), for Q8_0, Q4_0, Q4_K,
 *     Q5_K and Q6_K, random-byte and quantized-Gaussian weights, n_rows
 *     1, 15, 16, 17, 33, 512 (below 16 and the tails are the other
 *     kernels), n_in not a multiple of 64 where the block allows (Q8_0 /
 *     Q4_0: 32, 96, 160), n_out not a multiple of the 8-column panel, 1 and
 *     2 threads, qgemm_multi with mixed types and qgemm_cols on a column
 *     range;
 *   - the same with the real instructions (QGEMM_ISA_AMX) where the CPU
 *     has AMX; elsewhere that case prints "# skip: no AMX (...)" and passes.
 * The emulation itself is checked against a plain matrix product of the
 * unpacked operands (the VNNI layout of B, signed / unsigned operands).
 * Dispatch: qgemm_set_isa(AMX) fails cleanly without AMX, and
 * PAGODA_ISA=amx falls back with one clear line (in a child process: the
 * choice is cached per process). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/cpu.h"
#include "common/xalloc.h"
#include "tests/worker/kernels/qgemm_testdata.h"
#include "worker/kernels/amx_tile.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"

static const uint32_t AMX_TYPES[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K,
                                     GGML_TYPE_Q6_K};
#define N_AMX_TYPES (sizeof AMX_TYPES / sizeof AMX_TYPES[0])

/* ---- dispatch ---------------------------------------------------------------- */

/* PAGODA_ISA=amx in a fresh child (qgemm_isa_default caches per process):
 * without AMX the child reports the reason on stderr and runs another ISA;
 * with AMX it runs amx. Runs first, before this process caches anything. */
static void test_env_amx_fallback(void **state)
{
    (void)state;
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        setenv("PAGODA_ISA", "amx", 1);
        qgemm_isa_t isa = qgemm_isa_default();
        _exit(isa == QGEMM_ISA_AMX ? 10 : isa == QGEMM_ISA_AUTO ? 1 : 11);
    }
    close(fd[1]);
    char buf[512] = {0};
    size_t n = 0;
    ssize_t k;
    while (n < sizeof buf - 1 && (k = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0)
        n += (size_t)k;
    close(fd[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    if (qgemm_isa_available(QGEMM_ISA_AMX)) {
        assert_int_equal(WEXITSTATUS(st), 10);
        assert_int_equal(n, 0);
    } else {
        assert_int_equal(WEXITSTATUS(st), 11);
        printf("# PAGODA_ISA=amx here: %s", buf);
        assert_non_null(strstr(buf, "PAGODA_ISA=amx: no usable AMX on this machine ("));
        assert_non_null(strstr(buf, "); using "));
        assert_true(n > 0 && strchr(buf, '\n') == buf + n - 1); /* one line */
    }
}

static void test_detection_and_set_isa(void **state)
{
    (void)state;
    const bool amx = cpu_has_amx_int8();
    printf("# cpu_has_amx_int8 %d, cpu_has_amx_bf16 %d, why not: \"%s\"\n", amx, cpu_has_amx_bf16(),
           cpu_amx_why_not());
    /* a reason exactly when there is no AMX; bf16 implies int8 */
    assert_int_equal(cpu_amx_why_not()[0] == '\0', amx);
    assert_true(!cpu_has_amx_bf16() || amx);
    assert_int_equal(qgemm_isa_available(QGEMM_ISA_AMX), amx && qgemm_isa_available(QGEMM_ISA_AVX512VNNI));
    assert_string_equal(qgemm_isa_name(QGEMM_ISA_AMX), "amx");
    qgemm_ctx_t *ctx = qgemm_ctx_new(4, 64);
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_SCALAR), 0);
    if (qgemm_isa_available(QGEMM_ISA_AMX)) {
        assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AMX), 0);
        assert_int_equal(qgemm_get_isa(ctx), QGEMM_ISA_AMX);
    } else {
        assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AMX), -1);
        assert_int_equal(qgemm_get_isa(ctx), QGEMM_ISA_SCALAR); /* kept */
    }
    qgemm_ctx_free(&ctx);
}

/* ---- the emulation against plain matrix products ------------------------------ */

static void test_emulated_tile_ops(void **state)
{
    (void)state;
    uint64_t s = 7;
    for (int sgn = 0; sgn < 2; sgn++) {
        /* A (M × 4K) and a K4 = 4K by N matrix Bm, B = Bm in VNNI layout */
        const int M = 16, K = sgn ? 8 : 4, N = 8 + 4 * sgn;
        int8_t a[16][64];
        uint8_t bm[64][16], bt[16][64];
        for (int m = 0; m < M; m++)
            for (int i = 0; i < 4 * K; i++)
                a[m][i] = (int8_t)rng_next(&s);
        for (int i = 0; i < 4 * K; i++)
            for (int n = 0; n < N; n++) {
                bm[i][n] = (uint8_t)rng_next(&s);
                bt[i / 4][4 * n + i % 4] = bm[i][n];
            }
        int32_t c0[16][16], got[16][16];
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                c0[m][n] = (int32_t)(rng_next(&s) % 2000001) - 1000000;
        amx_tilecfg_t cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.palette = 1;
        cfg.rows[0] = (uint8_t)M;
        cfg.colsb[0] = (uint16_t)(4 * K);
        cfg.rows[1] = (uint8_t)K;
        cfg.colsb[1] = (uint16_t)(4 * N);
        cfg.rows[5] = (uint8_t)M;
        cfg.colsb[5] = (uint16_t)(4 * N);
        amx_emu_t *e = xmalloc(sizeof *e);
        amx_emu_config(e, &cfg);
        amx_emu_load(e, 0, a, sizeof a[0]);
        amx_emu_load(e, 1, bt, sizeof bt[0]);
        amx_emu_load(e, 5, c0, sizeof c0[0]);
        for (int bs = 0; bs < 2; bs++) {
            amx_emu_dp(e, 5, 0, 1, 1, bs);
            amx_emu_store(e, 5, got, sizeof got[0]);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    int64_t want = c0[m][n];
                    for (int i = 0; i < 4 * K; i++)
                        want += (int64_t)a[m][i] * (bs ? (int)(int8_t)bm[i][n] : (int)bm[i][n]);
                    assert_int_equal(got[m][n], (int32_t)want);
                    c0[m][n] = (int32_t)want; /* C accumulates */
                }
        }
        amx_emu_zero(e, 5);
        amx_emu_store(e, 5, got, sizeof got[0]);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++)
                assert_int_equal(got[m][n], 0);
        free(e);
    }
}

/* ---- qgemm with AMX tiles against the scalar kernel ---------------------------- */

static void expect_bits(const float *y, const float *ys, int64_t n, const char *what, uint32_t type, int64_t n_in,
                        int n_rows)
{
    for (int64_t e = 0; e < n; e++)
        if (memcmp(&y[e], &ys[e], sizeof(float)) != 0)
            fail_msg("%s %s n_in %lld n_rows %d: y[%lld] = %.9g != scalar %.9g", what, ggml_type_name(type),
                     (long long)n_in, n_rows, (long long)e, y[e], ys[e]);
}

/* One qgemm_multi call. ys NULL: returns its y (the caller frees);
 * otherwise fails unless y equals ys bit for bit, and returns NULL. */
static float *run_cmp(qgemm_ctx_t *ctx, uint32_t type, const uint8_t *w, const void *packed, int64_t n_out,
                      int64_t n_in, const float *x, int n_rows, const float *ys, const char *what)
{
    const int64_t n = (int64_t)n_rows * n_out;
    float *y = xmalloc((size_t)n * sizeof(float) + 1);
    qgemm_mat_t m = {.type = type, .w = w, .n_out = n_out, .y = y, .packed = packed};
    assert_int_equal(qgemm_multi(ctx, &m, 1, n_in, x, n_rows), 0);
    if (!ys)
        return y;
    expect_bits(y, ys, n, what, type, n_in, n_rows);
    free(y);
    return NULL;
}

/* The tile path (emulated, or real when `real`) with every ISA this CPU
 * runs for the rest, W plain and packed, against the scalar result. */
static void check_shape(qgemm_ctx_t *ctx, bool real, uint32_t type, const uint8_t *w, int64_t n_out, int64_t n_in,
                        int n_rows, uint64_t seed)
{
    float *x = activations(n_rows, n_in, seed);
    qgemm_set_amx_emulated(ctx, false);
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_SCALAR), 0);
    float *ys = run_cmp(ctx, type, w, NULL, n_out, n_in, x, n_rows, NULL, NULL);
    void *packed = qgemm_pack(type, w, n_out, n_in, 1);
    assert_non_null(packed);
    static const qgemm_isa_t rest[] = {QGEMM_ISA_SCALAR, QGEMM_ISA_AVX2, QGEMM_ISA_AVXVNNI, QGEMM_ISA_AVX512VNNI};
    for (size_t i = 0; i < (real ? 1 : sizeof rest / sizeof rest[0]); i++) {
        if (real) {
            assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AMX), 0);
        } else {
            if (!isa_runs(rest[i]))
                continue;
            assert_int_equal(qgemm_set_isa(ctx, rest[i]), 0);
            qgemm_set_amx_emulated(ctx, true);
        }
        char what[64];
        for (int pk = 0; pk < 2; pk++) {
            snprintf(what, sizeof what, "%s%s%s", real ? "amx" : "amx-emulated+", real ? "" : qgemm_isa_name(rest[i]),
                     pk ? " packed" : "");
            run_cmp(ctx, type, w, pk ? packed : NULL, n_out, n_in, x, n_rows, ys, what);
        }
        qgemm_set_amx_emulated(ctx, false);
    }
    qgemm_pack_free(&packed);
    free(x);
    free(ys);
}

/* every type × n_in × n_rows, random-byte and Gaussian weights */
static void check_all(bool real)
{
    static const int ROWS[] = {1, 15, 16, 17, 33, 512};
    qgemm_ctx_t *ctx = qgemm_ctx_new(512, 768);
    for (size_t t = 0; t < N_AMX_TYPES; t++) {
        const uint32_t type = AMX_TYPES[t];
        const bool k = type != GGML_TYPE_Q8_0 && type != GGML_TYPE_Q4_0;
        const int64_t n_ins[] = {k ? 256 : 32, k ? 512 : 96, k ? 768 : 160};
        for (size_t j = 0; j < 3; j++) {
            const int64_t n_in = n_ins[j], n_out = j == 1 ? 8 : 29;
            for (int src = 0; src < 2; src++) {
                uint8_t *w = src ? weights_quantized(type, n_out, n_in, 100 + 7 * t + j)
                                 : weights_random_bytes(type, n_out, n_in, 200 + 7 * t + j);
                for (size_t r = 0; r < sizeof ROWS / sizeof ROWS[0]; r++) {
                    if (ROWS[r] == 512 && (j != 0 || src != 0))
                        continue; /* the big batch once per type */
                    check_shape(ctx, real, type, w, n_out, n_in, ROWS[r], 300 + 11 * t + 3 * j + r);
                }
                free(w);
            }
        }
    }
    qgemm_ctx_free(&ctx);
}

static void test_emulated_bit_exact(void **state)
{
    (void)state;
    check_all(false);
}

static void test_real_amx_bit_exact(void **state)
{
    (void)state;
    if (!qgemm_isa_available(QGEMM_ISA_AMX)) {
        printf("# skip: no AMX (%s)\n", cpu_has_avx512_vnni() ? cpu_amx_why_not() : "no AVX-512 VNNI");
        return;
    }
    check_all(true);
}

/* qgemm_multi with mixed types, 2 threads, and qgemm_cols on a column
 * range, on the tile path (real where the CPU has it, else emulated). */
static void test_multi_cols_threads(void **state)
{
    (void)state;
    const int64_t n_in = 512, n_out = 37;
    const int n_rows = 35;
    qgemm_ctx_t *ctx = qgemm_ctx_new(n_rows, n_in);
    assert_int_equal(qgemm_set_threads(ctx, 2), 0);
    float *x = activations(n_rows, n_in, 5);
    uint8_t *w[N_AMX_TYPES];
    float *ys[N_AMX_TYPES], *ya[N_AMX_TYPES];
    qgemm_mat_t m[N_AMX_TYPES];
    assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_SCALAR), 0);
    for (size_t t = 0; t < N_AMX_TYPES; t++) {
        w[t] = weights_quantized(AMX_TYPES[t], n_out, n_in, 40 + t);
        ys[t] = run_cmp(ctx, AMX_TYPES[t], w[t], NULL, n_out, n_in, x, n_rows, NULL, NULL);
        ya[t] = xmalloc((size_t)n_rows * n_out * sizeof(float));
        m[t] = (qgemm_mat_t){.type = AMX_TYPES[t], .w = w[t], .n_out = n_out, .y = ya[t]};
    }
    const bool real = qgemm_isa_available(QGEMM_ISA_AMX);
    if (real)
        assert_int_equal(qgemm_set_isa(ctx, QGEMM_ISA_AMX), 0);
    else
        qgemm_set_amx_emulated(ctx, true);
    assert_int_equal(qgemm_multi(ctx, m, (int)N_AMX_TYPES, n_in, x, n_rows), 0);
    for (size_t t = 0; t < N_AMX_TYPES; t++)
        expect_bits(ya[t], ys[t], (int64_t)n_rows * n_out, "multi", AMX_TYPES[t], n_in, n_rows);
    /* columns 8..n_out of the Q6_K matrix through qgemm_cols */
    float *yc = xcalloc((size_t)n_rows * n_out, sizeof(float));
    assert_int_equal(qgemm_quantize(ctx, x, n_rows, n_in), 0);
    assert_int_equal(qgemm_cols(ctx, GGML_TYPE_Q6_K, w[4], n_out, n_in, n_rows, 8, n_out, yc, 1), 0);
    for (int r = 0; r < n_rows; r++)
        expect_bits(yc + (int64_t)r * n_out + 8, ys[4] + (int64_t)r * n_out + 8, n_out - 8, "cols", GGML_TYPE_Q6_K,
                    n_in, n_rows);
    free(yc);
    for (size_t t = 0; t < N_AMX_TYPES; t++) {
        free(w[t]);
        free(ys[t]);
        free(ya[t]);
    }
    free(x);
    qgemm_ctx_free(&ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_env_amx_fallback), /* first: before this process picks its ISA */
        cmocka_unit_test(test_detection_and_set_isa),
        cmocka_unit_test(test_emulated_tile_ops),
        cmocka_unit_test(test_emulated_bit_exact),
        cmocka_unit_test(test_real_amx_bit_exact),
        cmocka_unit_test(test_multi_cols_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
