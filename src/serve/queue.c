#include "serve/queue.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "base/log.h"

double mono_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct job *job_new(void)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->pipe = pipe_new();
    if (!j->pipe) {
        free(j);
        return NULL;
    }
    atomic_init(&j->refs, 1);
    request_init(&j->req);
    return j;
}

void job_ref(struct job *j)
{
    int before = atomic_fetch_add(&j->refs, 1);
    assert(before > 0); /* only a holder takes another reference */
    (void)before;
}

void job_unref(struct job *j)
{
    if (!j) return;
    int before = atomic_fetch_sub(&j->refs, 1);
    assert(before > 0);
    if (before != 1) return;
    assert(!j->queued && !j->next); /* the queue holds a reference while it links the job */
    if (j->sink_free) j->sink_free(j->sink.ctx);
    request_free(&j->req);
    pipe_unref(j->pipe);
    free(j);
}

struct queue {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct job *head, *tail;
    int len, cap;
    bool stopping, stopped;
    struct job *running;               /* the job run() was called with */
    struct job *extra[QUEUE_MAX_TAKEN]; /* jobs run() took beside it (queue_take), NULL = free */
    queue_run_fn run;
    void *arg;
    pthread_t thread;
};

/* The ownership invariants of queue.h (lock held): the list holds exactly len jobs, each marked
 * queued and holding a reference; the running job is not in it. Walks the list, so only in
 * debug and ASan builds. */
static void check_locked(const struct queue *q)
{
#ifndef NDEBUG
    int n = 0;
    const struct job *last = NULL;
    for (const struct job *j = q->head; j; j = j->next) {
        assert(j->queued && atomic_load(&j->refs) >= 1 && j != q->running);
        for (int i = 0; i < QUEUE_MAX_TAKEN; i++) assert(j != q->extra[i]);
        last = j;
        n++;
    }
    assert(n == q->len && n <= q->cap && last == q->tail);
    assert(!q->running || !q->running->queued);
#endif
    (void)q;
}

/* After run: a pipe still open gets its ending here. Interrupted (shutdown) with the client
 * still reading: the dialect's own error ending (an in-band frame once streaming, else a whole
 * 503 body). Client gone: 499, nobody reads it. Neither: a backend bug, 500, also in the
 * dialect's shape (the sink's error hook). */
static void finish_job(struct job *j)
{
    if (pipe_state(j->pipe) != PIPE_OPEN) return;
    if (pipe_abandoned(j->pipe)) {
        pipe_fail(j->pipe, 499, NULL);
    } else if (pipe_interrupted(j->pipe)) {
        struct err e;
        err_set(&e, ERR_CANCELLED, "the server is shutting down; the reply was cut short");
        if (j->sink.error) j->sink.error(j->sink.ctx, &e);
        pipe_fail(j->pipe, 503, NULL); /* in case the sink wrote nothing */
    } else {
        /* the dialect's own error body (api/), as for every other failure: no wire shape here */
        log_error("worker: job finished without ending its stream");
        struct err e;
        err_set(&e, ERR_INTERNAL, "internal error: reply not finished");
        if (j->sink.error) j->sink.error(j->sink.ctx, &e);
        pipe_fail(j->pipe, 500, NULL); /* in case the sink wrote nothing */
    }
}

static void *worker_main(void *arg)
{
    struct queue *q = arg;
    for (;;) {
        pthread_mutex_lock(&q->mu);
        while (!q->head && !q->stopping)
            pthread_cond_wait(&q->cv, &q->mu);
        if (!q->head) { /* stopping and drained */
            pthread_mutex_unlock(&q->mu);
            break;
        }
        struct job *j = q->head;
        q->head = j->next;
        if (!q->head) q->tail = NULL;
        j->next = NULL;
        j->queued = false;
        q->len--;
        q->running = j;
        bool stop = q->stopping;
        check_locked(q);
        pthread_mutex_unlock(&q->mu);

        if (stop) pipe_interrupt(j->pipe);
        j->t_start = mono_seconds();
        if (!pipe_cancelled(j->pipe)) q->run(q->arg, j);
        if (!j->t_end) j->t_end = mono_seconds();
        finish_job(j);

        pthread_mutex_lock(&q->mu);
        q->running = NULL;
        for (int i = 0; i < QUEUE_MAX_TAKEN; i++) assert(!q->extra[i]); /* run() ended them */
        pthread_cond_broadcast(&q->cv);
        pthread_mutex_unlock(&q->mu);
        job_unref(j);
    }
    return NULL;
}

struct queue *queue_new(int cap, queue_run_fn run, void *arg, struct err *e)
{
    if (cap < 1) {
        err_set(e, ERR_INVALID, "queue capacity must be >= 1");
        return NULL;
    }
    struct queue *q = calloc(1, sizeof *q);
    if (!q) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&q->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->cv, &ca);
    pthread_condattr_destroy(&ca);
    q->cap = cap;
    q->run = run;
    q->arg = arg;
    if (pthread_create(&q->thread, NULL, worker_main, q) != 0) {
        pthread_mutex_destroy(&q->mu);
        pthread_cond_destroy(&q->cv);
        free(q);
        err_set(e, ERR_INTERNAL, "cannot start the worker thread");
        return NULL;
    }
    return q;
}

int queue_push(struct queue *q, struct job *j, struct err *e)
{
    pthread_mutex_lock(&q->mu);
    if (q->stopping) {
        pthread_mutex_unlock(&q->mu);
        return err_set(e, ERR_CANCELLED, "the server is shutting down");
    }
    if (q->len >= q->cap) {
        pthread_mutex_unlock(&q->mu);
        return err_set(e, ERR_BUSY, "the request queue is full (%d waiting); retry later", q->cap);
    }
    job_ref(j);
    j->queue = q;
    j->t_enqueue = mono_seconds();
    j->next = NULL;
    j->queued = true;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->len++;
    check_locked(q);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

/* Unlinks j; caller holds the lock and knows j is queued. */
static bool unlink_locked(struct queue *q, struct job *j)
{
    struct job **pp = &q->head, *prev = NULL;
    while (*pp && *pp != j) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp) return false;
    *pp = j->next;
    if (q->tail == j) q->tail = prev;
    j->next = NULL;
    j->queued = false;
    q->len--;
    return true;
}

bool queue_remove(struct queue *q, struct job *j)
{
    pthread_mutex_lock(&q->mu);
    /* only the side that unlinks a job drops the queue's reference (shutdown takes the list) */
    bool was = j->queued && unlink_locked(q, j);
    check_locked(q);
    pthread_mutex_unlock(&q->mu);
    if (was) {
        pipe_cancel(j->pipe);
        pipe_fail(j->pipe, 499, NULL);
        job_unref(j);
    }
    return was;
}

struct job *queue_take(struct queue *q, bool (*ok)(const struct job *j))
{
    pthread_mutex_lock(&q->mu);
    struct job *j = q->head;
    int at = 0;
    while (at < QUEUE_MAX_TAKEN && q->extra[at]) at++;
    if (!j || q->stopping || at == QUEUE_MAX_TAKEN || (ok && !ok(j))) {
        pthread_mutex_unlock(&q->mu);
        return NULL;
    }
    q->head = j->next;
    if (!q->head) q->tail = NULL;
    j->next = NULL;
    j->queued = false;
    q->len--;
    q->extra[at] = j;
    check_locked(q);
    pthread_mutex_unlock(&q->mu);
    j->t_start = mono_seconds();
    return j;
}

void queue_done(struct queue *q, struct job *j)
{
    if (!j->t_end) j->t_end = mono_seconds();
    finish_job(j);
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < QUEUE_MAX_TAKEN; i++)
        if (q->extra[i] == j) q->extra[i] = NULL;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    job_unref(j);
}

int queue_len(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    int n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

bool queue_busy(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    bool b = q->running != NULL;
    pthread_mutex_unlock(&q->mu);
    return b;
}

void queue_drain(struct queue *q, int grace_ms)
{
    pthread_mutex_lock(&q->mu);
    if (q->stopped || q->stopping) { /* drained already (queue_free after queue_drain) */
        pthread_mutex_unlock(&q->mu);
        return;
    }
    q->stopping = true;
    struct job *list = q->head;
    for (struct job *k = list; k; k = k->next)
        k->queued = false; /* ours now, not removable */
    q->head = q->tail = NULL;
    q->len = 0;
    check_locked(q);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    while (list) {
        struct job *n = list->next;
        list->next = NULL;
        /* Not started, so nobody else uses its sink: the dialect renders the 503. The pipe is
         * not cancelled: its reader must still collect and send that body. */
        struct err e;
        err_set(&e, ERR_CANCELLED, "the server is shutting down");
        if (list->sink.error) list->sink.error(list->sink.ctx, &e);
        pipe_fail(list->pipe, 503, NULL);
        job_unref(list);
        list = n;
    }
    /* The running job may finish within the grace period; then it is interrupted. */
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += grace_ms / 1000;
    ts.tv_nsec += (long)(grace_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&q->mu);
    while (q->running && grace_ms > 0)
        if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT) break;
    if (q->running) pipe_interrupt(q->running->pipe);
    for (int i = 0; i < QUEUE_MAX_TAKEN; i++)
        if (q->extra[i]) pipe_interrupt(q->extra[i]->pipe);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->thread, NULL);
    pthread_mutex_lock(&q->mu);
    q->stopped = true;
    pthread_mutex_unlock(&q->mu);
}

void queue_shutdown(struct queue *q)
{
    queue_drain(q, 0);
}

void queue_free(struct queue *q)
{
    if (!q) return;
    queue_shutdown(q);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
