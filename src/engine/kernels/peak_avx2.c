/* peak loops, AVX2 (see peak.h): 12 independent ymm chains; the int8 step is what the AVX2
 * kernels do per 32 byte pairs (vpmaddubsw, vpmaddwd against ones, vpaddd). */
#include <immintrin.h>

#include "engine/kernels/peak.h"

#define CHAINS 12

static uint64_t f32(uint64_t iters)
{
    __m256 a[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm256_set1_ps((float)i);
    __m256 m = _mm256_set1_ps(0.999f), c = _mm256_set1_ps(0.001f);
    for (uint64_t n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm256_fmadd_ps(a[i], m, c);
        __asm__ volatile("" : "+x"(m));
    }
    __m256 s = a[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_ps(s, a[i]);
    float out[8];
    _mm256_storeu_ps(out, s);
    volatile float sink = out[0];
    (void)sink;
    return iters * CHAINS * 8 * 2;
}

static uint64_t i8(uint64_t iters)
{
    __m256i a[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm256_set1_epi32(i);
    __m256i x[CHAINS];
    for (int i = 0; i < CHAINS; i++) /* one input per chain, so no chain shares another's products */
        x[i] = _mm256_set1_epi8((char)(5 + i));
    __m256i w = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1);
    for (uint64_t n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w, x[i]), one));
        __asm__ volatile("" : "+x"(w));
    }
    __m256i s = a[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm256_add_epi32(s, a[i]);
    int out[8];
    _mm256_storeu_si256((__m256i *)out, s);
    volatile int sink = out[0];
    (void)sink;
    return iters * CHAINS * 32 * 2;
}

const struct peak_impl *peak_avx2(void)
{
    static const struct peak_impl impl = {.isa = "avx2 (ymm FMA, vpmaddubsw + vpmaddwd)", .f32 = f32, .i8 = i8};
    return &impl;
}
