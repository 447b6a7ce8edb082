/* matmul_ternary_avx2 — the AVX2 tile kernel of the low-bit types (TQ1_0, TQ2_0, Q1_0, Q2_0),
 * called by matmul_avx2.c's tile back-end for every token count (compiled with -ffp-contract=off).
 *
 * Why: their vec_dot decodes a weight block for every token (TQ1_0's base-3 digits cost more than
 * the multiply-adds), so prefill re-decodes each row m times. Here a block is decoded once into
 * registers (element order, one byte per weight) and used for a group of up to 8 tokens.
 *
 * Batch invariance and exactness: for each (row, token) the kernel computes the same exact
 * integer per block (per activation block for Q1_0 / Q2_0) as the scalar reference and then the
 * reference's float operations in its order (quant_ternary.c), so every output is the bits of
 * quant_traits(t)->vec_dot_ref on that row and token — for any token count, group split, row
 * tile or thread count (tests/unit/test_ternary.c asserts exactly this). */
#include <immintrin.h>
#include <string.h>

#include "engine/kernels/fp16.h"
#include "engine/kernels/matmul_impl.h"
#include "engine/kernels/quant_blocks.h"

#define AI __attribute__((always_inline)) static inline
#define TG 8          /* tokens per group */
#define PF_AHEAD 4096 /* weight prefetch distance (bytes) */

AI int hsum8i(__m256i v)
{
    __m128i r = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, 1));
    return _mm_cvtsi128_si32(r);
}

/* two vectors of 16 u16 values (< 256) -> 32 bytes in order a0..a15 b0..b15 */
AI __m256i pack16x2(__m256i a, __m256i b)
{
    return _mm256_permute4x64_epi64(_mm256_packus_epi16(a, b), 0xD8);
}

/* ------------------------------------------------------------ block decoders */

/* TQ2_0: q (0..3) of elements 32v .. 32v + 31 in w[v] */
AI void dec_tq2_0(const struct block_tq2_0 *b, __m256i w[8])
{
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int c = 0; c < 2; c++) {
        __m256i qx = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * c));
        for (int l = 0; l < 4; l++)
            w[4 * c + l] = _mm256_and_si256(_mm256_srli_epi16(qx, 2 * l), m3);
    }
}

/* one base-3 peel of 16 u16 lanes: returns the digit, leaves the rest in *v */
AI __m256i peel(__m256i *v)
{
    __m256i x = _mm256_add_epi16(*v, _mm256_add_epi16(*v, *v));
    *v = _mm256_and_si256(x, _mm256_set1_epi16(0xFF));
    return _mm256_srli_epi16(x, 8);
}

/* TQ1_0: digits (0..2) of elements 32v .. 32v + 31 in w[v] */
AI void dec_tq1_0(const struct block_tq1_0 *b, __m256i w[8])
{
    __m256i lo = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)b->qs));
    __m256i hi = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 16)));
    for (int l = 0; l < 5; l++) { /* element 32 l + m from byte m */
        __m256i dl = peel(&lo), dh = peel(&hi);
        w[l] = pack16x2(dl, dh);
    }
    __m256i v = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)(b->qs + 32)));
    __m256i d0 = peel(&v), d1 = peel(&v), d2 = peel(&v), d3 = peel(&v), d4 = peel(&v);
    uint32_t h;
    memcpy(&h, b->qh, 4);
    const __m256i qh_mul = _mm256_setr_epi16(1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27);
    __m256i vh = _mm256_cvtepu8_epi16(_mm_set1_epi32((int)h));
    vh = _mm256_and_si256(_mm256_mullo_epi16(vh, qh_mul), _mm256_set1_epi16(0xFF));
    __m256i dq = peel(&vh);
    w[5] = pack16x2(d0, d1); /* elements 160..191 */
    w[6] = pack16x2(d2, d3); /* 192..223 */
    w[7] = pack16x2(d4, dq); /* 224..239, then 240..255 from qh */
}

/* Q1_0: +1 / -1 (int8) of elements 32k .. 32k + 31 in w[k] */
AI void dec_q1_0(const struct block_q1_0 *b, __m256i w[4])
{
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                          2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    for (int k = 0; k < 4; k++) {
        uint32_t u;
        memcpy(&u, b->qs + 4 * k, 4);
        __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)u), shuf), bit);
        __m256i clear = _mm256_cmpeq_epi8(v, _mm256_setzero_si256());
        w[k] = _mm256_or_si256(clear, _mm256_set1_epi8(1)); /* 0xFF = -1 where clear, else 1 */
    }
}

/* Q2_0: q - 1 (int8, -1..2) of elements 32k .. 32k + 31 in w[k] */
AI void dec_q2_0(const struct block_q2_0 *b, __m256i w[2])
{
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4,
                                          4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
    const __m256i mlo = _mm256_set1_epi32(0x40100401), mhi = _mm256_set1_epi32((int)0x80200802u);
    for (int k = 0; k < 2; k++) {
        __m128i t = _mm_loadl_epi64((const __m128i *)(b->qs + 8 * k));
        __m256i v = _mm256_shuffle_epi8(_mm256_set_m128i(t, t), shuf);
        __m256i lo = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, mlo), mlo),
                                      _mm256_set1_epi8(1));
        __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, mhi), mhi),
                                      _mm256_set1_epi8(2));
        w[k] = _mm256_sub_epi8(_mm256_or_si256(lo, hi), _mm256_set1_epi8(1));
    }
}

/* ------------------------------------------------------------ per-type rows x token groups */

/* TQ: sum (q - 1) y = sum q y - sum y; q <= 3 and |y| <= 127, so 8 maddubs results summed in
 * int16 stay below 6200 */
AI int tq_isum(const __m256i w[8], const struct block_q8_K *y)
{
    __m256i s16 = _mm256_maddubs_epi16(w[0], _mm256_loadu_si256((const __m256i *)y->qs));
    for (int v = 1; v < 8; v++)
        s16 = _mm256_add_epi16(
            s16, _mm256_maddubs_epi16(w[v], _mm256_loadu_si256((const __m256i *)(y->qs + 32 * v))));
    __m256i s = _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
    __m256i ys = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)y->bsums),
                                   _mm256_set1_epi16(1));
    return hsum8i(_mm256_sub_epi32(s, ys));
}

AI void tq_rows(int tq1, const uint8_t *W, size_t ws, int64_t nrows, int64_t nb,
                    const uint8_t *X, size_t xs, int tt, float *const *yt)
{
    for (int64_t r = 0; r < nrows; r++) {
        float acc[TG] = {0};
        const uint8_t *row = W + (size_t)r * ws;
        for (int64_t b = 0; b < nb; b++) {
            __m256i w[8];
            float dx;
            if (tq1) {
                const struct block_tq1_0 *x = (const struct block_tq1_0 *)row + b;
                _mm_prefetch((const char *)x + PF_AHEAD, _MM_HINT_T0);
                dec_tq1_0(x, w);
                dx = fp16_to_f32(x->d);
            } else {
                const struct block_tq2_0 *x = (const struct block_tq2_0 *)row + b;
                _mm_prefetch((const char *)x + PF_AHEAD, _MM_HINT_T0);
                dec_tq2_0(x, w);
                dx = fp16_to_f32(x->d);
            }
            for (int k = 0; k < tt; k++) {
                const struct block_q8_K *y = (const struct block_q8_K *)(X + (size_t)k * xs) + b;
                int is = tq_isum(w, y);
                acc[k] += (float)is * (dx * y->d);
            }
        }
        for (int k = 0; k < tt; k++)
            yt[k][r] = acc[k];
    }
}

static void q1_0_rows(const uint8_t *W, size_t ws, int64_t nrows, int64_t nb, const uint8_t *X,
                      size_t xs, int tt, float *const *yt)
{
    const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    for (int64_t r = 0; r < nrows; r++) {
        float acc[TG] = {0};
        const struct block_q1_0 *row = (const struct block_q1_0 *)(W + (size_t)r * ws);
        for (int64_t b = 0; b < nb; b++) {
            _mm_prefetch((const char *)(row + b) + PF_AHEAD, _MM_HINT_T0);
            __m256i w[4];
            dec_q1_0(row + b, w);
            float dx = fp16_to_f32(row[b].d);
            for (int k = 0; k < tt; k++) {
                const struct block_q8_0 *y = (const struct block_q8_0 *)(X + (size_t)k * xs) + 4 * b;
                __m256i p[4];
                for (int j = 0; j < 4; j++) {
                    __m256i sy = _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[j].qs), w[j]);
                    p[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, sy), ones16);
                }
                __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]),
                                              _mm256_hadd_epi32(p[2], p[3]));
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                int is[4];
                _mm_storeu_si128((__m128i *)is, s4);
                float sb = 0;
                for (int j = 0; j < 4; j++)
                    sb += fp16_to_f32(y[j].d) * (float)is[j];
                acc[k] += dx * sb;
            }
        }
        for (int k = 0; k < tt; k++)
            yt[k][r] = acc[k];
    }
}

static void q2_0_rows(const uint8_t *W, size_t ws, int64_t nrows, int64_t nb, const uint8_t *X,
                      size_t xs, int tt, float *const *yt)
{
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (int64_t r = 0; r < nrows; r++) {
        float acc[TG] = {0};
        const struct block_q2_0 *row = (const struct block_q2_0 *)(W + (size_t)r * ws);
        for (int64_t b = 0; b < nb; b++) {
            _mm_prefetch((const char *)(row + b) + PF_AHEAD, _MM_HINT_T0);
            __m256i w[2], aw[2];
            dec_q2_0(row + b, w);
            aw[0] = _mm256_sign_epi8(w[0], w[0]);
            aw[1] = _mm256_sign_epi8(w[1], w[1]);
            float dx = fp16_to_f32(row[b].d);
            for (int k = 0; k < tt; k++) {
                const struct block_q8_0 *y = (const struct block_q8_0 *)(X + (size_t)k * xs) + 2 * b;
                __m256i p0 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(
                        aw[0], _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[0].qs), w[0])),
                    ones16);
                __m256i p1 = _mm256_madd_epi16(
                    _mm256_maddubs_epi16(
                        aw[1], _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)y[1].qs), w[1])),
                    ones16);
                __m256i h = _mm256_hadd_epi32(p0, p1);
                __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
                s = _mm_hadd_epi32(s, s);
                int i0 = _mm_cvtsi128_si32(s), i1 = _mm_extract_epi32(s, 1);
                float sb = 0;
                sb += fp16_to_f32(y[0].d) * (float)i0;
                sb += fp16_to_f32(y[1].d) * (float)i1;
                acc[k] += dx * sb;
            }
        }
        for (int k = 0; k < tt; k++)
            yt[k][r] = acc[k];
    }
}

int mm_ternary_tile_supported(enum ggml_type t)
{
    return t == GGML_TYPE_TQ1_0 || t == GGML_TYPE_TQ2_0 || t == GGML_TYPE_Q1_0 ||
           t == GGML_TYPE_Q2_0;
}

void mm_ternary_tile_run(enum ggml_type t, const void *Wv, size_t ws, int64_t nrows, int64_t cols,
                         const uint8_t *X, size_t xs, int64_t n_tok, float *Y, int64_t ys,
                         const int32_t *y_idx, int64_t r0)
{
    const uint8_t *W = Wv;
    int64_t nb = cols / quant_traits(t)->blck_size;
    /* tokens in even groups of <= TG (9 -> 4 + 5), like the q8_0 small-m kernel */
    int64_t ng = (n_tok + TG - 1) / TG;
    for (int64_t g = 0, t0 = 0; g < ng; g++) {
        int tt = (int)((n_tok - t0) / (ng - g));
        float *yt[TG];
        for (int k = 0; k < tt; k++)
            yt[k] = Y + (y_idx ? y_idx[t0 + k] : t0 + k) * ys + r0;
        const uint8_t *Xt = X + (size_t)t0 * xs;
        switch (t) {
        case GGML_TYPE_TQ1_0: tq_rows(1, W, ws, nrows, nb, Xt, xs, tt, yt); break;
        case GGML_TYPE_TQ2_0: tq_rows(0, W, ws, nrows, nb, Xt, xs, tt, yt); break;
        case GGML_TYPE_Q1_0: q1_0_rows(W, ws, nrows, nb, Xt, xs, tt, yt); break;
        case GGML_TYPE_Q2_0: q2_0_rows(W, ws, nrows, nb, Xt, xs, tt, yt); break;
        default: break;
        }
        t0 += tt;
    }
}
