/* JSON Schema → lark: structure of the output, errors, and the LANGUAGE of the output checked by
 * translating the lark into a PCRE2 pattern (tests/schema/lark_pcre.h) and matching instances.
 * Number-range and pattern regexes are differential-tested against arithmetic / PCRE2. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../schema/lark_pcre.h"
#include "base/buf.h"
#include "base/err.h"
#include "grammar/jsonschema.h"
#include "grammar/jsonschema_internal.h"

static pcre2_code *compile_rx(const char *rx)
{
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rx, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR m[256];
        pcre2_get_error_message(ec, m, sizeof m);
        cr_log_error("pcre2: %s at %zu in %.300s", m, (size_t)eo, rx);
    }
    return re;
}

static bool rx_match(pcre2_code *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    cr_assert(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match error %d", rc);
    return rc >= 0;
}

/* schema → language matcher */
static pcre2_code *schema_re(const char *schema)
{
    struct buf lark = {0}, rx = {0};
    struct err e = {0};
    int r = jsonschema_to_lark(schema, strlen(schema), "", &lark, &e);
    cr_assert_eq(r, 0, "schema %s failed: %s", schema, e.msg);
    cr_assert_eq(lark_pcre(lark.data, &rx), 0);
    pcre2_code *re = compile_rx(rx.data);
    cr_assert(re, "lark: %s", lark.data);
    buf_free(&lark);
    buf_free(&rx);
    return re;
}

static void check(const char *schema, const char *const *good, const char *const *bad)
{
    pcre2_code *re = schema_re(schema);
    for (; good && *good; good++)
        cr_expect(rx_match(re, *good), "%s should accept %s", schema, *good);
    for (; bad && *bad; bad++)
        cr_expect(!rx_match(re, *bad), "%s should reject %s", schema, *bad);
    pcre2_code_free(re);
}

static void expect_error(const char *schema, const char *needle)
{
    struct buf lark = {0};
    struct err e = {0};
    int r = jsonschema_to_lark(schema, strlen(schema), "", &lark, &e);
    cr_expect_neq(r, 0, "schema %s should fail", schema);
    cr_expect(strstr(e.msg, needle) != NULL, "error for %s: \"%s\" lacks \"%s\"", schema, e.msg,
              needle);
    cr_expect_eq(lark.len, 0);
    buf_free(&lark);
}

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

Test(jsonschema, output_shape_and_prefix)
{
    struct buf a = {0}, b = {0};
    struct err e = {0};
    const char *s = "{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}";
    cr_assert_eq(jsonschema_to_lark(s, strlen(s), "", &a, &e), 0);
    cr_expect(strstr(a.data, "\nstart: ") || !strncmp(a.data, "start: ", 7));
    cr_expect(strstr(a.data, "\"\\\"x\\\"\"") != NULL, "key literal in %s", a.data);
    cr_assert_eq(jsonschema_to_lark(s, strlen(s), "j1_", &b, &e), 0);
    cr_expect(strstr(b.data, "start") == NULL);
    cr_expect(strstr(b.data, "j1_root: ") != NULL);
    /* every rule defined in the prefixed grammar carries the prefix */
    for (const char *p = b.data; *p; p = strchr(p, '\n') + 1)
        cr_expect(!strncmp(p, "j1_", 3), "%.40s", p);
    buf_free(&a);
    buf_free(&b);
}

Test(jsonschema, json_object_any)
{
    struct buf lark = {0}, rx = {0};
    struct err e = {0};
    cr_assert_eq(jsonschema_object_lark("", &lark, &e), 0);
    lark_pcre(lark.data, &rx);
    pcre2_code *re = compile_rx(rx.data);
    cr_assert(re);
    const char *good[] = {"{}", "{\"a\":1}", "{\"a\": [1, {\"b\": null}], \"c\": \"\\u00e9\\n\"}",
                          "{\"a\":{\"b\":[true]}}", NULL};
    const char *bad[] = {" {}",      "{} ", "[]",      "{\"a\":01}",     "{\"a\":1,}",
                         "{'a':1}",  "1",   "{\"a\"}", "{\"a\":\"\t\"}", "{ \"a\":1}",
                         "{\n  \"a\": {\n    \"b\": [\n      true\n    ]\n  }\n}", NULL};
    for (int i = 0; good[i]; i++)
        cr_expect(rx_match(re, good[i]), "accept %s", good[i]);
    for (int i = 0; bad[i]; i++)
        cr_expect(!rx_match(re, bad[i]), "reject %s", bad[i]);
    pcre2_code_free(re);
    buf_free(&lark);
    buf_free(&rx);
}

Test(jsonschema, number_grammar_exact)
{
    check("{\"type\":\"number\"}", L("0", "-0", "1.5", "-12e+3", "1E5", "0.0001", "10"),
          L("01", "+1", ".5", "1.", "1e", "--1", "0x10", "NaN", "1.5.2", " 1"));
    check("{\"type\":\"integer\"}", L("0", "-7", "123456789012345678901"),
          L("1.0", "1e2", "-", "00", "1 "));
}

Test(jsonschema, integer_bounds)
{
    check("{\"type\":\"integer\",\"minimum\":-15,\"maximum\":230}",
          L("-15", "-9", "-0", "0", "9", "99", "100", "199", "229", "230"),
          L("-16", "-100", "231", "300", "1000", "2300"));
    check("{\"type\":\"integer\",\"exclusiveMinimum\":0,\"exclusiveMaximum\":10}", L("1", "5", "9"),
          L("0", "-0", "10", "-1"));
    check("{\"type\":\"integer\",\"minimum\":1000}", L("1000", "9999", "10000", "123456789"),
          L("999", "0", "-1000", "1"));
    check("{\"type\":\"integer\",\"maximum\":-3}", L("-3", "-4", "-100"), L("-2", "0", "3"));
    /* draft 4 boolean exclusive flags */
    check("{\"type\":\"integer\",\"minimum\":5,\"exclusiveMinimum\":true}", L("6", "60"),
          L("5", "4"));
}

Test(jsonschema, number_bounds_decimal)
{
    check("{\"type\":\"number\",\"minimum\":0.5,\"maximum\":2.25}",
          L("0.5", "0.50", "0.51", "1", "1.999", "2", "2.2", "2.25", "2.250"),
          L("0.49", "0.4999", "0", "2.251", "2.3", "3", "-1"));
    check("{\"type\":\"number\",\"exclusiveMinimum\":0}", L("0.0001", "1", "123.4"),
          L("0", "0.0", "-0", "-0.5", "-1"));
    check("{\"type\":\"number\",\"minimum\":-1.5,\"exclusiveMaximum\":0}",
          L("-1.5", "-1.25", "-0.001", "-1"), L("0", "-0", "0.1", "-1.51", "-2"));
}

Test(jsonschema, multiple_of)
{
    check("{\"type\":\"number\",\"multipleOf\":0.01}", L("1", "1.5", "1.25", "-3.07"),
          L("1.255", "0.001"));
    check("{\"type\":\"integer\",\"multipleOf\":5}", L("0", "5", "10", "-25", "1000005"),
          L("1", "12", "-3"));
    check("{\"type\":\"integer\",\"multipleOf\":7,\"minimum\":0,\"maximum\":30}",
          L("0", "7", "14", "21", "28"), L("1", "35", "-7"));
    expect_error("{\"type\":\"integer\",\"multipleOf\":7}", "multipleOf");
    check("{\"type\":\"number\",\"multipleOf\":2.5,\"minimum\":-5,\"exclusiveMaximum\":7.5}",
          L("-5", "-2.5", "0", "-0", "2.50", "5.0", "5"), L("7.5", "1", "2.4", "-7.5", "2.55"));
    check("{\"type\":\"number\",\"multipleOf\":11,\"minimum\":0,\"maximum\":30}",
          L("0", "11", "22.0"), L("33", "12", "11.5"));
}

Test(jsonschema, strings_and_escapes)
{
    check("{\"type\":\"string\"}",
          L("\"\"", "\"a\\\"b\"", "\"\\\\\"", "\"\\/\"", "\"\\b\\f\\n\\r\\t\"", "\"\\u00e9\"",
            "\"\\ud83d\\ude00\"", "\"é😀\""),
          L("\"a\"b\"", "\"\\x\"", "\"\\u12\"", "\"\n\"", "\"abc", "abc", "\"\\ud83d\""));
    /* lengths count code points; an escape is one character */
    check("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}",
          L("\"ab\"", "\"abc\"", "\"é😀\"", "\"\\n\\t\"", "\"\\ud83d\\ude00x\""),
          L("\"a\"", "\"abcd\"", "\"\"", "\"\\u0041\""));
}

/* Top-level alternatives with the same anchors share one pair of free loops: the unanchored
 * alternation of 17 literals (MaskBench Github_easy---o5195) made lexer states of dozens of
 * threads, one prefix and one suffix loop per branch. Same language, checked on instances. */
Test(jsonschema, unanchored_alternatives_share_their_loops)
{
    const char *schema = "{\"type\":\"string\",\"pattern\":\"AB_1|AB_2|AB_10|^x|y$|^z$\"}";
    struct buf lark = {0};
    struct err e = {0};
    cr_assert_eq(jsonschema_to_lark(schema, strlen(schema), "", &lark, &e), 0, "%s", e.msg);
    /* one CHAR* before and one after the unanchored group, one after ^x, one before y$ */
    int loops = 0;
    for (const char *q = lark.data; (q = strstr(q, "[^\"\\\\\\x00-\\x1F]|")); q++)
        loops++;
    cr_assert_eq(loops, 4, "free loops: %d in %s", loops, lark.data);
    buf_free(&lark);
    check(schema, L("\"AB_1\"", "\"qAB_10q\"", "\"xq\"", "\"qy\"", "\"z\"", "\"AB_2\""),
          L("\"AB_3\"", "\"qx\"", "\"yq\"", "\"zz\"", "\"\""));
}

Test(jsonschema, pattern_is_unanchored_and_escaped)
{
    check("{\"type\":\"string\",\"pattern\":\"^a\"}", L("\"a\"", "\"abc\""), L("\"ba\"", "\"\""));
    check("{\"type\":\"string\",\"pattern\":\"b$\"}", L("\"ab\"", "\"b\""), L("\"ba\""));
    check("{\"type\":\"string\",\"pattern\":\"x\"}", L("\"x\"", "\"axb\""), L("\"ab\""));
    check("{\"type\":\"string\",\"pattern\":\"^[0-9]{3}-[a-z]+$\"}", L("\"123-abc\""),
          L("\"12-abc\"", "\"123-\"", "\"123-abc \""));
    /* a literal quote / backslash in the value is escaped in the JSON text */
    check("{\"type\":\"string\",\"pattern\":\"^a\\\"b\\\\\\\\c$\"}", L("\"a\\\"b\\\\c\""),
          L("\"a\"b\\c\"", "\"a\\\"bc\""));
    check("{\"type\":\"string\",\"pattern\":\"^[^a]$\"}", L("\"b\"", "\"\\\"\"", "\"\\n\""),
          L("\"a\"", "\"bb\""));
    check("{\"type\":\"string\",\"pattern\":\"^(cat|dog)s?$\"}", L("\"cat\"", "\"dogs\""),
          L("\"cow\"", "\"cats!\""));
    check("{\"type\":\"string\",\"pattern\":\"^\\\\d+$\",\"maxLength\":3}", L("\"1\"", "\"123\""),
          L("\"1234\"", "\"\"", "\"a\""));
    expect_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround");
    expect_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreference");
    expect_error("{\"type\":\"string\",\"pattern\":\"[a\"}", "unterminated");
}

Test(jsonschema, formats)
{
    check("{\"type\":\"string\",\"format\":\"date\"}", L("\"2024-02-29\"", "\"2023-12-31\""),
          L("\"2023-02-29\"", "\"2023-04-31\"", "\"2023-13-01\"", "\"23-01-01\""));
    check("{\"type\":\"string\",\"format\":\"date-time\"}",
          L("\"2024-01-02T03:04:05Z\"", "\"2024-01-02T03:04:05.123+02:00\""),
          L("\"2024-01-02 03:04:05\"", "\"2024-01-02T25:00:00Z\""));
    check("{\"type\":\"string\",\"format\":\"uuid\"}",
          L("\"123e4567-e89b-12d3-a456-426614174000\""), L("\"123e4567e89b12d3a456426614174000\""));
    check("{\"type\":\"string\",\"format\":\"ipv4\"}", L("\"192.168.0.1\"", "\"0.0.0.0\""),
          L("\"256.1.1.1\"", "\"01.1.1.1\"", "\"1.1.1\""));
    check("{\"type\":\"string\",\"format\":\"ipv6\"}",
          L("\"::1\"", "\"fe80::1:2\"", "\"1:2:3:4:5:6:7:8\"", "\"::ffff:1.2.3.4\""),
          L("\"1:2:3:4:5:6:7:8:9\"", "\"12345::\""));
    check("{\"type\":\"string\",\"format\":\"email\"}", L("\"a.b@example.com\""),
          L("\"a@\"", "\"@b.c\"", "\"a b@c.d\""));
    check("{\"type\":\"string\",\"format\":\"duration\"}", L("\"P1D\"", "\"PT1H30M\"", "\"P2W\""),
          L("\"P\"", "\"PT\"", "\"1D\""));
    /* draft 3's formats are formats under draft 3 only (test_jsonschema_cover.c) */
    expect_error("{\"$schema\":\"http://json-schema.org/draft-03/schema#\",\"type\":\"string\","
                 "\"format\":\"color\"}",
                 "format \"color\"");
}

Test(jsonschema, objects_order_required_additional)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                    "\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}";
    check(s,
          L("{\"b\":\"x\"}", "{\"a\":1,\"b\":\"x\"}", "{\"a\": 1, \"b\": \"x\", \"zz\": [1]}",
            "{\"b\":\"x\",\"a\":1}", "{\"zz\":1,\"b\":\"x\",\"y\":2,\"a\":1}"),
          L("{}", "{\"a\":1}", "{\"b\":\"x\",\"b\":\"y\"}", "{\"a\":\"str\",\"b\":\"x\"}",
            "{\"b\":\"x\",\"a\":\"str\"}", "{\"b\":1}", " {\"b\":\"x\"}", "{\"b\":\"x\"} "));
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
          "\"additionalProperties\":false}",
          L("{}", "{\"a\":5}"), L("{\"a\":5,\"b\":1}", "{\"b\":1}"));
    check("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}",
          L("{}", "{\"x\":1,\"y\":2}"), L("{\"x\":\"s\"}"));
    check("{\"type\":\"object\",\"patternProperties\":{\"^x-\":{\"type\":\"integer\"}},"
          "\"additionalProperties\":false}",
          L("{\"x-a\":1}", "{}"), L("{\"y\":1}", "{\"x-a\":\"s\"}"));
    /* map object: keys matching the pattern take its schema, every other key takes any value */
    check(
        "{\"type\":\"object\",\"patternProperties\":{\"^[a-z]{1,3}$\":{\"type\":\"integer\"}}}",
        L("{\"ab\":1}", "{\"abcd\":\"s\"}", "{\"A\":true}", "{\"\":null}", "{\"ab\":1,\"X1\":[]}"),
        L("{\"ab\":\"s\"}", "{\"x\":null}"));
    /* other shapes go through the key automaton (test_jsonschema_cover.c) */
    check("{\"type\":\"object\",\"patternProperties\":{\"^a|b\":{\"type\":\"integer\"}}}",
          L("{\"ab\":1}", "{\"c\":\"s\"}"), L("{\"cb\":\"s\"}"));
    check("{\"type\":\"object\",\"properties\":{\"a\":true},\"minProperties\":1}",
          L("{\"a\":1}", "{\"q\":1}"), L("{}"));
    /* required property not declared: takes additionalProperties */
    check("{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":{\"type\":"
          "\"boolean\"}}",
          L("{\"k\":true}", "{\"k\":false,\"z\":true}"), L("{}", "{\"k\":1}"));
}

Test(jsonschema, arrays)
{
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":3}",
          L("[1]", "[1,2,3]", "[1, 2]"),
          L("[]", "[1,2,3,4]", "[\"a\"]", "[1,]", "[ 1 , 2 ]", "[\n  1,\n  2\n]"));
    check("{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"integer\"}],"
          "\"items\":false}",
          L("[]", "[\"a\"]", "[\"a\",1]"), L("[1]", "[\"a\",1,2]", "[\"a\",\"b\"]"));
    check("{\"type\":\"array\",\"items\":[{\"type\":\"null\"}],\"additionalItems\":{\"type\":"
          "\"boolean\"},"
          "\"minItems\":2}",
          L("[null,true]", "[null,false,true]"), L("[null]", "[true,true]", "[null,1]"));
}

Test(jsonschema, contains)
{
    check("{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"contains\":{\"minimum\":5}}",
          L("[5]", "[1,7]", "[9,1,2]", "[1, 2, 6, 3]"), L("[]", "[1,2]", "[\"a\",7]", "[7,\"a\"]"));
    expect_error("{\"type\":\"array\",\"contains\":{\"type\":\"null\"},\"maxItems\":3}",
                 "contains");
}

Test(jsonschema, enum_const_any_values)
{
    check("{\"enum\":[\"a\\\"b\",1,2.5,null,[1,{\"k\":true}],{\"x\":[]}]}",
          L("\"a\\\"b\"", "1", "2.5", "null", "[1,{\"k\":true}]", "[1, {\"k\": true}]",
            "{\"x\":[]}", "{\"x\": []}"),
          L("\"ab\"", "2", "[1]", "{\"x\":[1]}", "true"));
    check("{\"const\":3.0}", L("3", "3.0"), L("3.5", "4"));
    /* enum values filtered by sibling type */
    check("{\"type\":\"string\",\"enum\":[\"a\",1]}", L("\"a\""), L("1"));
}

Test(jsonschema, types_union_anyof_allof)
{
    check("{\"type\":[\"string\",\"null\"]}", L("\"x\"", "null"), L("1", "true"));
    check("{\"anyOf\":[{\"type\":\"integer\",\"minimum\":10},{\"type\":\"boolean\"}]}",
          L("10", "true"), L("9", "null"));
    check("{\"allOf\":[{\"type\":\"integer\",\"minimum\":0},{\"maximum\":5}]}", L("0", "5"),
          L("-1", "6", "1.5"));
    check(
        "{\"allOf\":[{\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
        "{\"properties\":{\"b\":{\"type\":\"string\"}},\"required\":[\"b\"]}],\"type\":\"object\"}",
        L("{\"a\":1,\"b\":\"x\"}", "{\"b\":\"x\",\"a\":1}"), L("{\"a\":1}", "{\"a\":1,\"a\":1}"));
    check("{\"oneOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", L("\"s\"", "3"), L("null"));
    check("{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"a\"}},\"required\":["
          "\"k\"]},"
          "{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"b\"},\"v\":{\"type\":"
          "\"integer\"}},"
          "\"required\":[\"k\"]}]}",
          L("{\"k\":\"a\"}", "{\"k\":\"b\",\"v\":1}"), L("{\"k\":\"c\"}"));
    expect_error("{\"oneOf\":[{\"type\":\"integer\"},{\"minimum\":3}]}", "oneOf");
}

Test(jsonschema, refs_local_and_recursive)
{
    check("{\"$defs\":{\"n\":{\"type\":\"integer\"}},\"type\":\"array\",\"items\":{\"$ref\":\"#/"
          "$defs/n\"}}",
          L("[1,2]"), L("[\"a\"]"));
    const char *tree = "{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                       "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}}},"
                       "\"required\":[\"v\"],\"additionalProperties\":false}";
    check(tree, L("{\"v\":1}", "{\"v\":1,\"kids\":[{\"v\":2,\"kids\":[{\"v\":3}]}]}"),
          L("{\"v\":1,\"kids\":[{}]}", "{\"v\":1,\"kids\":[{\"v\":\"x\"}]}"));
    check("{\"definitions\":{\"a~b\":{\"const\":true}},\"$ref\":\"#/definitions/a~0b\"}", L("true"),
          L("false"));
    expect_error("{\"$ref\":\"other.json#/x\"}", "$ref");
    expect_error("{\"$ref\":\"#/$defs/missing\"}", "not found");
    expect_error("{\"allOf\":[{\"$ref\":\"#\"}]}", "itself");
    expect_error("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},"
                 "\"$ref\":\"#/$defs/a\"}",
                 "itself");
}

Test(jsonschema, not_simple_forms)
{
    check("{\"not\":{\"type\":\"string\"}}", L("1", "null", "[]", "{}", "true"), L("\"s\""));
    check("{\"type\":\"string\",\"not\":{\"enum\":[\"a\",\"ab\"]}}", L("\"b\"", "\"abc\"", "\"\""),
          L("\"a\"", "\"ab\"", "1"));
    check("{\"type\":[\"boolean\",\"null\"],\"not\":{\"const\":true}}", L("false", "null"),
          L("true"));
    check("{\"anyOf\":[{\"not\":{}},{\"type\":\"null\"}]}", L("null"), L("1"));
    check("{\"not\":{\"not\":{\"type\":\"integer\",\"minimum\":3}}}", L("3", "40"),
          L("2", "\"a\""));
    expect_error("{\"not\":{\"type\":\"integer\"}}", "\"not\"");
    expect_error("{\"not\":{\"minimum\":3}}", "\"not\"");
    expect_error("{\"not\":{\"enum\":[1]}}", "\"not\"");
}

Test(jsonschema, errors_name_the_problem)
{
    expect_error("{\"not\":{\"minLength\":3}}", "\"not\""); /* (an object condition: test_jsonschema_cover.c) */
    expect_error("{\"type\":\"object\",\"properties\":{\"a\":{\"if\":{\"minimum\":3}}}}",
                 "\"if\"");
    expect_error("{\"type\":\"array\",\"uniqueItems\":true}", "uniqueItems");
    expect_error("{\"type\":\"strin\"}", "unknown type");
    expect_error("{\"type\":", "not valid JSON");
    expect_error("{\"a\":1,\"a\":2}", "not valid JSON");
    expect_error("{\"allOf\":[{\"type\":\"string\"},{\"type\":\"integer\"}]}", "unsatisfiable");
    expect_error("{\"minLength\":-1}", "minLength");
    expect_error("[1]", "object or a boolean");
    /* annotations and unknown keywords are ignored */
    check("{\"title\":\"t\",\"description\":\"d\",\"examples\":[1],\"x-custom\":5,\"type\":"
          "\"boolean\"}",
          L("true"), L("1"));
}

/* x-whitespace (docs/jsonschema.md "Whitespace"): tidy by default (llguidance's bound: nothing,
 * or one space after `,` and `:`), compact, or pretty (bounded gaps with one line break). */
Test(jsonschema, whitespace_modes)
{
    const char *obj = "\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                      "\"b\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}}";
    char s[400];
    snprintf(s, sizeof s, "{%s}", obj);
    check(s, L("{\"a\":1,\"b\":[1,2]}", "{\"a\": 1, \"b\": [1, 2]}", "{\"a\":1, \"b\":[]}"),
          L("{ \"a\":1}", "{\"a\":1 }", "{\"a\" :1}", "{\"a\":  1}", "{\"a\":1 ,\"b\":[]}",
            "{\"a\":1,  \"b\":[]}", "{\"a\":1,\"b\":[ 1]}", "{\"a\":1,\n\"b\":[]}",
            "{\"a\":\t1}", "{\n  \"a\": 1\n}"));
    snprintf(s, sizeof s, "{\"x-whitespace\":\"tidy\",%s}", obj);
    check(s, L("{\"a\": 1, \"b\": [1, 2]}"), L("{ \"a\":1}"));
    snprintf(s, sizeof s, "{\"x-whitespace\":\"compact\",%s}", obj);
    check(s, L("{\"a\":1,\"b\":[1,2]}"), L("{\"a\": 1}", "{\"a\":1, \"b\":[]}", "{\"b\":[1, 2]}"));
    snprintf(s, sizeof s, "{\"x-whitespace\":\"pretty\",%s}", obj);
    check(s,
          L("{\"a\":1}", "{ \"a\" : 1 }", "{\n  \"a\": 1,\n  \"b\": [\n    1,\n    2\n  ]\n}",
            "{\n\t\"a\": 1\n}"),
          L(" {\"a\":1}", "{\"a\":1} ", "{\n\n\"a\":1}"));
    pcre2_code *re =
        schema_re("{\"x-whitespace\":\"pretty\",\"type\":\"array\",\"items\":{\"type\":\"integer\"}}");
    char big[300];
    snprintf(big, sizeof big, "[%*s1]", 150, "");
    cr_expect(!rx_match(re, big), "150 spaces accepted");
    cr_expect(rx_match(re, "[\n    1\n  ]"));
    cr_expect(!rx_match(re, "[\n\n1]"), "two line breaks in one gap accepted");
    pcre2_code_free(re);
    /* a bad knob is an error naming it */
    struct buf lark = {0};
    struct err e = {0};
    const char *bad = "{\"x-whitespace\":\"loose\"}";
    cr_assert_eq(jsonschema_to_lark(bad, strlen(bad), "", &lark, &e), -1);
    cr_assert(strstr(e.msg, "x-whitespace"), "%s", e.msg);
    buf_free(&lark);
}

/* ---- differential: number range regexes vs arithmetic */

static void dec_of(double x, char *t, size_t n, int digits)
{
    snprintf(t, n, "%.*f", digits, x);
}

Test(jsonschema, number_ranges_vs_arithmetic)
{
    srand(1234);
    for (int iter = 0; iter < 150; iter++) {
        bool integer = iter % 2;
        int fd = integer ? 0 : rand() % 3;
        double lo = (rand() % 4000 - 2000) / (fd ? pow(10, fd) : 1.0);
        double hi = lo + (rand() % 3000) / (fd ? pow(10, fd) : 1.0);
        bool has_lo = rand() % 5, has_hi = rand() % 5, le = rand() % 2, he = rand() % 2;
        char ls[64], hs[64];
        dec_of(lo, ls, sizeof ls, fd);
        dec_of(hi, hs, sizeof hs, fd);
        struct jsrx_dec dl, dh;
        cr_assert_eq(jsrx_dec_parse(ls, &dl), 0);
        cr_assert_eq(jsrx_dec_parse(hs, &dh), 0);
        struct buf rx = {0};
        int empty = jsrx_number(has_lo ? &dl : NULL, le, has_hi ? &dh : NULL, he, integer, -1, &rx);
        pcre2_code *re = empty ? NULL : compile_rx(rx.data);
        if (!empty) cr_assert(re);
        for (int k = 0; k < 200; k++) {
            int vd = integer ? 0 : rand() % 4;
            double v = (rand() % 9000 - 4500) / pow(10, vd);
            if (k < 8) v = k < 4 ? lo : hi; /* the bounds themselves */
            char vs[64];
            dec_of(v, vs, sizeof vs, vd);
            if (k % 3 == 0 && vd == 0 && !integer) strcat(vs, ".0");
            double pv = strtod(vs, NULL);
            bool want = (!has_lo || (le ? pv > lo + 1e-9 : pv >= lo - 1e-9)) &&
                        (!has_hi || (he ? pv < hi - 1e-9 : pv <= hi + 1e-9));
            bool got = re ? rx_match(re, vs) : false;
            cr_expect_eq(got, want, "value %s range %s%s,%s%s int=%d: got %d rx=%s", vs,
                         le ? "(" : "[", has_lo ? ls : "-inf", has_hi ? hs : "inf", he ? ")" : "]",
                         integer, got, rx.data ? rx.data : "(empty)");
        }
        if (re) pcre2_code_free(re);
        buf_free(&rx);
    }
}

/* ---- differential: translated patterns vs PCRE2 on the decoded string */

static void json_escape(const char *s, struct buf *b)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"')
            buf_puts(b, "\\\"");
        else if (c == '\\')
            buf_puts(b, "\\\\");
        else if (c == '\n')
            buf_puts(b, "\\n");
        else if (c == '\t')
            buf_puts(b, "\\t");
        else if (c < 0x20)
            buf_printf(b, "\\u%04x", c);
        else
            buf_append(b, s, 1);
    }
}

Test(jsonschema, patterns_vs_pcre2)
{
    const char *pats[] = {"^a+b?$",     "ab|cd",       "^[a-c\"]{2,3}$", "\\d{2}",
                          "^[^\\\\]*$", "x.y",         "^(?:ab)+$",      "[\\w-]+@",
                          "^\\s*$",     "^(a|\\\")*$", "c{2,}",          "^[^a-z]",
                          "\\.",        "^$",          "b$|^a",          NULL};
    const char alpha[] = "abcdxy@-\"\\ .\n19";
    srand(99);
    for (int i = 0; pats[i]; i++) {
        struct buf rx = {0};
        struct err e = {0};
        cr_assert_eq(jsrx_pattern(pats[i], strlen(pats[i]), &rx, NULL, &e), 0, "%s: %s", pats[i],
                     e.msg);
        pcre2_code *mine = compile_rx(rx.data);
        cr_assert(mine, "%s -> %s", pats[i], rx.data);
        int ec;
        PCRE2_SIZE eo;
        /* ECMA `$` matches only at the very end (PCRE2 default also matches before a final \n) */
        pcre2_code *ref = pcre2_compile((PCRE2_SPTR)pats[i], PCRE2_ZERO_TERMINATED,
                                        PCRE2_UTF | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
        cr_assert(ref);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(ref, NULL);
        for (int k = 0; k < 300; k++) {
            char s[8];
            int n = rand() % 6;
            for (int j = 0; j < n; j++)
                s[j] = alpha[rand() % (int)(sizeof alpha - 1)];
            s[n] = 0;
            bool want = pcre2_match(ref, (PCRE2_SPTR)s, (size_t)n, 0, 0, md, NULL) >= 0;
            struct buf js = {0};
            json_escape(s, &js);
            bool got = rx_match(mine, js.data ? js.data : "");
            cr_expect_eq(got, want, "pattern /%s/ on \"%s\" (json %s): got %d", pats[i], s,
                         js.data ? js.data : "", got);
            buf_free(&js);
        }
        pcre2_match_data_free(md);
        pcre2_code_free(ref);
        pcre2_code_free(mine);
        buf_free(&rx);
    }
}

Test(jsonschema, key_exclusion_exact)
{
    const char *names[] = {"ab", "abc", "b", "é"};
    size_t lens[] = {2, 3, 1, 2};
    struct buf rx = {0};
    struct err e = {0};
    cr_assert_eq(jsrx_key_not_in(names, lens, 4, &rx, &e), 0);
    pcre2_code *re = compile_rx(rx.data);
    cr_assert(re);
    const char *good[] = {"\"\"",  "\"a\"",   "\"abcd\"", "\"ac\"",     "\"bb\"",
                          "\"c\"", "\"\\n\"", "\"e\"",    "\"ab\\\"\"", NULL};
    const char *bad[] = {"\"ab\"", "\"abc\"", "\"b\"", "\"é\"", NULL};
    for (int i = 0; good[i]; i++)
        cr_expect(rx_match(re, good[i]), "accept %s", good[i]);
    for (int i = 0; bad[i]; i++)
        cr_expect(!rx_match(re, bad[i]), "reject %s", bad[i]);
    pcre2_code_free(re);
    buf_free(&rx);
}

/* ---- end to end through the grammar engine (src/grammar/grammar.c): byte-level vocabulary
 * (token i = byte i for i in 1..255, token 0 = end of turn), instances fed byte by byte. This
 * checks that the engine compiles what we emit and agrees with it, greedy lexer included. */

#include "grammar/grammar.h"
#include "grammar_testlib.h"

struct bytevocab {
    char bytes[256][2];
    const char *ptr[256];
    uint32_t len[256];
    bool sp[256];
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

static void bv_init(struct bytevocab *v)
{
    memset(v, 0, sizeof *v);
    for (int i = 0; i < 256; i++) {
        v->bytes[i][0] = (char)i;
        v->ptr[i] = i ? v->bytes[i] : "<eos>";
        v->len[i] = i ? 1 : 5;
        v->sp[i] = i == 0;
    }
    v->gv = (struct grammar_vocab){256, v->ptr, v->len, v->sp, 0};
    struct err e = {0};
    v->vi = grammar_vocab_index_new(&v->gv, &e);
    cr_assert(v->vi, "%s", e.msg);
}

static void engine_check(struct bytevocab *v, const char *schema, const char *const *good,
                         const char *const *bad)
{
    struct err e = {0};
    struct grammar *g = grammar_compile(v->vi, GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &e);
    cr_assert(g, "engine rejects %s: %s", schema, e.msg);
    for (; good && *good; good++)
        cr_expect(engine_accepts(g, *good), "%s should accept %s", schema, *good);
    for (; bad && *bad; bad++)
        cr_expect(!engine_accepts(g, *bad), "%s should reject %s", schema, *bad);
    grammar_free(g);
}

Test(jsonschema, through_grammar_engine)
{
    struct bytevocab *v = calloc(1, sizeof *v);
    bv_init(v);
    engine_check(
        v,
        "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,"
        "\"maximum\":120},\"b\":{\"type\":\"string\",\"maxLength\":3}},\"required\":[\"b\"]}",
        L("{\"b\":\"x\"}", "{\"a\":120,\"b\":\"\\\"é\"}",
          "{\"a\": -5, \"b\": \"\", \"z\": [1, {}]}", "{\"b\":\"x\",\"a\":1}"),
        L("{\"a\":1}", "{\"a\":121,\"b\":\"x\"}", "{\"b\":\"abcd\"}", "{\"b\":\"x\",\"b\":\"x\"}",
          "{\"a\":\"s\",\"b\":\"x\"}", " {\"b\":\"x\"}"));
    engine_check(
        v, "{\"type\":\"array\",\"items\":{\"enum\":[1,\"a\",null,{\"k\":[true]}]},\"maxItems\":2}",
        L("[]", "[1,\"a\"]", "[{\"k\":[true]}]", "[null, {\"k\": [true]}]"),
        L("[1,1,1]", "[2]", "[{\"k\":[]}]", "[1,]"));
    engine_check(v, "{\"type\":\"string\",\"pattern\":\"^[a-z]+\\\\d?$\"}", L("\"ab\"", "\"abc1\""),
                 L("\"1\"", "\"ab12\"", "\"a\\\"\""));
    engine_check(v, "{\"type\":\"string\",\"pattern\":\"^[a-z\\\"]{1,9}$\",\"maxLength\":4}",
                 L("\"ab\"", "\"a\\\"cd\""), L("\"abcde\"", "\"\"", "\"A\""));
    engine_check(v, "{\"type\":\"number\",\"exclusiveMinimum\":0.5,\"maximum\":10}",
                 L("0.51", "1", "10", "10.0", "9.999"), L("0.5", "10.01", "-1", "1e1"));
    engine_check(
        v,
        "{\"$defs\":{\"t\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
        "\"c\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/t\"}}},\"required\":[\"v\"],"
        "\"additionalProperties\":false}},\"$ref\":\"#/$defs/t\"}",
        L("{\"v\":1,\"c\":[{\"v\":2,\"c\":[]}]}"), L("{\"v\":1,\"c\":[{}]}", "{\"v\":1,\"x\":2}"));
    engine_check(v, "{\"type\":\"string\",\"format\":\"date-time\"}", L("\"2024-02-29T10:00:00Z\""),
                 L("\"2023-02-29T10:00:00Z\""));
    grammar_vocab_index_free(v->vi);
    free(v);
}

/* Any property order (issue 19 item 1): all 120 orders of a 5-property object are accepted, the
 * required ones enforced, a repeated key rejected (PCRE2 language check and the engine itself);
 * past JS_ANYORDER_MAX members the declared order is kept. */
static void perm_next(int *p, int n, int k, char (*out)[200], int *n_out, const char *const *kv)
{
    if (k == n) {
        char *o = out[(*n_out)++];
        strcpy(o, "{");
        for (int i = 0; i < n; i++) {
            if (i) strcat(o, ",");
            strcat(o, kv[p[i]]);
        }
        strcat(o, "}");
        return;
    }
    for (int i = k; i < n; i++) {
        int t = p[k];
        p[k] = p[i];
        p[i] = t;
        perm_next(p, n, k + 1, out, n_out, kv);
        p[i] = p[k];
        p[k] = t;
    }
}

Test(jsonschema, any_property_order)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},"
                    "\"b\":{\"type\":\"string\"},\"c\":{\"type\":\"boolean\"},\"d\":{\"type\":\"null\"},"
                    "\"e\":{\"enum\":[1,2]}},\"required\":[\"a\",\"c\",\"e\"],"
                    "\"additionalProperties\":false}";
    static const char *kv[] = {"\"a\":1", "\"b\":\"x\"", "\"c\":true", "\"d\":null", "\"e\":2"};
    static char all[120][200];
    int p[5] = {0, 1, 2, 3, 4}, n = 0;
    perm_next(p, 5, 0, all, &n, kv);
    cr_assert_eq(n, 120);
    pcre2_code *re = schema_re(s);
    struct bytevocab *v = calloc(1, sizeof *v);
    bv_init(v);
    struct err e = {0};
    struct grammar *g = grammar_compile(v->vi, GRAMMAR_JSON_SCHEMA, s, strlen(s), &e);
    cr_assert(g, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        cr_expect(rx_match(re, all[i]), "order %s rejected (language)", all[i]);
        cr_expect(engine_accepts(g, all[i]), "order %s rejected (engine)", all[i]);
    }
    const char *bad[] = {"{\"a\":1,\"c\":true,\"e\":2,\"a\":1}",     /* a repeated key */
                         "{\"c\":true,\"c\":true,\"a\":1,\"e\":1}",
                         "{\"a\":1,\"c\":true}",                      /* e required */
                         "{\"e\":1,\"b\":\"x\",\"a\":1}",               /* c required */
                         "{\"a\":1,\"c\":true,\"e\":2,\"f\":0}",        /* no extras */
                         "{\"b\":1,\"a\":1,\"c\":true,\"e\":2}", NULL};  /* b's type */
    for (int i = 0; bad[i]; i++) {
        cr_expect(!rx_match(re, bad[i]), "%s accepted (language)", bad[i]);
        cr_expect(!engine_accepts(g, bad[i]), "%s accepted (engine)", bad[i]);
    }
    cr_expect(engine_accepts(g, "{\"e\": 1, \"c\": false, \"a\": 7}"));
    grammar_free(g);
    pcre2_code_free(re);
    /* extras anywhere, declared keys still at most once */
    check("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{}},"
          "\"required\":[\"b\"]}",
          L("{\"x\":1,\"b\":2,\"y\":3,\"a\":4,\"z\":5}", "{\"b\":null}", "{\"q\":1,\"b\":1}"),
          L("{\"x\":1}", "{\"b\":1,\"x\":2,\"b\":3}", "{\"a\":1,\"b\":1,\"a\":2}"));
    /* more than JS_ANYORDER_MAX (8) members: any order still (any_order_many_members); with
     * more than JS_ANYORDER_REQ_MAX (12) of them required: declared order (logged) */
    struct buf big = {0};
    buf_puts(&big, "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{");
    for (int i = 0; i < 13; i++)
        buf_printf(&big, "%s\"%c\":{}", i ? "," : "", 'a' + i);
    buf_puts(&big, "},\"required\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\",\"j\","
                   "\"k\",\"l\",\"m\"]}");
    check(big.data,
          L("{\"a\":1,\"b\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,"
            "\"k\":1,\"l\":1,\"m\":1}"),
          L("{\"b\":1,\"a\":1,\"c\":1,\"d\":1,\"e\":1,\"f\":1,\"g\":1,\"h\":1,\"i\":1,\"j\":1,"
            "\"k\":1,\"l\":1,\"m\":1}"));
    buf_free(&big);
    grammar_vocab_index_free(v->vi);
    free(v);
}

/* dependentRequired and draft-7 dependencies (array form): exact through the any-order rules;
 * the schema form (dependentSchemas) is an error naming it. */
Test(jsonschema, dependent_required)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"card\":{\"type\":\"string\"},"
                    "\"addr\":{\"type\":\"string\"},\"name\":{\"type\":\"string\"}},"
                    "\"dependentRequired\":{\"card\":[\"addr\"]},\"additionalProperties\":false}";
    check(s,
          L("{}", "{\"name\":\"n\"}", "{\"addr\":\"a\"}", "{\"card\":\"c\",\"addr\":\"a\"}",
            "{\"addr\":\"a\",\"name\":\"n\",\"card\":\"c\"}"),
          L("{\"card\":\"c\"}", "{\"card\":\"c\",\"name\":\"n\"}", "{\"name\":\"n\",\"card\":\"c\"}"));
    check("{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"dependencies\":{\"a\":[\"b\",\"c\"]}}",
          L("{\"a\":1,\"b\":2,\"c\":3}", "{\"c\":3,\"a\":1,\"b\":2}", "{\"b\":1}", "{\"x\":1}",
            "5"),
          L("{\"a\":1}", "{\"a\":1,\"b\":2}", "{\"c\":1,\"a\":1}"));
    /* allOf merges them */
    check("{\"allOf\":[{\"properties\":{\"a\":{},\"b\":{}}},{\"dependentRequired\":{\"b\":[\"a\"]}}]}",
          L("{\"a\":1,\"b\":2}", "{\"a\":1}"), L("{\"b\":2}"));
    struct buf lark = {0};
    struct err e = {0};
    const char *bad = "{\"properties\":{\"a\":{}},\"dependentRequired\":{\"a\":[\"zz\"]}}";
    cr_assert_eq(jsonschema_to_lark(bad, strlen(bad), "", &lark, &e), -1);
    cr_assert(strstr(e.msg, "dependentRequired"), "%s", e.msg);
    buf_free(&lark);
}

/* Drafts 3..7 ignore every sibling of $ref; 2019-09+ (and no $schema) intersect them. */
Test(jsonschema, ref_siblings_by_draft)
{
    check("{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"definitions\":{\"o\":{\"type\":"
          "\"object\"}},\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"$ref\":"
          "\"#/definitions/o\"}}}",
          L("{\"a\":{}}", "{\"a\":{\"k\":1}}"), L("{\"a\":\"s\"}"));
    check("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"$defs\":{\"n\":{\"type\":"
          "\"integer\"}},\"$ref\":\"#/$defs/n\",\"minimum\":5}",
          L("5", "7"), L("4", "\"x\""));
}

/* pattern / format intersected with minLength / maxLength (issue 19: length regions), checked
 * at the language level (PCRE2) and through the engine, where masks must never lead into a
 * dead end: every valid instance is accepted byte by byte. Formats JSON Schema does not define
 * are annotations. */
Test(jsonschema, pattern_and_format_with_lengths)
{
    const char *ident = "{\"type\":\"string\",\"pattern\":\"^[a-z][a-z0-9_]*$\",\"minLength\":2,"
                        "\"maxLength\":5}";
    const char *const ident_good[] = {"\"ab\"", "\"a_1\"", "\"abcde\"", NULL};
    const char *const ident_bad[] = {"\"a\"", "\"abcdef\"", "\"1ab\"", "\"aB\"", "\"\"", NULL};
    check(ident, ident_good, ident_bad);
    /* unanchored: contains a hex run; lengths count escapes and non-ASCII as one character */
    const char *hex = "{\"type\":\"string\",\"pattern\":\"[0-9a-f]+\",\"minLength\":3,\"maxLength\":4}";
    const char *const hex_good[] = {"\"zz1\"", "\"\\n\\\"a\"", "\"é日a\"", "\"abcd\"", NULL};
    const char *const hex_bad[] = {"\"zzz\"", "\"a1\"", "\"abcde\"", "\"\\u00e9\\n\\t\\r\"", NULL};
    check(hex, hex_good, hex_bad);
    const char *email = "{\"type\":\"string\",\"format\":\"email\",\"maxLength\":12}";
    const char *const email_good[] = {"\"a@b.co\"", "\"abc.d@ef.gh\"", NULL};
    const char *const email_bad[] = {"\"abcde.f@gh.ij\"", "\"a@\"", "\"ab\"", NULL};
    check(email, email_good, email_bad);
    /* uri: `\/` is one character */
    const char *uri = "{\"type\":\"string\",\"format\":\"uri\",\"minLength\":8,\"maxLength\":9}";
    const char *const uri_good[] = {"\"http:\\/\\/a\"", "\"http:\\/\\/ab\"", "\"http://ab\"", NULL};
    const char *const uri_bad[] = {"\"http://\"", "\"http://abc\"", "\"1ttp://ab\"", NULL};
    check(uri, uri_good, uri_bad);
    /* a format no draft defines constrains nothing; a defined one we cannot write is an error */
    const char *const any_good[] = {"\"x\"", "\"\"", NULL};
    const char *const any_bad[] = {"1", NULL};
    check("{\"type\":\"string\",\"format\":\"int32-path\"}", any_good, any_bad);
    expect_error("{\"type\":\"string\",\"format\":\"uri-reference\"}", "uri-reference");
    expect_error("{\"type\":\"string\",\"format\":\"email\",\"pattern\":\"a\"}", "pattern");

    struct bytevocab *v = calloc(1, sizeof *v);
    bv_init(v);
    engine_check(v, ident, ident_good, ident_bad);
    engine_check(v, hex, hex_good, hex_bad);
    engine_check(v, email, email_good, email_bad);
    engine_check(v, uri, uri_good, uri_bad);
    /* a long bound: the counter, not an expansion; its last characters are exact */
    struct buf s60 = {0}, s61 = {0};
    buf_puts(&s60, "\"x");
    for (int i = 0; i < 59; i++)
        buf_puts(&s60, "a");
    buf_puts(&s60, "\"");
    buf_printf(&s61, "\"xa%s", s60.data + 2);
    const char *const long_good[] = {"\"xa\"", s60.data, NULL};
    const char *const long_bad[] = {"\"ax\"", s61.data, NULL};
    engine_check(v, "{\"type\":\"string\",\"pattern\":\"^x[a-z]+$\",\"maxLength\":60}", long_good,
                 long_bad);
    /* email with the usual maxLength: the hostname labels' {0,61} expanded inside the region
     * (single-character bodies may have up to 64 copies); a 64-character label is too long */
    struct buf lab63 = {0}, lab64 = {0};
    buf_puts(&lab63, "\"a@");
    for (int i = 0; i < 63; i++)
        buf_puts(&lab63, "b");
    buf_puts(&lab63, ".io\"");
    buf_printf(&lab64, "\"a@b%s", lab63.data + 3);
    const char *email254 = "{\"type\":\"string\",\"format\":\"email\",\"minLength\":6,\"maxLength\":254}";
    const char *const e254_good[] = {"\"a@b.co\"", "\"first.last@sub.example.org\"", lab63.data, NULL};
    const char *const e254_bad[] = {"\"a@b.c\"", "\"a@b\"", "\"@b.co\"", "\"a@-b.co\"", lab64.data, NULL};
    engine_check(v, email254, e254_good, e254_bad); /* too large for the PCRE2 checker */
    buf_free(&lab63);
    buf_free(&lab64);
    buf_free(&s60);
    buf_free(&s61);
    grammar_vocab_index_free(v->vi);
    free(v);
}

/* More than 8 declared members: the required ones (up to 12) are tracked by sets, the optional
 * ones join the extras, so any order of a duplicate-free object is accepted and every required
 * member enforced (language level and through the engine). */
Test(jsonschema, any_order_many_members)
{
    struct buf sch = {0};
    buf_puts(&sch, "{\"type\":\"object\",\"additionalProperties\":false,\"properties\":{");
    for (int i = 0; i < 11; i++)
        buf_printf(&sch, "%s\"p%d\":{\"type\":\"integer\"}", i ? "," : "", i);
    buf_puts(&sch, "},\"required\":[\"p1\",\"p5\",\"p9\"]}");
    const char *const good[] = {"{\"p9\":1,\"p5\":2,\"p1\":3}",
                                "{\"p10\":0,\"p9\":1,\"p0\":4,\"p5\":2,\"p3\":3,\"p1\":3}",
                                "{\"p1\":1, \"p2\":2, \"p5\":3, \"p9\":4, \"p10\":5}", NULL};
    const char *const bad[] = {"{\"p9\":1,\"p5\":2}", "{\"p9\":1,\"p5\":2,\"p1\":3,\"p1\":3}",
                               "{\"p9\":1,\"p5\":2,\"p1\":3,\"p11\":3}",
                               "{\"p9\":1,\"p5\":\"x\",\"p1\":3}", NULL};
    check(sch.data, good, bad);
    struct bytevocab *v = calloc(1, sizeof *v);
    bv_init(v);
    engine_check(v, sch.data, good, bad);
    grammar_vocab_index_free(v->vi);
    free(v);
    buf_free(&sch);
}

/* patternProperties without additionalProperties for an unanchored one-class pattern (X, X+):
 * the other keys are those with no character of X, and take any value. */
Test(jsonschema, pattern_properties_contains_class)
{
    const char *a = "{\"type\":\"object\",\"patternProperties\":{\"a\":{\"type\":\"integer\"}}}";
    const char *const a_good[] = {"{}", "{\"xay\":1,\"b\":\"s\"}", "{\"b\":[1],\"\":null}",
                                  "{\"a\":1, \"ba\":2}", NULL};
    const char *const a_bad[] = {"{\"xa\":\"s\"}", "{\"b\":1,\"a\":null}",
                                 "{\"\\u0061\":\"s\"}", NULL};
    check(a, a_good, a_bad);
    const char *dot = "{\"type\":\"object\",\"patternProperties\":{\".+\":{\"type\":\"string\"}}}";
    const char *const dot_good[] = {"{\"k\":\"v\"}", "{\"\":1}", "{\"\\n\":1}", NULL};
    const char *const dot_bad[] = {"{\"k\":1}", "{\"\\nk\":1}", NULL};
    check(dot, dot_good, dot_bad);
    struct bytevocab *v = calloc(1, sizeof *v);
    bv_init(v);
    engine_check(v, a, a_good, a_bad);
    engine_check(v, dot, dot_good, dot_bad);
    grammar_vocab_index_free(v->vi);
    free(v);
    check("{\"type\":\"object\",\"patternProperties\":{\"^ab\":{\"type\":\"integer\"}}}",
          L("{\"ab\":1,\"a\":\"s\",\"b\":\"s\"}"), L("{\"abc\":\"s\"}"));
}

/* if/then/else (jsonschema_cond.c): anyOf [allOf [if, then], allOf [not if, else]] for
 * discriminator conditions (const/enum of properties, required, "type": "object"). */
Test(jsonschema, if_then_else)
{
    /* kind present and "a" -> x required, else y required */
    const char *s = "{\"type\":\"object\",\"properties\":{\"kind\":{\"enum\":[\"a\",\"b\"]},"
                    "\"x\":{\"type\":\"integer\"},\"y\":{\"type\":\"string\"}},"
                    "\"if\":{\"properties\":{\"kind\":{\"const\":\"a\"}},\"required\":[\"kind\"]},"
                    "\"then\":{\"required\":[\"x\"]},\"else\":{\"required\":[\"y\"]},"
                    "\"additionalProperties\":false}";
    check(s,
          L("{\"kind\":\"a\",\"x\":1}", "{\"x\":1,\"kind\":\"a\",\"y\":\"s\"}",
            "{\"kind\":\"b\",\"y\":\"s\"}", "{\"y\":\"s\"}", "{\"y\":\"s\",\"x\":2}"),
          L("{\"kind\":\"a\"}", "{\"kind\":\"a\",\"y\":\"s\"}", "{\"kind\":\"b\",\"x\":1}", "{}",
            "{\"x\":1}", "{\"kind\":\"c\",\"y\":\"s\"}"));
    /* without required, an absent property satisfies the condition (then applies) */
    check("{\"type\":\"object\",\"if\":{\"properties\":{\"t\":{\"const\":\"x\"}}},"
          "\"then\":{\"required\":[\"one\"]},\"else\":{\"properties\":{\"one\":false}}}",
          L("{\"one\":0}", "{\"t\":\"x\",\"one\":0}", "{\"t\":2}", "{\"t\":\"y\",\"z\":0}"),
          L("{}", "{\"t\":\"x\"}", "{\"t\":2,\"one\":0}"));
    /* a number discriminator: its negation ("not" of a number) is not expressible */
    expect_error("{\"if\":{\"properties\":{\"t\":{\"const\":1}}},\"then\":{}}", "\"not\"");
    /* non-objects pass a condition on properties; "type": "object" makes them fail it */
    check("{\"if\":{\"properties\":{\"a\":{\"const\":true}}},\"then\":{\"type\":\"object\"},"
          "\"else\":{\"type\":\"object\",\"required\":[\"b\"]}}",
          L("{}", "{\"a\":true}", "{\"a\":false,\"b\":0}"), L("1", "\"s\"", "{\"a\":false}"));
    check("{\"if\":{\"type\":\"object\",\"required\":[\"a\"]},\"then\":{\"required\":[\"b\"]},"
          "\"else\":{\"type\":\"string\"}}",
          L("{\"a\":1,\"b\":2}", "\"s\""), L("{\"a\":1}", "{}", "3"));
    /* then / else alone, boolean conditions */
    check("{\"then\":{\"type\":\"string\"},\"type\":\"integer\"}", L("3"), L("\"s\""));
    check("{\"if\":true,\"then\":{\"type\":\"integer\"},\"else\":{\"type\":\"string\"}}", L("3"),
          L("\"s\""));
    check("{\"if\":false,\"then\":{\"type\":\"integer\"},\"else\":{\"type\":\"string\"}}", L("\"s\""),
          L("3"));
    /* through the engine, any order */
    struct bytevocab *v = calloc(1, sizeof *v);
    bv_init(v);
    engine_check(v, s, L("{\"x\":1,\"kind\":\"a\"}", "{\"y\":\"s\",\"kind\":\"b\"}"),
                 L("{\"y\":\"s\",\"kind\":\"a\"}", "{\"kind\":\"a\",\"x\":1,\"x\":1}"));
    grammar_vocab_index_free(v->vi);
    free(v);
    /* conditions whose negation is not expressible: an error naming "if" */
    expect_error("{\"if\":{\"properties\":{\"a\":{\"minimum\":3}}},\"then\":{}}", "\"if\"");
    expect_error("{\"if\":{\"type\":\"string\"},\"then\":{}}", "\"if\"");
    expect_error("{\"if\":{\"properties\":{\"a\":{\"type\":\"integer\",\"const\":\"x\"}}}}", "\"if\"");
}

/* dependentSchemas and draft-7 dependencies with a schema: anyOf [P absent, P present and S] */
Test(jsonschema, dependent_schemas)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"card\":{\"type\":\"string\"},"
                    "\"addr\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"}},"
                    "\"dependentSchemas\":{\"card\":{\"required\":[\"addr\"],\"properties\":{\"n\":"
                    "{\"maximum\":5}}}},\"additionalProperties\":false}";
    check(s,
          L("{}", "{\"n\":9}", "{\"card\":\"c\",\"addr\":\"a\"}", "{\"addr\":\"a\",\"n\":9}",
            "{\"n\":5,\"addr\":\"a\",\"card\":\"c\"}"),
          L("{\"card\":\"c\"}", "{\"card\":\"c\",\"addr\":\"a\",\"n\":6}", "{\"card\":1,\"addr\":\"a\"}"));
    check("{\"properties\":{\"a\":{},\"b\":{},\"c\":{}},\"dependencies\":{\"a\":{\"required\":"
          "[\"b\"]},\"c\":[\"b\"]}}",
          L("{}", "{\"a\":1,\"b\":2}", "{\"b\":2,\"a\":1}", "{\"c\":1,\"b\":2}", "{\"b\":1}", "3"),
          L("{\"a\":1}", "{\"c\":1}", "{\"a\":1,\"c\":1}"));
    check("{\"type\":\"object\",\"dependentSchemas\":{\"a\":false,\"b\":true}}",
          L("{}", "{\"b\":1}"), L("{\"a\":1}"));
    expect_error("{\"dependentSchemas\":{\"a\":3}}", "dependentSchemas");
    expect_error("{\"dependentSchemas\":[1]}", "dependentSchemas");
}

/* propertyNames: declared names it rejects cannot appear; other keys must pass it (const/enum:
 * those names; a pattern: keys matching it, exact when no declared name matches it). */
Test(jsonschema, property_names)
{
    check("{\"type\":\"object\",\"propertyNames\":{\"pattern\":\"^[a-z]+$\"}}",
          L("{}", "{\"ab\":1}", "{\"ab\":1,\"c\":[2]}"), L("{\"A\":1}", "{\"a1\":1}", "{\"\":1}"));
    check("{\"type\":\"object\",\"properties\":{\"X\":{\"type\":\"integer\"}},"
          "\"propertyNames\":{\"pattern\":\"^[a-z]+$\"},\"additionalProperties\":{\"type\":\"string\"}}",
          L("{}", "{\"ab\":\"s\"}"), L("{\"X\":1}", "{\"ab\":1}", "{\"A\":\"s\"}"));
    check("{\"properties\":{\"a\":{},\"bb\":{}},\"propertyNames\":{\"maxLength\":1},"
          "\"additionalProperties\":false}",
          L("{}", "{\"a\":1}"), L("{\"bb\":1}", "{\"c\":1}"));
    check("{\"properties\":{\"a\":{\"type\":\"integer\"}},\"propertyNames\":{\"enum\":[\"a\",\"b\"]},"
          "\"additionalProperties\":{\"type\":\"string\"}}",
          L("{}", "{\"a\":1,\"b\":\"s\"}", "{\"b\":\"s\"}"), L("{\"c\":\"s\"}", "{\"b\":1}", "{\"a\":\"s\"}"));
    check("{\"type\":\"object\",\"propertyNames\":false}", L("{}"), L("{\"a\":1}"));
    check("{\"type\":\"object\",\"propertyNames\":{\"type\":\"string\"}}", L("{\"a\":1}"), L("[]"));
    check("{\"type\":\"object\",\"propertyNames\":{\"type\":\"integer\"}}", L("{}"), L("{\"1\":1}"));
    expect_error("{\"properties\":{\"ab\":{}},\"propertyNames\":{\"pattern\":\"^a\"}}",
                 "propertyNames");
    expect_error("{\"propertyNames\":{\"maxLength\":3}}", "propertyNames");
    expect_error("{\"allOf\":[{}],\"propertyNames\":{\"maxLength\":3}}", "propertyNames");
}

/* Keywords a draft does not define are annotations there (the root $schema decides): if/then/
 * else from draft 7, propertyNames from draft 6, dependentSchemas from 2019-09. MaskBench's
 * Github_medium---o3385 (draft-04 with if/then) labels instances valid that the then-branch
 * rejects. */
Test(jsonschema, conditional_keywords_by_draft)
{
    const char *ite = "\"type\":\"object\",\"if\":{\"required\":[\"a\"]},\"then\":{\"required\":[\"b\"]}";
    char s[400];
    snprintf(s, sizeof s, "{\"$schema\":\"http://json-schema.org/draft-04/schema#\",%s}", ite);
    check(s, L("{\"a\":1}", "{}"), L("[]"));
    snprintf(s, sizeof s, "{\"$schema\":\"http://json-schema.org/draft-06/schema#\",%s}", ite);
    check(s, L("{\"a\":1}"), L("[]"));
    snprintf(s, sizeof s, "{\"$schema\":\"http://json-schema.org/draft-07/schema#\",%s}", ite);
    check(s, L("{\"a\":1,\"b\":2}", "{}"), L("{\"a\":1}"));
    snprintf(s, sizeof s, "{%s}", ite);
    check(s, L("{\"a\":1,\"b\":2}"), L("{\"a\":1}"));
    check("{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"type\":\"object\","
          "\"propertyNames\":{\"pattern\":\"^a\"}}",
          L("{\"b\":1}"), L("[]"));
    check("{\"$schema\":\"http://json-schema.org/draft-06/schema#\",\"type\":\"object\","
          "\"propertyNames\":{\"pattern\":\"^a\"}}",
          L("{\"ab\":1}"), L("{\"b\":1}"));
    check("{\"$schema\":\"http://json-schema.org/draft-07/schema#\",\"type\":\"object\","
          "\"dependentSchemas\":{\"a\":false}}",
          L("{\"a\":1}"), L("[]"));
    check("{\"$schema\":\"https://json-schema.org/draft/2020-12/schema\",\"type\":\"object\","
          "\"dependentSchemas\":{\"a\":false}}",
          L("{}"), L("{\"a\":1}"));
}
