/* backend_llm — the generic backend for GGUF chat models with a plain KV cache (qwen3, qwen3moe):
 * chat template render + tokenize (validate), prefill + token-by-token decode through the emitter
 * (generate). One resident KV slot; with prefix_reuse a request keeps the rows of the longest
 * common token prefix with the previous one (reported as cached_tokens). Off by default: the
 * engine's forward is not batch-invariant (the last prompt token computed alone rounds differently
 * than inside a full prefill), so reuse can change a greedy reply; see docs/server.md. */
#ifndef LMS_SERVE_BACKEND_LLM_H
#define LMS_SERVE_BACKEND_LLM_H

#include <stdbool.h>

#include "serve/backend.h"

struct backend_llm_opts {
    int n_threads;  /* 0 = physical cores */
    int n_ctx;      /* 0 = the model's training context, capped by the RAM guard */
    int max_tokens; /* server-wide reply cap (--max-tokens), > 0 */
    bool prefix_reuse; /* keep the common prefix of the previous request's cache */
};

/* Loads the model at path. The returned backend is freed with b->ops->free(b). */
struct backend *backend_llm_new(const char *path, const struct backend_llm_opts *o, struct err *e);

#endif
