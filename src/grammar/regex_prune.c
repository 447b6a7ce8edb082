/* regex_prune — dominated threads of a lexer state (docs/grammar.md "Dominated threads").
 *
 * A DFA state is a set of NFA threads; what a mask or a consume reads from it is, for every
 * continuation w, whether some thread stays alive on w and which terminals accept at its end.
 * A thread B whose continuations (and the terminals accepting at their ends) are a subset of
 * another thread A's adds nothing: dropping it leaves the state's language, per terminal, as it
 * was. Two rules, applied to each transition's result (rx_dfa_compute, not in relaxed mode):
 *
 * 1. Universal threads. A thread A without a counter, on a cycle, with no counted loop or length
 *    region reachable from it (its language is exact without counters) drops every other thread
 *    B with L(B) ⊆ L(A), where L(B) is over-approximated by ignoring B's counters (a counted loop
 *    may exit or repeat at any count: a superset). The post-match `.*` of an unanchored pattern
 *    dominates the threads still looking for the pattern: once matched, the state is the free
 *    string's again (same canonical form, same shared walk).
 * 2. Counts of one loop. For a counted loop (not a length region) with body B and continuation
 *    X where B·X ⊆ X (checked as L(body) ⊆ L(cont) with the loop's counter ignored, X exact), a
 *    thread at body state q with counter c has the continuations R·B^k·X, k from max(0, min - c)
 *    to max - c, which collapse to R·B^max(0, min - c)·X: the thread with the highest counter at
 *    q dominates the others at q. An unanchored `[a-z]{162}` entered at every position keeps one
 *    thread per body state instead of one per count.
 *
 * Inclusion is decided on the NFA by a bounded exploration of pairs (set of B's states, set of
 * A's states), memoized per pair of NFA states; past INC_MAX_PAIRS pairs the answer is "no"
 * (never wrong, only less pruning). Decisions depend on NFA states and on the order of counters
 * only, so shifted transitions (regex.c rx_shift) stay exact. */
#include <stdlib.h>
#include <string.h>

#include "grammar/regex.h"

#define INC_MAX_PAIRS 256
#define INC_MAX_STEPS 16384
#define DOM_MAX_REACH 8192
#define PRUNE_MAX_CAND 8
#define PRUNE_MAX_KERNEL 48

/* The epsilon successors of a counter state: ENTER goes into the body (and, for an empty
 * body, straight on), END continues (and, for an empty body, loops). */
static void loop_succ(const struct rx_nfa *n, const struct rx_nstate *st, int32_t o[2])
{
    const struct rx_loop *L = &n->loops[st->loop];
    o[0] = st->kind == NS_CNT_ENTER ? L->body : L->cont;
    if (!L->len) o[1] = st->kind == NS_CNT_ENTER ? L->cont : L->body;
}

/* ---- reachability: is the automaton from q free of counters (and is q on a cycle)? ---- */

static int succ2(const struct rx_nstate *st, int32_t o[2])
{
    switch (st->kind) {
    case NS_BYTE:
    case NS_EPS:
    case NS_BOL:
    case NS_EOL:
        o[0] = st->out;
        return 1;
    case NS_SPLIT:
        o[0] = st->out;
        o[1] = st->out2;
        return 2;
    default:
        return 0;
    }
}

/* 1 when no CNT_* state is reachable from q (within DOM_MAX_REACH states), and, if `cycle`, q
 * is reachable from itself; 0 otherwise; -1 no memory. */
static void scratch_gen(struct rx_dfa *d)
{
    if (++d->ic_gen == 0) {
        memset(d->ic_mark, 0, (size_t)d->nfa->n * 2 * sizeof *d->ic_mark);
        d->ic_gen = 1;
    }
}

static int counter_free(struct rx_dfa *d, int32_t q, bool cycle)
{
    const struct rx_nfa *n = d->nfa;
    int32_t *stack = d->ic_stack;
    uint32_t *seen = d->ic_mark;
    scratch_gen(d);
    int32_t sp = 0, visited = 0;
    bool self = false;
    stack[sp++] = q;
    seen[q] = d->ic_gen;
    while (sp) {
        const struct rx_nstate *st = &n->s[stack[--sp]];
        if (st->kind == NS_CNT_ENTER || st->kind == NS_CNT_END || st->kind == NS_CNT_TICK) return 0;
        int32_t o[2];
        int k = succ2(st, o);
        for (int j = 0; j < k; j++) {
            if (o[j] == q) self = true;
            if (o[j] < 0 || seen[o[j]] == d->ic_gen) continue;
            if (++visited >= DOM_MAX_REACH) return 0;
            seen[o[j]] = d->ic_gen;
            stack[sp++] = o[j];
        }
    }
    return !cycle || self;
}

/* ---- inclusion of languages between NFA states ---- */

/* L(B) ⊆ L(A) with A's side deterministic (a set of A's NFA states, as a DFA would hold) and
 * B's side one NFA state at a time: the language of a set of B states is within L(A) iff each
 * one's is, so the pairs are (B byte state, A state set) and each expands only its own byte
 * range: linear in B's automaton times A's subsets, where pairs of B subsets would multiply. */
struct inc_ctx {
    struct rx_dfa *d;
    const struct rx_nfa *n;
    uint32_t *mark; /* 2 per NFA state: normal and "past $" (the DFA's scratch) */
    int32_t *stack;
    int32_t *pool; /* A state sets of the pairs, and scratch closures */
    size_t n_pool, cap_pool;
    struct ipair {
        int32_t b, na;
        size_t oa;
        uint64_t h;
    } *pairs;
    int32_t n_pairs;
    uint64_t steps;
};

static int ic_reserve(struct inc_ctx *c, size_t more)
{
    if (c->n_pool + more <= c->cap_pool) return 0;
    size_t nc = (c->n_pool + more) * 2 + 256;
    int32_t *np = realloc(c->pool, nc * sizeof *np);
    if (!np) return -1;
    c->pool = np;
    c->cap_pool = nc;
    return 0;
}

static int cmp_u64p(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return a < b ? -1 : a > b;
}

static int cmp_i32p(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

/* Epsilon closure of seeds with counters ignored (a loop may repeat or exit at any count; BOL
 * never passes: these are states after at least one byte). Byte states are written at the end
 * of the pool (sorted; the caller keeps them by advancing n_pool), accept states to acc.
 * Returns the number of byte states, -1 on no memory. */
static int32_t ic_close(struct inc_ctx *c, const int32_t *seeds, int32_t ns, int32_t *acc,
                        int32_t *nacc)
{
    const struct rx_nfa *n = c->n;
    scratch_gen(c->d);
    uint32_t gen = c->d->ic_gen;
    int32_t sp = 0, nb = 0;
    *nacc = 0;
    for (int32_t i = 0; i < ns; i++)
        if (c->mark[2 * seeds[i]] != gen) {
            c->mark[2 * seeds[i]] = gen;
            c->stack[sp++] = seeds[i] << 1;
        }
    if (ic_reserve(c, (size_t)n->n)) return -1;
    int32_t *out = c->pool + c->n_pool;
    while (sp) {
        int32_t v = c->stack[--sp], s = v >> 1, end = v & 1;
        const struct rx_nstate *st = &n->s[s];
        int32_t o[2] = {-1, -1}, oend = end;
        c->steps++;
        switch (st->kind) {
        case NS_BYTE:
            if (!end) out[nb++] = s;
            break;
        case NS_ACCEPT:
            acc[(*nacc)++] = s;
            break;
        case NS_SPLIT:
            o[0] = st->out;
            o[1] = st->out2;
            break;
        case NS_EPS:
        case NS_CNT_TICK:
            o[0] = st->out;
            break;
        case NS_BOL:
            break;
        case NS_EOL:
            o[0] = st->out;
            oend = 1;
            break;
        case NS_CNT_ENTER:
        case NS_CNT_END:
            loop_succ(n, st, o);
            break;
        }
        for (int k = 0; k < 2; k++) {
            if (o[k] < 0) continue;
            uint32_t *mk = &c->mark[2 * o[k] + oend];
            if (*mk == gen) continue;
            *mk = gen;
            c->stack[sp++] = o[k] << 1 | oend;
        }
    }
    qsort(out, (size_t)nb, sizeof *out, cmp_i32p);
    return nb;
}

static uint64_t set_hash(const int32_t *a, int32_t n, uint64_t h)
{
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)a[i]) * 1099511628211ull;
    return (h ^ (uint64_t)n) * 1099511628211ull;
}

/* Pairs decided by earlier checks, kept for the DFA's lifetime: a pair every continuation of
 * which was explored without a counterexample is "good" (all pairs of a successful check), the
 * first pair of a check that found one is "bad". Later checks stop at them. */
struct rx_pairmemo {
    uint64_t h; /* 0: empty slot */
    int32_t *v; /* the A states */
    int32_t b, na;
    bool good;
};

static struct rx_pairmemo *pm_find(struct rx_dfa *d, uint64_t h, int32_t b, const int32_t *a,
                                   int32_t na)
{
    if (!d->pm_cap) return NULL;
    for (uint32_t j = (uint32_t)h & (d->pm_cap - 1); d->pm[j].h; j = (j + 1) & (d->pm_cap - 1)) {
        struct rx_pairmemo *x = &d->pm[j];
        if (x->h == h && x->b == b && x->na == na && !memcmp(x->v, a, (size_t)na * sizeof *a))
            return x;
    }
    return NULL;
}

/* Records a decided pair (failures only lose the memo). */
static void pm_put(struct rx_dfa *d, uint64_t h, int32_t b, const int32_t *a, int32_t na,
                   bool good)
{
    if (pm_find(d, h, b, a, na)) return;
    size_t cost = (size_t)na * 4 + 2 * sizeof(struct rx_pairmemo);
    if (d->max_bytes && d->bytes + cost > d->max_bytes / 8) return;
    if ((d->pm_n + 1) * 2 > d->pm_cap) {
        uint32_t nc = d->pm_cap ? d->pm_cap * 2 : 256;
        struct rx_pairmemo *n = calloc(nc, sizeof *n);
        if (!n) return;
        for (uint32_t i = 0; i < d->pm_cap; i++) {
            if (!d->pm[i].h) continue;
            uint32_t j = (uint32_t)d->pm[i].h & (nc - 1);
            while (n[j].h)
                j = (j + 1) & (nc - 1);
            n[j] = d->pm[i];
        }
        free(d->pm);
        d->pm = n;
        d->pm_cap = nc;
    }
    int32_t *v = malloc(((size_t)na + 1) * sizeof *v);
    if (!v) return;
    memcpy(v, a, (size_t)na * sizeof *v);
    uint32_t j = (uint32_t)h & (d->pm_cap - 1);
    while (d->pm[j].h)
        j = (j + 1) & (d->pm_cap - 1);
    d->pm[j] = (struct rx_pairmemo){h, v, b, na, good};
    d->pm_n++;
    d->bytes += cost;
}

/* Adds pair (b, the na A states at pool[oa..]) unless known. Returns 1 added, 0 known here or
 * good from an earlier check, -1 over the pair budget, bad from an earlier check, or no memory. */
static int ic_add_pair(struct inc_ctx *c, int32_t b, size_t oa, int32_t na)
{
    uint64_t h = set_hash(c->pool + oa, na, (uint64_t)(uint32_t)b * 0x9e3779b97f4a7c15ull) | 1;
    const struct rx_pairmemo *pm = pm_find(c->d, h, b, c->pool + oa, na);
    if (pm) return pm->good ? 0 : -1;
    for (int32_t i = 0; i < c->n_pairs; i++) { /* few pairs: a scan is enough */
        const struct ipair *p = &c->pairs[i];
        if (p->h == h && p->b == b && p->na == na &&
            !memcmp(c->pool + p->oa, c->pool + oa, (size_t)na * sizeof(int32_t)))
            return 0;
    }
    if (c->n_pairs == INC_MAX_PAIRS) return -1;
    c->pairs[c->n_pairs++] = (struct ipair){b, na, oa, h};
    return 1;
}

/* Whether every accept state in a[0..na) is in b[0..nb). */
static bool acc_subset(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    for (int32_t i = 0; i < na; i++) {
        bool found = false;
        for (int32_t j = 0; j < nb && !found; j++)
            found = a[i] == b[j];
        if (!found) return false;
    }
    return true;
}

/* After B's closure (nb byte states at pool[ob..], accepts acc_b) and A's (na at pool[oa..],
 * accepts acc_a): 0 a counterexample, 1 fine (pairs added), -1 budget / memo "bad" / memory. */
static int ic_step(struct inc_ctx *c, size_t ob, int32_t nb, const int32_t *acc_b, int32_t nab,
                   size_t oa, int32_t na, const int32_t *acc_a, int32_t naa)
{
    if (!acc_subset(acc_b, nab, acc_a, naa) || (nb && !na)) return 0;
    for (int32_t i = 0; i < nb; i++)
        if (ic_add_pair(c, c->pool[ob + (size_t)i], oa, na) < 0) return -1;
    return 1;
}

/* L(qb) ⊆ L(qa), qb's counters ignored (qa must reach no counter). 1 yes, 0 no or unknown
 * (over the pair or step budget), -1 no memory. */
static int inc_check(struct rx_dfa *d, int32_t qb, int32_t qa)
{
    const struct rx_nfa *n = d->nfa;
    struct inc_ctx c = {.d = d, .n = n, .mark = d->ic_mark, .stack = d->ic_stack};
    int rc = -1;
    c.pairs = malloc(INC_MAX_PAIRS * sizeof *c.pairs);
    int32_t *acc_b = d->ic_acc, *acc_a = d->ic_acc + n->n + 1, *seeds = d->ic_seeds;
    if (!c.pairs) goto out;
    int32_t nab, naa;
    /* B's closure is scratch (its states become pairs); A's stays in the pool */
    int32_t na = ic_close(&c, &qa, 1, acc_a, &naa);
    if (na < 0) goto out;
    size_t oa = c.n_pool;
    c.n_pool += (size_t)na;
    size_t ob = c.n_pool;
    int32_t nb = ic_close(&c, &qb, 1, acc_b, &nab);
    if (nb < 0) goto out;
    c.n_pool += (size_t)nb;
    rc = 0;
    int r = ic_step(&c, ob, nb, acc_b, nab, oa, na, acc_a, naa);
    if (r <= 0) goto out;
    for (int32_t pi = 0; pi < c.n_pairs; pi++) {
        if (c.steps > INC_MAX_STEPS) goto out; /* unknown: no */
        struct ipair p = c.pairs[pi];
        const struct rx_nstate *bs = &n->s[p.b];
        /* the parts of b's byte range on which every A state of the pair behaves alike */
        uint64_t cut[5] = {0};
        cut[bs->lo >> 6] |= 1ull << (bs->lo & 63);
        for (int32_t i = 0; i < p.na; i++) {
            const struct rx_nstate *st = &n->s[c.pool[p.oa + (size_t)i]];
            if (st->lo > bs->lo && st->lo <= bs->hi) cut[st->lo >> 6] |= 1ull << (st->lo & 63);
            if (st->hi >= bs->lo && st->hi < bs->hi)
                cut[(st->hi + 1) >> 6] |= 1ull << ((st->hi + 1) & 63);
        }
        size_t o2 = c.n_pool;
        int32_t b2 = ic_close(&c, &bs->out, 1, acc_b, &nab);
        if (b2 < 0) {
            rc = -1;
            goto out;
        }
        c.n_pool += (size_t)b2;
        for (int x = bs->lo; x <= bs->hi; x++) {
            if (!(cut[x >> 6] >> (x & 63) & 1)) continue;
            int32_t nsa = 0;
            for (int32_t i = 0; i < p.na; i++) {
                const struct rx_nstate *st = &n->s[c.pool[p.oa + (size_t)i]];
                if (x >= st->lo && x <= st->hi) seeds[nsa++] = st->out;
            }
            size_t oa2 = c.n_pool;
            int32_t a2 = ic_close(&c, seeds, nsa, acc_a, &naa);
            if (a2 < 0) {
                rc = -1;
                goto out;
            }
            c.n_pool += (size_t)a2;
            r = ic_step(&c, o2, b2, acc_b, nab, oa2, a2, acc_a, naa);
            if (r <= 0) goto out;
        }
    }
    rc = 1;
    for (int32_t i = 0; i < c.n_pairs; i++) {
        const struct ipair *p = &c.pairs[i];
        pm_put(d, p->h, p->b, c.pool + p->oa, p->na, true);
    }
out:
    d->work += c.steps + (uint64_t)c.n_pairs * 8;
    d->prune_work += c.steps + (uint64_t)c.n_pairs * 8;
    free(c.pairs);
    free(c.pool);
    return rc;
}

/* ---- memo and the two rules ---- */

static uint32_t mix32(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* Memoized inc_check(qb, qa): 1 / 0, -1 no memory; 0 without a check (nothing stored) when
 * the pair is new and !may_check. */
static int inc_memo(struct rx_dfa *d, int32_t qb, int32_t qa, bool may_check)
{
    uint64_t key = ((uint64_t)(uint32_t)qb << 32 | (uint32_t)qa) + 1;
    if ((d->inc_n + 1) * 2 > d->inc_cap) {
        uint32_t nc = d->inc_cap ? d->inc_cap * 2 : 256;
        uint64_t *nk = calloc(nc, sizeof *nk);
        if (!nk) return -1;
        for (uint32_t i = 0; i < d->inc_cap; i++) {
            if (!d->inc[i]) continue;
            uint32_t j = mix32(d->inc[i] >> 1) & (nc - 1);
            while (nk[j])
                j = (j + 1) & (nc - 1);
            nk[j] = d->inc[i];
        }
        d->bytes += (size_t)(nc - d->inc_cap) * sizeof *nk;
        free(d->inc);
        d->inc = nk;
        d->inc_cap = nc;
    }
    uint32_t j = mix32(key) & (d->inc_cap - 1);
    while (d->inc[j]) {
        if (d->inc[j] >> 1 == key) return (int)(d->inc[j] & 1);
        j = (j + 1) & (d->inc_cap - 1);
    }
    if (!may_check) return 0;
    int r = inc_check(d, qb, qa);
    if (r < 0) return -1;
    d->inc[j] = key << 1 | (uint64_t)r;
    d->inc_n++;
    return r;
}

/* Shortest continuation to an ACCEPT state, in bytes, per NFA state, with the semantics of
 * ic_close (counters ignored, BOL blocked, past $ only epsilon moves): L(B) ⊆ L(A) needs
 * minlen(B) >= minlen(A), which rejects most candidate pairs without a check (a partial match
 * of a pattern is shorter to finish than the thread still looking for it). By relaxation in
 * index order (states are built continuation-first: few rounds); not converged after 64 rounds,
 * every value is 0 (no filtering). */
static void minlen_init(struct rx_dfa *d)
{
    const struct rx_nfa *n = d->nfa;
    int32_t *ml = d->minlen;
    uint8_t *endok = (uint8_t *)d->ic_seeds; /* scratch: n + 1 ints */
    for (int32_t i = 0; i < n->n; i++) {
        ml[i] = RX_TICKS_INF;
        endok[i] = n->s[i].kind == NS_ACCEPT;
    }
    bool changed = true;
    for (int round = 0; changed; round++) {
        if (round == 64) {
            memset(ml, 0, (size_t)n->n * sizeof *ml);
            return;
        }
        changed = false;
        for (int32_t i = 0; i < n->n; i++) {
            const struct rx_nstate *st = &n->s[i];
            int32_t o[2] = {-1, -1}, w = 0, v = ml[i];
            bool e = endok[i];
            switch (st->kind) {
            case NS_ACCEPT: v = 0; break;
            case NS_BYTE: o[0] = st->out; w = 1; break;
            case NS_SPLIT: o[0] = st->out; o[1] = st->out2; break;
            case NS_EPS:
            case NS_CNT_TICK: o[0] = st->out; break;
            case NS_BOL: break;
            case NS_EOL:
                if (endok[st->out]) v = 0;
                break;
            case NS_CNT_ENTER:
            case NS_CNT_END:
                loop_succ(n, st, o);
                break;
            }
            for (int k = 0; k < 2; k++) {
                if (o[k] < 0) continue;
                if (ml[o[k]] + w < v) v = ml[o[k]] + w;
                if (!w && endok[o[k]]) e = true;
            }
            if (st->kind == NS_EOL && endok[st->out]) e = true;
            if (v != ml[i] || e != endok[i]) {
                ml[i] = v;
                endok[i] = e;
                changed = true;
            }
        }
    }
}

/* Lazily sized per-state / per-loop flags (-1 unknown). */
static int dom_tables(struct rx_dfa *d)
{
    if (d->dom) return 0;
    if (d->prune_broken) return -1;
    const struct rx_nfa *n = d->nfa;
    size_t ns = (size_t)(n->n > 0 ? n->n : 1);
    size_t cost = ns * (1 + 4 + 8 + 8 + 8 + 4 + 4 + 4) + (size_t)n->n_loops;
    if (d->max_bytes && d->bytes + cost > d->max_bytes / 8) {
        d->prune_broken = true; /* no pruning rather than a DFA over budget */
        return -1;
    }
    d->dom = malloc(ns);
    d->loop_dom = malloc((size_t)(n->n_loops > 0 ? n->n_loops : 1));
    d->prune_mark = calloc(ns, sizeof *d->prune_mark);
    d->acc_of = malloc(ns * sizeof *d->acc_of);
    d->minlen = malloc(ns * sizeof *d->minlen);
    d->ic_mark = calloc(ns * 2, sizeof *d->ic_mark);
    d->ic_stack = malloc(ns * 2 * sizeof *d->ic_stack);
    d->ic_acc = malloc((ns + 1) * 2 * sizeof *d->ic_acc);
    d->ic_seeds = malloc((ns + 1) * sizeof *d->ic_seeds);
    if (!d->dom || !d->loop_dom || !d->prune_mark || !d->ic_mark || !d->ic_stack || !d->ic_acc ||
        !d->ic_seeds || !d->acc_of || !d->minlen) {
        rx_prune_deinit(d);
        d->prune_broken = true;
        return -1;
    }
    memset(d->dom, -1, ns);
    /* rx_nfa_add emits a terminal's ACCEPT state first and all its other states after it: the
     * last ACCEPT at or before a state is its terminal's (threads of different terminals never
     * dominate each other; this only saves the checks) */
    int32_t last = -1;
    for (int32_t i = 0; i < n->n; i++) {
        if (n->s[i].kind == NS_ACCEPT) last = i;
        d->acc_of[i] = last;
    }
    minlen_init(d);
    memset(d->loop_dom, -1, (size_t)(n->n_loops > 0 ? n->n_loops : 1));
    d->bytes += cost;
    return 0;
}

/* Rule 1's candidate test: a byte state on a cycle whose future has no counters. */
static int dom_ok(struct rx_dfa *d, int32_t q)
{
    if (d->dom[q] < 0) {
        if (d->nfa->s[q].kind != NS_BYTE) {
            d->dom[q] = 0;
        } else {
            int r = counter_free(d, q, true);
            if (r < 0) return 0;
            d->dom[q] = (int8_t)r;
        }
    }
    return d->dom[q];
}

/* Rule 2's test for loop li: not a length region, its continuation reaches no counter, and
 * L(body) ⊆ L(cont) with the loop's counter ignored (B·X ⊆ X). */
static int loop_dom_ok(struct rx_dfa *d, int32_t li)
{
    if (d->loop_dom[li] < 0) {
        const struct rx_loop *L = &d->nfa->loops[li];
        int r = 0;
        if (!L->len && L->cont >= 0 && L->cont < d->nfa->n) {
            r = counter_free(d, L->cont, false);
            if (r > 0) r = inc_memo(d, L->body, L->cont, true);
        }
        if (r < 0) return 0;
        d->loop_dom[li] = (int8_t)r;
    }
    return d->loop_dom[li];
}

int32_t rx_prune_kernel(struct rx_dfa *d, uint64_t *k, int32_t nk, int rules)
{
    if (nk < 2 || d->no_prune || dom_tables(d)) return nk;
    const struct rx_nfa *n = d->nfa;
    /* sorted: counted threads last, by counter, then state */
    if (nk > 24) {
        qsort(k, (size_t)nk, sizeof *k, cmp_u64p);
    } else {
        for (int32_t i = 1; i < nk; i++) {
            uint64_t v = k[i];
            int32_t j = i;
            while (j > 0 && k[j - 1] > v) {
                k[j] = k[j - 1];
                j--;
            }
            k[j] = v;
        }
    }
    int32_t w = nk;
    /* rule 2: of the counted threads at one state of a dominated loop, the highest counter */
    if ((rules & RX_PRUNE_COUNTS) && rx_thread_c1(k[nk - 1])) {
        if (++d->prune_gen == 0) {
            memset(d->prune_mark, 0, (size_t)n->n * sizeof *d->prune_mark);
            d->prune_gen = 1;
        }
        bool any = false;
        for (int32_t i = nk - 1; i >= 0 && rx_thread_c1(k[i]); i--) {
            int32_t s = rx_thread_state(k[i]);
            if (d->prune_mark[s] == d->prune_gen) {
                int32_t li = rx_nfa_loop_of(n, s);
                if (li >= 0 && loop_dom_ok(d, li)) {
                    k[i] = UINT64_MAX; /* dropped */
                    any = true;
                    continue;
                }
            }
            d->prune_mark[s] = d->prune_gen;
        }
        if (any) {
            w = 0;
            for (int32_t i = 0; i < nk; i++)
                if (k[i] != UINT64_MAX) k[w++] = k[i];
            d->pruned += (uint64_t)(nk - w);
            nk = w;
        }
    }
    /* rule 1: universal threads (counter-free ones sort first). Large kernels (the key states
     * of an object with many properties: a thread per literal) are left alone: the pairs to
     * look up would cost more than the walks they could save. */
    int cands = 0;
    bool any = false;
    if (!(rules & RX_PRUNE_UNIVERSAL) || nk > PRUNE_MAX_KERNEL) return nk;
    for (int32_t a = 0; a < nk && !rx_thread_c1(k[a]) && cands < PRUNE_MAX_CAND; a++) {
        if (k[a] == UINT64_MAX) continue;
        int32_t qa = rx_thread_state(k[a]);
        if (!dom_ok(d, qa)) continue;
        cands++;
        for (int32_t b = 0; b < nk; b++) {
            if (b == a || k[b] == UINT64_MAX) continue;
            int32_t qb = rx_thread_state(k[b]);
            if (d->acc_of[qb] != d->acc_of[qa] || d->minlen[qb] < d->minlen[qa]) continue;
            /* new checks stop once this mask's checks pass d->prune_work_limit: keys then
             * keep threads a check would have dropped (only less sharing) */
            int r = inc_memo(d, qb, qa, !d->prune_work_limit || d->prune_work < d->prune_work_limit);
            if (r > 0) {
                k[b] = UINT64_MAX;
                any = true;
            }
        }
    }
    if (any) {
        w = 0;
        for (int32_t i = 0; i < nk; i++)
            if (k[i] != UINT64_MAX) k[w++] = k[i];
        d->pruned += (uint64_t)(nk - w);
        nk = w;
    }
    return nk;
}

void rx_prune_deinit(struct rx_dfa *d)
{
    free(d->dom);
    free(d->loop_dom);
    free(d->prune_mark);
    free(d->ic_mark);
    free(d->ic_stack);
    free(d->ic_acc);
    free(d->ic_seeds);
    free(d->acc_of);
    d->acc_of = NULL;
    free(d->minlen);
    d->minlen = NULL;
    free(d->inc);
    d->inc = NULL;
    for (uint32_t i = 0; i < d->pm_cap; i++)
        free(d->pm[i].v);
    free(d->pm);
    d->pm = NULL;
    d->pm_cap = d->pm_n = 0;
    d->inc_cap = d->inc_n = 0;
    d->dom = NULL;
    d->loop_dom = NULL;
    d->prune_mark = NULL;
    d->ic_mark = NULL;
    d->ic_stack = NULL;
    d->ic_acc = NULL;
    d->ic_seeds = NULL;
}
