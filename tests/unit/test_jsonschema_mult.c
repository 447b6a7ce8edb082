/* multipleOf as a divisibility automaton (jsonschema_mult.c, issue 19): the integer-multiple
 * regexes against arithmetic through PCRE2 (length regions written as lookaheads on the digit
 * run), and schemas with the keyword through the grammar engine, valid and invalid instances. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/buf.h"
#include "base/err.h"
#include "grammar/grammar.h"
#include "grammar/jsonschema.h"
#include "grammar/jsonschema_internal.h"
#include "grammar_testlib.h"

#define L(...) ((const char *const[]){__VA_ARGS__, NULL})

/* (?Lk,n:X) over ticked digits -> a lookahead on the length of the digit run, (?T) dropped */
static pcre2_code *mult_pcre(const char *rx)
{
    struct buf o = {0};
    for (const char *p = rx; *p;) {
        if (*p == '\\') {
            buf_append(&o, p, 2);
            p += 2;
        } else if (!strncmp(p, "(?T)", 4)) {
            p += 4;
        } else if (!strncmp(p, "(?L", 3)) {
            char *q;
            long lo = strtol(p + 3, &q, 10), hi = -1;
            q++; /* ',' */
            if (*q != ':') hi = strtol(q, &q, 10);
            p = q + 1;
            if (hi < 0)
                buf_printf(&o, "(?=[0-9]{%ld,}(?![0-9]))(?:", lo);
            else
                buf_printf(&o, "(?=[0-9]{%ld,%ld}(?![0-9]))(?:", lo, hi);
        } else
            buf_append(&o, p++, 1);
    }
    buf_puts(&o, "");
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)o.data, PCRE2_ZERO_TERMINATED,
                                   PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
    cr_assert(re, "pcre2 error %d at %zu in %.300s", ec, (size_t)eo, o.data);
    buf_free(&o);
    return re;
}

static bool match(pcre2_code *re, const char *s)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    cr_assert(rc >= 0 || rc == PCRE2_ERROR_NOMATCH, "pcre2_match error %d", rc);
    return rc >= 0;
}

/* ---- schemas through the grammar engine (byte vocabulary) */

struct bvocab {
    char bytes[256][2];
    const char *ptr[256];
    uint32_t len[256];
    bool sp[256];
    struct grammar_vocab gv;
    struct grammar_vocab_index *vi;
};

static struct bvocab *bvocab_new(void)
{
    struct bvocab *v = calloc(1, sizeof *v);
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

static struct jsrx_dec dec(const char *s)
{
    struct jsrx_dec d;
    cr_assert_eq(jsrx_dec_parse(s, &d), 0, "%s", s);
    return d;
}

/* every integer of [-W, W] (and spellings around it) against arithmetic */
static bool diff(long long m, const char *lo, bool lo_excl, const char *hi, bool hi_excl,
                 bool frac0)
{
    struct jsrx_dec dl, dh;
    if (lo) dl = dec(lo);
    if (hi) dh = dec(hi);
    double flo = lo ? strtod(lo, NULL) : -1e300, fhi = hi ? strtod(hi, NULL) : 1e300;
    struct buf rx = {0};
    struct err e = {0};
    int r = jsrx_int_multiples(m, lo ? &dl : NULL, lo_excl, hi ? &dh : NULL, hi_excl, frac0, &rx,
                               &e);
    /* the one documented limit: a bound leaving more than 2000 multiples to list */
    if (r < 0 && strstr(e.msg, "more than 2000 multiples")) {
        buf_free(&rx);
        return false;
    }
    cr_assert(r >= 0, "m %lld [%s, %s]: %s", m, lo ? lo : "-", hi ? hi : "-", e.msg);
    bool any = false;
    /* PCRE2 has no length regions: the lookahead form is exact only for a region that ends
     * the digit run, so regexes with one are checked by the grammar engine alone */
    pcre2_code *re = r == 0 && !strstr(rx.data, "(?L") ? mult_pcre(rx.data) : NULL;
    static struct bvocab *v;
    if (!v) v = bvocab_new();
    struct grammar *g = NULL;
    if (r == 0) {
        g = grammar_compile(v->vi, GRAMMAR_REGEX, rx.data, rx.len, &e);
        cr_assert(g, "engine rejects %s: %s", rx.data, e.msg);
    }
#define OK(t) (re ? match(re, t) : engine_accepts(g, t))
#define BOTH(t) (re ? (match(re, t) == engine_accepts(g, t) ? match(re, t) : -1) : engine_accepts(g, t))
    const long long W = 1300;
    for (long long x = -W; x <= W; x++) {
        bool in = x % m == 0 && (x > flo || (!lo_excl && x == flo)) &&
                  (x < fhi || (!hi_excl && x == fhi));
        any |= in;
        char t[64];
        snprintf(t, sizeof t, "%lld", x);
        if (g) {
            cr_expect_eq(BOTH(t), in, "m %lld [%s%s, %s%s] %s: regex %.200s", m,
                         lo_excl ? ">" : "", lo ? lo : "-", hi_excl ? "<" : "", hi ? hi : "-", t,
                         rx.data);
            snprintf(t, sizeof t, "%lld.0", x);
            cr_expect_eq(BOTH(t), in && frac0, "m %lld: %s", m, t);
            snprintf(t, sizeof t, "%lld.5", x);
            cr_expect(!OK(t), "m %lld: %s", m, t);
            if (x > 0) {
                snprintf(t, sizeof t, "0%lld", x);
                cr_expect(!OK(t), "m %lld: leading zero %s", m, t);
            }
        }
    }
    if (!g) cr_expect(!any, "m %lld: empty, yet a multiple lies in range", m);
    if (g) {
        bool zero = m && (0 > flo || (!lo_excl && 0 == flo)) && (0 < fhi || (!hi_excl && 0 == fhi));
        cr_expect_eq(BOTH("-0"), zero, "m %lld: -0", m);
        cr_expect(!OK(""), "m %lld: empty text", m);
        cr_expect(!OK("-"), "m %lld: a sign alone", m);
        /* far beyond the window: 10^20 * k */
        char big[80];
        for (long long k = 1; k <= 30; k++) {
            snprintf(big, sizeof big, "%lld00000000000000000000", k);
            bool in = (k * 100000000000000000ll % m * 1000 % m) == 0 && !hi;
            /* 10^20 k mod m via 10^17 k * 1000 */
            cr_expect_eq(BOTH(big), in, "m %lld: %s", m, big);
        }
        if (re) pcre2_code_free(re);
        grammar_free(g);
    }
#undef OK
#undef BOTH
    buf_free(&rx);
    return true;
}

Test(jsonschema_mult, vs_arithmetic)
{
    /* m = 2^a 5^b and 3 * 2^a 5^b (other odd factors: error, below) */
    const long long ms[] = {1,  2,  3,  4,  5,  6,  8,   10,  12,  15,  16,   20,
                            24, 25, 30, 40, 48, 60, 100, 125, 250, 375, 1000, 3000};
    const char *bounds[][2] = {{NULL, NULL}, {"0", NULL},     {"1", NULL},   {"-7", NULL},
                               {"13", NULL}, {"100", NULL},   {"997", NULL}, {"1234", NULL},
                               {NULL, "0"},  {NULL, "-1"},    {NULL, "45"},  {NULL, "-1000"},
                               {"-50", "50"}, {"7", "2500"},  {"-2500", "-3"}, {"0.5", "99.5"},
                               {"-12.5", NULL}, {NULL, "300.25"}, {"10", "10"}, {"11", "13"}};
    int done = 0, limited = 0;
    for (size_t i = 0; i < sizeof ms / sizeof *ms; i++)
        for (size_t j = 0; j < sizeof bounds / sizeof *bounds; j++)
            for (int x = 0; x < 4; x++) {
                if (diff(ms[i], bounds[j][0], x & 1, bounds[j][1], x & 2, i % 2 == 0))
                    done++;
                else
                    limited++;
            }
    cr_expect(limited < done / 10, "%d of %d hit the listing limit", limited, done + limited);
}

/* random bounds, several sizes of modulus */
Test(jsonschema_mult, random_ranges)
{
    srand(19);
    for (int t = 0; t < 300; t++) {
        static const long long pick[] = {3, 4, 5, 6, 8, 12, 15, 16, 20, 24, 25, 30, 40, 48, 60};
        long long m = pick[rand() % (int)(sizeof pick / sizeof *pick)];
        char lo[32], hi[32];
        int a = rand() % 5200 - 2600, b = a + rand() % 3000;
        snprintf(lo, sizeof lo, "%d", a);
        snprintf(hi, sizeof hi, "%d", b);
        int which = rand() % 3;
        diff(m, which == 1 ? NULL : lo, rand() % 2, which == 2 ? NULL : hi, rand() % 2,
             rand() % 2);
    }
}

Test(jsonschema_mult, limits)
{
    struct buf rx = {0};
    struct err e = {0};
    cr_expect_eq(jsrx_int_multiples(10001, NULL, false, NULL, false, false, &rx, &e), -1);
    cr_expect(strstr(e.msg, "multipleOf"), "%s", e.msg);
    e = (struct err){0};
    /* 41 is prime to 10: 41 states, above the elimination bound; 7's regex is too large */
    cr_expect_eq(jsrx_int_multiples(41, NULL, false, NULL, false, false, &rx, &e), -1);
    cr_expect(strstr(e.msg, "automaton"), "%s", e.msg);
    e = (struct err){0};
    cr_expect_eq(jsrx_int_multiples(7, NULL, false, NULL, false, false, &rx, &e), -1);
    cr_expect(strstr(e.msg, "the regex needs more than"), "%s", e.msg);
    e = (struct err){0};
    /* 2^6: its last 6 digits take 15,625 forms */
    cr_expect_eq(jsrx_int_multiples(64, NULL, false, NULL, false, false, &rx, &e), -1);
    cr_expect(strstr(e.msg, "last 6 digits"), "%s", e.msg);
    buf_free(&rx);
}

static void engine_check(const char *schema, const char *const *good, const char *const *bad)
{
    struct bvocab *v = bvocab_new();
    struct err e = {0};
    struct grammar *g = grammar_compile(v->vi, GRAMMAR_JSON_SCHEMA, schema, strlen(schema), &e);
    cr_assert(g, "engine rejects %s: %s", schema, e.msg);
    for (; good && *good; good++)
        cr_expect(engine_accepts(g, *good), "engine: %s should accept %s", schema, *good);
    for (; bad && *bad; bad++)
        cr_expect(!engine_accepts(g, *bad), "engine: %s should reject %s", schema, *bad);
    grammar_free(g);
    grammar_vocab_index_free(v->vi);
    free(v);
}

Test(jsonschema_mult, schemas_through_the_engine)
{
    /* MaskBench Github_trivial---o25195 and ---o83695 */
    engine_check("{\"properties\":{\"bar\":{\"type\":\"integer\",\"multipleOf\":3}}}",
                 L("{\"bar\":6}", "{\"bar\":-3}", "{\"bar\":0}", "{\"bar\":123456789}", "{}"),
                 L("{\"bar\":7}", "{\"bar\":4.5}", "{\"bar\":6.0}", "{\"bar\":123456788}",
                   "{\"bar\":06}"));
    engine_check("{\"type\":\"object\",\"properties\":{\"length\":{\"type\":\"integer\","
                 "\"minimum\":0,\"multipleOf\":12}}}",
                 L("{\"length\":24}", "{\"length\":0}", "{\"length\":120}", "{\"length\":1200000}"),
                 L("{\"length\":-1}", "{\"length\":25}", "{\"length\":-12}", "{\"length\":1200001}"));
    /* type number: integral spellings with a fraction of zeros; a lower bound above zero */
    engine_check("{\"type\":\"number\",\"multipleOf\":15,\"exclusiveMinimum\":20}",
                 L("30", "30.0", "45", "1500", "15000000"), L("15", "20", "25", "30.5", "-30"));
    /* one bound far from zero, and an upper bound: the negatives unbounded */
    engine_check("{\"type\":\"integer\",\"multipleOf\":6,\"minimum\":1000}",
                 L("1002", "9996", "10002", "600000"), L("996", "1000", "1001", "10004", "-1002"));
    engine_check("{\"type\":\"integer\",\"multipleOf\":4,\"maximum\":-8}",
                 L("-8", "-12", "-400000"), L("-4", "0", "8", "-10"));
    /* integer type, fractional multipleOf: every integer multiple of 0.5 is any integer */
    engine_check("{\"type\":\"integer\",\"multipleOf\":0.5,\"maximum\":10}",
                 L("10", "3", "-100"), L("11", "2.5"));
    engine_check("{\"type\":\"integer\",\"multipleOf\":1.5}", L("3", "-6", "0"),
                 L("1", "4", "1.5"));
}
