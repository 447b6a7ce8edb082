/* grammar — token-level constraints compiled from lark (llguidance dialect), JSON Schema,
 * json_object or a regex. Depends only on base/ and a grammar_vocab (token id -> bytes).
 *
 * Compile once (grammar_compile, shareable, immutable, thread-safe to read), then one matcher per
 * request (matcher_new): mask -> sample -> consume. */
#ifndef LMS_GRAMMAR_GRAMMAR_H
#define LMS_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum grammar_kind {
    GRAMMAR_LARK,
    GRAMMAR_JSON_SCHEMA,
    GRAMMAR_JSON_OBJECT,
    GRAMMAR_REGEX,
    GRAMMAR_GBNF, /* llama.cpp's GBNF (the `grammar` request parameter): gbnf.h */
    GRAMMAR_KIND_COUNT
};

/* The vocabulary as the grammar sees it: bytes of each token; special tokens are matched only by
 * explicit special-token terminals (<|im_end|>, <[151657]>). eos = the token that ends the turn.
 * A token with len 0 is never allowed: pass 0 for unused / padding ids ([PAD…]). */
struct grammar_vocab {
    int32_t n_tokens;
    const char *const *bytes; /* bytes[i], len[i] */
    const uint32_t *len;
    const bool *is_special;
    int32_t eos;
};

struct grammar_vocab_index; /* token trie etc., built once per vocabulary */
struct grammar_vocab_index *grammar_vocab_index_new(const struct grammar_vocab *v, struct err *e);
void grammar_vocab_index_free(struct grammar_vocab_index *vi);
/* The vocabulary's shared cache of trie walks (docs/grammar.md "Sharing and threads"): walks
 * and relaxed walks held, their bytes, the table's slots; walks dropped to make room; walks
 * examined to make room, in all (room_visits) and the most by one publication (room_max); the
 * most slots one publication rehashed to grow the table (grow_max). Any thread. */
struct grammar_walk_cache_stats {
    uint64_t walks, relaxed;
    size_t bytes;
    uint64_t slots, drops, room_visits, room_max, grow_max;
    uint64_t refused; /* walks not published: no room made within one publication's sweep */
    uint64_t relaxed_drops; /* relaxed walks dropped to make room */
    /* time (ns, monotonic clock) making room: in all, the most in one publication; growing the
     * table: in all, the most in one publication */
    uint64_t room_ns, room_ns_max, grow_ns, grow_ns_max;
};
void grammar_vocab_cache_stats(struct grammar_vocab_index *vi, struct grammar_walk_cache_stats *st);

/* Compiles src (lark text, a JSON Schema, ignored for JSON_OBJECT, a regex, or GBNF) against vi (which
 * must outlive the grammar). Returns a grammar holding one reference, or NULL with e naming the
 * problem (ERR_INVALID for a bad grammar / schema / regex, ERR_UNSUPPORTED, ERR_NOMEM).
 * A compiled grammar is immutable to its users; its lazily built lexer DFA and caches are guarded
 * by a mutex inside, so matchers of one grammar may run on different threads. */
struct grammar;
struct grammar *grammar_compile(const struct grammar_vocab_index *vi, enum grammar_kind kind,
                                const char *src, size_t len, struct err *e);

/* Budgets (docs/grammar.md "Budgets"): what one grammar and one matcher may cost. Compile
 * budgets fail grammar_compile; the mask budget fails a mask or consume (matcher_status), and
 * the first mask is computed inside grammar_compile, so a grammar whose first mask is over
 * budget never compiles. Every failure is ERR_INVALID naming the budget. 0 = no limit. */
struct grammar_budget {
    size_t max_source;        /* bytes of lark text (after JSON Schema / regex conversion) */
    int32_t max_nfa_states;   /* lexer NFA states */
    int32_t max_productions;  /* BNF productions after lowering EBNF */
    size_t max_compile_bytes; /* terminals, productions and NFA after compiling */
    size_t max_dfa_bytes;     /* the lazily built lexer DFA (states, kernels, transitions) */
    double max_compile_ms;    /* thread CPU time of one compile (a backstop: not deterministic) */
    uint64_t max_mask_work;   /* per mask / consume: lexer-thread steps + Earley items */
    uint32_t max_items;       /* Earley items one matcher holds */
};
extern const struct grammar_budget grammar_budget_default;
/* grammar_compile with explicit budgets (NULL = grammar_budget_default). */
struct grammar *grammar_compile_budget(const struct grammar_vocab_index *vi, enum grammar_kind kind,
                                       const char *src, size_t len,
                                       const struct grammar_budget *b, struct err *e);

/* What a compiled grammar holds (tests, tools, budgets). */
struct grammar_stats {
    int32_t n_terms, n_productions, n_nfa_states, n_dfa_states;
    size_t compile_bytes, dfa_bytes;
    /* inner walks served by the relaxed walk of a loop (docs/grammar.md "Counts out of the
     * lexer state"), relaxed walks done, and the relaxed DFA's bytes; of them, the interval
     * walks' (counts below min) */
    uint64_t relax_served, relax_walks, iv_served, iv_walks;
    size_t rdfa_bytes;
    /* trie subtrees walks took whole and the nodes below them (docs/grammar.md "Whole
     * subtrees") */
    uint64_t whole_taken, trie_skipped;
};
void grammar_stats(const struct grammar *g, struct grammar_stats *st);
/* Drops one reference (the grammar is freed with its last reference; matchers hold one). */
void grammar_free(struct grammar *g);
struct grammar *grammar_ref(struct grammar *g);
int32_t grammar_n_terminals(const struct grammar *g);
int32_t grammar_n_productions(const struct grammar *g);

/* LRU cache of compiled grammars keyed by (kind, source); thread-safe. get returns a new
 * reference (release with grammar_free) or NULL with e filled; errors are not cached. */
struct grammar_cache;
struct grammar_cache *grammar_cache_new(const struct grammar_vocab_index *vi, size_t capacity);
void grammar_cache_free(struct grammar_cache *c);
struct grammar *grammar_cache_get(struct grammar_cache *c, enum grammar_kind kind, const char *src,
                                  size_t len, struct err *e);
size_t grammar_cache_size(struct grammar_cache *c);

/* A matcher is the per-request state (one thread at a time). It holds a grammar reference. */
struct matcher;
struct matcher *matcher_new(const struct grammar *g, struct err *e);
void matcher_free(struct matcher *m);
/* Writes the allowed-token bitset ((n_tokens+31)/32 words). */
void matcher_mask(struct matcher *m, uint32_t *bitset_out);
/* 0 if token is allowed and consumed; -1 (state unchanged) otherwise. */
int matcher_consume(struct matcher *m, int32_t token);
bool matcher_accepting(const struct matcher *m); /* the grammar accepts here (eos allowed) */
bool matcher_done(const struct matcher *m);      /* nothing but eos can follow */
/* 0 while the matcher is usable; -1 with e filled once a budget was exceeded (a mask then
 * allows nothing and consume fails): ERR_INVALID naming the budget, or ERR_NOMEM. */
int matcher_status(const struct matcher *m, struct err *e);
/* Work units the last matcher_mask took (calibration: lmserve-maskbench). */
uint64_t matcher_last_work(const struct matcher *m);
/* Trie nodes the last matcher_mask visited (walks and path replays; a load-independent cost). */
uint64_t matcher_last_trie_steps(const struct matcher *m);
/* Undoes the last n consumed tokens (eos included); the state is exactly what it was. 0, or -1
 * if fewer than n tokens were consumed. */
int matcher_rollback(struct matcher *m, int n_tokens);

#endif
