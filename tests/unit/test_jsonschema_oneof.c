/* oneOf judged in its context (issue 19): alternatives disjoint only together with what the
 * enclosing schema says of the same instance (its sibling keywords, earlier allOf members, the
 * schema holding a $ref), each with valid and invalid instances through PCRE2 and the grammar
 * engine; the same definition without that context stays an error. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../schema/lark_pcre.h"
#include "base/buf.h"
#include "base/err.h"
#include "grammar/grammar.h"
#include "grammar/jsonschema.h"
#include "grammar_testlib.h"

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

struct bvocab {
    char bytes[256][2];
    const char *ptr[256];
    uint32_t len[256];
    bool sp[256];
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

static bool pcre_ok(pcre2_code *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    cr_assert(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match error %d", rc);
    return rc >= 0;
}

static void check(const char *schema, const char *const *good, const char *const *bad)
{
    struct buf lark = {0}, rx = {0};
    struct err e = {0};
    cr_assert_eq(jsonschema_to_lark(schema, strlen(schema), "", &lark, &e), 0, "%s: %s", schema,
                 e.msg);
    cr_assert_eq(lark_pcre(lark.data, &rx), 0);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rx.data, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
    cr_assert(re, "pcre2 %d on %s", ec, lark.data);
    struct bvocab *v = calloc(1, sizeof *v);
    cr_assert(v);
    for (int i = 0; i < 256; i++) {
        v->bytes[i][0] = (char)i;
        v->ptr[i] = i ? v->bytes[i] : "<eos>";
        v->len[i] = i ? 1 : 5;
        v->sp[i] = i == 0;
    }
    v->gv = (struct grammar_vocab){256, v->ptr, v->len, v->sp, 0};
    v->vi = grammar_vocab_index_new(&v->gv, &e);
    cr_assert(v->vi, "%s", e.msg);
    struct grammar *g = grammar_compile(v->vi, GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &e);
    cr_assert(g, "engine rejects %s: %s", schema, e.msg);
    for (; good && *good; good++) {
        cr_expect(pcre_ok(re, *good), "%s should accept %s", schema, *good);
        cr_expect(engine_accepts(g, *good), "engine: %s should accept %s", schema, *good);
    }
    for (; bad && *bad; bad++) {
        cr_expect(!pcre_ok(re, *bad), "%s should reject %s", schema, *bad);
        cr_expect(!engine_accepts(g, *bad), "engine: %s should reject %s", schema, *bad);
    }
    grammar_free(g);
    grammar_vocab_index_free(v->vi);
    free(v);
    pcre2_code_free(re);
    buf_free(&lark);
    buf_free(&rx);
}

static void expect_error(const char *schema, const char *needle)
{
    struct buf lark = {0};
    struct err e = {0};
    cr_expect_neq(jsonschema_to_lark(schema, strlen(schema), "", &lark, &e), 0, "%s compiles",
                  schema);
    cr_expect(strstr(e.msg, needle), "error for %s: \"%s\" lacks \"%s\"", schema, e.msg, needle);
    buf_free(&lark);
}


#define DEFS_FC                                                                                    \
    "\"definitions\":{\"fc\":{\"required\":[\"status\"],\"properties\":{\"status\":{\"enum\":"    \
    "[\"changed\"]}},\"oneOf\":[{\"$ref\":\"#/definitions/m\"},{\"$ref\":\"#/definitions/l\"}]},"  \
    "\"m\":{\"required\":[\"changes\"],\"properties\":{\"type\":{\"enum\":[\"file\",\"dir\"]}}},"   \
    "\"l\":{\"required\":[\"type\"],\"properties\":{\"type\":{\"enum\":[\"link\"]}}}}"

/* MaskBench Github_medium---o25695's shape: the oneOf of a definition, disjoint only because the
 * schema that refers to it says "type": "object" (a string would match both alternatives) */
Test(jsonschema_oneof, context_of_the_referring_schema)
{
    const char *const good[] = {"{\"status\":\"changed\",\"changes\":1}",
                                "{\"status\":\"changed\",\"type\":\"link\"}",
                                "{\"status\":\"changed\",\"changes\":1,\"type\":\"file\"}",
                                "{\"status\":\"changed\",\"changes\":1,\"type\":\"link\"}", NULL};
    const char *const bad[] = {"{\"status\":\"changed\"}", "{\"status\":\"changed\",\"type\":\"file\"}",
                               "{\"changes\":1}", "{\"status\":\"error\",\"changes\":1}", "\"x\"",
                               "5", NULL};
    check("{\"type\":\"object\",\"allOf\":[{\"$ref\":\"#/definitions/fc\"}]," DEFS_FC "}", good,
          bad);
    check("{\"type\":\"object\",\"oneOf\":[{\"$ref\":\"#/definitions/fc\"},{\"required\":"
          "[\"status\"],\"properties\":{\"status\":{\"const\":\"error\"}}}]," DEFS_FC "}",
          good, L("{\"status\":\"changed\"}", "{\"changes\":1}", "\"x\""));
    /* the same definition where nothing says "object": overlapping, an error */
    expect_error("{\"allOf\":[{\"$ref\":\"#/definitions/fc\"}]," DEFS_FC "}", "oneOf");
    /* ... also when another use has the context: a property's value is another instance */
    expect_error("{\"type\":\"object\",\"allOf\":[{\"$ref\":\"#/definitions/fc\"}],\"properties\":"
                 "{\"p\":{\"$ref\":\"#/definitions/fc\"}}," DEFS_FC "}",
                 "oneOf");
}

/* Github_medium---o89003 (JSON Patch): an earlier allOf member requires the discriminator */
Test(jsonschema_oneof, context_of_earlier_allof_members)
{
    check("{\"type\":\"array\",\"items\":{\"allOf\":[{\"type\":\"object\",\"required\":[\"op\","
          "\"path\"]},{\"$ref\":\"#/definitions/ops\"}]},\"definitions\":{\"ops\":{\"oneOf\":["
          "{\"$ref\":\"#/definitions/add\"},{\"$ref\":\"#/definitions/remove\"}]},"
          "\"add\":{\"properties\":{\"op\":{\"enum\":[\"add\"]}},\"required\":[\"value\"]},"
          "\"remove\":{\"properties\":{\"op\":{\"enum\":[\"remove\"]}}}}}",
          L("[{\"op\":\"add\",\"path\":\"/a\",\"value\":1}]", "[{\"op\":\"remove\",\"path\":\"/a\"}]",
            "[{\"op\":\"remove\",\"path\":\"/a\",\"value\":1}]", "[]"),
          L("[{\"op\":\"add\",\"path\":\"/a\"}]", "[{\"op\":\"move\",\"path\":\"/a\"}]",
            "[{\"path\":\"/a\",\"value\":1}]", "[{\"op\":\"add\",\"value\":1}]", "[\"add\"]"));
    /* Github_medium---o25768: the discriminator required by the member before */
    check("{\"allOf\":[{\"type\":\"object\",\"required\":[\"kind\"]},{\"oneOf\":[{\"$ref\":"
          "\"#/definitions/a\"},{\"$ref\":\"#/definitions/b\"}]}],\"definitions\":{\"a\":"
          "{\"properties\":{\"kind\":{\"const\":\"a\"}}},\"b\":{\"properties\":{\"kind\":"
          "{\"const\":\"b\"}},\"required\":[\"n\"]}}}",
          L("{\"kind\":\"a\"}", "{\"kind\":\"b\",\"n\":1}", "{\"kind\":\"a\",\"n\":1}"),
          L("{\"kind\":\"b\"}", "{\"kind\":\"c\"}", "{}", "\"a\"", "{\"n\":1}"));
}
