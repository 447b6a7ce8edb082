/* Embeddings encoder: {"object":"list","data":[{"object":"embedding","index","embedding"}],
 * "model","usage":{prompt_tokens,total_tokens}}; embedding as floats or, encoding_format base64,
 * the little-endian float32 bytes in base64. Never streamed. */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static json_t *b64_floats(const float *v, int n)
{
    static const char T[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t nb = (size_t)n * 4, no = (nb + 2) / 3 * 4;
    unsigned char *b = malloc(nb);
    char *o = malloc(no + 1);
    json_t *j = NULL;
    if (b && o) {
        for (int i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &v[i], 4);
            for (int k = 0; k < 4; k++) b[4 * i + k] = (unsigned char)(u >> (8 * k)); /* LE */
        }
        size_t w = 0;
        for (size_t i = 0; i < nb; i += 3) {
            uint32_t x = (uint32_t)b[i] << 16 | (i + 1 < nb ? (uint32_t)b[i + 1] << 8 : 0) |
                         (i + 2 < nb ? b[i + 2] : 0);
            o[w++] = T[x >> 18 & 63];
            o[w++] = T[x >> 12 & 63];
            o[w++] = i + 1 < nb ? T[x >> 6 & 63] : '=';
            o[w++] = i + 2 < nb ? T[x & 63] : '=';
        }
        o[w] = 0;
        j = json_string(o);
    }
    free(b);
    free(o);
    return j;
}

static int s_done(void *ctx, const struct usage *u)
{
    struct api_enc *en = ctx;
    struct request *r = &en->job->req;
    en->started = true;
    if (!r->embd) { /* done without vectors: a backend bug, never an empty success */
        struct err e;
        err_set(&e, ERR_INTERNAL, "the embeddings were not computed");
        api_enc_fail_plain(en, &e);
        return -1;
    }
    json_t *data = json_array();
    for (int i = 0; data && i < r->n_inputs; i++) {
        const float *v = r->embd + (size_t)i * r->n_embd;
        json_t *emb;
        if (r->embd_base64) {
            emb = b64_floats(v, r->n_embd);
        } else {
            emb = json_array();
            for (int d = 0; emb && d < r->n_embd; d++) json_array_append_new(emb, api_json_float(v[d]));
        }
        json_array_append_new(data, json_pack("{s:s, s:i, s:o}", "object", "embedding", "index", i,
                                              "embedding", emb));
    }
    json_t *body = json_pack("{s:s, s:o, s:s, s:{s:I, s:I}}", "object", "list", "data", data,
                             "model", r->model, "usage", "prompt_tokens",
                             (json_int_t)u->prompt_tokens, "total_tokens",
                             (json_int_t)u->prompt_tokens);
    if (!body) return -1;
    if (api_enc_json_reply(en, body) < 0) return -1;
    api_enc_end(en);
    return 0;
}

static void s_error(void *ctx, const struct err *e)
{
    api_enc_fail_plain(ctx, e);
}

/* No text events exist for an embeddings job; accepted and dropped so the sink contract (every
 * hook set) holds. */
static int s_none(void *ctx) { return 0; }
static int s_text(void *ctx, int c, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    return 0;
}
static int s_reasoning(void *ctx, int c, const char *s, size_t n) { return 0; }
static int s_finish(void *ctx, int c, enum finish_reason why, const char *stop) { return 0; }

/* The embeddings encoder: one ops table; only done and error carry anything. */
const struct api_encoder api_enc_embeddings = {
    .hooks = {.start = s_none,
              .reasoning = s_reasoning,
              .text = s_text,
              .finish = s_finish,
              .done = s_done,
              .error = s_error},
    .one_choice = true,
};
