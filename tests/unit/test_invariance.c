/* Batch invariance (docs/kernels.md, "Batch invariance"): a token's result must not depend on how
 * many tokens share its forward pass, where a prefill chunk ends, or how many threads run.
 *
 * matmul level: for every weight type the driver computes, Y of m tokens in one call == each token
 * alone, bit for bit, for m = 1..N, for token slices starting anywhere, and for 1, 2, 3 and 5
 * threads, with the driver's default path choice (no forcing).
 * attention: a query's output over the same cache is the same whatever block of queries it is
 * computed in.
 * model level: every position's logits of a prompt fed as one prefill, as several chunks of uneven
 * sizes, token by token, and in lockstep with a second sequence, at 1, 2 and 3 threads, are
 * bit-identical (dense F32, F16, Q8_0, Q4_K_M, TQ1_0, TQ2_0, Q1_0, Q2_0, and MoE Q8_0 models
 * from mkmodel_gen; Gemma 4 dense F32/Q8_0 and MoE Q8_0 from mkmodel_gemma4, also at depth
 * through its wrapped SWA rings). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/kernels/fp16.h"
#include "engine/kv_cache.h"
#include "engine/kernels/matmul.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/format/mkmodel_nanochat.h"
#include "engine/model.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"

static uint64_t rs = 99;
static float frand(void)
{
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rs >> 40) / 16777216.0) * 2 - 1;
}

/* ------------------------------------------------------------ matmul */

static const enum ggml_type k_types[] = {
    GGML_TYPE_F32,  GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0,
    GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
    GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K};

#define MM_N 40 /* tokens: past the 4-token GEMM threshold, 8-token and 16-token groups */

static void mm_case(enum ggml_type t, int64_t rows, int64_t cols)
{
    const struct quant_traits *tr = quant_traits(t);
    size_t stride = quant_row_size(t, cols);
    uint8_t *W = malloc((size_t)rows * stride);
    float *row = malloc((size_t)cols * 4);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++)
            row[c] = frand() * (0.2f + (float)(r % 5) * 0.2f);
        tr->from_float_ref(row, W + (size_t)r * stride, cols);
    }
    float *X = malloc((size_t)(MM_N * cols) * 4);
    for (int64_t i = 0; i < MM_N * cols; i++)
        X[i] = frand() * 3;
    float *ref = malloc((size_t)(MM_N * rows) * 4), *Y = malloc((size_t)(MM_N * rows) * 4);
    struct mm_scratch *s = mm_scratch_new();
    struct err e;
    /* reference: every token alone, one thread */
    for (int64_t k = 0; k < MM_N; k++)
        cr_assert_eq(mm_run(NULL, t, W, rows, cols, 0, X + k * cols, 1, ref + k * rows, s, &e), 0,
                     "%s", e.msg);
    static const int threads[] = {1, 2, 3, 5};
    for (int ti = 0; ti < 4; ti++) {
        struct threadpool *tp = tp_new(threads[ti]);
        cr_assert(tp);
        /* m tokens from token 0, and a slice [a, a + m) starting elsewhere */
        for (int64_t m = 1; m <= MM_N; m++) {
            int64_t a = m < MM_N ? (m * 7) % (MM_N - m + 1) : 0;
            for (int pass = 0; pass < 2; pass++) {
                int64_t off = pass ? a : 0;
                for (int64_t i = 0; i < m * rows; i++)
                    Y[i] = NAN;
                cr_assert_eq(mm_run(tp, t, W, rows, cols, 0, X + off * cols, m, Y, s, &e), 0, "%s",
                             e.msg);
                for (int64_t k = 0; k < m; k++)
                    for (int64_t r = 0; r < rows; r++) {
                        float g = Y[k * rows + r], w = ref[(off + k) * rows + r];
                        cr_assert(memcmp(&g, &w, 4) == 0,
                                  "%s %ldx%ld, %d threads: token %ld of a %ld-token call (offset "
                                  "%ld), row %ld: %.9g, alone %.9g",
                                  tr->name, (long)rows, (long)cols, threads[ti], (long)k, (long)m,
                                  (long)off, (long)r, g, w);
                    }
            }
        }
        tp_free(tp);
    }
    mm_scratch_free(s);
    free(W), free(row), free(X), free(ref), free(Y);
}

Test(invariance, matmul_every_type_m_slices_threads)
{
    quant_init();
    for (size_t i = 0; i < sizeof k_types / sizeof k_types[0]; i++) {
        enum ggml_type t = k_types[i];
        int big = quant_traits(t)->blck_size >= 256;
        /* rows: odd and past one 128-row GEMV item; cols: several blocks, odd block counts */
        mm_case(t, 37, big ? 768 : 224);
        mm_case(t, 261, big ? 512 : 96);
    }
}

/* The small-m shapes a batch or a verify runs (m = 2..16 tokens in groups of <= 8, docs/kernels.md)
 * with what an MoE layer and a strided view add: tokens gathered by x_idx and scattered by y_idx
 * in a shuffled order, a row stride wider than the row, a long K (129 blocks; q8_0 also 257) and
 * several ops sharing one activation set in one call. Every output must be the bits of that token
 * alone through a plain one-token call, on 1 and 3 threads. */
Test(invariance, matmul_small_m_gathered_strided_long_k)
{
    quant_init();
    static const enum ggml_type ty[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                                        GGML_TYPE_F16, GGML_TYPE_Q5_K};
    static const int64_t colss[] = {4128, 8224};
    const int64_t rows = 301, NT = 16;
    struct mm_scratch *s = mm_scratch_new();
    struct err e;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++)
        for (int ci = 0; ci < (ty[ti] == GGML_TYPE_Q8_0 ? 2 : 1); ci++) {
            const struct quant_traits *tr = quant_traits(ty[ti]);
            int64_t cols = colss[ci] / tr->blck_size * tr->blck_size;
            size_t rsz = quant_row_size(ty[ti], cols), stride = rsz + 64;
            uint8_t *W = calloc((size_t)rows, stride);
            float *row = malloc((size_t)cols * 4), *X = malloc((size_t)(NT * cols) * 4);
            float *ref = malloc((size_t)(NT * rows) * 4), *Y = malloc((size_t)(2 * NT * rows) * 4);
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t c = 0; c < cols; c++)
                    row[c] = frand() * (0.5f + (float)(r % 3));
                tr->from_float_ref(row, W + (size_t)r * stride, cols);
            }
            for (int64_t i = 0; i < NT * cols; i++)
                X[i] = frand() * 2;
            for (int64_t k = 0; k < NT; k++)
                cr_assert_eq(mm_run(NULL, ty[ti], W, rows, cols, stride, X + k * cols, 1,
                                    ref + k * rows, s, &e), 0, "%s", e.msg);
            for (int nth = 1; nth <= 3; nth += 2) {
                struct threadpool *tp = nth > 1 ? tp_new(nth) : NULL;
                for (int64_t m = 2; m <= NT; m++) {
                    int32_t xi[16], yi[16];
                    for (int64_t k = 0; k < m; k++) {
                        xi[k] = (int32_t)((k * 7 + m) % NT); /* distinct: 7 is prime to 16 */
                        yi[k] = (int32_t)(m - 1 - k);
                    }
                    for (int64_t i = 0; i < 2 * NT * rows; i++)
                        Y[i] = NAN;
                    /* two ops on the same gathered X: rows [0, 150) and [150, rows) */
                    struct mm_op ops[2];
                    for (int o = 0; o < 2; o++) {
                        int64_t r0 = o ? 150 : 0;
                        ops[o] = (struct mm_op){.wtype = ty[ti],
                                                .W = W + (size_t)r0 * stride,
                                                .rows = o ? rows - 150 : 150,
                                                .cols = cols,
                                                .w_stride = stride,
                                                .X = X,
                                                .x_idx = xi,
                                                .n_tok = m,
                                                .Y = Y + r0,
                                                .y_stride = rows,
                                                .y_idx = yi};
                    }
                    cr_assert_eq(mm_run_ops(tp, ops, 2, s, &e), 0, "%s", e.msg);
                    for (int64_t k = 0; k < m; k++)
                        for (int64_t r = 0; r < rows; r++) {
                            float g = Y[yi[k] * rows + r], w = ref[xi[k] * rows + r];
                            cr_assert(memcmp(&g, &w, 4) == 0,
                                      "%s cols %ld, %d threads, m = %ld: token %d row %ld: %.9g, "
                                      "alone %.9g",
                                      tr->name, (long)cols, nth, (long)m, xi[k], (long)r, g, w);
                        }
                }
                tp_free(tp);
            }
            free(W), free(row), free(X), free(ref), free(Y);
        }
    mm_scratch_free(s);
}

/* The knobs the startup calibration sets (prefetch distance, rows per decode work item) move data
 * and split work, never arithmetic: every setting of the calibration's candidate sets (and beyond)
 * gives the bits of a one-thread, default-setting run, for m = 1 and m = 5, on 2 and 3 threads. */
Test(invariance, matmul_stream_tuning_settings)
{
    quant_init();
    static const enum ggml_type ty[] = {GGML_TYPE_Q8_0, GGML_TYPE_Q4_K, GGML_TYPE_Q6_K,
                                        GGML_TYPE_F16,  GGML_TYPE_BF16, GGML_TYPE_F32};
    static const int pfs[] = {0, 1024, 4096, 16384, 65536}, rows_set[] = {16, 32, 128, 512};
    const int64_t rows = 1043, cols = 512, M = 5;
    struct mm_scratch *s = mm_scratch_new();
    struct err e;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
        const struct quant_traits *tr = quant_traits(ty[ti]);
        size_t stride = quant_row_size(ty[ti], cols);
        uint8_t *W = malloc((size_t)rows * stride);
        float *row = malloc((size_t)cols * 4), *X = malloc((size_t)(M * cols) * 4);
        float *ref = malloc((size_t)(M * rows) * 4), *Y = malloc((size_t)(M * rows) * 4);
        for (int64_t r = 0; r < rows; r++) {
            for (int64_t c = 0; c < cols; c++)
                row[c] = frand();
            tr->from_float_ref(row, W + (size_t)r * stride, cols);
        }
        for (int64_t i = 0; i < M * cols; i++)
            X[i] = frand() * 2;
        mm_set_stream_tuning(4096, 128);
        for (int64_t k = 0; k < M; k++)
            cr_assert_eq(mm_run(NULL, ty[ti], W, rows, cols, 0, X + k * cols, 1, ref + k * rows, s, &e), 0,
                         "%s", e.msg);
        for (int nth = 2; nth <= 3; nth++) {
            struct threadpool *tp = tp_new(nth);
            cr_assert(tp);
            for (size_t pi = 0; pi < sizeof pfs / sizeof pfs[0]; pi++)
                for (size_t ri = 0; ri < sizeof rows_set / sizeof rows_set[0]; ri++) {
                    mm_set_stream_tuning(pfs[pi], rows_set[ri]);
                    mm_set_pf_slabs((int)(pi + ri) % 5); /* AVX-512 direct kernels: 0..4 slabs */
                    for (int64_t m = 1; m <= M; m += M - 1) {
                        for (int64_t i = 0; i < m * rows; i++)
                            Y[i] = NAN;
                        cr_assert_eq(mm_run(tp, ty[ti], W, rows, cols, 0, X, m, Y, s, &e), 0, "%s", e.msg);
                        cr_assert(memcmp(Y, ref, (size_t)(m * rows) * 4) == 0,
                                  "%s: prefetch %d / %d slabs, %d-row items, %d threads, m = %ld differs",
                                  tr->name, pfs[pi], (int)(pi + ri) % 5, rows_set[ri], nth, (long)m);
                    }
                }
            tp_free(tp);
        }
        free(W), free(row), free(X), free(ref), free(Y);
    }
    mm_set_stream_tuning(4096, 128);
    mm_set_pf_slabs(1);
    mm_scratch_free(s);
}

/* ------------------------------------------------------------ attention */

/* Query i (position i) over a cache of n positions: the same output whatever block [q0, q1) of
 * queries it runs in (1 query, a 16-query block, a block straddling a key tile). */
Test(invariance, attention_query_blocks)
{
    ops_init();
    const int hd = 64, n_head = 8, n_head_kv = 2, n = 150, KT = OPS_ATTN_KT;
    int cap = (n + KT - 1) / KT * KT;
    int64_t hs = (int64_t)cap * hd;
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(hs * n_head_kv)),
             *v = malloc(sizeof(uint16_t) * (size_t)(hs * n_head_kv));
    for (int64_t i = 0; i < hs * n_head_kv; i++) {
        k[i] = f32_to_fp16(frand());
        v[i] = f32_to_fp16(frand());
    }
    int qd = n_head * hd;
    float *q = malloc(sizeof(float) * (size_t)(n * qd)), *o1 = malloc(sizeof(float) * (size_t)(n * qd)),
          *o2 = malloc(sizeof(float) * (size_t)(n * qd));
    for (int64_t i = 0; i < (int64_t)n * qd; i++)
        q[i] = frand() * 4;
    int32_t pos[150];
    for (int i = 0; i < n; i++)
        pos[i] = i;
    float *ws = aligned_alloc(64, (ops_attn_scratch_floats() * sizeof(float) + 63) / 64 * 64);
    struct ops_attn a = {.q = q, .q_stride = qd, .out_stride = qd, .pos = pos, .n_q = n, .k = k,
                         .v = v, .kv_head_stride = hs, .n_head = n_head, .n_head_kv = n_head_kv,
                         .head_dim = hd, .scale = 1.0f / sqrtf((float)hd)};
    /* reference: one query at a time */
    a.out = o1;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_head_kv; h++)
            ops_attn_run(&a, h, i, i + 1, ws);
    static const int blocks[] = {2, 3, 5, 16, 7};
    for (int bi = 0; bi < 5; bi++) {
        a.out = o2;
        for (int q0 = bi; q0 < n; q0 += blocks[bi]) {
            int q1 = q0 + blocks[bi] < n ? q0 + blocks[bi] : n;
            for (int h = 0; h < n_head_kv; h++)
                ops_attn_run(&a, h, q0, q1, ws);
        }
        for (int64_t i = (int64_t)bi * qd; i < (int64_t)n * qd; i++)
            cr_assert(memcmp(&o1[i], &o2[i], 4) == 0,
                      "%s attention, blocks of %d: query %ld element %ld: %.9g, alone %.9g",
                      ops_isa(), blocks[bi], (long)(i / qd), (long)(i % qd), o2[i], o1[i]);
    }
    free(k), free(v), free(q), free(o1), free(o2), free(ws);
}

/* ------------------------------------------------------------ model */

#define NT 100 /* prompt: > one 64-key tile, several 16-query blocks */

static const struct mkmodel_shape k_dense = {
    .name = "inv-dense", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
    .head_dim = 64, .n_vocab = 320, .n_ctx = 512, .tied = false, .rope_base = 1e6f,
    .norm_eps = 1e-6f};
static const struct mkmodel_shape k_moe = {
    .name = "inv-moe", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
    .head_dim = 64, .n_vocab = 320, .n_ctx = 512, .tied = true, .n_expert = 6,
    .n_expert_used = 2, .n_ff_exp = 256, .rope_base = 1e6f, .norm_eps = 1e-6f};

static int32_t tok_at(int i, int V)
{
    return (int32_t)((i * 7919 + 13) % V);
}

/* Feeds tokens [0, NT) into kv in chunks (chunk[] sizes summing to NT; NULL: one token per
 * forward), all logits wanted, into out (NT x V). */
static void feed(struct model *m, struct kv_cache *kv, const int *chunk, float *out)
{
    int V = model_config(m)->n_vocab;
    int32_t tok[NT], pos[NT];
    bool want[NT];
    struct kv_cache *seq[NT];
    for (int i = 0; i < NT; i++)
        tok[i] = tok_at(i, V), pos[i] = i, want[i] = true, seq[i] = kv;
    struct err e = {0};
    for (int i = 0, c = 0; i < NT; c++) {
        int n = chunk ? chunk[c] : 1;
        struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .want_logits = want + i,
                          .n = n};
        cr_assert(model_forward(m, &b, out + (int64_t)i * V, &e) == 0, "%s", e.msg);
        i += n;
    }
}

/* Two sequences in lockstep: every forward holds one token of each (the m = 2 decode batch). */
static void feed_lockstep(struct model *m, struct kv_cache *a, struct kv_cache *b, float *oa,
                          float *ob)
{
    int V = model_config(m)->n_vocab;
    float *two = malloc(sizeof(float) * (size_t)V * 2);
    struct err e = {0};
    for (int i = 0; i < NT; i++) {
        int32_t tok[2] = {tok_at(i, V), tok_at(i, V)}, pos[2] = {i, i};
        bool want[2] = {true, true};
        struct kv_cache *seq[2] = {a, b};
        struct batch bt = {.token = tok, .pos = pos, .seq = seq, .want_logits = want, .n = 2};
        cr_assert(model_forward(m, &bt, two, &e) == 0, "%s", e.msg);
        memcpy(oa + (int64_t)i * V, two, sizeof(float) * (size_t)V);
        memcpy(ob + (int64_t)i * V, two + V, sizeof(float) * (size_t)V);
    }
    free(two);
}

/* The continuous batch's shape (serve/backend_llm, docs/batching.md): a decodes one token per
 * forward from the start, b joins at step 5 and prefills 7 tokens per forward behind a's token,
 * c joins at step 30 decoding one per forward; each forward holds whatever is live. */
static void feed_mixed(struct model *m, struct kv_cache *kv[3], float *out[3])
{
    int V = model_config(m)->n_vocab;
    static const int start[3] = {0, 5, 30}, per[3] = {1, 7, 1};
    int at[3] = {0, 0, 0};
    float *rows = malloc(sizeof(float) * (size_t)V * 16);
    struct err e = {0};
    for (int step = 0; at[0] < NT || at[1] < NT || at[2] < NT; step++) {
        int32_t tok[16], pos[16];
        bool want[16];
        struct kv_cache *seq[16];
        int n = 0, who[16], wpos[16], nw = 0;
        for (int s = 0; s < 3; s++) {
            if (step < start[s] || at[s] >= NT) continue;
            for (int k = 0; k < per[s] && at[s] < NT; k++, at[s]++) {
                tok[n] = tok_at(at[s], V), pos[n] = at[s], want[n] = true, seq[n] = kv[s];
                who[nw] = s, wpos[nw++] = at[s], n++;
            }
        }
        struct batch bt = {.token = tok, .pos = pos, .seq = seq, .want_logits = want, .n = n};
        cr_assert(model_forward(m, &bt, rows, &e) == 0, "%s", e.msg);
        for (int r = 0; r < nw; r++)
            memcpy(out[who[r]] + (int64_t)wpos[r] * V, rows + (int64_t)r * V, sizeof(float) * (size_t)V);
    }
    free(rows);
}

static void expect_same(const float *want, const float *got, int V, const char *what, int threads,
                        const char *model)
{
    for (int64_t i = 0; i < (int64_t)NT * V; i++)
        if (memcmp(&want[i], &got[i], 4)) {
            cr_assert(0, "%s, %d threads, %s: position %ld logit %ld = %.9g, token by token on 1 "
                         "thread %.9g",
                      model, threads, what, (long)(i / V), (long)(i % V), got[i], want[i]);
        }
}

static void model_case_at(const char *path, const char *name, int V);

static void model_case(const struct mkmodel_shape *sh, enum mkmodel_type type)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/lms-inv-%d-%s.gguf", (int)getpid(), mkmodel_type_name(type));
    struct err e = {0};
    cr_assert(mkmodel_write(sh, type, 4242, NULL, path, &e) == 0, "%s", e.msg);
    char name[64];
    snprintf(name, sizeof name, "%s %s", sh->name, mkmodel_type_name(type));
    model_case_at(path, name, (int)sh->n_vocab);
    unlink(path);
}

/* A nanochat checkpoint directory (docs/nanochat.md): sliding windows, the smear's previous token
 * from the cache's row tokens, value embeddings; the same batch shapes as the GGUF families. */
static void nanochat_case(const char *shape, const char *type)
{
    char dir[96], f[160];
    snprintf(dir, sizeof dir, "/tmp/lms-inv-%d-%s-%s", (int)getpid(), shape, type);
    struct err e = {0};
    cr_assert(mkmodel_nanochat_write(shape, type, 4242, dir, &e) == 0, "%s", e.msg);
    char name[64];
    snprintf(name, sizeof name, "%s %s", shape, type);
    model_case_at(dir, name, 500);
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json"};
    for (int i = 0; i < 3; i++) snprintf(f, sizeof f, "%s/%s", dir, files[i]), unlink(f);
    rmdir(dir);
}

static void model_case_at(const char *path, const char *name, int V)
{
    struct err e = {0};
    size_t bytes = sizeof(float) * (size_t)V * NT;
    float *ref = malloc(bytes), *got = malloc(bytes), *got2 = malloc(bytes);
    static const int one[] = {NT};
    static const int uneven[] = {1, 3, 16, 17, 5, 2, 56};    /* sums to NT */
    static const int fours[] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4,
                                4, 4, 4};                     /* the smallest GEMM chunks */
    static const int threes[] = {3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
                                 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1}; /* the largest GEMV chunks */
    for (int threads = 1; threads <= 3; threads++) {
        struct model_opts o = {.n_threads = threads};
        struct model *m = model_load(path, &o, &e);
        cr_assert(m, "load %s: %s", name, e.msg);
        struct kv_cache *kv = kv_new(m, 128, &e), *kv2 = kv_new(m, 128, &e);
        cr_assert(kv && kv2, "%s", e.msg);
        if (threads == 1) feed(m, kv, NULL, ref);
        struct {
            const int *chunk;
            const char *what;
        } modes[] = {{NULL, "token by token"},
                     {one, "one prefill"},
                     {uneven, "chunks 1,3,16,17,5,2,56"},
                     {fours, "chunks of 4"},
                     {threes, "chunks of 3"}};
        for (size_t k = threads == 1 ? 1 : 0; k < sizeof modes / sizeof modes[0]; k++) {
            kv_truncate(kv, 0);
            feed(m, kv, modes[k].chunk, got);
            expect_same(ref, got, V, modes[k].what, threads, name);
        }
        kv_truncate(kv, 0);
        feed_lockstep(m, kv, kv2, got, got2);
        expect_same(ref, got, V, "lockstep with a second sequence (1st)", threads, name);
        expect_same(ref, got2, V, "lockstep with a second sequence (2nd)", threads, name);
        struct kv_cache *kv3 = kv_new(m, 128, &e);
        cr_assert(kv3, "%s", e.msg);
        float *got3 = malloc(sizeof(float) * (size_t)NT * V);
        kv_truncate(kv, 0);
        kv_truncate(kv2, 0);
        feed_mixed(m, (struct kv_cache *[3]){kv, kv2, kv3}, (float *[3]){got, got2, got3});
        expect_same(ref, got, V, "mixed batch: decoding from the start", threads, name);
        expect_same(ref, got2, V, "mixed batch: prefilling in 7s beside decodes", threads, name);
        expect_same(ref, got3, V, "mixed batch: decoding, joined at step 30", threads, name);
        free(got3);
        kv_free(kv3);
        kv_free(kv);
        kv_free(kv2);
        model_free(m);
    }
    free(ref), free(got), free(got2);
}

/* Gemma 4 (mkmodel_gemma4.c's tiny geometry, a small vocabulary): SWA layers with a 32-key
 * window (its mask inside the 100-token prompt), the V-less global layer, partial RoPE; dense and
 * MoE (router, merged gate_up experts, the dense FFN beside) */
static const struct mkmodel_shape *gemma4_shape(const char *name)
{
    static struct mkmodel_shape s[2];
    int i = strcmp(name, "gemma4-tiny") == 0 ? 0 : 1;
    const struct mkmodel_shape *base = mkmodel_shape_find(name);
    cr_assert(base, "no shape %s", name);
    s[i] = *base;
    s[i].n_vocab = 320;
    return &s[i];
}

Test(invariance, model_gemma4_f32) { model_case(gemma4_shape("gemma4-tiny"), MKMODEL_F32); }
Test(invariance, model_gemma4_q8_0) { model_case(gemma4_shape("gemma4-tiny"), MKMODEL_Q8_0); }
Test(invariance, model_gemma4_moe_q8_0) { model_case(gemma4_shape("gemma4-moe-tiny"), MKMODEL_Q8_0); }
Test(invariance, model_dense_f32) { model_case(&k_dense, MKMODEL_F32); }
Test(invariance, model_nanochat_f32) { nanochat_case("nanochat-tiny", "f32"); }
Test(invariance, model_nanochat_bf16) { nanochat_case("nanochat-tiny", "bf16"); }
Test(invariance, model_nanochat_old_f32) { nanochat_case("nanochat-tiny-old", "f32"); }
Test(invariance, model_dense_f16) { model_case(&k_dense, MKMODEL_F16); }
Test(invariance, model_dense_q8_0) { model_case(&k_dense, MKMODEL_Q8_0); }
Test(invariance, model_dense_q4_k_m) { model_case(&k_dense, MKMODEL_Q4_K_M); }
Test(invariance, model_moe_q8_0) { model_case(&k_moe, MKMODEL_Q8_0); }
/* the low-bit types (every projection of k_dense is one of them; embedding / output Q8_0) */
Test(invariance, model_dense_tq1_0) { model_case(&k_dense, MKMODEL_TQ1_0); }
Test(invariance, model_dense_tq2_0) { model_case(&k_dense, MKMODEL_TQ2_0); }
Test(invariance, model_dense_q1_0) { model_case(&k_dense, MKMODEL_Q1_0); }
Test(invariance, model_dense_q2_0) { model_case(&k_dense, MKMODEL_Q2_0); }

/* ------------------------------------------------------------ depth */

/* The same rules deep in the context: a cache of DP positions (24 key tiles), filled as one prefill
 * or as uneven chunks (1000 + 1 + 499 + ...), then DN positions after it fed token by token, as one
 * chunk, as chunks of 1,16,23 and in lockstep with a second sequence holding the same prefix — the DN
 * positions' logits bit-identical at 1, 2 and 3 threads. */
#define DP 1500
#define DN 40

static const struct mkmodel_shape k_deep = {
    .name = "inv-deep", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
    .head_dim = 64, .n_vocab = 320, .n_ctx = 2048, .tied = false, .rope_base = 1e6f,
    .norm_eps = 1e-6f};

/* Tokens [start, start + n) in chunks (NULL: one token per forward); logits of all of them into
 * out (n x V) when out is not NULL. */
static void feed_range(struct model *m, struct kv_cache *kv, int start, int n, const int *chunk,
                       float *out)
{
    int V = model_config(m)->n_vocab;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
    bool *want = malloc(sizeof(bool) * (size_t)n);
    struct kv_cache **seq = malloc(sizeof(*seq) * (size_t)n);
    for (int i = 0; i < n; i++)
        tok[i] = tok_at(start + i, V), pos[i] = start + i, want[i] = out != NULL, seq[i] = kv;
    struct err e = {0};
    for (int i = 0, c = 0; i < n; c++) {
        int k = chunk ? chunk[c] : 1;
        struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .want_logits = want + i,
                          .n = k};
        cr_assert(model_forward(m, &b, out ? out + (int64_t)i * V : NULL, &e) == 0, "%s", e.msg);
        i += k;
    }
    free(tok), free(pos), free(want), free(seq);
}

static void expect_same_n(const float *want, const float *got, int64_t n, const char *what,
                          int threads)
{
    for (int64_t i = 0; i < n; i++)
        cr_assert(memcmp(&want[i], &got[i], 4) == 0,
                  "depth %d, %d threads, %s: element %ld = %.9g, token by token on 1 thread %.9g",
                  DP, threads, what, (long)i, got[i], want[i]);
}

static void depth_case(const struct mkmodel_shape *sh)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/lms-inv-deep-%d.gguf", (int)getpid());
    struct err e = {0};
    cr_assert(mkmodel_write(sh, MKMODEL_Q8_0, 4243, NULL, path, &e) == 0, "%s", e.msg);
    int V = (int)sh->n_vocab;
    size_t bytes = sizeof(float) * (size_t)V * DN;
    float *ref = malloc(bytes), *got = malloc(bytes), *two = malloc(sizeof(float) * (size_t)V * 2);
    static const int prefix_one[] = {DP}, prefix_uneven[] = {1000, 1, 499};
    static const int one[] = {DN}, uneven[] = {1, 16, 23};
    for (int threads = 1; threads <= 3; threads++) {
        struct model_opts o = {.n_threads = threads};
        struct model *m = model_load(path, &o, &e);
        cr_assert(m, "%s", e.msg);
        struct kv_cache *kv = kv_new(m, DP + DN, &e), *kv2 = kv_new(m, DP + DN, &e);
        cr_assert(kv && kv2, "%s", e.msg);
        if (threads == 1) {
            feed_range(m, kv, 0, DP, prefix_one, NULL);
            feed_range(m, kv, DP, DN, NULL, ref);
        }
        for (int p = 0; p < 2; p++) {
            kv_truncate(kv, 0);
            feed_range(m, kv, 0, DP, p ? prefix_uneven : prefix_one, NULL);
            const char *pn = p ? "prefix 1000+1+499" : "prefix in one prefill";
            char what[96];
            kv_truncate(kv, DP);
            feed_range(m, kv, DP, DN, NULL, got);
            snprintf(what, sizeof what, "%s, token by token", pn);
            expect_same_n(ref, got, (int64_t)DN * V, what, threads);
            kv_truncate(kv, DP);
            feed_range(m, kv, DP, DN, one, got);
            snprintf(what, sizeof what, "%s, one chunk of %d", pn, DN);
            expect_same_n(ref, got, (int64_t)DN * V, what, threads);
            kv_truncate(kv, DP);
            feed_range(m, kv, DP, DN, uneven, got);
            snprintf(what, sizeof what, "%s, chunks 1,16,23", pn);
            expect_same_n(ref, got, (int64_t)DN * V, what, threads);
        }
        /* lockstep: both sequences hold the same prefix; each step carries one token of each */
        kv_truncate(kv, 0);
        feed_range(m, kv, 0, DP, prefix_one, NULL);
        feed_range(m, kv2, 0, DP, prefix_uneven, NULL);
        for (int i = 0; i < DN; i++) {
            int32_t tok[2] = {tok_at(DP + i, V), tok_at(DP + i, V)}, pos[2] = {DP + i, DP + i};
            bool want[2] = {true, true};
            struct kv_cache *seq[2] = {kv, kv2};
            struct batch b = {.token = tok, .pos = pos, .seq = seq, .want_logits = want, .n = 2};
            cr_assert(model_forward(m, &b, two, &e) == 0, "%s", e.msg);
            expect_same_n(ref + (int64_t)i * V, two, V, "lockstep (1st)", threads);
            expect_same_n(ref + (int64_t)i * V, two + V, V, "lockstep (2nd)", threads);
        }
        kv_free(kv);
        kv_free(kv2);
        model_free(m);
    }
    unlink(path);
    free(ref), free(got), free(two);
}

Test(invariance, model_at_depth_q8_0) { depth_case(&k_deep); }
/* Gemma 4 at depth: its SWA layers' rings (128 rows for the 32-key window) have wrapped ~12 times */
Test(invariance, model_gemma4_at_depth_q8_0) { depth_case(gemma4_shape("gemma4-tiny")); }

/* attention kernel alone deep in a cache: queries at positions 2000..2099 over 2100 keys (33 tiles)
 * give the same bits alone and in blocks of 2, 5, 16 (AVX2 / AVX-512: the 2-row and the wider
 * register blocks) */
/* Split-K (ops.h): a unit's key chunks computed one by one, possibly on other threads, and merged
 * by ops_attn_merge give the bits of ops_attn_run of the whole unit, for decode units (1 query)
 * and prefill blocks, at depths of 1, 2 and 4 chunks plus a partial one; and the chunk count is
 * the same however the queries are blocked (a query alone == inside a 16-query block). */
Test(invariance, attention_split_k_chunks_merge_bitwise)
{
    ops_init();
    const int hd = 128, n_head = 16, n_head_kv = 8, n = 4200, KT = OPS_ATTN_KT;
    int cap = (n + KT - 1) / KT * KT;
    int64_t hs = (int64_t)cap * hd;
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(hs * n_head_kv)),
             *v = malloc(sizeof(uint16_t) * (size_t)(hs * n_head_kv));
    for (int64_t i = 0; i < hs * n_head_kv; i++) {
        k[i] = f32_to_fp16(frand());
        v[i] = f32_to_fp16(frand());
    }
    const int nq = 16, qd = n_head * hd;
    float *q = malloc(sizeof(float) * (size_t)(nq * qd)), *o1 = malloc(sizeof(float) * (size_t)(nq * qd)),
          *o2 = malloc(sizeof(float) * (size_t)(nq * qd));
    for (int64_t i = 0; i < (int64_t)nq * qd; i++)
        q[i] = frand() * 4;
    float *ws = aligned_alloc(64, (ops_attn_scratch_floats() * sizeof(float) + 63) / 64 * 64);
    static const int depths[] = {700, 1023, 1024, 2047, 2500, 4100};
    for (int di = 0; di < 6; di++) {
        int32_t pos[16];
        for (int i = 0; i < nq; i++)
            pos[i] = depths[di] - nq + 1 + i; /* the block ends at depths[di] */
        struct ops_attn a = {.q = q, .q_stride = qd, .out = o1, .out_stride = qd, .pos = pos,
                             .n_q = nq, .k = k, .v = v, .kv_head_stride = hs, .n_head = n_head,
                             .n_head_kv = n_head_kv, .head_dim = hd,
                             .scale = 1.0f / sqrtf((float)hd)};
        for (int blk = 1; blk <= nq; blk += nq - 1) { /* decode units of 1 query; a 16-query block */
            for (int q0 = 0; q0 < nq; q0 += blk)
                for (int h = 0; h < n_head_kv; h++) {
                    int q1 = q0 + blk;
                    a.out = o1;
                    ops_attn_run(&a, h, q0, q1, ws);
                    int nc = ops_attn_chunks(&a, q1);
                    cr_assert_eq(nc, pos[q1 - 1] / OPS_ATTN_KC + 1);
                    size_t sf = ops_attn_state_floats(&a, q0, q1);
                    float *st = malloc(sizeof(float) * sf * (size_t)nc);
                    for (int c = nc - 1; c >= 0; c--) /* any order: each chunk is independent */
                        ops_attn_run_chunk(&a, h, q0, q1, c, st + (size_t)c * sf, ws);
                    a.out = o2;
                    ops_attn_merge(&a, h, q0, q1, nc, st, sf);
                    free(st);
                    for (int i = q0; i < q1; i++)
                        for (int g = 0; g < n_head / n_head_kv; g++) {
                            int64_t at = (int64_t)i * qd + (int64_t)(h * (n_head / n_head_kv) + g) * hd;
                            cr_assert(memcmp(o1 + at, o2 + at, sizeof(float) * (size_t)hd) == 0,
                                      "depth %d, block %d, query %d, head %d: split-K differs",
                                      depths[di], blk, i, h * (n_head / n_head_kv) + g);
                        }
                }
            /* the 16-query block == its queries alone (o1 now holds the block's outputs) */
        }
        float *alone = malloc(sizeof(float) * (size_t)(nq * qd));
        a.out = alone;
        for (int i = 0; i < nq; i++)
            for (int h = 0; h < n_head_kv; h++)
                ops_attn_run(&a, h, i, i + 1, ws);
        a.out = o1;
        for (int h = 0; h < n_head_kv; h++)
            ops_attn_run(&a, h, 0, nq, ws);
        cr_assert(memcmp(alone, o1, sizeof(float) * (size_t)(nq * qd)) == 0,
                  "depth %d: a query alone differs from the same query in a 16-query block", depths[di]);
        free(alone);
    }
    free(k), free(v), free(q), free(o1), free(o2), free(ws);
}

Test(invariance, attention_query_blocks_at_depth)
{
    ops_init();
    const int hd = 128, n_head = 4, n_head_kv = 2, n = 2100, nq = 100, KT = OPS_ATTN_KT;
    int cap = (n + KT - 1) / KT * KT;
    int64_t hs = (int64_t)cap * hd;
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(hs * n_head_kv)),
             *v = malloc(sizeof(uint16_t) * (size_t)(hs * n_head_kv));
    for (int64_t i = 0; i < hs * n_head_kv; i++) {
        k[i] = f32_to_fp16(frand());
        v[i] = f32_to_fp16(frand());
    }
    int qd = n_head * hd;
    float *q = malloc(sizeof(float) * (size_t)(nq * qd)), *o1 = malloc(sizeof(float) * (size_t)(nq * qd)),
          *o2 = malloc(sizeof(float) * (size_t)(nq * qd));
    for (int64_t i = 0; i < (int64_t)nq * qd; i++)
        q[i] = frand() * 4;
    int32_t pos[100];
    for (int i = 0; i < nq; i++)
        pos[i] = n - nq + i;
    float *ws = aligned_alloc(64, (ops_attn_scratch_floats() * sizeof(float) + 63) / 64 * 64);
    struct ops_attn a = {.q = q, .q_stride = qd, .out_stride = qd, .pos = pos, .n_q = nq, .k = k,
                         .v = v, .kv_head_stride = hs, .n_head = n_head, .n_head_kv = n_head_kv,
                         .head_dim = hd, .scale = 1.0f / sqrtf((float)hd)};
    a.out = o1;
    for (int i = 0; i < nq; i++)
        for (int h = 0; h < n_head_kv; h++)
            ops_attn_run(&a, h, i, i + 1, ws);
    static const int blocks[] = {2, 5, 16};
    for (int bi = 0; bi < 3; bi++) {
        a.out = o2;
        for (int q0 = 0; q0 < nq; q0 += blocks[bi]) {
            int q1 = q0 + blocks[bi] < nq ? q0 + blocks[bi] : nq;
            for (int h = 0; h < n_head_kv; h++)
                ops_attn_run(&a, h, q0, q1, ws);
        }
        cr_assert(memcmp(o1, o2, sizeof(float) * (size_t)(nq * qd)) == 0,
                  "%s attention at depth %d, blocks of %d differ from one query at a time", ops_isa(),
                  n - nq, blocks[bi]);
    }
    free(k), free(v), free(q), free(o1), free(o2), free(ws);
}
