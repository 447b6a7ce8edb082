/* lmserve-jsonschema — print the lark grammar a JSON Schema compiles to, or (--stats) one JSON line
 * per file with the outcome and the schema → lark time, then a summary line.
 *
 *   lmserve-jsonschema SCHEMA.json            lark text on stdout (error on stderr, exit 1)
 *   lmserve-jsonschema --stats FILE.json...   FILE may be a plain schema or a MaskBench file
 *                                             ({"schema": ..., "tests": [...]})
 *   lmserve-jsonschema --check FILE.json...   MaskBench files: test-only checker. The lark output
 *       is translated to one PCRE2 pattern (each rule a named group called by (?&name)), and each
 *       test instance, serialized compact and with ", " / ": " separators, is matched in full.
 *       This checks the LANGUAGE of the emitted grammar (not the lexer/parser of src/grammar); prints one line
 *       per file with validation errors (valid instance rejected) and invalidation errors
 *       (invalid instance accepted), then a summary. */
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/buf.h"
#include "base/err.h"
#include "grammar/jsonschema.h"
#include "grammar/jsonschema_json.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <math.h>
#include <pcre2.h>

#include "../../tests/schema/lark_pcre.h"

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
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
    /* integers beyond 64 bits, NUL in test instances' keys: jsonschema_json.h */
    bool marked;
    json_t *j = jsonschema_json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL,
                                          JSONSCHEMA_LOAD_NUL_KEYS, &marked, &je);
    if (!j) {
        err_set(e, ERR_INVALID, "%s: %s", path, je.text);
        return NULL;
    }
    json_t *s = json_is_object(j) && json_object_get(j, "tests") ? json_object_get(j, "schema") : j;
    char *t = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
    json_decref(j);
    struct buf b = {0};
    if (!t || buf_puts(&b, t) || (marked && jsonschema_json_unmark(&b))) {
        free(t);
        buf_free(&b);
        err_set(e, ERR_NOMEM, "out of memory");
        return NULL;
    }
    free(t);
    return buf_steal(&b);
}

static void ser_str(struct buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"')
            buf_puts(b, "\\\"");
        else if (ch == '\\')
            buf_puts(b, "\\\\");
        else if (ch == '\n')
            buf_puts(b, "\\n");
        else if (ch == '\r')
            buf_puts(b, "\\r");
        else if (ch == '\t')
            buf_puts(b, "\\t");
        else if (ch == '\b')
            buf_puts(b, "\\b");
        else if (ch == '\f')
            buf_puts(b, "\\f");
        else if (ch < 0x20)
            buf_printf(b, "\\u%04x", ch);
        else
            buf_append(b, &s[i], 1);
    }
    buf_puts(b, "\"");
}

/* Python json.dumps style: indent 0 compact (",", ":"), -1 the default separators (", ", ": "),
 * > 0 indented (", " and ": " with newlines) */
static void ser(struct buf *b, json_t *v, int indent, int depth)
{
    switch (json_typeof(v)) {
    case JSON_NULL:
        buf_puts(b, "null");
        break;
    case JSON_TRUE:
        buf_puts(b, "true");
        break;
    case JSON_FALSE:
        buf_puts(b, "false");
        break;
    case JSON_INTEGER:
        buf_printf(b, "%lld", (long long)json_integer_value(v));
        break;
    case JSON_REAL: {
        double x = json_real_value(v);
        char t[64];
        int p = 1;
        for (; p <= 17; p++) { /* shortest round-trip digits, then Python's repr layout */
            snprintf(t, sizeof t, "%.*e", p - 1, x);
            if (strtod(t, NULL) == x) break;
        }
        int ex = atoi(strchr(t, 'e') + 1);
        if (ex >= -4 && ex < 16) {
            int dec = p - 1 - ex;
            snprintf(t, sizeof t, "%.*f", dec > 0 ? dec : 0, x);
            if (!strchr(t, '.')) strcat(t, ".0");
        } else {
            char m[40];
            snprintf(m, sizeof m, "%.*e", p - 1, x);
            *strchr(m, 'e') = 0;
            snprintf(t, sizeof t, "%se%c%02d", m, ex < 0 ? '-' : '+', ex < 0 ? -ex : ex);
        }
        buf_puts(b, t);
        break;
    }
    case JSON_STRING:
        ser_str(b, json_string_value(v), json_string_length(v));
        break;
    case JSON_ARRAY: {
        if (!json_array_size(v)) {
            buf_puts(b, "[]");
            break;
        }
        buf_puts(b, "[");
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x)
        {
            if (i) buf_puts(b, indent < 0 ? ", " : ",");
            if (indent > 0) buf_printf(b, "\n%*s", (depth + 1) * indent, "");
            ser(b, x, indent, depth + 1);
        }
        if (indent > 0) buf_printf(b, "\n%*s", depth * indent, "");
        buf_puts(b, "]");
        break;
    }
    case JSON_OBJECT: {
        if (!json_object_size(v)) {
            buf_puts(b, "{}");
            break;
        }
        buf_puts(b, "{");
        int i = 0;
        void *it = json_object_iter(v);
        while (it) {
            if (i++) buf_puts(b, indent < 0 ? ", " : ",");
            if (indent > 0) buf_printf(b, "\n%*s", (depth + 1) * indent, "");
            ser_str(b, json_object_iter_key(it), json_object_iter_key_len(it));
            buf_puts(b, indent ? ": " : ":");
            ser(b, json_object_iter_value(it), indent, depth + 1);
            it = json_object_iter_next(v, it);
        }
        if (indent > 0) buf_printf(b, "\n%*s", depth * indent, "");
        buf_puts(b, "}");
        break;
    }
    }
}

static int check_main(int argc, char **argv, int first)
{
    int files = 0, compiled = 0, vt = 0, it = 0, ve = 0, ie = 0, pcre_fail = 0;
    for (int i = first; i < argc; i++) {
        json_error_t je;
        bool marked;
        json_t *j = jsonschema_json_load_file(argv[i], JSON_DECODE_ANY | JSON_ALLOW_NUL,
                                              JSONSCHEMA_LOAD_NUL_KEYS, &marked, &je);
        if (!j) continue;
        files++;
        char *t = schema_text(argv[i], &(struct err){0});
        struct buf lark = {0}, rx = {0};
        struct err e = {0};
        int r = t ? jsonschema_to_lark(t, strlen(t), "", &lark, &e) : -1;
        free(t);
        if (r) {
            json_decref(j);
            buf_free(&lark);
            continue;
        }
        compiled++;
        lark_pcre(lark.data, &rx);
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)rx.data, rx.len,
                          PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            printf("{\"file\":\"%s\",\"pcre_error\":\"%s at %zu\"}\n", argv[i], msg, (size_t)eo);
            pcre_fail++;
            json_decref(j);
            buf_free(&lark);
            buf_free(&rx);
            continue;
        }
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        size_t k;
        json_t *tc;
        int fve = 0, fie = 0;
        json_array_foreach(json_object_get(j, "tests"), k, tc)
        {
            bool valid = json_is_true(json_object_get(tc, "valid"));
            for (int ind = 0; ind >= -1; ind--) { /* compact, then ", " / ": " (tidy JSON) */
                struct buf inst = {0};
                ser(&inst, json_object_get(tc, "data"), ind, 0);
                if (buf_puts(&inst, "") || (marked && jsonschema_json_unmark(&inst))) {
                    buf_free(&inst);
                    continue;
                }
                int m = pcre2_match(re, (PCRE2_SPTR)inst.data, inst.len, 0, 0, md, NULL);
                if (valid)
                    vt++;
                else
                    it++;
                if (m < 0 && m != PCRE2_ERROR_NOMATCH) {
                    printf("{\"file\":\"%s\",\"test\":%zu,\"pcre_match_error\":%d}\n", argv[i], k,
                           m);
                } else if ((valid && m < 0) || (!valid && m >= 0)) {
                    if (valid)
                        fve++;
                    else
                        fie++;
                    size_t cut = inst.len < 200 ? inst.len : 200;
                    while (cut < inst.len && (inst.data[cut] & 0xC0) == 0x80)
                        cut--;
                    json_t *line =
                        json_pack("{s:s, s:i, s:b, s:i, s:s%}", "file", argv[i], "test", (int)k,
                                  valid ? "validation_error" : "invalidation_error", 1, "indent",
                                  ind, "instance", inst.data, cut);
                    char *ls = line ? json_dumps(line, JSON_COMPACT) : NULL;
                    if (ls) puts(ls);
                    free(ls);
                    json_decref(line);
                }
                buf_free(&inst);
            }
        }
        ve += fve;
        ie += fie;
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        json_decref(j);
        buf_free(&lark);
        buf_free(&rx);
    }
    printf("{\"summary\":true,\"files\":%d,\"compiled\":%d,\"pcre_fail\":%d,\"valid_tested\":%d,"
           "\"invalid_tested\":%d,\"validation_errors\":%d,\"invalidation_errors\":%d}\n",
           files, compiled, pcre_fail, vt, it, ve, ie);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "--check")) return check_main(argc, argv, 2);
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
