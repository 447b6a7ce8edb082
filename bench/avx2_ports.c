/* avx2_ports — why q8_0 prefill runs where it does on an AVX2-only CPU (issue 13; bench/README.md
 * "Prefill on AVX2"). Two parts, both in registers / L1, thread CPU time, cycles from a measured
 * dependent add chain (one add per cycle):
 *   1. throughput of the int8-GEMM instructions alone and in mixes (12 independent chains each):
 *      which ones share execution pipes;
 *   2. candidate q8_0 inner loops over one 1024-column block row set held in L1, in cycles per 32
 *      int8 multiply-accumulates: (a) the engine's small-m loop (1 row x 8 tokens, lanes = 4-column
 *      groups: sign, maddubs, madd, cvt, broadcast scale, FMA per pair and block), (b) 8 rows
 *      interleaved by 4 bytes (the "-rtr" style repack: lanes = rows, pshufd broadcast of 4
 *      activation bytes, sign, maddubs, madd, add; one cvt + FMA per 8 rows and block) for 2..6
 *      tokens, (c) int16 madd with lanes = 8 tokens (no sign trick; weights widened per block).
 * Build/run: bench/avx2_ports.sh. Prints figures only. */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static double cpu(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

#define N 20000000L
#define CHAINS "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"
#define I12(a, b)                                                                                  \
    a(0) b(1) a(2) b(3) a(4) b(5) a(6) b(7) a(8) b(9) a(10) b(11)
#define MIX5(a, b, c, d, e)                                                                        \
    a(0) b(1) c(2) d(3) e(4) a(5) b(6) c(7) d(8) e(9) a(10) b(11)
#define MADDUBS(i) "vpmaddubsw %%ymm15, %%ymm" #i ", %%ymm" #i "\n"
#define MADD(i) "vpmaddwd %%ymm15, %%ymm" #i ", %%ymm" #i "\n"
#define SIGN(i) "vpsignb %%ymm15, %%ymm" #i ", %%ymm" #i "\n"
#define FMA(i) "vfmadd231ps %%ymm15, %%ymm14, %%ymm" #i "\n"
#define CVT(i) "vcvtdq2ps %%ymm" #i ", %%ymm" #i "\n"
#define ADDD(i) "vpaddd %%ymm15, %%ymm" #i ", %%ymm" #i "\n"
#define PSHUFD(i) "vpshufd $0x55, %%ymm" #i ", %%ymm" #i "\n"
#define RUN(name, body)                                                                            \
    do {                                                                                           \
        double t0 = cpu();                                                                         \
        __asm__ volatile("mov %0, %%rcx\n1:\n" body "dec %%rcx\njnz 1b\n"                         \
                         :                                                                         \
                         : "r"(N)                                                                  \
                         : "rcx", "memory", CHAINS);                                               \
        double c = (cpu() - t0) / N / cyc;                                                         \
        printf("  %-28s %5.2f cycles per 12 = %.2f per cycle\n", name, c, 12 / c);               \
    } while (0)

static double cyc; /* seconds per cycle */

static void ports(void)
{
    double t0 = cpu();
    __asm__ volatile("mov %0, %%rcx\n1:\nadd $1, %%rax\nadd $1, %%rax\nadd $1, %%rax\n"
                     "add $1, %%rax\ndec %%rcx\njnz 1b\n"
                     :
                     : "r"(N)
                     : "rcx", "rax");
    cyc = (cpu() - t0) / (4.0 * N);
    printf("clock (dependent add chain): %.2f GHz\n1. instruction throughput, 12 independent "
           "chains:\n",
           1e-9 / cyc);
    RUN("maddubs", I12(MADDUBS, MADDUBS));
    RUN("madd", I12(MADD, MADD));
    RUN("sign", I12(SIGN, SIGN));
    RUN("fma", I12(FMA, FMA));
    RUN("cvt", I12(CVT, CVT));
    RUN("add", I12(ADDD, ADDD));
    RUN("pshufd", I12(PSHUFD, PSHUFD));
    RUN("maddubs + sign", I12(MADDUBS, SIGN));
    RUN("maddubs + fma", I12(MADDUBS, FMA));
    RUN("maddubs + cvt", I12(MADDUBS, CVT));
    RUN("maddubs + add", I12(MADDUBS, ADDD));
    RUN("maddubs + pshufd", I12(MADDUBS, PSHUFD));
    RUN("sign + fma", I12(SIGN, FMA));
    RUN("sign + cvt", I12(SIGN, CVT));
    RUN("fma + cvt", I12(FMA, CVT));
    /* the engine's per pair and block: 5 ops per 32 MACs */
    RUN("maddubs+madd+sign+cvt+fma", MIX5(MADDUBS, MADD, SIGN, CVT, FMA));
}

enum { NB = 32 }; /* blocks of 32 per row: 1024 columns */
static int8_t W[8][NB][32] __attribute__((aligned(64)));
static int8_t WR[NB][256] __attribute__((aligned(64))); /* 8 rows, 4-byte interleave */
static int8_t Y[NB][8][32] __attribute__((aligned(64)));
static int16_t Y16[NB][16][16] __attribute__((aligned(64))); /* [b][col pair][token * 2 + i] */
static float S[NB][8] __attribute__((aligned(64)));
static volatile float sink;

static __attribute__((noinline)) void loop_a(void)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < 8; r++) {
        __m256 acc[8];
        for (int t = 0; t < 8; t++) acc[t] = _mm256_setzero_ps();
        for (int b = 0; b < NB; b++) {
            __m256i w = _mm256_load_si256((const __m256i *)W[r][b]), aw = _mm256_sign_epi8(w, w);
            float s[8] __attribute__((aligned(32)));
            _mm256_store_ps(s, _mm256_mul_ps(_mm256_set1_ps(1.01f), _mm256_load_ps(S[b])));
            for (int t = 0; t < 8; t++) {
                __m256i y = _mm256_load_si256((const __m256i *)Y[b][t]);
                __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(y, w)), ones);
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&s[t]), acc[t]);
            }
        }
        __m256 z = acc[0];
        for (int t = 1; t < 8; t++) z = _mm256_add_ps(z, acc[t]);
        sink = sink + _mm256_cvtss_f32(z);
    }
}

#define LOOP_B(T)                                                                                  \
    static __attribute__((noinline)) void loop_b##T(void)                                         \
    {                                                                                              \
        const __m256i ones = _mm256_set1_epi16(1);                                                 \
        __m256 acc[T];                                                                             \
        for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();                                  \
        for (int b = 0; b < NB; b++) {                                                             \
            __m256 sw = _mm256_load_ps(S[b]);                                                      \
            __m256i sumi[T];                                                                       \
            for (int h = 0; h < 2; h++) {                                                          \
                __m256i qx[4], sx[4];                                                              \
                for (int j = 0; j < 4; j++) {                                                      \
                    qx[j] = _mm256_load_si256((const __m256i *)(WR[b] + 128 * h + 32 * j));        \
                    sx[j] = _mm256_sign_epi8(qx[j], qx[j]);                                        \
                }                                                                                  \
                for (int t = 0; t < T; t++) {                                                      \
                    __m256i y = _mm256_broadcastsi128_si256(                                      \
                        _mm_load_si128((const __m128i *)(Y[b][t] + 16 * h)));                      \
                    __m256i p0 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(sx[0], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0x00), qx[0]))); \
                    __m256i p1 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(sx[1], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0x55), qx[1]))); \
                    __m256i p2 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(sx[2], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0xaa), qx[2]))); \
                    __m256i p3 = _mm256_madd_epi16(ones, _mm256_maddubs_epi16(sx[3], _mm256_sign_epi8(_mm256_shuffle_epi32(y, 0xff), qx[3]))); \
                    __m256i s = _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3)); \
                    sumi[t] = h ? _mm256_add_epi32(sumi[t], s) : s;                                \
                }                                                                                  \
            }                                                                                      \
            for (int t = 0; t < T; t++)                                                            \
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sumi[t]),                              \
                                         _mm256_mul_ps(sw, _mm256_set1_ps(S[b][t])), acc[t]);      \
        }                                                                                          \
        __m256 z = acc[0];                                                                         \
        for (int t = 1; t < T; t++) z = _mm256_add_ps(z, acc[t]);                                  \
        sink = sink + _mm256_cvtss_f32(z);                                                         \
    }
LOOP_B(2)
LOOP_B(4)
LOOP_B(6)

static __attribute__((noinline)) void loop_c(void)
{
    for (int r = 0; r < 8; r += 4) {
        __m256 acc[4];
        for (int i = 0; i < 4; i++) acc[i] = _mm256_setzero_ps();
        for (int b = 0; b < NB; b++) {
            int32_t w16[4][16] __attribute__((aligned(32)));
            for (int i = 0; i < 4; i++) {
                _mm256_store_si256((__m256i *)w16[i],
                                   _mm256_cvtepi8_epi16(_mm_load_si128((const __m128i *)W[r + i][b])));
                _mm256_store_si256((__m256i *)(w16[i] + 8), _mm256_cvtepi8_epi16(_mm_load_si128(
                                                                (const __m128i *)(W[r + i][b] + 16))));
            }
            __m256i si[4];
            for (int i = 0; i < 4; i++) si[i] = _mm256_setzero_si256();
            for (int k = 0; k < 16; k++) {
                __m256i y = _mm256_load_si256((const __m256i *)Y16[b][k]);
                for (int i = 0; i < 4; i++)
                    si[i] = _mm256_add_epi32(si[i], _mm256_madd_epi16(_mm256_set1_epi32(w16[i][k]), y));
            }
            __m256 sy = _mm256_mul_ps(_mm256_load_ps(S[b]), _mm256_set1_ps(1.01f));
            for (int i = 0; i < 4; i++) acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si[i]), sy, acc[i]);
        }
        __m256 z = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
        sink = sink + _mm256_cvtss_f32(z);
    }
}

static void loops(void)
{
    memset(W, 3, sizeof W), memset(WR, 3, sizeof WR), memset(Y, 5, sizeof Y), memset(Y16, 1, sizeof Y16);
    for (int b = 0; b < NB; b++)
        for (int t = 0; t < 8; t++) S[b][t] = 1.0f;
    struct {
        const char *name;
        void (*f)(void);
        double macs; /* per call */
    } k[] = {
        {"(a) engine: 1 row x 8 tokens", loop_a, 8.0 * 8 * 1024},
        {"(b) 8-row repack x 2 tokens", loop_b2, 8.0 * 2 * 1024},
        {"(b) 8-row repack x 4 tokens", loop_b4, 8.0 * 4 * 1024},
        {"(b) 8-row repack x 6 tokens", loop_b6, 8.0 * 6 * 1024},
        {"(c) int16 madd, 4 rows x 8 tok", loop_c, 8.0 * 8 * 1024},
    };
    printf("2. q8_0 inner loops in L1 (best of 5, two rounds):\n");
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
            double best = 1e30;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = cpu();
                for (int n = 0; n < 4000; n++) k[i].f();
                double t = (cpu() - t0) / 4000;
                if (t < best) best = t;
            }
            double c = best / cyc;
            printf("  %-32s %.2f cycles per 32 MAC = %.1f MAC per cycle = %.0f GOP/s per core\n",
                   k[i].name, c / (k[i].macs / 32), k[i].macs / c, 2 * k[i].macs / best / 1e9);
        }
}

int main(void)
{
    ports();
    loops();
    return 0;
}
