#include "serve/queue.h"

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
    atomic_fetch_add(&j->refs, 1);
}

void job_unref(struct job *j)
{
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
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
    struct job *running;
    queue_run_fn run;
    void *arg;
    pthread_t thread;
};

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
        pthread_mutex_unlock(&q->mu);

        if (stop) pipe_cancel(j->pipe);
        j->t_start = mono_seconds();
        if (!pipe_cancelled(j->pipe)) q->run(q->arg, j);
        if (!j->t_end) j->t_end = mono_seconds();
        if (pipe_state(j->pipe) == PIPE_OPEN) {
            if (pipe_cancelled(j->pipe)) {
                pipe_fail(j->pipe, 499, NULL);
            } else {
                log_error("worker: job finished without ending its stream");
                pipe_fail(j->pipe, 500,
                          "{\"error\":{\"message\":\"internal error: reply not finished\","
                          "\"type\":\"server_error\",\"param\":null,\"code\":null}}");
            }
        }

        pthread_mutex_lock(&q->mu);
        q->running = NULL;
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
    pthread_cond_init(&q->cv, NULL);
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
    j->t_enqueue = mono_seconds();
    j->next = NULL;
    j->queued = true;
    if (q->tail)
        q->tail->next = j;
    else
        q->head = j;
    q->tail = j;
    q->len++;
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
    pthread_mutex_unlock(&q->mu);
    if (was) {
        pipe_cancel(j->pipe);
        pipe_fail(j->pipe, 499, NULL);
        job_unref(j);
    }
    return was;
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

void queue_shutdown(struct queue *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->stopped) {
        pthread_mutex_unlock(&q->mu);
        return;
    }
    q->stopping = true;
    struct job *list = q->head;
    for (struct job *k = list; k; k = k->next) k->queued = false; /* ours now, not removable */
    q->head = q->tail = NULL;
    q->len = 0;
    if (q->running) pipe_cancel(q->running->pipe);
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
    while (list) {
        struct job *n = list->next;
        list->next = NULL;
        /* Not started, so nobody else uses its sink: the dialect renders the 503. */
        struct err e;
        err_set(&e, ERR_CANCELLED, "the server is shutting down");
        if (list->sink.error) list->sink.error(list->sink.ctx, &e);
        pipe_fail(list->pipe, 503, NULL);
        pipe_cancel(list->pipe);
        job_unref(list);
        list = n;
    }
    pthread_join(q->thread, NULL);
    pthread_mutex_lock(&q->mu);
    q->stopped = true;
    pthread_mutex_unlock(&q->mu);
}

void queue_free(struct queue *q)
{
    if (!q) return;
    queue_shutdown(q);
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->cv);
    free(q);
}
