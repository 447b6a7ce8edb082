/* mkmodel_qwen35 — synthetic Qwen3.5 (`qwen35`) and Qwen3.5-MoE (`qwen35moe`) GGUFs from seeded
 * random weights, with llama.cpp's keys and tensor names (so libllama loads the same file; see
 * docs/qwen35.md for the layout this writes and the forward reads).
 *
 * The hybrid stack: layer l is a Gated DeltaNet (linear attention) layer unless
 * (l + 1) % full_attention_interval == 0, which is a gated full-attention layer; the file states
 * qwen35.full_attention_interval (llama.cpp's fallback when attention.recurrent_layers is absent).
 * Norm weights are stored as the GGUF carries them: llama.cpp's converter adds the +1 of Qwen3.5's
 * (1 + w) RMSNorms at conversion (every `*norm.weight` except the DeltaNet output norm
 * ssm_norm), so in the file every norm is a plain multiplier, ~1 here. ssm_a holds -exp(A_log)
 * (negative: the per-head log-decay rate), ssm_dt.bias the softplus bias.
 *
 * Random streams: each row of each tensor from (seed, tensor name, row) by splitmix64 and
 * Irwin-Hall(4), integer/float arithmetic only, so files are byte-identical anywhere (as the
 * qwen3 shapes of mkmodel_gen.c; the generator is this file's own). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/gguf.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/kernels/quant.h"
#include "engine/text/hf_tokenizer.h"

/* The DeltaNet geometry of a shape (llama.cpp's ssm.* keys). */
struct q35_ssm {
    int d_conv;   /* ssm.conv_kernel */
    int d_state;  /* ssm.state_size: head dim of q/k and v */
    int n_group;  /* ssm.group_count: q/k heads */
    int dt_rank;  /* ssm.time_step_rank: v heads (= gates, betas) */
    int interval; /* full_attention_interval */
    int n_rot;    /* rope.dimension_count (partial RoPE) */
    int sections[4]; /* rope.dimension_sections (interleaved M-RoPE) */
    int n_ff_shexp;  /* MoE: expert_shared_feed_forward_length */
};

static int q35_write(const struct mkmodel_shape *s, int type, uint64_t seed,
                     const struct hf_tokenizer *tok, const char *path, struct err *e);

/* Real Qwen3.5-0.8B: n_embd 1024, 24 layers (interval 4), 8 heads (2 kv) x 256, n_rot 64,
 * sections 11/11/10/0, DeltaNet 16 q/k heads and 16 v heads x 128, conv 4. The tiny shapes keep
 * every feature that matters for the numerics: v heads > q/k heads (the tiled head map), a
 * partial rotary width with three sections, a head_dim that differs from n_embd / n_head. */
static const struct q35_ssm SSM[MKMODEL_QWEN35_SHAPES] = {
    {.d_conv = 4, .d_state = 16, .n_group = 2, .dt_rank = 4, .interval = 4, .n_rot = 8, .sections = {2, 1, 1, 0}},
    {.d_conv = 4, .d_state = 16, .n_group = 2, .dt_rank = 4, .interval = 4, .n_rot = 8, .sections = {2, 1, 1, 0},
     .n_ff_shexp = 96},
    /* the published Qwen3.5-0.8B geometry (benchmarks; the Qwen3 vocabulary as the stand-in) */
    {.d_conv = 4, .d_state = 128, .n_group = 16, .dt_rank = 16, .interval = 4, .n_rot = 64,
     .sections = {11, 11, 10, 0}},
};

const struct mkmodel_shape mkmodel_qwen35_shapes[MKMODEL_QWEN35_SHAPES] = {
    {.name = "qwen35-tiny", .n_layer = 4, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2,
     .head_dim = 32, .n_vocab = 151936, .n_ctx = 40960, .tied = true, .rope_base = 1e7f,
     .norm_eps = 1e-6f, .write = q35_write},
    {.name = "qwen35moe-tiny", .n_layer = 4, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 2,
     .head_dim = 32, .n_vocab = 151936, .n_ctx = 40960, .tied = false, .n_expert = 8,
     .n_expert_used = 2, .n_ff_exp = 48, .rope_base = 1e7f, .norm_eps = 1e-6f, .write = q35_write},
    {.name = "qwen35-0.8b", .n_layer = 24, .n_embd = 1024, .n_ff = 3584, .n_head = 8, .n_head_kv = 2,
     .head_dim = 256, .n_vocab = 151936, .n_ctx = 262144, .tied = true, .rope_base = 1e7f,
     .norm_eps = 1e-6f, .write = q35_write},
};

/* ---- deterministic random rows ---- */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct q35_tensor {
    char name[64];
    uint64_t seed;
    int64_t ne0;
    float mean, std;
    uint32_t type;
    bool abs; /* |z| (one-signed values) */
};

static int q35_fill(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e)
{
    const struct q35_tensor *t = ctx;
    float *f = t->type == GGML_TYPE_F32 ? dst : malloc((size_t)t->ne0 * sizeof *f);
    if (!f) return err_set(e, ERR_NOMEM, "out of memory generating %s", t->name);
    size_t rs = t->type == GGML_TYPE_F32 ? 0 : quant_row_size((enum ggml_type)t->type, t->ne0);
    const float k = 1.7320508f / 65536.0f; /* sqrt(3) / 2^16: Irwin-Hall(4) to unit variance */
    for (int64_t r = 0; r < n_rows; r++) {
        float *row = t->type == GGML_TYPE_F32 ? f + r * t->ne0 : f;
        uint64_t s = t->seed ^ ((uint64_t)(row0 + r) * 0xd1b54a32d192ed03ull);
        splitmix(&s);
        for (int64_t i = 0; i < t->ne0; i++) {
            uint64_t x = splitmix(&s);
            float z = ((float)((x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48)) +
                       2.0f - 131072.0f) * k;
            row[i] = t->mean + t->std * (t->abs ? fabsf(z) : z);
        }
        if (t->type != GGML_TYPE_F32)
            quant_traits((enum ggml_type)t->type)->from_float_ref(row, (uint8_t *)dst + (size_t)r * rs, t->ne0);
    }
    if (f != dst) free(f);
    return 0;
}

struct q35_gen {
    struct gguf_writer *w;
    struct q35_tensor *t;
    int n, cap;
    uint64_t seed;
    enum mkmodel_type type;
    struct err err;
    bool failed;
};

static void add(struct q35_gen *g, const char *name, const char *role, int n_dims, const int64_t *ne,
                float mean, float std, bool abs)
{
    if (g->failed) return;
    if (g->n == g->cap) {
        g->failed = true;
        err_set(&g->err, ERR_INTERNAL, "mkmodel: tensor table full at %s", name);
        return;
    }
    struct q35_tensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t s = g->seed ^ h;
    t->seed = splitmix(&s);
    t->ne0 = ne[0];
    t->mean = mean;
    t->std = std;
    t->abs = abs;
    /* 1-D tensors (norms, ssm_a, ssm_dt, the shared-expert gate) and the conv kernel stay F32
     * (llama.cpp's quantizer keeps them so; the conv rows are only d_conv wide) */
    t->type = n_dims == 1 || !strcmp(role, "ssm_conv1d") ? GGML_TYPE_F32 : mkmodel_tensor_type(g->type, role, ne[0]);
    if (gguf_w_tensor_fill(g->w, name, t->type, n_dims, ne, q35_fill, t)) {
        g->failed = true;
        err_set(&g->err, ERR_INVALID, "mkmodel: cannot add tensor %s", name);
    }
}

static float inv_sqrt(int64_t n) { return 1.0f / sqrtf((float)n); }

#define GAIN 1.6f /* projections: std = GAIN / sqrt(fan_in) (mkmodel_gen.c's PROJ_GAIN) */

static void matrix(struct q35_gen *g, const char *name, const char *role, int64_t n_in, int64_t n_out, float gain)
{
    add(g, name, role, 2, (int64_t[]){n_in, n_out}, 0.0f, gain * inv_sqrt(n_in), false);
}

static void norm(struct q35_gen *g, const char *name, int64_t n)
{
    add(g, name, "norm", 1, (int64_t[]){n}, 1.0f, 0.05f, false);
}

static uint32_t ftype(enum mkmodel_type t)
{
    return mkmodel_file_type(t);
}

static int q35_write(const struct mkmodel_shape *s, int type, uint64_t seed,
                     const struct hf_tokenizer *tok, const char *path, struct err *e)
{
    int si = 0; /* by name: callers may pass an edited copy of a shape (tests: a small vocabulary) */
    while (si + 1 < MKMODEL_QWEN35_SHAPES && strcmp(mkmodel_qwen35_shapes[si].name, s->name)) si++;
    if (strcmp(mkmodel_qwen35_shapes[si].name, s->name))
        return err_set(e, ERR_INVALID, "mkmodel: %s is not a qwen35 shape", s->name);
    const struct q35_ssm *ss = &SSM[si];
    const bool moe = s->n_expert > 0;
    const char *arch = moe ? "qwen35moe" : "qwen35";
    if (tok && tok->n_tokens != s->n_vocab)
        return err_set(e, ERR_INVALID, "mkmodel: tokenizer has %" PRId64 " tokens, shape %s has vocab %" PRId64,
                       tok->n_tokens, s->name, s->n_vocab);
    struct q35_gen g = {.seed = seed, .type = type, .cap = 4 + s->n_layer * 20};
    g.t = calloc((size_t)g.cap, sizeof *g.t);
    g.w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    if (!g.t || !g.w) {
        free(g.t);
        gguf_writer_free(g.w);
        return err_set(e, ERR_NOMEM, "mkmodel: out of memory");
    }
    struct gguf_writer *w = g.w;
    char key[128], gname[128];
    snprintf(gname, sizeof gname, "lmserve-mkmodel-%s-%s-seed%" PRIu64, s->name, mkmodel_type_name(type), seed);
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    int rc = gguf_w_str(w, "general.architecture", arch);
    rc |= gguf_w_str(w, "general.name", gname);
    rc |= gguf_w_u32(w, "general.file_type", ftype(type));
    if (mkmodel_type_quantized(type)) rc |= gguf_w_u32(w, "general.quantization_version", 2);
    rc |= gguf_w_bool(w, MKMODEL_KEY_RANDOM, true);
    rc |= gguf_w_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    rc |= gguf_w_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
    rc |= gguf_w_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    rc |= gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    rc |= gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    rc |= gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    rc |= gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    rc |= gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    rc |= gguf_w_f32(w, KEY("rope.freq_base"), s->rope_base);
    rc |= gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)ss->n_rot);
    rc |= gguf_w_arr_num(w, KEY("rope.dimension_sections"), GGUF_I32, ss->sections, 4);
    rc |= gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->norm_eps);
    rc |= gguf_w_u32(w, KEY("ssm.conv_kernel"), (uint32_t)ss->d_conv);
    rc |= gguf_w_u32(w, KEY("ssm.state_size"), (uint32_t)ss->d_state);
    rc |= gguf_w_u32(w, KEY("ssm.group_count"), (uint32_t)ss->n_group);
    rc |= gguf_w_u32(w, KEY("ssm.time_step_rank"), (uint32_t)ss->dt_rank);
    rc |= gguf_w_u32(w, KEY("ssm.inner_size"), (uint32_t)(ss->d_state * ss->dt_rank));
    rc |= gguf_w_u32(w, KEY("full_attention_interval"), (uint32_t)ss->interval);
    if (moe) {
        rc |= gguf_w_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
        rc |= gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used);
        rc |= gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp);
        rc |= gguf_w_u32(w, KEY("expert_shared_feed_forward_length"), (uint32_t)ss->n_ff_shexp);
    }
#undef KEY
    if (!rc && tok && hf_tokenizer_write_gguf(tok, w, e)) {
        err_wrap(e, "mkmodel");
        goto fail;
    }

    const int64_t E = s->n_embd, HD = s->head_dim, QD = (int64_t)s->n_head * HD, KVD = (int64_t)s->n_head_kv * HD;
    const int64_t KD = (int64_t)ss->d_state * ss->n_group, VD = (int64_t)ss->d_state * ss->dt_rank;
    const int64_t CONV = 2 * KD + VD, HV = ss->dt_rank;
    add(&g, "token_embd.weight", "token_embd", 2, (int64_t[]){E, s->n_vocab}, 0.0f,
        (s->tied ? 3.0f : 1.0f) * inv_sqrt(E), false);
    norm(&g, "output_norm.weight", E);
    if (!s->tied) matrix(&g, "output.weight", "output", E, s->n_vocab, 3.0f);
    char name[64];
    for (int l = 0; l < s->n_layer; l++) {
#define NAME(role) (snprintf(name, sizeof name, "blk.%d.%s.weight", l, role), name)
        norm(&g, NAME("attn_norm"), E);
        norm(&g, NAME("post_attention_norm"), E);
        if ((l + 1) % ss->interval == 0) { /* gated full attention: q and its gate per head */
            matrix(&g, NAME("attn_q"), "attn_q", E, 2 * QD, GAIN);
            matrix(&g, NAME("attn_k"), "attn_k", E, KVD, GAIN);
            matrix(&g, NAME("attn_v"), "attn_v", E, KVD, GAIN);
            matrix(&g, NAME("attn_output"), "attn_output", QD, E, GAIN);
            norm(&g, NAME("attn_q_norm"), HD);
            norm(&g, NAME("attn_k_norm"), HD);
        } else { /* Gated DeltaNet */
            matrix(&g, NAME("attn_qkv"), "attn_qkv", E, CONV, GAIN);
            matrix(&g, NAME("attn_gate"), "attn_gate", E, VD, GAIN);
            add(&g, NAME("ssm_conv1d"), "ssm_conv1d", 2, (int64_t[]){ss->d_conv, CONV}, 0.0f,
                1.2f * inv_sqrt(ss->d_conv), false);
            snprintf(name, sizeof name, "blk.%d.ssm_dt.bias", l);
            add(&g, name, "ssm_dt", 1, (int64_t[]){HV}, 0.0f, 0.5f, false);
            snprintf(name, sizeof name, "blk.%d.ssm_a", l);
            /* -exp(A_log) in [-1.0, -0.1]: decays between ~0.4 and ~0.95 per token */
            add(&g, name, "ssm_a", 1, (int64_t[]){HV}, -0.1f, -0.26f, true);
            matrix(&g, NAME("ssm_beta"), "ssm_beta", E, HV, GAIN);
            matrix(&g, NAME("ssm_alpha"), "ssm_alpha", E, HV, GAIN);
            norm(&g, NAME("ssm_norm"), ss->d_state);
            matrix(&g, NAME("ssm_out"), "ssm_out", VD, E, GAIN);
        }
        if (!moe) {
            matrix(&g, NAME("ffn_gate"), "ffn_gate", E, s->n_ff, GAIN);
            matrix(&g, NAME("ffn_up"), "ffn_up", E, s->n_ff, GAIN);
            matrix(&g, NAME("ffn_down"), "ffn_down", s->n_ff, E, GAIN);
        } else {
            const int64_t ne_gu[3] = {E, s->n_ff_exp, s->n_expert}, ne_d[3] = {s->n_ff_exp, E, s->n_expert};
            matrix(&g, NAME("ffn_gate_inp"), "ffn_gate_inp", E, s->n_expert, 2.0f);
            add(&g, NAME("ffn_gate_exps"), "ffn_gate_exps", 3, ne_gu, 0.0f, GAIN * inv_sqrt(E), false);
            add(&g, NAME("ffn_up_exps"), "ffn_up_exps", 3, ne_gu, 0.0f, GAIN * inv_sqrt(E), false);
            add(&g, NAME("ffn_down_exps"), "ffn_down_exps", 3, ne_d, 0.0f, GAIN * inv_sqrt(s->n_ff_exp), false);
            add(&g, NAME("ffn_gate_inp_shexp"), "ffn_gate_inp_shexp", 1, (int64_t[]){E}, 0.0f, 2.0f * inv_sqrt(E), false);
            matrix(&g, NAME("ffn_gate_shexp"), "ffn_gate_shexp", E, ss->n_ff_shexp, GAIN);
            matrix(&g, NAME("ffn_up_shexp"), "ffn_up_shexp", E, ss->n_ff_shexp, GAIN);
            matrix(&g, NAME("ffn_down_shexp"), "ffn_down_shexp", ss->n_ff_shexp, E, GAIN);
        }
#undef NAME
    }
    if (g.failed) {
        if (e) *e = g.err;
        goto fail;
    }
    if (gguf_writer_save(w, path, e)) {
        err_wrap(e, "mkmodel");
        goto fail;
    }
    gguf_writer_free(w);
    free(g.t);
    return 0;
fail:
    gguf_writer_free(w);
    free(g.t);
    return -1;
}
