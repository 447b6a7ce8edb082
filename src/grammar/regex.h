/* regex — regex syntax -> byte-level NFA -> lazily built DFA (the lexer automaton of grammar/).
 *
 * Syntax: the common part of JSON-Schema `pattern` (ECMA 262) and Rust regex (llguidance lark
 * terminals): literals, `.`, classes `[...]` / `[^...]` with ranges and \d \w \s \D \W \S, escapes
 * \n \r \t \f \v \0 \xHH \x{H..} \uXXXX \u{H..}, groups ( ) (?: ) (?P<n> ) (?<n> ), alternation,
 * quantifiers * + ? {n} {n,} {n,m} {,m} (lazy `?` suffix accepted; for whole-lexeme matching it
 * changes nothing), anchors ^ $ meaning start / end of the lexeme. Everything else (lookaround,
 * backreferences, \b, \p{..}, inline flags) is an error naming it.
 *
 * Code points are matched as UTF-8: a class becomes alternatives of byte-range sequences.
 * All terminals of one grammar live in one NFA (struct rx_nfa); each has its own start state and
 * accept states tagged with its terminal id.
 *
 * DFA states are sets of NFA byte-states plus the set of terminals accepted there, hash-consed;
 * transitions are computed on first use. State 0 is the dead state. Not thread-safe: the owner
 * (a compiled grammar) serializes access. */
#ifndef LMS_GRAMMAR_REGEX_H
#define LMS_GRAMMAR_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define RX_MAX_NFA_STATES 400000 /* per grammar: bounds {m,n} expansion (below 2^19: the
                                  * state field of a kernel entry, rx_thread_state) */
#define RX_MAX_DFA_STATES 200000
#define RX_DEAD 0u
#define RX_UNKNOWN 0xffffffffu

/* ---- AST ---- */
/* RX_LEN: a length region `(?L<m>,<n>:x)` (a = x; min, max; max -1 unbounded): x must pass
 * between m and n ticks; RX_TICK: `(?T)`, one tick of the innermost region (an epsilon step).
 * Internal syntax: the JSON Schema compiler writes x with a tick after each character of the
 * string content, so the region is "x intersected with minLength/maxLength" (issue 19). */
enum rx_kind { RX_EMPTY, RX_CLASS, RX_BYTES, RX_CAT, RX_ALT, RX_REPEAT, RX_BOL, RX_EOL, RX_LEN, RX_TICK };

struct rx_node {
    enum rx_kind kind;
    int32_t a, b;     /* CAT/ALT: children; REPEAT: a = child */
    int32_t min, max; /* REPEAT: max = -1 for unbounded; BYTES: byte range [min,max] */
    uint32_t *ranges; /* CLASS: code point ranges, pairs lo,hi sorted, merged */
    int32_t n_ranges;
};

/* An AST arena; nodes refer to each other by index. */
struct rx_ast {
    struct rx_node *nodes;
    int32_t n, cap;
};

void rx_ast_deinit(struct rx_ast *a);
/* Parses pattern[0..len) into a, returns the root node index or -1 (e filled, naming the
 * construct and its offset). */
int32_t rx_parse(struct rx_ast *a, const char *pattern, size_t len, struct err *e);
/* Node builders used by the lark front end to compose terminals. */
int32_t rx_literal(struct rx_ast *a, const char *s, size_t len, bool icase);
int32_t rx_cat(struct rx_ast *a, int32_t x, int32_t y);
int32_t rx_alt(struct rx_ast *a, int32_t x, int32_t y);
int32_t rx_repeat(struct rx_ast *a, int32_t x, int32_t min, int32_t max);
/* Copies subtree `root` of src into dst; returns the new root (or -1 on allocation failure). */
int32_t rx_copy(struct rx_ast *dst, const struct rx_ast *src, int32_t root);

/* ---- NFA ---- */
/* Large bounded repetitions x{m,n} (m or n above RX_NATIVE_COUNT, x not nullable, no large
 * repetition inside x) are not expanded: x is emitted once between CNT_ENTER and CNT_END, and an
 * NFA thread inside x carries an iteration counter (DFA states are sets of (state, counter)). */
#define RX_NATIVE_COUNT 32
/* Inside a length region repetitions are expanded up to this count (e.g. the {0,61} of a
 * hostname label in `format: email` with `maxLength`); above it, and above RX_INNER_FROM for a
 * body with repetitions of its own (a word count `(?:\S+\s+){0,99}`), the repetition becomes
 * an inner counted loop: its iteration count is a second counter of the thread (bits 19-30 of
 * a kernel entry, rx_thread_w) next to the region's ticks. Inner loops do not nest (inside
 * one, copies up to 32) and their count is at most RX_MAX_INNER. */
#define RX_REGION_COUNT 64
#define RX_MAX_INNER 4094
/* A body with repetitions of its own repeated more than this inside a region is an inner loop
 * already (copies of a word multiply the states each count meets; the second counter does
 * not). */
#define RX_INNER_FROM 8
/* A length region is a loop (len = true) whose counter counts ticks instead of iterations:
 * CNT_ENTER starts it at 0, CNT_TICK adds one (a thread past max dies), CNT_END leaves the
 * region when the count is at least min. Inside a region repetitions are expanded (their
 * bounds clamped to the region's max) up to RX_REGION_COUNT; larger ones are inner loops
 * (parent = the region), which count iterations in the thread's second counter. */
enum rx_nkind { NS_BYTE, NS_SPLIT, NS_EPS, NS_BOL, NS_EOL, NS_ACCEPT, NS_CNT_ENTER, NS_CNT_END,
                NS_CNT_TICK };
struct rx_nstate {
    uint8_t kind, lo, hi;
    int32_t out, out2; /* out2: SPLIT, CNT_ENTER (continuation); ACCEPT: out = terminal id */
    int32_t loop;      /* CNT_ENTER / CNT_END: index into rx_nfa.loops */
};
struct rx_loop {
    int32_t min, max; /* max -1: unbounded */
    int32_t body, cont;
    int32_t lo, hi; /* NFA states [lo, hi) are the body's (an inner loop's lie in its region's) */
    bool len;       /* a length region (counts ticks), not an iteration count */
    int32_t parent; /* an inner loop: its length region; else -1 */
    int32_t n_inner; /* a region: its inner loops are loops [id + 1, id + 1 + n_inner) */
    /* inner loops, per body state s (index s - lo): the fewest / most ticks (capped at the
     * region's min) from s to the loop's CNT_END within the current iteration (RX_TICKS_INF /
     * -1: unreachable); bt*: the same for a whole iteration (from the body's entry); ct*: the
     * region's tmin / tmax at the loop's continuation. With w the iteration in progress, a
     * thread's ticks to the region's end are itmin + max(0, min - w) * btmin + ctmin at
     * fewest, and itmax + (max - w) * btmax + ctmax (capped) at most (rx_inner_ticks). */
    int32_t *itmin, *itmax;
    int32_t btmin, btmax, ctmin, ctmax;
    /* length regions, per body state s (index s - lo): the fewest ticks from s to the region's
     * end (RX_TICKS_INF: none) and the most, capped at min (-1: the end is unreachable). A
     * thread with `count` ticks dies when count + tmin > max or count + tmax < min, so a lexer
     * state never keeps a thread that cannot finish (masks stay exact). tmin_max / tmax_fin:
     * the largest finite tmin, the largest tmax below min (for the counter classes). */
    int32_t *tmin, *tmax;
    int32_t tmin_max, tmax_fin;
};
#define RX_TICKS_INF 0x3fffffff
struct rx_nfa {
    struct rx_nstate *s;
    int32_t n, cap;
    int32_t max_states; /* budget (0: RX_MAX_NFA_STATES) */
    struct rx_loop *loops;
    int32_t n_loops, cap_loops;
};
void rx_nfa_deinit(struct rx_nfa *n);
/* Adds the automaton of AST subtree root, accepting with terminal id term. Returns its start
 * state, or -1 (e filled: too large / no memory). */
int32_t rx_nfa_add(struct rx_nfa *n, const struct rx_ast *a, int32_t root, int32_t term,
                   struct err *e);

/* ---- DFA ---- */
struct rx_dstate {
    uint64_t *kernel; /* NFA byte states (state | (counter + 1) << 32), sorted */
    int32_t n_kernel;
    int32_t *accept; /* accepted terminal ids, sorted */
    int32_t n_accept;
    /* When every counted thread is in one loop with one counter value: that loop and value
     * (shifted transitions, see rx_shift); else sloop = -1. sw: the largest iteration count
     * of an inner loop's thread (0: none); a shift moves the region's ticks only and carries
     * inner counts as they are (same counts, same checks). */
    int32_t sloop;
    uint32_t sc1;
    uint32_t sw;
};
/* Shifted transitions. Far from a loop's bounds the counter is only carried along: the kernels
 * of two states that differ by a uniform shift of their counters have transitions that differ
 * by the same shift. A transition computed once for such a state (its kernel and result stored
 * with counters relative to the source's) serves every shift of it without an epsilon closure.
 * This is what keeps the states of a long counted string or length region cheap: a token walks
 * through one new state per count it reaches (issue 19, the worst mask). */
struct rx_shift {
    uint64_t h; /* 0: empty slot */
    uint64_t *src, *res; /* kernels, counted entries relative (source counter -> 1) */
    int32_t n_src, n_res;
    int32_t *acc;
    int32_t n_acc;
    int32_t loop; /* loop * 4 + zone (regex.c shift_zone) */
    uint8_t b;
};
struct rx_dfa {
    const struct rx_nfa *nfa;
    struct rx_dstate *st;
    int32_t n, cap;
    uint32_t *trans; /* [cap][256] transitions, RX_UNKNOWN until computed; its own mapping,
                      * moves on growth (mremap) */
    int32_t trans_pop; /* rows of trans whose pages are populated (trans_populate) */
    uint32_t *htab;  /* hash -> state id + 1 */
    uint32_t hcap;
    /* scratch */
    uint32_t *mark; /* per NFA state: generation (counter-less threads) */
    uint32_t *mark_end;
    uint32_t gen;
    uint64_t *vis_key; /* visited (state, counter, end) for counted threads */
    uint32_t *vis_gen;
    uint32_t vis_cap, vis_n;
    uint64_t vis_steps; /* visits in the current computation (work accounting) */
    uint64_t *stack, *kbuf;
    int32_t *abuf;
    int32_t stack_cap, kbuf_cap;
    bool failed; /* allocation failure or state limit: transitions then return RX_DEAD */
    /* Budgets (set by the owner; 0 = none). Memory: bytes of states, kernels and transition
     * tables; past max_bytes the DFA fails for good (over_bytes, failed). Work: thread steps of
     * transition computations since the owner last reset `work`; past work_limit a computation
     * returns RX_DEAD without storing the transition (over_work, until the owner clears it), so
     * the DFA itself stays correct. */
    size_t bytes, max_bytes;
    uint64_t work, work_limit;
    bool over_bytes, over_work;
    /* Relaxed mode (docs/grammar.md "Counts out of the lexer state"): bounded loops and length
     * regions ignore their max, counted threads keep their counter past the loop's exit (the
     * count at exit), and after each transition every counter is moved back by the transition's
     * tick (0 or 1) so the loop's body threads stay at one base count. A transition value then
     * carries the tick in bit 31 (RX_TICK_BIT); RX_NONUNI marks a transition after which the
     * body threads disagree on their count (the walk that asked gives up). An accepting state's
     * accept set holds, before the terminal ids, one entry -(c1 + 1): the smallest counter of
     * an accepting thread. Used only by mask.c, through rx_dfa_compute and rx_dfa_intern.
     * RX_MERGE_BIT (bit 30) marks a transition that merged counted threads of one NFA state
     * (or accepting threads) at different counters, keeping the smallest: exact for a max
     * alone, not for a min (the interval walks of mask.c give up on it). */
    bool relax;
    uint32_t racc;    /* scratch: smallest counter + 1 reaching ACCEPT in the current closure */
    uint32_t racc_hi; /* scratch: the largest */
    uint32_t *rkeep;  /* relaxed mode: per NFA state, the counter kept (relax_fix scratch) */
    struct rx_shift *sh; /* open addressing by shape hash */
    uint32_t sh_cap, sh_n;
    uint64_t sh_hits; /* transitions served by a shift (statistics, tests) */
    bool entered;     /* scratch: the current closure passed a CNT_ENTER (no shift stored) */
    /* Dominated threads (regex_prune.c, docs/grammar.md "Dominated threads"): every computed
     * transition drops the threads whose continuations another thread of the state covers.
     * no_prune turns it off (tests compare both). Tables are built on first use. */
    bool no_prune, prune_broken;
    int prune_rules; /* applied to transitions (rx_dfa_init: RX_PRUNE_COUNTS) */
    int8_t *dom;      /* per NFA state: a universal-thread candidate (1), not (0), unknown (-1) */
    int8_t *loop_dom; /* per loop: its counts dominate (1), not (0), unknown (-1) */
    uint64_t *inc;    /* memo: ((qb << 32 | qa) + 1) << 1 | L(qb) within L(qa), open addressing */
    uint32_t inc_cap, inc_n;
    uint32_t *prune_mark, prune_gen;
    uint32_t *ic_mark, ic_gen; /* scratch of the inclusion checks */
    int32_t *ic_stack, *ic_acc, *ic_seeds;
    int32_t *acc_of; /* per NFA state: its terminal's ACCEPT state */
    int32_t *minlen; /* per NFA state: fewest bytes to an ACCEPT (regex_prune.c minlen_init) */
    struct rx_pairmemo *pm; /* decided pairs of the inclusion checks (regex_prune.c) */
    uint32_t pm_cap, pm_n;
    uint64_t pruned; /* threads dropped (statistics, tests) */
    uint64_t prune_work, prune_work_limit; /* steps of inclusion checks; past the limit (0:
                                            * none) no new check starts (earley.c sets it
                                            * per mask) */
    /* Byte classes (docs/grammar.md "Byte classes"): bytes that every byte state of the NFA
     * takes alike (each NS_BYTE range holds both or neither) move every DFA state alike, so a
     * transition computed for one byte is stored for its whole class (cls_bytes[cls_off[c] ..
     * cls_off[c + 1]), cls[b] = c). Set by rx_dfa_init from the finished NFA; no_classes (tests)
     * stores each transition for its own byte only. */
    uint8_t cls[256];
    uint8_t cls_bytes[256];
    uint16_t cls_off[257];
    int32_t n_cls;
    bool no_classes;
    uint64_t computed;     /* closures computed by rx_dfa_compute (statistics, tests) */
    uint64_t trans_remaps; /* growths of trans moved by mremap, not copied (statistics, tests) */
};
int rx_dfa_init(struct rx_dfa *d, const struct rx_nfa *nfa, struct err *e);
void rx_dfa_deinit(struct rx_dfa *d);
/* The DFA state for "at the start of a lexeme, any of these NFA start states". Start states never
 * accept (lexemes are non-empty). Returns RX_DEAD if n == 0 or on failure. */
uint32_t rx_dfa_start(struct rx_dfa *d, const int32_t *starts, int32_t n);
static inline uint32_t rx_dfa_next(struct rx_dfa *d, uint32_t s, uint8_t b);
/* The (non-accepting) state whose kernel is k[0..n) (sorted kernel entries of existing states). */
uint32_t rx_dfa_from_kernel(struct rx_dfa *d, const uint64_t *k, int32_t n);
uint32_t rx_dfa_compute(struct rx_dfa *d, uint32_t s, uint8_t b);
/* The state with kernel k[0..nk) and accept set acc[0..na) (any order; copied, sorted,
 * deduplicated), RX_DEAD on failure. */
uint32_t rx_dfa_intern(struct rx_dfa *d, const uint64_t *k, int32_t nk, const int32_t *acc,
                       int32_t na);
#define RX_TICK_BIT 0x80000000u
#define RX_NONUNI 0xfffffffeu
#define RX_MERGE_BIT 0x40000000u
/* Drops the dominated threads of kernel k[0..nk) (sorted on return) by the given rules;
 * returns the new count (regex_prune.c). rx_dfa_compute applies d->prune_rules to every
 * transition; mask.c applies RX_PRUNE_UNIVERSAL to the canonical keys of lexer states. */
#define RX_PRUNE_UNIVERSAL 1
#define RX_PRUNE_COUNTS 2
int32_t rx_prune_kernel(struct rx_dfa *d, uint64_t *k, int32_t nk, int rules);
void rx_prune_deinit(struct rx_dfa *d);
/* Index of the counted loop or region whose body holds NFA state s (not an inner loop: the
 * one whose counter is rx_thread_c1), or -1. */
int32_t rx_nfa_loop_of(const struct rx_nfa *n, int32_t s);
/* Index of the inner loop whose body holds s, or -1. */
int32_t rx_nfa_inner_of(const struct rx_nfa *n, int32_t s);
/* The fewest (*tmin, RX_TICKS_INF: none) and most (*tmax, capped at the region's min; -1:
 * none) ticks from body state s of inner loop il, in iteration w, to the region's end. */
void rx_inner_ticks(const struct rx_loop *il, int32_t s, int64_t w, int64_t *tmin, int64_t *tmax,
                    int32_t cap);
/* A DFA kernel entry: NFA state (bits 0-18), the inner loop's iteration count (bits 19-30, 0
 * outside inner loops) and loop counter + 1 (bits 32-63, 0 outside counted loops). */
#define RX_W_SHIFT 19
#define RX_W_MASK (0xfffull << RX_W_SHIFT)
static inline int32_t rx_thread_state(uint64_t v)
{
    return (int32_t)(v & 0x7ffffu);
}
static inline uint32_t rx_thread_w(uint64_t v)
{
    return (uint32_t)((v >> RX_W_SHIFT) & 0xfffu);
}
static inline uint32_t rx_thread_c1(uint64_t v)
{
    return (uint32_t)(v >> 32);
}

/* Whether AST subtree x can match the empty string (anchors count as empty). */
bool rx_ast_nullable(const struct rx_ast *a, int32_t x);
/* Whether the NFA start state `start` can match the empty string. */
bool rx_nfa_nullable(const struct rx_nfa *n, int32_t start);

static inline uint32_t rx_dfa_next(struct rx_dfa *d, uint32_t s, uint8_t b)
{
    uint32_t t = d->trans[(size_t)s * 256 + b];
    return t != RX_UNKNOWN ? t : rx_dfa_compute(d, s, b);
}
static inline bool rx_dfa_accepting(const struct rx_dfa *d, uint32_t s)
{
    return d->st[s].n_accept > 0;
}
/* No byte can extend the lexeme (but it may accept). */
static inline bool rx_dfa_final(const struct rx_dfa *d, uint32_t s)
{
    return d->st[s].n_kernel == 0;
}

/* Whole-string match of a standalone pattern (tests, tools). 1 match, 0 no match, -1 error. */
int rx_match_full(const char *pattern, size_t plen, const char *s, size_t len, struct err *e);

#endif
