/* ops_avx2 — AVX2+FMA instantiation of the attention unit (see ops.h). */
#include <immintrin.h>
#include <math.h>

#include "engine/kernels/ops.h"
#include "engine/kernels/vexp_avx2.h"

void ops_attn_run_avx2(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                       int c1, float *state);

static inline float hmax256(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
}

static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}


#define VEC __m256
#define VW 8
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, v) _mm256_storeu_ps((p), (v))
#define VSET1(x) _mm256_set1_ps(x)
#define VZERO() _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VMUL(a, b) _mm256_mul_ps((a), (b))
#define VADD(a, b) _mm256_add_ps((a), (b))
#define VSUB(a, b) _mm256_sub_ps((a), (b))
#define VMAX(a, b) _mm256_max_ps((a), (b))
#define VHMAX(v) hmax256(v)
#define VHSUM(v) hsum256(v)
#define VEXP(v) vexp_avx2(v)
#define VLOADH(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define ATTN_RB 2
#define ATTN_FN attn_rb2
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_FN
#define ATTN_KV_F32 /* the same for an F32 cache (--cache-type f32) */
#define ATTN_FN attn_rb2_f32
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_KV_F32

void ops_attn_run_avx2(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                       int c1, float *state)
{
    if (a->kv_f32)
        attn_rb2_f32(a, kvh, q0, q1, scratch, c0, c1, state);
    else
        attn_rb2(a, kvh, q0, q1, scratch, c0, c1, state);
}
