/* OpenAI Embeddings request -> struct request: input a string, an array of strings, an array of
 * token ids, or an array of token-id arrays (at most API_MAX_EMBD_INPUTS); encoding_format float
 * (default) or base64; `dimensions` is a 400 (the vectors are the model's hidden size, no
 * truncation); `user` is ignored. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

#define API_MAX_EMBD_INPUTS 2048 /* OpenAI's limit */

static int oom(struct err *e) { return err_set(e, ERR_NOMEM, "out of memory"); }

static int add_text(struct request *req, json_t *s, struct err *e)
{
    struct embd_input *in = &req->inputs[req->n_inputs++];
    return (in->text = strndup(json_string_value(s), json_string_length(s))) ? 0 : oom(e);
}

static int add_ids(struct request *req, json_t *a, const char *p, struct err *e)
{
    struct embd_input *in = &req->inputs[req->n_inputs++];
    size_t n = json_array_size(a);
    if (n == 0) return err_set_param(e, ERR_INVALID, "input", "'%s' is empty", p);
    if (!(in->tokens = malloc(n * sizeof *in->tokens))) return oom(e);
    size_t i;
    json_t *t;
    json_array_foreach(a, i, t) {
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX)
            return err_set_param(e, ERR_INVALID, "input", "'%s[%zu]' must be a token id", p, i);
        in->tokens[in->n_tokens++] = (int32_t)json_integer_value(t);
    }
    return 0;
}

int api_parse_embeddings(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    if (api_jv_reject(root, "dimensions", ERR_INVALID,
                      "the embeddings are the model's hidden size; truncation is not supported",
                      e) < 0)
        return -1;
    const char *fmt = NULL;
    if (api_jv_str(root, "encoding_format", "encoding_format", &fmt, e) < 0) return -1;
    if (fmt && strcmp(fmt, "float") && strcmp(fmt, "base64"))
        return err_set_param(e, ERR_INVALID, "encoding_format",
                             "'encoding_format' must be float or base64, got '%s'", fmt);
    req->embd_base64 = fmt && !strcmp(fmt, "base64");
    json_t *in = json_object_get(root, "input");
    size_t n = json_is_array(in) ? json_array_size(in) : 1;
    bool ids = json_is_array(in) && n > 0 && json_is_integer(json_array_get(in, 0));
    if (!in || json_is_null(in) || (!json_is_string(in) && !json_is_array(in)) ||
        (json_is_array(in) && n == 0))
        return err_set_param(e, ERR_INVALID, "input",
                             "'input' must be a string, an array of strings, an array of token ids "
                             "or an array of token-id arrays");
    if (ids) n = 1;
    if (n > API_MAX_EMBD_INPUTS)
        return err_set_param(e, ERR_INVALID, "input", "'input' takes at most %d items",
                             API_MAX_EMBD_INPUTS);
    if (!(req->inputs = calloc(n, sizeof *req->inputs))) return oom(e);
    if (json_is_string(in)) {
        if (add_text(req, in, e) < 0) return -1;
    } else if (ids) {
        if (add_ids(req, in, "input", e) < 0) return -1;
    } else {
        size_t i;
        json_t *v;
        json_array_foreach(in, i, v) {
            char p[32];
            snprintf(p, sizeof p, "input[%zu]", i);
            if (json_is_string(v)) {
                if (add_text(req, v, e) < 0) return -1;
            } else if (json_is_array(v)) {
                if (add_ids(req, v, p, e) < 0) return -1;
            } else {
                return err_set_param(e, ERR_INVALID, "input",
                                     "'%s' must be a string or an array of token ids", p);
            }
        }
    }
    req->raw = true;
    req->max_tokens = 1;
    req->model = strdup(ctx->backend->model_id);
    req->created = 0;
    if (!req->model) return oom(e);
    return 0;
}
