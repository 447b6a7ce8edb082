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
};

/* Family loaders: build the model over an open gguf (taking ownership of *g on success). */
struct model *qwen3_load(struct gguf *g, const struct model_opts *opts, struct err *e);
struct model *qwen35_load(struct gguf *g, const struct model_opts *opts, struct err *e);

/* Looks up a tensor and checks its shape (ne, n_dims) and that its type is computable; NULL + e
 * naming the tensor otherwise. */
const struct gguf_tensor *model_tensor(const struct gguf *g, const char *name, int n_dims,
                                       const int64_t *ne, struct err *e);
/* Same for a tensor that must be F32 (norm weights); returns its data. */
const float *model_tensor_f32(const struct gguf *g, const char *name, int64_t n, struct err *e);

#endif
