/* sampler_internal — SIMD kernels of the sampler (sampler_avx2.c), chosen at runtime in sampler.c.
 */
#ifndef LMS_ENGINE_SAMPLER_INTERNAL_H
#define LMS_ENGINE_SAMPLER_INTERNAL_H

#include <stdint.h>

/* Largest non-NaN value of x[0..n) (-inf if none). */
float sampler_max_avx2(const float *x, int64_t n);
/* Sum of exp(x[i] - m) over x[i] > -inf (NaN skipped); m >= every x[i]. */
double sampler_sumexp_avx2(const float *x, int64_t n, float m);

#endif
