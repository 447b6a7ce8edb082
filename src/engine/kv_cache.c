/* kv_cache — F16 or F32 K/V storage per sequence (layout in kv_cache.h). */
#include "engine/kv_cache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/model_impl.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ops.h"

size_t kv_bytes_per_row(const struct model *m)
{
    const struct model_config *c = model_config(m);
    if (m->kv_layers) { /* the layers that grow with the context (rings are a fixed cost) */
        size_t b = 0;
        for (int l = 0; l < c->n_layer; l++)
            if (m->kv_layers[l].window <= 0)
                b += (size_t)2 * (size_t)m->kv_layers[l].n_head_kv * (size_t)m->kv_layers[l].head_dim * sizeof(uint16_t);
        return b;
    }
    return (size_t)2 /* K and V */ * (size_t)((c->n_layer_kv ? c->n_layer_kv : c->n_layer) + (c->kv_row_tokens ? 1 : 0)) *
           (size_t)c->n_head_kv * (size_t)c->head_dim * (c->kv_f32 ? sizeof(float) : sizeof(uint16_t));
}

/* Per-layer geometry of a model with kv_layers: each layer its own heads, rings their own rows;
 * one allocation (K of every layer, then V of every layer). */
static int kv_alloc_mixed(struct kv_cache *kv, const struct model *m, struct err *e)
{
    const int L = kv->n_layer;
    kv->layer = calloc((size_t)L, sizeof *kv->layer);
    if (!kv->layer) return err_set(e, ERR_NOMEM, "kv cache: out of memory");
    size_t halfs = 0;
    for (int l = 0; l < L; l++) {
        const struct kv_layer_geom *g = &m->kv_layers[l];
        struct kv_layer *y = &kv->layer[l];
        y->n_head_kv = g->n_head_kv;
        y->head_dim = g->head_dim;
        y->window = g->window > 0 && g->ring_rows < kv->cap ? g->window : 0; /* a ring only if smaller */
        y->cap = y->window ? g->ring_rows : kv->cap;
        y->head_stride = (int64_t)y->cap * y->head_dim;
        if (y->window && (kv->ring_min == 0 || y->cap < kv->ring_min)) kv->ring_min = y->cap;
        halfs += (size_t)y->head_stride * (size_t)y->n_head_kv;
    }
    kv->bytes = 2 * halfs * sizeof(uint16_t);
    kv->k = calloc(2 * halfs, sizeof(uint16_t));
    if (!kv->k) {
        free(kv->layer);
        kv->layer = NULL;
        return err_set(e, ERR_NOMEM, "kv cache: cannot allocate %zu bytes for %d positions", kv->bytes, kv->n_ctx);
    }
    kv->v = kv->k + halfs;
    size_t off = 0;
    for (int l = 0; l < L; l++) {
        kv->layer[l].k = kv->k + off;
        kv->layer[l].v = kv->v + off;
        off += (size_t)kv->layer[l].head_stride * (size_t)kv->layer[l].n_head_kv;
    }
    kv->mixed = true;
    kv->layout = m->kv_layers;
    log_msg(LOG_DEBUG, "kv cache: %d positions, %d layers of own geometry (rings of %d rows and up) = %zu bytes "
            "(%.1f MiB)", kv->cap, L, kv->ring_min, kv->bytes, (double)kv->bytes / (1024.0 * 1024.0));
    return 0;
}

struct kv_cache *kv_new(const struct model *m, int n_ctx, struct err *e)
{
    const struct model_config *c = model_config(m);
    if (n_ctx <= 0 || n_ctx > (1 << 24)) {
        err_set(e, ERR_RANGE, "kv cache: context length %d out of range (1..%d)", n_ctx, 1 << 24);
        return NULL;
    }
    struct kv_cache *kv = calloc(1, sizeof *kv);
    if (!kv) {
        err_set(e, ERR_NOMEM, "kv cache: out of memory");
        return NULL;
    }
    kv->row_tokens = c->kv_row_tokens;
    kv->esize = c->kv_f32 ? 4 : 2;
    kv->n_layer = (c->n_layer_kv ? c->n_layer_kv : c->n_layer) + (kv->row_tokens ? 1 : 0);
    kv->n_head_kv = c->n_head_kv;
    kv->head_dim = c->head_dim;
    kv->n_ctx = n_ctx;
    kv->cap = (n_ctx + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
    if (m->kv_layers) {
        if (kv->esize != 2 || kv->row_tokens) { /* rings and per-layer geometry are F16 only */
            free(kv);
            err_set(e, ERR_UNSUPPORTED, "kv cache: per-layer geometry with F32 or row tokens");
            return NULL;
        }
        if (kv_alloc_mixed(kv, m, e)) {
            free(kv);
            return NULL;
        }
        return kv;
    }
    kv->head_stride = (int64_t)kv->cap * c->head_dim * (kv->esize / 2);
    kv->layer_stride = kv->head_stride * c->n_head_kv;
    size_t halfs = (size_t)kv->layer_stride * (size_t)kv->n_layer;
    kv->bytes = 2 * halfs * sizeof(uint16_t);
    /* calloc: rows past n_rows inside a tile are read (then masked) by the attention kernel, so
     * they must be finite; zero pages also cost nothing until touched. */
    kv->k = calloc(2 * halfs, sizeof(uint16_t));
    if (!kv->k) {
        free(kv);
        err_set(e, ERR_NOMEM, "kv cache: cannot allocate %zu bytes for %d positions", 2 * halfs * 2,
                n_ctx);
        return NULL;
    }
    kv->v = kv->k + halfs;
    if (c->state_floats) { /* zeroed: the state of an empty sequence */
        kv->state = calloc(c->state_floats, sizeof(float));
        if (!kv->state) {
            free(kv->k);
            free(kv);
            err_set(e, ERR_NOMEM, "kv cache: cannot allocate %zu bytes of recurrent state",
                    c->state_floats * sizeof(float));
            return NULL;
        }
        kv->state_floats = c->state_floats;
        kv->bytes += c->state_floats * sizeof(float);
    }
    log_msg(LOG_DEBUG, "kv cache: %d positions x %d layers x %d kv heads x %d dims x 2 (K,V) x %d bytes (%s) "
             "= %zu bytes (%.1f MiB, %zu bytes/position)",
             kv->cap, kv->n_layer, c->n_head_kv, c->head_dim, kv->esize, kv->esize == 4 ? "f32" : "f16", kv->bytes,
             (double)kv->bytes / (1024.0 * 1024.0), kv_bytes_per_row(m));
    return kv;
}

void kv_free(struct kv_cache *kv)
{
    if (!kv) return;
    free(kv->k);
    free(kv->state);
    free(kv->layer);
    free(kv);
}

int kv_rows(const struct kv_cache *kv) { return kv->n_rows; }
int kv_capacity(const struct kv_cache *kv) { return kv->n_ctx; }

bool kv_prefix_ok(const struct kv_cache *kv, int n_rows)
{
    if (n_rows <= 0) return true;
    if (n_rows > kv->n_rows) return false;
    for (int l = 0; kv->ring_min && l < kv->n_layer; l++) {
        const struct kv_layer *y = &kv->layer[l];
        int need = n_rows - y->window + 1 > 0 ? n_rows - y->window + 1 : 0; /* oldest key the next query reads */
        if (y->window && need < kv->hi - y->cap) return false;
    }
    return true;
}

/* A ring that has wrapped past the window before n_rows cannot continue from there: the cache
 * then drops to 0 rows (the caller reads kv_rows back). */
void kv_truncate(struct kv_cache *kv, int n_rows)
{
    if (n_rows < 0) n_rows = 0;
    /* a recurrent state holds the whole prefix: a shorter one is gone (the forward restarts the
     * state at position 0) */
    if (kv->state && n_rows < kv->n_rows) n_rows = 0;
    if (n_rows >= kv->n_rows) return;
    kv->n_rows = kv_prefix_ok(kv, n_rows) ? n_rows : 0;
    if (kv->n_rows == 0) kv->hi = 0;
}

/* The invariant of kv_cache.h: 0 <= n_rows <= n_ctx <= cap (asserted in every build: the
 * Makefile never defines NDEBUG; a row past the capacity would be written out of bounds). */
static void kv_check(const struct kv_cache *kv)
{
    assert(kv->n_rows >= 0 && kv->n_rows <= kv->n_ctx && kv->n_ctx <= kv->cap);
    (void)kv;
}

void kv_set_rows(struct kv_cache *kv, int n_rows)
{
    kv->n_rows = n_rows;
    if (n_rows > kv->hi || n_rows == 0) kv->hi = n_rows;
    kv_check(kv);
}

int kv_copy_rows(struct kv_cache *dst, const struct kv_cache *src, int n_rows)
{
    if (dst->n_layer != src->n_layer || dst->n_head_kv != src->n_head_kv ||
        dst->head_dim != src->head_dim || dst->layout != src->layout || dst->esize != src->esize || n_rows < 0 ||
        n_rows > src->n_rows || n_rows > dst->n_ctx || dst->state_floats != src->state_floats ||
        (src->state && n_rows != src->n_rows && n_rows))
        return -1; /* a recurrent state is copied whole or not at all */
    if (dst == src) {
        kv_truncate(dst, n_rows);
        return 0;
    }
    if (src->mixed) {
        if (dst->cap != src->cap) return -1;
        if (!kv_prefix_ok(src, n_rows)) { /* the rings no longer hold that prefix's window */
            dst->n_rows = dst->hi = 0;
            return 0;
        }
        for (int l = 0; l < src->n_layer; l++) {
            const struct kv_layer *a = &src->layer[l];
            const struct kv_layer *b = &dst->layer[l];
            /* a ring whole (it is small; rows past n_rows are never read unmasked), else the
             * K tiles and V rows of the prefix */
            size_t rows = a->window ? (size_t)a->cap : (size_t)n_rows;
            size_t kt = (rows + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT;
            for (int h = 0; h < a->n_head_kv; h++) {
                memcpy(b->k + h * b->head_stride, a->k + h * a->head_stride, kt * (size_t)a->head_dim * sizeof(uint16_t));
                memcpy(b->v + h * b->head_stride, a->v + h * a->head_stride, rows * (size_t)a->head_dim * sizeof(uint16_t));
            }
        }
        dst->n_rows = n_rows;
        dst->hi = src->ring_min ? src->hi : n_rows;
        kv_check(dst);
        return 0;
    }
    int hd = src->head_dim * (src->esize / 2); /* halfs per row */
    /* whole K tiles (columns past n_rows in the last tile are harmless: never read unmasked) */
    size_t ktiles = (size_t)(n_rows + OPS_ATTN_KT - 1) / OPS_ATTN_KT;
    for (int l = 0; l < src->n_layer; l++)
        for (int h = 0; h < src->n_head_kv; h++) {
            int64_t so = l * src->layer_stride + h * src->head_stride;
            int64_t d0 = l * dst->layer_stride + h * dst->head_stride;
            memcpy(dst->k + d0, src->k + so, ktiles * OPS_ATTN_KT * (size_t)hd * sizeof(uint16_t));
            memcpy(dst->v + d0, src->v + so, (size_t)n_rows * (size_t)hd * sizeof(uint16_t));
        }
    if (src->state && n_rows) memcpy(dst->state, src->state, src->state_floats * sizeof(float));
    dst->n_rows = n_rows;
    dst->hi = n_rows;
    kv_check(dst);
    return 0;
}

void kv_store(struct kv_cache *kv, int l, int pos, const float *k, const float *v)
{
    assert(l >= 0 && l < kv->n_layer && pos >= 0 && pos < kv->n_ctx); /* a row inside the capacity */
    if (kv->esize == 4) { /* F32: uniform caches only (kv_new) */
        int hd = kv->head_dim;
        int64_t tile = (int64_t)(pos / OPS_ATTN_KT) * OPS_ATTN_KT * hd, col = pos % OPS_ATTN_KT;
        for (int h = 0; h < kv->n_head_kv; h++) {
            float *kd = (float *)(kv->k + l * kv->layer_stride + h * kv->head_stride) + tile + col;
            for (int d = 0; d < hd; d++) kd[(int64_t)d * OPS_ATTN_KT] = k[(int64_t)h * hd + d];
            float *vd = (float *)(kv->v + l * kv->layer_stride + h * kv->head_stride) + (int64_t)pos * hd;
            memcpy(vd, v + (int64_t)h * hd, sizeof(float) * (size_t)hd);
        }
        return;
    }
    const struct kv_layer y = kv_layer_of(kv, l);
    int hd = y.head_dim, row = y.window ? pos % y.cap : pos;
    int64_t tile = (int64_t)(row / OPS_ATTN_KT) * OPS_ATTN_KT * hd, col = row % OPS_ATTN_KT;
    for (int h = 0; h < y.n_head_kv; h++) {
        uint16_t *kd = y.k + h * y.head_stride + tile + col;
        uint16_t kh[OPS_ATTN_MAX_HEAD_DIM];
        ops_f32_to_f16(kh, k + (int64_t)h * hd, hd); /* SIMD conversion, then the strided scatter */
        for (int d = 0; d < hd; d++) kd[(int64_t)d * OPS_ATTN_KT] = kh[d];
        uint16_t *vd = y.v + h * y.head_stride + (int64_t)row * hd;
        ops_f32_to_f16(vd, v + (int64_t)h * hd, hd);
    }
}

void kv_load(const struct kv_cache *kv, int l, int pos, float *k, float *v)
{
    assert(l >= 0 && l < kv->n_layer && pos >= 0 && pos < kv->n_ctx);
    if (kv->esize == 4) {
        int hd = kv->head_dim;
        int64_t tile = (int64_t)(pos / OPS_ATTN_KT) * OPS_ATTN_KT * hd, col = pos % OPS_ATTN_KT;
        for (int h = 0; h < kv->n_head_kv; h++) {
            const float *ks = (const float *)(kv->k + l * kv->layer_stride + h * kv->head_stride) + tile + col;
            for (int d = 0; d < hd; d++) k[(int64_t)h * hd + d] = ks[(int64_t)d * OPS_ATTN_KT];
            const float *vs = (const float *)(kv->v + l * kv->layer_stride + h * kv->head_stride) + (int64_t)pos * hd;
            memcpy(v + (int64_t)h * hd, vs, sizeof(float) * (size_t)hd);
        }
        return;
    }
    const struct kv_layer y = kv_layer_of(kv, l);
    int hd = y.head_dim, row = y.window ? pos % y.cap : pos;
    int64_t tile = (int64_t)(row / OPS_ATTN_KT) * OPS_ATTN_KT * hd, col = row % OPS_ATTN_KT;
    for (int h = 0; h < y.n_head_kv; h++) {
        const uint16_t *ks = y.k + h * y.head_stride + tile + col;
        for (int d = 0; d < hd; d++) k[(int64_t)h * hd + d] = fp16_to_f32(ks[(int64_t)d * OPS_ATTN_KT]);
        const uint16_t *vs = y.v + h * y.head_stride + (int64_t)row * hd;
        ops_f16_to_f32(v + (int64_t)h * hd, vs, hd);
    }
}

size_t kv_bytes(const struct kv_cache *kv) { return kv->bytes; }

const float *kv_state(const struct kv_cache *kv, size_t *n_floats)
{
    if (n_floats) *n_floats = kv->state_floats;
    return kv->state;
}

int kv_state_restore(struct kv_cache *kv, int n_rows, const float *state)
{
    if (!kv->state || !state || n_rows < 0 || n_rows > kv->n_rows) return -1;
    memcpy(kv->state, state, kv->state_floats * sizeof(float));
    kv->n_rows = n_rows;
    kv_check(kv);
    return 0;
}

/* the row-token layer's head-0 V row, element 0 (4 bytes: an F32 slot, or two F16 slots) */
static uint16_t *row_token_slot(const struct kv_cache *kv, int pos)
{
    return kv->v + (int64_t)(kv->n_layer - 1) * kv->layer_stride +
           (int64_t)pos * kv->head_dim * (kv->esize / 2);
}

void kv_store_token(struct kv_cache *kv, int pos, int32_t tok)
{
    assert(kv->row_tokens && pos >= 0 && pos < kv->n_ctx && kv->head_dim * kv->esize >= 4);
    memcpy(row_token_slot(kv, pos), &tok, sizeof tok);
}

int32_t kv_row_token(const struct kv_cache *kv, int pos)
{
    assert(kv->row_tokens && pos >= 0 && pos < kv->n_ctx);
    int32_t t;
    memcpy(&t, row_token_slot(kv, pos), sizeof t);
    return t;
}

void kv_geometry(const struct kv_cache *kv, int g[4])
{
    g[0] = kv->n_layer;
    g[1] = kv->n_head_kv;
    g[2] = kv->head_dim * (kv->esize / 2);
    g[3] = OPS_ATTN_KT;
}

static size_t ktile_halfs(const struct kv_cache *kv, int n_rows)
{
    return (size_t)(n_rows + OPS_ATTN_KT - 1) / OPS_ATTN_KT * OPS_ATTN_KT * (size_t)kv->head_dim *
           (size_t)(kv->esize / 2);
}

size_t kv_rows_nbytes(const struct kv_cache *kv, int n_rows)
{
    if (kv->mixed) return 0; /* no disk format for per-layer geometry (kv_write_rows refuses) */
    size_t per_head = ktile_halfs(kv, n_rows) + (size_t)n_rows * (size_t)kv->head_dim * (size_t)(kv->esize / 2);
    return per_head * (size_t)kv->n_layer * (size_t)kv->n_head_kv * sizeof(uint16_t);
}

/* K tiles go out whole except the last, whose stale columns (past n_rows) are zeroed in a copy:
 * the bytes depend only on the valid rows, so equal caches give equal files. */
int kv_write_rows(const struct kv_cache *kv, int n_rows, kv_io_fn fn, void *ctx)
{
    /* per-layer geometry (rings): no disk format yet (docs/kv-ring.md, "Not done") */
    if (kv->mixed || n_rows < 0 || n_rows > kv->n_rows || kv->state) return -1; /* no recurrent states on disk */
    /* in halfs: an F32 element is two adjacent halfs, kept together (hw = halfs per element) */
    int hw = kv->esize / 2, hd = kv->head_dim * hw, KT = OPS_ATTN_KT;
    int full = n_rows / KT, part = n_rows % KT;
    uint16_t tile[2 * OPS_ATTN_MAX_HEAD_DIM * OPS_ATTN_KT];
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_head_kv; h++) {
            int64_t o = l * kv->layer_stride + h * kv->head_stride;
            if (full && fn(ctx, kv->k + o, (size_t)full * KT * hd * sizeof(uint16_t)) < 0) return -1;
            if (part) {
                const uint16_t *src = kv->k + o + (int64_t)full * KT * hd;
                for (int d = 0; d < kv->head_dim; d++)
                    for (int c = 0; c < KT; c++)
                        for (int w = 0; w < hw; w++)
                            tile[(d * KT + c) * hw + w] = c < part ? src[(d * KT + c) * hw + w] : 0;
                if (fn(ctx, tile, (size_t)KT * hd * sizeof(uint16_t)) < 0) return -1;
            }
            if (n_rows && fn(ctx, kv->v + o, (size_t)n_rows * hd * sizeof(uint16_t)) < 0) return -1;
        }
    return 0;
}

int kv_read_rows(struct kv_cache *kv, int n_rows, kv_io_fn fn, void *ctx)
{
    kv->n_rows = kv->hi = 0;
    if (kv->mixed || n_rows < 0 || n_rows > kv->n_ctx || kv->state) return -1;
    size_t kh = ktile_halfs(kv, n_rows);
    for (int l = 0; l < kv->n_layer; l++)
        for (int h = 0; h < kv->n_head_kv; h++) {
            int64_t o = l * kv->layer_stride + h * kv->head_stride;
            if (kh && fn(ctx, kv->k + o, kh * sizeof(uint16_t)) < 0) return -1;
            if (n_rows && fn(ctx, kv->v + o, (size_t)n_rows * kv->head_dim * (size_t)kv->esize) < 0)
                return -1;
        }
    kv->n_rows = kv->hi = n_rows;
    kv_check(kv);
    return 0;
}
