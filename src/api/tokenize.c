/* POST /tokenize and POST /detokenize in llama-server's shapes (no chat template involved):
 *   /tokenize   {"content": str, "add_special": false, "parse_special": true, "with_pieces": false}
 *               -> {"tokens": [id, …]} or, with_pieces, {"tokens": [{"id": id, "piece": str}]}
 *                  (a piece that is not valid UTF-8 on its own is its byte values instead)
 *   /detokenize {"tokens": [id, …]} -> {"content": str} (bytes joined; invalid UTF-8 -> U+FFFD) */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static json_t *parse_body(const char *body, size_t len, struct err *e)
{
    if (api_check_depth(body, len, API_MAX_JSON_DEPTH, e) < 0) return NULL;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root) {
        err_set(e, ERR_INVALID, "invalid JSON body: %s (line %d, column %d)", je.text, je.line,
                je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        err_set(e, ERR_INVALID, "the request body must be a JSON object");
        return NULL;
    }
    return root;
}

static json_t *piece_json(struct backend *b, int32_t id)
{
    size_t n = 0;
    const char *s = b->ops->token_bytes(b, id, &n);
    json_t *j = json_stringn(s ? s : "", s ? n : 0);
    if (j) return j;
    j = json_array(); /* a piece that splits a UTF-8 sequence: its bytes */
    for (size_t i = 0; j && i < n; i++) json_array_append_new(j, json_integer((unsigned char)s[i]));
    return j;
}

int api_tokenize(struct backend *b, const char *body, size_t len, struct buf *out, struct err *e)
{
    json_t *root = parse_body(body, len, e);
    if (!root) return -1;
    int rc = -1;
    int32_t *toks = NULL;
    size_t n = 0, cap = 0;
    json_t *res = NULL;
    const char *content = NULL;
    bool add_special = false, parse_special = true, with_pieces = false;
    if (api_jv_str(root, "content", "content", &content, e) < 0 ||
        api_jv_bool(root, "add_special", "add_special", &add_special, e) < 0 ||
        api_jv_bool(root, "parse_special", "parse_special", &parse_special, e) < 0 ||
        api_jv_bool(root, "with_pieces", "with_pieces", &with_pieces, e) < 0)
        goto done;
    if (!content) {
        err_set_param(e, ERR_INVALID, "content", "'content' (a string) is required");
        goto done;
    }
    size_t cl = json_string_length(json_object_get(root, "content"));
    if (b->ops->tokenize(b, content, cl, add_special, parse_special, &toks, &n, &cap, e) < 0) {
        if (!e->param[0]) snprintf(e->param, sizeof e->param, "content");
        goto done;
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++)
        json_array_append_new(arr, with_pieces ? json_pack("{s:i, s:o}", "id", (int)toks[i],
                                                           "piece", piece_json(b, toks[i]))
                                               : json_integer(toks[i]));
    if (!(res = json_pack("{s:o}", "tokens", arr))) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto done;
    }
    api_json_append(out, res);
    rc = 0;
done:
    free(toks);
    json_decref(root);
    return rc;
}

int api_detokenize(struct backend *b, const char *body, size_t len, struct buf *out,
                   struct err *e)
{
    json_t *root = parse_body(body, len, e);
    if (!root) return -1;
    int rc = -1;
    struct buf text = {0};
    json_t *toks = json_object_get(root, "tokens");
    if (!json_is_array(toks)) {
        err_set_param(e, ERR_INVALID, "tokens", "'tokens' must be an array of token ids");
        goto done;
    }
    size_t i;
    json_t *t;
    json_array_foreach(toks, i, t)
    {
        size_t n = 0;
        const char *s = json_is_integer(t) && json_integer_value(t) <= INT32_MAX
                            ? b->ops->token_bytes(b, (int32_t)json_integer_value(t), &n)
                            : NULL;
        if (!s) {
            err_set_param(e, ERR_INVALID, "tokens", "'tokens[%zu]' is not a token id (0..%d)", i,
                          (int)b->n_vocab - 1);
            goto done;
        }
        if (buf_append(&text, s, n) < 0) {
            err_set(e, ERR_NOMEM, "out of memory");
            goto done;
        }
    }
    api_json_append(out, json_pack("{s:o}", "content",
                                   api_json_text(text.data ? text.data : "", text.len)));
    rc = 0;
done:
    buf_free(&text);
    json_decref(root);
    return rc;
}
