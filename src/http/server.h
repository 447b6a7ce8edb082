/* server — HTTP/1.1 front end on libmicrohttpd: thread per admitted connection, routing by a
 * table (with and without /v1), auth (Bearer or x-api-key, constant time), lazy stream start,
 * disconnect -> cancel (R-API, R-CONC). Admission (connection limits, the prompt 503) and the
 * absolute head / body deadlines are http/guard's; see docs/server.md "Connections".
 *
 * Everything a request can be refused for by its head alone (route, method, key, Content-Length,
 * Content-Type, loading / stopping) is answered before its body is read.
 * Connection threads parse and validate, enqueue a job and then only read its pipe: they never
 * touch the model. The worker never touches a socket. */
#ifndef LMS_HTTP_SERVER_H
#define LMS_HTTP_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/err.h"
#include "serve/backend.h"
#include "serve/queue.h"

#define HTTP_DEFAULT_MAX_BODY (8u << 20)
#define HTTP_DEFAULT_TIMEOUT_S 30
#define HTTP_DEFAULT_CONNS 256
#define HTTP_DEFAULT_CONNS_PER_CLIENT 128
#define HTTP_DEFAULT_HEADER_TIMEOUT_S 10
#define HTTP_DEFAULT_BODY_TIMEOUT_S 10
#define HTTP_DEFAULT_BODY_MIN_RATE (64u << 10)

struct http_opts {
    const char *host;
    int port;             /* 0 = pick a free port (see http_port) */
    int conns;            /* max concurrent connections (more get a prompt 503) */
    int conns_per_client; /* max concurrent connections from one address */
    int timeout_s;        /* idle timeout of a connection between / while reading requests */
    int header_timeout_s; /* absolute deadline for a request head */
    int body_timeout_s;   /* absolute deadline for a body: this + length / body_min_rate */
    size_t body_min_rate; /* bytes per second */
    size_t max_body;      /* bytes; larger bodies get 413 */
    const char *api_key;  /* NULL = no auth */
    const char *cors;     /* --cors: allowed browser origins, comma-separated, or "*"; NULL = off */
    bool metrics;         /* --metrics: GET /metrics (Prometheus text) */
};

/* What the handlers serve. backend and queue are published once the model is loaded (ready). */
struct http_app {
    _Atomic(struct backend *) backend;
    _Atomic(struct queue *) queue;
    atomic_bool stopping;
};

struct http_server;
struct http_server *http_start(const struct http_opts *o, struct http_app *app, struct err *e);
int http_port(const struct http_server *s); /* the bound port */
/* Stops accepting new connections (in-flight ones continue; new requests on open connections
 * get 503 once app->stopping is set). */
void http_quiesce(struct http_server *s);
/* Waits up to timeout_ms until no request is in flight (every reply written). Call after the
 * queue ended every job's pipe. Returns the number still in flight. */
int http_drain(struct http_server *s, int timeout_ms);
/* Closes every connection and joins their threads. End the queue's jobs first. */
void http_stop(struct http_server *s);

/* Constant-time comparison of a presented key with the configured one. */
bool http_key_equal(const char *given, size_t given_len, const char *want);

#endif
