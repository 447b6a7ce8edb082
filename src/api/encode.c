/* Shared encoder plumbing: SSE framing into the pipe, plain errors, logprob entries. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "base/hash.h"

void api_build_fingerprint(char *out, size_t cap)
{
    static const char stamp[] = __DATE__ " " __TIME__ " " __VERSION__;
    uint64_t h = hash_fnv1a64_str(stamp);
    snprintf(out, cap, "fp_%012llx", (unsigned long long)(h & 0xffffffffffffull));
}

struct api_enc *api_enc_new(struct job *job)
{
    struct api_enc *en = calloc(1, sizeof *en);
    if (!en) return NULL;
    en->job = job;
    api_build_fingerprint(en->fingerprint, sizeof en->fingerprint);
    en->n_choices = (job->req.n > 0 ? job->req.n : 1) *
                    (job->req.n_prompts > 1 ? job->req.n_prompts : 1); /* <= REQ_MAX_CHOICES */
    for (int i = 0; i < en->n_choices; i++) en->ch[i].why = FINISH_NONE;
    return en;
}

static const struct api_encoder *const ENCODERS[DIALECT_COUNT] = {
    [DIALECT_CHAT] = &api_enc_chat,
    [DIALECT_RESPONSES] = &api_enc_responses,
    [DIALECT_MESSAGES] = &api_enc_messages,
    [DIALECT_COMPLETIONS] = &api_enc_completions,
    [DIALECT_EMBEDDINGS] = &api_enc_embeddings,
};

int api_sink_install(struct job *job)
{
    if ((unsigned)job->req.dialect >= DIALECT_COUNT) return -1;
    const struct api_encoder *ops = ENCODERS[job->req.dialect];
    struct api_enc *en = api_enc_new(job);
    if (!en) return -1;
    if (ops->one_choice) en->n_choices = 1;
    if (ops->init) ops->init(en);
    job->sink = ops->hooks;
    job->sink.ctx = en;
    job->sink_free = api_enc_free;
    return 0;
}

void api_enc_free(void *ctx)
{
    struct api_enc *en = ctx;
    if (!en) return;
    for (int i = 0; i < REQ_MAX_CHOICES; i++) {
        buf_free(&en->ch[i].text);
        buf_free(&en->ch[i].reasoning);
        free(en->ch[i].stop_seq);
        if (en->ch[i].logprobs) json_decref(en->ch[i].logprobs);
        if (en->ch[i].calls) json_decref(en->ch[i].calls);
    }
    if (en->items) json_decref(en->items);
    if (en->pend_lp) json_decref(en->pend_lp);
    buf_free(&en->frame);
    free(en);
}

int api_enc_write(struct api_enc *en, const char *s, size_t n)
{
    if (pipe_abandoned(en->job->pipe)) return -1; /* interrupted: the error ending still goes */
    return pipe_write(en->job->pipe, s, n);
}

int api_enc_sse(struct api_enc *en, const char *ev, json_t *f)
{
    if (!f) return -1;
    buf_reset(&en->frame);
    if (ev) buf_printf(&en->frame, "event: %s\n", ev);
    buf_puts(&en->frame, "data: ");
    api_json_append(&en->frame, f);
    buf_puts(&en->frame, "\n\n");
    return api_enc_write(en, en->frame.data, en->frame.len);
}

void api_enc_end(struct api_enc *en)
{
    pipe_close(en->job->pipe);
    en->ended = true;
}

int api_enc_openai_stream_end(struct api_enc *en, json_t *frame, json_t *usage)
{
    if (en->job->req.include_usage) {
        if (!frame || json_object_set_new(frame, "usage", usage) < 0) {
            if (frame) json_decref(frame);
            return -1;
        }
        if (api_enc_sse(en, NULL, frame) < 0) return -1;
    } else {
        if (frame) json_decref(frame);
        if (usage) json_decref(usage);
    }
    if (api_enc_write(en, "data: [DONE]\n\n", 14) < 0) return -1;
    api_enc_end(en);
    return 0;
}

void api_enc_fail_plain(struct api_enc *en, const struct err *e)
{
    struct buf b = {0};
    api_error_body(en->job->req.dialect, e, &b);
    pipe_fail(en->job->pipe, err_http_status(e->code), b.data);
    buf_free(&b);
    en->ended = true;
}

bool api_enc_fail_early(struct api_enc *en, const struct err *e)
{
    if (en->ended) return true;
    if (en->started && en->job->req.stream) return false;
    api_enc_fail_plain(en, e);
    return true;
}

void api_enc_fail_sse(struct api_enc *en, const char *ev, const struct err *e)
{
    if (api_enc_fail_early(en, e)) return;
    struct buf b = {0};
    if (ev) buf_printf(&b, "event: %s\n", ev);
    buf_puts(&b, "data: ");
    api_error_body(en->job->req.dialect, e, &b);
    buf_puts(&b, "\n\n");
    pipe_fail(en->job->pipe, err_http_status(e->code), b.data);
    buf_free(&b);
    en->ended = true;
}

int api_enc_json_reply(struct api_enc *en, json_t *body)
{
    buf_reset(&en->frame);
    api_json_append(&en->frame, body);
    pipe_begin(en->job->pipe, 200, "application/json");
    return api_enc_write(en, en->frame.data, en->frame.len);
}

static json_t *bytes_array(const char *s, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer((unsigned char)s[i]));
    return a;
}

static json_t *token_obj(struct api_enc *en, int32_t id, float logprob, bool with_bytes)
{
    size_t n = 0;
    const char *s = "";
    struct reply_sink *sk = &en->job->sink;
    if (sk->token_text) s = sk->token_text(sk->tctx, id, &n);
    if (!s) {
        s = "";
        n = 0;
    }
    json_t *o = json_pack("{s:o, s:o}", "token", api_json_text(s, n), "logprob", api_json_float(logprob));
    if (o && with_bytes) json_object_set_new(o, "bytes", bytes_array(s, n));
    return o;
}

json_t *api_enc_logprob_entry(struct api_enc *en, const struct token_logprob *lp, bool with_bytes)
{
    json_t *o = token_obj(en, lp->token, lp->logprob, with_bytes);
    json_t *top = json_array();
    if (!o || !top) {
        json_decref(o);
        json_decref(top);
        return NULL;
    }
    for (int i = 0; i < lp->n_top && i < REQ_MAX_TOP_LOGPROBS; i++)
        json_array_append_new(top, token_obj(en, lp->top_token[i], lp->top_logprob[i], with_bytes));
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

const char *api_finish_reason_chat(enum finish_reason why)
{
    switch (why) {
    case FINISH_LENGTH: return "length";
    case FINISH_TOOL_CALLS: return "tool_calls";
    default: return "stop";
    }
}

json_t *api_enc_add_call(struct api_enc *en, int c, const char *id_prefix, const char *name,
                     const char *args, size_t n_args)
{
    struct api_enc_choice *ch = &en->ch[c];
    if (!ch->calls && !(ch->calls = json_array())) return NULL;
    char *id = api_make_id(id_prefix);
    /* text_at: reply text bytes before this call (to keep blocks in order, messages) */
    json_t *call = id ? json_pack("{s:s, s:s, s:s%, s:I}", "id", id, "name", name, "arguments", args,
                                  n_args, "text_at", (json_int_t)ch->text.len)
                      : NULL;
    free(id);
    if (!call || json_array_append_new(ch->calls, call) < 0) return NULL;
    return call;
}
