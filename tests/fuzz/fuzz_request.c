/* libFuzzer target for the request decoders: any byte string, read as a body of any of the
 * dialects, must either decode into a request or fail with a message and a param-or-not error —
 * never crash, leak or hang. On success the encoders also run over a short synthetic reply.
 * Built by `make fuzz-request` (clang -fsanitize=fuzzer,address,undefined); run by
 * tests/suites/61-api-fuzz.sh. Input: first byte = dialect (mod DIALECT_COUNT: chat, responses,
 * messages, completions, embeddings) and flags, rest = body. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"

static struct backend be;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!be.model_id[0]) {
        strcpy(be.model_id, "fuzz");
        be.max_tokens_cap = 64;
        be.defaults = (struct sampler_params){.temperature = 0.7f, .top_k = 20, .top_p = 0.8f,
                                              .repeat_penalty = 1, .repeat_last_n = 64};
        be.defaults_think = be.defaults;
    }
    be.family = &family_qwen3;
    be.caps = (struct backend_caps){.think = data[0] & 4, .tools = data[0] & 8, .grammar = data[0] & 16,
                                    .stop = !(data[0] & 32), .system_role = !(data[0] & 64)};
    struct api_ctx ctx = {.backend = &be, .count_only = data[0] & 128};
    enum dialect d = (enum dialect)(data[0] % DIALECT_COUNT);
    struct job *j = job_new();
    if (!j) return 0;
    struct err e;
    err_clear(&e);
    if (api_parse(d, &ctx, (const char *)data + 1, size - 1, &j->req, &e) != 0) {
        if (!e.msg[0] || e.code == ERR_OK) abort(); /* every failure must say why */
        struct buf b = {0};
        api_error_body(d, &e, &b); /* the error body renders for any message */
        if (!b.len) abort();
        buf_free(&b);
        job_unref(j);
        return 0;
    }
    if (api_sink_install(j) == 0) {
        struct reply_sink *s = &j->sink;
        /* a logprob record per token when asked (token texts render as "": no vocabulary) */
        struct token_logprob lp = {.token = 1, .logprob = -0.5f,
                                   .n_top = j->req.sp.n_top_logprobs};
        const struct token_logprob *l = j->req.logprobs ? &lp : NULL;
        s->reasoning(s->ctx, 0, "r", 1);
        for (int c = 0; c < j->req.n; c++) {
            s->text(s->ctx, c, "t\xc3\xa9", 3, l, l ? 1 : 0);
            s->text(s->ctx, c, "", 0, l, l ? 1 : 0); /* a token that produced no text */
            s->finish(s->ctx, c, FINISH_STOP, j->req.n_stop ? j->req.stop[0] : NULL);
        }
        struct usage u = {.prompt_tokens = 3, .completion_tokens = 2};
        s->done(s->ctx, &u);
        char out[4096];
        while (pipe_read(j->pipe, out, sizeof out, 0) > 0) {
        }
    }
    job_unref(j);
    return 0;
}
