/* nanochat's text side: the family descriptor, the renderer's structure, the calculator and the
 * serve layer's in-reply tool state machine on a real nanochat vocabulary (a tokenizer file
 * written here: the 256 bytes, "42" and the nine specials). Token-level equality with nanochat's
 * render_conversation and the calculator against Python's eval are tests/suites/46-nanochat-chat.sh. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/text/calc.h"
#include "engine/text/chat.h"
#include "engine/text/family.h"
#include "engine/text/vocab.h"
#include "serve/inline_tool.h"

static const char *const SP[9] = {"<|bos|>", "<|user_start|>", "<|user_end|>",
                                  "<|assistant_start|>", "<|assistant_end|>", "<|python_start|>",
                                  "<|python_end|>", "<|output_start|>", "<|output_end|>"};
#define PATTERN                                                                                   \
    "'(?i:[sdmt]|ll|ve|re)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?+\\\\p{L}+|\\\\p{N}{1,2}| "              \
    "?[^\\\\s\\\\p{L}\\\\p{N}]++[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]|\\\\s+(?!\\\\S)|\\\\s+"

/* 256 byte tokens, then "42" (id 256), then the specials from 257. */
static struct vocab *tiny_vocab(void)
{
    static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char path[] = "/tmp/lms-nanotok-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"format\": \"lmserve-nanochat-tokenizer\", \"format_version\": 1, "
               "\"pattern\": \"" PATTERN "\", \"mergeable_ranks\": [");
    for (int b = 0; b < 256; b++)
        fprintf(f, "\"%c%c==\", ", B64[b >> 2], B64[(b & 3) << 4]);
    fprintf(f, "\"NDI=\"], \"special_tokens\": {");
    for (int k = 0; k < 9; k++) fprintf(f, "%s\"%s\": %d", k ? ", " : "", SP[k], 257 + k);
    fprintf(f, "}}");
    fclose(f);
    struct err e = {0};
    struct vocab *v = vocab_load_tiktoken(path, &e);
    unlink(path);
    cr_assert_not_null(v, "%s", e.msg);
    return v;
}

static int32_t sp(int k) { return 257 + k; }

Test(nanochat, descriptor)
{
    const struct family *f = family_find("nanochat");
    cr_assert(f && !strcmp(f->name, "nanochat"));
    cr_assert_null(family_think(f));
    cr_assert_null(family_tool_markers(f));
    cr_assert_eq(f->tool_style, FAMILY_TOOLS_NONE);
    cr_assert_null(f->forced_call);
    cr_assert(f->caps.system_role && !f->caps.reasoning && f->caps.grammar && f->caps.stop);
    cr_assert_str_eq(f->end_of_turn[0], "<|assistant_end|>");
    cr_assert_str_eq(f->end_of_turn[1], "<|bos|>");
    cr_assert_null(f->end_of_turn[2]);
    cr_assert(f->inline_tool && !strcmp(f->inline_tool->call.open, "<|python_start|>"));
    cr_assert_str_eq(f->inline_tool->result.close, "<|output_end|>");
}

Test(nanochat, vocabulary_specials)
{
    struct vocab *v = tiny_vocab();
    cr_assert_eq(vocab_size(v), 266);
    cr_assert_eq(tok_bos(v), sp(0));
    cr_assert(tok_add_bos(v));
    cr_assert(tok_is_eog(v, sp(0)) && tok_is_eog(v, sp(4)) && !tok_is_eog(v, sp(5)));
    for (int k = 0; k < 9; k++) cr_assert_eq(tok_find(v, SP[k], strlen(SP[k])), sp(k));
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    struct err e = {0};
    cr_assert_eq(tok_encode(v, "42<|bos|>", 9, NULL, 0, false, &ids, &n, &cap, &e), 0);
    cr_assert_eq(n, 8); /* "42" whole, then <|bos|> as its 7 bytes */
    cr_assert_eq(ids[0], 256);
    n = 0;
    cr_assert_eq(tok_encode(v, "42<|bos|>", 9, NULL, 0, true, &ids, &n, &cap, &e), 0);
    cr_assert(n == 2 && ids[1] == sp(0));
    free(ids);
    vocab_free(v);
}

Test(nanochat, render_structure_and_system_merge)
{
    struct chat_msg m[3] = {{.role = CHAT_SYSTEM, .content = "S"},
                            {.role = CHAT_USER, .content = "<|bos|>U"},
                            {.role = CHAT_ASSISTANT, .content = "A<|python_start|>1+1"}};
    struct chat_prompt p = {0};
    struct chat_prompt_opts o = {.add_generation_prompt = true, .continue_final = true};
    struct err e = {0};
    cr_assert_eq(chat_render("nanochat", m, 3, &o, &p, &e), 0, "%s", e.msg);
    const char *want = "<|user_start|>S\n\n<|bos|>U<|user_end|><|assistant_start|>A"
                       "<|python_start|>1+1"; /* the server prepends <|bos|> (add_bos) */
    cr_assert_eq(p.text.len, strlen(want));
    cr_assert(!memcmp(p.text.data, want, p.text.len));
    /* structure: <|user_start|>, <|user_end|><|assistant_start|>; the user's <|bos|> and the
     * unpaired <|python_start|> (no <|python_end|> after it) are text */
    cr_assert_eq(p.n_spans, 2);
    cr_assert(p.spans[0].off == 0 && p.spans[0].len == 14);
    cr_assert_eq(p.spans[1].len, strlen("<|user_end|><|assistant_start|>"));
    chat_prompt_free(&p);
    struct vocab *v = tiny_vocab();
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    cr_assert_eq(chat_render("nanochat", m + 1, 1, &o, &p, &e), 0);
    cr_assert_eq(tok_encode(v, p.text.data, p.text.len, p.spans, p.n_spans, false, &ids, &n, &cap,
                            &e), 0);
    /* <|user_start|> "<|bos|>U" as 8 byte tokens <|user_end|> <|assistant_start|> */
    cr_assert_eq(n, 11);
    cr_assert(ids[0] == sp(1) && ids[1] == '<' && ids[9] == sp(2) && ids[10] == sp(3));
    free(ids);
    vocab_free(v);
    chat_prompt_free(&p);
}

static const char *calc(const char *s)
{
    static char out[256];
    struct buf b = {0};
    int r = calc_eval(s, strlen(s), &b);
    cr_assert(r >= 0);
    snprintf(out, sizeof out, "%s", r ? (b.data ? b.data : "") : "(none)");
    buf_free(&b);
    return out;
}

Test(nanochat, calculator_cases)
{
    /* expected: str(eval(x)) in Python 3 behind nanochat's use_calculator gate */
    const char *cases[][2] = {
        {"1+2", "3"},           {"7/2", "3.5"},          {"-7//2", "-4"},
        {"7.5//-2", "-4.0"},    {"0.1+0.2", "0.30000000000000004"},
        {"1,234 * 2", "2468"},  {"2**10", "(none)"},     {"10/0", "(none)"},
        {"01", "(none)"},       {"00", "0"},             {"()", "()"},
        {"1/3", "0.3333333333333333"},                   {"1e5", "(none)"},
        {"100000000000000000.0", "1e+17"},               {"0.00001", "1e-05"},
        {"'strawberry'.count('r')", "3"},                {"\"dir\".count(\"d\")", "(none)"},
        {"'aaa'.count('')", "4"},                        {"len('abc')", "(none)"},
        {"'a'.count('a') 1", "(none)"},                  {"import os", "(none)"},
        {"9223372036854775807+1", "(none)"},             {"-9223372036854775807-1", "-9223372036854775808"},
        {"__import__('os')", "(none)"},                  {"", "(none)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_assert_str_eq(calc(cases[i][0]), cases[i][1], "calc(%s)", cases[i][0]);
    char deep[600];
    memset(deep, '(', 250);
    deep[250] = '1';
    memset(deep + 251, ')', 250);
    deep[501] = 0;
    cr_assert_str_eq(calc(deep), "(none)"); /* deeper than CALC_MAX_DEPTH */
    char big[CALC_MAX_LEN + 2];
    memset(big, '1', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cr_assert_str_eq(calc(big), "(none)"); /* longer than CALC_MAX_LEN */
}

static void feed(struct inline_tool *it, const char *text, struct vocab *v)
{
    struct err e = {0};
    for (const char *c = text; *c; c++)
        cr_assert_eq(inline_tool_seen(it, (unsigned char)*c, &e), 0);
    (void)v;
}

Test(nanochat, calculator_forces_the_output_tokens)
{
    struct vocab *v = tiny_vocab();
    const struct family *f = family_find("nanochat");
    struct inline_tool it;
    struct err e = {0};
    int32_t t;
    inline_tool_init(&it, f->inline_tool, v);
    cr_assert_not_null(it.t);
    /* text, then <|python_start|>6*7<|python_end|>: <|output_start|> "42" <|output_end|> */
    feed(&it, "x ", v);
    cr_assert_not(inline_tool_pending(&it));
    cr_assert_eq(inline_tool_seen(&it, sp(5), &e), 0);
    feed(&it, "6*7", v);
    cr_assert_not(inline_tool_pending(&it));
    cr_assert_eq(inline_tool_seen(&it, sp(6), &e), 0);
    int32_t want[] = {sp(7), 256, sp(8)}; /* "42" is one token in this vocabulary */
    for (int k = 0; k < 3; k++) {
        cr_assert(inline_tool_next(&it, &t));
        cr_assert_eq(t, want[k]);
        cr_assert_eq(inline_tool_seen(&it, t, &e), 0); /* the loop feeds forced tokens back */
    }
    cr_assert_not(inline_tool_next(&it, &t));
    /* no answer: nothing forced; <|python_end|> outside a call: nothing; a second
     * <|python_start|> starts over */
    cr_assert_eq(inline_tool_seen(&it, sp(5), &e), 0);
    feed(&it, "os.system(1)", v);
    cr_assert_eq(inline_tool_seen(&it, sp(6), &e), 0);
    cr_assert_not(inline_tool_pending(&it));
    cr_assert_eq(inline_tool_seen(&it, sp(6), &e), 0);
    cr_assert_not(inline_tool_pending(&it));
    cr_assert_eq(inline_tool_seen(&it, sp(5), &e), 0);
    feed(&it, "9+", v);
    cr_assert_eq(inline_tool_seen(&it, sp(5), &e), 0);
    feed(&it, "1+1", v);
    cr_assert_eq(inline_tool_seen(&it, sp(6), &e), 0);
    cr_assert(inline_tool_next(&it, &t) && t == sp(7));
    cr_assert(inline_tool_next(&it, &t) && t == '2');
    cr_assert(inline_tool_next(&it, &t) && t == sp(8));
    /* an empty call: nothing */
    cr_assert_eq(inline_tool_seen(&it, sp(5), &e), 0);
    cr_assert_eq(inline_tool_seen(&it, sp(6), &e), 0);
    cr_assert_not(inline_tool_pending(&it));
    inline_tool_deinit(&it);
    /* a family without the tool, or a vocabulary without its markers: off */
    inline_tool_init(&it, family_find("qwen3")->inline_tool, v);
    cr_assert_null(it.t);
    inline_tool_deinit(&it);
    vocab_free(v);
}
