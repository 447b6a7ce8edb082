/* quant — tensor element types (GGML numbering, as stored in GGUF) and their traits table.
 *
 * Every type has: block size (elements per block), bytes per block, a scalar reference
 * to_float/from_float, and vec_dot against its vec_dot_type (the type activations are quantized
 * to: Q8_0 for the legacy quants, Q8_K for the K-quants, F32/F16 for float weights).
 * SIMD variants replace the function pointers at startup (quant_init) according to CPU features;
 * the *_ref pointers always stay the scalar reference, for tests. */
#ifndef LMS_ENGINE_QUANT_H
#define LMS_ENGINE_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum ggml_type {
    GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1, GGML_TYPE_Q4_0 = 2, GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6, GGML_TYPE_Q5_1 = 7, GGML_TYPE_Q8_0 = 8, GGML_TYPE_Q8_1 = 9,
    GGML_TYPE_Q2_K = 10, GGML_TYPE_Q3_K = 11, GGML_TYPE_Q4_K = 12, GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14, GGML_TYPE_Q8_K = 15, GGML_TYPE_BF16 = 30,
    /* low-bit types (llama.cpp d32676d): ternary TQ1_0/TQ2_0 (BitNet b1.58, TriLM), sign-only Q1_0
     * and 2-bit Q2_0 (quant_ternary.c, docs/kernels.md "Ternary and low-bit types") */
    GGML_TYPE_TQ1_0 = 34, GGML_TYPE_TQ2_0 = 35, GGML_TYPE_Q1_0 = 41, GGML_TYPE_Q2_0 = 42,
    GGML_TYPE_COUNT = 43
};

typedef void (*quant_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*quant_from_float_fn)(const float *src, void *dst, int64_t n);
/* dot of n elements: x in this type, y in vec_dot_type; n is a multiple of the block size. */
typedef float (*quant_vec_dot_fn)(int64_t n, const void *x, const void *y);

struct quant_traits {
    const char *name;       /* NULL for unused ids */
    int64_t blck_size;
    size_t type_size;       /* bytes per block */
    bool is_quantized;
    enum ggml_type vec_dot_type;
    quant_to_float_fn to_float, to_float_ref;
    quant_from_float_fn from_float, from_float_ref;
    quant_vec_dot_fn vec_dot, vec_dot_ref;
};

/* Selects SIMD kernels for this CPU. Idempotent; call once at startup before any kernel use. */
void quant_init(void);
const struct quant_traits *quant_traits(enum ggml_type t); /* NULL if unknown */
bool quant_type_valid(uint32_t t);                          /* a type this engine can compute */
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size. */
size_t quant_row_size(enum ggml_type t, int64_t n);
const char *quant_isa(void); /* "avx512-vnni", "avx2", "neon", "scalar" */

#endif
