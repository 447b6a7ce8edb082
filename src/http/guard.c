#define _GNU_SOURCE /* accept4, pipe2 */
#include "http/guard.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

/* Refused connections: how many are answered at once, how long their request head may take,
 * how long the lingering read after the reply lasts (so a client still sending its body reads
 * the reply instead of a reset), and the most bytes of head kept. Beyond REFUSE_MAX a refused
 * connection gets the generic reply at once, without reading. */
#define REFUSE_MAX 256
#define REFUSE_READ_MS 1000
#define REFUSE_LINGER_MS 1000
#define REFUSE_HEAD_MAX 2048
/* The watchdog's resolution. */
#define TICK_MS 50

struct addr_key {
    sa_family_t family;
    unsigned char bytes[16];
};

struct guard_conn {
    struct guard_conn *prev, *next;
    int refs; /* the list's + the acceptor's while it admits */
    int fd;   /* the library's descriptor number (matched in guard_conn_open) */
    int dfd;  /* ours: a dup of the same socket */
    bool opened, linked, cut;
    bool linger; /* answered before its body was read: drain a moment before closing */
    enum guard_state state;
    double deadline; /* monotonic seconds; 0 = none */
    struct addr_key key;
    char method[8];
    char path[96];
};

struct refused {
    int fd;
    bool lingering;
    enum guard_why why;
    int limit;
    double deadline;
    size_t len;
    char head[REFUSE_HEAD_MAX];
};

struct guard {
    struct guard_opts o;
    guard_admit_fn admit;
    guard_reply_fn reply;
    void *arg;
    pthread_mutex_t mu;
    struct guard_conn *head;
    int n_conns;
    int listen_fd;
    int wake[2];
    bool accepting, stop;
    pthread_t thread;
    struct refused *ref[REFUSE_MAX]; /* only the guard's thread touches these */
    int n_ref;
    int linger_fd[REFUSE_MAX]; /* handed over by guard_conn_close (under mu) */
    int n_linger;
    /* log lines are summed per second, so a flood of slow clients cannot flood the log */
    int n_refused[GUARD_WHY_COUNT];
    int n_cut_head, n_cut_body;
    double t_logged;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void key_of(const struct sockaddr *sa, struct addr_key *k)
{
    memset(k, 0, sizeof *k);
    k->family = sa->sa_family;
    if (sa->sa_family == AF_INET) {
        memcpy(k->bytes, &((const struct sockaddr_in *)sa)->sin_addr, 4);
    } else if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a)) { /* the same client as its IPv4 form */
            k->family = AF_INET;
            memcpy(k->bytes, a->s6_addr + 12, 4);
        } else {
            memcpy(k->bytes, a->s6_addr, 16);
        }
    }
}

/* ---- the registry of admitted connections (g->mu held) ---- */

static void unlink_locked(struct guard *g, struct guard_conn *c)
{
    assert(c->linked);
    if (c->prev)
        c->prev->next = c->next;
    else
        g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->linked = false;
    g->n_conns--;
    assert(g->n_conns >= 0);
}

static void unref_locked(struct guard_conn *c)
{
    assert(c->refs > 0);
    if (--c->refs) return;
    assert(!c->linked);
    if (c->dfd >= 0) close(c->dfd);
    free(c);
}

int guard_admitted(struct guard *g)
{
    pthread_mutex_lock(&g->mu);
    int n = g->n_conns;
    pthread_mutex_unlock(&g->mu);
    return n;
}

struct guard_conn *guard_conn_open(struct guard *g, int fd)
{
    pthread_mutex_lock(&g->mu);
    struct guard_conn *c = g->head;
    while (c && (c->fd != fd || c->opened))
        c = c->next;
    if (c) c->opened = true;
    pthread_mutex_unlock(&g->mu);
    return c;
}

static void wake(struct guard *g);

void guard_conn_close(struct guard *g, struct guard_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    bool woke = false;
    if (c->linger && c->dfd >= 0 && g->n_linger < REFUSE_MAX && !g->stop) {
        /* our dup keeps the socket open after the library closed its descriptor: the guard
         * thread drains the unread body for a moment, so the client reads the answer rather
         * than a reset */
        g->linger_fd[g->n_linger++] = c->dfd;
        c->dfd = -1;
        woke = true;
    }
    if (c->linked) {
        unlink_locked(g, c);
        unref_locked(c);
    }
    pthread_mutex_unlock(&g->mu);
    if (woke) wake(g);
}

void guard_conn_linger(struct guard *g, struct guard_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->linger = true;
    pthread_mutex_unlock(&g->mu);
}

bool guard_conn_head(struct guard *g, struct guard_conn *c, const char *method, const char *path,
                     bool body, long long content_length)
{
    if (!c) return true;
    pthread_mutex_lock(&g->mu);
    bool ok = !c->cut;
    if (ok) {
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->path, sizeof c->path, "%s", path);
        if (body) {
            double len = content_length >= 0 ? (double)content_length : (double)g->o.max_body;
            c->state = GUARD_BODY;
            c->deadline = now_s() + g->o.body_timeout_s + len / (double)g->o.body_min_rate;
        } else {
            c->state = GUARD_BUSY;
            c->deadline = 0;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

bool guard_conn_body_done(struct guard *g, struct guard_conn *c)
{
    if (!c) return true;
    pthread_mutex_lock(&g->mu);
    bool ok = !c->cut;
    if (ok) {
        c->state = GUARD_BUSY;
        c->deadline = 0;
    }
    pthread_mutex_unlock(&g->mu);
    return ok;
}

void guard_conn_idle(struct guard *g, struct guard_conn *c)
{
    if (!c) return;
    pthread_mutex_lock(&g->mu);
    c->state = GUARD_HEAD;
    c->method[0] = c->path[0] = 0; /* the next request's are not known yet */
    c->deadline = now_s() + g->o.idle_timeout_s + g->o.header_timeout_s;
    pthread_mutex_unlock(&g->mu);
}

bool guard_conn_was_cut(struct guard *g, struct guard_conn *c)
{
    if (!c) return false;
    pthread_mutex_lock(&g->mu);
    bool cut = c->cut;
    pthread_mutex_unlock(&g->mu);
    return cut;
}

int guard_conn_fd(const struct guard_conn *c)
{
    return c ? c->dfd : -1;
}

/* Writes a small reply without blocking; what does not fit the socket buffer is dropped (the
 * replies are a few hundred bytes, far below any socket buffer). */
static void send_all_nb(int fd, const struct buf *b)
{
    size_t off = 0;
    while (b->data && off < b->len) {
        ssize_t n = send(fd, b->data + off, b->len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            break;
        }
        off += (size_t)n;
    }
}

/* Cuts every connection past its deadline (g->mu held). */
static void watch_locked(struct guard *g, double now)
{
    for (struct guard_conn *c = g->head; c; c = c->next) {
        if (c->cut || c->state == GUARD_BUSY || !c->deadline || now < c->deadline) continue;
        c->cut = true;
        int limit = c->state == GUARD_HEAD ? g->o.header_timeout_s : g->o.body_timeout_s;
        if (c->state == GUARD_HEAD)
            g->n_cut_head++;
        else
            g->n_cut_body++;
        struct buf b = {0};
        g->reply(g->arg, GUARD_TIMEOUT, limit, c->method, c->path, &b);
        send_all_nb(c->dfd, &b);
        buf_free(&b);
        shutdown(c->dfd, c->state == GUARD_BODY ? SHUT_WR : SHUT_RDWR);
        if (c->state == GUARD_BODY) { /* wake the library's read without losing the 408 */
            c->linger = true;
            shutdown(c->dfd, SHUT_RD);
        }
    }
}

/* ---- refused connections (guard thread only) ---- */

static void refused_answer(struct guard *g, struct refused *r)
{
    char method[8] = "", path[96] = "";
    r->head[r->len < REFUSE_HEAD_MAX ? r->len : REFUSE_HEAD_MAX - 1] = 0;
    const char *sp = memchr(r->head, ' ', r->len);
    if (sp && (size_t)(sp - r->head) < sizeof method) {
        memcpy(method, r->head, (size_t)(sp - r->head));
        method[sp - r->head] = 0;
        const char *p = sp + 1;
        size_t n = strcspn(p, " ?\r\n");
        if (n >= sizeof path) n = sizeof path - 1;
        memcpy(path, p, n);
        path[n] = 0;
    }
    struct buf b = {0};
    g->reply(g->arg, r->why, r->limit, method, path, &b);
    send_all_nb(r->fd, &b);
    buf_free(&b);
    shutdown(r->fd, SHUT_WR);
    r->lingering = true;
    r->deadline = now_s() + REFUSE_LINGER_MS / 1e3;
}

/* One line per second at most for what the guard did (guard thread). */
static void log_summary(struct guard *g, double now)
{
    if (now - g->t_logged < 1.0) return;
    int full = g->n_refused[GUARD_FULL], per = g->n_refused[GUARD_PER_CLIENT];
    if (full || per)
        log_info("refused %d connections at the limit (--conns %d), %d from one address "
                 "(--conns-per-client %d)",
                 full, g->o.conns, per, g->o.conns_per_client);
    if (g->n_cut_head || g->n_cut_body)
        log_info("cut %d connections: request head not received in time (--header-timeout "
                 "%d s), %d: body not received in time",
                 g->n_cut_head, g->o.header_timeout_s, g->n_cut_body);
    memset(g->n_refused, 0, sizeof g->n_refused);
    g->n_cut_head = g->n_cut_body = 0;
    g->t_logged = now;
}

static void refuse(struct guard *g, int fd, enum guard_why why, int limit)
{
    g->n_refused[why]++;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    struct refused *r = g->n_ref < REFUSE_MAX ? malloc(sizeof *r) : NULL;
    if (!r) { /* too many at once: the generic reply without reading */
        struct buf b = {0};
        g->reply(g->arg, why, limit, "", "", &b);
        send_all_nb(fd, &b);
        buf_free(&b);
        close(fd);
        return;
    }
    r->fd = fd;
    r->lingering = false;
    r->why = why;
    r->limit = limit;
    r->len = 0;
    r->deadline = now_s() + REFUSE_READ_MS / 1e3;
    g->ref[g->n_ref++] = r;
}

/* Reads what a refused connection sent; answers once the head is complete. Returns false when
 * the connection is finished (closed). */
static bool refused_step(struct guard *g, struct refused *r, bool readable, double now)
{
    if (readable) {
        char sink[4096];
        for (;;) {
            char *dst = r->lingering ? sink : r->head + r->len;
            size_t cap = r->lingering ? sizeof sink : REFUSE_HEAD_MAX - 1 - r->len;
            if (!cap) break;
            ssize_t n = recv(r->fd, dst, cap, 0);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (n <= 0) { /* peer closed or failed */
                if (!r->lingering) refused_answer(g, r);
                return false;
            }
            if (!r->lingering) r->len += (size_t)n;
        }
        if (!r->lingering) {
            r->head[r->len] = 0;
            if (strstr(r->head, "\r\n\r\n") || r->len >= REFUSE_HEAD_MAX - 1) refused_answer(g, r);
        }
    }
    if (now >= r->deadline) {
        if (r->lingering) return false;
        refused_answer(g, r);
    }
    return true;
}

/* A socket whose answer is written: shut its sending side, drain what the client still sends
 * for REFUSE_LINGER_MS, then close (guard thread only). */
static void linger_adopt(struct guard *g, int fd, double now)
{
    struct refused *r = g->n_ref < REFUSE_MAX ? malloc(sizeof *r) : NULL;
    if (!r) {
        close(fd);
        return;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    shutdown(fd, SHUT_WR);
    r->fd = fd;
    r->lingering = true;
    r->why = GUARD_FULL;
    r->limit = 0;
    r->len = 0;
    r->deadline = now + REFUSE_LINGER_MS / 1e3;
    g->ref[g->n_ref++] = r;
}

/* ---- accepting ---- */

static void accept_one(struct guard *g, int fd, const struct sockaddr *sa, socklen_t len)
{
    struct addr_key k;
    key_of(sa, &k);
    pthread_mutex_lock(&g->mu);
    int same = 0;
    for (struct guard_conn *c = g->head; c; c = c->next)
        same += !memcmp(&c->key, &k, sizeof k);
    enum guard_why why = GUARD_WHY_COUNT;
    if (g->n_conns >= g->o.conns)
        why = GUARD_FULL;
    else if (same >= g->o.conns_per_client)
        why = GUARD_PER_CLIENT;
    struct guard_conn *c = NULL;
    if (why == GUARD_WHY_COUNT) {
        c = calloc(1, sizeof *c);
        int dfd = c ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
        if (dfd < 0) {
            free(c);
            c = NULL;
            why = GUARD_FULL; /* out of memory or descriptors: the server is full */
        } else {
            c->fd = fd;
            c->dfd = dfd;
            c->refs = 2;
            c->key = k;
            c->state = GUARD_HEAD;
            c->deadline = now_s() + g->o.header_timeout_s;
            c->next = g->head;
            if (g->head) g->head->prev = c;
            g->head = c;
            c->linked = true;
            g->n_conns++;
        }
    }
    pthread_mutex_unlock(&g->mu);
    if (!c) {
        refuse(g, fd, why, why == GUARD_FULL ? g->o.conns : g->o.conns_per_client);
        return;
    }
    int rc = g->admit(g->arg, fd, sa, len); /* on failure the library closed fd */
    pthread_mutex_lock(&g->mu);
    if (rc < 0 && !c->opened && c->linked) {
        unlink_locked(g, c);
        unref_locked(c);
    }
    unref_locked(c);
    pthread_mutex_unlock(&g->mu);
}

static void accept_ready(struct guard *g)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof ss;
        int fd = accept4(g->listen_fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
                log_warn("accept: %s", strerror(errno));
                struct timespec ts = {0, 20 * 1000000L}; /* do not spin on a full table */
                nanosleep(&ts, NULL);
            }
            return;
        }
        accept_one(g, fd, (struct sockaddr *)&ss, len);
    }
}

static void *guard_main(void *arg)
{
    struct guard *g = arg;
    struct pollfd pf[2 + REFUSE_MAX];
    for (;;) {
        pthread_mutex_lock(&g->mu);
        bool stop = g->stop;
        if (!g->accepting && g->listen_fd >= 0) { /* under the lock: guard_quiesce waits on it */
            close(g->listen_fd);
            g->listen_fd = -1;
        }
        pthread_mutex_unlock(&g->mu);
        if (stop) break;
        int n = 0;
        pf[n++] = (struct pollfd){.fd = g->wake[0], .events = POLLIN};
        pf[n++] = (struct pollfd){.fd = g->listen_fd, .events = POLLIN}; /* -1 is ignored */
        for (int i = 0; i < g->n_ref; i++)
            pf[n++] = (struct pollfd){.fd = g->ref[i]->fd, .events = POLLIN};
        int rc = poll(pf, (nfds_t)n, TICK_MS);
        if (rc < 0 && errno != EINTR) log_warn("guard poll: %s", strerror(errno));
        if (rc > 0 && (pf[0].revents & POLLIN)) {
            char tmp[64];
            while (read(g->wake[0], tmp, sizeof tmp) > 0) {
            }
        }
        double now = now_s();
        /* refused connections first: accept_ready may append to the table */
        int keep = 0, n_ref = g->n_ref;
        for (int i = 0; i < n_ref; i++) {
            struct refused *r = g->ref[i];
            bool readable = rc > 0 && (pf[2 + i].revents & (POLLIN | POLLHUP | POLLERR));
            if (refused_step(g, r, readable, now)) {
                g->ref[keep++] = r;
            } else {
                close(r->fd);
                free(r);
            }
        }
        g->n_ref = keep;
        if (rc > 0 && g->listen_fd >= 0 && (pf[1].revents & POLLIN)) accept_ready(g);
        pthread_mutex_lock(&g->mu);
        watch_locked(g, now);
        log_summary(g, now);
        int lfd[REFUSE_MAX], n_l = g->n_linger;
        memcpy(lfd, g->linger_fd, (size_t)n_l * sizeof lfd[0]);
        g->n_linger = 0;
        pthread_mutex_unlock(&g->mu);
        for (int i = 0; i < n_l; i++)
            linger_adopt(g, lfd[i], now);
    }
    return NULL;
}

static void wake(struct guard *g)
{
    ssize_t n = write(g->wake[1], "w", 1);
    (void)n; /* a full pipe already wakes the thread */
}

struct guard *guard_new(const struct guard_opts *o, int listen_fd, guard_admit_fn admit,
                        guard_reply_fn reply, void *arg, struct guard **publish, struct err *e)
{
    if (publish) *publish = NULL;
    struct guard *g = calloc(1, sizeof *g);
    if (!g) {
        close(listen_fd);
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    g->o = *o;
    if (g->o.body_min_rate < 1) g->o.body_min_rate = 1;
    g->admit = admit;
    g->reply = reply;
    g->arg = arg;
    g->listen_fd = listen_fd;
    g->accepting = true;
    pthread_mutex_init(&g->mu, NULL);
    if (pipe2(g->wake, O_CLOEXEC | O_NONBLOCK) < 0) {
        err_set(e, ERR_IO, "cannot create a pipe: %s", strerror(errno));
        goto fail;
    }
    fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
    if (publish) *publish = g; /* before the thread: it may admit a queued connection at once */
    if (pthread_create(&g->thread, NULL, guard_main, g) != 0) {
        if (publish) *publish = NULL;
        err_set(e, ERR_INTERNAL, "cannot start the accept thread");
        close(g->wake[0]);
        close(g->wake[1]);
        goto fail;
    }
    return g;
fail:
    close(listen_fd);
    pthread_mutex_destroy(&g->mu);
    free(g);
    return NULL;
}

void guard_quiesce(struct guard *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->accepting = false;
    pthread_mutex_unlock(&g->mu);
    wake(g);
    /* the thread closes the listening socket on its next turn; wait for it so the caller knows
     * no new connection is admitted from here on */
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&g->mu);
        bool closed = g->listen_fd < 0;
        pthread_mutex_unlock(&g->mu);
        if (closed) break;
        struct timespec ts = {0, 5 * 1000000L};
        nanosleep(&ts, NULL);
    }
}

void guard_free(struct guard *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->stop = true;
    pthread_mutex_unlock(&g->mu);
    wake(g);
    pthread_join(g->thread, NULL);
    for (int i = 0; i < g->n_ref; i++) {
        close(g->ref[i]->fd);
        free(g->ref[i]);
    }
    for (int i = 0; i < g->n_linger; i++)
        close(g->linger_fd[i]);
    if (g->listen_fd >= 0) close(g->listen_fd);
    pthread_mutex_lock(&g->mu);
    while (g->head) { /* the library closed them all; nothing should be left */
        struct guard_conn *c = g->head;
        unlink_locked(g, c);
        c->refs = 1;
        unref_locked(c);
    }
    pthread_mutex_unlock(&g->mu);
    close(g->wake[0]);
    close(g->wake[1]);
    pthread_mutex_destroy(&g->mu);
    free(g);
}
