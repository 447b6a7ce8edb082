/* Legacy OpenAI Completions request -> struct request (raw prompt, no chat template).
 * prompt: a string, an array of token ids, or an array of strings / token-id arrays; several
 * prompts go to req->prompts (at most REQ_MAX_CHOICES choices in all: prompts x n). logprobs: an integer
 * 0..20 (alternatives per token; 0 = only the chosen token's). echo: the reply text starts with the
 * prompt (not with logprobs: prompt-token logprobs would need every prompt position's logits). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static int read_ids(json_t *arr, const char *param, int32_t **out, size_t *n_out, struct err *e)
{
    size_t n = json_array_size(arr);
    if (n == 0) return err_set_param(e, ERR_INVALID, "prompt", "'%s' is empty", param);
    if (!(*out = malloc(n * sizeof **out))) return err_set(e, ERR_NOMEM, "out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(arr, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return err_set_param(e, ERR_INVALID, "prompt", "'%s[%zu]' must be a token id", param, i);
        (*out)[(*n_out)++] = (int32_t)json_integer_value(t);
    }
    return 0;
}

/* One element of a prompt array: a string or an array of token ids. */
static int read_one(json_t *p, size_t i, char **text, int32_t **ids, size_t *n_ids, struct err *e)
{
    char param[32];
    snprintf(param, sizeof param, "prompt[%zu]", i);
    if (json_is_string(p))
        return (*text = strdup(json_string_value(p))) ? 0 : err_set(e, ERR_NOMEM, "out of memory");
    if (json_is_array(p)) return read_ids(p, param, ids, n_ids, e);
    return err_set_param(e, ERR_INVALID, "prompt", "'%s' must be a string or an array of token ids",
                         param);
}

static int read_prompt(json_t *p, struct request *req, int n_choices, struct err *e)
{
    if (json_is_string(p))
        return (req->prompt_text = strdup(json_string_value(p))) ? 0 : err_set(e, ERR_NOMEM, "out of memory");
    if (!json_is_array(p) || json_array_size(p) == 0)
        return err_set_param(e, ERR_INVALID, "prompt",
                             "'prompt' must be a string, an array of token ids, or an array of "
                             "strings or of token-id arrays");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        req->cap_tokens = json_array_size(p);
        return read_ids(p, "prompt", &req->tokens, &req->n_tokens, e);
    }
    size_t np = json_array_size(p);
    if (np == 1) {
        if (read_one(first, 0, &req->prompt_text, &req->tokens, &req->n_tokens, e) < 0) return -1;
        req->cap_tokens = req->n_tokens;
        return 0;
    }
    /* several prompts: each runs as its own completion, its n choices at index p * n + i */
    if (np * (size_t)n_choices > REQ_MAX_CHOICES)
        return err_set_param(e, ERR_INVALID, "prompt",
                             "%zu prompts x n = %d gives %zu choices, more than the %d one request "
                             "may have; split the prompts over several requests",
                             np, n_choices, np * (size_t)n_choices, REQ_MAX_CHOICES);
    if (!(req->prompts = calloc(np, sizeof *req->prompts))) return err_set(e, ERR_NOMEM, "out of memory");
    req->n_prompts = (int)np;
    for (size_t i = 0; i < np; i++) {
        struct embd_input *in = &req->prompts[i];
        if (read_one(json_array_get(p, i), i, &in->text, &in->tokens, &in->n_tokens, e) < 0)
            return -1;
    }
    return 0;
}

int api_parse_completions(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    static const struct {
        const char *key, *why;
    } rejects[] = {
        {"suffix", "insertion (suffix) is not supported"},
    };
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++)
        if (api_jv_reject(root, rejects[i].key, ERR_INVALID, rejects[i].why, e) < 0) return -1;
    req->raw = true;
    req->reasoning = false; /* no template, so no think block to prime */
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return err_set_param(e, ERR_INVALID, "prompt", "'prompt' is required");
    long long n = 1, mt = 16, lp = -1, best = 1; /* OpenAI's default max_tokens is 16 */
    if (api_jv_int(root, "n", "n", 1, REQ_MAX_N, &n, e) < 0) return -1;
    if (api_jv_int(root, "best_of", "best_of", 1, REQ_MAX_N, &best, e) < 0) return -1;
    if (best != 1 && best != n)
        return err_set_param(e, ERR_INVALID, "best_of",
                             "'best_of' (ranking candidates server-side) is not supported; use n");
    req->n = (int)n;
    if (read_prompt(p, req, req->n, e) < 0) return -1;
    if (api_jv_int(root, "max_tokens", "max_tokens", 1, 1 << 30, &mt, e) < 0) return -1;
    if (api_jv_bool(root, "stream", "stream", &req->stream, e) < 0) return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return err_set_param(e, ERR_INVALID, "stream_options", "'stream_options' must be an object");
        if (api_jv_bool(so, "include_usage", "stream_options.include_usage", &req->include_usage, e) < 0)
            return -1;
    }
    int has = api_jv_int(root, "logprobs", "logprobs", 0, REQ_MAX_TOP_LOGPROBS, &lp, e);
    if (has < 0) return -1;
    if (has) {
        req->logprobs = true;
        req->top_logprobs = (int)lp;
    }
    if (api_jv_bool(root, "echo", "echo", &req->echo, e) < 0) return -1;
    if (req->echo && req->logprobs)
        return err_set_param(e, ERR_INVALID, "echo",
                             "'echo' together with 'logprobs' (prompt-token logprobs) is not supported");
    if (api_read_stop(json_object_get(root, "stop"), "stop", req, e) < 0) return -1;
    if (api_read_grammar_ext(ctx, root, req, e) < 0) return -1;
    if (api_read_constraint(ctx, json_object_get(root, "response_format"), "response_format", req, e) < 0)
        return -1;
    req->reasoning = false;
    if (api_read_logit_bias(root, req, e) < 0) return -1;
    return api_finalize(ctx, root, req, mt, e);
}
