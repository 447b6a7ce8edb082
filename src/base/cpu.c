/* cpu — see cpu.h. */
#include <stdio.h>
#include "base/cpu.h"

#include <pthread.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static struct cpu_features g_cpu;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    /* CPUID for the flags not every compiler's builtin knows (clang: f16c, bmi2, amx-*):
     * leaf 1 ECX bit 29 F16C; leaf 7 EBX bit 8 BMI2, EDX bits 24/25 AMX-TILE/AMX-INT8 */
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0, ecx1 = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx1, &edx)) ecx1 = 0;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) ebx = edx = 0;
    g_cpu = (struct cpu_features){
        .avx2 = __builtin_cpu_supports("avx2"),
        .fma = __builtin_cpu_supports("fma"),
        .f16c = (ecx1 >> 29) & 1,
        .bmi2 = (ebx >> 8) & 1,
        .avx512f = __builtin_cpu_supports("avx512f"),
        .avx512bw = __builtin_cpu_supports("avx512bw"),
        .avx512vl = __builtin_cpu_supports("avx512vl"),
        .avx512dq = __builtin_cpu_supports("avx512dq"),
        .avx512vnni = __builtin_cpu_supports("avx512vnni"),
        .avx512bf16 = __builtin_cpu_supports("avx512bf16"),
        .amx_tile = (edx >> 24) & 1,
        .amx_int8 = (edx >> 25) & 1,
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

long long sys_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}
