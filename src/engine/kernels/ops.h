/* ops — the non-matmul operations of a transformer forward pass, on f32 activations.
 *
 * RMSNorm, NeoX RoPE, softmax, SwiGLU, f16<->f32 rows, and causal attention over a KV cache stored
 * in IEEE half precision. The attention kernel has a portable version (ops.c) and AVX2 / AVX-512
 * versions picked once by ops_init() from CPU features; the portable one is the reference that the
 * unit tests compare the SIMD ones against. All functions are thread-safe (no shared state after
 * ops_init). */
#ifndef LMS_ENGINE_OPS_H
#define LMS_ENGINE_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Picks SIMD kernels for this CPU; idempotent, call before the first ops_attn_run. */
void ops_init(void);
const char *ops_isa(void);

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]; out may alias x. */
void ops_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps);
/* inv_freq[i] = base^(-2i/head_dim), i < head_dim/2 (what ops_rope_neox expects). */
void ops_rope_inv_freq(float *inv_freq, int head_dim, float base);
/* NeoX RoPE in place on n_head heads of head_dim floats: element i pairs with i + head_dim/2
 * (rotate halves), angle = pos * inv_freq[i]. */
void ops_rope_neox(float *x, int n_head, int head_dim, int32_t pos, const float *inv_freq);
/* The same in two steps, so q and k of one token share the sines: cs/sn get head_dim/2 floats. */
void ops_rope_cache(float *cs, float *sn, int head_dim, int32_t pos, const float *inv_freq);
void ops_rope_apply(float *x, int n_head, int head_dim, const float *cs, const float *sn);
/* In place, numerically stable. */
void ops_softmax(float *x, int64_t n);
/* out[i] = silu(gate[i]) * up[i]; out may alias gate or up. */
void ops_swiglu(float *out, const float *gate, const float *up, int64_t n);
void ops_f32_to_f16(uint16_t *dst, const float *src, int64_t n);
void ops_f16_to_f32(float *dst, const uint16_t *src, int64_t n);

/* Causal attention for a run of query tokens of ONE sequence over that sequence's KV cache
 * (one layer). Query i attends cache rows [0, pos[i]]; those rows must already hold K (after
 * RoPE) and V (window: only (pos[i] - window, pos[i]]). Cache layout per layer: for each kv head,
 * rows of head_dim halfs, kv_head_stride elements apart. GQA: query head h reads kv head h / (n_head / n_head_kv). */
struct ops_attn {
    const float *q;     /* query i at q + i*q_stride: n_head*head_dim floats (after norm+RoPE) */
    int64_t q_stride;
    float *out;         /* output i at out + i*out_stride: n_head*head_dim floats */
    int64_t out_stride;
    const int32_t *pos; /* n_q positions, non-decreasing */
    int n_q;
    const uint16_t *k, *v;
    int64_t kv_head_stride;
    bool kv_f32;        /* k and v hold floats (an F32 cache, --cache-type f32): the same layout
                           with 4-byte elements, kv_head_stride still counted in halfs */
    int n_head, n_head_kv, head_dim;
    float scale;        /* usually 1/sqrt(head_dim) */
    int window;         /* > 0: query i sees only keys at positions (pos[i] - window, pos[i]] (sliding
                           window); 0 = all of [0, pos[i]] */
    int ring;           /* > 0: the cache is a ring of this many rows (a multiple of OPS_ATTN_KT),
                           position p at row p % ring; it must hold every key the queries see */
};

#define OPS_ATTN_QB 16        /* query tokens per work unit */
#define OPS_ATTN_KT 64        /* keys per tile */
#define OPS_ATTN_MAX_HEAD_DIM 256
#define OPS_ATTN_MAX_GROUP 16 /* n_head / n_head_kv */
/* Split-K: keys are reduced in fixed chunks of OPS_ATTN_KC positions — each chunk from a fresh
 * online-softmax state, the chunks' states merged in chunk order — for every query row, whatever
 * the thread count, the query block or how the chunks are spread over threads, so decode at depth
 * can run one long unit's chunks on several threads and stay batch-invariant. A cache of at most
 * OPS_ATTN_KC positions is one chunk (the plain online softmax). */
#define OPS_ATTN_KC 1024

/* One work unit: kv head kvh, query tokens [q0, q1) with q1 - q0 <= OPS_ATTN_QB. Units write
 * disjoint outputs, so they can run on different threads. scratch: ops_attn_scratch_floats()
 * floats, 64-byte aligned, private to the calling thread. */
void ops_attn_run(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch);
size_t ops_attn_scratch_floats(void);
/* Split-K pieces of the same unit (bit-identical to ops_attn_run of it): ops_attn_chunks() chunks
 * cover its keys; ops_attn_run_chunk stores chunk c's state of the unit's rows in state
 * (ops_attn_state_floats floats); ops_attn_merge folds n_chunks states (chunk c at states +
 * c * stride) in chunk order and writes the unit's output. Chunks of one unit may run on
 * different threads; the merge needs all of them. */
int ops_attn_chunks(const struct ops_attn *a, int q1);
size_t ops_attn_state_floats(const struct ops_attn *a, int q0, int q1);
void ops_attn_run_chunk(const struct ops_attn *a, int kvh, int q0, int q1, int chunk, float *state,
                        float *scratch);
void ops_attn_merge(const struct ops_attn *a, int kvh, int q0, int q1, int n_chunks,
                    const float *states, size_t stride);
/* The merge and the final normalisation, shared by every ISA's unit (internal: ops_attn_impl.h).
 * A state row is max, sum, head_dim accumulator floats. */
void ops_attn_state_merge(float *run, const float *chunk, int hd);
void ops_attn_state_finish(const float *run, float *out, int hd);
/* The portable version (the reference for tests). */
void ops_attn_run_ref(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch);

#endif
