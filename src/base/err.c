#include "base/err.h"

#include <stdio.h>
#include <string.h>

int err_set(struct err *e, enum err_code code, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    e->code = code;
    e->param[0] = 0;
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_set_param(struct err *e, enum err_code code, const char *param, const char *fmt, ...)
{
    if (!e) return -1;
    va_list ap;
    va_start(ap, fmt);
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int err_wrap(struct err *e, const char *fmt, ...)
{
    if (!e) return -1;
    char prefix[256], old[ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t n = strlen(prefix);
    if (n > sizeof e->msg - 3) n = sizeof e->msg - 3;
    memcpy(e->msg, prefix, n);
    memcpy(e->msg + n, ": ", 2);
    size_t room = sizeof e->msg - n - 3, ol = strlen(old);
    if (ol > room) ol = room;
    memcpy(e->msg + n + 2, old, ol);
    e->msg[n + 2 + ol] = 0;
    return -1;
}

void err_clear(struct err *e)
{
    if (!e) return;
    e->code = ERR_OK;
    e->param[0] = 0;
    e->msg[0] = 0;
}

const char *err_code_name(enum err_code code)
{
    static const char *const names[ERR_CODE_COUNT] = {
        [ERR_OK] = "ok",           [ERR_INVALID] = "invalid",     [ERR_FORMAT] = "format",
        [ERR_IO] = "io",           [ERR_NOMEM] = "nomem",         [ERR_RANGE] = "range",
        [ERR_UNSUPPORTED] = "unsupported", [ERR_NOT_FOUND] = "not_found",
        [ERR_TOO_LARGE] = "too_large", [ERR_BUSY] = "busy",       [ERR_AUTH] = "auth",
        [ERR_CANCELLED] = "cancelled", [ERR_CONTEXT] = "context", [ERR_INTERNAL] = "internal",
    };
    return (code >= 0 && code < ERR_CODE_COUNT && names[code]) ? names[code] : "unknown";
}
