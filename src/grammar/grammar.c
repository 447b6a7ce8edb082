/* grammar — compile: any kind -> lark -> Earley grammar + lexer NFA (lark.c builds it through the
 * helpers here), budgets, free, introspection. The vocabulary trie is vocab_trie.c, the matcher
 * earley.c, token masks mask.c, the LRU cache cache.c. Design: docs/grammar.md. */
#define _GNU_SOURCE /* qsort_r */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "grammar/gbnf.h"
#include "grammar/jsonschema.h"
#include "grammar/grammar_int.h"

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
        mask_release((struct grammar_vocab_index *)g->vi, x->own);
        free(x->bound);
        free(x);
    }
    free(g->inner);
    mask_free_relax(g);
    free(g->nfa_term);
    free(g->fh);
    free(g->fhr);
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

size_t grammar_compile_bytes(const struct grammar *g)
{
    size_t b = (size_t)g->nfa.cap * sizeof *g->nfa.s + (size_t)g->nfa.cap_loops * sizeof *g->nfa.loops;
    b += (size_t)g->cap_terms * sizeof *g->terms + (size_t)g->cap_nts * sizeof *g->nt_names;
    b += (size_t)g->cap_prods * sizeof *g->prods + (size_t)g->cap_flat * sizeof *g->flat;
    b += ((size_t)g->n_nts + 1) * (sizeof *g->nt_first + sizeof *g->nullable) +
         ((size_t)g->n_prods + 1) * sizeof *g->nt_prods;
    /* per-NFA-state tables of the mask caches (allocated right after) */
    b += ((size_t)g->nfa.n + 1) * (sizeof *g->nfa_term + 4 * sizeof *g->fh + sizeof *g->fh_queue +
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
                                 .compile_bytes = grammar_compile_bytes(g),
                                 .dfa_bytes = g->dfa.bytes,
                                 .relax_served = g->relax_served,
                                 .relax_walks = g->relax_walks,
                                 .iv_served = g->iv_served,
                                 .iv_walks = g->iv_walks,
                                 .rdfa_bytes = g->rdfa_ready ? g->rdfa.bytes : 0,
                                 .whole_taken = g->whole_taken,
                                 .trie_skipped = g->trie_skipped};
    pthread_mutex_unlock((pthread_mutex_t *)&g->mu);
}


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
    g->fhr = calloc(((size_t)g->nfa.n + 1) * 2, sizeof *g->fhr);
    g->fh_queue = malloc(((size_t)g->nfa.n + 1) * sizeof *g->fh_queue);
    g->fh_local = malloc(((size_t)g->nfa.n + 1) * sizeof *g->fh_local);
    g->fh_stamp = calloc((size_t)g->nfa.n + 1, sizeof *g->fh_stamp);
    if (!g->nfa_term || !g->fh || !g->fhr || !g->fh_queue || !g->fh_local || !g->fh_stamp) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    for (int32_t t = 0; t < g->n_terms; t++)
        if (g->terms[t].nfa_start >= 0)
            for (int32_t k = g->terms[t].nfa_lo; k < g->terms[t].nfa_hi; k++)
                g->nfa_term[k] = t;
    if (mask_prepare_relax(g, e)) goto fail;
    g->ls_cap = 64;
    g->ls_tab = calloc(g->ls_cap, sizeof *g->ls_tab);
    if (!g->ls_tab) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    size_t cb = grammar_compile_bytes(g);
    if (budget->max_compile_bytes && cb > budget->max_compile_bytes) {
        err_set(e, ERR_INVALID, "the compiled grammar takes %zu MB, over the compile budget of %zu MB",
                cb >> 20, budget->max_compile_bytes >> 20);
        goto fail;
    }
    if (grammar_check_time(g, e) || mask_probe_first(g, e) || mask_prewarm(g, e)) goto fail;
    buf_free(&lark);
    return g;
fail:
    buf_free(&lark);
    grammar_destroy(g);
    return NULL;
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
