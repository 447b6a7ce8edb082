#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/kernels/threadpool.h"

static void cover_noop(void *ctx, int ith, int nth)
{
    (void)ctx, (void)ith, (void)nth;
}

struct cover_ctx {
    int64_t n;
    _Atomic int *hits;
    _Atomic int calls;
    int nth_seen[64];
};

/* each thread takes a contiguous slice; every index must be hit exactly once */
static void cover(void *vctx, int ith, int nth)
{
    struct cover_ctx *c = vctx;
    int64_t per = (c->n + nth - 1) / nth, a = ith * per, b = a + per < c->n ? a + per : c->n;
    for (int64_t i = a; i < b; i++)
        atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->calls, 1);
    c->nth_seen[ith] = nth;
}

Test(threadpool, every_index_once_many_runs)
{
    for (int nt = 1; nt <= 5; nt++) {
        struct threadpool *tp = tp_new(nt);
        cr_assert_not_null(tp);
        cr_assert_eq(tp_size(tp), nt);
        int runs = nt <= 2 ? 2000 : 300;
        struct cover_ctx c = {.n = 1003};
        c.hits = calloc((size_t)c.n, sizeof *c.hits);
        for (int run = 0; run < runs; run++) {
            tp_run(tp, cover, &c);
            cr_assert_eq(atomic_load(&c.calls), nt * (run + 1));
            for (int t = 0; t < nt; t++)
                cr_assert_eq(c.nth_seen[t], nt);
        }
        for (int64_t i = 0; i < c.n; i++)
            cr_assert_eq(atomic_load(&c.hits[i]), runs, "index %ld", (long)i);
        free(c.hits);
        tp_free(tp);
    }
}

/* results written by workers are visible to the owner after tp_run returns (no atomics in the
 * payload), also after the workers went to sleep between jobs */
struct sum_ctx {
    const int *v;
    int64_t n;
    long long part[8];
};

static void sum_part(void *vctx, int ith, int nth)
{
    struct sum_ctx *c = vctx;
    long long s = 0;
    for (int64_t i = ith; i < c->n; i += nth)
        s += c->v[i];
    c->part[ith] = s;
}

Test(threadpool, results_visible_after_sleep)
{
    struct threadpool *tp = tp_new(3);
    int v[1000];
    long long want = 0;
    for (int i = 0; i < 1000; i++)
        v[i] = i * 7 - 300, want += v[i];
    struct sum_ctx c = {.v = v, .n = 1000};
    for (int run = 0; run < 6; run++) {
        memset(c.part, 0, sizeof c.part);
        tp_run(tp, sum_part, &c);
        cr_assert_eq(c.part[0] + c.part[1] + c.part[2], want);
        if (run % 2) usleep(30000); /* long enough for the workers to stop spinning and sleep */
    }
    tp_free(tp);
}

Test(threadpool, limits_and_default)
{
    cr_assert_null(tp_new(0));
    cr_assert_null(tp_new(-3));
    int d = tp_default_threads();
    cr_assert(d >= 1 && d <= sysconf(_SC_NPROCESSORS_ONLN), "default threads %d", d);
    tp_free(NULL);
}

/* tp_run_dynamic: work taken from a counter; every item done exactly once whoever joins, and the
 * caller returns only when all joined workers left fn. */
struct dyn_ctx {
    _Atomic int64_t next;
    int64_t n;
    _Atomic int *hits;
    _Atomic int inside;
};

static void dyn_fn(void *vctx, int ith, int nth)
{
    struct dyn_ctx *c = vctx;
    (void)ith, (void)nth;
    atomic_fetch_add(&c->inside, 1);
    for (;;) {
        int64_t i = atomic_fetch_add(&c->next, 1);
        if (i >= c->n) break;
        atomic_fetch_add(&c->hits[i], 1);
    }
    atomic_fetch_sub(&c->inside, 1);
}

Test(threadpool, dynamic_every_item_once)
{
    for (int nt = 1; nt <= 4; nt++) {
        struct threadpool *tp = tp_new(nt);
        struct dyn_ctx c = {.n = 777};
        c.hits = calloc((size_t)c.n, sizeof *c.hits);
        int runs = 1500;
        for (int run = 0; run < runs; run++) {
            atomic_store(&c.next, 0);
            tp_run_dynamic(tp, dyn_fn, &c);
            cr_assert_eq(atomic_load(&c.inside), 0, "a worker still inside fn after return");
            if (run % 500 == 499) usleep(20000);            /* let workers fall asleep */
            if (run % 3 == 0) tp_run(tp, cover_noop, NULL); /* interleave with static jobs */
        }
        for (int64_t i = 0; i < c.n; i++)
            cr_assert_eq(atomic_load(&c.hits[i]), runs, "item %ld", (long)i);
        free(c.hits);
        tp_free(tp);
    }
}

/* Dynamic and plain jobs back to back with more threads than cores (workers are often
 * descheduled between reading the generation and the job): every plain job runs exactly once
 * on every thread index, every dynamic item exactly once, and no call hangs. This is the pattern
 * that exposed the lost-wakeup race of the first late-join protocol (the kind of job was read
 * separately from its generation). */
struct mix_ctx {
    _Atomic int per_ith[16];
};

static void mix_plain(void *vctx, int ith, int nth)
{
    struct mix_ctx *c = vctx;
    (void)nth;
    atomic_fetch_add(&c->per_ith[ith], 1);
}

Test(threadpool, dynamic_and_plain_interleaved, .timeout = 120)
{
    for (int nt = 2; nt <= 8; nt += 3) {
        struct threadpool *tp = tp_new(nt);
        struct dyn_ctx d = {.n = 97};
        d.hits = calloc((size_t)d.n, sizeof *d.hits);
        struct mix_ctx m = {0};
        int runs = 20000, plain = 0;
        for (int run = 0; run < runs; run++) {
            atomic_store(&d.next, 0);
            tp_run_dynamic(tp, dyn_fn, &d);
            cr_assert_eq(atomic_load(&d.inside), 0);
            if (run % 2 == 0) {
                tp_run(tp, mix_plain, &m);
                plain++;
                for (int t = 0; t < nt; t++)
                    cr_assert_eq(atomic_load(&m.per_ith[t]), plain, "run %d ith %d", run, t);
            }
            if (run % 5000 == 4999) usleep(20000); /* let the workers fall asleep */
        }
        for (int64_t i = 0; i < d.n; i++)
            cr_assert_eq(atomic_load(&d.hits[i]), runs, "item %ld", (long)i);
        free(d.hits);
        tp_free(tp);
    }
}
