/* kv_store.c — element conversion for the KV cache (see kv_store.h): float
 * rows into F32 / F16 cache slots and back. The F16 write is on the forward
 * pass's path once per (row, layer) for K and V; F16C converts 8 floats per
 * instruction, the portable converter (worker/kernels/quant.c) one at a time. */
#include "worker/kernels/kv_store.h"

#include <math.h>
#include <string.h>

#include "common/cpu.h"
#include "worker/kernels/quant.h"

const char *kv_type_name(kv_type_t t)
{
    return t == KV_TYPE_F32    ? "f32"
           : t == KV_TYPE_F16  ? "f16"
           : t == KV_TYPE_Q8_0 ? "q8_0"
           : t == KV_TYPE_AUTO ? "auto"
                               : "?";
}

int kv_type_parse(const char *s, kv_type_t *out)
{
    if (!s)
        return -1;
    if (!strcmp(s, "f32"))
        *out = KV_TYPE_F32;
    else if (!strcmp(s, "f16"))
        *out = KV_TYPE_F16;
    else if (!strcmp(s, "q8_0"))
        *out = KV_TYPE_Q8_0;
    else if (!strcmp(s, "auto"))
        *out = KV_TYPE_AUTO;
    else
        return -1;
    return 0;
}

static int g_force_portable; /* kv_store_test_portable */

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KVS_X86 1

/* _MM_FROUND_TO_NEAREST_INT: round to nearest even, whatever MXCSR says. */
__attribute__((target("avx,f16c"))) static void write_f16c(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        dst[i] = quant_fp32_to_fp16(src[i]);
}

__attribute__((target("avx,f16c"))) static void read_f16c(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(src + i))));
    for (; i < n; i++)
        dst[i] = quant_fp16_to_fp32(src[i]);
}
#endif

int kv_store_test_portable(int on)
{
    g_force_portable = on;
    return cpu_has_f16c();
}

void kv_store_write(kv_type_t t, void *dst, const float *src, size_t n)
{
    if (t == KV_TYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    assert(t == KV_TYPE_F16);
    uint16_t *d = dst;
#ifdef KVS_X86
    if (!g_force_portable && cpu_has_f16c()) {
        write_f16c(d, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        d[i] = quant_fp32_to_fp16(src[i]);
}

void kv_store_read(kv_type_t t, const void *src, float *dst, size_t n)
{
    if (t == KV_TYPE_F32) {
        memcpy(dst, src, n * sizeof(float));
        return;
    }
    assert(t == KV_TYPE_F16);
    const uint16_t *s = src;
#ifdef KVS_X86
    if (!g_force_portable && cpu_has_f16c()) {
        read_f16c(dst, s, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++)
        dst[i] = quant_fp16_to_fp32(s[i]);
}

void kv_store_quantize(const float *x, int qb, int8_t *q, uint16_t *d)
{
    float amax = 0;
    for (int i = 0; i < qb; i++) {
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    const float dd = amax / 127.0f, id = dd > 0 ? 1.0f / dd : 0.0f;
    *d = quant_fp32_to_fp16(dd);
    for (int i = 0; i < qb; i++) {
        float r = nearbyintf(x[i] * id); /* round half to even (default mode) */
        q[i] = (int8_t)(r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r);
    }
}

void kv_store_write_slice(const kv_store_t *s, void *row, int e0, const float *src, int n)
{
    if (s->type != KV_TYPE_Q8_0) {
        kv_store_write(s->type, (char *)row + (size_t)e0 * kv_type_size(s->type), src, (size_t)n);
        return;
    }
    const int qb = s->qblock;
    assert(qb > 0 && e0 % qb == 0 && n % qb == 0 && e0 + n <= s->kv_dim);
    int8_t *q = (int8_t *)row;
    uint16_t *d = (uint16_t *)((char *)row + s->kv_dim);
    for (int b = 0; b < n / qb; b++)
        kv_store_quantize(src + (size_t)b * qb, qb, q + e0 + b * qb, d + e0 / qb + b);
}

void kv_store_read_slice(const kv_store_t *s, const void *row, int e0, float *dst, int n)
{
    if (s->type != KV_TYPE_Q8_0) {
        kv_store_read(s->type, (const char *)row + (size_t)e0 * kv_type_size(s->type), dst, (size_t)n);
        return;
    }
    const int qb = s->qblock;
    assert(qb > 0 && e0 % qb == 0 && n % qb == 0 && e0 + n <= s->kv_dim);
    const int8_t *q = (const int8_t *)row;
    const uint16_t *d = (const uint16_t *)((const char *)row + s->kv_dim);
    for (int i = 0; i < n; i++)
        dst[i] = quant_fp16_to_fp32(d[(e0 + i) / qb]) * (float)q[e0 + i];
}
