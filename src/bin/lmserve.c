/* lmserve — serve one GGUF model behind OpenAI Chat Completions, OpenAI Responses and Anthropic
 * Messages (docs/server.md). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "http/server.h"
#include "serve/backend_llm.h"
#include "serve/queue.h"

struct opts {
    const char *model, *host, *api_key, *alias;
    const char *kv_cache_dir, *cors;
    long port, ctx, threads, queue, conns, conns_per_client, max_tokens, max_body, timeout;
    long header_timeout, body_timeout, body_min_rate, shutdown_grace;
    long kv_slots, kv_disk_slots, prefill_chunk, spec, batch;
    bool kv_slots_force, reasoning, metrics, kv_f32, no_mmap, no_repack;
};

/* After the queue drained: how long connections may take to write their last bytes. */
#define SHUTDOWN_DELIVER_MS 700

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: lmserve MODEL.gguf [flags]\n"
        "       lmserve --nanochat DIR [flags]   a nanochat checkpoint directory (docs/nanochat.md)\n"
        "  --host H          address to listen on (default 127.0.0.1)\n"
        "  --port N          port (default 8080; 0 = any free port)\n"
        "  --ctx N           context length (default: the model's, capped by the RAM guard)\n"
        "  --threads N       threads for a forward pass (default: physical cores)\n"
        "  --alias NAME      model id to serve under (default: the file's general.name)\n"
        "  --api-key K       require Authorization: Bearer K or x-api-key: K (default: none;\n"
        "                    also read from LMSERVE_API_KEY)\n"
        "  --queue N         requests waiting beyond the running one; more get 429 (default 16)\n"
        "  --conns N         concurrent connections; beyond, a prompt 503 + Retry-After\n"
        "                    (default 256)\n"
        "  --conns-per-client N  concurrent connections from one address (default 128)\n"
        "  --max-tokens N    cap on any reply, and the default when a request names none\n"
        "                    (default 1024)\n"
        "  --max-body N      request body limit in bytes; larger gets 413 (default 8388608)\n"
        "  --timeout S       idle timeout of a connection, seconds (default 30)\n"
        "  --header-timeout S  absolute deadline for a request head, seconds (default 10)\n"
        "  --body-timeout S  absolute deadline for a body: S + its length at --body-min-rate\n"
        "                    (default 10)\n"
        "  --body-min-rate B slowest accepted body upload, bytes/s (default 65536)\n"
        "  --shutdown-grace S  on SIGTERM/SIGINT, seconds the running reply may take to\n"
        "                    finish before it is cut with an error ending (default 5)\n"
        "  --batch N         requests decoded together, one weight pass per step (default 4;\n"
        "                    raises --kv-slots to N; docs/batching.md)\n"
        "  --kv-slots N      resident KV caches reused across requests by common prefix\n"
        "                    (default 1; at least --batch; docs/kv-cache.md)\n"
        "  --kv-slots-force  keep --kv-slots even above available memory (still warns)\n"
        "  --kv-cache-dir D  spill evicted KV slots to sidecar files in D, restored on a\n"
        "                    match, also after a restart (default: off)\n"
        "  --kv-disk-slots N at most N sidecar files in D (default 8)\n"
        "  --cache-type T    K/V cache elements: f16 (default) or f32 (twice the memory;\n"
        "                    attention over unrounded keys and values)\n"
        "  --no-mmap         read the model file into memory instead of mapping it (more RAM\n"
        "                    while the page cache keeps the file; faster decode on some\n"
        "                    machines, docs/gguf.md)\n"
        "  --no-repack       keep the weights in the file's layout (default: matrices with a\n"
        "                    slab path are repacked at load into 16-row slabs, one\n"
        "                    sequential stream each, docs/kernels.md)\n"
        "  --prefill-chunk N prompt tokens per forward pass (default 512)\n"
        "  --spec N          speculative decoding from the request's own context: up to N\n"
        "                    drafted tokens verified per forward (1..16; default 0 = off)\n"
        "  --reasoning on|off  reasoning when a request does not say (default off)\n"
        "  --metrics         serve GET /metrics (Prometheus text format; default off)\n"
        "  --cors ORIGINS    allow browser clients from these origins (comma-separated, or *;\n"
        "                    default off)\n"
        "  --log-level L     debug, info, warn or error (default info)\n"
        "  --help            this text\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct {
        const char *flag;
        size_t off;
        long lo, hi;
    } nums[] = {
        {"--port", offsetof(struct opts, port), 0, 65535},
        {"--ctx", offsetof(struct opts, ctx), 16, 1 << 24},
        {"--threads", offsetof(struct opts, threads), 1, 1024},
        {"--queue", offsetof(struct opts, queue), 1, 1 << 20},
        {"--conns", offsetof(struct opts, conns), 1, 1 << 16},
        {"--max-tokens", offsetof(struct opts, max_tokens), 1, 1 << 24},
        {"--max-body", offsetof(struct opts, max_body), 1024, 1L << 32},
        {"--timeout", offsetof(struct opts, timeout), 1, 86400},
        {"--kv-slots", offsetof(struct opts, kv_slots), 1, 1 << 16},
        {"--kv-disk-slots", offsetof(struct opts, kv_disk_slots), 1, 1 << 16},
        {"--prefill-chunk", offsetof(struct opts, prefill_chunk), 1, 1 << 16},
        {"--batch", offsetof(struct opts, batch), 1, 64},
        {"--spec", offsetof(struct opts, spec), 0, 16},
        {"--conns-per-client", offsetof(struct opts, conns_per_client), 1, 1 << 16},
        {"--header-timeout", offsetof(struct opts, header_timeout), 1, 86400},
        {"--body-timeout", offsetof(struct opts, body_timeout), 1, 86400},
        {"--body-min-rate", offsetof(struct opts, body_min_rate), 1, 1L << 32},
        {"--shutdown-grace", offsetof(struct opts, shutdown_grace), 0, 3600},
    };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        }
        bool done = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !done; k++) {
            if (strcmp(a, nums[k].flag)) continue;
            if (i + 1 >= argc) {
                fprintf(stderr, "lmserve: %s needs a value\n", a);
                return -1;
            }
            if (parse_long(argv[++i], nums[k].lo, nums[k].hi, (long *)((char *)o + nums[k].off))) {
                fprintf(stderr, "lmserve: bad value '%s' for %s (an integer in [%ld, %ld])\n",
                        argv[i], a, nums[k].lo, nums[k].hi);
                return -1;
            }
            done = true;
        }
        if (done) continue;
        if (!strcmp(a, "--no-mmap")) {
            o->no_mmap = true;
            continue;
        }
        if (!strcmp(a, "--no-repack")) {
            o->no_repack = true;
            continue;
        }
        if (!strcmp(a, "--metrics")) {
            o->metrics = true;
            continue;
        }
        if (!strcmp(a, "--kv-slots-force")) {
            o->kv_slots_force = true;
            continue;
        }
        if (!strcmp(a, "--host") || !strcmp(a, "--api-key") || !strcmp(a, "--log-level") ||
            !strcmp(a, "--kv-cache-dir") || !strcmp(a, "--reasoning") || !strcmp(a, "--cache-type") ||
            !strcmp(a, "--cors") || !strcmp(a, "--alias")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "lmserve: %s needs a value\n", a);
                return -1;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--host")) {
                o->host = v;
            } else if (!strcmp(a, "--kv-cache-dir")) {
                if (!v[0]) {
                    fprintf(stderr, "lmserve: --kv-cache-dir must not be empty\n");
                    return -1;
                }
                o->kv_cache_dir = v;
            } else if (!strcmp(a, "--alias")) {
                if (!v[0] || strpbrk(v, " \t\r\n/")) {
                    fprintf(stderr, "lmserve: --alias '%s' must be non-empty, without spaces or '/'\n", v);
                    return -1;
                }
                o->alias = v;
            } else if (!strcmp(a, "--api-key")) {
                if (!v[0]) {
                    fprintf(stderr, "lmserve: --api-key must not be empty\n");
                    return -1;
                }
                o->api_key = v;
            } else if (!strcmp(a, "--cors")) {
                if (!v[0]) {
                    fprintf(stderr, "lmserve: --cors needs origins (e.g. http://localhost:3000 or *)\n");
                    return -1;
                }
                o->cors = v;
            } else if (!strcmp(a, "--cache-type")) {
                if (strcmp(v, "f16") && strcmp(v, "f32")) {
                    fprintf(stderr, "lmserve: bad value '%s' for --cache-type (f16 or f32)\n", v);
                    return -1;
                }
                o->kv_f32 = !strcmp(v, "f32");
            } else if (!strcmp(a, "--reasoning")) {
                if (strcmp(v, "on") && strcmp(v, "off")) {
                    fprintf(stderr, "lmserve: bad value '%s' for --reasoning (on or off)\n", v);
                    return -1;
                }
                o->reasoning = !strcmp(v, "on");
            } else {
                static const char *const lv[] = {"debug", "info", "warn", "error"};
                int found = -1;
                for (int k = 0; k < 4; k++)
                    if (!strcmp(v, lv[k])) found = k;
                if (found < 0) {
                    fprintf(stderr,
                            "lmserve: bad value '%s' for --log-level (debug, info, warn, error)\n",
                            v);
                    return -1;
                }
                log_set_level((enum log_level)found);
            }
        } else if (!strcmp(a, "--nanochat")) {
            struct stat sb;
            if (i + 1 >= argc || o->model) {
                fprintf(stderr, "lmserve: --nanochat needs a directory (and no other model)\n");
                return -1;
            }
            o->model = argv[++i];
            if (stat(o->model, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
                fprintf(stderr, "lmserve: --nanochat %s: not a directory\n", o->model);
                return -1;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "lmserve: unknown flag '%s' (see --help)\n", a);
            return -1;
        } else if (!o->model) {
            o->model = a;
        } else {
            fprintf(stderr, "lmserve: unexpected argument '%s' (one model only)\n", a);
            return -1;
        }
    }
    if (!o->model) {
        fprintf(stderr,
                "lmserve: no model given (usage: lmserve MODEL.gguf [flags]; see --help)\n");
        return -1;
    }
    return 0;
}

/* Signals: a dedicated thread takes SIGINT/SIGTERM (blocked everywhere else). While the model is
 * still loading there is nothing to drain, so it exits at once; afterwards it wakes main, which
 * drains. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool loaded, signalled;
    int sig;
    sigset_t set;
} sigs = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, false, 0, {{0}}};

static void *signal_thread(void *arg)
{
    int sig = 0;
    sigwait(&sigs.set, &sig);
    pthread_mutex_lock(&sigs.mu);
    if (!sigs.loaded) {
        log_info("%s while loading: exiting", sig == SIGINT ? "SIGINT" : "SIGTERM");
        _exit(0);
    }
    sigs.signalled = true;
    sigs.sig = sig;
    pthread_cond_broadcast(&sigs.cv);
    pthread_mutex_unlock(&sigs.mu);
    return NULL;
}

int main(int argc, char **argv)
{
    struct opts o = {.host = "127.0.0.1",
                     .port = 8080,
                     .queue = 16,
                     .conns = HTTP_DEFAULT_CONNS,
                     .conns_per_client = HTTP_DEFAULT_CONNS_PER_CLIENT,
                     .header_timeout = HTTP_DEFAULT_HEADER_TIMEOUT_S,
                     .body_timeout = HTTP_DEFAULT_BODY_TIMEOUT_S,
                     .body_min_rate = HTTP_DEFAULT_BODY_MIN_RATE,
                     .shutdown_grace = 5,
                     .max_tokens = 1024,
                     .max_body = HTTP_DEFAULT_MAX_BODY,
                     .timeout = HTTP_DEFAULT_TIMEOUT_S};
    log_set_level(LOG_INFO);
    const char *envkey = getenv("LMSERVE_API_KEY");
    if (envkey && envkey[0]) o.api_key = envkey;
    if (parse_args(argc, argv, &o) < 0) return 2;

    /* Signals are taken by sigwait in main only; every thread inherits the mask. */
    sigemptyset(&sigs.set);
    sigaddset(&sigs.set, SIGINT);
    sigaddset(&sigs.set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs.set, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_t st;
    if (pthread_create(&st, NULL, signal_thread, NULL) != 0) {
        fprintf(stderr, "lmserve: cannot start the signal thread\n");
        return 1;
    }
    pthread_detach(st);

    static struct http_app app;
    struct err e;
    err_clear(&e);
    struct http_opts ho = {.host = o.host,
                           .port = (int)o.port,
                           .conns = (int)o.conns,
                           .conns_per_client = (int)o.conns_per_client,
                           .timeout_s = (int)o.timeout,
                           .header_timeout_s = (int)o.header_timeout,
                           .body_timeout_s = (int)o.body_timeout,
                           .body_min_rate = (size_t)o.body_min_rate,
                           .max_body = (size_t)o.max_body,
                           .api_key = o.api_key,
                           .cors = o.cors,
                           .metrics = o.metrics};
    struct http_server *srv = http_start(&ho, &app, &e);
    if (!srv) {
        fprintf(stderr, "lmserve: %s\n", e.msg);
        return 1;
    }
    log_info("listening on http://%s:%d (loading %s)", o.host, http_port(srv), o.model);

    struct backend_llm_opts bo = {.n_threads = (int)o.threads,
                                  .n_ctx = (int)o.ctx,
                                  .max_tokens = (int)o.max_tokens,
                                  .kv_slots = (int)o.kv_slots,
                                  .kv_slots_force = o.kv_slots_force,
                                  .kv_cache_dir = o.kv_cache_dir,
                                  .kv_disk_slots = (int)o.kv_disk_slots,
                                  .prefill_chunk = (int)o.prefill_chunk,
                                  .batch = (int)o.batch,
                                  .spec = (int)o.spec,
                                  .kv_f32 = o.kv_f32,
                                  .no_mmap = o.no_mmap,
                                  .no_repack = o.no_repack,
                                  .alias = o.alias};
    struct backend *b = backend_llm_new(o.model, &bo, &e);
    if (!b) {
        fprintf(stderr, "lmserve: cannot load %s: %s\n", o.model, e.msg);
        http_stop(srv);
        return 1;
    }
    b->reasoning_default = o.reasoning && b->caps.think;
    struct queue *q = queue_new((int)o.queue, backend_run_job, b, &e);
    if (!q) {
        fprintf(stderr, "lmserve: %s\n", e.msg);
        b->ops->free(b);
        http_stop(srv);
        return 1;
    }
    atomic_store(&app.queue, q);
    atomic_store(&app.backend, b);
    log_info("ready: model %s, context %d, queue %ld, conns %ld, max tokens %d", b->model_id,
             b->n_ctx, o.queue, o.conns, b->max_tokens_cap);

    pthread_mutex_lock(&sigs.mu);
    sigs.loaded = true;
    while (!sigs.signalled)
        pthread_cond_wait(&sigs.cv, &sigs.mu);
    int sig = sigs.sig;
    pthread_mutex_unlock(&sigs.mu);
    log_info("%s: shutting down", sig == SIGINT ? "SIGINT" : "SIGTERM");
    /* R-CONC-5: nothing is lost. New requests on open connections get 503, the queued ones
     * their 503 body, the running one up to the grace period and then an in-band error ending;
     * the connections then deliver those bytes (bounded, a client may read nothing) and close. */
    atomic_store(&app.stopping, true);
    http_quiesce(srv);                               /* no new connections */
    queue_drain(q, (int)o.shutdown_grace * 1000);    /* every pipe has ended after this */
    int left = http_drain(srv, SHUTDOWN_DELIVER_MS); /* replies written */
    if (left) log_warn("shutdown: %d replies not delivered in time (clients not reading)", left);
    http_stop(srv); /* close every connection */
    queue_free(q);
    b->ops->free(b);
    log_info("bye");
    return 0;
}
