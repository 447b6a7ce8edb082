/* Unit tests: ops (attention SIMD vs portable vs a double-precision direct formula, RoPE, norm),
 * the F16 KV cache, and the qwen3 forward pass on small GGUFs written here with random weights:
 * prefill == token-by-token decode, lockstep batches of several sequences == separate runs,
 * prefix copy, thread-count independence, and clean errors for bad files and bad batches. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/kernels/fp16.h"
#include "base/cpu.h"
#include "engine/format/gguf.h"
#include "engine/kernels/matmul.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"

static uint64_t rng_state = 88172645463325252ull;
static float frand(void) /* uniform in [-1, 1) */
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* ------------------------------------------------------------------ ops */

/* Direct attention in double: softmax(q·k * scale) · v over rows [0, pos], K/V from f16. */
static void attn_naive(const float *q, const uint16_t *k, const uint16_t *v, int pos, int hd, float scale,
                       double *out)
{
    double *s = malloc(sizeof(double) * (size_t)(pos + 1)), mx = -INFINITY, sum = 0;
    for (int j = 0; j <= pos; j++) {
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)q[i] * fp16_to_f32_sw(k[(int64_t)j * hd + i]);
        s[j] = d * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (int j = 0; j <= pos; j++) sum += (s[j] = exp(s[j] - mx));
    for (int i = 0; i < hd; i++) {
        double a = 0;
        for (int j = 0; j <= pos; j++) a += s[j] * fp16_to_f32_sw(v[(int64_t)j * hd + i]);
        out[i] = a / sum;
    }
    free(s);
}

/* The AVX2 instantiation is not what ops_init picks on an AVX-512 machine: test it directly. */
void ops_attn_run_avx2(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                       int c1, float *state);

static void check_attention(int hd, int n_head, int n_head_kv, int n_q, int pos0)
{
    ops_init();
    int n_ctx = pos0 + n_q, cap = (n_ctx + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
    int64_t hs = (int64_t)cap * hd;
    uint16_t *kt = calloc((size_t)(hs * n_head_kv), 2), *v = calloc((size_t)(hs * n_head_kv), 2);
    uint16_t *krow = calloc((size_t)(cap * hd), 2); /* plain row-major K of one head, for naive */
    float *q = malloc(sizeof(float) * (size_t)(n_q * n_head * hd));
    float *o1 = malloc(sizeof(float) * (size_t)(n_q * n_head * hd)), *o2 = malloc(sizeof(float) * (size_t)(n_q * n_head * hd));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n_q);
    float *ws = aligned_alloc(64, (ops_attn_scratch_floats() * sizeof(float) + 63) / 64 * 64);
    for (int h = 0; h < n_head_kv; h++)
        for (int p = 0; p < n_ctx; p++)
            for (int d = 0; d < hd; d++) {
                /* tile-transposed K layout (kv_cache.h) */
                uint16_t kk = f32_to_fp16_sw(frand() * 2);
                kt[h * hs + (int64_t)(p / OPS_ATTN_KT) * OPS_ATTN_KT * hd + (int64_t)d * OPS_ATTN_KT + p % OPS_ATTN_KT] = kk;
                v[h * hs + (int64_t)p * hd + d] = f32_to_fp16_sw(frand());
            }
    for (int i = 0; i < n_q * n_head * hd; i++) q[i] = frand() * 2;
    for (int i = 0; i < n_q; i++) pos[i] = pos0 + i;
    struct ops_attn a = {.q = q, .q_stride = n_head * hd, .out = o1, .out_stride = n_head * hd, .pos = pos,
                         .n_q = n_q, .k = kt, .v = v, .kv_head_stride = hs, .n_head = n_head,
                         .n_head_kv = n_head_kv, .head_dim = hd, .scale = 1.0f / sqrtf((float)hd)};
    for (int h = 0; h < n_head_kv; h++)
        for (int q0 = 0; q0 < n_q; q0 += OPS_ATTN_QB) {
            int q1 = q0 + OPS_ATTN_QB < n_q ? q0 + OPS_ATTN_QB : n_q;
            ops_attn_run(&a, h, q0, q1, ws);
        }
    a.out = o2;
    for (int h = 0; h < n_head_kv; h++)
        for (int q0 = 0; q0 < n_q; q0 += 3) /* other unit split: results must not depend on it */
            ops_attn_run_ref(&a, h, q0, q0 + 3 < n_q ? q0 + 3 : n_q, ws);
    float *o3 = malloc(sizeof(float) * (size_t)(n_q * n_head * hd));
    bool have_avx2 = false;
#if defined(__x86_64__)
    have_avx2 = cpu_has_avx2_fma() && hd % 8 == 0;
#endif
    if (have_avx2) {
        a.out = o3;
        for (int h = 0; h < n_head_kv; h++)
            for (int q0 = 0; q0 < n_q; q0 += 5) {
                int q1 = q0 + 5 < n_q ? q0 + 5 : n_q;
                ops_attn_run_avx2(&a, h, q0, q1, ws, 0, ops_attn_chunks(&a, q1), NULL);
            }
    }
    double *ref = malloc(sizeof(double) * (size_t)hd), maxd = 0, maxd2 = 0, maxd3 = 0;
    int group = n_head / n_head_kv;
    for (int i = 0; i < n_q; i++)
        for (int h = 0; h < n_head; h++) {
            int kvh = h / group;
            for (int p = 0; p <= pos[i]; p++)
                for (int d = 0; d < hd; d++)
                    krow[(int64_t)p * hd + d] = kt[kvh * hs + (int64_t)(p / OPS_ATTN_KT) * OPS_ATTN_KT * hd +
                                                   (int64_t)d * OPS_ATTN_KT + p % OPS_ATTN_KT];
            attn_naive(q + ((int64_t)i * n_head + h) * hd, krow, v + kvh * hs, pos[i], hd, a.scale, ref);
            for (int d = 0; d < hd; d++) {
                int64_t at = ((int64_t)i * n_head + h) * hd + d;
                maxd = fmax(maxd, fabs(o1[at] - ref[d]));
                maxd2 = fmax(maxd2, fabs(o2[at] - ref[d]));
                if (have_avx2) maxd3 = fmax(maxd3, fabs(o3[at] - ref[d]));
            }
        }
    cr_expect(maxd < 2e-5, "attention (%s) hd=%d heads=%d/%d n_q=%d pos0=%d: max error %g", ops_isa(), hd,
              n_head, n_head_kv, n_q, pos0, maxd);
    cr_expect(maxd2 < 2e-5, "portable attention: max error %g", maxd2);
    cr_expect(maxd3 < 2e-5, "avx2 attention: max error %g", maxd3);

    /* An F32 cache (--cache-type f32) holding the same values: every instance (the dispatched one,
     * the portable one, AVX2) does the same operations in the same order on them, so its outputs
     * are the F16 instance's bits. */
    float *kf = malloc(sizeof(float) * (size_t)(hs * n_head_kv)), *vf = malloc(sizeof(float) * (size_t)(hs * n_head_kv));
    for (int64_t i = 0; i < hs * n_head_kv; i++) {
        kf[i] = fp16_to_f32_sw(kt[i]);
        vf[i] = fp16_to_f32_sw(v[i]);
    }
    float *of = malloc(sizeof(float) * (size_t)(n_q * n_head * hd));
    struct ops_attn af = a;
    af.k = (const uint16_t *)(const void *)kf;
    af.v = (const uint16_t *)(const void *)vf;
    af.kv_head_stride = 2 * hs; /* counted in halfs, as kv_cache's */
    af.kv_f32 = true;
    for (int variant = 0; variant < 3; variant++) {
        if (variant == 2 && !have_avx2) break;
        memset(of, 0xff, sizeof(float) * (size_t)(n_q * n_head * hd));
        af.out = of;
        for (int h = 0; h < n_head_kv; h++)
            for (int q0 = 0; q0 < n_q; q0 += (variant == 0 ? OPS_ATTN_QB : variant == 1 ? 3 : 5)) {
                int q1 = q0 + (variant == 0 ? OPS_ATTN_QB : variant == 1 ? 3 : 5);
                q1 = q1 < n_q ? q1 : n_q;
                if (variant == 0) ops_attn_run(&af, h, q0, q1, ws);
                else if (variant == 1) ops_attn_run_ref(&af, h, q0, q1, ws);
#if defined(__x86_64__)
                else ops_attn_run_avx2(&af, h, q0, q1, ws, 0, ops_attn_chunks(&af, q1), NULL);
#endif
            }
        const float *want = variant == 0 ? o1 : variant == 1 ? o2 : o3;
        cr_expect(memcmp(of, want, sizeof(float) * (size_t)(n_q * n_head * hd)) == 0,
                  "f32-cache attention (variant %d: %s) differs from the f16 cache's bits on half values "
                  "(hd=%d n_q=%d pos0=%d)", variant, variant == 0 ? ops_isa() : variant == 1 ? "portable" : "avx2",
                  hd, n_q, pos0);
    }
    free(of);
    free(kf);
    free(vf);
    free(o3);
    free(kt);
    free(v);
    free(krow);
    free(q);
    free(o1);
    free(o2);
    free(pos);
    free(ws);
    free(ref);
}

Test(model, attention_matches_direct_formula)
{
    check_attention(128, 16, 8, 1, 0);    /* first decode step */
    check_attention(128, 16, 8, 1, 200);  /* decode deep in the cache, crossing tiles */
    check_attention(128, 16, 8, 37, 0);   /* prefill: several query blocks, partial tile */
    check_attention(128, 16, 8, 20, 50);  /* prefill continuing a cache across a tile edge */
    check_attention(64, 4, 4, 70, 0);     /* no GQA, head_dim 64 */
    check_attention(32, 8, 2, 9, 63);     /* group 4, head_dim 32 */
    check_attention(16, 4, 1, 5, 3);      /* head_dim below one AVX-512 vector × 4 */
    check_attention(128, 16, 8, 1, 2500); /* decode over three split-K chunks (OPS_ATTN_KC) */
    check_attention(64, 8, 2, 20, 1015);  /* prefill straddling a chunk edge */
}

Test(model, rope_neox_rotates_halves)
{
    float inv[4], x[8], y[8];
    ops_rope_inv_freq(inv, 8, 10000.0f);
    cr_expect_float_eq(inv[1], powf(10000.0f, -2.0f / 8), 1e-7);
    for (int i = 0; i < 8; i++) x[i] = y[i] = frand();
    ops_rope_neox(y, 1, 8, 7, inv);
    for (int i = 0; i < 4; i++) {
        double a = 7.0 * inv[i];
        cr_expect(fabs(y[i] - (x[i] * cos(a) - x[i + 4] * sin(a))) < 1e-6);
        cr_expect(fabs(y[i + 4] - (x[i] * sin(a) + x[i + 4] * cos(a))) < 1e-6);
    }
}

Test(model, rmsnorm_softmax_swiglu)
{
    float x[5] = {1, -2, 3, 0.5f, -1}, w[5] = {1, 2, 1, 1, 0.5f}, y[5];
    ops_rmsnorm(y, x, w, 5, 1e-6f);
    double ms = (1 + 4 + 9 + 0.25 + 1) / 5.0;
    for (int i = 0; i < 5; i++) cr_expect(fabs(y[i] - x[i] / sqrt(ms + 1e-6) * w[i]) < 1e-6);
    float s[3] = {1000, 1001, 999};
    ops_softmax(s, 3);
    double z = exp(-1) + 1 + exp(-2);
    cr_expect(fabs(s[1] - 1 / z) < 1e-6 && fabs(s[0] - exp(-1) / z) < 1e-6);
    float g[2] = {2, -3}, u[2] = {0.5f, 4}, o[2];
    ops_swiglu(o, g, u, 2);
    cr_expect(fabs(o[0] - 2 / (1 + exp(-2)) * 0.5) < 1e-6 && fabs(o[1] - (-3) / (1 + exp(3)) * 4) < 1e-6);
}

/* ------------------------------------------------------------------ tiny GGUFs */

struct shape {
    const char *arch;
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab;
    int n_expert, n_expert_used, n_ff_exp;
    bool tied;
    uint32_t wtype;
};

static int add_rand(struct gguf_writer *w, const char *name, uint32_t type, int nd, int64_t a, int64_t b, int64_t c,
                    float scale, float offset)
{
    int64_t ne[3] = {a, b, c}, n = a * b * c;
    float *f = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = offset + scale * frand();
    const struct quant_traits *tr = quant_traits((enum ggml_type)type);
    void *q = malloc(quant_row_size((enum ggml_type)type, a) * (size_t)(b * c));
    tr->from_float_ref(f, q, n);
    int rc = gguf_w_tensor(w, name, type, nd, ne, q);
    free(f);
    free(q);
    return rc;
}

/* Writes a random model of shape s to a temp file; returns its path (static buffer). */
static const char *write_model(const struct shape *s, const char *skip_tensor)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/lms-test-model-%d.gguf", (int)getpid());
    quant_init();
    struct gguf_writer *w = gguf_writer_new(32);
    char k[96];
#define KEY(x) (snprintf(k, sizeof k, "%s.%s", s->arch, x), k)
    gguf_w_str(w, "general.architecture", s->arch);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    gguf_w_u32(w, KEY("context_length"), 4096);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    gguf_w_f32(w, KEY("rope.freq_base"), 1e6f);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6f);
    if (s->n_expert) {
        gguf_w_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
        gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used);
        gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp);
    }
    int E = s->n_embd, QD = s->n_head * s->head_dim, KVD = s->n_head_kv * s->head_dim;
    float ws = 1.0f / sqrtf((float)E);
    add_rand(w, "token_embd.weight", s->wtype, 2, E, s->n_vocab, 1, 1.0f, 0);
    if (!s->tied) add_rand(w, "output.weight", s->wtype, 2, E, s->n_vocab, 1, ws * 4, 0);
    add_rand(w, "output_norm.weight", GGML_TYPE_F32, 1, E, 1, 1, 0.1f, 1.0f);
    for (int l = 0; l < s->n_layer; l++) {
        char n[96];
#define T(name) (snprintf(n, sizeof n, "blk.%d.%s.weight", l, name), n)
#define ADD(name, ...) \
    if (!skip_tensor || strcmp(skip_tensor, T(name))) add_rand(w, T(name), __VA_ARGS__)
        ADD("attn_norm", GGML_TYPE_F32, 1, E, 1, 1, 0.1f, 1.0f);
        ADD("ffn_norm", GGML_TYPE_F32, 1, E, 1, 1, 0.1f, 1.0f);
        ADD("attn_q_norm", GGML_TYPE_F32, 1, s->head_dim, 1, 1, 0.1f, 1.0f);
        ADD("attn_k_norm", GGML_TYPE_F32, 1, s->head_dim, 1, 1, 0.1f, 1.0f);
        ADD("attn_q", s->wtype, 2, E, QD, 1, ws, 0);
        ADD("attn_k", s->wtype, 2, E, KVD, 1, ws, 0);
        ADD("attn_v", s->wtype, 2, E, KVD, 1, ws, 0);
        ADD("attn_output", s->wtype, 2, QD, E, 1, 1.0f / sqrtf((float)QD), 0);
        if (s->n_expert) {
            ADD("ffn_gate_inp", GGML_TYPE_F32, 2, E, s->n_expert, 1, ws, 0);
            ADD("ffn_gate_exps", s->wtype, 3, E, s->n_ff_exp, s->n_expert, ws, 0);
            ADD("ffn_up_exps", s->wtype, 3, E, s->n_ff_exp, s->n_expert, ws, 0);
            ADD("ffn_down_exps", s->wtype, 3, s->n_ff_exp, E, s->n_expert, 1.0f / sqrtf((float)s->n_ff_exp), 0);
        } else {
            ADD("ffn_gate", s->wtype, 2, E, s->n_ff, 1, ws, 0);
            ADD("ffn_up", s->wtype, 2, E, s->n_ff, 1, ws, 0);
            ADD("ffn_down", s->wtype, 2, s->n_ff, E, 1, 1.0f / sqrtf((float)s->n_ff), 0);
        }
#undef T
#undef ADD
    }
#undef KEY
    struct err e = {0};
    int rc = gguf_writer_save(w, path, &e);
    gguf_writer_free(w);
    cr_assert(rc == 0, "writing the test model: %s", e.msg);
    return path;
}

static const struct shape DENSE = {"qwen3", 2, 64, 4, 2, 32, 96, 300, 0, 0, 0, true, GGML_TYPE_F32};
static const struct shape DENSE_Q8 = {"qwen3", 2, 128, 4, 2, 64, 160, 260, 0, 0, 0, false, GGML_TYPE_Q8_0};
static const struct shape MOE = {"qwen3moe", 2, 64, 4, 2, 32, 0, 300, 6, 2, 32, true, GGML_TYPE_F32};

static struct model *load(const struct shape *s, int threads)
{
    const char *p = write_model(s, NULL);
    struct err e = {0};
    struct model_opts o = {.n_threads = threads};
    struct model *m = model_load(p, &o, &e);
    unlink(p);
    cr_assert(m, "load: %s", e.msg);
    return m;
}

static double max_abs_diff(const float *a, const float *b, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static double max_abs(const float *a, int64_t n)
{
    double d = 0;
    for (int64_t i = 0; i < n; i++) d = fmax(d, fabs((double)a[i]));
    return d;
}

#define NT 90 /* > one KV tile (64) and many query blocks */

/* All-position logits by one prefill (want_logits everywhere) vs one token per forward. */
static void check_prefill_vs_decode(const struct shape *s, double tol, double kv_tol)
{
    struct model *m = load(s, 2);
    int V = model_config(m)->n_vocab;
    int32_t tok[NT], pos[NT];
    bool want[NT];
    struct err e = {0};
    struct kv_cache *a = kv_new(m, 128, &e), *b = kv_new(m, 128, &e), *seq[NT];
    cr_assert(a && b, "%s", e.msg);
    for (int i = 0; i < NT; i++) {
        tok[i] = (int32_t)((i * 7919 + 13) % V);
        pos[i] = i;
        want[i] = true;
        seq[i] = a;
    }
    float *la = malloc(sizeof(float) * (size_t)V * NT), *lb = malloc(sizeof(float) * (size_t)V);
    struct batch pb = {.token = tok, .pos = pos, .seq = seq, .want_logits = want, .n = NT};
    cr_assert(model_forward(m, &pb, la, &e) == 0, "%s", e.msg);
    cr_expect(kv_rows(a) == NT);
    double worst = 0;
    for (int i = 0; i < NT; i++) {
        struct batch db = {.token = tok + i, .pos = pos + i, .seq = &b, .n = 1};
        cr_assert(model_forward(m, &db, lb, &e) == 0, "%s", e.msg);
        worst = fmax(worst, max_abs_diff(la + (int64_t)i * V, lb, V) / fmax(1.0, max_abs(lb, V)));
    }
    cr_expect(worst <= tol, "%s %s: prefill vs decode differ by %g (relative to max |logit|)", s->arch,
              quant_traits((enum ggml_type)s->wtype)->name, worst);
    /* the caches hold the same rows too */
    float k1[256], v1[256], k2[256], v2[256];
    kv_load(a, 1, NT - 1, k1, v1);
    kv_load(b, 1, NT - 1, k2, v2);
    int kvd = model_config(m)->n_head_kv * model_config(m)->head_dim;
    cr_expect(max_abs_diff(k1, k2, kvd) <= kv_tol && max_abs_diff(v1, v2, kvd) <= kv_tol, "cache rows differ: K %g V %g",
              max_abs_diff(k1, k2, kvd), max_abs_diff(v1, v2, kvd));
    free(la);
    free(lb);
    kv_free(a);
    kv_free(b);
    model_free(m);
}

/* K/V may differ by one f16 ulp (prefill and decode attention sum in different orders) */
Test(model, prefill_equals_decode_dense_f32) { check_prefill_vs_decode(&DENSE, 1e-5, 2e-3); }
Test(model, prefill_equals_decode_moe) { check_prefill_vs_decode(&MOE, 1e-5, 2e-3); }
/* Quantized weights: the int8 rounding of matmul inputs turns any difference in summation order
 * (GEMM vs GEMV kernels, 6-row vs 2-row attention blocks, one f16 ulp in a cached V) into an
 * occasional one-step rounding flip, which moves these tiny random models' logits by up to ~1%
 * of their range; the bound is set above that noise and far below a wrong computation. */
Test(model, prefill_equals_decode_dense_q8_0) { check_prefill_vs_decode(&DENSE_Q8, 2e-2, 5e-2); }

/* A prompt longer than one micro-batch (512 tokens) is processed in chunks: the last logits and
 * the cache must equal token-by-token decoding. */
Test(model, prefill_longer_than_a_microbatch)
{
    struct model *m = load(&DENSE, 2);
    int V = model_config(m)->n_vocab, n = 530;
    struct err e = {0};
    struct kv_cache *a = kv_new(m, n, &e), *b = kv_new(m, n, &e);
    cr_assert(a && b, "%s", e.msg);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n), *pos = malloc(sizeof(int32_t) * (size_t)n);
    struct kv_cache **seq = malloc(sizeof *seq * (size_t)n);
    for (int i = 0; i < n; i++) tok[i] = (i * 37 + 5) % V, pos[i] = i, seq[i] = a;
    float *la = malloc(sizeof(float) * (size_t)V), *lb = malloc(sizeof(float) * (size_t)V);
    struct batch pb = {.token = tok, .pos = pos, .seq = seq, .n = n};
    cr_assert(model_forward(m, &pb, la, &e) == 0, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        struct batch db = {.token = tok + i, .pos = pos + i, .seq = &b, .n = 1};
        cr_assert(model_forward(m, &db, lb, &e) == 0, "%s", e.msg);
    }
    cr_expect(kv_rows(a) == n && kv_rows(b) == n);
    double d = max_abs_diff(la, lb, V) / fmax(1.0, max_abs(lb, V));
    cr_expect(d <= 1e-5, "chunked prefill vs decode: %g", d);
    free(tok), free(pos), free(seq), free(la), free(lb);
    kv_free(a);
    kv_free(b);
    model_free(m);
}

/* Lockstep decode of three sequences in one batch == each sequence decoded alone; a copied
 * prefix continues exactly like its donor. */
Test(model, lockstep_batch_and_prefix_copy)
{
    struct model *m = load(&MOE, 2);
    int V = model_config(m)->n_vocab;
    struct err e = {0};
    struct kv_cache *kv[3], *solo = kv_new(m, 64, &e);
    int len[3] = {5, 17, 9};
    for (int s = 0; s < 3; s++) {
        kv[s] = kv_new(m, 64, &e);
        cr_assert(kv[s], "%s", e.msg);
        int32_t tok[32], pos[32];
        struct kv_cache *seq[32];
        for (int i = 0; i < len[s]; i++) tok[i] = (int32_t)((s * 31 + i * 17) % V), pos[i] = i, seq[i] = kv[s];
        struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = len[s]};
        cr_assert(model_forward(m, &b, NULL, &e) == 0, "%s", e.msg);
    }
    int32_t tok3[3] = {7, 8, 9}, pos3[3] = {5, 17, 9};
    bool want3[3] = {true, true, true};
    float *lb = malloc(sizeof(float) * (size_t)V * 3), *ls = malloc(sizeof(float) * (size_t)V);
    struct batch b3 = {.token = tok3, .pos = pos3, .seq = kv, .want_logits = want3, .n = 3};
    cr_assert(model_forward(m, &b3, lb, &e) == 0, "%s", e.msg);
    for (int s = 0; s < 3; s++) {
        cr_assert(kv_rows(kv[s]) == len[s] + 1);
        kv_truncate(solo, 0);
        int32_t tok[32], pos[32];
        struct kv_cache *seq[32];
        for (int i = 0; i < len[s]; i++) tok[i] = (int32_t)((s * 31 + i * 17) % V), pos[i] = i, seq[i] = solo;
        tok[len[s]] = tok3[s], pos[len[s]] = len[s], seq[len[s]] = solo;
        struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = len[s] + 1};
        cr_assert(model_forward(m, &b, ls, &e) == 0, "%s", e.msg);
        cr_expect(max_abs_diff(lb + (int64_t)s * V, ls, V) < 1e-4 * fmax(1.0, max_abs(ls, V)), "sequence %d differs in the batch: %g", s,
                  max_abs_diff(lb + (int64_t)s * V, ls, V));
    }
    /* prefix copy: the first 10 rows of kv[1] continued with token 42 == kv[1] rewound to 10 */
    struct kv_cache *cp = kv_new(m, 64, &e);
    cr_assert(kv_copy_rows(cp, kv[1], 10) == 0 && kv_rows(cp) == 10);
    cr_expect(kv_copy_rows(cp, kv[1], 60) != 0, "copying more rows than the donor has must fail");
    int32_t t42 = 42, p10 = 10;
    struct batch bc = {.token = &t42, .pos = &p10, .seq = &cp, .n = 1};
    cr_assert(model_forward(m, &bc, lb, &e) == 0, "%s", e.msg);
    kv_truncate(kv[1], 10);
    struct batch bd = {.token = &t42, .pos = &p10, .seq = &kv[1], .n = 1};
    cr_assert(model_forward(m, &bd, ls, &e) == 0, "%s", e.msg);
    cr_expect(max_abs_diff(lb, ls, V) == 0.0, "prefix copy continues differently");
    free(lb);
    free(ls);
    for (int s = 0; s < 3; s++) kv_free(kv[s]);
    kv_free(solo);
    kv_free(cp);
    model_free(m);
}

Test(model, thread_count_does_not_change_logits)
{
    float *l[2];
    int V = 0;
    for (int r = 0; r < 2; r++) {
        rng_state = 12345;
        struct model *m = load(&DENSE_Q8, r + 1);
        V = model_config(m)->n_vocab;
        struct err e = {0};
        struct kv_cache *kv = kv_new(m, 64, &e);
        int32_t tok[20], pos[20];
        struct kv_cache *seq[20];
        for (int i = 0; i < 20; i++) tok[i] = i * 11 % V, pos[i] = i, seq[i] = kv;
        l[r] = malloc(sizeof(float) * (size_t)V);
        struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = 20};
        cr_assert(model_forward(m, &b, l[r], &e) == 0, "%s", e.msg);
        kv_free(kv);
        model_free(m);
    }
    cr_expect(max_abs_diff(l[0], l[1], V) == 0.0, "1 vs 2 threads: %g", max_abs_diff(l[0], l[1], V));
    free(l[0]);
    free(l[1]);
}

/* --experts=borrow changes only how expert pages become resident, never the numbers. */
Test(model, experts_borrow_same_logits)
{
    float *l[2];
    int V = 0;
    for (int r = 0; r < 2; r++) {
        rng_state = 777;
        const char *p = write_model(&MOE, NULL);
        struct err e = {0};
        struct model_opts o = {.n_threads = 2, .experts_borrow = r == 1};
        struct model *m = model_load(p, &o, &e);
        unlink(p);
        cr_assert(m, "%s", e.msg);
        V = model_config(m)->n_vocab;
        struct kv_cache *kv = kv_new(m, 32, &e);
        int32_t tok[12], pos[12];
        struct kv_cache *seq[12];
        for (int i = 0; i < 12; i++) tok[i] = i * 23 % V, pos[i] = i, seq[i] = kv;
        l[r] = malloc(sizeof(float) * (size_t)V);
        struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = 12};
        cr_assert(model_forward(m, &b, l[r], &e) == 0, "%s", e.msg);
        kv_free(kv);
        model_free(m);
    }
    cr_expect(max_abs_diff(l[0], l[1], V) == 0.0, "borrow changes logits by %g", max_abs_diff(l[0], l[1], V));
    free(l[0]);
    free(l[1]);
}

Test(model, bad_batches_are_errors)
{
    struct model *m = load(&DENSE, 1);
    struct err e = {0};
    struct kv_cache *kv = kv_new(m, 8, &e);
    float *lg = malloc(sizeof(float) * 300);
    int32_t tok[3] = {1, 2, 3}, pos[3] = {0, 1, 2};
    struct kv_cache *seq[3] = {kv, kv, kv};
    int32_t badtok = 300, gap = 5, p8 = 8;
    struct batch b = {.token = &badtok, .pos = pos, .seq = seq, .n = 1};
    cr_expect(model_forward(m, &b, lg, &e) != 0 && strstr(e.msg, "vocabulary"), "%s", e.msg);
    b = (struct batch){.token = tok, .pos = &gap, .seq = seq, .n = 1};
    cr_expect(model_forward(m, &b, lg, &e) != 0 && strstr(e.msg, "gap"), "%s", e.msg);
    int32_t skip[3] = {0, 2, 3};
    b = (struct batch){.token = tok, .pos = skip, .seq = seq, .n = 3};
    cr_expect(model_forward(m, &b, lg, &e) != 0, "non-consecutive positions in one batch must fail");
    cr_expect(kv_rows(kv) == 0, "a rejected batch must not change the cache");
    b = (struct batch){.token = tok, .pos = pos, .seq = seq, .n = 3};
    cr_expect(model_forward(m, &b, lg, &e) == 0, "%s", e.msg);
    for (int32_t p = 3; p < 8; p++) {
        struct batch d = {.token = tok, .pos = &p, .seq = seq, .n = 1};
        cr_expect(model_forward(m, &d, lg, &e) == 0, "%s", e.msg);
    }
    b = (struct batch){.token = tok, .pos = &p8, .seq = seq, .n = 1};
    cr_expect(model_forward(m, &b, lg, &e) != 0 && e.code == ERR_CONTEXT, "%s", e.msg);
    free(lg);
    kv_free(kv);
    model_free(m);
}

Test(model, bad_files_are_errors)
{
    struct err e = {0};
    const char *p = write_model(&DENSE, "blk.1.attn_k_norm.weight");
    struct model *m = model_load(p, NULL, &e);
    unlink(p);
    cr_expect(!m && strstr(e.msg, "blk.1.attn_k_norm.weight"), "missing tensor: %s", e.msg);
    struct shape s = DENSE;
    s.arch = "llama";
    p = write_model(&s, NULL);
    m = model_load(p, NULL, &e);
    unlink(p);
    cr_expect(!m && strstr(e.msg, "llama"), "unknown architecture: %s", e.msg);
    m = model_load("/nonexistent/model.gguf", NULL, &e);
    cr_expect(!m && e.code != ERR_OK);
}

/* KV rows <= capacity is a checked assertion (kv_cache.c; the Makefile never defines NDEBUG):
 * marking more rows valid than the cache holds, or storing past it, aborts. */
Test(model, kv_rows_past_capacity_abort, .signal = SIGABRT)
{
    struct kv_cache kv = {.n_layer = 1, .n_head_kv = 1, .head_dim = 4, .n_ctx = 8, .cap = 16};
    kv_set_rows(&kv, 8); /* full: fine */
    kv_set_rows(&kv, 9);
}

Test(model, kv_store_past_capacity_aborts, .signal = SIGABRT)
{
    struct kv_cache kv = {.n_layer = 1, .n_head_kv = 1, .head_dim = 4, .n_ctx = 8, .cap = 16};
    float x[4] = {0};
    kv_store(&kv, 0, 8, x, x); /* the assertion fires before any write (k, v are NULL) */
}

/* --no-mmap (model_opts.no_mmap): the GGUF read into anonymous memory must give the mapped file's
 * logits bit for bit (the same bytes, only where they live differs), and a truncated file must
 * fail to load with an error naming it, as with the mapping. */
Test(model, no_mmap_loads_the_same_bytes)
{
    const char *p = write_model(&DENSE_Q8, NULL);
    struct err e = {0};
    struct model_opts om = {.n_threads = 2}, oc = {.n_threads = 2, .no_mmap = true};
    struct model *mm = model_load(p, &om, &e);
    cr_assert(mm, "mapped: %s", e.msg);
    struct model *mc = model_load(p, &oc, &e);
    cr_assert(mc, "read: %s", e.msg);
    int V = model_config(mm)->n_vocab;
    int32_t tok[5] = {3, 77, 150, 9, 201}, pos[5] = {0, 1, 2, 3, 4};
    bool want[5] = {true, true, true, true, true};
    struct kv_cache *ka = kv_new(mm, 16, &e), *kb = kv_new(mc, 16, &e);
    cr_assert(ka && kb, "%s", e.msg);
    struct kv_cache *sa[5] = {ka, ka, ka, ka, ka}, *sb[5] = {kb, kb, kb, kb, kb};
    float *la = malloc(sizeof(float) * (size_t)V * 5), *lb = malloc(sizeof(float) * (size_t)V * 5);
    struct batch ba = {.token = tok, .pos = pos, .seq = sa, .want_logits = want, .n = 5};
    struct batch bb = {.token = tok, .pos = pos, .seq = sb, .want_logits = want, .n = 5};
    cr_assert(model_forward(mm, &ba, la, &e) == 0, "%s", e.msg);
    cr_assert(model_forward(mc, &bb, lb, &e) == 0, "%s", e.msg);
    cr_assert(memcmp(la, lb, sizeof(float) * (size_t)V * 5) == 0, "logits differ with --no-mmap");
    free(la), free(lb);
    kv_free(ka), kv_free(kb);
    model_free(mm), model_free(mc);
    /* cut the file in the middle of its tensor data */
    struct stat st;
    cr_assert(stat(p, &st) == 0);
    cr_assert(truncate(p, st.st_size / 2) == 0);
    e = (struct err){0};
    cr_assert_null(model_load(p, &oc, &e), "a truncated file loaded with --no-mmap");
    cr_assert(strstr(e.msg, p), "the error does not name the file: %s", e.msg);
    unlink(p);
}

/* Tensor t lies wholly inside the load's copy of g's weights (gguf.repack). */
static bool in_copy(const struct gguf *g, const struct gguf_tensor *t)
{
    const uint8_t *a = g->repack, *d = t->data;
    return a && d >= a && d + t->nbytes <= a + g->repack_size;
}

/* mr's logits are mf's bit for bit: 5 tokens (the direct few-token kernels), then 1 (decode),
 * then 40 (pack + kernel), every position's logits. */
static void same_logits(struct model *mf, struct model *mr, const char *what)
{
    struct err e = {0};
    int V = model_config(mf)->n_vocab;
    enum { N = 46 };
    int32_t tok[N], pos[N];
    bool want[N];
    for (int i = 0; i < N; i++)
        tok[i] = (i * 37 + 11) % V, pos[i] = i, want[i] = true;
    struct kv_cache *ka = kv_new(mf, 64, &e), *kb = kv_new(mr, 64, &e);
    cr_assert(ka && kb, "%s", e.msg);
    struct kv_cache *sa[N], *sb[N];
    for (int i = 0; i < N; i++)
        sa[i] = ka, sb[i] = kb;
    float *la = malloc(sizeof(float) * (size_t)V * N), *lb = malloc(sizeof(float) * (size_t)V * N);
    static const int parts[][2] = {{0, 5}, {5, 1}, {6, 40}};
    for (int k = 0; k < 3; k++) {
        int o = parts[k][0], n = parts[k][1];
        struct batch ba = {.token = tok + o, .pos = pos + o, .seq = sa + o, .want_logits = want + o, .n = n};
        struct batch bb = {.token = tok + o, .pos = pos + o, .seq = sb + o, .want_logits = want + o, .n = n};
        cr_assert(model_forward(mf, &ba, la, &e) == 0, "%s", e.msg);
        cr_assert(model_forward(mr, &bb, lb, &e) == 0, "%s", e.msg);
        for (int64_t j = 0; j < (int64_t)V * n; j++)
            cr_assert(memcmp(&la[j], &lb[j], 4) == 0,
                      "%s, %d tokens from %d: token %ld logit %ld: repacked %.9g vs file layout %.9g", what,
                      n, o, (long)(j / V), (long)(j % V), lb[j], la[j]);
    }
    free(la), free(lb);
    kv_free(ka), kv_free(kb);
}

/* The copy at load (matmul.h; the default): a model whose matrices were copied into memory and,
 * where mm_slab_supported, repacked into the slab layout must give the logits of the same file
 * read in place (--no-repack), bit for bit — prefill through the direct few-token kernels (5
 * tokens) and pack + kernel (40), decode (1), the tied embedding read back row by row through the
 * slabs, vocabularies that end in a partial slab (260 rows), q8_0, K-quant (q4_K, q5_K, q6_K) and f16 files (f16:
 * copied as it is), from the mapping and from a --no-mmap copy. */
Test(model, repack_gives_the_file_layouts_logits)
{
    static const struct shape shapes[] = {
        {"qwen3", 2, 128, 4, 2, 64, 160, 260, 0, 0, 0, false, GGML_TYPE_Q8_0},
        {"qwen3", 2, 256, 4, 2, 64, 512, 260, 0, 0, 0, true, GGML_TYPE_Q4_K},
        {"qwen3", 1, 256, 4, 2, 64, 256, 276, 0, 0, 0, true, GGML_TYPE_Q6_K},
        {"qwen3", 1, 128, 4, 2, 32, 160, 260, 0, 0, 0, false, GGML_TYPE_F16},
        {"qwen3", 2, 128, 4, 2, 64, 160, 260, 0, 0, 0, false, GGML_TYPE_Q8_0},
        {"qwen3", 1, 256, 4, 2, 64, 256, 276, 0, 0, 0, true, GGML_TYPE_Q5_K},
    };
    for (int si = 0; si < 6; si++) {
        const struct shape *sh = &shapes[si];
        const char *p = write_model(sh, NULL);
        struct err e = {0};
        struct model_opts of = {.n_threads = 2, .no_repack = true}, orp = {.n_threads = 2, .no_mmap = si == 4};
        struct model *mf = model_load(p, &of, &e);
        cr_assert(mf, "file layout: %s", e.msg);
        struct model *mr = model_load(p, &orp, &e);
        cr_assert(mr, "repacked: %s", e.msg);
        const struct gguf_tensor *te = gguf_find_tensor(model_gguf(mr), "token_embd.weight");
        cr_assert(te && te->slab == mm_slab_supported(sh->wtype),
                  "%s: token_embd.weight slab %d, but the slab path is %s here",
                  quant_traits(sh->wtype)->name, te ? te->slab : -1,
                  mm_slab_supported(sh->wtype) ? "present" : "absent");
        cr_assert(!gguf_find_tensor(model_gguf(mf), "token_embd.weight")->slab, "--no-repack repacked");
        /* copied (into the arena) exactly when a matmul path computes the type here */
        const struct gguf *gr = model_gguf(mr);
        const bool copied = mm_slab_supported(sh->wtype) || mm_gemm_supported(sh->wtype),
                   in_arena = in_copy(gr, te);
        cr_assert(in_arena == copied, "%s: token_embd.weight %s the load's copy", quant_traits(sh->wtype)->name,
                  in_arena ? "in" : "not in");
        cr_assert(!model_gguf(mf)->repack, "--no-repack copied");
        same_logits(mf, mr, quant_traits(sh->wtype)->name);
        model_free(mf), model_free(mr);
        unlink(p);
    }
}

/* MoE expert tensors are copied too (each expert a whole number of slabs, in the slab layout
 * where the type has one), except under --experts=borrow, which leaves them in the mapping; the
 * logits are the file layout's bit for bit either way (q8_0 and q4_K experts, routed so every
 * expert of a 6-expert top-2 layer gets tokens). */
Test(model, repack_copies_experts_unless_borrowed)
{
    static const struct shape shapes[] = {
        {"qwen3moe", 2, 128, 4, 2, 32, 0, 300, 6, 2, 32, false, GGML_TYPE_Q8_0},
        {"qwen3moe", 1, 256, 4, 2, 64, 0, 260, 6, 2, 256, true, GGML_TYPE_Q4_K},
    };
    for (int si = 0; si < 2; si++) {
        const struct shape *sh = &shapes[si];
        const char *p = write_model(sh, NULL);
        struct err e = {0};
        struct model_opts of = {.n_threads = 2, .no_repack = true}, od = {.n_threads = 2},
                          ob = {.n_threads = 2, .experts_borrow = true};
        struct model *mf = model_load(p, &of, &e), *md = model_load(p, &od, &e), *mb = model_load(p, &ob, &e);
        cr_assert(mf && md && mb, "%s", e.msg);
        const bool copies = mm_slab_supported(sh->wtype) || mm_gemm_supported(sh->wtype);
        static const char *names[] = {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight",
                                      "blk.0.ffn_down_exps.weight"};
        for (int k = 0; k < 3; k++) {
            const struct gguf *gd = model_gguf(md), *gb = model_gguf(mb);
            const struct gguf_tensor *td = gguf_find_tensor(gd, names[k]), *tb = gguf_find_tensor(gb, names[k]);
            cr_assert(td && tb && td->n_dims == 3, "%s", names[k]);
            const bool in_d = in_copy(gd, td), in_b = in_copy(gb, tb);
            cr_assert(in_d == copies, "%s %s: %s the load's copy", quant_traits(sh->wtype)->name, names[k],
                      in_d ? "in" : "not in");
            cr_assert(td->slab == mm_slab_supported(sh->wtype), "%s: slab %d", names[k], td->slab);
            cr_assert(!in_b && !tb->slab, "%s: copied under --experts=borrow", names[k]);
        }
        same_logits(mf, md, "experts copied");
        same_logits(mf, mb, "experts borrowed");
        model_free(mf), model_free(md), model_free(mb);
        unlink(p);
    }
}
