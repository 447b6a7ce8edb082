/* Allocation-failure walks (docs/faultsim.md): for each area, fail allocation N = 1, 2, ... of
 * one operation until an N is past the operation's last allocation. Every N must give success
 * or a clean error (nonzero return, err set), never a crash; after the walk a normal call must
 * succeed, and (ASan build) LeakSanitizer must find nothing leaked by the failed attempts. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "api/api_internal.h"
#include "base/faultsim.h"
#include "engine/text/chat.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/model.h"
#include "grammar/grammar.h"

#ifdef __SANITIZE_ADDRESS__
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
static int leak_check(void)
{
    return __lsan_do_recoverable_leak_check();
}
#else
static int leak_check(void)
{
    return 0;
}
#endif

typedef int (*fs_op)(void *ctx, struct err *e); /* runs the operation and frees what it made */

/* Walks N over op; returns the number of OOM branches (N that failed and gave an error). */
static int walk(const char *area, fs_op op, void *ctx, long max_n)
{
    int branches = 0, absorbed = 0;
    long n;
    for (n = 1;; n++) {
        cr_assert(n <= max_n, "%s: more than %ld allocations", area, max_n);
        struct err e = {0};
        faultsim_arm(n);
        int rc = op(ctx, &e);
        bool fired = faultsim_fired();
        faultsim_disarm();
        /* FAULTSIM_LEAKS=1: find the N that leaked (a check per N, slow) */
        if (getenv("FAULTSIM_LEAKS") && leak_check())
            fprintf(stderr, "%s: N=%ld leaked\n", area, n);
        if (!fired) {
            cr_assert_eq(rc, 0, "%s: unfailed run (N=%ld) failed: %s", area, n, e.msg);
            break;
        }
        if (rc == 0) {
            absorbed++;
            continue;
        }
        cr_assert(e.code != ERR_OK && e.msg[0],
                  "%s: N=%ld failed (%d) without an error (code %d, \"%s\")", area, n, rc,
                  (int)e.code, e.msg);
        branches++;
    }
    struct err e = {0};
    cr_assert_eq(op(ctx, &e), 0, "%s: normal call after the walk: %s", area, e.msg);
    cr_assert_eq(leak_check(), 0, "%s: the walk leaked (LeakSanitizer report above)", area);
    fprintf(stderr, "faultsim: %s: %ld allocations, %d OOM branches, %d absorbed\n", area, n - 1,
            branches, absorbed);
    return branches;
}

static void setup(void)
{
    faultsim_route_jansson();
#ifdef __SANITIZE_ADDRESS__
    /* FAULTSIM_TRACE=1: print where each failed allocation was made */
    if (getenv("FAULTSIM_TRACE")) faultsim_on_fire = __sanitizer_print_stack_trace;
#endif
}
TestSuite(faultsim, .init = setup, .timeout = 120);

/* ---- model load: a small Q8_0 model written by mkmodel (no tokenizer keys) ---- */
static char model_path[64];

static int op_model_load(void *ctx, struct err *e)
{
    struct model_opts o = {.n_threads = 1};
    struct model *m = model_load(model_path, &o, e);
    if (!m) return -1;
    model_free(m);
    return 0;
}

Test(faultsim, model_load)
{
    static const struct mkmodel_shape s = {.name = "fs",
                                           .n_layer = 2,
                                           .n_embd = 64,
                                           .n_ff = 96,
                                           .n_head = 4,
                                           .n_head_kv = 2,
                                           .head_dim = 16,
                                           .n_vocab = 256,
                                           .n_ctx = 256,
                                           .tied = true,
                                           .rope_base = 1e6f,
                                           .norm_eps = 1e-6f};
    snprintf(model_path, sizeof model_path, "/tmp/lms-faultsim-%d.gguf", (int)getpid());
    struct err e = {0};
    cr_assert_eq(mkmodel_write(&s, MKMODEL_Q8_0, 1, NULL, model_path, &e), 0, "%s", e.msg);
    int b = walk("model load", op_model_load, NULL, 100000);
    unlink(model_path);
    cr_expect(b > 0);
}

/* The other families' loaders (their own fail paths: gemma4's per-layer geometry and RoPE
 * tables, qwen35's recurrent layers), on the smallest shapes mkmodel writes. */
static void walk_shape(const char *shape, const char *area)
{
    const struct mkmodel_shape *s = mkmodel_shape_find(shape);
    cr_assert(s, "no mkmodel shape %s", shape);
    snprintf(model_path, sizeof model_path, "/tmp/lms-faultsim-%d.gguf", (int)getpid());
    struct err e = {0};
    cr_assert_eq(mkmodel_write(s, MKMODEL_Q8_0, 1, NULL, model_path, &e), 0, "%s", e.msg);
    int b = walk(area, op_model_load, NULL, 100000);
    unlink(model_path);
    cr_expect(b > 0);
}
Test(faultsim, model_load_gemma4) { walk_shape("gemma4-tiny", "gemma4 model load"); }
Test(faultsim, model_load_qwen35) { walk_shape("qwen35-tiny", "qwen35 model load"); }

/* ---- request parse, every dialect ---- */
struct parse_case {
    enum dialect d;
    const char *body;
};

static struct backend be;

/* The dialect decoders over a parsed tree. jansson's own parser is outside the walk (held):
 * libjansson 2.14 crashes on some failed allocations inside json_loadb (docs/faultsim.md). */
static int op_parse(void *ctx, struct err *e)
{
    static int (*const dec[])(const struct api_ctx *, json_t *, struct request *,
                              struct err *) = {[DIALECT_CHAT] = api_parse_chat,
                                               [DIALECT_RESPONSES] = api_parse_responses,
                                               [DIALECT_MESSAGES] = api_parse_messages,
                                               [DIALECT_COMPLETIONS] = api_parse_completions};
    const struct parse_case *c = ctx;
    struct api_ctx ac = {.backend = &be};
    struct request r;
    request_init(&r);
    faultsim_hold(true);
    json_error_t je;
    json_t *root = json_loads(c->body, 0, &je);
    faultsim_hold(false);
    cr_assert(root, "%s", je.text);
    r.dialect = c->d;
    int rc = dec[c->d](&ac, root, &r, e);
    json_decref(root);
    request_free(&r);
    return rc;
}

#define TOOLS_CC                                                                                   \
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"w\","        \
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"         \
    "\"required\":[\"city\"]}}}]"

Test(faultsim, request_parse)
{
    memset(&be, 0, sizeof be);
    be.family = &family_qwen3;
    be.caps = (struct backend_caps){
        .think = true, .tools = true, .grammar = true, .stop = true, .system_role = true};
    strcpy(be.model_id, "test-model");
    be.max_tokens_cap = 100;
    be.defaults = (struct sampler_params){
        .temperature = 0.7f, .top_k = 20, .top_p = 0.8f, .repeat_penalty = 1, .repeat_last_n = 64};
    be.defaults_think = be.defaults;
    static const struct parse_case cases[] = {
        {DIALECT_CHAT,
         "{\"model\":\"m\",\"messages\":[{\"role\":\"system\",\"content\":\"be brief\"},"
         "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"weather?\"}]},"
         "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":"
         "\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":"
         "\\\"Oslo\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"7C\"}],"
         "\"tools\":" TOOLS_CC ",\"stop\":[\"x\"],\"max_tokens\":9,\"stream\":true,"
         "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"o\","
         "\"schema\":{\"type\":\"object\"}}}}"},
        {DIALECT_RESPONSES,
         "{\"instructions\":\"be brief\",\"input\":[{\"role\":\"user\",\"content\":"
         "[{\"type\":\"input_text\",\"text\":\"q\"}]},{\"type\":\"function_call\",\"call_id\":"
         "\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},{\"type\":\"function_call_output\","
         "\"call_id\":\"c1\",\"output\":\"42\"}],\"tools\":[{\"type\":\"function\",\"name\":\"f\","
         "\"parameters\":{}}],\"max_output_tokens\":9,\"metadata\":{\"k\":\"v\"}}"},
        {DIALECT_MESSAGES,
         "{\"max_tokens\":5,\"system\":[{\"type\":\"text\",\"text\":\"sys\"}],\"messages\":"
         "[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},{\"role\":"
         "\"assistant\",\"content\":[{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"f\","
         "\"input\":{\"a\":1}}]},{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\","
         "\"tool_use_id\":\"t1\",\"content\":\"ok\"}]}],\"tools\":[{\"name\":\"f\","
         "\"input_schema\":{\"type\":\"object\"}}],\"stop_sequences\":[\"z\"]}"},
        {DIALECT_COMPLETIONS, "{\"prompt\":\"once upon\",\"max_tokens\":4,\"stop\":\"\\n\"}"},
    };
    static const char *names[] = {"parse chat", "parse responses", "parse messages",
                                  "parse completions"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect(walk(names[i], op_parse, (void *)&cases[i], 100000) > 0);
}

/* ---- tool rendering: the qwen3 renderer with tools ---- */
struct render_ctx {
    struct chat_msg *msgs;
    int n;
    json_t *tools;
};

static int op_render(void *ctx, struct err *e)
{
    struct render_ctx *c = ctx;
    struct chat_prompt_opts o = {
        .add_generation_prompt = true, .enable_thinking = true, .tools = c->tools};
    struct chat_prompt p = {0};
    int rc = chat_render("qwen3", c->msgs, c->n, &o, &p, e);
    chat_prompt_free(&p);
    return rc;
}

Test(faultsim, tool_render)
{
    json_error_t je;
    json_t *msgs = json_loads(
        "[{\"role\":\"system\",\"content\":\"be brief\"},{\"role\":\"user\",\"content\":\"w?\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"reasoning_content\":\"think\",\"tool_calls\":"
        "[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":{\"city\":\"Oslo\"}}}]},{\"role\":\"tool\",\"tool_call_id\":\"c1\","
        "\"content\":\"7C\"}]",
        0, &je);
    json_t *tools = json_loads(TOOLS_CC, 0, &je);
    cr_assert(msgs && tools);
    struct render_ctx c = {.tools = tools};
    struct err e = {0};
    cr_assert_eq(chat_msgs_from_openai_json(msgs, &c.msgs, &c.n, &e), 0, "%s", e.msg);
    cr_expect(walk("tool render", op_render, &c, 100000) > 0);
    chat_msgs_free(c.msgs, c.n);
    json_decref(msgs);
    json_decref(tools);
}

/* ---- grammar compile: regex, lark, JSON schema ---- */
static const char *g_toks[] = {"<eos>", "{",  "}",     "\"", ":", ",", "a",    "b",    "c", "0",
                               "1",     "ab", "\"a\"", " ",  "[", "]", "true", "null", "x", "y"};
struct grammar_ctx {
    const struct grammar_vocab_index *vi;
    enum grammar_kind kind;
    const char *src;
};

static int op_grammar(void *ctx, struct err *e)
{
    const struct grammar_ctx *c = ctx;
    struct grammar *g = grammar_compile(c->vi, c->kind, c->src, strlen(c->src), e);
    if (!g) return -1;
    struct matcher *m = matcher_new(g, e);
    grammar_free(g);
    if (!m) return -1;
    matcher_free(m);
    return 0;
}

Test(faultsim, grammar_compile)
{
    enum { NT = sizeof g_toks / sizeof g_toks[0] };
    uint32_t len[NT];
    bool sp[NT];
    for (int i = 0; i < NT; i++)
        len[i] = (uint32_t)strlen(g_toks[i]), sp[i] = i == 0;
    struct grammar_vocab gv = {NT, g_toks, len, sp, 0};
    struct err e = {0};
    struct grammar_vocab_index *vi = grammar_vocab_index_new(&gv, &e);
    cr_assert(vi, "%s", e.msg);
    struct grammar_ctx cases[] = {
        {vi, GRAMMAR_REGEX, "(ab|c)+[0-9]{1,3}x?"},
        {vi, GRAMMAR_LARK,
         "start: item (\",\" item)*\nitem: WORD | \"[\" start \"]\"\nWORD: /[abc]+/\n"},
        {vi, GRAMMAR_JSON_SCHEMA,
         "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":4},"
         "\"b\":{\"type\":\"array\",\"items\":{\"enum\":[true,null,1]}}},\"required\":[\"a\"]}"},
        {vi, GRAMMAR_JSON_SCHEMA, /* the rewritten conditional keywords (jsonschema_cond.c) */
         "{\"type\":\"object\",\"properties\":{\"k\":{\"enum\":[\"a\",\"b\"]},\"x\":{}},"
         "\"if\":{\"properties\":{\"k\":{\"const\":\"a\"}},\"required\":[\"k\"]},"
         "\"then\":{\"required\":[\"x\"]},\"dependentSchemas\":{\"x\":{\"required\":[\"k\"]}},"
         "\"propertyNames\":{\"enum\":[\"k\",\"x\",\"y\"]}}"},
    };
    static const char *names[] = {"grammar regex", "grammar lark", "grammar json schema",
                                  "grammar json schema conditionals"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_expect(walk(names[i], op_grammar, &cases[i], 200000) > 0);
    grammar_vocab_index_free(vi);
}
