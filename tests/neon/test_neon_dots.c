/* NEON vec_dot kernels against the scalar reference, run under qemu-aarch64 (suite 15-neon.sh).
 *
 * Standalone (Criterion is not available for arm64 here): for every type whose vec_dot the NEON
 * back-end replaced, random rows are quantized with the reference from_float, and the NEON dot is
 * compared with the reference dot and with a double-precision dot of the dequantized operands
 * (tolerance 2e-5 * sum|x*y|, as quant/sweep_all_types_odd_lengths on x86), over 1, 3, 7, 13
 * blocks (odd lengths for the float types) and a long row of 4096 elements. A second pass fills
 * the blocks with random bytes (every bit pattern of quants and packed scales, int8 -128 in
 * activations, sane fp16 scales) and compares NEON with the reference. Exits 1 and names the type
 * and case on any mismatch, or if quant_init did not select "neon" or an expected kernel is not
 * installed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/quant_blocks.h"

/* Types the NEON back-end must replace (a kernel dropped from quant_register_neon fails here). */
static const enum ggml_type k_expected[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K,
};

#include "../common/rnd.h"

static int g_failures, g_checks;

static void check(const char *type, const char *what, int64_t n, int rep, double got, double want,
                  double tol)
{
    g_checks++;
    if (fabs(got - want) <= tol && !isnan(got)) return;
    g_failures++;
    fprintf(stderr, "FAIL %s %s n=%ld rep=%d: %.9g vs %.9g (|diff| %.3g > tol %.3g)\n", type, what,
            (long)n, rep, got, want, fabs(got - want), tol);
}

/* Dequantized double dot and sum |x*y| of two quantized rows. */
static void double_dot(const struct quant_traits *tr, const struct quant_traits *vt, const void *xq,
                       const void *yq, int64_t n, double *dot, double *mag)
{
    float *xr = malloc((size_t)n * 4), *yr = malloc((size_t)n * 4);
    tr->to_float_ref(xq, xr, n);
    vt->to_float_ref(yq, yr, n);
    *dot = 0, *mag = 0;
    for (int64_t i = 0; i < n; i++) {
        *dot += (double)xr[i] * yr[i];
        *mag += fabs((double)xr[i] * yr[i]);
    }
    free(xr), free(yr);
}

/* Quantized rows from random normal data with the reference quantizers. */
/* The NEON dot, the scalar reference and a double-precision dot of the dequantized operands agree
 * pairwise within 2e-5 * sum|x*y| (the x86 sweep's tolerance). */
static void compare3(const struct quant_traits *tr, const struct quant_traits *vt, const uint8_t *xq,
                     const uint8_t *yq, int64_t n, int rep, const char *what)
{
    double dd, mag;
    double_dot(tr, vt, xq, yq, n, &dd, &mag);
    double dref = tr->vec_dot_ref(n, xq, yq), dneon = tr->vec_dot(n, xq, yq);
    double tol = 2e-5 * mag + 1e-6;
    char w[64];
    snprintf(w, sizeof w, "%sref vs double", what);
    check(tr->name, w, n, rep, dref, dd, tol);
    snprintf(w, sizeof w, "%sneon vs double", what);
    check(tr->name, w, n, rep, dneon, dd, tol);
    snprintf(w, sizeof w, "%sneon vs ref", what);
    check(tr->name, w, n, rep, dneon, dref, tol);
}

static void sweep(enum ggml_type t, int64_t n, int rep)
{
    const struct quant_traits *tr = quant_traits(t), *vt = quant_traits(tr->vec_dot_type);
    size_t xs = quant_row_size(t, n), ys = quant_row_size(tr->vec_dot_type, n);
    float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
    uint8_t *xq = malloc(xs), *yq = malloc(ys);
    fill(x, n);
    fill(y, n);
    tr->from_float_ref(x, xq, n);
    vt->from_float_ref(y, yq, n);
    compare3(tr, vt, xq, yq, n, rep, "");
    free(x), free(y), free(xq), free(yq);
}

static uint16_t rnd_half(void) /* a finite fp16 scale of either sign, 2^-10 .. 2^2 */
{
    return f32_to_fp16_sw(ldexpf(0.5f + rnd_unit(), (int)(rnd() % 12) - 10) *
                          ((rnd() & 1) ? -1.f : 1.f));
}

/* Random bytes in every quant and packed-scale field; fp16/f32 scales made finite. */
static void random_blocks(enum ggml_type t, uint8_t *q, int64_t nblk)
{
    const struct quant_traits *tr = quant_traits(t);
    for (size_t i = 0; i < (size_t)nblk * tr->type_size; i++)
        q[i] = (uint8_t)rnd();
    for (int64_t b = 0; b < nblk; b++) {
        uint8_t *p = q + b * tr->type_size;
        uint16_t h[2] = {rnd_half(), rnd_half()};
        switch (t) {
        case GGML_TYPE_Q4_0:
        case GGML_TYPE_Q5_0:
        case GGML_TYPE_Q8_0:
            memcpy(p, h, 2);
            break;
        case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_1:
        case GGML_TYPE_Q4_K:
        case GGML_TYPE_Q5_K:
            memcpy(p, h, 4);
            break;
        case GGML_TYPE_Q2_K:
            memcpy(p + offsetof(struct block_q2_K, d), h, 4);
            break;
        case GGML_TYPE_Q3_K:
            memcpy(p + offsetof(struct block_q3_K, d), h, 2);
            break;
        case GGML_TYPE_Q6_K:
            memcpy(p + offsetof(struct block_q6_K, d), h, 2);
            break;
        case GGML_TYPE_Q8_K: {
            struct block_q8_K *k = (struct block_q8_K *)p;
            k->d = ldexpf(0.5f + rnd_unit(), -(int)(rnd() % 8));
            for (int g = 0; g < QK_K / 16; g++) {
                int s = 0;
                for (int j = 0; j < 16; j++)
                    s += k->qs[16 * g + j];
                k->bsums[g] = (int16_t)s;
            }
            break;
        }
        default:
            break;
        }
    }
}

static void sweep_random_bytes(enum ggml_type t, int64_t n, int rep)
{
    const struct quant_traits *tr = quant_traits(t);
    if (!tr->is_quantized) return;
    const struct quant_traits *vt = quant_traits(tr->vec_dot_type);
    size_t xs = quant_row_size(t, n), ys = quant_row_size(tr->vec_dot_type, n);
    uint8_t *xq = malloc(xs), *yq = malloc(ys);
    random_blocks(t, xq, n / tr->blck_size);
    random_blocks(tr->vec_dot_type, yq, n / vt->blck_size);
    compare3(tr, vt, xq, yq, n, rep, "random bytes: ");
    free(xq), free(yq);
}

int main(void)
{
    quant_init();
    if (strcmp(quant_isa(), "neon") != 0) {
        fprintf(stderr, "FAIL quant_isa() is \"%s\", not \"neon\"\n", quant_isa());
        return 1;
    }
    for (size_t i = 0; i < sizeof k_expected / sizeof k_expected[0]; i++) {
        const struct quant_traits *tr = quant_traits(k_expected[i]);
        if (tr->vec_dot == tr->vec_dot_ref) {
            fprintf(stderr, "FAIL %s: no NEON vec_dot installed\n", tr->name);
            g_failures++;
        }
    }
    static const int nblocks[] = {1, 3, 7, 13};
    char tested[512] = "";
    for (int t = 0; t < GGML_TYPE_COUNT; t++) {
        const struct quant_traits *tr = quant_traits((enum ggml_type)t);
        if (!tr || tr->vec_dot == tr->vec_dot_ref) continue;
        int64_t vb = quant_traits(tr->vec_dot_type)->blck_size;
        int64_t b = tr->blck_size > vb ? tr->blck_size : vb;
        for (int k = 0; k < 5; k++) {
            int64_t n;
            if (k == 4)
                n = 4096 + (b == 1 ? 7 : 0); /* long row (float types: and an odd tail) */
            else
                n = b == 1 ? 8 * nblocks[k] * 8 + nblocks[k] : b * nblocks[k];
            for (int rep = 0; rep < 3; rep++) {
                sweep((enum ggml_type)t, n, rep);
                sweep_random_bytes((enum ggml_type)t, n, rep);
            }
        }
        /* float types: every length 1..40 (all tail sizes of the 16- and 4-wide loops) */
        for (int64_t n = 1; b == 1 && n <= 40; n++)
            sweep((enum ggml_type)t, n, 0);
        snprintf(tested + strlen(tested), sizeof tested - strlen(tested), " %s", tr->name);
    }
    printf("neon dots (isa %s):%s — %d checks, %d failures\n", quant_isa(), tested, g_checks,
           g_failures);
    return g_failures ? 1 : 0;
}
