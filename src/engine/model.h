/* model — a loaded model family behind one forward interface, plus its KV cache.
 *
 * A forward pass takes a batch of tokens, each tagged with the sequence (KV cache) it belongs to
 * and its position: prefill = one sequence, many tokens; lockstep decoding = many sequences, one
 * token each; speculative verify = one sequence, k tokens with logits for all k.
 * Weights are read-only pointers into the mapped GGUF. The model (and its caches) belong to one
 * thread at a time (the inference worker); the forward pass itself fans out over the pool. */
#ifndef LMS_ENGINE_MODEL_H
#define LMS_ENGINE_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/format/gguf.h"

struct threadpool;
struct kv_cache;

struct model_config {
    char arch[32];          /* general.architecture */
    int n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx_train;
    int n_expert, n_expert_used, n_ff_exp; /* MoE; 0 for dense */
    float rope_base, norm_eps;
    /* hybrid recurrent families (qwen35): layers with K/V rows (0 = n_layer), and the floats of
     * recurrent state one sequence carries at its last position (0 = a plain causal cache) */
    int n_layer_kv;
    size_t state_floats;
    /* KV cache format (kv_new): F32 instead of F16 elements; one more cache layer that keeps each
     * row's token id (a family whose forward reads the previous token, e.g. nanochat's smear) */
    bool kv_f32, kv_row_tokens;
};

struct batch {
    const int32_t *token;
    const int32_t *pos;
    struct kv_cache **seq;   /* cache each token belongs to */
    const bool *want_logits; /* NULL = only the last token */
    int64_t n;
    float *hidden;           /* NULL, or n x n_embd floats: every token's final hidden state (after
                                the output norm, before the vocabulary projection): embeddings */
};

struct model;
struct model_ops {
    /* logits_out: n_vocab floats per token with want_logits (in batch order). */
    int (*forward)(struct model *, const struct batch *, float *logits_out, struct err *);
    void (*free)(struct model *);
};

struct model_opts {
    int n_threads;      /* 0 = physical cores */
    bool experts_borrow; /* --experts=borrow: serve MoE experts straight from the mapping */
    bool kv_f32;         /* --cache-type f32: K/V caches of F32 elements instead of F16 (twice the
                            memory; the attention reads them unrounded; nanochat always has them) */
    bool no_mmap;        /* --no-mmap: read the GGUF into anonymous memory instead of mapping it */
    bool no_repack;      /* --no-repack: matmuls read the file's row-major layout (default: the
                            matrices a slab path exists for are repacked at load, matmul.h) */
};

/* Opens the GGUF at path, detects the family from general.architecture, validates every tensor
 * it needs (names, shapes, types) and returns the model. A directory is loaded as a nanochat
 * checkpoint (docs/nanochat.md); model_gguf() then gives the metadata-only GGUF built from it. */
struct model *model_load(const char *path, const struct model_opts *opts, struct err *e);
void model_free(struct model *m);
const struct model_config *model_config(const struct model *m);
const struct gguf *model_gguf(const struct model *m);
struct threadpool *model_pool(struct model *m);
int model_forward(struct model *m, const struct batch *b, float *logits_out, struct err *e);
/* Speculative verify (R-SPEC-1): tokens[0..n) of one sequence at positions pos0.., logits for every
 * one of them into logits_out (n x n_vocab). By batch invariance row i equals what feeding the
 * tokens one at a time would give; rows past an accepted prefix are dropped with kv_truncate. */
int model_verify(struct model *m, struct kv_cache *kv, const int32_t *tokens, int n, int32_t pos0,
                 float *logits_out, struct err *e);

/* KV cache: F16 K and V rows for n_ctx positions of every layer. n_rows = positions filled.
 * A recurrent model's cache also holds the state at its last position (docs/qwen35.md): it cannot
 * be rewound, so kv_truncate to a shorter non-empty prefix empties it (0 rows; the state restarts
 * at position 0) and kv_copy_rows copies only whole caches; the disk tier refuses it.
 * model_config.kv_f32 caches hold F32 elements instead (nanochat). */
struct kv_cache *kv_new(const struct model *m, int n_ctx, struct err *e);
void kv_free(struct kv_cache *kv);
int kv_rows(const struct kv_cache *kv);
int kv_capacity(const struct kv_cache *kv);
void kv_truncate(struct kv_cache *kv, int n_rows);            /* rewind */
int kv_copy_rows(struct kv_cache *dst, const struct kv_cache *src, int n_rows); /* prefix share */
size_t kv_bytes_per_row(const struct model *m);
/* Recurrent state snapshots (docs/qwen35.md): the state at the cache's last position, n_floats of
 * it (NULL / 0 for a plain causal cache); kv_state_restore rewinds the cache to n_rows (<= its
 * rows) with a state taken from it at n_rows while its rows [0, n_rows) were the same tokens. */
const float *kv_state(const struct kv_cache *kv, size_t *n_floats);
int kv_state_restore(struct kv_cache *kv, int n_rows, const float *state);
size_t kv_bytes(const struct kv_cache *kv); /* the allocation (RAM guard arithmetic) */
/* Row serialization (disk tier): the canonical bytes of rows [0, n_rows) — per layer, per kv head:
 * K as ceil(n_rows/OPS_ATTN_KT) tiles of [head_dim][KT] f16 with columns >= n_rows zero, then V as
 * n_rows x head_dim f16 — handed to fn in pieces (fn returns 0, or -1 to stop). kv_rows_nbytes is
 * their total; kv_read_rows fills a cache of the same geometry from the same stream and sets its
 * row count only once every piece arrived (on failure the cache holds 0 rows). */
typedef int (*kv_io_fn)(void *ctx, void *p, size_t n);
size_t kv_rows_nbytes(const struct kv_cache *kv, int n_rows);
int kv_write_rows(const struct kv_cache *kv, int n_rows, kv_io_fn fn, void *ctx);
int kv_read_rows(struct kv_cache *kv, int n_rows, kv_io_fn fn, void *ctx);
/* n_layer (with the row-token layer), n_head_kv, row width in halfs (head_dim, or 2*head_dim for F32), KT */
void kv_geometry(const struct kv_cache *kv, int g[4]);

#endif
