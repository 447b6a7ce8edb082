/* kv_cache — F16 or F32 K/V storage per sequence (layout in kv_cache.h). */
#include "engine/kv_cache.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/mem.h"
#include "engine/model_impl.h"
#include "engine/kernels/fp16.h"
#include "engine/kernels/ops.h"

size_t kv_bytes_per_row(const struct model *m)
{
    const struct model_config *c = model_config(m);
    if (m->kv_layers) { /* the layers that grow with the context (rings are a fixed cost) */
        size_t b = 0;
        int n = (c->n_layer_kv ? c->n_layer_kv : c->n_layer) + (c->kv_row_tokens ? 1 : 0);
        for (int l = 0; l < n; l++)
            if (m->kv_layers[l].window <= 0)
                b += (size_t)2 * (size_t)m->kv_layers[l].n_head_kv * (size_t)m->kv_layers[l].head_dim *
                     (c->kv_f32 ? sizeof(float) : sizeof(uint16_t));
        return b;
    }
    return (size_t)2 /* K and V */ * (size_t)((c->n_layer_kv ? c->n_layer_kv : c->n_layer) + (c->kv_row_tokens ? 1 : 0)) *
           (size_t)c->n_head_kv * (size_t)c->head_dim * (c->kv_f32 ? sizeof(float) : sizeof(uint16_t));
}

/* Per-layer geometry of a model with kv_layers (n_layer entries: the row-token layer included):
 * each layer its own heads, rings their own rows; one allocation (K of every layer, then V of
 * every layer), F16 or F32 elements. */
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
        y->head_stride = (int64_t)y->cap * y->head_dim * (kv->esize / 2);
        if (y->n_head_kv != kv->n_head_kv || y->head_dim != kv->head_dim) kv->mixed_heads = true;
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
    log_msg(LOG_DEBUG, "kv cache: %d positions, %d layers of own geometry (rings of %d rows and up, %s) = %zu "
            "bytes (%.1f MiB)", kv->cap, L, kv->ring_min, kv->esize == 4 ? "f32" : "f16", kv->bytes,
            (double)kv->bytes / (1024.0 * 1024.0));
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
        if (c->state_floats) { /* no family has both */
            free(kv);
            err_set(e, ERR_UNSUPPORTED, "kv cache: per-layer geometry with a recurrent state");
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
            size_t hd = (size_t)a->head_dim * (size_t)(src->esize / 2); /* halfs per row */
            for (int h = 0; h < a->n_head_kv; h++) {
                memcpy(b->k + h * b->head_stride, a->k + h * a->head_stride, kt * hd * sizeof(uint16_t));
                memcpy(b->v + h * b->head_stride, a->v + h * a->head_stride, rows * hd * sizeof(uint16_t));
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
    const struct kv_layer y = kv_layer_of(kv, l);
    int hd = y.head_dim, row = y.window ? pos % y.cap : pos;
    int64_t tile = (int64_t)(row / OPS_ATTN_KT) * OPS_ATTN_KT * hd, col = row % OPS_ATTN_KT;
    for (int h = 0; h < y.n_head_kv; h++) {
        if (kv->esize == 4) {
            float *kd = (float *)(y.k + h * y.head_stride) + tile + col;
            for (int d = 0; d < hd; d++) kd[(int64_t)d * OPS_ATTN_KT] = k[(int64_t)h * hd + d];
            float *vd = (float *)(y.v + h * y.head_stride) + (int64_t)row * hd;
            memcpy(vd, v + (int64_t)h * hd, sizeof(float) * (size_t)hd);
            continue;
        }
        uint16_t *kd = y.k + h * y.head_stride + tile + col;
        uint16_t kh[OPS_ATTN_MAX_HEAD_DIM];
        ops_f32_to_f16(kh, k + (int64_t)h * hd, hd); /* SIMD conversion, then the strided scatter */
        for (int d = 0; d < hd; d++) kd[(int64_t)d * OPS_ATTN_KT] = kh[d];
        uint16_t *vd = y.v + h * y.head_stride + (int64_t)row * hd;
        ops_f32_to_f16(vd, v + (int64_t)h * hd, hd);
    }
}

#define KV_POP_ROWS 256 /* a multiple of OPS_ATTN_KT: K's tiles and V's rows end together */

void kv_reserve(struct kv_cache *kv, int rows)
{
    if (kv->pop < 0 || rows <= kv->pop || !kv->k) return;
    int to = (rows + KV_POP_ROWS - 1) / KV_POP_ROWS * KV_POP_ROWS;
    if (to > kv->cap) to = kv->cap;
    for (int l = 0; l < kv->n_layer; l++) {
        const struct kv_layer y = kv_layer_of(kv, l);
        /* a ring's rows are its positions modulo its cap: all of it once */
        if (y.window && kv->pop > 0) continue;
        int lo = y.window ? 0 : kv->pop, hi = y.window || to > y.cap ? y.cap : to;
        if (hi <= lo) continue;
        const size_t row_bytes = (size_t)y.head_dim * (size_t)kv->esize;
        for (int h = 0; h < y.n_head_kv; h++) {
            /* K: tiles of OPS_ATTN_KT rows, contiguous in rows as V is (lo, hi multiples of it) */
            uint16_t *kp = y.k + h * y.head_stride, *vp = y.v + h * y.head_stride;
            if (mem_populate((char *)kp + (size_t)lo * row_bytes, (size_t)(hi - lo) * row_bytes) ||
                mem_populate((char *)vp + (size_t)lo * row_bytes, (size_t)(hi - lo) * row_bytes)) {
                kv->pop = -1; /* not supported: fault in as before */
                return;
            }
        }
    }
    kv->pop = to;
}

void kv_load(const struct kv_cache *kv, int l, int pos, float *k, float *v)
{
    assert(l >= 0 && l < kv->n_layer && pos >= 0 && pos < kv->n_ctx);
    const struct kv_layer y = kv_layer_of(kv, l);
    int hd = y.head_dim, row = y.window ? pos % y.cap : pos;
    int64_t tile = (int64_t)(row / OPS_ATTN_KT) * OPS_ATTN_KT * hd, col = row % OPS_ATTN_KT;
    for (int h = 0; h < y.n_head_kv; h++) {
        if (kv->esize == 4) {
            const float *ks = (const float *)(y.k + h * y.head_stride) + tile + col;
            for (int d = 0; d < hd; d++) k[(int64_t)h * hd + d] = ks[(int64_t)d * OPS_ATTN_KT];
            const float *vs = (const float *)(y.v + h * y.head_stride) + (int64_t)row * hd;
            memcpy(v + (int64_t)h * hd, vs, sizeof(float) * (size_t)hd);
            continue;
        }
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
    const struct kv_layer y = kv_layer_of(kv, kv->n_layer - 1);
    int row = y.window ? pos % y.cap : pos;
    return y.v + (int64_t)row * y.head_dim * (kv->esize / 2);
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
    if (kv->mixed_heads) return 0; /* no disk format for per-layer heads (kv_write_rows refuses) */
    size_t per_head = ktile_halfs(kv, n_rows) + (size_t)n_rows * (size_t)kv->head_dim * (size_t)(kv->esize / 2);
    return per_head * (size_t)kv->n_layer * (size_t)kv->n_head_kv * sizeof(uint16_t);
}

/* The row stream (docs/kv-cache.md; rings: docs/kv-ring.md "The disk tier"): per layer and kv head
 * the K tiles of positions [0, n) then their V rows, as a full-size cache lays them out; an F32
 * element is two adjacent halfs (hw = halfs per element), kept together. Positions a layer does not
 * store are zeros: past n in the last K tile, and in a ring that has wrapped (n > cap) those before
 * its last cap positions, [0, n - cap). So the bytes depend only on the rows a continuation from n
 * may read, a ring and a full-size cache of the same model write the same format, and a ring reads
 * back exactly its last cap positions (kv_read_rows sets hi = n). */
static int first_kept(const struct kv_layer *y, int n_rows)
{
    return y->window && n_rows > y->cap ? n_rows - y->cap : 0;
}

int kv_write_rows(const struct kv_cache *kv, int n_rows, kv_io_fn fn, void *ctx)
{
    if (kv->mixed_heads || n_rows < 0 || n_rows > kv->n_rows || kv->state) return -1; /* no recurrent states on disk */
    const int hw = kv->esize / 2, KT = OPS_ATTN_KT;
    int full = n_rows / KT, part = n_rows % KT;
    uint16_t tile[2 * OPS_ATTN_MAX_HEAD_DIM * OPS_ATTN_KT];
    for (int l = 0; l < kv->n_layer; l++) {
        const struct kv_layer y = kv_layer_of(kv, l);
        const int hd = y.head_dim * hw, a = first_kept(&y, n_rows);
        /* a ring that lost some of its last cap positions to a rewrite after a rewind (hi > n) */
        if (y.window && kv->hi - y.cap > a) return -1;
        for (int h = 0; h < y.n_head_kv; h++) {
            const uint16_t *K = y.k + h * y.head_stride, *V = y.v + h * y.head_stride;
            if (!a) { /* position p at row p (a full-size layer, or a ring that has not wrapped) */
                if (full && fn(ctx, (void *)K, (size_t)full * KT * hd * sizeof(uint16_t)) < 0) return -1;
                if (part) {
                    const uint16_t *src = K + (int64_t)full * KT * hd;
                    for (int d = 0; d < y.head_dim; d++)
                        for (int c = 0; c < KT; c++)
                            for (int w = 0; w < hw; w++)
                                tile[(d * KT + c) * hw + w] = c < part ? src[(d * KT + c) * hw + w] : 0;
                    if (fn(ctx, tile, (size_t)KT * hd * sizeof(uint16_t)) < 0) return -1;
                }
                if (n_rows && fn(ctx, (void *)V, (size_t)n_rows * hd * sizeof(uint16_t)) < 0) return -1;
                continue;
            }
            /* a wrapped ring: tile t (positions t*KT ..) lives at row (t*KT) % cap; cap is a
             * multiple of KT, so a tile of positions is one tile of rows */
            for (int p0 = 0; p0 < n_rows; p0 += KT) {
                const uint16_t *src = K + (int64_t)(p0 % y.cap) * hd;
                for (int d = 0; d < y.head_dim; d++)
                    for (int c = 0; c < KT; c++)
                        for (int w = 0; w < hw; w++)
                            tile[(d * KT + c) * hw + w] = p0 + c >= a && p0 + c < n_rows ? src[(d * KT + c) * hw + w] : 0;
                if (fn(ctx, tile, (size_t)KT * hd * sizeof(uint16_t)) < 0) return -1;
            }
            for (int p0 = 0; p0 < n_rows; p0 += KT) {
                int k = n_rows - p0 < KT ? n_rows - p0 : KT;
                for (int r = 0; r < k; r++) {
                    uint16_t *dst = tile + (size_t)r * hd;
                    if (p0 + r >= a) memcpy(dst, V + (int64_t)((p0 + r) % y.cap) * hd, (size_t)hd * sizeof(uint16_t));
                    else memset(dst, 0, (size_t)hd * sizeof(uint16_t));
                }
                if (fn(ctx, tile, (size_t)k * hd * sizeof(uint16_t)) < 0) return -1;
            }
        }
    }
    return 0;
}

int kv_read_rows(struct kv_cache *kv, int n_rows, kv_io_fn fn, void *ctx)
{
    kv->n_rows = kv->hi = 0;
    if (kv->mixed_heads || n_rows < 0 || n_rows > kv->n_ctx || kv->state) return -1;
    const int hw = kv->esize / 2, KT = OPS_ATTN_KT;
    size_t kh = ktile_halfs(kv, n_rows);
    uint16_t tile[2 * OPS_ATTN_MAX_HEAD_DIM * OPS_ATTN_KT];
    for (int l = 0; l < kv->n_layer; l++) {
        const struct kv_layer y = kv_layer_of(kv, l);
        const int hd = y.head_dim * hw, a = first_kept(&y, n_rows);
        for (int h = 0; h < y.n_head_kv; h++) {
            uint16_t *K = y.k + h * y.head_stride, *V = y.v + h * y.head_stride;
            if (!a) { /* straight into place */
                if (kh && fn(ctx, K, kh * sizeof(uint16_t)) < 0) return -1;
                if (n_rows && fn(ctx, V, (size_t)n_rows * hd * sizeof(uint16_t)) < 0) return -1;
                continue;
            }
            /* a ring: each tile's positions in [a, n) to their rows (tiles in order, so the
             * partial tile of a and the last tile share one tile of rows, each its own columns) */
            for (int p0 = 0; p0 < n_rows; p0 += KT) {
                if (fn(ctx, tile, (size_t)KT * hd * sizeof(uint16_t)) < 0) return -1;
                int c0 = a > p0 ? a - p0 : 0, c1 = n_rows - p0 < KT ? n_rows - p0 : KT;
                if (c0 >= c1) continue;
                uint16_t *dst = K + (int64_t)(p0 % y.cap) * hd;
                for (int d = 0; d < y.head_dim; d++)
                    memcpy(dst + (size_t)(d * KT + c0) * hw, tile + (size_t)(d * KT + c0) * hw,
                           (size_t)(c1 - c0) * hw * sizeof(uint16_t));
            }
            for (int p0 = 0; p0 < n_rows; p0 += KT) {
                int k = n_rows - p0 < KT ? n_rows - p0 : KT;
                if (fn(ctx, tile, (size_t)k * hd * sizeof(uint16_t)) < 0) return -1;
                for (int r = p0 < a ? a - p0 : 0; r < k; r++)
                    memcpy(V + (int64_t)((p0 + r) % y.cap) * hd, tile + (size_t)r * hd, (size_t)hd * sizeof(uint16_t));
            }
        }
    }
    kv->n_rows = kv->hi = n_rows;
    kv_check(kv);
    return 0;
}
