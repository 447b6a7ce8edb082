/* api common: field readers, defaults, error bodies, dispatch. */
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api_internal.h"

static const char *type_name(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        return "object";
    case JSON_ARRAY:
        return "array";
    case JSON_STRING:
        return "string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "boolean";
    default:
        return "null";
    }
}

int api_jv_num(json_t *o, const char *key, const char *param, double lo, double hi, double *out,
           struct err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v))
        return err_set_param(e, ERR_INVALID, param, "'%s' must be a number, got %s", param,
                             type_name(v));
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi))
        return err_set_param(e, ERR_INVALID, param, "'%s' must be in [%g, %g], got %g", param, lo,
                             hi, x);
    *out = x;
    return 1;
}

int api_jv_int(json_t *o, const char *key, const char *param, long long lo, long long hi,
           long long *out, struct err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && json_real_value(v) == (double)(long long)json_real_value(v) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return err_set_param(e, ERR_INVALID, param, "'%s' must be an integer, got %s", param,
                             type_name(v));
    }
    if (x < lo || x > hi)
        return err_set_param(e, ERR_INVALID, param, "'%s' must be in [%lld, %lld], got %lld", param,
                             lo, hi, x);
    *out = x;
    return 1;
}

int api_jv_bool(json_t *o, const char *key, const char *param, bool *out, struct err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return err_set_param(e, ERR_INVALID, param, "'%s' must be a boolean, got %s", param,
                             type_name(v));
    *out = json_is_true(v);
    return 1;
}

int api_jv_str(json_t *o, const char *key, const char *param, const char **out, struct err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v))
        return err_set_param(e, ERR_INVALID, param, "'%s' must be a string, got %s", param,
                             type_name(v));
    *out = json_string_value(v);
    return 1;
}

int api_jv_reject(json_t *o, const char *key, enum err_code code, const char *why, struct err *e)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if ((json_is_object(v) && json_object_size(v) == 0) ||
        (json_is_array(v) && json_array_size(v) == 0))
        return 0;
    return err_set_param(e, code, key, "'%s' is not supported: %s", key, why);
}

char *api_make_id(const char *prefix)
{
    static atomic_uint_fast64_t counter;
    static const char hex[] = "0123456789abcdef";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
                 (atomic_fetch_add(&counter, 1) + 1) * 0xBF58476D1CE4E5B9ull;
    char body[25];
    for (int i = 0; i < 24; i++) {
        x ^= x >> 31;
        x *= 0x94D049BB133111EBull;
        body[i] = hex[(x >> 59) & 15];
    }
    body[24] = 0;
    size_t n = strlen(prefix) + 25;
    char *id = malloc(n);
    if (id) snprintf(id, n, "%s%s", prefix, body);
    return id;
}

/* The sampling fields every dialect reads, in one table: each is read once, at finalize time,
 * straight into req->sp or the default (which depends on reasoning, known only once the whole
 * body is read). */
#define D_CHAT (1u << DIALECT_CHAT)
#define D_RESP (1u << DIALECT_RESPONSES)
#define D_MSG (1u << DIALECT_MESSAGES)
#define D_CMPL (1u << DIALECT_COMPLETIONS)
#define D_OAI (D_CHAT | D_RESP | D_CMPL)
static const struct samp_field {
    const char *key;
    unsigned dialects;
    bool integer;
    double lo, hi, hi_messages; /* Anthropic's temperature range is 0..1 */
    size_t off;                 /* the float / int field of struct sampler_params */
} SAMP_FIELDS[] = {
    {"temperature", D_OAI | D_MSG, false, 0, 2, 1, offsetof(struct sampler_params, temperature)},
    {"top_p", D_OAI | D_MSG, false, 0, 1, 1, offsetof(struct sampler_params, top_p)},
    {"top_k", D_OAI | D_MSG, true, 0, 1000000, 1000000, offsetof(struct sampler_params, top_k)},
    {"min_p", D_OAI, false, 0, 1, 1, offsetof(struct sampler_params, min_p)},
    {"repeat_penalty", D_OAI, false, 0.01, 10, 10, offsetof(struct sampler_params, repeat_penalty)},
    {"presence_penalty", D_OAI, false, -2, 2, 2,
     offsetof(struct sampler_params, presence_penalty)},
    {"frequency_penalty", D_OAI, false, -2, 2, 2,
     offsetof(struct sampler_params, frequency_penalty)},
};

static int read_sampling(json_t *root, struct request *req, const struct sampler_params *d,
                         struct err *e)
{
    req->sp = *d;
    unsigned me = 1u << req->dialect;
    for (size_t i = 0; i < sizeof SAMP_FIELDS / sizeof SAMP_FIELDS[0]; i++) {
        const struct samp_field *f = &SAMP_FIELDS[i];
        if (!(f->dialects & me)) continue;
        double hi = req->dialect == DIALECT_MESSAGES ? f->hi_messages : f->hi;
        char *field = (char *)&req->sp + f->off;
        if (f->integer) {
            long long v;
            int r = api_jv_int(root, f->key, f->key, (long long)f->lo, (long long)hi, &v, e);
            if (r < 0) return -1;
            if (r) *(int *)field = (int)v;
        } else {
            double v;
            int r = api_jv_num(root, f->key, f->key, f->lo, hi, &v, e);
            if (r < 0) return -1;
            if (r) *(float *)field = (float)v;
        }
    }
    if (req->sp.top_p < 1e-6f) req->sp.top_p = 1e-6f; /* top_p 0 = only the most likely token */
    if (req->sp.repeat_last_n <= 0) req->sp.repeat_last_n = 64;
    long long seed = 0;
    int r = req->dialect == DIALECT_MESSAGES
                ? 0
                : api_jv_int(root, "seed", "seed", -(1LL << 62), (1LL << 62), &seed, e);
    if (r < 0) return -1;
    req->seed_given = r == 1;
    if (req->seed_given) {
        req->sp.seed = (uint64_t)seed;
    } else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        req->sp.seed = (uint64_t)ts.tv_nsec * 6364136223846793005ull + (uint64_t)ts.tv_sec;
    }
    return 0;
}

int api_finalize(const struct api_ctx *ctx, json_t *root, struct request *req,
                 long long max_tokens, struct err *e)
{
    const struct backend *b = ctx->backend;
    if (read_sampling(root, req, req->reasoning ? &b->defaults_think : &b->defaults, e) < 0)
        return -1;
    req->sp.n_top_logprobs = req->logprobs ? req->top_logprobs : 0;
    int cap = b->max_tokens_cap > 0 ? b->max_tokens_cap : 1024;
    req->max_tokens = max_tokens > 0 && max_tokens < cap ? (int)max_tokens : cap;
    req->model = strdup(b->model_id);
    static const char *const id_prefix[DIALECT_COUNT] = {
        [DIALECT_CHAT] = "chatcmpl-", [DIALECT_RESPONSES] = "resp_", [DIALECT_MESSAGES] = "msg_",
        [DIALECT_COMPLETIONS] = "cmpl-", [DIALECT_EMBEDDINGS] = "embd-"};
    req->id = api_make_id(id_prefix[req->dialect]);
    req->created = (int64_t)time(NULL);
    if (!req->model || !req->id) return err_set(e, ERR_NOMEM, "out of memory");
    if (req->raw) return 0; /* completions: a prompt, no conversation */
    if (req->n_msgs == 0)
        return err_set_param(e, ERR_INVALID, "messages", "the conversation is empty");
    /* A final assistant message is a prefill: the reply continues it (docs/server.md). */
    req->prefill = req->msgs[req->n_msgs - 1].role == CHAT_ASSISTANT;
    if (!b->caps.stop && req->n_stop > 0)
        return err_set_param(e, ERR_INVALID, "stop", "this model does not support stop sequences");
    if (!b->caps.system_role)
        for (int i = 0; i < req->n_msgs; i++)
            if (req->msgs[i].role == CHAT_SYSTEM)
                return err_set_param(e, ERR_INVALID, "messages",
                                     "this model does not support a system role");
    return 0;
}

int api_read_stop(json_t *v, const char *param, struct request *req, struct err *e)
{
    if (!v || json_is_null(v)) return 0;
    json_t *one[1];
    json_t **items;
    size_t n;
    if (json_is_string(v)) {
        one[0] = v;
        items = one;
        n = 1;
    } else if (json_is_array(v)) {
        n = json_array_size(v);
        if (n > REQ_MAX_STOP)
            return err_set_param(e, ERR_INVALID, param, "'%s' takes at most %d sequences, got %zu",
                                 param, REQ_MAX_STOP, n);
        items = NULL;
    } else {
        return err_set_param(e, ERR_INVALID, param, "'%s' must be a string or an array of strings",
                             param);
    }
    for (size_t i = 0; i < n; i++) {
        json_t *s = items ? items[i] : json_array_get(v, i);
        if (!json_is_string(s))
            return err_set_param(e, ERR_INVALID, param, "'%s[%zu]' must be a string", param, i);
        size_t len = json_string_length(s);
        if (len == 0 || len > 1024)
            return err_set_param(e, ERR_INVALID, param,
                                 "'%s[%zu]' must be a non-empty string of at most 1024 bytes",
                                 param, i);
        if (memchr(json_string_value(s), 0, len))
            return err_set_param(e, ERR_INVALID, param, "'%s[%zu]' contains a NUL byte", param, i);
        char *c = strdup(json_string_value(s));
        if (!c) return err_set(e, ERR_NOMEM, "out of memory");
        req->stop[req->n_stop++] = c;
    }
    return 0;
}

int api_read_effort(const struct api_ctx *ctx, const char *effort, const char *param, bool require_caps,
                struct request *req, struct err *e)
{
    static const char *const off[] = {"none", "minimal"};
    static const char *const on[] = {"low", "medium", "high", "xhigh"};
    for (size_t i = 0; i < 2; i++)
        if (!strcmp(effort, off[i])) {
            req->reasoning = false;
            return 0;
        }
    for (size_t i = 0; i < 4; i++)
        if (!strcmp(effort, on[i])) {
            if (!ctx->backend->caps.think) {
                if (require_caps)
                    return err_set_param(e, ERR_INVALID, param,
                                         "'%s' = '%s': this model cannot reason (use none or "
                                         "minimal)",
                                         param, effort);
                req->reasoning = false;
                return 0;
            }
            req->reasoning = true;
            return 0;
        }
    return err_set_param(e, ERR_INVALID, param,
                         "'%s' must be one of none, minimal, low, medium, high; got '%s'", param,
                         effort);
}

char *api_content_text(json_t *content, const char *param, const char *const *ok_types, struct err *e)
{
    if (!content || json_is_null(content) || json_is_string(content)) {
        char *r = strdup(json_is_string(content) ? json_string_value(content) : "");
        if (!r) err_set(e, ERR_NOMEM, "out of memory");
        return r;
    }
    if (!json_is_array(content)) {
        err_set_param(e, ERR_INVALID, param, "'%s' must be a string or an array of content parts",
                      param);
        return NULL;
    }
    struct buf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part)
    {
        char p[160];
        snprintf(p, sizeof p, "%s[%zu].type", param, i);
        json_t *tv = json_is_object(part) ? json_object_get(part, "type") : NULL;
        if (!json_is_string(tv)) {
            err_set_param(e, ERR_INVALID, p,
                          "'%s[%zu]' must be a content part object with a string 'type'", param, i);
            goto fail;
        }
        const char *type = json_string_value(tv);
        bool ok = false;
        for (const char *const *t = ok_types; *t; t++)
            if (!strcmp(type, *t)) ok = true;
        if (!ok) {
            bool media = strstr(type, "image") || strstr(type, "audio") || strstr(type, "file") ||
                         strstr(type, "document");
            err_set_param(e, media ? ERR_UNSUPPORTED : ERR_INVALID, p,
                          "content part type '%s' is not supported by this server (text only)",
                          type);
            goto fail;
        }
        snprintf(p, sizeof p, "%s[%zu].text", param, i);
        json_t *xv = json_object_get(part, "text");
        if (!json_is_string(xv)) {
            err_set_param(e, ERR_INVALID, p, "'%s' must be a string", p);
            goto fail;
        }
        const char *text = json_string_value(xv);
        if (b.len && buf_puts(&b, "\n") < 0) goto oom;
        if (buf_puts(&b, text) < 0) goto oom;
    }
    if (!b.data && buf_puts(&b, "") < 0) goto oom;
    return buf_steal(&b);
oom:
    err_set(e, ERR_NOMEM, "out of memory");
fail:
    buf_free(&b);
    return NULL;
}

int api_tools_add(struct request *req, json_t *tool)
{
    if (!req->tools) {
        req->tools = json_array();
        if (!req->tools) {
            json_decref(tool); /* owned, like json_array_append_new's */
            return -1;
        }
    }
    return json_array_append_new(req->tools, tool);
}

int api_check_schema(const json_t *schema, const char *param, struct err *e)
{
    if (!json_is_object(schema) && !json_is_boolean(schema))
        return err_set_param(e, ERR_INVALID, param, "'%s' must be a JSON Schema (an object or a boolean)",
                             param);
    if (json_is_false(schema))
        return err_set_param(e, ERR_INVALID, param,
                             "'%s' is the schema false, which no JSON value satisfies", param);
    return 0;
}

int api_tools_add_flat(struct request *req, json_t *t, const char *schema_key)
{
    json_t *fn = json_object();
    json_object_set(fn, "name", json_object_get(t, "name"));
    json_t *d = json_object_get(t, "description");
    if (json_is_string(d)) json_object_set(fn, "description", d);
    json_t *schema = json_object_get(t, schema_key);
    if (schema && !json_is_null(schema)) json_object_set(fn, "parameters", schema);
    json_t *tool = json_pack("{s:s, s:o}", "type", "function", "function", fn);
    if (!tool || api_tools_add(req, tool) < 0) return -1;
    return 0;
}

int api_read_logit_bias(json_t *root, struct request *req, struct err *e)
{
    json_t *lb = json_object_get(root, "logit_bias");
    if (!lb || json_is_null(lb)) return 0;
    if (!json_is_object(lb))
        return err_set_param(e, ERR_INVALID, "logit_bias",
                             "'logit_bias' must be an object mapping token ids to biases");
    size_t n = json_object_size(lb);
    if (n == 0) return 0;
    if (n > REQ_MAX_LOGIT_BIAS)
        return err_set_param(e, ERR_INVALID, "logit_bias", "'logit_bias' takes at most %d entries",
                             REQ_MAX_LOGIT_BIAS);
    if (!(req->bias = calloc(n, sizeof *req->bias))) return err_set(e, ERR_NOMEM, "out of memory");
    const char *k;
    json_t *v;
    json_object_foreach(lb, k, v)
    {
        char *end;
        long id = strtol(k, &end, 10);
        if (!k[0] || *end || id < 0 || id > INT32_MAX)
            return err_set_param(e, ERR_INVALID, "logit_bias",
                                 "'logit_bias' keys must be token ids (non-negative integers), got "
                                 "'%.40s'",
                                 k);
        if (!json_is_number(v) || !(json_number_value(v) >= -100 && json_number_value(v) <= 100))
            return err_set_param(e, ERR_INVALID, "logit_bias",
                                 "'logit_bias[%s]' must be a number in [-100, 100]", k);
        req->bias[req->n_bias++] = (struct logit_bias){(int32_t)id, (float)json_number_value(v)};
    }
    return 0;
}

int api_check_depth(const char *s, size_t n, int max_depth, struct err *e)
{
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth)
                return err_set(e, ERR_INVALID, "JSON nesting deeper than %d levels", max_depth);
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return 0;
}

int api_parse(enum dialect d, const struct api_ctx *ctx, const char *body, size_t len,
              struct request *req, struct err *e)
{
    if (api_check_depth(body, len, API_MAX_JSON_DEPTH, e) < 0) return -1;
    json_error_t je;
    json_t *root = json_loadb(body, len, 0, &je);
    if (!root)
        return err_set(e, ERR_INVALID, "invalid JSON body: %s (line %d, column %d)", je.text,
                       je.line, je.column);
    int rc;
    if (!json_is_object(root)) {
        rc = err_set(e, ERR_INVALID, "the request body must be a JSON object");
    } else {
        req->dialect = d;
        req->reasoning = ctx->backend->reasoning_default && ctx->backend->caps.think;
        switch (d) {
        case DIALECT_CHAT:
            rc = api_parse_chat(ctx, root, req, e);
            break;
        case DIALECT_RESPONSES:
            rc = api_parse_responses(ctx, root, req, e);
            break;
        case DIALECT_MESSAGES:
            rc = api_parse_messages(ctx, root, req, e);
            break;
        case DIALECT_COMPLETIONS:
            rc = api_parse_completions(ctx, root, req, e);
            break;
        case DIALECT_EMBEDDINGS:
            rc = api_parse_embeddings(ctx, root, req, e);
            break;
        default:
            rc = err_set(e, ERR_INTERNAL, "unknown dialect");
        }
    }
    json_decref(root);
    return rc;
}

const char *api_error_type(enum dialect d, int status)
{
    if (d == DIALECT_MESSAGES) {
        switch (status) {
        case 400:
            return "invalid_request_error";
        case 401:
            return "authentication_error";
        case 403:
            return "permission_error";
        case 404:
            return "not_found_error";
        case 413:
            return "request_too_large";
        case 429:
            return "rate_limit_error";
        case 503:
        case 529:
            return "overloaded_error";
        default:
            return status < 500 ? "invalid_request_error" : "api_error";
        }
    }
    switch (status) {
    case 401:
        return "authentication_error";
    case 404:
        return "not_found_error";
    case 429:
        return "rate_limit_error";
    default:
        return status < 500 ? "invalid_request_error" : "server_error";
    }
}

static const char *oai_code(const struct err *e)
{
    switch (e->code) {
    case ERR_CONTEXT:
        return "context_length_exceeded";
    case ERR_AUTH:
        return "invalid_api_key";
    case ERR_BUSY:
        return "rate_limit_exceeded";
    case ERR_TOO_LARGE:
        return "request_too_large";
    case ERR_UNSUPPORTED:
        return "unsupported_parameter";
    case ERR_NOT_FOUND:
        return "not_found";
    default:
        return NULL;
    }
}

void api_error_body(enum dialect d, const struct err *e, struct buf *out)
{
    int status = err_http_status(e->code);
    json_t *j;
    const char *msg = e->msg[0] ? e->msg : err_code_name(e->code);
    if (d == DIALECT_MESSAGES) {
        j = json_pack("{s:s, s:{s:s, s:s%}}", "type", "error", "error", "type",
                      api_error_type(d, status), "message", msg, strlen(msg));
    } else {
        const char *code = oai_code(e);
        j = json_pack("{s:{s:s%, s:s, s:o, s:o}}", "error", "message", msg, strlen(msg), "type",
                      api_error_type(d, status), "param",
                      e->param[0] ? json_string(e->param) : json_null(), "code",
                      code ? json_string(code) : json_null());
    }
    if (!j) { /* message not UTF-8 (echoed client text): fall back to a fixed one */
        buf_printf(out, "{\"error\":{\"message\":\"%s\",\"type\":\"%s\"}}", err_code_name(e->code),
                   api_error_type(d, status));
        return;
    }
    api_json_append(out, j);
}

json_t *api_json_text(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n);
    if (j) return j;
    /* Not valid UTF-8: replace each bad byte by U+FFFD. */
    struct buf b = {0};
    size_t i = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        size_t need = c < 0x80 ? 1 : c >= 0xF0 && c < 0xF8 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 ? 2 : 0;
        bool ok = need > 0 && i + need <= n;
        for (size_t k = 1; ok && k < need; k++)
            ok = ((unsigned char)s[i + k] & 0xC0) == 0x80;
        if (ok && need > 1) {
            json_t *t = json_stringn(s + i, need); /* rejects overlongs / surrogates */
            ok = t != NULL;
            json_decref(t);
        }
        if (ok) {
            buf_append(&b, s + i, need);
            i += need;
        } else {
            buf_puts(&b, "\xEF\xBF\xBD");
            i++;
        }
    }
    j = json_stringn(b.data ? b.data : "", b.len);
    buf_free(&b);
    return j;
}


void api_count_tokens_body(size_t n_tokens, struct buf *out)
{
    buf_printf(out, "{\"input_tokens\":%zu}", n_tokens);
}
