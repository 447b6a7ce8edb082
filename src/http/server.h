/* server — HTTP/1.1 front end on libmicrohttpd: thread per connection (at most `conns`), idle
 * timeout while a request is read, body limit (413), routing (with and without /v1), auth
 * (Bearer or x-api-key, constant time), lazy stream start, disconnect -> cancel (R-API, R-CONC).
 *
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

struct http_opts {
    const char *host;
    int port;            /* 0 = pick a free port (see http_port) */
    int conns;           /* max concurrent connections */
    int timeout_s;       /* idle timeout while reading a request */
    size_t max_body;     /* bytes; larger bodies get 413 */
    const char *api_key; /* NULL = no auth */
    const char *cors;    /* --cors: allowed browser origins, comma-separated, or "*"; NULL = off */
    bool metrics;        /* --metrics: GET /metrics (Prometheus text) */
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
/* Stops accepting new connections (in-flight ones continue). */
void http_quiesce(struct http_server *s);
/* Closes every connection and joins their threads. Cancel the queue's jobs first. */
void http_stop(struct http_server *s);

/* Constant-time comparison of a presented key with the configured one. */
bool http_key_equal(const char *given, size_t given_len, const char *want);

#endif
