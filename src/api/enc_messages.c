/* Anthropic Messages encoder: message body or the message_start … message_stop SSE (R-STREAM-3). */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static const char *stop_reason(const struct api_enc_choice *ch)
{
    switch (ch->why) {
    case FINISH_LENGTH: return "max_tokens";
    case FINISH_TOOL_CALLS: return "tool_use";
    case FINISH_STOP: return ch->stop_seq ? "stop_sequence" : "end_turn";
    default: return "end_turn";
    }
}

static int ev(struct api_enc *en, const char *type, json_t *f)
{
    if (!f) return -1;
    json_object_set_new(f, "type", json_string(type));
    return api_enc_sse(en, type, f);
}

static json_t *message_obj(struct api_enc *en, json_t *content, const char *stop_reason_s,
                           const char *stop_seq, const struct usage *u)
{
    struct request *r = &en->job->req;
    json_t *usage = json_pack("{s:I, s:I, s:I, s:I}", "input_tokens",
                              (json_int_t)(u ? u->prompt_tokens - u->cached_tokens : 0),
                              "output_tokens", (json_int_t)(u ? u->completion_tokens : 0),
                              "cache_creation_input_tokens", (json_int_t)0,
                              "cache_read_input_tokens", (json_int_t)(u ? u->cached_tokens : 0));
    return json_pack("{s:s, s:s, s:s, s:s, s:o, s:o, s:o, s:o}", "id", r->id, "type", "message",
                     "role", "assistant", "model", r->model, "content", content, "stop_reason",
                     stop_reason_s ? json_string(stop_reason_s) : json_null(), "stop_sequence",
                     stop_seq ? json_string(stop_seq) : json_null(), "usage", usage);
}

static int start(struct api_enc *en)
{
    if (en->started) return 0;
    en->started = true;
    if (!en->job->req.stream) return 0;
    pipe_begin(en->job->pipe, 200, "text/event-stream");
    /* The prompt is counted (and its cached rows known) before the first event: message_start
     * carries the real input side, as Anthropic's does; output_tokens grows in message_delta. */
    const struct job *j = en->job;
    struct usage u = {.prompt_tokens = j->usage.prompt_tokens ? j->usage.prompt_tokens
                                                              : (int64_t)j->req.n_tokens,
                      .cached_tokens = j->usage.cached_tokens};
    return ev(en, "message_start",
              json_pack("{s:o}", "message", message_obj(en, json_array(), NULL, NULL, &u)));
}

static int close_block(struct api_enc *en)
{
    int idx = en->out_index - 1;
    if (en->think_open) {
        en->think_open = false;
        if (ev(en, "content_block_delta",
               json_pack("{s:i, s:{s:s, s:s}}", "index", idx, "delta", "type", "signature_delta",
                         "signature", "")) < 0)
            return -1;
        return ev(en, "content_block_stop", json_pack("{s:i}", "index", idx));
    }
    if (en->text_open) {
        en->text_open = false;
        return ev(en, "content_block_stop", json_pack("{s:i}", "index", idx));
    }
    return 0;
}

static int s_start(void *ctx) { return 0; }

static int s_reasoning(void *ctx, int c, const char *s, size_t n)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    if (buf_append(&en->ch[0].reasoning, s, n) < 0) return -1;
    if (!en->job->req.stream) return 0;
    if (!en->think_open) {
        if (close_block(en) < 0) return -1;
        en->think_open = true;
        if (ev(en, "content_block_start",
               json_pack("{s:i, s:{s:s, s:s, s:s}}", "index", en->out_index++, "content_block",
                         "type", "thinking", "thinking", "", "signature", "")) < 0)
            return -1;
    }
    return ev(en, "content_block_delta",
              json_pack("{s:i, s:{s:s, s:o}}", "index", en->out_index - 1, "delta", "type",
                        "thinking_delta", "thinking", api_json_text(s, n)));
}

static int open_text(struct api_enc *en)
{
    if (en->text_open) return 0;
    if (close_block(en) < 0) return -1;
    en->text_open = true;
    en->had_text_block = true;
    return ev(en, "content_block_start",
              json_pack("{s:i, s:{s:s, s:s}}", "index", en->out_index++, "content_block", "type",
                        "text", "text", ""));
}

static int s_text(void *ctx, int c, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    if (buf_append(&en->ch[0].text, s, n) < 0) return -1;
    if (!en->job->req.stream || n == 0) return 0;
    if (open_text(en) < 0) return -1;
    return ev(en, "content_block_delta",
              json_pack("{s:i, s:{s:s, s:o}}", "index", en->out_index - 1, "delta", "type",
                        "text_delta", "text", api_json_text(s, n)));
}

/* R-TOOL-2 / R-STREAM-3: one tool_use block per call, input {} then one input_json_delta. */
static int s_tool_call(void *ctx, int c, const char *name, const char *args, size_t n)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    json_t *call = api_enc_add_call(en, 0, "toolu_", name, args, n);
    if (!call) return -1;
    if (!en->job->req.stream) return 0;
    if (close_block(en) < 0) return -1;
    int idx = en->out_index++;
    if (ev(en, "content_block_start",
           json_pack("{s:i, s:{s:s, s:O, s:O, s:{}}}", "index", idx, "content_block", "type",
                     "tool_use", "id", json_object_get(call, "id"), "name",
                     json_object_get(call, "name"), "input")) < 0 ||
        ev(en, "content_block_delta",
           json_pack("{s:i, s:{s:s, s:O}}", "index", idx, "delta", "type", "input_json_delta",
                     "partial_json", json_object_get(call, "arguments"))) < 0)
        return -1;
    return ev(en, "content_block_stop", json_pack("{s:i}", "index", idx));
}

static int s_finish(void *ctx, int c, enum finish_reason why, const char *stop)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    en->ch[0].why = why;
    en->ch[0].finished = true;
    if (stop && !(en->ch[0].stop_seq = strdup(stop))) return -1;
    if (!en->job->req.stream) return 0;
    if (!en->had_text_block && !en->ch[0].calls && open_text(en) < 0)
        return -1; /* always one text block, unless the reply is tool calls */
    return close_block(en);
}

static int s_done(void *ctx, const struct usage *u)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    struct api_enc_choice *ch = &en->ch[0];
    if (en->job->req.stream) {
        json_t *usage = json_pack("{s:I, s:I, s:I, s:I}", "input_tokens",
                                  (json_int_t)(u->prompt_tokens - u->cached_tokens), "output_tokens",
                                  (json_int_t)u->completion_tokens, "cache_creation_input_tokens",
                                  (json_int_t)0, "cache_read_input_tokens",
                                  (json_int_t)u->cached_tokens);
        if (ev(en, "message_delta",
               json_pack("{s:{s:s, s:o}, s:o}", "delta", "stop_reason", stop_reason(ch),
                         "stop_sequence", ch->stop_seq ? json_string(ch->stop_seq) : json_null(),
                         "usage", usage)) < 0)
            return -1;
        if (ev(en, "message_stop", json_object()) < 0) return -1;
    } else {
        json_t *content = json_array();
        if (ch->reasoning.len)
            json_array_append_new(content,
                                  json_pack("{s:s, s:o, s:s}", "type", "thinking", "thinking",
                                            api_json_text(ch->reasoning.data, ch->reasoning.len),
                                            "signature", ""));
        /* text and tool_use blocks in reply order (each call knows the text before it) */
        const char *tx = ch->text.data ? ch->text.data : "";
        size_t i, from = 0;
        json_t *call;
        json_array_foreach(ch->calls, i, call) {
            size_t at = (size_t)json_integer_value(json_object_get(call, "text_at"));
            if (at > from && at <= ch->text.len) {
                json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                         api_json_text(tx + from, at - from)));
                from = at;
            }
            const char *a = json_string_value(json_object_get(call, "arguments"));
            json_t *input = json_loads(a ? a : "{}", 0, NULL);
            json_array_append_new(content,
                                  json_pack("{s:s, s:O, s:O, s:o}", "type", "tool_use", "id",
                                            json_object_get(call, "id"), "name",
                                            json_object_get(call, "name"), "input",
                                            input ? input : json_object()));
        }
        if (ch->text.len > from || !ch->calls)
            json_array_append_new(content, json_pack("{s:s, s:o}", "type", "text", "text",
                                                     api_json_text(tx + from, ch->text.len - from)));
        if (api_enc_json_reply(en, message_obj(en, content, stop_reason(ch), ch->stop_seq, u)) < 0)
            return -1;
    }
    api_enc_end(en);
    return 0;
}

static void s_error(void *ctx, const struct err *e)
{
    api_enc_fail_sse(ctx, "error", e);
}

/* The messages encoder: one ops table (sink hooks on a struct api_enc). */
const struct api_encoder api_enc_messages = {
    .hooks = {.start = s_start,
              .reasoning = s_reasoning,
              .text = s_text,
              .finish = s_finish,
              .tool_call = s_tool_call,
              .done = s_done,
              .error = s_error},
    .one_choice = true,
};
