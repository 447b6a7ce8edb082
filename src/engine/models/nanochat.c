/* nanochat — the forward pass of a nanochat checkpoint directory (docs/nanochat.md).
 *
 * Per token (nanochat's gpt.py, current architecture; older checkpoints lack the lambdas, value
 * embeddings, smear and backout, detected from the tensors):
 *   e  = norm(wte[tok]);  x = e + smear_lambda·sigmoid(smear_gate·e[:24])·norm(wte[prev])   (pos > 0)
 *   x0 = x; per layer i: x = rl[i]·x + x0l[i]·x0; n = norm(x)
 *     v = Wv·n (+ ve_scale·sigmoid(ve_gate·n[:C])·value_embeds_i[tok] per kv head)
 *     q, k = qk_scale·norm(rope⁻(Wq·n)), qk_scale·norm(rope⁻(Wk·n));  x += Wo·attn_window(q, k, v)
 *     x += Wproj·relu(Wfc·norm(x))²;  layer n_layer/2: xb = x
 *   logits = softcap·tanh(lm_head·norm(x − backout·xb) / softcap), the first vocab_size rows.
 * norm = weightless RMSNorm. Matrices are read in place from the mapped model.safetensors (F32,
 * BF16 or F16) by the matmul kernels; the KV cache is F32 with one row-token layer (the smear's
 * previous token after a decode step, a prefix copy or a disk read). Short-window (S) layers and
 * the row-token layer keep their window in a ring (kv_cache.h, docs/kv-ring.md), so a micro-batch
 * holds at most `run` tokens of one sequence. Attention: each query alone (an online softmax over
 * 64-key tiles of its window), so no result depends on the batch. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/hash.h"
#include "base/log.h"
#include "engine/format/mkmodel_gen.h" /* MKMODEL_KEY_RANDOM */
#include "engine/format/safetensors.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"
#include "engine/kv_cache.h"
#include "engine/model_impl.h"
#include "engine/models/common.h"

#define NC_UBATCH 256
#define NC_SMEAR 24 /* smear_gate's input channels (nanochat: Linear(24, 1)) */
#define NC_CALIBRATE_MIN_BYTES ((uint64_t)64 << 20)

struct nc_mat {
    enum ggml_type type;
    const void *data; /* rows x cols, row-major, in the mapping */
    int64_t rows, cols;
};

struct nc_layer {
    struct nc_mat wq, wk, wv, wo, fc, proj;
    struct nc_mat ve;  /* value embedding (Vp, Hkv*hd); data NULL on layers without one */
    float *ve_gate;    /* (Hkv, ve_ch) */
    int window;        /* keys j with pos - j <= window */
};

struct nc_scratch {
    float *x, *x0, *xn, *tmp, *xb; /* (T, E) */
    float *q, *att;                /* (T, n_head*hd) */
    float *k, *v;                  /* (T, Hkv*hd) */
    float *h;                      /* (T, 4E) */
    float *ones;                   /* (max(E, hd)) weightless norms */
    struct attn_unit *units;       /* (T * Hkv) */
};

struct attn_unit {
    struct kv_cache *kv;
    int32_t t0, kvh, q0, q1;
};

struct nc {
    struct model base; /* first */
    struct safetensors st;
    void *meta_buf;    /* the metadata GGUF's bytes (base.g reads them) */
    struct nc_mat wte, lm_head;
    struct nc_layer *layers;
    struct kv_layer_geom *geom; /* n_layer + 1 (the row-token layer last): base.kv_layers */
    int run;                    /* most tokens of one sequence in a micro-batch (the rings' slack) */
    float *resid_l, *x0_l; /* (n_layer) or NULL (old checkpoints: 1 and 0) */
    bool smear, backout;
    float smear_gate[NC_SMEAR], smear_lambda, backout_lambda;
    int ve_ch;
    float ve_scale, qk_scale, softcap;
    int64_t vocab_padded;
    float *inv_freq;
    struct mm_scratch *mm;
    void *arena;
    size_t arena_bytes;
    struct nc_scratch s;
};

/* ---------------------------------------------------------------- config.json */

struct nc_cfg {
    int seq_len, vocab, n_layer, n_head, n_kv, n_embd;
    char pattern[64];
    bool has_rope, has_qk, has_softcap, has_ve_scale, has_short, has_eps;
    float rope_base, qk_scale, softcap, ve_scale, norm_eps;
    int short_window;
    char name[128];
    bool random;
};

static int cfg_int(json_t *o, const char *k, int *out, int lo, int hi, struct err *e)
{
    json_t *v = json_object_get(o, k);
    if (!v) return err_set(e, ERR_FORMAT, "config.json: model_config.%s is missing", k);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return err_set(e, ERR_FORMAT, "config.json: model_config.%s must be an integer in %d..%d", k, lo, hi);
    *out = (int)json_integer_value(v);
    return 0;
}

static int cfg_num(json_t *o, const char *k, bool *has, float *out, struct err *e)
{
    json_t *v = o ? json_object_get(o, k) : NULL;
    if (!v) return 0;
    double d = json_number_value(v);
    if (!json_is_number(v) || !(d > 0) || !isfinite(d) || d > 1e30)
        return err_set(e, ERR_FORMAT, "config.json: architecture.%s must be a positive number", k);
    *has = true;
    *out = (float)d;
    return 0;
}

static int read_config(const char *dir, struct nc_cfg *c, struct err *e)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (access(path, R_OK) != 0)
            return err_set(e, ERR_IO, "config.json: cannot read %s: %s", path, strerror(errno));
        return err_set(e, ERR_FORMAT, "config.json: line %d: %s", je.line, je.text);
    }
    int rc = -1;
    memset(c, 0, sizeof *c);
    json_t *f = json_object_get(root, "format"), *fv = json_object_get(root, "format_version");
    if (!json_is_object(root)) {
        err_set(e, ERR_FORMAT, "config.json: not a JSON object");
        goto done;
    }
    if (!json_is_string(f) || strcmp(json_string_value(f), "lmserve-nanochat")) {
        err_set(e, ERR_FORMAT, "config.json: format must be \"lmserve-nanochat\"");
        goto done;
    }
    if (!json_is_integer(fv) || json_integer_value(fv) != 1) {
        err_set(e, ERR_UNSUPPORTED, "config.json: format_version must be 1");
        goto done;
    }
    json_t *mc = json_object_get(root, "model_config");
    if (!json_is_object(mc)) {
        err_set(e, ERR_FORMAT, "config.json: model_config is %s", mc ? "not an object" : "missing");
        goto done;
    }
    if (cfg_int(mc, "sequence_len", &c->seq_len, 1, 1 << 24, e) ||
        cfg_int(mc, "vocab_size", &c->vocab, 1, 1 << 24, e) ||
        cfg_int(mc, "n_layer", &c->n_layer, 1, 1024, e) || cfg_int(mc, "n_head", &c->n_head, 1, 1024, e) ||
        cfg_int(mc, "n_kv_head", &c->n_kv, 1, 1024, e) || cfg_int(mc, "n_embd", &c->n_embd, 1, 1 << 16, e))
        goto done;
    json_t *wp = json_object_get(mc, "window_pattern");
    const char *pat = "L";
    if (wp) {
        if (!json_is_string(wp) || !json_string_length(wp) || json_string_length(wp) >= sizeof c->pattern ||
            strspn(json_string_value(wp), "SLsl") != json_string_length(wp)) {
            err_set(e, ERR_FORMAT, "config.json: model_config.window_pattern must be 1..63 letters S or L");
            goto done;
        }
        pat = json_string_value(wp);
    }
    for (size_t i = 0; pat[i]; i++) c->pattern[i] = (char)(pat[i] & ~0x20); /* upper case */
    json_t *ar = json_object_get(root, "architecture");
    if (ar && !json_is_object(ar)) {
        err_set(e, ERR_FORMAT, "config.json: architecture is not an object");
        goto done;
    }
    if (cfg_num(ar, "rope_base", &c->has_rope, &c->rope_base, e) ||
        cfg_num(ar, "qk_scale", &c->has_qk, &c->qk_scale, e) ||
        cfg_num(ar, "softcap", &c->has_softcap, &c->softcap, e) ||
        cfg_num(ar, "ve_gate_scale", &c->has_ve_scale, &c->ve_scale, e) ||
        cfg_num(ar, "norm_eps", &c->has_eps, &c->norm_eps, e))
        goto done;
    json_t *sw = ar ? json_object_get(ar, "short_window") : NULL;
    if (sw) {
        if (!json_is_integer(sw) || json_integer_value(sw) < 0 || json_integer_value(sw) > (1 << 24)) {
            err_set(e, ERR_FORMAT, "config.json: architecture.short_window must be an integer in 0..%d", 1 << 24);
            goto done;
        }
        c->has_short = true;
        c->short_window = (int)json_integer_value(sw);
    }
    json_t *nm = json_object_get(root, "name");
    if (nm) {
        if (!json_is_string(nm) || !json_string_length(nm) || json_string_length(nm) >= sizeof c->name) {
            err_set(e, ERR_FORMAT, "config.json: name must be a string of 1..127 bytes");
            goto done;
        }
        snprintf(c->name, sizeof c->name, "%s", json_string_value(nm));
    }
    json_t *rw = json_object_get(root, "random_weights");
    if (rw) {
        if (!json_is_boolean(rw)) {
            err_set(e, ERR_FORMAT, "config.json: random_weights must be true or false");
            goto done;
        }
        c->random = json_is_true(rw);
    }
    rc = 0;
done:
    json_decref(root);
    return rc;
}

/* ---------------------------------------------------------------- tensors */

/* A tensor of this name and shape; *used marks it consumed (every tensor must be). */
static const struct st_tensor *tensor(struct nc *m, bool *used, const char *name, int nd, int64_t d0,
                                      int64_t d1, bool required, struct err *e)
{
    const struct st_tensor *t = st_find(&m->st, name);
    if (!t) {
        if (required) err_set(e, ERR_FORMAT, "model.safetensors: tensor %s is missing", name);
        return NULL;
    }
    used[t - m->st.tensors] = true;
    int64_t want[2] = {d0, d1};
    bool ok = t->n_dims == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char have[160] = "", dims[48];
        for (int i = 0; i < t->n_dims; i++) {
            snprintf(dims, sizeof dims, "%s%lld", i ? "," : "", (long long)t->shape[i]);
            strncat(have, dims, sizeof have - strlen(have) - 1);
        }
        if (nd > 1)
            snprintf(dims, sizeof dims, "%lld,%lld", (long long)d0, (long long)d1);
        else
            snprintf(dims, sizeof dims, "%lld", (long long)d0);
        err_set(e, ERR_FORMAT, "model.safetensors: tensor %s has shape [%s], config.json implies [%s]", name, have,
                dims);
        return NULL;
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16) {
        err_set(e, ERR_UNSUPPORTED, "model.safetensors: tensor %s is %s (F32, BF16 or F16 only)", name,
                st_dtype_name(t->dtype));
        return NULL;
    }
    if (((uintptr_t)t->data % st_dtype_size(t->dtype)) != 0) {
        err_set(e, ERR_FORMAT, "model.safetensors: tensor %s is not %zu-byte aligned in the file", name,
                st_dtype_size(t->dtype));
        return NULL;
    }
    return t;
}

static enum ggml_type gtype(enum st_dtype d)
{
    return d == ST_F32 ? GGML_TYPE_F32 : d == ST_BF16 ? GGML_TYPE_BF16 : GGML_TYPE_F16;
}

static int mat(struct nc *m, bool *used, struct nc_mat *out, const char *name, int64_t rows, int64_t cols,
               struct err *e)
{
    const struct st_tensor *t = tensor(m, used, name, 2, rows, cols, true, e);
    if (!t) return -1;
    *out = (struct nc_mat){gtype(t->dtype), t->data, rows, cols};
    return 0;
}

/* A small tensor as floats (n elements) into dst. */
static void to_floats(const struct st_tensor *t, float *dst, int64_t n)
{
    quant_traits(gtype(t->dtype))->to_float(t->data, dst, n);
}

static int fingerprint_and_meta(struct nc *m, const char *dir, const struct nc_cfg *c, struct err *e)
{
    /* the disk tier tells models apart by this GGUF's bytes: a hash of the safetensors header and
     * of 64 pieces of 4 KiB spread over the data stands for the weights */
    struct hash64 h;
    hash64_init(&h, 7);
    hash64_update(&h, m->st.header, m->st.header_len);
    for (int i = 0; i < 64 && m->st.data_size; i++) {
        uint64_t o = m->st.data_size / 64 * (uint64_t)i, n = m->st.data_size - o < 4096 ? m->st.data_size - o : 4096;
        hash64_update(&h, m->st.data + o, n);
    }
    struct gguf_writer *w = gguf_writer_new(32);
    const char *base = strrchr(dir, '/');
    char name[256];
    snprintf(name, sizeof name, "%s", c->name[0] ? c->name : base && base[1] ? base + 1 : dir);
    for (char *p = name; *p; p++)
        if (*p == ' ') *p = '-';
    gguf_w_str(w, "general.architecture", "nanochat");
    gguf_w_str(w, "general.name", name);
    gguf_w_str(w, "nanochat.dir", dir);
    gguf_w_u64(w, "nanochat.weights_fingerprint", hash64_final(&h));
    gguf_w_u32(w, "nanochat.context_length", (uint32_t)c->seq_len);
    gguf_w_u32(w, "nanochat.block_count", (uint32_t)c->n_layer);
    gguf_w_u32(w, "nanochat.embedding_length", (uint32_t)c->n_embd);
    if (c->random) gguf_w_bool(w, MKMODEL_KEY_RANDOM, true);
    size_t n;
    int rc = gguf_writer_save_mem(w, &m->meta_buf, &n, e);
    gguf_writer_free(w);
    if (rc) return -1;
    return gguf_open_mem(&m->base.g, m->meta_buf, n, e);
}

static void nc_free(struct model *bm)
{
    struct nc *m = (struct nc *)bm;
    if (!m) return;
    mm_scratch_free(m->mm);
    if (m->base.pool) tp_free(m->base.pool);
    free(m->arena);
    if (m->layers)
        for (int l = 0; l < m->base.cfg.n_layer; l++) free(m->layers[l].ve_gate);
    free(m->layers);
    free(m->geom);
    free(m->resid_l);
    free(m->x0_l);
    free(m->inv_freq);
    gguf_close(&m->base.g);
    free(m->meta_buf);
    st_close(&m->st);
    free(m);
}


static size_t scratch_layout(struct nc *m, char *base)
{
    const struct model_config *c = &m->base.cfg;
    size_t T = NC_UBATCH, E = (size_t)c->n_embd, QD = (size_t)c->n_head * c->head_dim,
           KVD = (size_t)c->n_head_kv * c->head_dim, off = 0;
    struct nc_scratch s;
    s.x = mdl_carve(base, &off, T * E * sizeof(float));
    s.x0 = mdl_carve(base, &off, T * E * sizeof(float));
    s.xn = mdl_carve(base, &off, T * E * sizeof(float));
    s.tmp = mdl_carve(base, &off, T * E * sizeof(float));
    s.xb = mdl_carve(base, &off, T * E * sizeof(float));
    s.q = mdl_carve(base, &off, T * QD * sizeof(float));
    s.att = mdl_carve(base, &off, T * QD * sizeof(float));
    s.k = mdl_carve(base, &off, T * KVD * sizeof(float));
    s.v = mdl_carve(base, &off, T * KVD * sizeof(float));
    s.h = mdl_carve(base, &off, T * (size_t)c->n_ff * sizeof(float));
    s.ones = mdl_carve(base, &off, (E > (size_t)c->head_dim ? E : (size_t)c->head_dim) * sizeof(float));
    s.units = mdl_carve(base, &off, T * (size_t)c->n_head_kv * sizeof(struct attn_unit));
    if (base) m->s = s;
    return off;
}

static int nc_forward(struct model *bm, const struct batch *b, float *logits, struct err *e);
static const struct model_ops nc_ops = {.forward = nc_forward, .free = nc_free};

struct model *nanochat_load(const char *dir, const struct model_opts *opts, struct err *e)
{
    struct nc_cfg c;
    if (read_config(dir, &c, e)) return NULL;
    struct nc *m = calloc(1, sizeof *m);
    bool *used = NULL;
    if (!m) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->st.fd = -1;
    m->base.ops = &nc_ops;
    if (opts) m->base.opts = *opts;
    char path[4096];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (st_open(&m->st, path, e)) goto fail;

    struct model_config *mc = &m->base.cfg;
    snprintf(mc->arch, sizeof mc->arch, "nanochat");
    const int E = c.n_embd, L = c.n_layer;
    if (E % c.n_head) {
        err_set(e, ERR_FORMAT, "config.json: model_config.n_embd %d is not a multiple of n_head %d", E, c.n_head);
        goto fail;
    }
    if (c.n_head % c.n_kv) {
        err_set(e, ERR_FORMAT, "config.json: model_config.n_head %d is not a multiple of n_kv_head %d", c.n_head, c.n_kv);
        goto fail;
    }
    if ((E / c.n_head) % 2 || E / c.n_head > OPS_ATTN_MAX_HEAD_DIM) {
        err_set(e, ERR_UNSUPPORTED, "config.json: head dim n_embd/n_head = %d must be even and at most %d",
                E / c.n_head, OPS_ATTN_MAX_HEAD_DIM);
        goto fail;
    }
    const int HD = E / c.n_head, KVD = c.n_kv * HD;
    mc->n_layer = L;
    mc->n_embd = E;
    mc->n_ff = 4 * E;
    mc->n_head = c.n_head;
    mc->n_head_kv = c.n_kv;
    mc->head_dim = HD;
    mc->n_vocab = c.vocab;
    mc->n_ctx_train = c.seq_len;
    mc->kv_f32 = true;
    mc->kv_row_tokens = true;

    used = calloc((size_t)(m->st.n_tensors ? m->st.n_tensors : 1), sizeof *used);
    if (!used) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* the padded vocabulary: nanochat rounds up to 64; older checkpoints kept vocab_size */
    const struct st_tensor *wte = st_find(&m->st, "transformer.wte.weight");
    if (!wte) {
        err_set(e, ERR_FORMAT, "model.safetensors: tensor transformer.wte.weight is missing");
        goto fail;
    }
    int64_t vp64 = ((int64_t)c.vocab + 63) / 64 * 64;
    m->vocab_padded = wte->n_dims == 2 && wte->shape[0] == c.vocab ? c.vocab : vp64;
    if (mat(m, used, &m->wte, "transformer.wte.weight", m->vocab_padded, E, e) ||
        mat(m, used, &m->lm_head, "lm_head.weight", m->vocab_padded, E, e))
        goto fail;

    const struct st_tensor *t;
    m->smear = st_find(&m->st, "smear_gate.weight") != NULL;
    if (m->smear) {
        if (!(t = tensor(m, used, "smear_gate.weight", 2, 1, NC_SMEAR, true, e))) goto fail;
        if (E < NC_SMEAR) {
            err_set(e, ERR_FORMAT, "config.json: model_config.n_embd %d is below smear_gate's %d inputs", E, NC_SMEAR);
            goto fail;
        }
        to_floats(t, m->smear_gate, NC_SMEAR);
        if (!(t = tensor(m, used, "smear_lambda", 1, 1, 0, true, e))) goto fail;
        to_floats(t, &m->smear_lambda, 1);
    } else if (st_find(&m->st, "smear_lambda")) {
        err_set(e, ERR_FORMAT, "model.safetensors: smear_lambda without smear_gate.weight");
        goto fail;
    }
    if (st_find(&m->st, "backout_lambda")) {
        if (!(t = tensor(m, used, "backout_lambda", 1, 1, 0, true, e))) goto fail;
        m->backout = true;
        to_floats(t, &m->backout_lambda, 1);
    }
    bool has_rl = st_find(&m->st, "resid_lambdas") != NULL, has_xl = st_find(&m->st, "x0_lambdas") != NULL;
    if (has_rl != has_xl) {
        err_set(e, ERR_FORMAT, "model.safetensors: resid_lambdas and x0_lambdas come together (one is missing)");
        goto fail;
    }
    if (has_rl) {
        m->resid_l = malloc(sizeof(float) * (size_t)L);
        m->x0_l = malloc(sizeof(float) * (size_t)L);
        if (!m->resid_l || !m->x0_l) {
            err_set(e, ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (!(t = tensor(m, used, "resid_lambdas", 1, L, 0, true, e))) goto fail;
        to_floats(t, m->resid_l, L);
        if (!(t = tensor(m, used, "x0_lambdas", 1, L, 0, true, e))) goto fail;
        to_floats(t, m->x0_l, L);
    }
    /* the variant's defaults for what the tensors do not show (docs/nanochat.md) */
    m->qk_scale = c.has_qk ? c.qk_scale : m->smear ? 1.2f : 1.0f;
    m->softcap = c.has_softcap ? c.softcap : 15.0f;
    m->ve_scale = c.has_ve_scale ? c.ve_scale : m->smear ? 3.0f : 2.0f;
    mc->rope_base = c.has_rope ? c.rope_base : m->smear ? 100000.0f : 10000.0f;
    mc->norm_eps = c.has_eps ? c.norm_eps : 0.0078125f;
    int short_w = c.has_short ? c.short_window : (((c.seq_len + 3) / 4 + 127) / 128) * 128;

    m->layers = calloc((size_t)L, sizeof *m->layers);
    if (!m->layers) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t plen = strlen(c.pattern);
    int n_ve = 0;
    for (int l = 0; l < L; l++) {
        struct nc_layer *ly = &m->layers[l];
        char nm[128];
#define MAT(field, suffix, rows, cols)                                                                   \
    do {                                                                                                 \
        snprintf(nm, sizeof nm, "transformer.h.%d.%s", l, suffix);                                      \
        if (mat(m, used, &ly->field, nm, rows, cols, e)) goto fail;                                      \
    } while (0)
        MAT(wq, "attn.c_q.weight", (int64_t)c.n_head * HD, E);
        MAT(wk, "attn.c_k.weight", KVD, E);
        MAT(wv, "attn.c_v.weight", KVD, E);
        MAT(wo, "attn.c_proj.weight", E, (int64_t)c.n_head * HD);
        MAT(fc, "mlp.c_fc.weight", 4 * (int64_t)E, E);
        MAT(proj, "mlp.c_proj.weight", E, 4 * (int64_t)E);
#undef MAT
        char ven[64], gn[96];
        snprintf(ven, sizeof ven, "value_embeds.%d.weight", l);
        snprintf(gn, sizeof gn, "transformer.h.%d.attn.ve_gate.weight", l);
        const struct st_tensor *vt = st_find(&m->st, ven), *gt = st_find(&m->st, gn);
        bool want = l % 2 == (L - 1) % 2;
        if ((vt || gt) && !want) {
            err_set(e, ERR_FORMAT, "model.safetensors: layer %d has a value embedding, but only layers with "
                    "i %% 2 == (n_layer - 1) %% 2 do (n_layer %d from config.json)", l, L);
            goto fail;
        }
        if (!!vt != !!gt) {
            err_set(e, ERR_FORMAT, "model.safetensors: %s without %s", vt ? ven : gn, vt ? gn : ven);
            goto fail;
        }
        if (vt) {
            if (!gt || gt->n_dims != 2 || gt->shape[0] != c.n_kv || gt->shape[1] < 1 || gt->shape[1] > E) {
                err_set(e, ERR_FORMAT, "model.safetensors: tensor %s must be [n_kv_head=%d, C <= n_embd]", gn, c.n_kv);
                goto fail;
            }
            if (m->ve_ch && gt->shape[1] != m->ve_ch) {
                err_set(e, ERR_FORMAT, "model.safetensors: tensor %s has %lld gate channels, an earlier layer %d",
                        gn, (long long)gt->shape[1], m->ve_ch);
                goto fail;
            }
            m->ve_ch = (int)gt->shape[1];
            if (mat(m, used, &ly->ve, ven, m->vocab_padded, KVD, e)) goto fail;
            if (!(t = tensor(m, used, gn, 2, c.n_kv, m->ve_ch, true, e))) goto fail;
            if (!(ly->ve_gate = malloc(sizeof(float) * (size_t)c.n_kv * (size_t)m->ve_ch))) {
                err_set(e, ERR_NOMEM, "out of memory");
                goto fail;
            }
            to_floats(t, ly->ve_gate, (int64_t)c.n_kv * m->ve_ch);
            n_ve++;
        }
        bool sh = l < L - 1 && c.pattern[l % plen] == 'S';
        ly->window = sh ? short_w : c.seq_len;
    }
    /* KV geometry. An S layer's queries see window + 1 keys (flash-attn's left window counts the
     * keys before the query): a ring of window + run rows (kv-ring.md: cap >= W - 1 + R), with
     * run = the window rounded up to the 64-key tile, clamped to 64..NC_UBATCH. L layers (window
     * sequence_len, so full-size up to the training context) keep one row per position; past
     * sequence_len the attention masks them like an S layer. The row-token layer needs only the
     * previous position (2 keys). Rings are used only where smaller than the context (kv_new). */
    int n_short = 0;
    for (int l = 0; l < L; l++) n_short += m->layers[l].window == short_w && short_w < c.seq_len;
    m->run = NC_UBATCH;
    if (n_short) {
        int r = (short_w + 1 + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
        m->run = r < OPS_ATTN_KT ? OPS_ATTN_KT : r > NC_UBATCH ? NC_UBATCH : r;
    }
    const int s_ring = (short_w + m->run + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
    if (!(m->geom = calloc((size_t)L + 1, sizeof *m->geom))) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int l = 0; l <= L; l++) {
        int w = l == L ? 1 : m->layers[l].window == short_w && short_w < c.seq_len ? short_w : -1;
        m->geom[l] = (struct kv_layer_geom){.n_head_kv = c.n_kv, .head_dim = HD};
        if (w >= 0) {
            m->geom[l].window = w + 1;
            m->geom[l].ring_rows = (w + m->run + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
        }
    }
    m->base.kv_layers = m->geom;
    if (n_ve && n_ve != (L + 1) / 2) {
        err_set(e, ERR_FORMAT, "model.safetensors: %d layers have value embeddings, expected all %d that "
                "should or none", n_ve, (L + 1) / 2);
        goto fail;
    }
    for (int64_t i = 0; i < m->st.n_tensors; i++)
        if (!used[i]) {
            err_set(e, ERR_FORMAT, "model.safetensors: tensor %s is not part of a nanochat model with this "
                    "config.json (n_layer %d)", m->st.tensors[i].name, L);
            goto fail;
        }
    free(used);
    used = NULL;

    m->inv_freq = malloc(sizeof(float) * (size_t)(HD / 2));
    if (!m->inv_freq) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    ops_rope_inv_freq(m->inv_freq, HD, mc->rope_base);
    int nth = m->base.opts.n_threads > 0 ? m->base.opts.n_threads : tp_default_threads();
    if (!(m->base.pool = tp_new(nth))) {
        err_set(e, ERR_NOMEM, "cannot start %d threads", nth);
        goto fail;
    }
    if (!(m->mm = mm_scratch_new())) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    m->arena_bytes = scratch_layout(m, NULL);
    if (!(m->arena = aligned_alloc(64, m->arena_bytes))) {
        err_set(e, ERR_NOMEM, "cannot allocate %zu bytes of activation scratch", m->arena_bytes);
        goto fail;
    }
    scratch_layout(m, m->arena);
    for (int i = 0; i < (E > HD ? E : HD); i++) m->s.ones[i] = 1.0f;
    if (fingerprint_and_meta(m, dir, &c, e)) goto fail;
    if (m->st.data_size >= NC_CALIBRATE_MIN_BYTES) {
        const struct mm_calib *cal = mm_calibrate(m->base.pool);
        log_info("matmul calibration (%.0f ms): prefetch %d B, decode items of %d rows", cal->ms, cal->prefetch,
                 cal->item_rows);
    }
    log_info("model: nanochat (%s), %d layers, n_embd %d, %d heads (%d kv) x %d, vocab %d (padded %lld), "
             "window pattern %s (short %d: %d layers in rings of %d rows; long %d), rope base %g, qk scale %g, "
             "softcap %g%s%s%s%s, %d threads",
             m->smear ? "current" : "old", L, E, c.n_head, c.n_kv, HD, c.vocab, (long long)m->vocab_padded,
             c.pattern, short_w, n_short, n_short ? s_ring : 0, c.seq_len, (double)mc->rope_base, (double)m->qk_scale,
             (double)m->softcap,
             has_rl ? ", lambdas" : "", n_ve ? ", value embeddings" : "", m->smear ? ", smear" : "",
             m->backout ? ", backout" : "", nth);
    return &m->base;
fail:
    free(used);
    err_wrap(e, "%s", dir);
    nc_free(&m->base);
    return NULL;
}

/* ---------------------------------------------------------------- forward */

static struct mm_op op(const struct nc_mat *w, int64_t rows, const float *x, int64_t n_tok, float *y, int64_t ys)
{
    return (struct mm_op){.wtype = w->type, .W = w->data, .rows = rows, .cols = w->cols,
                          .w_stride = quant_row_size(w->type, w->cols), .X = x, .x_stride = w->cols,
                          .n_tok = n_tok, .Y = y, .y_stride = ys};
}

static int run(struct nc *m, const struct mm_op *ops, int n, struct err *e)
{
    if (mm_run_ops(m->base.pool, ops, n, m->mm, e)) return err_wrap(e, "matmul");
    return 0;
}

static void row(const struct nc_mat *w, int64_t r, float *out)
{
    quant_traits(w->type)->to_float((const uint8_t *)w->data + (size_t)r * quant_row_size(w->type, w->cols),
                                    out, w->cols);
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One query head over its window [lo, p] of a F32 cache head (K tiles [hd][KT], V rows); ring > 0:
 * position j at row j % ring (a multiple of KT, so the tile of j0 is the tile of rows j0 % ring). */
static void attend(const float *q, float *out, const float *K, const float *V, int hd, int32_t lo, int32_t p,
                   float scale, int ring)
{
    float acc[OPS_ATTN_MAX_HEAD_DIM], s[OPS_ATTN_KT], mx = -INFINITY, l = 0.0f;
    for (int d = 0; d < hd; d++) acc[d] = 0.0f;
    for (int32_t j0 = lo / OPS_ATTN_KT * OPS_ATTN_KT; j0 <= p; j0 += OPS_ATTN_KT) {
        const int32_t r0 = ring ? j0 % ring : j0;
        const float *kt = K + (int64_t)r0 * hd;
        for (int c = 0; c < OPS_ATTN_KT; c++) s[c] = 0.0f;
        for (int d = 0; d < hd; d++) {
            float qd = q[d];
            const float *kr = kt + (int64_t)d * OPS_ATTN_KT;
            for (int c = 0; c < OPS_ATTN_KT; c++) s[c] += qd * kr[c];
        }
        int c0 = lo > j0 ? lo - j0 : 0, c1 = p - j0 + 1 < OPS_ATTN_KT ? p - j0 + 1 : OPS_ATTN_KT;
        float mt = -INFINITY;
        for (int c = c0; c < c1; c++) {
            s[c] *= scale;
            if (s[c] > mt) mt = s[c];
        }
        if (mt > mx) {
            float corr = expf(mx - mt); /* 0 on the first tile */
            l *= corr;
            for (int d = 0; d < hd; d++) acc[d] *= corr;
            mx = mt;
        }
        for (int c = c0; c < c1; c++) {
            float w = expf(s[c] - mx);
            l += w;
            const float *vr = V + (int64_t)(r0 + c) * hd;
            for (int d = 0; d < hd; d++) acc[d] += w * vr[d];
        }
    }
    for (int d = 0; d < hd; d++) out[d] = acc[d] / l;
}

struct attn_job {
    struct nc *m;
    int layer, n_units;
    const int32_t *pos;
    atomic_int next;
};

static void attn_worker(void *ctx, int ith, int nth)
{
    struct attn_job *j = ctx;
    struct nc *m = j->m;
    const struct model_config *c = &m->base.cfg;
    const int HD = c->head_dim, QD = c->n_head * HD, G = c->n_head / c->n_head_kv;
    const int W = m->layers[j->layer].window;
    const float scale = 1.0f / sqrtf((float)HD);
    (void)ith, (void)nth;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        const struct attn_unit *un = &m->s.units[u];
        const struct kv_layer y = kv_layer_of(un->kv, j->layer);
        const float *K = (const float *)y.k + un->kvh * (y.head_stride / 2);
        const float *V = (const float *)y.v + un->kvh * (y.head_stride / 2);
        const int ring = y.window ? y.cap : 0;
        for (int i = un->q0; i < un->q1; i++) {
            int64_t t = un->t0 + i;
            int32_t p = j->pos[t], lo = p - W > 0 ? p - W : 0;
            for (int g = 0; g < G; g++) {
                int h = un->kvh * G + g;
                attend(m->s.q + t * QD + h * HD, m->s.att + t * QD + h * HD, K, V, HD, lo, p, scale, ring);
            }
        }
    }
}

static int build_units(struct nc *m, struct kv_cache *const *seq, int64_t T)
{
    int n = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && seq[t1] == seq[t0]) t1++;
        int len = (int)(t1 - t0);
        for (int q1 = len; q1 > 0; q1 -= OPS_ATTN_QB) {
            int q0 = q1 - OPS_ATTN_QB > 0 ? q1 - OPS_ATTN_QB : 0;
            for (int h = 0; h < m->base.cfg.n_head_kv; h++)
                m->s.units[n++] = (struct attn_unit){seq[t0], (int32_t)t0, h, q0, q1};
        }
        t0 = t1;
    }
    return n;
}

/* Per-token work between the matmuls, over the pool in chunks of rows. */
enum stage { ST_PRE_ATTN, ST_QKV, ST_RESID_NORM, ST_RELU2, ST_RESID };
struct rows_job {
    struct nc *m;
    enum stage st;
    int layer;
    const int32_t *tok, *pos;
    struct kv_cache *const *seq;
    int64_t n;
    atomic_long next;
};

#define ROWS_CHUNK 4

static void rows_worker(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    struct nc *m = j->m;
    const struct model_config *c = &m->base.cfg;
    struct nc_scratch *s = &m->s;
    const int E = c->n_embd, HD = c->head_dim, QD = c->n_head * HD, KVD = c->n_head_kv * HD, FF = c->n_ff;
    const int l = j->layer;
    const struct nc_layer *L = &m->layers[l];
    (void)ith, (void)nth;
    for (;;) {
        int64_t t0 = atomic_fetch_add_explicit(&j->next, ROWS_CHUNK, memory_order_relaxed);
        if (t0 >= j->n) break;
        int64_t t1 = t0 + ROWS_CHUNK < j->n ? t0 + ROWS_CHUNK : j->n;
        for (int64_t t = t0; t < t1; t++) {
            float *x = s->x + t * E;
            switch (j->st) {
            case ST_PRE_ATTN:
                if (m->resid_l) {
                    const float *x0 = s->x0 + t * E;
                    float a = m->resid_l[l], b = m->x0_l[l];
                    for (int d = 0; d < E; d++) x[d] = a * x[d] + b * x0[d];
                }
                ops_rmsnorm(s->xn + t * E, x, s->ones, E, c->norm_eps);
                break;
            case ST_QKV: {
                float *q = s->q + t * QD, *k = s->k + t * KVD, *v = s->v + t * KVD;
                if (L->ve.data) {
                    float ve[OPS_ATTN_MAX_HEAD_DIM];
                    const float *xn = s->xn + t * E;
                    for (int h = 0; h < c->n_head_kv; h++) {
                        float g = m->ve_scale * sigmoidf(dot(L->ve_gate + h * m->ve_ch, xn, m->ve_ch));
                        /* one head's slice of the value-embedding row at a time */
                        const size_t rs = quant_row_size(L->ve.type, L->ve.cols);
                        const uint8_t *r = (const uint8_t *)L->ve.data + (size_t)j->tok[t] * rs +
                                           (size_t)h * HD * quant_traits(L->ve.type)->type_size;
                        quant_traits(L->ve.type)->to_float(r, ve, HD);
                        for (int d = 0; d < HD; d++) v[h * HD + d] += g * ve[d];
                    }
                }
                float cs[OPS_ATTN_MAX_HEAD_DIM / 2], sn[OPS_ATTN_MAX_HEAD_DIM / 2];
                ops_rope_cache(cs, sn, HD, j->pos[t], m->inv_freq);
                for (int i = 0; i < HD / 2; i++) sn[i] = -sn[i]; /* nanochat rotates by -θ */
                ops_rope_apply(q, c->n_head, HD, cs, sn);
                ops_rope_apply(k, c->n_head_kv, HD, cs, sn);
                for (int h = 0; h < c->n_head; h++) {
                    ops_rmsnorm(q + h * HD, q + h * HD, s->ones, HD, c->norm_eps);
                    for (int d = 0; d < HD; d++) q[h * HD + d] *= m->qk_scale;
                }
                for (int h = 0; h < c->n_head_kv; h++) {
                    ops_rmsnorm(k + h * HD, k + h * HD, s->ones, HD, c->norm_eps);
                    for (int d = 0; d < HD; d++) k[h * HD + d] *= m->qk_scale;
                }
                kv_store(j->seq[t], l, j->pos[t], k, v);
                break;
            }
            case ST_RESID_NORM:
                for (int d = 0; d < E; d++) x[d] += s->tmp[t * E + d];
                ops_rmsnorm(s->xn + t * E, x, s->ones, E, c->norm_eps);
                break;
            case ST_RELU2: {
                float *hh = s->h + t * FF;
                for (int d = 0; d < FF; d++) {
                    float r = hh[d] > 0.0f ? hh[d] : 0.0f;
                    hh[d] = r * r;
                }
                break;
            }
            case ST_RESID:
                for (int d = 0; d < E; d++) x[d] += s->tmp[t * E + d];
                if (m->backout && l == c->n_layer / 2) memcpy(s->xb + t * E, x, sizeof(float) * (size_t)E);
                break;
            }
        }
    }
}

static void run_rows(struct nc *m, struct rows_job *j)
{
    j->m = m;
    atomic_init(&j->next, 0);
    if (j->n <= ROWS_CHUNK)
        rows_worker(j, 0, 1);
    else
        tp_run_dynamic(m->base.pool, rows_worker, j);
}

/* e = norm(wte[tok]) */
static void embed(struct nc *m, int32_t tok, float *out)
{
    row(&m->wte, tok, out);
    ops_rmsnorm(out, out, m->s.ones, m->base.cfg.n_embd, m->base.cfg.norm_eps);
}

static int forward_ubatch(struct nc *m, const int32_t *tok, const int32_t *pos, struct kv_cache *const *seq,
                          const bool *want, int64_t T, float *out, float *hidden, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct nc_scratch *s = &m->s;
    const int E = c->n_embd, HD = c->head_dim, QD = c->n_head * HD, KVD = c->n_head_kv * HD, FF = c->n_ff;
    for (int64_t t = 0; t < T; t++) kv_store_token(seq[t], pos[t], tok[t]);
    for (int64_t t = 0; t < T; t++) {
        float *x = s->x + t * E;
        embed(m, tok[t], x);
        if (m->smear && pos[t] > 0) {
            /* the previous token of this sequence: rows < pos[t] are filled, or stored just above */
            int32_t prev = kv_row_token(seq[t], pos[t] - 1);
            float *pe = s->tmp + t * E;
            embed(m, prev, pe);
            float g = m->smear_lambda * sigmoidf(dot(m->smear_gate, x, NC_SMEAR));
            for (int d = 0; d < E; d++) x[d] += g * pe[d];
        }
    }
    memcpy(s->x0, s->x, sizeof(float) * (size_t)(T * E));
    int n_units = build_units(m, seq, T);
    for (int l = 0; l < c->n_layer; l++) {
        const struct nc_layer *L = &m->layers[l];
        struct rows_job rj = {.st = ST_PRE_ATTN, .layer = l, .n = T};
        run_rows(m, &rj);
        struct mm_op qkv[3] = {op(&L->wq, QD, s->xn, T, s->q, QD), op(&L->wk, KVD, s->xn, T, s->k, KVD),
                               op(&L->wv, KVD, s->xn, T, s->v, KVD)};
        if (run(m, qkv, 3, e)) return -1;
        rj = (struct rows_job){.st = ST_QKV, .layer = l, .tok = tok, .pos = pos, .seq = seq, .n = T};
        run_rows(m, &rj);
        struct attn_job aj = {.m = m, .layer = l, .n_units = n_units, .pos = pos};
        atomic_init(&aj.next, 0);
        tp_run_dynamic(m->base.pool, attn_worker, &aj);
        struct mm_op o = op(&L->wo, E, s->att, T, s->tmp, E);
        if (run(m, &o, 1, e)) return -1;
        rj = (struct rows_job){.st = ST_RESID_NORM, .layer = l, .n = T};
        run_rows(m, &rj);
        struct mm_op fc = op(&L->fc, FF, s->xn, T, s->h, FF);
        if (run(m, &fc, 1, e)) return -1;
        rj = (struct rows_job){.st = ST_RELU2, .layer = l, .n = T};
        run_rows(m, &rj);
        struct mm_op pr = op(&L->proj, E, s->h, T, s->tmp, E);
        if (run(m, &pr, 1, e)) return -1;
        rj = (struct rows_job){.st = ST_RESID, .layer = l, .n = T};
        run_rows(m, &rj);
    }
    if (m->backout)
        for (int64_t i = 0; i < T * E; i++) s->x[i] -= m->backout_lambda * s->xb[i];
    if (hidden)
        for (int64_t t = 0; t < T; t++) ops_rmsnorm(hidden + t * E, s->x + t * E, s->ones, E, c->norm_eps);
    int64_t nw = 0;
    for (int64_t t = 0; t < T; t++)
        if (want[t]) ops_rmsnorm(s->xn + (nw++) * E, s->x + t * E, s->ones, E, c->norm_eps);
    if (nw && out) {
        struct mm_op lo = op(&m->lm_head, c->n_vocab, s->xn, nw, out, c->n_vocab); /* cropped rows */
        if (run(m, &lo, 1, e)) return -1;
        const float cap = m->softcap;
        for (int64_t i = 0; i < nw * c->n_vocab; i++) out[i] = cap * tanhf(out[i] / cap);
    }
    return 0;
}

static int nc_forward(struct model *bm, const struct batch *b, float *logits, struct err *e)
{
    struct nc *m = (struct nc *)bm;
    bool want[NC_UBATCH];
    int64_t out_row = 0;
    /* micro-batches of at most NC_UBATCH tokens and at most m->run of one sequence (a ring holds
     * its window - 1 + run rows: the micro-batch's writes must not overwrite its first query's
     * oldest key) */
    for (int64_t i0 = 0, T; i0 < b->n; i0 += T) {
        for (T = 0; i0 + T < b->n && T < NC_UBATCH; T++) {
            int same = 0;
            for (int64_t u = 0; u < T; u++) same += b->seq[i0 + u] == b->seq[i0 + T];
            if (same >= m->run) break;
        }
        for (int64_t t = 0; t < T; t++) want[t] = b->want_logits ? b->want_logits[i0 + t] : (i0 + t == b->n - 1);
        if (forward_ubatch(m, b->token + i0, b->pos + i0, b->seq + i0, want, T,
                           logits ? logits + out_row * m->base.cfg.n_vocab : NULL,
                           b->hidden ? b->hidden + i0 * m->base.cfg.n_embd : NULL, e))
            return -1;
        if (!logits) continue;
        for (int64_t t = 0; t < T; t++) out_row += want[t];
    }
    return 0;
}
