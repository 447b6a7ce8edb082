/* ops_attn_impl — the body of the attention work unit, written once over a tiny vector vocabulary
 * and instantiated per ISA: ops.c (portable, VW = 1), ops_avx2.c (VW = 8), ops_avx512.c (VW = 16).
 * The including file defines:
 *   VEC, VW, VLOAD(p), VSTORE(p, v), VSET1(x), VZERO(), VFMA(a, b, c) = a*b + c, VMUL(a, b),
 *   VMAX(a, b), VHMAX(v), VHSUM(v), VEXP(v), VLOADH(p) (VW halfs -> VEC)
 *   ATTN_FN (the static function to define; the file may be included several times with other
 *   ATTN_FN / ATTN_RB), ATTN_RB (query rows per register block: the
 *   accumulators of RB rows x 4 vectors must fit the register file)
 *   optionally ATTN_KV_F32 (the instance reads an F32 cache: elements are floats loaded with
 *   VLOAD instead of halfs with VLOADH; every other operation and its order are the same) */
#ifdef ATTN_KV_F32
#define ATTN_KV_T float
#define ATTN_LOADKV(p) VLOAD(p)
#else
#define ATTN_KV_T uint16_t
#define ATTN_LOADKV(p) VLOADH(p)
#endif
/*
 * Algorithm (flash-attention style, bounded scratch): for one kv head and up to OPS_ATTN_QB query
 * tokens (× the GQA group = "rows"), walk the cache in tiles of OPS_ATTN_KT keys; per tile, convert
 * K (stored tile-transposed: [hd][KT] halfs, see kv_cache.c) and V ([KT][hd] halfs), compute S = Q·K^T with Q pre-scaled, mask keys past each row's position, and fold the tile into
 * a running max / sum / accumulator per row (online softmax). K and V are converted from f16 as
 * they are loaded (a separate f32 copy of each tile cost more in stores than the math). Both products run over blocks of
 * ATTN_RB rows so each loaded K/V vector feeds RB FMAs and 4*RB independent FMA chains hide the
 * FMA latency (with one row, 4 chains made it latency-bound at ~1 FMA/cycle). */

static void ATTN_FN(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch, int c0,
                    int c1, float *state)
{
    enum { RB = ATTN_RB };
    const int hd = a->head_dim, group = a->n_head / a->n_head_kv;
    const int nq = q1 - q0, rows = nq * group, rows_p = (rows + RB - 1) / RB * RB;
    const int KT = OPS_ATTN_KT;
    const float scale = a->scale;
    float *Q = scratch;            /* [rows_p][hd]  queries × scale (padding rows zero) */
    float *acc = Q + rows_p * hd;  /* [rows_p][hd]  unnormalized output */
    float *S = acc + rows_p * hd;  /* [rows_p][KT]  scores, then probabilities */
    float *mx = S + rows_p * KT;   /* [rows_p]      running max */
    float *sum = mx + rows_p;      /* [rows_p]      running sum of exp */
    float *corr = sum + rows_p;    /* [rows_p]      this tile's rescale of acc */
    const int sw = hd + 2;         /* a row's state: max, sum, hd accumulator floats */
    float *R = corr + rows_p;      /* [rows_p][sw]  the rows' state merged over chunks c0.. */
    float *st = R + rows_p * sw;   /* [rows_p][sw]  one chunk's state (state == NULL) */
    int32_t rpos[OPS_ATTN_QB * OPS_ATTN_MAX_GROUP + 8];
    int32_t rlo[OPS_ATTN_QB * OPS_ATTN_MAX_GROUP + 8]; /* first visible key position per row */

    for (int r = 0; r < rows_p; r++) {
        int qi = r / group, g = r % group;
        VEC vsc = VSET1(r < rows ? scale : 0.0f); /* padding rows: zero queries */
        const float *src = a->q + (int64_t)(q0 + (r < rows ? qi : 0)) * a->q_stride + (int64_t)(kvh * group + g) * hd;
        for (int d = 0; d < hd; d += VW)
            VSTORE(Q + r * hd + d, VMUL(VLOAD(src + d), vsc));
        rpos[r] = r < rows ? a->pos[q0 + qi] : -1; /* padding sees nothing */
        rlo[r] = a->window > 0 && r < rows ? rpos[r] - a->window + 1 : INT32_MIN / 2;
        R[r * sw] = -INFINITY;
        R[r * sw + 1] = 0.0f;
        for (int d = 0; d < hd; d++)
            R[r * sw + 2 + d] = 0.0f;
    }
    int32_t maxpos = a->pos[q1 - 1];
    const int64_t hs = a->kv_head_stride / (int64_t)(sizeof(ATTN_KV_T) / 2); /* in elements */
    const ATTN_KV_T *kh = (const ATTN_KV_T *)(const void *)a->k + (int64_t)kvh * hs;
    const ATTN_KV_T *vh = (const ATTN_KV_T *)(const void *)a->v + (int64_t)kvh * hs;

    /* a sliding window starts the walk at the tile of the first query's oldest visible key (tiles
     * before it are outside every row's window: skipping them changes no row's state) */
    int32_t kt_begin = 0;
    if (a->window > 0 && a->pos[q0] - a->window + 1 > 0) kt_begin = (a->pos[q0] - a->window + 1) / KT * KT;
    /* Split-K (ops.h): keys in fixed chunks of OPS_ATTN_KC; each chunk starts from a fresh
     * online-softmax state, and the chunks' states are merged in chunk order (ops_attn_state_merge)
     * — here one after the other, or by ops_attn_merge from states other threads computed (state
     * != NULL: this call does one chunk and stores its state). Same arithmetic either way. A chunk
     * wholly before a sliding window has no tiles: its state (max -inf) merges as nothing. */
    for (int c = c0; c < c1; c++) {
    for (int r = 0; r < rows_p; r++) {
        for (int d = 0; d < hd; d += VW) VSTORE(acc + r * hd + d, VZERO());
        mx[r] = -INFINITY;
        sum[r] = 0.0f;
    }
    const int32_t kend = (int32_t)(c + 1) * OPS_ATTN_KC - 1 < maxpos ? (int32_t)(c + 1) * OPS_ATTN_KC - 1 : maxpos;
    int32_t kc0 = (int32_t)c * OPS_ATTN_KC > kt_begin ? (int32_t)c * OPS_ATTN_KC : kt_begin;
    for (int32_t kt0 = kc0; kt0 <= kend; kt0 += KT) {
        int kn = kend + 1 - kt0 < KT ? kend + 1 - kt0 : KT;
        /* K tile: hd rows of KT halfs (tail columns past kn hold stale values: masked); a ring
         * holds position kt0 at row kt0 % ring (tiles never straddle its end: ring % KT == 0) */
        int64_t row0 = a->ring > 0 ? kt0 % a->ring : kt0;
        const ATTN_KV_T *Kt = kh + row0 * hd, *Vt = vh + row0 * hd;
        for (int r0 = 0; r0 < rows_p; r0 += RB) {
            int active = 0;
            /* a row takes part if the tile holds a key it sees: not all in its future, not all
             * before its window */
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) active |= rpos[r0 + i] >= kt0 && rlo[r0 + i] < kt0 + kn;
            if (!active) continue; /* the whole tile is in these rows' future */
            /* keys any row of the block can see: [0, kb); scores are computed for [0, jn) */
            int kb = 0;
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                int kr = rpos[r0 + i] - kt0 + 1 < kn ? rpos[r0 + i] - kt0 + 1 : kn;
                kb = kr > kb ? kr : kb;
            }
            const int jn = (kb + VW - 1) / VW * VW;
            /* S[r0..r0+RB) = Q · K^T over the tile */
            int j0 = 0;
            for (; j0 + 4 * VW <= jn; j0 += 4 * VW) {
                VEC s[RB][4];
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = VZERO();
                const ATTN_KV_T *kp = Kt + j0;
                const float *qp = Q + r0 * hd;
                for (int d = 0; d < hd; d++, kp += KT) {
                    VEC k0 = ATTN_LOADKV(kp), k1 = ATTN_LOADKV(kp + VW), k2 = ATTN_LOADKV(kp + 2 * VW), k3 = ATTN_LOADKV(kp + 3 * VW);
                    _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                        VEC qd = VSET1(qp[i * hd + d]);
                        s[i][0] = VFMA(qd, k0, s[i][0]);
                        s[i][1] = VFMA(qd, k1, s[i][1]);
                        s[i][2] = VFMA(qd, k2, s[i][2]);
                        s[i][3] = VFMA(qd, k3, s[i][3]);
                    }
                }
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++)
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) VSTORE(S + (r0 + i) * KT + j0 + c * VW, s[i][c]);
            }
            for (; j0 < jn; j0 += VW) { /* the diagonal tile's last few key vectors */
                VEC s[RB];
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) s[i] = VZERO();
                const ATTN_KV_T *kp = Kt + j0;
                const float *qp = Q + r0 * hd;
                for (int d = 0; d < hd; d++, kp += KT) {
                    VEC k0 = ATTN_LOADKV(kp);
                    _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) s[i] = VFMA(VSET1(qp[i * hd + d]), k0, s[i]);
                }
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) VSTORE(S + (r0 + i) * KT + j0, s[i]);
            }
            /* online softmax per row over [0, jn); rows that see nothing of this tile keep their
             * state (P = 0, corr = 1) */
            int krmax = 0;
            _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                int r = r0 + i;
                float *sr = S + r * KT;
                if (rpos[r] < kt0 || rlo[r] >= kt0 + kn) {
                    for (int j = 0; j < jn; j++) sr[j] = 0.0f;
                    corr[r] = 1.0f;
                    continue;
                }
                int kr = rpos[r] - kt0 + 1 < kn ? rpos[r] - kt0 + 1 : kn; /* keys visible to row */
                int kl = rlo[r] - kt0 > 0 ? rlo[r] - kt0 : 0;             /* ... from kl on */
                krmax = kr > krmax ? kr : krmax;
                for (int j = 0; j < kl; j++) sr[j] = -INFINITY;
                for (int j = kr; j < jn; j++) sr[j] = -INFINITY;
                VEC vm = VSET1(-INFINITY);
                for (int j = 0; j < jn; j += VW) vm = VMAX(vm, VLOAD(sr + j));
                float tmax = VHMAX(vm);
                float mnew = tmax > mx[r] ? tmax : mx[r];
                corr[r] = expf(mx[r] - mnew); /* 0 on the first tile (mx = -inf) */
                VEC vmn = VSET1(mnew), vs = VZERO();
                for (int j = 0; j < jn; j += VW) VSTORE(sr + j, VEXP(VSUB(VLOAD(sr + j), vmn)));
                /* exactly nothing from the future, and zeroed before the sum: jn depends on the
                 * other rows of the block, so masked lanes must add exact zeros (VEXP(-inf) is
                 * ~1e-38, not 0) for a row's sum to be the same in any block (batch invariance) */
                for (int j = 0; j < kl; j++) sr[j] = 0.0f; /* the same for keys before the window */
                for (int j = kr; j < jn; j++) sr[j] = 0.0f;
                for (int j = 0; j < jn; j += VW) vs = VADD(vs, VLOAD(sr + j));
                sum[r] = sum[r] * corr[r] + VHSUM(vs);
                mx[r] = mnew;
            }
            /* acc[r0..r0+RB) = acc * corr + P · V over the visible keys */
            int d0 = 0;
            for (; d0 + 4 * VW <= hd; d0 += 4 * VW) {
                VEC o[RB][4];
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                    VEC vc = VSET1(corr[r0 + i]);
                    const float *ar = acc + (r0 + i) * hd + d0;
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) o[i][c] = VMUL(VLOAD(ar + c * VW), vc);
                }
                const ATTN_KV_T *vp = Vt + d0;
                for (int j = 0; j < krmax; j++, vp += hd) {
                    VEC v0 = ATTN_LOADKV(vp), v1 = ATTN_LOADKV(vp + VW), v2 = ATTN_LOADKV(vp + 2 * VW), v3 = ATTN_LOADKV(vp + 3 * VW);
                    _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) {
                        VEC pj = VSET1(S[(r0 + i) * KT + j]);
                        o[i][0] = VFMA(pj, v0, o[i][0]);
                        o[i][1] = VFMA(pj, v1, o[i][1]);
                        o[i][2] = VFMA(pj, v2, o[i][2]);
                        o[i][3] = VFMA(pj, v3, o[i][3]);
                    }
                }
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++)
                    _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) VSTORE(acc + (r0 + i) * hd + d0 + c * VW, o[i][c]);
            }
            for (; d0 < hd; d0 += VW) { /* head_dim not a multiple of 4 vectors */
                VEC o[RB];
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) o[i] = VMUL(VLOAD(acc + (r0 + i) * hd + d0), VSET1(corr[r0 + i]));
                const ATTN_KV_T *vp = Vt + d0;
                for (int j = 0; j < krmax; j++, vp += hd) {
                    VEC v0 = ATTN_LOADKV(vp);
                    _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) o[i] = VFMA(VSET1(S[(r0 + i) * KT + j]), v0, o[i]);
                }
                _Pragma("GCC unroll 8") for (int i = 0; i < RB; i++) VSTORE(acc + (r0 + i) * hd + d0, o[i]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float *o = state ? state + (size_t)r * sw : st + (size_t)r * sw;
        o[0] = mx[r];
        o[1] = sum[r];
        for (int d = 0; d < hd; d++) o[2 + d] = acc[r * hd + d];
        if (!state) ops_attn_state_merge(R + (size_t)r * sw, o, hd);
    }
    }
    if (state) return;
    for (int r = 0; r < rows; r++) {
        int qi = r / group, g = r % group;
        ops_attn_state_finish(R + (size_t)r * sw,
                              a->out + (int64_t)(q0 + qi) * a->out_stride + (int64_t)(kvh * group + g) * hd, hd);
    }
}
#undef ATTN_KV_T
#undef ATTN_LOADKV
