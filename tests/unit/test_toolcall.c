/* toolcall: the hermes reply scanner — regions split across deltas, several calls, malformed
 * regions as text, whitespace around calls, finish reasons, and every split point of a reply. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "serve/emitter.h"
#include "serve/toolcall.h"
#include "engine/text/family.h"

struct rec {
    struct buf log; /* "T[..]" text, "C<name>(<args>)" calls, "F<why>:<stop>" */
    int n_lp;
    bool refuse, last_text;
};

static int r_text(void *c, int ch, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct rec *r = c;
    if (n && r->last_text) { /* merged: results do not depend on how deltas were cut */
        r->log.len--;
        buf_printf(&r->log, "%.*s]", (int)n, s);
    } else if (n) {
        buf_printf(&r->log, "T[%.*s]", (int)n, s);
    }
    if (n) r->last_text = true;
    r->n_lp += nl;
    return r->refuse ? -1 : 0;
}
static int r_reason(void *c, int ch, const char *s, size_t n)
{
    ((struct rec *)c)->last_text = false;
    buf_printf(&((struct rec *)c)->log, "R[%.*s]", (int)n, s);
    return 0;
}
static int r_call(void *c, int ch, const char *name, const char *args, size_t n)
{
    struct rec *r = c;
    r->last_text = false;
    buf_printf(&r->log, "C%s(%.*s)", name, (int)n, args);
    return r->refuse ? -1 : 0;
}
static int r_finish(void *c, int ch, enum finish_reason why, const char *stop)
{
    ((struct rec *)c)->last_text = false;
    buf_printf(&((struct rec *)c)->log, "F%d:%s", (int)why, stop ? stop : "");
    return 0;
}

static struct reply_sink sink_of(struct rec *r)
{
    struct reply_sink s = {0};
    s.ctx = r;
    s.text = r_text;
    s.reasoning = r_reason;
    s.tool_call = r_call;
    s.finish = r_finish;
    return s;
}

/* Feeds toks through a scanner; returns the log with consecutive text deltas merged. */
static char *run(const char *const *toks, enum finish_reason why, const char *stop)
{
    struct rec r = {0};
    struct reply_sink out = sink_of(&r);
    struct toolcall_scanner sc;
    toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
    struct reply_sink *in = toolcall_sink(&sc);
    for (int i = 0; toks[i]; i++) {
        struct token_logprob lp = {.token = i};
        cr_assert_eq(in->text(in->ctx, 0, toks[i], strlen(toks[i]), &lp, 1), 0);
    }
    cr_assert_eq(in->finish(in->ctx, 0, why, stop), 0);
    toolcall_deinit(&sc);
    char *res = strdup(r.log.data ? r.log.data : "");
    buf_free(&r.log);
    return res;
}

#define CHECK(expect, why, stop, ...)                                                              \
    do {                                                                                           \
        const char *toks_[] = {__VA_ARGS__, NULL};                                                 \
        char *got_ = run(toks_, why, stop);                                                        \
        cr_assert_str_eq(got_, expect);                                                            \
        free(got_);                                                                                \
    } while (0)

Test(toolcall, plain_text_passes_through)
{
    CHECK("T[Hello world]F1:", FINISH_STOP, NULL, "Hello", " world");
    CHECK("T[a < b <tool x]F2:", FINISH_LENGTH, NULL, "a < b", " <tool", " x");
    CHECK("T[ends with <tool_ca]F1:", FINISH_STOP, NULL, "ends with <tool_ca");
    CHECK("T[trailing  \n]F1:", FINISH_STOP, NULL, "trailing  \n");
}

Test(toolcall, one_call_split_everywhere)
{
    CHECK("Cget_weather({\"city\": \"Paris\"})F3:", FINISH_STOP, NULL, "<tool_call>",
          "\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n", "</tool_call>");
    CHECK("Cget_weather({\"city\": \"Paris\"})F3:", FINISH_STOP, NULL, "<", "tool", "_", "call",
          ">", "\n{\"na", "me\": \"get_", "weather\", \"argu", "ments\": {\"city\"", ": \"Par",
          "is\"}}", "\n<", "/tool", "_call", ">");
}

Test(toolcall, text_before_and_between_calls)
{
    CHECK("T[Let me check.]Ca({})Cb({\"x\": [1, {\"y\": \"}\"}]})F3:", FINISH_STOP, NULL,
          "Let me check.\n\n", "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>",
          "\n", "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": [1, {\"y\": \"}\"}]}}\n",
          "</tool_call>", "\n");
}

Test(toolcall, text_after_a_call_is_text)
{
    CHECK("Ca({})T[\nand more]F3:", FINISH_STOP, NULL,
          "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>", "\nand more");
}

Test(toolcall, arguments_absent_or_null_are_empty_object)
{
    CHECK("Cping({})F3:", FINISH_STOP, NULL, "<tool_call>{\"name\": \"ping\"}</tool_call>");
    CHECK("Cping({})F3:", FINISH_STOP, NULL,
          "<tool_call>{\"arguments\": null, \"name\": \"ping\"}</tool_call>");
}

Test(toolcall, malformed_regions_are_text_with_markers)
{
    /* bad JSON */
    CHECK("T[<tool_call>\n{\"name\": \"a\", \"arguments\": {]}\n</tool_call>]F1:", FINISH_STOP,
          NULL, "<tool_call>\n{\"name\": \"a\", \"argu", "ments\": {]}\n</tool_call>");
    /* no name, name not a string, arguments not an object, not an object, duplicate key */
    CHECK("T[<tool_call>{\"arguments\": {}}</tool_call>]F1:", FINISH_STOP, NULL,
          "<tool_call>{\"arguments\": {}}</tool_call>");
    CHECK("T[<tool_call>{\"name\": 3}</tool_call>]F1:", FINISH_STOP, NULL,
          "<tool_call>{\"name\": 3}</tool_call>");
    CHECK("T[<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>]F1:", FINISH_STOP,
          NULL, "<tool_call>{\"name\": \"a\", \"arguments\": \"{}\"}</tool_call>");
    CHECK("T[<tool_call>[1]</tool_call>]F1:", FINISH_STOP, NULL, "<tool_call>[1]</tool_call>");
    CHECK("T[<tool_call>{\"name\": \"a\", \"name\": \"b\"}</tool_call>]F1:", FINISH_STOP, NULL,
          "<tool_call>{\"name\": \"a\", \"name\": \"b\"}</tool_call>");
    /* whitespace before a malformed region is kept */
    CHECK("T[x\n<tool_call>oops</tool_call>]F1:", FINISH_STOP, NULL, "x\n", "<tool_call>oops",
          "</tool_call>");
}

Test(toolcall, malformed_then_good_call)
{
    CHECK("T[<tool_call>{bad</tool_call>]Cb({\"k\": 1})F3:", FINISH_STOP, NULL,
          "<tool_call>{bad</tool_call>\n",
          "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"k\": 1}}\n</tool_call>");
}

Test(toolcall, unterminated_region_is_text_at_finish)
{
    CHECK("T[Hi <tool_call>\n{\"name\": \"a\", \"argum]F2:", FINISH_LENGTH, NULL, "Hi ",
          "<tool_call>\n{\"name\": \"a\", \"argum");
}

Test(toolcall, finish_reasons)
{
    /* a budget cut after a complete call stays length; a stop sequence stays stop */
    CHECK("Ca({})F2:", FINISH_LENGTH, NULL, "<tool_call>{\"name\":\"a\"}</tool_call>");
    CHECK("Ca({})F1:END", FINISH_STOP, "END", "<tool_call>{\"name\":\"a\"}</tool_call>");
    CHECK("T[no calls]F1:", FINISH_STOP, NULL, "no calls");
}

Test(toolcall, escaped_strings_and_unicode)
{
    /* an open marker inside a string of the body is just bytes */
    CHECK("Cs\xc3\xa9({\"q\": \"a\\\"<tool_call>\"})F3:", FINISH_STOP, NULL,
          "<tool_call>{\"name\": \"s\xc3\xa9\", \"arguments\": {\"q\": \"a\\\"",
          "<tool_call>\"}}</tool_call>");
    /* the first close marker ends the region (as in the template): inside a string it leaves
     * malformed JSON, which is text */
    CHECK(
        "T[<tool_call>{\"name\": \"a\", \"arguments\": {\"q\": \"</tool_call>\"}}</tool_call>]F1:",
        FINISH_STOP, NULL, "<tool_call>{\"name\": \"a\", \"arguments\": {\"q\": \"</tool_call>",
        "\"}}</tool_call>");
}

/* Every way of cutting a two-call reply into two deltas gives the same events. */
Test(toolcall, every_split_point)
{
    const char *reply =
        "Sure.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"<x>\"}}\n"
        "</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call>";
    const char *expect = "T[Sure.]Cf({\"a\": \"<x>\"})Cg({})F3:";
    size_t n = strlen(reply);
    for (size_t cut = 0; cut <= n; cut++) {
        char *a = strndup(reply, cut), *b = strdup(reply + cut);
        const char *toks[] = {a, b, NULL};
        char *got = run(toks, FINISH_STOP, NULL);
        cr_assert_str_eq(got, expect, "cut at %zu", cut);
        free(got);
        free(a);
        free(b);
    }
    /* and one byte at a time */
    char **bytes = calloc(n + 1, sizeof *bytes);
    for (size_t i = 0; i < n; i++)
        bytes[i] = strndup(reply + i, 1);
    char *got = run((const char *const *)bytes, FINISH_STOP, NULL);
    cr_assert_str_eq(got, expect);
    free(got);
    for (size_t i = 0; i < n; i++)
        free(bytes[i]);
    free(bytes);
}

Test(toolcall, no_marker_byte_leaks_before_decided)
{
    struct rec r = {0};
    struct reply_sink out = sink_of(&r);
    struct toolcall_scanner sc;
    toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
    struct reply_sink *in = toolcall_sink(&sc);
    in->text(in->ctx, 0, "ok <tool_c", 10, NULL, 0);
    cr_assert_str_eq(r.log.data, "T[ok]", "only text before the possible marker (and its space)");
    in->text(in->ctx, 0, "all>{\"name\":\"z\"}", 16, NULL, 0);
    cr_assert_str_eq(r.log.data, "T[ok]");
    in->text(in->ctx, 0, "</tool_call>", 12, NULL, 0);
    cr_assert_str_eq(r.log.data, "T[ok]Cz({})");
    toolcall_deinit(&sc);
    buf_free(&r.log);
}

Test(toolcall, no_tool_call_hook_keeps_regions_as_text)
{
    struct rec r = {0};
    struct reply_sink out = sink_of(&r);
    out.tool_call = NULL;
    struct toolcall_scanner sc;
    toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
    struct reply_sink *in = toolcall_sink(&sc);
    const char *t = "<tool_call>{\"name\":\"z\"}</tool_call>";
    in->text(in->ctx, 0, t, strlen(t), NULL, 0);
    in->finish(in->ctx, 0, FINISH_STOP, NULL);
    cr_assert_str_eq(r.log.data, "T[<tool_call>{\"name\":\"z\"}</tool_call>]F1:");
    toolcall_deinit(&sc);
    buf_free(&r.log);
}

Test(toolcall, sink_refusal_propagates)
{
    struct rec r = {.refuse = true};
    struct reply_sink out = sink_of(&r);
    struct toolcall_scanner sc;
    toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
    struct reply_sink *in = toolcall_sink(&sc);
    const char *t = "<tool_call>{\"name\":\"z\"}</tool_call>";
    cr_assert_eq(in->text(in->ctx, 0, t, strlen(t), NULL, 0), -1);
    toolcall_deinit(&sc);
    buf_free(&r.log);
}

Test(toolcall, logprobs_follow_content_only)
{
    struct rec r = {0};
    struct reply_sink out = sink_of(&r);
    struct toolcall_scanner sc;
    toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
    struct reply_sink *in = toolcall_sink(&sc);
    struct token_logprob lp = {0};
    in->text(in->ctx, 0, "Hi", 2, &lp, 1);
    in->text(in->ctx, 0, "<tool_call>", 11, &lp, 1);
    in->text(in->ctx, 0, "{\"name\":\"z\"}", 12, &lp, 1);
    in->text(in->ctx, 0, "</tool_call>", 12, &lp, 1);
    in->finish(in->ctx, 0, FINISH_STOP, NULL);
    cr_assert_eq(r.n_lp, 1, "only the content token's record reaches the encoder");
    toolcall_deinit(&sc);
    buf_free(&r.log);
}

/* Through the real emitter: a think head and a stop string around calls. */
Test(toolcall, behind_the_emitter)
{
    struct rec r = {0};
    struct reply_sink out = sink_of(&r);
    struct toolcall_scanner sc;
    toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
    struct emitter em;
    emitter_init(&em, toolcall_sink(&sc), 0, family_think(&family_qwen3), NULL, 0);
    const char *toks[] = {"<think>",
                          "\nhmm\n",
                          "</think>",
                          "\n\n",
                          "<tool_call>",
                          "\n{\"name\": ",
                          "\"a\", \"arguments\": {\"n\": 1}}",
                          "\n",
                          "</tool_call>",
                          NULL};
    for (int i = 0; toks[i]; i++)
        cr_assert_eq(emitter_feed(&em, toks[i], strlen(toks[i]), NULL), 0);
    cr_assert_eq(emitter_finish(&em, FINISH_STOP), 0);
    cr_assert_str_eq(r.log.data, "R[hmm]Ca({\"n\": 1})F3:");
    emitter_deinit(&em);
    toolcall_deinit(&sc);
    buf_free(&r.log);
}

Test(toolcall, parse_spans)
{
    char *name;
    size_t off, len;
    const char *st;
    const char *b = " {\"name\" : \"n\" ,\"arguments\":  {\"a\":[1,2]} } ";
    cr_assert_eq(toolcall_parse(b, strlen(b), &name, &off, &len, &st), 0);
    cr_assert_str_eq(name, "n");
    cr_assert_null(st);
    cr_assert_eq(len, 11);
    cr_assert_eq(memcmp(b + off, "{\"a\":[1,2]}", 11), 0);
    free(name);
    const char *esc = "{\"name\":\"n\",\"argu\\u006dents\":{}}"; /* escaped key: not hermes */
    cr_assert_eq(toolcall_parse(esc, strlen(esc), &name, &off, &len, &st), -1);
    cr_assert_eq(toolcall_parse("", 0, &name, &off, &len, &st), -1);
    const char *nul = "{\"name\":\"a\\u0000b\"}";
    cr_assert_eq(toolcall_parse(nul, strlen(nul), &name, &off, &len, &st), -1);
    cr_assert_eq(toolcall_parse("{\"name\":\"\"}", 11, &name, &off, &len, &st), -1);
}

/* Randomized: replies composed of text, whitespace, good and malformed regions, partial markers
 * and multi-byte UTF-8, cut into random deltas (down to single bytes), give exactly the events of
 * the same reply fed whole; every call's name and arguments appear verbatim in the reply. */
Test(toolcall, random_replies_split_invariant)
{
    static const char *frags[] = {
        "Hello",
        " ",
        "\n",
        "\n\n",
        "\t",
        "<",
        "<tool",
        "<tool_call",
        "</tool_call>",
        "é",
        "世界",
        "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>",
        "<tool_call>{\"name\":\"g\"}</tool_call>",
        "<tool_call>\n{\"name\": \"h\", \"arguments\": {\"s\": \"x<tool_call>y\"}}\n</tool_call>",
        "<tool_call>{\"name\": 1}</tool_call>",
        "<tool_call>{oops</tool_call>",
        "<tool_call>",
        "{\"name\": \"k\", \"arguments\": {}}",
        "}",
        "tool_call>"};
    const int nf = sizeof frags / sizeof frags[0];
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (int iter = 0; iter < 400; iter++) {
        struct buf reply = {0};
        int k = 1 + (int)((st = st * 6364136223846793005ull + 1442695040888963407ull) >> 60);
        for (int i = 0; i < k; i++) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            buf_puts(&reply, frags[(st >> 33) % (uint64_t)nf]);
        }
        const char *whole[] = {reply.data, NULL};
        char *want = run(whole, FINISH_STOP, NULL);
        /* random cuts (UTF-8 may be cut too: the scanner works on bytes) */
        char *toks[64];
        int nt = 0;
        size_t at = 0;
        while (at < reply.len && nt < 62) {
            st = st * 6364136223846793005ull + 1442695040888963407ull;
            size_t len = 1 + (size_t)((st >> 40) % 12);
            if (at + len > reply.len) len = reply.len - at;
            toks[nt++] = strndup(reply.data + at, len);
            at += len;
        }
        if (at < reply.len) toks[nt++] = strdup(reply.data + at);
        toks[nt] = NULL;
        char *got = run((const char *const *)toks, FINISH_STOP, NULL);
        cr_assert_str_eq(got, want, "reply: %s", reply.data);
        /* calls: C<name>(<args>) must come from the reply verbatim */
        for (const char *c = strstr(got, "C"); c; c = strstr(c + 1, "C")) {
            if (c != got && c[-1] != ']' && c[-1] != ')')
                continue; /* event starts (no ']' in frags) */
            const char *lp = strchr(c, '(');
            cr_assert_not_null(lp);
            char name[64];
            snprintf(name, sizeof name, "\"%.*s\"", (int)(lp - c - 1), c + 1);
            cr_assert_not_null(strstr(reply.data, name), "call name %s not in reply %s", name,
                               reply.data);
        }
        for (int i = 0; i < nt; i++)
            free(toks[i]);
        free(got);
        free(want);
        buf_free(&reply);
    }
}

/* ---- forced tool_choice -> lark (serve/forced.h) ---- */

#include <jansson.h>

#include "api/api_internal.h"
#include "serve/forced.h"

/* The dialect's tool_choice read as the api does, for a backend with these caps (qwen3). */
static int read_tc(enum dialect d, const json_t *root, bool grammar, bool tools, struct request *r,
                   struct err *e)
{
    struct backend be = {.caps = {.grammar = grammar, .tools = tools}, .family = &family_qwen3};
    struct api_ctx ctx = {.backend = &be};
    return api_read_tool_choice(&ctx, d, root, r, e);
}

Test(forced, lark_one_alternative_per_tool)
{
    json_t *schema =
        json_loads("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}", 0, NULL);
    struct forced_tool t[2] = {{"get_weather", schema}, {"say \"hi\"\\", NULL}};
    struct err e = {0};
    char *src = forced_lark(&family_qwen3, t, 2, &e);
    cr_assert_not_null(src, "%s", e.msg);
    cr_assert_str_eq(
        src, "start: call_0 | call_1\n"
             "call_0: <tool_call> \"\\n{\\\"name\\\": \\\"get_weather\\\", \\\"arguments\\\": \" "
             "args_0 \"}\\n\" "
             "</tool_call>\n"
             "args_0: %json{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}\n"
             "call_1: <tool_call> \"\\n{\\\"name\\\": \\\"say \\\\\\\"hi\\\\\\\"\\\\\\\\\\\", "
             "\\\"arguments\\\": \" "
             "args_1 \"}\\n\" </tool_call>\n"
             "args_1: %json{\"type\":\"object\"}\n");
    free(src);
    json_decref(schema);
    cr_assert_null(forced_lark(&family_qwen3, t, 0, &e));
    struct forced_tool empty = {"", NULL};
    cr_assert_null(forced_lark(&family_qwen3, &empty, 1, &e));
    cr_assert_eq(e.code, ERR_INVALID);
    json_t *bad = json_integer(3);
    struct forced_tool b = {"f", bad};
    cr_assert_null(forced_lark(&family_qwen3, &b, 1, &e));
    cr_assert_eq(e.code, ERR_INVALID);
    json_decref(bad);
}

static int read_choice(enum dialect d, const char *body, struct request *r, struct err *e)
{
    request_init(r);
    memset(e, 0, sizeof *e);
    json_t *root = json_loads(body, 0, NULL);
    cr_assert_not_null(root, "bad test JSON: %s", body);
    int rc = read_tc(d, root, true, true, r, e);
    json_decref(root);
    return rc;
}

Test(forced, choices_of_each_dialect)
{
    struct request r;
    struct err e;
    /* chat: strict tools are enforced, the others get the permissive object */
    cr_assert_eq(
        read_choice(
            DIALECT_CHAT,
            "{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":"
            "{\"name\":\"a\",\"strict\":true,\"parameters\":{\"type\":\"object\",\"properties\":"
            "{\"x\":{\"type\":\"string\"}}}}},{\"type\":\"function\",\"function\":{\"name\":\"b\","
            "\"parameters\":{\"type\":\"object\",\"properties\":{\"y\":{}}}}}]}",
            &r, &e),
        0, "%s", e.msg);
    cr_assert_eq(r.constraint, CONSTRAINT_LARK);
    cr_assert_str_eq(r.constraint_param, "tool_choice");
    cr_assert(strstr(r.constraint_src, "start: call_0 | call_1\n"));
    cr_assert(strstr(r.constraint_src, "args_0: %json{\"type\":\"object\",\"properties\":{\"x\":"));
    cr_assert(strstr(r.constraint_src, "args_1: %json{\"type\":\"object\"}\n"));
    cr_assert(!r.reasoning);
    request_free(&r);
    /* chat: a named function is the only alternative */
    cr_assert_eq(
        read_choice(
            DIALECT_CHAT,
            "{\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"b\"}},\"tools\":"
            "[{\"type\":\"function\",\"function\":{\"name\":\"a\"}},{\"type\":\"function\","
            "\"function\":{\"name\":\"b\"}}]}",
            &r, &e),
        0, "%s", e.msg);
    cr_assert(strstr(r.constraint_src, "start: call_0\n"));
    cr_assert(strstr(r.constraint_src, "\\\"b\\\""));
    cr_assert_null(strstr(r.constraint_src, "\\\"a\\\""));
    request_free(&r);
    /* responses: strict on the tool itself; hosted tools are never candidates */
    cr_assert_eq(
        read_choice(
            DIALECT_RESPONSES,
            "{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"web_search\"},{\"type\":"
            "\"function\",\"name\":\"f\",\"strict\":true,\"parameters\":{\"type\":\"object\","
            "\"properties\":{\"k\":{\"const\":1}}}}]}",
            &r, &e),
        0, "%s", e.msg);
    cr_assert(strstr(r.constraint_src, "start: call_0\n"));
    cr_assert(strstr(r.constraint_src, "\"const\":1"));
    request_free(&r);
    cr_assert_eq(
        read_choice(DIALECT_RESPONSES,
                    "{\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},\"tools\":[{\"type\":"
                    "\"function\",\"name\":\"f\"}]}",
                    &r, &e),
        0, "%s", e.msg);
    request_free(&r);
    /* messages: input_schema always enforced; any and tool */
    cr_assert_eq(
        read_choice(
            DIALECT_MESSAGES,
            "{\"tool_choice\":{\"type\":\"any\"},\"tools\":[{\"name\":\"g\",\"input_schema\":"
            "{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"boolean\"}}}}]}",
            &r, &e),
        0, "%s", e.msg);
    cr_assert(strstr(r.constraint_src, "\"q\":{\"type\":\"boolean\"}"));
    request_free(&r);
    cr_assert_eq(
        read_choice(
            DIALECT_MESSAGES,
            "{\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"},\"tools\":[{\"name\":\"g\"}]}", &r,
            &e),
        0, "%s", e.msg);
    request_free(&r);
    /* not forced: nothing set */
    const char *free_choices[][2] = {{"0", "{\"tool_choice\":\"auto\"}"},
                                     {"0", "{\"tool_choice\":\"none\"}"},
                                     {"0", "{}"},
                                     {"2", "{\"tool_choice\":{\"type\":\"auto\"}}"},
                                     {"2", "{\"tool_choice\":{\"type\":\"none\"}}"}};
    for (size_t i = 0; i < sizeof free_choices / sizeof free_choices[0]; i++) {
        enum dialect d = free_choices[i][0][0] == '2' ? DIALECT_MESSAGES : DIALECT_CHAT;
        cr_assert_eq(read_choice(d, free_choices[i][1], &r, &e), 0);
        cr_assert_eq(r.constraint, CONSTRAINT_NONE, "%s", free_choices[i][1]);
        request_free(&r);
    }
}

Test(forced, errors_name_tool_choice)
{
    struct {
        enum dialect d;
        const char *body;
        int status;
    } cases[] = {
        {DIALECT_CHAT, "{\"tool_choice\":\"required\"}", 400},
        {DIALECT_CHAT,
         "{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":{}}]}", 400},
        {DIALECT_CHAT,
         "{\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"x\"}},\"tools\":"
         "[{\"type\":\"function\",\"function\":{\"name\":\"a\"}}]}",
         400},
        {DIALECT_CHAT, "{\"tool_choice\":{\"type\":\"function\"}}", 400},
        {DIALECT_CHAT, "{\"tool_choice\":{\"type\":\"allowed_tools\",\"allowed_tools\":{}}}", 400},
        {DIALECT_RESPONSES, "{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"web_search\"}]}",
         400},
        {DIALECT_MESSAGES, "{\"tool_choice\":{\"type\":\"tool\"},\"tools\":[{\"name\":\"g\"}]}",
         400},
        {DIALECT_MESSAGES,
         "{\"tool_choice\":{\"type\":\"any\"},\"tools\":[{\"type\":\"bash_20250124\","
         "\"name\":\"bash\"}]}",
         400},
        {DIALECT_MESSAGES,
         "{\"tool_choice\":{\"type\":\"any\"},\"tools\":[{\"name\":\"g\",\"input_schema\":3}]}",
         400},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct request r;
        struct err e;
        cr_assert_eq(read_choice(cases[i].d, cases[i].body, &r, &e), -1, "case %zu accepted", i);
        cr_assert_str_eq(e.param, "tool_choice", "case %zu: %s", i, e.msg);
        cr_assert_eq(err_http_status(e.code), cases[i].status, "case %zu: %s", i, e.msg);
        cr_assert_eq(r.constraint, CONSTRAINT_NONE);
        request_free(&r);
    }
    /* another constraint already set; no grammar support (400); no tool convention */
    struct request r;
    struct err e = {0};
    request_init(&r);
    r.constraint = CONSTRAINT_REGEX;
    r.constraint_src = strdup("a");
    snprintf(r.constraint_param, sizeof r.constraint_param, "regex");
    json_t *root =
        json_loads("{\"tool_choice\":\"required\",\"tools\":[{\"type\":\"function\",\"function\":"
                   "{\"name\":\"a\"}}]}",
                   0, NULL);
    cr_assert_eq(read_tc(DIALECT_CHAT, root, true, true, &r, &e), -1);
    cr_assert_str_eq(e.param, "tool_choice");
    cr_assert(strstr(e.msg, "'regex'"));
    request_free(&r);
    request_init(&r);
    cr_assert_eq(read_tc(DIALECT_CHAT, root, false, true, &r, &e), -1);
    cr_assert_eq(err_http_status(e.code), 400);
    request_free(&r);
    request_init(&r);
    cr_assert_eq(read_tc(DIALECT_CHAT, root, true, false, &r, &e), -1);
    cr_assert_eq(err_http_status(e.code), 400);
    request_free(&r);
    json_decref(root);
}

/* Issue 10 item 1: an empty reply through emitter + scanner (the chain the worker builds when
 * tools are given) — finish on a never-fed emitter and scanner, in every emitter mode. */
Test(toolcall, empty_reply_through_emitter)
{
    static const char *const stop[] = {"a"};
    for (int think = 0; think < 2; think++)
        for (int ns = 0; ns < 2; ns++) {
            struct rec r = {0};
            struct reply_sink out = sink_of(&r);
            struct toolcall_scanner sc;
            toolcall_init(&sc, &out, family_tool_markers(&family_qwen3));
            struct emitter em;
            emitter_init(&em, toolcall_sink(&sc), 0, think ? family_think(&family_qwen3) : NULL, stop, ns);
            cr_assert_eq(emitter_finish(&em, FINISH_STOP), 0);
            emitter_deinit(&em);
            toolcall_deinit(&sc);
            cr_assert_str_eq(r.log.data ? r.log.data : "", "F1:");
            buf_free(&r.log);
        }
    /* the scanner alone, finished without any text */
    const char *none[] = {NULL};
    char *res = run(none, FINISH_STOP, NULL);
    cr_assert_str_eq(res, "F1:");
    free(res);
}
