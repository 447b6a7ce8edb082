/* Legacy Completions encoder: text_completion body or its SSE chunks + [DONE].
 * logprobs (when asked) in the legacy shape: {tokens, token_logprobs, top_logprobs: [{text: lp}],
 * text_offset} — offsets count bytes of the choice's text (echoed prompt included). */
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

static json_t *frame(struct api_enc *en, json_t *choices)
{
    struct request *r = &en->job->req;
    return json_pack("{s:s, s:s, s:I, s:s, s:o, s:s}", "id", r->id, "object", "text_completion",
                     "created", (json_int_t)r->created, "model", r->model, "choices", choices,
                     "system_fingerprint", en->fingerprint);
}

static json_t *choice(int idx, json_t *text, json_t *logprobs, const char *finish)
{
    return json_pack("{s:o, s:i, s:o, s:o}", "text", text, "index", idx, "logprobs",
                     logprobs ? logprobs : json_null(), "finish_reason",
                     finish ? json_string(finish) : json_null());
}

static json_t *lp_new(void)
{
    return json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs",
                     "text_offset");
}

static json_t *tok_str(struct api_enc *en, int32_t id)
{
    size_t n = 0;
    struct reply_sink *sk = &en->job->sink;
    const char *s = sk->token_text ? sk->token_text(sk->tctx, id, &n) : NULL;
    return api_json_text(s ? s : "", s ? n : 0);
}

/* Appends the entries of lp[0..nl) to the legacy object lpo; offset: the choice's text bytes
 * before them. */
static void lp_add(struct api_enc *en, json_t *lpo, const struct token_logprob *lp, int nl,
                   size_t offset)
{
    for (int i = 0; i < nl; i++) {
        json_array_append_new(json_object_get(lpo, "tokens"), tok_str(en, lp[i].token));
        json_array_append_new(json_object_get(lpo, "token_logprobs"), api_json_float(lp[i].logprob));
        json_t *top = json_object();
        for (int k = 0; k < lp[i].n_top && k < en->job->req.top_logprobs; k++) {
            json_t *t = tok_str(en, lp[i].top_token[k]);
            if (t && !json_object_get(top, json_string_value(t)))
                json_object_set_new(top, json_string_value(t), api_json_float(lp[i].top_logprob[k]));
            json_decref(t);
        }
        json_array_append_new(json_object_get(lpo, "top_logprobs"), top);
        json_array_append_new(json_object_get(lpo, "text_offset"), json_integer((json_int_t)offset));
    }
}

static int start(struct api_enc *en)
{
    if (en->started) return 0;
    en->started = true;
    struct request *r = &en->job->req;
    if (r->echo) /* each choice's text starts with its prompt (choice c: prompt c / n) */
        for (int c = 0; c < en->n_choices; c++) {
            const char *pt = r->n_prompts > 1 ? r->prompts[c / (r->n > 0 ? r->n : 1)].text
                                              : r->prompt_text;
            if (buf_puts(&en->ch[c].text, pt ? pt : "") < 0) return -1;
        }
    if (!r->stream) return 0;
    if (!en->job->t_first) en->job->t_first = mono_seconds();
    return pipe_begin(en->job->pipe, 200, "text/event-stream") < 0 && pipe_cancelled(en->job->pipe)
               ? -1
               : 0;
}

static int s_start(void *ctx) { return 0; }

static int s_text(void *ctx, int c, const char *s, size_t n, const struct token_logprob *lp, int nl)
{
    struct api_enc *en = ctx;
    struct request *r = &en->job->req;
    if (start(en) < 0) return -1;
    struct api_enc_choice *ch = &en->ch[c];
    json_t *lpo = NULL;
    if (r->logprobs && nl > 0) { /* offsets count the choice's text so far (echo included) */
        json_t **dst = r->stream ? &lpo : &ch->logprobs;
        if (!*dst && !(*dst = lp_new())) return -1;
        lp_add(en, *dst, lp, nl, ch->text.len);
    }
    if (!r->stream) return buf_append(&ch->text, s, n);
    /* the echoed prompt goes out with the choice's first chunk */
    struct buf t = {0};
    if (!ch->role_sent) {
        ch->role_sent = true;
        if (r->echo && buf_append(&t, ch->text.data ? ch->text.data : "", ch->text.len) < 0) goto oom;
    }
    if (buf_append(&t, s, n) < 0 || buf_append(&ch->text, s, n) < 0) goto oom;
    if (t.len == 0 && !lpo) {
        buf_free(&t);
        return 0;
    }
    json_t *text = api_json_text(t.data ? t.data : "", t.len);
    buf_free(&t);
    return api_enc_sse(en, NULL, frame(en, json_pack("[o]", choice(c, text, lpo, NULL))));
oom:
    buf_free(&t);
    json_decref(lpo);
    return -1;
}

/* Reasoning cannot arise without a template; were a raw prompt to open <think> itself, the
 * emitter has think routing off for raw prompts, so this only guards the sink contract. */
static int s_reasoning(void *ctx, int c, const char *s, size_t n)
{
    return s_text(ctx, c, s, n, NULL, 0);
}

static int s_finish(void *ctx, int c, enum finish_reason why, const char *stop)
{
    struct api_enc *en = ctx;
    if (start(en) < 0) return -1;
    en->ch[c].why = why;
    en->ch[c].finished = true;
    if (!en->job->req.stream) return 0;
    if (s_text(ctx, c, "", 0, NULL, 0) < 0) return -1; /* an echo with an empty reply */
    return api_enc_sse(en, NULL, frame(en, json_pack("[o]", choice(c, json_string(""), NULL,
                                                                   api_finish_reason_chat(why)))));
}

static json_t *usage_obj(const struct usage *u)
{
    return json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)u->prompt_tokens,
                     "completion_tokens", (json_int_t)u->completion_tokens, "total_tokens",
                     (json_int_t)(u->prompt_tokens + u->completion_tokens));
}

static int s_done(void *ctx, const struct usage *u)
{
    struct api_enc *en = ctx;
    struct request *r = &en->job->req;
    if (start(en) < 0) return -1;
    if (r->stream) return api_enc_openai_stream_end(en, frame(en, json_array()), usage_obj(u));
    json_t *choices = json_array();
    for (int c = 0; c < en->n_choices; c++) {
        struct api_enc_choice *ch = &en->ch[c];
        json_t *lp = r->logprobs ? (ch->logprobs ? json_incref(ch->logprobs) : lp_new()) : NULL;
        json_array_append_new(choices,
                              choice(c, api_json_text(ch->text.data ? ch->text.data : "", ch->text.len),
                                     lp, api_finish_reason_chat(ch->why)));
    }
    json_t *body = frame(en, choices);
    if (body) json_object_set_new(body, "usage", usage_obj(u));
    if (api_enc_json_reply(en, body) < 0) return -1;
    api_enc_end(en);
    return 0;
}

static void s_error(void *ctx, const struct err *e)
{
    api_enc_fail_sse(ctx, NULL, e);
}

/* The completions encoder: one ops table (sink hooks on a struct api_enc). */
const struct api_encoder api_enc_completions = {
    .hooks = {.start = s_start,
              .reasoning = s_reasoning,
              .text = s_text,
              .finish = s_finish,
              .done = s_done,
              .error = s_error},
    .one_choice = false,
};
