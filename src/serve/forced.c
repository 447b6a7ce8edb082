#include "serve/forced.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/jsonschema.h"

#define FORCED_MAX_TOOLS 512

/* Appends s as the inside of a lark string literal ("…"): backslash, quote and control bytes
 * escaped; other bytes (UTF-8 included) verbatim. */
static int lark_lit(struct buf *b, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int rc;
        if (c == '\\' || c == '"')
            rc = buf_printf(b, "\\%c", c);
        else if (c == '\n')
            rc = buf_puts(b, "\\n");
        else if (c == '\r')
            rc = buf_puts(b, "\\r");
        else if (c == '\t')
            rc = buf_puts(b, "\\t");
        else if (c < 0x20)
            rc = buf_printf(b, "\\x%02x", c);
        else
            rc = buf_append(b, s + i, 1);
        if (rc < 0) return -1;
    }
    return 0;
}

char *forced_lark(const struct forced_tool *tools, int n, struct err *e)
{
    if (n < 1) {
        err_set(e, ERR_INVALID, "a forced tool call needs at least one tool");
        return NULL;
    }
    struct buf b = {0};
    bool oom = buf_puts(&b, "start: ") < 0;
    for (int i = 0; i < n && !oom; i++)
        oom = buf_printf(&b, "%scall_%d", i ? " | " : "", i) < 0;
    oom = oom || buf_puts(&b, "\n") < 0;
    for (int i = 0; i < n && !oom; i++) {
        const char *name = tools[i].name ? tools[i].name : "";
        if (!name[0]) {
            buf_free(&b);
            err_set(e, ERR_INVALID, "a forced tool needs a non-empty name");
            return NULL;
        }
        /* the name as the template's tojson writes it: a JSON string, non-ASCII raw */
        json_t *js = json_string(name);
        char *jname = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (!jname) {
            buf_free(&b);
            err_set(e, js ? ERR_NOMEM : ERR_INVALID, "tool name is not valid UTF-8");
            return NULL;
        }
        /* permissive unless enforced; a schema that is not an object/boolean is the client's bug */
        const json_t *sc = tools[i].schema;
        if (sc && !json_is_object(sc) && !json_is_boolean(sc)) {
            free(jname);
            buf_free(&b);
            err_set(e, ERR_INVALID, "the schema of tool '%s' must be an object", name);
            return NULL;
        }
        /* arguments are always an object: a true (any value) schema means any object */
        char *schema = sc && !json_is_true(sc) ? json_dumps(sc, JSON_COMPACT | JSON_ENCODE_ANY)
                                               : strdup("{\"type\":\"object\"}");
        /* the schema must compile (limits and keywords: docs/jsonschema.md): checked here, so a
         * bad one is a 400 at parse time, before the prompt is rendered or the worker is taken */
        if (schema && sc && !json_is_true(sc)) {
            struct buf chk = {0};
            int bad = jsonschema_to_lark(schema, strlen(schema), "chk_", &chk, e);
            buf_free(&chk);
            if (bad) {
                free(schema);
                free(jname);
                buf_free(&b);
                err_wrap(e, "the schema of tool '%s'", name);
                return NULL;
            }
        }
        oom = !schema || buf_printf(&b, "call_%d: <tool_call> \"\\n{\\\"name\\\": ", i) < 0 ||
              lark_lit(&b, jname, strlen(jname)) < 0 ||
              buf_printf(&b, ", \\\"arguments\\\": \" args_%d \"}\\n\" </tool_call>\n", i) < 0 ||
              buf_printf(&b, "args_%d: %%json%s\n", i, schema) < 0;
        free(schema);
        free(jname);
    }
    if (oom) {
        buf_free(&b);
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    return buf_steal(&b);
}

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

int forced_apply(struct request *req, enum dialect d, const json_t *tools, const char *name,
                 struct err *e)
{
    if (req->constraint != CONSTRAINT_NONE)
        return err_set_param(e, ERR_INVALID, "tool_choice",
                             "a forced tool_choice cannot be combined with '%s' (both constrain "
                             "the whole reply)",
                             req->constraint_param);
    struct forced_tool *cand = NULL;
    int n = 0;
    size_t nt = json_is_array(tools) ? json_array_size(tools) : 0;
    if (nt > FORCED_MAX_TOOLS)
        return err_set_param(e, ERR_INVALID, "tool_choice", "at most %d tools can be forced",
                             FORCED_MAX_TOOLS);
    if (nt && !(cand = calloc(nt, sizeof *cand))) return err_set(e, ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nt; i++) {
        struct forced_tool ft;
        if (!tool_of(d, json_array_get(tools, i), &ft)) continue;
        if (name && strcmp(ft.name, name)) continue;
        cand[n++] = ft;
        if (name) break;
    }
    if (n == 0) {
        free(cand);
        if (name)
            return err_set_param(e, ERR_INVALID, "tool_choice",
                                 "tool_choice names '%s', which is not among the declared tools",
                                 name);
        return err_set_param(e, ERR_INVALID, "tool_choice",
                             "tool_choice forces a call, but no function tool is declared");
    }
    char *src = forced_lark(cand, n, e);
    free(cand);
    if (!src) {
        snprintf(e->param, sizeof e->param, "tool_choice");
        return -1;
    }
    req->constraint = CONSTRAINT_LARK;
    req->constraint_src = src;
    snprintf(req->constraint_param, sizeof req->constraint_param, "tool_choice");
    req->reasoning = false; /* the grammar governs the reply from its first token */
    return 0;
}

int forced_read(enum dialect d, const json_t *root, bool grammar, bool tools, struct request *req,
                struct err *e)
{
    const json_t *choice = json_object_get(root, "tool_choice");
    const json_t *type = json_is_object(choice) ? json_object_get(choice, "type") : NULL;
    const char *ty = json_is_string(type) ? json_string_value(type) : "";
    const char *name = NULL;
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
    if (jn) name = json_string_value(jn);
    if (!grammar)
        return err_set_param(e, ERR_UNSUPPORTED, "tool_choice",
                             "forced tool calls need grammar-constrained decoding, which this "
                             "backend does not have");
    if (!tools)
        return err_set_param(e, ERR_INVALID, "tool_choice",
                             "this model has no tool-calling convention");
    return forced_apply(req, d, json_object_get(root, "tools"), name, e);
}
