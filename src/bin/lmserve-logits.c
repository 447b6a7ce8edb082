/* lmserve-logits — print a model's logits or greedy continuation for a token list.
 *
 *   lmserve-logits MODEL --tokens 1,2,3 [--threads N] [--ctx N] [--one-by-one]
 *       prints the last position's logits, one per line (%.9g)
 *   lmserve-logits MODEL --tokens 1,2,3 --greedy N
 *       prints N greedy token ids, comma separated
 *   lmserve-logits MODEL --tokens 1,2,3 --nll
 *       prints "SUM COUNT": the summed negative log-likelihood (nats) of tokens 2..n given the ones
 *       before, one token per forward (held-out perplexity = exp(SUM / COUNT); docs/demo-model.md)
 * --one-by-one feeds the prompt one token per forward (decode path) instead of one prefill.
 *   lmserve-logits MODEL --act-format
 *       prints how the decode path rounds the input of the model's attn_q matmul: "a8" (int8, f32
 *       scale per 32), the vec_dot type name ("q8_0", "q8_K"), or "f32" (used by the numerics
 *       suite to pick the reference's matching --act mode). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/kernels/matmul.h"
#include "engine/model.h"
#include "engine/kernels/quant.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: lmserve-logits MODEL --tokens ID,ID,... [--threads N] [--ctx N] [--greedy N] "
               "[--one-by-one] [--nll] [--cache-type f16|f32]\n"
               "       lmserve-logits MODEL --act-format\n");
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_tokens(const char *s, int32_t **out, int *n)
{
    int cap = 16, k = 0;
    int32_t *t = malloc(sizeof *t * (size_t)cap);
    if (!t) return -1;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || v < 0 || v > INT32_MAX || (*end && *end != ',')) {
            free(t);
            return -1;
        }
        if (k == cap) {
            int32_t *nt = realloc(t, sizeof *t * (size_t)(cap *= 2));
            if (!nt) {
                free(t);
                return -1;
            }
            t = nt;
        }
        t[k++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    if (!k) {
        free(t);
        return -1;
    }
    *out = t;
    *n = k;
    return 0;
}

static int argmax(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int main(int argc, char **argv)
{
    const char *path = NULL, *toks = NULL;
    long threads = 0, greedy = 0, ctx = 0;
    int one_by_one = 0, act_format = 0, nll = 0;
    bool kv_f32 = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--one-by-one")) {
            one_by_one = 1;
        } else if (!strcmp(a, "--nll")) {
            nll = 1;
        } else if (!strcmp(a, "--act-format")) {
            act_format = 1;
        } else if (i + 1 < argc && !strcmp(a, "--tokens")) {
            toks = argv[++i];
        } else if (i + 1 < argc && (!strcmp(a, "--threads") || !strcmp(a, "-t"))) {
            if (parse_int(argv[++i], 1, 1024, &threads)) goto bad;
        } else if (i + 1 < argc && !strcmp(a, "--greedy")) {
            if (parse_int(argv[++i], 1, 1 << 20, &greedy)) goto bad;
        } else if (i + 1 < argc && !strcmp(a, "--cache-type")) {
            if (strcmp(argv[++i], "f16") && strcmp(argv[i], "f32")) goto bad;
            kv_f32 = !strcmp(argv[i], "f32");
        } else if (i + 1 < argc && !strcmp(a, "--ctx")) {
            if (parse_int(argv[++i], 1, 1 << 24, &ctx)) goto bad;
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            fprintf(stderr, "lmserve-logits: unknown or incomplete argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "lmserve-logits: bad value '%s' for %s\n", argv[i], a);
        return 2;
    }
    if (path && act_format) {
        struct gguf g;
        struct err e = {0};
        if (gguf_open(&g, path, &e)) {
            fprintf(stderr, "lmserve-logits: %s\n", e.msg);
            return 1;
        }
        quant_init();
        const struct gguf_tensor *t = gguf_find_tensor(&g, "blk.0.attn_q.weight");
        const struct quant_traits *tr = t ? quant_traits((enum ggml_type)t->type) : NULL;
        if (!tr) {
            fprintf(stderr, "lmserve-logits: no usable blk.0.attn_q.weight\n");
            gguf_close(&g);
            return 1;
        }
        switch (mm_act_kind((enum ggml_type)t->type, 1, t->ne[0])) {
        case MM_ACT_F32: printf("f32\n"); break;
        case MM_ACT_A8: printf("a8\n"); break;
        default: printf("%s\n", quant_traits(tr->vec_dot_type)->name); break;
        }
        gguf_close(&g);
        return 0;
    }
    if (!path || !toks) {
        usage(stderr);
        return 2;
    }
    int32_t *tok;
    int n;
    if (parse_tokens(toks, &tok, &n)) {
        fprintf(stderr, "lmserve-logits: --tokens must be comma-separated non-negative integers\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    struct err e = {0};
    struct model_opts o = {.n_threads = (int)threads, .kv_f32 = kv_f32};
    struct model *m = model_load(path, &o, &e);
    if (!m) {
        fprintf(stderr, "lmserve-logits: %s\n", e.msg);
        free(tok);
        return 1;
    }
    const struct model_config *c = model_config(m);
    int n_ctx = ctx ? (int)ctx : n + (int)greedy;
    int rc = 1;
    float *logits = malloc(sizeof(float) * (size_t)c->n_vocab);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    struct kv_cache **seq = malloc(sizeof *seq * (size_t)n);
    struct kv_cache *kv = kv_new(m, n_ctx, &e);
    if (!logits || !pos || !seq || !kv) {
        fprintf(stderr, "lmserve-logits: %s\n", kv ? "out of memory" : e.msg);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        seq[i] = kv;
    }
    if (nll) {
        if (greedy || n < 2) {
            fprintf(stderr, "lmserve-logits: --nll needs at least 2 tokens and no --greedy\n");
            goto out;
        }
        double sum = 0;
        for (int i = 0; i + 1 < n; i++) {
            struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .n = 1};
            if (model_forward(m, &b, logits, &e)) goto fail;
            if (tok[i + 1] >= c->n_vocab) {
                fprintf(stderr, "lmserve-logits: token %d is outside the vocabulary (%d)\n", tok[i + 1], c->n_vocab);
                goto out;
            }
            double mx = logits[argmax(logits, c->n_vocab)], z = 0;
            for (int j = 0; j < c->n_vocab; j++) z += exp((double)logits[j] - mx);
            sum += mx + log(z) - (double)logits[tok[i + 1]];
        }
        printf("%.9g %d\n", sum, n - 1);
        rc = 0;
        goto out;
    }
    if (one_by_one) {
        for (int i = 0; i < n; i++) {
            struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .n = 1};
            if (model_forward(m, &b, logits, &e)) goto fail;
        }
    } else {
        struct batch b = {.token = tok, .pos = pos, .seq = seq, .n = n};
        if (model_forward(m, &b, logits, &e)) goto fail;
    }
    if (!greedy) {
        for (int i = 0; i < c->n_vocab; i++) printf("%.9g\n", (double)logits[i]);
    } else {
        for (long g = 0; g < greedy; g++) {
            int32_t t = argmax(logits, c->n_vocab), p = n + (int32_t)g;
            printf("%s%d", g ? "," : "", t);
            if (g + 1 == greedy) break;
            struct batch b = {.token = &t, .pos = &p, .seq = &kv, .n = 1};
            if (model_forward(m, &b, logits, &e)) goto fail;
        }
        printf("\n");
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "lmserve-logits: %s\n", e.msg);
out:
    kv_free(kv);
    free(logits);
    free(pos);
    free(seq);
    free(tok);
    model_free(m);
    return rc;
}
