/* Whole subtrees (mask.c, docs/grammar.md "Whole subtrees"): a walk takes a trie subtree whole
 * when its lexer state agrees with the UTF-8 reference automaton on every byte below. On a
 * generated vocabulary of a few thousand tokens (ASCII letters, digits, the bytes JSON strings
 * and patterns treat specially, multi-byte characters of every UTF-8 lead class, tokens cut
 * inside a character, invalid sequences: lone continuation bytes, overlong forms, surrogates),
 * masks of `start: /R/` along random token walks equal the same grammar's on a vocabulary
 * without whole subtrees (every token) and PCRE2's viable-prefix test (every token whose text
 * after the prefix is complete UTF-8); patterns where subtrees must be taken whole are required
 * to have taken some. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#define GRAMMAR_TESTLIB_SEED 0x9e3779b97f4a7c15ull
#include "grammar_testlib.h"

/* Whether s[0..n) is complete well-formed UTF-8 (what PCRE2 can judge). */
static bool utf8_complete(const char *s, size_t n)
{
    int st = 0;
    for (size_t i = 0; i < n; i++)
        if ((st = u8_next(st, (uint8_t)s[i])) < 0) return false;
    return st == 0;
}

static const char *pieces[] = {
    "a", "b", "e", "x", "z", "A", "Q", "0", "7", ".", "@", " ", "\t", "\"", "\\", "-", "_", "/",
    ":", "n", "\xc3\xa9", "\xc3", "\xe4\xb8\xad", "\xe4\xb8", "\xe0\xa4\x85", "\xed\x9f\xbf",
    "\xee\x80\x80", "\xf0\x9f\x98\x80", "\xf0\x9f", "\xf4\x8f\xbf\xbf", "\xf3\xa0\x80\x81",
    "\x80", "\xbf", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "\x01", "\x7f",
};

#define NTOK 3000

/* ours, PCRE2's, whether whole subtrees must be taken */
static const struct {
    const char *rx, *pcre;
    int whole;
} pats[] = {
    /* a JSON string */
    {"\"(?:[^\"\\\\\\x00-\\x1F]|\\\\[\"\\\\/bfnrt])*\"", "\"(?:[^\"\\\\\\x00-\\x1F]|\\\\[\"\\\\/bfnrt])*\"", 1},
    /* an e-mail-like pattern's progress */
    {"\"[^\\s@\"]+@[^\\s@\"]+\\.[^\\s@\"]+\"", "\"[^\\s@\"]+@[^\\s@\"]+\\.[^\\s@\"]+\"", 1},
    /* counted: between the bounds far from max, and far below min */
    {"\"[^\"\\\\]{0,300}\"", "\"[^\"\\\\]{0,300}\"", 1},
    {"\"[^\"\\\\]{120,}\"", "\"[^\"\\\\]{120,}\"", 1},
    /* a length region far from its bounds */
    {"\"(?L0,400:(?:[^\"\\\\](?T))*)\"", "\"[^\"\\\\]{0,400}\"", 1},
    /* look-alikes: accepting inside (no quotes), a count near its bounds, a byte that differs
     * deep inside (the digit 7 ends the free part), an unanchored literal */
    {"[^\"@]+", "[^\"@]+", 0},
    {"\"[^\"]{3,9}\"", "\"[^\"]{3,9}\"", 0},
    {"\"[^\"7]*7[a-z]*\"", "\"[^\"7]*7[a-z]*\"", 0},
    {"\"[^\"]*ab[^\"]*\"", "\"[^\"]*ab[^\"]*\"", 0},
};

/* The generated vocabulary: every piece alone, then random concatenations of 2-5 pieces (mostly
 * letters and characters, so deep subtrees are free text); tp[0] is the end of sequence. */
static int make_vocab(const char **tp, uint32_t *tl, bool *sp)
{
    int np = sizeof pieces / sizeof pieces[0];
    static char store[NTOK][32];
    int n = 1;
    tp[0] = "<eos>";
    tl[0] = 5;
    for (int i = 0; i < np && n < NTOK; i++) { /* every piece alone */
        snprintf(store[n], sizeof store[n], "%s", pieces[i]);
        tp[n] = store[n];
        tl[n] = (uint32_t)strlen(store[n]);
        n++;
    }
    while (n < NTOK) {
        size_t l = 0;
        int k = 2 + (int)(rnd() % 4);
        for (int j = 0; j < k; j++) {
            /* mostly letters and characters, so deep subtrees are free text */
            const char *p = pieces[rnd() % 3 ? rnd() % 5 + (rnd() % 2 ? 0 : 20) : rnd() % (uint32_t)np];
            size_t pl = strlen(p);
            if (l + pl >= sizeof store[n]) break;
            memcpy(store[n] + l, p, pl);
            l += pl;
        }
        store[n][l] = 0;
        tp[n] = store[n];
        tl[n] = (uint32_t)l;
        n++;
    }
    sp[0] = true;
    return n;
}

/* Four random token walks of 24 steps under g and g0 (the same pattern on two vocabulary
 * indexes): at every step the two masks are equal, and each equals PCRE2's viable-prefix test on
 * every token whose text after the prefix is complete UTF-8. */
static void walk_pair(struct grammar *g, struct grammar *g0, pcre2_code *re, const char *rx,
                      const char *const *tp, const uint32_t *tl, int n, uint32_t *mask,
                      uint32_t *mask0, int *allowed)
{
    struct err e = {0};
    for (int walk = 0; walk < 4; walk++) {
        struct matcher *m = matcher_new(g, &e), *m0 = matcher_new(g0, &e);
        cr_assert(m && m0);
        char prefix[600] = "";
        size_t pl = 0;
        for (int step = 0; step < 24; step++) {
            matcher_mask(m, mask);
            matcher_mask(m0, mask0);
            int na = 0;
            for (int t = 0; t < n; t++) {
                bool in = mask[t >> 5] >> (t & 31) & 1, in0 = mask0[t >> 5] >> (t & 31) & 1;
                cr_assert_eq(in, in0, "/%s/ after \"%s\": token %d \"%s\" %d, without whole subtrees %d",
                             rx, prefix, t, tp[t], in, in0);
                char s[700];
                memcpy(s, prefix, pl);
                if (t) memcpy(s + pl, tp[t], tl[t]);
                size_t sl = pl + (t ? tl[t] : 0);
                if (utf8_complete(s, sl)) {
                    int st = pcre_status(re, s, sl);
                    bool ref = t == 0 ? st == 1 : st != 0;
                    cr_assert_eq(in, ref, "/%s/ after \"%s\": token %d \"%s\" mask %d, pcre2 %d",
                                 rx, prefix, t, tp[t], in, ref);
                }
                if (in && t) allowed[na++] = t;
            }
            if (!na) break;
            /* a complete-UTF-8 step when there is one, so PCRE2 keeps judging */
            int t = allowed[rnd() % (uint32_t)na];
            for (int k = 0; k < 8; k++) {
                char s[700];
                memcpy(s, prefix, pl);
                memcpy(s + pl, tp[t], tl[t]);
                if (utf8_complete(s, pl + tl[t]) && tp[t][tl[t] - 1] != '"') break;
                t = allowed[rnd() % (uint32_t)na];
            }
            if (pl + tl[t] >= 500) break;
            cr_assert_eq(matcher_consume(m, t), 0);
            cr_assert_eq(matcher_consume(m0, t), 0);
            memcpy(prefix + pl, tp[t], tl[t]);
            pl += tl[t];
            prefix[pl] = 0;
        }
        matcher_free(m);
        matcher_free(m0);
    }
}

Test(grammar_mask_whole, masks_vs_pcre2_and_without, .timeout = 120)
{
    const char *tp[NTOK];
    uint32_t tl[NTOK];
    bool sp[NTOK] = {true};
    int n = make_vocab(tp, tl, sp);
    struct grammar_vocab gv = {n, tp, tl, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    struct grammar_vocab_index *vi0 = grammar_vocab_index_new(&gv, &e); /* no whole subtrees */
    cr_assert(vi0, "%s", e.msg);
    vi0->no_whole = true;
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *mask = malloc(words * 4), *mask0 = malloc(words * 4);
    int *allowed = malloc((size_t)n * sizeof *allowed);
    cr_assert(mask && mask0 && allowed);
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        pcre2_code *re = pcre_full(pats[p].pcre);
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g, "%s: %s", pats[p].rx, e.msg);
        struct grammar *g0 = grammar_compile(vi0, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g0, "%s: %s", pats[p].rx, e.msg);
        walk_pair(g, g0, re, pats[p].rx, tp, tl, n, mask, mask0, allowed);
        struct grammar_stats gs, gs0;
        grammar_stats(g, &gs);
        grammar_stats(g0, &gs0);
        cr_log_info("/%s/: whole subtrees %llu (%llu nodes below)", pats[p].rx,
                    (unsigned long long)gs.whole_taken, (unsigned long long)gs.trie_skipped);
        if (pats[p].whole) cr_assert(gs.whole_taken > 0, "/%s/: no subtree taken whole", pats[p].rx);
        cr_assert_eq(gs0.whole_taken, 0);
        grammar_free(g);
        grammar_free(g0);
        pcre2_code_free(re);
    }
    free(mask);
    free(mask0);
    free(allowed);
    grammar_vocab_index_free(vi);
    grammar_vocab_index_free(vi0);
}

/* Sub-walk keys copied between siblings (mask.c struct subkeys, docs/grammar.md "Masks"): when
 * a new lexer state's mask is composed from per-first-byte subtree walks, the canonical form of
 * each successor state is computed once and copied for the other first bytes leading to it. On
 * the same generated vocabulary, masks of free-text patterns along random token walks equal
 * PCRE2's viable-prefix test and the masks without whole subtrees, each pattern on vocabulary
 * indexes of its own (first sight of every state), and keys must have been copied (subkey_hits;
 * 0 without the memo). */
static const struct {
    const char *rx, *pcre;
} key_pats[] = {
    {"\"(?:[^\"\\\\\\x00-\\x1F]|\\\\[\"\\\\/bfnrt])*\"", "\"(?:[^\"\\\\\\x00-\\x1F]|\\\\[\"\\\\/bfnrt])*\""},
    {"\"(?:.+/)?.+:.+\"", "\"(?:.+/)?.+:.+\""},
    {"\"[^\\s@\"]+@[^\\s@\"]+\\.[^\\s@\"]+\"", "\"[^\\s@\"]+@[^\\s@\"]+\\.[^\\s@\"]+\""},
    {"\"[^\"]{3,40}\"", "\"[^\"]{3,40}\""},
};

Test(grammar_subkeys, masks_vs_pcre2_keys_copied, .timeout = 120)
{
    const char *tp[NTOK];
    uint32_t tl[NTOK];
    bool sp[NTOK] = {true};
    int n = make_vocab(tp, tl, sp);
    struct grammar_vocab gv = {n, tp, tl, sp, 0};
    struct err e = {0};
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *mask = malloc(words * 4), *mask0 = malloc(words * 4);
    int *allowed = malloc((size_t)n * sizeof *allowed);
    cr_assert(mask && mask0 && allowed);
    for (size_t p = 0; p < sizeof key_pats / sizeof key_pats[0]; p++) {
        /* indexes of its own: no walk of an earlier pattern is found */
        struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
        cr_assert(vi, "%s", e.msg);
        struct grammar_vocab_index *vi0 = grammar_vocab_index_new(&gv, &e); /* no whole subtrees */
        cr_assert(vi0, "%s", e.msg);
        vi0->no_whole = true;
        const char *rx = key_pats[p].rx;
        pcre2_code *re = pcre_full(key_pats[p].pcre);
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, rx, strlen(rx), &e);
        cr_assert(g, "%s: %s", rx, e.msg);
        struct grammar *g0 = grammar_compile(vi0, GRAMMAR_REGEX, rx, strlen(rx), &e);
        cr_assert(g0, "%s: %s", rx, e.msg);
        walk_pair(g, g0, re, rx, tp, tl, n, mask, mask0, allowed);
        cr_log_info("/%s/: sub-walk keys copied %llu, %llu", rx, (unsigned long long)g->subkey_hits,
                    (unsigned long long)g0->subkey_hits);
        cr_assert(g->subkey_hits > 0, "/%s/: no sub-walk key copied", rx);
        cr_assert(g0->subkey_hits > 0, "/%s/: no sub-walk key copied", rx);
        grammar_free(g);
        grammar_free(g0);
        pcre2_code_free(re);
        grammar_vocab_index_free(vi);
        grammar_vocab_index_free(vi0);
    }
    free(mask);
    free(mask0);
    free(allowed);
}
