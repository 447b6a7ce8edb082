/* emitter: think head routing, stop-string holdback, UTF-8 safe deltas. */
#include <criterion/criterion.h>
#include <string.h>

#include "base/buf.h"
#include "serve/emitter.h"

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
    emitter_init(&em, &s, 0, think, stop, n_stop);
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
    emitter_init(&em, &s, 0, false, NULL, 0);
    cr_assert_eq(emitter_feed(&em, "a", 1, NULL), -1);
    emitter_deinit(&em);
    buf_free(&r.log);
}
