/* ops — portable versions of the forward-pass operations and the ISA dispatch (see ops.h). */
#include "engine/kernels/ops.h"

#include <math.h>
#include <stdbool.h>

#include "base/cpu.h"
#include "engine/kernels/fp16.h"

/* SIMD variants (ops_avx2.c, ops_avx512.c); only referenced on x86-64. */
void ops_attn_run_avx2(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                       int c1, float *state);
void ops_attn_run_avx512(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                         int c1, float *state);
void ops_f16_to_f32_avx512(float *dst, const uint16_t *src, int64_t n);
void ops_f32_to_f16_avx512(uint16_t *dst, const float *src, int64_t n);
void ops_swiglu_avx512(float *out, const float *gate, const float *up, int64_t n);
void ops_rmsnorm_avx512(float *out, const float *x, const float *w, int64_t n, float eps);

typedef void (*attn_fn)(const struct ops_attn *, int, int, int, float *, int, int, float *);
static void attn_portable_fn(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch,
                             int c0, int c1, float *state);
static attn_fn g_attn = attn_portable_fn;
static int g_attn_align = 1; /* head_dim must be a multiple of this for g_attn */
static const char *g_isa = "scalar";
static bool g_f16c_avx512;

void ops_init(void)
{
#if defined(__x86_64__)
    if (cpu_has_avx512_vnni() && cpu_has_avx2_fma() && cpu_features()->avx512bf16) {
        g_attn = ops_attn_run_avx512;
        g_attn_align = 16;
        g_isa = "avx512";
        g_f16c_avx512 = true;
    } else if (cpu_has_avx2_fma()) {
        g_attn = ops_attn_run_avx2;
        g_attn_align = 8;
        g_isa = "avx2";
    }
#endif
}

const char *ops_isa(void) { return g_isa; }

void ops_rmsnorm(float *out, const float *x, const float *w, int64_t n, float eps)
{
#if defined(__x86_64__)
    if (g_f16c_avx512) {
        ops_rmsnorm_avx512(out, x, w, n, eps);
        return;
    }
#endif
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * x[i];
    float s = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++) out[i] = x[i] * s * w[i];
}

void ops_rope_inv_freq(float *inv_freq, int head_dim, float base)
{
    for (int i = 0; i < head_dim / 2; i++)
        inv_freq[i] = (float)pow((double)base, -2.0 * i / head_dim);
}

void ops_rope_cache(float *cs, float *sn, int head_dim, int32_t pos, const float *inv_freq)
{
    for (int i = 0; i < head_dim / 2; i++) {
        /* angle in double: pos up to 1e5+ times inv_freq 1 needs more than float's 24 bits */
        double ang = (double)pos * inv_freq[i];
        cs[i] = (float)cos(ang);
        sn[i] = (float)sin(ang);
    }
}

void ops_rope_neox(float *x, int n_head, int head_dim, int32_t pos, const float *inv_freq)
{
    float cs[OPS_ATTN_MAX_HEAD_DIM / 2], sn[OPS_ATTN_MAX_HEAD_DIM / 2];
    ops_rope_cache(cs, sn, head_dim, pos, inv_freq);
    ops_rope_apply(x, n_head, head_dim, cs, sn);
}

void ops_rope_apply(float *x, int n_head, int head_dim, const float *cs, const float *sn)
{
    int half = head_dim / 2;
    for (int h = 0; h < n_head; h++) {
        float *p = x + (int64_t)h * head_dim;
        for (int i = 0; i < half; i++) {
            float x0 = p[i], x1 = p[i + half];
            p[i] = x0 * cs[i] - x1 * sn[i];
            p[i + half] = x0 * sn[i] + x1 * cs[i];
        }
    }
}

void ops_softmax(float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - m);
        s += x[i];
    }
    float inv = (float)(1.0 / s);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

void ops_swiglu(float *out, const float *gate, const float *up, int64_t n)
{
#if defined(__x86_64__)
    if (g_f16c_avx512) {
        ops_swiglu_avx512(out, gate, up, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

void ops_f32_to_f16(uint16_t *dst, const float *src, int64_t n)
{
#if defined(__x86_64__)
    if (g_f16c_avx512) {
        ops_f32_to_f16_avx512(dst, src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = f32_to_fp16(src[i]);
}

void ops_f16_to_f32(float *dst, const uint16_t *src, int64_t n)
{
#if defined(__x86_64__)
    if (g_f16c_avx512) {
        ops_f16_to_f32_avx512(dst, src, n);
        return;
    }
#endif
    for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32(src[i]);
}

/* ---- attention: portable instantiation (VW = 1) ---- */
#define VEC float
#define VW 1
#define VLOAD(p) (*(p))
#define VSTORE(p, v) (*(p) = (v))
#define VSET1(x) (x)
#define VZERO() 0.0f
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VMUL(a, b) ((a) * (b))
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMAX(a, b) ((a) > (b) ? (a) : (b))
#define VHMAX(v) (v)
#define VHSUM(v) (v)
#define VEXP(v) expf(v)
#define VLOADH(p) fp16_to_f32(*(p))
#define ATTN_RB 1
#define ATTN_FN attn_portable
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_FN
#define ATTN_KV_F32
#define ATTN_FN attn_portable_f32
#include "engine/kernels/ops_attn_impl.h"
#undef ATTN_KV_F32

static void attn_portable_fn(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch,
                             int c0, int c1, float *state)
{
    if (a->kv_f32)
        attn_portable_f32(a, kvh, q0, q1, scratch, c0, c1, state);
    else
        attn_portable(a, kvh, q0, q1, scratch, c0, c1, state);
}

/* Not inlined: the one copy of the merge arithmetic that every path (sequential chunks inside a
 * unit, ops_attn_merge after split chunks) runs, written per element with fmaf so the vector
 * width of the ISA cannot change it. A chunk the row sees nothing of (max -inf) adds nothing. */
__attribute__((noinline)) void ops_attn_state_merge(float *run, const float *chunk, int hd)
{
    if (chunk[0] == -INFINITY) return;
    float mn = chunk[0] > run[0] ? chunk[0] : run[0];
    float ea = expf(run[0] - mn), eb = expf(chunk[0] - mn); /* run[0] = -inf: ea = 0 */
    run[1] = fmaf(chunk[1], eb, run[1] * ea);
    for (int d = 0; d < hd; d++)
        run[2 + d] = fmaf(chunk[2 + d], eb, run[2 + d] * ea);
    run[0] = mn;
}

__attribute__((noinline)) void ops_attn_state_finish(const float *run, float *out, int hd)
{
    float inv = 1.0f / run[1];
    for (int d = 0; d < hd; d++)
        out[d] = run[2 + d] * inv;
}

static attn_fn pick(const struct ops_attn *a)
{
    return a->head_dim % g_attn_align == 0 ? g_attn : attn_portable_fn;
}

int ops_attn_chunks(const struct ops_attn *a, int q1)
{
    return a->pos[q1 - 1] / OPS_ATTN_KC + 1;
}

void ops_attn_run_ref(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch)
{
    attn_portable_fn(a, kvh, q0, q1, scratch, 0, ops_attn_chunks(a, q1), NULL);
}

void ops_attn_run(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch)
{
    pick(a)(a, kvh, q0, q1, scratch, 0, ops_attn_chunks(a, q1), NULL);
}

size_t ops_attn_state_floats(const struct ops_attn *a, int q0, int q1)
{
    return (size_t)(q1 - q0) * (size_t)(a->n_head / a->n_head_kv) * (size_t)(a->head_dim + 2);
}

void ops_attn_run_chunk(const struct ops_attn *a, int kvh, int q0, int q1, int chunk, float *state,
                        float *scratch)
{
    pick(a)(a, kvh, q0, q1, scratch, chunk, chunk + 1, state);
}

void ops_attn_merge(const struct ops_attn *a, int kvh, int q0, int q1, int n_chunks,
                    const float *states, size_t stride)
{
    const int hd = a->head_dim, group = a->n_head / a->n_head_kv, rows = (q1 - q0) * group;
    float run[OPS_ATTN_MAX_HEAD_DIM + 2];
    for (int r = 0; r < rows; r++) {
        run[0] = -INFINITY;
        run[1] = 0.0f;
        for (int d = 0; d < hd; d++)
            run[2 + d] = 0.0f;
        for (int c = 0; c < n_chunks; c++)
            ops_attn_state_merge(run, states + (size_t)c * stride + (size_t)r * (hd + 2), hd);
        int qi = r / group, g = r % group;
        ops_attn_state_finish(run, a->out + (int64_t)(q0 + qi) * a->out_stride + (int64_t)(kvh * group + g) * hd, hd);
    }
}

size_t ops_attn_scratch_floats(void)
{
    size_t rows = (size_t)OPS_ATTN_QB * OPS_ATTN_MAX_GROUP + 8 /* padding to a row block */, hd = OPS_ATTN_MAX_HEAD_DIM;
    size_t kt = OPS_ATTN_KT;
    return rows * hd * 2 + rows * kt + rows * 3 + 2 * rows * (hd + 2) + 16;
}
