/* quant_avx512 — AVX-512 (F/BW/VL/DQ) + VNNI kernels, installed over the AVX2 ones when the CPU
 * has them. int8 dots use vpdpbusd on the sign trick (|x| unsigned, sign(y, x) signed). */
#include <immintrin.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/quant_blocks.h"

#ifndef PF_DIST
#define PF_DIST 4096 /* bytes ahead of the weight stream to prefetch */
#endif
#ifndef PF_HINT
#define PF_HINT _MM_HINT_T0
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
        _mm_prefetch((const char *)(x + i) + PF_DIST, PF_HINT);
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

/* f16 x f16, 64 elements per step in four chains, weights prefetched ahead */
static float f16_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        _mm_prefetch((const char *)(x + i) + PF_DIST, PF_HINT);
        _mm_prefetch((const char *)(x + i) + PF_DIST + 64, PF_HINT);
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i))), a0);
        a1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 16))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 16))), a1);
        a2 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 32))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 32))), a2);
        a3 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i + 48))),
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(y + i + 48))), a3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)),
                             _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, y + i)), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* f32 x f32 */
static float f32_dot(int64_t n, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 4; k++) _mm_prefetch((const char *)(x + i) + 2 * PF_DIST + 64 * k, PF_HINT);
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(y + i + 16), a1);
        a2 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), _mm512_loadu_ps(y + i + 32), a2);
        a3 = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), _mm512_loadu_ps(y + i + 48), a3);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

/* bf16 x f32 */
static float bf16_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx;
    const float *y = vy;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        if (((i / 16) & 1) == 0) _mm_prefetch((const char *)(x + i) + PF_DIST, PF_HINT);
        __m512 w = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, x + i)), 16));
        __m512 p = _mm512_maskz_loadu_ps(m, y + i);
        if ((i / 16) & 1) a1 = _mm512_fmadd_ps(w, p, a1);
        else a0 = _mm512_fmadd_ps(w, p, a0);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

void quant_register_avx512(struct quant_traits *t)
{
    t[GGML_TYPE_F16].vec_dot = f16_dot;
    t[GGML_TYPE_F32].vec_dot = f32_dot;
    t[GGML_TYPE_BF16].vec_dot = bf16_dot;
    t[GGML_TYPE_Q8_0].vec_dot = q8_0_dot;
}
