/* quant_blocks — the on-disk block layouts of the quantized types (internal to quant / matmul).
 *
 * Bit-compatible with GGML (files written by llama.cpp's quantizer load unchanged): every struct
 * is packed by construction (only uint8/int8/uint16 members after a 2-byte-aligned head) and its
 * size is asserted, so a row of blocks in the mmapped file is an array of these structs.
 * Scales d/dmin/m are IEEE half (fp16 bits), except Q8_K whose d is an f32.
 *
 *   Q4_0  (32 el, 18 B): d; qs[16]        x[j] = d*((qs[j]&15)-8), x[j+16] = d*((qs[j]>>4)-8)
 *   Q4_1  (32 el, 20 B): d, m; qs[16]     x = d*q + m
 *   Q5_0  (32 el, 22 B): d; qh[4]; qs[16] 5th bit of element j is bit j of qh (LE u32); q-16
 *   Q5_1  (32 el, 24 B): d, m; qh[4]; qs[16]
 *   Q8_0  (32 el, 34 B): d; qs[32]        x = d*q
 *   Q2_K (256 el, 84 B): scales[16] (lo nibble scale, hi nibble min); qs[64]; d; dmin
 *   Q3_K (256 el,110 B): hmask[32]; qs[64]; scales[12] (16 x 6-bit, biased by 32); d
 *   Q4_K (256 el,144 B): d; dmin; scales[12] (8 x 6-bit scale + 8 x 6-bit min); qs[128]
 *   Q5_K (256 el,176 B): d; dmin; scales[12]; qh[32]; qs[128]
 *   Q6_K (256 el,210 B): ql[128]; qh[64]; scales[16] (int8); d
 *   Q8_K (256 el,292 B): f32 d; qs[256]; bsums[16] (sum of each 16 qs) — activations only
 *   TQ1_0 (256 el, 54 B): qs[48] (5 trits a byte); qh[4] (4 trits a byte); d      x = d*(t-1)
 *   TQ2_0 (256 el, 66 B): qs[64] (4 x 2 bits a byte); d                            x = d*(q-1)
 *   Q1_0 (128 el, 18 B): d; qs[16]        x[j] = bit j (LSB first) ? +d : -d
 *   Q2_0  (64 el, 18 B): d; qs[16]        x[j] = d*(((qs[j/4] >> 2(j%4)) & 3) - 1)
 *   (element order of the TQ types: quant_ternary.c, next to their decoders)
 * Element order inside the K-quant blocks is documented next to each unpack function in quant.c. */
#ifndef LMS_ENGINE_QUANT_BLOCKS_H
#define LMS_ENGINE_QUANT_BLOCKS_H

#include <assert.h>
#include <stdint.h>

#include "engine/kernels/quant.h"

#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK_K 256
#define K_SCALE_SIZE 12
#define QK1_0 128
#define QK2_0 64

struct block_q4_0 {
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
};
struct block_q4_1 {
    uint16_t d, m;
    uint8_t qs[QK4_1 / 2];
};
struct block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
};
struct block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[QK5_1 / 2];
};
struct block_q8_0 {
    uint16_t d;
    int8_t qs[QK8_0];
};
struct block_q2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d, dmin;
};
struct block_q3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
struct block_q4_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
};
struct block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
struct block_q6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
struct block_q8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
struct block_tq1_0 {
    uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; /* 48: 240 elements, 5 base-3 digits a byte */
    uint8_t qh[QK_K / 64];                  /* 4: the last 16 elements, 4 digits a byte */
    uint16_t d;
};
struct block_tq2_0 {
    uint8_t qs[QK_K / 4];
    uint16_t d;
};
struct block_q1_0 {
    uint16_t d;
    uint8_t qs[QK1_0 / 8];
};
struct block_q2_0 {
    uint16_t d;
    uint8_t qs[QK2_0 / 4];
};

static_assert(sizeof(struct block_q4_0) == 18, "q4_0 layout");
static_assert(sizeof(struct block_q4_1) == 20, "q4_1 layout");
static_assert(sizeof(struct block_q5_0) == 22, "q5_0 layout");
static_assert(sizeof(struct block_q5_1) == 24, "q5_1 layout");
static_assert(sizeof(struct block_q8_0) == 34, "q8_0 layout");
static_assert(sizeof(struct block_q2_K) == 84, "q2_K layout");
static_assert(sizeof(struct block_q3_K) == 110, "q3_K layout");
static_assert(sizeof(struct block_q4_K) == 144, "q4_K layout");
static_assert(sizeof(struct block_q5_K) == 176, "q5_K layout");
static_assert(sizeof(struct block_q6_K) == 210, "q6_K layout");
static_assert(sizeof(struct block_q8_K) == 292, "q8_K layout");
static_assert(sizeof(struct block_tq1_0) == 54, "tq1_0 layout");
static_assert(sizeof(struct block_tq2_0) == 66, "tq2_0 layout");
static_assert(sizeof(struct block_q1_0) == 18, "q1_0 layout");
static_assert(sizeof(struct block_q2_0) == 18, "q2_0 layout");

/* 6-bit scale j (0..7) and min of a Q4_K/Q5_K block's packed scales[12]. */
static inline void quant_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* The 16 signed 6-bit scales of a Q3_K block (already minus 32). */
static inline void quant_q3k_scales(const uint8_t *s, int8_t out[16])
{
    for (int j = 0; j < 16; j++) {
        int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
        int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
        out[j] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

/* SIMD back-ends fill in the kernels they have (called by quant_init when the CPU has the ISA). */
void quant_register_avx2(struct quant_traits *tab);
void quant_register_avx512(struct quant_traits *tab);
void quant_register_neon(struct quant_traits *tab);
void quant_register_ternary_avx2(struct quant_traits *tab);

/* Scalar references of the low-bit types (quant_ternary.c); vec_dot against Q8_K (TQ1_0, TQ2_0)
 * or Q8_0 (Q1_0, Q2_0), as llama.cpp's CPU backend pairs them. */
void quant_tq1_0_to_float(const void *src, float *dst, int64_t n);
void quant_tq1_0_from_float(const float *src, void *dst, int64_t n);
float quant_tq1_0_vec_dot(int64_t n, const void *x, const void *y);
void quant_tq2_0_to_float(const void *src, float *dst, int64_t n);
void quant_tq2_0_from_float(const float *src, void *dst, int64_t n);
float quant_tq2_0_vec_dot(int64_t n, const void *x, const void *y);
void quant_q1_0_to_float(const void *src, float *dst, int64_t n);
void quant_q1_0_from_float(const float *src, void *dst, int64_t n);
float quant_q1_0_vec_dot(int64_t n, const void *x, const void *y);
void quant_q2_0_to_float(const void *src, float *dst, int64_t n);
void quant_q2_0_from_float(const float *src, void *dst, int64_t n);
float quant_q2_0_vec_dot(int64_t n, const void *x, const void *y);

#endif
