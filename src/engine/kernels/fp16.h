/* fp16 — IEEE half and bfloat16 <-> f32 conversions.
 *
 * The software paths are exact (round-to-nearest-even, subnormals, inf, NaN kept as NaN) and are
 * what the scalar reference kernels use, so results do not depend on the CPU. In a translation
 * unit compiled with F16C (the _avx2/_avx512 files) fp16_to_f32/f32_to_fp16 use the hardware
 * instructions, which give bit-identical results. */
#ifndef LMS_ENGINE_FP16_H
#define LMS_ENGINE_FP16_H

#include <stdint.h>
#include <string.h>
#include <math.h>

#if defined(__F16C__)
#include <immintrin.h>
#endif

static inline uint32_t fp16_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fp16_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float fp16_to_f32_sw(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in f32 */
        float f = (float)man * 0x1p-24f;
        return fp16_bits_f32(fp16_f32_bits(f) | sign);
    }
    if (exp == 31) return fp16_bits_f32(sign | 0x7f800000u | (man << 13));
    return fp16_bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t f32_to_fp16_sw(float f)
{
    uint32_t x = fp16_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf / NaN (NaN stays a quiet NaN) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0));
    if (ax >= 0x477ff000u) /* >= 65520 rounds to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) { /* below 2^-14: subnormal half (or zero); scaling by 2^24 is exact */
        float r = fp16_bits_f32(ax) * 0x1p24f;
        uint32_t m = (uint32_t)rintf(r); /* RNE; m == 1024 is the smallest normal, still right */
        return (uint16_t)(sign | m);
    }
    uint32_t h = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ffu);
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* carry into exponent is correct */
    return (uint16_t)(sign | h);
}

static inline float bf16_to_f32(uint16_t b)
{
    return fp16_bits_f32((uint32_t)b << 16);
}

static inline uint16_t f32_to_bf16(float f)
{
    uint32_t u = fp16_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#if defined(__F16C__)
static inline float fp16_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}
static inline uint16_t f32_to_fp16(float f)
{
    return (uint16_t)_cvtss_sh(f, 0);
}
#else
static inline float fp16_to_f32(uint16_t h)
{
    return fp16_to_f32_sw(h);
}
static inline uint16_t f32_to_fp16(float f)
{
    return f32_to_fp16_sw(f);
}
#endif

#endif
