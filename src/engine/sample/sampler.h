/* sampler — turns logits into the next token: penalties, mask, temperature / top-k / top-p /
 * min-p, seeded RNG; reports logprobs of the chosen token and the top alternatives.
 *
 * Pipeline of one step (the order Hugging Face and vLLM use; llama.cpp applies temperature last):
 *   1. penalties over the last repeat_last_n accepted tokens (llama.cpp semantics): for each token
 *      t seen c > 0 times, logit = logit > 0 ? logit / repeat_penalty : logit * repeat_penalty,
 *      then logit -= c * frequency_penalty + presence_penalty (OpenAI semantics);
 *   2. mask: disallowed tokens get -inf;
 *   3. logprobs: log-softmax of these logits (before temperature and truncation);
 *   4. temperature 0 (or top_k 1): argmax, ties to the lowest id;
 *      else logits / temperature, keep the top_k, then the smallest prefix (descending) whose
 *      probability reaches top_p, then those with p >= min_p * p_max, and draw from what is left.
 * Deterministic: the same seed, params and logits give the same tokens on every run and machine
 * (own xoshiro256** PRNG seeded by splitmix64; no rand(), no global state). The token choice uses
 * only exact SIMD (max) and scalar libm math, so it does not depend on the CPU's ISA; only
 * logprob values come from a vectorized exp (relative error < 2e-7).
 * Cost on a 151936-token vocab: greedy is one vectorized pass; top_k <= 1024 is a one-pass heap
 * (larger: quickselect); top_p without top_k buckets by logit and sorts only the bucket where the
 * cut falls, never the whole vocab.
 *
 * Threading: a sampler belongs to one request (one thread at a time). */
#ifndef LMS_ENGINE_SAMPLER_H
#define LMS_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

#define SAMPLER_MAX_TOP_LOGPROBS 20

struct sampler_params {
    float temperature;                         /* 0 = greedy */
    int top_k;                                 /* 0 = off */
    float top_p;                               /* 1 = off */
    float min_p;                               /* 0 = off */
    float presence_penalty, frequency_penalty; /* OpenAI semantics, 0 = off */
    float repeat_penalty;                      /* 1 = off */
    int repeat_last_n; /* window for all penalties (default 64); 0 = penalties off,
                          -1 = every accepted token */
    uint64_t seed;
    int n_top_logprobs; /* 0..20 */
    int no_logprob;     /* 1: the caller will not read logprob / top: skip the log-softmax over
                           the vocabulary (~0.15 ms a token at 151,936); logprob is NAN */
};

struct sampler;
struct sampler_choice {
    int32_t token;
    float logprob; /* log-softmax of the chosen token over the full distribution
                      (after penalties and mask, before temperature/truncation) */
    int n_top;
    int32_t top_token[SAMPLER_MAX_TOP_LOGPROBS]; /* descending logprob, ties to the lower id */
    float top_logprob[SAMPLER_MAX_TOP_LOGPROBS];
};

/* Fills p with neutral settings: temperature 1, top_k 0, top_p 1, min_p 0, no penalties
 * (repeat_penalty 1, repeat_last_n 64), seed 0, no top logprobs. */
void sampler_params_init(struct sampler_params *p);

/* Validates p (ERR_INVALID naming the parameter: temperature >= 0, top_k >= 0, top_p in (0,1],
 * min_p in [0,1], repeat_penalty > 0, penalties in [-2,2], repeat_last_n >= -1, n_top_logprobs
 * 0..20, all finite) and allocates a sampler for n_vocab tokens. */
struct sampler *sampler_new(const struct sampler_params *p, int32_t n_vocab, struct err *e);
void sampler_free(struct sampler *s);
/* Samples from logits (modified in place). mask: bitset of allowed tokens (bit i of word i/32;
 * (n_vocab + 31) / 32 words, n_vocab as given to sampler_new),
 * NULL = all allowed. Returns 0 or -1 when no token is allowed (all masked or all -inf/NaN). */
int sampler_sample(struct sampler *s, float *logits, const uint32_t *mask,
                   struct sampler_choice *out);
void sampler_accept(struct sampler *s, int32_t token); /* feeds history for penalties */
/* Forgets the penalty history and reseeds the RNG with `seed` (a new request on a reused sampler).
 */
void sampler_reset(struct sampler *s, uint64_t seed);

/* The truncated distribution sampler_sample would draw from for these logits (steps 1, 2 and 4
 * above; logits modified in place the same way): up to cap tokens in descending probability
 * (ties to the lower id) with their normalized probabilities. Returns the number of candidates
 * (may exceed cap; only cap are written), or -1 when no token is allowed. Draws no random number.
 * For tests and diagnostics. */
int64_t sampler_candidates(struct sampler *s, float *logits, const uint32_t *mask, int32_t *ids,
                           float *probs, int64_t cap);

#endif
