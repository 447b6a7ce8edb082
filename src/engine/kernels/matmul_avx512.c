/* matmul_avx512 — AVX-512 VNNI GEMM back-end: activation panel quantizer, weight tile packer and
 * the 16-row x up-to-8-token int8 micro-kernel (layouts in matmul_impl.h).
 *
 * The micro-kernel keeps one zmm of 16 rows x 4 u8 weights and broadcasts 4 int8 activations of
 * a token into vpdpbusd, so one instruction does 64 MACs for 16 rows of one token and the
 * per-32-block scales are applied once per 16 rows x token x block (cvt, mul, 2 fma). */
#include <immintrin.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <string.h>
#include <stddef.h>
#include <stdlib.h>

#include "engine/kernels/fp16.h"
#include "base/cpu.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/matmul_impl.h"
#include "engine/kernels/quant_blocks.h"

#define AI __attribute__((always_inline)) static inline

/* ------------------------------------------------------------ activations */

static void act_quant(const float *x, int64_t cols, int8_t *q, float *ad, float *as, int32_t *ai,
                      float *as16)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t b = 0; b < cols / 32; b++, x += 32, q += 32) {
        __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        __m512 m = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
        float amax = _mm512_reduce_max_ps(m);
        float d = amax / 127.f, id = d ? 1.f / d : 0.f;
        __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
        __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
        _mm_storeu_si128((__m128i *)q, _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtsepi32_epi8(i1));
        int s0 = _mm512_reduce_add_epi32(i0), s1 = _mm512_reduce_add_epi32(i1), s = s0 + s1;
        as16[2 * b] = d * (float)s0;
        as16[2 * b + 1] = d * (float)s1;
        ad[b] = d;
        as[b] = d * (float)s;
        ai[b] = s;
    }
}

/* ------------------------------------------------------------ weight packing */

/* 16 rows x 32 u8 (rows[r] as ymm) -> 8 zmm of (16 rows x 4 bytes), stored at out + 64 g. */
AI void transpose_store(const __m256i *rows, uint8_t *out)
{
    __m512i a[8], t[8], u[8];
    for (int r = 0; r < 8; r++)
        a[r] = _mm512_inserti64x4(_mm512_castsi256_si512(rows[r]), rows[r + 8], 1);
    for (int r = 0; r < 8; r += 2) {
        t[r] = _mm512_unpacklo_epi32(a[r], a[r + 1]);
        t[r + 1] = _mm512_unpackhi_epi32(a[r], a[r + 1]);
    }
    for (int h = 0; h < 8; h += 4) {
        u[h + 0] = _mm512_unpacklo_epi64(t[h + 0], t[h + 2]);
        u[h + 1] = _mm512_unpackhi_epi64(t[h + 0], t[h + 2]);
        u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    const __m512i ia = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i ib = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int j = 0; j < 4; j++) {
        _mm512_storeu_si512(out + 64 * j, _mm512_permutex2var_epi64(u[j], ia, u[j + 4]));
        _mm512_storeu_si512(out + 64 * (j + 4), _mm512_permutex2var_epi64(u[j], ib, u[j + 4]));
    }
}

AI __m256i nib_lo_hi(const uint8_t *p) /* 16 bytes -> 32 u8: low nibbles then high nibbles */
{
    __m128i t = _mm_loadu_si128((const __m128i *)p);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(15));
}

AI __m256i bits_to_16(const uint8_t *p) /* 32 bits -> 32 bytes of 0x10 / 0x00 */
{
    uint32_t x;
    memcpy(&x, p, 4);
    return _mm256_maskz_set1_epi8((__mmask32)x, 16);
}

/* One 32-column block b of one row: u8 quants, scale and min. */
AI __m256i get_block(enum ggml_type t, const uint8_t *row, int64_t b, float *dx, float *mx)
{
    switch (t) {
    case GGML_TYPE_Q8_0: {
        const struct block_q8_0 *x = (const struct block_q8_0 *)row + b;
        float d = fp16_to_f32(x->d);
        *dx = d, *mx = 128 * d;
        return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs),
                                _mm256_set1_epi8((char)0x80));
    }
    case GGML_TYPE_Q4_0: {
        const struct block_q4_0 *x = (const struct block_q4_0 *)row + b;
        float d = fp16_to_f32(x->d);
        *dx = d, *mx = 8 * d;
        return nib_lo_hi(x->qs);
    }
    case GGML_TYPE_Q4_1: {
        const struct block_q4_1 *x = (const struct block_q4_1 *)row + b;
        *dx = fp16_to_f32(x->d), *mx = -fp16_to_f32(x->m);
        return nib_lo_hi(x->qs);
    }
    case GGML_TYPE_Q5_0: {
        const struct block_q5_0 *x = (const struct block_q5_0 *)row + b;
        float d = fp16_to_f32(x->d);
        *dx = d, *mx = 16 * d;
        return _mm256_or_si256(nib_lo_hi(x->qs), bits_to_16(x->qh));
    }
    case GGML_TYPE_Q5_1: {
        const struct block_q5_1 *x = (const struct block_q5_1 *)row + b;
        *dx = fp16_to_f32(x->d), *mx = -fp16_to_f32(x->m);
        return _mm256_or_si256(nib_lo_hi(x->qs), bits_to_16(x->qh));
    }
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K: {
        /* sub-block j = 2c + h: nibble h of qs[32c .. 32c + 31] (+ bit j of qh[l] for Q5_K) */
        int64_t i = b / 8;
        int j = (int)(b % 8), c = j / 2, h = j % 2;
        const uint8_t *qs, *scales;
        uint16_t d16, m16;
        __m256i hb = _mm256_setzero_si256();
        if (t == GGML_TYPE_Q4_K) {
            const struct block_q4_K *x = (const struct block_q4_K *)row + i;
            qs = x->qs, scales = x->scales, d16 = x->d, m16 = x->dmin;
        } else {
            const struct block_q5_K *x = (const struct block_q5_K *)row + i;
            qs = x->qs, scales = x->scales, d16 = x->d, m16 = x->dmin;
            __m256i qh = _mm256_loadu_si256((const __m256i *)x->qh);
            hb = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, j), 4),
                                  _mm256_set1_epi8(16));
        }
        uint8_t sc, m;
        quant_scale_min_k4(j, scales, &sc, &m);
        *dx = fp16_to_f32(d16) * sc, *mx = fp16_to_f32(m16) * m;
        __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        if (h) v = _mm256_srli_epi16(v, 4);
        return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi8(15)), hb);
    }
    default:
        *dx = *mx = 0;
        return _mm256_setzero_si256();
    }
}

/* One 32-column block b of a row of a type with 16-element scales: u8 quants and the scale and
 * min of each half. */
AI __m256i get_block16(enum ggml_type t, const uint8_t *row, int64_t b, float *dx, float *mx)
{
    int64_t i = b / 8;
    int j = (int)(b % 8);
    const __m256i m2 = _mm256_set1_epi8(3);
    switch (t) {
    case GGML_TYPE_Q6_K: {
        /* element 32j + l = 128h + 32k + l: nibble k/2 of ql[64h + 32(k%2) + l], bits 2k of qh[32h
         * + l] */
        const struct block_q6_K *x = (const struct block_q6_K *)row + i;
        int h = j / 4, k = j % 4;
        float d = fp16_to_f32(x->d);
        for (int u = 0; u < 2; u++)
            dx[u] = d * x->scales[2 * j + u], mx[u] = 32 * dx[u];
        __m256i lo = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (k % 2)));
        if (k / 2) lo = _mm256_srli_epi16(lo, 4);
        lo = _mm256_and_si256(lo, _mm256_set1_epi8(15));
        __m256i hi =
            _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)), 2 * k);
        hi = _mm256_slli_epi16(_mm256_and_si256(hi, m2), 4);
        return _mm256_or_si256(lo, hi);
    }
    case GGML_TYPE_Q3_K: {
        /* element 128n + 32k + l: bits 2k of qs[32n + l]; high bit: hmask[l] bit (4n + k), clear =
         * -4 */
        const struct block_q3_K *x = (const struct block_q3_K *)row + i;
        int n = j / 4, k = j % 4;
        int8_t sc[16];
        quant_q3k_scales(x->scales, sc);
        float d = fp16_to_f32(x->d);
        for (int u = 0; u < 2; u++)
            dx[u] = d * sc[2 * j + u], mx[u] = 4 * dx[u];
        __m256i lo = _mm256_and_si256(
            _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * n)), 2 * k), m2);
        __m256i hm = _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)x->hmask), 4 * n + k);
        hm = _mm256_slli_epi16(_mm256_and_si256(hm, _mm256_set1_epi8(1)), 2);
        return _mm256_or_si256(lo, hm);
    }
    case GGML_TYPE_Q2_K: {
        const struct block_q2_K *x = (const struct block_q2_K *)row + i;
        int n = j / 4, k = j % 4;
        float d = fp16_to_f32(x->d), dmin = fp16_to_f32(x->dmin);
        for (int u = 0; u < 2; u++) {
            uint8_t sc = x->scales[2 * j + u];
            dx[u] = d * (sc & 15), mx[u] = dmin * (sc >> 4);
        }
        return _mm256_and_si256(
            _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * n)), 2 * k), m2);
    }
    default:
        dx[0] = dx[1] = mx[0] = mx[1] = 0;
        return _mm256_setzero_si256();
    }
}

AI int is_sub16(enum ggml_type t)
{
    return t == GGML_TYPE_Q6_K || t == GGML_TYPE_Q3_K || t == GGML_TYPE_Q2_K;
}

AI void pack_t(enum ggml_type t, const void *W, size_t ws, int64_t nrows, int64_t cols,
               uint8_t *panel, float *pd, float *pm)
{
    /* the file's row-major layout: row r's type block i at W + i bs + r ws (every slab layout
     * has kernels of its own: q8p_slab, kp_slab, pack_kp) */
    const size_t bs = quant_traits(t)->type_size;
    const int64_t nb = cols / 32, per = quant_traits(t)->blck_size / 32; /* 32-blocks a block */
    const uint8_t *rowp[MM_TILE_ROWS];
    for (int r = 0; r < MM_TILE_ROWS; r++)
        rowp[r] = (const uint8_t *)W + (size_t)(r < nrows ? r : 0) * ws;
    /* the next tile's rows, prefetched into L2 one block's share at a time: the 16 row streams of
     * a tile are too many for the hardware prefetcher, and decode (one token) is nothing but this
     * stream (packing waited on DRAM: 80 % of a q4_K_M decode's CPU time was in pack) */
    const uint8_t *next = (const uint8_t *)W + MM_TILE_ROWS * ws;
    const size_t share = MM_TILE_ROWS * ws / (size_t)nb;
    for (int64_t b = 0; b < nb; b++) {
        for (size_t k = 0; k < share; k += 64)
            _mm_prefetch((const char *)next + (size_t)b * share + k, _MM_HINT_T1);
        __m256i rows[MM_TILE_ROWS];
        for (int r = 0; r < MM_TILE_ROWS; r++) {
            if (is_sub16(t)) {
                float dx[2] = {0, 0}, mx[2] = {0, 0};
                rows[r] = r < nrows ? get_block16(t, rowp[r] + (size_t)(b / per) * bs, b % per, dx, mx)
                                    : _mm256_setzero_si256();
                for (int h = 0; h < 2; h++)
                    pd[b * 32 + h * 16 + r] = dx[h], pm[b * 32 + h * 16 + r] = mx[h];
            } else if (r < nrows) {
                rows[r] = get_block(t, rowp[r] + (size_t)(b / per) * bs, b % per, &pd[b * 16 + r],
                                    &pm[b * 16 + r]);
            } else {
                rows[r] = _mm256_setzero_si256();
                pd[b * 16 + r] = pm[b * 16 + r] = 0;
            }
        }
        transpose_store(rows, panel + b * 512);
    }
}

/* Sub-block j's 6-bit scale (sc) and min (mn) of 16 rows from their gathered scale dwords
 * (s0 = scales[0..3], s1 = [4..7], s2 = [8..11]): quant_scale_min_k4's fields, lane-wise. */
AI void k4_sc_mn(int j, __m512i s0, __m512i s1, __m512i s2, __m512i *sc, __m512i *mn)
{
    const __m512i m6 = _mm512_set1_epi32(63), m4 = _mm512_set1_epi32(15), m2 = _mm512_set1_epi32(3);
    if (j < 4) {
        *sc = _mm512_and_si512(_mm512_srli_epi32(s0, 8 * j), m6);
        *mn = _mm512_and_si512(_mm512_srli_epi32(s1, 8 * j), m6);
        return;
    }
    const int k = j - 4;
    __m512i hi = _mm512_srli_epi32(s2, 8 * k);
    *sc = _mm512_or_si512(_mm512_and_si512(hi, m4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s0, 8 * k + 6), m2), 4));
    *mn = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(hi, 4), m4),
                          _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(s1, 8 * k + 6), m2), 4));
}

/* Q6_K's signed scale idx (0..15) of 16 rows from their gathered scale dwords sg[0..3]. */
AI __m512i q6k_sc(const __m512i *sg, int idx)
{
    return _mm512_srai_epi32(_mm512_slli_epi32(sg[idx / 4], 24 - 8 * (idx % 4)), 24);
}

/* Q4_K / Q5_K tiles: the scales and mins of the 16 rows' 8 sub-blocks decoded at once per
 * 256-column superblock from gathered dwords (d | dmin, scales[0..3], [4..7], [8..11]), the same
 * operations per value as get_block's scalar path (6-bit fields, then fp16(d) * sc, fp16(dmin) * m,
 * one float multiply each), so pd/pm and the panel are the bits pack_t wrote with get_block; the
 * quants per row as get_block. */
AI void pack_k4(enum ggml_type t, const void *W, size_t ws, int64_t nrows,
                int64_t cols, uint8_t *panel, float *pd, float *pm)
{
    const size_t bs = quant_traits(t)->type_size;
    const int64_t nsb = cols / 256;
    const uint8_t *rowp[MM_TILE_ROWS];
    int32_t off[MM_TILE_ROWS];
    for (int r = 0; r < MM_TILE_ROWS; r++) {
        rowp[r] = (const uint8_t *)W + (size_t)(r < nrows ? r : 0) * ws;
        off[r] = (int32_t)((size_t)(r < nrows ? r : 0) * ws);
    }
    const __m512i voff = _mm512_loadu_si512(off);
    const __mmask16 valid = (__mmask16)((1u << nrows) - 1); /* rows past nrows: pd = pm = 0 */
    /* prefetched as in pack_t, one 32-column block's share at a time (a superblock's share in one
     * burst stalled on the fill buffers) */
    const uint8_t *next = (const uint8_t *)W + MM_TILE_ROWS * ws;
    const size_t share = MM_TILE_ROWS * ws / (size_t)(8 * nsb);
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *base = (const uint8_t *)W + (size_t)i * bs;
        __m512i g0 = _mm512_i32gather_epi32(voff, (const void *)base, 1);
        __m512i s0 = _mm512_i32gather_epi32(voff, (const void *)(base + 4), 1);
        __m512i s1 = _mm512_i32gather_epi32(voff, (const void *)(base + 8), 1);
        __m512i s2 = _mm512_i32gather_epi32(voff, (const void *)(base + 12), 1);
        __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
        __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g0, 16)));
        for (int j = 0; j < 8; j++) {
            for (size_t k = 0; k < share; k += 64)
                _mm_prefetch((const char *)next + (size_t)(8 * i + j) * share + k, _MM_HINT_T1);
            __m512i sc, m;
            k4_sc_mn(j, s0, s1, s2, &sc, &m);
            const int64_t b = 8 * i + j;
            _mm512_storeu_ps(pd + b * 16, _mm512_maskz_mul_ps(valid, d, _mm512_cvtepi32_ps(sc)));
            _mm512_storeu_ps(pm + b * 16, _mm512_maskz_mul_ps(valid, dmin, _mm512_cvtepi32_ps(m)));
            const int c = j / 2, h = j % 2;
            __m256i rows[MM_TILE_ROWS];
            for (int r = 0; r < MM_TILE_ROWS; r++) {
                const uint8_t *x = rowp[r] + (size_t)i * bs;
                __m256i v, hb = _mm256_setzero_si256();
                if (t == GGML_TYPE_Q4_K) {
                    v = _mm256_loadu_si256((const __m256i *)(((const struct block_q4_K *)x)->qs + 32 * c));
                } else {
                    const struct block_q5_K *x5 = (const struct block_q5_K *)x;
                    v = _mm256_loadu_si256((const __m256i *)(x5->qs + 32 * c));
                    __m256i qh = _mm256_loadu_si256((const __m256i *)x5->qh);
                    hb = _mm256_and_si256(_mm256_slli_epi16(_mm256_srli_epi16(qh, j), 4),
                                          _mm256_set1_epi8(16));
                }
                if (h) v = _mm256_srli_epi16(v, 4);
                v = _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi8(15)), hb);
                rows[r] = r < nrows ? v : _mm256_setzero_si256();
            }
            transpose_store(rows, panel + b * 512);
        }
    }
}

/* Q6_K tiles: the 16 signed scales and d of the 16 rows decoded at once per superblock from
 * gathered dwords (d from the dword at 206, so the gather stays inside the block), dx = d * scale,
 * mx = 32 * dx as get_block16; the quants per row as get_block16. */
AI void pack_q6k(const void *W, size_t ws, int64_t nrows, int64_t cols, uint8_t *panel,
                 float *pd, float *pm)
{
    const size_t bs = sizeof(struct block_q6_K);
    const int64_t nsb = cols / 256;
    const uint8_t *rowp[MM_TILE_ROWS];
    int32_t off[MM_TILE_ROWS];
    for (int r = 0; r < MM_TILE_ROWS; r++) {
        rowp[r] = (const uint8_t *)W + (size_t)(r < nrows ? r : 0) * ws;
        off[r] = (int32_t)((size_t)(r < nrows ? r : 0) * ws);
    }
    const __m512i voff = _mm512_loadu_si512(off);
    const __mmask16 valid = (__mmask16)((1u << nrows) - 1);
    const uint8_t *next = (const uint8_t *)W + MM_TILE_ROWS * ws; /* prefetched as in pack_k4 */
    const size_t share = MM_TILE_ROWS * ws / (size_t)(8 * nsb);
    const __m256i m2 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *base = (const uint8_t *)W + (size_t)i * bs;
        __m512i sg[4];
        for (int q = 0; q < 4; q++)
            sg[q] = _mm512_i32gather_epi32(voff, (const void *)(base + 192 + 4 * q), 1);
        __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(
            _mm512_i32gather_epi32(voff, (const void *)(base + 206), 1), 16)));
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * i + j;
            for (size_t k = 0; k < share; k += 64)
                _mm_prefetch((const char *)next + (size_t)b * share + k, _MM_HINT_T1);
            for (int u = 0; u < 2; u++) {
                const int idx = 2 * j + u;
                __m512i sc = q6k_sc(sg, idx);
                __m512 dx = _mm512_maskz_mul_ps(valid, d, _mm512_cvtepi32_ps(sc));
                _mm512_storeu_ps(pd + b * 32 + u * 16, dx);
                _mm512_storeu_ps(pm + b * 32 + u * 16, _mm512_mul_ps(_mm512_set1_ps(32.f), dx));
            }
            const int h = j / 4, k = j % 4;
            __m256i rows[MM_TILE_ROWS];
            for (int r = 0; r < MM_TILE_ROWS; r++) {
                const struct block_q6_K *x = (const struct block_q6_K *)(rowp[r] + (size_t)i * bs);
                __m256i lo = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32 * (k % 2)));
                if (k / 2) lo = _mm256_srli_epi16(lo, 4);
                lo = _mm256_and_si256(lo, m4);
                __m256i hi =
                    _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * h)), 2 * k);
                hi = _mm256_slli_epi16(_mm256_and_si256(hi, m2), 4);
                rows[r] = r < nrows ? _mm256_or_si256(lo, hi) : _mm256_setzero_si256();
            }
            transpose_store(rows, panel + b * 512);
        }
    }
}

/* Vectorized K-quant tile packing (1, default) or the scalar get_block path (0): same panels. */
static int g_pack_vec = 1;
static void set_pack_vec(int on)
{
    g_pack_vec = on;
}

static void pack_kp(enum ggml_type t, const uint8_t *slab, int64_t cols, uint8_t *panel, float *pd,
                    float *pm);

static const uint8_t *pack(enum ggml_type t, const void *W, size_t ws, int slab, int64_t nrows,
                           int64_t cols, uint8_t *panel, float *pd, float *pm)
{
    if (slab && t == GGML_TYPE_Q8_0) { /* the slab is a panel already: only its scales to f32 */
        const int64_t nb = cols / 32;
        const uint16_t *sc = W;
        for (int64_t k = 0; k < nb * 16; k += 16) {
            __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + k)));
            _mm512_storeu_ps(pd + k, d);
            _mm512_storeu_ps(pm + k, _mm512_mul_ps(d, _mm512_set1_ps(128.f)));
        }
        return (const uint8_t *)W + nb * 32;
    }
    if (slab && (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K)) {
        pack_kp(t, W, cols, panel, pd, pm);
        return panel;
    }
    switch (t) {
    /* each case with its type a constant, so get_block's switch folds away */
#define PACK_CASE(T)                                                                               \
    case T:                                                                                        \
        pack_t(T, W, ws, nrows, cols, panel, pd, pm);                                           \
        break;
        PACK_CASE(GGML_TYPE_Q8_0) PACK_CASE(GGML_TYPE_Q4_0) PACK_CASE(GGML_TYPE_Q4_1)
        PACK_CASE(GGML_TYPE_Q5_0) PACK_CASE(GGML_TYPE_Q5_1) PACK_CASE(GGML_TYPE_Q3_K)
        PACK_CASE(GGML_TYPE_Q2_K)
#undef PACK_CASE
    case GGML_TYPE_Q4_K:
        if (g_pack_vec) pack_k4(GGML_TYPE_Q4_K, W, ws, nrows, cols, panel, pd, pm);
        else pack_t(GGML_TYPE_Q4_K, W, ws, nrows, cols, panel, pd, pm);
        break;
    case GGML_TYPE_Q5_K:
        if (g_pack_vec) pack_k4(GGML_TYPE_Q5_K, W, ws, nrows, cols, panel, pd, pm);
        else pack_t(GGML_TYPE_Q5_K, W, ws, nrows, cols, panel, pd, pm);
        break;
    case GGML_TYPE_Q6_K:
        if (g_pack_vec) pack_q6k(W, ws, nrows, cols, panel, pd, pm);
        else pack_t(GGML_TYPE_Q6_K, W, ws, nrows, cols, panel, pd, pm);
        break;
    default:
        break;
    }
    return panel;
}

static int sub16(enum ggml_type t)
{
    return is_sub16(t);
}

static int supported(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_0:
    case GGML_TYPE_Q4_1:
    case GGML_TYPE_Q5_0:
    case GGML_TYPE_Q5_1:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_Q3_K:
    case GGML_TYPE_Q2_K:
        return 1;
    default:
        return 0;
    }
}

/* ------------------------------------------------------------ micro-kernel */

AI void kern(const int TT, const uint8_t *panel, const float *pd, const float *pm, int64_t cols,
             const int8_t *aq, const float *ad, const float *as, float *const *yrow, __mmask16 mask)
{
    const int64_t nb = cols / 32;
    __m512 accf[8];
    __m512i acci[8];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        accf[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = panel + b * 512;
        const int8_t *ab = aq + b * 32;
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            acci[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i w = _mm512_loadu_si512(pb + 64 * g);
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                int32_t a4;
                memcpy(&a4, ab + t * cols + 4 * g, 4);
                acci[t] = _mm512_dpbusd_epi32(acci[t], w, _mm512_set1_epi32(a4));
            }
        }
        __m512 dx = _mm512_loadu_ps(pd + b * 16), mx = _mm512_loadu_ps(pm + b * 16);
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(acci[t]), dx);
            accf[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(ad[t * nb + b]), accf[t]);
            accf[t] = _mm512_fnmadd_ps(mx, _mm512_set1_ps(as[t * nb + b]), accf[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_mask_storeu_ps(yrow[t], mask, accf[t]);
}

/* Same with 16-column scales: two int accumulators per token and block (columns 0-15, 16-31). */
AI void kern16(const int TT, const uint8_t *panel, const float *pd, const float *pm, int64_t cols,
               const int8_t *aq, const float *ad, const float *as16, float *const *yrow,
               __mmask16 mask)
{
    const int64_t nb = cols / 32;
    __m512 accf[8];
    __m512i lo[8], hi[8];
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        accf[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *pb = panel + b * 512;
        const int8_t *ab = aq + b * 32;
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++)
            lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int g = 0; g < 4; g++) {
            __m512i w0 = _mm512_loadu_si512(pb + 64 * g),
                    w1 = _mm512_loadu_si512(pb + 64 * (g + 4));
#pragma GCC unroll 8
            for (int t = 0; t < TT; t++) {
                int32_t a0, a1;
                memcpy(&a0, ab + t * cols + 4 * g, 4);
                memcpy(&a1, ab + t * cols + 16 + 4 * g, 4);
                lo[t] = _mm512_dpbusd_epi32(lo[t], w0, _mm512_set1_epi32(a0));
                hi[t] = _mm512_dpbusd_epi32(hi[t], w1, _mm512_set1_epi32(a1));
            }
        }
        __m512 dx0 = _mm512_loadu_ps(pd + b * 32), dx1 = _mm512_loadu_ps(pd + b * 32 + 16);
        __m512 mx0 = _mm512_loadu_ps(pm + b * 32), mx1 = _mm512_loadu_ps(pm + b * 32 + 16);
#pragma GCC unroll 8
        for (int t = 0; t < TT; t++) {
            __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[t]), dx1,
                                       _mm512_mul_ps(_mm512_cvtepi32_ps(lo[t]), dx0));
            accf[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(ad[t * nb + b]), accf[t]);
            accf[t] = _mm512_fnmadd_ps(mx0, _mm512_set1_ps(as16[t * 2 * nb + 2 * b]), accf[t]);
            accf[t] = _mm512_fnmadd_ps(mx1, _mm512_set1_ps(as16[t * 2 * nb + 2 * b + 1]), accf[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < TT; t++)
        _mm512_mask_storeu_ps(yrow[t], mask, accf[t]);
}

#define MM_TT 8

static void kernel(const uint8_t *panel, const float *pd, const float *pm, int64_t cols,
                   const int8_t *aq, const float *ad, const float *as, const float *as16, int sub16,
                   int64_t n_tok, float *Y, int64_t y_stride, const int32_t *y_idx, int64_t r0,
                   int nrows)
{
    const int64_t nb = cols / 32;
    __mmask16 mask = (__mmask16)((1u << nrows) - 1);
    for (int64_t t0 = 0; t0 < n_tok; t0 += MM_TT) {
        int tt = (int)(n_tok - t0 < MM_TT ? n_tok - t0 : MM_TT);
        float *yrow[MM_TT];
        for (int t = 0; t < tt; t++)
            yrow[t] = Y + (y_idx ? y_idx[t0 + t] : t0 + t) * y_stride + r0;
        const int8_t *a = aq + t0 * cols;
        const float *d = ad + t0 * nb, *s = as + t0 * nb;
        if (sub16) {
            const float *s16 = as16 + t0 * 2 * nb;
            switch (tt) {
            case 8:
                kern16(8, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            case 7:
                kern16(7, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            case 6:
                kern16(6, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            case 5:
                kern16(5, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            case 4:
                kern16(4, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            case 3:
                kern16(3, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            case 2:
                kern16(2, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            default:
                kern16(1, panel, pd, pm, cols, a, d, s16, yrow, mask);
                break;
            }
            continue;
        }
        switch (tt) {
        case 8:
            kern(8, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        case 7:
            kern(7, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        case 6:
            kern(6, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        case 5:
            kern(5, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        case 4:
            kern(4, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        case 3:
            kern(3, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        case 2:
            kern(2, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        default:
            kern(1, panel, pd, pm, cols, a, d, s, yrow, mask);
            break;
        }
    }
}

/* ------------------------------------------------------------ GEMV (decode) */

/* Bytes of weights prefetched ahead, into L2: one core alone keeps too few line fills in flight
 * to reach its share of DRAM bandwidth (9 GB/s per core on the development VM without, 12-13 with
 * an 8-16 KB prefetch into L2); into L1 (T0) at 16 KB evicts lines before use. */
#ifndef GEMV_HINT
#define GEMV_HINT _MM_HINT_T1
#endif
#ifndef GEMV_PF
#define GEMV_PF 16384
#endif

static float g_f16[65536]; /* fp16 -> f32 table: a block scale costs two loads, no ALU */

static void amx_probe(void);
static const struct mm_gemm_impl g_impl;
static struct mm_gemm_impl g_impl_amx;
static int amx_supported(enum ggml_type t);
static void amx_act(const int8_t *aq, const float *ad, int64_t ntok, int64_t cols, uint8_t *bp,
                    float *dyp);
static void amx_kernel(enum ggml_type t, const void *W, size_t ws, int64_t nrows, int64_t cols,
                       const uint8_t *bp, const float *dyp, int64_t n_tok, float *Y, int64_t ys,
                       const int32_t *y_idx, int64_t r0, void *tmp);
static void amx_gemv1(const void *W, size_t ws, int64_t nrows, int64_t cols, const int8_t *aq,
                      const float *ad, const int32_t *ai, float *y);
static void amx_gemvm(const void *W, size_t ws, int64_t nrows, int64_t cols, const int8_t *aq,
                      const float *ad, const int32_t *ai, int64_t n_tok, float *Y, int64_t ys,
                      const int32_t *y_idx, int64_t r0);
static void amx_set_tilem_min(int m);

static void init_tables(void)
{
    for (uint32_t h = 0; h < 65536; h++)
        g_f16[h] = fp16_to_f32_sw((uint16_t)h);
    amx_probe();
    g_impl_amx = g_impl;
    g_impl_amx.name = "avx512-vnni+amx";
    g_impl_amx.amx_supported = amx_supported;
    g_impl_amx.amx_act = amx_act;
    g_impl_amx.amx_kernel = amx_kernel;
    g_impl_amx.amx_gemvm = amx_gemvm;
    g_impl_amx.amx_set_tilem_min = amx_set_tilem_min;
}

AI float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Q8_0 row . A8 token: the weight bytes are made unsigned by ^0x80 (w + 128), so vpdpbusd
 * computes sum (w + 128) y; the accumulator starts at -128 * sum y (lane 0), which leaves
 * sum w y. Four independent chains; the scales are one mul + one fma per block. */
AI __m256 q8_0_a8_block(const struct block_q8_0 *x, const int8_t *y, const float *ad,
                        const int32_t *ai, __m256 acc)
{
    const __m256i flip = _mm256_set1_epi8((char)0x80);
    __m256i w = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)x->qs), flip);
    __m256i init = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-128 * *ai));
    __m256i s = _mm256_dpbusd_epi32(init, w, _mm256_loadu_si256((const __m256i *)y));
    __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(*ad));
    return _mm256_fmadd_ps(f, _mm256_set1_ps(g_f16[x->d]), acc);
}

AI float dot_q8_0_a8(const struct block_q8_0 *x, int64_t nb, const int8_t *y, const float *ad,
                     const int32_t *ai)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
        _mm_prefetch((const char *)(x + b) + GEMV_PF, GEMV_HINT);
        _mm_prefetch((const char *)(x + b) + GEMV_PF + 64, GEMV_HINT);
        a0 = q8_0_a8_block(x + b, y + 32 * b, ad + b, ai + b, a0);
        a1 = q8_0_a8_block(x + b + 1, y + 32 * b + 32, ad + b + 1, ai + b + 1, a1);
        a2 = q8_0_a8_block(x + b + 2, y + 32 * b + 64, ad + b + 2, ai + b + 2, a2);
        a3 = q8_0_a8_block(x + b + 3, y + 32 * b + 96, ad + b + 3, ai + b + 3, a3);
    }
    for (; b < nb; b++)
        a0 = q8_0_a8_block(x + b, y + 32 * b, ad + b, ai + b, a0);
    return hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

/* NR rows at once: NR independent weight streams (more memory-level parallelism), the
 * activation block loaded once for all of them. Same chains and summation order per row as
 * dot_q8_0_a8, so a row's result does not depend on which kernel computed it. */
AI void dot_q8_0_a8_rows(const int NR, const struct block_q8_0 *const *x, int64_t nb,
                         const int8_t *y, const float *ad, const int32_t *ai, float *out)
{
    __m256 a[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 4 <= nb; b += 4) {
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            _mm_prefetch((const char *)(x[r] + b) + GEMV_PF, GEMV_HINT);
            _mm_prefetch((const char *)(x[r] + b) + GEMV_PF + 64, GEMV_HINT);
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++)
                a[r][k] = q8_0_a8_block(x[r] + b + k, y + 32 * (b + k), ad + b + k, ai + b + k, a[r][k]);
    }
    for (; b < nb; b++)
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
            a[r][0] = q8_0_a8_block(x[r] + b, y + 32 * b, ad + b, ai + b, a[r][0]);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
        out[r] = hsum8(_mm256_add_ps(_mm256_add_ps(a[r][0], a[r][1]), _mm256_add_ps(a[r][2], a[r][3])));
}

#define GEMV_NR 4

static int gemv_supported(enum ggml_type t)
{
    return t == GGML_TYPE_Q8_0;
}

static void gemv(enum ggml_type t, const void *W, size_t ws, int64_t nrows, int64_t cols,
                 const int8_t *aq, const float *ad, const int32_t *ai, int64_t n_tok, float *Y,
                 int64_t y_stride, const int32_t *y_idx, int64_t r0)
{
    (void)t;
    const int64_t nb = cols / 32;
    if (n_tok == 1) {
        int64_t r = 0;
        float *yrow = Y + (y_idx ? y_idx[0] : 0) * y_stride + r0;
        for (; r + GEMV_NR <= nrows; r += GEMV_NR) {
            const struct block_q8_0 *xr[4];
            for (int i = 0; i < GEMV_NR; i++)
                xr[i] = (const struct block_q8_0 *)((const uint8_t *)W + (size_t)(r + i) * ws);
            dot_q8_0_a8_rows(GEMV_NR, xr, nb, aq, ad, ai, yrow + r);
        }
        for (; r < nrows; r++)
            yrow[r] = dot_q8_0_a8((const struct block_q8_0 *)((const uint8_t *)W + (size_t)r * ws),
                                  nb, aq, ad, ai);
        return;
    }
    for (int64_t r = 0; r < nrows; r++) {
        const struct block_q8_0 *x =
            (const struct block_q8_0 *)((const uint8_t *)W + (size_t)r * ws);
        for (int64_t k = 0; k < n_tok; k++) {
            float *yrow = Y + (y_idx ? y_idx[k] : k) * y_stride;
            yrow[r0 + r] = dot_q8_0_a8(x, nb, aq + k * cols, ad + k * nb, ai + k * nb);
        }
    }
}

/* ------------------------------------------------------------ float weights */

/* Prefetch into L2 of the weights that come next (a slab, a row group), one step's share
 * (share bytes) per step of the current ones. */
AI void pf_share(const uint8_t *next, int64_t b, size_t share)
{
    if (next)
        for (size_t k = 0; k < share; k += 64)
            _mm_prefetch((const char *)next + (size_t)b * share + k, _MM_HINT_T1);
}
/* 16 columns of a float-type row as f32 (masked tail: lanes past the row are zero). */
AI __m512 ld_wf(enum ggml_type t, const uint8_t *row, int64_t k, __mmask16 m)
{
    switch (t) {
    case GGML_TYPE_F16:
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k));
    case GGML_TYPE_BF16:
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)row + k)), 16));
    default:
        return _mm512_maskz_loadu_ps(m, (const float *)row + k);
    }
}

/* 4 rows x TT tokens, dot products over all columns, 16 columns per step; each weight vector
 * is converted once and used for TT tokens. */
AI void kern_f(enum ggml_type t, const int TT, const uint8_t *const *w, int64_t cols,
               const float *const *x, float *out /* [4][TT] */, const uint8_t *next, size_t share)
{
    __m512 acc[4][6];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 6
        for (int j = 0; j < TT; j++)
            acc[r][j] = _mm512_setzero_ps();
    for (int64_t k = 0; k < cols; k += 16) {
        __mmask16 m = cols - k >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (cols - k)) - 1);
        pf_share(next, k / 16, share);
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            wv[r] = ld_wf(t, w[r], k, m);
#pragma GCC unroll 6
        for (int j = 0; j < TT; j++) {
            __m512 xv = _mm512_maskz_loadu_ps(m, x[j] + k);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 6
        for (int j = 0; j < TT; j++)
            out[r * 6 + j] = _mm512_reduce_add_ps(acc[r][j]);
}

AI void gemm_f_t(enum ggml_type t, const void *W, size_t ws, int64_t nrows, int64_t cols,
                 const float *X, int64_t xs, const int32_t *x_idx, int64_t n_tok, float *Y,
                 int64_t ys, const int32_t *y_idx, int64_t r0)
{
    for (int64_t t0 = 0; t0 < n_tok; t0 += 6) {
        int tt = (int)(n_tok - t0 < 6 ? n_tok - t0 : 6);
        const float *xp[6];
        for (int j = 0; j < 6; j++) {
            int64_t tok = t0 + (j < tt ? j : 0);
            xp[j] = X + (x_idx ? x_idx[tok] : tok) * xs;
        }
        /* the next 4 rows prefetched into L2 a 16-column step's share at a time: four row
         * streams alone left decode waiting on DRAM (f16 7.7 GB per CPU s on the Zen 5 VM) */
        const size_t share = 4 * ws / (size_t)((cols + 15) / 16);
        for (int64_t r = 0; r < nrows; r += 4) {
            const uint8_t *wp[4];
            for (int i = 0; i < 4; i++)
                wp[i] = (const uint8_t *)W + (size_t)(r + i < nrows ? r + i : r) * ws;
            const uint8_t *next = r + 8 <= nrows ? (const uint8_t *)W + (size_t)(r + 4) * ws : NULL;
            float out[4 * 6];
            switch (tt) {
            case 6:
                kern_f(t, 6, wp, cols, xp, out, next, share);
                break;
            case 5:
                kern_f(t, 5, wp, cols, xp, out, next, share);
                break;
            case 4:
                kern_f(t, 4, wp, cols, xp, out, next, share);
                break;
            case 3:
                kern_f(t, 3, wp, cols, xp, out, next, share);
                break;
            case 2:
                kern_f(t, 2, wp, cols, xp, out, next, share);
                break;
            default:
                kern_f(t, 1, wp, cols, xp, out, next, share);
                break;
            }
            for (int j = 0; j < tt; j++) {
                int64_t tok = t0 + j;
                float *yrow = Y + (y_idx ? y_idx[tok] : tok) * ys + r0;
                for (int i = 0; i < 4 && r + i < nrows; i++)
                    yrow[r + i] = out[i * 6 + j];
            }
        }
    }
}

static int gemm_f_supported(enum ggml_type t)
{
    return t == GGML_TYPE_F32 || t == GGML_TYPE_F16 || t == GGML_TYPE_BF16;
}

static void gemm_f(enum ggml_type t, const void *W, size_t ws, int64_t nrows, int64_t cols,
                   const float *X, int64_t xs, const int32_t *x_idx, int64_t n_tok, float *Y,
                   int64_t ys, const int32_t *y_idx, int64_t r0)
{
    switch (t) {
    case GGML_TYPE_F16:
        gemm_f_t(GGML_TYPE_F16, W, ws, nrows, cols, X, xs, x_idx, n_tok, Y, ys, y_idx, r0);
        break;
    case GGML_TYPE_BF16:
        gemm_f_t(GGML_TYPE_BF16, W, ws, nrows, cols, X, xs, x_idx, n_tok, Y, ys, y_idx, r0);
        break;
    default:
        gemm_f_t(GGML_TYPE_F32, W, ws, nrows, cols, X, xs, x_idx, n_tok, Y, ys, y_idx, r0);
        break;
    }
}

/* ------------------------------------------------------------ AMX (q8_0) */

#define AMX_TARGET                                                                                 \
    __attribute__((target("amx-tile,amx-int8,avx512f,avx512bw,avx512vl,avx512dq,f16c")))

struct amx_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

static int g_amx;

static void amx_probe(void)
{
#if defined(__linux__)
    if (!cpu_features()->amx_tile || !cpu_features()->amx_int8) return;
    /* ARCH_REQ_XCOMP_PERM (0x1023) for XFEATURE_XTILEDATA (18): the kernel must enable the
     * 8 KiB tile state for this process before any tile instruction */
    if (syscall(SYS_arch_prctl, 0x1023, 18) != 0) return;
    g_amx = 1;
#endif
}

static int amx_supported(enum ggml_type t)
{
    return t == GGML_TYPE_Q8_0;
}

/* 16 tokens x 32 bytes (rows[] as ymm) are exactly the weight-panel transpose. */
static void amx_act(const int8_t *aq, const float *ad, int64_t ntok, int64_t cols, uint8_t *bp,
                    float *dyp)
{
    const int64_t nb = cols / 32;
    for (int64_t b = 0; b < nb; b++) {
        __m256i rows[16];
        for (int t = 0; t < 16; t++) {
            rows[t] = t < ntok ? _mm256_loadu_si256((const __m256i *)(aq + t * cols + 32 * b))
                               : _mm256_setzero_si256();
            dyp[b * 16 + t] = t < ntok ? ad[t * nb + b] : 0.f;
        }
        transpose_store(rows, bp + b * 512);
    }
}

/* C = A (weights, nrows x 32 s8 straight from the q8_0 rows, row stride ws) . B (16 tokens);
 * two tile sets alternate between even and odd blocks so the AVX-512 scaling of one block
 * overlaps the tile work of the next. Per block and row: cvt, mul by the token scales, FMA with
 * the row's block scale. */
AMX_TARGET static void amx_kernel(enum ggml_type t, const void *W, size_t ws, int64_t nrows,
                                  int64_t cols, const uint8_t *bp, const float *dyp, int64_t n_tok,
                                  float *Y, int64_t ys, const int32_t *y_idx, int64_t r0, void *tmp)
{
    (void)t;
    const int64_t nb = cols / 32;
    float *dx = (float *)(((uintptr_t)tmp + 63) & ~(uintptr_t)63); /* [b][16] */
    int32_t *cbuf = (int32_t *)(dx + nb * 16);                     /* 2 x 16 x 16 */
    if (nrows < 16) memset(cbuf, 0, 2 * 256 * sizeof *cbuf); /* rows past nrows: read, never stored */
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < 16; r++)
            dx[b * 16 + r] =
                r < nrows
                    ? g_f16[((const struct block_q8_0 *)((const uint8_t *)W + (size_t)r * ws) + b)
                                ->d]
                    : 0.f;
    struct amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int k = 0; k < 2; k++) {
        cfg.rows[3 * k + 0] = (uint8_t)nrows, cfg.colsb[3 * k + 0] = 32; /* A */
        cfg.rows[3 * k + 1] = 8, cfg.colsb[3 * k + 1] = 64;              /* B */
        cfg.rows[3 * k + 2] = (uint8_t)nrows, cfg.colsb[3 * k + 2] = 64; /* C */
    }
    _tile_loadconfig(&cfg);
    const uint8_t *wq = (const uint8_t *)W + 2; /* qs of block 0 of row 0 */
    for (int64_t g0 = 0; g0 < n_tok; g0 += 16) {
        const int64_t G = g0 / 16;
        const uint8_t *bg = bp + G * nb * 512;
        const float *dg = dyp + G * nb * 16;
        __m512 acc[16];
        for (int r = 0; r < 16; r++)
            acc[r] = _mm512_setzero_ps();
        int64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            _tile_loadd(0, wq + b * 34, (long)ws);
            _tile_loadd(1, bg + b * 512, 64);
            _tile_zero(2);
            _tile_loadd(3, wq + (b + 1) * 34, (long)ws);
            _tile_loadd(4, bg + (b + 1) * 512, 64);
            _tile_zero(5);
            _tile_dpbssd(2, 0, 1);
            _tile_dpbssd(5, 3, 4);
            _tile_stored(2, cbuf, 64);
            _tile_stored(5, cbuf + 256, 64);
            for (int k = 0; k < 2; k++) {
                __m512 dy = _mm512_loadu_ps(dg + (b + k) * 16);
                const float *dxb = dx + (b + k) * 16;
                const int32_t *c = cbuf + 256 * k;
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) {
                    __m512 f =
                        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(c + 16 * r)), dy);
                    acc[r] = _mm512_fmadd_ps(f, _mm512_set1_ps(dxb[r]), acc[r]);
                }
            }
        }
        for (; b < nb; b++) {
            _tile_loadd(0, wq + b * 34, (long)ws);
            _tile_loadd(1, bg + b * 512, 64);
            _tile_zero(2);
            _tile_dpbssd(2, 0, 1);
            _tile_stored(2, cbuf, 64);
            __m512 dy = _mm512_loadu_ps(dg + b * 16);
#pragma GCC unroll 16
            for (int r = 0; r < 16; r++) {
                __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_loadu_si512(cbuf + 16 * r)), dy);
                acc[r] = _mm512_fmadd_ps(f, _mm512_set1_ps(dx[b * 16 + r]), acc[r]);
            }
        }
        /* acc[r] holds 16 tokens of row r; Y is token-major */
        float out[16][16];
        for (int r = 0; r < 16; r++)
            _mm512_storeu_ps(out[r], acc[r]);
        int64_t tt = n_tok - g0 < 16 ? n_tok - g0 : 16;
        for (int64_t k = 0; k < tt; k++) {
            float *yrow = Y + (y_idx ? y_idx[g0 + k] : g0 + k) * ys + r0;
            for (int64_t r = 0; r < nrows; r++)
                yrow[r] = out[r][k];
        }
    }
    _tile_release();
}

/* One token (decode) through the AMX kernel's arithmetic without the tile unit: the tiles do 16
 * tokens' work for one and round-trip every block's int32 results through memory, which made m = 1
 * compute-bound (5.5 GB/s of weights per thread, half what the DRAM gives). Here the 16 rows of a
 * slab are the 16 lanes: per block, the exact int32 dot of each row with the token's block (u8 x s8
 * vpdpbusd on w + 128, then - 128 * sum y: the same integer tdpbssd computes), reduced across
 * lanes by integer adds (exact in any order), then acc = fma(cvt(dot) * d_token, d_row, acc): the
 * operations, operands and order of amx_kernel's per-(row, token) chain, so its bits equal
 * amx_kernel's for every row (batch invariance: m = 1 here, m > 1 on the tiles; tested by
 * matmul/amx_gemv1_equals_amx and the model invariance tests). The next slab is prefetched into L2
 * one block's share at a time. */
AI __m512i even_odd_add(__m512i a, __m512i b)
{
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ie, b), _mm512_permutex2var_epi32(a, io, b));
}

static void amx_gemv1(const void *W, size_t ws, int64_t nrows, int64_t cols, const int8_t *aq,
                      const float *ad, const int32_t *ai, float *y)
{
    const int64_t nb = cols / 32;
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    for (int64_t s0 = 0; s0 < nrows; s0 += 16) {
        const int n = nrows - s0 < 16 ? (int)(nrows - s0) : 16;
        const uint8_t *slab = (const uint8_t *)W + (size_t)s0 * ws;
        const uint8_t *rp[16];
        int32_t off[16];
        for (int r = 0; r < 16; r++) { /* rows past n read row 0 again; never stored */
            rp[r] = slab + (size_t)(r < n ? r : 0) * ws;
            off[r] = (int32_t)((size_t)(r < n ? r : 0) * ws);
        }
        const __m512i voff = _mm512_loadu_si512(off);
        const uint8_t *next = slab + 16 * ws;
        const size_t share = 16 * ws / (size_t)nb; /* bytes of the next slab per block */
        __m512 acc = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; b++) {
            for (size_t k = 0; k < share; k += 64)
                _mm_prefetch((const char *)next + (size_t)b * share + k, _MM_HINT_T1);
            const __m512i yb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(aq + 32 * b)));
            __m512i v[8];
            for (int k = 0; k < 8; k++) {
                const __m256i w0 = _mm256_loadu_si256((const __m256i *)(rp[2 * k] + 34 * b + 2));
                const __m256i w1 = _mm256_loadu_si256((const __m256i *)(rp[2 * k + 1] + 34 * b + 2));
                __m512i w = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1), flip);
                v[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, yb);
            }
            __m512i l0 = even_odd_add(v[0], v[1]), l1 = even_odd_add(v[2], v[3]);
            __m512i l2 = even_odd_add(v[4], v[5]), l3 = even_odd_add(v[6], v[7]);
            __m512i m0 = even_odd_add(l0, l1), m1 = even_odd_add(l2, l3);
            __m512i dot = _mm512_sub_epi32(even_odd_add(m0, m1), _mm512_set1_epi32(128 * ai[b]));
            __m512i dh = _mm512_i32gather_epi32(voff, (const void *)((const uint8_t *)W + (size_t)s0 * ws + 34 * b), 1);
            __m512 dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(ad[b]));
            acc = _mm512_fmadd_ps(f, dx, acc);
        }
        _mm512_mask_storeu_ps(y + s0, (__mmask16)((1u << n) - 1), acc);
    }
}

/* A few tokens (m = 2..16: a lockstep batch, a speculative verify, a short prefill chunk) through
 * the same arithmetic, each weight read once for all of them: per 16-row slab and 32-column block
 * the 16 rows x 32 bytes are transposed in registers into 8 zmm of (16 rows x 4 bytes), made
 * unsigned (w + 128), and each token's block enters them as 8 broadcasts of 4 activation bytes
 * into vpdpbusd, starting from -128 * sum y: the exact int32 dot of every row (lane) with that
 * token's block, which is the integer tdpbssd computes; then acc = fma(cvt(dot) * d_token, d_row,
 * acc), amx_kernel's chain. The transpose is paid once per block for all m tokens (the per-token
 * cost is 8 vpdpbusd and the scale steps, no cross-lane reduction as in amx_gemv1). More than 16
 * tokens: groups of at most 16 per slab, the slab's weights from L1/L2 for the second group. */
/* a[r] = rows r (low half) and r + 8 (high half) of a block -> w[g] = (16 rows x 4 bytes) of
 * columns 4g..4g + 3 (the panel's layout), made unsigned (w ^ 0x80) when flip (q8_0) */
AI void transpose_rows(const __m512i *a, __m512i *w, const int flip)
{
    __m512i t[8], u[8];
#pragma GCC unroll 4
    for (int r = 0; r < 8; r += 2) {
        t[r] = _mm512_unpacklo_epi32(a[r], a[r + 1]);
        t[r + 1] = _mm512_unpackhi_epi32(a[r], a[r + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {
        u[h + 0] = _mm512_unpacklo_epi64(t[h + 0], t[h + 2]);
        u[h + 1] = _mm512_unpackhi_epi64(t[h + 0], t[h + 2]);
        u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    const __m512i ia = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i ib = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    const __m512i fl = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        w[j] = _mm512_permutex2var_epi64(u[j], ia, u[j + 4]);
        w[j + 4] = _mm512_permutex2var_epi64(u[j], ib, u[j + 4]);
        if (flip) w[j] = _mm512_xor_si512(w[j], fl), w[j + 4] = _mm512_xor_si512(w[j + 4], fl);
    }
}

AI void slab_block(const uint8_t *const *rp, int64_t b, __m512i *w)
{
    __m512i a[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        a[r] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rp[r] + 34 * b + 2))),
            _mm256_loadu_si256((const __m256i *)(rp[r + 8] + 34 * b + 2)), 1);
    transpose_rows(a, w, 1);
}

/* One slab (n <= 16 rows at slab, lanes past n read row 0 again and are never stored) x M tokens
 * (token t: aq + t * cols, ad/ai + t * nb, output yrow[t]); next: the slab to prefetch into L2
 * (NULL: none). */
AI void gemvm_slab(const int M, const uint8_t *slab, size_t ws, int n, int64_t cols,
                   const int8_t *aq, const float *ad, const int32_t *ai, float *const *yrow,
                   const uint8_t *next)
{
    const int64_t nb = cols / 32;
    const uint8_t *rp[16];
    int32_t off[16];
    for (int r = 0; r < 16; r++) {
        rp[r] = slab + (size_t)(r < n ? r : 0) * ws;
        off[r] = (int32_t)((size_t)(r < n ? r : 0) * ws);
    }
    const __m512i voff = _mm512_loadu_si512(off);
    const size_t share = 16 * ws / (size_t)nb;
    __m512 acc[16];
#pragma GCC unroll 16
    for (int t = 0; t < M; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        if (next)
            for (size_t k = 0; k < share; k += 64)
                _mm_prefetch((const char *)next + (size_t)b * share + k, _MM_HINT_T1);
        __m512i w[8];
        slab_block(rp, b, w);
        __m512i dh = _mm512_i32gather_epi32(voff, (const void *)(slab + 34 * b), 1);
        __m512 dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
#pragma GCC unroll 16
        for (int t = 0; t < M; t++) {
            const int8_t *y = aq + t * cols + 32 * b;
            __m512i s = _mm512_set1_epi32(-128 * ai[t * nb + b]);
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t y4;
                memcpy(&y4, y + 4 * g, 4);
                s = _mm512_dpbusd_epi32(s, w[g], _mm512_set1_epi32(y4));
            }
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_set1_ps(ad[t * nb + b]));
            acc[t] = _mm512_fmadd_ps(f, dx, acc[t]);
        }
    }
    const __mmask16 mask = (__mmask16)((1u << n) - 1);
#pragma GCC unroll 16
    for (int t = 0; t < M; t++)
        _mm512_mask_storeu_ps(yrow[t], mask, acc[t]);
}

/* The same products with the tile unit doing the integer dots the other way round: A = the M
 * tokens' 32-byte blocks straight from the A8 panel (row stride cols), B = the slab's block
 * transposed in registers (as slab_block, without the flip: tdpbssd is s8 x s8) and stored to a
 * 512-byte buffer, C = M tokens x 16 rows int32, so per token and block one row of C is the 16
 * rows' exact dots in one zmm and the scale steps are amx_kernel's chain (cvt, * d_token, fma with
 * d_row) once per token, not once per row: 3 vector ops per token and block instead of the 12 of
 * gemvm_slab and the 48 of amx_kernel. Two tile sets alternate between even and odd blocks.
 * The transpose repeats slab_block's on purpose: one shared always-inline helper (same
 * instruction counts, other register allocation) measured m = 8 steps 40.3-43.0 vs 39.5-40.2 ms
 * (qwen3-0.6b q8_0, 2 threads, quiet SPR VM, 2026-12-06, three alternating runs). */
AI void slab_block_s8(const uint8_t *const *rp, int64_t b, uint8_t *out)
{
    __m512i a[8], t[8], u[8];
#pragma GCC unroll 8
    for (int r = 0; r < 8; r++)
        a[r] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rp[r] + 34 * b + 2))),
            _mm256_loadu_si256((const __m256i *)(rp[r + 8] + 34 * b + 2)), 1);
#pragma GCC unroll 4
    for (int r = 0; r < 8; r += 2) {
        t[r] = _mm512_unpacklo_epi32(a[r], a[r + 1]);
        t[r + 1] = _mm512_unpackhi_epi32(a[r], a[r + 1]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 8; h += 4) {
        u[h + 0] = _mm512_unpacklo_epi64(t[h + 0], t[h + 2]);
        u[h + 1] = _mm512_unpackhi_epi64(t[h + 0], t[h + 2]);
        u[h + 2] = _mm512_unpacklo_epi64(t[h + 1], t[h + 3]);
        u[h + 3] = _mm512_unpackhi_epi64(t[h + 1], t[h + 3]);
    }
    const __m512i ia = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i ib = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        _mm512_store_si512(out + 64 * j, _mm512_permutex2var_epi64(u[j], ia, u[j + 4]));
        _mm512_store_si512(out + 64 * (j + 4), _mm512_permutex2var_epi64(u[j], ib, u[j + 4]));
    }
}

/* Blocks b (and b + 1 when two) transposed into out (512 bytes each). */
AI void slab_pair_s8(const uint8_t *const *rp, int64_t b, int two, uint8_t *out)
{
    slab_block_s8(rp, b, out);
    if (two) slab_block_s8(rp, b + 1, out + 512);
}

/* The scale steps of pair q (blocks 2q, 2q + 1 < nb) from its C results. */
AI void tilem_scale(const int M, const uint8_t *slab, __m512i voff, int64_t nb, int64_t q,
                    const int32_t *c, const float *ad, __m512 *acc)
{
    for (int k = 0; k < 2 && 2 * q + k < nb; k++) {
        const int64_t b = 2 * q + k;
        __m512i dh = _mm512_i32gather_epi32(voff, (const void *)(slab + 34 * b), 1);
        __m512 dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
#pragma GCC unroll 16
        for (int t = 0; t < M; t++) {
            __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 256 * k + 16 * t)),
                                     _mm512_set1_ps(ad[t * nb + b]));
            acc[t] = _mm512_fmadd_ps(f, dx, acc[t]);
        }
    }
}

/* Software-pipelined over pairs of blocks: while the tiles work on pair p, the registers
 * transpose pair p + 1 (into the other B buffer) and scale pair p - 1 (from the other C buffer),
 * so no vector load waits on the tile store just issued, nor a tile load on the vector stores.
 * The scale steps still run in block order. */
AMX_TARGET AI void tilem_slab(const int M, const uint8_t *slab, size_t ws, int n, int64_t cols,
                              const int8_t *aq, const float *ad, float *const *yrow,
                              const uint8_t *next, uint8_t *buf /* 64-aligned, 6 KB */)
{
    const int64_t nb = cols / 32, np = (nb + 1) / 2;
    const uint8_t *rp[16];
    int32_t off[16];
    for (int r = 0; r < 16; r++) {
        rp[r] = slab + (size_t)(r < n ? r : 0) * ws;
        off[r] = (int32_t)((size_t)(r < n ? r : 0) * ws);
    }
    const __m512i voff = _mm512_loadu_si512(off);
    const size_t share = 16 * ws / (size_t)nb;
    uint8_t *bb = buf;                     /* B: 2 pairs x 2 x 512 */
    int32_t *cb = (int32_t *)(buf + 2048); /* C: 2 pairs x 2 x 16 x 16 */
    __m512 acc[16];
#pragma GCC unroll 16
    for (int t = 0; t < M; t++)
        acc[t] = _mm512_setzero_ps();
    slab_pair_s8(rp, 0, nb > 1, bb);
    for (int64_t p = 0; p < np; p++) {
        const int64_t b = 2 * p;
        const int two = b + 1 < nb;
        const uint8_t *B = bb + (p & 1) * 1024;
        int32_t *C = cb + (p & 1) * 512;
        if (next)
            for (size_t k = 0; k < 2 * share; k += 64)
                _mm_prefetch((const char *)next + (size_t)b * share + k, _MM_HINT_T1);
        _tile_loadd(0, aq + 32 * b, (long)cols);
        _tile_loadd(1, B, 64);
        _tile_zero(2);
        if (two) {
            _tile_loadd(3, aq + 32 * (b + 1), (long)cols);
            _tile_loadd(4, B + 512, 64);
            _tile_zero(5);
        }
        _tile_dpbssd(2, 0, 1);
        if (two) _tile_dpbssd(5, 3, 4);
        _tile_stored(2, C, 64);
        if (two) _tile_stored(5, C + 256, 64);
        if (p + 1 < np) slab_pair_s8(rp, b + 2, b + 3 < nb, bb + ((p + 1) & 1) * 1024);
        if (p > 0) tilem_scale(M, slab, voff, nb, p - 1, cb + ((p - 1) & 1) * 512, ad, acc);
    }
    tilem_scale(M, slab, voff, nb, np - 1, cb + ((np - 1) & 1) * 512, ad, acc);
    const __mmask16 mask = (__mmask16)((1u << n) - 1);
#pragma GCC unroll 16
    for (int t = 0; t < M; t++)
        _mm512_mask_storeu_ps(yrow[t], mask, acc[t]);
}

AMX_TARGET static void tilem_config(int M)
{
    struct amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int k = 0; k < 2; k++) {
        cfg.rows[3 * k + 0] = (uint8_t)M, cfg.colsb[3 * k + 0] = 32; /* A: tokens x 32 s8 */
        cfg.rows[3 * k + 1] = 8, cfg.colsb[3 * k + 1] = 64;          /* B: 8 x (16 rows x 4) */
        cfg.rows[3 * k + 2] = (uint8_t)M, cfg.colsb[3 * k + 2] = 64; /* C: tokens x 16 int32 */
    }
    /* GCC (seen with 12-13) drops the stores above as dead: it does not see ldtilecfg read them */
    __asm__ volatile("" : : "m"(cfg) : "memory");
    _tile_loadconfig(&cfg);
}

AMX_TARGET static void tilem_release(void)
{
    _tile_release();
}

AMX_TARGET static void tilem_group(int64_t tt, const uint8_t *slab, size_t ws, int n, int64_t cols,
                                   const int8_t *a, const float *d, float *const *yrow,
                                   const uint8_t *next, uint8_t *buf)
{
    switch (tt) {
#define TILEM_CASE(M)                                                                              \
    case M:                                                                                        \
        tilem_slab(M, slab, ws, n, cols, a, d, yrow, next, buf);                                   \
        break;
        TILEM_CASE(16) TILEM_CASE(15) TILEM_CASE(14) TILEM_CASE(13) TILEM_CASE(12) TILEM_CASE(11)
        TILEM_CASE(10) TILEM_CASE(9) TILEM_CASE(8) TILEM_CASE(7) TILEM_CASE(6) TILEM_CASE(5)
        TILEM_CASE(4) TILEM_CASE(3) TILEM_CASE(2)
#undef TILEM_CASE
    default:
        tilem_slab(1, slab, ws, n, cols, a, d, yrow, next, buf);
        break;
    }
}

/* Token groups of at least this many run tilem_slab, smaller ones gemvm_slab (same bits). */
static int g_tilem_min = MM_AMX_SMALL_TILES_DEFAULT;
static void amx_set_tilem_min(int m)
{
    g_tilem_min = m;
}

static void amx_gemvm(const void *W, size_t ws, int64_t nrows, int64_t cols, const int8_t *aq,
                      const float *ad, const int32_t *ai, int64_t n_tok, float *Y, int64_t ys,
                      const int32_t *y_idx, int64_t r0)
{
    if (n_tok == 1) {
        amx_gemv1(W, ws, nrows, cols, aq, ad, ai, Y + (y_idx ? y_idx[0] : 0) * ys + r0);
        return;
    }
    const int64_t nb = cols / 32, ng = (n_tok + 15) / 16;
    _Alignas(64) uint8_t buf[6144]; /* tilem_slab: B 2 x 1 KB, C 2 x 2 KB */
    int cfg_m = 0; /* tile configuration loaded for groups of cfg_m tokens (0: none) */
    for (int64_t s0 = 0; s0 < nrows; s0 += 16) {
        const int n = nrows - s0 < 16 ? (int)(nrows - s0) : 16;
        const uint8_t *slab = (const uint8_t *)W + (size_t)s0 * ws;
        for (int64_t G = 0, t0 = 0; G < ng; G++) {
            const int64_t tt = n_tok / ng + (G < n_tok % ng);
            float *yrow[16];
            for (int64_t t = 0; t < tt; t++)
                yrow[t] = Y + (y_idx ? y_idx[t0 + t] : t0 + t) * ys + r0 + s0;
            const int8_t *a = aq + t0 * cols;
            const float *d = ad + t0 * nb;
            const int32_t *s = ai + t0 * nb;
            const uint8_t *next = G == 0 ? slab + 16 * ws : NULL;
            if (tt >= g_tilem_min) {
                if (cfg_m != tt) tilem_config((int)tt), cfg_m = (int)tt;
                tilem_group(tt, slab, ws, n, cols, a, d, yrow, next, buf);
                t0 += tt;
                continue;
            }
            switch (tt) {
#define GEMVM_CASE(M)                                                                              \
    case M:                                                                                        \
        gemvm_slab(M, slab, ws, n, cols, a, d, s, yrow, next);                                     \
        break;
                GEMVM_CASE(16) GEMVM_CASE(15) GEMVM_CASE(14) GEMVM_CASE(13) GEMVM_CASE(12)
                GEMVM_CASE(11) GEMVM_CASE(10) GEMVM_CASE(9) GEMVM_CASE(8) GEMVM_CASE(7)
                GEMVM_CASE(6) GEMVM_CASE(5) GEMVM_CASE(4) GEMVM_CASE(3) GEMVM_CASE(2)
#undef GEMVM_CASE
            default:
                gemvm_slab(1, slab, ws, n, cols, a, d, s, yrow, next);
                break;
            }
            t0 += tt;
        }
    }
    if (cfg_m) tilem_release();
}

/* ------------------------------------------------------------ small m on the packed path */

/* the most tokens the direct kernels take (mm_set_vnni_small_max is clamped to it) */
#define MM_SMALL_MAX_TOK 64

/* How far ahead the direct kernels prefetch into L2, in 16-row slabs (0: not at all); set by
 * mm_calibrate (the 16 interleaved row streams of a slab are more than the hardware prefetcher
 * follows: without it one thread read 8.2 GB/s, with one slab 19.7, Zen 5 VM). */
static int g_pf_slabs[2] = {MM_PF_SLABS_DEFAULT, MM_PF_SLABS_DEFAULT}; /* [slab layout] */
static void set_pf_slabs(int slab_layout, int slabs)
{
    g_pf_slabs[slab_layout != 0] = slabs;
}

/* q8_0 products of a few tokens (decode m = 1, a lockstep batch, a speculative verify, a short
 * prefill chunk) on CPUs without AMX, with no weight panel: the packed path's arithmetic exactly.
 * pack + kernel compute, per row r, token t and 32-column block b, the exact int32 dot
 * sum (w + 128) y of the unsigned quants (w ^ 0x80) with the token's int8 block, then
 * f = cvt(dot) * d_r; acc = fma(f, d_t, acc); acc = fnmadd(128 * d_r, d_t * sum y, acc) in block
 * order. Here the same integers come from the rows read in place and the same float steps follow
 * with the same operands, so every output has the bits of pack + kernel (batch invariance: any
 * m, any path; tested by matmul/vnni_small_equals_packed and the model invariance tests):
 *  - m = 1: the 16 rows of a slab are the 16 lanes, each row's block dotted as 8 int32 partials
 *    and reduced across lanes by integer adds (as amx_gemv1), no transpose;
 *  - m >= 2: the slab's block transposed in registers to 16 rows x 4 bytes (slab_block: the
 *    panel's layout, never stored), then per token 8 broadcast vpdpbusd, as the kernel does.
 * The next slab is prefetched into L2 one block's share at a time (the panel packer's pattern). */
/* The byte offsets r * ws of a full slab's 16 rows, for the scale gathers. */
AI __m512i row_offsets(size_t ws)
{
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                              _mm512_set1_epi32((int32_t)ws));
}

/* Rows of a full 16-row slab: row r at p + r * ws. The direct kernels address a row as
 * base + index * {1,2,4} from ws, 3 ws, 5 ws, 7 ws (six registers for sixteen rows): written as
 * plain C, GCC hoists the sixteen row bases out of the block loop, where they do not fit the
 * general registers and come back from xmm spills and lea chains every block. */
struct slab_rows {
    const uint8_t *p;
    size_t ws, w3, w5, w7;
};

AI struct slab_rows slab_rows(const uint8_t *p, size_t ws)
{
    return (struct slab_rows){p, ws, 3 * ws, 5 * ws, 7 * ws};
}

/* 32 bytes of row r (0..15) at offset o. The weights are read-only while a product runs, so the
 * load needs no memory operand for the compiler. */
AI __m256i ld_row(const struct slab_rows *s, int r, size_t o)
{
    const uint8_t *b = s->p + o;
    if (r >= 8) b += 8 * s->ws;
    __m512i v;
    switch (r & 7) {
    case 0:
        __asm__("vmovdqu64 (%1), %t0" : "=v"(v) : "r"(b));
        break;
    case 1:
        __asm__("vmovdqu64 (%1,%2,1), %t0" : "=v"(v) : "r"(b), "r"(s->ws));
        break;
    case 2:
        __asm__("vmovdqu64 (%1,%2,2), %t0" : "=v"(v) : "r"(b), "r"(s->ws));
        break;
    case 3:
        __asm__("vmovdqu64 (%1,%2,1), %t0" : "=v"(v) : "r"(b), "r"(s->w3));
        break;
    case 4:
        __asm__("vmovdqu64 (%1,%2,4), %t0" : "=v"(v) : "r"(b), "r"(s->ws));
        break;
    case 5:
        __asm__("vmovdqu64 (%1,%2,1), %t0" : "=v"(v) : "r"(b), "r"(s->w5));
        break;
    case 6:
        __asm__("vmovdqu64 (%1,%2,2), %t0" : "=v"(v) : "r"(b), "r"(s->w3));
        break;
    default:
        __asm__("vmovdqu64 (%1,%2,1), %t0" : "=v"(v) : "r"(b), "r"(s->w7));
        break;
    }
    return _mm512_castsi512_si256(v);
}

/* Rows 2k (low half) and 2k + 1 (high half) at offset o as one zmm. */
AI __m512i pair_load(const struct slab_rows *s, int k, size_t o)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(ld_row(s, 2 * k, o)), ld_row(s, 2 * k + 1, o), 1);
}

/* v[k] = vpdpbusd partials of rows 2k (lanes 0-7) and 2k + 1 (lanes 8-15) -> the rows' sums of
 * lanes 0-3 (columns 0-15) and 4-7 (columns 16-31) as pairs: m[0] rows 0-7, m[1] rows 8-15, lane
 * 2i = row's half 0, 2i + 1 = half 1 (integer adds: exact in any order). */
AI void reduce_pairs(const __m512i *v, __m512i *m)
{
    __m512i l0 = even_odd_add(v[0], v[1]), l1 = even_odd_add(v[2], v[3]);
    __m512i l2 = even_odd_add(v[4], v[5]), l3 = even_odd_add(v[6], v[7]);
    m[0] = even_odd_add(l0, l1), m[1] = even_odd_add(l2, l3);
}

/* The packed path's float steps for one block and one token with 16 rows as lanes: kern's chain
 * (f = cvt(dot) * d_row; acc = fma(f, d_tok, acc); acc = fnmadd(m_row, d_tok * sum y, acc)). */
AI __m512 step32(__m512 acc, __m512i dot, __m512 dx, __m512 mx, float ad, float as)
{
    __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(dot), dx);
    acc = _mm512_fmadd_ps(f, _mm512_set1_ps(ad), acc);
    return _mm512_fnmadd_ps(mx, _mm512_set1_ps(as), acc);
}


/* One block of a full slab (quants at offset o): the 16 rows' exact dots sum (w + 128) y in
 * lanes 0..15. */
AI __m512i gemv1_block_q8(const struct slab_rows *sr, size_t o, __m512i yb)
{
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    __m512i v[8], m[2];
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++)
        v[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_xor_si512(pair_load(sr, k, o), flip), yb);
    reduce_pairs(v, m);
    return even_odd_add(m[0], m[1]);
}

/* q8_0, one token, one full slab (16 rows at slab). */
AI void gemv1_q8_slab(const uint8_t *slab, size_t ws, int64_t cols, const int8_t *aq,
                      const float *ad, const float *as, float *y, const uint8_t *next)
{
    const size_t bs = sizeof(struct block_q8_0);
    const int64_t nb = cols / 32;
    const __m512 k128 = _mm512_set1_ps(128.f);
    const __m512i voff = row_offsets(ws);
    const struct slab_rows sr = slab_rows(slab, ws);
    const size_t share = 16 * ws / (size_t)nb; /* bytes of the next slab per block */
    __m512 acc = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        pf_share(next, b, share);
        const __m512i yb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(aq + 32 * b)));
        const __m512i dot = gemv1_block_q8(&sr, bs * (size_t)b + 2, yb);
        __m512i dh = _mm512_i32gather_epi32(voff, (const void *)(slab + bs * (size_t)b), 1);
        __m512 dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
        acc = step32(acc, dot, dx, _mm512_mul_ps(dx, k128), ad[b], as[b]);
    }
    _mm512_storeu_ps(y, acc);
}

/* kern's and kern16's work for one block and M <= 8 tokens, on the block's 512-byte panel pb (in
 * L1, written just before): the same loops, so the same integers and the same float steps. */
AI void blk_tokens_w(const int M, const __m512i *w, __m512 dx, __m512 mx, const int8_t *ab,
                     int64_t cols, const float *ad, const float *as, int64_t nb, int64_t b,
                     __m512 *acc)
{
    __m512i acci[8];
#pragma GCC unroll 8
    for (int t = 0; t < M; t++)
        acci[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++) {
#pragma GCC unroll 8
        for (int t = 0; t < M; t++) {
            int32_t a4;
            memcpy(&a4, ab + t * cols + 4 * g, 4);
            acci[t] = _mm512_dpbusd_epi32(acci[t], w[g], _mm512_set1_epi32(a4));
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < M; t++)
        acc[t] = step32(acc[t], acci[t], dx, mx, ad[t * nb + b], as[t * nb + b]);
}

/* the same on a 512-byte block panel in memory (a slab's panel may be only 32-aligned) */
AI void blk_tokens(const int M, const uint8_t *pb, __m512 dx, __m512 mx, const int8_t *ab,
                   int64_t cols, const float *ad, const float *as, int64_t nb, int64_t b,
                   __m512 *acc)
{
    __m512i w[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        w[g] = _mm512_loadu_si512(pb + 64 * g);
    blk_tokens_w(M, w, dx, mx, ab, cols, ad, as, nb, b, acc);
}

AI void blk16_tokens_w(const int M, const __m512i *w, const __m512 *dx, const __m512 *mx,
                       const int8_t *ab, int64_t cols, const float *ad, const float *as16,
                       int64_t nb, int64_t b, __m512 *acc)
{
    __m512i lo[8], hi[8];
#pragma GCC unroll 8
    for (int t = 0; t < M; t++)
        lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        const __m512i w0 = w[g], w1 = w[g + 4];
#pragma GCC unroll 8
        for (int t = 0; t < M; t++) {
            int32_t a0, a1;
            memcpy(&a0, ab + t * cols + 4 * g, 4);
            memcpy(&a1, ab + t * cols + 16 + 4 * g, 4);
            lo[t] = _mm512_dpbusd_epi32(lo[t], w0, _mm512_set1_epi32(a0));
            hi[t] = _mm512_dpbusd_epi32(hi[t], w1, _mm512_set1_epi32(a1));
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < M; t++) {
        __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(hi[t]), dx[1],
                                   _mm512_mul_ps(_mm512_cvtepi32_ps(lo[t]), dx[0]));
        acc[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(ad[t * nb + b]), acc[t]);
        acc[t] = _mm512_fnmadd_ps(mx[0], _mm512_set1_ps(as16[t * 2 * nb + 2 * b]), acc[t]);
        acc[t] = _mm512_fnmadd_ps(mx[1], _mm512_set1_ps(as16[t * 2 * nb + 2 * b + 1]), acc[t]);
    }
}

AI void blk16_tokens(const int M, const uint8_t *pb, const __m512 *dx, const __m512 *mx,
                     const int8_t *ab, int64_t cols, const float *ad, const float *as16, int64_t nb,
                     int64_t b, __m512 *acc)
{
    __m512i w[8];
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        w[g] = _mm512_load_si512(pb + 64 * g);
    blk16_tokens_w(M, w, dx, mx, ab, cols, ad, as16, nb, b, acc);
}

/* transpose_rows' output to a 512-byte block panel */
AI void store_block(const __m512i *w, uint8_t *pb)
{
#pragma GCC unroll 8
    for (int g = 0; g < 8; g++)
        _mm512_store_si512(pb + 64 * g, w[g]);
}

/* All n tokens (2..MM_SMALL_MAX_TOK) of one block, in groups of 8 (the last one smaller):
 * acc[t] is token t's accumulator (memory when there are several groups, registers otherwise). */
AI void blk_groups(const uint8_t *pb, __m512 dx, __m512 mx, const int8_t *ab, int64_t n,
                   int64_t cols, const float *ad, const float *as, int64_t nb, int64_t b,
                   __m512 *acc)
{
    for (int64_t t0 = 0; t0 < n; t0 += 8) {
        const int64_t m = n - t0 < 8 ? n - t0 : 8;
        const int8_t *a = ab + t0 * cols;
        const float *d = ad + t0 * nb, *s = as + t0 * nb;
        switch (m) {
#define BLK_CASE(M)                                                                                \
    case M:                                                                                        \
        blk_tokens(M, pb, dx, mx, a, cols, d, s, nb, b, acc + t0);                                 \
        break;
            BLK_CASE(8) BLK_CASE(7) BLK_CASE(6) BLK_CASE(5) BLK_CASE(4) BLK_CASE(3) BLK_CASE(2)
#undef BLK_CASE
        default:
            blk_tokens(1, pb, dx, mx, a, cols, d, s, nb, b, acc + t0);
            break;
        }
    }
}

AI void blk16_groups(const uint8_t *pb, const __m512 *dx, const __m512 *mx, const int8_t *ab,
                     int64_t n, int64_t cols, const float *ad, const float *as16, int64_t nb,
                     int64_t b, __m512 *acc)
{
    for (int64_t t0 = 0; t0 < n; t0 += 8) {
        const int64_t m = n - t0 < 8 ? n - t0 : 8;
        const int8_t *a = ab + t0 * cols;
        const float *d = ad + t0 * nb, *s = as16 + t0 * 2 * nb;
        switch (m) {
#define BLK_CASE(M)                                                                                \
    case M:                                                                                        \
        blk16_tokens(M, pb, dx, mx, a, cols, d, s, nb, b, acc + t0);                               \
        break;
            BLK_CASE(8) BLK_CASE(7) BLK_CASE(6) BLK_CASE(5) BLK_CASE(4) BLK_CASE(3) BLK_CASE(2)
#undef BLK_CASE
        default:
            blk16_tokens(1, pb, dx, mx, a, cols, d, s, nb, b, acc + t0);
            break;
        }
    }
}

/* q8_0, n tokens (2..MM_SMALL_MAX_TOK), one full slab: per block the 16 rows transposed in
 * registers to the panel's layout and stored to a 512-byte block panel in L1 (pack + kernel's
 * panel is 16 bytes per column: 16-48 KB), then kern's loops for it. MG = 1: n <= 8 tokens, a
 * compile-time constant, their accumulators in registers; MG = 2: any n, groups of 8 per block,
 * the accumulators in memory. */
AI void vnni_slab_q8(const int MG, const uint8_t *slab, size_t ws, int64_t cols,
                     int64_t n, const int8_t *aq, const float *ad, const float *as,
                     float *const *yrow, const uint8_t *next)
{
    const size_t bs = sizeof(struct block_q8_0);
    const int64_t nb = cols / 32;
    const __m512i voff = row_offsets(ws);
    const __m512 k128 = _mm512_set1_ps(128.f);
    const struct slab_rows sr = slab_rows(slab, ws);
    const size_t share = 16 * ws / (size_t)nb;
    _Alignas(64) uint8_t pb[512];
    __m512 acc[MM_SMALL_MAX_TOK];
    for (int64_t t = 0; t < n; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        pf_share(next, b, share);
        __m512i a[8], w[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++)
            a[r] = _mm512_inserti64x4(_mm512_castsi256_si512(ld_row(&sr, r, bs * (size_t)b + 2)),
                                      ld_row(&sr, r + 8, bs * (size_t)b + 2), 1);
        transpose_rows(a, w, 1); /* u8 = w ^ 0x80 */
        store_block(w, pb);
        __m512i dh = _mm512_i32gather_epi32(voff, (const void *)(slab + bs * (size_t)b), 1);
        __m512 dx = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dh));
        if (MG == 1) blk_tokens((int)n, pb, dx, _mm512_mul_ps(dx, k128), aq + 32 * b, cols, ad, as, nb, b, acc);
        else blk_groups(pb, dx, _mm512_mul_ps(dx, k128), aq + 32 * b, n, cols, ad, as, nb, b, acc);
    }
    for (int64_t t = 0; t < n; t++)
        _mm512_storeu_ps(yrow[t], acc[t]);
}

/* q4_K / q5_K, one token, rows as lanes: per superblock the 16 rows' d, dmin and 6-bit scales and
 * mins from gathered dwords (pack_k4's operations: the same pd, pm bits), per 32-byte chunk of
 * quants both nibbles' blocks (j = 2c, 2c + 1) from one load per row, then per block the exact
 * int32 dots of the unsigned quants (as the panel holds them) and kern's float steps. */
AI void gemv1_k4_slab(enum ggml_type t, const uint8_t *slab, size_t ws, int64_t cols,
                      const int8_t *aq, const float *ad, const float *as, float *y,
                      const uint8_t *next)
{
    const size_t bs = quant_traits(t)->type_size;
    const int64_t nsb = cols / 256;
    const size_t qs_off = t == GGML_TYPE_Q4_K ? offsetof(struct block_q4_K, qs)
                                              : offsetof(struct block_q5_K, qs);
    const __m512i voff = row_offsets(ws);
    const __m512i n15 = _mm512_set1_epi8(15), b16 = _mm512_set1_epi8(16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const size_t share = 16 * ws / (size_t)(8 * nsb);
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *base = slab + (size_t)i * bs;
        const struct slab_rows sr = slab_rows(base, ws);
        __m512i g0 = _mm512_i32gather_epi32(voff, (const void *)base, 1);
        __m512i s0 = _mm512_i32gather_epi32(voff, (const void *)(base + 4), 1);
        __m512i s1 = _mm512_i32gather_epi32(voff, (const void *)(base + 8), 1);
        __m512i s2 = _mm512_i32gather_epi32(voff, (const void *)(base + 12), 1);
        __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
        __m512 dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g0, 16)));
        for (int c = 0; c < 4; c++) {
            __m512i x[8], qh[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                x[k] = pair_load(&sr, k, qs_off + 32 * c);
                if (t == GGML_TYPE_Q5_K) qh[k] = pair_load(&sr, k, offsetof(struct block_q5_K, qh));
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int j = 2 * c + h;
                const int64_t b = 8 * i + j;
                pf_share(next, b, share);
                const __m512i yb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(aq + 32 * b)));
                __m512i v[8], m[2];
#pragma GCC unroll 8
                for (int k = 0; k < 8; k++) {
                    __m512i u = _mm512_and_si512(h ? _mm512_srli_epi16(x[k], 4) : x[k], n15);
                    if (t == GGML_TYPE_Q5_K)
                        u = _mm512_or_si512(u, _mm512_and_si512(_mm512_slli_epi16(_mm512_srli_epi16(qh[k], j), 4), b16));
                    v[k] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yb);
                }
                reduce_pairs(v, m);
                __m512i dot = _mm512_add_epi32(_mm512_permutex2var_epi32(m[0], ie, m[1]),
                                               _mm512_permutex2var_epi32(m[0], io, m[1]));
                __m512i sc, mn;
                k4_sc_mn(j, s0, s1, s2, &sc, &mn);
                __m512 dx = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
                __m512 mx = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
                acc = step32(acc, dot, dx, mx, ad[b], as[b]);
            }
        }
    }
    _mm512_storeu_ps(y, acc);
}

/* q6_K, one token, rows as lanes: per superblock the 16 rows' d and signed scales from gathered
 * dwords (pack_q6k's operations), per block the 6-bit unsigned quants (as the panel holds them),
 * the exact int32 dots of each 16-column half, and kern16's float steps. */
AI void gemv1_q6k_slab(const uint8_t *slab, size_t ws, int64_t cols, const int8_t *aq,
                       const float *ad, const float *as16, float *y, const uint8_t *next)
{
    const size_t bs = sizeof(struct block_q6_K);
    const int64_t nsb = cols / 256, nb = cols / 32;
    const __m512i voff = row_offsets(ws);
    const __m512i n15 = _mm512_set1_epi8(15), n3 = _mm512_set1_epi8(3);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const __m512 k32 = _mm512_set1_ps(32.f);
    const size_t share = 16 * ws / (size_t)nb;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *base = slab + (size_t)i * bs;
        const struct slab_rows sr = slab_rows(base, ws);
        __m512i sg[4];
        for (int q = 0; q < 4; q++)
            sg[q] = _mm512_i32gather_epi32(voff, (const void *)(base + 192 + 4 * q), 1);
        __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
            _mm512_srli_epi32(_mm512_i32gather_epi32(voff, (const void *)(base + 206), 1), 16)));
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * i + j;
            pf_share(next, b, share);
            const int h = j / 4, k = j % 4;
            const __m512i yb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(aq + 32 * b)));
            __m512i v[8], m[2];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                __m512i lo = pair_load(&sr, r, offsetof(struct block_q6_K, ql) + 64 * h + 32 * (k % 2));
                if (k / 2) lo = _mm512_srli_epi16(lo, 4);
                __m512i hi = _mm512_srli_epi16(pair_load(&sr, r, offsetof(struct block_q6_K, qh) + 32 * h), 2 * k);
                __m512i u = _mm512_or_si512(_mm512_and_si512(lo, n15),
                                            _mm512_slli_epi16(_mm512_and_si512(hi, n3), 4));
                v[r] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, yb);
            }
            reduce_pairs(v, m);
            __m512i dlo = _mm512_permutex2var_epi32(m[0], ie, m[1]);
            __m512i dhi = _mm512_permutex2var_epi32(m[0], io, m[1]);
            __m512 dx[2];
            for (int u = 0; u < 2; u++) {
                const int idx = 2 * j + u;
                __m512i sc = q6k_sc(sg, idx);
                dx[u] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
            }
            /* kern16: f = fma(cvt(hi), dx1, cvt(lo) * dx0); acc = fma(f, d_t, acc); then the
             * two halves' min terms */
            __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dhi), dx[1],
                                       _mm512_mul_ps(_mm512_cvtepi32_ps(dlo), dx[0]));
            acc = _mm512_fmadd_ps(f, _mm512_set1_ps(ad[b]), acc);
            acc = _mm512_fnmadd_ps(_mm512_mul_ps(k32, dx[0]), _mm512_set1_ps(as16[2 * b]), acc);
            acc = _mm512_fnmadd_ps(_mm512_mul_ps(k32, dx[1]), _mm512_set1_ps(as16[2 * b + 1]), acc);
        }
    }
    _mm512_storeu_ps(y, acc);
}

/* q4_K / q5_K / q6_K, n tokens (2..MM_SMALL_MAX_TOK; MG as vnni_slab_q8), one full slab: per superblock the scales as the gemv1
 * kernels decode them (pack_k4 / pack_q6k's operations), per block the 16 rows' unsigned quants
 * transposed in registers to the panel's layout and stored to a 512-byte block panel in L1, then
 * kern's (q4_K, q5_K) or kern16's (q6_K: the two 16-column halves' dots apart) loops for it. */
AI void kq_slab_m(const int MG, enum ggml_type t, const uint8_t *slab, size_t ws,
                  int64_t cols, int64_t n, const int8_t *aq, const float *ad, const float *as,
                  const float *as16, float *const *yrow, const uint8_t *next)
{
    const size_t bs = quant_traits(t)->type_size;
    const int64_t nsb = cols / 256, nb = cols / 32;
    const __m512i voff = row_offsets(ws);
    const __m512i n15 = _mm512_set1_epi8(15), n3 = _mm512_set1_epi8(3), b16 = _mm512_set1_epi8(16);
    const __m512 k32 = _mm512_set1_ps(32.f);
    const size_t share = 16 * ws / (size_t)nb;
    _Alignas(64) uint8_t pb[512];
    __m512 acc[MM_SMALL_MAX_TOK];
    for (int64_t k = 0; k < n; k++)
        acc[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *base = slab + (size_t)i * bs;
        const struct slab_rows sr = slab_rows(base, ws);
        __m512i s0, s1, s2, sg[4];
        __m512 d, dmin;
        if (t == GGML_TYPE_Q6_K) {
            for (int q = 0; q < 4; q++)
                sg[q] = _mm512_i32gather_epi32(voff, (const void *)(base + 192 + 4 * q), 1);
            d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(
                _mm512_srli_epi32(_mm512_i32gather_epi32(voff, (const void *)(base + 206), 1), 16)));
            dmin = d;
            s0 = s1 = s2 = sg[0];
        } else {
            __m512i g0 = _mm512_i32gather_epi32(voff, (const void *)base, 1);
            s0 = _mm512_i32gather_epi32(voff, (const void *)(base + 4), 1);
            s1 = _mm512_i32gather_epi32(voff, (const void *)(base + 8), 1);
            s2 = _mm512_i32gather_epi32(voff, (const void *)(base + 12), 1);
            d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
            dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g0, 16)));
            sg[0] = sg[1] = sg[2] = sg[3] = s0;
        }
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * i + j;
            pf_share(next, b, share);
            __m512i a[8], w[8];
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                __m512i u;
                if (t == GGML_TYPE_Q6_K) {
                    const int h = j / 4, k = j % 4;
                    const size_t ol = offsetof(struct block_q6_K, ql) + 64 * h + 32 * (k % 2);
                    const size_t oh = offsetof(struct block_q6_K, qh) + 32 * h;
                    __m512i lo = _mm512_inserti64x4(_mm512_castsi256_si512(ld_row(&sr, r, ol)), ld_row(&sr, r + 8, ol), 1);
                    __m512i hi = _mm512_inserti64x4(_mm512_castsi256_si512(ld_row(&sr, r, oh)), ld_row(&sr, r + 8, oh), 1);
                    if (k / 2) lo = _mm512_srli_epi16(lo, 4);
                    hi = _mm512_srli_epi16(hi, 2 * k);
                    u = _mm512_or_si512(_mm512_and_si512(lo, n15), _mm512_slli_epi16(_mm512_and_si512(hi, n3), 4));
                } else {
                    const size_t oq = (t == GGML_TYPE_Q4_K ? offsetof(struct block_q4_K, qs)
                                                           : offsetof(struct block_q5_K, qs)) + 32 * (j / 2);
                    u = _mm512_inserti64x4(_mm512_castsi256_si512(ld_row(&sr, r, oq)), ld_row(&sr, r + 8, oq), 1);
                    if (j % 2) u = _mm512_srli_epi16(u, 4);
                    u = _mm512_and_si512(u, n15);
                    if (t == GGML_TYPE_Q5_K) {
                        const size_t oh = offsetof(struct block_q5_K, qh);
                        __m512i qh = _mm512_inserti64x4(_mm512_castsi256_si512(ld_row(&sr, r, oh)), ld_row(&sr, r + 8, oh), 1);
                        u = _mm512_or_si512(u, _mm512_and_si512(_mm512_slli_epi16(_mm512_srli_epi16(qh, j), 4), b16));
                    }
                }
                a[r] = u;
            }
            transpose_rows(a, w, 0);
            store_block(w, pb);
            if (t == GGML_TYPE_Q6_K) {
                __m512 dx[2], mx[2];
                for (int u = 0; u < 2; u++) {
                    const int idx = 2 * j + u;
                    __m512i sc = q6k_sc(sg, idx);
                    dx[u] = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
                    mx[u] = _mm512_mul_ps(k32, dx[u]);
                }
                if (MG == 1) blk16_tokens((int)n, pb, dx, mx, aq + 32 * b, cols, ad, as16, nb, b, acc);
                else blk16_groups(pb, dx, mx, aq + 32 * b, n, cols, ad, as16, nb, b, acc);
            } else {
                __m512i sc, mn;
                k4_sc_mn(j, s0, s1, s2, &sc, &mn);
                __m512 dx = _mm512_mul_ps(d, _mm512_cvtepi32_ps(sc));
                __m512 mx = _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(mn));
                if (MG == 1) blk_tokens((int)n, pb, dx, mx, aq + 32 * b, cols, ad, as, nb, b, acc);
                else blk_groups(pb, dx, mx, aq + 32 * b, n, cols, ad, as, nb, b, acc);
            }
        }
    }
    for (int64_t k = 0; k < n; k++)
        _mm512_storeu_ps(yrow[k], acc[k]);
}


/* q4_K and q6_K in the slab layout (matmul_impl.h): per 256-column superblock a head of the 16
 * rows' scales as lanes, then per 32-column sub-block the panel's eight groups packed — q4_K:
 * four nibble vectors (two groups a byte); q6_K: the same for the low 4 bits and two vectors of
 * the high 2 bits (four groups a byte). kp_head / kp_block decode them with pack_k4's /
 * pack_q6k's operations into the panel's bytes and scales, so everything after is the packed
 * kernel's arithmetic. */
AI size_t kp_sb_bytes(enum ggml_type t) /* a superblock of a slab: 16 x the block size */
{
    return t == GGML_TYPE_Q4_K   ? 16 * sizeof(struct block_q4_K)
           : t == GGML_TYPE_Q5_K ? 16 * sizeof(struct block_q5_K)
                                 : 16 * sizeof(struct block_q6_K);
}

/* q4_K, q5_K: d, dmin and s[0..2] = scales[0..3], [4..7], [8..11]; q6_K: d and s[0..3] = the
 * scale dwords */
struct kp_head {
    __m512 d, dmin;
    __m512i s[4];
};

AI void kp_head(enum ggml_type t, const uint8_t *sb, struct kp_head *h)
{
    if (t != GGML_TYPE_Q6_K) {
        const __m512i g0 = _mm512_loadu_si512(sb);
        for (int q = 0; q < 3; q++)
            h->s[q] = _mm512_loadu_si512(sb + 64 + 64 * q);
        h->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g0));
        h->dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(g0, 16)));
    } else {
        h->d = h->dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)sb)); /* no mins */
        for (int q = 0; q < 4; q++)
            h->s[q] = _mm512_loadu_si512(sb + 32 + 64 * q);
    }
}

/* Sub-block j: its scales (q4_K, q5_K: dx[0] = d * sc, mx[0] = dmin * m; q6_K: per 16-column
 * half dx[u] = d * sc, mx[u] = 32 dx[u]) and its eight panel groups as u8 (q5_K: the nibble with
 * its 5th bit, pack_k4's value). */
AI void kp_block(enum ggml_type t, const uint8_t *sb, int j, const struct kp_head *h, __m512 *dx,
                 __m512 *mx, __m512i *w)
{
    const __m512i n15 = _mm512_set1_epi8(15), n3 = _mm512_set1_epi8(3);
    const uint8_t *q;
    __m512i hv[2];
    if (t != GGML_TYPE_Q6_K) {
        __m512i sc, mn;
        k4_sc_mn(j, h->s[0], h->s[1], h->s[2], &sc, &mn);
        dx[0] = _mm512_mul_ps(h->d, _mm512_cvtepi32_ps(sc));
        mx[0] = _mm512_mul_ps(h->dmin, _mm512_cvtepi32_ps(mn));
        q = sb + 256 + (t == GGML_TYPE_Q5_K ? 320 : 256) * j;
        if (t == GGML_TYPE_Q5_K) hv[0] = _mm512_loadu_si512(q + 256);
    } else {
        for (int u = 0; u < 2; u++) {
            dx[u] = _mm512_mul_ps(h->d, _mm512_cvtepi32_ps(q6k_sc(h->s, 2 * j + u)));
            mx[u] = _mm512_mul_ps(_mm512_set1_ps(32.f), dx[u]);
        }
        q = sb + 288 + 384 * j;
        hv[0] = _mm512_loadu_si512(q + 256), hv[1] = _mm512_loadu_si512(q + 320);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        const __m512i v = _mm512_loadu_si512(q + 64 * k);
        w[k] = _mm512_and_si512(v, n15);
        w[k + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), n15);
        if (t == GGML_TYPE_Q5_K) { /* group g's 5th bits: bit g of hv's bytes, to bit 4 */
            const __m512i b16 = _mm512_set1_epi8(16);
            w[k] = _mm512_or_si512(w[k], _mm512_and_si512(_mm512_slli_epi16(hv[0], 4 - k), b16));
            w[k + 4] = _mm512_or_si512(
                w[k + 4], _mm512_and_si512(k ? _mm512_srli_epi16(hv[0], k) : hv[0], b16));
        }
        if (t == GGML_TYPE_Q6_K) { /* group k: hv[k % 2] bits 2(k / 2); group k + 4: 2 more */
            const __m512i b0 = _mm512_and_si512(_mm512_srli_epi16(hv[k % 2], 2 * (k / 2)), n3);
            const __m512i b1 = _mm512_and_si512(_mm512_srli_epi16(hv[k % 2], 2 * (k / 2) + 4), n3);
            w[k] = _mm512_or_si512(w[k], _mm512_slli_epi16(b0, 4));
            w[k + 4] = _mm512_or_si512(w[k + 4], _mm512_slli_epi16(b1, 4));
        }
    }
}

/* q4_K / q6_K slab layout, M <= 8 tokens (a compile-time constant): kern's (q4_K) or kern16's
 * (q6_K) steps on the groups decoded in registers, so the bits of pack + kernel. q6_K past 4
 * tokens runs two passes over the groups (16 accumulators and 8 groups fit the registers; 24 did
 * not: an m = 8 step 37.0 -> 34.6 ms). */
AI void kp_slab(const int M, enum ggml_type t, const uint8_t *slab, size_t ws, int64_t cols,
                const int8_t *aq, const float *ad, const float *as, const float *as16,
                float *const *yrow, const uint8_t *next)
{
    const int64_t nsb = cols / 256, nb = cols / 32;
    const size_t share = 16 * ws / (size_t)nb;
    __m512 acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < M; k++)
        acc[k] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nsb; i++) {
        const uint8_t *sb = slab + (size_t)i * kp_sb_bytes(t);
        struct kp_head h;
        kp_head(t, sb, &h);
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * i + j;
            pf_share(next, b, share);
            __m512 dx[2], mx[2];
            __m512i w[8];
            kp_block(t, sb, j, &h, dx, mx, w);
            const int8_t *ab = aq + 32 * b;
            if (t != GGML_TYPE_Q6_K) {
                blk_tokens_w(M, w, dx[0], mx[0], ab, cols, ad, as, nb, b, acc);
            } else if (M <= 4) {
                blk16_tokens_w(M, w, dx, mx, ab, cols, ad, as16, nb, b, acc);
            } else {
                blk16_tokens_w(4, w, dx, mx, ab, cols, ad, as16, nb, b, acc);
                blk16_tokens_w(M - 4, w, dx, mx, ab + 4 * cols, cols, ad + 4 * nb, as16 + 8 * nb, nb,
                               b, acc + 4);
            }
        }
    }
#pragma GCC unroll 8
    for (int k = 0; k < M; k++)
        _mm512_storeu_ps(yrow[k], acc[k]);
}

/* pack for a q4_K / q6_K slab in the slab layout: the panel decoded, pd/pm as pack_k4 / pack_q6k
 * write them */
static void pack_kp(enum ggml_type t, const uint8_t *slab, int64_t cols, uint8_t *panel, float *pd,
                    float *pm)
{
    const int nsc = t == GGML_TYPE_Q6_K ? 2 : 1; /* scales per 32-column block and row */
    for (int64_t i = 0; i < cols / 256; i++) {
        const uint8_t *sb = slab + (size_t)i * kp_sb_bytes(t);
        struct kp_head h;
        kp_head(t, sb, &h);
        for (int j = 0; j < 8; j++) {
            const int64_t b = 8 * i + j;
            __m512 dx[2], mx[2];
            __m512i w[8];
            kp_block(t, sb, j, &h, dx, mx, w);
            for (int u = 0; u < nsc; u++) {
                _mm512_storeu_ps(pd + (b * nsc + u) * 16, dx[u]);
                _mm512_storeu_ps(pm + (b * nsc + u) * 16, mx[u]);
            }
            for (int g = 0; g < 8; g++)
                _mm512_storeu_si512(panel + b * 512 + 64 * g, w[g]);
        }
    }
}

/* q8_0 in the slab layout (matmul_impl.h: a slab is its 16 rows' fp16 scales, 16 per block, then
 * the packed kernel's panel, written once at load): n tokens (1..MM_SMALL_MAX_TOK) read the panel
 * in place with kern's loops — no transpose, no reduction, the scales one cvtph per block (pack's
 * fp16 -> f32, exact; mx = 128 d as pack's) — so the bits of pack + kernel. MG = 1: n <= 8, a
 * compile-time constant, the accumulators in registers; MG = 2: any n, groups of 8 per block with
 * the accumulators in memory (16 accumulators in registers measured no faster at m = 16). */
AI void q8p_slab(const int MG, const uint8_t *slab, size_t ws, int64_t cols, int64_t n,
                 const int8_t *aq, const float *ad, const float *as, float *const *yrow,
                 const uint8_t *next)
{
    const int64_t nb = cols / 32;
    const uint8_t *sc = slab, *pp = slab + nb * 32;
    const __m512 k128 = _mm512_set1_ps(128.f);
    const size_t share = 16 * ws / (size_t)nb;
    __m512 acc[MM_SMALL_MAX_TOK];
    for (int64_t t = 0; t < n; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        pf_share(next, b, share);
        if (MG == 2 && b + 1 < nb) /* past 8 tokens a block takes long enough that the next
                                    * block's panel, already in L2, is worth bringing to L1 */
            for (int k = 0; k < 512; k += 64)
                _mm_prefetch((const char *)(pp + 512 * (b + 1) + k), _MM_HINT_T0);
        const __m512 dx = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(sc + 32 * b)));
        const __m512 mx = _mm512_mul_ps(dx, k128);
        if (MG == 1) blk_tokens((int)n, pp + 512 * b, dx, mx, aq + 32 * b, cols, ad, as, nb, b, acc);
        else blk_groups(pp + 512 * b, dx, mx, aq + 32 * b, n, cols, ad, as, nb, b, acc);
    }
    for (int64_t t = 0; t < n; t++)
        _mm512_storeu_ps(yrow[t], acc[t]);
}

/* q8_0 up to MM_SMALL_MAX_TOK tokens; the K-quants up to 8 (one register-resident group: with
 * their scale vectors, groups in memory measured slower than pack + kernel, e.g. Q4_K_M m = 16
 * 162-169 vs 103-120 CPU ms per step on one thread of the Zen 5 VM) */
static int small_supported(enum ggml_type t, int64_t n_tok)
{
    if (t == GGML_TYPE_Q8_0) return n_tok <= MM_SMALL_MAX_TOK;
    return n_tok <= 8 && (t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K);
}

/* Full slabs of rows [0, nrows) run the direct kernels (m = 1: q8_0, q4_K, q5_K, q6_K; m = 2..16
 * per token group: q8_0); a last partial slab (a matrix whose rows are not a multiple of 16) runs
 * pack + kernel on the thread's panel, which gives the same bits. slab: the full slabs are in the
 * slab layout (the partial one never is). */
static void small(enum ggml_type t, const void *W, size_t ws, int slab_layout, int64_t nrows,
                  int64_t cols, const int8_t *aq, const float *ad, const float *as,
                  const float *as16, int64_t n_tok, float *Y, int64_t ys, const int32_t *y_idx,
                  int64_t r0, uint8_t *panel)
{
    const int64_t nb = cols / 32, full = nrows / 16 * 16;
    const uint8_t *end = (const uint8_t *)W + (size_t)full * ws;
    for (int64_t s0 = 0; s0 < full; s0 += 16) {
        const uint8_t *slab = (const uint8_t *)W + (size_t)s0 * ws;
        const size_t dist = (size_t)g_pf_slabs[slab_layout != 0] * 16 * ws;
        const uint8_t *next = dist && slab + dist < end ? slab + dist : NULL;
        if ((t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q5_K || t == GGML_TYPE_Q6_K) && slab_layout) {
            float *yrow[8];
            for (int64_t k = 0; k < n_tok; k++)
                yrow[k] = Y + (y_idx ? y_idx[k] : k) * ys + r0 + s0;
            switch (n_tok) {
#define QSLAB_CASE(M)                                                                              \
    case M:                                                                                        \
        if (t == GGML_TYPE_Q4_K) kp_slab(M, GGML_TYPE_Q4_K, slab, ws, cols, aq, ad, as, as16, yrow, next); \
        else if (t == GGML_TYPE_Q5_K) kp_slab(M, GGML_TYPE_Q5_K, slab, ws, cols, aq, ad, as, as16, yrow, next); \
        else kp_slab(M, GGML_TYPE_Q6_K, slab, ws, cols, aq, ad, as, as16, yrow, next);            \
        break;
                QSLAB_CASE(8) QSLAB_CASE(7) QSLAB_CASE(6) QSLAB_CASE(5) QSLAB_CASE(4)
                QSLAB_CASE(3) QSLAB_CASE(2) QSLAB_CASE(1)
#undef QSLAB_CASE
            default: { /* small_supported keeps the K-quants at <= 8 tokens; any more: pack + kernel */
                float *pd = (float *)(panel + (size_t)cols * MM_TILE_ROWS);
                float *pm = pd + nb * MM_TILE_ROWS * (sub16(t) ? 2 : 1);
                const uint8_t *pnl = pack(t, slab, ws, 1, 16, cols, panel, pd, pm);
                kernel(pnl, pd, pm, cols, aq, ad, as, as16, sub16(t), n_tok, Y, ys, y_idx, r0 + s0, 16);
                break;
            }
            }
            continue;
        }
        if (t == GGML_TYPE_Q8_0 && slab_layout) {
            float *yrow[MM_SMALL_MAX_TOK];
            for (int64_t k = 0; k < n_tok; k++)
                yrow[k] = Y + (y_idx ? y_idx[k] : k) * ys + r0 + s0;
            switch (n_tok) {
#define PSLAB_CASE(M)                                                                              \
    case M:                                                                                        \
        q8p_slab(1, slab, ws, cols, M, aq, ad, as, yrow, next);                                    \
        break;
                PSLAB_CASE(8) PSLAB_CASE(7)
                PSLAB_CASE(6) PSLAB_CASE(5) PSLAB_CASE(4) PSLAB_CASE(3) PSLAB_CASE(2) PSLAB_CASE(1)
#undef PSLAB_CASE
            default:
                q8p_slab(2, slab, ws, cols, n_tok, aq, ad, as, yrow, next);
                break;
            }
            continue;
        }
        if (n_tok == 1) {
            float *y = Y + (y_idx ? y_idx[0] : 0) * ys + r0 + s0;
            if (t == GGML_TYPE_Q8_0) gemv1_q8_slab(slab, ws, cols, aq, ad, as, y, next);
            else if (t == GGML_TYPE_Q6_K) gemv1_q6k_slab(slab, ws, cols, aq, ad, as16, y, next);
            else if (t == GGML_TYPE_Q4_K) gemv1_k4_slab(GGML_TYPE_Q4_K, slab, ws, cols, aq, ad, as, y, next);
            else gemv1_k4_slab(GGML_TYPE_Q5_K, slab, ws, cols, aq, ad, as, y, next);
            continue;
        }
        /* one pass over the slab for all n tokens: with n <= 8 the tokens' accumulators are
         * registers (the group size a compile-time constant), past that they live in memory and
         * the block panel serves groups of 8 */
        float *yrow[MM_SMALL_MAX_TOK];
        for (int64_t k = 0; k < n_tok; k++)
            yrow[k] = Y + (y_idx ? y_idx[k] : k) * ys + r0 + s0;
        if (t == GGML_TYPE_Q8_0) {
            switch (n_tok) {
#define VSLAB_CASE(M)                                                                              \
    case M:                                                                                        \
        vnni_slab_q8(1, slab, ws, cols, M, aq, ad, as, yrow, next);                             \
        break;
                VSLAB_CASE(8) VSLAB_CASE(7) VSLAB_CASE(6) VSLAB_CASE(5) VSLAB_CASE(4)
                VSLAB_CASE(3) VSLAB_CASE(2)
#undef VSLAB_CASE
            default:
                vnni_slab_q8(2, slab, ws, cols, n_tok, aq, ad, as, yrow, next);
                break;
            }
        } else {
            switch (n_tok) {
#define KSLAB_CASE(M)                                                                              \
    case M:                                                                                        \
        kq_slab_m(1, t, slab, ws, cols, M, aq, ad, as, as16, yrow, next);                       \
        break;
                KSLAB_CASE(8) KSLAB_CASE(7) KSLAB_CASE(6) KSLAB_CASE(5) KSLAB_CASE(4)
                KSLAB_CASE(3) KSLAB_CASE(2)
#undef KSLAB_CASE
            default:
                kq_slab_m(2, t, slab, ws, cols, n_tok, aq, ad, as, as16, yrow, next);
                break;
            }
        }
    }
    if (full < nrows) {
        const int sub = sub16(t);
        float *pd = (float *)(panel + (size_t)cols * MM_TILE_ROWS);
        float *pm = pd + nb * MM_TILE_ROWS * (sub ? 2 : 1);
        pack(t, (const uint8_t *)W + (size_t)full * ws, ws, 0, nrows - full, cols, panel, pd, pm);
        kernel(panel, pd, pm, cols, aq, ad, as, as16, sub, n_tok, Y, ys, y_idx, r0 + full,
               (int)(nrows - full));
    }
}

static const struct mm_gemm_impl g_impl = {
    .name = "avx512-vnni",
    .supported = supported,
    .act_quant = act_quant,
    .sub16 = sub16,
    .pack = pack,
    .kernel = kernel,
    .gemv_supported = gemv_supported,
    .gemv = gemv,
    .gemm_f_supported = gemm_f_supported,
    .gemm_f = gemm_f,
    .set_pack_vec = set_pack_vec,
    .small_supported = small_supported,
    .small = small,
    .set_pf_slabs = set_pf_slabs,
};

static struct mm_gemm_impl g_impl_amx;

const struct mm_gemm_impl *mm_gemm_avx512(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_tables);
    return g_amx ? &g_impl_amx : &g_impl;
}
