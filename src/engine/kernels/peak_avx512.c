/* peak loops, AVX-512 (see peak.h): 12 independent zmm chains — more than latency x issue width
 * of the FMA and VNNI units of the CPUs we run on (4-5 cycles x 2 per cycle). */
#include <immintrin.h>

#include "engine/kernels/peak.h"

#define CHAINS 12

static uint64_t f32(uint64_t iters)
{
    __m512 a[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm512_set1_ps((float)i);
    __m512 m = _mm512_set1_ps(0.999f), c = _mm512_set1_ps(0.001f);
    for (uint64_t n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm512_fmadd_ps(a[i], m, c);
        __asm__ volatile("" : "+v"(m)); /* one loop-carried input: the chains cannot be hoisted */
    }
    __m512 s = a[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_ps(s, a[i]);
    volatile float sink = _mm512_reduce_add_ps(s);
    (void)sink;
    return iters * CHAINS * 16 * 2;
}

static uint64_t i8(uint64_t iters)
{
    __m512i a[CHAINS];
    for (int i = 0; i < CHAINS; i++)
        a[i] = _mm512_set1_epi32(i);
    __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
    for (uint64_t n = 0; n < iters; n++) {
#pragma GCC unroll 12
        for (int i = 0; i < CHAINS; i++)
            a[i] = _mm512_dpbusd_epi32(a[i], w, x);
        __asm__ volatile("" : "+v"(w));
    }
    __m512i s = a[0];
    for (int i = 1; i < CHAINS; i++)
        s = _mm512_add_epi32(s, a[i]);
    volatile int sink = _mm512_reduce_add_epi32(s);
    (void)sink;
    return iters * CHAINS * 64 * 2;
}

const struct peak_impl *peak_avx512(void)
{
    static const struct peak_impl impl = {.isa = "avx512 (zmm FMA, vpdpbusd)", .f32 = f32, .i8 = i8};
    return &impl;
}
