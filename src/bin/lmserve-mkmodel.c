/* lmserve-mkmodel — writes a synthetic Qwen3 / Qwen3-MoE GGUF (seeded random weights + a real
 * tokenizer converted from tokenizer.json) for tests and benchmarks, or imports trained Qwen3
 * weights (HF config.json + F32 model.safetensors; the demo model, scripts/train_demo.py).
 *
 *   lmserve-mkmodel --shape tiny|qwen3-0.6b|moe-tiny --type f32|f16|q8_0|q4_k_m|q5_k_m|tq1_0|tq2_0|q1_0|q2_0
 *                   --tokenizer DIR --seed N -o OUT.gguf
 *   lmserve-mkmodel --weights DIR --name NAME --type TYPE --tokenizer DIR -o OUT.gguf */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "engine/text/hf_tokenizer.h"
#include "engine/format/mkmodel_gen.h"
#include "engine/format/mkmodel_nanochat.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: lmserve-mkmodel --shape SHAPE --type TYPE --tokenizer DIR [--seed N] -o OUT.gguf\n"
            "       lmserve-mkmodel --weights DIR --name NAME --type TYPE --tokenizer DIR -o OUT.gguf\n"
            "  --shape SHAPE     %s (random weights, marked as such in the file)\n"
            "  --shape NANOCHAT  %s: a random nanochat checkpoint directory\n"
            "                    (-o DIR, --type f32|bf16|f16, no --tokenizer; docs/nanochat.md)\n"
            "  --weights DIR     trained Qwen3 weights: DIR/config.json + DIR/model.safetensors (F32)\n"
            "  --name NAME       general.name of an imported model (no spaces; the server's model id)\n"
            "  --type TYPE       f32, f16, q8_0, q4_k_m, q5_k_m, tq1_0, tq2_0, q1_0, q2_0 (required)\n"
            "  --tokenizer DIR   directory with tokenizer.json + tokenizer_config.json (required)\n"
            "  --seed N          weight seed, unsigned integer (default 1)\n"
            "  -o, --out PATH    output file (required; written atomically)\n"
            "  -h, --help        this text\n",
            mkmodel_shape_names(), mkmodel_nanochat_shape_names());
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *shape_name = NULL, *type_name = NULL, *tokdir = NULL, *out = NULL, *weights = NULL, *gname = NULL;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "lmserve-mkmodel: %s: unknown flag or missing value (see --help)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "--shape")) shape_name = v;
        else if (!strcmp(a, "--type")) type_name = v;
        else if (!strcmp(a, "--tokenizer")) tokdir = v;
        else if (!strcmp(a, "--weights")) weights = v;
        else if (!strcmp(a, "--name")) gname = v;
        else if (!strcmp(a, "-o") || !strcmp(a, "--out")) out = v;
        else if (!strcmp(a, "--seed")) {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(v, &end, 10);
            if (errno || !*v || *end || v[0] == '-') {
                fprintf(stderr, "lmserve-mkmodel: --seed: '%s' is not an unsigned integer\n", v);
                return 2;
            }
            seed = s;
        } else {
            fprintf(stderr, "lmserve-mkmodel: unknown flag %s (see --help)\n", a);
            return 2;
        }
    }
    if (shape_name && mkmodel_nanochat_shape(shape_name)) { /* a checkpoint directory, no tokenizer input */
        struct err ne = {0};
        double t0 = now_s();
        if (!type_name || !out || weights || gname || tokdir) {
            fprintf(stderr, "lmserve-mkmodel: --shape %s takes --type f32|bf16|f16, -o DIR and --seed only\n", shape_name);
            return 2;
        }
        if (mkmodel_nanochat_write(shape_name, type_name, seed, out, &ne)) {
            fprintf(stderr, "lmserve-mkmodel: %s\n", ne.msg);
            return 1;
        }
        fprintf(stderr, "lmserve-mkmodel: wrote %s/ (%s, %s, seed %" PRIu64 ") in %.1f s\n", out, shape_name, type_name,
                seed, now_s() - t0);
        return 0;
    }
    if (weights) {
        if (shape_name || !gname || !type_name || !tokdir || !out) {
            fprintf(stderr, "lmserve-mkmodel: --weights needs --name, --type, --tokenizer and -o, and no --shape "
                            "(see --help)\n");
            return 2;
        }
        if (!gname[0] || strpbrk(gname, " \t\n")) {
            fprintf(stderr, "lmserve-mkmodel: --name: '%s' must be non-empty and without spaces\n", gname);
            return 2;
        }
    } else if (!shape_name || !type_name || !tokdir || !out || gname) {
        fprintf(stderr, "lmserve-mkmodel: --shape, --type, --tokenizer and -o are required, --name only with "
                        "--weights (see --help)\n");
        return 2;
    }
    const struct mkmodel_shape *shape = weights ? NULL : mkmodel_shape_find(shape_name);
    if (!weights && !shape) {
        fprintf(stderr, "lmserve-mkmodel: --shape: unknown shape '%s' (one of %s)\n", shape_name, mkmodel_shape_names());
        return 2;
    }
    int type = mkmodel_type_parse(type_name);
    if (type < 0) {
        fprintf(stderr, "lmserve-mkmodel: --type: unknown type '%s' (f32, f16, q8_0, q4_k_m, q5_k_m, tq1_0, tq2_0, q1_0, q2_0)\n", type_name);
        return 2;
    }

    double t0 = now_s();
    struct err e = {0};
    if (shape && shape->write_tokdir) { /* a family writer that reads its tokenizer itself */
        if (shape->write_tokdir(shape, type, seed, tokdir, out, &e)) {
            fprintf(stderr, "lmserve-mkmodel: %s\n", e.msg);
            return 1;
        }
        fprintf(stderr, "lmserve-mkmodel: wrote %s (%s, %s, seed %" PRIu64 ") in %.1f s\n", out, shape->name,
                mkmodel_type_name((enum mkmodel_type)type), seed, now_s() - t0);
        return 0;
    }
    struct hf_tokenizer tok;
    memset(&tok, 0, sizeof tok);
    if (hf_tokenizer_load(tokdir, shape ? shape->n_vocab : 0, &tok, &e)) {
        fprintf(stderr, "lmserve-mkmodel: tokenizer: %s\n", e.msg);
        return 1;
    }
    int rc = weights ? mkmodel_import(weights, (enum mkmodel_type)type, &tok, gname, out, &e)
                     : mkmodel_write(shape, (enum mkmodel_type)type, seed, &tok, out, &e);
    hf_tokenizer_free(&tok);
    if (rc) {
        fprintf(stderr, "lmserve-mkmodel: %s\n", e.msg);
        return 1;
    }
    if (weights)
        fprintf(stderr, "lmserve-mkmodel: wrote %s (%s from %s, %s) in %.1f s\n", out, gname, weights,
                mkmodel_type_name((enum mkmodel_type)type), now_s() - t0);
    else
        fprintf(stderr, "lmserve-mkmodel: wrote %s (%s, %s, seed %" PRIu64 ") in %.1f s\n", out, shape->name,
                mkmodel_type_name((enum mkmodel_type)type), seed, now_s() - t0);
    return 0;
}
