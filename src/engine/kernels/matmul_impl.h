/* matmul_impl — between the matmul driver and its ISA-specific GEMM back-ends.
 *
 * GEMM data layouts (transient, in the caller's scratch):
 *   activation panel A8 for one activation set: q[t * cols + k] int8 (per-32-block symmetric
 *     quantization, d = amax/127), ad[t * nb + b] = d, as[t * nb + b] = d * sum(q of block b),
 *     ai[t * nb + b] = sum(q of block b) (int), as16[t * 2nb + 2b + h] = d * sum(q of half h),
 *     nb = cols / 32.
 *   weight panel for a tile of MM_TILE_ROWS rows: for 32-column block b and 4-column group g,
 *     panel[(b * 8 + g) * 64 + r * 4 + i] = u8 quant of row r, column 32b + 4g + i;
 *     pd[b * 16 + r], pm[b * 16 + r] such that W[r][32b + k] = pd * u8 - pm (exact for every
 *     supported type: q8_0 stores q + 128, nibble types their unsigned quant). Rows past the end
 *     of the matrix are zero (pd = pm = 0).
 *   Types with 16-element scales (q6_K, q3_K, q2_K: "sub16") keep 32 scales per block instead:
 *     pd[b * 32 + h * 16 + r] for half h of block b, and likewise pm.
 *
 * Weight slab layout (persistent: a model's matrices repacked once at load, mm_slab_repack).
 * Rows [16s, 16s + 16) ("slab" s, for every full slab) occupy the same 16 * row_size bytes as in
 * the file; rows past the last full slab stay row-major. Within a slab:
 *   q8_0: the packed kernel's operands, nb = cols / 32: first the fp16 scale d of row r, block b
 *     at uint16 [b * 16 + r] (nb * 32 bytes), then the weight panel above (u8 = q ^ 0x80 at
 *     [(b * 8 + g) * 64 + r * 4 + i], nb * 512 bytes): products read it in place, no pack;
 *   q4_K: per 256-column superblock i (at slab + i * 2304): the 16 rows' first four dwords
 *     (d | dmin, scales[0..3], [4..7], [8..11]) as four 64-byte vectors (row r at 4r), then per
 *     32-column sub-block j four 64-byte vectors k whose byte 4r + c holds the unsigned quants of
 *     row r, columns 4k + c (low nibble) and 4(k + 4) + c (high): the panel's groups, two a byte;
 *   q6_K: per superblock i (at slab + i * 3360): the 16 rows' fp16 d (32 bytes), their 16
 *     signed scales as four dword vectors (scales[4q .. 4q + 3] of row r at 32 + 64q + 4r), then
 *     per sub-block j (at 288 + 384j) four nibble vectors as q4_K's (the low 4 bits) and two
 *     vectors m = 0, 1 of the high 2 bits of groups m, m + 2, m + 4, m + 6 (bits 0, 2, 4, 6);
 *   q5_K: per superblock i (at slab + i * 2816): the head as q4_K's (256 bytes), then per
 *     sub-block j (at 256 + 320j) four nibble vectors as q4_K's and one vector of the 5th bits:
 *     byte 4r + c, bit g = the 5th bit of row r, column 4g + c (groups g = 0..7);
 * A slab is one or two sequential streams instead of 16 interleaved ones; the arithmetic on it
 * is the file layout's (same integers, same float steps), so results are bitwise the same. */
#ifndef LMS_ENGINE_MATMUL_IMPL_H
#define LMS_ENGINE_MATMUL_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "engine/kernels/quant.h"

#define MM_TILE_ROWS 16
#define MM_AMX_TMP_BYTES(cols) ((size_t)(cols) / 32 * 16 * 4 + 4 * 1024 + 64)

struct mm_gemm_impl {
    const char *name;
    int (*supported)(enum ggml_type wtype);
    /* one token: x[cols] -> q[cols], ad[cols/32], as[cols/32], ai[cols/32], as16[cols/16] */
    void (*act_quant)(const float *x, int64_t cols, int8_t *q, float *ad, float *as, int32_t *ai,
                      float *as16);
    int (*sub16)(enum ggml_type wtype); /* scales per 16 columns (see above) */
    /* rows [0, nrows) (nrows <= 16) of W -> panel (cols*16 bytes), pd/pm (cols/32*16 floats);
     * slab: W is a full 16-row slab in the slab layout (w_stride: the row size). Returns the
     * panel the kernel is to read: panel, or (q8_0 in the slab layout) the slab's own. */
    const uint8_t *(*pack)(enum ggml_type wtype, const void *W, size_t w_stride, int slab,
                           int64_t nrows, int64_t cols, uint8_t *panel, float *pd, float *pm);
    /* Y rows [r0, r0 + nrows) for tokens [0, n_tok) of the activation panel; token t's output
     * is Y + (y_idx ? y_idx[t] : t) * y_stride. */
    void (*kernel)(const uint8_t *panel, const float *pd, const float *pm, int64_t cols,
                   const int8_t *aq, const float *ad, const float *as, const float *as16, int sub16,
                   int64_t n_tok, float *Y, int64_t y_stride, const int32_t *y_idx, int64_t r0,
                   int nrows);
    /* GEMV on the same activation panel: rows [0, nrows) of W (row r at W + r * w_stride) for
     * tokens [0, n_tok); token t's output row is Y + (y_idx ? y_idx[t] : t) * y_stride, and row r
     * goes to index r0 + r. NULL gemv_supported: no GEMV kernels here. */
    int (*gemv_supported)(enum ggml_type wtype);
    void (*gemv)(enum ggml_type wtype, const void *W, size_t w_stride, int64_t nrows, int64_t cols,
                 const int8_t *aq, const float *ad, const int32_t *ai, int64_t n_tok, float *Y,
                 int64_t y_stride, const int32_t *y_idx, int64_t r0);
    /* Float-weight GEMM (f32/f16/bf16) on f32 activations read in place: rows [0, nrows) of W,
     * tokens [0, n_tok) (token t at X + (x_idx ? x_idx[t] : t) * x_stride), outputs as gemv. */
    int (*gemm_f_supported)(enum ggml_type wtype);
    /* AMX int8 GEMM (NULL when the CPU/OS has no AMX). Activations: per group of 16 tokens G and
     * 32-column block b, bp[(G * nb + b) * 512 + g * 64 + t * 4 + i] = q of token 16G + t,
     * column 32b + 4g + i (the tdpbssd B layout; missing tokens zero) and
     * dyp[(G * nb + b) * 16 + t] = its scale. amx_act builds one group from the A8 panel. The
     * kernel does rows [0, nrows <= 16) of W; tmp: MM_AMX_TMP_BYTES(cols) per thread. */
    int (*amx_supported)(enum ggml_type wtype);
    void (*amx_act)(const int8_t *aq, const float *ad, int64_t ntok, int64_t cols, uint8_t *bp,
                    float *dyp);
    void (*amx_kernel)(enum ggml_type wtype, const void *W, size_t w_stride, int64_t nrows,
                       int64_t cols, const uint8_t *bp, const float *dyp, int64_t n_tok, float *Y,
                       int64_t y_stride, const int32_t *y_idx, int64_t r0, void *tmp);
    /* m tokens (any m >= 1; m = 1 runs amx_gemv1, 16 rows as lanes) through amx_kernel's
     * arithmetic on AVX-512, each weight slab read once for up to 16 tokens, bit-identical to
     * amx_kernel: rows [0, nrows) of q8_0 W against tokens [0, n_tok) of the A8 panel, outputs
     * as gemv. NULL where amx_kernel is. */
    void (*amx_gemvm)(const void *W, size_t w_stride, int64_t nrows, int64_t cols,
                      const int8_t *aq, const float *ad, const int32_t *ai, int64_t n_tok, float *Y,
                      int64_t y_stride, const int32_t *y_idx, int64_t r0);
    /* amx_gemvm runs token groups of at least m on the tiles with the tokens as A (same bits) */
    void (*amx_set_tilem_min)(int m);
    /* pack: 1 (default) the vectorized K-quant packers, 0 the scalar per-row path (same panels;
     * tests compare them) */
    void (*set_pack_vec)(int on);
    void (*gemm_f)(enum ggml_type wtype, const void *W, size_t w_stride, int64_t nrows,
                   int64_t cols, const float *X, int64_t x_stride, const int32_t *x_idx,
                   int64_t n_tok, float *Y, int64_t y_stride, const int32_t *y_idx, int64_t r0);
    /* The packed path's products of few tokens with no panel (CPUs without AMX): rows
     * [0, nrows) of W against tokens [0, n_tok) of the A8 panel, outputs as gemv, each output
     * the bits of pack + kernel (m = 1: rows as lanes; m >= 2: the slab transposed in registers);
     * a last partial 16-row slab runs pack + kernel on panel (the thread's, as for PATH_GEMM).
     * NULL small_supported, or 0 for a type and token count: pack + kernel only. */
    int (*small_supported)(enum ggml_type wtype, int64_t n_tok);
    /* slab: W's full slabs are in the slab layout (rows [0, nrows) start a slab) */
    void (*small)(enum ggml_type wtype, const void *W, size_t w_stride, int slab, int64_t nrows,
                  int64_t cols, const int8_t *aq, const float *ad, const float *as,
                  const float *as16, int64_t n_tok, float *Y, int64_t y_stride,
                  const int32_t *y_idx, int64_t r0, uint8_t *panel);
    /* small's software prefetch distance in 16-row slabs (0: none; mm_calibrate sets it), for
     * matrices in the file's layout (slab_layout 0) or the slab layout (1) */
    void (*set_pf_slabs)(int slab_layout, int slabs);
};

/* The AVX-512 direct small-m kernels' prefetch distance (16-row slabs) before mm_calibrate(). */
#define MM_PF_SLABS_DEFAULT 1
/* The AVX2 tiles' software prefetch distance (bytes) before mm_calibrate() measured one. */
#define MM2_PF_DEFAULT 4096

/* AVX2 back-end (CPUs without AVX-512): register tiles of rows x tokens on activations quantized
 * to the weight type's vec_dot_type (rows of x_row_bytes, token t at X + t * x_row_bytes), for any
 * token count; per (row, token) the arithmetic is one fixed sequence (matmul_avx2.c). Rows
 * [0, nrows) of W; outputs as gemv above. */
struct mm_tile_impl {
    const char *name;
    int (*supported)(enum ggml_type wtype);
    void (*run)(enum ggml_type wtype, const void *W, size_t w_stride, int64_t nrows, int64_t cols,
                const uint8_t *X, size_t x_row_bytes, int64_t n_tok, float *Y, int64_t y_stride,
                const int32_t *y_idx, int64_t r0, void *tmp);
    /* bytes of per-thread scratch (64-aligned) run needs as tmp for this type and shape (0: none;
     * the small-m kernels pack their tokens' activations there) */
    size_t (*tmp_bytes)(enum ggml_type wtype, int64_t cols, int64_t n_tok);
    /* software prefetch distance of the weight stream in bytes (0: none); set by mm_calibrate */
    void (*set_prefetch)(int bytes);
};

#if defined(__x86_64__)
const struct mm_gemm_impl *mm_gemm_avx512(void);
const struct mm_tile_impl *mm_tile_avx2(void);
#endif

#if defined(__x86_64__)
/* The low-bit types' tile kernel (matmul_ternary_avx2.c), run by the AVX2 tile back-end for any
 * token count: arguments as mm_tile_impl.run (no scratch); every output is the bits of the
 * type's reference vec_dot on that row and token. */
int mm_ternary_tile_supported(enum ggml_type t);
void mm_ternary_tile_run(enum ggml_type t, const void *W, size_t w_stride, int64_t nrows,
                         int64_t cols, const uint8_t *X, size_t x_row_bytes, int64_t n_tok,
                         float *Y, int64_t y_stride, const int32_t *y_idx, int64_t r0);
#endif

#endif
