/* sampler — turns logits into the next token: penalties, mask, temperature / top-k / top-p /
 * min-p, seeded RNG; reports logprobs of the chosen token and the top alternatives. */
#ifndef LMS_ENGINE_SAMPLER_H
#define LMS_ENGINE_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/err.h"

struct sampler_params {
    float temperature;       /* 0 = greedy */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float presence_penalty, frequency_penalty; /* OpenAI semantics, 0 = off */
    float repeat_penalty;    /* 1 = off */
    int repeat_last_n;       /* window for all penalties (default 64) */
    uint64_t seed;
    int n_top_logprobs;      /* 0..20 */
};

struct sampler;
struct sampler_choice {
    int32_t token;
    float logprob;                /* log-softmax of the chosen token over the full distribution (after mask) */
    int n_top;
    int32_t top_token[20];
    float top_logprob[20];
};

struct sampler *sampler_new(const struct sampler_params *p, int32_t n_vocab, struct err *e);
void sampler_free(struct sampler *s);
/* Samples from logits (modified in place). mask: bitset of allowed tokens (bit i of word i/32),
 * NULL = all allowed. Returns 0 or -1 when no token is allowed. */
int sampler_sample(struct sampler *s, float *logits, const uint32_t *mask, struct sampler_choice *out);
void sampler_accept(struct sampler *s, int32_t token); /* feeds history for penalties */

#endif
