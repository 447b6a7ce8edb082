/* lmserve-bench — prefill and decode throughput, printed like llama.cpp's llama-bench.
 *
 *   lmserve-bench MODEL [-t THREADS] [-p 512] [-n 128] [-r 5] [-d DEPTH] [-m M1,M2,...]
 * ppN: one forward of N tokens into the cache (logits of the last one) -> N / seconds.
 * tgN: N single-token forwards, each with logits -> N / seconds.
 * -d DEPTH: both tests start with DEPTH tokens already in the cache (filled once, untimed; each
 *   run rewinds to DEPTH), as llama-bench's -d; the test is named "ppN @ dDEPTH".
 * -m LIST: small-m passes: for each m, forwards of m tokens of one sequence (all m logits, as a
 *   speculative verify or a lockstep batch would ask), N / m of them -> ms per step and the cost
 *   of a step relative to m = 1.
 * --experts borrow: MoE experts demand-paged from the mapping (lmserve --experts=borrow).
 * --amx-small M: on the AMX path, products of 2..M tokens run the AVX-512 small-m kernel
 *   (amx_gemvm) and larger ones the tiles (0: the tiles for every m >= 2; the same bits either
 *   way, so only the speed changes; default MM_AMX_SMALL_MAX_DEFAULT).
 * --no-mmap: the model file read into memory instead of mapped (lmserve --no-mmap).
 * --no-repack: matrices read in the file's layout, not repacked into 16-row slabs (lmserve
 * --no-repack).
 * --vnni-small M: on the packed VNNI path (AVX-512 without AMX), products of 1..M tokens of q8_0
 *   run the direct small-m kernel (no weight panel) and larger ones pack + kernel (0: pack + kernel
 *   for every m; the same bits either way; default MM_VNNI_SMALL_MAX_DEFAULT).
 * --amx-small-tiles M: inside that kernel, groups of >= M tokens per weight slab do their integer
 *   dots on the tiles, smaller ones with vpdpbusd (same bits; default MM_AMX_SMALL_TILES_DEFAULT).
 * Each test runs once to warm up, then r times; the median and the standard deviation are shown.
 * After the table, one line per test: per token (tg) or per prompt token (pp), the wall time, the
 * process CPU time split into user and sys (all threads; on a shared machine the load-robust
 * figure) and the weight bytes the matmuls read (mm_weight_bytes: for an MoE model only the
 * routed experts' slices), all medians over the r runs. */
#include <errno.h>
#include <stdbool.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/log.h"
#include "engine/model.h"
#include "engine/kernels/ops.h"
#include "engine/kernels/quant.h"
#include "engine/kernels/matmul.h"
#include "engine/kernels/threadpool.h"
#include <sys/resource.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* Runs one test from a cache holding `depth` rows; returns seconds or a negative value on error. */
static double run_pp(struct model *m, int n, int depth, int32_t *tok, int32_t *pos,
                     struct kv_cache **seq, float *logits, struct err *e)
{
    kv_truncate(seq[0], depth);
    struct batch b = {.token = tok + depth, .pos = pos + depth, .seq = seq, .n = n};
    double t0 = now();
    if (model_forward(m, &b, logits, e)) return -1;
    return now() - t0;
}

static double run_tg(struct model *m, int n, int depth, int32_t *tok, struct kv_cache *kv,
                     float *logits, struct err *e)
{
    kv_truncate(kv, depth);
    double t0 = now();
    for (int i = depth; i < depth + n; i++) {
        int32_t p = i;
        struct batch b = {.token = tok + i, .pos = &p, .seq = &kv, .n = 1};
        if (model_forward(m, &b, logits, e)) return -1;
    }
    return now() - t0;
}

/* n / mstep forwards of mstep tokens each (all logits wanted); returns seconds. */
static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* user and sys CPU seconds of the process so far (all threads) */
static void rusage_now(double *user, double *sys)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    *sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Wall seconds; *cpu gets the process CPU seconds of the same steps (all threads). */
static double run_m(struct model *m, int n, int mstep, int depth, int32_t *tok, int32_t *pos,
                    struct kv_cache **seq, float *logits, double *cpu, struct err *e)
{
    kv_truncate(seq[0], depth);
    bool want[512];
    for (int i = 0; i < mstep; i++) want[i] = true;
    double t0 = now(), c0 = cpu_now();
    for (int i = depth; i + mstep <= depth + n; i += mstep) {
        struct batch b = {.token = tok + i, .pos = pos + i, .seq = seq + i, .want_logits = want, .n = mstep};
        if (model_forward(m, &b, logits, e)) return -1;
    }
    *cpu = cpu_now() - c0;
    return now() - t0;
}

static void stats(double *t, long reps, double *med, double *sd)
{
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    double mean = 0, v = 0;
    for (long r = 0; r < reps; r++) mean += t[r] / (double)reps;
    for (long r = 0; r < reps; r++) v += (t[r] - mean) * (t[r] - mean);
    *sd = reps > 1 ? sqrt(v / (double)(reps - 1)) : 0;
    *med = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    long threads = 0, np = 512, ng = 128, reps = 5, depth = 0;
    int mlist[32], n_m = 0;
    bool borrow = false, kv_f32 = false, no_mmap = false, no_repack = false;
    int tiles_min = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long *dst = NULL, lo = 0, hi = 1 << 20;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: lmserve-bench MODEL [-t THREADS] [-p N_PROMPT=512] [-n N_GEN=128] [-r REPS=5] "
                   "[-d DEPTH=0] [-m M1,M2,... (1..512)] [--experts borrow] [--cache-type f16|f32] [--amx-small M] [--amx-small-tiles M] [--vnni-small M] [--no-mmap] [--no-repack]\n");
            return 0;
        }
        if (!strcmp(a, "-m")) {
            char *list = i + 1 < argc ? argv[++i] : NULL, *save = NULL;
            for (char *tk = list ? strtok_r(list, ",", &save) : NULL; tk; tk = strtok_r(NULL, ",", &save)) {
                long v;
                if (n_m == 32 || parse_int(tk, 1, 512, &v)) {
                    fprintf(stderr, "lmserve-bench: bad -m list (at most 32 values in 1..512)\n");
                    return 2;
                }
                mlist[n_m++] = (int)v;
            }
            if (!n_m) {
                fprintf(stderr, "lmserve-bench: -m needs a list such as 1,2,4,8\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(a, "--amx-small-tiles")) {
            long v;
            if (i + 1 >= argc || parse_int(argv[++i], 0, 512, &v)) {
                fprintf(stderr, "lmserve-bench: bad value for --amx-small-tiles (0..512)\n");
                return 2;
            }
            tiles_min = (int)v;
            continue;
        }
        if (!strcmp(a, "--no-mmap")) {
            no_mmap = true;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            no_repack = true;
            continue;
        }
        if (!strcmp(a, "--vnni-small")) {
            long v;
            if (i + 1 >= argc || parse_int(argv[++i], 0, 512, &v)) {
                fprintf(stderr, "lmserve-bench: bad value for --vnni-small (0..512)\n");
                return 2;
            }
            mm_set_vnni_small_max(v);
            continue;
        }
        if (!strcmp(a, "--amx-small")) {
            long v;
            if (i + 1 >= argc || parse_int(argv[++i], 0, 512, &v)) {
                fprintf(stderr, "lmserve-bench: bad value for --amx-small (0..512)\n");
                return 2;
            }
            mm_set_amx_small_max(v);
            continue;
        }
        if (!strcmp(a, "--cache-type")) {
            const char *v = i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "f16") && strcmp(v, "f32")) {
                fprintf(stderr, "lmserve-bench: --cache-type takes f16 or f32, not '%s'\n", v);
                return 2;
            }
            kv_f32 = !strcmp(v, "f32");
            continue;
        }
        if (!strcmp(a, "--experts") || !strcmp(a, "--experts=borrow")) {
            const char *v = a[9] == '=' ? a + 10 : i + 1 < argc ? argv[++i] : "";
            if (strcmp(v, "borrow") && strcmp(v, "resident")) {
                fprintf(stderr, "lmserve-bench: --experts takes borrow or resident, not '%s'\n", v);
                return 2;
            }
            borrow = !strcmp(v, "borrow");
            continue;
        }
        if (!strcmp(a, "-t") || !strcmp(a, "--threads")) dst = &threads, lo = 1, hi = 1024;
        else if (!strcmp(a, "-p")) dst = &np;
        else if (!strcmp(a, "-n")) dst = &ng;
        else if (!strcmp(a, "-r")) dst = &reps, lo = 1, hi = 1000;
        else if (!strcmp(a, "-d")) dst = &depth;
        if (dst) {
            if (i + 1 >= argc || parse_int(argv[++i], lo, hi, dst)) {
                fprintf(stderr, "lmserve-bench: bad value for %s\n", a);
                return 2;
            }
        } else if (a[0] != '-' && !path) {
            path = a;
        } else {
            fprintf(stderr, "lmserve-bench: unknown argument '%s'\n", a);
            return 2;
        }
    }
    if (!path) {
        fprintf(stderr, "usage: lmserve-bench MODEL [-t THREADS] [-p 512] [-n 128] [-r 5]\n");
        return 2;
    }
    log_set_level(LOG_WARN);
    quant_init();
    if (tiles_min >= 0) mm_set_amx_small_tiles(tiles_min);
    struct err e = {0};
    struct model_opts o = {.n_threads = (int)threads, .experts_borrow = borrow, .kv_f32 = kv_f32, .no_mmap = no_mmap,
                           .no_repack = no_repack};
    struct model *m = model_load(path, &o, &e);
    if (!m) {
        fprintf(stderr, "lmserve-bench: %s\n", e.msg);
        return 1;
    }
    const struct model_config *c = model_config(m);
    const struct gguf *g = model_gguf(m);
    double bytes = 0, params = 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        bytes += (double)g->tensors[i].nbytes;
        params += (double)(g->tensors[i].ne[0] * g->tensors[i].ne[1] * g->tensors[i].ne[2] * g->tensors[i].ne[3]);
    }
    int n_slab = 0;
    for (int64_t i = 0; i < g->n_tensors; i++)
        n_slab += g->tensors[i].slab;
    const struct mm_calib *cal = mm_calib_result();
    fprintf(stderr, "load: %d matrices in the slab layout%s; calibration: ", n_slab,
            no_repack ? " (--no-repack)" : "");
    if (cal)
        fprintf(stderr, "prefetch %d B / %d slabs (slab layout %d), decode items of %d rows; sweep (GB per CPU s) %s\n",
                cal->prefetch, cal->pf_slabs, cal->pf_slabs_slab, cal->item_rows, cal->sweep);
    else
        fprintf(stderr, "none (weights under 64 MiB)\n");
    const struct gguf_tensor *wq = gguf_find_tensor(g, "blk.0.attn_q.weight");
    const char *tname = wq ? quant_traits((enum ggml_type)wq->type)->name : "?";
    long nmax = np > ng ? np : ng;
    for (int i = 0; i < n_m; i++) { /* the -m runs: max(ng / m, 4) steps of m tokens */
        long need = (ng / mlist[i] > 4 ? ng / mlist[i] : 4) * mlist[i];
        nmax = need > nmax ? need : nmax;
    }
    nmax += depth;
    if (nmax > c->n_ctx_train && c->n_ctx_train > 0)
        fprintf(stderr, "lmserve-bench: note: depth + test length %ld exceeds the model's training context %d\n", nmax,
                c->n_ctx_train);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)nmax), *pos = malloc(sizeof(int32_t) * (size_t)nmax);
    struct kv_cache **seq = malloc(sizeof *seq * (size_t)nmax);
    float *logits = malloc(sizeof(float) * (size_t)c->n_vocab);
    struct kv_cache *kv = kv_new(m, (int)nmax, &e);
    double *t = malloc(sizeof(double) * (size_t)reps);
    double *nt_buf = malloc(sizeof(double) * (size_t)reps * 10), *nt_wall[2], *nt_user[2], *nt_sys[2], *nt_wb[2],
           *nt_mac[2];
    for (int k = 0; k < 2; k++) {
        nt_wall[k] = nt_buf ? nt_buf + (size_t)reps * (5 * k + 0) : NULL;
        nt_user[k] = nt_buf ? nt_buf + (size_t)reps * (5 * k + 1) : NULL;
        nt_sys[k] = nt_buf ? nt_buf + (size_t)reps * (5 * k + 2) : NULL;
        nt_wb[k] = nt_buf ? nt_buf + (size_t)reps * (5 * k + 3) : NULL;
        nt_mac[k] = nt_buf ? nt_buf + (size_t)reps * (5 * k + 4) : NULL;
    }
    int rc = 1;
    if (!tok || !pos || !seq || !logits || !kv || !t || !nt_buf) {
        fprintf(stderr, "lmserve-bench: %s\n", kv ? "out of memory" : e.msg);
        goto out;
    }
    srand(42);
    for (long i = 0; i < nmax; i++) {
        tok[i] = rand() % c->n_vocab;
        pos[i] = (int32_t)i;
        seq[i] = kv;
    }
    if (depth > 0) { /* fill the cache to DEPTH once; every run rewinds to it */
        for (long i0 = 0; i0 < depth; i0 += 512) {
            long n = depth - i0 < 512 ? depth - i0 : 512;
            struct batch b = {.token = tok + i0, .pos = pos + i0, .seq = seq + i0, .n = n};
            if (model_forward(m, &b, logits, &e)) {
                fprintf(stderr, "lmserve-bench: %s\n", e.msg);
                goto out;
            }
        }
    }
    printf("| model | size | params | backend | threads | test | t/s |\n");
    printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | ------------: | -------------------: |\n");
    for (int test = 0; test < 2; test++) {
        long n = test == 0 ? np : ng;
        if (n <= 0) continue;
        for (long r = -1; r < reps; r++) {
            double u0, s0, u1, s1;
            uint64_t w0 = mm_weight_bytes(), m0 = mm_macs();
            rusage_now(&u0, &s0);
            double s = test == 0 ? run_pp(m, (int)n, (int)depth, tok, pos, seq, logits, &e)
                                 : run_tg(m, (int)n, (int)depth, tok, kv, logits, &e);
            if (s < 0) {
                fprintf(stderr, "lmserve-bench: %s\n", e.msg);
                goto out;
            }
            rusage_now(&u1, &s1);
            if (r >= 0) {
                t[r] = (double)n / s;
                nt_wall[test][r] = s / (double)n * 1e3;
                nt_user[test][r] = (u1 - u0) / (double)n * 1e3;
                nt_sys[test][r] = (s1 - s0) / (double)n * 1e3;
                nt_wb[test][r] = (double)(mm_weight_bytes() - w0) / (double)n;
                nt_mac[test][r] = (double)(mm_macs() - m0) / (double)n;
            }
        }
        double med, sd;
        stats(t, reps, &med, &sd);
        char name[64], test_s[32], backend[32];
        snprintf(name, sizeof name, "%s %.1fM %s", c->arch, params / 1e6, tname);
        if (depth)
            snprintf(test_s, sizeof test_s, "%s%ld @ d%ld", test == 0 ? "pp" : "tg", n, depth);
        else
            snprintf(test_s, sizeof test_s, "%s%ld", test == 0 ? "pp" : "tg", n);
        snprintf(backend, sizeof backend, "CPU %s", quant_isa());
        printf("| %-30s | %6.2f MiB | %8.2f M | %-10s | %7d | %13s | %12.2f ± %5.2f |\n", name,
               bytes / (1024.0 * 1024.0), params / 1e6, backend, tp_size(model_pool(m)), test_s, med, sd);
        fflush(stdout);
    }
    for (int test = 0; test < 2; test++) {
        long n = test == 0 ? np : ng;
        if (n <= 0) continue;
        double w, u, sy, wb, mac, sd;
        stats(nt_wall[test], reps, &w, &sd);
        stats(nt_user[test], reps, &u, &sd);
        stats(nt_sys[test], reps, &sy, &sd);
        stats(nt_wb[test], reps, &wb, &sd);
        stats(nt_mac[test], reps, &mac, &sd);
        char test_s[32];
        if (depth)
            snprintf(test_s, sizeof test_s, "%s%ld @ d%ld", test == 0 ? "pp" : "tg", n, depth);
        else
            snprintf(test_s, sizeof test_s, "%s%ld", test == 0 ? "pp" : "tg", n);
        printf("%s: per token: wall %.2f ms, CPU user %.2f + sys %.2f ms (all %d threads), weights "
               "read %.1f MB (%.2f GB/s of wall time, %.2f GB per CPU second)\n",
               test_s, w, u, sy, tp_size(model_pool(m)), wb / 1e6, wb / w / 1e6, wb / (u + sy) / 1e6);
        /* 2 operations per multiply-add: compare with lmserve-kbench --peak */
        printf("%s: matmul work %.3f GFLOP per token, %.1f GFLOP/s of wall time\n", test_s, 2 * mac / 1e9,
               2 * mac / w / 1e6);
    }
    fflush(stdout);
    if (n_m) {
        /* steps of m tokens: each m runs ~ng tokens (at least 4 steps) */
        /* CPU ms: process CPU time per step over the threads (the load-robust figure on a shared
         * machine: a descheduled slice costs wall time, not CPU time; spinning at a join counts) */
        printf("\n| m | steps | ms per step | x m=1 step | tokens/s | CPU ms per step per thread | x m=1 (CPU) |\n"
               "| --: | --: | --: | --: | --: | --: | --: |\n");
        double base = 0, cbase = 0, *ct = malloc(sizeof(double) * (size_t)reps);
        if (!ct) goto out;
        for (int k = 0; k < n_m; k++) {
            int mm = mlist[k], steps = ng / mm > 4 ? (int)(ng / mm) : 4;
            float *lm = malloc(sizeof(float) * (size_t)c->n_vocab * (size_t)mm);
            if (!lm) goto out;
            for (long r = -1; r < reps; r++) {
                double cpu = 0, sec = run_m(m, steps * mm, mm, (int)depth, tok, pos, seq, lm, &cpu, &e);
                if (sec < 0) {
                    fprintf(stderr, "lmserve-bench: %s\n", e.msg);
                    free(lm);
                    free(ct);
                    goto out;
                }
                if (r >= 0) t[r] = sec / steps * 1e3, ct[r] = cpu / steps * 1e3 / tp_size(model_pool(m));
            }
            free(lm);
            double med, sd, cmed, csd;
            stats(t, reps, &med, &sd);
            stats(ct, reps, &cmed, &csd);
            if (mm == 1) base = med, cbase = cmed;
            if (base > 0)
                printf("| %d | %d | %.2f ± %.2f | %.2f | %.1f | %.2f | %.2f |\n", mm, steps, med, sd, med / base,
                       mm * 1e3 / med, cmed, cmed / cbase);
            else
                printf("| %d | %d | %.2f ± %.2f | (no m = 1 yet) | %.1f | %.2f | |\n", mm, steps, med, sd,
                       mm * 1e3 / med, cmed);
            fflush(stdout);
        }
        free(ct);
    }
    rc = 0;
out:
    kv_free(kv);
    free(tok);
    free(pos);
    free(seq);
    free(logits);
    free(t);
    free(nt_buf);
    model_free(m);
    return rc;
}
