#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "serve/pipe.h"

Test(pipe, head_then_bytes_then_done)
{
    struct pipe *p = pipe_new();
    int st = 0;
    const char *ct = NULL;
    cr_assert_eq(pipe_wait_head(p, 10, &st, &ct), 0);
    cr_assert_eq(pipe_begin(p, 200, "text/event-stream"), 0);
    cr_assert_eq(pipe_begin(p, 500, "x"), -1, "head is set once");
    cr_assert_eq(pipe_wait_head(p, 10, &st, &ct), 1);
    cr_assert_eq(st, 200);
    cr_assert_str_eq(ct, "text/event-stream");
    cr_assert_eq(pipe_write(p, "hello ", 6), 0);
    cr_assert_eq(pipe_write(p, "world", 5), 0);
    char out[64];
    cr_assert_eq(pipe_read(p, out, 4, 10), 4);
    cr_assert_eq(memcmp(out, "hell", 4), 0);
    cr_assert_eq(pipe_read(p, out, 64, 10), 7);
    cr_assert_eq(memcmp(out, "o world", 7), 0);
    cr_assert_eq(pipe_read(p, out, 64, 10), 0, "open and empty: timeout");
    pipe_close(p);
    cr_assert_eq(pipe_write(p, "x", 1), -1, "no writes after close");
    cr_assert_eq(pipe_read(p, out, 64, 10), -1);
    cr_assert_eq(pipe_state(p), PIPE_DONE);
    pipe_unref(p);
}

Test(pipe, fail_before_head_is_plain_error)
{
    struct pipe *p = pipe_new();
    pipe_fail(p, 400, "{\"error\":1}");
    int st = 0;
    const char *ct = NULL;
    cr_assert_eq(pipe_wait_head(p, 10, &st, &ct), 1);
    cr_assert_eq(st, 400);
    cr_assert_str_eq(ct, "application/json");
    char out[64];
    long n = pipe_read(p, out, sizeof out, 10);
    cr_assert_eq(n, 11);
    cr_assert_eq(memcmp(out, "{\"error\":1}", 11), 0);
    cr_assert_eq(pipe_read(p, out, sizeof out, 10), -2);
    pipe_close(p); /* terminal already: no effect */
    cr_assert_eq(pipe_state(p), PIPE_FAILED);
    pipe_unref(p);
}

Test(pipe, fail_after_head_keeps_status_appends_frame)
{
    struct pipe *p = pipe_new();
    pipe_begin(p, 200, "text/event-stream");
    pipe_write(p, "a", 1);
    pipe_fail(p, 500, "E");
    int st = 0;
    const char *ct = NULL;
    pipe_wait_head(p, 10, &st, &ct);
    cr_assert_eq(st, 200);
    char out[8];
    cr_assert_eq(pipe_read(p, out, 8, 10), 2);
    cr_assert_eq(memcmp(out, "aE", 2), 0);
    cr_assert_eq(pipe_read(p, out, 8, 10), -2);
    pipe_unref(p);
}

struct prod {
    struct pipe *p;
    int n;
};

static void *producer(void *arg)
{
    struct prod *pr = arg;
    char line[32];
    for (int i = 0; i < pr->n; i++) {
        int k = snprintf(line, sizeof line, "%d\n", i);
        pipe_write(pr->p, line, (size_t)k);
    }
    pipe_close(pr->p);
    return NULL;
}

/* A consumer that reads nothing until the producer is done still gets every byte in order, and
 * the producer never waited for it (R-CONC-3). */
Test(pipe, stalled_reader_gets_whole_stream)
{
    struct pipe *p = pipe_new();
    struct prod pr = {p, 20000};
    pthread_t t;
    pthread_create(&t, NULL, producer, &pr);
    pthread_join(t, NULL); /* producer finished with nobody reading */
    cr_assert_eq(pipe_state(p), PIPE_DONE);
    char out[1000];
    long n;
    int next = 0;
    char acc[32];
    int al = 0;
    while ((n = pipe_read(p, out, sizeof out, 10)) > 0) {
        for (long i = 0; i < n; i++) {
            if (out[i] == '\n') {
                acc[al] = 0;
                cr_assert_eq(atoi(acc), next);
                next++;
                al = 0;
            } else {
                acc[al++] = out[i];
            }
        }
    }
    cr_assert_eq(n, -1);
    cr_assert_eq(next, 20000);
    pipe_unref(p);
}

Test(pipe, concurrent_reader_and_cancel_wakes)
{
    struct pipe *p = pipe_new();
    struct prod pr = {p, 5000};
    pthread_t t;
    pthread_create(&t, NULL, producer, &pr);
    char out[97];
    long n, total = 0;
    while ((n = pipe_read(p, out, sizeof out, 50)) >= 0)
        total += n;
    pthread_join(t, NULL);
    cr_assert_eq(n, -1);
    long expect = 0;
    for (int i = 0; i < 5000; i++)
        expect += snprintf(out, sizeof out, "%d\n", i);
    cr_assert_eq(total, expect);
    pipe_unref(p);

    struct pipe *q = pipe_new();
    cr_assert(!pipe_cancelled(q));
    pipe_cancel(q);
    cr_assert(pipe_cancelled(q));
    int st;
    const char *ct;
    cr_assert_eq(pipe_wait_head(q, 5000, &st, &ct), 0, "cancel wakes the head wait");
    pipe_unref(q);
}

/* Interrupt (server shutdown) vs cancel (client gone): both stop the producer; only cancel means
 * nobody reads, so only then are the encoders' writes refused (pipe_abandoned). */
Test(pipe, interrupt_stops_producer_but_keeps_reader)
{
    struct pipe *p = pipe_new();
    cr_assert(!pipe_cancelled(p) && !pipe_abandoned(p) && !pipe_interrupted(p));
    pipe_interrupt(p);
    cr_assert(pipe_cancelled(p), "the producer stops at its next token");
    cr_assert(!pipe_abandoned(p), "the reader is still there");
    cr_assert_eq(pipe_write(p, "x", 1), 0, "the error ending can still be written");
    pipe_cancel(p);
    cr_assert(pipe_abandoned(p));
    pipe_unref(p);
}

/* The invariants pipe.h states are checked: a head without a content type is our bug. */
Test(pipe, invariant_head_needs_content_type, .signal = SIGABRT)
{
    struct pipe *p = pipe_new();
    pipe_begin(p, 200, NULL);
}
