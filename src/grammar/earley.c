/* earley — the matcher: Earley rows over lexemes, lexer start states, scanning, consuming tokens
 * byte by byte, acceptance, rollback and the per-token budget (docs/grammar.md "Parser", "State
 * and rollback"). Token masks are mask.c. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

static void next_gen(struct matcher *m)
{
    if (++m->gen == 0) {
        memset(m->nt_mark, 0, (size_t)m->g->n_nts * sizeof *m->nt_mark);
        memset(m->t_mark, 0, (size_t)m->g->n_terms * sizeof *m->t_mark);
        m->gen = 1;
    }
}

static int push_item_raw(struct matcher *m, uint32_t pos, uint32_t origin)
{
    if (m->g->budget.max_items && m->n_items >= m->g->budget.max_items) {
        m->oom = true;
        m->over = OVER_ITEMS;
        return -1;
    }
    if (m->n_items == m->cap_items) {
        uint32_t nc = m->cap_items * 2;
        struct item *n = realloc(m->items, (size_t)nc * sizeof *n);
        if (!n) {
            m->oom = true;
            return -1;
        }
        m->items = n;
        m->cap_items = nc;
    }
    m->items[m->n_items++] = (struct item){pos, origin};
    return 0;
}

static uint64_t item_key(uint32_t pos, uint32_t origin)
{
    return ((uint64_t)pos << 32 | origin) + 1;
}

static uint32_t hash_key(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

/* Adds an item to the row under construction (items[row_start..]) unless present. */
static int add_item(struct matcher *m, uint32_t row_start, uint32_t pos, uint32_t origin)
{
    uint32_t n = m->n_items - row_start;
    if ((n + 1) * 2 > m->dedup_cap) {
        uint32_t nc = m->dedup_cap * 2;
        uint64_t *nd = calloc(nc, sizeof *nd);
        if (!nd) {
            m->oom = true;
            return -1;
        }
        free(m->dedup);
        m->dedup = nd;
        m->dedup_cap = nc;
        for (uint32_t i = row_start; i < m->n_items; i++) {
            uint64_t k = item_key(m->items[i].pos, m->items[i].origin);
            uint32_t j = hash_key(k) & (nc - 1);
            while (nd[j])
                j = (j + 1) & (nc - 1);
            nd[j] = k;
        }
    }
    uint64_t k = item_key(pos, origin);
    uint32_t j = hash_key(k) & (m->dedup_cap - 1);
    while (m->dedup[j]) {
        if (m->dedup[j] == k) return 0;
        j = (j + 1) & (m->dedup_cap - 1);
    }
    m->dedup[j] = k;
    return push_item_raw(m, pos, origin);
}

static uint64_t hash_terms(const int32_t *t, int32_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (int32_t i = 0; i < n; i++)
        h = (h ^ (uint32_t)t[i]) * 1099511628211ull;
    return h | 1;
}

static int cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return a < b ? -1 : a > b;
}

int grammar_cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

/* Lexer start state for a sorted set of terminals (cached in the grammar). Caller holds g->mu. */
static uint32_t lex_start(struct matcher *m, const int32_t *terms, int32_t n)
{
    struct grammar *g = m->g;
    uint64_t h = hash_terms(terms, n);
    uint32_t j = (uint32_t)h & (g->ls_cap - 1);
    while (g->ls_tab[j].hash) {
        struct lexstart_entry *x = &g->ls_tab[j];
        if (x->hash == h && x->n == n && !memcmp(x->terms, terms, (size_t)n * sizeof *terms))
            return x->state;
        j = (j + 1) & (g->ls_cap - 1);
    }
    int32_t *starts = malloc(((size_t)n + (size_t)g->n_ignore + 1) * sizeof *starts);
    int32_t *copy = malloc(((size_t)n + 1) * sizeof *copy);
    if (!starts || !copy) {
        free(starts);
        free(copy);
        m->oom = true;
        return RX_DEAD;
    }
    int32_t ns = 0;
    for (int32_t i = 0; i < n; i++)
        starts[ns++] = g->terms[terms[i]].nfa_start;
    if (n > 0) /* ignored lexemes only between expected lexemes */
        for (int32_t i = 0; i < g->n_ignore; i++)
            starts[ns++] = g->ignore_starts[i];
    uint32_t st = rx_dfa_start(&g->dfa, starts, ns);
    free(starts);
    if (g->dfa.over_work) { /* abandoned: nothing to cache */
        free(copy);
        return RX_DEAD;
    }
    memcpy(copy, terms, (size_t)n * sizeof *terms);
    if ((g->ls_n + 1) * 2 > g->ls_cap) {
        uint32_t nc = g->ls_cap * 2;
        struct lexstart_entry *nt = calloc(nc, sizeof *nt);
        if (!nt) {
            free(copy);
            return st;
        }
        for (uint32_t i = 0; i < g->ls_cap; i++) {
            if (!g->ls_tab[i].hash) continue;
            uint32_t k = (uint32_t)g->ls_tab[i].hash & (nc - 1);
            while (nt[k].hash)
                k = (k + 1) & (nc - 1);
            nt[k] = g->ls_tab[i];
        }
        free(g->ls_tab);
        g->ls_tab = nt;
        g->ls_cap = nc;
        j = (uint32_t)h & (nc - 1);
        while (g->ls_tab[j].hash)
            j = (j + 1) & (nc - 1);
    }
    g->ls_tab[j] = (struct lexstart_entry){.hash = h, .terms = copy, .n = n, .state = st};
    g->ls_n++;
    return st;
}

/* Completes the row whose kernel items are items[start..n_items): predict / complete to a
 * fixpoint, then computes its lexer start state and accept flag. Returns the row index or -1. */
static int32_t close_row(struct matcher *m, uint32_t start)
{
    struct grammar *g = m->g;
    uint32_t ri = m->n_rows;
    if (m->n_rows == m->cap_rows) {
        uint32_t nc = m->cap_rows * 2;
        struct row *n = realloc(m->rows, (size_t)nc * sizeof *n);
        if (!n) {
            m->oom = true;
            return -1;
        }
        m->rows = n;
        m->cap_rows = nc;
    }
    /* seed the dedup table with the kernel (the table is all zero between rows) */
    {
        uint32_t kn = m->n_items;
        m->n_items = start;
        for (uint32_t i = start; i < kn; i++) {
            struct item it = m->items[i];
            if (add_item(m, start, it.pos, it.origin)) return -1;
        }
    }
    next_gen(m);
    struct rx_dfa *d = &g->dfa;
    for (uint32_t k = start; k < m->n_items; k++) {
        struct item it = m->items[k];
        int32_t sym = g->flat[it.pos];
        if (d->work_limit && ++d->work > d->work_limit) {
            d->over_work = true;
            return -1;
        }
        if (sym & SYM_END) {
            int32_t A = g->prods[sym & SYM_IDX].lhs;
            if (it.origin == ri) continue; /* nullable: handled at prediction */
            const struct row *o = &m->rows[it.origin];
            d->work += o->n;
            int32_t want = SYM_NT | A;
            for (uint32_t x = o->start; x < o->start + o->n; x++) {
                struct item oi = m->items[x];
                if (g->flat[oi.pos] == want && add_item(m, start, oi.pos + 1, oi.origin)) return -1;
            }
        } else if (sym & SYM_NT) {
            int32_t B = sym & SYM_IDX;
            if (m->nt_mark[B] != m->gen) {
                m->nt_mark[B] = m->gen;
                for (int32_t p = g->nt_first[B]; p < g->nt_first[B + 1]; p++)
                    if (add_item(m, start, (uint32_t)g->prods[g->nt_prods[p]].off, ri)) return -1;
            }
            if (g->nullable[B] && add_item(m, start, it.pos + 1, it.origin)) return -1;
        }
    }
    /* expected terminals -> lexer start state */
    next_gen(m);
    int32_t nt = 0;
    bool accept = false;
    uint32_t acc_pos = (uint32_t)(g->prods[g->start_prod].off + 1);
    for (uint32_t k = start; k < m->n_items; k++) {
        struct item it = m->items[k];
        int32_t sym = g->flat[it.pos];
        if (!(sym & (SYM_NT | SYM_END))) {
            if (g->terms[sym].nfa_start >= 0 && m->t_mark[sym] != m->gen) {
                m->t_mark[sym] = m->gen;
                m->tbuf[nt++] = sym;
            }
        } else if (it.pos == acc_pos && it.origin == 0) {
            accept = true;
        }
    }
    /* clear the dedup slots this row used */
    for (uint32_t k = start; k < m->n_items; k++) {
        uint64_t key = item_key(m->items[k].pos, m->items[k].origin);
        uint32_t j = hash_key(key) & (m->dedup_cap - 1);
        while (m->dedup[j] && m->dedup[j] != key)
            j = (j + 1) & (m->dedup_cap - 1);
        m->dedup[j] = 0;
        /* later keys of the same probe chain may now be unreachable: clear them too */
        for (uint32_t q = (j + 1) & (m->dedup_cap - 1); m->dedup[q];
             q = (q + 1) & (m->dedup_cap - 1))
            m->dedup[q] = 0;
    }
    qsort(m->tbuf, (size_t)nt, sizeof *m->tbuf, cmp_i32);
    uint32_t lex = lex_start(m, m->tbuf, nt);
    m->rows[ri] =
        (struct row){.start = start, .n = m->n_items - start, .lex = lex, .accept = accept};
    m->n_rows++;
    return (int32_t)ri;
}

/* Scans the lexeme accepted by DFA state s from row r: a new row, r itself when only %ignore
 * terminals accept, or -1 when nothing in r expects it. */
static int32_t scan(struct matcher *m, uint32_t r, uint32_t s)
{
    struct grammar *g = m->g;
    const struct rx_dstate *ds = &g->dfa.st[s];
    next_gen(m);
    bool ign = false;
    for (int32_t i = 0; i < ds->n_accept; i++) {
        int32_t t = ds->accept[i];
        m->t_mark[t] = m->gen;
        if (g->terms[t].ignore) ign = true;
    }
    uint32_t start = m->n_items;
    const struct row *R = &m->rows[r];
    for (uint32_t x = R->start; x < R->start + R->n; x++) {
        struct item it = m->items[x];
        int32_t sym = g->flat[it.pos];
        if (!(sym & (SYM_NT | SYM_END)) && m->t_mark[sym] == m->gen) {
            if (push_item_raw(m, it.pos + 1, it.origin)) return -1;
            R = &m->rows[r];
        }
    }
    if (m->n_items == start) return ign ? (int32_t)r : -1;
    return close_row(m, start);
}

/* Same as scan for a special-token terminal with token id tok. */
static int32_t scan_special(struct matcher *m, uint32_t r, int32_t tok)
{
    struct grammar *g = m->g;
    uint32_t start = m->n_items;
    const struct row *R = &m->rows[r];
    for (uint32_t x = R->start; x < R->start + R->n; x++) {
        struct item it = m->items[x];
        int32_t sym = g->flat[it.pos];
        if (!(sym & (SYM_NT | SYM_END)) && g->terms[sym].special == tok) {
            if (push_item_raw(m, it.pos + 1, it.origin)) return -1;
            R = &m->rows[r];
        }
    }
    if (m->n_items == start) return -1;
    return close_row(m, start);
}

int32_t matcher_scan_memo(struct matcher *m, uint32_t r, uint32_t s)
{
    uint32_t h = (r * 2654435761u ^ s * 40503u) & (MEMO_SIZE - 1);
    for (int probe = 0; probe < 8; probe++) {
        uint32_t j = (h + (uint32_t)probe) & (MEMO_SIZE - 1);
        if (m->memo[j].gen != m->memo_gen) {
            int32_t x = scan(m, r, s);
            m->memo[j].gen = m->memo_gen;
            m->memo[j].row = r;
            m->memo[j].state = s;
            m->memo[j].result = (uint32_t)x;
            return x;
        }
        if (m->memo[j].row == r && m->memo[j].state == s) return (int32_t)m->memo[j].result;
    }
    return scan(m, r, s);
}

struct matcher *matcher_new(const struct grammar *gc, struct err *e)
{
    struct grammar *g = (struct grammar *)gc;
    struct matcher *m = calloc(1, sizeof *m);
    if (!m) goto nomem;
    m->g = g;
    m->cap_items = 256;
    m->cap_rows = 64;
    m->cap_hist = 64;
    m->dedup_cap = 256;
    m->items = malloc(m->cap_items * sizeof *m->items);
    m->rows = malloc(m->cap_rows * sizeof *m->rows);
    m->hist = malloc(m->cap_hist * sizeof *m->hist);
    m->dedup = calloc(m->dedup_cap, sizeof *m->dedup);
    m->nt_mark = calloc((size_t)g->n_nts + 1, sizeof *m->nt_mark);
    m->t_mark = calloc((size_t)g->n_terms + 1, sizeof *m->t_mark);
    m->tbuf = malloc(((size_t)g->n_terms + 1) * sizeof *m->tbuf);
    if (!m->items || !m->rows || !m->hist || !m->dedup || !m->nt_mark || !m->t_mark || !m->tbuf) {
        grammar_ref(g);
        matcher_free(m);
        goto nomem;
    }
    grammar_ref(g);
    pthread_mutex_lock(&g->mu);
    if (g->dfa.failed) { /* for good: later masks could miss tokens */
        pthread_mutex_unlock(&g->mu);
        m->oom = true;
        m->over = g->dfa.over_bytes ? OVER_DFA : OVER_NONE;
        matcher_status(m, e);
        matcher_free(m);
        return NULL;
    }
    m->items[0] = (struct item){(uint32_t)g->prods[g->start_prod].off, 0};
    m->n_items = 1;
    int32_t r = close_row(m, 0);
    pthread_mutex_unlock(&g->mu);
    if (r < 0) {
        matcher_free(m);
        goto nomem;
    }
    m->cur = m->rows[0].lex;
    m->empty = true;
    return m;
nomem:
    err_set(e, ERR_NOMEM, "out of memory creating a grammar matcher");
    return NULL;
}

void matcher_free(struct matcher *m)
{
    if (!m) return;
    free(m->items);
    free(m->rows);
    free(m->hist);
    free(m->dedup);
    free(m->nt_mark);
    free(m->t_mark);
    free(m->tbuf);
    grammar_free(m->g);
    free(m);
}

/* ------------------------------------------------------------------------------------------ */
/* Lexing bytes                                                                                 */

/* One byte from (row *r, state *s, *empty). Returns false if the byte is not allowed. */
bool matcher_advance(struct matcher *m, uint32_t *r, uint32_t *s, bool *empty, uint8_t b, bool memo)
{
    struct rx_dfa *d = &m->g->dfa;
    uint32_t t = rx_dfa_next(d, *s, b);
    if (t != RX_DEAD) {
        *s = t;
        *empty = false;
        return true;
    }
    if (*empty || !rx_dfa_accepting(d, *s)) return false;
    int32_t r2 = memo ? matcher_scan_memo(m, *r, *s) : scan(m, *r, *s);
    if (r2 < 0) return false;
    uint32_t q = m->rows[r2].lex;
    t = rx_dfa_next(d, q, b);
    if (t == RX_DEAD) return false;
    *r = (uint32_t)r2;
    *s = t;
    *empty = false;
    return true;
}

/* The row reached by ending the current lexeme here (top row if empty), or -1. */
int32_t matcher_end_lexeme(struct matcher *m, uint32_t r, uint32_t s, bool empty, bool memo)
{
    if (empty) return (int32_t)r;
    if (!rx_dfa_accepting(&m->g->dfa, s)) return -1;
    return memo ? matcher_scan_memo(m, r, s) : scan(m, r, s);
}


void matcher_truncate(struct matcher *m, uint32_t n_rows, uint32_t n_items)
{
    m->n_rows = n_rows;
    m->n_items = n_items;
}

/* The mask budget covers one mask or consume: the DFA's work counter restarts and is capped.
 * Caller holds g->mu. */
void matcher_budget_begin(struct matcher *m)
{
    struct rx_dfa *d = &m->g->dfa;
    d->work = 0;
    d->work_limit = m->g->budget.max_mask_work;
    d->over_work = false;
    /* inclusion checks of dominated threads (regex_prune.c) only save walks: a mask spends at
     * most MASK_PRUNE_WORK steps on new ones */
    d->prune_work = 0;
    d->prune_work_limit = MASK_PRUNE_WORK;
}

/* Records a budget failure in the matcher (it stays failed) and lifts the DFA's work cap, so
 * other matchers of the grammar are unaffected. */
void matcher_budget_end(struct matcher *m)
{
    struct rx_dfa *d = &m->g->dfa;
    m->last_work = d->work;
    if (!m->oom && (d->over_work || d->failed)) { /* failed: a mask may be missing tokens */
        m->oom = true;
        m->over = d->over_work ? OVER_WORK : d->over_bytes ? OVER_DFA : OVER_NONE;
    }
    d->over_work = false;
    d->work_limit = 0;
    d->prune_work_limit = 0;
}

int matcher_status(const struct matcher *m, struct err *e)
{
    if (!m->oom) return 0;
    const struct grammar_budget *b = &m->g->budget;
    switch (m->over) {
    case OVER_WORK:
        return err_set(e, ERR_INVALID,
                       "the grammar needs more than %llu steps for one token's mask (the "
                       "per-token mask budget); simplify large alternations or repetitions",
                       (unsigned long long)b->max_mask_work);
    case OVER_DFA:
        return err_set(e, ERR_INVALID,
                       "the grammar's lexer automaton grew past %zu MB (the grammar memory "
                       "budget)",
                       b->max_dfa_bytes >> 20);
    case OVER_ITEMS:
        return err_set(e, ERR_INVALID,
                       "the grammar's parser state grew past %u items (the matcher memory "
                       "budget; a very ambiguous grammar)",
                       b->max_items);
    default:
        return err_set(e, ERR_NOMEM, "out of memory in the grammar matcher");
    }
}

uint64_t matcher_last_work(const struct matcher *m)
{
    return m->last_work;
}

uint64_t matcher_last_trie_steps(const struct matcher *m)
{
    return m->last_trie;
}

static int hist_push(struct matcher *m)
{
    if (m->n_hist == m->cap_hist) {
        uint32_t nc = m->cap_hist * 2;
        struct hist *n = realloc(m->hist, (size_t)nc * sizeof *n);
        if (!n) return -1;
        m->hist = n;
        m->cap_hist = nc;
    }
    m->hist[m->n_hist++] = (struct hist){m->n_rows, m->n_items, m->cur, m->empty, m->ended};
    return 0;
}

int matcher_consume(struct matcher *m, int32_t token)
{
    const struct grammar_vocab_index *vi = m->g->vi;
    if (m->ended || m->oom || token < 0 || token >= vi->n_tokens) return -1;
    struct grammar *g = m->g;
    pthread_mutex_lock(&g->mu);
    matcher_budget_begin(m);
    uint32_t nr = m->n_rows, ni = m->n_items;
    uint32_t r = nr - 1, s = m->cur;
    bool empty = m->empty;
    bool ok = true, ended = false;
    int32_t r2 = -1;
    if (vi->is_special[token]) {
        /* a special token the grammar names (even if it is eos) moves the grammar on */
        int32_t re = matcher_end_lexeme(m, r, s, empty, false);
        r2 = re >= 0 ? scan_special(m, (uint32_t)re, token) : -1;
        if (r2 < 0) matcher_truncate(m, nr, ni);
    }
    if (token == vi->eos && r2 < 0) {
        int32_t re = matcher_end_lexeme(m, r, s, empty, false);
        ok = re >= 0 && m->rows[re].accept;
        matcher_truncate(m, nr, ni);
        ended = true;
    } else if (vi->is_special[token]) {
        if (r2 < 0)
            ok = false;
        else {
            r = (uint32_t)r2;
            s = m->rows[r2].lex;
            empty = true;
        }
    } else {
        const uint8_t *b = (const uint8_t *)vi->blob + vi->off[token];
        uint32_t len = vi->len[token];
        ok = len > 0;
        for (uint32_t i = 0; i < len && ok; i++)
            ok = matcher_advance(m, &r, &s, &empty, b[i], false);
        if (ok && !empty && rx_dfa_final(&g->dfa, s)) {
            /* nothing can extend this lexeme: scan it now */
            int32_t r2 = scan(m, r, s);
            if (r2 < 0)
                ok = false;
            else {
                r = (uint32_t)r2;
                s = m->rows[r2].lex;
                empty = true;
            }
        }
    }
    matcher_budget_end(m);
    if (ok && m->oom) ok = false;
    if (!ok) {
        matcher_truncate(m, nr, ni);
        pthread_mutex_unlock(&g->mu);
        return -1;
    }
    /* the rows built for this token stay: record the state before it */
    uint32_t keep_rows = m->n_rows, keep_items = m->n_items;
    m->n_rows = nr;
    m->n_items = ni;
    if (hist_push(m)) {
        pthread_mutex_unlock(&g->mu);
        return -1;
    }
    m->n_rows = keep_rows;
    m->n_items = keep_items;
    /* rows above r (abandoned alternatives are impossible: advance is deterministic) */
    m->n_rows = r + 1;
    m->n_items = m->rows[r].start + m->rows[r].n;
    m->cur = s;
    m->empty = empty;
    if (ended) m->ended = true;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

bool matcher_accepting(const struct matcher *mc)
{
    struct matcher *m = (struct matcher *)mc;
    if (m->ended) return true;
    if (m->oom) return false;
    pthread_mutex_lock(&m->g->mu);
    uint32_t nr = m->n_rows, ni = m->n_items;
    int32_t re = matcher_end_lexeme(m, nr - 1, m->cur, m->empty, false);
    bool a = re >= 0 && m->rows[re].accept;
    matcher_truncate(m, nr, ni);
    pthread_mutex_unlock(&m->g->mu);
    return a;
}

bool matcher_done(const struct matcher *mc)
{
    struct matcher *m = (struct matcher *)mc;
    if (m->ended) return true;
    if (m->oom) return false;
    pthread_mutex_lock(&m->g->mu);
    const struct grammar *g = m->g;
    uint32_t nr = m->n_rows, ni = m->n_items;
    bool done = false;
    if (m->empty || rx_dfa_final(&g->dfa, m->cur)) {
        int32_t re = matcher_end_lexeme(m, nr - 1, m->cur, m->empty, false);
        if (re >= 0 && m->rows[re].accept && m->rows[re].lex == RX_DEAD) {
            done = true;
            const struct row *R = &m->rows[re];
            for (uint32_t x = R->start; x < R->start + R->n; x++) {
                int32_t sym = g->flat[m->items[x].pos];
                if (!(sym & (SYM_NT | SYM_END)) && g->terms[sym].special >= 0) done = false;
            }
        }
    }
    matcher_truncate(m, nr, ni);
    pthread_mutex_unlock(&m->g->mu);
    return done;
}

int matcher_rollback(struct matcher *m, int n_tokens)
{
    if (n_tokens < 0 || (uint32_t)n_tokens > m->n_hist) return -1;
    if (n_tokens == 0) return 0;
    m->n_hist -= (uint32_t)n_tokens;
    const struct hist *h = &m->hist[m->n_hist];
    m->n_rows = h->n_rows;
    m->n_items = h->n_items;
    m->cur = h->cur;
    m->empty = h->empty;
    m->ended = h->ended;
    return 0;
}
