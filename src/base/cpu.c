/* cpu — see cpu.h. */
#include "base/cpu.h"

#include <pthread.h>

static struct cpu_features g_cpu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    g_cpu = (struct cpu_features){
        .avx2 = __builtin_cpu_supports("avx2"),
        .fma = __builtin_cpu_supports("fma"),
        .f16c = __builtin_cpu_supports("f16c"),
        .bmi2 = __builtin_cpu_supports("bmi2"),
        .avx512f = __builtin_cpu_supports("avx512f"),
        .avx512bw = __builtin_cpu_supports("avx512bw"),
        .avx512vl = __builtin_cpu_supports("avx512vl"),
        .avx512dq = __builtin_cpu_supports("avx512dq"),
        .avx512vnni = __builtin_cpu_supports("avx512vnni"),
        .avx512bf16 = __builtin_cpu_supports("avx512bf16"),
        .amx_tile = __builtin_cpu_supports("amx-tile"),
        .amx_int8 = __builtin_cpu_supports("amx-int8"),
    };
#endif
}

const struct cpu_features *cpu_features(void)
{
    pthread_once(&g_once, probe);
    return &g_cpu;
}

bool cpu_has_avx2_fma(void)
{
    const struct cpu_features *c = cpu_features();
    return c->avx2 && c->fma;
}

bool cpu_has_avx512_vnni(void)
{
    const struct cpu_features *c = cpu_features();
    return c->avx512f && c->avx512bw && c->avx512vl && c->avx512dq && c->avx512vnni;
}
