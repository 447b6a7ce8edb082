/* Structural hashes of NFA states (fhash.c, docs/grammar.md "Structural hashes"): the thread part
 * of the inner-walk caches' keys, computed per strongly connected component with the hashes of
 * the states a component leads to. Checked two ways: the work of hashing a long chain of loops
 * (a state-eliminated pattern's shape) is linear in the chain, where a walk of everything
 * reachable from each thread was quadratic; and masks of grammars whose states look alike
 * inside a loop but differ after it (so a hash that lost what follows a component would share
 * their walks) against PCRE2's viable-prefix test, in one grammar and across grammars on one
 * vocabulary (the shared cache); and a component of thousands of states, whose states hash by
 * identity (grammar, state): linear work, and two such grammars on one vocabulary, alike but for
 * the letter that ends each word, keep their own walks. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#define GRAMMAR_TESTLIB_SEED 0x6a09e667f3bcc909ull
#include "grammar_testlib.h"

static const char *toks[] = {"<eos>", "a",    "b", "c",  "d",  "e",  "x",  "y",    "\"", "bc", "bx",
                             "x\"",   "cy\"", "é", "bé", "ax", "ey", "dd", "\"\"", "xa", "ab"};
#define NT ((int)(sizeof toks / sizeof toks[0]))

static struct grammar_vocab_index *vocab(void)
{
    static const char *tp[NT];
    static uint32_t tl[NT];
    static bool sp[NT] = {true};
    for (int i = 0; i < NT; i++) {
        tp[i] = toks[i];
        tl[i] = (uint32_t)strlen(toks[i]);
    }
    struct grammar_vocab gv = {NT, tp, tl, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    return vi;
}

/* Work of the masks along "\"" then "xa" per segment of x[a-w]* repeated n times. */
static uint64_t chain_work(struct grammar_vocab_index *vi, int n)
{
    size_t cap = (size_t)n * 8 + 8;
    char *rx = malloc(cap);
    cr_assert(rx);
    size_t l = (size_t)snprintf(rx, cap, "\"");
    for (int i = 0; i < n; i++)
        l += (size_t)snprintf(rx + l, cap - l, "x[a-w]*");
    snprintf(rx + l, cap - l, "\"");
    struct err e = {0};
    struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, rx, strlen(rx), &e);
    cr_assert(g, "%s", e.msg);
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m);
    uint64_t work = 0;
    uint32_t mask[1];
    matcher_mask(m, mask);
    work += matcher_last_work(m);
    cr_assert_eq(matcher_consume(m, 8), 0); /* " */
    for (int i = 0; i < n; i++) {
        matcher_mask(m, mask);
        work += matcher_last_work(m);
        cr_assert(mask[0] >> 19 & 1, "segment %d: \"xa\" not allowed", i);
        cr_assert_eq(matcher_consume(m, 19), 0); /* xa */
    }
    matcher_mask(m, mask);
    work += matcher_last_work(m);
    cr_assert(mask[0] >> 8 & 1); /* the closing quote */
    matcher_free(m);
    grammar_free(g);
    free(rx);
    return work;
}

/* Hashing each thread's whole future made a chain of n loops cost ~n^2 steps (400 segments:
 * 0.49 M steps of mask work in all, against 12,409 now); per component it is linear. */
Test(grammar_fhash, chain_of_loops_is_linear)
{
    struct grammar_vocab_index *vi = vocab();
    uint64_t w100 = chain_work(vi, 100), w400 = chain_work(vi, 400);
    cr_log_info("mask work along the chain: 100 segments %llu, 400 segments %llu",
                (unsigned long long)w100, (unsigned long long)w400);
    cr_assert(w400 < 6 * w100, "work grows faster than the chain: %llu for 100, %llu for 400",
              (unsigned long long)w100, (unsigned long long)w400);
    cr_assert(w400 < 120000, "mask work %llu along a chain of 400 loops", (unsigned long long)w400);
    grammar_vocab_index_free(vi);
}

/* ours, PCRE2's: loops alike inside, different after (x or y, a region's ticks, a counted loop
 * re-entered by an outer one) */
static const struct {
    const char *rx, *pcre;
} pats[] = {
    {"\"(?:a[b-d]*x|e[b-d]*y)\"", "\"(?:a[b-d]*x|e[b-d]*y)\""},
    {"\"(?:a[b-d]*x|e[b-d]*y)*\"", "\"(?:a[b-d]*x|e[b-d]*y)*\""},
    {"\"(?:a[b-dé]*x[b-d]*|e[b-dé]*y[b-d]*)\"", "\"(?:a[b-dé]*x[b-d]*|e[b-dé]*y[b-d]*)\""},
    {"\"(?L3,9:a(?T)(?:[b-d](?T))*x(?T)|e(?T)(?:[b-d](?T))*y(?T))\"",
     "\"(?:a[b-d]{1,7}x|e[b-d]{1,7}y)\""},
    {"\"(?L4,12:(?:[a-e](?T))*x(?T)(?:[b-d](?T))*)\"", NULL}, /* PCRE2's: region_pcre */
    {"\"(?:[b-d]{33,40}x)*[b-d]{33,40}y\"", "\"(?:[b-d]{33,40}x)*[b-d]{33,40}y\""},
    {"\"(?:[bcé]*a){2}[bcé]*x\"", "\"(?:[bcé]*a){2}[bcé]*x\""},
    {"\"(?:[bcé]*a){2}[bcé]*y\"", "\"(?:[bcé]*a){2}[bcé]*y\""},
};

static void check_masks(struct grammar *g, pcre2_code *re, const char *rx)
{
    struct err e = {0};
    for (int walk = 0; walk < 40; walk++) {
        struct matcher *m = matcher_new(g, &e);
        cr_assert(m);
        char prefix[600] = "";
        size_t pl = 0;
        for (int step = 0; step < 80; step++) {
            uint32_t mask[1];
            matcher_mask(m, mask);
            int allowed[NT], na = 0;
            for (int t = 0; t < NT; t++) {
                bool in = mask[0] >> t & 1, ref;
                if (t == 0) {
                    ref = pcre_status(re, prefix, pl) == 1;
                } else {
                    char s[700];
                    size_t tl = strlen(toks[t]);
                    memcpy(s, prefix, pl);
                    memcpy(s + pl, toks[t], tl);
                    ref = pcre_status(re, s, pl + tl) != 0;
                }
                cr_assert_eq(in, ref, "/%s/ after \"%s\": token \"%s\" mask %d, pcre2 %d", rx,
                             prefix, toks[t], in, ref);
                if (in && t) allowed[na++] = t;
            }
            if (!na) break;
            int t = allowed[rnd() % (uint32_t)na];
            cr_assert_eq(matcher_consume(m, t), 0);
            size_t tl = strlen(toks[t]);
            memcpy(prefix + pl, toks[t], tl);
            pl += tl;
            prefix[pl] = 0;
            if (pl > 500) break;
        }
        matcher_free(m);
    }
}

/* Every pattern's grammar compiled on one vocabulary index, so walks are shared across them by
 * their keys: a key that left out what follows a loop would hand one grammar the other's. */
Test(grammar_fhash, alike_loops_vs_pcre2, .timeout = 120)
{
    struct grammar_vocab_index *vi = vocab();
    struct err e = {0};
    /* [a-e]{i}x[b-d]{j} with 4 <= i + 1 + j <= 12, spelled out (a lookahead would spoil
     * PCRE2's partial matches) */
    char region_pcre[1024];
    size_t rl = 0;
    for (int i = 0; i <= 11; i++)
        rl +=
            (size_t)snprintf(region_pcre + rl, sizeof region_pcre - rl, "%s[a-e]{%d}x[b-d]{%d,%d}",
                             i ? "|" : "\"(?:", i, i < 3 ? 3 - i : 0, 11 - i);
    snprintf(region_pcre + rl, sizeof region_pcre - rl, ")\"");
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        pcre2_code *re = pcre_full(pats[p].pcre ? pats[p].pcre : region_pcre);
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, pats[p].rx, strlen(pats[p].rx), &e);
        cr_assert(g, "%s: %s", pats[p].rx, e.msg);
        check_masks(g, re, pats[p].rx);
        grammar_free(g);
        pcre2_code_free(re);
    }
    grammar_vocab_index_free(vi);
}

/* "(?:W1|W2|...)*" over the 4-letter words of [a-d] ending in `end`: one loop of ~1,500 NFA
 * states (the cost of hashing each of its states by structure) */
static char *word_loop(char end)
{
    size_t cap = 256 * 8 + 16, l = 0;
    char *rx = malloc(cap);
    cr_assert(rx);
    l += (size_t)snprintf(rx + l, cap - l, "\"(?:");
    for (int w = 0; w < 256; w++)
        l += (size_t)snprintf(rx + l, cap - l, "%s%c%c%c%c%c", w ? "|" : "", 'a' + (w & 3),
                              'a' + (w >> 2 & 3), 'a' + (w >> 4 & 3), 'a' + (w >> 6 & 3), end);
    snprintf(rx + l, cap - l, ")*\"");
    return rx;
}

/* Hashed by structure, each new state of the loop cost the loop: ~1,500 steps per thread and
 * dozens of threads per mask (634,786 steps of mask work along these 61 masks with every state
 * hashed by structure; 34,601 by identity). */
Test(grammar_fhash, big_component_hashed_by_identity)
{
    struct grammar_vocab_index *vi = vocab();
    char *rx = word_loop('x');
    struct err e = {0};
    struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, rx, strlen(rx), &e);
    cr_assert(g, "%s", e.msg);
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m);
    const char *text = "\"abcdxdcbaxaaaaxbbbbxccccxddddxabadxcacbxdbdbxacacxbdbdxcadbx";
    uint64_t work = 0;
    for (size_t i = 0; text[i]; i++) {
        uint32_t mask[1];
        matcher_mask(m, mask);
        work += matcher_last_work(m);
        char one[2] = {text[i], 0};
        int t = -1;
        for (int k = 1; k < NT; k++)
            if (!strcmp(toks[k], one)) t = k;
        cr_assert(t > 0 && (mask[0] >> t & 1), "\"%c\" not allowed at %zu", text[i], i);
        cr_assert_eq(matcher_consume(m, t), 0);
    }
    cr_log_info("mask work along %zu bytes of a 256-word loop: %llu", strlen(text),
                (unsigned long long)work);
    cr_assert(work < 150000, "mask work %llu", (unsigned long long)work);
    matcher_free(m);
    grammar_free(g);
    free(rx);
    grammar_vocab_index_free(vi);
}

Test(grammar_fhash, big_components_of_two_grammars_vs_pcre2, .timeout = 120)
{
    struct grammar_vocab_index *vi = vocab();
    struct err e = {0};
    for (int k = 0; k < 2; k++) { /* x then y: the same NFA state numbers, other futures */
        char *rx = word_loop(k ? 'y' : 'x');
        struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, rx, strlen(rx), &e);
        cr_assert(g, "%s", e.msg);
        pcre2_code *re = pcre_full(rx);
        check_masks(g, re, k ? "word loop y" : "word loop x");
        pcre2_code_free(re);
        /* g stays alive: its walks stay in the shared cache for the next grammar to (not) find */
        if (k)
            grammar_free(g);
        else {
            struct grammar *keep = g;
            char *rx2 = word_loop('y');
            struct grammar *g2 = grammar_compile(vi, GRAMMAR_REGEX, rx2, strlen(rx2), &e);
            cr_assert(g2, "%s", e.msg);
            pcre2_code *re2 = pcre_full(rx2);
            check_masks(g2, re2, "word loop y next to x");
            pcre2_code_free(re2);
            grammar_free(g2);
            free(rx2);
            grammar_free(keep);
        }
        free(rx);
    }
    grammar_vocab_index_free(vi);
}
