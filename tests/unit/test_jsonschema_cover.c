/* JSON Schema coverage (issue 19 items 1-2): patternProperties in every combination with
 * properties, required and additionalProperties (the key automaton, jsonschema_keys.c), patterns
 * with anchors anywhere. Each keyword with valid and invalid instances, checked on the language
 * (lark translated to PCRE2, tests/schema/lark_pcre.h) and through the grammar engine. */
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
#include "grammar/jsonschema_internal.h"
#include "grammar_testlib.h"

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

/* The language as one PCRE2 pattern; NULL when the lark holds a length region `(?L…)`, which
 * PCRE2 has no form for, or is beyond PCRE2's size limits (those instances are checked by the
 * grammar engine alone). */
static pcre2_code *cover_re(const char *schema)
{
    struct buf lark = {0}, rx = {0};
    struct err e = {0};
    int r = jsonschema_to_lark(schema, strlen(schema), "", &lark, &e);
    cr_assert_eq(r, 0, "schema %s failed: %s", schema, e.msg);
    if (strstr(lark.data, "(?L")) {
        buf_free(&lark);
        return NULL;
    }
    cr_assert_eq(lark_pcre(lark.data, &rx), 0);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)rx.data, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
    /* only size limits of PCRE2 (a regex too large / nested for it) leave the check to the
     * grammar engine; any other failure of the translation is a test failure */
    cr_assert(re || ec == PCRE2_ERROR_PATTERN_TOO_LARGE ||
                  ec == PCRE2_ERROR_PARENTHESES_NEST_TOO_DEEP || ec == PCRE2_ERROR_HEAP_FAILED,
              "pcre2 rejects the translation (%d) of %s", ec, lark.data);
    buf_free(&lark);
    buf_free(&rx);
    return re;
}

static bool cover_match(pcre2_code *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    cr_assert(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match error %d", rc);
    return rc >= 0;
}

/* the grammar engine on a byte vocabulary: instances fed byte by byte */
struct cover_vocab {
    char bytes[256][2];
    const char *ptr[256];
    uint32_t len[256];
    bool sp[256];
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

static struct cover_vocab *cover_vocab_new(void)
{
    struct cover_vocab *v = calloc(1, sizeof *v);
    cr_assert(v);
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
    return v;
}

static void cover_vocab_free(struct cover_vocab *v)
{
    grammar_vocab_index_free(v->vi);
    free(v);
}

/* language and engine agree with the expected outcome of every instance */
static void cover_check(const char *schema, const char *const *good, const char *const *bad)
{
    pcre2_code *re = cover_re(schema);
    struct cover_vocab *v = cover_vocab_new();
    struct err e = {0};
    struct grammar *g = grammar_compile(v->vi, GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &e);
    cr_assert(g, "engine rejects %s: %s", schema, e.msg);
    for (; good && *good; good++) {
        if (re) cr_expect(cover_match(re, *good), "%s should accept %s", schema, *good);
        cr_expect(engine_accepts(g, *good), "engine: %s should accept %s", schema, *good);
    }
    for (; bad && *bad; bad++) {
        if (re) cr_expect(!cover_match(re, *bad), "%s should reject %s", schema, *bad);
        cr_expect(!engine_accepts(g, *bad), "engine: %s should reject %s", schema, *bad);
    }
    grammar_free(g);
    cover_vocab_free(v);
    if (re) pcre2_code_free(re);
}

static void cover_error(const char *schema, const char *needle)
{
    struct buf lark = {0};
    struct err e = {0};
    int r = jsonschema_to_lark(schema, strlen(schema), "", &lark, &e);
    cr_expect_neq(r, 0, "schema %s should fail", schema);
    cr_expect(strstr(e.msg, needle) != NULL, "error for %s: \"%s\" lacks \"%s\"", schema, e.msg,
              needle);
    buf_free(&lark);
}

/* two patterns and a declared name, additionalProperties by default: each key class its schema */
Test(jsonschema_cover, pattern_properties_several)
{
    cover_check("{\"type\":\"object\",\"properties\":{\"foo\":{\"type\":\"boolean\"}},"
                "\"patternProperties\":{\"^S_\":{\"type\":\"string\"},\"^I_\":{\"type\":"
                "\"integer\"}}}",
                L("{}", "{\"foo\":true}", "{\"S_a\":\"x\",\"I_b\":1,\"z\":[1]}",
                  "{\"S_\":\"\", \"q\": 1}", "{\"Sx\":1,\"fo\":1,\"fooo\":2}",
                  "{\"I_\":2,\"foo\":false,\"S_1\":\"s\"}"),
                L("{\"S_a\":1}", "{\"I_b\":\"x\"}", "{\"foo\":1}", "{\"foo\":true,\"foo\":true}",
                  "{\"q\":1,\"I_x\":1.5}"));
}

/* overlapping patterns: a key matching both takes both schemas; other keys additionalProperties */
Test(jsonschema_cover, pattern_properties_overlap)
{
    cover_check(
        "{\"type\":\"object\",\"patternProperties\":{\"^a\":{\"type\":\"integer\"},"
        "\"b$\":{\"minimum\":10}},\"additionalProperties\":{\"type\":\"string\"}}",
        L("{\"ab\":10}", "{\"ax\":1}", "{\"xb\":11.5}", "{\"xb\":\"s\"}",
          "{\"zz\":\"s\",\"\":\"\"}", "{\"a\":-3,\"b\":10}"),
        L("{\"ab\":9}", "{\"ab\":\"s\"}", "{\"ax\":1.5}", "{\"xb\":9}", "{\"zz\":1}", "{\"\":1}"));
    /* a required name matching both patterns */
    cover_check("{\"type\":\"object\",\"required\":[\"ab\"],\"patternProperties\":{\"^a\":"
                "{\"type\":\"integer\"},\"b$\":{\"minimum\":5}}}",
                L("{\"ab\":5}", "{\"x\":\"s\",\"ab\":7}"),
                L("{\"ab\":4}", "{}", "{\"ab\":\"s\"}", "{\"x\":1}"));
}

/* a declared property whose name matches a pattern: both schemas apply */
Test(jsonschema_cover, pattern_properties_declared_match)
{
    cover_check("{\"type\":\"object\",\"properties\":{\"line1\":{\"type\":\"string\"},"
                "\"city\":{\"type\":\"string\"}},\"patternProperties\":{\"^line[1-3]$\":"
                "{\"maxLength\":3}},\"additionalProperties\":false}",
                L("{\"line1\":\"abc\"}", "{\"line2\":\"x\",\"city\":\"abcdef\"}", "{\"line3\":5}"),
                L("{\"line1\":\"abcd\"}", "{\"line4\":\"x\"}", "{\"line2\":\"abcd\"}",
                  "{\"line1\":1}", "{\"x\":1}"));
    /* a length-bounded key pattern with declared names (issue 19: ^[0-9a-zA-Z_-]{1,255}$) */
    cover_check("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"}},"
                "\"patternProperties\":{\"^[a-z_]{3,4}$\":{\"type\":\"integer\"}}}",
                L("{\"id\":\"x\",\"abc\":1}", "{\"abcde\":\"s\"}", "{\"\":\"s\",\"ab\":[]}"),
                L("{\"id\":1}", "{\"abc\":\"s\"}", "{\"abcd\":null}"));
}

/* `^.*$` does not match a key with a line terminator (`.` excludes them) */
Test(jsonschema_cover, pattern_properties_dot_anchored)
{
    cover_check("{\"type\":\"object\",\"patternProperties\":{\"^.*$\":{\"type\":\"integer\"}},"
                "\"additionalProperties\":false}",
                L("{\"a\":1}", "{\"\":2}", "{\"a b\":3}"),
                L("{\"a\\nb\":1}", "{\"\\r\":1}", "{\"a\":\"s\"}"));
}

/* unanchored alternatives and anchors inside the pattern */
Test(jsonschema_cover, pattern_properties_alternation)
{
    cover_check("{\"type\":\"object\",\"patternProperties\":{\"^a|b\":{\"type\":\"integer\"}}}",
                L("{\"ax\":1,\"xbx\":2,\"c\":\"s\"}", "{\"ca\":\"s\"}"),
                L("{\"a\":\"s\"}", "{\"cb\":\"s\"}", "{\"b\":null}"));
    cover_check("{\"type\":\"object\",\"patternProperties\":{\"(^x_|_y$)\":{\"type\":\"string\"}},"
                "\"additionalProperties\":{\"type\":\"boolean\"}}",
                L("{\"x_1\":\"s\",\"1_y\":\"t\",\"x_y\":\"\",\"q\":true}"),
                L("{\"x_1\":true}", "{\"q\":\"s\"}", "{\"a_yb\":\"s\"}"));
    /* an anchor in the middle never matches: every key is additional */
    cover_check("{\"type\":\"object\",\"patternProperties\":{\"a^b\":{\"type\":\"integer\"}},"
                "\"additionalProperties\":{\"type\":\"string\"}}",
                L("{\"ab\":\"s\",\"a^b\":\"t\"}"), L("{\"ab\":1}"));
}

/* escapes and non-ASCII in keys: one spelling per character, classes exact */
Test(jsonschema_cover, pattern_properties_escapes)
{
    cover_check(
        "{\"type\":\"object\",\"properties\":{\"q\\\"\":{\"type\":\"integer\"}},"
        "\"patternProperties\":{\"^[é\\\"]\":{\"type\":\"string\"}},"
        "\"additionalProperties\":false}",
        L("{\"q\\\"\":1}", "{\"é\":\"s\",\"\\\"\":\"t\"}"),
        L("{\"q\\\"\":\"s\"}", "{\"e\":\"s\"}", "{\"é\":1}", "{\"\\\\\":\"s\"}", "{\"q\":1}"));
}

/* past the automaton's bound: an error naming patternProperties, not an approximation */
Test(jsonschema_cover, pattern_properties_bounds)
{
    cover_error("{\"type\":\"object\",\"properties\":{\"q\":true},\"patternProperties\":"
                "{\"(a|b)*a(a|b){14}\":{\"type\":\"integer\"}}}",
                "patternProperties");
}

/* one declared member with extras: the extras may come before it (issue 19 item 1) */
Test(jsonschema_cover, one_member_any_order)
{
    cover_check("{\"type\":\"object\",\"properties\":{\"foo\":{\"type\":\"boolean\"}}}",
                L("{\"foo\":true}", "{\"a\":1,\"foo\":true}", "{\"a\":1,\"foo\":true,\"b\":[]}",
                  "{\"a\":1}", "{}"),
                L("{\"foo\":1}", "{\"a\":1,\"foo\":1}", "{\"foo\":true,\"foo\":false}",
                  "{\"a\":1,\"foo\":true,\"foo\":true}"));
    cover_check("{\"type\":\"object\",\"required\":[\"k\"],\"additionalProperties\":"
                "{\"type\":\"integer\"}}",
                L("{\"k\":1}", "{\"a\":2,\"k\":1}", "{\"a\":2,\"k\":1,\"b\":3}"),
                L("{}", "{\"a\":2}", "{\"a\":2,\"k\":\"s\"}"));
}

/* pattern with format: the intersection of the two (automaton), with or without lengths */
Test(jsonschema_cover, pattern_with_format)
{
    cover_check("{\"type\":\"string\",\"format\":\"uri\",\"pattern\":\"^https://\"}",
                L("\"https://a.b/c?d=%20\"", "\"https://\""),
                L("\"http://a\"", "\"https://a b\"", "\"xhttps://a\"", "\"https://%2\""));
    cover_check("{\"type\":\"string\",\"format\":\"date\",\"pattern\":\"^2020\"}",
                L("\"2020-02-29\"", "\"2020-12-31\""),
                L("\"2021-02-28\"", "\"2020-02-30\"", "\"2020-13-01\"", "\"2020\""));
    cover_check("{\"type\":\"string\",\"format\":\"date-time\",\"pattern\":\"Z$\","
                "\"maxLength\":20}",
                L("\"2020-01-01T10:00:00Z\""),
                L("\"2020-01-01T10:00:00+01:00\"", "\"2020-01-01T10:00:00.5Z\"",
                  "\"2020-01-01T10:00:00z\""));
    cover_check("{\"type\":\"string\",\"format\":\"ipv4\",\"pattern\":\"^10\\\\.\"}",
                L("\"10.0.0.1\""), L("\"11.0.0.1\"", "\"10.0.0\"", "\"10.0.0.256\""));
}

/* patterns the direct translation cannot write: anchors inside some alternatives of a group */
Test(jsonschema_cover, pattern_anchors_anywhere)
{
    cover_check("{\"type\":\"string\",\"pattern\":\"^([^,]|$)\"}", L("\"\"", "\"a,b\"", "\"x\""),
                L("\",\"", "\",a\""));
    cover_check("{\"type\":\"string\",\"pattern\":\"(^Hpt_|^Int_|_Armour_)\"}",
                L("\"Hpt_x\"", "\"Int_\"", "\"a_Armour_b\"", "\"_Armour_\""),
                L("\"xHpt_\"", "\"Hpt\"", "\"_Armour\"", "\"\""));
    cover_check("{\"type\":\"string\",\"pattern\":\"(^Hpt_|_Armour_)\",\"maxLength\":8}",
                L("\"Hpt_abcd\"", "\"_Armour_\""), L("\"Hpt_abcde\"", "\"x_Armour_\""));
    /* lookahead stays an error naming the pattern */
    cover_error("{\"type\":\"string\",\"pattern\":\"^(a|$)(?=b)\"}", "pattern");
}

/* a NUL character inside a pattern (JSON "\u0000") is a character, not the pattern's end */
Test(jsonschema_cover, pattern_nul_character)
{
    cover_check("{\"type\":\"string\",\"pattern\":\"^/[^\\u0000]+$\"}", L("\"/a\"", "\"/ab/c\""),
                L("\"/\"", "\"a\"", "\"/a\\u0000\""));
}

/* formats only draft 3 defines are annotations under the other drafts */
Test(jsonschema_cover, draft3_formats)
{
    cover_check("{\"$schema\":\"http://json-schema.org/draft-04/schema#\",\"type\":\"integer\","
                "\"format\":\"utc-millisec\"}",
                L("0", "1700000000000"), L("\"x\"", "1.5"));
    cover_check("{\"type\":\"string\",\"format\":\"color\"}", L("\"red\"", "\"x\""), L("1"));
    cover_error("{\"$schema\":\"http://json-schema.org/draft-03/schema#\",\"type\":\"string\","
                "\"format\":\"color\"}",
                "color");
}

/* minProperties / maxProperties over optional members when no other key may appear: the
 * any-order sets count the members present */
Test(jsonschema_cover, min_max_properties_counted)
{
    cover_check("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},"
                "\"minProperties\":1,\"maxProperties\":1,\"additionalProperties\":false}",
                L("{\"a\":1}", "{\"b\":1}", "{\"c\":[]}"),
                L("{}", "{\"a\":1,\"b\":2}", "{\"c\":1,\"a\":1}", "{\"d\":1}"));
    cover_check("{\"type\":\"object\",\"properties\":{\"date\":{},\"id\":{},\"req\":{},"
                "\"resp\":{}},\"required\":[\"date\",\"id\"],\"minProperties\":3,"
                "\"additionalProperties\":false}",
                L("{\"date\":1,\"id\":2,\"req\":3}", "{\"resp\":1,\"id\":2,\"date\":3}",
                  "{\"id\":2,\"req\":1,\"resp\":1,\"date\":3}"),
                L("{\"date\":1,\"id\":2}", "{\"date\":1,\"req\":3,\"resp\":1}", "{}"));
    cover_check("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{},\"c\":{}},"
                "\"required\":[\"a\"],\"maxProperties\":2,\"additionalProperties\":false}",
                L("{\"a\":1}", "{\"b\":1,\"a\":1}"), L("{\"a\":1,\"b\":1,\"c\":1}", "{\"b\":1}"));
    /* with extra keys possible it stays an error naming the keyword */
    cover_error("{\"type\":\"object\",\"properties\":{\"a\":{},\"b\":{}},\"maxProperties\":1}",
                "maxProperties");
}

/* $ref to embedded resources: a subschema's own `$id` / draft-4 `id` URI (absolute, relative to
 * the root's, or a relative ref matched by its unique path tail), then a pointer inside it */
Test(jsonschema_cover, ref_embedded_resources)
{
    cover_check("{\"$id\":\"https://ex.com/root.json\",\"definitions\":{\"a\":{\"$id\":"
                "\"https://ex.com/a.json\",\"type\":\"string\"}},\"type\":\"object\","
                "\"properties\":{\"x\":{\"$ref\":\"https://ex.com/a.json\"}}}",
                L("{\"x\":\"s\"}"), L("{\"x\":1}"));
    cover_check("{\"$id\":\"https://ex.com/s/root.json\",\"definitions\":{\"a\":{\"$id\":"
                "\"a.json\",\"type\":\"string\"}},\"type\":\"object\",\"properties\":{\"x\":"
                "{\"$ref\":\"a.json\"}}}",
                L("{\"x\":\"s\"}"), L("{\"x\":1}"));
    cover_check("{\"definitions\":{\"a\":{\"id\":\"https://ex.com/a.json#\",\"type\":\"string\"}},"
                "\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"https://ex.com/a.json#\"}}}",
                L("{\"x\":\"s\"}"), L("{\"x\":null}"));
    cover_check("{\"$id\":\"https://ex.com/root.json\",\"definitions\":{\"a\":{\"$id\":"
                "\"https://ex.com/a.json\",\"definitions\":{\"b\":{\"type\":\"integer\"}}}},"
                "\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":"
                "\"https://ex.com/a.json#/definitions/b\"}}}",
                L("{\"x\":3}"), L("{\"x\":\"s\"}"));
    cover_check("{\"$id\":\"https://ex.com/v1/root.json\",\"definitions\":{\"t\":{\"$id\":"
                "\"https://ex.com/v1/utils/t.json\",\"type\":\"integer\"},\"u\":{\"$id\":"
                "\"https://ex.com/v1/traits/u.json\",\"type\":\"object\",\"properties\":{\"k\":"
                "{\"$ref\":\"../utils/t.json\"}}}},\"type\":\"object\",\"properties\":{\"x\":"
                "{\"$ref\":\"traits/u.json\"}}}",
                L("{\"x\":{\"k\":1}}"), L("{\"x\":{\"k\":\"s\"}}", "{\"x\":1}"));
    cover_error("{\"properties\":{\"x\":{\"$ref\":\"https://ex.com/nothere.json\"}}}", "$ref");
    /* two resources with the same path tail: ambiguous, an error */
    cover_error("{\"definitions\":{\"a\":{\"$id\":\"https://a.com/t.json\"},\"b\":{\"$id\":"
                "\"https://b.com/t.json\"}},\"properties\":{\"x\":{\"$ref\":\"t.json\"}}}",
                "$ref");
}

/* oneOf disjoint by a required member that the other alternative's patternProperties (or
 * additionalProperties) constrain apart (xAPI's inverse functional identifier) */
Test(jsonschema_cover, one_of_disjoint_by_pattern_properties)
{
    cover_check(
        "{\"oneOf\":[{\"type\":\"object\",\"properties\":{\"mbox\":{\"type\":\"string\"}},"
        "\"patternProperties\":{\"^(sha|account)$\":{\"type\":\"null\"}},"
        "\"required\":[\"mbox\"]},{\"type\":\"object\",\"properties\":{\"sha\":"
        "{\"type\":\"string\"}},\"patternProperties\":{\"^(mbox|account)$\":{\"type\":"
        "\"null\"}},\"required\":[\"sha\"]}]}",
        L("{\"mbox\":\"m\"}", "{\"sha\":\"s\"}", "{\"mbox\":\"m\",\"sha\":null}",
          "{\"sha\":\"s\",\"mbox\":null,\"x\":1}"),
        L("{}", "{\"mbox\":\"m\",\"sha\":\"s\"}", "{\"mbox\":null,\"sha\":null}", "{\"mbox\":1}"));
    /* still an error when they may overlap and cannot be negated */
    cover_error("{\"oneOf\":[{\"type\":\"string\",\"pattern\":\"a\"},{\"type\":\"string\","
                "\"pattern\":\"b\"}]}",
                "oneOf");
}

/* a long length-bounded key pattern with declared names: the key regex stays shallow (the
 * elimination's ruler order) */
Test(jsonschema_cover, pattern_properties_long_bound)
{
    /* (a key of 200 letters matches, one of 201 does not) */
#define A200                                                                                       \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
    "aaaa"                                                                                         \
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
    "aaaa"                                                                                         \
    "aaaaaaaa"
    cover_check("{\"type\":\"object\",\"properties\":{\"Id\":{\"type\":\"string\"},\"createdAt\":"
                "{\"type\":\"string\"}},\"patternProperties\":{\"^[0-9a-z_-]{1,200}$\":{\"type\":"
                "\"integer\"}},\"additionalProperties\":{\"type\":\"string\"}}",
                L("{\"Id\":\"x\",\"a\":1}", "{\"createdAt\":\"t\",\"abc_1\":2}", "{\"A\":\"s\"}",
                  "{\"\":\"s\"}", "{\"" A200 "\":3}", "{\"" A200 "a\":\"s\"}"),
                L("{\"Id\":1}", "{\"a\":\"s\"}", "{\"A\":1}", "{\"\":1}", "{\"" A200 "a\":3}",
                  "{\"" A200 "\":\"s\"}"));
#undef A200
}

/* which patterns a declared name matches follows ECMA (`$` only at the end, `.` not a line
 * terminator), as the key regexes do */
Test(jsonschema_cover, declared_names_ecma_match)
{
    cover_check("{\"type\":\"object\",\"properties\":{\"a\\n\":{\"type\":\"string\"},\"b\\r\":"
                "{\"type\":\"string\"}},\"patternProperties\":{\"^a$\":{\"type\":\"integer\"},"
                "\"^b.$\":{\"type\":\"integer\"}}}",
                L("{\"a\\n\":\"s\"}", "{\"a\":1}", "{\"b\\r\":\"s\"}", "{\"bx\":2}"),
                L("{\"a\\n\":1}", "{\"a\":\"s\"}", "{\"b\\r\":1}", "{\"bx\":\"s\"}"));
    cr_expect_eq(jsk_match("^a$", "a\n", 2), 0);
    cr_expect_eq(jsk_match("a$", "xa", 2), 1);
    cr_expect_eq(jsk_match("^.$", "\xe2\x80\xa8", 3), 0); /* U+2028 */
    cr_expect_eq(jsk_match("^[^a]$", "\xc3\xa9", 2), 1);
    cr_expect_eq(jsk_match("(?=a)", "a", 1), -1);
}

/* oneOf whose alternatives may overlap: each alternative without the ones it overlaps, when
 * their negations can be written (exactly one of several keys; discriminators not required) */
Test(jsonschema_cover, one_of_exclusive_rewrite)
{
    cover_check("{\"type\":\"object\",\"oneOf\":[{\"required\":[\"ssn\"]},{\"required\":[\"ein\"]},"
                "{\"required\":[\"itin\"]}]}",
                L("{\"ssn\":1}", "{\"ein\":\"x\",\"q\":2}", "{\"itin\":null}"),
                L("{}", "{\"ssn\":1,\"ein\":2}", "{\"ein\":1,\"itin\":2}", "{\"q\":1}"));
    /* without "type": "object" a non-object matches every alternative: none is valid */
    cover_check("{\"oneOf\":[{\"required\":[\"a\"]},{\"required\":[\"b\"]}]}",
                L("{\"a\":1}", "{\"b\":1}"), L("1", "\"s\"", "{}", "{\"a\":1,\"b\":2}"));
    cover_check("{\"type\":\"object\",\"oneOf\":[{\"properties\":{\"radius\":{\"type\":\"number\"},"
                "\"shape\":{\"const\":\"circle\"}}},{\"properties\":{\"width\":{\"type\":"
                "\"number\"},\"shape\":{\"const\":\"rect\"}}}]}",
                L("{\"shape\":\"circle\",\"radius\":1}", "{\"shape\":\"rect\",\"width\":2}",
                  "{\"radius\":1,\"width\":\"w\"}", "{\"shape\":\"rect\",\"radius\":\"r\"}",
                  "{\"shape\":\"circle\",\"width\":1}"),
                L("{}", "{\"radius\":1}", "{\"shape\":\"tri\"}", "{\"radius\":1,\"width\":2}"));
    cover_check("{\"type\":\"object\",\"oneOf\":[{\"properties\":{\"error\":{\"type\":\"string\"}},"
                "\"required\":[\"error\"]},{\"properties\":{\"ok\":{\"type\":\"boolean\"}},"
                "\"required\":[\"ok\"]}]}",
                L("{\"error\":\"e\"}", "{\"ok\":true}", "{\"error\":\"e\",\"ok\":1}",
                  "{\"ok\":false,\"error\":2}"),
                L("{\"error\":\"e\",\"ok\":true}", "{}", "{\"error\":1}"));
    /* an alternative whose negation cannot be written: still an error naming oneOf */
    cover_error("{\"oneOf\":[{\"type\":\"string\",\"minLength\":2},{\"type\":\"string\","
                "\"maxLength\":5}]}",
                "oneOf");
}

/* not of an object condition in the discriminator form */
Test(jsonschema_cover, not_discriminator)
{
    cover_check("{\"type\":\"object\",\"not\":{\"properties\":{\"a\":{\"type\":\"string\"},\"b\":"
                "{\"const\":\"x\"}},\"required\":[\"a\",\"b\"]}}",
                L("{}", "{\"a\":\"s\"}", "{\"a\":1,\"b\":\"x\"}", "{\"a\":\"s\",\"b\":\"y\"}"),
                L("{\"a\":\"s\",\"b\":\"x\"}", "{\"b\":\"x\",\"a\":\"t\",\"c\":0}"));
    cover_check("{\"not\":{\"required\":[\"a\"]}}", L("{}", "{\"b\":1}"), L("{\"a\":1}", "1"));
    cover_error("{\"not\":{\"type\":\"string\",\"minLength\":3}}", "not");
}

/* allOf merging patternProperties: with the other side's additionalProperties, or two sides'
 * patterns when neither restricts other keys */
Test(jsonschema_cover, all_of_pattern_properties)
{
    cover_check("{\"type\":\"object\",\"allOf\":[{\"patternProperties\":{\"^n_\":{\"type\":"
                "\"integer\"}}},{\"properties\":{\"id\":{\"type\":\"string\"}},"
                "\"additionalProperties\":{\"minimum\":0}}]}",
                L("{\"id\":\"x\",\"n_a\":3}", "{\"z\":5}", "{\"z\":\"s\"}"),
                L("{\"n_a\":-1}", "{\"n_a\":\"s\"}", "{\"z\":-2}", "{\"id\":1}"));
    cover_check("{\"type\":\"object\",\"allOf\":[{\"patternProperties\":{\"^a\":{\"type\":"
                "\"integer\"}}},{\"patternProperties\":{\"b$\":{\"minimum\":5}},"
                "\"additionalProperties\":true}]}",
                L("{\"ab\":5}", "{\"a\":1}", "{\"b\":7.5}", "{\"x\":\"s\"}"),
                L("{\"ab\":4}", "{\"a\":\"s\"}", "{\"b\":1}"));
    /* a declared name on one side meets the other side's patterns (all of them) */
    cover_check("{\"type\":\"object\",\"allOf\":[{\"properties\":{\"ab\":{\"type\":\"number\"}}},"
                "{\"patternProperties\":{\"^a\":{\"minimum\":1},\"b$\":{\"maximum\":3}}}]}",
                L("{\"ab\":2}", "{\"ab\":1}"), L("{\"ab\":0}", "{\"ab\":4}", "{\"ab\":\"s\"}"));
    cover_error("{\"type\":\"object\",\"allOf\":[{\"patternProperties\":{\"a\":true},"
                "\"additionalProperties\":false},{\"patternProperties\":{\"b\":true},"
                "\"additionalProperties\":false}]}",
                "patternProperties");
}
