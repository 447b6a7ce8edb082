/* ops_avx512 — AVX-512 instantiation of the attention unit and f16 row conversions (see ops.h). */
#include <immintrin.h>
#include <math.h>

#include "engine/kernels/ops.h"

void ops_attn_run_avx512(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                         int c1, float *state);
void ops_f16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n);
void ops_f32_to_f16_avx512(uint16_t *dst, const float *src, int64_t n);
void ops_swiglu_avx512(float *out, const float *gate, const float *up, int64_t n);
void ops_rmsnorm_avx512(float *out, const float *x, const float *w, int64_t n, float eps);

/* e^x for x <= ~88: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial for
 * e^r (relative error ~2e-7), then scale by 2^n. Inputs below -87 (incl. -inf) give ~1e-38. */
static inline __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    x = _mm512_min_ps(x, _mm512_set1_ps(88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static inline void cvt_f16_512(float *dst, const uint16_t *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    for (; i < n; i++) dst[i] = _cvtsh_ss(src[i]);
}

void ops_f16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n) { cvt_f16_512(dst, src, n); }

void ops_f32_to_f16_avx512(uint16_t *dst, const float *src, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = (uint16_t)_cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}

void ops_swiglu_avx512(float *out, const float *gate, const float *up, int64_t n)
{
    int64_t i = 0;
    const __m512 one = _mm512_set1_ps(1.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 g = _mm512_loadu_ps(gate + i);
        __m512 sg = _mm512_div_ps(g, _mm512_add_ps(one, exp512(_mm512_sub_ps(_mm512_setzero_ps(), g))));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(sg, _mm512_loadu_ps(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

void ops_rmsnorm_avx512(float *out, const float *x, const float *w, int64_t n, float eps)
{
    /* 16 float lanes x 2 chains, summed in double at the end: for n <= 1e5 the relative error of
     * the mean square stays ~1e-7, like the portable double loop */
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        a0 = _mm512_fmadd_ps(v0, v0, a0);
        a1 = _mm512_fmadd_ps(v1, v1, a1);
    }
    float lanes[16];
    _mm512_storeu_ps(lanes, _mm512_add_ps(a0, a1));
    double ss = 0.0;
    for (int l = 0; l < 16; l++) ss += lanes[l];
    for (; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    __m512 vs = _mm512_set1_ps(s);
    for (i = 0; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), vs), _mm512_loadu_ps(w + i)));
    for (; i < n; i++) out[i] = x[i] * s * w[i];
}

#define VEC __m512
#define VW 16
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, v) _mm512_storeu_ps((p), (v))
#define VSET1(x) _mm512_set1_ps(x)
#define VZERO() _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VMUL(a, b) _mm512_mul_ps((a), (b))
#define VADD(a, b) _mm512_add_ps((a), (b))
#define VSUB(a, b) _mm512_sub_ps((a), (b))
#define VMAX(a, b) _mm512_max_ps((a), (b))
#define VHMAX(v) _mm512_reduce_max_ps(v)
#define VHSUM(v) _mm512_reduce_add_ps(v)
#define VEXP(v) exp512(v)
#define VLOADH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
/* 6 rows x 4 vectors = 24 accumulators + 4 K/V vectors + 1 broadcast fit the 32 zmm registers;
 * decode (2 rows: one token x the GQA group) would waste 4 of 6, so it gets a 2-row version. */
#define ATTN_RB 6
#define ATTN_FN attn_rb6
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_RB
#undef ATTN_FN
#define ATTN_RB 2
#define ATTN_FN attn_rb2
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_RB
#undef ATTN_FN
/* the same two for an F32 cache (--cache-type f32) */
#define ATTN_KV_F32
#define ATTN_RB 6
#define ATTN_FN attn_rb6_f32
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_RB
#undef ATTN_FN
#define ATTN_RB 2
#define ATTN_FN attn_rb2_f32
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_KV_F32

void ops_attn_run_avx512(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                         int c1, float *state)
{
    bool small = (q1 - q0) * (a->n_head / a->n_head_kv) <= 2;
    if (a->kv_f32)
        (small ? attn_rb2_f32 : attn_rb6_f32)(a, kvh, q0, q1, scratch, c0, c1, state);
    else
        (small ? attn_rb2 : attn_rb6)(a, kvh, q0, q1, scratch, c0, c1, state);
}
