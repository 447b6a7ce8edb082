/* qwen35: the Gated DeltaNet hybrid forward (engine/models/qwen35.c) on generated qwen35 /
 * qwen35moe files (mkmodel_qwen35.c shapes with a small vocabulary): chunked prefill against
 * token-by-token decode, chunk alignment and thread count against bits, and the recurrent
 * cache's rules (no rewind, whole copies only, restart at position 0). */
#include <criterion/criterion.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/mkmodel_gen.h"
#include "engine/kernels/quant.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

#define NV 500
#define NT 150 /* two whole DeltaNet chunks (64) and a tail */

static struct model *load(int moe, int threads)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/lms-test-qwen35-%d.gguf", (int)getpid());
    struct mkmodel_shape s = mkmodel_qwen35_shapes[moe ? 1 : 0];
    s.n_vocab = NV;
    struct err e = {0};
    cr_assert(mkmodel_write(&s, MKMODEL_F32, 7, NULL, path, &e) == 0, "%s", e.msg);
    struct model_opts o = {.n_threads = threads};
    struct model *m = model_load(path, &o, &e);
    unlink(path);
    cr_assert(m, "load: %s", e.msg);
    return m;
}

static int32_t tok_at(int i) { return (int32_t)((i * 7919 + 13) % NV); }

/* All-position logits of tokens [0, NT) fed in forwards of `split` tokens (0 = one forward). */
static float *run_split(struct model *m, int split)
{
    struct err e = {0};
    struct kv_cache *kv = kv_new(m, 256, &e);
    cr_assert(kv, "%s", e.msg);
    float *out = malloc(sizeof(float) * NV * NT);
    int32_t tok[NT], pos[NT];
    bool want[NT];
    struct kv_cache *seq[NT];
    for (int i = 0; i < NT; i++) tok[i] = tok_at(i), pos[i] = i, want[i] = true, seq[i] = kv;
    int step = split ? split : NT;
    for (int i = 0; i < NT; i += step) {
        int n = NT - i < step ? NT - i : step;
        struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .want_logits = want, .n = n};
        cr_assert(model_forward(m, &b, out + (size_t)i * NV, &e) == 0, "%s", e.msg);
    }
    cr_assert(kv_rows(kv) == NT);
    kv_free(kv);
    return out;
}

static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, mx = 1;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs((double)b[i]));
    }
    return d / mx;
}

static void prefill_vs_decode(int moe)
{
    for (int th = 1; th <= 2; th++) {
        struct model *m = load(moe, th);
        float *dec = run_split(m, 1);
        /* the chunked form and the recurrence differ by float rounding: measured (portable loops) 3e-6 (dense),
         * 3e-5 (moe) of max |logit| */
        static const int splits[] = {0, 64, 100, 50, 7};
        for (size_t k = 0; k < sizeof splits / sizeof *splits; k++) {
            float *p = run_split(m, splits[k]);
            double d = rel_diff(p, dec, (size_t)NV * NT);
            cr_expect(d < 1e-4, "%s, %d threads, forwards of %d tokens vs decode: %g (relative to max |logit|)",
                      moe ? "qwen35moe" : "qwen35", th, splits[k] ? splits[k] : NT, d);
            free(p);
        }
        free(dec);
        model_free(m);
    }
}

Test(qwen35, chunked_prefill_matches_decode) { prefill_vs_decode(0); }
Test(qwen35, chunked_prefill_matches_decode_moe) { prefill_vs_decode(1); }

/* Forwards split at multiples of the chunk (the server's prefill chunks) and the thread count do
 * not change a bit. */
Test(qwen35, aligned_splits_and_threads_are_bit_identical)
{
    struct model *m1 = load(0, 1), *m2 = load(0, 2);
    float *a = run_split(m1, 0), *b = run_split(m1, 64), *c = run_split(m2, 128), *d = run_split(m2, 1);
    cr_expect(memcmp(a, b, sizeof(float) * NV * NT) == 0, "one prefill vs forwards of 64 differ");
    cr_expect(memcmp(a, c, sizeof(float) * NV * NT) == 0, "1 thread vs 2 threads (forwards of 128) differ");
    float *d1 = run_split(m1, 1);
    cr_expect(memcmp(d, d1, sizeof(float) * NV * NT) == 0, "decode on 1 vs 2 threads differs");
    free(a), free(b), free(c), free(d), free(d1);
    model_free(m1);
    model_free(m2);
}

static void feed(struct model *m, struct kv_cache *kv, int from, int n, float *last)
{
    struct err e = {0};
    int32_t tok[NT], pos[NT];
    struct kv_cache *seq[NT];
    for (int i = 0; i < n; i++) tok[i] = tok_at(from + i), pos[i] = from + i, seq[i] = kv;
    struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = n};
    cr_assert(model_forward(m, &b, last, &e) == 0, "%s", e.msg);
}

Test(qwen35, recurrent_cache_rules)
{
    struct model *m = load(0, 2);
    struct err e = {0};
    struct kv_cache *a = kv_new(m, 256, &e), *b = kv_new(m, 256, &e), *c = kv_new(m, 256, &e);
    cr_assert(a && b && c, "%s", e.msg);
    cr_expect(model_config(m)->state_floats > 0 && a->state != NULL);
    float la[NV], lb[NV], lc[NV];
    feed(m, a, 0, 70, la);
    /* a rewind is refused with a clear error, and leaves the cache as it was */
    int32_t t = tok_at(40), p = 40;
    struct kv_cache *s = a;
    struct batch bad = {.token = &t, .pos = &p, .seq = &s, .n = 1};
    cr_expect(model_forward(m, &bad, la, &e) != 0 && strstr(e.msg, "rewind"), "rewind: %s", e.msg);
    cr_expect(kv_rows(a) == 70);
    /* partial copies are refused; a whole copy continues exactly as the original */
    cr_expect(kv_copy_rows(b, a, 40) != 0);
    cr_expect(kv_copy_rows(b, a, 70) == 0 && kv_rows(b) == 70);
    feed(m, a, 70, 10, la);
    feed(m, b, 70, 10, lb);
    cr_expect(memcmp(la, lb, sizeof la) == 0, "a copied state continues differently");
    /* truncating to a shorter prefix empties the cache: the state cannot be cut */
    kv_truncate(b, 30);
    cr_expect(kv_rows(b) == 0);
    /* a used cache restarted at position 0 equals a fresh one */
    feed(m, b, 0, 20, lb);
    feed(m, c, 0, 20, lc);
    cr_expect(memcmp(lb, lc, sizeof lb) == 0, "a restarted state differs from a fresh one");
    /* the disk tier's row stream refuses recurrent caches */
    cr_expect(kv_write_rows(c, 20, NULL, NULL) != 0);
    kv_free(a), kv_free(b), kv_free(c);
    model_free(m);
}

/* Two sequences in one forward, their tokens interleaved, equal each alone (the DeltaNet state
 * of each sequence follows its own tokens in order). */
Test(qwen35, interleaved_sequences_match_alone)
{
    struct model *m = load(1, 2);
    struct err e = {0};
    struct kv_cache *a = kv_new(m, 256, &e), *b = kv_new(m, 256, &e), *ra = kv_new(m, 256, &e),
                    *rb = kv_new(m, 256, &e);
    float l1[NV], l2[NV];
    feed(m, ra, 0, 100, l1);
    feed(m, rb, 0, 90, l2);
    enum { N = 190 };
    int32_t tok[N], pos[N];
    struct kv_cache *seq[N];
    bool want[N];
    int ia = 0, ib = 0, n = 0;
    while (ia < 100 || ib < 90) { /* a a b a a b ... */
        if (ia < 100) tok[n] = tok_at(ia), pos[n] = ia++, seq[n] = a, want[n] = ia == 100, n++;
        if (ia < 100 && n % 3 == 1) tok[n] = tok_at(ia), pos[n] = ia++, seq[n] = a, want[n] = ia == 100, n++;
        if (ib < 90) tok[n] = tok_at(ib), pos[n] = ib++, seq[n] = b, want[n] = ib == 90, n++;
    }
    cr_assert(n == N);
    float out[2 * NV];
    struct batch bt = {.token = tok, .pos = pos, .seq = seq, .want_logits = want, .n = N};
    cr_assert(model_forward(m, &bt, out, &e) == 0, "%s", e.msg);
    int first_a = 0; /* which wanted row comes first */
    for (int i = 0; i < N; i++)
        if (want[i]) {
            first_a = seq[i] == a;
            break;
        }
    const float *oa = first_a ? out : out + NV, *ob = first_a ? out + NV : out;
    cr_expect(rel_diff(oa, l1, NV) < 1e-5 && rel_diff(ob, l2, NV) < 1e-5, "interleaved: %g %g",
              rel_diff(oa, l1, NV), rel_diff(ob, l2, NV));
    kv_free(a), kv_free(b), kv_free(ra), kv_free(rb);
    model_free(m);
}

#include "engine/text/family.h"

/* The serving side reads the family's caps: no prefix reuse for a recurrent state. */
Test(qwen35, family_has_no_kv_reuse)
{
    const struct family *f = family_find("qwen35");
    cr_assert(f && f == family_find("qwen35moe"));
    cr_expect(!f->caps.kv_reuse && f->caps.grammar && family_think(f) && family_tool_markers(f));
    cr_expect(family_find("qwen3")->caps.kv_reuse);
}

/* A snapshot of the state at an aligned position, restored after the cache went on with other
 * tokens, continues bit for bit as a cold cache fed the same tokens (the slot pool's resume). */
Test(qwen35, state_snapshot_resumes_bit_identical)
{
    struct model *m = load(0, 2);
    struct err e = {0};
    struct kv_cache *a = kv_new(m, 512, &e), *c = kv_new(m, 512, &e);
    cr_assert(a && c, "%s", e.msg);
    size_t nf = 0;
    cr_assert(kv_state(a, &nf) && nf == model_config(m)->state_floats);
    float la[NV], lc[NV];
    feed(m, a, 0, 128, la);
    float *snap = malloc(nf * sizeof *snap);
    memcpy(snap, kv_state(a, NULL), nf * sizeof *snap);
    feed(m, a, 128, 20, la); /* the first reply ... */
    cr_expect(kv_state_restore(a, 149, snap) != 0, "restore past the rows is refused");
    cr_assert(kv_state_restore(a, 128, snap) == 0 && kv_rows(a) == 128);
    /* ... then a follow-up from the snapshot: tokens from a different stream */
    int32_t tok[40], pos[40];
    struct kv_cache *seq[40];
    for (int i = 0; i < 40; i++) tok[i] = (int32_t)((i * 31 + 7) % NV), pos[i] = 128 + i, seq[i] = a;
    struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = 40};
    cr_assert(model_forward(m, &b, la, &e) == 0, "%s", e.msg);
    feed(m, c, 0, 128, lc);
    for (int i = 0; i < 40; i++) seq[i] = c;
    cr_assert(model_forward(m, &b, lc, &e) == 0, "%s", e.msg);
    cr_expect(memcmp(la, lc, sizeof la) == 0, "resumed and cold logits differ");
    free(snap);
    kv_free(a), kv_free(c);
    model_free(m);
}
