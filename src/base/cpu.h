/* cpu — the one CPU-feature probe. Kernels are picked once at startup from these flags into
 * function pointers (STYLE.md: one binary runs on any x86-64); every module that picks asks here
 * instead of running its own probe.
 *
 * The flags are what the CPU reports (CPUID via the compiler's builtins); all false on other
 * architectures. AMX additionally needs the kernel's permission, which the AMX kernel requests
 * itself (matmul_avx512.c). Probed once on first use; any thread. */
#ifndef LMS_BASE_CPU_H
#define LMS_BASE_CPU_H

#include <stdbool.h>

struct cpu_features {
    bool avx2, fma, f16c, bmi2;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool amx_tile, amx_int8;
};

const struct cpu_features *cpu_features(void);

/* AVX2 + FMA: the 8-lane float kernels (attention, sampler passes). */
bool cpu_has_avx2_fma(void);
/* AVX-512 F/BW/VL/DQ + VNNI: the 16-lane and int8-dot kernels. */
bool cpu_has_avx512_vnni(void);
/* MemAvailable of /proc/meminfo in bytes, or -1 when unknown */
long long sys_mem_available(void);

#endif
