/* spec — prompt-lookup speculative decoding (R-SPEC-1, --spec; docs/speculation.md).
 *
 * No second model: a draft is what followed the most recent earlier occurrence of the longest
 * suffix of the request's own context (prompt + reply so far). The backend feeds the last chosen
 * token plus the draft in one forward that returns logits for every position (the batch step), then
 * lets the target choose at each row in order, exactly as it would without speculation (same
 * logits by batch invariance, same sampler, same grammar mask); a draft token is accepted while it
 * equals the target's choice. The first mismatch ends the verify: the rows of the drafts after it
 * are dropped from the cache and its token shadow. For greedy this is byte-identical output; for
 * sampling it is the standard lossless rule for a deterministic draft (accept d with probability
 * p(d), else a token from p with d removed, renormalized), since "draw x ~ p, accept iff x == d"
 * has exactly those probabilities — and it draws the same random numbers as the plain path.
 *
 * This module is pure (no model): matching, the adaptive draft length and the bookkeeping of
 * which verify row comes next and how many rows to keep. One per reply; worker thread only. */
#ifndef LMS_SERVE_SPEC_H
#define LMS_SERVE_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPEC_MAX_DRAFT 16 /* --spec N upper bound: drafts per verify forward */
#define SPEC_DEFAULT 8    /* --spec without a number */
#define SPEC_MIN_MATCH 2  /* a suffix of fewer tokens is too weak a hint to pay a verify for */
#define SPEC_MAX_MATCH 16 /* longer matches are not told apart (the draft cap is reached) */
#define SPEC_MAX_COOL 32  /* longest pause in drafting after drafts that all failed */

struct spec {
    int max_draft; /* the cap (--spec N), 1..SPEC_MAX_DRAFT */
    int len;       /* the adaptive cap of the next draft, 1..max_draft */
    int cool;      /* drafting steps still skipped */
    int backoff;   /* the next pause after a verify that accepted nothing (doubles) */
    int32_t draft[SPEC_MAX_DRAFT];
    int n_draft;   /* drafts pending in the last verify forward (0: none pending) */
    int n_forced;  /* of which the last n_forced come from the grammar (spec_force): not fed back */
    int at;        /* of which the target has accepted this many */
    int64_t pos0;  /* cache position of that forward's first token (the last chosen one) */
    int64_t n_verify, n_proposed, n_accepted; /* totals of this reply (lookup drafts) */
    int64_t n_forced_total, n_forced_accepted; /* grammar drafts of this reply, and taken */
};

/* A reply's state: max_draft clamped to [1, SPEC_MAX_DRAFT]. */
void spec_init(struct spec *s, int max_draft);

/* The longest l (SPEC_MIN_MATCH..SPEC_MAX_MATCH) such that ctx[n-l, n) also ends at some earlier
 * i < n - 1; ties go to the most recent i. Returns l (0: no match) and *from = i + 1, the first
 * token that followed it. */
int spec_match(const int32_t *ctx, size_t n, size_t *from);

/* Drafts for context ctx[0..n) into s->draft: the tokens after the match, at most cap, s->len and
 * 2 x the match length. Returns the count (s->n_draft, 0: no match, cap < 1 or a pause after
 * failed drafts); the caller runs the verify forward at position pos0 and calls spec_accept per
 * chosen token. */
int spec_draft(struct spec *s, const int32_t *ctx, size_t n, int cap, int64_t pos0);

/* Appends a token of the grammar's forced continuation (the bytes every allowed path writes next,
 * as the tokenizer spells them) to the draft of a verify at pos0, also when spec_draft found none.
 * The target rejects it only when it spells those bytes otherwise. Not fed back into the adaptive
 * length (it says nothing of how well the context predicts the reply). Returns 0, or -1 when the
 * draft is full (SPEC_MAX_DRAFT). */
int spec_force(struct spec *s, int32_t tok, int64_t pos0);

/* The target chose `chosen` from the latest row. Returns the verify row (1..n_draft) whose logits
 * come next when chosen is the next pending draft (no forward needed); else 0, with *keep the
 * cache rows to keep (pos0 + accepted + 1: the rows of unaccepted drafts go) when drafts were
 * pending, or -1 when nothing was. Either way the feedback adapts the next draft length. */
int spec_accept(struct spec *s, int32_t chosen, int64_t *keep);

/* A reply ends while drafts are pending: the rows to keep (as spec_accept), or -1. */
int64_t spec_settle(struct spec *s);

/* Adapts len and the pause after `accepted` of `proposed` drafts were taken (spec_accept calls it;
 * exposed for the tests): all taken grows len by 2; else len = accepted + 1; none taken pauses
 * drafting for backoff steps (1, 2, 4 … SPEC_MAX_COOL), any taken resets the backoff. */
void spec_feedback(struct spec *s, int proposed, int accepted);

#endif
