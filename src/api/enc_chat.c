/* Chat Completions encoder: chat.completion body or chat.completion.chunk SSE (R-STREAM-1). */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static json_t *chunk(struct api_enc *en, json_t *choices)
{
    struct request *r = &en->job->req;
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:s}", "id", r->id, "object",
                     "chat.completion.chunk", "created", (json_int_t)r->created, "model", r->model,
                     "choices", choices, "system_fingerprint", en->fingerprint);
}

static json_t *one_choice(int idx, json_t *delta, json_t *logprobs, const char *finish)
{
    return json_pack("[{s:i, s:o, s:o, s:o}]", "index", idx, "delta", delta, "logprobs",
                     logprobs ? logprobs : json_null(), "finish_reason",
                     finish ? json_string(finish) : json_null());
}

static int start(struct api_enc *en)
{
    if (en->started) return 0;
    en->started = true;
    if (!en->job->req.stream) return 0;
    if (!en->job->t_first) en->job->t_first = mono_seconds();
    return pipe_begin(en->job->pipe, 200, "text/event-stream") < 0 && pipe_cancelled(en->job->pipe)
               ? -1
               : 0;
}

/* Each choice's stream opens with a chunk of its own carrying {"role":"assistant","content":""},
 * as OpenAI's does (clients key the message's creation on it); every later delta is bare. */
static json_t *delta_obj(struct api_enc *en, int c)
{
    if (!en->ch[c].role_sent) {
        en->ch[c].role_sent = true;
        json_t *d = json_pack("{s:s, s:s}", "role", "assistant", "content", "");
        if (api_enc_sse(en, NULL, chunk(en, one_choice(c, d, NULL, NULL))) < 0) return NULL;
    }
    return json_object();
}

static int s_start(void *ctx) { return 0; }

static int s_reasoning(void *ctx, int c, const char *s, size_t n)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    if (!en->job->req.stream) return buf_append(&en->ch[c].reasoning, s, n);
    json_t *d = delta_obj(en, c);
    if (!d) return -1;
    json_object_set_new(d, "reasoning_content", api_json_text(s, n));
    return api_enc_sse(en, NULL, chunk(en, one_choice(c, d, NULL, NULL)));
}

static int s_text(void *ctx, int c, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct api_enc *en = ctx;
    struct request *r = &en->job->req;
    if (start(en) < 0) return -1;
    json_t *entries = NULL;
    if (r->logprobs && nl > 0) {
        entries = json_array();
        for (int i = 0; i < nl; i++)
            json_array_append_new(entries, api_enc_logprob_entry(en, &lp[i], true));
    }
    if (!r->stream) {
        if (entries) {
            if (!en->ch[c].logprobs) en->ch[c].logprobs = json_array();
            json_array_extend(en->ch[c].logprobs, entries);
            json_decref(entries);
        }
        return buf_append(&en->ch[c].text, s, n);
    }
    if (n == 0 && !entries) return 0;
    json_t *d = delta_obj(en, c);
    if (!d) return -1;
    json_object_set_new(d, "content", api_json_text(s, n));
    json_t *lpo = entries ? json_pack("{s:o, s:n}", "content", entries, "refusal") : NULL;
    return api_enc_sse(en, NULL, chunk(en, one_choice(c, d, lpo, NULL)));
}

/* R-TOOL-2 / R-STREAM-4: one delta.tool_calls chunk per completed call, full arguments. */
static int s_tool_call(void *ctx, int c, const char *name, const char *args, size_t n)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    json_t *call = api_enc_add_call(en, c, "call_", name, args, n);
    if (!call) return -1;
    if (!en->job->req.stream) return 0;
    json_t *d = delta_obj(en, c);
    if (!d) return -1;
    json_object_set_new(d, "tool_calls",
                        json_pack("[{s:I, s:O, s:s, s:{s:O, s:O}}]", "index",
                                  (json_int_t)json_array_size(en->ch[c].calls) - 1, "id",
                                  json_object_get(call, "id"), "type", "function", "function",
                                  "name", json_object_get(call, "name"), "arguments",
                                  json_object_get(call, "arguments")));
    return api_enc_sse(en, NULL, chunk(en, one_choice(c, d, NULL, NULL)));
}

/* The non-stream message's tool_calls array (chat shape). */
static json_t *chat_calls(const json_t *calls)
{
    json_t *a = json_array();
    size_t i;
    json_t *call;
    json_array_foreach(calls, i, call)
        json_array_append_new(a, json_pack("{s:O, s:s, s:{s:O, s:O}}", "id",
                                           json_object_get(call, "id"), "type", "function",
                                           "function", "name", json_object_get(call, "name"),
                                           "arguments", json_object_get(call, "arguments")));
    return a;
}

static int s_finish(void *ctx, int c, enum finish_reason why, const char *stop)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    en->ch[c].why = why;
    en->ch[c].finished = true;
    if (stop && !(en->ch[c].stop_seq = strdup(stop))) return -1;
    if (!en->job->req.stream) return 0;
    json_t *d = delta_obj(en, c);
    if (!d) return -1;
    return api_enc_sse(en, NULL, chunk(en, one_choice(c, d, NULL, api_finish_reason_chat(why))));
}

static json_t *usage_obj(const struct usage *u)
{
    return json_pack("{s:I, s:I, s:I, s:{s:I}, s:{s:I}}", "prompt_tokens",
                     (json_int_t)u->prompt_tokens, "completion_tokens",
                     (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens), "prompt_tokens_details",
                     "cached_tokens", (json_int_t)u->cached_tokens, "completion_tokens_details",
                     "reasoning_tokens", (json_int_t)u->reasoning_tokens);
}

static int s_done(void *ctx, const struct usage *u)
{
    struct api_enc *en = ctx;
    struct request *r = &en->job->req;
    if (start(en) < 0) return -1;
    if (r->stream) return api_enc_openai_stream_end(en, chunk(en, json_array()), usage_obj(u));
    json_t *choices = json_array();
    for (int c = 0; c < en->n_choices; c++) {
        struct api_enc_choice *ch = &en->ch[c];
        json_t *msg = json_pack("{s:s, s:o, s:n}", "role", "assistant", "content",
                                api_json_text(ch->text.data ? ch->text.data : "", ch->text.len),
                                "refusal");
        if (ch->calls) {
            json_object_set_new(msg, "tool_calls", chat_calls(ch->calls));
            if (!ch->text.len) json_object_set_new(msg, "content", json_null());
        }
        if (ch->reasoning.len)
            json_object_set_new(msg, "reasoning_content",
                                api_json_text(ch->reasoning.data, ch->reasoning.len));
        json_t *lp = r->logprobs ? json_pack("{s:o, s:n}", "content",
                                             ch->logprobs ? json_incref(ch->logprobs) : json_array(),
                                             "refusal")
                                 : json_null();
        json_array_append_new(choices, json_pack("{s:i, s:o, s:o, s:s}", "index", c, "message", msg,
                                                 "logprobs", lp, "finish_reason",
                                                 api_finish_reason_chat(ch->why)));
    }
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o, s:s}", "id", r->id, "object",
                             "chat.completion", "created", (json_int_t)r->created, "model",
                             r->model, "choices", choices, "usage", usage_obj(u),
                             "system_fingerprint", en->fingerprint);
    if (api_enc_json_reply(en, body) < 0) return -1;
    api_enc_end(en);
    return 0;
}

static void s_error(void *ctx, const struct err *e)
{
    api_enc_fail_sse(ctx, NULL, e);
}

/* The chat encoder: one ops table (sink hooks on a struct api_enc). */
const struct api_encoder api_enc_chat = {
    .hooks = {.start = s_start,
              .reasoning = s_reasoning,
              .text = s_text,
              .finish = s_finish,
              .tool_call = s_tool_call,
              .done = s_done,
              .error = s_error},
    .one_choice = false,
};
