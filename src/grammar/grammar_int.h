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
    uint64_t *fhr;     /* the same with loop bounds left out (relaxed walks' keys) */
    struct fh_vent *fhv; /* the same with one loop's (and its inner loop's) bounds left out:
                          * (state, skip, skip2) -> hash, open addressing (fhash.c) */
    uint32_t fhv_cap, fhv_n;
    int32_t *fh_scc;     /* per NFA state: its strongly connected component (fhash.c) */
    int32_t *fh_scc_n;   /* per component: its states */
    uint64_t fh_gid;     /* fhash.c: this grammar's id on its vocabulary (0: none yet) */
    int32_t *fh_ws;      /* fhash.c: states waiting for their successors' hashes */
    size_t fh_ws_n, fh_ws_cap;
    int32_t *ipass;    /* per loop: for an inner loop, the most iterations a token's bytes can
                        * complete (mask_prepare_relax; -1: unknown, no class for its count) */
    int32_t *fh_queue, *fh_local;
    uint32_t *fh_stamp;
    uint32_t fh_gen;
    struct inner_entry **inner;
    int32_t inner_cap;
    size_t inner_bytes;

    /* counts out of the lexer state (mask.c, docs/grammar.md "Counts out of the lexer state") */
    struct rx_dfa rdfa; /* the same NFA in relaxed mode (regex.h), built on first use */
    bool rdfa_ready, rdfa_broken;
    int32_t *post_loop; /* per NFA state: the loop whose continuation reaches it, or -1 */
    int8_t *loop_ok;    /* per loop: 1 when its terminal's states qualify (mask_prepare_relax) */
    int32_t *rneed;     /* per relaxed state: 2 ints (kernel need, accept need), RN_UNSET */
    int32_t rneed_cap;
    struct rpay **rpay; /* per relaxed root state: its walk */
    int32_t rpay_cap;
    struct rpay **ipay; /* per relaxed root state: its interval walk (counts below min) */
    int32_t ipay_cap;
    int32_t *riv;       /* per relaxed state: 4 ints (union of its threads' counts, accept's) */
    int32_t riv_cap;
    uint64_t iv_served, iv_walks; /* statistics: masks and walks of interval walks */
    uint64_t relax_served, relax_walks; /* statistics (grammar_stats) */
    uint64_t trie_steps; /* trie nodes visited by mask walks and path replays (statistics) */
    /* whole subtrees (mask.c): per lexer DFA state, the bytes on which it agrees with the
     * UTF-8 reference automaton (computed on first use) */
    struct agree_ent *agr;
    int32_t agr_cap;
    struct agree_shape *ash; /* the same per shape of a counted state (open addressing) */
    uint32_t ash_cap, ash_n;
    uint64_t trie_skipped, whole_taken; /* statistics: nodes below whole subtrees, subtrees */
    uint64_t subkey_hits; /* statistics: sub-walk keys copied from a sibling's (mask.c subkeys) */
};


/* ---- vocabulary index (vocab_trie.c) ---- */

struct tnode {
    int32_t tok;    /* first token ending here, or -1 */
    uint32_t end;   /* one past the subtree */
    uint16_t depth; /* root = 0 */
    uint8_t byte;
    uint8_t dup; /* TN_DUP: more tokens with the same bytes (tok_next chain); TN_BIG: see below */
};
#define TN_DUP 1
/* The node's path is valid UTF-8 ending at a character boundary and its subtree has at least
 * TN_BIG_MIN nodes below it: a walk may take the subtree whole (mask.c "Whole subtrees"). */
#define TN_BIG 2
#define TN_BIG_MIN 8

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
    /* references (under the vocabulary's mutex): the shared cache's, and one per inner entry or
     * walk using it; freed at 0, so the cache can drop it while grammars still use it */
    int32_t refs;
    bool shared;  /* was published in the shared cache (the grammars' memory accounting) */
    size_t bytes; /* counted in sh_bytes while in the cache */
};

/* A slot of the shared walk cache's table: the walk's hash and mark beside it, so probes, the
 * table's growth and the clock hand passing a marked walk touch no walk. */
struct wcache_slot {
    uint64_t hash;
    void *x; /* struct shared_inner (vi->sh) or struct rdata (vi->rsh); NULL: empty */
    bool hit; /* found or published since the clock hand last passed (second chance) */
};
/* Room-making in the shared walk cache (walk_cache.c): it starts when a walk would take the
 * cache past all but 1/WCACHE_RESERVE_DIV of its budget; one publication examines at most
 * WCACHE_SWEEP_WALKS walks (vi->sh_sweep) and this many slots per walk. */
#define WCACHE_RESERVE_DIV 16
#define WCACHE_SWEEP_WALKS 64
#define WCACHE_SWEEP_SLOTS_PER_WALK 16
/* The walks' table's size: one slot per this many bytes of the budget (262,144 slots, 6 MB,
 * for the 256 MB cache: up to 131,072 walks before it grows; walks average ~5 KB on
 * MaskBench) */
#define WCACHE_BYTES_PER_SLOT 1024

/* The reference automaton of whole subtrees (mask.c): well-formed UTF-8 (U+0000..U+10FFFF
 * without surrogates, shortest forms), one byte at a time. State 0: at a character boundary;
 * 1-3: that many continuation bytes due; 4-7: after E0, ED, F0, F4 (a restricted second
 * byte); -1: dead. */
static inline int u8_next(int s, uint8_t b)
{
    switch (s) {
    case 0:
        if (b < 0x80) return 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 4;
        if (b == 0xED) return 5;
        if (b >= 0xE1 && b <= 0xEF) return 2;
        if (b == 0xF0) return 6;
        if (b == 0xF4) return 7;
        if (b >= 0xF1 && b <= 0xF3) return 3;
        return -1;
    case 1:
    case 2:
    case 3: return b >= 0x80 && b <= 0xBF ? s - 1 : -1;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    case 7: return b >= 0x80 && b <= 0x8F ? 2 : -1;
    default: return -1;
    }
}
#define U8_STATES 8

#define SHARED_CACHE_MAX_BYTES ((size_t)256 << 20)

/* A relaxed walk (mask.c "Counts out of the lexer state"): tokens sorted by the count they
 * need, and the lexeme ends with the counts where they apply. Depends only on the relaxed
 * state's canonical form (bounds left out) and the vocabulary. */
struct rgroup {
    int32_t lo, hi;
    uint32_t start, end;
};

struct rbound {
    uint32_t node;
    int32_t lo, hi; /* a lexeme end for lo <= r < hi (r = max - count) */
    int32_t k;      /* ticks from the root to the node's parent */
};
struct rdata {
    uint64_t hash;
    uint8_t *key;
    size_t key_len;
    int32_t *toks; /* sorted by need */
    uint32_t n_toks;
    uint32_t *cum; /* cum[v + 1]: tokens with need <= v, for v = -1 .. maxneed */
    int32_t maxneed;
    struct rbound *b;
    uint32_t n_b;
    /* interval walks (counts below min): toks sorted by their interval of counts, one group
     * per interval (grp[i]: tokens toks[start, end) allowed for lo <= count - min <= hi);
     * b[].lo / hi are then such intervals too (inclusive), cum is NULL */
    struct rgroup *grp;
    uint32_t n_grp;
    /* once published (walk_cache.c), references under the vocabulary's mutex: the cache's and
     * one per grammar's rpay using it; freed at 0 */
    int32_t refs;
    size_t bytes; /* counted in sh_bytes while in the cache */
};

struct grammar_vocab_index {
    int32_t n_tokens, eos;
    bool *is_special;
    bool no_iv; /* tests: grammars on this vocabulary do no interval walks (mask.c) */
    bool no_whole; /* tests: walks never take a subtree whole (mask.c) */
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
    /* Whole subtrees (mask.c): the tokens whose bytes are valid UTF-8 (a complete or cut last
     * character) in DFS order, with their duplicates (vtok), vstart[i] the first of them at or
     * after node i (n_nodes + 1 entries); per TN_BIG node its index into ubytes, the set of
     * bytes of the nodes below it (256 bits) */
    int32_t *vtok;
    uint32_t *vstart;
    uint32_t *bix;
    uint64_t (*ubytes)[4];
    uint32_t n_big;
    /* inner-walk results shared by all grammars on this vocabulary, keyed by the canonical form
     * of a lexer state (see inner_key); guarded by mu (walk_cache.c) */
    pthread_mutex_t mu;
    struct wcache_slot *sh; /* open addressing, linear probing (walk_cache.c) */
    uint32_t sh_cap, sh_n;
    size_t sh_bytes;
    size_t sh_max_bytes; /* SHARED_CACHE_MAX_BYTES; past it the walks are dropped, not the new */
    uint64_t sh_hand;  /* the clock hand (walk_cache.c sweep): slots it moved since the table
                        * last grew; at slot sh_hand mod sh_cap */
    uint32_t sh_sweep; /* walks one publication examines to make room, at most */
    uint64_t sh_evictions; /* statistics: sweeps that dropped walks */
    /* statistics (grammar_vocab_cache_stats): walks dropped; walks examined to make room, in
     * all and the most by one publication; the most slots one publication rehashed growing the
     * table; walks not published for want of room */
    uint64_t sh_drops, sh_room_visits, sh_room_max, sh_grow_max, sh_refused;
    /* statistics: time making room (in all, most by one publication), growing the table (ns,
     * monotonic clock) */
    uint64_t sh_room_ns, sh_room_ns_max, sh_grow_ns, sh_grow_ns_max;
    /* walks the cache dropped that nobody uses, freed grave_step at a time by the next
     * publications (walk_cache.c wcache_add): dropping half the cache used to free thousands of
     * payloads inside one mask */
    struct shared_inner **grave;
    uint32_t grave_n, grave_cap, grave_max, grave_step;
    uint64_t gid_next;     /* fhash.c: grammar ids for hashes that are this grammar's own */
    /* relaxed walks, open addressing by hash (same mutex, same budget, their own clock) */
    struct wcache_slot *rsh;
    uint32_t rsh_cap, rsh_n;
    uint64_t rsh_hand;
    uint64_t sh_rdrops; /* statistics: relaxed walks dropped */
    int32_t *specials; /* ids of special tokens */
    int32_t n_specials;
};

/* ---- caches of a compiled grammar ---- */

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
    struct shared_inner *own; /* the payload, one reference held here (mask_release) */
};

#ifndef INNER_CACHE_MAX_BYTES /* per grammar; beyond it the grammar's entries are flushed */
#define INNER_CACHE_MAX_BYTES ((size_t)16 << 20)
#endif

/* ---- matcher (earley.c; masks: mask.c) ---- */

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
    uint64_t last_work, last_trie; /* the last mask's work and trie steps */
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

/* ---- shared between the files of the engine ---- */

/* grammar.c: bytes of the compiled grammar (the compiled-size budget, the cache's accounting). */
size_t grammar_compile_bytes(const struct grammar *g);
/* earley.c: qsort comparator of uint32_t */
int grammar_cmp_u32(const void *x, const void *y);
/* earley.c: one byte from (row *r, state *s, *empty); false if not allowed. `memo`: scans are
 * memoized per mask call. */
bool matcher_advance(struct matcher *m, uint32_t *r, uint32_t *s, bool *empty, uint8_t b, bool memo);
/* The row reached by ending the current lexeme here (top row if empty), or -1. */
int32_t matcher_end_lexeme(struct matcher *m, uint32_t r, uint32_t s, bool empty, bool memo);
int32_t matcher_scan_memo(struct matcher *m, uint32_t r, uint32_t s);
void matcher_truncate(struct matcher *m, uint32_t n_rows, uint32_t n_items);
void matcher_budget_begin(struct matcher *m);
void matcher_budget_end(struct matcher *m);
/* mask.c: the first mask, computed at compile time under the mask budget. */
int mask_probe_first(struct grammar *g, struct err *e);
/* mask.c: lexer-state token sets computed at compile time (each terminal after an opening
 * quote, at most MASK_PREWARM_MAX of them). */
#define MASK_PREWARM_MAX 256
/* and the states up to MASK_PREWARM_CHARS characters further in, within the trie steps of
 * MASK_PREWARM_DEEP_WALKS full walks per grammar */
#define MASK_PRUNE_WORK 100000 /* per mask or consume, see matcher_budget_begin */
#define MASK_PREWARM_CHARS 40
#define MASK_PREWARM_DEEP_WALKS 4
int mask_prewarm(struct grammar *g, struct err *e);
/* mask.c: which loops' counts the masks keep out of the lexer state (after nfa_term is set);
 * and the matching cleanup. */
int mask_prepare_relax(struct grammar *g, struct err *e);
void mask_free_relax(struct grammar *g);
/* walk_cache.c: the vocabulary's shared cache of inner walks. The walks' table of vi (empty),
 * made at the size vi->sh_max_bytes calls for (one slot per WCACHE_BYTES_PER_SLOT) with its
 * pages populated (mem_populate), so that no mask grows it or faults its pages in. -1: no
 * memory. */
int wcache_table_new(struct grammar_vocab_index *vi);
/* Drops one reference to payload x
 * (freed with the last). Any thread. */
void mask_release(struct grammar_vocab_index *vi, struct shared_inner *x);
/* The published payload with this key (hash h), with a reference for the caller (mask_release),
 * or NULL. Sets its hit mark. Any thread. */
struct shared_inner *wcache_find(struct grammar_vocab_index *vi, const uint8_t *key, size_t len,
                                 uint64_t h);
/* Publishes x (bytes: its size; the cache takes a reference of its own), making room when the
 * cache is full; false if not published (x stays the caller's). Any thread. */
bool wcache_add(struct grammar_vocab_index *vi, struct shared_inner *x, size_t bytes);
/* Frees payload x and what it holds (no reference left). */
void wcache_payload_free(struct shared_inner *x);
/* The same for relaxed walks (struct rdata, mask.c "Counts out of the lexer state"): find
 * returns a reference for the caller (wcache_rrelease); add publishes x with two references
 * (the cache's and the caller's), or returns false (x stays the caller's alone); a relaxed walk
 * is freed with its last reference. Any thread. */
struct rdata *wcache_rfind(struct grammar_vocab_index *vi, const uint8_t *key, size_t len,
                           uint64_t h);
bool wcache_radd(struct grammar_vocab_index *vi, struct rdata *x);
void wcache_rrelease(struct grammar_vocab_index *vi, struct rdata *x);
void wcache_rdata_free(struct rdata *d);

/* fhash.c: the structural hash of NFA state q (the automaton reachable from q; equal hashes,
 * equal futures) into out. skip: FH_ALL_BOUNDS, FH_NO_BOUNDS (loop bounds left out; a loop's
 * kind and whether it is bounded stay in), or a loop whose bounds alone are left out, with
 * skip2 >= 0 another (its inner loop). Memoized per grammar; counts against the mask budget
 * (g->dfa.work). 0, or -1 on no memory. Caller holds g->mu. */
#define FH_ALL_BOUNDS (-1)
#define FH_NO_BOUNDS (-2)
int fh_hash(struct grammar *g, int32_t q, int32_t skip, int32_t skip2, uint64_t out[2]);
void fh_free(struct grammar *g);

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
