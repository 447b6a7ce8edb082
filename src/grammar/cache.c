/* cache — the LRU cache of compiled grammars keyed by (kind, source), thread-safe, bounded by
 * entries and bytes (docs/grammar.md "Sharing and threads", "Budgets"). */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

/* ------------------------------------------------------------------------------------------ */
/* LRU cache                                                                                   */

struct cache_entry {
    enum grammar_kind kind;
    char *src;
    size_t len;
    struct grammar *g;
    uint64_t used;
};

#define GRAMMAR_CACHE_MAX_BYTES ((size_t)1 << 30)

struct grammar_cache {
    pthread_mutex_t mu;
    const struct grammar_vocab_index *vi;
    struct cache_entry *e;
    size_t n, cap;
    uint64_t tick;
};

struct grammar_cache *grammar_cache_new(const struct grammar_vocab_index *vi, size_t capacity)
{
    struct grammar_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->cap = capacity ? capacity : 1;
    c->e = calloc(c->cap, sizeof *c->e);
    if (!c->e) {
        free(c);
        return NULL;
    }
    c->vi = vi;
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void grammar_cache_free(struct grammar_cache *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) {
        free(c->e[i].src);
        grammar_free(c->e[i].g);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* Bytes a grammar holds now (compiled form, lexer DFA, inner-walk cache). */
static size_t grammar_bytes(struct grammar *g)
{
    pthread_mutex_lock(&g->mu);
    size_t b = grammar_compile_bytes(g) + g->dfa.bytes + g->inner_bytes;
    pthread_mutex_unlock(&g->mu);
    return b;
}

/* Drops least recently used entries (other than keep) while the cached grammars hold more
 * than GRAMMAR_CACHE_MAX_BYTES (they grow after insertion: lazy DFA, caches). A dropped grammar
 * lives on while matchers hold it. Caller holds c->mu. */
static void cache_trim(struct grammar_cache *c, size_t keep)
{
    for (;;) {
        size_t total = 0, victim = c->n;
        for (size_t i = 0; i < c->n; i++) {
            total += grammar_bytes(c->e[i].g);
            if (i != keep && (victim == c->n || c->e[i].used < c->e[victim].used)) victim = i;
        }
        if (total <= GRAMMAR_CACHE_MAX_BYTES || victim == c->n) return;
        free(c->e[victim].src);
        grammar_free(c->e[victim].g);
        c->e[victim] = c->e[--c->n];
        if (keep == c->n) keep = victim;
    }
}

struct grammar *grammar_cache_get(struct grammar_cache *c, enum grammar_kind kind, const char *src,
                                  size_t len, struct err *e)
{
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n; i++) {
        struct cache_entry *x = &c->e[i];
        if (x->kind == kind && x->len == len && !memcmp(x->src, src, len)) {
            x->used = ++c->tick;
            struct grammar *g = grammar_ref(x->g);
            pthread_mutex_unlock(&c->mu);
            return g;
        }
    }
    pthread_mutex_unlock(&c->mu);
    struct grammar *g = grammar_compile(c->vi, kind, src, len, e);
    if (!g) return NULL;
    char *copy = malloc(len + 1);
    if (!copy) return g; /* usable, just not cached */
    memcpy(copy, src, len);
    copy[len] = 0;
    pthread_mutex_lock(&c->mu);
    size_t slot = c->n;
    if (c->n == c->cap) {
        slot = 0;
        for (size_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[slot].used) slot = i;
        free(c->e[slot].src);
        grammar_free(c->e[slot].g);
    } else {
        c->n++;
    }
    c->e[slot] = (struct cache_entry){kind, copy, len, grammar_ref(g), ++c->tick};
    cache_trim(c, slot);
    pthread_mutex_unlock(&c->mu);
    return g;
}

size_t grammar_cache_size(struct grammar_cache *c)
{
    pthread_mutex_lock(&c->mu);
    size_t n = c->n;
    pthread_mutex_unlock(&c->mu);
    return n;
}
