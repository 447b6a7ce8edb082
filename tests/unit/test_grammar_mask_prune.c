/* Dominated threads (regex_prune.c, docs/grammar.md "Dominated threads"): a lexer state drops the
 * threads whose continuations another thread covers. Checked three ways on patterns that exercise
 * both rules (an unanchored pattern's post-match loop; counts of a loop whose body its
 * continuation absorbs) and on look-alikes where a rule must not apply: whole matches of the
 * pruned DFA against the unpruned one and PCRE2, masks of the pruned grammar against PCRE2's
 * viable-prefix test along random token walks, and which patterns prune at all. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#include "grammar/regex.h"
#include "rx_testlib.h"
#define GRAMMAR_TESTLIB_SEED 0x9e3779b97f4a7c15ull
#include "grammar_testlib.h"

/* A DFA over one pattern, pruning on or off. */
static void one_set(struct one *o, const char *pat, bool prune)
{
    one_init(o, pat);
    o->d.no_prune = !prune;
    o->d.prune_rules = RX_PRUNE_UNIVERSAL | RX_PRUNE_COUNTS; /* both rules on every transition */
}

/* 1 accepted, 0 rejected */
static int one_run(struct one *o, const char *s, size_t n)
{
    uint32_t q = rx_dfa_start(&o->d, &o->start, 1);
    for (size_t i = 0; i < n && q != RX_DEAD; i++)
        q = rx_dfa_next(&o->d, q, (uint8_t)s[i]);
    cr_assert(!o->d.failed);
    return n > 0 && rx_dfa_accepting(&o->d, q);
}

/* ours, PCRE2 syntax, whether pruning must happen (1), must not (0) */
static const struct {
    const char *rx, *pcre;
    int prunes;
} pats[] = {
    /* rule 1: the post-match loop covers the prefix loop and the partial matches */
    {"\"(?:[^\"\\\\]|\\\\.)*wifi(?:[^\"\\\\]|\\\\.)*\"", "\"(?:[^\"\\\\]|\\\\.)*wifi(?:[^\"\\\\]|\\\\.)*\"", 1},
    {"[^@]+@[^@]+", "[^@]+@[^@]+", 0}, /* no thread covers another: nothing to drop */
    {".+@.+", ".+@.+", 1},
    {"(?:a|b|é)*abb(?:a|b|é)*c", "(?:a|b|é)*abb(?:a|b|é)*c", 1},
    /* rule 2: the continuation absorbs the body (B·X ⊆ X) */
    {".*[a-cé]{40}.*", ".*[a-cé]{40}.*", 1},
    {"[a-c]*(?:ab|c){35,50}[a-c]*d", "[a-c]*(?:ab|c){35,50}[a-c]*d", 1},
    /* look-alikes: the continuation does not absorb the body (a count matters), or the
     * covering thread has a shorter future */
    {".*[a-c]{40}d", ".*[a-c]{40}d", 0},
    {".*[a-c]{36,40}(?:ab)?", ".*[a-c]{36,40}(?:ab)?", 0},
    {"[a-c]*x[a-c]*|[a-c]*xa", "[a-c]*x[a-c]*|[a-c]*xa", 1},
    {"[a-c]*x[a-c]*y|[a-c]*xay", "[a-c]*x[a-c]*y|[a-c]*xay", 1},
    {"(?:[a-c]*x[a-c]*)?y|[a-c]*xaz", "(?:[a-c]*x[a-c]*)?y|[a-c]*xaz", 0},
};

static size_t random_subject(char *s, size_t cap, int p)
{
    static const char *pieces[] = {"a", "b", "c", "x", "y", "d", "@", "\"", "\\", "é", "ab",
                                   "wifi", "abb", "wi", "fi", "z", "\\\"", "aa"};
    size_t n = 0;
    int len = (int)(rnd() % (p >= 4 && p <= 7 ? 120 : 24));
    if (pats[p].rx[0] == '"') s[n++] = '"';
    for (int i = 0; i < len; i++) {
        const char *pc = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
        if (p >= 4 && p <= 7 && rnd() % 4) pc = (const char *[]){"a", "b", "c", "ab"}[rnd() % 4];
        size_t l = strlen(pc);
        if (n + l + 2 >= cap) break;
        memcpy(s + n, pc, l);
        n += l;
    }
    if (pats[p].rx[0] == '"' && rnd() % 2) s[n++] = '"';
    if (rnd() % 3 == 0) s[n++] = "dcyz"[rnd() % 4];
    s[n] = 0;
    return n;
}

/* Whole matches: pruned DFA = unpruned DFA = PCRE2, one DFA per pattern over many subjects (so
 * transitions cached by earlier subjects, shifted ones included, serve later ones). */
Test(grammar_prune, dfa_equals_unpruned_and_pcre2)
{
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        pcre2_code *re = pcre_full(pats[p].pcre);
        struct one on, off;
        one_set(&on, pats[p].rx, true);
        one_set(&off, pats[p].rx, false);
        for (int k = 0; k < 1500; k++) {
            char s[400];
            size_t n = random_subject(s, sizeof s, (int)p);
            int a = one_run(&on, s, n), b = one_run(&off, s, n);
            int ref = pcre_status(re, s, n) == 1;
            cr_assert_eq(a, b, "/%s/ on \"%s\": pruned %d, unpruned %d", pats[p].rx, s, a, b);
            cr_assert_eq(a, ref, "/%s/ on \"%s\": ours %d, pcre2 %d", pats[p].rx, s, a, ref);
        }
        if (pats[p].prunes)
            cr_assert(on.d.pruned > 0, "/%s/: nothing pruned", pats[p].rx);
        else
            cr_assert_eq(on.d.pruned, 0, "/%s/: %llu threads pruned where no rule applies",
                         pats[p].rx, (unsigned long long)on.d.pruned);
        cr_assert_eq(off.d.pruned, 0);
        one_deinit(&on);
        one_deinit(&off);
        pcre2_code_free(re);
    }
}

/* Masks of `start: /R/` with pruning on, against PCRE2's viable-prefix test for every token,
 * along random walks biased to long tokens (they reach the counts where rule 2 applies). */
Test(grammar_prune, masks_vs_pcre2)
{
    static const char *toks[] = {"<eos>", "a", "b", "c", "d", "x", "y", "z", "@", "\"", "\\",
                                 "é", "ab", "abb", "wifi", "wi", "fi", "w", "ifi\"", "aaaa",
                                 "abcabcab", "cccccccccccc", "\\\"", "a@b", "\"wi", "xa",
                                 "bbbbbbbbbbbbbbbbbbbb", "aé", "ééé", "fi\"", "cd", "ay"};
    int n = sizeof toks / sizeof toks[0];
    const char *tp[64];
    uint32_t tl[64];
    bool sp[64] = {true};
    for (int i = 0; i < n; i++) {
        tp[i] = toks[i];
        tl[i] = (uint32_t)strlen(toks[i]);
    }
    struct grammar_vocab gv = {n, tp, tl, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        pcre2_code *re = pcre_full(pats[p].pcre);
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g, "%s: %s", pats[p].rx, e.msg);
        for (int walk = 0; walk < 30; walk++) {
            struct matcher *m = matcher_new(g, &e);
            cr_assert(m);
            char prefix[1400] = "";
            size_t pl = 0;
            for (int step = 0; step < 60; step++) {
                uint32_t mask[2];
                matcher_mask(m, mask);
                int allowed[64], na = 0, longest = -1;
                for (int t = 0; t < n; t++) {
                    bool in = mask[t >> 5] >> (t & 31) & 1;
                    bool ref;
                    if (t == 0) {
                        ref = pcre_status(re, prefix, pl) == 1;
                    } else {
                        char s[1500];
                        memcpy(s, prefix, pl);
                        memcpy(s + pl, toks[t], tl[t]);
                        ref = pcre_status(re, s, pl + tl[t]) != 0;
                    }
                    cr_assert_eq(in, ref, "/%s/ after \"%s\": token \"%s\" mask %d, pcre2 %d",
                                 pats[p].rx, prefix, toks[t], in, ref);
                    if (in && t) {
                        allowed[na++] = t;
                        if (longest < 0 || tl[t] > tl[longest]) longest = t;
                    }
                }
                if (!na) break;
                int t = rnd() % 3 ? longest : allowed[rnd() % (uint32_t)na];
                cr_assert_eq(matcher_consume(m, t), 0);
                memcpy(prefix + pl, toks[t], tl[t]);
                pl += tl[t];
                prefix[pl] = 0;
                if (pl > 1200) break;
            }
            matcher_free(m);
        }
        if (pats[p].prunes)
            cr_assert(g->dfa.pruned > 0, "/%s/: the grammar's lexer pruned nothing", pats[p].rx);
        grammar_free(g);
        pcre2_code_free(re);
    }
    grammar_vocab_index_free(vi);
}

/* Walks shared across loop bounds (mask.c inner_key): a thread between its loop's bounds and far
 * from both, or below min with max out of reach (keyed by its distance to min), keys its walk
 * without its own loop's bounds, so grammars whose strings differ only in minLength / maxLength
 * share walks through the vocabulary's cache. Grammars on one vocabulary, walked in turn, each
 * mask against PCRE2's viable-prefix test; the later grammars must reuse walks (fewer trie
 * steps than the first one took at the same depth). */
Test(grammar_prune, walks_shared_across_bounds_vs_pcre2)
{
    static const char *rx[][2] = {
        {"\"[a-cé]{40,300}\"x?", "\"[a-cé]{40,300}\"x?"},
        {"\"[a-cé]{37,900}\"x?", "\"[a-cé]{37,900}\"x?"},
        {"\"[a-cé]{43,}\"x?", "\"[a-cé]{43,}\"x?"},
        {"\"(?L41,500:(?:(?:[a-c]|é)(?T))*)\"x?", "\"(?:[a-c]|é){41,500}\"x?"},
        {"\"(?L38,600:(?:(?:[a-c]|é)(?T))*)\"x?", "\"(?:[a-c]|é){38,600}\"x?"},
        /* look-alikes: max within a token of min, so the count itself stays in the key */
        {"\"[a-cé]{40,48}\"x?", "\"[a-cé]{40,48}\"x?"},
        {"\"(?L40,46:(?:(?:[a-c]|é)(?T))*)\"x?", "\"(?:[a-c]|é){40,46}\"x?"},
    };
    static const char *toks[] = {"<eos>", "a", "b", "c", "x", "\"", "é", "ab", "abc", "aaaa",
                                 "cccccccc", "bbbbbbbbbbbbbbbb", "a\"", "bb\"", "\"x", "c\"x",
                                 "aé", "ééé", "abcabcabc\"", "aaaaaaaaaaaaaaa\"x"};
    int n = sizeof toks / sizeof toks[0];
    const char *tp[32];
    uint32_t tl[32];
    bool sp[32] = {true};
    for (int i = 0; i < n; i++) {
        tp[i] = toks[i];
        tl[i] = (uint32_t)strlen(toks[i]);
    }
    struct grammar_vocab gv = {n, tp, tl, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    uint64_t trie_first = 0, trie_later = 0;
    for (int round = 0; round < 2; round++)
        for (size_t p = 0; p < sizeof rx / sizeof rx[0]; p++) {
            pcre2_code *re = pcre_full(rx[p][1]);
            struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, rx[p][0], strlen(rx[p][0]), &e);
            cr_assert(g, "%s: %s", rx[p][0], e.msg);
            for (int walk = 0; walk < 12; walk++) {
                struct matcher *m = matcher_new(g, &e);
                cr_assert(m);
                char prefix[2000] = "";
                size_t pl = 0;
                for (int step = 0; step < 120; step++) {
                    uint32_t mask[1];
                    matcher_mask(m, mask);
                    if (walk == 0) *(round == 0 && p == 0 ? &trie_first : &trie_later) +=
                                       matcher_last_trie_steps(m);
                    int allowed[32], na = 0;
                    for (int t = 0; t < n; t++) {
                        bool in = mask[0] >> t & 1;
                        bool ref;
                        if (t == 0) {
                            ref = pcre_status(re, prefix, pl) == 1;
                        } else {
                            char s[2100];
                            memcpy(s, prefix, pl);
                            memcpy(s + pl, toks[t], tl[t]);
                            ref = pcre_status(re, s, pl + tl[t]) != 0;
                        }
                        cr_assert_eq(in, ref, "/%s/ after \"%s\" (%zu bytes): token \"%s\" mask %d, pcre2 %d",
                                     rx[p][0], prefix, pl, toks[t], in, ref);
                        if (in && t) allowed[na++] = t;
                    }
                    if (!na) break;
                    /* mostly one character at a time (every count is met), sometimes more */
                    int t = allowed[rnd() % (uint32_t)na];
                    if (rnd() % 4 && pl > 0) {
                        for (int k = 0; k < na; k++)
                            if (tl[allowed[k]] == 1 && toks[allowed[k]][0] != '"') t = allowed[k];
                    }
                    cr_assert_eq(matcher_consume(m, t), 0);
                    memcpy(prefix + pl, toks[t], tl[t]);
                    pl += tl[t];
                    prefix[pl] = 0;
                    if (pl > 1800) break;
                }
                matcher_free(m);
            }
            grammar_free(g);
            pcre2_code_free(re);
        }
    cr_log_info("trie steps: first grammar %llu, the others (13) %llu",
                (unsigned long long)trie_first, (unsigned long long)trie_later);
    cr_assert(trie_later < trie_first * 13, "no walk shared: first %llu, later %llu",
              (unsigned long long)trie_first, (unsigned long long)trie_later);
    grammar_vocab_index_free(vi);
}
