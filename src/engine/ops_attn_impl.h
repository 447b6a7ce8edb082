/* ops_attn_impl — the body of the attention work unit, written once over a tiny vector vocabulary
 * and instantiated per ISA: ops.c (portable, VW = 1), ops_avx2.c (VW = 8), ops_avx512.c (VW = 16).
 * The including file defines:
 *   VEC, VW, VLOAD(p), VSTORE(p, v), VSET1(x), VZERO(), VFMA(a, b, c) = a*b + c, VMUL(a, b),
 *   VMAX(a, b), VHMAX(v), VHSUM(v), VEXP(v), CVT_F16(dst, src, n) (n multiple of VW)
 *   ATTN_FN (the function name to define)
 *
 * Algorithm (flash-attention style, bounded scratch): for one kv head and up to OPS_ATTN_QB query
 * tokens (× the GQA group = "rows"), walk the cache in tiles of OPS_ATTN_KT keys; per tile, convert
 * K (stored tile-transposed: [hd][KT] halfs, see kv_cache.c) and V ([KT][hd] halfs) to f32 once,
 * compute S = Q·K^T with Q pre-scaled, mask keys past each row's position, and fold the tile into
 * a running max / sum / accumulator per row (online softmax). */

void ATTN_FN(const struct ops_attn *a, int kvh, int q0, int q1, float *scratch)
{
    const int hd = a->head_dim, group = a->n_head / a->n_head_kv;
    const int nq = q1 - q0, rows = nq * group;
    const int KT = OPS_ATTN_KT;
    float *Q = scratch;            /* [rows][hd]  queries × scale */
    float *acc = Q + rows * hd;    /* [rows][hd]  unnormalized output */
    float *Kt = acc + rows * hd;   /* [hd][KT]    this tile's keys, transposed */
    float *Vf = Kt + hd * KT;      /* [KT][hd]    this tile's values */
    float *S = Vf + KT * hd;       /* [rows][KT]  scores, then probabilities */
    float *mx = S + rows * KT;     /* [rows]      running max */
    float *sum = mx + rows;        /* [rows]      running sum of exp */
    int32_t rpos[OPS_ATTN_QB * OPS_ATTN_MAX_GROUP];

    for (int qi = 0; qi < nq; qi++)
        for (int g = 0; g < group; g++) {
            int r = qi * group + g;
            const float *src = a->q + (int64_t)(q0 + qi) * a->q_stride + (int64_t)(kvh * group + g) * hd;
            for (int d = 0; d < hd; d++) Q[r * hd + d] = src[d] * a->scale;
            for (int d = 0; d < hd; d++) acc[r * hd + d] = 0.0f;
            mx[r] = -INFINITY;
            sum[r] = 0.0f;
            rpos[r] = a->pos[q0 + qi];
        }
    int32_t maxpos = a->pos[q1 - 1];
    const uint16_t *kh = a->k + (int64_t)kvh * a->kv_head_stride;
    const uint16_t *vh = a->v + (int64_t)kvh * a->kv_head_stride;

    for (int32_t kt0 = 0; kt0 <= maxpos; kt0 += KT) {
        int kn = maxpos + 1 - kt0 < KT ? maxpos + 1 - kt0 : KT;
        /* K tile: hd rows of KT halfs (unused tail columns hold whatever was stored: masked) */
        CVT_F16(Kt, kh + (int64_t)kt0 * hd, hd * KT);
        CVT_F16(Vf, vh + (int64_t)kt0 * hd, kn * hd);
        for (int r = 0; r < rows; r++) {
            if (rpos[r] < kt0) continue; /* whole tile is in this row's future */
            const float *qr = Q + r * hd;
            float *sr = S + r * KT;
            for (int j0 = 0; j0 < KT; j0 += 4 * VW) {
                VEC s0 = VZERO(), s1 = VZERO(), s2 = VZERO(), s3 = VZERO();
                const float *kp = Kt + j0;
                for (int d = 0; d < hd; d++, kp += KT) {
                    VEC qd = VSET1(qr[d]);
                    s0 = VFMA(qd, VLOAD(kp), s0);
                    s1 = VFMA(qd, VLOAD(kp + VW), s1);
                    s2 = VFMA(qd, VLOAD(kp + 2 * VW), s2);
                    s3 = VFMA(qd, VLOAD(kp + 3 * VW), s3);
                }
                VSTORE(sr + j0, s0);
                VSTORE(sr + j0 + VW, s1);
                VSTORE(sr + j0 + 2 * VW, s2);
                VSTORE(sr + j0 + 3 * VW, s3);
            }
            int kr = rpos[r] - kt0 + 1 < kn ? rpos[r] - kt0 + 1 : kn; /* keys visible to row */
            for (int j = kr; j < KT; j++) sr[j] = -INFINITY;
            VEC vm = VSET1(-INFINITY);
            for (int j = 0; j < KT; j += VW) vm = VMAX(vm, VLOAD(sr + j));
            float tmax = VHMAX(vm);
            float mnew = tmax > mx[r] ? tmax : mx[r];
            float corr = expf(mx[r] - mnew); /* 0 on the first tile (mx = -inf) */
            VEC vmn = VSET1(mnew), vs = VZERO();
            for (int j = 0; j < KT; j += VW) {
                VEC p = VEXP(VSUB(VLOAD(sr + j), vmn));
                VSTORE(sr + j, p);
                vs = VADD(vs, p);
            }
            sum[r] = sum[r] * corr + VHSUM(vs);
            mx[r] = mnew;
            float *ar = acc + r * hd;
            VEC vc = VSET1(corr);
            int d0 = 0;
            for (; d0 + 4 * VW <= hd; d0 += 4 * VW) {
                VEC a0 = VMUL(VLOAD(ar + d0), vc), a1 = VMUL(VLOAD(ar + d0 + VW), vc);
                VEC a2 = VMUL(VLOAD(ar + d0 + 2 * VW), vc), a3 = VMUL(VLOAD(ar + d0 + 3 * VW), vc);
                const float *vp = Vf + d0;
                for (int j = 0; j < kr; j++, vp += hd) {
                    VEC pj = VSET1(sr[j]);
                    a0 = VFMA(pj, VLOAD(vp), a0);
                    a1 = VFMA(pj, VLOAD(vp + VW), a1);
                    a2 = VFMA(pj, VLOAD(vp + 2 * VW), a2);
                    a3 = VFMA(pj, VLOAD(vp + 3 * VW), a3);
                }
                VSTORE(ar + d0, a0);
                VSTORE(ar + d0 + VW, a1);
                VSTORE(ar + d0 + 2 * VW, a2);
                VSTORE(ar + d0 + 3 * VW, a3);
            }
            for (; d0 < hd; d0 += VW) { /* head_dim not a multiple of 4 vectors */
                VEC a0 = VMUL(VLOAD(ar + d0), vc);
                const float *vp = Vf + d0;
                for (int j = 0; j < kr; j++, vp += hd) a0 = VFMA(VSET1(sr[j]), VLOAD(vp), a0);
                VSTORE(ar + d0, a0);
            }
        }
    }
    for (int qi = 0; qi < nq; qi++)
        for (int g = 0; g < group; g++) {
            int r = qi * group + g;
            float inv = 1.0f / sum[r];
            float *dst = a->out + (int64_t)(q0 + qi) * a->out_stride + (int64_t)(kvh * group + g) * hd;
            for (int d = 0; d < hd; d++) dst[d] = acc[r * hd + d] * inv;
        }
}
