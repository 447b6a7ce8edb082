/* common — the command line shared by lms_rows.c (lmserve's kernels) and ggml_rows.c (llama.cpp's
 * libggml) for scripts/ternary/check.py; each tool implements the four operations with its own
 * library and nothing else, so the script can compare their outputs byte for byte.
 *
 *   TOOL deq MODEL.gguf OUT.f32        every TQ1_0/TQ2_0/Q1_0/Q2_0 tensor of the file, in file
 *                                      order, dequantized into OUT; "NAME TYPE NELEM" lines out
 *   TOOL quant TYPE N IN.f32 OUT.bin   rows of N floats -> TYPE with the reference quantizer
 *   TOOL actq TYPE N IN.f32 OUT.bin    rows of N floats -> TYPE's activation type (vec_dot_type),
 *                                      with the tool's own CPU activation quantizer
 *   TOOL dot TYPE N W.bin Y.bin        every row of W (TYPE) dotted with the first row of Y (the
 *                                      activation type) by the tool's CPU kernel: one %.9g a row
 * Not part of the lmserve build or of make test. */
#ifndef TERNARY_CHECK_COMMON_H
#define TERNARY_CHECK_COMMON_H

#include <stdio.h>
#include <stdlib.h>

static void *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc((size_t)sz + 64);
    if (!p || fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        fprintf(stderr, "cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static void spill(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static int is_low_bit(int t)
{
    return t == 34 || t == 35 || t == 41 || t == 42;
}

#endif
