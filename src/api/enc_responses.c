/* Responses encoder: response object or the typed SSE event sequence (R-STREAM-2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static void make_item_id(char *out, size_t cap, const char *prefix)
{
    char *id = api_make_id(prefix);
    snprintf(out, cap, "%s", id ? id : prefix);
    free(id);
}

static json_t *reasoning_item(struct api_enc *en, const char *status)
{
    struct api_enc_choice *ch = &en->ch[0];
    return json_pack("{s:s, s:s, s:[], s:[{s:s, s:o}], s:s}", "id", en->rs_id, "type", "reasoning",
                     "summary", "content", "type", "reasoning_text", "text",
                     api_json_text(ch->reasoning.data ? ch->reasoning.data : "", ch->reasoning.len),
                     "status", status);
}

/* The output_text part; logprobs: the message's entries ([] unless include asked for them). */
static json_t *text_part(struct api_enc *en)
{
    struct api_enc_choice *ch = &en->ch[0];
    return json_pack("{s:s, s:o, s:[], s:o}", "type", "output_text", "text",
                     api_json_text(ch->text.data ? ch->text.data : "", ch->text.len), "annotations",
                     "logprobs", ch->logprobs ? json_deep_copy(ch->logprobs) : json_array());
}

/* entries in the shape of the text delta/done events (ResponseTextDeltaEvent.Logprob: token,
 * logprob, top_logprobs[{token, logprob}]; no bytes). */
static json_t *event_logprobs(const json_t *entries)
{
    json_t *a = entries ? json_deep_copy(entries) : json_array();
    size_t i, k;
    json_t *x, *t;
    json_array_foreach(a, i, x) {
        json_object_del(x, "bytes");
        json_array_foreach(json_object_get(x, "top_logprobs"), k, t) json_object_del(t, "bytes");
    }
    return a;
}

static json_t *message_item(struct api_enc *en, const char *status, bool with_content)
{
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "id", en->msg_id, "type", "message", "status",
                     status, "role", "assistant", "content",
                     with_content ? json_pack("[o]", text_part(en)) : json_array());
}

static json_t *usage_obj(const struct usage *u)
{
    return json_pack("{s:I, s:{s:I}, s:I, s:{s:I}, s:I}", "input_tokens",
                     (json_int_t)u->prompt_tokens, "input_tokens_details", "cached_tokens",
                     (json_int_t)u->cached_tokens, "output_tokens", (json_int_t)u->completion_tokens,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)u->reasoning_tokens,
                     "total_tokens", (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

/* The declared function tools in the Responses shape ({type, name, description?, parameters?});
 * the request holds them in the chat shape ({type, function:{…}}). */
static json_t *responses_tools(const json_t *tools)
{
    json_t *a = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) continue;
        json_t *o = json_deep_copy(fn);
        json_object_set_new(o, "type", json_string("function"));
        if (!json_object_get(o, "strict")) json_object_set_new(o, "strict", json_false());
        json_array_append_new(a, o);
    }
    return a;
}

/* The response object; final = every item closed (completed / incomplete / failed). */
static json_t *response_obj(struct api_enc *en, const char *status, const struct usage *u, bool final,
                            const struct err *e)
{
    struct request *r = &en->job->req;
    json_t *output = json_array();
    if (final) {
        if (en->had_rs) json_array_append_new(output, reasoning_item(en, "completed"));
        if (en->items) json_array_extend(output, en->items); /* messages cut by calls, calls */
        if (!en->items || en->msg_open || en->ch[0].text.len) /* no empty message after calls */
            json_array_append_new(output,
                                  message_item(en, !strcmp(status, "incomplete") ? "incomplete"
                                                                                 : "completed",
                                               true));
    }
    json_t *incomplete = json_null();
    if (!strcmp(status, "incomplete"))
        incomplete = json_pack("{s:s}", "reason", "max_output_tokens");
    json_t *error = e ? json_pack("{s:s, s:s}", "code", "server_error", "message", e->msg)
                      : json_null();
    json_t *instr = json_null();
    if (r->instructions) instr = api_json_text(r->instructions, strlen(r->instructions));
    json_t *o = json_pack(
        "{s:s, s:s, s:I, s:s, s:o, s:o, s:s, s:o, s:o, s:b, s:o, s:o, s:I, s:s, s:o, s:{s:{s:s}},"
        " s:{s:o, s:n}, s:o, s:s, s:b}",
        "id", r->id, "object", "response", "created_at", (json_int_t)r->created, "status", status,
        "error", error, "incomplete_details", incomplete, "model", r->model, "output", output,
        "usage", u ? usage_obj(u) : json_null(), "parallel_tool_calls", true, "temperature",
        api_json_float(r->sp.temperature), "top_p", api_json_float(r->sp.top_p), "max_output_tokens",
        (json_int_t)r->max_tokens, "tool_choice",
        !strcmp(r->constraint_param, "tool_choice") ? "required" : "auto", "tools",
        responses_tools(r->tools), "text", "format", "type", "text",
        "reasoning", "effort", r->reasoning ? json_string("medium") : json_null(), "summary",
        "metadata", r->metadata ? json_incref(r->metadata) : json_object(), "truncation",
        "disabled", "store", false);
    if (o) {
        json_object_set_new(o, "instructions", instr);
        json_object_set_new(o, "top_logprobs", json_integer(r->top_logprobs));
    } else {
        json_decref(instr);
    }
    return o;
}

static int ev(struct api_enc *en, const char *type, json_t *f)
{
    if (!f) return -1;
    json_object_set_new(f, "type", json_string(type));
    json_object_set_new(f, "sequence_number", json_integer(en->seq++));
    return api_enc_sse(en, type, f);
}

static int start(struct api_enc *en)
{
    if (en->started) return 0;
    en->started = true;
    if (!en->job->req.stream) return 0;
    pipe_begin(en->job->pipe, 200, "text/event-stream");
    if (ev(en, "response.created", json_pack("{s:o}", "response",
                                             response_obj(en, "in_progress", NULL, false, NULL))) < 0)
        return -1;
    return ev(en, "response.in_progress",
              json_pack("{s:o}", "response", response_obj(en, "in_progress", NULL, false, NULL)));
}

static int close_reasoning(struct api_enc *en)
{
    if (!en->rs_open) return 0;
    en->rs_open = false;
    struct api_enc_choice *ch = &en->ch[0];
    json_t *text = api_json_text(ch->reasoning.data ? ch->reasoning.data : "", ch->reasoning.len);
    if (ev(en, "response.reasoning_text.done",
           json_pack("{s:s, s:i, s:i, s:O}", "item_id", en->rs_id, "output_index", en->rs_index,
                     "content_index", 0, "text", text)) < 0 ||
        ev(en, "response.content_part.done",
           json_pack("{s:s, s:i, s:i, s:{s:s, s:O}}", "item_id", en->rs_id, "output_index",
                     en->rs_index, "content_index", 0, "part", "type", "reasoning_text", "text",
                     text)) < 0 ||
        ev(en, "response.output_item.done",
           json_pack("{s:i, s:o}", "output_index", en->rs_index, "item",
                     reasoning_item(en, "completed"))) < 0) {
        json_decref(text);
        return -1;
    }
    json_decref(text);
    return 0;
}

static int open_message(struct api_enc *en)
{
    if (en->msg_open) return 0;
    if (close_reasoning(en) < 0) return -1;
    en->msg_open = true;
    en->msg_index = en->out_index++;
    if (ev(en, "response.output_item.added",
           json_pack("{s:i, s:o}", "output_index", en->msg_index, "item",
                     message_item(en, "in_progress", false))) < 0)
        return -1;
    return ev(en, "response.content_part.added",
              json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[], s:[]}}", "item_id", en->msg_id,
                        "output_index", en->msg_index, "content_index", 0, "part", "type",
                        "output_text", "text", "", "annotations", "logprobs"));
}

static int s_start(void *ctx) { return 0; }

static int s_reasoning(void *ctx, int c, const char *s, size_t n)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    if (buf_append(&en->ch[0].reasoning, s, n) < 0) return -1;
    en->had_rs = true;
    if (!en->job->req.stream) return 0;
    if (!en->rs_open && !en->msg_open) {
        en->rs_open = true;
        en->rs_index = en->out_index++;
        if (ev(en, "response.output_item.added",
               json_pack("{s:i, s:{s:s, s:s, s:[], s:[], s:s}}", "output_index", en->rs_index,
                         "item", "id", en->rs_id, "type", "reasoning", "summary", "content",
                         "status", "in_progress")) < 0 ||
            ev(en, "response.content_part.added",
               json_pack("{s:s, s:i, s:i, s:{s:s, s:s}}", "item_id", en->rs_id, "output_index",
                         en->rs_index, "content_index", 0, "part", "type", "reasoning_text",
                         "text", "")) < 0)
            return -1;
    }
    return ev(en, "response.reasoning_text.delta",
              json_pack("{s:s, s:i, s:i, s:o}", "item_id", en->rs_id, "output_index", en->rs_index,
                        "content_index", 0, "delta", api_json_text(s, n)));
}

/* A text delta event carrying the logprobs of every token since the previous delta. */
static int text_delta(struct api_enc *en, const char *s, size_t n)
{
    json_t *lps = en->pend_lp ? en->pend_lp : json_array();
    en->pend_lp = NULL;
    return ev(en, "response.output_text.delta",
              json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id", en->msg_id, "output_index",
                        en->msg_index, "content_index", 0, "delta", api_json_text(s, n), "logprobs",
                        lps));
}

static int s_text(void *ctx, int c, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct api_enc *en = ctx;
    struct api_enc_choice *ch = &en->ch[0];
    bool stream = en->job->req.stream;
    if (start(en) < 0) return -1;
    if (buf_append(&ch->text, s, n) < 0) return -1;
    if (en->job->req.logprobs && nl > 0) {
        if (!ch->logprobs && !(ch->logprobs = json_array())) return -1;
        if (stream && !en->pend_lp && !(en->pend_lp = json_array())) return -1;
        for (int i = 0; i < nl; i++) {
            if (json_array_append_new(ch->logprobs, api_enc_logprob_entry(en, &lp[i], true)) < 0 ||
                (stream &&
                 json_array_append_new(en->pend_lp, api_enc_logprob_entry(en, &lp[i], false)) < 0))
                return -1;
        }
    }
    if (!stream || n == 0) return 0; /* records of text-less tokens ride on the next delta */
    if (open_message(en) < 0) return -1;
    return text_delta(en, s, n);
}

/* Forgets the logprobs of the message so far (it was closed, or there was none to close). */
static void drop_logprobs(struct api_enc *en)
{
    json_decref(en->ch[0].logprobs);
    en->ch[0].logprobs = NULL;
    json_decref(en->pend_lp);
    en->pend_lp = NULL;
}

static int close_message(struct api_enc *en, const char *status);

/* R-TOOL-2 / R-STREAM-2: a function_call item after the message item (the message so far is
 * closed first; text after the call opens a new message item). */
static int s_tool_call(void *ctx, int c, const char *name, const char *args, size_t n)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    json_t *call = api_enc_add_call(en, 0, "call_", name, args, n);
    if (!call || (!en->items && !(en->items = json_array()))) return -1;
    bool stream = en->job->req.stream;
    if (en->msg_open || en->ch[0].text.len) {
        if (stream && close_message(en, "completed") < 0) return -1;
        json_array_append_new(en->items, message_item(en, "completed", true));
        buf_reset(&en->ch[0].text);
        drop_logprobs(en);
        en->msg_open = false;
        make_item_id(en->msg_id, sizeof en->msg_id, "msg_");
    } else {
        drop_logprobs(en); /* text-less tokens before a call: no message to hold them */
        if (stream && close_reasoning(en) < 0) return -1;
    }
    char *fid = api_make_id("fc_");
    json_t *item = json_pack("{s:s, s:s, s:s, s:O, s:O, s:O}", "id", fid ? fid : "fc_", "type",
                             "function_call", "status", "completed", "arguments",
                             json_object_get(call, "arguments"), "call_id",
                             json_object_get(call, "id"), "name", json_object_get(call, "name"));
    free(fid);
    if (!item || json_array_append_new(en->items, item) < 0) return -1;
    if (!stream) return 0;
    int idx = en->out_index++;
    json_t *added = json_deep_copy(item);
    json_object_set_new(added, "status", json_string("in_progress"));
    json_object_set_new(added, "arguments", json_string(""));
    json_t *iid = json_object_get(item, "id");
    if (ev(en, "response.output_item.added",
           json_pack("{s:i, s:o}", "output_index", idx, "item", added)) < 0 ||
        ev(en, "response.function_call_arguments.delta",
           json_pack("{s:O, s:i, s:O}", "item_id", iid, "output_index", idx, "delta",
                     json_object_get(item, "arguments"))) < 0 ||
        ev(en, "response.function_call_arguments.done",
           json_pack("{s:O, s:i, s:O, s:O}", "item_id", iid, "output_index", idx, "name",
                     json_object_get(item, "name"), "arguments",
                     json_object_get(item, "arguments"))) < 0)
        return -1;
    return ev(en, "response.output_item.done",
              json_pack("{s:i, s:O}", "output_index", idx, "item", item));
}

static int s_finish(void *ctx, int c, enum finish_reason why, const char *stop)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    en->ch[0].why = why;
    en->ch[0].finished = true;
    if (!en->job->req.stream) return 0;
    if (en->items && !en->msg_open && !en->ch[0].text.len) return 0; /* ended with calls */
    if (open_message(en) < 0) return -1;
    return close_message(en, why == FINISH_LENGTH ? "incomplete" : "completed");
}

/* The .done mirrors of the open message item. */
static int close_message(struct api_enc *en, const char *status)
{
    struct api_enc_choice *ch = &en->ch[0];
    /* trailing text-less tokens (e.g. whitespace a tool call or the end swallowed) */
    if (en->pend_lp && json_array_size(en->pend_lp) && text_delta(en, "", 0) < 0) return -1;
    if (ev(en, "response.output_text.done",
           json_pack("{s:s, s:i, s:i, s:o, s:o}", "item_id", en->msg_id, "output_index",
                     en->msg_index, "content_index", 0, "text",
                     api_json_text(ch->text.data ? ch->text.data : "", ch->text.len), "logprobs",
                     event_logprobs(ch->logprobs))) < 0)
        return -1;
    if (ev(en, "response.content_part.done",
           json_pack("{s:s, s:i, s:i, s:o}", "item_id", en->msg_id, "output_index", en->msg_index,
                     "content_index", 0, "part", text_part(en))) < 0)
        return -1;
    return ev(en, "response.output_item.done",
              json_pack("{s:i, s:o}", "output_index", en->msg_index, "item",
                        message_item(en, status, true)));
}

static int s_done(void *ctx, const struct usage *u)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    bool incomplete = en->ch[0].why == FINISH_LENGTH;
    const char *status = incomplete ? "incomplete" : "completed";
    json_t *resp = response_obj(en, status, u, true, NULL);
    if (en->job->req.stream) {
        if (ev(en, incomplete ? "response.incomplete" : "response.completed",
               json_pack("{s:o}", "response", resp)) < 0)
            return -1;
    } else if (api_enc_json_reply(en, resp) < 0) {
        return -1;
    }
    api_enc_end(en);
    return 0;
}

static void s_error(void *ctx, const struct err *e)
{
    struct api_enc *en = ctx;
    if (api_enc_fail_early(en, e)) return;
    /* in-band: an error event, then response.failed */
    json_t *f = json_pack("{s:s, s:s%, s:o}", "code", err_code_name(e->code), "message", e->msg,
                          strlen(e->msg), "param", e->param[0] ? json_string(e->param) : json_null());
    ev(en, "error", f);
    ev(en, "response.failed",
       json_pack("{s:o}", "response", response_obj(en, "failed", NULL, false, e)));
    pipe_fail(en->job->pipe, err_http_status(e->code), NULL);
    en->ended = true;
}

static void enc_init(struct api_enc *en)
{
    make_item_id(en->rs_id, sizeof en->rs_id, "rs_");
    make_item_id(en->msg_id, sizeof en->msg_id, "msg_");
}

/* The responses encoder: one ops table (sink hooks on a struct api_enc). */
const struct api_encoder api_enc_responses = {
    .hooks = {.start = s_start,
              .reasoning = s_reasoning,
              .text = s_text,
              .finish = s_finish,
              .tool_call = s_tool_call,
              .done = s_done,
              .error = s_error},
    .one_choice = true,
    .init = enc_init,
};
