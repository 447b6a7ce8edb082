/* kvpool — the resident KV slots and the per-request adoption plan (R-KV-1, R-KV-2); the state
 * machine and the rules are in docs/kv-cache.md.
 *
 * A slot is a KV cache plus its token shadow (the exact ids whose rows it holds), its head (where
 * the last request's own messages ended: its prompt minus the generation prompt) and a last-used
 * stamp. kvpool_plan only decides (pure: it reads shadows, never rows), so it is unit-tested
 * without a model; serve/backend_llm executes the plan. Worker thread only. */
#ifndef LMS_SERVE_KVPOOL_H
#define LMS_SERVE_KVPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KVPOOL_GATE 0.1 /* a match counts only if lcp / prompt length >= this (R-KV-1) */

struct kv_cache;

struct kvslot {
    struct kv_cache *kv;
    int32_t *shadow; /* capacity: the context length */
    size_t n_shadow;
    size_t head;
    uint64_t used; /* 0 = never used */
    bool busy;     /* a live stream of the batch runs in it (docs/batching.md): never a target */
};

/* A candidate that is not resident (a sidecar of the disk tier). */
struct kvcand {
    const int32_t *shadow;
    size_t n;
    uint64_t used;
};

enum kvplan_kind {
    KVPLAN_COLD,    /* nothing matches: dst is emptied */
    KVPLAN_ADOPT,   /* continuation: dst == src, truncated to keep */
    KVPLAN_COPY,    /* shared prefix: src's first keep rows copied into dst (src intact) */
    KVPLAN_RESTORE, /* a sidecar beats every slot: loaded into dst, truncated to keep */
    KVPLAN_KIND_COUNT
};

struct kvplan {
    enum kvplan_kind kind;
    int dst;       /* the slot the request runs in */
    int src;       /* donor slot (ADOPT, COPY) or -1 */
    int disk;      /* sidecar index (RESTORE) or -1 */
    size_t keep;   /* rows kept = cached_tokens (always <= n - 1) */
    size_t dst_kept; /* rows of dst's current shadow that stay meaningful */
    bool spill;    /* dst keeps less than half of its shadow: spill it first if not stored */
};

/* Longest common prefix of a[0..na) and b[0..nb). */
size_t kv_lcp(const int32_t *a, size_t na, const int32_t *b, size_t nb);

/* The plan for a request of tokens t[0..n) (n >= 1) over slots[0..n_slots) (at least one of them
 * not busy) and disk candidates disk[0..n_disk). A busy slot is never dst: a continuation of one
 * becomes a COPY of its prefix (its rows below its shadow's end do not change while it runs). */
void kvpool_plan(const struct kvslot *slots, int n_slots, const struct kvcand *disk, int n_disk,
                 const int32_t *t, size_t n, struct kvplan *out);

extern const char *const KVPLAN_NAMES[KVPLAN_KIND_COUNT];

#endif
