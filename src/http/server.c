#include "http/server.h"
#include "http/chat_page.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "api/api.h"
#include "base/buf.h"
#include "base/log.h"
#include "serve/metrics.h"

#define WAIT_SLICE_MS 100
#define SSE_BLOCK 16384

enum route {
    R_NONE,
    R_CHAT,
    R_RESPONSES,
    R_MESSAGES,
    R_COUNT_TOKENS,
    R_MODELS,
    R_MODEL_ONE,
    R_HEALTH,
    R_PAGE, /* GET /: the chat page (src/http/chat_page.html, built in) */
    R_APPLY_TEMPLATE,
    R_TOKENIZE,
    R_COMPLETIONS,
    R_METRICS,
    R_DETOKENIZE,
    R_COUNT
};

struct http_server {
    struct MHD_Daemon *d;
    struct http_opts o;
    struct http_app *app;
    int port;
    char *api_key;
    struct metrics *metrics; /* --metrics, else NULL */
};

struct conn_req {
    struct http_server *srv;
    struct MHD_Connection *conn;
    enum route route;
    enum dialect dialect; /* error shape */
    struct buf body;
    bool too_large;
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

static enum route route_of(const char *url, const char **model_id)
{
    const char *p = url;
    if (!strncmp(p, "/v1/", 4)) p += 3;
    if (!strcmp(p, "/chat/completions")) return R_CHAT;
    if (!strcmp(p, "/responses")) return R_RESPONSES;
    if (!strcmp(p, "/messages")) return R_MESSAGES;
    if (!strcmp(p, "/messages/count_tokens")) return R_COUNT_TOKENS;
    if (!strcmp(p, "/models")) return R_MODELS;
    if (!strncmp(p, "/models/", 8) && p[8]) {
        *model_id = p + 8;
        return R_MODEL_ONE;
    }
    if (!strcmp(p, "/health")) return R_HEALTH;
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) return R_PAGE;
    if (!strcmp(p, "/apply-template")) return R_APPLY_TEMPLATE;
    if (!strcmp(p, "/tokenize")) return R_TOKENIZE;
    if (!strcmp(p, "/completions")) return R_COMPLETIONS;
    if (!strcmp(url, "/metrics")) return R_METRICS;
    if (!strcmp(p, "/detokenize")) return R_DETOKENIZE;
    return R_NONE;
}

static bool route_is_post(enum route r)
{
    return r == R_CHAT || r == R_RESPONSES || r == R_MESSAGES || r == R_COUNT_TOKENS ||
           r == R_APPLY_TEMPLATE || r == R_TOKENIZE || r == R_DETOKENIZE || r == R_COMPLETIONS;
}

static enum dialect dialect_of(enum route r, const char *url)
{
    if (r == R_MESSAGES || r == R_COUNT_TOKENS) return DIALECT_MESSAGES;
    if (r == R_RESPONSES) return DIALECT_RESPONSES;
    if (r == R_COMPLETIONS) return DIALECT_COMPLETIONS;
    if (r == R_NONE && strstr(url, "/messages")) return DIALECT_MESSAGES;
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
        while (n && *q == ' ') q++, n--;
        while (n && q[n - 1] == ' ') n--;
        if (n == ol && !strncasecmp(q, o, n)) return o;
        p += strcspn(p, ",");
        if (*p) p++;
    }
    return NULL;
}

/* Every reply (errors and streams included) carries the CORS headers of an allowed origin. */
static void add_cors(struct conn_req *cr, struct MHD_Response *r)
{
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
    add_cors(cr, r);
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

static enum MHD_Result send_error(struct conn_req *cr, const struct err *e)
{
    struct buf b = {0};
    api_error_body(cr->dialect, e, &b);
    int status = err_http_status(e->code);
    snprintf(cr->why, sizeof cr->why, "%.40s%s%.110s", e->param, e->param[0] ? ": " : "", e->msg);
    enum MHD_Result rc = send_body(cr, status, "application/json", b.data ? b.data : "{}", b.len,
                                   status == 429 ? 1 : 0);
    buf_free(&b);
    return rc;
}

static int conn_fd(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

/* The peek probe: the peer closed (EOF) or the socket failed. Pipelined bytes are not a close. */
static bool peer_gone(int fd)
{
    if (fd < 0) return false;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return true;
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
    int fd = conn_fd(cr->conn);
    for (;;) {
        long n = pipe_read(cr->job->pipe, buf, max, WAIT_SLICE_MS);
        if (n > 0) return (ssize_t)n;
        if (n == -1) return MHD_CONTENT_READER_END_OF_STREAM;
        if (n == -2) {
            /* an in-band error already went out; end the chunked body cleanly unless the client
             * is gone */
            return pipe_cancelled(cr->job->pipe) ? MHD_CONTENT_READER_END_WITH_ERROR
                                                 : MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (peer_gone(fd) || atomic_load(&cr->srv->app->stopping)) {
            if (peer_gone(fd)) cancel_job(cr);
            if (pipe_cancelled(cr->job->pipe)) return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

static enum MHD_Result serve_models(struct conn_req *cr, struct backend *b, const char *one)
{
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s, s:s, s:s}", "id", b->model_id, "object",
                          "model", "created", (json_int_t)0, "owned_by", "lmserve", "type", "model",
                          "display_name", b->model_id, "created_at", "1970-01-01T00:00:00Z");
    if (m && b->random_weights) json_object_set_new(m, "random_weights", json_true()); /* lmserve-mkmodel's */
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
static enum MHD_Result serve_generate(struct conn_req *cr, struct backend *b, struct queue *q)
{
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
    int fd = conn_fd(cr->conn);
    int status = 0;
    const char *ctype = NULL;
    while (!pipe_wait_head(j->pipe, WAIT_SLICE_MS, &status, &ctype)) {
        if (peer_gone(fd) || pipe_cancelled(j->pipe)) {
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
        add_cors(cr, r);
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
        if (n == 0 && peer_gone(fd)) {
            cancel_job(cr);
            buf_free(&out);
            return MHD_NO;
        }
    }
    if (status == 499) { /* cancelled under us (shutdown) */
        buf_free(&out);
        return MHD_NO;
    }
    enum MHD_Result rc = send_body(cr, status, ctype ? ctype : "application/json",
                                   out.data ? out.data : "", out.len, status == 429 ? 1 : 0);
    buf_free(&out);
    return rc;
}

/* count_tokens and apply-template: parse + validate on this thread, no queue. */
static enum MHD_Result serve_prompt(struct conn_req *cr, struct backend *b)
{
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
    } else if (cr->route == R_COUNT_TOKENS) {
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
static enum MHD_Result serve_tokens(struct conn_req *cr, struct backend *b)
{
    struct err e;
    err_clear(&e);
    struct buf o = {0};
    const char *body = cr->body.data ? cr->body.data : "";
    int rc = cr->route == R_TOKENIZE ? api_tokenize(b, body, cr->body.len, &o, &e)
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
        add_cors(cr, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        /* the headers the SDKs send (the browser asks for its exact list; echo it too) */
        const char *want = MHD_lookup_connection_value(cr->conn, MHD_HEADER_KIND,
                                                       "Access-Control-Request-Headers");
        char h[1024];
        snprintf(h, sizeof h, "Authorization, x-api-key, anthropic-version, anthropic-beta, "
                              "Content-Type%s%.900s", want && want[0] ? ", " : "", want ? want : "");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", h);
        MHD_add_response_header(r, "Access-Control-Max-Age", "86400");
    }
    enum MHD_Result rc = MHD_queue_response(cr->conn, 204, r);
    MHD_destroy_response(r);
    cr->status = 204;
    return rc;
}

/* The metrics label of a route: its canonical path (never the client's URL: bounded labels). */
static const char *route_label(enum route r)
{
    static const char *const names[R_COUNT] = {
        [R_NONE] = "unknown", [R_CHAT] = "/v1/chat/completions", [R_RESPONSES] = "/v1/responses",
        [R_MESSAGES] = "/v1/messages", [R_COUNT_TOKENS] = "/v1/messages/count_tokens",
        [R_MODELS] = "/v1/models", [R_MODEL_ONE] = "/v1/models/{id}", [R_HEALTH] = "/health",
        [R_APPLY_TEMPLATE] = "/apply-template", [R_TOKENIZE] = "/tokenize",
        [R_DETOKENIZE] = "/detokenize", [R_COMPLETIONS] = "/v1/completions",
        [R_METRICS] = "/metrics"};
    return (unsigned)r < R_COUNT && names[r] ? names[r] : "unknown";
}

static enum MHD_Result serve_metrics(struct conn_req *cr)
{
    struct err e;
    if (!cr->srv->metrics) {
        err_set(&e, ERR_NOT_FOUND, "metrics are off (start the server with --metrics)");
        return send_error(cr, &e);
    }
    struct queue *q = atomic_load(&cr->srv->app->queue);
    struct buf o = {0};
    metrics_render(cr->srv->metrics, q ? queue_len(q) : 0, q ? queue_busy(q) : false, &o);
    enum MHD_Result rc = send_body(cr, 200, "text/plain; version=0.0.4; charset=utf-8",
                                   o.data ? o.data : "", o.len, 0);
    buf_free(&o);
    return rc;
}

static enum MHD_Result handle(struct conn_req *cr, const char *url)
{
    struct http_app *app = cr->srv->app;
    struct err e;
    err_clear(&e);
    const char *model_id = NULL;
    cr->route = route_of(url, &model_id);
    cr->dialect = dialect_of(cr->route, url);
    if (cr->route == R_APPLY_TEMPLATE) {
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
    if (cr->route == R_NONE) {
        err_set(&e, ERR_NOT_FOUND, "no such endpoint: %s %s", cr->method, cr->path);
        return send_error(cr, &e);
    }
    if (!strcmp(cr->method, "OPTIONS") && cr->srv->o.cors) return serve_preflight(cr);
    bool post = !strcmp(cr->method, "POST");
    if (route_is_post(cr->route) != post || (!post && strcmp(cr->method, "GET"))) {
        struct buf b = {0};
        err_set(&e, ERR_INVALID, "method %s not allowed on %s", cr->method, cr->path);
        api_error_body(cr->dialect, &e, &b);
        enum MHD_Result rc = send_body(cr, 405, "application/json", b.data, b.len, 0);
        buf_free(&b);
        return rc;
    }
    struct backend *b = atomic_load(&app->backend);
    if (cr->route == R_HEALTH) {
        if (atomic_load(&app->stopping)) return send_json(cr, 503, "{\"status\":\"stopping\"}");
        struct queue *hq = atomic_load(&app->queue);
        if (!b || !hq) return send_json(cr, 503, "{\"status\":\"loading model\"}");
        char h[96];
        snprintf(h, sizeof h, "{\"status\":\"ok\",\"queued\":%d,\"busy\":%s}", queue_len(hq),
                 queue_busy(hq) ? "true" : "false");
        return send_json(cr, 200, h);
    }
    if (cr->route == R_PAGE) /* static, no secrets: served without the key (the page asks for it) */
        return send_body(cr, 200, "text/html; charset=utf-8", (const char *)http_chat_page,
                         http_chat_page_len, 0);
    if (!authorized(cr)) {
        err_set(&e, ERR_AUTH,
                "invalid or missing API key (send Authorization: Bearer KEY or x-api-key: KEY)");
        return send_error(cr, &e);
    }
    if (cr->too_large) {
        err_set(&e, ERR_TOO_LARGE, "request body larger than %zu bytes", cr->srv->o.max_body);
        return send_error(cr, &e);
    }
    if (post && !content_type_ok(cr->conn)) {
        struct buf bb = {0};
        err_set_param(&e, ERR_INVALID, "Content-Type", "Content-Type must be application/json");
        api_error_body(cr->dialect, &e, &bb);
        enum MHD_Result rc = send_body(cr, 415, "application/json", bb.data, bb.len, 0);
        buf_free(&bb);
        return rc;
    }
    if (cr->route == R_METRICS) return serve_metrics(cr);
    struct queue *q = atomic_load(&app->queue);
    if (!b || !q || atomic_load(&app->stopping)) {
        err_set(&e, ERR_CANCELLED,
                b ? "the server is shutting down" : "the model is still loading");
        return send_error(cr, &e);
    }
    switch (cr->route) {
    case R_MODELS:
        return serve_models(cr, b, NULL);
    case R_MODEL_ONE:
        return serve_models(cr, b, model_id);
    case R_COUNT_TOKENS:
    case R_APPLY_TEMPLATE:
        return serve_prompt(cr, b);
    case R_TOKENIZE:
    case R_DETOKENIZE:
        return serve_tokens(cr, b);
    default:
        return serve_generate(cr, b, q);
    }
}

static enum MHD_Result ahc(void *cls, struct MHD_Connection *conn, const char *url,
                           const char *method, const char *version, const char *upload_data,
                           size_t *upload_data_size, void **req_cls)
{
    struct http_server *s = cls;
    struct conn_req *cr = *req_cls;
    if (!cr) {
        cr = calloc(1, sizeof *cr);
        if (!cr) return MHD_NO;
        cr->srv = s;
        cr->conn = conn;
        cr->t0 = mono_seconds();
        snprintf(cr->method, sizeof cr->method, "%s", method);
        snprintf(cr->path, sizeof cr->path, "%s", url);
        *req_cls = cr;
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (!cr->too_large) {
            if (cr->body.len + *upload_data_size > s->o.max_body) {
                cr->too_large =
                    true; /* keep reading (and dropping) so the 413 reaches the client */
                buf_free(&cr->body);
            } else if (buf_append(&cr->body, upload_data, *upload_data_size) < 0) {
                cr->too_large = true;
                buf_free(&cr->body);
            }
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (cr->status) return MHD_YES; /* already answered */
    return handle(cr, url);
}

static void completed(void *cls, struct MHD_Connection *conn, void **req_cls,
                      enum MHD_RequestTerminationCode toe)
{
    struct conn_req *cr = *req_cls;
    if (!cr) return;
    *req_cls = NULL;
    struct job *j = cr->job;
    if (j && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) /* an idle keep-alive times out again */
        MHD_set_connection_option(
            conn, MHD_CONNECTION_OPTION_TIMEOUT,
            (unsigned)(cr->srv->o.timeout_s > 0 ? cr->srv->o.timeout_s : HTTP_DEFAULT_TIMEOUT_S));
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
        metrics_observe(cr->srv->metrics, route_label(cr->route), status, &j->usage,
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
        metrics_observe(cr->srv->metrics, route_label(cr->route), cr->status, NULL, -1, -1);
        log_info("%s %s %d total_ms=%.1f%s%s%s", cr->method, cr->path, cr->status,
                 (mono_seconds() - cr->t0) * 1e3, cr->why[0] ? " error=\"" : "", cr->why,
                 cr->why[0] ? "\"" : "");
    }
    buf_free(&cr->body);
    free(cr);
}

struct http_server *http_start(const struct http_opts *o, struct http_app *app, struct err *e)
{
    struct http_server *s = calloc(1, sizeof *s);
    if (!s) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->o = *o;
    s->app = app;
    if (o->api_key && o->api_key[0]) s->api_key = strdup(o->api_key);
    if (o->metrics && !(s->metrics = metrics_new())) {
        err_set(e, ERR_NOMEM, "out of memory");
        free(s->api_key);
        free(s);
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int g = getaddrinfo(o->host, port, &hints, &ai);
    if (g != 0 || !ai) {
        err_set(e, ERR_INVALID, "cannot resolve host '%s': %s", o->host, gai_strerror(g));
        free(s->api_key);
        free(s);
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, ahc, s, MHD_OPTION_SOCK_ADDR,
                            ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)(o->conns > 0 ? o->conns : 64), MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)(o->timeout_s > 0 ? o->timeout_s : HTTP_DEFAULT_TIMEOUT_S),
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(256 * 1024),
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!s->d) {
        err_set(e, ERR_IO, "cannot listen on %s:%d (in use, or not a local address?)", o->host,
                o->port);
        metrics_free(s->metrics);
        free(s->api_key);
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : o->port;
    return s;
}

int http_port(const struct http_server *s)
{
    return s->port;
}

void http_quiesce(struct http_server *s)
{
    if (!s || !s->d) return;
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void http_stop(struct http_server *s)
{
    if (!s) return;
    if (s->d) MHD_stop_daemon(s->d);
    metrics_free(s->metrics);
    free(s->api_key);
    free(s);
}
