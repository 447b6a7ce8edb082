/* grammar_int — the compiled grammar as the lark front end (lark.c) builds it and the Earley
 * matcher (grammar.c) runs it. Private to src/grammar/.
 *
 * Symbols are int32: a terminal id t (0 <= t < n_terms), or SYM_NT | nonterminal id. Productions
 * are stored back to back in `flat`, each followed by the sentinel SYM_END | production id, so an
 * Earley item's dot is just an index into `flat`. */
#ifndef LMS_GRAMMAR_GRAMMAR_INT_H
#define LMS_GRAMMAR_GRAMMAR_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"

#define SYM_NT 0x40000000
#define SYM_END 0x20000000
#define SYM_IDX 0x0fffffff

#define GRAMMAR_MAX_TERMS 200000
#define GRAMMAR_MAX_PRODS 2000000

struct gterm {
    char *name;             /* for messages: the terminal's name or its literal / regex text */
    int32_t nfa_start;      /* -1 for special-token terminals */
    int32_t nfa_lo, nfa_hi; /* its NFA states */
    int32_t special;        /* token id for special-token terminals, else -1 */
    bool ignore;            /* from %ignore: skipped between lexemes, never scanned */
    bool nullable;          /* its regex matches the empty string */
};

struct gprod {
    int32_t lhs;      /* nonterminal id */
    int32_t off, len; /* rhs = flat[off .. off+len), flat[off+len] = SYM_END | id */
};

struct grammar {
    atomic_int refs;
    struct grammar_budget budget;
    double t_compile0; /* thread CPU ms when the compile started */
    const struct grammar_vocab_index *vi;
    pthread_mutex_t mu; /* guards the lazy DFA and the caches below */

    struct rx_nfa nfa;
    struct rx_dfa dfa;

    struct gterm *terms;
    int32_t n_terms, cap_terms;
    int32_t *ignore_starts; /* NFA starts of %ignore terminals */
    int32_t n_ignore;

    char **nt_names;
    int32_t n_nts, cap_nts;
    struct gprod *prods;
    int32_t n_prods, cap_prods;
    int32_t *flat;
    int32_t n_flat, cap_flat;
    int32_t *nt_first; /* productions of nt i: nt_prods[nt_first[i] .. nt_first[i+1]) */
    int32_t *nt_prods;
    bool *nullable;
    int32_t start_prod; /* S' -> start; accepting = its completed item with origin 0 */

    /* cache: set of allowed terminals (a row's expected terminals) -> lexer start state */
    struct lexstart_entry *ls_tab;
    uint32_t ls_cap, ls_n;

    /* cache: DFA state -> tokens that stay inside the lexeme, + lexeme-end points (grammar.c) */
    int32_t *nfa_term; /* NFA state -> terminal */
    uint64_t *fh;      /* per NFA state: structural hash of the automaton reachable from it
                        * (2 words; 0,0 = not computed yet) */
    int32_t *fh_queue, *fh_local;
    uint32_t *fh_stamp;
    uint32_t fh_gen;
    struct inner_entry **inner;
    int32_t inner_cap;
    size_t inner_bytes;
};

/* lark.c: parses lark source into g (terms, productions, start_prod). g is zeroed and has vi set
 * on entry. Returns 0 or fills e (message names the construct and line). */
int lark_build(struct grammar *g, const char *src, size_t len, struct err *e);
/* Adds a production to g (helper for lark.c; returns the production id or -1). */
int32_t grammar_add_prod(struct grammar *g, int32_t lhs, const int32_t *rhs, int32_t n);
int32_t grammar_add_nt(struct grammar *g, const char *name, size_t len);
int32_t grammar_add_term(struct grammar *g, const char *name, size_t len);
/* Finalizes: per-nt production index, nullable, productivity check. */
int grammar_finish(struct grammar *g, struct err *e);
/* Compile time budget: 0, or -1 with e filled when g's compile ran past max_compile_ms. */
int grammar_check_time(const struct grammar *g, struct err *e);

/* vocab index accessors used by lark.c to resolve special tokens */
int32_t grammar_vocab_find_special(const struct grammar_vocab_index *vi, const char *s, size_t n);
int32_t grammar_vocab_n_tokens(const struct grammar_vocab_index *vi);
bool grammar_vocab_is_special(const struct grammar_vocab_index *vi, int32_t id);

#endif
