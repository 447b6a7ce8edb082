/* jsonschema_json — JSON documents jansson refuses as they are (issue 19): integers beyond 64
 * bits (a `maximum` of 18446744073709551615 is common for uint64 fields) and, for tools that read
 * test instances, NUL characters in object keys.
 *
 * jansson stores integers as long long and fails the whole document on a larger one; its
 * JSON_DECODE_INT_AS_REAL would round 2^64 - 1 to 2^64, which is not exact. So the text is
 * rewritten before parsing: each such integer becomes the string "\u0000\u0001<digits>" (a
 * "big-integer marker"), which num_to_dec (jsonschema.c) reads back exactly. The rewrite is
 * done only when the text holds no `\u0000\u0001` of its own, so a marker can only come from
 * here. jsonschema_json_unmark turns markers in a serialization back into the numbers. NUL in
 * keys (JSONSCHEMA_LOAD_NUL_KEYS): `\u0000` inside a key becomes `\u0001\u0002`, unmarked back
 * the same way (the compiler itself refuses NUL in keys: it does not use this flag). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/jsonschema_json.h"

static const char BIG[] = "\\u0000\\u0001", NULK[] = "\\u0001\\u0002", NUL[] = "\\u0000";

static bool is_num_start(char c)
{
    return c == '-' || (c >= '0' && c <= '9');
}

/* an integer token (no fraction, no exponent) that does not fit in a long long */
static bool too_big(const char *t, size_t n)
{
    size_t i = t[0] == '-';
    size_t digits = n - i;
    if (digits < 19) return false;
    if (digits > 19) return true;
    return strncmp(t + i, i ? "9223372036854775808" : "9223372036854775807", 19) > 0;
}

static int rewrite(const char *s, size_t n, bool nul_keys, struct buf *o, bool *changed)
{
    *changed = false;
    for (size_t i = 0; i < n;) {
        if (s[i] == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"')
                j += s[j] == '\\' ? 2 : 1;
            if (j >= n) return 0; /* unterminated: jansson reports it */
            size_t k = j + 1;
            while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r'))
                k++;
            bool key = k < n && s[k] == ':';
            if (key && nul_keys) {
                for (size_t p = i; p <= j;) {
                    if (s[p] == '\\' && p + 6 <= j && !memcmp(s + p, NUL, 6)) {
                        buf_puts(o, NULK);
                        *changed = true;
                        p += 6;
                    } else if (s[p] == '\\') {
                        buf_append(o, s + p, 2);
                        p += 2;
                    } else
                        buf_append(o, s + p++, 1);
                }
            } else
                buf_append(o, s + i, j + 1 - i);
            i = j + 1;
        } else if (is_num_start(s[i])) {
            size_t j = i + 1;
            while (j < n && (s[j] >= '0' && s[j] <= '9'))
                j++;
            bool integer = j >= n || (s[j] != '.' && s[j] != 'e' && s[j] != 'E');
            if (integer && too_big(s + i, j - i)) {
                buf_printf(o, "\"%s%.*s\"", BIG, (int)(j - i), s + i);
                *changed = true;
                i = j;
            } else {
                buf_append(o, s + i, j - i);
                i = j;
            }
        } else
            buf_append(o, s + i++, 1);
    }
    return 0;
}

static bool contains(const char *s, size_t n, const char *needle)
{
    size_t m = strlen(needle);
    for (size_t i = 0; i + m <= n; i++)
        if (s[i] == needle[0] && !memcmp(s + i, needle, m)) return true;
    return false;
}

json_t *jsonschema_json_loadb(const char *text, size_t len, size_t flags, unsigned opts,
                              bool *marked, json_error_t *je)
{
    if (marked) *marked = false;
    json_t *j = json_loadb(text, len, flags, je);
    if (j) return j;
    bool big = !strncmp(je->text, "too big", 7);
    bool nulk = (opts & JSONSCHEMA_LOAD_NUL_KEYS) && strstr(je->text, "NUL byte in object key");
    if (!big && !nulk) return NULL;
    if (contains(text, len, BIG) || ((opts & JSONSCHEMA_LOAD_NUL_KEYS) && contains(text, len, NULK)))
        return NULL; /* a marker would be ambiguous: keep jansson's error */
    struct buf o = {0};
    bool changed;
    json_error_t je2;
    if (rewrite(text, len, opts & JSONSCHEMA_LOAD_NUL_KEYS, &o, &changed) || !changed ||
        buf_puts(&o, "")) {
        buf_free(&o);
        return NULL;
    }
    j = json_loadb(o.data, o.len, flags, &je2);
    buf_free(&o);
    if (!j) *je = je2;
    if (j && marked) *marked = true;
    return j;
}

json_t *jsonschema_json_load_file(const char *path, size_t flags, unsigned opts, bool *marked,
                                  json_error_t *je)
{
    if (marked) *marked = false;
    json_t *j = json_load_file(path, flags, je);
    if (j || (strncmp(je->text, "too big", 7) && !strstr(je->text, "NUL byte in object key")))
        return j;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    struct buf b = {0};
    char chunk[65536];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0)
        buf_append(&b, chunk, r);
    fclose(f);
    j = b.data ? jsonschema_json_loadb(b.data, b.len, flags, opts, marked, je) : NULL;
    buf_free(&b);
    return j;
}

const char *jsonschema_bigint(const json_t *v)
{
    if (!json_is_string(v)) return NULL;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n < 4 || s[0] != 0 || s[1] != 1) return NULL;
    return s + 2;
}

int jsonschema_json_unmark(struct buf *text)
{
    struct buf o = {0};
    const char *s = text->data;
    size_t n = text->len, bl = strlen(BIG), nl = strlen(NULK);
    bool any = false;
    for (size_t i = 0; i < n;) {
        if (s[i] == '"' && i + 1 + bl <= n && !memcmp(s + i + 1, BIG, bl)) {
            size_t j = i + 1 + bl;
            while (j < n && s[j] != '"')
                j++;
            buf_append(&o, s + i + 1 + bl, j - (i + 1 + bl));
            i = j + 1;
            any = true;
        } else if (s[i] == '\\' && i + nl <= n && !memcmp(s + i, NULK, nl)) {
            buf_puts(&o, NUL);
            i += nl;
            any = true;
        } else if (s[i] == '\\' && i + 1 < n) {
            buf_append(&o, s + i, 2);
            i += 2;
        } else
            buf_append(&o, s + i++, 1);
    }
    if (!any) {
        buf_free(&o);
        return 0;
    }
    if (buf_puts(&o, "")) {
        buf_free(&o);
        return -1;
    }
    buf_free(text);
    *text = o;
    return 0;
}
