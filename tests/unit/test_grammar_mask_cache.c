/* The vocabulary's shared walk cache when it is full (walk_cache.c wcache_add / sweep,
 * docs/grammar.md "Sharing and threads"): it drops its walks and goes on publishing, so a walk
 * done after the cache filled up is still found by the next grammar (it used to stay full for
 * good: every new state a trie walk), and a walk dropped from the cache lives on while a
 * grammar's inner entry still uses it (masks of a grammar compiled before the evictions stay
 * exact, checked against PCRE2's viable-prefix test); a walk found since the last eviction
 * survives the next one (second chance). A small cache (sh_max_bytes) on a small vocabulary
 * makes the evictions happen. Room is made a few walks per publication (a clock over the table):
 * no publication examines more than vi->sh_sweep walks. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mem_testlib.h"
#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#define GRAMMAR_TESTLIB_SEED 0xbb67ae8584caa73bull
#include "grammar_testlib.h"

static const char *toks[] = {"<eos>", "a",   "b",  "c",  "d",  "e", "x",  "@",  "\"", "bc",
                             "bx",    "x\"", "ab", "a@", "cx", "é", "bé", "dd", "@b", "eee"};
#define NT ((int)(sizeof toks / sizeof toks[0]))

static int tok_id(const char *t)
{
    for (int i = 1; i < NT; i++)
        if (!strcmp(toks[i], t)) return i;
    cr_assert_fail("no token %s", t);
    return -1;
}

static struct grammar *compile(struct grammar_vocab_index *vi, const char *rx)
{
    struct err e = {0};
    struct grammar *g = grammar_compile(vi, GRAMMAR_REGEX, rx, strlen(rx), &e);
    cr_assert(g, "%s: %s", rx, e.msg);
    return g;
}

/* Trie nodes visited by the mask after consuming the tokens of path (NULL-terminated). */
static uint64_t trie_after(struct grammar *g, const char *const *path)
{
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m);
    uint32_t mask[1];
    for (int i = 0; path[i]; i++)
        cr_assert_eq(matcher_consume(m, tok_id(path[i])), 0, "consume %s", path[i]);
    matcher_mask(m, mask);
    uint64_t t = matcher_last_trie_steps(m);
    matcher_free(m);
    return t;
}

/* Masks along random token walks against PCRE2's viable-prefix test. */
static void check_masks(struct grammar *g, const char *pcre, int walks)
{
    pcre2_code *re = pcre_full(pcre);
    struct err e = {0};
    for (int w = 0; w < walks; w++) {
        struct matcher *m = matcher_new(g, &e);
        cr_assert(m);
        char prefix[400] = "";
        size_t pl = 0;
        for (int step = 0; step < 40; step++) {
            uint32_t mask[1];
            matcher_mask(m, mask);
            int allowed[NT], na = 0;
            for (int t = 0; t < NT; t++) {
                bool in = mask[0] >> t & 1, ref;
                size_t tl = strlen(toks[t]);
                if (t == 0) {
                    ref = pcre_status(re, prefix, pl) == 1;
                } else {
                    char s[500];
                    memcpy(s, prefix, pl);
                    memcpy(s + pl, toks[t], tl);
                    ref = pcre_status(re, s, pl + tl) != 0;
                }
                cr_assert_eq(in, ref, "/%s/ after \"%s\": token \"%s\" mask %d, pcre2 %d", pcre,
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
            if (pl > 300) break;
        }
        matcher_free(m);
    }
    pcre2_code_free(re);
}

/* An index over toks whose shared walk cache holds 4 KB, so a few walks fill it (the vocabulary
 * arrays are static: the index keeps pointers to them). */
/* An index of the test vocabulary whose shared cache holds `budget` bytes (its table remade at
 * that budget's size, as grammar_vocab_index_new makes it for the default one); 0: the index as
 * grammar_vocab_index_new makes it */
static struct grammar_vocab_index *cache_index(size_t budget)
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
    if (!budget) return vi;
    free(vi->sh);
    vi->sh_max_bytes = budget;
    cr_assert_eq(wcache_table_new(vi), 0);
    return vi;
}

static struct grammar_vocab_index *small_cache_index(void)
{
    return cache_index(4096);
}

Test(grammar_mask_cache, full_cache_drops_its_walks, .timeout = 120)
{
    struct grammar_vocab_index *vi = small_cache_index();

    /* compiled before the evictions, used after them */
    struct grammar *g0 = compile(vi, "[a-e]*@[b-dé]*x");
    check_masks(g0, "[a-e]*@[b-dé]*x", 5);

    /* fill the cache many times over: grammars with futures of their own */
    char rx[256], pc[256];
    for (int i = 1; i <= 60; i++) {
        snprintf(rx, sizeof rx, "(?:[a-e]{%d}@[b-d]{1,%d}x)+", i % 7 + 1, i);
        struct grammar *g = compile(vi, rx);
        check_masks(g, rx, 2);
        grammar_free(g);
    }
    cr_log_info("evictions %llu, cache %zu bytes, %u walks", (unsigned long long)vi->sh_evictions,
                vi->sh_bytes, vi->sh_n);
    cr_assert(vi->sh_evictions > 0, "the cache never filled up: the test proves nothing");

    /* a walk done now is found by the next grammar (not when the cache stays full) */
    int pairs = 0;
    for (int i = 0; i < 8; i++) {
        snprintf(rx, sizeof rx, "[a-e]*@(?:[b-d]|é)*x{%d}", i + 2);
        const char *path[] = {"a", "@", "b", NULL};
        struct grammar *g1 = compile(vi, rx), *g2 = compile(vi, rx);
        uint64_t rv = vi->sh_room_visits;
        uint64_t t1 = trie_after(g1, path), t2 = trie_after(g2, path);
        /* a walk published (marked) is dropped only after the clock hand passed it twice:
         * when the sweeps between examined fewer walks than the cache holds, g1's walks are
         * still there; else no conclusion from this pair */
        if (vi->sh_room_visits - rv >= vi->sh_n) {
            grammar_free(g1);
            grammar_free(g2);
            continue;
        }
        pairs++;
        cr_log_info("/%s/: trie nodes %llu, in the next grammar %llu", rx, (unsigned long long)t1,
                    (unsigned long long)t2);
        cr_assert(t1 > 0 && t2 < t1, "/%s/: the second grammar walked again (%llu, %llu nodes)", rx,
                  (unsigned long long)t1, (unsigned long long)t2);
        snprintf(pc, sizeof pc, "[a-e]*@(?:[b-d]|é)*x{%d}", i + 2);
        check_masks(g2, pc, 2);
        grammar_free(g1);
        grammar_free(g2);
    }
    cr_assert(pairs >= 4, "only %d pairs ran without an eviction between them", pairs);

    /* second chance: a walk found since the clock hand last passed survives its next pass;
     * one walk examined per publication (16 slots at most), so the hand moves little per
     * grammar and the loop stops after one turn, before a second */
    vi->sh_sweep = 1;
    {
        const char *hot = "[a-e]*@(?:[b-d]|é)*x{11}";
        const char *path[] = {"a", "@", "b", NULL};
        struct grammar *h1 = compile(vi, hot), *h2 = compile(vi, hot);
        uint64_t t1 = trie_after(h1, path), t2 = trie_after(h2, path); /* h2 finds it: hit */
        cr_assert(t1 > 0 && t2 == 0, "hot walk: %llu then %llu nodes", (unsigned long long)t1,
                  (unsigned long long)t2);
        uint64_t hand = vi->sh_hand, cap = vi->sh_cap, drops = vi->sh_drops;
        for (int i = 1; vi->sh_hand - hand < cap && i < 400; i++) {
            snprintf(rx, sizeof rx, "(?:[a-e]{%d}@[b-d]{1,%d}e)+", i % 5 + 1, i + 40);
            struct grammar *g = compile(vi, rx);
            check_masks(g, rx, 1);
            grammar_free(g);
        }
        cr_log_info("the hand moved %llu slots of %llu, %llu walks dropped",
                    (unsigned long long)(vi->sh_hand - hand), (unsigned long long)cap,
                    (unsigned long long)(vi->sh_drops - drops));
        cr_assert_eq(vi->sh_cap, cap, "the table grew: the hand started over");
        cr_assert(vi->sh_hand - hand >= cap && vi->sh_hand - hand < 2 * cap,
                  "the hand did not make exactly one turn (%llu slots of %llu)",
                  (unsigned long long)(vi->sh_hand - hand), (unsigned long long)cap);
        cr_assert_gt(vi->sh_drops - drops, 0, "the turn dropped nothing: no conclusion");
        struct grammar *h3 = compile(vi, hot);
        uint64_t t3 = trie_after(h3, path);
        cr_log_info("hot walk after a turn of the hand: %llu nodes (first %llu)",
                    (unsigned long long)t3, (unsigned long long)t1);
        cr_assert_eq(t3, 0, "the hot walk was dropped (%llu nodes walked again)",
                     (unsigned long long)t3);
        grammar_free(h1);
        grammar_free(h2);
        grammar_free(h3);
    }

    /* g0's inner entries hold walks the cache dropped long ago */
    check_masks(g0, "[a-e]*@[b-dé]*x", 10);
    grammar_free(g0);
    grammar_vocab_index_free(vi);
}

/* Walks an eviction drops are freed a few per later publication (grave_step), not all inside
 * the mask that made room (dropping half of a full 256 MB cache freed thousands of payloads in
 * one mask: 50-100 ms on MaskBench runs). Here one per publication: after an eviction that
 * dropped several unused walks some wait (grave_max), they are freed as walks get published
 * (the graveyard empties), and masks stay those of PCRE2 all along. */
Test(grammar_mask_cache, dropped_walks_freed_a_few_at_a_time, .timeout = 120)
{
    struct grammar_vocab_index *vi = small_cache_index();
    vi->grave_step = 1;
    char rx[256];
    bool drained = false;
    for (int i = 1; i <= 80; i++) {
        snprintf(rx, sizeof rx, "(?:[a-e]{%d}@[b-d]{1,%d}x)+", i % 7 + 1, i);
        struct grammar *g = compile(vi, rx);
        check_masks(g, rx, 2);
        grammar_free(g);
        if (vi->grave_max >= 2 && vi->grave_n == 0) drained = true;
    }
    cr_log_info("evictions %llu, graveyard at most %u, now %u",
                (unsigned long long)vi->sh_evictions, vi->grave_max, vi->grave_n);
    cr_assert(vi->sh_evictions > 0, "the cache never filled up: the test proves nothing");
    cr_assert_geq(vi->grave_max, 2, "the evictions freed every dropped walk at once");
    cr_assert(drained, "the dropped walks were never freed");
    grammar_vocab_index_free(vi); /* frees what still waits */
}

/* Room is made a little per publication, not by one pass over the whole cache (which dropped
 * half of a full 256 MB cache inside one mask: 8-10 ms on MaskBench): with a cache of a few
 * hundred walks and vi->sh_sweep = 4, no publication examines more than 4 walks, the cache
 * stays near its budget instead of falling to half, few walks find no room (under 5 % of those
 * dropped: a sweep of 4 walks may meet only marked ones), and masks stay those of PCRE2. */
Test(grammar_mask_cache, room_is_made_a_few_walks_at_a_time, .timeout = 120)
{
    struct grammar_vocab_index *vi = cache_index(32768);
    vi->sh_sweep = 4;
    char rx[256];
    size_t low = SIZE_MAX; /* the fewest bytes held once the cache had filled */
    uint32_t most = 0;
    for (int i = 1; i <= 150; i++) {
        snprintf(rx, sizeof rx, "(?:[a-e]{%d}@[b-d]{1,%d}x)+", i % 7 + 1, i);
        struct grammar *g = compile(vi, rx);
        check_masks(g, rx, 2);
        grammar_free(g);
        if (vi->sh_n > most) most = vi->sh_n;
        if (vi->sh_drops && vi->sh_bytes < low) low = vi->sh_bytes;
    }
    cr_log_info("walks dropped %llu, at most %u walks held, bytes at least %zu after filling, "
                "walks examined per publication at most %llu, refused %llu",
                (unsigned long long)vi->sh_drops, most, low, (unsigned long long)vi->sh_room_max,
                (unsigned long long)vi->sh_refused);
    cr_assert(vi->sh_drops > 0, "the cache never filled up: the test proves nothing");
    cr_assert_gt(most, 40, "the cache held only %u walks: too few to tell a sweep from a pass",
                 most);
    cr_assert_leq(vi->sh_room_max, 4, "a publication examined %llu walks to make room",
                  (unsigned long long)vi->sh_room_max);
    cr_assert_geq(low, vi->sh_max_bytes / 2, "the cache fell to %zu bytes of %zu", low,
                  vi->sh_max_bytes);
    cr_assert_lt(vi->sh_refused * 20, vi->sh_drops, "%llu walks found no room (%llu dropped)",
                 (unsigned long long)vi->sh_refused, (unsigned long long)vi->sh_drops);
    grammar_vocab_index_free(vi);
}

/* The walks' table is made at its budget's size with its pages touched when the index is built,
 * so no mask grows it (each growth rehashed every slot inside one mask: 5-6 ms for 65,536
 * slots) or faults its pages in (first writes across a fresh 6 MB table zeroed its huge pages
 * inside one mask: 5.5-5.9 ms in every MaskBench schema run alone, 2026-12-07). */
Test(grammar_mask_cache, table_is_made_at_its_budget_size, .timeout = 120)
{
    struct grammar_vocab_index *vi = cache_index(0);
    uint32_t cap = vi->sh_cap;
    cr_assert_geq((size_t)cap, SHARED_CACHE_MAX_BYTES / WCACHE_BYTES_PER_SLOT,
                  "the table has %u slots", cap);
    /* every page of the table resident before any walk */
    size_t np, resident = resident_pages(vi->sh, (size_t)cap * sizeof *vi->sh, &np);
    cr_assert_eq(resident, np, "%zu of the table's %zu pages are resident", resident, np);
    char rx[256];
    for (int i = 1; i <= 150 && vi->sh_n <= 1200; i++) {
        snprintf(rx, sizeof rx, "(?:[a-e]{%d}@[b-d]{1,%d}x)+", i % 7 + 1, i);
        struct grammar *g = compile(vi, rx);
        check_masks(g, rx, 2);
        grammar_free(g);
    }
    cr_log_info("%u walks, %u slots", vi->sh_n, vi->sh_cap);
    cr_assert_gt(vi->sh_n, 1024, "only %u walks: more than a first small table is not tested",
                 vi->sh_n);
    cr_assert_eq(vi->sh_drops, 0, "the cache dropped walks: the budget is not what is tested");
    cr_assert_eq(vi->sh_cap, cap, "the table went from %u to %u slots", cap, vi->sh_cap);
    cr_assert_eq(vi->sh_grow_max, 0, "a mask grew the table (%llu slots rehashed)",
                 (unsigned long long)vi->sh_grow_max);
    grammar_vocab_index_free(vi);
}

/* Relaxed walks (counts near a loop's max: docs/grammar.md "Counts out of the lexer state")
 * share the cache's bytes and are dropped by a clock of their own when it is full; they used to
 * stay for ever (a server meeting new loops for ever filled the cache with them, then published
 * nothing). A grammar compiled first keeps its relaxed walk after the cache dropped it (its
 * reference) and masks stay those of PCRE2 all along. */
Test(grammar_mask_cache, relaxed_walks_are_dropped_too, .timeout = 120)
{
    struct grammar_vocab_index *vi = small_cache_index();
    const char *first = "[a-c]{2,40}d";
    struct grammar *g0 = compile(vi, first);
    check_masks(g0, first, 5);
    static const char *cls[] = {"a-c", "a-d", "a-e", "ab", "ac", "ad", "ae", "bc", "bd", "be",
                                "cd", "ce", "de", "abc", "abd", "abe", "acd", "ace", "ade",
                                "bcd", "bce", "bde", "cde", "a-c@", "a-d@", "a-e@", "b-e@",
                                "ab@", "bc@", "cd@", "de@", "a-cé", "b-dé", "c-eé", "abé"};
    static const char *end[] = {"x", "d", "@", "xx", "e"};
    char rx[256];
    uint64_t relaxed = 0;
    for (size_t i = 0; i < sizeof cls / sizeof cls[0]; i++)
        for (size_t j = 0; j < sizeof end / sizeof end[0]; j++) {
            snprintf(rx, sizeof rx, "[%s]{2,%zu}%s", cls[i], 30 + i + j, end[j]);
            struct grammar *g = compile(vi, rx);
            check_masks(g, rx, 2);
            struct grammar_stats gs;
            grammar_stats(g, &gs);
            relaxed += gs.relax_walks;
            grammar_free(g);
        }
    cr_log_info("relaxed walks done %llu, dropped %llu, held %u; walks dropped %llu",
                (unsigned long long)relaxed, (unsigned long long)vi->sh_rdrops, vi->rsh_n,
                (unsigned long long)vi->sh_drops);
    cr_assert_gt(relaxed, 20, "only %llu relaxed walks: the test proves nothing",
                 (unsigned long long)relaxed);
    cr_assert_gt(vi->sh_rdrops, 0, "no relaxed walk was ever dropped (%u held)", vi->rsh_n);
    cr_assert_leq(vi->sh_bytes, vi->sh_max_bytes);
    check_masks(g0, first, 10);
    grammar_free(g0);
    grammar_vocab_index_free(vi);
}
