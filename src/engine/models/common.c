/* models/common — the pieces every family file uses the same way (common.h). */
#include "engine/models/common.h"

#include <math.h>
#include <stdio.h>

#include "engine/kernels/quant.h"

void *mdl_carve(char *base, size_t *off, size_t bytes)
{
    void *r = base ? base + *off : NULL;
    *off += (bytes + 63) / 64 * 64;
    return r;
}

struct mm_op mdl_op(const struct gguf_tensor *w, int64_t expert, const float *x, int64_t xs,
                    const int32_t *x_idx, int64_t n_tok, float *y, int64_t ys, const int32_t *y_idx)
{
    size_t rs = quant_row_size((enum ggml_type)w->type, w->ne[0]);
    return (struct mm_op){
        .wtype = (enum ggml_type)w->type,
        .W = (const uint8_t *)w->data + (size_t)expert * rs * (size_t)w->ne[1],
        .rows = w->ne[1],
        .cols = w->ne[0],
        .w_stride = rs,
        .X = x,
        .x_stride = xs,
        .x_idx = x_idx,
        .n_tok = n_tok,
        .Y = y,
        .y_stride = ys,
        .y_idx = y_idx,
    };
}

int mdl_get_u32(const struct gguf *g, const char *arch, const char *key, int *out, bool required,
                struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    uint32_t v;
    if (!gguf_find(g, full)) {
        if (!required) return 0;
        return err_set(e, ERR_FORMAT, "metadata key %s is missing", full);
    }
    if (gguf_get_u32(g, full, &v, e)) return -1;
    if (v == 0 || v > (1u << 24)) return err_set(e, ERR_FORMAT, "metadata %s = %u is out of range", full, v);
    *out = (int)v;
    return 0;
}

int mdl_get_f32(const struct gguf *g, const char *arch, const char *key, float *out, bool required,
                struct err *e)
{
    char full[128];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    if (!gguf_find(g, full)) {
        if (!required) return 0;
        return err_set(e, ERR_FORMAT, "metadata key %s is missing", full);
    }
    if (gguf_get_f32(g, full, out, e)) return -1;
    if (!(*out > 0.0f) || !isfinite(*out))
        return err_set(e, ERR_FORMAT, "metadata %s = %g is out of range", full, (double)*out);
    return 0;
}
