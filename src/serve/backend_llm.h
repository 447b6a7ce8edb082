/* backend_llm — the generic backend for GGUF chat models with a plain KV cache (qwen3, qwen3moe):
 * chat template render + tokenize (validate), prefill + token-by-token decode through the emitter
 * (generate). One resident KV slot: a request reuses the longest common token prefix with the
 * previous one (reported as cached_tokens). */
#ifndef LMS_SERVE_BACKEND_LLM_H
#define LMS_SERVE_BACKEND_LLM_H

#include "serve/backend.h"

struct backend_llm_opts {
    int n_threads;  /* 0 = physical cores */
    int n_ctx;      /* 0 = the model's training context, capped by the RAM guard */
    int max_tokens; /* server-wide reply cap (--max-tokens), > 0 */
};

/* Loads the model at path. The returned backend is freed with b->ops->free(b). */
struct backend *backend_llm_new(const char *path, const struct backend_llm_opts *o, struct err *e);

#endif
