/* tool_choice — each dialect's forced-call wire shapes (R-TOOL-3): which tool_choice values force
 * a call, and which declared tools are candidates with which schema. The grammar itself is the
 * family's (serve/forced.h, engine/text/family.h); only the JSON shapes live here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "serve/forced.h"

/* Name, schema (enforced or NULL) and whether tools[i] is a candidate function tool. */
static bool tool_of(enum dialect d, const json_t *t, struct forced_tool *out)
{
    if (!json_is_object(t)) return false;
    const json_t *type = json_object_get(t, "type");
    const char *ty = json_is_string(type) ? json_string_value(type) : NULL;
    const json_t *name = NULL, *schema = NULL;
    bool strict = false;
    switch (d) {
    case DIALECT_CHAT: {
        if (!ty || strcmp(ty, "function")) return false;
        const json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) return false;
        name = json_object_get(fn, "name");
        schema = json_object_get(fn, "parameters");
        strict = json_is_true(json_object_get(fn, "strict"));
        break;
    }
    case DIALECT_RESPONSES:
        if (!ty || strcmp(ty, "function")) return false;
        name = json_object_get(t, "name");
        schema = json_object_get(t, "parameters");
        strict = json_is_true(json_object_get(t, "strict"));
        break;
    case DIALECT_MESSAGES:
        if (ty && strcmp(ty, "custom")) return false; /* server tools */
        name = json_object_get(t, "name");
        schema = json_object_get(t, "input_schema");
        strict = true; /* R-TOOL-3: Anthropic input_schema is always enforced */
        break;
    default:
        return false;
    }
    if (!json_is_string(name)) return false;
    out->name = json_string_value(name);
    out->schema = strict && schema && !json_is_null(schema) ? schema : NULL;
    return true;
}

/* The candidates among the dialect's raw `tools` array: every function tool, or (name) the one
 * so named; then forced_apply. */
static int apply(const struct backend *b, struct request *req, enum dialect d, const json_t *tools,
                 const char *name, struct err *e)
{
    size_t nt = json_is_array(tools) ? json_array_size(tools) : 0;
    if (nt > FORCED_MAX_TOOLS)
        return err_set_param(e, ERR_INVALID, "tool_choice", "at most %d tools can be forced",
                             FORCED_MAX_TOOLS);
    struct forced_tool *cand = NULL;
    int n = 0;
    if (nt && !(cand = calloc(nt, sizeof *cand))) return err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nt; i++) {
        struct forced_tool ft;
        if (!tool_of(d, json_array_get(tools, i), &ft)) continue;
        if (name && strcmp(ft.name, name)) continue;
        cand[n++] = ft;
        if (name) break;
    }
    int rc;
    if (n == 0 && name)
        rc = err_set_param(e, ERR_INVALID, "tool_choice",
                           "tool_choice names '%s', which is not among the declared tools", name);
    else if (n == 0)
        rc = err_set_param(e, ERR_INVALID, "tool_choice",
                           "tool_choice forces a call, but no function tool is declared");
    else
        rc = forced_apply(req, b->family, b->tool_specials, cand, n, e);
    free(cand);
    return rc;
}

int api_read_tool_choice(const struct api_ctx *ctx, enum dialect d, const json_t *root,
                         struct request *req, struct err *e)
{
    const struct backend *b = ctx->backend;
    const json_t *choice = json_object_get(root, "tool_choice");
    const json_t *type = json_is_object(choice) ? json_object_get(choice, "type") : NULL;
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    bool forced = false;
    const json_t *jn = NULL;
    if (d == DIALECT_MESSAGES) {
        if (!strcmp(ty, "any"))
            forced = true;
        else if (!strcmp(ty, "tool")) {
            forced = true;
            if (!json_is_string(jn = json_object_get(choice, "name")))
                return err_set_param(e, ERR_INVALID, "tool_choice",
                                     "tool_choice of type 'tool' needs a 'name'");
        }
    } else if (json_is_string(choice)) {
        forced = !strcmp(json_string_value(choice), "required");
    } else if (json_is_object(choice)) {
        if (!strcmp(ty, "function")) {
            const json_t *fn = json_object_get(choice, "function");
            jn = d == DIALECT_CHAT && json_is_object(fn) ? json_object_get(fn, "name")
                                                         : json_object_get(choice, "name");
            if (!json_is_string(jn))
                return err_set_param(e, ERR_INVALID, "tool_choice",
                                     "a function tool_choice needs the function's name");
            forced = true;
        } else if (!strcmp(ty, "allowed_tools")) {
            return err_set_param(e, ERR_INVALID, "tool_choice",
                                 "tool_choice 'allowed_tools' is not supported; use 'required' "
                                 "or a named function");
        } else {
            return err_set_param(e, ERR_INVALID, "tool_choice",
                                 "tool_choice type '%s' is not supported", ty);
        }
    }
    if (!forced) return 0;
    if (!b->caps.grammar)
        return err_set_param(e, ERR_UNSUPPORTED, "tool_choice",
                             "forced tool calls need grammar-constrained decoding, which this "
                             "backend does not have");
    if (!b->caps.tools)
        return err_set_param(e, ERR_INVALID, "tool_choice",
                             "this model has no tool-calling convention");
    return apply(b, req, d, json_object_get(root, "tools"), jn ? json_string_value(jn) : NULL, e);
}
