/* api JSON output: the one serializer of every reply body and SSE frame.
 *
 * Why not json_dumps: jansson prints reals with %.17g, so a client's temperature 0.7 echoes as
 * 0.69999999999999996. Here a real is printed with the fewest digits that read back as the same
 * double (the ECMAScript / Python repr rule), and values that started as floats (sampler
 * parameters, logprobs) are first rounded to the shortest decimal that reads back as the same
 * float. Everything else matches jansson's compact output: insertion order, "," and ":" without
 * spaces, non-ASCII raw, '/' unescaped, control characters as \b \f \n \r \t or \u00XX. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"

/* Shortest %.Ng (N = 1..max) that strtod (or strtof, as_float) reads back as x. */
static int shortest(char *b, size_t cap, double x, bool as_float)
{
    int n = 0;
    for (int p = 1; p <= 17; p++) {
        n = snprintf(b, cap, "%.*g", p, x);
        if (as_float ? strtof(b, NULL) == (float)x : strtod(b, NULL) == x) break;
    }
    return n;
}

json_t *api_json_float(float f)
{
    if (!isfinite(f)) return json_null();
    char b[40];
    shortest(b, sizeof b, (double)f, true);
    return json_real(strtod(b, NULL));
}

static void put_real(struct buf *out, double x)
{
    char b[48];
    shortest(b, sizeof b, x, false);
    /* jansson's spelling: a real always has '.' or an exponent; "e+05" is written "e5" */
    char *ep = strchr(b, 'e');
    if (ep) {
        char *d = ep + 1, *s = d;
        if (*s == '+') s++;
        else if (*s == '-') *d++ = *s++;
        while (*s == '0' && s[1]) s++;
        memmove(d, s, strlen(s) + 1);
    } else if (!strchr(b, '.') && !strstr(b, "inf") && !strstr(b, "nan")) {
        strcat(b, ".0");
    }
    buf_puts(out, b);
}

static void put_string(struct buf *out, const char *s, size_t n)
{
    buf_puts(out, "\"");
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04X", c);
                esc = u;
            }
        }
        if (!esc) continue;
        buf_append(out, s + run, i - run);
        buf_puts(out, esc);
        run = i + 1;
    }
    buf_append(out, s + run, n - run);
    buf_puts(out, "\"");
}

static void dump(struct buf *out, json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        buf_puts(out, "{");
        const char *k;
        json_t *v;
        bool first = true;
        json_object_foreach(j, k, v)
        {
            if (!first) buf_puts(out, ",");
            first = false;
            put_string(out, k, strlen(k));
            buf_puts(out, ":");
            dump(out, v);
        }
        buf_puts(out, "}");
        break;
    }
    case JSON_ARRAY: {
        buf_puts(out, "[");
        for (size_t i = 0; i < json_array_size(j); i++) {
            if (i) buf_puts(out, ",");
            dump(out, json_array_get(j, i));
        }
        buf_puts(out, "]");
        break;
    }
    case JSON_STRING:
        put_string(out, json_string_value(j), json_string_length(j));
        break;
    case JSON_INTEGER:
        buf_printf(out, "%" JSON_INTEGER_FORMAT, json_integer_value(j));
        break;
    case JSON_REAL:
        put_real(out, json_real_value(j));
        break;
    case JSON_TRUE:
        buf_puts(out, "true");
        break;
    case JSON_FALSE:
        buf_puts(out, "false");
        break;
    default:
        buf_puts(out, "null");
    }
}

void api_json_append(struct buf *out, json_t *j)
{
    if (!j) return;
    dump(out, j);
    json_decref(j);
}
