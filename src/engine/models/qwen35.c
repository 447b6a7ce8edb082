/* qwen35 — the Qwen3.5 hybrid forward pass: `qwen35` (dense SwiGLU) and `qwen35moe` (routed
 * experts + a gated shared expert), semantics as llama.cpp's src/models/qwen35*.cpp on the same
 * GGUF (docs/qwen35.md has the layout, the state and the numerics).
 *
 * Per layer, with every norm a plain RMSNorm times its stored weight (the file already carries
 * the +1 of Qwen3.5's (1 + w) norms):
 *   h  = x + mixer(rmsnorm(x)·attn_norm)
 *   x' = h + ffn(rmsnorm(h)·post_attention_norm)
 * mixer of a Gated DeltaNet layer (every layer but each full_attention_interval-th):
 *   qkv = conv1d_causal(Wqkv·n) then SiLU (kernel d_conv over time, per channel; the last
 *         d_conv-1 inputs are the conv state), split into q, k (n_group heads) and v (dt_rank
 *         heads) of d_state; q, k L2-normalized per head, q scaled by 1/sqrt(d_state)
 *   β = sigmoid(Wβ·n), g = softplus(Wα·n + dt_bias) · ssm_a   (per v head; ssm_a = -exp(A_log))
 *   per v head h (q/k head h % n_group: the converter orders v heads tiled), state S (d x d):
 *         S ← e^g S;  S ← S + k ((v - Sᵀk) β)ᵀ;  o = Sᵀq
 *   out = Wout · (rmsnorm(o)·ssm_norm ⊙ silu(Wz·n))  per head
 * mixer of a full-attention layer: Wq gives per head [q | gate]; q, k RMSNormed per head (q_norm,
 * k_norm), partial interleaved M-RoPE on the first n_rot dims (text: every section at the token's
 * position, the fourth at 0), causal attention over the KV cache, ⊙ sigmoid(gate), then Wo.
 *
 * Prefill of a DeltaNet layer runs the chunked (WY) form of the delta rule on every whole chunk
 * of Q35_CHUNK tokens that starts at a multiple of Q35_CHUNK, and the recurrence itself on the
 * tokens outside such chunks (the tail of a prompt, decode). Chunks aligned to positions make a
 * prefill split at multiples of Q35_CHUNK (the server's chunks) give the same bits as one
 * prefill; other splits differ from it by float rounding only (unit test
 * qwen35/chunked_prefill_matches_decode). MTP (nextn) blocks are not run: a file with them loads,
 * they are ignored. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/log.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"
#include "engine/kv_cache.h"
#include "engine/model_impl.h"
#include "engine/models/common.h"

#define Q35_UBATCH 512
#define Q35_CHUNK 64
#define Q35_MAX_SEQ 256
#define Q35_MAX_STATE 256 /* d_state */

struct q35_layer {
    bool recr;
    int kv_l, rs_l; /* index among the attention / the recurrent layers */
    const float *attn_norm, *post_norm;
    /* full attention */
    const struct gguf_tensor *wq, *wk, *wv, *wo; /* wq: [n_embd, 2*n_head*hd] (q | gate per head) */
    const float *q_norm, *k_norm;
    /* Gated DeltaNet */
    const struct gguf_tensor *wqkv, *wz, *wbeta, *walpha, *wout;
    const float *conv, *dt_bias, *ssm_a, *ssm_norm; /* conv: [conv_ch][d_conv] */
    /* FFN */
    const struct gguf_tensor *gate, *up, *down;
    const struct gguf_tensor *router, *gate_exps, *up_exps, *down_exps;
    const struct gguf_tensor *gate_sh, *up_sh, *down_sh;
    const float *sh_gate; /* (n_embd): the shared expert's scalar gate */
};

struct q35_scratch {
    float *x, *xn, *tmp;     /* (T, n_embd) */
    float *qg;               /* (T, 2*qd) full attention q | gate; DeltaNet: (T, conv_ch) Wqkv·n */
    float *q, *k, *v, *att;  /* (T, qd) (T, kvd) (T, kvd) (T, qd) */
    float *ag;               /* (T, qd) the attention output gates */
    float *cv;               /* (T, conv_ch) conv + SiLU output (q, k normed in place) */
    float *z, *o;            /* (T, v_dim) */
    float *beta, *g;         /* (T, n_v) */
    float *gate, *up;        /* (T, ff) */
    float *ye, *router, *selw, *shg;
    int32_t *sel, *etok, *etok_t, *ecnt;
    struct mm_op *ops;
    float *attn_ws;          /* (n_threads, ops_attn_scratch_floats) */
    float *dn_ws;            /* (n_threads, dn_ws_floats) delta-rule chunk scratch */
    struct attn_unit *units; /* (T * n_head_kv) */
};

struct attn_unit {
    struct kv_cache *kv;
    int32_t t0, kvh, q0, q1;
};

/* the tokens of one sequence in the micro-batch, in order (positions consecutive) */
struct q35_seq {
    struct kv_cache *kv;
    int32_t *idx;
    int n;
    int32_t pos0;
};

struct q35 {
    struct model base;
    bool moe;
    struct q35_layer *layers;
    int n_rot, sections[4];
    int d_conv, d_state, n_group, n_v; /* DeltaNet geometry */
    int conv_ch, k_dim, v_dim;
    size_t conv_floats, ssm_floats; /* per recurrent layer, in the state */
    int n_ff_sh;
    const struct gguf_tensor *tok_embd, *output;
    const float *output_norm;
    float *inv_freq; /* (n_rot/2) */
    struct mm_scratch *mm;
    void *arena;
    size_t arena_bytes, dn_ws_floats;
    struct q35_scratch s;
    struct q35_seq seqs[Q35_MAX_SEQ];
    int32_t *seq_idx; /* (T) backing of seqs[].idx */
    int n_seqs;
};


static size_t scratch_layout(struct q35 *m, char *base)
{
    const struct model_config *c = &m->base.cfg;
    size_t T = Q35_UBATCH, E = (size_t)c->n_embd, qd = (size_t)c->n_head * c->head_dim,
           kvd = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = (size_t)c->n_ff;
    if ((size_t)c->n_ff_exp * (size_t)c->n_expert_used > ff) ff = (size_t)c->n_ff_exp * (size_t)c->n_expert_used;
    if ((size_t)m->n_ff_sh > ff) ff = (size_t)m->n_ff_sh;
    size_t wide = 2 * qd > (size_t)m->conv_ch ? 2 * qd : (size_t)m->conv_ch;
    size_t ne = (size_t)(c->n_expert > 0 ? c->n_expert : 1), nk = (size_t)(c->n_expert_used > 0 ? c->n_expert_used : 1);
    int nth = tp_size(m->base.pool);
    size_t C = Q35_CHUNK, S = (size_t)m->d_state;
    m->dn_ws_floats = 2 * C * C + 3 * C * S + 2 * C + 16;
    size_t off = 0;
    struct q35_scratch s;
    s.x = mdl_carve(base, &off, T * E * sizeof(float));
    s.xn = mdl_carve(base, &off, T * E * sizeof(float));
    s.tmp = mdl_carve(base, &off, T * E * sizeof(float));
    s.qg = mdl_carve(base, &off, T * wide * sizeof(float));
    s.q = mdl_carve(base, &off, T * qd * sizeof(float));
    s.k = mdl_carve(base, &off, T * kvd * sizeof(float));
    s.v = mdl_carve(base, &off, T * kvd * sizeof(float));
    s.att = mdl_carve(base, &off, T * qd * sizeof(float));
    s.ag = mdl_carve(base, &off, T * qd * sizeof(float));
    s.cv = mdl_carve(base, &off, T * (size_t)m->conv_ch * sizeof(float));
    s.z = mdl_carve(base, &off, T * (size_t)m->v_dim * sizeof(float));
    s.o = mdl_carve(base, &off, T * (size_t)m->v_dim * sizeof(float));
    s.beta = mdl_carve(base, &off, T * (size_t)m->n_v * sizeof(float));
    s.g = mdl_carve(base, &off, T * (size_t)m->n_v * sizeof(float));
    s.gate = mdl_carve(base, &off, T * ff * sizeof(float));
    s.up = mdl_carve(base, &off, T * ff * sizeof(float));
    s.ye = mdl_carve(base, &off, c->n_expert ? T * nk * E * sizeof(float) : 0);
    s.router = mdl_carve(base, &off, T * ne * sizeof(float));
    s.selw = mdl_carve(base, &off, T * nk * sizeof(float));
    s.shg = mdl_carve(base, &off, T * sizeof(float));
    s.sel = mdl_carve(base, &off, T * nk * sizeof(int32_t));
    s.etok = mdl_carve(base, &off, ne * T * sizeof(int32_t));
    s.etok_t = mdl_carve(base, &off, ne * T * sizeof(int32_t));
    s.ecnt = mdl_carve(base, &off, ne * sizeof(int32_t));
    s.ops = mdl_carve(base, &off, (3 * ne + 8) * sizeof(struct mm_op));
    s.attn_ws = mdl_carve(base, &off, (size_t)nth * ops_attn_scratch_floats() * sizeof(float));
    s.dn_ws = mdl_carve(base, &off, (size_t)nth * m->dn_ws_floats * sizeof(float));
    s.units = mdl_carve(base, &off, T * (size_t)c->n_head_kv * sizeof(struct attn_unit));
    int32_t *si = mdl_carve(base, &off, T * sizeof(int32_t));
    if (base) {
        m->s = s;
        m->seq_idx = si;
    }
    return off;
}

/* ---------------------------------------------------------------- load */

static void q35_free(struct model *bm)
{
    struct q35 *m = (struct q35 *)bm;
    if (!m) return;
    mm_scratch_free(m->mm);
    if (m->base.pool) tp_free(m->base.pool);
    free(m->arena);
    free(m->layers);
    free(m->inv_freq);
    gguf_close(&m->base.g);
    free(m);
}

static int q35_forward(struct model *bm, const struct batch *b, float *logits, struct err *e);
static const struct model_ops q35_ops = {.forward = q35_forward, .free = q35_free};
static void pick_kernels(void);



/* The layer pattern: attention.recurrent_layers (per-layer flags) if present, else every
 * full_attention_interval-th layer is full attention (default 4, llama.cpp's fallback). */
static int layer_pattern(struct q35 *m, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    const struct gguf *G = &m->base.g;
    char key[128];
    snprintf(key, sizeof key, "%s.attention.recurrent_layers", c->arch);
    const struct gguf_kv *kv = gguf_find(G, key);
    if (kv) {
        if (kv->type != GGUF_ARRAY || kv->arr_n < (uint64_t)c->n_layer)
            return err_set(e, ERR_FORMAT, "metadata %s must be an array of at least %d flags", key, c->n_layer);
        for (int l = 0; l < c->n_layer; l++) m->layers[l].recr = gguf_arr_i64(kv, (uint64_t)l) != 0;
        return 0;
    }
    int interval = 4;
    if (mdl_get_u32(G, c->arch, "full_attention_interval", &interval, false, e)) return -1;
    for (int l = 0; l < c->n_layer; l++) m->layers[l].recr = (l + 1) % interval != 0;
    return 0;
}

static int rope_sections(struct q35 *m, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", c->arch);
    const struct gguf_kv *kv = gguf_find(&m->base.g, key);
    if (!kv) return err_set(e, ERR_FORMAT, "metadata key %s is missing", key);
    if (kv->type != GGUF_ARRAY || kv->arr_n < 3 || kv->arr_n > 4)
        return err_set(e, ERR_FORMAT, "metadata %s must be an array of 3 or 4 integers", key);
    int sum = 0;
    for (uint64_t i = 0; i < 4; i++) {
        int64_t v = i < kv->arr_n ? gguf_arr_i64(kv, i) : 0;
        if (v < 0 || v > 4096) return err_set(e, ERR_FORMAT, "metadata %s[%d] = %lld is out of range", key, (int)i, (long long)v);
        m->sections[i] = (int)v;
        sum += (int)v;
    }
    if (sum <= 0 || m->sections[0] + m->sections[1] + m->sections[2] <= 0)
        return err_set(e, ERR_FORMAT, "metadata %s: the sections are all 0", key);
    if (sum > c->head_dim)
        return err_set(e, ERR_FORMAT, "metadata %s: sections sum %d exceeds the head dim %d", key, sum, c->head_dim);
    return 0;
}

struct model *qwen35_load(struct gguf *g, const struct model_opts *opts, struct err *e)
{
    struct q35 *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->base.g = *g; /* owned from here on (q35_free closes it) */
    pick_kernels();
    m->base.ops = &q35_ops;
    if (opts) m->base.opts = *opts;
    struct model_config *c = &m->base.cfg;
    c->kv_f32 = m->base.opts.kv_f32;
    const struct gguf *G = &m->base.g;
    int vlen;
    if (mdl_attn_hparams(G, c, &vlen, e)) goto fail_keep_g;
    m->moe = !strcmp(c->arch, "qwen35moe");
    if (mdl_get_u32(G, c->arch, "ssm.conv_kernel", &m->d_conv, true, e) ||
        mdl_get_u32(G, c->arch, "ssm.state_size", &m->d_state, true, e) ||
        mdl_get_u32(G, c->arch, "ssm.group_count", &m->n_group, true, e) ||
        mdl_get_u32(G, c->arch, "ssm.time_step_rank", &m->n_v, true, e))
        goto fail_keep_g;
    int inner = 0;
    if (mdl_get_u32(G, c->arch, "ssm.inner_size", &inner, true, e)) goto fail_keep_g;
    if (inner != m->d_state * m->n_v || m->n_v % m->n_group || m->d_state > Q35_MAX_STATE || m->d_conv > 16) {
        err_set(e, ERR_UNSUPPORTED, "DeltaNet geometry: inner_size %d, state_size %d, %d v heads, %d groups, "
                "conv %d (need inner = state x v heads, v heads a multiple of groups, state <= %d, conv <= 16)",
                inner, m->d_state, m->n_v, m->n_group, m->d_conv, Q35_MAX_STATE);
        goto fail_keep_g;
    }
    m->n_rot = c->head_dim;
    if (mdl_get_u32(G, c->arch, "rope.dimension_count", &m->n_rot, false, e)) goto fail_keep_g;
    if (vlen != c->head_dim || m->n_rot % 2 || m->n_rot > c->head_dim) {
        err_set(e, ERR_UNSUPPORTED, "value_length %d, key_length %d, rope dims %d: need equal lengths and an "
                "even rope width within the head", vlen, c->head_dim, m->n_rot);
        goto fail_keep_g;
    }
    if (rope_sections(m, e)) goto fail_keep_g;
    if (mdl_ffn_hparams(G, c, m->moe, e) ||
        (m->moe && mdl_get_u32(G, c->arch, "expert_shared_feed_forward_length", &m->n_ff_sh, false, e)))
        goto fail_keep_g;
    m->k_dim = m->d_state * m->n_group;
    m->v_dim = m->d_state * m->n_v;
    m->conv_ch = 2 * m->k_dim + m->v_dim;

    if (mdl_embd_output(G, c, &m->tok_embd, &m->output, &m->output_norm, e)) goto fail_keep_g;

    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    m->inv_freq = malloc(sizeof(float) * (size_t)(m->n_rot / 2 + 1));
    if (!m->layers || !m->inv_freq) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail_keep_g;
    }
    /* theta_i = pos * base^(-2i/n_rot) over the rotated width (ggml's theta_scale) */
    for (int i = 0; i < m->n_rot / 2; i++)
        m->inv_freq[i] = (float)pow((double)c->rope_base, -2.0 * i / (double)m->n_rot);
    if (layer_pattern(m, e)) goto fail_keep_g;
    int n_kv = 0, n_rs = 0;
    int64_t E = c->n_embd, HD = c->head_dim, QD = (int64_t)c->n_head * HD, KVD = (int64_t)c->n_head_kv * HD;
    for (int l = 0; l < c->n_layer; l++) {
        struct q35_layer *L = &m->layers[l];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d.%s.weight", l, s), n)
#define T2(field, s, a, b)                                                      \
    do {                                                                        \
        int64_t ne_[2] = {(a), (b)};                                            \
        if (!(L->field = model_tensor(G, NAME(s), 2, ne_, e))) goto fail_keep_g; \
    } while (0)
#define T3(field, s, a, b, c3)                                                  \
    do {                                                                        \
        int64_t ne_[3] = {(a), (b), (c3)};                                      \
        if (!(L->field = model_tensor(G, NAME(s), 3, ne_, e))) goto fail_keep_g; \
    } while (0)
#define F32(field, nm, len) \
    if (!(L->field = model_tensor_f32(G, (nm), (len), e))) goto fail_keep_g
        F32(attn_norm, NAME("attn_norm"), E);
        F32(post_norm, NAME("post_attention_norm"), E);
        if (L->recr) {
            L->rs_l = n_rs++;
            T2(wqkv, "attn_qkv", E, m->conv_ch);
            T2(wz, "attn_gate", E, m->v_dim);
            T2(wbeta, "ssm_beta", E, m->n_v);
            T2(walpha, "ssm_alpha", E, m->n_v);
            T2(wout, "ssm_out", m->v_dim, E);
            F32(ssm_norm, NAME("ssm_norm"), m->d_state);
            snprintf(n, sizeof n, "blk.%d.ssm_dt.bias", l);
            F32(dt_bias, n, m->n_v);
            snprintf(n, sizeof n, "blk.%d.ssm_a", l);
            F32(ssm_a, n, m->n_v);
            int64_t ne_c[2] = {m->d_conv, m->conv_ch};
            const struct gguf_tensor *ct = model_tensor(G, NAME("ssm_conv1d"), 2, ne_c, e);
            if (!ct) goto fail_keep_g;
            if (ct->type != GGML_TYPE_F32 || ((uintptr_t)ct->data & 3)) {
                err_set(e, ERR_UNSUPPORTED, "tensor %s must be F32 and aligned", n);
                goto fail_keep_g;
            }
            L->conv = ct->data;
        } else {
            L->kv_l = n_kv++;
            T2(wq, "attn_q", E, 2 * QD);
            T2(wk, "attn_k", E, KVD);
            T2(wv, "attn_v", E, KVD);
            T2(wo, "attn_output", QD, E);
            F32(q_norm, NAME("attn_q_norm"), HD);
            F32(k_norm, NAME("attn_k_norm"), HD);
        }
        if (m->moe) {
            T2(router, "ffn_gate_inp", E, c->n_expert);
            T3(gate_exps, "ffn_gate_exps", E, c->n_ff_exp, c->n_expert);
            T3(up_exps, "ffn_up_exps", E, c->n_ff_exp, c->n_expert);
            T3(down_exps, "ffn_down_exps", c->n_ff_exp, E, c->n_expert);
            if (gguf_find_tensor(G, NAME("ffn_up_shexp"))) {
                if (!m->n_ff_sh) {
                    const struct gguf_tensor *t = gguf_find_tensor(G, n);
                    m->n_ff_sh = (int)t->ne[1];
                }
                T2(gate_sh, "ffn_gate_shexp", E, m->n_ff_sh);
                T2(up_sh, "ffn_up_shexp", E, m->n_ff_sh);
                T2(down_sh, "ffn_down_shexp", m->n_ff_sh, E);
                F32(sh_gate, NAME("ffn_gate_inp_shexp"), E);
            }
        } else {
            T2(gate, "ffn_gate", E, c->n_ff);
            T2(up, "ffn_up", E, c->n_ff);
            T2(down, "ffn_down", c->n_ff, E);
        }
#undef NAME
#undef T2
#undef T3
#undef F32
    }
    if (!n_kv || !n_rs) {
        err_set(e, ERR_UNSUPPORTED, "%s with %d full-attention and %d DeltaNet layers: this engine needs both",
                c->arch, n_kv, n_rs);
        goto fail_keep_g;
    }
    c->n_layer_kv = n_kv;
    m->conv_floats = (size_t)(m->d_conv - 1) * (size_t)m->conv_ch;
    m->ssm_floats = (size_t)m->n_v * (size_t)m->d_state * (size_t)m->d_state;
    c->state_floats = (size_t)n_rs * (m->conv_floats + m->ssm_floats);

    int nth = m->base.opts.n_threads > 0 ? m->base.opts.n_threads : tp_default_threads();
    m->base.pool = tp_new(nth);
    if (!m->base.pool) {
        err_set(e, ERR_NOMEM, "cannot start %d threads", nth);
        goto fail_keep_g;
    }
    m->mm = mm_scratch_new();
    if (!m->mm) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail_keep_g;
    }
    m->arena_bytes = scratch_layout(m, NULL);
    m->arena = aligned_alloc(64, m->arena_bytes);
    if (!m->arena) {
        err_set(e, ERR_NOMEM, "cannot allocate %zu bytes of activation scratch", m->arena_bytes);
        goto fail_keep_g;
    }
    scratch_layout(m, m->arena);
    log_info("model: %s, %d layers (%d full attention, %d Gated DeltaNet), n_embd %d, %d heads (%d kv) x %d, "
             "rope %d dims [%d,%d,%d,%d], DeltaNet %d qk / %d v heads x %d, conv %d, ff %d, vocab %d%s, "
             "%d experts (%d used, ff %d, shared %d), %d threads, state %.1f KiB per sequence",
             c->arch, c->n_layer, n_kv, n_rs, c->n_embd, c->n_head, c->n_head_kv, c->head_dim, m->n_rot,
             m->sections[0], m->sections[1], m->sections[2], m->sections[3], m->n_group, m->n_v, m->d_state,
             m->d_conv, c->n_ff, c->n_vocab, m->output == m->tok_embd ? " (tied output)" : "", c->n_expert,
             c->n_expert_used, c->n_ff_exp, m->n_ff_sh, nth, (double)c->state_floats * 4 / 1024);
    return &m->base;

fail_keep_g:
    /* the caller still owns and closes g on failure: detach it, then free what was built */
    memset(&m->base.g, 0, sizeof m->base.g);
    m->base.g.fd = -1;
    q35_free(&m->base);
    return NULL;
}

/* ---------------------------------------------------------------- helpers */


static int run(struct q35 *m, const struct mm_op *ops, int n, struct err *e)
{
    if (mm_run_ops(m->base.pool, ops, n, m->mm, e)) return err_wrap(e, "matmul");
    return 0;
}

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }
static float siluf(float x) { return x / (1.0f + expf(-x)); }
static float softplusf(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* The DeltaNet's inner products and updates (over d_state floats): AVX2+FMA where the CPU has it
 * (picked once at load; a machine always runs the same one, so bits do not depend on the batch),
 * else the portable loops. */
static float dot_ref(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* y += a * x */
static void axpy_ref(float *y, const float *x, float a, int n)
{
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("avx2,fma"))) static float dot_avx2(const float *a, const float *b, int n)
{
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    __m256 acc = _mm256_add_ps(acc0, acc1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_shuffle_ps(h, h, 1));
    float s = _mm_cvtss_f32(h);
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

__attribute__((target("avx2,fma"))) static void axpy_avx2(float *y, const float *x, float a, int n)
{
    __m256 va = _mm256_set1_ps(a);
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}
#endif

static float (*dot)(const float *, const float *, int) = dot_ref;
static void (*axpy)(float *, const float *, float, int) = axpy_ref;

static void pick_kernels(void)
{
#if defined(__x86_64__)
    if (cpu_has_avx2_fma()) dot = dot_avx2, axpy = axpy_avx2;
#endif
}

static float *layer_state(const struct q35 *m, struct kv_cache *kv, int rs_l)
{
    return kv->state + (size_t)rs_l * (m->conv_floats + m->ssm_floats);
}

/* ---------------------------------------------------------------- per-row work */

enum stage { ST_RESID_NORM, ST_QK, ST_ATT_GATE, ST_SWIGLU, ST_DN_PRE, ST_DN_POST };
struct rows_job {
    struct q35 *m;
    enum stage st;
    const float *norm;
    bool add;
    const struct q35_layer *L;
    const int32_t *pos;
    struct kv_cache *const *seq;
    int64_t n, width;
    atomic_long next;
};

#define ROWS_CHUNK 8

/* Partial interleaved M-RoPE of one token (text positions: sections t, h, w at pos, the fourth
 * at 0): pair i (of n_rot/2) rotates dims i and i + n_rot/2; dims past n_rot are left alone. */
static void rope_cache(const struct q35 *m, int32_t pos, float *cs, float *sn)
{
    const int *sec = m->sections;
    int sect = sec[0] + sec[1] + sec[2] + sec[3];
    for (int i = 0; i < m->n_rot / 2; i++) {
        int k = i % sect;
        bool text = (k % 3 == 1 && k < 3 * sec[1]) || (k % 3 == 2 && k < 3 * sec[2]) ||
                    (k % 3 == 0 && k < 3 * sec[0]);
        float th = text ? (float)pos * m->inv_freq[i] : 0.0f;
        cs[i] = cosf(th);
        sn[i] = sinf(th);
    }
}

static void rope_apply(float *x, int n_head, int hd, int n_rot, const float *cs, const float *sn)
{
    int h2 = n_rot / 2;
    for (int h = 0; h < n_head; h++) {
        float *p = x + (int64_t)h * hd;
        for (int i = 0; i < h2; i++) {
            float a = p[i], b = p[i + h2];
            p[i] = a * cs[i] - b * sn[i];
            p[i + h2] = a * sn[i] + b * cs[i];
        }
    }
}

static void rows_worker(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    struct q35 *m = j->m;
    const struct model_config *c = &m->base.cfg;
    struct q35_scratch *s = &m->s;
    const int E = c->n_embd, HD = c->head_dim, QD = c->n_head * HD, KVD = c->n_head_kv * HD;
    const int S = m->d_state;
    (void)ith, (void)nth;
    for (;;) {
        int64_t t0 = atomic_fetch_add_explicit(&j->next, ROWS_CHUNK, memory_order_relaxed);
        if (t0 >= j->n) break;
        int64_t t1 = t0 + ROWS_CHUNK < j->n ? t0 + ROWS_CHUNK : j->n;
        for (int64_t t = t0; t < t1; t++) {
            switch (j->st) {
            case ST_RESID_NORM:
                if (j->add)
                    for (int d = 0; d < E; d++) s->x[t * E + d] += s->tmp[t * E + d];
                if (j->norm) ops_rmsnorm(s->xn + t * E, s->x + t * E, j->norm, E, c->norm_eps);
                break;
            case ST_QK: { /* split q | gate, norms, RoPE, K/V into the cache */
                const float *qg = s->qg + t * 2 * QD;
                float *q = s->q + t * QD, *k = s->k + t * KVD, *gt = s->ag + t * QD;
                for (int h = 0; h < c->n_head; h++) {
                    ops_rmsnorm(q + h * HD, qg + (int64_t)h * 2 * HD, j->L->q_norm, HD, c->norm_eps);
                    memcpy(gt + h * HD, qg + (int64_t)h * 2 * HD + HD, sizeof(float) * (size_t)HD);
                }
                for (int h = 0; h < c->n_head_kv; h++) ops_rmsnorm(k + h * HD, k + h * HD, j->L->k_norm, HD, c->norm_eps);
                float cs[OPS_ATTN_MAX_HEAD_DIM / 2], sn[OPS_ATTN_MAX_HEAD_DIM / 2];
                rope_cache(m, j->pos[t], cs, sn);
                rope_apply(q, c->n_head, HD, m->n_rot, cs, sn);
                rope_apply(k, c->n_head_kv, HD, m->n_rot, cs, sn);
                kv_store(j->seq[t], j->L->kv_l, j->pos[t], k, s->v + t * KVD);
                break;
            }
            case ST_ATT_GATE: {
                float *a = s->att + t * QD;
                const float *gt = s->ag + t * QD;
                for (int d = 0; d < QD; d++) a[d] *= sigmoidf(gt[d]);
                break;
            }
            case ST_SWIGLU:
                ops_swiglu(s->gate + t * j->width, s->gate + t * j->width, s->up + t * j->width, j->width);
                break;
            case ST_DN_PRE: { /* β, g per v head */
                const struct q35_layer *L = j->L;
                for (int h = 0; h < m->n_v; h++) {
                    s->beta[t * m->n_v + h] = sigmoidf(s->beta[t * m->n_v + h]);
                    s->g[t * m->n_v + h] = softplusf(s->g[t * m->n_v + h] + L->dt_bias[h]) * L->ssm_a[h];
                }
                break;
            }
            case ST_DN_POST: { /* gated RMSNorm per v head */
                for (int h = 0; h < m->n_v; h++) {
                    float *o = s->o + t * m->v_dim + h * S;
                    const float *z = s->z + t * m->v_dim + h * S;
                    ops_rmsnorm(o, o, j->L->ssm_norm, S, c->norm_eps);
                    for (int d = 0; d < S; d++) o[d] *= siluf(z[d]);
                }
                break;
            }
            }
        }
    }
}

static void run_rows(struct q35 *m, struct rows_job *j)
{
    j->m = m;
    atomic_init(&j->next, 0);
    if (j->n <= ROWS_CHUNK)
        rows_worker(j, 0, 1);
    else
        tp_run_dynamic(m->base.pool, rows_worker, j);
}

/* ---------------------------------------------------------------- full attention */

struct attn_job {
    struct q35 *m;
    int layer, n_units;
    const int32_t *pos;
    atomic_int next;
};

static void attn_worker(void *ctx, int ith, int nth)
{
    struct attn_job *j = ctx;
    struct q35 *m = j->m;
    const struct model_config *c = &m->base.cfg;
    float *ws = m->s.attn_ws + (size_t)ith * ops_attn_scratch_floats();
    int64_t qd = (int64_t)c->n_head * c->head_dim;
    (void)nth;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        const struct attn_unit *un = &m->s.units[u];
        struct ops_attn a = {
            .q = m->s.q + (int64_t)un->t0 * qd,
            .q_stride = qd,
            .out = m->s.att + (int64_t)un->t0 * qd,
            .out_stride = qd,
            .pos = j->pos + un->t0,
            .k = kv_layer_k(un->kv, j->layer),
            .v = kv_layer_v(un->kv, j->layer),
            .kv_head_stride = un->kv->head_stride,
            .kv_f32 = c->kv_f32,
            .n_head = c->n_head,
            .n_head_kv = c->n_head_kv,
            .head_dim = c->head_dim,
            .scale = 1.0f / sqrtf((float)c->head_dim),
        };
        ops_attn_run(&a, un->kvh, un->q0, un->q1, ws);
    }
}

static int build_units(struct q35 *m, struct kv_cache *const *seq, int64_t T)
{
    const struct model_config *c = &m->base.cfg;
    int n = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && seq[t1] == seq[t0]) t1++;
        int len = (int)(t1 - t0);
        for (int q1 = len; q1 > 0; q1 -= OPS_ATTN_QB) {
            int q0 = q1 - OPS_ATTN_QB > 0 ? q1 - OPS_ATTN_QB : 0;
            for (int h = 0; h < c->n_head_kv; h++) m->s.units[n++] = (struct attn_unit){seq[t0], (int32_t)t0, h, q0, q1};
        }
        t0 = t1;
    }
    return n;
}

static int full_attn(struct q35 *m, const struct q35_layer *L, const int32_t *pos, struct kv_cache *const *seq,
                     int64_t T, int n_units, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q35_scratch *s = &m->s;
    const int E = c->n_embd, QD = c->n_head * c->head_dim, KVD = c->n_head_kv * c->head_dim;
    struct mm_op qkv[3] = {mdl_op(L->wq, 0, s->xn, E, NULL, T, s->qg, 2 * QD, NULL),
                           mdl_op(L->wk, 0, s->xn, E, NULL, T, s->k, KVD, NULL),
                           mdl_op(L->wv, 0, s->xn, E, NULL, T, s->v, KVD, NULL)};
    if (run(m, qkv, 3, e)) return -1;
    struct rows_job qk = {.st = ST_QK, .L = L, .pos = pos, .seq = seq, .n = T};
    run_rows(m, &qk);
    struct attn_job aj = {.m = m, .layer = L->kv_l, .n_units = n_units, .pos = pos};
    atomic_init(&aj.next, 0);
    tp_run_dynamic(m->base.pool, attn_worker, &aj);
    struct rows_job ag = {.st = ST_ATT_GATE, .n = T};
    run_rows(m, &ag);
    struct mm_op o = mdl_op(L->wo, 0, s->att, QD, NULL, T, s->tmp, E, NULL);
    return run(m, &o, 1, e);
}

/* ---------------------------------------------------------------- Gated DeltaNet */

/* Causal conv1d + SiLU over the tokens of each sequence, in channel blocks; the conv state (the
 * last d_conv-1 inputs, rows of conv_ch) moves on to the end of the micro-batch's tokens. A
 * sequence whose first token is at position 0 starts from zeros (its state is also reset). */
struct conv_job {
    struct q35 *m;
    const struct q35_layer *L;
    atomic_int next;
    int n_items;
};

#define CONV_BLOCK 64

static void conv_worker(void *ctx, int ith, int nth)
{
    struct conv_job *j = ctx;
    struct q35 *m = j->m;
    struct q35_scratch *s = &m->s;
    const int K = m->d_conv, CH = m->conv_ch;
    const int nb = (CH + CONV_BLOCK - 1) / CONV_BLOCK;
    (void)ith, (void)nth;
    for (;;) {
        int it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n_items) break;
        const struct q35_seq *sq = &m->seqs[it / nb];
        int c0 = (it % nb) * CONV_BLOCK, c1 = c0 + CONV_BLOCK < CH ? c0 + CONV_BLOCK : CH;
        float *st = layer_state(m, sq->kv, j->L->rs_l); /* conv state first: [K-1][CH] */
        if (sq->pos0 == 0)
            for (int r = 0; r < K - 1; r++) memset(st + (size_t)r * CH + c0, 0, sizeof(float) * (size_t)(c1 - c0));
        for (int i = 0; i < sq->n; i++) {
            int32_t t = sq->idx[i];
            const float *x = s->qg + (int64_t)t * CH;
            float *y = s->cv + (int64_t)t * CH;
            for (int ch = c0; ch < c1; ch++) {
                const float *w = j->L->conv + (size_t)ch * K;
                float acc = 0.0f;
                for (int r = 0; r < K - 1; r++) acc += st[(size_t)r * CH + ch] * w[r];
                acc += x[ch] * w[K - 1];
                y[ch] = siluf(acc);
                for (int r = 0; r + 1 < K - 1; r++) st[(size_t)r * CH + ch] = st[(size_t)(r + 1) * CH + ch];
                if (K > 1) st[(size_t)(K - 2) * CH + ch] = x[ch];
            }
        }
    }
}

/* q, k of every token L2-normalized per head (llama.cpp's ggml_l2_norm: x / max(|x|, eps)), q
 * then scaled by 1/sqrt(d_state). */
static void qk_l2(struct q35 *m, int64_t T)
{
    const int S = m->d_state;
    const float eps = m->base.cfg.norm_eps, scale = 1.0f / sqrtf((float)S);
    for (int64_t t = 0; t < T; t++) {
        float *row = m->s.cv + t * m->conv_ch;
        for (int h = 0; h < 2 * m->n_group; h++) {
            float *p = row + h * S;
            float ss = dot(p, p, S);
            float r = 1.0f / fmaxf(sqrtf(ss), eps);
            if (h < m->n_group) r *= scale;
            for (int d = 0; d < S; d++) p[d] *= r;
        }
    }
}

struct dn_job {
    struct q35 *m;
    const struct q35_layer *L;
    atomic_int next;
    int n_items;
};

/* The recurrence for one token of head h: M (rows j over v dims, columns i over k dims: M[j][i] =
 * S[i][j]) decays, takes the delta-rule write, then o = Sᵀq. */
static void dn_step(float *M, const float *q, const float *k, const float *v, float beta, float g, float *o,
                    int S)
{
    float eg = expf(g);
    for (int jj = 0; jj < S; jj++) {
        float *row = M + (size_t)jj * S;
        for (int i = 0; i < S; i++) row[i] *= eg;
        float d = (v[jj] - dot(row, k, S)) * beta;
        axpy(row, k, d, S);
        o[jj] = dot(row, q, S);
    }
}

/* The chunked (WY) form over C tokens (idx[0..C)) of head h, the state M in place:
 *   γ_t = Σ_{s<=t} g_s;  A[t][s] = -β_t (k_t·k_s) e^{γ_t-γ_s} (s < t);  T = (I - A)^-1 by forward
 *   substitution;  U = T (β v);  W = T (β e^γ k);  Vn = U - W Sᵀ-rows;
 *   o_t = e^{γ_t} Sᵀq_t + Σ_{s<=t} (q_t·k_s) e^{γ_t-γ_s} Vn_s;
 *   S ← e^{γ_C} S + Σ_t e^{γ_C-γ_t} k_t Vn_tᵀ. */
static void dn_chunk(const struct q35 *m, float *M, const int32_t *idx, int C, int h, float *ws)
{
    const struct q35_scratch *s = &m->s;
    const int S = m->d_state, CH = m->conv_ch, kh = h % m->n_group;
    float *A = ws, *Aq = A + (size_t)C * C, *U = Aq + (size_t)C * C, *W = U + (size_t)C * S,
          *Vn = W + (size_t)C * S, *gc = Vn + (size_t)C * S, *bt = gc + C;
    float eg[Q35_CHUNK], el[Q35_CHUNK]; /* e^{γ_t}, e^{γ_C - γ_t} */
#define QP(t) (s->cv + (int64_t)idx[t] * CH + kh * S)
#define KP(t) (s->cv + (int64_t)idx[t] * CH + m->k_dim + kh * S)
#define VP(t) (s->cv + (int64_t)idx[t] * CH + 2 * m->k_dim + h * S)
    float acc = 0.0f;
    for (int t = 0; t < C; t++) {
        acc += s->g[(int64_t)idx[t] * m->n_v + h];
        gc[t] = acc;
        bt[t] = s->beta[(int64_t)idx[t] * m->n_v + h];
    }
    for (int t = 0; t < C; t++) eg[t] = expf(gc[t]), el[t] = expf(gc[C - 1] - gc[t]);
    for (int t = 0; t < C; t++) {
        const float *kt = KP(t), *qt = QP(t);
        for (int u = 0; u < t; u++) {
            float dec = expf(gc[t] - gc[u]);
            A[(size_t)t * C + u] = -bt[t] * dot(kt, KP(u), S) * dec;
            Aq[(size_t)t * C + u] = dot(qt, KP(u), S) * dec;
        }
        Aq[(size_t)t * C + t] = dot(qt, kt, S);
    }
    /* T = I + A + A² + …: row t from the rows above it (A's old row t on the left) */
    for (int t = 1; t < C; t++) {
        float row[Q35_CHUNK];
        for (int u = 0; u < t; u++) row[u] = A[(size_t)t * C + u];
        for (int u = 0; u < t; u++) {
            float a = row[u];
            for (int mm = u + 1; mm < t; mm++) a += row[mm] * A[(size_t)mm * C + u];
            A[(size_t)t * C + u] = a;
        }
    }
    for (int t = 0; t < C; t++) {
        float *ut = U + (size_t)t * S, *wt = W + (size_t)t * S;
        for (int d = 0; d < S; d++) ut[d] = wt[d] = 0.0f;
        for (int u = 0; u <= t; u++) {
            float a = u == t ? 1.0f : A[(size_t)t * C + u];
            float bu = a * bt[u];
            axpy(ut, VP(u), bu, S);
            axpy(wt, KP(u), bu * eg[u], S);
        }
    }
    /* Vn and the inter-chunk part of o, from the state before the chunk */
    for (int t = 0; t < C; t++) {
        float *vn = Vn + (size_t)t * S, *o = s->o + (int64_t)idx[t] * m->v_dim + h * S;
        const float *wt = W + (size_t)t * S, *qt = QP(t);
        for (int jj = 0; jj < S; jj++) {
            const float *row = M + (size_t)jj * S;
            vn[jj] = U[(size_t)t * S + jj] - dot(wt, row, S);
            o[jj] = eg[t] * dot(qt, row, S);
        }
    }
    for (int t = 0; t < C; t++) {
        float *o = s->o + (int64_t)idx[t] * m->v_dim + h * S;
        for (int u = 0; u <= t; u++) axpy(o, Vn + (size_t)u * S, Aq[(size_t)t * C + u], S);
    }
    float egl = eg[C - 1];
    for (int jj = 0; jj < S; jj++) {
        float *row = M + (size_t)jj * S;
        for (int i = 0; i < S; i++) row[i] *= egl;
        for (int t = 0; t < C; t++) axpy(row, KP(t), el[t] * Vn[(size_t)t * S + jj], S);
    }
#undef QP
#undef KP
#undef VP
}

static void dn_worker(void *ctx, int ith, int nth)
{
    struct dn_job *j = ctx;
    struct q35 *m = j->m;
    struct q35_scratch *s = &m->s;
    const int S = m->d_state, CH = m->conv_ch;
    float *ws = s->dn_ws + (size_t)ith * m->dn_ws_floats;
    (void)nth;
    for (;;) {
        int it = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (it >= j->n_items) break;
        const struct q35_seq *sq = &m->seqs[it / m->n_v];
        int h = it % m->n_v, kh = h % m->n_group;
        float *M = layer_state(m, sq->kv, j->L->rs_l) + m->conv_floats + (size_t)h * S * S;
        if (sq->pos0 == 0) memset(M, 0, sizeof(float) * (size_t)S * S);
        for (int i = 0; i < sq->n;) {
            int32_t p = sq->pos0 + i;
            if (p % Q35_CHUNK == 0 && i + Q35_CHUNK <= sq->n) {
                dn_chunk(m, M, sq->idx + i, Q35_CHUNK, h, ws);
                i += Q35_CHUNK;
                continue;
            }
            int32_t t = sq->idx[i];
            const float *row = s->cv + (int64_t)t * CH;
            dn_step(M, row + kh * S, row + m->k_dim + kh * S, row + 2 * m->k_dim + h * S,
                    s->beta[(int64_t)t * m->n_v + h], s->g[(int64_t)t * m->n_v + h],
                    s->o + (int64_t)t * m->v_dim + h * S, S);
            i++;
        }
    }
}

static int delta_net(struct q35 *m, const struct q35_layer *L, int64_t T, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q35_scratch *s = &m->s;
    const int E = c->n_embd;
    struct mm_op in[4] = {mdl_op(L->wqkv, 0, s->xn, E, NULL, T, s->qg, m->conv_ch, NULL),
                          mdl_op(L->wz, 0, s->xn, E, NULL, T, s->z, m->v_dim, NULL),
                          mdl_op(L->wbeta, 0, s->xn, E, NULL, T, s->beta, m->n_v, NULL),
                          mdl_op(L->walpha, 0, s->xn, E, NULL, T, s->g, m->n_v, NULL)};
    if (run(m, in, 4, e)) return -1;
    struct rows_job pre = {.st = ST_DN_PRE, .L = L, .n = T};
    run_rows(m, &pre);
    struct conv_job cj = {.m = m, .L = L, .n_items = m->n_seqs * ((m->conv_ch + CONV_BLOCK - 1) / CONV_BLOCK)};
    atomic_init(&cj.next, 0);
    tp_run_dynamic(m->base.pool, conv_worker, &cj);
    qk_l2(m, T);
    struct dn_job dj = {.m = m, .L = L, .n_items = m->n_seqs * m->n_v};
    atomic_init(&dj.next, 0);
    tp_run_dynamic(m->base.pool, dn_worker, &dj);
    struct rows_job post = {.st = ST_DN_POST, .L = L, .n = T};
    run_rows(m, &post);
    struct mm_op o = mdl_op(L->wout, 0, s->o, m->v_dim, NULL, T, s->tmp, E, NULL);
    return run(m, &o, 1, e);
}

/* ---------------------------------------------------------------- FFN */

static void embed(struct q35 *m, int32_t tok, float *out)
{
    mdl_embed_row(m->tok_embd, tok, out);
}

/* Routed experts (softmax, top-k renormalized: llama.cpp's build_moe_ffn with norm_w) plus the
 * shared expert scaled by sigmoid(sh_gate·n), into s->tmp. */
static int moe_ffn(struct q35 *m, const struct q35_layer *L, int64_t T, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q35_scratch *s = &m->s;
    const int E = c->n_embd, NE = c->n_expert, K = c->n_expert_used, FF = c->n_ff_exp;
    struct mm_op r = mdl_op(L->router, 0, s->xn, E, NULL, T, s->router, NE, NULL);
    if (run(m, &r, 1, e)) return -1;
    for (int64_t t = 0; t < T; t++) ops_softmax(s->router + t * NE, NE);
    mdl_route_topk(s->router, T, NE, K, 6.103515625e-5f, Q35_UBATCH, s->sel, s->selw, s->ecnt, s->etok, s->etok_t);
    int n = 0;
    for (int x = 0; x < NE; x++) {
        if (!s->ecnt[x]) continue;
        const int32_t *slot = s->etok + (int64_t)x * Q35_UBATCH, *tok = s->etok_t + (int64_t)x * Q35_UBATCH;
        s->ops[n++] = mdl_op(L->gate_exps, x, s->xn, E, tok, s->ecnt[x], s->gate, FF, slot);
        s->ops[n++] = mdl_op(L->up_exps, x, s->xn, E, tok, s->ecnt[x], s->up, FF, slot);
    }
    if (run(m, s->ops, n, e)) return -1;
    struct rows_job sw = {.st = ST_SWIGLU, .n = T * K, .width = FF};
    run_rows(m, &sw);
    n = 0;
    for (int x = 0; x < NE; x++) {
        if (!s->ecnt[x]) continue;
        const int32_t *slot = s->etok + (int64_t)x * Q35_UBATCH;
        s->ops[n++] = mdl_op(L->down_exps, x, s->gate, FF, slot, s->ecnt[x], s->ye, E, slot);
    }
    if (run(m, s->ops, n, e)) return -1;
    for (int64_t t = 0; t < T; t++) {
        float *dst = s->tmp + t * E;
        for (int d = 0; d < E; d++) dst[d] = 0.0f;
        for (int k = 0; k < K; k++) axpy(dst, s->ye + (t * K + k) * E, s->selw[t * K + k], E);
    }
    if (!L->up_sh) return 0;
    const int FS = m->n_ff_sh;
    struct mm_op gu[2] = {mdl_op(L->gate_sh, 0, s->xn, E, NULL, T, s->gate, FS, NULL),
                          mdl_op(L->up_sh, 0, s->xn, E, NULL, T, s->up, FS, NULL)};
    if (run(m, gu, 2, e)) return -1;
    sw = (struct rows_job){.st = ST_SWIGLU, .n = T, .width = FS};
    run_rows(m, &sw);
    struct mm_op d = mdl_op(L->down_sh, 0, s->gate, FS, NULL, T, s->ye, E, NULL);
    if (run(m, &d, 1, e)) return -1;
    for (int64_t t = 0; t < T; t++) {
        float gsh = sigmoidf(dot(L->sh_gate, s->xn + t * E, E));
        axpy(s->tmp + t * E, s->ye + t * E, gsh, E);
    }
    return 0;
}

static int dense_ffn(struct q35 *m, const struct q35_layer *L, int64_t T, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q35_scratch *s = &m->s;
    const int E = c->n_embd, FF = c->n_ff;
    struct mm_op gu[2] = {mdl_op(L->gate, 0, s->xn, E, NULL, T, s->gate, FF, NULL),
                          mdl_op(L->up, 0, s->xn, E, NULL, T, s->up, FF, NULL)};
    if (run(m, gu, 2, e)) return -1;
    struct rows_job sw = {.st = ST_SWIGLU, .n = T, .width = FF};
    run_rows(m, &sw);
    struct mm_op d = mdl_op(L->down, 0, s->gate, FF, NULL, T, s->tmp, E, NULL);
    return run(m, &d, 1, e);
}

/* ---------------------------------------------------------------- forward */

/* Groups the micro-batch's tokens by sequence (in order; model_forward checked that each
 * sequence's positions follow on). */
static int group_seqs(struct q35 *m, const int32_t *pos, struct kv_cache *const *seq, int64_t T, struct err *e)
{
    m->n_seqs = 0;
    int32_t cnt[Q35_MAX_SEQ] = {0}, which[Q35_UBATCH];
    for (int64_t t = 0; t < T; t++) {
        int q = 0;
        while (q < m->n_seqs && m->seqs[q].kv != seq[t]) q++;
        if (q == m->n_seqs) {
            if (q == Q35_MAX_SEQ) return err_set(e, ERR_RANGE, "forward: more than %d sequences", Q35_MAX_SEQ);
            m->seqs[m->n_seqs++] = (struct q35_seq){.kv = seq[t], .pos0 = pos[t]};
        }
        which[t] = q;
        cnt[q]++;
    }
    int32_t off = 0;
    for (int q = 0; q < m->n_seqs; q++) {
        m->seqs[q].idx = m->seq_idx + off;
        off += cnt[q];
    }
    for (int64_t t = 0; t < T; t++) {
        struct q35_seq *sq = &m->seqs[which[t]];
        sq->idx[sq->n++] = (int32_t)t;
    }
    return 0;
}

static int forward_ubatch(struct q35 *m, const int32_t *tok, const int32_t *pos, struct kv_cache *const *seq,
                          const bool *want, int64_t T, float *out, float *hidden, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q35_scratch *s = &m->s;
    const int E = c->n_embd;
    if (group_seqs(m, pos, seq, T, e)) return -1;
    for (int64_t t = 0; t < T; t++) embed(m, tok[t], s->x + t * E);
    int n_units = build_units(m, seq, T);
    struct rows_job rn = {.st = ST_RESID_NORM, .norm = m->layers[0].attn_norm, .n = T};
    run_rows(m, &rn);
    for (int l = 0; l < c->n_layer; l++) {
        const struct q35_layer *L = &m->layers[l];
        if (L->recr ? delta_net(m, L, T, e) : full_attn(m, L, pos, seq, T, n_units, e)) return -1;
        rn = (struct rows_job){.st = ST_RESID_NORM, .norm = L->post_norm, .add = true, .n = T};
        run_rows(m, &rn);
        if (m->moe ? moe_ffn(m, L, T, e) : dense_ffn(m, L, T, e)) return -1;
        rn = (struct rows_job){.st = ST_RESID_NORM, .add = true, .n = T,
                               .norm = l + 1 < c->n_layer ? m->layers[l + 1].attn_norm : NULL};
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
    }
    return 0;
}

static int q35_forward(struct model *bm, const struct batch *b, float *logits, struct err *e)
{
    struct q35 *m = (struct q35 *)bm;
    bool want[Q35_UBATCH];
    int64_t out_row = 0;
    for (int64_t i0 = 0; i0 < b->n; i0 += Q35_UBATCH) {
        int64_t T = b->n - i0 < Q35_UBATCH ? b->n - i0 : Q35_UBATCH;
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
