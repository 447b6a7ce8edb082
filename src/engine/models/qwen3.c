/* qwen3 — the Qwen3 dense (`qwen3`) and Qwen3-MoE (`qwen3moe`) forward pass.
 *
 * Per layer (HF modeling_qwen3.py):
 *   h  = x + Wo · attn(rope(qnorm(Wq·n1)), rope(knorm(Wk·n1)), Wv·n1),  n1 = rmsnorm(x)·attn_norm
 *   x' = h + ffn(rmsnorm(h)·ffn_norm)
 *   dense ffn = Wdown · (silu(Wgate·n) * Wup·n)
 *   moe   ffn = Σ_{e in top-k(softmax(Wr·n))} w_e · expert_e(n), w renormalized over the top-k
 * logits = Wout · rmsnorm(x_L)·output_norm  (Wout = token_embd when tied).
 *
 * A batch is processed in micro-batches of at most Q3_UBATCH tokens. Every weight matrix is
 * applied to all tokens of the micro-batch at once (matrix-matrix); attention runs per run of
 * consecutive tokens of one sequence, over that sequence's cache. Activations live in one scratch
 * allocation carved into named buffers (see struct q3_scratch). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/kv_cache.h"
#include "engine/kernels/matmul.h"
#include "engine/model_impl.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"
#include "engine/models/common.h"

#define Q3_UBATCH 512

struct q3_layer {
    const float *attn_norm, *q_norm, *k_norm, *ffn_norm; /* (n_embd) (hd) (hd) (n_embd) */
    const struct gguf_tensor *wq;        /* (n_head*hd, n_embd)     ne = [n_embd, n_head*hd] */
    const struct gguf_tensor *wk, *wv;   /* (n_head_kv*hd, n_embd) */
    const struct gguf_tensor *wo;        /* (n_embd, n_head*hd) */
    const struct gguf_tensor *gate, *up; /* dense: (n_ff, n_embd) */
    const struct gguf_tensor *down;      /* dense: (n_embd, n_ff) */
    const struct gguf_tensor *router;    /* moe: (n_expert, n_embd) */
    const struct gguf_tensor *gate_exps, *up_exps; /* moe: (n_expert, n_ff_exp, n_embd) */
    const struct gguf_tensor *down_exps;           /* moe: (n_expert, n_embd, n_ff_exp) */
};

/* Scratch for one micro-batch of T <= Q3_UBATCH tokens (row-major, one row per token). */
struct q3_scratch {
    float *x;      /* (T, n_embd) residual stream */
    float *xn;     /* (T, n_embd) normed input of the current block */
    float *tmp;    /* (T, n_embd) block output before the residual add */
    float *q;      /* (T, n_head*hd) */
    float *k, *v;  /* (T, n_head_kv*hd) */
    float *att;    /* (T, n_head*hd) attention output */
    float *gate;   /* (T, ff) dense; (T*n_expert_used, n_ff_exp) moe, row t*k+slot */
    float *up;     /* same shape as gate */
    float *ye;     /* (T*n_expert_used, n_embd) moe: expert outputs, row t*k+slot */
    float *router; /* (T, n_expert) */
    int32_t *sel;  /* (T, n_expert_used) chosen experts */
    float *selw;   /* (T, n_expert_used) their renormalized weights */
    int32_t *etok; /* (n_expert, T) rows routed to each expert, as token*k + slot */
    int32_t *etok_t; /* (n_expert, T) the same rows' token index */
    int32_t *ecnt; /* (n_expert) */
    struct mm_op *ops; /* (3 * n_expert) matmul descriptors */
    float *attn_ws; /* (n_threads, ops_attn_scratch_floats) */
    struct attn_unit *units; /* (T * n_head_kv) */
};

struct attn_unit {
    struct kv_cache *kv;
    int32_t t0;  /* first token of the run in the micro-batch */
    int32_t kvh, q0, q1; /* kv head and query range relative to t0 */
    int32_t nc;          /* split-K chunks run as separate work items (0: one item) */
    atomic_int left;     /* chunks not done yet in this layer; the last one merges */
    size_t st;           /* offset of its chunk states in q3.attn_st */
};

/* A work item of the attention fork-join: a whole unit (chunk -1) or one split-K chunk of it. */
struct attn_item {
    int32_t unit, chunk;
};

struct q3 {
    struct model base; /* first: struct model * <-> struct q3 * */
    bool moe;
    struct q3_layer *layers;
    const struct gguf_tensor *tok_embd; /* (n_vocab, n_embd) */
    const struct gguf_tensor *output;   /* (n_vocab, n_embd); == tok_embd when tied */
    const float *output_norm;
    float *inv_freq;                    /* (hd/2) */
    struct mm_scratch *mm;
    void *arena;
    size_t arena_bytes;
    struct q3_scratch s;
    /* split-K decode at depth (ops.h): work items and the chunks' states, grown on demand */
    struct attn_item *items;
    size_t items_cap;
    float *attn_st;
    size_t attn_st_cap;
};

/* Next 64-byte aligned piece of the arena (NULL while only sizing, base == NULL). */

/* Lays out (or, with base == NULL, sizes) the scratch. */
static size_t scratch_layout(struct q3 *m, char *base)
{
    const struct model_config *c = &m->base.cfg;
    size_t T = Q3_UBATCH, qd = (size_t)c->n_head * c->head_dim, kvd = (size_t)c->n_head_kv * c->head_dim;
    size_t ff = (size_t)c->n_ff;
    if ((size_t)c->n_ff_exp * (size_t)c->n_expert_used > ff) ff = (size_t)c->n_ff_exp * (size_t)c->n_expert_used;
    size_t ne = (size_t)(c->n_expert > 0 ? c->n_expert : 1), nk = (size_t)(c->n_expert_used > 0 ? c->n_expert_used : 1);
    int nth = tp_size(m->base.pool);
    size_t off = 0;
    struct q3_scratch s;
    s.x = mdl_carve(base, &off, T * c->n_embd * sizeof(float));
    s.xn = mdl_carve(base, &off, T * c->n_embd * sizeof(float));
    s.tmp = mdl_carve(base, &off, T * c->n_embd * sizeof(float));
    s.q = mdl_carve(base, &off, T * qd * sizeof(float));
    s.k = mdl_carve(base, &off, T * kvd * sizeof(float));
    s.v = mdl_carve(base, &off, T * kvd * sizeof(float));
    s.att = mdl_carve(base, &off, T * qd * sizeof(float));
    s.gate = mdl_carve(base, &off, T * ff * sizeof(float));
    s.up = mdl_carve(base, &off, T * ff * sizeof(float));
    s.ye = mdl_carve(base, &off, c->n_expert ? T * nk * c->n_embd * sizeof(float) : 0);
    s.router = mdl_carve(base, &off, T * ne * sizeof(float));
    s.sel = mdl_carve(base, &off, T * nk * sizeof(int32_t));
    s.selw = mdl_carve(base, &off, T * nk * sizeof(float));
    s.etok = mdl_carve(base, &off, ne * T * sizeof(int32_t));
    s.etok_t = mdl_carve(base, &off, ne * T * sizeof(int32_t));
    s.ecnt = mdl_carve(base, &off, ne * sizeof(int32_t));
    s.ops = mdl_carve(base, &off, (3 * ne + 3) * sizeof(struct mm_op));
    s.attn_ws = mdl_carve(base, &off, (size_t)nth * ops_attn_scratch_floats() * sizeof(float));
    s.units = mdl_carve(base, &off, T * (size_t)c->n_head_kv * sizeof(struct attn_unit));
    if (base) m->s = s;
    return off;
}


/* ---------------------------------------------------------------- load */

static void q3_free(struct model *bm)
{
    struct q3 *m = (struct q3 *)bm;
    if (!m) return;
    mm_scratch_free(m->mm);
    if (m->base.pool) tp_free(m->base.pool);
    free(m->arena);
    free(m->layers);
    free(m->inv_freq);
    free(m->items);
    free(m->attn_st);
    gguf_close(&m->base.g);
    free(m);
}

static int q3_forward(struct model *bm, const struct batch *b, float *logits, struct err *e);
static const struct model_ops q3_ops = {.forward = q3_forward, .free = q3_free};



static void advise_experts(const struct q3 *m, bool borrow)
{
    int n = 3 * m->base.cfg.n_layer;
    const struct gguf_tensor **ts = malloc(sizeof *ts * (size_t)n);
    if (!ts) return; /* advice only: the mapping works without it */
    for (int l = 0; l < m->base.cfg.n_layer; l++) {
        ts[3 * l] = m->layers[l].gate_exps;
        ts[3 * l + 1] = m->layers[l].up_exps;
        ts[3 * l + 2] = m->layers[l].down_exps;
    }
    mdl_advise_experts(ts, n, borrow);
    free(ts);
}

struct model *qwen3_load(struct gguf *g, const struct model_opts *opts, struct err *e)
{
    struct q3 *m = calloc(1, sizeof *m);
    if (!m) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    m->base.g = *g; /* owned from here on (q3_free closes it) */
    m->base.ops = &q3_ops;
    if (opts) m->base.opts = *opts;
    struct model_config *c = &m->base.cfg;
    c->kv_f32 = m->base.opts.kv_f32;
    const struct gguf *G = &m->base.g;
    int vlen;
    if (mdl_attn_hparams(G, c, &vlen, e)) goto fail_keep_g;
    m->moe = !strcmp(c->arch, "qwen3moe");
    if (vlen != c->head_dim) {
        err_set(e, ERR_UNSUPPORTED, "value_length %d != key_length %d", vlen, c->head_dim);
        goto fail_keep_g;
    }
    if (mdl_ffn_hparams(G, c, m->moe, e) || mdl_embd_output(G, c, &m->tok_embd, &m->output, &m->output_norm, e))
        goto fail_keep_g;

    m->layers = calloc((size_t)c->n_layer, sizeof *m->layers);
    m->inv_freq = malloc(sizeof(float) * (size_t)(c->head_dim / 2));
    if (!m->layers || !m->inv_freq) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail_keep_g;
    }
    ops_rope_inv_freq(m->inv_freq, c->head_dim, c->rope_base);
    int64_t E = c->n_embd, QD = (int64_t)c->n_head * c->head_dim, KVD = (int64_t)c->n_head_kv * c->head_dim;
    for (int l = 0; l < c->n_layer; l++) {
        struct q3_layer *L = &m->layers[l];
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
#define NORM(field, s, len) \
    if (!(L->field = model_tensor_f32(G, NAME(s), (len), e))) goto fail_keep_g
        NORM(attn_norm, "attn_norm", E);
        NORM(q_norm, "attn_q_norm", c->head_dim);
        NORM(k_norm, "attn_k_norm", c->head_dim);
        NORM(ffn_norm, "ffn_norm", E);
        T2(wq, "attn_q", E, QD);
        T2(wk, "attn_k", E, KVD);
        T2(wv, "attn_v", E, KVD);
        T2(wo, "attn_output", QD, E);
        if (m->moe) {
            T2(router, "ffn_gate_inp", E, c->n_expert);
            T3(gate_exps, "ffn_gate_exps", E, c->n_ff_exp, c->n_expert);
            T3(up_exps, "ffn_up_exps", E, c->n_ff_exp, c->n_expert);
            T3(down_exps, "ffn_down_exps", c->n_ff_exp, E, c->n_expert);
        } else {
            T2(gate, "ffn_gate", E, c->n_ff);
            T2(up, "ffn_up", E, c->n_ff);
            T2(down, "ffn_down", c->n_ff, E);
        }
#undef NAME
#undef T2
#undef T3
#undef NORM
    }

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
    if (m->moe) advise_experts(m, m->base.opts.experts_borrow);
    log_info("model: %s, %d layers, n_embd %d, %d heads (%d kv) x %d, ff %d, vocab %d%s, "
             "%d experts (%d used, ff %d), rope base %g, %d threads, scratch %.1f MiB",
             c->arch, c->n_layer, c->n_embd, c->n_head, c->n_head_kv, c->head_dim, c->n_ff, c->n_vocab,
             m->output == m->tok_embd ? " (tied output)" : "", c->n_expert, c->n_expert_used,
             c->n_ff_exp, (double)c->rope_base, nth, (double)m->arena_bytes / (1 << 20));
    return &m->base;

fail_keep_g:
    /* the caller still owns and closes g on failure: detach it, then free what was built */
    memset(&m->base.g, 0, sizeof m->base.g);
    m->base.g.fd = -1;
    q3_free(&m->base);
    return NULL;
}

/* ---------------------------------------------------------------- forward */

/* Descriptor of y (n_tok rows, stride ys) = W · x (n_tok rows, stride xs) with W's expert slice
 * (0 for a 2-D tensor); x_idx/y_idx gather/scatter token rows (NULL = contiguous). */

static int run(struct q3 *m, const struct mm_op *ops, int n, struct err *e)
{
    if (mm_run_ops(m->base.pool, ops, n, m->mm, e)) return err_wrap(e, "matmul");
    return 0;
}

struct attn_job {
    struct q3 *m;
    int layer, n_units; /* work items (m->items) */
    const int32_t *pos;
    atomic_int next;
};

static void attn_worker(void *ctx, int ith, int nth)
{
    struct attn_job *j = ctx;
    struct q3 *m = j->m;
    const struct model_config *c = &m->base.cfg;
    float *ws = m->s.attn_ws + (size_t)ith * ops_attn_scratch_floats();
    int64_t qd = (int64_t)c->n_head * c->head_dim;
    for (;;) {
        int u = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed);
        if (u >= j->n_units) break;
        const struct attn_item *it = &m->items[u];
        struct attn_unit *un = &m->s.units[it->unit];
        struct ops_attn a = {
            .q = m->s.q + (int64_t)un->t0 * qd,
            .q_stride = qd,
            .out = m->s.att + (int64_t)un->t0 * qd,
            .out_stride = qd,
            .pos = j->pos + un->t0,
            .n_q = 0,
            .k = kv_layer_k(un->kv, j->layer),
            .v = kv_layer_v(un->kv, j->layer),
            .kv_head_stride = un->kv->head_stride,
            .kv_f32 = c->kv_f32,
            .n_head = c->n_head,
            .n_head_kv = c->n_head_kv,
            .head_dim = c->head_dim,
            .scale = 1.0f / sqrtf((float)c->head_dim),
        };
        if (it->chunk < 0) {
            ops_attn_run(&a, un->kvh, un->q0, un->q1, ws);
            continue;
        }
        size_t sf = ops_attn_state_floats(&a, un->q0, un->q1);
        ops_attn_run_chunk(&a, un->kvh, un->q0, un->q1, it->chunk, m->attn_st + un->st + (size_t)it->chunk * sf, ws);
        /* the thread that finishes a unit's last chunk merges them in chunk order */
        if (atomic_fetch_sub_explicit(&un->left, 1, memory_order_acq_rel) == 1)
            ops_attn_merge(&a, un->kvh, un->q0, un->q1, un->nc, m->attn_st + un->st, sf);
    }
    (void)nth;
}

/* Splits the micro-batch into runs of consecutive tokens of one sequence, and each run into
 * (kv head, query block) units. Units are ordered longest-first (later query blocks see more
 * keys) so the dynamic queue ends balanced. */
static int grow_buf(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t n = need + need / 2 + 16;
    void *q = realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Work items for the units: a decode-sized unit (<= 4 query tokens) whose keys span two or more
 * split-K chunks runs each chunk as its own item, so one long sequence keeps every thread busy
 * (the arithmetic is the same either way: ops.h). Returns the item count, or -1 (out of memory). */
static int build_items(struct q3 *m, int n_units, const int32_t *pos)
{
    const struct model_config *c = &m->base.cfg;
    size_t n_items = 0, st = 0;
    for (int u = 0; u < n_units; u++) {
        struct attn_unit *un = &m->s.units[u];
        int nc = un->q1 - un->q0 <= 4 ? pos[un->t0 + un->q1 - 1] / OPS_ATTN_KC + 1 : 1;
        un->nc = nc >= 2 ? nc : 0;
        un->st = st;
        if (un->nc)
            st += (size_t)nc * (size_t)(un->q1 - un->q0) * (size_t)(c->n_head / c->n_head_kv) * (size_t)(c->head_dim + 2);
        n_items += un->nc ? (size_t)nc : 1;
    }
    if (n_items > INT32_MAX || grow_buf((void **)&m->items, &m->items_cap, n_items, sizeof *m->items) ||
        grow_buf((void **)&m->attn_st, &m->attn_st_cap, st, sizeof *m->attn_st))
        return -1;
    int n = 0;
    for (int u = 0; u < n_units; u++) {
        const struct attn_unit *un = &m->s.units[u];
        if (!un->nc) {
            m->items[n++] = (struct attn_item){u, -1};
            continue;
        }
        for (int k = 0; k < un->nc; k++)
            m->items[n++] = (struct attn_item){u, k};
    }
    return n;
}

static int build_units(struct q3 *m, struct kv_cache *const *seq, int64_t T)
{
    const struct model_config *c = &m->base.cfg;
    int n = 0;
    for (int64_t t0 = 0; t0 < T;) {
        int64_t t1 = t0 + 1;
        while (t1 < T && seq[t1] == seq[t0]) t1++;
        int len = (int)(t1 - t0);
        for (int q1 = len; q1 > 0; q1 -= OPS_ATTN_QB) {
            int q0 = q1 - OPS_ATTN_QB > 0 ? q1 - OPS_ATTN_QB : 0;
            for (int h = 0; h < c->n_head_kv; h++)
                m->s.units[n++] = (struct attn_unit){.kv = seq[t0], .t0 = (int32_t)t0, .kvh = h, .q0 = q0, .q1 = q1};
        }
        t0 = t1;
    }
    return n;
}

/* Per-token work between matmuls, split over the pool by token rows (inline when there are too
 * few rows to pay for a fork-join). */
enum stage { ST_RESID_NORM, ST_QK, ST_SWIGLU };
struct rows_job {
    struct q3 *m;
    enum stage st;
    const float *norm; /* ST_RESID_NORM: x += tmp (if add), then xn = rmsnorm(x)·norm (if norm) */
    bool add;
    int layer;         /* ST_QK */
    const float *q_norm, *k_norm;
    const int32_t *pos;
    struct kv_cache *const *seq;
    int64_t n;         /* rows */
    int64_t width;     /* ST_SWIGLU row width */
    atomic_long next;  /* next chunk of rows (tp_run_dynamic) */
};

#define ROWS_CHUNK 8

static void rows_worker(void *ctx, int ith, int nth)
{
    struct rows_job *j = ctx;
    struct q3 *m = j->m;
    const struct model_config *c = &m->base.cfg;
    struct q3_scratch *s = &m->s;
    const int E = c->n_embd, HD = c->head_dim, QD = c->n_head * HD, KVD = c->n_head_kv * HD;
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
            case ST_QK: {
                float *q = s->q + t * QD, *k = s->k + t * KVD;
                for (int h = 0; h < c->n_head; h++) ops_rmsnorm(q + h * HD, q + h * HD, j->q_norm, HD, c->norm_eps);
                for (int h = 0; h < c->n_head_kv; h++) ops_rmsnorm(k + h * HD, k + h * HD, j->k_norm, HD, c->norm_eps);
                float cs[OPS_ATTN_MAX_HEAD_DIM / 2], sn[OPS_ATTN_MAX_HEAD_DIM / 2];
                ops_rope_cache(cs, sn, HD, j->pos[t], m->inv_freq);
                ops_rope_apply(q, c->n_head, HD, cs, sn);
                ops_rope_apply(k, c->n_head_kv, HD, cs, sn);
                kv_store(j->seq[t], j->layer, j->pos[t], k, s->v + t * KVD);
                break;
            }
            case ST_SWIGLU:
                ops_swiglu(s->gate + t * j->width, s->gate + t * j->width, s->up + t * j->width, j->width);
                break;
            }
        }
    }
}

static void run_rows(struct q3 *m, struct rows_job *j)
{
    j->m = m;
    atomic_init(&j->next, 0);
    /* rows come from a counter in chunks (any thread can do any row; a row's arithmetic does not
     * depend on which): a descheduled worker holds nobody up */
    if (j->n <= ROWS_CHUNK)
        rows_worker(j, 0, 1);
    else
        tp_run_dynamic(m->base.pool, rows_worker, j);
}

static void embed(struct q3 *m, int32_t tok, float *out)
{
    mdl_embed_row(m->tok_embd, tok, out);
}

/* MoE FFN of T normed rows (s->xn) into s->tmp: route, then every active expert's gate+up in
 * one fork-join (rows gathered by index), SwiGLU, every expert's down in a second one, and the
 * weighted sum of each token's k expert outputs. */
static int moe_ffn(struct q3 *m, const struct q3_layer *L, int64_t T, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q3_scratch *s = &m->s;
    const int E = c->n_embd, NE = c->n_expert, K = c->n_expert_used, FF = c->n_ff_exp;
    struct mm_op r = mdl_op(L->router, 0, s->xn, E, NULL, T, s->router, NE, NULL);
    if (run(m, &r, 1, e)) return -1;
    for (int64_t t = 0; t < T; t++) ops_softmax(s->router + t * NE, NE);
    /* renormalised over the chosen k: Qwen3-MoE's norm_topk_prob */
    mdl_route_topk(s->router, T, NE, K, 0.0f, Q3_UBATCH, s->sel, s->selw, s->ecnt, s->etok, s->etok_t);
    int n = 0;
    for (int x = 0; x < NE; x++) {
        if (!s->ecnt[x]) continue;
        const int32_t *slot = s->etok + (int64_t)x * Q3_UBATCH, *tok = s->etok_t + (int64_t)x * Q3_UBATCH;
        s->ops[n++] = mdl_op(L->gate_exps, x, s->xn, E, tok, s->ecnt[x], s->gate, FF, slot);
        s->ops[n++] = mdl_op(L->up_exps, x, s->xn, E, tok, s->ecnt[x], s->up, FF, slot);
    }
    if (run(m, s->ops, n, e)) return -1;
    struct rows_job sw = {.st = ST_SWIGLU, .n = T * K, .width = FF};
    run_rows(m, &sw); /* rows of unused (token, slot) pairs do not exist: every slot is routed */
    n = 0;
    for (int x = 0; x < NE; x++) {
        if (!s->ecnt[x]) continue;
        const int32_t *slot = s->etok + (int64_t)x * Q3_UBATCH;
        s->ops[n++] = mdl_op(L->down_exps, x, s->gate, FF, slot, s->ecnt[x], s->ye, E, slot);
    }
    if (run(m, s->ops, n, e)) return -1;
    for (int64_t t = 0; t < T; t++) {
        float *dst = s->tmp + t * E;
        for (int d = 0; d < E; d++) dst[d] = 0.0f;
        for (int k = 0; k < K; k++) {
            const float *src = s->ye + (t * K + k) * E;
            float w = s->selw[t * K + k];
            for (int d = 0; d < E; d++) dst[d] += w * src[d];
        }
    }
    return 0;
}

/* One micro-batch: tokens [0, T) of the arrays; logits rows for wanted tokens go to out. */
static int forward_ubatch(struct q3 *m, const int32_t *tok, const int32_t *pos, struct kv_cache *const *seq,
                          const bool *want, int64_t T, float *out, float *hidden, struct err *e)
{
    const struct model_config *c = &m->base.cfg;
    struct q3_scratch *s = &m->s;
    const int E = c->n_embd, HD = c->head_dim, QD = c->n_head * HD, KVD = c->n_head_kv * HD, FF = c->n_ff;
    for (int64_t t = 0; t < T; t++) embed(m, tok[t], s->x + t * E);
    int n_units = build_units(m, seq, T);
    int n_items = build_items(m, n_units, pos);
    if (n_items < 0) return err_set(e, ERR_NOMEM, "attention: out of memory for split-K states");
    struct rows_job rn = {.st = ST_RESID_NORM, .norm = m->layers[0].attn_norm, .add = false, .n = T};
    run_rows(m, &rn);

    for (int l = 0; l < c->n_layer; l++) {
        const struct q3_layer *L = &m->layers[l];
        /* here xn = rmsnorm(x)·attn_norm */
        struct mm_op qkv[3] = {mdl_op(L->wq, 0, s->xn, E, NULL, T, s->q, QD, NULL),
                               mdl_op(L->wk, 0, s->xn, E, NULL, T, s->k, KVD, NULL),
                               mdl_op(L->wv, 0, s->xn, E, NULL, T, s->v, KVD, NULL)};
        if (run(m, qkv, 3, e)) return -1;
        struct rows_job qk = {.st = ST_QK, .layer = l, .q_norm = L->q_norm, .k_norm = L->k_norm,
                              .pos = pos, .seq = seq, .n = T};
        run_rows(m, &qk);
        for (int u = 0; u < n_units; u++) atomic_init(&s->units[u].left, s->units[u].nc);
        struct attn_job aj = {.m = m, .layer = l, .n_units = n_items, .pos = pos};
        atomic_init(&aj.next, 0);
        /* units come from a counter: a descheduled worker holds nobody up */
        tp_run_dynamic(m->base.pool, attn_worker, &aj);
        struct mm_op o = mdl_op(L->wo, 0, s->att, QD, NULL, T, s->tmp, E, NULL);
        if (run(m, &o, 1, e)) return -1;
        rn = (struct rows_job){.st = ST_RESID_NORM, .norm = L->ffn_norm, .add = true, .n = T};
        run_rows(m, &rn);
        if (m->moe) {
            if (moe_ffn(m, L, T, e)) return -1;
        } else {
            struct mm_op gu[2] = {mdl_op(L->gate, 0, s->xn, E, NULL, T, s->gate, FF, NULL),
                                  mdl_op(L->up, 0, s->xn, E, NULL, T, s->up, FF, NULL)};
            if (run(m, gu, 2, e)) return -1;
            struct rows_job sw = {.st = ST_SWIGLU, .n = T, .width = FF};
            run_rows(m, &sw);
            struct mm_op d = mdl_op(L->down, 0, s->gate, FF, NULL, T, s->tmp, E, NULL);
            if (run(m, &d, 1, e)) return -1;
        }
        /* residual, then the next layer's attention norm (none after the last layer) */
        rn = (struct rows_job){.st = ST_RESID_NORM, .add = true, .n = T,
                               .norm = l + 1 < c->n_layer ? m->layers[l + 1].attn_norm : NULL};
        run_rows(m, &rn);
    }
    if (hidden) /* embeddings: every row's normed final state */
        for (int64_t t = 0; t < T; t++)
            ops_rmsnorm(hidden + t * E, s->x + t * E, m->output_norm, E, c->norm_eps);
    /* final norm only for the wanted rows, packed, then the vocabulary projection */
    int64_t nw = 0;
    for (int64_t t = 0; t < T; t++)
        if (want[t]) ops_rmsnorm(s->xn + (nw++) * E, s->x + t * E, m->output_norm, E, c->norm_eps);
    if (nw && out) {
        struct mm_op lo = mdl_op(m->output, 0, s->xn, E, NULL, nw, out, c->n_vocab, NULL);
        if (run(m, &lo, 1, e)) return -1;
    }
    return 0;
}

static int q3_forward(struct model *bm, const struct batch *b, float *logits, struct err *e)
{
    struct q3 *m = (struct q3 *)bm;
    bool want[Q3_UBATCH];
    int64_t out_row = 0;
    for (int64_t i0 = 0; i0 < b->n; i0 += Q3_UBATCH) {
        int64_t T = b->n - i0 < Q3_UBATCH ? b->n - i0 : Q3_UBATCH;
        for (int64_t t = 0; t < T; t++)
            want[t] = b->want_logits ? b->want_logits[i0 + t] : (i0 + t == b->n - 1);
        if (forward_ubatch(m, b->token + i0, b->pos + i0, b->seq + i0, want, T,
                           logits ? logits + out_row * m->base.cfg.n_vocab : NULL,
                           b->hidden ? b->hidden + i0 * m->base.cfg.n_embd : NULL, e))
            return -1;
        if (!logits) continue;
        for (int64_t t = 0; t < T; t++) out_row += want[t];
    }
    return 0;
}
