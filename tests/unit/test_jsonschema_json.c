/* Documents jansson refuses as they are (jsonschema_json.c, issue 19): integers beyond 64 bits in
 * a schema are read exactly as numeric keyword values (language checked through PCRE2 and the
 * grammar engine) and are an error anywhere else; NUL in keys for the bench tools' loader. */
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
#include "grammar/jsonschema_json.h"
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

Test(jsonschema_json, integers_beyond_64_bits_as_bounds)
{
    /* MaskBench Github_medium---o83275's uint64 fields */
    check("{\"type\":\"integer\",\"minimum\":0,\"maximum\":18446744073709551615}",
          L("0", "18446744073709551615", "9223372036854775808", "18446744073709551614"),
          L("18446744073709551616", "-1", "100000000000000000000", "1.5"));
    check("{\"type\":\"integer\",\"exclusiveMinimum\":-99999999999999999999}",
          L("-99999999999999999998", "0", "123456789012345678901234"),
          L("-99999999999999999999", "-100000000000000000000"));
    check("{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
          "\"maximum\":-9223372036854775809}},\"required\":[\"n\"]}",
          L("{\"n\":-9223372036854775809}", "{\"n\":-10000000000000000000}"),
          L("{\"n\":-9223372036854775808}", "{\"n\":0}"));
    /* annotations may hold them */
    check("{\"type\":\"integer\",\"maximum\":5,\"default\":18446744073709551616,"
          "\"examples\":[{\"a\":18446744073709551616}]}",
          L("5", "-3"), L("6", "18446744073709551616"));
}

Test(jsonschema_json, integers_beyond_64_bits_elsewhere_are_errors)
{
    expect_error("{\"const\":18446744073709551616}", "64 bits");
    expect_error("{\"enum\":[1, 18446744073709551616]}", "64 bits");
    expect_error("{\"const\":{\"maximum\":18446744073709551616}}", "64 bits");
    expect_error("{\"not\":{\"enum\":[18446744073709551616]}}", "64 bits");
    expect_error("{\"type\":\"string\",\"pattern\":18446744073709551616}", "64 bits");
    expect_error("{\"required\":[18446744073709551616]}", "64 bits");
    /* the text already holds a marker's spelling: jansson's own error stands */
    expect_error("{\"description\":\"\\u0000\\u0001\",\"maximum\":18446744073709551616}",
                 "too big integer");
    /* a marker's spelling without a big integer is an ordinary string */
    expect_error("{\"maximum\":\"\\u0000\\u00011\"}", "must be a number");
}

Test(jsonschema_json, nul_in_keys_for_the_tools)
{
    const char *t = "{\"a\\u0000b\": 18446744073709551616, \"c\": [1, \"\\u0000x\"], "
                    "\"d\": {\"\\u0000\": -18446744073709551616}}";
    json_error_t je;
    cr_expect_null(jsonschema_json_loadb(t, strlen(t), JSON_ALLOW_NUL, 0, NULL, &je),
                   "a NUL key loads without the option");
    bool marked;
    json_t *j =
        jsonschema_json_loadb(t, strlen(t), JSON_ALLOW_NUL, JSONSCHEMA_LOAD_NUL_KEYS, &marked, &je);
    cr_assert(j, "%s", je.text);
    cr_expect(marked);
    cr_expect_eq(json_object_size(j), 3);
    char *d = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    struct buf b = {0};
    buf_puts(&b, d);
    free(d);
    cr_assert_eq(jsonschema_json_unmark(&b), 0);
    cr_expect_str_eq(b.data, "{\"a\\u0000b\":18446744073709551616,\"c\":[1,\"\\u0000x\"],"
                             "\"d\":{\"\\u0000\":-18446744073709551616}}");
    buf_free(&b);
    json_decref(j);
    /* integers that fit are left to jansson */
    const char *u = "[9223372036854775807, -9223372036854775808, 9223372036854775808]";
    j = jsonschema_json_loadb(u, strlen(u), JSON_ALLOW_NUL, 0, NULL, &je);
    cr_assert(j, "%s", je.text);
    cr_expect(json_is_integer(json_array_get(j, 0)));
    cr_expect(json_is_integer(json_array_get(j, 1)));
    cr_expect_str_eq(jsonschema_bigint(json_array_get(j, 2)), "9223372036854775808");
    json_decref(j);
}
