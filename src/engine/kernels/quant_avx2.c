/* quant_avx2 — AVX2/FMA/F16C kernels for the traits table (compiled with -mavx2 -mfma -mf16c).
 *
 * int8 dots use the sign trick: maddubs(|x|, sign(y, x)) computes x*y in pairs without needing
 * an unsigned operand; |x| <= 127 always holds because every quantizer here clamps to [-127, 127]
 * (a weight int8 of -128 from a foreign file is still correct: |-128| as u8 is 128). */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/quant_blocks.h"

static inline float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

static inline int hsum8i(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* 8 int32 partial sums of x*y over 32 int8 pairs. */
static inline __m256i dot_i8(__m256i x, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* 8 int32 partial sums of u*y (u unsigned, at most 127 so pair sums fit int16). */
static inline __m256i dot_u8(__m256i u, __m256i y)
{
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

/* Prefetch the block `ahead` bytes past p (weights stream once per token; DRAM latency). */
#ifndef PF_AHEAD
#define PF_AHEAD 4096
#endif
#ifndef PF_AHEAD_HINT
#define PF_AHEAD_HINT _MM_HINT_T0
#endif
static inline void prefetch_block(const void *p, size_t size)
{
    for (size_t o = 0; o < size; o += 64)
        _mm_prefetch((const char *)p + PF_AHEAD + o, PF_AHEAD_HINT);
}

static inline __m256i nibbles32(const uint8_t *p)
{
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    __m256i b = _mm256_set_m128i(_mm_srli_epi16(t, 4), t);
    return _mm256_and_si256(b, _mm256_set1_epi8(15));
}

/* 32 bits -> 32 bytes of 0x00 / 0xFF */
static inline __m256i bits32(const uint8_t *p)
{
    uint32_t x;
    memcpy(&x, p, 4);
    const __m256i shuf =
        _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    b = _mm256_or_si256(b, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(b, _mm256_set1_epi64x(-1));
}

/* ------------------------------------------------------------ float types */

static float f32_dot(int64_t n, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static inline __m256 ld_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

static float f16_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(ld_f16(x + i), ld_f16(y + i), a0);
        a1 = _mm256_fmadd_ps(ld_f16(x + i + 8), ld_f16(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(ld_f16(x + i + 16), ld_f16(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(ld_f16(x + i + 24), ld_f16(y + i + 24), a3);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(ld_f16(x + i), ld_f16(y + i), a0);
    float s = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++)
        s += fp16_to_f32(x[i]) * fp16_to_f32(y[i]);
    return s;
}

static void f16_to_float(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, ld_f16(x + i));
    for (; i < n; i++)
        y[i] = fp16_to_f32(x[i]);
}

static void f16_from_float(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = f32_to_fp16(x[i]);
}

static inline __m256 ld_bf16(const uint16_t *p)
{
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

static float bf16_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx;
    const float *y = vy;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = _mm256_fmadd_ps(ld_bf16(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(ld_bf16(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
    }
    for (; i + 8 <= n; i += 8)
        a0 = _mm256_fmadd_ps(ld_bf16(x + i), _mm256_loadu_ps(y + i), a0);
    float s = hsum8(_mm256_add_ps(a0, a1));
    for (; i < n; i++)
        s += bf16_to_f32(x[i]) * y[i];
    return s;
}

static void bf16_to_float(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, ld_bf16(x + i));
    for (; i < n; i++)
        y[i] = bf16_to_f32(x[i]);
}

/* ------------------------------------------------------------ activation quantizers */

static inline __m256 absmax8(__m256 m, __m256 v)
{
    return _mm256_max_ps(m, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v));
}

static inline float hmax8(__m256 v)
{
    __m128 r = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 32 floats * id -> 32 int8 (round half away from zero like roundf, as the reference). */
static inline __m256i quant32(const float *x, float id)
{
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid);
        /* round half away from zero: trunc(v + copysign(0.5 - ulp, v)) matches roundf */
        __m256 h =
            _mm256_or_ps(_mm256_and_ps(v, _mm256_set1_ps(-0.0f)), _mm256_set1_ps(0.49999997f));
        q[k] = _mm256_cvttps_epi32(_mm256_add_ps(v, h));
    }
    __m256i a = _mm256_packs_epi32(q[0], q[1]);
    __m256i b = _mm256_packs_epi32(q[2], q[3]);
    __m256i r = _mm256_packs_epi16(a, b);
    /* undo the lane interleave of the two packs */
    return _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static void q8_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++)
            m = absmax8(m, _mm256_loadu_ps(x + 8 * k));
        float amax = hmax8(m);
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16(d);
        _mm256_storeu_si256((__m256i *)y[i].qs, quant32(x, id));
    }
}

/* Q8_K rounds to nearest even (like the reference's lrintf). */
static inline __m256i quant32_rne(const float *x, float id)
{
    const __m256 vid = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++)
        q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), vid));
    __m256i a = _mm256_packs_epi32(q[0], q[1]);
    __m256i b = _mm256_packs_epi32(q[2], q[3]);
    __m256i r = _mm256_packs_epi16(a, b);
    r = _mm256_permutevar8x32_epi32(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return _mm256_max_epi8(r, _mm256_set1_epi8(-127));
}

static void q8_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m256 m = _mm256_setzero_ps();
        for (int k = 0; k < QK_K / 8; k++)
            m = absmax8(m, _mm256_loadu_ps(x + 8 * k));
        float amax = hmax8(m);
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        y[i].d = d;
        for (int k = 0; k < QK_K / 32; k++) {
            __m256i q = quant32_rne(x + 32 * k, id);
            _mm256_storeu_si256((__m256i *)(y[i].qs + 32 * k), q);
            /* two 16-element sums */
            __m256i s16 = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            __m256i s32 = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
            int32_t t[8];
            _mm256_storeu_si256((__m256i *)t, s32);
            y[i].bsums[2 * k] = (int16_t)(t[0] + t[1] + t[2] + t[3]);
            y[i].bsums[2 * k + 1] = (int16_t)(t[4] + t[5] + t[6] + t[7]);
        }
    }
}

/* ------------------------------------------------------------ legacy quants x Q8_0 */

static float q8_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q8_0 *x = vx, *y = vy;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    int64_t nb = n / QK8_0, i = 0;
    for (; i + 2 <= nb; i += 2) {
        __m256i p0 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i].qs),
                            _mm256_loadu_si256((const __m256i *)y[i].qs));
        __m256i p1 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i + 1].qs),
                            _mm256_loadu_si256((const __m256i *)y[i + 1].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1),
                               _mm256_set1_ps(fp16_to_f32(x[i + 1].d) * fp16_to_f32(y[i + 1].d)),
                               acc1);
    }
    for (; i < nb; i++) {
        __m256i p0 = dot_i8(_mm256_loadu_si256((const __m256i *)x[i].qs),
                            _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0),
                               _mm256_set1_ps(fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)), acc0);
    }
    return hsum8(_mm256_add_ps(acc0, acc1));
}

static float q4_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_0 *x = vx;
    const struct block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK4_0; i++) {
        __m256i q = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        __m256i p = dot_i8(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                              _mm256_set1_ps(fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)), acc);
    }
    return hsum8(acc);
}

static float q4_1_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_1 *x = vx;
    const struct block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        __m256i yq = _mm256_loadu_si256((const __m256i *)y[i].qs);
        __m256i p = dot_u8(nibbles32(x[i].qs), yq);
        float dy = fp16_to_f32(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(fp16_to_f32(x[i].d) * dy), acc);
        msum += fp16_to_f32(x[i].m) * dy * (float)hsum8i(dot_u8(_mm256_set1_epi8(1), yq));
    }
    return hsum8(acc) + msum;
}

static float q5_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_0 *x = vx;
    const struct block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK5_0; i++) {
        /* q - 16 = lo | (hi << 4) - 16: where the high bit is clear subtract 16 */
        __m256i hb = _mm256_andnot_si256(bits32(x[i].qh), _mm256_set1_epi8((char)0xF0));
        __m256i q = _mm256_or_si256(nibbles32(x[i].qs), hb); /* lo - 16 (as int8) or lo */
        __m256i p = dot_i8(q, _mm256_loadu_si256((const __m256i *)y[i].qs));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p),
                              _mm256_set1_ps(fp16_to_f32(x[i].d) * fp16_to_f32(y[i].d)), acc);
    }
    return hsum8(acc);
}

static float q5_1_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_1 *x = vx;
    const struct block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float msum = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        __m256i hb = _mm256_and_si256(bits32(x[i].qh), _mm256_set1_epi8(0x10));
        __m256i q = _mm256_or_si256(nibbles32(x[i].qs), hb);
        __m256i yq = _mm256_loadu_si256((const __m256i *)y[i].qs);
        float dy = fp16_to_f32(y[i].d);
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8(q, yq)),
                              _mm256_set1_ps(fp16_to_f32(x[i].d) * dy), acc);
        msum += fp16_to_f32(x[i].m) * dy * (float)hsum8i(dot_u8(_mm256_set1_epi8(1), yq));
    }
    return hsum8(acc) + msum;
}

/* ------------------------------------------------------------ K-quants x Q8_K */

/* Q4_K/Q5_K packed 6-bit scales and mins -> 8 int16 each (lane j = sub-block j). */
static inline void k4_scales(const uint8_t *s, __m128i *sc, __m128i *mn)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
    *mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
}

/* sum_j mn[j] * (bsums[2j] + bsums[2j+1]) */
static inline int k4_mins(__m128i mn, const int16_t *bsums)
{
    __m256i pairs =
        _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    __m128i p16 =
        _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
    __m128i r = _mm_madd_epi16(p16, mn);
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* int16 lane j of sc (8 lanes) broadcast to all 16 lanes */
static inline __m256i bcast16(__m256i sc2, int j)
{
    return _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

/* the 32 q4 of sub-blocks 2c (low nibbles) and 2c+1 (high) of a Q4_K/Q5_K block dotted with y,
 * each scaled by its int16 scale: 8 int32 lanes */
static inline __m256i k4_chunk(__m256i lo, __m256i hi, const int8_t *y, __m256i sc2, int c)
{
    __m256i p0 = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)y));
    __m256i p1 = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 32)));
    return _mm256_add_epi32(_mm256_madd_epi16(p0, bcast16(sc2, 2 * c)),
                            _mm256_madd_epi16(p1, bcast16(sc2, 2 * c + 1)));
}

static float q4_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_K *x = vx;
    const struct block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    float macc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof(struct block_q4_K));
        __m128i sc, mn;
        k4_scales(x[i].scales, &sc, &mn);
        float dy = y[i].d;
        macc += fp16_to_f32(x[i].dmin) * dy * (float)k4_mins(mn, y[i].bsums);
        __m256i sc2 = _mm256_broadcastsi128_si256(sc);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            __m256i lo = _mm256_and_si256(b, m4),
                    hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
            sumi = _mm256_add_epi32(sumi, k4_chunk(lo, hi, y[i].qs + 64 * c, sc2, c));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(fp16_to_f32(x[i].d) * dy),
                              acc);
    }
    return hsum8(acc) - macc;
}

static float q5_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_K *x = vx;
    const struct block_q8_K *y = vy;
    const __m256i m4 = _mm256_set1_epi8(15), b16 = _mm256_set1_epi8(16);
    __m256 acc = _mm256_setzero_ps();
    float macc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof(struct block_q5_K));
        __m128i sc, mn;
        k4_scales(x[i].scales, &sc, &mn);
        float dy = y[i].d;
        macc += fp16_to_f32(x[i].dmin) * dy * (float)k4_mins(mn, y[i].bsums);
        __m256i sc2 = _mm256_broadcastsi128_si256(sc);
        __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i b = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
            /* bit 2c of qh -> 16 for the low nibbles, bit 2c+1 for the high ones */
            __m256i h0 = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c), 4), b16);
            __m256i h1 =
                _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, 2 * c + 1), 4), b16);
            __m256i lo = _mm256_or_si256(_mm256_and_si256(b, m4), h0);
            __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), m4), h1);
            sumi = _mm256_add_epi32(sumi, k4_chunk(lo, hi, y[i].qs + 64 * c, sc2, c));
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(fp16_to_f32(x[i].d) * dy),
                              acc);
    }
    return hsum8(acc) - macc;
}

/* Q6_K: q in [0, 63] (unsigned, maddubs-able), the -32 is folded in via bsums. */
static float q6_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q6_K *x = vx;
    const struct block_q8_K *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof(struct block_q6_K));
        const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
        __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        /* the -32 offset: start from -32 * sc[g] * bsums[g] (summed with the rest at the end) */
        __m256i sumi = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(
                _mm256_madd_epi16(sc, _mm256_loadu_si256((const __m256i *)y[i].bsums)), 5));
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)x[i].scales);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(ql1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i p = _mm256_maddubs_epi16(
                    q[k], _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k)));
                /* two 16-element groups per 32: scales g = 8h + 2k, 8h + 2k + 1 */
                int g = 8 * h + 2 * k; /* scales g (first 16) and g + 1 (second 16) */
                __m128i ctl = _mm_set_epi64x((long long)(0x0101010101010101ULL * (uint64_t)(g + 1)),
                                             (long long)(0x0101010101010101ULL * (uint64_t)g));
                __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, ctl));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, s));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(fp16_to_f32(x[i].d) * y[i].d),
                              acc);
    }
    return hsum8(acc);
}

/* int16 vector: scale g in lanes 0-7 and g + 1 in lanes 8-15, from 16 int8 scales */
static inline __m256i scale_pair(__m128i sc8, int g)
{
    __m128i ctl = _mm_set_epi64x((long long)(0x0101010101010101ULL * (uint64_t)(g + 1)),
                                 (long long)(0x0101010101010101ULL * (uint64_t)g));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, ctl));
}

/* Q3_K: u = low 2 bits | high bit << 2 in [0, 7] (maddubs-able), value = scale * (u - 4); the -4
 * is folded in through bsums. Element 128n + 32k + l: bits 2k of qs[32n + l], hmask[l] bit 4n+k. */
static float q3_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q3_K *x = vx;
    const struct block_q8_K *y = vy;
    const __m256i m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof(struct block_q3_K));
        /* 16 x 6-bit scales: low nibbles in bytes 0-7, top 2 bits in bytes 8-11; minus 32 */
        uint32_t a0, a1, t;
        memcpy(&a0, x[i].scales, 4);
        memcpy(&a1, x[i].scales + 4, 4);
        memcpy(&t, x[i].scales + 8, 4);
        uint32_t o0 = (a0 & 0x0f0f0f0fu) | ((t & 0x03030303u) << 4);
        uint32_t o1 = (a1 & 0x0f0f0f0fu) | (((t >> 2) & 0x03030303u) << 4);
        uint32_t o2 = ((a0 >> 4) & 0x0f0f0f0fu) | (((t >> 4) & 0x03030303u) << 4);
        uint32_t o3 = ((a1 >> 4) & 0x0f0f0f0fu) | (((t >> 6) & 0x03030303u) << 4);
        __m128i sc8 = _mm_sub_epi8(_mm_set_epi32((int)o3, (int)o2, (int)o1, (int)o0), _mm_set1_epi8(32));
        __m256i sumi = _mm256_sub_epi32(
            _mm256_setzero_si256(),
            _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8),
                                                _mm256_loadu_si256((const __m256i *)y[i].bsums)),
                              2));
        __m256i hm = _mm256_loadu_si256((const __m256i *)x[i].hmask);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i lo = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), m2);
                __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), m1), 2);
                __m256i u = _mm256_or_si256(lo, hb);
                __m256i p = _mm256_maddubs_epi16(
                    u, _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc8, 8 * h + 2 * k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(fp16_to_f32(x[i].d) * y[i].d),
                              acc);
    }
    return hsum8(acc);
}

/* Q2_K: value = d * (sc & 15) * q - dmin * (sc >> 4), q in [0, 3]. */
static float q2_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q2_K *x = vx;
    const struct block_q8_K *y = vy;
    const __m256i m2 = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float macc = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        prefetch_block(x + i, sizeof(struct block_q2_K));
        __m128i raw = _mm_loadu_si128((const __m128i *)x[i].scales);
        __m128i sc8 = _mm_and_si128(raw, _mm_set1_epi8(15));
        __m128i mn8 = _mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(15));
        float dy = y[i].d;
        macc += fp16_to_f32(x[i].dmin) * dy *
                (float)hsum8i(_mm256_madd_epi16(_mm256_cvtepu8_epi16(mn8),
                                                _mm256_loadu_si256((const __m256i *)y[i].bsums)));
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i qs = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * h));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * k), m2);
                __m256i p = _mm256_maddubs_epi16(
                    q, _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * h + 32 * k)));
                sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale_pair(sc8, 8 * h + 2 * k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi), _mm256_set1_ps(fp16_to_f32(x[i].d) * dy), acc);
    }
    return hsum8(acc) - macc;
}

void quant_register_avx2(struct quant_traits *t)
{
    t[GGML_TYPE_Q2_K].vec_dot = q2_K_dot;
    t[GGML_TYPE_Q3_K].vec_dot = q3_K_dot;
    t[GGML_TYPE_F32].vec_dot = f32_dot;
    t[GGML_TYPE_F16].vec_dot = f16_dot;
    t[GGML_TYPE_F16].to_float = f16_to_float;
    t[GGML_TYPE_F16].from_float = f16_from_float;
    t[GGML_TYPE_BF16].vec_dot = bf16_dot;
    t[GGML_TYPE_BF16].to_float = bf16_to_float;
    t[GGML_TYPE_Q8_0].vec_dot = q8_0_dot;
    t[GGML_TYPE_Q8_0].from_float = q8_0_from_float;
    t[GGML_TYPE_Q8_K].from_float = q8_K_from_float;
    t[GGML_TYPE_Q4_0].vec_dot = q4_0_dot;
    t[GGML_TYPE_Q4_1].vec_dot = q4_1_dot;
    t[GGML_TYPE_Q5_0].vec_dot = q5_0_dot;
    t[GGML_TYPE_Q5_1].vec_dot = q5_1_dot;
    t[GGML_TYPE_Q4_K].vec_dot = q4_K_dot;
    t[GGML_TYPE_Q5_K].vec_dot = q5_K_dot;
    t[GGML_TYPE_Q6_K].vec_dot = q6_K_dot;
}
