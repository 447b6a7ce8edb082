/* matmul — the engine's GEMV/GEMM driver: Y[t][r] = dot(W[r], X[t]) for quantized W.
 *
 * W is used in place: a pointer into the mapped model file, or (the default where
 * mm_slab_supported) the model's copy repacked once at load into the slab layout, in which each
 * 16-row slab is one sequential stream (matmul_impl.h; docs/kernels.md "The slab layout").
 * One call (mm_run_ops) runs any number of independent products in a single fork-join: Q/K/V of
 * a layer, gate+up, or the active experts of an MoE layer. Inside a call:
 *   1. every distinct activation set X is quantized once to what its kernels eat: the weight
 *      type's vec_dot_type (generic path), or the "A8" int8 panel with an f32 scale per 32
 *      (VNNI/AMX paths); float weights on AVX-512 read X as is;
 *   2. row tiles are handed to threads dynamically (tp_run_dynamic). Decode (< 4 tokens): each
 *      row is dotted against each token, q8_0 with a 4-row VNNI kernel (memory bound: the weights
 *      stream once). Prefill: q8_0 on AMX (tiles loaded straight from the rows); other quantized
 *      types through a transient 16-row u8 panel per thread (per call, not at load) and a
 *      16 rows x 8 tokens vpdpbusd micro-kernel; f32/f16/bf16 with 4 x 6 FMA tiles. Each weight
 *      byte is read from memory once per call and reused for every token.
 * Paths and figures: docs/kernels.md. X and Y must not overlap.
 * Threading: one caller at a time per scratch; the pool may be NULL (single thread). */
#ifndef LMS_ENGINE_MATMUL_H
#define LMS_ENGINE_MATMUL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/threadpool.h"

/* One product. Token t of X is X + (x_idx ? x_idx[t] : t) * x_stride (floats); its result goes
 * to Y + (y_idx ? y_idx[t] : t) * y_stride, elements [0, rows). x_idx/y_idx let an MoE layer
 * gather the tokens routed to an expert and scatter the results without copies. */
struct mm_op {
    enum ggml_type wtype;
    const void *W;      /* rows x cols; row r at (const char *)W + r * w_stride */
    int64_t rows, cols; /* cols: a multiple of the type's block size */
    size_t w_stride;    /* bytes between rows; 0 = quant_row_size(wtype, cols) */
    const float *X;
    int64_t x_stride; /* 0 = cols */
    const int32_t *x_idx;
    int64_t n_tok;
    float *Y;
    int64_t y_stride; /* 0 = rows */
    const int32_t *y_idx;
    int slab;         /* W's full 16-row slabs are in the slab layout (mm_slab_repack; w_stride
                       * must then be the row size) */
};

/* Whether matrices of this type can be repacked into the slab layout on this CPU (the AVX-512
 * VNNI path without AMX: q8_0, q4_K, q5_K, q6_K). Products on a repacked matrix give the bits
 * of the same product on the file's layout. */
int mm_slab_supported(enum ggml_type wtype);
/* The rows x cols matrix src (row-major, rows of quant_row_size bytes) into dst (the same number
 * of bytes, not overlapping src) in the slab layout (matmul_impl.h): every full 16-row slab
 * rearranged, the rows past the last one copied as they are. */
void mm_slab_repack(enum ggml_type wtype, const void *src, int64_t rows, int64_t cols, void *dst);
/* Type block i (blck_size columns) of row r of a matrix in the slab layout, as the file's bytes
 * (type_size of them) into out. */
void mm_slab_block(enum ggml_type wtype, const void *W, int64_t rows, int64_t cols, int64_t r,
                   int64_t i, void *out);

struct mm_scratch; /* per-caller buffers (quantized activations, per-thread panels); grows */

struct mm_scratch *mm_scratch_new(void); /* NULL on out of memory */
void mm_scratch_free(struct mm_scratch *s);

/* Runs n_ops products. Returns 0, or -1 with e filled (bad type/shape: ERR_INVALID,
 * allocation: ERR_NOMEM). Distinct ops must not write overlapping parts of Y. */
int mm_run_ops(struct threadpool *tp, const struct mm_op *ops, int n_ops, struct mm_scratch *s,
               struct err *e);

/* Convenience: one product with contiguous X (n_tok x cols) and Y (n_tok x rows). */
int mm_run(struct threadpool *tp, enum ggml_type wtype, const void *W, int64_t rows, int64_t cols,
           size_t row_stride, const float *X, int64_t n_tok, float *Y, struct mm_scratch *s,
           struct err *e);

/* Tuning / testing knobs: the GEMM (packed panel) path is used when an op has at least this many
 * tokens and the CPU and weight type support it. mm_set_gemm_min_tokens(0) restores the default;
 * a huge value forces the GEMV path everywhere. Not thread-safe; for tests and benchmarks. */
void mm_set_gemm_min_tokens(int64_t n);
/* Enables (default) or disables the AMX int8 GEMM where the CPU has it (tests, benchmarks). */
void mm_set_amx(int on);
/* m = 1 products on the AMX path run amx_gemv1 (the same bits without the tile unit) unless
 * turned off (tests compare the two). */
void mm_set_amx_gemv1(int on);
/* Products of 2..m tokens on the AMX path run amx_gemvm (AVX-512, each weight read once for up to
 * 16 tokens, the same bits as the tiles) instead of the tiles; 0: always the tiles; negative:
 * the default (MM_AMX_SMALL_MAX_DEFAULT, chosen by measurement, docs/kernels.md). */
#define MM_AMX_SMALL_MAX_DEFAULT 64
void mm_set_amx_small_max(int64_t m);
/* Inside amx_gemvm, token groups (<= 16 tokens per weight slab) of at least m tokens compute their
 * integer dots on the tiles (tokens as A, the slab's block transposed as B) and smaller ones with
 * vpdpbusd; the same bits either way. Negative: the default. */
#define MM_AMX_SMALL_TILES_DEFAULT 6
void mm_set_amx_small_tiles(int m);
/* Packed-path (VNNI, no AMX) products of 1..m tokens of a type with a direct kernel (q8_0 up to
 * 64 tokens; q4_K, q5_K, q6_K up to 8) run it (no weight panel; the same bits as pack + kernel);
 * 0: always pack + kernel; negative: the default (MM_VNNI_SMALL_MAX_DEFAULT, chosen by
 * measurement, docs/kernels.md). */
#define MM_VNNI_SMALL_MAX_DEFAULT 32
void mm_set_vnni_small_max(int64_t m);
/* AVX-512 packed GEMM: 1 (default) packs K-quant weight tiles with the vectorized scale decoders,
 * 0 with the scalar per-row path; the panels (and so every result) are the same (tests). */
void mm_set_pack_vec(int on);
/* Enables (default) or disables the AVX2 register-tile kernels on CPUs without AVX-512 (off: one
 * vec_dot per row and token, for tests and benchmarks). */
void mm_set_tiles(int on);
/* Startup calibration (cached per process, thread-safe): measures, on a decode-shaped q8_0
 * product larger than the last-level cache, the settings that only move data and never change a
 * result — the AVX2 tiles' software prefetch distance (AVX-512: the direct small-m kernels' distance
 * in 16-row slabs) and the rows per decode work item — and
 * installs the fastest. The first call takes one sweep (33 passes over 37.9 MB: tens of ms quiet, a few
 * hundred on a loaded machine);
 * later calls return the cached result. Results are bitwise the same for any setting. */
struct mm_calib {
    int done;
    int prefetch;  /* bytes chosen; -1: not applicable on this CPU (no AVX2 tile path) */
    int item_rows; /* rows per decode work item chosen */
    int pf_slabs;  /* AVX-512 direct kernels' prefetch distance in slabs; -1: not on this CPU */
    int pf_slabs_slab; /* the same for matrices in the slab layout; -1: no slab path here */
    double gbs;    /* the chosen setting's weight bytes per process CPU second (GB/s) */
    double ms;     /* wall time the calibration took */
    char sweep[512]; /* every candidate's GB per CPU second, for the log */
};
const struct mm_calib *mm_calibrate(struct threadpool *tp);
/* The cached calibration, or NULL when none has run in this process (reports). */
const struct mm_calib *mm_calib_result(void);
/* Sets the two knobs by hand (tests, sweeps): prefetch bytes (ignored without the AVX2 tiles; < 0
 * keeps the current value) and rows per decode work item (16..4096, a multiple of 16; <= 0 keeps). */
void mm_set_stream_tuning(int prefetch_bytes, int item_rows);
/* The AVX-512 direct small-m kernels' prefetch distance in 16-row slabs (0: none; tests, sweeps;
 * ignored elsewhere), for both layouts. */
void mm_set_pf_slabs(int slabs);

/* Weight bytes the products of this process have read so far (per op: rows x the row size; an
 * MoE layer's ops name only the routed experts' slices), for benchmarks: bytes read per token. */
uint64_t mm_weight_bytes(void);
/* Multiply-adds the products of this process have done so far (per op: rows x cols x tokens), for
 * benchmarks: a prefill's arithmetic against the CPU's peak (lmserve-kbench --peak). */
uint64_t mm_macs(void);

/* Name of the kernel many-token products of this type run on ("amx", "vnni", "avx512-fma",
 * "avx2-tile", "vec_dot"), for reports. */
const char *mm_gemm_name(enum ggml_type wtype);
/* Whether the packed GEMM path exists for this weight type on this CPU. */
int mm_gemm_supported(enum ggml_type wtype);
/* What an op of this type and shape does to its activations, so tests can compute the exact
 * expected value: quantize to the weight type's vec_dot_type; to the int8 panel with per-32 f32
 * scales (d = amax/127, round to nearest even); or use them as f32 (float weights, GEMM). */
enum mm_act_kind { MM_ACT_VEC_DOT, MM_ACT_A8, MM_ACT_F32 };
enum mm_act_kind mm_act_kind(enum ggml_type wtype, int64_t n_tok, int64_t cols);

#endif
