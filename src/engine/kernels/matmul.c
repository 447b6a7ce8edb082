/* matmul — driver: validation, activation quantization (shared between ops with the same X),
 * tiling and dynamic distribution of row tiles over the pool, in one fork-join per call. */
#include "engine/kernels/matmul.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/cpu.h"
#include "engine/kernels/matmul_impl.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif
#include <sched.h>

#define MM_MAX_OPS 256 /* ops per call (an MoE layer: at most n_expert) */
/* Batch invariance (docs/kernels.md): the path, and so the arithmetic, of a product must not
 * depend on how many tokens share the call, so by default every token count takes the same path
 * (the GEMM kernels where the type has them, m = 1 included). mm_set_gemm_min_tokens(4) brings
 * back the separate decode GEMV (tests and benchmarks only: it rounds differently). */
#define MM_GEMM_MIN_TOK_DEFAULT 1
/* Rows per GEMV work item (decode): up to 128, so each thread streams long contiguous runs of
 * weights and its software prefetch (16 KB ahead) stays inside its own run — measured +30 % decode
 * over 16-row items on 2 threads (bench/README.md); fewer rows when that leaves under four items
 * per thread. */
#ifndef MM_GEMV_TILE_ROWS
#define MM_GEMV_TILE_ROWS 128
#endif

/* the cap in use: MM_GEMV_TILE_ROWS until mm_calibrate() measured a better one */
static int64_t g_gemv_rows = MM_GEMV_TILE_ROWS;

static int64_t gemv_tile_rows(int64_t rows, int nth)
{
    int64_t t = rows / (4 * (int64_t)nth), cap = __atomic_load_n(&g_gemv_rows, __ATOMIC_RELAXED);
    t = t / 16 * 16;
    if (t > cap) t = cap;
    return t < 16 ? 16 : t;
}
#define MM_MAX_THREADS 512
#define MM_GEMM_BIG_TOK 4 /* from here on AMX-tile work items are single 16-row tiles */
/* the packed VNNI GEMM keeps long row runs up to here: its packer prefetches the next 16-row tile,
 * which is the same thread's only inside a run */
#define MM_PACKED_BIG_TOK 256
#define MM_PAR_QUANT_MIN (64 * 1024) /* activation elements worth a parallel quantization */

static int64_t g_gemm_min_tok = MM_GEMM_MIN_TOK_DEFAULT;
static _Atomic uint64_t g_wbytes; /* mm_weight_bytes() */
static _Atomic uint64_t g_macs;   /* mm_macs() */

uint64_t mm_macs(void)
{
    return atomic_load_explicit(&g_macs, memory_order_relaxed);
}

uint64_t mm_weight_bytes(void)
{
    return atomic_load_explicit(&g_wbytes, memory_order_relaxed);
}

void mm_set_gemm_min_tokens(int64_t n)
{
    g_gemm_min_tok = n > 0 ? n : MM_GEMM_MIN_TOK_DEFAULT;
}

static const struct mm_gemm_impl *g_impl;
static const struct mm_tile_impl *g_tile; /* AVX2 tiles, only where there is no g_impl */
static int g_tile_enabled = 1;
static pthread_once_t g_impl_once = PTHREAD_ONCE_INIT;

static void probe(void)
{
#if defined(__x86_64__)
    const struct cpu_features *c = cpu_features();
    if (cpu_has_avx512_vnni() && c->f16c)
        g_impl = mm_gemm_avx512();
    else if (cpu_has_avx2_fma() && c->f16c)
        g_tile = mm_tile_avx2();
#endif
}

void mm_set_tiles(int on)
{
    g_tile_enabled = on;
}

static const struct mm_gemm_impl *gemm_impl(void)
{
    pthread_once(&g_impl_once, probe);
    return g_impl;
}

int mm_gemm_supported(enum ggml_type wtype)
{
    const struct mm_gemm_impl *g = gemm_impl();
    return g && (g->supported(wtype) || (g->gemm_f_supported && g->gemm_f_supported(wtype)));
}

enum mm_path { PATH_DOT, PATH_GEMV_A8, PATH_GEMM, PATH_GEMM_F, PATH_GEMM_AMX, PATH_TILE };

/* ------------------------------------------------------------ slab layout (matmul_impl.h) */

/* The packed path's direct kernels and packer read the slab layout; where the CPU runs a type on
 * AMX tiles (q8_0 on AMX CPUs) the tiles read the file's rows, so that type is not repacked. */
int mm_slab_supported(enum ggml_type wtype)
{
    const struct mm_gemm_impl *g = gemm_impl();
    return g && g->small_supported && g->small_supported(wtype, 1) &&
           !(g->amx_supported && g->amx_supported(wtype));
}

/* q6_K's unsigned 6-bit quant of element e (0..255) of a block (quant.c's order) */
static int q6k_u(const uint8_t *blk, int e)
{
    const int j = e / 32, h = j / 4, k = j % 4, l = e % 32;
    const uint8_t *ql = blk, *qh = blk + 128;
    return ((ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15) | ((qh[32 * h + l] >> (2 * k)) & 3) << 4;
}

/* The 6-bit quant of row r, element e of a q6_K superblock sb in the slab layout */
static int q6p_u(const uint8_t *sb, int r, int e)
{
    const int j = e / 32, g = (e % 32) / 4, c = e % 4;
    const uint8_t *q = sb + 288 + 384 * j;
    const uint8_t v = q[64 * (g % 4) + 4 * r + c], h = q[256 + 64 * (g % 2) + 4 * r + c];
    return (g < 4 ? v & 15 : v >> 4) | ((h >> (2 * (g / 2))) & 3) << 4;
}

void mm_slab_repack(enum ggml_type wtype, const void *src, int64_t rows, int64_t cols, void *dst)
{
    const struct quant_traits *tr = quant_traits(wtype);
    const size_t bsz = tr->type_size, rs = quant_row_size(wtype, cols);
    const int64_t nbk = cols / tr->blck_size, full = rows / 16 * 16;
    const uint8_t *s = src;
    uint8_t *d = dst;
    /* q8_0's panel is what the packer writes (vectorized); its f32 scales are not kept */
    const struct mm_gemm_impl *g = wtype == GGML_TYPE_Q8_0 ? gemm_impl() : NULL;
    float *pdm = g && g->pack ? malloc(sizeof(float) * 32 * (size_t)nbk) : NULL;
    for (int64_t s0 = 0; s0 < full; s0 += 16) {
        const uint8_t *in = s + (size_t)s0 * rs;
        uint8_t *out = d + (size_t)s0 * rs;
        if (wtype == GGML_TYPE_Q8_0) { /* scales, then the panel (matmul_impl.h) */
            uint8_t *pnl = out + (size_t)nbk * 32;
            for (int64_t b = 0; b < nbk; b++)
                for (int r = 0; r < 16; r++) {
                    const uint8_t *blk = in + (size_t)r * rs + (size_t)b * bsz;
                    memcpy(out + ((size_t)b * 16 + (size_t)r) * 2, blk, 2);
                    if (!pdm)
                        for (int c = 0; c < 32; c++)
                            pnl[(size_t)b * 512 + (size_t)(c / 4) * 64 + (size_t)r * 4 + (size_t)(c % 4)] =
                                (uint8_t)(blk[2 + c] ^ 0x80);
                }
            if (pdm) g->pack(wtype, in, rs, 0, 16, cols, pnl, pdm, pdm + 16 * nbk);
            continue;
        }
        if (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K) {
            /* per superblock: heads as lanes, nibble panel (q5_K: and the 5th bits) */
            const int q5 = wtype == GGML_TYPE_Q5_K;
            const size_t qs_at = q5 ? 48 : 16, step = q5 ? 320 : 256;
            for (int64_t i = 0; i < nbk; i++) {
                uint8_t *sb = out + (size_t)i * 16 * bsz;
                if (q5) memset(sb, 0, 16 * bsz);
                for (int r = 0; r < 16; r++) {
                    const uint8_t *blk = in + (size_t)r * rs + (size_t)i * bsz;
                    for (int h = 0; h < 4; h++)
                        memcpy(sb + 64 * h + 4 * r, blk + 4 * h, 4);
                    for (int j = 0; j < 8; j++)
                        for (int k = 0; k < 4; k++)
                            for (int ii = 0; ii < 4; ii++) {
                                const uint8_t *qs = blk + qs_at + 32 * (j / 2);
                                int lo = (qs[4 * k + ii] >> (4 * (j % 2))) & 15,
                                    hi = (qs[4 * (k + 4) + ii] >> (4 * (j % 2))) & 15;
                                sb[256 + step * j + 64 * k + 4 * r + ii] = (uint8_t)(lo | hi << 4);
                            }
                    if (q5) /* sub-block j, group g, column c: bit j of qh[4g + c] */
                        for (int j = 0; j < 8; j++)
                            for (int e = 0; e < 32; e++)
                                sb[256 + step * j + 256 + 4 * r + e % 4] |=
                                    (uint8_t)(((blk[16 + e] >> j) & 1) << (e / 4));
                }
            }
            continue;
        }
        if (wtype == GGML_TYPE_Q6_K) { /* per superblock: d, scales as lanes, 6-bit panel */
            for (int64_t i = 0; i < nbk; i++) {
                uint8_t *sb = out + (size_t)i * 16 * bsz;
                memset(sb, 0, 16 * bsz);
                for (int r = 0; r < 16; r++) {
                    const uint8_t *blk = in + (size_t)r * rs + (size_t)i * bsz;
                    memcpy(sb + 2 * r, blk + 208, 2);
                    for (int q = 0; q < 4; q++)
                        memcpy(sb + 32 + 64 * q + 4 * r, blk + 192 + 4 * q, 4);
                    for (int e = 0; e < 256; e++) {
                        const int j = e / 32, g = (e % 32) / 4, c = e % 4, u = q6k_u(blk, e);
                        uint8_t *q = sb + 288 + 384 * j;
                        q[64 * (g % 4) + 4 * r + c] |= (uint8_t)((u & 15) << (g < 4 ? 0 : 4));
                        q[256 + 64 * (g % 2) + 4 * r + c] |= (uint8_t)((u >> 4) << (2 * (g / 2)));
                    }
                }
            }
            continue;
        }
        for (int64_t i = 0; i < nbk; i++)
            for (int r = 0; r < 16; r++)
                memcpy(out + ((size_t)i * 16 + (size_t)r) * bsz, in + (size_t)r * rs + (size_t)i * bsz, bsz);
    }
    memcpy(d + (size_t)full * rs, s + (size_t)full * rs, (size_t)(rows - full) * rs);
    free(pdm);
}

void mm_slab_block(enum ggml_type wtype, const void *W, int64_t rows, int64_t cols, int64_t r,
                   int64_t i, void *out)
{
    const size_t bsz = quant_traits(wtype)->type_size, rs = quant_row_size(wtype, cols);
    const uint8_t *w = W, *slab = w + (size_t)(r / 16) * 16 * rs;
    if (r >= rows / 16 * 16) {
        memcpy(out, w + (size_t)r * rs + (size_t)i * bsz, bsz);
    } else if (wtype == GGML_TYPE_Q8_0) {
        uint8_t *o = out;
        const uint8_t *pnl = slab + (size_t)(cols / 32) * 32;
        memcpy(o, slab + ((size_t)i * 16 + (size_t)(r % 16)) * 2, 2);
        for (int c = 0; c < 32; c++)
            o[2 + c] = (uint8_t)(pnl[(size_t)i * 512 + (size_t)(c / 4) * 64 + (size_t)(r % 16) * 4 + (size_t)(c % 4)] ^ 0x80);
    } else if (wtype == GGML_TYPE_Q4_K || wtype == GGML_TYPE_Q5_K) {
        uint8_t *o = out;
        const uint8_t *sb = slab + (size_t)i * 16 * bsz;
        const int rr = (int)(r % 16), q5 = wtype == GGML_TYPE_Q5_K;
        const size_t qs_at = q5 ? 48 : 16, step = q5 ? 320 : 256;
        for (int h = 0; h < 4; h++)
            memcpy(o + 4 * h, sb + 64 * h + 4 * rr, 4);
        if (q5) {
            memset(o + 16, 0, 32);
            for (int j = 0; j < 8; j++)
                for (int e = 0; e < 32; e++)
                    o[16 + e] |= (uint8_t)(((sb[256 + step * j + 256 + 4 * rr + e % 4] >> (e / 4)) & 1) << j);
        }
        for (int j = 0; j < 8; j++)
            for (int k = 0; k < 4; k++)
                for (int ii = 0; ii < 4; ii++) {
                    uint8_t v = sb[256 + step * j + 64 * k + 4 * rr + ii];
                    uint8_t *qs = o + qs_at + 32 * (j / 2);
                    if (j % 2 == 0) qs[4 * k + ii] = v & 15, qs[4 * (k + 4) + ii] = v >> 4;
                    else qs[4 * k + ii] |= (uint8_t)((v & 15) << 4), qs[4 * (k + 4) + ii] |= (uint8_t)(v & 0xf0);
                }
    } else if (wtype == GGML_TYPE_Q6_K) {
        uint8_t *o = out;
        const uint8_t *sb = slab + (size_t)i * 16 * bsz;
        const int rr = (int)(r % 16);
        memset(o, 0, 192);
        memcpy(o + 208, sb + 2 * rr, 2);
        for (int q = 0; q < 4; q++)
            memcpy(o + 192 + 4 * q, sb + 32 + 64 * q + 4 * rr, 4);
        for (int e = 0; e < 256; e++) {
            const int j = e / 32, h = j / 4, k = j % 4, l = e % 32, u = q6p_u(sb, rr, e);
            o[64 * h + 32 * (k % 2) + l] |= (uint8_t)((u & 15) << (4 * (k / 2)));
            o[128 + 32 * h + l] |= (uint8_t)((u >> 4) << (2 * k));
        }
    } else {
        memcpy(out, slab + ((size_t)i * 16 + (size_t)(r % 16)) * bsz, bsz);
    }
}

static int g_amx_enabled = 1;
void mm_set_amx(int on)
{
    g_amx_enabled = on;
}
static int g_amx_gemv1 = 1;
void mm_set_amx_gemv1(int on)
{
    g_amx_gemv1 = on;
}
static int64_t g_amx_small_max = MM_AMX_SMALL_MAX_DEFAULT;
void mm_set_amx_small_max(int64_t m)
{
    g_amx_small_max = m < 0 ? MM_AMX_SMALL_MAX_DEFAULT : m;
}
static int64_t g_vnni_small_max = MM_VNNI_SMALL_MAX_DEFAULT;
void mm_set_vnni_small_max(int64_t m)
{
    g_vnni_small_max = m < 0 ? MM_VNNI_SMALL_MAX_DEFAULT : m;
}
/* A packed-path op of n_tok tokens runs the direct kernel (no panel, the same bits). */
static int vnni_small(const struct mm_gemm_impl *g, enum ggml_type wtype, int64_t n_tok)
{
    return g->small_supported && g->small_supported(wtype, n_tok) && n_tok <= g_vnni_small_max;
}
void mm_set_pack_vec(int on)
{
    const struct mm_gemm_impl *g = gemm_impl();
    if (g && g->set_pack_vec) g->set_pack_vec(on);
}
void mm_set_amx_small_tiles(int m)
{
    const struct mm_gemm_impl *g = gemm_impl();
    if (g && g->amx_set_tilem_min) g->amx_set_tilem_min(m < 0 ? MM_AMX_SMALL_TILES_DEFAULT : m);
}
/* An AMX-path op of n_tok tokens runs on AVX-512 (amx_gemv1 / amx_gemvm, the same bits) instead
 * of the tiles. */
static int amx_small(const struct mm_gemm_impl *g, int64_t n_tok)
{
    if (!g->amx_gemvm) return 0;
    return n_tok == 1 ? g_amx_gemv1 : n_tok <= g_amx_small_max;
}

static enum mm_path choose_path(const struct mm_gemm_impl *g, enum ggml_type wtype, int64_t n_tok,
                                int64_t cols)
{
    if (!g) {
        pthread_once(&g_impl_once, probe);
        return g_tile && g_tile_enabled && g_tile->supported(wtype) ? PATH_TILE : PATH_DOT;
    }
    if (n_tok >= g_gemm_min_tok && g->gemm_f_supported && g->gemm_f_supported(wtype))
        return PATH_GEMM_F;
    if (cols % 32) return PATH_DOT;
    if (n_tok >= g_gemm_min_tok && g_amx_enabled && g->amx_supported && g->amx_supported(wtype))
        return PATH_GEMM_AMX;
    if (n_tok >= g_gemm_min_tok && g->supported(wtype)) return PATH_GEMM;
    if (g->gemv_supported && g->gemv_supported(wtype)) return PATH_GEMV_A8;
    return PATH_DOT;
}

const char *mm_gemm_name(enum ggml_type wtype)
{
    switch (choose_path(gemm_impl(), wtype, INT64_MAX / 2, 256)) {
    case PATH_GEMM_AMX:
        return "amx";
    case PATH_GEMM:
        return "vnni";
    case PATH_GEMM_F:
        return "avx512-fma";
    case PATH_TILE:
        return "avx2-tile";
    default:
        return "vec_dot";
    }
}

enum mm_act_kind mm_act_kind(enum ggml_type wtype, int64_t n_tok, int64_t cols)
{
    switch (choose_path(gemm_impl(), wtype, n_tok, cols)) {
    case PATH_GEMM_F:
        return MM_ACT_F32;
    case PATH_GEMM:
    case PATH_GEMM_AMX:
    case PATH_GEMV_A8:
        return MM_ACT_A8;
    default:
        return MM_ACT_VEC_DOT;
    }
}

/* ------------------------------------------------------------ scratch */

struct mm_job;

struct mm_scratch {
    struct mm_job *job; /* the plan of the current call (kept: it is ~40 KB) */
    uint8_t *act;       /* quantized activations of all sets */
    size_t act_cap;
    uint8_t **panel; /* per thread: weight panel + pd + pm */
    size_t panel_cap;
    int n_panel;
};

struct mm_scratch *mm_scratch_new(void)
{
    return calloc(1, sizeof(struct mm_scratch));
}

void mm_scratch_free(struct mm_scratch *s)
{
    if (!s) return;
    free(s->job);
    free(s->act);
    for (int i = 0; i < s->n_panel; i++)
        free(s->panel[i]);
    free(s->panel);
    free(s);
}

static int grow(uint8_t **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t n = need + need / 4 + 4096;
    n = (n + 63) / 64 * 64;
    uint8_t *q = aligned_alloc(64, n);
    if (!q) return -1;
    free(*p);
    *p = q;
    *cap = n;
    return 0;
}

static int ensure_panels(struct mm_scratch *s, int nth, size_t need)
{
    if (nth > s->n_panel) {
        uint8_t **p = realloc(s->panel, (size_t)nth * sizeof *p);
        if (!p) return -1;
        for (int i = s->n_panel; i < nth; i++)
            p[i] = NULL;
        s->panel = p;
        /* new panels get allocated below at the current capacity */
        for (int i = s->n_panel; i < nth; i++)
            if (s->panel_cap && !(p[i] = aligned_alloc(64, s->panel_cap))) return -1;
        s->n_panel = nth;
    }
    if (need > s->panel_cap) {
        size_t n = (need + 4095) / 4096 * 4096;
        for (int i = 0; i < s->n_panel; i++) {
            free(s->panel[i]);
            s->panel[i] = aligned_alloc(64, n);
            if (!s->panel[i]) {
                s->panel_cap = 0;
                return -1;
            }
        }
        s->panel_cap = n;
    }
    return 0;
}

/* ------------------------------------------------------------ plan */

struct mm_act {
    const float *X;
    int64_t x_stride, n_tok, cols;
    const int32_t *x_idx;
    int a8; /* 1: A8 panel, 0: rows of vdt */
    enum ggml_type vdt;
    size_t row_bytes;      /* GEMV: bytes of one quantized token row */
    uint8_t *q;            /* GEMV rows or A8 q */
    float *ad, *as, *as16; /* A8 only */
    int32_t *ai;
    int amx; /* also the AMX B panel (bp, dyp) */
    uint8_t *bp;
    float *dyp;
    int64_t unit_begin; /* prefix of 16-token groups over sets */
    int64_t tok_begin;  /* prefix over sets, for splitting the quantization work */
};

struct mm_plan_op {
    const struct mm_op *op;
    int act; /* -1: none (float GEMM reads X in place) */
    int64_t x_stride;
    enum mm_path path;
    size_t w_stride;
    /* tiles [0, n_big) have tile_rows rows, the rest tail_rows (the tail of the call's last
     * decode op, see tail_split) */
    int64_t tile_rows, n_tiles, tile_begin, n_big, tail_rows;
    quant_vec_dot_fn dot;
};

struct mm_job {
    struct mm_plan_op pops[MM_MAX_OPS];
    struct mm_act acts[MM_MAX_OPS];
    int n_ops, n_acts;
    int64_t total_tok, total_tiles, total_units;
    const struct mm_gemm_impl *g;
    struct mm_scratch *s;
    _Atomic int64_t next_tile;
    _Atomic int64_t next_unit, units_done;
    int par_quant;
};

/* Quantizes unit u (a group of 16 tokens of one activation set; the AMX B panel is per group). */
static void quantize_unit(struct mm_job *j, int64_t unit)
{
    int a = 0;
    while (unit >= j->acts[a].unit_begin + (j->acts[a].n_tok + 15) / 16)
        a++;
    struct mm_act *A = &j->acts[a];
    int64_t u = unit - A->unit_begin;
    const int64_t nb = A->cols / 32;
    int64_t t1 = 16 * u + 16 < A->n_tok ? 16 * u + 16 : A->n_tok;
    for (int64_t t = 16 * u; t < t1; t++) {
        const float *x = A->X + (A->x_idx ? A->x_idx[t] : t) * A->x_stride;
        if (A->a8)
            j->g->act_quant(x, A->cols, (int8_t *)A->q + t * A->cols, A->ad + t * nb,
                            A->as + t * nb, A->ai + t * nb, A->as16 + t * 2 * nb);
        else
            quant_traits(A->vdt)->from_float(x, A->q + (size_t)t * A->row_bytes, A->cols);
    }
    if (A->amx)
        j->g->amx_act((const int8_t *)A->q + 16 * u * A->cols, A->ad + 16 * u * nb, t1 - 16 * u,
                      A->cols, A->bp + u * nb * 512, A->dyp + u * nb * 16);
}

static void run_tile(struct mm_job *j, int ith, struct mm_plan_op *p, int64_t tile)
{
    const struct mm_op *op = p->op;
    const struct mm_act *A = p->act >= 0 ? &j->acts[p->act] : NULL;
    int64_t r0, r1;
    if (tile < p->n_big) {
        r0 = tile * p->tile_rows;
        r1 = r0 + p->tile_rows;
    } else {
        r0 = p->n_big * p->tile_rows + (tile - p->n_big) * p->tail_rows;
        r1 = r0 + p->tail_rows;
    }
    if (r1 > op->rows) r1 = op->rows;
    int64_t ys = op->y_stride ? op->y_stride : op->rows;
    const uint8_t *W = (const uint8_t *)op->W + (size_t)r0 * p->w_stride;
    if (p->path == PATH_GEMM_F) {
        j->g->gemm_f(op->wtype, W, p->w_stride, r1 - r0, op->cols, op->X, p->x_stride, op->x_idx,
                     op->n_tok, op->Y, ys, op->y_idx, r0);
        return;
    }
    if (p->path == PATH_GEMM_AMX) {
        if (!A->amx) { /* few tokens: same bits, no tiles (see plan; m = 1 is amx_gemv1) */
            j->g->amx_gemvm(W, p->w_stride, r1 - r0, op->cols, (const int8_t *)A->q, A->ad, A->ai,
                            op->n_tok, op->Y, ys, op->y_idx, r0);
            return;
        }
        /* a decode item spans several 16-row kernel tiles (see plan: long runs per thread) */
        for (int64_t s0 = r0; s0 < r1; s0 += MM_TILE_ROWS) {
            int64_t s1 = s0 + MM_TILE_ROWS < r1 ? s0 + MM_TILE_ROWS : r1;
            j->g->amx_kernel(op->wtype, (const uint8_t *)op->W + (size_t)s0 * p->w_stride,
                             p->w_stride, s1 - s0, op->cols, A->bp, A->dyp, op->n_tok, op->Y, ys,
                             op->y_idx, s0, j->s->panel[ith]);
        }
        return;
    }
    if (p->path == PATH_GEMV_A8) {
        j->g->gemv(op->wtype, W, p->w_stride, r1 - r0, op->cols, (const int8_t *)A->q, A->ad, A->ai,
                   op->n_tok, op->Y, ys, op->y_idx, r0);
        return;
    }
    if (p->path == PATH_GEMM && vnni_small(j->g, op->wtype, op->n_tok)) {
        j->g->small(op->wtype, W, p->w_stride, op->slab, r1 - r0, op->cols, (const int8_t *)A->q, A->ad,
                    A->as, A->as16, op->n_tok, op->Y, ys, op->y_idx, r0, j->s->panel[ith]);
        return;
    }
    if (p->path == PATH_GEMM) {
        uint8_t *panel = j->s->panel[ith];
        int64_t nb = op->cols / 32;
        float *pd = (float *)(panel + (size_t)op->cols * MM_TILE_ROWS);
        int sub16 = j->g->sub16(op->wtype);
        float *pm = pd + nb * MM_TILE_ROWS * (sub16 ? 2 : 1);
        for (int64_t s0 = r0; s0 < r1; s0 += MM_TILE_ROWS) {
            int64_t s1 = s0 + MM_TILE_ROWS < r1 ? s0 + MM_TILE_ROWS : r1;
            const uint8_t *pnl = j->g->pack(op->wtype, (const uint8_t *)op->W + (size_t)s0 * p->w_stride,
                                            p->w_stride, op->slab && s1 - s0 == MM_TILE_ROWS, s1 - s0,
                                            op->cols, panel, pd, pm);
            j->g->kernel(pnl, pd, pm, op->cols, (const int8_t *)A->q, A->ad, A->as, A->as16,
                         sub16, op->n_tok, op->Y, ys, op->y_idx, s0, (int)(s1 - s0));
        }
        return;
    }
    if (p->path == PATH_TILE) {
        g_tile->run(op->wtype, W, p->w_stride, r1 - r0, op->cols, A->q, A->row_bytes, op->n_tok,
                    op->Y, ys, op->y_idx, r0, j->s->n_panel > ith ? j->s->panel[ith] : NULL);
        return;
    }
    for (int64_t r = r0; r < r1; r++, W += p->w_stride) {
        for (int64_t t = 0; t < op->n_tok; t++) {
            float *y = op->Y + (op->y_idx ? op->y_idx[t] : t) * ys;
            y[r] = p->dot(op->cols, W, A->q + (size_t)t * A->row_bytes);
        }
    }
}

/* Waits until every quantization unit is done (not until every thread arrived: a thread that
 * never started must not hold the others up). */
static void wait_units(struct mm_job *j)
{
    for (int i = 0; atomic_load(&j->units_done) < j->total_units; i++) {
        if ((i & 255) == 255)
            sched_yield();
        else
            cpu_relax();
    }
}

static void worker(void *ctx, int ith, int nth)
{
    struct mm_job *j = ctx;
    (void)nth;
    if (j->par_quant) {
        for (;;) {
            int64_t u = atomic_fetch_add(&j->next_unit, 1);
            if (u >= j->total_units) break;
            quantize_unit(j, u);
            atomic_fetch_add(&j->units_done, 1);
        }
        wait_units(j);
    }
    /* dynamic tiles: op boundaries found by a forward scan (tiles are handed out in order) */
    int o = 0;
    for (;;) {
        int64_t tile = atomic_fetch_add_explicit(&j->next_tile, 1, memory_order_relaxed);
        if (tile >= j->total_tiles) break;
        while (tile >= j->pops[o].tile_begin + j->pops[o].n_tiles)
            o++;
        run_tile(j, ith, &j->pops[o], tile - j->pops[o].tile_begin);
    }
}

/* The call ends when its last tile does, so with long decode items the threads finish up to one
 * item apart (~10-20 us of streaming, ~140 calls per token). The last op's final nth + 1 items'
 * worth of rows is cut into items a quarter as long: the threads then finish at most a quarter
 * item apart, and every item before the tail stays long. Which thread computes a row never
 * changes the row's arithmetic, so this is free of numerical effects. */
static void tail_split(struct mm_job *j, int nth)
{
    struct mm_plan_op *p = &j->pops[j->n_ops - 1];
    int64_t rows = p->op->rows, b = p->tile_rows, t = b / 4 / 16 * 16;
    if (nth < 2 || t < 16 || p->tile_rows == MM_TILE_ROWS) return;
    int64_t n_big = rows / b - (nth + 1);
    if (n_big < 0) n_big = 0;
    int64_t tail = rows - n_big * b;
    j->total_tiles -= p->n_tiles;
    p->n_big = n_big;
    p->tail_rows = t;
    p->n_tiles = n_big + (tail + t - 1) / t;
    j->total_tiles += p->n_tiles;
}

static int same_act(const struct mm_act *A, const struct mm_op *op, int64_t xs, int a8, int amx,
                    enum ggml_type vdt)
{
    return A->X == op->X && A->x_stride == xs && A->x_idx == op->x_idx && A->n_tok == op->n_tok &&
           A->cols == op->cols && A->a8 == a8 && A->amx == amx && (a8 || A->vdt == vdt);
}

int mm_run_ops(struct threadpool *tp, const struct mm_op *ops, int n_ops, struct mm_scratch *s,
               struct err *e)
{
    if (n_ops < 0 || n_ops > MM_MAX_OPS)
        return err_set(e, ERR_INVALID, "matmul: %d ops (max %d)", n_ops, MM_MAX_OPS);
    if (!s) return err_set(e, ERR_INVALID, "matmul: no scratch");
    int nth = tp_size(tp);
    if (nth > MM_MAX_THREADS) return err_set(e, ERR_INVALID, "matmul: %d threads", nth);
    if (!s->job && !(s->job = malloc(sizeof *s->job)))
        return err_set(e, ERR_NOMEM, "matmul: out of memory");
    struct mm_job *j = s->job;
    j->n_ops = j->n_acts = 0;
    j->total_tok = j->total_tiles = j->total_units = 0;
    atomic_store(&j->next_tile, 0);
    atomic_store(&j->next_unit, 0);
    atomic_store(&j->units_done, 0);
    const struct mm_gemm_impl *g = gemm_impl();
    j->g = g;
    j->s = s;
    size_t act_bytes = 0, panel_need = 0;
    uint64_t wbytes = 0, macs = 0;
    int64_t total_elems = 0;
    for (int i = 0; i < n_ops; i++) {
        const struct mm_op *op = &ops[i];
        const struct quant_traits *tr = quant_traits(op->wtype);
        if (!tr || !quant_type_valid((uint32_t)op->wtype)) {
            return err_set(e, ERR_INVALID, "matmul: unsupported weight type %d", (int)op->wtype);
        }
        if (op->rows < 0 || op->cols <= 0 || op->n_tok < 0 || op->cols % tr->blck_size ||
            op->cols % quant_traits(tr->vec_dot_type)->blck_size) {
            return err_set(e, ERR_INVALID, "matmul: bad shape %ldx%ld (%s) x %ld tokens",
                           (long)op->rows, (long)op->cols, tr->name, (long)op->n_tok);
        }
        if (op->rows == 0 || op->n_tok == 0) continue;
        if (!op->W || !op->X || !op->Y) {
            return err_set(e, ERR_INVALID, "matmul: NULL operand");
        }
        size_t row_size = quant_row_size(op->wtype, op->cols);
        size_t ws = op->w_stride ? op->w_stride : row_size;
        wbytes += row_size * (uint64_t)op->rows;
        macs += (uint64_t)op->rows * (uint64_t)op->cols * (uint64_t)op->n_tok;
        if (ws < row_size) {
            return err_set(e, ERR_INVALID, "matmul: row stride %zu < row size %zu", ws, row_size);
        }
        int64_t xs = op->x_stride ? op->x_stride : op->cols;
        enum mm_path path = choose_path(g, op->wtype, op->n_tok, op->cols);
        if (op->slab) { /* only the packed path reads the slab layout (any token count) */
            if (!mm_slab_supported(op->wtype) || ws != row_size)
                return err_set(e, ERR_INVALID, "matmul: %s weights in the slab layout %s",
                               tr->name, ws != row_size ? "with a padded row stride"
                                                        : "on a CPU without the slab path");
            path = PATH_GEMM;
        }
        /* small: the AMX arithmetic on AVX-512 (no B panel, long row runs per work item) */
        int small = path == PATH_GEMM_AMX && amx_small(g, op->n_tok);
        int amx = path == PATH_GEMM_AMX && !small;
        int a8 = path == PATH_GEMV_A8 || path == PATH_GEMM || path == PATH_GEMM_AMX,
            gemm = path == PATH_GEMM;
        /* find or add the activation set (float GEMM reads X in place: no set) */
        int a = -1;
        if (path != PATH_GEMM_F) {
            for (a = 0; a < j->n_acts; a++)
                if (same_act(&j->acts[a], op, xs, a8, amx, tr->vec_dot_type)) break;
        }
        if (path != PATH_GEMM_F && a == j->n_acts) {
            struct mm_act *A = &j->acts[j->n_acts++];
            *A = (struct mm_act){.X = op->X,
                                 .x_stride = xs,
                                 .n_tok = op->n_tok,
                                 .cols = op->cols,
                                 .x_idx = op->x_idx,
                                 .a8 = a8,
                                 .amx = amx,
                                 .vdt = tr->vec_dot_type};
            A->tok_begin = j->total_tok;
            A->unit_begin = j->total_units;
            j->total_units += (op->n_tok + 15) / 16;
            if (amx)
                act_bytes +=
                    (size_t)((op->n_tok + 15) / 16) * (size_t)(op->cols / 32) * (512 + 64) + 2 * 64;
            j->total_tok += op->n_tok;
            total_elems += op->n_tok * op->cols;
            if (a8) {
                A->row_bytes = (size_t)op->cols;
                act_bytes +=
                    (size_t)op->n_tok * ((size_t)op->cols + 5 * 4 * (size_t)(op->cols / 32)) +
                    5 * 64;
            } else {
                A->row_bytes = quant_row_size(tr->vec_dot_type, op->cols);
                act_bytes += (size_t)op->n_tok * A->row_bytes + 64;
            }
        }
        struct mm_plan_op *p = &j->pops[j->n_ops++];
        p->op = op;
        p->act = a;
        p->x_stride = xs;
        p->path = path;
        p->w_stride = ws;
        p->dot = tr->vec_dot;
        /* few tokens (decode): long row runs per work item, so each thread streams contiguous
         * weights; many tokens: one 16-row kernel tile per item (compute bound, balance) */
        p->tile_rows = ((gemm && op->n_tok >= MM_PACKED_BIG_TOK) ||
                        (amx && op->n_tok >= MM_GEMM_BIG_TOK && !small))
                           ? MM_TILE_ROWS
                           : gemv_tile_rows(op->rows, nth);
        p->n_tiles = (op->rows + p->tile_rows - 1) / p->tile_rows;
        p->n_big = p->n_tiles;
        p->tail_rows = p->tile_rows;
        p->tile_begin = j->total_tiles;
        j->total_tiles += p->n_tiles;
        if (amx && MM_AMX_TMP_BYTES(op->cols) > panel_need) panel_need = MM_AMX_TMP_BYTES(op->cols);
        if (path == PATH_TILE && g_tile->tmp_bytes) {
            size_t need = g_tile->tmp_bytes(op->wtype, op->cols, op->n_tok);
            if (need > panel_need) panel_need = need;
        }
        if (gemm) {
            size_t need = (size_t)op->cols * MM_TILE_ROWS +
                          4 * sizeof(float) * MM_TILE_ROWS * (size_t)(op->cols / 32);
            if (need > panel_need) panel_need = need;
        }
    }
    atomic_fetch_add_explicit(&g_wbytes, wbytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_macs, macs, memory_order_relaxed);
    if (j->n_ops == 0) return 0;
    tail_split(j, nth);
    if (grow(&s->act, &s->act_cap, act_bytes) || (panel_need && ensure_panels(s, nth, panel_need)))
        return err_set(e, ERR_NOMEM, "matmul: out of memory for scratch");
    /* carve the activation buffers */
    size_t off = 0;
    for (int a = 0; a < j->n_acts; a++) {
        struct mm_act *A = &j->acts[a];
        A->q = s->act + off;
        if (A->a8) {
            off += ((size_t)A->n_tok * (size_t)A->cols + 63) / 64 * 64;
            A->ad = (float *)(s->act + off);
            off += ((size_t)A->n_tok * (size_t)(A->cols / 32) * 4 + 63) / 64 * 64;
            A->as = (float *)(s->act + off);
            off += ((size_t)A->n_tok * (size_t)(A->cols / 32) * 4 + 63) / 64 * 64;
            A->ai = (int32_t *)(s->act + off);
            off += ((size_t)A->n_tok * (size_t)(A->cols / 32) * 4 + 63) / 64 * 64;
            A->as16 = (float *)(s->act + off);
            off += ((size_t)A->n_tok * (size_t)(A->cols / 16) * 4 + 63) / 64 * 64;
            if (A->amx) {
                size_t ng = (size_t)((A->n_tok + 15) / 16), nb = (size_t)(A->cols / 32);
                A->bp = s->act + off;
                off += (ng * nb * 512 + 63) / 64 * 64;
                A->dyp = (float *)(s->act + off);
                off += (ng * nb * 64 + 63) / 64 * 64;
            }
        } else {
            off += ((size_t)A->n_tok * A->row_bytes + 63) / 64 * 64;
        }
    }
    /* Small activation sets (decode) are quantized here: no barrier inside the parallel part,
     * so a worker that is late (descheduled) holds nobody up until the final join. */
    j->par_quant = nth > 1 && total_elems >= MM_PAR_QUANT_MIN;
    if (!j->par_quant)
        for (int64_t u = 0; u < j->total_units; u++)
            quantize_unit(j, u);
    tp_run_dynamic(tp, worker, j);
    return 0;
}

int mm_run(struct threadpool *tp, enum ggml_type wtype, const void *W, int64_t rows, int64_t cols,
           size_t row_stride, const float *X, int64_t n_tok, float *Y, struct mm_scratch *s,
           struct err *e)
{
    struct mm_op op = {.wtype = wtype,
                       .W = W,
                       .rows = rows,
                       .cols = cols,
                       .w_stride = row_stride,
                       .X = X,
                       .n_tok = n_tok,
                       .Y = Y};
    return mm_run_ops(tp, &op, 1, s, e);
}

/* ------------------------------------------------------------ startup calibration */

/* Why: decode is a pure weight stream, and what streams fastest differs between machines of the
 * same kind (a 16 KB prefetch cost 18 % of read bandwidth on one EPYC VM; 4 KB gained 20-45 % on
 * another). So the two knobs that do not touch the arithmetic — the AVX2 tiles' software prefetch
 * distance and the rows per decode work item — are measured once per process on a decode-shaped
 * q8_0 product bigger than a 32 MB L3 (37.9 MB: each pass streams from DRAM like a decode step),
 * each candidate timed in three interleaved rounds (best of them, so a burst of load on a shared
 * machine hurts every candidate alike), and the fastest kept; a candidate must beat the default by
 * 3 % to replace it, so noise does not move the setting. */
#define CAL_COLS 1024
#define CAL_ROWS 34816
#define CAL_ROUNDS 3

static pthread_mutex_t g_cal_mu = PTHREAD_MUTEX_INITIALIZER;
static struct mm_calib g_cal;

static double cal_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cal_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU seconds of the process for one pass (all threads): a streaming kernel's CPU time is its
 * time stalled on memory, and unlike wall time it does not count the slices a thread spent
 * descheduled on a shared machine (wall-time passes measured 2.1-13.5 GB/s for neighbouring
 * candidates under load). At process start nothing else runs, so the process clock is the pool's. */
static int cal_pass(struct threadpool *tp, const void *W, int slab, const float *x, float *y,
                    struct mm_scratch *s, double *sec)
{
    struct err e;
    struct mm_op op = {.wtype = GGML_TYPE_Q8_0, .W = W, .rows = CAL_ROWS, .cols = CAL_COLS, .X = x,
                       .n_tok = 1, .Y = y, .slab = slab};
    double t0 = cal_cpu();
    if (mm_run_ops(tp, &op, 1, s, &e)) return -1;
    *sec = cal_cpu() - t0;
    return 0;
}

/* The knobs a sweep sets (one int each) */
static void cal_set_tile_pf(int v) { g_tile->set_prefetch(v); }
static void cal_set_pf_file(int v) { g_impl->set_pf_slabs(0, v); }
static void cal_set_pf_slab(int v) { g_impl->set_pf_slabs(1, v); }
static void cal_set_rows(int v) { __atomic_store_n(&g_gemv_rows, v, __ATOMIC_RELAXED); }

/* One knob: every candidate in CAL_ROUNDS interleaved rounds (best of each), appended to the
 * sweep text as "label value GB-per-CPU-s, "; the fastest installed if it beats the default by
 * 3 %, else the default. */
static int cal_sweep(struct threadpool *tp, const void *W, int slab, const float *x, float *y,
                     struct mm_scratch *s, const int *vals, int n, int def, void (*set)(int),
                     const char *label, int *chosen, double *gbs)
{
    const double bytes = (double)quant_row_size(GGML_TYPE_Q8_0, CAL_COLS) * CAL_ROWS;
    double best[8], sec;
    int di = 0, bi;
    if (n > 8) return -1;
    for (int i = 0; i < n; i++) {
        best[i] = 1e30;
        if (vals[i] == def) di = i;
    }
    for (int r = 0; r < CAL_ROUNDS; r++)
        for (int i = 0; i < n; i++) {
            set(vals[i]);
            if (cal_pass(tp, W, slab, x, y, s, &sec)) {
                set(def);
                return -1;
            }
            if (sec < best[i]) best[i] = sec;
        }
    for (int i = 0; i < n; i++) {
        size_t k = strlen(g_cal.sweep);
        if (k < sizeof g_cal.sweep)
            snprintf(g_cal.sweep + k, sizeof g_cal.sweep - k, "%s %d %.1f, ", label, vals[i],
                     bytes / best[i] / 1e9);
    }
    bi = di;
    for (int i = 0; i < n; i++)
        if (best[i] < best[bi] * 0.97 && best[i] < best[di] * 0.97) bi = i;
    set(vals[bi]);
    *chosen = vals[bi];
    if (gbs) *gbs = bytes / best[bi] / 1e9;
    return 0;
}

void mm_set_pf_slabs(int slabs)
{
    pthread_once(&g_impl_once, probe);
    if (slabs >= 0 && g_impl && g_impl->set_pf_slabs) {
        g_impl->set_pf_slabs(0, slabs);
        g_impl->set_pf_slabs(1, slabs);
    }
}

void mm_set_stream_tuning(int prefetch_bytes, int item_rows)
{
    pthread_once(&g_impl_once, probe);
    if (prefetch_bytes >= 0 && g_tile && g_tile->set_prefetch) g_tile->set_prefetch(prefetch_bytes);
    if (item_rows >= 16 && item_rows <= 4096 && item_rows % 16 == 0)
        __atomic_store_n(&g_gemv_rows, (int64_t)item_rows, __ATOMIC_RELAXED);
}

const struct mm_calib *mm_calib_result(void)
{
    pthread_mutex_lock(&g_cal_mu);
    const struct mm_calib *c = g_cal.done ? &g_cal : NULL;
    pthread_mutex_unlock(&g_cal_mu);
    return c;
}

const struct mm_calib *mm_calibrate(struct threadpool *tp)
{
    static const int pfs[] = {0, 1024, 2048, 4096, 8192, 16384};
    static const int slabs[] = {0, 1, 2, 4};
    static const int rows[] = {32, 64, 128, 256, 512};
    pthread_mutex_lock(&g_cal_mu);
    if (g_cal.done) goto out;
    pthread_once(&g_impl_once, probe);
    double t_start = cal_now();
    const size_t bytes = quant_row_size(GGML_TYPE_Q8_0, CAL_COLS) * CAL_ROWS;
    uint8_t *W = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    float *x = malloc(CAL_COLS * sizeof *x), *y = malloc(CAL_ROWS * sizeof *y);
    struct mm_scratch *s = mm_scratch_new();
    g_cal.done = 1;
    g_cal.prefetch = -1;
    g_cal.pf_slabs = -1;
    g_cal.pf_slabs_slab = -1;
    g_cal.item_rows = (int)g_gemv_rows;
    if (!W || !x || !y || !s) {
        snprintf(g_cal.sweep, sizeof g_cal.sweep, "skipped: out of memory");
        goto done;
    }
    /* q8_0 blocks: d = 0x1111 (a small normal half), qs = 17 — every byte alike, so the same
     * buffer is a valid matrix in the file's layout and in the slab layout */
    memset(W, 0x11, bytes);
    for (int i = 0; i < CAL_COLS; i++) x[i] = (float)(i % 7) - 3.0f;
    /* the layout models are served in: the slab layout where it exists (model.c repacks) */
    const int slab = mm_slab_supported(GGML_TYPE_Q8_0);
    double sec;
    if (cal_pass(tp, W, slab, x, y, s, &sec)) goto fail; /* warm-up: page faults, scratch */
    if (g_tile && g_tile_enabled && g_tile->set_prefetch &&
        choose_path(gemm_impl(), GGML_TYPE_Q8_0, 1, CAL_COLS) == PATH_TILE &&
        cal_sweep(tp, W, 0, x, y, s, pfs, 6, MM2_PF_DEFAULT, cal_set_tile_pf, "pf", &g_cal.prefetch, NULL))
        goto fail;
    /* AVX-512 without AMX: the direct kernels' prefetch distance in slabs, per layout */
    const struct mm_gemm_impl *gi = gemm_impl();
    if (gi && gi->set_pf_slabs && choose_path(gi, GGML_TYPE_Q8_0, 1, CAL_COLS) == PATH_GEMM &&
        vnni_small(gi, GGML_TYPE_Q8_0, 1)) {
        if (cal_sweep(tp, W, 0, x, y, s, slabs, 4, MM_PF_SLABS_DEFAULT, cal_set_pf_file, "slabs",
                      &g_cal.pf_slabs, NULL))
            goto fail;
        if (slab && cal_sweep(tp, W, 1, x, y, s, slabs, 4, MM_PF_SLABS_DEFAULT, cal_set_pf_slab,
                              "slab-layout slabs", &g_cal.pf_slabs_slab, NULL))
            goto fail;
    }
    if (cal_sweep(tp, W, slab, x, y, s, rows, 5, MM_GEMV_TILE_ROWS, cal_set_rows, "rows",
                  &g_cal.item_rows, &g_cal.gbs))
        goto fail;
    size_t n = strlen(g_cal.sweep);
    if (n >= 2) g_cal.sweep[n - 2] = 0;
    goto done;
fail:
    snprintf(g_cal.sweep, sizeof g_cal.sweep, "skipped: the calibration product failed");
    if (g_tile && g_tile->set_prefetch) g_tile->set_prefetch(MM2_PF_DEFAULT);
    mm_set_pf_slabs(MM_PF_SLABS_DEFAULT);
    __atomic_store_n(&g_gemv_rows, MM_GEMV_TILE_ROWS, __ATOMIC_RELAXED);
    g_cal.prefetch = -1;
    g_cal.pf_slabs = -1;
    g_cal.pf_slabs_slab = -1;
    g_cal.item_rows = MM_GEMV_TILE_ROWS;
done:
    g_cal.ms = (cal_now() - t_start) * 1e3;
    free(W);
    free(x);
    free(y);
    mm_scratch_free(s);
out:
    pthread_mutex_unlock(&g_cal_mu);
    return &g_cal;
}
