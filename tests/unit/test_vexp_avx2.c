/* The one AVX2 e^x (engine/kernels/vexp_avx2.h) against libm. Built with the AVX2 flags (the
 * Makefile's %_avx2.c rule); skipped, with a message, on a CPU without AVX2 + FMA. */
#include <criterion/criterion.h>
#include <math.h>

#include "base/cpu.h"
#include "engine/kernels/vexp_avx2.h"

static void lanes(const float in[8], float out[8])
{
    _mm256_storeu_ps(out, vexp_avx2(_mm256_loadu_ps(in)));
}

Test(vexp_avx2, relative_error_over_the_live_range)
{
    if (!cpu_has_avx2_fma()) cr_skip_test("this CPU has no AVX2 + FMA");
    double worst = 0;
    for (float x0 = -86.5f; x0 <= 88.0f; x0 += 0.0137f * 8) {
        float in[8], out[8];
        for (int k = 0; k < 8; k++) in[k] = fminf(x0 + 0.0137f * (float)k, 88.0f);
        lanes(in, out);
        for (int k = 0; k < 8; k++) {
            double want = exp((double)in[k]);
            double rel = fabs(out[k] - want) / want;
            if (rel > worst) worst = rel;
        }
    }
    cr_assert_lt(worst, 3e-7, "worst relative error %g", worst);
}

Test(vexp_avx2, ends_of_the_range)
{
    if (!cpu_has_avx2_fma()) cr_skip_test("this CPU has no AVX2 + FMA");
    float in[8] = {-INFINITY, NAN, -87.0f, -100.0f, 0.0f, 88.0f, 100.0f, INFINITY}, out[8];
    lanes(in, out);
    /* nothing below the float range leaks in: a masked logit (-inf) contributes exactly 0 */
    cr_assert_eq(out[0], 0.0f);
    cr_assert_eq(out[1], 0.0f);
    cr_assert_eq(out[2], 0.0f);
    cr_assert_eq(out[3], 0.0f);
    cr_assert_eq(out[4], 1.0f);
    /* above: clamped at e^88, finite (no exponent overflow into garbage) */
    cr_assert(isfinite(out[5]) && fabs(out[5] / exp(88.0) - 1) < 3e-7, "e^88 = %g", out[5]);
    cr_assert_eq(out[6], out[5]);
    cr_assert_eq(out[7], out[5]);
}
