/* grammar — compile (any kind -> lark -> Earley grammar + lexer NFA), vocabulary token trie,
 * matcher (Earley rows over lexemes, lazily built lexer DFA), token masks, LRU cache.
 * Design: docs/grammar.md. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "grammar/gbnf.h"
#include "grammar/grammar_int.h"
#include "grammar/jsonschema.h"

/* ------------------------------------------------------------------------------------------ */
/* Vocabulary index                                                                            */

struct tnode {
    int32_t tok;    /* first token ending here, or -1 */
    uint32_t end;   /* one past the subtree */
    uint16_t depth; /* root = 0 */
    uint8_t byte;
    uint8_t dup; /* more tokens with the same bytes (tok_next chain) */
};

/* The result of walking the whole trie from a lexer state without crossing a lexeme end: the
 * tokens that stay inside the lexeme (dense bitset or sparse list) and the trie nodes where a
 * byte ends the lexeme. Depends only on the state's canonical form and the vocabulary. */
struct shared_inner {
    uint64_t hash;
    uint8_t *key;
    size_t key_len;
    uint32_t *bits;
    int32_t *list;
    int32_t n_list;
    uint32_t *nodes;
    uint32_t n_nodes;
};

#define SHARED_CACHE_MAX_BYTES ((size_t)256 << 20)

struct grammar_vocab_index {
    int32_t n_tokens, eos;
    bool *is_special;
    char *blob;    /* all token bytes */
    uint64_t *off; /* token i: blob[off[i] .. off[i]+len[i]) */
    uint32_t *len;
    /* byte trie of non-special tokens in DFS order; node 0 = root */
    uint8_t *tbyte;
    int32_t *ttok;  /* first token ending at this node, -1 if none */
    uint32_t *tend; /* index one past the node's subtree */
    int32_t n_nodes;
    int32_t *tok_next; /* next token with identical bytes, -1 */
    struct tnode *tn;  /* the same trie packed for the hot loop (walk_inner) */
    uint32_t max_depth;
    int32_t *rep; /* per node: a token whose bytes start with the node's path */
    /* inner-walk results shared by all grammars on this vocabulary, keyed by the canonical form
     * of a lexer state (see inner_key); append-only, guarded by mu */
    pthread_mutex_t mu;
    struct shared_inner **sh;
    uint32_t sh_cap, sh_n;
    size_t sh_bytes;
    int32_t *specials; /* ids of special tokens */
    int32_t n_specials;
};

static int cmp_tok_bytes(const void *x, const void *y, void *ctx)
{
    const struct grammar_vocab_index *vi = ctx;
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    uint32_t la = vi->len[a], lb = vi->len[b];
    int c = memcmp(vi->blob + vi->off[a], vi->blob + vi->off[b], la < lb ? la : lb);
    if (c) return c;
    if (la != lb) return la < lb ? -1 : 1;
    return a < b ? -1 : a > b;
}

void grammar_vocab_index_free(struct grammar_vocab_index *vi)
{
    if (!vi) return;
    free(vi->is_special);
    free(vi->blob);
    free(vi->off);
    free(vi->len);
    free(vi->tbyte);
    free(vi->ttok);
    free(vi->tend);
    free(vi->tok_next);
    free(vi->tn);
    free(vi->rep);
    for (uint32_t i = 0; i < vi->sh_cap; i++) {
        struct shared_inner *x = vi->sh ? vi->sh[i] : NULL;
        if (!x) continue;
        free(x->key);
        free(x->bits);
        free(x->list);
        free(x->nodes);
        free(x);
    }
    free(vi->sh);
    if (vi->sh_cap) pthread_mutex_destroy(&vi->mu);
    free(vi->specials);
    free(vi);
}

struct grammar_vocab_index *grammar_vocab_index_new(const struct grammar_vocab *v, struct err *e)
{
    if (!v || v->n_tokens <= 0 || !v->bytes || !v->len) {
        err_set(e, ERR_INVALID, "grammar vocabulary is empty");
        return NULL;
    }
    struct grammar_vocab_index *vi = calloc(1, sizeof *vi);
    int32_t *order = NULL;
    int32_t *stack = NULL;
    if (!vi) goto nomem;
    int32_t n = v->n_tokens;
    vi->n_tokens = n;
    vi->eos = v->eos;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++)
        total += v->len[i];
    vi->is_special = calloc((size_t)n, sizeof *vi->is_special);
    vi->blob = malloc(total + 1);
    vi->off = malloc((size_t)n * sizeof *vi->off);
    vi->len = malloc((size_t)n * sizeof *vi->len);
    vi->tok_next = malloc((size_t)n * sizeof *vi->tok_next);
    order = malloc((size_t)n * sizeof *order);
    vi->specials = malloc((size_t)n * sizeof *vi->specials);
    /* at most one node per byte of all tokens, plus the root */
    vi->tbyte = malloc(total + 1);
    vi->ttok = malloc((total + 1) * sizeof *vi->ttok);
    vi->tend = malloc((total + 1) * sizeof *vi->tend);
    stack = malloc((size_t)(total + 2) * sizeof *stack);
    if (!vi->is_special || !vi->blob || !vi->off || !vi->len || !vi->tok_next || !order ||
        !vi->specials || !vi->tbyte || !vi->ttok || !vi->tend || !stack)
        goto nomem;
    uint64_t o = 0;
    int32_t n_plain = 0;
    uint32_t maxlen = 0;
    for (int32_t i = 0; i < n; i++) {
        vi->off[i] = o;
        vi->len[i] = v->len[i];
        if (v->len[i]) memcpy(vi->blob + o, v->bytes[i], v->len[i]);
        o += v->len[i];
        vi->is_special[i] = v->is_special ? v->is_special[i] : false;
        vi->tok_next[i] = -1;
        if (v->len[i] > maxlen) maxlen = v->len[i];
        if (vi->is_special[i])
            vi->specials[vi->n_specials++] = i;
        else if (v->len[i] > 0)
            order[n_plain++] = i;
    }
    qsort_r(order, (size_t)n_plain, sizeof *order, cmp_tok_bytes, vi);
    /* DFS-order trie from the sorted list */
    vi->tbyte[0] = 0;
    vi->ttok[0] = -1;
    vi->n_nodes = 1;
    int32_t depth = 0;
    stack[0] = 0;
    int32_t prev = -1;
    for (int32_t k = 0; k < n_plain; k++) {
        int32_t t = order[k];
        const uint8_t *b = (const uint8_t *)vi->blob + vi->off[t];
        uint32_t l = vi->len[t];
        uint32_t lcp = 0;
        if (prev >= 0) {
            const uint8_t *pb = (const uint8_t *)vi->blob + vi->off[prev];
            uint32_t pl = vi->len[prev];
            while (lcp < l && lcp < pl && pb[lcp] == b[lcp])
                lcp++;
            if (lcp == l && l == pl) {
                /* identical bytes: chain */
                int32_t node = stack[depth];
                int32_t x = vi->ttok[node];
                while (vi->tok_next[x] >= 0)
                    x = vi->tok_next[x];
                vi->tok_next[x] = t;
                prev = t;
                continue;
            }
        }
        while ((uint32_t)depth > lcp) {
            vi->tend[stack[depth]] = (uint32_t)vi->n_nodes;
            depth--;
        }
        for (uint32_t j = lcp; j < l; j++) {
            int32_t nd = vi->n_nodes++;
            vi->tbyte[nd] = b[j];
            vi->ttok[nd] = -1;
            stack[++depth] = nd;
        }
        vi->ttok[stack[depth]] = t;
        prev = t;
    }
    while (depth >= 0) {
        vi->tend[stack[depth]] = (uint32_t)vi->n_nodes;
        depth--;
    }
    vi->tn = malloc((size_t)vi->n_nodes * sizeof *vi->tn);
    if (!vi->tn) goto nomem;
    {
        /* depths: a node's depth is its parent's + 1; parents precede children in DFS order */
        vi->tn[0] = (struct tnode){.tok = -1, .end = vi->tend[0], .depth = 0};
        int32_t sp = 0;
        stack[0] = 0;
        for (int32_t i = 1; i < vi->n_nodes; i++) {
            while ((uint32_t)i >= vi->tend[stack[sp]])
                sp--;
            int32_t tk = vi->ttok[i];
            vi->tn[i] = (struct tnode){.tok = tk,
                                       .end = vi->tend[i],
                                       .depth = (uint16_t)(sp + 1),
                                       .byte = vi->tbyte[i],
                                       .dup = (uint8_t)(tk >= 0 && vi->tok_next[tk] >= 0)};
            if ((uint32_t)(sp + 1) > vi->max_depth) vi->max_depth = (uint32_t)(sp + 1);
            stack[++sp] = i;
        }
    }
    /* representative tokens: the first token in each node's subtree (every leaf has one) */
    vi->rep = malloc((size_t)vi->n_nodes * sizeof *vi->rep);
    if (!vi->rep) goto nomem;
    vi->rep[0] = -1;
    for (int32_t i = vi->n_nodes - 1; i >= 1; i--) {
        if (vi->ttok[i] >= 0)
            vi->rep[i] = vi->ttok[i];
        else
            vi->rep[i] = vi->rep[i + 1]; /* first child (an internal node has one) */
    }
    vi->sh_cap = 1024;
    vi->sh = calloc(vi->sh_cap, sizeof *vi->sh);
    if (!vi->sh) {
        vi->sh_cap = 0;
        goto nomem;
    }
    pthread_mutex_init(&vi->mu, NULL);
    free(order);
    free(stack);
    return vi;
nomem:
    free(order);
    free(stack);
    grammar_vocab_index_free(vi);
    err_set(e, ERR_NOMEM, "out of memory indexing the vocabulary");
    return NULL;
}

int32_t grammar_vocab_find_special(const struct grammar_vocab_index *vi, const char *s, size_t n)
{
    for (int32_t i = 0; i < vi->n_specials; i++) {
        int32_t id = vi->specials[i];
        if (vi->len[id] == n && !memcmp(vi->blob + vi->off[id], s, n)) return id;
    }
    return -1;
}
int32_t grammar_vocab_n_tokens(const struct grammar_vocab_index *vi)
{
    return vi->n_tokens;
}
bool grammar_vocab_is_special(const struct grammar_vocab_index *vi, int32_t id)
{
    return id >= 0 && id < vi->n_tokens && vi->is_special[id];
}

/* ------------------------------------------------------------------------------------------ */
/* Grammar building helpers                                                                    */

int32_t grammar_add_nt(struct grammar *g, const char *name, size_t len)
{
    if (g->n_nts == g->cap_nts) {
        int32_t nc = g->cap_nts ? g->cap_nts * 2 : 64;
        char **n = realloc(g->nt_names, (size_t)nc * sizeof *n);
        if (!n) return -1;
        g->nt_names = n;
        g->cap_nts = nc;
    }
    char *s = strndup(name, len);
    if (!s) return -1;
    g->nt_names[g->n_nts] = s;
    return g->n_nts++;
}

int32_t grammar_add_term(struct grammar *g, const char *name, size_t len)
{
    if (g->n_terms >= GRAMMAR_MAX_TERMS) return -1;
    if (g->n_terms == g->cap_terms) {
        int32_t nc = g->cap_terms ? g->cap_terms * 2 : 64;
        struct gterm *n = realloc(g->terms, (size_t)nc * sizeof *n);
        if (!n) return -1;
        g->terms = n;
        g->cap_terms = nc;
    }
    char *s = strndup(name, len);
    if (!s) return -1;
    g->terms[g->n_terms] = (struct gterm){.name = s, .nfa_start = -1, .special = -1};
    return g->n_terms++;
}

int32_t grammar_add_prod(struct grammar *g, int32_t lhs, const int32_t *rhs, int32_t n)
{
    if (g->n_prods >= GRAMMAR_MAX_PRODS) return -1;
    if (g->n_prods == g->cap_prods) {
        int32_t nc = g->cap_prods ? g->cap_prods * 2 : 64;
        struct gprod *np = realloc(g->prods, (size_t)nc * sizeof *np);
        if (!np) return -1;
        g->prods = np;
        g->cap_prods = nc;
    }
    while (g->n_flat + n + 1 > g->cap_flat) {
        int32_t nc = g->cap_flat ? g->cap_flat * 2 : 256;
        int32_t *nf = realloc(g->flat, (size_t)nc * sizeof *nf);
        if (!nf) return -1;
        g->flat = nf;
        g->cap_flat = nc;
    }
    int32_t id = g->n_prods++;
    g->prods[id] = (struct gprod){.lhs = lhs, .off = g->n_flat, .len = n};
    if (n) memcpy(g->flat + g->n_flat, rhs, (size_t)n * sizeof *rhs);
    g->n_flat += n;
    g->flat[g->n_flat++] = SYM_END | id;
    return id;
}

int grammar_finish(struct grammar *g, struct err *e)
{
    int32_t N = g->n_nts;
    bool *productive = calloc((size_t)N, sizeof *productive);
    bool *prod_ok = calloc((size_t)g->n_prods, sizeof *prod_ok);
    g->nullable = calloc((size_t)N, sizeof *g->nullable);
    g->nt_first = calloc((size_t)N + 1, sizeof *g->nt_first);
    g->nt_prods = malloc(((size_t)g->n_prods + 1) * sizeof *g->nt_prods);
    if (!productive || !prod_ok || !g->nullable || !g->nt_first || !g->nt_prods) {
        free(productive);
        free(prod_ok);
        return err_set(e, ERR_NOMEM, "out of memory");
    }
    /* productivity and nullability: fixpoints over productions */
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t p = 0; p < g->n_prods; p++) {
            const struct gprod *pr = &g->prods[p];
            bool ok = true, nul = true;
            for (int32_t k = 0; k < pr->len; k++) {
                int32_t s = g->flat[pr->off + k];
                if (s & SYM_NT) {
                    if (!productive[s & SYM_IDX]) ok = false;
                    if (!g->nullable[s & SYM_IDX]) nul = false;
                } else {
                    nul = false;
                }
            }
            if (ok && !productive[pr->lhs]) productive[pr->lhs] = changed = true;
            if (ok) prod_ok[p] = true;
            if (nul && !g->nullable[pr->lhs]) g->nullable[pr->lhs] = changed = true;
        }
    }
    int rc = 0;
    if (!productive[g->prods[g->start_prod].lhs]) {
        rc = err_set(e, ERR_INVALID,
                     "the grammar matches no string (its start rule can never "
                     "complete)");
        goto out;
    }
    /* index productive productions by lhs (productions using a non-productive symbol can never
     * complete: predicting them would let the lexer allow dead ends) */
    for (int32_t p = 0; p < g->n_prods; p++)
        if (prod_ok[p]) g->nt_first[g->prods[p].lhs + 1]++;
    for (int32_t i = 0; i < N; i++)
        g->nt_first[i + 1] += g->nt_first[i];
    int32_t *fill = calloc((size_t)N, sizeof *fill);
    if (!fill) {
        rc = err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int32_t p = 0; p < g->n_prods; p++)
        if (prod_ok[p]) {
            int32_t l = g->prods[p].lhs;
            g->nt_prods[g->nt_first[l] + fill[l]++] = p;
        }
    free(fill);
out:
    free(productive);
    free(prod_ok);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* Compile and free                                                                            */

struct lexstart_entry {
    uint64_t hash;
    int32_t *terms; /* sorted terminal ids */
    int32_t n;
    uint32_t state;
};

/* Per lexer DFA state s: the tokens whose bytes all keep the lexeme alive from s (they are allowed
 * whatever the parser state, since s only contains terminals the parser expects), and the trie
 * nodes where a byte ends the lexeme (node, accepting state before that byte): only there is the
 * parser consulted. Computed once per state, shared by all matchers of the grammar. */
struct inner_entry {
    const uint32_t *bits; /* dense form (NULL if sparse) */
    const int32_t *list;  /* sparse form */
    int32_t n_list;
    uint32_t *bound; /* pairs (node, accepting state before the node's byte) */
    uint32_t n_bound;
    struct shared_inner *own; /* payload owned here when it could not be shared */
};

#ifndef INNER_CACHE_MAX_BYTES /* per grammar; beyond it the grammar's entries are flushed */
#define INNER_CACHE_MAX_BYTES ((size_t)16 << 20)
#endif

static void grammar_destroy(struct grammar *g)
{
    if (!g) return;
    rx_dfa_deinit(&g->dfa);
    rx_nfa_deinit(&g->nfa);
    for (int32_t i = 0; i < g->n_terms; i++)
        free(g->terms[i].name);
    free(g->terms);
    free(g->ignore_starts);
    for (int32_t i = 0; i < g->n_nts; i++)
        free(g->nt_names[i]);
    free(g->nt_names);
    free(g->prods);
    free(g->flat);
    free(g->nt_first);
    free(g->nt_prods);
    free(g->nullable);
    for (int32_t i = 0; i < g->inner_cap; i++) {
        struct inner_entry *x = g->inner[i];
        if (!x) continue;
        if (x->own) {
            free(x->own->key);
            free(x->own->bits);
            free(x->own->list);
            free(x->own->nodes);
            free(x->own);
        }
        free(x->bound);
        free(x);
    }
    free(g->inner);
    free(g->nfa_term);
    free(g->fh);
    free(g->fh_queue);
    free(g->fh_local);
    free(g->fh_stamp);
    for (uint32_t i = 0; g->ls_tab && i < g->ls_cap; i++) /* NULL: its calloc failed */
        free(g->ls_tab[i].terms);
    free(g->ls_tab);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

void grammar_free(struct grammar *g)
{
    if (!g) return;
    if (atomic_fetch_sub(&g->refs, 1) == 1) grammar_destroy(g);
}

struct grammar *grammar_ref(struct grammar *g)
{
    atomic_fetch_add(&g->refs, 1);
    return g;
}

/* Lark text for a standalone regex: start: /src/ with '/' and newlines escaped. */
static int regex_lark(const char *src, size_t len, struct buf *out)
{
    if (buf_puts(out, "start: /")) return -1;
    for (size_t i = 0; i < len; i++) {
        char c = src[i];
        if (c == '\\' && i + 1 < len) {
            if (buf_append(out, src + i, 2)) return -1;
            i++;
        } else if (c == '/') {
            if (buf_puts(out, "\\/")) return -1;
        } else if (c == '\n') {
            if (buf_puts(out, "\\n")) return -1;
        } else if (c == '\r') {
            if (buf_puts(out, "\\r")) return -1;
        } else if (buf_append(out, &c, 1)) {
            return -1;
        }
    }
    return buf_puts(out, "/\n");
}

/* The defaults, sized from MaskBench (docs/grammar.md "Budgets"; Qwen3 vocabulary): its largest
 * compiled grammar takes 4.5 MB and its costliest mask 0.6 M steps (13 ms), so those budgets
 * leave several times that. The lexer DFA grows with the text (a long string under `maxLength`
 * is one DFA state per count): MaskBench's longest instance (7 KB in a maxLength-5000 string)
 * takes up to 65 MB. */
const struct grammar_budget grammar_budget_default = {
    .max_source = (size_t)8 << 20,
    .max_nfa_states = 400000,
    .max_productions = 1000000,
    .max_compile_bytes = (size_t)32 << 20,
    .max_dfa_bytes = (size_t)128 << 20,
    .max_compile_ms = 1000,
    .max_mask_work = 4000000,
    .max_items = 2000000,
};

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int grammar_check_time(const struct grammar *g, struct err *e)
{
    if (g->budget.max_compile_ms <= 0) return 0;
    double dt = cpu_ms() - g->t_compile0;
    if (dt <= g->budget.max_compile_ms) return 0;
    return err_set(e, ERR_INVALID,
                   "compiling the grammar took more than %.0f ms of CPU (the compile time "
                   "budget)",
                   g->budget.max_compile_ms);
}

static size_t compile_bytes(const struct grammar *g)
{
    size_t b = (size_t)g->nfa.cap * sizeof *g->nfa.s + (size_t)g->nfa.cap_loops * sizeof *g->nfa.loops;
    b += (size_t)g->cap_terms * sizeof *g->terms + (size_t)g->cap_nts * sizeof *g->nt_names;
    b += (size_t)g->cap_prods * sizeof *g->prods + (size_t)g->cap_flat * sizeof *g->flat;
    b += ((size_t)g->n_nts + 1) * (sizeof *g->nt_first + sizeof *g->nullable) +
         ((size_t)g->n_prods + 1) * sizeof *g->nt_prods;
    /* per-NFA-state tables of the mask caches (allocated right after) */
    b += ((size_t)g->nfa.n + 1) * (sizeof *g->nfa_term + 2 * sizeof *g->fh + sizeof *g->fh_queue +
                                   sizeof *g->fh_local + sizeof *g->fh_stamp);
    for (int32_t i = 0; i < g->n_terms; i++)
        b += strlen(g->terms[i].name) + 1;
    for (int32_t i = 0; i < g->n_nts; i++)
        b += strlen(g->nt_names[i]) + 1;
    return b;
}

void grammar_stats(const struct grammar *g, struct grammar_stats *st)
{
    pthread_mutex_lock((pthread_mutex_t *)&g->mu);
    *st = (struct grammar_stats){.n_terms = g->n_terms,
                                 .n_productions = g->n_prods,
                                 .n_nfa_states = g->nfa.n,
                                 .n_dfa_states = g->dfa.n,
                                 .compile_bytes = compile_bytes(g),
                                 .dfa_bytes = g->dfa.bytes};
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
}

static int probe_first_mask(struct grammar *g, struct err *e);

struct grammar *grammar_compile(const struct grammar_vocab_index *vi, enum grammar_kind kind,
                                const char *src, size_t len, struct err *e)
{
    return grammar_compile_budget(vi, kind, src, len, NULL, e);
}

struct grammar *grammar_compile_budget(const struct grammar_vocab_index *vi, enum grammar_kind kind,
                                       const char *src, size_t len,
                                       const struct grammar_budget *budget, struct err *e)
{
    if (!budget) budget = &grammar_budget_default;
    double t0 = cpu_ms();
    struct buf lark = {0};
    const char *text = src;
    size_t tlen = len;
    switch (kind) {
    case GRAMMAR_LARK:
        break;
    case GRAMMAR_JSON_SCHEMA:
        if (jsonschema_to_lark(src, len, "", &lark, e)) {
            buf_free(&lark);
            return NULL;
        }
        text = lark.data ? lark.data : "";
        tlen = lark.len;
        break;
    case GRAMMAR_JSON_OBJECT:
        if (jsonschema_object_lark("", &lark, e)) {
            buf_free(&lark);
            return NULL;
        }
        text = lark.data ? lark.data : "";
        tlen = lark.len;
        break;
    case GRAMMAR_GBNF:
        if (gbnf_to_lark(src, len, &lark, e)) {
            buf_free(&lark);
            return NULL;
        }
        text = lark.data ? lark.data : "";
        tlen = lark.len;
        break;
    case GRAMMAR_REGEX:
        if (regex_lark(src, len, &lark)) {
            buf_free(&lark);
            err_set(e, ERR_NOMEM, "out of memory");
            return NULL;
        }
        text = lark.data;
        tlen = lark.len;
        break;
    default:
        err_set(e, ERR_INVALID, "unknown grammar kind %d", (int)kind);
        return NULL;
    }
    struct grammar *g = calloc(1, sizeof *g);
    if (!g) {
        buf_free(&lark);
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    atomic_init(&g->refs, 1);
    g->vi = vi;
    g->budget = *budget;
    g->t_compile0 = t0;
    g->nfa.max_states = budget->max_nfa_states;
    pthread_mutex_init(&g->mu, NULL);
    if (budget->max_source && tlen > budget->max_source) {
        err_set(e, ERR_INVALID, "the grammar is %zu bytes of lark%s, over the compile budget of %zu",
                tlen, kind == GRAMMAR_LARK ? "" : " once converted", budget->max_source);
        goto fail;
    }
    if (grammar_check_time(g, e) || lark_build(g, text, tlen, e)) goto fail;
    if (rx_dfa_init(&g->dfa, &g->nfa, e)) goto fail;
    g->dfa.max_bytes = budget->max_dfa_bytes;
    g->nfa_term = malloc(((size_t)g->nfa.n + 1) * sizeof *g->nfa_term);
    g->fh = calloc(((size_t)g->nfa.n + 1) * 2, sizeof *g->fh);
    g->fh_queue = malloc(((size_t)g->nfa.n + 1) * sizeof *g->fh_queue);
    g->fh_local = malloc(((size_t)g->nfa.n + 1) * sizeof *g->fh_local);
    g->fh_stamp = calloc((size_t)g->nfa.n + 1, sizeof *g->fh_stamp);
    if (!g->nfa_term || !g->fh || !g->fh_queue || !g->fh_local || !g->fh_stamp) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t t = 0; t < g->n_terms; t++)
        if (g->terms[t].nfa_start >= 0)
            for (int32_t k = g->terms[t].nfa_lo; k < g->terms[t].nfa_hi; k++)
                g->nfa_term[k] = t;
    g->ls_cap = 64;
    g->ls_tab = calloc(g->ls_cap, sizeof *g->ls_tab);
    if (!g->ls_tab) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t cb = compile_bytes(g);
    if (budget->max_compile_bytes && cb > budget->max_compile_bytes) {
        err_set(e, ERR_INVALID, "the compiled grammar takes %zu MB, over the compile budget of %zu MB",
                cb >> 20, budget->max_compile_bytes >> 20);
        goto fail;
    }
    if (grammar_check_time(g, e) || probe_first_mask(g, e)) goto fail;
    buf_free(&lark);
    return g;
fail:
    buf_free(&lark);
    grammar_destroy(g);
    return NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* Matcher: Earley rows                                                                         */

struct item {
    uint32_t pos, origin;
};

struct row {
    uint32_t start, n; /* items[start .. start+n) */
    uint32_t lex;      /* lexer start state for the terminals expected here */
    bool accept;
};

struct hist {
    uint32_t n_rows, n_items, cur;
    bool empty, ended;
};

#define MEMO_SIZE 1024

struct matcher {
    struct grammar *g;
    struct item *items;
    uint32_t n_items, cap_items;
    struct row *rows;
    uint32_t n_rows, cap_rows;
    uint32_t cur; /* DFA state in the current lexeme */
    bool empty;   /* no byte of the current lexeme consumed yet */
    bool ended;   /* eos consumed */
    bool oom;     /* allocation failure, or a budget exceeded (why: over) */
    enum { OVER_NONE, OVER_WORK, OVER_DFA, OVER_ITEMS } over;
    uint64_t last_work;
    struct hist *hist;
    uint32_t n_hist, cap_hist;
    /* scratch */
    uint64_t *dedup;
    uint32_t dedup_cap;
    uint32_t *nt_mark, *t_mark;
    uint32_t gen;
    int32_t *tbuf;
    /* per-mask memo: (row, dfa state) -> row */
    struct {
        uint32_t row, state, result, gen;
    } memo[MEMO_SIZE];
    uint32_t memo_gen;
    uint32_t *mask; /* output being built */
};

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

static int cmp_u32(const void *x, const void *y)
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

static int32_t scan_memo(struct matcher *m, uint32_t r, uint32_t s)
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
static bool advance(struct matcher *m, uint32_t *r, uint32_t *s, bool *empty, uint8_t b, bool memo)
{
    struct rx_dfa *d = &m->g->dfa;
    uint32_t t = rx_dfa_next(d, *s, b);
    if (t != RX_DEAD) {
        *s = t;
        *empty = false;
        return true;
    }
    if (*empty || !rx_dfa_accepting(d, *s)) return false;
    int32_t r2 = memo ? scan_memo(m, *r, *s) : scan(m, *r, *s);
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
static int32_t end_lexeme(struct matcher *m, uint32_t r, uint32_t s, bool empty, bool memo)
{
    if (empty) return (int32_t)r;
    if (!rx_dfa_accepting(&m->g->dfa, s)) return -1;
    return memo ? scan_memo(m, r, s) : scan(m, r, s);
}

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
            if (!advance(m, &r2, &s2, &e2, b, true)) continue;
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
    qsort(cand, n_cand, sizeof *cand, cmp_u32);
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
        int32_t r2 = scan_memo(m, r, sa);
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

static void truncate_to(struct matcher *m, uint32_t n_rows, uint32_t n_items)
{
    m->n_rows = n_rows;
    m->n_items = n_items;
}

/* The mask budget covers one mask or consume: the DFA's work counter restarts and is capped.
 * Caller holds g->mu. */
static void budget_begin(struct matcher *m)
{
    struct rx_dfa *d = &m->g->dfa;
    d->work = 0;
    d->work_limit = m->g->budget.max_mask_work;
    d->over_work = false;
}

/* Records a budget failure in the matcher (it stays failed) and lifts the DFA's work cap, so
 * other matchers of the grammar are unaffected. */
static void budget_end(struct matcher *m)
{
    struct rx_dfa *d = &m->g->dfa;
    m->last_work = d->work;
    if (!m->oom && (d->over_work || d->failed)) { /* failed: a mask may be missing tokens */
        m->oom = true;
        m->over = d->over_work ? OVER_WORK : d->over_bytes ? OVER_DFA : OVER_NONE;
    }
    d->over_work = false;
    d->work_limit = 0;
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

/* Computes the first mask under the budgets, so a grammar whose very first token is over budget
 * fails to compile (a 400 before any generation) and the first mask of each request is cached. */
static int probe_first_mask(struct grammar *g, struct err *e)
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
    budget_begin(m);
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
    int32_t re = end_lexeme(m, top, m->cur, m->empty, true);
    if (vi->n_specials && re >= 0) allow_specials(m, re); /* may allow eos as a terminal */
    bool accept = re >= 0 && m->rows[re].accept;
    truncate_to(m, nr, ni);
    budget_end(m);
    if (m->oom) memset(bitset_out, 0, words * sizeof *bitset_out);
    pthread_mutex_unlock(&g->mu);
    if (has_eos && accept && !m->oom) set_bit(bitset_out, vi->eos);
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
    budget_begin(m);
    uint32_t nr = m->n_rows, ni = m->n_items;
    uint32_t r = nr - 1, s = m->cur;
    bool empty = m->empty;
    bool ok = true, ended = false;
    int32_t r2 = -1;
    if (vi->is_special[token]) {
        /* a special token the grammar names (even if it is eos) moves the grammar on */
        int32_t re = end_lexeme(m, r, s, empty, false);
        r2 = re >= 0 ? scan_special(m, (uint32_t)re, token) : -1;
        if (r2 < 0) truncate_to(m, nr, ni);
    }
    if (token == vi->eos && r2 < 0) {
        int32_t re = end_lexeme(m, r, s, empty, false);
        ok = re >= 0 && m->rows[re].accept;
        truncate_to(m, nr, ni);
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
            ok = advance(m, &r, &s, &empty, b[i], false);
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
    budget_end(m);
    if (ok && m->oom) ok = false;
    if (!ok) {
        truncate_to(m, nr, ni);
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
    int32_t re = end_lexeme(m, nr - 1, m->cur, m->empty, false);
    bool a = re >= 0 && m->rows[re].accept;
    truncate_to(m, nr, ni);
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
        int32_t re = end_lexeme(m, nr - 1, m->cur, m->empty, false);
        if (re >= 0 && m->rows[re].accept && m->rows[re].lex == RX_DEAD) {
            done = true;
            const struct row *R = &m->rows[re];
            for (uint32_t x = R->start; x < R->start + R->n; x++) {
                int32_t sym = g->flat[m->items[x].pos];
                if (!(sym & (SYM_NT | SYM_END)) && g->terms[sym].special >= 0) done = false;
            }
        }
    }
    truncate_to(m, nr, ni);
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
    size_t b = compile_bytes(g) + g->dfa.bytes + g->inner_bytes;
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

/* ------------------------------------------------------------------------------------------ */
/* Introspection (tests, tools)                                                                */

int32_t grammar_n_terminals(const struct grammar *g)
{
    return g->n_terms;
}
int32_t grammar_n_productions(const struct grammar *g)
{
    return g->n_prods;
}
