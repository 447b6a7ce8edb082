/* The sliding-window KV ring (kv_cache.h, docs/kv-ring.md) on a Gemma 4 model (mkmodel_gemma4's
 * tiny geometry: 4 SWA layers with a 32-key window, ring of 128 rows; 2 global layers):
 * memory in proportion to the window, continuing from a kept / copied prefix after the ring has
 * wrapped gives the same bits as computing from scratch, a prefix whose window the ring no longer
 * holds is dropped (0 rows) instead of being used, and a forward that would rewind past it is
 * refused with a clear error. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/mkmodel_gen.h"
#include "engine/kv_cache.h"
#include "engine/model.h"

#define N 300 /* > 2 ring lengths */

static char g_path[96];
static struct model *g_m;
static int g_V;

static void setup(void)
{
    struct mkmodel_shape s = *mkmodel_shape_find("gemma4-tiny");
    s.n_vocab = 320;
    snprintf(g_path, sizeof g_path, "/tmp/lms-kvring-%d.gguf", (int)getpid());
    struct err e = {0};
    cr_assert(mkmodel_write(&s, MKMODEL_F32, 77, NULL, g_path, &e) == 0, "%s", e.msg);
    struct model_opts o = {.n_threads = 2};
    g_m = model_load(g_path, &o, &e);
    cr_assert(g_m, "%s", e.msg);
    g_V = model_config(g_m)->n_vocab;
}

static void teardown(void)
{
    model_free(g_m);
    unlink(g_path);
}

static int32_t tok_at(int i) { return (int32_t)((i * 7919 + 13) % g_V); }

/* tokens [start, start + n) in chunks of `chunk`, logits of every one into out (n x V) */
static int feed(struct kv_cache *kv, int start, int n, int chunk, float *out, struct err *e)
{
    int32_t tok[N], pos[N];
    bool want[N];
    struct kv_cache *seq[N];
    for (int i = 0; i < n; i++) tok[i] = tok_at(start + i), pos[i] = start + i, want[i] = true, seq[i] = kv;
    for (int i = 0; i < n; i += chunk) {
        int k = n - i < chunk ? n - i : chunk;
        struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .want_logits = want + i, .n = k};
        if (model_forward(g_m, &b, out ? out + (int64_t)i * g_V : NULL, e)) return -1;
    }
    return 0;
}

static void expect_same(const float *want, const float *got, int n, const char *what)
{
    for (int64_t i = 0; i < (int64_t)n * g_V; i++)
        cr_assert(memcmp(&want[i], &got[i], 4) == 0, "%s: position %ld logit %ld = %.9g, from scratch %.9g", what,
                  (long)(i / g_V), (long)(i % g_V), got[i], want[i]);
}

TestSuite(kvring, .init = setup, .fini = teardown);

Test(kvring, memory_grows_with_the_global_layers_only)
{
    struct err e = {0};
    struct kv_cache *a = kv_new(g_m, 512, &e), *b = kv_new(g_m, 4096, &e);
    cr_assert(a && b, "%s", e.msg);
    /* per position: the two global layers, 1 kv head x 64 dims, K and V, f16 */
    cr_expect_eq(kv_bytes_per_row(g_m), (size_t)2 * 2 * 64 * 2);
    cr_expect_eq(kv_bytes(b) - kv_bytes(a), (size_t)(4096 - 512) * kv_bytes_per_row(g_m),
                 "the SWA rings cost the same at 512 and 4096 positions");
    /* rings: 4 layers x 2 kv heads x 32 dims x 128 rows x K,V x 2 bytes */
    cr_expect_eq(kv_bytes(a) - (size_t)512 * kv_bytes_per_row(g_m), (size_t)4 * 2 * 32 * 128 * 2 * 2);
    kv_free(a);
    kv_free(b);
}

Test(kvring, kept_and_copied_prefixes_after_the_ring_wrapped)
{
    struct err e = {0};
    size_t bytes = sizeof(float) * (size_t)N * (size_t)g_V;
    float *ref = malloc(bytes), *got = malloc(bytes);
    struct kv_cache *kv = kv_new(g_m, 512, &e), *dst = kv_new(g_m, 512, &e);
    cr_assert(kv && dst, "%s", e.msg);
    cr_assert(feed(kv, 0, N, 1, ref, &e) == 0, "%s", e.msg); /* token by token: the reference */
    kv_truncate(kv, 0);
    cr_assert(feed(kv, 0, N, 64, got, &e) == 0, "%s", e.msg);
    expect_same(ref, got, N, "prefill in chunks of 64 (the ring wraps inside a prefill)");
    /* keep 290 of 300: the window before 290 (259..289) is still in the ring (it holds 172..299) */
    cr_assert(kv_prefix_ok(kv, 290));
    kv_truncate(kv, 290);
    cr_assert_eq(kv_rows(kv), 290);
    cr_assert(feed(kv, 290, N - 290, 3, got, &e) == 0, "%s", e.msg);
    expect_same(ref + (int64_t)290 * g_V, got, N - 290, "continued from a kept prefix of 290");
    /* copy 250 rows into another cache and continue there */
    cr_assert_eq(kv_copy_rows(dst, kv, 250), 0);
    cr_assert_eq(kv_rows(dst), 250);
    cr_assert(feed(dst, 250, N - 250, 16, got, &e) == 0, "%s", e.msg);
    expect_same(ref + (int64_t)250 * g_V, got, N - 250, "continued from a copied prefix of 250");
    /* 150: its window (119..149) was overwritten by 247..277 -> not reusable, dropped */
    cr_assert(!kv_prefix_ok(kv, 150));
    cr_assert_eq(kv_copy_rows(dst, kv, 150), 0);
    cr_assert_eq(kv_rows(dst), 0, "a prefix the rings no longer hold is not copied");
    kv_truncate(kv, 150);
    cr_assert_eq(kv_rows(kv), 0, "a prefix the rings no longer hold is dropped, not kept");
    /* an unwrapped cache keeps any prefix */
    cr_assert(feed(kv, 0, 100, 100, got, &e) == 0, "%s", e.msg);
    kv_truncate(kv, 10);
    cr_assert_eq(kv_rows(kv), 10);
    cr_assert(feed(kv, 10, 90, 7, got, &e) == 0, "%s", e.msg);
    expect_same(ref + (int64_t)10 * g_V, got, 90, "continued from 10 rows before the ring wrapped");
    kv_free(kv);
    kv_free(dst);
    free(ref);
    free(got);
}

Test(kvring, a_rewind_past_the_ring_is_refused)
{
    struct err e = {0};
    struct kv_cache *kv = kv_new(g_m, 512, &e);
    cr_assert(kv, "%s", e.msg);
    cr_assert(feed(kv, 0, N, 100, NULL, &e) == 0, "%s", e.msg);
    int32_t tok = 5, pos = 120;
    struct batch b = {.token = &tok, .pos = &pos, .seq = &kv, .n = 1};
    float *out = malloc(sizeof(float) * (size_t)g_V);
    cr_assert(model_forward(g_m, &b, out, &e) != 0, "a rewind to 120 after 300 positions must fail");
    cr_assert(strstr(e.msg, "sliding-window"), "%s", e.msg);
    cr_assert_eq(kv_rows(kv), N, "the refused forward left the cache as it was");
    pos = 295; /* within the ring: a rewind that works */
    cr_assert(model_forward(g_m, &b, out, &e) == 0, "%s", e.msg);
    cr_assert_eq(kv_rows(kv), 296);
    free(out);
    kv_free(kv);
}
