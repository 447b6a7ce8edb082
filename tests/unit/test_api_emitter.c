/* emitter: think head routing, stop-string holdback, UTF-8 safe deltas. */
#include <criterion/criterion.h>
#include <signal.h>
#include <string.h>

#include "base/buf.h"
#include "serve/emitter.h"
#include "engine/text/family.h"

/* qwen3's think markers (the descriptor's), or none */
static const struct family_markers *TH(bool think)
{
    return think ? family_think(&family_qwen3) : NULL;
}

struct rec {
    struct buf log; /* "R[..]" reasoning deltas, "T[..]" text deltas, "F<why>:<stop>" */
    int n_lp;
    bool refuse;
};

static int r_reason(void *c, int ch, const char *s, size_t n)
{
    struct rec *r = c;
    buf_printf(&r->log, "R[%.*s]", (int)n, s);
    return r->refuse ? -1 : 0;
}
static int r_text(void *c, int ch, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct rec *r = c;
    buf_printf(&r->log, "T[%.*s]", (int)n, s);
    r->n_lp += nl;
    return r->refuse ? -1 : 0;
}
static int r_finish(void *c, int ch, enum finish_reason why, const char *stop)
{
    struct rec *r = c;
    buf_printf(&r->log, "F%d:%s", (int)why, stop ? stop : "");
    return 0;
}

static struct reply_sink sink_of(struct rec *r)
{
    struct reply_sink s = {0};
    s.ctx = r;
    s.reasoning = r_reason;
    s.text = r_text;
    s.finish = r_finish;
    return s;
}

static const char *run(bool think, const char *const *stop, int n_stop, const char *const *toks,
                       enum finish_reason why, struct rec *r)
{
    static char out[1024];
    struct reply_sink s = sink_of(r);
    struct emitter em;
    emitter_init(&em, &s, 0, TH(think), stop, n_stop);
    int rc = 0;
    for (int i = 0; toks[i] && rc == 0; i++) {
        struct token_logprob lp = {.token = i};
        rc = emitter_feed(&em, toks[i], strlen(toks[i]), &lp);
    }
    if (rc == 0) emitter_finish(&em, why);
    emitter_deinit(&em);
    snprintf(out, sizeof out, "%s", r->log.data ? r->log.data : "");
    buf_free(&r->log);
    return out;
}

Test(emitter, think_head_routes_reasoning)
{
    struct rec r = {0};
    const char *toks[] = {"<think>",  "\n",   "let me", " see", "\n",
                          "</think>", "\n\n", "Hi",     "!",    NULL};
    cr_assert_str_eq(run(true, NULL, 0, toks, FINISH_STOP, &r), "R[let me]R[ see]T[Hi]T[!]F1:");
    cr_assert_eq(r.n_lp, 2, "logprobs only for content tokens");
}

Test(emitter, stray_closer_dropped_and_plain_reply_kept)
{
    struct rec r = {0};
    const char *toks[] = {"</", "think>", "\n\n", "Hello", NULL};
    cr_assert_str_eq(run(true, NULL, 0, toks, FINISH_STOP, &r), "T[Hello]F1:");
    struct rec r2 = {0};
    const char *toks2[] = {"<", "b>bold", NULL};
    cr_assert_str_eq(run(true, NULL, 0, toks2, FINISH_LENGTH, &r2), "T[<b>bold]F2:");
    struct rec r3 = {0};
    const char *toks3[] = {"<think>", "x", NULL}; /* budget ends inside reasoning */
    cr_assert_str_eq(run(true, NULL, 0, toks3, FINISH_LENGTH, &r3), "R[x]F2:");
}

Test(emitter, no_think_markers_passes_everything)
{
    struct rec r = {0};
    const char *toks[] = {"<think>", "a", NULL};
    cr_assert_str_eq(run(false, NULL, 0, toks, FINISH_STOP, &r), "T[<think>]T[a]F1:");
}

Test(emitter, stop_string_never_leaks_prefix)
{
    struct rec r = {0};
    const char *stop[] = {"END", "xyz"};
    const char *toks[] = {"ab", "E", "N", "D", "more", NULL};
    cr_assert_str_eq(run(false, stop, 2, toks, FINISH_STOP, &r), "T[ab]F1:END");
    /* a held-back prefix that turns out not to be a stop is released */
    struct rec r2 = {0};
    const char *toks2[] = {"aE", "Nq", NULL};
    cr_assert_str_eq(run(false, stop, 2, toks2, FINISH_LENGTH, &r2), "T[a]T[ENq]F2:");
    /* a prefix pending at the end of generation is real text */
    struct rec r3 = {0};
    const char *toks3[] = {"hi x", "y", NULL};
    cr_assert_str_eq(run(false, stop, 2, toks3, FINISH_LENGTH, &r3), "T[hi ]T[xy]F2:");
    /* earliest stop wins, inside one token */
    struct rec r4 = {0};
    const char *toks4[] = {"1xyz2END", NULL};
    cr_assert_str_eq(run(false, stop, 2, toks4, FINISH_STOP, &r4), "T[1]F1:xyz");
}

Test(emitter, stop_applies_after_reasoning_only)
{
    struct rec r = {0};
    const char *stop[] = {"X"};
    const char *toks[] = {"<think>", "aXb", "</think>", "cXd", NULL};
    cr_assert_str_eq(run(true, stop, 1, toks, FINISH_STOP, &r), "R[aXb]T[c]F1:X");
}

Test(emitter, utf8_split_code_point_carries)
{
    struct rec r = {0};
    const char *toks[] = {"a\xE2\x82", "\xAC", "b", NULL}; /* € split across tokens */
    cr_assert_str_eq(run(false, NULL, 0, toks, FINISH_STOP, &r), "T[a]T[\xE2\x82\xAC]T[b]F1:");
    cr_assert_eq(utf8_incomplete_tail("\xF0\x9F\x98", 3), 3);
    cr_assert_eq(utf8_incomplete_tail("\xF0\x9F\x98\x80", 4), 0);
    cr_assert_eq(utf8_incomplete_tail("ab", 2), 0);
}

Test(emitter, refusing_sink_stops)
{
    struct rec r = {0};
    r.refuse = true;
    struct reply_sink s = sink_of(&r);
    struct emitter em;
    emitter_init(&em, &s, 0, NULL, NULL, 0);
    cr_assert_eq(emitter_feed(&em, "a", 1, NULL), -1);
    emitter_deinit(&em);
    buf_free(&r.log);
}

/* Issue 10 item 1: a reply whose first sampled token ends the turn finishes an emitter that was
 * never fed (its pending buffer has no storage); that used to write through NULL. Every mode,
 * with and without stop strings, both finish reasons; the sink never sees a NULL pointer. */
static int strict_text(void *c, int ch, const char *s, size_t n, const struct token_logprob *lp,
                       int nl)
{
    cr_assert_not_null(s, "text delta with a NULL pointer");
    return r_text(c, ch, s, n, lp, nl);
}
static int strict_reason(void *c, int ch, const char *s, size_t n)
{
    cr_assert_not_null(s, "reasoning delta with a NULL pointer");
    return r_reason(c, ch, s, n);
}

Test(emitter, empty_reply_every_mode)
{
    static const char *const stop[] = {"a", "</"};
    for (int think = 0; think < 2; think++)
        for (int ns = 0; ns <= 2; ns++)
            for (int w = 0; w < 2; w++) {
                enum finish_reason why = w ? FINISH_LENGTH : FINISH_STOP;
                struct rec r = {0};
                struct reply_sink s = sink_of(&r);
                s.text = strict_text;
                s.reasoning = strict_reason;
                struct emitter em;
                emitter_init(&em, &s, 0, TH(think), stop, ns);
                cr_assert_eq(emitter_finish(&em, why), 0);
                cr_assert_eq(emitter_finish(&em, why), 0, "a second finish is a no-op");
                emitter_deinit(&em);
                char want[16];
                snprintf(want, sizeof want, "F%d:", (int)why);
                cr_assert_str_eq(r.log.data ? r.log.data : "", want, "think %d stops %d", think,
                                 ns);
                cr_assert_eq(r.n_lp, 0);
                buf_free(&r.log);
            }
}

Test(emitter, empty_after_bytes_that_are_not_content)
{
    /* tokens with no bytes yet (a partial code point), whitespace only, an empty think block,
     * a stray closer, a lone stop string: each reply is empty and well-formed */
    static const char *const stop[] = {"END"};
    const char *empty_tok[] = {"", NULL};
    const char *ws[] = {"\n", " ", NULL};
    const char *block[] = {"<think>", "\n\n", "</think>", "\n\n", NULL};
    const char *closer[] = {"</think>", "\n\n", NULL};
    const char *lone_stop[] = {"END", NULL};
    struct rec r = {0};
    /* a token with no bytes still hands over its logprob record (in an empty delta) */
    cr_assert_str_eq(run(true, NULL, 0, empty_tok, FINISH_STOP, &r), "T[]F1:");
    cr_assert_eq(r.n_lp, 1);
    struct rec r2 = {0};
    cr_assert_str_eq(run(true, stop, 1, block, FINISH_STOP, &r2), "F1:");
    struct rec r3 = {0};
    cr_assert_str_eq(run(true, stop, 1, closer, FINISH_STOP, &r3), "F1:");
    struct rec r4 = {0};
    cr_assert_str_eq(run(false, stop, 1, lone_stop, FINISH_STOP, &r4), "F1:END");
    cr_assert_eq(r4.n_lp, 0, "a stop string's tokens carry no content logprobs");
    struct rec r5 = {0};
    cr_assert_str_eq(run(false, NULL, 0, ws, FINISH_STOP, &r5), "T[\n]T[ ]F1:");
}

/* Found by build/fuzz-worker (tests/fuzz/worker-seeds/head-undecided-stop, stop-whitespace): a
 * reply that ended while the think head was still undecided was flushed without the stop-string
 * check, so a stop string inside it reached the client. */
Test(emitter, stop_string_in_an_undecided_head_fires)
{
    static const char *const stop[] = {"<t"};
    const char *toks[] = {"<th", NULL};
    struct rec r = {0};
    cr_assert_str_eq(run(true, stop, 1, toks, FINISH_LENGTH, &r), "F1:<t");
    static const char *const nl[] = {"\n\n"};
    const char *ws[] = {"\n", "\n", NULL};
    struct rec r2 = {0};
    cr_assert_str_eq(run(true, nl, 1, ws, FINISH_STOP, &r2), "F1:\n\n");
}

/* Found by build/fuzz-worker (tests/fuzz/worker-seeds/stop-overlap): with stops "abc" and "b",
 * "ab"+"c" stopped at "b" but one token "abc" at "abc" — the reply depended on the token split.
 * The stop string that completes first wins, however the bytes arrive. */
Test(emitter, first_completed_stop_wins_whatever_the_split)
{
    static const char *const stop[] = {"abc", "b"};
    const char *split[] = {"ab", "c", NULL};
    const char *whole[] = {"abc", NULL};
    const char *bytes[] = {"a", "b", "c", NULL};
    struct rec r = {0}, r2 = {0}, r3 = {0};
    cr_assert_str_eq(run(false, stop, 2, split, FINISH_STOP, &r), "T[a]F1:b");
    cr_assert_str_eq(run(false, stop, 2, whole, FINISH_STOP, &r2), "T[a]F1:b");
    cr_assert_str_eq(run(false, stop, 2, bytes, FINISH_STOP, &r3), "T[a]F1:b");
    /* equal ends: the longer (earlier-starting) one */
    static const char *const tie[] = {"c", "bc"};
    struct rec r4 = {0};
    cr_assert_str_eq(run(false, tie, 2, whole, FINISH_STOP, &r4), "T[a]F1:bc");
}

/* The buffer invariants are checked assertions (the Makefile never defines NDEBUG): a corrupted
 * emitter aborts instead of writing out of bounds. */
Test(emitter, invariant_violation_aborts, .signal = SIGABRT)
{
    struct rec r = {0};
    struct reply_sink s = sink_of(&r);
    struct emitter em;
    emitter_init(&em, &s, 0, NULL, NULL, 0);
    cr_assert_eq(emitter_feed(&em, "ab", 2, NULL), 0);
    em.fired = 2; /* a stop string index past the list, in a live emitter */
    emitter_feed(&em, "c", 1, NULL);
}

/* The seam (issue 14): the emitter splits reasoning on the markers the family's descriptor
 * names, and knows no family's markers of its own. A fake family with other markers: */
static const struct family fake_family = {
    .name = "fake",
    .caps = {.reasoning = true},
    .think = {"[THINK]", "[/THINK]"},
};

static const char *run_with(const struct family_markers *m, const char *const *toks,
                            struct rec *r)
{
    static char out[1024];
    struct reply_sink s = sink_of(r);
    struct emitter em;
    emitter_init(&em, &s, 0, m, NULL, 0);
    int rc = 0;
    for (int i = 0; toks[i] && rc == 0; i++)
        rc = emitter_feed(&em, toks[i], strlen(toks[i]), NULL);
    if (rc == 0) emitter_finish(&em, FINISH_STOP);
    emitter_deinit(&em);
    snprintf(out, sizeof out, "%s", r->log.data ? r->log.data : "");
    buf_free(&r->log);
    return out;
}

Test(emitter, descriptor_markers_drive_the_reasoning_split)
{
    const struct family_markers *m = family_think(&fake_family);
    cr_assert_not_null(m);
    struct rec r = {0};
    /* markers split across tokens, whitespace around them is layout */
    const char *toks[] = {"[TH", "INK]", "\n", "plan", " it", " [/TH", "INK]", "\n\n", "done", NULL};
    cr_assert_str_eq(run_with(m, toks, &r), "R[plan]R[ it]T[done]F1:");
    /* qwen3's markers mean nothing to this family: text */
    struct rec r2 = {0};
    const char *q[] = {"<think>", "x", "</think>", "y", NULL};
    cr_assert_str_eq(run_with(m, q, &r2), "T[<think>]T[x]T[</think>]T[y]F1:");
    /* and the stray-closer rule uses the family's closer */
    struct rec r3 = {0};
    const char *c[] = {"[/THINK]", "\n", "z", NULL};
    cr_assert_str_eq(run_with(m, c, &r3), "T[z]F1:");
    /* a family without think markers has no reasoning section at all */
    static const struct family plain = {.name = "plain"};
    cr_assert_null(family_think(&plain));
}

/* Gemma 4's descriptor (a real family): its reply opens with <|channel>thought\n, the thinking
 * ends at <channel|>; the markers come as several tokens (the stand-in vocabulary has none of
 * them as one). */
Test(emitter, gemma4_thought_channel_is_the_reasoning_split)
{
    const struct family_markers *m = family_think(&family_gemma4);
    cr_assert_not_null(m);
    struct rec r = {0};
    const char *toks[] = {"<|chan", "nel>", "thought", "\n", "plan", " it", "<channel|>", "done", NULL};
    cr_assert_str_eq(run_with(m, toks, &r), "R[plan]R[ it]T[done]F1:");
    /* thinking off: the prompt primed the empty channel, the reply is text */
    struct rec r2 = {0};
    const char *t[] = {"Hello", " there", NULL};
    cr_assert_str_eq(run_with(m, t, &r2), "T[Hello]T[ there]F1:");
    /* <|channel> not followed by thought is text (held while it could still open) */
    struct rec r3 = {0};
    const char *c[] = {"<|channel>", "x", NULL};
    cr_assert_str_eq(run_with(m, c, &r3), "T[<|channel>x]F1:");
}
