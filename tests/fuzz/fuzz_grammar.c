/* libFuzzer target for the grammar compilers (regex, lark, JSON Schema, GBNF) under small
 * budgets: any source must compile or fail with a message naming the problem — never crash,
 * leak, hang or blow the memory — and a compiled grammar must run: masks, consumes (the first allowed token,
 * or one picked by the input), rollback, accepting/done, with mask and consume agreeing.
 * Built by `make fuzz` (clang -fsanitize=fuzzer,address,undefined); run by
 * tests/suites/52-grammar-fuzz.sh. Input: first byte = kind (mod 4) and token-choice seed, the
 * rest = source. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

/* A small byte-level vocabulary: every byte, some multi-byte pieces of JSON / code, specials. */
static const char *pieces[] = {"{\"",  "\":",  "\",",  "\"}",  "true", "false", "null", "  ",
                               "\n  ", "abc", "123", "0.5",  "-1",   "[]",    "{}",   "\\n",
                               "é",    "日本", "<tool_call>", "</tool_call>", "<|im_end|>"};
#define N_PIECES ((int)(sizeof pieces / sizeof *pieces))
#define N_SPECIAL 3 /* the last three pieces */
#define N_TOK (1 + 255 + N_PIECES)

static struct grammar_vocab_index *vi;
static char bytes1[256][2];
static const char *tok[N_TOK];
static uint32_t len[N_TOK];
static bool sp[N_TOK];

static void init(void)
{
    /* token 0 = <|endoftext|> (eos, special); 1..255 = bytes 1..255 */
    tok[0] = "<|endoftext|>";
    len[0] = 13;
    sp[0] = true;
    for (int b = 1; b < 256; b++) {
        bytes1[b][0] = (char)b;
        tok[b] = bytes1[b];
        len[b] = 1;
    }
    for (int i = 0; i < N_PIECES; i++) {
        tok[256 + i] = pieces[i];
        len[256 + i] = (uint32_t)strlen(pieces[i]);
        sp[256 + i] = i >= N_PIECES - N_SPECIAL;
    }
    struct grammar_vocab gv = {N_TOK, tok, len, sp, 0};
    struct err e = {0};
    vi = grammar_vocab_index_new(&gv, &e);
    if (!vi) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!vi) init();
    static const enum grammar_kind kinds[4] = {GRAMMAR_REGEX, GRAMMAR_LARK, GRAMMAR_JSON_SCHEMA,
                                               GRAMMAR_GBNF};
    enum grammar_kind k = kinds[data[0] % 4];
    uint32_t seed = data[0] / 4u;
    /* small budgets keep each run fast and prove the budgets hold on arbitrary input */
    struct grammar_budget b = grammar_budget_default;
    b.max_nfa_states = 20000;
    b.max_productions = 20000;
    b.max_compile_bytes = (size_t)8 << 20;
    b.max_dfa_bytes = (size_t)8 << 20;
    b.max_mask_work = 200000;
    b.max_items = 200000;
    b.max_compile_ms = 0; /* CPU time is not reproducible: libFuzzer's -timeout covers hangs */
    struct err e;
    err_clear(&e);
    struct grammar *g = grammar_compile_budget(vi, k, (const char *)data + 1, size - 1, &b, &e);
    if (!g) {
        if (!e.msg[0] || e.code == ERR_OK) abort(); /* every failure must say why */
        return 0;
    }
    struct matcher *m = matcher_new(g, &e);
    if (!m) {
        if (!e.msg[0]) abort();
        grammar_free(g);
        return 0;
    }
    uint32_t mask[(N_TOK + 31) / 32];
    int consumed = 0;
    for (int step = 0; step < 24; step++) {
        matcher_mask(m, mask);
        if (matcher_status(m, &e)) {
            if (!e.msg[0]) abort();
            break;
        }
        int n_allowed = 0, pick = -1;
        for (int t = 0; t < N_TOK; t++)
            if (mask[t >> 5] >> (t & 31) & 1) n_allowed++;
        if (!n_allowed) break;
        int want = (int)((seed * 2654435761u + (uint32_t)step * 40503u) % (uint32_t)n_allowed);
        for (int t = 0; t < N_TOK && pick < 0; t++)
            if (mask[t >> 5] >> (t & 31) & 1 && want-- == 0) pick = t;
        bool eos_ok = mask[0] & 1;
        if (matcher_accepting(m) && !eos_ok) abort(); /* accepting: eos is allowed */
        int rc = matcher_consume(m, pick);
        if (rc != 0 && !matcher_status(m, NULL)) abort(); /* the mask allowed it */
        if (rc != 0) break;
        consumed++;
        if (pick == 0 || matcher_done(m)) break;
    }
    /* a disallowed token is refused without changing the state */
    if (consumed && matcher_rollback(m, 1) != 0) abort();
    matcher_free(m);
    grammar_free(g);
    return 0;
}
