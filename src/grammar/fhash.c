/* fhash — structural hashes of NFA states, the thread part of the canonical keys of the
 * inner-walk caches (docs/grammar.md "Masks", "Structural hashes").
 *
 * The hash of NFA state q describes the automaton reachable from q (state kinds, byte ranges,
 * loop kinds and, by variant, loop bounds; terminal ids left out): equal hashes mean equal
 * futures for threads at equal counters, in any terminal or grammar on the vocabulary.
 *
 * It is computed per strongly connected component of the NFA graph: a breadth-first walk of
 * q's component from q numbers the states it meets in discovery order and mixes each state's
 * label and its successors, a successor inside the component by its number, one outside by
 * that state's own hash (computed first, memoized). So the hash of q is a function of the
 * unfolding of the graph from q — the tree of all paths, which is what a thread's future
 * depends on — and the work per state is its component, not everything reachable from it (the
 * automaton a JSON Schema pattern compiles to is a long chain of small loops: a hash of every
 * state of it used to cost the chain's length, quadratic over the walk of a state-eliminated
 * pattern). The graph is the NFA's with the edges the lexer can take: a length region's
 * CNT_END only leaves the region (its count is the region's, not iterations) and its CNT_ENTER
 * only enters the body, so the states of a pattern in a length region are not one component.
 *
 * A component of more than FH_BIG_SCC states (a key automaton's `(…)*` with counts written out,
 * the issue-10 regex's loop) would cost its size for every state hashed, and a mask may meet
 * dozens of new ones (Github_easy---o78130: ~36 of a 2,800-state loop, about half of its
 * costliest masks' CPU). Its states get a hash of their own instead — this grammar's id on the
 * vocabulary and the state — exact (the same state, the same future) but shared with no other
 * grammar, and so does every state that leads into such a component.
 *
 * Variants (the counter classes of mask.c's keys leave some loops' bounds out): FH_ALL_BOUNDS
 * (memo g->fh), FH_NO_BOUNDS (g->fhr) and (skip, skip2) for the bounds of one loop and of its
 * inner loop left out (an open-addressing map, g->fhv). Caller holds g->mu. */
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

#define FH_BIG_SCC 1024 /* states of a component hashed by identity, not by structure */

/* Successors of st for the hash, slot by slot (-1: none). */
static void fh_succ(const struct rx_nfa *n, const struct rx_nstate *st, int32_t o[2])
{
    o[0] = o[1] = -1;
    switch (st->kind) {
    case NS_BYTE:
    case NS_EPS:
    case NS_BOL:
    case NS_EOL:
    case NS_CNT_TICK:
        o[0] = st->out;
        break;
    case NS_SPLIT:
        o[0] = st->out;
        o[1] = st->out2;
        break;
    case NS_CNT_ENTER: {
        const struct rx_loop *L = &n->loops[st->loop];
        o[0] = L->body;
        if (!L->len) o[1] = L->cont;
        break;
    }
    case NS_CNT_END: {
        const struct rx_loop *L = &n->loops[st->loop];
        if (!L->len) o[0] = L->body;
        o[1] = L->cont;
        break;
    }
    default:
        break; /* ACCEPT */
    }
}

/* Strongly connected components of the hash's graph (iterative Tarjan): g->fh_scc[q] is q's
 * component. -1 on no memory. */
static int fh_scc_build(struct grammar *g)
{
    const struct rx_nfa *n = &g->nfa;
    size_t N = (size_t)n->n;
    int32_t *scc = malloc((N + 1) * sizeof *scc);
    int32_t *idx = malloc((N + 1) * sizeof *idx);
    int32_t *low = malloc((N + 1) * sizeof *low);
    int32_t *stk = malloc((N + 1) * sizeof *stk);
    int32_t *cs = malloc((N + 1) * sizeof *cs);     /* call stack: states */
    uint8_t *slot = malloc((N + 1) * sizeof *slot); /* next successor slot per state on it */
    int rc = -1;
    if (!scc || !idx || !low || !stk || !cs || !slot) goto out;
    for (size_t i = 0; i < N; i++) {
        idx[i] = -1;
        scc[i] = -1;
    }
    int32_t next = 0, sp = 0, n_scc = 0;
    for (int32_t r = 0; r < (int32_t)N; r++) {
        if (idx[r] >= 0) continue;
        int32_t csp = 0;
        cs[csp++] = r;
        idx[r] = low[r] = next++;
        slot[r] = 0;
        stk[sp++] = r;
        while (csp) {
            int32_t v = cs[csp - 1];
            if (slot[v] < 2) {
                int32_t o[2];
                fh_succ(n, &n->s[v], o);
                int32_t w = o[slot[v]++];
                if (w < 0) continue;
                if (idx[w] < 0) {
                    idx[w] = low[w] = next++;
                    slot[w] = 0;
                    stk[sp++] = w;
                    cs[csp++] = w;
                } else if (scc[w] < 0 && idx[w] < low[v]) {
                    low[v] = idx[w]; /* w is on the stack */
                }
                continue;
            }
            csp--;
            if (low[v] == idx[v]) {
                int32_t w;
                do {
                    w = stk[--sp];
                    scc[w] = n_scc;
                } while (w != v);
                n_scc++;
            }
            if (csp && low[v] < low[cs[csp - 1]]) low[cs[csp - 1]] = low[v];
        }
    }
    int32_t *size = calloc((size_t)n_scc + 1, sizeof *size);
    if (!size) goto out;
    for (size_t i = 0; i < N; i++)
        size[scc[i]]++;
    g->dfa.work += N; /* mask budget: once per grammar */
    g->fh_scc = scc;
    g->fh_scc_n = size;
    scc = NULL;
    rc = 0;
out:
    free(scc);
    free(idx);
    free(low);
    free(stk);
    free(cs);
    free(slot);
    return rc;
}

/* ---- memo ---- */

struct fh_vent {
    int32_t q, skip, skip2;
    uint64_t h[2]; /* h[0] == 0: empty slot */
};

static uint32_t fhv_slot(int32_t q, int32_t skip, int32_t skip2, uint32_t cap)
{
    uint64_t x = (uint64_t)(uint32_t)q * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)(uint32_t)skip * 0xff51afd7ed558ccdull ^ (uint64_t)(uint32_t)skip2;
    x ^= x >> 29;
    return (uint32_t)x & (cap - 1);
}

/* The memoized hash of (q, variant), or NULL when not computed yet. */
static const uint64_t *fh_memo(const struct grammar *g, int32_t q, int32_t skip, int32_t skip2)
{
    if (skip == FH_ALL_BOUNDS || skip == FH_NO_BOUNDS) {
        const uint64_t *h = &(skip == FH_NO_BOUNDS ? g->fhr : g->fh)[2 * (size_t)q];
        return h[0] | h[1] ? h : NULL;
    }
    if (!g->fhv_cap) return NULL;
    for (uint32_t j = fhv_slot(q, skip, skip2, g->fhv_cap);; j = (j + 1) & (g->fhv_cap - 1)) {
        const struct fh_vent *x = &g->fhv[j];
        if (!x->h[0]) return NULL;
        if (x->q == q && x->skip == skip && x->skip2 == skip2) return x->h;
    }
}

static int fh_store(struct grammar *g, int32_t q, int32_t skip, int32_t skip2, uint64_t a,
                    uint64_t b)
{
    if (skip == FH_ALL_BOUNDS || skip == FH_NO_BOUNDS) {
        uint64_t *h = &(skip == FH_NO_BOUNDS ? g->fhr : g->fh)[2 * (size_t)q];
        h[0] = a;
        h[1] = b;
        return 0;
    }
    if ((g->fhv_n + 1) * 2 > g->fhv_cap) {
        uint32_t nc = g->fhv_cap ? g->fhv_cap * 2 : 256;
        struct fh_vent *nv = calloc(nc, sizeof *nv);
        if (!nv) return -1;
        for (uint32_t i = 0; i < g->fhv_cap; i++) {
            const struct fh_vent *x = &g->fhv[i];
            if (!x->h[0]) continue;
            uint32_t j = fhv_slot(x->q, x->skip, x->skip2, nc);
            while (nv[j].h[0])
                j = (j + 1) & (nc - 1);
            nv[j] = *x;
        }
        free(g->fhv);
        g->fhv = nv;
        g->fhv_cap = nc;
    }
    uint32_t j = fhv_slot(q, skip, skip2, g->fhv_cap);
    while (g->fhv[j].h[0])
        j = (j + 1) & (g->fhv_cap - 1);
    g->fhv[j] = (struct fh_vent){q, skip, skip2, {a, b}};
    g->fhv_n++;
    return 0;
}

/* ---- the hash ---- */

#define FH_EXIT_TAG (1ull << 40) /* above any component-local number */

/* One breadth-first walk of q's component. Returns 1 and the hash in out when every successor
 * outside the component is memoized; else 0, with those successors pushed on g->fh_ws (to be
 * hashed first); -1 on no memory. */
static int fh_component(struct grammar *g, int32_t q, int32_t skip, int32_t skip2, uint64_t out[2])
{
    const struct rx_nfa *n = &g->nfa;
    const int32_t *scc = g->fh_scc;
    if (++g->fh_gen == 0) {
        memset(g->fh_stamp, 0, ((size_t)n->n + 1) * sizeof *g->fh_stamp);
        g->fh_gen = 1;
    }
    uint64_t a = 1469598103934665603ull, b = 0x243f6a8885a308d3ull;
    if (g->fh_scc_n[scc[q]] > FH_BIG_SCC) {
        if (!g->fh_gid) {
            struct grammar_vocab_index *vi = (struct grammar_vocab_index *)g->vi;
            pthread_mutex_lock(&vi->mu);
            g->fh_gid = ++vi->gid_next;
            pthread_mutex_unlock(&vi->mu);
        }
        uint64_t x = (g->fh_gid * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)(uint32_t)q << 20) ^
                     (uint64_t)(uint32_t)(skip + 3) ^ (uint64_t)(uint32_t)(skip2 + 1) << 40;
        g->dfa.work++;
        out[0] = (x * 0xff51afd7ed558ccdull) | 1;
        out[1] = (x ^ x >> 31) * 0xc4ceb9fe1a85ec53ull ^ 0x5851f42d4c957f2dull;
        return 1;
    }
#define FHMIX(v)                                                                                   \
    do {                                                                                           \
        uint64_t v_ = (v);                                                                         \
        a = (a ^ v_) * 1099511628211ull;                                                           \
        b = (b ^ (v_ + 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;                            \
        b ^= b >> 29;                                                                              \
    } while (0)
    int32_t head = 0, tail = 0;
    bool missing = false;
    g->fh_stamp[q] = g->fh_gen;
    g->fh_local[q] = tail;
    g->fh_queue[tail++] = q;
    while (head < tail) {
        const struct rx_nstate *st = &n->s[g->fh_queue[head++]];
        FHMIX((uint64_t)st->kind << 16 | (uint64_t)st->lo << 8 | st->hi);
        if (st->kind == NS_CNT_ENTER || st->kind == NS_CNT_END || st->kind == NS_CNT_TICK) {
            const struct rx_loop *L = &n->loops[st->loop];
            if (skip == FH_NO_BOUNDS || skip == st->loop || (skip2 >= 0 && skip2 == st->loop))
                FHMIX((uint64_t)(L->max < 0) + 11);
            else
                FHMIX((uint64_t)(uint32_t)L->min << 32 | (uint32_t)L->max);
            if (st->kind != NS_CNT_TICK) FHMIX((uint64_t)L->len + 3 + (L->parent >= 0 ? 16 : 0));
        }
        int32_t succ[2];
        fh_succ(n, st, succ);
        for (int k = 0; k < 2; k++) {
            int32_t o = succ[k];
            if (o < 0) {
                FHMIX(5);
                continue;
            }
            if (scc[o] != scc[q]) {
                const uint64_t *h = fh_memo(g, o, skip, skip2);
                if (!h) {
                    if (g->fh_ws_n == g->fh_ws_cap) {
                        size_t nc = g->fh_ws_cap ? g->fh_ws_cap * 2 : 256;
                        int32_t *nw = realloc(g->fh_ws, nc * sizeof *nw);
                        if (!nw) return -1;
                        g->fh_ws = nw;
                        g->fh_ws_cap = nc;
                    }
                    g->fh_ws[g->fh_ws_n++] = o;
                    missing = true;
                    continue;
                }
                FHMIX(FH_EXIT_TAG);
                FHMIX(h[0]);
                FHMIX(h[1]);
                continue;
            }
            if (g->fh_stamp[o] != g->fh_gen) {
                g->fh_stamp[o] = g->fh_gen;
                g->fh_local[o] = tail;
                g->fh_queue[tail++] = o;
            }
            FHMIX((uint64_t)g->fh_local[o] + 7);
        }
    }
#undef FHMIX
    g->dfa.work += (uint64_t)tail; /* mask budget: the walk over the component */
    if (missing) return 0;
    out[0] = a | 1;
    out[1] = b;
    return 1;
}

int fh_hash(struct grammar *g, int32_t q, int32_t skip, int32_t skip2, uint64_t out[2])
{
    const uint64_t *h = fh_memo(g, q, skip, skip2);
    if (h) {
        out[0] = h[0];
        out[1] = h[1];
        return 0;
    }
    if (!g->fh_scc && fh_scc_build(g)) return -1;
    /* post-order over the components' DAG with an explicit stack: a state is hashed once the
     * states its component leads to are */
    g->fh_ws_n = 0;
    if (!g->fh_ws_cap) {
        g->fh_ws = malloc(256 * sizeof *g->fh_ws);
        if (!g->fh_ws) return -1;
        g->fh_ws_cap = 256;
    }
    g->fh_ws[g->fh_ws_n++] = q;
    while (g->fh_ws_n) {
        int32_t x = g->fh_ws[g->fh_ws_n - 1];
        if (fh_memo(g, x, skip, skip2)) {
            g->fh_ws_n--;
            continue;
        }
        size_t below = g->fh_ws_n;
        uint64_t v[2];
        int rc = fh_component(g, x, skip, skip2, v);
        if (rc < 0) return -1;
        if (rc == 0) continue; /* its successors were pushed above it */
        /* x is at position below - 1 still: nothing was pushed */
        g->fh_ws_n = below - 1;
        if (fh_store(g, x, skip, skip2, v[0], v[1])) return -1;
    }
    h = fh_memo(g, q, skip, skip2);
    out[0] = h[0];
    out[1] = h[1];
    return 0;
}

void fh_free(struct grammar *g)
{
    free(g->fh_scc);
    free(g->fh_scc_n);
    free(g->fhv);
    free(g->fh_ws);
    g->fh_scc = NULL;
    g->fh_scc_n = NULL;
    g->fhv = NULL;
    g->fh_ws = NULL;
    g->fhv_cap = g->fhv_n = 0;
    g->fh_ws_cap = g->fh_ws_n = 0;
}
