/* api internals shared by the three dialect decoders/encoders (not a public interface). */
#ifndef LMS_API_INTERNAL_H
#define LMS_API_INTERNAL_H

#include <jansson.h>
#include <math.h>
#include <stdbool.h>

#include "api/api.h"

/* Field readers: 1 = present (out set), 0 = absent or null, -1 = wrong type / out of range (e set,
 * naming `param`). */
int api_jv_num(json_t *o, const char *key, const char *param, double lo, double hi, double *out,
           struct err *e);
int api_jv_int(json_t *o, const char *key, const char *param, long long lo, long long hi,
           long long *out, struct err *e);
int api_jv_bool(json_t *o, const char *key, const char *param, bool *out, struct err *e);
int api_jv_str(json_t *o, const char *key, const char *param, const char **out, struct err *e);
/* Rejects a present, non-null, non-empty field with code (400), naming it. */
int api_jv_reject(json_t *o, const char *key, enum err_code code, const char *why, struct err *e);

/* Reads the sampling fields of the dialect from root (one pass, straight into req->sp, defaults
 * R-MAP-2 per req->reasoning, so called last), clamps max_tokens to the cap, fills
 * id/model/created and checks what the family cannot take. */
int api_finalize(const struct api_ctx *ctx, json_t *root, struct request *req,
                 long long max_tokens, struct err *e);
/* stop: string or array of <= 4 non-empty strings. */
int api_read_stop(json_t *v, const char *param, struct request *req, struct err *e);
/* reasoning effort string -> on/off; 400 for an unknown value or (require_caps) a family that
 * cannot think. */
int api_read_effort(const struct api_ctx *ctx, const char *effort, const char *param, bool require_caps,
                struct request *req, struct err *e);
/* Text of a content value: a string, or an array of text parts whose type is one of ok_types
 * (NULL-terminated); other part types are rejected naming param[i].type. Returns malloc'd text. */
char *api_content_text(json_t *content, const char *param, const char *const *ok_types,
                   struct err *e);
/* Turns an OpenAI function tool {type,function:{name,description,parameters}} list in place. */
int api_tools_add(struct request *req, json_t *tool_obj);
/* A JSON Schema given by the client (param names where): an object or a boolean; `false` matches
 * nothing, so a reply (or a tool's arguments) could never satisfy it — a 400 naming param. */
int api_check_schema(const json_t *schema, const char *param, struct err *e);
/* Adds a flat tool definition t {name (a string), description?, <schema_key>?} (the Messages and
 * Responses shape) as an OpenAI function tool. -1 on OOM. */
int api_tools_add_flat(struct request *req, json_t *t, const char *schema_key);

/* response_format / text.format (fmt may be NULL) and the regex / lark extensions: fill
 * req->constraint, or 400 (ERR_UNSUPPORTED) while the backend has no grammar support. */
int api_read_constraint(const struct api_ctx *ctx, json_t *fmt, const char *param, struct request *req,
                    struct err *e);
int api_read_grammar_ext(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);
/* logit_bias {"<token id>": bias in [-100, 100]} (OpenAI's shape) -> req->bias; ids are checked
 * against the vocabulary by the backend's validate. */
int api_read_logit_bias(json_t *root, struct request *req, struct err *e);
/* Reads the dialect's tool_choice from the request body root (api/tool_choice.c) and, when it
 * forces a call (chat/responses: "required", {"type":"function",…name…}; messages:
 * {"type":"any"}, {"type":"tool","name":…}), makes it the request's constraint with the family's
 * forced-call grammar (serve/forced.h). Call after every other constraint field was read. The
 * backend's caps decide: no grammar: 400 unsupported; no tool convention: 400. Returns 0 (forced
 * or not) or -1 with e naming tool_choice. */
int api_read_tool_choice(const struct api_ctx *ctx, enum dialect d, const json_t *root,
                         struct request *req, struct err *e);

int api_parse_chat(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);
int api_parse_responses(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);
int api_parse_messages(const struct api_ctx *ctx, json_t *root, struct request *req, struct err *e);
int api_parse_completions(const struct api_ctx *ctx, json_t *root, struct request *req,
                          struct err *e);
int api_parse_embeddings(const struct api_ctx *ctx, json_t *root, struct request *req,
                         struct err *e);

/* The encoder state shared by the three dialects (one per job, owned by the job's sink). */
struct api_enc_choice {
    struct buf text, reasoning;
    enum finish_reason why;
    char *stop_seq;
    json_t *logprobs; /* chat (non-stream) / responses (current message): content logprob
                         entries; NULL = none yet */
    json_t *calls;    /* tool calls (R-TOOL-2): [{id, name, arguments}] in order; NULL = none */
    bool finished, role_sent;
};

struct api_enc {
    struct job *job; /* borrowed: the job owns the encoder */
    bool started;    /* head + preamble written: errors are in-band from now on */
    bool ended;
    int n_choices;
    struct api_enc_choice ch[REQ_MAX_CHOICES];
    struct buf frame; /* scratch for one SSE frame */
    char fingerprint[24]; /* chat system_fingerprint: api_build_fingerprint */
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

/* Allocates an encoder for job (choices from req.n, none finished); api_sink_install then sets
 * job->sink from the dialect's ops table. */
struct api_enc *api_enc_new(struct job *job);
void api_enc_free(void *ctx);
/* "fp_" + 12 hex digits identifying this build of the server (a hash of the compiler's build
 * stamp): the same in every reply of one binary, different after a rebuild. */
void api_build_fingerprint(char *out, size_t cap);
/* Writes f (steals) as SSE: "event: <ev>\n" (if ev) + "data: <json>\n\n". -1 if cancelled. */
int api_enc_sse(struct api_enc *en, const char *ev, json_t *f);
/* Writes raw bytes to the pipe; -1 if cancelled or the pipe ended. */
int api_enc_write(struct api_enc *en, const char *s, size_t n);
/* A failure before anything was sent: plain JSON error with the real status. */
void api_enc_fail_plain(struct api_enc *en, const struct err *e);
/* The error handling every dialect shares: nothing after the end, a plain JSON error while
 * nothing was sent or the reply is not streamed. Returns true if e was dealt with here, false if
 * it must go in-band on the stream. */
bool api_enc_fail_early(struct api_enc *en, const struct err *e);
/* A sink's error hook for dialects whose in-band error is one SSE frame: enc_fail_early, else
 * "event: <ev>\n" (if ev) + "data: <the dialect's error body>\n\n" as the pipe fails. */
void api_enc_fail_sse(struct api_enc *en, const char *ev, const struct err *e);
/* A non-streamed reply: head 200 application/json, then body (steals). -1 if cancelled. */
int api_enc_json_reply(struct api_enc *en, json_t *body);
/* The reply is complete: the pipe closes, nothing more is written. */
void api_enc_end(struct api_enc *en);
/* The end of an OpenAI stream (chat, completions): with stream_options.include_usage, frame (the
 * dialect's chunk with no choices) carrying usage as one more chunk, then `data: [DONE]`, then
 * api_enc_end. Steals frame and usage (either NULL: out of memory). -1 if cancelled / OOM. */
int api_enc_openai_stream_end(struct api_enc *en, json_t *frame, json_t *usage);
/* Records a tool call on choice c: {id: <id_prefix>…, name, arguments, text_at: the choice's text
 * bytes so far}; returns it (borrowed,
 * owned by ch->calls) or NULL on OOM / invalid UTF-8. */
json_t *api_enc_add_call(struct api_enc *en, int c, const char *id_prefix, const char *name,
                     const char *args, size_t n_args);
/* Logprob entry for one token: {token, logprob, bytes?, top_logprobs: [{token, logprob, bytes?}]}
 * (bytes: the token's raw bytes, when with_bytes; Responses' text delta/done events carry none).
 * NULL on OOM. */
json_t *api_enc_logprob_entry(struct api_enc *en, const struct token_logprob *lp, bool with_bytes);
const char *api_finish_reason_chat(enum finish_reason why);

/* One dialect's reply encoder as a constant ops table (Redis's ConnectionType): the sink hooks,
 * each called with ctx = the job's struct api_enc; api_sink_install copies them into job->sink. */
struct api_encoder {
    struct reply_sink hooks; /* ctx / token_text / tctx left unset */
    bool one_choice;         /* the dialect has no `n`: one choice whatever req.n says */
    void (*init)(struct api_enc *en); /* dialect state of a fresh encoder; NULL = none */
};
extern const struct api_encoder api_enc_chat, api_enc_responses, api_enc_messages,
    api_enc_completions, api_enc_embeddings;

/* Appends j compactly (steals the reference): jansson's compact form, except that reals are
 * written with the fewest digits that read back as the same double (json_out.c). */
void api_json_append(struct buf *out, json_t *j);
/* A real holding the shortest decimal that reads back as f (0.7f -> 0.7, not 0.699999988); null
 * for NaN / infinity. */
json_t *api_json_float(float f);
/* A JSON string of n bytes; invalid UTF-8 bytes become U+FFFD. */
json_t *api_json_text(const char *s, size_t n);
/* Random id with a prefix ("chatcmpl-", "resp_", "msg_"…). */
char *api_make_id(const char *prefix);

#endif
