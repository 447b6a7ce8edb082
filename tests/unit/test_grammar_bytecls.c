/* Byte classes (regex.c byte_classes, docs/grammar.md "Byte classes"): a transition computed for
 * one byte is stored for every byte that each byte state of the NFA takes alike. Checked two
 * ways: the DFA with classes against the same DFA storing each byte alone (no_classes), state by
 * state over every byte (same kernel and accept set, or both dead), on patterns with counted
 * loops, length regions, inner counts, UTF-8 classes, anchors and unanchored parts; and the
 * closures it saves (a state's 256 transitions cost one closure per class, not per byte). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/regex.h"
#include "mem_testlib.h"
#include "rx_testlib.h"

static void one_set(struct one *o, const char *pat, bool classes)
{
    one_init(o, pat);
    o->d.no_classes = !classes;
}

static bool same_state(const struct rx_dfa *x, uint32_t s, const struct rx_dfa *y, uint32_t t)
{
    if ((s == RX_DEAD) != (t == RX_DEAD)) return false;
    if (s == RX_DEAD) return true;
    const struct rx_dstate *a = &x->st[s], *b = &y->st[t];
    return a->n_kernel == b->n_kernel && a->n_accept == b->n_accept &&
           !memcmp(a->kernel, b->kernel, (size_t)a->n_kernel * sizeof *a->kernel) &&
           !memcmp(a->accept, b->accept, (size_t)a->n_accept * sizeof *a->accept);
}

static const char *const pats[] = {
    "[a-z]+:[a-z]+",
    ".+@.+\\..+",
    "(?:.+/)?.+:.+",
    "[^\"\\\\]*\"",
    "[a-f0-9]{24}",
    "[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\\.[A-Za-z]{2,}",
    "^(?:\\S+\\s+){0,5}\\S+$",
    "(?L2,5:(?:[ab](?T))*c(?T)(?:[ab](?T))*)",
    "(?L3,50:(?:[ab](?T))(?:(?:[ab]|é)(?T)){0,61}c(?T))",
    "(?L0,12:(?:(?:[^ ]+ ){0,3}[^ ]+)(?T))",
    "(?:é|ab|[\\x{100}-\\x{7ff}]|[\\x{10000}-\\x{10ffff}]|\\d)*z",
    "x{3,7}[0-9]{2,}|[x-z]*9",
    "(?:[a-c]|[x-z])+[b-y]",
};

/* Every state reachable from the start (up to a few hundred), every byte: classes on and off
 * reach the same state. */
Test(grammar_bytecls, same_dfa_as_per_byte)
{
    for (size_t p = 0; p < sizeof pats / sizeof *pats; p++) {
        struct one on, off;
        one_set(&on, pats[p], true);
        one_set(&off, pats[p], false);
        cr_assert(on.d.n_cls >= 1 && on.d.n_cls <= 256);
        enum { MAXQ = 400 };
        uint32_t qa[MAXQ], qb[MAXQ];
        int nq = 0;
        qa[nq] = rx_dfa_start(&on.d, &on.start, 1);
        qb[nq] = rx_dfa_start(&off.d, &off.start, 1);
        cr_assert(same_state(&on.d, qa[0], &off.d, qb[0]), "%s: start", pats[p]);
        nq++;
        bool *seen = calloc(400000, 1);
        cr_assert(seen);
        seen[qa[0]] = true;
        for (int k = 0; k < nq; k++)
            for (int b = 0; b < 256; b++) {
                uint32_t x = rx_dfa_next(&on.d, qa[k], (uint8_t)b);
                uint32_t y = rx_dfa_next(&off.d, qb[k], (uint8_t)b);
                cr_assert(!on.d.failed && !off.d.failed);
                cr_assert(same_state(&on.d, x, &off.d, y), "%s: state %d byte %02x", pats[p], k, b);
                if (x != RX_DEAD && !seen[x] && nq < MAXQ) {
                    seen[x] = true;
                    qa[nq] = x;
                    qb[nq] = y;
                    nq++;
                }
            }
        cr_assert_gt(nq, 3, "%s", pats[p]);
        free(seen);
        one_deinit(&on);
        one_deinit(&off);
    }
}

/* Classes: every byte of one class is taken by the same byte states (checked on the NFA), and a
 * state's 256 transitions cost one closure per class. */
Test(grammar_bytecls, one_closure_per_class)
{
    for (size_t p = 0; p < sizeof pats / sizeof *pats; p++) {
        struct one on, off;
        one_set(&on, pats[p], true);
        one_set(&off, pats[p], false);
        for (int32_t i = 0; i < on.n.n; i++) {
            const struct rx_nstate *st = &on.n.s[i];
            if (st->kind != NS_BYTE) continue;
            for (int b = 1; b < 256; b++)
                for (int c = 0; c < b; c++)
                    if (on.d.cls[b] == on.d.cls[c])
                        cr_assert_eq(b >= st->lo && b <= st->hi, c >= st->lo && c <= st->hi,
                                     "%s: bytes %02x %02x", pats[p], b, c);
        }
        uint32_t qa = rx_dfa_start(&on.d, &on.start, 1);
        uint32_t qb = rx_dfa_start(&off.d, &off.start, 1);
        uint64_t ca = on.d.computed, cb = off.d.computed;
        for (int b = 0; b < 256; b++) {
            rx_dfa_next(&on.d, qa, (uint8_t)b);
            rx_dfa_next(&off.d, qb, (uint8_t)b);
        }
        cr_assert_eq(off.d.computed - cb, 256, "%s", pats[p]);
        cr_assert_leq(on.d.computed - ca, (uint64_t)on.d.n_cls, "%s", pats[p]);
        one_deinit(&on);
        one_deinit(&off);
    }
    /* a JSON-string-like class: far fewer classes than bytes */
    struct one o;
    one_set(&o, "(?:[^\"\\\\\\x00-\\x1f]|\\\\[\"\\\\/])*:[a-z]*", true);
    cr_assert_lt(o.d.n_cls, 40, "%d classes", o.d.n_cls);
    uint32_t q = rx_dfa_start(&o.d, &o.start, 1);
    uint64_t c0 = o.d.computed;
    for (int b = 'a'; b <= 'z'; b++)
        rx_dfa_next(&o.d, q, (uint8_t)b);
    cr_assert_eq(o.d.computed - c0, 1); /* the letters are one class */
    one_deinit(&o);
}

/* The transition table's rows are populated ahead of the states that write them (regex.c
 * trans_populate: a page fault per 4 new states cost ~10 us each on a paravirtualized VM, inside
 * the masks that made them): after 600 states of a counted loop every row up to the last state's
 * is resident before it is written, and the table moved (mremap) several times on the way. */
Test(grammar_bytecls, transition_rows_populated_ahead)
{
    struct one o;
    one_init(&o, "a{0,900}b");
    uint32_t q = rx_dfa_start(&o.d, &o.start, 1);
    for (int i = 0; i < 600 && q != RX_DEAD; i++)
        q = rx_dfa_next(&o.d, q, (uint8_t)'a');
    cr_assert_neq(q, RX_DEAD);
    cr_assert_geq(o.d.n, 600, "only %d states", o.d.n);
    cr_assert_gt(o.d.trans_remaps, 2, "the table never moved: %d remaps", (int)o.d.trans_remaps);
    cr_assert_gt(o.d.trans_pop, o.d.n + 4, "rows populated %d, states %d", o.d.trans_pop, o.d.n);
    /* the rows no state has written yet: resident only if populated */
    const uint32_t *from = o.d.trans + (size_t)o.d.n * 256;
    size_t np, resident = resident_pages(from, (size_t)(o.d.trans_pop - o.d.n) * 256 * sizeof *from, &np);
    cr_assert_gt(np, 0);
    cr_assert_eq(resident, np, "%zu of %zu pages of rows populated ahead resident", resident, np);
    one_deinit(&o);
}
