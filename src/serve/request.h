/* request — the normalized request every dialect decodes into, and the reply-side types
 * (finish reasons, usage, the reply sink the dialect encoders implement).
 *
 * Ownership: a request owns everything it points to (request_free releases it). It is built on a
 * connection thread, then read (and its `tokens` filled by the backend's validate) before it is
 * queued; after queue_push only the worker touches it. */
#ifndef LMS_SERVE_REQUEST_H
#define LMS_SERVE_REQUEST_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "engine/text/chat.h"
#include "engine/sample/sampler.h"

enum dialect { DIALECT_CHAT, DIALECT_RESPONSES, DIALECT_MESSAGES, DIALECT_COMPLETIONS,
               DIALECT_EMBEDDINGS, DIALECT_COUNT };

#define REQ_MAX_STOP 4
#define REQ_MAX_N 8
#define REQ_MAX_CHOICES 64 /* choices of one reply: completions' prompts x n */
#define REQ_MAX_TOP_LOGPROBS 20

enum constraint_kind { CONSTRAINT_NONE, CONSTRAINT_JSON_OBJECT, CONSTRAINT_JSON_SCHEMA,
                       CONSTRAINT_REGEX, CONSTRAINT_LARK, CONSTRAINT_GBNF, CONSTRAINT_KIND_COUNT };

struct grammar;

#define REQ_MAX_LOGIT_BIAS 1024 /* entries of logit_bias (OpenAI allows 300) */
struct logit_bias {
    int32_t token;
    float bias; /* -100..100 */
};

struct request {
    enum dialect dialect;
    bool stream;
    bool include_usage;      /* chat stream_options.include_usage */

    struct chat_msg *msgs;   /* conversation incl. system */
    int n_msgs, cap_msgs;
    json_t *tools;           /* OpenAI-shaped function tools (owned ref) or NULL */

    /* sampling: every field already defaulted (R-MAP-2) and range-checked */
    struct sampler_params sp;
    bool seed_given;
    int max_tokens;          /* >= 1, clamped to the server cap */
    int n;                   /* choices, 1..REQ_MAX_N (chat only) */
    bool logprobs;
    int top_logprobs;
    char *stop[REQ_MAX_STOP];
    int n_stop;
    bool reasoning;          /* R-THINK-1 */
    bool prefill;            /* the conversation ends with an assistant message: continued */
    struct logit_bias *bias; /* OpenAI logit_bias, added to the logits before sampling; the
                                backend's validate checks the ids against its vocabulary */
    int n_bias;

    enum constraint_kind constraint;
    char *constraint_src;    /* grammar source (schema JSON, regex, lark); NULL for NONE */
    char constraint_param[32]; /* the request field it came from, for error messages */
    struct grammar *grammar; /* compiled by the backend's validate (one reference) or NULL */

    /* filled by the backend's validate on the connection thread */
    int32_t *tokens;
    size_t n_tokens, cap_tokens;
    size_t n_head;           /* tokens before the generation prompt (KV continuation test) */
    char *prompt_text;       /* rendered prompt (for /apply-template); with raw, the prompt */
    bool raw;                /* /v1/completions: no template; prompt_text (tokenized by validate)
                                or, when prompt_text is NULL, the client's ids in tokens */
    bool echo;               /* completions: the reply starts with the prompt text */

    /* embeddings (DIALECT_EMBEDDINGS): each input as text (tokenized by validate) or ids; the
     * worker fills embd with n_inputs x n_embd floats (mean-pooled, L2-normalized) */
    struct embd_input {
        char *text; /* NULL: ids given */
        int32_t *tokens;
        size_t n_tokens;
    } *inputs;
    int n_inputs;
    float *embd;
    int n_embd;
    bool embd_base64; /* encoding_format "base64": little-endian float32 bytes */
    /* completions with several prompts (n_prompts >= 2; tokens / prompt_text then unused): each
     * as text or ids (validate tokenizes the texts and fills the texts of ids, as for one); the
     * worker runs them in order, prompt p's choices at index p * n + i (choice_base = p * n) */
    struct embd_input *prompts;
    int n_prompts;
    int choice_base;

    /* echo-back fields */
    char *model;             /* the server's model id (not the client's) */
    char *id;                /* chatcmpl-…, resp_…, msg_… */
    int64_t created;         /* unix seconds */
    json_t *metadata;        /* responses: echoed back; NULL when absent */
    char *instructions;      /* responses: echoed back; NULL when absent */
};

void request_init(struct request *r);
void request_free(struct request *r);
/* Appends a zeroed message with role; returns it or NULL on OOM. */
struct chat_msg *request_add_msg(struct request *r, enum chat_role role);

enum finish_reason { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_TOOL_CALLS,
                     FINISH_CANCELLED, FINISH_ERROR, FINISH_REASON_COUNT };

struct usage {
    int64_t prompt_tokens, completion_tokens, cached_tokens, reasoning_tokens;
};

/* One token's logprob record for a text delta (chat logprobs). */
struct token_logprob {
    int32_t token;
    float logprob;
    int n_top;
    int32_t top_token[REQ_MAX_TOP_LOGPROBS];
    float top_logprob[REQ_MAX_TOP_LOGPROBS];
};

/* The reply events the worker produces (through the emitter) and the dialect encoders consume.
 * Called on the worker thread only. Every function returns 0, or -1 when the output side is gone
 * (client cancelled) so generation can stop. Order per choice: text/reasoning deltas, then
 * finish; `start` once before anything else, `done` once after every choice finished. */
struct reply_sink {
    void *ctx;
    int (*start)(void *ctx);
    int (*reasoning)(void *ctx, int choice, const char *s, size_t n);
    int (*text)(void *ctx, int choice, const char *s, size_t n, const struct token_logprob *lp,
                int n_lp);
    int (*finish)(void *ctx, int choice, enum finish_reason why, const char *stop_seq);
    /* A completed tool call (R-TOOL-2; serve/toolcall.h): name (NUL-terminated) and the arguments
     * JSON object text exactly as generated. Between text deltas and finish; NULL = the encoder
     * takes no calls (regions stay text). */
    int (*tool_call)(void *ctx, int choice, const char *name, const char *args, size_t n_args);
    int (*done)(void *ctx, const struct usage *u);
    /* A failure: before start → plain JSON error with its status; after → in-band. */
    void (*error)(void *ctx, const struct err *e);
    /* Token text for logprobs rendering (set by the backend before generation). */
    const char *(*token_text)(void *tctx, int32_t id, size_t *len);
    void *tctx;
};

/* HTTP status of an error code (R-ERR-1). */
int err_http_status(enum err_code c);

#endif
