/* models/common — what every model family's file uses the same way: carving one scratch arena,
 * describing a weight matmul for mm_run_ops, reading the family's `<arch>.<key>` metadata.
 * Family conventions stay in the family's own file (docs/families.md). */
#ifndef LMS_ENGINE_MODELS_COMMON_H
#define LMS_ENGINE_MODELS_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/format/gguf.h"
#include "engine/kernels/matmul.h"

/* Lays out one scratch arena in two passes: with base NULL it only adds up the size (*off), then
 * with the allocated base it hands out each piece, 64-byte aligned. */
void *mdl_carve(char *base, size_t *off, size_t bytes);

/* One matmul of weight w (expert `expert` of a 3-D expert tensor, else 0) over n_tok rows of x
 * (stride xs, rows picked by x_idx or in order) into y (stride ys, rows y_idx or in order). */
struct mm_op mdl_op(const struct gguf_tensor *w, int64_t expert, const float *x, int64_t xs,
                    const int32_t *x_idx, int64_t n_tok, float *y, int64_t ys, const int32_t *y_idx);

/* `<arch>.<key>` as a positive count below 2^24 / a positive finite float into *out. A missing
 * key is an error when required, else leaves *out as it was. */
int mdl_get_u32(const struct gguf *g, const char *arch, const char *key, int *out, bool required,
                struct err *e);
int mdl_get_f32(const struct gguf *g, const char *arch, const char *key, float *out, bool required,
                struct err *e);

#endif
