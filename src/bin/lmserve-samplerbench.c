/* lmserve-samplerbench — time one sampling step on a Qwen-size vocabulary.
 *
 *   lmserve-samplerbench [--vocab N] [--steps N]
 *
 * Two synthetic logit shapes: "zipf" (p ~ 1/rank^1.1 over shuffled ids: peaked, like a language
 * model) and "flat" (logits uniform in [-10, 10]: a worst case for top_p / min_p). For each
 * sampler configuration it prints the mean time of sampler_sample (logits copied back before each
 * step, copy time excluded). Figures only; nothing passes or fails on time. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/sample/sampler.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint32_t rnd(uint32_t *x)
{
    *x ^= *x << 13, *x ^= *x >> 17, *x ^= *x << 5;
    return *x;
}

int main(int argc, char **argv)
{
    long n = 151936, steps = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--vocab") && i + 1 < argc)
            n = strtol(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
            steps = strtol(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: lmserve-samplerbench [--vocab N] [--steps N]\n");
            return 2;
        }
    }
    if (n < 2 || n > (1L << 24) || steps < 1) {
        fprintf(stderr, "lmserve-samplerbench: bad --vocab or --steps\n");
        return 2;
    }
    float *zipf = malloc(sizeof(float) * (size_t)n), *flat = malloc(sizeof(float) * (size_t)n);
    float *w = malloc(sizeof(float) * (size_t)n);
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)n);
    if (!zipf || !flat || !w || !perm) return 1;
    uint32_t x = 2463534242u;
    for (long i = 0; i < n; i++)
        perm[i] = (int32_t)i;
    for (long i = n - 1; i > 0; i--) {
        long j = rnd(&x) % (uint32_t)(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (long r = 0; r < n; r++)
        zipf[perm[r]] = (float)(-1.1 * log((double)r + 1.0));
    for (long i = 0; i < n; i++)
        flat[i] = (float)(rnd(&x) >> 8) * (20.0f / 16777216.0f) - 10.0f;

    struct cfg {
        const char *name;
        float temp, top_p, min_p, rep;
        int top_k, n_top;
    } cfgs[] = {
        {"greedy", 0, 1, 0, 1, 0, 0},
        {"greedy + 20 top_logprobs", 0, 1, 0, 1, 0, 20},
        {"qwen3 no-think (T .7, k 20, p .8)", 0.7f, 0.8f, 0, 1, 20, 0},
        {"qwen3 think (T .6, k 20, p .95)", 0.6f, 0.95f, 0, 1, 20, 0},
        {"T 1, top_p .9 only", 1, 0.9f, 0, 1, 0, 0},
        {"T 1, min_p .05 only", 1, 1, 0.05f, 1, 0, 0},
        {"T 1, no truncation", 1, 1, 0, 1, 0, 0},
        {"T .8, k 40, repeat_penalty 1.1", 0.8f, 1, 0, 1.1f, 40, 0},
    };
    printf("sampler step, vocab %ld, %ld steps each (ms per token)\n", n, steps);
    printf("%-36s %10s %10s\n", "configuration", "zipf", "flat");
    for (size_t c = 0; c < sizeof cfgs / sizeof cfgs[0]; c++) {
        double ms[2];
        for (int shape = 0; shape < 2; shape++) {
            struct sampler_params p;
            sampler_params_init(&p);
            p.temperature = cfgs[c].temp;
            p.top_k = cfgs[c].top_k;
            p.top_p = cfgs[c].top_p;
            p.min_p = cfgs[c].min_p;
            p.repeat_penalty = cfgs[c].rep;
            p.n_top_logprobs = cfgs[c].n_top;
            p.seed = 1;
            struct err e = {0};
            struct sampler *s = sampler_new(&p, (int32_t)n, &e);
            if (!s) {
                fprintf(stderr, "lmserve-samplerbench: %s\n", e.msg);
                return 1;
            }
            const float *src = shape ? flat : zipf;
            double t = 0;
            for (long i = 0; i < steps; i++) {
                memcpy(w, src, sizeof(float) * (size_t)n);
                struct sampler_choice ch;
                double t0 = now();
                if (sampler_sample(s, w, NULL, &ch)) return 1;
                t += now() - t0;
                sampler_accept(s, ch.token);
            }
            ms[shape] = t * 1e3 / (double)steps;
            sampler_free(s);
        }
        printf("%-36s %10.3f %10.3f\n", cfgs[c].name, ms[0], ms[1]);
    }
    free(zipf);
    free(flat);
    free(w);
    free(perm);
    return 0;
}
