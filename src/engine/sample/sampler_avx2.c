/* sampler_avx2 — the two full-vocabulary passes of a sampling step, 8 lanes at a time (picked at
 * runtime by sampler.c when the CPU has AVX2 + FMA; sampler.c holds the scalar reference). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "engine/kernels/vexp_avx2.h"
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

double sampler_sumexp_avx2(const float *x, int64_t n, float m)
{
    const __m256 vm = _mm256_set1_ps(m);
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = vexp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm));
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
