/* family_sampling — a family's recommended sampling settings, overridden by the GGUF's own
 * (family.h). Kept apart from family.c so the registry needs neither the GGUF reader nor the
 * sampler (the request fuzzer links the registry alone). */
#include "engine/format/gguf.h"
#include "engine/sample/sampler.h"
#include "engine/text/family.h"

void family_sampling_params(const struct family_sampling *fs, const struct gguf *g,
                            struct sampler_params *p)
{
    sampler_params_init(p);
    p->temperature = fs->temperature;
    p->top_k = fs->top_k;
    p->top_p = fs->top_p;
    p->min_p = fs->min_p;
    if (!g) return;
    float v; /* gguf_get_f32 reads any numeric type exactly representable as a float */
    if (gguf_get_f32(g, "general.sampling.temp", &v, NULL) == 0 && v >= 0 && v <= 100)
        p->temperature = v;
    if (gguf_get_f32(g, "general.sampling.top_k", &v, NULL) == 0 && v >= 0 && v <= 1e6f)
        p->top_k = (int)v;
    if (gguf_get_f32(g, "general.sampling.top_p", &v, NULL) == 0 && v > 0 && v <= 1)
        p->top_p = v;
    if (gguf_get_f32(g, "general.sampling.min_p", &v, NULL) == 0 && v >= 0 && v <= 1)
        p->min_p = v;
}
