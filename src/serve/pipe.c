#include "serve/pipe.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"

struct pipe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int refs;
    atomic_bool cancel;    /* the consumer is gone */
    atomic_bool interrupt; /* the server asks the producer to end early */
    struct buf data;
    size_t rpos;
    bool head;
    int status;
    const char *ctype;
    enum pipe_state state;
};

struct pipe *pipe_new(void)
{
    struct pipe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&p->refs, 1);
    atomic_init(&p->cancel, false);
    atomic_init(&p->interrupt, false);
    p->state = PIPE_OPEN;
    return p;
}

/* The invariants of pipe.h, checked under the lock (debug and ASan builds; release builds
 * define NDEBUG only if the Makefile is told to). */
static void check_locked(const struct pipe *p)
{
    assert(p->state >= PIPE_OPEN && p->state < PIPE_STATE_COUNT);
    assert(p->rpos <= p->data.len);
    assert(p->head || (p->data.len == 0 && p->state == PIPE_OPEN)); /* no byte before the head */
    assert(!p->head || p->ctype);
    (void)p;
}

void pipe_ref(struct pipe *p)
{
    int before = atomic_fetch_add(&p->refs, 1);
    assert(before > 0); /* a reference is only taken from a live one */
    (void)before;
}

void pipe_unref(struct pipe *p)
{
    if (!p) return;
    int before = atomic_fetch_sub(&p->refs, 1);
    assert(before > 0);
    if (before != 1) return;
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    buf_free(&p->data);
    free(p);
}

/* Content types are string literals chosen by the encoders, so storing the pointer is safe. */
static int begin_locked(struct pipe *p, int status, const char *ctype)
{
    check_locked(p);
    if (p->head || p->state != PIPE_OPEN) return -1;
    assert(ctype && status >= 100 && status <= 599);
    p->head = true;
    p->status = status;
    p->ctype = ctype;
    return 0;
}

/* OPEN -> DONE or OPEN -> FAILED, exactly once; a head exists from then on. */
static void end_locked(struct pipe *p, enum pipe_state to)
{
    assert(p->state == PIPE_OPEN && (to == PIPE_DONE || to == PIPE_FAILED));
    assert(p->head);
    p->state = to;
    check_locked(p);
}

int pipe_begin(struct pipe *p, int status, const char *content_type)
{
    pthread_mutex_lock(&p->mu);
    int rc = begin_locked(p, status, content_type);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

int pipe_write(struct pipe *p, const void *data, size_t n)
{
    int rc = -1;
    pthread_mutex_lock(&p->mu);
    if (p->state == PIPE_OPEN) {
        if (!p->head) begin_locked(p, 200, "application/json");
        rc = buf_append(&p->data, data, n);
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void pipe_close(struct pipe *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->state == PIPE_OPEN) {
        if (!p->head) begin_locked(p, 200, "application/json");
        end_locked(p, PIPE_DONE);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pipe_fail(struct pipe *p, int status, const char *body)
{
    pthread_mutex_lock(&p->mu);
    if (p->state == PIPE_OPEN) {
        if (!p->head) begin_locked(p, status, "application/json");
        if (body) buf_puts(&p->data, body);
        end_locked(p, PIPE_FAILED);
    }
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

bool pipe_cancelled(struct pipe *p)
{
    return atomic_load(&p->cancel) || atomic_load(&p->interrupt);
}

bool pipe_abandoned(struct pipe *p)
{
    return atomic_load(&p->cancel);
}

bool pipe_interrupted(struct pipe *p)
{
    return atomic_load(&p->interrupt);
}

void pipe_interrupt(struct pipe *p)
{
    atomic_store(&p->interrupt, true);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void pipe_cancel(struct pipe *p)
{
    atomic_store(&p->cancel, true);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static void deadline(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

int pipe_wait_head(struct pipe *p, int timeout_ms, int *status, const char **content_type)
{
    struct timespec ts;
    deadline(&ts, timeout_ms);
    pthread_mutex_lock(&p->mu);
    while (!p->head && !atomic_load(&p->cancel)) {
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT) break;
    }
    int rc = p->head ? 1 : 0;
    if (rc) {
        *status = p->status;
        *content_type = p->ctype;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

long pipe_read(struct pipe *p, void *out, size_t cap, int timeout_ms)
{
    struct timespec ts;
    deadline(&ts, timeout_ms);
    pthread_mutex_lock(&p->mu);
    while (p->rpos == p->data.len && p->state == PIPE_OPEN && !atomic_load(&p->cancel)) {
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT) break;
    }
    check_locked(p);
    long rc;
    size_t avail = p->data.len - p->rpos;
    if (avail > 0) {
        size_t n = avail < cap ? avail : cap;
        memcpy(out, p->data.data + p->rpos, n);
        p->rpos += n;
        rc = (long)n;
        /* Everything delivered: restart at the front so the buffer does not grow with the stream.
         */
        if (p->rpos == p->data.len) {
            buf_reset(&p->data);
            p->rpos = 0;
        }
    } else if (p->state == PIPE_DONE) {
        rc = -1;
    } else if (p->state == PIPE_FAILED) {
        rc = -2;
    } else {
        rc = 0;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

enum pipe_state pipe_state(struct pipe *p)
{
    pthread_mutex_lock(&p->mu);
    enum pipe_state s = p->state;
    pthread_mutex_unlock(&p->mu);
    return s;
}

enum pipe_state pipe_wait_end(struct pipe *p, int timeout_ms)
{
    struct timespec ts;
    deadline(&ts, timeout_ms);
    pthread_mutex_lock(&p->mu);
    while (p->state == PIPE_OPEN)
        if (pthread_cond_timedwait(&p->cv, &p->mu, &ts) == ETIMEDOUT) break;
    enum pipe_state s = p->state;
    pthread_mutex_unlock(&p->mu);
    return s;
}

size_t pipe_buffered(struct pipe *p)
{
    pthread_mutex_lock(&p->mu);
    size_t n = p->data.len - p->rpos;
    pthread_mutex_unlock(&p->mu);
    return n;
}
