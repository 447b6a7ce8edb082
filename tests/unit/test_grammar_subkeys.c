/* Sub-walk keys copied between siblings (mask.c struct subkeys, docs/grammar.md "Masks"): when
 * a new lexer state's mask is composed from per-first-byte subtree walks, the canonical form of
 * each successor state is computed once and copied for the other first bytes leading to it.
 * On a generated vocabulary (the pieces of grammar_mask_whole), masks of free-text patterns
 * along random token walks equal PCRE2's viable-prefix test (every token whose text after the
 * prefix is complete UTF-8), each pattern on a vocabulary index of its own (first sight of
 * every state), and keys must have been copied (subkey_hits; 0 without the memo). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#define GRAMMAR_TESTLIB_SEED 0x5851f42d4c957f2dull
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

/* ours, PCRE2's */
static const struct {
    const char *rx, *pcre;
} pats[] = {
    {"\"(?:[^\"\\\\\\x00-\\x1F]|\\\\[\"\\\\/bfnrt])*\"", "\"(?:[^\"\\\\\\x00-\\x1F]|\\\\[\"\\\\/bfnrt])*\""},
    {"\"(?:.+/)?.+:.+\"", "\"(?:.+/)?.+:.+\""},
    {"\"[^\\s@\"]+@[^\\s@\"]+\\.[^\\s@\"]+\"", "\"[^\\s@\"]+@[^\\s@\"]+\\.[^\\s@\"]+\""},
    {"\"[^\"]{3,40}\"", "\"[^\"]{3,40}\""},
};

Test(grammar_subkeys, masks_vs_pcre2_keys_copied, .timeout = 120)
{
    int np = sizeof pieces / sizeof pieces[0];
    static char store[NTOK][32];
    const char *tp[NTOK];
    uint32_t tl[NTOK];
    bool sp[NTOK] = {true};
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
    struct grammar_vocab gv = {n, tp, tl, sp, 0};
    struct err e = {0};
    size_t words = ((size_t)n + 31) / 32;
    uint32_t *mask = malloc(words * 4), *mask0 = malloc(words * 4);
    int *allowed = malloc((size_t)n * sizeof *allowed);
    cr_assert(mask && mask0 && allowed);
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        /* an index of its own: no walk of an earlier pattern is found */
        struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
        cr_assert(vi, "%s", e.msg);
        struct grammar_vocab_index *vi0 = grammar_vocab_index_new(&gv, &e); /* no whole subtrees */
        cr_assert(vi0, "%s", e.msg);
        vi0->no_whole = true;
        pcre2_code *re = pcre_full(pats[p].pcre);
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g, "%s: %s", pats[p].rx, e.msg);
        struct grammar *g0 = grammar_compile(vi0, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g0, "%s: %s", pats[p].rx, e.msg);
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
                                 pats[p].rx, prefix, t, tp[t], in, in0);
                    char s[700];
                    memcpy(s, prefix, pl);
                    if (t) memcpy(s + pl, tp[t], tl[t]);
                    size_t sl = pl + (t ? tl[t] : 0);
                    if (utf8_complete(s, sl)) {
                        int st = pcre_status(re, s, sl);
                        bool ref = t == 0 ? st == 1 : st != 0;
                        cr_assert_eq(in, ref, "/%s/ after \"%s\": token %d \"%s\" mask %d, pcre2 %d",
                                     pats[p].rx, prefix, t, tp[t], in, ref);
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
        cr_log_info("/%s/: sub-walk keys copied %llu, %llu", pats[p].rx,
                    (unsigned long long)g->subkey_hits, (unsigned long long)g0->subkey_hits);
        cr_assert(g->subkey_hits > 0, "/%s/: no sub-walk key copied", pats[p].rx);
        cr_assert(g0->subkey_hits > 0, "/%s/: no sub-walk key copied", pats[p].rx);
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
