/* The low-bit types TQ1_0, TQ2_0, Q1_0, Q2_0 (quant_ternary.c, quant_ternary_avx2.c):
 *   - layouts decoded by independent loops written from the GGML block definitions (a different
 *     arithmetic for TQ1_0's base-3 digits), and known bytes of the format (a zero block);
 *   - exact round trips on data of their own kind (ternary / sign rows with an fp16 scale);
 *   - the selected (AVX2 where the CPU has it) dots bit-identical to the scalar references, for
 *     odd block counts, quantizer output and arbitrary bytes (TQ2_0 / Q2_0 code 3 included), and
 *     both within float rounding of a double-precision dot of the decoded values;
 *   - the matmul driver (AVX2 tiles and the vec_dot path): every output is the bits of the
 *     reference dot of its row and token, for 1..40 tokens (distinct, and m identical rows) at 1,
 *     2, 3 and 5 threads;
 *   - lmserve-mkmodel's choice of tensor types for these file types. */
#include <criterion/criterion.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/gguf.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/quant_blocks.h"
#include "engine/kernels/threadpool.h"

#include "../common/rnd.h"

static const enum ggml_type k_low[] = {GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0, GGML_TYPE_Q1_0,
                                       GGML_TYPE_Q2_0};
#define N_LOW 4

/* ------------------------------------------------------------ independent decoders */

/* TQ1_0 digit l of byte q: the byte is ceil(256 v / 243) for the 5-digit base-3 number v, so
 * floor(q 3^(l+1) / 256) is the number formed by digits 0..l (the rounding error stays < 1). */
static int tq1_digit_alt(int q, int l)
{
    int p = 1;
    for (int i = 0; i <= l; i++)
        p *= 3;
    return ((q * p) >> 8) % 3;
}

static void decode_tq1_0(const struct block_tq1_0 *b, float *y)
{
    float d = fp16_to_f32_sw(b->d);
    int e = 0;
    for (int l = 0; l < 5; l++) /* 32 bytes, 5 digits each: element 32 l + m */
        for (int m = 0; m < 32; m++)
            y[e++] = (float)(tq1_digit_alt(b->qs[m], l) - 1) * d;
    for (int l = 0; l < 5; l++) /* 16 bytes: element 160 + 16 l + m */
        for (int m = 0; m < 16; m++)
            y[e++] = (float)(tq1_digit_alt(b->qs[32 + m], l) - 1) * d;
    for (int l = 0; l < 4; l++) /* qh: element 240 + 4 l + j */
        for (int j = 0; j < 4; j++)
            y[e++] = (float)(tq1_digit_alt(b->qh[j], l) - 1) * d;
}

static void decode_tq2_0(const struct block_tq2_0 *b, float *y)
{
    float d = fp16_to_f32_sw(b->d);
    for (int c = 0; c < 2; c++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++)
                *y++ = (float)(((b->qs[32 * c + m] >> (2 * l)) & 3) - 1) * d;
}

static void decode_q1_0(const struct block_q1_0 *b, float *y)
{
    float d = fp16_to_f32_sw(b->d);
    for (int byte = 0; byte < 16; byte++)
        for (int bit = 0; bit < 8; bit++)
            *y++ = (b->qs[byte] & (1u << bit)) ? d : -d;
}

static void decode_q2_0(const struct block_q2_0 *b, float *y)
{
    float d = fp16_to_f32_sw(b->d);
    static const float level[4] = {-1, 0, 1, 2};
    for (int byte = 0; byte < 16; byte++)
        for (int k = 0; k < 4; k++)
            *y++ = level[(b->qs[byte] >> (2 * k)) & 3] * d;
}

static void decode_alt(enum ggml_type t, const void *q, float *y, int64_t n)
{
    const struct quant_traits *tr = quant_traits(t);
    for (int64_t b = 0; b < n / tr->blck_size; b++) {
        const uint8_t *p = (const uint8_t *)q + b * tr->type_size;
        float *o = y + b * tr->blck_size;
        switch (t) {
        case GGML_TYPE_TQ1_0: decode_tq1_0((const struct block_tq1_0 *)p, o); break;
        case GGML_TYPE_TQ2_0: decode_tq2_0((const struct block_tq2_0 *)p, o); break;
        case GGML_TYPE_Q1_0: decode_q1_0((const struct block_q1_0 *)p, o); break;
        default: decode_q2_0((const struct block_q2_0 *)p, o); break;
        }
    }
}

/* offset of the fp16 scale in a block */
static size_t d_offset(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_TQ1_0: return offsetof(struct block_tq1_0, d);
    case GGML_TYPE_TQ2_0: return offsetof(struct block_tq2_0, d);
    default: return 0;
    }
}

/* n elements of random bytes with a random finite scale in every block */
static void random_blocks(enum ggml_type t, uint8_t *q, int64_t n)
{
    const struct quant_traits *tr = quant_traits(t);
    size_t bytes = quant_row_size(t, n);
    for (size_t i = 0; i < bytes; i++)
        q[i] = (uint8_t)rnd();
    for (int64_t b = 0; b < n / tr->blck_size; b++) {
        uint16_t d = f32_to_fp16_sw((rnd_unit() - 0.5f) * 0.5f);
        memcpy(q + b * tr->type_size + d_offset(t), &d, 2);
    }
}

/* a row of the type's own kind: scale * {-1, 0, 1} (ternary types), scale * {-1, 1} (Q1_0), with
 * a per-block fp16-exact scale and, for the amax-scaled types, one +-scale in every block */
static void own_kind_row(enum ggml_type t, float *x, int64_t n)
{
    int64_t bs = quant_traits(t)->blck_size;
    for (int64_t b = 0; b < n / bs; b++) {
        float d = (float)(1 + rnd() % 200) / 64.0f; /* exact in fp16 */
        for (int64_t j = 0; j < bs; j++) {
            int v = t == GGML_TYPE_Q1_0 ? (rnd() & 1 ? 1 : -1) : (int)(rnd() % 3) - 1;
            x[b * bs + j] = d * (float)v;
        }
        if (t != GGML_TYPE_Q1_0) x[b * bs + rnd() % bs] = rnd() & 1 ? d : -d;
    }
}

/* ------------------------------------------------------------ layout */

Test(ternary, table_entries)
{
    static const struct {
        enum ggml_type t;
        const char *name;
        int64_t blck;
        size_t size;
        enum ggml_type vdt;
    } want[N_LOW] = {{GGML_TYPE_TQ1_0, "tq1_0", 256, 54, GGML_TYPE_Q8_K},
                     {GGML_TYPE_TQ2_0, "tq2_0", 256, 66, GGML_TYPE_Q8_K},
                     {GGML_TYPE_Q1_0, "q1_0", 128, 18, GGML_TYPE_Q8_0},
                     {GGML_TYPE_Q2_0, "q2_0", 64, 18, GGML_TYPE_Q8_0}};
    cr_assert_eq(GGML_TYPE_TQ1_0, 34);
    cr_assert_eq(GGML_TYPE_TQ2_0, 35);
    cr_assert_eq(GGML_TYPE_Q1_0, 41);
    cr_assert_eq(GGML_TYPE_Q2_0, 42);
    for (int i = 0; i < N_LOW; i++) {
        const struct quant_traits *tr = quant_traits(want[i].t);
        cr_assert(tr && quant_type_valid((uint32_t)want[i].t), "%s", want[i].name);
        cr_assert_str_eq(tr->name, want[i].name);
        cr_assert_eq(tr->blck_size, want[i].blck);
        cr_assert_eq(tr->type_size, want[i].size);
        cr_assert_eq(tr->vec_dot_type, want[i].vdt);
        cr_assert(tr->is_quantized);
        /* the GGUF reader knows the same sizes */
        uint64_t nb = 0;
        struct err e;
        int64_t ne[2] = {want[i].blck * 3, 5};
        cr_assert_eq(gguf_tensor_nbytes((uint32_t)want[i].t, 2, ne, &nb, &e), 0, "%s", e.msg);
        cr_assert_eq(nb, 15 * want[i].size);
    }
}

Test(ternary, zero_block_known_bytes)
{
    /* x = 0: d = 0 and every digit 1; five 1-digits pack to ceil(121 * 256 / 243) = 128, four
     * (then shifted by one digit) to ceil(120 * 256 / 243) = 127 */
    float x[256] = {0};
    struct block_tq1_0 b1;
    quant_tq1_0_from_float(x, &b1, 256);
    for (int i = 0; i < 48; i++)
        cr_assert_eq(b1.qs[i], 128, "qs[%d] = %d", i, b1.qs[i]);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(b1.qh[i], 127, "qh[%d] = %d", i, b1.qh[i]);
    cr_assert_eq(b1.d, 0);
    struct block_tq2_0 b2;
    quant_tq2_0_from_float(x, &b2, 256);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(b2.qs[i], 0x55); /* four 2-bit ones */
    struct block_q2_0 b4;
    quant_q2_0_from_float(x, &b4, 64);
    for (int i = 0; i < 16; i++)
        cr_assert_eq(b4.qs[i], 0x55);
    struct block_q1_0 b3;
    quant_q1_0_from_float(x, &b3, 128); /* x >= 0: every bit set */
    for (int i = 0; i < 16; i++)
        cr_assert_eq(b3.qs[i], 0xFF);
    /* one TQ2_0 value: element 128 c + 32 l + m is bits 2l of qs[32c + m] */
    x[128 + 64 + 5] = -1.0f;
    quant_tq2_0_from_float(x, &b2, 256);
    cr_assert_eq(b2.qs[32 + 5], 0x55 & ~(3 << 4)); /* digit 2 of byte 37 is 0 */
    cr_assert_eq(fp16_to_f32_sw(b2.d), 1.0f);
}

Test(ternary, layouts_match_independent_decoders)
{
    rng_state = 7;
    for (int i = 0; i < N_LOW; i++) {
        enum ggml_type t = k_low[i];
        const struct quant_traits *tr = quant_traits(t);
        int64_t n = tr->blck_size * 11;
        uint8_t *q = malloc(quant_row_size(t, n));
        float *a = malloc((size_t)n * 4), *b = malloc((size_t)n * 4), *c = malloc((size_t)n * 4);
        for (int rep = 0; rep < 20; rep++) {
            random_blocks(t, q, n);
            tr->to_float_ref(q, a, n);
            tr->to_float(q, c, n);
            decode_alt(t, q, b, n);
            cr_assert(memcmp(a, b, (size_t)n * 4) == 0, "%s: reference decoder differs from GGML order",
                      tr->name);
            cr_assert(memcmp(a, c, (size_t)n * 4) == 0, "%s: fast to_float differs", tr->name);
        }
        free(q), free(a), free(b), free(c);
    }
}

Test(ternary, exact_round_trip_on_own_kind)
{
    rng_state = 11;
    for (int i = 0; i < N_LOW; i++) {
        enum ggml_type t = k_low[i];
        const struct quant_traits *tr = quant_traits(t);
        int64_t n = tr->blck_size * 9;
        float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
        uint8_t *q = malloc(quant_row_size(t, n));
        for (int rep = 0; rep < 10; rep++) {
            own_kind_row(t, x, n);
            tr->from_float_ref(x, q, n);
            tr->to_float_ref(q, y, n);
            for (int64_t k = 0; k < n; k++)
                cr_assert_eq(x[k], y[k], "%s: element %ld: %g -> %g", tr->name, (long)k, x[k], y[k]);
        }
        free(x), free(y), free(q);
    }
}

/* ------------------------------------------------------------ dots */

static void dot_case(enum ggml_type t, int64_t n, int random_bytes)
{
    const struct quant_traits *tr = quant_traits(t), *vt = quant_traits(tr->vec_dot_type);
    float *x = malloc((size_t)n * 4), *yf = malloc((size_t)n * 4), *xd = malloc((size_t)n * 4),
          *yd = malloc((size_t)n * 4);
    uint8_t *xq = malloc(quant_row_size(t, n)), *yq = malloc(quant_row_size(tr->vec_dot_type, n));
    if (random_bytes) {
        random_blocks(t, xq, n);
    } else {
        if (rnd() & 1)
            own_kind_row(t, x, n);
        else
            fill(x, n);
        tr->from_float_ref(x, xq, n);
    }
    fill(yf, n);
    vt->from_float_ref(yf, yq, n);
    tr->to_float_ref(xq, xd, n);
    vt->to_float_ref(yq, yd, n);
    float ref = tr->vec_dot_ref(n, xq, yq), fast = tr->vec_dot(n, xq, yq);
    cr_assert(memcmp(&ref, &fast, 4) == 0, "%s n=%ld%s: fast dot %.9g, reference %.9g", tr->name,
              (long)n, random_bytes ? " (random bytes)" : "", fast, ref);
    double dd = 0, mag = 0;
    for (int64_t k = 0; k < n; k++)
        dd += (double)xd[k] * yd[k], mag += fabs((double)xd[k] * yd[k]);
    cr_assert(fabs(ref - dd) <= 2e-5 * mag + 1e-6, "%s n=%ld: dot %.9g vs double %.9g", tr->name,
              (long)n, ref, dd);
    free(x), free(yf), free(xd), free(yd), free(xq), free(yq);
}

Test(ternary, fast_dots_bit_identical_to_reference_odd_sizes)
{
    rng_state = 12345;
    static const int nblocks[] = {1, 2, 3, 5, 7, 13, 29};
    for (int i = 0; i < N_LOW; i++) {
        int64_t bs = quant_traits(k_low[i])->blck_size;
        int64_t unit = bs < 256 && quant_traits(k_low[i])->vec_dot_type == GGML_TYPE_Q8_K ? 256 : bs;
        for (size_t k = 0; k < sizeof nblocks / sizeof nblocks[0]; k++)
            for (int rep = 0; rep < 8; rep++)
                dot_case(k_low[i], unit * nblocks[k], rep & 1);
    }
}

Test(ternary, extreme_activations)
{
    /* activations at +-127 everywhere with every weight at its extreme code: the integer sums
     * must not saturate anywhere (TQ2_0 / Q2_0 code 3 is +2) */
    for (int i = 0; i < N_LOW; i++) {
        enum ggml_type t = k_low[i];
        const struct quant_traits *tr = quant_traits(t), *vt = quant_traits(tr->vec_dot_type);
        int64_t n = 1024;
        float *yf = malloc((size_t)n * 4), *xd = malloc((size_t)n * 4), *yd = malloc((size_t)n * 4);
        uint8_t *xq = malloc(quant_row_size(t, n)), *yq = malloc(quant_row_size(tr->vec_dot_type, n));
        for (int sign = -1; sign <= 1; sign += 2) {
            for (int64_t k = 0; k < n; k++)
                yf[k] = (float)sign * 3.0f;
            vt->from_float_ref(yf, yq, n);
            memset(xq, 0xFF, quant_row_size(t, n)); /* TQ1_0 0xFF: digits 2 2 2 2 2 */
            for (int64_t b = 0; b < n / tr->blck_size; b++) {
                uint16_t d = f32_to_fp16_sw(0.5f);
                memcpy(xq + b * tr->type_size + d_offset(t), &d, 2);
            }
            tr->to_float_ref(xq, xd, n);
            vt->to_float_ref(yq, yd, n);
            double dd = 0;
            for (int64_t k = 0; k < n; k++)
                dd += (double)xd[k] * yd[k];
            float ref = tr->vec_dot_ref(n, xq, yq), fast = tr->vec_dot(n, xq, yq);
            cr_assert(memcmp(&ref, &fast, 4) == 0, "%s: %.9g vs %.9g", tr->name, fast, ref);
            cr_assert(fabs(ref - dd) <= 1e-5 * fabs(dd), "%s: %.9g vs double %.9g", tr->name, ref, dd);
        }
        free(yf), free(xd), free(yd), free(xq), free(yq);
    }
}

/* ------------------------------------------------------------ matmul */

static uint64_t mrs = 5;
static float mrand(void)
{
    mrs = mrs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((mrs >> 40) / 16777216.0) * 2 - 1;
}

#define MM_N 40

/* Y of a call with m tokens == the reference dot of each (row, token) on the activations the
 * driver quantizes (mm_act_kind says which), bit for bit, for m = 1..MM_N tokens (distinct, and
 * m copies of one token), at 1, 2, 3 and 5 threads. */
static void mm_case(enum ggml_type t, int64_t rows, int64_t cols)
{
    const struct quant_traits *tr = quant_traits(t), *vt = quant_traits(tr->vec_dot_type);
    cr_assert_eq(mm_act_kind(t, 1, cols), MM_ACT_VEC_DOT, "%s", tr->name);
    cr_assert_eq(mm_act_kind(t, MM_N, cols), MM_ACT_VEC_DOT, "%s", tr->name);
    size_t stride = quant_row_size(t, cols), ys = quant_row_size(tr->vec_dot_type, cols);
    uint8_t *W = malloc((size_t)rows * stride), *yq = malloc(ys);
    float *row = malloc((size_t)cols * 4);
    for (int64_t r = 0; r < rows; r++) {
        if (r % 3 == 0) {
            own_kind_row(t, row, cols);
        } else {
            for (int64_t c = 0; c < cols; c++)
                row[c] = mrand() * (0.2f + (float)(r % 5) * 0.2f);
        }
        tr->from_float_ref(row, W + (size_t)r * stride, cols);
    }
    float *X = malloc((size_t)(MM_N * cols) * 4), *same = malloc((size_t)(MM_N * cols) * 4);
    for (int64_t i = 0; i < MM_N * cols; i++)
        X[i] = mrand() * 3;
    for (int64_t k = 0; k < MM_N; k++)
        memcpy(same + k * cols, X + 7 * cols, (size_t)cols * 4);
    float *want = malloc((size_t)(MM_N * rows) * 4), *Y = malloc((size_t)(MM_N * rows) * 4);
    for (int64_t k = 0; k < MM_N; k++) {
        vt->from_float(X + k * cols, yq, cols);
        for (int64_t r = 0; r < rows; r++)
            want[k * rows + r] = tr->vec_dot_ref(cols, W + (size_t)r * stride, yq);
    }
    struct mm_scratch *s = mm_scratch_new();
    struct err e;
    static const int threads[] = {1, 2, 3, 5};
    /* the default path (AVX2 CPUs: matmul_ternary_avx2.c's tiles), then vec_dot per row and token */
    for (int tiles = 1; tiles >= 0; tiles--)
    for (int ti = 0; ti < 4; ti++) {
        mm_set_tiles(tiles);
        struct threadpool *tp = tp_new(threads[ti]);
        cr_assert(tp);
        for (int64_t m = 1; m <= MM_N; m++) {
            for (int pass = 0; pass < 2; pass++) {
                const float *in = pass ? same : X;
                for (int64_t i = 0; i < m * rows; i++)
                    Y[i] = NAN;
                cr_assert_eq(mm_run(tp, t, W, rows, cols, 0, in, m, Y, s, &e), 0, "%s", e.msg);
                for (int64_t k = 0; k < m; k++)
                    for (int64_t r = 0; r < rows; r++) {
                        float g = Y[k * rows + r], w = want[(pass ? 7 : k) * rows + r];
                        cr_assert(memcmp(&g, &w, 4) == 0,
                                  "%s %ldx%ld, %s, %d threads, %ld %s tokens: token %ld row %ld: "
                                  "%.9g, reference %.9g",
                                  tr->name, (long)rows, (long)cols, tiles ? "tiles" : "vec_dot",
                                  threads[ti], (long)m,
                                  pass ? "identical" : "distinct", (long)k, (long)r, g, w);
                    }
            }
        }
        tp_free(tp);
    }
    mm_set_tiles(1);
    mm_scratch_free(s);
    free(W), free(yq), free(row), free(X), free(same), free(want), free(Y);
}

Test(ternary, matmul_bitwise_reference_any_m_any_threads)
{
    quant_init();
    for (int i = 0; i < N_LOW; i++) {
        int64_t bs = quant_traits(k_low[i])->blck_size;
        /* odd block counts; rows odd and past one 128-row decode work item */
        mm_case(k_low[i], 37, 3 * bs);
        mm_case(k_low[i], 261, 5 * bs);
    }
}

/* ------------------------------------------------------------ mkmodel */

Test(ternary, mkmodel_tensor_types)
{
    static const struct {
        enum mkmodel_type mt;
        const char *name;
        uint32_t t;
    } k[N_LOW] = {{MKMODEL_TQ1_0, "tq1_0", GGML_TYPE_TQ1_0},
                  {MKMODEL_TQ2_0, "tq2_0", GGML_TYPE_TQ2_0},
                  {MKMODEL_Q1_0, "q1_0", GGML_TYPE_Q1_0},
                  {MKMODEL_Q2_0, "q2_0", GGML_TYPE_Q2_0}};
    static const uint32_t ftype[N_LOW] = {36, 37, 40, 41}; /* llama_ftype */
    const struct mkmodel_shape *tiny = mkmodel_shape_find("tiny"); /* n_embd 64, n_ff 256 */
    cr_assert(tiny);
    struct mkmodel_shape shape = *tiny;
    shape.n_vocab = 320; /* a small file */
    const struct mkmodel_shape *sh = &shape;
    for (int i = 0; i < N_LOW; i++) {
        cr_assert_eq(mkmodel_type_parse(k[i].name), (int)k[i].mt);
        cr_assert_str_eq(mkmodel_type_name(k[i].mt), k[i].name);
        cr_assert_eq(mkmodel_file_type(k[i].mt), ftype[i]);
        uint32_t bs = (uint32_t)quant_traits((enum ggml_type)k[i].t)->blck_size;
        cr_assert_eq(mkmodel_tensor_type(k[i].mt, "ffn_down", 256), k[i].t);
        cr_assert_eq(mkmodel_tensor_type(k[i].mt, "attn_q", 64), bs <= 64 ? k[i].t : GGML_TYPE_Q8_0);
        cr_assert_eq(mkmodel_tensor_type(k[i].mt, "token_embd", 256), GGML_TYPE_Q8_0);
        cr_assert_eq(mkmodel_tensor_type(k[i].mt, "output", 256), GGML_TYPE_Q8_0);
        cr_assert_eq(mkmodel_tensor_type(k[i].mt, "attn_norm", 256), GGML_TYPE_F32);
        cr_assert_eq(mkmodel_tensor_type(k[i].mt, "attn_k", 48), GGML_TYPE_F16);

        char path[96];
        snprintf(path, sizeof path, "/tmp/lms-ternary-%d-%s.gguf", (int)getpid(), k[i].name);
        struct err e = {0};
        cr_assert_eq(mkmodel_write(sh, k[i].mt, 3, NULL, path, &e), 0, "%s", e.msg);
        struct gguf g;
        cr_assert_eq(gguf_open(&g, path, &e), 0, "%s", e.msg);
        const struct gguf_tensor *down = gguf_find_tensor(&g, "blk.1.ffn_down.weight");
        cr_assert(down);
        cr_assert_eq(down->type, k[i].t, "%s: ffn_down type %u", k[i].name, down->type);
        uint32_t ft = 0, qv = 0;
        cr_assert_eq(gguf_get_u32(&g, "general.file_type", &ft, &e), 0, "%s", e.msg);
        cr_assert_eq(ft, ftype[i]);
        cr_assert_eq(gguf_get_u32(&g, "general.quantization_version", &qv, &e), 0, "%s", e.msg);
        cr_assert_eq(qv, 2);
        gguf_close(&g);
        unlink(path);
    }
    cr_assert_eq(mkmodel_type_parse("tq3_0"), -1);
}
