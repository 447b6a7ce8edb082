/* quant_neon — arm64 back-end. Not written yet: every type runs the scalar reference kernels on
 * arm64 (documented in docs/kernels.md). Kept as the place NEON kernels register. */
#include "engine/quant_blocks.h"

void quant_register_neon(struct quant_traits *tab)
{
    (void)tab;
}
