/* metrics — Prometheus counters and histograms (see metrics.h). */
#include "serve/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Histogram bucket bounds (seconds): TTFT from a few ms (cached prompt, tiny model) to long
 * prefills; per-token decode latency from sub-ms to a slow CPU model. */
static const double TTFT_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
static const double TOK_BOUNDS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
#define N_TTFT (sizeof TTFT_BOUNDS / sizeof TTFT_BOUNDS[0])
#define N_TOK (sizeof TOK_BOUNDS / sizeof TOK_BOUNDS[0])

struct hist {
    uint64_t bucket[16]; /* cumulative counts are computed when rendering */
    uint64_t count;
    double sum;
};

struct series {
    char endpoint[48];
    int status;
    uint64_t n;
};

struct metrics {
    pthread_mutex_t mu;
    struct series s[METRICS_MAX_SERIES];
    int n_series;
    uint64_t prompt_tokens, completion_tokens, cached_tokens, rejected_busy;
    struct hist ttft, tok;
};

struct metrics *metrics_new(void)
{
    struct metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void metrics_free(struct metrics *m)
{
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void hist_add(struct hist *h, const double *bounds, size_t nb, double v)
{
    size_t i = 0;
    while (i < nb && v > bounds[i]) i++;
    h->bucket[i]++; /* i == nb: only +Inf */
    h->count++;
    h->sum += v;
}

void metrics_observe(struct metrics *m, const char *endpoint, int status, const struct usage *u,
                     double ttft_s, double per_token_s)
{
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    int k = 0;
    while (k < m->n_series && (m->s[k].status != status || strcmp(m->s[k].endpoint, endpoint))) k++;
    if (k == m->n_series) {
        if (k == METRICS_MAX_SERIES) { /* bounded: fold the rest into one "other" series */
            k = METRICS_MAX_SERIES - 1;
            snprintf(m->s[k].endpoint, sizeof m->s[k].endpoint, "other");
            m->s[k].status = 0;
        } else {
            snprintf(m->s[k].endpoint, sizeof m->s[k].endpoint, "%s", endpoint);
            m->s[k].status = status;
            m->n_series++;
        }
    }
    m->s[k].n++;
    if (status == 429) m->rejected_busy++;
    if (u) {
        m->prompt_tokens += (uint64_t)u->prompt_tokens;
        m->completion_tokens += (uint64_t)u->completion_tokens;
        m->cached_tokens += (uint64_t)u->cached_tokens;
    }
    if (ttft_s >= 0) hist_add(&m->ttft, TTFT_BOUNDS, N_TTFT, ttft_s);
    if (per_token_s >= 0) hist_add(&m->tok, TOK_BOUNDS, N_TOK, per_token_s);
    pthread_mutex_unlock(&m->mu);
}

static void render_hist(struct buf *out, const char *name, const char *help, const struct hist *h,
                        const double *bounds, size_t nb)
{
    buf_printf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t i = 0; i < nb; i++) {
        cum += h->bucket[i];
        buf_printf(out, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[i], (unsigned long long)cum);
    }
    cum += h->bucket[nb];
    buf_printf(out, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.9g\n%s_count %llu\n", name,
               (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

static void render_kv(struct buf *out, const struct metrics_kv *kv)
{
    static const char *const PLAN[4] = {"cold", "adopt", "copy", "restore"};
    buf_printf(out,
               "# HELP lmserve_kv_slots Resident KV slots (--kv-slots after the RAM guard).\n"
               "# TYPE lmserve_kv_slots gauge\nlmserve_kv_slots %d\n"
               "# HELP lmserve_kv_slots_in_use KV slots holding rows of an earlier request.\n"
               "# TYPE lmserve_kv_slots_in_use gauge\nlmserve_kv_slots_in_use %d\n"
               "# HELP lmserve_kv_rows KV rows (token positions) held over all slots.\n"
               "# TYPE lmserve_kv_rows gauge\nlmserve_kv_rows %lld\n"
               "# HELP lmserve_kv_rows_capacity KV rows all slots can hold (slots x context).\n"
               "# TYPE lmserve_kv_rows_capacity gauge\nlmserve_kv_rows_capacity %lld\n"
               "# HELP lmserve_kv_disk_enabled 1 when the disk tier (--kv-cache-dir) is on.\n"
               "# TYPE lmserve_kv_disk_enabled gauge\nlmserve_kv_disk_enabled %d\n"
               "# HELP lmserve_kv_disk_sidecars Sidecar files indexed in --kv-cache-dir.\n"
               "# TYPE lmserve_kv_disk_sidecars gauge\nlmserve_kv_disk_sidecars %d\n"
               "# HELP lmserve_kv_spills_total Slots spilled to a sidecar.\n"
               "# TYPE lmserve_kv_spills_total counter\nlmserve_kv_spills_total %llu\n"
               "# HELP lmserve_kv_plans_total Prefills by KV adoption plan (all but cold reuse "
               "cached rows).\n# TYPE lmserve_kv_plans_total counter\n",
               kv->slots, kv->slots_in_use, (long long)kv->rows, (long long)kv->rows_capacity,
               kv->disk ? 1 : 0, kv->sidecars, (unsigned long long)kv->spills);
    for (int i = 0; i < 4; i++)
        buf_printf(out, "lmserve_kv_plans_total{plan=\"%s\"} %llu\n", PLAN[i],
                   (unsigned long long)kv->plans[i]);
}

int metrics_render(struct metrics *m, int queued, bool busy, const struct metrics_kv *kv,
                   struct buf *out)
{
    pthread_mutex_lock(&m->mu);
    buf_puts(out, "# HELP lmserve_requests_total Requests answered, by endpoint and HTTP status.\n"
                  "# TYPE lmserve_requests_total counter\n");
    for (int i = 0; i < m->n_series; i++)
        buf_printf(out, "lmserve_requests_total{endpoint=\"%s\",status=\"%d\"} %llu\n",
                   m->s[i].endpoint, m->s[i].status, (unsigned long long)m->s[i].n);
    buf_printf(out,
               "# HELP lmserve_rejected_busy_total Requests refused with 429 (queue full).\n"
               "# TYPE lmserve_rejected_busy_total counter\nlmserve_rejected_busy_total %llu\n"
               "# HELP lmserve_prompt_tokens_total Prompt tokens of finished generations.\n"
               "# TYPE lmserve_prompt_tokens_total counter\nlmserve_prompt_tokens_total %llu\n"
               "# HELP lmserve_generated_tokens_total Tokens generated.\n"
               "# TYPE lmserve_generated_tokens_total counter\nlmserve_generated_tokens_total %llu\n"
               "# HELP lmserve_cached_tokens_total Prompt tokens served from the KV cache.\n"
               "# TYPE lmserve_cached_tokens_total counter\nlmserve_cached_tokens_total %llu\n"
               "# HELP lmserve_queue_depth Requests waiting for the worker.\n"
               "# TYPE lmserve_queue_depth gauge\nlmserve_queue_depth %d\n"
               "# HELP lmserve_worker_busy 1 while the worker runs a request.\n"
               "# TYPE lmserve_worker_busy gauge\nlmserve_worker_busy %d\n",
               (unsigned long long)m->rejected_busy, (unsigned long long)m->prompt_tokens,
               (unsigned long long)m->completion_tokens, (unsigned long long)m->cached_tokens,
               queued, busy ? 1 : 0);
    render_hist(out, "lmserve_ttft_seconds",
                "Time from a request's arrival to its first sampled token.", &m->ttft, TTFT_BOUNDS,
                N_TTFT);
    render_hist(out, "lmserve_token_latency_seconds",
                "Mean decode time per generated token after the first, one sample per request.",
                &m->tok, TOK_BOUNDS, N_TOK);
    if (kv) render_kv(out, kv);
    pthread_mutex_unlock(&m->mu);
    return 0;
}
