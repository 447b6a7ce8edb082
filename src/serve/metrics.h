/* metrics — the server's Prometheus counters (GET /metrics with --metrics).
 *
 * One registry per server, fed by the connection threads when a request completes (one call per
 * request, under one mutex) and rendered in the Prometheus text exposition format (version
 * 0.0.4). Gauges that are state, not history (queue depth, busy worker), are passed in at render
 * time by the caller, which reads them from the queue. */
#ifndef LMS_SERVE_METRICS_H
#define LMS_SERVE_METRICS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/buf.h"
#include "serve/request.h"

#define METRICS_MAX_SERIES 128 /* distinct (endpoint, status) pairs kept; more are folded */

struct metrics;
struct metrics *metrics_new(void); /* NULL on OOM */
void metrics_free(struct metrics *m);

/* One finished request: its endpoint (a route path such as "/v1/chat/completions"; copied), the
 * HTTP status sent, its usage (NULL = no generation), the time to its first token and the decode
 * time per generated token after the first (seconds; < 0 = not measured). Any thread. */
void metrics_observe(struct metrics *m, const char *endpoint, int status, const struct usage *u,
                     double ttft_s, double per_token_s);

/* The KV cache's state (docs/kv-cache.md), a snapshot the backend publishes from its worker
 * (backend_ops.kv_stats): gauges of the resident slots and the disk tier, counters of the
 * adoption plans executed (every plan but cold is a cache hit) and of the spills written. */
struct metrics_kv {
    int slots;            /* --kv-slots after the RAM guard */
    int slots_in_use;     /* slots holding rows */
    int64_t rows;         /* rows held over all slots */
    int64_t rows_capacity; /* slots x context */
    bool disk;            /* --kv-cache-dir is on */
    int sidecars;         /* sidecars indexed */
    uint64_t plans[4];    /* cold, adopt, copy, restore (KVPLAN_* order) */
    uint64_t spills;      /* sidecars written */
};

/* Appends the text exposition to out. queued / busy: the queue's state now; kv: NULL when no
 * backend with a KV pool is loaded (no kv series then). Any thread. */
int metrics_render(struct metrics *m, int queued, bool busy, const struct metrics_kv *kv,
                   struct buf *out);

#endif
