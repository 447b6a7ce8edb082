#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static enum log_level g_level = LOG_INFO; /* set once at startup, read-only afterwards */

void log_set_level(enum log_level lvl) { g_level = lvl; }

void log_msg(enum log_level lvl, const char *fmt, ...)
{
    static const char *const tag[LOG_LEVEL_COUNT] = {"debug", "info", "warn", "error"};
    if (lvl < g_level) return;
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%03ld %-5s ", tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tag[lvl]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && n < (int)sizeof line) vsnprintf(line + n, sizeof line - n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line); /* one fprintf: stdio locks the stream per call */
}
