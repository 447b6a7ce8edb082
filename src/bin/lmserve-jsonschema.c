/* lmserve-jsonschema — print the lark grammar a JSON Schema compiles to, or (--stats) one JSON line
 * per file with the outcome and the schema → lark time, then a summary line.
 *
 *   lmserve-jsonschema SCHEMA.json            lark text on stdout (error on stderr, exit 1)
 *   lmserve-jsonschema --stats FILE.json...   FILE may be a plain schema or a MaskBench file
 *                                             ({"schema": ..., "tests": [...]}) */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "grammar/jsonschema.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* schema text of a file: the "schema" member of a MaskBench file, else the whole file */
static char *schema_text(const char *path, struct err *e)
{
    json_error_t je;
    json_t *j = json_load_file(path, JSON_DECODE_ANY, &je);
    if (!j) {
        err_set(e, ERR_INVALID, "%s: %s", path, je.text);
        return NULL;
    }
    json_t *s = json_is_object(j) && json_object_get(j, "tests") ? json_object_get(j, "schema") : j;
    char *t = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(j);
    if (!t) err_set(e, ERR_NOMEM, "out of memory");
    return t;
}

int main(int argc, char **argv)
{
    bool stats = argc > 1 && !strcmp(argv[1], "--stats");
    int first = stats ? 2 : 1;
    if (argc <= first) {
        fprintf(stderr, "usage: %s [--stats] SCHEMA.json...\n", argv[0]);
        return 2;
    }
    if (!stats) {
        struct err e = {0};
        char *t = schema_text(argv[1], &e);
        struct buf out = {0};
        if (!t || jsonschema_to_lark(t, strlen(t), "", &out, &e)) {
            fprintf(stderr, "error: %s\n", e.msg);
            free(t);
            return 1;
        }
        fwrite(out.data, 1, out.len, stdout);
        buf_free(&out);
        free(t);
        return 0;
    }
    int n = argc - first, ok = 0;
    double *us = calloc((size_t)n, sizeof *us);
    size_t total_bytes = 0;
    for (int i = first; i < argc; i++) {
        struct err e = {0};
        char *t = schema_text(argv[i], &e);
        struct buf out = {0};
        double t0 = now_us();
        int r = t ? jsonschema_to_lark(t, strlen(t), "", &out, &e) : -1;
        double dt = now_us() - t0;
        us[i - first] = dt;
        json_t *line = json_pack("{s:s, s:b, s:s, s:f, s:i}", "file", argv[i], "compiled", r == 0,
                                 "error", r ? e.msg : "", "us", dt, "lark_bytes", (int)out.len);
        char *ls = json_dumps(line, JSON_COMPACT);
        puts(ls);
        free(ls);
        json_decref(line);
        if (!r) ok++;
        total_bytes += out.len;
        buf_free(&out);
        free(t);
    }
    qsort(us, (size_t)n, sizeof *us, cmp_d);
    printf("{\"summary\":true,\"files\":%d,\"compiled\":%d,\"us_p50\":%.1f,\"us_p99\":%.1f,"
           "\"us_max\":%.1f,\"lark_bytes_avg\":%.0f}\n",
           n, ok, us[n / 2], us[(int)(n * 0.99)], us[n - 1], (double)total_bytes / (ok ? ok : 1));
    free(us);
    return 0;
}
