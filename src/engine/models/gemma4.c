/* gemma4 — the Gemma 4 forward pass (GGUF arch `gemma4`, dense and MoE), following llama.cpp's
 * src/models/gemma4.cpp for the exact semantics (docs/families.md "Gemma 4").
 *
 * x0 = sqrt(n_embd) * embed(tok). Per layer l (SWA or global by attention.sliding_window_pattern,
 * each kind with its own head size, kv heads, rotary width and base):
 *   n   = rms(x)·attn_norm
 *   q   = rope(rms_h(Wq·n)·q_norm)                       per head
 *   k   = rope(rms_h(Wk·n)·k_norm),  v = rms_h(Wv·n)      (no weight; Wv absent: v = rms_h(Wk·n))
 *   a   = softmax(q·k^T) v   (scale 1; SWA layers: keys within the window)
 *   x  += rms(Wo·a)·post_attention_norm
 *   f   = dense: Wdown(gelu(Wgate·m) * Wup·m), m = rms(x)·ffn_norm
 *         MoE:   rms(dense f)·post_ffw_norm_1 + rms(Σ_top-k w_e s_e expert_e(rms(x)·pre_ffw_norm_2))·post_ffw_norm_2,
 *                router logits = Wr·(rms(x)/sqrt(n_embd)·ffn_gate_inp.scale), softmax, top-k, renormalized
 *   x   = (x + rms(f)·post_ffw_norm) · layer_output_scale
 * logits = cap·tanh((E · rms(x)·output_norm)/cap) (tied: E = token_embd; cap = final_logit_softcapping).
 * rms_h = RMS norm over one head; gelu = the tanh form; RoPE NeoX over the first n_rot dims of a
 * head with angle pos·base^(-2i/n_rot)/rope_freqs[i] (rope_freqs only on global layers).
 *
 * Structure as qwen3.c: micro-batches, every weight applied to all tokens at once, per-token work
 * split over the pool by rows, attention per (run of one sequence, kv head, query block). A
 * micro-batch holds at most G4_RUN tokens of one sequence so that an SWA layer's ring (window - 1 +
 * G4_RUN rows) holds every key its queries see (docs/kv-ring.md). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"
#include "engine/kv_cache.h"
#include "engine/model_impl.h"
#include "engine/models/common.h"

#define G4_UBATCH 512
#define G4_MAX_LAYERS 256

struct g4_layer {
    bool swa, moe;
    int n_head_kv, hd, n_rot;
    const float *inv_freq; /* n_rot/2 (global: divided by rope_freqs) */
    const float *attn_norm, *q_norm, *k_norm, *post_attn_norm, *ffn_norm, *post_ffw_norm;
    const float *pre_ffw_norm_2, *post_ffw_norm_1, *post_ffw_norm_2, *router_scale, *exp_scale;
    float out_scale;
    const struct gguf_tensor *wq, *wk, *wv, *wo; /* wv NULL: V from the raw K projection */
    const struct gguf_tensor *gate, *up, *down;
    const struct gguf_tensor *router, *gate_up_exps, *gate_exps, *up_exps, *down_exps;
};

struct g4_scratch {
    float *x, *xn, *xn2, *tmp, *tmp2; /* (T, n_embd) */
    float *q, *att;                  /* (T, n_head*hd_max) */
    float *k, *v;                    /* (T, kvd_max) */
    float *gate, *up;                /* (T, n_ff) dense; MoE (T*K, 2*n_ff_exp) gate|up, (T*K, n_ff_exp) */
    float *ye;                       /* (T*K, n_embd) */
    float *router;                   /* (T, n_expert) */
    int32_t *sel;
    float *selw;
    int32_t *etok, *etok_t, *ecnt;
    struct mm_op *ops;
    float *attn_ws;
    struct attn_unit *units;
};

struct attn_unit {
    struct kv_cache *kv;
    int32_t t0, kvh, q0, q1;
};

struct g4 {
    struct model base;
    bool moe;
    int n_swa, n_rot_full, n_rot_swa, window, run;
    float rope_base_swa, softcap;
    int hd_max, kvd_max;
    struct g4_layer *layers;
    struct kv_layer_geom *geom;
    const struct gguf_tensor *tok_embd, *output;
    const float *output_norm;
    float *inv_swa, *inv_full;
    float ones[OPS_ATTN_MAX_HEAD_DIM];
    struct mm_scratch *mm;
    void *arena;
    struct g4_scratch s;
};


static size_t scratch_layout(struct g4 *m, char *base)
{
    const struct model_config *c = &m->base.cfg;
    size_t T = G4_UBATCH, E = (size_t)c->n_embd, qd = (size_t)c->n_head * (size_t)m->hd_max;
    size_t kvd = (size_t)m->kvd_max;
    size_t nk = (size_t)(c->n_expert_used > 0 ? c->n_expert_used : 1), ne = (size_t)(c->n_expert > 0 ? c->n_expert : 1);
    size_t ff = (size_t)c->n_ff; /* widest FFN row set per token: dense n_ff, MoE k * n_ff_exp */
    if ((size_t)c->n_ff_exp * nk > ff) ff = (size_t)c->n_ff_exp * nk;
    int nth = tp_size(m->base.pool);
    size_t off = 0;
    struct g4_scratch s;
    s.x = mdl_carve(base, &off, T * E * sizeof(float));
    s.xn = mdl_carve(base, &off, T * E * sizeof(float));
    s.xn2 = mdl_carve(base, &off, T * E * sizeof(float));
    s.tmp = mdl_carve(base, &off, T * E * sizeof(float));
    s.tmp2 = mdl_carve(base, &off, T * E * sizeof(float));
    s.q = mdl_carve(base, &off, T * qd * sizeof(float));
    s.att = mdl_carve(base, &off, T * qd * sizeof(float));
    s.k = mdl_carve(base, &off, T * kvd * sizeof(float));
    s.v = mdl_carve(base, &off, T * kvd * sizeof(float));
    s.gate = mdl_carve(base, &off, T * 2 * ff * sizeof(float)); /* gate|up side by side */
    s.up = mdl_carve(base, &off, T * ff * sizeof(float));
    s.ye = mdl_carve(base, &off, c->n_expert ? T * nk * E * sizeof(float) : 0);
    s.router = mdl_carve(base, &off, T * ne * sizeof(float));
    s.sel = mdl_carve(base, &off, T * nk * sizeof(int32_t));
    s.selw = mdl_carve(base, &off, T * nk * sizeof(float));
    s.etok = mdl_carve(base, &off, ne * T * sizeof(int32_t));
    s.etok_t = mdl_carve(base, &off, ne * T * sizeof(int32_t));
    s.ecnt = mdl_carve(base, &off, ne * sizeof(int32_t));
    s.ops = mdl_carve(base, &off, (2 * ne + 4) * sizeof(struct mm_op));
    s.attn_ws = mdl_carve(base, &off, (size_t)nth * ops_attn_scratch_floats() * sizeof(float));
    s.units = mdl_carve(base, &off, T * (size_t)c->n_head * sizeof(struct attn_unit)); /* T x n_head_kv at most */
    if (base) m->s = s;
    return off;
}

/* ---------------------------------------------------------------- load */

static void g4_free(struct model *bm)
{
    struct g4 *m = (struct g4 *)bm;
    if (!m) return;
    mm_scratch_free(m->mm);
    if (m->base.pool) tp_free(m->base.pool);
    free(m->arena);
    if (m->layers)
        for (int l = 0; l < m->base.cfg.n_layer; l++) free((void *)m->layers[l].inv_freq);
    free(m->layers);
    free(m->geom);
    gguf_close(&m->base.g);
    free(m);
}

static int g4_forward(struct model *bm, const struct batch *b, float *logits, struct err *e);
static const struct model_ops g4_ops = {.forward = g4_forward, .free = g4_free};

static int key_u32(const struct gguf *g, const char *key, int *out, bool required, struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "gemma4.%s", key);
    uint32_t v;
    if (!gguf_find(g, full)) return required ? err_set(e, ERR_FORMAT, "metadata key %s is missing", full) : 0;
    if (gguf_get_u32(g, full, &v, e)) return -1;
    if (v > (1u << 24)) return err_set(e, ERR_FORMAT, "metadata %s = %u is out of range", full, v);
    *out = (int)v;
    return 0;
}

static int key_f32(const struct gguf *g, const char *key, float *out, bool required, struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "gemma4.%s", key);
    if (!gguf_find(g, full)) return required ? err_set(e, ERR_FORMAT, "metadata key %s is missing", full) : 0;
    if (gguf_get_f32(g, full, out, e)) return -1;
    if (!isfinite(*out) || *out < 0) return err_set(e, ERR_FORMAT, "metadata %s = %g is out of range", full, (double)*out);
    return 0;
}

/* A per-layer key that may be a scalar or an array of n_layer numbers (llama.cpp's get_key_or_arr). */
static int key_arr(const struct gguf *g, const char *key, int n, int *out, bool required, struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "gemma4.%s", key);
    const struct gguf_kv *kv = gguf_find(g, full);
    if (!kv) return required ? err_set(e, ERR_FORMAT, "metadata key %s is missing", full) : 0;
    if (kv->type != GGUF_ARRAY) {
        int v = 0;
        if (key_u32(g, key, &v, true, e)) return -1;
        for (int l = 0; l < n; l++) out[l] = v;
        return 0;
    }
    if (kv->arr_n != (uint64_t)n || kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_ARRAY)
        return err_set(e, ERR_FORMAT, "metadata %s: expected %d numbers (one per layer), found %llu", full, n,
                       (unsigned long long)kv->arr_n);
    for (int l = 0; l < n; l++) {
        int64_t v = gguf_arr_i64(kv, (uint64_t)l);
        if (v < 0 || v > (1 << 24)) return err_set(e, ERR_FORMAT, "metadata %s[%d] = %lld is out of range", full, l, (long long)v);
        out[l] = (int)v;
    }
    return 0;
}

static void advise_experts(const struct g4 *m, bool borrow)
{
    int n = 3 * m->base.cfg.n_layer;
    const struct gguf_tensor **ts = calloc((size_t)n, sizeof *ts);
    if (!ts) return; /* advice only: the mapping works without it */
    for (int l = 0; l < m->base.cfg.n_layer; l++) {
        const struct g4_layer *L = &m->layers[l];
        if (!L->moe) continue;
        ts[3 * l] = L->gate_up_exps ? L->gate_up_exps : L->gate_exps;
        ts[3 * l + 1] = L->gate_up_exps ? NULL : L->up_exps;
        ts[3 * l + 2] = L->down_exps;
    }
    mdl_advise_experts(ts, n, borrow);
    free(ts);
}

struct model *gemma4_load(struct gguf *g, const struct model_opts *opts, struct err *e)
{
    struct g4 *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->base.g = *g;
    m->base.ops = &g4_ops;
    if (opts) m->base.opts = *opts;
    struct model_config *c = &m->base.cfg;
    c->kv_f32 = m->base.opts.kv_f32;
    const struct gguf *G = &m->base.g;
    snprintf(c->arch, sizeof c->arch, "gemma4");
    int hkv[G4_MAX_LAYERS], hd_swa = 0, per_layer = 0, shared = 0;
    if (key_u32(G, "block_count", &c->n_layer, true, e)) goto fail;
    if (c->n_layer < 1 || c->n_layer > G4_MAX_LAYERS) {
        err_set(e, ERR_UNSUPPORTED, "gemma4: %d layers (1..%d)", c->n_layer, G4_MAX_LAYERS);
        goto fail;
    }
    c->rope_base = 10000.0f;
    m->rope_base_swa = 10000.0f; /* llama.cpp's defaults when the keys are absent */
    m->softcap = 30.0f;
    if (key_u32(G, "embedding_length", &c->n_embd, true, e) || key_u32(G, "attention.head_count", &c->n_head, true, e) ||
        key_u32(G, "context_length", &c->n_ctx_train, false, e) ||
        key_f32(G, "attention.layer_norm_rms_epsilon", &c->norm_eps, true, e) ||
        key_f32(G, "rope.freq_base", &c->rope_base, false, e) || key_f32(G, "rope.freq_base_swa", &m->rope_base_swa, false, e) ||
        key_f32(G, "final_logit_softcapping", &m->softcap, false, e) ||
        key_u32(G, "attention.key_length", &c->head_dim, true, e) ||
        key_u32(G, "attention.key_length_swa", &hd_swa, true, e) ||
        key_u32(G, "attention.sliding_window", &m->window, true, e) ||
        key_u32(G, "embedding_length_per_layer_input", &per_layer, false, e) ||
        key_u32(G, "attention.shared_kv_layers", &shared, false, e) ||
        key_arr(G, "attention.head_count_kv", c->n_layer, hkv, true, e))
        goto fail;
    if (c->n_embd < 1 || c->n_head < 1 || !(c->norm_eps > 0)) {
        err_set(e, ERR_FORMAT, "gemma4: embedding_length, head_count and layer_norm_rms_epsilon must be positive");
        goto fail;
    }
    {
        int vl = c->head_dim, vls = hd_swa;
        if (key_u32(G, "attention.value_length", &vl, false, e) || key_u32(G, "attention.value_length_swa", &vls, false, e))
            goto fail;
        if (vl != c->head_dim || vls != hd_swa) {
            err_set(e, ERR_FORMAT, "gemma4: value_length must equal key_length (%d/%d, swa %d/%d)", vl, c->head_dim, vls, hd_swa);
            goto fail;
        }
    }
    if (per_layer > 0 || shared > 0) {
        err_set(e, ERR_UNSUPPORTED, "gemma4: %s (the E2B/E4B variants) is not supported",
                per_layer > 0 ? "per-layer embeddings (embedding_length_per_layer_input > 0)"
                              : "KV sharing across layers (attention.shared_kv_layers > 0)");
        goto fail;
    }
    m->n_rot_full = c->head_dim;
    if (key_u32(G, "rope.dimension_count", &m->n_rot_full, false, e)) goto fail;
    m->n_rot_swa = m->n_rot_full;
    if (key_u32(G, "rope.dimension_count_swa", &m->n_rot_swa, false, e)) goto fail;

    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    m->geom = calloc((size_t)c->n_layer, sizeof *m->geom);
    if (!m->layers || !m->geom) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    {
        const struct gguf_kv *pat = gguf_find(G, "gemma4.attention.sliding_window_pattern");
        if (!pat || pat->type != GGUF_ARRAY || pat->arr_type != GGUF_BOOL || pat->arr_n != (uint64_t)c->n_layer) {
            err_set(e, ERR_FORMAT, "gemma4.attention.sliding_window_pattern must be %d bools (one per layer)", c->n_layer);
            goto fail;
        }
        for (int l = 0; l < c->n_layer; l++) m->layers[l].swa = pat->arr_data[l] != 0;
    }
    /* the config's single head geometry is the global layers' (what kv caches are checked by) */
    c->n_head_kv = 0;
    for (int l = 0; l < c->n_layer; l++) {
        struct g4_layer *L = &m->layers[l];
        L->hd = L->swa ? hd_swa : c->head_dim;
        L->n_head_kv = hkv[l];
        L->n_rot = L->swa ? m->n_rot_swa : m->n_rot_full;
        if (L->n_head_kv < 1 || c->n_head % L->n_head_kv || c->n_head / L->n_head_kv > OPS_ATTN_MAX_GROUP) {
            err_set(e, ERR_FORMAT, "gemma4: layer %d: head_count %d / head_count_kv %d is not a supported GQA group", l,
                    c->n_head, L->n_head_kv);
            goto fail;
        }
        if (L->hd < 4 || L->hd % 4 || L->hd > OPS_ATTN_MAX_HEAD_DIM) {
            err_set(e, ERR_UNSUPPORTED, "gemma4: layer %d: head size %d must be a multiple of 4 and at most %d", l, L->hd,
                    OPS_ATTN_MAX_HEAD_DIM);
            goto fail;
        }
        if (L->n_rot < 2 || L->n_rot % 2 || L->n_rot > L->hd) {
            err_set(e, ERR_FORMAT, "gemma4: layer %d: rotary width %d must be even and within the head (%d)", l, L->n_rot, L->hd);
            goto fail;
        }
        if (L->hd > m->hd_max) m->hd_max = L->hd;
        if (L->n_head_kv * L->hd > m->kvd_max) m->kvd_max = L->n_head_kv * L->hd;
        if (!L->swa && c->n_head_kv == 0) c->n_head_kv = L->n_head_kv;
        m->n_swa += L->swa;
    }
    if (c->n_head_kv == 0) c->n_head_kv = m->layers[0].n_head_kv; /* every layer SWA */
    if (m->n_swa && m->window < 1) {
        err_set(e, ERR_FORMAT, "gemma4.attention.sliding_window = %d: SWA layers need a window >= 1", m->window);
        goto fail;
    }
    /* tokens of one sequence per micro-batch: the ring holds window - 1 + run rows */
    m->run = m->window < OPS_ATTN_KT ? OPS_ATTN_KT : m->window > G4_UBATCH ? G4_UBATCH : (m->window + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
    for (int l = 0; l < c->n_layer; l++) {
        m->geom[l] = (struct kv_layer_geom){.n_head_kv = m->layers[l].n_head_kv, .head_dim = m->layers[l].hd};
        if (m->layers[l].swa) {
            m->geom[l].window = m->window;
            m->geom[l].ring_rows = (m->window - 1 + m->run + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
        }
    }
    m->base.kv_layers = m->geom;

    if (mdl_embd_output(G, c, &m->tok_embd, &m->output, &m->output_norm, e)) goto fail;
    const float *rope_ff = NULL;
    if (gguf_find_tensor(G, "rope_freqs.weight") &&
        !(rope_ff = model_tensor_f32(G, "rope_freqs.weight", m->n_rot_full / 2, e)))
        goto fail;
    for (int i = 0; i < OPS_ATTN_MAX_HEAD_DIM; i++) m->ones[i] = 1.0f;

    const int64_t E = c->n_embd;
    bool any_moe = false;
    for (int l = 0; l < c->n_layer; l++) {
        struct g4_layer *L = &m->layers[l];
        char n[96];
        const int64_t hd = L->hd, QD = (int64_t)c->n_head * hd, KVD = (int64_t)L->n_head_kv * hd;
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s", l, s), n)
#define T2(field, s, a, b)                                                      \
    do {                                                                        \
        int64_t ne_[2] = {(a), (b)};                                            \
        if (!(L->field = model_tensor(G, NAME(s), 2, ne_, e))) goto fail;       \
    } while (0)
#define T3(field, s, a, b, c3)                                                  \
    do {                                                                        \
        int64_t ne_[3] = {(a), (b), (c3)};                                      \
        if (!(L->field = model_tensor(G, NAME(s), 3, ne_, e))) goto fail;       \
    } while (0)
#define NORM(field, s, len) \
    if (!(L->field = model_tensor_f32(G, NAME(s), (len), e))) goto fail
        NORM(attn_norm, "attn_norm.weight", E);
        NORM(q_norm, "attn_q_norm.weight", hd);
        NORM(k_norm, "attn_k_norm.weight", hd);
        NORM(post_attn_norm, "post_attention_norm.weight", E);
        NORM(ffn_norm, "ffn_norm.weight", E);
        NORM(post_ffw_norm, "post_ffw_norm.weight", E);
        T2(wq, "attn_q.weight", E, QD);
        T2(wk, "attn_k.weight", E, KVD);
        if (gguf_find_tensor(G, NAME("attn_v.weight"))) T2(wv, "attn_v.weight", E, KVD);
        T2(wo, "attn_output.weight", QD, E);
        if (gguf_find_tensor(G, NAME("layer_output_scale.weight"))) {
            const float *os = model_tensor_f32(G, n, 1, e);
            if (!os) goto fail;
            L->out_scale = os[0];
        } else {
            L->out_scale = 1.0f;
        }
        int ff = c->n_ff;
        if (l == 0) {
            int ffa[G4_MAX_LAYERS];
            if (key_arr(G, "feed_forward_length", c->n_layer, ffa, true, e)) goto fail;
            for (int j = 1; j < c->n_layer; j++)
                if (ffa[j] != ffa[0]) {
                    err_set(e, ERR_UNSUPPORTED, "gemma4: feed_forward_length differs across layers");
                    goto fail;
                }
            c->n_ff = ff = ffa[0];
        }
        T2(gate, "ffn_gate.weight", E, ff);
        T2(up, "ffn_up.weight", E, ff);
        T2(down, "ffn_down.weight", ff, E);
        L->moe = gguf_find_tensor(G, NAME("ffn_gate_inp.weight")) != NULL;
        if (L->moe) {
            if (!any_moe) {
                if (key_u32(G, "expert_count", &c->n_expert, true, e) || key_u32(G, "expert_used_count", &c->n_expert_used, true, e) ||
                    key_u32(G, "expert_feed_forward_length", &c->n_ff_exp, true, e))
                    goto fail;
                if (c->n_expert < 1 || c->n_expert_used < 1 || c->n_expert_used > c->n_expert || c->n_ff_exp < 1) {
                    err_set(e, ERR_FORMAT, "gemma4: expert_used_count %d / expert_count %d / expert ff %d out of range",
                            c->n_expert_used, c->n_expert, c->n_ff_exp);
                    goto fail;
                }
                any_moe = true;
            }
            const int NE = c->n_expert, FE = c->n_ff_exp;
            T2(router, "ffn_gate_inp.weight", E, NE);
            NORM(router_scale, "ffn_gate_inp.scale", E);
            NORM(pre_ffw_norm_2, "pre_ffw_norm_2.weight", E);
            NORM(post_ffw_norm_1, "post_ffw_norm_1.weight", E);
            NORM(post_ffw_norm_2, "post_ffw_norm_2.weight", E);
            if (gguf_find_tensor(G, NAME("ffn_gate_up_exps.weight"))) {
                T3(gate_up_exps, "ffn_gate_up_exps.weight", E, 2 * FE, NE);
            } else {
                T3(gate_exps, "ffn_gate_exps.weight", E, FE, NE);
                T3(up_exps, "ffn_up_exps.weight", E, FE, NE);
            }
            T3(down_exps, "ffn_down_exps.weight", FE, E, NE);
            if (gguf_find_tensor(G, NAME("ffn_down_exps.scale"))) NORM(exp_scale, "ffn_down_exps.scale", NE);
        }
#undef NAME
#undef T2
#undef T3
#undef NORM
        /* RoPE frequencies: base^(-2i/n_rot), global layers divided by rope_freqs (proportional
         * RoPE: a factor of 1e30 leaves its pair unrotated) */
        float *inv = malloc(sizeof(float) * (size_t)(L->n_rot / 2));
        if (!inv) {
            err_set(e, ERR_NOMEM, "out of memory");
            goto fail;
        }
        ops_rope_inv_freq(inv, L->n_rot, L->swa ? m->rope_base_swa : c->rope_base);
        if (!L->swa && rope_ff)
            for (int i = 0; i < L->n_rot / 2; i++) inv[i] = (float)((double)inv[i] / (double)rope_ff[i]);
        L->inv_freq = inv;
    }
    m->moe = any_moe;

    int nth = m->base.opts.n_threads > 0 ? m->base.opts.n_threads : tp_default_threads();
    m->base.pool = tp_new(nth);
    if (!m->base.pool) {
        err_set(e, ERR_NOMEM, "cannot start %d threads", nth);
        goto fail;
    }
    if (!(m->mm = mm_scratch_new())) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t bytes = scratch_layout(m, NULL);
    if (!(m->arena = aligned_alloc(64, bytes))) {
        err_set(e, ERR_NOMEM, "cannot allocate %zu bytes of activation scratch", bytes);
        goto fail;
    }
    scratch_layout(m, m->arena);
    if (m->moe) advise_experts(m, m->base.opts.experts_borrow);
    log_info("model: gemma4, %d layers (%d SWA, window %d, ring %d rows), n_embd %d, %d heads x %d (global, %d kv) / "
             "x %d (SWA), ff %d, vocab %d%s, %d experts (%d used, ff %d), rope base %g / %g (SWA), rotary %d / %d, "
             "soft-cap %g, %d threads, scratch %.1f MiB",
             c->n_layer, m->n_swa, m->window, m->n_swa ? m->geom[0].ring_rows : 0, c->n_embd, c->n_head, c->head_dim,
             c->n_head_kv, hd_swa, c->n_ff, c->n_vocab, m->output == m->tok_embd ? " (tied output)" : "", c->n_expert,
             c->n_expert_used, c->n_ff_exp, (double)c->rope_base, (double)m->rope_base_swa, m->n_rot_full, m->n_rot_swa,
             (double)m->softcap, nth, (double)bytes / (1 << 20));
    return &m->base;

fail:
    /* the caller still owns and closes g on failure: detach it, then free what was built */
    memset(&m->base.g, 0, sizeof m->base.g);
    m->base.g.fd = -1;
    g4_free(&m->base);
    return NULL;
}

/* ---------------------------------------------------------------- forward */


static int run(struct g4 *m, const struct mm_op *ops, int n, struct err *e)
{
    if (mm_run_ops(m->base.pool, ops, n, m->mm, e)) return err_wrap(e, "matmul");
    return 0;
}

struct attn_job {
    struct g4 *m;
    int layer, n_units;
    const int32_t *pos;
    atomic_int next;
};

static void attn_worker(void *ctx, int ith, int nth)
{
    struct attn_job *j = ctx;
    struct g4 *m = j->m;
    const struct model_config *c = &m->base.cfg;
    const struct g4_layer *L = &m->layers[j->layer];
    float *ws = m->s.attn_ws + (size_t)ith * ops_attn_scratch_floats();
    int64_t qd = (int64_t)c->n_head * L->hd;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        const struct attn_unit *un = &m->s.units[u];
        const struct kv_layer y = kv_layer_of(un->kv, j->layer);
        struct ops_attn a = {
            .q = m->s.q + (int64_t)un->t0 * qd,
            .q_stride = qd,
            .out = m->s.att + (int64_t)un->t0 * qd,
            .out_stride = qd,
            .pos = j->pos + un->t0,
            .k = y.k,
            .v = y.v,
            .kv_head_stride = y.head_stride,
            .kv_f32 = c->kv_f32,
            .n_head = c->n_head,
            .n_head_kv = L->n_head_kv,
            .head_dim = L->hd,
            .scale = 1.0f, /* Gemma 4: Q and K are RMS-normed per head, no 1/sqrt(d) */
            .window = L->swa ? m->window : 0,
            .ring = y.window ? y.cap : 0,
        };
        ops_attn_run(&a, un->kvh, un->q0, un->q1, ws);
    }
    (void)nth;
}

/* Runs of consecutive tokens of one sequence -> (kv head, query block) units, longest first. */
static int build_units(struct g4 *m, struct kv_cache *const *seq, int64_t T, int n_head_kv)
{
    int n = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && seq[t1] == seq[t0]) t1++;
        int len = (int)(t1 - t0);
        for (int q1 = len; q1 > 0; q1 -= OPS_ATTN_QB) {
            int q0 = q1 - OPS_ATTN_QB > 0 ? q1 - OPS_ATTN_QB : 0;
            for (int h = 0; h < n_head_kv; h++) m->s.units[n++] = (struct attn_unit){seq[t0], (int32_t)t0, h, q0, q1};
        }
        t0 = t1;
    }
    return n;
}

enum stage { ST_NORM, ST_POST_ADD, ST_QKV, ST_GEGLU, ST_ROUTER_IN, ST_MOE_SUM, ST_FFN_OUT };
struct rows_job {
    struct g4 *m;
    enum stage st;
    int layer;
    const float *w, *w2; /* norm weights */
    float *src, *dst;
    const int32_t *pos;
    struct kv_cache *const *seq;
    int64_t n, width;
    atomic_long next;
};

#define ROWS_CHUNK 8

static float gelu_tanh(float x)
{
    /* GELU, tanh form (Gemma's gelu_pytorch_tanh) */
    return 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

static void rows_worker(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    struct g4 *m = j->m;
    const struct model_config *c = &m->base.cfg;
    struct g4_scratch *s = &m->s;
    const int E = c->n_embd;
    const float eps = c->norm_eps;
    (void)ith, (void)nth;
    for (;;) {
        int64_t t0 = atomic_fetch_add_explicit(&j->next, ROWS_CHUNK, memory_order_relaxed);
        if (t0 >= j->n) break;
        int64_t t1 = t0 + ROWS_CHUNK < j->n ? t0 + ROWS_CHUNK : j->n;
        for (int64_t t = t0; t < t1; t++) {
            switch (j->st) {
            case ST_NORM: /* dst = rms(src)·w */
                ops_rmsnorm(j->dst + t * E, j->src + t * E, j->w, E, eps);
                break;
            case ST_POST_ADD: { /* x += rms(src)·w; then dst = rms(x)·w2 (if w2) */
                float *x = s->x + t * E, *y = j->src + t * E;
                ops_rmsnorm(y, y, j->w, E, eps);
                for (int d = 0; d < E; d++) x[d] += y[d];
                if (j->w2) ops_rmsnorm(j->dst + t * E, x, j->w2, E, eps);
                break;
            }
            case ST_QKV: {
                const struct g4_layer *L = &m->layers[j->layer];
                const int HD = L->hd, QD = c->n_head * HD, KVD = L->n_head_kv * HD;
                float *q = s->q + t * QD, *k = s->k + t * KVD, *v = s->v + t * KVD;
                if (!L->wv) memcpy(v, k, sizeof(float) * (size_t)KVD); /* V from the raw K projection */
                for (int h = 0; h < c->n_head; h++) ops_rmsnorm(q + h * HD, q + h * HD, L->q_norm, HD, eps);
                for (int h = 0; h < L->n_head_kv; h++) {
                    ops_rmsnorm(k + h * HD, k + h * HD, L->k_norm, HD, eps);
                    ops_rmsnorm(v + h * HD, v + h * HD, m->ones, HD, eps);
                }
                float cs[OPS_ATTN_MAX_HEAD_DIM / 2], sn[OPS_ATTN_MAX_HEAD_DIM / 2];
                ops_rope_cache(cs, sn, L->n_rot, j->pos[t], L->inv_freq);
                /* NeoX over the first n_rot dims of every head (the rest pass through) */
                for (int h = 0; h < c->n_head; h++) ops_rope_apply(q + h * HD, 1, L->n_rot, cs, sn);
                for (int h = 0; h < L->n_head_kv; h++) ops_rope_apply(k + h * HD, 1, L->n_rot, cs, sn);
                kv_store(j->seq[t], j->layer, j->pos[t], k, v);
                break;
            }
            case ST_GEGLU: { /* dst row = gelu(src[0..w)) * src[w..2w) (gate|up side by side: stride 2w) */
                const float *g = j->src + t * 2 * j->width, *u = g + j->width;
                float *o = j->dst + t * j->width;
                for (int64_t i = 0; i < j->width; i++) o[i] = gelu_tanh(g[i]) * u[i];
                break;
            }
            case ST_ROUTER_IN: /* dst = rms(x) / sqrt(n_embd) · ffn_gate_inp.scale */
                ops_rmsnorm(j->dst + t * E, s->x + t * E, j->w, E, eps);
                for (int d = 0; d < E; d++) j->dst[t * E + d] *= 1.0f / sqrtf((float)E);
                break;
            case ST_MOE_SUM: { /* tmp2 = rms(Σ_k w_k s_e ye)·post_ffw_norm_2, then tmp = rms(tmp)·post_ffw_norm_1 + tmp2 */
                const int K = c->n_expert_used;
                const struct g4_layer *L = &m->layers[j->layer];
                float *dst = s->tmp2 + t * E;
                for (int d = 0; d < E; d++) dst[d] = 0.0f;
                for (int k = 0; k < K; k++) {
                    const float *src = s->ye + (t * K + k) * E;
                    float w = s->selw[t * K + k];
                    if (L->exp_scale) w *= L->exp_scale[s->sel[t * K + k]];
                    for (int d = 0; d < E; d++) dst[d] += w * src[d];
                }
                ops_rmsnorm(dst, dst, L->post_ffw_norm_2, E, eps);
                float *a = s->tmp + t * E;
                ops_rmsnorm(a, a, L->post_ffw_norm_1, E, eps);
                for (int d = 0; d < E; d++) a[d] += dst[d];
                break;
            }
            case ST_FFN_OUT: { /* x = (x + rms(tmp)·post_ffw_norm) · out_scale; dst = rms(x)·w2 (next layer) */
                const struct g4_layer *L = &m->layers[j->layer];
                float *x = s->x + t * E, *y = s->tmp + t * E;
                ops_rmsnorm(y, y, L->post_ffw_norm, E, eps);
                for (int d = 0; d < E; d++) x[d] = (x[d] + y[d]) * L->out_scale;
                if (j->w2) ops_rmsnorm(s->xn + t * E, x, j->w2, E, eps);
                break;
            }
            }
        }
    }
}

static void run_rows(struct g4 *m, struct rows_job *j)
{
    j->m = m;
    atomic_init(&j->next, 0);
    if (j->n <= ROWS_CHUNK)
        rows_worker(j, 0, 1);
    else
        tp_run_dynamic(m->base.pool, rows_worker, j);
}

/* Dense FFN of T rows of s->xn into s->tmp (gate|up side by side in s->gate, stride 2*ff). */
static int dense_ffn(struct g4 *m, const struct g4_layer *L, int64_t T, struct err *e)
{
    struct g4_scratch *s = &m->s;
    const int E = m->base.cfg.n_embd, FF = m->base.cfg.n_ff;
    struct mm_op gu[2] = {mdl_op(L->gate, 0, s->xn, E, NULL, T, s->gate, 2 * FF, NULL),
                          mdl_op(L->up, 0, s->xn, E, NULL, T, s->gate + FF, 2 * FF, NULL)};
    if (run(m, gu, 2, e)) return -1;
    struct rows_job g = {.st = ST_GEGLU, .src = s->gate, .dst = s->up, .n = T, .width = FF};
    run_rows(m, &g);
    struct mm_op d = mdl_op(L->down, 0, s->up, FF, NULL, T, s->tmp, E, NULL);
    return run(m, &d, 1, e);
}

/* Experts of T rows: router on s->xn (its input), experts on s->xn2, outputs into s->ye. */
static int experts(struct g4 *m, const struct g4_layer *L, int64_t T, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct g4_scratch *s = &m->s;
    const int E = c->n_embd, NE = c->n_expert, K = c->n_expert_used, FF = c->n_ff_exp;
    struct mm_op r = mdl_op(L->router, 0, s->xn, E, NULL, T, s->router, NE, NULL);
    if (run(m, &r, 1, e)) return -1;
    for (int64_t t = 0; t < T; t++) ops_softmax(s->router + t * NE, NE);
    /* the sum clamped as llama.cpp does */
    mdl_route_topk(s->router, T, NE, K, 6.103515625e-5f, G4_UBATCH, s->sel, s->selw, s->ecnt, s->etok, s->etok_t);
    int n = 0;
    for (int x = 0; x < NE; x++) {
        if (!s->ecnt[x]) continue;
        const int32_t *slot = s->etok + (int64_t)x * G4_UBATCH, *tok = s->etok_t + (int64_t)x * G4_UBATCH;
        if (L->gate_up_exps) {
            s->ops[n++] = mdl_op(L->gate_up_exps, x, s->xn2, E, tok, s->ecnt[x], s->gate, 2 * FF, slot);
        } else {
            s->ops[n++] = mdl_op(L->gate_exps, x, s->xn2, E, tok, s->ecnt[x], s->gate, 2 * FF, slot);
            s->ops[n] = mdl_op(L->up_exps, x, s->xn2, E, tok, s->ecnt[x], s->gate + FF, 2 * FF, slot);
            n++;
        }
    }
    if (run(m, s->ops, n, e)) return -1;
    struct rows_job g = {.st = ST_GEGLU, .src = s->gate, .dst = s->up, .n = T * K, .width = FF};
    run_rows(m, &g);
    n = 0;
    for (int x = 0; x < NE; x++) {
        if (!s->ecnt[x]) continue;
        const int32_t *slot = s->etok + (int64_t)x * G4_UBATCH;
        s->ops[n++] = mdl_op(L->down_exps, x, s->up, FF, slot, s->ecnt[x], s->ye, E, slot);
    }
    return run(m, s->ops, n, e);
}

static void embed(struct g4 *m, int32_t tok, float *out)
{
    mdl_embed_row(m->tok_embd, tok, out);
    const float sc = sqrtf((float)m->base.cfg.n_embd); /* Gemma's embedding scale */
    for (int64_t d = 0; d < m->tok_embd->ne[0]; d++) out[d] *= sc;
}

static int forward_ubatch(struct g4 *m, const int32_t *tok, const int32_t *pos, struct kv_cache *const *seq,
                          const bool *want, int64_t T, float *out, float *hidden, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct g4_scratch *s = &m->s;
    const int E = c->n_embd;
    for (int64_t t = 0; t < T; t++) embed(m, tok[t], s->x + t * E);
    struct rows_job rn = {.st = ST_NORM, .src = s->x, .dst = s->xn, .w = m->layers[0].attn_norm, .n = T};
    run_rows(m, &rn);
    for (int l = 0; l < c->n_layer; l++) {
        const struct g4_layer *L = &m->layers[l];
        const int HD = L->hd, QD = c->n_head * HD, KVD = L->n_head_kv * HD;
        /* here xn = rms(x)·attn_norm */
        struct mm_op qkv[3] = {mdl_op(L->wq, 0, s->xn, E, NULL, T, s->q, QD, NULL),
                               mdl_op(L->wk, 0, s->xn, E, NULL, T, s->k, KVD, NULL)};
        int nq = 2;
        if (L->wv) qkv[nq++] = mdl_op(L->wv, 0, s->xn, E, NULL, T, s->v, KVD, NULL);
        if (run(m, qkv, nq, e)) return -1;
        struct rows_job qk = {.st = ST_QKV, .layer = l, .pos = pos, .seq = seq, .n = T};
        run_rows(m, &qk);
        struct attn_job aj = {.m = m, .layer = l, .pos = pos, .n_units = build_units(m, seq, T, L->n_head_kv)};
        atomic_init(&aj.next, 0);
        tp_run_dynamic(m->base.pool, attn_worker, &aj);
        struct mm_op o = mdl_op(L->wo, 0, s->att, QD, NULL, T, s->tmp, E, NULL);
        if (run(m, &o, 1, e)) return -1;
        /* x += rms(attn)·post_attention_norm; xn = rms(x)·ffn_norm (the dense FFN's input) */
        rn = (struct rows_job){.st = ST_POST_ADD, .src = s->tmp, .dst = s->xn, .w = L->post_attn_norm,
                               .w2 = L->ffn_norm, .n = T};
        run_rows(m, &rn);
        if (dense_ffn(m, L, T, e)) return -1;
        if (L->moe) {
            /* s->tmp holds the dense FFN; the router reads rms(x)/sqrt(E)·scale, experts rms(x)·pre_ffw_norm_2 */
            rn = (struct rows_job){.st = ST_ROUTER_IN, .dst = s->xn, .w = L->router_scale, .n = T};
            run_rows(m, &rn);
            rn = (struct rows_job){.st = ST_NORM, .src = s->x, .dst = s->xn2, .w = L->pre_ffw_norm_2, .n = T};
            run_rows(m, &rn);
            if (experts(m, L, T, e)) return -1;
            rn = (struct rows_job){.st = ST_MOE_SUM, .layer = l, .n = T};
            run_rows(m, &rn);
        }
        rn = (struct rows_job){.st = ST_FFN_OUT, .layer = l, .n = T,
                               .w2 = l + 1 < c->n_layer ? m->layers[l + 1].attn_norm : NULL};
        run_rows(m, &rn);
    }
    if (hidden)
        for (int64_t t = 0; t < T; t++) ops_rmsnorm(hidden + t * E, s->x + t * E, m->output_norm, E, c->norm_eps);
    int64_t nw = 0;
    for (int64_t t = 0; t < T; t++)
        if (want[t]) ops_rmsnorm(s->xn + (nw++) * E, s->x + t * E, m->output_norm, E, c->norm_eps);
    if (nw && out) {
        struct mm_op lo = mdl_op(m->output, 0, s->xn, E, NULL, nw, out, c->n_vocab, NULL);
        if (run(m, &lo, 1, e)) return -1;
        if (m->softcap > 0) {
            const float cap = m->softcap, inv = 1.0f / m->softcap;
            for (int64_t i = 0; i < nw * (int64_t)c->n_vocab; i++) out[i] = tanhf(out[i] * inv) * cap;
        }
    }
    return 0;
}

static int g4_forward(struct model *bm, const struct batch *b, float *logits, struct err *e)
{
    struct g4 *m = (struct g4 *)bm;
    bool want[G4_UBATCH];
    int64_t out_row = 0;
    /* micro-batches of at most G4_UBATCH tokens and at most m->run tokens of one sequence (the
     * SWA rings hold window - 1 + run rows) */
    for (int64_t i0 = 0; i0 < b->n;) {
        int64_t T = 0, run_len = 0;
        while (i0 + T < b->n && T < G4_UBATCH) {
            run_len = T > 0 && b->seq[i0 + T] == b->seq[i0 + T - 1] ? run_len + 1 : 1;
            if (run_len > m->run) break;
            T++;
        }
        for (int64_t t = 0; t < T; t++) want[t] = b->want_logits ? b->want_logits[i0 + t] : (i0 + t == b->n - 1);
        if (forward_ubatch(m, b->token + i0, b->pos + i0, b->seq + i0, want, T,
                           logits ? logits + out_row * m->base.cfg.n_vocab : NULL,
                           b->hidden ? b->hidden + i0 * m->base.cfg.n_embd : NULL, e))
            return -1;
        if (logits)
            for (int64_t t = 0; t < T; t++) out_row += want[t];
        i0 += T;
    }
    return 0;
}
