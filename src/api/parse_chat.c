/* Chat Completions request -> struct request (R-MAP-1..4, R-THINK-1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static const char *const TEXT_PARTS[] = {"text", NULL};

static int read_tool_calls(json_t *arr, int mi, struct chat_msg *m, struct err *e)
{
    char p[96];
    snprintf(p, sizeof p, "messages[%d].tool_calls", mi);
    if (!json_is_array(arr)) return err_set_param(e, ERR_INVALID, p, "'%s' must be an array", p);
    size_t n = json_array_size(arr);
    if (n == 0) return 0;
    m->tool_calls = calloc(n, sizeof *m->tool_calls);
    if (!m->tool_calls) return err_set(e, ERR_NOMEM, "out of memory");
    size_t i;
    json_t *tc;
    json_array_foreach(arr, i, tc) {
        snprintf(p, sizeof p, "messages[%d].tool_calls[%zu]", mi, i);
        json_t *fn = json_is_object(tc) ? json_object_get(tc, "function") : NULL;
        json_t *name = fn ? json_object_get(fn, "name") : NULL;
        json_t *args = fn ? json_object_get(fn, "arguments") : NULL;
        json_t *type = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
        if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
            return err_set_param(e, ERR_INVALID, p, "'%s.type' must be \"function\"", p);
        if (!json_is_string(name))
            return err_set_param(e, ERR_INVALID, p, "'%s.function.name' must be a string", p);
        json_t *ps = json_object_get(fn, "parameters");
        char pp[128];
        snprintf(pp, sizeof pp, "%s.function.parameters", p);
        if (ps && !json_is_null(ps) && api_check_schema(ps, pp, e) < 0) return -1;
        struct chat_tool_call *c = &m->tool_calls[m->n_tool_calls++];
        json_t *id = json_object_get(tc, "id");
        c->id = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
        c->name = strdup(json_string_value(name));
        if (json_is_string(args))
            c->arguments = strdup(json_string_value(args));
        else if (args && !json_is_null(args)) {
            struct buf tj = {0}; /* rendered as the template's tojson would */
            c->arguments = chat_tojson(args, &tj) == 0 ? buf_steal(&tj) : NULL;
            buf_free(&tj);
        }
        else
            c->arguments = strdup("{}");
        if (!c->name || !c->arguments) return err_set(e, ERR_NOMEM, "out of memory");
    }
    return 0;
}

static int read_messages(json_t *msgs, struct request *req, struct err *e)
{
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return err_set_param(e, ERR_INVALID, "messages", "'messages' must be a non-empty array");
    size_t i;
    json_t *jm;
    json_array_foreach(msgs, i, jm) {
        char p[96];
        snprintf(p, sizeof p, "messages[%zu]", i);
        if (!json_is_object(jm)) return err_set_param(e, ERR_INVALID, p, "'%s' must be an object", p);
        json_t *jr = json_object_get(jm, "role");
        if (!json_is_string(jr))
            return err_set_param(e, ERR_INVALID, p, "'%s.role' must be a string", p);
        const char *role = json_string_value(jr);
        enum chat_role r;
        if (!strcmp(role, "system") || !strcmp(role, "developer"))
            r = CHAT_SYSTEM;
        else if (!strcmp(role, "user"))
            r = CHAT_USER;
        else if (!strcmp(role, "assistant"))
            r = CHAT_ASSISTANT;
        else if (!strcmp(role, "tool"))
            r = CHAT_TOOL;
        else if (!strcmp(role, "function"))
            return err_set_param(e, ERR_INVALID, p,
                                 "the legacy 'function' role is not supported; use 'tool'");
        else
            return err_set_param(e, ERR_INVALID, p, "unknown role '%s'", role);
        if (json_object_get(jm, "function_call") && !json_is_null(json_object_get(jm, "function_call")))
            return err_set_param(e, ERR_INVALID, "function_call",
                                 "the legacy functions API is not supported; use tools");
        char cp[112];
        snprintf(cp, sizeof cp, "%s.content", p);
        char *text = api_content_text(json_object_get(jm, "content"), cp, TEXT_PARTS, e);
        if (!text) return -1;
        struct chat_msg *m = request_add_msg(req, r);
        if (!m) {
            free(text);
            return err_set(e, ERR_NOMEM, "out of memory");
        }
        free(m->content);
        m->content = text;
        if (r == CHAT_ASSISTANT) {
            json_t *tc = json_object_get(jm, "tool_calls");
            if (tc && !json_is_null(tc) && read_tool_calls(tc, (int)i, m, e) < 0) return -1;
            json_t *rc = json_object_get(jm, "reasoning_content");
            if (json_is_string(rc) && !(m->reasoning_content = strdup(json_string_value(rc))))
                return err_set(e, ERR_NOMEM, "out of memory");
        }
        if (r == CHAT_TOOL) {
            json_t *id = json_object_get(jm, "tool_call_id");
            if (json_is_string(id) && !(m->tool_call_id = strdup(json_string_value(id))))
                return err_set(e, ERR_NOMEM, "out of memory");
        }
        json_t *nm = json_object_get(jm, "name");
        if (r == CHAT_TOOL && json_is_string(nm) && !(m->name = strdup(json_string_value(nm))))
            return err_set(e, ERR_NOMEM, "out of memory");
    }
    return 0;
}

static int read_tools(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    json_t *tools = json_object_get(root, "tools");
    json_t *choice = json_object_get(root, "tool_choice");
    bool none = json_is_string(choice) && !strcmp(json_string_value(choice), "none");
    if (choice && !json_is_null(choice) && !none &&
        !(json_is_string(choice) && !strcmp(json_string_value(choice), "auto"))) {
        if (!(json_is_string(choice) && !strcmp(json_string_value(choice), "required")) &&
            !json_is_object(choice))
            return err_set_param(e, ERR_INVALID, "tool_choice",
                                 "'tool_choice' must be none, auto, required or a function choice");
        /* forced: compiled to a grammar by api_read_tool_choice (api/tool_choice.c) */
    }
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return err_set_param(e, ERR_INVALID, "tools", "'tools' must be an array");
    if (json_array_size(tools) == 0) return 0;
    if (!ctx->backend->caps.tools)
        return err_set_param(e, ERR_INVALID, "tools", "this model has no tool-calling convention");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function"))
            return err_set_param(e, ERR_INVALID, p,
                                 "only function tools are supported ('%s.type' must be \"function\")", p);
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
            return err_set_param(e, ERR_INVALID, p, "'%s.function.name' must be a string", p);
        json_t *ps = json_object_get(fn, "parameters");
        char pp[128];
        snprintf(pp, sizeof pp, "%s.function.parameters", p);
        if (ps && !json_is_null(ps) && api_check_schema(ps, pp, e) < 0) return -1;
        if (!none && api_tools_add(req, json_deep_copy(t)) < 0) return err_set(e, ERR_NOMEM, "out of memory");
    }
    return 0;
}

int api_parse_chat(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    static const struct {
        const char *key, *why;
        enum err_code code;
    } rejects[] = {
        {"functions", "the legacy functions API is not supported; use tools", ERR_INVALID},
        {"function_call", "the legacy functions API is not supported; use tool_choice", ERR_INVALID},
        {"audio", "audio output is not supported", ERR_INVALID},
        {"prediction", "predicted outputs are not supported", ERR_INVALID},
        {"web_search_options", "hosted web search is not supported", ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++)
        if (api_jv_reject(root, rejects[i].key, rejects[i].code, rejects[i].why, e) < 0) return -1;
    json_t *mod = json_object_get(root, "modalities");
    if (json_is_array(mod)) {
        size_t i;
        json_t *v;
        json_array_foreach(mod, i, v) if (!json_is_string(v) || strcmp(json_string_value(v), "text"))
            return err_set_param(e, ERR_INVALID, "modalities", "only the text modality is supported");
    }
    if (read_messages(json_object_get(root, "messages"), req, e) < 0) return -1;
    long long n = 1, mt = 0, mct = 0, tl = 0;
    if (api_jv_int(root, "n", "n", 1, REQ_MAX_N, &n, e) < 0) return -1;
    req->n = (int)n;
    if (api_jv_int(root, "max_tokens", "max_tokens", 1, 1 << 30, &mt, e) < 0) return -1;
    if (api_jv_int(root, "max_completion_tokens", "max_completion_tokens", 1, 1 << 30, &mct, e) < 0)
        return -1;
    if (api_jv_bool(root, "stream", "stream", &req->stream, e) < 0) return -1;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so))
            return err_set_param(e, ERR_INVALID, "stream_options", "'stream_options' must be an object");
        if (api_jv_bool(so, "include_usage", "stream_options.include_usage", &req->include_usage, e) < 0)
            return -1;
    }
    if (api_jv_bool(root, "logprobs", "logprobs", &req->logprobs, e) < 0) return -1;
    if (api_jv_int(root, "top_logprobs", "top_logprobs", 0, REQ_MAX_TOP_LOGPROBS, &tl, e) < 0) return -1;
    if (tl > 0 && !req->logprobs)
        return err_set_param(e, ERR_INVALID, "top_logprobs", "'top_logprobs' requires 'logprobs': true");
    req->top_logprobs = (int)tl;
    if (api_read_stop(json_object_get(root, "stop"), "stop", req, e) < 0) return -1;
    const char *effort = NULL;
    if (api_jv_str(root, "reasoning_effort", "reasoning_effort", &effort, e) < 0) return -1;
    if (effort && api_read_effort(ctx, effort, "reasoning_effort", true, req, e) < 0) return -1;
    json_t *kw = json_object_get(root, "chat_template_kwargs"); /* llama.cpp / vLLM extension */
    if (json_is_object(kw) && json_is_boolean(json_object_get(kw, "enable_thinking")))
        req->reasoning = json_is_true(json_object_get(kw, "enable_thinking")) && ctx->backend->caps.think;
    if (read_tools(ctx, root, req, e) < 0) return -1;
    if (api_read_constraint(ctx, json_object_get(root, "response_format"), "response_format", req, e) < 0)
        return -1;
    if (api_read_grammar_ext(ctx, root, req, e) < 0) return -1;
    if (api_read_logit_bias(root, req, e) < 0) return -1;
    if (api_read_tool_choice(ctx, DIALECT_CHAT, root, req, e) < 0)
        return -1;
    if (api_finalize(ctx, root, req, mct ? mct : mt, e) < 0) return -1;
    return 0;
}
