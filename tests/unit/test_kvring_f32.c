/* The sliding-window KV ring with F32 rows (kv_cache.h, docs/kv-ring.md) on a nanochat model
 * (mkmodel's nanochat-tiny: layers S S S L, a 16-token short window = 17 keys, micro-batches of at
 * most 64 tokens of one sequence, so the three S layers and the row-token layer are rings of 128
 * rows; the L layer is full-size): memory in proportion to the window, the rings wrapping inside a
 * prefill and a decode, a kept / copied prefix shorter or longer than the window continuing with
 * the same bits as an uninterrupted run or, when the rings no longer hold its window, dropped, the
 * disk tier's row stream (the same format as a full-size cache's, read back into a ring or into a
 * full-size cache), and a rewind past the rings refused. Logits against the numpy reference past
 * the rings are tests/suites/32-nanochat.sh's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/mkmodel_nanochat.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

#define N 420 /* > 3 ring lengths */
#define V 500
#define RING 128
#define KEYS 17 /* an S layer's query sees itself and the 16 positions before it */

static char g_dir[128];
static struct model *g_m;
static float *g_ref; /* N x V: the logits of one uninterrupted token-by-token run */

static int32_t tok_at(int i) { return (int32_t)((i * 7919 + 13) % V); }

/* tokens [from, to) in chunks of `chunk`, logits of every one into out + from * V (if out) */
static int feed(struct kv_cache *kv, int from, int to, int chunk, float *out, struct err *e)
{
    static int32_t tok[N], pos[N];
    static bool want[N];
    static struct kv_cache *seq[N];
    for (int i = from; i < to; i++) tok[i] = tok_at(i), pos[i] = i, want[i] = true, seq[i] = kv;
    for (int i = from; i < to; i += chunk) {
        int k = to - i < chunk ? to - i : chunk;
        struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .want_logits = want + i, .n = k};
        if (model_forward(g_m, &b, out ? out + (int64_t)i * V : NULL, e)) return -1;
    }
    return 0;
}

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/lms-kvring-f32-%d", (int)getpid());
    struct err e = {0};
    cr_assert(mkmodel_nanochat_write("nanochat-tiny", "f32", 5, g_dir, &e) == 0, "%s", e.msg);
    struct model_opts o = {.n_threads = 2};
    g_m = model_load(g_dir, &o, &e);
    cr_assert(g_m, "%s", e.msg);
    cr_assert_eq(model_config(g_m)->n_vocab, V);
    g_ref = malloc(sizeof(float) * (size_t)N * V);
    struct kv_cache *kv = kv_new(g_m, 512, &e);
    cr_assert(kv, "%s", e.msg);
    cr_assert(feed(kv, 0, N, 1, g_ref, &e) == 0, "%s", e.msg);
    kv_free(kv);
}

static void teardown(void)
{
    model_free(g_m);
    free(g_ref);
    char f[200];
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json"};
    for (int i = 0; i < 3; i++) snprintf(f, sizeof f, "%s/%s", g_dir, files[i]), unlink(f);
    rmdir(g_dir);
}

/* positions [from, to) of got against the uninterrupted run, bit for bit */
static void expect_ref(const float *got, int from, int to, const char *what)
{
    for (int64_t i = (int64_t)from * V; i < (int64_t)to * V; i++)
        cr_assert(memcmp(&g_ref[i], &got[i], 4) == 0, "%s: position %ld logit %ld = %.9g, uninterrupted %.9g", what,
                  (long)(i / V), (long)(i % V), got[i], g_ref[i]);
}

TestSuite(kvring_f32, .init = setup, .fini = teardown);

Test(kvring_f32, memory_grows_with_the_long_layer_only)
{
    struct err e = {0};
    struct kv_cache *a = kv_new(g_m, 512, &e), *b = kv_new(g_m, 4096, &e), *c = kv_new(g_m, 128, &e);
    cr_assert(a && b && c, "%s", e.msg);
    /* per position: the L layer, 2 kv heads x 16 dims, K and V, f32 */
    cr_expect_eq(kv_bytes_per_row(g_m), (size_t)2 * 2 * 16 * 4);
    cr_expect_eq(kv_bytes(b) - kv_bytes(a), (size_t)(4096 - 512) * kv_bytes_per_row(g_m),
                 "the rings cost the same at 512 and 4096 positions");
    /* rings: 3 S layers + the row-token layer x 2 kv heads x 16 dims x 128 rows x K,V x 4 bytes */
    cr_expect_eq(kv_bytes(a) - (size_t)512 * kv_bytes_per_row(g_m), (size_t)4 * 2 * 16 * RING * 2 * 4);
    /* at 128 positions no ring is smaller than the context: every layer full-size */
    cr_expect_eq(kv_bytes(c), (size_t)5 * 2 * 16 * 128 * 2 * 4);
    kv_free(a), kv_free(b), kv_free(c);
}

Test(kvring_f32, wraps_inside_a_prefill)
{
    struct err e = {0};
    float *got = malloc(sizeof(float) * (size_t)N * V);
    struct kv_cache *kv = kv_new(g_m, 512, &e);
    cr_assert(kv, "%s", e.msg);
    static const int chunks[] = {N, 200, 64, 7};
    for (int i = 0; i < 4; i++) {
        kv_truncate(kv, 0);
        cr_assert(feed(kv, 0, N, chunks[i], got, &e) == 0, "%s", e.msg);
        char what[64];
        snprintf(what, sizeof what, "prefill in chunks of %d", chunks[i]);
        expect_ref(got, 0, N, what);
    }
    /* the row-token ring: the smear's previous token, after the ring wrapped three times */
    cr_expect_eq(kv_row_token(kv, N - 1), tok_at(N - 1));
    cr_expect_eq(kv_row_token(kv, N - RING), tok_at(N - RING));
    kv_free(kv);
    free(got);
}

/* two sequences in every forward, k tokens of each (k > the 64-token run: the forward splits by
 * sequence), both wrapping their rings: each as its own uninterrupted run */
Test(kvring_f32, two_sequences_per_forward)
{
    struct err e = {0};
    float *got = malloc(sizeof(float) * 2 * (size_t)N * V), *out = malloc(sizeof(float) * 2 * 100 * V);
    struct kv_cache *a = kv_new(g_m, 512, &e), *b = kv_new(g_m, 512, &e);
    cr_assert(a && b, "%s", e.msg);
    static const int ks[] = {1, 50, 100};
    for (int j = 0; j < 3; j++) {
        int k = ks[j];
        kv_truncate(a, 0), kv_truncate(b, 0);
        for (int i = 0; i < N; i += k) {
            int n = N - i < k ? N - i : k;
            int32_t tok[200], pos[200];
            struct kv_cache *seq[200];
            for (int t = 0; t < 2 * n; t++)
                tok[t] = tok_at(i + t % n), pos[t] = i + t % n, seq[t] = t < n ? a : b;
            bool want[200];
            for (int t = 0; t < 2 * n; t++) want[t] = true;
            struct batch bt = {.token = tok, .pos = pos, .seq = seq, .want_logits = want, .n = 2 * n};
            cr_assert(model_forward(g_m, &bt, out, &e) == 0, "%s", e.msg);
            memcpy(got + (size_t)i * V, out, sizeof(float) * (size_t)n * V);
            memcpy(got + ((size_t)N + i) * V, out + (size_t)n * V, sizeof(float) * (size_t)n * V);
        }
        char what[64];
        snprintf(what, sizeof what, "1st of two sequences, %d tokens each per forward", k);
        expect_ref(got, 0, N, what);
        snprintf(what, sizeof what, "2nd of two sequences, %d tokens each per forward", k);
        expect_ref(got + (size_t)N * V, 0, N, what);
    }
    kv_free(a), kv_free(b);
    free(got), free(out);
}

Test(kvring_f32, kept_and_copied_prefixes_shorter_and_longer_than_the_window)
{
    struct err e = {0};
    float *got = malloc(sizeof(float) * (size_t)N * V);
    struct kv_cache *kv = kv_new(g_m, 512, &e), *dst = kv_new(g_m, 512, &e);
    cr_assert(kv && dst, "%s", e.msg);
    /* before the rings wrap every prefix is reusable: 10 rows (shorter than the window), 60 */
    cr_assert(feed(kv, 0, 100, 100, NULL, &e) == 0, "%s", e.msg);
    cr_assert(kv_copy_rows(dst, kv, 10) == 0);
    cr_assert_eq(kv_rows(dst), 10);
    cr_assert(feed(dst, 10, 100, 9, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 10, 100, "continued from a copied prefix of 10 (shorter than the window)");
    kv_truncate(kv, 60);
    cr_assert_eq(kv_rows(kv), 60);
    cr_assert(feed(kv, 60, 100, 1, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 60, 100, "continued from a kept prefix of 60");
    /* after 400 positions the rings hold 272..399: prefix n is reusable iff its window
     * n - 16 .. n - 1 is there, n >= 288 */
    cr_assert(feed(kv, 100, 400, 64, NULL, &e) == 0, "%s", e.msg);
    cr_expect(kv_prefix_ok(kv, 288));
    cr_expect(!kv_prefix_ok(kv, 287));
    cr_assert(kv_copy_rows(dst, kv, 300) == 0);
    cr_assert_eq(kv_rows(dst), 300);
    cr_assert(feed(dst, 300, N, 16, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 300, N, "continued from a copied prefix of 300 after the rings wrapped");
    cr_assert(kv_copy_rows(dst, kv, 250) == 0);
    cr_assert_eq(kv_rows(dst), 0, "a prefix of 250 (window 234..249, overwritten) is not copied");
    cr_assert(kv_copy_rows(dst, kv, 10) == 0);
    cr_assert_eq(kv_rows(dst), 0, "a prefix of 10 (shorter than the window) after the wrap is not copied");
    kv_truncate(kv, 390);
    cr_assert_eq(kv_rows(kv), 390);
    cr_assert(feed(kv, 390, N, 3, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 390, N, "continued from a kept prefix of 390 after the rings wrapped");
    kv_truncate(kv, 287);
    cr_assert_eq(kv_rows(kv), 0, "a prefix the rings no longer hold is dropped, not kept");
    cr_assert(feed(kv, 0, N, 128, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 0, N, "recomputed from scratch after the drop");
    kv_free(kv), kv_free(dst);
    free(got);
}

struct mem {
    uint8_t *p;
    size_t n, cap, at;
};
static int w_fn(void *ctx, void *p, size_t n)
{
    struct mem *m = ctx;
    if (m->n + n > m->cap) m->p = realloc(m->p, m->cap = (m->n + n) * 2);
    memcpy(m->p + m->n, p, n);
    m->n += n;
    return 0;
}
static int r_fn(void *ctx, void *p, size_t n)
{
    struct mem *m = ctx;
    if (m->at + n > m->n) return -1;
    memcpy(p, m->p + m->at, n);
    m->at += n;
    return 0;
}

Test(kvring_f32, rows_through_the_disk_stream)
{
    struct err e = {0};
    float *got = malloc(sizeof(float) * (size_t)N * V);
    struct kv_cache *kv = kv_new(g_m, 512, &e), *rd = kv_new(g_m, 512, &e), *full = kv_new(g_m, 128, &e);
    cr_assert(kv && rd && full, "%s", e.msg);
    /* a wrapped ring: 400 rows out (the format of a full-size cache: K tiles and V rows of every
     * position, the ones no ring holds as zeros), into another ring, continued exactly */
    cr_assert(feed(kv, 0, 400, 64, NULL, &e) == 0, "%s", e.msg);
    struct mem m = {0};
    cr_assert(kv_write_rows(kv, 400, w_fn, &m) == 0);
    size_t per_head = (size_t)(400 + 63) / 64 * 64 * 16 + (size_t)400 * 16;
    cr_expect_eq(m.n, per_head * 5 * 2 * 4, "%zu bytes", m.n);
    cr_expect_eq(m.n, kv_rows_nbytes(kv, 400));
    cr_assert(kv_read_rows(rd, 400, r_fn, &m) == 0);
    cr_assert_eq(kv_rows(rd), 400);
    cr_assert(feed(rd, 400, N, 5, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 400, N, "continued from 400 rows read back into a ring");
    /* read back, it holds what the written ring held: 290 is reusable, 250 is not */
    m.at = 0;
    cr_assert(kv_read_rows(rd, 400, r_fn, &m) == 0);
    kv_truncate(rd, 290);
    cr_assert_eq(kv_rows(rd), 290);
    cr_assert(feed(rd, 290, N, 64, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 290, N, "continued from 290 of 400 rows read back");
    m.at = 0;
    cr_assert(kv_read_rows(rd, 400, r_fn, &m) == 0);
    kv_truncate(rd, 250);
    cr_assert_eq(kv_rows(rd), 0);
    /* a ring that lost part of its last 128 positions (kept 395 of 400: 267..271 were overwritten by
     * 395..399) has no stream for 395 */
    struct mem m2 = {0};
    kv_truncate(kv, 395);
    cr_assert_eq(kv_rows(kv), 395);
    cr_expect(kv_write_rows(kv, 395, w_fn, &m2) != 0, "a stream of rows the ring no longer holds");
    /* an unwrapped ring and a full-size cache write the same bytes, and read each other's */
    kv_truncate(kv, 0);
    cr_assert(feed(kv, 0, 100, 100, NULL, &e) == 0, "%s", e.msg);
    cr_assert(feed(full, 0, 100, 100, NULL, &e) == 0, "%s", e.msg);
    free(m.p);
    m = (struct mem){0};
    m2 = (struct mem){0};
    cr_assert(kv_write_rows(kv, 100, w_fn, &m) == 0);
    cr_assert(kv_write_rows(full, 100, w_fn, &m2) == 0);
    cr_assert(m.n == m2.n && memcmp(m.p, m2.p, m.n) == 0, "ring and full-size streams of 100 rows differ");
    cr_assert(kv_read_rows(full, 100, r_fn, &m) == 0);
    cr_assert(feed(full, 100, 128, 7, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 100, 128, "a full-size cache continued from a ring's stream");
    cr_assert(kv_read_rows(rd, 100, r_fn, &m2) == 0);
    cr_assert(feed(rd, 100, N, 64, got, &e) == 0, "%s", e.msg);
    expect_ref(got, 100, N, "a ring continued from a full-size cache's stream, past its wrap");
    free(m.p), free(m2.p);
    kv_free(kv), kv_free(rd), kv_free(full);
    free(got);
}

Test(kvring_f32, a_rewind_past_the_rings_is_refused)
{
    struct err e = {0};
    struct kv_cache *kv = kv_new(g_m, 512, &e);
    cr_assert(kv, "%s", e.msg);
    cr_assert(feed(kv, 0, 400, 100, NULL, &e) == 0, "%s", e.msg);
    int32_t tok = 5, pos = 200;
    struct batch b = {.token = &tok, .pos = &pos, .seq = &kv, .n = 1};
    float *out = malloc(sizeof(float) * V);
    cr_assert(model_forward(g_m, &b, out, &e) != 0, "a rewind to 200 after 400 positions must fail");
    cr_assert(strstr(e.msg, "sliding-window"), "%s", e.msg);
    cr_assert_eq(kv_rows(kv), 400, "the refused forward left the cache as it was");
    pos = 395; /* within the rings: a rewind that works */
    cr_assert(model_forward(g_m, &b, out, &e) == 0, "%s", e.msg);
    cr_assert_eq(kv_rows(kv), 396);
    free(out);
    kv_free(kv);
}
