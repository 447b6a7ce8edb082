/* queue — jobs, the bounded FIFO queue and the one inference worker (R-CONC-1, 2, 4, 5).
 *
 * A job bundles a normalized request, its stream pipe and its reply sink (the dialect encoder).
 * Jobs are reference counted: the creator holds one reference, queue_push takes another for the
 * queue/worker; whoever drops the last one frees it (request, sink, pipe reference).
 * The worker thread calls run(arg, job) for one job at a time, in arrival order. After run returns,
 * a pipe still open is failed (a backend bug must not leave a client waiting forever). */
#ifndef LMS_SERVE_QUEUE_H
#define LMS_SERVE_QUEUE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"
#include "serve/pipe.h"
#include "serve/request.h"

struct job {
    atomic_int refs;
    struct request req;
    struct pipe *pipe;
    struct reply_sink sink;
    void (*sink_free)(void *ctx); /* frees sink.ctx; may be NULL */
    /* results, written by the worker before the pipe ends (read after it ended) */
    struct usage usage;
    double t_enqueue, t_start, t_first, t_end; /* monotonic seconds; 0 = not reached */
    struct job *next;
    bool queued;
    struct queue *queue; /* the queue it was pushed to (queue_take / queue_done from run) */
};

/* A fresh job with one reference and a new pipe; NULL on OOM. The request is initialized empty. */
struct job *job_new(void);
void job_ref(struct job *j);
void job_unref(struct job *j);

typedef void (*queue_run_fn)(void *arg, struct job *job);

struct queue;
/* Starts the worker thread. cap >= 1. */
struct queue *queue_new(int cap, queue_run_fn run, void *arg, struct err *e);
/* Enqueues (taking a reference). ERR_BUSY when full (-> 429), ERR_CANCELLED when the
 * queue is shutting down. Thread-safe. */
int queue_push(struct queue *q, struct job *j, struct err *e);
/* Unlinks a job that is still waiting (its pipe is failed, the queue's reference dropped).
 * Returns true if it was removed, false if it already runs or ran. Thread-safe. */
bool queue_remove(struct queue *q, struct job *j);
/* Continuous batching (docs/batching.md): from inside run() only (the worker thread), takes the
 * job at the head of the queue if there is one, ok(job) accepts it (NULL = any) and fewer than
 * QUEUE_MAX_TAKEN are taken; it then runs beside run()'s own job until queue_done(q, job), which
 * gives its pipe an ending if it has none (as after run) and drops the queue's reference. Every
 * taken job is done before run() returns. NULL when nothing is taken (also while stopping). */
#define QUEUE_MAX_TAKEN 64
struct job *queue_take(struct queue *q, bool (*ok)(const struct job *j));
void queue_done(struct queue *q, struct job *j);
int queue_len(struct queue *q);
bool queue_busy(struct queue *q); /* the worker is running a job */
/* Shutdown (R-CONC-5): refuses new jobs (ERR_CANCELLED), fails every queued one with its
 * dialect's 503 body, lets the running one finish for up to grace_ms, then interrupts it (its
 * reply ends with the dialect's in-band error, see pipe_interrupt) and joins the worker. Every
 * pipe has ended when it returns. Call once. */
void queue_drain(struct queue *q, int grace_ms);
void queue_shutdown(struct queue *q); /* queue_drain(q, 0) */
void queue_free(struct queue *q);     /* shuts down first if needed */

double mono_seconds(void);

#endif
