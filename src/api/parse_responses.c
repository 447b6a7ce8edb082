/* Responses request -> struct request (R-MAP-1..4, R-THINK-1). Stateless: store:false semantics. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static const char *const MSG_PARTS[] = {"input_text", "output_text", "text", NULL};

static int oom(struct err *e) { return err_set(e, ERR_NOMEM, "out of memory"); }

static int add_call(struct request *req, json_t *it, const char *p, struct err *e)
{
    json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
    json_t *id = json_object_get(it, "call_id");
    if (!json_is_string(name))
        return err_set_param(e, ERR_INVALID, p, "'%s.name' must be a string", p);
    struct chat_msg *m = req->n_msgs ? &req->msgs[req->n_msgs - 1] : NULL;
    if (!m || m->role != CHAT_ASSISTANT) {
        m = request_add_msg(req, CHAT_ASSISTANT);
        if (!m) return oom(e);
    }
    struct chat_tool_call *tc = realloc(m->tool_calls, (size_t)(m->n_tool_calls + 1) * sizeof *tc);
    if (!tc) return oom(e);
    m->tool_calls = tc;
    struct chat_tool_call *c = &tc[m->n_tool_calls++];
    memset(c, 0, sizeof *c);
    c->id = json_is_string(id) ? strdup(json_string_value(id)) : NULL;
    c->name = strdup(json_string_value(name));
    c->arguments = json_is_string(args) ? strdup(json_string_value(args)) : strdup("{}");
    if (!c->name || !c->arguments) return oom(e);
    return 0;
}

/* Appends a reasoning item's text to rs: its reasoning_text content parts (what this server
 * sends), else its summary_text parts; encrypted_content alone adds nothing. */
static int reasoning_text(json_t *it, const char *p, struct buf *rs, struct err *e)
{
    static const char *const keys[2][2] = {{"content", "reasoning_text"},
                                           {"summary", "summary_text"}};
    for (int k = 0; k < 2; k++) {
        json_t *parts = json_object_get(it, keys[k][0]);
        if (!json_is_array(parts) || json_array_size(parts) == 0) continue;
        size_t i;
        json_t *pt;
        json_array_foreach(parts, i, pt) {
            json_t *ty = json_is_object(pt) ? json_object_get(pt, "type") : NULL;
            json_t *tx = json_is_object(pt) ? json_object_get(pt, "text") : NULL;
            if (!json_is_string(ty) || strcmp(json_string_value(ty), keys[k][1]) ||
                !json_is_string(tx))
                return err_set_param(e, ERR_INVALID, p, "'%s.%s[%zu]' must be a %s part", p,
                                     keys[k][0], i, keys[k][1]);
            if ((rs->len && buf_puts(rs, "\n") < 0) || buf_puts(rs, json_string_value(tx)) < 0)
                return oom(e);
        }
        return 0;
    }
    return 0;
}

/* One input item; rs holds reasoning items' text until the assistant message they belong to. */
static int read_item(json_t *it, size_t i, struct request *req, struct buf *rs, struct err *e)
{
    char p[64];
    snprintf(p, sizeof p, "input[%zu]", i);
    if (!json_is_object(it)) return err_set_param(e, ERR_INVALID, p, "'%s' must be an object", p);
    json_t *jt = json_object_get(it, "type");
    const char *type = json_is_string(jt) ? json_string_value(jt)
                       : json_object_get(it, "role") ? "message"
                                                     : NULL;
    if (!type) return err_set_param(e, ERR_INVALID, p, "'%s.type' must be a string", p);
    if (!strcmp(type, "message")) {
        json_t *jr = json_object_get(it, "role");
        const char *role = json_is_string(jr) ? json_string_value(jr) : "";
        enum chat_role r;
        if (!strcmp(role, "user"))
            r = CHAT_USER;
        else if (!strcmp(role, "assistant"))
            r = CHAT_ASSISTANT;
        else if (!strcmp(role, "system") || !strcmp(role, "developer"))
            r = CHAT_SYSTEM;
        else
            return err_set_param(e, ERR_INVALID, p, "'%s.role' must be user, assistant, system "
                                 "or developer", p);
        char cp[80];
        snprintf(cp, sizeof cp, "%s.content", p);
        char *text = api_content_text(json_object_get(it, "content"), cp, MSG_PARTS, e);
        if (!text) return -1;
        struct chat_msg *m = request_add_msg(req, r);
        if (!m) {
            free(text);
            return oom(e);
        }
        free(m->content);
        m->content = text;
    } else if (!strcmp(type, "reasoning")) {
        /* replayed reasoning: the next assistant message's reasoning_content, as on the chat
         * dialect (the template keeps it for turns after the last user query) */
        return reasoning_text(it, p, rs, e);
    } else if (!strcmp(type, "function_call")) {
        if (add_call(req, it, p, e) < 0) return -1;
    } else if (!strcmp(type, "function_call_output")) {
        json_t *out = json_object_get(it, "output"), *id = json_object_get(it, "call_id");
        char cp[80];
        snprintf(cp, sizeof cp, "%s.output", p);
        char *text = api_content_text(out, cp, MSG_PARTS, e);
        if (!text) return -1;
        struct chat_msg *m = request_add_msg(req, CHAT_TOOL);
        if (!m) {
            free(text);
            return oom(e);
        }
        free(m->content);
        m->content = text;
        if (json_is_string(id) && !(m->tool_call_id = strdup(json_string_value(id)))) return oom(e);
    } else if (!strcmp(type, "item_reference")) {
        return err_set_param(e, ERR_INVALID, p,
                             "item references need stored responses; this server is stateless "
                             "(send the full conversation)");
    } else {
        char tp[80];
        snprintf(tp, sizeof tp, "%s.type", p);
        return err_set_param(e, ERR_INVALID, tp, "input item type '%s' is not supported", type);
    }
    struct chat_msg *last = &req->msgs[req->n_msgs - 1];
    if (rs->len && last->role == CHAT_ASSISTANT && !last->reasoning_content &&
        !(last->reasoning_content = buf_steal(rs)))
        return oom(e);
    buf_reset(rs); /* reasoning not followed by an assistant turn renders nowhere */
    return 0;
}

static int read_input(json_t *input, struct request *req, struct err *e)
{
    if (json_is_string(input)) {
        struct chat_msg *m = request_add_msg(req, CHAT_USER);
        if (!m) return oom(e);
        free(m->content);
        return (m->content = strdup(json_string_value(input))) ? 0 : oom(e);
    }
    if (!json_is_array(input))
        return err_set_param(e, ERR_INVALID, "input", "'input' must be a string or an array of items");
    struct buf rs = {0};
    size_t i;
    json_t *it;
    int rc = 0;
    json_array_foreach(input, i, it) if ((rc = read_item(it, i, req, &rs, e)) < 0) break;
    buf_free(&rs);
    return rc;
}

/* `include`: the ResponseIncludable values of the OpenAI API. Only message.output_text.logprobs
 * adds anything here (per-token logprobs on output_text); the others name hosted tools, image
 * urls or encrypted reasoning this server never produces, so they are accepted and add nothing.
 * An unknown value is a 400 (as OpenAI answers it). */
static int read_include(json_t *root, struct request *req, struct err *e)
{
    static const char *const known[] = {
        "message.output_text.logprobs", "reasoning.encrypted_content", "file_search_call.results",
        "web_search_call.results", "web_search_call.action.sources",
        "message.input_image.image_url", "computer_call_output.output.image_url",
        "code_interpreter_call.outputs", NULL};
    json_t *inc = json_object_get(root, "include");
    if (!inc || json_is_null(inc)) return 0;
    if (!json_is_array(inc))
        return err_set_param(e, ERR_INVALID, "include", "'include' must be an array of strings");
    size_t i;
    json_t *v;
    json_array_foreach(inc, i, v) {
        char p[48];
        snprintf(p, sizeof p, "include[%zu]", i);
        if (!json_is_string(v)) return err_set_param(e, ERR_INVALID, p, "'%s' must be a string", p);
        const char *s = json_string_value(v);
        size_t k = 0;
        while (known[k] && strcmp(known[k], s)) k++;
        if (!known[k]) {
            char list[320] = "";
            for (size_t j = 0, at = 0; known[j] && at < sizeof list; j++)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", j ? ", " : "", known[j]);
            return err_set_param(e, ERR_INVALID, p, "'%s': unknown value '%.64s' (supported: %s)",
                                 p, s, list);
        }
        if (!strcmp(s, "message.output_text.logprobs")) req->logprobs = true;
    }
    return 0;
}

static bool is_hosted(const char *t) { return strcmp(t, "function") != 0; }

static int read_tools(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    json_t *choice = json_object_get(root, "tool_choice");
    bool none = json_is_string(choice) && !strcmp(json_string_value(choice), "none");
    if (json_is_object(choice)) {
        json_t *ct = json_object_get(choice, "type");
        if (json_is_string(ct) && is_hosted(json_string_value(ct)) &&
            strcmp(json_string_value(ct), "allowed_tools"))
            return err_set_param(e, ERR_INVALID, "tool_choice", "hosted tool '%s' is not supported",
                                 json_string_value(ct));
        /* a forced function: compiled to a grammar by api_read_tool_choice (api/tool_choice.c) */
    }
    bool required = json_is_string(choice) && !strcmp(json_string_value(choice), "required");
    if (choice && !json_is_null(choice) && !none && !required && !json_is_object(choice) &&
        !(json_is_string(choice) && !strcmp(json_string_value(choice), "auto")))
        return err_set_param(e, ERR_INVALID, "tool_choice", "'tool_choice' must be none, auto, "
                             "required or a tool choice object");
    json_t *tools = json_object_get(root, "tools");
    if (!tools || json_is_null(tools)) return 0;
    if (!json_is_array(tools)) return err_set_param(e, ERR_INVALID, "tools", "'tools' must be an array");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        json_t *type = json_is_object(t) ? json_object_get(t, "type") : NULL;
        if (!json_is_string(type)) return err_set_param(e, ERR_INVALID, p, "'%s.type' must be a string", p);
        if (is_hosted(json_string_value(type))) continue; /* [+] skipped unless forced (above) */
        if (!ctx->backend->caps.tools)
            return err_set_param(e, ERR_INVALID, "tools", "this model has no tool-calling convention");
        json_t *name = json_object_get(t, "name");
        if (!json_is_string(name)) return err_set_param(e, ERR_INVALID, p, "'%s.name' must be a string", p);
        json_t *ps = json_object_get(t, "parameters");
        char pp[128];
        snprintf(pp, sizeof pp, "%s.parameters", p);
        if (ps && !json_is_null(ps) && api_check_schema(ps, pp, e) < 0) return -1;
        if (none) continue;
        if (api_tools_add_flat(req, t, "parameters") < 0) return oom(e);
    }
    return 0;
}

int api_parse_responses(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e)
{
    static const struct {
        const char *key, *why;
    } rejects[] = {
        {"previous_response_id", "this server is stateless; send the full conversation in 'input'"},
        {"conversation", "this server is stateless; send the full conversation in 'input'"},
        {"background", "background responses are not supported"},
        {"prompt", "stored prompt templates are not supported"},
    };
    for (size_t i = 0; i < sizeof rejects / sizeof rejects[0]; i++)
        if (api_jv_reject(root, rejects[i].key, ERR_INVALID, rejects[i].why, e) < 0) return -1;
    json_t *tr = json_object_get(root, "truncation");
    if (json_is_string(tr) && !strcmp(json_string_value(tr), "auto"))
        return err_set_param(e, ERR_INVALID, "truncation",
                             "truncation 'auto' is not supported (a prompt that does not fit is an error)");
    if (read_include(root, req, e) < 0) return -1;
    long long tl = 0;
    if (api_jv_int(root, "top_logprobs", "top_logprobs", 0, REQ_MAX_TOP_LOGPROBS, &tl, e) < 0)
        return -1;
    req->top_logprobs = (int)tl; /* alternatives per token; logprobs themselves need `include` */
    const char *instr = NULL;
    if (api_jv_str(root, "instructions", "instructions", &instr, e) < 0) return -1;
    if (instr) {
        struct chat_msg *m = request_add_msg(req, CHAT_SYSTEM);
        if (!m) return oom(e);
        free(m->content);
        if (!(m->content = strdup(instr))) return oom(e);
        if (!(req->instructions = strdup(instr))) return oom(e);
    }
    json_t *input = json_object_get(root, "input");
    if (!input || json_is_null(input))
        return err_set_param(e, ERR_INVALID, "input", "'input' is required");
    if (read_input(input, req, e) < 0) return -1;
    long long mt = 0;
    if (api_jv_int(root, "max_output_tokens", "max_output_tokens", 1, 1 << 30, &mt, e) < 0) return -1;
    if (api_jv_bool(root, "stream", "stream", &req->stream, e) < 0) return -1;
    if (api_read_stop(json_object_get(root, "stop"), "stop", req, e) < 0) return -1;
    json_t *rs = json_object_get(root, "reasoning");
    if (rs && !json_is_null(rs)) {
        if (!json_is_object(rs)) return err_set_param(e, ERR_INVALID, "reasoning", "'reasoning' must be an object");
        const char *effort = NULL;
        if (api_jv_str(rs, "effort", "reasoning.effort", &effort, e) < 0) return -1;
        if (effort && api_read_effort(ctx, effort, "reasoning.effort", true, req, e) < 0) return -1;
    }
    if (read_tools(ctx, root, req, e) < 0) return -1;
    json_t *text = json_object_get(root, "text");
    if (text && !json_is_null(text)) {
        if (!json_is_object(text)) return err_set_param(e, ERR_INVALID, "text", "'text' must be an object");
        if (api_read_constraint(ctx, json_object_get(text, "format"), "text.format", req, e) < 0) return -1;
    }
    if (api_read_grammar_ext(ctx, root, req, e) < 0) return -1;
    if (api_read_logit_bias(root, req, e) < 0) return -1;
    if (api_read_tool_choice(ctx, DIALECT_RESPONSES, root, req, e) < 0)
        return -1;
    json_t *md = json_object_get(root, "metadata");
    if (json_is_object(md)) req->metadata = json_incref(md);
    return api_finalize(ctx, root, req, mt, e);
}
