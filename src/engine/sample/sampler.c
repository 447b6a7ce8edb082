/* sampler — see sampler.h for the pipeline and its semantics. */
#include "engine/sample/sampler.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "engine/sample/sampler_internal.h"

struct cand {
    float logit;
    float p; /* exp((logit - max) / temperature): relative, unnormalized */
    int32_t id;
};

#define TOPP_SORT_MAX 1024
#define TOPP_BINS 4096

struct sampler {
    struct sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    bool penalize;
    /* penalty history: counts over the window, the distinct tokens in it, and a ring of the
     * window's tokens (NULL when the window is unbounded) */
    int32_t *count;    /* n_vocab */
    int32_t *dpos;     /* n_vocab: index of the token in distinct[] */
    int32_t *distinct; /* n_vocab */
    int32_t n_distinct;
    int32_t *ring;
    int ring_head, ring_len;
    struct cand *cand; /* n_vocab scratch */
    double *bins;      /* TOPP_BINS: top_p mass per logit bucket */
};

/* ---- full-vocabulary passes: scalar reference + AVX2, picked once by CPU features ---- */

static float max_scalar(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;
}

static double sumexp_scalar(const float *x, int64_t n, float m)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > -INFINITY) s += expf(x[i] - m);
    return s;
}

static float (*vec_max)(const float *, int64_t) = max_scalar;
static double (*vec_sumexp)(const float *, int64_t, float) = sumexp_scalar;

static void pick_kernels(void)
{
#if defined(__x86_64__)
    if (cpu_has_avx2_fma()) {
        vec_max = sampler_max_avx2;
        vec_sumexp = sampler_sumexp_avx2;
    }
#endif
}

/* ---- PRNG: xoshiro256** seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t rng_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

static double rng_uniform(uint64_t s[4])
{
    return (double)(rng_next(s) >> 11) * 0x1.0p-53;
} /* [0,1) */

static void rng_seed(uint64_t s[4], uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        s[i] = splitmix64(&seed);
}

/* ---- params ---- */

void sampler_params_init(struct sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->temperature = 1.0f;
    p->top_p = 1.0f;
    p->repeat_penalty = 1.0f;
    p->repeat_last_n = 64;
}

static int check_params(const struct sampler_params *p, int32_t n_vocab, struct err *e)
{
    if (n_vocab <= 0)
        return err_set(e, ERR_INVALID, "sampler: vocabulary size %d must be positive", n_vocab);
    if (!isfinite(p->temperature) || p->temperature < 0)
        return err_set_param(e, ERR_INVALID, "temperature",
                             "temperature must be a finite number >= 0, got %g", p->temperature);
    if (p->top_k < 0)
        return err_set_param(e, ERR_INVALID, "top_k", "top_k must be >= 0, got %d", p->top_k);
    if (!(p->top_p > 0 && p->top_p <= 1))
        return err_set_param(e, ERR_INVALID, "top_p", "top_p must be in (0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        return err_set_param(e, ERR_INVALID, "min_p", "min_p must be in [0, 1], got %g", p->min_p);
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return err_set_param(e, ERR_INVALID, "presence_penalty",
                             "presence_penalty must be in [-2, 2], got %g", p->presence_penalty);
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return err_set_param(e, ERR_INVALID, "frequency_penalty",
                             "frequency_penalty must be in [-2, 2], got %g", p->frequency_penalty);
    if (!(p->repeat_penalty > 0) || !isfinite(p->repeat_penalty))
        return err_set_param(e, ERR_INVALID, "repeat_penalty",
                             "repeat_penalty must be a finite number > 0, got %g",
                             p->repeat_penalty);
    if (p->repeat_last_n < -1)
        return err_set_param(e, ERR_INVALID, "repeat_last_n", "repeat_last_n must be >= -1, got %d",
                             p->repeat_last_n);
    if (p->n_top_logprobs < 0 || p->n_top_logprobs > SAMPLER_MAX_TOP_LOGPROBS)
        return err_set_param(e, ERR_INVALID, "top_logprobs",
                             "top_logprobs must be in [0, %d], got %d", SAMPLER_MAX_TOP_LOGPROBS,
                             p->n_top_logprobs);
    return 0;
}

struct sampler *sampler_new(const struct sampler_params *p, int32_t n_vocab, struct err *e)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, pick_kernels);
    if (check_params(p, n_vocab, e)) return NULL;
    struct sampler *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->p = *p;
    s->n_vocab = n_vocab;
    s->penalize = p->repeat_last_n != 0 && (p->repeat_penalty != 1.0f || p->presence_penalty != 0 ||
                                            p->frequency_penalty != 0);
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    s->bins = malloc(TOPP_BINS * sizeof *s->bins);
    if (!s->cand || !s->bins) goto nomem;
    if (s->penalize) {
        s->count = calloc((size_t)n_vocab, sizeof *s->count);
        s->dpos = malloc((size_t)n_vocab * sizeof *s->dpos);
        s->distinct = malloc((size_t)n_vocab * sizeof *s->distinct);
        if (!s->count || !s->dpos || !s->distinct) goto nomem;
        if (p->repeat_last_n > 0 && !(s->ring = malloc((size_t)p->repeat_last_n * sizeof *s->ring)))
            goto nomem;
    }
    rng_seed(s->rng, p->seed);
    return s;
nomem:
    sampler_free(s);
    err_set(e, ERR_NOMEM, "sampler: out of memory for a %d-token vocabulary", n_vocab);
    return NULL;
}

void sampler_free(struct sampler *s)
{
    if (!s) return;
    free(s->cand);
    free(s->bins);
    free(s->count);
    free(s->dpos);
    free(s->distinct);
    free(s->ring);
    free(s);
}

void sampler_reset(struct sampler *s, uint64_t seed)
{
    if (s->penalize) {
        for (int32_t i = 0; i < s->n_distinct; i++)
            s->count[s->distinct[i]] = 0;
        s->n_distinct = 0;
        s->ring_head = s->ring_len = 0;
    }
    s->p.seed = seed;
    rng_seed(s->rng, seed);
}

/* ---- penalty history ---- */

static void count_add(struct sampler *s, int32_t t)
{
    if (s->count[t]++ == 0) {
        s->dpos[t] = s->n_distinct;
        s->distinct[s->n_distinct++] = t;
    }
}

static void count_remove(struct sampler *s, int32_t t)
{
    if (--s->count[t] == 0) {
        int32_t last = s->distinct[--s->n_distinct];
        s->distinct[s->dpos[t]] = last;
        s->dpos[last] = s->dpos[t];
    }
}

void sampler_accept(struct sampler *s, int32_t token)
{
    if (!s->penalize || token < 0 || token >= s->n_vocab) return;
    if (s->ring) {
        int n = s->p.repeat_last_n;
        if (s->ring_len == n) {
            count_remove(s, s->ring[s->ring_head]);
            s->ring[s->ring_head] = token;
            s->ring_head = (s->ring_head + 1) % n;
        } else {
            s->ring[(s->ring_head + s->ring_len++) % n] = token;
        }
    }
    count_add(s, token);
}

static void apply_penalties(const struct sampler *s, float *logits)
{
    const float rp = s->p.repeat_penalty, fp = s->p.frequency_penalty, pp = s->p.presence_penalty;
    for (int32_t i = 0; i < s->n_distinct; i++) {
        int32_t t = s->distinct[i];
        float l = logits[t];
        if (rp != 1.0f) l = l > 0 ? l / rp : l * rp;
        logits[t] = l - (float)s->count[t] * fp - pp;
    }
}

/* ---- selection ---- */

/* Total order: higher logit first, then lower id. */
static inline bool better(const struct cand *x, const struct cand *y)
{
    return x->logit > y->logit || (x->logit == y->logit && x->id < y->id);
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    return better(x, y) ? -1 : better(y, x) ? 1 : 0;
}

static void cand_swap(struct cand *a, struct cand *b)
{
    struct cand t = *a;
    *a = *b;
    *b = t;
}

/* Rearranges a[0..n) so that a[0..k) hold the k best (in no particular order). Quickselect with
 * median-of-three pivots (for top_k above the heap's range and top_p); ids are unique, so the order
 * is total and the result set unique. */
static void select_top(struct cand *a, int64_t n, int64_t k)
{
    if (k <= 0 || k >= n) return;
    int64_t lo = 0, hi = n - 1, target = k - 1;
    while (hi > lo) {
        if (hi - lo < 24) {
            qsort(a + lo, (size_t)(hi - lo + 1), sizeof *a, cand_cmp);
            return;
        }
        int64_t mid = lo + (hi - lo) / 2;
        if (better(&a[mid], &a[lo])) cand_swap(&a[mid], &a[lo]);
        if (better(&a[hi], &a[lo])) cand_swap(&a[hi], &a[lo]);
        if (better(&a[hi], &a[mid])) cand_swap(&a[hi], &a[mid]);
        struct cand piv = a[mid];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (better(&a[i], &piv))
                i++;
            while (better(&piv, &a[j]))
                j--;
            if (i <= j) cand_swap(&a[i++], &a[j--]);
        }
        if (target <= j)
            hi = j;
        else if (target >= i)
            lo = i;
        else
            return;
    }
}

/* The k best allowed tokens (k small) in one pass: a heap whose root is the worst kept; most
 * tokens are rejected by one compare with the root. Ties go to the lower id, as in better(). */
static int64_t heap_top_k(const float *logits, int32_t n_vocab, int64_t k, struct cand *h)
{
    int64_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (!(l > -INFINITY)) continue;
        struct cand x = {l, 0, i};
        int64_t j;
        if (n < k) {
            for (j = n++; j > 0 && better(&h[(j - 1) / 2], &x); j = (j - 1) / 2)
                h[j] = h[(j - 1) / 2];
            h[j] = x;
        } else if (l > h[0].logit) {
            for (j = 0;;) {
                int64_t c = 2 * j + 1;
                if (c >= n) break;
                if (c + 1 < n && better(&h[c], &h[c + 1])) c++; /* the worse child */
                if (!better(&x, &h[c])) break;
                h[j] = h[c];
                j = c;
            }
            h[j] = x;
        }
    }
    return n;
}

/* Steps 1-2: penalties and mask. Returns the argmax (ties to the lowest id) or -1. */
static int32_t prepare(struct sampler *s, float *logits, const uint32_t *mask)
{
    if (s->penalize) apply_penalties(s, logits);
    int32_t n = s->n_vocab;
    if (mask) {
        for (int32_t w = 0; w * 32 < n; w++) {
            uint32_t m = mask[w];
            if (m == 0xffffffffu) continue;
            int32_t end = (w + 1) * 32 < n ? (w + 1) * 32 : n;
            for (int32_t i = w * 32; i < end; i++)
                if (!(m >> (i & 31) & 1)) logits[i] = -INFINITY;
        }
    }
    float bl = vec_max(logits, n);
    if (!(bl > -INFINITY)) return -1;
    if (bl == INFINITY) {
        /* A broken model's +inf would turn every later difference into NaN: clamp to FLT_MAX. */
        for (int32_t i = 0; i < n; i++)
            if (logits[i] == INFINITY) logits[i] = FLT_MAX;
        bl = FLT_MAX;
    }
    for (int32_t i = 0; i < n; i++)
        if (logits[i] == bl) return i;
    return -1;
}

/* top_p over c[m..n) after a kept head c[0..m) of mass cum < target: buckets c[m..n) by logit,
 * finds the bucket where the cumulative mass reaches target, moves the buckets above it and then
 * that bucket to c[m..), sorts only that bucket and cuts inside it. Returns the kept count. */
static int64_t topp_buckets(struct sampler *s, struct cand *c, int64_t m, int64_t n, double cum,
                            double target)
{
    float hi = -INFINITY, lo = INFINITY;
    for (int64_t i = m; i < n; i++) {
        hi = c[i].logit > hi ? c[i].logit : hi;
        lo = c[i].logit < lo ? c[i].logit : lo;
    }
    double *mass = s->bins;
    memset(mass, 0, TOPP_BINS * sizeof *mass);
    /* double: hi - lo may overflow float for extreme logits */
    const double scale = hi > lo ? (double)(TOPP_BINS - 1) / ((double)hi - (double)lo) : 0.0;
#define BIN(l) ((int)(((double)(hi) - (double)(l)) * scale))
    for (int64_t i = m; i < n; i++)
        mass[BIN(c[i].logit)] += c[i].p;
    int b = 0;
    for (; b < TOPP_BINS; b++) {
        if (cum + mass[b] >= target) break;
        cum += mass[b];
    }
    if (b == TOPP_BINS) return n; /* rounding: the whole mass is needed */
    int64_t w = m;
    for (int64_t i = m; i < n; i++)
        if (BIN(c[i].logit) < b) cand_swap(&c[w++], &c[i]);
    int64_t w2 = w;
    for (int64_t i = w; i < n; i++)
        if (BIN(c[i].logit) == b) cand_swap(&c[w2++], &c[i]);
#undef BIN
    qsort(c + w, (size_t)(w2 - w), sizeof *c, cand_cmp);
    for (int64_t i = w; i < w2; i++)
        if ((cum += c[i].p) >= target) return i + 1;
    return w2;
}

/* Step 4 (non-greedy): fills s->cand[0..*n) with the truncated candidates and returns their
 * total relative probability. When `sorted`, the candidates end in descending order. */
static double truncate_dist(struct sampler *s, const float *logits, float lmax, bool sorted,
                            int64_t *n_out)
{
    const struct sampler_params *p = &s->p;
    struct cand *c = s->cand;
    int64_t n = 0;
    if (p->top_k > 0 && p->top_k <= 1024) {
        n = heap_top_k(logits, s->n_vocab, p->top_k, c);
    } else {
        /* Without top_p, min_p alone decides the cut: skip tokens far below it while building
         * (conservatively; the exact test below still runs). */
        float floor_l = -INFINITY;
        if (p->min_p > 0 && p->top_p >= 1.0f)
            floor_l = lmax + p->temperature * (logf(p->min_p) - 0.01f);
        for (int32_t i = 0; i < s->n_vocab; i++)
            if (logits[i] > -INFINITY && logits[i] >= floor_l)
                c[n++] = (struct cand){logits[i], 0, i};
        if (p->top_k > 0 && p->top_k < n) {
            select_top(c, n, p->top_k);
            n = p->top_k;
        }
    }
    const float inv_t = 1.0f / p->temperature;
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        float d = c[i].logit - lmax; /* <= 0; the max gets exactly 1 even when inv_t overflows */
        c[i].p = d == 0 ? 1.0f : expf(d * inv_t);
        total += c[i].p;
    }
    bool is_sorted = false;
    if (p->top_p < 1.0f) {
        /* Few candidates (top_k): sort them all. Many: bucket by logit and sort only the bucket
         * where the cut falls; the vocabulary is never sorted. */
        double target = (double)p->top_p * total;
        if (n <= TOPP_SORT_MAX) {
            qsort(c, (size_t)n, sizeof *c, cand_cmp);
            double cum = 0;
            for (int64_t i = 0; i < n; i++)
                if ((cum += c[i].p) >= target) {
                    n = i + 1;
                    break;
                }
            is_sorted = true;
        } else {
            n = topp_buckets(s, c, 0, n, 0, target);
        }
        total = 0;
        for (int64_t i = 0; i < n; i++)
            total += c[i].p;
    }
    if (p->min_p > 0) {
        /* p / p_max = exp((l - lmax) / T); the argmax always survives top-k and top-p. */
        int64_t w = 0;
        total = 0;
        for (int64_t i = 0; i < n; i++)
            if (c[i].p >= p->min_p) c[w++] = c[i], total += c[i].p;
        n = w;
    }
    if (sorted && !is_sorted) qsort(c, (size_t)n, sizeof *c, cand_cmp);
    *n_out = n;
    return total;
}

static void fill_logprobs(const struct sampler *s, const float *logits, float lmax, int32_t token,
                          struct sampler_choice *out)
{
    double sum = vec_sumexp(logits, s->n_vocab, lmax);
    float lse = lmax + (float)log(sum);
    out->logprob = logits[token] - lse;
    int k = s->p.n_top_logprobs;
    out->n_top = 0;
    if (k <= 0) return;
    /* Insertion into a small descending list; strict '>' keeps the lower id on ties. */
    int n = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        float l = logits[i];
        if (!(l > -INFINITY) || (n == k && !(l > out->top_logprob[n - 1]))) continue;
        int j = n < k ? n++ : k - 1;
        while (j > 0 && l > out->top_logprob[j - 1]) {
            out->top_logprob[j] = out->top_logprob[j - 1];
            out->top_token[j] = out->top_token[j - 1];
            j--;
        }
        out->top_logprob[j] = l;
        out->top_token[j] = i;
    }
    for (int j = 0; j < n; j++)
        out->top_logprob[j] -= lse;
    out->n_top = n;
}

int sampler_sample(struct sampler *s, float *logits, const uint32_t *mask,
                   struct sampler_choice *out)
{
    int32_t best = prepare(s, logits, mask);
    if (best < 0) return -1;
    float lmax = logits[best];
    int32_t token = best;
    if (s->p.temperature > 0 && s->p.top_k != 1) {
        int64_t n;
        double total = truncate_dist(s, logits, lmax, false, &n);
        double r = rng_uniform(s->rng) * total, cum = 0;
        if (n > 0) token = s->cand[n - 1].id; /* n >= 1 always (the argmax survives); defensive */
        for (int64_t i = 0; i < n; i++) {
            cum += s->cand[i].p;
            if (r < cum) {
                token = s->cand[i].id;
                break;
            }
        }
    }
    out->token = token;
    if (s->p.no_logprob && s->p.n_top_logprobs == 0) {
        out->logprob = NAN;
        out->n_top = 0;
    } else {
        fill_logprobs(s, logits, lmax, token, out);
    }
    return 0;
}

int64_t sampler_candidates(struct sampler *s, float *logits, const uint32_t *mask, int32_t *ids,
                           float *probs, int64_t cap)
{
    int32_t best = prepare(s, logits, mask);
    if (best < 0) return -1;
    if (s->p.temperature == 0 || s->p.top_k == 1) {
        if (cap > 0) ids[0] = best, probs[0] = 1.0f;
        return 1;
    }
    int64_t n;
    double total = truncate_dist(s, logits, logits[best], true, &n);
    for (int64_t i = 0; i < n && i < cap; i++) {
        ids[i] = s->cand[i].id;
        probs[i] = (float)(s->cand[i].p / total);
    }
    return n;
}
