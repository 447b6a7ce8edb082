/* quant_ternary_avx2 — AVX2 dots of the low-bit types (TQ1_0, TQ2_0 x Q8_K; Q1_0, Q2_0 x Q8_0),
 * compiled with -mavx2 -mfma -mf16c and -ffp-contract=off (Makefile).
 *
 * Bit-identical to the scalar references in quant_ternary.c: the integer part of each block (or
 * activation sub-block) is an exact int32 sum, computed here with SIMD, and the few float
 * operations per block are then the reference's, in its order, one mul and one add each (no FMA:
 * the flag above keeps the compiler from fusing them). So a weight row's dot does not depend on
 * which of the two kernels runs it, and tests can compare bits.
 *
 * Decoding:
 *   TQ2_0: 2-bit fields q (0..2, 3 in foreign files) by shift and mask; sum q*y - sum y =
 *     sum (q-1)*y with sum y from the Q8_K block's bsums.
 *   TQ1_0: the base-3 digits of a byte are peeled in 16-bit lanes: w = 3v, digit = w >> 8,
 *     v = w & 255 (the fixed-point fraction of quant_ternary.c), then as TQ2_0.
 *   Q1_0: a 32-bit mask per activation block selects +y or -y.
 *   Q2_0: each byte is broadcast to its four elements and two bit tests give q; (q-1)*y by the
 *     sign trick. */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/quant_blocks.h"

#define PF_AHEAD 4096 /* bytes: rows are contiguous, so this also warms the next rows */

static inline int hsum8i(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* the four int32 totals of p0..p3 */
static inline void hsum4x8i(__m256i p0, __m256i p1, __m256i p2, __m256i p3, int out[4])
{
    __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    _mm_storeu_si128((__m128i *)out, r);
}

/* sum of the 16 bsums of a Q8_K block, as 8 int32 lanes */
static inline __m256i bsums8(const struct block_q8_K *y)
{
    return _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums), _mm256_set1_epi16(1));
}

/* 8 int32 partial sums of x*y over 32 int8 pairs (x in -2..2, so |x| fits maddubs' u8 side) */
static inline __m256i dot_i8(__m256i x, __m256i y)
{
    __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

/* ------------------------------------------------------------ TQ2_0 x Q8_K */

static float tq2_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_tq2_0 *x = vx;
    const struct block_q8_K *y = vy;
    const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        _mm_prefetch((const char *)(x + i) + PF_AHEAD, _MM_HINT_T0);
        __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), bsums8(&y[i]));
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            __m256i qx = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * c));
#pragma GCC unroll 4
            for (int l = 0; l < 4; l++) {
                __m256i q = _mm256_and_si256(_mm256_srli_epi16(qx, 2 * l), m3);
                __m256i yq = _mm256_loadu_si256((const __m256i *)(y[i].qs + 128 * c + 32 * l));
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, yq), ones));
            }
        }
        s += (float)hsum8i(acc) * (fp16_to_f32(x[i].d) * y[i].d);
    }
    return s;
}

/* ------------------------------------------------------------ TQ1_0 x Q8_K */

/* acc += sum over the nd digits of v (16 bytes zero-extended to u16) of digit_l * y[16 * l ...]
 * with activation rows ystep apart: y + l * ystep holds the 16 activations of digit l. */
static inline __m256i tq1_digits_dot(__m256i acc, __m256i v, const int8_t *y, int ystep, int nd)
{
    const __m256i lo8 = _mm256_set1_epi16(0xFF);
    for (int l = 0; l < nd; l++) {
        __m256i w = _mm256_add_epi16(v, _mm256_add_epi16(v, v)); /* 3v, at most 765 */
        __m256i t = _mm256_srli_epi16(w, 8);                     /* digit l: 0, 1 or 2 */
        v = _mm256_and_si256(w, lo8);
        __m256i y16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(y + l * ystep)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(t, y16));
    }
    return acc;
}

static float tq1_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_tq1_0 *x = vx;
    const struct block_q8_K *y = vy;
    /* qh lanes k = 4l + j: byte qh[j] times 3^l (mod 256), so that one peel gives digit l */
    const __m256i qh_mul = _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        _mm_prefetch((const char *)(x + i) + PF_AHEAD, _MM_HINT_T0);
        const int8_t *yq = y[i].qs;
        __m256i acc = _mm256_sub_epi32(_mm256_setzero_si256(), bsums8(&y[i]));
        __m128i q0 = _mm_loadu_si128((const __m128i *)x[i].qs);
        __m128i q1 = _mm_loadu_si128((const __m128i *)(x[i].qs + 16));
        __m128i q2 = _mm_loadu_si128((const __m128i *)(x[i].qs + 32));
        acc = tq1_digits_dot(acc, _mm256_cvtepu8_epi16(q0), yq, 32, 5);
        acc = tq1_digits_dot(acc, _mm256_cvtepu8_epi16(q1), yq + 16, 32, 5);
        acc = tq1_digits_dot(acc, _mm256_cvtepu8_epi16(q2), yq + 160, 16, 5);
        uint32_t h;
        memcpy(&h, x[i].qh, 4);
        __m256i vh = _mm256_cvtepu8_epi16(_mm_set1_epi32((int)h));
        vh = _mm256_and_si256(_mm256_mullo_epi16(vh, qh_mul), _mm256_set1_epi16(0xFF));
        acc = tq1_digits_dot(acc, vh, yq + 240, 0, 1);
        s += (float)hsum8i(acc) * (fp16_to_f32(x[i].d) * y[i].d);
    }
    return s;
}

/* ------------------------------------------------------------ Q1_0 x Q8_0 */

/* 32 bits -> 32 bytes, 0xFF where the bit is clear */
static inline __m256i clear_bits32(const uint8_t *p)
{
    uint32_t b;
    memcpy(&b, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)b), shuf), bit);
    return _mm256_cmpeq_epi8(v, _mm256_setzero_si256());
}

static float q1_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q1_0 *x = vx;
    const struct block_q8_0 *y = vy;
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    float s = 0;
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const struct block_q8_0 *yb = &y[4 * i];
        __m256i p[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i neg = clear_bits32(x[i].qs + 4 * k);
            __m256i yq = _mm256_loadu_si256((const __m256i *)yb[k].qs);
            __m256i sy = _mm256_sub_epi8(_mm256_xor_si256(yq, neg), neg); /* -y where clear */
            p[k] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, sy), ones16);
        }
        int is[4];
        hsum4x8i(p[0], p[1], p[2], p[3], is);
        float sb = 0;
        for (int k = 0; k < 4; k++)
            sb += fp16_to_f32(yb[k].d) * (float)is[k];
        s += fp16_to_f32(x[i].d) * sb;
    }
    return s;
}

/* ------------------------------------------------------------ Q2_0 x Q8_0 */

/* the 32 values q - 1 of 8 bytes (element 4b + k: bits 2k..2k+1 of byte b) */
static inline __m256i q2_0_vals(const uint8_t *p)
{
    __m128i t = _mm_loadl_epi64((const __m128i *)p);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4,
                                          4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    const __m256i mlo = _mm256_set1_epi32(0x40100401), mhi = _mm256_set1_epi32((int)0x80200802u);
    __m256i b = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), shuf);
    __m256i lo = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, mlo), mlo),
                                  _mm256_set1_epi8(1));
    __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(b, mhi), mhi),
                                  _mm256_set1_epi8(2));
    return _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(1));
}

static float q2_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q2_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const struct block_q8_0 *yb = &y[2 * i];
        __m256i p0 = dot_i8(q2_0_vals(x[i].qs), _mm256_loadu_si256((const __m256i *)yb[0].qs));
        __m256i p1 = dot_i8(q2_0_vals(x[i].qs + 8), _mm256_loadu_si256((const __m256i *)yb[1].qs));
        __m256i h = _mm256_hadd_epi32(p0, p1); /* lanes: p0 p0 p1 p1 | p0 p0 p1 p1 */
        __m128i r = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        r = _mm_hadd_epi32(r, r);
        int i0 = _mm_cvtsi128_si32(r), i1 = _mm_extract_epi32(r, 1);
        float sb = 0;
        sb += fp16_to_f32(yb[0].d) * (float)i0;
        sb += fp16_to_f32(yb[1].d) * (float)i1;
        s += fp16_to_f32(x[i].d) * sb;
    }
    return s;
}

void quant_register_ternary_avx2(struct quant_traits *t)
{
    t[GGML_TYPE_TQ1_0].vec_dot = tq1_0_dot;
    t[GGML_TYPE_TQ2_0].vec_dot = tq2_0_dot;
    t[GGML_TYPE_Q1_0].vec_dot = q1_0_dot;
    t[GGML_TYPE_Q2_0].vec_dot = q2_0_dot;
}
