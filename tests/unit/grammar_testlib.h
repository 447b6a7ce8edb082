/* grammar_testlib — the helpers the grammar, regex-mask and JSON Schema unit tests share: a
 * seeded xorshift (each file may set GRAMMAR_TESTLIB_SEED before including this), PCRE2 as the
 * whole-match / viable-prefix oracle, and the engine's own byte-by-byte acceptance. */
#ifndef LMS_TESTS_GRAMMAR_TESTLIB_H
#define LMS_TESTS_GRAMMAR_TESTLIB_H

#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <criterion/criterion.h>
#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

#ifndef GRAMMAR_TESTLIB_SEED
#define GRAMMAR_TESTLIB_SEED 0x2545f4914f6cdd1dull
#endif
static uint64_t testlib_rng = GRAMMAR_TESTLIB_SEED;
static inline uint32_t rnd(void)
{
    testlib_rng ^= testlib_rng << 13;
    testlib_rng ^= testlib_rng >> 7;
    testlib_rng ^= testlib_rng << 17;
    return (uint32_t)testlib_rng;
}

/* pat (PCRE2 syntax) anchored at both ends: matches only the whole subject */
static inline pcre2_code *pcre_full(const char *pat)
{
    size_t n = strlen(pat) + 16;
    char *wrapped = malloc(n);
    cr_assert(wrapped);
    snprintf(wrapped, n, "(?:%s)\\z", pat);
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_ANCHORED | PCRE2_DOLLAR_ENDONLY, &ec, &eo, NULL);
    free(wrapped);
    cr_assert(re, "pcre2 rejects %s", pat);
    return re;
}

static inline bool pcre_full_match(pcre2_code *re, const char *s, size_t n)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* 1 full match, 2 viable prefix only, 0 neither */
static inline int pcre_status(pcre2_code *re, const char *s, size_t n)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int full = pcre2_match(re, (PCRE2_SPTR)s, n, 0, 0, md, NULL) >= 0;
    int prc = pcre2_match(re, (PCRE2_SPTR)s, n, 0, PCRE2_PARTIAL_HARD, md, NULL);
    pcre2_match_data_free(md);
    if (full) return 1;
    return (prc >= 0 || prc == PCRE2_ERROR_PARTIAL) ? 2 : 0;
}

/* Whether the grammar accepts s fed byte by byte and ends accepting. */
static inline bool engine_accepts(const struct grammar *g, const char *s)
{
    struct err e = {0};
    struct matcher *m = matcher_new(g, &e);
    cr_assert(m, "%s", e.msg);
    bool ok = true;
    for (const unsigned char *p = (const unsigned char *)s; *p && ok; p++)
        if (matcher_consume(m, *p)) ok = false;
    if (ok) ok = matcher_accepting(m);
    matcher_free(m);
    return ok;
}

#endif
