/* kv_cache (engine-internal view) — storage layout and accessors the model families use.
 *
 * One allocation holds K then V for every layer. Per layer and kv head:
 *   K: cap/OPS_ATTN_KT tiles of [head_dim][OPS_ATTN_KT] halfs (tile-transposed, so the attention
 *      kernel reads a tile's keys as contiguous vectors over positions)
 *   V: cap rows of [head_dim] halfs
 * cap is n_ctx rounded up to OPS_ATTN_KT; both K and V heads are kv_head_stride = cap*head_dim
 * halfs apart, layers n_head_kv*kv_head_stride apart. Rows [0, n_rows) are valid; rows past
 * n_rows may hold stale data that the attention kernel never reads unmasked.
 *
 * A model with per-layer geometry (struct model's kv_layers: gemma4, nanochat) gets each layer its
 * own n_head_kv x head_dim, and a sliding-window layer a ring of its ring_rows rows: position p at
 * row p % cap, so the layer costs memory in proportion to its window, not to n_ctx. A ring still
 * holds position p iff p >= hi - cap (hi = 1 + the highest position written since the cache was
 * last empty); prefix reuse of n rows needs the window before n: max(0, n - window + 1) >= hi -
 * cap for every ring layer (kv_prefix_ok). docs/kv-ring.md.
 *
 * F32 caches (model_config.kv_f32, esize 4) have the same layout with 4-byte elements, rings
 * included; the strides stay counted in halfs (twice the element count). A cache with row tokens
 * (model_config.kv_row_tokens) has one layer more than the model: element 0 of its head-0 V row
 * holds the row's token id, so copies, truncation and the disk tier carry it like K and V (with
 * kv_layers, the family gives that layer a geometry too: nanochat's is a ring of a 2-key window,
 * as the smear reads only the previous row's token). */
#ifndef LMS_ENGINE_KV_CACHE_H
#define LMS_ENGINE_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

/* Per layer: its geometry and where its K and V live. A ring layer (window > 0) holds cap rows,
 * position p at row p % cap; the others hold position p at row p (cap = the cache's cap). */
struct kv_layer {
    int n_head_kv, head_dim;
    int window, cap;
    int64_t head_stride; /* halfs: cap * head_dim * (esize / 2) */
    uint16_t *k, *v;
};

struct kv_cache {
    int n_layer, n_head_kv, head_dim; /* the model's config (per-layer values in layer[]) */
    int n_ctx;  /* usable rows (as asked) */
    int cap;    /* allocated rows of a full layer: n_ctx rounded up to OPS_ATTN_KT */
    int n_rows; /* valid rows */
    int64_t head_stride, layer_stride; /* in halfs; uniform caches only (mixed == false) */
    uint16_t *k, *v;
    size_t bytes;
    float *state;        /* recurrent state at position n_rows (the family's layout), or NULL */
    size_t state_floats; /* model_config.state_floats */
    struct kv_layer *layer; /* n_layer entries */
    bool mixed;             /* layers differ in geometry or some are rings (model kv_layers) */
    const void *layout;     /* the model's kv_layers (NULL for uniform): caches of other models are refused */
    int ring_min;           /* smallest ring's cap, 0 without rings */
    int hi;                 /* 1 + the highest position written since the cache last held 0 rows */
    int esize;       /* bytes per element: 2 (F16) or 4 (F32) */
    bool row_tokens; /* layer n_layer - 1 keeps the row tokens (above) */
    bool mixed_heads; /* some layer's n_head_kv x head_dim is not the config's: no disk stream */
    int pop;          /* rows [0, pop) have their pages populated (kv_reserve); -1: not supported */
};

/* Layer l's geometry (layer == NULL: a uniform cache laid out by hand, as some tests build). */
static inline struct kv_layer kv_layer_of(const struct kv_cache *kv, int l)
{
    if (kv->layer) return kv->layer[l];
    return (struct kv_layer){kv->n_head_kv, kv->head_dim, 0, kv->cap, kv->head_stride,
                             kv->k + l * kv->layer_stride, kv->v + l * kv->layer_stride};
}
static inline const uint16_t *kv_layer_k(const struct kv_cache *kv, int l) { return kv_layer_of(kv, l).k; }
static inline const uint16_t *kv_layer_v(const struct kv_cache *kv, int l) { return kv_layer_of(kv, l).v; }

/* F32 caches: layer l's K and V as floats (head h at + h * kv_layer_of(kv, l).head_stride / 2). */
static inline const float *kv_layer_kf(const struct kv_cache *kv, int l) { return (const float *)kv_layer_of(kv, l).k; }
static inline const float *kv_layer_vf(const struct kv_cache *kv, int l) { return (const float *)kv_layer_of(kv, l).v; }
/* Caches with row tokens: the token at row pos (kv_store_token writes it; n_rows is not changed). */
void kv_store_token(struct kv_cache *kv, int pos, int32_t tok);
int32_t kv_row_token(const struct kv_cache *kv, int pos);

/* Writes position pos of layer l: k and v are n_head_kv*head_dim floats (K after RoPE).
 * Does not change n_rows (the caller sets it once the batch is stored). */
void kv_store(struct kv_cache *kv, int l, int pos, const float *k, const float *v);
/* Reads position pos of layer l back as floats (tests, disk tier). */
void kv_load(const struct kv_cache *kv, int l, int pos, float *k, float *v);
void kv_set_rows(struct kv_cache *kv, int n_rows);
/* Populates the pages of rows up to `rows`, rounded up to a chunk of 256, before a forward writes
 * them: one madvise per layer, head, K and V per chunk instead of a page fault per 16 rows of
 * each (a forward of 512 new rows took ~14,000 faults on the qwen3-0.6b shape, ~10 us each on a
 * paravirtualized VM; mem_populate). Best effort, no effect on contents. */
void kv_reserve(struct kv_cache *kv, int rows);
/* Can the cache continue from n_rows rows (every ring still holds the window before n_rows)? */
bool kv_prefix_ok(const struct kv_cache *kv, int n_rows);

#endif
