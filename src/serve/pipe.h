/* pipe — the per-request stream pipe between the worker (producer) and a connection thread
 * (consumer). The only object the two share (R-CONC-3).
 *
 * Invariants: the head (status + content type) is set at most once, before any byte; the terminal
 * state goes OPEN -> DONE or OPEN -> FAILED exactly once; bytes written are delivered in order and
 * completely, even after the producer finished. The producer never blocks on the consumer.
 * Two flags ask the producer to stop early (it polls pipe_cancelled once per token): the
 * consumer's cancel (client gone: nothing more will be read, writes are refused) and the
 * server's interrupt (shutdown: the consumer still reads, so the producer ends the stream with a
 * well-formed in-band error). Both only ever go from false to true.
 * Reference counted: pipe_new gives one reference; every holder calls pipe_unref once. */
#ifndef LMS_SERVE_PIPE_H
#define LMS_SERVE_PIPE_H

#include <stdbool.h>
#include <stddef.h>

enum pipe_state { PIPE_OPEN, PIPE_DONE, PIPE_FAILED, PIPE_STATE_COUNT };

struct pipe;

struct pipe *pipe_new(void);
void pipe_ref(struct pipe *p);
void pipe_unref(struct pipe *p);

/* --- producer side (worker) --- */
/* Sets the head. Returns 0, -1 if the head was already set or the pipe is terminal. */
int pipe_begin(struct pipe *p, int status, const char *content_type);
/* Appends bytes (begins with 200/application/json if no head yet). -1 on OOM or terminal pipe. */
int pipe_write(struct pipe *p, const void *data, size_t n);
/* Ends the stream successfully. */
void pipe_close(struct pipe *p);
/* Ends the stream as failed. If the head was not set yet, sets it to (status, application/json)
 * and the body to `body` (a plain error reply); otherwise appends `body` (an in-band error frame,
 * may be NULL) before failing. */
void pipe_fail(struct pipe *p, int status, const char *body);
/* The producer should stop: cancelled by the consumer or interrupted by the server. */
bool pipe_cancelled(struct pipe *p);
/* Cancelled by the consumer only: the client is gone, nothing written will be read. */
bool pipe_abandoned(struct pipe *p);
/* Server side (shutdown): asks the producer to end early; the consumer keeps reading. */
void pipe_interrupt(struct pipe *p);
bool pipe_interrupted(struct pipe *p);

/* --- consumer side (connection thread) --- */
void pipe_cancel(struct pipe *p);
/* Waits up to timeout_ms for the head (or a terminal state). Returns 1 when the head is set
 * (status/content type filled, content_type valid while the pipe lives), 0 on timeout. */
int pipe_wait_head(struct pipe *p, int timeout_ms, int *status, const char **content_type);
/* Copies up to cap bytes not yet read. Waits up to timeout_ms when none is available.
 * Returns bytes (> 0), 0 on timeout, -1 at the end of a DONE pipe, -2 at the end of a FAILED one.
 */
long pipe_read(struct pipe *p, void *out, size_t cap, int timeout_ms);
enum pipe_state pipe_state(struct pipe *p);
/* Waits up to timeout_ms for the producer to end the pipe (DONE or FAILED); returns the state. */
enum pipe_state pipe_wait_end(struct pipe *p, int timeout_ms);
size_t pipe_buffered(struct pipe *p); /* bytes written but not read yet */

#endif
