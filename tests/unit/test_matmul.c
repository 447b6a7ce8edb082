/* The GEMV/GEMM driver against naive loops, for every weight type, every path (GEMV, AVX2 tiles,
 * the traits' vec_dot; packed GEMM where the CPU has it), odd row counts, n_tok 1..17, several
 * threads, strided/indexed X and Y, several ops per call sharing X. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/kernels/matmul.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"

static uint64_t rs;
static float frand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0) * 2 - 1;
}

struct wmat {
    enum ggml_type t;
    int64_t rows, cols;
    size_t stride;
    uint8_t *q;
    float *deq; /* rows x cols, dequantized */
};

static void wmat_make(struct wmat *m, enum ggml_type t, int64_t rows, int64_t cols, size_t pad)
{
    const struct quant_traits *tr = quant_traits(t);
    m->t = t, m->rows = rows, m->cols = cols;
    m->stride = quant_row_size(t, cols) + pad;
    m->q = calloc((size_t)rows, m->stride);
    m->deq = malloc((size_t)(rows * cols) * 4);
    float *row = malloc((size_t)cols * 4);
    for (int64_t r = 0; r < rows; r++) {
        float sc = 0.1f + (float)(r % 7) * 0.3f;
        for (int64_t c = 0; c < cols; c++)
            row[c] = frand() * sc;
        tr->from_float_ref(row, m->q + r * m->stride, cols);
        tr->to_float_ref(m->q + r * m->stride, m->deq + r * cols, cols);
    }
    free(row);
}

static void wmat_free(struct wmat *m)
{
    free(m->q);
    free(m->deq);
}

/* What the GEMM path's activation quantization produces (per 32: d = amax/127, q = rint(x/d)). */
static void a8_deq(const float *x, int64_t n, double *out)
{
    for (int64_t b = 0; b < n / 32; b++) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[32 * b + i]));
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        for (int i = 0; i < 32; i++)
            out[32 * b + i] = (double)d * nearbyintf(x[32 * b + i] * id);
    }
}

/* Checks Y (n_tok x rows, y stride ys) against: the reference vec_dot on reference-quantized X
 * (GEMV path) or the A8-quantized X (GEMM path), with a tolerance relative to sum |w x|. */
static void check(const struct wmat *m, const float *X, int64_t xs, int64_t n_tok, const float *Y,
                  int64_t ys, enum mm_act_kind kind)
{
    const struct quant_traits *tr = quant_traits(m->t), *vt = quant_traits(tr->vec_dot_type);
    size_t qrow = quant_row_size(tr->vec_dot_type, m->cols);
    uint8_t *xq = malloc(qrow);
    float *xd = malloc((size_t)m->cols * 4);
    double *xa = malloc((size_t)m->cols * 8);
    for (int64_t t = 0; t < n_tok; t++) {
        const float *x = X + t * xs;
        vt->from_float_ref(x, xq, m->cols);
        vt->to_float_ref(xq, xd, m->cols);
        if (kind == MM_ACT_A8) a8_deq(x, m->cols, xa);
        if (kind == MM_ACT_F32)
            for (int64_t c = 0; c < m->cols; c++)
                xa[c] = x[c];
        for (int64_t r = 0; r < m->rows; r++) {
            double want = 0, mag = 0;
            const float *w = m->deq + r * m->cols;
            for (int64_t c = 0; c < m->cols; c++) {
                double xv = kind != MM_ACT_VEC_DOT ? xa[c] : xd[c];
                want += w[c] * xv;
                mag += fabs(w[c] * xv);
            }
            double got = Y[t * ys + r];
            cr_assert(fabs(got - want) <= 3e-5 * mag + 1e-6,
                      "%s %s rows=%ld n_tok=%ld: Y[%ld][%ld] = %.7g, want %.7g", tr->name,
                      kind == MM_ACT_A8    ? "a8"
                      : kind == MM_ACT_F32 ? "f32"
                                           : "vec_dot",
                      (long)m->rows, (long)n_tok, (long)t, (long)r, got, want);
        }
    }
    free(xq), free(xd), free(xa);
}

static void run_type(enum ggml_type t, struct threadpool *tp, struct mm_scratch *s)
{
    const struct quant_traits *tr = quant_traits(t);
    int64_t cols = tr->blck_size >= 256 ? 768 : tr->blck_size > 32 ? 3 * tr->blck_size : 224;
    static const int64_t rows_list[] = {1, 17, 37};
    /* path 0: GEMV (AVX-512) / AVX2 tiles / vec_dot; 1: GEMM (AMX where the CPU has it); 2: GEMM
     * without AMX; 3: vec_dot per row and token (AVX2 tiles off) */
    for (int path = 0; path < 4; path++) {
        if ((path == 1 || path == 2) && !mm_gemm_supported(t)) continue;
        mm_set_gemm_min_tokens(path == 1 || path == 2 ? 1 : INT64_MAX);
        mm_set_amx(path != 2);
        mm_set_tiles(path != 3);
        for (int ri = 0; ri < 3; ri++) {
            struct wmat m;
            wmat_make(&m, t, rows_list[ri], cols, ri == 2 ? 6 : 0);
            for (int64_t n_tok = 1; n_tok <= 17; n_tok += (ri == 1 ? 1 : 4)) {
                float *X = malloc((size_t)(n_tok * cols) * 4);
                for (int64_t i = 0; i < n_tok * cols; i++)
                    X[i] = frand() * 2;
                float *Y = malloc((size_t)(n_tok * m.rows) * 4);
                for (int64_t i = 0; i < n_tok * m.rows; i++)
                    Y[i] = NAN;
                struct err e;
                int rc = mm_run(tp, t, m.q, m.rows, cols, m.stride, X, n_tok, Y, s, &e);
                cr_assert_eq(rc, 0, "%s: %s", tr->name, e.msg);
                check(&m, X, cols, n_tok, Y, m.rows, mm_act_kind(t, n_tok, cols));
                free(X), free(Y);
            }
            wmat_free(&m);
        }
    }
    mm_set_gemm_min_tokens(0);
    mm_set_amx(1);
    mm_set_tiles(1);
}

Test(matmul, all_types_both_paths_1_thread)
{
    rs = 1;
    struct mm_scratch *s = mm_scratch_new();
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (quant_type_valid((uint32_t)t) && t != GGML_TYPE_Q8_K)
            run_type((enum ggml_type)t, NULL, s);
    mm_scratch_free(s);
}

Test(matmul, all_types_both_paths_3_threads)
{
    rs = 2;
    struct threadpool *tp = tp_new(3);
    struct mm_scratch *s = mm_scratch_new();
    for (int t = 0; t < GGML_TYPE_COUNT; t++)
        if (quant_type_valid((uint32_t)t) && t != GGML_TYPE_Q8_K)
            run_type((enum ggml_type)t, tp, s);
    mm_scratch_free(s);
    tp_free(tp);
}

/* Three ops in one call: two share X (one activation quantization), one gathers its tokens by
 * index and scatters its outputs into a wider Y. */
static void multi_ops(int gemm_min)
{
    rs = 3;
    mm_set_gemm_min_tokens(gemm_min);
    struct threadpool *tp = tp_new(2);
    struct mm_scratch *s = mm_scratch_new();
    int64_t cols = 256, n_tok = 9;
    struct wmat a, b, c;
    wmat_make(&a, GGML_TYPE_Q8_0, 40, cols, 0);
    wmat_make(&b, GGML_TYPE_Q4_K, 23, cols, 0);
    wmat_make(&c, GGML_TYPE_Q6_K, 18, cols, 0);
    int64_t xs = cols + 5;
    float *X = malloc((size_t)(n_tok * xs) * 4);
    for (int64_t i = 0; i < n_tok * xs; i++)
        X[i] = frand();
    float *Ya = malloc((size_t)(n_tok * 40) * 4), *Yb = malloc((size_t)(n_tok * 30) * 4);
    int32_t idx[4] = {7, 2, 5, 0}; /* tokens 7, 2, 5, 0 -> outputs rows 1, 3, 0, 2 of Yc */
    int32_t yidx[4] = {1, 3, 0, 2};
    float *Yc = malloc(4 * 20 * 4);
    for (int64_t i = 0; i < n_tok * 30; i++)
        Yb[i] = -7;
    struct mm_op ops[3] = {
        {.wtype = GGML_TYPE_Q8_0,
         .W = a.q,
         .rows = 40,
         .cols = cols,
         .X = X,
         .x_stride = xs,
         .n_tok = n_tok,
         .Y = Ya},
        {.wtype = GGML_TYPE_Q4_K,
         .W = b.q,
         .rows = 23,
         .cols = cols,
         .X = X,
         .x_stride = xs,
         .n_tok = n_tok,
         .Y = Yb,
         .y_stride = 30},
        {.wtype = GGML_TYPE_Q6_K,
         .W = c.q,
         .rows = 18,
         .cols = cols,
         .X = X,
         .x_stride = xs,
         .x_idx = idx,
         .n_tok = 4,
         .Y = Yc,
         .y_stride = 20,
         .y_idx = yidx},
    };
    struct err e;
    cr_assert_eq(mm_run_ops(tp, ops, 3, s, &e), 0, "%s", e.msg);
    check(&a, X, xs, n_tok, Ya, 40, mm_act_kind(GGML_TYPE_Q8_0, n_tok, cols));
    check(&b, X, xs, n_tok, Yb, 30, mm_act_kind(GGML_TYPE_Q4_K, n_tok, cols));
    for (int64_t t = 0; t < n_tok; t++)
        for (int r = 23; r < 30; r++)
            cr_assert_eq(Yb[t * 30 + r], -7.0f, "write outside the rows");
    /* Yc row yidx[k] must hold token idx[k] */
    float *Xg = malloc(4 * cols * 4), *Yg = malloc(4 * 20 * 4);
    for (int k = 0; k < 4; k++) {
        memcpy(Xg + k * cols, X + idx[k] * xs, cols * 4);
        memcpy(Yg + k * 20, Yc + yidx[k] * 20, 20 * 4);
    }
    check(&c, Xg, cols, 4, Yg, 20, mm_act_kind(GGML_TYPE_Q6_K, 4, cols));
    free(X), free(Ya), free(Yb), free(Yc), free(Xg), free(Yg);
    wmat_free(&a), wmat_free(&b), wmat_free(&c);
    mm_scratch_free(s);
    tp_free(tp);
    mm_set_gemm_min_tokens(0);
}

Test(matmul, several_ops_indexed_gemv)
{
    multi_ops(1000);
}
Test(matmul, several_ops_indexed_gemm)
{
    multi_ops(1);
}

Test(matmul, bad_shapes_are_errors)
{
    struct mm_scratch *s = mm_scratch_new();
    float x[64] = {0}, y[64];
    uint8_t w[1024] = {0};
    struct err e;
    cr_assert_neq(mm_run(NULL, GGML_TYPE_Q8_0, w, 1, 40, 0, x, 1, y, s, &e), 0);
    cr_assert_eq(e.code, ERR_INVALID);
    cr_assert_neq(mm_run(NULL, GGML_TYPE_Q4_K, w, 1, 32, 0, x, 1, y, s, &e), 0);
    cr_assert_neq(mm_run(NULL, (enum ggml_type)5, w, 1, 32, 0, x, 1, y, s, &e), 0);
    cr_assert_neq(mm_run(NULL, GGML_TYPE_Q8_0, w, 2, 32, 10, x, 1, y, s, &e), 0); /* stride < row */
    cr_assert_eq(mm_run(NULL, GGML_TYPE_Q8_0, w, 0, 32, 0, x, 1, y, s, &e), 0);   /* empty: no-op */
    cr_assert_eq(mm_run(NULL, GGML_TYPE_Q8_0, w, 1, 32, 0, x, 0, y, s, &e), 0);
    mm_scratch_free(s);
}

/* A row's GEMV result must not depend on how rows are grouped into kernels (the multi-row and
 * single-row kernels sum in the same order), nor on the thread count: bitwise equal. Numerics
 * tests compare greedy decoding against a reference, where one ulp can flip a token. */
Test(matmul, gemv_rows_bitwise_independent_of_grouping)
{
    rs = 5;
    struct mm_scratch *s = mm_scratch_new();
    struct threadpool *tp = tp_new(2);
    static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_F16};
    for (int k = 0; k < 3; k++) {
        struct wmat m;
        int64_t cols = 512, rows = 37;
        wmat_make(&m, types[k], rows, cols, 0);
        float x[512], yall[37], yone;
        for (int i = 0; i < cols; i++) x[i] = frand();
        struct err e;
        cr_assert_eq(mm_run(tp, types[k], m.q, rows, cols, 0, x, 1, yall, s, &e), 0);
        for (int64_t r = 0; r < rows; r++) {
            cr_assert_eq(mm_run(NULL, types[k], m.q + r * m.stride, 1, cols, 0, x, 1, &yone, s, &e), 0);
            cr_assert(memcmp(&yone, &yall[r], sizeof yone) == 0, "%s row %ld: %.9g vs %.9g",
                      quant_traits(types[k])->name, (long)r, yone, yall[r]);
        }
        wmat_free(&m);
    }
    tp_free(tp);
    mm_scratch_free(s);
}

/* The startup calibration picks from its candidate sets, reports every candidate, is measured once
 * per process (a second call returns the cached result without a sweep) and leaves products
 * computing the same bits as before it ran. */
Test(matmul, calibration_cached_and_result_neutral)
{
    quant_init();
    struct threadpool *tp = tp_new(2);
    cr_assert(tp);
    const int64_t rows = 300, cols = 256;
    size_t stride = quant_row_size(GGML_TYPE_Q8_0, cols);
    uint8_t *W = malloc((size_t)rows * stride);
    float *row = malloc(cols * 4), *x = malloc(cols * 4), *y0 = malloc(rows * 4), *y1 = malloc(rows * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++)
            row[c] = sinf((float)(r * cols + c));
        quant_traits(GGML_TYPE_Q8_0)->from_float_ref(row, W + (size_t)r * stride, cols);
    }
    for (int64_t c = 0; c < cols; c++)
        x[c] = cosf((float)c);
    struct mm_scratch *s = mm_scratch_new();
    struct err e;
    cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, W, rows, cols, 0, x, 1, y0, s, &e), 0, "%s", e.msg);
    const struct mm_calib *c = mm_calibrate(tp);
    cr_assert(c && c->done);
    cr_assert(c->prefetch == -1 || c->prefetch == 0 || c->prefetch == 1024 || c->prefetch == 2048 ||
                  c->prefetch == 4096 || c->prefetch == 8192 || c->prefetch == 16384,
              "prefetch %d", c->prefetch);
    cr_assert(c->item_rows == 32 || c->item_rows == 64 || c->item_rows == 128 ||
                  c->item_rows == 256 || c->item_rows == 512,
              "item rows %d", c->item_rows);
    cr_assert(strstr(c->sweep, "rows 32 ") && strstr(c->sweep, "rows 512 "), "sweep: %s", c->sweep);
    if (c->prefetch >= 0) cr_assert(strstr(c->sweep, "pf 0 ") && strstr(c->sweep, "pf 16384 "), "%s", c->sweep);
    cr_assert(c->pf_slabs >= -1 && c->pf_slabs <= 4 && c->pf_slabs != 3, "slabs %d", c->pf_slabs);
    if (c->pf_slabs >= 0) cr_assert(strstr(c->sweep, "slabs 0 ") && strstr(c->sweep, "slabs 4 "), "%s", c->sweep);
    /* the AVX-512 direct kernels are calibrated wherever q8_0 decode runs them */
    if (strcmp(mm_gemm_name(GGML_TYPE_Q8_0), "vnni") == 0) cr_assert(c->pf_slabs >= 0, "%s", c->sweep);
    /* and, where models are repacked, for the slab layout apart */
    if (mm_slab_supported(GGML_TYPE_Q8_0))
        cr_assert((c->pf_slabs_slab >= 0 && c->pf_slabs_slab <= 4 && c->pf_slabs_slab != 3) &&
                      strstr(c->sweep, "slab-layout slabs 0 ") && strstr(c->sweep, "slab-layout slabs 4 "),
                  "slab layout %d: %s", c->pf_slabs_slab, c->sweep);
    else
        cr_assert(c->pf_slabs_slab == -1, "slab layout %d without a slab path", c->pf_slabs_slab);
    cr_assert(c->gbs > 0 && c->ms > 0);
    double ms = c->ms;
    cr_assert_eq(mm_calibrate(tp), c);
    cr_assert(c->ms == ms, "calibrated twice");
    cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, W, rows, cols, 0, x, 1, y1, s, &e), 0, "%s", e.msg);
    cr_assert(memcmp(y0, y1, rows * 4) == 0);
    mm_scratch_free(s);
    tp_free(tp);
    free(W), free(row), free(x), free(y0), free(y1);
}

/* mm_weight_bytes (lmserve-bench's bytes read per token) counts rows x row size of every op that
 * runs: for an MoE layer's call only the routed experts' slices, whatever their row stride; ops
 * with no rows or no tokens read nothing. */
Test(matmul, weight_bytes_and_macs_count_only_the_ops_slices)
{
    const int64_t cols = 256, rows = 40, n_exp = 6;
    struct wmat w;
    wmat_make(&w, GGML_TYPE_Q4_K, rows * n_exp, cols, 32); /* 6 "experts" of 40 rows, padded stride */
    float x[2 * 256], y[2 * 40 * 6];
    for (int i = 0; i < 2 * 256; i++)
        x[i] = frand();
    const int32_t tok[2] = {1, 0};
    struct mm_op ops[3];
    for (int k = 0; k < 3; k++) /* experts 1, 4 and 5 routed; 5 gets no token */
        ops[k] = (struct mm_op){.wtype = GGML_TYPE_Q4_K,
                                .W = w.q + (size_t)(k == 0 ? 1 : k + 3) * rows * w.stride,
                                .rows = rows,
                                .cols = cols,
                                .w_stride = w.stride,
                                .X = x,
                                .x_idx = tok,
                                .n_tok = k == 2 ? 0 : 2 - k,
                                .Y = y + k * rows,
                                .y_stride = 3 * rows};
    struct mm_scratch *s = mm_scratch_new();
    struct err e;
    uint64_t b0 = mm_weight_bytes(), m0 = mm_macs();
    cr_assert_eq(mm_run_ops(NULL, ops, 3, s, &e), 0, "%s", e.msg);
    uint64_t got = mm_weight_bytes() - b0, want = 2 * (uint64_t)rows * quant_row_size(GGML_TYPE_Q4_K, cols);
    cr_assert_eq(got, want, "counted %lu bytes, the two routed slices are %lu", (unsigned long)got,
                 (unsigned long)want);
    /* and mm_macs the multiply-adds: 2 tokens through expert 1, 1 through expert 4 */
    uint64_t macs = mm_macs() - m0, want_macs = 3 * (uint64_t)rows * (uint64_t)cols;
    cr_assert_eq(macs, want_macs, "counted %lu multiply-adds, %lu were done", (unsigned long)macs,
                 (unsigned long)want_macs);
    mm_scratch_free(s);
    free(w.q), free(w.deq);
}

/* On the AMX path a one-token product runs amx_gemv1 (AVX-512, no tiles) and a product of more
 * tokens the tiles: batch invariance needs the two to give the same bits for every row. Odd row
 * counts (a partial 16-row slab), a padded row stride, 1 and 3 threads; against the tiles for the
 * same token (mm_set_amx_gemv1(0)) and against the same token inside a 5-token product. */
Test(matmul, amx_gemv1_equals_amx)
{
    quant_init();
    if (strcmp(mm_gemm_name(GGML_TYPE_Q8_0), "amx") != 0)
        cr_skip_test("this CPU/OS has no AMX (q8_0 runs on %s): nothing to compare",
                     mm_gemm_name(GGML_TYPE_Q8_0));
    rs = 11;
    struct mm_scratch *s = mm_scratch_new();
    static const int64_t colss[] = {32, 96, 1024, 3072}, rowss[] = {1, 15, 16, 17, 37, 300};
    for (int nth = 1; nth <= 3; nth += 2) {
        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
        for (int ci = 0; ci < 4; ci++)
            for (int ri = 0; ri < 6; ri++) {
                int64_t cols = colss[ci], rows = rowss[ri];
                struct wmat m;
                wmat_make(&m, GGML_TYPE_Q8_0, rows, cols, ri % 2 ? 6 : 0);
                float *x = malloc((size_t)(5 * cols) * 4), *y1 = malloc((size_t)rows * 4),
                      *y0 = malloc((size_t)rows * 4), *y5 = malloc((size_t)(5 * rows) * 4);
                for (int64_t i = 0; i < 5 * cols; i++)
                    x[i] = frand() * (i % 5 ? 1.f : 9.f);
                struct err e;
                mm_set_amx_gemv1(1);
                cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, x + 2 * cols, 1,
                                    y1, s, &e), 0);
                mm_set_amx_gemv1(0);
                cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, x + 2 * cols, 1,
                                    y0, s, &e), 0);
                mm_set_amx_gemv1(1);
                cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, x, 5, y5, s, &e), 0);
                for (int64_t r = 0; r < rows; r++) {
                    cr_assert(memcmp(&y1[r], &y0[r], 4) == 0, "cols %ld rows %ld row %ld: %.9g vs tiles %.9g",
                              (long)cols, (long)rows, (long)r, y1[r], y0[r]);
                    cr_assert(memcmp(&y1[r], &y5[2 * rows + r], 4) == 0,
                              "cols %ld rows %ld row %ld: %.9g vs in a batch %.9g", (long)cols,
                              (long)rows, (long)r, y1[r], y5[2 * rows + r]);
                }
                free(x), free(y1), free(y0), free(y5);
                wmat_free(&m);
            }
        if (tp) tp_free(tp);
    }
    mm_scratch_free(s);
}

/* A product of 2..32 tokens on the AMX path runs amx_gemvm (each weight slab read once for up to
 * 16 tokens; the integer dots of a token group on vpdpbusd or, from MM_AMX_SMALL_TILES_DEFAULT
 * tokens, on the tiles with the tokens as A) instead of amx_kernel: it must give amx_kernel's bits
 * for every (row, token), with either inner variant.
 * Odd row counts (a partial 16-row slab), odd column counts (in blocks), a padded row stride,
 * 1, 2, 3 and 5 threads, m = 2..16 (and 17, 20, 33: groups of <= 16 per slab); against the tiles
 * for the same tokens (mm_set_amx_small_max(0)), against each token alone (amx_gemv1) and
 * against the same tokens inside a larger batch (40 tokens, on the tiles). */
Test(matmul, amx_gemvm_equals_amx)
{
    quant_init();
    if (strcmp(mm_gemm_name(GGML_TYPE_Q8_0), "amx") != 0)
        cr_skip_test("this CPU/OS has no AMX (q8_0 runs on %s): nothing to compare",
                     mm_gemm_name(GGML_TYPE_Q8_0));
    rs = 12;
    struct mm_scratch *s = mm_scratch_new();
    static const int64_t colss[] = {32, 224, 1024}, rowss[] = {1, 15, 16, 17, 37, 161};
    static const int nths[] = {1, 2, 3, 5};
    static const int64_t ms[] = {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 20, 33};
    const int64_t big = 40, nm = (int64_t)(sizeof ms / sizeof ms[0]);
    for (int ti = 0; ti < 4; ti++) {
        int nth = nths[ti];
        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
        for (int ci = 0; ci < 3; ci++)
            for (int ri = 0; ri < 6; ri++) {
                if (nth > 1 && (ri + ci + ti) % 2) continue; /* keep the run short */
                int64_t cols = colss[ci], rows = rowss[ri];
                struct wmat m;
                wmat_make(&m, GGML_TYPE_Q8_0, rows, cols, ri % 2 ? 6 : 0);
                float *x = malloc((size_t)(big * cols) * 4);
                float *ys = malloc((size_t)(big * rows) * 4), *yt = malloc((size_t)(big * rows) * 4),
                      *yb = malloc((size_t)(big * rows) * 4), *y1 = malloc((size_t)rows * 4);
                for (int64_t i = 0; i < big * cols; i++)
                    x[i] = frand() * (i % 5 ? 1.f : 9.f);
                struct err e;
                mm_set_amx_small_max(0);
                cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, x, big, yb, s, &e), 0);
                for (int64_t k = 0; k < 3 * nm; k++) {
                    /* inner variant: token groups on vpdpbusd (99), on the tiles (1), default */
                    static const int tmin[] = {99, 1, -1};
                    int64_t mt = ms[k % nm], t0 = (k * 7) % (big - mt + 1);
                    const float *xm = x + t0 * cols;
                    mm_set_amx_small_max(mt);
                    mm_set_amx_small_tiles(tmin[k / nm]);
                    cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, xm, mt, ys, s, &e), 0);
                    mm_set_amx_small_tiles(-1);
                    mm_set_amx_small_max(0);
                    cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, xm, mt, yt, s, &e), 0);
                    for (int64_t t = 0; t < mt; t++) {
                        mm_set_amx_small_max(-1);
                        cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride,
                                            xm + t * cols, 1, y1, s, &e), 0);
                        for (int64_t r = 0; r < rows; r++) {
                            float got = ys[t * rows + r];
                            cr_assert(memcmp(&got, &yt[t * rows + r], 4) == 0,
                                      "threads %d cols %ld rows %ld m %ld (groups on tiles from %d) token %ld row %ld: %.9g vs tiles %.9g",
                                      nth, (long)cols, (long)rows, (long)mt, tmin[k / nm], (long)t, (long)r, got,
                                      yt[t * rows + r]);
                            cr_assert(memcmp(&got, &yb[(t0 + t) * rows + r], 4) == 0,
                                      "threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs in a batch of %ld %.9g",
                                      nth, (long)cols, (long)rows, (long)mt, (long)t, (long)r, got,
                                      (long)big, yb[(t0 + t) * rows + r]);
                            cr_assert(memcmp(&got, &y1[r], 4) == 0,
                                      "threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs alone %.9g",
                                      nth, (long)cols, (long)rows, (long)mt, (long)t, (long)r, got, y1[r]);
                        }
                    }
                }
                mm_set_amx_small_max(-1);
                free(x), free(ys), free(yt), free(yb), free(y1);
                wmat_free(&m);
            }
        if (tp) tp_free(tp);
    }
    mm_scratch_free(s);
}

/* On the packed VNNI path (CPUs without AMX; forced here with mm_set_amx(0) where there is AMX),
 * q8_0 products of 1..64 tokens run the direct kernel (rows as lanes for m = 1, the slab transposed
 * in registers for m >= 2, no weight panel): every output must have the bits of pack + kernel on
 * the same tokens, of the token alone and of the token inside an 80-token batch (pack + kernel:
 * past the direct kernel's default), for partial slabs (rows 1, 15, 17, 37, 161), a padded
 * stride, 1/2/3/5 threads, and work items that split a matrix anywhere a thread count puts them.
 * Skips with its reason where q8_0 does not run on the packed VNNI GEMM (AVX2 or arm64 CPUs). */
Test(matmul, vnni_small_equals_packed)
{
    quant_init();
    mm_set_amx(0);
    const char *name = mm_gemm_name(GGML_TYPE_Q8_0);
    if (strcmp(name, "vnni") != 0) {
        mm_set_amx(1);
        cr_skip_test("q8_0 runs on %s here, not the packed VNNI GEMM: nothing to compare", name);
    }
    rs = 14;
    struct mm_scratch *s = mm_scratch_new();
    static const int64_t colss[] = {32, 224, 1024}, rowss[] = {1, 15, 16, 17, 37, 161};
    static const int nths[] = {1, 2, 3, 5};
    static const int64_t ms[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 20, 33, 64};
    const int64_t big = 80, nm = (int64_t)(sizeof ms / sizeof ms[0]);
    for (int ti = 0; ti < 4; ti++) {
        int nth = nths[ti];
        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
        for (int ci = 0; ci < 3; ci++)
            for (int ri = 0; ri < 6; ri++) {
                if (nth > 1 && (ri + ci + ti) % 2) continue; /* keep the run short */
                int64_t cols = colss[ci], rows = rowss[ri];
                struct wmat m;
                wmat_make(&m, GGML_TYPE_Q8_0, rows, cols, ri % 2 ? 6 : 0);
                float *x = malloc((size_t)(big * cols) * 4);
                float *ys = malloc((size_t)(big * rows) * 4), *yp = malloc((size_t)(big * rows) * 4),
                      *yb = malloc((size_t)(big * rows) * 4), *y1 = malloc((size_t)rows * 4);
                for (int64_t i = 0; i < big * cols; i++)
                    x[i] = frand() * (i % 5 ? 1.f : 9.f);
                struct err e;
                mm_set_vnni_small_max(-1);
                cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, x, big, yb, s, &e), 0);
                for (int64_t k = 0; k < nm; k++) {
                    int64_t mt = ms[k], t0 = (k * 7) % (big - mt + 1);
                    const float *xm = x + t0 * cols;
                    mm_set_vnni_small_max(mt);
                    cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, xm, mt, ys, s, &e), 0);
                    mm_set_vnni_small_max(0);
                    cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride, xm, mt, yp, s, &e), 0);
                    mm_set_vnni_small_max(-1);
                    for (int64_t t = 0; t < mt; t++) {
                        cr_assert_eq(mm_run(tp, GGML_TYPE_Q8_0, m.q, rows, cols, m.stride,
                                            xm + t * cols, 1, y1, s, &e), 0);
                        for (int64_t r = 0; r < rows; r++) {
                            float got = ys[t * rows + r];
                            cr_assert(memcmp(&got, &yp[t * rows + r], 4) == 0,
                                      "threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs pack + kernel %.9g",
                                      nth, (long)cols, (long)rows, (long)mt, (long)t, (long)r, got,
                                      yp[t * rows + r]);
                            cr_assert(memcmp(&got, &yb[(t0 + t) * rows + r], 4) == 0,
                                      "threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs in a batch of %ld %.9g",
                                      nth, (long)cols, (long)rows, (long)mt, (long)t, (long)r, got,
                                      (long)big, yb[(t0 + t) * rows + r]);
                            cr_assert(memcmp(&got, &y1[r], 4) == 0,
                                      "threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs alone %.9g",
                                      nth, (long)cols, (long)rows, (long)mt, (long)t, (long)r, got, y1[r]);
                        }
                    }
                }
                free(x), free(ys), free(yp), free(yb), free(y1);
                wmat_free(&m);
            }
        if (tp) tp_free(tp);
    }
    mm_set_vnni_small_max(-1);
    mm_set_amx(1);
    mm_scratch_free(s);
}

/* q4_K, q5_K and q6_K products of 1..8 tokens on the packed VNNI path run the direct kernels
 * (m = 1: rows as lanes; m = 2..8: the slab's quants transposed in registers; scales decoded per
 * superblock, no panel): each output must have the bits of pack + kernel on the same tokens, of
 * the token alone and of the token inside a 24-token batch (pack + kernel), for partial slabs, a
 * padded stride, 1 and 3 threads; m = 9 (past the direct kernels: pack + kernel both times) checks
 * the crossover against the token alone. Skips with its reason where these types do not run on
 * the packed VNNI GEMM. */
Test(matmul, vnni_small_kquant_equals_packed)
{
    quant_init();
    mm_set_amx(0);
    const char *name = mm_gemm_name(GGML_TYPE_Q4_K);
    if (strcmp(name, "vnni") != 0) {
        mm_set_amx(1);
        cr_skip_test("q4_K runs on %s here, not the packed VNNI GEMM: nothing to compare", name);
    }
    rs = 15;
    struct mm_scratch *s = mm_scratch_new();
    static const enum ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const int64_t colss[] = {256, 768}, rowss[] = {1, 15, 16, 17, 37, 64};
    static const int64_t ms[] = {1, 2, 3, 5, 7, 8, 9};
    const int64_t big = 24, nm = (int64_t)(sizeof ms / sizeof ms[0]);
    for (int nth = 1; nth <= 3; nth += 2) {
        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
        for (int ti = 0; ti < 3; ti++)
            for (int ci = 0; ci < 2; ci++)
                for (int ri = 0; ri < 6; ri++) {
                    int64_t cols = colss[ci], rows = rowss[ri];
                    struct wmat m;
                    wmat_make(&m, types[ti], rows, cols, ri % 2 ? 10 : 0);
                    float *x = malloc((size_t)(big * cols) * 4), *yb = malloc((size_t)(big * rows) * 4),
                          *ys = malloc((size_t)(16 * rows) * 4), *yp = malloc((size_t)(16 * rows) * 4),
                          *y1 = malloc((size_t)rows * 4);
                    for (int64_t i = 0; i < big * cols; i++)
                        x[i] = frand() * (i % 7 ? 1.f : 5.f);
                    struct err e;
                    mm_set_vnni_small_max(-1);
                    cr_assert_eq(mm_run(tp, types[ti], m.q, rows, cols, m.stride, x, big, yb, s, &e), 0);
                    for (int64_t k = 0; k < nm; k++) {
                        int64_t mt = ms[k], t0 = (k * 5) % (big - mt + 1);
                        const float *xm = x + t0 * cols;
                        mm_set_vnni_small_max(mt);
                        cr_assert_eq(mm_run(tp, types[ti], m.q, rows, cols, m.stride, xm, mt, ys, s, &e), 0);
                        mm_set_vnni_small_max(0);
                        cr_assert_eq(mm_run(tp, types[ti], m.q, rows, cols, m.stride, xm, mt, yp, s, &e), 0);
                        mm_set_vnni_small_max(-1);
                        for (int64_t t = 0; t < mt; t++) {
                            cr_assert_eq(mm_run(tp, types[ti], m.q, rows, cols, m.stride, xm + t * cols, 1, y1, s, &e), 0);
                            for (int64_t r = 0; r < rows; r++) {
                                float got = ys[t * rows + r];
                                cr_assert(memcmp(&got, &yp[t * rows + r], 4) == 0,
                                          "%s threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs pack + kernel %.9g",
                                          quant_traits(types[ti])->name, nth, (long)cols, (long)rows,
                                          (long)mt, (long)t, (long)r, got, yp[t * rows + r]);
                                cr_assert(memcmp(&got, &yb[(t0 + t) * rows + r], 4) == 0,
                                          "%s threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs in a batch of %ld %.9g",
                                          quant_traits(types[ti])->name, nth, (long)cols, (long)rows,
                                          (long)mt, (long)t, (long)r, got, (long)big, yb[(t0 + t) * rows + r]);
                                cr_assert(memcmp(&got, &y1[r], 4) == 0,
                                          "%s threads %d cols %ld rows %ld m %ld token %ld row %ld: %.9g vs alone %.9g",
                                          quant_traits(types[ti])->name, nth, (long)cols, (long)rows,
                                          (long)mt, (long)t, (long)r, got, y1[r]);
                            }
                        }
                    }
                    free(x), free(yb), free(ys), free(yp), free(y1);
                    wmat_free(&m);
                }
        if (tp) tp_free(tp);
    }
    mm_set_vnni_small_max(-1);
    mm_set_amx(1);
    mm_scratch_free(s);
}

/* The vectorized K-quant tile packers (q4_K q5_K q6_K: scales, mins of 16 rows decoded at once per
 * superblock)
 * must give the scalar per-row packer's panels, so every result keeps its bits (batch invariance
 * does not depend on which packer a build uses): odd row counts (a partial tile), a padded
 * stride, 1 and 3 threads, m = 1..9; skips with its reason where the packed AVX-512 GEMM does not
 * run these types. */
Test(matmul, packed_kquant_vector_pack_equals_scalar)
{
    quant_init();
    const char *name = mm_gemm_name(GGML_TYPE_Q4_K);
    if (strcmp(name, "vnni") != 0 && strcmp(name, "amx") != 0)
        cr_skip_test("q4_K runs on %s here, not the packed AVX-512 GEMM: nothing to compare", name);
    rs = 13;
    mm_set_vnni_small_max(0); /* every m through the packer (the direct kernels have no panel) */
    struct mm_scratch *s = mm_scratch_new();
    static const enum ggml_type types[] = {GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    static const int64_t colss[] = {256, 768}, rowss[] = {1, 15, 17, 37};
    static const int64_t ms[] = {1, 2, 3, 8, 9};
    for (int nth = 1; nth <= 3; nth += 2) {
        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
        for (int ti = 0; ti < 3; ti++)
            for (int ci = 0; ci < 2; ci++)
                for (int ri = 0; ri < 4; ri++) {
                    int64_t cols = colss[ci], rows = rowss[ri];
                    struct wmat m;
                    wmat_make(&m, types[ti], rows, cols, ri % 2 ? 10 : 0);
                    float *x = malloc((size_t)(9 * cols) * 4), *yv = malloc((size_t)(9 * rows) * 4),
                          *ys = malloc((size_t)(9 * rows) * 4);
                    for (int64_t i = 0; i < 9 * cols; i++)
                        x[i] = frand() * (i % 7 ? 1.f : 5.f);
                    for (int k = 0; k < 5; k++) {
                        struct err e;
                        int64_t mt = ms[k];
                        mm_set_pack_vec(1);
                        cr_assert_eq(mm_run(tp, types[ti], m.q, rows, cols, m.stride, x, mt, yv, s, &e), 0);
                        mm_set_pack_vec(0);
                        cr_assert_eq(mm_run(tp, types[ti], m.q, rows, cols, m.stride, x, mt, ys, s, &e), 0);
                        mm_set_pack_vec(1);
                        for (int64_t i = 0; i < mt * rows; i++)
                            cr_assert(memcmp(&yv[i], &ys[i], 4) == 0,
                                      "%s threads %d cols %ld rows %ld m %ld: [%ld] %.9g vs scalar pack %.9g",
                                      quant_traits(types[ti])->name, nth, (long)cols, (long)rows,
                                      (long)mt, (long)i, yv[i], ys[i]);
                    }
                    free(x), free(yv), free(ys);
                    wmat_free(&m);
                }
        if (tp) tp_free(tp);
    }
    mm_set_vnni_small_max(-1);
    mm_scratch_free(s);
}

/* The slab layout (matmul_impl.h: a model's matrices repacked at load so each 16-row slab is one
 * sequential stream): mm_slab_block finds every block where the file had it, and every product
 * on a repacked matrix has the bits of the same product on the file's layout — decode (m = 1),
 * the direct few-token kernels, pack + kernel (also forced for few tokens), many-token GEMM, rows
 * past the last full slab, any thread count. On a CPU without the slab path an op marked slab
 * must be refused (ERR_INVALID), never read wrongly. */
Test(matmul, slab_layout_equals_file_layout)
{
    quant_init();
    rs = 23;
    struct mm_scratch *s = mm_scratch_new();
    static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};
    /* 224: 7 q8_0 blocks, so its slabs' panels are only 32-byte aligned (q8_0 only) */
    static const int64_t colss[] = {256, 768, 224}, rowss[] = {16, 17, 37, 64, 161};
    static const int64_t ms[] = {1, 2, 3, 5, 8, 9, 16, 33, 64, 65, 300};
    const int64_t nm = (int64_t)(sizeof ms / sizeof ms[0]), big = 300;
    int compared = 0, refused = 0;
    for (int nth = 1; nth <= 3; nth++) {
        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
        for (int ti = 0; ti < 4; ti++)
            for (int ci = 0; ci < 3; ci++)
                for (int ri = 0; ri < 5; ri++) {
                    const enum ggml_type t = types[ti];
                    const struct quant_traits *tr = quant_traits(t);
                    int64_t cols = colss[ci], rows = rowss[ri];
                    if (cols % tr->blck_size) continue;
                    struct wmat m;
                    wmat_make(&m, t, rows, cols, 0);
                    uint8_t *sl = malloc((size_t)rows * m.stride);
                    mm_slab_repack(t, m.q, rows, cols, sl);
                    uint8_t blk[512];
                    for (int64_t r = 0; r < rows; r++)
                        for (int64_t i = 0; i < cols / tr->blck_size; i++) {
                            mm_slab_block(t, sl, rows, cols, r, i, blk);
                            cr_assert(memcmp(blk, m.q + (size_t)r * m.stride + (size_t)i * tr->type_size,
                                             tr->type_size) == 0,
                                      "%s rows %ld cols %ld: block %ld of row %ld is not where the "
                                      "slab layout says", tr->name, (long)rows, (long)cols, (long)i, (long)r);
                        }
                    float *x = malloc((size_t)(big * cols) * 4), *ya = malloc((size_t)(big * rows) * 4),
                          *yb = malloc((size_t)(big * rows) * 4);
                    for (int64_t i = 0; i < big * cols; i++)
                        x[i] = frand() * (i % 7 ? 1.f : 5.f);
                    struct err e = {0};
                    if (!mm_slab_supported(t)) {
                        struct mm_op o = {.wtype = t, .W = sl, .rows = rows, .cols = cols, .X = x,
                                          .n_tok = 1, .Y = ya, .slab = 1};
                        cr_assert_eq(mm_run_ops(tp, &o, 1, s, &e), -1, "%s: slab op ran without a slab path", tr->name);
                        cr_assert_eq(e.code, ERR_INVALID);
                        refused++;
                    } else {
                        for (int small = 0; small < 2; small++)
                            for (int64_t k = 0; k < nm; k++) {
                                const int64_t mt = ms[k];
                                mm_set_vnni_small_max(small ? -1 : 0);
                                struct mm_op a = {.wtype = t, .W = m.q, .rows = rows, .cols = cols,
                                                  .X = x, .n_tok = mt, .Y = ya},
                                             b = a;
                                b.W = sl, b.slab = 1, b.Y = yb;
                                cr_assert_eq(mm_run_ops(tp, &a, 1, s, &e), 0, "%s", e.msg);
                                cr_assert_eq(mm_run_ops(tp, &b, 1, s, &e), 0, "%s", e.msg);
                                for (int64_t j = 0; j < mt * rows; j++)
                                    cr_assert(memcmp(&ya[j], &yb[j], 4) == 0,
                                              "%s threads %d rows %ld cols %ld m %ld (direct kernels %s) "
                                              "token %ld row %ld: slab %.9g vs file layout %.9g",
                                              tr->name, nth, (long)rows, (long)cols, (long)mt,
                                              small ? "on" : "off", (long)(j / rows), (long)(j % rows),
                                              yb[j], ya[j]);
                                compared++;
                            }
                        mm_set_vnni_small_max(-1);
                    }
                    free(x), free(ya), free(yb), free(sl);
                    wmat_free(&m);
                }
        if (tp) tp_free(tp);
    }
    mm_scratch_free(s);
    cr_log_info("slab layout: %d products compared, %d types refused (no slab path here)", compared, refused);
    cr_assert(compared + refused > 0);
}

/* Decode work items: long row runs, and the call's last op ends in items a quarter as long
 * (tail_split). Whatever the cut, every row of every op is computed exactly once and with the
 * bits a one-thread run gives: Y starts as NaN, two ops share a call (only the second is cut),
 * rows not a multiple of 16, the file and the slab layout, 2 and 3 threads. */
Test(matmul, decode_items_cover_every_row_once)
{
    quant_init();
    rs = 31;
    struct mm_scratch *s = mm_scratch_new();
    static const enum ggml_type types[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_F16};
    static const int64_t rowss[] = {1000, 1536, 2071, 4099};
    const int64_t cols = 256, rows0 = 700;
    int ran = 0;
    for (int ti = 0; ti < 3; ti++)
        for (int ri = 0; ri < 4; ri++)
            for (int slab = 0; slab < 2; slab++) {
                const enum ggml_type t = types[ti];
                if (slab && !mm_slab_supported(t)) continue;
                const int64_t rows = rowss[ri];
                struct wmat a, b;
                wmat_make(&a, t, rows0, cols, 0);
                wmat_make(&b, t, rows, cols, 0);
                uint8_t *sa = a.q, *sb = b.q;
                if (slab) {
                    sa = malloc((size_t)rows0 * a.stride);
                    sb = malloc((size_t)rows * b.stride);
                    mm_slab_repack(t, a.q, rows0, cols, sa);
                    mm_slab_repack(t, b.q, rows, cols, sb);
                }
                for (int64_t n_tok = 1; n_tok <= 3; n_tok += 2) {
                    float *x = malloc((size_t)(n_tok * cols) * 4);
                    for (int64_t i = 0; i < n_tok * cols; i++)
                        x[i] = frand();
                    float *ref = malloc((size_t)(n_tok * (rows0 + rows)) * 4),
                          *y = malloc((size_t)(n_tok * (rows0 + rows)) * 4);
                    for (int nth = 1; nth <= 3; nth++) {
                        struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
                        float *out = nth == 1 ? ref : y;
                        for (int64_t i = 0; i < n_tok * (rows0 + rows); i++)
                            out[i] = NAN;
                        struct mm_op ops[2] = {
                            {.wtype = t, .W = sa, .rows = rows0, .cols = cols, .X = x, .n_tok = n_tok,
                             .Y = out, .y_stride = rows0 + rows, .slab = slab},
                            {.wtype = t, .W = sb, .rows = rows, .cols = cols, .X = x, .n_tok = n_tok,
                             .Y = out + rows0, .y_stride = rows0 + rows, .slab = slab}};
                        struct err e = {0};
                        cr_assert_eq(mm_run_ops(tp, ops, 2, s, &e), 0, "%s", e.msg);
                        for (int64_t i = 0; i < n_tok * (rows0 + rows); i++) {
                            cr_assert(!isnan(out[i]), "%s slab %d rows %ld m %ld %d threads: element %ld not computed",
                                      quant_traits(t)->name, slab, (long)rows, (long)n_tok, nth, (long)i);
                            if (nth > 1)
                                cr_assert(memcmp(&out[i], &ref[i], 4) == 0,
                                          "%s slab %d rows %ld m %ld %d threads: element %ld %.9g vs %.9g",
                                          quant_traits(t)->name, slab, (long)rows, (long)n_tok, nth,
                                          (long)i, out[i], ref[i]);
                        }
                        tp_free(tp);
                        ran++;
                    }
                    free(x), free(ref), free(y);
                }
                if (slab) free(sa), free(sb);
                wmat_free(&a), wmat_free(&b);
            }
    cr_assert_geq(ran, 3 * 4 * 2 * 3, "%d runs", ran);
    mm_scratch_free(s);
}
