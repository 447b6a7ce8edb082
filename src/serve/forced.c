#include "serve/forced.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "grammar/jsonschema.h"

char *forced_lark(const struct family *f, const struct forced_tool *tools, int n, struct err *e)
{
    return forced_lark_marks(f, ~0u, tools, n, e);
}

bool forced_available(const struct family *f)
{
    return f && family_tool_markers(f) && (f->forced_call || forced_style_builds(f));
}

char *forced_lark_marks(const struct family *f, unsigned specials, const struct forced_tool *tools,
                        int n, struct err *e)
{
    if (!forced_available(f)) {
        err_set(e, ERR_INVALID, "this model has no tool-calling convention");
        return NULL;
    }
    if (n < 1) {
        err_set(e, ERR_INVALID, "a forced tool call needs at least one tool");
        return NULL;
    }
    struct family_tool *ft = calloc((size_t)n, sizeof *ft);
    struct buf b = {0};
    char *out = NULL;
    if (!ft) {
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const char *name = tools[i].name ? tools[i].name : "";
        if (!name[0]) {
            err_set(e, ERR_INVALID, "a forced tool needs a non-empty name");
            goto out;
        }
        /* the name as the template's tojson writes it: a JSON string, non-ASCII raw */
        json_t *js = json_string(name);
        char *jname = js ? json_dumps(js, JSON_ENCODE_ANY) : NULL;
        json_decref(js);
        if (!jname) {
            err_set(e, js ? ERR_NOMEM : ERR_INVALID, "tool name is not valid UTF-8");
            goto out;
        }
        ft[i].json_name = jname;
        ft[i].name = name;
        /* permissive unless enforced; a schema that is not an object/boolean is the client's bug */
        const json_t *sc = tools[i].schema;
        if (sc && !json_is_object(sc) && !json_is_boolean(sc)) {
            err_set(e, ERR_INVALID, "the schema of tool '%s' must be an object", name);
            goto out;
        }
        /* arguments are always an object: a true (any value) schema means any object */
        char *schema = sc && !json_is_true(sc) ? json_dumps(sc, JSON_COMPACT | JSON_ENCODE_ANY)
                                               : strdup("{\"type\":\"object\"}");
        ft[i].schema = schema;
        if (!schema) {
            err_set(e, ERR_NOMEM, "out of memory");
            goto out;
        }
        /* the schema must compile (limits and keywords: docs/jsonschema.md): checked here, so a
         * bad one is a 400 at parse time, before the prompt is rendered or the worker is taken */
        if (sc && !json_is_true(sc)) {
            struct buf chk = {0};
            int bad = jsonschema_to_lark(schema, strlen(schema), "chk_", &chk, e);
            buf_free(&chk);
            if (bad) {
                err_wrap(e, "the schema of tool '%s'", name);
                goto out;
            }
        }
    }
    if (!f->forced_call) { /* a call style's generic builder (forced_styles.c) */
        if (forced_style_build(f, specials, ft, n, &b, e) < 0) goto out;
    } else if (f->forced_call(ft, n, &b) < 0) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    if (!b.data) {
        err_set(e, ERR_NOMEM, "out of memory");
        goto out;
    }
    out = buf_steal(&b);
out:
    for (int k = 0; k < n; k++) { /* calloc'd: entries never reached are NULL */
        free((char *)ft[k].json_name);
        free((char *)ft[k].schema);
    }
    free(ft);
    buf_free(&b);
    return out;
}

int forced_apply(struct request *req, const struct family *f, unsigned specials,
                 const struct forced_tool *cands, int n, struct err *e)
{
    if (req->constraint != CONSTRAINT_NONE)
        return err_set_param(e, ERR_INVALID, "tool_choice",
                             "a forced tool_choice cannot be combined with '%s' (both constrain "
                             "the whole reply)",
                             req->constraint_param);
    if (n > FORCED_MAX_TOOLS)
        return err_set_param(e, ERR_INVALID, "tool_choice", "at most %d tools can be forced",
                             FORCED_MAX_TOOLS);
    char *src = forced_lark_marks(f, specials, cands, n, e);
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
