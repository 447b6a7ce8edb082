#define _GNU_SOURCE /* memmem */
#include "serve/emitter.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void emitter_init(struct emitter *em, struct reply_sink *sink, int choice,
                  const struct family_markers *think, const char *const *stop, int n_stop)
{
    memset(em, 0, sizeof *em);
    em->sink = sink;
    em->choice = choice;
    if (think && think->open && think->close && think->open[0] && think->close[0]) {
        em->think_open = think->open;
        em->think_close = think->close;
        em->n_open = strlen(think->open);
        em->n_close = strlen(think->close);
    }
    em->mode = em->think_open ? EM_HEAD : EM_TEXT;
    em->stop = stop;
    em->n_stop = n_stop;
    em->fired = -1;
}

void emitter_start_in_reasoning(struct emitter *em)
{
    if (em->mode != EM_HEAD || em->pend.len) return; /* no markers, or fed already */
    em->mode = EM_REASONING;
    em->strip_nl = true;
}

void emitter_deinit(struct emitter *em)
{
    buf_free(&em->pend);
    free(em->lp);
    em->lp = NULL;
    em->n_lp = em->cap_lp = 0;
}

bool emitter_in_reasoning(const struct emitter *em)
{
    return em->mode == EM_REASONING;
}

/* The buffer invariants of emitter.h, asserted after every step (every build: the Makefile never
 * defines NDEBUG), except after a refusal (the choice is abandoned). pend is empty and unallocated before the first feed, NUL-terminated after;
 * the logprob list fits its allocation; a STOPPED emitter holds nothing; in TEXT, what is held
 * back is at most a proper prefix of a stop string plus an incomplete UTF-8 tail. */
static void check(const struct emitter *em)
{
    assert(em->mode >= EM_HEAD && em->mode < EM_MODE_COUNT);
    assert(em->pend.data ? em->pend.len < em->pend.cap && em->pend.data[em->pend.len] == 0
                         : em->pend.len == 0 && em->pend.cap == 0);
    assert(em->n_lp >= 0 && em->n_lp <= em->cap_lp && (em->lp || em->cap_lp == 0));
    assert(em->fired >= -1 && em->fired < em->n_stop && (em->fired < 0 || em->mode == EM_STOPPED));
    assert(em->mode != EM_STOPPED || em->pend.len == 0);
#ifndef NDEBUG
    if (em->mode == EM_TEXT && !em->strip_ws) {
        size_t longest = 0;
        for (int k = 0; k < em->n_stop; k++)
            if (strlen(em->stop[k]) > longest) longest = strlen(em->stop[k]);
        assert(em->pend.len <= (longest ? longest - 1 : 0) + 3);
    }
#endif
    (void)em;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The pending bytes. pend has no storage until the first feed (a reply whose first sampled token
 * ends the turn is finished without one), so every reader goes through here: never NULL. */
static const char *pend_bytes(const struct emitter *em)
{
    return em->pend.data ? em->pend.data : "";
}

/* Drops the first n pending bytes (n <= pend.len; nothing to do for an unallocated buffer). */
static void consume(struct emitter *em, size_t n)
{
    if (!em->pend.data) return; /* len is 0, so n is 0 */
    memmove(em->pend.data, em->pend.data + n, em->pend.len - n);
    em->pend.len -= n;
    em->pend.data[em->pend.len] = 0;
}

static int emit_text(struct emitter *em, size_t n)
{
    int rc = 0;
    if (n > 0 || em->n_lp > 0) {
        rc = em->sink->text(em->sink->ctx, em->choice, pend_bytes(em), n, em->lp, em->n_lp);
        em->n_lp = 0;
        em->n_text += n;
    }
    consume(em, n);
    return rc;
}

static int emit_reasoning(struct emitter *em, size_t n)
{
    int rc = 0;
    if (n > 0) {
        rc = em->sink->reasoning(em->sink->ctx, em->choice, pend_bytes(em), n);
        em->n_reasoning += n;
    }
    consume(em, n);
    return rc;
}

/* Longest suffix of s[0..n) that is a proper prefix of pat (0 if none). */
static size_t partial_suffix(const char *s, size_t n, const char *pat, size_t plen)
{
    size_t best = 0;
    for (size_t k = 1; k < plen && k <= n; k++)
        if (memcmp(s + n - k, pat, k) == 0) best = k;
    return best;
}

static int step_head(struct emitter *em, bool *progress)
{
    size_t i = 0, n = em->pend.len;
    const char *s = pend_bytes(em);
    while (i < n && is_ws(s[i]))
        i++;
    size_t rest = n - i;
    if (rest == 0) return 0;
    const char *t = s + i;
    size_t lo = em->n_open, lc = em->n_close;
    if (rest >= lo && memcmp(t, em->think_open, lo) == 0) {
        consume(em, i + lo);
        em->mode = EM_REASONING;
        em->strip_nl = true;
        em->n_lp = 0; /* reasoning tokens carry no content logprobs */
        *progress = true;
        return 0;
    }
    if (rest >= lc && memcmp(t, em->think_close, lc) == 0) {
        consume(em, i + lc); /* stray closer of a primed empty think block */
        em->mode = EM_TEXT;
        em->strip_ws = true;
        *progress = true;
        return 0;
    }
    if ((rest < lo && memcmp(t, em->think_open, rest) == 0) ||
        (rest < lc && memcmp(t, em->think_close, rest) == 0))
        return 0; /* still undecided */
    em->mode = EM_TEXT;
    *progress = true;
    return 0;
}

static int step_reasoning(struct emitter *em, bool *progress)
{
    if (em->strip_nl) {
        size_t i = 0;
        while (i < em->pend.len && (em->pend.data[i] == '\n' || em->pend.data[i] == '\r'))
            i++;
        consume(em, i);
        if (em->pend.len == 0) return 0;
        em->strip_nl = false;
    }
    size_t lc = em->n_close;
    char *hit = memmem(em->pend.data, em->pend.len, em->think_close, lc);
    if (hit) {
        size_t pos = (size_t)(hit - em->pend.data), end = pos;
        while (end > 0 && is_ws(em->pend.data[end - 1]))
            end--;
        if (emit_reasoning(em, end) < 0) return -1;
        consume(em, pos - end + lc);
        em->mode = EM_TEXT;
        em->strip_ws = true;
        em->n_lp = 0;
        *progress = true;
        return 0;
    }
    size_t n = em->pend.len;
    size_t hold = partial_suffix(em->pend.data, n, em->think_close, lc);
    while (hold < n && is_ws(em->pend.data[n - hold - 1]))
        hold++;
    size_t out = n - hold;
    out -= utf8_incomplete_tail(em->pend.data, out);
    em->n_lp = 0;
    return emit_reasoning(em, out);
}

static int step_text(struct emitter *em)
{
    if (em->strip_ws) {
        size_t i = 0;
        while (i < em->pend.len && is_ws(em->pend.data[i]))
            i++;
        consume(em, i);
        if (em->pend.len == 0) {
            em->n_lp = 0; /* whitespace-only tokens between sections carry no content */
            return 0;
        }
        em->strip_ws = false;
    }
    const char *s = pend_bytes(em);
    size_t n = em->pend.len;
    /* The stop string that completes first wins (the earliest end; on a tie the earliest start):
     * that is the one a token-by-token reader meets first, so the reply does not depend on how
     * its bytes were cut into tokens (stops "abc" and "b": "ab"+"c" and "abc" both stop at "b"). */
    size_t best_pos = n, best_end = SIZE_MAX;
    int best = -1;
    for (int k = 0; k < em->n_stop; k++) {
        size_t sl = strlen(em->stop[k]);
        if (sl == 0) continue;
        char *hit = memmem(s, n, em->stop[k], sl);
        if (!hit) continue;
        size_t pos = (size_t)(hit - s);
        if (pos + sl < best_end || (pos + sl == best_end && pos < best_pos)) {
            best_pos = pos;
            best_end = pos + sl;
            best = k;
        }
    }
    if (best >= 0) {
        if (best_pos == 0) em->n_lp = 0; /* only stop-string tokens pending: not content */
        if (emit_text(em, best_pos) < 0) return -1;
        em->fired = best;
        em->mode = EM_STOPPED;
        buf_reset(&em->pend);
        return em->sink->finish(em->sink->ctx, em->choice, FINISH_STOP, em->stop[best]) < 0 ? -1
                                                                                            : 1;
    }
    size_t hold = 0;
    for (int k = 0; k < em->n_stop; k++) {
        size_t h = partial_suffix(s, n, em->stop[k], strlen(em->stop[k]));
        if (h > hold) hold = h;
    }
    size_t out = n - hold;
    out -= utf8_incomplete_tail(s, out);
    if (out == 0) return 0;
    return emit_text(em, out);
}

int emitter_feed(struct emitter *em, const char *s, size_t n, const struct token_logprob *lp)
{
    if (em->mode == EM_STOPPED) return 1;
    if (buf_append(&em->pend, s, n) < 0) return -1;
    if (lp && em->mode != EM_REASONING) {
        if (em->n_lp == em->cap_lp) {
            int cap = em->cap_lp ? 2 * em->cap_lp : 8;
            struct token_logprob *p = realloc(em->lp, (size_t)cap * sizeof *p);
            if (!p) return -1;
            em->lp = p;
            em->cap_lp = cap;
        }
        em->lp[em->n_lp++] = *lp;
    }
    for (;;) {
        bool progress = false;
        int rc = 0;
        switch (em->mode) {
        case EM_HEAD:
            rc = step_head(em, &progress);
            break;
        case EM_REASONING:
            rc = step_reasoning(em, &progress);
            break;
        case EM_TEXT:
            rc = step_text(em);
            break;
        case EM_STOPPED:
            return 1;
        default:
            return -1;
        }
        if (rc != 0) {
            if (rc > 0) check(em); /* after a refusal (-1) the emitter is abandoned mid-step */
            return rc;
        }
        if (!progress) {
            check(em);
            return 0;
        }
    }
}

int emitter_finish(struct emitter *em, enum finish_reason why)
{
    if (em->mode == EM_STOPPED) return 0;
    /* An undecided head (whitespace, a prefix of a marker) is text, and text is checked for stop
     * strings before it is flushed: a stop string inside it still fires. */
    if (em->mode == EM_HEAD) em->mode = EM_TEXT;
    if (em->mode == EM_TEXT) {
        int st = step_text(em);
        if (st != 0) return st < 0 ? -1 : 0; /* 1: a stop string fired and finished the choice */
    }
    int rc = 0;
    if (em->mode == EM_REASONING) {
        rc = emit_reasoning(em, em->pend.len);
    } else {
        if (em->strip_ws) {
            size_t i = 0;
            while (i < em->pend.len && is_ws(em->pend.data[i]))
                i++;
            consume(em, i);
        }
        rc = emit_text(em, em->pend.len);
    }
    em->mode = EM_STOPPED;
    if (rc < 0) return -1;
    check(em);
    return em->sink->finish(em->sink->ctx, em->choice, why, NULL) < 0 ? -1 : 0;
}
