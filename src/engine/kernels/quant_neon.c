/* quant_neon — arm64 Advanced SIMD (baseline armv8-a) vec_dot kernels for the traits table.
 *
 * Every kernel computes what the scalar reference vec_dot of its type computes (same operand
 * types; the integer block sums are exact, only the float summation order differs). int8 products
 * use vmull_s8 (int16, at most 128*128) and a pairwise widening add into int32, so any int8,
 * including a foreign -128, is exact. No dotprod/i8mm instructions: this runs on any arm64.
 * Types not registered here keep the scalar reference (list in docs/kernels.md).
 * Tested under qemu-aarch64 by tests/neon/test_neon_dots.c (suite 15-neon.sh). */
#include <arm_neon.h>
#include <string.h>

#include "engine/kernels/quant_blocks.h"

/* fp16 bits to f32 with the hardware conversion (exact, like fp16_to_f32_sw). */
static inline float h2f(uint16_t h)
{
    __fp16 f;
    memcpy(&f, &h, sizeof f);
    return (float)f;
}

/* acc + the 16 products a*b, as 4 int32 partial sums. */
static inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b)
{
    acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
    return vpadalq_s16(acc, vmull_high_s8(a, b));
}

/* ---------------------------------------------------------------- float types (any n) */

static float f32_dot(int64_t n, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, vld1q_f32(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, vld1q_f32(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, vld1q_f32(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        a0 = vfmaq_f32(a0, vld1q_f32(x + i), vld1q_f32(y + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static inline float32x4_t f16x4(const uint16_t *p)
{
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}

static float f16_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, f16x4(x + i), f16x4(y + i));
        a1 = vfmaq_f32(a1, f16x4(x + i + 4), f16x4(y + i + 4));
        a2 = vfmaq_f32(a2, f16x4(x + i + 8), f16x4(y + i + 8));
        a3 = vfmaq_f32(a3, f16x4(x + i + 12), f16x4(y + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        a0 = vfmaq_f32(a0, f16x4(x + i), f16x4(y + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++)
        s += h2f(x[i]) * h2f(y[i]);
    return s;
}

/* bf16 to f32 is the 16 bits shifted up: exact. */
static inline float32x4_t bf16x4(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}

/* BF16 weights x F32 activations. */
static float bf16_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx;
    const float *y = vy;
    float32x4_t a0 = vdupq_n_f32(0), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a0 = vfmaq_f32(a0, bf16x4(x + i), vld1q_f32(y + i));
        a1 = vfmaq_f32(a1, bf16x4(x + i + 4), vld1q_f32(y + i + 4));
        a2 = vfmaq_f32(a2, bf16x4(x + i + 8), vld1q_f32(y + i + 8));
        a3 = vfmaq_f32(a3, bf16x4(x + i + 12), vld1q_f32(y + i + 12));
    }
    for (; i + 4 <= n; i += 4)
        a0 = vfmaq_f32(a0, bf16x4(x + i), vld1q_f32(y + i));
    float s = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < n; i++) {
        uint32_t u = (uint32_t)x[i] << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        s += f * y[i];
    }
    return s;
}

/* ---------------------------------------------------------------- Q8_0 and legacy x Q8_0 */

static float q8_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q8_0 *x = vx, *y = vy;
    float32x4_t acc = vdupq_n_f32(0);
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32x4_t p = vdupq_n_s32(0);
        p = dot16(p, vld1q_s8(x[i].qs), vld1q_s8(y[i].qs));
        p = dot16(p, vld1q_s8(x[i].qs + 16), vld1q_s8(y[i].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
    }
    return vaddvq_f32(acc);
}

/* The 32 quants of a legacy 4-bit block: lo = elements 0..15, hi = 16..31 (unsigned 0..15). */
static inline void unpack_nibbles(const uint8_t *qs, uint8x16_t *lo, uint8x16_t *hi)
{
    uint8x16_t v = vld1q_u8(qs);
    *lo = vandq_u8(v, vdupq_n_u8(15));
    *hi = vshrq_n_u8(v, 4);
}

static float q4_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float32x4_t acc = vdupq_n_f32(0);
    const int8x16_t eight = vdupq_n_s8(8);
    for (int64_t i = 0; i < n / QK4_0; i++) {
        uint8x16_t lo, hi;
        unpack_nibbles(x[i].qs, &lo, &hi);
        int32x4_t p = vdupq_n_s32(0);
        p = dot16(p, vsubq_s8(vreinterpretq_s8_u8(lo), eight), vld1q_s8(y[i].qs));
        p = dot16(p, vsubq_s8(vreinterpretq_s8_u8(hi), eight), vld1q_s8(y[i].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
    }
    return vaddvq_f32(acc);
}

/* sum(d*q + m) * dy*qy = d*dy*sum(q*qy) + m*dy*sum(qy) (as the reference). */
static float q4_1_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_1 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        uint8x16_t lo, hi;
        unpack_nibbles(x[i].qs, &lo, &hi);
        int8x16_t y0 = vld1q_s8(y[i].qs), y1 = vld1q_s8(y[i].qs + 16);
        int32x4_t p = vdupq_n_s32(0);
        p = dot16(p, vreinterpretq_s8_u8(lo), y0);
        p = dot16(p, vreinterpretq_s8_u8(hi), y1);
        int ysum = vaddlvq_s8(y0) + vaddlvq_s8(y1);
        float dy = h2f(y[i].d);
        s += h2f(x[i].d) * dy * (float)vaddvq_s32(p) + h2f(x[i].m) * dy * (float)ysum;
    }
    return s;
}

/* The 5th bits of a Q5 block as 0/16 bytes: element j has bit j of the LE u32 qh. */
static inline void q5_high(const uint8_t *qh, uint8x16_t *h0, uint8x16_t *h1)
{
    static const uint8_t bit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t m = vld1q_u8(bit), sixteen = vdupq_n_u8(16);
    uint8x16_t b0 = vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1]));
    uint8x16_t b1 = vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3]));
    *h0 = vandq_u8(vtstq_u8(b0, m), sixteen);
    *h1 = vandq_u8(vtstq_u8(b1, m), sixteen);
}

static float q5_0_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float32x4_t acc = vdupq_n_f32(0);
    const int8x16_t sixteen = vdupq_n_s8(16);
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint8x16_t lo, hi, h0, h1;
        unpack_nibbles(x[i].qs, &lo, &hi);
        q5_high(x[i].qh, &h0, &h1);
        int8x16_t q0 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, h0)), sixteen);
        int8x16_t q1 = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(hi, h1)), sixteen);
        int32x4_t p = vdupq_n_s32(0);
        p = dot16(p, q0, vld1q_s8(y[i].qs));
        p = dot16(p, q1, vld1q_s8(y[i].qs + 16));
        acc = vmlaq_n_f32(acc, vcvtq_f32_s32(p), h2f(x[i].d) * h2f(y[i].d));
    }
    return vaddvq_f32(acc);
}

static float q5_1_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_1 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint8x16_t lo, hi, h0, h1;
        unpack_nibbles(x[i].qs, &lo, &hi);
        q5_high(x[i].qh, &h0, &h1);
        int8x16_t y0 = vld1q_s8(y[i].qs), y1 = vld1q_s8(y[i].qs + 16);
        int32x4_t p = vdupq_n_s32(0);
        p = dot16(p, vreinterpretq_s8_u8(vorrq_u8(lo, h0)), y0);
        p = dot16(p, vreinterpretq_s8_u8(vorrq_u8(hi, h1)), y1);
        int ysum = vaddlvq_s8(y0) + vaddlvq_s8(y1);
        float dy = h2f(y[i].d);
        s += h2f(x[i].d) * dy * (float)vaddvq_s32(p) + h2f(x[i].m) * dy * (float)ysum;
    }
    return s;
}

/* ---------------------------------------------------------------- K-quants x Q8_K */

/* Sum of 32 products (two 16-element groups of the same scale). */
static inline int dot32(const int8x16_t q0, const int8x16_t q1, const int8_t *y)
{
    int32x4_t p = dot16(vdupq_n_s32(0), q0, vld1q_s8(y));
    return vaddvq_s32(dot16(p, q1, vld1q_s8(y + 16)));
}

/* Q4_K/Q5_K packed scales: the 8 sub-block scales into sc, and the mins term sum(m * bsum) over the
 * 8 sub-blocks of 32 (each pairs two of the 16 bsums of y). */
static inline int k4_scales_mins(const uint8_t *scales, const int16_t *bsums, uint8_t sc[8])
{
    uint8_t m[8];
    for (int j = 0; j < 8; j++)
        quant_scale_min_k4(j, scales, &sc[j], &m[j]);
    int16x8_t bs = vpaddq_s16(vld1q_s16(bsums), vld1q_s16(bsums + 8));
    int16x8_t mv = vreinterpretq_s16_u16(vmovl_u8(vld1_u8(m)));
    int32x4_t mp = vmull_s16(vget_low_s16(bs), vget_low_s16(mv));
    return vaddvq_s32(vmlal_high_s16(mp, bs, mv));
}

/* Q4_K: 64-element chunk c is qs[32c..32c+31], low nibbles = sub-block 2c, high = 2c+1;
 * x = d*sc*q - dmin*m per 32, so dot = y.d*(d*sum(sc*q.y) - dmin*sum(m*bsum)). */
static float q4_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_K *x = vx;
    const struct block_q8_K *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8];
        int summ = k4_scales_mins(x[i].scales, y[i].bsums, sc);
        int sumi = 0;
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            uint8x16_t v0 = vld1q_u8(q), v1 = vld1q_u8(q + 16), m4 = vdupq_n_u8(15);
            int lo = dot32(vreinterpretq_s8_u8(vandq_u8(v0, m4)),
                           vreinterpretq_s8_u8(vandq_u8(v1, m4)), q8);
            int hi = dot32(vreinterpretq_s8_u8(vshrq_n_u8(v0, 4)),
                           vreinterpretq_s8_u8(vshrq_n_u8(v1, 4)), q8 + 32);
            sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
        }
        float d = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
        s += d * (float)sumi - dmin * (float)summ;
    }
    return s;
}

/* Q5_K: as Q4_K plus bit (e/32) of qh[e%32] as the 5th bit (16). */
static float q5_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_K *x = vx;
    const struct block_q8_K *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8];
        int summ = k4_scales_mins(x[i].scales, y[i].bsums, sc);
        int sumi = 0;
        const uint8_t *q = x[i].qs;
        const int8_t *q8 = y[i].qs;
        uint8x16_t h0 = vld1q_u8(x[i].qh), h1 = vld1q_u8(x[i].qh + 16);
        const uint8x16_t m4 = vdupq_n_u8(15), sixteen = vdupq_n_u8(16);
        for (int c = 0; c < 4; c++, q += 32, q8 += 64) {
            uint8x16_t v0 = vld1q_u8(q), v1 = vld1q_u8(q + 16);
            /* sub-block 2c uses bit 2c of qh, 2c+1 bit 2c+1: shift them to bit 4 */
            uint8x16_t a0 = vorrq_u8(vandq_u8(v0, m4), vandq_u8(vshlq_n_u8(h0, 4), sixteen));
            uint8x16_t a1 = vorrq_u8(vandq_u8(v1, m4), vandq_u8(vshlq_n_u8(h1, 4), sixteen));
            uint8x16_t b0 = vorrq_u8(vshrq_n_u8(v0, 4), vandq_u8(vshlq_n_u8(h0, 3), sixteen));
            uint8x16_t b1 = vorrq_u8(vshrq_n_u8(v1, 4), vandq_u8(vshlq_n_u8(h1, 3), sixteen));
            int lo = dot32(vreinterpretq_s8_u8(a0), vreinterpretq_s8_u8(a1), q8);
            int hi = dot32(vreinterpretq_s8_u8(b0), vreinterpretq_s8_u8(b1), q8 + 32);
            sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
            h0 = vshrq_n_u8(h0, 2);
            h1 = vshrq_n_u8(h1, 2);
        }
        float d = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
        s += d * (float)sumi - dmin * (float)summ;
    }
    return s;
}

/* Sum of 16 products, one scale group. */
static inline int dot16s(int8x16_t q, const int8_t *y)
{
    return vaddvq_s32(dot16(vdupq_n_s32(0), q, vld1q_s8(y)));
}

/* Q2_K: element e = 128n + 32j + l is bits 2j..2j+1 of qs[32n + l]; scale group e/16 (low
 * nibble of scales[g] the scale, high nibble the min): dot = y.d*(d*sum(sc*q.y) -
 * dmin*sum(m*bsum)). */
static float q2_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q2_K *x = vx;
    const struct block_q8_K *y = vy;
    float s = 0;
    const uint8x16_t m3 = vdupq_n_u8(3);
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8x16_t sv = vld1q_u8(x[i].scales);
        int16x8_t mlo = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(vshrq_n_u8(sv, 4))));
        int16x8_t mhi = vreinterpretq_s16_u16(vmovl_high_u8(vshrq_n_u8(sv, 4)));
        int16x8_t b0 = vld1q_s16(y[i].bsums), b1 = vld1q_s16(y[i].bsums + 8);
        int32x4_t mp = vmull_s16(vget_low_s16(b0), vget_low_s16(mlo));
        mp = vmlal_high_s16(mp, b0, mlo);
        mp = vmlal_s16(mp, vget_low_s16(b1), vget_low_s16(mhi));
        mp = vmlal_high_s16(mp, b1, mhi);
        int summ = vaddvq_s32(mp);
        int sumi = 0;
        for (int c = 0; c < 2; c++) {
            uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * c), q1 = vld1q_u8(x[i].qs + 32 * c + 16);
            const uint8_t *sc = x[i].scales + 8 * c;
            const int8_t *q8 = y[i].qs + 128 * c;
            for (int j = 0; j < 4; j++) {
                int8x16_t a = vreinterpretq_s8_u8(vandq_u8(q0, m3));
                int8x16_t b = vreinterpretq_s8_u8(vandq_u8(q1, m3));
                sumi += (sc[2 * j] & 15) * dot16s(a, q8 + 32 * j) +
                        (sc[2 * j + 1] & 15) * dot16s(b, q8 + 32 * j + 16);
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
            }
        }
        float d = y[i].d * h2f(x[i].d), dmin = y[i].d * h2f(x[i].dmin);
        s += d * (float)sumi - dmin * (float)summ;
    }
    return s;
}

/* Q3_K: as Q2_K's 2-bit layout, minus 4 where bit (e/32) of hmask[e%32] is clear; 16 signed
 * 6-bit scales, no min. */
static float q3_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q3_K *x = vx;
    const struct block_q8_K *y = vy;
    float s = 0;
    const uint8x16_t m3 = vdupq_n_u8(3), four = vdupq_n_u8(4);
    for (int64_t i = 0; i < n / QK_K; i++) {
        int8_t sc[16];
        quant_q3k_scales(x[i].scales, sc);
        uint8x16_t h0 = vld1q_u8(x[i].hmask), h1 = vld1q_u8(x[i].hmask + 16);
        int sumi = 0;
        for (int c = 0; c < 2; c++) {
            uint8x16_t q0 = vld1q_u8(x[i].qs + 32 * c), q1 = vld1q_u8(x[i].qs + 32 * c + 16);
            const int8_t *q8 = y[i].qs + 128 * c;
            for (int j = 0; j < 4; j++) {
                uint8x16_t bit = vdupq_n_u8((uint8_t)(1u << (4 * c + j)));
                uint8x16_t a = vorrq_u8(vandq_u8(q0, m3), vandq_u8(vtstq_u8(h0, bit), four));
                uint8x16_t b = vorrq_u8(vandq_u8(q1, m3), vandq_u8(vtstq_u8(h1, bit), four));
                int8x16_t qa = vsubq_s8(vreinterpretq_s8_u8(a), vreinterpretq_s8_u8(four));
                int8x16_t qb = vsubq_s8(vreinterpretq_s8_u8(b), vreinterpretq_s8_u8(four));
                sumi += sc[8 * c + 2 * j] * dot16s(qa, q8 + 32 * j) +
                        sc[8 * c + 2 * j + 1] * dot16s(qb, q8 + 32 * j + 16);
                q0 = vshrq_n_u8(q0, 2);
                q1 = vshrq_n_u8(q1, 2);
            }
        }
        s += y[i].d * h2f(x[i].d) * (float)sumi;
    }
    return s;
}

/* Q6_K: element e = 128h + 32k + l: low 4 bits nibble (k/2) of ql[64h + 32(k%2) + l], high 2
 * bits bits 2k..2k+1 of qh[32h + l]; minus 32; int8 scale per 16 (group 8h + 2k + l/16). */
static float q6_K_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q6_K *x = vx;
    const struct block_q8_K *y = vy;
    float s = 0;
    const uint8x16_t m4 = vdupq_n_u8(15), m3 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h, *q8 = y[i].qs + 128 * h;
            for (int half = 0; half < 2; half++) { /* l in [16*half, 16*half + 16) */
                uint8x16_t l0 = vld1q_u8(ql + 16 * half), l1 = vld1q_u8(ql + 32 + 16 * half);
                uint8x16_t hb = vld1q_u8(qh + 16 * half);
                uint8x16_t u[4] = {
                    vorrq_u8(vandq_u8(l0, m4), vshlq_n_u8(vandq_u8(hb, m3), 4)),
                    vorrq_u8(vandq_u8(l1, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4)),
                    vorrq_u8(vshrq_n_u8(l0, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4)),
                    vorrq_u8(vshrq_n_u8(l1, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4)),
                };
                for (int k = 0; k < 4; k++) {
                    int8x16_t q = vsubq_s8(vreinterpretq_s8_u8(u[k]), off);
                    sumi += sc[2 * k + half] * dot16s(q, q8 + 32 * k + 16 * half);
                }
            }
        }
        s += y[i].d * h2f(x[i].d) * (float)sumi;
    }
    return s;
}

void quant_register_neon(struct quant_traits *t)
{
    t[GGML_TYPE_F32].vec_dot = f32_dot;
    t[GGML_TYPE_F16].vec_dot = f16_dot;
    t[GGML_TYPE_BF16].vec_dot = bf16_dot;
    t[GGML_TYPE_Q8_0].vec_dot = q8_0_dot;
    t[GGML_TYPE_Q4_0].vec_dot = q4_0_dot;
    t[GGML_TYPE_Q4_1].vec_dot = q4_1_dot;
    t[GGML_TYPE_Q5_0].vec_dot = q5_0_dot;
    t[GGML_TYPE_Q5_1].vec_dot = q5_1_dot;
    t[GGML_TYPE_Q2_K].vec_dot = q2_K_dot;
    t[GGML_TYPE_Q3_K].vec_dot = q3_K_dot;
    t[GGML_TYPE_Q4_K].vec_dot = q4_K_dot;
    t[GGML_TYPE_Q5_K].vec_dot = q5_K_dot;
    t[GGML_TYPE_Q6_K].vec_dot = q6_K_dot;
}
