/* Kernel sweep over the whole traits table: quantize random data, compare the selected (SIMD)
 * kernels against the scalar reference and both against a double-precision dot; round-trip
 * error bounds per type; and known-layout decoders written loop-by-loop in GGML's element
 * order, so a self-consistent but GGML-incompatible layout would fail. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/quant_blocks.h"

#include "../common/rnd.h"

/* relative RMS of the round trip, per type (measured values are well below; a wrong layout or
 * quantizer is far above) */
static double roundtrip_bound(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_F32:
        return 0;
    case GGML_TYPE_F16:
        return 4e-4;
    case GGML_TYPE_BF16:
        return 3e-3;
    case GGML_TYPE_Q8_0:
        return 0.012;
    case GGML_TYPE_Q8_K:
        return 0.025;
    case GGML_TYPE_Q4_0:
        return 0.16;
    case GGML_TYPE_Q4_1:
        return 0.14;
    case GGML_TYPE_Q5_0:
        return 0.09;
    case GGML_TYPE_Q5_1:
        return 0.06;
    case GGML_TYPE_Q2_K:
        return 0.50;
    case GGML_TYPE_Q3_K:
        return 0.25;
    case GGML_TYPE_Q4_K:
        return 0.12;
    case GGML_TYPE_Q5_K:
        return 0.06;
    case GGML_TYPE_Q6_K:
        return 0.032;
    /* the low-bit types are made for weights trained to be ternary / binary: on these normal-ish
     * rows with outliers they are barely better than zero (measured 0.95 / 0.88 / 0.77 worst);
     * test_ternary.c checks them exactly on data of their own kind */
    case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0:
        return 1.0;
    case GGML_TYPE_Q2_0:
        return 0.95;
    case GGML_TYPE_Q1_0:
        return 0.82;
    default:
        return 0;
    }
}


Test(quant, table_is_consistent)
{
    int n = 0;
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *tr = quant_traits((enum ggml_type)t);
        if (!tr) {
            cr_assert(!quant_type_valid((uint32_t)t));
            continue;
        }
        n++;
        cr_assert(quant_type_valid((uint32_t)t), "%s", tr->name);
        cr_assert(tr->to_float && tr->to_float_ref && tr->from_float && tr->from_float_ref, "%s",
                  tr->name);
        cr_assert(tr->vec_dot && tr->vec_dot_ref, "%s", tr->name);
        const struct quant_traits *vt = quant_traits(tr->vec_dot_type);
        cr_assert(vt && vt->from_float, "%s", tr->name);
        cr_assert_eq(tr->blck_size % vt->blck_size, 0, "%s", tr->name);
        cr_assert_eq(quant_row_size((enum ggml_type)t, tr->blck_size * 3), tr->type_size * 3);
        if (tr->blck_size > 1)
            cr_assert_eq(quant_row_size((enum ggml_type)t, tr->blck_size + 1), 0);
    }
    cr_assert_eq(n, 18); /* f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q2_K..q6_K q8_K tq1_0 tq2_0 q1_0 q2_0 */
    cr_assert_eq(quant_traits(GGML_TYPE_Q8_1), NULL);
    cr_assert(!quant_type_valid(999));
    cr_assert_eq(quant_traits(GGML_TYPE_Q4_K)->type_size, 144);
    cr_assert_eq(quant_traits(GGML_TYPE_Q6_K)->type_size, 210);
    cr_assert_eq(quant_traits(GGML_TYPE_Q8_0)->type_size, 34);
}

/* One sweep for one type and one length. */
static void sweep(enum ggml_type t, int64_t n)
{
    const struct quant_traits *tr = quant_traits(t), *vt = quant_traits(tr->vec_dot_type);
    size_t xs = quant_row_size(t, n), ys = quant_row_size(tr->vec_dot_type, n);
    cr_assert(xs > 0 && ys > 0);
    float *x = malloc(n * 4), *y = malloc(n * 4), *xr = malloc(n * 4), *xr2 = malloc(n * 4),
          *yr = malloc(n * 4);
    uint8_t *xq = malloc(xs), *xq2 = malloc(xs), *yq = malloc(ys), *yq2 = malloc(ys);
    fill(x, n);
    fill(y, n);

    /* round trip with the reference quantizer */
    tr->from_float_ref(x, xq, n);
    tr->to_float_ref(xq, xr, n);
    double e2 = 0, x2 = 0;
    for (int64_t i = 0; i < n; i++)
        e2 += (double)(xr[i] - x[i]) * (xr[i] - x[i]), x2 += (double)x[i] * x[i];
    double rel = sqrt(e2 / x2);
    cr_assert(rel <= roundtrip_bound(t), "%s n=%ld: round-trip rel rms %g > %g", tr->name, (long)n,
              rel, roundtrip_bound(t));

    /* fast to_float is bit-identical to the reference */
    tr->to_float(xq, xr2, n);
    cr_assert(memcmp(xr, xr2, n * 4) == 0, "%s: to_float differs from reference", tr->name);

    /* fast from_float: a valid quantization of the same quality, nearly always identical bytes */
    tr->from_float(x, xq2, n);
    tr->to_float_ref(xq2, xr2, n);
    double e2b = 0;
    for (int64_t i = 0; i < n; i++)
        e2b += (double)(xr2[i] - x[i]) * (xr2[i] - x[i]);
    cr_assert(sqrt(e2b / x2) <= roundtrip_bound(t), "%s: fast quantizer error %g", tr->name,
              sqrt(e2b / x2));
    size_t same = 0;
    for (size_t i = 0; i < xs; i++)
        same += xq[i] == xq2[i];
    cr_assert(same >= xs * 99 / 100, "%s: fast quantizer bytes differ (%zu of %zu same)", tr->name,
              same, xs);

    /* activations in vec_dot_type, with reference and fast quantizer */
    vt->from_float_ref(y, yq, n);
    vt->from_float(y, yq2, n);
    vt->to_float_ref(yq, yr, n);

    double dd = 0, mag = 0, exact = 0;
    for (int64_t i = 0; i < n; i++) {
        dd += (double)xr[i] * yr[i];
        mag += fabs((double)xr[i] * yr[i]);
        exact += (double)x[i] * y[i];
    }
    float dref = tr->vec_dot_ref(n, xq, yq);
    float dfast = tr->vec_dot(n, xq, yq);
    double tol = 2e-5 * mag + 1e-6;
    cr_assert(fabs(dref - dd) <= tol, "%s n=%ld: ref dot %g vs double %g (tol %g)", tr->name,
              (long)n, dref, dd, tol);
    cr_assert(fabs(dfast - dd) <= tol, "%s n=%ld: fast dot %g vs double %g (tol %g)", tr->name,
              (long)n, dfast, dd, tol);
    /* and the quantized dot is near the float dot: by Cauchy-Schwarz the error is at most
     * (rx + ry + rx*ry) * |x| * |y| with rx, ry the relative round-trip errors */
    double ynorm = 0;
    for (int64_t i = 0; i < n; i++)
        ynorm += (double)y[i] * y[i];
    double rx = roundtrip_bound(t), ry = roundtrip_bound(tr->vec_dot_type);
    double qbound = 1.5 * (rx + ry + rx * ry) * sqrt(x2) * sqrt(ynorm);
    cr_assert(fabs(dd - exact) <= qbound + 1e-6, "%s: quantized dot %g far from float dot %g",
              tr->name, dd, exact);
    /* fast-quantized activations give the same dot within quantization noise */
    float dfast2 = tr->vec_dot(n, xq, yq2);
    cr_assert(fabs(dfast2 - dd) <= qbound + tol, "%s: dot with fast-quantized y %g vs %g", tr->name,
              dfast2, dd);

    free(x), free(y), free(xr), free(xr2), free(yr), free(xq), free(xq2), free(yq), free(yq2);
}

Test(quant, sweep_all_types_odd_lengths)
{
    rng_state = 12345;
    static const int nblocks[] = {1, 3, 7, 13};
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *tr = quant_traits((enum ggml_type)t);
        if (!tr) continue;
        int64_t vb = quant_traits(tr->vec_dot_type)->blck_size;
        int64_t b = tr->blck_size > vb ? tr->blck_size : vb;
        for (int k = 0; k < 4; k++) {
            int64_t n =
                b == 1 ? 8 * nblocks[k] * 8 + nblocks[k] : b * nblocks[k]; /* float types: odd n */
            for (int rep = 0; rep < 3; rep++)
                sweep((enum ggml_type)t, n);
        }
    }
}

Test(quant, zero_and_constant_blocks)
{
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *tr = quant_traits((enum ggml_type)t);
        if (!tr) continue;
        int64_t n = 512;
        float x[512], xr[512];
        uint8_t q[2048];
        memset(x, 0, sizeof x);
        tr->from_float_ref(x, q, n);
        tr->to_float_ref(q, xr, n);
        for (int i = 0; i < n; i++)
            cr_assert_eq(xr[i], 0.0f, "%s: zero not preserved", tr->name);
        tr->from_float(x, q, n);
        tr->to_float(q, xr, n);
        for (int i = 0; i < n; i++)
            cr_assert_eq(xr[i], 0.0f, "%s: zero not preserved (fast)", tr->name);
        for (int i = 0; i < n; i++)
            x[i] = -0.75f;
        tr->from_float_ref(x, q, n);
        tr->to_float_ref(q, xr, n);
        for (int i = 0; i < n; i++)
            cr_assert(fabsf(xr[i] + 0.75f) < 0.02f, "%s: constant %g", tr->name, xr[i]);
    }
}

Test(quant, fp16_exhaustive_and_rounding)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_f32_sw((uint16_t)h);
        if (isnan(f)) {
            cr_assert(isnan(fp16_to_f32_sw(f32_to_fp16_sw(f))));
            continue;
        }
        cr_assert_eq(f32_to_fp16_sw(f), h, "half %04x -> %g -> %04x", h, f, f32_to_fp16_sw(f));
    }
    /* ties to even, overflow, subnormals */
    cr_assert_eq(f32_to_fp16_sw(1.0f + 0x1p-11f), 0x3c00);
    cr_assert_eq(f32_to_fp16_sw(1.0f + 3 * 0x1p-11f), 0x3c02);
    cr_assert_eq(f32_to_fp16_sw(65504.f), 0x7bff);
    cr_assert_eq(f32_to_fp16_sw(65519.f), 0x7bff);
    cr_assert_eq(f32_to_fp16_sw(65520.f), 0x7c00);
    cr_assert_eq(f32_to_fp16_sw(0x1p-24f), 0x0001);
    cr_assert_eq(f32_to_fp16_sw(0x1p-25f), 0x0000);
    cr_assert_eq(f32_to_fp16_sw(0x1.8p-25f), 0x0001);
    cr_assert_eq(f32_to_fp16_sw(-2.0f), 0xc000);
    /* the (possibly F16C) fast F16 quantizer agrees with the software one on random floats */
    const struct quant_traits *tr = quant_traits(GGML_TYPE_F16);
    rng_state = 7;
    float x[1000];
    uint16_t a[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = ldexpf(rnd_unit() - 0.5f, (int)(rnd() % 50) - 30);
    tr->from_float(x, a, 1000);
    for (int i = 0; i < 1000; i++)
        cr_assert_eq(a[i], f32_to_fp16_sw(x[i]), "%a", x[i]);
    /* bf16 */
    cr_assert_eq(f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(f32_to_bf16(fp16_bits_f32(0x3f808000)), 0x3f80); /* tie -> even */
    cr_assert_eq(f32_to_bf16(fp16_bits_f32(0x3f818000)), 0x3f82);
    cr_assert_eq(f32_to_bf16(fp16_bits_f32(0x3f808001)), 0x3f81);
    cr_assert(isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

/* ---- GGML element order, decoded independently (loop structure of GGML's dequantizers) ---- */

static void ggml_order_q4_K(const struct block_q4_K *b, float *y)
{
    const uint8_t *q = b->qs;
    float d = fp16_to_f32_sw(b->d), mn = fp16_to_f32_sw(b->dmin);
    int is = 0;
    for (int j = 0; j < QK_K; j += 64, q += 32, is += 2) {
        uint8_t sc, m;
        quant_scale_min_k4(is, b->scales, &sc, &m);
        float d1 = d * sc, m1 = mn * m;
        quant_scale_min_k4(is + 1, b->scales, &sc, &m);
        float d2 = d * sc, m2 = mn * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * (q[l] & 15) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * (q[l] >> 4) - m2;
    }
}

static void ggml_order_q5_K(const struct block_q5_K *b, float *y)
{
    const uint8_t *ql = b->qs, *qh = b->qh;
    float d = fp16_to_f32_sw(b->d), mn = fp16_to_f32_sw(b->dmin);
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64, ql += 32, is += 2, u1 <<= 2, u2 <<= 2) {
        uint8_t sc, m;
        quant_scale_min_k4(is, b->scales, &sc, &m);
        float d1 = d * sc, m1 = mn * m;
        quant_scale_min_k4(is + 1, b->scales, &sc, &m);
        float d2 = d * sc, m2 = mn * m;
        for (int l = 0; l < 32; l++)
            *y++ = d1 * ((ql[l] & 15) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++)
            *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
    }
}

static void ggml_order_q6_K(const struct block_q6_K *b, float *y)
{
    const uint8_t *ql = b->ql, *qh = b->qh;
    const int8_t *sc = b->scales;
    float d = fp16_to_f32_sw(b->d);
    for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * sc[is] * q1;
            y[l + 32] = d * sc[is + 2] * q2;
            y[l + 64] = d * sc[is + 4] * q3;
            y[l + 96] = d * sc[is + 6] * q4;
        }
    }
}

static void ggml_order_q2_K(const struct block_q2_K *b, float *y)
{
    const uint8_t *q = b->qs;
    float d = fp16_to_f32_sw(b->d), mn = fp16_to_f32_sw(b->dmin);
    int is = 0;
    for (int n = 0; n < QK_K; n += 128, q += 32) {
        for (int j = 0, shift = 0; j < 4; j++, shift += 2) {
            uint8_t sc = b->scales[is++];
            for (int l = 0; l < 16; l++)
                *y++ = d * (sc & 15) * ((q[l] >> shift) & 3) - mn * (sc >> 4);
            sc = b->scales[is++];
            for (int l = 0; l < 16; l++)
                *y++ = d * (sc & 15) * ((q[l + 16] >> shift) & 3) - mn * (sc >> 4);
        }
    }
}

static void ggml_order_q3_K(const struct block_q3_K *b, float *y)
{
    const uint8_t *q = b->qs, *hm = b->hmask;
    float d = fp16_to_f32_sw(b->d);
    int8_t sc[16];
    quant_q3k_scales(b->scales, sc);
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < QK_K; n += 128, q += 32) {
        for (int j = 0, shift = 0; j < 4; j++, shift += 2, m <<= 1) {
            float dl = d * sc[is++];
            for (int l = 0; l < 16; l++)
                *y++ = dl * (((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            dl = d * sc[is++];
            for (int l = 0; l < 16; l++)
                *y++ = dl * (((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
        }
    }
}

static void random_block(void *b, size_t size, size_t d_off, size_t dmin_off)
{
    uint8_t *p = b;
    for (size_t i = 0; i < size; i++)
        p[i] = (uint8_t)rnd();
    uint16_t d = f32_to_fp16_sw(0.01f + rnd_unit() * 0.1f), dm = f32_to_fp16_sw(rnd_unit() * 0.05f);
    memcpy(p + d_off, &d, 2);
    if (dmin_off != (size_t)-1) memcpy(p + dmin_off, &dm, 2);
}

Test(quant, kquant_layout_matches_ggml_element_order)
{
    rng_state = 99;
    float a[QK_K], b[QK_K];
    for (int rep = 0; rep < 50; rep++) {
        struct block_q4_K q4;
        random_block(&q4, sizeof q4, offsetof(struct block_q4_K, d),
                     offsetof(struct block_q4_K, dmin));
        quant_traits(GGML_TYPE_Q4_K)->to_float_ref(&q4, a, QK_K);
        ggml_order_q4_K(&q4, b);
        for (int i = 0; i < QK_K; i++)
            cr_assert_float_eq(a[i], b[i], 1e-6f * (1 + fabsf(b[i])), "q4_K %d", i);

        struct block_q5_K q5;
        random_block(&q5, sizeof q5, offsetof(struct block_q5_K, d),
                     offsetof(struct block_q5_K, dmin));
        quant_traits(GGML_TYPE_Q5_K)->to_float_ref(&q5, a, QK_K);
        ggml_order_q5_K(&q5, b);
        for (int i = 0; i < QK_K; i++)
            cr_assert_float_eq(a[i], b[i], 1e-6f * (1 + fabsf(b[i])), "q5_K %d", i);

        struct block_q6_K q6;
        random_block(&q6, sizeof q6, offsetof(struct block_q6_K, d), (size_t)-1);
        quant_traits(GGML_TYPE_Q6_K)->to_float_ref(&q6, a, QK_K);
        ggml_order_q6_K(&q6, b);
        for (int i = 0; i < QK_K; i++)
            cr_assert_float_eq(a[i], b[i], 1e-6f * (1 + fabsf(b[i])), "q6_K %d", i);

        struct block_q2_K q2;
        random_block(&q2, sizeof q2, offsetof(struct block_q2_K, d),
                     offsetof(struct block_q2_K, dmin));
        quant_traits(GGML_TYPE_Q2_K)->to_float_ref(&q2, a, QK_K);
        ggml_order_q2_K(&q2, b);
        for (int i = 0; i < QK_K; i++)
            cr_assert_float_eq(a[i], b[i], 1e-6f * (1 + fabsf(b[i])), "q2_K %d", i);

        struct block_q3_K q3;
        random_block(&q3, sizeof q3, offsetof(struct block_q3_K, d), (size_t)-1);
        quant_traits(GGML_TYPE_Q3_K)->to_float_ref(&q3, a, QK_K);
        ggml_order_q3_K(&q3, b);
        for (int i = 0; i < QK_K; i++)
            cr_assert_float_eq(a[i], b[i], 1e-6f * (1 + fabsf(b[i])), "q3_K %d", i);

        /* and the fast dots agree with the reference on these arbitrary (not quantizer-made) blocks
         */
        float y[QK_K];
        struct block_q8_K yq;
        for (int i = 0; i < QK_K; i++)
            y[i] = rnd_normal();
        quant_traits(GGML_TYPE_Q8_K)->from_float_ref(y, &yq, QK_K);
        static const enum ggml_type kt[] = {GGML_TYPE_Q2_K, GGML_TYPE_Q3_K, GGML_TYPE_Q4_K,
                                            GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
        const void *blocks[] = {&q2, &q3, &q4, &q5, &q6};
        for (int k = 0; k < 5; k++) {
            const struct quant_traits *tr = quant_traits(kt[k]);
            float r = tr->vec_dot_ref(QK_K, blocks[k], &yq), f = tr->vec_dot(QK_K, blocks[k], &yq);
            cr_assert(fabsf(r - f) <= 1e-4f * (1 + fabsf(r)), "%s: fast %g ref %g", tr->name, f, r);
        }
    }
}

Test(quant, legacy_layout_known_values)
{
    /* Q4_0: element j < 16 is the low nibble of qs[j], j + 16 the high nibble; value (q - 8) * d */
    struct block_q4_0 b4 = {.d = f32_to_fp16_sw(0.5f)};
    for (int j = 0; j < 16; j++)
        b4.qs[j] = (uint8_t)(j | ((15 - j) << 4));
    float y[32];
    quant_traits(GGML_TYPE_Q4_0)->to_float(&b4, y, 32);
    for (int j = 0; j < 16; j++) {
        cr_assert_eq(y[j], (j - 8) * 0.5f);
        cr_assert_eq(y[j + 16], (7 - j) * 0.5f);
    }
    /* Q5_0: fifth bit of element j is bit j of qh (little-endian u32) */
    struct block_q5_0 b5 = {.d = f32_to_fp16_sw(1.0f), .qh = {0x01, 0x00, 0x01, 0x80}};
    memset(b5.qs, 0, sizeof b5.qs);
    quant_traits(GGML_TYPE_Q5_0)->to_float(&b5, y, 32);
    for (int j = 0; j < 32; j++) {
        int hi = j == 0 || j == 16 || j == 31;
        cr_assert_eq(y[j], hi ? 0.0f : -16.0f, "q5_0 element %d = %g", j, y[j]);
    }
    /* Q8_0 */
    struct block_q8_0 b8 = {.d = f32_to_fp16_sw(0.25f)};
    for (int j = 0; j < 32; j++)
        b8.qs[j] = (int8_t)(j - 16);
    quant_traits(GGML_TYPE_Q8_0)->to_float(&b8, y, 32);
    for (int j = 0; j < 32; j++)
        cr_assert_eq(y[j], (j - 16) * 0.25f);
}
