/* lmserve-kbench — kernel microbenchmark: the matmuls of a Qwen3 forward pass, without the rest.
 *
 *   lmserve-kbench [-t THREADS] [--type q8_0|q4_k|q6_k|f16|...] [--layers N] [--pp N] [--reps N]
 *                  [--no-amx] [--no-tiles] [--gemv] [--kernels] [--bandwidth] [--peak] [--no-calibrate]
 *                  [--attn DEPTH]
 *
 * Builds random weights with the Qwen3-0.6B geometry (per layer: q 2048x1024, k/v 1024x1024,
 * o 1024x2048, gate/up 3072x1024, down 1024x3072; output 151936x1024) and times
 *   decode: one token through every layer (qkv, o, gate+up, down as the engine batches them) and
 *           the output head -> weight bytes streamed per second and tokens/s (matmuls only);
 *   prefill: N tokens through every layer (no output head: prefill needs logits of one token)
 *           -> int8 GOPS (2 ops per MAC) and tokens/s (matmuls only).
 * Median of the repeats. Figures only; nothing is asserted. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/peak.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Fills a matrix with plausible quantized content fast: quantize a few random rows with the
 * reference quantizer and tile them (the kernels' speed does not depend on the values). */
static void *make_w(enum ggml_type t, int64_t rows, int64_t cols, uint64_t *seed)
{
    size_t rs = quant_row_size(t, cols);
    uint8_t *w = aligned_alloc(64, (rs * (size_t)rows + 63) / 64 * 64);
    if (!w) return NULL;
    enum { NPROTO = 8 };
    float *x = malloc((size_t)cols * 4);
    for (int p = 0; p < NPROTO && p < rows; p++) {
        for (int64_t c = 0; c < cols; c++) {
            *seed = *seed * 6364136223846793005ULL + 1442695040888963407ULL;
            x[c] = (float)((double)(*seed >> 40) / 16777216.0 - 0.5) * 0.1f;
        }
        quant_traits(t)->from_float(x, w + (size_t)p * rs, cols);
    }
    for (int64_t r = NPROTO; r < rows; r++)
        memcpy(w + (size_t)r * rs, w + (size_t)(r % NPROTO) * rs, rs);
    free(x);
    return w;
}

struct layer {
    void *q, *k, *v, *o, *gate, *up, *down;
};

/* --kernels: one matrix at a time, to separate kernel speed from DRAM: GEMV over a matrix that
 * stays in L2 (1536 x 1024, repeated) and one that streams from DRAM (256 MiB), and GEMM of
 * 1024 x 1024 by pp tokens. CPU time per thread, best of the repeats. */
static int kernel_rates(struct threadpool *tp, enum ggml_type t, int pp, int reps)
{
    const int64_t cols = 1024, rows_l2 = 1536;
    size_t rs = quant_row_size(t, cols);
    int64_t rows_big = (int64_t)((256u << 20) / rs);
    uint64_t seed = 7;
    void *wb = make_w(t, rows_big, cols, &seed);
    int64_t ny = rows_big > 1024 * (int64_t)pp ? rows_big : 1024 * (int64_t)pp;
    float *x = malloc((size_t)(pp * cols) * 4), *y = malloc((size_t)ny * 4);
    struct mm_scratch *s = mm_scratch_new();
    if (!wb || !x || !y || !s) return 1;
    for (int64_t i = 0; i < pp * cols; i++) x[i] = (float)((i * 7919) % 1000) / 1000.f - 0.5f;
    struct err e;
    double best_l2 = 0, best_big = 0, best_mm = 0, nt = tp_size(tp);
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_now();
        for (int k = 0; k < 100; k++)
            if (mm_run(tp, t, wb, rows_l2, cols, 0, x, 1, y, s, &e)) goto fail;
        double c = (cpu_now() - c0) / nt;
        if ((double)rs * rows_l2 * 100 / c > best_l2) best_l2 = (double)rs * rows_l2 * 100 / c;
        c0 = cpu_now();
        if (mm_run(tp, t, wb, rows_big, cols, 0, x, 1, y, s, &e)) goto fail;
        c = (cpu_now() - c0) / nt;
        if ((double)rs * rows_big / c > best_big) best_big = (double)rs * rows_big / c;
        c0 = cpu_now();
        if (mm_run(tp, t, wb, 1024, cols, 0, x, pp, y, s, &e)) goto fail;
        c = (cpu_now() - c0) / nt;
        if (2.0 * 1024 * cols * pp / c > best_mm) best_mm = 2.0 * 1024 * cols * pp / c;
    }
    printf("kernels %s (gemm %s), best of %d, CPU time per thread: GEMV in L2 %.2f GB/s, GEMV from "
           "DRAM %.2f GB/s, GEMM 1024x1024x%d %.1f GOPS\n",
           quant_traits(t)->name, mm_gemm_name(t), reps, best_l2 / 1e9, best_big / 1e9, pp,
           best_mm / 1e9);
    free(wb), free(x), free(y);
    mm_scratch_free(s);
    return 0;
fail:
    fprintf(stderr, "matmul failed: %s\n", e.msg);
    return 1;
}

/* --bandwidth: the physical limit of decode. Every thread streams its share of a 1 GiB buffer
 * (16-byte loads, four sums), once plainly and once with a software prefetch 16 KB ahead into L2
 * (what the GEMV kernels do); best of the repeats, GB/s = bytes read / wall time. Decode reads
 * every weight once per token, so tok/s <= GB/s / weight bytes. */
struct bw_job {
    const uint64_t *buf;
    size_t n; /* uint64 words */
    int prefetch;
    uint64_t sum[64]; /* per thread, so the loads cannot be optimized away */
};

static void bw_part(void *ctx, int ith, int nth)
{
    struct bw_job *j = ctx;
    size_t per = j->n / (size_t)nth / 64 * 64, a = per * (size_t)ith, b = a + per;
    typedef uint64_t v2 __attribute__((vector_size(16)));
    const v2 *p = (const v2 *)j->buf;
    v2 s0 = {0, 0}, s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = a / 2; i < b / 2; i += 8) { /* one 128-byte pair of lines per step */
        if (j->prefetch) {
            __builtin_prefetch(p + i + 1024, 0, 2);
            __builtin_prefetch(p + i + 1028, 0, 2);
        }
        s0 += p[i] + p[i + 4];
        s1 += p[i + 1] + p[i + 5];
        s2 += p[i + 2] + p[i + 6];
        s3 += p[i + 3] + p[i + 7];
    }
    v2 t = s0 + s1 + s2 + s3;
    j->sum[ith & 63] = t[0] + t[1];
}

static int bandwidth(struct threadpool *tp, int reps)
{
    struct bw_job *j = calloc(1, sizeof *j);
    const size_t words = (1u << 30) / 8;
    uint64_t *buf = aligned_alloc(4096, words * 8 + 32768);
    if (!j || !buf) {
        fprintf(stderr, "out of memory\n");
        free(j);
        free(buf);
        return 1;
    }
    j->n = words;
    memset(buf, 1, j->n * 8 + 32768);
    j->buf = buf;
    for (int pf = 0; pf < 2; pf++) {
        j->prefetch = pf;
        double best = 0;
        for (int r = 0; r < reps + 1; r++) {
            double t0 = now();
            tp_run(tp, bw_part, j);
            double gbs = (double)(j->n * 8) / (now() - t0) / 1e9;
            if (r > 0 && gbs > best) best = gbs;
        }
        printf("read bandwidth, %d threads, %s: %.2f GB/s (best of %d)\n", tp_size(tp),
               pf ? "prefetch 16 KB ahead" : "plain loads", best, reps);
    }
    free(buf);
    free(j);
    return 0;
}

/* --peak: the arithmetic ceiling of prefill. Every thread runs the same independent chains of
 * f32 FMAs, then of int8 dot products (peak.h), all threads at once; best of the repeats,
 * GFLOP/s and int8 GOPS = operations / wall time. A prefill of T tokens through a model of P
 * weights (matmul part) takes 2 P T operations, so tok/s <= peak / (2 P). */
struct peak_job {
    const struct peak_impl *impl;
    int i8;
    uint64_t iters;
    uint64_t ops[64];
};

static void peak_part(void *ctx, int ith, int nth)
{
    struct peak_job *j = ctx;
    (void)nth;
    j->ops[ith & 63] = j->i8 ? j->impl->i8(j->iters) : j->impl->f32(j->iters);
}

static int peak(struct threadpool *tp, int reps)
{
    const struct peak_impl *impl = peak_impl();
    if (!impl) {
        printf("arithmetic peak: no vector loops on this CPU (portable build)\n");
        return 0;
    }
    struct peak_job j = {.impl = impl, .iters = 20000000};
    for (int k = 0; k < 2; k++) {
        j.i8 = k;
        double best = 0;
        for (int r = 0; r < reps + 1; r++) {
            memset(j.ops, 0, sizeof j.ops);
            double t0 = now();
            tp_run(tp, peak_part, &j);
            double dt = now() - t0;
            uint64_t ops = 0;
            for (int i = 0; i < 64 && i < tp_size(tp); i++)
                ops += j.ops[i];
            if (r > 0 && ops / dt / 1e9 > best) best = ops / dt / 1e9;
        }
        printf("arithmetic peak, %d threads, %s: %.1f %s (best of %d; %s)\n", tp_size(tp),
               k ? "int8 dot products" : "f32 FMA", best, k ? "GOPS" : "GFLOP/s", reps, impl->isa);
    }
    return 0;
}

/* --attn DEPTH: the attention kernel alone, qwen3-0.6b geometry (16 query heads, 8 kv heads x
 * 128), one layer's cache of DEPTH + 512 positions (random f16): a 512-token prefill chunk at
 * positions [DEPTH, DEPTH + 512) in work units of (kv head, 16 tokens) as the model runs them, and
 * one decode token at position DEPTH + 511. Prints GFLOPS (2 x 2 x visible keys x head_dim per
 * query head) and, for decode, the K/V bytes read per second. */
struct attn_bench {
    struct ops_attn a;
    int n_units, qb;
    int next;
    float *ws;
    size_t ws_floats;
};

static void attn_part(void *ctx, int ith, int nth)
{
    struct attn_bench *b = ctx;
    for (;;) {
        int u = __atomic_fetch_add(&b->next, 1, __ATOMIC_RELAXED);
        if (u >= b->n_units) break;
        int h = u % b->a.n_head_kv, q0 = u / b->a.n_head_kv * b->qb;
        int q1 = q0 + b->qb < b->a.n_q ? q0 + b->qb : b->a.n_q;
        ops_attn_run(&b->a, h, q0, q1, b->ws + (size_t)ith * b->ws_floats);
    }
}

static int attn_rates(struct threadpool *tp, int depth, int reps)
{
    ops_init();
    const int hd = 128, nh = 16, nkv = 8, pp = 512, n_ctx = depth + pp;
    const int cap = (n_ctx + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
    int64_t hs = (int64_t)cap * hd;
    uint16_t *k = malloc(sizeof(uint16_t) * (size_t)(hs * nkv)), *v = malloc(sizeof(uint16_t) * (size_t)(hs * nkv));
    float *q = malloc(sizeof(float) * (size_t)pp * nh * hd), *o = malloc(sizeof(float) * (size_t)pp * nh * hd);
    int32_t *pos = malloc(sizeof(int32_t) * pp);
    struct attn_bench *b = calloc(1, sizeof *b);
    b->ws_floats = (ops_attn_scratch_floats() + 15) / 16 * 16;
    b->ws = aligned_alloc(64, sizeof(float) * b->ws_floats * (size_t)tp_size(tp));
    if (!k || !v || !q || !o || !pos || !b || !b->ws) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    uint64_t seed = 7;
    for (int64_t i = 0; i < hs * nkv; i++) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        k[i] = f32_to_fp16((float)((seed >> 40) % 2001) / 1000.0f - 1.0f);
        v[i] = f32_to_fp16((float)((seed >> 20) % 2001) / 1000.0f - 1.0f);
    }
    for (int64_t i = 0; i < (int64_t)pp * nh * hd; i++) q[i] = (float)(i % 17) / 17.0f - 0.5f;
    for (int i = 0; i < pp; i++) pos[i] = depth + i;
    b->a = (struct ops_attn){.q = q, .q_stride = nh * hd, .out = o, .out_stride = nh * hd, .pos = pos,
                             .n_q = pp, .k = k, .v = v, .kv_head_stride = hs, .n_head = nh,
                             .n_head_kv = nkv, .head_dim = hd, .scale = 0.088f};
    printf("attention %s, %d threads, depth %d, %d kv heads x %d, group %d\n", ops_isa(), tp_size(tp),
           depth, nkv, hd, nh / nkv);
    for (int phase = 0; phase < 2; phase++) {
        int nq = phase == 0 ? pp : 1;
        b->a.n_q = nq;
        b->a.pos = phase == 0 ? pos : pos + pp - 1;
        b->qb = OPS_ATTN_QB;
        b->n_units = (nq + b->qb - 1) / b->qb * nkv;
        double keys = 0;
        for (int i = 0; i < nq; i++) keys += b->a.pos[i] + 1;
        double flops = 4.0 * keys * hd * nh, best = 1e30, bestc = 1e30;
        for (int r = 0; r <= reps; r++) {
            b->next = 0;
            double t0 = now(), c0 = cpu_now();
            tp_run(tp, attn_part, b);
            double t = now() - t0, c = cpu_now() - c0;
            if (r > 0 && t < best) best = t;
            if (r > 0 && c < bestc) bestc = c;
        }
        if (phase == 0)
            printf("prefill %d tokens at depth %d: %.2f ms, %.1f tok/s, %.1f GFLOPS [cpu-time %.1f GFLOPS per thread-second]\n",
                   pp, depth, best * 1e3, pp / best, flops / best / 1e9, flops / bestc / 1e9);
        else
            printf("decode 1 token at depth %d: %.3f ms, %.1f GFLOPS, K/V %.2f GB/s\n", depth + pp - 1,
                   best * 1e3, flops / best / 1e9, 2.0 * 2.0 * keys * hd * nkv / best / 1e9);
    }
    free(k), free(v), free(q), free(o), free(pos), free(b->ws), free(b);
    return 0;
}

int main(int argc, char **argv)
{
    int kernels = 0, bw = 0, pk = 0, calib = 1, attn_depth = -1;
    int nth = tp_default_threads(), n_layer = 28, pp = 512, reps = 5;
    enum ggml_type t = GGML_TYPE_Q8_0;
    int64_t n_embd = 1024, n_q = 2048, n_kv = 1024, n_ff = 3072, n_vocab = 151936;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-t") && v)
            nth = atoi(v), i++;
        else if (!strcmp(a, "--layers") && v)
            n_layer = atoi(v), i++;
        else if (!strcmp(a, "--pp") && v)
            pp = atoi(v), i++;
        else if (!strcmp(a, "--reps") && v)
            reps = atoi(v), i++;
        else if (!strcmp(a, "--no-amx"))
            mm_set_amx(0);
        else if (!strcmp(a, "--no-tiles"))
            mm_set_tiles(0);
        else if (!strcmp(a, "--gemv"))
            mm_set_gemm_min_tokens(4); /* the old decode GEMV (AVX-512; not batch-invariant) */
        else if (!strcmp(a, "--kernels"))
            kernels = 1;
        else if (!strcmp(a, "--bandwidth"))
            bw = 1;
        else if (!strcmp(a, "--peak"))
            pk = 1;
        else if (!strcmp(a, "--attn") && v)
            attn_depth = atoi(v), i++;
        else if (!strcmp(a, "--no-calibrate"))
            calib = 0;
        else if (!strcmp(a, "--type") && v) {
            int found = 0;
            for (int k = 0; k < GGML_TYPE_COUNT; k++) {
                const struct quant_traits *tr = quant_traits((enum ggml_type)k);
                if (tr && !strcasecmp(tr->name, v)) t = (enum ggml_type)k, found = 1;
            }
            if (!found) {
                fprintf(stderr, "unknown type %s\n", v);
                return 2;
            }
            i++;
        } else {
            fprintf(stderr,
                    "usage: %s [-t THREADS] [--type TYPE] [--layers N] [--pp N] [--reps N] "
                    "[--no-amx] [--no-tiles] [--gemv] [--kernels] [--bandwidth] [--peak] [--no-calibrate] [--attn DEPTH]\n",
                    argv[0]);
            return 2;
        }
    }
    if (nth < 1 || n_layer < 1 || pp < 1 || reps < 1) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    quant_init();
    struct threadpool *tp = tp_new(nth);
    struct mm_scratch *s = mm_scratch_new();
    if (!tp || !s) return 1;
    if (kernels) return kernel_rates(tp, t, pp, reps);
    if (bw) return bandwidth(tp, reps);
    if (pk) return peak(tp, reps);
    if (attn_depth >= 0) return attn_rates(tp, attn_depth, reps);
    if (calib) { /* what model_load does: the prefetch distance and decode item size measured */
        const struct mm_calib *c = mm_calibrate(tp);
        printf("calibration (%.0f ms): prefetch %d B / %d slabs (slab layout %d), decode items of %d rows, %.1f GB per CPU s; sweep (GB per CPU s) %s\n",
               c->ms, c->prefetch, c->pf_slabs, c->pf_slabs_slab, c->item_rows, c->gbs, c->sweep);
    } else {
        printf("calibration: off (prefetch and decode item size at their compiled defaults)\n");
    }
    uint64_t seed = 42;
    struct layer *L = calloc((size_t)n_layer, sizeof *L);
    for (int l = 0; l < n_layer; l++) {
        L[l].q = make_w(t, n_q, n_embd, &seed);
        L[l].k = make_w(t, n_kv, n_embd, &seed);
        L[l].v = make_w(t, n_kv, n_embd, &seed);
        L[l].o = make_w(t, n_embd, n_q, &seed);
        L[l].gate = make_w(t, n_ff, n_embd, &seed);
        L[l].up = make_w(t, n_ff, n_embd, &seed);
        L[l].down = make_w(t, n_embd, n_ff, &seed);
        if (!L[l].q || !L[l].k || !L[l].v || !L[l].o || !L[l].gate || !L[l].up || !L[l].down) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
    }
    void *out = make_w(t, n_vocab, n_embd, &seed);
    if (!out) return 1;
    size_t layer_bytes = quant_row_size(t, n_embd) * (size_t)(n_q + 2 * n_kv + 2 * n_ff) +
                         quant_row_size(t, n_q) * (size_t)n_embd +
                         quant_row_size(t, n_ff) * (size_t)n_embd;
    size_t out_bytes = quant_row_size(t, n_embd) * (size_t)n_vocab;
    double macs_layer =
        (double)n_embd * (n_q + 2 * n_kv + 2 * n_ff) + (double)n_q * n_embd + (double)n_ff * n_embd;

    int64_t maxtok = pp;
    float *x = malloc((size_t)(maxtok * n_ff) * 4),
          *y1 = malloc((size_t)(maxtok * (n_q + 2 * n_kv)) * 4);
    float *y2 = malloc((size_t)(maxtok * 2 * n_ff) * 4), *logits = malloc((size_t)n_vocab * 4);
    float *x0 = malloc((size_t)(maxtok * n_ff) * 4);
    for (int64_t i = 0; i < maxtok * n_ff; i++)
        x0[i] = x[i] = (float)((i * 7919) % 1000) / 1000.f - 0.5f;
    struct err e;

    printf(
        "lmserve-kbench: type %s, %d threads, isa %s, gemm %s, %d layers (Qwen3-0.6B geometry)\n",
        quant_traits(t)->name, nth, quant_isa(), mm_gemm_name(t), n_layer);
    printf("weights: %.1f MiB per token (layers %.1f + output %.1f)\n",
           (layer_bytes * n_layer + out_bytes) / 1048576.0, layer_bytes * n_layer / 1048576.0,
           out_bytes / 1048576.0);

    for (int phase = 0; phase < 2; phase++) {
        int64_t nt = phase == 0 ? 1 : pp;
        double *times = malloc(sizeof(double) * (size_t)(reps + 1));
        double *cpu = malloc(sizeof(double) * (size_t)(reps + 1));
        for (int r = 0; r <= reps; r++) { /* r == 0 is a warm-up */
            double t0 = now(), c0 = cpu_now();
            for (int l = 0; l < n_layer; l++) {
                struct mm_op qkv[3] = {
                    {.wtype = t,
                     .W = L[l].q,
                     .rows = n_q,
                     .cols = n_embd,
                     .X = x,
                     .n_tok = nt,
                     .Y = y1,
                     .y_stride = n_q + 2 * n_kv},
                    {.wtype = t,
                     .W = L[l].k,
                     .rows = n_kv,
                     .cols = n_embd,
                     .X = x,
                     .n_tok = nt,
                     .Y = y1 + n_q,
                     .y_stride = n_q + 2 * n_kv},
                    {.wtype = t,
                     .W = L[l].v,
                     .rows = n_kv,
                     .cols = n_embd,
                     .X = x,
                     .n_tok = nt,
                     .Y = y1 + n_q + n_kv,
                     .y_stride = n_q + 2 * n_kv},
                };
                if (mm_run_ops(tp, qkv, 3, s, &e)) goto fail;
                struct mm_op o = {.wtype = t,
                                  .W = L[l].o,
                                  .rows = n_embd,
                                  .cols = n_q,
                                  .X = y1,
                                  .x_stride = n_q + 2 * n_kv,
                                  .n_tok = nt,
                                  .Y = x};
                if (mm_run_ops(tp, &o, 1, s, &e)) goto fail;
                struct mm_op gu[2] = {
                    {.wtype = t,
                     .W = L[l].gate,
                     .rows = n_ff,
                     .cols = n_embd,
                     .X = x,
                     .n_tok = nt,
                     .Y = y2,
                     .y_stride = 2 * n_ff},
                    {.wtype = t,
                     .W = L[l].up,
                     .rows = n_ff,
                     .cols = n_embd,
                     .X = x,
                     .n_tok = nt,
                     .Y = y2 + n_ff,
                     .y_stride = 2 * n_ff},
                };
                if (mm_run_ops(tp, gu, 2, s, &e)) goto fail;
                struct mm_op down = {.wtype = t,
                                     .W = L[l].down,
                                     .rows = n_embd,
                                     .cols = n_ff,
                                     .X = y2,
                                     .x_stride = 2 * n_ff,
                                     .n_tok = nt,
                                     .Y = x};
                if (mm_run_ops(tp, &down, 1, s, &e)) goto fail;
                /* reset the activations to a fixed pattern: outputs of random layers would drift to
                 * huge or denormal values, whose float assists would distort the timing */
                memcpy(x, x0, (size_t)(nt * n_embd) * sizeof(float));
            }
            if (phase == 0 && mm_run(tp, t, out, n_vocab, n_embd, 0, x, 1, logits, s, &e))
                goto fail;
            times[r] = now() - t0;
            cpu[r] = (cpu_now() - c0) / nth;
        }
        qsort(times + 1, (size_t)reps, sizeof(double), cmp_d);
        qsort(cpu + 1, (size_t)reps, sizeof(double), cmp_d);
        double med = times[1 + reps / 2], cmed = cpu[1 + reps / 2];
        if (phase == 0) {
            double bytes = (double)layer_bytes * n_layer + (double)out_bytes;
            printf("decode  (n_tok=1):   %8.2f ms/token  %7.2f tok/s  %6.2f GB/s weights   "
                   "[cpu-time: %7.2f tok/s %6.2f GB/s]\n",
                   med * 1e3, 1 / med, bytes / med / 1e9, 1 / cmed, bytes / cmed / 1e9);
        } else {
            double ops = 2 * macs_layer * n_layer * pp;
            printf("prefill (n_tok=%d): %8.2f ms        %7.2f tok/s  %6.1f GOPS   [cpu-time: %7.2f "
                   "tok/s %6.1f GOPS]\n",
                   pp, med * 1e3, pp / med, ops / med / 1e9, pp / cmed, ops / cmed / 1e9);
        }
        free(times);
        free(cpu);
    }
    return 0;
fail:
    fprintf(stderr, "matmul failed: %s\n", e.msg);
    return 1;
}
