/* kv_store.c — element conversion for the KV cache (see kv_store.h): float
 * rows into F32 / F16 cache slots and back. The F16 write is on the forward
 * pass's path once per (row, layer) for K and V; F16C converts 8 floats per
 * instruction, the portable converter (worker/kernels/quant.c) one at a time. */
#include "worker/kernels/kv_store.h"

#include <string.h>

#include "common/cpu.h"
#include "worker/kernels/quant.h"

const char *kv_type_name(kv_type_t t)
{
    return t == KV_TYPE_F32 ? "f32" : t == KV_TYPE_F16 ? "f16" : t == KV_TYPE_AUTO ? "auto" : "?";
}

int kv_type_parse(const char *s, kv_type_t *out)
{
    if (!s)
        return -1;
    if (!strcmp(s, "f32"))
        *out = KV_TYPE_F32;
    else if (!strcmp(s, "f16"))
        *out = KV_TYPE_F16;
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
