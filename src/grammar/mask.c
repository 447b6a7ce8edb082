/* mask — token masks: the trie walk from a lexer state, the inner-walk caches (per grammar and
 * shared across grammars by the canonical form of a lexer state), lexeme ends handed to the
 * parser, and the first mask probed at compile time (docs/grammar.md "Masks"). */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

/* ------------------------------------------------------------------------------------------ */
/* Masks                                                                                       */

static inline void set_bit(uint32_t *mask, int32_t t)
{
    mask[t >> 5] |= 1u << (t & 31);
}

static void walk(struct matcher *m, uint32_t node, uint32_t r, uint32_t s, bool empty)
{
    const struct grammar_vocab_index *vi = m->g->vi;
    struct rx_dfa *d = &m->g->dfa;
    uint32_t end = vi->tend[node];
    if (d->over_work) return;
    for (uint32_t c = node + 1; c < end; c = vi->tend[c]) {
        uint8_t b = vi->tbyte[c];
        uint32_t r2 = r, s2;
        uint32_t t = rx_dfa_next(d, s, b);
        if (t != RX_DEAD) {
            s2 = t;
        } else {
            bool e2 = empty;
            s2 = s;
            if (!matcher_advance(m, &r2, &s2, &e2, b, true)) continue;
        }
        for (int32_t tok = vi->ttok[c]; tok >= 0; tok = vi->tok_next[tok])
            set_bit(m->mask, tok);
        if (vi->tend[c] > c + 1) walk(m, c, r2, s2, false);
    }
}

struct inner_build {
    int32_t *list; /* token list mode (bits == NULL) */
    int32_t n_list, cap_list;
    uint32_t *bits;
    uint32_t *bound;
    uint32_t n_bound, cap_bound;
    bool oom;
};

static int list_push(struct inner_build *ib, int32_t t)
{
    if (ib->n_list == ib->cap_list) {
        int32_t nc = ib->cap_list ? ib->cap_list * 2 : 256;
        int32_t *n = realloc(ib->list, (size_t)nc * sizeof *n);
        if (!n) {
            ib->oom = true;
            return -1;
        }
        ib->list = n;
        ib->cap_list = nc;
    }
    ib->list[ib->n_list++] = t;
    return 0;
}

static int bound_push(struct inner_build *ib, uint32_t c, uint32_t s)
{
    if (ib->n_bound + 2 > ib->cap_bound) {
        uint32_t nc = ib->cap_bound ? ib->cap_bound * 2 : 64;
        uint32_t *nb = realloc(ib->bound, nc * sizeof *nb);
        if (!nb) {
            ib->oom = true;
            return -1;
        }
        ib->bound = nb;
        ib->cap_bound = nc;
    }
    ib->bound[ib->n_bound++] = c;
    ib->bound[ib->n_bound++] = s;
    return 0;
}

/* Iterative DFS over the trie from the root in lexer state s0, never crossing a lexeme end.
 * The hot loop of mask computation: nodes are visited in DFS order and each node's parent state
 * is S[depth-1], so there is no explicit stack and few unpredictable branches. */
/* Iterative DFS over the subtree of trie node r (r itself excluded) from lexer state s0, never
 * crossing a lexeme end. The hot loop of mask computation: nodes are visited in DFS order and a
 * node's parent state is S[depth - depth(r) - 1], so there is no explicit stack and few
 * unpredictable branches. Tokens go to ib->bits, or to ib->list when ib->bits is NULL. */
static void walk_inner_at(struct matcher *m, struct inner_build *ib, uint32_t r, uint32_t s0)
{
    const struct grammar_vocab_index *vi = m->g->vi;
    struct rx_dfa *d = &m->g->dfa;
    const struct tnode *tn = vi->tn;
    /* S[k]: state after the first k bytes below r, premultiplied by 256 */
    size_t *S = malloc(((size_t)vi->max_depth + 2) * sizeof *S);
    if (!S) {
        ib->oom = true;
        return;
    }
    S[0] = (size_t)s0 * 256;
    const uint32_t *trans = d->trans;
    uint32_t *bits = ib->bits;
    const uint32_t dummy = (uint32_t)vi->n_tokens; /* bits has a spare word for it */
    uint32_t n = tn[r].end;
    uint32_t base = tn[r].depth + 1u;
    for (uint32_t i = r + 1; i < n;) {
        const struct tnode *x = &tn[i];
        uint32_t pd = x->depth - base;
        uint32_t t = trans[S[pd] + x->byte];
        if (__builtin_expect(t == RX_UNKNOWN, 0)) {
            t = rx_dfa_compute(d, (uint32_t)(S[pd] / 256), x->byte);
            trans = d->trans; /* may have moved */
        }
        if (t == RX_DEAD) {
            uint32_t ps = (uint32_t)(S[pd] / 256);
            if (rx_dfa_accepting(d, ps) && bound_push(ib, i, ps)) break;
            i = x->end;
            continue;
        }
        if (bits) {
            uint32_t tk = x->tok >= 0 ? (uint32_t)x->tok : dummy;
            bits[tk >> 5] |= 1u << (tk & 31);
            if (__builtin_expect(x->dup, 0))
                for (int32_t o = vi->tok_next[x->tok]; o >= 0; o = vi->tok_next[o])
                    bits[o >> 5] |= 1u << (o & 31);
        } else if (x->tok >= 0) {
            for (int32_t o = x->tok; o >= 0; o = vi->tok_next[o])
                if (list_push(ib, o)) {
                    free(S);
                    return;
                }
        }
        S[pd + 1] = (size_t)t * 256;
        i++;
    }
    if (bits) bits[dummy >> 5] &= ~(1u << (dummy & 31));
    free(S);
}

static void walk_inner(struct matcher *m, struct inner_build *ib, uint32_t s0)
{
    walk_inner_at(m, ib, 0, s0);
}

/* Structural hash of the automaton reachable from NFA state q (breadth-first, successors
 * numbered in discovery order): equal hashes mean isomorphic automata, hence equal futures, even
 * for states of different terminals or grammars. Terminal ids are left out (walks only need to
 * know that a lexeme can end). Memoized per state. Caller holds g->mu. */
static const uint64_t *fh_get(struct grammar *g, int32_t q)
{
    uint64_t *h = &g->fh[2 * (size_t)q];
    if (h[0] | h[1]) return h;
    const struct rx_nfa *n = &g->nfa;
    if (++g->fh_gen == 0) {
        memset(g->fh_stamp, 0, ((size_t)n->n + 1) * sizeof *g->fh_stamp);
        g->fh_gen = 1;
    }
    uint64_t a = 1469598103934665603ull, b = 0x243f6a8885a308d3ull;
#define FHMIX(v)                                                                                   \
    do {                                                                                           \
        uint64_t v_ = (v);                                                                         \
        a = (a ^ v_) * 1099511628211ull;                                                           \
        b = (b ^ (v_ + 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;                            \
        b ^= b >> 29;                                                                              \
    } while (0)
    int32_t head = 0, tail = 0;
    g->fh_stamp[q] = g->fh_gen;
    g->fh_local[q] = tail;
    g->fh_queue[tail++] = q;
    while (head < tail) {
        const struct rx_nstate *st = &n->s[g->fh_queue[head++]];
        int32_t succ[2] = {-1, -1};
        FHMIX((uint64_t)st->kind << 16 | (uint64_t)st->lo << 8 | st->hi);
        switch (st->kind) {
        case NS_BYTE:
        case NS_EPS:
        case NS_BOL:
        case NS_EOL:
            succ[0] = st->out;
            break;
        case NS_SPLIT:
            succ[0] = st->out;
            succ[1] = st->out2;
            break;
        case NS_CNT_ENTER:
        case NS_CNT_END: {
            const struct rx_loop *L = &n->loops[st->loop];
            FHMIX((uint64_t)(uint32_t)L->min << 32 | (uint32_t)L->max);
            FHMIX((uint64_t)L->len + 3);
            succ[0] = L->body;
            succ[1] = L->cont;
            break;
        }
        case NS_CNT_TICK: {
            const struct rx_loop *L = &n->loops[st->loop];
            FHMIX((uint64_t)(uint32_t)L->min << 32 | (uint32_t)L->max);
            succ[0] = st->out;
            break;
        }
        default:
            break; /* ACCEPT */
        }
        for (int k = 0; k < 2; k++) {
            int32_t o = succ[k];
            if (o < 0) continue;
            if (g->fh_stamp[o] != g->fh_gen) {
                g->fh_stamp[o] = g->fh_gen;
                g->fh_local[o] = tail;
                g->fh_queue[tail++] = o;
            }
            FHMIX((uint64_t)g->fh_local[o] + 7);
        }
    }
#undef FHMIX
    g->dfa.work += (uint64_t)tail; /* mask budget: the walk over the reachable automaton */
    h[0] = a | 1;
    h[1] = b;
    return h;
}

/* Canonical form of lexer state s: its NFA threads as (structural hash of the automaton
 * reachable from the thread, loop counter class), sorted and deduplicated, plus whether s
 * accepts. Two states with the same form (in any grammars on this vocabulary) have the same
 * inner walk. Counters more than a token's length away from both loop bounds are
 * interchangeable. The key has 4 spare bytes (sub-walk keys append a trie node). */
struct kent {
    uint64_t h0, h1;
    uint32_t off, cc;
};

static int cmp_kent(const void *x, const void *y)
{
    const struct kent *a = x, *b = y;
    if (a->h0 != b->h0) return a->h0 < b->h0 ? -1 : 1;
    if (a->h1 != b->h1) return a->h1 < b->h1 ? -1 : 1;
    if (a->off != b->off) return a->off < b->off ? -1 : 1;
    return a->cc < b->cc ? -1 : a->cc > b->cc;
}

static uint8_t *inner_key(struct matcher *m, uint32_t s, size_t *len, uint64_t *hash)
{
    const struct grammar *g = m->g;
    size_t n = (size_t)g->dfa.st[s].n_kernel;
    uint8_t *key = malloc(n * sizeof(struct kent) + 5);
    if (!key) return NULL;
    struct kent *k = (struct kent *)key;
    int64_t D = (int64_t)g->vi->max_depth + 2;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = g->dfa.st[s].kernel[i];
        int32_t st = rx_thread_state(v);
        const uint64_t *fh = fh_get((struct grammar *)g, st);
        if (g->dfa.work_limit && g->dfa.work > g->dfa.work_limit) {
            ((struct grammar *)g)->dfa.over_work = true;
            free(key);
            return NULL;
        }
        uint32_t c1 = rx_thread_c1(v);
        uint32_t cc = c1;
        if (c1) {
            int32_t li = rx_nfa_loop_of(&g->nfa, st);
            if (li >= 0) {
                const struct rx_loop *L = &g->nfa.loops[li];
                int64_t c = c1;
                /* a length region also drops threads by the ticks still needed (regex.h) */
                int64_t dlo = L->len ? D + L->tmax_fin : D, dhi = L->len ? D + L->tmin_max : D;
                if (c + dlo < L->min)
                    cc = 0xfffffff0u;
                else if (c >= L->min && (L->max < 0 || c + dhi < L->max))
                    cc = 0xfffffff1u;
            }
        }
        k[i] = (struct kent){fh[0], fh[1], 0, cc};
    }
    struct rx_dfa *d = (struct rx_dfa *)&g->dfa;
    d->work += n;
    if (d->work_limit && d->work > d->work_limit) {
        d->over_work = true;
        free(key);
        return NULL;
    }
    qsort(k, n, sizeof *k, cmp_kent);
    size_t w = 0; /* equal futures: keep one */
    for (size_t i = 0; i < n; i++)
        if (w == 0 || cmp_kent(&k[w - 1], &k[i])) k[w++] = k[i];
    n = w;
    key[n * sizeof(struct kent)] = rx_dfa_accepting(&g->dfa, s) ? 1 : 0;
    *len = n * sizeof(struct kent) + 1;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < *len; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    *hash = h | 1;
    return key;
}

static struct shared_inner *shared_find(struct grammar_vocab_index *vi, const uint8_t *key,
                                        size_t len, uint64_t h)
{
    struct shared_inner *r = NULL;
    pthread_mutex_lock(&vi->mu);
    for (uint32_t j = (uint32_t)h & (vi->sh_cap - 1); vi->sh[j]; j = (j + 1) & (vi->sh_cap - 1)) {
        struct shared_inner *x = vi->sh[j];
        if (x->hash == h && x->key_len == len && !memcmp(x->key, key, len)) {
            r = x;
            break;
        }
    }
    pthread_mutex_unlock(&vi->mu);
    return r;
}

/* Publishes x (takes ownership) unless over budget; returns false if not published. */
static bool shared_add(struct grammar_vocab_index *vi, struct shared_inner *x, size_t bytes)
{
    bool ok = false;
    pthread_mutex_lock(&vi->mu);
    if (vi->sh_bytes + bytes > SHARED_CACHE_MAX_BYTES) goto out;
    if ((vi->sh_n + 1) * 2 > vi->sh_cap) {
        uint32_t nc = vi->sh_cap * 2;
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
    ok = true;
out:
    pthread_mutex_unlock(&vi->mu);
    return ok;
}

/* Local boundaries of a shared payload: the accepting state before each lexeme-end node,
 * recomputed from s along the node's path. */
static int localize(struct matcher *m, const struct shared_inner *x, uint32_t s,
                    struct inner_entry *e)
{
    const struct grammar_vocab_index *vi = m->g->vi;
    struct rx_dfa *d = &m->g->dfa;
    e->bound = malloc(((size_t)x->n_nodes * 2 + 1) * sizeof *e->bound);
    if (!e->bound) return -1;
    for (uint32_t i = 0; i < x->n_nodes; i++) {
        uint32_t c = x->nodes[i];
        const uint8_t *path = (const uint8_t *)vi->blob + vi->off[vi->rep[c]];
        uint32_t q = s;
        for (uint32_t k = 0; k + 1 < vi->tn[c].depth && q != RX_DEAD; k++)
            q = rx_dfa_next(d, q, path[k]);
        if (q == RX_DEAD || !rx_dfa_accepting(d, q)) continue; /* cannot happen for equal forms */
        e->bound[2 * e->n_bound] = c;
        e->bound[2 * e->n_bound + 1] = q;
        e->n_bound++;
    }
    return 0;
}

static struct inner_entry *inner_get(struct matcher *m, uint32_t s);

/* Stores the token set in x: as a list when it has fewer tokens than bits has words (bits is
 * freed), else as the bitset itself (x owns bits). Adds the bytes it takes to *bytes. Returns -1
 * on no memory, bits then still the caller's. */
static int payload_take_tokens(struct shared_inner *x, uint32_t *bits, size_t words, size_t *bytes)
{
    int32_t count = 0;
    for (size_t w = 0; w < words; w++)
        count += __builtin_popcount(bits[w]);
    if ((size_t)count < words) {
        x->list = malloc(((size_t)count + 1) * sizeof *x->list);
        if (!x->list) return -1;
        for (size_t w = 0; w < words; w++)
            for (uint32_t v = bits[w]; v; v &= v - 1)
                x->list[x->n_list++] = (int32_t)(w * 32 + (size_t)__builtin_ctz(v));
        free(bits);
        *bytes += (size_t)x->n_list * 4;
    } else {
        x->bits = bits;
        *bytes += words * 4;
    }
    return 0;
}

/* Completes x, whose nodes are set: takes the token set from bits (payload_take_tokens) and the
 * key, then publishes x, or leaves it owned by e when the shared cache is over budget. Returns -1
 * on no memory, bits and key then still the caller's. */
static int payload_finish(struct grammar_vocab_index *vi, struct shared_inner *x, uint32_t *bits,
                          size_t words, uint8_t *key, size_t klen, uint64_t h,
                          struct inner_entry *e)
{
    size_t bytes = sizeof *x + klen + x->n_nodes * 4;
    if (payload_take_tokens(x, bits, words, &bytes)) return -1;
    x->hash = h;
    x->key = key;
    x->key_len = klen;
    if (!shared_add(vi, x, bytes)) e->own = x;
    return 0;
}

/* Of the candidate lexeme-end nodes (no duplicates), keeps those where s's automaton accepts
 * before the node's byte and dies on it: into e->bound as (node, accepting state) pairs and into
 * x->nodes. Returns -1 on no memory (what was allocated is left in e and x for their cleanup). */
static int keep_boundaries(const struct grammar_vocab_index *vi, struct rx_dfa *d, uint32_t s,
                           const uint32_t *cand, size_t n_cand, struct inner_entry *e,
                           struct shared_inner *x)
{
    e->bound = malloc((n_cand * 2 + 1) * sizeof *e->bound);
    x->nodes = malloc((n_cand + 1) * sizeof *x->nodes);
    if (!e->bound || !x->nodes) return -1;
    for (size_t i = 0; i < n_cand; i++) {
        uint32_t c = cand[i];
        const uint8_t *path = (const uint8_t *)vi->blob + vi->off[vi->rep[c]];
        uint32_t q = s;
        for (uint32_t j = 0; j + 1 < vi->tn[c].depth && q != RX_DEAD; j++)
            q = rx_dfa_next(d, q, path[j]);
        if (q == RX_DEAD || !rx_dfa_accepting(d, q)) continue;
        if (rx_dfa_next(d, q, vi->tn[c].byte) != RX_DEAD) continue;
        e->bound[2 * e->n_bound] = c;
        e->bound[2 * e->n_bound + 1] = q;
        e->n_bound++;
        x->nodes[x->n_nodes++] = c;
    }
    return 0;
}

/* A state whose threads belong to several terminals (e.g. a free string key next to literal
 * keys): the tokens staying alive are the union over its per-terminal parts, whose walks are
 * cached and shared; lexeme ends are among the parts' lexeme ends (plus the root's children when
 * s itself accepts), kept where s's own automaton really ends there. Returns the new payload
 * (published or owned by e) or NULL when s has a single part (or on failure: the caller walks). */
static struct shared_inner *union_inner(struct matcher *m, uint32_t s, uint8_t *key, size_t klen,
                                        uint64_t h, struct inner_entry *e)
{
    struct grammar *g = m->g;
    struct grammar_vocab_index *vi = (struct grammar_vocab_index *)g->vi;
    struct rx_dfa *d = &g->dfa;
    int32_t nk = d->st[s].n_kernel;
    if (nk < 2) return NULL;
    uint64_t *k = malloc((size_t)nk * sizeof *k);
    if (!k) return NULL;
    memcpy(k, d->st[s].kernel, (size_t)nk * sizeof *k);
    /* group threads by terminal (kernel is sorted by counter then state: sort by terminal) */
    int32_t nparts = 0;
    uint32_t parts[64];
    for (int32_t i = 0; i < nk;) {
        int32_t t = g->nfa_term[rx_thread_state(k[i])];
        int32_t j = i;
        /* collect all threads of terminal t (they may not be adjacent) */
        uint64_t *sub = malloc((size_t)nk * sizeof *sub);
        if (!sub) goto fail;
        int32_t ns = 0;
        for (int32_t q = i; q < nk; q++)
            if (g->nfa_term[rx_thread_state(k[q])] == t) sub[ns++] = k[q];
        /* move the others to the front of the remaining range */
        int32_t w = i;
        for (int32_t q = i; q < nk; q++)
            if (g->nfa_term[rx_thread_state(k[q])] != t) k[w++] = k[q];
        nk = w;
        (void)j;
        if (ns == d->st[s].n_kernel || nparts == 64) { /* single part, or too many parts */
            free(sub);
            goto fail;
        }
        uint32_t ps = rx_dfa_from_kernel(d, sub, ns);
        free(sub);
        if (ps == RX_DEAD) goto fail;
        parts[nparts++] = ps;
    }
    free(k);
    k = NULL;
    size_t words = ((size_t)vi->n_tokens + 31) / 32;
    struct shared_inner *x = calloc(1, sizeof *x);
    uint32_t *bits = calloc(words, sizeof *bits);
    uint32_t *cand = NULL;
    size_t n_cand = 0, cap_cand = 0;
    if (!x || !bits) goto fail2;
    for (int32_t p = 0; p < nparts; p++) {
        struct inner_entry *pe = inner_get(m, parts[p]);
        if (!pe) goto fail2;
        if (pe->bits)
            for (size_t w = 0; w < words; w++)
                bits[w] |= pe->bits[w];
        else
            for (int32_t i = 0; i < pe->n_list; i++)
                bits[pe->list[i] >> 5] |= 1u << (pe->list[i] & 31);
        if (n_cand + pe->n_bound + 1 > cap_cand) {
            cap_cand = (n_cand + pe->n_bound + 1) * 2;
            uint32_t *nc = realloc(cand, cap_cand * sizeof *nc);
            if (!nc) goto fail2;
            cand = nc;
        }
        for (uint32_t i = 0; i < pe->n_bound; i++)
            cand[n_cand++] = pe->bound[2 * i];
    }
    if (rx_dfa_accepting(d, s)) { /* lexeme ends right at the root */
        for (uint32_t c = 1; c < vi->tn[0].end; c = vi->tn[c].end) {
            if (n_cand + 1 > cap_cand) {
                cap_cand = (n_cand + 1) * 2;
                uint32_t *nc = realloc(cand, cap_cand * sizeof *nc);
                if (!nc) goto fail2;
                cand = nc;
            }
            cand[n_cand++] = c;
        }
    }
    /* parts may share lexeme ends: sort and drop the repeats */
    qsort(cand, n_cand, sizeof *cand, grammar_cmp_u32);
    size_t n_uniq = 0;
    for (size_t i = 0; i < n_cand; i++)
        if (n_uniq == 0 || cand[n_uniq - 1] != cand[i]) cand[n_uniq++] = cand[i];
    if (keep_boundaries(vi, d, s, cand, n_uniq, e, x) || d->over_work) goto fail2;
    free(cand);
    cand = NULL;
    if (payload_finish(vi, x, bits, words, key, klen, h, e)) goto fail2;
    return x;
fail2:
    free(cand);
    free(bits);
    free(e->bound);
    e->bound = NULL;
    e->n_bound = 0;
    if (x) free(x->nodes);
    free(x);
    return NULL;
fail:
    free(k);
    return NULL;
}

/* The walk of the subtree under root child c from state t (= s after c's byte), c's own tokens
 * included: cached and shared by (canonical form of t, c). Returns the payload, published or
 * (*priv) to be freed by the caller; NULL on failure. */
static struct shared_inner *sub_get(struct matcher *m, uint32_t t, uint32_t c, bool *priv)
{
    struct grammar_vocab_index *vi = (struct grammar_vocab_index *)m->g->vi;
    size_t klen;
    uint64_t h;
    uint8_t *key = inner_key(m, t, &klen, &h);
    if (!key) return NULL;
    memcpy(key + klen, &c, 4);
    klen += 4;
    h = (h ^ c) * 1099511628211ull | 1;
    *priv = false;
    struct shared_inner *x = shared_find(vi, key, klen, h);
    if (x) {
        free(key);
        return x;
    }
    struct inner_build ib = {0};
    x = calloc(1, sizeof *x);
    if (!x) goto fail;
    for (int32_t o = vi->tn[c].tok; o >= 0; o = vi->tok_next[o])
        if (list_push(&ib, o)) goto fail;
    walk_inner_at(m, &ib, c, t);
    if (ib.oom || m->g->dfa.over_work) goto fail;
    x->list = ib.list;
    x->n_list = ib.n_list;
    ib.list = NULL;
    x->n_nodes = ib.n_bound / 2;
    x->nodes = malloc(((size_t)x->n_nodes + 1) * sizeof *x->nodes);
    if (!x->nodes) goto fail;
    for (uint32_t i = 0; i < x->n_nodes; i++)
        x->nodes[i] = ib.bound[2 * i];
    free(ib.bound);
    x->hash = h;
    x->key = key;
    x->key_len = klen;
    if (!shared_add(vi, x, sizeof *x + klen + (size_t)x->n_list * 4 + (size_t)x->n_nodes * 4))
        *priv = true;
    return x;
fail:
    free(ib.list);
    free(ib.bound);
    if (x) free(x->nodes);
    free(x);
    free(key);
    return NULL;
}

static void payload_free(struct shared_inner *x)
{
    if (!x) return;
    free(x->key);
    free(x->bits);
    free(x->list);
    free(x->nodes);
    free(x);
}

#define COMPOSE_MIN_CHILDREN 8

/* A state that lets many first bytes through (free text): its walk is the union of the walks
 * of the root's subtrees from s's successor states, each cached by (canonical successor, first
 * byte). States that are new as a whole (every prefix of a key of an object that also allows
 * other keys) mostly reach successors seen before, so they cost lookups instead of a walk.
 * Lexeme ends are kept where s's own automaton ends. Returns the payload (published, or owned by
 * e) or NULL (not worth it / failure: the caller walks). */
static struct shared_inner *compose_inner(struct matcher *m, uint32_t s, uint8_t *key, size_t klen,
                                          uint64_t h, struct inner_entry *e)
{
    struct grammar *g = m->g;
    struct grammar_vocab_index *vi = (struct grammar_vocab_index *)g->vi;
    struct rx_dfa *d = &g->dfa;
    const struct tnode *tn = vi->tn;
    int alive = 0;
    for (uint32_t c = 1; c < tn[0].end; c = tn[c].end)
        alive += rx_dfa_next(d, s, tn[c].byte) != RX_DEAD;
    if (alive < COMPOSE_MIN_CHILDREN) return NULL;
    size_t words = ((size_t)vi->n_tokens + 31) / 32;
    bool acc = rx_dfa_accepting(d, s);
    uint32_t *bits = calloc(words, sizeof *bits);
    uint32_t *cand = NULL;
    size_t n_cand = 0, cap_cand = 0;
    struct shared_inner *x = calloc(1, sizeof *x);
    if (!bits || !x) goto fail;
    for (uint32_t c = 1; c < tn[0].end; c = tn[c].end) {
        uint32_t t = rx_dfa_next(d, s, tn[c].byte);
        size_t need = n_cand + 1;
        struct shared_inner *sub = NULL;
        bool priv = false;
        if (t != RX_DEAD) {
            sub = sub_get(m, t, c, &priv);
            if (!sub) goto fail;
            for (int32_t i = 0; i < sub->n_list; i++)
                bits[sub->list[i] >> 5] |= 1u << (sub->list[i] & 31);
            need += sub->n_nodes;
        } else if (!acc) {
            continue;
        }
        if (need > cap_cand) {
            cap_cand = need * 2 + 64;
            uint32_t *nc = realloc(cand, cap_cand * sizeof *nc);
            if (!nc) {
                if (priv) payload_free(sub);
                goto fail;
            }
            cand = nc;
        }
        if (sub) {
            memcpy(cand + n_cand, sub->nodes, sub->n_nodes * sizeof *cand);
            n_cand += sub->n_nodes;
        } else {
            cand[n_cand++] = c; /* the lexeme ends right at the root */
        }
        if (priv) payload_free(sub);
    }
    if (keep_boundaries(vi, d, s, cand, n_cand, e, x) || d->over_work) goto fail;
    free(cand);
    cand = NULL;
    if (payload_finish(vi, x, bits, words, key, klen, h, e)) goto fail;
    return x;
fail:
    free(bits);
    free(cand);
    free(e->bound);
    e->bound = NULL;
    e->n_bound = 0;
    if (x) {
        free(x->nodes);
        free(x->list);
    }
    free(x);
    return NULL;
}

/* Drops every local inner entry (over budget; shared payloads stay in the vocabulary index).
 * Safe because an entry is used only under g->mu until the next inner_get call (union_inner
 * copies what it needs from a part before asking for the next one). */
static void inner_flush(struct grammar *g)
{
    for (int32_t i = 0; i < g->inner_cap; i++) {
        struct inner_entry *x = g->inner[i];
        if (!x) continue;
        payload_free(x->own);
        free(x->bound);
        free(x);
        g->inner[i] = NULL;
    }
    g->inner_bytes = 0;
}

/* The cached inner entry of state s, computing it if needed (flushing the grammar's entries
 * when over budget); NULL on allocation failure. Caller holds g->mu. */
static struct inner_entry *inner_get(struct matcher *m, uint32_t s)
{
    struct grammar *g = m->g;
    if ((int32_t)s < g->inner_cap && g->inner[s]) return g->inner[s];
    if (g->inner_bytes > INNER_CACHE_MAX_BYTES) inner_flush(g);
    if ((int32_t)s >= g->inner_cap) {
        int32_t nc = g->inner_cap ? g->inner_cap : 64;
        while (nc <= (int32_t)s)
            nc *= 2;
        struct inner_entry **n = realloc(g->inner, (size_t)nc * sizeof *n);
        if (!n) return NULL;
        memset(n + g->inner_cap, 0, (size_t)(nc - g->inner_cap) * sizeof *n);
        g->inner = n;
        g->inner_cap = nc;
    }
    struct grammar_vocab_index *vi = (struct grammar_vocab_index *)g->vi;
    size_t words = ((size_t)vi->n_tokens + 31) / 32;
    size_t klen;
    uint64_t h;
    uint8_t *key = inner_key(m, s, &klen, &h);
    if (!key) return NULL;
    struct inner_entry *e = calloc(1, sizeof *e);
    if (!e) {
        free(key);
        return NULL;
    }
    struct shared_inner *x = shared_find(vi, key, klen, h);
    if (!x && (x = union_inner(m, s, key, klen, h, e)) != NULL) {
        key = NULL; /* owned by x */
        goto done;
    }
    if (!x && (x = compose_inner(m, s, key, klen, h, e)) != NULL) {
        key = NULL; /* owned by x */
        goto done;
    }
    if (!x && g->dfa.over_work) {
        free(key);
        free(e);
        return NULL;
    }
    if (x) {
        free(key);
        if (localize(m, x, s, e) || g->dfa.over_work) {
            free(e->bound);
            free(e);
            return NULL;
        }
    } else {
        struct inner_build ib = {0};
        x = calloc(1, sizeof *x);
        ib.bits = calloc(words + 1, sizeof *ib.bits);
        if (!x || !ib.bits) goto fail;
        walk_inner(m, &ib, s);
        if (ib.oom || g->dfa.over_work) goto fail;
        x->n_nodes = ib.n_bound / 2;
        x->nodes = malloc(((size_t)x->n_nodes + 1) * sizeof *x->nodes);
        if (!x->nodes) goto fail;
        for (uint32_t i = 0; i < x->n_nodes; i++)
            x->nodes[i] = ib.bound[2 * i];
        if (payload_finish(vi, x, ib.bits, words, key, klen, h, e)) goto fail;
        ib.bits = NULL;
        key = NULL;
        e->bound = ib.bound; /* (node, state) pairs are this grammar's own */
        e->n_bound = ib.n_bound / 2;
        goto done;
    fail:
        free(ib.bits);
        free(ib.bound);
        if (x) {
            free(x->list);
            free(x->nodes);
            free(x);
        }
        free(key);
        free(e);
        return NULL;
    }
done:
    e->bits = x->bits;
    e->list = x->list;
    e->n_list = x->n_list;
    g->inner_bytes += sizeof *e + (size_t)e->n_bound * 8 + (e->own ? words * 4 : 0);
    g->inner[s] = e;
    return e;
}

static void mask_from(struct matcher *m, uint32_t r, uint32_t s, bool empty)
{
    struct inner_entry *x = inner_get(m, s);
    if (!x) {
        walk(m, 0, r, s, empty); /* returns at once when the mask budget is spent */
        return;
    }
    const struct grammar_vocab_index *vi = m->g->vi;
    struct rx_dfa *d = &m->g->dfa;
    if (x->bits) {
        size_t words = ((size_t)vi->n_tokens + 31) / 32;
        memcpy(m->mask, x->bits, words * sizeof *x->bits);
    } else {
        for (int32_t i = 0; i < x->n_list; i++)
            set_bit(m->mask, x->list[i]);
    }
    for (uint32_t i = 0; i < x->n_bound; i++) {
        uint32_t c = x->bound[2 * i], sa = x->bound[2 * i + 1];
        int32_t r2 = matcher_scan_memo(m, r, sa);
        if (r2 < 0) continue;
        uint8_t b = vi->tbyte[c];
        uint32_t t = rx_dfa_next(d, m->rows[r2].lex, b);
        if (t == RX_DEAD) continue;
        for (int32_t tok = vi->ttok[c]; tok >= 0; tok = vi->tok_next[tok])
            set_bit(m->mask, tok);
        if (vi->tend[c] > c + 1) walk(m, c, (uint32_t)r2, t, false);
    }
}

static void allow_specials(struct matcher *m, int32_t r)
{
    const struct grammar *g = m->g;
    const struct row *R = &m->rows[r];
    for (uint32_t x = R->start; x < R->start + R->n; x++) {
        int32_t sym = g->flat[m->items[x].pos];
        if (!(sym & (SYM_NT | SYM_END)) && g->terms[sym].special >= 0)
            set_bit(m->mask, g->terms[sym].special);
    }
}

/* Computes the first mask under the budgets, so a grammar whose very first token is over budget
 * fails to compile (a 400 before any generation) and the first mask of each request is cached. */
int mask_probe_first(struct grammar *g, struct err *e)
{
    size_t words = ((size_t)g->vi->n_tokens + 31) / 32;
    uint32_t *mask = malloc(words * sizeof *mask);
    struct matcher *m = mask ? matcher_new(g, e) : NULL;
    int rc = 0;
    if (!mask)
        rc = err_set(e, ERR_NOMEM, "out of memory");
    else if (!m)
        rc = -1;
    else {
        matcher_mask(m, mask);
        rc = matcher_status(m, e);
    }
    matcher_free(m);
    free(mask);
    return rc;
}

void matcher_mask(struct matcher *m, uint32_t *bitset_out)
{
    const struct grammar_vocab_index *vi = m->g->vi;
    size_t words = ((size_t)vi->n_tokens + 31) / 32;
    memset(bitset_out, 0, words * sizeof *bitset_out);
    if (m->ended || m->oom) return;
    struct grammar *g = m->g;
    pthread_mutex_lock(&g->mu);
    matcher_budget_begin(m);
    uint32_t nr = m->n_rows, ni = m->n_items;
    uint32_t top = nr - 1;
    m->mask = bitset_out;
    if (++m->memo_gen == 0) {
        memset(m->memo, 0, sizeof m->memo);
        m->memo_gen = 1;
    }
    mask_from(m, top, m->cur, m->empty);
    bool has_eos = vi->eos >= 0 && vi->eos < vi->n_tokens;
    if (has_eos) bitset_out[vi->eos >> 5] &= ~(1u << (vi->eos & 31));
    int32_t re = matcher_end_lexeme(m, top, m->cur, m->empty, true);
    if (vi->n_specials && re >= 0) allow_specials(m, re); /* may allow eos as a terminal */
    bool accept = re >= 0 && m->rows[re].accept;
    matcher_truncate(m, nr, ni);
    matcher_budget_end(m);
    if (m->oom) memset(bitset_out, 0, words * sizeof *bitset_out);
    pthread_mutex_unlock(&g->mu);
    if (has_eos && accept && !m->oom) set_bit(bitset_out, vi->eos);
}
