/* vexp_avx2 — e^x over 8 float lanes (AVX2 + FMA), the one copy for every AVX2 kernel (attention
 * softmax, the sampler's sum of exponentials). Include only from files built with -mavx2 -mfma.
 *
 * x = n ln2 + r with |r| <= ln2/2 (ln2 split in two for an exact reduction), e^r by its degree-6
 * Taylor polynomial (relative error < 2e-7 on the live range), times 2^n added into the exponent
 * bits. x is clamped above at 88 (e^88 < FLT_MAX, so 2^n stays finite); lanes at or below -87,
 * -inf and NaN give exactly 0 (the true value is below FLT_MIN there, and a masked logit of -inf
 * must contribute nothing). This is the union of the two copies that had drifted apart: the
 * attention copy gave e^-87 for -inf and NaN, the sampler copy had no upper clamp. */
#ifndef LMS_ENGINE_VEXP_AVX2_H
#define LMS_ENGINE_VEXP_AVX2_H

#include <immintrin.h>

static inline __m256 vexp_avx2(__m256 x)
{
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_GT_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    x = _mm256_min_ps(x, _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    /* n in [-126, 127] and p in [2^-0.5, 2^0.5] on the live range: the biased exponent stays in
     * 1..254, so adding n to it is exact */
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(n), 23);
    p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_and_ps(p, live);
}

#endif
