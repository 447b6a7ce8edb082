/* err — the one error value every fallible function fills.
 *
 * Contract: a function that can fail returns int (0 = ok, nonzero = failed) and, on failure, fills
 * the caller's struct err (code + human message naming what was wrong). The api layer maps codes to
 * HTTP statuses. Library code never exits or aborts on bad input. */
#ifndef LMS_BASE_ERR_H
#define LMS_BASE_ERR_H

#include <stdarg.h>

enum err_code {
    ERR_OK = 0,
    ERR_INVALID,     /* bad input: request field, flag, schema, grammar  -> 400 */
    ERR_FORMAT,      /* malformed file (GGUF, safetensors, sidecar)        -> 500 at load */
    ERR_IO,          /* open/read/write/mmap failed */
    ERR_NOMEM,       /* allocation failed */
    ERR_RANGE,       /* value out of range / overflow */
    ERR_UNSUPPORTED, /* valid but not implemented here (client can change) -> 400 */
    ERR_NOT_FOUND,   /* -> 404 */
    ERR_TOO_LARGE,   /* -> 413 */
    ERR_BUSY,        /* queue full                                          -> 429 */
    ERR_AUTH,        /* -> 401 */
    ERR_CANCELLED,   /* client went away */
    ERR_CONTEXT,     /* prompt does not fit the context                    -> 400 */
    ERR_INTERNAL,
    ERR_CODE_COUNT
};

#define ERR_MSG_MAX 512

struct err {
    enum err_code code;
    char param[64]; /* offending request parameter, "" when none */
    char msg[ERR_MSG_MAX];
};

/* Fills e (if non-NULL) and returns -1, so callers can write `return err_set(e, ...)`. */
int err_set(struct err *e, enum err_code code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Same, naming the offending request parameter. */
int err_set_param(struct err *e, enum err_code code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Prepends "prefix: " to an already-set message (adds context on the way up). */
int err_wrap(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void err_clear(struct err *e);
const char *err_code_name(enum err_code code);

#endif
