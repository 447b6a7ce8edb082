/* peak — the arithmetic ceilings prefill is measured against (lmserve-kbench --peak).
 *
 * Decode is bounded by read bandwidth (lmserve-kbench --bandwidth); prefill by how many
 * multiply-adds the vector units retire. These loops run independent chains of the instruction
 * the engine's prefill kernels are built on — fused multiply-add on f32 vectors (the F16 / BF16 /
 * F32 weights' GEMM) and the int8 dot product (the quantized types' GEMM: vpdpbusd on AVX-512
 * VNNI, vpmaddubsw + vpmaddwd on AVX2) — at the widest width this CPU runs, with enough chains to
 * cover the latency, and count the operations (2 per multiply-add). Figures only; no kernel reads
 * them. */
#ifndef LMS_ENGINE_PEAK_H
#define LMS_ENGINE_PEAK_H

#include <stdint.h>

struct peak_impl {
    const char *isa;
    /* iters rounds of the loop; returns the operations done (f32 flops / int8 ops) */
    uint64_t (*f32)(uint64_t iters);
    uint64_t (*i8)(uint64_t iters);
};

/* This CPU's loops, or NULL where there are none (no AVX2/FMA: the portable build). */
const struct peak_impl *peak_impl(void);

#if defined(__x86_64__)
const struct peak_impl *peak_avx512(void);
const struct peak_impl *peak_avx2(void);
#endif

#endif
