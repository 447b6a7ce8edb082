/* mkmodel_gen: keys and tensor layout as llama.cpp names them, type mix, determinism, and that the
 * quantized files hold the same weights as the f32 one. Small custom shapes keep this fast; the
 * real shapes are exercised through the CLI by tests/suites/21-mkmodel.sh. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/gguf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/kernels/quant.h"

static const struct mkmodel_shape dense = {
    .name = "test-dense", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .head_dim = 48,
    .n_vocab = 1000, .n_ctx = 2048, .tied = false, .rope_base = 1e6f, .norm_eps = 1e-6f};
static const struct mkmodel_shape moe = {
    .name = "test-moe", .n_layer = 2, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .head_dim = 32,
    .n_vocab = 300, .n_ctx = 1024, .tied = true, .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 32,
    .rope_base = 1e4f, .norm_eps = 1e-5f};

static char *gen(const struct mkmodel_shape *s, enum mkmodel_type t, uint64_t seed)
{
    char *p = malloc(128);
    snprintf(p, 128, "/tmp/lms-mkmodel-%ld-XXXXXX", (long)getpid());
    int fd = mkstemp(p);
    cr_assert(fd >= 0);
    close(fd);
    struct err e = {0};
    cr_assert_eq(mkmodel_write(s, t, seed, NULL, p, &e), 0, "%s", e.msg);
    return p;
}

static void rm(char *p)
{
    unlink(p);
    free(p);
}

static uint8_t *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*n);
    cr_assert_eq(fread(p, 1, *n, f), *n);
    fclose(f);
    return p;
}

static uint32_t u32(const struct gguf *g, const char *k)
{
    uint32_t v = 0;
    struct err e;
    cr_assert_eq(gguf_get_u32(g, k, &v, &e), 0, "%s", e.msg);
    return v;
}

static const struct gguf_tensor *tensor(const struct gguf *g, const char *name, uint32_t type, int n_dims,
                                        int64_t ne0, int64_t ne1, int64_t ne2)
{
    const struct gguf_tensor *t = gguf_find_tensor(g, name);
    cr_assert(t, "missing %s", name);
    cr_assert_eq(t->type, type, "%s: type %u, expected %u", name, t->type, type);
    cr_assert_eq(t->n_dims, n_dims, "%s", name);
    cr_assert(t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == ne2, "%s: %ld %ld %ld", name, (long)t->ne[0],
              (long)t->ne[1], (long)t->ne[2]);
    return t;
}

/* mean and std of a tensor's values (dequantized) */
static void stats(const struct gguf_tensor *t, double *mean, double *std)
{
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    float *f = malloc((size_t)n * sizeof *f);
    quant_traits(t->type)->to_float_ref(t->data, f, n);
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < n; i++) {
        s += f[i];
        s2 += (double)f[i] * f[i];
    }
    *mean = s / (double)n;
    *std = sqrt(s2 / (double)n - *mean * *mean);
    free(f);
}

Test(mkmodel, dense_keys_and_tensors)
{
    char *p = gen(&dense, MKMODEL_F32, 7);
    struct gguf g;
    struct err e = {0};
    cr_assert_eq(gguf_open(&g, p, &e), 0, "%s", e.msg);
    char *arch = gguf_get_str(&g, "general.architecture", &e);
    cr_assert_str_eq(arch, "qwen3");
    free(arch);
    cr_assert_eq(u32(&g, "general.alignment"), 32);
    cr_assert_eq(u32(&g, "general.file_type"), 0);
    cr_assert_eq(u32(&g, "qwen3.block_count"), 2);
    cr_assert_eq(u32(&g, "qwen3.context_length"), 2048);
    cr_assert_eq(u32(&g, "qwen3.embedding_length"), 256);
    cr_assert_eq(u32(&g, "qwen3.feed_forward_length"), 512);
    cr_assert_eq(u32(&g, "qwen3.attention.head_count"), 4);
    cr_assert_eq(u32(&g, "qwen3.attention.head_count_kv"), 2);
    cr_assert_eq(u32(&g, "qwen3.attention.key_length"), 48);
    cr_assert_eq(u32(&g, "qwen3.attention.value_length"), 48);
    float f;
    cr_assert_eq(gguf_get_f32(&g, "qwen3.rope.freq_base", &f, &e), 0);
    cr_assert_eq(f, 1e6f);
    cr_assert_eq(gguf_get_f32(&g, "qwen3.attention.layer_norm_rms_epsilon", &f, &e), 0);
    cr_assert_eq(f, 1e-6f);
    cr_assert_null(gguf_find(&g, "qwen3.expert_count"));
    cr_assert_eq(g.n_tensors, 3 + 2 * 11);
    tensor(&g, "token_embd.weight", GGML_TYPE_F32, 2, 256, 1000, 1);
    tensor(&g, "output.weight", GGML_TYPE_F32, 2, 256, 1000, 1);
    tensor(&g, "output_norm.weight", GGML_TYPE_F32, 1, 256, 1, 1);
    for (int l = 0; l < 2; l++) {
        char n[64];
#define T(role, nd, a, b) (snprintf(n, sizeof n, "blk.%d.%s.weight", l, role), tensor(&g, n, GGML_TYPE_F32, nd, a, b, 1))
        T("attn_norm", 1, 256, 1);
        T("attn_q", 2, 256, 4 * 48);
        T("attn_k", 2, 256, 2 * 48);
        T("attn_v", 2, 256, 2 * 48);
        T("attn_output", 2, 4 * 48, 256);
        T("attn_q_norm", 1, 48, 1);
        T("attn_k_norm", 1, 48, 1);
        T("ffn_norm", 1, 256, 1);
        T("ffn_gate", 2, 256, 512);
        T("ffn_up", 2, 256, 512);
        T("ffn_down", 2, 512, 256);
#undef T
    }
    /* scales: norms ~ 1 +- small noise, projections ~ 1/sqrt(fan_in) (times a gain), rows differ */
    double m, s;
    stats(gguf_find_tensor(&g, "blk.0.attn_norm.weight"), &m, &s);
    cr_assert(fabs(m - 1) < 0.02 && s > 0.01 && s < 0.1, "norm mean %g std %g", m, s);
    stats(gguf_find_tensor(&g, "blk.1.ffn_down.weight"), &m, &s);
    cr_assert(fabs(m) < 0.01 && s > 1 / sqrt(512) && s < 3 / sqrt(512), "ffn_down mean %g std %g", m, s);
    stats(gguf_find_tensor(&g, "blk.0.attn_q.weight"), &m, &s);
    cr_assert(fabs(m) < 0.01 && s > 1 / sqrt(256) && s < 3 / sqrt(256), "attn_q mean %g std %g", m, s);
    const float *q0 = gguf_find_tensor(&g, "blk.0.attn_q.weight")->data;
    const float *q1 = gguf_find_tensor(&g, "blk.1.attn_q.weight")->data;
    cr_assert_neq(memcmp(q0, q0 + 256, 256 * sizeof(float)), 0); /* rows differ */
    cr_assert_neq(memcmp(q0, q1, 256 * sizeof(float)), 0);       /* layers differ */
    gguf_close(&g);
    rm(p);
}

Test(mkmodel, moe_keys_and_tensors)
{
    char *p = gen(&moe, MKMODEL_Q8_0, 3);
    struct gguf g;
    struct err e = {0};
    cr_assert_eq(gguf_open(&g, p, &e), 0, "%s", e.msg);
    char *arch = gguf_get_str(&g, "general.architecture", &e);
    cr_assert_str_eq(arch, "qwen3moe");
    free(arch);
    cr_assert_eq(u32(&g, "general.file_type"), 7);
    cr_assert_eq(u32(&g, "general.quantization_version"), 2);
    cr_assert_eq(u32(&g, "qwen3moe.expert_count"), 4);
    cr_assert_eq(u32(&g, "qwen3moe.expert_used_count"), 2);
    cr_assert_eq(u32(&g, "qwen3moe.expert_feed_forward_length"), 32);
    cr_assert_eq(u32(&g, "qwen3moe.attention.key_length"), 32);
    cr_assert_null(gguf_find_tensor(&g, "output.weight")); /* tied */
    cr_assert_null(gguf_find_tensor(&g, "blk.0.ffn_gate.weight"));
    cr_assert_eq(g.n_tensors, 2 + 2 * 12);
    tensor(&g, "token_embd.weight", GGML_TYPE_Q8_0, 2, 64, 300, 1);
    tensor(&g, "blk.1.ffn_gate_inp.weight", GGML_TYPE_F32, 2, 64, 4, 1);
    tensor(&g, "blk.1.ffn_gate_exps.weight", GGML_TYPE_Q8_0, 3, 64, 32, 4);
    tensor(&g, "blk.1.ffn_up_exps.weight", GGML_TYPE_Q8_0, 3, 64, 32, 4);
    tensor(&g, "blk.1.ffn_down_exps.weight", GGML_TYPE_Q8_0, 3, 32, 64, 4);
    tensor(&g, "blk.1.attn_q_norm.weight", GGML_TYPE_F32, 1, 32, 1, 1);
    gguf_close(&g);
    rm(p);
}

Test(mkmodel, deterministic_and_seeded)
{
    char *a = gen(&moe, MKMODEL_Q4_K_M, 5), *b = gen(&moe, MKMODEL_Q4_K_M, 5), *c = gen(&moe, MKMODEL_Q4_K_M, 6);
    size_t na, nb, nc;
    uint8_t *pa = slurp(a, &na), *pb = slurp(b, &nb), *pc = slurp(c, &nc);
    cr_assert_eq(na, nb);
    cr_assert_eq(memcmp(pa, pb, na), 0, "same seed, shape and type must give identical bytes");
    cr_assert_eq(na, nc);
    cr_assert_neq(memcmp(pa, pc, na), 0, "another seed must give other weights");
    free(pa);
    free(pb);
    free(pc);
    rm(a);
    rm(b);
    rm(c);
}

/* q8_0 / q4_k_m / f16 files hold the f32 file's weights, quantized */
Test(mkmodel, quantized_files_hold_the_same_weights)
{
    char *pf = gen(&dense, MKMODEL_F32, 11);
    struct gguf gf;
    struct err e = {0};
    cr_assert_eq(gguf_open(&gf, pf, &e), 0, "%s", e.msg);
    const enum mkmodel_type types[] = {MKMODEL_F16, MKMODEL_Q8_0, MKMODEL_Q4_K_M};
    const double tol[] = {0.001, 0.01, 0.12}; /* relative RMS error bound */
    const char *names[] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_v.weight",
                           "blk.1.ffn_down.weight", "blk.1.attn_output.weight"};
    const char *roles[] = {"token_embd", "attn_q", "attn_v", "ffn_down", "attn_output"};
    for (int k = 0; k < 3; k++) {
        char *pq = gen(&dense, types[k], 11);
        struct gguf gq;
        cr_assert_eq(gguf_open(&gq, pq, &e), 0, "%s", e.msg);
        for (int i = 0; i < 5; i++) {
            const struct gguf_tensor *tf = gguf_find_tensor(&gf, names[i]), *tq = gguf_find_tensor(&gq, names[i]);
            cr_assert(tf && tq);
            cr_assert_eq(tq->type, mkmodel_tensor_type(types[k], roles[i], tf->ne[0]), "%s", names[i]);
            int64_t n = tf->ne[0] * tf->ne[1];
            float *f = malloc((size_t)n * sizeof *f);
            quant_traits(tq->type)->to_float_ref(tq->data, f, n);
            const float *ref = tf->data;
            double err2 = 0, ref2 = 0;
            for (int64_t j = 0; j < n; j++) {
                err2 += ((double)f[j] - ref[j]) * ((double)f[j] - ref[j]);
                ref2 += (double)ref[j] * ref[j];
            }
            cr_assert_lt(sqrt(err2 / ref2), tol[k], "%s in %s: rel rms err %g", names[i], mkmodel_type_name(types[k]),
                         sqrt(err2 / ref2));
            cr_assert_gt(sqrt(err2 / ref2), 0, "%s in %s is not quantized", names[i], mkmodel_type_name(types[k]));
            free(f);
        }
        gguf_close(&gq);
        rm(pq);
    }
    gguf_close(&gf);
    rm(pf);
}

Test(mkmodel, q4_k_m_type_mix)
{
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "attn_q", 1024), GGML_TYPE_Q4_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "ffn_up_exps", 2048), GGML_TYPE_Q4_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "attn_v", 1024), GGML_TYPE_Q6_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "ffn_down", 3072), GGML_TYPE_Q6_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "ffn_down_exps", 768), GGML_TYPE_Q6_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "token_embd", 1024), GGML_TYPE_Q6_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "output", 1024), GGML_TYPE_Q6_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "attn_q", 64), GGML_TYPE_Q8_0);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "attn_v", 192), GGML_TYPE_Q8_0);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "attn_q", 48), GGML_TYPE_F16);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q8_0, "attn_q", 48), GGML_TYPE_F16);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q8_0, "attn_q", 64), GGML_TYPE_Q8_0);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q8_0, "attn_k_norm", 64), GGML_TYPE_F32);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q4_K_M, "ffn_gate_inp", 1024), GGML_TYPE_F32);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_F16, "output_norm", 1024), GGML_TYPE_F32);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_F16, "attn_q", 1024), GGML_TYPE_F16);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q5_K_M, "attn_q", 1024), GGML_TYPE_Q5_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q5_K_M, "ffn_down", 3072), GGML_TYPE_Q6_K);
    cr_assert_eq(mkmodel_tensor_type(MKMODEL_Q5_K_M, "attn_q", 64), GGML_TYPE_Q8_0);
    cr_assert_eq(mkmodel_file_type(MKMODEL_Q5_K_M), 17u);
    cr_assert_eq(mkmodel_type_parse("q5_k_m"), MKMODEL_Q5_K_M);
    cr_assert_eq(mkmodel_type_parse("q4_k_m"), MKMODEL_Q4_K_M);
    cr_assert_eq(mkmodel_type_parse("q4_K_M"), -1);
    cr_assert_not_null(mkmodel_shape_find("qwen3-0.6b"));
    cr_assert_null(mkmodel_shape_find("qwen3-8b"));
    const struct mkmodel_shape *s = mkmodel_shape_find("qwen3-0.6b");
    cr_assert(s->n_layer == 28 && s->n_embd == 1024 && s->n_ff == 3072 && s->n_head == 16 && s->n_head_kv == 8 &&
              s->head_dim == 128 && s->n_vocab == 151936 && s->tied && s->rope_base == 1e6f && s->norm_eps == 1e-6f &&
              s->n_ctx == 40960);
}

Test(mkmodel, rejects_bad_input)
{
    struct err e = {0};
    struct hf_tokenizer tok = {.n_tokens = 3};
    cr_assert_neq(mkmodel_write(&dense, MKMODEL_F32, 1, &tok, "/tmp/never-written.gguf", &e), 0);
    cr_assert(strstr(e.msg, "3 tokens"), "%s", e.msg);
    struct mkmodel_shape bad = dense;
    bad.n_head_kv = 3;
    cr_assert_neq(mkmodel_write(&bad, MKMODEL_F32, 1, NULL, "/tmp/never-written.gguf", &e), 0);
    cr_assert(strstr(e.msg, "inconsistent"), "%s", e.msg);
    cr_assert_neq(mkmodel_write(&dense, MKMODEL_F32, 1, NULL, "/nonexistent-dir/x.gguf", &e), 0);
    cr_assert(strstr(e.msg, "/nonexistent-dir/x.gguf"), "%s", e.msg);
    cr_assert_neq(access("/tmp/never-written.gguf", F_OK), 0);
}
