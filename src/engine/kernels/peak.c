/* peak — picks the widest ceiling loops this CPU runs (see peak.h). */
#include "engine/kernels/peak.h"

#include "base/cpu.h"

const struct peak_impl *peak_impl(void)
{
#if defined(__x86_64__)
    if (cpu_has_avx512_vnni()) return peak_avx512();
    if (cpu_has_avx2_fma()) return peak_avx2();
#endif
    return 0;
}
