/* backend_llm — the generic backend for GGUF chat models with a plain KV cache (qwen3, qwen3moe):
 * chat template render + tokenize (validate), prefill + token-by-token decode through the emitter
 * (generate). KV reuse across requests (R-KV): a pool of resident slots, prefix copies between
 * them and a disk tier of sidecars (serve/kvpool, serve/kvdisk, docs/kv-cache.md); a request
 * prefills only what no slot or sidecar holds, reported as cached_tokens. */
#ifndef LMS_SERVE_BACKEND_LLM_H
#define LMS_SERVE_BACKEND_LLM_H

#include <stdbool.h>

#include "serve/backend.h"

/* --batch default: on a 2-core machine a decode step of 4 streams reads the weights once, as one
 * stream does, so 4 streams cost little more than 1 (docs/batching.md). */
#define BATCH_DEFAULT 4

struct backend_llm_opts {
    int n_threads;  /* 0 = physical cores */
    int n_ctx;      /* 0 = the model's training context, capped by the RAM guard */
    int max_tokens; /* server-wide reply cap (--max-tokens), > 0 */
    int kv_slots;       /* --kv-slots: resident KV slots (R-KV-1), 0 = 1 */
    bool kv_slots_force; /* --kv-slots-force: no clamp by the RAM guard (R-KV-4) */
    const char *kv_cache_dir; /* --kv-cache-dir: the disk tier (R-KV-5) or NULL */
    int kv_disk_slots;  /* --kv-disk-slots: at most this many sidecars, 0 = 8 */
    int prefill_chunk;  /* --prefill-chunk: tokens per prefill forward, 0 = 512 */
    int batch;          /* --batch: streams decoded together (docs/batching.md), 0 = BATCH_DEFAULT;
                           --kv-slots is raised to at least this */
    int spec;           /* --spec N: prompt-lookup drafts per verify (R-SPEC-1), 0 = off */
    bool kv_f32;        /* --cache-type f32: F32 K/V caches (model_opts.kv_f32) */
    bool no_mmap;       /* --no-mmap: the GGUF read into memory (model_opts.no_mmap) */
    bool no_repack;     /* --no-repack: matrices stay in the file's layout (model_opts.no_repack) */
    const char *alias; /* model id to serve under (--alias); NULL = general.name, else file name */
};

/* Loads the model at path. The returned backend is freed with b->ops->free(b). */
struct backend *backend_llm_new(const char *path, const struct backend_llm_opts *o, struct err *e);

#endif
