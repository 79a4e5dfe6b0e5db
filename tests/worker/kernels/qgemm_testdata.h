/* qgemm_testdata.h — seeded test data shared by the int8 matmul tests
 * (test_qgemm.c, test_qgemm_pack.c, test_qkpack.c, test_qgemm_amx.c): a
 * splitmix64 generator, Gaussian samples, quantized weight matrices (also
 * from random bytes, which reach every quant value) and activation rows. Header-only
 * (static functions): each test program includes it once. */
#ifndef PAGODA_TESTS_WORKER_QGEMM_TESTDATA_H
#define PAGODA_TESTS_WORKER_QGEMM_TESTDATA_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/text/ggml_type.h"
#include "common/xalloc.h"
#include "worker/kernels/qgemm.h"
#include "worker/kernels/quant.h"

/* The vector ISAs whose results must equal the scalar kernel's bit for
 * bit. Tests loop over them with isa_runs(), which says once per program
 * which ones this CPU lacks (those are skipped). */
static const qgemm_isa_t VECTOR_ISAS[] = {QGEMM_ISA_AVX2, QGEMM_ISA_AVXVNNI, QGEMM_ISA_AVX512VNNI};
#define N_VECTOR_ISAS (sizeof VECTOR_ISAS / sizeof VECTOR_ISAS[0])

static bool isa_runs(qgemm_isa_t isa)
{
    static bool told[8];
    bool ok = qgemm_isa_available(isa);
    if (!ok && !told[isa]) {
        printf("# skip: this CPU lacks %s; its kernels are not tested here\n", qgemm_isa_name(isa));
        told[isa] = true;
    }
    return ok;
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) */
static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1p-53; }

/* standard normal (Box-Muller) */
static float rng_gauss(uint64_t *s)
{
    double u = rng_unit(s) + 1e-300, v = rng_unit(s);
    return (float)(sqrt(-2 * log(u)) * cos(2 * M_PI * v));
}

/* n_out rows of n_in Gaussian floats (std 0.02, like trained weights),
 * quantized to `type` with quant_quantize. Caller frees. */
static uint8_t *weights_quantized(uint32_t type, int64_t n_out, int64_t n_in, uint64_t seed)
{
    size_t rb = quant_row_bytes(type, n_in);
    uint8_t *w = xmalloc(rb * (size_t)n_out);
    float *row = xmalloc((size_t)n_in * sizeof(float));
    uint64_t s = seed;
    for (int64_t c = 0; c < n_out; c++) {
        for (int64_t i = 0; i < n_in; i++)
            row[i] = 0.02f * rng_gauss(&s);
        if (quant_quantize(type, row, w + rb * (size_t)c, n_in) != 0)
            abort(); /* a type the tests do not quantize */
    }
    free(row);
    return w;
}

/* Activations (n_rows, n_in): Gaussian with an outlier of 20σ every ~97
 * elements (LLM hidden states have a few large channels). Caller frees. */
static float *activations(int n_rows, int64_t n_in, uint64_t seed)
{
    float *x = xmalloc((size_t)n_rows * (size_t)n_in * sizeof(float));
    uint64_t s = seed;
    for (int64_t i = 0; i < (int64_t)n_rows * n_in; i++) {
        x[i] = rng_gauss(&s);
        if (rng_next(&s) % 97 == 0)
            x[i] *= 20;
    }
    return x;
}

static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* A positive f16 scale in [lo, hi). */
static inline uint16_t rand_scale(uint64_t *s, double lo, double hi)
{
    return quant_fp32_to_fp16((float)(lo + (hi - lo) * rng_unit(s)));
}

/* n_out rows of n_in: random bytes, then every f16 scale field replaced by a
 * sane value (random bytes there would give inf/NaN weights). */
static inline uint8_t *weights_random_bytes(uint32_t type, int64_t n_out, int64_t n_in, uint64_t seed)
{
    size_t rb = quant_row_bytes(type, n_in), n = rb * (size_t)n_out;
    uint8_t *w = xmalloc(n);
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        w[i] = (uint8_t)rng_next(&s);
    size_t bb = ggml_type_block_bytes(type);
    for (size_t off = 0; off < n; off += bb) {
        uint8_t *b = w + off;
        switch (type) {
        case GGML_TYPE_Q8_0: wr16(b, rand_scale(&s, 1e-3, 2e-2)); break;
        case GGML_TYPE_Q4_0: wr16(b, rand_scale(&s, 1e-2, 5e-2) | (rng_next(&s) & 1) << 15); break;
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K:
            wr16(b, rand_scale(&s, 1e-4, 2e-3));
            wr16(b + 2, rand_scale(&s, 1e-4, 2e-3));
            break;
        case GGML_TYPE_Q6_K: wr16(b + 208, rand_scale(&s, 1e-5, 2e-4)); break;
        }
    }
    return w;
}

#endif
