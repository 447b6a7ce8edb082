/* kv_cache (engine-internal view) — storage layout and accessors the model families use.
 *
 * One allocation holds K then V for every layer. Per layer and kv head:
 *   K: cap/OPS_ATTN_KT tiles of [head_dim][OPS_ATTN_KT] halfs (tile-transposed, so the attention
 *      kernel reads a tile's keys as contiguous vectors over positions)
 *   V: cap rows of [head_dim] halfs
 * cap is n_ctx rounded up to OPS_ATTN_KT; both K and V heads are kv_head_stride = cap*head_dim
 * halfs apart, layers n_head_kv*kv_head_stride apart. Rows [0, n_rows) are valid; rows past
 * n_rows may hold stale data that the attention kernel never reads unmasked. */
#ifndef LMS_ENGINE_KV_CACHE_H
#define LMS_ENGINE_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"

struct kv_cache {
    int n_layer, n_head_kv, head_dim;
    int n_ctx;  /* usable rows (as asked) */
    int cap;    /* allocated rows: n_ctx rounded up to OPS_ATTN_KT */
    int n_rows; /* valid rows */
    int64_t head_stride, layer_stride; /* in halfs */
    uint16_t *k, *v;
    size_t bytes;
    float *state;        /* recurrent state at position n_rows (the family's layout), or NULL */
    size_t state_floats; /* model_config.state_floats */
};

static inline const uint16_t *kv_layer_k(const struct kv_cache *kv, int l) { return kv->k + l * kv->layer_stride; }
static inline const uint16_t *kv_layer_v(const struct kv_cache *kv, int l) { return kv->v + l * kv->layer_stride; }

/* Writes position pos of layer l: k and v are n_head_kv*head_dim floats (K after RoPE).
 * Does not change n_rows (the caller sets it once the batch is stored). */
void kv_store(struct kv_cache *kv, int l, int pos, const float *k, const float *v);
/* Reads position pos of layer l back as floats (tests, disk tier). */
void kv_load(const struct kv_cache *kv, int l, int pos, float *k, float *v);
void kv_set_rows(struct kv_cache *kv, int n_rows);

#endif
