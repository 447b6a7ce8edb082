/* sampler_avx2 — the two full-vocabulary passes of a sampling step, 8 lanes at a time (picked at
 * runtime by sampler.c when the CPU has AVX2 + FMA; sampler.c holds the scalar reference). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "engine/sample/sampler_internal.h"

float sampler_max_avx2(const float *x, int64_t n)
{
    __m256 acc = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    /* max_ps(a, b) returns b when either is NaN: NaN logits never win. */
    for (; i + 8 <= n; i += 8)
        acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc);
    float lanes[8], m = -INFINITY;
    _mm256_storeu_ps(lanes, acc);
    for (int k = 0; k < 8; k++)
        m = lanes[k] > m ? lanes[k] : m;
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

/* exp(d) for d <= 0: d = k ln2 + r, |r| <= ln2/2, e^r by its degree-6 Taylor polynomial (relative
 * error < 2e-7), times 2^k. Lanes with d below -87 (incl. -inf) or NaN give 0. */
static inline __m256 exp_nonpos(__m256 d)
{
    const __m256 live = _mm256_cmp_ps(d, _mm256_set1_ps(-87.0f), _CMP_GT_OQ);
    d = _mm256_max_ps(d, _mm256_set1_ps(-87.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145751953125f), d);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_cvtps_epi32(k), 23);
    p = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(p), e));
    return _mm256_and_ps(p, live);
}

double sampler_sumexp_avx2(const float *x, int64_t n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp_nonpos(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
        s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lanes[4], s = 0;
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    for (int k = 0; k < 4; k++)
        s += lanes[k];
    for (; i < n; i++)
        if (x[i] > -INFINITY) s += expf(x[i] - m);
    return s;
}
