/* matmul_avx2 — register-tile kernels for CPUs with AVX2/FMA but no AVX-512 (e.g. AMD Zen 2/3):
 * R weight rows x T tokens per call, activations in the weight type's vec_dot_type (the same rows
 * the generic vec_dot path uses), for decode (T = 1) and prefill alike.
 *
 * Batch invariance (docs/kernels.md): every (row, token) pair has its own accumulator and the
 * same instruction sequence in every instantiation — per block an exact integer dot (int8
 * products, int32 lanes), then one float FMA of the 8 lanes with the product of the two block
 * scales, in block order, then one fixed horizontal sum — so a result does not depend on R, T,
 * on the other rows and tokens of the tile, on m or on the thread count. This file is compiled
 * with -ffp-contract=off (Makefile) so the compiler cannot fuse a mul and an add in one
 * instantiation and not in another.
 *
 * Why tiles: the vec_dot path re-reads a weight row for every token and re-derives its scales,
 * nibbles and |w| each time; here a row block is decoded once per T tokens and each activation
 * block once per R rows. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/matmul_impl.h"
#include "engine/kernels/quant_blocks.h"

#define AI __attribute__((always_inline)) static inline

AI float hsum8(__m256 v)
{
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Software prefetch distance for the weight stream (bytes ahead of the block being read, into
 * L1), 0 = rely on the hardware prefetcher alone. Decode reads one sequential stream per thread.
 * The best distance depends on the machine (4 KB ahead measured +20-45 % over 0 on one AMD EPYC
 * VM, while a 16 KB prefetch cost 18 % of read bandwidth on another of the same kind), so it is a
 * run-time value: mm_calibrate() measures the candidates once per process and sets it. It only
 * moves data earlier into the cache, never changes the arithmetic (batch invariance holds for any
 * value). MM2_PF is the value before calibration. */
#ifndef MM2_PF
#define MM2_PF MM2_PF_DEFAULT
#endif
static int g_pf = MM2_PF;
/* q4_K/q6_K with >= 2 tokens on the 1 x 8 small-m kernel (1) or the 2 x 4 tiles (0); both give the
 * same bits, the switch is for measuring one against the other (MM2_KSM=0) */
#ifndef MM2_KSM
#define MM2_KSM 1
#endif
static const int g_k_small_m = MM2_KSM;

static void set_prefetch(int bytes)
{
    __atomic_store_n(&g_pf, bytes < 0 ? 0 : bytes, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ q8_0 x q8_0 */

AI void q8_0_tile(const int R, const int T, const uint8_t *W, size_t ws, int64_t nb,
                  const uint8_t *X, size_t xs, float *const *yt, int64_t r)
{
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    __m256 acc[4][4];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[i][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i w[4], aw[4];
        float dw[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            const struct block_q8_0 *x = (const struct block_q8_0 *)(W + (size_t)i * ws) + b;
            if (pf) _mm_prefetch((const char *)x + pf, _MM_HINT_T0);
            w[i] = _mm256_loadu_si256((const __m256i *)x->qs);
            aw[i] = _mm256_sign_epi8(w[i], w[i]);
            dw[i] = fp16_to_f32(x->d);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const struct block_q8_0 *y = (const struct block_q8_0 *)(X + (size_t)t * xs) + b;
            __m256i a = _mm256_loadu_si256((const __m256i *)y->qs);
            __m256 da = _mm256_set1_ps(fp16_to_f32(y->d));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw[i], _mm256_sign_epi8(a, w[i])),
                                              ones);
                __m256 s = _mm256_mul_ps(_mm256_broadcast_ss(&dw[i]), da);
                acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), s, acc[i][t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            yt[t][r + i] = hsum8(acc[i][t]);
}

/* Small m (a lockstep batch, a speculative verify, a short prefill chunk) and prefill: one weight
 * row x T <= 8 tokens. The T tokens' activation blocks are first packed side by side
 * (ys[(b * 8 + t) * 32], aligned, one sequential stream) with their scales as floats
 * (dxs[b * 8 + t]), once per group and work item. Per row block the weights are loaded and made
 * unsigned once for all T tokens, and the T product scales fl(d_w * d_x) come from one vector
 * multiply, stored to the stack and broadcast back per token: a load, not one more multiply on
 * the two ports that also run maddubs, madd and the FMA (Zen 3), which bound this loop. Per pair
 * the arithmetic is q8_0_tile's exactly (the same exact int32 lanes, the same fl(d_w * d_x), one
 * FMA per block in block order, hsum8), so the bits are those of the 1 x 1 decode tile and of
 * every other shape. */
AI void q8_0_row_tok(const int T, const uint8_t *Wr, int64_t nb, const int8_t *ys,
                     const float *dxs, float *const *yt, int64_t r, int pf)
{
    __m256 acc[8];
    const __m256i ones = _mm256_set1_epi16(1);
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        acc[t] = _mm256_setzero_ps();
    const struct block_q8_0 *x = (const struct block_q8_0 *)Wr;
    for (int64_t b = 0; b < nb; b++) {
        if (pf) _mm_prefetch((const char *)(x + b) + pf, _MM_HINT_T0);
        const __m256i w = _mm256_loadu_si256((const __m256i *)x[b].qs);
        const __m256i aw = _mm256_sign_epi8(w, w);
        float s[8] __attribute__((aligned(32)));
        _mm256_store_ps(s, _mm256_mul_ps(_mm256_set1_ps(fp16_to_f32(x[b].d)),
                                         _mm256_load_ps(dxs + b * 8)));
        const int8_t *yb = ys + b * 256;
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m256i y = _mm256_load_si256((const __m256i *)(yb + 32 * t));
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w)), ones);
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&s[t]), acc[t]);
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
        yt[t][r] = hsum8(acc[t]);
}

/* Rows [0, nrows) x tokens [0, n_tok), n_tok >= 2: tokens in even groups of <= 8 (9 -> 4 + 5,
 * 16 -> 8 + 8); per group every row of the work item in order, so the item's weights come from
 * DRAM once (first group) and from L2 for the others. tmp: q8_0_tmp_bytes(cols), 32-aligned. */
static void q8_0_small_m(const uint8_t *W, size_t ws, int64_t nrows, int64_t nb, const uint8_t *X,
                         size_t xs, int64_t n_tok, float *Y, int64_t yst, const int32_t *y_idx,
                         int64_t r0, void *tmp)
{
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    int8_t *ys = tmp;
    float *dxs = (float *)(ys + nb * 256);
    int64_t ng = (n_tok + 7) / 8;
    for (int64_t g = 0, t0 = 0; g < ng; g++) {
        int T = (int)((n_tok - t0) / (ng - g));
        float *yt[8];
        for (int k = 0; k < T; k++)
            yt[k] = Y + (y_idx ? y_idx[t0 + k] : t0 + k) * yst + r0;
        for (int k = 0; k < 8; k++) {
            const struct block_q8_0 *xb = (const struct block_q8_0 *)(X + (size_t)(t0 + k) * xs);
            for (int64_t b = 0; b < nb; b++) {
                if (k < T) {
                    memcpy(ys + (b * 8 + k) * 32, xb[b].qs, 32);
                    dxs[b * 8 + k] = fp16_to_f32(xb[b].d);
                } else {
                    dxs[b * 8 + k] = 0.0f;
                }
            }
        }
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *Wr = W + (size_t)r * ws;
            switch (T) {
#define C(n)                                                                                       \
    case n: q8_0_row_tok(n, Wr, nb, ys, dxs, yt, r, pf); break;
                C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8)
#undef C
            default: break;
            }
        }
        t0 += T;
    }
}

/* Decode (one token): one weight row at a time, one sequential stream per thread, with the token's
 * activation blocks packed first (ys[b * 32], aligned; their scales as floats, dxf[b]) so the row
 * loop reads no fp16 activation scale. The row's weight scales are converted four at a time (four
 * halves in one register, one cvtph2ps, one multiply by dxf[b..b+3]: the four fl(d_w * d_x)),
 * each broadcast back by a permute. The loop was bound by its instruction count, not by the FMA
 * chain (two rows in flight measured no faster in L1); per block it is now load, sign, sign,
 * maddubs, madd, cvt, FMA and a quarter of the scale work. Per block the arithmetic is
 * q8_0_tile's exactly (the same exact int32 lanes, the same rounded product scale, one FMA in
 * block order, hsum8), so every other shape gives the same bits. Prefetch: once per 64 bytes. */
static void q8_0_decode(const uint8_t *W, size_t ws, int64_t nrows, int64_t nb, const uint8_t *X,
                        float *yt, void *tmp)
{
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    int8_t *ys = tmp;
    float *dxf = (float *)(ys + nb * 32);
    const struct block_q8_0 *xb = (const struct block_q8_0 *)X;
    for (int64_t b = 0; b < nb; b++) {
        memcpy(ys + b * 32, xb[b].qs, 32);
        dxf[b] = fp16_to_f32(xb[b].d);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t r = 0; r < nrows; r++) {
        const struct block_q8_0 *x = (const struct block_q8_0 *)(W + (size_t)r * ws);
        __m256 acc = _mm256_setzero_ps();
        int64_t b = 0;
        for (; b + 4 <= nb; b += 4) {
            if (pf) {
                _mm_prefetch((const char *)(x + b) + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)(x + b) + pf + 64, _MM_HINT_T0);
            }
            uint64_t d4 = (uint64_t)x[b].d | (uint64_t)x[b + 1].d << 16 |
                          (uint64_t)x[b + 2].d << 32 | (uint64_t)x[b + 3].d << 48;
            __m128 s4 = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128((long long)d4)),
                                   _mm_load_ps(dxf + b));
            __m256 s8 = _mm256_insertf128_ps(_mm256_castps128_ps256(s4), s4, 1);
            /* spelled out: the permute's immediate must be a constant at every -O level */
#define Q8D_STEP(k, imm)                                                                           \
    do {                                                                                           \
        __m256i w = _mm256_loadu_si256((const __m256i *)x[b + (k)].qs);                           \
        __m256i a = _mm256_load_si256((const __m256i *)(ys + 32 * (b + (k))));                    \
        __m256i p = _mm256_madd_epi16(                                                             \
            _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)), ones);           \
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_permute_ps(s8, imm), acc);            \
    } while (0)
            Q8D_STEP(0, 0x00);
            Q8D_STEP(1, 0x55);
            Q8D_STEP(2, 0xaa);
            Q8D_STEP(3, 0xff);
#undef Q8D_STEP
        }
        for (; b < nb; b++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)x[b].qs);
            __m256i a = _mm256_load_si256((const __m256i *)(ys + 32 * b));
            __m256i p = _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w)), ones);
            __m128 s = _mm_mul_ss(_mm_set_ss(fp16_to_f32(x[b].d)), _mm_load_ss(dxf + b));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcastss_ps(s), acc);
        }
        yt[r] = hsum8(acc);
    }
}

static size_t tmp_bytes(enum ggml_type t, int64_t cols, int64_t n_tok)
{
    if (t != GGML_TYPE_Q8_0) return 0;
    if (n_tok == 1) return (size_t)(cols / 32) * (32 + sizeof(float)) + 64;
    return (size_t)(cols / 32) * (256 + 8 * sizeof(float));
}

/* ------------------------------------------------------------ q4_K x q8_K */

/* Q4_K packed 6-bit scales and mins -> 8 int16 each (lane j = sub-block j). */
AI void k4_scales(const uint8_t *s, __m128i *sc, __m128i *mn)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, s, 4);
    memcpy(&u1, s + 4, 4);
    memcpy(&u2, s + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | (((u0 >> 6) & 0x03030303u) << 4);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | (((u1 >> 6) & 0x03030303u) << 4);
    *sc = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
    *mn = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
}

/* int16 lane j of sc (8 lanes, broadcast to both halves) to all 16 lanes */
AI __m256i bcast16(__m256i sc2, int j)
{
    return _mm256_shuffle_epi8(sc2, _mm256_set1_epi16((short)(((2 * j + 1) << 8) | (2 * j))));
}

/* bsums (16 int16) -> the 8 sums of sub-block pairs, as int16 (|sum| <= 64 * 127) */
AI __m128i pair_sums(const int16_t *bsums)
{
    __m256i pairs =
        _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bsums), _mm256_set1_epi16(1));
    return _mm_packs_epi32(_mm256_castsi256_si128(pairs), _mm256_extracti128_si256(pairs, 1));
}

AI int hsum4i(__m128i r)
{
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* One q4_K 256-block s for R rows x T tokens (row i at W + i * ws, token t at X + t * xs), the
 * per-pair sequence of every q4_K kernel (the 2 x 4 / 1 x 1 tiles and the 1 x 8 small-m kernel):
 * sumi = sum_j sc_j * dot(q4 of sub-block j, y), mins = sum_j mn_j * bsum_j (both exact);
 * macc = fma(dmin * dy, mins, macc); acc += cvt(sumi) * (d * dy). acc and macc are indexed
 * i * T + t. A row block is decoded once for the T tokens, an activation chunk loaded once for
 * the R rows. */
AI void q4_K_block(const int R, const int T, const uint8_t *W, size_t ws, int64_t s,
                   const uint8_t *X, size_t xs, int pf, __m256 *acc, float *macc)
{
    const __m256i m4 = _mm256_set1_epi8(15);
    const struct block_q4_K *x[4];
    const struct block_q8_K *y[8];
    __m256i sc2[4], sumi[8];
    __m128i mn[4];
    float d[4], dmin[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
        x[i] = (const struct block_q4_K *)(W + (size_t)i * ws) + s;
        if (pf) {
            _mm_prefetch((const char *)x[i] + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)x[i] + pf + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)x[i] + pf + 128, _MM_HINT_T0);
        }
        __m128i sc;
        k4_scales(x[i]->scales, &sc, &mn[i]);
        sc2[i] = _mm256_broadcastsi128_si256(sc);
        d[i] = fp16_to_f32(x[i]->d);
        dmin[i] = fp16_to_f32(x[i]->dmin);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        y[t] = (const struct block_q8_K *)(X + (size_t)t * xs) + s;
        __m128i ps = pair_sums(y[t]->bsums);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            int mins = hsum4i(_mm_madd_epi16(ps, mn[i]));
            macc[i * T + t] = fmaf(dmin[i] * y[t]->d, (float)mins, macc[i * T + t]);
            sumi[i * T + t] = _mm256_setzero_si256();
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        __m256i lo[4], hi[4], s0[4], s1[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            __m256i bq = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 32 * c));
            lo[i] = _mm256_and_si256(bq, m4);
            hi[i] = _mm256_and_si256(_mm256_srli_epi16(bq, 4), m4);
            s0[i] = bcast16(sc2[i], 2 * c);
            s1[i] = bcast16(sc2[i], 2 * c + 1);
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * c));
            __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * c + 32));
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[i], y0), s0[i]);
                __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[i], y1), s1[i]);
                sumi[i * T + t] = _mm256_add_epi32(sumi[i * T + t], _mm256_add_epi32(p0, p1));
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            acc[i * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i * T + t]),
                                             _mm256_set1_ps(d[i] * y[t]->d), acc[i * T + t]);
}

/* R rows x T tokens (R * T <= 8) over all nsb blocks: q4_K_block in block order, then per pair
 * hsum8(acc) - macc. Prefill/decode use R x T tiles of the dispatch (2 x 4 ... 1 x 1); small m
 * (k_small_m) uses R = 1, T <= 8, which decodes a row block once for all its tokens (the 2 x 4
 * tile decodes it once per 4 tokens and reads every row again from the cache for each group of
 * 4). Every shape runs the same per-pair sequence, so gives the same bits. */
AI void q4_K_tile(const int R, const int T, const uint8_t *W, size_t ws, int64_t nsb,
                  const uint8_t *X, size_t xs, float *const *yt, int64_t r, int pf)
{
    __m256 acc[8];
    float macc[8];
#pragma GCC unroll 8
    for (int k = 0; k < R * T; k++)
        acc[k] = _mm256_setzero_ps(), macc[k] = 0.0f;
    for (int64_t s = 0; s < nsb; s++)
        q4_K_block(R, T, W, ws, s, X, xs, pf, acc, macc);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            yt[t][r + i] = hsum8(acc[i * T + t]) - macc[i * T + t];
}

/* ------------------------------------------------------------ q5_K x q8_K */

/* q4_K_tile's sequence with the 5th bit of each element or'ed in (values 0..31, still
 * maddubs-able): per pair and 256-block the same exact sumi / mins, the same FMA and min term. */
AI void q5_K_tile(const int R, const int T, const uint8_t *W, size_t ws, int64_t nsb,
                  const uint8_t *X, size_t xs, float *const *yt, int64_t r)
{
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    __m256 acc[4][4];
    float macc[4][4];
    const __m256i m4 = _mm256_set1_epi8(15), b1 = _mm256_set1_epi8(1);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[i][t] = _mm256_setzero_ps(), macc[i][t] = 0.0f;
    for (int64_t s = 0; s < nsb; s++) {
        const struct block_q5_K *x[4];
        const struct block_q8_K *y[4];
        __m256i sc2[4], sumi[4][4];
        __m128i mn[4];
        __m256i qh[4];
        float d[4], dmin[4], dy[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            x[i] = (const struct block_q5_K *)(W + (size_t)i * ws) + s;
            if (pf) {
                _mm_prefetch((const char *)x[i] + pf, _MM_HINT_T0);
                _mm_prefetch((const char *)x[i] + pf + 64, _MM_HINT_T0);
                _mm_prefetch((const char *)x[i] + pf + 128, _MM_HINT_T0);
            }
            __m128i sc;
            qh[i] = _mm256_loadu_si256((const __m256i *)x[i]->qh);
            k4_scales(x[i]->scales, &sc, &mn[i]);
            sc2[i] = _mm256_broadcastsi128_si256(sc);
            d[i] = fp16_to_f32(x[i]->d);
            dmin[i] = fp16_to_f32(x[i]->dmin);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            y[t] = (const struct block_q8_K *)(X + (size_t)t * xs) + s;
            dy[t] = y[t]->d;
            __m128i ps = pair_sums(y[t]->bsums);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                int mins = hsum4i(_mm_madd_epi16(ps, mn[i]));
                macc[i][t] = fmaf(dmin[i] * dy[t], (float)mins, macc[i][t]);
                sumi[i][t] = _mm256_setzero_si256();
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m256i lo[4], hi[4], s0[4], s1[4];
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                __m256i bq = _mm256_loadu_si256((const __m256i *)(x[i]->qs + 32 * c));
                /* the 5th bit of sub-block j is bit j of qh[l] (l = element % 32) */
                lo[i] = _mm256_or_si256(
                    _mm256_and_si256(bq, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[i], 2 * c), b1), 4));
                hi[i] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(bq, 4), m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh[i], 2 * c + 1), b1), 4));
                s0[i] = bcast16(sc2[i], 2 * c);
                s1[i] = bcast16(sc2[i], 2 * c + 1);
            }
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * c));
                __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 64 * c + 32));
#pragma GCC unroll 4
                for (int i = 0; i < R; i++) {
                    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[i], y0), s0[i]);
                    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi[i], y1), s1[i]);
                    sumi[i][t] = _mm256_add_epi32(sumi[i][t], _mm256_add_epi32(p0, p1));
                }
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                acc[i][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i][t]),
                                            _mm256_set1_ps(d[i] * dy[t]), acc[i][t]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            yt[t][r + i] = hsum8(acc[i][t]) - macc[i][t];
}

/* ------------------------------------------------------------ q6_K x q8_K */

/* int16 vector: scale g in lanes 0-7 and g + 1 in lanes 8-15, from 16 int8 scales */
AI __m256i scale_pair(__m128i sc8, int g)
{
    __m128i ctl = _mm_set_epi64x((long long)(0x0101010101010101ULL * (uint64_t)(g + 1)),
                                 (long long)(0x0101010101010101ULL * (uint64_t)g));
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, ctl));
}

/* One q6_K 256-block s for R rows x T tokens (row i at W + i * ws, token t at X + t * xs), the
 * per-pair sequence of every q6_K kernel: q in [0, 63] (maddubs-able), the -32 folded in through
 * bsums: sumi = -32 * sum_g sc_g bsum_g + sum_g sc_g dot(q_g, y_g) (exact); acc += cvt(sumi) *
 * (d * dy). acc is indexed i * T + t. Per 32-byte chunk the 6-bit values and the scale pair are
 * built once for the T tokens, an activation chunk loaded once for the R rows. */
AI void q6_K_block(const int R, const int T, const uint8_t *W, size_t ws, int64_t s,
                   const uint8_t *X, size_t xs, int pf, __m256 *acc)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const struct block_q6_K *x[4];
    const struct block_q8_K *y[8];
    __m256i sumi[8];
    __m128i sc8[4];
    float d[4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++) {
        x[i] = (const struct block_q6_K *)(W + (size_t)i * ws) + s;
        if (pf) {
            _mm_prefetch((const char *)x[i] + pf, _MM_HINT_T0);
            _mm_prefetch((const char *)x[i] + pf + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)x[i] + pf + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)x[i] + pf + 192, _MM_HINT_T0);
        }
        sc8[i] = _mm_loadu_si128((const __m128i *)x[i]->scales);
        d[i] = fp16_to_f32(x[i]->d);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++) {
        y[t] = (const struct block_q8_K *)(X + (size_t)t * xs) + s;
        __m256i bs = _mm256_loadu_si256((const __m256i *)y[t]->bsums);
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            sumi[i * T + t] = _mm256_sub_epi32(
                _mm256_setzero_si256(),
                _mm256_slli_epi32(_mm256_madd_epi16(_mm256_cvtepi8_epi16(sc8[i]), bs), 5));
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m256i q[4], sc[4];
#pragma GCC unroll 4
            for (int i = 0; i < R; i++) {
                __m256i ql =
                    _mm256_loadu_si256((const __m256i *)(x[i]->ql + 64 * h + 32 * (k & 1)));
                __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i]->qh + 32 * h));
                if (k >= 2) ql = _mm256_srli_epi16(ql, 4);
                q[i] = _mm256_or_si256(
                    _mm256_and_si256(ql, m4),
                    _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2), 4));
                sc[i] = scale_pair(sc8[i], 8 * h + 2 * k);
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                __m256i yv = _mm256_loadu_si256((const __m256i *)(y[t]->qs + 128 * h + 32 * k));
#pragma GCC unroll 4
                for (int i = 0; i < R; i++)
                    sumi[i * T + t] = _mm256_add_epi32(
                        sumi[i * T + t], _mm256_madd_epi16(_mm256_maddubs_epi16(q[i], yv), sc[i]));
            }
        }
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 4
        for (int i = 0; i < R; i++)
            acc[i * T + t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[i * T + t]),
                                             _mm256_set1_ps(d[i] * y[t]->d), acc[i * T + t]);
}

/* R rows x T tokens (R * T <= 8) over all nsb blocks: q6_K_block in block order, then per pair
 * hsum8(acc); R = 1, T <= 8 is the small-m kernel (k_small_m). Every shape runs the same
 * per-pair sequence, so gives the same bits. */
AI void q6_K_tile(const int R, const int T, const uint8_t *W, size_t ws, int64_t nsb,
                  const uint8_t *X, size_t xs, float *const *yt, int64_t r, int pf)
{
    __m256 acc[8];
#pragma GCC unroll 8
    for (int k = 0; k < R * T; k++)
        acc[k] = _mm256_setzero_ps();
    for (int64_t s = 0; s < nsb; s++)
        q6_K_block(R, T, W, ws, s, X, xs, pf, acc);
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++)
            yt[t][r + i] = hsum8(acc[i * T + t]);
}

/* Rows [0, nrows) x tokens [0, n_tok), n_tok >= 2, for q4_K / q6_K: tokens in even groups of
 * <= 8 as q8_0_small_m (the activation rows are read in place: their blocks are already
 * contiguous per token); per group every row of the work item in order. */
static void k_small_m(enum ggml_type t, const uint8_t *W, size_t ws, int64_t nrows, int64_t nsb,
                      const uint8_t *X, size_t xs, int64_t n_tok, float *Y, int64_t yst,
                      const int32_t *y_idx, int64_t r0)
{
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    int64_t ng = (n_tok + 7) / 8;
    for (int64_t g = 0, t0 = 0; g < ng; g++) {
        int T = (int)((n_tok - t0) / (ng - g));
        float *yt[8];
        for (int k = 0; k < T; k++)
            yt[k] = Y + (y_idx ? y_idx[t0 + k] : t0 + k) * yst + r0;
        const uint8_t *Xg = X + (size_t)t0 * xs;
        for (int64_t r = 0; r < nrows; r++) {
            const uint8_t *Wr = W + (size_t)r * ws;
            if (t == GGML_TYPE_Q4_K) {
                switch (T) {
#define C(n)                                                                                       \
    case n: q4_K_tile(1, n, Wr, 0, nsb, Xg, xs, yt, r, pf); break;
                    C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8)
#undef C
                default: break;
                }
            } else {
                switch (T) {
#define C(n)                                                                                       \
    case n: q6_K_tile(1, n, Wr, 0, nsb, Xg, xs, yt, r, pf); break;
                    C(1) C(2) C(3) C(4) C(5) C(6) C(7) C(8)
#undef C
                default: break;
                }
            }
        }
        t0 += T;
    }
}

/* ------------------------------------------------------------ float weights */

/* 8 columns of a float-type row (f32, f16, bf16) as f32 */
AI __m256 ld8(enum ggml_type t, const uint8_t *p, int64_t k)
{
    switch (t) {
    case GGML_TYPE_F16:
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + k)));
    case GGML_TYPE_BF16:
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + k))),
            16));
    default:
        return _mm256_loadu_ps((const float *)p + k);
    }
}

AI float ld1(enum ggml_type t, const uint8_t *p, int64_t k)
{
    switch (t) {
    case GGML_TYPE_F16:
        return fp16_to_f32(((const uint16_t *)p)[k]);
    case GGML_TYPE_BF16:
        return bf16_to_f32(((const uint16_t *)p)[k]);
    default:
        return ((const float *)p)[k];
    }
}

/* Per pair: one 8-lane FMA chain over the columns in steps of 8, hsum8, then the tail columns
 * with scalar FMAs in order. wt: weight type; at: activation type (f16 for F16 weights, whose
 * vec_dot_type is F16; f32 otherwise). */
AI void f_tile(enum ggml_type wt, enum ggml_type at, const int R, const int T, const uint8_t *W,
               size_t ws, int64_t cols, const uint8_t *X, size_t xs, float *const *yt, int64_t r)
{
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    __m256 acc[4][4];
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++)
            acc[i][t] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= cols; k += 8) {
        __m256 w[4];
#pragma GCC unroll 4
        for (int i = 0; i < R; i++) {
            if (pf)
                _mm_prefetch((const char *)(W + (size_t)i * ws) + k * (wt == GGML_TYPE_F32 ? 4 : 2) +
                                 pf,
                             _MM_HINT_T0);
            w[i] = ld8(wt, W + (size_t)i * ws, k);
        }
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            __m256 a = ld8(at, X + (size_t)t * xs, k);
#pragma GCC unroll 4
            for (int i = 0; i < R; i++)
                acc[i][t] = _mm256_fmadd_ps(w[i], a, acc[i][t]);
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; i++)
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            float s = hsum8(acc[i][t]);
            for (int64_t c = k; c < cols; c++)
                s = fmaf(ld1(wt, W + (size_t)i * ws, c), ld1(at, X + (size_t)t * xs, c), s);
            yt[t][r + i] = s;
        }
}

/* ------------------------------------------------------------ dispatch */

/* Tile shapes: decode (one token) takes 4 rows at once (4 independent chains, one sequential
 * weight stream); prefill takes TP tokens x RP rows (accumulators + row registers fit the 16
 * ymm registers). */
#ifndef MM2_RD
#define MM2_RD 1
#endif
enum { RD = MM2_RD };

#define TILE_SWITCH(CALL, rr, tt)                                                                  \
    switch ((rr) * 8 + (tt)) {                                                                     \
    case 4 * 8 + 1: CALL(4, 1); break;                                                             \
    case 3 * 8 + 1: CALL(3, 1); break;                                                             \
    case 2 * 8 + 1: CALL(2, 1); break;                                                             \
    case 1 * 8 + 1: CALL(1, 1); break;                                                             \
    case 2 * 8 + 4: CALL(2, 4); break;                                                             \
    case 2 * 8 + 3: CALL(2, 3); break;                                                             \
    case 2 * 8 + 2: CALL(2, 2); break;                                                             \
    case 1 * 8 + 4: CALL(1, 4); break;                                                             \
    case 1 * 8 + 3: CALL(1, 3); break;                                                             \
    case 1 * 8 + 2: CALL(1, 2); break;                                                             \
    default: break;                                                                                \
    }

static int supported(enum ggml_type t)
{
    switch (t) {
    case GGML_TYPE_Q8_0:
    case GGML_TYPE_Q4_K:
    case GGML_TYPE_Q5_K:
    case GGML_TYPE_Q6_K:
    case GGML_TYPE_F32:
    case GGML_TYPE_F16:
    case GGML_TYPE_BF16:
        return 1;
    default:
        return mm_ternary_tile_supported(t); /* matmul_ternary_avx2.c */
    }
}

static void run(enum ggml_type t, const void *Wv, size_t ws, int64_t nrows, int64_t cols,
                const uint8_t *X, size_t xs, int64_t n_tok, float *Y, int64_t ys,
                const int32_t *y_idx, int64_t r0, void *tmp)
{
    const uint8_t *W = Wv;
    if (mm_ternary_tile_supported(t)) {
        mm_ternary_tile_run(t, W, ws, nrows, cols, X, xs, n_tok, Y, ys, y_idx, r0);
        return;
    }
    if (t == GGML_TYPE_Q8_0 && n_tok >= 2) {
        q8_0_small_m(W, ws, nrows, cols / 32, X, xs, n_tok, Y, ys, y_idx, r0, tmp);
        return;
    }
    if ((t == GGML_TYPE_Q4_K || t == GGML_TYPE_Q6_K) && n_tok >= 2 && g_k_small_m) {
        k_small_m(t, W, ws, nrows, cols / 256, X, xs, n_tok, Y, ys, y_idx, r0);
        return;
    }
    if (t == GGML_TYPE_Q8_0 && tmp) {
        q8_0_decode(W, ws, nrows, cols / 32, X, Y + (y_idx ? y_idx[0] : 0) * ys + r0, tmp);
        return;
    }
    /* prefill: 2 rows x 4 tokens; decode: 4 rows x 1 token */
    const int TP = 4, RP = 2;
    const int pf = __atomic_load_n(&g_pf, __ATOMIC_RELAXED);
    for (int64_t t0 = 0; t0 < n_tok; t0 += TP) {
        int tt = (int)(n_tok - t0 < TP ? n_tok - t0 : TP);
        int R = tt == 1 ? RD : RP;
        float *yt[4];
        for (int k = 0; k < tt; k++)
            yt[k] = Y + (y_idx ? y_idx[t0 + k] : t0 + k) * ys + r0;
        const uint8_t *Xt = X + (size_t)t0 * xs;
        for (int64_t r = 0; r < nrows; r += R) {
            int rr = (int)(nrows - r < R ? nrows - r : R);
            const uint8_t *Wr = W + (size_t)r * ws;
            switch (t) {
            case GGML_TYPE_Q8_0:
#define C(a, b) q8_0_tile(a, b, Wr, ws, cols / 32, Xt, xs, yt, r)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            case GGML_TYPE_Q4_K:
#define C(a, b) q4_K_tile(a, b, Wr, ws, cols / 256, Xt, xs, yt, r, pf)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            case GGML_TYPE_Q5_K:
#define C(a, b) q5_K_tile(a, b, Wr, ws, cols / 256, Xt, xs, yt, r)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            case GGML_TYPE_Q6_K:
#define C(a, b) q6_K_tile(a, b, Wr, ws, cols / 256, Xt, xs, yt, r, pf)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            case GGML_TYPE_F16:
#define C(a, b) f_tile(GGML_TYPE_F16, GGML_TYPE_F16, a, b, Wr, ws, cols, Xt, xs, yt, r)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            case GGML_TYPE_BF16:
#define C(a, b) f_tile(GGML_TYPE_BF16, GGML_TYPE_F32, a, b, Wr, ws, cols, Xt, xs, yt, r)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            case GGML_TYPE_F32:
#define C(a, b) f_tile(GGML_TYPE_F32, GGML_TYPE_F32, a, b, Wr, ws, cols, Xt, xs, yt, r)
                TILE_SWITCH(C, rr, tt);
#undef C
                break;
            default:
                break;
            }
        }
    }
}

static const struct mm_tile_impl g_tile = {
    .name = "avx2-tile",
    .supported = supported,
    .run = run,
    .tmp_bytes = tmp_bytes,
    .set_prefetch = set_prefetch,
};

const struct mm_tile_impl *mm_tile_avx2(void)
{
    return &g_tile;
}
