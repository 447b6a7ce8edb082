/* rx_testlib — one pattern's lexer automaton (AST, NFA, DFA) for the regex engine's unit tests
 * (test_grammar_bytecls.c, test_grammar_mask_prune.c); each test sets its DFA switches after
 * one_init. */
#ifndef LMS_TESTS_RX_TESTLIB_H
#define LMS_TESTS_RX_TESTLIB_H

#include <criterion/criterion.h>
#include <string.h>

#include "grammar/regex.h"

struct one {
    struct rx_ast a;
    struct rx_nfa n;
    struct rx_dfa d;
    int32_t start;
};

static inline void one_init(struct one *o, const char *pat)
{
    struct err e = {0};
    memset(o, 0, sizeof *o);
    int32_t root = rx_parse(&o->a, pat, strlen(pat), &e);
    cr_assert(root >= 0, "%s: %s", pat, e.msg);
    o->start = rx_nfa_add(&o->n, &o->a, root, 0, &e);
    cr_assert(o->start >= 0, "%s: %s", pat, e.msg);
    cr_assert_eq(rx_dfa_init(&o->d, &o->n, &e), 0);
}

static inline void one_deinit(struct one *o)
{
    rx_dfa_deinit(&o->d);
    rx_nfa_deinit(&o->n);
    rx_ast_deinit(&o->a);
}

#endif
