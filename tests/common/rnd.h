/* rnd — the deterministic test-data generator shared by the quant tests (tests/unit/test_quant.c,
 * Criterion on x86) and the NEON test (tests/neon/test_neon_dots.c, cross-built for arm64), so
 * both draw the same kind of weights/activations. Each test file gets its own state. */
#ifndef LMS_TESTS_RND_H
#define LMS_TESTS_RND_H

#include <stdint.h>

static uint64_t rng_state = 12345;

static inline uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}

static inline float rnd_unit(void)
{
    return (float)((rnd() & 0xffffff) / 16777216.0);
}

/* roughly normal, with a few outliers like real weights/activations */
static inline float rnd_normal(void)
{
    float s = 0;
    for (int i = 0; i < 4; i++)
        s += rnd_unit();
    s = (s - 2.0f) * 1.7f;
    if ((rnd() & 63) == 0) s *= 4;
    return s;
}

/* n values with a random overall scale (0.02 .. 3.02), as rows of weights or activations */
static inline void fill(float *x, int64_t n)
{
    float scale = 0.02f + 3 * rnd_unit();
    for (int64_t i = 0; i < n; i++)
        x[i] = rnd_normal() * scale;
}

#endif
