#define _GNU_SOURCE /* asprintf */
/* Anthropic Messages request -> struct request (R-ANT-1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static const char *const TEXT_BLOCKS[] = {"text", NULL};

static int oom(struct err *e) { return err_set(e, ERR_NOMEM, "out of memory"); }

static int flush_text(struct request *req, enum chat_role r, struct buf *text, bool force,
                      struct chat_msg **out, struct err *e)
{
    *out = NULL;
    if (!text->len && !force) return 0;
    struct chat_msg *m = request_add_msg(req, r);
    if (!m) return oom(e);
    free(m->content);
    m->content = text->data ? buf_steal(text) : strdup("");
    if (!m->content) return oom(e);
    *out = m;
    return 0;
}

static int read_message(json_t *jm, size_t i, struct request *req, struct err *e)
{
    char p[64];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(jm)) return err_set_param(e, ERR_INVALID, p, "'%s' must be an object", p);
    json_t *jr = json_object_get(jm, "role");
    const char *role = json_is_string(jr) ? json_string_value(jr) : "";
    enum chat_role r;
    if (!strcmp(role, "user"))
        r = CHAT_USER;
    else if (!strcmp(role, "assistant"))
        r = CHAT_ASSISTANT;
    else if (!strcmp(role, "system"))
        r = CHAT_SYSTEM; /* mid-conversation system turns (Claude Code 2.1) */
    else
        return err_set_param(e, ERR_INVALID, p, "'%s.role' must be user, assistant or system", p);
    json_t *content = json_object_get(jm, "content");
    if (json_is_string(content)) {
        struct chat_msg *m = request_add_msg(req, r);
        if (!m) return oom(e);
        free(m->content);
        return (m->content = strdup(json_string_value(content))) ? 0 : oom(e);
    }
    if (!json_is_array(content))
        return err_set_param(e, ERR_INVALID, p, "'%s.content' must be a string or an array of blocks", p);
    struct buf text = {0}, think = {0};
    struct chat_msg *asst = NULL, *m = NULL;
    size_t k;
    json_t *b;
    int rc = 0;
    json_array_foreach(content, k, b) {
        char bp[96];
        snprintf(bp, sizeof bp, "%s.content[%zu]", p, k);
        json_t *jt = json_is_object(b) ? json_object_get(b, "type") : NULL;
        if (!json_is_string(jt)) {
            rc = err_set_param(e, ERR_INVALID, bp, "'%s.type' must be a string", bp);
            break;
        }
        const char *type = json_string_value(jt);
        if (!strcmp(type, "text")) {
            json_t *t = json_object_get(b, "text");
            if (!json_is_string(t)) {
                rc = err_set_param(e, ERR_INVALID, bp, "'%s.text' must be a string", bp);
                break;
            }
            if ((text.len && buf_puts(&text, "\n") < 0) || buf_puts(&text, json_string_value(t)) < 0) {
                rc = oom(e);
                break;
            }
        } else if (!strcmp(type, "thinking") && r == CHAT_ASSISTANT) {
            /* prior reasoning: the assistant turn's reasoning_content, as on the chat dialect
             * (the template keeps it for turns after the last user query: an agent's tool loop) */
            json_t *t = json_object_get(b, "thinking");
            if (!json_is_string(t)) {
                rc = err_set_param(e, ERR_INVALID, bp, "'%s.thinking' must be a string", bp);
                break;
            }
            if ((think.len && buf_puts(&think, "\n") < 0) ||
                buf_puts(&think, json_string_value(t)) < 0) {
                rc = oom(e);
                break;
            }
        } else if (!strcmp(type, "redacted_thinking") && r == CHAT_ASSISTANT) {
            /* encrypted reasoning of another server: nothing to render */
        } else if (!strcmp(type, "tool_use") && r == CHAT_ASSISTANT) {
            json_t *name = json_object_get(b, "name"), *id = json_object_get(b, "id");
            json_t *input = json_object_get(b, "input");
            if (!json_is_string(name)) {
                rc = err_set_param(e, ERR_INVALID, bp, "'%s.name' must be a string", bp);
                break;
            }
            if (!asst) {
                if ((rc = flush_text(req, CHAT_ASSISTANT, &text, true, &asst, e)) < 0) break;
            }
            struct chat_tool_call *tc =
                realloc(asst->tool_calls, (size_t)(asst->n_tool_calls + 1) * sizeof *tc);
            if (!tc) {
                rc = oom(e);
                break;
            }
            asst->tool_calls = tc;
            struct chat_tool_call *c = &tc[asst->n_tool_calls++];
            memset(c, 0, sizeof *c);
            c->id = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
            c->name = strdup(json_string_value(name));
            if (input && !json_is_null(input)) {
                struct buf tj = {0}; /* rendered as the template's tojson would */
                c->arguments = chat_tojson(input, &tj) == 0 ? buf_steal(&tj) : NULL;
                buf_free(&tj);
            } else {
                c->arguments = strdup("{}");
            }
            if (!c->name || !c->arguments) {
                rc = oom(e);
                break;
            }
        } else if (!strcmp(type, "tool_result") && r == CHAT_USER) {
            if ((rc = flush_text(req, CHAT_USER, &text, false, &m, e)) < 0) break;
            char cp[112];
            snprintf(cp, sizeof cp, "%s.content", bp);
            char *t = api_content_text(json_object_get(b, "content"), cp, TEXT_BLOCKS, e);
            if (!t) {
                rc = -1;
                break;
            }
            m = request_add_msg(req, CHAT_TOOL);
            if (!m) {
                free(t);
                rc = oom(e);
                break;
            }
            free(m->content);
            m->content = t;
            json_t *id = json_object_get(b, "tool_use_id");
            if (json_is_string(id) && !(m->tool_call_id = strdup(json_string_value(id)))) {
                rc = oom(e);
                break;
            }
        } else {
            bool media = !strcmp(type, "image") || !strcmp(type, "document");
            char tp[112];
            snprintf(tp, sizeof tp, "%s.type", bp);
            rc = err_set_param(e, media ? ERR_UNSUPPORTED : ERR_INVALID, tp,
                               "%s: content block type '%s' is not supported here", tp, type);
            break;
        }
    }
    if (rc == 0) {
        if (asst) {
            if (text.len) { /* text after a tool_use in the same turn */
                char *joined = NULL;
                if (asprintf(&joined, "%s%s%s", asst->content, asst->content[0] ? "\n" : "",
                             text.data) < 0)
                    rc = oom(e);
                else {
                    free(asst->content);
                    asst->content = joined;
                }
            }
        } else {
            bool any = text.len > 0 || json_array_size(content) == 0 ||
                       (req->n_msgs == 0 || req->msgs[req->n_msgs - 1].role != CHAT_TOOL);
            if (any) rc = flush_text(req, r, &text, true, &m, e);
            if (r == CHAT_ASSISTANT) asst = m;
        }
    }
    if (rc == 0 && think.len && asst && !(asst->reasoning_content = buf_steal(&think)))
        rc = oom(e);
    buf_free(&text);
    buf_free(&think);
    return rc;
}

static int read_system(json_t *sys, struct request *req, struct err *e)
{
    if (!sys || json_is_null(sys)) return 0;
    struct buf text = {0};
    if (json_is_string(sys)) {
        if (buf_puts(&text, json_string_value(sys)) < 0) return oom(e);
    } else if (json_is_array(sys)) {
        size_t i;
        json_t *b;
        json_array_foreach(sys, i, b) {
            json_t *t = json_is_object(b) ? json_object_get(b, "text") : NULL;
            json_t *ty = json_is_object(b) ? json_object_get(b, "type") : NULL;
            if (!json_is_string(t) || !json_is_string(ty) || strcmp(json_string_value(ty), "text")) {
                buf_free(&text);
                return err_set_param(e, ERR_INVALID, "system", "'system[%zu]' must be a text block", i);
            }
            /* R-KV-6: a per-request billing nonce block would defeat prefix reuse */
            if (!strncmp(json_string_value(t), "x-anthropic-billing-header:", 27)) continue;
            if ((text.len && buf_puts(&text, "\n") < 0) || buf_puts(&text, json_string_value(t)) < 0) {
                buf_free(&text);
                return oom(e);
            }
        }
    } else {
        return err_set_param(e, ERR_INVALID, "system", "'system' must be a string or an array of text blocks");
    }
    struct chat_msg *m = NULL;
    if (text.len) {
        m = request_add_msg(req, CHAT_SYSTEM);
        if (!m) {
            buf_free(&text);
            return oom(e);
        }
        free(m->content);
        m->content = buf_steal(&text);
    }
    buf_free(&text);
    return 0;
}

static int read_tools(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    json_t *choice = json_object_get(root, "tool_choice");
    bool none = false;
    if (choice && !json_is_null(choice)) {
        json_t *ct = json_is_object(choice) ? json_object_get(choice, "type") : NULL;
        const char *t = json_is_string(ct) ? json_string_value(ct) : "";
        if (!strcmp(t, "any") || !strcmp(t, "tool"))
            ; /* forced: compiled to a grammar by api_read_tool_choice (api/tool_choice.c) */
        else if (!strcmp(t, "none"))
            none = true;
        else if (strcmp(t, "auto"))
            return err_set_param(e, ERR_INVALID, "tool_choice", "'tool_choice.type' must be auto, any, tool or none");
    }
    json_t *tools = json_object_get(root, "tools");
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return err_set_param(e, ERR_INVALID, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        if (!json_is_object(t)) return err_set_param(e, ERR_INVALID, p, "'%s' must be an object", p);
        json_t *ty = json_object_get(t, "type");
        if (json_is_string(ty) && strcmp(json_string_value(ty), "custom"))
            return err_set_param(e, ERR_INVALID, p, "server tool '%s' is not supported",
                                 json_string_value(ty));
        json_t *name = json_object_get(t, "name");
        if (!json_is_string(name)) return err_set_param(e, ERR_INVALID, p, "'%s.name' must be a string", p);
        json_t *ps = json_object_get(t, "input_schema");
        char pp[128];
        snprintf(pp, sizeof pp, "%s.input_schema", p);
        if (ps && !json_is_null(ps) && api_check_schema(ps, pp, e) < 0) return -1;
        if (none || !ctx->backend->caps.tools) continue; /* accepted and dropped */
        if (api_tools_add_flat(req, t, "input_schema") < 0) return oom(e);
    }
    return 0;
}

int api_parse_messages(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    if (api_jv_reject(root, "mcp_servers", ERR_INVALID, "MCP connectors are not supported", e) < 0) return -1;
    long long mt = 0;
    int has = api_jv_int(root, "max_tokens", "max_tokens", 1, 1 << 30, &mt, e);
    if (has < 0) return -1;
    if (has == 0 && !ctx->count_only) return err_set_param(e, ERR_INVALID, "max_tokens", "'max_tokens' is required");
    if (read_system(json_object_get(root, "system"), req, e) < 0) return -1;
    json_t *msgs = json_object_get(root, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return err_set_param(e, ERR_INVALID, "messages", "'messages' must be a non-empty array");
    size_t i;
    json_t *jm;
    json_array_foreach(msgs, i, jm) if (read_message(jm, i, req, e) < 0) return -1;
    if (api_jv_bool(root, "stream", "stream", &req->stream, e) < 0) return -1;
    json_t *ss = json_object_get(root, "stop_sequences");
    if (ss && !json_is_null(ss) && !json_is_array(ss))
        return err_set_param(e, ERR_INVALID, "stop_sequences", "'stop_sequences' must be an array of strings");
    if (api_read_stop(ss, "stop_sequences", req, e) < 0) return -1;
    json_t *th = json_object_get(root, "thinking");
    if (th && !json_is_null(th)) {
        json_t *ty = json_is_object(th) ? json_object_get(th, "type") : NULL;
        const char *t = json_is_string(ty) ? json_string_value(ty) : "";
        if (!strcmp(t, "enabled") || !strcmp(t, "adaptive"))
            req->reasoning = ctx->backend->caps.think; /* a no-op where the family cannot think */
        else if (!strcmp(t, "disabled"))
            req->reasoning = false;
        else
            return err_set_param(e, ERR_INVALID, "thinking", "'thinking.type' must be enabled, adaptive or disabled");
    }
    if (read_tools(ctx, root, req, e) < 0) return -1;
    json_t *oc = json_object_get(root, "output_config");
    if (json_is_object(oc) &&
        api_read_constraint(ctx, json_object_get(oc, "format"), "output_config.format", req, e) < 0)
        return -1;
    if (api_read_constraint(ctx, json_object_get(root, "output_format"), "output_format", req, e) < 0)
        return -1;
    if (api_read_grammar_ext(ctx, root, req, e) < 0) return -1; /* regex / lark, as on the OpenAI dialects */
    if (api_read_tool_choice(ctx, DIALECT_MESSAGES, root, req, e) < 0)
        return -1;
    return api_finalize(ctx, root, req, mt, e);
}
