#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "serve/queue.h"

/* The run function blocks until released, so tests control exactly what is running. */
struct runner {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started, release;
    char order[64];
    int n_order;
    bool stop_on_cancel;
};

static void run(void *arg, struct job *j)
{
    struct runner *r = arg;
    pthread_mutex_lock(&r->mu);
    r->started++;
    r->order[r->n_order++] = (char)j->req.n;
    pthread_cond_broadcast(&r->cv);
    while (!r->release && !(r->stop_on_cancel && pipe_cancelled(j->pipe))) {
        pthread_mutex_unlock(&r->mu);
        usleep(1000);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    if (pipe_cancelled(j->pipe)) return; /* the worker fails the pipe */
    pipe_write(j->pipe, "ok", 2);
    pipe_close(j->pipe);
}

static void wait_started(struct runner *r, int n)
{
    pthread_mutex_lock(&r->mu);
    while (r->started < n)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static struct job *mk(int tag)
{
    struct job *j = job_new();
    cr_assert_not_null(j);
    j->req.n = tag;
    return j;
}

static void init_runner(struct runner *r)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
}

Test(queue, bounded_fifo_429_and_remove)
{
    struct runner r;
    init_runner(&r);
    struct err e;
    struct queue *q = queue_new(2, run, &r, &e);
    cr_assert_not_null(q);
    struct job *a = mk('a'), *b = mk('b'), *c = mk('c'), *d = mk('d');
    cr_assert_eq(queue_push(q, a, &e), 0);
    wait_started(&r, 1); /* a runs, queue empty again */
    cr_assert(queue_busy(q));
    cr_assert_eq(queue_push(q, b, &e), 0);
    cr_assert_eq(queue_push(q, c, &e), 0);
    cr_assert_eq(queue_len(q), 2);
    cr_assert_eq(queue_push(q, d, &e), -1);
    cr_assert_eq(e.code, ERR_BUSY);
    /* b is cancelled while waiting: removed, never run, its pipe failed */
    cr_assert(queue_remove(q, b));
    cr_assert_eq(pipe_state(b->pipe), PIPE_FAILED);
    cr_assert(!queue_remove(q, a), "a is running, not removable");
    cr_assert_eq(queue_push(q, d, &e), 0, "room again after the removal");
    pthread_mutex_lock(&r.mu);
    r.release = 1;
    pthread_mutex_unlock(&r.mu);
    char out[8];
    while (pipe_read(d->pipe, out, sizeof out, 100) >= 0) {
    }
    cr_assert_eq(pipe_state(d->pipe), PIPE_DONE);
    cr_assert_eq(pipe_state(c->pipe), PIPE_DONE);
    r.order[r.n_order] = 0;
    cr_assert_str_eq(r.order, "acd");
    queue_free(q);
    job_unref(a);
    job_unref(b);
    job_unref(c);
    job_unref(d);
}

Test(queue, cancel_running_and_shutdown_fails_queued)
{
    struct runner r;
    init_runner(&r);
    r.stop_on_cancel = true;
    struct err e;
    struct queue *q = queue_new(4, run, &r, &e);
    struct job *a = mk('a'), *b = mk('b');
    queue_push(q, a, &e);
    wait_started(&r, 1);
    queue_push(q, b, &e);
    queue_shutdown(q); /* cancels a (running), fails b (queued), joins */
    cr_assert(pipe_cancelled(a->pipe));
    cr_assert_eq(pipe_state(a->pipe), PIPE_FAILED, "the worker fails a cancelled job's pipe");
    cr_assert_eq(pipe_state(b->pipe), PIPE_FAILED);
    int st;
    const char *ct;
    cr_assert_eq(pipe_wait_head(b->pipe, 10, &st, &ct), 1);
    cr_assert_eq(st, 503);
    cr_assert_eq(r.started, 1, "b never ran");
    struct job *x = mk('x');
    cr_assert_eq(queue_push(q, x, &e), -1);
    job_unref(x);
    cr_assert_eq(e.code, ERR_CANCELLED);
    queue_free(q);
    job_unref(a);
    job_unref(b);
}

struct remover {
    struct queue *q;
    struct job **jobs;
    int n;
    int removed;
    pthread_barrier_t *go;
};

static void *remove_all(void *arg)
{
    struct remover *r = arg;
    pthread_barrier_wait(r->go);
    /* from the back: the shutdown walks its list from the front, so the two meet midway */
    for (int i = r->n - 1; i >= 0; i--) r->removed += queue_remove(r->q, r->jobs[i]);
    return NULL;
}

/* A client disconnect (queue_remove) racing with shutdown: each queued job's queue reference is
 * dropped exactly once (ASan catches a double unref), and every job ends failed. */
Test(queue, remove_races_shutdown)
{
    /* many jobs: the shutdown's walk over its list is long enough for the remover to overlap it */
    enum { NJ = 3000 };
    static struct job *jobs[NJ];
    for (int round = 0; round < 8; round++) {
        struct runner r;
        init_runner(&r);
        r.stop_on_cancel = true;
        struct err e;
        struct queue *q = queue_new(NJ, run, &r, &e);
        struct job *a = mk('a');
        queue_push(q, a, &e);
        wait_started(&r, 1);
        for (int i = 0; i < NJ; i++) {
            jobs[i] = mk('b' + i);
            cr_assert_eq(queue_push(q, jobs[i], &e), 0);
        }
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        struct remover rm = {q, jobs, NJ, 0, &go};
        pthread_t t;
        pthread_create(&t, NULL, remove_all, &rm);
        pthread_barrier_wait(&go); /* both sides start together */
        queue_shutdown(q);
        pthread_join(t, NULL);
        pthread_barrier_destroy(&go);
        for (int i = 0; i < NJ; i++) {
            cr_assert_eq(pipe_state(jobs[i]->pipe), PIPE_FAILED);
            job_unref(jobs[i]);
        }
        cr_assert_eq(r.started, 1);
        queue_free(q);
        job_unref(a);
    }
}

/* A sink error hook that records what the worker / the drain told the job. */
static int n_errors;
static enum err_code last_error;
static void note_error(void *ctx, const struct err *e)
{
    struct job *j = ctx;
    n_errors++;
    last_error = e->code;
    pipe_fail(j->pipe, 503, "{\"error\":\"shutting down\"}");
}

/* Shutdown with a grace period (R-CONC-5): a queued job gets its 503 body through its sink and
 * its pipe is NOT cancelled (the reader must still send that body: cancelling it lost ~22 % of
 * the queued replies); the running job is interrupted once the grace is over, and the worker
 * gives it its error ending through the sink (the reader is still there: not abandoned). */
Test(queue, drain_interrupts_running_after_grace_and_keeps_queued_readers)
{
    struct runner r;
    init_runner(&r);
    r.stop_on_cancel = true;
    struct err e;
    struct queue *q = queue_new(4, run, &r, &e);
    struct job *a = mk('a'), *b = mk('b');
    a->sink.ctx = a;
    a->sink.error = note_error;
    b->sink.ctx = b;
    b->sink.error = note_error;
    n_errors = 0;
    queue_push(q, a, &e);
    wait_started(&r, 1);
    queue_push(q, b, &e);
    queue_drain(q, 50);
    cr_assert_eq(n_errors, 2);
    cr_assert_eq(last_error, ERR_CANCELLED);
    cr_assert(pipe_interrupted(a->pipe) && !pipe_abandoned(a->pipe));
    cr_assert(!pipe_cancelled(b->pipe), "a queued job's reader still has a reply to send");
    cr_assert_eq(pipe_state(a->pipe), PIPE_FAILED);
    cr_assert_eq(pipe_state(b->pipe), PIPE_FAILED);
    char out[64];
    long n = pipe_read(b->pipe, out, sizeof out - 1, 10);
    cr_assert_gt(n, 0);
    out[n] = 0;
    cr_assert_str_eq(out, "{\"error\":\"shutting down\"}");
    cr_assert_eq(r.started, 1, "b never ran");
    queue_free(q);
    job_unref(a);
    job_unref(b);
}

/* A running job that finishes within the grace period is not interrupted: its reply is whole. */
Test(queue, drain_lets_running_finish_within_grace)
{
    struct runner r;
    init_runner(&r);
    struct err e;
    struct queue *q = queue_new(4, run, &r, &e);
    struct job *a = mk('a');
    queue_push(q, a, &e);
    wait_started(&r, 1);
    pthread_mutex_lock(&r.mu);
    r.release = 1; /* finishes while the drain waits */
    pthread_mutex_unlock(&r.mu);
    queue_drain(q, 10000);
    cr_assert(!pipe_interrupted(a->pipe));
    cr_assert_eq(pipe_state(a->pipe), PIPE_DONE);
    queue_free(q);
    job_unref(a);
}

/* The ownership invariant is checked: dropping the last reference of a job the queue still
 * links is our bug, and aborts rather than leaving a dangling list entry. */
Test(queue, invariant_freeing_a_linked_job_aborts, .signal = SIGABRT)
{
    struct job *j = mk('j');
    j->queued = true;
    job_unref(j);
}
