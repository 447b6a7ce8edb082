#define _GNU_SOURCE /* strcasestr */
#include "http/server.h"
#include "http/chat_page.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "base/buf.h"
#include "base/log.h"
#include "http/guard.h"
#include "serve/metrics.h"

#define WAIT_SLICE_MS 100
#define SSE_BLOCK 16384
/* MHD's own connection limit sits above the guard's, so the guard's count (which a closing
 * connection leaves a moment before MHD's) is the one that binds. */
#define MHD_LIMIT_SLACK 32
#define LISTEN_BACKLOG 511

struct conn_req;
typedef enum MHD_Result (*serve_fn)(struct conn_req *cr);

/* Route flags. */
#define RT_PUBLIC 1u /* no API key needed */
#define RT_BODY 2u   /* takes a JSON body (Content-Type checked) */
#define RT_MODEL 4u  /* needs the loaded model (503 while loading or stopping) */

/* One endpoint: its path after an optional /v1 prefix (a trailing '*' matches any non-empty
 * rest, handed to the handler as cr->arg), its method, the dialect its errors are shaped in,
 * flags and handler. New endpoints are new rows. */
struct route {
    const char *path;
    const char *method;
    enum dialect dialect;
    unsigned flags;
    serve_fn serve;
    const char *label; /* for metrics: the canonical path (never the client's URL) */
};

struct http_server {
    struct MHD_Daemon *d;
    struct guard *g;
    struct http_opts o;
    struct http_app *app;
    int port;
    char *api_key;
    struct metrics *metrics; /* --metrics, else NULL */
    atomic_int in_flight;    /* requests between their head and their completion */
};

struct conn_req {
    struct http_server *srv;
    struct MHD_Connection *conn;
    struct guard_conn *gc;
    const struct route *rt;
    const char *arg;      /* the '*' part of the path (into path[]) */
    enum dialect dialect; /* error shape */
    struct buf body;
    bool too_large;
    bool http11; /* may get an interim 100 as a disconnect probe */
    bool probed;
    struct job *job;
    int status;
    char method[8];
    char path[160];
    char why[160]; /* the error message of a 4xx/5xx answer, for the log line */
    double t0;
};

bool http_key_equal(const char *given, size_t given_len, const char *want)
{
    size_t wl = strlen(want);
    unsigned char diff = (unsigned char)(given_len != wl);
    /* Always walk the configured key's length so timing does not depend on where they differ. */
    for (size_t i = 0; i < wl; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= g ^ (unsigned char)want[i];
    }
    return diff == 0;
}

static enum MHD_Result serve_generate(struct conn_req *cr);
static enum MHD_Result serve_prompt(struct conn_req *cr);
static enum MHD_Result serve_models(struct conn_req *cr);
static enum MHD_Result serve_health(struct conn_req *cr);
static enum MHD_Result serve_tokens(struct conn_req *cr);
static enum MHD_Result serve_metrics(struct conn_req *cr);
static enum MHD_Result serve_page(struct conn_req *cr);

static const struct route ROUTES[] = {
    {"/chat/completions", "POST", DIALECT_CHAT, RT_BODY | RT_MODEL, serve_generate,
     "/v1/chat/completions"},
    {"/responses", "POST", DIALECT_RESPONSES, RT_BODY | RT_MODEL, serve_generate, "/v1/responses"},
    {"/messages", "POST", DIALECT_MESSAGES, RT_BODY | RT_MODEL, serve_generate, "/v1/messages"},
    {"/completions", "POST", DIALECT_COMPLETIONS, RT_BODY | RT_MODEL, serve_generate,
     "/v1/completions"},
    {"/embeddings", "POST", DIALECT_EMBEDDINGS, RT_BODY | RT_MODEL, serve_generate,
     "/v1/embeddings"},
    {"/messages/count_tokens", "POST", DIALECT_MESSAGES, RT_BODY | RT_MODEL, serve_prompt,
     "/v1/messages/count_tokens"},
    {"/apply-template", "POST", DIALECT_CHAT, RT_BODY | RT_MODEL, serve_prompt, "/apply-template"},
    {"/models", "GET", DIALECT_CHAT, RT_MODEL, serve_models, "/v1/models"},
    {"/models/*", "GET", DIALECT_CHAT, RT_MODEL, serve_models, "/v1/models/{id}"},
    {"/health", "GET", DIALECT_CHAT, RT_PUBLIC, serve_health, "/health"},
    {"/tokenize", "POST", DIALECT_CHAT, RT_BODY | RT_MODEL, serve_tokens, "/tokenize"},
    {"/detokenize", "POST", DIALECT_CHAT, RT_BODY | RT_MODEL, serve_tokens, "/detokenize"},
    {"/metrics", "GET", DIALECT_CHAT, 0, serve_metrics, "/metrics"},
    /* the chat page (src/http/chat_page.html, built in): static, no secrets, so no key (the page
     * asks for it) */
    {"/", "GET", DIALECT_CHAT, RT_PUBLIC, serve_page, "/"},
    {"/index.html", "GET", DIALECT_CHAT, RT_PUBLIC, serve_page, "/"},
};

static bool path_match(const char *pat, const char *p, const char **rest)
{
    size_t n = strlen(pat);
    if (n && pat[n - 1] == '*') {
        if (strncmp(p, pat, n - 1) || !p[n - 1]) return false;
        *rest = p + n - 1;
        return true;
    }
    return !strcmp(p, pat);
}

/* The route for (method, url). NULL when none: *path_known tells 405 (the path exists with
 * another method) from 404. */
static const struct route *route_find(const char *method, const char *url, const char **rest,
                                      bool *path_known)
{
    const char *p = url;
    if (!strncmp(p, "/v1/", 4)) p += 3;
    *path_known = false;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const char *r = NULL;
        if (!path_match(ROUTES[i].path, p, &r)) continue;
        *path_known = true;
        if (!strcmp(method, ROUTES[i].method)) {
            *rest = r;
            return &ROUTES[i];
        }
    }
    return NULL;
}

/* The error dialect of a path with no route (404 / 405 / refused connections). */
static enum dialect dialect_of_path(const char *url)
{
    if (strstr(url, "/messages")) return DIALECT_MESSAGES;
    if (strstr(url, "/responses")) return DIALECT_RESPONSES;
    return DIALECT_CHAT;
}

/* CORS (--cors): the Access-Control-Allow-Origin value for this request's Origin, or NULL (CORS
 * off, no Origin, or an origin not in the list). */
static const char *cors_origin(struct conn_req *cr)
{
    const char *list = cr->srv->o.cors;
    if (!list) return NULL;
    const char *o = MHD_lookup_connection_value(cr->conn, MHD_HEADER_KIND, "Origin");
    if (!o) return NULL;
    if (!strcmp(list, "*")) return "*";
    size_t ol = strlen(o);
    for (const char *p = list; *p;) {
        size_t n = strcspn(p, ",");
        const char *q = p;
        while (n && *q == ' ')
            q++, n--;
        while (n && q[n - 1] == ' ')
            n--;
        if (n == ol && !strncasecmp(q, o, n)) return o;
        p += strcspn(p, ",");
        if (*p) p++;
    }
    return NULL;
}

/* Every reply (errors and streams included) says how long an idle connection stays open (a
 * client that reuses a pooled connection the server is just closing gets a reset: "Connection
 * error" in the SDKs; with the hint it retires the connection before --timeout, as undici and
 * other clients do), and carries the CORS headers of an allowed origin. */
static void add_common(struct conn_req *cr, struct MHD_Response *r)
{
    char ka[32];
    snprintf(ka, sizeof ka, "timeout=%d", cr->srv->o.timeout_s);
    MHD_add_response_header(r, "Keep-Alive", ka);
    const char *ao = cors_origin(cr);
    if (!ao) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", ao);
    MHD_add_response_header(r, "Access-Control-Expose-Headers", "Retry-After");
    if (strcmp(ao, "*")) MHD_add_response_header(r, "Vary", "Origin");
}

static enum MHD_Result send_body(struct conn_req *cr, int status, const char *ctype,
                                 const char *body, size_t len, int retry_after)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    add_common(cr, r);
    if (retry_after > 0) {
        char ra[16];
        snprintf(ra, sizeof ra, "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, ra);
    }
    enum MHD_Result rc = MHD_queue_response(cr->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    cr->status = status;
    return rc;
}

static enum MHD_Result send_json(struct conn_req *cr, int status, const char *body)
{
    return send_body(cr, status, "application/json", body, strlen(body), 0);
}

/* An error reply in the request's dialect; status 0 = the code's own (415 / 405 pass theirs). */
static enum MHD_Result send_error_status(struct conn_req *cr, int status, const struct err *e)
{
    struct buf b = {0};
    api_error_body(cr->dialect, e, &b);
    if (!status) status = err_http_status(e->code);
    snprintf(cr->why, sizeof cr->why, "%.40s%s%.110s", e->param, e->param[0] ? ": " : "", e->msg);
    enum MHD_Result rc = send_body(cr, status, "application/json", b.data ? b.data : "{}", b.len,
                                   status == 429 || status == 503 ? 1 : 0);
    buf_free(&b);
    return rc;
}

static enum MHD_Result send_error(struct conn_req *cr, const struct err *e)
{
    return send_error_status(cr, 0, e);
}

/* The disconnect probe. The client is gone when its socket failed or was reset. End of input
 * alone is not proof: a client may half-close (shutdown(SHUT_WR)) after its request and still
 * read the reply. So on the first end of input, an HTTP/1.1 client still waiting for its head
 * (may_probe) gets an interim "100 Continue", which every HTTP/1.1 client must accept and skip:
 * a client that closed for good answers it with a reset, seen by the next probe. Once the head
 * went out, the reply's own writes play that part (a failed write ends the request). */
static bool client_gone(struct conn_req *cr, bool may_probe)
{
    int fd = guard_conn_fd(cr->gc);
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false; /* pipelined bytes are not a close */
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0 && ti.tcpi_state == TCP_CLOSE)
        return true; /* reset after our probe (the error itself was reported once, maybe to MHD) */
    if (may_probe && cr->http11 && !cr->probed) {
        cr->probed = true;
        static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
        if (send(fd, probe, sizeof probe - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN)
            return true;
    }
    return false;
}

static void cancel_job(struct conn_req *cr)
{
    struct job *j = cr->job;
    if (!j) return;
    pipe_cancel(j->pipe);
    struct queue *q = atomic_load(&cr->srv->app->queue);
    if (q) queue_remove(q, j);
}

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct conn_req *cr = cls;
    for (;;) {
        long n = pipe_read(cr->job->pipe, buf, max, WAIT_SLICE_MS);
        if (n > 0) return (ssize_t)n;
        if (n == -1) return MHD_CONTENT_READER_END_OF_STREAM;
        if (n == -2) {
            /* an in-band error frame already went out: end the chunked body cleanly, unless the
             * client is gone */
            return pipe_abandoned(cr->job->pipe) ? MHD_CONTENT_READER_END_WITH_ERROR
                                                 : MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (client_gone(cr, false)) {
            cancel_job(cr);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

/* The body of GET /health and its status (also answered by the guard for refused clients). */
static int health_body(struct http_app *app, char *out, size_t cap)
{
    struct backend *b = atomic_load(&app->backend);
    struct queue *q = atomic_load(&app->queue);
    if (atomic_load(&app->stopping)) {
        snprintf(out, cap, "{\"status\":\"stopping\"}");
        return 503;
    }
    if (!b || !q) {
        snprintf(out, cap, "{\"status\":\"loading model\"}");
        return 503;
    }
    snprintf(out, cap, "{\"status\":\"ok\",\"queued\":%d,\"busy\":%s}", queue_len(q),
             queue_busy(q) ? "true" : "false");
    return 200;
}

static enum MHD_Result serve_page(struct conn_req *cr)
{
    return send_body(cr, 200, "text/html; charset=utf-8", (const char *)http_chat_page,
                     http_chat_page_len, 0);
}

static enum MHD_Result serve_health(struct conn_req *cr)
{
    char h[96];
    int status = health_body(cr->srv->app, h, sizeof h);
    return send_json(cr, status, h);
}

static enum MHD_Result serve_models(struct conn_req *cr)
{
    struct backend *b = atomic_load(&cr->srv->app->backend);
    const char *one = cr->arg;
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "id", b->model_id, "object",
                          "model", "created", (json_int_t)0, "owned_by", "lmserve", "type", "model",
                          "display_name", b->model_id, "created_at", "1970-01-01T00:00:00Z");
    if (m && b->random_weights)
        json_object_set_new(m, "random_weights", json_true()); /* lmserve-mkmodel's */
    json_t *body;
    if (one) {
        if (strcmp(one, b->model_id)) {
            json_decref(m);
            struct err e;
            err_set_param(&e, ERR_NOT_FOUND, "model", "model '%s' not found", one);
            return send_error(cr, &e);
        }
        body = m;
    } else {
        body = json_pack("{s:s, s:[o], s:b, s:s, s:s}", "object", "list", "data", m, "has_more", 0,
                         "first_id", b->model_id, "last_id", b->model_id);
    }
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    enum MHD_Result rc = send_json(cr, 200, s ? s : "{}");
    free(s);
    return rc;
}

static bool content_type_ok(struct MHD_Connection *c)
{
    const char *ct = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
    if (!ct) return true; /* absent: assume JSON (curl --data-binary without -H) */
    while (*ct == ' ')
        ct++;
    size_t n = strcspn(ct, ";");
    while (n > 0 && ct[n - 1] == ' ')
        n--;
    if (n == 16 && !strncasecmp(ct, "application/json", 16)) return true;
    return n > 5 && !strncasecmp(ct + n - 5, "+json", 5);
}

static bool authorized(struct conn_req *cr)
{
    const char *key = cr->srv->api_key;
    if (!key) return true;
    const char *a = MHD_lookup_connection_value(cr->conn, MHD_HEADER_KIND, "Authorization");
    if (a && !strncasecmp(a, "Bearer ", 7)) {
        const char *t = a + 7;
        while (*t == ' ')
            t++;
        if (http_key_equal(t, strlen(t), key)) return true;
    }
    const char *x = MHD_lookup_connection_value(cr->conn, MHD_HEADER_KIND, "x-api-key");
    return x && http_key_equal(x, strlen(x), key);
}

/* Generation endpoints: parse, validate, enqueue, then wait for the pipe's head (lazy start). */
static enum MHD_Result serve_generate(struct conn_req *cr)
{
    struct backend *b = atomic_load(&cr->srv->app->backend);
    struct queue *q = atomic_load(&cr->srv->app->queue);
    struct err e;
    err_clear(&e);
    struct job *j = job_new();
    if (!j) {
        err_set(&e, ERR_NOMEM, "out of memory");
        return send_error(cr, &e);
    }
    struct api_ctx ctx = {.backend = b};
    if (api_parse(cr->dialect, &ctx, cr->body.data ? cr->body.data : "", cr->body.len, &j->req,
                  &e) < 0 ||
        b->ops->validate(b, &j->req, &e) < 0) {
        job_unref(j);
        return send_error(cr, &e);
    }
    buf_free(&cr->body); /* parsed: the request holds what it needs */
    if (api_sink_install(j) < 0) {
        job_unref(j);
        err_set(&e, ERR_NOMEM, "out of memory");
        return send_error(cr, &e);
    }
    if (queue_push(q, j, &e) < 0) {
        job_unref(j);
        return send_error(cr, &e);
    }
    cr->job = j;
    /* A queued or stalled stream is legitimately idle: no idle timeout from here on. */
    MHD_set_connection_option(cr->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0);
    int status = 0;
    const char *ctype = NULL;
    while (!pipe_wait_head(j->pipe, WAIT_SLICE_MS, &status, &ctype)) {
        if (client_gone(cr, true)) {
            cancel_job(cr);
            cr->status = 499;
            return MHD_NO;
        }
    }
    if (ctype && !strcmp(ctype, "text/event-stream")) {
        struct MHD_Response *r =
            MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SSE_BLOCK, sse_reader, cr, NULL);
        if (!r) return MHD_NO;
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
        add_common(cr, r);
        enum MHD_Result rc = MHD_queue_response(cr->conn, (unsigned)status, r);
        MHD_destroy_response(r);
        cr->status = status;
        return rc;
    }
    /* A whole JSON body (reply or error): collect it and send it with a length. */
    struct buf out = {0};
    char tmp[16384];
    long n;
    while ((n = pipe_read(j->pipe, tmp, sizeof tmp, WAIT_SLICE_MS)) != -1 && n != -2) {
        if (n > 0 && buf_append(&out, tmp, (size_t)n) < 0) break;
        if (n == 0 && client_gone(cr, true)) {
            cancel_job(cr);
            buf_free(&out);
            cr->status = 499;
            return MHD_NO;
        }
    }
    if (status == 499) { /* failed without a reply: its client is gone */
        buf_free(&out);
        return MHD_NO;
    }
    enum MHD_Result rc =
        send_body(cr, status, ctype ? ctype : "application/json", out.data ? out.data : "", out.len,
                  status == 429 || status == 503 ? 1 : 0);
    buf_free(&out);
    return rc;
}

/* count_tokens and apply-template: parse + validate on this thread, no queue. */
static enum MHD_Result serve_prompt(struct conn_req *cr)
{
    struct backend *b = atomic_load(&cr->srv->app->backend);
    struct err e;
    err_clear(&e);
    struct request req;
    request_init(&req);
    struct api_ctx ctx = {.backend = b, .count_only = true};
    enum MHD_Result rc;
    if (api_parse(cr->dialect, &ctx, cr->body.data ? cr->body.data : "", cr->body.len, &req, &e) <
            0 ||
        b->ops->validate(b, &req, &e) < 0) {
        rc = send_error(cr, &e);
    } else if (!strcmp(cr->rt->path, "/messages/count_tokens")) {
        struct buf o = {0};
        api_count_tokens_body(req.n_tokens, &o);
        rc = send_json(cr, 200, o.data);
        buf_free(&o);
    } else {
        json_t *j = json_pack("{s:s}", "prompt", req.prompt_text ? req.prompt_text : "");
        char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
        json_decref(j);
        rc = send_json(cr, 200, s ? s : "{\"prompt\":\"\"}");
        free(s);
    }
    request_free(&req);
    return rc;
}

/* tokenize / detokenize: answered on this thread by the api (llama-server's shapes). */
static enum MHD_Result serve_tokens(struct conn_req *cr)
{
    struct backend *b = atomic_load(&cr->srv->app->backend);
    struct err e;
    err_clear(&e);
    struct buf o = {0};
    const char *body = cr->body.data ? cr->body.data : "";
    int rc = !strcmp(cr->rt->path, "/tokenize") ? api_tokenize(b, body, cr->body.len, &o, &e)
                                                : api_detokenize(b, body, cr->body.len, &o, &e);
    enum MHD_Result r = rc < 0 ? send_error(cr, &e) : send_json(cr, 200, o.data ? o.data : "{}");
    buf_free(&o);
    return r;
}

/* A browser's CORS preflight (no key needed: browsers send none on it). */
static enum MHD_Result serve_preflight(struct conn_req *cr)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    if (cors_origin(cr)) {
        add_common(cr, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        /* the headers the SDKs send (the browser asks for its exact list; echo it too) */
        const char *want = MHD_lookup_connection_value(cr->conn, MHD_HEADER_KIND,
                                                       "Access-Control-Request-Headers");
        char h[1024];
        snprintf(h, sizeof h,
                 "Authorization, x-api-key, anthropic-version, anthropic-beta, "
                 "Content-Type%s%.900s",
                 want && want[0] ? ", " : "", want ? want : "");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", h);
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    enum MHD_Result rc = MHD_queue_response(cr->conn, 204, r);
    MHD_destroy_response(r);
    cr->status = 204;
    return rc;
}

static enum MHD_Result serve_metrics(struct conn_req *cr)
{
    struct err e;
    if (!cr->srv->metrics) {
        err_set(&e, ERR_NOT_FOUND, "metrics are off (start the server with --metrics)");
        return send_error(cr, &e);
    }
    struct queue *q = atomic_load(&cr->srv->app->queue);
    struct backend *b = atomic_load(&cr->srv->app->backend);
    struct metrics_kv kv;
    bool has_kv = b && b->ops->kv_stats;
    if (has_kv) b->ops->kv_stats(b, &kv);
    struct buf o = {0};
    metrics_render(cr->srv->metrics, q ? queue_len(q) : 0, q ? queue_busy(q) : false,
                   has_kv ? &kv : NULL, &o);
    enum MHD_Result rc = send_body(cr, 200, "text/plain; version=0.0.4; charset=utf-8",
                                   o.data ? o.data : "", o.len, 0);
    buf_free(&o);
    return rc;
}

static const char *route_label(const struct conn_req *cr)
{
    return cr->rt ? cr->rt->label : "unknown";
}

/* Everything decided by the request head, before any body byte is read (R-CONC-7): route,
 * method, query, key, Content-Length against the limit, Content-Type, model availability.
 * Returns MHD_YES with cr->status still 0 when the request goes on to its body. */
static enum MHD_Result check_head(struct conn_req *cr, const char *url)
{
    struct http_server *s = cr->srv;
    struct http_app *app = s->app;
    struct err e;
    err_clear(&e);
    bool known = false;
    cr->rt = route_find(cr->method, url, &cr->arg, &known);
    cr->dialect = cr->rt ? cr->rt->dialect : dialect_of_path(url);
    if (!cr->rt && !known) {
        err_set(&e, ERR_NOT_FOUND, "no such endpoint: %s %s", cr->method, cr->path);
        return send_error(cr, &e);
    }
    if (!cr->rt && !strcmp(cr->method, "OPTIONS") && s->o.cors) return serve_preflight(cr);
    if (!cr->rt) {
        err_set(&e, ERR_INVALID, "method %s not allowed on %s", cr->method, cr->path);
        return send_error_status(cr, 405, &e);
    }
    unsigned fl = cr->rt->flags;
    if (!strcmp(cr->rt->path, "/apply-template")) {
        const char *d = MHD_lookup_connection_value(cr->conn, MHD_GET_ARGUMENT_KIND, "dialect");
        if (!d || !strcmp(d, "chat"))
            cr->dialect = DIALECT_CHAT;
        else if (!strcmp(d, "responses"))
            cr->dialect = DIALECT_RESPONSES;
        else if (!strcmp(d, "messages"))
            cr->dialect = DIALECT_MESSAGES;
        else {
            err_set_param(&e, ERR_INVALID, "dialect",
                          "'dialect' must be chat, responses or messages");
            return send_error(cr, &e);
        }
    }
    if (!(fl & RT_PUBLIC) && !authorized(cr)) {
        err_set(&e, ERR_AUTH,
                "invalid or missing API key (send Authorization: Bearer KEY or x-api-key: KEY)");
        return send_error(cr, &e);
    }
    const char *cl =
        MHD_lookup_connection_value(cr->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(cl, &end, 10);
        if (!errno && end != cl && v > s->o.max_body) {
            err_set(&e, ERR_TOO_LARGE, "request body larger than %zu bytes (--max-body)",
                    s->o.max_body);
            return send_error(cr, &e);
        }
    }
    if ((fl & RT_BODY) && !content_type_ok(cr->conn)) {
        err_set_param(&e, ERR_INVALID, "Content-Type", "Content-Type must be application/json");
        return send_error_status(cr, 415, &e);
    }
    if (fl & RT_MODEL) {
        struct backend *b = atomic_load(&app->backend);
        struct queue *q = atomic_load(&app->queue);
        if (!b || !q || atomic_load(&app->stopping)) {
            err_set(&e, ERR_CANCELLED,
                    b ? "the server is shutting down" : "the model is still loading");
            return send_error(cr, &e);
        }
    }
    return MHD_YES;
}

/* Whether the request carries a body (by its head): a positive Content-Length or chunked. */
static bool head_has_body(struct MHD_Connection *c, long long *length)
{
    *length = -1;
    const char *cl =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl) {
        *length = strtoll(cl, NULL, 10);
        return *length > 0;
    }
    const char *te =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    return te && strcasestr(te, "chunked");
}

static enum MHD_Result ahc(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_data_size, void **req_cls)
{
    struct http_server *s = cls;
    struct conn_req *cr = *req_cls;
    if (!cr) { /* the head is complete; nothing of the body has been handed to us */
        cr = calloc(1, sizeof *cr);
        if (!cr) return MHD_NO;
        cr->srv = s;
        cr->conn = conn;
        cr->t0 = mono_seconds();
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        cr->gc = ci ? ci->socket_context : NULL;
        cr->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
        snprintf(cr->method, sizeof cr->method, "%s", method);
        snprintf(cr->path, sizeof cr->path, "%s", url);
        *req_cls = cr;
        atomic_fetch_add(&s->in_flight, 1);
        long long len;
        bool body = head_has_body(conn, &len);
        if (!guard_conn_head(s->g, cr->gc, cr->method, cr->path, body, len)) return MHD_NO;
        /* an answer queued here makes MHD skip the body and close after the reply */
        enum MHD_Result rc = check_head(cr, url);
        if (cr->status && body) guard_conn_linger(s->g, cr->gc);
        return rc;
    }
    if (*upload_data_size) {
        if (!cr->status && !cr->too_large) {
            if (cr->body.len + *upload_data_size > s->o.max_body) {
                /* a chunked body past the limit: keep reading (and dropping) so the 413 reaches
                 * the client; the body deadline bounds how long */
                cr->too_large = true;
                buf_free(&cr->body);
            } else if (buf_append(&cr->body, upload_data, *upload_data_size) < 0) {
                cr->too_large = true;
                buf_free(&cr->body);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cr->status) return MHD_YES; /* answered at the head */
    if (!guard_conn_body_done(s->g, cr->gc)) return MHD_NO;
    if (cr->too_large) {
        struct err e;
        err_set(&e, ERR_TOO_LARGE, "request body larger than %zu bytes (--max-body)",
                s->o.max_body);
        return send_error(cr, &e);
    }
    return cr->rt->serve(cr);
}

static void completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct http_server *s = cls;
    struct conn_req *cr = *req_cls;
    if (!cr) return;
    *req_cls = NULL;
    struct job *j = cr->job;
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        /* keep-alive: the next request has its own head deadline, and an idle connection times
         * out again */
        guard_conn_idle(s->g, cr->gc);
        if (j)
            MHD_set_connection_option(
                conn, MHD_CONNECTION_OPTION_TIMEOUT,
                (unsigned)(s->o.timeout_s > 0 ? s->o.timeout_s : HTTP_DEFAULT_TIMEOUT_S));
    }
    if (j) {
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || pipe_state(j->pipe) == PIPE_OPEN)
            cancel_job(cr);
        /* A cancelled job stops at its next token; its counts are final once the pipe ended. */
        pipe_wait_end(j->pipe, 5000);
        int status = cr->status;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && status < 400) status = 499;
        double ttft = j->t_first > 0 ? (j->t_first - cr->t0) * 1e3 : -1;
        double dec = j->t_end > j->t_first && j->t_first > 0 ? j->t_end - j->t_first : 0;
        double tps = dec > 0 && j->usage.completion_tokens > 1
                         ? (double)(j->usage.completion_tokens - 1) / dec
                         : 0;
        metrics_observe(s->metrics, route_label(cr), status, &j->usage,
                        j->t_first > 0 ? j->t_first - cr->t0 : -1,
                        dec > 0 && j->usage.completion_tokens > 1
                            ? dec / (double)(j->usage.completion_tokens - 1)
                            : -1);
        log_info("%s %s %d prompt=%lld completion=%lld cached=%lld ttft_ms=%.1f tok_s=%.1f "
                 "total_ms=%.1f",
                 cr->method, cr->path, status, (long long)j->usage.prompt_tokens,
                 (long long)j->usage.completion_tokens, (long long)j->usage.cached_tokens, ttft,
                 tps, (mono_seconds() - cr->t0) * 1e3);
        job_unref(j);
    } else if (cr->status) {
        metrics_observe(s->metrics, route_label(cr), cr->status, NULL, -1, -1);
        log_info("%s %s %d total_ms=%.1f%s%s%s", cr->method, cr->path, cr->status,
                 (mono_seconds() - cr->t0) * 1e3, cr->why[0] ? " error=\"" : "", cr->why,
                 cr->why[0] ? "\"" : "");
    }
    buf_free(&cr->body);
    free(cr);
    atomic_fetch_sub(&s->in_flight, 1);
}

static void notify_conn(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe)
{
    struct http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = ci ? guard_conn_open(s->g, ci->connect_fd) : NULL;
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        guard_conn_close(s->g, *socket_context);
        *socket_context = NULL;
    }
}

static int admit(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
    struct http_server *s = arg;
    return MHD_add_connection(s->d, fd, sa, len) == MHD_YES ? 0 : -1;
}

/* The guard's own answers: /health for anyone, else a dialect-shaped 503 (refused) or 408
 * (deadline), each a complete reply that closes the connection. */
static void guard_reply(void *arg, enum guard_why why, int limit, const char *method,
                        const char *path, struct buf *out)
{
    struct http_server *s = arg;
    const char *rest;
    bool known;
    const struct route *rt = why == GUARD_TIMEOUT ? NULL : route_find(method, path, &rest, &known);
    char body[256];
    int status;
    struct buf eb = {0};
    const char *text = body, *extra = "";
    if (rt && rt->serve == serve_health) {
        status = health_body(s->app, body, sizeof body);
    } else {
        struct err e;
        if (why == GUARD_TIMEOUT && !method[0]) {
            err_set(&e, ERR_INVALID, "request head not received within %d s (--header-timeout)",
                    limit);
        } else if (why == GUARD_TIMEOUT) {
            err_set(&e, ERR_INVALID,
                    "request body not received in time (%d s + its length at %zu bytes/s: "
                    "--body-timeout, --body-min-rate)",
                    limit, s->o.body_min_rate);
        } else if (why == GUARD_FULL) {
            err_set(&e, ERR_CANCELLED,
                    "the server is at its connection limit (%d, --conns); retry later", limit);
        } else {
            err_set(&e, ERR_CANCELLED,
                    "too many connections from your address (%d, --conns-per-client); retry "
                    "later",
                    limit);
        }
        status = why == GUARD_TIMEOUT ? 408 : 503;
        if (status == 503) extra = "Retry-After: 1\r\n";
        api_error_body(dialect_of_path(path), &e, &eb);
        text = eb.data ? eb.data : "{}";
    }
    const char *reason = status == 200   ? "OK"
                         : status == 408 ? "Request Timeout"
                                         : "Service Unavailable";
    buf_printf(out,
               "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
               "Connection: close\r\n%s\r\n%s",
               status, reason, strlen(text), extra, text);
    buf_free(&eb);
}

/* MHD's own messages (a client that closed mid-request, …) are routine here: debug level. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && line[n - 1] == '\n')
        line[--n] = 0;
    log_debug("mhd: %s", line);
}

static int listen_on(const char *host, int port, bool *v6, int *bound_port, struct err *e)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(host, ps, &hints, &ai);
    if (g != 0 || !ai) {
        err_set(e, ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(g));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, LISTEN_BACKLOG) < 0) {
        err_set(e, ERR_IO, "cannot listen on %s:%d (in use, or not a local address?)", host, port);
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    *v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    *bound_port = port;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                     : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

struct http_server *http_start(const struct http_opts *o, struct http_app *app, struct err *e)
{
    struct http_server *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->o = *o;
    if (s->o.conns <= 0) s->o.conns = HTTP_DEFAULT_CONNS;
    if (s->o.conns_per_client <= 0) s->o.conns_per_client = HTTP_DEFAULT_CONNS_PER_CLIENT;
    if (s->o.timeout_s <= 0) s->o.timeout_s = HTTP_DEFAULT_TIMEOUT_S;
    if (s->o.header_timeout_s <= 0) s->o.header_timeout_s = HTTP_DEFAULT_HEADER_TIMEOUT_S;
    if (s->o.body_timeout_s <= 0) s->o.body_timeout_s = HTTP_DEFAULT_BODY_TIMEOUT_S;
    if (!s->o.body_min_rate) s->o.body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE;
    if (!s->o.max_body) s->o.max_body = HTTP_DEFAULT_MAX_BODY;
    s->app = app;
    atomic_init(&s->in_flight, 0);
    if (o->api_key && o->api_key[0]) s->api_key = strdup(o->api_key);
    if (o->metrics && !(s->metrics = metrics_new())) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto fail;
    }
    bool v6 = false;
    int lfd = listen_on(o->host, o->port, &v6, &s->port, e);
    if (lfd < 0) goto fail;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET;
    if (v6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, ahc, s, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(s->o.conns + MHD_LIMIT_SLACK), MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)s->o.timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)(256 * 1024), MHD_OPTION_NOTIFY_COMPLETED, completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, notify_conn, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s, MHD_OPTION_END);
    if (!s->d) {
        close(lfd);
        err_set(e, ERR_INTERNAL, "cannot start the HTTP daemon");
        goto fail;
    }
    struct guard_opts go = {.conns = s->o.conns,
                            .conns_per_client = s->o.conns_per_client,
                            .header_timeout_s = s->o.header_timeout_s,
                            .body_timeout_s = s->o.body_timeout_s,
                            .body_min_rate = s->o.body_min_rate,
                            .max_body = s->o.max_body,
                            .idle_timeout_s = s->o.timeout_s};
    /* s->g is published before the accept thread starts: notify_conn reads it for the first
     * connection (a client already waiting in the backlog raced the assignment: a NULL guard) */
    if (!guard_new(&go, lfd, admit, guard_reply, s, &s->g, e)) goto fail;
    return s;
fail:
    if (s->d) MHD_stop_daemon(s->d);
    metrics_free(s->metrics);
    free(s->api_key);
    free(s);
    return NULL;
}

int http_port(const struct http_server *s)
{
    return s->port;
}

void http_quiesce(struct http_server *s)
{
    if (s) guard_quiesce(s->g);
}

int http_drain(struct http_server *s, int timeout_ms)
{
    if (!s) return 0;
    double end = mono_seconds() + timeout_ms / 1e3;
    int n;
    while ((n = atomic_load(&s->in_flight)) > 0 && mono_seconds() < end) {
        struct timespec ts = {0, 10 * 1000000L};
        nanosleep(&ts, NULL);
    }
    return n;
}

void http_stop(struct http_server *s)
{
    if (!s) return;
    if (s->g) guard_quiesce(s->g);
    if (s->d) MHD_stop_daemon(s->d); /* closes every connection (their close notices reach g) */
    guard_free(s->g);
    metrics_free(s->metrics);
    free(s->api_key);
    free(s);
}
