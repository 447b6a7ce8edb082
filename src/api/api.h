/* api — the three wire dialects over one normalized request (R-MAP, R-ERR, R-ANT, R-STREAM).
 *
 * Decoding: JSON body -> struct request, with every limit checked (body size by http, nesting
 * depth, UTF-8, numeric ranges) and everything the backend cannot honor rejected with a status
 * and the offending param (R-MAP-3). Encoding: reply events -> SSE frames or one JSON body, written
 * into the job's pipe (the api never touches a socket). */
#ifndef LMS_API_API_H
#define LMS_API_API_H

#include <stddef.h>

#include "base/buf.h"
#include "base/err.h"
#include "serve/backend.h"
#include "serve/queue.h"
#include "serve/request.h"

#define API_MAX_JSON_DEPTH 64

/* What the decoders need to know about the server. */
struct api_ctx {
    const struct backend *backend; /* caps, model id, defaults, caps on max_tokens */
    bool count_only;               /* count_tokens / apply-template: max_tokens not required */
};

/* Parses body as JSON of the given dialect into req (request_init'ed by the caller).
 * On failure e names the param; its code maps to the status (err_http_status). */
int api_parse(enum dialect d, const struct api_ctx *ctx, const char *body, size_t len,
              struct request *req, struct err *e);

/* Checks the JSON nesting depth of raw text (outside strings) without building a tree. */
int api_check_depth(const char *body, size_t len, int max_depth, struct err *e);

/* Appends the dialect's error body for e (R-ERR-1). */
void api_error_body(enum dialect d, const struct err *e, struct buf *out);
/* The "type" string of an error in the dialect's shape, derived from the HTTP status. */
const char *api_error_type(enum dialect d, int status);

/* Installs the dialect's encoder as job->sink (stream or not per job->req). 0 or -1 (OOM). */
int api_sink_install(struct job *job);

/* POST /tokenize and /detokenize (llama-server's shapes, api/tokenize.c): body -> the JSON reply
 * appended to out; -1 with e (naming the param) on a bad body. Any thread. */
int api_tokenize(struct backend *b, const char *body, size_t len, struct buf *out, struct err *e);
int api_detokenize(struct backend *b, const char *body, size_t len, struct buf *out,
                   struct err *e);

/* count_tokens response body {"input_tokens": n}. */
void api_count_tokens_body(size_t n_tokens, struct buf *out);

#endif
