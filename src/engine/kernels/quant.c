/* quant — the traits table and the scalar reference kernels of every tensor type.
 *
 * The reference kernels are written for clarity: each K-quant block is first unpacked into its
 * integer quants (int8 q[256]) plus one float scale and one float min per 16 elements, and both
 * to_float and vec_dot are computed from that. The SIMD files (quant_avx2.c, quant_avx512.c)
 * replace the fast pointers at quant_init time; tests compare them against these. */
#include "engine/kernels/quant.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "base/cpu.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/quant_blocks.h"

static inline int nearest_int(float f)
{
    return (int)lrintf(f);
}
static inline int imin(int a, int b)
{
    return a < b ? a : b;
}
static inline int imax(int a, int b)
{
    return a > b ? a : b;
}

/* ---------------------------------------------------------------- float types */

static void f32_to_float(const void *src, float *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * 4);
}
static void f32_from_float(const float *src, void *dst, int64_t n)
{
    memcpy(dst, src, (size_t)n * 4);
}
static float f32_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const float *x = vx, *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += x[i] * y[i];
    return s;
}

static void f16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fp16_to_f32_sw(x[i]);
}
static void f16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = f32_to_fp16_sw(src[i]);
}
static float f16_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx, *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += fp16_to_f32_sw(x[i]) * fp16_to_f32_sw(y[i]);
    return s;
}

static void bf16_to_float(const void *src, float *dst, int64_t n)
{
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(x[i]);
}
static void bf16_from_float(const float *src, void *dst, int64_t n)
{
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = f32_to_bf16(src[i]);
}
/* BF16 weights dot F32 activations (vec_dot_type F32). */
static float bf16_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const uint16_t *x = vx;
    const float *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n; i++)
        s += bf16_to_f32(x[i]) * y[i];
    return s;
}

/* ---------------------------------------------------------------- Q8_0 */

static void q8_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q8_0 *y = vy;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        float amax = 0;
        for (int j = 0; j < QK8_0; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16_sw(d);
        for (int j = 0; j < QK8_0; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}
static void q8_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q8_0 *x = vx;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        float d = fp16_to_f32_sw(x[i].d);
        for (int j = 0; j < QK8_0; j++)
            *y++ = d * x[i].qs[j];
    }
}
static float q8_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q8_0 *x = vx, *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int sum = 0;
        for (int j = 0; j < QK8_0; j++)
            sum += x[i].qs[j] * y[i].qs[j];
        s += fp16_to_f32_sw(x[i].d) * fp16_to_f32_sw(y[i].d) * (float)sum;
    }
    return s;
}

/* ---------------------------------------------------------------- legacy 4/5-bit
 * Element j < 16 of a block is the low nibble of qs[j], element j + 16 its high nibble. */

static void q4_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q4_0 *y = vy;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0, max = 0; /* the signed value of largest magnitude maps to -8 */
        for (int j = 0; j < QK4_0; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        float d = max / -8, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16_sw(d);
        for (int j = 0; j < 16; j++) {
            int a = imin(15, (int)(int8_t)(x[j] * id + 8.5f));
            int b = imin(15, (int)(int8_t)(x[j + 16] * id + 8.5f));
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}
static void q4_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q4_0 *x = vx;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        float d = fp16_to_f32_sw(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = d * ((x[i].qs[j] & 15) - 8);
            y[j + 16] = d * ((x[i].qs[j] >> 4) - 8);
        }
    }
}
static float q4_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK4_0; i++) {
        int sum = 0;
        for (int j = 0; j < 16; j++)
            sum += ((x[i].qs[j] & 15) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        s += fp16_to_f32_sw(x[i].d) * fp16_to_f32_sw(y[i].d) * (float)sum;
    }
    return s;
}

static void q4_1_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q4_1 *y = vy;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK4_1; j++)
            min = fminf(min, x[j]), max = fmaxf(max, x[j]);
        float d = (max - min) / 15, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16_sw(d);
        y[i].m = f32_to_fp16_sw(min);
        for (int j = 0; j < 16; j++) {
            int a = imin(15, (int)(int8_t)((x[j] - min) * id + 0.5f));
            int b = imin(15, (int)(int8_t)((x[j + 16] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)(a | (b << 4));
        }
    }
}
static void q4_1_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q4_1 *x = vx;
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        float d = fp16_to_f32_sw(x[i].d), m = fp16_to_f32_sw(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = d * (x[i].qs[j] & 15) + m;
            y[j + 16] = d * (x[i].qs[j] >> 4) + m;
        }
    }
}
/* Against Q8_0 activations: sum(d*q + m) * dy*qy = d*dy*sum(q*qy) + m*dy*sum(qy). */
static float q4_1_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q4_1 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK4_1; i++) {
        int sum = 0, ysum = 0;
        for (int j = 0; j < 16; j++) {
            sum += (x[i].qs[j] & 15) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
            ysum += y[i].qs[j] + y[i].qs[j + 16];
        }
        float dy = fp16_to_f32_sw(y[i].d);
        s += fp16_to_f32_sw(x[i].d) * dy * (float)sum + fp16_to_f32_sw(x[i].m) * dy * (float)ysum;
    }
    return s;
}

static void q5_0_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q5_0 *y = vy;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax = 0, max = 0;
        for (int j = 0; j < QK5_0; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        float d = max / -16, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16_sw(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = imin(31, (int)(int8_t)(x[j] * id + 16.5f));
            int b = imin(31, (int)(int8_t)(x[j + 16] * id + 16.5f));
            y[i].qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
            qh |= (uint32_t)((a >> 4) & 1) << j;
            qh |= (uint32_t)((b >> 4) & 1) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}
static inline int q5_get(const uint8_t *qs, uint32_t qh, int j)
{
    int lo = j < 16 ? (qs[j] & 15) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1) << 4);
}
static void q5_0_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q5_0 *x = vx;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        float d = fp16_to_f32_sw(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0; j++)
            *y++ = d * (q5_get(x[i].qs, qh, j) - 16);
    }
}
static float q5_0_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_0 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK5_0; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sum = 0;
        for (int j = 0; j < QK5_0; j++)
            sum += (q5_get(x[i].qs, qh, j) - 16) * y[i].qs[j];
        s += fp16_to_f32_sw(x[i].d) * fp16_to_f32_sw(y[i].d) * (float)sum;
    }
    return s;
}

static void q5_1_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q5_1 *y = vy;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK5_1; j++)
            min = fminf(min, x[j]), max = fmaxf(max, x[j]);
        float d = (max - min) / 31, id = d ? 1.f / d : 0.f;
        y[i].d = f32_to_fp16_sw(d);
        y[i].m = f32_to_fp16_sw(min);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = imin(31, (int)((x[j] - min) * id + 0.5f));
            int b = imin(31, (int)((x[j + 16] - min) * id + 0.5f));
            y[i].qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
            qh |= (uint32_t)((a >> 4) & 1) << j;
            qh |= (uint32_t)((b >> 4) & 1) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}
static void q5_1_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q5_1 *x = vx;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        float d = fp16_to_f32_sw(x[i].d), m = fp16_to_f32_sw(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1; j++)
            *y++ = d * q5_get(x[i].qs, qh, j) + m;
    }
}
static float q5_1_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q5_1 *x = vx;
    const struct block_q8_0 *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK5_1; i++) {
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        int sum = 0, ysum = 0;
        for (int j = 0; j < QK5_1; j++) {
            sum += q5_get(x[i].qs, qh, j) * y[i].qs[j];
            ysum += y[i].qs[j];
        }
        float dy = fp16_to_f32_sw(y[i].d);
        s += fp16_to_f32_sw(x[i].d) * dy * (float)sum + fp16_to_f32_sw(x[i].m) * dy * (float)ysum;
    }
    return s;
}

/* ---------------------------------------------------------------- Q8_K (activations) */

static void q8_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q8_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float amax = 0;
        for (int j = 0; j < QK_K; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        y[i].d = d;
        for (int j = 0; j < QK_K; j++)
            y[i].qs[j] = (int8_t)imax(-127, imin(127, nearest_int(x[j] * id)));
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int j = 0; j < 16; j++)
                s += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)s;
        }
    }
}
static void q8_K_to_float(const void *vx, float *y, int64_t n)
{
    const struct block_q8_K *x = vx;
    for (int64_t i = 0; i < n / QK_K; i++)
        for (int j = 0; j < QK_K; j++)
            *y++ = x[i].d * x[i].qs[j];
}
static float q8_K_vec_dot(int64_t n, const void *vx, const void *vy)
{
    const struct block_q8_K *x = vx, *y = vy;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sum = 0;
        for (int j = 0; j < QK_K; j++)
            sum += x[i].qs[j] * y[i].qs[j];
        s += x[i].d * y[i].d * (float)sum;
    }
    return s;
}

/* ---------------------------------------------------------------- K-quants: unpacking
 * Each unpack gives q[256] (the integer quant of element e) and, per group g = e/16, a float
 * scale dsc[g] and min dmn[g] such that x[e] = dsc[g]*q[e] - dmn[g]. */

/* Q2_K/Q3_K: element e = 128n + 32j + l sits in bits 2j..2j+1 of qs[32n + l]; scale e/16. */
static void unpack_q2_K(const struct block_q2_K *b, int8_t *q, float *dsc, float *dmn)
{
    float d = fp16_to_f32_sw(b->d), dmin = fp16_to_f32_sw(b->dmin);
    for (int e = 0; e < QK_K; e++)
        q[e] = (int8_t)((b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3);
    for (int g = 0; g < 16; g++)
        dsc[g] = d * (b->scales[g] & 15), dmn[g] = dmin * (b->scales[g] >> 4);
}

/* Q3_K: as Q2_K plus a high bit: hmask[e % 32] bit e/32; a clear bit means subtract 4. */
static void unpack_q3_K(const struct block_q3_K *b, int8_t *q, float *dsc, float *dmn)
{
    float d = fp16_to_f32_sw(b->d);
    int8_t sc[16];
    quant_q3k_scales(b->scales, sc);
    for (int e = 0; e < QK_K; e++) {
        int lo = (b->qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
        int hi = (b->hmask[e % 32] >> (e / 32)) & 1;
        q[e] = (int8_t)(lo - (hi ? 0 : 4));
    }
    for (int g = 0; g < 16; g++)
        dsc[g] = d * sc[g], dmn[g] = 0;
}

/* Q4_K: element e = 64c + 32h + l is nibble h of qs[32c + l]; 6-bit scale/min e/32. */
static void unpack_q4_K(const struct block_q4_K *b, int8_t *q, float *dsc, float *dmn)
{
    float d = fp16_to_f32_sw(b->d), dmin = fp16_to_f32_sw(b->dmin);
    for (int e = 0; e < QK_K; e++)
        q[e] = (int8_t)((b->qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) & 1))) & 15);
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        quant_scale_min_k4(s, b->scales, &sc, &m);
        dsc[2 * s] = dsc[2 * s + 1] = d * sc;
        dmn[2 * s] = dmn[2 * s + 1] = dmin * m;
    }
}

/* Q5_K: as Q4_K plus a 5th bit: qh[e % 32] bit e/32. */
static void unpack_q5_K(const struct block_q5_K *b, int8_t *q, float *dsc, float *dmn)
{
    float d = fp16_to_f32_sw(b->d), dmin = fp16_to_f32_sw(b->dmin);
    for (int e = 0; e < QK_K; e++) {
        int lo = (b->qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) & 1))) & 15;
        int hi = (b->qh[e % 32] >> (e / 32)) & 1;
        q[e] = (int8_t)(lo | (hi << 4));
    }
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        quant_scale_min_k4(s, b->scales, &sc, &m);
        dsc[2 * s] = dsc[2 * s + 1] = d * sc;
        dmn[2 * s] = dmn[2 * s + 1] = dmin * m;
    }
}

/* Q6_K: element e = 128h + 32k + l: low 4 bits are nibble (k/2) of ql[64h + 32(k%2) + l],
 * high 2 bits are bits 2k..2k+1 of qh[32h + l]; minus 32; int8 scale e/16. */
static void unpack_q6_K(const struct block_q6_K *b, int8_t *q, float *dsc, float *dmn)
{
    float d = fp16_to_f32_sw(b->d);
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, k = (e % 128) / 32, l = e % 32;
        int lo = (b->ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
        int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
        q[e] = (int8_t)((lo | (hi << 4)) - 32);
    }
    for (int g = 0; g < 16; g++)
        dsc[g] = d * b->scales[g], dmn[g] = 0;
}

typedef void (*unpack_fn)(const void *b, int8_t *q, float *dsc, float *dmn);

static void kq_to_float(unpack_fn unpack, size_t bsize, const void *vx, float *y, int64_t n)
{
    int8_t q[QK_K];
    float dsc[16], dmn[16];
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)vx + i * bsize, q, dsc, dmn);
        for (int e = 0; e < QK_K; e++)
            *y++ = dsc[e / 16] * q[e] - dmn[e / 16];
    }
}

static float kq_vec_dot(unpack_fn unpack, size_t bsize, int64_t n, const void *vx, const void *vy)
{
    const struct block_q8_K *y = vy;
    int8_t q[QK_K];
    float dsc[16], dmn[16];
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        unpack((const char *)vx + i * bsize, q, dsc, dmn);
        float bs = 0;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += q[16 * g + j] * y[i].qs[16 * g + j];
            bs += dsc[g] * (float)sum - dmn[g] * (float)y[i].bsums[g];
        }
        s += y[i].d * bs;
    }
    return s;
}

#define KQ_WRAPPERS(T)                                                                             \
    static void T##_unpack(const void *b, int8_t *q, float *dsc, float *dmn)                       \
    {                                                                                              \
        unpack_##T((const struct block_##T *)b, q, dsc, dmn);                                      \
    }                                                                                              \
    static void T##_to_float(const void *x, float *y, int64_t n)                                   \
    {                                                                                              \
        kq_to_float(T##_unpack, sizeof(struct block_##T), x, y, n);                                \
    }                                                                                              \
    static float T##_vec_dot(int64_t n, const void *x, const void *y)                              \
    {                                                                                              \
        return kq_vec_dot(T##_unpack, sizeof(struct block_##T), n, x, y);                          \
    }
KQ_WRAPPERS(q2_K)
KQ_WRAPPERS(q3_K)
KQ_WRAPPERS(q4_K)
KQ_WRAPPERS(q5_K)
KQ_WRAPPERS(q6_K)

/* ---------------------------------------------------------------- K-quants: quantizers
 * Same approach as GGML's reference quantizers: fit each 16/32-element group with a
 * (weighted) least-squares scale (and min), then quantize the group scales themselves to 4/6 bits
 * and re-quantize the elements with the scales as they will be decoded. */

/* Symmetric fit of x to scale*l, l in [-nmax, nmax-1], weights x^2 (or w). The extreme value maps
 * to -nmax (the side with one more level); then a few nearby scales are tried. L gets l + nmax. */
static float fit_sym(int n, int nmax, const float *x, const float *w, int8_t *L)
{
    float amax = 0, max = 0;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0;
    }
    float best_scale = 0, best = -1;
    for (int is = -9; is <= 9; is++) {
        float iscale = -(nmax + 0.1f * is) / max;
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
            float wi = w ? w[i] : x[i] * x[i];
            sumlx += wi * x[i] * l;
            suml2 += wi * (float)(l * l);
        }
        /* error = sum w x^2 - sumlx^2/suml2: maximize sumlx^2/suml2 */
        if (suml2 > 0 && (best < 0 || sumlx * sumlx > best * suml2)) {
            best = sumlx * sumlx / suml2;
            best_scale = sumlx / suml2;
            for (int i = 0; i < n; i++)
                L[i] = (int8_t)(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
        }
    }
    return best_scale;
}

/* Asymmetric fit x ~ scale*l - min, l in [0, nmax], min >= 0 (only ever subtracts). Tries a grid
 * of scales and solves the weighted least squares for (scale, min) on each assignment. */
static float fit_asym(int n, int nmax, const float *x, const float *w, uint8_t *L, float *the_min,
                      float rmin, float rdelta, int nstep, bool use_mad)
{
    float min = x[0], max = x[0], sum_w = 0, sum_x = 0;
    for (int i = 0; i < n; i++) {
        min = fminf(min, x[i]), max = fmaxf(max, x[i]);
        sum_w += w[i], sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *the_min = -min;
        return 0;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_err = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
        float diff = scale * L[i] + min - x[i];
        best_err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    uint8_t Laux[32];
    for (int is = 0; is <= nstep; is++) {
        float isc = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = imax(0, imin(nmax, nearest_int(isc * (x[i] - min))));
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l, sum_l2 += w[i] * (float)(l * l), sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D <= 0) continue;
        float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        if (this_min > 0) this_min = 0, this_scale = sum_xl / sum_l2;
        float err = 0;
        for (int i = 0; i < n; i++) {
            float diff = this_scale * Laux[i] + this_min - x[i];
            err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
        }
        if (err < best_err) {
            memcpy(L, Laux, (size_t)n);
            best_err = err, scale = this_scale, min = this_min;
        }
    }
    *the_min = -min;
    return scale;
}

static void q2_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q2_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        float w[16], scales[16], mins[16], max_scale = 0, max_min = 0;
        for (int g = 0; g < 16; g++) {
            for (int l = 0; l < 16; l++)
                w[l] = fabsf(x[16 * g + l]);
            scales[g] = fit_asym(16, 3, x + 16 * g, w, L + 16 * g, &mins[g], -0.5f, 0.1f, 15, true);
            max_scale = fmaxf(max_scale, scales[g]), max_min = fmaxf(max_min, mins[g]);
        }
        memset(y[i].scales, 0, 16);
        y[i].d = f32_to_fp16_sw(max_scale > 0 ? max_scale / 15 : 0);
        y[i].dmin = f32_to_fp16_sw(max_min > 0 ? max_min / 15 : 0);
        for (int g = 0; g < 16; g++) {
            int ls = max_scale > 0 ? imin(15, nearest_int(15 / max_scale * scales[g])) : 0;
            int lm = max_min > 0 ? imin(15, nearest_int(15 / max_min * mins[g])) : 0;
            y[i].scales[g] = (uint8_t)(ls | (lm << 4));
        }
        float d = fp16_to_f32_sw(y[i].d), dmin = fp16_to_f32_sw(y[i].dmin);
        for (int g = 0; g < 16; g++) {
            float dl = d * (y[i].scales[g] & 15), ml = dmin * (y[i].scales[g] >> 4);
            if (!dl) continue;
            for (int l = 0; l < 16; l++)
                L[16 * g + l] = (uint8_t)imax(0, imin(3, nearest_int((x[16 * g + l] + ml) / dl)));
        }
        for (int c = 0; c < QK_K; c += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[c / 4 + l] = (uint8_t)(L[c + l] | (L[c + l + 32] << 2) |
                                               (L[c + l + 64] << 4) | (L[c + l + 96] << 6));
    }
}

static void q3_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q3_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0, amax = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_sym(16, 4, x + 16 * g, NULL, L + 16 * g);
            if (fabsf(scales[g]) > amax) amax = fabsf(scales[g]), max_scale = scales[g];
        }
        memset(y[i].scales, 0, 12);
        if (max_scale) {
            float iscale = -32.f / max_scale;
            for (int g = 0; g < 16; g++) {
                int l = imax(-32, imin(31, nearest_int(iscale * scales[g]))) + 32;
                if (g < 8)
                    y[i].scales[g] = (uint8_t)(l & 15);
                else
                    y[i].scales[g - 8] |= (uint8_t)((l & 15) << 4);
                y[i].scales[8 + g % 4] |= (uint8_t)((l >> 4) << (2 * (g / 4)));
            }
            y[i].d = f32_to_fp16_sw(1 / iscale);
        } else {
            y[i].d = 0;
        }
        int8_t sc[16];
        quant_q3k_scales(y[i].scales, sc);
        float d = fp16_to_f32_sw(y[i].d);
        for (int g = 0; g < 16; g++) {
            float dl = d * sc[g];
            for (int l = 0; l < 16; l++)
                L[16 * g + l] =
                    (int8_t)(dl ? imax(-4, imin(3, nearest_int(x[16 * g + l] / dl))) + 4 : 4);
        }
        memset(y[i].hmask, 0, 32);
        for (int e = 0; e < QK_K; e++)
            if (L[e] > 3) y[i].hmask[e % 32] |= (uint8_t)(1 << (e / 32)), L[e] -= 4;
        for (int c = 0; c < QK_K; c += 128)
            for (int l = 0; l < 32; l++)
                y[i].qs[c / 4 + l] = (uint8_t)(L[c + l] | (L[c + l + 32] << 2) |
                                               (L[c + l + 64] << 4) | (L[c + l + 96] << 6));
    }
}

/* Q4_K / Q5_K share the 8 x (6-bit scale, 6-bit min) packing. */
static void pack_scales_k4(uint8_t *s, const float *scales, const float *mins, uint16_t *d16,
                           uint16_t *dmin16)
{
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++)
        max_scale = fmaxf(max_scale, scales[j]), max_min = fmaxf(max_min, mins[j]);
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0,
          inv_min = max_min > 0 ? 63.f / max_min : 0;
    memset(s, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        int ls = imin(63, nearest_int(inv_scale * scales[j]));
        int lm = imin(63, nearest_int(inv_min * mins[j]));
        if (j < 4) {
            s[j] = (uint8_t)ls;
            s[j + 4] = (uint8_t)lm;
        } else {
            s[j + 4] = (uint8_t)((ls & 15) | ((lm & 15) << 4));
            s[j - 4] |= (uint8_t)((ls >> 4) << 6);
            s[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d16 = f32_to_fp16_sw(max_scale / 63.f);
    *dmin16 = f32_to_fp16_sw(max_min / 63.f);
}

/* Re-quantizes the elements with the scales/mins as they will be decoded. */
static void kq45_requant(const float *x, int nmax, uint8_t *L, const uint8_t *packed, uint16_t d16,
                         uint16_t dmin16)
{
    float d = fp16_to_f32_sw(d16), dmin = fp16_to_f32_sw(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        quant_scale_min_k4(j, packed, &sc, &m);
        float dl = d * sc, ml = dmin * m;
        if (!dl) continue;
        for (int l = 0; l < 32; l++)
            L[32 * j + l] = (uint8_t)imax(0, imin(nmax, nearest_int((x[32 * j + l] + ml) / dl)));
    }
}

static void kq45_group_fit(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                           float *scales, float *mins)
{
    float w[32];
    for (int j = 0; j < 8; j++) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += x[32 * j + l] * x[32 * j + l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(x[32 * j + l]);
        scales[j] =
            fit_asym(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    }
}

static void q4_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q4_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        float scales[8], mins[8];
        kq45_group_fit(x, 15, -1.f, 20, L, scales, mins);
        pack_scales_k4(y[i].scales, scales, mins, &y[i].d, &y[i].dmin);
        kq45_requant(x, 15, L, y[i].scales, y[i].d, y[i].dmin);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
    }
}

static void q5_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q5_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t L[QK_K];
        float scales[8], mins[8];
        kq45_group_fit(x, 31, -0.5f, 15, L, scales, mins);
        pack_scales_k4(y[i].scales, scales, mins, &y[i].d, &y[i].dmin);
        kq45_requant(x, 31, L, y[i].scales, y[i].d, y[i].dmin);
        memset(y[i].qh, 0, 32);
        for (int e = 0; e < QK_K; e++)
            if (L[e] > 15) y[i].qh[e % 32] |= (uint8_t)(1 << (e / 32));
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * c + l] =
                    (uint8_t)((L[64 * c + l] & 15) | ((L[64 * c + 32 + l] & 15) << 4));
    }
}

static void q6_K_from_float(const float *x, void *vy, int64_t n)
{
    struct block_q6_K *y = vy;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        int8_t L[QK_K];
        float scales[16], max_scale = 0, amax = 0;
        for (int g = 0; g < 16; g++) {
            scales[g] = fit_sym(16, 32, x + 16 * g, NULL, L + 16 * g);
            if (fabsf(scales[g]) > amax) amax = fabsf(scales[g]), max_scale = scales[g];
        }
        memset(y + i, 0, sizeof *y);
        if (amax < 1e-15f) continue;
        float iscale = -128.f / max_scale;
        y[i].d = f32_to_fp16_sw(1 / iscale);
        for (int g = 0; g < 16; g++)
            y[i].scales[g] = (int8_t)imin(127, nearest_int(iscale * scales[g]));
        float d = fp16_to_f32_sw(y[i].d);
        for (int g = 0; g < 16; g++) {
            float dl = d * y[i].scales[g];
            for (int l = 0; l < 16; l++)
                L[16 * g + l] =
                    (int8_t)(dl ? imax(-32, imin(31, nearest_int(x[16 * g + l] / dl))) + 32 : 32);
        }
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, k = (e % 128) / 32, l = e % 32;
            y[i].ql[64 * h + 32 * (k % 2) + l] |= (uint8_t)((L[e] & 15) << (4 * (k / 2)));
            y[i].qh[32 * h + l] |= (uint8_t)((L[e] >> 4) << (2 * k));
        }
    }
}

/* ---------------------------------------------------------------- the table */

#define REF(to, from, dot)                                                                         \
    .to_float = to, .to_float_ref = to, .from_float = from, .from_float_ref = from,                \
    .vec_dot = dot, .vec_dot_ref = dot

static struct quant_traits g_traits[GGML_TYPE_COUNT] = {
    [GGML_TYPE_F32] = {.name = "f32",
                       .blck_size = 1,
                       .type_size = 4,
                       .is_quantized = false,
                       .vec_dot_type = GGML_TYPE_F32,
                       REF(f32_to_float, f32_from_float, f32_vec_dot)},
    [GGML_TYPE_F16] = {.name = "f16",
                       .blck_size = 1,
                       .type_size = 2,
                       .is_quantized = false,
                       .vec_dot_type = GGML_TYPE_F16,
                       REF(f16_to_float, f16_from_float, f16_vec_dot)},
    [GGML_TYPE_BF16] = {.name = "bf16",
                        .blck_size = 1,
                        .type_size = 2,
                        .is_quantized = false,
                        .vec_dot_type = GGML_TYPE_F32,
                        REF(bf16_to_float, bf16_from_float, bf16_vec_dot)},
    [GGML_TYPE_Q4_0] = {.name = "q4_0",
                        .blck_size = QK4_0,
                        .type_size = sizeof(struct block_q4_0),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(q4_0_to_float, q4_0_from_float, q4_0_vec_dot)},
    [GGML_TYPE_Q4_1] = {.name = "q4_1",
                        .blck_size = QK4_1,
                        .type_size = sizeof(struct block_q4_1),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(q4_1_to_float, q4_1_from_float, q4_1_vec_dot)},
    [GGML_TYPE_Q5_0] = {.name = "q5_0",
                        .blck_size = QK5_0,
                        .type_size = sizeof(struct block_q5_0),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(q5_0_to_float, q5_0_from_float, q5_0_vec_dot)},
    [GGML_TYPE_Q5_1] = {.name = "q5_1",
                        .blck_size = QK5_1,
                        .type_size = sizeof(struct block_q5_1),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(q5_1_to_float, q5_1_from_float, q5_1_vec_dot)},
    [GGML_TYPE_Q8_0] = {.name = "q8_0",
                        .blck_size = QK8_0,
                        .type_size = sizeof(struct block_q8_0),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(q8_0_to_float, q8_0_from_float, q8_0_vec_dot)},
    [GGML_TYPE_Q2_K] = {.name = "q2_K",
                        .blck_size = QK_K,
                        .type_size = sizeof(struct block_q2_K),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_K,
                        REF(q2_K_to_float, q2_K_from_float, q2_K_vec_dot)},
    [GGML_TYPE_Q3_K] = {.name = "q3_K",
                        .blck_size = QK_K,
                        .type_size = sizeof(struct block_q3_K),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_K,
                        REF(q3_K_to_float, q3_K_from_float, q3_K_vec_dot)},
    [GGML_TYPE_Q4_K] = {.name = "q4_K",
                        .blck_size = QK_K,
                        .type_size = sizeof(struct block_q4_K),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_K,
                        REF(q4_K_to_float, q4_K_from_float, q4_K_vec_dot)},
    [GGML_TYPE_Q5_K] = {.name = "q5_K",
                        .blck_size = QK_K,
                        .type_size = sizeof(struct block_q5_K),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_K,
                        REF(q5_K_to_float, q5_K_from_float, q5_K_vec_dot)},
    [GGML_TYPE_Q6_K] = {.name = "q6_K",
                        .blck_size = QK_K,
                        .type_size = sizeof(struct block_q6_K),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_K,
                        REF(q6_K_to_float, q6_K_from_float, q6_K_vec_dot)},
    [GGML_TYPE_Q8_K] = {.name = "q8_K",
                        .blck_size = QK_K,
                        .type_size = sizeof(struct block_q8_K),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_K,
                        REF(q8_K_to_float, q8_K_from_float, q8_K_vec_dot)},
    /* low-bit types: references in quant_ternary.c */
    [GGML_TYPE_TQ1_0] = {.name = "tq1_0",
                         .blck_size = QK_K,
                         .type_size = sizeof(struct block_tq1_0),
                         .is_quantized = true,
                         .vec_dot_type = GGML_TYPE_Q8_K,
                         REF(quant_tq1_0_to_float, quant_tq1_0_from_float, quant_tq1_0_vec_dot)},
    [GGML_TYPE_TQ2_0] = {.name = "tq2_0",
                         .blck_size = QK_K,
                         .type_size = sizeof(struct block_tq2_0),
                         .is_quantized = true,
                         .vec_dot_type = GGML_TYPE_Q8_K,
                         REF(quant_tq2_0_to_float, quant_tq2_0_from_float, quant_tq2_0_vec_dot)},
    [GGML_TYPE_Q1_0] = {.name = "q1_0",
                        .blck_size = QK1_0,
                        .type_size = sizeof(struct block_q1_0),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(quant_q1_0_to_float, quant_q1_0_from_float, quant_q1_0_vec_dot)},
    [GGML_TYPE_Q2_0] = {.name = "q2_0",
                        .blck_size = QK2_0,
                        .type_size = sizeof(struct block_q2_0),
                        .is_quantized = true,
                        .vec_dot_type = GGML_TYPE_Q8_0,
                        REF(quant_q2_0_to_float, quant_q2_0_from_float, quant_q2_0_vec_dot)},
};

static const char *g_isa = "scalar";
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void quant_init_once(void)
{
#if defined(__x86_64__)
    const struct cpu_features *c = cpu_features();
    if (cpu_has_avx2_fma() && c->f16c && c->bmi2) {
        quant_register_avx2(g_traits);
        quant_register_ternary_avx2(g_traits);
        g_isa = "avx2";
        if (cpu_has_avx512_vnni()) {
            quant_register_avx512(g_traits);
            g_isa = "avx512-vnni";
        }
    }
#elif defined(__aarch64__)
    quant_register_neon(g_traits);
    g_isa = "neon";
#endif
}

void quant_init(void)
{
    pthread_once(&g_once, quant_init_once);
}

const struct quant_traits *quant_traits(enum ggml_type t)
{
    quant_init();
    if ((unsigned)t >= GGML_TYPE_COUNT || !g_traits[t].name) return NULL;
    return &g_traits[t];
}

bool quant_type_valid(uint32_t t)
{
    return t < GGML_TYPE_COUNT && g_traits[t].name && g_traits[t].vec_dot_ref;
}

size_t quant_row_size(enum ggml_type t, int64_t n)
{
    if ((unsigned)t >= GGML_TYPE_COUNT || !g_traits[t].name || n < 0) return 0;
    const struct quant_traits *tr = &g_traits[t];
    if (n % tr->blck_size) return 0;
    return (size_t)(n / tr->blck_size) * tr->type_size;
}

const char *quant_isa(void)
{
    quant_init();
    return g_isa;
}
