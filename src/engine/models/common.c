/* models/common — the pieces every family file uses the same way (common.h). */
#include "engine/models/common.h"

#include <math.h>
#include <stdio.h>

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/model_impl.h"

void *mdl_carve(char *base, size_t *off, size_t bytes)
{
    void *r = base ? base + *off : NULL;
    *off += (bytes + 63) / 64 * 64;
    return r;
}

struct mm_op mdl_op(const struct gguf_tensor *w, int64_t expert, const float *x, int64_t xs,
                    const int32_t *x_idx, int64_t n_tok, float *y, int64_t ys, const int32_t *y_idx)
{
    size_t rs = quant_row_size((enum ggml_type)w->type, w->ne[0]);
    return (struct mm_op){
        .wtype = (enum ggml_type)w->type,
        .W = (const uint8_t *)w->data + (size_t)expert * rs * (size_t)w->ne[1],
        .rows = w->ne[1],
        .cols = w->ne[0],
        .w_stride = rs,
        .X = x,
        .x_stride = xs,
        .x_idx = x_idx,
        .n_tok = n_tok,
        .Y = y,
        .y_stride = ys,
        .y_idx = y_idx,
        .slab = w->slab, /* an expert tensor's slabs never span two experts (model.c matrix_rows) */
    };
}

int mdl_get_u32(const struct gguf *g, const char *arch, const char *key, int *out, bool required,
                struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    uint32_t v;
    if (!gguf_find(g, full)) {
        if (!required) return 0;
        return err_set(e, ERR_FORMAT, "metadata key %s is missing", full);
    }
    if (gguf_get_u32(g, full, &v, e)) return -1;
    if (v == 0 || v > (1u << 24)) return err_set(e, ERR_FORMAT, "metadata %s = %u is out of range", full, v);
    *out = (int)v;
    return 0;
}

int mdl_get_f32(const struct gguf *g, const char *arch, const char *key, float *out, bool required,
                struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!gguf_find(g, full)) {
        if (!required) return 0;
        return err_set(e, ERR_FORMAT, "metadata key %s is missing", full);
    }
    if (gguf_get_f32(g, full, out, e)) return -1;
    if (!(*out > 0.0f) || !isfinite(*out))
        return err_set(e, ERR_FORMAT, "metadata %s = %g is out of range", full, (double)*out);
    return 0;
}

int mdl_attn_hparams(const struct gguf *g, struct model_config *c, int *vlen, struct err *e)
{
    char *arch = gguf_get_str(g, "general.architecture", e);
    if (!arch) return -1;
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    free(arch);
    if (mdl_get_u32(g, c->arch, "block_count", &c->n_layer, true, e) ||
        mdl_get_u32(g, c->arch, "embedding_length", &c->n_embd, true, e) ||
        mdl_get_u32(g, c->arch, "attention.head_count", &c->n_head, true, e) ||
        mdl_get_u32(g, c->arch, "attention.head_count_kv", &c->n_head_kv, true, e) ||
        mdl_get_u32(g, c->arch, "context_length", &c->n_ctx_train, false, e) ||
        mdl_get_f32(g, c->arch, "attention.layer_norm_rms_epsilon", &c->norm_eps, true, e))
        return -1;
    c->rope_base = 10000.0f;
    if (mdl_get_f32(g, c->arch, "rope.freq_base", &c->rope_base, false, e)) return -1;
    c->head_dim = c->n_embd / c->n_head;
    if (mdl_get_u32(g, c->arch, "attention.key_length", &c->head_dim, false, e)) return -1;
    *vlen = c->head_dim;
    if (mdl_get_u32(g, c->arch, "attention.value_length", vlen, false, e)) return -1;
    if (c->n_head % c->n_head_kv || c->n_head / c->n_head_kv > OPS_ATTN_MAX_GROUP)
        return err_set(e, ERR_FORMAT, "head_count %d / head_count_kv %d is not a supported GQA group", c->n_head,
                       c->n_head_kv);
    if (c->head_dim % 4 || c->head_dim > OPS_ATTN_MAX_HEAD_DIM)
        return err_set(e, ERR_UNSUPPORTED, "head_dim %d: must be a multiple of 4 and at most %d", c->head_dim,
                       OPS_ATTN_MAX_HEAD_DIM);
    return 0;
}

int mdl_ffn_hparams(const struct gguf *g, struct model_config *c, bool moe, struct err *e)
{
    if (!moe) return mdl_get_u32(g, c->arch, "feed_forward_length", &c->n_ff, true, e);
    if (mdl_get_u32(g, c->arch, "expert_count", &c->n_expert, true, e) ||
        mdl_get_u32(g, c->arch, "expert_used_count", &c->n_expert_used, true, e) ||
        mdl_get_u32(g, c->arch, "expert_feed_forward_length", &c->n_ff_exp, true, e))
        return -1;
    if (c->n_expert_used > c->n_expert)
        return err_set(e, ERR_FORMAT, "expert_used_count %d > expert_count %d", c->n_expert_used, c->n_expert);
    /* informational in MoE files (Qwen3-MoE writes 0 there): a bad value is not an error */
    struct err ignored = {0};
    mdl_get_u32(g, c->arch, "feed_forward_length", &c->n_ff, false, &ignored);
    return 0;
}

int mdl_embd_output(const struct gguf *g, struct model_config *c, const struct gguf_tensor **tok_embd,
                    const struct gguf_tensor **output, const float **output_norm, struct err *e)
{
    const struct gguf_tensor *emb = gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->ne[0] != c->n_embd || emb->n_dims != 2)
        return err_set(e, ERR_FORMAT, "tensor token_embd.weight is missing or not [%d, n_vocab]", c->n_embd);
    c->n_vocab = (int)emb->ne[1];
    int64_t ne_emb[2] = {c->n_embd, c->n_vocab};
    if (!(*tok_embd = model_tensor(g, "token_embd.weight", 2, ne_emb, e))) return -1;
    if (gguf_find_tensor(g, "output.weight")) {
        if (!(*output = model_tensor(g, "output.weight", 2, ne_emb, e))) return -1;
    } else {
        *output = *tok_embd;
    }
    if (!(*output_norm = model_tensor_f32(g, "output_norm.weight", c->n_embd, e))) return -1;
    return 0;
}

void mdl_embed_row(const struct gguf_tensor *t, int32_t tok, float *out)
{
    const enum ggml_type ty = (enum ggml_type)t->type;
    const struct quant_traits *tr = quant_traits(ty);
    size_t rs = quant_row_size(ty, t->ne[0]);
    if (!t->slab) {
        tr->to_float((const uint8_t *)t->data + (size_t)tok * rs, out, t->ne[0]);
        return;
    }
    /* a repacked matrix (matmul.h): block by block */
    uint8_t blk[512];
    for (int64_t i = 0; i < t->ne[0] / tr->blck_size; i++) {
        mm_slab_block(ty, t->data, t->ne[1], t->ne[0], tok, i, blk);
        tr->to_float(blk, out + i * tr->blck_size, tr->blck_size);
    }
}

void mdl_route_topk(const float *probs, int64_t T, int n_expert, int k, float min_sum, int64_t cap, int32_t *sel,
                    float *selw, int32_t *ecnt, int32_t *etok, int32_t *etok_t)
{
    memset(ecnt, 0, sizeof(int32_t) * (size_t)n_expert);
    for (int64_t t = 0; t < T; t++) {
        const float *p = probs + t * n_expert;
        int32_t *s = sel + t * k;
        float *w = selw + t * k, wsum = 0.0f;
        for (int j = 0; j < k; j++) {
            int best = -1;
            for (int x = 0; x < n_expert; x++) {
                bool taken = false;
                for (int q = 0; q < j; q++) taken = taken || s[q] == x;
                if (!taken && (best < 0 || p[x] > p[best])) best = x;
            }
            s[j] = best;
            w[j] = p[best];
            wsum += p[best];
        }
        if (wsum < min_sum) wsum = min_sum;
        for (int j = 0; j < k; j++) {
            w[j] /= wsum;
            int x = s[j], i = ecnt[x]++;
            etok[(int64_t)x * cap + i] = (int32_t)(t * k + j);
            etok_t[(int64_t)x * cap + i] = (int32_t)t;
        }
    }
}

void mdl_advise_experts(const struct gguf_tensor *const *ts, int n, bool borrow)
{
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0) pg = 4096;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!ts[i]) continue;
        uintptr_t a = (uintptr_t)ts[i]->data, lo = a / (uintptr_t)pg * (uintptr_t)pg;
        size_t len = ts[i]->nbytes + (a - lo);
        if (borrow) {
            madvise((void *)lo, len, MADV_RANDOM);
        } else {
            madvise((void *)lo, len, MADV_WILLNEED);
            volatile const uint8_t *b = ts[i]->data;
            uint8_t acc = 0;
            for (size_t o = 0; o < ts[i]->nbytes; o += (size_t)pg) acc ^= b[o];
            (void)acc;
        }
        total += ts[i]->nbytes;
    }
    log_info("moe: %zu bytes of expert weights %s", total,
             borrow ? "borrowed from the mapping (demand-paged, no readahead)"
                    : "pre-faulted from the mapping (resident before the first request)");
}
