/* Tests for worker/kv_store: element types, addressing and the float <-> f16
 * conversion of cache writes and reads.
 *
 * Reference for the f16 write: the definition of round to nearest even,
 * checked in double arithmetic — the stored half h of x must be at least as
 * close to x as both neighbouring halves, and on a tie have an even mantissa;
 * beyond the largest finite half (65504) the result is ±inf exactly when x is
 * at least 65520 in magnitude (the midpoint to the next power of two). The F16C
 * and the portable converter must also agree bit for bit (the forward pass
 * may use either for a given row's tail, and a machine's choice must not
 * change results). Inputs: every half value, the floats just around every
 * midpoint between consecutive halves, and a strided sweep of all float bit
 * patterns.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "worker/kernels/kv_store.h"
#include "worker/kernels/quant.h"

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The value of half bits h, by the IEEE definition (not quant.c). */
static double half_value(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

/* Whether h is the round-to-nearest-even half of x (x not NaN). */
static int is_rne(float x, uint16_t h)
{
    double xv = x, hv = half_value(h);
    double ax = fabs(xv);
    if (ax >= 65520.0)
        return isinf(hv) && (hv > 0) == (xv > 0);
    if (isinf(hv) || isnan(hv))
        return 0;
    if (!signbit(hv) != !signbit(xv))
        return 0;                      /* ±0 keep their sign, so does a rounded-to-zero tiny x */
    uint16_t mag = h & 0x7fff;
    double d = fabs(fabs(hv) - ax);
    double below = mag > 0 ? half_value((uint16_t)(mag - 1)) : -1;   /* next half toward 0 */
    double above = mag < 0x7bff ? half_value((uint16_t)(mag + 1)) : INFINITY;
    if (below >= 0 && fabs(below - ax) < d)
        return 0;
    if (mag == 0x7bff) {
        /* above 65504 the next value is inf; x < 65520 rounds down to 65504 */
    } else if (fabs(above - ax) < d) {
        return 0;
    }
    /* on a tie the even mantissa wins */
    if (below >= 0 && fabs(below - ax) == d && (mag & 1))
        return 0;
    if (mag < 0x7bff && fabs(above - ax) == d && (mag & 1))
        return 0;
    return 1;
}

/* Converts xs (n) both ways, checks each against the definition and the
 * two converters against each other. Returns the number of inputs checked. */
static size_t check_batch(const float *xs, size_t n, int have_f16c)
{
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2);
    kv_store_test_portable(1);
    kv_store_write(KV_TYPE_F16, a, xs, n);
    kv_store_test_portable(0);
    kv_store_write(KV_TYPE_F16, b, xs, n);
    for (size_t i = 0; i < n; i++) {
        if (isnan(xs[i])) {
            if (!isnan(half_value(a[i])) || (have_f16c && !isnan(half_value(b[i]))))
                fail_msg("NaN gave 0x%04x / 0x%04x", a[i], b[i]);
            continue;
        }
        if (!is_rne(xs[i], a[i]))
            fail_msg("portable: %.9g -> 0x%04x (%.9g) is not round-to-nearest-even", xs[i], a[i],
                     half_value(a[i]));
        if (have_f16c && a[i] != b[i])
            fail_msg("F16C and portable differ on %.9g: 0x%04x vs 0x%04x", xs[i], b[i], a[i]);
    }
    free(a);
    free(b);
    return n;
}

static void test_types(void **state)
{
    (void)state;
    kv_type_t t = (kv_type_t)5;
    assert_int_equal(kv_type_size(KV_TYPE_F32), 4);
    assert_int_equal(kv_type_size(KV_TYPE_F16), 2);
    assert_int_equal(kv_type_size((kv_type_t)5), 0);
    assert_int_equal(kv_type_parse("f16", &t), 0);
    assert_int_equal(t, KV_TYPE_F16);
    assert_int_equal(kv_type_parse("f32", &t), 0);
    assert_int_equal(t, KV_TYPE_F32);
    assert_int_equal(kv_type_parse("q8_0", &t), 0);
    assert_int_equal(t, KV_TYPE_Q8_0);
    assert_string_equal(kv_type_name(KV_TYPE_Q8_0), "q8_0");
    assert_int_equal(kv_type_size(KV_TYPE_Q8_0), 0); /* no whole bytes per element */
    assert_int_equal(kv_type_parse("f32", &t), 0);
    static const char *const bad[] = { "", "F16", "f16 ", "fp16", "q8", "Q8_0", "q4_0", "f", "f1" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_int_equal(kv_type_parse(bad[i], &t), -1);
        assert_int_equal(t, KV_TYPE_F32);  /* unchanged */
    }
    assert_int_equal(kv_type_parse(NULL, &t), -1);
    assert_string_equal(kv_type_name(KV_TYPE_F16), "f16");
    assert_string_equal(kv_type_name(KV_TYPE_F32), "f32");
}

/* Both types address (layer, block, slot) at the same element index. */
static void test_addressing(void **state)
{
    (void)state;
    static float k32[2 * 3 * 4 * 5];
    static uint16_t k16[2 * 3 * 4 * 5];
    kv_store_t a = { .n_layer = 2, .n_blocks = 3, .block_size = 4, .kv_dim = 5, .type = KV_TYPE_F32,
                     .k = k32, .v = k32 };
    kv_store_t b = a;
    b.type = KV_TYPE_F16;
    b.k = b.v = k16;
    size_t expect = 0;
    for (int l = 0; l < 2; l++)
        for (int bl = 0; bl < 3; bl++)
            for (int s = 0; s < 4; s++, expect += 5) {
                assert_ptr_equal(kv_store_k(&a, l, bl, s), k32 + expect);
                assert_ptr_equal(kv_store_k_at(&a, l, bl, s), k32 + expect);
                assert_ptr_equal(kv_store_v_at(&b, l, bl, s), k16 + expect);
            }
    assert_int_equal(expect, sizeof k16 / sizeof *k16);
}

static void test_f16_write_rounds_to_nearest_even(void **state)
{
    (void)state;
    int have = kv_store_test_portable(0);
    print_message("  F16C %s\n", have ? "available: compared with the portable converter" : "absent");
    size_t cap = 1 << 16, n = 0, total = 0;
    float *xs = malloc(cap * sizeof(float));
#define PUSH(x) do { xs[n++] = (x); if (n == cap) { total += check_batch(xs, n, have); n = 0; } } while (0)
    /* every half value, and the floats around each midpoint to the next half */
    for (uint32_t h = 0; h < 0x7c00; h++) {
        double v = half_value((uint16_t)h);
        double mid = (v + (h < 0x7bff ? half_value((uint16_t)(h + 1)) : 65536.0)) / 2;
        float fm = (float)mid;   /* exact: midpoints need at most 12 significant bits */
        uint32_t u;
        memcpy(&u, &fm, 4);
        PUSH((float)v);
        PUSH(-(float)v);
        PUSH(fm);
        PUSH(-fm);
        PUSH(f_of(u + 1));
        PUSH(f_of(u - 1));
        PUSH(-f_of(u + 1));
    }
    PUSH(INFINITY);
    PUSH(-INFINITY);
    PUSH(NAN);
    PUSH(65504.0f);
    PUSH(65519.99f);
    PUSH(65520.0f);
    PUSH(1e30f);
    PUSH(-1e-30f);
    PUSH(0x1p-25f);        /* exactly half the smallest subnormal: ties to 0 */
    PUSH(f_of(0x33000001)); /* just above it: rounds up to the smallest subnormal */
    /* a strided sweep of every float bit pattern (the stride is odd, so
     * mantissa bits below the rounding point vary) */
    for (uint64_t u = 0; u < (1ull << 32); u += 40009)
        PUSH(f_of((uint32_t)u));
#undef PUSH
    total += check_batch(xs, n, have);
    print_message("  %zu floats checked\n", total);
    free(xs);
}

/* Reading widens exactly: every finite half survives write(read(h)), and
 * F32 stores are plain copies. */
static void test_read_round_trip(void **state)
{
    (void)state;
    uint16_t *h = malloc(65536 * 2), *back = malloc(65536 * 2);
    float *f = malloc(65536 * sizeof(float)), *g = malloc(65536 * sizeof(float));
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    for (int portable = 0; portable < 2; portable++) {
        kv_store_test_portable(portable);
        kv_store_read(KV_TYPE_F16, h, f, 65536);
        kv_store_write(KV_TYPE_F16, back, f, 65536);
        for (uint32_t i = 0; i < 65536; i++) {
            double v = half_value((uint16_t)i);
            if (isnan(v)) {
                assert_true(isnan(f[i]));
                continue;
            }
            if ((double)f[i] != v || (v == 0 && !signbit(f[i]) != !signbit(v)))
                fail_msg("half 0x%04x read as %.9g, is %.9g", i, f[i], v);
            assert_int_equal(back[i], i);
        }
    }
    kv_store_test_portable(0);
    kv_store_write(KV_TYPE_F32, g, f, 65536);
    assert_memory_equal(g, f, 65536 * sizeof(float));
    memset(g, 0, 65536 * sizeof(float));
    kv_store_read(KV_TYPE_F32, f, g, 65536);
    assert_memory_equal(g, f, 65536 * sizeof(float));
    free(h);
    free(back);
    free(f);
    free(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_addressing),
        cmocka_unit_test(test_f16_write_rounds_to_nearest_even),
        cmocka_unit_test(test_read_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
