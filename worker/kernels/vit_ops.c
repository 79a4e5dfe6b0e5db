/* vit_ops.c — LayerNorm, bias and activations of a vision encoder's rows
 * (see vit_ops.h): portable loops and AVX2 ones. */
#include "worker/kernels/vit_ops.h"

#include <math.h>

#include "common/cpu.h"
#include "worker/kernels/vmath.h"

void vit_layer_norm_row_ref(const float *x, float *y, const float *w, const float *b, int d, float eps)
{
    double mean = 0, var = 0;
    for (int i = 0; i < d; i++)
        mean += x[i];
    mean /= d;
    for (int i = 0; i < d; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= d;
    const float inv = (float)(1.0 / sqrt(var + eps));
    for (int i = 0; i < d; i++)
        y[i] = (float)(x[i] - mean) * inv * w[i] + b[i];
}

static float act1(enum vit_act a, float x)
{
    switch (a) {
    case VIT_ACT_GELU:
        return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
    case VIT_ACT_SILU:
        return x / (1.0f + expf(-x));
    case VIT_ACT_GELU_QUICK:
        return x / (1.0f + expf(-1.702f * x));
    }
    return x;
}

void vit_act_ref(enum vit_act a, float *x, int n)
{
    for (int i = 0; i < n; i++)
        x[i] = act1(a, x[i]);
}

#ifdef VMATH_X86
/* Σ of 4 double lanes, in a fixed order */
VMATH_INL double hsum4d(__m256d v)
{
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(v), _mm256_extractf128_pd(v, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

VMATH_FN static void norm_avx2(const float *x, float *y, const float *w, const float *b, int d, float eps)
{
    __m256d s = _mm256_setzero_pd();
    int i = 0;
    for (; i + 4 <= d; i += 4)
        s = _mm256_add_pd(s, _mm256_cvtps_pd(_mm_loadu_ps(x + i)));
    double mean = hsum4d(s);
    for (; i < d; i++)
        mean += x[i];
    mean /= d;
    const __m256d m4 = _mm256_set1_pd(mean);
    s = _mm256_setzero_pd();
    for (i = 0; i + 4 <= d; i += 4) {
        __m256d t = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), m4);
        s = _mm256_fmadd_pd(t, t, s);
    }
    double var = hsum4d(s);
    for (; i < d; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= d;
    const float inv = (float)(1.0 / sqrt(var + eps)), mf = (float)mean;
    const __m256 iv = _mm256_set1_ps(inv), mv = _mm256_set1_ps(mf);
    for (i = 0; i + 8 <= d; i += 8) {
        __m256 t = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), iv);
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(t, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i)));
    }
    for (; i < d; i++)
        y[i] = (x[i] - mf) * inv * w[i] + b[i];
}

VMATH_FN static void add_avx2(float *y, const float *b, int d)
{
    int i = 0;
    for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(b + i)));
    for (; i < d; i++)
        y[i] += b[i];
}

/* x · sigmoid(c x) = x / (1 + e^(-c x)) */
VMATH_INL __m256 xsig8(__m256 x, float c)
{
    __m256 e = vmath_exp8(_mm256_mul_ps(x, _mm256_set1_ps(-c)));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

VMATH_FN static void act_avx2(enum vit_act a, float *x, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i), r;
        if (a == VIT_ACT_GELU) {
            __m256 u = _mm256_mul_ps(_mm256_mul_ps(v, v), _mm256_set1_ps(0.044715f));
            u = _mm256_mul_ps(_mm256_fmadd_ps(u, v, v), _mm256_set1_ps(0.7978845608f));
            r = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), v),
                              _mm256_add_ps(_mm256_set1_ps(1.0f), vmath_tanh8(u)));
        } else {
            r = xsig8(v, a == VIT_ACT_SILU ? 1.0f : 1.702f);
        }
        _mm256_storeu_ps(x + i, r);
    }
    for (; i < n; i++)
        x[i] = act1(a, x[i]);
}
#endif

void vit_layer_norm_row(const float *x, float *y, const float *w, const float *b, int d, float eps)
{
#ifdef VMATH_X86
    if (cpu_has_avx2_fma_f16c()) {
        norm_avx2(x, y, w, b, d, eps);
        return;
    }
#endif
    vit_layer_norm_row_ref(x, y, w, b, d, eps);
}

void vit_add(float *y, const float *b, int d)
{
#ifdef VMATH_X86
    if (cpu_has_avx2_fma_f16c()) {
        add_avx2(y, b, d);
        return;
    }
#endif
    for (int i = 0; i < d; i++)
        y[i] += b[i];
}

void vit_act(enum vit_act a, float *x, int n)
{
#ifdef VMATH_X86
    if (cpu_has_avx2_fma_f16c()) {
        act_avx2(a, x, n);
        return;
    }
#endif
    vit_act_ref(a, x, n);
}
