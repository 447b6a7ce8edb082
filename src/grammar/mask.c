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
        m->g->trie_steps++;
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
    int32_t *list; /* token list mode (bits == NULL): this thread's scratch (SCR_LIST), room for
                    * every token and one more, which a walk lists at most once each */
    int32_t n_list;
    uint32_t *bits;
    uint32_t *bound;
    uint32_t n_bound, cap_bound;
    bool oom;
};

/* Per-thread lists that hold every token of the vocabulary, reused walk after walk: a walk
 * lists each token at most once, so appends need no growth and no branch, and what a walk keeps
 * is one exact copy. SCR_LIST: a subtree walk's tokens (sub_get; growing lists by realloc, one
 * append branch per trie node and their fresh pages took half of a composition: 7.4 -> 3.5 ms
 * for Github_easy---o68334's free strings, 146 subtree walks over 325,848 nodes); SCR_RELAX: a
 * relaxed walk's (need, token) pairs (relax_walk), two lists of n + 1. Freed at thread exit. */
enum { SCR_LIST, SCR_RELAX, SCR_N };
static pthread_key_t g_scratch_key[SCR_N];
static pthread_once_t g_scratch_once = PTHREAD_ONCE_INIT;
static __thread int32_t *t_scratch[SCR_N];
static __thread size_t t_scratch_n[SCR_N];

static void scratch_key_make(void)
{
    for (int k = 0; k < SCR_N; k++)
        (void)pthread_key_create(&g_scratch_key[k], free);
}

/* This thread's scratch k of at least n entries, or NULL (no memory). */
static int32_t *token_scratch(int k, size_t n)
{
    if (t_scratch_n[k] >= n) return t_scratch[k];
    pthread_once(&g_scratch_once, scratch_key_make);
    int32_t *p = malloc(n * sizeof *p);
    if (!p || pthread_setspecific(g_scratch_key[k], p)) {
        free(p);
        return NULL;
    }
    free(t_scratch[k]);
    t_scratch[k] = p;
    t_scratch_n[k] = n;
    return p;
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

/* ---- Whole subtrees (docs/grammar.md "Whole subtrees") ----
 *
 * Most of a full trie walk is spent below nodes where the lexer state behaves like "any
 * well-formed UTF-8" on every byte the subtree holds: the free text of a string, a pattern's
 * `[^@]+`. There the walk's result is known without walking: every token below whose bytes are
 * valid UTF-8 stays alive and no lexeme ends (vocab_trie.c lists those tokens in DFS order). Per
 * lexer state t the set of bytes A(t) on which t agrees with the reference automaton u8_next is
 * computed once: the pairs (state of t's DFA, state of u8) reachable from (t, 0) by bytes of A
 * all agree on which bytes kill them and none of t's accepts (so no lexeme ends below); a
 * disagreement removes the first byte of its path from A and the check starts again. A walk at
 * a TN_BIG node (at a character boundary) in state t whose subtree's bytes all lie in A(t)
 * takes the subtree whole. Exact: by induction over a path below the node every pair met is
 * one of the checked ones, so a node is alive in t's DFA iff it is in u8's, and lexeme ends
 * need an accepting parent. */
#define AGREE_PAIRS 32  /* pairs per check; beyond them no bytes agree */
#define AGREE_THREADS 128 /* larger states are not checked */
#define AGREE_ROUNDS 8  /* checks per state (each removes one byte) */
#define AGREE_ASCII 16  /* fewer printable ASCII bytes alive: no check */
#define AGREE_MOVE 2    /* more letters leading to another state: no check */
#define AGREE_WORK 60000 /* DFA work of one state's check; past it no bytes agree */

struct agree_ent {
    uint64_t a[4];
    uint8_t done;
};

static void abit_clear(uint64_t *a, unsigned b)
{
    a[b >> 6] &= ~(1ull << (b & 63));
}

/* A counted state's kernel entry relative to its own counter (counted entries count from 1). */
static inline uint64_t agree_rel(const struct rx_dstate *st, int32_t i)
{
    uint64_t v = st->kernel[i];
    uint32_t c = rx_thread_c1(v);
    return c ? (v & 0xffffffffu) | ((uint64_t)(c - st->sc1 + 1) << 32) : v;
}

/* Pair identity of the check: the same state, or for counted states of loop li (the check's
 * root is far from li's bounds, see agree_zone) the same kernel up to the counter: in that zone
 * the futures within a token's length are the same. */
static bool agree_same(const struct rx_dfa *d, uint32_t x, uint32_t y)
{
    if (x == y) return true;
    const struct rx_dstate *a = &d->st[x], *b = &d->st[y];
    if (a->sc1 == 0 || b->sc1 == 0 || a->sloop != b->sloop || a->n_kernel != b->n_kernel)
        return false;
    for (int32_t i = 0; i < a->n_kernel; i++)
        if (agree_rel(a, i) != agree_rel(b, i)) return false;
    return true;
}

/* For a state with counted threads: 1 when they are all in one loop at one count, far enough
 * from the loop's bounds that no bound is met within a token's length plus the check's depth
 * (between the bounds with max out of reach, or below min with its exit out of reach: the
 * counter classes of inner_key), so every count of the shape has the same A; else 0. */
static int agree_zone(const struct grammar *g, uint32_t t)
{
    const struct rx_dstate *st = &g->dfa.st[t];
    if (st->sloop < 0 || st->sc1 == 0 || st->sw) return 0; /* an inner loop's count: no */
    const struct rx_loop *L = &g->nfa.loops[st->sloop];
    int64_t c = (int64_t)st->sc1 - 1, D = (int64_t)g->vi->max_depth + 2 + AGREE_PAIRS;
    if (c >= L->min && (L->max < 0 || c + D + (L->len ? L->tmin_max : 0) < L->max)) return 1;
    if (c + D + (L->len ? L->tmax_fin : 0) < L->min) return 1;
    return 0;
}

static void agree_shape_hash(const struct rx_dfa *d, uint32_t t, uint64_t *h0, uint64_t *h1)
{
    const struct rx_dstate *st = &d->st[t];
    uint64_t a = 1469598103934665603ull ^ (uint64_t)(uint32_t)st->sloop, b = 0x243f6a8885a308d3ull;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = agree_rel(st, i);
        a = (a ^ v) * 1099511628211ull;
        b = (b ^ (v + 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
        b ^= b >> 29;
    }
    *h0 = a | 1;
    *h1 = b;
}

/* Computes A(t) into A; 0 done (A may be empty), -1 over the mask budget or no memory. */
static int agree_compute(struct grammar *g, uint32_t t, uint64_t *A)
{
    struct rx_dfa *d = &g->dfa;
    memset(A, 0, 4 * sizeof *A);
    if (rx_dfa_accepting(d, t)) return 0;
    /* counted threads: only far from the bounds */
    if (d->st[t].n_kernel > AGREE_THREADS) return 0;
    bool counted = false;
    for (int32_t i = 0; i < d->st[t].n_kernel; i++)
        if (rx_thread_c1(d->st[t].kernel[i])) counted = true;
    if (counted && !agree_zone(g, t)) return 0;
    int32_t li = counted ? d->st[t].sloop : -1;
    uint64_t w0 = d->work;
    /* a state that agrees is a loop over most letters (free text: its own state again, or the
     * next count of its shape); most others die on them or move on (a literal's progress):
     * look at the letters first */
    int other = 0;
    for (unsigned b = 'a'; b <= 'z' && other <= AGREE_MOVE; b++) {
        uint32_t x = rx_dfa_next(d, t, (uint8_t)b);
        if (d->over_work || d->failed) return -1;
        other += x == RX_DEAD || !agree_same(d, t, x);
    }
    if (other > AGREE_MOVE) return 0;
    uint64_t R[4] = {0, 0, 0, 0};
    int ascii = 0;
    for (unsigned b = 0; b < 256; b++) {
        uint32_t x = rx_dfa_next(d, t, (uint8_t)b);
        if (d->over_work || d->failed) return -1;
        bool dx = x == RX_DEAD, dy = u8_next(0, (uint8_t)b) < 0;
        if (dx != dy || (!dx && rx_dfa_accepting(d, x))) continue;
        R[b >> 6] |= 1ull << (b & 63);
        if (!dx && b >= 0x20 && b < 0x7f) ascii++;
    }
    if (ascii < AGREE_ASCII) return 0;
    uint32_t px[AGREE_PAIRS];
    int8_t py[AGREE_PAIRS];
    int16_t pf[AGREE_PAIRS];
    for (int round = 0; round < AGREE_ROUNDS; round++) {
        int n = 1, conflict = -1;
        bool full = false;
        px[0] = t;
        py[0] = 0;
        pf[0] = -1;
        for (int k = 0; k < n && conflict < 0 && !full; k++) {
            if (k > 0 && rx_dfa_accepting(d, px[k])) {
                conflict = pf[k];
                break;
            }
            for (int w = 0; w < 4 && conflict < 0 && !full; w++)
                for (uint64_t v = R[w]; v; v &= v - 1) {
                    unsigned b = (unsigned)(w * 64 + __builtin_ctzll(v));
                    uint32_t x = rx_dfa_next(d, px[k], (uint8_t)b);
                    if (d->over_work || d->failed) return -1;
                    if (d->work - w0 > AGREE_WORK) return 0;
                    int y = u8_next(py[k], (uint8_t)b);
                    bool dx = x == RX_DEAD, dy = y < 0;
                    if (dx != dy) {
                        conflict = k ? pf[k] : (int)b;
                        break;
                    }
                    if (dx) continue;
                    const struct rx_dstate *xs = &d->st[x];
                    if (xs->sc1 ? xs->sloop != li || li < 0 : false) { /* another loop */
                        full = true;
                        break;
                    }
                    if (!xs->sc1 && li >= 0 && xs->n_kernel && xs->sloop < 0)
                        for (int32_t q = 0; q < xs->n_kernel; q++)
                            if (rx_thread_c1(xs->kernel[q])) full = true; /* mixed counts */
                    if (full) break;
                    int j = 0;
                    while (j < n && (py[j] != y || !agree_same(d, px[j], x)))
                        j++;
                    if (j < n) continue;
                    if (n == AGREE_PAIRS) {
                        full = true;
                        break;
                    }
                    px[n] = x;
                    py[n] = (int8_t)y;
                    pf[n] = (int16_t)(k ? pf[k] : (int)b);
                    n++;
                }
        }
        if (full) return 0;
        if (conflict < 0) {
            memcpy(A, R, sizeof R);
            return 0;
        }
        abit_clear(R, (unsigned)conflict);
    }
    return 0;
}

struct agree_shape {
    uint64_t h0, h1; /* 0, 0: empty slot */
    uint64_t a[4];
};

/* A(t) of lexer state t (4 words), computed on first use (for counted states once per shape,
 * agree_zone); NULL: no memory or over the mask budget (nothing stored: the walk goes on node
 * by node). Caller holds g->mu. */
static const uint64_t *agree_get(struct grammar *g, uint32_t t)
{
    if ((int32_t)t >= g->agr_cap) {
        int32_t nc = g->agr_cap ? g->agr_cap : 256;
        while (nc <= (int32_t)t)
            nc *= 2;
        struct agree_ent *na = realloc(g->agr, (size_t)nc * sizeof *na);
        if (!na) return NULL;
        memset(na + g->agr_cap, 0, (size_t)(nc - g->agr_cap) * sizeof *na);
        g->agr = na;
        g->agr_cap = nc;
    }
    struct agree_ent *e = &g->agr[t];
    if (e->done) return e->a;
    struct rx_dfa *d = &g->dfa;
    bool shaped = d->st[t].sc1 && !rx_dfa_accepting(d, t) && agree_zone(g, t);
    uint64_t h0 = 0, h1 = 0;
    uint32_t j = 0;
    if (shaped) {
        if ((g->ash_n + 1) * 2 > g->ash_cap) {
            uint32_t nc = g->ash_cap ? g->ash_cap * 2 : 64;
            struct agree_shape *n = calloc(nc, sizeof *n);
            if (!n) return NULL;
            for (uint32_t i = 0; i < g->ash_cap; i++) {
                if (!(g->ash[i].h0 | g->ash[i].h1)) continue;
                uint32_t q = (uint32_t)g->ash[i].h0 & (nc - 1);
                while (n[q].h0 | n[q].h1)
                    q = (q + 1) & (nc - 1);
                n[q] = g->ash[i];
            }
            free(g->ash);
            g->ash = n;
            g->ash_cap = nc;
        }
        agree_shape_hash(d, t, &h0, &h1);
        for (j = (uint32_t)h0 & (g->ash_cap - 1); g->ash[j].h0 | g->ash[j].h1;
             j = (j + 1) & (g->ash_cap - 1))
            if (g->ash[j].h0 == h0 && g->ash[j].h1 == h1) {
                memcpy(e->a, g->ash[j].a, sizeof e->a);
                e->done = 1;
                return e->a;
            }
    }
    if (agree_compute(g, t, e->a)) return NULL;
    e->done = 1;
    if (shaped) {
        g->ash[j].h0 = h0;
        g->ash[j].h1 = h1;
        memcpy(g->ash[j].a, e->a, sizeof e->a);
        g->ash_n++;
    }
    return e->a;
}

/* Whether the subtree below TN_BIG node i can be taken whole in lexer state t. A(t) is
 * computed only at nodes with at least AGREE_SUBTREE nodes below (where it pays: its
 * transitions cost closures the walk may never need), then used at every TN_BIG node. */
#define AGREE_SUBTREE 512
static bool whole_ok(struct grammar *g, uint32_t i, uint32_t t)
{
    const struct grammar_vocab_index *vi = g->vi;
    if (((int32_t)t >= g->agr_cap || !g->agr[t].done) && vi->tn[i].end - i - 1 < AGREE_SUBTREE)
        return false;
    const uint64_t *a = agree_get(g, t);
    if (!a) return false;
    const uint64_t *u = vi->ubytes[vi->bix[i]];
    return !((u[0] & ~a[0]) | (u[1] & ~a[1]) | (u[2] & ~a[2]) | (u[3] & ~a[3]));
}

/* Adds the valid tokens below node i (whole subtree) to ib. */
static void whole_add(struct grammar *g, struct inner_build *ib, uint32_t i)
{
    const struct grammar_vocab_index *vi = g->vi;
    uint32_t lo = vi->vstart[i + 1], hi = vi->vstart[vi->tn[i].end];
    g->trie_skipped += vi->tn[i].end - i - 1;
    g->whole_taken++;
    if (ib->bits) {
        uint32_t *bits = ib->bits;
        for (uint32_t k = lo; k < hi; k++)
            bits[vi->vtok[k] >> 5] |= 1u << (vi->vtok[k] & 31);
        return;
    }
    for (uint32_t k = lo; k < hi; k++)
        ib->list[ib->n_list++] = vi->vtok[k];
}

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
    uint64_t steps = 0;
    if ((tn[r].dup & TN_BIG) && !m->g->vi->no_whole && whole_ok(m->g, r, s0)) {
        whole_add(m->g, ib, r);
        free(S);
        return;
    }
    trans = d->trans; /* agree_get may have grown the DFA */
    for (uint32_t i = r + 1; i < n; steps++) {
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
            if (__builtin_expect(x->dup & TN_DUP, 0))
                for (int32_t o = vi->tok_next[x->tok]; o >= 0; o = vi->tok_next[o])
                    bits[o >> 5] |= 1u << (o & 31);
        } else { /* branch-free append (the list has room for every token and one more) */
            ib->list[ib->n_list] = x->tok;
            ib->n_list += x->tok >= 0;
            if (__builtin_expect(x->dup & TN_DUP, 0))
                for (int32_t o = vi->tok_next[x->tok]; o >= 0; o = vi->tok_next[o])
                    ib->list[ib->n_list++] = o;
        }
        S[pd + 1] = (size_t)t * 256;
        if (__builtin_expect(x->dup & TN_BIG, 0) && !vi->no_whole) {
            bool ok = whole_ok(m->g, i, t);
            trans = d->trans; /* may have moved */
            if (ok) {
                whole_add(m->g, ib, i);
                i = x->end;
                continue;
            }
        }
        i++;
    }
    if (bits) bits[dummy >> 5] &= ~(1u << (dummy & 31));
    m->g->trie_steps += steps;
    free(S);
}

static void walk_inner(struct matcher *m, struct inner_build *ib, uint32_t s0)
{
    walk_inner_at(m, ib, 0, s0);
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
    /* threads another thread of the state covers are left out of the key (regex_prune.c rule
     * 1): the walk depends only on the state's language, so an unanchored pattern's state
     * after its match keys like the free string's and finds its walk */
    uint64_t *kern = malloc((n + 1) * sizeof *kern);
    if (!key || !kern) {
        free(key);
        free(kern);
        return NULL;
    }
    if (n) memcpy(kern, g->dfa.st[s].kernel, n * sizeof *kern); /* an empty kernel may be NULL */
    n = (size_t)rx_prune_kernel((struct rx_dfa *)&g->dfa, kern, (int32_t)n, RX_PRUNE_UNIVERSAL);
    struct kent *k = (struct kent *)key;
    int64_t D = (int64_t)g->vi->max_depth + 2;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = kern[i];
        int32_t st = rx_thread_state(v);
        uint64_t fh[2];
        if (fh_hash((struct grammar *)g, st, FH_ALL_BOUNDS, -1, fh)) {
            free(key);
            free(kern);
            return NULL;
        }
        if (g->dfa.work_limit && g->dfa.work > g->dfa.work_limit) {
            ((struct grammar *)g)->dfa.over_work = true;
            free(key);
            free(kern);
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
                bool far_max = L->max < 0 || c + dhi < L->max, dist = false;
                if (c + dlo < L->min) {
                    cc = 0xfffffff0u;
                } else if (c >= L->min && far_max) {
                    cc = 0xfffffff1u;
                } else if (far_max) {
                    cc = 0xfff00000u | (uint32_t)(L->min - c); /* below min by this much */
                    dist = true;
                }
                /* in these classes the walk does not depend on the bounds of the thread's own
                 * loop beyond the class: far below min no exit is reached within a token;
                 * between the bounds exits are open and max is out of reach; just below min with
                 * max out of reach only the distance to min matters (a region's thread needs its
                 * most ticks left, tmax, to cover it; tmax is capped at min, which changes no
                 * comparison with a smaller distance). So strings under maxLength 255 and 2048
                 * share their walks, and minLength 8 after 3 characters shares with minLength 5
                 * after none. A length region far below its min compares tmax with a distance
                 * the class does not keep: its bounds stay in. */
                /* an inner loop's iteration w (the second counter): one class when the
                 * region's count is between its bounds and far from max (no bound of the
                 * region bites within a token, so the ticks left do not matter) and w is at
                 * least the inner loop's min and more than the iterations a token can
                 * complete (g->ipass) below its max: no check of w then differs within a
                 * token, and the inner loop's bounds are left out of the hash too. Else w is
                 * part of the key. */
                uint32_t wq = rx_thread_w(v);
                int32_t il = wq ? rx_nfa_inner_of(&g->nfa, st) : -1;
                bool wfar = false;
                if (il >= 0) {
                    const struct rx_loop *I = &g->nfa.loops[il];
                    int64_t P = g->ipass ? g->ipass[il] : -1;
                    wfar = cc == 0xfffffff1u && P >= 0 && wq >= (uint32_t)I->min &&
                           (int64_t)wq + P < I->max;
                }
                if (cc == 0xfffffff1u || dist || (cc == 0xfffffff0u && !L->len)) {
                    if (fh_hash((struct grammar *)g, st, li, wfar ? il : -1, fh)) {
                        free(key);
                        free(kern);
                        return NULL;
                    }
                }
                if (il >= 0) {
                    uint64_t x = wfar ? 0xfffffff1u : wq;
                    x = (x + 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
                    k[i] = (struct kent){fh[0] ^ (x ^ x >> 31), fh[1] + x, 0, cc};
                    continue;
                }
            }
        }
        k[i] = (struct kent){fh[0], fh[1], 0, cc};
    }
    free(kern);
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
        m->g->trie_steps += vi->tn[c].depth;
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

/* ------------------------------------------------------------------------------------------ */
/* Counts out of the lexer state (docs/grammar.md "Counts out of the lexer state")             */

/* A lexer state inside a bounded loop or length region, near its max, is one DFA state per
 * count, and each needed its own trie walk. Here the walk is done once in the relaxed DFA
 * (regex.h: the max ignored, counters relative to the loop's base count B), recording for
 * every token the smallest remaining count r = max - c it needs ("need"); the mask of the
 * state at count c is then the tokens with need <= max - c: a prefix of the walk's token list.
 * Exact when every thread of the state is in the loop's body (one counter, so each byte moves
 * all body threads alike: checked per transition) or past its exit (reached from the loop's
 * continuation, which enters no loop), and c >= the loop's min (the lower bound never bites).
 * A thread's need: body thread of a length region: ticks so far + its fewest ticks to the
 * region's end (regex.h tmin); of a counted loop: iterations so far + 1; past the exit: the
 * count at its exit (kept as its counter in the relaxed DFA); the smallest over the state's
 * threads, at least the parent node's. */

#define RN_NEG (-(1 << 28)) /* no condition */
#define RN_INF (1 << 29)    /* never */
#define RN_UNSET INT32_MIN

/* Per grammar and relaxed root state: the walk (shared across grammars, or owned) and the
 * relaxed state at each lexeme end's parent in this grammar's relaxed DFA. */
struct rpay {
    struct rdata *d;
    bool own;      /* d is not in the vocabulary's cache: freed with this */
    uint32_t *brs; /* per boundary of d */
    bool bad;      /* the walk gave up (body threads disagreed): use the ordinary walk */
};

static void rpay_free(struct grammar_vocab_index *vi, struct rpay *p)
{
    if (!p) return;
    if (p->own)
        wcache_rdata_free(p->d);
    else
        wcache_rrelease(vi, p->d);
    free(p->brs);
    free(p);
}

void mask_free_relax(struct grammar *g)
{
    free(g->agr);
    free(g->ash);
    fh_free(g);
    free(g->ipass);
    for (int32_t i = 0; i < g->rpay_cap; i++)
        rpay_free((struct grammar_vocab_index *)g->vi, g->rpay[i]);
    free(g->rpay);
    for (int32_t i = 0; i < g->ipay_cap; i++)
        rpay_free((struct grammar_vocab_index *)g->vi, g->ipay[i]);
    free(g->ipay);
    free(g->riv);
    free(g->rneed);
    free(g->post_loop);
    free(g->loop_ok);
    if (g->rdfa_ready) rx_dfa_deinit(&g->rdfa);
}

/* ---- Iterations per token of an inner loop (the class of its count in inner_key) ----
 *
 * The most CNT_END passes of inner loop il along the bytes of any token prefix, from any byte
 * state of its body, with the loop's bounds and the region's ticks ignored (a superset of the
 * real threads): a walk of the vocabulary trie in a max-plus automaton whose state is, per
 * body byte state, the most passes so far (-1: absent), interned. -1 when it gives up (more
 * than IP_MAX_STATES states, or a count past IP_CAP): the count then has no class. */
#define IP_MAX_STATES 4096
#define IP_CAP 64

struct ip_succ {
    int32_t r;
    int8_t inc;
};

static int32_t inner_passes(const struct grammar *g, int32_t il)
{
    const struct rx_nfa *n = &g->nfa;
    const struct rx_loop *I = &n->loops[il];
    const struct grammar_vocab_index *vi = g->vi;
    int32_t lo = I->lo, hi = I->hi, nb = hi - lo, end = I->lo - 1;
    int32_t *idx = malloc(((size_t)nb + 1) * sizeof *idx), nq = 0;
    int32_t *qs = malloc(((size_t)nb + 1) * sizeof *qs);
    int32_t *stk = malloc(((size_t)nb + 2) * 2 * sizeof *stk);
    uint8_t *seen = malloc((size_t)nb + 1);
    int32_t *soff = NULL;
    struct ip_succ *sv = NULL;
    int8_t *vec = NULL;
    uint32_t *trans = NULL, *htab = NULL, *S = NULL;
    int32_t result = -1;
    if (!idx || !qs || !stk || !seen) goto out;
    for (int32_t s = lo; s < hi; s++) {
        idx[s - lo] = n->s[s].kind == NS_BYTE ? nq : -1;
        if (n->s[s].kind == NS_BYTE) qs[nq++] = s;
    }
    if (!nq) goto out;
    /* per byte state: the byte states after its byte, with 1 when the step passed END */
    soff = malloc(((size_t)nq + 1) * sizeof *soff);
    sv = malloc((size_t)nq * (size_t)nq * sizeof *sv);
    if (!soff || !sv) goto out;
    int32_t nsv = 0;
    for (int32_t q = 0; q < nq; q++) {
        soff[q] = nsv;
        memset(seen, 0, (size_t)nb + 1);
        int32_t sp = 0;
        stk[sp++] = n->s[qs[q]].out;
        stk[sp++] = 0;
        while (sp) {
            int32_t inc = stk[--sp], x = stk[--sp];
            if (x == end) {
                if (inc) continue; /* bodies are never empty: one pass per byte */
                x = I->body;
                inc = 1;
            }
            if (x < lo || x >= hi) continue;
            int bit = inc ? 2 : 1;
            if (seen[x - lo] & bit) continue;
            seen[x - lo] |= (uint8_t)bit;
            const struct rx_nstate *st = &n->s[x];
            switch (st->kind) {
            case NS_BYTE: {
                int32_t r = idx[x - lo], j = soff[q];
                while (j < nsv && sv[j].r != r)
                    j++;
                if (j == nsv) sv[nsv++] = (struct ip_succ){r, (int8_t)inc};
                else if (inc > sv[j].inc) sv[j].inc = (int8_t)inc;
                break;
            }
            case NS_SPLIT:
                stk[sp++] = st->out2;
                stk[sp++] = inc;
                /* fall through */
            case NS_EPS:
            case NS_CNT_TICK:
                stk[sp++] = st->out;
                stk[sp++] = inc;
                break;
            default:
                break; /* BOL (mid-lexeme), EOL (no byte follows), anything else */
            }
        }
    }
    soff[nq] = nsv;
    int32_t cap = 64, ns = 0;
    vec = malloc((size_t)cap * (size_t)nq);
    trans = malloc((size_t)cap * 256 * sizeof *trans);
    uint32_t hcap = 2 * IP_MAX_STATES;
    htab = calloc(hcap, sizeof *htab);
    S = malloc(((size_t)vi->max_depth + 2) * sizeof *S);
    if (!vec || !trans || !htab || !S) goto out;
    int8_t *tmp = malloc((size_t)nq);
    if (!tmp) goto out;
    memset(tmp, 0, (size_t)nq); /* the start: every byte state, no pass yet */
    int32_t best = 0;
#define IP_INTERN(V, OUT)                                                                               do {                                                                                                   uint64_t h_ = 1469598103934665603ull;                                                              for (int32_t i_ = 0; i_ < nq; i_++)                                                                    h_ = (h_ ^ (uint8_t)(V)[i_]) * 1099511628211ull;                                               uint32_t j_ = (uint32_t)h_ & (hcap - 1);                                                           (OUT) = UINT32_MAX;                                                                                while (htab[j_]) {                                                                                     if (!memcmp(vec + (size_t)(htab[j_] - 1) * nq, (V), (size_t)nq)) {                                     (OUT) = htab[j_] - 1;                                                                              break;                                                                                         }                                                                                                  j_ = (j_ + 1) & (hcap - 1);                                                                    }                                                                                                  if ((OUT) == UINT32_MAX) {                                                                             if (ns >= IP_MAX_STATES) goto give_up;                                                             if (ns == cap) {                                                                                       cap *= 2;                                                                                          int8_t *nv_ = realloc(vec, (size_t)cap * (size_t)nq);                                              if (!nv_) goto give_up;                                                                            vec = nv_;                                                                                         uint32_t *nt_ = realloc(trans, (size_t)cap * 256 * sizeof *trans);                                 if (!nt_) goto give_up;                                                                            trans = nt_;                                                                                   }                                                                                                  memcpy(vec + (size_t)ns * nq, (V), (size_t)nq);                                                    memset(trans + (size_t)ns * 256, 0xff, 256 * sizeof *trans);                                       htab[j_] = (uint32_t)ns + 1;                                                                       (OUT) = (uint32_t)ns++;                                                                        }                                                                                              } while (0)
    uint32_t root;
    IP_INTERN(tmp, root);
    S[0] = root;
    const struct tnode *tn = vi->tn;
    for (uint32_t i = 1; i < tn[0].end;) {
        const struct tnode *nd = &tn[i];
        uint32_t ps = S[nd->depth - 1];
        uint32_t t = trans[(size_t)ps * 256 + nd->byte];
        if (t == UINT32_MAX) {
            const int8_t *pv = vec + (size_t)ps * nq;
            memset(tmp, 0xff, (size_t)nq);
            bool any = false;
            for (int32_t q = 0; q < nq; q++) {
                const struct rx_nstate *st = &n->s[qs[q]];
                if (pv[q] < 0 || nd->byte < st->lo || nd->byte > st->hi) continue;
                for (int32_t j = soff[q]; j < soff[q + 1]; j++) {
                    int v = pv[q] + sv[j].inc;
                    if (v > IP_CAP) goto give_up;
                    if (v > tmp[sv[j].r]) tmp[sv[j].r] = (int8_t)v;
                    any = true;
                }
            }
            if (!any) {
                t = UINT32_MAX - 1; /* dead */
            } else {
                IP_INTERN(tmp, t);
                for (int32_t q = 0; q < nq; q++)
                    if (tmp[q] > best) best = tmp[q];
            }
            trans[(size_t)ps * 256 + nd->byte] = t;
        }
        if (t == UINT32_MAX - 1) {
            i = nd->end;
            continue;
        }
        S[nd->depth] = t;
        i++;
    }
#undef IP_INTERN
    result = best;
give_up:
    free(tmp);
out:
    free(idx);
    free(qs);
    free(stk);
    free(seen);
    free(soff);
    free(sv);
    free(vec);
    free(trans);
    free(htab);
    free(S);
    return result;
}

/* Per loop: the states reached from its continuation (its "post" states) and whether the
 * relaxed walk applies: bounded, no loop entered (this one or another) after its exit, post
 * states belonging to no other loop, and for a region every body state can still reach the
 * region's end. */
int mask_prepare_relax(struct grammar *g, struct err *e)
{
    const struct rx_nfa *n = &g->nfa;
    if (!n->n_loops) return 0;
    g->post_loop = malloc(((size_t)n->n + 1) * sizeof *g->post_loop);
    g->loop_ok = calloc((size_t)n->n_loops, sizeof *g->loop_ok);
    int32_t *q = malloc(((size_t)n->n + 1) * sizeof *q);
    if (!g->post_loop || !g->loop_ok || !q) {
        free(q);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    for (int32_t i = 0; i < n->n; i++)
        g->post_loop[i] = -1;
    for (int32_t li = 0; li < n->n_loops; li++) {
        if (n->loops[li].parent < 0) continue;
        if (!g->ipass) {
            g->ipass = malloc((size_t)n->n_loops * sizeof *g->ipass);
            if (!g->ipass) {
                free(q);
                return err_set(e, ERR_NOMEM, "out of memory");
            }
            for (int32_t j = 0; j < n->n_loops; j++)
                g->ipass[j] = -1;
        }
        g->ipass[li] = inner_passes(g, li);
    }
    for (int32_t li = 0; li < n->n_loops; li++) {
        const struct rx_loop *L = &n->loops[li];
        /* an inner loop is its region's (its counts are exact in the relaxed DFA too) */
        bool ok = L->max >= 0 && L->cont >= 0 && L->cont < n->n && L->parent < 0;
        if (ok && L->len)
            for (int32_t i = 0; i < L->hi - L->lo; i++)
                if (L->tmax[i] < 0 || L->tmin[i] >= RX_TICKS_INF) ok = false;
        int32_t head = 0, tail = 0;
        if (ok && (g->post_loop[L->cont] >= 0 || rx_nfa_loop_of(n, L->cont) >= 0)) ok = false;
        if (ok) {
            g->post_loop[L->cont] = li;
            q[tail++] = L->cont;
        }
        while (ok && head < tail) {
            const struct rx_nstate *st = &n->s[q[head++]];
            int32_t succ[2] = {-1, -1};
            switch (st->kind) {
            case NS_BYTE:
            case NS_EPS:
            case NS_BOL:
            case NS_EOL: succ[0] = st->out; break;
            case NS_SPLIT:
                succ[0] = st->out;
                succ[1] = st->out2;
                break;
            case NS_ACCEPT: break;
            default: ok = false; /* a loop (this one again or another) after the exit */
            }
            for (int k = 0; k < 2 && ok; k++) {
                int32_t o = succ[k];
                if (o < 0 || g->post_loop[o] == li) continue;
                if (g->post_loop[o] >= 0 || rx_nfa_loop_of(n, o) >= 0) {
                    ok = false;
                    break;
                }
                g->post_loop[o] = li;
                q[tail++] = o;
            }
        }
        if (!ok)
            for (int32_t i = 0; i < tail; i++)
                g->post_loop[q[i]] = -1;
        g->loop_ok[li] = ok;
    }
    free(q);
    return 0;
}

/* The fewest (*mn) / most (*mx) ticks to region L's end of its body thread v (an inner loop's
 * thread: by its iteration, rx_inner_ticks). */
static void body_ticks(const struct grammar *g, const struct rx_loop *L, uint64_t v, int64_t *mn, int64_t *mx)
{
    int32_t s = rx_thread_state(v);
    if (rx_thread_w(v)) {
        int32_t il = rx_nfa_inner_of(&g->nfa, s);
        if (il >= 0) {
            rx_inner_ticks(&g->nfa.loops[il], s, rx_thread_w(v), mn, mx, L->min);
            return;
        }
    }
    *mn = L->tmin[s - L->lo];
    *mx = L->tmax[s - L->lo];
}

static int64_t body_tmin(const struct grammar *g, const struct rx_loop *L, uint64_t v)
{
    int64_t mn, mx;
    body_ticks(g, L, v, &mn, &mx);
    return mn;
}

static int64_t relax_base(const struct grammar *g, const struct rx_loop *L)
{
    return (int64_t)L->min + g->vi->max_depth + 2;
}

/* Need offsets of relaxed state t, relative to the ticks at its node: [0] the smallest over
 * its threads and accepting threads, [1] of its accepting threads (RN_INF: does not accept),
 * [2] the largest over its threads (past it, all hold), [3] 1 when it has body threads. */
static const int32_t *rneed_get(struct grammar *g, uint32_t t, int32_t li)
{
    struct rx_dfa *d = &g->rdfa;
    if ((int32_t)t >= g->rneed_cap) {
        int32_t nc = g->rneed_cap ? g->rneed_cap : 256;
        while (nc <= (int32_t)t)
            nc *= 2;
        int32_t *nr = realloc(g->rneed, (size_t)nc * 4 * sizeof *nr);
        if (!nr) return NULL;
        for (int32_t i = g->rneed_cap * 4; i < nc * 4; i++)
            nr[i] = RN_UNSET;
        g->rneed = nr;
        g->rneed_cap = nc;
    }
    int32_t *r = &g->rneed[4 * (size_t)t];
    if (r[0] != RN_UNSET) return r;
    const struct rx_loop *L = &g->nfa.loops[li];
    int64_t B = relax_base(g, L);
    const struct rx_dstate *st = &d->st[t];
    int64_t mk = RN_INF, mxk = RN_NEG;
    bool body = false;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = st->kernel[i];
        int32_t s = rx_thread_state(v);
        uint32_t c1 = rx_thread_c1(v);
        int64_t x;
        if (c1 <= 1) {
            x = RN_NEG;
        } else if (s >= L->lo && s < L->hi) {
            x = L->len ? body_tmin(g, L, v) : 1;
            body = true;
        } else {
            x = (int64_t)c1 - 1 - B;
        }
        if (x < mk) mk = x;
        if (x > mxk) mxk = x;
    }
    int64_t ma = RN_INF;
    if (st->n_accept > 0 && st->accept[0] < 0) {
        int64_t rc1 = -(int64_t)st->accept[0] - 1;
        ma = rc1 <= 1 ? RN_NEG : rc1 - 1 - B;
    } else if (st->n_accept > 0) {
        ma = RN_NEG;
    }
    if (ma < mk) mk = ma;
    r[0] = (int32_t)(mk < RN_NEG ? RN_NEG : mk);
    r[1] = (int32_t)(ma < RN_NEG ? RN_NEG : ma);
    r[2] = (int32_t)(mxk < RN_NEG ? RN_NEG : mxk > RN_INF ? RN_INF : mxk);
    r[3] = body;
    return r;
}

static int32_t clamp_need(int64_t v)
{
    return v < -1 ? -1 : v > RN_INF ? RN_INF : (int32_t)v;
}

struct rbuild {
    int32_t *need, *tok; /* this thread's scratch (SCR_RELAX): room for every token, which a walk
                          * lists at most once */
    uint32_t n;
    struct rbound *b;
    uint32_t *brs;
    uint32_t nb, capb;
    bool oom;
};

static void rb_tok(struct rbuild *rb, int32_t need, int32_t tok)
{
    rb->need[rb->n] = need;
    rb->tok[rb->n++] = tok;
}

static void rb_bound(struct rbuild *rb, uint32_t node, int32_t lo, int32_t hi, int32_t k,
                     uint32_t rs)
{
    if (lo >= hi) return;
    if (rb->nb == rb->capb) {
        uint32_t nc = rb->capb ? rb->capb * 2 : 256;
        struct rbound *n = realloc(rb->b, nc * sizeof *n);
        if (n) rb->b = n;
        uint32_t *m = n ? realloc(rb->brs, nc * sizeof *m) : NULL;
        if (!n || !m) {
            rb->oom = true;
            return;
        }
        rb->brs = m;
        rb->capb = nc;
    }
    rb->brs[rb->nb] = rs;
    rb->b[rb->nb++] = (struct rbound){node, lo, hi, k};
}

/* The walk of the whole trie from relaxed root state root (loop li) into p. -1: no memory or
 * the mask budget ran out (d->over_work); p->bad when the walk gave up. */
static int relax_walk(struct matcher *m, uint32_t root, int32_t li, struct rpay *p)
{
    struct grammar *g = m->g;
    const struct grammar_vocab_index *vi = g->vi;
    const struct tnode *tn = vi->tn;
    struct rx_dfa *d = &g->rdfa;
    size_t D = (size_t)vi->max_depth + 2;
    uint32_t *S = malloc(D * sizeof *S);
    int32_t *K = malloc(D * sizeof *K), *N = malloc(D * sizeof *N), *A = malloc(D * sizeof *A);
    struct rdata *x = calloc(1, sizeof *x);
    struct rbuild rb = {0};
    int rc = -1;
    if (!S || !K || !N || !A || !x) goto out;
    int32_t *scr = token_scratch(SCR_RELAX, 2 * (size_t)vi->n_tokens);
    if (!scr) goto out;
    rb.need = scr;
    rb.tok = scr + vi->n_tokens;
    const int32_t *rn = rneed_get(g, root, li);
    if (!rn) goto out;
    S[0] = root;
    K[0] = 0;
    N[0] = -1;
    A[0] = rn[1] < RN_INF ? clamp_need(rn[1]) : RN_INF;
    uint32_t n = tn[0].end;
    for (uint32_t i = 1; i < n && !rb.oom; g->trie_steps++) {
        const struct tnode *nd = &tn[i];
        uint32_t pd = nd->depth - 1u;
        uint32_t ps = S[pd];
        uint32_t t = d->trans[(size_t)ps * 256 + nd->byte];
        if (t == RX_UNKNOWN) t = rx_dfa_compute(d, ps, nd->byte);
        if (d->over_work || d->failed) goto out;
        if (t == RX_NONUNI) {
            p->bad = true;
            rc = 0;
            goto out;
        }
        uint32_t ts = t & ~(RX_TICK_BIT | RX_MERGE_BIT); /* a merge is exact for a max alone */
        if (ts == RX_DEAD) {
            rb_bound(&rb, i, A[pd], RN_INF, K[pd], ps);
            i = nd->end;
            continue;
        }
        int32_t k = K[pd] + (t & RX_TICK_BIT ? 1 : 0);
        rn = rneed_get(g, ts, li);
        if (!rn) goto out;
        int32_t need = clamp_need((int64_t)k + rn[0]);
        if (need < N[pd]) need = N[pd];
        if (need >= RN_INF) {
            rb_bound(&rb, i, A[pd], RN_INF, K[pd], ps);
            i = nd->end;
            continue;
        }
        rb_bound(&rb, i, A[pd], need, K[pd], ps);
        for (int32_t o = nd->tok; o >= 0; o = vi->tok_next[o])
            rb_tok(&rb, need, o);
        S[pd + 1] = ts;
        K[pd + 1] = k;
        N[pd + 1] = need;
        if (rn[1] < RN_INF) {
            int32_t a = clamp_need((int64_t)k + rn[1]);
            A[pd + 1] = a > need ? a : need;
        } else {
            A[pd + 1] = RN_INF;
        }
        i++;
    }
    if (rb.oom) goto out;
    /* counting sort of the tokens by need (-1 .. maxneed) */
    int32_t mx = -1;
    for (uint32_t i = 0; i < rb.n; i++)
        if (rb.need[i] > mx) mx = rb.need[i];
    x->maxneed = mx;
    x->cum = calloc((size_t)mx + 3, sizeof *x->cum);
    x->toks = malloc(((size_t)rb.n + 1) * sizeof *x->toks);
    if (!x->cum || !x->toks) goto out;
    for (uint32_t i = 0; i < rb.n; i++)
        x->cum[rb.need[i] + 2]++;
    for (int32_t v = 0; v < mx + 2; v++)
        x->cum[v + 1] += x->cum[v];
    /* cum[v + 1] is now where bucket v starts; after the fill it is where it ends */
    for (uint32_t i = 0; i < rb.n; i++)
        x->toks[x->cum[rb.need[i] + 1]++] = rb.tok[i];
    x->n_toks = rb.n;
    x->b = rb.b;
    x->n_b = rb.nb;
    rb.b = NULL;
    p->d = x;
    p->own = true;
    p->brs = rb.brs;
    rb.brs = NULL;
    x = NULL;
    rc = 0;
out:
    free(S);
    free(K);
    free(N);
    free(A);
    free(rb.b);
    free(rb.brs);
    wcache_rdata_free(x);
    return rc;
}

/* Canonical form of relaxed root state t: per thread (structural hash without loop bounds,
 * body or past the exit), sorted, deduplicated, plus whether it accepts. The walk depends
 * only on it (needs are relative to the base count, bounds are not looked at). */
static uint8_t *relax_key(struct grammar *g, uint32_t t, bool iv, size_t *len, uint64_t *hash)
{
    const struct rx_dstate *st = &g->rdfa.st[t];
    size_t n = (size_t)st->n_kernel;
    uint8_t *key = malloc(n * sizeof(struct kent) + 2);
    if (!key) return NULL;
    struct kent *k = (struct kent *)key;
    for (size_t i = 0; i < n; i++) {
        int32_t s = rx_thread_state(st->kernel[i]);
        uint64_t fh[2];
        if (fh_hash(g, s, FH_NO_BOUNDS, -1, fh)) {
            free(key);
            return NULL;
        }
        k[i] = (struct kent){fh[0], fh[1], 0, rx_thread_c1(st->kernel[i]) > 1 ? 2u : 1u};
        /* an inner loop's thread (its bounds are not in fh): one class where no check of its
         * count differs within a token and the ticks left do not depend on it (at least min,
         * more than a token's iterations below max; not for interval walks, which compare the
         * most ticks left); else its count and the loop's bounds */
        uint32_t w = rx_thread_w(st->kernel[i]);
        int32_t il = w ? rx_nfa_inner_of(&g->nfa, s) : -1;
        if (il >= 0) {
            const struct rx_loop *I = &g->nfa.loops[il];
            int64_t P = g->ipass ? g->ipass[il] : -1;
            bool cls = !iv && P >= 0 && w >= (uint32_t)I->min && (int64_t)w + P < I->max;
            uint64_t x = cls ? 0xfffffff1u
                             : (uint64_t)w | (uint64_t)(uint32_t)I->min << 12 |
                                   (uint64_t)(uint32_t)I->max << 40;
            x = (x + 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
            k[i].h0 ^= x ^ x >> 31;
            k[i].h1 += x;
        }
    }
    qsort(k, n, sizeof *k, cmp_kent);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        if (w == 0 || cmp_kent(&k[w - 1], &k[i])) k[w++] = k[i];
    key[w * sizeof(struct kent)] = st->n_accept > 0;
    *len = w * sizeof(struct kent) + 1;
    uint64_t h = 0x6a09e667f3bcc909ull;
    for (size_t i = 0; i < *len; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    *hash = h | 1;
    return key;
}

/* This grammar's relaxed state at each lexeme end's parent of a shared walk, replaying the
 * parent's path from root. -1: no memory, budget, or the replay disagreed (cannot happen for
 * equal forms; the caller then walks as usual). */
static int relax_localize(struct grammar *g, uint32_t root, struct rpay *p, bool iv)
{
    const struct grammar_vocab_index *vi = g->vi;
    struct rx_dfa *d = &g->rdfa;
    const struct rdata *x = p->d;
    p->brs = malloc(((size_t)x->n_b + 1) * sizeof *p->brs);
    if (!p->brs) return -1;
    for (uint32_t i = 0; i < x->n_b; i++) {
        uint32_t c = x->b[i].node;
        const uint8_t *path = (const uint8_t *)vi->blob + vi->off[vi->rep[c]];
        uint32_t q = root;
        g->trie_steps += vi->tn[c].depth;
        for (uint32_t j = 0; j + 1 < vi->tn[c].depth; j++) {
            uint32_t t = d->trans[(size_t)q * 256 + path[j]];
            if (t == RX_UNKNOWN) t = rx_dfa_compute(d, q, path[j]);
            if (d->over_work || d->failed || t == RX_NONUNI ||
                (t & ~(RX_TICK_BIT | RX_MERGE_BIT)) == RX_DEAD || (iv && (t & RX_MERGE_BIT)))
                return -1;
            q = t & ~(RX_TICK_BIT | RX_MERGE_BIT);
        }
        p->brs[i] = q;
    }
    return 0;
}

/* The real lexer state at a lexeme end of the walk: the threads of relaxed state rs that
 * hold with rr = r - k counts to spare, body counters at cabs (the real count there). */
static uint32_t relax_realize(struct grammar *g, uint32_t rs, int64_t rr, int64_t cabs, int32_t li,
                              uint64_t *kb, int32_t *ab)
{
    const struct rx_dstate *st = &g->rdfa.st[rs];
    const struct rx_loop *L = &g->nfa.loops[li];
    int64_t B = relax_base(g, L);
    int32_t nk = 0, na = 0;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = st->kernel[i];
        int32_t s = rx_thread_state(v);
        uint32_t c1 = rx_thread_c1(v);
        if (!c1) {
            kb[nk++] = v;
        } else if (s >= L->lo && s < L->hi) {
            if ((L->len ? body_tmin(g, L, v) : 1) <= rr) /* (an inner count stays) */
                kb[nk++] = (v & 0xffffffffu) | (uint64_t)(cabs + 1) << 32;
        } else if (c1 == 1 || (int64_t)c1 - 1 - B <= rr) {
            kb[nk++] = (uint64_t)(uint32_t)s;
        }
    }
    for (int32_t i = 0; i < st->n_accept; i++)
        if (st->accept[i] >= 0) ab[na++] = st->accept[i];
    return rx_dfa_intern(&g->dfa, kb, nk, ab, na);
}

/* The slot of root in a grammar's per-root-state walk table (*arr, *cap), grown as needed.
 * NULL: no memory. */
static struct rpay **pay_slot(struct rpay ***arr, int32_t *cap, uint32_t root)
{
    if ((int32_t)root >= *cap) {
        int32_t nc = *cap ? *cap : 64;
        while (nc <= (int32_t)root)
            nc *= 2;
        struct rpay **np = realloc(*arr, (size_t)nc * sizeof *np);
        if (!np) return NULL;
        memset(np + *cap, 0, (size_t)(nc - *cap) * sizeof *np);
        *arr = np;
        *cap = nc;
    }
    return &(*arr)[root];
}

static int iv_walk(struct matcher *m, uint32_t root, int32_t li, struct rpay *p);

/* A walk for root state root under its structural key (key, klen, h; taken over): the vocabulary
 * index's shared one when there is one and it localizes to this grammar, else a new walk (the
 * interval walk when iv, else the relaxed one), published for the grammars that share the form.
 * Stored in *slot. NULL: no memory or over the mask budget (g->rdfa.over_work). */
static struct rpay *pay_get(struct matcher *m, uint32_t root, int32_t li, bool iv, uint8_t *key,
                            size_t klen, uint64_t h, struct rpay **slot)
{
    struct grammar *g = m->g;
    struct grammar_vocab_index *vi = (struct grammar_vocab_index *)g->vi;
    struct rpay *p = calloc(1, sizeof *p);
    if (!p) goto fail;
    struct rdata *x = wcache_rfind(vi, key, klen, h);
    if (x) {
        p->d = x; /* wcache_rfind's reference, released with p */
        if (relax_localize(g, root, p, iv)) {
            if (g->rdfa.over_work) goto fail;
            free(p->brs);
            p->brs = NULL;
            p->d = NULL; /* cannot happen for equal forms: walk here */
            wcache_rrelease(vi, x);
        } else {
            free(key);
            *slot = p;
            return p;
        }
    }
    if (iv ? iv_walk(m, root, li, p) : relax_walk(m, root, li, p)) goto fail;
    if (iv)
        g->iv_walks++;
    else
        g->relax_walks++;
    if (p->d) {
        p->d->key = key;
        p->d->key_len = klen;
        p->d->hash = h;
        key = NULL;
        if (wcache_radd(vi, p->d)) p->own = false;
    }
    free(key);
    *slot = p;
    return p;
fail:
    free(key);
    rpay_free(vi, p);
    return NULL;
}

/* The walk for relaxed root state root: this grammar's, a shared one, or a new one (then
 * published). NULL: no memory or over the mask budget (d->over_work). */
static struct rpay *relax_pay(struct matcher *m, uint32_t root, int32_t li)
{
    struct grammar *g = m->g;
    struct rpay **slot = pay_slot(&g->rpay, &g->rpay_cap, root);
    if (!slot) return NULL;
    if (*slot) return *slot;
    size_t klen;
    uint64_t h;
    uint8_t *key = relax_key(g, root, false, &klen, &h);
    if (!key) return NULL;
    return pay_get(m, root, li, false, key, klen, h, slot);
}

static int payload_take_tokens(struct shared_inner *x, uint32_t *bits, size_t words, size_t *bytes);

/* ---- Interval walks: counts below min (docs/grammar.md "Counts out of the lexer state") ----
 *
 * Below a loop's min with its max within a token's length (minLength = maxLength, ids of 12 or
 * 36 characters, a fixed-length pattern in a length region) both bounds bite within a token,
 * and one threshold per token (the need above) no longer describes when it is allowed. Every
 * thread of a relaxed state stands for an interval of real counts c at the walk's root: with
 * c' = c - min and d = max - min, at k ticks from the root, a body thread of a length region
 * holds for -k - tmax <= c' <= d - k - tmin (the real DFA's thread_can_finish), a body thread
 * of a counted loop for c' <= d - k - 1, a thread past the exit with exit count k_exit (its
 * relaxed counter) for -k_exit <= c' <= d - k_exit, one without a counter always. A thread
 * holding at c means its ancestors held (each condition only tightens along a path), so a
 * node is alive at c iff one of its threads holds: the union of their intervals, intersected
 * with the parent's. When that union is not one interval, or a transition merged threads at
 * different counters (RX_MERGE_BIT: the smallest kept, which loses a min's condition), the
 * walk gives up and the ordinary walks serve. Tokens are grouped by interval; the mask at
 * count c is the groups holding c - min; lexeme ends keep the (one or two) intervals where the
 * parent accepts and the child is dead. The walk depends on the relaxed root's form and on the
 * loop's min and max (tmax is capped at min), which key it in the vocabulary's cache. */

#define IV_NEG (-(1 << 28))
#define IV_POS (1 << 28)
#define IV_GAP INT32_MIN /* riv[0]: the union is not one interval */

struct ivr {
    int64_t lo, hi;
};

static int cmp_ivr(const void *x, const void *y)
{
    const struct ivr *a = x, *b = y;
    return a->lo < b->lo ? -1 : a->lo > b->lo;
}

/* Interval of c' (at 0 ticks) where a relaxed thread v (state s, counter c1) of loop L holds. */
static struct ivr iv_thread(const struct grammar *g, const struct rx_loop *L, int64_t B, int64_t d,
                            uint64_t v)
{
    int32_t s = rx_thread_state(v);
    uint32_t c1 = rx_thread_c1(v);
    if (c1 <= 1) return (struct ivr){IV_NEG, IV_POS};
    if (s >= L->lo && s < L->hi) {
        if (L->len) {
            int64_t mn, mx;
            body_ticks(g, L, v, &mn, &mx);
            return (struct ivr){-mx, d - mn};
        }
        return (struct ivr){IV_NEG, d - 1};
    }
    int64_t x = (int64_t)c1 - 1 - B; /* exit count relative to the node */
    return (struct ivr){-x, d - x};
}

/* Of relaxed state t (loop li): [0, 1] the union of its threads' and accept's intervals at 0
 * ticks ([0] = IV_GAP: not one interval), [2, 3] its accept's (lo > hi: none). NULL: no
 * memory. */
static const int32_t *riv_get(struct grammar *g, uint32_t t, int32_t li)
{
    if ((int32_t)t >= g->riv_cap) {
        int32_t nc = g->riv_cap ? g->riv_cap : 256;
        while (nc <= (int32_t)t)
            nc *= 2;
        int32_t *nr = realloc(g->riv, (size_t)nc * 4 * sizeof *nr);
        if (!nr) return NULL;
        for (int32_t i = g->riv_cap * 4; i < nc * 4; i++)
            nr[i] = RN_UNSET;
        g->riv = nr;
        g->riv_cap = nc;
    }
    int32_t *r = &g->riv[4 * (size_t)t];
    if (r[0] != RN_UNSET) return r;
    const struct rx_loop *L = &g->nfa.loops[li];
    int64_t B = relax_base(g, L), d = (int64_t)L->max - L->min;
    const struct rx_dstate *st = &g->rdfa.st[t];
    struct ivr *v = malloc(((size_t)st->n_kernel + 1) * sizeof *v);
    if (!v) return NULL;
    int32_t n = 0;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        struct ivr x = iv_thread(g, L, B, d, st->kernel[i]);
        if (x.lo <= x.hi) v[n++] = x;
    }
    struct ivr acc = {1, 0};
    if (st->n_accept > 0) {
        int64_t rc1 = st->accept[0] < 0 ? -(int64_t)st->accept[0] - 1 : 0;
        acc = rc1 <= 1 ? (struct ivr){IV_NEG, IV_POS} : (struct ivr){-(rc1 - 1 - B), d - (rc1 - 1 - B)};
        if (acc.lo <= acc.hi) v[n++] = acc;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_ivr);
    struct ivr u = {1, 0};
    bool gap = false;
    for (int32_t i = 0; i < n; i++) {
        if (u.lo > u.hi) {
            u = v[i];
        } else if (v[i].lo <= u.hi + 1) {
            if (v[i].hi > u.hi) u.hi = v[i].hi;
        } else {
            gap = true;
        }
    }
    free(v);
#define IVC(x) ((int32_t)((x) < IV_NEG ? IV_NEG : (x) > IV_POS ? IV_POS : (x)))
    r[1] = IVC(u.hi);
    r[2] = IVC(acc.lo);
    r[3] = IVC(acc.hi);
    r[0] = gap ? IV_GAP : IVC(u.lo);
#undef IVC
    return r;
}

struct ivtok {
    int32_t lo, hi, tok;
};

struct ivbuild {
    struct ivtok *t;
    uint32_t n, cap;
    struct rbound *b;
    uint32_t *brs;
    uint32_t nb, capb;
    bool oom;
};

static void iv_tok(struct ivbuild *ib, int32_t lo, int32_t hi, int32_t tok)
{
    if (ib->n == ib->cap) {
        uint32_t nc = ib->cap ? ib->cap * 2 : 4096;
        struct ivtok *n = realloc(ib->t, nc * sizeof *n);
        if (!n) {
            ib->oom = true;
            return;
        }
        ib->t = n;
        ib->cap = nc;
    }
    ib->t[ib->n++] = (struct ivtok){lo, hi, tok};
}

/* A lexeme end at node for lo <= c' <= hi (inclusive), parent at k ticks in relaxed state rs. */
static void iv_bound(struct ivbuild *ib, uint32_t node, int32_t lo, int32_t hi, int32_t k,
                     uint32_t rs)
{
    if (lo > hi) return;
    if (ib->nb == ib->capb) {
        uint32_t nc = ib->capb ? ib->capb * 2 : 256;
        struct rbound *n = realloc(ib->b, nc * sizeof *n);
        if (n) ib->b = n;
        uint32_t *m = n ? realloc(ib->brs, nc * sizeof *m) : NULL;
        if (!n || !m) {
            ib->oom = true;
            return;
        }
        ib->brs = m;
        ib->capb = nc;
    }
    ib->brs[ib->nb] = rs;
    ib->b[ib->nb++] = (struct rbound){node, lo, hi, k};
}

static int32_t imax(int32_t a, int32_t b)
{
    return a > b ? a : b;
}

static int32_t imin(int32_t a, int32_t b)
{
    return a < b ? a : b;
}

/* The interval walk of the whole trie from relaxed root state root (loop li) into p. -1: no
 * memory or the mask budget ran out; p->bad when the walk gave up. */
static int iv_walk(struct matcher *m, uint32_t root, int32_t li, struct rpay *p)
{
    struct grammar *g = m->g;
    const struct grammar_vocab_index *vi = g->vi;
    const struct tnode *tn = vi->tn;
    struct rx_dfa *d = &g->rdfa;
    size_t D = (size_t)vi->max_depth + 2;
    uint32_t *S = malloc(D * sizeof *S);
    int32_t *K = malloc(D * sizeof *K), *LO = malloc(D * sizeof *LO), *HI = malloc(D * sizeof *HI);
    int32_t *ALO = malloc(D * sizeof *ALO), *AHI = malloc(D * sizeof *AHI);
    struct rdata *x = calloc(1, sizeof *x);
    struct ivbuild ib = {0};
    uint32_t *gh = NULL, *gid = NULL; /* (lo, hi) -> group + 1, open addressing; per token */
    int rc = -1;
    if (!S || !K || !LO || !HI || !ALO || !AHI || !x) goto out;
    const int32_t *rv = riv_get(g, root, li);
    if (!rv) goto out;
    if (rv[0] == IV_GAP) {
        p->bad = true;
        rc = 0;
        goto out;
    }
    S[0] = root;
    K[0] = 0;
    LO[0] = rv[0];
    HI[0] = rv[1];
    ALO[0] = imax(rv[2], LO[0]);
    AHI[0] = imin(rv[3], HI[0]);
    uint32_t n = tn[0].end;
    for (uint32_t i = 1; i < n && !ib.oom; g->trie_steps++) {
        const struct tnode *nd = &tn[i];
        uint32_t pd = nd->depth - 1u;
        uint32_t ps = S[pd];
        uint32_t t = d->trans[(size_t)ps * 256 + nd->byte];
        if (t == RX_UNKNOWN) t = rx_dfa_compute(d, ps, nd->byte);
        if (d->over_work || d->failed) goto out;
        if (t == RX_NONUNI || (t & RX_MERGE_BIT)) {
            p->bad = true;
            rc = 0;
            goto out;
        }
        uint32_t ts = t & ~RX_TICK_BIT;
        int32_t lo = 1, hi = 0, k = K[pd] + (t & RX_TICK_BIT ? 1 : 0);
        const int32_t *r = NULL;
        if (ts != RX_DEAD) {
            r = riv_get(g, ts, li);
            if (!r) goto out;
            if (r[0] == IV_GAP) {
                p->bad = true;
                rc = 0;
                goto out;
            }
            lo = imax(LO[pd], r[0] - k);
            hi = imin(HI[pd], r[1] - k);
        }
        if (lo > hi) { /* dead at every count: a lexeme end wherever the parent accepts */
            iv_bound(&ib, i, ALO[pd], AHI[pd], K[pd], ps);
            i = nd->end;
            continue;
        }
        /* the parent accepts and the child is dead: outside [lo, hi] */
        iv_bound(&ib, i, ALO[pd], imin(AHI[pd], lo - 1), K[pd], ps);
        iv_bound(&ib, i, imax(ALO[pd], hi + 1), AHI[pd], K[pd], ps);
        for (int32_t o = nd->tok; o >= 0; o = vi->tok_next[o])
            iv_tok(&ib, lo, hi, o);
        S[pd + 1] = ts;
        K[pd + 1] = k;
        LO[pd + 1] = lo;
        HI[pd + 1] = hi;
        ALO[pd + 1] = imax(lo, r[2] - k);
        AHI[pd + 1] = imin(hi, r[3] - k);
        i++;
    }
    if (ib.oom) goto out;
    /* group the tokens by interval (few distinct ones): a hash of (lo, hi) pairs */
    uint32_t cap = 1024, ng = 0;
    gh = calloc(cap, sizeof *gh);
    gid = malloc(((size_t)ib.n + 1) * sizeof *gid);
    if (!gh || !gid) goto out;
#define IV_HASH(lo, hi) ((uint32_t)(lo) * 2654435761u ^ (uint32_t)(hi) * 40503u)
    for (uint32_t i = 0; i < ib.n; i++) {
        uint32_t h = IV_HASH(ib.t[i].lo, ib.t[i].hi) & (cap - 1);
        while (gh[h] && (x->grp[gh[h] - 1].lo != ib.t[i].lo || x->grp[gh[h] - 1].hi != ib.t[i].hi))
            h = (h + 1) & (cap - 1);
        if (!gh[h]) {
            struct rgroup *ngp = realloc(x->grp, (ng + 1) * sizeof *ngp);
            if (!ngp) goto out;
            x->grp = ngp;
            x->grp[ng] = (struct rgroup){ib.t[i].lo, ib.t[i].hi, 0, 0};
            gh[h] = ++ng;
            if (ng * 2 > cap) { /* grow: rehash the groups */
                uint32_t nc = cap * 2;
                uint32_t *n2 = calloc(nc, sizeof *n2);
                if (!n2) goto out;
                for (uint32_t j = 0; j < ng; j++) {
                    uint32_t h2 = IV_HASH(x->grp[j].lo, x->grp[j].hi) & (nc - 1);
                    while (n2[h2])
                        h2 = (h2 + 1) & (nc - 1);
                    n2[h2] = j + 1;
                }
                free(gh);
                gh = n2;
                cap = nc;
            }
            gid[i] = ng - 1;
        } else {
            gid[i] = gh[h] - 1;
        }
        x->grp[gid[i]].end++; /* a count for now */
    }
#undef IV_HASH
    x->n_grp = ng;
    x->toks = malloc(((size_t)ib.n + 1) * sizeof *x->toks);
    if (!x->toks) goto out;
    uint32_t at = 0;
    for (uint32_t gi = 0; gi < ng; gi++) {
        uint32_t c = x->grp[gi].end;
        x->grp[gi].start = x->grp[gi].end = at;
        at += c;
    }
    for (uint32_t i = 0; i < ib.n; i++) {
        x->toks[x->grp[gid[i]].end++] = ib.t[i].tok;
    }
    x->n_toks = ib.n;
    x->maxneed = -1;
    x->b = ib.b;
    x->n_b = ib.nb;
    ib.b = NULL;
    p->d = x;
    p->own = true;
    p->brs = ib.brs;
    ib.brs = NULL;
    x = NULL;
    rc = 0;
out:
    free(gh);
    free(gid);
    free(S);
    free(K);
    free(LO);
    free(HI);
    free(ALO);
    free(AHI);
    free(ib.t);
    free(ib.b);
    free(ib.brs);
    wcache_rdata_free(x);
    return rc;
}

/* The interval walk for relaxed root state root: this grammar's, a shared one, or a new one
 * (then published). NULL: no memory or over the mask budget. */
static struct rpay *iv_pay(struct matcher *m, uint32_t root, int32_t li)
{
    struct grammar *g = m->g;
    struct rpay **slot = pay_slot(&g->ipay, &g->ipay_cap, root);
    if (!slot) return NULL;
    if (*slot) return *slot;
    size_t klen;
    uint64_t h;
    uint8_t *k0 = relax_key(g, root, true, &klen, &h);
    uint8_t *key = k0 ? malloc(klen + 9) : NULL;
    if (!key) {
        free(k0);
        return NULL;
    }
    /* the walk depends on the loop's bounds too (and is not the max-only walk's) */
    const struct rx_loop *L = &g->nfa.loops[li];
    memcpy(key, k0, klen);
    key[klen] = 'I';
    memcpy(key + klen + 1, &L->min, 4);
    memcpy(key + klen + 5, &L->max, 4);
    for (size_t i = klen; i < klen + 9; i++)
        h = (h ^ key[i]) * 1099511628211ull;
    h |= 1;
    free(k0);
    return pay_get(m, root, li, true, key, klen + 9, h, slot);
}

/* The real lexer state at a lexeme end of an interval walk: the threads of relaxed state rs
 * that hold at c' = cp with k ticks from the root, body counters at cabs = c + k. */
static uint32_t iv_realize(struct grammar *g, uint32_t rs, int64_t cp, int64_t k, int64_t cabs,
                           int32_t li, uint64_t *kb, int32_t *ab)
{
    const struct rx_dstate *st = &g->rdfa.st[rs];
    const struct rx_loop *L = &g->nfa.loops[li];
    int64_t B = relax_base(g, L), d = (int64_t)L->max - L->min;
    int32_t nk = 0, na = 0;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = st->kernel[i];
        int32_t s = rx_thread_state(v);
        uint32_t c1 = rx_thread_c1(v);
        if (!c1) {
            kb[nk++] = v;
            continue;
        }
        struct ivr x = iv_thread(g, L, B, d, v);
        if (cp < x.lo - k || cp > x.hi - k) continue;
        if (c1 > 1 && s >= L->lo && s < L->hi)
            kb[nk++] = (v & 0xffffffffu) | (uint64_t)(cabs + 1) << 32;
        else
            kb[nk++] = (uint64_t)(uint32_t)s;
    }
    for (int32_t i = 0; i < st->n_accept; i++)
        if (st->accept[i] >= 0) ab[na++] = st->accept[i];
    return rx_dfa_intern(&g->dfa, kb, nk, ab, na);
}

/* The inner entry of real state s at count c below min from its interval walk (p->d): the
 * tokens of the groups holding c - min, and the lexeme ends holding it. -1: no memory. */
static int iv_fill(struct grammar *g, struct rpay *p, int64_t c, int32_t li, uint64_t *kb,
                   int32_t *ab, struct inner_entry *e)
{
    const struct rdata *x = p->d;
    const struct rx_loop *L = &g->nfa.loops[li];
    struct rx_dfa *d = &g->dfa;
    int64_t cp = c - L->min;
    size_t words = ((size_t)g->vi->n_tokens + 31) / 32;
    uint32_t *bits = calloc(words + 1, sizeof *bits);
    struct shared_inner *own = calloc(1, sizeof *own);
    if (own) own->refs = 1;
    e->bound = malloc(((size_t)x->n_b * 2 + 1) * sizeof *e->bound);
    if (!bits || !own || !e->bound) goto fail;
    for (uint32_t gi = 0; gi < x->n_grp; gi++) {
        const struct rgroup *gr = &x->grp[gi];
        if (cp < gr->lo || cp > gr->hi) continue;
        for (uint32_t i = gr->start; i < gr->end; i++)
            bits[x->toks[i] >> 5] |= 1u << (x->toks[i] & 31);
    }
    size_t bytes = 0;
    if (payload_take_tokens(own, bits, words, &bytes)) goto fail;
    bits = NULL;
    struct {
        uint32_t rs, q;
        int32_t k;
    } memo[64];
    for (int i = 0; i < 64; i++)
        memo[i].rs = RX_DEAD;
    for (uint32_t i = 0; i < x->n_b; i++) {
        const struct rbound *b = &x->b[i];
        if (cp < b->lo || cp > b->hi) continue;
        uint32_t rs = p->brs[i];
        uint32_t j = (rs * 2654435761u ^ (uint32_t)b->k * 40503u) & 63;
        uint32_t q;
        if (memo[j].rs == rs && memo[j].k == b->k) {
            q = memo[j].q;
        } else {
            q = iv_realize(g, rs, cp, b->k, c + b->k, li, kb, ab);
            if (d->failed) goto fail;
            memo[j].rs = rs;
            memo[j].k = b->k;
            memo[j].q = q;
        }
        if (q == RX_DEAD || !rx_dfa_accepting(d, q)) continue;
        e->bound[2 * e->n_bound] = b->node;
        e->bound[2 * e->n_bound + 1] = q;
        e->n_bound++;
    }
    e->own = own;
    e->bits = own->bits;
    e->list = own->list;
    e->n_list = own->n_list;
    return 0;
fail:
    free(bits);
    wcache_payload_free(own);
    free(e->bound);
    e->bound = NULL;
    e->n_bound = 0;
    return -1;
}

/* The inner entry of real state s from its relaxed walk. 1: done (*out set), 0: does not
 * apply (the caller walks as usual), -1: no memory or over the mask budget. */
static int relax_entry(struct matcher *m, uint32_t s, struct inner_entry **out)
{
    struct grammar *g = m->g;
    if (!g->loop_ok || g->rdfa_broken) return 0;
    const struct rx_dstate *st = &g->dfa.st[s];
    if (st->sloop < 0 || !g->loop_ok[st->sloop]) return 0;
    int32_t li = st->sloop;
    const struct rx_loop *L = &g->nfa.loops[li];
    int64_t c = (int64_t)st->sc1 - 1;
    int64_t D = (int64_t)g->vi->max_depth + 2;
    if (c < 0 || c > L->max) return 0;
    bool iv = c < L->min; /* both bounds within reach: an interval walk */
    if (iv && g->vi->no_iv) return 0;
    if (c + D + (L->len ? L->tmin_max : 0) < L->max) return 0; /* far: the shared walk serves */
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = st->kernel[i];
        if (!rx_thread_c1(v) && g->post_loop[rx_thread_state(v)] != li) return 0;
    }
    if (!g->rdfa_ready) {
        struct err e = {0};
        if (rx_dfa_init(&g->rdfa, &g->nfa, &e)) {
            g->rdfa_broken = true;
            return 0;
        }
        g->rdfa.relax = true;
        g->rdfa.max_bytes = g->budget.max_dfa_bytes ? g->budget.max_dfa_bytes / 4 : 0;
        g->rdfa_ready = true;
    }
    struct rx_dfa *rd = &g->rdfa, *d = &g->dfa;
    int64_t B = relax_base(g, L);
    uint64_t *kb = malloc(((size_t)g->nfa.n + 1) * sizeof *kb);
    int32_t *ab = malloc(((size_t)g->nfa.n + 2) * sizeof *ab);
    struct inner_entry *e = calloc(1, sizeof *e);
    int rc = -1;
    if (!kb || !ab || !e) goto out;
    int32_t nk = 0, na = 0;
    for (int32_t i = 0; i < st->n_kernel; i++) {
        uint64_t v = st->kernel[i];
        uint32_t s1 = (uint32_t)(v & 0xffffffffu); /* the state and an inner count */
        kb[nk++] = s1 | (uint64_t)(rx_thread_c1(v) ? B + 1 : 1) << 32;
    }
    for (int32_t i = 0; i < st->n_accept; i++)
        ab[na++] = st->accept[i];
    if (na) ab[na++] = -1; /* accepting now: no condition */
    /* the relaxed DFA's steps count against this mask's budget */
    rd->work = 0;
    rd->work_limit = !d->work_limit ? 0 : d->work_limit > d->work ? d->work_limit - d->work : 1;
    rd->over_work = false;
    uint32_t root = rx_dfa_intern(rd, kb, nk, ab, na);
    struct rpay *p = root == RX_DEAD ? NULL : iv ? iv_pay(m, root, li) : relax_pay(m, root, li);
    d->work += rd->work;
    if (!p) {
        if (rd->over_work) d->over_work = true;
        if (rd->failed) {
            g->rdfa_broken = true; /* over its memory budget: the ordinary walks go on */
            rc = 0;
        }
        goto out;
    }
    if (p->bad || !p->d) {
        rc = 0;
        goto out;
    }
    if (iv) {
        if (iv_fill(g, p, c, li, kb, ab, e)) goto out;
        g->iv_served++;
        *out = e;
        e = NULL;
        rc = 1;
        goto out;
    }
    const struct rdata *x = p->d;
    int64_t r = L->max - c;
    int32_t ri = r > x->maxneed ? x->maxneed : (int32_t)r;
    e->list = x->toks;
    e->n_list = (int32_t)x->cum[ri + 1];
    e->bound = malloc(((size_t)x->n_b * 2 + 1) * sizeof *e->bound);
    if (!e->bound) goto out;
    /* real states of the lexeme ends, memoized by what they depend on: the relaxed state,
     * the counts to spare (all threads hold past the largest need) and, with body threads,
     * the real count */
    struct {
        uint32_t rs, q;
        int64_t rr, cabs;
    } memo[64];
    for (int i = 0; i < 64; i++)
        memo[i].rs = RX_DEAD;
    for (uint32_t i = 0; i < x->n_b; i++) {
        const struct rbound *b = &x->b[i];
        if (r < b->lo || r >= b->hi) continue;
        uint32_t rs = p->brs[i];
        const int32_t *rn = rneed_get(g, rs, li);
        if (!rn) goto out;
        int64_t rr = r - b->k, cabs = rn[3] ? c + b->k : -1;
        if (rr > rn[2]) rr = rn[2];
        uint32_t j = (rs * 2654435761u ^ (uint32_t)rr * 40503u ^ (uint32_t)cabs) & 63;
        uint32_t q;
        if (memo[j].rs == rs && memo[j].rr == rr && memo[j].cabs == cabs) {
            q = memo[j].q;
        } else {
            q = relax_realize(g, rs, rr, c + b->k, li, kb, ab);
            if (d->failed) goto out;
            memo[j].rs = rs;
            memo[j].rr = rr;
            memo[j].cabs = cabs;
            memo[j].q = q;
        }
        if (q == RX_DEAD || !rx_dfa_accepting(d, q)) continue;
        e->bound[2 * e->n_bound] = b->node;
        e->bound[2 * e->n_bound + 1] = q;
        e->n_bound++;
    }
    *out = e;
    e = NULL;
    rc = 1;
out:
    if (e) {
        free(e->bound);
        free(e);
    }
    free(kb);
    free(ab);
    return rc;
}

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
    x->refs = 1; /* e's */
    e->own = x;
    (void)wcache_add(vi, x, bytes);
    return 0;
}

/* Of the candidate lexeme-end nodes (no duplicates), keeps those where s's automaton accepts
 * before the node's byte and dies on it: into e->bound as (node, accepting state) pairs and into
 * x->nodes. Returns -1 on no memory (what was allocated is left in e and x for their cleanup). */
static int keep_boundaries(const struct grammar_vocab_index *vi, struct rx_dfa *d, uint32_t s,
                           const uint32_t *cand, size_t n_cand, struct inner_entry *e,
                           struct shared_inner *x, uint64_t *steps)
{
    e->bound = malloc((n_cand * 2 + 1) * sizeof *e->bound);
    x->nodes = malloc((n_cand + 1) * sizeof *x->nodes);
    if (!e->bound || !x->nodes) return -1;
    for (size_t i = 0; i < n_cand; i++) {
        uint32_t c = cand[i];
        const uint8_t *path = (const uint8_t *)vi->blob + vi->off[vi->rep[c]];
        uint32_t q = s;
        *steps += vi->tn[c].depth;
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

/* keep_boundaries for a state made of parts (one per terminal): the path is replayed in each
 * part, whose transitions its own walk has mostly computed already, and the state before the
 * node's byte is the union of the parts' (a DFA state is a set of threads, and each byte moves
 * every thread on its own): no closure of the union state at every count it would meet. */
static int keep_boundaries_parts(const struct grammar_vocab_index *vi, struct rx_dfa *d,
                                 uint32_t s, const uint32_t *parts, int32_t nparts,
                                 const uint32_t *cand, size_t n_cand, struct inner_entry *e,
                                 struct shared_inner *x, uint64_t *steps)
{
    e->bound = malloc((n_cand * 2 + 1) * sizeof *e->bound);
    x->nodes = malloc((n_cand + 1) * sizeof *x->nodes);
    uint32_t q[64];
    size_t cap_k = 64, cap_a = 16;
    uint64_t *kb = malloc(cap_k * sizeof *kb);
    int32_t *ab = malloc(cap_a * sizeof *ab);
    int rc = -1;
    if (!e->bound || !x->nodes || !kb || !ab) goto out;
    for (size_t i = 0; i < n_cand; i++) {
        uint32_t c = cand[i];
        const uint8_t *path = (const uint8_t *)vi->blob + vi->off[vi->rep[c]];
        bool acc = false, alive = false;
        size_t nk = 0, na = 0;
        if (vi->tn[c].depth == 1) { /* the parts do not carry s's own acceptance */
            if (rx_dfa_accepting(d, s) && rx_dfa_next(d, s, vi->tn[c].byte) == RX_DEAD) {
                e->bound[2 * e->n_bound] = c;
                e->bound[2 * e->n_bound + 1] = s;
                e->n_bound++;
                x->nodes[x->n_nodes++] = c;
            }
            if (d->over_work || d->failed) goto out;
            continue;
        }
        for (int32_t p = 0; p < nparts; p++) {
            q[p] = parts[p];
            *steps += vi->tn[c].depth;
            for (uint32_t j = 0; j + 1 < vi->tn[c].depth && q[p] != RX_DEAD; j++)
                q[p] = rx_dfa_next(d, q[p], path[j]);
            if (d->over_work || d->failed) goto out;
            if (q[p] == RX_DEAD) continue;
            acc |= rx_dfa_accepting(d, q[p]);
            if (rx_dfa_next(d, q[p], vi->tn[c].byte) != RX_DEAD) alive = true;
            nk += (size_t)d->st[q[p]].n_kernel;
            na += (size_t)d->st[q[p]].n_accept;
        }
        if (!acc || alive) continue;
        if (nk > cap_k || na > cap_a) {
            cap_k = nk * 2 + 64;
            cap_a = na * 2 + 16;
            uint64_t *nkb = realloc(kb, cap_k * sizeof *kb);
            if (nkb) kb = nkb;
            int32_t *nab = realloc(ab, cap_a * sizeof *ab);
            if (nab) ab = nab;
            if (!nkb || !nab) goto out;
        }
        nk = na = 0;
        for (int32_t p = 0; p < nparts; p++) {
            if (q[p] == RX_DEAD) continue;
            const struct rx_dstate *st = &d->st[q[p]];
            if (st->n_kernel) memcpy(kb + nk, st->kernel, (size_t)st->n_kernel * sizeof *kb);
            nk += (size_t)st->n_kernel;
            memcpy(ab + na, st->accept, (size_t)st->n_accept * sizeof *ab);
            na += (size_t)st->n_accept;
        }
        uint32_t u = rx_dfa_intern(d, kb, (int32_t)nk, ab, (int32_t)na);
        if (u == RX_DEAD) goto out;
        e->bound[2 * e->n_bound] = c;
        e->bound[2 * e->n_bound + 1] = u;
        e->n_bound++;
        x->nodes[x->n_nodes++] = c;
    }
    rc = 0;
out:
    free(kb);
    free(ab);
    return rc;
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
    if (keep_boundaries_parts(vi, d, s, parts, nparts, cand, n_uniq, e, x, &g->trie_steps) || d->over_work)
        goto fail2;
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

/* The canonical forms of the successor states of one compose_inner call: most root children
 * lead to one of a few states (every letter of a free string to the same one), and a form costs
 * a pruning of the kernel, a hash per thread and a sort. A form depends only on the state, so it
 * is computed once per state and copied for each child (docs/grammar.md "Masks"). */
struct subkeys {
    uint32_t t[256];
    uint8_t *key[256];
    size_t len[256];
    uint64_t h[256];
    int n;
};

static void subkeys_free(struct subkeys *sk)
{
    if (!sk) return;
    for (int i = 0; i < sk->n; i++)
        free(sk->key[i]);
    free(sk);
}

/* The walk of the subtree under root child c from state t (= s after c's byte), c's own tokens
 * included: cached and shared by (canonical form of t, c). Returns the payload with a reference
 * for the caller (mask_release); NULL on failure. */
static struct shared_inner *sub_get(struct matcher *m, uint32_t t, uint32_t c, struct subkeys *sk)
{
    struct grammar_vocab_index *vi = (struct grammar_vocab_index *)m->g->vi;
    size_t klen;
    uint64_t h;
    int j = 0;
    while (j < sk->n && sk->t[j] != t)
        j++;
    if (j == sk->n) {
        uint8_t *k = inner_key(m, t, &klen, &h);
        if (!k) return NULL;
        sk->t[j] = t;
        sk->key[j] = k;
        sk->len[j] = klen;
        sk->h[j] = h;
        sk->n++;
    } else {
        m->g->subkey_hits++;
    }
    klen = sk->len[j];
    h = sk->h[j];
    uint8_t *key = malloc(klen + 4);
    if (!key) return NULL;
    memcpy(key, sk->key[j], klen);
    memcpy(key + klen, &c, 4);
    klen += 4;
    h = (h ^ c) * 1099511628211ull | 1;
    struct shared_inner *x = wcache_find(vi, key, klen, h);
    if (x) {
        free(key);
        return x;
    }
    struct inner_build ib = {.list = token_scratch(SCR_LIST, (size_t)vi->n_tokens + 1)};
    x = calloc(1, sizeof *x);
    if (!x || !ib.list) goto fail;
    for (int32_t o = vi->tn[c].tok; o >= 0; o = vi->tok_next[o])
        ib.list[ib.n_list++] = o;
    walk_inner_at(m, &ib, c, t);
    if (ib.oom || m->g->dfa.over_work) goto fail;
    x->list = malloc(((size_t)ib.n_list + 1) * sizeof *x->list); /* the payload's own copy */
    if (!x->list) goto fail;
    memcpy(x->list, ib.list, (size_t)ib.n_list * sizeof *x->list);
    x->n_list = ib.n_list;
    x->n_nodes = ib.n_bound / 2;
    x->nodes = malloc(((size_t)x->n_nodes + 1) * sizeof *x->nodes);
    if (!x->nodes) goto fail;
    for (uint32_t i = 0; i < x->n_nodes; i++)
        x->nodes[i] = ib.bound[2 * i];
    free(ib.bound);
    x->hash = h;
    x->key = key;
    x->key_len = klen;
    x->refs = 1; /* the caller's */
    (void)wcache_add(vi, x, sizeof *x + klen + (size_t)x->n_list * 4 + (size_t)x->n_nodes * 4);
    return x;
fail:
    free(ib.bound);
    if (x) {
        free(x->list);
        free(x->nodes);
    }
    free(x);
    free(key);
    return NULL;
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
    struct subkeys *sk = calloc(1, sizeof *sk);
    if (!bits || !x || !sk) goto fail;
    for (uint32_t c = 1; c < tn[0].end; c = tn[c].end) {
        uint32_t t = rx_dfa_next(d, s, tn[c].byte);
        size_t need = n_cand + 1;
        struct shared_inner *sub = NULL;
        if (t != RX_DEAD) {
            sub = sub_get(m, t, c, sk);
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
                mask_release(vi, sub);
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
        mask_release(vi, sub);
    }
    subkeys_free(sk);
    sk = NULL;
    if (keep_boundaries(vi, d, s, cand, n_cand, e, x, &g->trie_steps) || d->over_work) goto fail;
    free(cand);
    cand = NULL;
    if (payload_finish(vi, x, bits, words, key, klen, h, e)) goto fail;
    return x;
fail:
    subkeys_free(sk);
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
        mask_release((struct grammar_vocab_index *)g->vi, x->own);
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
    struct inner_entry *re = NULL;
    int rrc = relax_entry(m, s, &re);
    if (rrc < 0) return NULL;
    if (rrc > 0) {
        bool priv = re->own && !re->own->shared; /* a payload of its own: its bits count */
        g->inner_bytes += sizeof *re + (size_t)re->n_bound * 8 +
                          (priv ? (((size_t)g->vi->n_tokens + 31) / 32) * 4 : 0);
        g->inner[s] = re;
        g->relax_served++;
        return re;
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
    struct shared_inner *x = wcache_find(vi, key, klen, h);
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
        e->own = x; /* wcache_find's reference */
        if (localize(m, x, s, e) || g->dfa.over_work) {
            mask_release(vi, x);
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
    g->inner_bytes += sizeof *e + (size_t)e->n_bound * 8 + (!e->own->shared ? words * 4 : 0);
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

/* Lexer-state token sets computed at compile time (docs/grammar.md "Masks"): the walk of each
 * terminal's state after an opening quote (the first mask inside every JSON string and key).
 * At run time a string's first mask then finds its parts cached (alone, or as parts of a union
 * with the other terminals expected there) instead of walking the trie: a new pattern or
 * length string used to cost a full trie walk in the middle of the reply. Each walk runs under
 * the mask budget; one over it, or a lexer DFA past a quarter of its budget, ends the
 * pre-computation (not an error: those masks are computed when needed). */
int mask_prewarm(struct grammar *g, struct err *e)
{
    struct matcher *m = matcher_new(g, e);
    if (!m) return -1;
    struct rx_dfa *d = &g->dfa;
    int done = 0;
    /* trie steps allowed for the states a few characters in (below) */
    uint64_t deep_budget = (uint64_t)g->vi->n_nodes * MASK_PREWARM_DEEP_WALKS, deep = 0;
    pthread_mutex_lock(&g->mu);
    for (int32_t t = 0; t < g->n_terms && done < MASK_PREWARM_MAX; t++) {
        const struct gterm *T = &g->terms[t];
        if (T->nfa_start < 0 || T->ignore) continue;
        if (g->budget.max_dfa_bytes && d->bytes > g->budget.max_dfa_bytes / 4) break;
        matcher_budget_begin(m);
        uint32_t s0 = rx_dfa_start(d, &T->nfa_start, 1);
        uint32_t q = s0 != RX_DEAD ? rx_dfa_next(d, s0, '"') : RX_DEAD;
        if (q != RX_DEAD && !rx_dfa_final(d, q)) {
            (void)inner_get(m, q);
            done++;
        }
        bool over = d->over_work || d->failed;
        d->over_work = false;
        d->work_limit = 0;
        if (over) break;
        /* The states one ASCII character at a time further in: below a string's minLength (or
         * in a short pattern) each count is its own state and its first mask a trie walk;
         * most are found in the shared cache (keys by distance to min), the others are walked
         * here, within deep_budget for the whole grammar. */
        for (int k = 0; k < MASK_PREWARM_CHARS && q != RX_DEAD && deep < deep_budget; k++) {
            uint32_t q2 = RX_DEAD;
            for (const char *b = "a0A-_ ."; *b && q2 == RX_DEAD; b++) {
                q2 = rx_dfa_next(d, q, (uint8_t)*b);
                if (q2 != RX_DEAD && rx_dfa_final(d, q2)) q2 = RX_DEAD;
            }
            if (q2 == RX_DEAD || q2 == q) break;
            q = q2;
            matcher_budget_begin(m);
            uint64_t t0 = g->trie_steps;
            (void)inner_get(m, q);
            deep += g->trie_steps - t0;
            over = d->over_work || d->failed;
            d->over_work = false;
            d->work_limit = 0;
            if (over || (g->budget.max_dfa_bytes && d->bytes > g->budget.max_dfa_bytes / 4)) {
                q = RX_DEAD;
                t = g->n_terms; /* ends the outer loop too */
            }
        }
    }
    pthread_mutex_unlock(&g->mu);
    matcher_free(m);
    return 0;
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
    uint64_t trie0 = g->trie_steps;
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
    m->last_trie = g->trie_steps - trie0;
    if (m->oom) memset(bitset_out, 0, words * sizeof *bitset_out);
    pthread_mutex_unlock(&g->mu);
    if (has_eos && accept && !m->oom) set_bit(bitset_out, vi->eos);
}
