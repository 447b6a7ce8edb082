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
#include "serve/queue.h"
#include "serve/request.h"

struct backend_caps {
    bool think;       /* <think> reasoning (R-THINK-1) */
    bool tools;       /* a tool convention (hermes) */
    bool grammar;     /* token-level constraints */
    bool stop;        /* stop strings */
    bool system_role;
};

struct backend;
struct backend_ops {
    int (*validate)(struct backend *b, struct request *req, struct err *e);
    int (*generate)(struct backend *b, struct job *job, struct err *e);
    void (*free)(struct backend *b);
};

struct backend {
    const struct backend_ops *ops;
    struct backend_caps caps;
    char model_id[128];
    int n_ctx;
    int max_tokens_cap;                 /* --max-tokens */
    struct sampler_params defaults;       /* R-MAP-2, reasoning off */
    struct sampler_params defaults_think; /* reasoning on */
};

/* The queue's run function: generate + error reporting + timing (arg = struct backend *). */
void backend_run_job(void *arg, struct job *job);

#endif
