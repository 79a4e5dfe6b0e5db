/* vmath.h — small AVX2 vector helpers shared by the forward pass's kernels
 * (attention.c, forward.c): horizontal sum, e^x and tanh for 8 float lanes.
 *
 * Header-only, static inline, compiled with target("avx2,fma,f16c") so the
 * callers can be chosen at run time (common/cpu.h); on other architectures
 * VMATH_X86 is undefined and nothing here exists.
 */
#ifndef PAGODA_WORKER_KERNELS_VMATH_H
#define PAGODA_WORKER_KERNELS_VMATH_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define VMATH_X86 1
#define VMATH_FN __attribute__((target("avx2,fma,f16c")))
#define VMATH_INL static inline __attribute__((always_inline, target("avx2,fma,f16c")))

/* v[0] + ... + v[7], in a fixed order. */
VMATH_INL float vmath_hsum8(__m256 v)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* e^x for 8 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6
 * polynomial (Taylor coefficients; max relative error ~2e-7 on the range),
 * times 2^n built in the exponent field. x < -87.3 gives 0, x > 88.7
 * gives +inf (softmax arguments are <= 0; silu clamps). */
VMATH_INL __m256 vmath_exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.33654f), hi = _mm256_set1_ps(88.72283f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145752f), x);   /* ln2 high bits */
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860677e-6f), r);         /* ln2 - high */
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* 2^n: n in [-126, 128]; split in two factors so n = 128 does not overflow the exponent */
    __m256i ni = _mm256_cvtps_epi32(n);
    __m256i n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, _mm256_set1_epi32(127)), 23));
    __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(under, _mm256_mul_ps(_mm256_mul_ps(p, s1), s2));
}

/* tanh(x) = sign(x) (1 - 2 / (e^{2|x|} + 1)) for 8 lanes; |x| is clamped at
 * 40 (tanh is 1 in float there). Relative error ~1e-6 away from 0; near 0
 * the absolute error is ~1e-7. */
VMATH_INL __m256 vmath_tanh8(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f), one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_min_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(40.0f));
    __m256 e = vmath_exp8(_mm256_add_ps(ax, ax));
    __m256 t = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    return _mm256_or_ps(t, _mm256_and_ps(sign, x));
}
#endif

#endif
