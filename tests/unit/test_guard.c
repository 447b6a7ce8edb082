/* The accept guard (src/http/guard.c). */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/err.h"
#include "http/guard.h"

static struct guard *published;
static atomic_int admitted, saw_null;

/* What the server's admit does in effect: the library's connection callback reads the guard
 * pointer the caller stored (server.c's s->g) */
static int admit_reads_pointer(void *arg, int fd, const struct sockaddr *sa, socklen_t len)
{
    if (!__atomic_load_n(&published, __ATOMIC_SEQ_CST)) atomic_store(&saw_null, 1);
    atomic_fetch_add(&admitted, 1);
    close(fd);
    return -1;
}

static void reply_none(void *arg, enum guard_why why, int limit, const char *method,
                       const char *path, struct buf *out)
{
}

/* Regression: server.c assigned s->g = guard_new(...) after the accept thread had started, so a
 * connection already waiting in the backlog reached the connection callback with a NULL guard
 * (UBSan: null struct guard in guard_conn_open). The pointer is now published before the
 * thread starts. */
Test(guard, pointer_published_before_a_queued_connection_is_admitted)
{
    for (int round = 0; round < 20; round++) {
        int lfd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert(lfd >= 0);
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        cr_assert(bind(lfd, (struct sockaddr *)&a, sizeof a) == 0);
        cr_assert(listen(lfd, 16) == 0);
        socklen_t al = sizeof a;
        cr_assert(getsockname(lfd, (struct sockaddr *)&a, &al) == 0);
        int cfd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert(connect(cfd, (struct sockaddr *)&a, sizeof a) == 0); /* queued in the backlog */
        atomic_store(&admitted, 0);
        __atomic_store_n(&published, NULL, __ATOMIC_SEQ_CST);
        struct guard_opts o = {.conns = 8, .conns_per_client = 8, .header_timeout_s = 10,
                               .body_timeout_s = 10, .body_min_rate = 1, .max_body = 1 << 20,
                               .idle_timeout_s = 10};
        struct err e = {0};
        struct guard *g = guard_new(&o, lfd, admit_reads_pointer, reply_none, NULL, &published, &e);
        cr_assert(g, "%s", e.msg);
        cr_assert_eq(__atomic_load_n(&published, __ATOMIC_SEQ_CST), g);
        for (int i = 0; i < 2000 && !atomic_load(&admitted); i++) {
            struct timespec ts = {0, 1000000L};
            nanosleep(&ts, NULL);
        }
        cr_assert_eq(atomic_load(&admitted), 1);
        guard_free(g);
        close(cfd);
    }
    cr_assert_eq(atomic_load(&saw_null), 0, "a queued connection was admitted before the guard was published");
}
