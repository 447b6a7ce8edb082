/* The lexer DFA's transition table grows by mremap (regex.c trans_remap, docs/grammar.md "Byte
 * classes"): a DFA driven through 20,000 counted states (the table doubling from 64 states to
 * 32,768) keeps every transition it stored, the states and their acceptance are those of the
 * pattern, and the growths were moves of the mapping (trans_remaps), not copies. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/regex.h"

Test(grammar_transmap, grows_in_place_and_keeps_transitions)
{
    const char *pat = "(?:a|bc){0,60000}d";
    struct err e = {0};
    struct rx_ast a = {0};
    struct rx_nfa n = {0};
    struct rx_dfa d;
    int32_t root = rx_parse(&a, pat, strlen(pat), &e);
    cr_assert(root >= 0, "%s", e.msg);
    int32_t start = rx_nfa_add(&n, &a, root, 0, &e);
    cr_assert(start >= 0, "%s", e.msg);
    cr_assert_eq(rx_dfa_init(&d, &n, &e), 0);
    enum { LEN = 20000 };
    char *s = malloc(LEN);
    uint32_t *q = malloc((LEN + 1) * sizeof *q);
    cr_assert(s && q);
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < LEN;) { /* words a / bc at random: one new state per count */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        if (r & 1 || i + 1 == LEN) {
            s[i++] = 'a';
        } else {
            s[i++] = 'b';
            s[i++] = 'c';
        }
    }
    q[0] = rx_dfa_start(&d, &start, 1);
    for (int i = 0; i < LEN; i++) {
        q[i + 1] = rx_dfa_next(&d, q[i], (uint8_t)s[i]);
        cr_assert_neq(q[i + 1], RX_DEAD, "byte %d", i);
        if (i % 97 == 0) { /* a word boundary accepts after d; inside bc it does not */
            uint32_t t = rx_dfa_next(&d, q[i + 1], 'd');
            cr_assert_eq(t != RX_DEAD && rx_dfa_accepting(&d, t), s[i] != 'b', "byte %d", i);
        }
    }
    cr_assert(!d.failed);
    cr_assert_gt(d.n, 10000);
    cr_assert_geq(d.trans_remaps, 8, "%llu growths by mremap", (unsigned long long)d.trans_remaps);
    /* every transition stored before the growths is still there */
    for (int i = 0; i < LEN; i++)
        cr_assert_eq(d.trans[(size_t)q[i] * 256 + (uint8_t)s[i]], q[i + 1], "byte %d", i);
    free(s);
    free(q);
    rx_dfa_deinit(&d);
    rx_nfa_deinit(&n);
    rx_ast_deinit(&a);
}
