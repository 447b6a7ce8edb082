/* api encoders: event sequences -> exact wire shapes (R-STREAM-1..3, R-ERR-1). */
#include <criterion/criterion.h>
#include <string.h>

#include "api/api.h"

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
    /* role on the first chunk, content deltas, finish chunk, usage chunk, [DONE] */
    cr_assert(strstr(s, "\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"}"), "%s", s);
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
