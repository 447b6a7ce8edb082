/* mkmodel_gen — see mkmodel_gen.h.
 *
 * Weight scales (why greedy decoding of these random models does not collapse): every projection
 * is N(0, (gain/sqrt(fan_in))^2)-ish with gain > 1, so each layer's attention and FFN output is
 * at least as large as the token embedding it is added to. The embedding itself is small
 * (EMBD_STD_SCALE/sqrt(n_embd)): the residual stream at the last layer is then dominated by what
 * attention mixed in from the context, not by the current token's own embedding, and a tied
 * output projection (logits = E . h) does not simply echo the input token. The output projection
 * gives logits with a standard deviation of about OUT_LOGIT_STD, peaked enough for greedy and
 * sampling to differ, flat enough for sampling to vary. */
#include "engine/format/mkmodel_gen.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/gguf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/kernels/quant.h"

#define PROJ_GAIN 1.6f      /* projections: std = PROJ_GAIN / sqrt(fan_in) */
#define ROUTER_GAIN 2.0f    /* MoE router logits std ~ ROUTER_GAIN */
#define EMBD_STD_SCALE 1.0f /* token_embd: std = EMBD_STD_SCALE / sqrt(n_embd) */
#define OUT_LOGIT_STD 3.0f  /* output (untied): std = OUT_LOGIT_STD / sqrt(n_embd) */
#define NORM_NOISE 0.05f    /* norm weights: 1 + NORM_NOISE * z */
#define GEN_MAX_THREADS 8

static const struct mkmodel_shape shapes[] = {
    /* tiny: real vocabulary, head_dim != n_embd/n_head (exercises key_length), GQA 4:1, untied.
     * n_head*head_dim = 256 and n_ff = 256 so q4_k_m puts real Q4_K (attn_output) and Q6_K
     * (ffn_down) blocks in a small model. */
    {.name = "tiny", .n_layer = 2, .n_embd = 64, .n_ff = 256, .n_head = 8, .n_head_kv = 2, .head_dim = 32,
     .n_vocab = 151936, .n_ctx = 40960, .tied = false, .rope_base = 1e6f, .norm_eps = 1e-6f},
    /* small: wide enough (K = 256, 512 in the products) that a product's reduction order shows
     * in the logits' last bits; the KV-reuse byte-identity tests run on it */
    {.name = "small", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2, .head_dim = 64,
     .n_vocab = 151936, .n_ctx = 40960, .tied = true, .rope_base = 1e6f, .norm_eps = 1e-6f},
    /* the real Qwen3-0.6B geometry */
    {.name = "qwen3-0.6b", .n_layer = 28, .n_embd = 1024, .n_ff = 3072, .n_head = 16, .n_head_kv = 8,
     .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .tied = true, .rope_base = 1e6f, .norm_eps = 1e-6f},
    /* small MoE: 8 experts, top-2, untied */
    {.name = "moe-tiny", .n_layer = 2, .n_embd = 64, .n_ff = 256, .n_head = 4, .n_head_kv = 2, .head_dim = 32,
     .n_vocab = 151936, .n_ctx = 40960, .tied = false, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 64,
     .rope_base = 1e6f, .norm_eps = 1e-6f},
    /* an MoE that streams from DRAM, for bench/engine.sh's bytes-per-token figures (issue 13):
     * Qwen3-30B-A3B's proportions scaled down — 16 layers, n_embd 1024, 64 experts of ff 512,
     * top-8 — 1.9 B parameters, ~0.45 B touched by a token (2.0 GB file in q8_0, ~0.47 GB read per
     * token when its 8 experts per layer are distinct) */
    {.name = "moe-bench", .n_layer = 16, .n_embd = 1024, .n_ff = 3072, .n_head = 16, .n_head_kv = 4,
     .head_dim = 128, .n_vocab = 151936, .n_ctx = 40960, .tied = true, .n_expert = 64,
     .n_expert_used = 8, .n_ff_exp = 512, .rope_base = 1e6f, .norm_eps = 1e-6f},
};

const struct mkmodel_shape *mkmodel_shape_find(const char *name)
{
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (name && strcmp(shapes[i].name, name) == 0) return &shapes[i];
    for (int i = 0; i < MKMODEL_GEMMA4_SHAPES; i++)
        if (name && strcmp(mkmodel_gemma4_shapes[i].name, name) == 0) return &mkmodel_gemma4_shapes[i];
    for (int i = 0; i < MKMODEL_QWEN35_SHAPES; i++)
        if (name && strcmp(mkmodel_qwen35_shapes[i].name, name) == 0) return &mkmodel_qwen35_shapes[i];
    return NULL;
}

const char *mkmodel_shape_names(void)
{
    return "tiny, small, qwen3-0.6b, moe-tiny, moe-bench, gemma4-tiny, gemma4-moe-tiny, gemma4-small, qwen35-tiny, "
           "qwen35moe-tiny, qwen35-0.8b";
}

static const char *const type_names[MKMODEL_TYPE_COUNT] = {"f32",   "f16",   "q8_0", "q4_k_m", "tq1_0",
                                                            "tq2_0", "q1_0",  "q2_0", "q5_k_m"};

int mkmodel_type_parse(const char *s)
{
    for (int i = 0; i < MKMODEL_TYPE_COUNT; i++)
        if (s && strcmp(s, type_names[i]) == 0) return i;
    return -1;
}

const char *mkmodel_type_name(enum mkmodel_type t) { return (unsigned)t < MKMODEL_TYPE_COUNT ? type_names[t] : "?"; }

static bool ends_with(const char *s, const char *suf)
{
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

uint32_t mkmodel_tensor_type(enum mkmodel_type t, const char *role, int64_t n_in)
{
    if (ends_with(role, "norm") || strcmp(role, "ffn_gate_inp") == 0) return GGML_TYPE_F32;
    switch (t) {
    case MKMODEL_F32: return GGML_TYPE_F32;
    case MKMODEL_F16: return GGML_TYPE_F16;
    case MKMODEL_Q8_0: return n_in % 32 == 0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    case MKMODEL_Q4_K_M:
    case MKMODEL_Q5_K_M: {
        bool more = strcmp(role, "token_embd") == 0 || strcmp(role, "output") == 0 || strcmp(role, "attn_v") == 0 ||
                    strcmp(role, "ffn_down") == 0 || strcmp(role, "ffn_down_exps") == 0;
        if (n_in % 256 == 0)
            return more ? GGML_TYPE_Q6_K : t == MKMODEL_Q5_K_M ? GGML_TYPE_Q5_K : GGML_TYPE_Q4_K;
        return n_in % 32 == 0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    }
    case MKMODEL_TQ1_0:
    case MKMODEL_TQ2_0:
    case MKMODEL_Q1_0:
    case MKMODEL_Q2_0: {
        static const uint32_t low[4] = {GGML_TYPE_TQ1_0, GGML_TYPE_TQ2_0, GGML_TYPE_Q1_0, GGML_TYPE_Q2_0};
        uint32_t lt = low[t - MKMODEL_TQ1_0];
        /* the embedding / output stay Q8_0 (llama.cpp's own choice for these ftypes is Q4_K / Q6_K):
         * a sign-only or ternary vocabulary projection of random weights would only add noise */
        bool edge = strcmp(role, "token_embd") == 0 || strcmp(role, "output") == 0;
        if (!edge && n_in % quant_traits((enum ggml_type)lt)->blck_size == 0) return lt;
        return n_in % 32 == 0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    }
    default: return GGML_TYPE_F32;
    }
}

uint32_t mkmodel_file_type(enum mkmodel_type t)
{
    /* llama.cpp's enum llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_Q4_K_M 15,
     * MOSTLY_TQ1_0 36, MOSTLY_TQ2_0 37, MOSTLY_Q1_0 40, MOSTLY_Q2_0 41, MOSTLY_Q5_K_M 17 */
    static const uint32_t ids[MKMODEL_TYPE_COUNT] = {0, 1, 7, 15, 36, 37, 40, 41, 17};
    return (unsigned)t < MKMODEL_TYPE_COUNT ? ids[t] : 0;
}

bool mkmodel_type_quantized(enum mkmodel_type t)
{
    return t != MKMODEL_F32 && t != MKMODEL_F16;
}

/* ---- deterministic random numbers (splitmix64; no libm so files are bit-identical anywhere) ---- */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t name_seed(uint64_t seed, const char *name)
{
    uint64_t h = 1469598103934665603ull;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
    uint64_t s = seed ^ h;
    return splitmix(&s);
}

/* Row r of a tensor: mean + std * z, z ~ Irwin-Hall(4) rescaled to unit variance (close to
 * normal, bounded by +-3.46). */
static void gen_row(uint64_t tseed, int64_t row, int64_t n, float mean, float std, float *out)
{
    uint64_t s = tseed ^ ((uint64_t)row * 0xd1b54a32d192ed03ull);
    splitmix(&s);
    const float k = 1.7320508f / 65536.0f; /* sqrt(3) / 2^16 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = splitmix(&s);
        float sum = (float)((x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48)) + 2.0f;
        out[i] = mean + std * (sum - 131072.0f) * k;
    }
}

/* ---- tensors ---- */
struct gen_shared {
    float *scratch;
    size_t cap; /* floats */
    int n_threads;
};

struct gen_tensor {
    char name[64];
    uint64_t seed;
    int64_t ne0;
    float mean, std;
    uint32_t type;
    struct gen_shared *sh;
};

struct gen_job {
    const struct gen_tensor *t;
    int64_t row0, n_rows;
    float *f;
    void *dst;
};

static void *gen_job_run(void *arg)
{
    struct gen_job *j = arg;
    const struct gen_tensor *t = j->t;
    for (int64_t r = 0; r < j->n_rows; r++) gen_row(t->seed, j->row0 + r, t->ne0, t->mean, t->std, j->f + r * t->ne0);
    if (t->type != GGML_TYPE_F32) {
        size_t row_bytes = quant_row_size(t->type, t->ne0);
        const struct quant_traits *qt = quant_traits(t->type);
        for (int64_t r = 0; r < j->n_rows; r++)
            qt->from_float_ref(j->f + r * t->ne0, (uint8_t *)j->dst + (size_t)r * row_bytes, t->ne0);
    }
    return NULL;
}

static int gen_fill(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e)
{
    const struct gen_tensor *t = ctx;
    struct gen_shared *sh = t->sh;
    float *f = dst;
    if (t->type != GGML_TYPE_F32) {
        size_t need = (size_t)n_rows * (size_t)t->ne0;
        if (need > sh->cap) {
            free(sh->scratch);
            sh->scratch = malloc(need * sizeof(float));
            sh->cap = sh->scratch ? need : 0;
            if (!sh->scratch) return err_set(e, ERR_NOMEM, "out of memory (%zu floats) generating %s", need, t->name);
        }
        f = sh->scratch;
    }
    int nt = sh->n_threads;
    if (nt > n_rows) nt = (int)n_rows;
    if (nt < 1) nt = 1;
    struct gen_job jobs[GEN_MAX_THREADS];
    pthread_t th[GEN_MAX_THREADS];
    bool started[GEN_MAX_THREADS] = {0};
    size_t row_bytes = t->type == GGML_TYPE_F32 ? 0 : quant_row_size(t->type, t->ne0);
    for (int i = 0; i < nt; i++) {
        int64_t a = n_rows * i / nt, b = n_rows * (i + 1) / nt;
        jobs[i] = (struct gen_job){.t = t, .row0 = row0 + a, .n_rows = b - a, .f = f + a * t->ne0,
                                   .dst = (uint8_t *)dst + (size_t)a * row_bytes};
        if (i > 0) started[i] = pthread_create(&th[i], NULL, gen_job_run, &jobs[i]) == 0;
    }
    gen_job_run(&jobs[0]);
    for (int i = 1; i < nt; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else gen_job_run(&jobs[i]); /* could not start a thread: do its share here */
    }
    return 0;
}

struct gen {
    struct gguf_writer *w;
    struct gen_tensor *t;
    int n, cap;
    uint64_t seed;
    enum mkmodel_type type;
    struct gen_shared sh;
    struct err err;
    bool failed;
};

/* Declares one tensor (its data comes from gen_fill at save time). */
static void add(struct gen *g, const char *name, const char *role, int n_dims, const int64_t *ne, float mean,
                float std)
{
    if (g->failed) return;
    if (g->n == g->cap) {
        /* never reallocated after the first add: the writer keeps pointers into g->t */
        g->failed = true;
        err_set(&g->err, ERR_INTERNAL, "mkmodel: tensor table full at %s", name);
        return;
    }
    struct gen_tensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->seed = name_seed(g->seed, name);
    t->ne0 = ne[0];
    t->mean = mean;
    t->std = std;
    t->type = mkmodel_tensor_type(g->type, role, ne[0]);
    t->sh = &g->sh;
    if (t->type != GGML_TYPE_F32 && (!quant_traits(t->type) || !quant_traits(t->type)->from_float_ref)) {
        g->failed = true;
        err_set(&g->err, ERR_UNSUPPORTED, "mkmodel: no quantizer for %s (type %" PRIu32 ")", name, t->type);
        return;
    }
    if (gguf_w_tensor_fill(g->w, name, t->type, n_dims, ne, gen_fill, t)) {
        g->failed = true;
        err_set(&g->err, ERR_INVALID, "mkmodel: cannot add tensor %s", name);
    }
}

/* sqrt is correctly rounded (IEEE 754), so this does not make files differ across libms. */
static float inv_sqrt(int64_t n) { return 1.0f / sqrtf((float)n); }

static void add_matrix(struct gen *g, const char *name, const char *role, int64_t n_in, int64_t n_out, float gain)
{
    add(g, name, role, 2, (int64_t[]){n_in, n_out}, 0.0f, gain * inv_sqrt(n_in));
}

static void add_norm(struct gen *g, const char *name, int64_t n)
{
    add(g, name, "norm", 1, (int64_t[]){n}, 1.0f, NORM_NOISE);
}

int mkmodel_write_hparams(struct gguf_writer *w, const struct mkmodel_shape *s, enum mkmodel_type type,
                          const char *general_name)
{
    const char *arch = s->n_expert > 0 ? "qwen3moe" : "qwen3";
    char key[128];
    int rc = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", arch, suffix), key)
    rc |= gguf_w_str(w, "general.architecture", arch);
    rc |= gguf_w_str(w, "general.name", general_name);
    rc |= gguf_w_u32(w, "general.file_type", mkmodel_file_type(type));
    if (mkmodel_type_quantized(type)) rc |= gguf_w_u32(w, "general.quantization_version", 2);
    rc |= gguf_w_u32(w, KEY("block_count"), (uint32_t)s->n_layer);
    rc |= gguf_w_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
    rc |= gguf_w_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    rc |= gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    rc |= gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    rc |= gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)s->n_head_kv);
    rc |= gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    rc |= gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    rc |= gguf_w_f32(w, KEY("rope.freq_base"), s->rope_base);
    rc |= gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->norm_eps);
    if (s->n_expert > 0) {
        rc |= gguf_w_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
        rc |= gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used);
        rc |= gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp);
    }
#undef KEY
    return rc ? -1 : 0;
}

int mkmodel_write(const struct mkmodel_shape *s, enum mkmodel_type type, uint64_t seed, const struct hf_tokenizer *tok,
                  const char *path, struct err *e)
{
    if ((unsigned)type >= MKMODEL_TYPE_COUNT) return err_set(e, ERR_INVALID, "mkmodel: unknown weight type");
    if (s->write_tokdir) { /* another family: weights only here (its tokenizer comes from a directory) */
        if (tok) return err_set(e, ERR_INVALID, "mkmodel: shape %s reads its tokenizer from a directory", s->name);
        return s->write_tokdir(s, (int)type, seed, NULL, path, e);
    }
    if (s->write) return s->write(s, (int)type, seed, tok, path, e);
    if (s->n_layer < 1 || s->n_embd < 1 || s->n_head < 1 || s->n_head_kv < 1 || s->head_dim < 1 || s->n_vocab < 1 ||
        s->n_head % s->n_head_kv || (s->n_expert && (s->n_expert_used < 1 || s->n_expert_used > s->n_expert)))
        return err_set(e, ERR_INVALID, "mkmodel: inconsistent shape %s", s->name);
    if (tok && tok->n_tokens != s->n_vocab)
        return err_set(e, ERR_INVALID, "mkmodel: tokenizer has %" PRId64 " tokens, shape %s has vocab %" PRId64,
                       tok->n_tokens, s->name, s->n_vocab);
    const bool moe = s->n_expert > 0;
    struct gen g = {.seed = seed, .type = type};
    long nproc = sysconf(_SC_NPROCESSORS_ONLN);
    g.sh.n_threads = nproc < 1 ? 1 : nproc > GEN_MAX_THREADS ? GEN_MAX_THREADS : (int)nproc;
    g.cap = 3 + s->n_layer * 12;
    g.t = calloc((size_t)g.cap, sizeof *g.t);
    g.w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    if (!g.t || !g.w) {
        free(g.t);
        gguf_writer_free(g.w);
        return err_set(e, ERR_NOMEM, "mkmodel: out of memory");
    }

    char name[64];
    struct gguf_writer *w = g.w;
    char gname[128];
    snprintf(gname, sizeof gname, "lmserve-mkmodel-%s-%s-seed%" PRIu64, s->name, type_names[type], seed);
    /* the server warns about (and /v1/models marks) a model with this key: its replies are noise */
    int rc = mkmodel_write_hparams(w, s, type, gname);
    rc |= gguf_w_bool(w, MKMODEL_KEY_RANDOM, true);
    if (rc) {
        /* the writer remembers why; gguf_writer_save reports it */
    } else if (tok && hf_tokenizer_write_gguf(tok, w, e)) {
        err_wrap(e, "mkmodel");
        goto fail;
    }

    const int64_t n_embd = s->n_embd, q_dim = (int64_t)s->n_head * s->head_dim,
                  kv_dim = (int64_t)s->n_head_kv * s->head_dim;
    add(&g, "token_embd.weight", "token_embd", 2, (int64_t[]){n_embd, s->n_vocab}, 0.0f,
        (s->tied ? OUT_LOGIT_STD : EMBD_STD_SCALE) * inv_sqrt(n_embd));
    add_norm(&g, "output_norm.weight", n_embd);
    if (!s->tied) add_matrix(&g, "output.weight", "output", n_embd, s->n_vocab, OUT_LOGIT_STD);
    for (int l = 0; l < s->n_layer; l++) {
#define NAME(role) (snprintf(name, sizeof name, "blk.%d.%s.weight", l, role), name)
        add_norm(&g, NAME("attn_norm"), n_embd);
        add_matrix(&g, NAME("attn_q"), "attn_q", n_embd, q_dim, PROJ_GAIN);
        add_matrix(&g, NAME("attn_k"), "attn_k", n_embd, kv_dim, PROJ_GAIN);
        add_matrix(&g, NAME("attn_v"), "attn_v", n_embd, kv_dim, PROJ_GAIN);
        add_matrix(&g, NAME("attn_output"), "attn_output", q_dim, n_embd, PROJ_GAIN);
        add_norm(&g, NAME("attn_q_norm"), s->head_dim);
        add_norm(&g, NAME("attn_k_norm"), s->head_dim);
        add_norm(&g, NAME("ffn_norm"), n_embd);
        if (!moe) {
            add_matrix(&g, NAME("ffn_gate"), "ffn_gate", n_embd, s->n_ff, PROJ_GAIN);
            add_matrix(&g, NAME("ffn_up"), "ffn_up", n_embd, s->n_ff, PROJ_GAIN);
            add_matrix(&g, NAME("ffn_down"), "ffn_down", s->n_ff, n_embd, PROJ_GAIN);
        } else {
            const int64_t ne_gu[3] = {n_embd, s->n_ff_exp, s->n_expert}, ne_d[3] = {s->n_ff_exp, n_embd, s->n_expert};
            add_matrix(&g, NAME("ffn_gate_inp"), "ffn_gate_inp", n_embd, s->n_expert, ROUTER_GAIN);
            add(&g, NAME("ffn_gate_exps"), "ffn_gate_exps", 3, ne_gu, 0.0f, PROJ_GAIN * inv_sqrt(n_embd));
            add(&g, NAME("ffn_up_exps"), "ffn_up_exps", 3, ne_gu, 0.0f, PROJ_GAIN * inv_sqrt(n_embd));
            add(&g, NAME("ffn_down_exps"), "ffn_down_exps", 3, ne_d, 0.0f, PROJ_GAIN * inv_sqrt(s->n_ff_exp));
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
    free(g.sh.scratch);
    return 0;
fail:
    gguf_writer_free(w);
    free(g.t);
    free(g.sh.scratch);
    return -1;
}
