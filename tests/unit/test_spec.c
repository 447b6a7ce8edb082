/* Prompt-lookup speculation (serve/spec, docs/speculation.md): suffix matching, the draft caps,
 * the adaptive length and pause, the verify-row bookkeeping, the acceptance rule under sampling
 * (lossless: acceptance = p(d), emitted tokens distributed as p), and the engine side — a verify
 * forward's rows equal solo decoding's logits bit for bit, before and after a rollback. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/mkmodel_gen.h"
#include "engine/model.h"
#include "engine/sample/sampler.h"
#include "serve/spec.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

Test(spec, match_longest_suffix_most_recent)
{
    /* suffix "7 8 9" occurs at 1..3 (followed by 4) and "8 9" at 6..7 (followed by 5): longest wins */
    int32_t c[] = {1, 7, 8, 9, 4, 0, 8, 9, 5, 7, 8, 9};
    size_t from;
    cr_assert_eq(spec_match(c, N(c), &from), 3);
    cr_assert_eq(from, 4);
    /* two equal matches: the most recent one */
    int32_t d[] = {5, 6, 1, 5, 6, 2, 5, 6};
    cr_assert_eq(spec_match(d, N(d), &from), 2);
    cr_assert_eq(from, 5);
    cr_assert_eq(d[from], 2);
}

Test(spec, match_needs_two_tokens_and_a_follower)
{
    size_t from;
    int32_t one[] = {3, 4, 5, 6, 3}; /* only the last token recurs: below SPEC_MIN_MATCH */
    cr_assert_eq(spec_match(one, N(one), &from), 0);
    int32_t none[] = {1, 2, 3, 4, 5};
    cr_assert_eq(spec_match(none, N(none), &from), 0);
    int32_t tiny[] = {1, 1};
    cr_assert_eq(spec_match(tiny, N(tiny), &from), 0);
    int32_t run[] = {2, 2, 2}; /* "2 2" ends at 1, followed by the last 2 */
    cr_assert_eq(spec_match(run, N(run), &from), 2);
    cr_assert_eq(from, 2);
}

Test(spec, match_caps_at_max)
{
    int32_t c[80];
    for (int i = 0; i < 80; i++) c[i] = i % 20; /* period 20: the suffix recurs 60 tokens deep */
    size_t from;
    cr_assert_eq(spec_match(c, N(c), &from), SPEC_MAX_MATCH);
    cr_assert_eq(c[from], 0); /* 19 was last: 0 followed the most recent earlier 19 */
    cr_assert_eq(from, 60);
}

Test(spec, draft_caps)
{
    struct spec s;
    spec_init(&s, 8);
    int32_t c[40];
    for (int i = 0; i < 40; i++) c[i] = i % 10;
    /* long match: capped by len (8) */
    cr_assert_eq(spec_draft(&s, c, 40, 100, 40), 8);
    for (int i = 0; i < 8; i++) cr_assert_eq(s.draft[i], (40 + i) % 10);
    cr_assert_eq(s.pos0, 40);
    /* by the caller's cap */
    cr_assert_eq(spec_draft(&s, c, 40, 3, 40), 3);
    cr_assert_eq(spec_draft(&s, c, 40, 0, 40), 0);
    /* by 2 x the match length: "1 2" matches (2 tokens) -> 4 */
    int32_t m[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2};
    cr_assert_eq(spec_draft(&s, m, N(m), 100, 12), 4);
    cr_assert_eq(s.draft[0], 3);
    cr_assert_eq(s.draft[3], 6);
    /* by what follows the match: "5 6" ends at index 3, followed by the last two tokens */
    int32_t f[] = {9, 9, 5, 6, 5, 6};
    cr_assert_eq(spec_draft(&s, f, N(f), 100, 6), 2);
    cr_assert_eq(s.draft[0], 5);
    cr_assert_eq(s.draft[1], 6);
    /* no match: no draft */
    int32_t z[] = {1, 2, 3};
    cr_assert_eq(spec_draft(&s, z, N(z), 100, 3), 0);
    cr_assert_eq(s.n_draft, 0);
    /* --spec clamps */
    spec_init(&s, 99);
    cr_assert_eq(s.max_draft, SPEC_MAX_DRAFT);
    spec_init(&s, 0);
    cr_assert_eq(s.max_draft, 1);
}

Test(spec, adaptive_length_and_pause)
{
    struct spec s;
    spec_init(&s, 8);
    spec_feedback(&s, 8, 3); /* partial: next draft at most accepted + 1 */
    cr_assert_eq(s.len, 4);
    cr_assert_eq(s.cool, 0);
    spec_feedback(&s, 4, 4); /* all taken: grows by 2 */
    cr_assert_eq(s.len, 6);
    spec_feedback(&s, 6, 6);
    spec_feedback(&s, 8, 8);
    cr_assert_eq(s.len, 8, "never past --spec");
    /* nothing taken: len 1 and a pause that doubles per failure, up to SPEC_MAX_COOL */
    int want[] = {1, 2, 4, 8, 16, 32, 32};
    for (size_t i = 0; i < N(want); i++) {
        spec_feedback(&s, 1, 0);
        cr_assert_eq(s.len, 1);
        cr_assert_eq(s.cool, want[i], "failure %zu: pause %d", i, s.cool);
    }
    /* a paused state drafts nothing for `cool` steps, then drafts again */
    int32_t c[40];
    for (int i = 0; i < 40; i++) c[i] = i % 10;
    for (int i = 0; i < 32; i++) cr_assert_eq(spec_draft(&s, c, 40, 100, 40), 0, "step %d", i);
    cr_assert_eq(spec_draft(&s, c, 40, 100, 40), 1);
    spec_feedback(&s, 1, 1); /* any acceptance resets the backoff */
    cr_assert_eq(s.backoff, 1);
    cr_assert_eq(s.len, 3);
    cr_assert_eq(s.n_verify, 12);
}

Test(spec, accept_rows_and_rollback)
{
    struct spec s;
    spec_init(&s, 8);
    int32_t c[] = {1, 2, 3, 4, 5, 1, 2}; /* draft 3 4 5 1 (2 x match 2) */
    int64_t keep;
    cr_assert_eq(spec_accept(&s, 7, &keep), 0, "nothing pending");
    cr_assert_eq(keep, -1);
    cr_assert_eq(spec_draft(&s, c, N(c), 100, 100), 4);
    cr_assert_eq(spec_accept(&s, 3, &keep), 1); /* row 1 next */
    cr_assert_eq(spec_accept(&s, 4, &keep), 2);
    cr_assert_eq(spec_accept(&s, 9, &keep), 0); /* mismatch at the third draft */
    cr_assert_eq(keep, 100 + 2 + 1, "the fed token and 2 accepted drafts stay");
    cr_assert_eq(s.n_accepted, 2);
    cr_assert_eq(s.n_proposed, 4);
    cr_assert_eq(s.len, 3);
    cr_assert_eq(spec_accept(&s, 9, &keep), 0, "nothing pending after a rejection");
    cr_assert_eq(keep, -1);
    /* all taken: the last row comes next and nothing is dropped */
    cr_assert_eq(spec_draft(&s, c, N(c), 100, 50), 3);
    cr_assert_eq(spec_accept(&s, 3, &keep), 1);
    cr_assert_eq(spec_accept(&s, 4, &keep), 2);
    cr_assert_eq(spec_accept(&s, 5, &keep), 3);
    cr_assert_eq(s.n_draft, 0);
    cr_assert_eq(spec_settle(&s), -1);
    cr_assert_eq(s.len, 5);
    /* a reply ending mid-verify keeps the fed token and what was accepted */
    cr_assert_eq(spec_draft(&s, c, N(c), 100, 10), 4);
    cr_assert_eq(spec_accept(&s, 3, &keep), 1);
    cr_assert_eq(spec_settle(&s), 12);
    cr_assert_eq(spec_settle(&s), -1);
}

/* Grammar drafts (spec_force) follow the lookup draft, also when there is none; they count apart
 * and never move the adaptive length or the pause. */
Test(spec, grammar_drafts_are_not_fed_back)
{
    struct spec s;
    spec_init(&s, 8);
    int32_t c[] = {1, 2, 3, 4, 5, 1, 2}; /* lookup draft 3 4 5 1 */
    int64_t keep;
    cr_assert_eq(spec_draft(&s, c, N(c), 100, 100), 4);
    cr_assert_eq(spec_force(&s, 60, 100), 0);
    cr_assert_eq(spec_force(&s, 61, 100), 0);
    cr_assert_eq(s.n_draft, 6);
    for (int i = 0; i < 4; i++) cr_assert_eq(spec_accept(&s, c[2 + i], &keep), i + 1);
    cr_assert_eq(spec_accept(&s, 60, &keep), 5);
    cr_assert_eq(spec_accept(&s, 62, &keep), 0); /* the second grammar draft is spelled otherwise */
    cr_assert_eq(keep, 100 + 5 + 1);
    cr_assert_eq(s.n_proposed, 4, "lookup drafts only");
    cr_assert_eq(s.n_accepted, 4);
    cr_assert_eq(s.len, 8, "all lookup drafts taken: grows (capped), the grammar's miss is not counted");
    cr_assert_eq(s.n_forced_total, 2);
    cr_assert_eq(s.n_forced_accepted, 1);
    /* grammar drafts alone (no lookup match): no verify counted, no pause after a miss */
    int32_t d[] = {7, 8, 9};
    cr_assert_eq(spec_draft(&s, d, N(d), 100, 200), 0);
    cr_assert_eq(spec_force(&s, 70, 200), 0);
    cr_assert_eq(spec_accept(&s, 71, &keep), 0);
    cr_assert_eq(keep, 201);
    cr_assert_eq(s.n_verify, 1);
    cr_assert_eq(s.cool, 0);
    for (int i = 0; i < SPEC_MAX_DRAFT; i++) spec_force(&s, 1, 300);
    cr_assert_eq(spec_force(&s, 1, 300), -1, "full");
}

/* The acceptance rule under sampling: the target draws x from its distribution p at the draft's
 * row and the draft d is accepted iff x == d. Over many seeds: P(accept) = p(d) (the standard
 * rule's acceptance probability), and the emitted token is distributed as p — on rejection as
 * p with d removed, renormalized. */
Test(spec, acceptance_rule_is_lossless)
{
    enum { V = 6, DRAWS = 40000 };
    const float lg[V] = {2.0f, 1.2f, 0.5f, 0.0f, -0.7f, 1.6f};
    struct sampler_params sp;
    sampler_params_init(&sp);
    sp.temperature = 0.9f;
    sp.no_logprob = 1;
    struct err e = {0};
    struct sampler *smp = sampler_new(&sp, V, &e);
    cr_assert(smp, "%s", e.msg);
    float l[V];
    int32_t ids[V];
    float pr[V];
    memcpy(l, lg, sizeof l);
    cr_assert_eq(sampler_candidates(smp, l, NULL, ids, pr, V), V);
    double p[V] = {0};
    for (int i = 0; i < V; i++) p[ids[i]] = pr[i];
    const int32_t d = 5; /* the draft: the second most likely token */
    int acc = 0, hits[V] = {0}, rej[V] = {0}, n_rej = 0;
    for (int k = 0; k < DRAWS; k++) {
        struct spec s;
        spec_init(&s, 4);
        int32_t c[] = {d, 9, 9, d, 9, 9}; /* drafts d */
        s.n_draft = 0;
        cr_assert_eq(spec_draft(&s, c, N(c), 1, 0), 1);
        cr_assert_eq(s.draft[0], d);
        sampler_reset(smp, (uint64_t)k * 7919 + 1);
        struct sampler_choice ch;
        memcpy(l, lg, sizeof l);
        cr_assert_eq(sampler_sample(smp, l, NULL, &ch), 0);
        int64_t keep;
        int row = spec_accept(&s, ch.token, &keep);
        cr_assert_eq(row > 0, ch.token == d);
        acc += row > 0;
        hits[ch.token]++;
        if (!row) rej[ch.token]++, n_rej++;
    }
    double sd = sqrt(p[d] * (1 - p[d]) / DRAWS);
    cr_assert(fabs((double)acc / DRAWS - p[d]) < 5 * sd, "acceptance %.4f, p(d) %.4f",
              (double)acc / DRAWS, p[d]);
    cr_assert_eq(rej[d], 0);
    for (int t = 0; t < V; t++) {
        double want = p[t], got = (double)hits[t] / DRAWS, s5 = 5 * sqrt(want * (1 - want) / DRAWS);
        cr_assert(fabs(got - want) < s5 + 1e-9, "token %d emitted %.4f, p %.4f", t, got, want);
        if (t == d) continue;
        double wr = p[t] / (1 - p[d]), gr = (double)rej[t] / n_rej;
        cr_assert(fabs(gr - wr) < 5 * sqrt(wr * (1 - wr) / n_rej) + 1e-9,
                  "token %d after a rejection %.4f, renormalized p %.4f", t, gr, wr);
    }
    sampler_free(smp);
}

/* ------------------------------------------------------------ engine: verify rows */

static const struct mkmodel_shape k_shape = {
    .name = "spec-dense", .n_layer = 2, .n_embd = 256, .n_ff = 512, .n_head = 4, .n_head_kv = 2,
    .head_dim = 64, .n_vocab = 320, .n_ctx = 256, .tied = false, .rope_base = 1e6f,
    .norm_eps = 1e-6f};

/* logits of seq[0..n) fed one token at a time into a fresh cache: out is n x V */
static void solo(struct model *m, const int32_t *seq, int n, float *out)
{
    struct err e = {0};
    struct kv_cache *kv = kv_new(m, 128, &e);
    cr_assert(kv, "%s", e.msg);
    for (int i = 0; i < n; i++) {
        int32_t pos = i;
        struct kv_cache *s = kv;
        struct batch b = {.token = seq + i, .pos = &pos, .seq = &s, .n = 1};
        cr_assert(model_forward(m, &b, out + (size_t)i * model_config(m)->n_vocab, &e) == 0, "%s",
                  e.msg);
    }
    kv_free(kv);
}

static void same_rows(const float *want, const float *got, int n, int V, const char *what, int th)
{
    for (int i = 0; i < n * V; i++)
        cr_assert(!memcmp(&want[i], &got[i], 4), "%s (%d threads): row %d logit %d = %.9g, solo %.9g",
                  what, th, i / V, i % V, got[i], want[i]);
}

Test(spec, verify_rows_equal_solo_logits_after_rollback)
{
    char path[96];
    snprintf(path, sizeof path, "/tmp/lms-spec-%d.gguf", (int)getpid());
    struct err e = {0};
    cr_assert(mkmodel_write(&k_shape, MKMODEL_Q8_0, 77, NULL, path, &e) == 0, "%s", e.msg);
    enum { P = 20, K = 6, V = 320 };
    /* the accepted sequence: a prompt, the fed token, 2 accepted drafts, then the target's own
     * token where the third draft was rejected, then a second verify all accepted */
    int32_t truth[P + 12];
    for (int i = 0; i < P + 12; i++) truth[i] = (int32_t)((i * 37 + 11) % V);
    float *ref = malloc(sizeof(float) * V * (P + 12)), *got = malloc(sizeof(float) * V * 16);
    for (int th = 1; th <= 3; th += 2) {
        struct model_opts o = {.n_threads = th};
        struct model *m = model_load(path, &o, &e);
        cr_assert(m, "%s", e.msg);
        solo(m, truth, P + 12, ref);
        struct kv_cache *kv = kv_new(m, 128, &e);
        cr_assert(kv, "%s", e.msg);
        int32_t pos[P];
        struct kv_cache *sq[P];
        for (int i = 0; i < P; i++) pos[i] = i, sq[i] = kv;
        struct batch b = {.token = truth, .pos = pos, .seq = sq, .n = P};
        cr_assert(model_forward(m, &b, got, &e) == 0, "%s", e.msg);
        /* verify 1: fed truth[P], drafts truth[P+1], truth[P+2], then 4 wrong tokens */
        int32_t v1[K + 1];
        for (int i = 0; i <= K; i++) v1[i] = i < 3 ? truth[P + i] : (int32_t)((truth[P + i] + 1) % V);
        cr_assert(model_verify(m, kv, v1, K + 1, P, got, &e) == 0, "%s", e.msg);
        same_rows(ref + (size_t)P * V, got, 3, V, "verify rows of the accepted prefix", th);
        cr_assert_eq(kv_rows(kv), P + K + 1);
        kv_truncate(kv, P + 3); /* rollback: the rejected drafts' rows go */
        /* verify 2 from the target's own token, all of it the truth */
        cr_assert(model_verify(m, kv, truth + P + 3, 9, P + 3, got, &e) == 0, "%s", e.msg);
        same_rows(ref + (size_t)(P + 3) * V, got, 9, V, "verify rows after a rollback", th);
        cr_assert_eq(kv_rows(kv), P + 12);
        /* refused: too many tokens, a gap */
        cr_assert(model_verify(m, kv, truth, 0, 0, got, &e) < 0);
        cr_assert(model_verify(m, kv, truth, 2, P + 20, got, &e) < 0);
        cr_assert(strstr(e.msg, "gap"), "%s", e.msg);
        kv_free(kv);
        model_free(m);
    }
    unlink(path);
    free(ref);
    free(got);
}
