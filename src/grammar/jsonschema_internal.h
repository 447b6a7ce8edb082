/* jsonschema_internal — regex builders shared by the JSON Schema → lark compiler (jsonschema.c)
 * and its unit tests. Every function appends regex TEXT in the dialect of lark `/.../` terminals
 * (Rust-regex-like syntax, `/` always written `\/`) to a buf. Regexes here describe JSON TEXT:
 * a "content" regex matches the characters between the quotes of a JSON string as they appear in
 * the serialized document (so a `"` in the value appears as `\"`).
 *
 * Allocation failures inside buf_* are sticky: callers check `out->data == NULL`-free invariants
 * via the int return where given; the regex builders return -1 with err set on bad input and on
 * OOM. */
#ifndef LMS_GRAMMAR_JSONSCHEMA_INTERNAL_H
#define LMS_GRAMMAR_JSONSCHEMA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/err.h"

/* One JSON string character as it appears in JSON text: an unescaped code point other than
 * `"` `\` and U+0000..U+001F, or an escape (\" \\ \/ \b \f \n \r \t \uXXXX; surrogates only as
 * a valid high+low pair, so each match is exactly one code point). */
/* The escapes share one backslash alternative (one lexer thread for all of them). */
#define JSRX_CHAR                                                                                  \
    "(?:[^\"\\\\\\x00-\\x1F]|\\\\(?:[\"\\\\\\/bfnrt]|u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|"               \
    "[dD][0-7][0-9a-fA-F]{2}|[dD][89abAB][0-9a-fA-F]{2}\\\\u[dD][c-fC-F][0-9a-fA-F]{2})))"

/* A set of code points: sorted disjoint ranges (more than 64 sets `overflow`). */
struct jsrx_cpset {
    uint32_t lo[64], hi[64];
    int n;
    bool overflow;
};
void jsrx_cp_add(struct jsrx_cpset *s, uint32_t lo, uint32_t hi);
void jsrx_cp_negate(struct jsrx_cpset *s);
/* The JSON-text regex of "one character of s" (canonical: one spelling per code point). */
void jsrx_emit_set(struct buf *o, const struct jsrx_cpset *s, bool canonical);
/* Pattern parsing pieces (the ECMA dialect of jsrx_pattern), at pat[*i], advancing *i: one
 * UTF-8 code point; an escape after its backslash (into set); a class after its '['. */
uint32_t jsrx_pt_cp(const char *pat, size_t len, size_t *i);
int jsrx_pt_escape(const char *pat, size_t len, size_t *i, struct jsrx_cpset *set, bool in_class,
                   struct err *e);
int jsrx_pt_class(const char *pat, size_t len, size_t *i, struct jsrx_cpset *set, struct err *e);

/* Object keys partitioned by patternProperties (jsonschema_keys.c, issue 19), and the
 * intersection of patterns (pattern with format): a DFA over code
 * points built from the patterns (each unanchored, ECMA semantics) and the declared names; every
 * key gets a label: the set of patterns it matches (bit j: pattern j) and whether it is a
 * declared name. jsk_build lists the masks of the non-declared keys that occur (mask 0: the
 * keys no pattern matches); jsk_regex writes the JSON string regex (with its quotes, canonical
 * spellings as jsrx_key_not_in) of the non-declared keys whose mask index is selected. The
 * automaton and the regex are bounded (JSK_MAX_*); beyond, an error naming patternProperties. */
#define JSK_MAX_PATTERNS 64
#define JSK_MAX_NFA 60000
#define JSK_MAX_DFA 3000
#define JSK_MAX_REGEX (2u << 20)
struct jsk {
    uint64_t *masks; /* distinct masks of non-declared keys */
    int n_masks;
    void *impl;
};
int jsk_build(struct jsk *k, const char *kw, const char *const *pats, int np,
              const char *const *names, const size_t *lens, int nn, struct err *e);
/* 0 written, 1 no key selected (nothing written), -1 error. Flags: JSK_TICK writes (?T) after
 * each character (for a length region), JSK_BARE leaves out the quotes (content only). */
#define JSK_TICK 1u
#define JSK_BARE 2u
int jsk_regex(struct jsk *k, const bool *sel, unsigned flags, struct buf *out, struct err *e);
/* The content regex of the strings matching every pattern of pats[0..np) (unanchored ECMA), in
 * canonical spellings; flags as jsk_regex. 0 written, 1 no string matches, -1 error. */
int jsk_intersect_regex(const char *kw, const char *const *pats, int np, unsigned flags,
                        struct buf *out, struct err *e);
void jsk_free(struct jsk *k);
/* Whether ECMA pattern pat (unanchored) matches the UTF-8 string s[0..n) on that automaton:
 * 1, 0, or -1 (a construct it does not implement, or no memory). */
int jsk_match(const char *pat, const char *s, size_t n);

/* Unanchored ECMA-262 `pattern` → regex over JSON string content (no quotes) matching exactly the
 * strings whose decoded value contains a match. Supported: literals, escapes (\d \w \s \D \W \S
 * \t \n \r \f \v \0 \xHH \uHHHH \u{H..} \cX and escaped punctuation), classes with ranges and
 * negation, `.`, groups (capturing, (?:...), (?<name>...)), alternation, quantifiers ? * + {n}
 * {n,} {n,m} (lazy `?` suffix ignored: same language), `^` / `$` at the start / end of a top-level
 * alternative (or of a group that starts / ends the alternative in every branch). Rejected with a
 * message: lookaround, backreferences, \b \B, anchors elsewhere, Unicode property escapes.
 * If `single` is non-NULL and the pattern is exactly `^X{q}$` for one character set X, writes
 * X's content regex into single->set and the repetition bounds into single->lo/hi (hi -1 =
 * unbounded), so callers can intersect with minLength/maxLength. Also reports whether every
 * alternative is anchored at both ends and the range of lengths (in characters) of what the
 * pattern itself matches (mx -1: unbounded), so a length bound the pattern already implies can be
 * dropped. */
struct jsrx_single {
    bool ok;
    struct buf set;
    int64_t lo, hi;
    bool anchored;
    int64_t mn, mx;
    struct buf notset; /* when ok or contains: one character NOT in X (content regex) */
    bool contains;     /* the pattern is X, X+ or X{1,n} unanchored: "contains a character of X" */
};
int jsrx_pattern(const char *pat, size_t len, struct buf *out, struct jsrx_single *single,
                 struct err *e);

/* Length regions (regex.h RX_LEN): `(?L<lo>,<hi>:body)` where body writes (?T) after each
 * character, so the region is body's language intersected with "lo..hi characters" (hi -1:
 * unbounded; bounds above JSRX_LEN_MAX are taken as unbounded: no reply is that long).
 * jsrx_pattern_len is jsrx_pattern (without `single`) inside such a region. */
#define JSRX_LEN_MAX 1000000000
int jsrx_pattern_len(const char *pat, size_t len, int64_t lo, int64_t hi, struct buf *out,
                     struct err *e);
void jsrx_len_region(struct buf *out, int64_t lo, int64_t hi, const char *body);
/* The content regex of `format` with (?T) after each character (for a length region). */
int jsrx_format_ticked(const char *format, struct buf *out, struct err *e);

/* Content regex for the strings a pattern does NOT match; only for patterns of the form ^X{m,n}$
 * (one character set), else -1 with an error. */
int jsrx_pattern_complement(const char *pat, size_t len, struct buf *out, struct err *e);

/* `format` as an anchored ECMA pattern over the decoded value (for jsk_intersect_regex). */
int jsrx_format_ecma(const char *format, struct buf *out, struct err *e);

/* Regex over JSON string content for `format` (date-time, date, time, duration, email, hostname,
 * ipv4, ipv6, uuid, uri). Unknown format → -1, "unsupported format". */
int jsrx_format(const char *format, struct buf *out, struct err *e);

/* JSON string (with quotes) whose value is none of names[0..n) (UTF-8 values). Escapes accepted
 * are the canonical ones (\" \\ \b \f \n \r \t and \u00XX for other control characters), so each
 * value has one spelling and the exclusion is exact. */
#define JSRX_MAX_NAME 1024
int jsrx_key_not_in(const char *const *names, const size_t *lens, int n, struct buf *out,
                    struct err *e);

/* A number bound: decimal value as sign + digits (no exponent). */
struct jsrx_dec {
    bool neg;
    char ip[400]; /* integer digits, no leading zeros ("0" for zero) */
    char fp[400]; /* fraction digits, no trailing zeros ("" for none) */
};
/* Parse a JSON number text (e.g. "-12.50e3") into a jsrx_dec. -1 if malformed / too long. */
int jsrx_dec_parse(const char *s, struct jsrx_dec *d);
int jsrx_dec_cmp(const struct jsrx_dec *a, const struct jsrx_dec *b);

/* Regex for a JSON number (exact JSON number grammar) with optional bounds (NULL = none), integer
 * only when `integer`, at most `max_frac` fraction digits when max_frac >= 0. Unbounded
 * non-integers allow exponents; bounded ones are written without exponent (documented
 * approximation: 1e2 is then rejected). Returns 1 if the range is empty (nothing written). */
int jsrx_number(const struct jsrx_dec *lo, bool lo_excl, const struct jsrx_dec *hi, bool hi_excl,
                bool integer, int max_frac, struct buf *out);

/* Regex for the integers in the bounds (NULL = none; real bounds are rounded inward) that are
 * multiples of m (1..10000), in canonical spelling (and -0 for 0), each followed by an optional
 * `.0…` when frac0 (type number): a divisibility automaton, with length regions for the bounds
 * (jsonschema_mult.c). 0 written, 1 no such integer (nothing written), -1 error (a modulus whose
 * automaton or regex exceeds the bounds there). */
int jsrx_int_multiples(long long m, const struct jsrx_dec *lo, bool lo_excl,
                       const struct jsrx_dec *hi, bool hi_excl, bool frac0, struct buf *out,
                       struct err *e);

/* Escape a literal UTF-8 byte string for inclusion in a regex. */
void jsrx_literal(const char *s, size_t n, struct buf *out);

#endif
