/* walk_cache — the vocabulary's shared cache of inner walks (struct shared_inner, keyed by the
 * canonical form of a lexer state) and of relaxed walks (struct rdata, mask.c "Counts out of
 * the lexer state"), shared by every grammar on the vocabulary: lookup, publication,
 * references, and making room a few walks at a time when it is nearly full (docs/grammar.md
 * "Sharing and threads"). Guarded by vi->mu. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/mem.h"
#include "grammar/grammar_int.h"

/* The monotonic clock in ns (the room-making statistics): ~30 ns a call through the vDSO; the
 * thread CPU clock is a system call, ~1.3 µs on the shared VM, twice per publication, which
 * cost more than a sweep. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void wcache_payload_free(struct shared_inner *x)
{
    if (!x) return;
    free(x->key);
    free(x->bits);
    free(x->list);
    free(x->nodes);
    free(x);
}

/* The slot of table t (cap slots, 0: none) holding key (hash h), UINT32_MAX if none; the
 * entries are walks (struct shared_inner) or, relaxed, relaxed walks (struct rdata). Caller
 * holds vi->mu. */
static uint32_t slot_find(const struct wcache_slot *t, uint32_t cap, bool relaxed, uint64_t h,
                          const uint8_t *key, size_t len)
{
    const uint32_t mk = cap - 1;
    for (uint32_t j = (uint32_t)h & mk; cap && t[j].x; j = (j + 1) & mk) {
        if (t[j].hash != h) continue;
        const struct rdata *r = t[j].x;
        const struct shared_inner *w = t[j].x;
        const uint8_t *k = relaxed ? r->key : w->key;
        if ((relaxed ? r->key_len : w->key_len) == len && !memcmp(k, key, len)) return j;
    }
    return UINT32_MAX;
}

struct shared_inner *wcache_find(struct grammar_vocab_index *vi, const uint8_t *key, size_t len,
                                 uint64_t h)
{
    pthread_mutex_lock(&vi->mu);
    uint32_t j = slot_find(vi->sh, vi->sh_cap, false, h, key, len);
    struct shared_inner *x = j == UINT32_MAX ? NULL : vi->sh[j].x;
    if (x) {
        x->refs++; /* the caller's */
        vi->sh[j].hit = true;
    }
    pthread_mutex_unlock(&vi->mu);
    return x;
}

void mask_release(struct grammar_vocab_index *vi, struct shared_inner *x)
{
    if (!x) return;
    pthread_mutex_lock(&vi->mu);
    int32_t r = --x->refs;
    pthread_mutex_unlock(&vi->mu);
    if (r == 0) wcache_payload_free(x);
}

/* Empties slot i of table t of cap slots (linear probing, no tombstones): each later entry of
 * the run moves back into the hole when its home slot is not between the hole and itself, so
 * every entry stays reachable from its home. Caller holds vi->mu. */
static void slot_delete(struct wcache_slot *t, uint32_t cap, uint32_t i)
{
    uint32_t mk = cap - 1;
    for (uint32_t j = (i + 1) & mk; t[j].x; j = (j + 1) & mk) {
        uint32_t home = (uint32_t)t[j].hash & mk;
        if (((j - home) & mk) >= ((j - i) & mk)) {
            t[i] = t[j];
            i = j;
        }
    }
    t[i] = (struct wcache_slot){0, NULL, false};
}

/* Drops walk x from the cache (it lives on while an inner entry holds it; with no holder it
 * waits in the graveyard, freed a few per publication). Caller holds vi->mu and has taken x
 * out of the table. */
static void drop(struct grammar_vocab_index *vi, struct shared_inner *x)
{
    vi->sh_bytes -= x->bytes;
    vi->sh_n--;
    vi->sh_drops++;
    if (--x->refs) return;
    if (vi->grave_n == vi->grave_cap) {
        uint32_t nc = vi->grave_cap ? vi->grave_cap * 2 : 256;
        struct shared_inner **ng = realloc(vi->grave, nc * sizeof *ng);
        if (!ng) { /* no memory for the list: free it now */
            wcache_payload_free(x);
            return;
        }
        vi->grave = ng;
        vi->grave_cap = nc;
    }
    vi->grave[vi->grave_n++] = x;
    if (vi->grave_n > vi->grave_max) vi->grave_max = vi->grave_n;
}

/* Drops relaxed walk x from the cache (it lives on while a grammar's rpay holds it). Caller
 * holds vi->mu and has taken x out of the table. */
static void rdrop(struct grammar_vocab_index *vi, struct rdata *x)
{
    vi->sh_bytes -= x->bytes;
    vi->rsh_n--;
    vi->sh_rdrops++;
    if (--x->refs == 0) wcache_rdata_free(x);
}

/* Makes room a little at a time (a clock over a table: the walks', or the relaxed walks' when
 * relaxed): from the hand on, a walk found since the hand last passed loses its mark (second
 * chance), one not found is dropped, until need more bytes fit under limit or sh_sweep walks
 * (WCACHE_SWEEP_SLOTS_PER_WALK times as many slots, never the whole table twice) were
 * examined. The hand stays on a slot it emptied (slot_delete may move a later walk into it).
 * It used to drop every unmarked walk in one pass over the table into a new table, freeing
 * half the cache inside one mask (6.5-17.5 ms on a full 256 MB cache: docs/jsonschema.md
 * "MaskBench results"), and never dropped relaxed walks. Returns the walks examined. Caller
 * holds vi->mu. */
static uint64_t sweep(struct grammar_vocab_index *vi, bool relaxed, size_t need, size_t limit)
{
    struct wcache_slot *t = relaxed ? vi->rsh : vi->sh;
    uint32_t cap = relaxed ? vi->rsh_cap : vi->sh_cap;
    uint64_t *hand = relaxed ? &vi->rsh_hand : &vi->sh_hand;
    uint64_t walks = 0, slots = 0, dropped = 0;
    uint64_t max_slots = (uint64_t)vi->sh_sweep * WCACHE_SWEEP_SLOTS_PER_WALK;
    if (max_slots > cap) max_slots = cap;
    while (vi->sh_bytes + need > limit && walks < vi->sh_sweep && slots < max_slots) {
        uint32_t i = *hand & (cap - 1);
        void *x = t[i].x;
        slots++;
        if (!x) {
            ++*hand;
            continue;
        }
        walks++;
        if (t[i].hit) {
            t[i].hit = false;
            ++*hand;
            continue;
        }
        slot_delete(t, cap, i);
        if (relaxed)
            rdrop(vi, x);
        else
            drop(vi, x);
        dropped++;
    }
    if (dropped) vi->sh_evictions++;
    return walks;
}

/* Makes room for bytes more from the last 1/WCACHE_RESERVE_DIV of the budget on: the walks'
 * clock first, then the relaxed walks'. Caller holds vi->mu. */
static void make_room(struct grammar_vocab_index *vi, size_t bytes)
{
    size_t high = vi->sh_max_bytes - vi->sh_max_bytes / WCACHE_RESERVE_DIV;
    if (vi->sh_bytes + bytes <= high) return;
    uint64_t t0 = now_ns(), visits = 0;
    if (vi->sh_n) visits += sweep(vi, false, bytes, high);
    if (vi->rsh_n && vi->sh_bytes + bytes > high) visits += sweep(vi, true, bytes, high);
    uint64_t t = now_ns() - t0;
    vi->sh_room_ns += t;
    if (t > vi->sh_room_ns_max) vi->sh_room_ns_max = t;
    vi->sh_room_visits += visits;
    if (visits > vi->sh_room_max) vi->sh_room_max = visits;
}

int wcache_table_new(struct grammar_vocab_index *vi)
{
    size_t cap = 1024;
    while (cap < vi->sh_max_bytes / WCACHE_BYTES_PER_SLOT && cap < ((size_t)1 << 28))
        cap *= 2;
    vi->sh = calloc(cap, sizeof *vi->sh);
    if (!vi->sh) return -1;
    /* its pages now: calloc's zero pages are mapped on first touch, which put ~6 ms of page
     * faults into whichever mask first wrote across the table */
    (void)mem_populate(vi->sh, cap * sizeof *vi->sh);
    vi->sh_cap = (uint32_t)cap;
    return 0;
}

/* Rehashes table *t of *cap slots into nc slots (the hand starts over). -1: no memory (the
 * table unchanged). The hashes are in the slots: a sequential pass, no walk touched. */
static int table_grow(struct grammar_vocab_index *vi, struct wcache_slot **t, uint32_t *cap,
                      uint64_t *hand, uint32_t nc)
{
    if (*cap > vi->sh_grow_max) vi->sh_grow_max = *cap;
    uint64_t g0 = now_ns();
    struct wcache_slot *n = calloc(nc, sizeof *n);
    if (!n) return -1;
    for (uint32_t i = 0; i < *cap; i++) {
        if (!(*t)[i].x) continue;
        uint32_t j = (uint32_t)(*t)[i].hash & (nc - 1);
        while (n[j].x)
            j = (j + 1) & (nc - 1);
        n[j] = (*t)[i];
    }
    free(*t);
    *t = n;
    *cap = nc;
    *hand = 0;
    uint64_t gt = now_ns() - g0;
    vi->sh_grow_ns += gt;
    if (gt > vi->sh_grow_ns_max) vi->sh_grow_ns_max = gt;
    return 0;
}

/* Puts x (hash h) into table t of cap slots, marked: a new walk lives until the hand has
 * passed it twice (a hand just behind its slot would otherwise drop it before the next grammar
 * can find it). */
static void table_put(struct wcache_slot *t, uint32_t cap, uint64_t h, void *x)
{
    uint32_t j = (uint32_t)h & (cap - 1);
    while (t[j].x)
        j = (j + 1) & (cap - 1);
    t[j] = (struct wcache_slot){h, x, true};
}

/* Puts x (hash h, bytes) into the walks' table or, relaxed, the relaxed walks', once there is
 * room: false (nothing changed) when it still does not fit or the table cannot grow. A full cache
 * drops walks to take new ones: a long-running server meets new schemas for ever, and a cache
 * that only grew made every new state a trie walk once full (MaskBench in one process: ~1,900
 * schemas). Room is made from the last 1/WCACHE_RESERVE_DIV of the budget on, a bounded sweep per
 * publication; a walk that still does not fit stays its grammar's (sh_refused). Caller holds
 * vi->mu. */
static bool publish(struct grammar_vocab_index *vi, bool relaxed, void *x, uint64_t h, size_t bytes)
{
    make_room(vi, bytes);
    if (vi->sh_bytes + bytes > vi->sh_max_bytes) {
        vi->sh_refused++;
        return false;
    }
    struct wcache_slot **t = relaxed ? &vi->rsh : &vi->sh;
    uint32_t *cap = relaxed ? &vi->rsh_cap : &vi->sh_cap, *n = relaxed ? &vi->rsh_n : &vi->sh_n;
    if ((*n + 1) * 2 > *cap) {
        /* the walks' table is made at its budget's size (wcache_table_new) and grows only past
         * half of it; the relaxed walks' (few) doubles from 64 */
        uint32_t nc = *cap ? *cap * 2 : 64;
        if (nc > (1u << 28) || table_grow(vi, t, cap, relaxed ? &vi->rsh_hand : &vi->sh_hand, nc))
            return false;
    }
    table_put(*t, *cap, h, x);
    ++*n;
    vi->sh_bytes += bytes;
    return true;
}

bool wcache_add(struct grammar_vocab_index *vi, struct shared_inner *x, size_t bytes)
{
    pthread_mutex_lock(&vi->mu);
    bool ok = publish(vi, false, x, x->hash, bytes);
    if (ok) {
        x->bytes = bytes;
        x->shared = true;
        x->refs++;
    }
    /* free a few of the walks dropped earlier (outside the mutex): at most grave_step per
     * publication, so no mask pays for many frees */
    struct shared_inner *dead[64];
    uint32_t nd = 0;
    while (nd < vi->grave_step && nd < 64 && vi->grave_n)
        dead[nd++] = vi->grave[--vi->grave_n];
    pthread_mutex_unlock(&vi->mu);
    for (uint32_t k = 0; k < nd; k++)
        wcache_payload_free(dead[k]);
    return ok;
}

void wcache_rdata_free(struct rdata *d)
{
    if (!d) return;
    free(d->key);
    free(d->toks);
    free(d->cum);
    free(d->b);
    free(d->grp);
    free(d);
}

struct rdata *wcache_rfind(struct grammar_vocab_index *vi, const uint8_t *key, size_t len,
                           uint64_t h)
{
    pthread_mutex_lock(&vi->mu);
    uint32_t j = slot_find(vi->rsh, vi->rsh_cap, true, h, key, len);
    struct rdata *x = j == UINT32_MAX ? NULL : vi->rsh[j].x;
    if (x) {
        x->refs++; /* the caller's */
        vi->rsh[j].hit = true;
    }
    pthread_mutex_unlock(&vi->mu);
    return x;
}

bool wcache_radd(struct grammar_vocab_index *vi, struct rdata *x)
{
    size_t bytes = sizeof *x + x->key_len + (size_t)x->n_toks * 4 + ((size_t)x->maxneed + 3) * 4 +
                   (size_t)x->n_b * sizeof *x->b + (size_t)x->n_grp * sizeof *x->grp;
    pthread_mutex_lock(&vi->mu);
    bool ok = publish(vi, true, x, x->hash, bytes);
    if (ok) {
        x->bytes = bytes;
        x->refs = 2; /* the cache's and the caller's */
    }
    pthread_mutex_unlock(&vi->mu);
    return ok;
}

void wcache_rrelease(struct grammar_vocab_index *vi, struct rdata *x)
{
    if (!x) return;
    pthread_mutex_lock(&vi->mu);
    int32_t r = --x->refs;
    pthread_mutex_unlock(&vi->mu);
    if (r == 0) wcache_rdata_free(x);
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
        .room_ns = vi->sh_room_ns,
        .room_ns_max = vi->sh_room_ns_max,
        .grow_ns = vi->sh_grow_ns,
        .grow_ns_max = vi->sh_grow_ns_max,
        .refused = vi->sh_refused,
        .relaxed_drops = vi->sh_rdrops,
    };
    pthread_mutex_unlock(&vi->mu);
}
