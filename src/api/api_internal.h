/* api internals shared by the three dialect decoders/encoders (not a public interface). */
#ifndef LMS_API_INTERNAL_H
#define LMS_API_INTERNAL_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>

#include "api/api.h"

/* Field readers: 1 = present (out set), 0 = absent or null, -1 = wrong type / out of range (e set,
 * naming `param`). */
int jv_num(json_t *o, const char *key, const char *param, double lo, double hi, double *out,
           struct err *e);
int jv_int(json_t *o, const char *key, const char *param, long long lo, long long hi,
           long long *out, struct err *e);
int jv_bool(json_t *o, const char *key, const char *param, bool *out, struct err *e);
int jv_str(json_t *o, const char *key, const char *param, const char **out, struct err *e);
/* Rejects a present, non-null, non-empty field with code (400 / 501), naming it. */
int jv_reject(json_t *o, const char *key, enum err_code code, const char *why, struct err *e);

/* Sampling fields as given (NAN / -1 = absent), finalized by api_finalize. */
struct samp_in {
    double temperature, top_p, min_p, repeat_penalty, presence, frequency;
    long long top_k, seed;
    bool has_seed;
};
void samp_in_init(struct samp_in *s);
/* Reads temperature (0..tmax), top_p, top_k, min_p, repeat_penalty, presence/frequency penalty,
 * seed from o (the OpenAI-style names; Anthropic reads its own subset). */
int samp_read(json_t *o, struct samp_in *s, double tmax, bool penalties, struct err *e);
/* Applies defaults (R-MAP-2: the family's, reasoning on or off), clamps max_tokens to the cap,
 * fills id/model/created. */
int api_finalize(const struct api_ctx *ctx, struct request *req, const struct samp_in *s,
                 long long max_tokens, struct err *e);
/* stop: string or array of <= 4 non-empty strings. */
int read_stop(json_t *v, const char *param, struct request *req, struct err *e);
/* reasoning effort string -> on/off; 400 for an unknown value or (require_caps) a family that
 * cannot think. */
int read_effort(const struct api_ctx *ctx, const char *effort, const char *param, bool require_caps,
                struct request *req, struct err *e);
/* Text of a content value: a string, or an array of text parts whose type is one of ok_types
 * (NULL-terminated); other part types are rejected naming param[i].type. Returns malloc'd text. */
char *content_text(json_t *content, const char *param, const char *const *ok_types,
                   struct err *e);
/* Turns an OpenAI function tool {type,function:{name,description,parameters}} list in place. */
int tools_add(struct request *req, json_t *tool_obj);
/* Adds a flat tool definition t {name (a string), description?, <schema_key>?} (the Messages and
 * Responses shape) as an OpenAI function tool. -1 on OOM. */
int tools_add_flat(struct request *req, json_t *t, const char *schema_key);

/* response_format / text.format (fmt may be NULL) and the regex / lark extensions: fill
 * req->constraint, or 501 while the backend has no grammar support. */
int read_constraint(const struct api_ctx *ctx, json_t *fmt, const char *param, struct request *req,
                    struct err *e);
int read_grammar_ext(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);

int parse_chat(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);
int parse_responses(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);
int parse_messages(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);

/* The encoder state shared by the three dialects (one per job, owned by the job's sink). */
struct enc_choice {
    struct buf text, reasoning;
    enum finish_reason why;
    char *stop_seq;
    json_t *logprobs; /* chat (non-stream) / responses (current message): content logprob
                         entries; NULL = none yet */
    json_t *calls;    /* tool calls (R-TOOL-2): [{id, name, arguments}] in order; NULL = none */
    bool finished, role_sent;
};

struct enc {
    struct job *job; /* borrowed: the job owns the encoder */
    bool started;    /* head + preamble written: errors are in-band from now on */
    bool ended;
    int n_choices;
    struct enc_choice ch[REQ_MAX_N];
    struct buf frame; /* scratch for one SSE frame */
    long seq;         /* responses: sequence_number */
    int out_index;    /* responses: next output index; messages: next block index */
    bool rs_open, msg_open, think_open, text_open, had_text_block, had_rs;
    int rs_index, msg_index;
    char rs_id[48], msg_id[48];
    json_t *pend_lp;  /* responses stream: delta-shaped logprob entries of tokens that produced no
                         text yet (ride on the next text delta); NULL = none */
    json_t *items;    /* responses: output items closed before the end (a message cut by a tool
                         call, function_call items), in order; NULL = none */
};

/* Allocates an encoder for job (choices from req.n, none finished); each dialect's install
 * function then sets job->sink's hooks. */
struct enc *enc_new(struct job *job);
void enc_free(void *ctx);
/* Writes f (steals) as SSE: "event: <ev>\n" (if ev) + "data: <json>\n\n". -1 if cancelled. */
int enc_sse(struct enc *en, const char *ev, json_t *f);
/* Writes raw bytes to the pipe; -1 if cancelled or the pipe ended. */
int enc_write(struct enc *en, const char *s, size_t n);
/* A failure before anything was sent: plain JSON error with the real status. */
void enc_fail_plain(struct enc *en, const struct err *e);
/* The error handling every dialect shares: nothing after the end, a plain JSON error while
 * nothing was sent or the reply is not streamed. Returns true if e was dealt with here, false if
 * it must go in-band on the stream. */
bool enc_fail_early(struct enc *en, const struct err *e);
/* A sink's error hook for dialects whose in-band error is one SSE frame: enc_fail_early, else
 * "event: <ev>\n" (if ev) + "data: <the dialect's error body>\n\n" as the pipe fails. */
void enc_fail_sse(struct enc *en, const char *ev, const struct err *e);
/* A non-streamed reply: head 200 application/json, then body (steals). -1 if cancelled. */
int enc_json_reply(struct enc *en, json_t *body);
/* Records a tool call on choice c: {id: <id_prefix>…, name, arguments, text_at: the choice's text
 * bytes so far}; returns it (borrowed,
 * owned by ch->calls) or NULL on OOM / invalid UTF-8. */
json_t *enc_add_call(struct enc *en, int c, const char *id_prefix, const char *name,
                     const char *args, size_t n_args);
/* Logprob entry for one token: {token, logprob, bytes?, top_logprobs: [{token, logprob, bytes?}]}
 * (bytes: the token's raw bytes, when with_bytes; Responses' text delta/done events carry none).
 * NULL on OOM. */
json_t *enc_logprob_entry(struct enc *en, const struct token_logprob *lp, bool with_bytes);
const char *finish_reason_chat(enum finish_reason why);

/* Encoder installation per dialect. */
int enc_chat_install(struct job *job);
int enc_responses_install(struct job *job);
int enc_messages_install(struct job *job);

/* Dumps j compactly (steals the reference) and appends it to out. */
void json_append(struct buf *out, json_t *j);
/* A JSON string of n bytes; invalid UTF-8 bytes become U+FFFD. */
json_t *json_text(const char *s, size_t n);
/* Random id with a prefix ("chatcmpl-", "resp_", "msg_"…). */
char *make_id(const char *prefix);

#endif
