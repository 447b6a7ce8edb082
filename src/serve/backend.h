/* backend — one model family behind the server (R-FAM-1): validate on a connection thread,
 * generate on the worker.
 *
 * validate(): cheap and thread-safe (the model is only read): renders the prompt with the family's
 * template, tokenizes it into req->tokens / req->prompt_text, checks it fits the context
 * (ERR_CONTEXT otherwise) and rejects what the family cannot honor.
 * generate(): worker thread only; streams the reply through job->sink (the dialect encoder), polls
 * the job's pipe for cancellation once per token, fills job->usage. On failure it returns -1 with
 * e set and has NOT called sink->error (the caller does). */
#ifndef LMS_SERVE_BACKEND_H
#define LMS_SERVE_BACKEND_H

#include <stdbool.h>

#include "base/err.h"
#include "engine/text/family.h"
#include "serve/queue.h"
#include "serve/request.h"

/* What the backend can honor: the family's capabilities (engine/text/family.h) and what this
 * backend built (the grammar index). The api layer rejects the rest (R-MAP-3). */
struct backend_caps {
    bool think;       /* reasoning (R-THINK-1): the family has think markers */
    bool tools;       /* the family has a tool-call convention */
    bool grammar;     /* token-level constraints */
    bool stop;        /* stop strings */
    bool system_role;
    bool gbnf;        /* llama.cpp's `grammar` (GBNF) constraints */
};

struct backend;
struct metrics_kv; /* serve/metrics.h */
struct backend_ops {
    int (*validate)(struct backend *b, struct request *req, struct err *e);
    int (*generate)(struct backend *b, struct job *job, struct err *e);
    void (*free)(struct backend *b);
    /* The tokenizer (any thread: the vocabulary is read-only). Appends the ids of s[0..n) to
     * *out (realloc'd, as tok_encode): parse_special turns control-token text (<|im_end|>) into
     * the token, add_special prepends the family's BOS when it uses one. */
    int (*tokenize)(struct backend *b, const char *s, size_t n, bool add_special,
                    bool parse_special, int32_t **out, size_t *n_out, size_t *cap, struct err *e);
    /* Raw bytes of one token (not NUL-terminated); NULL when id is outside the vocabulary. */
    const char *(*token_bytes)(struct backend *b, int32_t id, size_t *len);
    /* The KV cache's last published state (any thread; GET /metrics). NULL: no KV pool. */
    void (*kv_stats)(struct backend *b, struct metrics_kv *out);
};

struct backend {
    const struct backend_ops *ops;
    struct backend_caps caps;
    const struct family *family; /* the model family's descriptor; NULL for a backend without one */
    char model_id[128];
    bool random_weights; /* the file says its weights are seeded noise (lmserve-mkmodel) */
    int n_ctx;
    int32_t n_vocab;                    /* token ids are 0..n_vocab-1 */
    int max_tokens_cap;                 /* --max-tokens */
    bool reasoning_default;             /* --reasoning: when a request says nothing (R-THINK-1) */
    struct sampler_params defaults;       /* R-MAP-2, reasoning off */
    struct sampler_params defaults_think; /* reasoning on */
    /* bit i: family_tool_marker_texts(family)[i] is one special token of the vocabulary (forced
     * calls write those as special-token terminals; serve/forced.h) */
    unsigned tool_specials;
};

/* The queue's run function: generate + error reporting + timing (arg = struct backend *). */
void backend_run_job(void *arg, struct job *job);

#endif
