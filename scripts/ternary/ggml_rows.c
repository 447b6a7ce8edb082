/* ggml_rows — llama.cpp's side of scripts/ternary/check.py (see common.h for the commands), on
 * libggml-base / libggml-cpu of an existing llama.cpp build (the script compiles it against that;
 * nothing here builds llama.cpp). */
#include <stdint.h>
#include <string.h>

#include "common.h"
#include "ggml-cpu.h"
#include "ggml.h"
#include "gguf.h"

int main(int argc, char **argv)
{
    ggml_cpu_init();
    if (argc == 4 && !strcmp(argv[1], "deq")) {
        struct gguf_init_params p = {.no_alloc = true, .ctx = NULL};
        struct gguf_context *g = gguf_init_from_file(argv[2], p);
        if (!g) return 1;
        FILE *in = fopen(argv[2], "rb"), *out = fopen(argv[3], "wb");
        size_t base = gguf_get_data_offset(g);
        for (int64_t i = 0; i < gguf_get_n_tensors(g); i++) {
            enum ggml_type t = gguf_get_tensor_type(g, i);
            if (!is_low_bit((int)t)) continue;
            size_t bytes = gguf_get_tensor_size(g, i);
            int64_t n = (int64_t)(bytes / ggml_type_size(t)) * ggml_blck_size(t);
            void *raw = malloc(bytes);
            fseek(in, (long)(base + gguf_get_tensor_offset(g, i)), SEEK_SET);
            if (fread(raw, 1, bytes, in) != bytes) return 1;
            float *f = malloc((size_t)n * 4);
            ggml_get_type_traits(t)->to_float(raw, f, n);
            fwrite(f, 4, (size_t)n, out);
            printf("%s %s %ld\n", gguf_get_tensor_name(g, i), ggml_type_name(t), (long)n);
            free(raw), free(f);
        }
        fclose(in), fclose(out);
        gguf_free(g);
        return 0;
    }
    if (argc == 6 && (!strcmp(argv[1], "quant") || !strcmp(argv[1], "actq"))) {
        enum ggml_type t = (enum ggml_type)atoi(argv[2]);
        int64_t n = atol(argv[3]);
        int act = !strcmp(argv[1], "actq");
        enum ggml_type qt = act ? ggml_get_type_traits_cpu(t)->vec_dot_type : t;
        size_t sz;
        float *x = slurp(argv[4], &sz);
        int64_t rows = (int64_t)(sz / 4) / n;
        size_t rb = ggml_row_size(qt, n);
        uint8_t *q = malloc(rb * (size_t)rows);
        if (act) {
            for (int64_t r = 0; r < rows; r++)
                ggml_get_type_traits_cpu(qt)->from_float(x + r * n, q + (size_t)r * rb, n);
        } else {
            ggml_quantize_chunk(t, x, q, 0, rows, n, NULL);
        }
        spill(argv[5], q, rb * (size_t)rows);
        return 0;
    }
    if (argc == 6 && !strcmp(argv[1], "dot")) {
        enum ggml_type t = (enum ggml_type)atoi(argv[2]);
        int64_t n = atol(argv[3]);
        size_t ws, ys;
        uint8_t *w = slurp(argv[4], &ws), *y = slurp(argv[5], &ys);
        size_t rb = ggml_row_size(t, n);
        for (size_t r = 0; r < ws / rb; r++) {
            float s;
            ggml_get_type_traits_cpu(t)->vec_dot((int)n, &s, 0, w + r * rb, 0, y, 0, 1);
            printf("%.9g\n", s);
        }
        return 0;
    }
    fprintf(stderr, "usage: see scripts/ternary/common.h\n");
    return 2;
}
