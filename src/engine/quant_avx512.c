/* quant_avx512 — AVX-512 (F/BW/VL/DQ) + VNNI kernels, installed over the AVX2 ones when the CPU
 * has them. int8 dots use vpdpbusd on the sign trick (|x| unsigned, sign(y, x) signed). */
#include <immintrin.h>

#include "engine/fp16.h"
#include "engine/quant_blocks.h"

#ifndef PF_DIST
#define PF_DIST 1024 /* bytes ahead of the weight stream to prefetch */
#endif

static inline __m256i dpbusd_i8(__m256i acc, __m256i x, __m256i y)
{
    return _mm256_dpbusd_epi32(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}

static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static float q8_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q8_0 *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t nb = n / QK8_0, i = 0;
    for (; i + 2 <= nb; i += 2) {
        _mm_prefetch((const char *)(x + i) + PF_DIST, _MM_HINT_T0);
        __m256i p0 = dpbusd_i8(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[i].qs),
                               _mm256_loadu_si256((const __m256i *)y[i].qs));
        __m256i p1 =
            dpbusd_i8(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[i + 1].qs),
                      _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                               _mm256_set1_ps(fp16_to_f32(x[i + 1].d) * fp16_to_f32(y[i + 1].d)),
                               acc1);
    }
    for (; i < nb; i++) {
        __m256i p0 = dpbusd_i8(_mm256_setzero_si256(), _mm256_loadu_si256((const __m256i *)x[i].qs),
                               _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

void quant_register_avx512(struct quant_traits *t)
{
    t[GGML_TYPE_Q8_0].vec_dot = q8_0_dot;
}
