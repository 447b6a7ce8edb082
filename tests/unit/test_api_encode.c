/* api encoders: event sequences -> exact wire shapes (R-STREAM-1..3, R-ERR-1). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#include "api/api.h"
#include "api/api_internal.h"

static struct job *mkjob(enum dialect d, bool stream)
{
    struct job *j = job_new();
    j->req.dialect = d;
    j->req.stream = stream;
    j->req.model = strdup("m");
    j->req.id = strdup("id1");
    j->req.max_tokens = 10;
    cr_assert_eq(api_sink_install(j), 0);
    return j;
}

static char *drain(struct job *j, int *status)
{
    const char *ct;
    cr_assert_eq(pipe_wait_head(j->pipe, 10, status, &ct), 1);
    static char out[65536];
    size_t n = 0;
    long k;
    while ((k = pipe_read(j->pipe, out + n, sizeof out - 1 - n, 10)) > 0) n += (size_t)k;
    out[n] = 0;
    return out;
}

static void reply(struct job *j, bool think, const char *stop)
{
    struct reply_sink *s = &j->sink;
    if (think) {
        cr_assert_eq(s->reasoning(s->ctx, 0, "hmm", 3), 0);
        cr_assert_eq(s->reasoning(s->ctx, 0, " ok", 3), 0);
    }
    cr_assert_eq(s->text(s->ctx, 0, "Hel", 3, NULL, 0), 0);
    cr_assert_eq(s->text(s->ctx, 0, "lo\xe2\x82\xac", 5, NULL, 0), 0);
    cr_assert_eq(s->finish(s->ctx, 0, stop ? FINISH_STOP : FINISH_LENGTH, stop), 0);
    struct usage u = {.prompt_tokens = 11, .completion_tokens = 4};
    cr_assert_eq(s->done(s->ctx, &u), 0);
}

Test(api_encode, chat_nonstream)
{
    struct job *j = mkjob(DIALECT_CHAT, false);
    reply(j, true, NULL);
    int st;
    json_t *o = json_loads(drain(j, &st), 0, NULL);
    cr_assert_not_null(o);
    cr_assert_eq(st, 200);
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    cr_assert_str_eq(json_string_value(json_object_get(m, "content")), "Hello\xe2\x82\xac");
    cr_assert_str_eq(json_string_value(json_object_get(m, "reasoning_content")), "hmm ok");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0),
                                                       "finish_reason")), "length");
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "total_tokens")), 15);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(json_object_get(o, "usage"),
                                                                    "prompt_tokens_details"), "cached_tokens")), 0);
    json_decref(o);
    job_unref(j);
}

Test(api_encode, chat_stream_frames)
{
    struct job *j = mkjob(DIALECT_CHAT, true);
    j->req.include_usage = true;
    reply(j, false, "X");
    int st;
    char *s = drain(j, &st);
    cr_assert_eq(pipe_state(j->pipe), PIPE_DONE);
    /* a role chunk of its own first (as OpenAI's), bare content deltas, finish chunk, usage
     * chunk, [DONE]; a stable build id as system_fingerprint */
    const char *first = strstr(s, "data: ");
    cr_assert(first && !strncmp(strstr(first, "\"delta\":"), "\"delta\":{\"role\":\"assistant\",\"content\":\"\"}", 41), "%s", s);
    cr_assert(strstr(s, "\"delta\":{\"content\":\"Hel\"}"), "%s", s);
    cr_assert(!strstr(strstr(s, "\"Hel\"") , "\"role\""), "%s", s);
    cr_assert(strstr(s, "\"system_fingerprint\":\"fp_"), "%s", s);
    cr_assert(strstr(s, "\"finish_reason\":\"stop\""), "%s", s);
    cr_assert(strstr(s, "\"choices\":[],"), "%s", s);
    size_t n = strlen(s);
    cr_assert(n > 14 && !strcmp(s + n - 14, "data: [DONE]\n\n"));
    job_unref(j);
}

Test(api_encode, responses_stream_sequence)
{
    struct job *j = mkjob(DIALECT_RESPONSES, true);
    reply(j, true, "X");
    int st;
    char *s = drain(j, &st);
    static const char *const order[] = {
        "response.created", "response.in_progress", "response.output_item.added",
        "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.output_item.done", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"};
    const char *p = s;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        char key[96];
        snprintf(key, sizeof key, "event: %s\n", order[i]);
        const char *q = strstr(p, key);
        cr_assert_not_null(q, "missing %s after offset %td in\n%s", order[i], p - s, s);
        p = q + 1;
    }
    cr_assert(strstr(s, "\"sequence_number\":0"));
    cr_assert(strstr(s, "\"status\":\"completed\""));
    job_unref(j);
}

Test(api_encode, messages_nonstream_and_stream)
{
    struct job *j = mkjob(DIALECT_MESSAGES, false);
    reply(j, true, "X");
    int st;
    json_t *o = json_loads(drain(j, &st), 0, NULL);
    cr_assert_not_null(o);
    cr_assert_str_eq(json_string_value(json_object_get(o, "stop_reason")), "stop_sequence");
    cr_assert_str_eq(json_string_value(json_object_get(o, "stop_sequence")), "X");
    json_t *c = json_object_get(o, "content");
    cr_assert_eq(json_array_size(c), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 0), "type")), "thinking");
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 1), "text")), "Hello\xe2\x82\xac");
    json_decref(o);
    job_unref(j);

    j = mkjob(DIALECT_MESSAGES, true);
    reply(j, false, NULL);
    char *s = drain(j, &st);
    cr_assert(strstr(s, "event: message_start\n"));
    cr_assert(strstr(s, "\"type\":\"text_delta\""));
    cr_assert(strstr(s, "\"stop_reason\":\"max_tokens\""), "%s", s);
    cr_assert(strstr(s, "event: message_stop\n"));
    job_unref(j);
}

Test(api_encode, errors_plain_before_start_inband_after)
{
    struct err e;
    err_set_param(&e, ERR_CONTEXT, "messages", "prompt too long");
    struct job *j = mkjob(DIALECT_MESSAGES, true);
    j->sink.error(j->sink.ctx, &e);
    int st;
    json_t *o = json_loads(drain(j, &st), 0, NULL);
    cr_assert_eq(st, 400);
    cr_assert_str_eq(json_string_value(json_object_get(o, "type")), "error");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "error"), "type")),
                     "invalid_request_error");
    json_decref(o);
    job_unref(j);

    j = mkjob(DIALECT_CHAT, true);
    j->sink.text(j->sink.ctx, 0, "a", 1, NULL, 0);
    err_set(&e, ERR_INTERNAL, "boom");
    j->sink.error(j->sink.ctx, &e);
    char *s = drain(j, &st);
    cr_assert_eq(st, 200, "stream already started");
    cr_assert(strstr(s, "data: {\"error\":{\"message\":\"boom\""), "%s", s);
    cr_assert_eq(pipe_state(j->pipe), PIPE_FAILED);
    job_unref(j);

    j = mkjob(DIALECT_RESPONSES, true);
    j->sink.text(j->sink.ctx, 0, "a", 1, NULL, 0);
    j->sink.error(j->sink.ctx, &e);
    s = drain(j, &st);
    cr_assert(strstr(s, "event: error\n") && strstr(s, "event: response.failed\n"), "%s", s);
    job_unref(j);
}

/* Responses logprobs: a fake vocabulary (token id -> its text) and one record per token. */
static const char *fake_token_text(void *tctx, int32_t id, size_t *len)
{
    static const char *const vocab[] = {"Hel", "lo", "\xe2\x82\xac", " ", "x", "y"};
    const char *s = id >= 0 && id < 6 ? vocab[id] : "";
    *len = strlen(s);
    return s;
}

static struct token_logprob mk_lp(int32_t tok, float lp)
{
    /* the chosen token first, then two alternatives (ids 4, 5), descending */
    struct token_logprob r = {.token = tok, .logprob = lp, .n_top = 2,
                              .top_token = {tok, tok == 4 ? 5 : 4},
                              .top_logprob = {lp, lp - 1.5f}};
    return r;
}

static struct job *mkjob_lp(bool stream)
{
    struct job *j = mkjob(DIALECT_RESPONSES, stream);
    j->req.logprobs = true;
    j->req.top_logprobs = 2;
    j->sink.token_text = fake_token_text;
    return j;
}

/* Text "Hel" "lo€" with records for tokens 0, 1, 2 (token 2 arrives with the second delta), then
 * a text-less token 3 (whitespace the end swallowed), then finish + done. */
static void reply_lp(struct job *j)
{
    struct reply_sink *s = &j->sink;
    struct token_logprob a[3] = {mk_lp(0, -0.25f), mk_lp(1, -0.5f), mk_lp(2, -1.0f)};
    struct token_logprob ws = mk_lp(3, -2.0f);
    cr_assert_eq(s->text(s->ctx, 0, "Hel", 3, &a[0], 1), 0);
    cr_assert_eq(s->text(s->ctx, 0, "lo\xe2\x82\xac", 5, &a[1], 2), 0);
    cr_assert_eq(s->text(s->ctx, 0, "", 0, &ws, 1), 0);
    cr_assert_eq(s->finish(s->ctx, 0, FINISH_STOP, NULL), 0);
    struct usage u = {.prompt_tokens = 5, .completion_tokens = 4};
    cr_assert_eq(s->done(s->ctx, &u), 0);
}

/* Checks one entry: token text, logprob, bytes present or absent, two alternatives descending
 * with the chosen token first. */
static void check_entry(json_t *x, const char *tok, double lp, bool bytes)
{
    cr_assert_str_eq(json_string_value(json_object_get(x, "token")), tok);
    cr_assert_float_eq(json_real_value(json_object_get(x, "logprob")), lp, 1e-6);
    json_t *b = json_object_get(x, "bytes");
    cr_assert_eq(b != NULL, bytes);
    if (bytes) {
        cr_assert_eq(json_array_size(b), strlen(tok));
        for (size_t i = 0; i < strlen(tok); i++)
            cr_assert_eq(json_integer_value(json_array_get(b, i)), (unsigned char)tok[i]);
    }
    json_t *top = json_object_get(x, "top_logprobs");
    cr_assert_eq(json_array_size(top), 2);
    cr_assert_str_eq(json_string_value(json_object_get(json_array_get(top, 0), "token")), tok);
    cr_assert_float_eq(json_real_value(json_object_get(json_array_get(top, 0), "logprob")), lp, 1e-6);
    cr_assert_float_eq(json_real_value(json_object_get(json_array_get(top, 1), "logprob")), lp - 1.5,
                       1e-6);
    cr_assert_eq(json_object_get(json_array_get(top, 1), "bytes") != NULL, bytes);
}

static void check_full_list(json_t *lps)
{
    static const char *const toks[] = {"Hel", "lo", "\xe2\x82\xac", " "};
    static const double v[] = {-0.25, -0.5, -1.0, -2.0};
    cr_assert_eq(json_array_size(lps), 4);
    for (size_t i = 0; i < 4; i++) check_entry(json_array_get(lps, i), toks[i], v[i], true);
}

Test(api_encode, responses_logprobs_nonstream)
{
    struct job *j = mkjob_lp(false);
    reply_lp(j);
    int st;
    json_t *o = json_loads(drain(j, &st), 0, NULL);
    cr_assert_not_null(o);
    cr_assert_eq(json_integer_value(json_object_get(o, "top_logprobs")), 2);
    json_t *part = json_array_get(json_object_get(json_array_get(json_object_get(o, "output"), 0),
                                                  "content"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(part, "type")), "output_text");
    check_full_list(json_object_get(part, "logprobs"));
    json_decref(o);
    job_unref(j);

    /* without include: the records the sampler might still pass are not rendered */
    j = mkjob(DIALECT_RESPONSES, false);
    j->sink.token_text = fake_token_text;
    reply_lp(j);
    o = json_loads(drain(j, &st), 0, NULL);
    part = json_array_get(json_object_get(json_array_get(json_object_get(o, "output"), 0),
                                          "content"), 0);
    cr_assert_eq(json_array_size(json_object_get(part, "logprobs")), 0);
    cr_assert_not_null(json_object_get(part, "logprobs"), "logprobs: [] is always present");
    json_decref(o);
    job_unref(j);
}

/* The data: payloads of every event of one type, in order (returned array owned by the caller). */
static json_t *events_of(const char *s, const char *type)
{
    json_t *a = json_array();
    char key[96];
    snprintf(key, sizeof key, "event: %s\ndata: ", type);
    for (const char *p = strstr(s, key); p; p = strstr(p + 1, key)) {
        const char *d = p + strlen(key);
        json_t *o = json_loadb(d, (size_t)(strstr(d, "\n\n") - d), 0, NULL);
        cr_assert_not_null(o);
        json_array_append_new(a, o);
    }
    return a;
}

Test(api_encode, responses_logprobs_stream)
{
    struct job *j = mkjob_lp(true);
    reply_lp(j);
    int st;
    char *s = drain(j, &st);
    json_t *deltas = events_of(s, "response.output_text.delta");
    /* "Hel" [0], "lo€" [1, 2], then "" [3]: the text-less token's record before the done event */
    cr_assert_eq(json_array_size(deltas), 3, "%s", s);
    static const char *const texts[] = {"Hel", "lo\xe2\x82\xac", ""};
    static const size_t counts[] = {1, 2, 1};
    static const char *const toks[] = {"Hel", "lo", "\xe2\x82\xac", " "};
    static const double v[] = {-0.25, -0.5, -1.0, -2.0};
    size_t k = 0;
    for (size_t i = 0; i < 3; i++) {
        json_t *d = json_array_get(deltas, i);
        cr_assert_str_eq(json_string_value(json_object_get(d, "delta")), texts[i]);
        json_t *lps = json_object_get(d, "logprobs");
        cr_assert_eq(json_array_size(lps), counts[i]);
        for (size_t m = 0; m < counts[i]; m++, k++)
            check_entry(json_array_get(lps, m), toks[k], v[k], false);
    }
    json_t *done = events_of(s, "response.output_text.done");
    cr_assert_eq(json_array_size(done), 1);
    json_t *dl = json_object_get(json_array_get(done, 0), "logprobs");
    cr_assert_eq(json_array_size(dl), 4);
    for (size_t i = 0; i < 4; i++) check_entry(json_array_get(dl, i), toks[i], v[i], false);
    cr_assert(strstr(s, "event: response.output_text.done") > strstr(s, "\"delta\":\"\""));
    json_t *comp = events_of(s, "response.completed");
    json_t *resp = json_object_get(json_array_get(comp, 0), "response");
    json_t *part = json_array_get(json_object_get(json_array_get(json_object_get(resp, "output"), 0),
                                                  "content"), 0);
    check_full_list(json_object_get(part, "logprobs"));
    json_decref(deltas);
    json_decref(done);
    json_decref(comp);
    job_unref(j);
}

Test(api_encode, responses_logprobs_split_by_tool_call)
{
    struct job *j = mkjob_lp(false);
    struct reply_sink *s = &j->sink;
    struct token_logprob a = mk_lp(4, -0.1f), b = mk_lp(5, -0.2f), ws = mk_lp(3, -0.3f);
    cr_assert_eq(s->text(s->ctx, 0, "x", 1, &a, 1), 0);
    cr_assert_eq(s->tool_call(s->ctx, 0, "f", "{}", 2), 0);
    cr_assert_eq(s->text(s->ctx, 0, "", 0, &ws, 1), 0); /* whitespace between two calls */
    cr_assert_eq(s->tool_call(s->ctx, 0, "g", "{}", 2), 0);
    cr_assert_eq(s->text(s->ctx, 0, "y", 1, &b, 1), 0);
    cr_assert_eq(s->finish(s->ctx, 0, FINISH_STOP, NULL), 0);
    struct usage u = {.prompt_tokens = 5, .completion_tokens = 4};
    cr_assert_eq(s->done(s->ctx, &u), 0);
    int st;
    json_t *o = json_loads(drain(j, &st), 0, NULL);
    json_t *out = json_object_get(o, "output");
    cr_assert_eq(json_array_size(out), 4, "message, call, call, message");
    json_t *l0 = json_object_get(json_array_get(json_object_get(json_array_get(out, 0), "content"), 0),
                                 "logprobs");
    json_t *l3 = json_object_get(json_array_get(json_object_get(json_array_get(out, 3), "content"), 0),
                                 "logprobs");
    cr_assert_eq(json_array_size(l0), 1);
    check_entry(json_array_get(l0, 0), "x", -0.1, true);
    cr_assert_eq(json_array_size(l3), 1, "each message holds only its own tokens");
    check_entry(json_array_get(l3, 0), "y", -0.2, true);
    json_decref(o);
    job_unref(j);
}

/* R-MAP echo: reals print with the fewest digits that read back (jansson's %.17g printed 0.7 as
 * 0.69999999999999996); floats round through their own shortest spelling first. */
Test(api_encode, json_shortest_reals)
{
    json_t *o = json_pack("{s:f, s:f, s:f, s:f, s:o, s:o, s:s, s:i}", "a", 0.7, "b", 1e16, "c", 1.0,
                          "d", -2.5e-7, "t", api_json_float(0.7f), "n", api_json_float(NAN), "s",
                          "q\"\\\x01/\xc3\xa9\n", "i", 42);
    struct buf b = {0};
    api_json_append(&b, o);
    cr_assert_str_eq(b.data, "{\"a\":0.7,\"b\":1e16,\"c\":1.0,\"d\":-2.5e-7,\"t\":0.7,\"n\":null,"
                             "\"s\":\"q\\\"\\\\\\u0001/\xc3\xa9\\n\",\"i\":42}");
    buf_free(&b);
}

/* ---- failures the queue reports get each dialect's shape (serve/queue.c writes none) ---- */

static void run_nothing(void *arg, struct job *j)
{
    (void)arg;
    (void)j; /* a backend bug: returns without ending the stream */
}

static void wait_ended(struct job *j)
{
    for (int i = 0; i < 5000 && pipe_state(j->pipe) == PIPE_OPEN; i++)
        usleep(1000);
    cr_assert_neq(pipe_state(j->pipe), PIPE_OPEN, "the queue never ended the stream");
}

Test(api_encode, unfinished_reply_error_has_the_dialects_shape)
{
    struct err e = {0};
    struct queue *q = queue_new(4, run_nothing, NULL, &e);
    cr_assert_not_null(q, "%s", e.msg);
    struct job *a = mkjob(DIALECT_MESSAGES, false), *o = mkjob(DIALECT_CHAT, false);
    cr_assert_eq(queue_push(q, a, &e), 0);
    cr_assert_eq(queue_push(q, o, &e), 0);
    wait_ended(a);
    wait_ended(o);
    int status = 0;
    json_t *ja = json_loads(drain(a, &status), 0, NULL);
    cr_assert_eq(status, 500);
    cr_assert_not_null(ja);
    /* Anthropic: {"type":"error","error":{"type":"api_error","message":…}} (was OpenAI-shaped) */
    cr_assert_str_eq(json_string_value(json_object_get(ja, "type")), "error");
    json_t *er = json_object_get(ja, "error");
    cr_assert_str_eq(json_string_value(json_object_get(er, "type")), "api_error");
    cr_assert(strstr(json_string_value(json_object_get(er, "message")), "not finished"));
    cr_assert_null(json_object_get(er, "param"));
    json_t *jo = json_loads(drain(o, &status), 0, NULL);
    cr_assert_eq(status, 500);
    cr_assert_str_eq(
        json_string_value(json_object_get(json_object_get(jo, "error"), "type")), "server_error");
    cr_assert_null(json_object_get(jo, "type"));
    json_decref(ja);
    json_decref(jo);
    queue_free(q);
    job_unref(a);
    job_unref(o);
}

static void run_block(void *arg, struct job *j)
{
    atomic_int *go = arg;
    while (!atomic_load(go))
        usleep(1000);
    pipe_close(j->pipe);
}

Test(api_encode, queue_full_error_has_the_dialects_shape)
{
    struct err e = {0};
    static atomic_int go;
    atomic_store(&go, 0);
    struct queue *q = queue_new(1, run_block, &go, &e);
    cr_assert_not_null(q, "%s", e.msg);
    struct job *r = mkjob(DIALECT_CHAT, false), *w = mkjob(DIALECT_CHAT, false),
               *x = mkjob(DIALECT_MESSAGES, false);
    cr_assert_eq(queue_push(q, r, &e), 0);
    while (!queue_busy(q))
        usleep(1000);
    cr_assert_eq(queue_push(q, w, &e), 0);
    cr_assert_eq(queue_push(q, x, &e), -1);
    cr_assert_eq(err_http_status(e.code), 429);
    struct buf b = {0};
    api_error_body(DIALECT_MESSAGES, &e, &b); /* what the server sends for the refused push */
    json_t *j = json_loads(b.data, 0, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(j, "type")), "error");
    cr_assert_str_eq(
        json_string_value(json_object_get(json_object_get(j, "error"), "type")), "rate_limit_error");
    json_decref(j);
    buf_free(&b);
    atomic_store(&go, 1);
    queue_free(q);
    job_unref(r);
    job_unref(w);
    job_unref(x);
}
