/* quant_ternary — scalar references of the low-bit GGML types TQ1_0, TQ2_0, Q1_0 and Q2_0, with
 * the block layouts and numerics of llama.cpp d32676d (ggml-common.h, ggml-quants.c,
 * ggml-cpu/quants.c), so files quantized by either side decode to the same floats.
 *
 * Quantizers: the reference ones of llama.cpp, reproduced so that lmserve-mkmodel writes the same
 * bytes llama.cpp's quantizer would for the same floats (checked by scripts/ternary/check.py):
 *   TQ1_0 / TQ2_0: d = max |x| of the 256-element block, t = round(x / d) in {-1, 0, 1} (halves
 *     away from zero), stored as t + 1;
 *   Q1_0: d = mean |x| of the 128-element block, one sign bit per element (x >= 0 -> +d);
 *   Q2_0: d = max |x| of the 64-element block, q = round(x / d) + 1 clamped to 0..3 (the encoding
 *     has a fourth level, +2d, that this quantizer never produces but every decoder accepts).
 * Dots (vec_dot): exact integer sums per block, then floats in the order llama.cpp's generic CPU
 * code uses — per block sum * (dx * dy) for the TQ types (against Q8_K), and for Q1_0 / Q2_0
 * (against Q8_0, one activation block per 32 elements) a float sum of dy * isum over the
 * activation blocks of a weight block, times dx. The AVX2 kernels (quant_ternary_avx2.c) compute
 * the same integers and do these float operations in the same order, so they are bit-identical
 * to these references (tests/unit/test_ternary.c). */
#include <math.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/quant_blocks.h"

/* ------------------------------------------------------------ TQ1_0
 * A byte holds up to five base-3 digits as a fixed-point fraction: for digits t0..t4 (t0 the most
 * significant) the byte is ceil(256 * v / 243) with v = sum t_l 3^(4-l). Digit l is then the
 * integer part of 3 * frac(byte * 3^l / 256), i.e. ((byte * 3^l mod 256) * 3) >> 8. Element order
 * in a block:
 *   qs[m], m < 32, digit l      -> element 32 l + m         (elements 0..159)
 *   qs[32 + m], m < 16, digit l -> element 160 + 16 l + m   (elements 160..239)
 *   qh[j], j < 4, digit l < 4   -> element 240 + 4 l + j    (elements 240..255; the fifth digit
 *                                  is always 0) */

static const uint8_t k_pow3[5] = {1, 3, 9, 27, 81};

static inline int tq1_digit(uint8_t byte, int l)
{
    uint8_t v = (uint8_t)(byte * k_pow3[l]);
    return ((int)v * 3) >> 8;
}

/* The 256 digits (0, 1, 2) of a TQ1_0 block in element order. */
static void tq1_0_digits(const struct block_tq1_0 *b, uint8_t t[QK_K])
{
    for (int l = 0; l < 5; l++)
        for (int m = 0; m < 32; m++)
            t[32 * l + m] = (uint8_t)tq1_digit(b->qs[m], l);
    for (int l = 0; l < 5; l++)
        for (int m = 0; m < 16; m++)
            t[160 + 16 * l + m] = (uint8_t)tq1_digit(b->qs[32 + m], l);
    for (int l = 0; l < 4; l++)
        for (int j = 0; j < 4; j++)
            t[240 + 4 * l + j] = (uint8_t)tq1_digit(b->qh[j], l);
}

/* nd digits t[0..nd) (t[0] most significant; fewer than five: the rest are 0) -> the byte */
static uint8_t tq1_pack(const int *t, int nd)
{
    int v = 0;
    for (int l = 0; l < nd; l++)
        v = 3 * v + t[l];
    for (int l = nd; l < 5; l++)
        v *= 3;
    return (uint8_t)((v * 256 + 242) / 243);
}

static float block_amax(const float *x, int n)
{
    float amax = 0;
    for (int j = 0; j < n; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

void quant_tq1_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_tq1_0 *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float d = block_amax(x, QK_K), id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16_sw(d);
        int t[QK_K];
        for (int e = 0; e < QK_K; e++)
            t[e] = (int)lroundf(x[e] * id) + 1;
        int g[5];
        for (int m = 0; m < 32; m++) {
            for (int l = 0; l < 5; l++)
                g[l] = t[32 * l + m];
            y[i].qs[m] = tq1_pack(g, 5);
        }
        for (int m = 0; m < 16; m++) {
            for (int l = 0; l < 5; l++)
                g[l] = t[160 + 16 * l + m];
            y[i].qs[32 + m] = tq1_pack(g, 5);
        }
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 4; l++)
                g[l] = t[240 + 4 * l + j];
            y[i].qh[j] = tq1_pack(g, 4);
        }
    }
}

void quant_tq1_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_tq1_0 *x = vx;
    uint8_t t[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        float d = fp16_to_f32_sw(x[i].d);
        tq1_0_digits(&x[i], t);
        for (int e = 0; e < QK_K; e++)
            y[e] = (float)((int)t[e] - 1) * d;
    }
}

float quant_tq1_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_tq1_0 *x = vx;
    const struct block_q8_K *y = vy;
    uint8_t t[QK_K];
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        tq1_0_digits(&x[i], t);
        int sum = 0;
        for (int e = 0; e < QK_K; e++)
            sum += ((int)t[e] - 1) * y[i].qs[e];
        s += (float)sum * (fp16_to_f32_sw(x[i].d) * y[i].d);
    }
    return s;
}

/* ------------------------------------------------------------ TQ2_0
 * Element 128 c + 32 l + m (c < 2, l < 4, m < 32) is bits 2l..2l+1 of qs[32 c + m]; q - 1. */

void quant_tq2_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_tq2_0 *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float d = block_amax(x, QK_K), id = d ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16_sw(d);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int e = 0; e < QK_K; e++) {
            int q = (int)lroundf(x[e] * id) + 1;
            int c = e / 128, l = (e % 128) / 32, m = e % 32;
            y[i].qs[32 * c + m] |= (uint8_t)((q & 3) << (2 * l));
        }
    }
}

static inline int tq2_q(const struct block_tq2_0 *b, int e)
{
    return (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

void quant_tq2_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_tq2_0 *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        float d = fp16_to_f32_sw(x[i].d);
        for (int e = 0; e < QK_K; e++)
            y[e] = (float)(tq2_q(&x[i], e) - 1) * d;
    }
}

float quant_tq2_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_tq2_0 *x = vx;
    const struct block_q8_K *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int e = 0; e < QK_K; e++)
            sum += (tq2_q(&x[i], e) - 1) * y[i].qs[e];
        s += (float)sum * (fp16_to_f32_sw(x[i].d) * y[i].d);
    }
    return s;
}

/* ------------------------------------------------------------ Q1_0
 * Element j of a block is bit j % 8 of qs[j / 8]: set = +d, clear = -d. */

void quant_q1_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q1_0 *y = vy;
    for (int64_t i = 0; i < n / QK1_0; i++, x += QK1_0) {
        float sum_abs = 0;
        for (int j = 0; j < QK1_0; j++)
            sum_abs += fabsf(x[j]);
        y[i].d = f32_to_fp16_sw(sum_abs / QK1_0);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < QK1_0; j++)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= (uint8_t)(1 << (j % 8));
    }
}

void quant_q1_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q1_0 *x = vx;
    for (int64_t i = 0; i < n / QK1_0; i++, y += QK1_0) {
        float d = fp16_to_f32_sw(x[i].d);
        for (int j = 0; j < QK1_0; j++)
            y[j] = (x[i].qs[j / 8] >> (j % 8)) & 1 ? d : -d;
    }
}

float quant_q1_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q1_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK1_0; i++) {
        float sb = 0;
        for (int k = 0; k < QK1_0 / QK8_0; k++) {
            const struct block_q8_0 *yb = &y[i * (QK1_0 / QK8_0) + k];
            int sum = 0;
            for (int j = 0; j < QK8_0; j++) {
                int e = QK8_0 * k + j;
                sum += (x[i].qs[e / 8] >> (e % 8)) & 1 ? yb->qs[j] : -yb->qs[j];
            }
            sb += fp16_to_f32_sw(yb->d) * (float)sum;
        }
        s += fp16_to_f32_sw(x[i].d) * sb;
    }
    return s;
}

/* ------------------------------------------------------------ Q2_0
 * Element j of a block is bits 2(j % 4)..2(j % 4)+1 of qs[j / 4]; q - 1 in {-1, 0, 1, 2}. */

void quant_q2_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q2_0 *y = vy;
    for (int64_t i = 0; i < n / QK2_0; i++, x += QK2_0) {
        float d = block_amax(x, QK2_0), id = d > 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f32_to_fp16_sw(d);
        memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < QK2_0; j++) {
            int q = (int)roundf(x[j] * id) + 1;
            q = q < 0 ? 0 : q > 3 ? 3 : q;
            y[i].qs[j / 4] |= (uint8_t)(q << (2 * (j % 4)));
        }
    }
}

void quant_q2_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q2_0 *x = vx;
    for (int64_t i = 0; i < n / QK2_0; i++, y += QK2_0) {
        float d = fp16_to_f32_sw(x[i].d);
        for (int j = 0; j < QK2_0; j++)
            y[j] = (float)(((x[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

float quant_q2_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q2_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        float sb = 0;
        for (int k = 0; k < QK2_0 / QK8_0; k++) {
            const struct block_q8_0 *yb = &y[i * (QK2_0 / QK8_0) + k];
            int sum = 0;
            for (int j = 0; j < QK8_0; j++) {
                int e = QK8_0 * k + j;
                sum += (((x[i].qs[e / 4] >> (2 * (e % 4))) & 3) - 1) * yb->qs[j];
            }
            sb += fp16_to_f32_sw(yb->d) * (float)sum;
        }
        s += fp16_to_f32_sw(x[i].d) * sb;
    }
    return s;
}
