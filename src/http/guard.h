/* guard — admission control and deadlines for the HTTP front end (R-CONC-1, R-CONC-7).
 *
 * The guard owns the listening socket and one thread. That thread
 *   - accepts: a connection is admitted (handed to the HTTP library through the admit callback)
 *     while the server holds fewer than `conns` connections and its address fewer than
 *     `conns_per_client`; otherwise it is *refused*: the same thread reads at most its request
 *     head (non-blocking, REFUSE_READ_MS), writes a small complete reply rendered by the reply
 *     callback (a dialect-shaped 503 with Retry-After, or /health's answer) and closes after a
 *     short lingering read. So a full server answers at once instead of leaving clients in the
 *     kernel's accept queue, and /health never needs a connection slot;
 *   - watches deadlines: every admitted connection is registered (guard_conn_open from the
 *     library's connection-start notification, guard_conn_close from its close notification)
 *     with a state and an absolute deadline:
 *       HEAD  request head not complete: deadline = accept + header_timeout; for the next request
 *             of a keep-alive connection: end of the previous reply + idle_timeout +
 *             header_timeout (the library's idle timeout closes it sooner if it sends nothing)
 *       BODY  head done, body being read: deadline = head + body_timeout + length / body_min_rate
 *             (length = Content-Length, or the body limit when the body is chunked)
 *       BUSY  the request is handled and its reply written: no deadline (a queued or stalled
 *             stream is legitimately idle)
 *     A connection past its deadline is cut: a 408 is written and the socket shut down, which
 *     wakes the library's blocked read; the library then closes it. Bytes arriving one at a time
 *     do not extend a deadline (the library's idle timeout restarts on every byte; this does not).
 *
 * The guard works on a dup() of each admitted socket, so it never touches a descriptor number
 * the library has closed and the system may have reused. Every function is thread-safe. */
#ifndef LMS_HTTP_GUARD_H
#define LMS_HTTP_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "base/buf.h"
#include "base/err.h"

enum guard_state { GUARD_HEAD, GUARD_BODY, GUARD_BUSY, GUARD_STATE_COUNT };

/* Why the guard answers a request itself. */
enum guard_why {
    GUARD_FULL,       /* the server holds `conns` connections */
    GUARD_PER_CLIENT, /* the client's address holds `conns_per_client` */
    GUARD_TIMEOUT,    /* an admitted connection missed its head or body deadline */
    GUARD_WHY_COUNT
};

struct guard_opts {
    int conns;            /* admitted connections at most */
    int conns_per_client; /* admitted connections per client address at most */
    int header_timeout_s; /* seconds for a request head */
    int body_timeout_s;   /* seconds for a body, plus length / body_min_rate */
    size_t body_min_rate; /* bytes per second a body must at least arrive at */
    size_t max_body;      /* length assumed for a chunked body */
    int idle_timeout_s;   /* the library's keep-alive idle timeout (see HEAD above) */
};

/* Hands an admitted socket to the HTTP library; 0, or -1 when the library refused (and closed)
 * it. Called on the guard's thread. */
typedef int (*guard_admit_fn)(void *arg, int fd, const struct sockaddr *sa, socklen_t len);
/* Renders a whole HTTP/1.1 reply (status line, headers, body) for a request the guard answers:
 * refused (GUARD_FULL / GUARD_PER_CLIENT) or cut (GUARD_TIMEOUT). method and path are "" when
 * the request line never arrived; limit is the limit that was hit (connections or seconds).
 * Called on the guard's thread; must not block. */
typedef void (*guard_reply_fn)(void *arg, enum guard_why why, int limit, const char *method,
                               const char *path, struct buf *out);

struct guard;
struct guard_conn;

/* Takes ownership of listen_fd (bound and listening) and starts the thread. *publish (when not
 * NULL) is set to the guard before the thread starts (NULL on failure): a connection queued on
 * listen_fd is admitted at once, and admit's callbacks may already need the pointer. */
struct guard *guard_new(const struct guard_opts *o, int listen_fd, guard_admit_fn admit,
                        guard_reply_fn reply, void *arg, struct guard **publish, struct err *e);
/* Stops accepting and closes the listening socket (new connections are refused by the kernel);
 * deadlines keep being enforced. */
void guard_quiesce(struct guard *g);
/* Stops the thread and frees. Call after the library closed every connection. */
void guard_free(struct guard *g);
int guard_admitted(struct guard *g); /* connections admitted and not closed yet */

/* From the library's connection-start notification: the record of the admitted socket fd. */
struct guard_conn *guard_conn_open(struct guard *g, int fd);
/* From the library's close notification; c may be NULL. */
void guard_conn_close(struct guard *g, struct guard_conn *c);
/* The request head is complete: method and path (for the 408's shape), whether a body follows
 * and its Content-Length (-1 = chunked). HEAD -> BODY or BUSY. Returns false when the connection
 * was already cut (the caller drops the request). */
bool guard_conn_head(struct guard *g, struct guard_conn *c, const char *method, const char *path,
                     bool body, long long content_length);
/* The body is complete: -> BUSY. false when the connection was cut meanwhile. */
bool guard_conn_body_done(struct guard *g, struct guard_conn *c);
/* The reply was written; a keep-alive connection waits for its next request: -> HEAD. */
void guard_conn_idle(struct guard *g, struct guard_conn *c);
bool guard_conn_was_cut(struct guard *g, struct guard_conn *c);
/* The request was answered before its body was read (the library closes after the answer):
 * once closed, the guard drains the unread body for a moment (REFUSE_LINGER_MS), so the client
 * reads the answer instead of a reset. */
void guard_conn_linger(struct guard *g, struct guard_conn *c);
/* The guard's own descriptor of the socket (valid until guard_conn_close): for probes. */
int guard_conn_fd(const struct guard_conn *c);

#endif
