/* toolstyles: the call styles that are not a JSON region (engine/text/family.h) — CALL_DICT
 * (gemma4's <|tool_call>call:NAME{k:<|"|>v<|"|>}<tool_call|>) and XML_PARAMS (Qwen3.5's
 * <tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>…): body parsing and conversion to
 * JSON arguments, the reply scanner over every split of a reply, and the forced-call grammars
 * compiled against a byte vocabulary with and without the markers as special tokens. */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "engine/text/family.h"
#include "grammar/grammar.h"
#include "serve/forced.h"
#include "serve/toolcall.h"

/* An XML_PARAMS family as Qwen3.5's descriptor declares it (the real one is chat_qwen35.c's). */
static const struct family XMLFAM = {
    .name = "xml-test",
    .tool_style = FAMILY_TOOLS_XML_PARAMS,
    .tool_call = {"<tool_call>", "</tool_call>"},
    .tool_syntax = {.fn_open = "<function=", .fn_close = "</function>",
                    .param_open = "<parameter=", .param_close = "</parameter>"},
};

#define QT "<|\"|>"

static char *dict(const char *body)
{
    char *name = NULL;
    struct buf a = {0};
    int rc = toolcall_parse_dict(body, strlen(body), &family_gemma4.tool_syntax, &name, &a);
    if (rc) {
        cr_assert_null(name);
        buf_free(&a);
        return NULL;
    }
    struct buf o = {0};
    buf_printf(&o, "%s%.*s", name, (int)a.len, a.data ? a.data : "");
    free(name);
    buf_free(&a);
    return buf_steal(&o);
}

Test(toolstyles, dict_bodies_to_json)
{
    char *r = dict("call:f{a:" QT "x, \"y\"\n" QT ",b:5,c:-1.5e3,d:true,e:None,f:[1," QT "z" QT
                   "],g:{h:null,i:False},j:[]}");
    cr_assert_str_eq(r, "f{\"a\": \"x, \\\"y\\\"\\n\", \"b\": 5, \"c\": -1.5e3, \"d\": true, "
                        "\"e\": null, \"f\": [1, \"z\"], \"g\": {\"h\": null, \"i\": false}, "
                        "\"j\": []}");
    free(r);
    r = dict("call:get_weather{}");
    cr_assert_str_eq(r, "get_weather{}");
    free(r);
    r = dict(" call:f{ " QT "quoted key" QT ": 1 , b: " QT "é中" QT " } ");
    cr_assert_str_eq(r, "f{\"quoted key\": 1, \"b\": \"é中\"}");
    free(r);
    const char *bad[] = {"call:f{a:}", "call:f{a:1", "call:{}", "call:f{a:1,a:2}",
                         "call:f{a:" QT "x}", "call:f{a:01}", "call:f{a:1} x", "f{a:1}",
                         "call:f{a:inf}", "call:f {a:1}", "call:f{:1}", "call:f{a:1,}",
                         "call:f{a:[1,]}", "call:f{a:\"x\"}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_assert_null(dict(bad[i]), "accepted: %s", bad[i]);
}

static char *xml(const char *body, const json_t *tools)
{
    char *name = NULL;
    struct buf a = {0};
    if (toolcall_parse_xml(body, strlen(body), &XMLFAM.tool_syntax, tools, &name, &a)) {
        cr_assert_null(name);
        buf_free(&a);
        return NULL;
    }
    struct buf o = {0};
    buf_printf(&o, "%s%.*s", name, (int)a.len, a.data ? a.data : "");
    free(name);
    buf_free(&a);
    return buf_steal(&o);
}

#define P(k, v) "<parameter=" k ">\n" v "\n</parameter>\n"

Test(toolstyles, xml_bodies_to_json_by_declared_type)
{
    json_t *tools = json_loads(
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\","
        "\"properties\":{\"s\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},\"x\":{\"type\":"
        "\"number\"},\"b\":{\"type\":\"boolean\"},\"o\":{\"type\":\"object\"},\"l\":{\"type\":"
        "\"array\"},\"u\":{},\"sn\":{\"type\":[\"string\",\"null\"]}}}}}]", 0, NULL);
    cr_assert_not_null(tools);
    char *r = xml("\n<function=f>\n" P("s", "5") P("n", "5") P("b", "True") P("o", "{\"k\": 1}")
                  P("l", "[1, 2]") P("u", "hello") P("x", "2") P("sn", "None") "</function>\n",
                  tools);
    cr_assert_str_eq(r, "f{\"s\": \"5\", \"n\": 5, \"b\": true, \"o\": {\"k\": 1}, \"l\": [1, 2], "
                        "\"u\": \"hello\", \"x\": 2, \"sn\": null}");
    free(r);
    /* a string keeps its lines and its inner newlines; one newline each side is layout */
    r = xml("\n<function=f>\n" P("s", "\nline 1\nline 2\n") P("sn", "\"q\"") "</function>\n", tools);
    cr_assert_str_eq(r, "f{\"s\": \"\\nline 1\\nline 2\\n\", \"sn\": \"\\\"q\\\"\"}");
    free(r);
    /* a value that is not of the declared type stays the text the model wrote */
    r = xml("<function=f>" P("n", "abc") P("b", "yes") P("o", "[1]") "</function>", tools);
    cr_assert_str_eq(r, "f{\"n\": \"abc\", \"b\": \"yes\", \"o\": \"[1]\"}");
    free(r);
    /* an undeclared tool: values read as JSON where they parse */
    r = xml("<function=g>" P("a", "5") P("b", "\"s\"") P("c", "text") "</function>", NULL);
    cr_assert_str_eq(r, "g{\"a\": 5, \"b\": \"s\", \"c\": \"text\"}");
    free(r);
    r = xml("\n<function=g>\n</function>\n", tools);
    cr_assert_str_eq(r, "g{}");
    free(r);
    const char *bad[] = {"<function=f>" P("a", "1"), "<function=f>" P("a", "1") P("a", "2") "</function>",
                         "<parameter=a>\n1\n</parameter>\n</function>", "<function=f>" P("a", "1") "</function>x",
                         "<function=>" "</function>", "<function=f>\n<parameter=a>\n1\n</function>",
                         "<function=f>junk</function>", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *got = xml(bad[i], tools);
        cr_assert_null(got, "accepted: %s -> %s", bad[i], got);
    }
    json_decref(tools);
}

/* ---- the scanner: every split of a reply gives the same events ---- */

struct rec {
    struct buf log;
    bool last_text;
};

static int r_text(void *c, int ch, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct rec *r = c;
    if (n && r->last_text) {
        r->log.len--;
        buf_printf(&r->log, "%.*s]", (int)n, s);
    } else if (n) {
        buf_printf(&r->log, "T[%.*s]", (int)n, s);
    }
    if (n) r->last_text = true;
    return 0;
}
static int r_reason(void *c, int ch, const char *s, size_t n) { return 0; }
static int r_call(void *c, int ch, const char *name, const char *args, size_t n)
{
    struct rec *r = c;
    r->last_text = false;
    buf_printf(&r->log, "C%s(%.*s)", name, (int)n, args);
    return 0;
}
static int r_finish(void *c, int ch, enum finish_reason why, const char *stop)
{
    ((struct rec *)c)->last_text = false;
    buf_printf(&((struct rec *)c)->log, "F%d", (int)why);
    return 0;
}

/* The log of reply through f's scanner cut at a and b (0 <= a <= b <= len). */
static char *scan(const struct family *f, const json_t *tools, const char *reply, size_t a, size_t b)
{
    struct rec r = {0};
    struct reply_sink out = {.ctx = &r, .text = r_text, .reasoning = r_reason,
                             .tool_call = r_call, .finish = r_finish};
    struct toolcall_scanner sc;
    toolcall_init_family(&sc, &out, f, tools);
    struct reply_sink *in = toolcall_sink(&sc);
    size_t n = strlen(reply), cut[4] = {0, a, b, n};
    for (int i = 0; i < 3; i++)
        cr_assert_eq(in->text(in->ctx, 0, reply + cut[i], cut[i + 1] - cut[i], NULL, 0), 0);
    cr_assert_eq(in->finish(in->ctx, 0, FINISH_STOP, NULL), 0);
    toolcall_deinit(&sc);
    char *res = strdup(r.log.data ? r.log.data : "");
    buf_free(&r.log);
    return res;
}

static void every_split(const struct family *f, const json_t *tools, const char *reply,
                        const char *want)
{
    size_t n = strlen(reply);
    for (size_t a = 0; a <= n; a++)
        for (size_t b = a; b <= n; b += 3) {
            char *got = scan(f, tools, reply, a, b);
            cr_assert_str_eq(got, want, "cut at %zu, %zu", a, b);
            free(got);
        }
}

Test(toolstyles, dict_scanner_every_split)
{
    every_split(&family_gemma4, NULL,
                "Sure.\n<|tool_call>call:get_weather{city:" QT "Paris" QT ",days:3}<tool_call|>"
                "<|tool_call>call:b{}<tool_call|>",
                "T[Sure.]Cget_weather({\"city\": \"Paris\", \"days\": 3})Cb({})F3");
    /* malformed: the region is text, markers intact */
    every_split(&family_gemma4, NULL, "x<|tool_call>call:f{a:}<tool_call|>",
                "T[x<|tool_call>call:f{a:}<tool_call|>]F1");
    /* never closed: text */
    every_split(&family_gemma4, NULL, "<|tool_call>call:f{a:1}", "T[<|tool_call>call:f{a:1}]F1");
}

Test(toolstyles, xml_scanner_every_split)
{
    json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                               "{\"properties\":{\"n\":{\"type\":\"integer\"}}}}}]", 0, NULL);
    every_split(&XMLFAM, tools,
                "Let me see.\n\n<tool_call>\n<function=f>\n<parameter=n>\n7\n</parameter>\n"
                "<parameter=q>\nhi there\n</parameter>\n</function>\n</tool_call>",
                "T[Let me see.]Cf({\"n\": 7, \"q\": \"hi there\"})F3");
    json_decref(tools);
}

/* ---- forced-call grammars ---- */

/* A vocabulary of the 256 single bytes plus (specials) eos and the style's markers. */
struct bv {
    const char *tok[300];
    uint32_t len[300];
    bool sp[300];
    char bytes[256][2];
    int n, n_sp;
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

static void bv_init(struct bv *v, const char *const *specials)
{
    memset(v, 0, sizeof *v);
    v->tok[v->n] = "<eos>", v->len[v->n] = 5, v->sp[v->n++] = true;
    for (int i = 0; specials && specials[i]; i++)
        v->tok[v->n] = specials[i], v->len[v->n] = (uint32_t)strlen(specials[i]), v->sp[v->n++] = true;
    v->n_sp = v->n;
    for (int c = 1; c < 256; c++) {
        v->bytes[c][0] = (char)c;
        v->tok[v->n] = v->bytes[c], v->len[v->n] = 1, v->sp[v->n++] = false;
    }
    v->gv = (struct grammar_vocab){v->n, v->tok, v->len, v->sp, 0};
    struct err e = {0};
    v->vi = grammar_vocab_index_new(&v->gv, &e);
    cr_assert(v->vi, "%s", e.msg);
}

/* Whether the grammar takes text (specials matched greedily where the vocabulary has them) and
 * is done at its end. */
static bool takes(const struct bv *v, const char *lark, const char *text)
{
    struct err e = {0};
    struct grammar *g = grammar_compile(v->vi, GRAMMAR_LARK, lark, strlen(lark), &e);
    cr_assert(g, "compile: %s\n%s", e.msg, lark);
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m);
    bool ok = true;
    for (size_t i = 0, n = strlen(text); i < n && ok;) {
        int tok = -1;
        for (int s = 1; s < v->n_sp; s++)
            if (!strncmp(text + i, v->tok[s], v->len[s])) tok = s;
        if (tok < 0) tok = v->n_sp + (unsigned char)text[i] - 1;
        ok = matcher_consume(m, tok) == 0;
        i += v->len[tok];
    }
    ok = ok && matcher_accepting(m);
    matcher_free(m);
    grammar_free(g);
    return ok;
}

static char *forced(const struct family *f, unsigned specials, const char *name, const char *schema,
                    struct err *e)
{
    json_t *s = schema ? json_loads(schema, 0, NULL) : NULL;
    struct forced_tool t = {name, s};
    char *src = forced_lark_marks(f, specials, &t, 1, e);
    json_decref(s);
    return src;
}

#define WEATHER                                                                                  \
    "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},\"Days\":{\"type\":"    \
    "\"integer\"},\"unit\":{\"enum\":[\"c\",\"f\"]},\"tags\":{\"type\":\"array\",\"items\":"     \
    "{\"type\":\"string\"}},\"opts\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":"     \
    "[\"boolean\",\"null\"]}}}},\"required\":[\"city\"]}"

Test(toolstyles, dict_forced_grammar_with_and_without_special_markers)
{
    static const char *const SP[] = {"<|tool_call>", "<tool_call|>", QT, NULL};
    for (int mode = 0; mode < 2; mode++) {
        struct bv v;
        bv_init(&v, mode ? SP : NULL);
        struct err e = {0};
        char *src = forced(&family_gemma4, mode ? 7u : 0u, "get_weather", WEATHER, &e);
        cr_assert_not_null(src, "%s", e.msg);
        /* keys in the template's dictsort order: city, Days, opts, tags, unit */
        const char *good[] = {
            "<|tool_call>call:get_weather{city:" QT "Paris" QT "}<tool_call|>",
            "<|tool_call>call:get_weather{city:" QT "a <|\"| b\n" QT ",Days:3,opts:{x:null},"
            "tags:[" QT "t" QT "," QT QT "],unit:" QT "c" QT "}<tool_call|>",
            "<|tool_call>call:get_weather{city:" QT QT ",unit:" QT "f" QT "}<tool_call|>",
        };
        const char *badl[] = {
            "<|tool_call>call:get_weather{}<tool_call|>",                                /* required */
            "<|tool_call>call:get_weather{Days:3,city:" QT "P" QT "}<tool_call|>",       /* order */
            "<|tool_call>call:get_weather{city:" QT "P" QT ",zz:1}<tool_call|>",         /* extra */
            "<|tool_call>call:get_weather{city:" QT "P" QT ",Days:1.5}<tool_call|>",     /* type */
            "<|tool_call>call:get_weather{city:" QT "P" QT ",unit:" QT "k" QT "}<tool_call|>",
            "<|tool_call>call:other{city:" QT "P" QT "}<tool_call|>",
        };
        for (size_t i = 0; i < sizeof good / sizeof *good; i++)
            cr_assert(takes(&v, src, good[i]), "mode %d rejects %s\n%s", mode, good[i], src);
        for (size_t i = 0; i < sizeof badl / sizeof *badl; i++)
            cr_assert_not(takes(&v, src, badl[i]), "mode %d accepts %s", mode, badl[i]);
        /* what the grammar takes, the scanner turns into the call */
        char *log = scan(&family_gemma4, NULL, good[1], 0, 0);
        cr_assert_str_eq(log, "Cget_weather({\"city\": \"a <|\\\"| b\\n\", \"Days\": 3, \"opts\": "
                              "{\"x\": null}, \"tags\": [\"t\", \"\"], \"unit\": \"c\"})F3");
        free(log);
        free(src);
        /* permissive: any dict */
        src = forced(&family_gemma4, mode ? 7u : 0u, "f", NULL, &e);
        cr_assert_not_null(src, "%s", e.msg);
        cr_assert(takes(&v, src, "<|tool_call>call:f{a:[1,{b:" QT "x" QT "}],c:-2.5e1,d:true}<tool_call|>"));
        cr_assert(takes(&v, src, "<|tool_call>call:f{}<tool_call|>"));
        cr_assert_not(takes(&v, src, "<|tool_call>call:f{a:x}<tool_call|>"));
        free(src);
        grammar_vocab_index_free(v.vi);
    }
    /* keywords the style cannot write are a 400 naming them */
    struct err e = {0};
    cr_assert_null(forced(&family_gemma4, 0, "f",
                          "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                          "\"pattern\":\"x+\"}}}", &e));
    cr_assert_eq(e.code, ERR_INVALID);
    cr_assert(strstr(e.msg, "'pattern'"), "%s", e.msg);
}

Test(toolstyles, xml_forced_grammar_with_and_without_special_markers)
{
    static const char *const SP[] = {"<tool_call>", "</tool_call>", NULL};
    const char *schema = "{\"type\":\"object\",\"properties\":{\"path\":{\"type\":\"string\"},"
                         "\"n\":{\"type\":\"integer\",\"minimum\":1},\"all\":{\"type\":\"boolean\"},"
                         "\"mode\":{\"type\":\"string\",\"enum\":[\"r\",\"w\"]}},\"required\":[\"path\"]}";
    for (int mode = 0; mode < 2; mode++) {
        struct bv v;
        bv_init(&v, mode ? SP : NULL);
        struct err e = {0};
        char *src = forced(&XMLFAM, mode ? 3u : 0u, "read", schema, &e);
        cr_assert_not_null(src, "%s", e.msg);
        const char *good[] = {
            "<tool_call>\n<function=read>\n" P("path", "/etc/hosts") "</function>\n</tool_call>",
            "<tool_call>\n<function=read>\n" P("path", "a\n</parameter\nb") P("n", "3")
                P("all", "True") P("mode", "w") "</function>\n</tool_call>",
        };
        const char *badl[] = {
            "<tool_call>\n<function=read>\n</function>\n</tool_call>",
            "<tool_call>\n<function=read>\n" P("path", "p") P("n", "0") "</function>\n</tool_call>",
            "<tool_call>\n<function=read>\n" P("path", "p") P("all", "true") "</function>\n</tool_call>",
            "<tool_call>\n<function=read>\n" P("n", "2") P("path", "p") "</function>\n</tool_call>",
            "<tool_call>\n<function=read>\n" P("path", "p") P("mode", "x") "</function>\n</tool_call>",
        };
        for (size_t i = 0; i < sizeof good / sizeof *good; i++)
            cr_assert(takes(&v, src, good[i]), "mode %d rejects %s\n%s", mode, good[i], src);
        for (size_t i = 0; i < sizeof badl / sizeof *badl; i++)
            cr_assert_not(takes(&v, src, badl[i]), "mode %d accepts %s", mode, badl[i]);
        json_t *tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"read\","
                                   "\"parameters\":{\"properties\":{\"path\":{\"type\":\"string\"},"
                                   "\"n\":{\"type\":\"integer\"},\"all\":{\"type\":\"boolean\"}}}}}]",
                                   0, NULL);
        char *log = scan(&XMLFAM, tools, good[1], 0, 0);
        cr_assert_str_eq(log, "Cread({\"path\": \"a\\n</parameter\\nb\", \"n\": 3, \"all\": true, "
                              "\"mode\": \"w\"})F3");
        free(log);
        json_decref(tools);
        free(src);
        src = forced(&XMLFAM, mode ? 3u : 0u, "any", NULL, &e);
        cr_assert_not_null(src, "%s", e.msg);
        cr_assert(takes(&v, src, "<tool_call>\n<function=any>\n" P("k", "v") P("j", "[1]")
                                 "</function>\n</tool_call>"));
        cr_assert(takes(&v, src, "<tool_call>\n<function=any>\n</function>\n</tool_call>"));
        free(src);
        grammar_vocab_index_free(v.vi);
    }
    struct err e = {0};
    cr_assert_null(forced(&XMLFAM, 0, "f",
                          "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\","
                          "\"maxLength\":3}}}", &e));
    cr_assert(strstr(e.msg, "'maxLength'"), "%s", e.msg);
}
