/* response_format / text.format / regex / lark -> the request's constraint source (R-GRAM-1).
 * The seam for the grammar engine: until a backend reports caps.grammar, any real constraint is a
 * 400 (ERR_UNSUPPORTED) naming the param. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static int set_constraint(const struct api_ctx *ctx, struct request *req, enum constraint_kind k,
                          char *src, const char *param, struct err *e)
{
    if (!ctx->backend->caps.grammar) {
        free(src);
        return err_set_param(e, ERR_UNSUPPORTED, param,
                             "'%s' needs grammar-constrained decoding, which this build does not "
                             "have yet",
                             param);
    }
    if (req->constraint != CONSTRAINT_NONE) {
        free(src);
        return err_set_param(e, ERR_INVALID, param,
                             "only one of response_format, json_schema, regex and lark "
                             "may be given");
    }
    if (!src) return err_set(e, ERR_NOMEM, "out of memory");
    req->constraint = k;
    req->constraint_src = src;
    snprintf(req->constraint_param, sizeof req->constraint_param, "%s", param);
    req->reasoning = false; /* R-THINK-1: a constraint governs the reply from token 0 */
    return 0;
}

/* fmt: {type:text} | {type:json_object} | {type:json_schema, json_schema:{schema,…}} (chat) or the
 * flat responses shape {type:json_schema, schema,…}. */
int api_read_constraint(const struct api_ctx *ctx, json_t *fmt, const char *param, struct request *req,
                    struct err *e)
{
    if (fmt && !json_is_null(fmt)) {
        json_t *type = json_is_object(fmt) ? json_object_get(fmt, "type") : NULL;
        if (!json_is_string(type))
            return err_set_param(e, ERR_INVALID, param, "'%s.type' must be a string", param);
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) {
            /* plain text: nothing to constrain */
        } else if (!strcmp(t, "json_object")) {
            /* llama.cpp: {"type":"json_object","schema":{…}} constrains to that schema */
            json_t *schema = json_object_get(fmt, "schema");
            if (schema && !json_is_null(schema) && !json_is_object(schema) &&
                !json_is_boolean(schema))
                return err_set_param(e, ERR_INVALID, param, "'%s.schema' must be a JSON Schema "
                                     "object", param);
            bool with = schema && !json_is_null(schema);
            if (set_constraint(ctx, req, with ? CONSTRAINT_JSON_SCHEMA : CONSTRAINT_JSON_OBJECT,
                               with ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY)
                                    : strdup("{\"type\":\"object\"}"),
                               param, e) < 0)
                return -1;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = json_object_get(fmt, "json_schema");
            json_t *schema = json_object_get(json_is_object(js) ? js : fmt, "schema");
            if (!json_is_object(schema) && !json_is_boolean(schema))
                return err_set_param(e, ERR_INVALID, param,
                                     "'%s' json_schema needs a 'schema' object", param);
            char sp[96];
            snprintf(sp, sizeof sp, "%s%s.schema", param, json_is_object(js) ? ".json_schema" : "");
            if (api_check_schema(schema, sp, e) < 0) return -1;
            /* ENCODE_ANY: a boolean schema (true = any JSON value) is not a container */
            if (set_constraint(ctx, req, CONSTRAINT_JSON_SCHEMA,
                               json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY), param, e) < 0)
                return -1;
        } else {
            return err_set_param(e, ERR_INVALID, param,
                                 "'%s.type' must be text, json_object or json_schema", param);
        }
    }
    return 0;
}

/* regex / lark extensions and llama.cpp's own constraint fields: top-level json_schema (a schema
 * object) and grammar (GBNF). */
int api_read_grammar_ext(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    json_t *js = json_object_get(root, "json_schema");
    if (js && !json_is_null(js)) {
        if (!json_is_object(js) && !json_is_boolean(js))
            return err_set_param(e, ERR_INVALID, "json_schema",
                                 "'json_schema' must be a JSON Schema object");
        if (set_constraint(ctx, req, CONSTRAINT_JSON_SCHEMA,
                           json_dumps(js, JSON_COMPACT | JSON_ENCODE_ANY), "json_schema", e) < 0)
            return -1;
    }
    json_t *g = json_object_get(root, "grammar");
    if (g && !json_is_null(g)) {
        if (!json_is_string(g))
            return err_set_param(e, ERR_INVALID, "grammar", "'grammar' must be a GBNF string");
        if (!ctx->backend->caps.gbnf)
            return err_set_param(e, ERR_UNSUPPORTED, "grammar",
                                 "'grammar' (GBNF) is not supported by this build yet; use 'lark', "
                                 "'regex' or 'json_schema'");
        if (set_constraint(ctx, req, CONSTRAINT_GBNF, strdup(json_string_value(g)), "grammar", e) < 0)
            return -1;
    }
    static const struct {
        const char *key;
        enum constraint_kind k;
    } ext[] = {{"regex", CONSTRAINT_REGEX}, {"lark", CONSTRAINT_LARK}};
    for (size_t i = 0; i < 2; i++) {
        json_t *v = json_object_get(root, ext[i].key);
        if (!v || json_is_null(v)) continue;
        if (!json_is_string(v))
            return err_set_param(e, ERR_INVALID, ext[i].key, "'%s' must be a string", ext[i].key);
        if (set_constraint(ctx, req, ext[i].k, strdup(json_string_value(v)), ext[i].key, e) < 0)
            return -1;
    }
    return 0;
}
