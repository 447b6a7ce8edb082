/* Interval walks (mask.c, docs/grammar.md "Counts out of the lexer state"): below a loop's min
 * with its max within a token's length (minLength = maxLength, ids of a fixed length, a
 * fixed-length pattern in a length region), one relaxed walk records for every token the
 * interval of counts where it is allowed, and serves the mask at every count. Masks of
 * `start: /R/` along random token walks (mostly one character at a time, so every count is met)
 * against PCRE2's viable-prefix test and against the same grammar with interval walks off;
 * patterns where the walk applies must have served masks from it, and look-alikes where it must
 * give up (threads merged at different counts, a union of counts that is not one interval) are
 * checked for exactness only. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#include "grammar_testlib.h"

/* ours, PCRE2's, whether interval walks must serve masks */
static const struct {
    const char *rx, *pcre;
    int serves;
} pats[] = {
    /* minLength = maxLength: a counted loop and a length region */
    {"\"[a-cé]{36}\"x?", "\"[a-cé]{36}\"x?", 1},
    {"\"(?L30,30:(?:(?:[a-c@]|é)(?T))*)\"x?", "\"(?:[a-c@]|é){30}\"x?", 1},
    /* max a few counts above min */
    {"\"[a-c]{40,44}\"", "\"[a-c]{40,44}\"", 1},
    {"\"(?L33,35:(?:(?:[abc]|é)(?T))*)\"c?", "\"(?:[abc]|é){33,35}\"c?", 1},
    /* a pattern in a fixed-length region: body threads with their own fewest / most ticks */
    {"\"(?L34,34:(?:[ab](?T))+@(?T)(?:[a-c](?T))+)\"", NULL, 1},
    /* look-alikes: after the exit an unbounded loop meets exits of other counts (threads
     * merged at different counters), and a loop whose exit leads straight on */
    {"(?L30,33:(?:[ab](?T))+)[ab]*c", "[ab]{30,33}[ab]*c", 0},
    {"\"(?L30,31:(?:(?:ab|c)(?T))*)\"", "\"(?:ab|c){30,31}\"", 0},
    /* exits at several counts into [ab]{0,3} merge (RX_MERGE_BIT): the walk must give up (seen
     * failing with the bit ignored: "bb\"" rejected after 18 characters) */
    {"\"(?L20,25:(?:[a-c](?T))*)[ab]{0,3}\"", "\"[a-c]{20,25}[ab]{0,3}\"", 0},
};

Test(grammar_mask_iv, masks_vs_pcre2_and_without)
{
    static const char *toks[] = {"<eos>", "a", "b", "c", "x", "@", "\"", "é", "ab", "abc", "aaaa",
                                 "ba@c", "cccccccc", "bbbbbbbbbbbbbbbb", "a\"", "bb\"", "\"x",
                                 "c\"x", "aé", "ééé", "abcabcabc\"", "aaaaaaaaaaaaaaa\"x", "@c",
                                 "abab", "c\"c", "b@", "ab@cc\""};
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
    struct grammar_vocab_index *vi0 = grammar_vocab_index_new(&gv, &e); /* interval walks off */
    cr_assert(vi0, "%s", e.msg);
    vi0->no_iv = true;
    /* [ab]{k}@[a-c]{34-1-k}, spelled out for PCRE2 (its lookahead would spoil partial matches) */
    char fixed[4096];
    size_t fl = 0;
    for (int k = 1; k <= 32; k++)
        fl += (size_t)snprintf(fixed + fl, sizeof fixed - fl, "%s[ab]{%d}@[a-c]{%d}",
                               k > 1 ? "|" : "\"(?:", k, 33 - k);
    snprintf(fixed + fl, sizeof fixed - fl, ")\"");
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        const char *pp = pats[p].pcre ? pats[p].pcre : fixed;
        pcre2_code *re = pcre_full(pp);
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g, "%s: %s", pats[p].rx, e.msg);
        struct grammar *g0 = grammar_compile(vi0, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g0, "%s: %s", pats[p].rx, e.msg);
        for (int walk = 0; walk < 40; walk++) {
            struct matcher *m = matcher_new(g, &e), *m0 = matcher_new(g0, &e);
            cr_assert(m && m0);
            char prefix[1200] = "";
            size_t pl = 0;
            for (int step = 0; step < 120; step++) {
                uint32_t mask[1], mask0[1];
                matcher_mask(m, mask);
                matcher_mask(m0, mask0);
                int allowed[32], na = 0;
                for (int t = 0; t < n; t++) {
                    bool in = mask[0] >> t & 1, in0 = mask0[0] >> t & 1;
                    bool ref;
                    if (t == 0) {
                        ref = pcre_status(re, prefix, pl) == 1;
                    } else {
                        char s[1300];
                        memcpy(s, prefix, pl);
                        memcpy(s + pl, toks[t], tl[t]);
                        ref = pcre_status(re, s, pl + tl[t]) != 0;
                    }
                    cr_assert_eq(in, ref, "/%s/ after \"%s\" (%zu bytes): token \"%s\" mask %d, pcre2 %d",
                                 pats[p].rx, prefix, pl, toks[t], in, ref);
                    cr_assert_eq(in, in0, "/%s/ after \"%s\": token \"%s\" %d, without interval walks %d",
                                 pats[p].rx, prefix, toks[t], in, in0);
                    if (in && t) allowed[na++] = t;
                }
                if (!na) break;
                /* mostly one character at a time (every count is met), sometimes more */
                int t = allowed[rnd() % (uint32_t)na];
                if (rnd() % 4 && pl > 0)
                    for (int k = 0; k < na; k++)
                        if (tl[allowed[k]] == 1 && toks[allowed[k]][0] != '"' && rnd() % 2)
                            t = allowed[k];
                cr_assert_eq(matcher_consume(m, t), 0);
                cr_assert_eq(matcher_consume(m0, t), 0);
                memcpy(prefix + pl, toks[t], tl[t]);
                pl += tl[t];
                prefix[pl] = 0;
                if (pl > 1000) break;
            }
            matcher_free(m);
            matcher_free(m0);
        }
        struct grammar_stats gs, gs0;
        grammar_stats(g, &gs);
        grammar_stats(g0, &gs0);
        cr_log_info("/%s/: interval masks %llu (walks %llu)", pats[p].rx,
                    (unsigned long long)gs.iv_served, (unsigned long long)gs.iv_walks);
        if (pats[p].serves)
            cr_assert(gs.iv_served > 0, "/%s/: no mask from an interval walk", pats[p].rx);
        cr_assert_eq(gs0.iv_served, 0);
        grammar_free(g);
        grammar_free(g0);
        pcre2_code_free(re);
    }
    grammar_vocab_index_free(vi);
    grammar_vocab_index_free(vi0);
}
