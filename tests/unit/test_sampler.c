#define _GNU_SOURCE /* qsort_r */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/sample/sampler.h"

#define QWEN_VOCAB 151936

static struct sampler *mk(const struct sampler_params *p, int32_t n)
{
    struct err e = {0};
    struct sampler *s = sampler_new(p, n, &e);
    cr_assert_not_null(s, "sampler_new: %s", e.msg);
    return s;
}

/* Deterministic pseudo-random logits (independent of the sampler's PRNG). */
static void fill_logits(float *l, int32_t n, uint32_t seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (int32_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        l[i] = (float)(x >> 8) * (20.0f / 16777216.0f) - 10.0f;
    }
}

Test(sampler, params_validated)
{
    struct sampler_params p;
    struct err e = {0};
    sampler_params_init(&p);
    p.temperature = -1;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "temperature");
    sampler_params_init(&p);
    p.top_p = 0;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "top_p");
    sampler_params_init(&p);
    p.min_p = 1.5f;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "min_p");
    sampler_params_init(&p);
    p.top_k = -3;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "top_k");
    sampler_params_init(&p);
    p.repeat_penalty = 0;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "repeat_penalty");
    sampler_params_init(&p);
    p.presence_penalty = 3;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "presence_penalty");
    sampler_params_init(&p);
    p.n_top_logprobs = 21;
    cr_assert_null(sampler_new(&p, 10, &e));
    cr_assert_str_eq(e.param, "top_logprobs");
    sampler_params_init(&p);
    p.temperature = NAN;
    cr_assert_null(sampler_new(&p, 10, &e));
    sampler_params_init(&p);
    cr_assert_null(sampler_new(&p, 0, &e));
    cr_assert_eq(e.code, ERR_INVALID);
}

Test(sampler, greedy_is_argmax_ties_to_lowest_id_and_skips_nan)
{
    struct sampler_params p;
    sampler_params_init(&p);
    p.temperature = 0;
    struct sampler *s = mk(&p, 8);
    float l[8] = {1, 3, NAN, 3, -INFINITY, 2, 0, 3};
    struct sampler_choice c;
    cr_assert_eq(sampler_sample(s, l, NULL, &c), 0);
    cr_assert_eq(c.token, 1);
    float all_bad[8] = {NAN, -INFINITY, NAN, -INFINITY, NAN, NAN, NAN, NAN};
    cr_assert_eq(sampler_sample(s, all_bad, NULL, &c), -1);
    sampler_free(s);
}

Test(sampler, top_k_1_equals_greedy)
{
    struct sampler_params p;
    sampler_params_init(&p);
    p.top_k = 1;
    p.temperature = 1.5f;
    p.seed = 7;
    struct sampler *s = mk(&p, QWEN_VOCAB);
    p.temperature = 0;
    p.top_k = 0;
    struct sampler *g = mk(&p, QWEN_VOCAB);
    float *a = malloc(QWEN_VOCAB * sizeof *a), *b = malloc(QWEN_VOCAB * sizeof *b);
    for (int step = 0; step < 20; step++) {
        fill_logits(a, QWEN_VOCAB, (uint32_t)step);
        memcpy(b, a, QWEN_VOCAB * sizeof *a);
        int32_t want = 0;
        for (int32_t i = 1; i < QWEN_VOCAB; i++)
            if (a[i] > a[want]) want = i;
        struct sampler_choice c1, c2;
        cr_assert_eq(sampler_sample(s, a, NULL, &c1), 0);
        cr_assert_eq(sampler_sample(g, b, NULL, &c2), 0);
        cr_assert_eq(c1.token, want);
        cr_assert_eq(c2.token, want);
    }
    free(a);
    free(b);
    sampler_free(s);
    sampler_free(g);
}

static void stream(uint64_t seed, int32_t *out, int n)
{
    struct sampler_params p;
    sampler_params_init(&p);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.01f;
    p.repeat_penalty = 1.1f;
    p.presence_penalty = 0.3f;
    p.seed = seed;
    struct sampler *s = mk(&p, QWEN_VOCAB);
    float *l = malloc(QWEN_VOCAB * sizeof *l);
    for (int i = 0; i < n; i++) {
        fill_logits(l, QWEN_VOCAB, 1000 + (uint32_t)i);
        for (int32_t j = 0; j < QWEN_VOCAB; j++)
            l[j] *= 0.4f; /* flatter: many live candidates */
        struct sampler_choice c;
        cr_assert_eq(sampler_sample(s, l, NULL, &c), 0);
        out[i] = c.token;
        sampler_accept(s, c.token);
    }
    free(l);
    sampler_free(s);
}

Test(sampler, fixed_seed_reproducible_different_seed_differs)
{
    int32_t a[64], b[64], c[64];
    stream(42, a, 64);
    stream(42, b, 64);
    stream(43, c, 64);
    cr_assert_eq(memcmp(a, b, sizeof a), 0, "same seed must give the same stream");
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "another seed should give another stream");
    int distinct = 0;
    for (int i = 0; i < 64; i++)
        distinct += a[i] != a[0];
    cr_assert_gt(distinct, 0, "sampling at T=0.8 should not be constant");
}

Test(sampler, reset_reseeds_and_forgets_history)
{
    struct sampler_params p;
    sampler_params_init(&p);
    p.seed = 5;
    p.frequency_penalty = 1.0f;
    struct sampler *s = mk(&p, 1000);
    float l[1000];
    int32_t first[16], again[16];
    for (int r = 0; r < 2; r++) {
        for (int i = 0; i < 16; i++) {
            fill_logits(l, 1000, (uint32_t)i);
            for (int j = 0; j < 1000; j++)
                l[j] *= 0.3f;
            struct sampler_choice c;
            cr_assert_eq(sampler_sample(s, l, NULL, &c), 0);
            (r ? again : first)[i] = c.token;
            sampler_accept(s, c.token);
        }
        sampler_reset(s, 5);
    }
    cr_assert_eq(memcmp(first, again, sizeof first), 0);
    sampler_free(s);
}

/* Vocabulary of n where tokens 0..3 carry the given probabilities and the rest ~0. */
static void crafted(float *l, int32_t n, const double *probs, int k)
{
    for (int32_t i = 0; i < n; i++)
        l[i] = -1000.0f;
    for (int i = 0; i < k; i++)
        l[i] = (float)log(probs[i]);
}

static int64_t cands(const struct sampler_params *p, float *l, int32_t n, int32_t *ids, float *pr,
                     int64_t cap)
{
    struct sampler *s = mk(p, n);
    int64_t k = sampler_candidates(s, l, NULL, ids, pr, cap);
    sampler_free(s);
    return k;
}

Test(sampler, top_p_cuts_exactly)
{
    const double probs[4] = {0.5, 0.3, 0.15, 0.05};
    float *l = malloc(QWEN_VOCAB * sizeof *l);
    int32_t ids[8];
    float pr[8];
    struct sampler_params p;
    sampler_params_init(&p);
    struct {
        float top_p;
        int64_t want;
    } cases[] = {{0.4f, 1}, {0.75f, 2}, {0.85f, 3}, {0.97f, 4}};
    for (size_t c = 0; c < 4; c++) {
        p.top_p = cases[c].top_p;
        crafted(l, QWEN_VOCAB, probs, 4);
        int64_t k = cands(&p, l, QWEN_VOCAB, ids, pr, 8);
        cr_assert_eq(k, cases[c].want, "top_p %g kept %ld", cases[c].top_p, (long)k);
        double mass = 0;
        for (int64_t i = 0; i < k; i++)
            mass += probs[i];
        for (int64_t i = 0; i < k; i++) {
            cr_assert_eq(ids[i], i);
            cr_assert_float_eq(pr[i], probs[i] / mass, 1e-5);
        }
    }
    free(l);
}

Test(sampler, top_p_on_flat_vocab_sorts_head_only_and_keeps_lowest_ids)
{
    float *l = calloc(QWEN_VOCAB, sizeof *l);
    int32_t *ids = malloc(QWEN_VOCAB * sizeof *ids);
    float *pr = malloc(QWEN_VOCAB * sizeof *pr);
    struct sampler_params p;
    sampler_params_init(&p);
    p.top_p = 0.5f;
    int64_t k = cands(&p, l, QWEN_VOCAB, ids, pr, QWEN_VOCAB);
    cr_assert_eq(k, QWEN_VOCAB / 2);
    for (int64_t i = 0; i < k; i++)
        cr_assert_eq(ids[i], i);
    free(l);
    free(ids);
    free(pr);
}

Test(sampler, min_p_cuts_exactly_with_temperature)
{
    const double probs[4] = {0.5, 0.25, 0.1, 0.045}; /* ratios to max: 1, .5, .2, .09 */
    float l[100];
    int32_t ids[8];
    float pr[8];
    struct sampler_params p;
    sampler_params_init(&p);
    p.min_p = 0.1f;
    crafted(l, 100, probs, 4);
    cr_assert_eq(cands(&p, l, 100, ids, pr, 8), 3);
    cr_assert_float_eq(pr[0], 0.5 / 0.85, 1e-5);
    p.min_p = 0.3f;
    crafted(l, 100, probs, 4);
    cr_assert_eq(cands(&p, l, 100, ids, pr, 8), 2);
    p.min_p = 0.6f;
    crafted(l, 100, probs, 4);
    cr_assert_eq(cands(&p, l, 100, ids, pr, 8), 1);
    /* T = 2 flattens: ratios become sqrt: 1, .707, .447, .3 */
    p.temperature = 2.0f;
    p.min_p = 0.35f;
    crafted(l, 100, probs, 4);
    cr_assert_eq(cands(&p, l, 100, ids, pr, 8), 3);
    cr_assert_float_eq(pr[0], 1.0 / (1 + sqrt(0.5) + sqrt(0.2)), 1e-5);
    p.min_p = 0.25f;
    crafted(l, 100, probs, 4);
    cr_assert_eq(cands(&p, l, 100, ids, pr, 8), 4);
}

Test(sampler, top_k_keeps_the_k_best_then_top_p)
{
    float *l = malloc(QWEN_VOCAB * sizeof *l);
    fill_logits(l, QWEN_VOCAB, 99);
    /* the 5 best by brute force */
    int32_t best[5];
    for (int b = 0; b < 5; b++) {
        int32_t w = -1;
        for (int32_t i = 0; i < QWEN_VOCAB; i++) {
            bool taken = false;
            for (int j = 0; j < b; j++)
                taken |= best[j] == i;
            if (!taken && (w < 0 || l[i] > l[w])) w = i;
        }
        best[b] = w;
    }
    struct sampler_params p;
    sampler_params_init(&p);
    p.top_k = 5;
    int32_t ids[8];
    float pr[8];
    float *c = malloc(QWEN_VOCAB * sizeof *c);
    memcpy(c, l, QWEN_VOCAB * sizeof *l);
    cr_assert_eq(cands(&p, c, QWEN_VOCAB, ids, pr, 8), 5);
    for (int b = 0; b < 5; b++)
        cr_assert_eq(ids[b], best[b]);
    /* top_p over the renormalized top-5 */
    double q[5], tot = 0;
    for (int b = 0; b < 5; b++)
        tot += q[b] = exp(l[best[b]] - l[best[0]]);
    double cum = 0;
    int want = 0;
    p.top_p = 0.7f;
    while (cum < (double)p.top_p * tot)
        cum += q[want++];
    cr_assert(want > 1 && want < 5, "crafted so top_p cuts inside the top-5 (want %d)", want);
    memcpy(c, l, QWEN_VOCAB * sizeof *l);
    int64_t got = cands(&p, c, QWEN_VOCAB, ids, pr, 8);
    cr_assert_eq(got, want, "top_p kept %ld, want %d (q %g %g %g %g %g)", (long)got, want, q[0],
                 q[1], q[2], q[3], q[4]);
    free(c);
    free(l);
}

Test(sampler, penalties_change_exactly_the_expected_logits)
{
    struct sampler_params p;
    sampler_params_init(&p);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 1.0f;
    p.repeat_last_n = 3;
    struct sampler *s = mk(&p, 10);
    sampler_accept(s, 9); /* falls out of the window */
    sampler_accept(s, 5);
    sampler_accept(s, 5);
    sampler_accept(s, 7);
    float l[10] = {1, 1, 1, 1, 1, 4, 1, -2, 1, 3};
    int32_t ids[10];
    float pr[10];
    cr_assert_gt(sampler_candidates(s, l, NULL, ids, pr, 10), 0);
    cr_assert_float_eq(l[5], 4.0f / 2 - 2 * 0.5f - 1.0f, 1e-6); /* 0 */
    cr_assert_float_eq(l[7], -2.0f * 2 - 0.5f - 1.0f, 1e-6);    /* -5.5 */
    cr_assert_float_eq(l[9], 3.0f, 0);                          /* out of window: untouched */
    for (int i = 0; i < 5; i++)
        cr_assert_float_eq(l[i], 1.0f, 0);
    sampler_free(s);

    /* unbounded window (-1): the first token still counts */
    p.repeat_last_n = -1;
    p.repeat_penalty = 1.0f;
    s = mk(&p, 10);
    sampler_accept(s, 9);
    for (int i = 0; i < 100; i++)
        sampler_accept(s, 2);
    float m[10] = {0};
    cr_assert_gt(sampler_candidates(s, m, NULL, ids, pr, 10), 0);
    cr_assert_float_eq(m[9], -1.5f, 1e-6);
    cr_assert_float_eq(m[2], -51.0f, 1e-4);
    cr_assert_float_eq(m[0], 0.0f, 0);
    sampler_free(s);

    /* repeat_last_n 0: penalties off */
    p.repeat_last_n = 0;
    s = mk(&p, 10);
    sampler_accept(s, 1);
    float z[10] = {0};
    cr_assert_gt(sampler_candidates(s, z, NULL, ids, pr, 10), 0);
    cr_assert_float_eq(z[1], 0.0f, 0);
    sampler_free(s);
}

Test(sampler, mask_excludes_tokens)
{
    enum { N = 1000 };
    uint32_t mask[(N + 31) / 32] = {0};
    const int32_t allowed[3] = {3, 40, 999};
    for (int i = 0; i < 3; i++)
        mask[allowed[i] / 32] |= 1u << (allowed[i] % 32);
    struct sampler_params p;
    sampler_params_init(&p);
    p.seed = 3;
    struct sampler *s = mk(&p, N);
    float l[N];
    int hits[3] = {0};
    for (int draw = 0; draw < 3000; draw++) {
        for (int i = 0; i < N; i++)
            l[i] = (i == 500) ? 50.0f : 0.0f;
        struct sampler_choice c;
        cr_assert_eq(sampler_sample(s, l, mask, &c), 0);
        int k = c.token == 3 ? 0 : c.token == 40 ? 1 : c.token == 999 ? 2 : -1;
        cr_assert_geq(k, 0, "token %d is masked out", c.token);
        hits[k]++;
        cr_assert_float_eq(c.logprob, (float)log(1.0 / 3), 1e-5);
    }
    for (int i = 0; i < 3; i++)
        cr_assert_gt(hits[i], 800, "allowed token %d drawn %d/3000", allowed[i], hits[i]);
    sampler_free(s);

    p.temperature = 0;
    s = mk(&p, N);
    for (int i = 0; i < N; i++)
        l[i] = (float)i / 10.0f;
    l[999] = -5;
    struct sampler_choice c;
    cr_assert_eq(sampler_sample(s, l, mask, &c), 0);
    cr_assert_eq(c.token, 40, "greedy picks the best allowed token");
    uint32_t none[(N + 31) / 32] = {0};
    cr_assert_eq(sampler_sample(s, l, none, &c), -1);
    sampler_free(s);
}

Test(sampler, logprobs_normalized_and_top_sorted)
{
    enum { N = 16 };
    struct sampler_params p;
    sampler_params_init(&p);
    p.n_top_logprobs = 20;
    p.seed = 11;
    struct sampler *s = mk(&p, N);
    float l[N], ref[N];
    for (int i = 0; i < N; i++)
        ref[i] = l[i] = (float)((i * 7) % 5) - 0.25f * i;
    double z = 0;
    for (int i = 0; i < N; i++)
        z += exp(ref[i]);
    struct sampler_choice c;
    cr_assert_eq(sampler_sample(s, l, NULL, &c), 0);
    cr_assert_float_eq(c.logprob, ref[c.token] - log(z), 1e-5);
    cr_assert_eq(c.n_top, N, "all 16 tokens fit in the top list");
    double sum = 0;
    for (int i = 0; i < c.n_top; i++) {
        sum += exp(c.top_logprob[i]);
        cr_assert_float_eq(c.top_logprob[i], ref[c.top_token[i]] - log(z), 1e-5);
        if (i) {
            cr_assert(c.top_logprob[i] <= c.top_logprob[i - 1]);
            if (c.top_logprob[i] == c.top_logprob[i - 1])
                cr_assert_lt(c.top_token[i - 1], c.top_token[i]);
        }
    }
    cr_assert_float_eq(sum, 1.0, 1e-5);
    sampler_free(s);

    /* with a mask the distribution renormalizes over the allowed tokens only */
    p.n_top_logprobs = 3;
    s = mk(&p, N);
    uint32_t mask = 0x00f0; /* tokens 4..7 */
    for (int i = 0; i < N; i++)
        l[i] = ref[i];
    cr_assert_eq(sampler_sample(s, l, &mask, &c), 0);
    double zm = exp(ref[4]) + exp(ref[5]) + exp(ref[6]) + exp(ref[7]);
    cr_assert(c.token >= 4 && c.token <= 7);
    cr_assert_float_eq(c.logprob, ref[c.token] - log(zm), 1e-5);
    cr_assert_eq(c.n_top, 3);
    for (int i = 0; i < 3; i++)
        cr_assert(c.top_token[i] >= 4 && c.top_token[i] <= 7);
    sampler_free(s);
}

Test(sampler, draws_follow_the_distribution)
{
    const double probs[3] = {0.5, 0.3, 0.2};
    struct sampler_params p;
    sampler_params_init(&p);
    p.seed = 1234;
    struct sampler *s = mk(&p, 50);
    int hits[3] = {0};
    float l[50];
    for (int d = 0; d < 20000; d++) {
        crafted(l, 50, probs, 3);
        struct sampler_choice c;
        cr_assert_eq(sampler_sample(s, l, NULL, &c), 0);
        cr_assert_lt(c.token, 3);
        hits[c.token]++;
    }
    for (int i = 0; i < 3; i++)
        cr_assert_float_eq(hits[i] / 20000.0, probs[i], 0.015, "token %d: %d/20000", i, hits[i]);
    sampler_free(s);
}

static int cmp_desc_id(const void *a, const void *b, void *ctx)
{
    const float *l = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Both top-k paths (heap for small k, quickselect above it) against a full sort, with ties. */
Test(sampler, top_k_heap_and_select_match_full_sort)
{
    const int32_t n = 50000;
    float *l = malloc(n * sizeof *l), *w = malloc(n * sizeof *w);
    int32_t *order = malloc(n * sizeof *order), *ids = malloc(n * sizeof *ids);
    float *pr = malloc(n * sizeof *pr);
    fill_logits(l, n, 5);
    for (int32_t i = 0; i < n; i += 7)
        l[i] = 3.0f; /* many ties */
    for (int32_t i = 0; i < n; i++)
        order[i] = i;
    qsort_r(order, n, sizeof *order, cmp_desc_id, l);
    const int ks[] = {2, 37, 1000, 1025, 4000};
    for (size_t t = 0; t < sizeof ks / sizeof ks[0]; t++) {
        struct sampler_params p;
        sampler_params_init(&p);
        p.top_k = ks[t];
        memcpy(w, l, n * sizeof *l);
        int64_t k = cands(&p, w, n, ids, pr, n);
        cr_assert_eq(k, ks[t]);
        for (int64_t i = 0; i < k; i++)
            cr_assert_eq(ids[i], order[i], "k=%d rank %ld", ks[t], (long)i);
    }
    free(l);
    free(w);
    free(order);
    free(ids);
    free(pr);
}

/* The vectorized max / sum-of-exp passes (AVX2 when available) against a double reference on a
 * full Qwen-size vocabulary with masked (-inf) and NaN entries and an odd tail. */
Test(sampler, logprobs_full_vocab_match_double_reference)
{
    const int32_t n = QWEN_VOCAB - 3;
    float *l = malloc(n * sizeof *l), *ref = malloc(n * sizeof *ref);
    fill_logits(l, n, 77);
    for (int32_t i = 0; i < n; i += 101)
        l[i] = -INFINITY;
    l[5] = NAN;
    l[n - 1] = 12.5f; /* the max sits in the scalar tail */
    memcpy(ref, l, n * sizeof *l);
    double z = 0;
    for (int32_t i = 0; i < n; i++)
        if (ref[i] > -INFINITY) z += exp((double)ref[i] - 12.5);
    double lse = 12.5 + log(z);
    struct sampler_params p;
    sampler_params_init(&p);
    p.temperature = 0;
    p.n_top_logprobs = 5;
    struct sampler *s = mk(&p, n);
    struct sampler_choice c;
    cr_assert_eq(sampler_sample(s, l, NULL, &c), 0);
    cr_assert_eq(c.token, n - 1);
    cr_assert_float_eq(c.logprob, 12.5 - lse, 2e-5);
    for (int i = 0; i < c.n_top; i++)
        cr_assert_float_eq(c.top_logprob[i], ref[c.top_token[i]] - lse, 2e-5);
    sampler_free(s);
    free(l);
    free(ref);
}

/* top_p without top_k on a full vocabulary (the bucketed path) against a full sort. */
Test(sampler, top_p_buckets_match_full_sort)
{
    const int32_t n = QWEN_VOCAB;
    float *l = malloc(n * sizeof *l), *w = malloc(n * sizeof *w);
    int32_t *order = malloc(n * sizeof *order), *ids = malloc(n * sizeof *ids);
    float *pr = malloc(n * sizeof *pr);
    const float tps[] = {0.3f, 0.9f, 0.99f};
    const float temps[] = {0.7f, 1.0f, 1.3f};
    for (int t = 0; t < 3; t++) {
        fill_logits(l, n, 200 + (uint32_t)t);
        for (int32_t i = 0; i < n; i++)
            l[i] *= 0.6f;
        for (int32_t i = 0; i < n; i += 13)
            l[i] = 5.0f; /* ties */
        for (int32_t i = 0; i < n; i++)
            order[i] = i;
        qsort_r(order, n, sizeof *order, cmp_desc_id, l);
        float lmax = l[order[0]], inv_t = 1.0f / temps[t];
        double total = 0;
        for (int32_t i = 0; i < n; i++)
            total += expf((l[i] - lmax) * inv_t);
        double cum = 0, target = (double)tps[t] * total;
        int64_t want = 0;
        while (cum < target)
            cum += expf((l[order[want++]] - lmax) * inv_t);
        struct sampler_params p;
        sampler_params_init(&p);
        p.top_p = tps[t];
        p.temperature = temps[t];
        memcpy(w, l, n * sizeof *l);
        int64_t k = cands(&p, w, n, ids, pr, n);
        cr_assert_leq(k > want ? k - want : want - k, 1, "top_p %g T %g: kept %ld, full sort %ld",
                      tps[t], temps[t], (long)k, (long)want);
        int64_t same = k < want ? k : want;
        for (int64_t i = 0; i < same; i++)
            cr_assert_eq(ids[i], order[i], "rank %ld", (long)i);
        cr_assert_gt(want, 1000, "the case must exercise the bucketed path");
    }
    free(l);
    free(w);
    free(order);
    free(ids);
    free(pr);
}

/* Extreme logits (NaN, +-inf, +-FLT_MAX, denormals) and extreme parameters: every step returns a
 * valid token (or -1 when nothing is allowed), finite-or--inf logprobs, never a crash (this runs
 * under ASan + UBSan in `make test`). */
Test(sampler, extreme_values_never_crash)
{
    enum { N = 300 };
    const float specials[] = {NAN,     INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e-40f,
                              -1e-40f, 0.0f,     -0.0f,     88.0f,   -88.0f};
    const float temps[] = {0, 1e-40f, 1e-6f, 0.7f, 1.0f, 1e6f, 3e38f};
    uint32_t x = 99;
    for (int iter = 0; iter < 400; iter++) {
        struct sampler_params p;
        sampler_params_init(&p);
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        p.temperature = temps[x % 7];
        p.top_k = (int)(x >> 3) % 4 == 0 ? 0 : (int)((x >> 5) % 400);
        p.top_p = (x >> 9) % 3 == 0 ? 1.0f : 1e-6f + (float)((x >> 11) % 1000) / 1000.0f;
        if (p.top_p > 1) p.top_p = 1;
        p.min_p = (x >> 13) % 3 == 0 ? 0.0f : (float)((x >> 15) % 1001) / 1000.0f;
        p.repeat_penalty = (x >> 17) % 2 ? 1.0f : 1.5f;
        p.presence_penalty = (x >> 18) % 2 ? 0.0f : 2.0f;
        p.n_top_logprobs = (int)((x >> 19) % 21);
        p.seed = x;
        struct sampler *s = mk(&p, N);
        float l[N];
        uint32_t mask[(N + 31) / 32];
        for (int step = 0; step < 4; step++) {
            for (int i = 0; i < N; i++) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                l[i] =
                    x % 5 == 0 ? specials[(x >> 8) % 11] : (float)((int)(x >> 8) % 2000) / 100.0f;
            }
            for (int w = 0; w < (N + 31) / 32; w++) {
                x ^= x << 13, x ^= x >> 17, x ^= x << 5;
                mask[w] = iter % 3 ? 0xffffffffu : x & (x >> 3);
            }
            struct sampler_choice c;
            int rc = sampler_sample(s, l, iter % 3 ? NULL : mask, &c);
            if (rc == 0) {
                cr_assert(c.token >= 0 && c.token < N);
                cr_assert_not(isnan(c.logprob), "NaN logprob (iter %d)", iter);
                cr_assert(c.n_top >= 0 && c.n_top <= p.n_top_logprobs);
                for (int k = 0; k < c.n_top; k++)
                    cr_assert(c.top_token[k] >= 0 && c.top_token[k] < N);
                sampler_accept(s, c.token);
            } else {
                cr_assert_eq(rc, -1);
            }
        }
        sampler_free(s);
    }
}

/* no_logprob skips the log-softmax only: the same tokens are drawn (greedy and seeded sampling),
 * logprob is NaN; with top logprobs asked for, it is ignored. */
Test(sampler, no_logprob_same_tokens_nan_logprob)
{
    const int32_t n = 5000;
    float *l0 = malloc(sizeof(float) * n), *l1 = malloc(sizeof(float) * n);
    for (int cfg = 0; cfg < 2; cfg++) {
        struct sampler_params p;
        sampler_params_init(&p);
        p.temperature = cfg ? 0.8f : 0.0f;
        p.top_k = cfg ? 0 : 1;
        p.seed = 11;
        struct sampler *a = mk(&p, n);
        p.no_logprob = 1;
        struct sampler *b = mk(&p, n);
        for (int step = 0; step < 50; step++) {
            fill_logits(l0, n, 100u + (uint32_t)step);
            memcpy(l1, l0, sizeof(float) * n);
            struct sampler_choice ca, cb;
            cr_assert_eq(sampler_sample(a, l0, NULL, &ca), 0);
            cr_assert_eq(sampler_sample(b, l1, NULL, &cb), 0);
            cr_assert_eq(ca.token, cb.token, "cfg %d step %d", cfg, step);
            cr_assert(ca.logprob <= 0 && isnan(cb.logprob) && cb.n_top == 0);
        }
        sampler_free(a);
        sampler_free(b);
    }
    struct sampler_params p;
    sampler_params_init(&p);
    p.no_logprob = 1;
    p.n_top_logprobs = 3;
    struct sampler *c = mk(&p, n);
    fill_logits(l0, n, 7);
    struct sampler_choice cc;
    cr_assert_eq(sampler_sample(c, l0, NULL, &cc), 0);
    cr_assert(cc.logprob <= 0 && cc.n_top == 3, "top logprobs asked for: computed anyway");
    sampler_free(c);
    free(l0);
    free(l1);
}
