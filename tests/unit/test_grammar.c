/* grammar engine tests: regex vs PCRE2 (whole match and viable prefixes), lark errors, masks on
 * hand vocabularies, special tokens, eos, rollback, cache, threads. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/regex.h"
#define GRAMMAR_TESTLIB_SEED 88172645463325252ull
#include "grammar_testlib.h"

/* ---- helpers ---- */

struct hv {
    int n;
    const char *tok[512];
    uint32_t len[512];
    bool sp[512];
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

/* Tokens: specials first (n_special of them), eos = token 0. */
static void hv_init(struct hv *h, const char *const *toks, int n, int n_special)
{
    memset(h, 0, sizeof *h);
    h->n = n;
    for (int i = 0; i < n; i++) {
        h->tok[i] = toks[i];
        h->len[i] = (uint32_t)strlen(toks[i]);
        h->sp[i] = i < n_special;
    }
    h->gv = (struct grammar_vocab){n, h->tok, h->len, h->sp, 0};
    struct err e = {0};
    h->vi = grammar_vocab_index_new(&h->gv, &e);
    cr_assert(h->vi, "%s", e.msg);
}

static int hv_find(const struct hv *h, const char *s)
{
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->tok[i], s)) return i;
    cr_assert_fail("token %s not in vocab", s);
    return -1;
}

static struct grammar *compile_ok(const struct hv *h, enum grammar_kind k, const char *src)
{
    struct err e = {0};
    struct grammar *g = grammar_compile(h->vi, k, src, strlen(src), &e);
    cr_assert(g, "compile failed: %s\n%s", e.msg, src);
    return g;
}

static void compile_err(const struct hv *h, const char *src, const char *needle)
{
    struct err e = {0};
    struct grammar *g = grammar_compile(h->vi, GRAMMAR_LARK, src, strlen(src), &e);
    cr_assert_null(g, "compiled but should fail: %s", src);
    cr_assert(strstr(e.msg, needle), "error '%s' lacks '%s'", e.msg, needle);
    cr_assert(e.code != ERR_OK);
}

/* Mask as a string "tok1|tok2|..." in vocab order. */
static void mask_str(const struct hv *h, struct matcher *m, char *out, size_t cap)
{
    uint32_t mask[(512 + 31) / 32];
    matcher_mask(m, mask);
    out[0] = 0;
    for (int i = 0; i < h->n; i++)
        if (mask[i >> 5] >> (i & 31) & 1) {
            strncat(out, h->tok[i], cap - strlen(out) - 2);
            strncat(out, "|", cap - strlen(out) - 1);
        }
}

static void consume_ok(const struct hv *h, struct matcher *m, const char *t)
{
    cr_assert_eq(matcher_consume(m, hv_find(h, t)), 0, "token %s rejected", t);
}

/* ---- regex vs PCRE2 ---- */

static const char *rx_patterns[] = {
    "abc",
    "a|b|cd",
    "(ab)*c",
    "a+b?",
    "[a-c]+",
    "[^a-c]*",
    "\\d{2,4}",
    "\\w+\\s\\w+",
    "a{3}",
    "a{2,}",
    "(a|bc){1,3}d",
    "[\\-a]+",
    "x.y",
    "(?:ab|a)(?:bc|c)",
    "[é-ü]+a",
    "\\u00e9+",
    "[^\"\\\\]*",
    "^ab$",
    "^(a|b)+$",
    "a*(^b)?",
    "[a-z0-9._%+-]+@[a-z0-9.-]+",
    "(\\([0-9]{3}\\))?[0-9]{3}-[0-9]{4}",
    "[\\s\\S]",
    "\\D\\W\\S",
    "[.]+",
    "\\.\\*",
    "a{0,3}b{1,2}",
    "(a?){3}",
    "[^\\n]*",
    "\\x41\\x{e9}",
    "ab|",
    "(|a)b",
    "[]a]+",
    "[a-]+",
    "日本+語?",
    "(ab|cd)*(ef)?",
    "[0-9]+(\\.[0-9]+)?([eE][-+]?[0-9]+)?",
    "a.{2}b",
    /* counted loops (above RX_NATIVE_COUNT) */
    "a{0,40}",
    "(ab|a){0,35}b?",
    "[^a]{1,33}",
    "(a|bc){0,50}(a{0,40}|x)",
};

static const char *alphabet[] = {"a",  "b",  "c",  "d",  "e",  "f", "x", "y", "0", "1",
                                 "9",  " ",  "\n", "-",  ".",  "@", "(", ")", "é", "ü",
                                 "日", "本", "語", "\"", "\\", "A", "_", "%", "\t"};

static pcre2_code *pcre_compile_full(const char *pat)
{
    /* PCRE2 spells \uXXXX as \x{XXXX} */
    char conv[8192];
    size_t o = 0;
    for (size_t i = 0; pat[i] && o + 8 < sizeof conv; i++) {
        if (pat[i] == '\\' && pat[i + 1] == 'u') {
            o += (size_t)snprintf(conv + o, sizeof conv - o, "\\x{%.4s}", pat + i + 2);
            i += 5;
        } else if (pat[i] == '\\' && pat[i + 1]) {
            conv[o++] = pat[i++];
            conv[o++] = pat[i];
        } else {
            conv[o++] = pat[i];
        }
    }
    conv[o] = 0;
    char wrapped[8200];
    snprintf(wrapped, sizeof wrapped, "(?:%s)\\z", conv);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED,
                      PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
    cr_assert(re, "pcre2 rejects %s", pat);
    return re;
}

static size_t random_string(char *buf, size_t cap, const char *pat)
{
    size_t n = 0;
    int len = (int)(rnd() % 8);
    for (int i = 0; i < len; i++) {
        const char *piece;
        char one[8];
        if (rnd() % 2) { /* a character of the pattern itself */
            size_t pl = strlen(pat);
            size_t k = rnd() % pl;
            while (k > 0 && ((unsigned char)pat[k] & 0xC0) == 0x80)
                k--;
            size_t e = k + 1;
            while (e < pl && ((unsigned char)pat[e] & 0xC0) == 0x80)
                e++;
            memcpy(one, pat + k, e - k);
            one[e - k] = 0;
            piece = one;
        } else {
            piece = alphabet[rnd() % (sizeof alphabet / sizeof alphabet[0])];
        }
        size_t l = strlen(piece);
        if (n + l >= cap) break;
        memcpy(buf + n, piece, l);
        n += l;
    }
    buf[n] = 0;
    return n;
}

Test(grammar_regex, full_match_vs_pcre2)
{
    for (size_t p = 0; p < sizeof rx_patterns / sizeof rx_patterns[0]; p++) {
        const char *pat = rx_patterns[p];
        pcre2_code *re = pcre_compile_full(pat);
        for (int k = 0; k < 600; k++) {
            char s[64];
            size_t n = random_string(s, sizeof s, pat);
            struct err e = {0};
            int mine = rx_match_full(pat, strlen(pat), s, n, &e);
            cr_assert(mine >= 0, "%s: %s", pat, e.msg);
            int ref = pcre_status(re, s, n) == 1;
            cr_assert_eq(mine, ref, "/%s/ on \"%s\": ours %d, pcre2 %d", pat, s, mine, ref);
        }
        pcre2_code_free(re);
    }
}

/* Counted loops at and around their bounds, against PCRE2. */
Test(grammar_regex, counted_loops_vs_pcre2)
{
    static const char *pats[] = {"[ab]{40,45}c?",   "(ab|a){33,}c",   "(x[0-9]){0,34}", "é{35}",
                                 "(a{2,40}b){1,3}", "[^\"]{2,100}\"", "a{100}|a{50,60}"};
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        pcre2_code *re = pcre_compile_full(pats[p]);
        for (int k = 0; k < 400; k++) {
            char s[512];
            size_t n = 0;
            int len = 30 + (int)(rnd() % 80);
            const char *pieces[] = {"a", "b", "c", "x", "1", "é", "\"", "ab"};
            for (int i = 0; i < len && n + 4 < sizeof s; i++) {
                const char *pc = pieces[rnd() % (k % 2 ? 2 : 8)];
                memcpy(s + n, pc, strlen(pc));
                n += strlen(pc);
            }
            if (k % 3 == 0 && n > 0) n -= rnd() % (n < 20 ? n : 20);
            s[n] = 0;
            struct err e = {0};
            int mine = rx_match_full(pats[p], strlen(pats[p]), s, n, &e);
            cr_assert(mine >= 0, "%s: %s", pats[p], e.msg);
            int ref = pcre_status(re, s, n) == 1;
            cr_assert_eq(mine, ref, "/%s/ on \"%s\": ours %d, pcre2 %d", pats[p], s, mine, ref);
        }
        pcre2_code_free(re);
    }
    /* a large bound compiles to a small automaton */
    struct err e = {0};
    cr_assert_eq(rx_match_full("[a-z]{0,65535}", 14, "abc", 3, &e), 1);
}

Test(grammar_regex, errors_name_the_construct)
{
    static const struct {
        const char *pat, *needle;
    } bad[] = {
        {"a(?=b)", "lookahead"},        {"(?<=a)b", "lookbehind"},
        {"(a)\\1", "backreference"},    {"\\bword", "word boundary"},
        {"\\p{L}", "Unicode property"}, {"(ab", "missing )"},
        {"ab)", "unmatched )"},         {"[ab", "unterminated character class"},
        {"*a", "quantifier"},           {"a{3,2}", "m < n"},
        {"[z-a]", "out of order"},      {"a{2000000}", "above 1000000"},
        {"(?i)ab", "inline flags"},     {"a\\", "trailing backslash"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct err e = {0};
        int rc = rx_match_full(bad[i].pat, strlen(bad[i].pat), "a", 1, &e);
        cr_assert_eq(rc, -1, "/%s/ accepted", bad[i].pat);
        cr_assert(strstr(e.msg, bad[i].needle), "/%s/: '%s' lacks '%s'", bad[i].pat, e.msg,
                  bad[i].needle);
    }
}

/* Length regions (?L<m>,<n>:...) with (?T) ticks (the JSON Schema compiler's pattern/format ∩
 * minLength/maxLength, issue 19): whole matches and masks against PCRE2 equivalents written
 * without them (PCRE2's partial matching is not exact through lookaheads); bounds near and far from the counter's classes; repetition bounds clamped
 * inside a region; errors. */
static const char *len_pairs[][2] = {
    {"(?L2,5:(?:[ab](?T))*c(?T)(?:[ab](?T))*)", "c[ab]{1,4}|[ab]c[ab]{0,3}|[ab]{2}c[ab]{0,2}|[ab]{3}c[ab]?|[ab]{4}c"},
    {"(?L0,3:(?:(?:é|ab)(?T))+)", "(?:é|ab){1,3}"},
    {"(?L40,45:(?:[ab](?T))*)c?", "[ab]{40,45}c?"},
    {"(?L3,:(?:x(?T)){1,2}(?:[0-9](?T))*)", "x[0-9]{2,}|xx[0-9]+"},
    {"(?L1,4:(?:[a-z](?T)){2,100})", "[a-z]{2,4}"},
    {"a(?L0,0:(?:b(?T))*)c", "ac"},
    /* a single-character body may have up to 64 copies in a region (a hostname label) */
    {"(?L3,50:(?:[ab](?T))(?:(?:[ab]|é)(?T)){0,61}c(?T))", "[ab](?:[ab]|é){1,48}c"},
};

static void masks_vs_pcre(const struct hv *h, const char *pat, pcre2_code *re, int n);

Test(grammar_regex, length_regions_vs_pcre2)
{
    for (size_t p = 0; p < sizeof len_pairs / sizeof len_pairs[0]; p++) {
        const char *pat = len_pairs[p][0];
        pcre2_code *re = pcre_compile_full(len_pairs[p][1]);
        for (int k = 0; k < 800; k++) {
            char s[128];
            size_t n = 0;
            int len = (int)(rnd() % (p == 2 ? 60 : 9));
            const char *pieces[] = {"a", "b", "c", "x", "1", "é", "ab", "z"};
            for (int i = 0; i < len && n + 4 < sizeof s; i++) {
                const char *pc = pieces[rnd() % (k % 2 ? 3 : 8)];
                memcpy(s + n, pc, strlen(pc));
                n += strlen(pc);
            }
            s[n] = 0;
            struct err e = {0};
            int mine = rx_match_full(pat, strlen(pat), s, n, &e);
            cr_assert(mine >= 0, "%s: %s", pat, e.msg);
            int ref = pcre_status(re, s, n) == 1;
            cr_assert_eq(mine, ref, "/%s/ on \"%s\": ours %d, pcre2 %d", pat, s, mine, ref);
        }
        pcre2_code_free(re);
    }
    static const char *toks[] = {"<eos>", "a", "b", "c", "ab", "abab", "x", "1", "x1", "é", "aé"};
    int n = sizeof toks / sizeof toks[0];
    struct hv h;
    hv_init(&h, toks, n, 1);
    for (size_t p = 0; p < sizeof len_pairs / sizeof len_pairs[0]; p++) {
        pcre2_code *re = pcre_compile_full(len_pairs[p][1]);
        masks_vs_pcre(&h, len_pairs[p][0], re, n);
        pcre2_code_free(re);
    }
    grammar_vocab_index_free(h.vi);
    static const struct {
        const char *pat, *needle;
    } bad[] = {{"a(?T)", "outside a length region"},
               {"(?L1,2:(?L0,1:a(?T)))", "nested length regions"},
               {"(?L3,2:a)", "n < m"},
               {"(?L1:a)", "bad length region"},
               {"(?L1,2:a(?T)*)", "quantified"},
               /* above the copies a region holds, a count is an inner loop (the second counter,
                * test_grammar_wordcount.c) unless its body can be empty or it is in another */
               {"(?L0,200:(?:(?:|a)(?T)){0,70})", "repetition count above 64 inside a length region"},
               {"(?L0,200:(?:(?:a+b(?T)){0,40}c){0,40})",
                "repetition count above 32 inside a length region"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct err e = {0};
        int rc = rx_match_full(bad[i].pat, strlen(bad[i].pat), "a", 1, &e);
        cr_assert_eq(rc, -1, "/%s/ accepted", bad[i].pat);
        cr_assert(strstr(e.msg, bad[i].needle), "/%s/: '%s' lacks '%s'", bad[i].pat, e.msg,
                  bad[i].needle);
    }
}

/* Runs pat's DFA over s; 1 accepted, 0 not (and adds the DFA's shifted transitions to *hits). */
static int dfa_run(const char *pat, const char *s, size_t n, uint64_t *hits)
{
    struct rx_ast a = {0};
    struct rx_nfa nfa = {0};
    struct rx_dfa d;
    struct err e = {0};
    int32_t root = rx_parse(&a, pat, strlen(pat), &e);
    cr_assert(root >= 0, "%s: %s", pat, e.msg);
    int32_t start = rx_nfa_add(&nfa, &a, root, 0, &e);
    cr_assert(start >= 0, "%s: %s", pat, e.msg);
    cr_assert_eq(rx_dfa_init(&d, &nfa, &e), 0);
    uint32_t q = rx_dfa_start(&d, &start, 1);
    for (size_t i = 0; i < n && q != RX_DEAD; i++)
        q = rx_dfa_next(&d, q, (uint8_t)s[i]);
    int rc = n > 0 && rx_dfa_accepting(&d, q);
    cr_assert(!d.failed);
    *hits += d.sh_hits;
    rx_dfa_deinit(&d);
    rx_nfa_deinit(&nfa);
    rx_ast_deinit(&a);
    return rc;
}

/* Shifted transitions (regex.h rx_shift): far from a counted loop's or a length region's bounds
 * a transition is the stored one of another count, moved by the difference. Long strings of
 * every length around and between the bounds, through one DFA per string, against PCRE2; the
 * shifted path must have served transitions. */
Test(grammar_regex, shifted_transitions_vs_pcre2)
{
    static const char *pairs[][2] = {
        {"(?L5,120:(?:[^@\\s](?T))+@(?T)(?:[a-z.](?T))+)", "(?=.{5,120}$)[^@\\s]+@[a-z.]+"},
        {"(?L60,90:(?:(?:é|[ab])(?T))*c(?T)(?:[ab](?T))*)", "(?=.{60,90}$)(?:é|[ab])*c[ab]*"},
        {"[^\"]{2,100}\"", "[^\"]{2,100}\""},
        {"(?:x|ab){40,80}y?", "(?:x|ab){40,80}y?"},
        {"\"(?:[a-c]|é){3,70}\"d", "\"(?:[a-c]|é){3,70}\"d"},
        /* far below min (one zone) and between the bounds (another): a transition stored in
         * one must not serve the other */
        {"\"(?:[a-c]|é){40,80}\"d", "\"(?:[a-c]|é){40,80}\"d"},
        {"(?:x|ab){50,}y", "(?:x|ab){50,}y"},
    };
    uint64_t hits = 0;
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        pcre2_code *re = pcre_compile_full(pairs[p][1]);
        for (int k = 0; k < 300; k++) {
            char s[700];
            size_t n = 0;
            int len = 1 + (int)(rnd() % 140);
            const char *pieces[] = {"a", "b", "c", "x", "é", "ab", "@", "\"", ".", " ", "d", "y"};
            int np = k % 3 ? 6 : 12;
            if (p == 0 && len > 3) { /* mostly well-formed around the bounds */
                for (int i = 0; i < len / 2; i++)
                    s[n++] = "ab.c"[rnd() % 4];
                s[n++] = '@';
                for (int i = len / 2; i < len; i++)
                    s[n++] = "xy.z"[rnd() % 4];
            } else if (p == 4 || p == 5) {
                s[n++] = '"';
            }
            for (int i = 0; i < (p == 0 ? (int)(rnd() % 3) : len) && n + 4 < sizeof s; i++) {
                const char *pc = pieces[rnd() % np];
                if (p == 5) pc = pieces[(int[]){0, 1, 2, 4}[rnd() % 4]]; /* a, b, c, é */
                memcpy(s + n, pc, strlen(pc));
                n += strlen(pc);
            }
            if ((p == 4 || p == 5) && k % 2) {
                s[n++] = '"';
                s[n++] = 'd';
            }
            s[n] = 0;
            int mine = dfa_run(pairs[p][0], s, n, &hits);
            int ref = pcre_status(re, s, n) == 1;
            cr_assert_eq(mine, ref, "/%s/ on \"%s\" (%zu bytes): ours %d, pcre2 %d", pairs[p][0], s,
                         n, mine, ref);
        }
        pcre2_code_free(re);
    }
    cr_assert(hits > 1000, "shifted transitions served: %llu", (unsigned long long)hits);
}

/* PCRE2's viable-prefix test for a subject that may end inside a 2-byte UTF-8 sequence
 * (byte-level tokens): viable when some completion of that character is. */
static int pcre_status_bytes(pcre2_code *re, const char *s, size_t n)
{
    if (n && ((unsigned char)s[n - 1] & 0xE0) == 0xC0) {
        char t[1400];
        cr_assert(n + 1 < sizeof t);
        memcpy(t, s, n);
        for (int c = 0x80; c <= 0xBF; c++) {
            t[n] = (char)c;
            if (pcre_status(re, t, n + 1)) return 2;
        }
        return 0;
    }
    return pcre_status(re, s, n);
}

/* Counts out of the lexer state (docs/grammar.md): near the max of a bounded loop or length
 * region, masks come from one relaxed walk per loop shape filtered by the count still allowed.
 * Long random walks (biased to long tokens, so they reach the bounds) with masks checked for
 * every token against PCRE2's viable-prefix test, mask against consume, and the relaxed walk
 * must have served masks. `(?:ab|a){0,40}c` keeps threads at two counts (not relaxed). */
Test(grammar_regex, counts_out_of_state_vs_pcre2)
{
    static const char *pairs[][2] = {
        {"\"[a-c]{0,40}\"", "\"[a-c]{0,40}\""},
        {"\"(?:[ab]|é){5,45}\"x?", "\"(?:[ab]|é){5,45}\"x?"},
        {"(?L3,45:(?:[ab.](?T))+@(?T)(?:[a-c.](?T))+)", NULL}, /* PCRE2 built below */
        {"\"(?L0,40:(?:(?:[ab]|é|\\\\n)(?T))*)\"c?", "\"(?:[ab]|é|\\\\n){0,40}\"c?"},
        {"[a-c]{2,60}d", "[a-c]{2,60}d"},
        {"(?L33,38:(?:(?:[abc@]|é)(?T))*)\"", "(?:[abc@]|é){33,38}\""},
        {"(?:ab|a){0,40}c", "(?:ab|a){0,40}c"},
    };
    static const char *toks[] = {"<eos>", "a", "b", "c", "d", "x", "@", ".", "\"", "é", "\\n",
                                 "ab", "abc", "aaaa", "abab", "aaaaaaaa", "bbbbbbbbbbbb",
                                 "a\"", "\"x", "\"c", "aé", "ééé", "a@b", "..", "b.c@", "cd",
                                 "abababab\"", "\\na", "c\"c", "\"aaa", "cccccccccd",
                                 "\xc3", "\xa9", "a\xc3", "\xa9\""}; /* byte-level pieces of é */
    int n = sizeof toks / sizeof toks[0];
    struct hv h;
    hv_init(&h, toks, n, 1);
    uint64_t served = 0;
    /* the region's sum of lengths spelled out (a lookahead would spoil PCRE2's partial
     * matches): [ab.]{k}@[a-c.]{j} with k, j >= 1 and 3 <= k + 1 + j <= 45 */
    char email[4096];
    size_t el = 0;
    for (int k = 1; k <= 43; k++)
        el += (size_t)snprintf(email + el, sizeof email - el, "%s[ab.]{%d}@[a-c.]{1,%d}",
                               k > 1 ? "|" : "", k, 44 - k);
    for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
        pcre2_code *re = pcre_compile_full(pairs[p][1] ? pairs[p][1] : email);
        struct grammar *g = compile_ok(&h, GRAMMAR_REGEX, pairs[p][0]);
        for (int walk = 0; walk < 40; walk++) {
            struct err e = {0};
            struct matcher *m = matcher_new(g, &e);
            cr_assert(m);
            char prefix[1200] = "";
            size_t pl = 0;
            for (int step = 0; step < 120; step++) {
                uint32_t mask[2];
                matcher_mask(m, mask);
                int allowed[64], na = 0, longest = -1;
                for (int t = 0; t < n; t++) {
                    bool in = mask[t >> 5] >> (t & 31) & 1;
                    bool ref;
                    if (t == 0) {
                        ref = pcre_status(re, prefix, pl) == 1;
                        cr_assert_eq(matcher_accepting(m), ref, "/%s/ accepting after \"%s\"",
                                     pairs[p][0], prefix);
                    } else {
                        char s[1300];
                        memcpy(s, prefix, pl);
                        memcpy(s + pl, toks[t], h.len[t]);
                        ref = pcre_status_bytes(re, s, pl + h.len[t]) != 0;
                    }
                    cr_assert_eq(in, ref, "/%s/ after \"%s\" (%zu bytes): token \"%s\" mask %d, pcre2 %d",
                                 pairs[p][0], prefix, pl, toks[t], in, ref);
                    if (in && t) {
                        allowed[na++] = t;
                        if (longest < 0 || h.len[t] > h.len[longest]) longest = t;
                    }
                }
                if (!na) break;
                int t = rnd() % 3 ? longest : allowed[rnd() % (uint32_t)na];
                if (step > 4 && rnd() % 8 == 0) t = allowed[rnd() % (uint32_t)na];
                cr_assert_eq(matcher_consume(m, t), 0);
                memcpy(prefix + pl, toks[t], h.len[t]);
                pl += h.len[t];
                prefix[pl] = 0;
                if (pl > 1000) break;
            }
            matcher_free(m);
        }
        struct grammar_stats gs;
        grammar_stats(g, &gs);
        if (p + 1 < sizeof pairs / sizeof pairs[0])
            cr_assert(gs.relax_served > 0, "/%s/: no mask from a relaxed walk", pairs[p][0]);
        served += gs.relax_served;
        grammar_free(g);
        pcre2_code_free(re);
    }
    cr_log_info("relaxed masks served: %llu", (unsigned long long)served);
    grammar_vocab_index_free(h.vi);
}

/* Classes are built as byte tries (one NFA state per distinct leading byte range): classes
 * with many UTF-8 ranges, against PCRE2 on strings mixing 1- to 4-byte characters. */
Test(grammar_regex, wide_classes_vs_pcre2)
{
    static const char *pats[] = {"[^\\s@]+@[^\\s]+", "[^\\u2000-\\u200a\\u3000a]*b",
                                 "[\\u00e0-\\u00ff\\u1680\\u2028-\\u2029x-z]{2,5}",
                                 "(?:[^\\x00-\\x1f\"\\\\]|\\\\.)*"};
    static const char *pieces[] = {"a", "b", "@", " ", "\xe2\x80\x80", "\xe3\x80\x80", "\xe1\x9a\x80",
                                   "\xe2\x80\xa8", "\xc3\xa9", "\xf0\x9f\x98\x80", "x", "\\", "\"",
                                   "\xe2\x80\x8a", "\xe2\x80\x8b", "\xef\xbf\xbd", "\t"};
    uint64_t hits = 0;
    for (size_t p = 0; p < sizeof pats / sizeof pats[0]; p++) {
        pcre2_code *re = pcre_compile_full(pats[p]);
        for (int k = 0; k < 600; k++) {
            char s[200];
            size_t n = 0;
            int len = 1 + (int)(rnd() % 8); /* lexemes are not empty */
            for (int i = 0; i < len; i++) {
                const char *pc = pieces[rnd() % (sizeof pieces / sizeof pieces[0])];
                memcpy(s + n, pc, strlen(pc));
                n += strlen(pc);
            }
            s[n] = 0;
            int mine = dfa_run(pats[p], s, n, &hits);
            int ref = pcre_status(re, s, n) == 1;
            cr_assert_eq(mine, ref, "/%s/ on \"%s\": ours %d, pcre2 %d", pats[p], s, mine, ref);
        }
        pcre2_code_free(re);
    }
}

/* Masks of `start: /R/` equal PCRE2's viable-prefix test for every token, along random paths. */
Test(grammar_regex, masks_are_viable_prefixes)
{
    static const char *toks[] = {"<eos>", "a",  "b",    "c",  "d",  "ab", "bc", "abc", "0",
                                 "1",     "9",  "12",   "-",  ".",  "@",  " ",  "\n",  "é",
                                 "ü",     "日", "本語", "(",  ")",  "x",  "y",  "e",   "E",
                                 "+",     "\"", "\\",   "aa", "ba", "0.", ".5", "é日"};
    int n = sizeof toks / sizeof toks[0];
    struct hv h;
    hv_init(&h, toks, n, 1);
    for (size_t p = 0; p < sizeof rx_patterns / sizeof rx_patterns[0]; p++) {
        pcre2_code *re = pcre_compile_full(rx_patterns[p]);
        masks_vs_pcre(&h, rx_patterns[p], re, n);
        pcre2_code_free(re);
    }
    grammar_vocab_index_free(h.vi);
}

static void masks_vs_pcre(const struct hv *hp, const char *pat, pcre2_code *re, int n)
{
    const struct hv h = *hp;
    const char *const *toks = hp->tok;
    {
        struct grammar *g = compile_ok(&h, GRAMMAR_REGEX, pat);
        for (int walk = 0; walk < 20; walk++) {
            struct err e = {0};
            struct matcher *m = matcher_new(g, &e);
            cr_assert(m);
            char prefix[256] = "";
            size_t pl = 0;
            for (int step = 0; step < 12; step++) {
                uint32_t mask[2];
                matcher_mask(m, mask);
                int allowed[64], na = 0;
                for (int t = 0; t < n; t++) {
                    bool in = mask[t >> 5] >> (t & 31) & 1;
                    bool ref;
                    if (t == 0) {
                        ref = pcre_status(re, prefix, pl) == 1;
                        cr_assert_eq(matcher_accepting(m), ref, "/%s/ accepting after \"%s\"", pat,
                                     prefix);
                    } else {
                        char s[300];
                        memcpy(s, prefix, pl);
                        memcpy(s + pl, toks[t], h.len[t]);
                        ref = pcre_status(re, s, pl + h.len[t]) != 0;
                    }
                    cr_assert_eq(in, ref, "/%s/ after \"%s\": token \"%s\" mask %d, pcre2 %d", pat,
                                 prefix, toks[t], in, ref);
                    if (in && t) allowed[na++] = t;
                }
                /* done: nothing but eos can follow, so the mask is exactly {eos} */
                if (matcher_done(m)) cr_assert(na == 0 && (mask[0] & 1), "/%s/ done", pat);
                if (!na) break;
                int t = allowed[rnd() % (uint32_t)na];
                cr_assert_eq(matcher_consume(m, t), 0);
                memcpy(prefix + pl, toks[t], h.len[t]);
                pl += h.len[t];
                prefix[pl] = 0;
                if (pl > 200) break;
            }
            matcher_free(m);
        }
        grammar_free(g);
    }
}

/* ---- lark ---- */

static const char *small_toks[] = {
    "<|im_end|>", "<tool_call>", "</tool_call>", "a",   "b",   "c",   "ab",         "abc",
    "{",          "}",           "\"",           "\":", "\",", "\"}", "{\"",        ":",
    ",",          " ",           "\n",           "1",   "2",   "12",  "true",       "x",
    "y",          "aa",          "bb",           "[",   "]",   "-",   "<|im_end|>x"};

Test(grammar_lark, errors)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    compile_err(&h, "start: foo", "undefined rule foo");
    compile_err(&h, "start: FOO", "undefined terminal FOO");
    compile_err(&h, "rule: \"a\"", "no `start` rule");
    compile_err(&h, "start: /a(?=b)/", "lookahead");
    compile_err(&h, "start: <|nope|>", "special token <|nope|> is not in the vocabulary");
    compile_err(&h, "start: <[999999]>", "not a token id");
    compile_err(&h, "start: <[5]>", "<[5]> is not a special token");
    compile_err(&h, "start: a\na: a \"x\"", "matches no string");
    compile_err(&h, "%declare FOO\nstart: \"a\"", "directive %declare is not supported");
    compile_err(&h, "%import foo.BAR\nstart: \"a\"", "only %import common");
    compile_err(&h, "%import common.NOPE\nstart: \"a\"", "common.NOPE is not supported");
    compile_err(&h, "start: \"a\"\nstart: \"b\"", "defined twice");
    compile_err(&h, "start: (\"a\"", "expected ')'");
    compile_err(&h, "start: \"abc", "unterminated string");
    compile_err(&h, "start: A\nA: a", "cannot refer to the rule");
    compile_err(&h, "start: A\nA: B\nB: A", "refers to itself");
    compile_err(&h, "start: /a/i", "regex flag 'i' is not supported");
    compile_err(&h, "start{x}: \"a\"", "templates are not supported");
    compile_err(&h, "start: \"a\"{3,1}", "n < m");
    grammar_vocab_index_free(h.vi);
}

Test(grammar_lark, features_compile_and_match)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    char buf[2048];
    /* terminals composed of terminals, %import, ?rule, [optional], ~ repetition, aliases */
    struct grammar *g = compile_ok(&h, GRAMMAR_LARK,
                                   "%import common.INT\n"
                                   "?start: item (\",\" item)* [\"-\"]  -> top\n"
                                   "item: AB | INT | x~2\n"
                                   "x: \"x\" | \"y\"\n"
                                   "AB: A \"b\"\n"
                                   "A: \"a\"\n");
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "a|ab|1|2|12|x|y|");
    consume_ok(&h, m, "12");
    mask_str(&h, m, buf, sizeof buf);
    /* INT may continue, or the item ends (",", "-", eos) */
    cr_assert_str_eq(buf, "<|im_end|>|,|1|2|12|-|");
    consume_ok(&h, m, ",");
    consume_ok(&h, m, "x");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "x|y|");
    consume_ok(&h, m, "y");
    cr_assert(matcher_accepting(m));
    consume_ok(&h, m, "-");
    cr_assert(matcher_done(m));
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "<|im_end|>|");
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(h.vi);
}

Test(grammar_lark, left_recursion_and_ignore)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    char buf[2048];
    struct grammar *g = compile_ok(&h, GRAMMAR_LARK,
                                   "start: list\n"
                                   "list: list \",\" NUM | NUM\n"
                                   "NUM: /[0-9]+/\n"
                                   "%ignore \" \"\n");
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, " |1|2|12|"); /* %ignore applies before the first lexeme too */
    consume_ok(&h, m, "1");
    consume_ok(&h, m, " ");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "<|im_end|>|,| |");
    consume_ok(&h, m, ",");
    consume_ok(&h, m, " ");
    consume_ok(&h, m, "2");
    cr_assert(matcher_accepting(m));
    cr_assert_not(matcher_done(m)); /* more digits or "," may follow */
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(h.vi);
}

Test(grammar_lark, greedy_lexing_across_tokens)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    char buf[2048];
    /* "abc" = "ab" "c" lexed greedily as AB then C; the token "abc" spans two lexemes */
    struct grammar *g = compile_ok(&h, GRAMMAR_LARK, "start: AB C\nAB: \"ab\"\nC: \"c\"\n");
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "a|ab|abc|");
    consume_ok(&h, m, "abc");
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(h.vi);
}

Test(grammar_lark, special_tokens)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    char buf[2048];
    struct grammar *g = compile_ok(&h, GRAMMAR_LARK,
                                   "start: <tool_call> body <[2]> TAIL?\n"
                                   "body: \"a\"+\n"
                                   "TAIL: \"<|im_end|>x\"\n");
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "<tool_call>|"); /* the special token only, never its text */
    consume_ok(&h, m, "<tool_call>");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "a|aa|");
    cr_assert_neq(matcher_consume(m, hv_find(&h, "</tool_call>")), 0);
    consume_ok(&h, m, "a");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "</tool_call>|a|aa|");
    consume_ok(&h, m, "</tool_call>");
    /* text that looks like a special token is matched as text by a text terminal */
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "<|im_end|>|<|im_end|>x|");
    consume_ok(&h, m, "<|im_end|>x");
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(h.vi);
}

Test(grammar_lark, eos_only_when_accepting)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    struct grammar *g = compile_ok(&h, GRAMMAR_LARK, "start: \"a\" \"b\"?\n");
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    cr_assert_not(matcher_accepting(m));
    cr_assert_neq(matcher_consume(m, 0), 0); /* eos refused */
    consume_ok(&h, m, "a");
    cr_assert(matcher_accepting(m));
    cr_assert_not(matcher_done(m));
    cr_assert_eq(matcher_consume(m, 0), 0);
    cr_assert(matcher_done(m));
    cr_assert_neq(matcher_consume(m, hv_find(&h, "b")), 0); /* nothing after eos */
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(h.vi);
}

/* ---- rollback ---- */

Test(grammar_rollback, restores_state_exactly)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    struct grammar *g = compile_ok(&h, GRAMMAR_LARK,
                                   "start: obj\n"
                                   "obj: \"{\" (pair (\",\" pair)*)? \"}\"\n"
                                   "pair: STR \":\" val\n"
                                   "val: STR | NUM | \"true\" | obj\n"
                                   "STR: /\"[a-z]*\"/\n"
                                   "NUM: /-?[0-9]+/\n"
                                   "%ignore /[ \\n]+/\n");
    const char *seq[] = {"{\"", "ab",  "\":", " ", "12", ",",         "\"",
                         "b",   "\":", "{",   "}", "}",  "<|im_end|>"};
    int n = sizeof seq / sizeof seq[0];
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    char before[32][2048];
    bool acc[32];
    for (int i = 0; i < n; i++) {
        mask_str(&h, m, before[i], sizeof before[i]);
        acc[i] = matcher_accepting(m);
        consume_ok(&h, m, seq[i]);
    }
    cr_assert(matcher_done(m));
    cr_assert_eq(matcher_rollback(m, n + 1), -1);
    /* roll back one step at a time, then several at once, checking masks each time */
    for (int i = n - 1; i >= 0; i--) {
        cr_assert_eq(matcher_rollback(m, 1), 0);
        char now[2048];
        mask_str(&h, m, now, sizeof now);
        cr_assert_str_eq(now, before[i], "after rollback to %d", i);
        cr_assert_eq(matcher_accepting(m), acc[i]);
    }
    for (int i = 0; i < n; i++)
        consume_ok(&h, m, seq[i]);
    cr_assert_eq(matcher_rollback(m, 7), 0);
    char now[2048];
    mask_str(&h, m, now, sizeof now);
    cr_assert_str_eq(now, before[n - 7]);
    for (int i = n - 7; i < n; i++)
        consume_ok(&h, m, seq[i]);
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(h.vi);
}

/* ---- cache and threads ---- */

Test(grammar_cache, lru_and_errors)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    struct grammar_cache *c = grammar_cache_new(h.vi, 2);
    struct err e = {0};
    const char *a = "start: \"a\"", *b = "start: \"b\"", *cc = "start: \"c\"";
    struct grammar *g1 = grammar_cache_get(c, GRAMMAR_LARK, a, strlen(a), &e);
    struct grammar *g2 = grammar_cache_get(c, GRAMMAR_LARK, a, strlen(a), &e);
    cr_assert(g1 && g1 == g2);
    struct grammar *g3 = grammar_cache_get(c, GRAMMAR_REGEX, a, strlen(a), &e);
    cr_assert(g3 && g3 != g1, "kind is part of the key");
    grammar_free(g3);
    struct grammar *g4 = grammar_cache_get(c, GRAMMAR_LARK, b, strlen(b), &e);
    struct grammar *g5 = grammar_cache_get(c, GRAMMAR_LARK, cc, strlen(cc), &e);
    cr_assert_eq(grammar_cache_size(c), 2);
    struct grammar *bad = grammar_cache_get(c, GRAMMAR_LARK, "start: nope", 11, &e);
    cr_assert_null(bad);
    cr_assert(strstr(e.msg, "undefined rule nope"));
    cr_assert_eq(grammar_cache_size(c), 2);
    /* g1 was evicted from the cache but is still usable through our reference */
    struct matcher *m = matcher_new(g1, &e);
    consume_ok(&h, m, "a");
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g1);
    grammar_free(g2);
    grammar_free(g4);
    grammar_free(g5);
    grammar_cache_free(c);
    grammar_vocab_index_free(h.vi);
}

struct thr {
    struct grammar_cache *c;
    struct hv *h;
    int ok;
};

static void *thr_main(void *p)
{
    struct thr *t = p;
    const char *src = "start: \"{\" item (\",\" item)* \"}\"\nitem: /[a-c]+/ | /[0-9]+/\n";
    const char *seq[] = {"{", "ab", "c", ",", "12", ",", "abc", "}"};
    for (int k = 0; k < 200; k++) {
        struct err e = {0};
        struct grammar *g = grammar_cache_get(t->c, GRAMMAR_LARK, src, strlen(src), &e);
        if (!g) return NULL;
        struct matcher *m = matcher_new(g, &e);
        uint32_t mask[1];
        int good = 1;
        for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
            int id = -1;
            for (int j = 0; j < t->h->n; j++)
                if (!strcmp(t->h->tok[j], seq[i])) id = j;
            matcher_mask(m, mask);
            if (!(mask[id >> 5] >> (id & 31) & 1) || matcher_consume(m, id)) good = 0;
        }
        if (!matcher_done(m)) good = 0;
        matcher_free(m);
        grammar_free(g);
        t->ok += good;
    }
    return NULL;
}

Test(grammar_cache, shared_across_threads)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    struct grammar_cache *c = grammar_cache_new(h.vi, 4);
    pthread_t th[4];
    struct thr t[4];
    for (int i = 0; i < 4; i++) {
        t[i] = (struct thr){c, &h, 0};
        pthread_create(&th[i], NULL, thr_main, &t[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        cr_assert_eq(t[i].ok, 200);
    }
    grammar_cache_free(c);
    grammar_vocab_index_free(h.vi);
}

/* ---- JSON kinds and %json sub-grammars ---- */

Test(grammar_json, json_subgrammars_scoped_and_specials)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    char buf[2048];
    /* two %json sub-grammars (their rule names must not clash), between special tokens */
    struct grammar *g =
        compile_ok(&h, GRAMMAR_LARK,
                   "start: <tool_call> call <[2]>\n"
                   "call: %json{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                   "\"required\":[\"a\"],\"additionalProperties\":false}\n"
                   "    | \"x\" %json{\"enum\":[true]}\n");
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    consume_ok(&h, m, "<tool_call>");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "{|{\"|x|"); /* no whitespace before the first { */
    consume_ok(&h, m, "{\"");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "a|");
    consume_ok(&h, m, "a");
    consume_ok(&h, m, "\":");
    consume_ok(&h, m, "12");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "}|1|2|12|"); /* tidy JSON: no whitespace before } */
    consume_ok(&h, m, "}");
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "</tool_call>|"); /* no whitespace after the last } */
    consume_ok(&h, m, "</tool_call>");
    cr_assert(matcher_done(m));
    cr_assert_eq(matcher_rollback(m, 6), 0);
    consume_ok(&h, m, "x");
    consume_ok(&h, m, "true");
    consume_ok(&h, m, "</tool_call>");
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g);
    compile_err(&h, "start: %json{\"type\":\"object\",\"if\":{\"minimum\":1}}", "%json");
    grammar_vocab_index_free(h.vi);
}

Test(grammar_json, schema_and_object_kinds)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    const char *schema = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"maxItems\":2}";
    struct grammar *g = compile_ok(&h, GRAMMAR_JSON_SCHEMA, schema);
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    consume_ok(&h, m, "[");
    consume_ok(&h, m, "1");
    consume_ok(&h, m, ",");
    consume_ok(&h, m, "2");
    cr_assert_neq(matcher_consume(m, hv_find(&h, ",")), 0); /* maxItems */
    consume_ok(&h, m, "]");
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g);
    g = compile_ok(&h, GRAMMAR_JSON_OBJECT, "");
    m = matcher_new(g, &e);
    char buf[2048];
    mask_str(&h, m, buf, sizeof buf);
    cr_assert_str_eq(buf, "{|{\"|");
    consume_ok(&h, m, "{");
    consume_ok(&h, m, "}");
    cr_assert(matcher_done(m));
    matcher_free(m);
    grammar_free(g);
    struct grammar *bad = grammar_compile(h.vi, GRAMMAR_JSON_SCHEMA, "{\"type\":", 8, &e);
    cr_assert_null(bad);
    cr_assert_neq(e.code, ERR_OK);
    grammar_vocab_index_free(h.vi);
}

/* ---- robustness: mutated grammars and regexes never crash (run under ASan in make test) ---- */

Test(grammar_lark, mutated_sources_fail_cleanly)
{
    struct hv h;
    hv_init(&h, small_toks, sizeof small_toks / sizeof small_toks[0], 3);
    static const char *seeds[] = {
        "start: obj\nobj: \"{\" (pair (\",\" pair)*)? \"}\"\npair: STR \":\" val\n"
        "val: STR | /-?[0-9]+/ | obj\nSTR: /\"[a-z]*\"/\n%ignore /[ \\n]+/\n",
        "%import common.INT\n?start: item+ [\"-\"] -> x\nitem: INT ~ 2..3 | <tool_call> | A{1,2}\n"
        "A: \"a\"..\"c\" \"x\"i\n",
        "start: %json{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}\n",
        "start: /(a|b){2,40}[^\\u00e9-\\uffff]+\\d*$/ | <[2]>\n",
    };
    static const char junk[] = "\"/()[]{}|*+?~:.,<>%\\\n ab_AZ09#-";
    for (int k = 0; k < 3000; k++) {
        const char *seed = seeds[k % 4];
        char src[512];
        size_t n = strlen(seed);
        memcpy(src, seed, n + 1);
        int edits = 1 + (int)(rnd() % 4);
        for (int j = 0; j < edits; j++) {
            size_t pos = rnd() % n;
            switch (rnd() % 3) {
            case 0:
                src[pos] = junk[rnd() % (sizeof junk - 1)];
                break; /* replace */
            case 1:
                memmove(src + pos, src + pos + 1, n - pos);
                n--;
                break; /* delete */
            default:   /* insert */
                if (n + 2 < sizeof src) {
                    memmove(src + pos + 1, src + pos, n - pos + 1);
                    src[pos] = junk[rnd() % (sizeof junk - 1)];
                    n++;
                }
            }
        }
        struct err e = {0};
        struct grammar *g = grammar_compile(h.vi, GRAMMAR_LARK, src, n, &e);
        if (!g) {
            cr_assert(e.msg[0] && e.code != ERR_OK, "failed without a message: %s", src);
            continue;
        }
        /* a compiled grammar must also run: a few masks and random allowed tokens */
        struct matcher *m = matcher_new(g, &e);
        cr_assert(m);
        for (int step = 0; step < 6; step++) {
            uint32_t mask[2];
            matcher_mask(m, mask);
            int allowed[64], na = 0;
            for (int t = 0; t < h.n; t++)
                if (mask[t >> 5] >> (t & 31) & 1) allowed[na++] = t;
            if (!na) break;
            cr_assert_eq(matcher_consume(m, allowed[rnd() % (uint32_t)na]), 0, "%s", src);
        }
        matcher_free(m);
        grammar_free(g);
    }
    /* regexes: random junk */
    for (int k = 0; k < 3000; k++) {
        char pat[24];
        int n = 1 + (int)(rnd() % 16);
        for (int j = 0; j < n; j++)
            pat[j] = junk[rnd() % (sizeof junk - 1)];
        struct err e = {0};
        int rc = rx_match_full(pat, (size_t)n, "ab", 2, &e);
        cr_assert(rc == 0 || rc == 1 || (rc == -1 && e.msg[0]));
    }
    grammar_vocab_index_free(h.vi);
}
