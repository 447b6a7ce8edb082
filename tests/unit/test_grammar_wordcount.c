/* Word counts in a length region (issue 19; docs/jsonschema.md "Word counts in a length region"):
 * `(?:\S+\s+){0,K}\S+` with minLength / maxLength, where K is above the copies a region may
 * hold, is an inner counted loop whose iteration count is the threads' second counter next to
 * the region's ticks (regex.h). Checked: whole matches against PCRE2 (a lookahead for the
 * length: exact for whole matches), masks against an exact viable-prefix oracle (closed form for
 * the word-count family, enumeration for a finite family whose most-ticks bound depends on the
 * iteration) along random token walks that run into both bounds, for K small and large; and the
 * JSON Schema of MaskBench's Github_easy---o21053 shape, which was a compile error before. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/grammar_int.h"
#include "grammar/regex.h"
#include "grammar_testlib.h"

/* ---- the word-count family: (?L m,n: (?:W+ S+){a,b} W+ ), W = [a-z] | é, S = ' ' ---- */

struct wc {
    int m, n, a, b;
};

/* Our pattern (internal syntax: a tick after each character) and PCRE2's (a lookahead for the
 * length). */
static void wc_patterns(const struct wc *w, char *ours, size_t on, char *ref, size_t rn)
{
    snprintf(ours, on,
             "(?L%d,%d:(?:(?:(?:[a-z]|é)(?T))+(?: (?T))+){%d,%d}(?:(?:[a-z]|é)(?T))+)", w->m,
             w->n, w->a, w->b);
    snprintf(ref, rn, "(?=.{%d,%d}\\z)(?:(?:[a-z]|é)+ +){%d,%d}(?:[a-z]|é)+", w->m,
             w->n, w->a, w->b);
}

/* The oracle on bytes s[0..len) (letters, é and spaces; a cut é counts as a letter): 1 whole
 * match, 2 viable prefix only, 0 neither. Words: runs of letters; c: characters. */
static int wc_status(const struct wc *w, const char *s, size_t len)
{
    int64_t c = 0, words = 0;
    bool ends_sp = false, cut = false;
    for (size_t i = 0; i < len; i++) {
        unsigned char b = (unsigned char)s[i];
        if (b == 0xa9) { /* the second byte of é */
            if (i == 0 || (unsigned char)s[i - 1] != 0xc3) return 0;
            continue;
        }
        if (b == 0xc3 && i + 1 < len && (unsigned char)s[i + 1] != 0xa9) return 0;
        c++;
        if (b == ' ') {
            if (i == 0) return 0;
            ends_sp = true;
        } else {
            if (i == 0 || ends_sp) words++;
            ends_sp = false;
        }
        cut = b == 0xc3 && i + 1 == len;
    }
    if (len == 0) return 2 * w->a + 1 <= w->n ? 2 : 0;
    bool full = !ends_sp && !cut && words - 1 >= w->a && words - 1 <= w->b && c >= w->m &&
                c <= w->n;
    if (full) return 1;
    int64_t need;
    if (!ends_sp) {
        if (words > w->b + 1) return 0;
        need = c + 2 * (w->a + 1 - words > 0 ? w->a + 1 - words : 0);
    } else {
        if (words > w->b) return 0;
        need = c + 1 + 2 * (w->a - words > 0 ? w->a - words : 0);
    }
    return need <= w->n ? 2 : 0;
}

static const struct wc wcs[] = {
    {1, 120, 0, 40},   /* both bounds within a walk's reach */
    {0, 80, 0, 33},    /* length first */
    {20, 400, 0, 99},  /* K large: words first */
    {1, 5000, 0, 99},  /* MaskBench's shape */
    {1, 2000, 0, 300}, /* K larger */
    {5, 300, 35, 50},  /* an inner min */
};

/* Whole matches: the oracle against PCRE2, our DFA against both. */
Test(grammar_wordcount, whole_matches_vs_pcre2_and_oracle)
{
    for (size_t p = 0; p < sizeof wcs / sizeof wcs[0]; p++) {
        char ours[512], ref[512];
        wc_patterns(&wcs[p], ours, sizeof ours, ref, sizeof ref);
        pcre2_code *re = pcre_full(ref);
        for (int k = 0; k < 600; k++) {
            char s[6000];
            size_t n = 0;
            int words = (int)(rnd() % (uint32_t)(wcs[p].b + 8)) + (k % 7 == 0 ? 0 : 1);
            int maxw = k % 3 == 0 ? 1 + (int)(rnd() % (uint32_t)(wcs[p].n / (words + 1) + 3)) : 4;
            for (int i = 0; i < words && n + 64 < sizeof s; i++) {
                if (i) {
                    int sp = 1 + (int)(rnd() % (k % 5 == 0 ? 3u : 1u));
                    for (int j = 0; j < sp; j++)
                        s[n++] = ' ';
                }
                int wl = 1 + (int)(rnd() % (uint32_t)maxw);
                for (int j = 0; j < wl && n + 4 < sizeof s; j++) {
                    if (rnd() % 9 == 0) {
                        s[n++] = (char)0xc3;
                        s[n++] = (char)0xa9;
                    } else {
                        s[n++] = (char)('a' + rnd() % 26);
                    }
                }
            }
            if (k % 11 == 0 && n + 1 < sizeof s) s[n++] = ' ';
            if (k % 13 == 0 && n > 0) s[0] = ' ';
            s[n] = 0;
            int o = wc_status(&wcs[p], s, n) == 1;
            int r = pcre_full_match(re, s, n);
            cr_assert_eq(o, r, "/%s/ on \"%s\": oracle %d, pcre2 %d", ref, s, o, r);
            struct err e = {0};
            int mine = rx_match_full(ours, strlen(ours), s, n, &e);
            cr_assert(mine >= 0, "%s: %s", ours, e.msg);
            cr_assert_eq(mine, r, "/%s/ on \"%s\" (%zu bytes): ours %d, pcre2 %d", ours, s, n, mine,
                         r);
        }
        pcre2_code_free(re);
    }
}

/* A toy vocabulary: letters, spaces, words with and without spaces (tokens of several words:
 * iterations per token > 1), é whole and cut. */
static const char *wc_toks[] = {"<eos>", "a", "b", "z", " ", "  ", "ab", "abc", "é", "\xc3", "\xa9",
                                "a ", " a", "ab cd", "a b c", " a b", "éé", "é ", "abcdefgh",
                                "a a a a a a", "xyz ", "    ", "q", " é"};

struct walker {
    int n;
    const char *tp[32];
    uint32_t tl[32];
    bool sp[32];
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

static void walker_init(struct walker *w, const char *const *toks, int n)
{
    memset(w, 0, sizeof *w);
    w->n = n;
    for (int i = 0; i < n; i++) {
        w->tp[i] = toks[i];
        w->tl[i] = (uint32_t)strlen(toks[i]);
    }
    w->sp[0] = true;
    w->gv = (struct grammar_vocab){n, w->tp, w->tl, w->sp, 0};
    struct err e = {0};
    w->vi = grammar_vocab_index_new(&w->gv, &e);
    cr_assert(w->vi, "%s", e.msg);
}

typedef int (*status_fn)(const void *arg, const char *s, size_t n);

/* Random walks through grammar g, each mask against the oracle for every token (eos: a whole
 * match). Walks prefer, by turns, tokens that add words and tokens that add characters, so
 * both bounds are met. Returns the number of masks checked. */
static int walk_check(const struct walker *w, struct grammar *g, const char *pat, status_fn st,
                      const void *arg, int walks, size_t max_bytes)
{
    int masks = 0;
    char *prefix = malloc(max_bytes + 64), *s = malloc(max_bytes + 64);
    cr_assert(prefix && s);
    for (int walk = 0; walk < walks; walk++) {
        struct err e = {0};
        struct matcher *m = matcher_new(g, &e);
        cr_assert(m, "%s", e.msg);
        size_t pl = 0;
        prefix[0] = 0;
        int style = walk % 3; /* 0: short words, 1: long words, 2: random */
        for (int step = 0; pl < max_bytes; step++) {
            uint32_t mask[1];
            matcher_mask(m, mask);
            masks++;
            int allowed[32], na = 0;
            for (int t = 0; t < w->n; t++) {
                bool in = mask[0] >> t & 1;
                bool ref;
                if (t == 0) {
                    ref = st(arg, prefix, pl) == 1;
                    cr_assert_eq(matcher_accepting(m), ref, "/%s/ accepting after \"%s\"", pat,
                                 prefix);
                } else {
                    memcpy(s, prefix, pl);
                    memcpy(s + pl, w->tp[t], w->tl[t]);
                    ref = st(arg, s, pl + w->tl[t]) != 0;
                }
                cr_assert_eq(in, ref, "/%s/ after \"%s\" (%zu bytes): token \"%s\" mask %d, oracle %d",
                             pat, prefix, pl, w->tp[t], in, ref);
                if (in && t) allowed[na++] = t;
            }
            if (!na) break;
            int t = allowed[rnd() % (uint32_t)na];
            for (int k = 0; k < na && style < 2; k++) {
                const char *x = w->tp[allowed[k]];
                bool spaces = strchr(x, ' ') != NULL;
                if (style == 0 ? (spaces && w->tl[allowed[k]] >= w->tl[t]) || !strchr(w->tp[t], ' ')
                               : !spaces && w->tl[allowed[k]] > w->tl[t])
                    if (rnd() % 3) t = allowed[k];
            }
            cr_assert_eq(matcher_consume(m, t), 0);
            memcpy(prefix + pl, w->tp[t], w->tl[t]);
            pl += w->tl[t];
            prefix[pl] = 0;
        }
        matcher_free(m);
    }
    free(prefix);
    free(s);
    return masks;
}

static int wc_status_v(const void *arg, const char *s, size_t n)
{
    return wc_status(arg, s, n);
}

Test(grammar_wordcount, masks_vs_oracle)
{
    struct walker w;
    walker_init(&w, wc_toks, sizeof wc_toks / sizeof wc_toks[0]);
    uint64_t relaxed = 0;
    for (size_t p = 0; p < sizeof wcs / sizeof wcs[0]; p++) {
        char ours[512], ref[512];
        wc_patterns(&wcs[p], ours, sizeof ours, ref, sizeof ref);
        struct err e = {0};
        struct grammar *g = grammar_compile(w.vi, GRAMMAR_REGEX, ours, strlen(ours), &e);
        cr_assert(g, "%s: %s", ours, e.msg);
        /* the count is an inner loop (the second counter), not copies */
        int inner = 0;
        for (int32_t l = 0; l < g->nfa.n_loops; l++)
            inner += g->nfa.loops[l].parent >= 0;
        cr_assert_eq(inner, 1, "/%s/: %d inner loops", ours, inner);
        size_t maxb = (size_t)wcs[p].n * 2 + 40;
        if (maxb > 1400) maxb = 1400;
        int masks = walk_check(&w, g, ours, wc_status_v, &wcs[p], 15, maxb);
        cr_log_info("/%s/: %d masks, %llu relaxed", ours, masks,
                    (unsigned long long)g->relax_served);
        relaxed += g->relax_served;
        grammar_free(g);
    }
    /* near the region's max the relaxed walks serve (their inner counts kept exactly) */
    cr_assert(relaxed > 0, "no relaxed walk served a word-count state");
    grammar_vocab_index_free(w.vi);
}

/* A finite family whose most-ticks bound depends on the iteration: (?L m,n: (?:a (?T)x){a,b}
 * y? ) where each iteration is "a " (2 ticks) — a thread needs enough iterations left to reach
 * m (rx_inner_ticks' itmax + (max - w) * btmax). The oracle enumerates the language. */
struct fin {
    int m, n, a, b;
};

static int fin_status(const void *arg, const char *s, size_t len)
{
    const struct fin *f = arg;
    char buf[300];
    int best = 0;
    for (int j = f->a; j <= f->b; j++)
        for (int y = 0; y < 2; y++) {
            int L = 2 * j + y;
            if (L < f->m || L > f->n || L > (int)sizeof buf - 1) continue;
            for (int k = 0; k < j; k++) {
                buf[2 * k] = 'a';
                buf[2 * k + 1] = ' ';
            }
            if (y) buf[2 * j] = 'y';
            if ((size_t)L == len && !memcmp(buf, s, len)) return 1;
            if ((size_t)L > len && !memcmp(buf, s, len)) best = 2;
        }
    return best;
}

Test(grammar_wordcount, iteration_dependent_ticks_vs_enumeration)
{
    static const struct fin fins[] = {{60, 200, 0, 70}, {130, 141, 33, 80}, {0, 50, 0, 90}, {141, 150, 0, 70}};
    static const char *toks[] = {"<eos>", "a", " ", "a ", "a a ", "y", " y", "a y", "a a a a ", "b"};
    struct walker w;
    walker_init(&w, toks, sizeof toks / sizeof toks[0]);
    for (size_t p = 0; p < sizeof fins / sizeof fins[0]; p++) {
        char pat[256], ref[256];
        snprintf(pat, sizeof pat, "(?L%d,%d:(?:a(?T) (?T)){%d,%d}(?:y(?T))?)", fins[p].m, fins[p].n,
                 fins[p].a, fins[p].b);
        snprintf(ref, sizeof ref, "(?=[a y]{%d,%d}\\z)(?:a ){%d,%d}y?", fins[p].m, fins[p].n,
                 fins[p].a, fins[p].b);
        pcre2_code *re = pcre_full(ref);
        for (int j = 0; j < 100; j++) /* whole matches of every member and its neighbours */
            for (int y = 0; y < 3; y++) {
                char s[300];
                size_t n = 0;
                for (int k = 0; k < j; k++) {
                    s[n++] = 'a';
                    s[n++] = ' ';
                }
                if (y == 1) s[n++] = 'y';
                if (y == 2 && n) n--;
                s[n] = 0;
                struct err e = {0};
                int mine = rx_match_full(pat, strlen(pat), s, n, &e);
                cr_assert(mine >= 0, "%s: %s", pat, e.msg);
                int r = pcre_full_match(re, s, n);
                cr_assert_eq(r, fin_status(&fins[p], s, n) == 1, "oracle vs pcre2 on \"%s\"", s);
                cr_assert_eq(mine, r, "/%s/ on \"%s\": ours %d, pcre2 %d", pat, s, mine, r);
            }
        pcre2_code_free(re);
        struct err e = {0};
        struct grammar *g = grammar_compile(w.vi, GRAMMAR_REGEX, pat, strlen(pat), &e);
        cr_assert(g, "%s: %s", pat, e.msg);
        walk_check(&w, g, pat, fin_status, &fins[p], 12, 260);
        grammar_free(g);
    }
    grammar_vocab_index_free(w.vi);
}

/* Still refused at compile time, with the construct named: a second inner loop inside one, an
 * unbounded count in an unbounded region, a body that can be empty. */
Test(grammar_wordcount, refused_shapes)
{
    static const struct {
        const char *pat, *needle;
    } bad[] = {
        {"(?L0,2000:(?:(?:(?:a(?T))+b(?T)){0,40}c(?T)){0,40})", "inside another counted repetition"},
        {"(?L0,:(?:(?:a(?T))+b(?T)){40,})", "without a bound"},
        {"(?L0,200:(?:a?(?T)){0,70})", "for a body that can be empty"},
        {"(?L0,20000:(?:(?:a(?T))+b(?T)){0,5000})", "above 4094"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct err e = {0};
        int rc = rx_match_full(bad[i].pat, strlen(bad[i].pat), "a", 1, &e);
        cr_assert_eq(rc, -1, "/%s/ accepted", bad[i].pat);
        cr_assert(strstr(e.msg, bad[i].needle), "/%s/: '%s' lacks '%s'", bad[i].pat, e.msg,
                  bad[i].needle);
    }
}

/* The JSON Schema of MaskBench's Github_easy---o21053 (and ---o21115/o21142's 49 words in 500)
 * compiles (before the second counter: "a repetition count above 32 inside a length region"),
 * and instances fed byte by byte are accepted or rejected as the schema says, escapes and
 * Unicode spaces included. */
static char *words_json(int words, int wlen, const char *sep, int extra)
{
    size_t cap = (size_t)words * (size_t)(wlen + 8) + (size_t)extra + 64;
    char *s = malloc(cap);
    cr_assert(s);
    size_t n = 0;
    s[n++] = '"';
    for (int i = 0; i < words; i++) {
        if (i) n += (size_t)sprintf(s + n, "%s", sep);
        for (int j = 0; j < wlen; j++)
            s[n++] = (char)('a' + (i + j) % 26);
    }
    for (int i = 0; i < extra; i++)
        s[n++] = 'x';
    s[n++] = '"';
    s[n] = 0;
    return s;
}

Test(grammar_wordcount, jsonschema_o21053_shape)
{
    char *tp[256];
    uint32_t tl[256];
    bool sp[256] = {true};
    char bytes[256][2];
    for (int i = 0; i < 256; i++) {
        bytes[i][0] = (char)i;
        bytes[i][1] = 0;
        tp[i] = i ? bytes[i] : "<eos>";
        tl[i] = i ? 1 : 5;
    }
    struct grammar_vocab gv = {256, (const char **)tp, tl, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    static const struct {
        int k, n;
    } shapes[] = {{99, 5000}, {49, 500}};
    for (size_t i = 0; i < 2; i++) {
        char schema[256];
        int K = shapes[i].k, N = shapes[i].n;
        snprintf(schema, sizeof schema,
                 "{\"type\":\"string\",\"minLength\":1,\"maxLength\":%d,"
                 "\"pattern\":\"^$|(^(?:\\\\S+\\\\s+){0,%d}\\\\S+$)\"}",
                 N, K);
        struct grammar *g = grammar_compile(vi, GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &e);
        cr_assert(g, "%s: %s", schema, e.msg);
        struct {
            int words, wlen, extra;
            const char *sep;
            bool ok;
        } cases[] = {
            {1, 1, 0, " ", true},
            {K + 1, 3, 0, " ", true},          /* the most words */
            {K + 2, 3, 0, " ", false},         /* one word too many */
            {K + 1, 2, 0, "\\n\\t ", true},    /* escaped whitespace runs */
            {K + 2, 2, 0, "\\u000B", false},   /* an escape as the separator */
            {K + 1, 1, 0, "\xe3\x80\x80", true}, /* U+3000 ideographic space */
            {1, N, 0, " ", true},              /* maxLength characters */
            {1, N + 1, 0, " ", false},         /* one more */
            {2, N / 2, 0, " ", false},         /* N + 1 with the space */
            {2, (N - 1) / 2, 0, " ", true},
            {0, 0, 0, " ", false},             /* "" is below minLength */
        };
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            char *s = words_json(cases[c].words, cases[c].wlen, cases[c].sep, cases[c].extra);
            cr_assert_eq(engine_accepts(g, s), cases[c].ok, "K %d n %d case %zu (%.60s...): expected %d",
                         K, N, c, s, cases[c].ok);
            free(s);
        }
        cr_assert(engine_accepts(g, "\"a\\\"b c\\\\d\""), "escaped quote and backslash are \\S");
        cr_assert(!engine_accepts(g, "\" a\""), "a leading space");
        cr_assert(!engine_accepts(g, "\"a \""), "a trailing space");
        grammar_free(g);
    }
    grammar_vocab_index_free(vi);
}
