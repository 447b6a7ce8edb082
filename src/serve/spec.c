/* spec — prompt-lookup drafting and acceptance bookkeeping (docs/speculation.md). */
#include "serve/spec.h"

#include <string.h>

void spec_init(struct spec *s, int max_draft)
{
    memset(s, 0, sizeof *s);
    s->max_draft = max_draft < 1 ? 1 : max_draft > SPEC_MAX_DRAFT ? SPEC_MAX_DRAFT : max_draft;
    s->len = s->max_draft;
    s->backoff = 1;
}

int spec_match(const int32_t *ctx, size_t n, size_t *from)
{
    int best = 0;
    *from = 0;
    if (n < SPEC_MIN_MATCH + 1) return 0;
    int32_t last = ctx[n - 1];
    /* i = where an earlier occurrence ends; it needs a token after it, so i <= n - 2 */
    for (size_t i = n - 1; i-- > 0;) {
        if (ctx[i] != last) continue;
        int l = 1;
        while (l < SPEC_MAX_MATCH && (size_t)l <= i && ctx[i - (size_t)l] == ctx[n - 1 - (size_t)l])
            l++;
        if (l > best) { /* strict: the most recent of equal lengths wins */
            best = l;
            *from = i + 1;
            if (l == SPEC_MAX_MATCH) break;
        }
    }
    return best >= SPEC_MIN_MATCH ? best : 0;
}

int spec_draft(struct spec *s, const int32_t *ctx, size_t n, int cap, int64_t pos0)
{
    s->n_draft = s->at = s->n_forced = 0;
    if (cap < 1) return 0;
    if (s->cool > 0) {
        s->cool--;
        return 0;
    }
    size_t from;
    int l = spec_match(ctx, n, &from);
    if (!l) return 0;
    int k = s->len < cap ? s->len : cap;
    if (k > 2 * l) k = 2 * l;
    if ((size_t)k > n - from) k = (int)(n - from);
    memcpy(s->draft, ctx + from, (size_t)k * sizeof *ctx);
    s->n_draft = k;
    s->pos0 = pos0;
    return k;
}

void spec_feedback(struct spec *s, int proposed, int accepted)
{
    s->n_verify++;
    s->n_proposed += proposed;
    s->n_accepted += accepted;
    if (accepted == proposed) {
        s->len = s->len + 2 < s->max_draft ? s->len + 2 : s->max_draft;
    } else {
        s->len = accepted + 1 < s->max_draft ? accepted + 1 : s->max_draft;
    }
    if (accepted == 0) {
        s->cool = s->backoff;
        s->backoff = s->backoff * 2 < SPEC_MAX_COOL ? s->backoff * 2 : SPEC_MAX_COOL;
    } else {
        s->backoff = 1;
    }
}

int spec_force(struct spec *s, int32_t tok, int64_t pos0)
{
    if (s->n_draft >= SPEC_MAX_DRAFT) return -1;
    s->draft[s->n_draft++] = tok;
    s->n_forced++;
    s->n_forced_total++;
    s->pos0 = pos0;
    return 0;
}

/* The verify is over after `accepted` of its drafts: feed back the lookup part only (forced tokens
 * say nothing about how well the context predicts the reply). */
static void verify_over(struct spec *s, int accepted)
{
    int lookup = s->n_draft - s->n_forced;
    if (lookup > 0) spec_feedback(s, lookup, accepted < lookup ? accepted : lookup);
    if (accepted > lookup) s->n_forced_accepted += accepted - lookup;
    s->n_draft = s->at = s->n_forced = 0;
}

int spec_accept(struct spec *s, int32_t chosen, int64_t *keep)
{
    *keep = -1;
    if (!s->n_draft) return 0;
    if (chosen == s->draft[s->at]) {
        int row = ++s->at;
        if (s->at == s->n_draft) verify_over(s, s->at); /* all taken: the cache holds them */
        return row;
    }
    *keep = s->pos0 + s->at + 1;
    verify_over(s, s->at);
    return 0;
}

int64_t spec_settle(struct spec *s)
{
    if (!s->n_draft) return -1;
    int64_t keep = s->pos0 + s->at + 1;
    s->n_draft = s->at = s->n_forced = 0; /* not fed back: the reply ended, not the draft */
    return keep;
}
