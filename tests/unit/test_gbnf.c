/* GBNF (llama.cpp's grammar format) -> lark -> the grammar engine: translation errors name the
 * rule and line; llama.cpp's example grammars (tests/grammar/gbnf/, MIT, see README there)
 * compile, accept sample texts and reject broken ones, and constrain random walks to texts an
 * independent checker (jansson, PCRE2) accepts. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <criterion/criterion.h>
#include <jansson.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/gbnf.h"
#include "grammar/grammar.h"
#define GRAMMAR_TESTLIB_SEED 0x9e3779b97f4a7c15ull
#include "grammar_testlib.h"

/* Byte vocabulary: token 0 = eos (special), 1..255 = single bytes, then a few pieces. */
static const char *pieces[] = {"- ", "\n- ", "int ", "return ", "1. ", "e4", "Nf3", "{\"",
                               "\": ", ", ", "true", "null", "=", "+1", "ab", "(x)"};
#define NP ((int)(sizeof pieces / sizeof *pieces))
#define NT (256 + NP)
static const char *toks[NT];
static uint32_t lens[NT];
static bool sp[NT];
static char one[256][2];

static struct grammar_vocab_index *vocab(void)
{
    toks[0] = "<eos>";
    lens[0] = 5;
    sp[0] = true;
    for (int b = 1; b < 256; b++) {
        one[b][0] = (char)b;
        toks[b] = one[b];
        lens[b] = 1;
    }
    for (int i = 0; i < NP; i++) {
        toks[256 + i] = pieces[i];
        lens[256 + i] = (uint32_t)strlen(pieces[i]);
    }
    struct grammar_vocab gv = {NT, toks, lens, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    return vi;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    struct buf b = {0};
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        buf_append(&b, tmp, n);
    fclose(f);
    buf_puts(&b, "");
    return buf_steal(&b);
}

static struct grammar *compile_file(struct grammar_vocab_index *vi, const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "tests/grammar/gbnf/%s.gbnf", name);
    char *src = slurp(path);
    struct err e = {0};
    struct grammar *g = grammar_compile(vi, GRAMMAR_GBNF, src, strlen(src), &e);
    cr_assert(g, "%s: %s", name, e.msg);
    free(src);
    return g;
}

/* Feeds s byte by byte; true if every byte is allowed and eos is allowed at the end. */
static bool accepts(struct grammar *g, const char *s)
{
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m, "%s", e.msg);
    bool ok = true;
    uint32_t mask[(NT + 31) / 32];
    for (const unsigned char *p = (const unsigned char *)s; *p && ok; p++) {
        matcher_mask(m, mask);
        ok = (mask[*p >> 5] >> (*p & 31) & 1) && matcher_consume(m, *p) == 0;
    }
    if (ok) {
        matcher_mask(m, mask);
        ok = mask[0] & 1;
    }
    matcher_free(m);
    return ok;
}

/* Random walk under the mask (ends with eos when allowed, 1 in 3, or after max steps); returns
 * the text if the grammar accepted it, else NULL. Every sampled token must be consumable. */
static char *walk(struct grammar *g, int max)
{
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    uint32_t mask[(NT + 31) / 32];
    struct buf out = {0};
    buf_puts(&out, "");
    bool accepted = false;
    for (int step = 0; step < max; step++) {
        matcher_mask(m, mask);
        cr_assert_eq(matcher_status(m, &e), 0, "%s", e.msg);
        int allowed[NT], n = 0;
        for (int t = 1; t < NT; t++)
            if (mask[t >> 5] >> (t & 31) & 1) allowed[n++] = t;
        if ((mask[0] & 1) && (n == 0 || rnd() % 3 == 0)) {
            accepted = true;
            break;
        }
        cr_assert_gt(n, 0, "dead end after %s", out.data);
        int t = allowed[rnd() % (uint32_t)n];
        cr_assert_eq(matcher_consume(m, t), 0);
        buf_append(&out, toks[t], lens[t]);
    }
    matcher_free(m);
    if (!accepted) {
        buf_free(&out);
        return NULL;
    }
    return buf_steal(&out);
}

static bool pcre_whole(const char *pat, const char *s)
{
    pcre2_code *re = pcre_full(pat);
    bool ok = pcre_full_match(re, s, strlen(s));
    pcre2_code_free(re);
    return ok;
}

/* Walks until n accepted texts, each checked by check(); returns how many were found. */
static int walks(struct grammar *g, int tries, int max, bool (*check)(const char *),
                 const char *name)
{
    int found = 0;
    for (int k = 0; k < tries; k++) {
        char *t = walk(g, max);
        if (!t) continue;
        cr_assert(check(t), "%s: the grammar produced text the checker rejects: %s", name, t);
        found++;
        free(t);
    }
    return found;
}

static bool json_ok(const char *s)
{
    json_error_t je;
    json_t *v = json_loads(s, JSON_DECODE_ANY, &je);
    json_decref(v);
    return v != NULL;
}
static bool list_ok(const char *s)
{
    return pcre_whole("(- [^\\r\\n\\x0b\\x0c\\x{85}\\x{2028}\\x{2029}]+\\n)+", s);
}
static bool arith_ok(const char *s)
{
    /* a line: expr "=" ws term "\n", with terms ident / num / parenthesized (any depth) */
    return pcre_whole("(?:(?<t>(?:[a-z][a-z0-9_]*|[0-9]+)[ \\t\\n]*|\\([ \\t\\n]*(?&e)\\)[ \\t\\n]*)"
                     "(?<e>(?&t)(?:[-+*/](?&t))*)?)?"
                     "(?:(?&e)=[ \\t\\n]*(?&t)\\n)+",
                     s);
}
static bool chess_ok(const char *s)
{
    const char *mv = "(?:(?:(?:[a-h]x)?[a-h][1-8](?:=[NBKQR])?|[NBKQR][a-h]?[1-8]?x?[a-h][1-8]|"
                     "O-O(?:-O)?)[+#]?)";
    char pat[1024];
    snprintf(pat, sizeof pat, "1\\. %s %s\\n(?:[1-9][0-9]?\\. %s %s\\n)+", mv, mv, mv, mv);
    return pcre_whole(pat, s);
}

Test(gbnf, llama_cpp_examples_compile_accept_and_reject)
{
    struct grammar_vocab_index *vi = vocab();
    struct grammar *g = compile_file(vi, "json");
    cr_expect(accepts(g, "{\"a\": [1, 2.5, \"x\\n\"], \"b\": {\"c\": null}}"));
    cr_expect(accepts(g, "{}"));
    cr_expect(!accepts(g, "{\"a\" 1}"));
    cr_expect(!accepts(g, "[1]"), "root is an object");
    grammar_free(g);
    g = compile_file(vi, "arithmetic");
    cr_expect(accepts(g, "1+2= 3\n"));
    cr_expect(accepts(g, "x*(y+1)=z\nfoo_1-2=(4)\n"));
    cr_expect(!accepts(g, "=3\n"));
    cr_expect(!accepts(g, "1+=2\n"));
    grammar_free(g);
    g = compile_file(vi, "c");
    cr_expect(accepts(g, "int main(){return 0;}"));
    cr_expect(accepts(g, "int f(int x){x = x+1;while(x<10){x = x*2;}return x;}"));
    cr_expect(accepts(g, "float g(){// hi\nreturn 1;}"));
    cr_expect(!accepts(g, "int main(){return 0}"));
    grammar_free(g);
    g = compile_file(vi, "chess");
    cr_expect(accepts(g, "1. e4 e5\n2. Nf3 Nc6\n3. O-O exd4+\n"));
    cr_expect(!accepts(g, "1. e4 e5\n"), "at least one more move line");
    cr_expect(!accepts(g, "1. e9 e5\n2. a1 a2\n"));
    grammar_free(g);
    g = compile_file(vi, "list");
    cr_expect(accepts(g, "- a\n- b c\n"));
    cr_expect(!accepts(g, "-a\n"));
    cr_expect(!accepts(g, "- a"));
    grammar_free(g);
    grammar_vocab_index_free(vi);
}

Test(gbnf, examples_constrain_random_walks)
{
    struct grammar_vocab_index *vi = vocab();
    struct {
        const char *name;
        bool (*check)(const char *);
        int max;
    } cases[] = {{"json", json_ok, 60}, {"list", list_ok, 40}, {"arithmetic", arith_ok, 40},
                 {"chess", chess_ok, 60}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        struct grammar *g = compile_file(vi, cases[i].name);
        int found = walks(g, 60, cases[i].max, cases[i].check, cases[i].name);
        cr_expect_gt(found, 0, "%s: no random walk reached an accepting state", cases[i].name);
        grammar_free(g);
    }
    /* c: every walk stays a viable prefix (consume never fails: checked inside walk) */
    struct grammar *g = compile_file(vi, "c");
    for (int k = 0; k < 20; k++)
        free(walk(g, 40));
    grammar_free(g);
    grammar_vocab_index_free(vi);
}

static void gerr(const char *src, const char *needle)
{
    struct buf out = {0};
    struct err e = {0};
    cr_assert_eq(gbnf_to_lark(src, strlen(src), &out, &e), -1, "accepted: %s", src);
    cr_assert_eq(e.code, ERR_INVALID);
    cr_assert(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
    buf_free(&out);
}

Test(gbnf, errors_name_rule_and_line)
{
    gerr("root ::= a\n", "undefined rule a");
    gerr("root ::= x\nx ::= \"a\"\nx ::= \"b\"\n", "line 3, rule x: rule defined twice");
    gerr("a ::= \"x\"\n", "no rule named root");
    gerr("root ::= <[123]>\n", "rule root: token references");
    gerr("root ::= \"abc\n", "line break inside a literal");
    gerr("root ::= [a-\n", "line break inside a literal or class");
    gerr("root ::= \"\\q\"\n", "unknown escape \\q");
    gerr("root ::= (\"a\"\n", "')' expected");
    gerr("root ::= \"a\"{3,2}\n", "n < m");
    gerr("root ::= \"a\"{2000000}\n", "above 1000000");
    gerr("root = \"a\"\n", "'::=' expected");
    gerr("root ::= [z-a]\n", "out of order");
    /* through grammar_compile: the same message, ERR_INVALID (a 400) */
    struct grammar_vocab_index *vi = vocab();
    struct err e = {0};
    const char *src = "root ::= item+\nitem ::= \"- \" txt \"\\n\"\n";
    cr_assert_null(grammar_compile(vi, GRAMMAR_GBNF, src, strlen(src), &e));
    cr_assert(strstr(e.msg, "undefined rule txt"), "%s", e.msg);
    /* multi-line rules: continuation after `|`, inside groups, comments; escapes */
    src = "# comment\nroot ::= a |\n  b # tail\na ::= (\"x\"\n  \"y\")\nb ::= [\\x41-\\u0043] "
          "\"\\U0001F600\"?\n";
    struct grammar *g = grammar_compile(vi, GRAMMAR_GBNF, src, strlen(src), &e);
    cr_assert(g, "%s", e.msg);
    cr_expect(accepts(g, "xy"));
    cr_expect(accepts(g, "B"));
    cr_expect(accepts(g, "C\xF0\x9F\x98\x80"));
    cr_expect(!accepts(g, "D"));
    grammar_free(g);
    grammar_vocab_index_free(vi);
}

/* Review finding D1: each repetition suffix is written exactly once, the same way in a regex
 * terminal and in a lark rule (one helper, emit_suffix). */
Test(gbnf, repetition_suffix_written_once)
{
    const char *src = "root ::= \"a\"* \"b\"+ \"c\"? \"d\"{2} \"e\"{2,} \"f\"{2,3} x* x+ x? x{2} "
                      "x{2,} x{2,3} x{,2}\nx ::= \"y\"\n";
    struct buf out = {0};
    struct err e = {0};
    cr_assert_eq(gbnf_to_lark(src, strlen(src), &out, &e), 0, "%s", e.msg);
    cr_assert_str_eq(out.data,
                     "start: g0\n"
                     "g0: /(?:a)*(?:b)+(?:c)?(?:d){2,2}(?:e){2,}(?:f){2,3}/ (g1)* (g1)+ (g1)? "
                     "(g1){2,2} (g1){2,} (g1){2,3} (g1){0,2}\n"
                     "g1: /y/\n");
    buf_free(&out);
}
