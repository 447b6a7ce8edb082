/* model_impl — what a model family implementation sees of struct model (engine-internal).
 *
 * A family's loader fills a struct model (embedded as the first member of its own struct) and
 * its ops. model.c owns the GGUF mapping, the thread pool and the batch validation shared by
 * every family. */
#ifndef LMS_ENGINE_MODEL_IMPL_H
#define LMS_ENGINE_MODEL_IMPL_H

#include "engine/format/gguf.h"
#include "engine/model.h"

struct model {
    struct model_config cfg;
    struct model_opts opts;
    struct gguf g;             /* the mapping: weights point into it */
    struct threadpool *pool;
    const struct model_ops *ops;
    /* NULL: every layer caches n_head_kv x head_dim for every position. Else n_layer entries
     * (one more for the row-token layer with cfg.kv_row_tokens), kept by the family for the
     * model's lifetime (kv_new reads them; gemma4: SWA rings; nanochat: F32 rings). */
    const struct kv_layer_geom *kv_layers;
};

/* One layer's KV geometry. window > 0: a sliding-window layer whose cache is a ring of
 * ring_rows rows (a multiple of OPS_ATTN_KT, >= window - 1 + the most tokens of one sequence the
 * family puts in one forward step), so it costs memory in proportion to the window. */
struct kv_layer_geom {
    int n_head_kv, head_dim;
    int window, ring_rows;
};


/* Family loaders: build the model over an open gguf (taking ownership of *g on success). */
struct model *qwen3_load(struct gguf *g, const struct model_opts *opts, struct err *e);
struct model *qwen35_load(struct gguf *g, const struct model_opts *opts, struct err *e);
struct model *gemma4_load(struct gguf *g, const struct model_opts *opts, struct err *e);
/* A nanochat checkpoint directory (docs/nanochat.md); m->g is a metadata-only GGUF it builds. */
struct model *nanochat_load(const char *dir, const struct model_opts *opts, struct err *e);

/* Looks up a tensor and checks its shape (ne, n_dims) and that its type is computable; NULL + e
 * naming the tensor otherwise. */
const struct gguf_tensor *model_tensor(const struct gguf *g, const char *name, int n_dims,
                                       const int64_t *ne, struct err *e);
/* Same for a tensor that must be F32 (norm weights); returns its data. */
const float *model_tensor_f32(const struct gguf *g, const char *name, int64_t n, struct err *e);

#endif
