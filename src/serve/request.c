#include "serve/request.h"

#include "grammar/grammar.h"

#include <stdlib.h>
#include <string.h>

void request_init(struct request *r)
{
    memset(r, 0, sizeof *r);
    r->n = 1;
    r->max_tokens = 1024;
    r->sp.temperature = 0.7f;
    r->sp.top_k = 20;
    r->sp.top_p = 0.8f;
    r->sp.repeat_penalty = 1.0f;
    r->sp.repeat_last_n = 64;
}

/* Frees one message's strings (kept here rather than calling chat_msg_free so the serve layer does
 * not depend on the renderer's object file for plain bookkeeping). */
static void msg_free(struct chat_msg *m)
{
    free(m->content);
    free(m->reasoning_content);
    for (int i = 0; i < m->n_tool_calls; i++) {
        free(m->tool_calls[i].id);
        free(m->tool_calls[i].name);
        free(m->tool_calls[i].arguments);
    }
    free(m->tool_calls);
    free(m->tool_call_id);
    free(m->name);
}

void request_free(struct request *r)
{
    for (int i = 0; i < r->n_msgs; i++)
        msg_free(&r->msgs[i]);
    free(r->msgs);
    if (r->tools) json_decref(r->tools);
    for (int i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->constraint_src);
    free(r->bias);
    for (int i = 0; i < r->n_inputs; i++) {
        free(r->inputs[i].text);
        free(r->inputs[i].tokens);
    }
    free(r->inputs);
    for (int i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].text);
        free(r->prompts[i].tokens);
    }
    free(r->prompts);
    free(r->embd);
    if (r->grammar) grammar_free(r->grammar);
    free(r->tokens);
    free(r->prompt_text);
    free(r->model);
    free(r->id);
    if (r->metadata) json_decref(r->metadata);
    free(r->instructions);
    memset(r, 0, sizeof *r);
}

struct chat_msg *request_add_msg(struct request *r, enum chat_role role)
{
    if (r->n_msgs == r->cap_msgs) {
        int cap = r->cap_msgs ? 2 * r->cap_msgs : 8;
        struct chat_msg *m = realloc(r->msgs, (size_t)cap * sizeof *m);
        if (!m) return NULL;
        r->msgs = m;
        r->cap_msgs = cap;
    }
    struct chat_msg *m = &r->msgs[r->n_msgs];
    memset(m, 0, sizeof *m);
    m->role = role;
    m->content = strdup("");
    if (!m->content) return NULL;
    r->n_msgs++;
    return m;
}

int err_http_status(enum err_code c)
{
    switch (c) {
    case ERR_OK:
        return 200;
    case ERR_INVALID:
    case ERR_RANGE:
    case ERR_CONTEXT:
        return 400;
    case ERR_AUTH:
        return 401;
    case ERR_NOT_FOUND:
        return 404;
    case ERR_TOO_LARGE:
        return 413;
    case ERR_BUSY:
        return 429;
    case ERR_UNSUPPORTED: /* the client can change it (issue 10 item 8): 5xx would make SDKs retry */
        return 400;
    case ERR_CANCELLED:
        return 503;
    default:
        return 500;
    }
}
