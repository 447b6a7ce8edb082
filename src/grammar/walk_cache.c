/* walk_cache — the vocabulary's shared cache of inner walks (struct shared_inner), keyed by the
 * canonical form of a lexer state, shared by every grammar on the vocabulary: lookup,
 * publication, references, and making room when it is full (docs/grammar.md "Sharing and
 * threads"). Guarded by vi->mu. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

void wcache_payload_free(struct shared_inner *x)
{
    if (!x) return;
    free(x->key);
    free(x->bits);
    free(x->list);
    free(x->nodes);
    free(x);
}

struct shared_inner *wcache_find(struct grammar_vocab_index *vi, const uint8_t *key, size_t len,
                                 uint64_t h)
{
    struct shared_inner *r = NULL;
    pthread_mutex_lock(&vi->mu);
    for (uint32_t j = (uint32_t)h & (vi->sh_cap - 1); vi->sh[j]; j = (j + 1) & (vi->sh_cap - 1)) {
        struct shared_inner *x = vi->sh[j];
        if (x->hash == h && x->key_len == len && !memcmp(x->key, key, len)) {
            r = x;
            x->refs++; /* the caller's */
            x->hit = true;
            break;
        }
    }
    pthread_mutex_unlock(&vi->mu);
    return r;
}

void mask_release(struct grammar_vocab_index *vi, struct shared_inner *x)
{
    if (!x) return;
    pthread_mutex_lock(&vi->mu);
    int32_t r = --x->refs;
    pthread_mutex_unlock(&vi->mu);
    if (r == 0) wcache_payload_free(x);
}

/* Makes room in the full shared cache: drops the walks nobody found since the last time (the
 * walks of one schema's states), then, if that freed less than half, every walk; the others
 * lose their mark (second chance). A dropped walk lives on while an inner entry holds it. The
 * relaxed walks stay (few; their grammars point into them). Caller holds vi->mu. */
static void shared_evict(struct grammar_vocab_index *vi, uint64_t *visits)
{
    for (int pass = 0; pass < 2; pass++) {
        struct shared_inner **keep = vi->sh;
        uint32_t cap = vi->sh_cap;
        struct shared_inner **n = calloc(cap, sizeof *n);
        if (!n) pass = 1; /* no memory for the new table: drop everything in place */
        for (uint32_t i = 0; i < cap; i++) {
            struct shared_inner *x = keep[i];
            if (!x) continue;
            ++*visits;
            if (n && pass == 0 && x->hit) {
                x->hit = false;
                uint32_t j = (uint32_t)x->hash & (cap - 1);
                while (n[j])
                    j = (j + 1) & (cap - 1);
                n[j] = x;
                continue;
            }
            vi->sh_bytes -= x->bytes;
            vi->sh_n--;
            vi->sh_drops++;
            keep[i] = NULL;
            if (--x->refs == 0) { /* freed later, a few per publication (shared_add) */
                if (vi->grave_n == vi->grave_cap) {
                    uint32_t nc = vi->grave_cap ? vi->grave_cap * 2 : 256;
                    struct shared_inner **ng = realloc(vi->grave, nc * sizeof *ng);
                    if (!ng) { /* no memory for the list: free it now */
                        wcache_payload_free(x);
                        continue;
                    }
                    vi->grave = ng;
                    vi->grave_cap = nc;
                }
                vi->grave[vi->grave_n++] = x;
            }
        }
        if (n) {
            free(vi->sh);
            vi->sh = n;
        }
        if (vi->sh_bytes <= vi->sh_max_bytes / 2) break;
    }
    if (vi->grave_n > vi->grave_max) vi->grave_max = vi->grave_n;
    vi->sh_evictions++;
}

/* A full cache drops its walks first (shared_evict): a long-running server meets
 * new schemas for ever, and a cache that only grew made every new state a trie walk once full
 * (MaskBench in one process: ~1,900 schemas). */
bool wcache_add(struct grammar_vocab_index *vi, struct shared_inner *x, size_t bytes)
{
    bool ok = false;
    pthread_mutex_lock(&vi->mu);
    uint64_t visits = 0;
    if (vi->sh_bytes + bytes > vi->sh_max_bytes && vi->sh_n) shared_evict(vi, &visits);
    vi->sh_room_visits += visits;
    if (visits > vi->sh_room_max) vi->sh_room_max = visits;
    if (vi->sh_bytes + bytes > vi->sh_max_bytes) goto out;
    if ((vi->sh_n + 1) * 2 > vi->sh_cap) {
        uint32_t nc = vi->sh_cap * 2;
        if (vi->sh_cap > vi->sh_grow_max) vi->sh_grow_max = vi->sh_cap;
        struct shared_inner **n = calloc(nc, sizeof *n);
        if (!n) goto out;
        for (uint32_t i = 0; i < vi->sh_cap; i++) {
            if (!vi->sh[i]) continue;
            uint32_t j = (uint32_t)vi->sh[i]->hash & (nc - 1);
            while (n[j])
                j = (j + 1) & (nc - 1);
            n[j] = vi->sh[i];
        }
        free(vi->sh);
        vi->sh = n;
        vi->sh_cap = nc;
    }
    uint32_t j = (uint32_t)x->hash & (vi->sh_cap - 1);
    while (vi->sh[j])
        j = (j + 1) & (vi->sh_cap - 1);
    vi->sh[j] = x;
    vi->sh_n++;
    vi->sh_bytes += bytes;
    x->bytes = bytes;
    x->shared = true;
    x->refs++;
    ok = true;
out:;
    /* free a few of the walks an eviction dropped (outside the mutex): at most grave_step per
     * publication, so no mask pays for thousands of frees; they are gone long before the cache
     * fills again (refilling half of it takes as many publications as walks were dropped) */
    struct shared_inner *dead[64];
    uint32_t nd = 0;
    while (nd < vi->grave_step && nd < 64 && vi->grave_n)
        dead[nd++] = vi->grave[--vi->grave_n];
    pthread_mutex_unlock(&vi->mu);
    for (uint32_t k = 0; k < nd; k++)
        wcache_payload_free(dead[k]);
    return ok;
}

void grammar_vocab_cache_stats(struct grammar_vocab_index *vi, struct grammar_walk_cache_stats *st)
{
    pthread_mutex_lock(&vi->mu);
    *st = (struct grammar_walk_cache_stats){
        .walks = vi->sh_n,
        .relaxed = vi->rsh_n,
        .bytes = vi->sh_bytes,
        .slots = vi->sh_cap,
        .drops = vi->sh_drops,
        .room_visits = vi->sh_room_visits,
        .room_max = vi->sh_room_max,
        .grow_max = vi->sh_grow_max,
    };
    pthread_mutex_unlock(&vi->mu);
}
