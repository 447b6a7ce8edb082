#define _GNU_SOURCE /* memmem */
/* nanochat checkpoint directories (docs/nanochat.md): what the loader refuses and how it says so,
 * and the cache paths the smear depends on (its previous token lives in the cache's row tokens):
 * a prefix copied into another cache and a prefix written out and read back (the disk tier's
 * stream) continue exactly as one uninterrupted run. Logit values against an independent
 * reference are tests/suites/31-nanochat.sh's. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/format/mkmodel_nanochat.h"
#include "engine/kv_cache.h"
#include "engine/model.h"
#include "engine/text/vocab.h"

static char g_dir[128];

static void mk(const char *shape)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/lms-nanochat-%d-%s", (int)getpid(), shape);
    struct err e = {0};
    cr_assert(mkmodel_nanochat_write(shape, "f32", 7, g_dir, &e) == 0, "%s", e.msg);
}

static void rm_dir(void)
{
    char f[200];
    static const char *const files[] = {"model.safetensors", "config.json", "tokenizer.json"};
    for (int i = 0; i < 3; i++) snprintf(f, sizeof f, "%s/%s", g_dir, files[i]), unlink(f);
    rmdir(g_dir);
}

static char *slurp(const char *name, size_t *n)
{
    char f[200];
    snprintf(f, sizeof f, "%s/%s", g_dir, name);
    FILE *fp = fopen(f, "rb");
    cr_assert(fp, "%s", f);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *p = malloc(*n + 1);
    cr_assert_eq(fread(p, 1, *n, fp), *n);
    p[*n] = 0;
    fclose(fp);
    return p;
}

static void put(const char *name, const char *p, size_t n)
{
    char f[200];
    snprintf(f, sizeof f, "%s/%s", g_dir, name);
    FILE *fp = fopen(f, "wb");
    cr_assert(fp);
    cr_assert_eq(fwrite(p, 1, n, fp), n);
    fclose(fp);
}

/* Replaces the first `from` in file name by `to`, loads, expects an error containing each needle,
 * then restores the file. */
static void expect_refused(const char *name, const char *from, const char *to, const char *n1, const char *n2)
{
    size_t n;
    char *orig = slurp(name, &n);
    char *at = memmem(orig, n, from, strlen(from));
    cr_assert(at, "'%s' not in %s", from, name);
    size_t fl = strlen(from), tl = strlen(to);
    char *mod = malloc(n - fl + tl + 1);
    memcpy(mod, orig, (size_t)(at - orig));
    memcpy(mod + (at - orig), to, tl);
    memcpy(mod + (at - orig) + tl, at + fl, n - (size_t)(at - orig) - fl);
    put(name, mod, n - fl + tl);
    struct err e = {0};
    struct model_opts o = {.n_threads = 1};
    struct model *m = model_load(g_dir, &o, &e);
    cr_expect_null(m, "%s: '%s' -> '%s' loaded", name, from, to);
    model_free(m);
    cr_expect(strstr(e.msg, n1) && (!n2 || strstr(e.msg, n2)), "%s: '%s' -> '%s': error '%s' lacks '%s' / '%s'",
              name, from, to, e.msg, n1, n2 ? n2 : "");
    put(name, orig, n);
    free(mod);
    free(orig);
}

Test(nanochat, bad_directories_are_refused_by_name)
{
    mk("nanochat-tiny");
    expect_refused("config.json", "\"n_embd\": 64", "\"n_embd\": 128", "transformer.wte.weight", "config.json");
    expect_refused("config.json", "\"n_layer\": 4", "\"n_layer\": 3", "resid_lambdas has shape [4]",
                   "config.json implies [3]");
    expect_refused("config.json", "\"n_layer\": 4", "\"n_layer\": 5", "resid_lambdas", "config.json");
    expect_refused("config.json", "\"n_kv_head\": 2", "\"n_kv_head\": 3", "n_kv_head", "config.json");
    expect_refused("config.json", "\"vocab_size\": 500", "\"vocab_size\": 600", "transformer.wte.weight", "shape");
    expect_refused("config.json", "\"lmserve-nanochat\"", "\"nanochat\"", "config.json: format", NULL);
    expect_refused("config.json", "\"SSSL\"", "\"SSXL\"", "window_pattern", NULL);
    expect_refused("config.json", "\"qk_scale\": 1.2", "\"qk_scale\": -1", "architecture.qk_scale", NULL);
    expect_refused("config.json", "{", "[", "config.json", NULL);
    /* same-length renames inside the safetensors header: a missing and an unknown tensor */
    expect_refused("model.safetensors", "\"lm_head.weight\"", "\"lm_hexd.weight\"", "lm_head.weight", "missing");
    expect_refused("model.safetensors", "\"smear_lambda\"", "\"smear_lambdx\"", "smear_lambda", "missing");
    expect_refused("model.safetensors", "\"value_embeds.1.weight\"", "\"value_embeds.0.weight\"", "layer 0",
                   "value embedding");
    expect_refused("model.safetensors", "\"F32\"", "\"I32\"", "I32", NULL);
    char f[200];
    snprintf(f, sizeof f, "%s/model.safetensors", g_dir);
    cr_assert(rename(f, "/tmp/lms-nanochat-moved") == 0);
    struct err e = {0};
    struct model *m = model_load(g_dir, NULL, &e);
    cr_expect_null(m);
    cr_expect(strstr(e.msg, "model.safetensors") && strstr(e.msg, "cannot open"), "%s", e.msg);
    cr_assert(rename("/tmp/lms-nanochat-moved", f) == 0);
    snprintf(f, sizeof f, "%s/config.json", g_dir);
    unlink(f);
    m = model_load(g_dir, NULL, &e);
    cr_expect_null(m);
    cr_expect(strstr(e.msg, "config.json"), "%s", e.msg);
    rm_dir();
}

#define N 80
static int32_t tok_at(int i) { return (int32_t)((i * 131 + 7) % 500); }

static void feed(struct model *m, struct kv_cache *kv, int from, int to, float *out)
{
    struct err e = {0};
    for (int i = from; i < to; i++) {
        int32_t t = tok_at(i), p = i;
        struct kv_cache *s = kv;
        struct batch b = {.token = &t, .pos = &p, .seq = &s, .n = 1};
        cr_assert(model_forward(m, &b, out + (int64_t)i * 500, &e) == 0, "%s", e.msg);
    }
}

struct mem { uint8_t *p; size_t n, cap, at; };
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

Test(nanochat, prefix_copy_and_serialized_rows_continue_exactly)
{
    mk("nanochat-tiny");
    struct err e = {0};
    struct model_opts o = {.n_threads = 2};
    struct model *m = model_load(g_dir, &o, &e);
    cr_assert(m, "%s", e.msg);
    cr_expect(model_config(m)->kv_f32 && model_config(m)->kv_row_tokens);
    struct kv_cache *a = kv_new(m, 128, &e), *b = kv_new(m, 128, &e), *c = kv_new(m, 128, &e);
    cr_assert(a && b && c, "%s", e.msg);
    /* F32, 4 layers + the row-token layer, 2 kv heads x 16 dims, all full-size at 128 positions (no
     * ring is smaller: test_kvring_f32.c) */
    cr_expect_eq(kv_bytes(a), (size_t)5 * 2 * 16 * 128 * 2 * 4);
    float *ref = malloc(sizeof(float) * 500 * N), *got = malloc(sizeof(float) * 500 * N);
    feed(m, a, 0, N, ref);
    cr_expect_eq(kv_row_token(a, 41), tok_at(41));
    /* a prefix of 41 rows copied, then decoded on: the first new token smears token 40 */
    cr_assert(kv_copy_rows(b, a, 41) == 0);
    feed(m, b, 41, N, got);
    cr_expect(memcmp(ref + 41 * 500, got + 41 * 500, sizeof(float) * 500 * (N - 41)) == 0,
              "continuation after a prefix copy differs");
    /* 37 rows through the serialization the disk tier writes */
    struct mem mm = {0};
    cr_assert(kv_write_rows(a, 37, w_fn, &mm) == 0);
    cr_expect_eq(mm.n, kv_rows_nbytes(a, 37));
    cr_assert(kv_read_rows(c, 37, r_fn, &mm) == 0);
    feed(m, c, 37, N, got);
    cr_expect(memcmp(ref + 37 * 500, got + 37 * 500, sizeof(float) * 500 * (N - 37)) == 0,
              "continuation after rows read back differs");
    /* a wrong previous token changes the logits (the test can see a lost row token) */
    kv_truncate(b, 41);
    kv_store_token(b, 40, tok_at(40) + 1);
    feed(m, b, 41, 42, got);
    cr_expect(memcmp(ref + 41 * 500, got + 41 * 500, sizeof(float) * 500) != 0, "the smear ignores the row token");
    free(mm.p);
    free(ref), free(got);
    kv_free(a), kv_free(b), kv_free(c);
    model_free(m);
    rm_dir();
}

/* the metadata GGUF a directory loads with: architecture, name, the random-weights mark, and the
 * tokenizer through it (vocab_load follows nanochat.dir to DIR/tokenizer.json) */
Test(nanochat, metadata_gguf_and_tokenizer)
{
    mk("nanochat-tiny");
    struct err e = {0};
    struct model_opts o = {.n_threads = 1};
    struct model *m = model_load(g_dir, &o, &e);
    cr_assert(m, "%s", e.msg);
    char *arch = gguf_get_str(model_gguf(m), "general.architecture", &e), *name = gguf_get_str(model_gguf(m), "general.name", &e);
    cr_expect_str_eq(arch, "nanochat");
    cr_expect_str_eq(name, "nanochat-tiny");
    bool rnd = false;
    cr_expect(gguf_get_bool(model_gguf(m), "lmserve.random_weights", &rnd, &e) == 0 && rnd);
    free(arch), free(name);
    struct vocab *v = vocab_load(model_gguf(m), &e);
    cr_assert(v, "%s", e.msg);
    cr_expect_eq(vocab_size(v), 500);
    cr_expect_eq(model_config(m)->n_vocab, 500);
    vocab_free(v);
    model_free(m);
    rm_dir();
}
