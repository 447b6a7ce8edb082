/* lms_rows — lmserve's side of scripts/ternary/check.py (see common.h for the commands). Built
 * by the script against BUILD/liblmserve.a. */
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "engine/format/gguf.h"
#include "engine/kernels/quant.h"

int main(int argc, char **argv)
{
    quant_init();
    if (argc == 4 && !strcmp(argv[1], "deq")) {
        struct gguf g;
        struct err e;
        if (gguf_open(&g, argv[2], &e)) {
            fprintf(stderr, "%s\n", e.msg);
            return 1;
        }
        FILE *out = fopen(argv[3], "wb");
        for (int64_t i = 0; i < g.n_tensors; i++) {
            const struct gguf_tensor *t = &g.tensors[i];
            if (!is_low_bit((int)t->type)) continue;
            int64_t n = 1;
            for (int d = 0; d < t->n_dims; d++)
                n *= t->ne[d];
            float *f = malloc((size_t)n * 4);
            quant_traits((enum ggml_type)t->type)->to_float(t->data, f, n);
            fwrite(f, 4, (size_t)n, out);
            free(f);
            printf("%.*s %s %ld\n", (int)t->name.len, t->name.p, quant_traits((enum ggml_type)t->type)->name,
                   (long)n);
        }
        fclose(out);
        gguf_close(&g);
        return 0;
    }
    if (argc == 6 && (!strcmp(argv[1], "quant") || !strcmp(argv[1], "actq"))) {
        enum ggml_type t = (enum ggml_type)atoi(argv[2]);
        int64_t n = atol(argv[3]);
        const struct quant_traits *tr = quant_traits(t);
        if (!tr) return 1;
        int act = !strcmp(argv[1], "actq");
        const struct quant_traits *qt = act ? quant_traits(tr->vec_dot_type) : tr;
        size_t sz;
        float *x = slurp(argv[4], &sz);
        int64_t rows = (int64_t)(sz / 4) / n;
        size_t rb = quant_row_size(act ? tr->vec_dot_type : t, n);
        uint8_t *q = malloc(rb * (size_t)rows);
        for (int64_t r = 0; r < rows; r++)
            (act ? qt->from_float : qt->from_float_ref)(x + r * n, q + (size_t)r * rb, n);
        spill(argv[5], q, rb * (size_t)rows);
        return 0;
    }
    if (argc == 6 && !strcmp(argv[1], "dot")) {
        enum ggml_type t = (enum ggml_type)atoi(argv[2]);
        int64_t n = atol(argv[3]);
        const struct quant_traits *tr = quant_traits(t);
        if (!tr) return 1;
        size_t ws, ys;
        uint8_t *w = slurp(argv[4], &ws), *y = slurp(argv[5], &ys);
        size_t rb = quant_row_size(t, n);
        for (size_t r = 0; r < ws / rb; r++)
            printf("%.9g\n", tr->vec_dot(n, w + r * rb, y));
        return 0;
    }
    fprintf(stderr, "usage: see scripts/ternary/common.h\n");
    return 2;
}
