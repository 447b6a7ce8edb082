/* threadpool — persistent workers, one fork-join per tp_run.
 *
 * Protocol: the owner publishes (fn, ctx) and the job word (generation, kind), then bumps the
 * generation counter `gen`. Workers spin on `gen` for a while (ops of one forward pass follow
 * each other within microseconds), then sleep on it with a futex. A plain job waits for every
 * worker (`pending`); a dynamic job (tp_run_dynamic) only for the workers that joined it while it
 * was open, so a descheduled worker never holds the owner up. The last worker to finish bumps
 * `done` and wakes the owner if it went to sleep. All flags are seq_cst atomics so that the
 * "increment sleepers, re-check, sleep" / "publish, check sleepers, wake" pairs cannot lose a
 * wake-up. */
#define _GNU_SOURCE
#include "engine/kernels/threadpool.h"

#include <dirent.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define TP_MAX_THREADS 512
/* Spin about 100-200 us (PAUSE is ~40-140 cycles) before sleeping: long enough to bridge the
 * gaps between the ops of a forward pass, short enough not to burn a loaded machine's CPU. */
#define TP_SPIN_ITERS 4000

struct threadpool {
    int n;
    pthread_t *threads;
    struct tp_worker *workers;
    tp_fn fn;
    void *ctx;
    /* The job word: (generation << 32) | TP_DYN | TP_CLOSED | workers inside a dynamic fn. It is
     * written before `gen` is bumped, and a worker decides what to do from this one word only, so
     * it can never combine one job's generation with another job's kind (the race the earlier
     * protocol had, with the kind in a separate flag). */
    _Atomic uint64_t job;
    _Atomic uint32_t gen;
    _Atomic int32_t pending; /* plain job: workers not yet finished */
    _Atomic uint32_t done;
    _Atomic int32_t sleepers;
    _Atomic int32_t owner_sleeping;
    _Atomic int32_t stop;
};

#define TP_DYN (1ull << 31)
#define TP_CLOSED (1ull << 30)
#define TP_COUNT_MASK (TP_CLOSED - 1)

/* Pause, and now and then give the CPU away: with more threads than cores (or a busy machine)
 * the thread we wait for may need our core. */
static inline void spin_step(int i)
{
    if ((i & 511) == 511)
        sched_yield();
    else
        cpu_relax();
}

struct tp_worker {
    struct threadpool *tp;
    int ith;
};

static void futex_wait(_Atomic uint32_t *addr, uint32_t val)
{
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)addr, (void)val;
    sched_yield();
#endif
}

static void futex_wake(_Atomic uint32_t *addr)
{
#if defined(__linux__)
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

static void signal_done(struct threadpool *tp)
{
    atomic_fetch_add(&tp->done, 1);
    if (atomic_load(&tp->owner_sleeping)) futex_wake(&tp->done);
}

/* Worker protocol. Wait for `gen` to move past the last job handled, then read the job word:
 *   plain job g: run fn once and decrement `pending`. The owner cannot publish another job until
 *     every worker has done so, so fn/ctx are g's and no plain job is ever missed.
 *   dynamic job g: join with a CAS that succeeds only while the word still says "g, open"; once
 *     joined, the owner waits for the count to drop before it publishes again, so fn/ctx read
 *     after the join are g's. A worker that comes late (job closed, or a newer job already in
 *     the word) simply handles whatever job the word names now. */
static void *worker_main(void *arg)
{
    struct tp_worker *w = arg;
    struct threadpool *tp = w->tp;
    uint32_t seen = 0;
    for (;;) {
        /* `seen` may be ahead of `gen` (the word is written first): wait for a newer one */
        uint32_t g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        for (int i = 0; (int32_t)(g - seen) <= 0 && i < TP_SPIN_ITERS; i++) {
            spin_step(i);
            g = atomic_load_explicit(&tp->gen, memory_order_acquire);
        }
        if ((int32_t)(g - seen) <= 0) {
            atomic_fetch_add(&tp->sleepers, 1);
            while ((int32_t)((g = atomic_load(&tp->gen)) - seen) <= 0)
                futex_wait(&tp->gen, g);
            atomic_fetch_sub(&tp->sleepers, 1);
        }
        if (atomic_load(&tp->stop)) break;
        uint64_t st = atomic_load(&tp->job);
        uint32_t jg = (uint32_t)(st >> 32);
        if (jg == seen) continue; /* already handled (the word ran ahead of `gen` earlier) */
        seen = jg;
        if (!(st & TP_DYN)) {
            tp->fn(tp->ctx, w->ith, tp->n);
            if (atomic_fetch_sub(&tp->pending, 1) == 1) signal_done(tp);
            continue;
        }
        int joined = 0;
        while ((uint32_t)(st >> 32) == jg && !(st & TP_CLOSED))
            if (atomic_compare_exchange_weak(&tp->job, &st, st + 1)) {
                joined = 1;
                break;
            }
        if (!joined) continue; /* closed, or a newer job is in the word: next round takes it */
        tp_fn fn = tp->fn;
        void *ctx = tp->ctx;
        fn(ctx, w->ith, tp->n);
        st = atomic_fetch_sub(&tp->job, 1) - 1;
        if ((st & TP_CLOSED) && (st & TP_COUNT_MASK) == 0) signal_done(tp);
    }
    return NULL;
}
struct threadpool *tp_new(int n_threads)
{
    if (n_threads < 1 || n_threads > TP_MAX_THREADS) return NULL;
    struct threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return NULL;
    tp->n = n_threads;
    if (n_threads == 1) return tp;
    tp->threads = calloc((size_t)n_threads, sizeof *tp->threads);
    tp->workers = calloc((size_t)n_threads, sizeof *tp->workers);
    if (!tp->threads || !tp->workers) goto fail;
    for (int i = 1; i < n_threads; i++) {
        tp->workers[i] = (struct tp_worker){.tp = tp, .ith = i};
        if (pthread_create(&tp->threads[i], NULL, worker_main, &tp->workers[i]) != 0) {
            tp->n = i; /* only threads 1..i-1 exist; tp_free joins those */
            goto fail;
        }
    }
    return tp;
fail:
    tp_free(tp);
    return NULL;
}

void tp_free(struct threadpool *tp)
{
    if (!tp) return;
    if (tp->threads) {
        atomic_store(&tp->stop, 1);
        atomic_fetch_add(&tp->gen, 1);
        futex_wake(&tp->gen);
        for (int i = 1; i < tp->n; i++)
            if (tp->threads[i]) pthread_join(tp->threads[i], NULL);
    }
    free(tp->threads);
    free(tp->workers);
    free(tp);
}

int tp_size(const struct threadpool *tp)
{
    return tp ? tp->n : 1;
}

/* Publishes a job: fn/ctx and the job word first, then the generation the workers wait on. */
static void publish(struct threadpool *tp, tp_fn fn, void *ctx, int dyn)
{
    tp->fn = fn;
    tp->ctx = ctx;
    uint32_t g = atomic_load_explicit(&tp->gen, memory_order_relaxed) + 1;
    if (!dyn) atomic_store(&tp->pending, tp->n - 1);
    atomic_store(&tp->job, ((uint64_t)g << 32) | (dyn ? TP_DYN : 0));
    atomic_store(&tp->gen, g);
    if (atomic_load(&tp->sleepers) > 0) futex_wake(&tp->gen);
}

/* Waits until finished(tp) holds: spin a while, then sleep on `done`. */
static void owner_wait(struct threadpool *tp, int (*finished)(struct threadpool *))
{
    for (int i = 0; i < TP_SPIN_ITERS; i++) {
        if (finished(tp)) return;
        spin_step(i);
    }
    atomic_store(&tp->owner_sleeping, 1);
    for (;;) {
        uint32_t d = atomic_load(&tp->done);
        if (finished(tp)) break;
        futex_wait(&tp->done, d);
    }
    atomic_store(&tp->owner_sleeping, 0);
}

static int plain_finished(struct threadpool *tp)
{
    return atomic_load_explicit(&tp->pending, memory_order_acquire) == 0;
}

static int dyn_finished(struct threadpool *tp)
{
    return (atomic_load_explicit(&tp->job, memory_order_acquire) & TP_COUNT_MASK) == 0;
}

void tp_run(struct threadpool *tp, tp_fn fn, void *ctx)
{
    if (!tp || tp->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    publish(tp, fn, ctx, 0);
    fn(ctx, 0, tp->n);
    owner_wait(tp, plain_finished);
}

void tp_run_dynamic(struct threadpool *tp, tp_fn fn, void *ctx)
{
    if (!tp || tp->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    publish(tp, fn, ctx, 1);
    fn(ctx, 0, tp->n);
    /* close: no worker joins from now on; wait only for those inside fn */
    uint64_t st = atomic_fetch_or(&tp->job, TP_CLOSED);
    if ((st & TP_COUNT_MASK) == 0) return;
    owner_wait(tp, dyn_finished);
}

/* Physical cores we may run on: distinct (package, core) pairs among the CPUs in our affinity
 * mask, from sysfs; falls back to the online CPU count. */
int tp_default_threads(void)
{
    int fallback = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (fallback < 1) fallback = 1;
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return fallback;
    int allowed = CPU_COUNT(&set);
    if (allowed < 1) return fallback;
    enum { MAXC = 1024 };
    long keys[MAXC];
    int nk = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && nk < MAXC; cpu++) {
        if (!CPU_ISSET(cpu, &set)) continue;
        char path[128];
        long core = -1, pkg = -1;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f) return allowed;
        if (fscanf(f, "%ld", &core) != 1) core = -1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 cpu);
        f = fopen(path, "r");
        if (f) {
            if (fscanf(f, "%ld", &pkg) != 1) pkg = -1;
            fclose(f);
        }
        if (core < 0) return allowed;
        long key = pkg * 1000000 + core;
        int dup = 0;
        for (int k = 0; k < nk && !dup; k++)
            dup = keys[k] == key;
        if (!dup) keys[nk++] = key;
    }
    return nk > 0 ? nk : allowed;
#else
    return fallback;
#endif
}
